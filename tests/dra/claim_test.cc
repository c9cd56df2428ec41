// Reading a ResourceClaim's allocation and the driver's opaque parameters; quantities; CDI specs;
// the checkpoint's round trip.
#include "gpuslice/dra/claim.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "gpuslice/dra/cdi.h"
#include "gpuslice/dra/checkpoint.h"
#include "gpuslice/dra/resource_model.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra {
namespace {

using nlohmann::json;

TEST(DraQuantity, ParsesEveryFormAsThousandths) {
  EXPECT_EQ(*ParseQuantityMilli("250"), 250000);
  EXPECT_EQ(*ParseQuantityMilli("10Gi"), std::int64_t{10} * 1024 * 1024 * 1024 * 1000);
  EXPECT_EQ(*ParseQuantityMilli("1.5Gi"), std::int64_t{1536} * 1024 * 1024 * 1000);
  EXPECT_EQ(*ParseQuantityMilli("1500m"), 1500);
  EXPECT_EQ(*ParseQuantityMilli("1k"), 1000000);
  EXPECT_EQ(*ParseQuantityMilli("2e3"), 2000000);
  EXPECT_EQ(*ParseQuantityMilli("1n"), 1);  // finer than a thousandth rounds up
  EXPECT_EQ(*ParseQuantityMilli("+7"), 7000);
  EXPECT_EQ(*ParseQuantityMilli("0.25"), 250);
  for (const char* bad :
       {"", "-1", "Gi", "10GB", "1.2.3", "9Ei", "99999999999999999999", "1e9999", "abc"}) {
    EXPECT_FALSE(ParseQuantityMilli(bad).ok()) << bad;
  }
}

json Claim(const json& results, const json& config = json::array()) {
  return {{"metadata", {{"uid", "u1"}}},
          {"status", {{"allocation", {{"devices", {{"results", results}, {"config", config}}}}}}}};
}

TEST(DraClaim, TakesOurResultsWithSubrequestsStrippedAndConfigsInOrder) {
  const json results = json::array(
      {{{"request", "gpu/small"},
        {"driver", "gpu.gpuslice.io"},
        {"pool", "n"},
        {"device", "d1"},
        {"shareID", "0b9e7a3c-1111-4e2f-9a6b-2c3d4e5f6a7b"},
        {"consumedCapacity", {{"compute", "250"}, {"memory", "10Gi"}}}},
       {{"request", "nic"}, {"driver", "net.example.com"}, {"pool", "other"}, {"device", "x"}}});
  auto params = [](int milli) {
    return json{
        {"apiVersion", kConfigApiVersion}, {"kind", kConfigKind}, {"computeShareMilli", milli}};
  };
  const json config = json::array(
      {{{"source", "FromClaim"},
        {"opaque", {{"driver", "gpu.gpuslice.io"}, {"parameters", params(100)}}}},
       {{"source", "FromClass"},
        {"opaque", {{"driver", "gpu.gpuslice.io"}, {"parameters", params(200)}}}},
       {{"source", "FromClaim"},
        {"requests", {"other"}},
        {"opaque", {{"driver", "gpu.gpuslice.io"}, {"parameters", params(50)}}}},
       {{"source", "FromClaim"}, {"opaque", {{"driver", "net.example.com"}, {"parameters", 7}}}}});
  absl::StatusOr<std::vector<AllocatedDevice>> devices =
      ReadAllocation(Claim(results, config), "u1", "gpu.gpuslice.io", "n");
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->size(), 1u);
  const AllocatedDevice& d = (*devices)[0];
  EXPECT_EQ(d.request, "gpu");
  EXPECT_EQ(d.device, "d1");
  EXPECT_EQ(d.compute_milli, 250);
  EXPECT_EQ(d.memory_mib, 10240);
  EXPECT_EQ(d.config.compute_share_milli, 100);  // FromClaim beats FromClass; "other" not ours
}

TEST(DraClaim, RefusesWhatItCannotTrust) {
  const json ours = {
      {"request", "r"}, {"driver", "gpu.gpuslice.io"}, {"pool", "n"}, {"device", "d"}};
  EXPECT_EQ(
      ReadAllocation(Claim(json::array({ours})), "u2", "gpu.gpuslice.io", "n").status().code(),
      absl::StatusCode::kFailedPrecondition);  // replaced
  EXPECT_EQ(ReadAllocation(json{{"metadata", {{"uid", "u1"}}}}, "u1", "gpu.gpuslice.io", "n")
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);  // not allocated
  EXPECT_EQ(ReadAllocation(Claim(json::array()), "u1", "gpu.gpuslice.io", "n").status().code(),
            absl::StatusCode::kFailedPrecondition);  // nothing of ours
  json bad_capacity = ours;
  bad_capacity["consumedCapacity"] = {{"memory", "ten"}};
  EXPECT_EQ(ReadAllocation(Claim(json::array({bad_capacity})), "u1", "gpu.gpuslice.io", "n")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  for (const json& parameters :
       {json("text"), json{{"kind", kConfigKind}},
        json{{"apiVersion", kConfigApiVersion}, {"kind", kConfigKind}, {"extra", 1}},
        json{{"apiVersion", kConfigApiVersion}, {"kind", kConfigKind}, {"computeShareMilli", 0}},
        json{{"apiVersion", kConfigApiVersion}, {"kind", kConfigKind}, {"computeShareMilli", 1001}},
        json{{"apiVersion", kConfigApiVersion}, {"kind", kConfigKind}, {"vramLimitMiB", "1Gi"}}}) {
    const json config =
        json::array({{{"source", "FromClaim"},
                      {"opaque", {{"driver", "gpu.gpuslice.io"}, {"parameters", parameters}}}}});
    absl::Status s =
        ReadAllocation(Claim(json::array({ours}), config), "u1", "gpu.gpuslice.io", "n").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << parameters.dump();
    EXPECT_NE(s.message().find("config[0]"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(IsLowercaseUuid("0b9e7a3c-1111-4e2f-9a6b-2c3d4e5f6a7b"));
  EXPECT_FALSE(IsLowercaseUuid("0B9E7A3C-1111-4E2F-9A6B-2C3D4E5F6A7B"));
}

TEST(DraCdi, SpecNamesEachDeviceAfterItsClaim) {
  CdiDevice d;
  d.device = "gpu-0-mig-1g-10gb-0";
  d.env = {{"NVIDIA_VISIBLE_DEVICES", "MIG-abc"}};
  d.device_nodes = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}};
  d.mounts = {{"/usr/lib/x.so", "/usr/lib/x.so", true}};
  const json spec = CdiSpec("uid-1", {d});
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");
  EXPECT_EQ(spec["kind"], "gpu.gpuslice.io/claim");
  EXPECT_EQ(spec["devices"][0]["name"], "uid-1-gpu-0-mig-1g-10gb-0");
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["env"][0], "NVIDIA_VISIBLE_DEVICES=MIG-abc");
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["mounts"][0]["options"][0], "ro");
  EXPECT_EQ(CdiDeviceId("uid-1", d.device), "gpu.gpuslice.io/claim=uid-1-gpu-0-mig-1g-10gb-0");
  const std::string dir = std::filesystem::temp_directory_path() / "dra-cdi-test";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(WriteCdiSpec(dir, "uid-1", {d}).ok());
  EXPECT_TRUE(std::filesystem::exists(CdiSpecPath(dir, "uid-1")));
  ASSERT_TRUE(RemoveCdiSpec(dir, "uid-1").ok());
  EXPECT_TRUE(RemoveCdiSpec(dir, "uid-1").ok());
  std::filesystem::remove_all(dir);
}

TEST(DraCheckpoint, RoundTripsAndRefusesDamage) {
  const std::string path = std::filesystem::temp_directory_path() / "dra-checkpoint-test.json";
  std::filesystem::remove(path);
  EXPECT_TRUE(LoadCheckpoint(path)->claims.empty());
  Checkpoint cp;
  DeviceRecord r;
  r.device = "gpu-0-mig-1g-10gb-0";
  r.kind = DeviceKind::kShared;
  r.gi = 3;
  r.compute_milli = 250;
  cp.claims["u"] = {"ns", "name", ClaimPhase::kUnpreparing, {r}};
  ASSERT_TRUE(SaveCheckpoint(path, cp).ok());
  EXPECT_EQ(*LoadCheckpoint(path), cp);
  std::ofstream(path) << R"({"version": 1, "claims": {"u": {"phase": "bogus"}}})";
  EXPECT_EQ(LoadCheckpoint(path).status().code(), absl::StatusCode::kDataLoss);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace gpuslice::dra
