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
//
// The interposer's files (interposer.h, shared by them): this one loads the settings, the real
// driver and NVML, opens the slice's accounting, and holds cuInit and dlsym;
// interposer_hooks.cc the table of hooks and cuGetProcAddress; interposer_contexts.cc the
// contexts; interposer_memory.cc device memory and NVML's memory queries; interposer_launch.cc
// the launches.
#include "interposer.h"

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
#include <string>

namespace gpuslice::shim {

Driver g_driver;

using namespace gpuslice::cuda;  // NOLINT: the driver's names, as applications write them

// ---------------------------------------------------------------------------------------------
// Settings, the real driver, the accounting.

Config g_config;
std::atomic<int> g_loaded{0};
bool g_active = false;
std::atomic<int> g_accounting_state{0};
Accounting g_accounting;
Throttle g_throttle;
Nvml g_nvml;

namespace {

std::mutex g_load_mutex;
// Initial-exec: read without __tls_get_addr, which the sanitizers intercept and the dlsym hook
// may run before they are ready.
__attribute__((tls_model("initial-exec"))) thread_local bool t_loading = false;
void* g_cuda = nullptr;
std::string g_load_error;

std::mutex g_accounting_mutex;

}  // namespace

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

}  // namespace

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
// The real NVML.

using cuda::nvml::NVML_SUCCESS;
using cuda::nvml::nvmlReturn_t;

namespace {
std::once_flag g_nvml_once;
}  // namespace

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

// ---------------------------------------------------------------------------------------------
// The slice's accounting, opened at the first hook that needs it.

namespace {

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

}  // namespace

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

}  // namespace gpuslice::shim

using namespace gpuslice::cuda;  // NOLINT
namespace cuda = gpuslice::cuda;
namespace shim = gpuslice::shim;
using shim::g_driver;

// ---------------------------------------------------------------------------------------------
// Initialisation.

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

// ---------------------------------------------------------------------------------------------
// dlsym: the hook for a hooked name (the table is interposer_hooks.cc's).

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
