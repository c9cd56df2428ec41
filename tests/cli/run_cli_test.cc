// Black-box tests of `gpuslice run` and `gpuslice lease show|env|docker-args`: the built binary
// serves a simulated 2xA100-80GB fleet (in MIG mode, leases bound to simulated MIG instances) on
// a loopback port; `gpuslice run` acquires a slice, runs a command with CUDA_VISIBLE_DEVICES set
// to it, renews the lease while it runs and releases it when it ends, passing the exit code
// through; signals are forwarded; queued requests wait (or give up after --queue-timeout).
// Shares of a GPU get the CUDA interposer that enforces them (LD_PRELOAD, GPUSLICE_SLICE=
// lease-<id>), or are not run without it: against serve on a simulated L40S (skipped while serve
// grants no share there) and against a stand-in API that grants shares; serve exports slices'
// accounting (a region file made here, tests/shim/slice_file.h).
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/run_gpuslice.h"
#include "cli/serve_process.h"
#include "gpuslice/shim/slices.h"
#include "nlohmann/json.hpp"
#include "shim/slice_file.h"

#ifndef GPUSLICE_BINARY
#error "GPUSLICE_BINARY must name the built gpuslice executable"
#endif
#ifndef GPUSLICE_INTERPOSER_PATH
#error "GPUSLICE_INTERPOSER_PATH must name the built interposer libgpuslice-cuda.so"
#endif

namespace {

// Share runs preload the interposer into their commands. In the sanitizer build it is built with
// ASan too, and a preloaded library then comes before ASan's runtime: let the children allow it.
[[maybe_unused]] const bool kAsanAllowsPreload = [] {
  const char* current = std::getenv("ASAN_OPTIONS");
  std::string options = current != nullptr ? current : "";
  if (!options.empty()) options += ":";
  options += "verify_asan_link_order=0";
  return setenv("ASAN_OPTIONS", options.c_str(), 1) == 0;
}();

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;
using Outcome = gpuslice::cli::testing::CommandResult;
using gpuslice::cli::testing::FirstLine;
using gpuslice::cli::testing::GpusliceProcess;
using gpuslice::cli::testing::HttpGet;
using gpuslice::cli::testing::ReadFile;
using gpuslice::cli::testing::ScopedEnv;
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
  EXPECT_THAT(missing.output, HasSubstr("not found: "));
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

// The interposer as `gpuslice run` finds it in these tests: a file made here (FindInterposer only
// checks that it exists; the dynamic loader skips a file that is not a library, so the commands
// run).
std::string MakeInterposerFile(const std::string& dir) {
  const std::string path = dir + "/libgpuslice-cuda.so";
  std::ofstream(path) << "";
  return path;
}

// A copy of the gpuslice binary in dir/bin, away from the build tree's shim/libgpuslice-cuda.so,
// so that FindInterposer finds none unless told (empty when one is installed system-wide).
std::string BinaryWithoutInterposer(const std::string& dir) {
  if (fs::exists("/usr/lib/gpuslice/libgpuslice-cuda.so")) return "";
  fs::create_directories(dir + "/bin");
  const std::string binary = dir + "/bin/gpuslice";
  fs::copy_file(GPUSLICE_BINARY, binary, fs::copy_options::overwrite_existing);
  return binary;
}

// Shares of a non-MIG GPU are granted on a simulated fleet: their refusal is a regression.
constexpr const char* kNoShares = "serve refused a share of a simulated L40S";

// Shares of a GPU without MIG: `gpuslice serve` on a simulated L40S, the interposer a file made
// here, the slices' accounting directory the test's own (serve reads it for /metrics).
class RunShareCliTest : public RunCliTest {
 protected:
  void SetUp() override {
    static int salt = 60;
    shm_dir_ =
        (fs::path(::testing::TempDir()) / ("gpuslice_run_share_shm_" + std::to_string(getpid())))
            .string();
    fs::remove_all(shm_dir_);
    fs::create_directories(shm_dir_);
    shm_env_ = std::make_unique<ScopedEnv>("GPUSLICE_SHM_DIR", shm_dir_);
    ASSERT_NO_FATAL_FAILURE(StartServer("gpuslice_run_share_", "1xL40S", salt++));
    ASSERT_NO_FATAL_FAILURE(AddTeamA());
    token_env_->Set(ann_token_);
    interposer_ = MakeInterposerFile(dir_);
    interposer_env_ = std::make_unique<ScopedEnv>("GPUSLICE_INTERPOSER", interposer_);
  }
  void TearDown() override {
    RunCliTest::TearDown();
    interposer_env_.reset();
    shm_env_.reset();
    std::error_code ignored;
    if (!HasFailure()) fs::remove_all(shm_dir_, ignored);
  }

  // A share lease (null when the fleet grants none).
  json AcquireShare(const std::string& args) {
    Outcome out = Gpuslice("acquire " + args + " --no-wait --json", /*with_stderr=*/false);
    const json reply = json::parse(out.output, nullptr, false);
    return out.exit_code == 0 && reply.is_object() && reply.contains("lease") ? reply["lease"]
                                                                              : json();
  }

  std::string interposer_;
  std::string shm_dir_;
  std::unique_ptr<ScopedEnv> interposer_env_;
  std::unique_ptr<ScopedEnv> shm_env_;
};

TEST_F(RunShareCliTest, AShareRunLoadsTheInterposerAndNamesTheLeasesSlice) {
  const std::string file = dir_ + "/env";
  // What LD_PRELOAD had stays, after the interposer.
  Outcome run = Shell("LD_PRELOAD=libm.so.6 '" + std::string(GPUSLICE_BINARY) +
                      "' run --share 250 --vram 8192 --no-wait --purpose share -- sh -c 'echo "
                      "\"$LD_PRELOAD|$GPUSLICE_SLICE|$GPUSLICE_COMPUTE_SHARE_MILLI|"
                      "$GPUSLICE_VRAM_LIMIT_MIB|$GPUSLICE_LEASE\" > " +
                      file + "' 2>&1");
  ASSERT_THAT(run.output, Not(HasSubstr("never satisfiable"))) << kNoShares;
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const json lease = LeaseWithPurpose("share");
  ASSERT_TRUE(lease.is_object());
  const std::string id = std::to_string(lease["id"].get<std::int64_t>());
  EXPECT_EQ(FirstLine(ReadFile(file)), interposer_ + ":libm.so.6|lease-" + id + "|250|8192|" + id);
  // The lease line names the interposer.
  EXPECT_THAT(run.output, HasSubstr("LD_PRELOAD=" + interposer_ + ":libm.so.6"));
  EXPECT_THAT(run.output, HasSubstr("GPUSLICE_SLICE=lease-" + id));
  EXPECT_EQ(lease["state"], "released");
}

TEST_F(RunShareCliTest, AShareIsNotRunWithoutTheInterposer) {
  const std::string binary = BinaryWithoutInterposer(dir_);
  if (binary.empty()) GTEST_SKIP() << "an interposer is installed in /usr/lib/gpuslice";
  const std::string missing = dir_ + "/no/libgpuslice-cuda.so";
  const std::string ran = dir_ + "/ran";
  Outcome refused =
      Shell("GPUSLICE_INTERPOSER='" + missing + "' '" + binary +
            "' run --share 250 --vram 4096 --no-wait --purpose refused -- touch " + ran + " 2>&1");
  ASSERT_THAT(refused.output, Not(HasSubstr("never satisfiable"))) << kNoShares;
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr(missing));
  EXPECT_THAT(refused.output, HasSubstr("would not be enforced"));
  EXPECT_FALSE(fs::exists(ran));
  const json lease = LeaseWithPurpose("refused");
  ASSERT_TRUE(lease.is_object());
  EXPECT_EQ(lease["state"], "released");
  EXPECT_THAT(ActiveLeases(), IsEmpty());
}

TEST_F(RunShareCliTest, LeaseEnvOfAShareAddsThisMachinesInterposer) {
  const json lease = AcquireShare("--share 500 --vram 16384 --purpose env");
  ASSERT_TRUE(lease.is_object()) << kNoShares;
  const std::string id = std::to_string(lease["id"].get<std::int64_t>());
  Outcome env = Gpuslice("lease env " + id, /*with_stderr=*/false);
  ASSERT_EQ(env.exit_code, 0) << env.output;
  EXPECT_THAT(env.output, HasSubstr("export GPUSLICE_SLICE='lease-" + id + "'\n"));
  EXPECT_THAT(env.output, HasSubstr("export GPUSLICE_COMPUTE_SHARE_MILLI='500'\n"));
  EXPECT_THAT(env.output, HasSubstr("export LD_PRELOAD='" + interposer_ + "'\n"));
  ASSERT_EQ(Gpuslice("release " + id).exit_code, 0);
}

TEST_F(RunShareCliTest, AWholeGpuNeedsNoInterposer) {
  const std::string binary = BinaryWithoutInterposer(dir_);
  if (binary.empty()) GTEST_SKIP() << "an interposer is installed in /usr/lib/gpuslice";
  {
    ScopedEnv admin("GPUSLICE_TOKEN", admin_token_);
    Outcome tenant = Gpuslice("admin tenant team-a --full");
    ASSERT_EQ(tenant.exit_code, 0) << tenant.output;
  }
  Outcome whole =
      Shell("GPUSLICE_INTERPOSER='" + dir_ + "/no/libgpuslice-cuda.so' '" + binary +
            "' run --class full --purpose whole -- sh -c 'echo \"[$LD_PRELOAD]\"' 2>&1");
  EXPECT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_THAT(whole.output, HasSubstr("[]"));
  EXPECT_THAT(whole.output, Not(HasSubstr("GPUSLICE_SLICE")));
}

TEST_F(RunShareCliTest, ServeExportsTheSlicesOfItsMachine) {
  // The accounting the interposer keeps for a lease's processes, in serve's directory.
  const std::string gpu = "GPU-5e1ec7ed-0000-4000-8000-000000000001";
  gpuslice::shim::testing::SliceFile slice(gpuslice::shim::SlicePath(shm_dir_, "lease-77"),
                                           "lease-77");
  ASSERT_TRUE(slice.ok());
  std::snprintf(slice.region().gpu_uuid, sizeof slice.region().gpu_uuid, "%s", gpu.c_str());
  slice.region().cap_bytes = 8192ull << 20;
  slice.region().share_milli = 250;
  slice.region().launches = 42;
  gpuslice::shim::testing::SlotHolder process(slice.path(), 0);
  ASSERT_TRUE(process.held());
  slice.AddProcess(0, process.pid(), 1ull << 30);

  const std::string reply = HttpGet(port_, "/metrics", admin_token_);
  ASSERT_THAT(reply, StartsWith("HTTP/1.1 200")) << reply;
  const std::string labels = "{slice=\"lease-77\",UUID=\"" + gpu + "\",Hostname=\"";
  EXPECT_THAT(reply, HasSubstr("gpuslice_slice_vram_used_bytes" + labels));
  EXPECT_THAT(reply, HasSubstr("\",lease=\"77\"} 1073741824\n"));
  EXPECT_THAT(reply, HasSubstr("gpuslice_slice_compute_share" + labels));
  EXPECT_THAT(reply, HasSubstr("\",lease=\"77\"} 0.25\n"));
  EXPECT_THAT(reply, HasSubstr("# TYPE gpuslice_slice_launches_total counter\n"));
  EXPECT_THAT(reply, HasSubstr("\",lease=\"77\"} 42\n"));
  EXPECT_THAT(reply, HasSubstr("gpuslice_slice_processes" + labels));
}

// A stand-in for the allocation API that grants share leases as serve does for a GPU handed out
// shared (the environment of alloc::LeaseEnvironment for a share), so that `gpuslice run` and
// `gpuslice lease env` of a share are tested whatever the fleet grants. Keeps the leases'
// states: DELETE releases.
class StandInShareApi {
 public:
  StandInShareApi() {
    server_.Post("/v1/leases", [this](const httplib::Request&, httplib::Response& res) {
      const std::int64_t id = Grant();
      std::lock_guard<std::mutex> lock(mutex_);
      res.status = 201;
      res.set_content(json{{"lease", leases_[id]}}.dump(), "application/json");
    });
    server_.Get(R"(/v1/leases/(\d+))", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = leases_.find(std::stoll(req.matches[1].str()));
      res.status = it == leases_.end() ? 404 : 200;
      res.set_content(
          it == leases_.end() ? json{{"error", "no such lease"}}.dump() : it->second.dump(),
          "application/json");
    });
    server_.Delete(R"(/v1/leases/(\d+))",
                   [this](const httplib::Request& req, httplib::Response& res) {
                     std::lock_guard<std::mutex> lock(mutex_);
                     auto it = leases_.find(std::stoll(req.matches[1].str()));
                     if (it != leases_.end()) it->second["state"] = "released";
                     res.status = it == leases_.end() ? 404 : 200;
                     res.set_content("{}", "application/json");
                   });
    port_ = server_.bind_to_any_port("127.0.0.1");
    // Bound: calls wait in the backlog until it listens.
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~StandInShareApi() {
    server_.stop();
    thread_.join();
  }
  StandInShareApi(const StandInShareApi&) = delete;
  StandInShareApi& operator=(const StandInShareApi&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // A new active share lease; its id.
  std::int64_t Grant() {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::int64_t id = ++next_id_;
    const std::int64_t now = std::time(nullptr);
    const std::string gpu = "GPU-5e1ec7ed-0000-4000-8000-00000000000" + std::to_string(id % 10);
    leases_[id] = {{"id", id},
                   {"state", "active"},
                   {"node", "host/L40S"},
                   {"devices", {gpu}},
                   {"granted_at", now},
                   {"expires_at", now + 3600},
                   {"env",
                    {{"CUDA_VISIBLE_DEVICES", gpu},
                     {"NVIDIA_VISIBLE_DEVICES", gpu},
                     {"GPUSLICE_LEASE", std::to_string(id)},
                     {"GPUSLICE_VRAM_LIMIT_MIB", "8192"},
                     {"GPUSLICE_COMPUTE_SHARE_MILLI", "250"},
                     {"GPUSLICE_SLICE", "lease-" + std::to_string(id)}}},
                   {"docker_args",
                    {"--gpus", "\"device=" + gpu + "\"", "-e", "GPUSLICE_COMPUTE_SHARE_MILLI=250",
                     "-e", "GPUSLICE_LEASE=" + std::to_string(id), "-e",
                     "GPUSLICE_SLICE=lease-" + std::to_string(id), "-e",
                     "GPUSLICE_VRAM_LIMIT_MIB=8192", "-e", "NVIDIA_VISIBLE_DEVICES=" + gpu}}};
    return id;
  }
  std::string State(std::int64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    return leases_.contains(id) ? leases_[id]["state"].get<std::string>() : "";
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::int64_t next_id_ = 0;
  std::map<std::int64_t, json> leases_;
};

class RunShareStandInTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpuslice::cli::testing::FreshDir(
        std::string("gpuslice_run_standin_") +
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    server_env_ = std::make_unique<ScopedEnv>("GPUSLICE_SERVER", api_.url());
    token_env_ = std::make_unique<ScopedEnv>("GPUSLICE_TOKEN", "gs_test");
    interposer_ = MakeInterposerFile(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    if (!HasFailure()) fs::remove_all(dir_, ignored);
  }

  StandInShareApi api_;
  std::string dir_;
  std::string interposer_;
  std::unique_ptr<ScopedEnv> server_env_;
  std::unique_ptr<ScopedEnv> token_env_;
};

TEST_F(RunShareStandInTest, AShareRunLoadsTheInterposerFirstAndPrintsIt) {
  const std::string file = dir_ + "/env";
  Outcome run =
      Shell("GPUSLICE_INTERPOSER='" + interposer_ + "' LD_PRELOAD=libm.so.6 '" + GPUSLICE_BINARY +
            "' run --share 250 --vram 8192 --purpose share -- sh -c 'echo "
            "\"$LD_PRELOAD|$GPUSLICE_SLICE|$GPUSLICE_COMPUTE_SHARE_MILLI\" > " +
            file + "' 2>&1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(FirstLine(ReadFile(file)), interposer_ + ":libm.so.6|lease-1|250");
  EXPECT_THAT(run.output, HasSubstr("gpuslice run: lease 1 on host/L40S"));
  EXPECT_THAT(run.output, HasSubstr("LD_PRELOAD=" + interposer_ + ":libm.so.6"));
  EXPECT_THAT(run.output, HasSubstr("released lease 1"));
  EXPECT_EQ(api_.State(1), "released");
}

// The build tree's interposer (build/shim/libgpuslice-cuda.so, next to the binary) is found
// without GPUSLICE_INTERPOSER, and a command that never touches CUDA runs under it.
TEST_F(RunShareStandInTest, TheBuildTreesInterposerIsFoundNextToTheBinary) {
  ScopedEnv unset("GPUSLICE_INTERPOSER", "");
  ScopedEnv shm("GPUSLICE_SHM_DIR", dir_ + "/shm");
  const std::string file = dir_ + "/env";
  Outcome run =
      Gpuslice("run --share 250 --purpose real -- sh -c 'echo \"$LD_PRELOAD|$GPUSLICE_SLICE\" > " +
               file + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(FirstLine(ReadFile(file)), std::string(GPUSLICE_INTERPOSER_PATH) + "|lease-1");
  EXPECT_THAT(run.output, HasSubstr(std::string("LD_PRELOAD=") + GPUSLICE_INTERPOSER_PATH));
}

TEST_F(RunShareStandInTest, WithoutTheInterposerAShareIsReleasedUnrunUnlessNoInterposer) {
  const std::string binary = BinaryWithoutInterposer(dir_);
  if (binary.empty()) GTEST_SKIP() << "an interposer is installed in /usr/lib/gpuslice";
  const std::string missing = dir_ + "/no/libgpuslice-cuda.so";
  const std::string ran = dir_ + "/ran";
  Outcome refused = Shell("GPUSLICE_INTERPOSER='" + missing + "' '" + binary +
                          "' run --share 250 --purpose refused -- touch " + ran + " 2>&1");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("lease 1 is a share of a GPU"));
  EXPECT_THAT(refused.output, HasSubstr(missing));  // named alone: the only place looked at
  EXPECT_THAT(refused.output, HasSubstr("would not be enforced"));
  EXPECT_THAT(refused.output, HasSubstr("--no-interposer"));
  EXPECT_FALSE(fs::exists(ran));
  EXPECT_EQ(api_.State(1), "released");

  Outcome anyway =
      Shell("GPUSLICE_INTERPOSER='" + missing + "' '" + binary +
            "' run --share 250 --purpose anyway --no-interposer -- touch " + ran + " 2>&1");
  EXPECT_EQ(anyway.exit_code, 0) << anyway.output;
  EXPECT_THAT(anyway.output, HasSubstr("NOT enforced"));
  EXPECT_THAT(anyway.output, Not(HasSubstr("LD_PRELOAD=")));
  EXPECT_TRUE(fs::exists(ran));
  EXPECT_EQ(api_.State(2), "released");
}

TEST_F(RunShareStandInTest, LeaseEnvOfAShareAddsThisMachinesInterposerWhenThere) {
  const std::string id = std::to_string(api_.Grant());
  {
    ScopedEnv interposer("GPUSLICE_INTERPOSER", interposer_);
    Outcome env = Gpuslice("lease env " + id, /*with_stderr=*/false);
    ASSERT_EQ(env.exit_code, 0) << env.output;
    EXPECT_THAT(env.output, HasSubstr("export GPUSLICE_SLICE='lease-" + id + "'\n"));
    EXPECT_THAT(env.output, HasSubstr("export GPUSLICE_COMPUTE_SHARE_MILLI='250'\n"));
    EXPECT_THAT(env.output, HasSubstr("# the CUDA interposer"));
    EXPECT_THAT(env.output, HasSubstr("export LD_PRELOAD='" + interposer_ + "'\n"));
    // A shell can evaluate it.
    Outcome evaluated = Shell(std::string("eval \"$('") + GPUSLICE_BINARY + "' lease env " + id +
                              ")\" && echo \"$LD_PRELOAD $GPUSLICE_SLICE\"");
    EXPECT_EQ(evaluated.exit_code, 0) << evaluated.output;
    EXPECT_EQ(FirstLine(evaluated.output), interposer_ + " lease-" + id);
    // --json is the service's environment, the same on every machine: no LD_PRELOAD.
    Outcome as_json = Gpuslice("lease env " + id + " --json", /*with_stderr=*/false);
    const json parsed = json::parse(as_json.output, nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << as_json.output;
    EXPECT_EQ(parsed["GPUSLICE_SLICE"], "lease-" + id);
    EXPECT_FALSE(parsed.contains("LD_PRELOAD"));
  }
  // No interposer on this machine: the rest, and a warning.
  const std::string binary = BinaryWithoutInterposer(dir_);
  if (binary.empty()) GTEST_SKIP() << "an interposer is installed in /usr/lib/gpuslice";
  Outcome elsewhere = Shell("GPUSLICE_INTERPOSER='" + dir_ + "/no/libgpuslice-cuda.so' '" + binary +
                            "' lease env " + id + " 2>&1");
  EXPECT_EQ(elsewhere.exit_code, 0) << elsewhere.output;
  EXPECT_THAT(elsewhere.output, HasSubstr("export GPUSLICE_SLICE='lease-" + id + "'\n"));
  EXPECT_THAT(elsewhere.output, Not(HasSubstr("export LD_PRELOAD")));
  EXPECT_THAT(elsewhere.output, HasSubstr("not enforced"));
}

// A container gets the share enforced: this machine's interposer mounted read-only and preloaded,
// and the host's slices' directory shared (so that its processes and every other process on the
// GPU take turns on one schedule, and the agent sees their accounting). Without the interposer the
// arguments are refused, as `run` refuses the command, unless --no-interposer.
TEST_F(RunShareStandInTest, DockerArgsOfAShareMountAndPreloadTheInterposer) {
  const std::string id = std::to_string(api_.Grant());
  const std::string shm = dir_ + "/shm";
  {
    ScopedEnv interposer("GPUSLICE_INTERPOSER", interposer_);
    ScopedEnv slices("GPUSLICE_SHM_DIR", shm);
    Outcome docker = Gpuslice("lease docker-args " + id, /*with_stderr=*/false);
    ASSERT_EQ(docker.exit_code, 0) << docker.output;
    EXPECT_THAT(docker.output, StartsWith("--gpus \"device=GPU-"));
    EXPECT_THAT(docker.output, HasSubstr("-e GPUSLICE_COMPUTE_SHARE_MILLI=250"));
    EXPECT_THAT(docker.output, HasSubstr("-e GPUSLICE_SLICE=lease-" + id));
    EXPECT_THAT(docker.output, HasSubstr("-v " + interposer_ +
                                         ":/usr/lib/gpuslice/libgpuslice-cuda.so:ro -e "
                                         "LD_PRELOAD=/usr/lib/gpuslice/libgpuslice-cuda.so"));
    EXPECT_THAT(
        docker.output,
        HasSubstr("-v " + shm + ":/dev/shm/gpuslice -e GPUSLICE_SHM_DIR=/dev/shm/gpuslice"));
    Outcome as_json = Gpuslice("lease docker-args " + id + " --json", /*with_stderr=*/false);
    const json parsed = json::parse(as_json.output, nullptr, false);
    ASSERT_TRUE(parsed.is_array()) << as_json.output;
    EXPECT_NE(std::find(parsed.begin(), parsed.end(),
                        json("LD_PRELOAD=/usr/lib/gpuslice/libgpuslice-cuda.so")),
              parsed.end())
        << as_json.output;
  }
  const std::string binary = BinaryWithoutInterposer(dir_);
  if (binary.empty()) GTEST_SKIP() << "an interposer is installed in /usr/lib/gpuslice";
  const std::string missing = dir_ + "/no/libgpuslice-cuda.so";
  Outcome refused = Shell("GPUSLICE_INTERPOSER='" + missing + "' '" + binary +
                          "' lease docker-args " + id + " 2>&1");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr(missing));
  EXPECT_THAT(refused.output, HasSubstr("would not be enforced in the container"));
  EXPECT_THAT(refused.output, Not(HasSubstr("--gpus")));
  Outcome anyway = Shell("GPUSLICE_INTERPOSER='" + missing + "' '" + binary +
                         "' lease docker-args " + id + " --no-interposer 2>&1");
  EXPECT_EQ(anyway.exit_code, 0) << anyway.output;
  EXPECT_THAT(anyway.output, HasSubstr("NOT enforced in the container"));
  EXPECT_THAT(anyway.output, HasSubstr("--gpus"));
  EXPECT_THAT(anyway.output, Not(HasSubstr("LD_PRELOAD")));
}

}  // namespace
