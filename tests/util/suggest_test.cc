// "Did you mean" (gpuslice/util/suggest.h): close names, prefixes, nothing for far ones.
#include "gpuslice/util/suggest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpuslice::util {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(Suggest, EditDistanceCountsEdits) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("relase", "release"), 1u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("abc", ""), 3u);
}

TEST(Suggest, ClosestFirstAndPrefixes) {
  const std::vector<std::string> commands = {"acquire", "leases", "renew", "release", "cancel",
                                             "queue",   "audit",  "admin", "run",     "lease"};
  EXPECT_THAT(Closest("relase", commands), ElementsAre("release", "lease"));
  EXPECT_THAT(Closest("Leases", commands), ElementsAre("lease"));
  EXPECT_THAT(Closest("aqcuire", commands), ElementsAre("acquire"));
  EXPECT_THAT(Closest("adm", commands), ElementsAre("admin"));  // audit is 3 edits away
  EXPECT_THAT(Closest("xyzzy", commands), IsEmpty());
  EXPECT_THAT(Closest("smal", {"small", "medium", "large", "full"}), ElementsAre("small"));
  EXPECT_THAT(Closest("a", commands), IsEmpty());  // too short to be anything
  EXPECT_THAT(Closest("lea", commands, 1), ElementsAre("leases"));
}

TEST(Suggest, DidYouMeanReadsAsASentence) {
  EXPECT_EQ(DidYouMean({}), "");
  EXPECT_EQ(DidYouMean({"a"}), "did you mean 'a'?");
  EXPECT_EQ(DidYouMean({"a", "b"}), "did you mean 'a' or 'b'?");
  EXPECT_EQ(DidYouMean({"a", "b", "c"}), "did you mean 'a', 'b' or 'c'?");
}

}  // namespace
}  // namespace gpuslice::util
