// cuda_api.h (src/shim/, internal to the interposer and its test library)
//
// gpuslice's own declarations of the part of the CUDA driver API (and a few NVML calls) that the
// interposer libgpuslice-cuda.so hooks or calls. NVIDIA's cuda.h is not needed to build gpuslice:
// the layouts and signatures below follow the CUDA driver API reference (CUDA 12.x) for LP64 Linux.
//
// Three users:
//   * the interposer (interposer*.cc) exports the hooked functions with C linkage and resolves the
//     real ones from libcuda.so.1 / libnvidia-ml.so.1 with dlopen and dlsym;
//   * the test CUDA library (fake_cuda/fake_cuda.cc), a small libcuda.so.1 backed by host memory
//     whose kernels are timed sleeps, defines the same functions;
//   * the test and verification programs (tests/shim/, tests/gpu/) call them through dlsym.
// Each function has one pointer type here (`<name>_t`), so a definition can be checked against
// its declaration with static_assert.
//
// Only plain C types appear here; nothing is allocated.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuslice::cuda {

// CUresult is a C enum (int-sized).
using CUresult = int;
inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_DEINITIALIZED = 4;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
inline constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = 201;
inline constexpr CUresult CUDA_ERROR_INVALID_HANDLE = 400;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;
inline constexpr CUresult CUDA_ERROR_NOT_PERMITTED = 800;
inline constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;
inline constexpr CUresult CUDA_ERROR_UNKNOWN = 999;

// Opaque handles.
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
struct CUarray_st;
struct CUmipmappedArray_st;
struct CUgraph_st;
struct CUgraphExec_st;
struct CUmemPoolHandle_st;
using CUdevice = int;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
using CUarray = CUarray_st*;
using CUmipmappedArray = CUmipmappedArray_st*;
using CUgraph = CUgraph_st*;
using CUgraphExec = CUgraphExec_st*;
using CUmemoryPool = CUmemPoolHandle_st*;
using CUdeviceptr = unsigned long long;  // CUdeviceptr_v2
using CUmemGenericAllocationHandle = unsigned long long;
using cuuint64_t = std::uint64_t;

// CUuuid.
struct CUuuid {
  char bytes[16];
};

// CUarray_format values and the size of one channel of each.
enum CUarray_format : int {
  CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
  CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
  CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
  CU_AD_FORMAT_SIGNED_INT8 = 0x08,
  CU_AD_FORMAT_SIGNED_INT16 = 0x09,
  CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
  CU_AD_FORMAT_HALF = 0x10,
  CU_AD_FORMAT_FLOAT = 0x20,
};

struct CUDA_ARRAY_DESCRIPTOR {  // CUDA_ARRAY_DESCRIPTOR_v2
  std::size_t Width;
  std::size_t Height;
  CUarray_format Format;
  unsigned int NumChannels;
};

struct CUDA_ARRAY3D_DESCRIPTOR {  // CUDA_ARRAY3D_DESCRIPTOR_v2
  std::size_t Width;
  std::size_t Height;
  std::size_t Depth;
  CUarray_format Format;
  unsigned int NumChannels;
  unsigned int Flags;
};

struct CUDA_ARRAY_MEMORY_REQUIREMENTS {  // CUDA_ARRAY_MEMORY_REQUIREMENTS_v1 (CUDA 11.6)
  std::size_t size;
  std::size_t alignment;
  unsigned int reserved[4];
};

// Virtual memory management (cuMemCreate).
struct CUmemLocation {
  int type;  // CUmemLocationType: 1 = device
  int id;
};
struct CUmemAllocationProp {
  int type;                  // CUmemAllocationType: 1 = pinned
  int requestedHandleTypes;  // CUmemAllocationHandleType
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};

// cuLaunchKernelEx's configuration. Attributes are passed through untouched.
struct CUlaunchAttribute_st;
struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute_st* attrs;
  unsigned int numAttrs;
};

// cuLaunchCooperativeKernelMultiDevice's per-device parameters (deprecated in CUDA 11.3, still
// exported).
struct CUDA_LAUNCH_PARAMS {
  CUfunction function;
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  void** kernelParams;
};

// cuCtxCreate_v3/_v4 parameters, opaque here.
struct CUexecAffinityParam_st;
struct CUctxCreateParams_st;

// cuGetProcAddress flags (CUdriverProcAddress_flags) and the _v2 query result.
inline constexpr cuuint64_t CU_GET_PROC_ADDRESS_DEFAULT = 0;
inline constexpr cuuint64_t CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1;
inline constexpr cuuint64_t CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2;
using CUdriverProcAddressQueryResult = int;  // 0 = success, 1 = symbol not found, 2 = version

// cuEventCreate flags.
inline constexpr unsigned int CU_EVENT_DEFAULT = 0;
inline constexpr unsigned int CU_EVENT_BLOCKING_SYNC = 1;
inline constexpr unsigned int CU_EVENT_DISABLE_TIMING = 2;

// cuMemAllocManaged flags.
inline constexpr unsigned int CU_MEM_ATTACH_GLOBAL = 1;

// One pointer type per function. The interposer hooks the first group and calls the others.
// clang-format off
using cuInit_t = CUresult (*)(unsigned int flags);
using cuDriverGetVersion_t = CUresult (*)(int* version);
using cuDeviceGet_t = CUresult (*)(CUdevice* device, int ordinal);
using cuDeviceGetCount_t = CUresult (*)(int* count);
using cuDeviceGetUuid_t = CUresult (*)(CUuuid* uuid, CUdevice device);
using cuDeviceTotalMem_v2_t = CUresult (*)(std::size_t* bytes, CUdevice device);
using cuGetProcAddress_t = CUresult (*)(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
using cuGetProcAddress_v2_t = CUresult (*)(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus);

// Contexts.
using cuCtxCreate_v2_t = CUresult (*)(CUcontext* ctx, unsigned int flags, CUdevice device);
using cuCtxCreate_v3_t = CUresult (*)(CUcontext* ctx, CUexecAffinityParam_st* params, int numParams, unsigned int flags, CUdevice device);
using cuCtxCreate_v4_t = CUresult (*)(CUcontext* ctx, CUctxCreateParams_st* params, unsigned int flags, CUdevice device);
using cuCtxDestroy_v2_t = CUresult (*)(CUcontext ctx);
using cuDevicePrimaryCtxRetain_t = CUresult (*)(CUcontext* ctx, CUdevice device);
using cuDevicePrimaryCtxRelease_v2_t = CUresult (*)(CUdevice device);
using cuDevicePrimaryCtxReset_v2_t = CUresult (*)(CUdevice device);
using cuCtxGetCurrent_t = CUresult (*)(CUcontext* ctx);
using cuCtxSetCurrent_t = CUresult (*)(CUcontext ctx);
using cuCtxGetDevice_t = CUresult (*)(CUdevice* device);
using cuCtxPushCurrent_v2_t = CUresult (*)(CUcontext ctx);
using cuCtxPopCurrent_v2_t = CUresult (*)(CUcontext* ctx);
using cuCtxSynchronize_t = CUresult (*)(void);

// Device memory.
using cuMemGetInfo_v2_t = CUresult (*)(std::size_t* free, std::size_t* total);
using cuMemAlloc_v2_t = CUresult (*)(CUdeviceptr* dptr, std::size_t bytes);
using cuMemAllocPitch_v2_t = CUresult (*)(CUdeviceptr* dptr, std::size_t* pitch, std::size_t widthInBytes, std::size_t height, unsigned int elementSizeBytes);
using cuMemAllocManaged_t = CUresult (*)(CUdeviceptr* dptr, std::size_t bytes, unsigned int flags);
using cuMemFree_v2_t = CUresult (*)(CUdeviceptr dptr);
using cuMemAllocAsync_t = CUresult (*)(CUdeviceptr* dptr, std::size_t bytes, CUstream stream);
using cuMemAllocFromPoolAsync_t = CUresult (*)(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool, CUstream stream);
using cuMemFreeAsync_t = CUresult (*)(CUdeviceptr dptr, CUstream stream);
using cuArrayCreate_v2_t = CUresult (*)(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc);
using cuArray3DCreate_v2_t = CUresult (*)(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc);
using cuArrayDestroy_t = CUresult (*)(CUarray array);
using cuArrayGetMemoryRequirements_t = CUresult (*)(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUarray array, CUdevice device);
using cuMipmappedArrayCreate_t = CUresult (*)(CUmipmappedArray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned int numLevels);
using cuMipmappedArrayDestroy_t = CUresult (*)(CUmipmappedArray array);
using cuMipmappedArrayGetMemoryRequirements_t = CUresult (*)(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUmipmappedArray array, CUdevice device);
using cuMemCreate_t = CUresult (*)(CUmemGenericAllocationHandle* handle, std::size_t size, const CUmemAllocationProp* prop, unsigned long long flags);
using cuMemRelease_t = CUresult (*)(CUmemGenericAllocationHandle handle);
using cuMemMap_t = CUresult (*)(CUdeviceptr ptr, std::size_t size, std::size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags);
using cuMemUnmap_t = CUresult (*)(CUdeviceptr ptr, std::size_t size);
using cuMemAddressReserve_t = CUresult (*)(CUdeviceptr* ptr, std::size_t size, std::size_t alignment, CUdeviceptr addr, unsigned long long flags);
using cuMemAddressFree_t = CUresult (*)(CUdeviceptr ptr, std::size_t size);
using cuMemcpyHtoD_v2_t = CUresult (*)(CUdeviceptr dst, const void* src, std::size_t bytes);
using cuMemcpyDtoH_v2_t = CUresult (*)(void* dst, CUdeviceptr src, std::size_t bytes);

// Modules, kernels, launches.
using cuModuleLoadData_t = CUresult (*)(CUmodule* module, const void* image);
using cuModuleGetFunction_t = CUresult (*)(CUfunction* function, CUmodule module, const char* name);
using cuModuleUnload_t = CUresult (*)(CUmodule module);
using cuLaunchKernel_t = CUresult (*)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream stream, void** kernelParams, void** extra);
using cuLaunchKernelEx_t = CUresult (*)(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra);
using cuLaunchCooperativeKernel_t = CUresult (*)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream stream, void** kernelParams);
using cuLaunchCooperativeKernelMultiDevice_t = CUresult (*)(CUDA_LAUNCH_PARAMS* launchParamsList, unsigned int numDevices, unsigned int flags);
using cuGraphLaunch_t = CUresult (*)(CUgraphExec graph, CUstream stream);
using cuStreamBeginCapture_v2_t = CUresult (*)(CUstream stream, int mode);
using cuStreamEndCapture_t = CUresult (*)(CUstream stream, CUgraph* graph);
using cuStreamIsCapturing_t = CUresult (*)(CUstream stream, int* captureStatus);  // 0 = none
using cuGraphInstantiateWithFlags_t = CUresult (*)(CUgraphExec* exec, CUgraph graph, unsigned long long flags);
using cuGraphDestroy_t = CUresult (*)(CUgraph graph);
using cuGraphExecDestroy_t = CUresult (*)(CUgraphExec exec);
using cuLaunch_t = CUresult (*)(CUfunction f);
using cuLaunchGrid_t = CUresult (*)(CUfunction f, int gridWidth, int gridHeight);
using cuLaunchGridAsync_t = CUresult (*)(CUfunction f, int gridWidth, int gridHeight, CUstream stream);

// Streams and events (the interposer times launches with events).
using cuStreamCreate_t = CUresult (*)(CUstream* stream, unsigned int flags);
using cuStreamDestroy_v2_t = CUresult (*)(CUstream stream);
using cuStreamSynchronize_t = CUresult (*)(CUstream stream);
using cuStreamGetCtx_t = CUresult (*)(CUstream stream, CUcontext* ctx);
using cuEventCreate_t = CUresult (*)(CUevent* event, unsigned int flags);
using cuEventDestroy_v2_t = CUresult (*)(CUevent event);
using cuEventRecord_t = CUresult (*)(CUevent event, CUstream stream);
using cuEventQuery_t = CUresult (*)(CUevent event);
using cuEventSynchronize_t = CUresult (*)(CUevent event);
using cuEventElapsedTime_t = CUresult (*)(float* milliseconds, CUevent start, CUevent end);
// clang-format on

}  // namespace gpuslice::cuda

namespace gpuslice::cuda::nvml {

// The NVML calls the interposer makes: the two memory queries it answers for the slice, and
// those it measures a new context with (the device's free memory before and after it).
using nvmlReturn_t = int;
inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
inline constexpr unsigned int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlMemory_v2_t {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
using nvmlDeviceGetMemoryInfo_t = nvmlReturn_t (*)(nvmlDevice_t device, nvmlMemory_t* memory);
using nvmlDeviceGetMemoryInfo_v2_t = nvmlReturn_t (*)(nvmlDevice_t device, nvmlMemory_v2_t* memory);
using nvmlInit_v2_t = nvmlReturn_t (*)(void);
using nvmlDeviceGetHandleByUUID_t = nvmlReturn_t (*)(const char* uuid, nvmlDevice_t* device);
using nvmlDeviceGetUUID_t = nvmlReturn_t (*)(nvmlDevice_t device, char* uuid, unsigned int length);

}  // namespace gpuslice::cuda::nvml

namespace gpuslice::cuda {

// Appended for the probe (tests/shim/cuda_probe.cc) and the test CUDA library: a device's default
// memory pool, for cuMemAllocFromPoolAsync (a null pool is invalid on a real driver).
using cuDeviceGetDefaultMemPool_t = CUresult (*)(CUmemoryPool* pool, CUdevice device);

}  // namespace gpuslice::cuda
