#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, clang with ASan + UBSan, in build-fuzz/) and runs each
# on its seed corpus (fuzz/corpus/<harness>/) for a while. New inputs go to
# build-fuzz/corpus/<harness>/, a crash, leak, timeout or sanitizer report to
# build-fuzz/crashes/<harness>/ (reproduce: build-fuzz/fuzz/<harness> FILE), and it fails.
#
# Usage: scripts/fuzz.sh [--seconds N] [HARNESS...]     (default: 600 s each, every harness)
# Ends with one line per harness: fuzz <harness> seconds=<n> runs=<n> corpus=<n> result=<ok|FAILED>
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=600
harnesses=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) harnesses+=("$1"); shift ;;
  esac
done
if [[ ${#harnesses[@]} -eq 0 ]]; then
  harnesses=(fuzz_http_head fuzz_http_transport fuzz_layout_text fuzz_mig_parted fuzz_catalog_yaml
             fuzz_text_checks fuzz_plan_inputs fuzz_replay_csv fuzz_api_bodies fuzz_extender_json
             fuzz_shim_inputs fuzz_store_rows fuzz_dra_inputs)
fi
scripts/setup.sh >/dev/null  # clang and its libFuzzer runtime are among its packages
# -O1 with line tables: libFuzzer's advice for speed and usable reports, and a quicker build;
# through ccache (scripts/build.sh) like every other build.
CC=clang CXX=clang++ scripts/build.sh build-fuzz --targets fuzzers -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DGPUSLICE_FUZZ=ON -DGPUSLICE_BUILD_TESTS=OFF -DGPUSLICE_BUILD_BENCHMARKS=OFF >/dev/null
status=0
summary=()
for h in "${harnesses[@]}"; do
  work=build-fuzz/corpus/$h
  crashes=build-fuzz/crashes/$h
  mkdir -p "$work" "$crashes"
  log=build-fuzz/$h.log
  # -timeout: one input running over 25 s is a hang (generous: a loaded 2-core machine stalls
  # for seconds); -rss_limit_mb: a blown-up input is a bug.
  if build-fuzz/fuzz/$h -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 \
      -artifact_prefix="$crashes/" -print_final_stats=1 "$work" "fuzz/corpus/$h" >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
    tail -n 40 "$log" >&2
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  summary+=("fuzz $h seconds=$seconds runs=${runs:-0} corpus=$(ls "$work" | wc -l) result=$result")
done
printf '%s\n' "${summary[@]}"
exit $status
