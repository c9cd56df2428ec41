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

namespace gpuslice::device {
namespace {

using nvml::Api;
using nvml::nvmlComputeInstance_t;
using nvml::nvmlComputeInstanceInfo_t;
using nvml::nvmlComputeInstancePlacement_t;
using nvml::nvmlComputeInstanceProfileInfo_t;
using nvml::nvmlDevice_t;
using nvml::nvmlGpuInstance_t;
using nvml::nvmlGpuInstanceInfo_t;
using nvml::nvmlGpuInstancePlacement_t;
using nvml::nvmlGpuInstanceProfileInfo_t;

constexpr std::int64_t kMiB = 1024 * 1024;

std::string Str(int value) { return std::to_string(value); }
std::string Str(unsigned value) { return std::to_string(value); }

std::string GpuText(int gpu) { return "GPU " + Str(gpu); }
std::string GiText(int gpu, int gi) { return "GI " + Str(gi) + " on GPU " + Str(gpu); }

// Converts a caller's int to the unsigned NVML takes (negative values become large and are
// rejected by the driver like any other out-of-range id).
unsigned U(int value) { return static_cast<unsigned>(value); }
int I(unsigned value) { return static_cast<int>(value); }

std::string FromBuffer(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

std::int64_t ToMib(unsigned long long bytes) {
  if (bytes == nvml::kValueNotAvailable) return 0;
  return static_cast<std::int64_t>(bytes / static_cast<unsigned long long>(kMiB));
}

absl::StatusOr<nvmlDevice_t> DeviceHandle(const Api& api, int gpu) {
  nvmlDevice_t device = nullptr;
  const int code = api.nvmlDeviceGetHandleByIndex_v2(U(gpu), &device);
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlDeviceGetHandleByIndex_v2 (" + GpuText(gpu) + ")");
  }
  return device;
}

absl::StatusOr<nvmlGpuInstance_t> GiHandle(const Api& api, nvmlDevice_t device, int gpu, int gi) {
  nvmlGpuInstance_t instance = nullptr;
  const int code = api.nvmlDeviceGetGpuInstanceById(device, U(gi), &instance);
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlDeviceGetGpuInstanceById (" + GiText(gpu, gi) + ")");
  }
  return instance;
}

absl::StatusOr<std::string> DeviceUuid(const Api& api, nvmlDevice_t device,
                                       const std::string& what) {
  char buffer[nvml::kDeviceUuidBufferSize] = {};
  const int code = api.nvmlDeviceGetUUID(device, buffer, sizeof buffer);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceGetUUID (" + what + ")");
  return FromBuffer(buffer, sizeof buffer);
}

absl::StatusOr<GpuInstanceInfo> GiInfo(const Api& api, nvmlGpuInstance_t instance, int gpu,
                                       const std::string& what) {
  nvmlGpuInstanceInfo_t info{};
  const int code = api.nvmlGpuInstanceGetInfo(instance, &info);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlGpuInstanceGetInfo (" + what + ")");
  return GpuInstanceInfo{gpu, I(info.id), I(info.profileId), I(info.placement.start),
                         I(info.placement.size)};
}

absl::StatusOr<ComputeInstanceInfo> CiInfo(const Api& api, nvmlComputeInstance_t instance, int gpu,
                                           int gi, const std::string& what) {
  nvmlComputeInstanceInfo_t info{};
  const int code = api.nvmlComputeInstanceGetInfo_v2(instance, &info);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlComputeInstanceGetInfo_v2 (" + what + ")");
  ComputeInstanceInfo out;
  out.gpu = gpu;
  out.gi = gi;
  out.id = I(info.id);
  out.profile_id = I(info.profileId);
  out.start = I(info.placement.start);
  out.size = I(info.placement.size);
  return out;
}

// One MIG device (a GI + CI pair) of a GPU.
struct MigDevice {
  nvmlDevice_t handle = nullptr;
  int gi = 0;
  int ci = 0;
};

// The MIG devices of a GPU, from its sparse MIG device index space (NOT_FOUND slots skipped).
absl::StatusOr<std::vector<MigDevice>> MigDevices(const Api& api, nvmlDevice_t device, int gpu) {
  unsigned max_count = 0;
  int code = api.nvmlDeviceGetMaxMigDeviceCount(device, &max_count);
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlDeviceGetMaxMigDeviceCount (" + GpuText(gpu) + ")");
  }
  std::vector<MigDevice> out;
  for (unsigned index = 0; index < max_count; ++index) {
    MigDevice mig;
    code = api.nvmlDeviceGetMigDeviceHandleByIndex(device, index, &mig.handle);
    if (code == kNvmlNotFound) continue;
    const std::string what = "MIG device " + Str(index) + " of " + GpuText(gpu);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceGetMigDeviceHandleByIndex (" + what + ")");
    }
    unsigned gi = 0;
    unsigned ci = 0;
    code = api.nvmlDeviceGetGpuInstanceId(mig.handle, &gi);
    if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceGetGpuInstanceId (" + what + ")");
    code = api.nvmlDeviceGetComputeInstanceId(mig.handle, &ci);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceGetComputeInstanceId (" + what + ")");
    }
    mig.gi = I(gi);
    mig.ci = I(ci);
    out.push_back(mig);
  }
  return out;
}

// MIG UUIDs of the CIs of GI `gi`, by CI id.
absl::StatusOr<std::map<int, std::string>> CiUuids(const Api& api, nvmlDevice_t device, int gpu,
                                                   int gi) {
  absl::StatusOr<std::vector<MigDevice>> migs = MigDevices(api, device, gpu);
  if (!migs.ok()) return migs.status();
  std::map<int, std::string> out;
  for (const MigDevice& mig : *migs) {
    if (mig.gi != gi) continue;
    absl::StatusOr<std::string> uuid =
        DeviceUuid(api, mig.handle,
                   "MIG device GI " + Str(mig.gi) + " CI " + Str(mig.ci) + " of " + GpuText(gpu));
    if (!uuid.ok()) return uuid.status();
    out[mig.ci] = *std::move(uuid);
  }
  return out;
}

// Info of the GI profile whose nvidia-smi id is `profile_id`, found by sweeping the NVML constants.
absl::StatusOr<nvmlGpuInstanceProfileInfo_t> GiProfileById(const Api& api, nvmlDevice_t device,
                                                           int gpu, int profile_id) {
  for (unsigned constant = 0; constant < nvml::kGpuInstanceProfileCount; ++constant) {
    nvmlGpuInstanceProfileInfo_t info{};
    const int code = api.nvmlDeviceGetGpuInstanceProfileInfo(device, constant, &info);
    if (code == kNvmlNotSupported) continue;
    if (code == kNvmlInvalidArgument) break;
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceGetGpuInstanceProfileInfo (" + GpuText(gpu) +
                                 ", constant " + Str(constant) + ")");
    }
    if (I(info.id) == profile_id) return info;
  }
  return NvmlError(kNvmlNotFound,
                   "GPU instance profile " + Str(profile_id) + " on " + GpuText(gpu));
}

// The media suffix of the profiles an NVML_GPU_INSTANCE_PROFILE_* constant selects (the v1 struct
// has no name to read it from).
std::string ConstantSuffix(unsigned constant) {
  switch (constant) {
    case 0x07:  // 1_SLICE_REV1
    case 0x08:  // 2_SLICE_REV1
      return "+me";
    case 0x0A:  // 1_SLICE_GFX
    case 0x0B:  // 2_SLICE_GFX
    case 0x0C:  // 4_SLICE_GFX
    case 0x11:  // 3_SLICE_GFX
      return "+gfx";
    case 0x0D:  // 1_SLICE_NO_ME
    case 0x0E:  // 2_SLICE_NO_ME
      return "-me";
    case 0x0F:  // 1_SLICE_ALL_ME
    case 0x10:  // 2_SLICE_ALL_ME
      return "+me.all";
    default:
      return "";
  }
}

// The name of a profile the driver did not name: "<slices>g.<GB>gb" + the constant's suffix, with
// go-nvlib's rounding (mig-facts §5.3): GB = round(ceil(8 * memory / total) / 8 * ceil(total GiB)),
// which gives the marketing sizes (A100-40GB 7g: 40192 MiB -> "40gb", not 39).
std::string DerivedProfileName(int slices, std::int64_t memory_mib, std::int64_t total_mib,
                               unsigned constant) {
  std::int64_t gb = 0;
  if (total_mib > 0) {
    const std::int64_t eighths = (8 * memory_mib + total_mib - 1) / total_mib;
    const std::int64_t total_gib = (total_mib + 1023) / 1024;
    gb = (eighths * total_gib + 4) / 8;  // round half up
  } else {
    gb = (memory_mib + 512) / 1024;
  }
  return Str(slices) + "g." + std::to_string(gb) + "gb" + ConstantSuffix(constant);
}

// The profile name without NVML's "MIG " prefix.
std::string StripMigPrefix(std::string name) {
  constexpr std::string_view kPrefix = "MIG ";
  if (name.starts_with(kPrefix)) name.erase(0, kPrefix.size());
  return name;
}

template <typename Info>
GpuInstanceProfileInfo ProfileFrom(const Info& info, unsigned constant) {
  GpuInstanceProfileInfo out;
  out.nvml_const = I(constant);
  out.id = I(info.id);
  out.slices = I(info.sliceCount);
  out.instance_count = I(info.instanceCount);
  out.sms = I(info.multiprocessorCount);
  out.memory_mib = static_cast<std::int64_t>(info.memorySizeMB);
  out.copy_engines = I(info.copyEngineCount);
  out.decoders = I(info.decoderCount);
  out.encoders = I(info.encoderCount);
  out.jpegs = I(info.jpegCount);
  out.ofas = I(info.ofaCount);
  return out;
}

// Reads the profile of one NVML constant with the newest struct version the driver takes, starting
// at `*version` (3, 2 or 1) and lowering it for the next calls when the driver refuses a version
// (ARGUMENT_VERSION_MISMATCH) or lacks the V function (absent, or FUNCTION_NOT_FOUND). Returns the
// NVML code of the last call.
int QueryProfile(const Api& api, nvmlDevice_t device, unsigned constant, int* version,
                 GpuInstanceProfileInfo* out) {
  for (;;) {
    if (*version >= 2 && api.nvmlDeviceGetGpuInstanceProfileInfoV == nullptr) *version = 1;
    int code = kNvmlSuccess;
    if (*version == 3) {
      nvml::nvmlGpuInstanceProfileInfo_v3_t info{};
      info.version = nvml::kGpuInstanceProfileInfoV3;
      code = api.nvmlDeviceGetGpuInstanceProfileInfoV(
          device, constant, reinterpret_cast<nvml::nvmlGpuInstanceProfileInfo_v2_t*>(&info));
      if (code == kNvmlSuccess) {
        *out = ProfileFrom(info, constant);
        out->name = StripMigPrefix(FromBuffer(info.name, sizeof info.name));
      }
    } else if (*version == 2) {
      nvml::nvmlGpuInstanceProfileInfo_v2_t info{};
      info.version = nvml::kGpuInstanceProfileInfoV2;
      code = api.nvmlDeviceGetGpuInstanceProfileInfoV(device, constant, &info);
      if (code == kNvmlSuccess) {
        *out = ProfileFrom(info, constant);
        out->name = StripMigPrefix(FromBuffer(info.name, sizeof info.name));
      }
    } else {
      nvmlGpuInstanceProfileInfo_t info{};
      code = api.nvmlDeviceGetGpuInstanceProfileInfo(device, constant, &info);
      if (code == kNvmlSuccess) *out = ProfileFrom(info, constant);
      return code;
    }
    if (code == kNvmlArgumentVersionMismatch) {
      --*version;
    } else if (code == kNvmlFunctionNotFound) {
      *version = 1;
    } else {
      return code;
    }
  }
}

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

// Calls an optional NVML function; FUNCTION_NOT_FOUND when the library lacks it.
template <typename Fn, typename... Args>
int CallOptional(Fn fn, Args... args) {
  return fn == nullptr ? static_cast<int>(kNvmlFunctionNotFound) : fn(args...);
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

absl::StatusOr<std::vector<GpuInstanceProfileInfo>> NvmlBackend::ListGpuInstanceProfiles(int gpu) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  const std::string what = "listing GPU instance profiles of " + GpuText(gpu);
  unsigned current = 0;
  unsigned pending = 0;
  int code = api.nvmlDeviceGetMigMode(*device, &current, &pending);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceGetMigMode (" + what + ")");
  if (current != nvml::kMigEnable) {
    return NvmlError(kNvmlNotSupported,
                     what + ": MIG mode is disabled (the driver lists profiles only with MIG on)");
  }
  std::vector<GpuInstanceProfileInfo> out;
  int version = 3;
  for (unsigned constant = 0; constant < nvml::kGpuInstanceProfileCount; ++constant) {
    GpuInstanceProfileInfo info;
    code = QueryProfile(api, *device, constant, &version, &info);
    // NOT_SUPPORTED: the GPU has no such profile; INVALID_ARGUMENT: the driver does not know the
    // constant (older than the constant).
    if (code == kNvmlNotSupported || code == kNvmlInvalidArgument) continue;
    if (code != kNvmlSuccess) {
      return NvmlError(code, std::string(version >= 2 ? "nvmlDeviceGetGpuInstanceProfileInfoV"
                                                      : "nvmlDeviceGetGpuInstanceProfileInfo") +
                                 " (" + GpuText(gpu) + ", constant " + Str(constant) + ")");
    }
    out.push_back(std::move(info));
  }
  // Names from the v1 struct (or empty ones) are derived from slices and memory, relative to the
  // GPU's memory: the driver's total, else the largest profile's (the full-GPU one).
  std::int64_t total_mib = 0;
  for (const GpuInstanceProfileInfo& info : out) total_mib = std::max(total_mib, info.memory_mib);
  bool need_total = false;
  for (const GpuInstanceProfileInfo& info : out) need_total = need_total || info.name.empty();
  if (need_total) {
    nvml::nvmlMemory_t memory{};
    if (api.nvmlDeviceGetMemoryInfo(*device, &memory) == kNvmlSuccess && memory.total > 0) {
      total_mib = ToMib(memory.total);
    }
  }
  for (GpuInstanceProfileInfo& info : out) {
    if (!info.name.empty()) continue;
    info.name = DerivedProfileName(info.slices, info.memory_mib, total_mib, U(info.nvml_const));
    info.name_derived = true;
  }
  return out;
}

absl::StatusOr<std::vector<GpuInstanceInfo>> NvmlBackend::ListGpuInstances(int gpu) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  const std::string what = "listing GPU instances of " + GpuText(gpu);
  unsigned current = 0;
  unsigned pending = 0;
  int code = api.nvmlDeviceGetMigMode(*device, &current, &pending);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceGetMigMode (" + what + ")");
  if (current != nvml::kMigEnable) {
    return NvmlError(kNvmlNotSupported, what + ": MIG mode is disabled");
  }

  std::vector<GpuInstanceInfo> out;
  std::set<unsigned> seen;
  for (unsigned constant = 0; constant < nvml::kGpuInstanceProfileCount; ++constant) {
    nvmlGpuInstanceProfileInfo_t profile{};
    code = api.nvmlDeviceGetGpuInstanceProfileInfo(*device, constant, &profile);
    if (code == kNvmlNotSupported) continue;  // this GPU has no such profile
    if (code == kNvmlInvalidArgument) break;  // past the driver's last constant
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceGetGpuInstanceProfileInfo (" + GpuText(gpu) +
                                 ", constant " + Str(constant) + ")");
    }
    if (!seen.insert(profile.id).second || profile.instanceCount == 0) continue;
    std::vector<nvmlGpuInstance_t> handles(profile.instanceCount);
    unsigned count = 0;
    code = api.nvmlDeviceGetGpuInstances(*device, profile.id, handles.data(), &count);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceGetGpuInstances (" + GpuText(gpu) + ", profile " +
                                 Str(profile.id) + ")");
    }
    count = std::min<unsigned>(count, profile.instanceCount);
    for (unsigned i = 0; i < count; ++i) {
      absl::StatusOr<GpuInstanceInfo> info =
          GiInfo(api, handles[i], gpu, GpuText(gpu) + ", profile " + Str(profile.id));
      if (!info.ok()) return info.status();
      out.push_back(*info);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const GpuInstanceInfo& a, const GpuInstanceInfo& b) { return a.id < b.id; });
  return out;
}

absl::StatusOr<std::vector<ComputeInstanceInfo>> NvmlBackend::ListComputeInstances(int gpu,
                                                                                   int gi) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  absl::StatusOr<nvmlGpuInstance_t> instance = GiHandle(api, *device, gpu, gi);
  if (!instance.ok()) return instance.status();

  std::vector<ComputeInstanceInfo> out;
  std::set<unsigned> seen;
  for (unsigned constant = 0; constant < nvml::kComputeInstanceProfileCount; ++constant) {
    nvmlComputeInstanceProfileInfo_t profile{};
    int code = api.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        *instance, constant, nvml::kComputeInstanceEngineProfileShared, &profile);
    if (code == kNvmlNotSupported) continue;
    if (code == kNvmlInvalidArgument) break;
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlGpuInstanceGetComputeInstanceProfileInfo (" + GiText(gpu, gi) +
                                 ", constant " + Str(constant) + ")");
    }
    if (!seen.insert(profile.id).second || profile.instanceCount == 0) continue;
    std::vector<nvmlComputeInstance_t> handles(profile.instanceCount);
    unsigned count = 0;
    code = api.nvmlGpuInstanceGetComputeInstances(*instance, profile.id, handles.data(), &count);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlGpuInstanceGetComputeInstances (" + GiText(gpu, gi) +
                                 ", CI profile " + Str(profile.id) + ")");
    }
    count = std::min<unsigned>(count, profile.instanceCount);
    for (unsigned i = 0; i < count; ++i) {
      absl::StatusOr<ComputeInstanceInfo> info = CiInfo(api, handles[i], gpu, gi, GiText(gpu, gi));
      if (!info.ok()) return info.status();
      out.push_back(*std::move(info));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ComputeInstanceInfo& a, const ComputeInstanceInfo& b) { return a.id < b.id; });
  if (!out.empty()) {
    absl::StatusOr<std::map<int, std::string>> uuids = CiUuids(api, *device, gpu, gi);
    if (!uuids.ok()) return uuids.status();
    for (ComputeInstanceInfo& ci : out) {
      auto it = uuids->find(ci.id);
      if (it != uuids->end()) ci.uuid = it->second;
    }
  }
  return out;
}

absl::StatusOr<GpuInstanceInfo> NvmlBackend::CreateGpuInstance(int gpu, int profile_id,
                                                               std::optional<int> start) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  const std::string what = GpuText(gpu) + ", profile " + Str(profile_id) +
                           (start ? ", start " + Str(*start) : std::string());
  nvmlGpuInstance_t instance = nullptr;
  int code = kNvmlSuccess;
  if (start) {
    // The placement's size is the profile's: read it from the possible placements.
    unsigned count = 0;
    code =
        api.nvmlDeviceGetGpuInstancePossiblePlacements_v2(*device, U(profile_id), nullptr, &count);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceGetGpuInstancePossiblePlacements_v2 (" + what + ")");
    }
    std::vector<nvmlGpuInstancePlacement_t> placements(count);
    if (count > 0) {
      code = api.nvmlDeviceGetGpuInstancePossiblePlacements_v2(*device, U(profile_id),
                                                               placements.data(), &count);
      if (code != kNvmlSuccess) {
        return NvmlError(code, "nvmlDeviceGetGpuInstancePossiblePlacements_v2 (" + what + ")");
      }
      placements.resize(std::min<size_t>(count, placements.size()));
    }
    nvmlGpuInstancePlacement_t placement{U(*start), placements.empty() ? 0U : placements[0].size};
    for (const nvmlGpuInstancePlacement_t& candidate : placements) {
      if (I(candidate.start) == *start) placement.size = candidate.size;
    }
    code =
        api.nvmlDeviceCreateGpuInstanceWithPlacement(*device, U(profile_id), &placement, &instance);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlDeviceCreateGpuInstanceWithPlacement (" + what + ")");
    }
  } else {
    code = api.nvmlDeviceCreateGpuInstance(*device, U(profile_id), &instance);
    if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceCreateGpuInstance (" + what + ")");
  }
  return GiInfo(api, instance, gpu, "new GPU instance, " + what);
}

absl::StatusOr<ComputeInstanceInfo> NvmlBackend::CreateComputeInstance(int gpu, int gi,
                                                                       int ci_profile_id,
                                                                       std::optional<int> start) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  absl::StatusOr<nvmlGpuInstance_t> instance = GiHandle(api, *device, gpu, gi);
  if (!instance.ok()) return instance.status();
  const std::string what = GiText(gpu, gi) + ", CI profile " + Str(ci_profile_id) +
                           (start ? ", start " + Str(*start) : std::string());
  nvmlComputeInstance_t compute = nullptr;
  int code = kNvmlSuccess;
  if (start) {
    unsigned count = 0;
    code = api.nvmlGpuInstanceGetComputeInstancePossiblePlacements(*instance, U(ci_profile_id),
                                                                   nullptr, &count);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlGpuInstanceGetComputeInstancePossiblePlacements (" + what + ")");
    }
    std::vector<nvmlComputeInstancePlacement_t> placements(count);
    if (count > 0) {
      code = api.nvmlGpuInstanceGetComputeInstancePossiblePlacements(*instance, U(ci_profile_id),
                                                                     placements.data(), &count);
      if (code != kNvmlSuccess) {
        return NvmlError(code,
                         "nvmlGpuInstanceGetComputeInstancePossiblePlacements (" + what + ")");
      }
      placements.resize(std::min<size_t>(count, placements.size()));
    }
    nvmlComputeInstancePlacement_t placement{U(*start),
                                             placements.empty() ? 0U : placements[0].size};
    for (const nvmlComputeInstancePlacement_t& candidate : placements) {
      if (I(candidate.start) == *start) placement.size = candidate.size;
    }
    code = api.nvmlGpuInstanceCreateComputeInstanceWithPlacement(*instance, U(ci_profile_id),
                                                                 &placement, &compute);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlGpuInstanceCreateComputeInstanceWithPlacement (" + what + ")");
    }
  } else {
    code = api.nvmlGpuInstanceCreateComputeInstance(*instance, U(ci_profile_id), &compute);
    if (code != kNvmlSuccess) {
      return NvmlError(code, "nvmlGpuInstanceCreateComputeInstance (" + what + ")");
    }
  }
  absl::StatusOr<ComputeInstanceInfo> info =
      CiInfo(api, compute, gpu, gi, "new compute instance, " + what);
  if (!info.ok()) return info.status();
  absl::StatusOr<std::map<int, std::string>> uuids = CiUuids(api, *device, gpu, gi);
  if (!uuids.ok()) return uuids.status();
  if (auto it = uuids->find(info->id); it != uuids->end()) info->uuid = it->second;
  return info;
}

absl::Status NvmlBackend::DestroyGpuInstance(int gpu, int gi) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  absl::StatusOr<nvmlGpuInstance_t> instance = GiHandle(api, *device, gpu, gi);
  if (!instance.ok()) return instance.status();
  const int code = api.nvmlGpuInstanceDestroy(*instance);
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlGpuInstanceDestroy (" + GiText(gpu, gi) + ")");
  }
  return absl::OkStatus();
}

absl::Status NvmlBackend::DestroyComputeInstance(int gpu, int gi, int ci) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  absl::StatusOr<nvmlGpuInstance_t> instance = GiHandle(api, *device, gpu, gi);
  if (!instance.ok()) return instance.status();
  const std::string what = "CI " + Str(ci) + " of " + GiText(gpu, gi);
  nvmlComputeInstance_t compute = nullptr;
  int code = api.nvmlGpuInstanceGetComputeInstanceById(*instance, U(ci), &compute);
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlGpuInstanceGetComputeInstanceById (" + what + ")");
  }
  code = api.nvmlComputeInstanceDestroy(compute);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlComputeInstanceDestroy (" + what + ")");
  return absl::OkStatus();
}

absl::StatusOr<MigModeChange> NvmlBackend::SetMigMode(int gpu, MigMode mode) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  const unsigned value = mode == MigMode::kEnabled ? nvml::kMigEnable : nvml::kMigDisable;
  nvml::nvmlReturn_t activation = kNvmlSuccess;
  const int code = api.nvmlDeviceSetMigMode(*device, value, &activation);
  if (code != kNvmlSuccess) {
    return NvmlError(code, "nvmlDeviceSetMigMode (" + GpuText(gpu) + ", " +
                               (mode == MigMode::kEnabled ? "enable" : "disable") + ")");
  }
  MigModeChange change;
  change.applied = activation == kNvmlSuccess;
  change.activation_code = activation;
  return change;
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

absl::StatusOr<GpuTelemetry> NvmlBackend::GetTelemetry(int gpu) {
  const Api& api = *api_;
  absl::StatusOr<nvmlDevice_t> device_or = DeviceHandle(api, gpu);
  if (!device_or.ok()) return device_or.status();
  const nvmlDevice_t device = *device_or;
  GpuTelemetry out;
  // Each query fills its figures when it succeeds and returns the NVML code (FUNCTION_NOT_FOUND
  // for a function the library lacks). Only GPU_IS_LOST fails the call: any other failure leaves
  // the figure absent rather than made up.
  struct Query {
    const char* name;
    std::function<int()> run;
  };
  const Query queries[] = {
      {"nvmlDeviceGetTemperature",
       [&]() {
         unsigned celsius = 0;
         const int code =
             CallOptional(api.nvmlDeviceGetTemperature, device, nvml::kTemperatureGpu, &celsius);
         if (code == kNvmlSuccess) out.temperature_c = I(celsius);
         return code;
       }},
      {"nvmlDeviceGetPowerUsage",
       [&]() {
         unsigned milliwatts = 0;
         const int code = CallOptional(api.nvmlDeviceGetPowerUsage, device, &milliwatts);
         if (code == kNvmlSuccess) out.power_w = static_cast<double>(milliwatts) / 1000.0;
         return code;
       }},
      {"nvmlDeviceGetEnforcedPowerLimit",
       [&]() {
         unsigned milliwatts = 0;
         const int code = CallOptional(api.nvmlDeviceGetEnforcedPowerLimit, device, &milliwatts);
         if (code == kNvmlSuccess) out.power_limit_w = static_cast<double>(milliwatts) / 1000.0;
         return code;
       }},
      {"nvmlDeviceGetClockInfo (SM)",
       [&]() {
         unsigned mhz = 0;
         const int code = CallOptional(api.nvmlDeviceGetClockInfo, device, nvml::kClockSm, &mhz);
         if (code == kNvmlSuccess) out.sm_clock_mhz = I(mhz);
         return code;
       }},
      {"nvmlDeviceGetClockInfo (MEM)",
       [&]() {
         unsigned mhz = 0;
         const int code = CallOptional(api.nvmlDeviceGetClockInfo, device, nvml::kClockMem, &mhz);
         if (code == kNvmlSuccess) out.memory_clock_mhz = I(mhz);
         return code;
       }},
      {"nvmlDeviceGetUtilizationRates",  // NOT_SUPPORTED while MIG is on
       [&]() {
         nvml::nvmlUtilization_t rates{};
         const int code = CallOptional(api.nvmlDeviceGetUtilizationRates, device, &rates);
         if (code == kNvmlSuccess) {
           out.utilization_pct = I(rates.gpu);
           out.memory_utilization_pct = I(rates.memory);
         }
         return code;
       }},
      {"nvmlDeviceGetCurrentClocksEventReasons",
       [&]() {
         unsigned long long reasons = 0;
         int code = CallOptional(api.nvmlDeviceGetCurrentClocksEventReasons, device, &reasons);
         if (code == kNvmlFunctionNotFound) {  // drivers before the rename
           code = CallOptional(api.nvmlDeviceGetCurrentClocksThrottleReasons, device, &reasons);
         }
         if (code == kNvmlSuccess) out.throttle_reasons = reasons;
         return code;
       }},
      {"nvmlDeviceGetTotalEccErrors (corrected, volatile)",
       [&]() {
         unsigned long long count = 0;
         const int code = CallOptional(api.nvmlDeviceGetTotalEccErrors, device,
                                       nvml::kMemoryErrorTypeCorrected, nvml::kVolatileEcc, &count);
         if (code == kNvmlSuccess) out.ecc_corrected = count;
         return code;
       }},
      {"nvmlDeviceGetTotalEccErrors (uncorrected, volatile)",
       [&]() {
         unsigned long long count = 0;
         const int code =
             CallOptional(api.nvmlDeviceGetTotalEccErrors, device,
                          nvml::kMemoryErrorTypeUncorrected, nvml::kVolatileEcc, &count);
         if (code == kNvmlSuccess) out.ecc_uncorrected = count;
         return code;
       }},
      {"nvmlDeviceGetRemappedRows",
       [&]() {
         unsigned correctable = 0;
         unsigned uncorrectable = 0;
         unsigned pending = 0;
         unsigned failure = 0;
         const int code = CallOptional(api.nvmlDeviceGetRemappedRows, device, &correctable,
                                       &uncorrectable, &pending, &failure);
         if (code == kNvmlSuccess) {
           out.remapped_rows_correctable = I(correctable);
           out.remapped_rows_uncorrectable = I(uncorrectable);
           out.remap_pending = pending != 0;
           out.remap_failure = failure != 0;
         }
         return code;
       }},
  };
  for (const Query& query : queries) {
    if (const int code = query.run(); code == kNvmlGpuIsLost) {
      return NvmlError(code, std::string(query.name) + " (" + GpuText(gpu) + ")");
    }
  }
  return out;
}

absl::StatusOr<Activity> NvmlBackend::SampleActivity(int gpu, std::optional<int> gi) {
  const Api& api = *api_;
  const std::string what = gi ? GiText(gpu, *gi) : GpuText(gpu);
  if (api.nvmlGpmQueryDeviceSupport == nullptr || api.nvmlGpmSampleAlloc == nullptr ||
      api.nvmlGpmSampleFree == nullptr || api.nvmlGpmSampleGet == nullptr ||
      api.nvmlGpmMetricsGet == nullptr || (gi && api.nvmlGpmMigSampleGet == nullptr)) {
    return NvmlError(kNvmlNotSupported, "SM activity of " + what + ": " + library_ +
                                            " has no GPM functions (driver too old)");
  }
  absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
  if (!device.ok()) return device.status();
  auto supported = gpm_supported_.find(gpu);
  if (supported == gpm_supported_.end()) {
    nvml::nvmlGpmSupport_t support{};
    support.version = nvml::kGpmSupportVersion;
    const int code = api.nvmlGpmQueryDeviceSupport(*device, &support);
    if (code != kNvmlSuccess && code != kNvmlNotSupported) {
      return NvmlError(code, "nvmlGpmQueryDeviceSupport (" + GpuText(gpu) + ")");
    }
    supported =
        gpm_supported_.emplace(gpu, code == kNvmlSuccess && support.isSupportedDevice != 0).first;
  }
  if (!supported->second) {
    return NvmlError(kNvmlNotSupported,
                     "SM activity of " + what + ": the GPU has no GPM (Hopper and later)");
  }

  nvml::nvmlGpmSample_t sample = nullptr;
  int code = api.nvmlGpmSampleAlloc(&sample);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlGpmSampleAlloc (" + what + ")");
  code =
      gi ? api.nvmlGpmMigSampleGet(*device, U(*gi), sample) : api.nvmlGpmSampleGet(*device, sample);
  const std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
  if (code != kNvmlSuccess) {
    api.nvmlGpmSampleFree(sample);
    return NvmlError(
        code, std::string(gi ? "nvmlGpmMigSampleGet" : "nvmlGpmSampleGet") + " (" + what + ")");
  }
  const std::pair<int, int> key{gpu, gi.value_or(-1)};
  auto kept = gpm_samples_.find(key);
  if (kept == gpm_samples_.end()) {
    gpm_samples_.emplace(key, GpmSample{sample, now});
    return absl::UnavailableError("SM activity of " + what +
                                  ": first GPM sample taken; activity is measured between two "
                                  "samples, from the next call on");
  }
  const GpmSample previous = kept->second;
  kept->second = GpmSample{sample, now};  // the interval of the next call starts here

  nvml::nvmlGpmMetricsGet_t request{};
  request.version = nvml::kGpmMetricsGetVersion;
  const unsigned metric_ids[] = {nvml::kGpmMetricSmUtil, nvml::kGpmMetricSmOccupancy,
                                 nvml::kGpmMetricDramBwUtil};
  request.numMetrics = static_cast<unsigned>(std::size(metric_ids));
  request.sample1 = previous.sample;
  request.sample2 = sample;
  for (unsigned i = 0; i < request.numMetrics; ++i) request.metrics[i].metricId = metric_ids[i];
  code = api.nvmlGpmMetricsGet(&request);
  api.nvmlGpmSampleFree(previous.sample);
  if (code != kNvmlSuccess) return NvmlError(code, "nvmlGpmMetricsGet (" + what + ")");
  for (unsigned i = 0; i < request.numMetrics; ++i) {
    const nvml::nvmlGpmMetric_t& metric = request.metrics[i];
    if (metric.nvmlReturn != kNvmlSuccess) {
      return NvmlError(metric.nvmlReturn,
                       "nvmlGpmMetricsGet (" + what + ", GPM metric " + Str(metric_ids[i]) + ")");
    }
  }
  Activity activity;
  activity.sm_active_pct = request.metrics[0].value;
  activity.sm_occupancy_pct = request.metrics[1].value;
  activity.dram_bandwidth_pct = request.metrics[2].value;
  activity.interval_s = std::chrono::duration<double>(now - previous.taken).count();
  return activity;
}

absl::StatusOr<std::vector<XidEvent>> NvmlBackend::TakeXidEvents() {
  const Api& api = *api_;
  if (api.nvmlEventSetCreate == nullptr || api.nvmlDeviceRegisterEvents == nullptr ||
      api.nvmlEventSetWait_v2 == nullptr || api.nvmlEventSetFree == nullptr) {
    return NvmlError(kNvmlNotSupported,
                     "Xid events: " + library_ + " has no nvmlEventSetWait_v2 (driver too old)");
  }
  if (event_set_ == nullptr) {
    unsigned count = 0;
    int code = api.nvmlDeviceGetCount_v2(&count);
    if (code != kNvmlSuccess) return NvmlError(code, "nvmlDeviceGetCount_v2");
    nvml::nvmlEventSet_t set = nullptr;
    code = api.nvmlEventSetCreate(&set);
    if (code != kNvmlSuccess) return NvmlError(code, "nvmlEventSetCreate");
    std::vector<std::pair<nvmlDevice_t, int>> registered;
    for (unsigned index = 0; index < count; ++index) {
      const int gpu = I(index);
      absl::StatusOr<nvmlDevice_t> device = DeviceHandle(api, gpu);
      if (device.ok()) {
        code = api.nvmlDeviceRegisterEvents(*device, nvml::kEventTypeXidCriticalError, set);
      } else {
        code = HasNvmlCode(device.status(), kNvmlGpuIsLost) ? static_cast<int>(kNvmlGpuIsLost)
                                                            : static_cast<int>(kNvmlUnknown);
      }
      // A GPU without Xid events, or one that fell off the bus, is left out.
      if (code == kNvmlNotSupported || code == kNvmlGpuIsLost) continue;
      if (code != kNvmlSuccess) {
        api.nvmlEventSetFree(set);
        if (!device.ok()) return device.status();
        return NvmlError(code,
                         "nvmlDeviceRegisterEvents (" + GpuText(gpu) + ", Xid critical errors)");
      }
      registered.emplace_back(*device, gpu);
    }
    event_set_ = set;
    event_gpus_ = std::move(registered);
  }
  std::vector<XidEvent> out;
  // Bounded, in case a library never answers TIMEOUT.
  for (int taken = 0; taken < 100000; ++taken) {
    nvml::nvmlEventData_t data{};
    const int code = api.nvmlEventSetWait_v2(event_set_, &data, 0);
    if (code == kNvmlTimeout) break;
    if (code != kNvmlSuccess) {
      // The events already taken are out of the set: hand them over; a lasting failure shows on
      // the next call.
      if (!out.empty()) break;
      return NvmlError(code, "nvmlEventSetWait_v2 (Xid events)");
    }
    if ((data.eventType & nvml::kEventTypeXidCriticalError) == 0) continue;
    XidEvent event;
    event.gpu = -1;  // not one of the registered handles (should not happen)
    for (const auto& [handle, gpu] : event_gpus_) {
      if (handle == data.device) event.gpu = gpu;
    }
    event.xid = data.eventData;
    if (data.gpuInstanceId != nvml::kInvalidInstanceId) event.gi = I(data.gpuInstanceId);
    if (data.computeInstanceId != nvml::kInvalidInstanceId) event.ci = I(data.computeInstanceId);
    out.push_back(event);
  }
  return out;
}

}  // namespace gpuslice::device
