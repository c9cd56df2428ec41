#!/usr/bin/env bash
# Builds the libraries whose locking is annotated (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED;
# gpuslice/util/mutex.h) with clang's thread-safety analysis, its warnings as errors, in
# build-thread-safety/. Only those libraries' own sources are compiled (no tests, no benchmarks,
# not the libraries they link): a guarded member read or written without its lock, a helper that
# needs the lock called without it, locks taken against their declared order, or a lock left held
# fails the build.
#
# Usage: scripts/thread_safety.sh [BUILD_DIR]     (default: build-thread-safety)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build-thread-safety}"
# The annotated libraries.
targets=(gpuslice_alloc)
# CMAKE_OPTIMIZE_DEPENDENCIES: a static library then waits for nothing it links, so only the
# targets' own objects are built. -Wthread-safety-beta adds the lock-order check
# (ABSL_ACQUIRED_BEFORE/AFTER: "mutex 'mutex_' must be acquired before 'db_mutex_'"), which
# -Wthread-safety alone does not make; clang 14 finds nothing else with it in these libraries.
CC=clang CXX=clang++ scripts/build.sh "$build_dir" --targets "${targets[*]}" \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g0" \
  -DCMAKE_CXX_FLAGS="-Wthread-safety -Wthread-safety-beta -Werror=thread-safety" \
  -DCMAKE_OPTIMIZE_DEPENDENCIES=ON \
  -DGPUSLICE_BUILD_TESTS=OFF -DGPUSLICE_BUILD_BENCHMARKS=OFF -DGPUSLICE_PCH=OFF
echo "thread-safety: ${targets[*]} ok"
