#!/usr/bin/env bash
# GPU verification of the CUDA interposer libgpuslice-cuda.so (issue 8, docs/SHIM.md), in one
# command and under 5 minutes, on a machine with an NVIDIA GPU and its driver. Needs only bash,
# g++ (C++20: GCC 10 or later), awk and nvidia-smi; no nvcc, no CUDA toolkit, none of gpuslice's
# build packages. PyTorch is used when it is there.
#
# SAFETY: this script only runs CUDA programs (tests/shim/cuda_probe.cc, and a small PyTorch
# script) and read-only queries (nvidia-smi --query-*). It never changes MIG mode, clocks, power
# limits, compute mode or persistence mode, and never resets the GPU. It allocates at most a few
# GiB of device memory and keeps the GPU busy for about a minute in all; run it on a GPU nothing
# else needs meanwhile (other processes would skew the compute-share figures, not be harmed).
#
# Usage: tests/gpu/verify.sh [--gpu INDEX] [--out DIR] [--keep] [--fake BUILD_DIR] [--prebuilt DIR]
#   --gpu INDEX      the GPU (nvidia-smi's index; default 0); CUDA sees it alone
#   --out DIR        also write the summary and the raw log there
#   --keep           keep the work directory (built programs, raw outputs)
#   --fake BUILD_DIR a dry run on the test CUDA library BUILD_DIR/fake_cuda/libcuda.so.1
#                    (build target gpuslice_fake_cuda) instead of a GPU; nvidia-smi is not used
#   --prebuilt DIR   use DIR/libgpuslice-cuda.so and DIR/cuda_probe, built elsewhere with the same
#                    g++ lines (for a GPU machine without g++); nothing is built
#
# It builds the interposer and the probe with g++ into a temporary directory, then checks:
#   info      the probe's `info` natively (driver version, devices, memory)
#   context   the device memory one CUDA context takes (nvidia-smi's used_memory of a process
#             holding a 1 MiB allocation, less that allocation's 2 MiB page), measured apart from
#             the interposer (which measures each context itself): what the cap checks judge by
# Every cap check runs under the interposer's defaults (GPUSLICE_CONTEXT_RESERVE_MIB not set: a
# context counts what the interposer measures it to take, through NVML).
#   cap:PATH  a 4096 MiB cap on each allocation path (alloc pitch managed async pool array array3d
#             mipmap vmm), 256 MiB chunks until refused: pass when the allocations plus the context
#             (as the context check measured it) stop at or before the cap, with
#             CUDA_ERROR_OUT_OF_MEMORY, and cuMemGetInfo inside reports total = cap
#   cap:nvml  nvidia-smi's used_memory of a process filled up to the cap in 64 MiB chunks stays
#             <= the cap, context included (--fake: the test library's own peak)
#   share:A/B two processes in slices with compute shares A and B (milli) launching ~1 ms work
#             kernels: each one's achieved share per 1 s window (work done / the solo rate) within
#             +-0.05 of its share in every full window after the first
#   share:wait-each:F-first  the same pair 250/750 with ~1.5 ms kernels, each process waiting for
#             every kernel before it launches the next (PyTorch's pattern), F's process started
#             first (it takes each period's first window), for both orders
#   overhead  cuMemAlloc+cuMemFree and launches natively and under the interposer (cap set, no
#             share), alternating: pass when < 1000 ns extra per pair and >= 97% of the launch rate
#             (--fake: "info", the targets being a real GPU's)
#   pytorch   PyTorch allocating 256 MiB tensors under a 2048 MiB cap until it raises
#             OutOfMemoryError: pass when it stops at or below the cap
#   pytorch:share:F-first  two PyTorch processes of bf16 matrix products
#             (tests/gpu/torch_share.py) in slices of 250 and 750, F's started first: each one's
#             products per 1 s window against its solo rate within +-0.05 of its share, as for the
#             probe (the runtime's and cuBLAS's launches), for both orders
# It prints a summary table, then one line per check:
#   gpu-verify <check> <pass|fail|skipped|info> <details>
# Exit status: 0 when nothing failed, 1 when a check failed, 2 on bad usage.
set -uo pipefail

gpu=0
out_dir=""
keep=0
fake_build=""
prebuilt=""
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --gpu) gpu=${2:?}; shift 2 ;;
    --out) out_dir=${2:?}; shift 2 ;;
    --keep) keep=1; shift ;;
    --fake) fake_build=${2:?}; shift 2 ;;
    --prebuilt) prebuilt=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "verify.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ "$gpu" =~ ^[0-9]+$ ]] || { echo "verify.sh: --gpu takes an index" >&2; exit 2; }

repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-verify.XXXXXX")
log="$work/log"
: >"$log"
bg_pids=()
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  local pid
  for pid in "${bg_pids[@]}"; do kill "$pid" 2>/dev/null; done
  if ((keep)); then echo "verify.sh: work directory kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
started=$SECONDS
fake=0
smi=0
device_total_mib=""

# Nothing of an outer slice leaks in.
while IFS= read -r name; do unset "$name"; done < <(compgen -e | grep '^GPUSLICE_' || true)
unset LD_PRELOAD

say() { printf '%s\n' "$*" | tee -a "$log"; }
section() { printf '\n== %s\n' "$*" | tee -a "$log"; }

names=()
results=()
details=()
record() {  # record CHECK RESULT DETAILS
  names+=("$1")
  results+=("$2")
  details+=("$3")
  printf '   %-12s %-7s %s\n' "$1" "$2" "$3" | tee -a "$log"
}

# The summary table and the gpu-verify lines; the exit status.
finish() {
  local summary="$work/summary" i result
  {
    echo
    echo "== summary ($((SECONDS - started)) s; $([[ $fake == 1 ]] && echo "test CUDA library, dry run" || echo "GPU $gpu, device memory ${device_total_mib:-?} MiB"))"
    printf '%-13s %-8s %s\n' CHECK RESULT DETAILS
    for i in "${!names[@]}"; do printf '%-13s %-8s %s\n' "${names[$i]}" "${results[$i]}" "${details[$i]}"; done
    echo
    for i in "${!names[@]}"; do echo "gpu-verify ${names[$i]} ${results[$i]} ${details[$i]}"; done
  } >"$summary"
  tee -a "$log" <"$summary"
  if [[ -n "$out_dir" ]]; then
    mkdir -p "$out_dir" && cp "$summary" "$out_dir/summary.txt" && cp "$log" "$out_dir/verify.log"
  fi
  for result in "${results[@]}"; do [[ "$result" == fail ]] && exit 1; done
  exit 0
}

# The number after "KEY": in one line of JSON (empty when absent).
field() { sed -n "s/.*\"$1\": *\(-\{0,1\}[0-9][0-9.eE+-]*\).*/\1/p" <<<"$2" | head -1; }
# The numbers of the array "KEY":[...] in one line of JSON, space-separated.
array() { sed -n "s/.*\"$1\": *\[\([^]]*\)\].*/\1/p" <<<"$2" | head -1 | tr ',' ' '; }
calc() { awk "BEGIN { print $* }"; }
# share_verdict WINDOWS RATE SHARE SECONDS: "1 list" when the work of every full window after the
# first (windows 2..SECONDS), divided by the solo RATE, is within +-0.05 of SHARE (milli), else
# "0 list"; list is the achieved shares, comma-separated.
share_verdict() {
  awk -v w="$1" -v r="$2" -v want="$3" -v s="$4" 'BEGIN {
    n = split(w, v, " "); ok = (n >= s); list = ""
    for (i = 2; i <= s && i <= n; ++i) {
      got = v[i] / r; list = list sprintf("%s%.3f", (list == "" ? "" : ","), got)
      d = got - want / 1000; if (d < 0) d = -d; if (d > 0.05) ok = 0
    }
    printf "%d %s", ok, list }'
}
# judge_shares CHECK RATE SECONDS PREFIX NOTE SHARE...: each SHARE's run printed its JSON last in
# PREFIX.SHARE; records CHECK, pass when every run's full windows are within +-0.05 of its share
# (share_verdict against the solo RATE), with NOTE before the achieved shares.
judge_shares() {
  local check=$1 rate=$2 seconds=$3 prefix=$4 note=$5 ok=1 text="" share out verdict
  shift 5
  for share in "$@"; do
    out=$(tail -1 "$prefix.$share")
    echo "$check, share $share: $out" >>"$log"
    verdict=$(share_verdict "$(array work_per_window "$out")" "$rate" "$share" "$seconds")
    ((${verdict%% *} == 1)) || ok=0
    text+="${text:+; }$share: ${verdict#* }"
  done
  record "$check" "$([[ $ok == 1 ]] && echo pass || echo fail)" \
    "${note}achieved per window (want +-0.05): $text"
}
mib() { awk -v b="${1:-0}" 'BEGIN { printf "%.0f", b / 1048576 }'; }

# --- build ------------------------------------------------------------------------------------
shim="$work/libgpuslice-cuda.so"
probe="$work/cuda_probe"
if [[ -n "$prebuilt" ]]; then
  section "prebuilt programs from $prebuilt"
  for file in libgpuslice-cuda.so cuda_probe; do
    [[ -r "$prebuilt/$file" ]] || { echo "verify.sh: no $prebuilt/$file" >&2; exit 2; }
    cp "$prebuilt/$file" "$work/$file"
  done
  chmod +x "$probe"
  say "copied $shim and $probe"
else
  section "build (g++, into $work)"
  command -v g++ >/dev/null || { echo "verify.sh: g++ is needed (GCC 10 or later), or --prebuilt DIR" >&2; exit 1; }
  say "$(g++ --version | head -1)"
  shim_sources=()
  for source in "$repo"/src/shim/*.cc; do
    [[ "$(basename "$source")" == slices.cc ]] || shim_sources+=("$source")
  done
  if ! g++ -O2 -std=c++20 -fno-exceptions -shared -fPIC -I "$repo/include" -I "$repo/src/shim" "${shim_sources[@]}" \
    -ldl -lpthread -o "$shim" >>"$log" 2>&1; then
    tail -30 "$log" >&2
    echo "verify.sh: building the interposer failed" >&2
    exit 1
  fi
  if ! g++ -O2 -std=c++20 "$repo/tests/shim/cuda_probe.cc" -I "$repo/src/shim" -ldl -lpthread \
    -o "$probe" >>"$log" 2>&1; then
    tail -30 "$log" >&2
    echo "verify.sh: building the probe failed" >&2
    exit 1
  fi
  say "built $shim and $probe in $((SECONDS - started)) s"
fi

# --- the machine ------------------------------------------------------------------------------
if [[ -n "$fake_build" ]]; then
  fake=1
  fake_lib=$(cd "$fake_build" 2>/dev/null && pwd)/fake_cuda
  [[ -r "$fake_lib/libcuda.so.1" ]] ||
    { echo "verify.sh: no $fake_build/fake_cuda/libcuda.so.1 (ninja gpuslice_fake_cuda)" >&2; exit 1; }
  export LD_LIBRARY_PATH="$fake_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Contexts of 518 MiB (an H200's), not the interposer's fallback of 320, and the test library's
  # NVML for the interposer to measure them with.
  export FAKE_CUDA_ENGINE="$work/engine" FAKE_CUDA_TOTAL_MIB=16384 FAKE_CUDA_CONTEXT_MIB=518
  export GPUSLICE_REAL_NVML="$fake_lib/libcuda.so.1"
  section "machine: the test CUDA library $fake_lib/libcuda.so.1 (dry run, no GPU)"
else
  section "machine"
  if command -v nvidia-smi >/dev/null; then
    smi=1
    # Read-only queries.
    nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used,mig.mode.current,compute_mode \
      --format=csv -i "$gpu" 2>&1 | tee -a "$log"
    uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$gpu" 2>/dev/null | tr -d ' ')
    mig_mode=$(nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader -i "$gpu" 2>/dev/null)
    if [[ "$mig_mode" == *Enabled* ]]; then
      say "note: GPU $gpu is in MIG mode; CUDA only sees its MIG devices (give one with CUDA_VISIBLE_DEVICES=MIG-...)"
    fi
    [[ -n "$uuid" && "$mig_mode" != *Enabled* ]] && export CUDA_VISIBLE_DEVICES="$uuid"
  else
    say "nvidia-smi is not there: the context and cap:nvml checks are skipped"
    export CUDA_VISIBLE_DEVICES="$gpu"
  fi
fi
say "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-} LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

# native ARGS...: the probe without the interposer.
# shimmed SLICE VAR=VALUE... -- ARGS...: the probe under the interposer, in slice verify-SLICE.
native() { timeout 120 "$probe" "$@" 2>>"$log"; }
shimmed() {
  local slice=$1 vars=()
  shift
  while [[ $# -gt 0 && "$1" != -- ]]; do vars+=("$1"); shift; done
  shift
  timeout 120 env LD_PRELOAD="$shim" GPUSLICE_SHM_DIR="$work/shm" GPUSLICE_LOG=1 \
    GPUSLICE_SLICE="verify-$$-$slice" "${vars[@]}" "$probe" "$@" 2>>"$log"
}

# wait_joined DIR: until a process has joined a GPU's schedule in the slices' directory DIR (its
# first launch under a share), at most 60 s. The first to join takes each period's first window.
wait_joined() {
  local tries
  for ((tries = 0; tries < 600; ++tries)); do
    compgen -G "$1/gpu-*" >/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# used_memory (MiB) of process PID on the GPU, from nvidia-smi; the only new compute process when
# PID is not listed (a container's PID namespace); empty when none.
used_mib_of() {
  local pid=$1 before=$2 lines p used found=""
  lines=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
    -i "$gpu" 2>/dev/null | tr -d ' ')
  while IFS=, read -r p used; do
    [[ -z "$p" ]] && continue
    if [[ "$p" == "$pid" ]]; then echo "$used"; return; fi
  done <<<"$lines"
  local new=()
  while IFS=, read -r p used; do
    [[ -z "$p" ]] && continue
    [[ " $before " == *" $p "* ]] || new+=("$used")
  done <<<"$lines"
  ((${#new[@]} == 1)) && found=${new[0]}
  echo "$found"
}
compute_pids() {
  nvidia-smi --query-compute-apps=pid --format=csv,noheader -i "$gpu" 2>/dev/null | tr -d ' ' |
    tr '\n' ' '
}
# watch_used PID BEFORE: the highest used_memory of PID while it runs (sampled every 0.3 s).
watch_used() {
  local pid=$1 before=$2 peak="" used
  while kill -0 "$pid" 2>/dev/null; do
    used=$(used_mib_of "$pid" "$before")
    # A number of MiB; nvidia-smi says [N/A] where it cannot tell (some containers, MIG).
    if [[ "$used" =~ ^[0-9]+$ ]] && { [[ -z "$peak" ]] || ((used > peak)); }; then peak=$used; fi
    sleep 0.3
  done
  echo "$peak"
}

# --- (a) info ---------------------------------------------------------------------------------
section "info (natively)"
info=$(native info)
rc=$?
say "$info"
total=$(field total "$info")
if ((rc == 0)) && [[ -n "$total" ]] && ((total > 0)); then
  record info pass "driver $(field driver_version "$info"), $(field devices "$info") device(s), total $(mib "$total") MiB, free $(mib "$(field free "$info")") MiB"
else
  record info fail "the probe's info failed (exit $rc): $info"
  for check in context cap share overhead pytorch; do record "$check" skipped "info failed"; done
  finish
fi
device_total_mib=$(mib "${total:-0}")

# --- (f) what a context takes ---------------------------------------------------------------
# Measured here apart from the interposer (which measures each context itself, through NVML): the
# cap checks judge the allocations plus this figure against the cap. Empty when it cannot be
# known; the cap checks then take the interposer's own figure, and say so.
section "context: device memory of one CUDA context"
context_mib=""
if ((fake)); then
  context_mib=$FAKE_CUDA_CONTEXT_MIB
  record context info "--fake: the test library's contexts take FAKE_CUDA_CONTEXT_MIB=$context_mib MiB"
elif ((!smi)); then
  record context skipped "no nvidia-smi; the cap checks judge by the interposer's own figure"
else
  before=$(compute_pids)
  "$probe" hold --mib 1 --ms 4000 >"$work/hold.out" 2>>"$log" &
  hold_pid=$!
  bg_pids+=("$hold_pid")
  used=$(watch_used "$hold_pid" "$before")
  wait "$hold_pid"
  bg_pids=()
  say "hold --mib 1: $(cat "$work/hold.out"); nvidia-smi used_memory $used MiB"
  if [[ -n "$used" ]] && ((used > 2)); then
    context_mib=$((used - 2))
    record context pass "a context takes $context_mib MiB (used_memory $used MiB with a 1 MiB allocation in a 2 MiB page)"
  else
    record context fail "nvidia-smi did not show the process's memory (used '$used'); the cap checks judge by the interposer's own figure"
  fi
fi
say "the cap checks run with GPUSLICE_CONTEXT_RESERVE_MIB unset (contexts measured by the interposer) and judge by a context of ${context_mib:-?} MiB (?: the interposer's own figure)"

# --- (b) the cap on each allocation path ------------------------------------------------------
section "cap: 4096 MiB, 256 MiB chunks until refused, on every allocation path"
cap_mib=4096
cap_bytes=$((cap_mib * 1048576))
printf '   %-8s %6s %10s %10s %11s %10s %9s %11s\n' PATH CHUNKS ALLOC_MIB CHUNK_MIB FAILED_WITH TOTAL_MIB FREE_MIB CONTEXT_MIB |
  tee -a "$log"
for path in alloc pitch managed async pool array array3d mipmap vmm; do
  out=$(shimmed "cap-$path" GPUSLICE_VRAM_LIMIT_MIB=$cap_mib -- alloc --path "$path" --mib 256)
  rc=$?
  echo "$path: $out" >>"$log"
  chunk=$(field chunk_bytes "$out")
  reserved=$(field reserved_bytes "$out")
  count=$(field allocated "$out")
  failed=$(field failed_with "$out")
  inside_total=$(field total "$out")
  inside_free=$(field free "$out")
  if [[ -z "$count" || -z "$chunk" ]]; then
    record "cap:$path" fail "the probe failed (exit $rc): $out"
    continue
  fi
  # What one chunk counts: the driver's figure when it gives one (pitch, arrays), else the ask.
  per=$chunk
  [[ -n "$reserved" ]] && ((reserved > 0)) && per=$reserved
  counted=$((count * per))
  # What the interposer counted for the context: the slice's use (cap - free inside) less the
  # allocations.
  shim_context=$((${inside_total:-0} - ${inside_free:-0} - counted))
  context_bytes=$((${context_mib:-$((shim_context / 1048576))} * 1048576))
  printf '   %-8s %6s %10s %10s %11s %10s %9s %11s\n' "$path" "$count" "$(mib "$counted")" \
    "$(mib "$per")" "$failed" "$(mib "${inside_total:-0}")" "$(mib "${inside_free:-0}")" \
    "$(mib "$shim_context")" | tee -a "$log"
  context_text="$(mib "$context_bytes") MiB context${context_mib:+ (the interposer counted $(mib "$shim_context"))}"
  if ((count == 0)) && [[ "$failed" != 2 ]]; then
    record "cap:$path" skipped "the driver does not allocate this way here (error $failed)"
  elif [[ "$failed" != 2 ]]; then
    record "cap:$path" fail "stopped with error $failed, not CUDA_ERROR_OUT_OF_MEMORY, after $count chunk(s)"
  elif ((counted + context_bytes > cap_bytes)); then
    record "cap:$path" fail "$(mib "$counted") MiB allocated + $context_text > cap $cap_mib MiB"
  elif [[ "$inside_total" != "$cap_bytes" ]]; then
    record "cap:$path" fail "cuMemGetInfo total $(mib "${inside_total:-0}") MiB, not the cap $cap_mib MiB"
  elif ((counted + context_bytes + 2 * per <= cap_bytes)); then
    record "cap:$path" fail "refused early: $(mib "$counted") MiB allocated + $context_text, cap $cap_mib MiB"
  else
    record "cap:$path" pass "$count x $(mib "$per") MiB = $(mib "$counted") MiB + $context_text <= $cap_mib MiB; refused with OUT_OF_MEMORY; total = cap"
  fi
done

# The device's own view of a process filled up to the cap: in 64 MiB chunks, so that a context
# counted short by more than that shows.
if ((fake)); then
  out=$(shimmed cap-device GPUSLICE_VRAM_LIMIT_MIB=$cap_mib -- alloc --path alloc --mib 64)
  peak=$(field device_peak_bytes "$out")
  say "alloc under the cap, the test library's peak: $(mib "${peak:-0}") MiB"
  if [[ -n "$peak" ]] && ((peak > 0 && peak <= cap_bytes)); then
    record cap:nvml pass "the test library's peak $(mib "$peak") MiB (context included) <= cap $cap_mib MiB"
  else
    record cap:nvml fail "the test library's peak $(mib "${peak:-0}") MiB (context included) > cap $cap_mib MiB"
  fi
elif ((!smi)); then
  record cap:nvml skipped "no nvidia-smi"
else
  before=$(compute_pids)
  # env execs the probe, so that $! is the process nvidia-smi lists.
  env LD_PRELOAD="$shim" GPUSLICE_SHM_DIR="$work/shm" GPUSLICE_LOG=1 GPUSLICE_SLICE="verify-$$-nvml" \
    GPUSLICE_VRAM_LIMIT_MIB=$cap_mib \
    "$probe" alloc --path alloc --mib 64 --hold-ms 3000 >"$work/nvml.out" 2>>"$log" &
  fill_pid=$!
  bg_pids+=("$fill_pid")
  used=$(watch_used "$fill_pid" "$before")
  wait "$fill_pid"
  bg_pids=()
  say "alloc to the cap, holding 3 s: $(cat "$work/nvml.out"); nvidia-smi used_memory at most $used MiB"
  if [[ -z "$used" ]]; then
    record cap:nvml fail "nvidia-smi did not show the process"
  elif ((used <= cap_mib)); then
    record cap:nvml pass "nvidia-smi used_memory at most $used MiB (context included) <= cap $cap_mib MiB"
  else
    record cap:nvml fail "nvidia-smi used_memory $used MiB (context included) > cap $cap_mib MiB"
  fi
fi

# --- (c) compute shares -----------------------------------------------------------------------
section "share: two slices on the GPU, ~1 ms work kernels"
# Calibration, natively: the solo rate R (work iterations per second), first with a guess, then
# with ~1 ms kernels (arg = R/1000) so that the launch gaps are in R too.
solo_rate() {  # solo_rate ARG SECONDS: the most work done in one full window
  local out windows
  out=$(native launch --kernel work --arg "$1" --seconds "$2")
  echo "calibration arg=$1: $out" >>"$log"
  windows=$(array work_per_window "$out")
  awk -v s="$2" -v w="$windows" 'BEGIN { n = split(w, v, " "); best = 0
    for (i = 1; i <= s && i <= n; ++i) if (v[i] > best) best = v[i]
    printf "%.0f", best }'
}
rate0=$(solo_rate 100000 1)
arg=$(calc "int(${rate0:-0} / 1000)")
if ((arg < 1)); then
  record share:250/750 fail "calibration failed (solo rate '${rate0}')"
  record share:100/900 fail "calibration failed"
else
  rate=$(solo_rate "$arg" 2)
  arg=$(calc "int($rate / 1000)")
  say "solo rate R = $rate iterations/s; work kernels of $arg iterations (~1 ms)"
  share_seconds=8
  for pair in "250 750" "100 900"; do
    read -r share_a share_b <<<"$pair"
    for share in $share_a $share_b; do
      shimmed "share-$share_a-$share_b-$share" GPUSLICE_COMPUTE_SHARE_MILLI="$share" \
        GPUSLICE_SHARE_POLICY=strict -- \
        launch --kernel work --arg "$arg" --seconds "$share_seconds" \
        >"$work/share-$share_a-$share_b.$share" &
      bg_pids+=($!)
    done
    wait
    bg_pids=()
    # Windows 1 .. seconds-1 are the full ones after the first.
    judge_shares "share:$share_a/$share_b" "$rate" "$share_seconds" \
      "$work/share-$share_a-$share_b" "" $share_a $share_b
  done
  # Each process waits for every ~1.5 ms kernel before launching the next, as PyTorch's products
  # below do; each order of joining the schedule once.
  arg_each=$(calc "int($rate * 1.5 / 1000)")
  for first in 250 750; do
    second=$((1000 - first))
    shm_each="$work/shm-each-$first"
    mkdir -p "$shm_each"
    for share in $first $second; do
      shimmed "each-$first-$share" GPUSLICE_SHM_DIR="$shm_each" \
        GPUSLICE_COMPUTE_SHARE_MILLI="$share" GPUSLICE_SHARE_POLICY=strict -- \
        launch --kernel work --arg "$arg_each" --seconds "$share_seconds" --in-flight 1 \
        >"$work/each-$first.$share" &
      bg_pids+=($!)
      [[ $share == "$first" ]] && { wait_joined "$shm_each" || say "no schedule in $shm_each"; }
    done
    wait
    bg_pids=()
    judge_shares "share:wait-each:$first-first" "$rate" "$share_seconds" "$work/each-$first" "" \
      250 750
  done
fi

# --- (d) overhead -----------------------------------------------------------------------------
section "overhead: natively and under the interposer (cap set, no share), alternating"
if ((fake)); then
  overhead_args=(--reps 3 --pairs 20000 --launches 100000)
else
  overhead_args=(--reps 5 --pairs 5000 --launches 100000)
fi
lines=$(env -u FAKE_CUDA_ENGINE "$repo/tests/gpu/overhead.sh" "$probe" "$shim" "${overhead_args[@]}" --modes "cap measure" --raw 2>>"$log")
say "$lines"
cap_line=$(grep '^shim mode=cap ' <<<"$lines")
extra=$(sed -n 's/.* alloc_free_extra_ns=\([-0-9.]*\).*/\1/p' <<<"$cap_line")
ratio=$(sed -n 's/.* launch_rate_ratio=\([-0-9.]*\).*/\1/p' <<<"$cap_line")
launch_extra=$(sed -n 's/.* launch_extra_ns=\([-0-9.]*\).*/\1/p' <<<"$cap_line")
measure_line=$(grep '^shim mode=measure ' <<<"$lines")
measure_ratio=$(sed -n 's/.* launch_rate_ratio=\([-0-9.]*\).*/\1/p' <<<"$measure_line")
if [[ -z "$extra" || -z "$ratio" ]]; then
  record overhead fail "the benchmark failed (see the log)"
else
  met=$(calc "($extra < 1000 && $ratio >= 0.97) ? 1 : 0")
  verdict=$([[ $met == 1 ]] && echo pass || echo fail)
  # The targets are a real GPU's: the test library launches several times faster than a driver.
  ((fake)) && verdict=info
  signed() { awk -v x="$1" 'BEGIN { printf "%+.0f", x }'; }
  record overhead "$verdict" \
    "alloc+free $(signed "$extra") ns per pair (target < 1000), launch rate x${ratio} ($(signed "$launch_extra") ns per launch; target >= 0.97); measuring: launch rate x${measure_ratio:-?}"
fi

# --- (e) PyTorch beyond the cap ---------------------------------------------------------------
section "pytorch: 256 MiB tensors under a 2048 MiB cap"
if ((fake)); then
  record pytorch skipped "--fake"
elif ! command -v python3 >/dev/null ||
  ! timeout 120 python3 -c 'import torch; assert torch.cuda.is_available()' >>"$log" 2>&1; then
  record pytorch skipped "no PyTorch"
else
  torch_ok=1
  cat >"$work/torch_cap.py" <<'EOF'
import json
import torch

tensors = []
error = ""
try:
    while len(tensors) < 1000:
        tensors.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
except Exception as e:  # torch.cuda.OutOfMemoryError (a RuntimeError before PyTorch 1.13)
    name = type(e).__name__
    if name == "OutOfMemoryError" or "out of memory" in str(e).lower():
        error = "OutOfMemoryError"
    else:
        error = name + ": " + str(e)[:200]
free, total = torch.cuda.mem_get_info()
print(json.dumps({"tensors": len(tensors), "allocated": len(tensors) * (256 << 20),
                  "reserved": torch.cuda.memory_reserved(), "error": error,
                  "free": free, "total": total}))
EOF
  out=$(timeout 180 env LD_PRELOAD="$shim" GPUSLICE_SHM_DIR="$work/shm" GPUSLICE_LOG=1 \
    GPUSLICE_SLICE="verify-$$-torch" GPUSLICE_VRAM_LIMIT_MIB=2048 \
    python3 "$work/torch_cap.py" 2>>"$log" | tail -1)
  say "$out"
  tensors=$(field tensors "$out")
  reserved=$(field reserved "$out")
  if [[ -z "$tensors" ]]; then
    record pytorch fail "the script failed (see the log): $out"
  elif [[ "$out" != *'"error": "OutOfMemoryError"'* ]]; then
    record pytorch fail "$tensors tensor(s), then not OutOfMemoryError: $out"
  elif ((reserved + ${context_mib:-0} * 1048576 > 2048 * 1048576)); then
    record pytorch fail "PyTorch holds $(mib "$reserved") MiB + ${context_mib:-?} MiB context > cap 2048 MiB"
  else
    record pytorch pass "$tensors x 256 MiB, $(mib "$reserved") MiB reserved + ${context_mib:-?} MiB context <= 2048 MiB, then OutOfMemoryError; mem_get_info total $(mib "$(field total "$out")") MiB"
  fi
fi

# --- (g) PyTorch's kernels under compute shares -----------------------------------------------
# cuBLAS matrix products launched through the CUDA runtime (tests/gpu/torch_share.py): whether
# the runtime's and cuBLAS's launches reach the throttle, judged like the probe's shares.
section "pytorch:share: bf16 matrix products in two slices, 250/750"
if [[ "${torch_ok:-0}" != 1 ]]; then
  for first in 250 750; do
    record "pytorch:share:$first-first" skipped "$([[ $fake == 1 ]] && echo "--fake" || echo "no PyTorch")"
  done
else
  solo=$(timeout 120 python3 "$repo/tests/gpu/torch_share.py" --seconds 3 2>>"$log" | tail -1)
  say "alone: $solo"
  torch_rate=$(awk -v w="$(array work_per_window "$solo")" 'BEGIN { n = split(w, v, " "); best = 0
    for (i = 2; i <= n; ++i) if (v[i] > best) best = v[i]; print best }')
  if ! ((torch_rate > 0)); then
    for first in 250 750; do
      record "pytorch:share:$first-first" fail "the solo run failed (see the log): $solo"
    done
  else
    # The second process starts once the first has joined the schedule (after PyTorch's start-up,
    # a few seconds): 12 s each leaves both running together for most windows. A strict slice
    # running alone is held to its share too.
    share_seconds=12
    for first in 250 750; do
      second=$((1000 - first))
      shm_torch="$work/shm-torch-$first"
      mkdir -p "$shm_torch"
      for share in $first $second; do
        timeout 180 env LD_PRELOAD="$shim" GPUSLICE_SHM_DIR="$shm_torch" GPUSLICE_LOG=1 \
          GPUSLICE_SLICE="verify-$$-torch-$first-$share" GPUSLICE_COMPUTE_SHARE_MILLI=$share \
          GPUSLICE_SHARE_POLICY=strict \
          python3 "$repo/tests/gpu/torch_share.py" --seconds $share_seconds \
          >"$work/torch-$first.$share" 2>>"$log" &
        bg_pids+=($!)
        [[ $share == "$first" ]] && { wait_joined "$shm_torch" || say "no schedule in $shm_torch"; }
      done
      wait
      bg_pids=()
      judge_shares "pytorch:share:$first-first" "$torch_rate" "$share_seconds" \
        "$work/torch-$first" "solo $torch_rate products/s; " 250 750
    done
  fi
fi

# --- summary ----------------------------------------------------------------------------------
finish
