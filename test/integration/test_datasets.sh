#!/usr/bin/env bash
# Data as the recipes bring it: the same documents as JSON Lines (plain, gzip, zstd), a
# save_to_disk folder of Arrow shards, an Arrow IPC file, Parquet (snappy, zstd with v2 pages),
# pre-tokenized input_ids (JSON Lines, Arrow, Parquet), a DatasetDict, a hub-cache snapshot (C4's
# layout) and prepare'd shards give identical losses, at np=1 and np=2 (full-shard and hybrid),
# and resume exactly at another world size. The tokenized cache is built once and reused; hostile
# inputs end with one error line on every rank. Fixtures come from apache-arrow and parquet-wasm
# (npm); without them those cases are skipped with a line.
cd "$(dirname "$0")/../.."
source test/lib.sh
TOK=test/fixtures/tokenizer/tokenizer.model
export FSDPC_CACHE_DIR="$W/cache"
M="--recipe_defaults none --tokenizer $TOK --hidden_width 32 --num_layers 1 --num_heads 2 --num_key_value_heads 1 --intermediate_size 64
   --max_context_width 32 --batch_size 4 --num_tokens 0 --checkpoint_freq 0 --validation_freq 0 --max_steps 6 --num_threads 1"
run() {  # run NAME ARGS...: a one-rank training run writing $W/NAME.jsonl
    local name=$1
    shift
    ./fsdpc $M --metrics_file "$W/$name.jsonl" "$@" >"$W/$name.log" 2>&1
}
same() {  # same NAME DESC: NAME's losses equal the reference's exactly
    [ -s "$W/$1.jsonl" ] && cmp -s <(losses "$W/ref.jsonl") <(losses "$W/$1.jsonl")
    check "$2" $? "($(tail -n 2 "$W/$1.log" | tr '\n' '|' | head -c 300))"
}

# ---- the documents, and their ids as the tokenizer gives them (<s> ids </s>, as prepare joins them) ----
/usr/bin/python3 - "$W" "$TOK" <<'PY'
import json, sys, sentencepiece as spm
w, tok = sys.argv[1], sys.argv[2]
sp = spm.SentencePieceProcessor(model_file=tok)
text = open("data/tinyshakespeare.txt", encoding="utf-8").read()[:40000]
docs = [d.strip() + "\n" for d in text.split("\n\n") if d.strip()]
docs[3] = "naïve café — ünïcödé 日本語\n" + docs[3]
with open(f"{w}/docs.jsonl", "w") as f:
    for i, d in enumerate(docs):
        f.write(json.dumps({"text": d, "id": i}) + "\n")
with open(f"{w}/docs_null.jsonl", "w") as f:  # a null row is skipped, and counted
    for i, d in enumerate(docs):
        f.write(json.dumps({"text": d}) + "\n")
        if i == 5: f.write(json.dumps({"text": None}) + "\n")
with open(f"{w}/ids.jsonl", "w") as f:
    for d in docs:
        f.write(json.dumps({"input_ids": [sp.bos_id()] + sp.encode(d) + [sp.eos_id()]}) + "\n")
half = len(docs) // 2
for name, part in (("a", docs[:half]), ("b", docs[half:])):
    with open(f"{w}/docs_{name}.jsonl", "w") as f:
        for d in part: f.write(json.dumps({"text": d}) + "\n")
PY
gzip -c "$W/docs.jsonl" >"$W/docs.json.gz"
zstd -q -c "$W/docs.jsonl" >"$W/docs.jsonl.zst"

./fsdpc prepare --tokenizer $TOK --input "$W/docs.jsonl" --output "$W/prep" --val_fraction 0 >/dev/null 2>&1
check "prepare makes the reference shard" $?
run ref --train_data "$W/prep/train_000000.bin"
for c in "docs.jsonl JSON Lines" "docs.json.gz gzip-compressed JSON Lines" "docs.jsonl.zst zstd-compressed JSON Lines" \
         "ids.jsonl pre-tokenized input_ids in JSON Lines" "docs_null.jsonl JSON Lines with a null row"; do
    set -- $c
    run "${1//./_}" --train_data "$W/$1"
    same "${1//./_}" "${*:2} trains as the prepare'd shard does"
done
grep -q "1 null, skipped" "$W/docs_null_jsonl.log"
check "the null row is counted in the start-up line" $? "($(grep -m1 'training data' "$W/docs_null_jsonl.log"))"
run split --train_data "$W/docs_?.jsonl"
same split "documents split over two files give the same samples (one stream)"
grep -q "data cache .*built in" "$W/docs_jsonl.log"
check "the first run builds the cache" $?
run again --train_data "$W/docs.jsonl"
same again "a second run reads the cache"
! grep -q "built in" "$W/again.log" && grep -q "data cache" "$W/again.log"
check "a second run does not rebuild the cache" $? "($(grep -m1 'data cache' "$W/again.log"))"
touch -d '2020-01-01' "$W/docs.jsonl"
run touched --train_data "$W/docs.jsonl"
grep -q "built in" "$W/touched.log"
check "a changed input rebuilds its cache" $?
! ls "$W/cache" | grep -q build
check "no build folder is left behind" $?

# ---- Arrow and Parquet from the real writers ----
if ! npm_fetch apache-arrow@21.2.0 parquet-wasm@0.8.0; then
    check "Arrow and Parquet containers # SKIP $NPM_SKIP" 0
    exit 0
fi
table() { node test/fixtures/make_table.cjs "$@" 2>>"$W/node.log"; }
mkdir -p "$W/disk"
# a save_to_disk folder: Arrow IPC stream shards named in state.json
table "$W/docs_a.jsonl" "$W/disk/data-00000-of-00002.arrow" stream 7 && table "$W/docs_b.jsonl" "$W/disk/data-00001-of-00002.arrow" stream
echo '{"_data_files": [{"filename": "data-00000-of-00002.arrow"}, {"filename": "data-00001-of-00002.arrow"}], "_fingerprint": "x", "_format_type": null, "_split": null}' >"$W/disk/state.json"
echo '{"features": {"text": {"dtype": "string", "_type": "Value"}}}' >"$W/disk/dataset_info.json"
table "$W/docs.jsonl" "$W/docs.arrow" file 9
table "$W/docs.jsonl" "$W/docs.parquet" parquet-snappy 10
table "$W/docs.jsonl" "$W/docs_v2.parquet" parquet-v2 13
table "$W/ids.jsonl" "$W/ids.parquet" parquet-zstd 8
table "$W/ids.jsonl" "$W/ids.arrow" stream 6
for c in "disk --dataset_path a save_to_disk folder (Arrow stream shards)" "docs.arrow --train_data an Arrow IPC file" \
         "docs.parquet --train_data Parquet (snappy, row groups of 10)" "docs_v2.parquet --train_data Parquet (v2 data pages)" \
         "ids.parquet --data_path pre-tokenized input_ids in Parquet (zstd)" "ids.arrow --train_data pre-tokenized input_ids in an Arrow stream"; do
    set -- $c
    run "${1//./_}" "$2" "$W/$1"
    same "${1//./_}" "${*:3} trains as the prepare'd shard does"
done
grep -q "Parquet, column text (string)" "$W/docs_parquet.log"
check "the start-up line names the format and the column" $? "($(grep -m1 'training data' "$W/docs_parquet.log"))"

# dictionary-encoded columns (pandas' and polars' categoricals, apache-arrow's default for strings):
# text and input_ids are read as their values, whether each batch brings a dictionary of its own
# (replacements) or extends one (deltas); a null index is a null row
table "$W/docs.jsonl" "$W/docs_dict.arrow" stream-dict 7
table "$W/docs.jsonl" "$W/docs_delta.arrow" file-delta 9
table "$W/ids.jsonl" "$W/ids_delta.arrow" stream-delta 6
table "$W/docs_null.jsonl" "$W/docs_null_dict.arrow" stream-dict 5
for c in "docs_dict.arrow dictionary-encoded text with a replacement dictionary per batch (Arrow stream)" \
         "docs_delta.arrow dictionary-encoded text with delta dictionaries (Arrow IPC file)" \
         "ids_delta.arrow dictionary-encoded input_ids with delta dictionaries (Arrow stream)" \
         "docs_null_dict.arrow dictionary-encoded text with a null index"; do
    set -- $c
    run "${1//./_}" --train_data "$W/$1"
    same "${1//./_}" "${*:2} trains as the prepare'd shard does"
done
grep -q "Arrow IPC stream, column text (dictionary<string>).*1 null, skipped" "$W/docs_null_dict_arrow.log"
check "a dictionary column's start-up line names its type and counts the null row" $? "($(grep -m1 'training data' "$W/docs_null_dict_arrow.log"))"

# a DatasetDict (train and validation splits): training reads train, validation reads validation
mkdir -p "$W/dict/train" "$W/dict/validation"
cp "$W/disk/"* "$W/dict/train/"
table "$W/docs_b.jsonl" "$W/dict/validation/data-00000-of-00001.arrow" stream
echo '{"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}' >"$W/dict/validation/state.json"
echo '{}' >"$W/dict/validation/dataset_info.json"
echo '{"splits": ["train", "validation"]}' >"$W/dict/dataset_dict.json"
run dict --training_dir "$W/dict" --validation_freq 3
same dict "a DatasetDict's train split trains as the prepare'd shard does"
grep -q "validation loss" "$W/dict.log" || grep -qi "val" "$W/dict.jsonl"
check "a DatasetDict's validation split is validated on" $?

# C4's layout in the hub cache, found offline by its short name
SNAP=$W/hub/datasets--allenai--c4/snapshots/0123abc
mkdir -p "$SNAP/en" "$W/hub/datasets--allenai--c4/blobs" "$W/hub/datasets--allenai--c4/refs"
echo 0123abc >"$W/hub/datasets--allenai--c4/refs/main"
cp "$W/docs.json.gz" "$W/hub/datasets--allenai--c4/blobs/1111"
ln -s ../../../blobs/1111 "$SNAP/en/c4-train.00000-of-01024.json.gz"
HF_HUB_CACHE=$W/hub run c4 --dataset c4 --dataset_config_name en
same c4 "--dataset c4 --dataset_config_name en reads C4's json.gz from the hub cache"
expect_error "a hub name not in the cache names where it looked and how to fetch it" "hf download" \
    env HF_HUB_CACHE=$W/hub HF_HOME=$W/nohome ./fsdpc $M --dataset someorg/missing

# ---- layouts: np=2 full-shard and hybrid, and exact resume at another world size ----
G="--batch_size 2 --grad_accum 1"
for lay in "full --sharding full-shard" "hybrid --sharding hybrid-full-shard --shard_group_size 1"; do
    set -- $lay
    $MPI -np 2 ./fsdpc $M $G ${*:2} --train_data "$W/docs.parquet" --metrics_file "$W/np2_$1.jsonl" >"$W/np2_$1.log" 2>&1
    w=$(rel_diff "$W/ref.jsonl" "$W/np2_$1.jsonl" 6 1e-4)
    check "Parquet at np=2 $1 matches np=1 (worst rel diff $w)" $?
done
$MPI -np 2 ./fsdpc $M $G --train_data "$W/disk" --max_steps 3 --checkpoint_freq 3 --checkpoint_dir "$W/ck" >"$W/r1.log" 2>&1 &&
    ./fsdpc $M --train_data "$W/disk" --checkpoint_freq 0 --resume_from_checkpoint "$W/ck" --metrics_file "$W/resumed.jsonl" >"$W/r2.log" 2>&1
tail -n 3 "$W/ref.jsonl" >"$W/ref_tail.jsonl"
w=$(rel_diff "$W/ref_tail.jsonl" "$W/resumed.jsonl" 3 1e-4)
check "a save_to_disk run resumes at np=1 from np=2 with the uninterrupted losses (worst rel diff $w)" $? "($(tail -n1 "$W/r2.log"))"

# ---- hostile inputs: one error line on every rank, never a crash or a hang ----
head -c 300 /dev/urandom >"$W/random.bin.txt"
head -c 3000 /dev/urandom | gzip -c >"$W/binary.gz"
gzip -c "$W/random.bin.txt" >"$W/really_gzip.txt"
printf 'BZh91AY&SY' >"$W/x.bz2"
head -c $(($(stat -c %s "$W/docs.parquet") - 100)) "$W/docs.parquet" >"$W/trunc.parquet"
head -c $(($(stat -c %s "$W/docs.arrow") / 2)) "$W/docs.arrow" >"$W/trunc.arrow"
head -c $(($(stat -c %s "$W/docs.json.gz") / 2)) "$W/docs.json.gz" >"$W/trunc.json.gz"
head -c $(($(stat -c %s "$W/docs.jsonl.zst") / 2)) "$W/docs.jsonl.zst" >"$W/trunc.jsonl.zst"
cp "$W/docs.parquet" "$W/footer.parquet"
printf '\xff\xff\xff\x7f' | dd of="$W/footer.parquet" bs=1 seek=$(($(stat -c %s "$W/docs.parquet") - 8)) conv=notrunc 2>/dev/null
: >"$W/empty.jsonl"
echo '{"input_ids": [1, 2, 3], "text": 5}' >"$W/wrongtype.jsonl"
E() { expect_error "$1" "$2" $MPI -np 2 ./fsdpc $M $G --train_data "${@:3}"; }
E "random bytes named .txt" "binary" "$W/random.bin.txt"
E "gzip'd binary" "gzip-compressed" "$W/binary.gz"
E "a .txt that is really gzip'd binary" "really_gzip.txt' is gzip" "$W/really_gzip.txt"
E "bzip2 is named and refused" "bzip2" "$W/x.bz2"
E "a truncated Parquet file" "trunc.parquet" "$W/trunc.parquet"
E "a truncated Arrow file" "trunc.arrow" "$W/trunc.arrow"
E "a truncated json.gz" "trunc.json.gz.*(truncated|gzip)" "$W/trunc.json.gz"
E "a truncated jsonl.zst" "trunc.jsonl.zst.*(truncated|zstd)" "$W/trunc.jsonl.zst"
E "a corrupted Parquet footer" "footer.parquet" "$W/footer.parquet"
E "an empty dataset" "empty.jsonl. is an empty file" "$W/empty.jsonl"
E "a text column that is not text" "column 'input_ids' is list<int.*, but fsdpc reads text" "$W/ids.parquet" --text_column input_ids
E "a column the table lacks lists its columns" "no 'body' column.*its columns: text \(string\)" "$W/docs.parquet" --text_column body
chmod 500 "$W/cache" 2>/dev/null
if [ "$(id -u)" != 0 ]; then
    E "an unwritable cache folder" "data cache" "$W/docs_v2.parquet" --data_cache_dir "$W/cache/sub"
fi
E "a cache folder under a file" "'$W/docs.jsonl' is a file, not a folder \\(--data_cache_dir\\)" "$W/docs_v2.parquet" --data_cache_dir "$W/docs.jsonl/sub"

# ---- a preemption signal during a cache build: exit 75 at once, no partial cache left ----
/usr/bin/python3 -c "
import json, sys
with open(sys.argv[1], 'w') as f:
    for i in range(200000): f.write(json.dumps({'text': 'the quick brown fox ' * 12 + str(i)}) + '\n')
" "$W/big.jsonl"
./fsdpc $M --train_data "$W/big.jsonl" --data_cache_dir "$W/sigcache" >"$W/sig.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "data cache:" "$W/sig.log" && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
[ $rc = 75 ] && grep -q "while building the data cache" "$W/sig.log" && [ -z "$(ls -A "$W/sigcache")" ]
check "SIGTERM during a cache build exits 75 and leaves no partial cache" $? "(rc=$rc $(tail -n1 "$W/sig.log") $(ls "$W/sigcache"))"

# ---- memory does not grow with the dataset: building and training on 10x the documents ----
head -n 20000 "$W/big.jsonl" >"$W/small.jsonl"
for f in small big; do
    /usr/bin/time -f "%M" -o "$W/$f.rss" ./fsdpc $M --train_data "$W/$f.jsonl" --data_cache_dir "$W/memcache" >/dev/null 2>&1
done
small=$(cat "$W/small.rss") big=$(cat "$W/big.rss")
[ -n "$small" ] && [ -n "$big" ] && [ "$big" -lt $((small + small / 10 + 16384)) ]
check "a 10x larger JSON Lines dataset builds and trains in the same memory (peak ${small} vs ${big} KiB)" $?
