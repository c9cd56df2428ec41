#!/usr/bin/env bash
# Quick start, part 1: set up, build, and run gpuslice's main job on useful examples:
#   1. the allocation service (gpuslice serve) on this machine's GPUs, or a simulated fleet and
#      SQLite when there is no GPU: a tenant, a user, a slice acquired, a command run in a slice,
#      leases listed and audited, a fixed MIG layout applied;
#   2. the MIG explorer: is a layout valid on an H100, where does each instance go;
#   3. applying mig-parted configs to a simulated machine (no GPU needed): apply, change, status;
#   4. planning a fleet (examples/plan), then applying the plan of one node to a simulated copy of it;
#   5. choosing a placement policy: replaying a request trace under every policy (examples/place, or
#      Alibaba's trace when ../shared/data/alibaba-gpu-v2023 is there);
#   6. Kubernetes: the resources and node labels the device plugin would offer for part 3's machine.
# To keep the service running afterwards: build/gpuslice serve
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Only what this script runs (the gpuslice command), with ninja's progress; scripts/test.sh builds
# the tests and benchmarks.
echo "building build/gpuslice (the first time takes a while on a small machine)"
scripts/build.sh build --targets gpuslice
g=./build/gpuslice
run() { echo; echo "\$ gpuslice $*"; "$g" "$@"; }
section() { echo; echo "== $*"; }

section "1. The allocation service: gpuslice serve hands out slices (here on a simulated fleet)"
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
# No NVIDIA driver here: serve says so and uses a simulated fleet; the store is SQLite in $work.
(cd "$work" && exec "$OLDPWD/$g" serve --listen "127.0.0.1:$port" --tick 1) >"$work/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  grep -q "listen:" "$work/serve.log" 2>/dev/null && break
  sleep 0.2
done
cat "$work/serve.log"
# serve speaks TLS with the self-signed certificate it made in $work on its first start.
export GPUSLICE_SERVER="https://127.0.0.1:$port"
export GPUSLICE_CA="$work/gpuslice-tls.crt"
export GPUSLICE_TOKEN=$(cat "$work/gpuslice-admin.token")
run admin tenant team-a --quota small=2 --quota medium=1
ann=$("$g" admin user ann --tenant team-a)
echo "(ann's token: ${ann:0:6}...)"
GPUSLICE_TOKEN=$ann run acquire --class small --purpose "notebook: embeddings experiment"
GPUSLICE_TOKEN=$ann run acquire --class full --purpose "asks for a whole GPU" || true
GPUSLICE_TOKEN=$ann run lease env 1
# Run a command in a slice: acquired, CUDA_VISIBLE_DEVICES set to its MIG UUID, released at exit.
GPUSLICE_TOKEN=$ann run run --class small --purpose "eval job" -- sh -c 'echo "the job sees CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"'
run leases --all
# Fix the MIG layout of this machine's GPU 7 (two 3g.40gb): serve carries it out at its next tick
# (a lease holding an instance there would be named instead, and nothing changed).
me=$(uname -n)
printf 'version: v1\nmig-configs:\n  gpuslice-%s:\n    - devices: [7]\n      mig-enabled: true\n      mig-devices: {"3g.40gb": 2}\n' "$me" >"$work/layout.yaml"
run node set-layout "$me" "$work/layout.yaml" || true
sleep 2
run node show "$me"
run audit
kill -TERM $server && wait $server || true
trap - EXIT
unset GPUSLICE_SERVER GPUSLICE_TOKEN GPUSLICE_CA

section "2. The MIG explorer: is this H100 layout valid, and where does each instance go?"
run check H100-80GB 3g.40gb,2g.20gb,1g.10gb,1g.10gb

section "3. Apply mig-parted configs to a simulated machine (2x H100-80GB, 1x A100-40GB)"
machine=$(mktemp -d)/machine.json
run sim create "$machine" 2xH100-80GB,1xA100-40GB
run apply --sim "$machine" -f examples/mig-config.yaml -c all-balanced
run apply --sim "$machine" -f examples/mig-config.yaml -c inference
run status --sim "$machine"

section "4. Plan a fleet (examples/plan: 9 workloads, 2 nodes), then apply node gpu-a100-01's part"
plan=$(mktemp -d)/plan
run plan -w examples/plan/workloads.yaml -f examples/plan/fleet.yaml --out-dir "$plan" --brief
# A simulated copy of node gpu-a100-01 of examples/plan/fleet.yaml (4x A100-80GB, GPU 3 kept whole).
node=$(mktemp -d)/gpu-a100-01.json
run sim create "$node" 4xA100-80GB
run apply --sim "$node" -f "$plan/mig-config.yaml" -c gpuslice-gpu-a100-01
run assert --sim "$node" -f "$plan/mig-config.yaml" -c gpuslice-gpu-a100-01
run status --sim "$node"

section "5. Choose a placement policy: replay a request trace under every policy, side by side"
alibaba=../shared/data/alibaba-gpu-v2023
if [[ -f "$alibaba/openb_pod_list_default.csv" ]]; then
  run replay --nodes "$alibaba/openb_node_list_gpu_node.csv" --pods "$alibaba/openb_pod_list_default.csv" -q
else
  run replay --nodes examples/place/nodes.csv --pods examples/place/pods.csv --seeds 1-5 -q
fi

section "6. Kubernetes: what the simulated machine of part 3 offers to kubelet (device plugin, node labels)"
run device-plugin --once --sim "$machine"
# GPUs without MIG: one whole (nvidia.com/gpu), one in units of gpuslice.io/gpu-share.
l4=$(mktemp -d)/l4-node.json
run sim create "$l4" 2xL4
run device-plugin --once --sim "$l4" --shared-gpus 1
echo
echo "Try next: $g gpus | $g profiles A100-40GB | $g layouts H100-80GB --maximal | $g --help"
echo "          $g plan -w examples/plan/workloads.yaml -f examples/plan/fleet.yaml --current $plan/assignment.json"
