// gpuslice/util/clock.h — the wall clock in whole seconds since the Unix epoch.
//
// Contract: `EpochNow()` reads `std::chrono::system_clock` and returns the seconds since
// 1970-01-01 00:00:00 UTC, truncated. It cannot fail; it follows the system clock, so two calls
// may go backwards if the clock is set back. Thread-safe (no state).
#pragma once

#include <chrono>
#include <cstdint>

namespace gpuslice::util {

inline std::int64_t EpochNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace gpuslice::util
