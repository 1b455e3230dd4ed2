#!/usr/bin/env bash
# Installs the Debian packages zerowire needs to build and test (compilers, CMake/Ninja, GoogleTest/GMock,
# Google Benchmark, hwloc, rdma-core, CLI11, nlohmann-json, python3, and clang with libFuzzer's runtime for the fuzz
# targets of tests/fuzz).
#
# Idempotent: when every package is already installed (per dpkg-query) it changes nothing. Otherwise it runs
# `apt-get update` once and installs only the missing packages. Runs as root (CI) or through sudo.
# Non-goals: CUDA, UCX or other optional backends; non-Debian distributions.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libhwloc-dev libibverbs-dev librdmacm-dev
  libcli11-dev nlohmann-json3-dev libopenblas-dev
  python3 python3-matplotlib python3-venv tmux
  clang libclang-rt-14-dev
)

is_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

missing=()
for p in "${packages[@]}"; do
  is_installed "$p" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed; nothing to do"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install-deps: missing packages (${missing[*]}) and not root and no sudo; install them as root" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
