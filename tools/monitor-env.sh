#!/usr/bin/env bash
# Creates, once, a cached virtual environment with prometheus_client (the monitoring tests parse the metrics endpoint
# with its own text parser) and prints the path of its python on stdout (progress goes to stderr).
#   py=$(tools/monitor-env.sh)      # ${ZW_CACHE:-$HOME/.cache/zerowire}/venv-monitor/bin/python
#
# Idempotent, like tools/torch-env.sh: an environment whose marker (.zw-complete) lists the same requirements is
# reused; an incomplete one is made again; concurrent callers serialise on a lock file. Wheels in $ZW_CACHE/wheels are
# tried alone first (no network), then PyPI. Fails, saying why, when neither works: the tests then skip loudly.
# Non-goals: anything beyond the parser the tests need.
set -euo pipefail

requirements=("prometheus_client==0.21.1")
cache=${ZW_CACHE:-$HOME/.cache/zerowire}
venv=$cache/venv-monitor
py=$venv/bin/python
marker=$venv/.zw-complete
wheels=$cache/wheels
python=${ZW_PYTHON:-python3}

say() { echo "monitor-env: $*" >&2; }
ready() { [ -x "$py" ] && [ -f "$marker" ] && [ "$(cat "$marker")" = "${requirements[*]}" ]; }

if ready; then
  echo "$py"
  exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/venv-monitor.lock"
flock 9
if ready; then
  echo "$py"
  exit 0
fi
rm -rf "$venv"
if ! "$python" -m venv "$venv" >&2; then
  say "cannot create a virtual environment with $python -m venv (install python3-venv)"
  exit 1
fi
if ! "$py" -m pip install -q --no-index --find-links "$wheels" "${requirements[@]}" >&2 2>/dev/null; then
  say "installing ${requirements[*]} from PyPI"
  if ! "$py" -m pip install -q --retries 1 --timeout 15 "${requirements[@]}" >&2; then
    say "cannot install ${requirements[*]} (no wheel in $wheels and PyPI unreachable)"
    exit 1
  fi
fi
echo "${requirements[*]}" > "$marker"
echo "$py"
