#!/usr/bin/env bash
# Runs the ParvaGPU benchmark (bench/parvagpu_bench.cc): plans ParvaGPU's six SLO scenarios on
# A100-80GB and compares the GPU count with ParvaGPU's own plans (2, 3, 5, 7, 13, 16 GPUs).
#
# Usage: bench/parvagpu.sh DIR [parvagpu_bench options: --exact|--fast|--auto, --time-limit S,
#                               --gpus N, --json]
#   DIR: ParvaGPU's A100-80GB profiles and SLO files, e.g. ../shared/data/parvagpu-a100-80gb
# Builds first if needed: the benchmark target in an existing BUILD_DIR (default build), else
# scripts/build.sh.
# Exit status: the benchmark's (0 every plan feasible, 1 a plan infeasible, 2 bad input).
set -euo pipefail
if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: bench/parvagpu.sh DIR [--exact|--fast|--auto] [--time-limit S] [--gpus N] [--json]" >&2
  echo "  DIR: ParvaGPU's A100-80GB profiles and SLO files, e.g. ../shared/data/parvagpu-a100-80gb" >&2
  exit 2
fi
if [[ ! -d "$1" ]]; then
  echo "bench/parvagpu.sh: $1 is not a directory" >&2
  exit 2
fi
dir=$(cd "$1" && pwd)
shift
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
if [[ -f "$build_dir/build.ninja" ]]; then
  cmake --build "$build_dir" --target parvagpu_bench >/dev/null  # a no-op when up to date
else
  scripts/build.sh "$build_dir" >/dev/null
fi
exec "$build_dir/bench/parvagpu_bench" "$dir" "$@"
