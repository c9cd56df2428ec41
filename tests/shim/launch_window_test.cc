// When a slice may launch (src/shim/launch_window.h): its window, the predicted middle rule, the
// others' overrun it waits for, its extension that yields to the next window's owner, the last
// window's extension across the period's end, and launches longer than a window.
#include "launch_window.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

namespace gpuslice::shim {
namespace {

constexpr std::uint64_t kUs = 1'000;
constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kPeriod = 50 * kMs;
constexpr std::uint64_t kBase = 1000 * kPeriod;  // the start of some period

// Slice "a" has a quarter of the period, [0, 12.5 ms); slice "b" the rest, [12.5, 50 ms).
LaunchInput SliceA(std::uint64_t now, std::uint64_t cost) {
  LaunchInput in;
  in.now_ns = now;
  in.period_ns = kPeriod;
  in.window_start_ns = 0;
  in.window_end_ns = 12'500 * kUs;
  in.cost_ns = cost;
  in.share_milli = 250;
  return in;
}

LaunchInput SliceB(std::uint64_t now, std::uint64_t cost) {
  LaunchInput in = SliceA(now, cost);
  in.window_start_ns = 12'500 * kUs;
  in.window_end_ns = kPeriod;
  in.share_milli = 750;
  return in;
}

TEST(LaunchWindowTest, LaunchesInsideItsWindowAndPublishesWhenItsWorkEnds) {
  LaunchState state;
  const LaunchDecision d = DecideLaunch(SliceA(kBase + 5 * kMs, 2 * kMs), &state);
  EXPECT_EQ(d.wait_until_ns, 0u);
  EXPECT_FALSE(d.contended);
  EXPECT_EQ(state.queue_end_ns, kBase + 7 * kMs);
  EXPECT_EQ(d.publish.busy, kBase + 7 * kMs);
  EXPECT_EQ(d.publish.overrun, kBase + 7 * kMs);
  EXPECT_EQ(state.paid_until_ns, 0u);
}

TEST(LaunchWindowTest, QueuesBehindItsOwnWork) {
  LaunchState state{kBase + 6 * kMs, 0};
  const LaunchDecision d = DecideLaunch(SliceA(kBase + 5 * kMs, 2 * kMs), &state);
  EXPECT_EQ(d.wait_until_ns, 0u);
  EXPECT_EQ(state.queue_end_ns, kBase + 8 * kMs);
}

TEST(LaunchWindowTest, OutsideItsWindowWaitsForItsNextStart) {
  LaunchState state{kBase + 1 * kMs, 0};
  const LaunchState before = state;
  EXPECT_EQ(DecideLaunch(SliceA(kBase + 20 * kMs, kMs), &state).wait_until_ns, kBase + kPeriod);
  EXPECT_EQ(DecideLaunch(SliceB(kBase + 3 * kMs, kMs), &state).wait_until_ns, kBase + 12'500 * kUs);
  EXPECT_EQ(state.queue_end_ns, before.queue_end_ns) << "waiting changes nothing";
  EXPECT_EQ(state.paid_until_ns, before.paid_until_ns);
}

TEST(LaunchWindowTest, LaunchesWhileThePredictedMiddleIsInsideTheWindow) {
  LaunchState state;
  // Middle at 12.3 ms: inside; it runs to 12.8 ms, and others wait for that.
  LaunchDecision d = DecideLaunch(SliceA(kBase + 11'800 * kUs, kMs), &state);
  EXPECT_EQ(d.wait_until_ns, 0u);
  EXPECT_EQ(d.publish.overrun, kBase + 12'800 * kUs);
  // Middle at 12.8 ms: past the end, so the next period's window.
  state = LaunchState{};
  d = DecideLaunch(SliceA(kBase + 11'800 * kUs, 2 * kMs), &state);
  EXPECT_EQ(d.wait_until_ns, kBase + kPeriod);
  EXPECT_EQ(state.queue_end_ns, 0u);
}

TEST(LaunchWindowTest, OthersWaitForNoMoreThanHalfALaunchPastTheWindow) {
  // With 5 ms of extension a 2 ms launch at 12 ms is allowed (middle 13 ms), but the overrun
  // others wait for ends at 12.5 + 1 ms; its work is published as busy to 14 ms.
  LaunchState state;
  LaunchInput in = SliceA(kBase + 12 * kMs, 2 * kMs);
  in.extension_ns = 5 * kMs;
  const LaunchDecision d = DecideLaunch(in, &state);
  EXPECT_EQ(d.wait_until_ns, 0u);
  EXPECT_EQ(d.publish.busy, kBase + 14 * kMs);
  EXPECT_EQ(d.publish.overrun, kBase + 13'500 * kUs);
}

TEST(LaunchWindowTest, WaitsForTheOthersOverrunAtItsWindowStart) {
  LaunchState state;
  LaunchInput in = SliceA(kBase + 100 * kUs, kMs);
  in.others = WorkEnds{kBase + 800 * kUs, kBase + 800 * kUs};
  LaunchDecision d = DecideLaunch(in, &state);
  EXPECT_EQ(d.wait_until_ns, kBase + 800 * kUs);
  EXPECT_EQ(state.queue_end_ns, 0u);
  // Once it is over: launched, not contended, measured alone.
  in.now_ns = kBase + 850 * kUs;
  d = DecideLaunch(in, &state);
  EXPECT_EQ(d.wait_until_ns, 0u);
  EXPECT_FALSE(d.contended);
  EXPECT_EQ(state.queue_end_ns, kBase + 1'850 * kUs);
}

TEST(LaunchWindowTest, DoesNotWaitForAnOverrunOfMoreThanHalfItsWindow) {
  // 7 ms of the others' work is left (more than 6.25 ms): sharing the GPU beats losing the
  // window. The launch is contended and predicted to start after their work.
  LaunchState state;
  LaunchInput in = SliceA(kBase + 100 * kUs, kMs);
  in.others = WorkEnds{kBase + 7'100 * kUs, kBase + 7'100 * kUs};
  const LaunchDecision d = DecideLaunch(in, &state);
  EXPECT_EQ(d.wait_until_ns, 0u);
  EXPECT_TRUE(d.contended);
  EXPECT_EQ(state.queue_end_ns, kBase + 8'100 * kUs);
  EXPECT_EQ(d.publish.busy, kBase + 8'100 * kUs);
}

TEST(LaunchWindowTest, DoesNotWaitForWorkLaunchedInAnotherSlicesExtension) {
  // The others' work (busy) runs to 2 ms, but none of it is overrun from their own window: the
  // launch is made, contended.
  LaunchState state;
  LaunchInput in = SliceA(kBase + 100 * kUs, kMs);
  in.others = WorkEnds{kBase + 2 * kMs, kBase - kMs};
  const LaunchDecision d = DecideLaunch(in, &state);
  EXPECT_EQ(d.wait_until_ns, 0u);
  EXPECT_TRUE(d.contended);
  EXPECT_EQ(state.queue_end_ns, kBase + 3 * kMs);
}

TEST(LaunchWindowTest, ItsExtensionYieldsToTheNextWindowsOwner) {
  // Past 12.5 ms, with 3 ms of extension: "b" has launched nothing since 12.5 ms, so "a" may
  // launch; the launch publishes no overrun (nobody waits for an extension).
  LaunchState state;
  LaunchInput in = SliceA(kBase + 13 * kMs, kMs);
  in.extension_ns = 3 * kMs;
  in.others = WorkEnds{kBase + 1 * kMs, kBase + 1 * kMs};  // "b"'s work from its last window
  LaunchDecision d = DecideLaunch(in, &state);
  EXPECT_EQ(d.wait_until_ns, 0u);
  EXPECT_EQ(d.publish.busy, kBase + 14 * kMs);
  EXPECT_EQ(d.publish.overrun, 0u);
  // "b" has launched (its work ends after "a"'s window's end): the extension is over.
  state = LaunchState{};
  in.others = WorkEnds{kBase + 13'500 * kUs, kBase + 13'500 * kUs};
  d = DecideLaunch(in, &state);
  EXPECT_EQ(d.wait_until_ns, kBase + kPeriod);
  EXPECT_EQ(state.queue_end_ns, 0u);
}

TEST(LaunchWindowTest, TheLastWindowsExtensionRunsIntoTheNextPeriod) {
  LaunchState state;
  LaunchInput in = SliceB(kBase + kPeriod + 1 * kMs, kMs);
  in.extension_ns = 3 * kMs;
  in.others = WorkEnds{kBase + 13 * kMs, kBase + 13 * kMs};  // "a"'s work from its last window
  LaunchDecision d = DecideLaunch(in, &state);
  EXPECT_EQ(d.wait_until_ns, 0u) << "1 ms into the next period is inside b's 3 ms extension";
  EXPECT_EQ(d.publish.overrun, 0u);
  // Its end: the middle must fall before 50 + 3 ms.
  state = LaunchState{};
  in.now_ns = kBase + kPeriod + 2'600 * kUs;
  d = DecideLaunch(in, &state);
  EXPECT_EQ(d.wait_until_ns, kBase + kPeriod + 12'500 * kUs);
  // Without an extension the next period belongs to "a".
  in.extension_ns = 0;
  in.now_ns = kBase + kPeriod + 1 * kMs;
  d = DecideLaunch(in, &state);
  EXPECT_EQ(d.wait_until_ns, kBase + kPeriod + 12'500 * kUs);
}

TEST(LaunchWindowTest, ALaunchLongerThanTheWindowRunsAtOnceAndIsPaidFor) {
  // 20 ms in a 12.5 ms window: the middle rule alone would let it take 20 ms of every 50.
  LaunchState state;
  LaunchDecision d = DecideLaunch(SliceA(kBase + 1 * kMs, 20 * kMs), &state);
  EXPECT_EQ(d.wait_until_ns, 0u);
  EXPECT_EQ(state.queue_end_ns, kBase + 21 * kMs);
  EXPECT_EQ(d.publish.busy, kBase + 21 * kMs);
  EXPECT_EQ(d.publish.overrun, 0u) << "nobody waits for it";
  // A quarter share pays for 20 ms with 80 ms; then the next runs at once, in any window.
  EXPECT_EQ(state.paid_until_ns, kBase + 81 * kMs);
  EXPECT_EQ(DecideLaunch(SliceA(kBase + kPeriod + 1 * kMs, kMs), &state).wait_until_ns,
            kBase + 81 * kMs);
  d = DecideLaunch(SliceA(kBase + 81 * kMs, 20 * kMs), &state);
  EXPECT_EQ(d.wait_until_ns, 0u) << "31 ms into b's window";
  EXPECT_EQ(state.paid_until_ns, kBase + 161 * kMs);
  // Not while its own work is still queued.
  LaunchState busy{kBase + 2 * kMs, 0};
  EXPECT_EQ(DecideLaunch(SliceA(kBase + 1 * kMs, 20 * kMs), &busy).wait_until_ns, kBase + 2 * kMs);
}

// The wait after a long launch holds every process of the slice, not only the one that made it.
TEST(LaunchWindowTest, ALongLaunchOfOneProcessHoldsTheSlicesOthers) {
  LaunchState first;
  const LaunchDecision d = DecideLaunch(SliceA(kBase + 1 * kMs, 20 * kMs), &first);
  ASSERT_EQ(d.wait_until_ns, 0u);
  EXPECT_EQ(d.publish.paid_until, kBase + 81 * kMs) << "published for the slice's processes";
  // Another process of the slice, with nothing of its own enqueued: short or long, its launches
  // wait until the share has paid for the first's.
  for (std::uint64_t now : {kBase + 2 * kMs, kBase + kPeriod + 1 * kMs}) {
    for (std::uint64_t cost : {1 * kMs, 20 * kMs}) {
      LaunchState second;
      LaunchInput in = SliceA(now, cost);
      in.slice = d.publish;
      EXPECT_EQ(DecideLaunch(in, &second).wait_until_ns, kBase + 81 * kMs) << now << " " << cost;
    }
  }
  // Its own later launches publish nothing new to pay for.
  LaunchInput in = SliceA(kBase + kPeriod + 1 * kMs, kMs);
  in.now_ns = kBase + 2 * kPeriod + 1 * kMs;
  in.slice = d.publish;
  const LaunchDecision later = DecideLaunch(in, &first);
  EXPECT_EQ(later.wait_until_ns, 0u);
  EXPECT_EQ(later.publish.paid_until, 0u);
}

// A slice that ran past its share has its window's end brought forward: at 11 ms with 1 ms
// enqueued, a 1 ms launch (middle 12.5 ms) is made in a 12.5 ms window, not in one shortened by
// 0.5 ms; the shortening is at most half the window.
TEST(LaunchWindowTest, RunningPastTheShareEndsTheWindowEarlier) {
  LaunchState state;
  state.queue_end_ns = kBase + 12 * kMs;
  LaunchInput in = SliceA(kBase + 11 * kMs, 1 * kMs);
  LaunchState copy = state;
  EXPECT_EQ(DecideLaunch(in, &copy).wait_until_ns, 0u);
  in.shortening_ns = 500 * kUs;
  copy = state;
  EXPECT_EQ(DecideLaunch(in, &copy).wait_until_ns, kBase + kPeriod);
  // A shortening of the whole window counts as half of it: a launch at 5 ms is still made.
  LaunchState empty;
  LaunchInput early = SliceA(kBase + 5 * kMs, 1 * kMs);
  early.shortening_ns = 12'500 * kUs;
  EXPECT_EQ(DecideLaunch(early, &empty).wait_until_ns, 0u);
  LaunchState empty_too;
  LaunchInput late = SliceA(kBase + 6'500 * kUs, 1 * kMs);
  late.shortening_ns = 12'500 * kUs;
  EXPECT_EQ(DecideLaunch(late, &empty_too).wait_until_ns, kBase + kPeriod);
}

// Work another process of the same slice enqueued runs first: the launch is predicted after it
// and timed with it (contended), as for other slices' work.
TEST(LaunchWindowTest, TheSlicesOtherProcessesWorkMakesALaunchContended) {
  LaunchState state;
  LaunchInput in = SliceA(kBase + 1 * kMs, 1 * kMs);
  in.slice.busy = kBase + 4 * kMs;
  const LaunchDecision d = DecideLaunch(in, &state);
  ASSERT_EQ(d.wait_until_ns, 0u);
  EXPECT_TRUE(d.contended);
  EXPECT_EQ(d.publish.busy, kBase + 5 * kMs);
  EXPECT_EQ(state.queue_end_ns, kBase + 5 * kMs);
  // Its own earlier work (published by itself) is not another's.
  LaunchInput again = SliceA(kBase + 2 * kMs, 1 * kMs);
  again.slice.busy = state.queue_end_ns;
  EXPECT_FALSE(DecideLaunch(again, &state).contended);
}

// The window time a span holds, computed here by walking the span nanosecond-exactly period by
// period (independently of EntitledNs's arithmetic).
std::uint64_t WalkWindows(std::uint64_t from, std::uint64_t to, std::uint64_t period,
                          std::uint64_t start, std::uint64_t end) {
  std::uint64_t total = 0;
  for (std::uint64_t base = from - from % period; base < to; base += period) {
    const std::uint64_t lo = std::max(from, base + start);
    const std::uint64_t hi = std::min(to, base + end);
    if (hi > lo) total += hi - lo;
  }
  return total;
}

TEST(LaunchWindowTest, EntitledTimeIsTheWindowTimeTheSpanHolds) {
  const std::uint64_t start = 12'500 * kUs;
  const std::uint64_t end = kPeriod;
  // Whole periods: the share times the span, wherever they start.
  EXPECT_EQ(EntitledNs(kBase, kBase + 20 * kPeriod, kPeriod, start, end), 20 * 37'500 * kUs);
  EXPECT_EQ(EntitledNs(kBase + 7 * kMs, kBase + 7 * kMs + 20 * kPeriod, kPeriod, start, end),
            20 * 37'500 * kUs);
  // Inside one window, before it, across the period's end.
  EXPECT_EQ(EntitledNs(kBase + 20 * kMs, kBase + 30 * kMs, kPeriod, start, end), 10 * kMs);
  EXPECT_EQ(EntitledNs(kBase + 1 * kMs, kBase + 12 * kMs, kPeriod, start, end), 0u);
  EXPECT_EQ(EntitledNs(kBase + 45 * kMs, kBase + kPeriod + 15 * kMs, kPeriod, start, end),
            5 * kMs + 2'500 * kUs);
  EXPECT_EQ(EntitledNs(kBase + 5 * kMs, kBase + 5 * kMs, kPeriod, start, end), 0u);
  // Spans that start and end anywhere, against the walk.
  std::uint64_t x = 12345;
  for (int i = 0; i < 2000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const std::uint64_t from = kBase + (x >> 20) % (7 * kPeriod);
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const std::uint64_t to = from + (x >> 20) % (30 * kPeriod);
    const std::uint64_t a = (x >> 7) % kPeriod;
    const std::uint64_t b = a + 1 + (x >> 40) % (kPeriod - a);
    ASSERT_EQ(EntitledNs(from, to, kPeriod, a, b), WalkWindows(from, to, kPeriod, a, b))
        << from << " " << to << " [" << a << ", " << b << ")";
  }
}

}  // namespace
}  // namespace gpuslice::shim
