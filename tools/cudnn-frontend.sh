#!/usr/bin/env bash
# Fetches, once, the pinned cudnn-frontend headers (NVIDIA's header-only C++ API over cuDNN's graphs; zerowire's
# attention on cuDNN is built with it, cmake/cudnn.cmake) and prints their include directory on stdout.
#   inc=$(tools/cudnn-frontend.sh)   # ${ZW_CACHE:-$HOME/.cache/zerowire}/cudnn-frontend-1.32.0/include
#
# Debian does not package the frontend; NVIDIA publishes it on PyPI as the wheel nvidia-cudnn-frontend, whose
# include/ is the C++ library (Apache-2.0 AND MIT). The wheel is downloaded (no install: its Python module is not
# used), its include/ unpacked into the cache, and a marker written; an incomplete copy is made again; concurrent
# callers serialise on a lock file. A wheel in $ZW_CACHE/wheels is used without the network. Fails, saying why, when
# neither works: the build then leaves the cuDNN path out and says so. For a machine without PyPI, copy the printed
# directory's parent to .deps/cudnn-frontend in the source tree.
set -euo pipefail

version=1.32.0
cache=${ZW_CACHE:-$HOME/.cache/zerowire}
dest=$cache/cudnn-frontend-$version
marker=$dest/.zw-complete
wheels=$cache/wheels
python=${ZW_PYTHON:-python3}

say() { echo "cudnn-frontend: $*" >&2; }
ready() { [ -f "$marker" ] && [ -f "$dest/include/cudnn_frontend.h" ]; }

if ready; then
  echo "$dest/include"
  exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/cudnn-frontend.lock"
flock 9
if ready; then
  echo "$dest/include"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
spec="nvidia-cudnn-frontend==$version"
if ! "$python" -m pip download -q --no-deps --only-binary=:all: --no-index --find-links "$wheels" -d "$tmp" "$spec" \
  >&2 2>/dev/null; then
  say "downloading $spec from PyPI"
  if ! "$python" -m pip download -q --no-deps --only-binary=:all: --retries 1 --timeout 15 -d "$tmp" "$spec" >&2; then
    say "cannot fetch $spec (no wheel in $wheels and PyPI unreachable)"
    exit 1
  fi
fi
wheel=$(ls "$tmp"/*.whl)
rm -rf "$dest"
mkdir -p "$dest"
"$python" - "$wheel" "$dest" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("include/") or n.endswith("LICENSE.txt")]
    z.extractall(dest, names)
PY
[ -f "$dest/include/cudnn_frontend.h" ] || { say "the wheel has no include/cudnn_frontend.h"; exit 1; }
echo "$spec" > "$marker"
echo "$dest/include"
