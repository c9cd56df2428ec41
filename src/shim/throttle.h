// The compute share: launches are held to the slice's windows on its GPU (schedule.h) and
// timed with CUDA events.
//
// Each launch is first given an estimate of its GPU time: the measured times of the same kernel
// or graph, smoothed (the process's average for one not seen yet). When it may be made follows
// from the slice's window, the work this process has enqueued, and what the other slices
// published about theirs (launch_window.h): inside the window while it is predicted to end
// before the window does, after the other slices' overrun into the window, and past the window
// only while no other slice has launched since. A start and an end event around each launch
// measure what it really took once it completes, which corrects the estimates, and the slice's
// measured GPU time over the last second (with what it has enqueued) is compared with the window
// time of that span: what it fell short by (a late wake-up, a busy CPU) lets it run on past the
// window's end by as much, and what it ran over ends its window that much earlier, up to half a
// window either way. That is the feedback loop that holds the share. A launch that met other
// slices' work is timed with theirs, so no more than its estimate is taken from it. A launch longer
// than the whole window runs at the window's start and the slice then skips windows until its share
// has paid for it. With the `borrow` policy a slice also launches outside its window while no other
// slice on the GPU has launched in the last 200 ms. Launches on a stream being captured into a
// graph are passed on untouched (the graph's launch is what runs). In measuring mode launches are
// timed and never held back.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "accounting.h"
#include "clock.h"
#include "cuda_api.h"
#include "launch_window.h"
#include "schedule.h"

namespace gpuslice::shim {

class Throttle {
 public:
  // `limit`: hold launches to the slice's share; `time`: measure launches (true when limiting or
  // measuring). `clock`: the time launches are held to (nullptr: CLOCK_MONOTONIC).
  void Configure(Accounting* accounting, bool limit, bool time, std::string shm_dir,
                 Clock* clock = nullptr);
  // Takes the slice's place in its GPU's schedule (when limiting), once the GPU is known.
  bool JoinSchedule(const char* gpu_uuid, const char* slice_id, std::string* error);
  bool Timing() const { return time_; }
  bool NeedsSchedule() const { return limit_ && !schedule_.Joined(); }

  struct Ticket {
    bool timed = false;
    cuda::CUevent start = nullptr;
    cuda::CUcontext context = nullptr;
    cuda::CUstream stream = nullptr;
    const void* key = nullptr;
    std::int64_t estimate_ns = 0;
    bool contended = false;  // other slices' work was predicted to run when it starts
  };
  // `stream` as the launch names it; `per_thread` when the launch is a _ptsz variant (stream 0
  // then means the per-thread default stream). `key` identifies the kernel or graph.
  Ticket Before(cuda::CUstream stream, bool per_thread, const void* key);
  void After(Ticket& ticket, cuda::CUresult result);

  // The context is gone: its events and pending launches are forgotten.
  void ForgetContext(cuda::CUcontext context);
  // Takes the completed launches' times without waiting (at exit).
  void Poll();
  // After fork in the child.
  void Reset();

 private:
  cuda::CUevent TakeEventLocked(cuda::CUcontext context);
  void PollLocked(bool wait_for_oldest);
  bool OthersActive(std::uint64_t now);

  struct Pending {
    cuda::CUevent start;
    cuda::CUevent end;
    cuda::CUcontext context;
    const void* key;
    std::int64_t estimate_ns;
    bool contended;
  };

  Clock* clock_ = &MonotonicClock();
  Accounting* accounting_ = nullptr;
  bool limit_ = false;
  bool time_ = false;
  std::string shm_dir_;
  std::mutex mutex_;
  // Held while a launch waits for its turn: the launch state and the feedback's history belong to
  // the process, and its threads take their turns one at a time. Never held with mutex_ taken
  // first.
  std::mutex turn_mutex_;
  std::deque<Pending> pending_;
  std::unordered_map<cuda::CUcontext, std::vector<cuda::CUevent>> free_events_;
  std::unordered_map<const void*, std::int64_t> estimates_;
  std::int64_t average_ns_ = 0;
  std::uint64_t others_checked_ns_ = 0;
  bool others_active_ = true;
  Schedule schedule_;
  LaunchState launch_;
  // The slice's measured GPU time (time, kernel_ns) every 50 ms over the last second: what the
  // share fell short by extends the window, what it ran over shortens it (Feedback: positive to
  // extend, negative to shorten, at most half the window either way).
  std::deque<std::pair<std::uint64_t, std::uint64_t>> history_;
  std::int64_t Feedback(std::uint64_t now, std::uint64_t window_start, std::uint64_t window_end);
};

std::uint64_t MonotonicNs();

}  // namespace gpuslice::shim
