#!/usr/bin/env bash
# Compute shares of two strict slices on the test CUDA library (issue 8): two probes
# (tests/shim/cuda_probe launch) run together for S seconds on one FAKE_CUDA_ENGINE under
# libgpuslice-cuda.so, each slice's share is its work per 1 s window over the whole engine, and
# the full windows (1 .. S-2) are printed as min-max. Cases: kernels of 1.5 ms with one in flight
# (a framework that waits for each kernel, like PyTorch's matmul + synchronize), 1 ms with four,
# 4 ms with one; pairs 250/750 and 100/900; either slice first in the GPU's schedule (the first
# to start takes the first window of each period).
#
# Usage: bench/shim_shares.sh [--seconds S] [--interposer SO]... [BUILD_DIR]
#   BUILD_DIR: a CMake build tree (default: $BUILD_DIR, else build). --interposer compares other
#   builds of libgpuslice-cuda.so (default: BUILD_DIR's), side by side in one run.
# One line per case and interposer:
#   shares interposer=<file> kernel_us=<k> in_flight=<f> first=<a|b> a=<share>:<min>-<max> b=<share>:<min>-<max> [outside]
# `outside`: some window more than 0.05 from its slice's share.
set -euo pipefail
seconds=5
interposers=()
build_dir="${BUILD_DIR:-build}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --interposer)
      [[ -f "${2:-}" ]] || { echo "shim_shares.sh: no interposer at '${2:-}'" >&2; exit 2; }
      interposers+=("$(realpath "$2")"); shift 2 ;;
    -*) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2 ;;
    *) build_dir=$1; shift ;;
  esac
done
cd "$(dirname "$0")/.."
source bench/shim_tools.sh
build_shim_tools "$build_dir" || exit 1
[[ ${#interposers[@]} -gt 0 ]] || interposers=("$(realpath "$build_dir/shim/libgpuslice-cuda.so")")
probe="$build_dir/tests/shim/cuda_probe"
fake_dir="$build_dir/fake_cuda"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run_pair SO KERNEL_NS IN_FLIGHT SHARE_A SHARE_B FIRST
run_pair() {
  local so=$1 kernel=$2 in_flight=$3 a=$4 b=$5 first=$6 dir
  dir=$(mktemp -d "$work/pair.XXXX")
  mkdir -p "$dir/shm"
  one() {
    env LD_LIBRARY_PATH="$fake_dir" LD_PRELOAD="$so" GPUSLICE_SHM_DIR="$dir/shm" GPUSLICE_SLICE="$1" \
      GPUSLICE_CONTEXT_RESERVE_MIB=0 FAKE_CUDA_ENGINE="$dir/engine" GPUSLICE_COMPUTE_SHARE_MILLI="$2" \
      GPUSLICE_SHARE_POLICY=strict "$probe" launch --kernel work --arg "$kernel" \
      --seconds "$seconds" --in-flight "$in_flight" >"$dir/$1.json" 2>"$dir/$1.err"
  }
  if [[ $first == a ]]; then
    one a "$a" & sleep 0.03; one b "$b" & wait
  else
    one b "$b" & sleep 0.03; one a "$a" & wait
  fi
  python3 - "$dir" "$a" "$b" <<'PY'
import json, sys
d, out, outside = sys.argv[1], [], False
for name, milli in zip("ab", sys.argv[2:4]):
    windows = json.load(open(f"{d}/{name}.json"))["work_per_window"][1:-1]
    shares = [w / 1e9 for w in windows]
    outside |= any(abs(s - int(milli) / 1000) > 0.05 for s in shares)
    out.append(f"{name}={milli}:{min(shares):.3f}-{max(shares):.3f}")
print(" ".join(out) + (" outside" if outside else ""))
PY
}

for so in "${interposers[@]}"; do
  for pattern in "1500000 1" "1000000 4" "4000000 1"; do
    read -r kernel in_flight <<<"$pattern"
    for pair in "250 750" "100 900"; do
      read -r a b <<<"$pair"
      for first in a b; do
        echo "shares interposer=$(basename "$so") kernel_us=$((kernel / 1000)) in_flight=$in_flight" \
          "first=$first $(run_pair "$so" "$kernel" "$in_flight" "$a" "$b" "$first")"
      done
    done
  done
done
