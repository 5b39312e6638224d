#!/bin/bash
# test_errors_last: a plain input error ends the output with its one "fsdpc: error:" line: no
# flight recorder, no dump after it, at one rank and at two (mpirun -q, which keeps Open MPI's own
# banners out), whether every rank sees the error (flags, files) or only one rank does (a bad
# token in its part of the data, which ends the job through MPI_Abort).
cd "$(dirname "$0")/../.." || exit 1
source test/lib.sh
M="--model_name tiny --max_steps 30 --validation_freq 0 --checkpoint_freq 0 --num_tokens 0 --num_threads 1"
/usr/bin/python3 - "$W/bad.bin" <<'PY'
import struct, sys
n = 20000
toks = [(i * 7) % 250 for i in range(n)]
toks[15000] = 1000  # beyond the byte vocabulary, late in the file: found at a later step
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 1, n, *[0] * 253) + struct.pack("<%dH" % n, *toks))
PY

# last_is_error NAME NP ARGS...: exit 1, one error line, and it is the last line of stderr
last_is_error() {
    local name=$1 np=$2 rc last n
    shift 2
    if [ "$np" = 1 ]; then
        timeout 60 ./fsdpc $M --checkpoint_dir "$W/ck-$np" "$@" >"$W/out" 2>"$W/err"
    else
        timeout 60 mpirun -q --oversubscribe --allow-run-as-root -np "$np" ./fsdpc $M --checkpoint_dir "$W/ck-$np" "$@" >"$W/out" 2>"$W/err"
    fi
    rc=$?
    last=$(grep -v '^\s*$' "$W/err" | tail -1)
    n=$(grep -c '^fsdpc: error:' "$W/err")
    [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$n" = 1 ] && [[ "$last" == "fsdpc: error:"* ]] && ! grep -qi 'flight recorder' "$W/err"
    check "np=$np $name: the error line is the last line" $? "(rc=$rc, $n error lines, last: ${last:0:200})"
}

for np in 1 2; do
    last_is_error "unknown flag" $np --bogus_flag 1
    last_is_error "missing training data" $np --train_data "$W/none.txt"
    last_is_error "missing tokenizer" $np --tokenizer "$W/none.model"
    last_is_error "vocabulary smaller than the tokenizer's" $np --vocab_size 64
    last_is_error "a token id beyond the vocabulary, seen by one rank" $np --train_data "$W/bad.bin"
done

# a second run into a checkpoint folder another run is writing
timeout 120 ./fsdpc $M --max_steps 100000 --checkpoint_freq 1000 --checkpoint_dir "$W/locked" >"$W/first.out" 2>&1 &
first=$!
for _ in $(seq 100); do [ -e "$W/locked" ] && [ -e "$W/locked/.fsdpc-writer" ] && break; sleep 0.1; done
timeout 60 ./fsdpc $M --checkpoint_freq 1000 --checkpoint_dir "$W/locked" >"$W/out" 2>"$W/err"
rc=$?
kill $first 2>/dev/null
wait $first 2>/dev/null
last=$(grep -v '^\s*$' "$W/err" | tail -1)
[ $rc = 1 ] && [[ "$last" == "fsdpc: error: another fsdpc run"* ]]
check "a second run into a locked checkpoint folder: the error line is the last line" $? "(rc=$rc, last: ${last:0:200})"
