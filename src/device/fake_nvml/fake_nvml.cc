// The test NVML library: libnvidia-ml.so.1 for machines without a GPU.
//
// It exports (C linkage, default visibility) exactly the NVML functions NvmlBackend uses
// (GPUSLICE_NVML_FUNCTIONS and GPUSLICE_NVML_HEALTH_FUNCTIONS in src/device/nvml_api.h, checked at
// compile time), nvmlErrorString, the optional nvmlDeviceGetGpuInstanceProfileInfoV (v2 and v3
// structs; GPUSLICE_FAKE_NVML_MAX_PROFILE_INFO_VERSION=1|2 makes it act like an older driver), and
// two test hooks: `gpusliceTestResetGpu` (the reset NVML does not have) and
// `gpusliceTestTerminateProcess` (ends a simulated process, which no real signal could). Everything
// else in the library is hidden. The machine it drives is a simulator state file
// (gpuslice/device/sim_store.h) named by $GPUSLICE_SIM when nvmlInit_v2 runs; every call locks that
// file, rereads it if another process changed it, runs the simulator's rules
// (gpuslice/device/sim_machine.h, the built-in catalog) and saves it when the state changed. Each
// call first counts itself under its NVML name (SimMachine::Enter), so the state's fault rules can
// make any NVML function fail.
//
// NVML semantics kept (../shared/reference/mig-facts.md §0, §4):
//   * nvmlDeviceGetGpuInstanceProfileInfo takes an NVML_GPU_INSTANCE_PROFILE_* constant and
//     returns info.id = the nvidia-smi profile id (NOT_SUPPORTED when the model lacks the
//     constant or MIG is disabled, INVALID_ARGUMENT past 0x11); every other GI call takes info.id;
//   * nvmlDeviceGetMigMode is NOT_SUPPORTED on GPUs without MIG;
//   * processes carry gpuInstanceId / computeInstanceId 0xFFFFFFFF when MIG is off;
//   * handles (GPUs, MIG devices, GIs, CIs) are pointers into stable storage; a handle of an
//     instance that was destroyed (or of an earlier nvmlInit_v2) is INVALID_ARGUMENT;
//   * a lost GPU (SimGpu::lost) still gives its handle, but every query on it answers GPU_IS_LOST;
//   * health figures are SimMachine::Telemetry's, in NVML's units (power in mW); a figure the
//     simulator leaves absent is NOT_SUPPORTED (utilisation rates while MIG is on, ECC on GeForce,
//     remapped rows before Ampere, what the GPU's telemetry lists as unsupported); ECC counts are
//     volatile only;
//   * Xid critical errors are the state's waiting Xids (`gpuslice sim xid`): registering a GPU in
//     an event set drops those already waiting for it (events come after registration), and
//     nvmlEventSetWait_v2 moves the Xids waiting for the set's GPUs out of the state and hands them
//     out one per call, answering TIMEOUT at once when none waits (it never blocks); gi/ci are
//     0xFFFFFFFF when not given;
//   * GPM samples are allocated structs holding the simulator's instant activity
//     (SimMachine::SampleActivity) of the GPU or GI at nvmlGpmSampleGet / nvmlGpmMigSampleGet
//     time; nvmlGpmMetricsGet gives sample2's figures for SM_UTIL, SM_OCCUPANCY and DRAM_BW_UTIL
//     (other metrics NOT_SUPPORTED) and needs two samples of the same device.
// Where the driver's code for an odd case is unknown, the simulator's is used, so NvmlBackend over
// this library behaves like SimBackend.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "gpuslice/device/nvml_codes.h"
#include "gpuslice/device/sim_machine.h"
#include "gpuslice/device/sim_store.h"
#include "gpuslice/geometry/compute_instances.h"
#include "gpuslice/hw/catalog.h"
#include "nvml_api.h"

#define GPUSLICE_FAKE_NVML_EXPORT extern "C" __attribute__((visibility("default")))

using gpuslice::device::nvml::nvmlComputeInstance_t;
using gpuslice::device::nvml::nvmlComputeInstanceInfo_t;
using gpuslice::device::nvml::nvmlComputeInstancePlacement_t;
using gpuslice::device::nvml::nvmlComputeInstanceProfileInfo_t;
using gpuslice::device::nvml::nvmlDevice_t;
using gpuslice::device::nvml::nvmlGpuInstance_t;
using gpuslice::device::nvml::nvmlGpuInstanceInfo_t;
using gpuslice::device::nvml::nvmlGpuInstancePlacement_t;
using gpuslice::device::nvml::nvmlGpuInstanceProfileInfo_t;
using gpuslice::device::nvml::nvmlGpuInstanceProfileInfo_v2_t;
using gpuslice::device::nvml::nvmlMemory_t;
using gpuslice::device::nvml::nvmlPciInfo_t;
using gpuslice::device::nvml::nvmlProcessInfo_t;
using gpuslice::device::nvml::nvmlReturn_t;

namespace gpuslice::device::fake_nvml {
namespace {

using sim::SimCi;
using sim::SimGi;
using sim::SimGpu;
using sim::SimMachine;
using sim::SimState;

constexpr char kStateEnv[] = "GPUSLICE_SIM";
constexpr char kMaxProfileInfoVersionEnv[] = "GPUSLICE_FAKE_NVML_MAX_PROFILE_INFO_VERSION";
constexpr unsigned long long kMiB = 1024ULL * 1024ULL;
constexpr std::uint32_t kMagic = 0x4E564D4C;  // "NVML"

enum class Kind { kGpu, kMig, kGi, kCi };

// What a handle points to. A GI is identified for its life by (id, profile, start) and a CI by its
// UUID, so a handle does not silently come back to life when a new instance reuses the id.
struct Handle {
  std::uint32_t magic = kMagic;
  std::uint64_t generation = 0;  // of the nvmlInit_v2 that made it
  Kind kind = Kind::kGpu;
  int gpu = 0;
  int gi = -1;
  int gi_profile = -1;
  int gi_start = -1;
  int ci = -1;
  std::string ci_uuid;
};

// A GPM sample: the simulator's instant activity of a GPU or GPU instance when it was taken.
struct GpmSample {
  bool taken = false;
  int gpu = -1;
  int gi = -1;  // -1: the whole GPU
  Activity activity;
};

// An event set: the GPUs registered for Xid events, and the events already moved out of the
// simulator state for it.
struct EventSet {
  std::set<int> gpus;
  std::deque<sim::SimXid> pending;
};

struct Library {
  std::mutex mutex;
  int init_count = 0;
  std::uint64_t generation = 0;
  std::unique_ptr<sim::SimStore> store;
  std::deque<Handle> handles;   // stable addresses
  std::set<const void*> known;  // every address in `handles`
  std::map<int, std::string> error_strings;
  // Newest nvmlGpuInstanceProfileInfo version nvmlDeviceGetGpuInstanceProfileInfoV accepts (from
  // $GPUSLICE_FAKE_NVML_MAX_PROFILE_INFO_VERSION at nvmlInit_v2): 3, or 2 (a driver without v3),
  // or 1 (a driver without the V function: it answers FUNCTION_NOT_FOUND).
  unsigned max_profile_info_version = 3;
  // GPM samples (nvmlGpmSampleAlloc) and event sets (nvmlEventSetCreate), by the address handed
  // out.
  std::map<const void*, std::unique_ptr<GpmSample>> gpm_samples;
  std::map<const void*, std::unique_ptr<EventSet>> event_sets;
};

// Lives until exit: the library is linked with -z nodelete, so dlclose does not unmap it and
// the handles it gave out stay valid.
Library& Lib() {
  static Library library;
  return library;
}

const hw::Catalog& Catalog() { return hw::Catalog::Builtin(); }

int U2I(unsigned value) { return static_cast<int>(value); }
unsigned I2U(int value) { return static_cast<unsigned>(value); }

Handle* FindOrAdd(const Handle& wanted) {
  Library& lib = Lib();
  for (Handle& handle : lib.handles) {
    if (handle.generation == wanted.generation && handle.kind == wanted.kind &&
        handle.gpu == wanted.gpu && handle.gi == wanted.gi &&
        handle.gi_profile == wanted.gi_profile && handle.gi_start == wanted.gi_start &&
        handle.ci == wanted.ci && handle.ci_uuid == wanted.ci_uuid) {
      return &handle;
    }
  }
  lib.handles.push_back(wanted);
  lib.known.insert(&lib.handles.back());
  return &lib.handles.back();
}

nvmlDevice_t GpuHandle(int gpu) {
  Handle wanted;
  wanted.generation = Lib().generation;
  wanted.kind = Kind::kGpu;
  wanted.gpu = gpu;
  return reinterpret_cast<nvmlDevice_t>(FindOrAdd(wanted));
}

Handle InstanceHandle(Kind kind, int gpu, const SimGi& gi, const SimCi* ci) {
  Handle wanted;
  wanted.generation = Lib().generation;
  wanted.kind = kind;
  wanted.gpu = gpu;
  wanted.gi = gi.id;
  wanted.gi_profile = gi.profile_id;
  wanted.gi_start = gi.start;
  if (ci != nullptr) {
    wanted.ci = ci->id;
    wanted.ci_uuid = ci->uuid;
  }
  return wanted;
}

nvmlGpuInstance_t GiHandle(int gpu, const SimGi& gi) {
  return reinterpret_cast<nvmlGpuInstance_t>(
      FindOrAdd(InstanceHandle(Kind::kGi, gpu, gi, nullptr)));
}

nvmlComputeInstance_t CiHandle(int gpu, const SimGi& gi, const SimCi& ci) {
  return reinterpret_cast<nvmlComputeInstance_t>(
      FindOrAdd(InstanceHandle(Kind::kCi, gpu, gi, &ci)));
}

nvmlDevice_t MigHandle(int gpu, const SimGi& gi, const SimCi& ci) {
  return reinterpret_cast<nvmlDevice_t>(FindOrAdd(InstanceHandle(Kind::kMig, gpu, gi, &ci)));
}

// A handle resolved against the current state.
struct Target {
  const Handle* handle = nullptr;
  const SimGpu* gpu = nullptr;
  const SimGi* gi = nullptr;  // kMig, kGi, kCi
  const SimCi* ci = nullptr;  // kMig, kCi
};

// Resolves `pointer` as a handle of one of `kinds`; INVALID_ARGUMENT for anything else, including
// a handle whose instance no longer exists.
int Resolve(const SimMachine& machine, const void* pointer, std::initializer_list<Kind> kinds,
            Target* out) {
  Library& lib = Lib();
  if (pointer == nullptr || lib.known.count(pointer) == 0) return kNvmlInvalidArgument;
  const Handle* handle = static_cast<const Handle*>(pointer);
  if (handle->magic != kMagic || handle->generation != lib.generation) return kNvmlInvalidArgument;
  bool kind_ok = false;
  for (Kind kind : kinds) kind_ok = kind_ok || kind == handle->kind;
  if (!kind_ok) return kNvmlInvalidArgument;
  out->handle = handle;
  out->gpu = machine.Gpu(handle->gpu);
  if (out->gpu == nullptr) return kNvmlInvalidArgument;
  if (out->gpu->lost) return kNvmlGpuIsLost;  // fell off the bus: every query on it fails
  if (handle->kind == Kind::kGpu) return kNvmlSuccess;
  out->gi = machine.Gi(handle->gpu, handle->gi);
  if (out->gi == nullptr || out->gi->profile_id != handle->gi_profile ||
      out->gi->start != handle->gi_start) {
    return kNvmlInvalidArgument;
  }
  if (handle->kind == Kind::kGi) return kNvmlSuccess;
  for (const SimCi& ci : out->gi->cis) {
    if (ci.id == handle->ci && ci.uuid == handle->ci_uuid) out->ci = &ci;
  }
  return out->ci == nullptr ? kNvmlInvalidArgument : kNvmlSuccess;
}

int CopyString(const std::string& text, char* buffer, unsigned length) {
  if (buffer == nullptr) return kNvmlInvalidArgument;
  if (length < text.size() + 1) return kNvmlInsufficientSize;
  std::memcpy(buffer, text.c_str(), text.size() + 1);
  return kNvmlSuccess;
}

const hw::GiProfile* GiProfileOf(const SimMachine& machine, const Target& target) {
  const hw::GpuModel* model = machine.ModelOf(target.handle->gpu);
  if (model == nullptr || !model->mig || target.gi == nullptr) return nullptr;
  return model->mig->FindProfileBySmiId(target.gi->profile_id);
}

// The CI profiles of the target's GI (empty when unknown).
const std::vector<hw::CiProfile>& CiProfilesOf(const SimMachine& machine, const Target& target) {
  static const std::vector<hw::CiProfile> kNone;
  const hw::GpuModel* model = machine.ModelOf(target.handle->gpu);
  const hw::GiProfile* gi_profile = GiProfileOf(machine, target);
  if (gi_profile == nullptr) return kNone;
  return model->mig->CiProfilesFor(gi_profile->compute_slices);
}

const hw::CiProfile* FindCiProfile(const std::vector<hw::CiProfile>& profiles, unsigned id) {
  for (const hw::CiProfile& profile : profiles) {
    if (I2U(profile.id) == id) return &profile;
  }
  return nullptr;
}

bool MigEnabled(const SimGpu& gpu) {
  return gpu.mig_capable && gpu.mig_current == MigMode::kEnabled;
}

// The CIs of a GPU in MIG-device index order.
std::vector<std::pair<const SimGi*, const SimCi*>> MigDevicesOf(const SimGpu& gpu) {
  std::vector<std::pair<const SimGi*, const SimCi*>> out;
  if (!MigEnabled(gpu)) return out;
  for (const SimGi& gi : gpu.gis) {
    for (const SimCi& ci : gi.cis) out.emplace_back(&gi, &ci);
  }
  return out;
}

// Runs one NVML call named `name` on the simulated machine: counts it (fault rules), runs `fn`,
// saves the state when `mutating` and the call succeeded (or the fault counters moved).
nvmlReturn_t Call(const char* name, bool mutating, const std::function<int(SimMachine&)>& fn) {
  Library& lib = Lib();
  std::lock_guard<std::mutex> lock(lib.mutex);
  if (lib.init_count == 0 || lib.store == nullptr) return kNvmlUninitialized;
  int code = kNvmlSuccess;
  absl::Status status = lib.store->Update([&](SimState& state, const std::function<void()>& save) {
    const std::int64_t calls_before = state.calls;
    SimMachine machine(state, Catalog());
    machine.set_before_abort(save);
    code = machine.Enter(name);
    if (code == kNvmlSuccess) code = fn(machine);
    return (mutating && code == kNvmlSuccess) || state.calls != calls_before;
  });
  if (!status.ok()) {
    std::fprintf(stderr, "gpuslice test NVML: %s: %s\n", name,
                 std::string(status.message()).c_str());
    return kNvmlUnknown;
  }
  return code;
}

// Runs a health query named `name` on GPU handle `device`: GPU_IS_LOST for a lost GPU, else
// `fn` with the simulator's figures (an absent figure is the GPU's NOT_SUPPORTED).
nvmlReturn_t TelemetryCall(const char* name, nvmlDevice_t device,
                           const std::function<int(const GpuTelemetry&)>& fn) {
  return Call(name, false, [&](SimMachine& machine) {
    Target target;
    if (int code = Resolve(machine, device, {Kind::kGpu}, &target)) return code;
    GpuTelemetry figures;
    if (int code = machine.Telemetry(target.handle->gpu, &figures)) return code;
    return fn(figures);
  });
}

GpmSample* FindGpmSample(const void* pointer) {
  auto it = Lib().gpm_samples.find(pointer);
  return it == Lib().gpm_samples.end() ? nullptr : it->second.get();
}

EventSet* FindEventSet(const void* pointer) {
  auto it = Lib().event_sets.find(pointer);
  return it == Lib().event_sets.end() ? nullptr : it->second.get();
}

// Takes a GPM sample of GPU `gpu` (or of its GI `gi`) into `pointer`.
int TakeGpmSample(SimMachine& machine, int gpu, std::optional<int> gi, const void* pointer) {
  GpmSample* sample = FindGpmSample(pointer);
  if (sample == nullptr) return kNvmlInvalidArgument;
  Activity activity;
  if (int code = machine.SampleActivity(gpu, gi, &activity)) return code;
  sample->taken = true;
  sample->gpu = gpu;
  sample->gi = gi.value_or(-1);
  sample->activity = activity;
  return kNvmlSuccess;
}

}  // namespace
}  // namespace gpuslice::device::fake_nvml

namespace fake = gpuslice::device::fake_nvml;
using gpuslice::device::MigMode;
using gpuslice::device::MigModeChange;
using gpuslice::device::sim::SimCi;
using gpuslice::device::sim::SimGi;
using gpuslice::device::sim::SimGpu;
using gpuslice::device::sim::SimMachine;
using gpuslice::device::sim::SimProcess;
using gpuslice::device::sim::SimXid;
namespace dev = gpuslice::device;
namespace hw = gpuslice::hw;
namespace nvml = gpuslice::device::nvml;

// ------------------------------------------------------------------------------------ lifecycle

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  fake::Library& lib = fake::Lib();
  {
    std::lock_guard<std::mutex> lock(lib.mutex);
    if (lib.init_count == 0) {
      const char* path = std::getenv(fake::kStateEnv);
      if (path == nullptr || *path == '\0') return dev::kNvmlDriverNotLoaded;
      absl::StatusOr<std::unique_ptr<dev::sim::SimStore>> store = dev::sim::SimStore::Open(path);
      if (!store.ok()) {
        std::fprintf(stderr, "gpuslice test NVML: %s\n",
                     std::string(store.status().message()).c_str());
        return dev::kNvmlDriverNotLoaded;
      }
      lib.store = *std::move(store);
      ++lib.generation;
      lib.max_profile_info_version = 3;
      if (const char* max = std::getenv(fake::kMaxProfileInfoVersionEnv);
          max != nullptr && *max >= '1' && *max <= '3' && max[1] == '\0') {
        lib.max_profile_info_version = static_cast<unsigned>(*max - '0');
      }
    }
    ++lib.init_count;
  }
  const nvmlReturn_t code = fake::Call("nvmlInit_v2", false, [](SimMachine&) { return 0; });
  if (code != dev::kNvmlSuccess) {
    std::lock_guard<std::mutex> lock(lib.mutex);
    if (--lib.init_count == 0) lib.store.reset();
  }
  return code;
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlShutdown(void) {
  const nvmlReturn_t code = fake::Call("nvmlShutdown", false, [](SimMachine&) { return 0; });
  if (code == dev::kNvmlUninitialized) return code;
  fake::Library& lib = fake::Lib();
  std::lock_guard<std::mutex> lock(lib.mutex);
  if (--lib.init_count == 0) lib.store.reset();
  return code;
}

GPUSLICE_FAKE_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  fake::Library& lib = fake::Lib();
  std::lock_guard<std::mutex> lock(lib.mutex);
  auto [it, added] = lib.error_strings.try_emplace(result);
  if (added) it->second = dev::NvmlCodeMessage(result);
  return it->second.c_str();
}

// --------------------------------------------------------------------------------------- system

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned length) {
  return fake::Call("nvmlSystemGetDriverVersion", false, [&](SimMachine& machine) {
    return fake::CopyString(machine.driver_version(), version, length);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned pid, char* name,
                                                                unsigned length) {
  return fake::Call("nvmlSystemGetProcessName", false, [&](SimMachine& machine) {
    for (int i = 0; i < machine.GpuCount(); ++i) {
      for (const SimProcess& process : machine.Gpu(i)->processes) {
        if (process.pid == pid) return fake::CopyString(process.name, name, length);
      }
    }
    return static_cast<int>(dev::kNvmlNotFound);
  });
}

// -------------------------------------------------------------------------------------- devices

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  return fake::Call("nvmlDeviceGetCount_v2", false, [&](SimMachine& machine) {
    if (count == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    *count = fake::I2U(machine.GpuCount());
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index,
                                                                     nvmlDevice_t* device) {
  return fake::Call("nvmlDeviceGetHandleByIndex_v2", false, [&](SimMachine& machine) {
    if (device == nullptr || index >= fake::I2U(machine.GpuCount())) {
      return static_cast<int>(dev::kNvmlInvalidArgument);
    }
    *device = fake::GpuHandle(fake::U2I(index));
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                                         unsigned length) {
  return fake::Call("nvmlDeviceGetName", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu, fake::Kind::kMig}, &target)) {
      return code;
    }
    std::string text = target.gpu->name;
    if (target.ci != nullptr) {
      const hw::GpuModel* model = machine.ModelOf(target.handle->gpu);
      const gpuslice::hw::GiProfile* gi_profile = fake::GiProfileOf(machine, target);
      if (model != nullptr && gi_profile != nullptr) {
        const gpuslice::geometry::CiShape shape(*model->mig, *gi_profile);
        std::string device_name = gi_profile->name;
        for (size_t i = 0; i < shape.profiles().size(); ++i) {
          if (shape.profiles()[i].id == target.ci->profile_id) {
            device_name = shape.DeviceName(static_cast<int>(i));
          }
        }
        text += " MIG " + device_name;
      }
    }
    return fake::CopyString(text, name, length);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                         unsigned length) {
  return fake::Call("nvmlDeviceGetUUID", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu, fake::Kind::kMig}, &target)) {
      return code;
    }
    return fake::CopyString(target.ci != nullptr ? target.ci->uuid : target.gpu->uuid, uuid,
                            length);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device,
                                                               nvmlPciInfo_t* pci) {
  return fake::Call("nvmlDeviceGetPciInfo_v3", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu, fake::Kind::kMig}, &target)) {
      return code;
    }
    if (pci == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    *pci = {};
    unsigned domain = 0;
    unsigned bus = 0;
    unsigned slot = 0;
    unsigned function = 0;
    std::sscanf(target.gpu->bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &slot, &function);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = slot;
    pci->pciDeviceId = (static_cast<unsigned>(target.gpu->pci_device_id) << 16) | 0x10DEU;
    pci->pciSubSystemId = 0;
    std::snprintf(pci->busId, sizeof pci->busId, "%s", target.gpu->bus_id.c_str());
    std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", domain & 0xFFFFU,
                  bus & 0xFFU, slot & 0xFFU, function & 0xFU);
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device,
                                                               nvmlMemory_t* memory) {
  return fake::Call("nvmlDeviceGetMemoryInfo", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu, fake::Kind::kMig}, &target)) {
      return code;
    }
    if (memory == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    dev::MemoryInfo info;
    std::optional<int> gi;
    std::optional<int> ci;
    if (target.ci != nullptr) {
      gi = target.gi->id;
      ci = target.ci->id;
    }
    if (int code = machine.Memory(target.handle->gpu, gi, ci, &info)) return code;
    memory->total = static_cast<unsigned long long>(info.total_mib) * fake::kMiB;
    memory->used = static_cast<unsigned long long>(info.used_mib) * fake::kMiB;
    memory->free = static_cast<unsigned long long>(info.free_mib) * fake::kMiB;
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device,
                                                            unsigned* current_mode,
                                                            unsigned* pending_mode) {
  return fake::Call("nvmlDeviceGetMigMode", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
    if (current_mode == nullptr || pending_mode == nullptr) {
      return static_cast<int>(dev::kNvmlInvalidArgument);
    }
    if (!target.gpu->mig_capable) return static_cast<int>(dev::kNvmlNotSupported);
    *current_mode =
        target.gpu->mig_current == MigMode::kEnabled ? nvml::kMigEnable : nvml::kMigDisable;
    *pending_mode =
        target.gpu->mig_pending == MigMode::kEnabled ? nvml::kMigEnable : nvml::kMigDisable;
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned mode,
                                                            nvmlReturn_t* activation_status) {
  return fake::Call("nvmlDeviceSetMigMode", true, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
    if (activation_status == nullptr || mode > nvml::kMigEnable) {
      return static_cast<int>(dev::kNvmlInvalidArgument);
    }
    MigModeChange change;
    const int code = machine.SetMigMode(
        target.handle->gpu, mode == nvml::kMigEnable ? MigMode::kEnabled : MigMode::kDisabled,
        &change);
    if (code == dev::kNvmlSuccess) *activation_status = change.activation_code;
    return code;
  });
}

// ------------------------------------------------------------------------------- GPU instances

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(
    nvmlDevice_t device, unsigned profile, nvmlGpuInstanceProfileInfo_t* info) {
  return fake::Call("nvmlDeviceGetGpuInstanceProfileInfo", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
    if (info == nullptr || profile >= nvml::kGpuInstanceProfileCount) {
      return static_cast<int>(dev::kNvmlInvalidArgument);
    }
    const hw::GpuModel* model = machine.ModelOf(target.handle->gpu);
    if (!fake::MigEnabled(*target.gpu) || model == nullptr || !model->mig) {
      return static_cast<int>(dev::kNvmlNotSupported);
    }
    for (const gpuslice::hw::GiProfile& candidate : model->mig->profiles) {
      if (fake::I2U(candidate.nvml_const) != profile) continue;
      *info = {};
      info->id = fake::I2U(candidate.smi_id);
      info->isP2pSupported = 0;
      info->sliceCount = fake::I2U(candidate.compute_slices);
      info->instanceCount = fake::I2U(candidate.max_instances);
      info->multiprocessorCount = fake::I2U(candidate.sms);
      info->copyEngineCount = fake::I2U(candidate.engines.copy);
      info->decoderCount = fake::I2U(candidate.engines.decoder);
      info->encoderCount = fake::I2U(candidate.engines.encoder);
      info->jpegCount = fake::I2U(candidate.engines.jpeg);
      info->ofaCount = fake::I2U(candidate.engines.ofa);
      info->memorySizeMB = static_cast<unsigned long long>(candidate.memory_mib);
      return static_cast<int>(dev::kNvmlSuccess);
    }
    return static_cast<int>(dev::kNvmlNotSupported);
  });
}

// Versioned form: `info->version` must be the v2 or v3 version word (struct size | version << 24),
// and not newer than $GPUSLICE_FAKE_NVML_MAX_PROFILE_INFO_VERSION allows; otherwise
// ARGUMENT_VERSION_MISMATCH, like a driver that does not know the version.
GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(
    nvmlDevice_t device, unsigned profile, nvmlGpuInstanceProfileInfo_v2_t* info) {
  return fake::Call("nvmlDeviceGetGpuInstanceProfileInfoV", false, [&](SimMachine& machine) {
    const unsigned max_version = fake::Lib().max_profile_info_version;  // Call holds the lock
    if (max_version < 2) return static_cast<int>(dev::kNvmlFunctionNotFound);
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
    if (info == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    unsigned version = 0;  // the caller's struct may be a v3: read only the version word
    std::memcpy(&version, info, sizeof version);
    if (version != nvml::kGpuInstanceProfileInfoV2 &&
        !(version == nvml::kGpuInstanceProfileInfoV3 && max_version >= 3)) {
      return static_cast<int>(dev::kNvmlArgumentVersionMismatch);
    }
    if (profile >= nvml::kGpuInstanceProfileCount) {
      return static_cast<int>(dev::kNvmlInvalidArgument);
    }
    const hw::GpuModel* model = machine.ModelOf(target.handle->gpu);
    if (!fake::MigEnabled(*target.gpu) || model == nullptr || !model->mig) {
      return static_cast<int>(dev::kNvmlNotSupported);
    }
    for (const gpuslice::hw::GiProfile& candidate : model->mig->profiles) {
      if (fake::I2U(candidate.nvml_const) != profile) continue;
      const std::string name = "MIG " + candidate.name;
      if (version == nvml::kGpuInstanceProfileInfoV3) {
        auto* v3 = reinterpret_cast<nvml::nvmlGpuInstanceProfileInfo_v3_t*>(info);
        *v3 = {};
        v3->version = version;
        v3->id = fake::I2U(candidate.smi_id);
        v3->sliceCount = fake::I2U(candidate.compute_slices);
        v3->instanceCount = fake::I2U(candidate.max_instances);
        v3->multiprocessorCount = fake::I2U(candidate.sms);
        v3->copyEngineCount = fake::I2U(candidate.engines.copy);
        v3->decoderCount = fake::I2U(candidate.engines.decoder);
        v3->encoderCount = fake::I2U(candidate.engines.encoder);
        v3->jpegCount = fake::I2U(candidate.engines.jpeg);
        v3->ofaCount = fake::I2U(candidate.engines.ofa);
        v3->memorySizeMB = static_cast<unsigned long long>(candidate.memory_mib);
        std::snprintf(v3->name, sizeof v3->name, "%s", name.c_str());
        v3->capabilities =
            candidate.variant == hw::MediaVariant::kGfx ? nvml::kGpuInstanceProfileCapsGfx : 0U;
      } else {
        *info = {};
        info->version = version;
        info->id = fake::I2U(candidate.smi_id);
        info->isP2pSupported = 0;
        info->sliceCount = fake::I2U(candidate.compute_slices);
        info->instanceCount = fake::I2U(candidate.max_instances);
        info->multiprocessorCount = fake::I2U(candidate.sms);
        info->copyEngineCount = fake::I2U(candidate.engines.copy);
        info->decoderCount = fake::I2U(candidate.engines.decoder);
        info->encoderCount = fake::I2U(candidate.engines.encoder);
        info->jpegCount = fake::I2U(candidate.engines.jpeg);
        info->ofaCount = fake::I2U(candidate.engines.ofa);
        info->memorySizeMB = static_cast<unsigned long long>(candidate.memory_mib);
        std::snprintf(info->name, sizeof info->name, "%s", name.c_str());
      }
      return static_cast<int>(dev::kNvmlSuccess);
    }
    return static_cast<int>(dev::kNvmlNotSupported);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned profile_id, nvmlGpuInstancePlacement_t* placements,
    unsigned* count) {
  return fake::Call(
      "nvmlDeviceGetGpuInstancePossiblePlacements_v2", false, [&](SimMachine& machine) {
        fake::Target target;
        if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
        if (count == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
        const hw::GpuModel* model = machine.ModelOf(target.handle->gpu);
        if (!target.gpu->mig_capable || model == nullptr || !model->mig) {
          return static_cast<int>(dev::kNvmlNotSupported);
        }
        const gpuslice::hw::GiProfile* profile =
            model->mig->FindProfileBySmiId(fake::U2I(profile_id));
        if (profile == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
        const unsigned needed = static_cast<unsigned>(profile->starts.size());
        if (placements == nullptr) {
          *count = needed;
          return static_cast<int>(dev::kNvmlSuccess);
        }
        if (*count < needed) {
          *count = needed;
          return static_cast<int>(dev::kNvmlInsufficientSize);
        }
        for (unsigned i = 0; i < needed; ++i) {
          placements[i] = {fake::I2U(profile->starts[i]), fake::I2U(profile->placement_size)};
        }
        *count = needed;
        return static_cast<int>(dev::kNvmlSuccess);
      });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device,
                                                                 unsigned profile_id,
                                                                 nvmlGpuInstance_t* instances,
                                                                 unsigned* count) {
  return fake::Call("nvmlDeviceGetGpuInstances", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
    if (instances == nullptr || count == nullptr) {
      return static_cast<int>(dev::kNvmlInvalidArgument);
    }
    const hw::GpuModel* model = machine.ModelOf(target.handle->gpu);
    if (!fake::MigEnabled(*target.gpu) || model == nullptr || !model->mig) {
      return static_cast<int>(dev::kNvmlNotSupported);
    }
    if (model->mig->FindProfileBySmiId(fake::U2I(profile_id)) == nullptr) {
      return static_cast<int>(dev::kNvmlInvalidArgument);
    }
    unsigned n = 0;
    for (const SimGi& gi : target.gpu->gis) {
      if (gi.profile_id == fake::U2I(profile_id)) {
        instances[n++] = fake::GiHandle(target.handle->gpu, gi);
      }
    }
    *count = n;
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device,
                                                                    unsigned id,
                                                                    nvmlGpuInstance_t* instance) {
  return fake::Call("nvmlDeviceGetGpuInstanceById", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
    if (instance == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    for (const SimGi& gi : target.gpu->gis) {
      if (fake::I2U(gi.id) == id) {
        *instance = fake::GiHandle(target.handle->gpu, gi);
        return static_cast<int>(dev::kNvmlSuccess);
      }
    }
    return static_cast<int>(dev::kNvmlNotFound);
  });
}

namespace {

int CreateGi(SimMachine& machine, nvmlDevice_t device, unsigned profile_id,
             const nvmlGpuInstancePlacement_t* placement, nvmlGpuInstance_t* instance) {
  fake::Target target;
  if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
  if (instance == nullptr) return dev::kNvmlInvalidArgument;
  std::optional<int> start;
  if (placement != nullptr) {
    const hw::GpuModel* model = machine.ModelOf(target.handle->gpu);
    if (fake::MigEnabled(*target.gpu) && model != nullptr && model->mig) {
      const gpuslice::hw::GiProfile* profile =
          model->mig->FindProfileBySmiId(fake::U2I(profile_id));
      if (profile != nullptr && fake::U2I(placement->size) != profile->placement_size) {
        return dev::kNvmlInvalidArgument;
      }
    }
    start = fake::U2I(placement->start);
  }
  int id = 0;
  const int code = machine.CreateGi(target.handle->gpu, fake::U2I(profile_id), start, &id);
  if (code != dev::kNvmlSuccess) return code;
  *instance = fake::GiHandle(target.handle->gpu, *machine.Gi(target.handle->gpu, id));
  return dev::kNvmlSuccess;
}

}  // namespace

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device,
                                                                   unsigned profile_id,
                                                                   nvmlGpuInstance_t* instance) {
  return fake::Call("nvmlDeviceCreateGpuInstance", true, [&](SimMachine& machine) {
    return CreateGi(machine, device, profile_id, nullptr, instance);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned profile_id, const nvmlGpuInstancePlacement_t* placement,
    nvmlGpuInstance_t* instance) {
  return fake::Call("nvmlDeviceCreateGpuInstanceWithPlacement", true, [&](SimMachine& machine) {
    if (placement == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    return CreateGi(machine, device, profile_id, placement, instance);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t instance) {
  return fake::Call("nvmlGpuInstanceDestroy", true, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, instance, {fake::Kind::kGi}, &target)) return code;
    return machine.DestroyGi(target.handle->gpu, target.gi->id);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t instance,
                                                              nvmlGpuInstanceInfo_t* info) {
  return fake::Call("nvmlGpuInstanceGetInfo", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, instance, {fake::Kind::kGi}, &target)) return code;
    if (info == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    *info = {};
    info->device = fake::GpuHandle(target.handle->gpu);
    info->id = fake::I2U(target.gi->id);
    info->profileId = fake::I2U(target.gi->profile_id);
    info->placement = {fake::I2U(target.gi->start), fake::I2U(target.gi->size)};
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

// ---------------------------------------------------------------------------- compute instances

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t instance, unsigned profile, unsigned engine_profile,
    nvmlComputeInstanceProfileInfo_t* info) {
  return fake::Call(
      "nvmlGpuInstanceGetComputeInstanceProfileInfo", false, [&](SimMachine& machine) {
        fake::Target target;
        if (int code = fake::Resolve(machine, instance, {fake::Kind::kGi}, &target)) return code;
        if (info == nullptr || profile >= nvml::kComputeInstanceProfileCount ||
            engine_profile >= nvml::kComputeInstanceEngineProfileCount) {
          return static_cast<int>(dev::kNvmlInvalidArgument);
        }
        const gpuslice::hw::GiProfile* gi_profile = fake::GiProfileOf(machine, target);
        const gpuslice::hw::CiProfile* ci_profile =
            fake::FindCiProfile(fake::CiProfilesOf(machine, target), profile);
        if (gi_profile == nullptr || ci_profile == nullptr) {
          return static_cast<int>(dev::kNvmlNotSupported);
        }
        *info = {};
        info->id = fake::I2U(ci_profile->id);
        info->sliceCount = fake::I2U(ci_profile->slices);
        info->instanceCount = fake::I2U(ci_profile->max_instances);
        info->multiprocessorCount =
            gi_profile->compute_slices > 0
                ? fake::I2U(gi_profile->sms * ci_profile->slices / gi_profile->compute_slices)
                : 0;
        info->sharedCopyEngineCount = fake::I2U(gi_profile->engines.copy);
        info->sharedDecoderCount = fake::I2U(gi_profile->engines.decoder);
        info->sharedEncoderCount = fake::I2U(gi_profile->engines.encoder);
        info->sharedJpegCount = fake::I2U(gi_profile->engines.jpeg);
        info->sharedOfaCount = fake::I2U(gi_profile->engines.ofa);
        return static_cast<int>(dev::kNvmlSuccess);
      });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(
    nvmlGpuInstance_t instance, unsigned profile_id, nvmlComputeInstancePlacement_t* placements,
    unsigned* count) {
  return fake::Call("nvmlGpuInstanceGetComputeInstancePossiblePlacements", false,
                    [&](SimMachine& machine) {
                      fake::Target target;
                      if (int code = fake::Resolve(machine, instance, {fake::Kind::kGi}, &target)) {
                        return code;
                      }
                      if (count == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
                      const gpuslice::hw::CiProfile* profile =
                          fake::FindCiProfile(fake::CiProfilesOf(machine, target), profile_id);
                      if (profile == nullptr) return static_cast<int>(dev::kNvmlNotSupported);
                      const unsigned needed = static_cast<unsigned>(profile->starts.size());
                      if (placements == nullptr) {
                        *count = needed;
                        return static_cast<int>(dev::kNvmlSuccess);
                      }
                      if (*count < needed) {
                        *count = needed;
                        return static_cast<int>(dev::kNvmlInsufficientSize);
                      }
                      for (unsigned i = 0; i < needed; ++i) {
                        placements[i] = {fake::I2U(profile->starts[i]), fake::I2U(profile->slices)};
                      }
                      *count = needed;
                      return static_cast<int>(dev::kNvmlSuccess);
                    });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t
nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t instance, unsigned profile_id,
                                   nvmlComputeInstance_t* instances, unsigned* count) {
  return fake::Call("nvmlGpuInstanceGetComputeInstances", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, instance, {fake::Kind::kGi}, &target)) return code;
    if (instances == nullptr || count == nullptr) {
      return static_cast<int>(dev::kNvmlInvalidArgument);
    }
    if (fake::FindCiProfile(fake::CiProfilesOf(machine, target), profile_id) == nullptr) {
      return static_cast<int>(dev::kNvmlNotSupported);
    }
    unsigned n = 0;
    for (const SimCi& ci : target.gi->cis) {
      if (fake::I2U(ci.profile_id) == profile_id) {
        instances[n++] = fake::CiHandle(target.handle->gpu, *target.gi, ci);
      }
    }
    *count = n;
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(
    nvmlGpuInstance_t instance, unsigned id, nvmlComputeInstance_t* compute_instance) {
  return fake::Call("nvmlGpuInstanceGetComputeInstanceById", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, instance, {fake::Kind::kGi}, &target)) return code;
    if (compute_instance == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    for (const SimCi& ci : target.gi->cis) {
      if (fake::I2U(ci.id) == id) {
        *compute_instance = fake::CiHandle(target.handle->gpu, *target.gi, ci);
        return static_cast<int>(dev::kNvmlSuccess);
      }
    }
    return static_cast<int>(dev::kNvmlNotFound);
  });
}

namespace {

int CreateCi(SimMachine& machine, nvmlGpuInstance_t instance, unsigned profile_id,
             const nvmlComputeInstancePlacement_t* placement,
             nvmlComputeInstance_t* compute_instance) {
  fake::Target target;
  if (int code = fake::Resolve(machine, instance, {fake::Kind::kGi}, &target)) return code;
  if (compute_instance == nullptr) return dev::kNvmlInvalidArgument;
  std::optional<int> start;
  if (placement != nullptr) {
    const gpuslice::hw::CiProfile* profile =
        fake::FindCiProfile(fake::CiProfilesOf(machine, target), profile_id);
    if (profile != nullptr && fake::U2I(placement->size) != profile->slices) {
      return dev::kNvmlInvalidArgument;
    }
    start = fake::U2I(placement->start);
  }
  const int gpu = target.handle->gpu;
  const int gi_id = target.gi->id;
  int id = 0;
  const int code = machine.CreateCi(gpu, gi_id, fake::U2I(profile_id), start, &id);
  if (code != dev::kNvmlSuccess) return code;
  const SimGi& gi = *machine.Gi(gpu, gi_id);
  for (const SimCi& ci : gi.cis) {
    if (ci.id == id) *compute_instance = fake::CiHandle(gpu, gi, ci);
  }
  return dev::kNvmlSuccess;
}

}  // namespace

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(
    nvmlGpuInstance_t instance, unsigned profile_id, nvmlComputeInstance_t* compute_instance) {
  return fake::Call("nvmlGpuInstanceCreateComputeInstance", true, [&](SimMachine& machine) {
    return CreateCi(machine, instance, profile_id, nullptr, compute_instance);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(
    nvmlGpuInstance_t instance, unsigned profile_id,
    const nvmlComputeInstancePlacement_t* placement, nvmlComputeInstance_t* compute_instance) {
  return fake::Call("nvmlGpuInstanceCreateComputeInstanceWithPlacement", true,
                    [&](SimMachine& machine) {
                      if (placement == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
                      return CreateCi(machine, instance, profile_id, placement, compute_instance);
                    });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t
nvmlComputeInstanceDestroy(nvmlComputeInstance_t compute_instance) {
  return fake::Call("nvmlComputeInstanceDestroy", true, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, compute_instance, {fake::Kind::kCi}, &target)) {
      return code;
    }
    return machine.DestroyCi(target.handle->gpu, target.gi->id, target.ci->id);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(
    nvmlComputeInstance_t compute_instance, nvmlComputeInstanceInfo_t* info) {
  return fake::Call("nvmlComputeInstanceGetInfo_v2", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, compute_instance, {fake::Kind::kCi}, &target)) {
      return code;
    }
    if (info == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    *info = {};
    info->device = fake::GpuHandle(target.handle->gpu);
    info->gpuInstance = fake::GiHandle(target.handle->gpu, *target.gi);
    info->id = fake::I2U(target.ci->id);
    info->profileId = fake::I2U(target.ci->profile_id);
    info->placement = {fake::I2U(target.ci->start), fake::I2U(target.ci->size)};
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

// ---------------------------------------------------------------------------------- MIG devices

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device,
                                                                      unsigned* count) {
  return fake::Call("nvmlDeviceGetMaxMigDeviceCount", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
    if (count == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    const hw::GpuModel* model = machine.ModelOf(target.handle->gpu);
    // Every MIG device (CI) takes at least one compute slice.
    *count = fake::MigEnabled(*target.gpu) && model != nullptr && model->mig
                 ? fake::I2U(model->mig->compute_slices)
                 : 0U;
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned index, nvmlDevice_t* mig_device) {
  return fake::Call("nvmlDeviceGetMigDeviceHandleByIndex", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
    if (mig_device == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    const hw::GpuModel* model = machine.ModelOf(target.handle->gpu);
    if (!fake::MigEnabled(*target.gpu) || model == nullptr || !model->mig) {
      return static_cast<int>(dev::kNvmlNotSupported);
    }
    if (index >= fake::I2U(model->mig->compute_slices)) {
      return static_cast<int>(dev::kNvmlInvalidArgument);
    }
    const auto migs = fake::MigDevicesOf(*target.gpu);
    if (index >= migs.size()) return static_cast<int>(dev::kNvmlNotFound);
    *mig_device = fake::MigHandle(target.handle->gpu, *migs[index].first, *migs[index].second);
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device,
                                                                  unsigned* id) {
  return fake::Call("nvmlDeviceGetGpuInstanceId", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu, fake::Kind::kMig}, &target)) {
      return code;
    }
    if (id == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    if (target.ci == nullptr) return static_cast<int>(dev::kNvmlNotSupported);  // not a MIG handle
    *id = fake::I2U(target.gi->id);
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device,
                                                                      unsigned* id) {
  return fake::Call("nvmlDeviceGetComputeInstanceId", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu, fake::Kind::kMig}, &target)) {
      return code;
    }
    if (id == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    if (target.ci == nullptr) return static_cast<int>(dev::kNvmlNotSupported);
    *id = fake::I2U(target.ci->id);
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

// ------------------------------------------------------------------------------------ processes

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t device, unsigned* info_count, nvmlProcessInfo_t* infos) {
  return fake::Call("nvmlDeviceGetComputeRunningProcesses_v3", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu, fake::Kind::kMig}, &target)) {
      return code;
    }
    if (info_count == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    std::vector<const SimProcess*> processes;
    for (const SimProcess& process : target.gpu->processes) {
      if (target.ci == nullptr || (process.gi == target.gi->id && process.ci == target.ci->id)) {
        processes.push_back(&process);
      }
    }
    const unsigned needed = static_cast<unsigned>(processes.size());
    if (*info_count < needed) {
      *info_count = needed;
      return static_cast<int>(dev::kNvmlInsufficientSize);
    }
    if (needed > 0 && infos == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    for (unsigned i = 0; i < needed; ++i) {
      const SimProcess& process = *processes[i];
      infos[i] = {};
      infos[i].pid = process.pid;
      infos[i].usedGpuMemory = static_cast<unsigned long long>(process.used_mib) * fake::kMiB;
      infos[i].gpuInstanceId = process.gi < 0 ? nvml::kInvalidInstanceId : fake::I2U(process.gi);
      infos[i].computeInstanceId =
          process.ci < 0 ? nvml::kInvalidInstanceId : fake::I2U(process.ci);
    }
    *info_count = needed;
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

// ------------------------------------------------------------------------------- health figures

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                                unsigned sensor,
                                                                unsigned* celsius) {
  return fake::TelemetryCall("nvmlDeviceGetTemperature", device,
                             [&](const dev::GpuTelemetry& figures) {
                               if (sensor != nvml::kTemperatureGpu || celsius == nullptr) {
                                 return static_cast<int>(dev::kNvmlInvalidArgument);
                               }
                               if (!figures.temperature_c) {
                                 return static_cast<int>(dev::kNvmlNotSupported);
                               }
                               *celsius = fake::I2U(*figures.temperature_c);
                               return static_cast<int>(dev::kNvmlSuccess);
                             });
}

namespace {

// Watts to NVML's milliwatts.
unsigned Milliwatts(double watts) { return static_cast<unsigned>(std::lround(watts * 1000)); }

}  // namespace

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device,
                                                               unsigned* milliwatts) {
  return fake::TelemetryCall("nvmlDeviceGetPowerUsage", device,
                             [&](const dev::GpuTelemetry& figures) {
                               if (milliwatts == nullptr) {
                                 return static_cast<int>(dev::kNvmlInvalidArgument);
                               }
                               if (!figures.power_w)
                                 return static_cast<int>(dev::kNvmlNotSupported);
                               *milliwatts = Milliwatts(*figures.power_w);
                               return static_cast<int>(dev::kNvmlSuccess);
                             });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device,
                                                                       unsigned* milliwatts) {
  return fake::TelemetryCall("nvmlDeviceGetEnforcedPowerLimit", device,
                             [&](const dev::GpuTelemetry& figures) {
                               if (milliwatts == nullptr) {
                                 return static_cast<int>(dev::kNvmlInvalidArgument);
                               }
                               if (!figures.power_limit_w) {
                                 return static_cast<int>(dev::kNvmlNotSupported);
                               }
                               *milliwatts = Milliwatts(*figures.power_limit_w);
                               return static_cast<int>(dev::kNvmlSuccess);
                             });
}

// The graphics clock is the SM clock; the video clock is not simulated (NOT_SUPPORTED).
GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned type,
                                                              unsigned* mhz) {
  return fake::TelemetryCall(
      "nvmlDeviceGetClockInfo", device, [&](const dev::GpuTelemetry& figures) {
        if (mhz == nullptr || type > nvml::kClockVideo) {
          return static_cast<int>(dev::kNvmlInvalidArgument);
        }
        const std::optional<int>& clock = type == nvml::kClockMem     ? figures.memory_clock_mhz
                                          : type == nvml::kClockVideo ? std::optional<int>()
                                                                      : figures.sm_clock_mhz;
        if (!clock) return static_cast<int>(dev::kNvmlNotSupported);
        *mhz = fake::I2U(*clock);
        return static_cast<int>(dev::kNvmlSuccess);
      });
}

// NOT_SUPPORTED while MIG is on, like the driver.
GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvml::nvmlUtilization_t* utilization) {
  return fake::TelemetryCall("nvmlDeviceGetUtilizationRates", device,
                             [&](const dev::GpuTelemetry& figures) {
                               if (utilization == nullptr)
                                 return static_cast<int>(dev::kNvmlInvalidArgument);
                               if (!figures.utilization_pct || !figures.memory_utilization_pct) {
                                 return static_cast<int>(dev::kNvmlNotSupported);
                               }
                               utilization->gpu = fake::I2U(*figures.utilization_pct);
                               utilization->memory = fake::I2U(*figures.memory_utilization_pct);
                               return static_cast<int>(dev::kNvmlSuccess);
                             });
}

namespace {

nvmlReturn_t ClocksEventReasons(const char* name, nvmlDevice_t device,
                                unsigned long long* reasons) {
  return fake::TelemetryCall(name, device, [&](const dev::GpuTelemetry& figures) {
    if (reasons == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    if (!figures.throttle_reasons) return static_cast<int>(dev::kNvmlNotSupported);
    *reasons = *figures.throttle_reasons;
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

}  // namespace

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long* reasons) {
  return ClocksEventReasons("nvmlDeviceGetCurrentClocksEventReasons", device, reasons);
}

// The name drivers before the rename export (the same bits).
GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long* reasons) {
  return ClocksEventReasons("nvmlDeviceGetCurrentClocksThrottleReasons", device, reasons);
}

// Volatile counts only: the simulator keeps no lifetime (aggregate) counts, so those are
// NOT_SUPPORTED rather than made up.
GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                                   unsigned error_type,
                                                                   unsigned counter_type,
                                                                   unsigned long long* count) {
  return fake::TelemetryCall(
      "nvmlDeviceGetTotalEccErrors", device, [&](const dev::GpuTelemetry& figures) {
        if (count == nullptr || error_type > nvml::kMemoryErrorTypeUncorrected ||
            counter_type > nvml::kAggregateEcc) {
          return static_cast<int>(dev::kNvmlInvalidArgument);
        }
        const std::optional<std::uint64_t>& value = error_type == nvml::kMemoryErrorTypeCorrected
                                                        ? figures.ecc_corrected
                                                        : figures.ecc_uncorrected;
        if (!value || counter_type != nvml::kVolatileEcc) {
          return static_cast<int>(dev::kNvmlNotSupported);
        }
        *count = *value;
        return static_cast<int>(dev::kNvmlSuccess);
      });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device,
                                                                 unsigned* correctable,
                                                                 unsigned* uncorrectable,
                                                                 unsigned* pending,
                                                                 unsigned* failure) {
  return fake::TelemetryCall(
      "nvmlDeviceGetRemappedRows", device, [&](const dev::GpuTelemetry& figures) {
        if (correctable == nullptr || uncorrectable == nullptr || pending == nullptr ||
            failure == nullptr) {
          return static_cast<int>(dev::kNvmlInvalidArgument);
        }
        if (!figures.remapped_rows_correctable || !figures.remapped_rows_uncorrectable ||
            !figures.remap_pending || !figures.remap_failure) {
          return static_cast<int>(dev::kNvmlNotSupported);
        }
        *correctable = fake::I2U(*figures.remapped_rows_correctable);
        *uncorrectable = fake::I2U(*figures.remapped_rows_uncorrectable);
        *pending = *figures.remap_pending ? 1U : 0U;
        *failure = *figures.remap_failure ? 1U : 0U;
        return static_cast<int>(dev::kNvmlSuccess);
      });
}

// ----------------------------------------------------------------------------------- Xid events

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlEventSetCreate(nvml::nvmlEventSet_t* set) {
  return fake::Call("nvmlEventSetCreate", false, [&](SimMachine&) {
    if (set == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    auto owned = std::make_unique<fake::EventSet>();
    const void* key = owned.get();
    fake::Lib().event_sets.emplace(key, std::move(owned));
    *set = reinterpret_cast<nvml::nvmlEventSet_t>(const_cast<void*>(key));
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

// Only Xid critical errors are simulated: other event types are NOT_SUPPORTED. The driver delivers
// the events that happen after the registration, so the GPU's Xids already waiting in the state are
// dropped.
GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                                unsigned long long event_types,
                                                                nvml::nvmlEventSet_t set) {
  return fake::Call("nvmlDeviceRegisterEvents", true, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
    fake::EventSet* events = fake::FindEventSet(set);
    if (events == nullptr || event_types == 0) return static_cast<int>(dev::kNvmlInvalidArgument);
    if ((event_types & ~nvml::kEventTypeXidCriticalError) != 0) {
      return static_cast<int>(dev::kNvmlNotSupported);
    }
    const int gpu = target.handle->gpu;
    std::erase_if(machine.state().xids, [&](const SimXid& xid) { return xid.gpu == gpu; });
    events->gpus.insert(gpu);
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

// Never waits: TIMEOUT at once when no event is waiting for the set's GPUs. Events of other GPUs
// stay in the state.
GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvml::nvmlEventSet_t set,
                                                           nvml::nvmlEventData_t* data,
                                                           unsigned /*timeout_ms*/) {
  return fake::Call("nvmlEventSetWait_v2", true, [&](SimMachine& machine) {
    fake::EventSet* events = fake::FindEventSet(set);
    if (events == nullptr || data == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    if (events->pending.empty()) {
      std::vector<SimXid>& waiting = machine.state().xids;
      std::vector<SimXid> others;
      for (const SimXid& xid : waiting) {
        if (events->gpus.count(xid.gpu) != 0) {
          events->pending.push_back(xid);
        } else {
          others.push_back(xid);
        }
      }
      waiting = std::move(others);
    }
    if (events->pending.empty()) return static_cast<int>(dev::kNvmlTimeout);
    const SimXid xid = events->pending.front();
    events->pending.pop_front();
    *data = {};
    data->device = fake::GpuHandle(xid.gpu);
    data->eventType = nvml::kEventTypeXidCriticalError;
    data->eventData = xid.xid;
    data->gpuInstanceId = xid.gi < 0 ? nvml::kInvalidInstanceId : fake::I2U(xid.gi);
    data->computeInstanceId = xid.ci < 0 ? nvml::kInvalidInstanceId : fake::I2U(xid.ci);
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlEventSetFree(nvml::nvmlEventSet_t set) {
  return fake::Call("nvmlEventSetFree", false, [&](SimMachine&) {
    return fake::Lib().event_sets.erase(set) == 1 ? static_cast<int>(dev::kNvmlSuccess)
                                                  : static_cast<int>(dev::kNvmlInvalidArgument);
  });
}

// ------------------------------------------------------------------------------------------ GPM

// Supported where the simulator gives GPM activity (Hopper and later, unless "gpm" is listed as
// unsupported).
GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device,
                                                                 nvml::nvmlGpmSupport_t* support) {
  return fake::Call("nvmlGpmQueryDeviceSupport", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
    if (support == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    if (support->version != nvml::kGpmSupportVersion) {
      return static_cast<int>(dev::kNvmlArgumentVersionMismatch);
    }
    dev::Activity activity;
    const int code = machine.SampleActivity(target.handle->gpu, std::nullopt, &activity);
    if (code != dev::kNvmlSuccess && code != dev::kNvmlNotSupported) return code;
    support->isSupportedDevice = code == dev::kNvmlSuccess ? 1U : 0U;
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvml::nvmlGpmSample_t* sample) {
  return fake::Call("nvmlGpmSampleAlloc", false, [&](SimMachine&) {
    if (sample == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    auto owned = std::make_unique<fake::GpmSample>();
    const void* key = owned.get();
    fake::Lib().gpm_samples.emplace(key, std::move(owned));
    *sample = reinterpret_cast<nvml::nvmlGpmSample_t>(const_cast<void*>(key));
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlGpmSampleFree(nvml::nvmlGpmSample_t sample) {
  return fake::Call("nvmlGpmSampleFree", false, [&](SimMachine&) {
    return fake::Lib().gpm_samples.erase(sample) == 1 ? static_cast<int>(dev::kNvmlSuccess)
                                                      : static_cast<int>(dev::kNvmlInvalidArgument);
  });
}

GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device,
                                                        nvml::nvmlGpmSample_t sample) {
  return fake::Call("nvmlGpmSampleGet", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
    return fake::TakeGpmSample(machine, target.handle->gpu, std::nullopt, sample);
  });
}

// NOT_SUPPORTED while MIG is off, NOT_FOUND for a GI that does not exist (the simulator's codes).
GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device,
                                                           unsigned gpu_instance_id,
                                                           nvml::nvmlGpmSample_t sample) {
  return fake::Call("nvmlGpmMigSampleGet", false, [&](SimMachine& machine) {
    fake::Target target;
    if (int code = fake::Resolve(machine, device, {fake::Kind::kGpu}, &target)) return code;
    return fake::TakeGpmSample(machine, target.handle->gpu, fake::U2I(gpu_instance_id), sample);
  });
}

// The simulator's figures are instant: a metric between two samples is sample2's. Both samples
// must be of the same device; metrics other than SM_UTIL, SM_OCCUPANCY and DRAM_BW_UTIL answer
// NOT_SUPPORTED in their nvmlReturn.
GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvml::nvmlGpmMetricsGet_t* metrics) {
  return fake::Call("nvmlGpmMetricsGet", false, [&](SimMachine&) {
    if (metrics == nullptr) return static_cast<int>(dev::kNvmlInvalidArgument);
    if (metrics->version != nvml::kGpmMetricsGetVersion) {
      return static_cast<int>(dev::kNvmlArgumentVersionMismatch);
    }
    const fake::GpmSample* first = fake::FindGpmSample(metrics->sample1);
    const fake::GpmSample* second = fake::FindGpmSample(metrics->sample2);
    if (first == nullptr || second == nullptr || first == second || !first->taken ||
        !second->taken || first->gpu != second->gpu || first->gi != second->gi ||
        metrics->numMetrics > nvml::kGpmMetricMax) {
      return static_cast<int>(dev::kNvmlInvalidArgument);
    }
    for (unsigned i = 0; i < metrics->numMetrics; ++i) {
      nvml::nvmlGpmMetric_t& metric = metrics->metrics[i];
      metric.nvmlReturn = dev::kNvmlSuccess;
      metric.metricInfo = {};
      switch (metric.metricId) {
        case nvml::kGpmMetricSmUtil:
          metric.value = second->activity.sm_active_pct;
          break;
        case nvml::kGpmMetricSmOccupancy:
          metric.value = second->activity.sm_occupancy_pct;
          break;
        case nvml::kGpmMetricDramBwUtil:
          metric.value = second->activity.dram_bandwidth_pct;
          break;
        default:
          metric.value = 0;
          metric.nvmlReturn = dev::kNvmlNotSupported;
      }
    }
    return static_cast<int>(dev::kNvmlSuccess);
  });
}

// ------------------------------------------------------------------------------------ test hook

// Resets GPU `index` like `nvidia-smi --gpu-reset -i index` (NVML has no public reset).
GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t gpusliceTestResetGpu(unsigned index) {
  return fake::Call("gpusliceTestResetGpu", true,
                    [&](SimMachine& machine) { return machine.ResetGpu(fake::U2I(index)); });
}

// Ends simulated process `pid` (SimBackend::TerminateProcess); NOT_FOUND if there is none.
GPUSLICE_FAKE_NVML_EXPORT nvmlReturn_t gpusliceTestTerminateProcess(unsigned pid) {
  return fake::Call("gpusliceTestTerminateProcess", true,
                    [&](SimMachine& machine) { return machine.RemoveProcess(pid); });
}

// Every exported NVML function has exactly the type NvmlBackend calls it through.
#define GPUSLICE_FAKE_NVML_CHECK(ret, name, params)                 \
  static_assert(std::is_same_v<decltype(&::name), nvml::name##_fn>, \
                #name " does not match its declaration in src/device/nvml_api.h");
GPUSLICE_NVML_FUNCTIONS(GPUSLICE_FAKE_NVML_CHECK)
GPUSLICE_NVML_HEALTH_FUNCTIONS(GPUSLICE_FAKE_NVML_CHECK)
#undef GPUSLICE_FAKE_NVML_CHECK
static_assert(std::is_same_v<decltype(&::nvmlErrorString), nvml::nvmlErrorString_fn>);
static_assert(std::is_same_v<decltype(&::nvmlDeviceGetGpuInstanceProfileInfoV),
                             nvml::nvmlDeviceGetGpuInstanceProfileInfoV_fn>);
static_assert(std::is_same_v<decltype(&::gpusliceTestResetGpu), nvml::gpusliceTestResetGpu_fn>);
static_assert(std::is_same_v<decltype(&::gpusliceTestTerminateProcess),
                             nvml::gpusliceTestTerminateProcess_fn>);
