// When a slice with a compute share may launch (the throttle's turn-taking, src/shim/throttle.h),
// as a pure function of the clock, the slice's window, the work it has enqueued and what the other
// slices on the GPU published. No clock, no I/O: the throttle reads those and applies the answer.
//
// The rules, for a launch predicted to take `cost_ns` of GPU time:
//   * Each period of kSchedulePeriodNs, the slice may launch in its window [window_start,
//     window_end) and in the feedback's extension past it (`extension_ns`); the extension of the
//     period's last window runs on into the next period. A slice that ran past its share has its
//     window's end brought forward instead (`shortening_ns`, at most half the window): the
//     middle rule alone lets a window that holds a whole number of kernels and a half take one
//     more every time.
//   * Inside the window a launch is made while its predicted middle (after the work the slice
//     already enqueued) falls before the end of the window plus extension: what the last launch
//     runs past the end is, on average, what waiting would have left unused.
//   * The other slices' last launches of their windows run past them (their overrun). A launch
//     queued behind that work, or sharing the GPU with it, would have it timed as its own; so
//     inside its own window a slice first waits for the others' published overrun to end,
//     unless that is more than half its window away (sharing the GPU then beats losing it).
//   * Past its own window (in the extension) a slice launches only until another slice has
//     enqueued work ending after that window's end, and it is not waited for: the extension
//     takes time the next window's owner leaves unused, never the owner's share.
//   * A launch longer than the whole window runs at once (inside the window or its extension)
//     when the slice has nothing enqueued, and the slice then skips windows until its share has
//     paid for it (`paid_until_ns`); the middle rule would let it take up to twice its window.
//     The wait holds all the slice's processes (published: `slice.paid_until`).
//   * A launch that still meets other slices' enqueued work, or work of the slice's other
//     processes, is `contended`: it is predicted to start after that work, and its measured time
//     is not to be trusted beyond its estimate (the GPU runs one context at a time, so the
//     events around it also time the work queued before it).
//   * Launching publishes when its work is predicted to end (`busy`) and, inside the window, the
//     overrun others wait for: no later than the window's end plus half the launch's cost.
#pragma once

#include <cstdint>

namespace gpuslice::shim {

// When the work a slice enqueued is predicted to end (CLOCK_MONOTONIC ns; 0: none): all of it,
// and what was launched inside the slice's own window; and, after a launch longer than the
// slice's window, until when the slice launches nothing.
struct WorkEnds {
  std::uint64_t busy = 0;
  std::uint64_t overrun = 0;
  std::uint64_t paid_until = 0;
};

// What a process carries from one launch to the next.
struct LaunchState {
  std::uint64_t queue_end_ns = 0;   // when the work this process enqueued is predicted to end
  std::uint64_t paid_until_ns = 0;  // after a launch longer than the window: skip until then
                                    // (the slice's, published, may be later)
};

struct LaunchInput {
  std::uint64_t now_ns = 0;
  std::uint64_t period_ns = 0;
  std::uint64_t window_start_ns = 0;  // offsets in the period
  std::uint64_t window_end_ns = 0;
  std::uint64_t extension_ns = 0;   // the feedback's, past window_end_ns
  std::uint64_t shortening_ns = 0;  // the feedback's, before window_end_ns (at most half the
                                    // window; 0 when extension_ns is not)
  std::uint64_t cost_ns = 0;        // the launch's estimated GPU time
  std::uint64_t share_milli = 0;    // 1..1000
  WorkEnds others;                  // the latest the other slices published
  WorkEnds slice;                   // what this slice's processes published (busy, paid_until)
};

struct LaunchDecision {
  std::uint64_t wait_until_ns = 0;  // 0: launch now; else look again then
  // When launching now:
  bool contended = false;
  WorkEnds publish;
};

// Launching now updates `state`; waiting leaves it as it was.
LaunchDecision DecideLaunch(const LaunchInput& in, LaunchState* state);

// The time in [from_ns, to_ns) that falls in the slice's windows [window_start_ns, window_end_ns)
// of every period: what its share entitles it to over that span (the feedback's target). Over
// whole periods it is the share times the span; over a span that starts or ends inside a period
// it counts only the window time the span holds.
std::uint64_t EntitledNs(std::uint64_t from_ns, std::uint64_t to_ns, std::uint64_t period_ns,
                         std::uint64_t window_start_ns, std::uint64_t window_end_ns);

}  // namespace gpuslice::shim
