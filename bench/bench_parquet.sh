#!/usr/bin/env bash
# Parquet read speed: build/test_parquet --count reading the list<int32> column `input_ids` of a
# ~200 MB file (24000 rows of 2048 token ids, written by parquet-wasm: uncompressed PLAIN, Snappy
# PLAIN, Snappy with a dictionary) against `cat FILE >/dev/null` on the same page-cached file.
# Best of 5 runs each, whole processes. Prints "parquet ids read / cat bandwidth: X" per file.
# Usage: bench_parquet.sh [ROWS]; the npm packages come from build/npm as test/test_parquet.sh
# fetches them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-24000}
NPM=${FSDPC_NPM_CACHE:-build/npm}
make -s build/test_parquet
if [ ! -f "$NPM/parquet-wasm/.complete" ] || [ ! -f "$NPM/apache-arrow/.complete" ]; then
    echo "bench_parquet: no parquet-wasm / apache-arrow in $NPM (run test/test_parquet.sh first)" >&2
    exit 1
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
NODE_PATH="$PWD/$NPM/parquet-wasm/node_modules:$PWD/$NPM/apache-arrow/node_modules" node test/fixtures/make_parquet.mjs "$W" bench "$ROWS"

best() {  # best of 5 wall-clock seconds of a command
    local b="" t0 t1 s
    for _ in 1 2 3 4 5; do
        t0=$(date +%s%N)
        "$@" >/dev/null
        t1=$(date +%s%N)
        s=$(((t1 - t0) / 1000))
        if [ -z "$b" ] || [ "$s" -lt "$b" ]; then b=$s; fi
    done
    echo "$b"
}
for name in plain snappy snappy_dict; do
    f=$W/bench_$name.parquet
    cat "$f" >/dev/null  # into the page cache
    build/test_parquet --count "$f" input_ids
    mb=$(($(stat -c %s "$f") / 1000000))
    cat_us=$(best cat "$f")
    read_us=$(best build/test_parquet --count "$f" input_ids)
    awk -v n="$name" -v mb="$mb" -v c="$cat_us" -v r="$read_us" 'BEGIN {
        printf "%s (%d MB): cat %.0f MB/s, test_parquet --count %.0f MB/s of file (%.0f M ids/s)\n", n, mb, mb / c * 1e6, mb / r * 1e6, '"$ROWS"' * 2048 / r
        printf "parquet ids read / cat bandwidth: %.2f\n", c / r }'
done
