#!/usr/bin/env bash
# Builds zerowire (Release, Ninja, all cores) into build/ and runs the whole ctest suite.
#   ./test.sh [CTEST ARGS...]     e.g. ./test.sh -R zwrun  or  ./test.sh -L unit
# Installs missing build dependencies first (tools/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")"

tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j2 "$@"
