// The one duration syntax of the gpuslice command, and the one way to say "since when".
//
// A duration is a whole number of seconds ("90") or one or more number-unit pairs with the units
// s, m, h, d and w, largest first ("90s", "30m", "12h", "7d", "1h30m", "2w"). A bare number is
// always seconds, never a date: `--since 60` is a minute ago in every command.
// A point in time (ParseSince) is a duration before now, a date or time in RFC 3339
// ("2026-12-01", "2026-12-01T08:30:00Z", "2026-12-01T08:30:00+01:00") or epoch seconds written
// "@1733000000".
//
// Contract: pure (the caller passes now), no exceptions; failures are InvalidArgument with a
// message that names the text and shows the accepted forms. Zero and negative durations, numbers
// that overflow and durations above `max_s` are refused.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gpuslice::util {

inline constexpr std::int64_t kMaxDurationS = 100LL * 365 * 86400;  // a century

// Seconds in `text`, 1 to max_s.
absl::StatusOr<std::int64_t> ParseDuration(const std::string& text,
                                           std::int64_t max_s = kMaxDurationS);

// Epoch seconds of `text`; times after now_s are refused, as are those before the epoch.
absl::StatusOr<std::int64_t> ParseSince(const std::string& text, std::int64_t now_s);

// "90s", "30m", "1h30m", "7d", "2d04h": the largest two units, the form ParseDuration reads back
// (whole seconds below a minute are kept exactly; above, the smaller units are dropped).
std::string DurationText(std::int64_t seconds);

}  // namespace gpuslice::util
