// DraApi (gpuslice/dra/kube_client.h), KubeApiClient::Call and Backoff against the stand-in API
// server (tests/dra/apiserver_standin.h): round-trips, the status mapping, tokens read per call,
// a server that is down or answers garbage.
#include "gpuslice/dra/kube_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "dra/apiserver_standin.h"
#include "gpuslice/dra/backoff.h"
#include "gpuslice/dra/gpu_devices.h"
#include "temp_dir.h"

namespace gpuslice::dra {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing_standin::ApiServerOptions;
using testing_standin::ApiServerStandin;

k8s::KubeApiClient ClientFor(const std::string& url, const std::string& token_file = "") {
  k8s::KubeApiOptions options;
  options.server = url;
  options.token_file = token_file;
  options.timeout_s = 2;
  absl::StatusOr<k8s::KubeApiClient> client = k8s::KubeApiClient::Create(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return *std::move(client);
}

json SliceJson(const std::string& node, const std::string& driver, const std::string& device) {
  json spec = {{"driver", driver},
               {"nodeName", node},
               {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}}};
  if (!device.empty()) {
    spec["devices"] =
        json::array({{{"name", device}, {"capacity", {{"memory", {{"value", "81920Mi"}}}}}}});
  }
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"generateName", "00000-" + driver + "-" + node + "-"}}},
          {"spec", spec}};
}

class DraApiTest : public ::testing::Test {
 protected:
  DraApiTest() : standin_(ApiServerOptions{"v1.35.0", "", {{"node-a", "uid-a"}}, {}}) {}
  ApiServerStandin standin_;
  DraApi api_{ClientFor(standin_.url())};
};

TEST_F(DraApiTest, VersionAndNodeUidRoundTrip) {
  EXPECT_EQ(api_.GitVersion().value_or("?"), "v1.35.0");
  standin_.SetVersion("v1.34.2");
  EXPECT_EQ(api_.GitVersion().value_or("?"), "v1.34.2");
  EXPECT_EQ(api_.NodeUid("node-a").value_or("?"), "uid-a");
  absl::StatusOr<std::string> missing = api_.NodeUid("node-b");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nodes \"node-b\" not found"));
  EXPECT_EQ(standin_.log().back().path, "/api/v1/nodes/node-b");
}

TEST_F(DraApiTest, CreateListUpdateDeleteSlices) {
  absl::StatusOr<json> created = api_.CreateSlice(SliceJson("node-a", kDriverName, "gpu-0"));
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string name = (*created)["metadata"]["name"];
  EXPECT_THAT(name, ::testing::MatchesRegex("00000-gpu\\.gpuslice\\.io-node-a-[a-z0-9]{5}"));
  EXPECT_FALSE((*created)["metadata"]["uid"].get<std::string>().empty());
  // The server keeps quantities in canonical form.
  EXPECT_EQ((*created)["spec"]["devices"][0]["capacity"]["memory"]["value"], "80Gi");
  // Others' slices are not listed.
  ASSERT_TRUE(api_.CreateSlice(SliceJson("node-b", kDriverName, "gpu-0")).ok());
  ASSERT_TRUE(api_.CreateSlice(SliceJson("node-a", "other.example.com", "gpu-0")).ok());
  absl::StatusOr<std::vector<json>> listed = api_.ListSlices("node-a", kDriverName);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0]["metadata"]["name"], name);
  const testing_standin::LoggedRequest list = standin_.log().back();
  EXPECT_EQ(list.path, kResourceSlicesPath);
  EXPECT_EQ(list.query.at("fieldSelector"), "spec.nodeName=node-a,spec.driver=gpu.gpuslice.io");

  json update = (*listed)[0];
  update["spec"]["devices"][0]["name"] = "gpu-1";
  absl::StatusOr<json> updated = api_.UpdateSlice(update);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_NE((*updated)["metadata"]["resourceVersion"], update["metadata"]["resourceVersion"]);
  // The same stale resourceVersion again: a conflict.
  EXPECT_EQ(api_.UpdateSlice(update).status().code(), absl::StatusCode::kAborted);
  update["metadata"].erase("name");
  EXPECT_EQ(api_.UpdateSlice(update).status().code(), absl::StatusCode::kInvalidArgument);
  // An immutable field.
  json moved = *updated;
  moved["spec"]["driver"] = "other.example.com";
  absl::Status immutable = api_.UpdateSlice(moved).status();
  EXPECT_EQ(immutable.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(immutable.message(), HasSubstr("immutable"));

  const std::string uid = (*updated)["metadata"]["uid"];
  const std::string version = (*updated)["metadata"]["resourceVersion"];
  EXPECT_EQ(api_.DeleteSlice(name, "wrong-uid", "").code(), absl::StatusCode::kAborted);
  EXPECT_EQ(api_.DeleteSlice(name, uid, "1").code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(api_.DeleteSlice(name, uid, version).ok());
  EXPECT_EQ(standin_.log().back().body["preconditions"]["uid"], uid);
  EXPECT_FALSE(standin_.Slice(name).has_value());
  EXPECT_TRUE(api_.DeleteSlice(name, uid, version).ok());  // already gone: 404 is success
  EXPECT_EQ(standin_.log().back().status, 404);
}

TEST_F(DraApiTest, InvalidSlicesAreInvalidArgumentWithTheServersMessage) {
  json bad = SliceJson("node-a", kDriverName, "GPU_0");
  absl::Status status = api_.CreateSlice(bad).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("spec.devices[0].name"));
  EXPECT_THAT(status.message(), HasSubstr("HTTP 422"));
  bad = SliceJson("node-a", kDriverName, "gpu-0");
  bad["spec"]["devices"][0]["capacity"]["memory"]["value"] = "lots";
  EXPECT_EQ(api_.CreateSlice(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(standin_.log().back().status, 400);
}

TEST_F(DraApiTest, ClaimsRoundTrip) {
  standin_.PutClaim(json::parse(R"({"metadata":{"namespace":"ml","name":"c1","uid":"u1"},
      "spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"mig"}}]}},
      "status":{"allocation":{"devices":{"results":[{"request":"gpu","driver":"gpu.gpuslice.io",
      "pool":"node-a","device":"gpu-0-mig-1g-10gb-0"}]}}}})"));
  absl::StatusOr<json> claim = api_.GetClaim("ml", "c1");
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_EQ((*claim)["metadata"]["uid"], "u1");
  EXPECT_EQ((*claim)["status"]["allocation"]["devices"]["results"][0]["device"],
            "gpu-0-mig-1g-10gb-0");
  EXPECT_EQ(standin_.log().back().path, "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/c1");
  EXPECT_EQ(api_.GetClaim("ml", "c2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(api_.GetClaim("other", "c1").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DraApiTest, StatusCodesMapToErrors) {
  const std::pair<int, absl::StatusCode> cases[] = {
      {503, absl::StatusCode::kUnavailable},      {500, absl::StatusCode::kUnavailable},
      {429, absl::StatusCode::kUnavailable},      {403, absl::StatusCode::kPermissionDenied},
      {401, absl::StatusCode::kPermissionDenied}, {409, absl::StatusCode::kAborted},
      {422, absl::StatusCode::kInvalidArgument},  {400, absl::StatusCode::kInvalidArgument},
      {404, absl::StatusCode::kNotFound},         {418, absl::StatusCode::kInternal},
  };
  for (const auto& [code, expected] : cases) {
    standin_.FailNext(1, code);
    absl::Status status = api_.GitVersion().status();
    EXPECT_EQ(status.code(), expected) << code << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr("GET /version: HTTP " + std::to_string(code)));
    EXPECT_THAT(status.message(), HasSubstr("injected failure"));
  }
  EXPECT_TRUE(api_.GitVersion().ok());
}

TEST_F(DraApiTest, GarbageFromTheServerIsAClearError) {
  standin_.GarbageNext(3);
  absl::Status status = api_.GitVersion().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(status.message(), HasSubstr("<html>"));
  EXPECT_EQ(api_.ListSlices("node-a", kDriverName).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(api_.GetClaim("ml", "c").status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(api_.GitVersion().ok());
}

TEST_F(DraApiTest, ADownServerIsUnavailableUntilItIsBack) {
  standin_.Stop();
  absl::Status status = api_.GitVersion().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr(standin_.url()));
  standin_.Start();
  EXPECT_TRUE(api_.GitVersion().ok());
}

TEST(DraApiToken, TheTokenFileIsReadOnEveryCall) {
  TempDir dir;
  const std::string token_file = dir / "token";
  std::ofstream(token_file) << "first-token\n";
  ApiServerStandin standin(ApiServerOptions{"v1.35.0", "first-token", {{"n", "u"}}, {}});
  DraApi api(ClientFor(standin.url(), token_file));
  EXPECT_TRUE(api.GitVersion().ok());
  EXPECT_EQ(standin.log().back().authorization, "Bearer first-token");
  // The token rotates: the server takes only the new one, the file has it.
  standin.SetToken("second-token");
  EXPECT_EQ(api.NodeUid("n").status().code(), absl::StatusCode::kPermissionDenied);
  std::ofstream(token_file) << "second-token\n";
  EXPECT_EQ(api.NodeUid("n").value_or("?"), "u");
  EXPECT_EQ(standin.log().back().authorization, "Bearer second-token");
  std::filesystem::remove(token_file);
  EXPECT_EQ(api.NodeUid("n").status().code(), absl::StatusCode::kFailedPrecondition);
  // No token at all.
  DraApi anonymous(ClientFor(standin.url()));
  EXPECT_EQ(anonymous.GitVersion().status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(standin.log().back().authorization, "");
}

TEST(KubeApiCall, AnyStatusIsAReplyAndOnlyKnownMethodsAreSent) {
  ApiServerStandin standin;
  k8s::KubeApiClient client = ClientFor(standin.url());
  absl::StatusOr<k8s::HttpReply> reply = client.Call("GET", "/api/v1/nodes/none", nullptr);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 404);
  EXPECT_EQ(reply->body["reason"], "NotFound");
  EXPECT_EQ(reply->Message(), "nodes \"none\" not found");
  reply = client.Call("GET", "/no/such/path", nullptr);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->status, 404);
  EXPECT_EQ(client.Call("TRACE", "/version", nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  const json body = {{"preconditions", json::object()}};
  reply = client.Call("DELETE", std::string(kResourceSlicesPath) + "/x", &body);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->status, 404);
  EXPECT_EQ(standin.log().back().body, body);
  standin.GarbageNext(1);
  reply = client.Call("GET", "/version", nullptr);
  ASSERT_TRUE(reply.ok());
  EXPECT_TRUE(reply->body.is_discarded());
  EXPECT_EQ(reply->Message(), "<html>not json{");
}

TEST(DraUrl, EncodesQueryValues) {
  EXPECT_EQ(UrlEncode("spec.nodeName=a,spec.driver=b.c"), "spec.nodeName%3Da%2Cspec.driver%3Db.c");
  EXPECT_EQ(UrlEncode("a b/~_-"), "a%20b%2F~_-");
}

TEST(DraBackoff, DoublesToTheCapAndResetsOnSuccess) {
  using std::chrono::milliseconds;
  Backoff backoff;
  std::vector<long> delays;
  for (int i = 0; i < 9; ++i) delays.push_back(static_cast<long>(backoff.Next().count()));
  EXPECT_THAT(delays,
              ::testing::ElementsAre(500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000));
  EXPECT_EQ(backoff.failures(), 9);
  EXPECT_EQ(backoff.After(absl::OkStatus()), milliseconds(0));
  EXPECT_EQ(backoff.failures(), 0);
  EXPECT_EQ(backoff.After(absl::UnavailableError("down")), milliseconds(500));
  EXPECT_EQ(backoff.peek(), milliseconds(1000));
  backoff.Reset();
  EXPECT_EQ(backoff.Next(), milliseconds(500));
  // Injected jitter stretches each delay by up to `jitter`.
  Backoff jittered({milliseconds(100), milliseconds(1000), 0.5, [] { return 0.5; }});
  EXPECT_EQ(jittered.Next(), milliseconds(125));
  EXPECT_EQ(jittered.Next(), milliseconds(250));
}

}  // namespace
}  // namespace gpuslice::dra

namespace gpuslice::dra {
namespace {

// The stand-in itself: the oracle must refuse what an API server of that version refuses.
class ApiServerStandinTest : public ::testing::Test {
 protected:
  // POSTs `slice` to a server of `version`; the HTTP status.
  int Post(const std::string& version, const json& slice) {
    standin_.SetVersion(version);
    absl::StatusOr<k8s::HttpReply> reply = client_.Call("POST", kResourceSlicesPath, &slice);
    EXPECT_TRUE(reply.ok()) << reply.status();
    if (reply.ok() && reply->status != 201) last_message_ = reply->Message();
    return reply.ok() ? reply->status : 0;
  }
  static json Device(const std::string& name, bool counters) {
    json device = {{"name", name}, {"attributes", {{"type", {{"string", "mig"}}}}}};
    if (counters) {
      device["consumesCounters"] = json::array(
          {{{"counterSet", "gpu-0-counters"}, {"counters", {{"memory", {{"value", "1Gi"}}}}}}});
    }
    return device;
  }
  static json WithDevices(int count, bool counters) {
    json slice = SliceJson("node-a", kDriverName, "");
    slice["spec"]["devices"] = json::array();
    for (int i = 0; i < count; ++i) {
      slice["spec"]["devices"].push_back(Device("d" + std::to_string(i), counters));
    }
    return slice;
  }

  ApiServerStandin standin_;
  k8s::KubeApiClient client_ = ClientFor(standin_.url());
  std::string last_message_;
};

TEST_F(ApiServerStandinTest, DeviceCountsByVersion) {
  EXPECT_EQ(Post("v1.35.0", WithDevices(65, true)), 422);
  EXPECT_THAT(last_message_, HasSubstr("spec.devices: Too many: must have at most 64 items"));
  EXPECT_EQ(Post("v1.35.0", WithDevices(64, true)), 201);
  EXPECT_EQ(Post("v1.35.0", WithDevices(128, false)), 201);
  EXPECT_EQ(Post("v1.35.0", WithDevices(129, false)), 422);
  // 1.34: the counter set must be in the slice; then 128 devices may use it.
  json slice = WithDevices(128, true);
  EXPECT_EQ(Post("v1.34.2", slice), 422);
  EXPECT_THAT(last_message_, HasSubstr("not in this slice"));
  slice["spec"]["sharedCounters"] =
      json::array({{{"name", "gpu-0-counters"}, {"counters", {{"memory", {{"value", "80Gi"}}}}}}});
  EXPECT_EQ(Post("v1.34.2", slice), 201);
  EXPECT_EQ(Post("v1.35.0", slice), 422);
  EXPECT_THAT(last_message_, HasSubstr("only one of sharedCounters or devices is allowed"));
}

TEST_F(ApiServerStandinTest, CounterSetsTaintsAndConsumptionsByVersion) {
  json sets = SliceJson("node-a", kDriverName, "");
  for (int i = 0; i < 9; ++i) {
    sets["spec"]["sharedCounters"].push_back(
        {{"name", "set-" + std::to_string(i)}, {"counters", {{"c", {{"value", "1"}}}}}});
  }
  EXPECT_EQ(Post("v1.35.0", sets), 422);  // at most 8 sets
  EXPECT_EQ(Post("v1.34.2", sets), 201);  // 9 counters in all
  for (int i = 0; i < 24; ++i) {
    sets["spec"]["sharedCounters"][0]["counters"]["k" + std::to_string(i)] = {{"value", "1"}};
  }
  EXPECT_EQ(Post("v1.34.2", sets), 422);  // 33 counters in all
  json taints = WithDevices(1, false);
  for (int i = 0; i < 5; ++i) {
    taints["spec"]["devices"][0]["taints"].push_back(
        {{"key", "example.com/t" + std::to_string(i)}, {"effect", "NoSchedule"}});
  }
  EXPECT_EQ(Post("v1.34.2", taints), 422);  // at most 4
  EXPECT_EQ(Post("v1.35.0", taints), 201);  // at most 16
  json consumptions = WithDevices(1, true);
  for (const char* set : {"b", "c"}) {
    consumptions["spec"]["devices"][0]["consumesCounters"].push_back(
        {{"counterSet", set}, {"counters", {{"x", {{"value", "1"}}}}}});
  }
  EXPECT_EQ(Post("v1.35.0", consumptions), 422);  // at most 2 consumptions
  EXPECT_THAT(last_message_, HasSubstr("consumesCounters: Too many"));
}

TEST_F(ApiServerStandinTest, NamesValuesAndOneOfRules) {
  json slice = WithDevices(2, false);
  slice["spec"]["devices"][1]["name"] = "d0";
  EXPECT_EQ(Post("v1.35.0", slice), 422);
  EXPECT_THAT(last_message_, HasSubstr("spec.devices[1].name: Duplicate value"));
  slice = WithDevices(1, false);
  slice["spec"]["devices"][0]["attributes"]["v"] = {{"version", "535.104.05"}};
  EXPECT_EQ(Post("v1.35.0", slice), 422);
  slice["spec"]["devices"][0]["attributes"]["v"] = {{"version", "535.104.5"}, {"int", 1}};
  EXPECT_EQ(Post("v1.35.0", slice), 422);
  slice["spec"]["devices"][0]["attributes"]["v"] = {{"string", std::string(65, 'x')}};
  EXPECT_EQ(Post("v1.35.0", slice), 422);
  slice["spec"]["devices"][0]["attributes"]["v"] = {{"string", std::string(64, 'x')}};
  EXPECT_EQ(Post("v1.35.0", slice), 201);
  slice["spec"]["devices"][0]["attributes"]["bad/name/x"] = {{"int", 1}};
  EXPECT_EQ(Post("v1.35.0", slice), 422);
  slice = WithDevices(1, false);
  slice["spec"]["allNodes"] = true;  // besides nodeName
  EXPECT_EQ(Post("v1.35.0", slice), 422);
  EXPECT_THAT(last_message_, HasSubstr("exactly one of"));
  slice["spec"].erase("nodeName");
  EXPECT_EQ(Post("v1.35.0", slice), 201);
  slice["spec"]["allNodes"] = false;
  EXPECT_EQ(Post("v1.35.0", slice), 422);
  slice = WithDevices(1, false);
  slice["spec"]["pool"]["resourceSliceCount"] = 0;
  EXPECT_EQ(Post("v1.35.0", slice), 422);
  slice["spec"]["pool"] = {{"generation", 1}, {"resourceSliceCount", 1}};
  EXPECT_EQ(Post("v1.35.0", slice), 422);
  slice = WithDevices(1, false);
  slice["spec"]["devices"][0]["capacity"]["memory"] = {
      {"value", "10Gi"}, {"requestPolicy", {{"default", "1Gi"}, {"validRange", {{"min", "1Gi"}}}}}};
  EXPECT_EQ(Post("v1.35.0", slice), 422);  // a policy needs allowMultipleAllocations
  slice["spec"]["devices"][0]["allowMultipleAllocations"] = true;
  EXPECT_EQ(Post("v1.35.0", slice), 201);
  json& range = slice["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]["validRange"];
  range["max"] = "10Gi";
  range["step"] = "3Gi";
  EXPECT_EQ(Post("v1.35.0", slice), 201);
  range["step"] = "4Gi";
  EXPECT_EQ(Post("v1.35.0", slice), 422);  // max - min is no multiple of the step
}

TEST_F(ApiServerStandinTest, NamesUpdatesFieldSelectorsAndCollections) {
  json slice = WithDevices(1, false);
  slice["metadata"] = {{"name", "fixed-name"}};
  EXPECT_EQ(Post("v1.35.0", slice), 201);
  EXPECT_EQ(Post("v1.35.0", slice), 409);  // exists
  slice["metadata"] = json::object();
  EXPECT_EQ(Post("v1.35.0", slice), 422);  // no name, no generateName
  json stored = standin_.Slice("fixed-name").value();
  stored["metadata"].erase("resourceVersion");
  const std::string path = std::string(kResourceSlicesPath) + "/fixed-name";
  EXPECT_EQ(client_.Call("PUT", path, &stored)->status, 422);
  stored = standin_.Slice("fixed-name").value();
  stored["spec"]["pool"]["name"] = "other-pool";
  EXPECT_EQ(client_.Call("PUT", path, &stored)->status, 422);
  EXPECT_THAT(client_.Call("PUT", path, &stored)->Message(), HasSubstr("immutable"));
  EXPECT_EQ(client_.Call("PUT", path + "-x", &stored)->status, 404);
  // Field selectors: only nodeName and driver; watch is not served.
  const std::string list = std::string(kResourceSlicesPath) + "?fieldSelector=";
  EXPECT_EQ(client_.Call("GET", list + "spec.pool.name%3Dx", nullptr)->status, 400);
  EXPECT_EQ(
      client_.Call("GET", list + "spec.driver%3D%3Dgpu.gpuslice.io", nullptr)->body["items"].size(),
      1u);
  EXPECT_EQ(client_.Call("GET", list + "spec.driver%3Dx", nullptr)->body["items"].size(), 0u);
  EXPECT_EQ(client_.Call("GET", list + "&watch=1", nullptr)->status, 400);
  // deletecollection, as kubelet wipes a driver's slices.
  EXPECT_EQ(Post("v1.35.0", SliceJson("node-b", kDriverName, "")), 201);
  absl::StatusOr<k8s::HttpReply> wiped = client_.Call(
      "DELETE", list + "spec.nodeName%3Dnode-a%2Cspec.driver%3Dgpu.gpuslice.io", nullptr);
  ASSERT_TRUE(wiped.ok());
  EXPECT_EQ(wiped->body["items"].size(), 1u);
  ASSERT_EQ(standin_.Slices().size(), 1u);
  EXPECT_EQ(standin_.Slices()[0]["spec"]["nodeName"], "node-b");
}

TEST_F(ApiServerStandinTest, GatedFieldsAreDroppedUnlessAlreadyUsed) {
  standin_.SetDisabledGates({"DRAConsumableCapacity", "DRADeviceTaints"});
  json slice = WithDevices(1, true);
  slice["metadata"] = {{"name", "s"}};
  slice["spec"]["devices"][0]["allowMultipleAllocations"] = true;
  slice["spec"]["devices"][0]["taints"] = json::array({{{"key", "k"}, {"effect", "NoExecute"}}});
  EXPECT_EQ(Post("v1.35.0", slice), 201);
  json stored = standin_.Slice("s").value();
  EXPECT_FALSE(stored["spec"]["devices"][0].contains("allowMultipleAllocations"));
  EXPECT_FALSE(stored["spec"]["devices"][0].contains("taints"));
  EXPECT_TRUE(stored["spec"]["devices"][0].contains("consumesCounters"));
  // Stored while the gate was on: kept on update with the gate off.
  standin_.SetDisabledGates({});
  stored["spec"]["devices"][0]["taints"] = slice["spec"]["devices"][0]["taints"];
  const std::string path = std::string(kResourceSlicesPath) + "/s";
  ASSERT_EQ(client_.Call("PUT", path, &stored)->status, 200);
  stored = standin_.Slice("s").value();
  EXPECT_TRUE(stored["spec"]["devices"][0]["taints"][0].contains("timeAdded"));
  standin_.SetDisabledGates({"DRADeviceTaints"});
  ASSERT_EQ(client_.Call("PUT", path, &stored)->status, 200);
  EXPECT_TRUE(standin_.Slice("s").value()["spec"]["devices"][0].contains("taints"));
}

}  // namespace
}  // namespace gpuslice::dra
