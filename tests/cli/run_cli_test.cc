// Black-box tests of `gpuslice run` and `gpuslice lease show|env|docker-args`: the built binary
// serves a simulated 2xA100-80GB fleet (in MIG mode, leases bound to simulated MIG instances) on
// a loopback port; `gpuslice run` acquires a slice, runs a command with CUDA_VISIBLE_DEVICES set
// to it, renews the lease while it runs and releases it when it ends, passing the exit code
// through; signals are forwarded; queued requests wait (or give up after --queue-timeout).
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
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
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;
using Outcome = gpuslice::cli::testing::CommandResult;
using gpuslice::cli::testing::FirstLine;
using gpuslice::cli::testing::GpusliceProcess;
using gpuslice::cli::testing::ReadFile;
using gpuslice::cli::testing::ServeFixture;
using gpuslice::cli::testing::Shell;
using gpuslice::cli::testing::SleepMs;
using gpuslice::cli::testing::WaitUntil;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace fs = std::filesystem;

Outcome Gpuslice(const std::string& args, bool with_stderr = true) {
  return gpuslice::cli::testing::RunGpuslice(args, with_stderr);
}

// Each test: its own `gpuslice serve` (simulated 2xA100-80GB, expiry sweeps every second) on a
// free port, a tenant team-a and its user ann, whose token the client commands use.
class RunCliTest : public ServeFixture {
 protected:
  void SetUp() override {
    static int salt = 40;
    ASSERT_NO_FATAL_FAILURE(StartServer("gpuslice_run_cli_", "2xA100-80GB", salt++));
    ASSERT_NO_FATAL_FAILURE(AddTeamA());
    token_env_->Set(ann_token_);
  }

  // Every lease of the tenant, released ones too.
  json AllLeases() {
    json all = Json("leases --all");
    return all.is_object() && all.contains("leases") ? all["leases"] : json::array();
  }
  json ActiveLeases() {
    json active = Json("leases");
    return active.is_object() && active.contains("leases") ? active["leases"] : json::array();
  }
  json QueueEntries() {
    json queue = Json("queue");
    return queue.is_object() && queue.contains("queue") ? queue["queue"] : json::array();
  }
  // The lease with this purpose (null if none).
  json LeaseWithPurpose(const std::string& purpose) {
    for (const json& lease : AllLeases()) {
      if (lease.value("purpose", std::string()) == purpose) return lease;
    }
    return json();
  }
  // Acquires a slice with `gpuslice acquire ARGS`; the lease, or null.
  json Acquire(const std::string& args) {
    json reply = Json("acquire " + args);
    EXPECT_TRUE(reply.is_object() && reply.contains("lease")) << reply.dump();
    return reply.is_object() && reply.contains("lease") ? reply["lease"] : json();
  }
  // Takes both GPUs with a 7g instance each, so that a small request queues.
  std::vector<std::int64_t> FillTheFleet() {
    std::vector<std::int64_t> ids;
    for (int i = 0; i < 2; ++i) {
      json lease = Acquire("--profile 7g.80gb --purpose fill --no-wait");
      if (lease.is_object()) ids.push_back(lease["id"].get<std::int64_t>());
    }
    EXPECT_EQ(ids.size(), 2u);
    return ids;
  }
};

TEST_F(RunCliTest, RunsTheCommandOnTheLeasedMigDeviceAndReleasesTheLease) {
  const std::string file = dir_ + "/visible";
  Outcome run = Gpuslice(
      "run --class small --purpose x -- sh -c 'echo \"$CUDA_VISIBLE_DEVICES "
      "$NVIDIA_VISIBLE_DEVICES $GPUSLICE_LEASE\" > " +
      file + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("released lease"));
  std::istringstream words(ReadFile(file));
  std::string cuda, nvidia, lease_id;
  words >> cuda >> nvidia >> lease_id;
  EXPECT_THAT(cuda, StartsWith("MIG-"));
  EXPECT_EQ(nvidia, cuda);

  const json leases = AllLeases();
  ASSERT_EQ(leases.size(), 1u) << leases.dump();
  const json& lease = leases[0];
  EXPECT_EQ(std::to_string(lease["id"].get<std::int64_t>()), lease_id);
  EXPECT_EQ(lease["state"], "released");
  EXPECT_EQ(lease["purpose"], "x");
  ASSERT_EQ(lease["bound"].size(), 1u) << lease.dump();
  EXPECT_EQ(lease["bound"][0]["uuid"], cuda);
  EXPECT_THAT(ActiveLeases(), IsEmpty());
}

TEST_F(RunCliTest, PassesTheCommandsExitCodeThroughAndReleases) {
  Outcome run = Gpuslice("run --class small --purpose seven -- sh -c 'exit 7'");
  EXPECT_EQ(run.exit_code, 7) << run.output;
  const json lease = LeaseWithPurpose("seven");
  ASSERT_TRUE(lease.is_object());
  EXPECT_EQ(lease["state"], "released");
}

TEST_F(RunCliTest, ACommandThatDoesNotExistExits127AndTheLeaseIsReleased) {
  Outcome run =
      Gpuslice("run --class small --purpose missing -- /nonexistent/gpuslice-no-such-command");
  EXPECT_EQ(run.exit_code, 127) << run.output;
  EXPECT_THAT(run.output, HasSubstr("/nonexistent/gpuslice-no-such-command"));
  const json lease = LeaseWithPurpose("missing");
  ASSERT_TRUE(lease.is_object());
  EXPECT_EQ(lease["state"], "released");
  EXPECT_THAT(ActiveLeases(), IsEmpty());
}

TEST_F(RunCliTest, SigtermEndsTheCommandReleasesTheLeaseAndExits143) {
  const std::string pid_file = dir_ + "/cmd.pid";
  GpusliceProcess run;
  run.Start({"run", "--class", "small", "--purpose", "sleeper", "--", "sh", "-c",
             "echo $$ > " + pid_file + ".tmp && mv " + pid_file + ".tmp " + pid_file +
                 " && exec sleep 30"},
            dir_ + "/run.log");
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(pid_file); }, std::chrono::seconds(10)))
      << run.Output();
  const pid_t command = static_cast<pid_t>(std::stol(ReadFile(pid_file)));
  ASSERT_GT(command, 0);
  const json active = ActiveLeases();
  ASSERT_EQ(active.size(), 1u) << active.dump();
  EXPECT_EQ(active[0]["state"], "active");

  const auto signalled = Clock::now();
  run.Signal(SIGTERM);
  EXPECT_EQ(run.WaitExit(std::chrono::seconds(5)), 143) << run.Output();
  EXPECT_LT(Clock::now() - signalled, std::chrono::seconds(5));
  // The command is gone (gpuslice run reaped it), and the lease is released.
  EXPECT_EQ(kill(command, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  const json lease = LeaseWithPurpose("sleeper");
  ASSERT_TRUE(lease.is_object());
  EXPECT_EQ(lease["state"], "released");
}

TEST_F(RunCliTest, RenewsTheLeaseWhileTheCommandRunsPastItsTtl) {
  const auto started = Clock::now();
  GpusliceProcess run;
  run.Start({"run", "--class", "small", "--purpose", "long", "--ttl", "2", "--", "sleep", "5"},
            dir_ + "/run.log");
  ASSERT_TRUE(WaitUntil([&] { return ActiveLeases().size() == 1; }, std::chrono::seconds(3)))
      << run.Output();
  // At 4 s the 2 s lease is still active (renewed), though the server expires leases every second.
  std::this_thread::sleep_until(started + std::chrono::seconds(4));
  ASSERT_TRUE(run.Running()) << run.Output();
  json lease = LeaseWithPurpose("long");
  ASSERT_TRUE(lease.is_object());
  EXPECT_EQ(lease["state"], "active") << lease.dump() << "\n" << run.Output();
  EXPECT_GT(lease["expires_at"].get<std::int64_t>(), lease["granted_at"].get<std::int64_t>() + 2)
      << lease.dump();
  EXPECT_EQ(run.WaitExit(std::chrono::seconds(6)), 0) << run.Output();
  EXPECT_THAT(run.Output(), Not(HasSubstr("could not renew")));
  lease = LeaseWithPurpose("long");
  ASSERT_TRUE(lease.is_object());
  EXPECT_EQ(lease["state"], "released") << lease.dump();
}

TEST_F(RunCliTest, AQueuedRunWaitsAndRunsOnceASliceIsReleased) {
  const std::vector<std::int64_t> fill = FillTheFleet();
  ASSERT_EQ(fill.size(), 2u);
  const std::string file = dir_ + "/visible";
  GpusliceProcess run;
  run.Start({"run", "--class", "small", "--purpose", "queued", "--", "sh", "-c",
             "echo \"$CUDA_VISIBLE_DEVICES\" > " + file},
            dir_ + "/run.log");
  json queue;
  ASSERT_TRUE(WaitUntil(
      [&] {
        queue = QueueEntries();
        return queue.size() == 1;
      },
      std::chrono::seconds(5)))
      << run.Output();
  const std::int64_t queue_id = queue[0]["id"].get<std::int64_t>();
  // Still waiting a second later; the command has not run.
  SleepMs(1000);
  EXPECT_TRUE(run.Running()) << run.Output();
  EXPECT_FALSE(fs::exists(file));

  Outcome released = Gpuslice("release " + std::to_string(fill[0]));
  ASSERT_EQ(released.exit_code, 0) << released.output;
  EXPECT_EQ(run.WaitExit(std::chrono::seconds(10)), 0) << run.Output();
  const std::string visible = FirstLine(ReadFile(file));
  EXPECT_THAT(visible, StartsWith("MIG-"));
  const json lease = LeaseWithPurpose("queued");
  ASSERT_TRUE(lease.is_object());
  EXPECT_EQ(lease["from_queue"].get<std::int64_t>(), queue_id);
  EXPECT_EQ(lease["state"], "released");
  ASSERT_EQ(lease["bound"].size(), 1u);
  EXPECT_EQ(lease["bound"][0]["uuid"], visible);
  EXPECT_THAT(QueueEntries(), IsEmpty());
}

TEST_F(RunCliTest, QueueTimeoutGivesUpWithExit1AndLeavesNoQueueEntry) {
  ASSERT_EQ(FillTheFleet().size(), 2u);
  const auto started = Clock::now();
  Outcome run = Gpuslice("run --class small --purpose impatient --queue-timeout 2 -- true");
  const auto waited = Clock::now() - started;
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--queue-timeout"));
  EXPECT_GE(waited, std::chrono::seconds(2));
  EXPECT_LT(waited, std::chrono::seconds(8));
  EXPECT_THAT(QueueEntries(), IsEmpty());
  EXPECT_TRUE(LeaseWithPurpose("impatient").is_null());
  // The withdrawn entry is not granted later either, when room frees.
  Outcome released =
      Gpuslice("release " + std::to_string(ActiveLeases()[0]["id"].get<std::int64_t>()));
  ASSERT_EQ(released.exit_code, 0) << released.output;
  EXPECT_TRUE(LeaseWithPurpose("impatient").is_null());
}

TEST_F(RunCliTest, SigintWhileQueuedWithdrawsTheEntry) {
  ASSERT_EQ(FillTheFleet().size(), 2u);
  GpusliceProcess run;
  run.Start({"run", "--class", "small", "--purpose", "interrupted", "--", "true"},
            dir_ + "/run.log");
  ASSERT_TRUE(WaitUntil([&] { return QueueEntries().size() == 1; }, std::chrono::seconds(5)))
      << run.Output();
  run.Signal(SIGINT);
  EXPECT_EQ(run.WaitExit(std::chrono::seconds(5)), 130) << run.Output();
  EXPECT_THAT(run.Output(), HasSubstr("withdrew queue entry"));
  EXPECT_THAT(QueueEntries(), IsEmpty());
  EXPECT_TRUE(LeaseWithPurpose("interrupted").is_null());
}

TEST_F(RunCliTest, LeaseEnvAndDockerArgsNameTheDevicesAndRefuseAReleasedLease) {
  const json lease = Acquire("--class small --purpose env");
  ASSERT_TRUE(lease.is_object());
  const std::string id = std::to_string(lease["id"].get<std::int64_t>());
  ASSERT_EQ(lease["bound"].size(), 1u) << lease.dump();
  const std::string uuid = lease["bound"][0]["uuid"].get<std::string>();
  EXPECT_THAT(uuid, StartsWith("MIG-"));

  Outcome env = Gpuslice("lease env " + id);
  ASSERT_EQ(env.exit_code, 0) << env.output;
  EXPECT_THAT(env.output, HasSubstr("export CUDA_VISIBLE_DEVICES='" + uuid + "'\n"));
  EXPECT_THAT(env.output, HasSubstr("export NVIDIA_VISIBLE_DEVICES='" + uuid + "'\n"));
  EXPECT_THAT(env.output, HasSubstr("export GPUSLICE_LEASE='" + id + "'\n"));
  // A shell can evaluate it.
  Outcome evaluated = Shell(std::string("eval \"$('") + GPUSLICE_BINARY + "' lease env " + id +
                            ")\" && echo \"$CUDA_VISIBLE_DEVICES\"");
  EXPECT_EQ(evaluated.exit_code, 0) << evaluated.output;
  EXPECT_EQ(FirstLine(evaluated.output), uuid);

  Outcome docker = Gpuslice("lease docker-args " + id);
  ASSERT_EQ(docker.exit_code, 0) << docker.output;
  EXPECT_THAT(docker.output, StartsWith("--gpus \"device=" + uuid + "\""));
  EXPECT_THAT(docker.output, HasSubstr("-e GPUSLICE_LEASE=" + id));
  EXPECT_THAT(docker.output, HasSubstr("-e NVIDIA_VISIBLE_DEVICES=" + uuid));
  EXPECT_THAT(docker.output, Not(HasSubstr("CUDA_VISIBLE_DEVICES")));

  Outcome show = Gpuslice("lease show " + id + " --json", /*with_stderr=*/false);
  ASSERT_EQ(show.exit_code, 0) << show.output;
  const json shown = json::parse(show.output, nullptr, false);
  ASSERT_TRUE(shown.is_object()) << show.output;
  EXPECT_EQ(shown["env"]["CUDA_VISIBLE_DEVICES"], uuid);
  EXPECT_EQ(shown["bound"][0]["uuid"], uuid);

  ASSERT_EQ(Gpuslice("release " + id).exit_code, 0);
  for (const char* verb : {"env", "docker-args"}) {
    Outcome after = Gpuslice(std::string("lease ") + verb + " " + id);
    EXPECT_EQ(after.exit_code, 1) << verb << ": " << after.output;
    EXPECT_THAT(after.output, HasSubstr("lease " + id + " is released, not active")) << verb;
    EXPECT_THAT(after.output, Not(HasSubstr(uuid))) << verb;
  }
  Outcome missing = Gpuslice("lease env 999");
  EXPECT_NE(missing.exit_code, 0) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("404"));
}

TEST_F(RunCliTest, ExactlyOneOfClassProfileOrShareIsRequired) {
  for (const std::string& kinds :
       {std::string(""), std::string("--class small --profile 1g.10gb"),
        std::string("--class small --share 100"), std::string("--profile 1g.10gb --share 100")}) {
    Outcome run = Gpuslice("run " + kinds + " --purpose x -- true");
    EXPECT_EQ(run.exit_code, 2) << kinds << ": " << run.output;
    EXPECT_THAT(run.output, HasSubstr("exactly one of --class, --profile or --share")) << kinds;
  }
  EXPECT_THAT(AllLeases(), IsEmpty());
}

}  // namespace
