#include "schedule.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "shared_file.h"

namespace gpuslice::shim {
namespace {

bool LockByte(int fd, int index, short type, int command) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = SlotLockOffset(index);
  lock.l_len = 1;
  return fcntl(fd, command, &lock) == 0;
}

}  // namespace

bool Schedule::Join(const std::string& directory, const char* gpu_uuid, const char* slice_id,
                    int share_milli, SharePolicy policy, std::string* error) {
  const std::string path = directory + "/gpu-" + gpu_uuid;
  SharedFile file;
  auto init = [](void* map, const void*) {
    InitRobustMutex(&static_cast<GpuSchedule*>(map)->lock);
  };
  if (!MapSharedFile(path, sizeof(GpuSchedule), "GPU's schedule", init, nullptr, &file, error)) {
    return false;
  }
  fd_ = file.fd;
  void* map = file.map;
  auto* schedule = static_cast<GpuSchedule*>(map);
  schedule_ = schedule;

  Lock();
  SweepLocked();
  int mine = -1;
  for (int i = 0; i < kMaxScheduledSlices && mine < 0; ++i) {
    if (std::strncmp(schedule_->entries[i].slice_id, slice_id, kSliceIdSize) == 0) mine = i;
  }
  if (mine < 0) {
    for (int i = 0; i < kMaxScheduledSlices && mine < 0; ++i) {
      if (schedule_->entries[i].slice_id[0] == '\0' && !EntryAlive(i)) mine = i;
    }
    if (mine >= 0) {
      ScheduleEntry& entry = schedule_->entries[mine];
      std::snprintf(entry.slice_id, sizeof entry.slice_id, "%s", slice_id);
      entry.share_milli = static_cast<std::uint32_t>(share_milli);
      entry.policy = static_cast<std::uint32_t>(policy);
      entry.busy_until_ns = 0;
      entry.overrun_until_ns = 0;
      entry.paid_until_ns = 0;
      schedule_->generation += 1;
    }
  }
  const bool locked = mine >= 0 && LockByte(fd_, mine, F_RDLCK, F_OFD_SETLK);
  Unlock();
  if (!locked) {
    *error = mine < 0 ? "the GPU's schedule " + path + " already has " +
                            std::to_string(kMaxScheduledSlices) + " slices"
                      : "cannot lock the slice's entry in " + path + ": " + std::strerror(errno);
    munmap(map, sizeof(GpuSchedule));
    schedule_ = nullptr;
    close(fd_);
    fd_ = -1;
    return false;
  }
  entry_ = mine;
  return true;
}

void Schedule::Lock() {
  if (pthread_mutex_lock(&schedule_->lock) == EOWNERDEAD) {
    pthread_mutex_consistent(&schedule_->lock);
  }
}

void Schedule::Unlock() { pthread_mutex_unlock(&schedule_->lock); }

bool Schedule::EntryAlive(int index) { return ByteLockedByOthers(fd_, index); }

bool Schedule::SweepLocked() {
  bool changed = false;
  for (int i = 0; i < kMaxScheduledSlices; ++i) {
    ScheduleEntry& entry = schedule_->entries[i];
    // This process's own read lock does not show in its own probe: its entry is alive.
    if (entry.slice_id[0] == '\0' || i == entry_ || EntryAlive(i)) continue;
    std::memset(&entry, 0, sizeof entry);
    changed = true;
  }
  if (changed) schedule_->generation += 1;
  return changed;
}

void Schedule::Sweep(std::uint64_t now_ns) {
  {
    std::lock_guard<std::mutex> hold(mutex_);
    if (schedule_ == nullptr || now_ns - swept_ns_ < 1'000'000'000) return;
    swept_ns_ = now_ns;
  }
  Lock();
  SweepLocked();
  Unlock();
}

void Schedule::RefreshLocked() {
  const std::uint64_t generation = __atomic_load_n(&schedule_->generation, __ATOMIC_ACQUIRE);
  if (generation == generation_) return;
  Lock();
  std::uint64_t total = 0, before = 0, share = 0;
  int slices = 0;
  for (int i = 0; i < kMaxScheduledSlices; ++i) {
    const ScheduleEntry& entry = schedule_->entries[i];
    if (entry.slice_id[0] == '\0') continue;
    ++slices;
    if (i < entry_) before += entry.share_milli;
    if (i == entry_) share = entry.share_milli;
    total += entry.share_milli;
  }
  generation_ = schedule_->generation;
  Unlock();
  const std::uint64_t scale = total > 1000 ? total : 1000;
  start_ns_ = before * kSchedulePeriodNs / scale;
  end_ns_ = (before + share) * kSchedulePeriodNs / scale;
  slices_ = slices;
}

void Schedule::Window(std::uint64_t* start_ns, std::uint64_t* end_ns) {
  std::lock_guard<std::mutex> hold(mutex_);
  RefreshLocked();
  *start_ns = start_ns_;
  *end_ns = end_ns_;
}

namespace {

void RaiseTo(std::uint64_t* value, std::uint64_t to) {
  std::uint64_t seen = __atomic_load_n(value, __ATOMIC_RELAXED);
  while (seen < to &&
         !__atomic_compare_exchange_n(value, &seen, to, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

}  // namespace

void Schedule::Publish(const WorkEnds& ends) {
  if (schedule_ == nullptr || entry_ < 0) return;
  ScheduleEntry& entry = schedule_->entries[entry_];
  RaiseTo(&entry.busy_until_ns, ends.busy);
  RaiseTo(&entry.overrun_until_ns, ends.overrun);
  RaiseTo(&entry.paid_until_ns, ends.paid_until);
}

bool Schedule::ClaimPaid(std::uint64_t seen, std::uint64_t until) {
  if (schedule_ == nullptr || entry_ < 0) return true;
  return __atomic_compare_exchange_n(&schedule_->entries[entry_].paid_until_ns, &seen, until, false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

WorkEnds Schedule::Own() const {
  WorkEnds own;
  if (schedule_ == nullptr || entry_ < 0) return own;
  const ScheduleEntry& entry = schedule_->entries[entry_];
  own.busy = __atomic_load_n(&entry.busy_until_ns, __ATOMIC_RELAXED);
  own.overrun = __atomic_load_n(&entry.overrun_until_ns, __ATOMIC_RELAXED);
  own.paid_until = __atomic_load_n(&entry.paid_until_ns, __ATOMIC_RELAXED);
  return own;
}

WorkEnds Schedule::Others() const {
  WorkEnds latest;
  if (schedule_ == nullptr) return latest;
  for (int i = 0; i < kMaxScheduledSlices; ++i) {
    if (i == entry_) continue;
    const ScheduleEntry& entry = schedule_->entries[i];
    if (__atomic_load_n(&entry.slice_id[0], __ATOMIC_RELAXED) == '\0') continue;
    latest.busy = std::max(latest.busy, __atomic_load_n(&entry.busy_until_ns, __ATOMIC_RELAXED));
    latest.overrun =
        std::max(latest.overrun, __atomic_load_n(&entry.overrun_until_ns, __ATOMIC_RELAXED));
  }
  return latest;
}

void Schedule::ForgetAfterFork() {
  new (&mutex_) std::mutex();
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  schedule_ = nullptr;
  entry_ = -1;
  generation_ = ~0ull;
}

}  // namespace gpuslice::shim
