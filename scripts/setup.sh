#!/usr/bin/env bash
# Installs the Debian 12 packages gpuslice needs to build and test. Idempotent: installs only what
# is missing, and runs `apt-get update` only when something is. Needs root (or sudo) for installing.
set -euo pipefail

PACKAGES=(
  g++ cmake ninja-build pkg-config git
  libabsl-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev
  clang-format coinor-libcbc-dev libsqlite3-dev libssl-dev libpq-dev libcpp-httplib-dev
  libjemalloc-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  postgresql
  prometheus
  clang libclang-rt-14-dev
  ccache
)

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
