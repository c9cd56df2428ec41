// The whole DRA driver against a kubelet stand-in (real gRPC on Unix sockets), an API-server
// stand-in (real HTTP on loopback) and the stand-in scheduler, on a simulated 8-GPU node:
// on-demand MIG claims arriving and leaving until the node is full, a fractional claim's limits
// reaching the interposer's environment, a kubelet restart, an unhealthy GPU, an API server that
// goes down.
#include "gpuslice/dra/driver.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "dra/apiserver_standin.h"
#include "dra/kubelet_dra_standin.h"
#include "dra/standin_scheduler.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/dra/cdi.h"
#include "gpuslice/geometry/shape.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/util/subprocess.h"

namespace gpuslice::dra {
namespace {

using nlohmann::json;
using testing_standin::ApiServerStandin;
using testing_standin::StandinScheduler;

struct Cluster {
  std::string dir;
  std::unique_ptr<device::SimBackend> backend;
  ApiServerStandin api{{"v1.35.0", "", {{"node-a", "node-uid-1"}}, {}}};
  std::unique_ptr<kubelet_standin::KubeletDraStandIn> kubelet;
  std::unique_ptr<Driver> driver;

  Cluster(const std::string& spec, std::set<int> mig_on, std::vector<std::string> shared = {},
          std::string interposer = "/usr/lib/gpuslice/libgpuslice-cuda.so",
          std::string shm_dir = "/dev/shm/gpuslice") {
    dir = "/tmp/dra-e2e-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir + "/registry");
    absl::StatusOr<device::sim::SimState> state =
        device::sim::NewMachine(hw::Catalog::Builtin(), spec);
    EXPECT_TRUE(state.ok());
    for (int g : mig_on) {
      state->gpus[static_cast<size_t>(g)].mig_current = device::MigMode::kEnabled;
      state->gpus[static_cast<size_t>(g)].mig_pending = device::MigMode::kEnabled;
    }
    backend = std::make_unique<device::SimBackend>(*state, hw::Catalog::Builtin());
    kubelet_standin::StandInOptions kubelet_options;
    kubelet_options.registry_dir = dir + "/registry";
    kubelet = std::make_unique<kubelet_standin::KubeletDraStandIn>(kubelet_options);
    DriverOptions options;
    options.node.node_name = "node-a";
    options.node.checkpoint_path = dir + "/checkpoint.json";
    options.node.cdi_dir = dir + "/cdi";
    options.node.shared_gpus = std::move(shared);
    options.node.allocate.interposer_host_path = interposer;
    options.node.allocate.shm_host_dir = shm_dir == "/dev/shm/gpuslice" ? shm_dir : dir + "/shm";
    options.kubelet.registry_dir = dir + "/registry";
    options.kubelet.plugin_dir = dir + "/plugin";
    options.kubelet.poll = std::chrono::milliseconds(20);
    options.kubelet.health_resend = std::chrono::milliseconds(200);
    options.api.server = api.url();
    options.api.token_file = "";
    options.resync = std::chrono::milliseconds(60000);
    options.drain_poll = std::chrono::milliseconds(100);
    options.backoff.initial = std::chrono::milliseconds(20);
    options.backoff.max = std::chrono::milliseconds(200);
    driver = std::make_unique<Driver>(*backend, hw::Catalog::Builtin(), options);
  }
  ~Cluster() {
    driver.reset();
    kubelet.reset();
    std::filesystem::remove_all(dir);
  }

  // Ticks the driver until `done` holds (or 10 s pass).
  bool TickUntil(const std::function<bool()>& done) {
    return kubelet_standin::WaitUntil([&] {
      driver->Tick();
      return done();
    });
  }

  std::vector<json> NodeSlices() {
    std::vector<json> out;
    for (const json& s : api.Slices()) {
      if (s["spec"]["nodeName"] == "node-a") out.push_back(s);
    }
    return out;
  }

  // Puts a claim allocated with these devices of our pool and asks kubelet to prepare it.
  absl::StatusOr<kubelet_standin::SeenClaim> PrepareClaim(const std::string& name,
                                                          const std::vector<json>& results) {
    json list = json::array();
    for (const json& r : results) {
      json result = {{"request", "gpu"}, {"driver", kDriverName}, {"pool", "node-a"}};
      result.update(r);
      list.push_back(result);
    }
    json claim = api.PutClaim({{"apiVersion", "resource.k8s.io/v1"},
                               {"kind", "ResourceClaim"},
                               {"metadata", {{"namespace", "default"}, {"name", name}}},
                               {"status", {{"allocation", {{"devices", {{"results", list}}}}}}}});
    const std::string uid = claim["metadata"]["uid"];
    absl::StatusOr<std::map<std::string, kubelet_standin::SeenClaim>> out =
        kubelet->Prepare({{"default", uid, name}});
    if (!out.ok()) return out.status();
    uids[name] = uid;
    return out->at(uid);
  }

  absl::Status UnprepareClaim(const std::string& name) {
    absl::StatusOr<std::map<std::string, std::string>> out =
        kubelet->Unprepare({{"default", uids.at(name), name}});
    if (!out.ok()) return out.status();
    if (!out->at(uids.at(name)).empty()) return absl::InternalError(out->at(uids.at(name)));
    return absl::OkStatus();
  }

  // The environment of the first device of a claim's CDI spec, as "NAME=value".
  std::set<std::string> CdiEnv(const std::string& uid) const {
    std::ifstream in(CdiSpecPath(dir + "/cdi", uid));
    std::stringstream text;
    text << in.rdbuf();
    const json spec = json::parse(text.str());
    std::set<std::string> env;
    for (const json& e : spec["devices"][0]["containerEdits"]["env"])
      env.insert(e.get<std::string>());
    return env;
  }

  std::map<std::string, std::string> uids;
  static inline int counter = 0;
};

TEST(DraDriverEndToEnd, MigClaimsArriveAndLeaveUntilTheNodeIsFull) {
  Cluster c("8xH100-80GB", {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_TRUE(c.driver->Start().ok());
  ASSERT_TRUE(
      c.TickUntil([&] { return c.kubelet->registrations() >= 1 && !c.NodeSlices().empty(); }));
  ASSERT_TRUE(c.kubelet->plugin().has_value());
  EXPECT_EQ(c.kubelet->plugin()->dra_service, "v1.DRAPlugin");
  for (const json& s : c.NodeSlices()) {
    EXPECT_EQ(s["metadata"]["ownerReferences"][0]["uid"], "node-uid-1");
  }

  std::mt19937 random(7);
  const std::vector<std::string> profiles = {"1g.10gb", "1g.20gb", "2g.20gb",
                                             "3g.40gb", "4g.40gb", "7g.80gb"};
  std::map<std::string, std::string> live;  // claim → device
  int prepared = 0;
  int released = 0;
  // Allocates like the scheduler over what is published now: first fit for `profile`.
  auto first_fit = [&](const std::string& profile) {
    StandinScheduler scheduler;
    EXPECT_TRUE(scheduler.Load(c.NodeSlices()).ok());
    for (const auto& [name, device] : live) {
      EXPECT_TRUE(scheduler.CanAllocate(device)) << device << " held by " << name;
      scheduler.Allocate(device);
    }
    return scheduler.FirstFit([&](const json& d) {
      return d["attributes"].contains("profile") && d["attributes"]["profile"]["string"] == profile;
    });
  };
  auto republished = [&](int before) {
    return c.TickUntil([&] { return c.driver->publishes() > before; });
  };
  auto claim = [&](const std::string& device) {
    const std::string name = "c" + std::to_string(prepared + released);
    const int before = c.driver->publishes();
    absl::StatusOr<kubelet_standin::SeenClaim> seen = c.PrepareClaim(name, {{{"device", device}}});
    ASSERT_TRUE(seen.ok()) << seen.status();
    ASSERT_EQ(seen->error, "") << device;
    ASSERT_EQ(seen->devices.size(), 1u);
    EXPECT_EQ(seen->devices[0].device_name, device);
    EXPECT_EQ(seen->devices[0].pool_name, "node-a");
    EXPECT_EQ(seen->devices[0].cdi_device_ids,
              std::vector<std::string>{CdiDeviceId(c.uids.at(name), device)});
    live[name] = device;
    ++prepared;
    ASSERT_TRUE(republished(before));
  };
  for (int step = 0; step < 30; ++step) {
    if (!live.empty() && random() % 3 == 0) {
      auto it = std::next(live.begin(), static_cast<long>(random() % live.size()));
      const int before = c.driver->publishes();
      ASSERT_TRUE(c.UnprepareClaim(it->first).ok());
      live.erase(it);
      ++released;
      ASSERT_TRUE(republished(before));
      continue;
    }
    const std::string device = first_fit(profiles[random() % profiles.size()]);
    if (!device.empty()) claim(device);
  }
  // Fill what is left with the smallest slice until nothing fits.
  for (std::string device = first_fit("1g.10gb"); !device.empty(); device = first_fit("1g.10gb")) {
    claim(device);
  }
  for (const std::string& profile : profiles) EXPECT_EQ(first_fit(profile), "") << profile;
  // Full by the geometry's own rules: no profile fits anywhere on any GPU.
  const hw::GpuModel& model = *hw::Catalog::Builtin().Find("H100-80GB");
  const geometry::Shape shape(model);
  size_t instances = 0;
  for (int g = 0; g < 8; ++g) {
    absl::StatusOr<std::vector<device::GpuInstanceInfo>> gis = c.backend->ListGpuInstances(g);
    ASSERT_TRUE(gis.ok());
    instances += gis->size();
    std::vector<geometry::Placed> layout;
    for (const device::GpuInstanceInfo& gi : *gis) {
      layout.push_back({static_cast<std::uint8_t>(
                            model.mig->IndexOf(*model.mig->FindProfileBySmiId(gi.profile_id))),
                        static_cast<std::uint8_t>(gi.start)});
    }
    const geometry::Occupancy occupancy = shape.OccupancyOf(layout);
    for (const std::string& profile : profiles) {
      const int p = model.mig->IndexOf(*model.mig->FindProfile(profile));
      for (int start : model.mig->profiles[static_cast<size_t>(p)].starts) {
        EXPECT_FALSE(shape.CanAdd(occupancy, p, start, {}).ok())
            << "GPU " << g << " " << profile << " at " << start;
      }
    }
  }
  EXPECT_EQ(instances, live.size());
  EXPECT_GT(released, 2);
  for (const auto& [name, device] : std::map<std::string, std::string>(live)) {
    ASSERT_TRUE(c.UnprepareClaim(name).ok()) << name;
  }
  for (int g = 0; g < 8; ++g) EXPECT_TRUE(c.backend->ListGpuInstances(g)->empty());
}

TEST(DraDriverEndToEnd, AFractionalClaimsLimitsReachTheInterposer) {
  Cluster c("2xA100-40GB", {}, {"1"});
  ASSERT_TRUE(c.driver->Start().ok());
  ASSERT_TRUE(
      c.TickUntil([&] { return c.kubelet->registrations() >= 1 && !c.NodeSlices().empty(); }));
  StandinScheduler scheduler;
  ASSERT_TRUE(scheduler.Load(c.NodeSlices()).ok());
  const json shared = scheduler.device(SharedDeviceName(1));
  EXPECT_TRUE(shared["allowMultipleAllocations"].get<bool>());
  absl::StatusOr<kubelet_standin::SeenClaim> seen =
      c.PrepareClaim("quarter", {{{"device", SharedDeviceName(1)},
                                  {"shareID", "6d1f1b38-5a57-4c1e-9d7a-0c0a1b2c3d4e"},
                                  {"consumedCapacity", {{"compute", "250"}, {"memory", "10Gi"}}}}});
  ASSERT_TRUE(seen.ok()) << seen.status();
  ASSERT_EQ(seen->error, "");
  EXPECT_EQ(seen->devices[0].share_id, "6d1f1b38-5a57-4c1e-9d7a-0c0a1b2c3d4e");
  const std::set<std::string> env = c.CdiEnv(c.uids.at("quarter"));
  EXPECT_TRUE(env.contains("GPUSLICE_COMPUTE_SHARE_MILLI=250"));
  EXPECT_TRUE(env.contains("GPUSLICE_VRAM_LIMIT_MIB=10240"));
  EXPECT_TRUE(env.contains("LD_PRELOAD=/usr/lib/gpuslice/libgpuslice-cuda.so"));
  // A claim with a bad parameter fails alone, with its reason, through kubelet.
  absl::StatusOr<kubelet_standin::SeenClaim> bad =
      c.PrepareClaim("bad", {{{"device", "gpu-9-mig-1g-10gb-0"}}});
  ASSERT_TRUE(bad.ok());
  EXPECT_NE(bad->error.find("not offered"), std::string::npos) << bad->error;
}

// Fractional claims (the seed's nvidia.com/gpu: 0.25, here compute 255 per mille and 10 GiB)
// allocated by the stand-in scheduler's consumable-capacity rules until the shared GPU is full;
// each prepared claim's interposer limits are what the allocation consumed.
TEST(DraDriverEndToEnd, FractionalClaimsFillASharedGpu) {
  Cluster c("1xA100-40GB", {}, {"0"});
  ASSERT_TRUE(c.driver->Start().ok());
  ASSERT_TRUE(
      c.TickUntil([&] { return c.kubelet->registrations() >= 1 && !c.NodeSlices().empty(); }));
  StandinScheduler scheduler;
  ASSERT_TRUE(scheduler.Load(c.NodeSlices()).ok());
  const std::string device = SharedDeviceName(0);
  int prepared = 0;
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<std::map<std::string, std::int64_t>> consumed =
        scheduler.Share(device, {{"compute", "255"}, {"memory", "10Gi"}});
    if (!consumed.ok()) {
      EXPECT_EQ(consumed.status().code(), absl::StatusCode::kResourceExhausted);
      break;
    }
    EXPECT_EQ(consumed->at("compute"), 260);  // rounded up to the step of 10
    scheduler.AllocateShare(device, *consumed);
    char share[40];
    std::snprintf(share, sizeof(share), "6d1f1b38-5a57-4c1e-9d7a-0c0a1b2c3d%02d", i);
    const std::string name = "part" + std::to_string(i);
    absl::StatusOr<kubelet_standin::SeenClaim> seen =
        c.PrepareClaim(name, {{{"device", device},
                               {"shareID", share},
                               {"consumedCapacity",
                                {{"compute", std::to_string(consumed->at("compute"))},
                                 {"memory", std::to_string(consumed->at("memory"))}}}}});
    ASSERT_TRUE(seen.ok()) << seen.status();
    ASSERT_EQ(seen->error, "") << name;
    const std::set<std::string> env = c.CdiEnv(c.uids.at(name));
    EXPECT_TRUE(env.contains("GPUSLICE_COMPUTE_SHARE_MILLI=260"));
    EXPECT_TRUE(env.contains("GPUSLICE_VRAM_LIMIT_MIB=10240"));
    ++prepared;
  }
  EXPECT_EQ(prepared, 3);  // 4 x 260 per mille would pass 1000
}

// A fractional claim's limits reach the interposer: the container's environment and mounts from
// the claim's CDI spec (mounts applied as the runtime would: the container paths of the
// interposer and the accounting directory replaced by their host paths) run the CUDA probe on the
// test CUDA library through the built interposer, which holds it to the 1 GiB the allocation
// consumed.
TEST(DraDriverEndToEnd, TheInterposerEnforcesWhatTheAllocationConsumed) {
  Cluster c("1xA100-40GB", {}, {"0"}, GPUSLICE_INTERPOSER, "own");
  ASSERT_TRUE(c.driver->Start().ok());
  ASSERT_TRUE(
      c.TickUntil([&] { return c.kubelet->registrations() >= 1 && !c.NodeSlices().empty(); }));
  absl::StatusOr<kubelet_standin::SeenClaim> seen =
      c.PrepareClaim("gib", {{{"device", SharedDeviceName(0)},
                              {"shareID", "6d1f1b38-5a57-4c1e-9d7a-0c0a1b2c3d77"},
                              {"consumedCapacity", {{"compute", "250"}, {"memory", "1Gi"}}}}});
  ASSERT_TRUE(seen.ok()) << seen.status();
  ASSERT_EQ(seen->error, "");
  std::ifstream in(CdiSpecPath(c.dir + "/cdi", c.uids.at("gib")));
  std::stringstream text;
  text << in.rdbuf();
  const json edits = json::parse(text.str())["devices"][0]["containerEdits"];
  std::map<std::string, std::string> mounts;  // container path → host path
  for (const json& m : edits["mounts"]) mounts[m["containerPath"]] = m["hostPath"];
  util::SubprocessOptions probe;
  probe.argv = {GPUSLICE_CUDA_PROBE, "alloc", "--path", "alloc", "--mib", "100"};
  probe.output = util::SubprocessOptions::Output::kCapture;
  for (const json& e : edits["env"]) {
    const std::string line = e.get<std::string>();
    std::string name = line.substr(0, line.find('=')), value = line.substr(line.find('=') + 1);
    if (mounts.contains(value)) value = mounts.at(value);
    probe.set_env.emplace_back(name, value);
  }
  probe.set_env.emplace_back("LD_LIBRARY_PATH", GPUSLICE_FAKE_CUDA_DIR);
  probe.set_env.emplace_back("GPUSLICE_CONTEXT_RESERVE_MIB", "0");
  probe.set_env.emplace_back("FAKE_CUDA_TOTAL_MIB", "16384");
  probe.set_env.emplace_back("ASAN_OPTIONS", "verify_asan_link_order=0");
  absl::StatusOr<util::Subprocess> child = util::Subprocess::Start(probe);
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<util::ExitStatus> done = child->Wait();
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->code, 0) << child->output();
  // The probe's JSON line (the interposer's own start line goes to stderr, captured too).
  json result;
  std::stringstream lines(child->output());
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("{")) result = json::parse(line);
  }
  ASSERT_TRUE(result.is_object()) << child->output();
  EXPECT_EQ(result["total"], 1024LL << 20) << child->output();  // cuMemGetInfo: the share's cap
  EXPECT_EQ(result["allocated"], 10);                           // 10 x 100 MiB fit in 1 GiB
  EXPECT_EQ(result["failed_with"], 2);                          // the 11th: out of memory
  EXPECT_LE(result["device_peak_bytes"].get<long long>(), 1024LL << 20);
}

TEST(DraDriverEndToEnd, KubeletRestartAndSliceWipeAreRepaired) {
  Cluster c("1xH100-80GB", {0});
  ASSERT_TRUE(c.driver->Start().ok());
  ASSERT_TRUE(
      c.TickUntil([&] { return c.kubelet->registrations() == 1 && !c.NodeSlices().empty(); }));
  c.kubelet->Restart();
  EXPECT_GT(c.api.WipeSlices("node-a"), 0);  // what kubelet does at its start
  ASSERT_TRUE(
      c.TickUntil([&] { return c.kubelet->registrations() == 2 && !c.NodeSlices().empty(); }));
  absl::StatusOr<kubelet_standin::SeenClaim> seen =
      c.PrepareClaim("a", {{{"device", MigDeviceName(0, "3g.40gb", 0)}}});
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->error, "");
}

TEST(DraDriverEndToEnd, AnUnhealthyGpuIsReportedAndTainted) {
  Cluster c("2xH100-80GB", {0, 1});
  ASSERT_TRUE(c.driver->Start().ok());
  ASSERT_TRUE(c.TickUntil([&] { return !c.kubelet->health().empty(); }));
  ASSERT_TRUE(c.backend
                  ->Control("xid", true,
                            [](device::sim::SimMachine& m) { return m.InjectXid(1, 48, -1, -1); })
                  .ok());
  auto tainted = [&] {
    for (const json& s : c.NodeSlices()) {
      for (const json& d : s["spec"].value("devices", json::array())) {
        if (d["name"] == MigDeviceName(1, "1g.10gb", 0)) return d.contains("taints");
      }
    }
    return false;
  };
  auto reported = [&] {
    for (const kubelet_standin::SeenHealth& h : c.kubelet->health()) {
      if (h.device_name == MigDeviceName(1, "1g.10gb", 0)) return h.health == 2;
    }
    return false;
  };
  ASSERT_TRUE(c.TickUntil([&] { return tainted() && reported(); }));
  for (const kubelet_standin::SeenHealth& h : c.kubelet->health()) {
    if (h.device_name.starts_with("gpu-0-")) {
      EXPECT_EQ(h.health, 1) << h.device_name;
    }
  }
}

TEST(DraDriverEndToEnd, AnApiServerThatIsDownDelaysPublishingNotKubelet) {
  Cluster c("1xH100-80GB", {0});
  ASSERT_TRUE(c.driver->Start().ok());
  ASSERT_TRUE(
      c.TickUntil([&] { return c.kubelet->registrations() >= 1 && c.driver->publishes() >= 1; }));
  ASSERT_TRUE(c.PrepareClaim("a", {{{"device", MigDeviceName(0, "1g.10gb", 0)}}}).ok());
  const std::string uid = c.uids.at("a");
  c.api.Stop();
  const int before = c.driver->publishes();
  ASSERT_TRUE(c.TickUntil([&] { return !c.driver->last_publish_error().empty(); }));
  // kubelet is still served: the prepared claim answers from the checkpoint.
  absl::StatusOr<std::map<std::string, kubelet_standin::SeenClaim>> again =
      c.kubelet->Prepare({{"default", uid, "a"}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->at(uid).error, "");
  c.api.Start();
  ASSERT_TRUE(c.TickUntil([&] { return c.driver->publishes() > before; }));
  EXPECT_EQ(c.driver->last_publish_error(), "");
}

TEST(DraDriverEndToEnd, ADrainAnnotationTaintsTheGpu) {
  Cluster c("2xH100-80GB", {0, 1});
  ASSERT_TRUE(c.driver->Start().ok());
  ASSERT_TRUE(
      c.TickUntil([&] { return c.kubelet->registrations() >= 1 && c.driver->publishes() >= 1; }));
  c.api.SetNodeAnnotation("node-a", kDrainAnnotation, "1");
  ASSERT_TRUE(c.TickUntil([&] {
    for (const json& s : c.NodeSlices()) {
      for (const json& d : s["spec"].value("devices", json::array())) {
        if (d["name"] == MigDeviceName(1, "7g.80gb", 0) && d.contains("taints")) {
          return d["taints"][0]["key"] == kDrainTaint;
        }
      }
    }
    return false;
  }));
  EXPECT_EQ(c.driver->node()->Drained(), std::set<int>{1});
}

}  // namespace
}  // namespace gpuslice::dra
