#!/usr/bin/env bash
# (Re)writes the seed corpora of tests/fuzz/corpus with fuzz_corpus_gen (the real encoders), building it in the
# fuzz build directory BUILD (default build-fuzz; configured with clang and -DZW_FUZZ=ON if it does not exist).
# Crash regressions (corpus/<target>/crash-*) are left alone.
#   tests/fuzz/make_corpus.sh [BUILD]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-fuzz}
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DZW_FUZZ=ON -DZW_BUILD_BENCH=OFF
cmake --build "$build" --target fuzz_corpus_gen
rm -f tests/fuzz/corpus/*/seed-*
"$build/tests/fuzz/fuzz_corpus_gen" tests/fuzz/corpus
