#!/usr/bin/env bash
# Quick start, part 2: set up, build and run every test.
# Usage: scripts/test.sh            normal build in build/, every test
#        scripts/test.sh --sanitize ASan + UBSan build in build-asan/, every test
#        scripts/test.sh --tsan     ThreadSanitizer build in build-tsan/ of the concurrency-heavy
#                                   tests only (service, API server and transport, synchronized
#                                   backend, the interposer's schedule and throttle), run directly
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest_args=()
case "${1:-}" in
  --sanitize)
    build_dir=build-asan
    # Debug with line tables only: sanitizer reports keep files and lines, the build is quicker.
    scripts/build.sh "$build_dir" -DGPUSLICE_SANITIZE=ON -DGPUSLICE_BUILD_BENCHMARKS=OFF \
      -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
    export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-suppressions.txt:print_suppressions=0"
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    # The wall-clock share tests judge time on this machine, which the sanitizers slow down: they
    # run in the normal build; the share logic runs here on virtual time.
    ctest_args=(-E '^(Paths/|Shares/)?ComputeShare')
    ;;
  --tsan)
    build_dir=build-tsan
    tsan_tests=(alloc_test api_test http_test synchronized_backend_test shim_schedule_virtual_test
                shim_throttle_threads_test)
    # -O1: ThreadSanitizer's own advice for speed with usable reports.
    scripts/build.sh "$build_dir" --targets "${tsan_tests[*]}" -DGPUSLICE_TSAN=ON \
      -DGPUSLICE_BUILD_BENCHMARKS=OFF -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1"
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
    failed=0
    for test in "${tsan_tests[@]}"; do
      echo "== $test under ThreadSanitizer"
      if ! "$build_dir/tests/$test" --gtest_brief=1; then
        echo "FAILED under ThreadSanitizer: $test"
        failed=1
      fi
    done
    exit "$failed"
    ;;
  "")
    build_dir=build
    scripts/build.sh "$build_dir"
    ;;
  *)
    echo "usage: scripts/test.sh [--sanitize|--tsan]" >&2
    exit 2
    ;;
esac
ctest --test-dir "$build_dir" --output-on-failure -j"$(nproc)" ${ctest_args[@]+"${ctest_args[@]}"}
