#include "gpuslice/util/duration.h"

#include <array>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace gpuslice::util {
namespace {

constexpr std::array<std::pair<char, std::int64_t>, 5> kUnits = {
    {{'w', 7 * 86400}, {'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1}}};

absl::Status NotADuration(const std::string& text) {
  return absl::InvalidArgumentError(absl::StrCat(
      "'", text, "' is not a duration: use seconds (90) or units, largest first (90s, 30m, 12h, ",
      "7d, 2w, 1h30m)"));
}

// The scale of unit `c` and its rank in kUnits (smaller rank: larger unit); -1 when unknown.
int UnitRank(char c) {
  for (std::size_t i = 0; i < kUnits.size(); ++i) {
    if (kUnits[i].first == c) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

absl::StatusOr<std::int64_t> ParseDuration(const std::string& text, std::int64_t max_s) {
  if (text.empty()) return NotADuration(text);
  std::int64_t total = 0;
  if (absl::ascii_isdigit(static_cast<unsigned char>(text.back()))) {
    if (!absl::SimpleAtoi(text, &total) || text.front() == '+' || text.front() == '-') {
      return NotADuration(text);
    }
  } else {
    int last_rank = -1;
    std::size_t i = 0;
    while (i < text.size()) {
      std::size_t digits = i;
      while (digits < text.size() &&
             absl::ascii_isdigit(static_cast<unsigned char>(text[digits]))) {
        ++digits;
      }
      if (digits == i || digits == text.size()) return NotADuration(text);
      const int rank = UnitRank(text[digits]);
      std::int64_t value = 0;
      if (rank <= last_rank || !absl::SimpleAtoi(std::string(text.substr(i, digits - i)), &value)) {
        return NotADuration(text);
      }
      const std::int64_t scale = kUnits[static_cast<std::size_t>(rank)].second;
      if (value > (std::numeric_limits<std::int64_t>::max() - total) / scale) {
        return NotADuration(text);
      }
      total += value * scale;
      last_rank = rank;
      i = digits + 1;
    }
  }
  if (total <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "': a duration must be positive"));
  }
  if (total > max_s) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is longer than the most allowed, ", DurationText(max_s)));
  }
  return total;
}

absl::StatusOr<std::int64_t> ParseSince(const std::string& text, std::int64_t now_s) {
  std::int64_t epoch = 0;
  if (!text.empty() && text.front() == '@') {
    if (!absl::SimpleAtoi(text.substr(1), &epoch) || epoch < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text, "' is not epoch seconds (@1733000000)"));
    }
  } else if (text.find('-') != std::string::npos) {
    absl::Time time;
    std::string error;
    const std::string& value = text;
    const bool parsed =
        value.find('T') != std::string::npos
            ? absl::ParseTime(absl::RFC3339_full, value, &time, &error)
            : absl::ParseTime("%Y-%m-%d", value, absl::UTCTimeZone(), &time, &error);
    if (!parsed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", text, "' is not a time: use RFC 3339 (2026-12-01 or 2026-12-01T08:30:00Z), ",
          "epoch seconds (@1733000000) or a duration before now (90, 30m, 7d)"));
    }
    epoch = absl::ToUnixSeconds(time);
    if (epoch < 0) return absl::InvalidArgumentError(absl::StrCat("'", text, "' is before 1970"));
  } else {
    absl::StatusOr<std::int64_t> ago = ParseDuration(text);
    if (!ago.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          ago.status().message(), "; or a time: 2026-12-01, 2026-12-01T08:30:00Z, @1733000000"));
    }
    epoch = now_s - *ago;
    if (epoch < 0) epoch = 0;
  }
  if (epoch > now_s) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is in the future"));
  }
  return epoch;
}

std::string DurationText(std::int64_t seconds) {
  if (seconds < 60) return absl::StrCat(seconds, "s");
  std::string out;
  int parts = 0;
  for (const auto& [unit, scale] : kUnits) {
    if (parts == 2 || (parts == 1 && seconds == 0)) break;
    if (seconds >= scale || parts == 1) {
      if (seconds / scale > 0) absl::StrAppend(&out, seconds / scale, std::string(1, unit));
      seconds %= scale;
      ++parts;
    }
  }
  return out;
}

}  // namespace gpuslice::util
