#include "shim/virtual_gpu.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "driver.h"

namespace gpuslice::shim {

// The driver table the throttle calls through; the interposer defines and fills its own.
Driver g_driver;

namespace testing_virtual {
namespace {

thread_local int t_actor = -1;
VirtualGpu* g_gpu = nullptr;

// Handles: small integers as pointers (never dereferenced). Contexts and streams start at 0x1000
// and 0x100000 so that neither is null nor CU_STREAM_LEGACY / CU_STREAM_PER_THREAD (1, 2).
constexpr std::uintptr_t kContextBase = 0x1000;
constexpr std::uintptr_t kStreamBase = 0x100000;

}  // namespace

int VirtualTimeline::Self() { return t_actor; }

void VirtualTimeline::HandOnLocked() {
  if (waiting_.empty()) {
    running_ = -1;
    turn_.notify_all();
    return;
  }
  auto next = waiting_.begin();
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    const bool earlier =
        it->second.wake_ns < next->second.wake_ns ||
        (it->second.wake_ns == next->second.wake_ns && it->second.order < next->second.order);
    if (earlier) next = it;
  }
  now_ = std::max(now_, next->second.wake_ns);
  running_ = next->first;
  waiting_.erase(next);
  turn_.notify_all();
}

void VirtualTimeline::WaitForTurnLocked(std::unique_lock<std::mutex>& lock, int self) {
  turn_.wait(lock, [&] { return running_ == self; });
}

void VirtualTimeline::Run(const std::vector<std::function<void()>>& actors) {
  const int count = static_cast<int>(actors.size());
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([this, i, &actors] {
      std::unique_lock<std::mutex> lock(mutex_);
      t_actor = i;
      waiting_[i] = Waiting{now_, order_++};
      ++registered_;
      turn_.notify_all();
      WaitForTurnLocked(lock, i);
      lock.unlock();
      actors[static_cast<std::size_t>(i)]();
      lock.lock();
      HandOnLocked();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mutex_);
    turn_.wait(lock, [&] { return registered_ == count; });
    // Registration order depends on the threads' start: take them in actor order.
    for (auto& [actor, waiting] : waiting_) waiting.order = static_cast<std::uint64_t>(actor);
    HandOnLocked();
  }
  for (std::thread& thread : threads) thread.join();
  registered_ = 0;
}

std::uint64_t VirtualTimeline::NowNs() {
  std::lock_guard<std::mutex> hold(mutex_);
  return now_;
}

void VirtualTimeline::SleepUntilNs(std::uint64_t ns) {
  const int self = t_actor;
  if (self < 0) std::abort();  // only actors wait on the timeline
  std::unique_lock<std::mutex> lock(mutex_);
  std::uint64_t late = 0;
  if (max_late_ns_ > 0) {
    random_ = random_ * 6364136223846793005ULL + 1442695040888963407ULL;  // Knuth's MMIX LCG
    late = (random_ >> 33) % (max_late_ns_ + 1);
  }
  waiting_[self] = Waiting{std::max(ns, now_) + late, order_++};
  HandOnLocked();
  WaitForTurnLocked(lock, self);
}

VirtualGpu::VirtualGpu(Clock* clock) : clock_(clock) {}

void VirtualGpu::ActAs(int actor) { t_actor = actor; }

VirtualGpu::~VirtualGpu() {
  if (g_gpu == this) {
    g_gpu = nullptr;
    g_driver = Driver{};
  }
}

void VirtualGpu::Install() {
  g_gpu = this;
  g_driver = Driver{};
  g_driver.cuCtxGetCurrent = &CtxGetCurrent;
  g_driver.cuCtxPushCurrent_v2 = &CtxPush;
  g_driver.cuCtxPopCurrent_v2 = &CtxPop;
  g_driver.cuStreamGetCtx = &StreamGetCtx;
  g_driver.cuStreamIsCapturing = &StreamIsCapturing;
  g_driver.cuEventCreate = &EventCreate;
  g_driver.cuEventRecord = &EventRecord;
  g_driver.cuEventQuery = &EventQuery;
  g_driver.cuEventSynchronize = &EventSynchronize;
  g_driver.cuEventElapsedTime = &EventElapsedTime;
}

cuda::CUcontext VirtualGpu::ContextOf(int actor) {
  return reinterpret_cast<cuda::CUcontext>(kContextBase + static_cast<std::uintptr_t>(actor));
}

cuda::CUstream VirtualGpu::StreamOf(int actor) {
  return reinterpret_cast<cuda::CUstream>(kStreamBase + static_cast<std::uintptr_t>(actor));
}

int VirtualGpu::ActorOfStream(cuda::CUstream stream) {
  const auto value = reinterpret_cast<std::uintptr_t>(stream);
  return value >= kStreamBase && value < kStreamBase + 4096 ? static_cast<int>(value - kStreamBase)
                                                            : -1;
}

std::uint64_t VirtualGpu::Launch(std::uint64_t duration_ns) {
  const int actor = VirtualTimeline::Self();
  const std::uint64_t now = clock_->NowNs();
  std::lock_guard<std::mutex> hold(mutex_);
  std::uint64_t& context_end = context_end_ns_[actor];
  const std::uint64_t start = std::max({now, context_end, engine_free_ns_});
  const std::uint64_t end = start + duration_ns;
  context_end = end;
  engine_free_ns_ = end;
  trace_.push_back(TracedKernel{actor, start, end});
  return end;
}

std::vector<TracedKernel> VirtualGpu::Trace() {
  std::lock_guard<std::mutex> hold(mutex_);
  return trace_;
}

cuda::CUresult VirtualGpu::CtxGetCurrent(cuda::CUcontext* context) {
  *context = ContextOf(VirtualTimeline::Self());
  return cuda::CUDA_SUCCESS;
}

cuda::CUresult VirtualGpu::CtxPush(cuda::CUcontext) { return cuda::CUDA_SUCCESS; }

cuda::CUresult VirtualGpu::CtxPop(cuda::CUcontext* context) {
  if (context != nullptr) *context = ContextOf(VirtualTimeline::Self());
  return cuda::CUDA_SUCCESS;
}

cuda::CUresult VirtualGpu::StreamGetCtx(cuda::CUstream stream, cuda::CUcontext* context) {
  const int actor = ActorOfStream(stream);
  if (actor < 0) return cuda::CUDA_ERROR_INVALID_HANDLE;
  *context = ContextOf(actor);
  return cuda::CUDA_SUCCESS;
}

cuda::CUresult VirtualGpu::StreamIsCapturing(cuda::CUstream, int* capturing) {
  *capturing = 0;
  return cuda::CUDA_SUCCESS;
}

cuda::CUresult VirtualGpu::EventCreate(cuda::CUevent* event, unsigned int) {
  std::lock_guard<std::mutex> hold(g_gpu->mutex_);
  g_gpu->events_.push_back(0);
  *event = reinterpret_cast<cuda::CUevent>(static_cast<std::uintptr_t>(g_gpu->events_.size()));
  return cuda::CUDA_SUCCESS;
}

cuda::CUresult VirtualGpu::EventRecord(cuda::CUevent event, cuda::CUstream stream) {
  const int actor = ActorOfStream(stream);
  const auto index = reinterpret_cast<std::uintptr_t>(event);
  const std::uint64_t now = g_gpu->clock_->NowNs();
  std::lock_guard<std::mutex> hold(g_gpu->mutex_);
  if (actor < 0 || index == 0 || index > g_gpu->events_.size()) {
    return cuda::CUDA_ERROR_INVALID_HANDLE;
  }
  g_gpu->events_[index - 1] = std::max(now, g_gpu->context_end_ns_[actor]);
  return cuda::CUDA_SUCCESS;
}

cuda::CUresult VirtualGpu::EventQuery(cuda::CUevent event) {
  const auto index = reinterpret_cast<std::uintptr_t>(event);
  const std::uint64_t now = g_gpu->clock_->NowNs();
  std::lock_guard<std::mutex> hold(g_gpu->mutex_);
  if (index == 0 || index > g_gpu->events_.size()) return cuda::CUDA_ERROR_INVALID_HANDLE;
  return g_gpu->events_[index - 1] <= now ? cuda::CUDA_SUCCESS : cuda::CUDA_ERROR_NOT_READY;
}

cuda::CUresult VirtualGpu::EventSynchronize(cuda::CUevent event) {
  const auto index = reinterpret_cast<std::uintptr_t>(event);
  std::uint64_t at = 0;
  {
    std::lock_guard<std::mutex> hold(g_gpu->mutex_);
    if (index == 0 || index > g_gpu->events_.size()) return cuda::CUDA_ERROR_INVALID_HANDLE;
    at = g_gpu->events_[index - 1];
  }
  g_gpu->clock_->SleepUntilNs(at);
  return cuda::CUDA_SUCCESS;
}

cuda::CUresult VirtualGpu::EventElapsedTime(float* ms, cuda::CUevent start, cuda::CUevent end) {
  const auto a = reinterpret_cast<std::uintptr_t>(start);
  const auto b = reinterpret_cast<std::uintptr_t>(end);
  std::lock_guard<std::mutex> hold(g_gpu->mutex_);
  if (a == 0 || b == 0 || a > g_gpu->events_.size() || b > g_gpu->events_.size()) {
    return cuda::CUDA_ERROR_INVALID_HANDLE;
  }
  const auto from = static_cast<double>(g_gpu->events_[a - 1]);
  const auto to = static_cast<double>(g_gpu->events_[b - 1]);
  *ms = static_cast<float>((to - from) / 1e6);
  return cuda::CUDA_SUCCESS;
}

}  // namespace testing_virtual
}  // namespace gpuslice::shim
