#!/usr/bin/env bash
# Issue 39, class 3: environments that stall the thread pools. Every OpenMP and OpenBLAS variable a
# site may set is honoured or overridden with one line at start-up, so training runs; a SIGTERM
# mid-run still checkpoints and exits 75 within a time bound. A compute kernel that never returns
# (FSDPC_TEST_PAUSE=stepN stands in for one) does not keep a stop from being obeyed: the run ends
# with status 75 and one line once --collective_timeout passes, earlier checkpoints untouched.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="env: "
SHAPE="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64"
T="$SHAPE --batch_size 4 --num_tokens 0 --logging_freq 1 --validation_freq 0 --train_data synthetic --lr 1e-3"
unset OMP_NUM_THREADS

# stopped NAME MAXSEC ENV...: a run of 2 threads under ENV gets SIGTERM once its first step is
# logged; it must exit 75 within MAXSEC seconds of the signal with one "Preempted" line, no
# error line, and a checkpoint of the step it stopped after; an override is said in one line
stopped() {
    local name=$1 maxsec=$2 pid rc t0 i
    shift 2
    rm -rf "$W/ck" "$W/m.jsonl"
    env "$@" timeout -k 5 30 ./fsdpc $T --num_threads 2 --max_steps 100000 --checkpoint_freq 100000 --checkpoint_dir "$W/ck" \
        --metrics_file "$W/m.jsonl" >"$W/out" 2>"$W/err" &
    pid=$!
    for ((i = 0; i < 300; i++)); do
        [ -s "$W/m.jsonl" ] && break
        sleep 0.1
    done
    t0=$SECONDS
    kill -TERM $pid
    wait $pid
    rc=$?
    [ $rc = 75 ] && [ $((SECONDS - t0)) -le "$maxsec" ] && [ "$(grep -c '^Preempted (signal) after step' "$W/err")" = 1 ] &&
        ! grep -q '^fsdpc: error' "$W/err" && [ "$(ls "$W/ck" | wc -l)" = 1 ] && [ -s "$W/m.jsonl" ]
    check "$name: SIGTERM mid-run checkpoints and exits 75 within ${maxsec} s" $? \
        "(rc=$rc, $((SECONDS - t0)) s, $(grep -m2 -E 'error|Preempted|Stopped' "$W/err" | tr '\n' '|'); $(ls "$W/ck" 2>&1 | tr '\n' ' '))"
}

stopped "OMP_DYNAMIC=true" 20 OMP_DYNAMIC=true
grep -q "^fsdpc: OMP_DYNAMIC=true overridden" "$W/err"
check "OMP_DYNAMIC=true: overridden with one line" $? "$(grep -m1 OMP_ "$W/err")"
stopped "OMP_MAX_ACTIVE_LEVELS=0" 20 OMP_MAX_ACTIVE_LEVELS=0
[ "$(grep -c '^fsdpc: OMP_MAX_ACTIVE_LEVELS=0 overridden with 1' "$W/err")" = 1 ]
check "OMP_MAX_ACTIVE_LEVELS=0: overridden with one line" $? "$(grep -m1 OMP_ "$W/err")"
stopped "OMP_THREAD_LIMIT=1" 20 OMP_THREAD_LIMIT=1
grep -q "^fsdpc: 2 thread(s) lowered to OMP_THREAD_LIMIT=1" "$W/err"
check "OMP_THREAD_LIMIT=1 below --num_threads 2: the count lowered, said once" $? "$(grep -m1 OMP_ "$W/err")"
stopped "OMP_DYNAMIC=true with OMP_MAX_ACTIVE_LEVELS=0 and OMP_WAIT_POLICY=passive" 20 OMP_DYNAMIC=true OMP_MAX_ACTIVE_LEVELS=0 \
    OMP_WAIT_POLICY=passive
for e in OMP_WAIT_POLICY=active OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=0 GOMP_SPINCOUNT=infinite OMP_PROC_BIND=true \
    "OMP_NESTED=true OMP_MAX_ACTIVE_LEVELS=8" OPENBLAS_NUM_THREADS=0 OPENBLAS_NUM_THREADS=100000 GOTO_NUM_THREADS=100000 \
    OMP_NUM_THREADS=0 OMP_NUM_THREADS=4,2 OMP_SCHEDULE=dynamic,1; do
    # shellcheck disable=SC2086
    stopped "$e" 20 $e
done
! grep -q "overridden\|lowered" "$W/err"
check "a variable that is honoured (OMP_SCHEDULE) says nothing" $? "$(grep -m1 'overridden' "$W/err")"
OPENBLAS_NUM_THREADS=100000 GOTO_NUM_THREADS=2 ./fsdpc $T --num_threads 2 --max_steps 1 --checkpoint_freq 0 >/dev/null 2>"$W/ob.err"
[ "$(grep -c '^fsdpc: OPENBLAS_NUM_THREADS=100000 overridden: OpenBLAS runs this rank.s 2 thread(s)$' "$W/ob.err")" = 1 ] &&
    ! grep -q "GOTO_NUM_THREADS" "$W/ob.err"
check "OPENBLAS_NUM_THREADS unlike the thread count: overridden with one line (GOTO_NUM_THREADS equal to it: none)" $? \
    "$(grep -m2 '^fsdpc: [A-Z]' "$W/ob.err" | tr '\n' '|')"

# a kernel that never returns: SIGTERM during step 3 (steps 1-2 checkpointed) ends the run at
# --collective_timeout with status 75 and one line; the step-2 checkpoint stays as it was
rm -rf "$W/hang"
./fsdpc $T --num_threads 1 --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/hang" >/dev/null 2>&1
sha256sum "$W/hang/step_00000002.h5" >"$W/hang.sha"
FSDPC_TEST_PAUSE=step3:120 timeout -k 5 120 ./fsdpc $T --num_threads 1 --max_steps 6 --checkpoint_freq 2 --checkpoint_dir "$W/hang" \
    --resume_from_checkpoint "$W/hang" --collective_timeout 3 >/dev/null 2>"$W/hang.err" &
pid=$!
sleep 2
t0=$SECONDS
kill -TERM $pid
wait $pid
rc=$?
[ $rc = 75 ] && [ $((SECONDS - t0)) -le 10 ] &&
    [ "$(grep -c '^Stopped by signal 15 (SIGTERM) during training: nothing moved for [0-9]* s after it (--collective_timeout 3' "$W/hang.err")" = 1 ] &&
    ! grep -q '^fsdpc: error' "$W/hang.err" && sha256sum -c --quiet "$W/hang.sha" && [ "$(ls "$W/hang")" = "step_00000002.h5" ]
check "a kernel that never returns: SIGTERM obeyed at --collective_timeout (exit 75, one line, the last checkpoint untouched)" $? \
    "(rc=$rc, $((SECONDS - t0)) s, $(tail -2 "$W/hang.err" | tr '\n' '|'); $(ls "$W/hang" | tr '\n' ' '))"

# the same at np=2: mpirun relays SIGUSR1 to both ranks; the job ends 75 with one line
rm -rf "$W/hang2"
FSDPC_TEST_PAUSE=step3:120 $MPI -np 2 ./fsdpc $T --num_threads 1 --batch_size 2 --max_steps 6 --checkpoint_freq 2 \
    --checkpoint_dir "$W/hang2" --collective_timeout 3 >/dev/null 2>"$W/hang2.err" &
pid=$!
for ((i = 0; i < 300; i++)); do
    [ -e "$W/hang2/step_00000002.h5" ] && break
    sleep 0.1
done
sleep 1
t0=$SECONDS
kill -USR1 "$(pgrep -P $pid mpirun)"
wait $pid
rc=$?
[ $rc = 75 ] && [ $((SECONDS - t0)) -le 15 ] && [ "$(grep -c '^Stopped by signal 10 (SIGUSR1) during training: nothing moved' "$W/hang2.err")" = 1 ] &&
    ! grep -q '^fsdpc: error' "$W/hang2.err" && [ "$(ls "$W/hang2")" = "step_00000002.h5" ]
check "np=2: a stalled kernel on both ranks, SIGUSR1 through mpirun: exit 75, one line" $? \
    "(rc=$rc, $((SECONDS - t0)) s, $(grep -m2 -E '^Stopped|error' "$W/hang2.err" | tr '\n' '|'))"

# the same stall without a signal is no stop: the run waits for the kernel, then finishes
FSDPC_TEST_PAUSE=step2:4 timeout -k 5 60 ./fsdpc $T --num_threads 1 --max_steps 3 --checkpoint_freq 0 --collective_timeout 1 \
    >/dev/null 2>"$W/slow.err"
rc=$?
[ $rc = 0 ] && ! grep -q "^Stopped\|^fsdpc: error" "$W/slow.err"
check "a slow step with no signal is left to finish (the watchdog acts on stops only)" $? "(rc=$rc, $(tail -1 "$W/slow.err"))"

# validation inside training is stopped by a signal too, and the step's checkpoint follows
rm -rf "$W/val"
timeout -k 5 120 ./fsdpc $SHAPE --batch_size 4 --num_tokens 0 --num_threads 1 --max_steps 3 --validation_freq 1 \
    --validation_batches 2147483647 --checkpoint_freq 10 --checkpoint_dir "$W/val" >/dev/null 2>"$W/val.err" &
pid=$!
for ((i = 0; i < 300; i++)); do
    grep -q "^Batch 1 " "$W/val.err" 2>/dev/null && break
    sleep 0.1
done
sleep 1
t0=$SECONDS
kill -TERM $pid
wait $pid
rc=$?
[ $rc = 75 ] && [ $((SECONDS - t0)) -le 10 ] && grep -q "^Stopped by signal 15 (SIGTERM) during validation, at batch" "$W/val.err" &&
    [ "$(grep -c '^Preempted (signal) after step 1: checkpoint written' "$W/val.err")" = 1 ] && [ "$(ls "$W/val")" = "step_00000001.h5" ]
check "a validation of 2147483647 batches inside training: SIGTERM stops it, checkpoints, exits 75" $? \
    "(rc=$rc, $((SECONDS - t0)) s, $(tail -2 "$W/val.err" | tr '\n' '|'))"
