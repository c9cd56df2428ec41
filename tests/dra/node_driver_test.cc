// The DRA driver's node logic on a simulated machine: what it offers, prepare and unprepare of
// claims (MIG on demand, whole and shared GPUs), bad input per claim, crashes at every step, and
// the property that every allocation the stand-in scheduler can make is prepared.
#include "gpuslice/dra/node_driver.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include "dra/standin_scheduler.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/dra/cdi.h"
#include "gpuslice/dra/claim.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/spec/mig_parted.h"
#include "nlohmann/json.hpp"

namespace gpuslice::dra {
namespace {

using nlohmann::json;

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

// A simulated node: GPUs of `spec`, MIG enabled on those listed.
struct Node {
  std::unique_ptr<device::SimBackend> backend;
  std::string dir;
  std::map<std::string, json> claims;  // by "namespace/name"

  Node(const std::string& spec, std::set<int> mig_on) {
    absl::StatusOr<device::sim::SimState> state = device::sim::NewMachine(Catalog(), spec);
    EXPECT_TRUE(state.ok()) << state.status();
    for (int g : mig_on) {
      state->gpus[static_cast<size_t>(g)].mig_current = device::MigMode::kEnabled;
      state->gpus[static_cast<size_t>(g)].mig_pending = device::MigMode::kEnabled;
    }
    backend = std::make_unique<device::SimBackend>(*state, Catalog());
    dir = std::filesystem::temp_directory_path() /
          ("dra-node-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Node() { std::filesystem::remove_all(dir); }

  NodeDriverOptions Options() const {
    NodeDriverOptions o;
    o.node_name = "node-a";
    o.checkpoint_path = dir + "/checkpoint.json";
    o.cdi_dir = dir + "/cdi";
    o.allocate.interposer_host_path = "/usr/lib/gpuslice/libgpuslice-cuda.so";
    o.allocate.device_specs = true;
    return o;
  }

  std::unique_ptr<NodeDriver> Driver(NodeDriverOptions o) {
    absl::StatusOr<std::unique_ptr<NodeDriver>> d = NodeDriver::Create(
        *backend, Catalog(),
        [this](const std::string& ns, const std::string& name) -> absl::StatusOr<json> {
          auto it = claims.find(ns + "/" + name);
          if (it == claims.end()) return absl::NotFoundError("no such claim");
          return it->second;
        },
        std::move(o));
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? std::move(*d) : nullptr;
  }
  std::unique_ptr<NodeDriver> Driver() { return Driver(Options()); }

  // Puts an allocated claim: results (device, extra fields) from our driver in our pool.
  void Claim(const std::string& name, const std::vector<json>& results,
             const json& config = json::array()) {
    json list = json::array();
    for (const json& r : results) {
      json result = {{"request", "gpu"}, {"driver", kDriverName}, {"pool", "node-a"}};
      result.update(r);
      list.push_back(result);
    }
    claims["default/" + name] = {
        {"metadata", {{"name", name}, {"namespace", "default"}, {"uid", "uid-" + name}}},
        {"status", {{"allocation", {{"devices", {{"results", list}, {"config", config}}}}}}}};
  }

  std::vector<device::GpuInstanceInfo> Gis(int gpu) {
    absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis = backend->ListGpuInstances(gpu);
    EXPECT_TRUE(gis.ok());
    return gis.ok() ? *gis : std::vector<device::GpuInstanceInfo>{};
  }

  json CdiSpecOf(const std::string& uid) {
    std::ifstream in(CdiSpecPath(dir + "/cdi", uid));
    if (!in) return nullptr;
    std::stringstream text;
    text << in.rdbuf();
    return json::parse(text.str());
  }

  static inline int counter = 0;
};

std::map<std::string, std::string> EnvOf(const json& cdi_device) {
  std::map<std::string, std::string> env;
  for (const json& e : cdi_device["containerEdits"]["env"]) {
    const std::string s = e.get<std::string>();
    env[s.substr(0, s.find('='))] = s.substr(s.find('=') + 1);
  }
  return env;
}

std::set<std::string> DeviceNames(const std::vector<ResourceSlice>& slices) {
  std::set<std::string> names;
  for (const ResourceSlice& s : slices) {
    for (const Device& d : s.devices) names.insert(d.name);
  }
  return names;
}

TEST(DraNodeDriver, OffersMigOnDemandWholeAndSharedGpus) {
  Node node("3xH100-80GB", {0});
  NodeDriverOptions options = node.Options();
  options.shared_gpus = {"2"};
  std::unique_ptr<NodeDriver> driver = node.Driver(options);
  absl::StatusOr<std::vector<ResourceSlice>> slices = driver->Slices(SliceLayout::kSplit);
  ASSERT_TRUE(slices.ok()) << slices.status();
  const std::set<std::string> names = DeviceNames(*slices);
  EXPECT_TRUE(names.contains(MigDeviceName(0, "1g.10gb", 0)));
  EXPECT_TRUE(names.contains(MigDeviceName(0, "7g.80gb", 0)));
  EXPECT_FALSE(names.contains(WholeDeviceName(0)));  // MIG on: its whole size is 7g.80gb
  EXPECT_TRUE(names.contains(WholeDeviceName(1)));
  EXPECT_FALSE(names.contains(MigDeviceName(1, "1g.10gb", 0)));
  EXPECT_TRUE(names.contains(SharedDeviceName(2)));
  EXPECT_FALSE(names.contains(WholeDeviceName(2)));
  for (const ResourceSlice& s : *slices) {
    EXPECT_TRUE(Validate(s).ok()) << Validate(s);
    for (const Device& d : s.devices) {
      if (d.name != SharedDeviceName(2)) continue;
      EXPECT_TRUE(d.allow_multiple_allocations);
      EXPECT_EQ(d.capacity.at("compute").value, Count(1000));
      ASSERT_TRUE(d.capacity.at("compute").request_policy.has_value());
      EXPECT_EQ(d.capacity.at("compute").request_policy->step, Count(10));
    }
  }
}

TEST(DraNodeDriver, PreparesAMigClaimAtItsPlacementAndUnpreparesIt) {
  Node node("1xH100-80GB", {0});
  std::unique_ptr<NodeDriver> driver = node.Driver();
  const std::string device = MigDeviceName(0, "3g.40gb", 4);
  node.Claim("a", {{{"device", device}}});
  absl::StatusOr<std::vector<PreparedOut>> out = driver->Prepare("default", "uid-a", "a");
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].device, device);
  EXPECT_EQ((*out)[0].request, "gpu");
  EXPECT_EQ((*out)[0].cdi_id, "gpu.gpuslice.io/claim=uid-a-" + device);
  const std::vector<device::GpuInstanceInfo> gis = node.Gis(0);
  ASSERT_EQ(gis.size(), 1u);
  EXPECT_EQ(gis[0].start, 4);
  EXPECT_EQ(gis[0].profile_id, Catalog().Find("H100-80GB")->mig->FindProfile("3g.40gb")->smi_id);
  const json spec = node.CdiSpecOf("uid-a");
  ASSERT_FALSE(spec.is_null());
  EXPECT_EQ(spec["kind"], "gpu.gpuslice.io/claim");
  EXPECT_EQ(spec["devices"][0]["name"], "uid-a-" + device);
  const auto env = EnvOf(spec["devices"][0]);
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES").rfind("MIG-", 0), 0u)
      << env.at("NVIDIA_VISIBLE_DEVICES");
  EXPECT_EQ(driver->checkpoint().claims.at("uid-a").phase, ClaimPhase::kPrepared);

  // kubelet retries: the same answer, nothing new created.
  absl::StatusOr<std::vector<PreparedOut>> again = driver->Prepare("default", "uid-a", "a");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *out);
  EXPECT_EQ(node.Gis(0).size(), 1u);

  ASSERT_TRUE(driver->Unprepare("uid-a").ok());
  EXPECT_TRUE(node.Gis(0).empty());
  EXPECT_TRUE(node.CdiSpecOf("uid-a").is_null());
  EXPECT_TRUE(driver->checkpoint().claims.empty());
  EXPECT_TRUE(driver->Unprepare("uid-a").ok());  // unknown claim: fine
}

TEST(DraNodeDriver, ForeignInstancesAreNeitherOfferedOverNorTouched) {
  Node node("1xH100-80GB", {0});
  const int two_g = Catalog().Find("H100-80GB")->mig->FindProfile("2g.20gb")->smi_id;
  ASSERT_TRUE(node.backend->CreateGpuInstance(0, two_g, 0).ok());
  std::unique_ptr<NodeDriver> driver = node.Driver();
  absl::StatusOr<std::vector<ResourceSlice>> slices = driver->Slices(SliceLayout::kSplit);
  ASSERT_TRUE(slices.ok()) << slices.status();
  const std::set<std::string> names = DeviceNames(*slices);
  EXPECT_FALSE(names.contains(MigDeviceName(0, "1g.10gb", 0)));
  EXPECT_FALSE(names.contains(MigDeviceName(0, "7g.80gb", 0)));
  EXPECT_TRUE(names.contains(MigDeviceName(0, "1g.10gb", 2)));
  EXPECT_TRUE(names.contains(MigDeviceName(0, "3g.40gb", 4)));
  EXPECT_FALSE(names.contains(MigDeviceName(0, "4g.40gb", 0)));
  // The counters left: compute slices 7 - 2.
  for (const ResourceSlice& s : *slices) {
    for (const CounterSet& set : s.shared_counters) {
      if (set.counters.contains("compute-slices")) {
        EXPECT_EQ(set.counters.at("compute-slices"), Count(5));
      }
    }
  }
  node.Claim("a", {{{"device", MigDeviceName(0, "1g.10gb", 0)}}});
  absl::StatusOr<std::vector<PreparedOut>> out = driver->Prepare("default", "uid-a", "a");
  EXPECT_EQ(out.status().code(), absl::StatusCode::kNotFound) << out.status();
  EXPECT_EQ(node.Gis(0).size(), 1u);
  EXPECT_TRUE(driver->checkpoint().claims.empty());
}

TEST(DraNodeDriver, BadClaimsFailAloneAndCreateNothing) {
  Node node("1xH100-80GB", {0});
  std::unique_ptr<NodeDriver> driver = node.Driver();
  const std::string d1 = MigDeviceName(0, "1g.10gb", 0);
  node.Claim("held", {{{"device", d1}}});
  ASSERT_TRUE(driver->Prepare("default", "uid-held", "held").ok());

  struct Case {
    std::string name;
    std::function<void()> put;
    absl::StatusCode code;
  };
  const std::vector<Case> cases = {
      {"unknown",
       [&] {
         node.Claim("unknown", {{{"device", "gpu-0-mig-9g-900gb-0"}}});
       },
       absl::StatusCode::kNotFound},
      {"taken",
       [&] {
         node.Claim("taken", {{{"device", d1}}});
       },
       absl::StatusCode::kFailedPrecondition},
      {"overlap",
       [&] {
         node.Claim("overlap", {{{"device", MigDeviceName(0, "2g.20gb", 0)}}});
       },
       absl::StatusCode::kFailedPrecondition},
      {"two-overlapping",
       [&] {
         node.Claim("two-overlapping", {{{"device", MigDeviceName(0, "3g.40gb", 4)}},
                                        {{"device", MigDeviceName(0, "4g.40gb", 0)}}});
       },
       absl::StatusCode::kFailedPrecondition},
      {"params",
       [&] {
         node.Claim(
             "params", {{{"device", MigDeviceName(0, "1g.10gb", 6)}}},
             json::array({{{"source", "FromClaim"},
                           {"opaque",
                            {{"driver", kDriverName}, {"parameters", {{"kind", "Nonsense"}}}}}}}));
       },
       absl::StatusCode::kInvalidArgument},
      {"capacity-on-mig",
       [&] {
         node.Claim("capacity-on-mig", {{{"device", MigDeviceName(0, "1g.10gb", 6)},
                                         {"consumedCapacity", {{"compute", "250"}}}}});
       },
       absl::StatusCode::kInvalidArgument},
      {"other-pool",
       [&] {
         node.Claim("other-pool",
                    {{{"device", MigDeviceName(0, "1g.10gb", 6)}, {"pool", "node-b"}}});
       },
       absl::StatusCode::kFailedPrecondition},
  };
  for (const Case& c : cases) {
    c.put();
    absl::StatusOr<std::vector<PreparedOut>> out =
        driver->Prepare("default", "uid-" + c.name, c.name);
    EXPECT_EQ(out.status().code(), c.code) << c.name << ": " << out.status();
    EXPECT_FALSE(out.status().message().empty());
    EXPECT_EQ(node.Gis(0).size(), 1u) << c.name;
    EXPECT_FALSE(driver->checkpoint().claims.contains("uid-" + c.name)) << c.name;
    EXPECT_TRUE(node.CdiSpecOf("uid-" + c.name).is_null()) << c.name;
  }
  // Not allocated, replaced, missing.
  node.claims["default/plain"] = {{"metadata", {{"uid", "uid-plain"}}}};
  EXPECT_EQ(driver->Prepare("default", "uid-plain", "plain").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(driver->Prepare("default", "uid-other", "held").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(driver->Prepare("default", "uid-none", "none").status().code(),
            absl::StatusCode::kUnavailable);
  // A uid that is no Kubernetes uid never reaches a file name.
  EXPECT_EQ(driver->Prepare("default", "../../etc/x", "held").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(driver->checkpoint().claims.size(), 1u);
}

TEST(DraNodeDriver, AnInstanceWithProcessesIsNotDestroyed) {
  Node node("1xH100-80GB", {0});
  std::unique_ptr<NodeDriver> driver = node.Driver();
  node.Claim("a", {{{"device", MigDeviceName(0, "1g.10gb", 3)}}});
  ASSERT_TRUE(driver->Prepare("default", "uid-a", "a").ok());
  const device::GpuInstanceInfo gi = node.Gis(0).at(0);
  ASSERT_TRUE(node.backend
                  ->Control("add", true,
                            [&](device::sim::SimMachine& m) {
                              device::sim::SimProcess p;
                              p.pid = 4242;
                              p.name = "python";
                              p.gi = gi.id;
                              p.ci = 0;
                              return m.AddProcess(0, p);
                            })
                  .ok());
  absl::Status busy = driver->Unprepare("uid-a");
  EXPECT_EQ(busy.code(), absl::StatusCode::kFailedPrecondition) << busy;
  EXPECT_NE(busy.message().find("4242"), std::string::npos);
  EXPECT_EQ(node.Gis(0).size(), 1u);
  ASSERT_TRUE(node.backend->TerminateProcess(4242, 0).ok());
  EXPECT_TRUE(driver->Unprepare("uid-a").ok());
  EXPECT_TRUE(node.Gis(0).empty());
}

TEST(DraNodeDriver, SharedGpuLimitsComeFromTheAllocation) {
  Node node("1xA100-40GB", {});
  NodeDriverOptions options = node.Options();
  options.shared_gpus = {"all"};
  std::unique_ptr<NodeDriver> driver = node.Driver(options);
  const std::string device = SharedDeviceName(0);
  const std::string share = "0b9e7a3c-1111-4e2f-9a6b-2c3d4e5f6a7b";
  node.Claim("s", {{{"device", device},
                    {"shareID", share},
                    {"consumedCapacity", {{"compute", "250"}, {"memory", "10Gi"}}}}});
  absl::StatusOr<std::vector<PreparedOut>> out = driver->Prepare("default", "uid-s", "s");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].share_id, share);
  const json spec = node.CdiSpecOf("uid-s");
  const auto env = EnvOf(spec["devices"][0]);
  EXPECT_EQ(env.at("GPUSLICE_COMPUTE_SHARE_MILLI"), "250");
  EXPECT_EQ(env.at("GPUSLICE_VRAM_LIMIT_MIB"), "10240");
  EXPECT_EQ(env.at("LD_PRELOAD"), "/usr/lib/gpuslice/libgpuslice-cuda.so");
  EXPECT_EQ(env.at("GPUSLICE_SLICE"), "dra-uid-s-" + device + "-" + share);

  // A config may lower the share, never raise it.
  auto config = [](int milli) {
    return json::array({{{"source", "FromClaim"},
                         {"opaque",
                          {{"driver", kDriverName},
                           {"parameters",
                            {{"apiVersion", kConfigApiVersion},
                             {"kind", kConfigKind},
                             {"computeShareMilli", milli}}}}}}});
  };
  const std::string share2 = "0b9e7a3c-2222-4e2f-9a6b-2c3d4e5f6a7b";
  node.Claim("lower",
             {{{"device", device},
               {"shareID", share2},
               {"consumedCapacity", {{"compute", "300"}, {"memory", "4Gi"}}}}},
             config(100));
  ASSERT_TRUE(driver->Prepare("default", "uid-lower", "lower").ok());
  EXPECT_EQ(EnvOf(node.CdiSpecOf("uid-lower")["devices"][0]).at("GPUSLICE_COMPUTE_SHARE_MILLI"),
            "100");
  node.Claim("raise",
             {{{"device", device},
               {"shareID", share2},
               {"consumedCapacity", {{"compute", "50"}, {"memory", "1Gi"}}}}},
             config(200));
  EXPECT_EQ(driver->Prepare("default", "uid-raise", "raise").status().code(),
            absl::StatusCode::kInvalidArgument);
  // 250 + 100 held; 700 more would pass 1000.
  node.Claim("over", {{{"device", device},
                       {"shareID", share2},
                       {"consumedCapacity", {{"compute", "700"}, {"memory", "1Gi"}}}}});
  EXPECT_EQ(driver->Prepare("default", "uid-over", "over").status().code(),
            absl::StatusCode::kFailedPrecondition);
  node.Claim("bad-share", {{{"device", device}, {"shareID", "NOT-A-UUID"}}});
  EXPECT_EQ(driver->Prepare("default", "uid-bad-share", "bad-share").status().code(),
            absl::StatusCode::kInvalidArgument);

  // Without an interposer on the node a share is refused, not handed out unenforced.
  options.allocate.interposer_host_path.clear();
  options.checkpoint_path = node.dir + "/other.json";
  std::unique_ptr<NodeDriver> bare = node.Driver(options);
  EXPECT_EQ(bare->Prepare("default", "uid-s", "s").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(DraNodeDriver, WholeGpuIsExclusive) {
  Node node("1xH100-80GB", {});
  std::unique_ptr<NodeDriver> driver = node.Driver();
  node.Claim("w", {{{"device", WholeDeviceName(0)}}});
  ASSERT_TRUE(driver->Prepare("default", "uid-w", "w").ok());
  const auto env = EnvOf(node.CdiSpecOf("uid-w")["devices"][0]);
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES").rfind("GPU-", 0), 0u);
  node.Claim("w2", {{{"device", WholeDeviceName(0)}}});
  EXPECT_EQ(driver->Prepare("default", "uid-w2", "w2").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(DraNodeDriver, AFixedLayoutOffersItsInstancesAsTheyAre) {
  Node node("1xH100-80GB", {0});
  const hw::MigSpec& mig = *Catalog().Find("H100-80GB")->mig;
  const int three_g = mig.FindProfile("3g.40gb")->smi_id;
  absl::StatusOr<device::GpuInstanceInfo> gi = node.backend->CreateGpuInstance(0, three_g, 4);
  ASSERT_TRUE(gi.ok());
  // Its full-size compute instance (3c), as an admin's `nvidia-smi mig -cgi ... -C` makes it.
  ASSERT_TRUE(node.backend->CreateComputeInstance(0, gi->id, mig.ci_profiles[3].back().id, 0).ok());
  NodeDriverOptions options = node.Options();
  options.fixed_gpus = {"0"};
  std::unique_ptr<NodeDriver> driver = node.Driver(options);
  absl::StatusOr<std::vector<ResourceSlice>> slices = driver->Slices(SliceLayout::kSplit);
  ASSERT_TRUE(slices.ok()) << slices.status();
  EXPECT_EQ(DeviceNames(*slices), std::set<std::string>{MigDeviceName(0, "3g.40gb", 4)});
  for (const ResourceSlice& s : *slices) {
    EXPECT_TRUE(s.shared_counters.empty());
    for (const Device& d : s.devices) EXPECT_TRUE(d.consumes_counters.empty());
  }
  // Prepare hands out the existing instance; unprepare leaves it.
  node.Claim("f", {{{"device", MigDeviceName(0, "3g.40gb", 4)}}});
  absl::StatusOr<std::vector<PreparedOut>> out = driver->Prepare("default", "uid-f", "f");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(
      EnvOf(node.CdiSpecOf("uid-f")["devices"][0]).at("NVIDIA_VISIBLE_DEVICES").rfind("MIG-", 0),
      0u);
  node.Claim("f2", {{{"device", MigDeviceName(0, "3g.40gb", 4)}}});
  EXPECT_EQ(driver->Prepare("default", "uid-f2", "f2").status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(driver->Unprepare("uid-f").ok());
  EXPECT_EQ(node.Gis(0).size(), 1u);
}

// A fixed layout's instances offered as shared devices: fractional MIG slices, each instance's
// compute and memory shared by several claims, enforced by the interposer inside the instance.
TEST(DraNodeDriver, AFixedSharedInstanceIsAFractionalMigSlice) {
  Node node("1xH100-80GB", {0});
  const hw::MigSpec& mig = *Catalog().Find("H100-80GB")->mig;
  const hw::GiProfile& three_g = *mig.FindProfile("3g.40gb");
  absl::StatusOr<device::GpuInstanceInfo> gi =
      node.backend->CreateGpuInstance(0, three_g.smi_id, 4);
  ASSERT_TRUE(gi.ok());
  ASSERT_TRUE(node.backend->CreateComputeInstance(0, gi->id, mig.ci_profiles[3].back().id, 0).ok());
  NodeDriverOptions options = node.Options();
  options.fixed_gpus = {"0"};
  options.shared_gpus = {"0"};
  std::unique_ptr<NodeDriver> driver = node.Driver(options);
  absl::StatusOr<std::vector<ResourceSlice>> slices = driver->Slices(SliceLayout::kSplit);
  ASSERT_TRUE(slices.ok());
  const std::string device = MigDeviceName(0, "3g.40gb", 4) + "-shared";
  ASSERT_EQ(DeviceNames(*slices), std::set<std::string>{device});
  const Device& d = slices->back().devices.at(0);
  EXPECT_TRUE(d.allow_multiple_allocations);
  EXPECT_EQ(d.capacity.at("memory").value, Mebibytes(three_g.memory_mib / 256 * 256));
  node.Claim("half", {{{"device", device},
                       {"shareID", "0b9e7a3c-3333-4e2f-9a6b-2c3d4e5f6a7b"},
                       {"consumedCapacity", {{"compute", "500"}, {"memory", "20Gi"}}}}});
  ASSERT_TRUE(driver->Prepare("default", "uid-half", "half").ok());
  const auto env = EnvOf(node.CdiSpecOf("uid-half")["devices"][0]);
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES").rfind("MIG-", 0), 0u);
  EXPECT_EQ(env.at("GPUSLICE_COMPUTE_SHARE_MILLI"), "500");
  EXPECT_EQ(env.at("GPUSLICE_VRAM_LIMIT_MIB"), "20480");
  node.Claim("more", {{{"device", device},
                       {"shareID", "0b9e7a3c-4444-4e2f-9a6b-2c3d4e5f6a7b"},
                       {"consumedCapacity", {{"compute", "600"}, {"memory", "1Gi"}}}}});
  EXPECT_EQ(driver->Prepare("default", "uid-more", "more").status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(driver->Unprepare("uid-half").ok());
  EXPECT_EQ(node.Gis(0).size(), 1u);  // the admin's instance stays
}

// An admin changes a fixed layout: edits the config, drains the GPU; once its claims are gone the
// driver re-lays it (never while a claim holds it, never over a busy instance).
TEST(DraNodeDriver, ADrainedFixedGpuIsReLaidOnceItsClaimsAreGone) {
  Node node("2xH100-80GB", {0, 1});
  const hw::MigSpec& mig = *Catalog().Find("H100-80GB")->mig;
  absl::StatusOr<device::GpuInstanceInfo> gi =
      node.backend->CreateGpuInstance(0, mig.FindProfile("3g.40gb")->smi_id, 4);
  ASSERT_TRUE(gi.ok());
  ASSERT_TRUE(node.backend->CreateComputeInstance(0, gi->id, mig.ci_profiles[3].back().id, 0).ok());
  absl::StatusOr<spec::MigConfigFile> layout = spec::ParseMigPartedConfig(
      "version: v1\nmig-configs:\n  small:\n    - devices: all\n      mig-enabled: true\n"
      "      mig-devices:\n        \"1g.10gb\": 7\n",
      "layout.yaml");
  ASSERT_TRUE(layout.ok()) << layout.status();
  NodeDriverOptions options = node.Options();
  options.fixed_gpus = {"0"};
  options.fixed_layout = *layout;
  std::unique_ptr<NodeDriver> driver = node.Driver(options);
  node.Claim("f", {{{"device", MigDeviceName(0, "3g.40gb", 4)}}});
  ASSERT_TRUE(driver->Prepare("default", "uid-f", "f").ok());
  EXPECT_TRUE(driver->Relay()->empty());  // not drained
  driver->SetDrain({0, 1});
  EXPECT_TRUE(driver->Relay()->empty());  // a claim holds it; GPU 1 is not fixed
  EXPECT_EQ(node.Gis(0).size(), 1u);
  ASSERT_TRUE(driver->Unprepare("uid-f").ok());
  absl::StatusOr<std::set<int>> relaid = driver->Relay();
  ASSERT_TRUE(relaid.ok()) << relaid.status();
  EXPECT_EQ(*relaid, std::set<int>{0});
  EXPECT_EQ(node.Gis(0).size(), 7u);
  EXPECT_TRUE(node.Gis(1).empty());  // the on-demand GPU is left alone
  absl::StatusOr<std::vector<ResourceSlice>> slices = driver->Slices(SliceLayout::kSplit);
  ASSERT_TRUE(slices.ok());
  EXPECT_TRUE(DeviceNames(*slices).contains(MigDeviceName(0, "1g.10gb", 6)));
  EXPECT_FALSE(DeviceNames(*slices).contains(MigDeviceName(0, "3g.40gb", 4)));
  EXPECT_TRUE(driver->Relay()->empty());  // already laid out
}

// Crash (the process stops, nothing undone) after each step of prepare; a restarted driver
// converges: an unfinished prepare is undone, a finished one kept, and prepare works again.
TEST(DraNodeDriver, CrashAtEveryStepOfPrepareConverges) {
  for (const std::string step :
       {"intent", "gi-created-unrecorded", "gi-created", "ci-created", "cdi-written", "prepared"}) {
    SCOPED_TRACE(step);
    Node node("1xH100-80GB", {0});
    node.Claim("a", {{{"device", MigDeviceName(0, "2g.20gb", 2)}}});
    NodeDriverOptions crashing = node.Options();
    crashing.crash_after = [&](std::string_view s) { return s == step; };
    {
      std::unique_ptr<NodeDriver> first = node.Driver(crashing);
      absl::StatusOr<std::vector<PreparedOut>> out = first->Prepare("default", "uid-a", "a");
      EXPECT_EQ(out.status().code(), absl::StatusCode::kAborted) << out.status();
    }
    std::unique_ptr<NodeDriver> restarted = node.Driver();
    const bool finished = step == "prepared";
    EXPECT_EQ(node.Gis(0).size(), finished ? 1u : 0u);
    EXPECT_EQ(restarted->checkpoint().claims.contains("uid-a"), finished);
    EXPECT_EQ(node.CdiSpecOf("uid-a").is_null(), !finished);
    absl::StatusOr<std::vector<PreparedOut>> out = restarted->Prepare("default", "uid-a", "a");
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(node.Gis(0).size(), 1u);
    ASSERT_TRUE(restarted->Unprepare("uid-a").ok());
    EXPECT_TRUE(node.Gis(0).empty());
  }
}

TEST(DraNodeDriver, CrashAtEveryStepOfUnprepareConverges) {
  for (const std::string step : {"unpreparing", "ci-destroyed", "gi-destroyed", "forgotten"}) {
    SCOPED_TRACE(step);
    Node node("1xH100-80GB", {0});
    node.Claim("a", {{{"device", MigDeviceName(0, "1g.20gb", 4)}}});
    NodeDriverOptions crashing = node.Options();
    crashing.crash_after = [&](std::string_view s) { return s == step; };
    {
      std::unique_ptr<NodeDriver> first = node.Driver(crashing);
      ASSERT_TRUE(first->Prepare("default", "uid-a", "a").ok());
      EXPECT_EQ(first->Unprepare("uid-a").code(), absl::StatusCode::kAborted);
    }
    std::unique_ptr<NodeDriver> restarted = node.Driver();
    EXPECT_TRUE(node.Gis(0).empty());
    EXPECT_FALSE(restarted->checkpoint().claims.contains("uid-a"));
    EXPECT_TRUE(node.CdiSpecOf("uid-a").is_null());
    EXPECT_TRUE(restarted->Unprepare("uid-a").ok());
  }
}

TEST(DraNodeDriver, ADamagedCheckpointStopsTheDriver) {
  Node node("1xH100-80GB", {0});
  std::ofstream(node.dir + "/checkpoint.json") << "{not json";
  absl::StatusOr<std::unique_ptr<NodeDriver>> d =
      NodeDriver::Create(*node.backend, Catalog(), nullptr, node.Options());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
}

TEST(DraNodeDriver, UnhealthyAndDrainedGpusAreTainted) {
  Node node("2xH100-80GB", {0});
  std::unique_ptr<NodeDriver> driver = node.Driver();
  ASSERT_TRUE(node.backend
                  ->Control("xid", true,
                            [](device::sim::SimMachine& m) { return m.InjectXid(1, 79, -1, -1); })
                  .ok());
  EXPECT_TRUE(driver->SetDrain({0}));
  absl::StatusOr<std::vector<ResourceSlice>> slices = driver->Slices(SliceLayout::kSplit);
  ASSERT_TRUE(slices.ok());
  for (const ResourceSlice& s : *slices) {
    for (const Device& d : s.devices) {
      ASSERT_EQ(d.taints.size(), 1u) << d.name;
      const bool gpu1 = d.name == WholeDeviceName(1);
      EXPECT_EQ(d.taints[0].key, gpu1 ? kUnhealthyTaint : kDrainTaint) << d.name;
      EXPECT_EQ(d.taints[0].effect, "NoSchedule");
    }
  }
  bool reported = false;
  for (const DeviceHealthOut& h : driver->Health()) {
    if (h.device == WholeDeviceName(1)) {
      reported = true;
      EXPECT_FALSE(h.healthy);
      EXPECT_NE(h.message.find("79"), std::string::npos) << h.message;
    } else {
      EXPECT_TRUE(h.healthy) << h.device;
    }
  }
  EXPECT_TRUE(reported);
  EXPECT_EQ(driver->Drained(), std::set<int>{0});
  node.Claim("a", {{{"device", MigDeviceName(0, "1g.10gb", 0)}}});
  ASSERT_TRUE(driver->Prepare("default", "uid-a", "a").ok());
  EXPECT_TRUE(driver->Drained().empty());
}

// Every sequence of allocations and releases the stand-in scheduler makes over the published
// slices (first fit for a random profile, as the scheduler does) is prepared and unprepared on
// the simulator without a refusal.
RC_GTEST_PROP(DraNodeDriverProperty, EveryAllocationTheSchedulerMakesIsPrepared,
              (std::uint32_t seed)) {
  static const std::vector<std::string> kModels = {"H100-80GB", "A100-40GB", "A30-24GB",
                                                   "H200-141GB", "B200-180GB"};
  std::mt19937 random(seed);
  const std::string model = kModels[random() % kModels.size()];
  Node node("2x" + model, {0, 1});
  std::unique_ptr<NodeDriver> driver = node.Driver();
  RC_ASSERT(driver != nullptr);
  std::map<std::string, std::string> held;  // claim uid → device
  for (int step = 0; step < 12; ++step) {
    absl::StatusOr<std::vector<ResourceSlice>> slices = driver->Slices(SliceLayout::kSplit);
    RC_ASSERT(slices.ok());
    std::vector<json> objects;
    for (const ResourceSlice& s : *slices) objects.push_back(ToJson(s));
    testing_standin::StandinScheduler scheduler;
    RC_ASSERT(scheduler.Load(objects).ok());
    for (const auto& [uid, device] : held) {
      RC_ASSERT(scheduler.CanAllocate(device));
      scheduler.Allocate(device);
    }
    if (!held.empty() && random() % 3 == 0) {
      auto it = std::next(held.begin(), static_cast<long>(random() % held.size()));
      RC_ASSERT(driver->Unprepare(it->first).ok());
      held.erase(it);
      continue;
    }
    const std::vector<std::string>& names = scheduler.devices();
    const std::string profile =
        scheduler.device(names[random() % names.size()])["attributes"].value(
            "profile", json{{"string", ""}})["string"];
    const std::string chosen = scheduler.FirstFit([&](const json& d) {
      return d["attributes"].contains("profile") && d["attributes"]["profile"]["string"] == profile;
    });
    if (chosen.empty()) continue;
    const std::string name = "c" + std::to_string(step);
    node.Claim(name, {{{"device", chosen}}});
    absl::StatusOr<std::vector<PreparedOut>> out = driver->Prepare("default", "uid-" + name, name);
    RC_ASSERT_FALSE(!out.ok());
    held["uid-" + name] = chosen;
  }
}

}  // namespace
}  // namespace gpuslice::dra
