// libgpuslice-cuda.so: the CUDA driver-API interposer (docs/SHIM.md).
//
// Exported with C linkage under the driver's own names, so that with LD_PRELOAD a program linked
// against libcuda calls these first; `cuGetProcAddress` and `dlsym` hand out the same hooks, so
// that the runtime API (which looks the driver's functions up at run time) comes here too.
//
// With neither limits nor measuring, every hook passes straight on to the driver. Otherwise:
//   * device memory is counted in the slice's shared accounting (accounting.h) before the driver
//     is asked, and an allocation that would pass the cap fails with CUDA_ERROR_OUT_OF_MEMORY
//     without reaching the driver; a size the driver rounds (pitch, arrays) is corrected after
//     the call, and the object is destroyed again if the rounding is what passes the cap;
//   * each CUDA context counts what it was measured to take (NVML's free device memory just
//     before and after its creation), or the configured reservation where that cannot be
//     measured or is set explicitly; a context that does not fit under the cap is destroyed again;
//   * cuMemGetInfo and NVML's memory queries answer with the slice (total = cap);
//   * launches go through the throttle (throttle.h).
// Not counted (docs/SHIM.md says so): the legacy v1 entry points (cuMemAlloc without _v2, 32-bit
// sizes), memory that graphs allocate themselves (graph memory nodes), module globals, and
// memory imported from other processes (counted where it was allocated).
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "accounting.h"
#include "config.h"
#include "cuda_api.h"
#include "driver.h"
#include "throttle.h"

#define GPUSLICE_EXPORT extern "C" __attribute__((visibility("default")))

namespace gpuslice::shim {

Driver g_driver;

namespace {

using namespace gpuslice::cuda;  // NOLINT: the driver's names, as applications write them

using DlsymFunction = void* (*)(void*, const char*);

constexpr int kMaxDevices = 64;

// ---------------------------------------------------------------------------------------------
// Settings, the real driver, the accounting.

Config g_config;
std::atomic<int> g_loaded{0};  // 2 once LoadOnce is done
std::mutex g_load_mutex;
// Initial-exec: read without __tls_get_addr, which the sanitizers intercept and the dlsym hook
// may run before they are ready.
__attribute__((tls_model("initial-exec"))) thread_local bool t_loading = false;
bool g_active = false;
void* g_cuda = nullptr;
std::string g_load_error;

std::atomic<int> g_accounting_state{0};  // 0 not yet, 1 open, 2 failed (CUDA refused)
std::mutex g_accounting_mutex;
Accounting g_accounting;
Throttle g_throttle;
std::atomic<std::uint64_t> g_launches{0};

void Log(int level, const char* format, ...) __attribute__((format(printf, 2, 3)));
void Log(int level, const char* format, ...) {
  if (g_config.log_level < level) return;
  char line[1024];
  int n = std::snprintf(line, sizeof line, "gpuslice-cuda[%d]: ", static_cast<int>(getpid()));
  va_list args;
  va_start(args, format);
  n += std::vsnprintf(line + n, sizeof line - static_cast<std::size_t>(n), format, args);
  va_end(args);
  if (n >= static_cast<int>(sizeof line) - 1) n = static_cast<int>(sizeof line) - 2;
  line[n++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, static_cast<std::size_t>(n));
  (void)ignored;
}

double Mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace
}  // namespace gpuslice::shim

// The real dlsym, for the dlsym hook's tail jump (hidden: referenced from assembly).
extern "C" {
__attribute__((visibility("hidden"))) gpuslice::shim::DlsymFunction gpuslice_real_dlsym_ptr =
    nullptr;
}

namespace gpuslice::shim {
namespace {

// Not instrumented, and no library call but dlvsym: the sanitizers' start-up reaches it (through
// dlsym) before their own replacements of memcpy and the like are ready.
__attribute__((no_sanitize("address", "undefined"))) DlsymFunction RealDlsym() {
  if (gpuslice_real_dlsym_ptr == nullptr) {
    void* found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (found == nullptr) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    gpuslice_real_dlsym_ptr = reinterpret_cast<DlsymFunction>(found);
  }
  return gpuslice_real_dlsym_ptr;
}

template <typename Function>
void Resolve(void* handle, const char* name, Function* out) {
  void* symbol = handle == nullptr ? nullptr : RealDlsym()(handle, name);
  static_assert(sizeof symbol == sizeof *out);
  std::memcpy(out, &symbol, sizeof symbol);
}

// ---------------------------------------------------------------------------------------------
// The hook table: what cuGetProcAddress and dlsym hand out instead of the driver's functions.

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
void LoadNvml();

void LoadSlow();

// Loads the settings and the real driver once. Hooks call it first; after the first call it is
// one load, inlined into every hook.
inline void LoadOnce() {
  if (g_loaded.load(std::memory_order_acquire) != 2) [[unlikely]]
    LoadSlow();
}

[[gnu::noinline]] void LoadSlow() {
  std::lock_guard<std::mutex> hold(g_load_mutex);
  if (g_loaded.load(std::memory_order_relaxed) == 2) return;
  t_loading = true;
  g_config = LoadConfig([](const char* name) -> const char* { return std::getenv(name); });
  g_active = g_config.Active() || !g_config.error.empty();
  g_cuda = dlopen(g_config.real_libcuda.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (g_cuda == nullptr) {
    const char* why = dlerror();
    g_load_error = why != nullptr ? why : "not found";
  }
#define GPUSLICE_RESOLVE(field, type, name) Resolve(g_cuda, name, &g_driver.field);
  GPUSLICE_DRIVER_FUNCTIONS(GPUSLICE_RESOLVE)
#undef GPUSLICE_RESOLVE
  std::size_t count = 0;
  Hook* hooks = Hooks(&count);
  for (std::size_t i = 0; i < count; ++i) {
    if (std::strncmp(hooks[i].name, "nvml", 4) != 0) {
      hooks[i].real = g_cuda == nullptr ? nullptr : RealDlsym()(g_cuda, hooks[i].name);
    }
  }
  t_loading = false;
  g_loaded.store(2, std::memory_order_release);
}

// ---------------------------------------------------------------------------------------------
// The real NVML: for the memory queries answered with the slice, and for measuring what a new
// context takes.

using cuda::nvml::NVML_SUCCESS;
using cuda::nvml::nvmlDevice_t;
using cuda::nvml::nvmlMemory_t;
using cuda::nvml::nvmlMemory_v2_t;
using cuda::nvml::nvmlReturn_t;

struct Nvml {
  cuda::nvml::nvmlDeviceGetMemoryInfo_t get_memory = nullptr;
  cuda::nvml::nvmlDeviceGetMemoryInfo_v2_t get_memory_v2 = nullptr;
  cuda::nvml::nvmlDeviceGetUUID_t get_uuid = nullptr;
  cuda::nvml::nvmlInit_v2_t init = nullptr;
  cuda::nvml::nvmlDeviceGetHandleByUUID_t get_handle_by_uuid = nullptr;
};
Nvml g_nvml;
std::once_flag g_nvml_once;

void LoadNvml() {
  std::call_once(g_nvml_once, [] {
    void* handle = dlopen(g_config.real_nvml.c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (handle == nullptr) handle = dlopen(g_config.real_nvml.c_str(), RTLD_LAZY | RTLD_LOCAL);
    Resolve(handle, "nvmlDeviceGetMemoryInfo", &g_nvml.get_memory);
    Resolve(handle, "nvmlDeviceGetMemoryInfo_v2", &g_nvml.get_memory_v2);
    Resolve(handle, "nvmlDeviceGetUUID", &g_nvml.get_uuid);
    Resolve(handle, "nvmlInit_v2", &g_nvml.init);
    Resolve(handle, "nvmlDeviceGetHandleByUUID", &g_nvml.get_handle_by_uuid);
    std::size_t count = 0;
    Hook* hooks = Hooks(&count);
    for (std::size_t i = 0; i < count; ++i) {
      if (std::strcmp(hooks[i].name, "nvmlDeviceGetMemoryInfo") == 0) {
        std::memcpy(&hooks[i].real, &g_nvml.get_memory, sizeof(void*));
      } else if (std::strcmp(hooks[i].name, "nvmlDeviceGetMemoryInfo_v2") == 0) {
        std::memcpy(&hooks[i].real, &g_nvml.get_memory_v2, sizeof(void*));
      }
    }
  });
}

// NVML loaded and initialised for measuring contexts, once per process (the reference is kept,
// so an application's own nvmlShutdown does not end it): "" when ready, else why not.
const std::string& NvmlForMeasuring() {
  static const std::string why = []() -> std::string {
    LoadNvml();
    if (g_nvml.init == nullptr || g_nvml.get_handle_by_uuid == nullptr ||
        g_nvml.get_memory == nullptr) {
      return "NVML " + g_config.real_nvml + " was not found";
    }
    if (const nvmlReturn_t r = g_nvml.init(); r != NVML_SUCCESS) {
      return "nvmlInit_v2 failed with " + std::to_string(r);
    }
    return "";
  }();
  return why;
}

// This process's device-memory calls (allocations, frees, contexts made and destroyed) begun
// and ended. A context's measurement is believed only when no other such call ran meanwhile.
std::atomic<std::uint64_t> g_memory_calls_begun{0};
std::atomic<std::uint64_t> g_memory_calls_ended{0};

class MemoryCall {
 public:
  MemoryCall() { g_memory_calls_begun.fetch_add(1); }
  ~MemoryCall() { g_memory_calls_ended.fetch_add(1); }
  MemoryCall(const MemoryCall&) = delete;
  MemoryCall& operator=(const MemoryCall&) = delete;
};

void FlushLaunches() {
  const std::uint64_t launches = g_launches.exchange(0, std::memory_order_relaxed);
  if (launches > 0 && g_accounting.IsOpen()) g_accounting.AddLaunches(launches);
}

// Allocations this process holds, by kind, with the context they belong to.
struct Allocation {
  std::uint64_t bytes = 0;
  CUcontext context = nullptr;
};
struct Tables {
  std::mutex mutex;
  std::unordered_map<std::uint64_t, Allocation> pointers;  // cuMemAlloc*, managed, async, pool
  std::unordered_map<std::uint64_t, Allocation> arrays;
  std::unordered_map<std::uint64_t, Allocation> mipmaps;
  std::unordered_map<std::uint64_t, Allocation> handles;  // cuMemCreate
  std::unordered_map<CUcontext, std::uint64_t> contexts;  // reservations counted
  std::mutex primary_mutex;
  CUcontext primary[kMaxDevices] = {};
  int primary_refs[kMaxDevices] = {};
};
Tables* g_tables = nullptr;  // never freed: hooks may run during exit

void AtExit() {
  g_throttle.Poll();
  FlushLaunches();
}

void AfterForkInChild() {
  g_accounting.ForgetAfterFork();
  g_throttle.Reset();
  if (g_tables != nullptr) g_tables = new Tables();  // the parent's allocations are not ours
  g_accounting_state.store(0);
  new (&g_accounting_mutex) std::mutex();
}

std::string LimitsSentence() {
  std::string text;
  char part[256];
  if (g_accounting.RegionMode() == SliceMode::kMeasure) {
    return "measuring: nothing is refused or held back";
  }
  if (g_accounting.Cap() > 0 && g_config.context_reserve_set) {
    std::snprintf(part, sizeof part, "VRAM cap %.0f MiB (each CUDA context counted as %.0f MiB)",
                  Mib(g_accounting.Cap()), Mib(g_config.context_reserve_bytes));
  } else if (g_accounting.Cap() > 0) {
    std::snprintf(part, sizeof part,
                  "VRAM cap %.0f MiB (each CUDA context counted as what it takes, measured when "
                  "it is made; %.0f MiB where that cannot be measured)",
                  Mib(g_accounting.Cap()), Mib(g_config.context_reserve_bytes));
  } else {
    std::snprintf(part, sizeof part, "no VRAM cap");
  }
  text = part;
  if (g_accounting.ShareMilli() > 0 && g_accounting.ShareMilli() < 1000) {
    std::snprintf(
        part, sizeof part, ", compute share %.1f%% (%s)", g_accounting.ShareMilli() / 10.0,
        g_accounting.Policy() == SharePolicy::kStrict ? "strict" : "may borrow idle time");
  } else {
    std::snprintf(part, sizeof part, ", no compute limit");
  }
  return text + part;
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

[[gnu::noinline]] bool OpenAccounting() {
  std::lock_guard<std::mutex> hold(g_accounting_mutex);
  if (g_accounting_state.load(std::memory_order_relaxed) != 0) {
    return g_accounting_state.load() == 1;
  }
  std::string error = g_config.error;
  if (error.empty() && g_cuda == nullptr) {
    error = "cannot load the CUDA driver " + g_config.real_libcuda + ": " + g_load_error;
  }
  if (error.empty()) g_accounting.Open(g_config, &error);
  if (!error.empty()) {
    // Limits were asked for and cannot be kept: refuse rather than run without them.
    if (g_config.log_level >= 1) {
      Log(1,
          "%s; CUDA is refused because the slice's limits could not be enforced (set "
          "GPUSLICE_MODE=passthrough to run without them)",
          error.c_str());
    }
    g_accounting_state.store(2, std::memory_order_release);
    return false;
  }
  if (g_tables == nullptr) g_tables = new Tables();
  const bool limit = g_accounting.RegionMode() == SliceMode::kEnforce &&
                     g_accounting.ShareMilli() > 0 && g_accounting.ShareMilli() < 1000;
  g_throttle.Configure(&g_accounting, limit, g_accounting.RegionMode() == SliceMode::kMeasure,
                       g_config.shm_dir);
  if (g_config.mode != Mode::kMeasure && (g_accounting.Cap() != g_config.cap_bytes ||
                                          g_accounting.ShareMilli() != g_config.share_milli)) {
    Log(1, "slice %s was started with other limits; the slice's are kept for this process too",
        g_config.slice_id.c_str());
  }
  Log(1, "slice %s: %s; accounting %s shared by %d process(es)", g_config.slice_id.c_str(),
      LimitsSentence().c_str(), g_accounting.Path().c_str(), g_accounting.LiveProcesses());
  std::atexit(AtExit);
  pthread_atfork(nullptr, nullptr, AfterForkInChild);
  g_accounting_state.store(1, std::memory_order_release);
  return true;
}

// Rate-limited: one line per second at most, with how many were not written.
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

// After the driver made an object (or a context) counted at `counted` bytes that really takes
// `actual`: the difference is counted or given back. False when the extra bytes pass the cap
// (the caller then destroys the object and gives `counted` back).
bool Correct(std::uint64_t counted, std::uint64_t actual, bool context = false) {
  if (actual > counted) return g_accounting.Reserve(actual - counted, context);
  if (actual < counted) g_accounting.Release(counted - actual, context);
  return true;
}

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

inline void CountLaunch() {
  if ((g_launches.fetch_add(1, std::memory_order_relaxed) & 4095) == 4095) [[unlikely]] {
    FlushLaunches();
  }
}

// The slice's place in its GPU's schedule, at its first launch. False: launches are refused,
// since the share could not be kept.
bool JoinSchedule() {
  static std::mutex mutex;
  static bool failed = false;  // said once; launches stay refused
  std::lock_guard<std::mutex> hold(mutex);
  if (failed) return false;
  if (!g_throttle.NeedsSchedule()) return true;  // another thread joined meanwhile
  char uuid[kGpuUuidSize];
  g_accounting.GpuUuid(uuid, sizeof uuid);
  std::string error;
  if (g_throttle.JoinSchedule(uuid[0] != '\0' ? uuid : "unknown", g_config.slice_id.c_str(),
                              &error)) {
    return true;
  }
  Log(1, "%s; kernel launches are refused because the compute share could not be kept",
      error.c_str());
  failed = true;
  return false;
}

template <typename Call>
CUresult Launch(CUstream stream, bool per_thread, const void* key, Call&& call) {
  CountLaunch();
  if (!g_throttle.Timing()) return call();
  if (g_throttle.NeedsSchedule() && !JoinSchedule()) return CUDA_ERROR_NOT_PERMITTED;
  Throttle::Ticket ticket = g_throttle.Before(stream, per_thread, key);
  const CUresult result = call();
  g_throttle.After(ticket, result);
  return result;
}

}  // namespace
}  // namespace gpuslice::shim

using namespace gpuslice::cuda;  // NOLINT
namespace cuda = gpuslice::cuda;
namespace shim = gpuslice::shim;
using shim::g_driver;

// Every hook starts with this: pass straight on when the interposer is inert, refuse CUDA when
// the limits cannot be kept.
#define GPUSLICE_ENTER(field, ...)                                  \
  shim::LoadOnce();                                                 \
  if (g_driver.field == nullptr) return CUDA_ERROR_NOT_INITIALIZED; \
  if (!shim::g_active) return g_driver.field(__VA_ARGS__);          \
  if (!shim::EnsureAccounting()) return CUDA_ERROR_NOT_INITIALIZED;

// ---------------------------------------------------------------------------------------------
// Initialisation and cuGetProcAddress.

GPUSLICE_EXPORT CUresult cuInit(unsigned int flags) {
  shim::LoadOnce();
  if (g_driver.cuInit == nullptr) {
    if (shim::g_active) shim::EnsureAccounting();  // says why
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (!shim::g_active) {
    static std::once_flag said;
    if (shim::g_config.mode == shim::Mode::kPassthrough) {
      std::call_once(said, [] { shim::Log(1, "passthrough: no limits in force"); });
    }
    return g_driver.cuInit(flags);
  }
  if (!shim::EnsureAccounting()) return CUDA_ERROR_NOT_INITIALIZED;
  return g_driver.cuInit(flags);
}

namespace gpuslice::shim {
namespace {

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
// Launches: every path goes through the throttle.

#define GPUSLICE_LAUNCH_KERNEL(name, per_thread)                                             \
  GPUSLICE_EXPORT CUresult name(                                                             \
      CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,     \
      unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                \
      unsigned int sharedMemBytes, CUstream stream, void** kernelParams, void** extra) {     \
    GPUSLICE_ENTER(name, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,   \
                   sharedMemBytes, stream, kernelParams, extra)                              \
    return shim::Launch(stream, per_thread, f, [&] {                                         \
      return g_driver.name(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, \
                           sharedMemBytes, stream, kernelParams, extra);                     \
    });                                                                                      \
  }
GPUSLICE_LAUNCH_KERNEL(cuLaunchKernel, false)
GPUSLICE_LAUNCH_KERNEL(cuLaunchKernel_ptsz, true)
#undef GPUSLICE_LAUNCH_KERNEL

#define GPUSLICE_LAUNCH_EX(name, per_thread)                                                     \
  GPUSLICE_EXPORT CUresult name(const CUlaunchConfig* config, CUfunction f, void** kernelParams, \
                                void** extra) {                                                  \
    GPUSLICE_ENTER(name, config, f, kernelParams, extra)                                         \
    return shim::Launch(config == nullptr ? nullptr : config->hStream, per_thread, f,            \
                        [&] { return g_driver.name(config, f, kernelParams, extra); });          \
  }
GPUSLICE_LAUNCH_EX(cuLaunchKernelEx, false)
GPUSLICE_LAUNCH_EX(cuLaunchKernelEx_ptsz, true)
#undef GPUSLICE_LAUNCH_EX

#define GPUSLICE_LAUNCH_COOPERATIVE(name, per_thread)                                        \
  GPUSLICE_EXPORT CUresult name(                                                             \
      CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,     \
      unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                \
      unsigned int sharedMemBytes, CUstream stream, void** kernelParams) {                   \
    GPUSLICE_ENTER(name, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,   \
                   sharedMemBytes, stream, kernelParams)                                     \
    return shim::Launch(stream, per_thread, f, [&] {                                         \
      return g_driver.name(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, \
                           sharedMemBytes, stream, kernelParams);                            \
    });                                                                                      \
  }
GPUSLICE_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel, false)
GPUSLICE_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz, true)
#undef GPUSLICE_LAUNCH_COOPERATIVE

GPUSLICE_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* launchParamsList,
                                                              unsigned int numDevices,
                                                              unsigned int flags) {
  GPUSLICE_ENTER(cuLaunchCooperativeKernelMultiDevice, launchParamsList, numDevices, flags)
  const bool any = launchParamsList != nullptr && numDevices > 0;
  return shim::Launch(any ? launchParamsList[0].hStream : nullptr, false,
                      any ? static_cast<const void*>(launchParamsList[0].function) : nullptr, [&] {
                        return g_driver.cuLaunchCooperativeKernelMultiDevice(launchParamsList,
                                                                             numDevices, flags);
                      });
}

#define GPUSLICE_GRAPH_LAUNCH(name, per_thread)                                                   \
  GPUSLICE_EXPORT CUresult name(CUgraphExec graph, CUstream stream) {                             \
    GPUSLICE_ENTER(name, graph, stream)                                                           \
    return shim::Launch(stream, per_thread, graph, [&] { return g_driver.name(graph, stream); }); \
  }
GPUSLICE_GRAPH_LAUNCH(cuGraphLaunch, false)
GPUSLICE_GRAPH_LAUNCH(cuGraphLaunch_ptsz, true)
#undef GPUSLICE_GRAPH_LAUNCH

GPUSLICE_EXPORT CUresult cuLaunch(CUfunction f) {
  GPUSLICE_ENTER(cuLaunch, f)
  return shim::Launch(nullptr, false, f, [&] { return g_driver.cuLaunch(f); });
}

GPUSLICE_EXPORT CUresult cuLaunchGrid(CUfunction f, int gridWidth, int gridHeight) {
  GPUSLICE_ENTER(cuLaunchGrid, f, gridWidth, gridHeight)
  return shim::Launch(nullptr, false, f,
                      [&] { return g_driver.cuLaunchGrid(f, gridWidth, gridHeight); });
}

GPUSLICE_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int gridWidth, int gridHeight,
                                           CUstream stream) {
  GPUSLICE_ENTER(cuLaunchGridAsync, f, gridWidth, gridHeight, stream)
  return shim::Launch(stream, false, f,
                      [&] { return g_driver.cuLaunchGridAsync(f, gridWidth, gridHeight, stream); });
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

// ---------------------------------------------------------------------------------------------
// The table of hooks, and dlsym.

namespace gpuslice::shim {
namespace {

#define GPUSLICE_HOOK(name, base, version, per_thread)                               \
  Hook {                                                                             \
#name, base, version, per_thread, reinterpret_cast < void*>(&::name), nullptr,   \
        [](void* pointer) { std::memcpy(&g_driver.name, &pointer, sizeof pointer); } \
  }

void AdoptNothing(void*) {}

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

}  // namespace
}  // namespace gpuslice::shim

// Called by the dlsym entry below with dlsym's arguments: our hook for a hooked CUDA or NVML
// name, or nullptr to let the real dlsym answer. Plain C-like code: it also runs for every
// dlsym a process makes (from /etc/ld.so.preload, in processes that never use CUDA), some of
// them during the sanitizers' start-up.
extern "C" __attribute__((visibility("hidden"), used, no_sanitize("address", "undefined"))) void*
gpuslice_dlsym_hook(void* handle, const char* symbol) {
  (void)handle;
  gpuslice::shim::RealDlsym();
  if (symbol == nullptr) return nullptr;
  const bool cuda = symbol[0] == 'c' && symbol[1] == 'u';
  const bool nvml = symbol[0] == 'n' && symbol[1] == 'v' && symbol[2] == 'm' && symbol[3] == 'l';
  if ((!cuda && !nvml) || gpuslice::shim::t_loading) return nullptr;
  gpuslice::shim::LoadOnce();
  if (!gpuslice::shim::g_active) return nullptr;
  if (nvml) gpuslice::shim::LoadNvml();
  std::size_t count = 0;
  gpuslice::shim::Hook* hooks = gpuslice::shim::Hooks(&count);
  for (std::size_t i = 0; i < count; ++i) {
    if (hooks[i].real != nullptr && std::strcmp(hooks[i].name, symbol) == 0) {
      return hooks[i].hook;
    }
  }
  return nullptr;
}

// dlsym itself. glibc's dlsym finds RTLD_NEXT's "next" from its caller's return address, so the
// real dlsym must be reached by a jump that leaves the caller's return address in place: this
// entry asks the hook, and either returns the hook's answer or tail-jumps to the real dlsym.
#if defined(__x86_64__)
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
dlsym:
  .cfi_startproc
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call gpuslice_dlsym_hook
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  testq %rax, %rax
  jnz 1f
  jmpq *gpuslice_real_dlsym_ptr(%rip)
1:
  ret
  .cfi_endproc
  .size dlsym, .-dlsym
)");
#elif defined(__aarch64__)
// Not yet run on an Arm machine (Grace Hopper); the same scheme with the link register.
asm(R"(
  .text
  .globl dlsym
  .type dlsym, %function
dlsym:
  stp x29, x30, [sp, #-32]!
  mov x29, sp
  stp x0, x1, [sp, #16]
  bl gpuslice_dlsym_hook
  mov x2, x0
  ldp x0, x1, [sp, #16]
  ldp x29, x30, [sp], #32
  cbnz x2, 1f
  adrp x16, gpuslice_real_dlsym_ptr
  ldr x16, [x16, #:lo12:gpuslice_real_dlsym_ptr]
  br x16
1:
  mov x0, x2
  ret
  .size dlsym, .-dlsym
)");
#else
#error "libgpuslice-cuda.so's dlsym entry is written for x86-64 and AArch64 only"
#endif

// At exit, this process's slot is given back at once (the driver frees its memory with it).
__attribute__((destructor)) static void GpusliceCudaUnload() {
  if (gpuslice::shim::g_accounting_state.load() == 1) gpuslice::shim::g_accounting.Leave();
}
