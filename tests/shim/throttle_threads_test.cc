// Threads of one process launching through one throttle at once (src/shim/throttle.h), on the
// real clock over the simulated engine of tests/shim/virtual_gpu.h. The launch state and the
// feedback's history belong to the process; before 91c84d1 its threads read and wrote them
// without a lock. That race shows under ThreadSanitizer (CI builds this test with it,
// scripts/test.sh --tsan); here the test checks what the threads' launches add up to.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "accounting.h"
#include "clock.h"
#include "config.h"
#include "gpuslice/shim/slices.h"
#include "shim/virtual_gpu.h"
#include "temp_dir.h"
#include "throttle.h"

namespace gpuslice::shim::testing_virtual {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
constexpr const char* kGpu = "GPU-threads-0";

TEST(ThrottleThreads, ThreadsOfOneProcessTakeTheirTurnsOneAtATime) {
  ::gpuslice::TempDir dir;
  Config config;
  config.slice_id = "threads";
  config.share_milli = 500;
  config.shm_dir = dir / "shm";
  config.context_reserve_bytes = 0;
  Accounting accounting;
  std::string error;
  ASSERT_TRUE(accounting.Open(config, &error)) << error;
  accounting.SetGpuUuid(kGpu);
  VirtualGpu gpu(&MonotonicClock());
  gpu.Install();
  Throttle throttle;
  throttle.Configure(&accounting, true, false, config.shm_dir);
  ASSERT_TRUE(throttle.JoinSchedule(kGpu, "threads", &error)) << error;

  constexpr int kThreads = 4;
  constexpr int kLaunches = 150;
  static const int kKernel = 0;
  const std::uint64_t start = MonotonicClock().NowNs();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      VirtualGpu::ActAs(0);  // one context and stream, as one process's default stream
      std::deque<std::uint64_t> in_flight;
      for (int i = 0; i < kLaunches; ++i) {
        if (in_flight.size() >= 2) {
          MonotonicClock().SleepUntilNs(in_flight.front());
          in_flight.pop_front();
        }
        Throttle::Ticket ticket = throttle.Before(VirtualGpu::StreamOf(0), false, &kKernel);
        in_flight.push_back(gpu.Launch(kMs));
        throttle.After(ticket, cuda::CUDA_SUCCESS);
      }
      if (!in_flight.empty()) MonotonicClock().SleepUntilNs(in_flight.back());
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::uint64_t elapsed = MonotonicClock().NowNs() - start;
  throttle.Poll();

  const std::vector<TracedKernel> trace = gpu.Trace();
  ASSERT_EQ(trace.size(), static_cast<std::size_t>(kThreads * kLaunches));
  std::uint64_t ran = 0;
  for (const TracedKernel& kernel : trace) ran += kernel.end_ns - kernel.start_ns;
  // Every launch was timed: what was charged is what ran, and on this clock also the host's delay
  // between a launch's start event and the launch itself when the engine was idle (1% seen once
  // in six runs). These bounds catch launches going untimed or timed with each other's work on a
  // large scale; the race on the launch state itself is what ThreadSanitizer finds.
  const std::uint64_t charged = accounting.KernelNs();
  EXPECT_GE(charged, ran - ran / 100) << charged << " ns charged, " << ran << " ns ran";
  EXPECT_LE(charged, ran + ran / 20) << charged << " ns charged, " << ran << " ns ran";
  // 600 ms of kernels at a half share take at least 1.2 s less the last window's run-over.
  EXPECT_GE(elapsed, 2 * ran - 100 * kMs) << elapsed << " ns for " << ran << " ns of kernels";
  accounting.Leave();
}

}  // namespace
}  // namespace gpuslice::shim::testing_virtual
