#!/usr/bin/env bash
# The Llama-2 round trip a user makes: a PyTorch-made Hugging Face Llama (random weights, 2 layers,
# vocabulary 1000 with the fixture SentencePiece tokenizer) is imported, finetuned 20 steps on 2
# ranks with hybrid sharding on data prepared with that tokenizer, exported, and the export's
# greedy continuation in the PyTorch reference equals fsdpc's own --prompt output.
cd "$(dirname "$0")/../.."
source test/lib.sh
set -f  # globs such as train_*.bin go to fsdpc as written
PY=/usr/bin/python3
TOK=test/fixtures/tokenizer/tokenizer.model

$PY test/ref/hf_make.py "$W/hf" --vocab 1000 --context 64 --dtype bf16 --seed 3 >/dev/null && cp "$TOK" "$W/hf/"
check "a Hugging Face Llama directory made by PyTorch (bf16 safetensors, config.json, tokenizer.model)" $?
head -c 200000 data/tinyshakespeare.txt >"$W/corpus.txt"
./fsdpc prepare --tokenizer "$TOK" --input "$W/corpus.txt" --output "$W/data" --val_fraction 0.05 >/dev/null 2>"$W/prep.log"
check "prepare with the tokenizer.model" $? "$(tail -c 300 "$W/prep.log")"

FT="--init_from $W/hf --finetune --train_data $W/data/train_*.bin --val_data $W/data/val_*.bin --validation_freq 20
    --validation_batches 2 --batch_size 2 --lr 1e-3 --warmup 5 --max_steps 20 --logging_freq 5 --num_tokens 0
    --checkpoint_dir $W/ft --resume_from_checkpoint $W/ft --checkpoint_freq 10"
$MPI -np 2 ./fsdpc $FT --sharding hybrid-full-shard --shard_group_size 1 --metrics_file "$W/ft.jsonl" >/dev/null 2>"$W/ft.log"
rc=$?
grep -q "Initialized weights from $W/hf (fresh optimizer state, step 0)" "$W/ft.log" &&
    grep -q "V=1000" "$W/ft.log" && [ -f "$W/ft/step_00000020.h5" ]
check "finetune 20 steps on 2 ranks (hybrid-full-shard) from the import" $((rc | $?)) "rc=$rc $(grep -m3 'error\|Initialized' "$W/ft.log")"
first=$(losses "$W/ft.jsonl" | head -1)
last=$(losses "$W/ft.jsonl" | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a)}'
check "finetuning lowers the loss ($first -> $last)" $?
# the same finetune at np=1 no-shard gives the same losses (layout-free, import included)
./fsdpc ${FT//$W\/ft/$W/ft1} --batch_size 4 --sharding no-shard --metrics_file "$W/ft1.jsonl" >/dev/null 2>&1
d=$(rel_diff "$W/ft.jsonl" "$W/ft1.jsonl" 20 1e-4)
check "np=1 no-shard finetune equals np=2 hybrid ($d)" $?
# a requeued finetune job resumes its own checkpoint instead of restarting from the import
$MPI -np 2 ./fsdpc ${FT/--max_steps 20/--max_steps 22} --sharding hybrid-full-shard --shard_group_size 1 >/dev/null 2>"$W/requeue.log"
grep -q "Resumed from $W/ft/step_00000020.h5 at step 20" "$W/requeue.log" && grep -q "is not loaded again" "$W/requeue.log"
check "a requeued --finetune resumes its checkpoint, not the import" $? "$(grep -m2 'Resum\|Initial' "$W/requeue.log")"

./fsdpc export --checkpoint "$W/ft/step_00000020.h5" --output "$W/export" --dtype fp32 >/dev/null 2>"$W/export.log"
[ $? = 0 ] && [ -f "$W/export/model.safetensors" ] && [ -f "$W/export/config.json" ] && cmp -s "$TOK" "$W/export/tokenizer.model"
check "export writes safetensors, config.json and the tokenizer" $? "$(tail -c 300 "$W/export.log")"

PROMPT="ROMEO: What say you"
./fsdpc --max_steps 0 --resume_from_checkpoint "$W/ft/step_00000020.h5" --prompt "$PROMPT" --num_tokens 30 \
    --temperature 0 >"$W/fsdpc.txt" 2>"$W/gen.log"
check "generation from the finetuned checkpoint needs no tokenizer flag" $? "$(tail -c 300 "$W/gen.log")"
$PY - "$W/export" "$PROMPT" 30 "$W/ref.txt" <<'EOF'
# greedy continuation of the exported directory in the PyTorch reference, printed the way
# fsdpc streams tokens: byte pieces as raw bytes, '▁' as a space, none after <s>, stop at </s>
import os, sys
import sentencepiece as spm
import torch
sys.path.insert(0, "test/ref")
from llama_ref import generate_greedy, load_hf
out_dir, prompt, n, dest = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sp = spm.SentencePieceProcessor(model_file=os.path.join(out_dir, "tokenizer.model"))
ids = [sp.bos_id()] + sp.encode(prompt)
gen = generate_greedy(load_hf(out_dir, torch.float64), ids, n)[len(ids):]
text, prev = prompt.encode(), ids[-1]
for i in gen:
    if i == sp.eos_id():
        break
    if sp.is_byte(i):
        text += bytes([int(sp.id_to_piece(i)[3:5], 16)])
    elif not sp.is_control(i):
        s = " \u2047 " if sp.is_unknown(i) else sp.id_to_piece(i).replace("\u2581", " ")
        if sp.is_control(prev) and not sp.is_unknown(i) and s.startswith(" "):
            s = s[1:]
        text += s.encode()
    prev = i
open(dest, "wb").write(text)
EOF
cmp -s "$W/fsdpc.txt" "$W/ref.txt"
check "the export's greedy continuation in PyTorch equals fsdpc's --prompt output" $? \
    "fsdpc: $(head -c 120 "$W/fsdpc.txt" | od -c | head -3) ref: $(head -c 120 "$W/ref.txt" | od -c | head -3)"
[ "$(wc -c <"$W/fsdpc.txt")" -gt ${#PROMPT} ]
check "the continuation is not empty" $?

# the tokenizer recorded in the checkpoint must still exist
cp -r "$W/hf" "$W/hf2"
./fsdpc --init_from "$W/hf2" --train_data "$W/data/train_*.bin" --batch_size 2 --max_steps 2 --num_tokens 0 \
    --checkpoint_dir "$W/gone" --checkpoint_freq 2 2>/dev/null
rm "$W/hf2/tokenizer.model"
expect_error "the checkpoint's tokenizer file is gone" "names tokenizer '.*hf2/tokenizer.model', which cannot be opened.*pass --tokenizer" \
    ./fsdpc --max_steps 0 --resume_from_checkpoint "$W/gone" --prompt hi --num_tokens 3
expect_error "a tokenizer larger than the model's vocabulary" "the tokenizer '.*' has 1000 tokens but the model's vocabulary is 256" \
    ./fsdpc --tokenizer "$TOK" --vocab_size 256 --train_data synthetic --max_steps 1
expect_error "no data given with a real tokenizer" "with --tokenizer .*, give --train_data" \
    ./fsdpc --tokenizer "$TOK" --max_steps 1
./fsdpc --tokenizer "$TOK" --train_data synthetic --max_steps 1 --num_tokens 0 --checkpoint_freq 0 2>&1 | grep -q "V=1000"
check "the vocabulary comes from the tokenizer unless set" $?
expect_error "an explicit size contradicting config.json" "has hidden_width=64 but this run has --hidden_width 128" \
    ./fsdpc --init_from "$W/hf" --hidden_width 128 --max_steps 1
