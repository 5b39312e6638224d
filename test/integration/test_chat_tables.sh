#!/usr/bin/env bash
# Chat rows from Arrow IPC (stream and file, apache-arrow) and Parquet (parquet-wasm, snappy, zstd,
# v2 pages, several row groups): a "messages" list<struct<role, content, ...>> column (or ShareGPT's
# "conversations" with from/value) gives the same ids and labels as the same conversations in JSON
# Lines, and trains to bit-identical losses; null rows are skipped, bad rows name their row index,
# extra struct fields are ignored, truncated and damaged files give one error line and no crash.
cd "$(dirname "$0")/../.."
FSDPC=${FSDPC:-./fsdpc}
SFT=${SFT:-build/test_sft}
source test/lib.sh
PREFIX="chat tables: "
MODEL=test/fixtures/tokenizer/tokenizer.model
PY=/usr/bin/python3
if ! npm_fetch apache-arrow@21.2.0 parquet-wasm@0.8.0; then
    check "chat rows from Arrow and Parquet # SKIP $NPM_SKIP" 0
    exit 0
fi
table() { node test/fixtures/make_table.cjs "$@" 2>>"$W/node.log"; }
rows() { "$SFT" "$@" 2>&1 | tail -n +3; }  # without the format= and describe= lines, which name the container

# the reference conversations split by member (a table has one schema), each message with an int
# "weight" the reader ignores, a null row and a null "weight" field in the mix
$PY test/ref/sft_ref.py cases 7 120 >"$W/all.jsonl" 2>"$W/ref.log"
$PY - "$W" <<'EOF'
import json, sys
w = sys.argv[1]
rows = [json.loads(l) for l in open(f"{w}/all.jsonl")]
for key in ("messages", "conversations"):
    out = [r for r in rows if key in r]
    for i, r in enumerate(out):
        for k, m in enumerate(r[key]):
            m["weight"] = None if k == 1 else i + k
    out.insert(3, {key: None})
    with open(f"{w}/{key}.jsonl", "w") as f:
        for r in out:
            f.write(json.dumps({key: r[key]}, ensure_ascii=False) + "\n")
EOF
nm=$(grep -c . "$W/messages.jsonl") nc=$(grep -c . "$W/conversations.jsonl")
[ "$nm" -gt 20 ] && [ "$nc" -gt 5 ]
check "fixtures: $nm messages rows and $nc ShareGPT rows from test/ref/sft_ref.py" $? "($(head -c 200 "$W/ref.log"))"

for key in messages conversations; do
    rows "$MODEL" "$W/$key.jsonl" >"$W/$key.want"
    grep -q '^nulls=1$' "$W/$key.want" && [ "$(grep -c '^ids:' "$W/$key.want")" = $(($(grep -c . "$W/$key.jsonl") - 1)) ]
    check "$key: JSON Lines reference rows (one null row)" $? "($(grep -m1 error "$W/$key.want"))"
    rows --template none "$MODEL" "$W/$key.jsonl" >"$W/$key.none.want"
    for c in "stream 7" "file 5" "parquet-snappy 6" "parquet-zstd 8" "parquet-v2 4" "parquet-gzip 100"; do
        set -- $c
        f="$W/$key.$1"
        if ! table "$W/$key.jsonl" "$f" $1 $2; then
            check "$key: $1 written" 1 "($(tail -c 300 "$W/node.log"))"
            continue
        fi
        "$SFT" "$MODEL" "$f" >"$W/out" 2>&1
        tail -n +3 "$W/out" | cmp -s - "$W/$key.want" && grep -q '^format=chat$' "$W/out" &&
            grep -q "^describe=.*chat (messages or conversations), llama2 template" "$W/out"
        check "$key: $1 ($2 rows a batch/row group) gives the JSON Lines ids and labels" $? \
            "($(tail -n +3 "$W/out" | diff - "$W/$key.want" | head -c 300 | tr '\n' '|'))"
        rows --template none "$MODEL" "$f" | cmp -s - "$W/$key.none.want"
        check "$key: $1 with the plain template too" $?
    done
done

# a non-string field and a struct without one of the needed fields
build/test_arrow "$W/messages.stream" | head -1 | grep -q '"list<struct<role: string, content: string, weight: int32>>","struct_list"'
check "the Arrow column is a struct list with its int field listed" $? "($(build/test_arrow "$W/messages.stream" | head -c 200))"
build/test_parquet --columns "$W/messages.parquet-zstd" | grep -qx "messages	list<struct>	struct_list"
check "the Parquet column is a struct list" $? "($(build/test_parquet --columns "$W/messages.parquet-zstd" | head -c 200))"
echo '{"messages":[{"role":"user","text":"Hi"}]}' >"$W/nocontent.jsonl"
echo '{"messages":"Hi"}' >"$W/strcol.jsonl"
echo '{"messages":[{"role":"user","content":7}]}' >"$W/intcontent.jsonl"
for c in stream parquet-snappy; do
    table "$W/nocontent.jsonl" "$W/nocontent.$c" $c && table "$W/strcol.jsonl" "$W/strcol.$c" $c && table "$W/intcontent.jsonl" "$W/intcontent.$c" $c
    "$SFT" "$MODEL" "$W/nocontent.$c" | grep -q "^error: '$W/nocontent.$c' (.*): column 'messages' (.*) has no field 'content', which chat rows need$"
    check "$c: a struct without content is refused" $? "($("$SFT" "$MODEL" "$W/nocontent.$c" | tail -1))"
    "$SFT" "$MODEL" "$W/intcontent.$c" | grep -q "^error: .* has a non-string field 'content', which chat rows need$"
    check "$c: an int content is refused" $?
    "$SFT" "$MODEL" "$W/strcol.$c" | grep -q "^error: .*: column 'messages' is string, but chat rows are a list of structs with string fields role and content$"
    check "$c: a string messages column is refused" $? "($("$SFT" "$MODEL" "$W/strcol.$c" | tail -1))"
done

# bad rows: the error names the file and the row index
good='{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}]}'
while IFS=$'\t' read -r name row regex; do
    printf '%s\n%s\n%s\n%s\n' "$good" "$good" "$row" "$good" >"$W/bad_$name.jsonl"
    for c in "stream 2" "file 3" "parquet-snappy 2" "parquet-zstd 3"; do
        set -- $c
        f="$W/bad_$name.$1"
        table "$W/bad_$name.jsonl" "$f" $1 $2
        "$SFT" "$MODEL" "$f" >"$W/bad.out" 2>&1
        rc=$?
        [ $rc = 1 ] && [ "$(grep -c '^error:' "$W/bad.out")" = 1 ] && [ "$(grep -c '^ids:' "$W/bad.out")" = 2 ] &&
            grep -q "^error: '$f' (.*) row 2 (counting from 0): $regex" "$W/bad.out"
        check "bad row ($name) in $1: one error line naming row 2" $? "(rc=$rc: $(grep -v '^[il]' "$W/bad.out" | tr '\n' '|' | head -c 300))"
    done
done <<'EOF'
role_order	{"messages":[{"role":"user","content":"Hi"},{"role":"user","content":"Hello"}]}	message 2 is user where Llama-2 chat needs assistant
null_role	{"messages":[{"role":"user","content":"Hi"},{"role":null,"content":"Hello"}]}	message 2 has no role
null_content	{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":null}]}	message 2 has no content
null_message	{"messages":[{"role":"user","content":"Hi"},null]}	message 2 has no role
empty_list	{"messages":[]}	the conversation has no messages
unknown_role	{"messages":[{"role":"user","content":"Hi"},{"role":"tool","content":"42"}]}	message 2 has role "tool"
EOF

# truncated and damaged files: an error line or rows, never a crash or a hang
bad=0 n=0
for f in "$W/messages.stream" "$W/messages.file" "$W/messages.parquet-snappy" "$W/messages.parquet-v2"; do
    size=$(stat -c %s "$f")
    for cut in 1 7 20 $((size / 3)) $((size / 2)) $((size - 9)) $((size - 1)); do
        head -c $cut "$f" >"$W/cut"
        timeout 20 "$SFT" "$MODEL" "$W/cut" >"$W/cut.out" 2>&1
        rc=$? n=$((n + 1))
        { [ $rc -le 1 ] && [ "$(grep -c '^error:' "$W/cut.out")" -le 1 ]; } || { bad=$((bad + 1)); echo "# cut $f at $cut: rc=$rc $(tail -c 200 "$W/cut.out")"; }
    done
    $PY - "$f" "$W/flip" 40 <<'EOF'
import random, sys
src, dst, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = open(src, "rb").read()
r = random.Random(7)
for i in range(k):
    d = bytearray(b)
    for _ in range(r.randint(1, 4)):
        d[r.randrange(len(d))] = r.randrange(256)
    open(f"{dst}{i}", "wb").write(d)
EOF
    for i in $(seq 0 39); do
        timeout 20 "$SFT" "$MODEL" "$W/flip$i" >"$W/flip.out" 2>&1
        rc=$? n=$((n + 1))
        { [ $rc -le 1 ] && [ "$(grep -c '^error:' "$W/flip.out")" -le 1 ]; } || { bad=$((bad + 1)); echo "# $f flip $i: rc=$rc $(tail -c 200 "$W/flip.out")"; }
    done
done
[ $bad = 0 ]
check "truncated and damaged Arrow and Parquet chat files: $n runs, each rows or one error line, no crash" $?
head -c $(($(stat -c %s "$W/messages.parquet-snappy") - 1)) "$W/messages.parquet-snappy" >"$W/short.parquet"
"$SFT" "$MODEL" "$W/short.parquet" | grep -q "^error: '$W/short.parquet': truncated Parquet file"
check "a truncated Parquet file is named as such" $?

# training: 3 steps on each container, losses bit for bit alike
export FSDPC_CACHE_DIR="$W/cache"
train() {
    "$FSDPC" --tokenizer "$MODEL" --train_data "$1" --max_context_width 128 --batch_size 4 --max_steps 3 --num_tokens 0 \
        --checkpoint_freq 0 --metrics_file "$2" >"$2.log" 2>&1
}
train "$W/messages.jsonl" "$W/m_jsonl.metrics"
[ "$(losses "$W/m_jsonl.metrics" | wc -l)" = 3 ]
check "training on chat JSON Lines: 3 steps" $? "($(grep -m2 error "$W/m_jsonl.metrics.log"))"
for c in stream file parquet-zstd; do
    train "$W/messages.$c" "$W/m_$c.metrics"
    cmp -s <(losses "$W/m_jsonl.metrics") <(losses "$W/m_$c.metrics") && grep -q "chat (messages or conversations)" "$W/m_$c.metrics.log"
    check "training on chat rows in $c: the JSON Lines losses bit for bit" $? "($(grep -m2 error "$W/m_$c.metrics.log"))"
done
