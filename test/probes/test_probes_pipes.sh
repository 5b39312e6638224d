#!/usr/bin/env bash
# Issue 39, class 7: pipes that close. Generation and tokenize piped into a reader that leaves
# (| head) end with one "cannot write standard output: Broken pipe" line and exit 1, never
# SIGPIPE (141); under mpirun at np=2 every rank ends the same way and mpirun neither crashes
# (it did in PMIx_Finalize, 139) nor dies of SIGPIPE. A stdout closed at start (>&-) is the same
# one line, said before any work. The checkpoint read and the ones written stay as they were.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="pipes: "
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
SHAPE="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64"
./fsdpc $SHAPE --batch_size 4 --num_tokens 0 --num_threads 1 --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/ck" >/dev/null 2>&1
CK="$W/ck/step_00000002.h5"
GEN="$SHAPE --num_threads 1 --max_steps 0 --resume_from_checkpoint $CK --prompt hello --num_tokens 100000 --temperature 0.8"
yes "To be, or not to be, that is the question" | head -200000 >"$W/lines.txt"
sha256sum "$CK" "$W/lines.txt" >"$W/inputs.sha"

# piped NAME REGEX CMD: the shell pipeline CMD (its first command's status in $W/rc) ends with
# status 1 and exactly one error line matching REGEX on stderr ($W/err), within 60 s, inputs unchanged
piped() {
    local name=$1 re=$2 rc lines t0=$SECONDS
    bash -c "$3" 2>"$W/err"
    rc=$(cat "$W/rc" 2>/dev/null)
    lines=$(grep -c '^fsdpc: error:' "$W/err")
    [ "$rc" = 1 ] && [ "$lines" = 1 ] && grep -Eq -- "$re" "$W/err" && [ $((SECONDS - t0)) -le 60 ] &&
        ! grep -q "Segmentation fault\|SIGPIPE detected\|Process received signal" "$W/err" && sha256sum -c --quiet "$W/inputs.sha" >/dev/null 2>&1
    check "$name" $? "(rc=$rc, $((SECONDS - t0)) s, $lines error lines: $(grep -m3 -E 'error|SIGPIPE|Segmentation' "$W/err" | head -c 300 | tr '\n' '|'))"
    rm -f "$W/rc"
}
BROKEN="^fsdpc: error: cannot write standard output: Broken pipe$"

piped "generation | head -c 10 at np=1" "$BROKEN" \
    "timeout 60 ./fsdpc $GEN | head -c 10 >/dev/null; echo \${PIPESTATUS[0]} >'$W/rc'"
piped "tokenize | head -1 at np=1" "$BROKEN" \
    "timeout 60 ./fsdpc tokenize --tokenizer byte <'$W/lines.txt' | head -1 >/dev/null; echo \${PIPESTATUS[0]} >'$W/rc'"
piped "tokenize --decode | head -1 at np=1" "$BROKEN" \
    "./fsdpc tokenize --tokenizer byte <'$W/lines.txt' >'$W/ids.txt' 2>/dev/null;
     timeout 60 ./fsdpc tokenize --tokenizer byte --decode <'$W/ids.txt' | head -1 >/dev/null; echo \${PIPESTATUS[0]} >'$W/rc'"
for np in 1 2; do
    piped "generation | head -c 10 under mpirun -np $np" "$BROKEN" \
        "$MPI -np $np ./fsdpc $GEN | head -c 10 >/dev/null; echo \${PIPESTATUS[0]} >'$W/rc'"
    piped "tokenize | head -1 under mpirun -np $np" "$BROKEN" \
        "$MPI -np $np ./fsdpc tokenize --tokenizer byte <'$W/lines.txt' | head -1 >/dev/null; echo \${PIPESTATUS[0]} >'$W/rc'"
done
# a reader that is gone before the first write: the same line
piped "generation into a pipe already closed (np=2)" "$BROKEN" \
    "$MPI -np 2 ./fsdpc $GEN | true; echo \${PIPESTATUS[0]} >'$W/rc'"
piped "--help into a pipe already closed (np=2)" "$BROKEN" \
    "$MPI -np 2 ./fsdpc --help | true; echo \${PIPESTATUS[0]} >'$W/rc'"
piped "--help into a pipe already closed (np=1)" "$BROKEN" \
    "./fsdpc --help | true; echo \${PIPESTATUS[0]} >'$W/rc'"
# a reader that leaves after the text fit in the pipe's buffer: it was written, exit 0 (as cat's)
bash -c "$MPI -np 2 ./fsdpc --help 2>'$W/err' | (sleep 1; head -1 >/dev/null); exit \${PIPESTATUS[0]}"
rc=$?
[ $rc = 0 ] && ! grep -q "error" "$W/err"
check "--help that fit the pipe's buffer before the reader left ends 0 at np=2" $? "(rc=$rc $(head -c 200 "$W/err"))"

# training, then a sample into | head: the run's checkpoints are whole, the line is the one error
rm -rf "$W/tr"
piped "training then a sample into | head -c 5: one line, exit 1" "$BROKEN" \
    "timeout 60 ./fsdpc $SHAPE --batch_size 4 --num_threads 1 --max_steps 2 --checkpoint_freq 2 --checkpoint_dir '$W/tr' \
        --num_tokens 100000 --prompt hi | head -c 5 >/dev/null; echo \${PIPESTATUS[0]} >'$W/rc'"
[ "$(ls "$W/tr")" = "step_00000002.h5" ] && ./fsdpc $SHAPE --num_threads 1 --max_steps 0 --resume_from_checkpoint "$W/tr" \
    --num_tokens 3 --prompt hi >/dev/null 2>&1
check "the checkpoint written before the pipe closed is whole (resumes)" $?

# stdout closed at start (>&-): a run that would write there is refused before any work, one line;
# a run that writes nothing there trains, and no file it opens takes stdout's number (the guard
# opens /dev/null read-only on it); stdin closed (<&-) is a read error, never an empty input
CLOSED="^fsdpc: error: standard output is closed \(the launch gave >&-, to fsdpc or to mpirun\): what this run writes there would be lost; redirect it to a file, or to /dev/null to discard it$"
piped "generation with stdout closed (>&-)" "$CLOSED" "timeout 60 ./fsdpc $GEN >&-; echo \$? >'$W/rc'"
piped "tokenize with stdout closed (>&-)" "$CLOSED" \
    "timeout 60 ./fsdpc tokenize --tokenizer byte <'$W/lines.txt' >&-; echo \$? >'$W/rc'"
piped "training whose sample would go to a closed stdout: refused before step 1" "$CLOSED" \
    "timeout 60 ./fsdpc $SHAPE --batch_size 4 --num_threads 1 --max_steps 2 --checkpoint_freq 2 --checkpoint_dir '$W/ck_refused' >&-;
     echo \$? >'$W/rc'"
[ ! -e "$W/ck_refused" ] && ! grep -q "^Batch" "$W/err"
check "the refused run trained nothing and made no checkpoint folder" $? "$(ls "$W/ck_refused" 2>&1 | head -c 200)"
timeout 120 ./fsdpc $SHAPE --batch_size 4 --num_threads 1 --num_tokens 0 --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/ck_closed" \
    --metrics_file "$W/closed.jsonl" >&- 2>"$W/closed.err"
rc=$?
[ $rc = 0 ] && [ "$(grep -c '"step"' "$W/closed.jsonl")" = 2 ] && ! grep -qv '^{' "$W/closed.jsonl" &&
    timeout 120 ./fsdpc $GEN --num_tokens 5 --resume_from_checkpoint "$W/ck_closed/step_00000002.h5" >/dev/null 2>"$W/closed2.err"
check "training with stdout closed and no sample: exit 0, its metrics and checkpoint whole" $? "(rc=$rc $(grep -m2 error "$W/closed.err" "$W/closed2.err" | head -c 300))"
# mpirun started with its stdout closed reuses that number for its signal pipe, and read the
# sample's bytes as signals to forward (a newline was SIGUSR1: a run that trained ended 75): the
# ranks see it and treat it as their own closed stdout
piped "mpirun -np 2 with stdout closed: training whose sample would go there refused before step 1" "$CLOSED" \
    "timeout 120 $MPI -np 2 ./fsdpc $SHAPE --batch_size 4 --num_threads 1 --max_steps 2 --checkpoint_freq 0 >&-; echo \$? >'$W/rc'"
timeout 120 $MPI -np 2 ./fsdpc $SHAPE --batch_size 4 --num_threads 1 --num_tokens 0 --max_steps 2 --checkpoint_freq 0 >&- 2>"$W/mc.err"
rc=$?
[ $rc = 0 ] && ! grep -q "Forwarding signal\|error" "$W/mc.err"
check "mpirun -np 2 with stdout closed and no sample: exit 0" $? "(rc=$rc $(grep -m2 'error\|signal' "$W/mc.err"))"
# mid-run, the closed streams' numbers hold /dev/null, not a file the run opened
FSDPC_TEST_PAUSE=step1:20 ./fsdpc $SHAPE --batch_size 4 --num_threads 1 --num_tokens 0 --max_steps 1 --checkpoint_freq 1 \
    --checkpoint_dir "$W/ck_fds" --metrics_file "$W/fds.jsonl" >&- <&- 2>"$W/fds.err" &
pid=$!
for _ in $(seq 200); do grep -q "start-up:" "$W/fds.err" && break; sleep 0.1; done
fds="$(readlink /proc/$pid/fd/0) $(readlink /proc/$pid/fd/1)"
kill $pid; wait $pid 2>/dev/null
[ "$fds" = "/dev/null /dev/null" ]
check "with stdin and stdout closed, mid-run their numbers hold /dev/null" $? "($fds)"
piped "tokenize with stdin closed (<&-): a read error, not an empty input" "^fsdpc: error: cannot read standard input: Bad file descriptor$" \
    "timeout 60 ./fsdpc tokenize --tokenizer byte <&- >/dev/null; echo \$? >'$W/rc'"
piped "tokenize --chat with stdin closed (<&-)" "^fsdpc: error: cannot read standard input: Bad file descriptor$" \
    "timeout 60 ./fsdpc tokenize --tokenizer byte --chat <&- >/dev/null; echo \$? >'$W/rc'"

# mpirun into a pipe that stays open: rank 0's output arrives whole, as before
out=$($MPI -np 2 ./fsdpc tokenize --tokenizer byte <<<"hello" 2>/dev/null)
[ "$out" = "104 101 108 108 111" ]
check "under mpirun into an open pipe, tokenize's output is whole" $? "($out)"
# a run that mpirun did not start writes its own stdout, wherever its parent's goes
out=$(bash -c "./fsdpc tokenize --tokenizer byte <<<hello >'$W/own.txt' 2>/dev/null")
[ -z "$out" ] && [ "$(cat "$W/own.txt")" = "104 101 108 108 111" ]
check "without mpirun, stdout redirected to a file under a piped parent stays the file" $? "($out)"
