// `gpuslice report usage` against the real binary: `gpuslice serve` (a simulated 1xL40S, or a
// 1xA30-24GB for its own machine's leases) and an agent on a simulated H100 kept in a state file,
// where the test starts a process that uses memory in a lease's MIG instance. The agent's rounds
// carry the lease's figures; the report shows the peak, the verdict, the text table, and the
// planner's workloads file that `gpuslice plan` takes; serve records its own machine's leases;
// a bad --since is refused with exit code 2.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#include "cli/serve_process.h"
#include "nlohmann/json.hpp"

namespace {

using gpuslice::cli::testing::GpusliceProcess;
using gpuslice::cli::testing::ReadFile;
using gpuslice::cli::testing::ServeFixture;
using gpuslice::cli::testing::WaitUntil;
using nlohmann::json;
using ::testing::HasSubstr;
using Outcome = gpuslice::cli::testing::CommandResult;

constexpr auto kLimit = std::chrono::seconds(30);

constexpr char kAllMigOn[] = R"(version: v1
mig-configs:
  all-on:
    - devices: all
      mig-enabled: true
      mig-devices: {}
)";

constexpr char kFleet[] = R"(nodes:
  - name: remote1
    gpus:
      - model: H100-80GB
        count: 1
)";

Outcome Gpuslice(const std::string& args, bool with_stderr = true) {
  return gpuslice::cli::testing::RunGpuslice(args, with_stderr);
}

class ReportCliTest : public ServeFixture {
 protected:
  void TearDown() override {
    agent_.Kill();
    ServeFixture::TearDown();
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  // `report usage ARGS --json` as the admin; a null json when it fails.
  json Report(const std::string& args = "") {
    Outcome out = Gpuslice("report usage --token " + admin_token_ + " " + args + " --json",
                           /*with_stderr=*/false);
    if (out.exit_code != 0) return json();
    json parsed = json::parse(out.output, nullptr, false);
    return parsed.is_discarded() ? json() : parsed;
  }

  // The report's row for `key` (null until it is there).
  json Row(const std::string& key, const std::string& args = "") {
    const json report = Report(args);
    if (!report.is_object()) return json();
    for (const json& row : report["rows"]) {
      if (row["key"] == key) return row;
    }
    return json();
  }

  GpusliceProcess agent_;
};

TEST_F(ReportCliTest, AnAgentsLeaseShowsItsPeakAndThePlanTakesTheWorkloads) {
  static int salt = 830;
  ASSERT_NO_FATAL_FAILURE(StartServer("gpuslice_report_cli_", "1xL40S", salt++));
  ASSERT_NO_FATAL_FAILURE(AddTeamA());
  std::string agent_token;
  ASSERT_NO_FATAL_FAILURE(AddUser("agent-remote1 --agent --machine remote1", &agent_token));
  // remote1: one H100 in MIG mode, kept in a state file the test can put processes on.
  const std::string state = dir_ + "/remote1.json";
  Outcome created = Gpuslice("sim create '" + state + "' 1xH100-80GB --seed 7");
  ASSERT_EQ(created.exit_code, 0) << created.output;
  const std::string on = Write("all-on.yaml", kAllMigOn);
  Outcome applied = Gpuslice("apply --sim '" + state + "' -f '" + on + "' -c all-on");
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  agent_.Start({"agent", "--server", url_, "--token", agent_token, "--host", "remote1",
                "--sim-state", state, "--interval", "1"},
               dir_ + "/agent.log");

  // A small slice for ann: the L40S has no MIG, so it is a 1g.10gb on remote1.
  json lease;
  ASSERT_TRUE(WaitUntil(
      [&] {
        Outcome got = Gpuslice("acquire --token " + ann_token_ +
                                   " --class small --purpose 'notebook: embeddings' --json",
                               /*with_stderr=*/false);
        json parsed = json::parse(got.output, nullptr, false);
        if (got.exit_code != 0 || !parsed.is_object() || !parsed.contains("lease")) return false;
        lease = parsed["lease"];
        return true;
      },
      kLimit))
      << agent_.Output();
  ASSERT_EQ(lease["node"], "remote1/H100-80GB-mig") << lease.dump();
  const std::string id = std::to_string(lease["id"].get<std::int64_t>());
  // The agent sets the instance up and reports its MIG device.
  json bound;
  ASSERT_TRUE(WaitUntil(
      [&] {
        Outcome shown = Gpuslice("lease show " + id + " --token " + ann_token_ + " --json", false);
        json parsed = json::parse(shown.output, nullptr, false);
        if (!parsed.is_object() || parsed.value("bound", json::array()).empty()) return false;
        bound = parsed["bound"][0];
        return true;
      },
      kLimit))
      << agent_.Output();
  ASSERT_TRUE(bound.contains("gi")) << bound.dump();

  // A process uses 3000 MiB in the instance.
  Outcome process = Gpuslice("sim process add '" + state + "' --gpu " +
                             std::to_string(bound["gpu_index"].get<int>()) + " --gi " +
                             std::to_string(bound["gi"].get<int>()) + " --ci " +
                             std::to_string(bound["ci"].get<int>()) + " --pid 4242 --memory 3000");
  ASSERT_EQ(process.exit_code, 0) << process.output;
  json row;
  ASSERT_TRUE(WaitUntil(
      [&] {
        row = Row("notebook-embeddings", "--since 1h");
        return row.is_object() && row["memory_peak_mib"] == 3000;
      },
      kLimit))
      << row.dump() << "\n"
      << agent_.Output();
  EXPECT_EQ(row["tenant"], "team-a");
  EXPECT_EQ(row["class"], "small");
  EXPECT_EQ(row["gpu_model"], "H100-80GB");
  EXPECT_EQ(row["profile"], "1g.10gb");
  EXPECT_GT(row["slice_mib"].get<std::int64_t>(), 9000);
  EXPECT_EQ(row["processes_peak"], 1);
  EXPECT_EQ(row["idle"], 0);
  EXPECT_EQ(row["oversized"], 0);  // the smallest profile already
  EXPECT_EQ(row["too_small"], 0);
  EXPECT_EQ(row["kind"], "notebook");

  // The table, by tenant, and the planner's input, which `gpuslice plan` takes.
  Outcome table = Gpuslice("report usage --token " + admin_token_ + " --since 1h");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_THAT(table.output, HasSubstr("WORKLOAD"));
  EXPECT_THAT(table.output, HasSubstr("notebook-embeddings"));
  EXPECT_THAT(table.output, HasSubstr("H100-80GB 1g.10gb"));
  const json by_tenant = Report("--since 1h --by tenant");
  ASSERT_TRUE(by_tenant.is_object());
  ASSERT_EQ(by_tenant["rows"].size(), 1u) << by_tenant.dump();
  EXPECT_EQ(by_tenant["rows"][0]["key"], "team-a");
  const std::string workloads = dir_ + "/workloads.yaml";
  Outcome written = Gpuslice("report usage --token " + admin_token_ + " --since 1h --plan-out '" +
                             workloads + "'");
  ASSERT_EQ(written.exit_code, 0) << written.output;
  const std::string yaml = ReadFile(workloads);
  EXPECT_THAT(yaml, HasSubstr("name: \"notebook-embeddings\""));
  EXPECT_THAT(yaml, HasSubstr("peak_memory_gib: 2.93"));  // 3000 MiB, rounded up
  const std::string fleet = Write("fleet.yaml", kFleet);
  Outcome planned = Gpuslice("plan -w '" + workloads + "' -f '" + fleet + "'");
  EXPECT_EQ(planned.exit_code, 0) << planned.output << "\n" << yaml;
  EXPECT_THAT(planned.output, HasSubstr("notebook-embeddings"));

  // A tenant's user reads its own usage too.
  Outcome own = Gpuslice("report usage --token " + ann_token_ + " --since 1h --json", false);
  ASSERT_EQ(own.exit_code, 0) << own.output;
  EXPECT_THAT(own.output, HasSubstr("notebook-embeddings"));
}

TEST_F(ReportCliTest, ServeRecordsItsOwnMachinesLeasesAndBadSinceIsRefused) {
  static int salt = 870;
  ASSERT_NO_FATAL_FAILURE(StartServer("gpuslice_report_cli_", "1xA30-24GB", salt++));
  ASSERT_NO_FATAL_FAILURE(AddTeamA());
  Outcome got = Gpuslice("acquire --token " + ann_token_ + " --class small --purpose 'eval run'");
  ASSERT_EQ(got.exit_code, 0) << got.output;
  // No process ever runs on it: after a few ticks the report calls it idle.
  json row;
  ASSERT_TRUE(WaitUntil(
      [&] {
        row = Row("eval-run", "--since 10m");
        return row.is_object() && row["samples"].get<std::int64_t>() >= 2;
      },
      kLimit))
      << row.dump() << "\n"
      << server_.Output();
  EXPECT_EQ(row["gpu_model"], "A30-24GB");
  EXPECT_EQ(row["memory_peak_mib"], 0);
  EXPECT_EQ(row["idle"], 1);
  EXPECT_THAT(row["explanation"].get<std::string>(), HasSubstr("idle all along"));
  const std::string out = dir_ + "/idle.yaml";
  Outcome written =
      Gpuslice("report usage --token " + admin_token_ + " --since 10m --plan-out '" + out + "'");
  ASSERT_EQ(written.exit_code, 0) << written.output;
  EXPECT_THAT(ReadFile(out), HasSubstr("# left out: eval-run"));

  for (const char* bad : {"7x", "0d", "-1h", "91d", "soon", ""}) {
    Outcome refused =
        Gpuslice(std::string("report usage --token ") + admin_token_ + " --since '" + bad + "'");
    EXPECT_EQ(refused.exit_code, 2) << bad << ": " << refused.output;
    EXPECT_THAT(refused.output, HasSubstr("--since")) << bad;
  }
  Outcome bad_by = Gpuslice("report usage --token " + admin_token_ + " --by user");
  EXPECT_EQ(bad_by.exit_code, 2) << bad_by.output;
  EXPECT_THAT(bad_by.output, HasSubstr("--by"));
}

}  // namespace
