#!/usr/bin/env bash
# expect_exit.sh CODE NEEDLE CMD... — runs CMD and passes only when it exits with CODE and its stderr or stdout
# contains NEEDLE (a usage error must fail with its reason, not print an empty result and exit 0).
set -u
want=$1 needle=$2
shift 2
out=$("$@" 2>&1)
rc=$?
if [ "$rc" -ne "$want" ]; then
  printf 'expected exit %s, got %s from: %s\n%s\n' "$want" "$rc" "$*" "$out" >&2
  exit 1
fi
if [[ "$out" != *"$needle"* ]]; then
  printf 'exit %s as expected, but the output lacks "%s":\n%s\n' "$rc" "$needle" "$out" >&2
  exit 1
fi
printf 'ok: exit %s with "%s"\n' "$rc" "$needle"
