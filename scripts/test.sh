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
    asan_flags=(-DGPUSLICE_SANITIZE=ON -DGPUSLICE_BUILD_BENCHMARKS=OFF -DCMAKE_BUILD_TYPE=Debug
                -DCMAKE_CXX_FLAGS_DEBUG=-g1)
    scripts/build.sh "$build_dir" --targets gpuslice_test_pch "${asan_flags[@]}"
    # Every test binary but those that drive the gpuslice command as a separate process or link
    # the CLI library (the code they reach runs in-process in the unit tests; the normal build runs
    # them all) and the wall-clock share tests: 23 test files and the CLI library's 31 fewer to
    # compile with the sanitizers, of about 300.
    declare -A not_here
    for test in cli_test hardening_cli_test alerts_cli_test top_cli_test crash_test \
      prometheus_test measure_cli_test k8s_device_plugin_cli_test k8s_manifests_test dra_driver_cli_test \
      alert_webhook_test top_view_test shim_throttle_test; do
      not_here[$test]=1
    done
    asan_tests=()
    while read -r test; do
      [[ -n "${not_here[$test]:-}" ]] || asan_tests+=("$test")
    done < <(ninja -C "$build_dir" -t targets all | sed -n 's#^tests/\([a-z0-9_]*_test\): CXX_EXECUTABLE.*#\1#p')
    scripts/build.sh "$build_dir" --targets "${asan_tests[*]}" "${asan_flags[@]}"
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
    export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-suppressions.txt:print_suppressions=0"
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    # Property tests at 40 cases each here (the planner oracle's 500 took 420 s under ASan): the
    # normal build runs their full counts; this stage looks for memory errors.
    export RC_PARAMS="${RC_PARAMS:-max_success=40}"
    # The wall-clock share tests judge time on this machine, which the sanitizers slow down: they
    # run in the normal build; the share logic runs here on virtual time.
    ctest_args=(-E '^(Paths/|Shares/)?ComputeShare|_NOT_BUILT$')
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
