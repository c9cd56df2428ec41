// gpuslice/util/mutex.h
//
// A mutex, its scoped lock and a condition variable that clang's thread-safety analysis
// understands (-Wthread-safety; scripts/thread_safety.sh builds the annotated libraries with it,
// warnings as errors). std::mutex carries no annotations, so code that marks its state
// ABSL_GUARDED_BY(mu_) and its helpers ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) locks a util::Mutex:
//
//   util::Mutex mu_;
//   int count_ ABSL_GUARDED_BY(mu_) = 0;
//   void BumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++count_; }
//   void Bump() ABSL_LOCKS_EXCLUDED(mu_) { util::MutexLock lock(mu_); BumpLocked(); }
//
// A lambda that reads guarded state and is called with the lock held says so the same way:
// `[&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ... }`. The annotations are clang attributes; with
// GCC they expand to nothing, and the types are std::mutex and std::condition_variable, no
// slower. (absl::Mutex is annotated too, but brings its own scheduling and a library to link.)
#pragma once

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace gpuslice::util {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Tells the analysis that the caller holds the lock where it cannot see it taken (no check at
  // run time).
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` from its construction to the end of its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// std::condition_variable over a util::Mutex: Wait releases `mu` while it blocks and holds it
// again when it returns (spurious wake-ups included: call it in a loop on the condition).
class CondVar {
 public:
  void Wait(Mutex& mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: the caller's lock
  }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace gpuslice::util
