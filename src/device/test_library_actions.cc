// TestLibraryHostActions and HostActionsFor: the test NVML library's reset and terminate hooks
// (src/device/fake_nvml), chosen by whoever opens NvmlBackend. Only this unit knows of them.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "gpuslice/device/host_actions.h"
#include "gpuslice/device/nvml_backend.h"
#include "gpuslice/device/nvml_codes.h"
#include "nvml_api.h"

namespace gpuslice::device {
namespace {

class TestLibraryActions : public HostActions {
 public:
  TestLibraryActions(std::string library, void* handle, nvml::gpusliceTestResetGpu_fn reset,
                     nvml::gpusliceTestTerminateProcess_fn terminate)
      : library_(std::move(library)), handle_(handle), reset_(reset), terminate_(terminate) {}
  ~TestLibraryActions() override { ::dlclose(handle_); }
  TestLibraryActions(const TestLibraryActions&) = delete;
  TestLibraryActions& operator=(const TestLibraryActions&) = delete;

  absl::Status ResetGpu(int gpu) override {
    const int code = reset_(static_cast<unsigned>(gpu));
    if (code != kNvmlSuccess) {
      return NvmlError(code, "gpusliceTestResetGpu (GPU " + std::to_string(gpu) + ")");
    }
    return absl::OkStatus();
  }

  absl::Status TerminateProcess(std::uint32_t pid, int) override {
    if (terminate_ == nullptr) {
      // The test library without its terminate hook: its pids are simulated, never signal them.
      return absl::FailedPreconditionError(
          "refusing to signal pid " + std::to_string(pid) + ": " + library_ +
          " is the test NVML library and does not export " + nvml::kTestTerminateProcessSymbol);
    }
    const int code = terminate_(pid);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "gpusliceTestTerminateProcess (pid " + std::to_string(pid) + ")");
    }
    return absl::OkStatus();
  }

 private:
  std::string library_;
  void* handle_;
  nvml::gpusliceTestResetGpu_fn reset_;
  nvml::gpusliceTestTerminateProcess_fn terminate_;
};

}  // namespace

std::unique_ptr<HostActions> TestLibraryHostActions(const std::string& library) {
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return nullptr;
  void* reset = ::dlsym(handle, nvml::kTestResetGpuSymbol);
  if (reset == nullptr) {
    ::dlclose(handle);
    return nullptr;
  }
  nvml::gpusliceTestResetGpu_fn reset_fn = nullptr;
  std::memcpy(&reset_fn, &reset, sizeof reset);
  nvml::gpusliceTestTerminateProcess_fn terminate_fn = nullptr;
  if (void* terminate = ::dlsym(handle, nvml::kTestTerminateProcessSymbol); terminate != nullptr) {
    std::memcpy(&terminate_fn, &terminate, sizeof terminate);
  }
  return std::make_unique<TestLibraryActions>(library, handle, reset_fn, terminate_fn);
}

std::unique_ptr<HostActions> HostActionsFor(std::string library) {
  if (library.empty()) {
    const char* env = std::getenv(NvmlBackend::kLibraryEnv);
    library = env != nullptr && *env != '\0' ? env : NvmlBackend::kDefaultLibrary;
  }
  if (std::unique_ptr<HostActions> test = TestLibraryHostActions(library)) return test;
  return DefaultHostActions();
}

}  // namespace gpuslice::device
