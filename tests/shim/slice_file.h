// Test helpers: a software slice's accounting file (gpuslice/shim/slice_region.h) made as the
// interposer makes it, without the interposer, and child processes that hold a slot's OFD lock
// (a live process of the slice) or die holding the region's mutex.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "gpuslice/shim/slice_region.h"

namespace gpuslice::shim::testing {

// The inode of this process's PID namespace, as the interposer records it in a slot.
inline std::uint64_t OwnPidNamespace() {
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_ino);
}

// A slice's accounting file, created and initialised as the interposer's first opener does
// (header, robust process-shared mutex), and mapped here so that a test can fill it in.
class SliceFile {
 public:
  // Creates `path` (replacing it) for slice `id`; check ok() after.
  SliceFile(const std::string& path, const std::string& id) : path_(path) {
    unlink(path.c_str());
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(sizeof(SliceRegion))) != 0) return;
    void* map = mmap(nullptr, sizeof(SliceRegion), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (map == MAP_FAILED) return;
    region_ = static_cast<SliceRegion*>(map);
    pthread_mutexattr_t attributes;
    pthread_mutexattr_init(&attributes);
    pthread_mutexattr_setpshared(&attributes, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attributes, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&region_->lock, &attributes);
    pthread_mutexattr_destroy(&attributes);
    std::snprintf(region_->slice_id, sizeof region_->slice_id, "%s", id.c_str());
    region_->version = kRegionVersion;
    region_->size = sizeof(SliceRegion);
    region_->magic = kRegionMagic;
  }
  SliceFile(const SliceFile&) = delete;
  SliceFile& operator=(const SliceFile&) = delete;
  ~SliceFile() {
    if (region_ != nullptr) munmap(region_, sizeof(SliceRegion));
    if (fd_ >= 0) close(fd_);
  }

  bool ok() const { return region_ != nullptr; }
  const std::string& path() const { return path_; }
  SliceRegion& region() { return *region_; }

  // Occupies slot `index` with a process of this PID namespace using `used_bytes`, and adds them
  // to the slice's total.
  ProcessSlot& AddProcess(int index, int pid, std::uint64_t used_bytes) {
    ProcessSlot& slot = region_->slots[index];
    std::memset(&slot, 0, sizeof slot);
    slot.pid = pid;
    slot.pid_ns = OwnPidNamespace();
    slot.used_bytes = used_bytes;
    slot.peak_bytes = used_bytes;
    region_->used_bytes += used_bytes;
    if (region_->used_bytes > region_->peak_bytes) region_->peak_bytes = region_->used_bytes;
    return slot;
  }

 private:
  std::string path_;
  int fd_ = -1;
  SliceRegion* region_ = nullptr;
};

// A child process that holds the OFD lock of slot `index` of `path` (as a live process of the
// slice does) until it is stopped; killed and reaped when it goes out of scope.
class SlotHolder {
 public:
  SlotHolder(const std::string& path, int index) {
    int ready[2];
    if (pipe(ready) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
      struct flock hold {};
      hold.l_type = F_WRLCK;
      hold.l_whence = SEEK_SET;
      hold.l_start = SlotLockOffset(index);
      hold.l_len = 1;
      const char answer = fd >= 0 && fcntl(fd, F_OFD_SETLK, &hold) == 0 ? 'y' : 'n';
      if (write(ready[1], &answer, 1) != 1) _exit(1);
      while (true) pause();
    }
    close(ready[1]);
    char answer = 0;
    held_ = pid_ > 0 && read(ready[0], &answer, 1) == 1 && answer == 'y';
    close(ready[0]);
  }
  SlotHolder(const SlotHolder&) = delete;
  SlotHolder& operator=(const SlotHolder&) = delete;
  ~SlotHolder() { Stop(); }

  bool held() const { return held_; }
  pid_t pid() const { return pid_; }
  // Kills the child (its lock goes with it) and reaps it.
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  bool held_ = false;
};

// Runs a child that takes the region's mutex of `path` and exits holding it. True when it did.
inline bool DieHoldingTheMutex(const std::string& path) {
  const pid_t child = fork();
  if (child == 0) {
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) _exit(2);
    void* map = mmap(nullptr, sizeof(SliceRegion), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) _exit(3);
    if (pthread_mutex_lock(&static_cast<SliceRegion*>(map)->lock) != 0) _exit(4);
    _exit(0);  // without unlocking
  }
  int status = 0;
  return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

}  // namespace gpuslice::shim::testing
