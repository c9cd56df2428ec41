// The test CUDA library: libcuda.so.1 for machines without a GPU (docs/SHIM.md, "Test CUDA
// library").
//
// It exports, with C linkage and the types of ../cuda_api.h (checked with static_assert), the
// driver functions the interposer hooks or calls, under the names the real driver exports, plus
// `gpusliceFakeCudaPeakBytes`, `gpusliceFakeCudaUsedBytes` and `gpusliceFakeCudaCalls` for tests,
// and the few NVML functions the interposer calls.
// The model:
//   * Devices: $FAKE_CUDA_DEVICES (default 1), each of $FAKE_CUDA_TOTAL_MIB (default 16384) with a
//     UUID derived from its ordinal. Every call but cuInit, cuDriverGetVersion and cuGetProcAddress
//     answers CUDA_ERROR_NOT_INITIALIZED before cuInit.
//   * Memory: each device counts what it hands out (`used`, `peak`) and refuses with
//     CUDA_ERROR_OUT_OF_MEMORY beyond its total. Linear memory is host address space reserved with
//     mmap(MAP_NORESERVE) (device pointers are host addresses; nothing is touched). What counts:
//     bytes for cuMemAlloc/Managed/Async/FromPoolAsync; pitch*height for cuMemAllocPitch (pitch =
//     width rounded up to 512); for arrays the memory requirement, i.e. Width*max(Height,1)*
//     max(Depth,1)*channels*element size (summed over levels for a mipmapped array, each dimension
//     halving, at least 1) rounded up to 2 MiB; the size of a cuMemCreate handle (a multiple of 2
//     MiB) until cuMemRelease; $FAKE_CUDA_CONTEXT_MIB (default 0) per living context. Address
//     reservations and mappings count nothing. Asynchronous frees uncount at once. Destroying a
//     context (or resetting a primary context) frees its remaining allocations and arrays.
//   * Execution: each context has a worker thread running one FIFO of operations (kernels and
//     event records of all its streams in launch order). A kernel takes the engine - an exclusive
//     flock on $FAKE_CUDA_ENGINE shared by every process naming it (one time-sliced GPU), or a
//     process mutex - sleeps its duration to an absolute CLOCK_MONOTONIC deadline and releases it.
//     Times follow a GPU timeline: a kernel starts at the latest of its launch, the end of its
//     context's previous operation and the end of the engine's previous kernel (kept in the engine
//     file's first page), and ends its duration later; the worker sleeps until that end. So a
//     worker woken late (a loaded machine) neither stretches a kernel nor opens a gap between
//     back-to-back kernels, and a whole second of launches gives a whole second of kernels.
//     Waiters for the engine file queue on a turnstile (an OFD lock on its byte 8) so that
//     processes contending for it alternate, as a time-sliced GPU would; flock alone lets the
//     releaser take it again before a woken waiter runs. With $FAKE_CUDA_TRACE, each finished
//     kernel appends `<pid> <start_ns> <end_ns>\n` with one write(2). Kernels: "gpuslice_sleep"
//     (nanoseconds in kernelParams[0]), "gpuslice_work" (iterations in kernelParams[0], 1 ns each)
//     and "gpuslice_noop"; the parameter is read at launch (or capture) time.
//   * Events carry the time at which the worker reached them on that timeline: the later of their
//     record and the end of the context's previous operation.
//   * Stream capture records launches into a graph instead of running them; cuGraphLaunch enqueues
//     the recorded kernels.
//   * NVML, for the interposer's measuring of contexts (GPUSLICE_REAL_NVML pointing at this
//     library): nvmlInit_v2, nvmlDeviceGetHandleByUUID (the "GPU-" form of cuDeviceGetUuid's
//     UUID), nvmlDeviceGetUUID and nvmlDeviceGetMemoryInfo (_v2), whose figures are the device's
//     own counts above (used, total - used free, nothing reserved). Devices exist once cuInit
//     has run in the process; before, NVML_ERROR_UNINITIALIZED.
// Handles are checked: an unknown stream, event, module, function, array or graph is
// CUDA_ERROR_INVALID_HANDLE; contexts are never freed, so a destroyed one stays recognisable and
// answers CUDA_ERROR_INVALID_CONTEXT. The library is linked with -Bsymbolic, so cuGetProcAddress
// hands out its own functions even when a preloaded library (the interposer) exports the same
// names.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "cuda_api.h"

#define GPUSLICE_FAKE_CUDA_EXPORT __attribute__((visibility("default")))

namespace gpuslice::cuda {

namespace {

inline constexpr int kDriverVersion = 12040;
inline constexpr CUresult kStreamCaptureUnsupported = 900;  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
inline constexpr CUresult kIllegalState = 401;              // CUDA_ERROR_ILLEGAL_STATE
inline constexpr std::uint64_t kMiB = 1ULL << 20;
inline constexpr std::uint64_t kArrayAlignment = 2 * kMiB;
inline constexpr std::uint64_t kVmmGranularity = 2 * kMiB;
inline constexpr std::size_t kPitchAlignment = 512;
inline constexpr int kMaxContextStack = 32;
inline constexpr off_t kEnginePage = 4096;

std::uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t RoundUp(std::uint64_t value, std::uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Calls per exported name, for gpusliceFakeCudaCalls.
struct CallCounters {
  std::mutex mu;
  std::map<std::string, std::atomic<std::uint64_t>, std::less<>> counts;
};

CallCounters& Counters() {
  static CallCounters* counters = new CallCounters;  // never destroyed: used until exit
  return *counters;
}

std::atomic<std::uint64_t>& CallCounter(std::string_view name) {
  CallCounters& counters = Counters();
  std::lock_guard lock(counters.mu);
  auto it = counters.counts.find(name);
  if (it == counters.counts.end()) {
    it = counters.counts
             .emplace(std::piecewise_construct, std::forward_as_tuple(name),
                      std::forward_as_tuple(0))
             .first;
  }
  return it->second;
}

#define GPUSLICE_FAKE_COUNT(name)                                             \
  do {                                                                        \
    static std::atomic<std::uint64_t>& fake_cuda_counter = CallCounter(name); \
    fake_cuda_counter.fetch_add(1, std::memory_order_relaxed);                \
  } while (false)

}  // namespace

// The opaque handle types of cuda_api.h, defined for this library only.
struct CUevent_st {
  unsigned int flags = 0;
  std::uint64_t generation = 0;  // records issued
  std::uint64_t reached = 0;     // the latest record the worker reached
  std::uint64_t time_ns = 0;     // when it reached it
};

struct CUstream_st {
  CUctx_st* ctx = nullptr;
  std::uint64_t last_seq = 0;  // the last operation enqueued through this stream
  bool capturing = false;
  std::vector<std::uint64_t> captured;  // kernel durations recorded while capturing
};

namespace {

struct Op {
  bool kernel = false;
  std::uint64_t seq = 0;
  std::uint64_t duration_ns = 0;
  std::shared_ptr<CUevent_st> event;  // event records
  std::uint64_t generation = 0;
  std::uint64_t enqueued_ns = 0;  // CLOCK_MONOTONIC at launch or record
};

}  // namespace

struct CUctx_st {
  int device = 0;
  bool primary = false;
  bool alive = true;
  int primary_refs = 0;
  std::uint64_t reserved_bytes = 0;  // $FAKE_CUDA_CONTEXT_MIB, counted while alive
  std::uint64_t enqueued = 0;        // sequence number of the last operation enqueued
  std::uint64_t completed = 0;       // of the last one finished (operations finish in order)
  std::deque<Op> queue;
  std::condition_variable work;
  bool stop = false;
  std::thread worker;
  CUstream_st default_stream;
};

struct CUfunc_st {
  enum class Kind { kSleep, kWork, kNoop } kind = Kind::kNoop;
  CUmod_st* module = nullptr;
};

struct CUmod_st {
  CUfunc_st sleep, work, noop;
};

struct CUarray_st {
  CUctx_st* ctx = nullptr;
  std::uint64_t bytes = 0;  // the memory requirement, counted
};

struct CUmipmappedArray_st {
  CUctx_st* ctx = nullptr;
  std::uint64_t bytes = 0;
};

struct CUgraph_st {
  std::vector<std::uint64_t> kernels;
};

struct CUgraphExec_st {
  std::vector<std::uint64_t> kernels;
};

struct CUmemPoolHandle_st {
  int device = 0;
};

namespace {

struct Allocation {
  std::size_t mapped = 0;     // bytes of address space
  std::uint64_t counted = 0;  // bytes counted against the device
  CUctx_st* ctx = nullptr;
};

struct VmmHandle {
  int device = 0;
  std::uint64_t bytes = 0;
};

struct Mapping {
  std::size_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
};

struct Device {
  std::uint64_t used = 0;
  std::uint64_t peak = 0;
  CUctx_st* primary = nullptr;
  std::unique_ptr<CUmemPoolHandle_st> pool;
};

struct Driver {
  std::mutex mu;                 // guards everything below but `initialized`
  std::condition_variable done;  // notified whenever an operation finishes
  std::atomic<bool> initialized{false};
  std::uint64_t total_bytes = 0;  // per device
  std::uint64_t context_bytes = 0;
  std::vector<Device> devices;
  std::vector<std::unique_ptr<CUctx_st>> contexts;  // never freed: stale handles stay known
  std::map<CUdeviceptr, Allocation> allocations;
  std::unordered_map<CUarray_st*, std::unique_ptr<CUarray_st>> arrays;
  std::unordered_map<CUmipmappedArray_st*, std::unique_ptr<CUmipmappedArray_st>> mipmaps;
  std::map<CUmemGenericAllocationHandle, VmmHandle> vmm;
  CUmemGenericAllocationHandle next_vmm = 1;
  std::map<CUdeviceptr, std::size_t> reservations;
  std::map<CUdeviceptr, Mapping> mappings;
  std::unordered_map<CUmod_st*, std::unique_ptr<CUmod_st>> modules;
  std::unordered_map<CUfunc_st*, CUmod_st*> functions;
  std::unordered_map<CUstream_st*, std::unique_ptr<CUstream_st>> streams;
  std::unordered_map<CUevent_st*, std::shared_ptr<CUevent_st>> events;
  std::unordered_map<CUgraph_st*, std::unique_ptr<CUgraph_st>> graphs;
  std::unordered_map<CUgraphExec_st*, std::unique_ptr<CUgraphExec_st>> execs;

  std::mutex engine_mu;  // the engine within this process
  int engine_fd = -1;    // $FAKE_CUDA_ENGINE, shared between processes
  std::uint64_t local_free_at = 0;
  std::uint64_t* engine_free_at = &local_free_at;  // the engine's last kernel end, in the
                                                   // engine file's first page when shared
  int trace_fd = -1;                               // $FAKE_CUDA_TRACE
};

Driver& D() {
  static Driver* driver = new Driver;  // never destroyed: workers may run until exit
  return *driver;
}

// The calling thread's context stack (trivially destructible: no thread_local destructor).
thread_local CUctx_st* tls_stack[kMaxContextStack];
thread_local int tls_depth = 0;

CUctx_st* CurrentOrNull() { return tls_depth > 0 ? tls_stack[tls_depth - 1] : nullptr; }

// The current context if it is alive (caller holds D().mu).
CUctx_st* CurrentAlive() {
  CUctx_st* ctx = CurrentOrNull();
  return ctx != nullptr && ctx->alive ? ctx : nullptr;
}

#define GPUSLICE_FAKE_REQUIRE_INIT()                        \
  do {                                                      \
    if (!D().initialized.load(std::memory_order_acquire)) { \
      return CUDA_ERROR_NOT_INITIALIZED;                    \
    }                                                       \
  } while (false)

// --- memory counting (caller holds D().mu) ---

CUresult Count(int device, std::uint64_t bytes) {
  Driver& d = D();
  Device& dev = d.devices[static_cast<std::size_t>(device)];
  if (bytes > d.total_bytes - dev.used) return CUDA_ERROR_OUT_OF_MEMORY;
  dev.used += bytes;
  if (dev.used > dev.peak) dev.peak = dev.used;
  return CUDA_SUCCESS;
}

void Uncount(int device, std::uint64_t bytes) {
  Device& dev = D().devices[static_cast<std::size_t>(device)];
  dev.used = bytes > dev.used ? 0 : dev.used - bytes;
}

void* MapAddressSpace(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

CUresult AllocateLinear(CUctx_st* ctx, CUdeviceptr* dptr, std::size_t mapped,
                        std::uint64_t counted) {
  Driver& d = D();
  if (CUresult r = Count(ctx->device, counted); r != CUDA_SUCCESS) return r;
  void* p = MapAddressSpace(mapped);
  if (p == nullptr) {
    Uncount(ctx->device, counted);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const auto address = reinterpret_cast<CUdeviceptr>(p);
  d.allocations[address] = Allocation{mapped, counted, ctx};
  *dptr = address;
  return CUDA_SUCCESS;
}

CUresult FreeLinear(CUdeviceptr dptr) {
  Driver& d = D();
  auto it = d.allocations.find(dptr);
  if (it == d.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(it->first), it->second.mapped);
  Uncount(it->second.ctx->device, it->second.counted);
  d.allocations.erase(it);
  return CUDA_SUCCESS;
}

// Frees what a context still holds: linear allocations and arrays.
void FreeContextMemory(CUctx_st* ctx) {
  Driver& d = D();
  for (auto it = d.allocations.begin(); it != d.allocations.end();) {
    if (it->second.ctx == ctx) {
      munmap(reinterpret_cast<void*>(it->first), it->second.mapped);
      Uncount(ctx->device, it->second.counted);
      it = d.allocations.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = d.arrays.begin(); it != d.arrays.end();) {
    if (it->second->ctx == ctx) {
      Uncount(ctx->device, it->second->bytes);
      it = d.arrays.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = d.mipmaps.begin(); it != d.mipmaps.end();) {
    if (it->second->ctx == ctx) {
      Uncount(ctx->device, it->second->bytes);
      it = d.mipmaps.erase(it);
    } else {
      ++it;
    }
  }
}

// --- execution ---

void LockEngine() {
  Driver& d = D();
  if (d.engine_fd < 0) return;
  struct flock turnstile {};
  turnstile.l_type = F_WRLCK;
  turnstile.l_whence = SEEK_SET;
  turnstile.l_start = 8;  // past the engine's timeline
  turnstile.l_len = 1;
  while (fcntl(d.engine_fd, F_OFD_SETLKW, &turnstile) != 0 && errno == EINTR) {
  }
  while (flock(d.engine_fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  turnstile.l_type = F_UNLCK;
  fcntl(d.engine_fd, F_OFD_SETLK, &turnstile);
}

void UnlockEngine() {
  Driver& d = D();
  if (d.engine_fd >= 0) flock(d.engine_fd, LOCK_UN);
}

// Runs one kernel on the engine and returns its end on the GPU timeline. Its start is the latest
// of: its launch, the end of the context's previous operation (`ready_ns`) and the end of the
// engine's previous kernel, from any process (kept in the engine file). The worker sleeps to the
// absolute end, so nothing completes before its time; but host-side delays (a worker woken late,
// a loaded machine) do not stretch kernels or open gaps between back-to-back ones, as on a GPU,
// which runs queued work without the host.
std::uint64_t RunKernel(std::uint64_t ready_ns, std::uint64_t duration_ns) {
  Driver& d = D();
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  {
    std::lock_guard engine(d.engine_mu);
    LockEngine();
    std::atomic_ref<std::uint64_t> free_at(*d.engine_free_at);
    // A kernel's end is never in the future once it released the engine; a later value is left
    // from another boot (CLOCK_MONOTONIC restarts) and is ignored.
    start = std::max(ready_ns, std::min(free_at.load(std::memory_order_relaxed), NowNs()));
    end = start + duration_ns;
    if (end > NowNs()) {
      timespec ts{};
      ts.tv_sec = static_cast<time_t>(end / 1000000000ULL);
      ts.tv_nsec = static_cast<long>(end % 1000000000ULL);
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
      }
    }
    free_at.store(end, std::memory_order_relaxed);
    UnlockEngine();
  }
  if (d.trace_fd >= 0) {
    char line[96];
    const int n =
        std::snprintf(line, sizeof line, "%d %llu %llu\n", static_cast<int>(getpid()),
                      static_cast<unsigned long long>(start), static_cast<unsigned long long>(end));
    if (n > 0) {
      [[maybe_unused]] const ssize_t written = write(d.trace_fd, line, static_cast<std::size_t>(n));
    }
  }
  return end;
}

// A context's worker: runs its queue in order. `gpu_ns` is the context's GPU timeline, the end of
// its last operation: an event is reached at the later of its record and that end.
void WorkerLoop(CUctx_st* ctx) {
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // wake at kernel deadlines, not 50 us later
  Driver& d = D();
  std::uint64_t gpu_ns = 0;
  std::unique_lock lock(d.mu);
  for (;;) {
    ctx->work.wait(lock, [ctx] { return ctx->stop || !ctx->queue.empty(); });
    if (ctx->queue.empty()) return;  // stopping, and everything enqueued has run
    Op op = std::move(ctx->queue.front());
    ctx->queue.pop_front();
    lock.unlock();
    gpu_ns = std::max(gpu_ns, op.enqueued_ns);
    if (op.kernel) gpu_ns = RunKernel(gpu_ns, op.duration_ns);
    lock.lock();
    if (op.event != nullptr && op.generation > op.event->reached) {
      op.event->reached = op.generation;
      op.event->time_ns = gpu_ns;
    }
    ctx->completed = op.seq;
    d.done.notify_all();
  }
}

void Enqueue(CUstream_st* stream, Op op) {
  CUctx_st* ctx = stream->ctx;
  op.seq = ++ctx->enqueued;
  op.enqueued_ns = NowNs();
  stream->last_seq = op.seq;
  ctx->queue.push_back(std::move(op));
  ctx->work.notify_one();
}

void EnqueueKernel(CUstream_st* stream, std::uint64_t duration_ns) {
  Op op;
  op.kernel = true;
  op.duration_ns = duration_ns;
  Enqueue(stream, std::move(op));
}

// Null, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) are the current context's default
// stream. Caller holds D().mu.
CUresult ResolveStream(CUstream handle, CUstream_st** out) {
  Driver& d = D();
  if (reinterpret_cast<std::uintptr_t>(handle) <= 2) {
    CUctx_st* ctx = CurrentAlive();
    if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    *out = &ctx->default_stream;
    return CUDA_SUCCESS;
  }
  auto it = d.streams.find(handle);
  if (it == d.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (!it->second->ctx->alive) return CUDA_ERROR_INVALID_CONTEXT;
  *out = it->second.get();
  return CUDA_SUCCESS;
}

CUresult KernelDuration(CUfunction f, void** params, std::uint64_t* duration_ns) {
  Driver& d = D();
  if (f == nullptr || d.functions.find(f) == d.functions.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (f->kind == CUfunc_st::Kind::kNoop) {
    *duration_ns = 0;
    return CUDA_SUCCESS;
  }
  if (params == nullptr || params[0] == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *duration_ns = *static_cast<const unsigned long long*>(params[0]);
  return CUDA_SUCCESS;
}

CUresult Launch(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                unsigned int by, unsigned int bz, CUstream stream, void** params) {
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& d = D();
  std::lock_guard lock(d.mu);
  std::uint64_t duration = 0;
  if (CUresult r = KernelDuration(f, params, &duration); r != CUDA_SUCCESS) return r;
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(stream, &s); r != CUDA_SUCCESS) return r;
  if (s->capturing) {
    s->captured.push_back(duration);
  } else {
    EnqueueKernel(s, duration);
  }
  return CUDA_SUCCESS;
}

CUresult LaunchEx(const CUlaunchConfig* config, CUfunction f, void** params) {
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                config->blockDimY, config->blockDimZ, config->hStream, params);
}

CUresult GraphLaunch(CUgraphExec exec, CUstream stream) {
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::lock_guard lock(d.mu);
  auto it = d.execs.find(exec);
  if (it == d.execs.end()) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(stream, &s); r != CUDA_SUCCESS) return r;
  for (std::uint64_t duration : it->second->kernels) {
    if (s->capturing) {
      s->captured.push_back(duration);
    } else {
      EnqueueKernel(s, duration);
    }
  }
  return CUDA_SUCCESS;
}

CUresult EventRecord(CUevent event, CUstream stream) {
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::lock_guard lock(d.mu);
  auto it = d.events.find(event);
  if (it == d.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(stream, &s); r != CUDA_SUCCESS) return r;
  if (s->capturing) return CUDA_SUCCESS;  // a dependency inside the capture: nothing to time
  Op op;
  op.event = it->second;
  op.generation = ++it->second->generation;
  Enqueue(s, std::move(op));
  return CUDA_SUCCESS;
}

CUresult StreamSynchronize(CUstream stream) {
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::unique_lock lock(d.mu);
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(stream, &s); r != CUDA_SUCCESS) return r;
  if (s->capturing) return kStreamCaptureUnsupported;
  CUctx_st* ctx = s->ctx;
  const std::uint64_t target = s->last_seq;
  d.done.wait(lock, [ctx, target] { return ctx->completed >= target; });
  return CUDA_SUCCESS;
}

// Creates a context on `device` with its worker (caller holds D().mu).
CUresult CreateContext(int device, bool primary, CUctx_st** out) {
  Driver& d = D();
  if (CUresult r = Count(device, d.context_bytes); r != CUDA_SUCCESS) return r;
  auto ctx = std::make_unique<CUctx_st>();
  ctx->device = device;
  ctx->primary = primary;
  ctx->reserved_bytes = d.context_bytes;
  ctx->default_stream.ctx = ctx.get();
  CUctx_st* raw = ctx.get();
  ctx->worker = std::thread(WorkerLoop, raw);
  d.contexts.push_back(std::move(ctx));
  *out = raw;
  return CUDA_SUCCESS;
}

// Ends a context: its queue runs out, its worker stops, its memory is freed. Takes `lock` (on
// D().mu) released while joining the worker.
void DestroyContext(CUctx_st* ctx, std::unique_lock<std::mutex>& lock) {
  Driver& d = D();
  ctx->alive = false;
  ctx->stop = true;
  ctx->work.notify_one();
  lock.unlock();
  ctx->worker.join();
  lock.lock();
  FreeContextMemory(ctx);
  Uncount(ctx->device, ctx->reserved_bytes);
  for (auto it = d.streams.begin(); it != d.streams.end();) {
    it = it->second->ctx == ctx ? d.streams.erase(it) : std::next(it);
  }
  if (tls_depth > 0 && tls_stack[tls_depth - 1] == ctx) --tls_depth;
  d.done.notify_all();
}

bool ValidDevice(CUdevice device) {
  return device >= 0 && static_cast<std::size_t>(device) < D().devices.size();
}

CUresult PushContext(CUctx_st* ctx) {
  if (tls_depth >= kMaxContextStack) return CUDA_ERROR_UNKNOWN;
  tls_stack[tls_depth++] = ctx;
  return CUDA_SUCCESS;
}

// cuCtxCreate: a new context, made current by pushing it.
CUresult CreateAndPush(CUcontext* ctx, CUdevice device) {
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (tls_depth >= kMaxContextStack) return CUDA_ERROR_UNKNOWN;
  if (CUresult r = CreateContext(device, false, ctx); r != CUDA_SUCCESS) return r;
  return PushContext(*ctx);
}

// Bytes of one element of an array format, 0 for an unknown format.
std::uint64_t FormatBytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
  }
  return 0;
}

// Bytes of one level of an array; false when the descriptor is invalid or the size overflows.
bool ArrayBytes(std::size_t width, std::size_t height, std::size_t depth, CUarray_format format,
                unsigned int channels, std::uint64_t* bytes) {
  const std::uint64_t element = FormatBytes(format);
  if (element == 0 || width == 0) return false;
  if (channels != 1 && channels != 2 && channels != 4) return false;
  std::uint64_t total = element * channels;
  for (std::uint64_t dim : {std::uint64_t{width}, std::uint64_t{height > 0 ? height : 1},
                            std::uint64_t{depth > 0 ? depth : 1}}) {
    if (__builtin_mul_overflow(total, dim, &total)) return false;
  }
  *bytes = total;
  return true;
}

// The memory requirement of an array or mipmapped array: its bytes rounded up to 2 MiB.
std::uint64_t Requirement(std::uint64_t bytes) { return RoundUp(bytes, kArrayAlignment); }

CUresult AllocAsync(CUdeviceptr* dptr, std::size_t bytes, CUstream stream) {
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(stream, &s); r != CUDA_SUCCESS) return r;
  return AllocateLinear(s->ctx, dptr, bytes, bytes);
}

CUresult AllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool,
                            CUstream stream) {
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (dptr == nullptr || bytes == 0 || pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  bool known = false;
  for (const Device& device : d.devices) known = known || device.pool.get() == pool;
  if (!known) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(stream, &s); r != CUDA_SUCCESS) return r;
  return AllocateLinear(s->ctx, dptr, bytes, bytes);
}

CUresult FreeAsync(CUdeviceptr dptr, CUstream stream) {
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::lock_guard lock(d.mu);
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(stream, &s); r != CUDA_SUCCESS) return r;
  return FreeLinear(dptr);
}

// A device's UUID: "gslcfake" then the ordinal, big-endian, in the last four bytes.
CUuuid DeviceUuid(int device) {
  CUuuid uuid{};
  std::memcpy(uuid.bytes, "gslcfake", 8);
  const auto ordinal = static_cast<std::uint32_t>(device);
  for (int i = 0; i < 4; ++i) {
    uuid.bytes[12 + i] = static_cast<char>((ordinal >> (8 * (3 - i))) & 0xffU);
  }
  return uuid;
}

// The same UUID as NVML writes it: "GPU-" and 8-4-4-4-12 hexadecimal digits.
std::string NvmlUuid(int device) {
  const CUuuid uuid = DeviceUuid(device);
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[48];
  std::snprintf(text, sizeof text,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

// NVML's handle of a device is its Device (caller holds D().mu); the ordinal back from one, or
// -1 for a handle that is none of them.
nvml::nvmlDevice_t NvmlHandle(int device) {
  return reinterpret_cast<nvml::nvmlDevice_t>(&D().devices[static_cast<std::size_t>(device)]);
}
int NvmlOrdinal(nvml::nvmlDevice_t handle) {
  const Driver& d = D();
  for (std::size_t i = 0; i < d.devices.size(); ++i) {
    if (reinterpret_cast<const void*>(&d.devices[i]) == handle) return static_cast<int>(i);
  }
  return -1;
}

// NVML's memory figures of a device, from the same counts the driver refuses by.
nvml::nvmlReturn_t NvmlMemory(nvml::nvmlDevice_t handle, std::uint64_t* total,
                              std::uint64_t* used) {
  Driver& d = D();
  if (!d.initialized.load(std::memory_order_acquire)) return nvml::NVML_ERROR_UNINITIALIZED;
  std::lock_guard lock(d.mu);
  const int device = NvmlOrdinal(handle);
  if (device < 0) return nvml::NVML_ERROR_INVALID_ARGUMENT;
  *total = d.total_bytes;
  *used = d.devices[static_cast<std::size_t>(device)].used;
  return nvml::NVML_SUCCESS;
}

std::uint64_t ParseEnv(const char* name, std::uint64_t fallback, std::uint64_t low,
                       std::uint64_t high) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < low || value > high || text[0] == '-') {
    std::fprintf(stderr, "fake libcuda: ignoring %s=%s (expected %llu..%llu)\n", name, text,
                 static_cast<unsigned long long>(low), static_cast<unsigned long long>(high));
    return fallback;
  }
  return value;
}

}  // namespace

// --- the exported driver API ---

extern "C" {

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuInit(unsigned int flags) {
  GPUSLICE_FAKE_COUNT("cuInit");
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  if (d.initialized.load(std::memory_order_relaxed)) return CUDA_SUCCESS;
  const std::uint64_t count = ParseEnv("FAKE_CUDA_DEVICES", 1, 0, 64);
  if (count == 0) return CUDA_ERROR_NO_DEVICE;
  d.total_bytes = ParseEnv("FAKE_CUDA_TOTAL_MIB", 16384, 1, 1ULL << 24) * kMiB;
  d.context_bytes = ParseEnv("FAKE_CUDA_CONTEXT_MIB", 0, 0, d.total_bytes / kMiB) * kMiB;
  if (const char* engine = std::getenv("FAKE_CUDA_ENGINE"); engine != nullptr && *engine) {
    d.engine_fd = open(engine, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (d.engine_fd < 0) {
      std::fprintf(stderr, "fake libcuda: cannot open FAKE_CUDA_ENGINE %s: %s\n", engine,
                   std::strerror(errno));
      return CUDA_ERROR_UNKNOWN;
    }
    // The engine's timeline lives in the file's first page (zeros when new). ftruncate by several
    // processes at once to the same size is harmless.
    struct stat st {};
    void* page = MAP_FAILED;
    if (fstat(d.engine_fd, &st) == 0 &&
        (st.st_size >= kEnginePage || ftruncate(d.engine_fd, kEnginePage) == 0)) {
      page = mmap(nullptr, kEnginePage, PROT_READ | PROT_WRITE, MAP_SHARED, d.engine_fd, 0);
    }
    if (page == MAP_FAILED) {
      std::fprintf(stderr, "fake libcuda: cannot map FAKE_CUDA_ENGINE %s: %s\n", engine,
                   std::strerror(errno));
      close(d.engine_fd);
      d.engine_fd = -1;
      return CUDA_ERROR_UNKNOWN;
    }
    d.engine_free_at = static_cast<std::uint64_t*>(page);
  }
  if (const char* trace = std::getenv("FAKE_CUDA_TRACE"); trace != nullptr && *trace) {
    d.trace_fd = open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (d.trace_fd < 0) {
      std::fprintf(stderr, "fake libcuda: cannot open FAKE_CUDA_TRACE %s: %s\n", trace,
                   std::strerror(errno));
      return CUDA_ERROR_UNKNOWN;
    }
  }
  d.devices.resize(count);
  for (std::size_t i = 0; i < d.devices.size(); ++i) {
    d.devices[i].pool = std::make_unique<CUmemPoolHandle_st>();
    d.devices[i].pool->device = static_cast<int>(i);
  }
  d.initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuDriverGetVersion(int* version) {
  GPUSLICE_FAKE_COUNT("cuDriverGetVersion");
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = kDriverVersion;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  GPUSLICE_FAKE_COUNT("cuDeviceGet");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuDeviceGetCount(int* count) {
  GPUSLICE_FAKE_COUNT("cuDeviceGetCount");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(D().devices.size());
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  GPUSLICE_FAKE_COUNT("cuDeviceGetUuid");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  *uuid = DeviceUuid(device);
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice device) {
  GPUSLICE_FAKE_COUNT("cuDeviceTotalMem_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = D().total_bytes;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                                    cuuint64_t flags);
GPUSLICE_FAKE_CUDA_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn,
                                                       int cudaVersion, cuuint64_t flags,
                                                       CUdriverProcAddressQueryResult* status);

// --- contexts ---

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags,
                                                  CUdevice device) {
  GPUSLICE_FAKE_COUNT("cuCtxCreate_v2");
  static_cast<void>(flags);
  return CreateAndPush(ctx, device);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam_st* params,
                                                  int numParams, unsigned int flags,
                                                  CUdevice device) {
  GPUSLICE_FAKE_COUNT("cuCtxCreate_v3");
  static_cast<void>(params);
  static_cast<void>(numParams);
  static_cast<void>(flags);
  return CreateAndPush(ctx, device);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams_st* params,
                                                  unsigned int flags, CUdevice device) {
  GPUSLICE_FAKE_COUNT("cuCtxCreate_v4");
  static_cast<void>(params);
  static_cast<void>(flags);
  return CreateAndPush(ctx, device);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  GPUSLICE_FAKE_COUNT("cuCtxDestroy_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::unique_lock lock(d.mu);
  if (!ctx->alive) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;  // primary contexts are released instead
  DestroyContext(ctx, lock);
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  GPUSLICE_FAKE_COUNT("cuDevicePrimaryCtxRetain");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  Device& dev = d.devices[static_cast<std::size_t>(device)];
  if (dev.primary == nullptr) {
    if (CUresult r = CreateContext(device, true, &dev.primary); r != CUDA_SUCCESS) return r;
  }
  ++dev.primary->primary_refs;
  *ctx = dev.primary;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  GPUSLICE_FAKE_COUNT("cuDevicePrimaryCtxRelease_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::unique_lock lock(d.mu);
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  Device& dev = d.devices[static_cast<std::size_t>(device)];
  if (dev.primary == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  CUctx_st* ctx = dev.primary;
  if (--ctx->primary_refs == 0) {
    dev.primary = nullptr;
    DestroyContext(ctx, lock);
  }
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice device) {
  GPUSLICE_FAKE_COUNT("cuDevicePrimaryCtxReset_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::unique_lock lock(d.mu);
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  CUctx_st* ctx = d.devices[static_cast<std::size_t>(device)].primary;
  if (ctx == nullptr) return CUDA_SUCCESS;
  d.done.wait(lock, [ctx] { return ctx->completed >= ctx->enqueued; });
  FreeContextMemory(ctx);
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  GPUSLICE_FAKE_COUNT("cuCtxGetCurrent");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = CurrentOrNull();
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  GPUSLICE_FAKE_COUNT("cuCtxSetCurrent");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (ctx == nullptr) {
    if (tls_depth > 0) --tls_depth;
    return CUDA_SUCCESS;
  }
  Driver& d = D();
  std::lock_guard lock(d.mu);
  if (!ctx->alive) return CUDA_ERROR_INVALID_CONTEXT;
  if (tls_depth == 0) return PushContext(ctx);
  tls_stack[tls_depth - 1] = ctx;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  GPUSLICE_FAKE_COUNT("cuCtxGetDevice");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  CUctx_st* ctx = CurrentAlive();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  GPUSLICE_FAKE_COUNT("cuCtxPushCurrent_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard lock(D().mu);
  if (!ctx->alive) return CUDA_ERROR_INVALID_CONTEXT;
  return PushContext(ctx);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  GPUSLICE_FAKE_COUNT("cuCtxPopCurrent_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (tls_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  CUctx_st* top = tls_stack[--tls_depth];
  if (ctx != nullptr) *ctx = top;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuCtxSynchronize(void) {
  GPUSLICE_FAKE_COUNT("cuCtxSynchronize");
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::unique_lock lock(d.mu);
  CUctx_st* ctx = CurrentAlive();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const std::uint64_t target = ctx->enqueued;
  d.done.wait(lock, [ctx, target] { return ctx->completed >= target; });
  return CUDA_SUCCESS;
}

// --- device memory ---

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemGetInfo_v2(std::size_t* free, std::size_t* total) {
  GPUSLICE_FAKE_COUNT("cuMemGetInfo_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  CUctx_st* ctx = CurrentAlive();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const Device& dev = d.devices[static_cast<std::size_t>(ctx->device)];
  *free = d.total_bytes - dev.used;
  *total = d.total_bytes;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes) {
  GPUSLICE_FAKE_COUNT("cuMemAlloc_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  CUctx_st* ctx = CurrentAlive();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return AllocateLinear(ctx, dptr, bytes, bytes);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, std::size_t* pitch,
                                                      std::size_t widthInBytes, std::size_t height,
                                                      unsigned int elementSizeBytes) {
  GPUSLICE_FAKE_COUNT("cuMemAllocPitch_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (dptr == nullptr || pitch == nullptr || widthInBytes == 0 || height == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (elementSizeBytes != 4 && elementSizeBytes != 8 && elementSizeBytes != 16) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const std::uint64_t row = RoundUp(widthInBytes, kPitchAlignment);
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(row, std::uint64_t{height}, &bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  CUctx_st* ctx = CurrentAlive();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult r = AllocateLinear(ctx, dptr, bytes, bytes); r != CUDA_SUCCESS) return r;
  *pitch = row;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, std::size_t bytes,
                                                     unsigned int flags) {
  GPUSLICE_FAKE_COUNT("cuMemAllocManaged");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != 2 /* CU_MEM_ATTACH_HOST */) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(D().mu);
  CUctx_st* ctx = CurrentAlive();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return AllocateLinear(ctx, dptr, bytes, bytes);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  GPUSLICE_FAKE_COUNT("cuMemFree_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  std::lock_guard lock(D().mu);
  return FreeLinear(dptr);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytes,
                                                   CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuMemAllocAsync");
  return AllocAsync(dptr, bytes, stream);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes,
                                                        CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuMemAllocAsync_ptsz");
  return AllocAsync(dptr, bytes, stream);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytes,
                                                           CUmemoryPool pool, CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuMemAllocFromPoolAsync");
  return AllocFromPoolAsync(dptr, bytes, pool, stream);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr,
                                                                std::size_t bytes,
                                                                CUmemoryPool pool,
                                                                CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuMemAllocFromPoolAsync_ptsz");
  return AllocFromPoolAsync(dptr, bytes, pool, stream);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuMemFreeAsync");
  return FreeAsync(dptr, stream);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuMemFreeAsync_ptsz");
  return FreeAsync(dptr, stream);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice device) {
  GPUSLICE_FAKE_COUNT("cuDeviceGetDefaultMemPool");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = D().devices[static_cast<std::size_t>(device)].pool.get();
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuArrayCreate_v2(CUarray* array,
                                                    const CUDA_ARRAY_DESCRIPTOR* desc) {
  GPUSLICE_FAKE_COUNT("cuArrayCreate_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (array == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t bytes = 0;
  if (!ArrayBytes(desc->Width, desc->Height, 0, desc->Format, desc->NumChannels, &bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& d = D();
  std::lock_guard lock(d.mu);
  CUctx_st* ctx = CurrentAlive();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const std::uint64_t counted = Requirement(bytes);
  if (CUresult r = Count(ctx->device, counted); r != CUDA_SUCCESS) return r;
  auto created = std::make_unique<CUarray_st>();
  created->ctx = ctx;
  created->bytes = counted;
  *array = created.get();
  d.arrays.emplace(created.get(), std::move(created));
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuArray3DCreate_v2(CUarray* array,
                                                      const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  GPUSLICE_FAKE_COUNT("cuArray3DCreate_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (array == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t bytes = 0;
  if (!ArrayBytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels,
                  &bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& d = D();
  std::lock_guard lock(d.mu);
  CUctx_st* ctx = CurrentAlive();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const std::uint64_t counted = Requirement(bytes);
  if (CUresult r = Count(ctx->device, counted); r != CUDA_SUCCESS) return r;
  auto created = std::make_unique<CUarray_st>();
  created->ctx = ctx;
  created->bytes = counted;
  *array = created.get();
  d.arrays.emplace(created.get(), std::move(created));
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuArrayDestroy(CUarray array) {
  GPUSLICE_FAKE_COUNT("cuArrayDestroy");
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::lock_guard lock(d.mu);
  auto it = d.arrays.find(array);
  if (it == d.arrays.end()) return CUDA_ERROR_INVALID_HANDLE;
  Uncount(it->second->ctx->device, it->second->bytes);
  d.arrays.erase(it);
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req,
                                                                CUarray array, CUdevice device) {
  GPUSLICE_FAKE_COUNT("cuArrayGetMemoryRequirements");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (req == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  auto it = d.arrays.find(array);
  if (it == d.arrays.end()) return CUDA_ERROR_INVALID_HANDLE;
  *req = CUDA_ARRAY_MEMORY_REQUIREMENTS{};
  req->size = it->second->bytes;
  req->alignment = kArrayAlignment;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* array,
                                                          const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                                          unsigned int numLevels) {
  GPUSLICE_FAKE_COUNT("cuMipmappedArrayCreate");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (array == nullptr || desc == nullptr || numLevels == 0) return CUDA_ERROR_INVALID_VALUE;
  std::size_t largest = desc->Width;
  if (desc->Height > largest) largest = desc->Height;
  if (desc->Depth > largest) largest = desc->Depth;
  unsigned int max_levels = 0;
  for (std::size_t dim = largest; dim > 0; dim >>= 1) ++max_levels;
  if (numLevels > max_levels) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t total = 0;
  for (unsigned int level = 0; level < numLevels; ++level) {
    auto halve = [level](std::size_t dim) -> std::size_t {
      const std::size_t halved = dim >> level;
      return halved > 0 ? halved : 1;
    };
    std::uint64_t bytes = 0;
    if (!ArrayBytes(halve(desc->Width), halve(desc->Height), halve(desc->Depth), desc->Format,
                    desc->NumChannels, &bytes) ||
        __builtin_add_overflow(total, bytes, &total)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  Driver& d = D();
  std::lock_guard lock(d.mu);
  CUctx_st* ctx = CurrentAlive();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const std::uint64_t counted = Requirement(total);
  if (CUresult r = Count(ctx->device, counted); r != CUDA_SUCCESS) return r;
  auto created = std::make_unique<CUmipmappedArray_st>();
  created->ctx = ctx;
  created->bytes = counted;
  *array = created.get();
  d.mipmaps.emplace(created.get(), std::move(created));
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray array) {
  GPUSLICE_FAKE_COUNT("cuMipmappedArrayDestroy");
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::lock_guard lock(d.mu);
  auto it = d.mipmaps.find(array);
  if (it == d.mipmaps.end()) return CUDA_ERROR_INVALID_HANDLE;
  Uncount(it->second->ctx->device, it->second->bytes);
  d.mipmaps.erase(it);
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMipmappedArrayGetMemoryRequirements(
    CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUmipmappedArray array, CUdevice device) {
  GPUSLICE_FAKE_COUNT("cuMipmappedArrayGetMemoryRequirements");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (req == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  auto it = d.mipmaps.find(array);
  if (it == d.mipmaps.end()) return CUDA_ERROR_INVALID_HANDLE;
  *req = CUDA_ARRAY_MEMORY_REQUIREMENTS{};
  req->size = it->second->bytes;
  req->alignment = kArrayAlignment;
  return CUDA_SUCCESS;
}

// --- virtual memory management ---

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle,
                                               std::size_t size, const CUmemAllocationProp* prop,
                                               unsigned long long flags) {
  GPUSLICE_FAKE_COUNT("cuMemCreate");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (handle == nullptr || prop == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0 || size % kVmmGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != 1 || prop->location.type != 1) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  if (!ValidDevice(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  if (CUresult r = Count(prop->location.id, size); r != CUDA_SUCCESS) return r;
  const CUmemGenericAllocationHandle id = d.next_vmm++;
  d.vmm[id] = VmmHandle{prop->location.id, size};
  *handle = id;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  GPUSLICE_FAKE_COUNT("cuMemRelease");
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::lock_guard lock(d.mu);
  auto it = d.vmm.find(handle);
  if (it == d.vmm.end()) return CUDA_ERROR_INVALID_VALUE;
  Uncount(it->second.device, it->second.bytes);
  d.vmm.erase(it);
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, std::size_t size,
                                                       std::size_t alignment, CUdeviceptr addr,
                                                       unsigned long long flags) {
  GPUSLICE_FAKE_COUNT("cuMemAddressReserve");
  GPUSLICE_FAKE_REQUIRE_INIT();
  static_cast<void>(addr);  // a hint
  if (ptr == nullptr || flags != 0 || size == 0 || size % kVmmGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t align = alignment > kVmmGranularity ? alignment : kVmmGranularity;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  void* raw = MapAddressSpace(size + align);
  if (raw == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto base = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t start = RoundUp(base, align);
  if (start > base) munmap(raw, start - base);
  const std::uintptr_t tail = base + size + align - (start + size);
  if (tail > 0) munmap(reinterpret_cast<void*>(start + size), tail);
  d.reservations[start] = size;
  *ptr = start;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, std::size_t size) {
  GPUSLICE_FAKE_COUNT("cuMemAddressFree");
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::lock_guard lock(d.mu);
  auto it = d.reservations.find(ptr);
  if (it == d.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  for (auto m = d.mappings.lower_bound(ptr); m != d.mappings.end() && m->first < ptr + size;) {
    m = d.mappings.erase(m);
  }
  munmap(reinterpret_cast<void*>(ptr), size);
  d.reservations.erase(it);
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemMap(CUdeviceptr ptr, std::size_t size, std::size_t offset,
                                            CUmemGenericAllocationHandle handle,
                                            unsigned long long flags) {
  GPUSLICE_FAKE_COUNT("cuMemMap");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (flags != 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  auto h = d.vmm.find(handle);
  if (h == d.vmm.end() || offset > h->second.bytes || size > h->second.bytes - offset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // [ptr, ptr + size) lies in one reservation and overlaps no mapping.
  auto r = d.reservations.upper_bound(ptr);
  if (r == d.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (ptr + size > r->first + r->second) return CUDA_ERROR_INVALID_VALUE;
  auto next = d.mappings.lower_bound(ptr);
  if (next != d.mappings.end() && next->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  if (next != d.mappings.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second.size > ptr) return CUDA_ERROR_INVALID_VALUE;
  }
  d.mappings[ptr] = Mapping{size, handle};
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, std::size_t size) {
  GPUSLICE_FAKE_COUNT("cuMemUnmap");
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::lock_guard lock(d.mu);
  bool any = false;
  for (auto m = d.mappings.lower_bound(ptr); m != d.mappings.end() && m->first < ptr + size;) {
    m = d.mappings.erase(m);
    any = true;
  }
  return any ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// --- copies (host memory on both sides) ---

namespace {

bool DeviceRange(CUdeviceptr ptr, std::size_t bytes) {
  Driver& d = D();
  auto it = d.allocations.upper_bound(ptr);
  if (it != d.allocations.begin()) {
    --it;
    if (ptr + bytes <= it->first + it->second.mapped) return true;
  }
  auto m = d.mappings.upper_bound(ptr);
  if (m != d.mappings.begin()) {
    --m;
    if (ptr + bytes <= m->first + m->second.size) return true;
  }
  return false;
}

}  // namespace

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src,
                                                   std::size_t bytes) {
  GPUSLICE_FAKE_COUNT("cuMemcpyHtoD_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  if (!DeviceRange(dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, std::size_t bytes) {
  GPUSLICE_FAKE_COUNT("cuMemcpyDtoH_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  if (!DeviceRange(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

// --- modules and launches ---

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  GPUSLICE_FAKE_COUNT("cuModuleLoadData");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  if (CurrentAlive() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto created = std::make_unique<CUmod_st>();
  created->sleep.kind = CUfunc_st::Kind::kSleep;
  created->work.kind = CUfunc_st::Kind::kWork;
  created->noop.kind = CUfunc_st::Kind::kNoop;
  for (CUfunc_st* f : {&created->sleep, &created->work, &created->noop}) {
    f->module = created.get();
    d.functions[f] = created.get();
  }
  *module = created.get();
  d.modules.emplace(created.get(), std::move(created));
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuModuleGetFunction(CUfunction* function, CUmodule module,
                                                       const char* name) {
  GPUSLICE_FAKE_COUNT("cuModuleGetFunction");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (function == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  auto it = d.modules.find(module);
  if (it == d.modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  const std::string_view wanted(name);
  if (wanted == "gpuslice_sleep") {
    *function = &it->second->sleep;
  } else if (wanted == "gpuslice_work") {
    *function = &it->second->work;
  } else if (wanted == "gpuslice_noop") {
    *function = &it->second->noop;
  } else {
    return CUDA_ERROR_NOT_FOUND;
  }
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuModuleUnload(CUmodule module) {
  GPUSLICE_FAKE_COUNT("cuModuleUnload");
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::lock_guard lock(d.mu);
  auto it = d.modules.find(module);
  if (it == d.modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (CUfunc_st* f : {&it->second->sleep, &it->second->work, &it->second->noop}) {
    d.functions.erase(f);
  }
  d.modules.erase(it);
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX,
                                                  unsigned int gridDimY, unsigned int gridDimZ,
                                                  unsigned int blockDimX, unsigned int blockDimY,
                                                  unsigned int blockDimZ,
                                                  unsigned int sharedMemBytes, CUstream stream,
                                                  void** kernelParams, void** extra) {
  GPUSLICE_FAKE_COUNT("cuLaunchKernel");
  static_cast<void>(sharedMemBytes);
  static_cast<void>(extra);
  return Launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, stream,
                kernelParams);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuLaunchKernel_ptsz(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
    unsigned int sharedMemBytes, CUstream stream, void** kernelParams, void** extra) {
  GPUSLICE_FAKE_COUNT("cuLaunchKernel_ptsz");
  static_cast<void>(sharedMemBytes);
  static_cast<void>(extra);
  return Launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, stream,
                kernelParams);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f,
                                                    void** kernelParams, void** extra) {
  GPUSLICE_FAKE_COUNT("cuLaunchKernelEx");
  static_cast<void>(extra);
  return LaunchEx(config, f, kernelParams);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                                         void** kernelParams, void** extra) {
  GPUSLICE_FAKE_COUNT("cuLaunchKernelEx_ptsz");
  static_cast<void>(extra);
  return LaunchEx(config, f, kernelParams);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuLaunchCooperativeKernel(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
    unsigned int sharedMemBytes, CUstream stream, void** kernelParams) {
  GPUSLICE_FAKE_COUNT("cuLaunchCooperativeKernel");
  static_cast<void>(sharedMemBytes);
  return Launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, stream,
                kernelParams);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
    unsigned int sharedMemBytes, CUstream stream, void** kernelParams) {
  GPUSLICE_FAKE_COUNT("cuLaunchCooperativeKernel_ptsz");
  static_cast<void>(sharedMemBytes);
  return Launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, stream,
                kernelParams);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(
    CUDA_LAUNCH_PARAMS* launchParamsList, unsigned int numDevices, unsigned int flags) {
  GPUSLICE_FAKE_COUNT("cuLaunchCooperativeKernelMultiDevice");
  GPUSLICE_FAKE_REQUIRE_INIT();
  static_cast<void>(flags);
  if (launchParamsList == nullptr || numDevices == 0) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned int i = 0; i < numDevices; ++i) {
    const CUDA_LAUNCH_PARAMS& p = launchParamsList[i];
    if (CUresult r = Launch(p.function, p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX,
                            p.blockDimY, p.blockDimZ, p.hStream, p.kernelParams);
        r != CUDA_SUCCESS) {
      return r;
    }
  }
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuLaunch(CUfunction f) {
  GPUSLICE_FAKE_COUNT("cuLaunch");
  GPUSLICE_FAKE_REQUIRE_INIT();
  std::lock_guard lock(D().mu);
  if (f == nullptr || D().functions.find(f) == D().functions.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(nullptr, &s); r != CUDA_SUCCESS) return r;
  EnqueueKernel(s, 0);
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuLaunchGrid(CUfunction f, int gridWidth, int gridHeight) {
  GPUSLICE_FAKE_COUNT("cuLaunchGrid");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (gridWidth <= 0 || gridHeight <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  if (f == nullptr || D().functions.find(f) == D().functions.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(nullptr, &s); r != CUDA_SUCCESS) return r;
  EnqueueKernel(s, 0);
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int gridWidth, int gridHeight,
                                                     CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuLaunchGridAsync");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (gridWidth <= 0 || gridHeight <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  if (f == nullptr || D().functions.find(f) == D().functions.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(stream, &s); r != CUDA_SUCCESS) return r;
  if (s->capturing) {
    s->captured.push_back(0);
  } else {
    EnqueueKernel(s, 0);
  }
  return CUDA_SUCCESS;
}

// --- stream capture and graphs ---

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuStreamBeginCapture_v2(CUstream stream, int mode) {
  GPUSLICE_FAKE_COUNT("cuStreamBeginCapture_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (mode < 0 || mode > 2) return CUDA_ERROR_INVALID_VALUE;
  if (reinterpret_cast<std::uintptr_t>(stream) <= 2) return kStreamCaptureUnsupported;
  std::lock_guard lock(D().mu);
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(stream, &s); r != CUDA_SUCCESS) return r;
  if (s->capturing) return kIllegalState;
  s->capturing = true;
  s->captured.clear();
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  GPUSLICE_FAKE_COUNT("cuStreamEndCapture");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(stream, &s); r != CUDA_SUCCESS) return r;
  if (!s->capturing) return kIllegalState;
  s->capturing = false;
  auto created = std::make_unique<CUgraph_st>();
  created->kernels = std::move(s->captured);
  s->captured.clear();
  *graph = created.get();
  d.graphs.emplace(created.get(), std::move(created));
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuStreamIsCapturing(CUstream stream, int* captureStatus) {
  GPUSLICE_FAKE_COUNT("cuStreamIsCapturing");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (captureStatus == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(stream, &s); r != CUDA_SUCCESS) return r;
  *captureStatus = s->capturing ? 1 : 0;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                                               unsigned long long flags) {
  GPUSLICE_FAKE_COUNT("cuGraphInstantiateWithFlags");
  GPUSLICE_FAKE_REQUIRE_INIT();
  static_cast<void>(flags);
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  auto it = d.graphs.find(graph);
  if (it == d.graphs.end()) return CUDA_ERROR_INVALID_HANDLE;
  auto created = std::make_unique<CUgraphExec_st>();
  created->kernels = it->second->kernels;
  *exec = created.get();
  d.execs.emplace(created.get(), std::move(created));
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  GPUSLICE_FAKE_COUNT("cuGraphDestroy");
  GPUSLICE_FAKE_REQUIRE_INIT();
  std::lock_guard lock(D().mu);
  return D().graphs.erase(graph) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
  GPUSLICE_FAKE_COUNT("cuGraphExecDestroy");
  GPUSLICE_FAKE_REQUIRE_INIT();
  std::lock_guard lock(D().mu);
  return D().execs.erase(exec) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuGraphLaunch(CUgraphExec graph, CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuGraphLaunch");
  return GraphLaunch(graph, stream);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec graph, CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuGraphLaunch_ptsz");
  return GraphLaunch(graph, stream);
}

// --- streams and events ---

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  GPUSLICE_FAKE_COUNT("cuStreamCreate");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (stream == nullptr || flags > 1) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  CUctx_st* ctx = CurrentAlive();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto created = std::make_unique<CUstream_st>();
  created->ctx = ctx;
  *stream = created.get();
  d.streams.emplace(created.get(), std::move(created));
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuStreamDestroy_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  std::lock_guard lock(D().mu);
  // Work already enqueued still runs: operations do not refer to their stream.
  return D().streams.erase(stream) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuStreamSynchronize");
  return StreamSynchronize(stream);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuStreamSynchronize_ptsz");
  return StreamSynchronize(stream);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuStreamGetCtx(CUstream stream, CUcontext* ctx) {
  GPUSLICE_FAKE_COUNT("cuStreamGetCtx");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  CUstream_st* s = nullptr;
  if (CUresult r = ResolveStream(stream, &s); r != CUDA_SUCCESS) return r;
  *ctx = s->ctx;
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  GPUSLICE_FAKE_COUNT("cuEventCreate");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (event == nullptr || flags > 7) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  if (CurrentAlive() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto created = std::make_shared<CUevent_st>();
  created->flags = flags;
  *event = created.get();
  d.events.emplace(created.get(), std::move(created));
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuEventDestroy_v2(CUevent event) {
  GPUSLICE_FAKE_COUNT("cuEventDestroy_v2");
  GPUSLICE_FAKE_REQUIRE_INIT();
  std::lock_guard lock(D().mu);
  // A record still queued keeps the event's state alive until the worker reaches it.
  return D().events.erase(event) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuEventRecord(CUevent event, CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuEventRecord");
  return EventRecord(event, stream);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuEventRecord_ptsz(CUevent event, CUstream stream) {
  GPUSLICE_FAKE_COUNT("cuEventRecord_ptsz");
  return EventRecord(event, stream);
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuEventQuery(CUevent event) {
  GPUSLICE_FAKE_COUNT("cuEventQuery");
  GPUSLICE_FAKE_REQUIRE_INIT();
  std::lock_guard lock(D().mu);
  auto it = D().events.find(event);
  if (it == D().events.end()) return CUDA_ERROR_INVALID_HANDLE;
  return it->second->reached >= it->second->generation ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuEventSynchronize(CUevent event) {
  GPUSLICE_FAKE_COUNT("cuEventSynchronize");
  GPUSLICE_FAKE_REQUIRE_INIT();
  Driver& d = D();
  std::unique_lock lock(d.mu);
  auto it = d.events.find(event);
  if (it == d.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<CUevent_st> state = it->second;
  const std::uint64_t target = state->generation;
  d.done.wait(lock, [&state, target] { return state->reached >= target; });
  return CUDA_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuEventElapsedTime(float* milliseconds, CUevent start,
                                                      CUevent end) {
  GPUSLICE_FAKE_COUNT("cuEventElapsedTime");
  GPUSLICE_FAKE_REQUIRE_INIT();
  if (milliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = D();
  std::lock_guard lock(d.mu);
  auto a = d.events.find(start);
  auto b = d.events.find(end);
  if (a == d.events.end() || b == d.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  const CUevent_st& first = *a->second;
  const CUevent_st& second = *b->second;
  if ((first.flags & CU_EVENT_DISABLE_TIMING) != 0 ||
      (second.flags & CU_EVENT_DISABLE_TIMING) != 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (first.generation == 0 || second.generation == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (first.reached < first.generation || second.reached < second.generation) {
    return CUDA_ERROR_NOT_READY;
  }
  const double ns = static_cast<double>(second.time_ns) - static_cast<double>(first.time_ns);
  *milliseconds = static_cast<float>(ns / 1e6);
  return CUDA_SUCCESS;
}

// --- test hooks ---

GPUSLICE_FAKE_CUDA_EXPORT unsigned long long gpusliceFakeCudaPeakBytes(int device) {
  Driver& d = D();
  if (!d.initialized.load(std::memory_order_acquire)) return 0;
  std::lock_guard lock(d.mu);
  if (!ValidDevice(device)) return 0;
  return d.devices[static_cast<std::size_t>(device)].peak;
}

GPUSLICE_FAKE_CUDA_EXPORT unsigned long long gpusliceFakeCudaUsedBytes(int device) {
  Driver& d = D();
  if (!d.initialized.load(std::memory_order_acquire)) return 0;
  std::lock_guard lock(d.mu);
  if (!ValidDevice(device)) return 0;
  return d.devices[static_cast<std::size_t>(device)].used;
}

// How many times the exported function `name` (its exported name, e.g. "cuMemAllocAsync_ptsz")
// was called in this process.
GPUSLICE_FAKE_CUDA_EXPORT unsigned long long gpusliceFakeCudaCalls(const char* name) {
  if (name == nullptr) return 0;
  return CallCounter(name).load(std::memory_order_relaxed);
}

// --- NVML: what the interposer calls to measure a context (and answers for the slice) ---

GPUSLICE_FAKE_CUDA_EXPORT nvml::nvmlReturn_t nvmlInit_v2(void) {
  GPUSLICE_FAKE_COUNT("nvmlInit_v2");
  return nvml::NVML_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT nvml::nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid,
                                                                       nvml::nvmlDevice_t* device) {
  GPUSLICE_FAKE_COUNT("nvmlDeviceGetHandleByUUID");
  if (uuid == nullptr || device == nullptr) return nvml::NVML_ERROR_INVALID_ARGUMENT;
  Driver& d = D();
  if (!d.initialized.load(std::memory_order_acquire)) return nvml::NVML_ERROR_UNINITIALIZED;
  std::lock_guard lock(d.mu);
  for (std::size_t i = 0; i < d.devices.size(); ++i) {
    if (NvmlUuid(static_cast<int>(i)) == uuid) {
      *device = NvmlHandle(static_cast<int>(i));
      return nvml::NVML_SUCCESS;
    }
  }
  return nvml::NVML_ERROR_NOT_FOUND;
}

GPUSLICE_FAKE_CUDA_EXPORT nvml::nvmlReturn_t nvmlDeviceGetUUID(nvml::nvmlDevice_t device,
                                                               char* uuid, unsigned int length) {
  GPUSLICE_FAKE_COUNT("nvmlDeviceGetUUID");
  if (uuid == nullptr) return nvml::NVML_ERROR_INVALID_ARGUMENT;
  Driver& d = D();
  if (!d.initialized.load(std::memory_order_acquire)) return nvml::NVML_ERROR_UNINITIALIZED;
  std::lock_guard lock(d.mu);
  const int ordinal = NvmlOrdinal(device);
  if (ordinal < 0) return nvml::NVML_ERROR_INVALID_ARGUMENT;
  const std::string text = NvmlUuid(ordinal);
  if (length < text.size() + 1) return nvml::NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(uuid, text.c_str(), text.size() + 1);
  return nvml::NVML_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT nvml::nvmlReturn_t nvmlDeviceGetMemoryInfo(nvml::nvmlDevice_t device,
                                                                     nvml::nvmlMemory_t* memory) {
  GPUSLICE_FAKE_COUNT("nvmlDeviceGetMemoryInfo");
  if (memory == nullptr) return nvml::NVML_ERROR_INVALID_ARGUMENT;
  std::uint64_t total = 0;
  std::uint64_t used = 0;
  if (nvml::nvmlReturn_t r = NvmlMemory(device, &total, &used); r != nvml::NVML_SUCCESS) return r;
  memory->total = total;
  memory->used = used;
  memory->free = total - used;
  return nvml::NVML_SUCCESS;
}

GPUSLICE_FAKE_CUDA_EXPORT nvml::nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(
    nvml::nvmlDevice_t device, nvml::nvmlMemory_v2_t* memory) {
  GPUSLICE_FAKE_COUNT("nvmlDeviceGetMemoryInfo_v2");
  if (memory == nullptr) return nvml::NVML_ERROR_INVALID_ARGUMENT;
  std::uint64_t total = 0;
  std::uint64_t used = 0;
  if (nvml::nvmlReturn_t r = NvmlMemory(device, &total, &used); r != nvml::NVML_SUCCESS) return r;
  memory->total = total;
  memory->reserved = 0;
  memory->used = used;
  memory->free = total - used;
  return nvml::NVML_SUCCESS;
}

}  // extern "C"

// --- cuGetProcAddress ---

namespace {

struct Variant {
  int from;  // the first CUDA version (1000*major + 10*minor) this variant answers
  void* fn;
};

struct Proc {
  std::string_view name;
  std::vector<Variant> variants;  // ascending `from`
  void* ptsz = nullptr;           // the per-thread default stream variant, if any
};

template <typename F>
void* Fn(F f) {
  return reinterpret_cast<void*>(f);
}

const std::vector<Proc>& ProcTable() {
  static const std::vector<Proc>* table = new std::vector<Proc>{
      {"cuInit", {{0, Fn(&cuInit)}}},
      {"cuDriverGetVersion", {{0, Fn(&cuDriverGetVersion)}}},
      {"cuDeviceGet", {{0, Fn(&cuDeviceGet)}}},
      {"cuDeviceGetCount", {{0, Fn(&cuDeviceGetCount)}}},
      {"cuDeviceGetUuid", {{0, Fn(&cuDeviceGetUuid)}}},
      {"cuDeviceTotalMem", {{3020, Fn(&cuDeviceTotalMem_v2)}}},
      {"cuDeviceGetDefaultMemPool", {{0, Fn(&cuDeviceGetDefaultMemPool)}}},
      {"cuGetProcAddress", {{0, Fn(&cuGetProcAddress)}, {12000, Fn(&cuGetProcAddress_v2)}}},
      {"cuCtxCreate",
       {{3020, Fn(&cuCtxCreate_v2)}, {11040, Fn(&cuCtxCreate_v3)}, {12050, Fn(&cuCtxCreate_v4)}}},
      {"cuCtxDestroy", {{4000, Fn(&cuCtxDestroy_v2)}}},
      {"cuDevicePrimaryCtxRetain", {{0, Fn(&cuDevicePrimaryCtxRetain)}}},
      {"cuDevicePrimaryCtxRelease", {{11000, Fn(&cuDevicePrimaryCtxRelease_v2)}}},
      {"cuDevicePrimaryCtxReset", {{11000, Fn(&cuDevicePrimaryCtxReset_v2)}}},
      {"cuCtxGetCurrent", {{0, Fn(&cuCtxGetCurrent)}}},
      {"cuCtxSetCurrent", {{0, Fn(&cuCtxSetCurrent)}}},
      {"cuCtxGetDevice", {{0, Fn(&cuCtxGetDevice)}}},
      {"cuCtxPushCurrent", {{4000, Fn(&cuCtxPushCurrent_v2)}}},
      {"cuCtxPopCurrent", {{4000, Fn(&cuCtxPopCurrent_v2)}}},
      {"cuCtxSynchronize", {{0, Fn(&cuCtxSynchronize)}}},
      {"cuMemGetInfo", {{3020, Fn(&cuMemGetInfo_v2)}}},
      {"cuMemAlloc", {{3020, Fn(&cuMemAlloc_v2)}}},
      {"cuMemAllocPitch", {{3020, Fn(&cuMemAllocPitch_v2)}}},
      {"cuMemAllocManaged", {{0, Fn(&cuMemAllocManaged)}}},
      {"cuMemFree", {{3020, Fn(&cuMemFree_v2)}}},
      {"cuMemAllocAsync", {{0, Fn(&cuMemAllocAsync)}}, Fn(&cuMemAllocAsync_ptsz)},
      {"cuMemAllocFromPoolAsync",
       {{0, Fn(&cuMemAllocFromPoolAsync)}},
       Fn(&cuMemAllocFromPoolAsync_ptsz)},
      {"cuMemFreeAsync", {{0, Fn(&cuMemFreeAsync)}}, Fn(&cuMemFreeAsync_ptsz)},
      {"cuArrayCreate", {{3020, Fn(&cuArrayCreate_v2)}}},
      {"cuArray3DCreate", {{3020, Fn(&cuArray3DCreate_v2)}}},
      {"cuArrayDestroy", {{0, Fn(&cuArrayDestroy)}}},
      {"cuArrayGetMemoryRequirements", {{0, Fn(&cuArrayGetMemoryRequirements)}}},
      {"cuMipmappedArrayCreate", {{0, Fn(&cuMipmappedArrayCreate)}}},
      {"cuMipmappedArrayDestroy", {{0, Fn(&cuMipmappedArrayDestroy)}}},
      {"cuMipmappedArrayGetMemoryRequirements", {{0, Fn(&cuMipmappedArrayGetMemoryRequirements)}}},
      {"cuMemCreate", {{0, Fn(&cuMemCreate)}}},
      {"cuMemRelease", {{0, Fn(&cuMemRelease)}}},
      {"cuMemMap", {{0, Fn(&cuMemMap)}}},
      {"cuMemUnmap", {{0, Fn(&cuMemUnmap)}}},
      {"cuMemAddressReserve", {{0, Fn(&cuMemAddressReserve)}}},
      {"cuMemAddressFree", {{0, Fn(&cuMemAddressFree)}}},
      {"cuMemcpyHtoD", {{3020, Fn(&cuMemcpyHtoD_v2)}}},
      {"cuMemcpyDtoH", {{3020, Fn(&cuMemcpyDtoH_v2)}}},
      {"cuModuleLoadData", {{0, Fn(&cuModuleLoadData)}}},
      {"cuModuleGetFunction", {{0, Fn(&cuModuleGetFunction)}}},
      {"cuModuleUnload", {{0, Fn(&cuModuleUnload)}}},
      {"cuLaunchKernel", {{0, Fn(&cuLaunchKernel)}}, Fn(&cuLaunchKernel_ptsz)},
      {"cuLaunchKernelEx", {{0, Fn(&cuLaunchKernelEx)}}, Fn(&cuLaunchKernelEx_ptsz)},
      {"cuLaunchCooperativeKernel",
       {{0, Fn(&cuLaunchCooperativeKernel)}},
       Fn(&cuLaunchCooperativeKernel_ptsz)},
      {"cuLaunchCooperativeKernelMultiDevice", {{0, Fn(&cuLaunchCooperativeKernelMultiDevice)}}},
      {"cuGraphLaunch", {{0, Fn(&cuGraphLaunch)}}, Fn(&cuGraphLaunch_ptsz)},
      {"cuLaunch", {{0, Fn(&cuLaunch)}}},
      {"cuLaunchGrid", {{0, Fn(&cuLaunchGrid)}}},
      {"cuLaunchGridAsync", {{0, Fn(&cuLaunchGridAsync)}}},
      {"cuStreamBeginCapture", {{10010, Fn(&cuStreamBeginCapture_v2)}}},
      {"cuStreamEndCapture", {{0, Fn(&cuStreamEndCapture)}}},
      {"cuStreamIsCapturing", {{0, Fn(&cuStreamIsCapturing)}}},
      {"cuGraphInstantiateWithFlags", {{0, Fn(&cuGraphInstantiateWithFlags)}}},
      {"cuGraphDestroy", {{0, Fn(&cuGraphDestroy)}}},
      {"cuGraphExecDestroy", {{0, Fn(&cuGraphExecDestroy)}}},
      {"cuStreamCreate", {{0, Fn(&cuStreamCreate)}}},
      {"cuStreamDestroy", {{4000, Fn(&cuStreamDestroy_v2)}}},
      {"cuStreamSynchronize", {{0, Fn(&cuStreamSynchronize)}}, Fn(&cuStreamSynchronize_ptsz)},
      {"cuStreamGetCtx", {{0, Fn(&cuStreamGetCtx)}}},
      {"cuEventCreate", {{0, Fn(&cuEventCreate)}}},
      {"cuEventDestroy", {{4000, Fn(&cuEventDestroy_v2)}}},
      {"cuEventRecord", {{0, Fn(&cuEventRecord)}}, Fn(&cuEventRecord_ptsz)},
      {"cuEventQuery", {{0, Fn(&cuEventQuery)}}},
      {"cuEventSynchronize", {{0, Fn(&cuEventSynchronize)}}},
      {"cuEventElapsedTime", {{0, Fn(&cuEventElapsedTime)}}},
  };
  return *table;
}

// 0 = found, 1 = no such symbol, 2 = the symbol exists only for newer versions.
CUdriverProcAddressQueryResult Lookup(const char* symbol, int version, cuuint64_t flags,
                                      void** pfn) {
  *pfn = nullptr;
  const std::string_view wanted(symbol);
  for (const Proc& proc : ProcTable()) {
    if (proc.name != wanted) continue;
    const Variant* chosen = nullptr;
    for (const Variant& variant : proc.variants) {
      if (variant.from <= version) chosen = &variant;
    }
    if (chosen == nullptr) return 2;
    *pfn = chosen->fn;
    if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 && proc.ptsz != nullptr) {
      *pfn = proc.ptsz;
    }
    return 0;
  }
  return 1;
}

}  // namespace

extern "C" {

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                                    cuuint64_t flags) {
  GPUSLICE_FAKE_COUNT("cuGetProcAddress");
  if (symbol == nullptr || pfn == nullptr || flags > 2) return CUDA_ERROR_INVALID_VALUE;
  return Lookup(symbol, cudaVersion, flags, pfn) == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

GPUSLICE_FAKE_CUDA_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn,
                                                       int cudaVersion, cuuint64_t flags,
                                                       CUdriverProcAddressQueryResult* status) {
  GPUSLICE_FAKE_COUNT("cuGetProcAddress_v2");
  if (symbol == nullptr || pfn == nullptr || flags > 2) return CUDA_ERROR_INVALID_VALUE;
  const CUdriverProcAddressQueryResult result = Lookup(symbol, cudaVersion, flags, pfn);
  if (status != nullptr) *status = result;
  return result == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"

// Every definition has the type cuda_api.h declares for it.
#define GPUSLICE_FAKE_CHECK(name, type) \
  static_assert(std::is_same_v<decltype(&name), type>, #name " does not match " #type)
GPUSLICE_FAKE_CHECK(cuInit, cuInit_t);
GPUSLICE_FAKE_CHECK(cuDriverGetVersion, cuDriverGetVersion_t);
GPUSLICE_FAKE_CHECK(cuDeviceGet, cuDeviceGet_t);
GPUSLICE_FAKE_CHECK(cuDeviceGetCount, cuDeviceGetCount_t);
GPUSLICE_FAKE_CHECK(cuDeviceGetUuid, cuDeviceGetUuid_t);
GPUSLICE_FAKE_CHECK(cuDeviceTotalMem_v2, cuDeviceTotalMem_v2_t);
GPUSLICE_FAKE_CHECK(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool_t);
GPUSLICE_FAKE_CHECK(cuGetProcAddress, cuGetProcAddress_t);
GPUSLICE_FAKE_CHECK(cuGetProcAddress_v2, cuGetProcAddress_v2_t);
GPUSLICE_FAKE_CHECK(cuCtxCreate_v2, cuCtxCreate_v2_t);
GPUSLICE_FAKE_CHECK(cuCtxCreate_v3, cuCtxCreate_v3_t);
GPUSLICE_FAKE_CHECK(cuCtxCreate_v4, cuCtxCreate_v4_t);
GPUSLICE_FAKE_CHECK(cuCtxDestroy_v2, cuCtxDestroy_v2_t);
GPUSLICE_FAKE_CHECK(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain_t);
GPUSLICE_FAKE_CHECK(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease_v2_t);
GPUSLICE_FAKE_CHECK(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset_v2_t);
GPUSLICE_FAKE_CHECK(cuCtxGetCurrent, cuCtxGetCurrent_t);
GPUSLICE_FAKE_CHECK(cuCtxSetCurrent, cuCtxSetCurrent_t);
GPUSLICE_FAKE_CHECK(cuCtxGetDevice, cuCtxGetDevice_t);
GPUSLICE_FAKE_CHECK(cuCtxPushCurrent_v2, cuCtxPushCurrent_v2_t);
GPUSLICE_FAKE_CHECK(cuCtxPopCurrent_v2, cuCtxPopCurrent_v2_t);
GPUSLICE_FAKE_CHECK(cuCtxSynchronize, cuCtxSynchronize_t);
GPUSLICE_FAKE_CHECK(cuMemGetInfo_v2, cuMemGetInfo_v2_t);
GPUSLICE_FAKE_CHECK(cuMemAlloc_v2, cuMemAlloc_v2_t);
GPUSLICE_FAKE_CHECK(cuMemAllocPitch_v2, cuMemAllocPitch_v2_t);
GPUSLICE_FAKE_CHECK(cuMemAllocManaged, cuMemAllocManaged_t);
GPUSLICE_FAKE_CHECK(cuMemFree_v2, cuMemFree_v2_t);
GPUSLICE_FAKE_CHECK(cuMemAllocAsync, cuMemAllocAsync_t);
GPUSLICE_FAKE_CHECK(cuMemAllocAsync_ptsz, cuMemAllocAsync_t);
GPUSLICE_FAKE_CHECK(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_t);
GPUSLICE_FAKE_CHECK(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_t);
GPUSLICE_FAKE_CHECK(cuMemFreeAsync, cuMemFreeAsync_t);
GPUSLICE_FAKE_CHECK(cuMemFreeAsync_ptsz, cuMemFreeAsync_t);
GPUSLICE_FAKE_CHECK(cuArrayCreate_v2, cuArrayCreate_v2_t);
GPUSLICE_FAKE_CHECK(cuArray3DCreate_v2, cuArray3DCreate_v2_t);
GPUSLICE_FAKE_CHECK(cuArrayDestroy, cuArrayDestroy_t);
GPUSLICE_FAKE_CHECK(cuArrayGetMemoryRequirements, cuArrayGetMemoryRequirements_t);
GPUSLICE_FAKE_CHECK(cuMipmappedArrayCreate, cuMipmappedArrayCreate_t);
GPUSLICE_FAKE_CHECK(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy_t);
GPUSLICE_FAKE_CHECK(cuMipmappedArrayGetMemoryRequirements, cuMipmappedArrayGetMemoryRequirements_t);
GPUSLICE_FAKE_CHECK(cuMemCreate, cuMemCreate_t);
GPUSLICE_FAKE_CHECK(cuMemRelease, cuMemRelease_t);
GPUSLICE_FAKE_CHECK(cuMemMap, cuMemMap_t);
GPUSLICE_FAKE_CHECK(cuMemUnmap, cuMemUnmap_t);
GPUSLICE_FAKE_CHECK(cuMemAddressReserve, cuMemAddressReserve_t);
GPUSLICE_FAKE_CHECK(cuMemAddressFree, cuMemAddressFree_t);
GPUSLICE_FAKE_CHECK(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_t);
GPUSLICE_FAKE_CHECK(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_t);
GPUSLICE_FAKE_CHECK(cuModuleLoadData, cuModuleLoadData_t);
GPUSLICE_FAKE_CHECK(cuModuleGetFunction, cuModuleGetFunction_t);
GPUSLICE_FAKE_CHECK(cuModuleUnload, cuModuleUnload_t);
GPUSLICE_FAKE_CHECK(cuLaunchKernel, cuLaunchKernel_t);
GPUSLICE_FAKE_CHECK(cuLaunchKernel_ptsz, cuLaunchKernel_t);
GPUSLICE_FAKE_CHECK(cuLaunchKernelEx, cuLaunchKernelEx_t);
GPUSLICE_FAKE_CHECK(cuLaunchKernelEx_ptsz, cuLaunchKernelEx_t);
GPUSLICE_FAKE_CHECK(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_t);
GPUSLICE_FAKE_CHECK(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel_t);
GPUSLICE_FAKE_CHECK(cuLaunchCooperativeKernelMultiDevice, cuLaunchCooperativeKernelMultiDevice_t);
GPUSLICE_FAKE_CHECK(cuGraphLaunch, cuGraphLaunch_t);
GPUSLICE_FAKE_CHECK(cuGraphLaunch_ptsz, cuGraphLaunch_t);
GPUSLICE_FAKE_CHECK(cuLaunch, cuLaunch_t);
GPUSLICE_FAKE_CHECK(cuLaunchGrid, cuLaunchGrid_t);
GPUSLICE_FAKE_CHECK(cuLaunchGridAsync, cuLaunchGridAsync_t);
GPUSLICE_FAKE_CHECK(cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_t);
GPUSLICE_FAKE_CHECK(cuStreamEndCapture, cuStreamEndCapture_t);
GPUSLICE_FAKE_CHECK(cuStreamIsCapturing, cuStreamIsCapturing_t);
GPUSLICE_FAKE_CHECK(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags_t);
GPUSLICE_FAKE_CHECK(cuGraphDestroy, cuGraphDestroy_t);
GPUSLICE_FAKE_CHECK(cuGraphExecDestroy, cuGraphExecDestroy_t);
GPUSLICE_FAKE_CHECK(cuStreamCreate, cuStreamCreate_t);
GPUSLICE_FAKE_CHECK(cuStreamDestroy_v2, cuStreamDestroy_v2_t);
GPUSLICE_FAKE_CHECK(cuStreamSynchronize, cuStreamSynchronize_t);
GPUSLICE_FAKE_CHECK(cuStreamSynchronize_ptsz, cuStreamSynchronize_t);
GPUSLICE_FAKE_CHECK(cuStreamGetCtx, cuStreamGetCtx_t);
GPUSLICE_FAKE_CHECK(cuEventCreate, cuEventCreate_t);
GPUSLICE_FAKE_CHECK(cuEventDestroy_v2, cuEventDestroy_v2_t);
GPUSLICE_FAKE_CHECK(cuEventRecord, cuEventRecord_t);
GPUSLICE_FAKE_CHECK(cuEventRecord_ptsz, cuEventRecord_t);
GPUSLICE_FAKE_CHECK(cuEventQuery, cuEventQuery_t);
GPUSLICE_FAKE_CHECK(cuEventSynchronize, cuEventSynchronize_t);
GPUSLICE_FAKE_CHECK(cuEventElapsedTime, cuEventElapsedTime_t);
GPUSLICE_FAKE_CHECK(nvmlInit_v2, nvml::nvmlInit_v2_t);
GPUSLICE_FAKE_CHECK(nvmlDeviceGetHandleByUUID, nvml::nvmlDeviceGetHandleByUUID_t);
GPUSLICE_FAKE_CHECK(nvmlDeviceGetUUID, nvml::nvmlDeviceGetUUID_t);
GPUSLICE_FAKE_CHECK(nvmlDeviceGetMemoryInfo, nvml::nvmlDeviceGetMemoryInfo_t);
GPUSLICE_FAKE_CHECK(nvmlDeviceGetMemoryInfo_v2, nvml::nvmlDeviceGetMemoryInfo_v2_t);

}  // namespace gpuslice::cuda
