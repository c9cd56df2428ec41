#!/usr/bin/env bash
# Quick start, part 2: set up, build and run every test.
# Usage: scripts/test.sh            normal build in build/
#        scripts/test.sh --sanitize ASan + UBSan build in build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "${1:-}" = "--sanitize" ]; then
  build_dir=build-asan
  # Debug with line tables only: sanitizer reports keep files and lines, the build is quicker.
  scripts/build.sh "$build_dir" -DGPUSLICE_SANITIZE=ON -DGPUSLICE_BUILD_BENCHMARKS=OFF \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-suppressions.txt:print_suppressions=0"
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  build_dir=build
  scripts/build.sh "$build_dir"
fi
ctest --test-dir "$build_dir" --output-on-failure -j"$(nproc)"
