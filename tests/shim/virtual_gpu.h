// The interposer's share logic (throttle, schedule, launch windows, accounting: src/shim) run on
// a simulated timeline, so that the shares it gives are exact and the same on every run, however
// loaded the machine is.
//
// VirtualTimeline is a Clock whose time moves only when every actor waits: each actor runs on its
// own thread, but one at a time; an actor that sleeps hands the timeline to the one due first
// (ties: the one that has waited longest), and time jumps to its wake-up. Nothing else runs in
// between, so a run is a pure function of its actors.
//
// VirtualGpu is one GPU engine on a clock (that timeline, or the real one for tests of threads)
// behind the driver functions the throttle calls
// (src/shim/driver.h): kernels from every context run one at a time in the order they were
// launched, each starting at the latest of its launch, the end of its context's previous kernel
// and the end of the engine's previous kernel (the test CUDA library's timeline without its
// host). An event carries the later of its record and the end of its context's last kernel.
// Every kernel is traced with its actor.
//
// Contract: one VirtualGpu is installed in the driver table at a time (Install / its destructor);
// its driver functions are called only from actors of its timeline. Not for use across fork.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "clock.h"
#include "cuda_api.h"

namespace gpuslice::shim::testing_virtual {

class VirtualTimeline final : public Clock {
 public:
  explicit VirtualTimeline(std::uint64_t start_ns) : now_(start_ns) {}
  // A loaded host: every wake-up comes up to `max_late_ns` late, by an amount drawn from a
  // generator seeded with `seed` (the same run every time).
  void WakeLate(std::uint64_t max_late_ns, std::uint64_t seed) {
    max_late_ns_ = max_late_ns;
    random_ = seed;
  }
  // Runs every actor to its end, one at a time on the timeline; returns when all have returned.
  void Run(const std::vector<std::function<void()>>& actors);
  std::uint64_t NowNs() override;
  void SleepUntilNs(std::uint64_t ns) override;
  // The actor running on the calling thread (0-based, as given to Run); -1 outside Run.
  static int Self();

 private:
  struct Waiting {
    std::uint64_t wake_ns;
    std::uint64_t order;
  };
  void HandOnLocked();
  void WaitForTurnLocked(std::unique_lock<std::mutex>& lock, int self);

  std::mutex mutex_;
  std::condition_variable turn_;
  std::uint64_t now_;
  std::uint64_t order_ = 0;
  std::map<int, Waiting> waiting_;
  int running_ = -1;
  int registered_ = 0;
  std::uint64_t max_late_ns_ = 0;
  std::uint64_t random_ = 0;
};

struct TracedKernel {
  int actor;
  std::uint64_t start_ns;
  std::uint64_t end_ns;
};

class VirtualGpu {
 public:
  // `clock`: a VirtualTimeline (whose actors call the driver functions), or MonotonicClock() with
  // threads that name themselves with ActAs.
  explicit VirtualGpu(Clock* clock);
  ~VirtualGpu();
  VirtualGpu(const VirtualGpu&) = delete;
  VirtualGpu& operator=(const VirtualGpu&) = delete;

  // Puts this GPU's functions into the driver table (g_driver).
  void Install();
  // Makes the calling thread actor `actor` (for threads not run by a VirtualTimeline).
  static void ActAs(int actor);
  // The context and stream of an actor (one each).
  static cuda::CUcontext ContextOf(int actor);
  static cuda::CUstream StreamOf(int actor);
  // Enqueues a kernel of `duration_ns` on the calling actor's stream; returns its end.
  std::uint64_t Launch(std::uint64_t duration_ns);
  std::vector<TracedKernel> Trace();

  // The driver functions (static: the table holds plain function pointers).
  static cuda::CUresult CtxGetCurrent(cuda::CUcontext* context);
  static cuda::CUresult CtxPush(cuda::CUcontext context);
  static cuda::CUresult CtxPop(cuda::CUcontext* context);
  static cuda::CUresult StreamGetCtx(cuda::CUstream stream, cuda::CUcontext* context);
  static cuda::CUresult StreamIsCapturing(cuda::CUstream stream, int* capturing);
  static cuda::CUresult EventCreate(cuda::CUevent* event, unsigned int flags);
  static cuda::CUresult EventRecord(cuda::CUevent event, cuda::CUstream stream);
  static cuda::CUresult EventQuery(cuda::CUevent event);
  static cuda::CUresult EventSynchronize(cuda::CUevent event);
  static cuda::CUresult EventElapsedTime(float* ms, cuda::CUevent start, cuda::CUevent end);

 private:
  static int ActorOfStream(cuda::CUstream stream);

  Clock* clock_;
  std::mutex mutex_;
  std::uint64_t engine_free_ns_ = 0;
  std::map<int, std::uint64_t> context_end_ns_;
  std::vector<std::uint64_t> events_;  // event i + 1 -> its time (0: not recorded)
  std::vector<TracedKernel> trace_;
};

}  // namespace gpuslice::shim::testing_virtual
