#!/usr/bin/env bash
# Finetuning data end to end: masks (attention_mask, -100 labels) are honoured, pad ids change no
# loss, the loss is the mean over the global batch's loss-bearing targets in every layout and with
# --grad_accum, --packing changes speed and not losses, prompt/completion, Alpaca and chat rows
# train, bad rows stop the run with one line, and --document_masking keeps a stream's documents apart.
cd "$(dirname "$0")/../.."
source test/lib.sh
PY=/usr/bin/python3
GEN=test/fixtures/sft_train.py
TOK=test/fixtures/tokenizer/tokenizer.model
export FSDPC_CACHE_DIR="$W/cache"
$PY $GEN smp 400 48 1 0 right >"$W/smp.jsonl"
$PY $GEN smp 400 48 1 77 right >"$W/smp_pad77.jsonl"
$PY $GEN smp 400 48 1 0 left >"$W/smp_left.jsonl"
A="--max_context_width 48 --batch_size 8 --lr 3e-3 --warmup 5 --num_tokens 0 --checkpoint_freq 0 --logging_freq 10"
run() {  # run NAME ARGS...: trains, metrics to $W/NAME.jsonl, log to $W/NAME.log
    local name=$1
    shift
    "$@" --metrics_file "$W/$name.jsonl" >"$W/$name.log" 2>&1
}

# masks, behaviourally: completions after random prompts are learned only through the masks
run masked ./fsdpc --train_data "$W/smp.jsonl" $A --max_steps 100
run inputs ./fsdpc --train_data "$W/smp.jsonl" $A --max_steps 100 --train_on_inputs
m=$(losses "$W/masked.jsonl" | tail -1) i=$(losses "$W/inputs.jsonl" | tail -1)
awk -v m="$m" -v i="$i" 'BEGIN{exit !(m < 0.6 && i > 2.5)}'
check "masked completions are learned (final loss $m); trained on the random prompts too, the loss stays high ($i)" $?
grep -q '"loss_tokens": 72' "$W/masked.jsonl" && grep -q "loss tokens: 72," "$W/masked.log"
check "the loss-bearing token count is logged (8 rows x 9 completion targets)" $? "$(grep -m1 '^Batch' "$W/masked.log")"

# pad ids change no loss, bit for bit; left padding equals right padding
run pad77 ./fsdpc --train_data "$W/smp_pad77.jsonl" $A --max_steps 20
run pad0 ./fsdpc --train_data "$W/smp.jsonl" $A --max_steps 20
run left ./fsdpc --train_data "$W/smp_left.jsonl" $A --max_steps 20
cmp -s <(losses "$W/pad0.jsonl") <(losses "$W/pad77.jsonl") && cmp -s <(losses "$W/pad0.jsonl") <(losses "$W/left.jsonl")
check "other pad ids and left padding give identical losses, bit for bit" $?

# every layout gives the same losses: ranks, strategies, --grad_accum
for L in "2 full-shard 4 1" "2 hybrid-full-shard 4 1" "4 grad-shard 2 1" "1 no-shard 4 2" "2 full-shard 2 2"; do
    set -- $L
    $MPI -np $1 ./fsdpc --train_data "$W/smp.jsonl" $A --max_steps 20 --sharding $2 --batch_size $3 --grad_accum $4 \
        --metrics_file "$W/l$1$2$4.jsonl" >"$W/l.log" 2>&1
    d=$(rel_diff "$W/pad0.jsonl" "$W/l$1$2$4.jsonl" 20 1e-5)
    check "np=$1 $2 batch $3 grad_accum $4 equals np=1 batch 8 ($d)" $? "$(grep -m2 error "$W/l.log")"
done

# the same rows in json.gz, Arrow and Parquet train alike, bit for bit; validation honours the masks too
gzip -c "$W/smp.jsonl" >"$W/smp.jsonl.gz"
conts="smp.jsonl.gz"
if npm_fetch apache-arrow@21.2.0 parquet-wasm@0.8.0; then
    node test/fixtures/make_table.cjs "$W/smp.jsonl" "$W/smp.arrow" stream 64 && node test/fixtures/make_table.cjs "$W/smp.jsonl" "$W/smp.parquet" parquet-snappy 64 &&
        conts="$conts smp.arrow smp.parquet"
else
    echo "ok - Arrow and Parquet rows # SKIP $NPM_SKIP"
fi
for f in $conts; do
    run "c_$f" ./fsdpc --train_data "$W/$f" $A --max_steps 20
    cmp -s <(losses "$W/pad0.jsonl") <(losses "$W/c_$f.jsonl")
    check "rows from $f train as the JSON Lines rows do, bit for bit" $? "$(grep -m2 'error\|rows' "$W/c_$f.log")"
done
V="--val_data $W/smp_left.jsonl --validation_freq 10 --validation_batches 3"
run val1 ./fsdpc --train_data "$W/smp.jsonl" $A --max_steps 10 $V
$MPI -np 2 ./fsdpc --train_data "$W/smp.jsonl" $A --max_steps 10 $V --batch_size 4 --metrics_file "$W/val2.jsonl" >"$W/val2.log" 2>&1
v1=$(sed -nE 's/.*"val_loss": ([0-9.e+-]+).*/\1/p' "$W/val1.jsonl") v2=$(sed -nE 's/.*"val_loss": ([0-9.e+-]+).*/\1/p' "$W/val2.jsonl")
awk -v a="$v1" -v b="$v2" 'BEGIN{d = (a - b) / a; if (d < 0) d = -d; exit !(a > 0 && d < 1e-5)}'
check "validation on rows: the masked mean, equal at np=1 and np=2 ($v1, $v2)" $? "$(grep -m2 'error\|Valid' "$W/val2.log")"

# packing changes speed, not losses
run packed ./fsdpc --train_data "$W/smp.jsonl" $A --max_steps 20 --packing
d=$(rel_diff "$W/pad0.jsonl" "$W/packed.jsonl" 20 1e-5)
check "--packing losses equal the padded run's ($d)" $?
$MPI -np 2 ./fsdpc --train_data "$W/smp.jsonl" $A --max_steps 20 --packing --batch_size 4 --grad_accum 1 \
    --metrics_file "$W/packed2.jsonl" >"$W/p2.log" 2>&1
d=$(rel_diff "$W/pad0.jsonl" "$W/packed2.jsonl" 20 1e-5)
check "--packing on 2 ranks equals the padded run ($d)" $? "$(grep -m2 error "$W/p2.log")"
# a packed run resumed from its checkpoint gives the uninterrupted run's losses, bit for bit
./fsdpc --train_data "$W/smp.jsonl" $A --max_steps 20 --packing --checkpoint_freq 10 --checkpoint_dir "$W/ck" \
    --metrics_file "$W/packed_ck.jsonl" >/dev/null 2>&1
./fsdpc --train_data "$W/smp.jsonl" $A --max_steps 20 --packing --resume_from_checkpoint "$W/ck/step_00000010.h5" \
    --metrics_file "$W/resumed.jsonl" >"$W/resumed.log" 2>&1
cmp -s <(losses "$W/packed_ck.jsonl" | tail -10) <(losses "$W/resumed.jsonl") && cmp -s <(losses "$W/packed_ck.jsonl") <(losses "$W/packed.jsonl")
check "a resumed packed run continues bit for bit" $? "$(grep -m2 'error\|Resumed' "$W/resumed.log")"

# rows longer than the context are cut and counted; a cut that leaves no completion bears no loss
run cut ./fsdpc --train_data "$W/smp.jsonl" $A --max_steps 10 --max_context_width 16
grep -Eq "rows? longer than the context were cut to 16\+1 tokens so far \([0-9]+ of them left with no loss-bearing target\)" "$W/cut.log"
check "rows longer than --max_context_width are cut, with a count" $? "$(grep -m2 'cut\|error' "$W/cut.log")"
# a global batch without a loss-bearing target: no division by zero, no update
$PY $GEN masked 16 20 >"$W/allmasked-rows.jsonl"  # not allmasked.jsonl: that is the run's metrics file
run allmasked ./fsdpc --train_data "$W/allmasked-rows.jsonl" $A --max_steps 2
grep -q "step 1: no target in the global batch bears loss" "$W/allmasked.log" && grep -q '"loss": 0,' "$W/allmasked.jsonl"
check "a batch of prompts only: loss 0, update skipped, no NaN" $? "$(grep -m2 'step 1\|error' "$W/allmasked.log")"

# formats with a real tokenizer: prompt/completion, Alpaca, chat (Llama-2 template) and ChatML refused without its tokens
for f in prompt_completion alpaca chat; do
    $PY $GEN $f 300 2 >"$W/$f.jsonl"
    run m_$f ./fsdpc --tokenizer "$TOK" --train_data "$W/$f.jsonl" $A --max_context_width 128 --max_steps 60 \
        --checkpoint_freq 60 --checkpoint_dir "$W/ck_$f"
    first=$(losses "$W/m_$f.jsonl" | head -1) last=$(losses "$W/m_$f.jsonl" | tail -1)
    awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a / 2)}'
    check "$f rows train (loss $first -> $last)" $? "$(grep -m2 'error\|rows' "$W/m_$f.log")"
done
grep -q "chat (messages or conversations), llama2 template" "$W/m_chat.log"
check "the start-up line names the chat format and template" $? "$(grep -m1 'training data' "$W/m_chat.log")"
# the finetuned model chats in its format: the prompt goes in as a Llama-2 user turn, the answer ends at </s>
./fsdpc --resume_from_checkpoint "$W/ck_chat" --max_steps 0 --prompt "the a of to and in" --chat_template llama2 \
    --temperature 0 --num_tokens 20 >"$W/said.txt" 2>"$W/said.log"
grep -Eqx "the a of to and in ?(yes indeed|no sir|the king is dead|to be or not) ?" "$W/said.txt"
check "the finetuned model answers a --chat_template llama2 prompt with one of its answers, then stops" $? "$(head -c 200 "$W/said.txt")"
expect_error "ChatML needs its special tokens" "<\|im_start\|>" ./fsdpc --tokenizer "$TOK" --train_data "$W/chat.jsonl" \
    --chat_template chatml $A --max_steps 1
expect_error "--data_format chat on text" "reads rows of JSON Lines, Arrow or Parquet" ./fsdpc --tokenizer "$TOK" \
    --train_data data/tinyshakespeare.txt --data_format chat $A --max_steps 1
expect_error "--packing on a stream" "--packing packs finetuning rows" ./fsdpc --train_data data/tinyshakespeare.txt --packing $A --max_steps 1

# bad rows: one line naming the file and the row, nothing trained, on every rank
source test/fixtures/sft_rows.sh
mkdir -p "$W/bad"
while IFS=$'\t' read -r name regex; do
    rm -rf "$W/badck"
    expect_error "bad row ($name)" "bad_$name.jsonl.*(line|row) 3" $MPI -np 2 ./fsdpc --tokenizer "$TOK" --train_data "$W/bad/bad_$name.jsonl" \
        $A --max_steps 2 --checkpoint_freq 1 --checkpoint_dir "$W/badck" </dev/null
    [ ! -e "$W/badck" ] || [ -z "$(ls "$W/badck")" ]
    check "bad row ($name): nothing trained or written" $?
done < <(sft_bad_rows "$W/bad" | grep -E '^(mask_length|labels_vocab|missing_role|not_alternating|empty_messages|unknown_role)\b')

# --document_masking: a stream's documents kept apart, the same losses at np=1 and np=2
for i in $(seq 60); do printf '{"text": "%s"}\n' "$(sed -n "$((i * 7)),$((i * 7 + 3 + i % 5))p" data/tinyshakespeare.txt | tr -d '"\\' | tr '\n' ' ')"; done >"$W/docs.jsonl"
B="--tokenizer $TOK --train_data $W/docs.jsonl $A --max_context_width 64 --max_steps 10"
run plain ./fsdpc $B
run docmask ./fsdpc $B --document_masking
$MPI -np 2 ./fsdpc $B --document_masking --batch_size 4 --metrics_file "$W/docmask2.jsonl" >"$W/dm2.log" 2>&1
d=$(rel_diff "$W/docmask.jsonl" "$W/docmask2.jsonl" 10 1e-5)
check "--document_masking: np=2 equals np=1 ($d)" $? "$(grep -m2 error "$W/dm2.log")"
! cmp -s <(losses "$W/plain.jsonl") <(losses "$W/docmask.jsonl") && grep -q '"loss_tokens"' "$W/docmask.jsonl" &&
    [ "$(sed -nE 's/.*"loss_tokens": ([0-9]+).*/\1/p' "$W/docmask.jsonl" | head -1)" -lt 512 ]
check "--document_masking changes the losses and drops the targets that cross into the next document" $?
./fsdpc prepare --input data/tinyshakespeare.txt --output "$W/shards" >/dev/null 2>&1
expect_error "--document_masking on token shards" "does not record" ./fsdpc --train_data "$W/shards/train_000000.bin" --document_masking $A --max_steps 1
# prepare writes token streams: finetuning rows given to it are refused, not flattened with their padding
expect_error "prepare refuses finetuning rows" "finetuning row \(input_ids with attention_mask or labels\)" ./fsdpc prepare --input "$W/smp.jsonl" --output "$W/prep"
expect_error "prepare refuses chat rows" "finetuning row \(a chat\)" ./fsdpc prepare --tokenizer "$TOK" --input "$W/chat.jsonl" --output "$W/prep"
