#include "gpuslice/agent/hook_runner.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

#include "gpuslice/util/shell.h"

extern char** environ;

namespace gpuslice::agent {
namespace {

std::string ErrnoText(int error) {
  char buffer[256];
  // GNU strerror_r: returns the message (maybe not in buffer).
  return strerror_r(error, buffer, sizeof buffer);
}

// "/bin/sh -c 'exit 3'" for messages.
std::string Describe(const spec::HookCommand& command) {
  auto quote = [](const std::string& word) {
    if (!word.empty() && word.find_first_of(" \t\n'\"\\$`;&|<>()*?") == std::string::npos) {
      return word;
    }
    return util::ShellQuote(word);
  };
  std::string text = quote(command.command);
  for (const std::string& arg : command.args) text += " " + quote(arg);
  return text;
}

// The environment of the child: ours, then the hook's envs, then `extra` (later values win).
std::vector<std::string> BuildEnvironment(
    const spec::HookCommand& command,
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  std::map<std::string, size_t, std::less<>> index_of;
  auto set = [&](std::string entry) {
    const std::string key = entry.substr(0, entry.find('='));
    auto it = index_of.find(key);
    if (it != index_of.end()) {
      env[it->second] = std::move(entry);
    } else {
      index_of.emplace(key, env.size());
      env.push_back(std::move(entry));
    }
  };
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) set(*entry);
  for (const std::string& entry : command.envs) set(entry);
  for (const auto& [key, value] : extra) set(key + "=" + value);
  return env;
}

bool IsExecutableFile(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

// The path to execute: `command` itself when it has a '/', else the first match in PATH.
std::optional<std::string> ResolveCommand(const std::string& command) {
  if (command.find('/') != std::string::npos) return command;
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  std::string cwd;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(begin, end - begin);
    if (dir.empty()) dir = ".";
    if (dir[0] != '/') {
      // Relative PATH entries mean the caller's directory, not the hook's workdir.
      if (cwd.empty()) {
        char buffer[4096];
        if (::getcwd(buffer, sizeof buffer) != nullptr) cwd = buffer;
      }
      dir = cwd + "/" + dir;
    }
    const std::string candidate = dir + "/" + command;
    if (IsExecutableFile(candidate)) return candidate;
    begin = end + 1;
  }
  return std::nullopt;
}

// What the child reports through the close-on-exec pipe when it cannot exec.
struct ChildFailure {
  int stage = 0;  // 1 = chdir, 2 = execve
  int error = 0;
};

absl::Status RunCommand(const spec::HookCommand& command,
                        const std::vector<std::pair<std::string, std::string>>& extra,
                        const std::string& where) {
  const std::optional<std::string> path = ResolveCommand(command.command);
  if (!path) {
    return absl::NotFoundError(where + ": command '" + command.command + "' not found in PATH");
  }
  // Everything the child needs is prepared before fork: it may only call async-signal-safe
  // functions.
  std::vector<std::string> args;
  args.push_back(command.command);
  args.insert(args.end(), command.args.begin(), command.args.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = BuildEnvironment(command, extra);
  std::vector<char*> envp;
  for (std::string& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);

  const int dev_null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (dev_null < 0) {
    return absl::InternalError(where + ": cannot open /dev/null: " + ErrnoText(errno));
  }
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    const int error = errno;
    ::close(dev_null);
    return absl::InternalError(where + ": pipe: " + ErrnoText(error));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(dev_null);
    ::close(report[0]);
    ::close(report[1]);
    return absl::InternalError(where + ": fork: " + ErrnoText(error));
  }
  if (pid == 0) {
    // Child.
    ChildFailure failure;
    ::signal(SIGPIPE, SIG_DFL);  // the gpuslice binary ignores it; a hook gets the usual default
    ::dup2(dev_null, STDIN_FILENO);
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
    if (!command.workdir.empty() && ::chdir(command.workdir.c_str()) != 0) {
      failure = {1, errno};
    } else {
      ::execve(path->c_str(), argv.data(), envp.data());
      failure = {2, errno};
    }
    [[maybe_unused]] const ssize_t written = ::write(report[1], &failure, sizeof failure);
    ::_exit(127);
  }
  ::close(dev_null);
  ::close(report[1]);
  ChildFailure failure;
  ssize_t got = 0;
  do {
    got = ::read(report[0], &failure, sizeof failure);
  } while (got < 0 && errno == EINTR);
  ::close(report[0]);

  int status = 0;
  pid_t waited = 0;
  do {
    waited = ::waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);
  if (waited < 0) return absl::InternalError(where + ": waitpid: " + ErrnoText(errno));

  if (got == static_cast<ssize_t>(sizeof failure)) {
    if (failure.stage == 1) {
      return absl::FailedPreconditionError(where + ": cannot change to workdir '" +
                                           command.workdir + "': " + ErrnoText(failure.error));
    }
    const std::string message = where + ": cannot run '" + *path + "': " + ErrnoText(failure.error);
    if (failure.error == ENOENT) return absl::NotFoundError(message);
    return absl::FailedPreconditionError(message);
  }
  if (WIFEXITED(status)) {
    if (WEXITSTATUS(status) == 0) return absl::OkStatus();
    return absl::AbortedError(where + ": exited with code " + std::to_string(WEXITSTATUS(status)));
  }
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    const char* name = ::sigabbrev_np(signal);
    return absl::AbortedError(where + ": killed by signal " + std::to_string(signal) +
                              (name != nullptr ? " (SIG" + std::string(name) + ")" : ""));
  }
  return absl::AbortedError(where + ": ended with wait status " + std::to_string(status));
}

}  // namespace

absl::Status RunHook(const spec::HooksFile& hooks, std::string_view name,
                     const std::vector<std::pair<std::string, std::string>>& extra_env) {
  for (const auto& [hook_name, commands] : hooks.hooks) {
    if (hook_name != name) continue;
    for (size_t i = 0; i < commands.size(); ++i) {
      const std::string where = "hook " + hook_name + ", command " + std::to_string(i + 1) +
                                " of " + std::to_string(commands.size()) + " (" +
                                Describe(commands[i]) + ")";
      if (absl::Status status = RunCommand(commands[i], extra_env, where); !status.ok()) {
        return status;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace gpuslice::agent
