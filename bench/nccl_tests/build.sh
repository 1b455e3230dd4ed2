#!/usr/bin/env bash
# Builds NVIDIA's nccl-tests (an unmodified copy of ../shared/clients/nccl-tests) against an NCCL install.
#
#   bench/nccl_tests/build.sh OUT_DIR zerowire BUILD_DIR [MPI]   # against libzwnccl of BUILD_DIR (cmake build)
#   bench/nccl_tests/build.sh OUT_DIR system [MPI]               # against the system's NCCL (NCCL_HOME=/usr)
#
# Binaries land in OUT_DIR/bin (all_reduce_perf, ..., with _mpi appended when MPI=1). The source is copied to
# OUT_DIR/src first: the shared folder is never written to. nccl-tests built against NCCL 2.28 also compiles its
# device-API kernels (its -D option), which include NVIDIA's nccl_device.h; zerowire does not implement that API
# (ncclDevCommCreate fails, naming it), so those headers come from an NCCL 2.28 install only to let the copy compile:
# $ZW_NCCL_DEVICE_INCLUDE, else the nvidia-nccl wheel that a Python's torch brings, else the folder of a system
# nccl_device.h, else the nvidia-nccl-cu13 2.28.9 wheel (downloaded with pip into ~/.cache/zerowire/wheels when
# missing). Environment: NVCC_GENCODE (default sm_90, the H200; the tests only link on CPU machines), MPI_HOME
# (default: from mpicc --showme), JOBS (2), BINS (binaries to build, e.g. "all_reduce all_gather"; default all),
# ZW_NCCL_LIB_WAIT_S (zerowire: compile while BUILD_DIR's library is still being built, link once it is there).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$1"; kind="$2"; shift 2
src="${ZW_NCCL_TESTS_SRC:-$repo/../shared/clients/nccl-tests}"
[ -d "$src/src" ] || src=/work/shared/clients/nccl-tests
[ -d "$src/src" ] || { echo "nccl-tests source not found (set ZW_NCCL_TESTS_SRC)" >&2; exit 1; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"

device_headers() {
  if [ -n "${ZW_NCCL_DEVICE_INCLUDE:-}" ]; then echo "$ZW_NCCL_DEVICE_INCLUDE"; return; fi
  local py d
  # Those of the nvidia-nccl wheel that PyTorch brings (2.28.9 for torch 2.11, as zerowire's nccl.h), then a system
  # install's (the GPU machine's NCCL; no network there), then the wheel itself (downloaded).
  for py in ${ZW_TORCH_PYTHON:-} python3 /usr/bin/python3 /opt/torch/.venv/bin/python; do
    command -v "$py" >/dev/null 2>&1 || continue
    d=$("$py" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "include"))' 2>/dev/null) || continue
    if [ -f "$d/nccl_device.h" ]; then echo "$d"; return; fi
  done
  for d in /usr/include /usr/local/include /usr/local/cuda/include; do
    if [ -f "$d/nccl_device.h" ]; then echo "$d"; return; fi
  done
  local cache="${ZW_WHEEL_CACHE:-$HOME/.cache/zerowire/wheels}" whl
  whl=$(ls "$cache"/nvidia_nccl_cu13-2.28.9-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$whl" ]; then
    mkdir -p "$cache"
    python3 -m pip download --quiet nvidia-nccl-cu13==2.28.9 --no-deps -d "$cache" >&2 ||
      { echo "cannot get NCCL 2.28's device headers (no nccl_device.h installed, pip download failed)" >&2; exit 1; }
    whl=$(ls "$cache"/nvidia_nccl_cu13-2.28.9-*.whl | head -1)
  fi
  local dst="$out/nccl-device-headers"
  if [ ! -f "$dst/nvidia/nccl/include/nccl_device.h" ]; then
    rm -rf "$dst" && mkdir -p "$dst"
    unzip -q -o "$whl" 'nvidia/nccl/include/nccl_device*' -d "$dst"
  fi
  echo "$dst/nvidia/nccl/include"
}

case "$kind" in
  zerowire)
    build="$(cd "$1" && pwd)"; shift
    lib="$build/nccl/lib/libnccl.so.2"
    # ZW_NCCL_LIB_WAIT_S=N: the library may still be building (tools/nccl-tests-check.sh builds both at once): the
    # objects compile first and the links wait up to N seconds for it.
    [ -f "$lib" ] || [ "${ZW_NCCL_LIB_WAIT_S:-0}" -gt 0 ] || { echo "$lib missing: build target nccl_shared first" >&2; exit 1; }
    home="$out/home"
    rm -rf "$home" && mkdir -p "$home/include" "$home/lib"
    cp "$repo/src/nccl/include/nccl.h" "$home/include/nccl.h"
    dev="$(device_headers)"
    cp -r "$dev/nccl_device.h" "$dev/nccl_device" "$home/include/"
    ln -s "$lib" "$home/lib/libnccl.so"
    ln -s "$lib" "$home/lib/libnccl.so.2"
    ;;
  system)
    home=""
    for d in /usr /usr/local /usr/local/cuda; do [ -f "$d/include/nccl.h" ] && { home=$d; break; }; done
    [ -n "$home" ] || { echo "no system nccl.h in /usr, /usr/local or /usr/local/cuda" >&2; exit 1; }
    ;;
  *) echo "usage: $0 OUT_DIR zerowire BUILD_DIR [MPI] | OUT_DIR system [MPI]" >&2; exit 2 ;;
esac
mpi="${1:-0}"
mpi_home="${MPI_HOME:-}"
if [ "$mpi" = 1 ] && [ -z "$mpi_home" ]; then
  inc=$(mpicc --showme:incdirs 2>/dev/null | awk '{print $1}')
  [ -n "$inc" ] || { echo "MPI=1 needs mpicc (Open MPI) or MPI_HOME" >&2; exit 1; }
  mpi_home=$(dirname "$inc")
  # -L$(MPI_HOME)/lib: Debian keeps libmpi.so beside include/ in lib/ or in the multiarch folder (linked by default)
fi

rm -rf "$out/src" && cp -r "$src" "$out/src"
chmod -R u+w "$out/src"
suffix=""
[ "$mpi" = 1 ] && suffix=_mpi
targets=()  # BINS="all_reduce all_gather": only those binaries (default: every one)
for b in ${BINS:-}; do targets+=("$out/bin/${b}_perf$suffix"); done
run_make() {
  make -C "$out/src/src" -j"${JOBS:-2}" "$@" BUILDDIR="$out/bin" NCCL_HOME="$home" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
    MPI="$mpi" MPI_HOME="${mpi_home:-/usr}" NAME_SUFFIX="$suffix" \
    NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}" >>"$out/make.log" 2>&1 ||
    { tail -40 "$out/make.log" >&2; echo "nccl-tests build failed (log: $out/make.log)" >&2; exit 1; }
}
: >"$out/make.log"
if [ "$kind" = zerowire ] && [ ! -f "$lib" ]; then
  objects=(os.build "$out/bin/verifiable/verifiable.o" "$out/bin/timer.o" "$out/bin/common$suffix.o" "$out/bin/util$suffix.o")
  for b in ${BINS:-all_reduce all_gather broadcast reduce_scatter reduce alltoall alltoallv scatter gather sendrecv hypercube}; do
    objects+=("$out/bin/$b.o")
  done
  run_make "${objects[@]}"
  waited=0
  while [ ! -f "$lib" ]; do
    [ "$waited" -lt "$ZW_NCCL_LIB_WAIT_S" ] || { echo "$lib still missing after ${waited} s" >&2; exit 1; }
    sleep 1
    waited=$((waited + 1))
  done
  echo "objects compiled; waited ${waited} s for $lib"
fi
run_make "${targets[@]}"
echo "nccl-tests built against $kind NCCL in $out/bin"
