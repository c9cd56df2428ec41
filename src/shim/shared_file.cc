#include "shared_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "gpuslice/shim/slice_region.h"

namespace gpuslice::shim {
namespace {

// The first three fields of SliceRegion and GpuSchedule.
struct Header {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t size;
};

}  // namespace

bool ByteLockedByOthers(int fd, int index) {
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  probe.l_start = SlotLockOffset(index);
  probe.l_len = 1;
  if (fcntl(fd, F_OFD_GETLK, &probe) != 0) return true;
  return probe.l_type != F_UNLCK;
}

void InitRobustMutex(pthread_mutex_t* mutex) {
  pthread_mutexattr_t attributes;
  pthread_mutexattr_init(&attributes);
  pthread_mutexattr_setpshared(&attributes, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attributes, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(mutex, &attributes);
  pthread_mutexattr_destroy(&attributes);
}

bool MapSharedFile(const std::string& path, std::size_t size, const std::string& what,
                   void (*init)(void* map, const void* context), const void* context,
                   SharedFile* out, std::string* error) {
  int fd = -1;
  struct stat st {};
  while (true) {
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
      *error = "cannot open the " + what + " " + path + ": " + std::strerror(errno);
      return false;
    }
    fchmod(fd, 0666);  // past the umask: processes of any user share it
    if (flock(fd, LOCK_EX) != 0) {
      *error = "cannot lock the " + what + " " + path + ": " + std::strerror(errno);
      close(fd);
      return false;
    }
    if (fstat(fd, &st) != 0 || st.st_nlink > 0) break;
    // Removed (gpuslice's RemoveSlice, under this lock) between the open and the lock: the path
    // now names no file or a new one, which the slice's next process would open. Open again.
    flock(fd, LOCK_UN);
    close(fd);
  }
  bool ok = fstat(fd, &st) == 0;
  if (ok && static_cast<std::size_t>(st.st_size) < size) {
    ok = ftruncate(fd, static_cast<off_t>(size)) == 0;
  }
  void* map = ok ? mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (map == MAP_FAILED) {
    *error = "cannot map the " + what + " " + path + ": " + std::strerror(errno);
    flock(fd, LOCK_UN);
    close(fd);
    return false;
  }
  auto* header = static_cast<Header*>(map);
  if (header->magic == 0) {
    init(map, context);
    header->version = kRegionVersion;
    header->size = static_cast<std::uint32_t>(size);
    __atomic_store_n(&header->magic, kRegionMagic, __ATOMIC_RELEASE);
  } else if (header->magic != kRegionMagic || header->version != kRegionVersion ||
             header->size != size) {
    *error = "the " + what + " " + path +
             " has another layout (written by another gpuslice version?); remove it when no "
             "process uses it";
    munmap(map, size);
    flock(fd, LOCK_UN);
    close(fd);
    return false;
  }
  flock(fd, LOCK_UN);
  out->fd = fd;
  out->map = map;
  return true;
}

}  // namespace gpuslice::shim
