// Black-box tests of `gpuslice agent`: the built binary serves a simulated 1xA100-80GB fleet on a
// loopback port and a second process, `gpuslice agent --host remote1 --sim-fleet 2xH100-80GB`,
// reports a simulated remote machine to it. Leases that land on remote1 are set up by the agent
// (distinct simulated MIG uuids), `gpuslice run` waits for that and runs its command on the remote
// device, released leases are torn down, `--once` reports and exits, a tenant token is refused,
// and `run` gives up (releasing the lease) when no agent sets the slice up.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
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
using ::testing::StartsWith;
using Outcome = gpuslice::cli::testing::CommandResult;
using gpuslice::cli::testing::FirstLine;
using gpuslice::cli::testing::GetJson;
using gpuslice::cli::testing::GpusliceProcess;
using gpuslice::cli::testing::ReadFile;
using gpuslice::cli::testing::ServeFixture;
using gpuslice::cli::testing::SleepMs;
using gpuslice::cli::testing::WaitUntil;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace fs = std::filesystem;

Outcome Gpuslice(const std::string& args, bool with_stderr = true) {
  return gpuslice::cli::testing::RunGpuslice(args, with_stderr);
}

// Each test: its own `gpuslice serve` (simulated 1xA100-80GB in MIG mode) on a free port, a
// tenant team-a with its user ann (whose token the client commands use) and an agent user.
class AgentCliTest : public ServeFixture {
 protected:
  void SetUp() override {
    static int salt = 70;
    ASSERT_NO_FATAL_FAILURE(StartServer("gpuslice_agent_cli_", "1xA100-80GB", salt++));
    ASSERT_NO_FATAL_FAILURE(AddTeamA());
    ASSERT_NO_FATAL_FAILURE(AddUser("agent-remote1 --agent --machine remote1", &agent_token_));
    token_env_->Set(ann_token_);
  }

  void TearDown() override {
    agent_.Kill();
    ServeFixture::TearDown();
  }

  std::vector<std::string> AgentArgs(const std::string& token) {
    return {"agent",   "--server",    url_,          "--token",    token, "--host",
            "remote1", "--sim-fleet", "2xH100-80GB", "--interval", "1"};
  }
  // Starts the agent and waits until it has reported remote1.
  void StartAgent() {
    agent_.Start(AgentArgs(agent_token_), dir_ + "/agent.log");
    ASSERT_TRUE(WaitUntil([&] { return agent_.Output().find("reported") != std::string::npos; },
                          std::chrono::seconds(10)))
        << agent_.Output();
  }

  json Leases(bool all = false) {
    json reply = Json(all ? "leases --all" : "leases");
    return reply.is_object() && reply.contains("leases") ? reply["leases"] : json::array();
  }
  json Acquire(const std::string& args) {
    json reply = Json("acquire " + args);
    EXPECT_TRUE(reply.is_object() && reply.contains("lease")) << reply.dump();
    return reply.is_object() && reply.contains("lease") ? reply["lease"] : json();
  }
  // Takes the whole local A100 so that the next small slices go to remote1.
  json FillTheA100() {
    json lease = Acquire("--profile 7g.80gb --purpose fill --no-wait");
    EXPECT_TRUE(lease.is_object());
    if (lease.is_object()) {
      EXPECT_THAT(lease["node"].get<std::string>(), Not(StartsWith("remote1")));
    }
    return lease;
  }
  json LeaseById(std::int64_t id) {
    for (const json& lease : Leases(true)) {
      if (lease["id"] == id) return lease;
    }
    return json();
  }

  static bool OnRemote(const json& lease) {
    return lease.is_object() && lease.value("node", std::string()).rfind("remote1/", 0) == 0;
  }

  GpusliceProcess agent_;
  std::string agent_token_;
};

TEST_F(AgentCliTest, SetsUpRemoteLeasesRunUsesThemAndReleasedOnesAreTornDown) {
  const json fill = FillTheA100();
  ASSERT_TRUE(fill.is_object());
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  EXPECT_THAT(agent_.Output(), HasSubstr("remote1/H100-80GB-mig"));

  std::vector<std::int64_t> remote;
  for (int i = 0; i < 3; ++i) {
    json lease = Acquire("--class small --no-wait --purpose remote" + std::to_string(i));
    ASSERT_TRUE(OnRemote(lease)) << lease.dump();
    remote.push_back(lease["id"].get<std::int64_t>());
  }
  // Within a few seconds the agent has set them all up with distinct MIG devices.
  std::set<std::string> uuids;
  ASSERT_TRUE(WaitUntil(
      [&] {
        uuids.clear();
        for (const json& lease : Leases()) {
          if (!OnRemote(lease)) continue;
          if (lease["bound"].size() != 1) return false;
          uuids.insert(lease["bound"][0]["uuid"].get<std::string>());
        }
        return uuids.size() == remote.size();
      },
      std::chrono::seconds(8)))
      << agent_.Output() << Leases().dump();
  for (const std::string& uuid : uuids) EXPECT_THAT(uuid, StartsWith("MIG-"));
  const json local = LeaseById(fill["id"].get<std::int64_t>());
  ASSERT_EQ(local["bound"].size(), 1u) << local.dump();
  EXPECT_FALSE(uuids.contains(local["bound"][0]["uuid"].get<std::string>()));
  for (std::int64_t id : remote) {
    const json lease = LeaseById(id);
    EXPECT_EQ(lease["env"]["CUDA_VISIBLE_DEVICES"], lease["bound"][0]["uuid"]) << lease.dump();
  }

  // `run` lands on remote1 (the A100 is full) and waits for the agent's devices.
  const std::string file = dir_ + "/visible";
  Outcome run = Gpuslice(
      "run --class small --purpose remote-run --setup-timeout 15 -- sh -c 'echo "
      "\"$CUDA_VISIBLE_DEVICES $GPUSLICE_LEASE\" > " +
      file + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output << agent_.Output();
  std::istringstream words(ReadFile(file));
  std::string cuda, lease_id;
  words >> cuda >> lease_id;
  EXPECT_THAT(cuda, StartsWith("MIG-"));
  EXPECT_FALSE(uuids.contains(cuda)) << cuda;
  const json ran = LeaseById(std::stoll(lease_id));
  EXPECT_TRUE(OnRemote(ran)) << ran.dump();
  EXPECT_EQ(ran["state"], "released");
  ASSERT_EQ(ran["bound"].size(), 1u) << ran.dump();
  EXPECT_EQ(ran["bound"][0]["uuid"], cuda);

  // Releasing a remote lease: the agent tears its devices down.
  Outcome released = Gpuslice("release " + std::to_string(remote[0]));
  ASSERT_EQ(released.exit_code, 0) << released.output;
  const std::string torn =
      "lease " + std::to_string(remote[0]) + " ended: its devices are torn down";
  EXPECT_TRUE(WaitUntil([&] { return agent_.Output().find(torn) != std::string::npos; },
                        std::chrono::seconds(8)))
      << agent_.Output();
  EXPECT_TRUE(WaitUntil(
      [&] {
        return agent_.Output().find("lease " + lease_id + " ended: its devices are torn down") !=
               std::string::npos;
      },
      std::chrono::seconds(8)))
      << agent_.Output();
  // Its capacity is used again: a new slice is set up on remote1.
  json again = Acquire("--class small --no-wait --purpose again");
  ASSERT_TRUE(OnRemote(again)) << again.dump();
  EXPECT_TRUE(
      WaitUntil([&] { return LeaseById(again["id"].get<std::int64_t>())["bound"].size() == 1; },
                std::chrono::seconds(8)))
      << agent_.Output();
  EXPECT_EQ(agent_.Terminate(), 0) << agent_.Output();
}

// remote1's entry of GET /v1/nodes, or null.
json RemoteNode(const json& nodes) {
  for (const json& node : nodes["nodes"]) {
    if (node["host"] == "remote1") return node;
  }
  return json();
}

TEST_F(AgentCliTest, OnceReportsAndExits0) {
  GpusliceProcess once;
  std::vector<std::string> args = AgentArgs(agent_token_);
  args.push_back("--once");
  once.Start(args, dir_ + "/once.log");
  ASSERT_EQ(once.WaitExit(std::chrono::seconds(15)), 0) << once.Output();
  const json nodes = GetJson(port_, "/v1/nodes", admin_token_);
  ASSERT_TRUE(nodes.is_object()) << nodes.dump();
  // serve's own machine and remote1.
  ASSERT_EQ(nodes["nodes"].size(), 2u) << nodes.dump();
  const json remote = RemoteNode(nodes);
  ASSERT_TRUE(remote.is_object()) << nodes.dump();
  EXPECT_EQ(remote["gpus"].size(), 2u);
  // The service answered with the machine's placement node, which the agent logs.
  EXPECT_THAT(once.Output(), HasSubstr("reported 2 GPUs of remote1"));
  EXPECT_THAT(once.Output(), HasSubstr("remote1/H100-80GB-mig"));
}

TEST_F(AgentCliTest, ATenantTokenIsRefusedWithExit3) {
  GpusliceProcess agent;
  agent.Start(AgentArgs(ann_token_), dir_ + "/tenant-agent.log");
  ASSERT_EQ(agent.WaitExit(std::chrono::seconds(10)), 3) << agent.Output();
  const std::string output = agent.Output();
  EXPECT_THAT(output, HasSubstr("agent")) << output;
  EXPECT_THAT(output, HasSubstr("403")) << output;
  const json nodes = GetJson(port_, "/v1/nodes", admin_token_);
  ASSERT_TRUE(nodes.is_object()) << nodes.dump();
  EXPECT_TRUE(RemoteNode(nodes).is_null()) << "only serve's own machine: " << nodes.dump();
}

TEST_F(AgentCliTest, RunGivesUpAndReleasesWhenTheAgentIsGone) {
  const json fill = FillTheA100();
  ASSERT_TRUE(fill.is_object());
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  ASSERT_EQ(agent_.Terminate(), 0) << agent_.Output();
  const auto started = Clock::now();
  Outcome run = Gpuslice("run --class small --purpose orphan --setup-timeout 2 -- true");
  const auto took = Clock::now() - started;
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("gpuslice agent")) << run.output;
  EXPECT_THAT(run.output, HasSubstr("remote1/")) << run.output;
  EXPECT_THAT(run.output, HasSubstr("released")) << run.output;
  EXPECT_LT(took, std::chrono::seconds(10));
  json orphan;
  for (const json& lease : Leases(true)) {
    if (lease["purpose"] == "orphan") orphan = lease;
  }
  ASSERT_TRUE(orphan.is_object());
  EXPECT_TRUE(OnRemote(orphan)) << orphan.dump();
  EXPECT_EQ(orphan["state"], "released");
  EXPECT_EQ(Leases().size(), 1u);  // only the local fill
}

}  // namespace
