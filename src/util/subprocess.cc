#include "gpuslice/util/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

extern char** environ;

namespace gpuslice::util {
namespace {

// What the child reports through the close-on-exec pipe when it cannot go on.
struct ChildFailure {
  int stage = 0;  // 1 = chdir, 2 = exec
  int error = 0;
};

std::string ErrnoText(int error) { return std::strerror(error); }

// The child's environment: `environment`, else the parent's with the changes applied.
std::vector<std::string> EnvironmentOf(const SubprocessOptions& o) {
  if (o.environment) return *o.environment;
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const size_t eq = text.find('=');
    if (eq != std::string::npos) env[text.substr(0, eq)] = text.substr(eq + 1);
  }
  for (const std::string& name : o.unset_env) env.erase(name);
  for (const auto& [name, value] : o.set_env) env[name] = value;
  std::vector<std::string> out;
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

ExitStatus ExitOf(int status) {
  ExitStatus out;
  if (WIFEXITED(status)) {
    out.exited = true;
    out.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    out.signal = WTERMSIG(status);
  }
  return out;
}

// In the child: only async-signal-safe calls from here.
[[noreturn]] void Child(const SubprocessOptions& o, int dev_null, int output_write, int report,
                        char* const* argv, char* const* envp, const char* program) {
  ChildFailure failure;
  ::signal(SIGPIPE, SIG_DFL);
  for (const auto& [sig, ignored] : o.child_signals) ::signal(sig, ignored ? SIG_IGN : SIG_DFL);
  if (dev_null >= 0) ::dup2(dev_null, STDIN_FILENO);
  if (o.output == SubprocessOptions::Output::kCapture) {
    ::dup2(output_write, STDOUT_FILENO);
    ::dup2(output_write, STDERR_FILENO);
  } else if (o.output == SubprocessOptions::Output::kStdoutToStderr) {
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
  }
  if (!o.workdir.empty() && ::chdir(o.workdir.c_str()) != 0) {
    failure = {1, errno};
  } else {
    if (std::strchr(program, '/') != nullptr) {
      ::execve(program, argv, envp);
    } else {
      ::execvpe(program, argv, envp);
    }
    failure = {2, errno};
  }
  [[maybe_unused]] const ssize_t written = ::write(report, &failure, sizeof failure);
  ::_exit(127);
}

}  // namespace

absl::StatusOr<Subprocess> Subprocess::Start(SubprocessOptions o) {
  if (o.argv.empty()) return absl::InvalidArgumentError("no program to run");
  std::vector<std::string> args = o.argv;
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = EnvironmentOf(o);
  std::vector<char*> envp;
  for (std::string& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const std::string program = o.executable.empty() ? o.argv[0] : o.executable;

  int fds[6] = {-1, -1, -1, -1, -1, -1};  // /dev/null, report pipe, output pipe
  auto close_all = [&] {
    for (int& fd : fds) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  };
  if (o.input == SubprocessOptions::Input::kDevNull &&
      (fds[0] = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
    return absl::InternalError("cannot open /dev/null: " + ErrnoText(errno));
  }
  if (::pipe2(&fds[1], O_CLOEXEC) != 0 ||
      (o.output == SubprocessOptions::Output::kCapture && ::pipe2(&fds[3], O_CLOEXEC) != 0)) {
    const int error = errno;
    close_all();
    return absl::InternalError("pipe: " + ErrnoText(error));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    close_all();
    return absl::InternalError("fork: " + ErrnoText(error));
  }
  if (pid == 0) Child(o, fds[0], fds[4], fds[2], argv.data(), envp.data(), program.c_str());
  const int output_read = fds[3];
  fds[3] = -1;
  ::close(fds[2]);
  fds[2] = -1;
  ChildFailure failure;
  ssize_t got = 0;
  do {
    got = ::read(fds[1], &failure, sizeof failure);
  } while (got < 0 && errno == EINTR);
  close_all();
  Subprocess child(pid, output_read);
  if (got != static_cast<ssize_t>(sizeof failure)) return child;
  (void)child.Wait();
  if (failure.stage == 1) {
    return absl::FailedPreconditionError("cannot change to workdir '" + o.workdir +
                                         "': " + ErrnoText(failure.error));
  }
  const std::string message = "cannot run '" + program + "': " + ErrnoText(failure.error);
  if (failure.error == ENOENT) return absl::NotFoundError(message);
  return absl::FailedPreconditionError(message);
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(other.pid_),
      output_fd_(other.output_fd_),
      reaped_(other.reaped_),
      output_(std::move(other.output_)) {
  other.pid_ = -1;
  other.output_fd_ = -1;
  other.reaped_ = true;
}

Subprocess::~Subprocess() {
  if (output_fd_ >= 0) ::close(output_fd_);
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void Subprocess::ReadOutput() {
  if (output_fd_ < 0) return;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(output_fd_, buffer, sizeof buffer);
    if (n > 0) {
      output_.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(output_fd_);
  output_fd_ = -1;
}

absl::StatusOr<ExitStatus> Subprocess::Wait() {
  if (reaped_) return absl::FailedPreconditionError("the child was already waited for");
  ReadOutput();
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError("waitpid: " + ErrnoText(errno));
  }
  reaped_ = true;
  return ExitOf(status);
}

absl::StatusOr<std::optional<ExitStatus>> Subprocess::Poll() {
  if (reaped_) return absl::FailedPreconditionError("the child was already waited for");
  int status = 0;
  const pid_t done = ::waitpid(pid_, &status, WNOHANG);
  if (done == 0 || (done < 0 && errno == EINTR)) return std::optional<ExitStatus>();
  if (done < 0) return absl::InternalError("waitpid: " + ErrnoText(errno));
  reaped_ = true;
  ReadOutput();
  return std::optional<ExitStatus>(ExitOf(status));
}

void Subprocess::Signal(int signal) const {
  if (pid_ > 0 && !reaped_) ::kill(pid_, signal);
}

}  // namespace gpuslice::util
