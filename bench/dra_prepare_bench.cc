// DRA driver latency on the simulator (issue 24's targets: prepare of an on-demand MIG claim
// under 50 ms; republish after a change within 1 s), measured through the real interfaces: the
// kubelet stand-in calls NodePrepareResources over gRPC on a Unix socket, the driver reads the
// claim from the API-server stand-in over HTTP on loopback, creates the GI and CI on the simulated
// H100s, writes its checkpoint and the CDI spec; the driver runs its production loop (Run, 200 ms
// poll) on its own thread and the republish time is from prepare's answer to the API server
// holding the new pool.
//
// Usage: dra_prepare_bench [--claims 200] [--gpus 8]
// Output:
//   dra-prepare claims=N p50_ms=.. p95_ms=.. max_ms=..
//   dra-unprepare claims=N p50_ms=.. p95_ms=.. max_ms=..
//   dra-republish changes=N p50_ms=.. p95_ms=.. max_ms=..
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "dra/apiserver_standin.h"
#include "dra/kubelet_dra_standin.h"
#include "dra/standin_scheduler.h"
#include "gpuslice/device/sim_backend.h"
#include "gpuslice/dra/driver.h"
#include "gpuslice/hw/catalog.h"

namespace {

using namespace gpuslice;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void Report(const char* what, const char* unit, std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms.empty() ? 0.0 : ms[static_cast<size_t>(q * double(ms.size() - 1))];
  };
  std::printf("%s %s=%zu p50_ms=%.2f p95_ms=%.2f max_ms=%.2f\n", what, unit, ms.size(), at(0.5),
              at(0.95), ms.empty() ? 0.0 : ms.back());
}

}  // namespace

int main(int argc, char** argv) {
  int claims = 200;
  int gpus = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--claims") claims = std::atoi(argv[i + 1]);
    if (flag == "--gpus") gpus = std::atoi(argv[i + 1]);
  }
  const std::string dir = "/tmp/dra-bench-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/registry");
  const hw::Catalog& catalog = hw::Catalog::Builtin();
  absl::StatusOr<device::sim::SimState> state =
      device::sim::NewMachine(catalog, std::to_string(gpus) + "xH100-80GB");
  if (!state.ok()) return 1;
  for (auto& gpu : state->gpus) gpu.mig_current = gpu.mig_pending = device::MigMode::kEnabled;
  device::SimBackend backend(*state, catalog);
  dra::testing_standin::ApiServerStandin api({"v1.35.0", "", {{"node-a", "uid-node"}}, {}});
  dra::kubelet_standin::StandInOptions kubelet_options;
  kubelet_options.registry_dir = dir + "/registry";
  dra::kubelet_standin::KubeletDraStandIn kubelet(kubelet_options);
  dra::DriverOptions options;
  options.node.node_name = "node-a";
  options.node.checkpoint_path = dir + "/checkpoint.json";
  options.node.cdi_dir = dir + "/cdi";
  options.kubelet.registry_dir = dir + "/registry";
  options.kubelet.plugin_dir = dir + "/plugin";
  options.api.server = api.url();
  options.api.token_file = "";
  dra::Driver driver(backend, catalog, options);
  if (absl::Status s = driver.Start(); !s.ok()) {
    std::fprintf(stderr, "start: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::atomic<bool> stop{false};
  std::thread loop([&] { driver.Run(stop); });
  auto wait_publishes = [&](int above) {
    while (driver.publishes() <= above) std::this_thread::sleep_for(std::chrono::microseconds(200));
  };
  wait_publishes(0);

  const std::vector<std::string> profiles = {"1g.10gb", "2g.20gb", "3g.40gb", "1g.20gb"};
  std::vector<double> prepare_ms, unprepare_ms, republish_ms;
  std::vector<std::pair<std::string, std::string>> live;  // (name, uid)
  std::map<std::string, std::string> held;                // name → device
  for (int i = 0; i < claims; ++i) {
    dra::testing_standin::StandinScheduler scheduler;
    std::vector<json> slices = api.Slices();
    if (!scheduler.Load(slices).ok()) return 1;
    for (const auto& [name, device] : held) scheduler.Allocate(device);
    const std::string profile = profiles[static_cast<size_t>(i) % profiles.size()];
    std::string device = scheduler.FirstFit([&](const json& d) {
      return d["attributes"].contains("profile") && d["attributes"]["profile"]["string"] == profile;
    });
    if (device.empty() && !live.empty()) {  // full: release the oldest claim
      const auto [name, uid] = live.front();
      live.erase(live.begin());
      held.erase(name);
      const auto t0 = Clock::now();
      auto out = kubelet.Unprepare({{"default", uid, name}});
      unprepare_ms.push_back(Ms(Clock::now() - t0));
      if (!out.ok() || !out->at(uid).empty()) return 1;
      --i;
      continue;
    }
    const std::string name = "c" + std::to_string(i);
    const json claim = api.PutClaim({{"metadata", {{"namespace", "default"}, {"name", name}}},
                                     {"status",
                                      {{"allocation",
                                        {{"devices",
                                          {{"results", json::array({{{"request", "gpu"},
                                                                     {"driver", dra::kDriverName},
                                                                     {"pool", "node-a"},
                                                                     {"device", device}}})}}}}}}}});
    const std::string uid = claim["metadata"]["uid"];
    const int before = driver.publishes();
    const auto t0 = Clock::now();
    auto out = kubelet.Prepare({{"default", uid, name}});
    const auto t1 = Clock::now();
    if (!out.ok() || !out->at(uid).error.empty()) {
      std::fprintf(
          stderr, "prepare %s: %s\n", device.c_str(),
          out.ok() ? out->at(uid).error.c_str() : std::string(out.status().message()).c_str());
      return 1;
    }
    prepare_ms.push_back(Ms(t1 - t0));
    wait_publishes(before);
    republish_ms.push_back(Ms(Clock::now() - t1));
    live.emplace_back(name, uid);
    held[name] = device;
  }
  stop = true;
  loop.join();
  driver.Stop();
  Report("dra-prepare", "claims", prepare_ms);
  Report("dra-unprepare", "claims", unprepare_ms);
  Report("dra-republish", "changes", republish_ms);
  std::filesystem::remove_all(dir);
  return 0;
}
