#include "accounting.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "shared_file.h"

namespace gpuslice::shim {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Field 22 of /proc/self/stat (start time in clock ticks), 0 when unreadable.
std::uint64_t StartTicks() {
  char buffer[1024];
  const int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, buffer, sizeof buffer - 1);
  close(fd);
  if (n <= 0) return 0;
  buffer[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
  const char* p = std::strrchr(buffer, ')');
  if (p == nullptr) return 0;
  int field = 2;
  for (; *p != '\0' && field < 22; ++p) {
    if (*p == ' ') ++field;
  }
  return std::strtoull(p, nullptr, 10);
}

// The first NSpid entry when there are several (the PID further out), else 0.
int OuterPid() {
  FILE* file = std::fopen("/proc/self/status", "re");
  if (file == nullptr) return 0;
  char line[256];
  int outer = 0;
  while (std::fgets(line, sizeof line, file) != nullptr) {
    if (std::strncmp(line, "NSpid:", 6) != 0) continue;
    char* end = nullptr;
    const long first = std::strtol(line + 6, &end, 10);
    const long second = std::strtol(end, nullptr, 10);
    if (second > 0) outer = static_cast<int>(first);
    break;
  }
  std::fclose(file);
  return outer;
}

std::uint64_t PidNamespace() {
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return st.st_ino;
}

unsigned Bucket(std::uint64_t bytes) {
  unsigned bucket = 0;
  while (bytes > 1 && bucket + 1 < static_cast<unsigned>(kSizeHistogramBuckets)) {
    bytes >>= 1;
    ++bucket;
  }
  return bucket;
}

}  // namespace

bool Accounting::Open(const Config& config, std::string* error) {
  if (mkdir(config.shm_dir.c_str(), 01777) == 0) {
    chmod(config.shm_dir.c_str(), 01777);  // past the umask: processes of any user share slices
  } else if (errno != EEXIST) {
    *error = Errno("cannot create the accounting directory " + config.shm_dir);
    return false;
  }
  path_ = config.shm_dir + "/slice-" + config.slice_id;
  // A new slice: this process's settings become the slice's.
  auto init = [](void* map, const void* context) {
    const auto& c = *static_cast<const Config*>(context);
    auto* r = static_cast<SliceRegion*>(map);
    InitRobustMutex(&r->lock);
    std::snprintf(r->slice_id, sizeof r->slice_id, "%s", c.slice_id.c_str());
    const bool measure = c.mode == Mode::kMeasure;
    r->mode = static_cast<std::uint32_t>(measure ? SliceMode::kMeasure : SliceMode::kEnforce);
    r->policy = static_cast<std::uint32_t>(c.policy);
    r->cap_bytes = measure ? 0 : c.cap_bytes;
    r->share_milli = measure ? 0 : static_cast<std::uint32_t>(c.share_milli);
    r->context_reserve_bytes = c.context_reserve_bytes;
    r->created_unix_s = static_cast<std::uint64_t>(std::time(nullptr));
  };
  SharedFile file;
  if (!MapSharedFile(path_, sizeof(SliceRegion), "accounting file", init, &config, &file, error)) {
    return false;
  }
  fd_ = file.fd;
  void* map = file.map;
  auto* region = static_cast<SliceRegion*>(map);
  region_ = region;
  cap_bytes_ = region->cap_bytes;
  share_milli_ = static_cast<int>(region->share_milli);
  policy_ = static_cast<SharePolicy>(region->policy);
  mode_ = static_cast<SliceMode>(region->mode);

  Lock();
  const bool claimed = ClaimSlotLocked();
  Unlock();
  if (!claimed) {
    *error = "slice " + config.slice_id + " already has " + std::to_string(kMaxProcesses) +
             " live processes";
    munmap(map, sizeof(SliceRegion));
    region_ = nullptr;
    close(fd_);
    fd_ = -1;
    return false;
  }
  return true;
}

void Accounting::Lock() {
  const int rc = pthread_mutex_lock(&region_->lock);
  if (rc == EOWNERDEAD) {
    // A process died holding the lock: what it was doing is either done or not started (each
    // update below is a few stores), so the region is usable once the dead are reclaimed.
    pthread_mutex_consistent(&region_->lock);
    ReclaimDeadLocked();
  }
}

void Accounting::Unlock() { pthread_mutex_unlock(&region_->lock); }

bool Accounting::SlotAlive(int index) { return ByteLockedByOthers(fd_, index); }

void Accounting::ReclaimDeadLocked() {
  for (int i = 0; i < kMaxProcesses; ++i) {
    ProcessSlot& slot = region_->slots[i];
    if (slot.pid == 0 || i == slot_ || SlotAlive(i)) continue;
    region_->used_bytes -=
        slot.used_bytes <= region_->used_bytes ? slot.used_bytes : region_->used_bytes;
    region_->reclaimed_processes += 1;
    region_->reclaimed_bytes += slot.used_bytes;
    std::memset(&slot, 0, sizeof slot);
  }
}

bool Accounting::ClaimSlotLocked() {
  ReclaimDeadLocked();
  for (int i = 0; i < kMaxProcesses; ++i) {
    ProcessSlot& slot = region_->slots[i];
    if (slot.pid != 0) continue;
    struct flock hold {};
    hold.l_type = F_WRLCK;
    hold.l_whence = SEEK_SET;
    hold.l_start = SlotLockOffset(i);
    hold.l_len = 1;
    if (fcntl(fd_, F_OFD_SETLK, &hold) != 0) continue;
    std::memset(&slot, 0, sizeof slot);
    slot.pid = getpid();
    slot.host_pid = OuterPid();
    slot.pid_ns = PidNamespace();
    slot.start_ticks = StartTicks();
    region_->processes_joined += 1;
    slot_ = i;
    return true;
  }
  return false;
}

bool Accounting::Reserve(std::uint64_t bytes, bool context) {
  Lock();
  if (cap_bytes_ > 0 && region_->used_bytes + bytes > cap_bytes_) {
    ReclaimDeadLocked();  // dead processes' bytes first
    if (region_->used_bytes + bytes > cap_bytes_) {
      region_->refused += 1;
      region_->slots[slot_].refused += 1;
      Unlock();
      return false;
    }
  }
  ProcessSlot& slot = region_->slots[slot_];
  region_->used_bytes += bytes;
  if (region_->used_bytes > region_->peak_bytes) region_->peak_bytes = region_->used_bytes;
  slot.used_bytes += bytes;
  if (slot.used_bytes > slot.peak_bytes) slot.peak_bytes = slot.used_bytes;
  if (context) slot.context_bytes += bytes;
  Unlock();
  return true;
}

void Accounting::Release(std::uint64_t bytes, bool context) {
  Lock();
  ProcessSlot& slot = region_->slots[slot_];
  if (bytes > slot.used_bytes) bytes = slot.used_bytes;
  slot.used_bytes -= bytes;
  region_->used_bytes -= bytes <= region_->used_bytes ? bytes : region_->used_bytes;
  if (context) slot.context_bytes -= bytes <= slot.context_bytes ? bytes : slot.context_bytes;
  Unlock();
}

void Accounting::Commit(std::uint64_t bytes) {
  Lock();
  region_->allocations += 1;
  region_->slots[slot_].allocations += 1;
  region_->size_histogram[Bucket(bytes)] += 1;
  Unlock();
}

std::uint64_t Accounting::Used() {
  Lock();
  const std::uint64_t used = region_->used_bytes;
  Unlock();
  return used;
}

int Accounting::LiveProcesses() {
  Lock();
  int live = 0;
  for (int i = 0; i < kMaxProcesses; ++i) {
    if (region_->slots[i].pid != 0 && (i == slot_ || SlotAlive(i))) ++live;
  }
  Unlock();
  return live;
}

void Accounting::SetGpuUuid(const char* uuid) {
  Lock();
  if (region_->gpu_uuid[0] == '\0') {
    std::snprintf(region_->gpu_uuid, sizeof region_->gpu_uuid, "%s", uuid);
  }
  Unlock();
}

void Accounting::SetContextBytes(std::uint64_t bytes) {
  Lock();
  region_->context_reserve_bytes = bytes;
  Unlock();
}

void Accounting::GpuUuid(char* out, std::size_t size) {
  Lock();
  std::snprintf(out, size, "%s", region_->gpu_uuid);
  Unlock();
}

void Accounting::RecordKernel(std::uint64_t actual_ns) {
  Lock();
  region_->kernel_ns += actual_ns;
  region_->slots[slot_].kernel_ns += actual_ns;
  Unlock();
}

std::uint64_t Accounting::KernelNs() {
  Lock();
  const std::uint64_t ns = region_->kernel_ns;
  Unlock();
  return ns;
}

void Accounting::NoteLaunch(std::uint64_t now_ns) {
  __atomic_store_n(&region_->last_launch_ns, now_ns, __ATOMIC_RELAXED);
}

void Accounting::RecordThrottled(std::uint64_t ns) {
  Lock();
  region_->throttled_ns += ns;
  region_->slots[slot_].throttled_ns += ns;
  Unlock();
}

void Accounting::AddLaunches(std::uint64_t launches) {
  if (launches == 0) return;
  Lock();
  region_->launches += launches;
  region_->slots[slot_].launches += launches;
  Unlock();
}

void Accounting::Leave() {
  if (region_ == nullptr) return;
  Lock();
  ProcessSlot& slot = region_->slots[slot_];
  region_->used_bytes -=
      slot.used_bytes <= region_->used_bytes ? slot.used_bytes : region_->used_bytes;
  std::memset(&slot, 0, sizeof slot);
  Unlock();
  region_ = nullptr;
  close(fd_);  // drops the slot's OFD lock
  fd_ = -1;
}

void Accounting::ForgetAfterFork() {
  // The child shares the parent's open file description (and so its slot lock, which stays with
  // the parent's copy); it takes a slot of its own if it uses CUDA. The mapping is left mapped.
  if (fd_ >= 0) close(fd_);
  region_ = nullptr;
  fd_ = -1;
  slot_ = -1;
}

}  // namespace gpuslice::shim
