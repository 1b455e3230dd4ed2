#!/usr/bin/env bash
# Creates, once, a cached virtual environment with the pinned PyTorch the python/ package is tested against, and
# prints the path of its python on stdout (progress goes to stderr).
#   py=$(tools/torch-env.sh)        # ${ZW_CACHE:-$HOME/.cache/zerowire}/venv-torch-2.11.0/bin/python
#
# Idempotent: an environment whose marker (.zw-complete, written after a successful install) lists the same
# requirements is reused as it is; one with other requirements gets them installed; an incomplete one (an
# interrupted install) is removed and made again. Concurrent callers serialise on a lock file.
# Wheels in $ZW_CACHE/wheels (e.g. from `pip download torch==2.11.0 -d ...`) are tried alone first (no network),
# then PyPI. Fails, saying why, when python3's venv module or the wheels are unavailable: the torch tests never skip
# silently.
# Non-goals: CUDA-specific wheel indexes (PyPI's default torch for the platform is installed), other Pythons.
set -euo pipefail

TORCH_VERSION=2.11.0
# setuptools >= 70.1 builds wheels without the `wheel` package (pip install ./python needs it); numpy silences
# torch's warning at every import.
requirements=("torch==$TORCH_VERSION" "setuptools>=70.1" numpy)
cache=${ZW_CACHE:-$HOME/.cache/zerowire}
venv=$cache/venv-torch-$TORCH_VERSION
py=$venv/bin/python
marker=$venv/.zw-complete
wheels=$cache/wheels
python=${ZW_PYTHON:-python3}

say() { echo "torch-env: $*" >&2; }
ready() { [ -x "$py" ] && [ -f "$marker" ] && [ "$(cat "$marker")" = "${requirements[*]}" ]; }

if ready; then
  echo "$py"
  exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/venv-torch.lock"
flock 9
if ready; then  # made by another caller while this one waited for the lock
  echo "$py"
  exit 0
fi

if [ ! -x "$py" ] || [ ! -f "$marker" ]; then
  command -v "$python" >/dev/null || { say "no $python on PATH (tools/install-deps.sh installs python3)"; exit 1; }
  rm -rf "$venv"
  say "creating $venv with ${requirements[*]} (once; several GB)"
  if ! "$python" -m venv "$venv" >&2; then
    say "'$python -m venv' failed (Debian: apt-get install python3-venv)"
    exit 1
  fi
fi
pip=("$py" -m pip install --disable-pip-version-check "${requirements[@]}")
# The cached wheels alone first (no network); PyPI (with the cached wheels as extra candidates) when they fall short.
if ! { [ -d "$wheels" ] && "${pip[@]}" --no-index --find-links "$wheels" >&2; }; then
  find_links=()
  [ -d "$wheels" ] && find_links=(--find-links "$wheels")
  if ! "${pip[@]}" "${find_links[@]}" >&2; then
    say "pip could not install ${requirements[*]} (needs PyPI, or the wheels in $wheels)"
    exit 1
  fi
fi
"$py" -c "import torch, torch.distributed as d; assert d.is_available() and d.is_gloo_available()" >&2
echo "${requirements[*]}" > "$marker"
say "ready: $py"
echo "$py"
