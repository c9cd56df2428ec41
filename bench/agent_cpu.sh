#!/usr/bin/env bash
# The agent's own CPU cost at a 1 s collection interval (issue 7: under 1% of one core).
#
# Starts `gpuslice serve` (a simulated L4, so that MIG slices can only go to the agent) and
# `gpuslice agent --interval 1 --metrics-listen` on a simulated machine kept in a state file:
# 8 H100-80GB in MIG mode. 56 small leases are granted there, so the agent sets up 7 1g.10gb
# instances per GPU, and a process is put in each instance. A scraper then GETs the agent's
# /metrics every second (as a Prometheus server would) while the agent runs its rounds (assignments,
# usage report of 56 leases) for SECONDS; the agent's CPU time over that wall time comes from
# /proc/PID/stat (utime + stime).
#
# Usage: bench/agent_cpu.sh [--seconds N] [--no-scrape]   (default 30 s; BUILD_DIR=build by default)
#   --no-scrape: no scraper, the agent's rounds alone
# Ends with:
#   agent_cpu cpu_pct=<x> interval_s=1 seconds=<n> leases=<l> scrapes=<s> scrape_bytes=<b> loadavg=<1 min>
set -euo pipefail
seconds=30
scrape=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --no-scrape) scrape=0; shift ;;
    *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
if [[ -f "$build_dir/build.ninja" ]]; then
  built=$(cmake --build "$build_dir" --target gpuslice 2>&1) || { tail -20 <<<"$built" >&2; exit 1; }
else
  scripts/build.sh "$build_dir" >/dev/null
fi
bin="$(pwd)/$build_dir/gpuslice"
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# A free loopback port: one that nothing answers on.
free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 30000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "$port"; return; fi
  done
}
# GET PATH on 127.0.0.1:PORT with bash's /dev/tcp; the whole answer on stdout.
http_get() (
  exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
  printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$2" >&3
  cat <&3
)
wait_for() {  # wait_for SECONDS COMMAND...: polls every 0.2 s
  local limit=$1; shift
  local deadline=$((SECONDS + limit))
  until "$@"; do
    if ((SECONDS >= deadline)); then echo "agent_cpu: timed out waiting for: $*" >&2; return 1; fi
    sleep 0.2
  done
}

serve_port=$(free_port)
"$bin" serve --sim-fleet 1xL4 --listen "127.0.0.1:$serve_port" --db "$work/g.db" \
  --admin-token-file "$work/t" --tick 1 --insecure >"$work/serve.log" 2>&1 &
pids+=($!)
serve_ok() { http_get "$serve_port" /v1/health 2>/dev/null | grep -q '"ok"'; }
wait_for 30 serve_ok
export GPUSLICE_SERVER="http://127.0.0.1:$serve_port" GPUSLICE_TOKEN
GPUSLICE_TOKEN=$(head -1 "$work/t")
"$bin" admin tenant bench --quota small=56 >/dev/null
user_token=$("$bin" admin user bench-user --tenant bench | head -1)
agent_token=$("$bin" admin user bench-agent --agent --machine bench-node | head -1)

# The agent's machine: 8 H100-80GB, MIG on, no instances yet.
"$bin" sim create "$work/machine.json" 8xH100-80GB >/dev/null
cat >"$work/mig-on.yaml" <<'EOF'
version: v1
mig-configs:
  mig-on:
    - devices: all
      mig-enabled: true
      mig-devices: {}
EOF
"$bin" apply --sim "$work/machine.json" -f "$work/mig-on.yaml" -c mig-on >/dev/null
metrics_port=$(free_port)
"$bin" agent --server "$GPUSLICE_SERVER" --token "$agent_token" --host bench-node \
  --sim-state "$work/machine.json" --interval 1 --metrics-listen "127.0.0.1:$metrics_port" \
  >"$work/agent.log" 2>&1 &
agent_pid=$!
pids+=("$agent_pid")
agent_reported() { grep -q "reported" "$work/agent.log"; }
wait_for 30 agent_reported

# 56 small leases: 7 1g.10gb instances on each GPU, then a process in each.
for _ in $(seq 56); do
  "$bin" acquire --token "$user_token" --class small --purpose "agent_cpu bench" --no-wait >/dev/null
done
instances() { "$bin" status --sim "$work/machine.json" --json | grep -c '"gpu_instance"'; }
all_set_up() { [[ $(instances) -eq 56 ]]; }
wait_for 60 all_set_up
pid=100000
"$bin" status --sim "$work/machine.json" --json |
  awk '/^      "index": / { gsub(",", "", $2); gpu = $2 }
       /"compute_instance": / { gsub(",", "", $2); ci = $2 }
       /"gpu_instance": / { gsub(",", "", $2); print gpu, $2, ci }' >"$work/instances.txt"
while read -r gpu gi ci; do
  pid=$((pid + 1))
  "$bin" sim process add "$work/machine.json" --gpu "$gpu" --gi "$gi" --ci "$ci" --pid "$pid" \
    --memory $((2048 + pid % 7 * 512)) >/dev/null
done <"$work/instances.txt"
leases=$(wc -l <"$work/instances.txt")
sleep 3  # the agent's first rounds over the busy instances

# The scraper: GET /metrics every second (with --no-scrape, once at the end).
touch "$work/scrapes"
(
  while ((scrape)); do
    http_get "$metrics_port" /metrics >"$work/scrape.txt.tmp" 2>/dev/null &&
      mv "$work/scrape.txt.tmp" "$work/scrape.txt" && echo x >>"$work/scrapes"
    sleep 1
  done
) &
pids+=($!)

ticks() { awk '{ print $14 + $15 }' "/proc/$agent_pid/stat"; }  # utime + stime, in clock ticks
hz=$(getconf CLK_TCK)
start_ticks=$(ticks)
start_ns=$(date +%s%N)
sleep "$seconds"
end_ticks=$(ticks)
end_ns=$(date +%s%N)
((scrape)) || http_get "$metrics_port" /metrics >"$work/scrape.txt"
scrapes=$(wc -l <"$work/scrapes")
bytes=$(wc -c <"$work/scrape.txt")
if ! grep -q '^HTTP/1.1 200' "$work/scrape.txt"; then
  echo "agent_cpu: the agent's /metrics did not answer 200:" >&2
  head -5 "$work/scrape.txt" >&2
  exit 1
fi
cpu_pct=$(awk -v t=$((end_ticks - start_ticks)) -v hz="$hz" -v ns=$((end_ns - start_ns)) \
  'BEGIN { printf "%.2f", 100 * (t / hz) / (ns / 1e9) }')
echo "agent_cpu cpu_pct=$cpu_pct interval_s=1 seconds=$seconds leases=$leases scrapes=$scrapes" \
  "scrape_bytes=$bytes loadavg=$(cut -d' ' -f1 /proc/loadavg)"
