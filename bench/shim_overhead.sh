#!/usr/bin/env bash
# The CUDA interposer's overhead (issue 8): cuMemAlloc + cuMemFree pairs and empty kernel launches
# through libgpuslice-cuda.so against the same calls without it, as ratios measured side by side
# in one run (tests/gpu/overhead.sh: REPS alternating repetitions, medians compared). Rows: the
# interposer enforcing a VRAM cap with no compute share (what a capped slice pays), and the
# interposer measuring (`gpuslice measure`: every launch timed with events).
#
# By default on the test CUDA library (BUILD_DIR/fake_cuda/libcuda.so.1, whose calls cost almost
# nothing, so the interposer's own cost shows); --real uses the machine's driver instead.
#
# Usage: bench/shim_overhead.sh [--real] [--reps N] [--pairs N] [--launches N] [BUILD_DIR]
#   BUILD_DIR: a CMake build tree (default: $BUILD_DIR, else build); the interposer, the probe and
#   the test CUDA library are built there first.
# Ends with one line per row:
#   shim mode=<cap|measure> alloc_free_extra_ns=<x> launch_rate_ratio=<y> launch_extra_ns=<z> native_ns_per_pair=<a>
#        shim_ns_per_pair=<b> native_launches_per_s=<c> shim_launches_per_s=<d> reps=<n>
# Targets (docs/BENCHMARKS.md), for the cap row on a real GPU: alloc_free_extra_ns < 1000 and
# launch_rate_ratio >= 0.97. The test library launches in well under a microsecond, several
# times faster than a real driver, so its ratio understates a GPU's: launch_extra_ns carries over.
set -euo pipefail
real=0
reps=5
pairs=50000
launches=1000000
build_dir="${BUILD_DIR:-build}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --real) real=1; shift ;;
    --reps) reps=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --launches) launches=$2; shift 2 ;;
    -*) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2 ;;
    *) build_dir=$1; shift ;;
  esac
done
cd "$(dirname "$0")/.."
source bench/shim_tools.sh
build_shim_tools "$build_dir" || exit 1
build_dir=$(cd "$build_dir" && pwd)
shim="$build_dir/shim/libgpuslice-cuda.so"
probe="$build_dir/tests/shim/cuda_probe"
[[ -x "$probe" ]] || probe=$(find "$build_dir" -name cuda_probe -type f -perm -u+x | head -1)
if ((real)); then
  unset LD_LIBRARY_PATH
  echo "# the machine's CUDA driver"
else
  # No FAKE_CUDA_ENGINE: kernels take a mutex of the process rather than a file lock, so that
  # a launch costs little more than a real driver's and the interposer's share shows.
  export LD_LIBRARY_PATH="$build_dir/fake_cuda"
  unset FAKE_CUDA_ENGINE
  echo "# the test CUDA library ($LD_LIBRARY_PATH/libcuda.so.1)"
fi
echo "# loadavg $(cut -d' ' -f1 /proc/loadavg), $(nproc) CPUs; reps=$reps pairs=$pairs launches=$launches"
tests/gpu/overhead.sh "$probe" "$shim" --reps "$reps" --pairs "$pairs" --launches "$launches" \
  --modes "cap measure"
