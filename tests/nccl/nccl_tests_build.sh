#!/usr/bin/env bash
# nccl-tests builds against libzwnccl (bench/nccl_tests/build.sh, MPI=0) and imports nothing libzwnccl lacks.
#   tests/nccl/nccl_tests_build.sh BUILD_DIR OUT_DIR
set -euo pipefail
build="$1" out="$2"
here="$(cd "$(dirname "$0")" && pwd)"
ninja -C "$build" nccl_shared >/dev/null
"$here/../../bench/nccl_tests/build.sh" "$out" zerowire "$build" 0
# The copy was compiled against zerowire's nccl.h (a CUDA install may ship NVIDIA's in its default include path).
echo '#include "nccl.h"' | "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" -x cu -E -I"$out/home/include" - 2>/dev/null |
  grep -q "\"$out/home/include/nccl.h\"" || { echo "FAIL: nvcc does not take nccl.h from $out/home/include"; exit 1; }
lib="$build/nccl/lib/libnccl.so.2"
nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u >"$out/exported.txt"
fail=0
for bin in all_reduce all_gather reduce_scatter broadcast reduce alltoall alltoallv sendrecv gather scatter hypercube; do
  exe="$out/bin/${bin}_perf"
  [ -x "$exe" ] || { echo "FAIL: $exe was not built"; fail=1; continue; }
  missing=$(nm -D --undefined-only "$exe" | awk '$NF ~ /^nccl/ {print $NF}' | sort -u | comm -23 - "$out/exported.txt")
  [ -z "$missing" ] || { echo "FAIL: ${bin}_perf imports $missing"; fail=1; }
  ldd "$exe" | grep -q "$build/nccl/lib/libnccl.so.2\|libnccl.so.2 => .*$(basename "$build")" ||
    echo "note: ${bin}_perf resolves libnccl.so.2 as: $(ldd "$exe" | grep libnccl || echo 'not found')"
done
[ $fail -eq 0 ] && echo "ok: every nccl-tests binary links against libzwnccl and imports only what it exports"
exit $fail
