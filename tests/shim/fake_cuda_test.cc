// The test CUDA library (src/shim/fake_cuda, build/fake_cuda/libcuda.so.1) in this process:
// exports and cuGetProcAddress, devices, NVML's memory figures, the memory rules the interposer's
// tests rely on (counting, rounding, refusal at the total), contexts, execution, events, capture
// and the trace.
// Settings are fixed before the library's cuInit: 2 devices of 1024 MiB, 8 MiB per context, a
// trace file; no engine file (the engine is this process's). Tests work on device 1 in contexts of
// their own and give back what they take, so they may run in any order in one process.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cuda_api.h"
#include "shim/shim_process.h"

namespace gpuslice::cuda {
namespace {

using shim::testing::kMiB;
using shim::testing::MonotonicNs;

constexpr int kDevice = 1;

// The library, loaded once with the settings above.
class Library {
 public:
  static Library& Get() {
    static Library* library = new Library;
    return *library;
  }
  void* handle() const { return handle_; }
  const std::string& trace_path() const { return trace_path_; }

  template <typename T>
  T Fn(const char* name) const {
    void* symbol = dlsym(handle_, name);
    EXPECT_NE(symbol, nullptr) << name;
    return reinterpret_cast<T>(symbol);
  }

 private:
  Library() {
    trace_path_ = std::string(std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "/tmp") +
                  "/fake_cuda_test_trace_" + std::to_string(getpid());
    unlink(trace_path_.c_str());
    setenv("FAKE_CUDA_DEVICES", "2", 1);
    setenv("FAKE_CUDA_TOTAL_MIB", "1024", 1);
    setenv("FAKE_CUDA_CONTEXT_MIB", "8", 1);
    setenv("FAKE_CUDA_TRACE", trace_path_.c_str(), 1);
    unsetenv("FAKE_CUDA_ENGINE");
    handle_ = dlopen(GPUSLICE_FAKE_CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
  }
  void* handle_ = nullptr;
  std::string trace_path_;
};

#define FN(name) Library::Get().Fn<name##_t>(#name)
// A per-thread default stream variant, of the same type as its base function.
#define FN_PTSZ(base) Library::Get().Fn<base##_t>(#base "_ptsz")

// Removes the trace file when the tests end.
class TraceCleanup : public ::testing::Environment {
 public:
  void TearDown() override { unlink(Library::Get().trace_path().c_str()); }
};
[[maybe_unused]] ::testing::Environment* const kTraceCleanup =
    ::testing::AddGlobalTestEnvironment(new TraceCleanup);

unsigned long long Used(int device) {
  auto used = Library::Get().Fn<unsigned long long (*)(int)>("gpusliceFakeCudaUsedBytes");
  return used(device);
}

// A context of its own on device 1, current on this thread while the fixture lives.
class FakeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(Library::Get().handle(), nullptr) << dlerror();
    ASSERT_EQ(FN(cuInit)(0), CUDA_SUCCESS);
    baseline_ = Used(kDevice);
    ASSERT_EQ(FN(cuCtxCreate_v2)(&ctx_, 0, kDevice), CUDA_SUCCESS);
    EXPECT_EQ(Used(kDevice), baseline_ + 8 * kMiB) << "a context counts FAKE_CUDA_CONTEXT_MIB";
  }
  void TearDown() override {
    if (ctx_ != nullptr) {
      EXPECT_EQ(FN(cuCtxDestroy_v2)(ctx_), CUDA_SUCCESS);
    }
    EXPECT_EQ(Used(kDevice), baseline_) << "the test gave back what it took";
  }

  CUcontext ctx_ = nullptr;
  unsigned long long baseline_ = 0;
};

// --- before cuInit ---

TEST(FakeCudaBeforeInit, EveryCallButVersionAndProcAddressIsNotInitialized) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: cuInit not yet called
  EXPECT_EXIT(
      {
        Library& lib = Library::Get();
        if (lib.handle() == nullptr) std::_Exit(10);
        unsetenv("FAKE_CUDA_TRACE");  // this process leaves no trace file behind
        CUdevice device = 0;
        int count = 0;
        CUcontext ctx = nullptr;
        CUdeviceptr ptr = 0;
        std::size_t free = 0;
        std::size_t total = 0;
        int version = 0;
        void* pfn = nullptr;
        if (FN(cuDeviceGet)(&device, 0) != CUDA_ERROR_NOT_INITIALIZED) std::_Exit(11);
        if (FN(cuDeviceGetCount)(&count) != CUDA_ERROR_NOT_INITIALIZED) std::_Exit(12);
        if (FN(cuCtxCreate_v2)(&ctx, 0, 0) != CUDA_ERROR_NOT_INITIALIZED) std::_Exit(13);
        if (FN(cuDevicePrimaryCtxRetain)(&ctx, 0) != CUDA_ERROR_NOT_INITIALIZED) std::_Exit(14);
        if (FN(cuMemAlloc_v2)(&ptr, 1) != CUDA_ERROR_NOT_INITIALIZED) std::_Exit(15);
        if (FN(cuMemGetInfo_v2)(&free, &total) != CUDA_ERROR_NOT_INITIALIZED) std::_Exit(16);
        if (FN(cuLaunchKernel)(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) !=
            CUDA_ERROR_NOT_INITIALIZED) {
          std::_Exit(17);
        }
        if (FN(cuDriverGetVersion)(&version) != CUDA_SUCCESS || version != 12040) std::_Exit(18);
        if (FN(cuGetProcAddress)("cuInit", &pfn, 12000, 0) != CUDA_SUCCESS) std::_Exit(19);
        if (FN(cuInit)(1) != CUDA_ERROR_INVALID_VALUE) std::_Exit(20);
        if (FN(cuInit)(0) != CUDA_SUCCESS) std::_Exit(21);
        if (FN(cuDeviceGetCount)(&count) != CUDA_SUCCESS || count != 2) std::_Exit(22);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// --- exports and cuGetProcAddress ---

TEST(FakeCudaExports, EveryDriverFunctionIsExportedUnderItsRealName) {
  ASSERT_NE(Library::Get().handle(), nullptr) << dlerror();
  const char* names[] = {"cuInit",
                         "cuDriverGetVersion",
                         "cuDeviceGet",
                         "cuDeviceGetCount",
                         "cuDeviceGetUuid",
                         "cuDeviceTotalMem_v2",
                         "cuGetProcAddress",
                         "cuGetProcAddress_v2",
                         "cuCtxCreate_v2",
                         "cuCtxCreate_v3",
                         "cuCtxCreate_v4",
                         "cuCtxDestroy_v2",
                         "cuDevicePrimaryCtxRetain",
                         "cuDevicePrimaryCtxRelease_v2",
                         "cuDevicePrimaryCtxReset_v2",
                         "cuCtxGetCurrent",
                         "cuCtxSetCurrent",
                         "cuCtxGetDevice",
                         "cuCtxPushCurrent_v2",
                         "cuCtxPopCurrent_v2",
                         "cuCtxSynchronize",
                         "cuMemGetInfo_v2",
                         "cuMemAlloc_v2",
                         "cuMemAllocPitch_v2",
                         "cuMemAllocManaged",
                         "cuMemFree_v2",
                         "cuMemAllocAsync",
                         "cuMemAllocFromPoolAsync",
                         "cuMemFreeAsync",
                         "cuArrayCreate_v2",
                         "cuArray3DCreate_v2",
                         "cuArrayDestroy",
                         "cuArrayGetMemoryRequirements",
                         "cuMipmappedArrayCreate",
                         "cuMipmappedArrayDestroy",
                         "cuMipmappedArrayGetMemoryRequirements",
                         "cuMemCreate",
                         "cuMemRelease",
                         "cuMemMap",
                         "cuMemUnmap",
                         "cuMemAddressReserve",
                         "cuMemAddressFree",
                         "cuMemcpyHtoD_v2",
                         "cuMemcpyDtoH_v2",
                         "cuModuleLoadData",
                         "cuModuleGetFunction",
                         "cuModuleUnload",
                         "cuLaunchKernel",
                         "cuLaunchKernelEx",
                         "cuLaunchCooperativeKernel",
                         "cuLaunchCooperativeKernelMultiDevice",
                         "cuGraphLaunch",
                         "cuLaunch",
                         "cuLaunchGrid",
                         "cuLaunchGridAsync",
                         "cuStreamBeginCapture_v2",
                         "cuStreamEndCapture",
                         "cuStreamIsCapturing",
                         "cuGraphInstantiateWithFlags",
                         "cuGraphDestroy",
                         "cuGraphExecDestroy",
                         "cuStreamCreate",
                         "cuStreamDestroy_v2",
                         "cuStreamSynchronize",
                         "cuStreamGetCtx",
                         "cuEventCreate",
                         "cuEventDestroy_v2",
                         "cuEventRecord",
                         "cuEventQuery",
                         "cuEventSynchronize",
                         "cuEventElapsedTime",
                         "cuLaunchKernel_ptsz",
                         "cuLaunchKernelEx_ptsz",
                         "cuLaunchCooperativeKernel_ptsz",
                         "cuGraphLaunch_ptsz",
                         "cuMemAllocAsync_ptsz",
                         "cuMemAllocFromPoolAsync_ptsz",
                         "cuMemFreeAsync_ptsz",
                         "cuStreamSynchronize_ptsz",
                         "cuEventRecord_ptsz",
                         "cuDeviceGetDefaultMemPool",
                         "gpusliceFakeCudaPeakBytes",
                         "gpusliceFakeCudaUsedBytes",
                         "gpusliceFakeCudaCalls"};
  for (const char* name : names) {
    EXPECT_NE(dlsym(Library::Get().handle(), name), nullptr) << name;
  }
  // Nothing of the library's own C++ is exported.
  EXPECT_EQ(dlsym(Library::Get().handle(), "_ZN8gpuslice4cuda12_GLOBAL__N_11DEv"), nullptr);
}

struct ProcCase {
  const char* symbol;
  int version;
  cuuint64_t flags;
  const char* exported;  // nullptr: not found
  int status;            // the _v2 query result
};

TEST(FakeCudaExports, GetProcAddressAnswersTheVariantOfTheVersionAndFlags) {
  ASSERT_NE(Library::Get().handle(), nullptr) << dlerror();
  constexpr cuuint64_t kPtsz = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const ProcCase cases[] = {
      {"cuInit", 12000, 0, "cuInit", 0},
      {"cuMemAlloc", 12000, 0, "cuMemAlloc_v2", 0},
      {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2", 0},
      {"cuMemAlloc", 3010, 0, nullptr, 2},
      {"cuMemAlloc", 12000, kPtsz, "cuMemAlloc_v2", 0},
      {"cuMemFree", 12000, 0, "cuMemFree_v2", 0},
      {"cuMemGetInfo", 12000, 0, "cuMemGetInfo_v2", 0},
      {"cuMemAllocPitch", 12000, 0, "cuMemAllocPitch_v2", 0},
      {"cuArrayCreate", 12000, 0, "cuArrayCreate_v2", 0},
      {"cuArray3DCreate", 12000, 0, "cuArray3DCreate_v2", 0},
      {"cuMemcpyHtoD", 12000, 0, "cuMemcpyHtoD_v2", 0},
      {"cuMemcpyDtoH", 12000, 0, "cuMemcpyDtoH_v2", 0},
      {"cuCtxCreate", 3020, 0, "cuCtxCreate_v2", 0},
      {"cuCtxCreate", 11030, 0, "cuCtxCreate_v2", 0},
      {"cuCtxCreate", 11040, 0, "cuCtxCreate_v3", 0},
      {"cuCtxCreate", 12000, 0, "cuCtxCreate_v3", 0},
      {"cuCtxCreate", 12050, 0, "cuCtxCreate_v4", 0},
      {"cuCtxDestroy", 4000, 0, "cuCtxDestroy_v2", 0},
      {"cuCtxDestroy", 3020, 0, nullptr, 2},
      {"cuCtxPushCurrent", 12000, 0, "cuCtxPushCurrent_v2", 0},
      {"cuCtxPopCurrent", 12000, 0, "cuCtxPopCurrent_v2", 0},
      {"cuStreamDestroy", 12000, 0, "cuStreamDestroy_v2", 0},
      {"cuEventDestroy", 12000, 0, "cuEventDestroy_v2", 0},
      {"cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2", 0},
      {"cuDevicePrimaryCtxRelease", 10020, 0, nullptr, 2},
      {"cuDevicePrimaryCtxReset", 12000, 0, "cuDevicePrimaryCtxReset_v2", 0},
      {"cuStreamBeginCapture", 10010, 0, "cuStreamBeginCapture_v2", 0},
      {"cuGetProcAddress", 11030, 0, "cuGetProcAddress", 0},
      {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2", 0},
      {"cuDeviceGetDefaultMemPool", 12000, 0, "cuDeviceGetDefaultMemPool", 0},
      {"cuLaunchKernel", 12000, 0, "cuLaunchKernel", 0},
      {"cuLaunchKernel", 12000, kPtsz, "cuLaunchKernel_ptsz", 0},
      {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuLaunchKernel", 0},
      {"cuLaunchKernelEx", 12000, kPtsz, "cuLaunchKernelEx_ptsz", 0},
      {"cuLaunchCooperativeKernel", 12000, kPtsz, "cuLaunchCooperativeKernel_ptsz", 0},
      {"cuGraphLaunch", 12000, kPtsz, "cuGraphLaunch_ptsz", 0},
      {"cuMemAllocAsync", 12000, kPtsz, "cuMemAllocAsync_ptsz", 0},
      {"cuMemAllocFromPoolAsync", 12000, kPtsz, "cuMemAllocFromPoolAsync_ptsz", 0},
      {"cuMemFreeAsync", 12000, kPtsz, "cuMemFreeAsync_ptsz", 0},
      {"cuStreamSynchronize", 12000, kPtsz, "cuStreamSynchronize_ptsz", 0},
      {"cuEventRecord", 12000, kPtsz, "cuEventRecord_ptsz", 0},
      {"cuEventRecord", 12000, 0, "cuEventRecord", 0},
      {"cuLaunchCooperativeKernelMultiDevice", 12000, kPtsz, "cuLaunchCooperativeKernelMultiDevice",
       0},
      {"cuNoSuchFunction", 12000, 0, nullptr, 1},
      {"cuMemAlloc_v2", 12000, 0, nullptr, 1},
  };
  auto v1 = FN(cuGetProcAddress);
  auto v2 = FN(cuGetProcAddress_v2);
  for (const ProcCase& c : cases) {
    SCOPED_TRACE(std::string(c.symbol) + " version " + std::to_string(c.version) + " flags " +
                 std::to_string(c.flags));
    void* expected = c.exported != nullptr ? dlsym(Library::Get().handle(), c.exported) : nullptr;
    if (c.exported != nullptr) {
      ASSERT_NE(expected, nullptr);
    }
    const CUresult want = c.exported != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
    void* pfn = &pfn;  // not null, to see it cleared
    EXPECT_EQ(v1(c.symbol, &pfn, c.version, c.flags), want);
    EXPECT_EQ(pfn, expected);
    pfn = &pfn;
    CUdriverProcAddressQueryResult status = -1;
    EXPECT_EQ(v2(c.symbol, &pfn, c.version, c.flags, &status), want);
    EXPECT_EQ(pfn, expected);
    EXPECT_EQ(status, c.status);
  }
  void* pfn = nullptr;
  EXPECT_EQ(v1(nullptr, &pfn, 12000, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(v1("cuInit", nullptr, 12000, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(v1("cuInit", &pfn, 12000, 4), CUDA_ERROR_INVALID_VALUE);
}

// --- devices ---

TEST_F(FakeCudaTest, DevicesHaveTheirTotalAndStableDistinctUuids) {
  int count = 0;
  ASSERT_EQ(FN(cuDeviceGetCount)(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);
  CUdevice device = -1;
  EXPECT_EQ(FN(cuDeviceGet)(&device, 1), CUDA_SUCCESS);
  EXPECT_EQ(device, 1);
  EXPECT_EQ(FN(cuDeviceGet)(&device, 2), CUDA_ERROR_INVALID_DEVICE);
  std::size_t bytes = 0;
  EXPECT_EQ(FN(cuDeviceTotalMem_v2)(&bytes, 1), CUDA_SUCCESS);
  EXPECT_EQ(bytes, 1024 * kMiB);
  CUuuid a{};
  CUuuid b{};
  CUuuid a_again{};
  ASSERT_EQ(FN(cuDeviceGetUuid)(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(FN(cuDeviceGetUuid)(&b, 1), CUDA_SUCCESS);
  ASSERT_EQ(FN(cuDeviceGetUuid)(&a_again, 0), CUDA_SUCCESS);
  EXPECT_NE(std::memcmp(a.bytes, b.bytes, 16), 0);
  EXPECT_EQ(std::memcmp(a.bytes, a_again.bytes, 16), 0);
  EXPECT_EQ(FN(cuDeviceGetUuid)(&a, 5), CUDA_ERROR_INVALID_DEVICE);
}

// --- NVML (what the interposer measures contexts with) ---

// NVML's form of a device's UUID, from cuDeviceGetUuid.
std::string NvmlUuidOf(CUdevice device) {
  CUuuid uuid{};
  EXPECT_EQ(FN(cuDeviceGetUuid)(&uuid, device), CUDA_SUCCESS);
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[48];
  std::snprintf(text, sizeof text,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

TEST_F(FakeCudaTest, NvmlAnswersTheDevicesOwnCounts) {
  const auto& lib = Library::Get();
  ASSERT_EQ(lib.Fn<nvml::nvmlInit_v2_t>("nvmlInit_v2")(), nvml::NVML_SUCCESS);
  auto by_uuid = lib.Fn<nvml::nvmlDeviceGetHandleByUUID_t>("nvmlDeviceGetHandleByUUID");
  auto memory_info = lib.Fn<nvml::nvmlDeviceGetMemoryInfo_t>("nvmlDeviceGetMemoryInfo");
  auto memory_info_v2 = lib.Fn<nvml::nvmlDeviceGetMemoryInfo_v2_t>("nvmlDeviceGetMemoryInfo_v2");
  auto get_uuid = lib.Fn<nvml::nvmlDeviceGetUUID_t>("nvmlDeviceGetUUID");
  nvml::nvmlDevice_t device = nullptr;
  nvml::nvmlDevice_t other = nullptr;
  const std::string uuid = NvmlUuidOf(kDevice);
  ASSERT_EQ(by_uuid(uuid.c_str(), &device), nvml::NVML_SUCCESS) << uuid;
  ASSERT_EQ(by_uuid(NvmlUuidOf(0).c_str(), &other), nvml::NVML_SUCCESS);
  EXPECT_NE(device, other);
  nvml::nvmlDevice_t none = nullptr;
  EXPECT_EQ(by_uuid("GPU-00000000-0000-0000-0000-000000000000", &none), nvml::NVML_ERROR_NOT_FOUND);
  char text[nvml::NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  EXPECT_EQ(get_uuid(device, text, sizeof text), nvml::NVML_SUCCESS);
  EXPECT_EQ(text, uuid);
  EXPECT_EQ(get_uuid(device, text, 8), nvml::NVML_ERROR_INSUFFICIENT_SIZE);

  nvml::nvmlMemory_t memory{};
  ASSERT_EQ(memory_info(device, &memory), nvml::NVML_SUCCESS);
  EXPECT_EQ(memory.total, 1024 * kMiB);
  EXPECT_EQ(memory.used, Used(kDevice)) << "this test's context, at least";
  EXPECT_EQ(memory.free, memory.total - memory.used);
  CUdeviceptr ptr = 0;
  ASSERT_EQ(FN(cuMemAlloc_v2)(&ptr, 10 * kMiB), CUDA_SUCCESS);
  nvml::nvmlMemory_v2_t with{};
  ASSERT_EQ(memory_info_v2(device, &with), nvml::NVML_SUCCESS);
  EXPECT_EQ(with.used, memory.used + 10 * kMiB);
  EXPECT_EQ(with.free, memory.free - 10 * kMiB);
  EXPECT_EQ(with.reserved, 0u);
  EXPECT_EQ(FN(cuMemFree_v2)(ptr), CUDA_SUCCESS);
  // A context's memory shows as it is made and destroyed: what the interposer measures.
  CUcontext context = nullptr;
  ASSERT_EQ(FN(cuCtxCreate_v2)(&context, 0, kDevice), CUDA_SUCCESS);
  nvml::nvmlMemory_t with_context{};
  ASSERT_EQ(memory_info(device, &with_context), nvml::NVML_SUCCESS);
  EXPECT_EQ(with_context.free, memory.free - 8 * kMiB);
  EXPECT_EQ(FN(cuCtxDestroy_v2)(context), CUDA_SUCCESS);
  ASSERT_EQ(memory_info(device, &memory), nvml::NVML_SUCCESS);
  EXPECT_EQ(memory.free, with_context.free + 8 * kMiB);
  EXPECT_EQ(memory_info(nullptr, &memory), nvml::NVML_ERROR_INVALID_ARGUMENT);
}

// --- memory ---

TEST_F(FakeCudaTest, LinearMemoryIsCountedAndRefusedBeyondTheTotal) {
  std::size_t free = 0;
  std::size_t total = 0;
  ASSERT_EQ(FN(cuMemGetInfo_v2)(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 1024 * kMiB);
  EXPECT_EQ(free, total - Used(kDevice));
  const std::size_t room = free;
  CUdeviceptr big = 0;
  ASSERT_EQ(FN(cuMemAlloc_v2)(&big, room), CUDA_SUCCESS);
  EXPECT_NE(big, 0u);
  CUdeviceptr more = 0;
  EXPECT_EQ(FN(cuMemAlloc_v2)(&more, 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(FN(cuMemAllocManaged)(&more, 1, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(FN(cuMemGetInfo_v2)(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, 0u);
  EXPECT_EQ(Used(kDevice), 1024 * kMiB);
  auto peak = Library::Get().Fn<unsigned long long (*)(int)>("gpusliceFakeCudaPeakBytes");
  EXPECT_EQ(peak(kDevice), 1024 * kMiB);
  // The memory is host memory: it can be written and read back.
  const char text[] = "gpuslice";
  char back[sizeof text] = {};
  EXPECT_EQ(FN(cuMemcpyHtoD_v2)(big + 4096, text, sizeof text), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuMemcpyDtoH_v2)(back, big + 4096, sizeof text), CUDA_SUCCESS);
  EXPECT_STREQ(back, text);
  EXPECT_EQ(FN(cuMemcpyDtoH_v2)(back, big + room, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FN(cuMemFree_v2)(big), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuMemFree_v2)(big), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FN(cuMemAlloc_v2)(&more, 0), CUDA_ERROR_INVALID_VALUE);
  // Managed memory counts like device memory.
  ASSERT_EQ(FN(cuMemAllocManaged)(&more, 10 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), baseline_ + 18 * kMiB);
  EXPECT_EQ(FN(cuMemFree_v2)(more), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, PitchCountsPitchTimesHeight) {
  CUdeviceptr ptr = 0;
  std::size_t pitch = 0;
  const auto before = Used(kDevice);
  ASSERT_EQ(FN(cuMemAllocPitch_v2)(&ptr, &pitch, 1000, 10, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 1024u);
  EXPECT_EQ(Used(kDevice), before + 10240);
  CUdeviceptr exact = 0;
  ASSERT_EQ(FN(cuMemAllocPitch_v2)(&exact, &pitch, 1536, 3, 8), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 1536u);
  EXPECT_EQ(Used(kDevice), before + 10240 + 1536 * 3);
  EXPECT_EQ(FN(cuMemAllocPitch_v2)(&ptr, &pitch, 1000, 10, 3), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FN(cuMemFree_v2)(ptr), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuMemFree_v2)(exact), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, ArraysCountTheirRequirementRoundedTo2MiB) {
  const auto before = Used(kDevice);
  CUDA_ARRAY_DESCRIPTOR desc{};
  desc.Width = 1000;
  desc.Height = 3;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 1;
  CUarray array = nullptr;
  ASSERT_EQ(FN(cuArrayCreate_v2)(&array, &desc), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), before + 2 * kMiB);  // 12000 bytes
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  ASSERT_EQ(FN(cuArrayGetMemoryRequirements)(&req, array, kDevice), CUDA_SUCCESS);
  EXPECT_EQ(req.size, 2 * kMiB);
  EXPECT_EQ(req.alignment, 2 * kMiB);

  CUDA_ARRAY3D_DESCRIPTOR desc3{};
  desc3.Width = 256;
  desc3.Height = 256;
  desc3.Depth = 12;
  desc3.Format = CU_AD_FORMAT_HALF;
  desc3.NumChannels = 4;  // 8 bytes per element: 6 MiB
  CUarray volume = nullptr;
  ASSERT_EQ(FN(cuArray3DCreate_v2)(&volume, &desc3), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), before + 8 * kMiB);
  desc3.Depth = 13;  // 6.5 MiB -> 8 MiB
  CUarray odd = nullptr;
  ASSERT_EQ(FN(cuArray3DCreate_v2)(&odd, &desc3), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), before + 16 * kMiB);

  // A mipmapped 2D array: 1024x1024 + 512x512 floats = 5 MiB -> 6 MiB.
  CUDA_ARRAY3D_DESCRIPTOR mip{};
  mip.Width = 1024;
  mip.Height = 1024;
  mip.Format = CU_AD_FORMAT_FLOAT;
  mip.NumChannels = 1;
  CUmipmappedArray mipmap = nullptr;
  ASSERT_EQ(FN(cuMipmappedArrayCreate)(&mipmap, &mip, 2), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), before + 22 * kMiB);
  ASSERT_EQ(FN(cuMipmappedArrayGetMemoryRequirements)(&req, mipmap, kDevice), CUDA_SUCCESS);
  EXPECT_EQ(req.size, 6 * kMiB);
  // Levels halve down to 1: 4x1 uint8 with 3 levels = 4 + 2 + 1 bytes.
  CUDA_ARRAY3D_DESCRIPTOR tiny{};
  tiny.Width = 4;
  tiny.Height = 1;
  tiny.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  tiny.NumChannels = 1;
  CUmipmappedArray small = nullptr;
  ASSERT_EQ(FN(cuMipmappedArrayCreate)(&small, &tiny, 3), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuMipmappedArrayCreate)(&small, &tiny, 4), CUDA_ERROR_INVALID_VALUE);

  desc.Format = static_cast<CUarray_format>(0x77);
  EXPECT_EQ(FN(cuArrayCreate_v2)(&array, &desc), CUDA_ERROR_INVALID_VALUE);
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 3;
  EXPECT_EQ(FN(cuArrayCreate_v2)(&array, &desc), CUDA_ERROR_INVALID_VALUE);

  EXPECT_EQ(FN(cuArrayDestroy)(array), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuArrayDestroy)(array), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(FN(cuArrayDestroy)(volume), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuArrayDestroy)(odd), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuMipmappedArrayDestroy)(mipmap), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuMipmappedArrayDestroy)(small), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), before);
}

TEST_F(FakeCudaTest, VmmCountsHandlesNotAddressSpace) {
  const auto before = Used(kDevice);
  CUmemAllocationProp prop{};
  prop.type = 1;
  prop.location.type = 1;
  prop.location.id = kDevice;
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_EQ(FN(cuMemCreate)(&handle, 3 * kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(FN(cuMemCreate)(&handle, 4 * kMiB, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), before + 4 * kMiB);
  CUdeviceptr base = 0;
  ASSERT_EQ(FN(cuMemAddressReserve)(&base, 8 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(base % (2 * kMiB), 0u);
  EXPECT_EQ(Used(kDevice), before + 4 * kMiB);
  EXPECT_EQ(FN(cuMemMap)(base + 6 * kMiB, 4 * kMiB, 0, handle, 0), CUDA_ERROR_INVALID_VALUE)
      << "beyond the reservation";
  ASSERT_EQ(FN(cuMemMap)(base, 4 * kMiB, 0, handle, 0), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuMemMap)(base + 2 * kMiB, 2 * kMiB, 0, handle, 0), CUDA_ERROR_INVALID_VALUE)
      << "overlapping a mapping";
  const char text[] = "mapped";
  char back[sizeof text] = {};
  EXPECT_EQ(FN(cuMemcpyHtoD_v2)(base + 100, text, sizeof text), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuMemcpyDtoH_v2)(back, base + 100, sizeof text), CUDA_SUCCESS);
  EXPECT_STREQ(back, text);
  EXPECT_EQ(FN(cuMemUnmap)(base, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), before + 4 * kMiB);
  EXPECT_EQ(FN(cuMemRelease)(handle), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), before);
  EXPECT_EQ(FN(cuMemRelease)(handle), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FN(cuMemAddressFree)(base, 8 * kMiB), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, AsyncAndPoolAllocationsCountAtOnce) {
  CUstream stream = nullptr;
  ASSERT_EQ(FN(cuStreamCreate)(&stream, 0), CUDA_SUCCESS);
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(FN(cuDeviceGetDefaultMemPool)(&pool, kDevice), CUDA_SUCCESS);
  EXPECT_NE(pool, nullptr);
  const auto before = Used(kDevice);
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  CUdeviceptr c = 0;
  ASSERT_EQ(FN(cuMemAllocAsync)(&a, 3 * kMiB, stream), CUDA_SUCCESS);
  ASSERT_EQ(FN(cuMemAllocFromPoolAsync)(&b, 5 * kMiB, pool, stream), CUDA_SUCCESS);
  ASSERT_EQ(FN_PTSZ(cuMemAllocAsync)(&c, 7 * kMiB, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), before + 15 * kMiB);
  EXPECT_EQ(FN(cuMemAllocFromPoolAsync)(&b, kMiB, nullptr, stream), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FN(cuMemFreeAsync)(a, stream), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), before + 12 * kMiB);
  EXPECT_EQ(FN_PTSZ(cuMemFreeAsync)(b, stream), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuMemFreeAsync)(c, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), before);
  EXPECT_EQ(FN(cuStreamSynchronize)(stream), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuStreamDestroy_v2)(stream), CUDA_SUCCESS);
}

// --- contexts ---

TEST_F(FakeCudaTest, DestroyingAContextFreesItsMemory) {
  CUcontext other = nullptr;
  ASSERT_EQ(FN(cuCtxCreate_v3)(&other, nullptr, 0, 0, kDevice), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), baseline_ + 16 * kMiB);
  CUcontext current = nullptr;
  EXPECT_EQ(FN(cuCtxGetCurrent)(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, other) << "cuCtxCreate pushes the new context";
  CUdeviceptr ptr = 0;
  ASSERT_EQ(FN(cuMemAlloc_v2)(&ptr, 100 * kMiB), CUDA_SUCCESS);
  CUDA_ARRAY_DESCRIPTOR desc{};
  desc.Width = 1024;
  desc.Height = 1024;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 1;
  CUarray array = nullptr;
  ASSERT_EQ(FN(cuArrayCreate_v2)(&array, &desc), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), baseline_ + 120 * kMiB);
  EXPECT_EQ(FN(cuCtxDestroy_v2)(other), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), baseline_ + 8 * kMiB);
  EXPECT_EQ(FN(cuCtxGetCurrent)(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, ctx_) << "destroying the current context pops it";
  EXPECT_EQ(FN(cuMemFree_v2)(ptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FN(cuArrayDestroy)(array), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(FN(cuCtxSetCurrent)(other), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(FN(cuCtxDestroy_v2)(other), CUDA_ERROR_INVALID_CONTEXT);

  CUcontext v4 = nullptr;
  ASSERT_EQ(FN(cuCtxCreate_v4)(&v4, nullptr, 0, kDevice), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuCtxDestroy_v2)(v4), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, PrimaryContextsAreRetainedReleasedAndReset) {
  CUcontext primary = nullptr;
  CUcontext again = nullptr;
  ASSERT_EQ(FN(cuDevicePrimaryCtxRetain)(&primary, kDevice), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), baseline_ + 16 * kMiB);
  ASSERT_EQ(FN(cuDevicePrimaryCtxRetain)(&again, kDevice), CUDA_SUCCESS);
  EXPECT_EQ(primary, again);
  EXPECT_EQ(Used(kDevice), baseline_ + 16 * kMiB) << "one primary context per device";
  ASSERT_EQ(FN(cuCtxPushCurrent_v2)(primary), CUDA_SUCCESS);
  CUdevice device = -1;
  EXPECT_EQ(FN(cuCtxGetDevice)(&device), CUDA_SUCCESS);
  EXPECT_EQ(device, kDevice);
  CUdeviceptr ptr = 0;
  ASSERT_EQ(FN(cuMemAlloc_v2)(&ptr, 50 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), baseline_ + 66 * kMiB);
  EXPECT_EQ(FN(cuDevicePrimaryCtxReset_v2)(kDevice), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), baseline_ + 16 * kMiB) << "reset frees the primary's allocations";
  EXPECT_EQ(FN(cuMemFree_v2)(ptr), CUDA_ERROR_INVALID_VALUE);
  CUcontext popped = nullptr;
  EXPECT_EQ(FN(cuCtxPopCurrent_v2)(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, primary);
  EXPECT_EQ(FN(cuDevicePrimaryCtxRelease_v2)(kDevice), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), baseline_ + 16 * kMiB);
  EXPECT_EQ(FN(cuDevicePrimaryCtxRelease_v2)(kDevice), CUDA_SUCCESS);
  EXPECT_EQ(Used(kDevice), baseline_ + 8 * kMiB) << "the last release destroys it";
  EXPECT_EQ(FN(cuDevicePrimaryCtxRelease_v2)(kDevice), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(FakeCudaTest, WithoutACurrentContextMemoryCallsFail) {
  CUcontext popped = nullptr;
  ASSERT_EQ(FN(cuCtxPopCurrent_v2)(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, ctx_);
  CUdeviceptr ptr = 0;
  std::size_t free = 0;
  std::size_t total = 0;
  EXPECT_EQ(FN(cuMemAlloc_v2)(&ptr, 1), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(FN(cuMemGetInfo_v2)(&free, &total), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(FN(cuCtxSynchronize)(), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(FN(cuCtxSetCurrent)(ctx_), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuMemGetInfo_v2)(&free, &total), CUDA_SUCCESS);
}

// --- execution ---

// Kernel handles of a module loaded in the current context.
struct Kernels {
  CUmodule module = nullptr;
  CUfunction sleep = nullptr;
  CUfunction work = nullptr;
  CUfunction noop = nullptr;
};

Kernels LoadKernels() {
  Kernels k;
  EXPECT_EQ(FN(cuModuleLoadData)(&k.module, "any image"), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuModuleGetFunction)(&k.sleep, k.module, "gpuslice_sleep"), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuModuleGetFunction)(&k.work, k.module, "gpuslice_work"), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuModuleGetFunction)(&k.noop, k.module, "gpuslice_noop"), CUDA_SUCCESS);
  return k;
}

CUresult LaunchOne(CUfunction f, unsigned long long arg, CUstream stream) {
  void* params[] = {&arg};
  return FN(cuLaunchKernel)(f, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
}

TEST_F(FakeCudaTest, ModulesKnowTheThreeKernels) {
  Kernels k = LoadKernels();
  CUfunction f = nullptr;
  EXPECT_EQ(FN(cuModuleGetFunction)(&f, k.module, "something_else"), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(FN(cuModuleLoadData)(&k.module, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FN(cuLaunchKernel)(k.sleep, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE)
      << "gpuslice_sleep needs its parameter";
  EXPECT_EQ(FN(cuLaunchKernel)(k.noop, 0, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FN(cuLaunchKernel)(k.noop, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(FN(cuModuleUnload)(k.module), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuLaunchKernel)(k.noop, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_HANDLE)
      << "the module is gone";
  EXPECT_EQ(FN(cuCtxSynchronize)(), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, KernelsRunAsynchronouslyAndEventsTimeThem) {
  Kernels k = LoadKernels();
  CUstream stream = nullptr;
  ASSERT_EQ(FN(cuStreamCreate)(&stream, 1), CUDA_SUCCESS);
  CUcontext owner = nullptr;
  EXPECT_EQ(FN(cuStreamGetCtx)(stream, &owner), CUDA_SUCCESS);
  EXPECT_EQ(owner, ctx_);
  CUevent start = nullptr;
  CUevent end = nullptr;
  CUevent untimed = nullptr;
  ASSERT_EQ(FN(cuEventCreate)(&start, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(FN(cuEventCreate)(&end, CU_EVENT_BLOCKING_SYNC), CUDA_SUCCESS);
  ASSERT_EQ(FN(cuEventCreate)(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  float ms = 0;
  EXPECT_EQ(FN(cuEventElapsedTime)(&ms, start, end), CUDA_ERROR_INVALID_HANDLE) << "never recorded";
  EXPECT_EQ(FN(cuEventQuery)(end), CUDA_SUCCESS) << "an event never recorded is complete";

  const std::uint64_t launched = MonotonicNs();
  ASSERT_EQ(FN(cuEventRecord)(start, stream), CUDA_SUCCESS);
  ASSERT_EQ(LaunchOne(k.sleep, 30'000'000, stream), CUDA_SUCCESS);  // 30 ms
  ASSERT_EQ(LaunchOne(k.work, 20'000'000, stream), CUDA_SUCCESS);   // 20 ms
  ASSERT_EQ(FN_PTSZ(cuEventRecord)(end, stream), CUDA_SUCCESS);
  ASSERT_EQ(FN(cuEventRecord)(untimed, stream), CUDA_SUCCESS);
  EXPECT_LT(MonotonicNs() - launched, 20'000'000u) << "launches do not wait for kernels";
  EXPECT_EQ(FN(cuEventQuery)(end), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(FN(cuEventElapsedTime)(&ms, start, end), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(FN(cuEventSynchronize)(end), CUDA_SUCCESS);
  EXPECT_GE(MonotonicNs() - launched, 50'000'000u);
  EXPECT_EQ(FN(cuEventQuery)(end), CUDA_SUCCESS);
  ASSERT_EQ(FN(cuEventElapsedTime)(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 50.0f);
  EXPECT_LT(ms, 60.0f);
  EXPECT_EQ(FN(cuEventElapsedTime)(&ms, start, untimed), CUDA_ERROR_INVALID_HANDLE);

  // Stream and context synchronisation wait for the kernels.
  const std::uint64_t second = MonotonicNs();
  ASSERT_EQ(LaunchOne(k.sleep, 20'000'000, stream), CUDA_SUCCESS);
  ASSERT_EQ(FN(cuStreamSynchronize)(stream), CUDA_SUCCESS);
  EXPECT_GE(MonotonicNs() - second, 20'000'000u);
  const std::uint64_t third = MonotonicNs();
  ASSERT_EQ(LaunchOne(k.sleep, 20'000'000, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(FN(cuCtxSynchronize)(), CUDA_SUCCESS);
  EXPECT_GE(MonotonicNs() - third, 20'000'000u);

  // A destroyed event with a record still queued is safe.
  CUevent dropped = nullptr;
  ASSERT_EQ(FN(cuEventCreate)(&dropped, 0), CUDA_SUCCESS);
  ASSERT_EQ(LaunchOne(k.sleep, 5'000'000, stream), CUDA_SUCCESS);
  ASSERT_EQ(FN(cuEventRecord)(dropped, stream), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuEventDestroy_v2)(dropped), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuEventQuery)(dropped), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(FN_PTSZ(cuStreamSynchronize)(stream), CUDA_SUCCESS);

  for (CUevent e : {start, end, untimed}) EXPECT_EQ(FN(cuEventDestroy_v2)(e), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuStreamDestroy_v2)(stream), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuStreamDestroy_v2)(stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(FN(cuModuleUnload)(k.module), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, EveryLaunchFunctionRunsItsKernel) {
  Kernels k = LoadKernels();
  CUstream stream = nullptr;
  ASSERT_EQ(FN(cuStreamCreate)(&stream, 0), CUDA_SUCCESS);
  unsigned long long ns = 10'000'000;
  void* params[] = {&ns};
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  CUDA_LAUNCH_PARAMS multi{};
  multi.function = k.sleep;
  multi.gridDimX = multi.gridDimY = multi.gridDimZ = 1;
  multi.blockDimX = multi.blockDimY = multi.blockDimZ = 1;
  multi.hStream = stream;
  multi.kernelParams = params;
  struct Case {
    const char* name;
    std::function<CUresult()> launch;
    std::uint64_t at_least_ns;
  };
  const Case cases[] = {
      {"cuLaunchKernel_ptsz",
       [&] {
         return FN_PTSZ(cuLaunchKernel)(k.sleep, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
       },
       ns},
      {"cuLaunchKernelEx", [&] { return FN(cuLaunchKernelEx)(&config, k.sleep, params, nullptr); },
       ns},
      {"cuLaunchKernelEx_ptsz",
       [&] { return FN_PTSZ(cuLaunchKernelEx)(&config, k.sleep, params, nullptr); }, ns},
      {"cuLaunchCooperativeKernel",
       [&] { return FN(cuLaunchCooperativeKernel)(k.sleep, 1, 1, 1, 1, 1, 1, 0, stream, params); },
       ns},
      {"cuLaunchCooperativeKernel_ptsz",
       [&] {
         return FN_PTSZ(cuLaunchCooperativeKernel)(k.sleep, 1, 1, 1, 1, 1, 1, 0, stream, params);
       },
       ns},
      {"cuLaunchCooperativeKernelMultiDevice",
       [&] { return FN(cuLaunchCooperativeKernelMultiDevice)(&multi, 1, 0); }, ns},
      {"cuLaunch", [&] { return FN(cuLaunch)(k.noop); }, 0},
      {"cuLaunchGrid", [&] { return FN(cuLaunchGrid)(k.noop, 2, 2); }, 0},
      {"cuLaunchGridAsync", [&] { return FN(cuLaunchGridAsync)(k.noop, 2, 2, stream); }, 0},
  };
  auto calls = Library::Get().Fn<unsigned long long (*)(const char*)>("gpusliceFakeCudaCalls");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const unsigned long long before = calls(c.name);
    const std::uint64_t start = MonotonicNs();
    EXPECT_EQ(c.launch(), CUDA_SUCCESS);
    EXPECT_EQ(FN(cuCtxSynchronize)(), CUDA_SUCCESS);
    EXPECT_GE(MonotonicNs() - start, c.at_least_ns);
    EXPECT_EQ(calls(c.name), before + 1);
  }
  EXPECT_EQ(FN(cuStreamDestroy_v2)(stream), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuModuleUnload)(k.module), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, CaptureRecordsLaunchesIntoAGraph) {
  Kernels k = LoadKernels();
  CUstream stream = nullptr;
  ASSERT_EQ(FN(cuStreamCreate)(&stream, 1), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuStreamBeginCapture_v2)(nullptr, 0), 900) << "not the legacy stream";
  ASSERT_EQ(FN(cuStreamBeginCapture_v2)(stream, 2), CUDA_SUCCESS);
  int capturing = 0;
  EXPECT_EQ(FN(cuStreamIsCapturing)(stream, &capturing), CUDA_SUCCESS);
  EXPECT_EQ(capturing, 1);
  const std::uint64_t start = MonotonicNs();
  ASSERT_EQ(LaunchOne(k.sleep, 40'000'000, stream), CUDA_SUCCESS);
  ASSERT_EQ(LaunchOne(k.sleep, 10'000'000, stream), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuStreamSynchronize)(stream), 900) << "no synchronising a capturing stream";
  CUgraph graph = nullptr;
  ASSERT_EQ(FN(cuStreamEndCapture)(stream, &graph), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuStreamIsCapturing)(stream, &capturing), CUDA_SUCCESS);
  EXPECT_EQ(capturing, 0);
  EXPECT_EQ(FN(cuCtxSynchronize)(), CUDA_SUCCESS);
  EXPECT_LT(MonotonicNs() - start, 40'000'000u) << "captured kernels did not run";
  CUgraphExec exec = nullptr;
  ASSERT_EQ(FN(cuGraphInstantiateWithFlags)(&exec, graph, 0), CUDA_SUCCESS);
  const std::uint64_t launched = MonotonicNs();
  ASSERT_EQ(FN(cuGraphLaunch)(exec, stream), CUDA_SUCCESS);
  ASSERT_EQ(FN_PTSZ(cuGraphLaunch)(exec, stream), CUDA_SUCCESS);
  ASSERT_EQ(FN(cuStreamSynchronize)(stream), CUDA_SUCCESS);
  EXPECT_GE(MonotonicNs() - launched, 100'000'000u) << "each launch runs both kernels";
  EXPECT_EQ(FN(cuGraphExecDestroy)(exec), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuGraphDestroy)(graph), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuGraphLaunch)(exec, stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(FN(cuStreamDestroy_v2)(stream), CUDA_SUCCESS);
  EXPECT_EQ(FN(cuModuleUnload)(k.module), CUDA_SUCCESS);
}

struct TraceLine {
  long pid;
  std::uint64_t start;
  std::uint64_t end;
};

std::vector<TraceLine> ReadTrace() {
  std::vector<TraceLine> lines;
  std::ifstream in(Library::Get().trace_path());
  TraceLine line{};
  while (in >> line.pid >> line.start >> line.end) lines.push_back(line);
  return lines;
}

TEST_F(FakeCudaTest, KernelsOfAllContextsTakeTheEngineInTurnAndAreTraced) {
  // Two threads, each with a context of its own, launch 10 kernels of 5 ms each.
  const std::size_t before = ReadTrace().size();
  auto worker = [] {
    CUcontext ctx = nullptr;
    ASSERT_EQ(FN(cuCtxCreate_v2)(&ctx, 0, kDevice), CUDA_SUCCESS);
    Kernels k = LoadKernels();
    for (int i = 0; i < 10; ++i) ASSERT_EQ(LaunchOne(k.work, 5'000'000, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(FN(cuCtxSynchronize)(), CUDA_SUCCESS);
    EXPECT_EQ(FN(cuModuleUnload)(k.module), CUDA_SUCCESS);
    EXPECT_EQ(FN(cuCtxDestroy_v2)(ctx), CUDA_SUCCESS);
  };
  const std::uint64_t start = MonotonicNs();
  std::thread a(worker);
  std::thread b(worker);
  a.join();
  b.join();
  EXPECT_GE(MonotonicNs() - start, 100'000'000u) << "one engine: 20 kernels of 5 ms in turn";
  std::vector<TraceLine> lines = ReadTrace();
  ASSERT_EQ(lines.size(), before + 20);
  lines.erase(lines.begin(), lines.begin() + static_cast<std::ptrdiff_t>(before));
  std::sort(lines.begin(), lines.end(),
            [](const TraceLine& x, const TraceLine& y) { return x.start < y.start; });
  for (std::size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].pid, static_cast<long>(getpid()));
    EXPECT_EQ(lines[i].end - lines[i].start, 5'000'000u);
    if (i > 0) {
      EXPECT_GE(lines[i].start, lines[i - 1].end) << "kernels never overlap";
    }
  }
}

}  // namespace
}  // namespace gpuslice::cuda
