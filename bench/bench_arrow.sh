#!/usr/bin/env bash
# The Arrow IPC reader's speed: build/test_arrow --bench reads the list<int32> column of a ~200 MB
# Hugging Face-style stream (input_ids rows of 512..2047 tokens, 1000 rows per record batch,
# written by apache-arrow) from the page cache, each value widened to int64 as the trainer gets
# it, against `cat FILE >/dev/null` on the same cached file. Best of 3 each. Prints both
# bandwidths and "arrow ids read / cat bandwidth: X".
set -euo pipefail
cd "$(dirname "$0")/.."
NPM=${FSDPC_NPM_CACHE:-build/npm}
MB=${ARROW_BENCH_MB:-200}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
if [ ! -f "$NPM/apache-arrow/.complete" ]; then
    rm -rf "$NPM/apache-arrow" && mkdir -p "$NPM/apache-arrow"
    timeout 180 npm install --loglevel error --no-audit --no-fund --no-package-lock --prefix "$NPM/apache-arrow" apache-arrow@21.2.0 >/dev/null
    touch "$NPM/apache-arrow/.complete"
fi
make -s build/test_arrow
F=$W/ids.arrows
NODE_PATH=$NPM/apache-arrow/node_modules node --max-old-space-size=4096 test/fixtures/make_arrow.mjs --bench "$F" "$MB"
size=$(stat -c %s "$F")
cat "$F" >/dev/null  # into the page cache
best_cat=1e9 best_arrow=1e9
for _ in 1 2 3; do
    s=$(date +%s.%N)
    cat "$F" >/dev/null
    e=$(date +%s.%N)
    best_cat=$(echo "$s $e $best_cat" | awk '{ t = $2 - $1; print (t < $3 ? t : $3) }')
    out=$(build/test_arrow --bench "$F" input_ids)
    t=$(echo "$out" | sed -nE 's/.* seconds ([0-9.]+)$/\1/p')
    best_arrow=$(echo "$t $best_arrow" | awk '{ print ($1 < $2 ? $1 : $2) }')
done
echo "file: $size bytes, $(echo "$out" | cut -d' ' -f1-4)"
awk -v n="$size" -v c="$best_cat" -v a="$best_arrow" 'BEGIN {
    printf "cat: %.0f MB/s, arrow ids read: %.0f MB/s\n", n / c / 1e6, n / a / 1e6
    printf "arrow ids read / cat bandwidth: %.2f\n", c / a }'
