// The one duration syntax (gpuslice/util/duration.h): seconds, units largest first, compound
// forms, the refusals, and "since" as a duration ago, an RFC 3339 time or @epoch.
#include "gpuslice/util/duration.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpuslice::util {
namespace {

using ::testing::HasSubstr;

std::int64_t Seconds(const std::string& text) {
  absl::StatusOr<std::int64_t> value = ParseDuration(text);
  EXPECT_TRUE(value.ok()) << text << ": " << value.status();
  return value.value_or(-1);
}

TEST(Duration, BareNumbersAreSecondsAndUnitsScale) {
  EXPECT_EQ(Seconds("60"), 60);
  EXPECT_EQ(Seconds("90s"), 90);
  EXPECT_EQ(Seconds("30m"), 1800);
  EXPECT_EQ(Seconds("12h"), 43200);
  EXPECT_EQ(Seconds("7d"), 604800);
  EXPECT_EQ(Seconds("2w"), 1209600);
  EXPECT_EQ(Seconds("1h30m"), 5400);
  EXPECT_EQ(Seconds("1d2h3m4s"), 86400 + 7200 + 180 + 4);
}

TEST(Duration, MalformedZeroNegativeAndTooLongAreRefused) {
  for (const std::string text : {"", "x", "7x", "h", "1h30", "30m1h", "1h1h", "-5", "+5", "1.5h",
                                 "5 m", "99999999999999999999", "9999999999999999w"}) {
    absl::StatusOr<std::int64_t> value = ParseDuration(text);
    EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
  EXPECT_THAT(ParseDuration("0").status().message(), HasSubstr("must be positive"));
  EXPECT_THAT(ParseDuration("0s").status().message(), HasSubstr("must be positive"));
  EXPECT_THAT(ParseDuration("7x").status().message(), HasSubstr("'7x' is not a duration"));
  EXPECT_THAT(ParseDuration("91d", 90 * 86400).status().message(),
              HasSubstr("longer than the most allowed, 12w6d"));
  EXPECT_EQ(ParseDuration("90d", 90 * 86400).value_or(-1), 90 * 86400);
}

TEST(Duration, TextReadsBack) {
  EXPECT_EQ(DurationText(42), "42s");
  EXPECT_EQ(DurationText(90), "1m30s");
  EXPECT_EQ(DurationText(3600), "1h");
  EXPECT_EQ(DurationText(3 * 3600 + 5 * 60 + 7), "3h5m");
  EXPECT_EQ(DurationText(2 * 86400 + 4 * 3600), "2d4h");
  for (std::int64_t s : {1, 59, 60, 61, 3599, 3600, 86400, 604800}) {
    const std::string text = DurationText(s);
    EXPECT_TRUE(ParseDuration(text).ok()) << text;
  }
}

TEST(Since, ADurationIsThatLongBeforeNowNeverAnEpoch) {
  constexpr std::int64_t kNow = 1'800'000'000;
  EXPECT_EQ(ParseSince("60", kNow).value_or(-1), kNow - 60);
  EXPECT_EQ(ParseSince("7d", kNow).value_or(-1), kNow - 7 * 86400);
  EXPECT_EQ(ParseSince("@1733000000", kNow).value_or(-1), 1733000000);
  EXPECT_EQ(ParseSince("2026-12-01", kNow).value_or(-1), 1796083200);
  EXPECT_EQ(ParseSince("2026-12-01T08:30:00Z", kNow).value_or(-1), 1796083200 + 8 * 3600 + 1800);
  EXPECT_EQ(ParseSince("2026-12-01T08:30:00+01:00", kNow).value_or(-1),
            1796083200 + 7 * 3600 + 1800);
  // Longer ago than the epoch: from the beginning.
  EXPECT_EQ(ParseSince("100w", 1000).value_or(-1), 0);
}

TEST(Since, FutureMalformedAndPreEpochAreRefused) {
  constexpr std::int64_t kNow = 1'800'000'000;
  EXPECT_THAT(ParseSince("@1900000000", kNow).status().message(), HasSubstr("in the future"));
  EXPECT_THAT(ParseSince("2030-01-01", kNow).status().message(), HasSubstr("in the future"));
  EXPECT_THAT(ParseSince("1969-12-31", kNow).status().message(), HasSubstr("before 1970"));
  for (const std::string text : {"", "@", "@x", "@-5", "2026-13-01", "yesterday", "7x"}) {
    EXPECT_EQ(ParseSince(text, kNow).status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

}  // namespace
}  // namespace gpuslice::util
