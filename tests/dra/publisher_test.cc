// SlicePublisher (gpuslice/dra/publisher.h) against the stand-in API server
// (tests/dra/apiserver_standin.h), which validates every slice with its own rules for Kubernetes
// 1.34 and 1.35: first publication, republishing, generations, wipes, conflicts, a server that is
// down, fields dropped by disabled feature gates; and the quantity comparison.
#include "gpuslice/dra/publisher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "dra/apiserver_standin.h"
#include "gpuslice/dra/backoff.h"
#include "gpuslice/dra/pool.h"
#include "gpuslice/hw/catalog.h"

namespace gpuslice::dra {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing_standin::ApiServerOptions;
using testing_standin::ApiServerStandin;
using testing_standin::LoggedRequest;

constexpr char kNode[] = "node-a";
constexpr char kNodeUid[] = "6d3f1c2e-0000-4000-8000-00000000000a";

std::vector<GpuInfo> Gpus(const std::string& model, int count) {
  std::vector<GpuInfo> out;
  for (int i = 0; i < count; ++i) {
    GpuInfo gpu;
    gpu.index = i;
    gpu.uuid = "GPU-" + std::to_string(1000 + i);
    gpu.model = hw::Catalog::Builtin().Find(model);
    gpu.driver_version = "550.54.15";
    out.push_back(gpu);
  }
  return out;
}

std::vector<ResourceSlice> Pool(int gpus, SliceLayout layout) {
  absl::StatusOr<std::vector<ResourceSlice>> pool =
      BuildPool(Gpus("H100-80GB", gpus), {kNode, 1, layout});
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? *pool : std::vector<ResourceSlice>();
}

// The writes in the log: "DELETE", "PUT", "POST" in order.
std::vector<std::string> Writes(const std::vector<LoggedRequest>& log) {
  std::vector<std::string> out;
  for (const LoggedRequest& r : log) {
    if (r.method != "GET") out.push_back(r.method);
  }
  return out;
}

class PublisherTest : public ::testing::TestWithParam<std::string> {
 protected:
  PublisherTest() : standin_(ApiServerOptions{GetParam(), "", {{kNode, kNodeUid}}, {}}) {}

  SliceLayout Layout() {
    absl::StatusOr<std::string> version = api_.GitVersion();
    EXPECT_TRUE(version.ok()) << version.status();
    return LayoutFor(version.value_or(""));
  }
  k8s::KubeApiClient Client() {
    k8s::KubeApiOptions options;
    options.server = standin_.url();
    options.token_file = "";
    options.timeout_s = 2;
    return *k8s::KubeApiClient::Create(options);
  }
  // Every stored slice has this generation and count.
  void ExpectPool(std::int64_t generation, size_t count) {
    const std::vector<json> slices = standin_.Slices();
    ASSERT_EQ(slices.size(), count);
    for (const json& slice : slices) {
      EXPECT_EQ(slice["spec"]["pool"]["generation"], generation);
      EXPECT_EQ(slice["spec"]["pool"]["resourceSliceCount"], count);
      EXPECT_EQ(slice["metadata"]["ownerReferences"][0]["uid"], kNodeUid);
    }
  }

  ApiServerStandin standin_;
  DraApi api_{Client()};
  SlicePublisher publisher_{&api_, kNode};
};

INSTANTIATE_TEST_SUITE_P(Versions, PublisherTest, ::testing::Values("v1.34.2", "v1.35.0"));

TEST_P(PublisherTest, FirstPublishIsAcceptedWithGenerationOne) {
  const SliceLayout layout = Layout();
  EXPECT_EQ(layout, GetParam() == "v1.34.2" ? SliceLayout::kCombined : SliceLayout::kSplit);
  const std::vector<ResourceSlice> pool = Pool(2, layout);
  ASSERT_EQ(pool.size(), layout == SliceLayout::kSplit ? 3u : 2u);
  standin_.ClearLog();
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  ExpectPool(1, pool.size());
  EXPECT_EQ(Writes(standin_.log()), std::vector<std::string>(pool.size(), "POST"));
  // Names sort in pool order, every device arrived.
  std::set<std::string> sent, stored;
  for (const ResourceSlice& slice : pool) {
    for (const Device& device : slice.devices) sent.insert(device.name);
  }
  const std::vector<json> slices = standin_.Slices();
  for (size_t i = 0; i < slices.size(); ++i) {
    EXPECT_THAT(slices[i]["metadata"]["name"].get<std::string>(),
                ::testing::StartsWith("0000" + std::to_string(i) + "-gpu.gpuslice.io-node-a-"));
    for (const json& device : slices[i]["spec"].value("devices", json::array())) {
      stored.insert(device["name"].get<std::string>());
    }
  }
  EXPECT_EQ(sent, stored);
  EXPECT_TRUE(stored.contains("gpu-1-mig-7g-80gb-0"));
}

TEST_P(PublisherTest, RepublishingUnchangedWritesNothing) {
  std::vector<ResourceSlice> pool = Pool(2, Layout());
  pool.back().devices.back().capacity["memory"].value = Mebibytes(81920);
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  // The server canonicalised the quantity ("81920Mi" -> "80Gi"): values are compared, not text.
  EXPECT_EQ(standin_.Slices().back()["spec"]["devices"].back()["capacity"]["memory"]["value"],
            "80Gi");
  standin_.ClearLog();
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  EXPECT_TRUE(Writes(standin_.log()).empty());
  EXPECT_EQ(standin_.log().size(), 1u);  // the list
  ExpectPool(1, pool.size());
}

TEST_P(PublisherTest, OneChangedSliceKeepsTheGeneration) {
  std::vector<ResourceSlice> pool = Pool(2, Layout());
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  Device& device = pool.back().devices.front();
  device.taints.push_back({"gpu.gpuslice.io/unhealthy", "xid-79", "NoSchedule"});
  standin_.ClearLog();
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  EXPECT_EQ(Writes(standin_.log()), std::vector<std::string>{"PUT"});
  ExpectPool(1, pool.size());
  const json stored = standin_.Slices().back();
  const json taint = stored["spec"]["devices"][0]["taints"][0];
  EXPECT_EQ(taint["key"], "gpu.gpuslice.io/unhealthy");
  ASSERT_TRUE(taint.contains("timeAdded"));  // set by the server, ignored when comparing
  standin_.ClearLog();
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  EXPECT_TRUE(Writes(standin_.log()).empty());
  // Another change of that slice: the stored timeAdded of the kept taint is sent back.
  device.attributes["note"] = std::string("changed");
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  EXPECT_EQ(standin_.log().back().body["spec"]["devices"][0]["taints"][0]["timeAdded"],
            taint["timeAdded"]);
  ExpectPool(1, pool.size());
}

TEST_P(PublisherTest, MoreSlicesBumpTheGenerationEverywhereAndObsoleteGoFirst) {
  const SliceLayout layout = Layout();
  const std::vector<ResourceSlice> one = Pool(1, layout);
  ASSERT_TRUE(publisher_.Publish(one, kNodeUid).ok());
  ExpectPool(1, one.size());
  // A slice of this node and driver named as the Go helper before v0.36 named them: obsolete.
  json stale = ToJson(one.front(), kNodeUid);
  stale["metadata"]["generateName"] = "node-a-gpu.gpuslice.io-";
  ASSERT_TRUE(api_.CreateSlice(stale).ok());
  standin_.ClearLog();
  const std::vector<ResourceSlice> two = Pool(2, layout);
  ASSERT_GT(two.size(), one.size());
  ASSERT_TRUE(publisher_.Publish(two, kNodeUid).ok());
  ExpectPool(2, two.size());
  std::vector<std::string> expected = {"DELETE"};
  expected.insert(expected.end(), one.size(), "PUT");
  expected.insert(expected.end(), two.size() - one.size(), "POST");
  EXPECT_EQ(Writes(standin_.log()), expected);
  // Back to one GPU: the second GPU's slices are obsolete; the rest is rewritten (the count
  // changed), at a new generation unless only one slice is left to change.
  standin_.ClearLog();
  ASSERT_TRUE(publisher_.Publish(one, kNodeUid).ok());
  ExpectPool(one.size() > 1 ? 3 : 2, one.size());
  expected = std::vector<std::string>(two.size() - one.size(), "DELETE");
  expected.insert(expected.end(), one.size(), "PUT");
  EXPECT_EQ(Writes(standin_.log()), expected);
}

TEST_P(PublisherTest, SlicesWipedByTheKubeletAreCreatedAgain) {
  const std::vector<ResourceSlice> pool = Pool(2, Layout());
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  EXPECT_EQ(standin_.WipeSlices(kNode), static_cast<int>(pool.size()));
  standin_.ClearLog();
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  EXPECT_EQ(Writes(standin_.log()), std::vector<std::string>(pool.size(), "POST"));
  ExpectPool(1, pool.size());
  // Half a wipe (one slice left): the rest is created at a new generation.
  standin_.WipeSlices(kNode);
  ASSERT_TRUE(api_.CreateSlice(ToJson(pool.front(), kNodeUid)).ok());
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  ExpectPool(2, pool.size());
}

TEST_P(PublisherTest, AConflictIsRetriedOnceThenAborted) {
  std::vector<ResourceSlice> pool = Pool(2, Layout());
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  const std::string name = standin_.Slices().back()["metadata"]["name"];
  pool.back().devices.front().attributes["note"] = std::string("one");
  standin_.BeforeNext("PUT", [&] { standin_.TouchSlice(name); });
  standin_.ClearLog();
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  EXPECT_EQ(standin_.Count("PUT", 409), 1);
  EXPECT_EQ(standin_.Count("PUT", 200), 1);
  EXPECT_EQ(standin_.Count("GET"), 2);  // listed again
  EXPECT_EQ(standin_.Slice(name).value()["spec"]["devices"][0]["attributes"]["note"]["string"],
            "one");
  // Someone else keeps writing: Aborted after the second conflict.
  pool.back().devices.front().attributes["note"] = std::string("two");
  standin_.BeforeNext("PUT", [&] { standin_.TouchSlice(name); });
  standin_.BeforeNext("PUT", [&] { standin_.TouchSlice(name); });
  EXPECT_EQ(publisher_.Publish(pool, kNodeUid).code(), absl::StatusCode::kAborted);
  // Once the other writer stops, the next call goes through.
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
}

TEST_P(PublisherTest, DuplicatesOfAnIndexAreDeleted) {
  const std::vector<ResourceSlice> pool = Pool(2, Layout());
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  ASSERT_TRUE(api_.CreateSlice(ToJson(pool.front(), kNodeUid)).ok());  // a second index 0
  standin_.ClearLog();
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  EXPECT_EQ(Writes(standin_.log()), std::vector<std::string>{"DELETE"});
  ExpectPool(1, pool.size());
}

TEST_P(PublisherTest, ADownServerIsAnErrorAndTheBackoffGrows) {
  const std::vector<ResourceSlice> pool = Pool(2, Layout());
  Backoff backoff;
  standin_.Stop();
  absl::Status status = publisher_.Publish(pool, kNodeUid);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(backoff.After(status), std::chrono::milliseconds(500));
  standin_.Start();
  standin_.FailNext(1, 503);
  status = publisher_.Publish(pool, kNodeUid);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(backoff.After(status), std::chrono::milliseconds(1000));
  // A failure in the middle (the second create): the next call completes the pool.
  standin_.BeforeNext("POST", [] {});
  standin_.BeforeNext("POST", [&] { standin_.FailNext(1, 500); });
  status = publisher_.Publish(pool, kNodeUid);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(backoff.After(status), std::chrono::milliseconds(2000));
  status = publisher_.Publish(pool, kNodeUid);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(backoff.After(status), std::chrono::milliseconds(0));
  EXPECT_EQ(backoff.peek(), std::chrono::milliseconds(500));
  ExpectPool(2, pool.size());
}

TEST_P(PublisherTest, AFieldDroppedByAGateIsFailedPreconditionNotALoop) {
  standin_.SetDisabledGates({"DRAPartitionableDevices"});
  const std::vector<ResourceSlice> pool = Pool(1, Layout());
  standin_.ClearLog();
  absl::Status status = publisher_.Publish(pool, kNodeUid);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("DRAPartitionableDevices"));
  EXPECT_THAT(status.message(), HasSubstr(Layout() == SliceLayout::kSplit ? "spec.sharedCounters"
                                                                          : "consumesCounters"));
  EXPECT_EQ(Writes(standin_.log()), std::vector<std::string>{"POST"});  // stopped at the first
  standin_.ClearLog();
  EXPECT_EQ(publisher_.Publish(pool, kNodeUid).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Writes(standin_.log()).size(), 1u);
  // The gate turned on: the next call repairs the pool (split: the second call had to create a
  // slice, so it wrote generation 2 and this one 3; combined: one slice changing each time).
  standin_.SetDisabledGates({});
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  ExpectPool(Layout() == SliceLayout::kSplit ? 3 : 1, pool.size());
}

TEST_P(PublisherTest, AnEmptyPoolIsOneSliceWithoutDevices) {
  ASSERT_TRUE(publisher_.Publish({}, kNodeUid).ok());
  ExpectPool(1, 1);
  EXPECT_FALSE(standin_.Slices()[0]["spec"].contains("devices"));
  const std::vector<ResourceSlice> pool = Pool(1, Layout());
  ASSERT_TRUE(publisher_.Publish(pool, kNodeUid).ok());
  ExpectPool(pool.size() > 1 ? 2 : 1, pool.size());  // one slice changing keeps the generation
}

TEST_P(PublisherTest, WipeDeletesOnlyOwnSlices) {
  ASSERT_TRUE(publisher_.Publish(Pool(1, Layout()), kNodeUid).ok());
  SlicePublisher other(&api_, "node-b");
  ASSERT_TRUE(other.Publish({}, "").ok());
  ASSERT_TRUE(publisher_.Wipe().ok());
  const std::vector<json> left = standin_.Slices();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0]["spec"]["nodeName"], "node-b");
  EXPECT_FALSE(left[0]["metadata"].contains("ownerReferences"));
  EXPECT_TRUE(publisher_.Wipe().ok());
}

TEST_P(PublisherTest, TheLayoutOfTheOtherVersionIsRefused) {
  const SliceLayout wrong =
      Layout() == SliceLayout::kSplit ? SliceLayout::kCombined : SliceLayout::kSplit;
  absl::Status status = publisher_.Publish(Pool(1, wrong), kNodeUid);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr(wrong == SliceLayout::kCombined ? "only one of sharedCounters or devices"
                                                        : "not in this slice"));
}

TEST_P(PublisherTest, SlicesOfAnotherNodeOrRepeatedIndicesAreRefused) {
  std::vector<ResourceSlice> pool = Pool(1, Layout());
  pool.push_back(pool.front());
  EXPECT_EQ(publisher_.Publish(pool, kNodeUid).code(), absl::StatusCode::kInvalidArgument);
  pool.pop_back();
  pool.front().node_name = "node-b";
  EXPECT_EQ(publisher_.Publish(pool, kNodeUid).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(standin_.log().empty() || standin_.log().back().path == "/version");
}

TEST_P(PublisherTest, AStoredSliceOfAnUnexpectedShapeIsAnError) {
  const std::vector<ResourceSlice> pool = Pool(1, Layout());
  json odd = ToJson(pool.back(), kNodeUid);  // a slice with devices
  odd["metadata"]["name"] =
      "0000" + std::to_string(pool.back().index) + "-gpu.gpuslice.io-node-a-odd00";
  odd["spec"]["pool"]["resourceSliceCount"] = 7;
  odd["spec"]["devices"] =
      json::parse(R"([{"name":5,"taints":[{"key":"k","effect":"NoSchedule","timeAdded":"x"}]}])");
  standin_.PutSliceUnchecked(odd);
  const absl::Status status = publisher_.Publish(pool, kNodeUid);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("unexpected shape"));
}

TEST(DraPublisherToken, PublishesWithARequiredToken) {
  ApiServerStandin standin(ApiServerOptions{"v1.35.0", "t0k3n", {{kNode, kNodeUid}}, {}});
  k8s::KubeApiOptions options;
  options.server = standin.url();
  options.token_file = "";
  DraApi anonymous(*k8s::KubeApiClient::Create(options));
  SlicePublisher refused(&anonymous, kNode);
  EXPECT_EQ(refused.Publish({}, kNodeUid).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(standin.Slices().empty());
}

TEST(DraQuantity, ComparedByValue) {
  auto nanos = [](const std::string& text) { return QuantityNanos(text).value_or("invalid"); };
  EXPECT_EQ(nanos("1Gi"), nanos("1024Mi"));
  EXPECT_EQ(nanos("80Gi"), nanos("81920Mi"));
  EXPECT_EQ(nanos("1.5Gi"), nanos("1536Mi"));
  EXPECT_EQ(nanos("1.5"), nanos("1500m"));
  EXPECT_EQ(nanos("2k"), nanos("2000"));
  EXPECT_EQ(nanos("1e3"), nanos("1k"));
  EXPECT_EQ(nanos("1E3"), nanos("1k"));
  EXPECT_EQ(nanos("1E"), "1000000000000000000000000000");
  EXPECT_EQ(nanos("7"), "7000000000");
  EXPECT_EQ(nanos("+7"), "7000000000");
  EXPECT_EQ(nanos("-2m"), "-2000000");
  EXPECT_EQ(nanos("0Mi"), "0");
  EXPECT_EQ(nanos("-0"), "0");
  EXPECT_EQ(nanos("0.1n"), "1");  // finer than nano: rounded up
  EXPECT_EQ(nanos("1.0000000001"), "1000000001");
  EXPECT_EQ(nanos("1Ei"), "1152921504606846976000000000");
  EXPECT_NE(nanos("1Gi"), nanos("1G"));
  for (const char* bad : {"", "abc", "1Xi", "Mi", "1.2.3", "1e", "--1", "1 Gi"}) {
    EXPECT_EQ(QuantityNanos(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(DraQuantity, SpecsComparedAsTheServerMeansThem) {
  const json sent = json::parse(R"({"driver":"d","devices":[{"name":"a",
      "capacity":{"memory":{"value":"1024Mi"}},
      "taints":[{"key":"k","effect":"NoSchedule"}]}],"sharedCounters":[]})");
  json stored = json::parse(R"({"driver":"d","devices":[{"name":"a","attributes":{},
      "capacity":{"memory":{"value":"1Gi"}},
      "taints":[{"key":"k","effect":"NoSchedule","timeAdded":"2025-01-01T00:00:00Z"}]}]})");
  EXPECT_TRUE(SameSliceSpec(sent, stored));
  stored["devices"][0]["capacity"]["memory"]["value"] = 1073741824;  // a number is a quantity too
  EXPECT_TRUE(SameSliceSpec(sent, stored));
  stored["devices"][0]["capacity"]["memory"]["value"] = "1G";
  EXPECT_FALSE(SameSliceSpec(sent, stored));
  stored["devices"][0]["capacity"]["memory"]["value"] = "1Gi";
  stored["devices"][0]["taints"][0]["effect"] = "NoExecute";
  EXPECT_FALSE(SameSliceSpec(sent, stored));
}

}  // namespace
}  // namespace gpuslice::dra
