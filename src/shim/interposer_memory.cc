// The interposer's device memory (interposer.h): every allocation path counted against the
// slice's VRAM cap before the driver is asked, corrected to what the driver really took, and
// given back when freed; cuMemGetInfo and NVML's memory queries answer with the slice.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "interposer.h"

namespace gpuslice::shim {

using namespace gpuslice::cuda;  // NOLINT: the driver's names, as applications write them
using cuda::nvml::nvmlDevice_t;

std::atomic<std::uint64_t> g_memory_calls_begun{0};
std::atomic<std::uint64_t> g_memory_calls_ended{0};
Tables* g_tables = nullptr;

void LogRefusal(const char* call, std::uint64_t bytes) {
  static std::atomic<std::uint64_t> last_ns{0};
  static std::atomic<std::uint64_t> unlogged{0};
  const std::uint64_t now = MonotonicNs();
  const std::uint64_t last = last_ns.load(std::memory_order_relaxed);
  if (last != 0 && now - last < 1'000'000'000) {
    unlogged.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  last_ns.store(now, std::memory_order_relaxed);
  const std::uint64_t more = unlogged.exchange(0);
  Log(1, "refused %s of %.1f MiB: slice %s has %.1f MiB of its %.0f MiB cap in use%s", call,
      Mib(bytes), g_config.slice_id.c_str(), Mib(g_accounting.Used()), Mib(g_accounting.Cap()),
      more > 0 ? (" (" + std::to_string(more) + " more refusals since the last line)").c_str()
               : "");
}

namespace {

CUcontext CurrentContext() {
  CUcontext context = nullptr;
  if (g_driver.cuCtxGetCurrent != nullptr) g_driver.cuCtxGetCurrent(&context);
  return context;
}

void Remember(std::unordered_map<std::uint64_t, Allocation>& table, std::uint64_t key,
              std::uint64_t bytes, CUcontext context) {
  std::lock_guard<std::mutex> hold(g_tables->mutex);
  table[key] = Allocation{bytes, context};
}

std::optional<Allocation> Take(std::unordered_map<std::uint64_t, Allocation>& table,
                               std::uint64_t key) {
  std::lock_guard<std::mutex> hold(g_tables->mutex);
  auto it = table.find(key);
  if (it == table.end()) return std::nullopt;
  Allocation allocation = it->second;
  table.erase(it);
  return allocation;
}

// Frees an allocation: the entry is taken out before the driver is asked (so an address the
// driver hands out again at once is not confused with it) and put back if the driver refuses.
template <typename Call>
CUresult Free(std::unordered_map<std::uint64_t, Allocation>& table, std::uint64_t key,
              Call&& call) {
  MemoryCall in_progress;
  const std::optional<Allocation> allocation = Take(table, key);
  const CUresult result = call();
  if (allocation.has_value()) {
    if (result == CUDA_SUCCESS) {
      g_accounting.Release(allocation->bytes, false);
    } else {
      Remember(table, key, allocation->bytes, allocation->context);
    }
  }
  return result;
}

// Counts `bytes` and makes the allocation; `call` returns the driver's result and the key.
template <typename Call>
CUresult Allocate(const char* what, std::unordered_map<std::uint64_t, Allocation>& table,
                  std::uint64_t bytes, Call&& call) {
  MemoryCall in_progress;
  if (!g_accounting.Reserve(bytes, false)) {
    LogRefusal(what, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::uint64_t key = 0;
  const CUresult result = call(&key);
  if (result != CUDA_SUCCESS) {
    g_accounting.Release(bytes, false);
    return result;
  }
  g_accounting.Commit(bytes);
  Remember(table, key, bytes, CurrentContext());
  return result;
}

std::uint64_t ElementBytes(CUarray_format format) {
  switch (static_cast<int>(format)) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;  // 32-bit formats; other formats are corrected from the driver's requirements
  }
}

std::uint64_t AtLeastOne(std::size_t n) { return n == 0 ? 1 : n; }

std::uint64_t ArrayBytes(std::size_t width, std::size_t height, std::size_t depth,
                         CUarray_format format, unsigned channels) {
  return static_cast<std::uint64_t>(width) * AtLeastOne(height) * AtLeastOne(depth) *
         AtLeastOne(channels) * ElementBytes(format);
}

std::uint64_t MipmapBytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels) {
  std::uint64_t total = 0;
  std::size_t w = d.Width, h = d.Height, z = d.Depth;
  for (unsigned level = 0; level < AtLeastOne(levels); ++level) {
    total += ArrayBytes(w, h, z, d.Format, d.NumChannels);
    w = w > 1 ? w / 2 : 1;
    h = h > 1 ? h / 2 : h;
    z = z > 1 ? z / 2 : z;
  }
  return total;
}

CUdevice CurrentDevice() {
  CUdevice device = 0;
  if (g_driver.cuCtxGetDevice != nullptr) g_driver.cuCtxGetDevice(&device);
  return device;
}

std::uint64_t Key(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer); }

}  // namespace
}  // namespace gpuslice::shim

using namespace gpuslice::cuda;  // NOLINT
namespace cuda = gpuslice::cuda;
namespace shim = gpuslice::shim;
using shim::g_driver;

// ---------------------------------------------------------------------------------------------
// Device memory.

GPUSLICE_EXPORT CUresult cuMemGetInfo_v2(std::size_t* free, std::size_t* total) {
  GPUSLICE_ENTER(cuMemGetInfo_v2, free, total)
  const CUresult result = g_driver.cuMemGetInfo_v2(free, total);
  const std::uint64_t cap = shim::g_accounting.Cap();
  if (result != CUDA_SUCCESS || cap == 0 || free == nullptr || total == nullptr) return result;
  const std::uint64_t used = shim::g_accounting.Used();
  std::uint64_t left = cap > used ? cap - used : 0;
  if (left > *free) left = *free;  // the GPU itself has less left than the slice may use
  *free = left;
  *total = cap;
  return result;
}

GPUSLICE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes) {
  GPUSLICE_ENTER(cuMemAlloc_v2, dptr, bytes)
  return shim::Allocate("cuMemAlloc", shim::g_tables->pointers, bytes, [&](std::uint64_t* key) {
    const CUresult r = g_driver.cuMemAlloc_v2(dptr, bytes);
    if (r == CUDA_SUCCESS) *key = *dptr;
    return r;
  });
}

GPUSLICE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, std::size_t bytes,
                                           unsigned int flags) {
  GPUSLICE_ENTER(cuMemAllocManaged, dptr, bytes, flags)
  return shim::Allocate("cuMemAllocManaged", shim::g_tables->pointers, bytes,
                        [&](std::uint64_t* key) {
                          const CUresult r = g_driver.cuMemAllocManaged(dptr, bytes, flags);
                          if (r == CUDA_SUCCESS) *key = *dptr;
                          return r;
                        });
}

GPUSLICE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, std::size_t* pitch,
                                            std::size_t widthInBytes, std::size_t height,
                                            unsigned int elementSizeBytes) {
  GPUSLICE_ENTER(cuMemAllocPitch_v2, dptr, pitch, widthInBytes, height, elementSizeBytes)
  // Counted first at the widest pitch drivers choose (512-byte rows), then corrected to the
  // driver's own pitch.
  const std::uint64_t counted =
      (widthInBytes + 511) / 512 * 512 * static_cast<std::uint64_t>(height);
  shim::MemoryCall in_progress;
  if (!shim::g_accounting.Reserve(counted, false)) {
    shim::LogRefusal("cuMemAllocPitch", counted);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult result =
      g_driver.cuMemAllocPitch_v2(dptr, pitch, widthInBytes, height, elementSizeBytes);
  if (result != CUDA_SUCCESS) {
    shim::g_accounting.Release(counted, false);
    return result;
  }
  const std::uint64_t actual = static_cast<std::uint64_t>(*pitch) * height;
  if (!shim::Correct(counted, actual)) {
    g_driver.cuMemFree_v2(*dptr);
    shim::g_accounting.Release(counted, false);
    shim::LogRefusal("cuMemAllocPitch", actual);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  shim::g_accounting.Commit(actual);
  shim::Remember(shim::g_tables->pointers, *dptr, actual, shim::CurrentContext());
  return result;
}

GPUSLICE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  GPUSLICE_ENTER(cuMemFree_v2, dptr)
  return shim::Free(shim::g_tables->pointers, dptr, [&] { return g_driver.cuMemFree_v2(dptr); });
}

#define GPUSLICE_ASYNC_ALLOC(name)                                                       \
  GPUSLICE_EXPORT CUresult name(CUdeviceptr* dptr, std::size_t bytes, CUstream stream) { \
    GPUSLICE_ENTER(name, dptr, bytes, stream)                                            \
    return shim::Allocate("cuMemAllocAsync", shim::g_tables->pointers, bytes,            \
                          [&](std::uint64_t* key) {                                      \
                            const CUresult r = g_driver.name(dptr, bytes, stream);       \
                            if (r == CUDA_SUCCESS) *key = *dptr;                         \
                            return r;                                                    \
                          });                                                            \
  }
GPUSLICE_ASYNC_ALLOC(cuMemAllocAsync)
GPUSLICE_ASYNC_ALLOC(cuMemAllocAsync_ptsz)
#undef GPUSLICE_ASYNC_ALLOC

#define GPUSLICE_POOL_ALLOC(name)                                                        \
  GPUSLICE_EXPORT CUresult name(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool, \
                                CUstream stream) {                                       \
    GPUSLICE_ENTER(name, dptr, bytes, pool, stream)                                      \
    return shim::Allocate("cuMemAllocFromPoolAsync", shim::g_tables->pointers, bytes,    \
                          [&](std::uint64_t* key) {                                      \
                            const CUresult r = g_driver.name(dptr, bytes, pool, stream); \
                            if (r == CUDA_SUCCESS) *key = *dptr;                         \
                            return r;                                                    \
                          });                                                            \
  }
GPUSLICE_POOL_ALLOC(cuMemAllocFromPoolAsync)
GPUSLICE_POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz)
#undef GPUSLICE_POOL_ALLOC

// An asynchronous free is uncounted when it is enqueued: the stream frees it in order, and an
// allocation made after it on the same stream may reuse the memory.
#define GPUSLICE_ASYNC_FREE(name)                                    \
  GPUSLICE_EXPORT CUresult name(CUdeviceptr dptr, CUstream stream) { \
    GPUSLICE_ENTER(name, dptr, stream)                               \
    return shim::Free(shim::g_tables->pointers, dptr,                \
                      [&] { return g_driver.name(dptr, stream); });  \
  }
GPUSLICE_ASYNC_FREE(cuMemFreeAsync)
GPUSLICE_ASYNC_FREE(cuMemFreeAsync_ptsz)
#undef GPUSLICE_ASYNC_FREE

namespace gpuslice::shim {
namespace {

// Arrays: counted from the descriptor, then corrected to the driver's memory requirement when
// the driver can say it (CUDA 11.6+).
template <typename Create, typename Requirement, typename Destroy>
CUresult CreateArray(const char* what, std::unordered_map<std::uint64_t, Allocation>& table,
                     std::uint64_t counted, Create&& create, Requirement&& requirement,
                     Destroy&& destroy) {
  MemoryCall in_progress;
  if (!g_accounting.Reserve(counted, false)) {
    LogRefusal(what, counted);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::uint64_t key = 0;
  const CUresult result = create(&key);
  if (result != CUDA_SUCCESS) {
    g_accounting.Release(counted, false);
    return result;
  }
  std::uint64_t actual = counted;
  CUDA_ARRAY_MEMORY_REQUIREMENTS needs{};
  if (requirement(&needs) == CUDA_SUCCESS && needs.size > 0) actual = needs.size;
  if (!Correct(counted, actual)) {
    destroy();
    g_accounting.Release(counted, false);
    LogRefusal(what, actual);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  g_accounting.Commit(actual);
  Remember(table, key, actual, CurrentContext());
  return result;
}

// cuArrayCreate and cuArray3DCreate: `create` makes the array; requirement and destroy are shared.
template <typename Create>
CUresult CreatePlainArray(const char* what, CUarray* array, std::uint64_t counted,
                          Create&& create) {
  return CreateArray(
      what, g_tables->arrays, counted,
      [&](std::uint64_t* key) {
        const CUresult r = create();
        if (r == CUDA_SUCCESS) *key = Key(*array);
        return r;
      },
      [&](CUDA_ARRAY_MEMORY_REQUIREMENTS* needs) {
        return g_driver.cuArrayGetMemoryRequirements == nullptr
                   ? CUDA_ERROR_NOT_SUPPORTED
                   : g_driver.cuArrayGetMemoryRequirements(needs, *array, CurrentDevice());
      },
      [&] { g_driver.cuArrayDestroy(*array); });
}

}  // namespace
}  // namespace gpuslice::shim

GPUSLICE_EXPORT CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  GPUSLICE_ENTER(cuArrayCreate_v2, array, desc)
  if (desc == nullptr || array == nullptr) return g_driver.cuArrayCreate_v2(array, desc);
  return shim::CreatePlainArray(
      "cuArrayCreate", array,
      shim::ArrayBytes(desc->Width, desc->Height, 0, desc->Format, desc->NumChannels),
      [&] { return g_driver.cuArrayCreate_v2(array, desc); });
}

GPUSLICE_EXPORT CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  GPUSLICE_ENTER(cuArray3DCreate_v2, array, desc)
  if (desc == nullptr || array == nullptr) return g_driver.cuArray3DCreate_v2(array, desc);
  return shim::CreatePlainArray(
      "cuArray3DCreate", array,
      shim::ArrayBytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels),
      [&] { return g_driver.cuArray3DCreate_v2(array, desc); });
}

GPUSLICE_EXPORT CUresult cuArrayDestroy(CUarray array) {
  GPUSLICE_ENTER(cuArrayDestroy, array)
  return shim::Free(shim::g_tables->arrays, shim::Key(array),
                    [&] { return g_driver.cuArrayDestroy(array); });
}

GPUSLICE_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* array,
                                                const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                                unsigned int numLevels) {
  GPUSLICE_ENTER(cuMipmappedArrayCreate, array, desc, numLevels)
  if (desc == nullptr || array == nullptr) {
    return g_driver.cuMipmappedArrayCreate(array, desc, numLevels);
  }
  return shim::CreateArray(
      "cuMipmappedArrayCreate", shim::g_tables->mipmaps, shim::MipmapBytes(*desc, numLevels),
      [&](std::uint64_t* key) {
        const CUresult r = g_driver.cuMipmappedArrayCreate(array, desc, numLevels);
        if (r == CUDA_SUCCESS) *key = shim::Key(*array);
        return r;
      },
      [&](CUDA_ARRAY_MEMORY_REQUIREMENTS* needs) {
        return g_driver.cuMipmappedArrayGetMemoryRequirements == nullptr
                   ? CUDA_ERROR_NOT_SUPPORTED
                   : g_driver.cuMipmappedArrayGetMemoryRequirements(needs, *array,
                                                                    shim::CurrentDevice());
      },
      [&] { g_driver.cuMipmappedArrayDestroy(*array); });
}

GPUSLICE_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray array) {
  GPUSLICE_ENTER(cuMipmappedArrayDestroy, array)
  return shim::Free(shim::g_tables->mipmaps, shim::Key(array),
                    [&] { return g_driver.cuMipmappedArrayDestroy(array); });
}

// Virtual memory management: the physical memory is cuMemCreate's; mapping it (cuMemMap) takes
// no more, so the handle is what is counted, until cuMemRelease.
GPUSLICE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t size,
                                     const CUmemAllocationProp* prop, unsigned long long flags) {
  GPUSLICE_ENTER(cuMemCreate, handle, size, prop, flags)
  constexpr int kLocationDevice = 1;
  if (prop != nullptr && prop->location.type != kLocationDevice) {
    return g_driver.cuMemCreate(handle, size, prop, flags);  // host memory
  }
  return shim::Allocate("cuMemCreate", shim::g_tables->handles, size, [&](std::uint64_t* key) {
    const CUresult r = g_driver.cuMemCreate(handle, size, prop, flags);
    if (r == CUDA_SUCCESS) *key = *handle;
    return r;
  });
}

GPUSLICE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  GPUSLICE_ENTER(cuMemRelease, handle)
  return shim::Free(shim::g_tables->handles, handle, [&] { return g_driver.cuMemRelease(handle); });
}

// ---------------------------------------------------------------------------------------------
// NVML's memory queries answer with the slice on the slice's GPU.

namespace gpuslice::shim {
namespace {

// The slice's used and cap when `device` is the slice's GPU (or the slice has no GPU yet), with
// a cap in force.
bool SliceMemory(nvmlDevice_t device, std::uint64_t* used, std::uint64_t* cap) {
  if (!g_active || !EnsureAccounting() || g_accounting.Cap() == 0) return false;
  char mine[kGpuUuidSize];
  g_accounting.GpuUuid(mine, sizeof mine);
  if (mine[0] != '\0' && g_nvml.get_uuid != nullptr) {
    char uuid[96] = {};
    if (g_nvml.get_uuid(device, uuid, sizeof uuid) == 0 && std::strcmp(uuid, mine) != 0) {
      return false;
    }
  }
  *cap = g_accounting.Cap();
  *used = g_accounting.Used();
  if (*used > *cap) *used = *cap;
  return true;
}

}  // namespace
}  // namespace gpuslice::shim

GPUSLICE_EXPORT cuda::nvml::nvmlReturn_t nvmlDeviceGetMemoryInfo(cuda::nvml::nvmlDevice_t device,
                                                                 cuda::nvml::nvmlMemory_t* memory) {
  shim::LoadOnce();
  shim::LoadNvml();
  if (shim::g_nvml.get_memory == nullptr) return 1;  // NVML_ERROR_UNINITIALIZED
  const cuda::nvml::nvmlReturn_t result = shim::g_nvml.get_memory(device, memory);
  std::uint64_t used = 0, cap = 0;
  if (result == 0 && memory != nullptr && shim::SliceMemory(device, &used, &cap)) {
    memory->total = cap;
    memory->used = used;
    memory->free = cap - used;
  }
  return result;
}

GPUSLICE_EXPORT cuda::nvml::nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(
    cuda::nvml::nvmlDevice_t device, cuda::nvml::nvmlMemory_v2_t* memory) {
  shim::LoadOnce();
  shim::LoadNvml();
  if (shim::g_nvml.get_memory_v2 == nullptr) return 1;
  const cuda::nvml::nvmlReturn_t result = shim::g_nvml.get_memory_v2(device, memory);
  std::uint64_t used = 0, cap = 0;
  if (result == 0 && memory != nullptr && shim::SliceMemory(device, &used, &cap)) {
    memory->total = cap;
    memory->reserved = 0;
    memory->used = used;
    memory->free = cap - used;
  }
  return result;
}
