// gpuslice/agent/hook_runner.h
//
// Runs the commands of one hook of a mig-parted hooks file (gpuslice/spec/hooks.h), the way
// `nvidia-mig-parted apply --hooks-file` does.
//
// Each command runs as a child process (fork + execve) and is waited for, one after the other:
//   * the command is a path, or a name looked up in this process's PATH;
//   * its arguments are the command's args;
//   * its environment is this process's environment, then the hook's envs, then `extra_env`
//     (a later value replaces an earlier one; mig-parted gives its MIG_PARTED_* variables the last
//     word the same way);
//   * it runs in the hook's workdir when set (a relative command path is then relative to it);
//   * its standard output and standard error go to this process's standard error, so the caller's
//     standard output stays clean; its standard input is /dev/null.
//
// Thread-safety: safe to call from several threads (nothing global is changed; the child only calls
// async-signal-safe functions before execve).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gpuslice/spec/hooks.h"

namespace gpuslice::agent {

// Runs the commands of hook `name` in order and stops at the first failure. A hook name absent from
// the file (or one with no commands) runs nothing and is OK.
// Errors name the hook, the command (with its position) and what went wrong:
//   NotFound            the command does not exist (not in PATH, or no such file);
//   FailedPrecondition  it could not be started (not executable, workdir missing, ...);
//   Aborted             it exited with a non-zero code ("exited with code 3") or was killed by a
//                       signal ("killed by signal 9");
//   Internal            fork/pipe/wait failed.
absl::Status RunHook(const spec::HooksFile& hooks, std::string_view name,
                     const std::vector<std::pair<std::string, std::string>>& extra_env);

}  // namespace gpuslice::agent
