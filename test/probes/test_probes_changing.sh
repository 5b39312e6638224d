#!/usr/bin/env bash
# Inputs that change under a running job: a file another program truncates or rewrites in place
# while fsdpc reads it. A mapped file (a data cache's document index, Arrow and Parquet tables)
# raises SIGBUS on the next read of the lost pages: the run ends with an error line naming the file
# (never "Bus error", a core or a backtrace), exit 1, and the job ends on every rank. A token file
# read with pread that shrank is the same kind of line.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="changing inputs: "
export FSDPC_CACHE_DIR=$W/cache
/usr/bin/python3 - "$W/d.jsonl" <<'PY'
import json, sys
text = open("data/tinyshakespeare.txt", encoding="utf-8").read()
with open(sys.argv[1], "w") as f:
    for d in text.split("\n\n"):
        f.write(json.dumps({"text": d}) + "\n")
PY
R="--tokenizer byte --hidden_width 32 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 64
   --max_context_width 64 --batch_size 4 --max_steps 100000 --logging_freq 1 --checkpoint_freq 0 --validation_freq 0
   --num_tokens 0 --num_threads 1 --train_data $W/d.jsonl --document_masking"

# shrink NAME GLOB SIZE: a 2-rank run; once it logs a step, every cache file matching GLOB is cut to
# SIZE bytes; the job must end within 60 s with status 1..123 and an error line naming such a file
shrink() {
    local name=$1 glob=$2 size=$3 i f
    $MPI -np 2 ./fsdpc $R >"$W/$name.log" 2>&1 &
    local job=$!
    for i in $(seq 300); do grep -q '^Batch' "$W/$name.log" && break; sleep 0.2; done
    for f in $W/cache/*/$glob; do truncate -s "$size" "$f"; done
    for i in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.2; done
    kill -9 $job 2>/dev/null
    wait $job
    RC=$?
}
shrink idx 'part-*.idx' 4096
[ $RC -ge 1 ] && [ $RC -lt 124 ] &&
    grep -Eq "^fsdpc: error: '.*/part-[0-9]+\.idx' got shorter while it was being read \(another program truncated or rewrote it in place\)" "$W/idx.log" &&
    ! grep -Eq "Bus error|Signal: |core dumped|\*\*\* Process received signal" "$W/idx.log"
check "a data cache's document index cut mid-run (mapped): one line per rank that read it, no bus-error crash (np=2)" $? \
    "(rc=$RC) $(grep -v '^Batch' "$W/idx.log" | grep -m4 -E 'error|Bus|Signal' | head -c 500)"
rm -rf "$W/cache"
shrink bin 'part-*.bin' 4096
[ $RC -ge 1 ] && [ $RC -lt 124 ] && grep -Eq "fsdpc: error: .*part-[0-9]+\.bin.*(shrank|truncated|got shorter)" "$W/bin.log" &&
    ! grep -Eq "Bus error|Signal: |core dumped" "$W/bin.log"
check "a data cache's tokens cut mid-run (read with pread): an error line naming the part (np=2)" $? \
    "(rc=$RC) $(grep -v '^Batch' "$W/bin.log" | grep -m4 -E 'error|Bus|Signal' | head -c 500)"

# a data file replaced (renamed over) mid-run, among more files than a dataset keeps open: when the
# loader opens it again it is another file, and the run ends with a line naming it rather than
# training on other data
mkdir -p "$W/many"
/usr/bin/python3 -c '
import sys
t = open("data/tinyshakespeare.txt").read()
for i in range(100): open(f"{sys.argv[1]}/f{i:03d}.txt", "w").write(t[i * 4000:(i + 1) * 4000])' "$W/many"
R2="--tokenizer byte --hidden_width 32 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 64
    --max_context_width 64 --batch_size 8 --max_steps 100000 --logging_freq 1 --checkpoint_freq 0 --validation_freq 0
    --num_tokens 0 --num_threads 1 --train_data $W/many"
./fsdpc $R2 >"$W/repl.log" 2>&1 &
job=$!
for i in $(seq 300); do grep -q '^Batch' "$W/repl.log" && break; sleep 0.2; done
head -c 3000 data/tinyshakespeare.txt >"$W/new.txt" && mv "$W/new.txt" "$W/many/f090.txt"
for i in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.2; done
kill -9 $job 2>/dev/null
wait $job
rc=$?
[ $rc -ge 1 ] && [ $rc -lt 124 ] && grep -q "^fsdpc: error: .*data file '.*/f090.txt' changed while the run read it" "$W/repl.log"
check "a data file renamed over mid-run (one of 100, opened again when sampled): an error line naming it" $? \
    "(rc=$rc) $(grep -v '^Batch' "$W/repl.log" | grep -m2 error | head -c 300)"
