#!/usr/bin/env bash
# What a batch system does to a running job, beyond ending it: it suspends the whole job and
# resumes it later (Slurm's scontrol suspend and gang scheduling, PBS's suspend, ^Z then fg), or
# holds it to a CPU-time limit (ulimit -S -t, a queue's CPU-time limit: SIGXCPU each CPU second
# until the hard limit). A job suspended whole for longer than --collective_timeout, with a rank
# waiting on another at the moment it stopped, resumes and finishes as the run never suspended
# would (a rank stopped alone still ends the job: test_trace.sh); SIGXCPU is a stop signal: the
# run checkpoints after the step and exits 75, with no writer lock left.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="sched: "
SHAPE="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64"
T="$SHAPE --batch_size 4 --num_tokens 0 --logging_freq 1 --validation_freq 0 --train_data synthetic --lr 1e-3 --num_threads 1 --checkpoint_freq 0"
unset OMP_NUM_THREADS

# ---- a job suspended whole while rank 0 waits on rank 1 ----
# rank 1 computes step 3 for 3 s (FSDPC_TEST_PAUSE), so rank 0 waits in a collective; a second
# into that wait both ranks stop for 14 s: 15 s of wall clock against a timeout of 8
$MPI -np 2 ./fsdpc $T --max_steps 6 --metrics_file "$W/straight.jsonl" >/dev/null 2>&1
$MPI -np 2 bash -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && export FSDPC_TEST_PAUSE=step3:3; exec "$@"' _ \
    ./fsdpc $T --max_steps 6 --collective_timeout 8 --metrics_file "$W/susp.jsonl" >"$W/susp.out" 2>&1 &
mp=$!
for _ in $(seq 300); do grep -q '^Batch 2 ' "$W/susp.out" 2>/dev/null && break; sleep 0.1; done
sleep 1
ranks=$(pgrep -P "$(pgrep -P "$mp")" | tr '\n' ' ')  # timeout -> mpirun -> the ranks
kill -STOP $ranks
sleep 14
kill -CONT $ranks
wait $mp
rc=$?
d=$(rel_diff "$W/straight.jsonl" "$W/susp.jsonl" 6 0)
same=$?
[ $rc = 0 ] && [ -n "$ranks" ] && ! grep -q 'error' "$W/susp.out"
check "np=2: suspended whole for 14 s while a rank waited (--collective_timeout 8): the run finishes" $? \
    "rc=$rc ranks=$ranks $(grep -m1 error "$W/susp.out" | cut -c1-300)"
[ $same = 0 ]
check "np=2: the suspended run's losses equal the run never suspended, bit for bit ($d)" $?

# ---- a CPU-time limit ----
# xcpu NAME CKDIR LAUNCH...: training launched under ulimit -S -t 3 is stopped by SIGXCPU after a step:
# status 75, that step's checkpoint (its number in $step), no writer lock, no error line
xcpu() {
    local name=$1 ck=$2 rc
    shift 2
    rm -rf "$ck"
    (ulimit -S -t 3; exec "$@" $T --max_steps 1000000 --checkpoint_freq 1000000 --checkpoint_dir "$ck" >/dev/null 2>"$ck.err")
    rc=$?
    step=$(sed -nE 's/^Preempted \(signal\) after step ([0-9]+).*/\1/p' "$ck.err")
    [ $rc = 75 ] && [ -n "$step" ] && [ -f "$ck/$(printf 'step_%08d.h5' "$step")" ] && [ ! -e "$ck/.fsdpc-writer" ] &&
        ! grep -q '^fsdpc: error' "$ck.err"
    check "$name" $? "rc=$rc step=$step $(ls -a "$ck" 2>&1 | tr '\n' ' ') $(tail -c 300 "$ck.err")"
}
# the soft limit's SIGXCPU: a checkpoint after the step, status 75, and the run resumes from it
xcpu "ulimit -S -t 3: SIGXCPU checkpoints after the step and exits 75, no writer lock left" "$W/ck" ./fsdpc
./fsdpc $T --max_steps $((step + 2)) --checkpoint_dir "$W/ck" --resume_from_checkpoint "$W/ck" >/dev/null 2>"$W/xcpu2.err"
rc=$?
[ $rc = 0 ] && grep -q "^Batch $((step + 2)) " "$W/xcpu2.err"
check "the run stopped by SIGXCPU resumes from its checkpoint" $? "rc=$rc $(tail -c 300 "$W/xcpu2.err")"
# at np=2 the limit holds each rank (mpirun's own CPU time stays far below it)
xcpu "np=2 under ulimit -S -t 3: every rank checkpoints after the same step and the job exits 75" "$W/ck2" $MPI -np 2 ./fsdpc
