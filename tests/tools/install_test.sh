#!/usr/bin/env bash
# Installs a built zerowire into a temporary prefix and builds two consumers against it: one through
# find_package(zerowire) (CMake) and one through pkg-config; both must link and run.
#   install_test.sh BUILD_DIR CMAKE
# Non-goals: testing system-wide installs or shared libraries.
set -euo pipefail

build_dir=$(cd "$1" && pwd)
cmake=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/zw_install_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

fail() {
  echo "install_test: FAIL: $*" >&2
  exit 1
}

echo "== cmake --install into $prefix"
"$cmake" --install "$build_dir" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "install"; }
for f in include/zerowire/status.h include/zerowire/store.h include/zerowire/config.h bin/zwrun bin/zw_info; do
  [ -e "$prefix/$f" ] || fail "$f was not installed"
done
config=$(find "$prefix" -name zerowireConfig.cmake | head -n1)
pcfile=$(find "$prefix" -name zerowire.pc | head -n1)
[ -n "$config" ] || fail "zerowireConfig.cmake was not installed"
[ -n "$pcfile" ] || fail "zerowire.pc was not installed"

cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
cxx=${cxx:-c++}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

echo "== consumer through find_package(zerowire)"
"$cmake" -S "$here/install_consumer" -B "$work/cmake-consumer" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_STANDARD=20 >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; fail "configuring the find_package consumer"; }
"$cmake" --build "$work/cmake-consumer" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "building it"; }
out=$("$work/cmake-consumer/consumer") || fail "the find_package consumer exited non-zero"
echo "$out"
[[ $out == "zerowire "*" consumer ok: bfloat16" ]] || fail "unexpected output: $out"

echo "== consumer through pkg-config"
PKG_CONFIG_PATH=$(dirname "$pcfile")
export PKG_CONFIG_PATH
flags=$(pkg-config --cflags --libs zerowire) || fail "pkg-config cannot read zerowire.pc"
echo "pkg-config: $flags"
# shellcheck disable=SC2086  # the flags are meant to split
"$cxx" -std=c++20 "$here/install_consumer/main.cc" -o "$work/pc-consumer" $flags || fail "building the pkg-config consumer"
out=$("$work/pc-consumer") || fail "the pkg-config consumer exited non-zero"
echo "$out"
[[ $out == "zerowire "*" consumer ok: bfloat16" ]] || fail "unexpected output: $out"

echo "== installed zw_info runs"
"$prefix/bin/zw_info" >/dev/null || fail "installed zw_info failed"
echo "install_test: PASS"
