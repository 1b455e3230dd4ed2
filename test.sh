#!/usr/bin/env bash
# Builds zerowire (Release, Ninja, all cores) into build/ and runs the whole ctest suite, then the fuzz targets'
# short runs from a clang build in build/fuzz.
#   ./test.sh [CTEST ARGS...]     e.g. ./test.sh -R zwrun  or  ./test.sh -L unit
# Installs missing build dependencies first (tools/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")"

tools/install-deps.sh
# The torch backend's tests (python/, tests/python) run in a cached venv with the pinned torch, made once; this
# fails (saying why) rather than leaving those tests out.
torch_python=$(tools/torch-env.sh)
# With a CUDA toolkit, the attention on cuDNN is built too: its frontend headers come from PyPI once (cached).
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then tools/cudnn-frontend.sh >/dev/null; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DZW_TORCH_PYTHON="$torch_python"
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j2 "$@"
# The long fault campaigns (kill -9 / SIGSTOP at 2-8 ranks, the soak, checkpoint kills) only when asked:
# ZW_FAULT_CAMPAIGN=TRIALS ./test.sh (figures go to build/fault-campaign.txt; docs/RELIABILITY.md says how to read them).
if [[ -n ${ZW_FAULT_CAMPAIGN:-} ]]; then tests/fault/campaign.sh build "$ZW_FAULT_CAMPAIGN"; fi
# The fuzz targets (tests/fuzz) need clang: a build of their own in build/fuzz (ASan + UBSan + libFuzzer, only the
# fuzz targets), each run for a few seconds from its committed seed corpus (ctest label fuzz).
cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DZW_FUZZ=ON -DZW_BUILD_BENCH=OFF
cmake --build build/fuzz -j "$(nproc)" --target zw_fuzz
ctest --test-dir build/fuzz --output-on-failure -j2 -L fuzz "$@"
