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
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace fs = std::filesystem;

Outcome Gpuslice(const std::string& args, bool with_stderr = true) {
  return gpuslice::cli::testing::RunGpuslice(args, with_stderr);
}

// Runs `command` with /bin/sh; its stdout and exit code.
Outcome Shell(const std::string& command) {
  Outcome result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed: " << command;
    return result;
  }
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Polls `done` every 100 ms until it holds (true) or `limit` passes (false).
bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (done()) return true;
    SleepMs(100);
  }
  return done();
}

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// True when nothing listens on 127.0.0.1:port and it can be bound.
bool PortFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = Loopback(port);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

// A port picked from the test's pid, clear of other tests running at the same time.
int PickPort(int salt) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int port = 20000 + static_cast<int>((getpid() * 7 + salt * 131 + attempt * 977) % 30000);
    if (PortFree(port)) return port;
  }
  ADD_FAILURE() << "no free port";
  return 0;
}

// GET path on 127.0.0.1:port over a raw socket; the whole answer, or "" when nothing answers.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr = Loopback(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "";
  }
  timeval timeout{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  const std::string request =
      "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string answer;
  char buffer[4096];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    answer.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return answer;
}

// Sets an environment variable for the scope; restores the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name); old != nullptr) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void Set(const std::string& value) { setenv(name_, value.c_str(), 1); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// `gpuslice ARGS` as a child process in its own process group, with its output in a log file;
// the group is killed if the test leaves it running.
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }

  void Start(const std::vector<std::string>& args, const std::string& log) {
    log_ = log;
    std::vector<std::string> argv = {GPUSLICE_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> pointers;
    for (std::string& arg : argv) pointers.push_back(arg.data());
    pointers.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      std::FILE* out = std::freopen(log.c_str(), "w", stdout);
      if (out == nullptr) _exit(126);
      dup2(fileno(stdout), fileno(stderr));
      execv(pointers[0], pointers.data());
      _exit(127);
    }
    ASSERT_GT(pid_, 0) << "fork failed";
    setpgid(pid_, pid_);  // also from here, so that the group exists before any kill(-pid)
  }

  pid_t pid() const { return pid_; }
  bool Running() { return !Exited(nullptr); }
  void Signal(int signal) {
    if (pid_ > 0) kill(pid_, signal);
  }

  // Polls GET /v1/health until it answers 200 (true), the process exits or `limit` passes.
  bool WaitHealthy(int port, std::chrono::seconds limit = std::chrono::seconds(10)) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (Exited(nullptr)) return false;
      const std::string answer = HttpGet(port, "/v1/health");
      if (answer.rfind("HTTP/1.1 200", 0) == 0 && answer.find("\"ok\"") != std::string::npos) {
        return true;
      }
      SleepMs(100);
    }
    return false;
  }

  // Waits up to `limit` for the child to exit; its exit code, or -1 (killed by a signal, or still
  // running).
  int WaitExit(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    int code = -1;
    while (Clock::now() < deadline) {
      if (Exited(&code)) return code;
      SleepMs(50);
    }
    return -1;
  }

  // SIGTERM, then waits up to `limit`; the exit code or -1.
  int Terminate(std::chrono::seconds limit = std::chrono::seconds(5)) {
    if (pid_ <= 0) return exit_code_;
    kill(pid_, SIGTERM);
    return WaitExit(limit);
  }

  std::string Output() const { return ReadFile(log_); }

 private:
  // True (and the exit code, -1 for a signal) once the child has exited; reaps it.
  bool Exited(int* code) {
    if (pid_ <= 0) {
      if (code != nullptr) *code = exit_code_;
      return true;
    }
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done != pid_) return false;
    pid_ = -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code != nullptr) *code = exit_code_;
    return true;
  }

  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string log_;
};

// Each test: its own `gpuslice serve` (simulated 2xA100-80GB, expiry sweeps every second) on a
// free port, a tenant team-a and its user ann, whose token the client commands use.
class RunCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = (fs::path(::testing::TempDir()) /
            ("gpuslice_run_cli_" + name + "_" + std::to_string(getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    static int salt = 40;
    port_ = PickPort(salt++);
    ASSERT_GT(port_, 0);
    server_.Start(
        {"serve", "--sim-fleet", "2xA100-80GB", "--listen", "127.0.0.1:" + std::to_string(port_),
         "--db", dir_ + "/g.db", "--admin-token-file", dir_ + "/t", "--tick", "1"},
        dir_ + "/serve.log");
    ASSERT_TRUE(server_.WaitHealthy(port_)) << server_.Output();
    admin_token_ = FirstLine(ReadFile(dir_ + "/t"));
    ASSERT_THAT(admin_token_, HasSubstr("gs_"));
    server_env_ =
        std::make_unique<ScopedEnv>("GPUSLICE_SERVER", "http://127.0.0.1:" + std::to_string(port_));
    token_env_ = std::make_unique<ScopedEnv>("GPUSLICE_TOKEN", admin_token_);
    Outcome tenant = Gpuslice("admin tenant team-a");
    ASSERT_EQ(tenant.exit_code, 0) << tenant.output;
    Outcome user = Gpuslice("admin user ann --tenant team-a", /*with_stderr=*/false);
    ASSERT_EQ(user.exit_code, 0) << user.output;
    ann_token_ = FirstLine(user.output);
    ASSERT_THAT(ann_token_, HasSubstr("gs_"));
    token_env_->Set(ann_token_);
  }

  void TearDown() override {
    EXPECT_EQ(server_.Terminate(std::chrono::seconds(5)), 0) << server_.Output();
    token_env_.reset();
    server_env_.reset();
    std::error_code ignored;
    if (!HasFailure()) fs::remove_all(dir_, ignored);
  }

  // `gpuslice ARGS --json` (stdout only) parsed; a null json when it fails.
  json Json(const std::string& args) {
    Outcome out = Gpuslice(args + " --json", /*with_stderr=*/false);
    EXPECT_EQ(out.exit_code, 0) << args << ": " << out.output;
    json parsed = json::parse(out.output, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << args << ": " << out.output;
    return parsed.is_discarded() ? json() : parsed;
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

  std::string dir_;
  int port_ = 0;
  Child server_;
  std::string admin_token_;
  std::string ann_token_;
  std::unique_ptr<ScopedEnv> server_env_;
  std::unique_ptr<ScopedEnv> token_env_;
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
  Child run;
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
  Child run;
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
  Child run;
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
  Child run;
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
