// The interposer's contexts (interposer.h): what each one counts against the slice's cap (what
// it was measured to take through NVML, or the configured reservation), created, retained,
// released and destroyed, with the allocations made in them.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "interposer.h"

namespace gpuslice::shim {
namespace {

using namespace gpuslice::cuda;  // NOLINT: the driver's names, as applications write them
using cuda::nvml::NVML_SUCCESS;
using cuda::nvml::nvmlDevice_t;
using cuda::nvml::nvmlMemory_t;
using cuda::nvml::nvmlReturn_t;

// Uncounts a context's reservation and every allocation made in it (the driver frees them with
// the context).
void ForgetContext(CUcontext context) {
  std::uint64_t bytes = 0;
  std::uint64_t reservation = 0;
  {
    std::lock_guard<std::mutex> hold(g_tables->mutex);
    for (auto* table :
         {&g_tables->pointers, &g_tables->arrays, &g_tables->mipmaps, &g_tables->handles}) {
      for (auto it = table->begin(); it != table->end();) {
        if (it->second.context == context) {
          bytes += it->second.bytes;
          it = table->erase(it);
        } else {
          ++it;
        }
      }
    }
    if (auto it = g_tables->contexts.find(context); it != g_tables->contexts.end()) {
      reservation = it->second;
      g_tables->contexts.erase(it);
    }
  }
  if (bytes > 0) g_accounting.Release(bytes, false);
  if (reservation > 0) g_accounting.Release(reservation, true);
  g_throttle.ForgetContext(context);
}

// CUDA device `device`'s UUID as NVML and nvidia-smi write it ("GPU-xxxxxxxx-xxxx-..."), into
// `text` (kGpuUuidSize bytes). False when the driver cannot say.
bool DeviceUuid(CUdevice device, char* text) {
  if (g_driver.cuDeviceGetUuid == nullptr) return false;
  CUuuid uuid{};
  if (g_driver.cuDeviceGetUuid(&uuid, device) != CUDA_SUCCESS) return false;
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  std::snprintf(text, kGpuUuidSize,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return true;
}

// The slice's GPU, the first time a context is made on one.
void NoteDevice(CUdevice device) {
  char text[kGpuUuidSize];
  if (DeviceUuid(device, text)) g_accounting.SetGpuUuid(text);
}

// ---------------------------------------------------------------------------------------------
// What a context really takes: NVML's free memory on its device just before and just after it
// is created. Unless GPUSLICE_CONTEXT_RESERVE_MIB is set, that is what the context counts; the
// configured reservation is counted first, then corrected to the measured cost.

constexpr std::uint64_t kMostAContextTakes = 8ull << 30;  // a larger drop is someone else's

// A measurement begun: the device and its free memory before the context, and this process's
// memory calls then. `device` is nullptr when it cannot be measured, and `why` says why.
struct ContextMeter {
  nvmlDevice_t device = nullptr;
  std::uint64_t free_before = 0;
  std::uint64_t calls_begun = 0;
  std::uint64_t calls_ended = 0;
  std::string why;
};

// NVML's handle of CUDA device `device`, found by its UUID (a MIG device's by "MIG-" and the
// same digits); nullptr with *why set when NVML knows no such device.
nvmlDevice_t NvmlDeviceOf(CUdevice device, std::string* why) {
  char uuid[kGpuUuidSize];
  if (!DeviceUuid(device, uuid)) {
    *why = "cuDeviceGetUuid failed for device " + std::to_string(device);
    return nullptr;
  }
  nvmlDevice_t handle = nullptr;
  if (g_nvml.get_handle_by_uuid(uuid, &handle) == NVML_SUCCESS) return handle;
  std::memcpy(uuid, "MIG", 3);
  if (g_nvml.get_handle_by_uuid(uuid, &handle) == NVML_SUCCESS) return handle;
  *why = std::string("NVML has no device ") + (uuid + 4) + " (as GPU- or MIG-)";
  return nullptr;
}

// Called inside the context's MemoryCall, just before the driver is asked.
ContextMeter StartMeasuring(CUdevice device) {
  ContextMeter meter;
  meter.why = NvmlForMeasuring();
  if (!meter.why.empty()) return meter;
  const nvmlDevice_t handle = NvmlDeviceOf(device, &meter.why);
  if (handle == nullptr) return meter;
  meter.calls_ended = g_memory_calls_ended.load();
  meter.calls_begun = g_memory_calls_begun.load();
  if (meter.calls_begun - meter.calls_ended != 1) {
    meter.why = "another thread of this process was allocating or freeing device memory";
    return meter;
  }
  nvmlMemory_t memory{};
  if (const nvmlReturn_t r = g_nvml.get_memory(handle, &memory); r != NVML_SUCCESS) {
    meter.why = "nvmlDeviceGetMemoryInfo failed with " + std::to_string(r);
    return meter;
  }
  meter.device = handle;
  meter.free_before = memory.free;
  return meter;
}

// What the context just created took, or 0 with *why set when the figure cannot be believed.
std::uint64_t MeasuredCost(const ContextMeter& meter, std::string* why) {
  if (meter.device == nullptr) {
    *why = meter.why;
    return 0;
  }
  nvmlMemory_t memory{};
  if (const nvmlReturn_t r = g_nvml.get_memory(meter.device, &memory); r != NVML_SUCCESS) {
    *why = "nvmlDeviceGetMemoryInfo failed with " + std::to_string(r);
    return 0;
  }
  if (g_memory_calls_begun.load() != meter.calls_begun ||
      g_memory_calls_ended.load() != meter.calls_ended) {
    *why = "another thread of this process allocated or freed device memory meanwhile";
    return 0;
  }
  if (memory.free >= meter.free_before) {
    *why = "the device's free memory did not drop";
    return 0;
  }
  const std::uint64_t cost = meter.free_before - memory.free;
  if (cost > kMostAContextTakes) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "the device's free memory dropped by %.0f MiB, more than a context takes (%.0f "
                  "MiB): other processes' memory",
                  Mib(cost), Mib(kMostAContextTakes));
    *why = text;
    return 0;
  }
  return cost;
}

// What a context just created counts: its measured cost, else the configured reservation (said
// once in the log). The first measurement is said once too.
std::uint64_t ContextCost(const ContextMeter& meter) {
  static std::atomic<bool> said_measured{false};
  static std::atomic<bool> said_fallback{false};
  std::string why;
  std::uint64_t cost = MeasuredCost(meter, &why);
  if (cost > 0) {
    Log(said_measured.exchange(true) ? 2 : 1,
        "a CUDA context took %.0f MiB of device memory (NVML's free memory before and after its "
        "creation); the slice counts it as that",
        Mib(cost));
  } else {
    cost = g_config.context_reserve_bytes;
    Log(said_fallback.exchange(true) ? 2 : 1,
        "cannot measure what a CUDA context takes (%s); it is counted as the configured %.0f MiB "
        "(GPUSLICE_CONTEXT_RESERVE_MIB)",
        why.c_str(), Mib(cost));
  }
  g_accounting.SetContextBytes(cost);
  return cost;
}

// The undoing of a context refused once made.
void DestroyContext(CUcontext context) {
  if (g_driver.cuCtxDestroy_v2 != nullptr) g_driver.cuCtxDestroy_v2(context);
}
void ReleasePrimaryContext(CUdevice device) {
  if (g_driver.cuDevicePrimaryCtxRelease_v2 != nullptr) {
    g_driver.cuDevicePrimaryCtxRelease_v2(device);
  }
}

// What the slice may still count before its cap.
std::uint64_t Left() {
  const std::uint64_t used = g_accounting.Used();
  return used < g_accounting.Cap() ? g_accounting.Cap() - used : 0;
}

// Creates a context with `call`, counting what it takes: the configured reservation before the
// driver is asked, then, unless that was set explicitly, corrected to the measured cost. A
// context whose cost does not fit under the cap is undone (`undo`: destroyed, or the primary
// context released) and refused with CUDA_ERROR_OUT_OF_MEMORY.
template <typename Call, typename Undo>
CUresult CreateContext(CUcontext* context, CUdevice device, Call&& call, Undo&& undo) {
  MemoryCall in_progress;
  const std::uint64_t reserve = g_config.context_reserve_bytes;
  if (!g_accounting.Reserve(reserve, true)) {
    LogRefusal("a CUDA context", reserve);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const bool measure = !g_config.context_reserve_set;
  const ContextMeter meter = measure ? StartMeasuring(device) : ContextMeter{};
  const CUresult result = call();
  if (result != CUDA_SUCCESS || context == nullptr) {
    g_accounting.Release(reserve, true);
    return result;
  }
  const std::uint64_t cost = measure ? ContextCost(meter) : reserve;
  if (!Correct(reserve, cost, true)) {
    undo();
    g_accounting.Release(reserve, true);
    Log(1,
        "refused a CUDA context: it took %.0f MiB (measured once made), more than the %.0f MiB "
        "left of slice %s's %.0f MiB cap; the context was destroyed",
        Mib(cost), Mib(Left()), g_config.slice_id.c_str(), Mib(g_accounting.Cap()));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  {
    std::lock_guard<std::mutex> hold(g_tables->mutex);
    g_tables->contexts[*context] += cost;
  }
  NoteDevice(device);
  return result;
}

}  // namespace
}  // namespace gpuslice::shim

using namespace gpuslice::cuda;  // NOLINT
namespace cuda = gpuslice::cuda;
namespace shim = gpuslice::shim;
using shim::g_driver;

// ---------------------------------------------------------------------------------------------
// Contexts.

GPUSLICE_EXPORT CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice device) {
  GPUSLICE_ENTER(cuCtxCreate_v2, ctx, flags, device)
  return shim::CreateContext(
      ctx, device, [&] { return g_driver.cuCtxCreate_v2(ctx, flags, device); },
      [&] { shim::DestroyContext(*ctx); });
}

GPUSLICE_EXPORT CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam_st* params,
                                        int numParams, unsigned int flags, CUdevice device) {
  GPUSLICE_ENTER(cuCtxCreate_v3, ctx, params, numParams, flags, device)
  return shim::CreateContext(
      ctx, device, [&] { return g_driver.cuCtxCreate_v3(ctx, params, numParams, flags, device); },
      [&] { shim::DestroyContext(*ctx); });
}

GPUSLICE_EXPORT CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams_st* params,
                                        unsigned int flags, CUdevice device) {
  GPUSLICE_ENTER(cuCtxCreate_v4, ctx, params, flags, device)
  return shim::CreateContext(
      ctx, device, [&] { return g_driver.cuCtxCreate_v4(ctx, params, flags, device); },
      [&] { shim::DestroyContext(*ctx); });
}

GPUSLICE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  GPUSLICE_ENTER(cuCtxDestroy_v2, ctx)
  shim::MemoryCall in_progress;
  const CUresult result = g_driver.cuCtxDestroy_v2(ctx);
  if (result == CUDA_SUCCESS) shim::ForgetContext(ctx);
  return result;
}

GPUSLICE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  GPUSLICE_ENTER(cuDevicePrimaryCtxRetain, ctx, device)
  if (device < 0 || device >= shim::kMaxDevices) {
    return g_driver.cuDevicePrimaryCtxRetain(ctx, device);
  }
  std::lock_guard<std::mutex> hold(shim::g_tables->primary_mutex);
  if (shim::g_tables->primary_refs[device] > 0) {
    const CUresult result = g_driver.cuDevicePrimaryCtxRetain(ctx, device);
    if (result == CUDA_SUCCESS) ++shim::g_tables->primary_refs[device];
    return result;
  }
  // The first retain creates the primary context; a release destroys it again.
  const CUresult result = shim::CreateContext(
      ctx, device, [&] { return g_driver.cuDevicePrimaryCtxRetain(ctx, device); },
      [&] { shim::ReleasePrimaryContext(device); });
  if (result == CUDA_SUCCESS) {
    shim::g_tables->primary[device] = *ctx;
    shim::g_tables->primary_refs[device] = 1;
  }
  return result;
}

GPUSLICE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  GPUSLICE_ENTER(cuDevicePrimaryCtxRelease_v2, device)
  if (device < 0 || device >= shim::kMaxDevices) {
    return g_driver.cuDevicePrimaryCtxRelease_v2(device);
  }
  std::lock_guard<std::mutex> hold(shim::g_tables->primary_mutex);
  shim::MemoryCall in_progress;
  const CUresult result = g_driver.cuDevicePrimaryCtxRelease_v2(device);
  if (result == CUDA_SUCCESS && shim::g_tables->primary_refs[device] > 0 &&
      --shim::g_tables->primary_refs[device] == 0) {
    shim::ForgetContext(shim::g_tables->primary[device]);  // destroyed with its last release
    shim::g_tables->primary[device] = nullptr;
  }
  return result;
}

GPUSLICE_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice device) {
  GPUSLICE_ENTER(cuDevicePrimaryCtxReset_v2, device)
  if (device < 0 || device >= shim::kMaxDevices) {
    return g_driver.cuDevicePrimaryCtxReset_v2(device);
  }
  std::lock_guard<std::mutex> hold(shim::g_tables->primary_mutex);
  shim::MemoryCall in_progress;
  const CUresult result = g_driver.cuDevicePrimaryCtxReset_v2(device);
  if (result == CUDA_SUCCESS && shim::g_tables->primary[device] != nullptr) {
    shim::ForgetContext(shim::g_tables->primary[device]);
    shim::g_tables->primary[device] = nullptr;
    shim::g_tables->primary_refs[device] = 0;
  }
  return result;
}
