#!/usr/bin/env bash
# nccl-tests builds against libzwnccl (bench/nccl_tests/build.sh, MPI=0) and imports nothing libzwnccl lacks.
#   tests/nccl/nccl_tests_build.sh BUILD_DIR OUT_DIR
set -euo pipefail
build="$1" out="$2"
here="$(cd "$(dirname "$0")" && pwd)"
ninja -C "$build" nccl_shared >/dev/null
# ZW_NCCL_TESTS_PREBUILT=1 re-checks an existing build without compiling again.
[ "${ZW_NCCL_TESTS_PREBUILT:-0}" = 1 ] || "$here/../../bench/nccl_tests/build.sh" "$out" zerowire "$build" 0
# The copy was compiled against zerowire's nccl.h (a CUDA install may ship NVIDIA's in its default include path).
echo '#include "nccl.h"' | "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" -x cu -E -I"$out/home/include" - >"$out/nccl_h.i" 2>&1 || true
grep -q "\"$out/home/include/nccl.h\"" "$out/nccl_h.i" ||
  { echo "FAIL: nvcc does not take nccl.h from $out/home/include (see $out/nccl_h.i)"; exit 1; }
lib="$build/nccl/lib/libnccl.so.2"
nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u >"$out/exported.txt"
fail=0
for bin in all_reduce all_gather reduce_scatter broadcast reduce alltoall alltoallv sendrecv gather scatter hypercube; do
  exe="$out/bin/${bin}_perf"
  [ -x "$exe" ] || { echo "FAIL: $exe was not built"; fail=1; continue; }
  missing=$(nm -D --undefined-only "$exe" | awk '$NF ~ /^nccl/ {print $NF}' | sort -u | comm -23 - "$out/exported.txt")
  [ -z "$missing" ] || { echo "FAIL: ${bin}_perf imports $missing"; fail=1; }
  # No rpath in the copy (its Makefile is not edited): LD_LIBRARY_PATH puts zerowire's libnccl.so.2 first.
  got=$(LD_LIBRARY_PATH="$build/nccl/lib" ldd "$exe" | awk '/libnccl.so.2/ {print $3}')
  [ "$(readlink -f "$got")" = "$(readlink -f "$lib")" ] || { echo "FAIL: ${bin}_perf loads $got, not $lib"; fail=1; }
done
[ $fail -eq 0 ] && echo "ok: every nccl-tests binary links against libzwnccl and imports only what it exports"
exit $fail
