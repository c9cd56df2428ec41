// The throttle's time (throttle.h): CLOCK_MONOTONIC in the interposer, a simulated timeline in the
// schedule tests (tests/shim/virtual_gpu.h), so that shares can be judged exactly.
//
// Contract: NowNs never goes backwards; SleepUntilNs(t) returns once NowNs() >= t (at once when
// it already is). Implementations are thread-safe.
#pragma once

#include <cstdint>

namespace gpuslice::shim {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::uint64_t NowNs() = 0;
  virtual void SleepUntilNs(std::uint64_t ns) = 0;
};

// CLOCK_MONOTONIC, with clock_nanosleep for the waits. Never destroyed.
Clock& MonotonicClock();

}  // namespace gpuslice::shim
