// Test helpers for the interposer's tests: running tests/shim/cuda_probe against the test CUDA
// library (build/fake_cuda/libcuda.so.1), with or without libgpuslice-cuda.so preloaded, in child
// processes with an explicit environment, and a temporary directory per test.
//
// Paths come from compile definitions: GPUSLICE_CUDA_PROBE (the probe), GPUSLICE_FAKE_CUDA_DIR
// (the directory of the test libcuda.so.1) and GPUSLICE_INTERPOSER (libgpuslice-cuda.so).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "temp_dir.h"

extern char** environ;

namespace gpuslice::shim::testing {

using ::gpuslice::TempDir;

inline constexpr std::uint64_t kMiB = 1ULL << 20;

inline std::uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// What a finished child left.
struct Outcome {
  int exit_code = -1;  // -1 when killed by a signal or timed out
  int signal = 0;
  bool timed_out = false;
  std::string out;
  std::string err;

  // The JSON object the probe printed (its first stdout line); a null json when there is none.
  nlohmann::json Json() const {
    const std::string line = out.substr(0, out.find('\n'));
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
    return parsed.is_discarded() ? nlohmann::json() : parsed;
  }
  std::string Describe() const {
    return "exit " + std::to_string(exit_code) + " signal " + std::to_string(signal) +
           (timed_out ? " (timed out)" : "") + "\nstdout: " + out + "\nstderr: " + err;
  }
};

// A child process with its stdout and stderr on pipes.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
    int out[2];
    int err[2];
    if (pipe2(out, O_CLOEXEC) != 0) return;
    if (pipe2(err, O_CLOEXEC) != 0) {
      close(out[0]);
      close(out[1]);
      return;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    std::vector<std::string> env_strings;
    for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
    std::vector<char*> envp;
    for (std::string& entry : env_strings) envp.push_back(entry.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = argv;
    std::vector<char*> argp;
    for (std::string& arg : args) argp.push_back(arg.data());
    argp.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    close(err[1]);
    if (rc != 0) {
      close(out[0]);
      close(err[0]);
      spawn_error_ = std::strerror(rc);
      return;
    }
    pid_ = pid;
    out_fd_ = out[0];
    err_fd_ = err[0];
  }

  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool started() const { return pid_ > 0; }
  const std::string& spawn_error() const { return spawn_error_; }
  pid_t pid() const { return pid_; }

  // The first line of stdout, waiting up to `timeout_ms`; "" when none came (EOF or timeout).
  std::string ReadLine(int timeout_ms) {
    const std::uint64_t deadline = MonotonicNs() + static_cast<std::uint64_t>(timeout_ms) * 1000000;
    for (;;) {
      const std::size_t newline = outcome_.out.find('\n');
      if (newline != std::string::npos) return outcome_.out.substr(0, newline);
      const std::uint64_t now = MonotonicNs();
      if (now >= deadline || (out_fd_ < 0 && err_fd_ < 0)) return "";
      Pump(static_cast<int>((deadline - now) / 1000000) + 1);
    }
  }

  // Reads everything until both pipes close, then reaps the child. Past `timeout_ms` the child
  // is killed and the outcome says timed_out.
  Outcome Wait(int timeout_ms) {
    const std::uint64_t deadline = MonotonicNs() + static_cast<std::uint64_t>(timeout_ms) * 1000000;
    while (out_fd_ >= 0 || err_fd_ >= 0) {
      const std::uint64_t now = MonotonicNs();
      if (now >= deadline) {
        outcome_.timed_out = true;
        kill(pid_, SIGKILL);
        deadline_passed_ = true;
        break;
      }
      Pump(static_cast<int>((deadline - now) / 1000000) + 1);
    }
    if (deadline_passed_) {
      // Drain what is left without blocking forever.
      while ((out_fd_ >= 0 || err_fd_ >= 0) && Pump(1000)) {
      }
    }
    if (pid_ > 0) {
      int status = 0;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
      if (WIFEXITED(status)) outcome_.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) outcome_.signal = WTERMSIG(status);
    }
    return outcome_;
  }

 private:
  // One poll round; false when nothing happened within `timeout_ms`.
  bool Pump(int timeout_ms) {
    pollfd fds[2];
    nfds_t n = 0;
    if (out_fd_ >= 0) fds[n++] = pollfd{out_fd_, POLLIN, 0};
    if (err_fd_ >= 0) fds[n++] = pollfd{err_fd_, POLLIN, 0};
    if (n == 0) return false;
    const int ready = poll(fds, n, timeout_ms);
    if (ready <= 0) return false;
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      int& fd = fds[i].fd == out_fd_ ? out_fd_ : err_fd_;
      std::string& sink = fds[i].fd == out_fd_ ? outcome_.out : outcome_.err;
      char buffer[4096];
      const ssize_t got = read(fd, buffer, sizeof buffer);
      if (got > 0) {
        sink.append(buffer, static_cast<std::size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fd);
        fd = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool deadline_passed_ = false;
  std::string spawn_error_;
  Outcome outcome_;
};

// The environment of a probe run: the test CUDA library on LD_LIBRARY_PATH, the interposer in
// LD_PRELOAD unless `interposer` is false, the sanitizers' options of this process (with
// verify_asan_link_order=0: a preloaded library comes before libasan), and the given settings.
inline std::map<std::string, std::string> ProbeEnv(
    bool interposer, const std::map<std::string, std::string>& settings) {
  std::map<std::string, std::string> env;
  env["LD_LIBRARY_PATH"] = GPUSLICE_FAKE_CUDA_DIR;
  if (interposer) env["LD_PRELOAD"] = GPUSLICE_INTERPOSER;
  std::string asan = "verify_asan_link_order=0";
  if (const char* parent = std::getenv("ASAN_OPTIONS"); parent != nullptr && *parent) {
    asan = std::string(parent) + ":" + asan;
  }
  env["ASAN_OPTIONS"] = asan;
  for (const char* name : {"UBSAN_OPTIONS", "LSAN_OPTIONS", "TMPDIR"}) {
    if (const char* value = std::getenv(name); value != nullptr) env[name] = value;
  }
  for (const auto& [key, value] : settings) env[key] = value;
  return env;
}

// Starts the probe with `args` (after argv[0]).
inline std::unique_ptr<Child> StartProbe(const std::vector<std::string>& args,
                                         const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv{GPUSLICE_CUDA_PROBE};
  argv.insert(argv.end(), args.begin(), args.end());
  return std::make_unique<Child>(argv, env);
}

// Runs the probe to the end (at most `timeout_ms`).
inline Outcome RunProbe(const std::vector<std::string>& args,
                        const std::map<std::string, std::string>& env, int timeout_ms = 60000) {
  std::unique_ptr<Child> child = StartProbe(args, env);
  if (!child->started()) {
    Outcome failed;
    failed.err = "spawn failed: " + child->spawn_error();
    return failed;
  }
  return child->Wait(timeout_ms);
}

// An unsigned field of a probe's JSON, or `fallback` (with a test failure) when it is missing.
inline long long Field(const nlohmann::json& json, const char* key, long long fallback = -999) {
  if (!json.is_object() || !json.contains(key) || !json[key].is_number()) {
    ADD_FAILURE() << "no number \"" << key << "\" in " << json.dump();
    return fallback;
  }
  return json[key].get<long long>();
}

}  // namespace gpuslice::shim::testing
