// The JSON forms of a lease's claims and bound devices (gpuslice/alloc/wire.h): what is written
// reads back the same, and reading whatever a store row or an API answer holds never throws.
#include "gpuslice/alloc/wire.h"

#include <gtest/gtest.h>

#include <vector>

namespace gpuslice::alloc {
namespace {

using nlohmann::json;

TEST(WireTest, ClaimsAndBoundDevicesReadBackAsWritten) {
  place::GpuClaim mig;
  mig.gpu = 1;
  mig.milli = 142;
  mig.mig_profile = 0;
  mig.mig_start = 6;
  place::GpuClaim share;
  share.milli = 250;
  share.vram_mib = 4096;
  const std::vector<place::GpuClaim> claims = {mig, share};
  const std::vector<place::GpuClaim> read = ClaimsFromJson(ClaimsToJson(claims));
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].gpu, 1);
  EXPECT_EQ(read[0].mig_start, 6);
  EXPECT_EQ(read[1].vram_mib, 4096);
  EXPECT_FALSE(read[1].whole);

  BoundDevice device;
  device.uuid = "MIG-7d9b1c2e-0000-4000-8000-000000000000";
  device.gpu_uuid = "GPU-7d9b1c2e-0000-4000-8000-000000000000";
  device.gpu_index = 0;
  device.gi = 7;
  device.ci = 0;
  EXPECT_EQ(BoundFromJson(BoundToJson({device})), std::vector<BoundDevice>{device});
}

// Found by fuzz/fuzz_store_rows: a lease row whose claims were `[1]` or `[{"gpu": 1e300}]` made
// Service::Open throw out of ClaimsFromJson (json type_error 306) or convert a double past int's
// range (undefined behaviour); `gpuslice agent` reads the same lists from the service's answers.
TEST(WireTest, ElementsOfAnotherShapeOrTypeAreLeftOutOrDefaultedWithoutThrowing) {
  std::vector<place::GpuClaim> claims;
  ASSERT_NO_THROW(claims = ClaimsFromJson(json::parse(
                      R"([1, "x", null, [2], {"gpu": 1e300, "milli": "250", "vram_mib": -1,
                          "mig_profile": 4294967296, "mig_start": 18446744073709551615,
                          "whole": 1}])")));
  ASSERT_EQ(claims.size(), 1u);  // only the object
  EXPECT_EQ(claims[0].gpu, 0);   // not a whole number
  EXPECT_EQ(claims[0].milli, 0);
  EXPECT_EQ(claims[0].vram_mib, -1);     // as written: the placement engine judges it
  EXPECT_EQ(claims[0].mig_profile, -1);  // past int's range
  EXPECT_EQ(claims[0].mig_start, -1);
  EXPECT_FALSE(claims[0].whole);
  EXPECT_TRUE(ClaimsFromJson(json::parse("{}", nullptr, false)).empty());
  EXPECT_TRUE(ClaimsFromJson(json::parse("not json", nullptr, false)).empty());

  std::vector<BoundDevice> bound;
  ASSERT_NO_THROW(bound = BoundFromJson(json::parse(
                      R"([true, {"uuid": 5, "gpu_uuid": ["GPU-1"], "gpu_index": 2.5, "gi": 3,
                          "share_milli": 9223372036854775807}])")));
  ASSERT_EQ(bound.size(), 1u);
  EXPECT_EQ(bound[0].uuid, "");
  EXPECT_EQ(bound[0].gpu_uuid, "");
  EXPECT_EQ(bound[0].gpu_index, -1);
  EXPECT_EQ(bound[0].gi, 3);
  EXPECT_EQ(bound[0].share_milli, 0);
}

}  // namespace
}  // namespace gpuslice::alloc
