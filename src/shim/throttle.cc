#include "throttle.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <limits>
#include <new>

#include "driver.h"

namespace gpuslice::shim {
namespace {

using cuda::CUDA_ERROR_NOT_READY;
using cuda::CUDA_SUCCESS;

constexpr std::uint64_t kOthersWindowNs = 200'000'000;  // "recently" for the borrow policy
constexpr std::size_t kMaxPending = 256;                // launches timed but not yet complete

// The per-thread default stream's handle (CU_STREAM_PER_THREAD).
cuda::CUstream PerThreadStream() { return reinterpret_cast<cuda::CUstream>(std::uintptr_t{2}); }

}  // namespace

std::uint64_t MonotonicNs() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(now.tv_nsec);
}

namespace {

class Monotonic final : public Clock {
 public:
  std::uint64_t NowNs() override { return MonotonicNs(); }
  void SleepUntilNs(std::uint64_t ns) override {
    timespec until{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) != 0) {
    }
  }
};

}  // namespace

Clock& MonotonicClock() {
  static Monotonic* clock = new Monotonic();
  return *clock;
}

void Throttle::Configure(Accounting* accounting, bool limit, bool time, std::string shm_dir,
                         Clock* clock) {
  clock_ = clock != nullptr ? clock : &MonotonicClock();
  accounting_ = accounting;
  limit_ = limit;
  time_ = time || limit;
  shm_dir_ = std::move(shm_dir);
}

cuda::CUevent Throttle::TakeEventLocked(cuda::CUcontext context) {
  std::vector<cuda::CUevent>& pool = free_events_[context];
  if (!pool.empty()) {
    cuda::CUevent event = pool.back();
    pool.pop_back();
    return event;
  }
  cuda::CUcontext current = nullptr;
  g_driver.cuCtxGetCurrent(&current);
  const bool switch_context = current != context;
  if (switch_context && g_driver.cuCtxPushCurrent_v2(context) != CUDA_SUCCESS) return nullptr;
  cuda::CUevent event = nullptr;
  if (g_driver.cuEventCreate(&event, cuda::CU_EVENT_DEFAULT) != CUDA_SUCCESS) event = nullptr;
  if (switch_context) {
    cuda::CUcontext popped = nullptr;
    g_driver.cuCtxPopCurrent_v2(&popped);
  }
  return event;
}

void Throttle::PollLocked(bool wait_for_oldest) {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    cuda::CUresult state = g_driver.cuEventQuery(p.end);
    if (state == CUDA_ERROR_NOT_READY && wait_for_oldest) {
      state = g_driver.cuEventSynchronize(p.end);
      wait_for_oldest = false;
    }
    if (state == CUDA_ERROR_NOT_READY) break;
    float ms = 0;
    if (state == CUDA_SUCCESS && g_driver.cuEventElapsedTime(&ms, p.start, p.end) == CUDA_SUCCESS &&
        ms >= 0) {
      auto actual = static_cast<std::int64_t>(static_cast<double>(ms) * 1e6);
      std::int64_t& estimate = estimates_[p.key];
      if (p.contended && estimate != 0 && actual > estimate) {
        // Timed while other slices' work ran too: the excess is likely theirs. Neither the
        // estimate nor the slice's kernel time takes it.
        actual = estimate;
      }
      estimate = estimate == 0 ? actual : (3 * estimate + actual) / 4;
      average_ns_ = average_ns_ == 0 ? actual : (7 * average_ns_ + actual) / 8;
      accounting_->RecordKernel(static_cast<std::uint64_t>(actual));
    }
    std::vector<cuda::CUevent>& pool = free_events_[p.context];
    pool.push_back(p.start);
    pool.push_back(p.end);
    pending_.pop_front();
  }
}

void Throttle::Poll() {
  if (!time_) return;
  std::lock_guard<std::mutex> hold(mutex_);
  PollLocked(false);
}

bool Throttle::OthersActive(std::uint64_t now) {
  if (now - others_checked_ns_ < 20'000'000) return others_active_;
  others_checked_ns_ = now;
  char mine[kGpuUuidSize];
  accounting_->GpuUuid(mine, sizeof mine);
  const std::string own_file = accounting_->Path().substr(accounting_->Path().rfind('/') + 1);
  bool active = false;
  if (DIR* dir = opendir(shm_dir_.c_str()); dir != nullptr) {
    while (const dirent* entry = readdir(dir)) {
      if (std::strncmp(entry->d_name, "slice-", 6) != 0 || own_file == entry->d_name) continue;
      const std::string path = shm_dir_ + "/" + entry->d_name;
      const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      void* map = mmap(nullptr, sizeof(SliceRegion), PROT_READ, MAP_SHARED, fd, 0);
      close(fd);
      if (map == MAP_FAILED) continue;
      const auto* other = static_cast<const SliceRegion*>(map);
      if (__atomic_load_n(&other->magic, __ATOMIC_ACQUIRE) == kRegionMagic &&
          other->size == sizeof(SliceRegion) &&
          std::strncmp(other->gpu_uuid, mine, sizeof mine) == 0) {
        const std::uint64_t last = __atomic_load_n(&other->last_launch_ns, __ATOMIC_RELAXED);
        if (last != 0 && now - last < kOthersWindowNs) active = true;
      }
      munmap(map, sizeof(SliceRegion));
      if (active) break;
    }
    closedir(dir);
  }
  others_active_ = active;
  return active;
}

Throttle::Ticket Throttle::Before(cuda::CUstream stream, bool per_thread, const void* key) {
  Ticket ticket;
  if (!time_) return ticket;
  cuda::CUstream event_stream = stream;
  if (per_thread && stream == nullptr) event_stream = PerThreadStream();
  int capturing = 0;
  if (g_driver.cuStreamIsCapturing != nullptr &&
      g_driver.cuStreamIsCapturing(event_stream, &capturing) == CUDA_SUCCESS && capturing != 0) {
    return ticket;  // recorded into a graph, not run now
  }
  cuda::CUcontext context = nullptr;
  if (g_driver.cuStreamGetCtx(event_stream, &context) != CUDA_SUCCESS || context == nullptr) {
    return ticket;
  }
  std::int64_t estimate = 0;
  bool contended = false;  // other slices' work predicted to run when this launch starts
  {
    std::lock_guard<std::mutex> hold(mutex_);
    PollLocked(pending_.size() >= kMaxPending);
    if (auto it = estimates_.find(key); it != estimates_.end()) {
      estimate = it->second;
    } else if (limit_ && !pending_.empty()) {
      // A kernel not timed yet: let the launches before it finish, so that it runs alone and its
      // time is known before more are enqueued on a guess.
      PollLocked(true);
      PollLocked(false);
      auto known = estimates_.find(key);
      estimate = known != estimates_.end() ? known->second : average_ns_;
    } else {
      estimate = average_ns_;
    }
  }
  if (limit_ && schedule_.Joined()) {
    std::lock_guard<std::mutex> turn(turn_mutex_);
    const std::uint64_t share = static_cast<std::uint64_t>(accounting_->ShareMilli());
    const auto cost = static_cast<std::uint64_t>(estimate > 0 ? estimate : 0);
    std::uint64_t waited = 0;
    std::uint64_t now = clock_->NowNs();
    schedule_.Sweep(now);
    // Turns (launch_window.h): inside the slice's window, after the other slices' overrun.
    LaunchDecision decision;
    while (true) {
      if (accounting_->Policy() == SharePolicy::kBorrowIdle && !OthersActive(now)) {
        launch_.queue_end_ns = std::max(launch_.queue_end_ns, now) + cost;
        decision = LaunchDecision{};
        decision.publish.busy = launch_.queue_end_ns;
        break;
      }
      LaunchInput in;
      in.now_ns = now;
      in.period_ns = kSchedulePeriodNs;
      schedule_.Window(&in.window_start_ns, &in.window_end_ns);
      in.slice = schedule_.Own();
      const std::int64_t adjust = Feedback(now, in.window_start_ns, in.window_end_ns);
      in.extension_ns = adjust > 0 ? static_cast<std::uint64_t>(adjust) : 0;
      in.shortening_ns = adjust < 0 ? static_cast<std::uint64_t>(-adjust) : 0;
      in.cost_ns = cost;
      in.share_milli = share;
      in.others = schedule_.Others();
      const LaunchState before = launch_;
      decision = DecideLaunch(in, &launch_);
      if (decision.wait_until_ns == 0) {
        // A long launch: one process of the slice at a time takes the slice's turn to pay for it.
        if (decision.publish.paid_until == 0 ||
            schedule_.ClaimPaid(in.slice.paid_until, decision.publish.paid_until)) {
          break;
        }
        launch_ = before;  // another process of the slice made its long launch first
        now = clock_->NowNs();
        continue;
      }
      clock_->SleepUntilNs(decision.wait_until_ns);
      const std::uint64_t woke = clock_->NowNs();
      waited += woke - now;
      now = woke;
      {
        std::lock_guard<std::mutex> hold(mutex_);
        PollLocked(false);
      }
    }
    contended = decision.contended;
    schedule_.Publish(decision.publish);
    if (waited > 0) accounting_->RecordThrottled(waited);
    accounting_->NoteLaunch(now);
  }
  std::lock_guard<std::mutex> hold(mutex_);
  cuda::CUevent start = TakeEventLocked(context);
  if (start == nullptr) return ticket;
  if (g_driver.cuEventRecord(start, event_stream) != CUDA_SUCCESS) {
    free_events_[context].push_back(start);
    return ticket;
  }
  ticket.timed = true;
  ticket.start = start;
  ticket.context = context;
  ticket.stream = event_stream;
  ticket.key = key;
  ticket.estimate_ns = estimate;
  ticket.contended = contended;
  return ticket;
}

void Throttle::After(Ticket& ticket, cuda::CUresult result) {
  if (!ticket.timed) return;
  std::lock_guard<std::mutex> hold(mutex_);
  cuda::CUevent end = result == CUDA_SUCCESS ? TakeEventLocked(ticket.context) : nullptr;
  if (end == nullptr || g_driver.cuEventRecord(end, ticket.stream) != CUDA_SUCCESS) {
    if (end != nullptr) free_events_[ticket.context].push_back(end);
    free_events_[ticket.context].push_back(ticket.start);
    return;
  }
  pending_.push_back(
      {ticket.start, end, ticket.context, ticket.key, ticket.estimate_ns, ticket.contended});
}

void Throttle::ForgetContext(cuda::CUcontext context) {
  if (!time_) return;
  std::lock_guard<std::mutex> hold(mutex_);
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->context == context) {
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  free_events_.erase(context);  // destroyed with the context
}

std::int64_t Throttle::Feedback(std::uint64_t now, std::uint64_t window_start,
                                std::uint64_t window_end) {
  const std::uint64_t kernel_ns = accounting_->KernelNs();
  if (history_.empty() || now - history_.back().first >= 50'000'000) {
    history_.emplace_back(now, kernel_ns);
  }
  while (history_.size() > 2 && now - history_[1].first >= 1'000'000'000) history_.pop_front();
  const auto [then, then_ns] = history_.front();
  if (now - then < 200'000'000) return 0;  // too little to judge
  // Work enqueued but not finished counts as used: it will be, by the time the queue drains, and
  // the share is judged up to then. The target is the window time in that span (EntitledNs), not
  // the share times its length: a span that starts or ends inside a period holds more or less
  // of the slice's windows than its share, and judged that way a slice whose windows hold a
  // whole number of kernels less than its share never made up the rest (0.24 for 0.25 with
  // 1 ms kernels in 12.5 ms windows, on virtual time).
  const std::uint64_t horizon = std::max(launch_.queue_end_ns, now);
  const std::uint64_t target =
      EntitledNs(then, horizon, kSchedulePeriodNs, window_start, window_end);
  const std::uint64_t used = kernel_ns - then_ns + (horizon - now);
  const auto most = static_cast<std::int64_t>((window_end - window_start) / 2);
  const std::int64_t deficit = static_cast<std::int64_t>(target) - static_cast<std::int64_t>(used);
  return std::clamp(deficit, -most, most);
}

bool Throttle::JoinSchedule(const char* gpu_uuid, const char* slice_id, std::string* error) {
  if (!limit_ || schedule_.Joined()) return true;
  return schedule_.Join(shm_dir_, gpu_uuid, slice_id, accounting_->ShareMilli(),
                        accounting_->Policy(), error);
}

void Throttle::Reset() {
  schedule_.ForgetAfterFork();
  launch_ = LaunchState{};
  history_.clear();
  // The parent's events and contexts are not the child's; another thread of the parent may have
  // held the mutex at fork.
  new (&mutex_) std::mutex();
  new (&turn_mutex_) std::mutex();
  pending_.clear();
  free_events_.clear();
  estimates_.clear();
  average_ns_ = 0;
}

}  // namespace gpuslice::shim
