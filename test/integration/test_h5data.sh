#!/usr/bin/env bash
# HDF5 sample files (minimal_fsdp's layout: one 2-D integer dataset of token rows, inputs row[:-1],
# targets row[1:]) as --train_data / --val_data: the same samples as the text they came from, at
# every integer type and world size; bad files stop the run with one line naming them. A file's
# vocab_size / n_vocab attribute sets the vocabulary after flags and tokenizer; GPT-2 ids in a file
# that records none stop the run saying to pass --vocab_size 50257.
cd "$(dirname "$0")/../.."
source test/lib.sh
T=32
M="--tokenizer byte --hidden_width 32 --num_layers 1 --num_heads 2 --num_key_value_heads 1 --intermediate_size 64 --max_context_width $T
   --batch_size 4 --num_tokens 0 --checkpoint_freq 0 --validation_freq 0 --max_steps 6 --num_threads 1"
head -c 60000 data/tinyshakespeare.txt >"$W/text.txt"
timeout 60 /usr/bin/python3 - "$W" $T <<'PY'
import os, sys, h5py, numpy as np
w, T = sys.argv[1], int(sys.argv[2])
tok = np.frombuffer(open(f"{w}/text.txt", "rb").read(), np.uint8)
# rows that are exactly the text's samples (T+1 tokens at stride T): training must not tell them apart
n = (len(tok) - 1) // T
win = np.stack([tok[i * T:i * T + T + 1] for i in range(n)]).astype(np.int64)
def h5(name, **datasets):
    with h5py.File(f"{w}/{name}", "w", **datasets.pop("file_kw", {})) as f:
        for k, v in datasets.items():
            f.create_dataset(k, **v) if isinstance(v, dict) else f.create_dataset(k, data=v)
h5("win_u16.h5", input_ids=win.astype(np.uint16))
h5("win_i64.h5", input_ids=win.astype(np.int64))
h5("win_i32.h5", input_ids=win.astype(np.int32))
h5("win_i8.h5", input_ids=win.astype(np.int8))  # the text is ASCII
h5("win_u8.h5", input_ids=win.astype(np.uint8))
h5("win_be.h5", file_kw={"userblock_size": 1024}, **{"grp/ids": win.astype(">u4")})  # superblock at 1024
# extra datasets that are not 2-D integers are left alone
h5("win_extra.h5", input_ids=win.astype(np.uint16), lengths=np.full(n, T + 1, np.int32), weights=np.ones((n, 3), np.float32))
# longer rows: the first T+1 tokens of each row are the sample
h5("win_long.h5", input_ids=np.concatenate([win, np.full((n, T), 255)], axis=1).astype(np.uint16))
os.makedirs(f"{w}/dir")
h5("dir/a.h5", input_ids=win[:400].astype(np.uint16))
h5("dir/b.h5", input_ids=win[400:].astype(np.int32))
# minimal_fsdp's own layout: the text cut into rows of T+1 that do not overlap
rows = tok[:len(tok) // (T + 1) * (T + 1)].reshape(-1, T + 1)
h5("mfsdp.h5", input_ids=rows.astype(np.uint16))
h5("small.h5", input_ids=rows[:10].astype(np.uint16))
# bad files
h5("two2d.h5", input_ids=rows.astype(np.uint16), attention_mask=np.ones(rows.shape, np.int8))
h5("oned.h5", input_ids=tok.astype(np.uint16))
h5("float.h5", input_ids=rows.astype(np.float32))
h5("empty.h5")
big = rows[:20].astype(np.uint16).copy(); big[7, 5] = 300
h5("bigid.h5", input_ids=big)
neg = rows[:20].astype(np.int32).copy(); neg[3, 0] = -1
h5("neg.h5", input_ids=neg)
h5("short.h5", input_ids=tok[:len(tok) // T * T].reshape(-1, T).astype(np.uint16))
h5("gzip.h5", input_ids={"data": rows.astype(np.uint16), "chunks": (64, T + 1), "compression": "gzip"})
h5("trunc.h5", input_ids=rows.astype(np.uint16))
# GPT-2-range ids (minimal_fsdp's data) and the vocabulary a file may record as an attribute
gpt = np.random.default_rng(0).integers(0, 50257, (16, T + 1)).astype(np.uint16)
h5("gpt_none.h5", input_ids=gpt)
with h5py.File(f"{w}/gpt_attr.h5", "w") as f: f.create_dataset("input_ids", data=gpt).attrs["vocab_size"] = 50257
with h5py.File(f"{w}/gpt_root.h5", "w") as f: f["input_ids"] = gpt; f.attrs["n_vocab"] = 50257
with h5py.File(f"{w}/v300.h5", "w") as f: f.create_dataset("input_ids", data=gpt % 300).attrs["vocab_size"] = 300
with h5py.File(f"{w}/badattr.h5", "w") as f: f.create_dataset("input_ids", data=gpt).attrs["vocab_size"] = "50257"
os.truncate(f"{w}/trunc.h5", os.path.getsize(f"{w}/trunc.h5") // 2)
PY
check "fixtures written with h5py" $?

train() {  # train NAME ARGS...: one rank, metrics in $W/NAME.jsonl, log in $W/NAME.log
    local name=$1
    shift
    timeout 60 ./fsdpc $M --metrics_file "$W/$name.jsonl" "$@" >/dev/null 2>"$W/$name.log"
}
train text --train_data "$W/text.txt"
for f in win_u16 win_i64 win_i32 win_i8 win_u8 win_be win_extra win_long; do
    train "$f" --train_data "$W/$f.h5"
    [ -s "$W/$f.jsonl" ] && cmp -s <(steady "$W/text.jsonl") <(steady "$W/$f.jsonl")
    check "$f.h5 rows give the text's samples (identical losses)" $? "$(tail -1 "$W/$f.log")"
done
grep -q "each sample is the first $((T + 1)) tokens of its row" "$W/win_long.log"
check "rows longer than T+1 are cut to T+1, and the log says so" $?
train dir --train_data "$W/dir"
train glob --train_data "$W/dir/*.h5"
cmp -s <(steady "$W/text.jsonl") <(steady "$W/dir.jsonl") && cmp -s <(steady "$W/text.jsonl") <(steady "$W/glob.jsonl")
check "a directory and a glob of .h5 files (uint16 + int32) read the same samples" $?

# the same global batch of 4 at np=1/2/4: the same rows, so the same losses
timeout 60 ./fsdpc $M --train_data "$W/mfsdp.h5" --metrics_file "$W/np1.jsonl" 2>/dev/null
for np in 2 4; do
    $MPI -np $np ./fsdpc $M --batch_size $((4 / np)) --train_data "$W/mfsdp.h5" --metrics_file "$W/np$np.jsonl" >/dev/null 2>&1
    d=$(rel_diff "$W/np1.jsonl" "$W/np$np.jsonl" 6 1e-6)
    check "np=$np losses equal np=1 on minimal_fsdp-style rows (worst rel diff $d)" $?
done

# validation from an .h5 file: the same loss as from the text
for v in text.txt win_u16.h5; do
    timeout 60 ./fsdpc $M --train_data "$W/mfsdp.h5" --val_data "$W/$v" --validation_freq 3 --validation_batches 2 \
        2>&1 >/dev/null | grep "Validation loss" | sed 's/, time.*//' >"$W/val_$v.txt"
done
[ "$(wc -l <"$W/val_win_u16.h5.txt")" = 2 ] && cmp -s "$W/val_text.txt.txt" "$W/val_win_u16.h5.txt"
check "--val_data of an .h5 file gives the text's validation loss" $? "$(head -1 "$W/val_win_u16.h5.txt")"

# epochs count rows: 10 rows, global batch 4, 2 epochs = 5 steps
timeout 60 ./fsdpc $M --max_epochs 2 --train_data "$W/small.h5" --logging_freq 1 --metrics_file "$W/ep.jsonl" >/dev/null 2>&1
[ "$(wc -l <"$W/ep.jsonl")" = 5 ]
check "--max_epochs counts one sample per row (10 rows x 2 epochs / 4 = 5 steps)" $? "($(wc -l <"$W/ep.jsonl") steps)"

expect_error "two 2-D integer datasets are ambiguous" "two2d.h5' holds more than one 2-D integer dataset.*attention_mask' int8 \($((1818)), 33\)" \
    ./fsdpc $M --train_data "$W/two2d.h5"
expect_error "a 1-D dataset is not rows" "oned.h5' holds no 2-D integer dataset.*'/input_ids' uint16 \(60000,\)" ./fsdpc $M --train_data "$W/oned.h5"
expect_error "a float dataset is not token ids" "float.h5' holds no 2-D integer dataset.*float32 \(1818, 33\)" ./fsdpc $M --train_data "$W/float.h5"
expect_error "an HDF5 file without datasets" "empty.h5' holds no 2-D integer dataset .*no datasets" ./fsdpc $M --train_data "$W/empty.h5"
expect_error "a token id at or above the vocabulary names file and row" \
    "bigid.h5' holds token id 300 in sample \(row\) 7, position 5 .*records no vocabulary: for GPT-2's ids \(minimal_fsdp's data\) pass --vocab_size 50257, or --tokenizer" \
    ./fsdpc $M --train_data "$W/bigid.h5" --max_steps 5
expect_error "a negative token id names file and row" "neg.h5' holds token id -1 in sample \(row\) 3, position 0" \
    ./fsdpc $M --train_data "$W/neg.h5" --max_steps 5
expect_error "rows shorter than T+1 say the row length and the T they need" \
    "short.h5': dataset '/input_ids' has rows of 32 tokens, but --max_context_width 32 needs rows of at least 33.*--max_context_width 31" \
    ./fsdpc $M --train_data "$W/short.h5"
expect_error "a chunked gzip dataset is refused with the h5repack command" "gzip.h5': dataset '/input_ids' is stored chunked .*h5repack -f NONE -l CONTI" \
    ./fsdpc $M --train_data "$W/gzip.h5"
expect_error "a truncated .h5 file names the file" "trunc.h5' is (a damaged HDF5 file \(truncated|truncated or corrupt)" \
    ./fsdpc $M --train_data "$W/trunc.h5"
expect_error "a bad .h5 --val_data on 2 ranks: one line, every rank stops" "two2d.h5' holds more than one" \
    $MPI -np 2 ./fsdpc $M --batch_size 2 --train_data "$W/mfsdp.h5" --val_data "$W/two2d.h5"

# ---- the vocabulary: --vocab_size / --model_name / checkpoint > tokenizer > the file's attribute > 256 ----
MB=$M MA=${M/--tokenizer byte /}  # a file's attribute stands in for a tokenizer no flag names
for f in gpt_attr gpt_root; do
    M=$MA train "$f" --train_data "$W/$f.h5" --max_steps 1
    [ -s "$W/$f.jsonl" ] && grep -q "vocabulary: 50257, recorded by data file '$W/$f.h5'" "$W/$f.log" && grep -q " V=50257 " "$W/$f.log"
    check "GPT-2 ids in $f.h5, whose vocab_size / n_vocab attribute sets the vocabulary (50257)" $? "$(grep -m2 'error\|V=' "$W/$f.log")"
done
expect_error "GPT-2 ids in a file that records no vocabulary: the error says --vocab_size 50257" \
    "gpt_none.h5' holds token id [0-9]+ in sample \(row\) [0-9]+, position [0-9]+ of dataset '/input_ids', not in \[0, --vocab_size 256\); the file records no vocabulary: for GPT-2's ids \(minimal_fsdp's data\) pass --vocab_size 50257" \
    ./fsdpc $M --train_data "$W/gpt_none.h5" --max_steps 1
train gpt_none --train_data "$W/gpt_none.h5" --max_steps 1 --vocab_size 50257
[ -s "$W/gpt_none.jsonl" ]
check "... and with --vocab_size 50257 it trains" $? "$(grep -m1 error "$W/gpt_none.log")"
M=$MA train v300 --train_data "$W/v300.h5" --max_steps 1
train v300_flag --train_data "$W/v300.h5" --max_steps 1 --vocab_size 512
grep -q " V=300 " "$W/v300.log" && grep -q " V=512 " "$W/v300_flag.log" && ! grep -q "recorded by data file" "$W/v300_flag.log"
check "a recorded vocabulary of 300 is the model's, unless --vocab_size says otherwise" $? "$(grep -m1 'error\|V=' "$W/v300_flag.log")"
expect_error "a recorded vocabulary larger than --vocab_size" \
    "gpt_attr.h5' records a vocabulary of 50257 \(attribute vocab_size\), larger than the model's 256" \
    ./fsdpc $M --train_data "$W/gpt_attr.h5" --vocab_size 256
expect_error "the tokenizer's vocabulary comes before the file's" \
    "gpt_root.h5' records a vocabulary of 50257 \(attribute n_vocab\), larger than the model's 1000" \
    ./fsdpc $M --train_data "$W/gpt_root.h5" --tokenizer test/fixtures/tokenizer/tokenizer.model
expect_error "a vocab_size attribute that is no integer" "badattr.h5': attribute 'vocab_size' of dataset '/input_ids' is not a vocabulary size" \
    ./fsdpc $M --train_data "$W/badattr.h5"
