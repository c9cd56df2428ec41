// interposer.h (src/shim/, internal to libgpuslice-cuda.so): what the interposer's files share.
//   interposer.cc           settings, the real driver and NVML loaded, the slice's accounting
//                           opened, cuInit, dlsym and its entry;
//   interposer_hooks.cc     the table of hooks and what cuGetProcAddress hands out;
//   interposer_contexts.cc  contexts: what each takes (measured through NVML), the context hooks;
//   interposer_memory.cc    device memory against the VRAM cap, cuMemGetInfo and NVML's queries;
//   interposer_launch.cc    launches through the throttle (the compute share).
// Everything declared here but the hooks themselves is hidden (not exported from the library).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "accounting.h"
#include "config.h"
#include "cuda_api.h"
#include "driver.h"
#include "throttle.h"

#define GPUSLICE_EXPORT extern "C" __attribute__((visibility("default")))

// The hooks, exported under the driver's names, each of its driver type (a definition that
// differs does not compile).
extern "C" {
#define GPUSLICE_DECLARE_HOOK(name, type) std::remove_pointer_t<gpuslice::cuda::type> name;
GPUSLICE_DECLARE_HOOK(cuInit, cuInit_t)
GPUSLICE_DECLARE_HOOK(cuGetProcAddress, cuGetProcAddress_t)
GPUSLICE_DECLARE_HOOK(cuGetProcAddress_v2, cuGetProcAddress_v2_t)
GPUSLICE_DECLARE_HOOK(cuCtxCreate_v2, cuCtxCreate_v2_t)
GPUSLICE_DECLARE_HOOK(cuCtxCreate_v3, cuCtxCreate_v3_t)
GPUSLICE_DECLARE_HOOK(cuCtxCreate_v4, cuCtxCreate_v4_t)
GPUSLICE_DECLARE_HOOK(cuCtxDestroy_v2, cuCtxDestroy_v2_t)
GPUSLICE_DECLARE_HOOK(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain_t)
GPUSLICE_DECLARE_HOOK(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease_v2_t)
GPUSLICE_DECLARE_HOOK(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset_v2_t)
GPUSLICE_DECLARE_HOOK(cuMemGetInfo_v2, cuMemGetInfo_v2_t)
GPUSLICE_DECLARE_HOOK(cuMemAlloc_v2, cuMemAlloc_v2_t)
GPUSLICE_DECLARE_HOOK(cuMemAllocPitch_v2, cuMemAllocPitch_v2_t)
GPUSLICE_DECLARE_HOOK(cuMemAllocManaged, cuMemAllocManaged_t)
GPUSLICE_DECLARE_HOOK(cuMemFree_v2, cuMemFree_v2_t)
GPUSLICE_DECLARE_HOOK(cuMemAllocAsync, cuMemAllocAsync_t)
GPUSLICE_DECLARE_HOOK(cuMemAllocAsync_ptsz, cuMemAllocAsync_t)
GPUSLICE_DECLARE_HOOK(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_t)
GPUSLICE_DECLARE_HOOK(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_t)
GPUSLICE_DECLARE_HOOK(cuMemFreeAsync, cuMemFreeAsync_t)
GPUSLICE_DECLARE_HOOK(cuMemFreeAsync_ptsz, cuMemFreeAsync_t)
GPUSLICE_DECLARE_HOOK(cuArrayCreate_v2, cuArrayCreate_v2_t)
GPUSLICE_DECLARE_HOOK(cuArray3DCreate_v2, cuArray3DCreate_v2_t)
GPUSLICE_DECLARE_HOOK(cuArrayDestroy, cuArrayDestroy_t)
GPUSLICE_DECLARE_HOOK(cuMipmappedArrayCreate, cuMipmappedArrayCreate_t)
GPUSLICE_DECLARE_HOOK(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy_t)
GPUSLICE_DECLARE_HOOK(cuMemCreate, cuMemCreate_t)
GPUSLICE_DECLARE_HOOK(cuMemRelease, cuMemRelease_t)
GPUSLICE_DECLARE_HOOK(cuLaunchKernel, cuLaunchKernel_t)
GPUSLICE_DECLARE_HOOK(cuLaunchKernel_ptsz, cuLaunchKernel_t)
GPUSLICE_DECLARE_HOOK(cuLaunchKernelEx, cuLaunchKernelEx_t)
GPUSLICE_DECLARE_HOOK(cuLaunchKernelEx_ptsz, cuLaunchKernelEx_t)
GPUSLICE_DECLARE_HOOK(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_t)
GPUSLICE_DECLARE_HOOK(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel_t)
GPUSLICE_DECLARE_HOOK(cuLaunchCooperativeKernelMultiDevice, cuLaunchCooperativeKernelMultiDevice_t)
GPUSLICE_DECLARE_HOOK(cuGraphLaunch, cuGraphLaunch_t)
GPUSLICE_DECLARE_HOOK(cuGraphLaunch_ptsz, cuGraphLaunch_t)
GPUSLICE_DECLARE_HOOK(cuLaunch, cuLaunch_t)
GPUSLICE_DECLARE_HOOK(cuLaunchGrid, cuLaunchGrid_t)
GPUSLICE_DECLARE_HOOK(cuLaunchGridAsync, cuLaunchGridAsync_t)
GPUSLICE_DECLARE_HOOK(nvmlDeviceGetMemoryInfo, nvml::nvmlDeviceGetMemoryInfo_t)
GPUSLICE_DECLARE_HOOK(nvmlDeviceGetMemoryInfo_v2, nvml::nvmlDeviceGetMemoryInfo_v2_t)
#undef GPUSLICE_DECLARE_HOOK
}

#pragma GCC visibility push(hidden)

namespace gpuslice::shim {

using DlsymFunction = void* (*)(void*, const char*);

constexpr int kMaxDevices = 64;

// ---------------------------------------------------------------------------------------------
// Settings, the real driver, the accounting (interposer.cc).

extern Config g_config;
extern std::atomic<int> g_loaded;  // 2 once LoadOnce is done
extern bool g_active;
extern std::atomic<int> g_accounting_state;  // 0 not yet, 1 open, 2 failed (CUDA refused)
extern Accounting g_accounting;
extern Throttle g_throttle;

void Log(int level, const char* format, ...) __attribute__((format(printf, 2, 3)));

inline double Mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

void LoadSlow();

// Loads the settings and the real driver once. Hooks call it first; after the first call it is
// one load, inlined into every hook.
inline void LoadOnce() {
  if (g_loaded.load(std::memory_order_acquire) != 2) [[unlikely]]
    LoadSlow();
}

bool OpenAccounting();

// Opens the slice's accounting the first time a hook needs it. False: CUDA is refused. After
// the first call it is one load, inlined into every hook.
inline bool EnsureAccounting() {
  const int state = g_accounting_state.load(std::memory_order_acquire);
  if (state != 0) [[likely]]
    return state == 1;
  return OpenAccounting();
}

// The real NVML: for the memory queries answered with the slice, and for measuring what a new
// context takes.
struct Nvml {
  cuda::nvml::nvmlDeviceGetMemoryInfo_t get_memory = nullptr;
  cuda::nvml::nvmlDeviceGetMemoryInfo_v2_t get_memory_v2 = nullptr;
  cuda::nvml::nvmlDeviceGetUUID_t get_uuid = nullptr;
  cuda::nvml::nvmlInit_v2_t init = nullptr;
  cuda::nvml::nvmlDeviceGetHandleByUUID_t get_handle_by_uuid = nullptr;
};
extern Nvml g_nvml;
void LoadNvml();

// NVML loaded and initialised for measuring contexts, once per process (the reference is kept,
// so an application's own nvmlShutdown does not end it): "" when ready, else why not.
const std::string& NvmlForMeasuring();

// ---------------------------------------------------------------------------------------------
// The hook table: what cuGetProcAddress and dlsym hand out instead of the driver's functions
// (interposer_hooks.cc).

struct Hook {
  const char* name;      // the exported name ("cuMemAlloc_v2")
  const char* base;      // the name cuGetProcAddress is asked for ("cuMemAlloc")
  int min_version;       // the first CUDA version whose cuGetProcAddress gives this variant
  bool per_thread;       // a _ptsz variant
  void* hook;            // our function
  void* real;            // the driver's, as dlsym gives it (nullptr: the driver lacks it)
  void (*adopt)(void*);  // makes the hook call another pointer for the same function
};

Hook* Hooks(std::size_t* count);

// ---------------------------------------------------------------------------------------------
// Device memory (interposer_memory.cc; contexts count too).

// This process's device-memory calls (allocations, frees, contexts made and destroyed) begun
// and ended. A context's measurement is believed only when no other such call ran meanwhile.
extern std::atomic<std::uint64_t> g_memory_calls_begun;
extern std::atomic<std::uint64_t> g_memory_calls_ended;

class MemoryCall {
 public:
  MemoryCall() { g_memory_calls_begun.fetch_add(1); }
  ~MemoryCall() { g_memory_calls_ended.fetch_add(1); }
  MemoryCall(const MemoryCall&) = delete;
  MemoryCall& operator=(const MemoryCall&) = delete;
};

// Allocations this process holds, by kind, with the context they belong to.
struct Allocation {
  std::uint64_t bytes = 0;
  cuda::CUcontext context = nullptr;
};
struct Tables {
  std::mutex mutex;
  std::unordered_map<std::uint64_t, Allocation> pointers;  // cuMemAlloc*, managed, async, pool
  std::unordered_map<std::uint64_t, Allocation> arrays;
  std::unordered_map<std::uint64_t, Allocation> mipmaps;
  std::unordered_map<std::uint64_t, Allocation> handles;        // cuMemCreate
  std::unordered_map<cuda::CUcontext, std::uint64_t> contexts;  // reservations counted
  std::mutex primary_mutex;
  cuda::CUcontext primary[kMaxDevices] = {};
  int primary_refs[kMaxDevices] = {};
};
extern Tables* g_tables;  // never freed: hooks may run during exit

// Rate-limited: one line per second at most, with how many were not written.
void LogRefusal(const char* call, std::uint64_t bytes);

// After the driver made an object (or a context) counted at `counted` bytes that really takes
// `actual`: the difference is counted or given back. False when the extra bytes pass the cap
// (the caller then destroys the object and gives `counted` back).
inline bool Correct(std::uint64_t counted, std::uint64_t actual, bool context = false) {
  if (actual > counted) return g_accounting.Reserve(actual - counted, context);
  if (actual < counted) g_accounting.Release(counted - actual, context);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Launches (interposer_launch.cc).

// Adds the launches counted in this process to the slice's accounting.
void FlushLaunches();

}  // namespace gpuslice::shim

#pragma GCC visibility pop

// Every hook starts with this: pass straight on when the interposer is inert, refuse CUDA when
// the limits cannot be kept.
#define GPUSLICE_ENTER(field, ...)                                                       \
  ::gpuslice::shim::LoadOnce();                                                          \
  if (::gpuslice::shim::g_driver.field == nullptr) return CUDA_ERROR_NOT_INITIALIZED;    \
  if (!::gpuslice::shim::g_active) return ::gpuslice::shim::g_driver.field(__VA_ARGS__); \
  if (!::gpuslice::shim::EnsureAccounting()) return CUDA_ERROR_NOT_INITIALIZED;
