// The scheduler extender's pure core (gpuslice/k8s/extender.h): pods into requests, the filter,
// prioritize and bind verbs on a small cluster, the nodes file.
#include "gpuslice/k8s/extender.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpuslice/k8s/devices.h"

namespace gpuslice::k8s {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

place::NodeSpec Node(const std::string& name, place::GpuMode mode, int gpus,
                     const std::string& model = "A100-80GB") {
  place::NodeSpec spec;
  spec.name = name;
  spec.model = model;
  spec.cpu_milli = 64000;
  spec.memory_mib = 262144;
  spec.gpus = gpus;
  spec.mode = mode;
  if (mode == place::GpuMode::kMig) spec.hardware = hw::Catalog::Builtin().Find(model);
  return spec;
}

// A pod with one container per entry of `containers` (resource → quantity), requests = limits.
json Pod(const std::string& name, const std::vector<json>& containers,
         const std::vector<json>& init = {}) {
  auto list = [](const std::vector<json>& resources) {
    json out = json::array();
    for (size_t i = 0; i < resources.size(); ++i) {
      out.push_back({{"name", "c" + std::to_string(i)},
                     {"resources", {{"requests", resources[i]}, {"limits", resources[i]}}}});
    }
    return out;
  };
  json spec = {{"containers", list(containers)}};
  if (!init.empty()) spec["initContainers"] = list(init);
  return {{"metadata", {{"name", name}, {"namespace", "ml"}, {"uid", "uid-" + name}}},
          {"spec", spec},
          {"status", json::object()}};
}

json Args(const json& pod, const std::vector<std::string>& nodes) {
  return {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", nodes}};
}

json BindArgs(const std::string& pod, const std::string& node) {
  return {{"PodName", pod}, {"PodNamespace", "ml"}, {"PodUID", "uid-" + pod}, {"Node", node}};
}

Binder Accept(std::vector<BindingTarget>* seen) {
  return [seen](const BindingTarget& target) {
    seen->push_back(target);
    return absl::OkStatus();
  };
}

TEST(ParseQuantityTest, AcceptsWholeNumbersOnly) {
  EXPECT_EQ(*ParseQuantity(json(3)), 3);
  EXPECT_EQ(*ParseQuantity(json("12")), 12);
  EXPECT_EQ(*ParseQuantity(json("0")), 0);
  EXPECT_FALSE(ParseQuantity(json("1.5")).ok());
  EXPECT_FALSE(ParseQuantity(json("1k")).ok());
  EXPECT_FALSE(ParseQuantity(json(-1)).ok());
  EXPECT_FALSE(ParseQuantity(json(1.5)).ok());
  EXPECT_FALSE(ParseQuantity(json("")).ok());
  EXPECT_THAT(ParseQuantity(json("2Gi")).status().message(), HasSubstr("not a whole number"));
}

TEST(ParsePodTest, WholeGpusSumOverContainersAndTakeTheInitMaximum) {
  absl::StatusOr<PodRequest> pod =
      ParsePod(Pod("a", {{{"nvidia.com/gpu", "2"}}, {{"nvidia.com/gpu", 1}, {"cpu", "500m"}}},
                   {{{"nvidia.com/gpu", "1"}}}));
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->uid, "uid-a");
  EXPECT_EQ(pod->namespace_, "ml");
  ASSERT_EQ(pod->parts.size(), 1u);
  EXPECT_EQ(pod->parts[0].kind, PartKind::kWhole);
  EXPECT_EQ(pod->parts[0].request.num_gpu, 3);
  EXPECT_TRUE(pod->parts[0].request.whole());
  EXPECT_EQ(pod->parts[0].request.cpu_milli, 0);  // CPU is kube-scheduler's business

  pod = ParsePod(Pod("b", {{{"nvidia.com/gpu", "1"}}}, {{{"nvidia.com/gpu", "4"}}}));
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->parts[0].request.num_gpu, 4);
}

TEST(ParsePodTest, MigResourceNamesGoBackToCatalogProfiles) {
  absl::StatusOr<PodRequest> pod =
      ParsePod(Pod("m", {{{"nvidia.com/mig-1g.10gb.me", 2}}, {{"nvidia.com/mig-3g.40gb", "1"}}}));
  ASSERT_TRUE(pod.ok()) << pod.status();
  ASSERT_EQ(pod->parts.size(), 3u);
  EXPECT_EQ(pod->parts[0].request.mig_profile, "1g.10gb+me");
  EXPECT_EQ(pod->parts[1].request.mig_profile, "1g.10gb+me");
  EXPECT_EQ(pod->parts[2].request.mig_profile, "3g.40gb");
  for (const PodPart& part : pod->parts) {
    EXPECT_EQ(part.kind, PartKind::kMig);
    EXPECT_EQ(part.request.num_gpu, 1);
    EXPECT_TRUE(part.request.mig());
    EXPECT_EQ(MigResourceName(part.request.mig_profile), part.resource);
  }
}

TEST(ParsePodTest, ShareUnitsBecomeMilliRoundedUp) {
  absl::StatusOr<PodRequest> pod =
      ParsePod(Pod("s", {{{"gpuslice.io/gpu-share", "25"}}, {{"gpuslice.io/gpu-share", 40}}}));
  ASSERT_TRUE(pod.ok()) << pod.status();
  ASSERT_EQ(pod->parts.size(), 2u);  // one share per container
  EXPECT_EQ(pod->parts[0].request.gpu_milli, 250);
  EXPECT_EQ(pod->parts[1].request.gpu_milli, 400);
  EXPECT_EQ(pod->parts[0].request.vram_mib, 0);
  EXPECT_EQ(pod->parts[0].count, 25);

  pod = ParsePod(Pod("t", {{{"gpuslice.io/gpu-share", 1}}}), 3);
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->parts[0].request.gpu_milli, 334);
  // Init containers only: their largest share.
  pod = ParsePod(Pod("u", {{{"cpu", "1"}}}, {{{"gpuslice.io/gpu-share", 10}}}));
  ASSERT_TRUE(pod.ok()) << pod.status();
  ASSERT_EQ(pod->parts.size(), 1u);
  EXPECT_EQ(pod->parts[0].request.gpu_milli, 100);
}

TEST(ParsePodTest, LimitsAloneCountAndRequestsMustEqualLimits) {
  json pod = {{"metadata", {{"name", "l"}}},
              {"spec",
               {{"containers",
                 {{{"name", "c"}, {"resources", {{"limits", {{"nvidia.com/gpu", "2"}}}}}}}}}}};
  absl::StatusOr<PodRequest> parsed = ParsePod(pod);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->namespace_, "default");
  EXPECT_EQ(parsed->key(), "default/l");
  ASSERT_EQ(parsed->parts.size(), 1u);
  EXPECT_EQ(parsed->parts[0].request.num_gpu, 2);

  pod["spec"]["containers"][0]["resources"]["requests"] = {{"nvidia.com/gpu", "1"}};
  EXPECT_THAT(ParsePod(pod).status().message(), HasSubstr("requests 1 but limits 2"));
}

TEST(ParsePodTest, RefusesWhatTheEngineCannotExpress) {
  EXPECT_THAT(ParsePod(Pod("x", {{{"nvidia.com/mig-1g.10gb", 1}, {"nvidia.com/mig-2g.20gb", 1}}}))
                  .status()
                  .message(),
              HasSubstr("more than one MIG profile"));
  EXPECT_THAT(ParsePod(Pod("x", {{{"gpuslice.io/gpu-share", 101}}})).status().message(),
              HasSubstr("more than one GPU"));
  EXPECT_THAT(ParsePod(Pod("x", {{{"nvidia.com/mig-9g.1tb", 1}}})).status().message(),
              HasSubstr("no GPU model of the catalog"));
  EXPECT_THAT(
      ParsePod(Pod("x", {{{"gpuslice.io/gpu-share", 10}}}, {{{"gpuslice.io/gpu-share", 30}}}))
          .status()
          .message(),
      HasSubstr("init container"));
  EXPECT_THAT(ParsePod(Pod("x", {{{"nvidia.com/gpu", "0.5"}}})).status().message(),
              HasSubstr("nvidia.com/gpu"));
  EXPECT_FALSE(ParsePod(json::array()).ok());
}

TEST(ParsePodTest, PodWithoutGpuResourcesHasNoParts) {
  absl::StatusOr<PodRequest> pod = ParsePod(Pod("cpu", {{{"cpu", "2"}, {"memory", "1Gi"}}}));
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_TRUE(pod->parts.empty());
  // kube-scheduler's own test pod: "containers": null.
  pod = ParsePod(json::parse(R"({"metadata":{"name":"podname"},"spec":{"containers":null},
                                 "status":{}})"));
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_TRUE(pod->parts.empty());
}

class ExtenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Extender> made = Extender::Create({
        Node("whole-a", place::GpuMode::kWhole, 2),
        Node("whole-b", place::GpuMode::kWhole, 4),
        Node("share-a", place::GpuMode::kShared, 2),
        Node("mig-a", place::GpuMode::kMig, 1),
    });
    ASSERT_TRUE(made.ok()) << made.status();
    extender_.emplace(*std::move(made));
  }
  std::vector<std::string> all_ = {"whole-a", "whole-b", "share-a", "mig-a"};
  std::optional<Extender> extender_;
};

TEST_F(ExtenderTest, FilterSplitsFailedFromUnresolvable) {
  json reply = extender_->Filter(Args(Pod("p", {{{"nvidia.com/gpu", 3}}}), all_));
  EXPECT_EQ(reply["Error"], "");
  EXPECT_TRUE(reply["Nodes"].is_null());
  EXPECT_EQ(reply["NodeNames"], json({"whole-b"}));
  EXPECT_TRUE(reply["FailedNodes"].empty());
  const json& never = reply["FailedAndUnresolvableNodes"];
  EXPECT_THAT(never["whole-a"].get<std::string>(), HasSubstr("3 asked, the node has 2"));
  EXPECT_THAT(never["share-a"].get<std::string>(), HasSubstr("shared"));
  EXPECT_THAT(never["mig-a"].get<std::string>(), HasSubstr("mig"));

  // Take whole-b's GPUs: then it fails for now only.
  std::vector<BindingTarget> seen;
  ASSERT_EQ(extender_->Bind(BindArgs("p", "whole-b"), Accept(&seen))["Error"], "");
  reply = extender_->Filter(Args(Pod("q", {{{"nvidia.com/gpu", 2}}}), {"whole-b", "nowhere"}));
  EXPECT_EQ(reply["NodeNames"], json::array());
  EXPECT_THAT(reply["FailedNodes"]["whole-b"].get<std::string>(),
              HasSubstr("1 completely free, 2 asked"));
  EXPECT_THAT(reply["FailedAndUnresolvableNodes"]["nowhere"].get<std::string>(),
              HasSubstr("not among gpuslice's nodes"));
}

TEST_F(ExtenderTest, FilterAnswersInTheFormItWasAsked) {
  json nodes = {{"metadata", json::object()}, {"items", json::array()}};
  for (const std::string& name : all_) {
    nodes["items"].push_back({{"metadata", {{"name", name}, {"labels", {{"x", name}}}}}});
  }
  json args = {{"Pod", Pod("s", {{{"gpuslice.io/gpu-share", 30}}})},
               {"Nodes", nodes},
               {"NodeNames", nullptr}};
  json reply = extender_->Filter(args);
  EXPECT_EQ(reply["Error"], "");
  EXPECT_TRUE(reply["NodeNames"].is_null());
  ASSERT_EQ(reply["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(reply["Nodes"]["items"][0], nodes["items"][2]);  // unchanged
  EXPECT_EQ(reply["FailedAndUnresolvableNodes"].size(), 3u);
}

TEST_F(ExtenderTest, FilterOfAnInexpressiblePodFailsEveryNodeWithTheReason) {
  json reply =
      extender_->Filter(Args(Pod("x", {{{"gpuslice.io/gpu-share", 250}}}), {"share-a", "mig-a"}));
  EXPECT_EQ(reply["Error"], "");
  EXPECT_EQ(reply["NodeNames"], json::array());
  EXPECT_THAT(reply["FailedAndUnresolvableNodes"]["share-a"].get<std::string>(),
              HasSubstr("more than one GPU"));
  EXPECT_EQ(reply["FailedAndUnresolvableNodes"].size(), 2u);
}

// Found by fuzz/fuzz_extender_json: a pod list item whose spec.nodeName (or status.phase,
// metadata.uid, namespace or name) was not a string made Resync throw json's type_error out of
// the extender (std::terminate in `gpuslice extender`). Such a field reads as absent.
TEST_F(ExtenderTest, ResyncReadsFieldsOfAnotherTypeAsAbsent) {
  std::vector<BindingTarget> seen;
  ASSERT_EQ(extender_->Filter(Args(Pod("p", {{{"nvidia.com/gpu", 1}}}), all_))["Error"], "");
  ASSERT_EQ(extender_->Bind(BindArgs("p", "whole-a"), Accept(&seen))["Error"], "");
  json bound_elsewhere = Pod("q", {{{"nvidia.com/gpu", 1}}});
  bound_elsewhere["spec"]["nodeName"] = json::object();
  json still_running = Pod("p", {{{"nvidia.com/gpu", 1}}});
  still_running["spec"]["nodeName"] = "whole-a";
  still_running["status"]["phase"] = json::array({"Succeeded"});
  json odd_names = Pod("r", {});
  odd_names["metadata"] = {{"uid", 7}, {"namespace", json::array()}, {"name", nullptr}};
  absl::StatusOr<ResyncResult> result;
  ASSERT_NO_THROW(result = extender_->Resync(
                      json{{"items", json::array({bound_elsewhere, still_running, odd_names})}}));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->adopted.empty());   // q names no node it runs on
  EXPECT_TRUE(result->released.empty());  // p is not finished: its phase is not a string
  EXPECT_TRUE(result->conflicts.empty());
  EXPECT_NE(extender_->Find("uid-p"), nullptr);
}

TEST_F(ExtenderTest, MalformedFilterArgumentsAreAnError) {
  EXPECT_THAT(extender_->Filter(json{{"NodeNames", {"a"}}})["Error"].get<std::string>(),
              HasSubstr("Pod"));
  EXPECT_THAT(
      extender_->Filter(json{{"Pod", Pod("p", {})}, {"NodeNames", 3}})["Error"].get<std::string>(),
      HasSubstr("NodeNames"));
  EXPECT_FALSE(extender_->Prioritize(json::array()).ok());
}

TEST_F(ExtenderTest, PodWithoutGpusPassesEverywhereAndScoresZero) {
  json pod = Pod("cpu", {{{"cpu", "1"}}});
  std::vector<std::string> nodes = all_;
  nodes.push_back("not-gpuslice");
  json reply = extender_->Filter(Args(pod, nodes));
  EXPECT_EQ(reply["NodeNames"], json(nodes));
  absl::StatusOr<json> scores = extender_->Prioritize(Args(pod, nodes));
  ASSERT_TRUE(scores.ok()) << scores.status();
  ASSERT_EQ(scores->size(), nodes.size());
  for (const json& host : *scores) EXPECT_EQ(host["Score"], 0);
  std::vector<BindingTarget> seen;
  EXPECT_EQ(extender_->Bind(BindArgs("cpu", "not-gpuslice"), Accept(&seen))["Error"], "");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].node, "not-gpuslice");
}

TEST_F(ExtenderTest, PrioritizeGivesTheEnginesChoiceTenAndKeepsTheOrder) {
  // whole-a has 2 GPUs, whole-b 4: after one GPU is taken on whole-b, a packing policy prefers it.
  std::vector<BindingTarget> seen;
  ASSERT_EQ(extender_->Filter(Args(Pod("first", {{{"nvidia.com/gpu", 1}}}), all_))["Error"], "");
  ASSERT_EQ(extender_->Bind(BindArgs("first", "whole-b"), Accept(&seen))["Error"], "");
  json pod = Pod("second", {{{"nvidia.com/gpu", 1}}});
  absl::StatusOr<json> scores = extender_->Prioritize(Args(pod, all_));
  ASSERT_TRUE(scores.ok()) << scores.status();
  ASSERT_EQ(scores->size(), 4u);
  int tens = 0;
  for (const json& host : *scores) {
    EXPECT_GE(host["Score"].get<int>(), 0);
    EXPECT_LE(host["Score"].get<int>(), 10);
    tens += host["Score"] == 10 ? 1 : 0;
  }
  EXPECT_EQ(tens, 1);
  // Hosts come back in the order asked; nodes that cannot hold the pod get 0.
  EXPECT_EQ((*scores)[0]["Host"], "whole-a");
  EXPECT_EQ((*scores)[2]["Host"], "share-a");
  EXPECT_EQ((*scores)[2]["Score"], 0);
  EXPECT_EQ((*scores)[3]["Score"], 0);
  // The 10 goes where the policy scores best.
  const int a = extender_->NodeIndex("whole-a");
  const int b = extender_->NodeIndex("whole-b");
  absl::StatusOr<PodRequest> parsed = ParsePod(pod);
  ASSERT_TRUE(parsed.ok());
  const place::Score sa = extender_->ScoreNode(*parsed, a);
  const place::Score sb = extender_->ScoreNode(*parsed, b);
  const std::string best = sb > sa ? "whole-b" : "whole-a";
  for (const json& host : *scores) {
    if (host["Host"] == best) {
      EXPECT_EQ(host["Score"], 10);
    }
  }
}

TEST_F(ExtenderTest, BindClaimsPostsAndIsIdempotent) {
  json pod = Pod("m", {{{"nvidia.com/mig-3g.40gb", 2}}});
  json reply = extender_->Filter(Args(pod, all_));
  ASSERT_EQ(reply["NodeNames"], json({"mig-a"}));
  std::vector<BindingTarget> seen;
  EXPECT_EQ(extender_->Bind(BindArgs("m", "mig-a"), Accept(&seen))["Error"], "");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].pod_name, "m");
  EXPECT_EQ(seen[0].pod_namespace, "ml");
  EXPECT_EQ(seen[0].pod_uid, "uid-m");
  EXPECT_EQ(seen[0].node, "mig-a");
  const PodPlacement* placed = extender_->Find("uid-m");
  ASSERT_NE(placed, nullptr);
  EXPECT_EQ(placed->node, "mig-a");
  ASSERT_EQ(placed->allocations.size(), 2u);
  const geometry::Shape* shape = extender_->cluster().shape(extender_->NodeIndex("mig-a"));
  for (const place::Allocation& allocation : placed->allocations) {
    ASSERT_EQ(allocation.gpus.size(), 1u);
    EXPECT_EQ(shape->profile(allocation.gpus[0].mig_profile).name, "3g.40gb");
  }
  EXPECT_NE(placed->allocations[0].gpus[0].mig_start, placed->allocations[1].gpus[0].mig_start);
  // Again to the same node: success, no second post.
  EXPECT_EQ(extender_->Bind(BindArgs("m", "mig-a"), Accept(&seen))["Error"], "");
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_THAT(extender_->Bind(BindArgs("m", "whole-a"), Accept(&seen))["Error"].get<std::string>(),
              HasSubstr("already bound to node mig-a"));
  // The GPU is full of 3g instances now: a third does not fit.
  reply = extender_->Filter(Args(Pod("m2", {{{"nvidia.com/mig-3g.40gb", 1}}}), {"mig-a"}));
  EXPECT_TRUE(reply["FailedNodes"].contains("mig-a")) << reply.dump();
  EXPECT_NE(extender_->State()["pods"].dump().find("3g.40gb"), std::string::npos);
  // Released: it fits again.
  EXPECT_TRUE(extender_->Release("uid-m").ok());
  EXPECT_EQ(extender_->Release("uid-m").code(), absl::StatusCode::kNotFound);
  reply = extender_->Filter(Args(Pod("m2", {{{"nvidia.com/mig-3g.40gb", 1}}}), {"mig-a"}));
  EXPECT_EQ(reply["NodeNames"], json({"mig-a"}));
}

TEST_F(ExtenderTest, MultiPartPodPassesOnlyWhereEveryPartFits) {
  // One A100-80GB: two 4g instances never fit together (4 + 4 > 7 slices).
  json reply = extender_->Filter(Args(Pod("two", {{{"nvidia.com/mig-4g.40gb", 2}}}), {"mig-a"}));
  EXPECT_EQ(reply["NodeNames"], json::array());
  EXPECT_TRUE(reply["FailedNodes"].contains("mig-a")) << reply.dump();
  EXPECT_EQ(extender_->cluster().FreeMilli(extender_->NodeIndex("mig-a"), 0), 1000);
  // Two shares of 60 units: on two different GPUs of share-a.
  reply = extender_->Filter(
      Args(Pod("s", {{{"gpuslice.io/gpu-share", 60}}, {{"gpuslice.io/gpu-share", 60}}}), all_));
  EXPECT_EQ(reply["NodeNames"], json({"share-a"}));
  std::vector<BindingTarget> seen;
  ASSERT_EQ(extender_->Bind(BindArgs("s", "share-a"), Accept(&seen))["Error"], "");
  const int node = extender_->NodeIndex("share-a");
  EXPECT_EQ(extender_->cluster().FreeMilli(node, 0), 400);
  EXPECT_EQ(extender_->cluster().FreeMilli(node, 1), 400);
}

TEST_F(ExtenderTest, FailedBinderReleasesTheClaim) {
  json pod = Pod("w", {{{"nvidia.com/gpu", 2}}});
  ASSERT_EQ(extender_->Filter(Args(pod, {"whole-a"}))["NodeNames"], json({"whole-a"}));
  json reply = extender_->Bind(BindArgs("w", "whole-a"), [](const BindingTarget&) {
    return absl::PermissionDeniedError("HTTP 403: forbidden");
  });
  EXPECT_THAT(reply["Error"].get<std::string>(), HasSubstr("403"));
  EXPECT_EQ(extender_->Find("uid-w"), nullptr);
  EXPECT_EQ(extender_->cluster().FreeMilli(extender_->NodeIndex("whole-a"), 0), 1000);
  EXPECT_EQ(extender_->cluster().FreeMilli(extender_->NodeIndex("whole-a"), 1), 1000);
  // The pod is still known: a retry binds it.
  std::vector<BindingTarget> seen;
  EXPECT_EQ(extender_->Bind(BindArgs("w", "whole-a"), Accept(&seen))["Error"], "");
  EXPECT_EQ(seen.size(), 1u);
}

TEST_F(ExtenderTest, BindRefusesUnseenPodsAndNodesWithoutRoom) {
  std::vector<BindingTarget> seen;
  EXPECT_THAT(
      extender_->Bind(BindArgs("ghost", "whole-a"), Accept(&seen))["Error"].get<std::string>(),
      HasSubstr("not seen"));
  ASSERT_EQ(extender_->Filter(Args(Pod("big", {{{"nvidia.com/gpu", 4}}}), all_))["NodeNames"],
            json({"whole-b"}));
  EXPECT_THAT(
      extender_->Bind(BindArgs("big", "whole-a"), Accept(&seen))["Error"].get<std::string>(),
      HasSubstr("does not fit on node whole-a"));
  EXPECT_THAT(extender_->Bind(json{{"PodName", "big"}}, Accept(&seen))["Error"].get<std::string>(),
              HasSubstr("required"));
  EXPECT_TRUE(seen.empty());
}

TEST(ExtenderCreateTest, RefusesRandomAndUnknownPoliciesAndBadUnits) {
  std::vector<place::NodeSpec> nodes = {Node("n", place::GpuMode::kWhole, 1)};
  ExtenderOptions options;
  options.policy = "random";
  EXPECT_THAT(Extender::Create(nodes, options).status().message(), HasSubstr("random"));
  options.policy = "nope";
  EXPECT_EQ(Extender::Create(nodes, options).status().code(), absl::StatusCode::kNotFound);
  options.policy = "bestfit";
  options.units_per_gpu = 1;
  EXPECT_FALSE(Extender::Create(nodes, options).ok());
  options.units_per_gpu = 10;
  EXPECT_TRUE(Extender::Create(nodes, options).ok());
}

TEST(ParseNodesYamlTest, ReadsNodesAndLocatesErrors) {
  absl::StatusOr<std::vector<place::NodeSpec>> nodes = ParseNodesYaml(R"(nodes:
- name: gpu-1
  gpus: 8
  mode: mig
  model: h100-sxm5
- name: gpu-2
  gpus: 2
  mode: shared
  model: L4
  gpu_memory_mib: 23034
- name: gpu-3
  gpus: 4
  mode: whole
)",
                                                                      "nodes.yaml");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_EQ((*nodes)[0].model, "H100-80GB");
  ASSERT_NE((*nodes)[0].hardware, nullptr);
  EXPECT_EQ((*nodes)[0].mode, place::GpuMode::kMig);
  EXPECT_GT((*nodes)[0].gpu_memory_mib, 80000);
  EXPECT_EQ((*nodes)[1].gpu_memory_mib, 23034);
  EXPECT_EQ((*nodes)[2].mode, place::GpuMode::kWhole);
  EXPECT_TRUE(Extender::Create(*nodes).ok());

  EXPECT_THAT(
      ParseNodesYaml("nodes:\n- name: a\n  gpus: 1\n  mode: sliced\n", "n.yaml").status().message(),
      HasSubstr("n.yaml:4"));
  EXPECT_THAT(ParseNodesYaml("nodes:\n- name: a\n  gpus: 1\n  mode: mig\n  model: T4\n", "n.yaml")
                  .status()
                  .message(),
              HasSubstr("no MIG"));
  EXPECT_THAT(
      ParseNodesYaml("nodes:\n- name: a\n  gpus: 1\n  mode: whole\n  colour: red\n", "n.yaml")
          .status()
          .message(),
      HasSubstr("colour"));
  EXPECT_FALSE(ParseNodesYaml("nodes: [", "n.yaml").ok());
}

TEST(ParseNodesYamlTest, FixedMigLayoutsAreHandedOutAsTheyAre) {
  absl::StatusOr<std::vector<place::NodeSpec>> nodes = ParseNodesYaml(R"(nodes:
- name: small-slices
  gpus: 2
  mode: mig
  model: A100-80GB
  layouts: ["1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb"]
- name: mixed
  gpus: 2
  mode: mig
  model: A100-80GB
  layouts: ["3g.40gb,3g.40gb", "4g.40gb,2g.20gb,1g.10gb"]
)",
                                                                      "nodes.yaml");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ((*nodes)[0].fixed.size(), 2u);
  EXPECT_EQ((*nodes)[0].fixed[1].instances.size(), 7u);
  EXPECT_EQ((*nodes)[1].fixed[1].instances.size(), 3u);
  absl::StatusOr<Extender> extender = Extender::Create(*nodes);
  ASSERT_TRUE(extender.ok()) << extender.status();
  // A 3g.40gb exists only on `mixed`; on `small-slices` it never will (its layout is fixed).
  json reply = extender->Filter(
      Args(Pod("p", {{{"nvidia.com/mig-3g.40gb", 1}}}), {"small-slices", "mixed"}));
  EXPECT_EQ(reply["NodeNames"], json({"mixed"}));
  EXPECT_TRUE(reply["FailedAndUnresolvableNodes"].contains("small-slices") ||
              reply["FailedNodes"].contains("small-slices"))
      << reply.dump();
  std::vector<BindingTarget> seen;
  ASSERT_EQ(extender->Bind(BindArgs("p", "mixed"), Accept(&seen))["Error"], "");
  const PodPlacement* placed = extender->Find("uid-p");
  ASSERT_NE(placed, nullptr);
  const place::GpuClaim& claim = placed->allocations[0].gpus[0];
  EXPECT_EQ(claim.gpu, 0);  // the GPU whose fixed layout has 3g.40gb instances
  EXPECT_TRUE(claim.mig_start == 0 || claim.mig_start == 4) << claim.mig_start;

  EXPECT_THAT(ParseNodesYaml("nodes:\n- name: a\n  gpus: 2\n  mode: mig\n  model: A100-80GB\n"
                             "  layouts: [\"7g.80gb,1g.10gb\"]\n",
                             "n.yaml")
                  .status()
                  .message(),
              HasSubstr("not a valid layout"));
  EXPECT_THAT(ParseNodesYaml("nodes:\n- name: a\n  gpus: 3\n  mode: mig\n  model: A100-80GB\n"
                             "  layouts: [\"7g.80gb\", \"7g.80gb\"]\n",
                             "n.yaml")
                  .status()
                  .message(),
              HasSubstr("2 layouts for 3 GPUs"));
  EXPECT_THAT(ParseNodesYaml("nodes:\n- name: a\n  gpus: 1\n  mode: whole\n"
                             "  layouts: [\"7g.80gb\"]\n",
                             "n.yaml")
                  .status()
                  .message(),
              HasSubstr("only MIG nodes"));
}

}  // namespace
}  // namespace gpuslice::k8s
