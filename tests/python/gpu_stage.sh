#!/usr/bin/env bash
# tests/python/gpu_stage.sh — the `torch` stage of tools/gpu-check.sh (ZW_GPU_TORCH=1): zerowire's torch.distributed
# backend on CUDA tensors, 2 processes sharing GPU 0, on a machine without network.
#   tests/python/gpu_stage.sh BUILD LOG          (gpu-check passes its build directory and log folder)
# BUILD may also be a fresh directory: the package's build then configures it with only what the package needs
# (no tests, no benchmarks; setup.py), the quickest way to run this stage alone.
# Steps, each under its own time limit and never past the budget (ZW_TORCH_BUDGET_S, default 280 s):
#   python    the interpreter with torch: $ZW_TORCH_PYTHON, else the first of `python3` on PATH,
#             /opt/torch/.venv/bin/python3, /usr/bin/python3 that imports torch. Its torch, CUDA and GPU, pip,
#             setuptools, wheel and Python.h are written to torch_env.txt; a missing Python.h or no usable GPU stops
#             the stage here, saying what to install or check.
#   install   `pip install --no-index --no-build-isolation --no-deps --target BUILD/python/site ./python` against
#             BUILD (setup.py configures it with -DZW_TORCH_PYTHON and builds zerowire_torch). Where pip or a
#             setuptools able to build wheels (>= 70.1, or older with `wheel`) is missing, the stage says so and
#             builds the target with CMake and copies the package instead (the pip path is CI's, tests/python);
#             a pip that fails is a failure, and the same fallback still lets the tests run (torch_pip.log).
#   semantics test_cuda_semantics.py: stream order, wait() without host synchronisation, tensors kept alive, futures.
#   matrix    test_collectives.py --part collectives: every op x dtype x size against Gloo on host copies.
#   fsdp2     test_training.py --case fsdp: FSDP2 of a GPT-2-small-like model, losses against Gloo's CUDA path.
#   p2p       test_collectives.py --part p2p: send/recv, batch_isend_irecv, all_to_all with splits, gather, scatter.
# Logs: LOG/torch_{env,pip,semantics,matrix,fsdp2,p2p}.txt; each step prints its last lines and time. A step that
# hangs gets Python's stack of every thread of every rank (faulthandler, 20 s before its limit) in its log.
# ZW_TORCH_DEVICE=cpu runs the same steps on CPU tensors (a dry run of the stage on a machine without GPU).
# Exit status: 0 when every step passed, 1 otherwise (124 when the budget ran out first).
# Non-goals: more than one GPU (issue 18's NCCL comparison is another issue), building zerowire's tests.
set -uo pipefail

BUILD=${1:?usage: gpu_stage.sh BUILD LOG}
LOG=${2:?usage: gpu_stage.sh BUILD LOG}
mkdir -p "$BUILD" "$LOG" || exit 1
BUILD=$(cd "$BUILD" && pwd)  # absolute: setup.py's ZW_BUILD_DIR must be, and pip runs it from python/
LOG=$(cd "$LOG" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEVICE=${ZW_TORCH_DEVICE:-cuda}
DEADLINE=$(($(date +%s) + ${ZW_TORCH_BUDGET_S:-280}))
SITE=$BUILD/python/site
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
worst=0

# step CAP NAME CMD...: CMD under timeout (CAP s, never past the deadline), output in LOG/torch_NAME.txt; prints the
# result, the time and the log's last lines. ZW_TEST_DUMP_S asks the test processes for their stacks before the cut.
step() {
  local cap=$1 name=$2 left rc t0
  shift 2
  left=$((DEADLINE - $(date +%s)))
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -lt 10 ]; then
    echo "   $name: NOT RUN (the stage's budget is spent)"
    worst=124
    return 124
  fi
  t0=$(date +%s)
  ZW_TEST_DUMP_S=$((cap > 40 ? cap - 20 : cap / 2)) timeout -k 5 "$cap" "$@" >"$LOG/torch_$name.txt" 2>&1
  rc=$?
  case $rc in
    0) echo "   $name: ok, $(($(date +%s) - t0)) s" ;;
    124 | 137) echo "   $name: CUT at its ${cap} s limit"; worst=1 ;;
    *) echo "   $name: FAILED (exit $rc), $(($(date +%s) - t0)) s"; worst=1 ;;
  esac
  if [ "$rc" != 0 ]; then  # the first error lines (a build error sits far above pip's traceback), then the end
    grep -m 12 -E 'CMake Error|error:|Error|FAILED|failed|[0-9]+ of [0-9]+ checks' "$LOG/torch_$name.txt" |
      cut -c1-240 | sed 's/^/     ! /'
  fi
  grep -v '^\s*$' "$LOG/torch_$name.txt" | tail -n "$([ "$rc" = 0 ] && echo 3 || echo 15)" | cut -c1-240 | sed 's/^/     /'
  return "$rc"
}

# ---- python ----
py=""
for c in "${ZW_TORCH_PYTHON:-}" "$(command -v python3 || true)" /opt/torch/.venv/bin/python3 /usr/bin/python3; do
  if [ -n "$c" ] && [ -x "$c" ] && timeout 60 "$c" -c 'import torch' >/dev/null 2>&1; then py=$c; break; fi
done
if [ -z "$py" ]; then
  echo "   no python with torch: tried ZW_TORCH_PYTHON='${ZW_TORCH_PYTHON:-}', python3 on PATH, /opt/torch/.venv/bin/python3," \
    "/usr/bin/python3; set ZW_TORCH_PYTHON to one that imports torch"
  exit 1
fi
export ZW_TORCH_DEVICE=$DEVICE
timeout 90 "$py" - >"$LOG/torch_env.txt" 2>&1 <<'PY'
import importlib.metadata, importlib.util, os, sys, sysconfig
import torch
print(f"python {sys.executable} {sys.version.split()[0]}; torch {torch.__version__} (CUDA {torch.version.cuda}) "
      f"at {os.path.dirname(torch.__file__)}")
have = {}
for mod in ("pip", "setuptools", "wheel", "numpy"):  # versions without importing (pip's import upsets setuptools')
    try:
        have[mod] = importlib.metadata.version(mod) if importlib.util.find_spec(mod) else None
    except Exception:  # noqa: BLE001 (any failure means: not usable)
        have[mod] = None
print("modules: " + ", ".join(f"{k} {v or 'MISSING'}" for k, v in have.items()))
st = tuple(int(x) for x in (have["setuptools"] or "0").split(".")[:2] if x.isdigit())
pip_ok = have["pip"] is not None and have["setuptools"] is not None and (st >= (70, 1) or have["wheel"] is not None)
print(f"PIP_BUILD={'yes' if pip_ok else 'no'}")
inc = os.path.join(sysconfig.get_paths()["include"], "Python.h")
print(f"PYTHON_H={'yes' if os.path.exists(inc) else 'no'} ({inc})")
if os.environ["ZW_TORCH_DEVICE"] == "cuda":
    ok = torch.cuda.is_available()
    print(f"CUDA_OK={'yes' if ok else 'no'}" + (f" {torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} "
                                                  f"visible, capability {torch.cuda.get_device_capability(0)}"
                                                  if ok else ""))
else:
    print("CUDA_OK=yes (not needed: ZW_TORCH_DEVICE=cpu)")
PY
rc=$?
sed 's/^/   /' "$LOG/torch_env.txt" | cut -c1-240
[ "$rc" -eq 0 ] || { echo "   FAILED: $py could not report its torch (above)"; exit 1; }
if grep -q '^PYTHON_H=no' "$LOG/torch_env.txt"; then
  echo "   FAILED: no Python.h for $py: the C++ extension cannot be built (install python3-dev for this python)"
  exit 1
fi
if grep -q '^CUDA_OK=no' "$LOG/torch_env.txt"; then
  echo "   FAILED: torch.cuda.is_available() is False for $py (no GPU visible, or a CPU-only torch)"
  exit 1
fi

# ---- install ----
# pip's build (setup.py) configures BUILD with -DZW_TORCH_PYTHON=$py and builds zerowire_torch there.
# direct_install runs through `bash -c` (exported), which shellcheck cannot follow:
# shellcheck disable=SC2317
direct_install() {
  local fresh=()  # a directory gpu-check's build stage did not configure: only what the package needs, as setup.py
  [ -f "$BUILD/CMakeCache.txt" ] || fresh=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DZW_BUILD_TESTS=OFF -DZW_BUILD_BENCH=OFF)
  cmake -S "$ROOT" -B "$BUILD" "${fresh[@]}" -DZW_TORCH_PYTHON="$py" >"$LOG/torch_direct.log" 2>&1 &&
    cmake --build "$BUILD" --target zerowire_torch -j "$(nproc)" >>"$LOG/torch_direct.log" 2>&1 || return 1
  local so
  so=$(find "$BUILD/python/zerowire" -maxdepth 1 -name '_C*.so' | head -1)
  [ -n "$so" ] || return 1
  rm -rf "$SITE/zerowire" && mkdir -p "$SITE/zerowire" && cp "$ROOT"/python/zerowire/*.py "$so" "$SITE/zerowire/"
}
export -f direct_install
export ROOT BUILD LOG SITE py
install_cap=200  # the extension and what changed since the build stage; a fresh BUILD builds zerowire's layers too
[ -f "$BUILD/build.ninja" ] || install_cap=360
if grep -q '^PIP_BUILD=yes' "$LOG/torch_env.txt"; then
  if ! ZW_BUILD_DIR=$BUILD ZW_BUILD_JOBS=$(nproc) step "$install_cap" pip "$py" -m pip install --no-index \
    --disable-pip-version-check --no-build-isolation --no-deps --upgrade --target "$SITE" "$ROOT/python"; then
    echo "   pip install ./python failed (above; counted as a failure): building the package with CMake instead"
    step "$install_cap" direct bash -c direct_install || { echo "   no package: the tests cannot run"; exit 1; }
  fi
else
  echo "   NOTE: $py lacks pip or a setuptools that builds wheels (>= 70.1, or with wheel): pip install ./python is" \
    "not checked here (CI checks it); building the package with CMake instead"
  step "$install_cap" direct bash -c direct_install || { echo "   no package: the tests cannot run"; exit 1; }
fi
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
echo "   package: $("$py" -c 'import zerowire.torch, zerowire._C as c; print(c.__file__)' 2>&1 | tail -1)"

# ---- tests (2 processes sharing GPU 0) ----
T=$ROOT/tests/python
step 60 semantics "$py" "$T/test_cuda_semantics.py" --world 2 --device "$DEVICE"
step 150 matrix "$py" "$T/test_collectives.py" --world 2 --device "$DEVICE" --part collectives
step 150 fsdp2 "$py" "$T/test_training.py" --case fsdp --world 2 --device "$DEVICE"
step 60 p2p "$py" "$T/test_collectives.py" --world 2 --device "$DEVICE" --part p2p
exit "$worst"
