// One process's view of its slice's shared accounting (gpuslice/shim/slice_region.h): it opens or
// creates the slice's file, takes a slot, and counts device memory against the cap.
//
// Contract:
//   * Reserve(bytes) counts `bytes` against the slice before the driver is asked; it answers false
//     (and counts a refusal) when the slice would pass its cap, after first reclaiming the slots of
//     dead processes. With no cap, or when measuring, it always counts and answers true. The
//     caller gives bytes back with Release when the driver call fails or the memory is freed.
//   * Commit(bytes) records a successful allocation call (count and size histogram).
//   * Every method is thread-safe; none allocates on the heap after Open.
#pragma once

#include <cstdint>
#include <string>

#include "config.h"
#include "gpuslice/shim/slice_region.h"

namespace gpuslice::shim {

class Accounting {
 public:
  // Opens <dir>/slice-<id>, initialising it when new, and registers this process. On failure
  // returns false with a sentence in *error.
  bool Open(const Config& config, std::string* error);
  bool IsOpen() const { return region_ != nullptr; }

  bool Reserve(std::uint64_t bytes, bool context);
  void Release(std::uint64_t bytes, bool context);
  void Commit(std::uint64_t bytes);

  // The slice's figures (locked reads).
  std::uint64_t Used();
  std::uint64_t Cap() const { return cap_bytes_; }
  int ShareMilli() const { return share_milli_; }
  SharePolicy Policy() const { return policy_; }
  SliceMode RegionMode() const { return mode_; }
  int LiveProcesses();
  const std::string& Path() const { return path_; }

  // Sets the slice's GPU the first time a process of the slice creates a context.
  void SetGpuUuid(const char* uuid);
  void GpuUuid(char* out, std::size_t size);
  // What the slice's latest context was counted as (its measured cost), for the slice's readers.
  void SetContextBytes(std::uint64_t bytes);

  // Measured GPU time of launches, time launches were held back, launch counts.
  void RecordKernel(std::uint64_t actual_ns);
  void RecordThrottled(std::uint64_t ns);
  void AddLaunches(std::uint64_t launches);
  void NoteLaunch(std::uint64_t now_ns);
  std::uint64_t KernelNs();  // the slice's measured GPU time so far

  // Gives this process's slot back (at exit): its bytes are uncounted now rather than when the
  // next process finds it dead.
  void Leave();
  // After fork in the child: forget the parent's slot and mapping without touching them.
  void ForgetAfterFork();

 private:
  void Lock();
  void Unlock();
  bool SlotAlive(int index);
  void ReclaimDeadLocked();
  bool ClaimSlotLocked();

  int fd_ = -1;
  SliceRegion* region_ = nullptr;
  int slot_ = -1;
  std::string path_;
  std::uint64_t cap_bytes_ = 0;
  int share_milli_ = 0;
  SharePolicy policy_ = SharePolicy::kStrict;
  SliceMode mode_ = SliceMode::kEnforce;
};

}  // namespace gpuslice::shim
