// gpuslice/spec/hooks.h
//
// NVIDIA mig-parted's hooks file (api/hooks/v1), read and written unchanged:
//
//   version: v1
//   hooks:
//     apply-start:                 # also pre-apply-mode, pre-apply-config, apply-exit
//       - command: /bin/bash       # required
//         args: ["-c", "systemctl stop kubelet"]
//         envs: {NAME: value}      # added to the environment of the command
//         workdir: /etc/nvidia-mig-manager
//
// mig-parted runs apply-start first, pre-apply-mode before changing MIG mode, pre-apply-config
// before changing the MIG devices, and apply-exit at the end whatever happened. Running them is
// agent::RunHook (gpuslice/agent/hook_runner.h).
//
// Reading is strict: unknown hook names and unknown keys are errors (mig-parted ignores them), and
// every error (InvalidArgument) names the origin, the line and the field. Pure; thread-safe.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace gpuslice::spec {

// The hook names mig-parted runs, in the order of an apply.
inline constexpr std::array<std::string_view, 4> kHookNames = {"apply-start", "pre-apply-mode",
                                                               "pre-apply-config", "apply-exit"};

struct HookCommand {
  std::string command;            // a path, or a name looked up in PATH
  std::vector<std::string> args;  // without the command itself
  std::vector<std::string> envs;  // "KEY=VALUE", in file order (the file has a mapping)
  std::string workdir;            // empty = the caller's working directory
  friend bool operator==(const HookCommand&, const HookCommand&) = default;
};

struct HooksFile {
  // Hook name -> commands, in file order. A hook may have no commands.
  std::vector<std::pair<std::string, std::vector<HookCommand>>> hooks;
  friend bool operator==(const HooksFile&, const HooksFile&) = default;
};

// Parses YAML or JSON text. `origin` names the file in messages.
absl::StatusOr<HooksFile> ParseHooksFile(std::string_view text, std::string_view origin);

// Writes `hooks` in the same format (YAML); the result parses back to an equal HooksFile.
// REQUIRES: every env is "KEY=VALUE" with a non-empty KEY.
std::string WriteHooksFile(const HooksFile& hooks);

}  // namespace gpuslice::spec
