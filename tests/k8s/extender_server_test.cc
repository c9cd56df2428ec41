// The scheduler extender over HTTP (src/k8s/extender_server.h), with a kube-scheduler stand-in:
// the test posts the extender JSON kube-scheduler sends (PascalCase keys, null fields, as in
// ../shared/reference/kubernetes-apis.md §3.2) to the running server on 127.0.0.1 and checks the
// replies; bind goes through KubeApiClient to a stand-in API server on 127.0.0.1 that checks the
// Binding body and the bearer token.
#include "extender_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpuslice/k8s/extender.h"
#include "gpuslice/k8s/kube_api.h"

namespace gpuslice::k8s {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// httplib::Server::stop() before the accept loop runs would leave the loop running forever.
void WaitRunning(httplib::Server& server) {
  for (int i = 0; i < 500 && !server.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// A stand-in Kubernetes API server: answers the binding subresource with `status`, keeps what it
// got.
class FakeApiServer {
 public:
  explicit FakeApiServer(int status = 201) : status_(status) {
    server_.Post(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+)/binding)",
                 [this](const httplib::Request& request, httplib::Response& response) {
                   std::lock_guard<std::mutex> lock(mutex_);
                   Call call;
                   call.path = request.path;
                   call.authorization = request.get_header_value("Authorization");
                   call.content_type = request.get_header_value("Content-Type");
                   call.body = request.body;
                   calls_.push_back(call);
                   response.status = status_;
                   if (status_ == 201) {
                     response.set_content(R"({"kind":"Status","status":"Success","code":201})",
                                          "application/json");
                   } else {
                     response.set_content(R"({"kind":"Status","status":"Failure","message":)"
                                          R"("pods \"x\" is forbidden","code":403})",
                                          "application/json");
                   }
                 });
    server_.Get(
        "/api/v1/pods", [this](const httplib::Request& request, httplib::Response& response) {
          std::lock_guard<std::mutex> lock(mutex_);
          calls_.push_back({request.path, request.get_header_value("Authorization"), "", ""});
          response.set_content(pods_.dump(), "application/json");
        });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    WaitRunning(server_);
  }
  // What GET /api/v1/pods answers (a v1.PodList).
  void set_pods(json pods) {
    std::lock_guard<std::mutex> lock(mutex_);
    pods_ = std::move(pods);
  }
  ~FakeApiServer() {
    server_.stop();
    thread_.join();
  }
  struct Call {
    std::string path;
    std::string authorization;
    std::string content_type;
    std::string body;
  };
  std::vector<Call> calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int status_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<Call> calls_;
  json pods_ = {{"kind", "PodList"}, {"apiVersion", "v1"}, {"items", json::array()}};
};

place::NodeSpec Node(const std::string& name, place::GpuMode mode, int gpus) {
  place::NodeSpec spec;
  spec.name = name;
  spec.model = "A100-80GB";
  spec.cpu_milli = 64000;
  spec.memory_mib = 262144;
  spec.gpus = gpus;
  spec.mode = mode;
  if (mode == place::GpuMode::kMig) spec.hardware = hw::Catalog::Builtin().Find("A100-80GB");
  return spec;
}

class ExtenderServerTest : public ::testing::Test {
 protected:
  void StartWith(int api_status) {
    api_ = std::make_unique<FakeApiServer>(api_status);
    dir_ = std::filesystem::temp_directory_path() /
           ("gpuslice_extender_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "token") << "s3cret-token\n";
    KubeApiOptions options;
    options.server = api_->url();
    options.token_file = (dir_ / "token").string();
    absl::StatusOr<KubeApiClient> client = KubeApiClient::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    absl::StatusOr<Extender> extender = Extender::Create({
        Node("node1", place::GpuMode::kWhole, 2),
        Node("node2", place::GpuMode::kWhole, 4),
        Node("node3", place::GpuMode::kMig, 2),
    });
    ASSERT_TRUE(extender.ok()) << extender.status();
    extender_ = std::make_unique<Extender>(*std::move(extender));
    service_ = std::make_unique<ExtenderService>(extender_.get(), client->AsBinder(), "/extender");
    service_->Register(server_);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    WaitRunning(server_);
    scheduler_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
  }
  void TearDown() override {
    if (thread_.joinable()) {
      server_.stop();
      thread_.join();
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  // Posts as kube-scheduler does; returns (status, parsed body).
  std::pair<int, json> Post(const std::string& verb, const std::string& body) {
    httplib::Result result = scheduler_->Post("/extender/" + verb, body, "application/json");
    if (!result) {
      ADD_FAILURE() << "no reply to " << verb;
      return {0, json()};
    }
    return {result->status, json::parse(result->body)};
  }

  std::unique_ptr<FakeApiServer> api_;
  std::filesystem::path dir_;
  std::unique_ptr<Extender> extender_;
  std::unique_ptr<ExtenderService> service_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::unique_ptr<httplib::Client> scheduler_;
};

// kube-scheduler's own encoding example (extender/v1 types_test.go), node-cache-capable form.
TEST_F(ExtenderServerTest, FilterAnswersTheSchedulersOwnExample) {
  StartWith(201);
  auto [status, reply] = Post(
      "filter", R"({"Pod":{"metadata":{"name":"podname"},"spec":{"containers":null},"status":{}},)"
                R"("Nodes":null,"NodeNames":["node1"]})");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(reply["NodeNames"], json({"node1"}));
  EXPECT_TRUE(reply["Nodes"].is_null());
  EXPECT_EQ(reply["FailedNodes"], json::object());
  EXPECT_EQ(reply["FailedAndUnresolvableNodes"], json::object());
  EXPECT_EQ(reply["Error"], "");
}

TEST_F(ExtenderServerTest, FilterPrioritizeBindEndToEnd) {
  StartWith(201);
  const std::string pod =
      R"({"metadata":{"name":"train","namespace":"ml","uid":"6a1c-77"},)"
      R"("spec":{"containers":[{"name":"main","image":"pytorch",)"
      R"("resources":{"limits":{"nvidia.com/gpu":"2"},"requests":{"cpu":"4","nvidia.com/gpu":"2"}}}],)"
      R"("initContainers":null},"status":{}})";
  auto [filter_status, filtered] = Post(
      "filter", R"({"Pod":)" + pod + R"(,"Nodes":null,"NodeNames":["node1","node2","node3"]})");
  ASSERT_EQ(filter_status, 200);
  EXPECT_EQ(filtered["Error"], "");
  EXPECT_EQ(filtered["NodeNames"], json({"node1", "node2"}));
  EXPECT_TRUE(filtered["FailedAndUnresolvableNodes"].contains("node3"));

  auto [prioritize_status, scores] =
      Post("prioritize", R"({"Pod":)" + pod + R"(,"Nodes":null,"NodeNames":["node1","node2"]})");
  ASSERT_EQ(prioritize_status, 200);
  ASSERT_TRUE(scores.is_array());
  ASSERT_EQ(scores.size(), 2u);
  std::string best;
  for (const json& host : scores) {
    ASSERT_TRUE(host.contains("Host"));
    ASSERT_TRUE(host.contains("Score"));
    if (host["Score"] == 10) best = host["Host"];
  }
  ASSERT_FALSE(best.empty()) << scores.dump();

  auto [bind_status, bound] = Post("bind", R"({"PodName":"train","PodNamespace":"ml",)"
                                           R"("PodUID":"6a1c-77","Node":")" +
                                               best + R"("})");
  EXPECT_EQ(bind_status, 200);
  EXPECT_EQ(bound, json({{"Error", ""}}));
  const std::vector<FakeApiServer::Call> calls = api_->calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].path, "/api/v1/namespaces/ml/pods/train/binding");
  EXPECT_EQ(calls[0].authorization, "Bearer s3cret-token");
  EXPECT_EQ(calls[0].content_type, "application/json");
  EXPECT_EQ(json::parse(calls[0].body),
            json::parse(R"({"apiVersion":"v1","kind":"Binding",)"
                        R"("metadata":{"name":"train","namespace":"ml","uid":"6a1c-77"},)"
                        R"("target":{"apiVersion":"v1","kind":"Node","name":")" +
                        best + R"("}})"));

  // The state shows the claim; release frees it.
  httplib::Result state = scheduler_->Get("/extender/state");
  ASSERT_TRUE(state);
  const json snapshot = json::parse(state->body);
  ASSERT_EQ(snapshot["pods"].size(), 1u);
  EXPECT_EQ(snapshot["pods"][0]["node"], best);
  EXPECT_EQ(snapshot["pods"][0]["gpus"].size(), 2u);
  auto [release_status, released] = Post("release", R"({"PodUID":"6a1c-77"})");
  EXPECT_EQ(release_status, 200);
  EXPECT_EQ(released["Error"], "");
  EXPECT_EQ(Post("release", R"({"PodUID":"6a1c-77"})").first, 404);
  EXPECT_EQ(extender_->Find("6a1c-77"), nullptr);
}

TEST_F(ExtenderServerTest, ResyncReleasesGonePodsAndTakesInPodsBoundWithoutIt) {
  StartWith(201);
  auto bind = [&](const std::string& name, const std::string& node) {
    const std::string pod = R"({"metadata":{"name":")" + name + R"(","namespace":"ml","uid":"u-)" +
                            name +
                            R"("},"spec":{"containers":[{"name":"main","resources":)"
                            R"({"limits":{"nvidia.com/gpu":"1"}}}]},"status":{}})";
    ASSERT_EQ(
        Post("filter", R"({"Pod":)" + pod + R"(,"Nodes":null,"NodeNames":[")" + node + R"("]})")
            .first,
        200);
    ASSERT_EQ(Post("bind", R"({"PodName":")" + name + R"(","PodNamespace":"ml","PodUID":"u-)" +
                               name + R"(","Node":")" + node + R"("})")
                  .second["Error"],
              "");
  };
  bind("a", "node1");
  bind("b", "node1");
  bind("c", "node2");
  // The API server still has a (running) and b (finished); c is gone. d was bound to node2 while
  // the extender was away, e to node1 where it cannot fit any more.
  const std::string gpus = R"("spec":{"nodeName":"NODE","containers":[{"name":"main",)"
                           R"("resources":{"limits":{"nvidia.com/gpu":"COUNT"}}}]})";
  auto bound_pod = [&](const std::string& name, const std::string& node, const std::string& n) {
    std::string spec = gpus;
    spec.replace(spec.find("NODE"), 4, node);
    spec.replace(spec.find("COUNT"), 5, n);
    return R"({"metadata":{"name":")" + name + R"(","namespace":"ml","uid":"u-)" + name + R"("},)" +
           spec + R"(,"status":{"phase":"Running"}})";
  };
  api_->set_pods(json::parse(
      R"({"kind":"PodList","apiVersion":"v1","items":[
      {"metadata":{"name":"a","namespace":"ml","uid":"u-a"},"status":{"phase":"Running"}},
      {"metadata":{"name":"b","namespace":"ml","uid":"u-b"},"status":{"phase":"Succeeded"}},)" +
      bound_pod("d", "node2", "2") + "," + bound_pod("e", "node1", "2") + "]}"));
  KubeApiOptions options;
  options.server = api_->url();
  options.token_file = (dir_ / "token").string();
  absl::StatusOr<KubeApiClient> client = KubeApiClient::Create(options);
  ASSERT_TRUE(client.ok());
  absl::StatusOr<json> pods = client->ListPods();
  ASSERT_TRUE(pods.ok()) << pods.status();
  EXPECT_EQ(api_->calls().back().path, "/api/v1/pods");
  EXPECT_EQ(api_->calls().back().authorization, "Bearer s3cret-token");
  absl::StatusOr<ResyncResult> synced = service_->Resync(*pods);
  ASSERT_TRUE(synced.ok()) << synced.status();
  EXPECT_THAT(synced->released, ::testing::UnorderedElementsAre("u-b", "u-c"));
  EXPECT_THAT(synced->adopted, ::testing::ElementsAre("u-d"));
  ASSERT_EQ(synced->conflicts.size(), 1u);  // node1: a holds one GPU, e wants two
  EXPECT_THAT(synced->conflicts[0], HasSubstr("ml/e on node1"));
  EXPECT_NE(extender_->Find("u-a"), nullptr);
  EXPECT_EQ(extender_->Find("u-b"), nullptr);
  ASSERT_NE(extender_->Find("u-d"), nullptr);
  EXPECT_EQ(extender_->Find("u-d")->node, "node2");
  // node1's second GPU is free again; node2 has d's two GPUs taken.
  EXPECT_EQ(extender_->cluster().FreeMilli(0, 0) + extender_->cluster().FreeMilli(0, 1), 1000);
  int node2_free = 0;
  for (int g = 0; g < 4; ++g) node2_free += extender_->cluster().FreeMilli(1, g);
  EXPECT_EQ(node2_free, 2000);
  // Running it again changes nothing.
  synced = service_->Resync(*pods);
  ASSERT_TRUE(synced.ok());
  EXPECT_TRUE(synced->released.empty());
  EXPECT_TRUE(synced->adopted.empty());
  // A reply that is not a pod list changes nothing.
  EXPECT_FALSE(service_->Resync(json::parse(R"({"kind":"Status"})")).ok());
  EXPECT_NE(extender_->Find("u-a"), nullptr);
}

TEST_F(ExtenderServerTest, FilterInTheNodeListForm) {
  StartWith(201);
  auto [status, reply] = Post(
      "filter",
      R"({"Pod":{"metadata":{"name":"m","uid":"u-m"},"spec":{"containers":[{"name":"c",)"
      R"("resources":{"limits":{"nvidia.com/mig-3g.40gb":1}}}]},"status":{}},)"
      R"("Nodes":{"metadata":{},"items":[{"metadata":{"name":"node1"},"status":{}},)"
      R"({"metadata":{"name":"node3","labels":{"gpu":"a100"}},"status":{}}]},"NodeNames":null})");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(reply["Error"], "");
  EXPECT_TRUE(reply["NodeNames"].is_null());
  ASSERT_EQ(reply["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(reply["Nodes"]["items"][0]["metadata"]["labels"]["gpu"], "a100");
  EXPECT_TRUE(reply["FailedAndUnresolvableNodes"].contains("node1"));
}

TEST_F(ExtenderServerTest, ApiServerRefusalIsABindError) {
  StartWith(403);
  auto [filter_status, filtered] = Post(
      "filter",
      R"({"Pod":{"metadata":{"name":"x","namespace":"ml","uid":"u-x"},"spec":{"containers":[)"
      R"({"name":"c","resources":{"requests":{"nvidia.com/gpu":"1"},"limits":{"nvidia.com/gpu":"1"}}}]}},)"
      R"("Nodes":null,"NodeNames":["node1"]})");
  ASSERT_EQ(filter_status, 200);
  ASSERT_EQ(filtered["NodeNames"], json({"node1"}));
  auto [status, reply] =
      Post("bind", R"({"PodName":"x","PodNamespace":"ml","PodUID":"u-x","Node":"node1"})");
  EXPECT_EQ(status, 200);
  EXPECT_THAT(reply["Error"].get<std::string>(), HasSubstr("403"));
  EXPECT_THAT(reply["Error"].get<std::string>(), HasSubstr("forbidden"));
  EXPECT_EQ(api_->calls().size(), 1u);
  EXPECT_EQ(extender_->Find("u-x"), nullptr);
  EXPECT_EQ(extender_->cluster().FreeMilli(extender_->NodeIndex("node1"), 0), 1000);
}

TEST_F(ExtenderServerTest, MalformedBodiesAnswerPerVerb) {
  StartWith(201);
  auto [filter_status, filtered] = Post("filter", "{not json");
  EXPECT_EQ(filter_status, 200);
  EXPECT_THAT(filtered["Error"].get<std::string>(), HasSubstr("malformed JSON"));
  auto [bind_status, bound] = Post("bind", "[");
  EXPECT_EQ(bind_status, 200);
  EXPECT_THAT(bound["Error"].get<std::string>(), HasSubstr("malformed JSON"));
  auto [prioritize_status, prioritized] = Post("prioritize", "nope");
  EXPECT_EQ(prioritize_status, 400);
  EXPECT_THAT(prioritized["Error"].get<std::string>(), HasSubstr("malformed JSON"));
  // Well-formed JSON that is not ExtenderArgs.
  auto [status, reply] = Post("filter", R"({"Pod":null,"NodeNames":["node1"]})");
  EXPECT_EQ(status, 200);
  EXPECT_THAT(reply["Error"].get<std::string>(), HasSubstr("Pod"));
  EXPECT_EQ(Post("prioritize", R"({"Pod":{},"NodeNames":7})").first, 400);
  EXPECT_TRUE(api_->calls().empty());
}

TEST(KubeApiTest, InClusterOptionsComeFromTheEnvironment) {
  std::map<std::string, std::string> env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                            {"KUBERNETES_SERVICE_PORT", "443"}};
  auto getenv = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  absl::StatusOr<KubeApiOptions> options = InClusterOptions({}, getenv);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->server, "https://10.96.0.1:443");
  EXPECT_EQ(options->ca_file, kServiceAccountCaFile);
  EXPECT_EQ(options->token_file, kServiceAccountTokenFile);
  env["KUBERNETES_SERVICE_HOST"] = "fd00::1";
  EXPECT_EQ(InClusterOptions({}, getenv)->server, "https://[fd00::1]:443");
  KubeApiOptions given;
  given.server = "http://127.0.0.1:8001";
  EXPECT_EQ(InClusterOptions(given, getenv)->server, "http://127.0.0.1:8001");
  env.clear();
  EXPECT_EQ(InClusterOptions({}, getenv).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(KubeApiTest, RefusesServersThatAreNotHostAndPortAndReportsNoConnection) {
  KubeApiOptions options;
  options.server = "ftp://x";
  EXPECT_EQ(KubeApiClient::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.server = "https://x:6443/api";
  EXPECT_EQ(KubeApiClient::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  // A port nothing listens on (the stand-in is stopped before the call).
  std::string url;
  {
    FakeApiServer gone;
    url = gone.url();
  }
  options.server = url;
  options.token_file = "";
  options.timeout_s = 2;
  absl::StatusOr<KubeApiClient> client = KubeApiClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  BindingTarget target{"p", "default", "", "n"};
  EXPECT_EQ(client->Bind(target).code(), absl::StatusCode::kUnavailable);
  // No uid: the Binding has none either.
  EXPECT_FALSE(BindingBody(target)["metadata"].contains("uid"));
  EXPECT_EQ(BindingPath(target), "/api/v1/namespaces/default/pods/p/binding");
  // A missing token file is an error before any call.
  options.token_file = "/nonexistent/token";
  EXPECT_EQ(KubeApiClient::Create(options)->Bind(target).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gpuslice::k8s
