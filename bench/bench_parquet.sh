#!/usr/bin/env bash
# Parquet read speed: build/test_parquet --count reading the list<int32> column `input_ids` (24000
# rows of 2048 token ids, 196 MB as int32) of files written by parquet-wasm (see
# test/fixtures/make_parquet.mjs): uncompressed PLAIN; Snappy PLAIN of uniformly random ids
# (incompressible) and of Zipf-like ids as in text (libsnappy's own decompression then dominates);
# Snappy with a dictionary (the writers' default); against `cat FILE >/dev/null` on the same
# page-cached file.
# Best of 7 runs each: the reader timed inside test_parquet from opening the file to its last row,
# cat as a whole process less its start-up. Prints "parquet ids read / cat bandwidth: X" per file.
# Usage: bench_parquet.sh [ROWS]; the npm packages come from build/npm as test/integration/test_parquet.sh
# fetches them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-24000}
NPM=${FSDPC_NPM_CACHE:-build/npm}
make -s build/test_parquet
if [ ! -f "$NPM/parquet-wasm/.complete" ] || [ ! -f "$NPM/apache-arrow/.complete" ]; then
    echo "bench_parquet: no parquet-wasm / apache-arrow in $NPM (run test/integration/test_parquet.sh first)" >&2
    exit 1
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
NODE_PATH="$PWD/$NPM/parquet-wasm/node_modules:$PWD/$NPM/apache-arrow/node_modules" node test/fixtures/make_parquet.mjs "$W" bench "$ROWS"

best() {  # least wall-clock microseconds of 7 runs of a command
    local b="" t0 t1 us
    for _ in 1 2 3 4 5 6 7; do
        t0=$(date +%s%N)
        "$@" >/dev/null
        t1=$(date +%s%N)
        us=$(((t1 - t0) / 1000))
        if [ -z "$b" ] || [ "$us" -lt "$b" ]; then b=$us; fi
    done
    echo "$b"
}
read_best() {  # least of 7 runs of the seconds test_parquet --count measures, open to last row (its
    # own start-up loads all of fsdpc's libraries, CUDA's included, which is no part of reading)
    for _ in 1 2 3 4 5 6 7; do build/test_parquet --count "$1" input_ids; done |
        sed -nE 's/.* seconds ([0-9.]+)$/\1/p' | sort -g | head -1 | awk '{ printf "%d", $1 * 1e6 }'
}
: >"$W/empty"
start_us=$(best cat "$W/empty")  # cat's own start-up, taken off its times
for name in plain snappy_uniform snappy_zipf snappy_dict; do
    f=$W/bench_$name.parquet
    cat "$f" >/dev/null  # into the page cache
    build/test_parquet --count "$f" input_ids
    mb=$(($(stat -c %s "$f") / 1000000))
    cat_us=$(($(best cat "$f") - start_us))
    read_us=$(read_best "$f")
    awk -v n="$name" -v mb="$mb" -v c="$cat_us" -v r="$read_us" -v rows="$ROWS" 'BEGIN {
        printf "%s (%d MB): cat %.0f MB/s, parquet reader %.0f MB/s of file, %.0f M ids/s\n", n, mb, mb / c * 1e6, mb / r * 1e6, rows * 2048 / r
        printf "parquet ids read / cat bandwidth: %.2f\n", c / r }'
done
