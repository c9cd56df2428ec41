// Missing test dependencies (PostgreSQL, promtool, Prometheus, the test NVML library, the data and
// references in ../shared): a skip on a developer's machine (a fresh clone without ../shared), a
// failure in CI, where scripts/setup.sh installs every one of them, ../shared is there, and a skip
// could only hide a regression.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

// A namespace of its own: a `gpuslice::testing` here would hide ::testing in tests that do not
// otherwise use it.
namespace gpuslice_require {

// True where CI runs the suite: .ci/run exports CI=true.
inline bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::strcmp(ci, "true") == 0;
}

}  // namespace gpuslice_require

// Skips the current test (in its body or SetUp) for a missing dependency, or fails it under
// CI=true. `why` is streamed into the message: GPUSLICE_SKIP_OR_FAIL_IN_CI("no " << thing).
#define GPUSLICE_SKIP_OR_FAIL_IN_CI(why)                                                 \
  do {                                                                                   \
    if (::gpuslice_require::InCi()) {                                                    \
      GTEST_FAIL() << "CI=true, where every test dependency is installed, but: " << why; \
    } else {                                                                             \
      GTEST_SKIP() << why;                                                               \
    }                                                                                    \
  } while (0)
