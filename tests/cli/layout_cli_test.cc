// Black-box tests of fixed MIG layouts: the built binary serves a simulated 1xL40S fleet (no MIG,
// so every MIG slice lands on the agent's machine) on a loopback port, and
// `gpuslice agent --host remote1 --sim-state FILE` reports a simulated 2xH100-80GB machine kept in
// a state file the test inspects with `gpuslice sim show` and changes with `gpuslice sim process`.
// An admin sets the machine's layout with `gpuslice node set-layout`; the agent carries it out
// (instances at the layout's starts, MIG turned off where the layout says so), leases are bound to
// the layout's instances and leave them in place when they end, leases in the way make set-layout
// exit 1 listing them, bad files exit 2, and an instance busy outside any lease is never destroyed:
// the agent's failure shows in `gpuslice node show`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cli/run_gpuslice.h"
#include "cli/serve_process.h"
#include "nlohmann/json.hpp"

#ifndef GPUSLICE_BINARY
#error "GPUSLICE_BINARY must name the built gpuslice executable"
#endif

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Outcome = gpuslice::cli::testing::CommandResult;
using gpuslice::cli::testing::GpusliceProcess;
using gpuslice::cli::testing::ServeFixture;
using gpuslice::cli::testing::Tail;
using gpuslice::cli::testing::WaitUntil;
using nlohmann::json;

constexpr std::chrono::seconds kLimit(20);

Outcome Gpuslice(const std::string& args, bool with_stderr = true) {
  return gpuslice::cli::testing::RunGpuslice(args, with_stderr);
}

// MIG on for every GPU, no instances (applied to the fresh simulated machine).
const char* const kAllMigOn = R"(version: v1
mig-configs:
  all-on:
    - devices: all
      mig-enabled: true
      mig-devices: {}
)";

// GPU 0: two 3g.40gb (the service places them at 0 and 4); GPU 1: MIG off.
const char* const kThreeGAndOff = R"(version: v1
mig-configs:
  remote1:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
    - devices: [1]
      mig-enabled: false
)";

// GPU 0 only: two 3g.40gb at 0 and 4.
const char* const kThreeGOnGpu0 = R"(version: v1
mig-configs:
  remote1:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
      gpuslice-placements: ["3g.40gb@0", "3g.40gb@4"]
)";

// GPU 0 only: one 7g.80gb (every smaller instance on GPU 0 must go).
const char* const kSevenGOnGpu0 = R"(version: v1
mig-configs:
  remote1:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "7g.80gb": 1
)";

// A GPU instance in the simulated machine's state: its id, start, size (slots) and the UUIDs of
// its compute instances.
struct SimGi {
  int id = -1;
  int start = -1;
  int size = 0;
  std::vector<std::string> ci_uuids;
  std::vector<int> ci_ids;
};

class LayoutCliTest : public ServeFixture {
 protected:
  void SetUp() override {
    static int salt = 310;
    ASSERT_NO_FATAL_FAILURE(StartServer("gpuslice_layout_cli_", "1xL40S", salt++));
    ASSERT_NO_FATAL_FAILURE(AddTeamA());
    ASSERT_NO_FATAL_FAILURE(AddUser("agent-remote1 --agent --machine remote1", &agent_token_));
    state_ = dir_ + "/remote1.json";
    Outcome created = Gpuslice("sim create '" + state_ + "' 2xH100-80GB --seed 7");
    ASSERT_EQ(created.exit_code, 0) << created.output;
    const std::string on = Write("all-on.yaml", kAllMigOn);
    Outcome applied = Gpuslice("apply --sim '" + state_ + "' -f '" + on + "' -c all-on");
    ASSERT_EQ(applied.exit_code, 0) << applied.output;
    const json state = SimState();
    ASSERT_EQ(state["gpus"].size(), 2u) << state.dump();
    for (const json& gpu : state["gpus"]) ASSERT_EQ(gpu["mig_current"], "enabled") << state.dump();
  }

  void TearDown() override {
    agent_.Kill();
    ServeFixture::TearDown();
  }

  // Starts the agent on the state file and waits until remote1 is in `gpuslice node list`.
  void StartAgent() {
    agent_.Start({"agent", "--server", url_, "--token", agent_token_, "--host", "remote1",
                  "--sim-state", state_, "--interval", "1"},
                 dir_ + "/agent.log");
    ASSERT_TRUE(WaitUntil([&] { return !Node().is_null(); }, kLimit)) << agent_.Output();
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  json SimState() {
    Outcome shown = Gpuslice("sim show '" + state_ + "'", /*with_stderr=*/false);
    EXPECT_EQ(shown.exit_code, 0) << shown.output;
    json parsed = json::parse(shown.output, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << shown.output;
    return parsed.is_discarded() ? json() : parsed;
  }
  json SimGpu(int index) {
    const json state = SimState();
    for (const json& gpu : state.value("gpus", json::array())) {
      if (gpu["index"] == index) return gpu;
    }
    ADD_FAILURE() << "no GPU " << index << " in " << state.dump();
    return json();
  }
  std::vector<SimGi> Gis(int index) {
    std::vector<SimGi> out;
    const json gpu = SimGpu(index);
    if (!gpu.is_object()) return out;
    for (const json& gi : gpu["gpu_instances"]) {
      SimGi g;
      g.id = gi["id"].get<int>();
      g.start = gi["start"].get<int>();
      g.size = gi["size"].get<int>();
      for (const json& ci : gi["compute_instances"]) {
        g.ci_uuids.push_back(ci["uuid"].get<std::string>());
        g.ci_ids.push_back(ci["id"].get<int>());
      }
      out.push_back(std::move(g));
    }
    return out;
  }
  // (start, size) of each GI of GPU `index`.
  std::set<std::pair<int, int>> Slots(int index) {
    std::set<std::pair<int, int>> out;
    for (const SimGi& gi : Gis(index)) out.insert({gi.start, gi.size});
    return out;
  }

  // remote1 in `gpuslice node list --json` (null until it has reported).
  json Node() {
    Outcome out = Gpuslice("node list --json", /*with_stderr=*/false);
    if (out.exit_code != 0) return json();
    json parsed = json::parse(out.output, nullptr, false);
    if (parsed.is_discarded()) return json();
    for (const json& node : parsed.value("nodes", json::array())) {
      if (node["host"] == "remote1") return node;
    }
    return json();
  }
  // `gpuslice node show remote1 --json`'s layout.
  json Layout() {
    const json shown = Json("node show remote1");
    return shown.is_object() && shown.contains("layout") ? shown["layout"] : json("missing");
  }
  bool AppliedGeneration(int generation) {
    const json layout = Layout();
    return layout.is_object() && layout["generation"] == generation && layout["applied"] == true;
  }

  // As ann.
  json Acquire(const std::string& args) {
    json reply = Json("acquire --token " + ann_token_ + " " + args);
    EXPECT_TRUE(reply.is_object() && reply.contains("lease")) << reply.dump();
    return reply.is_object() && reply.contains("lease") ? reply["lease"] : json();
  }
  json LeaseById(std::int64_t id) {
    const json reply = Json("leases --all --token " + ann_token_);
    for (const json& lease : reply.value("leases", json::array())) {
      if (lease["id"] == id) return lease;
    }
    return json();
  }
  // Waits until the agent has set the lease up; its one bound device.
  json WaitBound(std::int64_t id) {
    json bound;
    EXPECT_TRUE(WaitUntil(
        [&] {
          const json lease = LeaseById(id);
          if (!lease.is_object() || lease["bound"].size() != 1) return false;
          bound = lease["bound"][0];
          return true;
        },
        kLimit))
        << Tail(agent_.Output());
    return bound;
  }

  static int StartOf(const json& lease) {
    if (!lease.is_object() || lease["devices"].size() != 1) return -1;
    const std::string line = lease["devices"][0].get<std::string>();
    const std::size_t at = line.rfind('@');
    return at == std::string::npos ? -1 : std::stoi(line.substr(at + 1));
  }

  GpusliceProcess agent_;
  std::string agent_token_;
  std::string state_;
};

TEST_F(LayoutCliTest, TheAgentCarriesTheLayoutOutAndLeasesUseAndKeepItsInstances) {
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  const std::string file = Write("remote1.yaml", kThreeGAndOff);
  Outcome set = Gpuslice("node set-layout remote1 '" + file + "'");
  ASSERT_EQ(set.exit_code, 0) << set.output;
  EXPECT_THAT(set.output, HasSubstr("layout set"));
  EXPECT_THAT(set.output, HasSubstr("GPU 0 H100-80GB: 3g.40gb@0 3g.40gb@4"));
  EXPECT_THAT(set.output, HasSubstr("GPU 1 H100-80GB: MIG off"));

  ASSERT_TRUE(WaitUntil([&] { return AppliedGeneration(1); }, kLimit))
      << Layout().dump() << Tail(agent_.Output());
  Outcome shown = Gpuslice("node show remote1");
  ASSERT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_THAT(shown.output, HasSubstr("agent: carried out"));
  EXPECT_THAT(shown.output, HasSubstr("GPU 0 H100-80GB: 3g.40gb@0 3g.40gb@4"));

  // The machine: GPU 0 has exactly the layout's two 3g.40gb instances (4 slots at 0 and 4), each
  // with its compute instance; GPU 1's MIG mode is off, without instances.
  const std::vector<SimGi> layout_gis = Gis(0);
  EXPECT_EQ(Slots(0), (std::set<std::pair<int, int>>{{0, 4}, {4, 4}}));
  for (const SimGi& gi : layout_gis) EXPECT_EQ(gi.ci_uuids.size(), 1u) << "GI " << gi.id;
  const json gpu1 = SimGpu(1);
  EXPECT_EQ(gpu1["mig_current"], "disabled") << gpu1.dump();
  EXPECT_EQ(gpu1["mig_pending"], "disabled") << gpu1.dump();
  EXPECT_TRUE(gpu1["gpu_instances"].empty()) << gpu1.dump();
  // The agent reported the mode change: the service sees GPU 1 without MIG.
  ASSERT_TRUE(WaitUntil(
      [&] {
        const json node = Node();
        return node.is_object() && node["gpus"].size() == 2 && node["gpus"][1]["mig"] == false &&
               node["gpus"][0]["mig"] == true;
      },
      kLimit))
      << Node().dump();

  // A 3g.40gb slice lands on a layout instance and is bound to that very instance.
  const json lease = Acquire("--profile 3g.40gb --no-wait --purpose on-layout");
  ASSERT_TRUE(lease.is_object());
  EXPECT_EQ(lease["node"], "remote1/H100-80GB-mig") << lease.dump();
  const int start = StartOf(lease);
  EXPECT_TRUE(start == 0 || start == 4) << lease.dump();
  const std::int64_t id = lease["id"].get<std::int64_t>();
  const json bound = WaitBound(id);
  ASSERT_TRUE(bound.is_object());
  EXPECT_EQ(bound["gpu_index"], 0) << bound.dump();
  bool found = false;
  for (const SimGi& gi : layout_gis) {
    if (gi.id != bound["gi"]) continue;
    found = true;
    EXPECT_EQ(gi.start, start) << bound.dump();
    ASSERT_EQ(gi.ci_uuids.size(), 1u);
    EXPECT_EQ(bound["uuid"], gi.ci_uuids[0]) << bound.dump();
  }
  EXPECT_TRUE(found) << "bound to GI " << bound.dump() << ", not one of the layout's";
  EXPECT_EQ(Slots(0), (std::set<std::pair<int, int>>{{0, 4}, {4, 4}}));  // nothing new made

  // Released: the agent lets the lease go but keeps the layout's instance.
  Outcome released = Gpuslice("release --token " + ann_token_ + " " + std::to_string(id));
  ASSERT_EQ(released.exit_code, 0) << released.output;
  const std::string ended = "lease " + std::to_string(id) + " ended";
  ASSERT_TRUE(WaitUntil([&] { return agent_.Output().find(ended) != std::string::npos; }, kLimit))
      << Tail(agent_.Output());
  // A later lease on the same slot is set up on the very same (kept) instance; it is bound only
  // after the agent's rounds since the release, which all left the instances alone.
  const json next = Acquire("--profile 3g.40gb --no-wait --purpose after");
  ASSERT_TRUE(next.is_object());
  const json next_bound = WaitBound(next["id"].get<std::int64_t>());
  ASSERT_TRUE(next_bound.is_object());
  const std::vector<SimGi> after = Gis(0);
  ASSERT_EQ(after.size(), layout_gis.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].id, layout_gis[i].id);
    EXPECT_EQ(after[i].start, layout_gis[i].start);
    EXPECT_EQ(after[i].ci_uuids, layout_gis[i].ci_uuids) << "GI " << after[i].id;
  }
  std::set<std::string> layout_uuids;
  for (const SimGi& gi : layout_gis) layout_uuids.insert(gi.ci_uuids.begin(), gi.ci_uuids.end());
  EXPECT_TRUE(layout_uuids.contains(next_bound["uuid"].get<std::string>())) << next_bound.dump();
  EXPECT_THAT(agent_.Output(), Not(HasSubstr("not carried out")));
  EXPECT_EQ(agent_.Terminate(), 0) << Tail(agent_.Output());
}

TEST_F(LayoutCliTest, LeasesInTheWayMakeSetLayoutExit1AndBadFilesExit2) {
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  const json lease = Acquire("--profile 1g.10gb --no-wait --purpose blocker-job");
  ASSERT_TRUE(lease.is_object());
  ASSERT_EQ(lease["node"], "remote1/H100-80GB-mig") << lease.dump();
  const std::int64_t id = lease["id"].get<std::int64_t>();
  ASSERT_TRUE(WaitBound(id).is_object());

  const std::string file = Write("everywhere.yaml",
                                 "version: v1\nmig-configs:\n  big:\n    - devices: all\n"
                                 "      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 2}\n");
  Outcome blocked = Gpuslice("node set-layout remote1 '" + file + "'");
  EXPECT_EQ(blocked.exit_code, 1) << blocked.output;
  EXPECT_THAT(blocked.output, HasSubstr("nothing was changed"));
  EXPECT_THAT(blocked.output, HasSubstr("lease " + std::to_string(id) +
                                        " (team-a/ann, profile:1g.10gb, \"blocker-job\") on GPU"));
  EXPECT_THAT(blocked.output, HasSubstr("not in the layout"));
  EXPECT_THAT(blocked.output, HasSubstr("release or wait"));
  Outcome blocked_json = Gpuslice("node set-layout remote1 '" + file + "' --json", false);
  EXPECT_EQ(blocked_json.exit_code, 1) << blocked_json.output;
  const json refused = json::parse(blocked_json.output, nullptr, false);
  ASSERT_FALSE(refused.is_discarded()) << blocked_json.output;
  ASSERT_EQ(refused["blocking"].size(), 1u) << refused.dump();
  EXPECT_EQ(refused["blocking"][0]["lease"], id);
  EXPECT_EQ(refused["blocking"][0]["purpose"], "blocker-job");
  // Nothing changed.
  EXPECT_TRUE(Layout().is_null());
  Outcome shown = Gpuslice("node show remote1");
  EXPECT_THAT(shown.output, HasSubstr("layout: none"));
  EXPECT_EQ(LeaseById(id)["state"], "active");

  // Bad files never reach the service: exit 2, the message names the file and the line.
  const std::string bad = Write("bad.yaml",
                                "version: v1\nmig-configs:\n  remote1:\n    - devices: [0]\n"
                                "      mig-enabled: maybe\n");
  Outcome bad_out = Gpuslice("node set-layout remote1 '" + bad + "'");
  EXPECT_EQ(bad_out.exit_code, 2) << bad_out.output;
  EXPECT_THAT(bad_out.output, HasSubstr("bad.yaml:5"));
  Outcome missing = Gpuslice("node set-layout remote1 '" + dir_ + "/absent.yaml'");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  Outcome no_config = Gpuslice("node set-layout remote1 '" + file + "' --config small");
  EXPECT_EQ(no_config.exit_code, 2) << no_config.output;
  EXPECT_THAT(no_config.output, HasSubstr("small"));
  EXPECT_TRUE(Layout().is_null());

  // Released, the lease no longer stands in the way.
  ASSERT_EQ(Gpuslice("release --token " + ann_token_ + " " + std::to_string(id)).exit_code, 0);
  Outcome taken = Gpuslice("node set-layout remote1 '" + file + "'");
  EXPECT_EQ(taken.exit_code, 0) << taken.output;
  EXPECT_TRUE(WaitUntil([&] { return AppliedGeneration(1); }, kLimit))
      << Layout().dump() << Tail(agent_.Output());
  for (int gpu = 0; gpu < 2; ++gpu) {
    EXPECT_EQ(Slots(gpu), (std::set<std::pair<int, int>>{{0, 4}, {4, 4}})) << "GPU " << gpu;
  }
  // And clear-layout drops it.
  Outcome cleared = Gpuslice("node clear-layout remote1");
  EXPECT_EQ(cleared.exit_code, 0) << cleared.output;
  EXPECT_THAT(cleared.output, HasSubstr("layout cleared"));
  EXPECT_TRUE(Layout().is_null());
}

TEST_F(LayoutCliTest, ABusyInstanceOutsideAnyLeaseIsKeptAndTheFailureShows) {
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  ASSERT_EQ(Gpuslice("node set-layout remote1 '" + Write("3g.yaml", kThreeGOnGpu0) + "'").exit_code,
            0);
  ASSERT_TRUE(WaitUntil([&] { return AppliedGeneration(1); }, kLimit))
      << Layout().dump() << Tail(agent_.Output());
  std::vector<SimGi> gis = Gis(0);
  ASSERT_EQ(Slots(0), (std::set<std::pair<int, int>>{{0, 4}, {4, 4}}));
  const SimGi busy = gis[0].start == 0 ? gis[0] : gis[1];
  ASSERT_EQ(busy.ci_ids.size(), 1u);
  // A process that no lease accounts for runs on the instance at 0.
  Outcome attached =
      Gpuslice("sim process add '" + state_ + "' --gpu 0 --gi " + std::to_string(busy.id) +
               " --ci " + std::to_string(busy.ci_ids[0]) + " --pid 4242 --memory 2048");
  ASSERT_EQ(attached.exit_code, 0) << attached.output;

  // The service takes the new layout (no lease is in its way); the agent must not destroy the
  // busy instance, and says so.
  Outcome set = Gpuslice("node set-layout remote1 '" + Write("7g.yaml", kSevenGOnGpu0) + "'");
  ASSERT_EQ(set.exit_code, 0) << set.output;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const json layout = Layout();
        return layout.is_object() && layout["generation"] == 2 &&
               !layout.value("agent_message", "").empty();
      },
      kLimit))
      << Layout().dump() << Tail(agent_.Output());
  const json failed = Layout();
  EXPECT_EQ(failed["applied"], false);
  EXPECT_NE(failed["applied_generation"], 2);
  Outcome shown = Gpuslice("node show remote1");
  EXPECT_THAT(shown.output, HasSubstr("agent: NOT carried out: "));
  EXPECT_THAT(shown.output, HasSubstr(failed["agent_message"].get<std::string>()));
  EXPECT_THAT(agent_.Output(), HasSubstr("layout 2 not carried out"));
  // Both instances are still there (the reconciler fails without changing anything), the
  // process too; no 7g.80gb was made.
  const std::vector<SimGi> kept = Gis(0);
  EXPECT_EQ(Slots(0), (std::set<std::pair<int, int>>{{0, 4}, {4, 4}}));
  bool busy_kept = false;
  for (const SimGi& gi : kept) {
    if (gi.id == busy.id && gi.start == 0 && gi.ci_uuids == busy.ci_uuids) busy_kept = true;
  }
  EXPECT_TRUE(busy_kept);
  EXPECT_EQ(SimGpu(0)["processes"].size(), 1u);

  // Once the process is gone, the agent carries the layout out at a later round.
  ASSERT_EQ(Gpuslice("sim process remove '" + state_ + "' 4242").exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return AppliedGeneration(2); }, kLimit))
      << Layout().dump() << Tail(agent_.Output());
  EXPECT_EQ(Slots(0), (std::set<std::pair<int, int>>{{0, 8}}));
  EXPECT_THAT(Gpuslice("node show remote1").output, HasSubstr("agent: carried out"));
}

}  // namespace

namespace {

// A layout set again after clear-layout is carried out and reported as such.
TEST_F(LayoutCliTest, ALayoutSetAgainAfterAClearIsReportedApplied) {
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  const std::string file = Write("3g.yaml", kThreeGOnGpu0);
  ASSERT_EQ(Gpuslice("node set-layout remote1 '" + file + "'").exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return AppliedGeneration(1); }, kLimit))
      << Layout().dump() << Tail(agent_.Output());
  ASSERT_EQ(Gpuslice("node clear-layout remote1").exit_code, 0);
  Outcome again = Gpuslice("node set-layout remote1 '" + file + "' --json", false);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const json layout = json::parse(again.output, nullptr, false)["layout"];
  EXPECT_TRUE(WaitUntil(
      [&] {
        const json now = Layout();
        return now.is_object() && now["generation"] == layout["generation"] &&
               now["applied"] == true;
      },
      kLimit))
      << Layout().dump() << Tail(agent_.Output());
  EXPECT_EQ(Slots(0), (std::set<std::pair<int, int>>{{0, 4}, {4, 4}}));
}

// serve's own machine is reported in-process like an agent's, so it takes a fixed layout too:
// serve carries it out itself (GPU 1 MIG off, two 3g.40gb on GPU 0) and hands out only those.
class ServeOwnLayoutCliTest : public ServeFixture {
 protected:
  void SetUp() override {
    static int salt = 410;
    ASSERT_NO_FATAL_FAILURE(StartServer("gpuslice_own_layout_cli_", "2xH100-80GB", salt++));
    ASSERT_NO_FATAL_FAILURE(AddTeamA());
  }

  json Json(const std::string& args) {
    Outcome run = Gpuslice(args + " --json", /*with_stderr=*/false);
    json parsed = json::parse(run.output, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << args << ": " << run.output;
    return parsed;
  }
};

TEST_F(ServeOwnLayoutCliTest, ServesOwnMachineCarriesOutItsLayout) {
  const json nodes = Json("node list");
  ASSERT_EQ(nodes["nodes"].size(), 1u) << nodes.dump();
  const std::string host = nodes["nodes"][0]["host"].get<std::string>();
  ASSERT_EQ(nodes["nodes"][0]["gpus"].size(), 2u);
  const std::string file = dir_ + "/own.yaml";
  std::ofstream(file) << "version: v1\nmig-configs:\n  gpuslice-" << host
                      << ":\n    - devices: [0]\n      mig-enabled: true\n"
                         "      mig-devices: {\"3g.40gb\": 2}\n"
                         "    - devices: [1]\n      mig-enabled: false\n";
  Outcome set = Gpuslice("node set-layout " + host + " '" + file + "'");
  ASSERT_EQ(set.exit_code, 0) << set.output;
  EXPECT_THAT(set.output, HasSubstr("3g.40gb@0 3g.40gb@4"));
  ASSERT_TRUE(
      WaitUntil([&] { return Json("node show " + host)["layout"]["applied"] == true; }, kLimit))
      << Tail(server_.Output());
  // serve reported its machine again: GPU 1 is whole now.
  const json after = Json("node list");
  ASSERT_EQ(after["nodes"].size(), 1u);
  EXPECT_EQ(after["nodes"][0]["gpus"][0]["mig"], true) << after.dump();
  EXPECT_EQ(after["nodes"][0]["gpus"][1]["mig"], false) << after.dump();
  // Only the layout's instances are handed out, bound to real MIG devices.
  const json first = Json("acquire --token " + ann_token_ + " --profile 3g.40gb --purpose a");
  ASSERT_TRUE(first.contains("lease")) << first.dump();
  EXPECT_THAT(first["lease"]["devices"][0].get<std::string>(), HasSubstr("MIG 3g.40gb@"));
  ASSERT_TRUE(WaitUntil(
      [&] {
        const json lease = Json("lease show " + first["lease"]["id"].dump());
        const json& l = lease.contains("lease") ? lease["lease"] : lease;
        return l["bound"].size() == 1 &&
               l["bound"][0]["uuid"].get<std::string>().rfind("MIG-", 0) == 0;
      },
      kLimit));
  Outcome small =
      Gpuslice("acquire --token " + ann_token_ + " --profile 1g.10gb --purpose b " + "--no-wait");
  EXPECT_NE(small.exit_code, 0) << small.output;
  EXPECT_THAT(small.output, HasSubstr("no free 1g.10gb instance")) << small.output;
  EXPECT_EQ(Gpuslice("node clear-layout " + host).exit_code, 0);
}

}  // namespace
