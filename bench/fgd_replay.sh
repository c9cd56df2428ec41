#!/usr/bin/env bash
# FGD (USENIX ATC'23) trace-replay benchmark: replays Alibaba cluster-trace-gpu-v2023 under FGD's
# protocol with every placement policy (`gpuslice replay`), checks the harness against the paper
# artefact's cached results, and compares gpuslice's policy with FGD, side by side in one run.
#
# Usage: bench/fgd_replay.sh DATA_DIR [RESULTS_DIR] [options]
#   DATA_DIR     holds openb_node_list_gpu_node.csv and openb_pod_list_<trace>.csv
#                (e.g. ../shared/data/alibaba-gpu-v2023)
#   RESULTS_DIR  holds the artefact's analysis_allo_discrete.csv (e.g. ../shared/data/fgd-atc23-results);
#                without it the reference columns are left out
# Options:
#   --traces a,b,...   traces to replay (default: the 13 of the issue's target table)
#   --seeds S          seeds (default 42-51)
#   --mig              the MIG variant (A100/H100 in MIG mode, shares rounded up to profiles)
#   --learn            gpuslice learns the request mix online instead of being given it
#   -j N               runs in parallel (default: one per core)
#   --gate             exit 1 when a target is missed or this harness's FGD is more than 5% off the
#                      artefact's on a trace (CI; the figures are deterministic for given seeds)
# Output: one table row per trace (mean unallocated GPUs at 130% arrival per policy, the artefact's
# FGD and BestFit, the harness's deviation from them, gpuslice against FGD), then every
# `replay <trace> <policy> unallocated_gpus=... alloc_ratio=... seeds=N` line.
# Exit status: 0 done (a missed target is reported, not an error, unless --gate), 1 a target
# missed or FGD off the artefact with --gate, 2 bad usage or input.
set -euo pipefail
usage() {
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
[[ $# -ge 1 && "$1" != -* ]] || usage
data=$1
shift
results=""
if [[ $# -ge 1 && "$1" != -* ]]; then
  results=$1
  shift
fi
traces="default,cpu050,cpu100,cpu200,gpushare40,gpushare60,gpushare100,gpuspec10,gpuspec20,gpuspec25,multigpu20,multigpu30,multigpu40"
seeds="42-51"
extra=()
gate=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --traces) traces=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --mig | --learn) extra+=("$1"); shift ;;
    -j) extra+=(-j "$2"); shift 2 ;;
    --gate) gate=1; shift ;;
    *) usage ;;
  esac
done
[[ -f "$data/openb_node_list_gpu_node.csv" ]] || { echo "fgd_replay.sh: no $data/openb_node_list_gpu_node.csv" >&2; exit 2; }
if [[ -n "$results" && ! -f "$results/analysis_allo_discrete.csv" ]]; then
  echo "fgd_replay.sh: no $results/analysis_allo_discrete.csv" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
if [[ -f "$build_dir/build.ninja" ]]; then
  cmake --build "$build_dir" --target gpuslice >/dev/null
else
  scripts/build.sh "$build_dir" >/dev/null
fi

lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
IFS=',' read -ra trace_list <<<"$traces"
for trace in "${trace_list[@]}"; do
  pods="$data/openb_pod_list_$trace.csv"
  [[ -f "$pods" ]] || { echo "fgd_replay.sh: no $pods" >&2; exit 2; }
  "$build_dir/gpuslice" replay --nodes "$data/openb_node_list_gpu_node.csv" --pods "$pods" \
    --policy all --seeds "$seeds" -q "${extra[@]}" | grep -E '^replay [^ ]+ [^ ]+ unallocated_gpus=' >>"$lines"
done

reference=/dev/null
[[ -n "$results" && " ${extra[*]} " != *" --mig "* ]] && reference="$results/analysis_allo_discrete.csv"
mig=0
[[ " ${extra[*]} " == *" --mig "* ]] && mig=1
status=0
awk -v total=6212 -v mig="$mig" -v gate="$gate" '
  FILENAME == ARGV[1] {  # the artefact: mean of column "130" per (workload, policy)
    sub(/\r$/, "")
    m = split($0, f, ",")
    if (FNR == 1) { for (i = 1; i <= m; i++) if (f[i] == "130") col = i; next }
    key = f[1] SUBSEP f[2]; sum[key] += f[col]; cnt[key]++
    next
  }
  {
    trace = $2; policy = $3; split($4, u, "="); un[trace, policy] = u[2]
    if (!(trace in seen)) { seen[trace] = 1; order[++n] = trace }
  }
  function ref(trace, p,   k) {
    k = trace SUBSEP p
    return (k in cnt) ? total * (1 - sum[k] / cnt[k] / 100) : -1
  }
  END {
    printf "%-28s %8s %8s %8s %8s %8s %8s %8s | %8s %8s %7s %7s | %9s %s\n", "trace (unallocated GPUs)", "random", "dotprod",
           "gpuclust", "gpupack", "bestfit", "fgd", "gpuslice", "ref_bf", "ref_fgd", "dev_bf", "dev_fgd", "gs/fgd", "target"
    for (i = 1; i <= n; i++) {
      t = order[i]; rb = ref(t, "05-BestFit"); rf = ref(t, "06-FGD")
      target = "below FGD"
      if (t == "openb_pod_list_default" && !mig) target = "<= 257"
      if (t == "openb_pod_list_default" && !mig) ok = (un[t, "gpuslice"] <= 257)
      else ok = (un[t, "gpuslice"] < un[t, "fgd"]) && (rf < 0 || un[t, "gpuslice"] < rf)
      if (!ok) missed++
      if (rf > 0 && (un[t, "fgd"] - rf) / rf > 0.05 || rf > 0 && (rf - un[t, "fgd"]) / rf > 0.05) {
        off++; off_at = off_at " " t
      }
      printf "%-28s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f | %8s %8s %7s %7s | %8.3f  %s %s\n", t,
             un[t, "random"], un[t, "dotprod"], un[t, "gpuclustering"], un[t, "gpupacking"], un[t, "bestfit"],
             un[t, "fgd"], un[t, "gpuslice"],
             (rb > 0 ? sprintf("%.1f", rb) : "-"), (rf > 0 ? sprintf("%.1f", rf) : "-"),
             (rb > 0 ? sprintf("%+.1f%%", 100 * (un[t, "bestfit"] - rb) / rb) : "-"),
             (rf > 0 ? sprintf("%+.1f%%", 100 * (un[t, "fgd"] - rf) / rf) : "-"),
             un[t, "gpuslice"] / un[t, "fgd"], target, ok ? "met" : "MISSED"
    }
    split("random dotprod gpuclustering gpupacking bestfit fgd", ours, " ")
    split("01-Random 02-DotProd 03-GpuClustering 04-GpuPacking 05-BestFit 06-FGD", theirs, " ")
    worst = -1
    for (i = 1; i <= n; i++) for (j = 1; j <= 6; j++) {
      r = ref(order[i], theirs[j]); if (r <= 0) continue
      d = 100 * (un[order[i], ours[j]] - r) / r; if (d < 0) d = -d; total_dev += d; devs++
      if (d > worst) { worst = d; worst_at = order[i] " " ours[j] }
    }
    if (devs > 0) printf "harness against the artefact, all six of its policies on these traces: mean |dev| %.1f%%, max %.1f%% (%s)\n", total_dev / devs, worst, worst_at
    print "ref_*: the FGD artefact'"'"'s cached results (10-seed mean of column 130); dev_*: this harness against them;"
    print "gs/fgd: gpuslice'"'"'s unallocated GPUs over FGD'"'"'s in the same run (lower is better)"
    if (gate && missed > 0) printf "GATE: %d target(s) missed\n", missed
    if (gate && off > 0) printf "GATE: this harness'"'"'s FGD is more than 5%% off the artefact'"'"'s on%s\n", off_at
    if (gate && (missed > 0 || off > 0)) exit 1
  }' "$reference" "$lines" || status=$?
cat "$lines"
exit "$status"
