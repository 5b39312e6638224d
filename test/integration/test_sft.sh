#!/usr/bin/env bash
# Checks of data/sft (finetuning rows to ids and labels) through build/test_sft and `fsdpc tokenize
# --chat`: Llama-2 chat ids id for id against Meta's chat_completion (test/ref/sft_ref.py, python3-sentencepiece)
# on the SentencePiece fixture, ChatML (on a model trained here with <|im_start|>/<|im_end|>) and the
# plain template; the loss masks of every format; input_ids rows with padding; bad rows, each one
# error line naming the file and the row; Arrow and Parquet rows when npm can fetch the writers.
cd "$(dirname "$0")/../.."
FSDPC=${FSDPC:-./fsdpc}
SFT=${SFT:-build/test_sft}
source test/lib.sh
source test/fixtures/sft_rows.sh
PREFIX="sft: "
MODEL=test/fixtures/tokenizer/tokenizer.model
JSON=test/fixtures/tokenizer/tokenizer.json
PY=/usr/bin/python3
ref() { $PY test/ref/sft_ref.py "$@"; }
chat() { "$FSDPC" tokenize --tokenizer "$@" --chat 2>"$W/log"; }

# ---- Llama-2 chat: fsdpc tokenize --chat against Meta's format ----
ref cases 7 400 >"$W/chat.jsonl"
n=$(wc -l <"$W/chat.jsonl")
ref chat "$MODEL" llama2 "$W/chat.jsonl" >"$W/llama2.ref"
chat "$MODEL" <"$W/chat.jsonl" >"$W/llama2.out"
cmp -s "$W/llama2.ref" "$W/llama2.out"
check "llama2: $n conversations (system prompts, whitespace edges, final user turns, non-ASCII, ShareGPT) give Meta's ids" $? \
    "($(diff "$W/llama2.ref" "$W/llama2.out" | head -c 300 | tr '\n' '|'))"
chat "$JSON" <"$W/chat.jsonl" >"$W/llama2_json.out"
cmp -s "$W/llama2.ref" "$W/llama2_json.out"
check "llama2: the same ids through the equivalent tokenizer.json" $?
chat "$MODEL" --chat_template llama2 --labels <"$W/chat.jsonl" >"$W/llama2.labels"
awk 'NR % 2' "$W/llama2.labels" | cmp -s - "$W/llama2.ref" && ref loss "$MODEL" llama2 "$W/chat.jsonl" "$W/llama2.labels" 2>"$W/loss.err"
check "llama2: --labels: exactly each answer's tokens and its EOS carry loss" $? "($(cat "$W/loss.err"))"
# a hand-checked case: BOS [INST] ... [/INST] answer EOS, then BOS [INST] ... [/INST] without loss
echo '{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Yo"},{"role":"user","content":"Bye"}]}' |
    chat "$MODEL" --labels >"$W/small"
bos=$(head -1 "$W/small" | tr ' ' '\n' | grep -cx 1) eos=$(head -1 "$W/small" | tr ' ' '\n' | grep -cx 2)
loss=$(tail -1 "$W/small" | tr ' ' '\n' | grep -vcx -- -1)
[ "$bos" = 2 ] && [ "$eos" = 1 ] && [ "$(tail -1 "$W/small" | awk '{print $NF}')" = -1 ] && [ "$loss" -ge 2 ]
check "llama2: two BOS, one EOS after the answer, the final user turn without loss" $? "($(tr '\n' '|' <"$W/small"))"

# ---- ChatML and no template ----
$PY - "$W/chatml" <<'EOF' 2>"$W/spm.log"
import sys, sentencepiece
sentencepiece.SentencePieceTrainer.train(input="data/tinyshakespeare.txt", model_prefix=sys.argv[1], vocab_size=400, model_type="bpe",
    byte_fallback=True, character_coverage=1.0, normalization_rule_name="identity", remove_extra_whitespaces=False,
    user_defined_symbols=["<|im_start|>", "<|im_end|>"], input_sentence_size=20000, num_threads=1, minloglevel=2)
EOF
ref chat "$W/chatml.model" chatml "$W/chat.jsonl" >"$W/chatml.ref"
chat "$W/chatml.model" --chat_template chatml --labels <"$W/chat.jsonl" >"$W/chatml.labels"
awk 'NR % 2' "$W/chatml.labels" | cmp -s - "$W/chatml.ref"
check "chatml: <|im_start|>role\\ncontent<|im_end|>\\n with the markers as single ids" $? "($(head -c 200 "$W/log"))"
ref loss "$W/chatml.model" chatml "$W/chat.jsonl" "$W/chatml.labels" 2>"$W/loss.err"
check "chatml: exactly each assistant message's content and its <|im_end|> carry loss" $? "($(cat "$W/loss.err"))"
expect_error "chatml with a tokenizer without <|im_start|>" "stdin line 1: the tokenizer has no <\|im_start\|> token.*--chat_template llama2\|none" \
    "$FSDPC" tokenize --tokenizer "$MODEL" --chat --chat_template chatml <"$W/chat.jsonl"
grep '"assistant", "content": [^]]*\]}$' "$W/chat.jsonl" >"$W/chat_ends.jsonl"  # the plain template's EOS: loss after an answer
ref chat "$MODEL" none "$W/chat_ends.jsonl" >"$W/none.ref"
chat "$MODEL" --chat_template none --labels <"$W/chat_ends.jsonl" >"$W/none.labels"
awk 'NR % 2' "$W/none.labels" | cmp -s - "$W/none.ref" && ref loss "$MODEL" none "$W/chat_ends.jsonl" "$W/none.labels" 2>"$W/loss.err"
ok=$?  # before the message's $(...), which would set $? again
check "none: BOS, each message's content, EOS; loss on the assistant messages and EOS ($(wc -l <"$W/chat_ends.jsonl") conversations)" $ok \
    "($(cat "$W/loss.err"))"

# ---- chat rows through the reader (JSON Lines, gzip, zstd) ----
$SFT "$MODEL" "$W/chat.jsonl" >"$W/chat.rows"
grep '^ids:' "$W/chat.rows" | sed 's/^ids: //' | cmp -s - "$W/llama2.ref" && grep -q '^format=chat$' "$W/chat.rows" &&
    grep -q '^describe=JSON Lines, chat (messages or conversations), llama2 template$' "$W/chat.rows"
check "reader: chat rows detected, described, and encoded as tokenize --chat does" $? "($(head -3 "$W/chat.rows" | tr '\n' '|' | head -c 300))"
gzip -c "$W/chat.jsonl" >"$W/chat.jsonl.gz" && zstd -q -c "$W/chat.jsonl" >"$W/chat.jsonl.zst"
$SFT "$MODEL" "$W/chat.jsonl.gz" | tail -n +3 >"$W/gz.rows" && $SFT "$MODEL" "$W/chat.jsonl.zst" | tail -n +3 >"$W/zst.rows"
tail -n +3 "$W/chat.rows" | cmp -s - "$W/gz.rows" && tail -n +3 "$W/chat.rows" | cmp -s - "$W/zst.rows"
check "reader: gzip and zstd JSON Lines give the same rows" $?
$SFT --train_on_inputs "$MODEL" "$W/chat.jsonl" | awk '/^ids:/ {i = $0; sub(/^ids:/, "", i)} /^labels:/ {l = $0; sub(/^labels:/, "", l); if (l != i) bad++} END {exit bad > 0}'
check "reader: --train_on_inputs puts loss on every token" $?

# ---- prompt/completion and Alpaca ----
cat >"$W/pc.jsonl" <<'EOF'
{"prompt": "Translate to French: cheese", "completion": " fromage"}
{"prompt": "Q: what is 2+2?\nA:", "completion": "4"}
{"prompt": "", "completion": "only a completion"}
{"prompt": null, "completion": "a null row"}
{"prompt": "Café ☕ ", "completion": "naïve 😀"}
EOF
cat >"$W/alpaca.jsonl" <<'EOF'
{"instruction": "Give three tips for staying healthy.", "input": "", "output": "1. Eat well.\n2. Sleep.\n3. Move."}
{"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"}
{"instruction": "Say hi", "output": "hi"}
{"instruction": "Ünïcödé", "input": "  spaced  ", "output": "  kept as is  "}
EOF
for f in pc alpaca; do
    $SFT "$MODEL" "$W/$f.jsonl" >"$W/$f.rows"
    grep -v '^null' "$W/$f.jsonl" | grep -v '"prompt": null' >"$W/$f.nonnull"
    ref prompt "$MODEL" "$W/$f.nonnull" >"$W/$f.ref"
    grep -E '^(ids|labels):' "$W/$f.rows" | cmp -s - "$W/$f.ref"
    check "$f: BOS, the prompt without loss, the answer and EOS with it (against the reference)" $? \
        "($(grep -E '^(ids|labels):' "$W/$f.rows" | diff - "$W/$f.ref" | head -c 300 | tr '\n' '|'))"
done
grep -q '^format=prompt_completion$' "$W/pc.rows" && grep -q '^nulls=1$' "$W/pc.rows" && grep -q '^format=alpaca$' "$W/alpaca.rows"
check "prompt/completion and Alpaca are detected by their members; the null row is skipped and counted" $?
grep -q "Stanford's prompt" "$W/alpaca.rows"
check "Alpaca: the start-up line says which prompt" $?

# ---- input_ids with attention_mask and labels ----
sft_pad_rows "$W"
$SFT "$MODEL" "$W/pad_none.jsonl" >"$W/pad_none.rows"
printf '%s\n' "ids: 1 5 6 7" "labels: -1 -1 6 7" "ids: 1 9" "labels: -1 9" "ids: 1 300 301 302 2" "labels: 1 300 301 302 2" >"$W/pad.want"
grep -E '^(ids|labels):' "$W/pad_none.rows" | cmp -s - "$W/pad.want" && grep -q '^format=input_ids$' "$W/pad_none.rows"
check "input_ids: labels -100 become -1, others stay" $? "($(tr '\n' '|' <"$W/pad_none.rows"))"
for p in left right otherpad; do
    $SFT "$MODEL" "$W/pad_$p.jsonl" | grep -E '^(ids|labels):' | cmp -s - "$W/pad.want"
    check "input_ids: $p padding is removed: the same rows" $?
done
$SFT --train_on_inputs "$MODEL" "$W/pad_left.jsonl" | grep '^labels:' | head -1 | grep -qx 'labels: 1 5 6 7'
check "input_ids: --train_on_inputs gives every real token loss" $?
echo '{"input_ids":[1,5,6]}' >"$W/plain_ids.jsonl"
$SFT "$MODEL" "$W/plain_ids.jsonl" | grep -q '^format=text$'
check "input_ids without attention_mask or labels stay a pretraining stream (detected as text)" $?
$SFT --format input_ids "$MODEL" "$W/plain_ids.jsonl" | grep -A1 '^ids: 1 5 6$' | grep -qx 'labels: 1 5 6'
check "input_ids alone, forced: every token carries loss" $?
$SFT --vocab 301 "$MODEL" "$W/pad_none.jsonl" | grep -q "^error: .*line 3: input_ids item 2 is 301, outside the vocabulary \[0, 301)"
check "input_ids are checked against the model's vocabulary, not the tokenizer's" $?

# ---- bad rows: one error line naming the file and the row ----
sft_bad_rows "$W" >"$W/bad.list"
while IFS=$'\t' read -r name regex; do
    $SFT "$MODEL" "$W/bad_$name.jsonl" >"$W/bad.out" 2>&1
    rc=$?
    [ $rc = 1 ] && [ "$(grep -c '^error:' "$W/bad.out")" = 1 ] && grep -qF "error: '$W/bad_$name.jsonl' line 3: $regex" "$W/bad.out" &&
        [ "$(grep -c '^ids:' "$W/bad.out")" = 2 ]
    check "bad row: $name" $? "(rc=$rc: $(grep -v '^[il]' "$W/bad.out" | tr '\n' '|' | head -c 300))"
done <"$W/bad.list"
for name in missing_role not_alternating empty_messages unknown_role; do
    expect_error "tokenize --chat: $name" "^fsdpc: error: stdin line 3: $(grep "^$name	" "$W/bad.list" | cut -f2 | sed 's/[][().*|]/\\&/g')" \
        "$FSDPC" tokenize --tokenizer "$MODEL" --chat <"$W/bad_$name.jsonl"
done
expect_error "tokenize --chat: not JSON" "stdin line 2 is not JSON" "$FSDPC" tokenize --tokenizer "$MODEL" --chat \
    < <(printf '%s\n' '{"messages":[{"role":"user","content":"a"}]}' '{"messages": [')
expect_error "tokenize --chat: no messages" 'stdin line 1: no "messages" \(or ShareGPT "conversations"\) array' \
    "$FSDPC" tokenize --tokenizer "$MODEL" --chat < <(echo '{"text":"a"}')
expect_error "tokenize: --labels without --chat" "--labels applies to --chat only" "$FSDPC" tokenize --tokenizer "$MODEL" --labels </dev/null
expect_error "tokenize: unknown template" "--chat_template 'alpaca' is none of llama2, chatml, none" \
    "$FSDPC" tokenize --tokenizer "$MODEL" --chat --chat_template alpaca </dev/null
echo '{"prompt": "a"}' >"$W/pc_missing.jsonl"
$SFT --format prompt_completion "$MODEL" "$W/pc_missing.jsonl" | grep -qx "error: '$W/pc_missing.jsonl' line 1: no \"completion\" member (--data_format prompt_completion)"
check "bad row: prompt without completion" $?

# ---- Arrow and Parquet rows from the real writers ----
if ! npm_fetch apache-arrow@21.2.0 parquet-wasm@0.8.0; then
    check "Arrow and Parquet rows # SKIP $NPM_SKIP" 0
    exit 0
fi
table() { node test/fixtures/make_table.cjs "$@" 2>>"$W/node.log"; }
table "$W/pad_right.jsonl" "$W/pad.arrow" stream 2 && table "$W/pad_left.jsonl" "$W/pad.parquet" parquet-zstd 2
for f in pad.arrow pad.parquet; do
    $SFT "$MODEL" "$W/$f" >"$W/$f.rows"
    grep -E '^(ids|labels):' "$W/$f.rows" | cmp -s - "$W/pad.want" && grep -q "^describe=.*input_ids with attention_mask and labels" "$W/$f.rows"
    check "$f: input_ids, attention_mask and labels columns give the JSON Lines rows" $? "($(head -c 300 "$W/$f.rows" "$W/node.log" | tr '\n' '|'))"
done
table "$W/pc.jsonl" "$W/pc.parquet" parquet-snappy 2 && table "$W/alpaca.jsonl" "$W/alpaca.arrow" file 3
$SFT "$MODEL" "$W/pc.parquet" | grep -E '^(ids|labels):' | cmp -s - "$W/pc.ref" && grep -q '^nulls=1$' <($SFT "$MODEL" "$W/pc.parquet")
check "pc.parquet: prompt/completion string columns (a null row skipped)" $?
$SFT "$MODEL" "$W/alpaca.arrow" | grep -E '^(ids|labels):' | cmp -s - "$W/alpaca.ref"
check "alpaca.arrow: instruction/input/output string columns (a null input)" $?
table "$W/bad_mask_value.jsonl" "$W/bad.parquet" parquet-snappy
$SFT "$MODEL" "$W/bad.parquet" | grep -qx "error: '$W/bad.parquet' (Parquet) row 2 (counting from 0): attention_mask item 2 is 2: masks hold 0 (padding) and 1"
check "bad.parquet: a bad row names its row index" $?
echo '{"messages": "x"}' >"$W/chat_col.jsonl" && table "$W/chat_col.jsonl" "$W/chat.parquet" parquet-snappy
$SFT "$MODEL" "$W/chat.parquet" | grep -qx "error: '$W/chat.parquet' (Parquet): column 'messages' is string, but chat rows are a list of structs with string fields role and content"
check "a messages column of strings is refused with one line (test_chat_tables.sh reads list<struct> ones)" $?
