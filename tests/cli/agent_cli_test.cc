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
#include "nlohmann/json.hpp"

#ifndef GPUSLICE_BINARY
#error "GPUSLICE_BINARY must name the built gpuslice executable"
#endif

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Outcome = gpuslice::cli::testing::CommandResult;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace fs = std::filesystem;

Outcome Gpuslice(const std::string& args, bool with_stderr = true) {
  return gpuslice::cli::testing::RunGpuslice(args, with_stderr);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

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

int PickPort(int salt) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int port = 20000 + static_cast<int>((getpid() * 13 + salt * 211 + attempt * 877) % 30000);
    if (PortFree(port)) return port;
  }
  ADD_FAILURE() << "no free port";
  return 0;
}

// GET path on 127.0.0.1:port (with a bearer token when given); the whole answer or "".
std::string HttpGet(int port, const std::string& path, const std::string& token = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr = Loopback(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "";
  }
  timeval timeout{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (!token.empty()) request += "Authorization: Bearer " + token + "\r\n";
  request += "\r\n";
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

// The JSON body of GET path (null when there is none).
json GetJson(int port, const std::string& path, const std::string& token) {
  const std::string answer = HttpGet(port, path, token);
  const std::size_t body = answer.find("\r\n\r\n");
  if (body == std::string::npos) return json();
  json parsed = json::parse(answer.substr(body + 4), nullptr, false);
  return parsed.is_discarded() ? json() : parsed;
}

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

// `gpuslice ARGS` as a child process in its own process group, output in a log file; killed if
// the test leaves it running.
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { Kill(); }

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
    setpgid(pid_, pid_);
  }

  void Kill() {
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }

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

  int WaitExit(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    int code = -1;
    while (Clock::now() < deadline) {
      if (Exited(&code)) return code;
      SleepMs(50);
    }
    return -1;
  }

  int Terminate(std::chrono::seconds limit = std::chrono::seconds(5)) {
    if (pid_ <= 0) return exit_code_;
    kill(pid_, SIGTERM);
    return WaitExit(limit);
  }

  std::string Output() const { return ReadFile(log_); }

 private:
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

// Each test: its own `gpuslice serve` (simulated 1xA100-80GB in MIG mode) on a free port, a
// tenant team-a with its user ann (whose token the client commands use) and an agent user.
class AgentCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = (fs::path(::testing::TempDir()) /
            ("gpuslice_agent_cli_" + name + "_" + std::to_string(getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    static int salt = 70;
    port_ = PickPort(salt++);
    ASSERT_GT(port_, 0);
    url_ = "http://127.0.0.1:" + std::to_string(port_);
    server_.Start(
        {"serve", "--sim-fleet", "1xA100-80GB", "--listen", "127.0.0.1:" + std::to_string(port_),
         "--db", dir_ + "/g.db", "--admin-token-file", dir_ + "/t", "--tick", "1"},
        dir_ + "/serve.log");
    ASSERT_TRUE(server_.WaitHealthy(port_)) << server_.Output();
    admin_token_ = FirstLine(ReadFile(dir_ + "/t"));
    ASSERT_THAT(admin_token_, HasSubstr("gs_"));
    server_env_ = std::make_unique<ScopedEnv>("GPUSLICE_SERVER", url_);
    token_env_ = std::make_unique<ScopedEnv>("GPUSLICE_TOKEN", admin_token_);
    Outcome tenant = Gpuslice("admin tenant team-a");
    ASSERT_EQ(tenant.exit_code, 0) << tenant.output;
    Outcome user = Gpuslice("admin user ann --tenant team-a", /*with_stderr=*/false);
    ASSERT_EQ(user.exit_code, 0) << user.output;
    ann_token_ = FirstLine(user.output);
    ASSERT_THAT(ann_token_, HasSubstr("gs_"));
    Outcome agent = Gpuslice("admin user agent-remote1 --agent", /*with_stderr=*/false);
    ASSERT_EQ(agent.exit_code, 0) << agent.output;
    agent_token_ = FirstLine(agent.output);
    ASSERT_THAT(agent_token_, HasSubstr("gs_"));
    token_env_->Set(ann_token_);
  }

  void TearDown() override {
    agent_.Kill();
    EXPECT_EQ(server_.Terminate(std::chrono::seconds(5)), 0) << server_.Output();
    token_env_.reset();
    server_env_.reset();
    std::error_code ignored;
    if (!HasFailure()) fs::remove_all(dir_, ignored);
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

  json Json(const std::string& args) {
    Outcome out = Gpuslice(args + " --json", /*with_stderr=*/false);
    EXPECT_EQ(out.exit_code, 0) << args << ": " << out.output;
    json parsed = json::parse(out.output, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << args << ": " << out.output;
    return parsed.is_discarded() ? json() : parsed;
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

  std::string dir_;
  int port_ = 0;
  std::string url_;
  Child server_;
  Child agent_;
  std::string admin_token_;
  std::string ann_token_;
  std::string agent_token_;
  std::unique_ptr<ScopedEnv> server_env_;
  std::unique_ptr<ScopedEnv> token_env_;
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

TEST_F(AgentCliTest, OnceReportsAndExits0) {
  Child once;
  std::vector<std::string> args = AgentArgs(agent_token_);
  args.push_back("--once");
  once.Start(args, dir_ + "/once.log");
  ASSERT_EQ(once.WaitExit(std::chrono::seconds(15)), 0) << once.Output();
  const json nodes = GetJson(port_, "/v1/nodes", admin_token_);
  ASSERT_TRUE(nodes.is_object()) << nodes.dump();
  ASSERT_EQ(nodes["nodes"].size(), 1u) << nodes.dump();
  EXPECT_EQ(nodes["nodes"][0]["host"], "remote1");
  EXPECT_EQ(nodes["nodes"][0]["gpus"].size(), 2u);
  // The service answered with the machine's placement node, which the agent logs.
  EXPECT_THAT(once.Output(), HasSubstr("reported 2 GPUs of remote1"));
  EXPECT_THAT(once.Output(), HasSubstr("remote1/H100-80GB-mig"));
}

TEST_F(AgentCliTest, ATenantTokenIsRefusedWithExit3) {
  Child agent;
  agent.Start(AgentArgs(ann_token_), dir_ + "/tenant-agent.log");
  ASSERT_EQ(agent.WaitExit(std::chrono::seconds(10)), 3) << agent.Output();
  const std::string output = agent.Output();
  EXPECT_THAT(output, HasSubstr("agent")) << output;
  EXPECT_THAT(output, HasSubstr("403")) << output;
  const json nodes = GetJson(port_, "/v1/nodes", admin_token_);
  EXPECT_TRUE(nodes["nodes"].empty()) << nodes.dump();
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
