// gpuslice/util/subprocess.h — running another program: the one fork/exec of gpuslice (hooks,
// `run`, `measure`, nvidia-smi for a GPU reset).
//
// Start() prepares everything before fork, so the child calls only async-signal-safe functions:
// stdin/stdout redirection, SIGPIPE back to its default (gpuslice ignores it; programs expect
// the default), the working directory, then exec. The program is `executable` when given (a
// path, no PATH lookup), else argv[0], looked up in the parent's PATH when it has no '/'. The
// environment is `environment` when given ("NAME=value" each), else the parent's with `set_env`
// and `unset_env` applied. A child that cannot change directory or exec reports why through a
// close-on-exec pipe and exits 127; Start() then fails: NotFound (no such program),
// FailedPrecondition (any other exec or chdir error, the message saying which), Internal (pipe
// or fork failed). Not thread-safe per object; a Subprocess not waited for is reaped by its
// destructor (after SIGKILL).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpuslice::util {

struct SubprocessOptions {
  std::vector<std::string> argv;  // REQUIRES: not empty
  std::string executable;         // "" = argv[0]
  std::optional<std::vector<std::string>> environment;
  std::vector<std::pair<std::string, std::string>> set_env;
  std::vector<std::string> unset_env;
  std::string workdir;  // "" = the parent's
  // Dispositions set in the child before exec: (signal, ignored): SIG_IGN when ignored, else
  // SIG_DFL (a parent that catches a signal gives it back as it was before).
  std::vector<std::pair<int, bool>> child_signals;
  enum class Input { kInherit, kDevNull } input = Input::kInherit;
  // kInherit: the parent's stdout and stderr; kStdoutToStderr: both to the parent's stderr;
  // kCapture: both into output() (read until the child closes them, in Wait()).
  enum class Output { kInherit, kStdoutToStderr, kCapture } output = Output::kInherit;
};

struct ExitStatus {
  bool exited = false;  // false: killed by `signal`
  int code = 0;
  int signal = 0;
  // What a shell reports: the exit code, or 128 + the signal.
  int ShellCode() const { return exited ? code : 128 + signal; }
};

class Subprocess {
 public:
  static absl::StatusOr<Subprocess> Start(SubprocessOptions options);
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&&) = delete;
  Subprocess(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // Waits for the child (EINTR retried), reading captured output first.
  absl::StatusOr<ExitStatus> Wait();
  // Without blocking: the exit status once the child has ended, else nullopt.
  absl::StatusOr<std::optional<ExitStatus>> Poll();
  // Sends `signal` to the child while it runs.
  void Signal(int signal) const;
  const std::string& output() const { return output_; }

 private:
  Subprocess(pid_t pid, int output_fd) : pid_(pid), output_fd_(output_fd) {}
  void ReadOutput();

  pid_t pid_ = -1;
  int output_fd_ = -1;  // kCapture: the read end
  bool reaped_ = false;
  std::string output_;
};

}  // namespace gpuslice::util
