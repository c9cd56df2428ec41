// Test helpers shared by the black-box CLI tests that run `gpuslice serve` (serve_cli_test,
// run_cli_test, agent_cli_test, serve_crash_test):
//   * ReadFile, FirstLine, Tail, SleepMs, WaitUntil (polling until a condition holds);
//   * loopback ports: Loopback, PortFree, PickPort (from the pid and a salt), FreeLoopbackPort
//     (the kernel's pick);
//   * HttpGet / GetJson: small raw-socket GET requests to 127.0.0.1, with an optional bearer token;
//   * ScopedEnv: an environment variable set for a scope;
//   * FreshDir: a fresh scratch directory under the test temp dir; ServeArgs: the usual arguments
//     of `gpuslice serve` on a simulated fleet;
//   * GpusliceProcess: `gpuslice ARGS` as a child process (own process group, optional working
//     directory, output in a log file) with WaitHealthy (polls /v1/health), WaitExit, Terminate
//     (SIGTERM) and Kill (SIGKILL);
//   * ServeFixture: a gtest fixture base that starts `gpuslice serve` in a scratch dir, reads the
//     admin token, points GPUSLICE_SERVER/GPUSLICE_TOKEN at it and creates tenants/users through
//     the CLI, and stops the server at the end.
// Needs GPUSLICE_BINARY (the built gpuslice executable) and nlohmann_json.
#pragma once

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/run_gpuslice.h"
#include "nlohmann/json.hpp"

namespace gpuslice::cli::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

// The last `bytes` of `text` (all of it when shorter).
inline std::string Tail(const std::string& text, size_t bytes = 3000) {
  return text.size() <= bytes ? text : "..." + text.substr(text.size() - bytes);
}

inline void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Polls `done` every 100 ms until it holds (true) or `limit` passes (false).
inline bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    SleepMs(100);
  }
  return done();
}

inline sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// True when nothing listens on 127.0.0.1:port and it can be bound.
inline bool PortFree(int port) {
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
inline int PickPort(int salt) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int port = 20000 + static_cast<int>((getpid() * 7 + salt * 131 + attempt * 977) % 30000);
    if (PortFree(port)) return port;
  }
  ADD_FAILURE() << "no free port";
  return 0;
}

// A port nothing listens on now: the kernel's pick for an ephemeral bind on 127.0.0.1.
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr = Loopback(0);
  socklen_t length = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// GET path on 127.0.0.1:port over a raw socket (with a bearer token when given); the whole
// answer, or "" when nothing answers.
inline std::string HttpGet(int port, const std::string& path, const std::string& token = "") {
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
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
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

// The JSON body of an HTTP answer (null when there is none).
inline nlohmann::json BodyJson(const std::string& answer) {
  const std::size_t body = answer.find("\r\n\r\n");
  if (body == std::string::npos) return nlohmann::json();
  nlohmann::json parsed = nlohmann::json::parse(answer.substr(body + 4), nullptr, false);
  return parsed.is_discarded() ? nlohmann::json() : parsed;
}

// The JSON body of GET path (null when there is none).
inline nlohmann::json GetJson(int port, const std::string& path, const std::string& token) {
  return BodyJson(HttpGet(port, path, token));
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

// A fresh (emptied) directory TempDir()/NAME_PID.
inline std::string FreshDir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / (name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// `gpuslice serve` on a simulated `fleet` at 127.0.0.1:port, its store dir/g.db and admin token
// file dir/t, expiry sweeps every second.
inline std::vector<std::string> ServeArgs(const std::string& fleet, const std::string& dir,
                                          int port) {
  return {"serve", "--sim-fleet", fleet, "--listen", "127.0.0.1:" + std::to_string(port), "--db",
          dir + "/g.db", "--admin-token-file", dir + "/t", "--tick", "1",
          // Plain HTTP on loopback, so the tests can speak raw HTTP; TLS, serve's default, has
          // tests of its own (serve_cli_test.cc, tests/api/tls_test.cc).
          "--insecure"};
}

// `gpuslice ARGS` as a child process in its own process group (in `cwd` when given), its output
// in a log file; the group is killed when the test leaves it running, and the child when the
// test process dies.
class GpusliceProcess {
 public:
  GpusliceProcess() = default;
  GpusliceProcess(const GpusliceProcess&) = delete;
  GpusliceProcess& operator=(const GpusliceProcess&) = delete;
  ~GpusliceProcess() { Kill(); }

  void Start(const std::vector<std::string>& args, const std::string& log,
             const std::string& cwd = "") {
    log_ = log;
    std::vector<std::string> argv = {GPUSLICE_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> pointers;
    for (std::string& arg : argv) pointers.push_back(arg.data());
    pointers.push_back(nullptr);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(125);
      if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(124);
      std::FILE* out = std::freopen(log.c_str(), "w", stdout);
      if (out == nullptr) _exit(126);
      dup2(fileno(stdout), fileno(stderr));
      signal(SIGPIPE, SIG_DFL);  // as from a shell
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

  // kill -9 of the group, and reaps it.
  void Kill() {
    if (pid_ <= 0) return;
    kill(-pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  // Polls GET /v1/health until it answers 200 with "ok" (true; its body in *health when given),
  // the process exits or `limit` passes.
  bool WaitHealthy(int port, nlohmann::json* health,
                   std::chrono::seconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Exited(nullptr)) return false;
      const std::string answer = HttpGet(port, "/v1/health");
      if (answer.rfind("HTTP/1.1 200", 0) == 0 && answer.find("\"ok\"") != std::string::npos) {
        if (health != nullptr) *health = BodyJson(answer);
        return true;
      }
      SleepMs(100);
    }
    return false;
  }
  bool WaitHealthy(int port, std::chrono::seconds limit = std::chrono::seconds(10)) {
    return WaitHealthy(port, nullptr, limit);
  }

  // Waits up to `limit` for the child to exit on its own; its exit code, or -1 (killed by a
  // signal, or still running).
  int WaitExit(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    int code = -1;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Exited(&code)) return code;
      SleepMs(20);
    }
    return -1;
  }

  // SIGTERM, then waits up to `limit`; the exit code, or -1 when it did not exit normally in time
  // (then it is killed).
  int Terminate(std::chrono::seconds limit = std::chrono::seconds(5)) {
    if (pid_ <= 0) return exit_code_;
    kill(pid_, SIGTERM);
    const int code = WaitExit(limit);
    Kill();
    return code;
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

// A fixture base: StartServer runs its own `gpuslice serve` for the test and points the client
// commands at it with the admin token; AddUser / AddTeamA create users and tenants through the
// CLI; TearDown stops the server (it must exit 0) and removes the directory unless the test failed.
class ServeFixture : public ::testing::Test {
 protected:
  // `gpuslice serve` on a simulated `fleet`, in the fresh dir PREFIX<test name>_<pid>, on the
  // port PickPort(salt); waits for /v1/health and reads the admin token.
  void StartServer(const std::string& prefix, const std::string& fleet, int salt) {
    dir_ = FreshDir(prefix + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    port_ = PickPort(salt);
    ASSERT_GT(port_, 0);
    url_ = "http://127.0.0.1:" + std::to_string(port_);
    server_.Start(ServeArgs(fleet, dir_, port_), dir_ + "/serve.log");
    ASSERT_TRUE(server_.WaitHealthy(port_)) << server_.Output();
    admin_token_ = FirstLine(ReadFile(dir_ + "/t"));
    ASSERT_THAT(admin_token_, ::testing::HasSubstr("gs_"));
    server_env_ = std::make_unique<ScopedEnv>("GPUSLICE_SERVER", url_);
    token_env_ = std::make_unique<ScopedEnv>("GPUSLICE_TOKEN", admin_token_);
  }

  // `gpuslice admin user ARGS` (with the current token); the new user's token in *token.
  void AddUser(const std::string& args, std::string* token) {
    CommandResult user = RunGpuslice("admin user " + args, /*with_stderr=*/false);
    ASSERT_EQ(user.exit_code, 0) << user.output;
    *token = FirstLine(user.output);
    ASSERT_THAT(*token, ::testing::HasSubstr("gs_"));
  }

  // The tenant team-a and its user ann (token in ann_token_).
  void AddTeamA() {
    CommandResult tenant = RunGpuslice("admin tenant team-a");
    ASSERT_EQ(tenant.exit_code, 0) << tenant.output;
    AddUser("ann --tenant team-a", &ann_token_);
  }

  void TearDown() override {
    EXPECT_EQ(server_.Terminate(std::chrono::seconds(5)), 0) << server_.Output();
    token_env_.reset();
    server_env_.reset();
    std::error_code ignored;
    if (!HasFailure()) std::filesystem::remove_all(dir_, ignored);
  }

  // `gpuslice ARGS --json` (stdout only) parsed; a null json when it fails.
  nlohmann::json Json(const std::string& args) {
    CommandResult out = RunGpuslice(args + " --json", /*with_stderr=*/false);
    EXPECT_EQ(out.exit_code, 0) << args << ": " << out.output;
    nlohmann::json parsed = nlohmann::json::parse(out.output, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << args << ": " << out.output;
    return parsed.is_discarded() ? nlohmann::json() : parsed;
  }

  std::string dir_;
  int port_ = 0;
  std::string url_;
  std::string admin_token_;
  std::string ann_token_;
  GpusliceProcess server_;
  std::unique_ptr<ScopedEnv> server_env_;
  std::unique_ptr<ScopedEnv> token_env_;
};

}  // namespace gpuslice::cli::testing
