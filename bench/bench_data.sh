#!/usr/bin/env bash
# The data path's cost, as ratios measured in one run: the `tiny` model at np=1 trains on the same
# documents as pre-tokenized input_ids (Arrow stream, Parquet) and as JSON Lines text tokenized with
# a SentencePiece model; --profile's "data wait" share of the step is printed for each, with the
# loader's own tokens/s (the tokenized cache's build) beside the step's tokens/s. Then the Arrow and
# Parquet readers against `cat` on the same file (bench_arrow.sh, bench_parquet.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
NPM=${FSDPC_NPM_CACHE:-build/npm}
TOK=${TOK:-test/fixtures/tokenizer/tokenizer.model}
STEPS=${STEPS:-40}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export FSDPC_CACHE_DIR=$W/cache
for p in apache-arrow@21.2.0 parquet-wasm@0.8.0; do
    d=$NPM/${p%@*}
    [ -f "$d/.complete" ] && continue
    rm -rf "$d" && mkdir -p "$d"
    timeout 180 npm install --loglevel error --no-audit --no-fund --no-package-lock --prefix "$d" "$p" >/dev/null && touch "$d/.complete"
done
export NODE_PATH=$NPM/apache-arrow/node_modules:$NPM/parquet-wasm/node_modules
/usr/bin/python3 - "$W" "$TOK" <<'PY'
import json, sys, sentencepiece as spm
w, tok = sys.argv[1], sys.argv[2]
sp = spm.SentencePieceProcessor(model_file=tok)
text = open("data/tinyshakespeare.txt", encoding="utf-8").read()
docs = [d.strip() + "\n" for d in text.split("\n\n") if d.strip()] * 4
with open(f"{w}/text.jsonl", "w") as f, open(f"{w}/ids.jsonl", "w") as g:
    for d in docs:
        f.write(json.dumps({"text": d}) + "\n")
        g.write(json.dumps({"input_ids": [sp.bos_id()] + sp.encode(d) + [sp.eos_id()]}) + "\n")
PY
node test/fixtures/make_table.cjs "$W/ids.jsonl" "$W/ids.arrow" stream 1000
node test/fixtures/make_table.cjs "$W/ids.jsonl" "$W/ids.parquet" parquet-snappy 1000
echo "tiny model, np=1, $STEPS steps, tokenizer $TOK, $(wc -l <"$W/text.jsonl") documents"
for src in "ids.arrow input_ids (Arrow stream)" "ids.parquet input_ids (Parquet, snappy)" "text.jsonl text (JSON Lines, tokenized)"; do
    set -- $src
    ./fsdpc --tokenizer "$TOK" --train_data "$W/$1" --max_steps "$STEPS" --logging_freq "$STEPS" --checkpoint_freq 0 \
        --validation_freq 0 --num_tokens 0 --profile >"$W/log" 2>&1
    wait_pct=$(sed -nE 's/^ *data wait +[0-9.]+ s +([0-9.]+)%.*/\1/p' "$W/log")
    step_tps=$(sed -nE "s/^Batch $STEPS Loss.*tokens\/sec: ([0-9.]+).*/\1/p" "$W/log")
    build=$(grep -m1 "built in" "$W/log" | sed -E 's/.* ([0-9]+) tokens \(data cache.*built in ([0-9.]+) s.*/\1 \2/')
    awk -v s="${*:2}" -v w="$wait_pct" -v t="$step_tps" -v b="$build" 'BEGIN { split(b, x, " ");
        printf "%-36s data wait %5.2f%% of the step; loader %8.0f tokens/s vs step %6.0f tokens/s (%.0fx)\n",
               s, w, x[1] / (x[2] > 0.001 ? x[2] : 0.001), t, x[1] / (x[2] > 0.001 ? x[2] : 0.001) / t }'
done
echo
bash bench/bench_arrow.sh | tail -n 1
bash bench/bench_parquet.sh | grep -E "MB\):|cat bandwidth"
