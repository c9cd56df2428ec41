#!/usr/bin/env bash
# Configures and builds gpuslice.
# Usage: scripts/build.sh [BUILD_DIR] [--targets "T1 T2 ..."] [extra cmake args...]
# The binary lands at BUILD_DIR/gpuslice (default BUILD_DIR: build). --targets builds only those.
# With ccache installed (scripts/setup.sh installs it) every compile goes through it, so a
# rebuild of unchanged sources, in any build directory of this checkout, is a cache hit.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
shift || true
targets=()
if [ "${1:-}" = "--targets" ]; then
  read -r -a targets <<<"$2"
  shift 2
fi
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # The tests' precompiled header (tests/CMakeLists.txt) is cached too with these.
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
  # Paths below the checkout's parent are hashed relative to it, so a git worktree beside the
  # checkout hits the same cache entries (the compile's directory is left out of the hash too;
  # the debug info then names the first build's directory).
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
  export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
fi
cmake -S . -B "$build_dir" -G Ninja "${launcher[@]}" "$@" >/dev/null
cmake --build "$build_dir" -j"$(nproc)" ${targets[@]+--target "${targets[@]}"}
