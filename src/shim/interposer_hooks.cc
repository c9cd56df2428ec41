// The interposer's table of hooks (interposer.h), and cuGetProcAddress: what it and dlsym hand
// out instead of the driver's functions, the hook for a pointer the driver answers with.
#include <cstring>
#include <utility>

#include "interposer.h"

namespace gpuslice::shim {
namespace {

using namespace gpuslice::cuda;  // NOLINT: the driver's names, as applications write them

// The hook for what cuGetProcAddress answered: by the pointer when it is one dlsym gave, else by
// the name and version (a driver may answer with a pointer of its own for the same function).
void* HookForProc(const char* symbol, void* function, int version, cuuint64_t flags) {
  if (!g_active || function == nullptr || symbol == nullptr) return function;
  std::size_t count = 0;
  Hook* hooks = Hooks(&count);
  for (std::size_t i = 0; i < count; ++i) {
    if (hooks[i].real == function) return hooks[i].hook;
  }
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  // The variant of the same per-thread kind first, then the newest the version allows.
  auto rank = [&](const Hook& h) { return std::pair(h.per_thread == per_thread, h.min_version); };
  Hook* best = nullptr;
  for (std::size_t i = 0; i < count; ++i) {
    Hook& h = hooks[i];
    if (std::strcmp(h.base, symbol) != 0 || h.min_version > version) continue;
    if (h.per_thread && !per_thread) continue;
    if (best == nullptr || rank(h) > rank(*best)) best = &h;
  }
  if (best == nullptr) return function;
  Log(2, "cuGetProcAddress(%s, %d) gave a pointer dlsym did not; hooking it as %s", symbol, version,
      best->name);
  best->adopt(function);
  best->real = function;
  return best->hook;
}

}  // namespace
}  // namespace gpuslice::shim

using namespace gpuslice::cuda;  // NOLINT
namespace cuda = gpuslice::cuda;
namespace shim = gpuslice::shim;
using shim::g_driver;

GPUSLICE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                          cuuint64_t flags) {
  shim::LoadOnce();
  if (g_driver.cuGetProcAddress == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result = g_driver.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
  if (result == CUDA_SUCCESS && pfn != nullptr) {
    *pfn = shim::HookForProc(symbol, *pfn, cudaVersion, flags);
  }
  return result;
}

GPUSLICE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                             cuuint64_t flags,
                                             CUdriverProcAddressQueryResult* symbolStatus) {
  shim::LoadOnce();
  if (g_driver.cuGetProcAddress_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result =
      g_driver.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (result == CUDA_SUCCESS && pfn != nullptr) {
    *pfn = shim::HookForProc(symbol, *pfn, cudaVersion, flags);
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// The table of hooks.

namespace gpuslice::shim {

#define GPUSLICE_HOOK(name, base, version, per_thread)                               \
  Hook {                                                                             \
#name, base, version, per_thread, reinterpret_cast < void*>(&::name), nullptr,   \
        [](void* pointer) { std::memcpy(&g_driver.name, &pointer, sizeof pointer); } \
  }

namespace {
void AdoptNothing(void*) {}
}  // namespace

Hook* Hooks(std::size_t* count) {
  static Hook hooks[] = {
      GPUSLICE_HOOK(cuInit, "cuInit", 2000, false),
      GPUSLICE_HOOK(cuGetProcAddress, "cuGetProcAddress", 11030, false),
      GPUSLICE_HOOK(cuGetProcAddress_v2, "cuGetProcAddress", 12000, false),
      GPUSLICE_HOOK(cuCtxCreate_v2, "cuCtxCreate", 3020, false),
      GPUSLICE_HOOK(cuCtxCreate_v3, "cuCtxCreate", 11040, false),
      GPUSLICE_HOOK(cuCtxCreate_v4, "cuCtxCreate", 12050, false),
      GPUSLICE_HOOK(cuCtxDestroy_v2, "cuCtxDestroy", 4000, false),
      GPUSLICE_HOOK(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, false),
      GPUSLICE_HOOK(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, false),
      GPUSLICE_HOOK(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, false),
      GPUSLICE_HOOK(cuMemGetInfo_v2, "cuMemGetInfo", 3020, false),
      GPUSLICE_HOOK(cuMemAlloc_v2, "cuMemAlloc", 3020, false),
      GPUSLICE_HOOK(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, false),
      GPUSLICE_HOOK(cuMemAllocManaged, "cuMemAllocManaged", 6000, false),
      GPUSLICE_HOOK(cuMemFree_v2, "cuMemFree", 3020, false),
      GPUSLICE_HOOK(cuMemAllocAsync, "cuMemAllocAsync", 11020, false),
      GPUSLICE_HOOK(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, true),
      GPUSLICE_HOOK(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, false),
      GPUSLICE_HOOK(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, true),
      GPUSLICE_HOOK(cuMemFreeAsync, "cuMemFreeAsync", 11020, false),
      GPUSLICE_HOOK(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, true),
      GPUSLICE_HOOK(cuArrayCreate_v2, "cuArrayCreate", 3020, false),
      GPUSLICE_HOOK(cuArray3DCreate_v2, "cuArray3DCreate", 3020, false),
      GPUSLICE_HOOK(cuArrayDestroy, "cuArrayDestroy", 2000, false),
      GPUSLICE_HOOK(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, false),
      GPUSLICE_HOOK(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000, false),
      GPUSLICE_HOOK(cuMemCreate, "cuMemCreate", 10020, false),
      GPUSLICE_HOOK(cuMemRelease, "cuMemRelease", 10020, false),
      GPUSLICE_HOOK(cuLaunchKernel, "cuLaunchKernel", 4000, false),
      GPUSLICE_HOOK(cuLaunchKernel_ptsz, "cuLaunchKernel", 7000, true),
      GPUSLICE_HOOK(cuLaunchKernelEx, "cuLaunchKernelEx", 11060, false),
      GPUSLICE_HOOK(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 11060, true),
      GPUSLICE_HOOK(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 9000, false),
      GPUSLICE_HOOK(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 9000, true),
      GPUSLICE_HOOK(cuLaunchCooperativeKernelMultiDevice, "cuLaunchCooperativeKernelMultiDevice",
                    9000, false),
      GPUSLICE_HOOK(cuGraphLaunch, "cuGraphLaunch", 10000, false),
      GPUSLICE_HOOK(cuGraphLaunch_ptsz, "cuGraphLaunch", 10000, true),
      GPUSLICE_HOOK(cuLaunch, "cuLaunch", 2000, false),
      GPUSLICE_HOOK(cuLaunchGrid, "cuLaunchGrid", 2000, false),
      GPUSLICE_HOOK(cuLaunchGridAsync, "cuLaunchGridAsync", 2000, false),
      Hook{"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo", 0, false,
           reinterpret_cast<void*>(&::nvmlDeviceGetMemoryInfo), nullptr, &AdoptNothing},
      Hook{"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo_v2", 0, false,
           reinterpret_cast<void*>(&::nvmlDeviceGetMemoryInfo_v2), nullptr, &AdoptNothing},
  };
  *count = sizeof hooks / sizeof hooks[0];
  return hooks;
}
#undef GPUSLICE_HOOK

}  // namespace gpuslice::shim
