#!/usr/bin/env bash
# Quick start, part 1: set up, build, and run gpuslice's main job on useful examples:
#   1. the MIG explorer: is a layout valid on an H100, where does each instance go;
#   2. applying mig-parted configs to a simulated machine (no GPU needed): apply, change, status.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build >/dev/null
g=./build/gpuslice
run() { echo; echo "\$ gpuslice $*"; "$g" "$@"; }

run check H100-80GB 3g.40gb,2g.20gb,1g.10gb,1g.10gb

machine=$(mktemp -d)/machine.json
run sim create "$machine" 2xH100-80GB,1xA100-40GB
run apply --sim "$machine" -f examples/mig-config.yaml -c all-balanced
run apply --sim "$machine" -f examples/mig-config.yaml -c inference
run status --sim "$machine"
echo
echo "Try next: $g gpus | $g profiles A100-40GB | $g layouts H100-80GB --maximal | $g --help"
