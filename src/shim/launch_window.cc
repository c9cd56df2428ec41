#include "launch_window.h"

#include <algorithm>

namespace gpuslice::shim {

LaunchDecision DecideLaunch(const LaunchInput& in, LaunchState* state) {
  LaunchDecision decision;
  const std::uint64_t now = in.now_ns;
  const std::uint64_t cost = in.cost_ns;
  const std::uint64_t length = in.window_end_ns - in.window_start_ns;
  const std::uint64_t extended_end =
      in.window_end_ns + in.extension_ns - std::min(in.shortening_ns, length / 2);
  std::uint64_t period_start = now - now % in.period_ns;
  std::uint64_t phase = now - period_start;
  if (phase < in.window_start_ns && phase + in.period_ns < extended_end) {
    // The period's last window, extended past the period's end.
    period_start -= in.period_ns;
    phase += in.period_ns;
  }
  const std::uint64_t next_window = period_start + in.period_ns + in.window_start_ns;
  const std::uint64_t own_end_at = period_start + in.window_end_ns;
  const bool in_own = phase >= in.window_start_ns && phase < in.window_end_ns;
  const std::uint64_t queue = std::max(state->queue_end_ns, now);
  // After a long launch of any of the slice's processes.
  const std::uint64_t paid_before = std::max(state->paid_until_ns, in.slice.paid_until);
  std::uint64_t paid_until = paid_before;

  if (now < paid_until) {
    decision.wait_until_ns = paid_until;
  } else if (cost > length) {
    // Longer than the window: whenever the slice's own work is done (and the share has paid for
    // the last such launch); then the share pays for this one.
    if (queue > now) {
      decision.wait_until_ns = queue;
    } else {
      paid_until = now + cost * 1000 / std::max<std::uint64_t>(in.share_milli, 1);
    }
  } else if (phase < in.window_start_ns) {
    decision.wait_until_ns = period_start + in.window_start_ns;
  } else if (phase >= extended_end) {
    decision.wait_until_ns = next_window;
  } else if (!in_own && in.others.busy > own_end_at) {
    decision.wait_until_ns = next_window;  // another slice has launched: the extension is over
  } else if (in_own && in.others.overrun > queue && in.others.overrun - now <= length / 2) {
    decision.wait_until_ns = in.others.overrun;
  } else if (queue + cost / 2 > period_start + extended_end) {
    decision.wait_until_ns = next_window;  // its middle would fall past the window
  }
  if (decision.wait_until_ns != 0) return decision;

  // Work of other slices, or of the slice's other processes, predicted to run past this
  // process's own queue: the launch starts after it and is timed with it.
  const std::uint64_t ahead = std::max(in.others.busy, in.slice.busy);
  std::uint64_t queue_end = queue + cost;
  if (ahead > queue) {
    decision.contended = true;
    queue_end = ahead + cost;  // it starts after their work
  }
  decision.publish.busy = queue_end;
  if (paid_until > paid_before) decision.publish.paid_until = paid_until;
  if (in_own && cost <= length)
    decision.publish.overrun = std::min(queue_end, own_end_at + cost / 2);
  state->queue_end_ns = queue_end;
  state->paid_until_ns = paid_until;
  return decision;
}

namespace {

// The window time in [0, t).
std::uint64_t WindowTimeBefore(std::uint64_t t, std::uint64_t period, std::uint64_t start,
                               std::uint64_t end) {
  const std::uint64_t phase = t % period;
  const std::uint64_t in_period = phase <= start ? 0 : std::min(phase, end) - start;
  return t / period * (end - start) + in_period;
}

}  // namespace

std::uint64_t EntitledNs(std::uint64_t from_ns, std::uint64_t to_ns, std::uint64_t period_ns,
                         std::uint64_t window_start_ns, std::uint64_t window_end_ns) {
  if (to_ns <= from_ns || period_ns == 0 || window_end_ns <= window_start_ns) return 0;
  return WindowTimeBefore(to_ns, period_ns, window_start_ns, window_end_ns) -
         WindowTimeBefore(from_ns, period_ns, window_start_ns, window_end_ns);
}

}  // namespace gpuslice::shim
