#!/usr/bin/env bash
# Configures and builds gpuslice. Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
# The binary lands at BUILD_DIR/gpuslice (default BUILD_DIR: build).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
shift || true
cmake -S . -B "$build_dir" -G Ninja "$@" >/dev/null
cmake --build "$build_dir" -j"$(nproc)"
