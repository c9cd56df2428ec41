// gpuslice/dra/backoff.h
//
// How long the DRA driver waits before it retries a failed call to the API server: 500 ms after
// the first failure, doubling after each further one, at most 30 s; a success starts again from
// 500 ms. Deterministic unless the caller gives a jitter source: with `jitter` = j > 0 and
// `uniform` returning values in [0, 1), each delay is stretched by a factor 1 + j * uniform(), so
// that many nodes failing together do not retry in step. The caller sleeps; Backoff only counts.
// A value; thread-compatible.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>

#include "absl/status/status.h"

namespace gpuslice::dra {

class Backoff {
 public:
  struct Options {
    std::chrono::milliseconds initial{500};
    std::chrono::milliseconds max{30000};
    double jitter = 0;                // 0: no jitter
    std::function<double()> uniform;  // [0, 1); used only when jitter > 0
  };

  Backoff() = default;
  explicit Backoff(Options options) : options_(std::move(options)), next_(options_.initial) {}

  // The delay before the next try after a failure; the one after it doubles, up to the cap.
  std::chrono::milliseconds Next() {
    const std::chrono::milliseconds delay = next_;
    next_ = std::min(options_.max, next_ * 2);
    ++failures_;
    if (options_.jitter <= 0 || !options_.uniform) return delay;
    const double stretch = 1 + options_.jitter * options_.uniform();
    return std::chrono::milliseconds(
        static_cast<std::chrono::milliseconds::rep>(static_cast<double>(delay.count()) * stretch));
  }
  // After a success: the next failure waits the initial delay again.
  void Reset() {
    next_ = options_.initial;
    failures_ = 0;
  }
  // Reset and 0 for an OK status, else Next(): `sleep_for(backoff.After(status))`.
  std::chrono::milliseconds After(const absl::Status& status) {
    if (status.ok()) {
      Reset();
      return std::chrono::milliseconds(0);
    }
    return Next();
  }

  // What Next() will return without jitter, and the failures since the last success.
  std::chrono::milliseconds peek() const { return next_; }
  int failures() const { return failures_; }

 private:
  Options options_;
  std::chrono::milliseconds next_{options_.initial};
  int failures_ = 0;
};

}  // namespace gpuslice::dra
