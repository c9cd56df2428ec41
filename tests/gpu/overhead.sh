#!/usr/bin/env bash
# The CUDA interposer's overhead on the calls it sits on, as ratios measured side by side in one
# run: the probe's bench-alloc (cuMemAlloc + cuMemFree pairs) and bench-launch (launches of an
# empty kernel), natively and with libgpuslice-cuda.so preloaded, next to each other, REPS times;
# the figures are the medians of the per-repetition differences and ratios. Used by
# tests/gpu/verify.sh (a real GPU) and bench/shim_overhead.sh (the test CUDA library, or a real
# one). The CUDA library is whatever the environment gives
# (LD_LIBRARY_PATH for the test one). Only CUDA programs run; nothing on the GPU is changed.
#
# Usage: tests/gpu/overhead.sh PROBE INTERPOSER [--reps N] [--pairs N] [--bytes B]
#                              [--launches N] [--modes "cap measure"] [--raw]
#   modes: cap      enforcing, a VRAM cap (GPUSLICE_VRAM_LIMIT_MIB=8192) and no compute share
#          measure  GPUSLICE_MODE=measure (everything counted, launches timed with events)
#          passthrough  loaded with GPUSLICE_MODE=passthrough: the cost of being loaded at all
#   --raw: also print each repetition's figures (`raw <mode> ns_per_pair=... launches_per_s=...`)
# Prints one line per mode (launch_extra_ns: the time the interposer adds to one launch):
#   shim mode=<m> alloc_free_extra_ns=<x> launch_rate_ratio=<y> launch_extra_ns=<z> native_ns_per_pair=<a>
#        shim_ns_per_pair=<b> native_launches_per_s=<c> shim_launches_per_s=<d> reps=<n>
set -euo pipefail
if [[ $# -lt 2 ]]; then
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
  exit 2
fi
probe=$1
shim=$2
shift 2
reps=5
pairs=20000
bytes=1048576
launches=200000
modes="cap measure"
raw=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    --launches) launches=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --raw) raw=1; shift ;;
    *) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2 ;;
  esac
done
[[ -x "$probe" ]] || { echo "overhead.sh: no probe at $probe" >&2; exit 1; }
[[ -r "$shim" ]] || { echo "overhead.sh: no interposer at $shim" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The number after "KEY": in one line of JSON.
field() { sed -n "s/.*\"$1\": *\([-0-9.eE+]*\).*/\1/p" | head -1; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# run MODE ARGS...: the probe natively (MODE=native) or under the interposer in MODE.
run() {
  local mode=$1 n="$BASHPID-$RANDOM"
  shift
  case "$mode" in
    native)
      env -u LD_PRELOAD "$probe" "$@" ;;
    cap)
      env -u GPUSLICE_COMPUTE_SHARE_MILLI LD_PRELOAD="$shim" GPUSLICE_SHM_DIR="$work/shm" \
        GPUSLICE_SLICE="bench-$$-$n" GPUSLICE_VRAM_LIMIT_MIB=8192 GPUSLICE_MODE=enforce \
        GPUSLICE_LOG=0 "$probe" "$@" ;;
    passthrough)
      env -u GPUSLICE_VRAM_LIMIT_MIB -u GPUSLICE_COMPUTE_SHARE_MILLI LD_PRELOAD="$shim" \
        GPUSLICE_SHM_DIR="$work/shm" GPUSLICE_SLICE="bench-$$-$n" GPUSLICE_MODE=passthrough \
        GPUSLICE_LOG=0 "$probe" "$@" ;;
    measure)
      env -u GPUSLICE_VRAM_LIMIT_MIB -u GPUSLICE_COMPUTE_SHARE_MILLI LD_PRELOAD="$shim" \
        GPUSLICE_SHM_DIR="$work/shm" GPUSLICE_SLICE="bench-$$-$n" GPUSLICE_MODE=measure \
        GPUSLICE_LOG=0 "$probe" "$@" ;;
    *) echo "overhead.sh: unknown mode $mode" >&2; exit 2 ;;
  esac
}

for mode in native $modes; do : >"$work/alloc.$mode"; : >"$work/launch.$mode"; done
for ((rep = 0; rep < reps; ++rep)); do
  # Alternate which configuration goes first, so that a drift in the machine's speed spreads
  # evenly over them.
  order="native $modes"
  if ((rep % 2 == 1)); then order="$(tr ' ' '\n' <<<"native $modes" | tac | tr '\n' ' ')"; fi
  for mode in $order; do
    out=$(run "$mode" bench-alloc --pairs "$pairs" --bytes "$bytes") ||
      { echo "overhead.sh: bench-alloc ($mode) failed: $out" >&2; exit 1; }
    field ns_per_pair <<<"$out" >>"$work/alloc.$mode"
  done
  for mode in $order; do
    out=$(run "$mode" bench-launch --launches "$launches") ||
      { echo "overhead.sh: bench-launch ($mode) failed: $out" >&2; exit 1; }
    field launches_per_s <<<"$out" >>"$work/launch.$mode"
  done
  rm -rf "$work/shm"
done

# Each repetition ran the configurations next to each other: the figures are the medians of the
# per-repetition differences and ratios (paired, so that a drift of the machine's speed between
# repetitions cancels out), with the medians of the raw figures beside them.
if ((raw)); then
  for mode in native $modes; do
    paste "$work/alloc.$mode" "$work/launch.$mode" |
      awk -v m="$mode" '{ printf "raw %s ns_per_pair=%s launches_per_s=%s\n", m, $1, $2 }'
  done
fi
native_alloc=$(median <"$work/alloc.native")
native_launch=$(median <"$work/launch.native")
for mode in $modes; do
  alloc=$(median <"$work/alloc.$mode")
  launch=$(median <"$work/launch.$mode")
  extra=$(paste "$work/alloc.native" "$work/alloc.$mode" | awk '{ print $2 - $1 }' | median)
  ratio=$(paste "$work/launch.native" "$work/launch.$mode" | awk '$1 > 0 { print $2 / $1 }' | median)
  launch_extra=$(paste "$work/launch.native" "$work/launch.$mode" |
    awk '$1 > 0 && $2 > 0 { print 1e9 / $2 - 1e9 / $1 }' | median)
  awk -v m="$mode" -v x="$extra" -v y="$ratio" -v z="$launch_extra" -v na="$native_alloc" \
    -v sa="$alloc" -v nl="$native_launch" -v sl="$launch" -v r="$reps" 'BEGIN {
      printf "shim mode=%s alloc_free_extra_ns=%.0f launch_rate_ratio=%.3f launch_extra_ns=%.0f native_ns_per_pair=%.0f shim_ns_per_pair=%.0f native_launches_per_s=%.0f shim_launches_per_s=%.0f reps=%d\n",
        m, x, y, z, na, sa, nl, sl, r }'
done
