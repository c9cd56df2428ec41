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
#include "gpuslice/util/subprocess.h"

extern char** environ;

namespace gpuslice::agent {
namespace {

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

absl::Status RunCommand(const spec::HookCommand& command,
                        const std::vector<std::pair<std::string, std::string>>& extra,
                        const std::string& where) {
  const std::optional<std::string> path = ResolveCommand(command.command);
  if (!path) {
    return absl::NotFoundError(where + ": command '" + command.command + "' not found in PATH");
  }
  util::SubprocessOptions options;
  options.argv.push_back(command.command);
  options.argv.insert(options.argv.end(), command.args.begin(), command.args.end());
  options.executable = *path;
  options.environment = BuildEnvironment(command, extra);
  options.workdir = command.workdir;
  options.input = util::SubprocessOptions::Input::kDevNull;
  options.output = util::SubprocessOptions::Output::kStdoutToStderr;
  absl::StatusOr<util::Subprocess> child = util::Subprocess::Start(std::move(options));
  if (!child.ok()) {
    return absl::Status(child.status().code(),
                        where + ": " + std::string(child.status().message()));
  }
  absl::StatusOr<util::ExitStatus> done = child->Wait();
  if (!done.ok()) return absl::InternalError(where + ": " + std::string(done.status().message()));
  if (done->exited) {
    if (done->code == 0) return absl::OkStatus();
    return absl::AbortedError(where + ": exited with code " + std::to_string(done->code));
  }
  const char* name = ::sigabbrev_np(done->signal);
  return absl::AbortedError(where + ": killed by signal " + std::to_string(done->signal) +
                            (name != nullptr ? " (SIG" + std::string(name) + ")" : ""));
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
