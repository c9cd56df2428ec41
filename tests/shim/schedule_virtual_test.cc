// Compute shares on virtual time (tests/shim/virtual_gpu.h): the interposer's throttle, schedule,
// launch windows and accounting (src/shim), unchanged, hold simulated processes to their slices'
// shares on one simulated GPU engine. Time moves only when every process waits, so each run is
// exact and the same on any machine, loaded or not: the shares are asserted tightly, and running a
// scenario twice gives the same kernels at the same nanoseconds. The wall-clock smoke tests of
// the same behaviours, through the real interposer and the test CUDA library, are in
// throttle_test.cc.
//
// Each simulated process does what tests/shim/cuda_probe's `launch` does: it keeps up to
// `in_flight` kernels of `kernel_ns` enqueued, waiting for the oldest when full, and spends
// `host_ns` on the host per launch. Shares are the engine time a slice's kernels took in each
// whole second after the first (the first is when the throttle learns the kernels' times).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "accounting.h"
#include "config.h"
#include "gpuslice/shim/slice_region.h"
#include "gpuslice/shim/slices.h"
#include "shim/virtual_gpu.h"
#include "temp_dir.h"
#include "throttle.h"

namespace gpuslice::shim::testing_virtual {
namespace {

constexpr std::uint64_t kSecond = 1'000'000'000;
constexpr std::uint64_t kMs = 1'000'000;
// A CLOCK_MONOTONIC-like origin (a machine up for about 12 days), not 0.
constexpr std::uint64_t kOrigin = 1'000'000 * kSecond + 123'456'789;
constexpr const char* kGpu = "GPU-virtual-0";

struct Process {
  std::string slice;
  int share_milli = 0;  // 0: no compute limit
  SharePolicy policy = SharePolicy::kStrict;
  std::uint64_t kernel_ns = kMs;
  int in_flight = 4;
  std::uint64_t host_ns = 5'000;
  std::uint64_t seconds = 5;
  std::uint64_t start_ns = 0;  // after the run's start
};

// The host the processes run on: wake-ups up to `max_late_ns` late (a loaded machine).
struct Host {
  std::uint64_t max_late_ns = 0;
  std::uint64_t seed = 1;
};

struct Outcome {
  std::vector<TracedKernel> trace;
  std::map<std::string, SliceSnapshot> slices;  // read after the run, by slice
};

class VirtualShares {
 public:
  // Runs the processes together from one instant and returns the engine's trace and the slices'
  // accounting.
  Outcome Run(const std::vector<Process>& processes, const Host& host = {}) {
    TempDirHolder dir;
    VirtualTimeline timeline(kOrigin);
    timeline.WakeLate(host.max_late_ns, host.seed);
    VirtualGpu gpu(&timeline);
    gpu.Install();
    std::vector<std::function<void()>> actors;
    for (const Process& process : processes) {
      actors.emplace_back([&, process] { RunProcess(process, dir.path, &timeline, &gpu); });
    }
    timeline.Run(actors);
    Outcome outcome;
    outcome.trace = gpu.Trace();
    for (const Process& process : processes) {
      absl::StatusOr<SliceSnapshot> slice =
          ReadSlice(SlicePath(dir.path, SanitizeSliceId(process.slice)));
      EXPECT_TRUE(slice.ok()) << slice.status();
      if (slice.ok()) outcome.slices[process.slice] = *slice;
    }
    return outcome;
  }

 private:
  struct TempDirHolder {
    ::gpuslice::TempDir dir;
    std::string path = dir / "shm";
  };

  static void RunProcess(const Process& process, const std::string& shm_dir,
                         VirtualTimeline* timeline, VirtualGpu* gpu) {
    if (process.start_ns > 0) timeline->SleepUntilNs(kOrigin + process.start_ns);
    Config config;
    config.slice_id = process.slice;
    config.share_milli = process.share_milli;
    config.policy = process.policy;
    config.shm_dir = shm_dir;
    config.context_reserve_bytes = 0;
    Accounting accounting;
    std::string error;
    if (!accounting.Open(config, &error)) {
      ADD_FAILURE() << process.slice << ": " << error;
      return;
    }
    accounting.SetGpuUuid(kGpu);
    Throttle throttle;
    const bool limit = process.share_milli > 0 && process.share_milli < 1000;
    throttle.Configure(&accounting, limit, false, shm_dir, timeline);
    if (!throttle.JoinSchedule(kGpu, config.slice_id.c_str(), &error)) {
      ADD_FAILURE() << process.slice << ": " << error;
      return;
    }
    const cuda::CUstream stream = VirtualGpu::StreamOf(VirtualTimeline::Self());
    static const int kKernel = 0;
    std::deque<std::uint64_t> in_flight;
    const std::uint64_t start = timeline->NowNs();
    while (timeline->NowNs() - start < process.seconds * kSecond) {
      while (in_flight.size() >= static_cast<std::size_t>(process.in_flight)) {
        timeline->SleepUntilNs(in_flight.front());
        in_flight.pop_front();
      }
      Throttle::Ticket ticket = throttle.Before(stream, false, &kKernel);
      in_flight.push_back(gpu->Launch(process.kernel_ns));
      throttle.After(ticket, cuda::CUDA_SUCCESS);
      accounting.AddLaunches(1);
      timeline->SleepUntilNs(timeline->NowNs() + process.host_ns);
    }
    if (!in_flight.empty()) timeline->SleepUntilNs(in_flight.back());
    throttle.Poll();
    accounting.Leave();
  }
};

// The engine time the kernels of `actors` took in each whole second [1, seconds) of the run.
std::vector<double> Shares(const std::vector<TracedKernel>& trace, const std::vector<int>& actors,
                           std::uint64_t seconds) {
  std::vector<double> shares;
  for (std::uint64_t window = 1; window < seconds; ++window) {
    const std::uint64_t from = kOrigin + window * kSecond;
    const std::uint64_t to = from + kSecond;
    std::uint64_t ran = 0;
    for (const TracedKernel& kernel : trace) {
      if (std::find(actors.begin(), actors.end(), kernel.actor) == actors.end()) continue;
      const std::uint64_t begin = std::max(kernel.start_ns, from);
      const std::uint64_t end = std::min(kernel.end_ns, to);
      if (end > begin) ran += end - begin;
    }
    shares.push_back(static_cast<double>(ran) / static_cast<double>(kSecond));
  }
  return shares;
}

std::string Show(const std::vector<double>& shares) {
  std::string text;
  for (double share : shares) text += std::to_string(share) + " ";
  return text;
}

void ExpectWithin(const std::vector<double>& shares, double low, double high,
                  const std::string& what) {
  ASSERT_FALSE(shares.empty()) << what;
  for (double share : shares) {
    EXPECT_GE(share, low) << what << ": " << Show(shares);
    EXPECT_LE(share, high) << what << ": " << Show(shares);
  }
}

Process Strict(const std::string& slice, int milli) {
  Process process;
  process.slice = slice;
  process.share_milli = milli;
  return process;
}

// Kernels of two processes never overlap on the engine (the model the shares are judged on).
void ExpectOneAtATime(std::vector<TracedKernel> trace) {
  std::sort(trace.begin(), trace.end(),
            [](const TracedKernel& a, const TracedKernel& b) { return a.start_ns < b.start_ns; });
  for (std::size_t i = 1; i < trace.size(); ++i) {
    ASSERT_GE(trace[i].start_ns, trace[i - 1].end_ns) << "kernel " << i;
  }
}

TEST(VirtualShares, TheSameScenarioGivesTheSameKernelsAtTheSameNanoseconds) {
  const std::vector<Process> processes{Strict("a", 250), Strict("b", 750)};
  const Outcome first = VirtualShares().Run(processes);
  const Outcome second = VirtualShares().Run(processes);
  ASSERT_EQ(first.trace.size(), second.trace.size());
  ASSERT_GT(first.trace.size(), 3000u);
  for (std::size_t i = 0; i < first.trace.size(); ++i) {
    ASSERT_EQ(first.trace[i].actor, second.trace[i].actor) << i;
    ASSERT_EQ(first.trace[i].start_ns, second.trace[i].start_ns) << i;
    ASSERT_EQ(first.trace[i].end_ns, second.trace[i].end_ns) << i;
  }
  ExpectOneAtATime(first.trace);
}

TEST(VirtualShares, WithoutSharesTwoProcessesSplitTheEngine) {
  const Outcome run = VirtualShares().Run({Strict("a", 0), Strict("b", 0)});
  ExpectWithin(Shares(run.trace, {0}, 5), 0.49, 0.51, "a");
  ExpectWithin(Shares(run.trace, {1}, 5), 0.49, 0.51, "b");
}

class VirtualPairTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(VirtualPairTest, EachSliceGetsItsShare) {
  const auto [a, b] = GetParam();
  const Outcome run = VirtualShares().Run({Strict("a", a), Strict("b", b)});
  const std::vector<double> share_a = Shares(run.trace, {0}, 5);
  const std::vector<double> share_b = Shares(run.trace, {1}, 5);
  std::cout << "a " << Show(share_a) << "| b " << Show(share_b) << "\n";
  // 1 ms kernels: a second's share moves in steps of 0.001.
  ExpectWithin(share_a, a / 1000.0 - 0.002, a / 1000.0 + 0.002, "a");
  ExpectWithin(share_b, b / 1000.0 - 0.002, b / 1000.0 + 0.002, "b");
  ExpectOneAtATime(run.trace);
}

INSTANTIATE_TEST_SUITE_P(Shares, VirtualPairTest,
                         ::testing::Values(std::pair{250, 750}, std::pair{100, 900},
                                           std::pair{500, 500}, std::pair{300, 300}),
                         [](const ::testing::TestParamInfo<std::pair<int, int>>& param_info) {
                           return std::to_string(param_info.param.first) + "_" +
                                  std::to_string(param_info.param.second);
                         });

Process Kernels(Process process, std::uint64_t kernel_ns, int in_flight) {
  process.kernel_ns = kernel_ns;
  process.in_flight = in_flight;
  return process;
}

TEST(VirtualShares, ThreeSlicesEachGetTheirShare) {
  const Outcome run = VirtualShares().Run({Strict("a", 200), Strict("b", 300), Strict("c", 500)});
  ExpectWithin(Shares(run.trace, {0}, 5), 0.198, 0.202, "a");
  ExpectWithin(Shares(run.trace, {1}, 5), 0.298, 0.302, "b");
  ExpectWithin(Shares(run.trace, {2}, 5), 0.498, 0.502, "c");
  ExpectOneAtATime(run.trace);
}

TEST(VirtualShares, AStrictSliceAloneKeepsToItsShare) {
  const Outcome run = VirtualShares().Run({Strict("alone", 250)});
  ExpectWithin(Shares(run.trace, {0}, 5), 0.248, 0.252, "alone");
  const SliceSnapshot& slice = run.slices.at("alone");
  EXPECT_EQ(slice.share_milli, 250);
  EXPECT_EQ(slice.launches, run.trace.size());
  EXPECT_GT(slice.throttled_ns, 3 * kSecond) << "held back for about three quarters of 5 s";
}

// PyTorch's pattern: one kernel in flight, the host waiting for each. The small slice leaves the
// engine idle between its kernels; the other keeps four in flight.
TEST(VirtualShares, ASliceThatWaitsForEachKernelGetsItsShare) {
  const Outcome run = VirtualShares().Run(
      {Kernels(Strict("a", 250), 1'500'000, 1), Kernels(Strict("b", 750), 1'500'000, 4)});
  // 1.5 ms kernels: steps of 0.0015.
  ExpectWithin(Shares(run.trace, {0}, 5), 0.245, 0.255, "a");
  ExpectWithin(Shares(run.trace, {1}, 5), 0.745, 0.755, "b");
}

// What a slice records as its GPU time is the time its kernels ran on the engine, not the time
// they waited behind the other slice's.
TEST(VirtualShares, ASliceIsChargedOnlyForTheTimeItsKernelsRan) {
  const Outcome run = VirtualShares().Run(
      {Kernels(Strict("a", 250), 1'500'000, 1), Kernels(Strict("b", 750), 1'500'000, 1)});
  for (int actor : {0, 1}) {
    std::uint64_t ran = 0;
    for (const TracedKernel& kernel : run.trace) {
      if (kernel.actor == actor) ran += kernel.end_ns - kernel.start_ns;
    }
    const SliceSnapshot& slice = run.slices.at(actor == 0 ? "a" : "b");
    const double charged = static_cast<double>(slice.kernel_ns) / static_cast<double>(ran);
    std::cout << "slice " << actor << ": charged / ran = " << charged << "\n";
    EXPECT_GT(charged, 0.999) << actor;
    EXPECT_LT(charged, 1.001) << actor;
  }
}

// 20 ms kernels in a 12.5 ms window: each runs at once and the slice then waits until its share
// has paid for it.
TEST(VirtualShares, KernelsLongerThanTheWindowAreHeldToTheShare) {
  const Outcome run = VirtualShares().Run({Kernels(Strict("alone", 250), 20 * kMs, 1)});
  // 20 ms kernels: a second's share moves in steps of 0.02.
  ExpectWithin(Shares(run.trace, {0}, 5), 0.23, 0.27, "alone");
}

// Beside another slice, a's 20 ms kernel at its window's start runs 7.5 ms into b's window, which
// b waits out; b makes most of it up in a's windows while a pays for the kernel, not all: b got
// 0.713-0.742 (a known shortfall of long kernels beside short ones, docs/SHIM.md).
TEST(VirtualShares, LongKernelsBesideAnotherSliceAreHeldToTheShare) {
  const Outcome run =
      VirtualShares().Run({Kernels(Strict("a", 250), 20 * kMs, 1), Strict("b", 750)});
  ExpectWithin(Shares(run.trace, {0}, 5), 0.23, 0.27, "a");
  ExpectWithin(Shares(run.trace, {1}, 5), 0.70, 0.76, "b");
}

// The processes of one slice keep to its share together.
TEST(VirtualShares, TheProcessesOfAStrictSliceTogetherKeepToItsShare) {
  const Outcome run = VirtualShares().Run({Strict("two", 250), Strict("two", 250)});
  // Each process judges the slice's time from its own samples: 0.250-0.253.
  ExpectWithin(Shares(run.trace, {0, 1}, 5), 0.246, 0.254, "together");
  EXPECT_GT(Shares(run.trace, {0}, 5).front(), 0.05) << "both processes run";
  EXPECT_GT(Shares(run.trace, {1}, 5).front(), 0.05) << "both processes run";
}

TEST(VirtualShares, TheProcessesOfAStrictSliceKeepLongKernelsToItsShare) {
  const Outcome run = VirtualShares().Run(
      {Kernels(Strict("two", 250), 20 * kMs, 1), Kernels(Strict("two", 250), 20 * kMs, 1)});
  // Steps of 0.02: 0.22-0.26 seen, a kernel either side of the share.
  ExpectWithin(Shares(run.trace, {0, 1}, 5), 0.21, 0.29, "together");
}

TEST(VirtualShares, ABorrowingSliceAloneUsesTheIdleEngine) {
  Process borrow = Strict("alone", 250);
  borrow.policy = SharePolicy::kBorrowIdle;
  const Outcome run = VirtualShares().Run({borrow});
  ExpectWithin(Shares(run.trace, {0}, 5), 0.99, 1.0, "borrow alone");
}

// Borrowing stops once another slice launches: then each keeps to its share.
TEST(VirtualShares, ABorrowingSliceGivesTheEngineBackWhenAnotherSliceRuns) {
  Process borrow = Strict("borrow", 250);
  borrow.policy = SharePolicy::kBorrowIdle;
  borrow.seconds = 6;
  Process strict = Strict("strict", 750);
  strict.start_ns = 2 * kSecond;
  strict.seconds = 4;
  const Outcome run = VirtualShares().Run({borrow, strict});
  const std::vector<double> shares = Shares(run.trace, {0}, 6);
  ASSERT_EQ(shares.size(), 5u);
  EXPECT_GE(shares[0], 0.99) << "alone in second 1: " << Show(shares);
  // From second 3 (a whole second after the other slice started) each keeps to its share.
  for (std::size_t second = 2; second < shares.size(); ++second) {
    EXPECT_NEAR(shares[second], 0.25, 0.005) << "second " << second + 1 << ": " << Show(shares);
  }
  const std::vector<double> other = Shares(run.trace, {1}, 6);
  for (std::size_t second = 2; second < other.size(); ++second) {
    EXPECT_NEAR(other[second], 0.75, 0.005) << "second " << second + 1 << ": " << Show(other);
  }
}

// A loaded host: every wake-up up to 300 us late. A slice that waits for each kernel leaves the
// engine idle for each late wake-up; its extension takes that back only while the next window's
// owner has not launched, and a neighbour with work queued launches at once: the waiting slice
// got 0.2265-0.2325 of its 0.25 (the price of a slow host falls on the slice whose host is slow,
// never on its neighbour), the same for every seed.
TEST(VirtualShares, LateWakeUpsCostOnlyTheSlowSlice) {
  for (std::uint64_t seed : {1ULL, 2ULL, 3ULL}) {
    const Outcome run = VirtualShares().Run(
        {Kernels(Strict("a", 250), 1'500'000, 1), Kernels(Strict("b", 750), 1'500'000, 4)},
        Host{300'000, seed});
    ExpectWithin(Shares(run.trace, {0}, 5), 0.22, 0.26, "a, seed " + std::to_string(seed));
    ExpectWithin(Shares(run.trace, {1}, 5), 0.745, 0.755, "b, seed " + std::to_string(seed));
  }
}

}  // namespace
}  // namespace gpuslice::shim::testing_virtual
