#!/usr/bin/env bash
# Data formats and streaming: fsdpc shards, llm.c shards, nanoGPT .bin and text give the same
# samples; directories and globs; bounded memory on a larger dataset; bad files named.
cd "$(dirname "$0")/../.."
source test/lib.sh
M="--tokenizer byte --hidden_width 32 --num_layers 1 --num_heads 2 --num_key_value_heads 1 --intermediate_size 64 --max_context_width 32
   --batch_size 4 --num_tokens 0 --checkpoint_freq 0 --validation_freq 0 --max_steps 6 --num_threads 1"
head -c 60000 data/tinyshakespeare.txt >"$W/text.txt"
/usr/bin/python3 - "$W" <<'PY'
import sys, numpy as np
w = sys.argv[1]
tok = np.frombuffer(open(f"{w}/text.txt", "rb").read(), dtype=np.uint8)
def fsdpc_shard(path, t, dtype):
    hdr = np.zeros(64, np.uint8)
    hdr[:8] = np.frombuffer(b"FSDPCTOK", np.uint8)
    hdr[8:12] = np.frombuffer(np.uint32(1).tobytes(), np.uint8)
    hdr[12:16] = np.frombuffer(np.uint32(np.dtype(dtype).itemsize).tobytes(), np.uint8)
    hdr[16:24] = np.frombuffer(np.uint64(len(t)).tobytes(), np.uint8)
    open(path, "wb").write(hdr.tobytes() + t.astype(dtype).tobytes())
def llmc_shard(path, t, magic, dtype):
    hdr = np.zeros(256, np.int32); hdr[0] = magic; hdr[1] = 1; hdr[2] = len(t)
    open(path, "wb").write(hdr.tobytes() + t.astype(dtype).tobytes())
fsdpc_shard(f"{w}/tok16.bin", tok, np.uint16)
fsdpc_shard(f"{w}/tok32.bin", tok, np.uint32)
llmc_shard(f"{w}/llmc_gpt2.bin", tok, 20240520, np.uint16)
llmc_shard(f"{w}/llmc_llama3.bin", tok, 20240801, np.uint32)
tok.astype(np.uint16).tofile(f"{w}/nanogpt.bin")
# a directory of shards: the text cut at a sample boundary (samples are 33 tokens at stride 32)
import os
os.makedirs(f"{w}/dir")
cut = 32 * 400
fsdpc_shard(f"{w}/dir/part_000.bin", tok[:cut + 1], np.uint16)
fsdpc_shard(f"{w}/dir/part_001.bin", tok[cut:], np.uint16)  # samples overlap by one token
# bad files
fsdpc_shard(f"{w}/trunc.bin", tok, np.uint16)
os.truncate(f"{w}/trunc.bin", 64 + 2 * 1000)
big = tok.astype(np.uint16).copy(); big[5000] = 300
llmc_shard(f"{w}/bigid.bin", big, 20240520, np.uint16)
# a larger dataset: 8 shards x 4M tokens
rng = np.random.default_rng(0)
os.makedirs(f"{w}/large")
for i in range(8):
    fsdpc_shard(f"{w}/large/s{i}.bin", rng.integers(0, 256, 4_000_000, dtype=np.uint16), np.uint16)
fsdpc_shard(f"{w}/small.bin", rng.integers(0, 256, 100_000, dtype=np.uint16), np.uint16)
PY

./fsdpc $M --train_data "$W/text.txt" --metrics_file "$W/text.jsonl" 2>/dev/null
for f in tok16 tok32 llmc_gpt2 llmc_llama3 nanogpt; do
    ./fsdpc $M --train_data "$W/$f.bin" --metrics_file "$W/$f.jsonl" 2>"$W/$f.log"
    cmp -s <(steady "$W/text.jsonl") <(steady "$W/$f.jsonl")
    check "$f format gives the same samples as the text file (identical losses)" $? "$(tail -1 "$W/$f.log")"
done
./fsdpc $M --train_data "$W/dir" --max_epochs 1 --logging_freq 1 --metrics_file "$W/dir.jsonl" 2>"$W/dir.log"
./fsdpc $M --train_data "$W/dir/part_*.bin" --max_epochs 1 --logging_freq 1 --metrics_file "$W/glob.jsonl" 2>/dev/null
# the two files hold the text's 1874 samples (400 + 1474): the same epoch, so the same losses
[ "$(wc -l <"$W/dir.jsonl")" = 6 ] && cmp -s <(steady "$W/dir.jsonl") <(steady "$W/glob.jsonl") && cmp -s <(steady "$W/dir.jsonl") <(steady "$W/text.jsonl")
check "a directory and a glob of shards read the same samples as the whole file" $?
./fsdpc $M --train_data "$W/text.txt" --val_data "$W/dir" --validation_freq 3 --validation_batches 2 2>"$W/val.log" >/dev/null
grep -q "^Batch 6 Validation loss" "$W/val.log"
check "--val_data takes a directory of shards" $?

mem() { ./fsdpc $M --train_data "$1" --logging_freq 6 2>&1 | sed -nE 's/^Batch 6 .*mem: ([0-9]+) MiB$/\1/p'; }
small=$(mem "$W/small.bin")
large=$(mem "$W/large")
[ -n "$small" ] && [ -n "$large" ] && [ $((large - small)) -lt 16 ]
check "a 64 MB dataset of 8 shards streams in the memory of a 0.2 MB one (${small} vs ${large} MiB)" $?

expect_error "truncated shard names the file" "trunc.bin' is truncated or corrupt" ./fsdpc $M --train_data "$W/trunc.bin"
expect_error "token id above the vocabulary names the file" "bigid.bin' holds token id 300" ./fsdpc $M --train_data "$W/bigid.bin" --max_steps 300
expect_error "no files match a glob" "no files match" ./fsdpc $M --train_data "$W/nothing*.bin"

# prepare's shards feed training and validation
./fsdpc prepare --input "$W/text.txt" --output "$W/prep" --val_fraction 0.2 >/dev/null 2>&1
./fsdpc $M --train_data "$W/prep/train_*.bin" --val_data "$W/prep/val_*.bin" --validation_freq 6 2>"$W/prep.log" >/dev/null
grep -q "^Batch 6 Validation loss" "$W/prep.log"
check "training and validation read the shards fsdpc prepare wrote" $?
