#!/usr/bin/env bash
# Every NCCL symbol that the pinned PyTorch wheel's libtorch_cuda.so imports must be exported by libzwnccl.
#   tests/nccl/torch_symbols.sh LIBZWNCCL [TORCH_VERSION | PATH/libtorch_cuda.so]
# The wheel comes from ~/.cache/zerowire/wheels (ZW_WHEEL_CACHE); when it is missing it is fetched with
# `pip download torch==VERSION --no-deps`. No wheel, no check: that fails loudly (exit 1), it is never skipped, so a
# newer PyTorch that imports more NCCL symbols fails here by name. Given a libtorch_cuda.so (an installed torch, as on
# the GPU machine), that file is checked instead.
set -euo pipefail
lib="$1"
version="${2:-2.11.0}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -f "$version" ]; then
  torch_lib=$version
  what=$torch_lib
else
  torch_lib=$tmp/libtorch_cuda.so
  cache="${ZW_WHEEL_CACHE:-$HOME/.cache/zerowire/wheels}"
  whl=$(ls "$cache"/torch-"$version"-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$whl" ]; then
    mkdir -p "$cache"
    echo "fetching torch==$version (no dependencies) into $cache"
    python3 -m pip download --quiet "torch==$version" --no-deps -d "$cache" ||
      { echo "FAIL: cannot download the torch $version wheel into $cache; the symbol check cannot run" >&2; exit 1; }
    whl=$(ls "$cache"/torch-"$version"-*.whl | head -1)
  fi
  unzip -p "$whl" torch/lib/libtorch_cuda.so >"$tmp/libtorch_cuda.so" ||
    { echo "FAIL: $whl has no torch/lib/libtorch_cuda.so" >&2; exit 1; }
  what="$(basename "$whl")'s libtorch_cuda.so"
fi
nm -D --undefined-only "$torch_lib" | awk '$NF ~ /^p?nccl/ {print $NF}' | sort -u >"$tmp/needed"
nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u >"$tmp/have"
needed=$(wc -l <"$tmp/needed")
[ "$needed" -gt 0 ] || { echo "FAIL: $what imports no nccl symbol (is this a CUDA build of torch?)" >&2; exit 1; }
missing=$(comm -23 "$tmp/needed" "$tmp/have")
if [ -n "$missing" ]; then
  echo "FAIL: $what imports NCCL symbols that $lib does not export:" >&2
  echo "$missing" >&2
  exit 1
fi
echo "ok: all $needed NCCL symbols imported by $what are exported by $(basename "$lib")"
