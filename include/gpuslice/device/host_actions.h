// gpuslice/device/host_actions.h
//
// What NvmlBackend does on the host outside NVML: reset a GPU (NVML has no public reset) and end
// a process. NvmlBackend takes them as an injected HostActions, so that what differs between the
// real driver and the test NVML library is chosen by whoever opens the backend:
//   * DefaultHostActions: production; `nvidia-smi --gpu-reset -i N` through util::Subprocess, and
//     SIGTERM then SIGKILL (SignalProcess);
//   * TestLibraryHostActions (test_library_actions.cc): the test NVML library's
//     gpusliceTestResetGpu / gpusliceTestTerminateProcess hooks; never a real signal;
//   * HostActionsFor(library): the one choice, the test library's when `library` exports
//     gpusliceTestResetGpu, else the default.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace gpuslice::device {

class HostActions {
 public:
  virtual ~HostActions() = default;
  // Resets GPU `gpu` (an NVML index the backend has checked exists).
  virtual absl::Status ResetGpu(int gpu) = 0;
  // Ends process `pid`, waiting up to `grace_seconds` after SIGTERM before SIGKILL where signals
  // are used.
  virtual absl::Status TerminateProcess(std::uint32_t pid, int grace_seconds) = 0;
};

// SIGTERM, up to `grace_seconds` of waiting, then SIGKILL (Backend::TerminateProcess's default).
absl::Status SignalProcess(std::uint32_t pid, int grace_seconds);

// Production: nvidia-smi for resets, signals for processes.
std::unique_ptr<HostActions> DefaultHostActions();

// The test NVML library's hooks, looked up in `library` (opened here, RTLD_NOW | RTLD_LOCAL);
// nullptr when `library` cannot be opened or does not export gpusliceTestResetGpu.
std::unique_ptr<HostActions> TestLibraryHostActions(const std::string& library);

// TestLibraryHostActions(library) when that is a test library, else DefaultHostActions().
// `library` as NvmlBackend::Load resolves it (empty: $GPUSLICE_NVML_LIBRARY, else
// libnvidia-ml.so.1).
std::unique_ptr<HostActions> HostActionsFor(std::string library = "");

}  // namespace gpuslice::device
