#include "gpuslice/device/nvml_backend.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/util/process_scan.h"
#include "nvml_api.h"
#include "nvml_internal.h"

namespace gpuslice::device {

using namespace nvml_internal;  // NOLINT(google-build-using-namespace): the helpers of this class

namespace {

// Daemons that open GPUs and block a reset, by the prefix of /proc/PID/comm (which the kernel
// truncates to 15 characters), with the name reported.
const std::vector<util::ProcessPattern>& HolderPatterns() {
  static const std::vector<util::ProcessPattern> patterns = {
      {"nvidia-persiste", "nvidia-persistenced"},
      {"nv-hostengine", "nv-hostengine (DCGM)"},
      {"dcgm", "dcgm"},
      {"nvsm", "nvsm"},
      {"nv-fabricmanage", "nv-fabricmanager"},
  };
  return patterns;
}

// Identity, memory and MIG mode of GPU info->index.
absl::Status ReadGpuInfo(const Api& api, const hw::Catalog& catalog, GpuInfo* info) {
  const int gpu = info->index;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  char name[nvml::kDeviceNameBufferSize] = {};
  int code = api.nvmlDeviceGetName(*device, name, sizeof name);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceGetName (" + GpuText(gpu) + ")");
  info->name = FromBuffer(name, sizeof name);
  absl::StatusOr<std::string> uuid = DeviceUuid(api, *device, GpuText(gpu));
  if (!uuid.ok()) return uuid.status();
  info->uuid = *std::move(uuid);
  nvml::nvmlPciInfo_t pci{};
  code = api.nvmlDeviceGetPciInfo_v3(*device, &pci);
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlDeviceGetPciInfo_v3 (" + GpuText(gpu) + ")");
  }
  info->pci_device_id = static_cast<std::uint16_t>(pci.pciDeviceId >> 16);
  info->pci_bus_id = FromBuffer(pci.busId, sizeof pci.busId);

  if (info->pci_device_id != 0) {
    char pci_text[16];
    std::snprintf(pci_text, sizeof pci_text, "0x%04X", static_cast<unsigned>(info->pci_device_id));
    info->model = catalog.Find(pci_text);
  }
  if (info->model == nullptr) info->model = catalog.Find(info->name);

  nvml::nvmlMemory_t memory{};
  code = api.nvmlDeviceGetMemoryInfo(*device, &memory);
  if (code == kNvmlSuccess) {
    info->memory_total_mib = ToMib(memory.total);
  } else if (code == kNvmlNoPermission || code == kNvmlNotSupported) {
    // In MIG mode the parent's totals need privileges; fall back to the catalog.
    info->memory_total_mib = info->model != nullptr ? info->model->memory_mib : 0;
  } else {
    return NvmlError(code, "nvmlDeviceGetMemoryInfo (" + GpuText(gpu) + ")");
  }

  unsigned current = 0;
  unsigned pending = 0;
  code = api.nvmlDeviceGetMigMode(*device, &current, &pending);
  if (code == kNvmlSuccess) {
    info->mig_capable = true;
    info->mig_current = current == nvml::kMigEnable ? MigMode::kEnabled : MigMode::kDisabled;
    info->mig_pending = pending == nvml::kMigEnable ? MigMode::kEnabled : MigMode::kDisabled;
  } else if (code != kNvmlNotSupported) {
    return NvmlError(code, "nvmlDeviceGetMigMode (" + GpuText(gpu) + ")");
  }
  return absl::OkStatus();
}

}  // namespace

NvmlBackend::NvmlBackend(const hw::Catalog& catalog, std::string library, void* handle,
                         std::unique_ptr<nvml::Api> api, std::unique_ptr<HostActions> actions)
    : catalog_(catalog),
      library_(std::move(library)),
      handle_(handle),
      api_(std::move(api)),
      actions_(std::move(actions)) {}

NvmlBackend::~NvmlBackend() {
  if (initialized_) {
    // What this backend holds in the library goes before NVML does.
    if (api_->nvmlGpmSampleFree != nullptr) {
      for (const auto& [device, kept] : gpm_samples_) api_->nvmlGpmSampleFree(kept.sample);
    }
    if (event_set_ != nullptr && api_->nvmlEventSetFree != nullptr) {
      api_->nvmlEventSetFree(event_set_);
    }
    api_->nvmlShutdown();
  }
  if (handle_ != nullptr) ::dlclose(handle_);
}

bool NvmlBackend::LibraryLoadable(std::string library) {
  if (library.empty()) {
    const char* env = std::getenv(kLibraryEnv);
    library = env != nullptr && *env != '\0' ? env : kDefaultLibrary;
  }
  void* handle = ::dlopen(library.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) return false;
  ::dlclose(handle);
  return true;
}

absl::StatusOr<std::unique_ptr<NvmlBackend>> NvmlBackend::Load(
    const hw::Catalog& catalog, std::string library, std::unique_ptr<HostActions> actions) {
  if (library.empty()) {
    const char* env = std::getenv(kLibraryEnv);
    library = env != nullptr && *env != '\0' ? env : kDefaultLibrary;
  }
  ::dlerror();
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* detail = ::dlerror();
    return absl::UnavailableError(
        "NVIDIA driver library " + library +
        " not found: no NVIDIA driver on this machine? Use --sim STATE_FILE for a simulated fleet "
        "(gpuslice sim create)" +
        (detail != nullptr ? std::string(" [dlopen: ") + detail + "]" : std::string()));
  }
  auto api = std::make_unique<nvml::Api>();
  const char* missing = nullptr;
#define GPUSLICE_NVML_RESOLVE(ret, name, params)          \
  if (missing == nullptr) {                               \
    void* symbol = ::dlsym(handle, #name);                \
    if (symbol == nullptr) {                              \
      missing = #name;                                    \
    } else {                                              \
      static_assert(sizeof(symbol) == sizeof(api->name)); \
      std::memcpy(&api->name, &symbol, sizeof symbol);    \
    }                                                     \
  }
  GPUSLICE_NVML_FUNCTIONS(GPUSLICE_NVML_RESOLVE)
#undef GPUSLICE_NVML_RESOLVE
  if (missing != nullptr) {
    ::dlclose(handle);
    return NvmlError(kNvmlFunctionNotFound, std::string("NVML function ") + missing +
                                                " not found in " + library +
                                                " (NVIDIA driver too old?)");
  }
  if (void* profile_info_v = ::dlsym(handle, nvml::kGpuInstanceProfileInfoVSymbol);
      profile_info_v != nullptr) {
    std::memcpy(&api->nvmlDeviceGetGpuInstanceProfileInfoV, &profile_info_v, sizeof profile_info_v);
  }
#define GPUSLICE_NVML_RESOLVE_OPTIONAL(ret, name, params)         \
  if (void* symbol = ::dlsym(handle, #name); symbol != nullptr) { \
    static_assert(sizeof(symbol) == sizeof(api->name));           \
    std::memcpy(&api->name, &symbol, sizeof symbol);              \
  }
  GPUSLICE_NVML_HEALTH_FUNCTIONS(GPUSLICE_NVML_RESOLVE_OPTIONAL)
#undef GPUSLICE_NVML_RESOLVE_OPTIONAL
  const int code = api->nvmlInit_v2();
  if (code != kNvmlSuccess) {
    ::dlclose(handle);
    return NvmlError(code, "nvmlInit_v2 (initialising NVML from " + library + ")");
  }
  if (actions == nullptr) actions = HostActionsFor(library);
  std::unique_ptr<NvmlBackend> backend(
      new NvmlBackend(catalog, library, handle, std::move(api), std::move(actions)));
  backend->initialized_ = true;
  absl::StatusOr<std::string> version = backend->DriverVersion();
  backend->driver_version_ = version.ok() ? *version : "unknown";
  return backend;
}

void NvmlBackend::SetHostRoots(std::string proc_root, std::string sys_module_root) {
  proc_root_ = std::move(proc_root);
  sys_module_root_ = std::move(sys_module_root);
}

std::string NvmlBackend::Describe() const { return "NVML (driver " + driver_version_ + ")"; }

absl::StatusOr<std::string> NvmlBackend::DriverVersion() {
  char buffer[nvml::kSystemDriverVersionBufferSize] = {};
  const int code = api_->nvmlSystemGetDriverVersion(buffer, sizeof buffer);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlSystemGetDriverVersion");
  return FromBuffer(buffer, sizeof buffer);
}

absl::StatusOr<std::vector<GpuInfo>> NvmlBackend::ListGpus() {
  const Api& api = *api_;
  unsigned count = 0;
  const int code = api.nvmlDeviceGetCount_v2(&count);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceGetCount_v2");
  std::vector<GpuInfo> gpus;
  for (unsigned index = 0; index < count; ++index) {
    GpuInfo info;
    info.index = I(index);
    // A GPU that fell off the bus is listed with what could be read before the driver said so;
    // the other GPUs stay visible, and every call on it fails with GPU_IS_LOST.
    absl::Status status = ReadGpuInfo(api, catalog_, &info);
    if (!status.ok() && !HasNvmlCode(status, kNvmlGpuIsLost)) return status;
    gpus.push_back(std::move(info));
  }
  return gpus;
}

absl::Status NvmlBackend::ResetGpu(int gpu) {
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(*api_, gpu);
  if (!device.ok()) return device.status();
  return actions_->ResetGpu(gpu);
}

absl::Status NvmlBackend::TerminateProcess(std::uint32_t pid, int grace_seconds) {
  return actions_->TerminateProcess(pid, grace_seconds);
}

absl::StatusOr<std::vector<ProcessInfo>> NvmlBackend::ListProcesses(int gpu) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  std::vector<nvml::nvmlProcessInfo_t> infos;
  unsigned count = 0;
  int code = kNvmlInsufficientSize;
  for (int attempt = 0; attempt < 8 && code == kNvmlInsufficientSize; ++attempt) {
    count = static_cast<unsigned>(infos.size());
    code = api.nvmlDeviceGetComputeRunningProcesses_v3(*device, &count,
                                                       infos.empty() ? nullptr : infos.data());
    if (code == kNvmlInsufficientSize) infos.resize(count + 8U);  // processes may start meanwhile
  }
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlDeviceGetComputeRunningProcesses_v3 (" + GpuText(gpu) + ")");
  }
  infos.resize(std::min<size_t>(count, infos.size()));
  std::vector<ProcessInfo> out;
  for (const nvml::nvmlProcessInfo_t& info : infos) {
    ProcessInfo process;
    process.pid = info.pid;
    process.used_memory_mib = ToMib(info.usedGpuMemory);
    process.gi = info.gpuInstanceId == nvml::kInvalidInstanceId ? -1 : I(info.gpuInstanceId);
    process.ci =
        info.computeInstanceId == nvml::kInvalidInstanceId ? -1 : I(info.computeInstanceId);
    char name[nvml::kProcessNameBufferSize] = {};
    code = api.nvmlSystemGetProcessName(info.pid, name, sizeof name);
    if (code == kNvmlSuccess) {
      process.name = FromBuffer(name, sizeof name);
    } else if (code != kNvmlNotFound && code != kNvmlNoPermission) {  // exited, or not ours to see
      return NvmlError(code, "nvmlSystemGetProcessName (pid " + std::to_string(info.pid) + ")");
    }
    out.push_back(std::move(process));
  }
  return out;
}

absl::StatusOr<MemoryInfo> NvmlBackend::GetMemory(int gpu, std::optional<int> gi,
                                                  std::optional<int> ci) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  nvmlDevice_t target = *device;
  std::string what = GpuText(gpu);
  if (gi) {
    absl::StatusOr<std::vector<MigDevice>> migs = MigDevices(api, *device, gpu);
    if (!migs.ok()) return migs.status();
    target = nullptr;
    for (const MigDevice& mig : *migs) {
      if (mig.gi == *gi && (!ci || mig.ci == *ci)) {
        target = mig.handle;
        break;
      }
    }
    what = ci ? "CI " + Str(*ci) + " of " + GiText(gpu, *gi) : GiText(gpu, *gi);
    if (target == nullptr) {
      // No MIG device: the GI (or the CI) does not exist, or the GI has no CI yet, in which case
      // nothing can run in it and its memory is all free.
      absl::StatusOr<nvmlGpuInstance_t> instance = GiHandle(api, *device, gpu, *gi);
      if (!instance.ok()) return instance.status();
      if (ci) return NvmlError(kNvmlNotFound, "MIG device of " + what);
      absl::StatusOr<GpuInstanceInfo> info = GiInfo(api, *instance, gpu, what);
      if (!info.ok()) return info.status();
      absl::StatusOr<nvmlGpuInstanceProfileInfo_t> profile =
          GiProfileById(api, *device, gpu, info->profile_id);
      if (!profile.ok()) return profile.status();
      MemoryInfo memory;
      memory.total_mib = static_cast<std::int64_t>(profile->memorySizeMB);
      memory.free_mib = memory.total_mib;
      return memory;
    }
  }
  nvml::nvmlMemory_t memory{};
  const int code = api.nvmlDeviceGetMemoryInfo(target, &memory);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceGetMemoryInfo (" + what + ")");
  MemoryInfo out;
  out.total_mib = ToMib(memory.total);
  out.used_mib = ToMib(memory.used);
  out.free_mib = ToMib(memory.free);
  return out;
}

absl::StatusOr<std::vector<std::string>> NvmlBackend::ListGpuHolders(int gpu) {
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(*api_, gpu);
  if (!device.ok()) return device.status();
  // NVML cannot tell which clients hold a GPU; these daemons and the display driver are the usual
  // ones (mig-facts §4.4). They hold every GPU of the machine.
  std::vector<std::string> out;
  for (const util::FoundProcess& process : util::FindProcesses(proc_root_, HolderPatterns())) {
    out.push_back(process.name + " (pid " + std::to_string(process.pid) + ")");
  }
  struct stat info {};
  if (::stat((sys_module_root_ + "/nvidia_drm").c_str(), &info) == 0) {
    out.push_back("nvidia_drm module loaded");
  }
  return out;
}

}  // namespace gpuslice::device
