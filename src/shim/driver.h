// The real driver functions the interposer calls, resolved from libcuda.so.1 (and NVML's from
// libnvidia-ml.so.1) with the real dlsym. A function the installed driver lacks stays nullptr.
#pragma once

#include "cuda_api.h"

namespace gpuslice::shim {

// X(field, pointer type, exported name) for every driver function the interposer calls or hooks.
// clang-format off
#define GPUSLICE_DRIVER_FUNCTIONS(X) \
  X(cuInit, cuInit_t, "cuInit") \
  X(cuGetProcAddress, cuGetProcAddress_t, "cuGetProcAddress") \
  X(cuGetProcAddress_v2, cuGetProcAddress_v2_t, "cuGetProcAddress_v2") \
  X(cuDeviceGetUuid, cuDeviceGetUuid_t, "cuDeviceGetUuid") \
  X(cuCtxCreate_v2, cuCtxCreate_v2_t, "cuCtxCreate_v2") \
  X(cuCtxCreate_v3, cuCtxCreate_v3_t, "cuCtxCreate_v3") \
  X(cuCtxCreate_v4, cuCtxCreate_v4_t, "cuCtxCreate_v4") \
  X(cuCtxDestroy_v2, cuCtxDestroy_v2_t, "cuCtxDestroy_v2") \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain_t, "cuDevicePrimaryCtxRetain") \
  X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease_v2_t, "cuDevicePrimaryCtxRelease_v2") \
  X(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset_v2_t, "cuDevicePrimaryCtxReset_v2") \
  X(cuCtxGetCurrent, cuCtxGetCurrent_t, "cuCtxGetCurrent") \
  X(cuCtxGetDevice, cuCtxGetDevice_t, "cuCtxGetDevice") \
  X(cuCtxPushCurrent_v2, cuCtxPushCurrent_v2_t, "cuCtxPushCurrent_v2") \
  X(cuCtxPopCurrent_v2, cuCtxPopCurrent_v2_t, "cuCtxPopCurrent_v2") \
  X(cuMemGetInfo_v2, cuMemGetInfo_v2_t, "cuMemGetInfo_v2") \
  X(cuMemAlloc_v2, cuMemAlloc_v2_t, "cuMemAlloc_v2") \
  X(cuMemAllocPitch_v2, cuMemAllocPitch_v2_t, "cuMemAllocPitch_v2") \
  X(cuMemAllocManaged, cuMemAllocManaged_t, "cuMemAllocManaged") \
  X(cuMemFree_v2, cuMemFree_v2_t, "cuMemFree_v2") \
  X(cuMemAllocAsync, cuMemAllocAsync_t, "cuMemAllocAsync") \
  X(cuMemAllocAsync_ptsz, cuMemAllocAsync_t, "cuMemAllocAsync_ptsz") \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_t, "cuMemAllocFromPoolAsync") \
  X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_t, "cuMemAllocFromPoolAsync_ptsz") \
  X(cuMemFreeAsync, cuMemFreeAsync_t, "cuMemFreeAsync") \
  X(cuMemFreeAsync_ptsz, cuMemFreeAsync_t, "cuMemFreeAsync_ptsz") \
  X(cuArrayCreate_v2, cuArrayCreate_v2_t, "cuArrayCreate_v2") \
  X(cuArray3DCreate_v2, cuArray3DCreate_v2_t, "cuArray3DCreate_v2") \
  X(cuArrayDestroy, cuArrayDestroy_t, "cuArrayDestroy") \
  X(cuArrayGetMemoryRequirements, cuArrayGetMemoryRequirements_t, "cuArrayGetMemoryRequirements") \
  X(cuMipmappedArrayCreate, cuMipmappedArrayCreate_t, "cuMipmappedArrayCreate") \
  X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy_t, "cuMipmappedArrayDestroy") \
  X(cuMipmappedArrayGetMemoryRequirements, cuMipmappedArrayGetMemoryRequirements_t, "cuMipmappedArrayGetMemoryRequirements") \
  X(cuMemCreate, cuMemCreate_t, "cuMemCreate") \
  X(cuMemRelease, cuMemRelease_t, "cuMemRelease") \
  X(cuLaunchKernel, cuLaunchKernel_t, "cuLaunchKernel") \
  X(cuLaunchKernel_ptsz, cuLaunchKernel_t, "cuLaunchKernel_ptsz") \
  X(cuLaunchKernelEx, cuLaunchKernelEx_t, "cuLaunchKernelEx") \
  X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx_t, "cuLaunchKernelEx_ptsz") \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_t, "cuLaunchCooperativeKernel") \
  X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel_t, "cuLaunchCooperativeKernel_ptsz") \
  X(cuLaunchCooperativeKernelMultiDevice, cuLaunchCooperativeKernelMultiDevice_t, "cuLaunchCooperativeKernelMultiDevice") \
  X(cuGraphLaunch, cuGraphLaunch_t, "cuGraphLaunch") \
  X(cuGraphLaunch_ptsz, cuGraphLaunch_t, "cuGraphLaunch_ptsz") \
  X(cuLaunch, cuLaunch_t, "cuLaunch") \
  X(cuLaunchGrid, cuLaunchGrid_t, "cuLaunchGrid") \
  X(cuLaunchGridAsync, cuLaunchGridAsync_t, "cuLaunchGridAsync") \
  X(cuStreamGetCtx, cuStreamGetCtx_t, "cuStreamGetCtx") \
  X(cuStreamIsCapturing, cuStreamIsCapturing_t, "cuStreamIsCapturing") \
  X(cuEventCreate, cuEventCreate_t, "cuEventCreate") \
  X(cuEventDestroy_v2, cuEventDestroy_v2_t, "cuEventDestroy_v2") \
  X(cuEventRecord, cuEventRecord_t, "cuEventRecord") \
  X(cuEventQuery, cuEventQuery_t, "cuEventQuery") \
  X(cuEventSynchronize, cuEventSynchronize_t, "cuEventSynchronize") \
  X(cuEventElapsedTime, cuEventElapsedTime_t, "cuEventElapsedTime")
// clang-format on

struct Driver {
#define GPUSLICE_DRIVER_FIELD(field, type, name) cuda::type field = nullptr;
  GPUSLICE_DRIVER_FUNCTIONS(GPUSLICE_DRIVER_FIELD)
#undef GPUSLICE_DRIVER_FIELD
};

// The table, filled once by the interposer before any hook uses it.
extern Driver g_driver;

}  // namespace gpuslice::shim
