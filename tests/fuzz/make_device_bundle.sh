#!/usr/bin/env bash
# Makes the bundle that runs the long fuzz campaign on another machine (the GPU host, Ubuntu 24.04; this VM is
# Debian 12): BUILD/device/bin (every fuzz target, debug info stripped: crash inputs are reproduced here with the
# full build), BUILD/device/lib (the shared libraries they need beyond glibc, libstdc++ and libgcc_s, which that
# host has; libFuzzer and the sanitizers' runtimes are linked in statically), BUILD/device/corpora.tgz (the corpora
# of the last campaign here, BUILD/tests/fuzz/long/<target>/corpus) and BUILD/device/run.sh (device_run.sh).
# Checks that every library resolves inside lib/ and that every target runs its seeds with only lib/ added.
#   tests/fuzz/make_device_bundle.sh [BUILD]     (default build-fuzz, already built: ninja -C BUILD zw_fuzz)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-fuzz}
dev=$build/device
rm -rf "$dev" && mkdir -p "$dev/bin" "$dev/lib"
targets=()
for b in "$build"/tests/fuzz/fuzz_*; do
  n=$(basename "$b")
  [ "$n" = fuzz_corpus_gen ] || [ ! -x "$b" ] || [ -d "$b" ] || targets+=("$n")
done
system='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libstdc\+\+|libgcc_s)\.'
for n in "${targets[@]}"; do
  objcopy --strip-debug "$build/tests/fuzz/$n" "$dev/bin/$n"
  ldd "$build/tests/fuzz/$n" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $system ]] || cp -nL "$path" "$dev/lib/$name"
  done
done
(cd "$build/tests/fuzz/long" 2>/dev/null && tar czf - */corpus) > "$dev/corpora.tgz" || tar czf "$dev/corpora.tgz" -T /dev/null
cp tests/fuzz/device_run.sh "$dev/run.sh"
chmod +x "$dev/run.sh"

# Every non-system library must come from lib/; every target must run its seeds with nothing else added.
bad=0
for n in "${targets[@]}"; do
  missing=$(env -i LD_LIBRARY_PATH="$dev/lib" ldd "$dev/bin/$n" | awk '$3 ~ /^\// {print $1, $3}' |
            grep -Ev "$system" | grep -v " $dev/lib/" || true)
  [ -z "$missing" ] || { echo "$n: not from lib/: $missing"; bad=1; }
  env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$dev/lib" "$dev/bin/$n" -runs=0 "tests/fuzz/corpus/$n" > /dev/null 2>&1 ||
    { echo "$n: does not run its seeds"; bad=1; }
done
du -sh "$dev" "$dev"/*
echo "${#targets[@]} targets: ${targets[*]}"
exit $bad
