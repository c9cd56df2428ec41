#!/usr/bin/env bash
# Quick start, part 1: set up, build, and run gpuslice's main job on a useful example.
# For now the main job is the MIG explorer: which layouts an H100 allows and how to create one.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build >/dev/null
echo
echo "\$ gpuslice check H100-80GB 3g.40gb,2g.20gb,1g.10gb,1g.10gb"
./build/gpuslice check H100-80GB 3g.40gb,2g.20gb,1g.10gb,1g.10gb
echo
echo "\$ gpuslice layouts H100-80GB --maximal --base"
./build/gpuslice layouts H100-80GB --maximal --base
echo
echo "Try next: ./build/gpuslice gpus | ./build/gpuslice profiles A100-40GB | ./build/gpuslice --help"
