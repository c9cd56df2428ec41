// The time windows of the slices with a compute share on one GPU (GpuSchedule in
// gpuslice/shim/slice_region.h).
//
// A GPU without MIG runs one context at a time and switches between them in time slices; from
// inside a process there is no way to see when its kernels really ran while another process's
// work is queued too. So the shares are kept by taking turns: each period of 50 ms is divided
// among the live slices of the GPU in proportion to their shares, every process knows every
// window (they follow from the shared file and CLOCK_MONOTONIC alone), and a slice launches only
// inside its own window. Inside it the GPU runs the slice's work alone, so launch times measured
// with events are exact and the throttle can keep what it enqueues within the window.
//
// Contract:
//   * Join takes (or shares) the slice's entry and holds a read lock on its byte for the life of
//     the process; false with a sentence in *error when the file cannot be used.
//   * Window gives the slice's window as offsets [start, end) in the period, in ns; it re-reads
//     the file only when its generation changed. Sweep frees dead slices' entries (at most once a
//     second). Thread-safe.
//   * Publish raises the slice's predicted ends of enqueued work (never lowers them); Own gives
//     what the slice's processes published (this one's included), Others the latest of the other
//     slices' (0 when none). ClaimPaid lets one process of the slice at a time start paying
//     for a long launch. Lock-free.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "gpuslice/shim/slice_region.h"
#include "launch_window.h"

namespace gpuslice::shim {

class Schedule {
 public:
  bool Join(const std::string& directory, const char* gpu_uuid, const char* slice_id,
            int share_milli, SharePolicy policy, std::string* error);
  bool Joined() const { return schedule_ != nullptr; }
  void Window(std::uint64_t* start_ns, std::uint64_t* end_ns);
  void Sweep(std::uint64_t now_ns);
  void Publish(const WorkEnds& ends);
  WorkEnds Own() const;
  // Moves the slice's paid_until from `seen` (as Own gave it) to `until`; false when another
  // process of the slice moved it first.
  bool ClaimPaid(std::uint64_t seen, std::uint64_t until);
  WorkEnds Others() const;
  void ForgetAfterFork();

 private:
  void Lock();
  void Unlock();
  bool EntryAlive(int index);
  bool SweepLocked();
  void RefreshLocked();

  int fd_ = -1;
  GpuSchedule* schedule_ = nullptr;
  int entry_ = -1;
  std::mutex mutex_;  // guards the cached window
  std::uint64_t generation_ = ~0ull;
  std::uint64_t start_ns_ = 0, end_ns_ = 0;
  int slices_ = 0;
  std::uint64_t swept_ns_ = 0;
};

}  // namespace gpuslice::shim
