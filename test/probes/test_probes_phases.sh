#!/usr/bin/env bash
# Issue 23, classes 1 and 6b. Stop signals in every phase (start-up, loading, a data cache build,
# validation, prepare, export, tokenize, plan; mpirun relaying them): exit status 75, one line
# saying what stopped, nothing partial under a final name, no writer lock left, and a re-run that
# works. Then fields fsdpc does not read (checkpoint entries outside its schema, dataset columns
# and members no row format uses): one warning per file or data source, and a run unchanged.
cd "$(dirname "$0")/../.."
source test/lib.sh
SMALL="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64 --batch_size 4 --num_tokens 0"
MID="--tokenizer byte --hidden_width 256 --num_layers 8 --num_heads 8 --num_key_value_heads 8 --intermediate_size 688 --max_context_width 64 --batch_size 1 --num_tokens 0"
TOK=test/fixtures/tokenizer/tokenizer.json

# bg CMD...: CMD in the background (its pid in BG), killed after 60 s; fin: waits for it, status in RC
bg() {
    "$@" <&0 &  # stdin named: a background command would otherwise read /dev/null
    BG=$!
    (for _ in $(seq 600); do kill -0 $BG 2>/dev/null || exit 0; sleep 0.1; done; kill -KILL $BG 2>/dev/null) &
    WD=$!
}
fin() {
    wait $BG
    RC=$?
    wait $WD 2>/dev/null
}
# until CMD...: polls CMD every 10 ms, for 30 s at most
until_() { for _ in $(seq 3000); do "$@" >/dev/null 2>&1 && return 0; sleep 0.01; done; return 1; }
MPIRUN="mpirun --oversubscribe --allow-run-as-root"  # in the background: its ranks are its children
listing() { (cd "$1" 2>/dev/null && find . -type f | sort | xargs -r sha256sum); }
stopped() { grep -c "^Stopped by signal $2 ($3) during $4" "$1"; }  # stopped LOG NUM NAME PHASE: count of such lines

# ---- start-up: a signal in the first moment (before MPI_Init), held there by FSDPC_TEST_PAUSE ----
for s in "TERM 15" "INT 2" "HUP 1"; do
    set -- $s
    FSDPC_TEST_PAUSE=start-up:5 bg ./fsdpc $SMALL --max_steps 100 --checkpoint_dir "$W/su_$1" >"$W/su_$1.log" 2>&1
    sleep 0.15
    kill -$1 $BG
    fin
    [ $RC = 75 ] && [ "$(stopped "$W/su_$1.log" $2 SIG$1 "start-up")" = 1 ] && [ -z "$(ls -A "$W/su_$1" 2>/dev/null)" ]
    check "SIG$1 0.15 s after launch: exit 75, one 'Stopped by signal $2 (SIG$1) during start-up' line, nothing written" $? \
        "rc=$RC $(tail -c 300 "$W/su_$1.log" | tr '\n' '|')"
done
FSDPC_TEST_PAUSE=start-up:5 bg $MPIRUN -np 2 ./fsdpc $SMALL --batch_size 2 --max_steps 100 --checkpoint_dir "$W/su_np2" >"$W/su_np2.log" 2>&1
until_ pgrep -P $BG
sleep 0.2
kill -TERM $(pgrep -P $BG)
fin
[ $RC = 75 ] && [ -z "$(ls -A "$W/su_np2" 2>/dev/null)" ]
check "np=2, SIGTERM to both ranks during start-up: mpirun exits 75" $? "rc=$RC $(grep -m2 'Stopped\|error' "$W/su_np2.log")"
FSDPC_TEST_PAUSE=start-up:5 bg ./fsdpc plan --device cpu --world_size 2 --json >"$W/plan.out" 2>"$W/plan.log"
sleep 0.1
kill -TERM $BG
fin
[ $RC = 75 ] && grep -q "^Stopped by signal 15 (SIGTERM) during " "$W/plan.log"
check "fsdpc plan stopped in its first moment: exit 75 with its line" $? "rc=$RC $(tail -c 200 "$W/plan.log")"

# ---- loading: resuming a checkpoint; the writer lock goes with the process ----
./fsdpc $MID --max_steps 1 --checkpoint_dir "$W/mid" >/dev/null 2>&1
before=$(listing "$W/mid")
for s in "INT 2" "HUP 1"; do
    set -- $s
    bg ./fsdpc $MID --max_steps 3 --resume_from_checkpoint "$W/mid" --checkpoint_dir "$W/mid" >"$W/load_$1.log" 2>&1
    until_ test -e "$W/mid/.fsdpc-writer"
    kill -$1 $BG
    fin
    [ $RC = 75 ] && [ "$(stopped "$W/load_$1.log" $2 SIG$1 "loading")" = 1 ] && [ "$(listing "$W/mid")" = "$before" ] &&
        [ ! -e "$W/mid/.fsdpc-writer" ]
    check "SIG$1 while a resume loads its checkpoint: exit 75, the checkpoint folder as it was, no writer lock left" $? \
        "rc=$RC $(grep -m2 'Stopped\|Preempted\|error' "$W/load_$1.log") $(ls -A "$W/mid" | tr '\n' ' ')"
done
timeout 120 ./fsdpc $MID --max_steps 2 --resume_from_checkpoint "$W/mid" --checkpoint_dir "$W/mid" >"$W/load_again.log" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "Resumed from .*step_00000001.h5" "$W/load_again.log" && [ -f "$W/mid/step_00000002.h5" ] && [ ! -e "$W/mid/.fsdpc-writer" ]
check "the stopped resume, run again, resumes and checkpoints" $? "rc=$rc $(grep -m1 error "$W/load_again.log")"

# ---- a data cache build, validation ----
/usr/bin/python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
t = open("data/tinyshakespeare.txt").read()
with open(f"{w}/big.jsonl", "w") as f:  # ~19 MB: a cache build or prepare runs for a second or more
    for r in range(16):
        for i in range(0, len(t), 400):
            f.write(json.dumps({"text": t[i:i + 400], "id": r * 10000 + i}) + "\n")
with open(f"{w}/chat.jsonl", "w") as f:
    for i in range(0, 4000, 400):
        f.write(json.dumps({"messages": [{"role": "user", "content": t[i:i + 150]}, {"role": "assistant", "content": t[i + 150:i + 400]}]}) + "\n")
PY
bg ./fsdpc $SMALL --max_steps 5 --checkpoint_freq 0 --train_data "$W/big.jsonl" --tokenizer $TOK --data_cache_dir "$W/cache" >"$W/cache.log" 2>&1
until_ compgen -G "$W/cache/tok-*.tmp"
kill -HUP $BG
fin
[ $RC = 75 ] && grep -q "while building the data cache" "$W/cache.log" && [ -z "$(ls -A "$W/cache")" ]
check "SIGHUP during a data cache build: exit 75, no cache folder left" $? "rc=$RC $(tail -n1 "$W/cache.log") $(ls "$W/cache")"
bg ./fsdpc $SMALL --max_steps 0 --allow_random_weights --val_data data/tinyshakespeare.txt --validation_batches 100000 >"$W/val.log" 2>&1
until_ grep -q "^sharding" "$W/val.log"
sleep 0.5
kill -QUIT $BG
fin
[ $RC = 75 ] && grep -q "^Stopped by signal 3 (SIGQUIT) during validation, at batch" "$W/val.log" && ! grep -q "Validation loss" "$W/val.log"
check "SIGQUIT during a validation-only run: exit 75 at the next batch, no loss reported" $? "rc=$RC $(tail -n1 "$W/val.log")"
bg $MPIRUN -np 2 ./fsdpc $SMALL --batch_size 2 --max_steps 0 --allow_random_weights --val_data data/tinyshakespeare.txt --validation_batches 100000 >"$W/val2.log" 2>&1
until_ grep -q "^sharding" "$W/val2.log"
sleep 0.5
kill -TERM "$(pgrep -P $BG | tail -1)"  # one rank: the batch loop agrees on it
fin
[ $RC = 75 ] && [ "$(grep -c '^Stopped by signal 15 (SIGTERM) during validation' "$W/val2.log")" = 1 ]
check "np=2, SIGTERM to one rank during validation: every rank stops at the same batch, mpirun exits 75" $? "rc=$RC $(grep -m2 'Stopped\|error' "$W/val2.log")"

# ---- prepare: shards through .tmp names; a stop removes every shard written ----
bg ./fsdpc prepare --input "$W/big.jsonl" --output "$W/prep" --tokenizer $TOK --shard_tokens 100000 >"$W/prep.log" 2>&1
until_ compgen -G "$W/prep/train_*.bin"
kill -TERM $BG
fin
n=$(tr '\r' '\n' <"$W/prep.log" | sed -nE 's/^Stopped by signal 15 \(SIGTERM\) during prepare: the ([0-9]+) shard.*/\1/p')
[ $RC = 75 ] && [ -n "$n" ] && [ "$n" -ge 1 ] && [ ! -e "$W/prep" ]
check "SIGTERM during prepare: exit 75, the $n finished shard(s) removed, and the folder it created" $? "rc=$RC $(ls -A "$W/prep" 2>&1 | head -3)"
mkdir "$W/prep2" && echo keep >"$W/prep2/notes.txt"
bg $MPIRUN -np 2 ./fsdpc prepare --input "$W/big.jsonl" --output "$W/prep2" --tokenizer $TOK --shard_tokens 100000 >"$W/prep2.log" 2>&1
until_ compgen -G "$W/prep2/train_*.bin"
kill -INT $(pgrep -P $BG)
fin
[ $RC = 75 ] && [ "$(ls -A "$W/prep2")" = notes.txt ] && [ "$(tr '\r' '\n' <"$W/prep2.log" | grep -c '^Stopped by signal 2 (SIGINT) during prepare')" = 1 ]
check "np=2, SIGINT to both ranks during prepare: mpirun exits 75, only the folder's own file is left" $? "rc=$RC $(ls -A "$W/prep2" | head -3 | tr '\n' ' ')"
timeout 120 ./fsdpc prepare --input "$W/big.jsonl" --output "$W/prep2" --tokenizer $TOK --shard_tokens 100000 >/dev/null 2>&1 &&
    timeout 120 ./fsdpc prepare --input "$W/big.jsonl" --output "$W/prep3" --tokenizer $TOK --shard_tokens 100000 >/dev/null 2>&1
rc=$?
[ $rc = 0 ] && [ "$(listing "$W/prep3")" = "$(listing "$W/prep2" | grep -v notes.txt)" ]
check "prepare run again after the stop writes what an uninterrupted prepare writes" $? "rc=$rc"

# ---- export: files under .tmp names until all are written ----
FSDPC_TEST_PAUSE=export:5 bg ./fsdpc export --checkpoint "$W/mid" --output "$W/ex" --dtype fp32 --max_shard_size 4000000 >"$W/ex.log" 2>&1
until_ compgen -G "$W/ex/*.tmp"
kill -TERM $BG
fin
[ $RC = 75 ] && grep -q "^Stopped by signal 15 (SIGTERM) during export" "$W/ex.log" && [ ! -e "$W/ex" ]
check "SIGTERM during export: exit 75, no file left (nor the folder it created)" $? "rc=$RC $(tail -n1 "$W/ex.log") $(ls -A "$W/ex" 2>&1 | head -3)"
timeout 120 ./fsdpc export --checkpoint "$W/mid/step_00000001.h5" --output "$W/ex" --dtype fp32 --max_shard_size 4000000 >/dev/null 2>&1
old=$(listing "$W/ex")
FSDPC_TEST_PAUSE=export:5 bg ./fsdpc export --checkpoint "$W/mid" --output "$W/ex" --dtype fp32 --max_shard_size 4000000 >"$W/ex2.log" 2>&1
until_ compgen -G "$W/ex/*.tmp"
kill -HUP $BG
fin
[ $RC = 75 ] && [ -n "$old" ] && [ "$(listing "$W/ex")" = "$old" ]
check "SIGHUP during an export over an earlier one: exit 75, the earlier export untouched" $? "rc=$RC $(tail -n1 "$W/ex2.log")"

# ---- tokenize: stdout ends with whole lines ----
bg ./fsdpc tokenize --tokenizer byte >"$W/tok.out" 2>"$W/tok.log" < <(printf 'ab\ncd\n'; sleep 20)
sleep 1.5
kill -TERM $BG
fin
[ $RC = 75 ] && [ "$(cat "$W/tok.out")" = "$(printf '97 98\n99 100')" ] &&
    grep -q "^Stopped by signal 15 (SIGTERM) during tokenize: standard output holds the whole lines of the first 2 input" "$W/tok.log"
check "SIGTERM to tokenize waiting on stdin: exit 75, the two lines read, whole" $? "rc=$RC $(cat "$W/tok.log")"
bg ./fsdpc tokenize --tokenizer $TOK --chat >"$W/chat.out" 2>"$W/chat.log" < <(head -3 "$W/chat.jsonl"; sleep 20)
sleep 1.5
kill -INT $BG
fin
[ $RC = 75 ] && [ "$(wc -l <"$W/chat.out")" = 3 ] && grep -q "first 3 input line" "$W/chat.log"
check "SIGINT to tokenize --chat: exit 75, three conversations written whole" $? "rc=$RC $(cat "$W/chat.log")"

# ---- mpirun relaying the signal (Open MPI 4.1: see DESIGN.md "Exit status and stop signals") ----
bg $MPIRUN -np 2 ./fsdpc prepare --input "$W/big.jsonl" --output "$W/relay" --tokenizer $TOK --shard_tokens 100000 >"$W/relay.log" 2>&1
until_ compgen -G "$W/relay/train_*.bin"
kill -USR1 $BG
fin
[ $RC = 75 ] && [ ! -e "$W/relay" ] && tr '\r' '\n' <"$W/relay.log" | grep -q "^Stopped by signal 10 (SIGUSR1) during prepare"
check "SIGUSR1 to mpirun: forwarded to the ranks, which stop; mpirun exits 75" $? "rc=$RC $(ls -A "$W/relay" 2>&1 | head -2)"
# mpirun sends SIGTERM on 1 s after it got it, and SIGKILL 1 s later: a phase long enough to see it
bg $MPIRUN -np 2 ./fsdpc $SMALL --batch_size 2 --max_steps 0 --allow_random_weights --val_data data/tinyshakespeare.txt --validation_batches 100000 >"$W/relay2.log" 2>&1
until_ grep -q "^sharding" "$W/relay2.log"
sleep 2  # past the loading phase (which stops at once, rank by rank) into validation, which stops together
kill -TERM $BG
fin
[ $RC = 1 ] && grep -q "^Stopped by signal 15 (SIGTERM) during validation" "$W/relay2.log"
check "SIGTERM to mpirun: the ranks get SIGTERM a second later and stop cleanly, but mpirun itself exits 1 (as documented)" $? \
    "rc=$RC $(grep -m1 Stopped "$W/relay2.log")"

# the recipe DESIGN.md gives a requeue script: the scheduler's SIGTERM becomes SIGUSR1 for mpirun
cat >"$W/wrap.sh" <<EOF
$MPIRUN -np 2 ./fsdpc $SMALL --batch_size 2 --max_steps 0 --allow_random_weights --val_data data/tinyshakespeare.txt --validation_batches 100000 &
pid=\$!
trap 'kill -USR1 \$pid' TERM INT HUP
while kill -0 \$pid 2>/dev/null; do wait \$pid; rc=\$?; done
exit \$rc
EOF
bg bash "$W/wrap.sh" >"$W/wrap.log" 2>&1
until_ grep -q "^sharding" "$W/wrap.log"
sleep 2  # into validation, as above
kill -TERM $BG
fin
[ $RC = 75 ] && grep -q "^Stopped by signal 10 (SIGUSR1) during validation" "$W/wrap.log"
check "a wrapper turning SIGTERM into SIGUSR1 for mpirun exits 75" $? "rc=$RC $(grep -m1 'Stopped\|error' "$W/wrap.log")"

# ---- class 6b: checkpoint entries outside the schema: one warning, the run unchanged ----
./fsdpc $SMALL --max_steps 2 --checkpoint_dir "$W/ck" >/dev/null 2>&1
mkdir -p "$W/ckx" && cp "$W/ck/step_00000002.h5" "$W/ckx/"
/usr/bin/python3 - "$W/ckx/step_00000002.h5" <<'PY'
import sys
import h5py
import numpy as np
with h5py.File(sys.argv[1], "a") as f:
    f.attrs["ema_decay"] = 0.999
    f.create_group("ema")
    f["optim/step_count"] = np.zeros(3, dtype=np.float32)
    f["source/README.md"] = np.frombuffer(b"notes", dtype=np.uint8)
PY
R="$SMALL --max_steps 4 --lr_decay_style constant --logging_freq 1"
timeout 60 ./fsdpc $R --resume_from_checkpoint "$W/ck/step_00000002.h5" --checkpoint_freq 0 --metrics_file "$W/ck.jsonl" >/dev/null 2>&1
timeout 60 ./fsdpc $R --resume_from_checkpoint "$W/ckx" --checkpoint_dir "$W/ckx" --metrics_file "$W/ckx.jsonl" >/dev/null 2>"$W/ckx.log"
rc=$?
w="warning: checkpoint '$W/ckx/step_00000002.h5' holds attributes 'ema_decay'; /ema, /optim/step_count, /source/README.md, which this fsdpc does not read"
[ $rc = 0 ] && [ "$(grep -c '^warning: checkpoint' "$W/ckx.log")" = 1 ] && grep -qF "$w" "$W/ckx.log" &&
    cmp -s <(steady "$W/ck.jsonl") <(steady "$W/ckx.jsonl")
check "a checkpoint with an extra attribute, group and datasets: one warning naming them (resolve + load), losses unchanged" $? \
    "rc=$rc $(grep -m2 'warning\|error' "$W/ckx.log")"
timeout 60 ./fsdpc export --checkpoint "$W/ckx/step_00000002.h5" --output "$W/ckx_hf" >/dev/null 2>"$W/ckx_ex.log"
rc=$?
[ $rc = 0 ] && [ "$(grep -c '^warning: checkpoint' "$W/ckx_ex.log")" = 1 ] && grep -qF "$w" "$W/ckx_ex.log"
check "export of that checkpoint: the same one warning, and it exports" $? "rc=$rc $(head -c 300 "$W/ckx_ex.log")"
timeout 60 ./fsdpc $R --resume_from_checkpoint "$W/ck/step_00000002.h5" --checkpoint_freq 0 >/dev/null 2>"$W/ck_plain.log"
! grep -q "^warning: checkpoint" "$W/ck_plain.log"
check "a checkpoint fsdpc wrote gets no such warning" $?

# ---- class 6b: dataset fields no row format reads ----
/usr/bin/python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
t = open("data/tinyshakespeare.txt").read()[:60000]
docs = [t[i:i + 300] for i in range(0, len(t), 300)]
with open(f"{w}/plain.jsonl", "w") as f, open(f"{w}/extra.jsonl", "w") as g:
    for i, d in enumerate(docs):
        f.write(json.dumps({"text": d}) + "\n")
        g.write(json.dumps({"url": f"https://example.com/{i}", "text": d, "timestamp": 1700000000 + i, "labels": [1, 2]}) + "\n")
with open(f"{w}/pc.jsonl", "w") as f:
    for d in docs:
        f.write(json.dumps({"prompt": d[:100], "completion": d[100:], "source": "x"}) + "\n")
with open(f"{w}/chatx.jsonl", "w") as f:
    for d in docs:
        f.write(json.dumps({"messages": [{"role": "user", "content": d[:100], "weight": 0}, {"role": "assistant", "content": d[100:], "weight": 1}]}) + "\n")
PY
D="$SMALL --max_steps 3 --checkpoint_freq 0 --logging_freq 1 --tokenizer $TOK --data_cache_dir $W/dcache"
fields_run() {  # fields_run NAME FILE: trains on FILE with the metrics in $W/m_NAME.jsonl, stderr in $W/NAME.log
    rm -f "$W/m_$1.jsonl"
    timeout 60 ./fsdpc $D --train_data "$2" --metrics_file "$W/m_$1.jsonl" >/dev/null 2>"$W/$1.log"
}
fields_run plain "$W/plain.jsonl"
sha=$(sha256sum "$W/extra.jsonl")
fields_run extra "$W/extra.jsonl"
rc=$?
wl="warning: training data '$W/extra.jsonl': fields url, timestamp, labels are not used (text is read); labels is read only in another row format"
[ $rc = 0 ] && [ "$(grep -c '^warning:' "$W/extra.log")" = 1 ] && grep -qF "$wl" "$W/extra.log" && cmp -s <(steady "$W/m_plain.jsonl") <(steady "$W/m_extra.jsonl") &&
    [ "$(sha256sum "$W/extra.jsonl")" = "$sha" ]
check "JSON Lines with url, timestamp and labels beside text: one warning naming them (labels as meant for another format), losses unchanged" $? \
    "rc=$rc $(grep -m2 'warning\|error' "$W/extra.log")"
fields_run extra2 "$W/extra.jsonl"
[ "$(grep -c '^warning:' "$W/extra2.log")" = 1 ] && grep -qF "$wl" "$W/extra2.log" && ! grep -q "built in" "$W/extra2.log"
check "the same warning, once, when the data cache is reused" $? "$(grep -m2 'warning\|training data' "$W/extra2.log")"
fields_run pc "$W/pc.jsonl"
[ $? = 0 ] && [ "$(grep -c '^warning:' "$W/pc.log")" = 1 ] &&
    grep -qF "warning: training data '$W/pc.jsonl': field source is not used (prompt, completion are read)" "$W/pc.log"
check "prompt/completion rows with a source field: one warning naming it" $? "$(grep -m2 'warning\|error' "$W/pc.log")"
fields_run chatx "$W/chatx.jsonl"
[ $? = 0 ] && [ "$(grep -c '^warning:' "$W/chatx.log")" = 1 ] && grep -q "field messages.weight is not used" "$W/chatx.log"
check "chat rows whose messages carry a weight: one warning naming messages.weight" $? "$(grep -m2 'warning\|error' "$W/chatx.log")"
timeout 60 $MPI -np 2 ./fsdpc prepare --input "$W/extra.jsonl" "$W/plain.jsonl" --output "$W/pfields" --tokenizer $TOK >/dev/null 2>"$W/pfields.log"
rc=$?
[ $rc = 0 ] && [ "$(grep -c '^warning:' "$W/pfields.log")" = 1 ] &&
    grep -qF "warning: prepare --input: fields url, timestamp, labels are not used (text is read)" "$W/pfields.log"
check "np=2 prepare of the same rows: one warning for all ranks' inputs" $? "rc=$rc $(grep -m2 'warning\|error' "$W/pfields.log")"
if npm_fetch apache-arrow@21.2.0 parquet-wasm@0.8.0; then
    for f in "arrow stream" "parquet parquet-snappy"; do
        set -- $f
        node test/fixtures/make_table.cjs "$W/extra.jsonl" "$W/extra.$1" $2 40 2>>"$W/node.log"
        fields_run "extra_$1" "$W/extra.$1"
        rc=$?
        [ $rc = 0 ] && [ "$(grep -c '^warning:' "$W/extra_$1.log")" = 1 ] &&
            grep -qF "warning: training data '$W/extra.$1': fields url, timestamp, labels are not used (text is read)" "$W/extra_$1.log" &&
            cmp -s <(steady "$W/m_plain.jsonl") <(steady "$W/m_extra_$1.jsonl")
        check "${1^} with columns url, timestamp, labels beside text: one warning, losses as from plain JSON Lines" $? \
            "rc=$rc $(grep -m2 'warning\|error' "$W/extra_$1.log")"
    done
else
    check "Arrow and Parquet columns # SKIP $NPM_SKIP" 0
fi
