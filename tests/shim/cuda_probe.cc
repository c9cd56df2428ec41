// cuda_probe: uses the CUDA driver API the way applications do, so that one program tests the
// interposer (libgpuslice-cuda.so) against the test CUDA library here (tests/shim/) and against a
// real GPU (tests/gpu/).
//
// It depends on nothing but libc, libdl, libpthread, libstdc++ and src/shim/cuda_api.h:
//   g++ -O2 -std=c++20 tests/shim/cuda_probe.cc -I src/shim -ldl -lpthread
// It dlopens libcuda.so.1 (never links it) and finds the driver's functions either like libcudart
// 12 (--via getproc, the default: dlsym of cuGetProcAddress_v2, else cuGetProcAddress, then every
// other function through it with cudaVersion 12000) or by their exported names (--via dlsym).
// --ptsz asks for the per-thread default stream variants. Every command works on the primary
// context of device 0, prints exactly one JSON object on stdout (diagnostics go to stderr) and
// exits 0 when it ran as intended, 1 when a CUDA call failed unexpectedly, 2 on bad usage.
//
// Commands (sizes in MiB = 2^20 bytes):
//   info
//     {"driver_version":N,"devices":N,"free":B,"total":B}
//   alloc --path P --mib N [--count K] [--hold-ms T]
//     P: alloc | pitch | managed | async | pool | array | array3d | mipmap | vmm. Allocates chunks
//     of about N MiB until the first failure (at most K, default 100000), then reports
//     {"path":P,"chunk_bytes":B,"reserved_bytes":B,"allocated":n,"failed_with":code,
//      "free":B,"total":B,"device_peak_bytes":B,...}, holds T ms, frees everything and adds
//     "free_after". chunk_bytes is what each call asked for; reserved_bytes what the driver says
//     it took (pitch*height; the memory requirement of an array; -1 when unknown). Chunks:
//       alloc/managed/async/pool: N MiB;
//       pitch: rows of 1000 bytes (pitch rounded up by the driver), ceil(N MiB / 1000) rows;
//       array: 2D float, one channel, 4096 x (N*64) (N MiB);
//       array3d: float, one channel, 256 x 256 x (N*4) (N MiB);
//       mipmap: 2D float, one channel, 4 levels, a square base chosen so that the sum of the levels
//         is about N MiB (chunk_bytes is that exact sum);
//       vmm: cuMemCreate of N MiB rounded up to 2 MiB, cuMemAddressReserve, cuMemMap.
//     device_peak_bytes is gpusliceFakeCudaPeakBytes(0) of the test CUDA library, -1 elsewhere.
//   launch --kernel sleep|work --arg A --seconds S [--path kernel|ex|coop|graph] [--in-flight F]
//     Launches the kernel back to back for S seconds on a stream of its own, each launch followed
//     by an event, at most F (default 4) in flight; a launch completes when its event is seen
//     complete. work_per_window[i] sums A over the launches completed in second i after the first
//     launch. graph: one kernel captured once, the graph launched repeatedly.
//     {"launches":n,"errors":n,"first_error":code,"work_per_window":[...],"window_s":1.0,...}
//   bench-alloc --pairs N [--bytes B]      {"pairs":N,"ns_per_pair":x}
//   bench-launch --launches N              {"launches":N,"launches_per_s":x}
//   crash --mib N     cuMemAlloc of N MiB, prints {"allocated_bytes":B}, then SIGKILLs itself.
//   hold --mib N --ms T
//     cuMemAlloc of N MiB, prints {"allocated":0|1,"failed_with":code} at once, holds it T ms,
//     frees it.
//   context
//     cuCtxCreate (_v2) of a second context on device 0, the primary one staying retained;
//     cuMemGetInfo in it; cuCtxDestroy; cuMemGetInfo in the primary context again:
//     {"created":0|1,"failed_with":code,"free_before":B,"total":B,"free_with":B,
//      "device_used_with":B,"free_after":B,"device_used_after":B} (free_with and device_used_with
//     only when it was created; device_used_* as gpusliceFakeCudaUsedBytes(0), -1 elsewhere).
//     Exits 0 when the context was made or refused with CUDA_ERROR_OUT_OF_MEMORY.
// A failure before the command's work prints {"error":"<call>","code":N}; a refused primary
// context also "device_used_bytes" (what the test CUDA library's device 0 holds then, -1
// elsewhere).
#include <dlfcn.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cuda_api.h"
#include "probe_kernels.h"

namespace {

namespace cu = gpuslice::cuda;
using cu::CUresult;

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr int kCudaVersion = 12000;

// --- the driver's functions ---

struct Api {
  cu::cuInit_t cuInit = nullptr;
  cu::cuDriverGetVersion_t cuDriverGetVersion = nullptr;
  cu::cuDeviceGet_t cuDeviceGet = nullptr;
  cu::cuDeviceGetCount_t cuDeviceGetCount = nullptr;
  cu::cuDevicePrimaryCtxRetain_t cuDevicePrimaryCtxRetain = nullptr;
  cu::cuDevicePrimaryCtxRelease_v2_t cuDevicePrimaryCtxRelease = nullptr;
  cu::cuCtxSetCurrent_t cuCtxSetCurrent = nullptr;
  cu::cuCtxCreate_v2_t cuCtxCreate = nullptr;
  cu::cuCtxDestroy_v2_t cuCtxDestroy = nullptr;
  cu::cuCtxSynchronize_t cuCtxSynchronize = nullptr;
  cu::cuMemGetInfo_v2_t cuMemGetInfo = nullptr;
  cu::cuMemAlloc_v2_t cuMemAlloc = nullptr;
  cu::cuMemFree_v2_t cuMemFree = nullptr;
  cu::cuMemAllocPitch_v2_t cuMemAllocPitch = nullptr;
  cu::cuMemAllocManaged_t cuMemAllocManaged = nullptr;
  cu::cuMemAllocAsync_t cuMemAllocAsync = nullptr;
  cu::cuMemAllocFromPoolAsync_t cuMemAllocFromPoolAsync = nullptr;
  cu::cuMemFreeAsync_t cuMemFreeAsync = nullptr;
  cu::cuDeviceGetDefaultMemPool_t cuDeviceGetDefaultMemPool = nullptr;
  cu::cuArrayCreate_v2_t cuArrayCreate = nullptr;
  cu::cuArray3DCreate_v2_t cuArray3DCreate = nullptr;
  cu::cuArrayDestroy_t cuArrayDestroy = nullptr;
  cu::cuArrayGetMemoryRequirements_t cuArrayGetMemoryRequirements = nullptr;
  cu::cuMipmappedArrayCreate_t cuMipmappedArrayCreate = nullptr;
  cu::cuMipmappedArrayDestroy_t cuMipmappedArrayDestroy = nullptr;
  cu::cuMipmappedArrayGetMemoryRequirements_t cuMipmappedArrayGetMemoryRequirements = nullptr;
  cu::cuMemCreate_t cuMemCreate = nullptr;
  cu::cuMemRelease_t cuMemRelease = nullptr;
  cu::cuMemMap_t cuMemMap = nullptr;
  cu::cuMemUnmap_t cuMemUnmap = nullptr;
  cu::cuMemAddressReserve_t cuMemAddressReserve = nullptr;
  cu::cuMemAddressFree_t cuMemAddressFree = nullptr;
  cu::cuModuleLoadData_t cuModuleLoadData = nullptr;
  cu::cuModuleGetFunction_t cuModuleGetFunction = nullptr;
  cu::cuModuleUnload_t cuModuleUnload = nullptr;
  cu::cuLaunchKernel_t cuLaunchKernel = nullptr;
  cu::cuLaunchKernelEx_t cuLaunchKernelEx = nullptr;
  cu::cuLaunchCooperativeKernel_t cuLaunchCooperativeKernel = nullptr;
  cu::cuGraphLaunch_t cuGraphLaunch = nullptr;
  cu::cuStreamBeginCapture_v2_t cuStreamBeginCapture = nullptr;
  cu::cuStreamEndCapture_t cuStreamEndCapture = nullptr;
  cu::cuGraphInstantiateWithFlags_t cuGraphInstantiateWithFlags = nullptr;
  cu::cuGraphDestroy_t cuGraphDestroy = nullptr;
  cu::cuGraphExecDestroy_t cuGraphExecDestroy = nullptr;
  cu::cuStreamCreate_t cuStreamCreate = nullptr;
  cu::cuStreamDestroy_v2_t cuStreamDestroy = nullptr;
  cu::cuStreamSynchronize_t cuStreamSynchronize = nullptr;
  cu::cuEventCreate_t cuEventCreate = nullptr;
  cu::cuEventDestroy_v2_t cuEventDestroy = nullptr;
  cu::cuEventRecord_t cuEventRecord = nullptr;
  cu::cuEventSynchronize_t cuEventSynchronize = nullptr;
};

// One function: its base name (what cuGetProcAddress takes), its exported name, whether it has a
// per-thread default stream variant `<exported>_ptsz`, and where it goes.
struct Entry {
  const char* base;
  const char* exported;
  bool has_ptsz;
  void** slot;
};

template <typename F>
void** Slot(F* field) {
  return reinterpret_cast<void**>(field);
}

std::vector<Entry> Entries(Api& a) {
  return {
      {"cuInit", "cuInit", false, Slot(&a.cuInit)},
      {"cuDriverGetVersion", "cuDriverGetVersion", false, Slot(&a.cuDriverGetVersion)},
      {"cuDeviceGet", "cuDeviceGet", false, Slot(&a.cuDeviceGet)},
      {"cuDeviceGetCount", "cuDeviceGetCount", false, Slot(&a.cuDeviceGetCount)},
      {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", false,
       Slot(&a.cuDevicePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", false,
       Slot(&a.cuDevicePrimaryCtxRelease)},
      {"cuCtxSetCurrent", "cuCtxSetCurrent", false, Slot(&a.cuCtxSetCurrent)},
      {"cuCtxCreate", "cuCtxCreate_v2", false, Slot(&a.cuCtxCreate)},
      {"cuCtxDestroy", "cuCtxDestroy_v2", false, Slot(&a.cuCtxDestroy)},
      {"cuCtxSynchronize", "cuCtxSynchronize", false, Slot(&a.cuCtxSynchronize)},
      {"cuMemGetInfo", "cuMemGetInfo_v2", false, Slot(&a.cuMemGetInfo)},
      {"cuMemAlloc", "cuMemAlloc_v2", false, Slot(&a.cuMemAlloc)},
      {"cuMemFree", "cuMemFree_v2", false, Slot(&a.cuMemFree)},
      {"cuMemAllocPitch", "cuMemAllocPitch_v2", false, Slot(&a.cuMemAllocPitch)},
      {"cuMemAllocManaged", "cuMemAllocManaged", false, Slot(&a.cuMemAllocManaged)},
      {"cuMemAllocAsync", "cuMemAllocAsync", true, Slot(&a.cuMemAllocAsync)},
      {"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", true,
       Slot(&a.cuMemAllocFromPoolAsync)},
      {"cuMemFreeAsync", "cuMemFreeAsync", true, Slot(&a.cuMemFreeAsync)},
      {"cuDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool", false,
       Slot(&a.cuDeviceGetDefaultMemPool)},
      {"cuArrayCreate", "cuArrayCreate_v2", false, Slot(&a.cuArrayCreate)},
      {"cuArray3DCreate", "cuArray3DCreate_v2", false, Slot(&a.cuArray3DCreate)},
      {"cuArrayDestroy", "cuArrayDestroy", false, Slot(&a.cuArrayDestroy)},
      {"cuArrayGetMemoryRequirements", "cuArrayGetMemoryRequirements", false,
       Slot(&a.cuArrayGetMemoryRequirements)},
      {"cuMipmappedArrayCreate", "cuMipmappedArrayCreate", false, Slot(&a.cuMipmappedArrayCreate)},
      {"cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy", false,
       Slot(&a.cuMipmappedArrayDestroy)},
      {"cuMipmappedArrayGetMemoryRequirements", "cuMipmappedArrayGetMemoryRequirements", false,
       Slot(&a.cuMipmappedArrayGetMemoryRequirements)},
      {"cuMemCreate", "cuMemCreate", false, Slot(&a.cuMemCreate)},
      {"cuMemRelease", "cuMemRelease", false, Slot(&a.cuMemRelease)},
      {"cuMemMap", "cuMemMap", false, Slot(&a.cuMemMap)},
      {"cuMemUnmap", "cuMemUnmap", false, Slot(&a.cuMemUnmap)},
      {"cuMemAddressReserve", "cuMemAddressReserve", false, Slot(&a.cuMemAddressReserve)},
      {"cuMemAddressFree", "cuMemAddressFree", false, Slot(&a.cuMemAddressFree)},
      {"cuModuleLoadData", "cuModuleLoadData", false, Slot(&a.cuModuleLoadData)},
      {"cuModuleGetFunction", "cuModuleGetFunction", false, Slot(&a.cuModuleGetFunction)},
      {"cuModuleUnload", "cuModuleUnload", false, Slot(&a.cuModuleUnload)},
      {"cuLaunchKernel", "cuLaunchKernel", true, Slot(&a.cuLaunchKernel)},
      {"cuLaunchKernelEx", "cuLaunchKernelEx", true, Slot(&a.cuLaunchKernelEx)},
      {"cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel", true,
       Slot(&a.cuLaunchCooperativeKernel)},
      {"cuGraphLaunch", "cuGraphLaunch", true, Slot(&a.cuGraphLaunch)},
      {"cuStreamBeginCapture", "cuStreamBeginCapture_v2", false, Slot(&a.cuStreamBeginCapture)},
      {"cuStreamEndCapture", "cuStreamEndCapture", false, Slot(&a.cuStreamEndCapture)},
      {"cuGraphInstantiateWithFlags", "cuGraphInstantiateWithFlags", false,
       Slot(&a.cuGraphInstantiateWithFlags)},
      {"cuGraphDestroy", "cuGraphDestroy", false, Slot(&a.cuGraphDestroy)},
      {"cuGraphExecDestroy", "cuGraphExecDestroy", false, Slot(&a.cuGraphExecDestroy)},
      {"cuStreamCreate", "cuStreamCreate", false, Slot(&a.cuStreamCreate)},
      {"cuStreamDestroy", "cuStreamDestroy_v2", false, Slot(&a.cuStreamDestroy)},
      {"cuStreamSynchronize", "cuStreamSynchronize", true, Slot(&a.cuStreamSynchronize)},
      {"cuEventCreate", "cuEventCreate", false, Slot(&a.cuEventCreate)},
      {"cuEventDestroy", "cuEventDestroy_v2", false, Slot(&a.cuEventDestroy)},
      {"cuEventRecord", "cuEventRecord", true, Slot(&a.cuEventRecord)},
      {"cuEventSynchronize", "cuEventSynchronize", false, Slot(&a.cuEventSynchronize)},
  };
}

// --- output ---

// One JSON object, built by hand: keys are plain ASCII; strings are escaped for quotes and
// backslashes only (they come from this program).
class Json {
 public:
  Json& Int(const char* key, long long value) { return Raw(key, std::to_string(value)); }
  Json& Uint(const char* key, unsigned long long value) { return Raw(key, std::to_string(value)); }
  Json& Real(const char* key, double value) {
    char text[64];
    std::snprintf(text, sizeof text, "%.6g", value);
    return Raw(key, text);
  }
  Json& Str(const char* key, std::string_view value) {
    std::string quoted = "\"";
    for (char c : value) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    quoted += '"';
    return Raw(key, quoted);
  }
  Json& UintArray(const char* key, const std::vector<unsigned long long>& values) {
    std::string text = "[";
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i > 0) text += ',';
      text += std::to_string(values[i]);
    }
    text += ']';
    return Raw(key, text);
  }
  Json& Raw(const char* key, const std::string& value) {
    if (!body_.empty()) body_ += ',';
    body_ += '"';
    body_ += key;
    body_ += "\":";
    body_ += value;
    return *this;
  }
  // Prints the object and a newline on stdout, and flushes.
  void Print() const {
    std::printf("{%s}\n", body_.c_str());
    std::fflush(stdout);
  }

 private:
  std::string body_;
};

int PrintError(const char* call, CUresult code) {
  std::fprintf(stderr, "cuda_probe: %s failed with %d\n", call, code);
  Json().Str("error", call).Int("code", code).Print();
  return 1;
}

int PrintMessage(const char* what, const std::string& message) {
  std::fprintf(stderr, "cuda_probe: %s: %s\n", what, message.c_str());
  Json().Str("error", what).Str("message", message).Print();
  return 1;
}

// --- arguments ---

struct Args {
  std::string command;
  std::map<std::string, std::string, std::less<>> options;
  bool ptsz = false;
};

constexpr const char* kUsage =
    "usage: cuda_probe [--via getproc|dlsym] [--ptsz] COMMAND [OPTIONS]\n"
    "  info\n"
    "  alloc --path alloc|pitch|managed|async|pool|array|array3d|mipmap|vmm --mib N [--count K]"
    " [--hold-ms T]\n"
    "  launch --kernel sleep|work --arg A --seconds S [--path kernel|ex|coop|graph]"
    " [--in-flight F]\n"
    "  bench-alloc --pairs N [--bytes B]\n"
    "  bench-launch --launches N\n"
    "  crash --mib N\n"
    "  hold --mib N --ms T\n"
    "  context\n";

int Usage(const std::string& why) {
  std::fprintf(stderr, "cuda_probe: %s\n%s", why.c_str(), kUsage);
  Json().Str("error", "usage").Str("message", why).Print();
  return 2;
}

bool ParseArgs(int argc, char** argv, Args* args, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--ptsz") {
      args->ptsz = true;
    } else if (arg.rfind("--", 0) == 0) {
      if (i + 1 >= argc) {
        *error = arg + " needs a value";
        return false;
      }
      args->options[arg.substr(2)] = argv[++i];
    } else if (args->command.empty()) {
      args->command = arg;
    } else {
      *error = "unexpected argument " + arg;
      return false;
    }
  }
  if (args->command.empty()) {
    *error = "no command";
    return false;
  }
  return true;
}

// An unsigned option; false (with `error`) when malformed.
bool UintOption(const Args& args, const char* name, unsigned long long fallback, bool required,
                unsigned long long* value, std::string* error) {
  auto it = args.options.find(name);
  if (it == args.options.end()) {
    if (required) {
      *error = std::string("--") + name + " is required";
      return false;
    }
    *value = fallback;
    return true;
  }
  const std::string& text = it->second;
  char* end = nullptr;
  errno = 0;
  const unsigned long long parsed = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] == '-' || errno != 0 || *end != '\0') {
    *error = std::string("--") + name + " must be a non-negative integer, not " + text;
    return false;
  }
  *value = parsed;
  return true;
}

bool RealOption(const Args& args, const char* name, double* value, std::string* error) {
  auto it = args.options.find(name);
  if (it == args.options.end()) {
    *error = std::string("--") + name + " is required";
    return false;
  }
  char* end = nullptr;
  const double parsed = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || !(parsed > 0) || parsed > 86400) {
    *error = std::string("--") + name + " must be a positive number of seconds";
    return false;
  }
  *value = parsed;
  return true;
}

std::string StringOption(const Args& args, const char* name, const std::string& fallback) {
  auto it = args.options.find(name);
  return it == args.options.end() ? fallback : it->second;
}

// --- time ---

std::uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

void SleepMs(unsigned long long ms) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ms / 1000);
  ts.tv_nsec = static_cast<long>((ms % 1000) * 1000000ULL);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// --- the session: library, functions, primary context ---

class Session {
 public:
  // Loads the driver, finds its functions, initialises it and makes device 0's primary context
  // current. Returns 0, or the exit status after printing the error.
  int Open(const std::string& via, bool ptsz) {
    handle_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* why = dlerror();
      return PrintMessage("dlopen", why != nullptr ? why : "libcuda.so.1 not found");
    }
    if (int status = Resolve(via, ptsz); status != 0) return status;
    if (api_.cuInit == nullptr) return PrintMessage("resolve", "cuInit not found");
    if (CUresult r = api_.cuInit(0); r != cu::CUDA_SUCCESS) return PrintError("cuInit", r);
    if (api_.cuDeviceGet == nullptr || api_.cuDevicePrimaryCtxRetain == nullptr ||
        api_.cuCtxSetCurrent == nullptr) {
      return PrintMessage("resolve", "context functions not found");
    }
    if (CUresult r = api_.cuDeviceGet(&device_, 0); r != cu::CUDA_SUCCESS) {
      return PrintError("cuDeviceGet", r);
    }
    if (CUresult r = api_.cuDevicePrimaryCtxRetain(&context_, device_); r != cu::CUDA_SUCCESS) {
      std::fprintf(stderr, "cuda_probe: cuDevicePrimaryCtxRetain failed with %d\n", r);
      Json()
          .Str("error", "cuDevicePrimaryCtxRetain")
          .Int("code", r)
          .Int("device_used_bytes", FakeUsedBytes())
          .Print();
      return 1;
    }
    retained_ = true;
    if (CUresult r = api_.cuCtxSetCurrent(context_); r != cu::CUDA_SUCCESS) {
      return PrintError("cuCtxSetCurrent", r);
    }
    return 0;
  }

  ~Session() {
    if (retained_ && api_.cuDevicePrimaryCtxRelease != nullptr) {
      api_.cuDevicePrimaryCtxRelease(device_);
    }
    // The library stays loaded: drivers are not meant to be unloaded.
  }

  const Api& api() const { return api_; }
  cu::CUdevice device() const { return device_; }

  // The test CUDA library's peak of bytes handed out on device 0, and what it holds now; -1
  // with another driver.
  long long FakePeakBytes() const { return FakeFigure("gpusliceFakeCudaPeakBytes"); }
  long long FakeUsedBytes() const { return FakeFigure("gpusliceFakeCudaUsedBytes"); }

 private:
  int Resolve(const std::string& via, bool ptsz) {
    std::vector<Entry> entries = Entries(api_);
    if (via == "dlsym") {
      for (const Entry& entry : entries) {
        std::string name = entry.exported;
        if (ptsz && entry.has_ptsz) name += "_ptsz";
        *entry.slot = dlsym(handle_, name.c_str());
        if (*entry.slot == nullptr) std::fprintf(stderr, "cuda_probe: no %s\n", name.c_str());
      }
      return 0;
    }
    // getproc, as libcudart 12 does it.
    auto v2 = reinterpret_cast<cu::cuGetProcAddress_v2_t>(dlsym(handle_, "cuGetProcAddress_v2"));
    auto v1 = reinterpret_cast<cu::cuGetProcAddress_t>(dlsym(handle_, "cuGetProcAddress"));
    if (v2 == nullptr && v1 == nullptr) {
      return PrintMessage("resolve", "neither cuGetProcAddress_v2 nor cuGetProcAddress found");
    }
    const cu::cuuint64_t flags =
        ptsz ? cu::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : cu::CU_GET_PROC_ADDRESS_DEFAULT;
    for (const Entry& entry : entries) {
      void* pfn = nullptr;
      cu::CUdriverProcAddressQueryResult status = 0;
      // cuCtxCreate's newer variants (_v3, _v4) take other parameters: its _v2 is CUDA 3.2's.
      const int version = std::strcmp(entry.base, "cuCtxCreate") == 0 ? 3020 : kCudaVersion;
      const CUresult r = v2 != nullptr ? v2(entry.base, &pfn, version, flags, &status)
                                       : v1(entry.base, &pfn, version, flags);
      *entry.slot = r == cu::CUDA_SUCCESS ? pfn : nullptr;
      if (*entry.slot == nullptr) {
        std::fprintf(stderr, "cuda_probe: cuGetProcAddress(%s) failed with %d (status %d)\n",
                     entry.base, r, status);
      }
    }
    return 0;
  }

  long long FakeFigure(const char* name) const {
    void* symbol = dlsym(handle_, name);
    if (symbol == nullptr) return -1;
    auto figure = reinterpret_cast<unsigned long long (*)(int)>(symbol);
    return static_cast<long long>(figure(0));
  }

  void* handle_ = nullptr;
  Api api_;
  cu::CUdevice device_ = 0;
  cu::CUcontext context_ = nullptr;
  bool retained_ = false;
};

// Fails with a message when one of the named functions was not found.
bool Have(std::initializer_list<std::pair<const void*, const char*>> functions) {
  for (const auto& [pointer, name] : functions) {
    if (pointer == nullptr) {
      PrintMessage("resolve", std::string(name) + " not found");
      return false;
    }
  }
  return true;
}

template <typename F>
const void* P(F f) {
  return reinterpret_cast<const void*>(f);
}

// --- info ---

int Info(const Session& session) {
  const Api& a = session.api();
  if (!Have({{P(a.cuDriverGetVersion), "cuDriverGetVersion"},
             {P(a.cuDeviceGetCount), "cuDeviceGetCount"},
             {P(a.cuMemGetInfo), "cuMemGetInfo"}})) {
    return 1;
  }
  int version = 0;
  int devices = 0;
  std::size_t free = 0;
  std::size_t total = 0;
  if (CUresult r = a.cuDriverGetVersion(&version); r != cu::CUDA_SUCCESS) {
    return PrintError("cuDriverGetVersion", r);
  }
  if (CUresult r = a.cuDeviceGetCount(&devices); r != cu::CUDA_SUCCESS) {
    return PrintError("cuDeviceGetCount", r);
  }
  if (CUresult r = a.cuMemGetInfo(&free, &total); r != cu::CUDA_SUCCESS) {
    return PrintError("cuMemGetInfo", r);
  }
  Json()
      .Int("driver_version", version)
      .Int("devices", devices)
      .Uint("free", free)
      .Uint("total", total)
      .Print();
  return 0;
}

// --- alloc ---

struct Chunk {
  cu::CUdeviceptr ptr = 0;
  cu::CUarray array = nullptr;
  cu::CUmipmappedArray mipmap = nullptr;
  cu::CUmemGenericAllocationHandle handle = 0;
};

// How one path allocates and frees chunks of one size.
class Allocator {
 public:
  Allocator(const Session& session, std::string path, unsigned long long mib)
      : session_(session), a_(session.api()), path_(std::move(path)), bytes_(mib * kMiB) {}

  // Checks the path and its functions, computes the chunk's geometry, makes a stream for the
  // asynchronous paths. Returns 0, 1 (printed) or 2 (bad path, printed).
  int Prepare() {
    if (path_ == "alloc") {
      if (!Have({{P(a_.cuMemAlloc), "cuMemAlloc"}, {P(a_.cuMemFree), "cuMemFree"}})) return 1;
      chunk_bytes_ = bytes_;
    } else if (path_ == "pitch") {
      if (!Have({{P(a_.cuMemAllocPitch), "cuMemAllocPitch"}, {P(a_.cuMemFree), "cuMemFree"}})) {
        return 1;
      }
      pitch_height_ = (bytes_ + kPitchWidth - 1) / kPitchWidth;
      chunk_bytes_ = kPitchWidth * pitch_height_;
    } else if (path_ == "managed") {
      if (!Have({{P(a_.cuMemAllocManaged), "cuMemAllocManaged"}, {P(a_.cuMemFree), "cuMemFree"}})) {
        return 1;
      }
      chunk_bytes_ = bytes_;
    } else if (path_ == "async" || path_ == "pool") {
      if (!Have({{P(a_.cuMemAllocAsync), "cuMemAllocAsync"},
                 {P(a_.cuMemAllocFromPoolAsync), "cuMemAllocFromPoolAsync"},
                 {P(a_.cuMemFreeAsync), "cuMemFreeAsync"},
                 {P(a_.cuDeviceGetDefaultMemPool), "cuDeviceGetDefaultMemPool"},
                 {P(a_.cuStreamCreate), "cuStreamCreate"},
                 {P(a_.cuStreamSynchronize), "cuStreamSynchronize"},
                 {P(a_.cuStreamDestroy), "cuStreamDestroy"}})) {
        return 1;
      }
      if (CUresult r = a_.cuStreamCreate(&stream_, 1); r != cu::CUDA_SUCCESS) {
        return PrintError("cuStreamCreate", r);
      }
      if (path_ == "pool") {
        if (CUresult r = a_.cuDeviceGetDefaultMemPool(&pool_, session_.device());
            r != cu::CUDA_SUCCESS) {
          return PrintError("cuDeviceGetDefaultMemPool", r);
        }
      }
      chunk_bytes_ = bytes_;
    } else if (path_ == "array" || path_ == "array3d") {
      if (!Have({{P(a_.cuArrayCreate), "cuArrayCreate"},
                 {P(a_.cuArray3DCreate), "cuArray3DCreate"},
                 {P(a_.cuArrayDestroy), "cuArrayDestroy"}})) {
        return 1;
      }
      if (path_ == "array") {
        desc2d_.Width = kArrayWidth;
        desc2d_.Height = (bytes_ + kArrayWidth * 4 - 1) / (kArrayWidth * 4);
        desc2d_.Format = cu::CU_AD_FORMAT_FLOAT;
        desc2d_.NumChannels = 1;
        chunk_bytes_ = desc2d_.Width * desc2d_.Height * 4;
      } else {
        desc3d_.Width = kArray3dSide;
        desc3d_.Height = kArray3dSide;
        desc3d_.Depth =
            (bytes_ + kArray3dSide * kArray3dSide * 4 - 1) / (kArray3dSide * kArray3dSide * 4);
        desc3d_.Format = cu::CU_AD_FORMAT_FLOAT;
        desc3d_.NumChannels = 1;
        desc3d_.Flags = 0;
        chunk_bytes_ = desc3d_.Width * desc3d_.Height * desc3d_.Depth * 4;
      }
    } else if (path_ == "mipmap") {
      if (!Have({{P(a_.cuMipmappedArrayCreate), "cuMipmappedArrayCreate"},
                 {P(a_.cuMipmappedArrayDestroy), "cuMipmappedArrayDestroy"}})) {
        return 1;
      }
      // A square 2D base: the four levels sum to base * (1 + 1/4 + 1/16 + 1/64).
      const double base_bytes = static_cast<double>(bytes_) / (1.0 + 0.25 + 0.0625 + 0.015625);
      std::size_t side = static_cast<std::size_t>(std::llround(std::sqrt(base_bytes / 4.0)));
      if (side < 16) side = 16;
      desc3d_.Width = side;
      desc3d_.Height = side;
      desc3d_.Depth = 0;
      desc3d_.Format = cu::CU_AD_FORMAT_FLOAT;
      desc3d_.NumChannels = 1;
      desc3d_.Flags = 0;
      chunk_bytes_ = 0;
      for (unsigned int level = 0; level < kMipmapLevels; ++level) {
        const std::size_t w = side >> level > 0 ? side >> level : 1;
        chunk_bytes_ += w * w * 4;
      }
    } else if (path_ == "vmm") {
      if (!Have({{P(a_.cuMemCreate), "cuMemCreate"},
                 {P(a_.cuMemRelease), "cuMemRelease"},
                 {P(a_.cuMemAddressReserve), "cuMemAddressReserve"},
                 {P(a_.cuMemAddressFree), "cuMemAddressFree"},
                 {P(a_.cuMemMap), "cuMemMap"},
                 {P(a_.cuMemUnmap), "cuMemUnmap"}})) {
        return 1;
      }
      constexpr std::uint64_t kGranularity = 2 * kMiB;
      chunk_bytes_ = (bytes_ + kGranularity - 1) / kGranularity * kGranularity;
    } else {
      return Usage("unknown --path " + path_);
    }
    if (chunk_bytes_ == 0) return Usage("--mib must be positive");
    return 0;
  }

  unsigned long long chunk_bytes() const { return chunk_bytes_; }
  long long reserved_bytes() const { return reserved_bytes_; }

  CUresult Allocate(Chunk* chunk) {
    if (path_ == "alloc") return a_.cuMemAlloc(&chunk->ptr, bytes_);
    if (path_ == "managed")
      return a_.cuMemAllocManaged(&chunk->ptr, bytes_, cu::CU_MEM_ATTACH_GLOBAL);
    if (path_ == "async") return a_.cuMemAllocAsync(&chunk->ptr, bytes_, stream_);
    if (path_ == "pool") return a_.cuMemAllocFromPoolAsync(&chunk->ptr, bytes_, pool_, stream_);
    if (path_ == "pitch") {
      std::size_t pitch = 0;
      CUresult r = a_.cuMemAllocPitch(&chunk->ptr, &pitch, kPitchWidth, pitch_height_, 4);
      if (r == cu::CUDA_SUCCESS) reserved_bytes_ = static_cast<long long>(pitch * pitch_height_);
      return r;
    }
    if (path_ == "array" || path_ == "array3d") {
      CUresult r = path_ == "array" ? a_.cuArrayCreate(&chunk->array, &desc2d_)
                                    : a_.cuArray3DCreate(&chunk->array, &desc3d_);
      if (r == cu::CUDA_SUCCESS && reserved_bytes_ < 0 &&
          a_.cuArrayGetMemoryRequirements != nullptr) {
        cu::CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
        if (a_.cuArrayGetMemoryRequirements(&req, chunk->array, session_.device()) ==
            cu::CUDA_SUCCESS) {
          reserved_bytes_ = static_cast<long long>(req.size);
        }
      }
      return r;
    }
    if (path_ == "mipmap") {
      CUresult r = a_.cuMipmappedArrayCreate(&chunk->mipmap, &desc3d_, kMipmapLevels);
      if (r == cu::CUDA_SUCCESS && reserved_bytes_ < 0 &&
          a_.cuMipmappedArrayGetMemoryRequirements != nullptr) {
        cu::CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
        if (a_.cuMipmappedArrayGetMemoryRequirements(&req, chunk->mipmap, session_.device()) ==
            cu::CUDA_SUCCESS) {
          reserved_bytes_ = static_cast<long long>(req.size);
        }
      }
      return r;
    }
    // vmm
    cu::CUmemAllocationProp prop{};
    prop.type = 1;           // CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = 1;  // CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = session_.device();
    if (CUresult r = a_.cuMemCreate(&chunk->handle, chunk_bytes_, &prop, 0);
        r != cu::CUDA_SUCCESS) {
      return r;
    }
    if (CUresult r = a_.cuMemAddressReserve(&chunk->ptr, chunk_bytes_, 0, 0, 0);
        r != cu::CUDA_SUCCESS) {
      a_.cuMemRelease(chunk->handle);
      return r;
    }
    if (CUresult r = a_.cuMemMap(chunk->ptr, chunk_bytes_, 0, chunk->handle, 0);
        r != cu::CUDA_SUCCESS) {
      a_.cuMemAddressFree(chunk->ptr, chunk_bytes_);
      a_.cuMemRelease(chunk->handle);
      return r;
    }
    reserved_bytes_ = static_cast<long long>(chunk_bytes_);
    return cu::CUDA_SUCCESS;
  }

  CUresult Free(const Chunk& chunk) {
    if (path_ == "alloc" || path_ == "managed" || path_ == "pitch") return a_.cuMemFree(chunk.ptr);
    if (path_ == "async" || path_ == "pool") return a_.cuMemFreeAsync(chunk.ptr, stream_);
    if (path_ == "array" || path_ == "array3d") return a_.cuArrayDestroy(chunk.array);
    if (path_ == "mipmap") return a_.cuMipmappedArrayDestroy(chunk.mipmap);
    CUresult r = a_.cuMemUnmap(chunk.ptr, chunk_bytes_);
    if (CUresult r2 = a_.cuMemRelease(chunk.handle); r == cu::CUDA_SUCCESS) r = r2;
    if (CUresult r3 = a_.cuMemAddressFree(chunk.ptr, chunk_bytes_); r == cu::CUDA_SUCCESS) r = r3;
    return r;
  }

  // Waits for the stream of the asynchronous paths, so that memory figures are settled.
  CUresult Settle() {
    if (stream_ == nullptr) return cu::CUDA_SUCCESS;
    return a_.cuStreamSynchronize(stream_);
  }

  ~Allocator() {
    if (stream_ != nullptr) a_.cuStreamDestroy(stream_);
  }

 private:
  static constexpr std::size_t kPitchWidth = 1000;  // bytes per row, not a multiple of the pitch
  static constexpr std::size_t kArrayWidth = 4096;
  static constexpr std::size_t kArray3dSide = 256;
  static constexpr unsigned int kMipmapLevels = 4;

  const Session& session_;
  const Api& a_;
  std::string path_;
  std::uint64_t bytes_;
  unsigned long long chunk_bytes_ = 0;
  long long reserved_bytes_ = -1;
  std::size_t pitch_height_ = 0;
  cu::CUDA_ARRAY_DESCRIPTOR desc2d_{};
  cu::CUDA_ARRAY3D_DESCRIPTOR desc3d_{};
  cu::CUstream stream_ = nullptr;
  cu::CUmemoryPool pool_ = nullptr;
};

int Alloc(const Session& session, const Args& args) {
  std::string error;
  unsigned long long mib = 0;
  unsigned long long count = 0;
  unsigned long long hold_ms = 0;
  if (!UintOption(args, "mib", 0, true, &mib, &error) ||
      !UintOption(args, "count", 100000, false, &count, &error) ||
      !UintOption(args, "hold-ms", 0, false, &hold_ms, &error)) {
    return Usage(error);
  }
  if (mib == 0 || mib > (1ULL << 24)) return Usage("--mib must be 1..16777216");
  const std::string path = StringOption(args, "path", "");
  if (path.empty()) return Usage("--path is required");
  const Api& a = session.api();
  if (!Have({{P(a.cuMemGetInfo), "cuMemGetInfo"}})) return 1;

  Allocator allocator(session, path, mib);
  if (int status = allocator.Prepare(); status != 0) return status;
  std::vector<Chunk> chunks;
  CUresult failed_with = cu::CUDA_SUCCESS;
  while (chunks.size() < count) {
    Chunk chunk;
    failed_with = allocator.Allocate(&chunk);
    if (failed_with != cu::CUDA_SUCCESS) break;
    chunks.push_back(chunk);
  }
  if (failed_with != cu::CUDA_SUCCESS) {
    std::fprintf(stderr, "cuda_probe: allocation %zu of path %s failed with %d\n",
                 chunks.size() + 1, path.c_str(), failed_with);
  }
  if (CUresult r = allocator.Settle(); r != cu::CUDA_SUCCESS) {
    return PrintError("cuStreamSynchronize", r);
  }
  std::size_t free = 0;
  std::size_t total = 0;
  if (CUresult r = a.cuMemGetInfo(&free, &total); r != cu::CUDA_SUCCESS) {
    return PrintError("cuMemGetInfo", r);
  }
  const long long peak = session.FakePeakBytes();
  SleepMs(hold_ms);
  int free_errors = 0;
  CUresult first_free_error = cu::CUDA_SUCCESS;
  for (const Chunk& chunk : chunks) {
    if (CUresult r = allocator.Free(chunk); r != cu::CUDA_SUCCESS) {
      if (free_errors++ == 0) first_free_error = r;
    }
  }
  if (CUresult r = allocator.Settle(); r != cu::CUDA_SUCCESS) {
    return PrintError("cuStreamSynchronize", r);
  }
  std::size_t free_after = 0;
  std::size_t total_after = 0;
  if (CUresult r = a.cuMemGetInfo(&free_after, &total_after); r != cu::CUDA_SUCCESS) {
    return PrintError("cuMemGetInfo", r);
  }
  if (free_errors > 0) {
    std::fprintf(stderr, "cuda_probe: %d frees failed, the first with %d\n", free_errors,
                 first_free_error);
  }
  Json()
      .Str("path", path)
      .Uint("chunk_bytes", allocator.chunk_bytes())
      .Int("reserved_bytes", allocator.reserved_bytes())
      .Uint("allocated", chunks.size())
      .Int("failed_with", failed_with)
      .Uint("free", free)
      .Uint("total", total)
      .Int("device_peak_bytes", peak)
      .Uint("free_after", free_after)
      .Int("free_errors", free_errors)
      .Print();
  const bool expected =
      failed_with == cu::CUDA_SUCCESS || failed_with == cu::CUDA_ERROR_OUT_OF_MEMORY;
  return expected && free_errors == 0 ? 0 : 1;
}

// --- kernels ---

struct Module {
  cu::CUmodule module = nullptr;
  const Api* api = nullptr;
  ~Module() {
    if (module != nullptr) api->cuModuleUnload(module);
  }
};

int LoadKernel(const Api& a, Module* module, const char* name, cu::CUfunction* function) {
  if (!Have({{P(a.cuModuleLoadData), "cuModuleLoadData"},
             {P(a.cuModuleGetFunction), "cuModuleGetFunction"},
             {P(a.cuModuleUnload), "cuModuleUnload"}})) {
    return 1;
  }
  module->api = &a;
  if (CUresult r = a.cuModuleLoadData(&module->module, gpuslice::probe::kProbePtx);
      r != cu::CUDA_SUCCESS) {
    module->module = nullptr;
    return PrintError("cuModuleLoadData", r);
  }
  if (CUresult r = a.cuModuleGetFunction(function, module->module, name); r != cu::CUDA_SUCCESS) {
    return PrintError("cuModuleGetFunction", r);
  }
  return 0;
}

// --- launch ---

int LaunchCommand(const Session& session, const Args& args) {
  std::string error;
  unsigned long long arg = 0;
  unsigned long long in_flight = 0;
  double seconds = 0;
  if (!UintOption(args, "arg", 0, true, &arg, &error) ||
      !UintOption(args, "in-flight", 4, false, &in_flight, &error) ||
      !RealOption(args, "seconds", &seconds, &error)) {
    return Usage(error);
  }
  if (in_flight == 0 || in_flight > 1024) return Usage("--in-flight must be 1..1024");
  const std::string kernel = StringOption(args, "kernel", "");
  const std::string path = StringOption(args, "path", "kernel");
  if (kernel != "sleep" && kernel != "work") return Usage("--kernel must be sleep or work");
  if (path != "kernel" && path != "ex" && path != "coop" && path != "graph") {
    return Usage("--path must be kernel, ex, coop or graph");
  }
  const Api& a = session.api();
  if (!Have({{P(a.cuStreamCreate), "cuStreamCreate"},
             {P(a.cuStreamDestroy), "cuStreamDestroy"},
             {P(a.cuStreamSynchronize), "cuStreamSynchronize"},
             {P(a.cuEventCreate), "cuEventCreate"},
             {P(a.cuEventDestroy), "cuEventDestroy"},
             {P(a.cuEventRecord), "cuEventRecord"},
             {P(a.cuEventSynchronize), "cuEventSynchronize"}})) {
    return 1;
  }
  if (path == "kernel" && !Have({{P(a.cuLaunchKernel), "cuLaunchKernel"}})) return 1;
  if (path == "ex" && !Have({{P(a.cuLaunchKernelEx), "cuLaunchKernelEx"}})) return 1;
  if (path == "coop" && !Have({{P(a.cuLaunchCooperativeKernel), "cuLaunchCooperativeKernel"}})) {
    return 1;
  }
  if (path == "graph" && !Have({{P(a.cuLaunchKernel), "cuLaunchKernel"},
                                {P(a.cuStreamBeginCapture), "cuStreamBeginCapture"},
                                {P(a.cuStreamEndCapture), "cuStreamEndCapture"},
                                {P(a.cuGraphInstantiateWithFlags), "cuGraphInstantiateWithFlags"},
                                {P(a.cuGraphLaunch), "cuGraphLaunch"},
                                {P(a.cuGraphDestroy), "cuGraphDestroy"},
                                {P(a.cuGraphExecDestroy), "cuGraphExecDestroy"}})) {
    return 1;
  }

  Module module;
  cu::CUfunction function = nullptr;
  const char* name = kernel == "sleep" ? "gpuslice_sleep" : "gpuslice_work";
  if (int status = LoadKernel(a, &module, name, &function); status != 0) return status;
  cu::CUstream stream = nullptr;
  if (CUresult r = a.cuStreamCreate(&stream, 1); r != cu::CUDA_SUCCESS) {
    return PrintError("cuStreamCreate", r);
  }
  std::vector<cu::CUevent> events(in_flight, nullptr);
  for (cu::CUevent& event : events) {
    if (CUresult r =
            a.cuEventCreate(&event, cu::CU_EVENT_BLOCKING_SYNC | cu::CU_EVENT_DISABLE_TIMING);
        r != cu::CUDA_SUCCESS) {
      return PrintError("cuEventCreate", r);
    }
  }
  unsigned long long param = arg;
  void* params[] = {&param};
  cu::CUgraph graph = nullptr;
  cu::CUgraphExec exec = nullptr;
  if (path == "graph") {
    if (CUresult r = a.cuStreamBeginCapture(stream, 2 /* relaxed */); r != cu::CUDA_SUCCESS) {
      return PrintError("cuStreamBeginCapture", r);
    }
    if (CUresult r = a.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
        r != cu::CUDA_SUCCESS) {
      return PrintError("cuLaunchKernel (capture)", r);
    }
    if (CUresult r = a.cuStreamEndCapture(stream, &graph); r != cu::CUDA_SUCCESS) {
      return PrintError("cuStreamEndCapture", r);
    }
    if (CUresult r = a.cuGraphInstantiateWithFlags(&exec, graph, 0); r != cu::CUDA_SUCCESS) {
      return PrintError("cuGraphInstantiateWithFlags", r);
    }
  }
  auto launch = [&]() -> CUresult {
    if (path == "kernel") {
      return a.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
    }
    if (path == "ex") {
      cu::CUlaunchConfig config{};
      config.gridDimX = config.gridDimY = config.gridDimZ = 1;
      config.blockDimX = config.blockDimY = config.blockDimZ = 1;
      config.hStream = stream;
      return a.cuLaunchKernelEx(&config, function, params, nullptr);
    }
    if (path == "coop") {
      return a.cuLaunchCooperativeKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, params);
    }
    return a.cuGraphLaunch(exec, stream);
  };

  constexpr unsigned long long kMaxErrors = 1000;
  const std::uint64_t duration_ns = static_cast<std::uint64_t>(seconds * 1e9);
  std::vector<unsigned long long> work;
  std::deque<std::size_t> pending;  // indices into `events`, oldest first
  std::size_t next_event = 0;
  unsigned long long launches = 0;
  unsigned long long errors = 0;
  CUresult first_error = cu::CUDA_SUCCESS;
  auto note_error = [&](const char* call, CUresult r) {
    if (errors++ == 0) {
      first_error = r;
      std::fprintf(stderr, "cuda_probe: %s failed with %d\n", call, r);
    }
  };
  const std::uint64_t start = NowNs();
  for (;;) {
    const std::uint64_t now = NowNs();
    if (now - start < duration_ns && pending.size() < in_flight && errors < kMaxErrors) {
      if (CUresult r = launch(); r != cu::CUDA_SUCCESS) {
        note_error("launch", r);
        continue;
      }
      const std::size_t slot = next_event;
      next_event = (next_event + 1) % events.size();
      if (CUresult r = a.cuEventRecord(events[slot], stream); r != cu::CUDA_SUCCESS) {
        note_error("cuEventRecord", r);
        continue;
      }
      pending.push_back(slot);
      continue;
    }
    if (pending.empty()) break;
    const std::size_t oldest = pending.front();
    pending.pop_front();
    if (CUresult r = a.cuEventSynchronize(events[oldest]); r != cu::CUDA_SUCCESS) {
      note_error("cuEventSynchronize", r);
      continue;
    }
    const std::size_t window = static_cast<std::size_t>((NowNs() - start) / 1000000000ULL);
    if (work.size() <= window) work.resize(window + 1, 0);
    work[window] += arg;
    ++launches;
  }
  const double elapsed = static_cast<double>(NowNs() - start) / 1e9;
  if (CUresult r = a.cuStreamSynchronize(stream); r != cu::CUDA_SUCCESS) {
    note_error("cuStreamSynchronize", r);
  }
  if (exec != nullptr) a.cuGraphExecDestroy(exec);
  if (graph != nullptr) a.cuGraphDestroy(graph);
  for (cu::CUevent event : events) a.cuEventDestroy(event);
  a.cuStreamDestroy(stream);
  Json()
      .Str("path", path)
      .Str("kernel", kernel)
      .Uint("arg", arg)
      .Uint("launches", launches)
      .Uint("errors", errors)
      .Int("first_error", first_error)
      .UintArray("work_per_window", work)
      .Raw("window_s", "1.0")
      .Real("elapsed_s", elapsed)
      .Print();
  return errors == 0 ? 0 : 1;
}

// --- benchmarks ---

int BenchAlloc(const Session& session, const Args& args) {
  std::string error;
  unsigned long long pairs = 0;
  unsigned long long bytes = 0;
  if (!UintOption(args, "pairs", 0, true, &pairs, &error) ||
      !UintOption(args, "bytes", kMiB, false, &bytes, &error)) {
    return Usage(error);
  }
  if (pairs == 0 || bytes == 0) return Usage("--pairs and --bytes must be positive");
  const Api& a = session.api();
  if (!Have({{P(a.cuMemAlloc), "cuMemAlloc"}, {P(a.cuMemFree), "cuMemFree"}})) return 1;
  auto run = [&](unsigned long long n) -> CUresult {
    for (unsigned long long i = 0; i < n; ++i) {
      cu::CUdeviceptr ptr = 0;
      if (CUresult r = a.cuMemAlloc(&ptr, bytes); r != cu::CUDA_SUCCESS) return r;
      if (CUresult r = a.cuMemFree(ptr); r != cu::CUDA_SUCCESS) return r;
    }
    return cu::CUDA_SUCCESS;
  };
  if (CUresult r = run(pairs < 100 ? pairs : 100); r != cu::CUDA_SUCCESS) {
    return PrintError("cuMemAlloc/cuMemFree (warm-up)", r);
  }
  const std::uint64_t start = NowNs();
  if (CUresult r = run(pairs); r != cu::CUDA_SUCCESS) return PrintError("cuMemAlloc/cuMemFree", r);
  const double ns = static_cast<double>(NowNs() - start);
  Json()
      .Uint("pairs", pairs)
      .Uint("bytes", bytes)
      .Real("ns_per_pair", ns / static_cast<double>(pairs))
      .Print();
  return 0;
}

int BenchLaunch(const Session& session, const Args& args) {
  std::string error;
  unsigned long long launches = 0;
  if (!UintOption(args, "launches", 0, true, &launches, &error)) return Usage(error);
  if (launches == 0) return Usage("--launches must be positive");
  const Api& a = session.api();
  if (!Have({{P(a.cuLaunchKernel), "cuLaunchKernel"},
             {P(a.cuStreamCreate), "cuStreamCreate"},
             {P(a.cuStreamDestroy), "cuStreamDestroy"},
             {P(a.cuStreamSynchronize), "cuStreamSynchronize"}})) {
    return 1;
  }
  Module module;
  cu::CUfunction function = nullptr;
  if (int status = LoadKernel(a, &module, "gpuslice_noop", &function); status != 0) return status;
  cu::CUstream stream = nullptr;
  if (CUresult r = a.cuStreamCreate(&stream, 1); r != cu::CUDA_SUCCESS) {
    return PrintError("cuStreamCreate", r);
  }
  auto run = [&](unsigned long long n) -> CUresult {
    for (unsigned long long i = 0; i < n; ++i) {
      if (CUresult r = a.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
          r != cu::CUDA_SUCCESS) {
        return r;
      }
    }
    return a.cuStreamSynchronize(stream);
  };
  if (CUresult r = run(launches < 100 ? launches : 100); r != cu::CUDA_SUCCESS) {
    a.cuStreamDestroy(stream);
    return PrintError("cuLaunchKernel (warm-up)", r);
  }
  const std::uint64_t start = NowNs();
  const CUresult r = run(launches);
  const double seconds = static_cast<double>(NowNs() - start) / 1e9;
  a.cuStreamDestroy(stream);
  if (r != cu::CUDA_SUCCESS) return PrintError("cuLaunchKernel", r);
  Json()
      .Uint("launches", launches)
      .Real("launches_per_s", static_cast<double>(launches) / seconds)
      .Print();
  return 0;
}

// --- crash and hold ---

int Crash(const Session& session, const Args& args) {
  std::string error;
  unsigned long long mib = 0;
  if (!UintOption(args, "mib", 0, true, &mib, &error)) return Usage(error);
  if (mib == 0) return Usage("--mib must be positive");
  const Api& a = session.api();
  if (!Have({{P(a.cuMemAlloc), "cuMemAlloc"}})) return 1;
  cu::CUdeviceptr ptr = 0;
  if (CUresult r = a.cuMemAlloc(&ptr, mib * kMiB); r != cu::CUDA_SUCCESS) {
    Json().Uint("allocated_bytes", 0).Int("failed_with", r).Print();
    return 1;
  }
  Json().Uint("allocated_bytes", mib * kMiB).Print();
  std::fflush(stderr);
  kill(getpid(), SIGKILL);
  return 1;  // not reached
}

int Hold(const Session& session, const Args& args) {
  std::string error;
  unsigned long long mib = 0;
  unsigned long long ms = 0;
  if (!UintOption(args, "mib", 0, true, &mib, &error) ||
      !UintOption(args, "ms", 0, true, &ms, &error)) {
    return Usage(error);
  }
  if (mib == 0) return Usage("--mib must be positive");
  const Api& a = session.api();
  if (!Have({{P(a.cuMemAlloc), "cuMemAlloc"}, {P(a.cuMemFree), "cuMemFree"}})) return 1;
  cu::CUdeviceptr ptr = 0;
  const CUresult r = a.cuMemAlloc(&ptr, mib * kMiB);
  Json().Int("allocated", r == cu::CUDA_SUCCESS ? 1 : 0).Int("failed_with", r).Print();
  if (r != cu::CUDA_SUCCESS) {
    return r == cu::CUDA_ERROR_OUT_OF_MEMORY ? 0 : 1;
  }
  SleepMs(ms);
  if (CUresult f = a.cuMemFree(ptr); f != cu::CUDA_SUCCESS) {
    std::fprintf(stderr, "cuda_probe: cuMemFree failed with %d\n", f);
    return 1;
  }
  return 0;
}

// --- context ---

int Context(const Session& session) {
  const Api& a = session.api();
  if (!Have({{P(a.cuCtxCreate), "cuCtxCreate"},
             {P(a.cuCtxDestroy), "cuCtxDestroy"},
             {P(a.cuMemGetInfo), "cuMemGetInfo"}})) {
    return 1;
  }
  std::size_t free = 0;
  std::size_t total = 0;
  if (CUresult r = a.cuMemGetInfo(&free, &total); r != cu::CUDA_SUCCESS) {
    return PrintError("cuMemGetInfo", r);
  }
  Json json;
  cu::CUcontext context = nullptr;
  const CUresult created = a.cuCtxCreate(&context, 0, session.device());
  json.Int("created", created == cu::CUDA_SUCCESS ? 1 : 0)
      .Int("failed_with", created)
      .Uint("free_before", free)
      .Uint("total", total);
  if (created == cu::CUDA_SUCCESS) {
    const CUresult r = a.cuMemGetInfo(&free, &total);
    json.Uint("free_with", free).Int("device_used_with", session.FakeUsedBytes());
    // Destroying the current context makes the primary one current again.
    if (CUresult d = a.cuCtxDestroy(context); d != cu::CUDA_SUCCESS) {
      return PrintError("cuCtxDestroy", d);
    }
    if (r != cu::CUDA_SUCCESS) return PrintError("cuMemGetInfo", r);
  } else {
    std::fprintf(stderr, "cuda_probe: cuCtxCreate failed with %d\n", created);
  }
  if (CUresult r = a.cuMemGetInfo(&free, &total); r != cu::CUDA_SUCCESS) {
    return PrintError("cuMemGetInfo", r);
  }
  json.Uint("free_after", free).Int("device_used_after", session.FakeUsedBytes()).Print();
  return created == cu::CUDA_SUCCESS || created == cu::CUDA_ERROR_OUT_OF_MEMORY ? 0 : 1;
}

int Run(int argc, char** argv) {
  Args args;
  std::string error;
  if (!ParseArgs(argc, argv, &args, &error)) return Usage(error);
  const std::string via = StringOption(args, "via", "getproc");
  args.options.erase("via");
  if (via != "getproc" && via != "dlsym") return Usage("--via must be getproc or dlsym");
  static const char* const kCommands[] = {"info",         "alloc", "launch", "bench-alloc",
                                          "bench-launch", "crash", "hold",   "context"};
  bool known = false;
  for (const char* command : kCommands) known = known || args.command == command;
  if (!known) return Usage("unknown command " + args.command);

  Session session;
  if (int status = session.Open(via, args.ptsz); status != 0) return status;
  if (args.command == "info") return Info(session);
  if (args.command == "alloc") return Alloc(session, args);
  if (args.command == "launch") return LaunchCommand(session, args);
  if (args.command == "bench-alloc") return BenchAlloc(session, args);
  if (args.command == "bench-launch") return BenchLaunch(session, args);
  if (args.command == "crash") return Crash(session, args);
  if (args.command == "context") return Context(session);
  return Hold(session, args);
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
