#!/usr/bin/env bash
# --keep_snapshot and --on_nonfinite rollback: a batch forced non-finite (FSDPC_TEST_NONFINITE=
# sample:G: the loss sum of the rank reading global sample G becomes NaN before the step's
# reduction) is rolled back and its samples skipped; the losses then equal a run whose data never
# held them (FSDPC_TEST_SKIP_SAMPLES, and at --lr 0 the next batch's own losses), at np=1/2/4, with
# replicas, with --async_checkpoint, on the emulated GPU; the skip list survives a checkpoint and a
# resume at another np; the bounds, the refusals, --on_nonfinite skip, the tracker and the plan.
cd "$(dirname "$0")/../.."
source test/lib.sh
export OMPI_MCA_orte_tmpdir_base=${OMPI_MCA_orte_tmpdir_base:-/tmp}
PY=/usr/bin/python3
# step 7 of a global batch of 4 holds global samples 24-27; the snapshot is step 4's checkpoint
M="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 96 --max_context_width 32
   --num_tokens 0 --validation_freq 0 --warmup 3 --lr 3e-3 --lr_decay_style linear --min_lr 1e-4 --max_steps 12 --num_threads 1
   --logging_freq 1 --dropout 0.1 --checkpoint_freq 4"
RB="--keep_snapshot --on_nonfinite rollback"
# train NAME NP ARGS...: metrics to $W/NAME.jsonl, log to $W/NAME.log, checkpoints in $W/NAME, status in $W/NAME.rc
train() {
    local name=$1 np=$2
    shift 2
    $MPI -np "$np" ./fsdpc $M --checkpoint_dir "$W/$name" --metrics_file "$W/$name.jsonl" "$@" >"$W/$name.log" 2>&1
    echo $? >"$W/$name.rc"
}
same() { [ "$(cat "$W/$1.rc")" = 0 ] && [ "$(cat "$W/$2.rc")" = 0 ] && [ -s "$W/$1.jsonl" ] && cmp -s <(steady "$W/$1.jsonl") <(steady "$W/$2.jsonl"); }
rolled() { grep -c "^step 7: non-finite loss (loss nan, gradient norm [0-9.e+-]*): rolled back to step 4's snapshot; the step's 4 samples (global indices 24-27 of the data order) are skipped from now on" "$W/$1.log"; }

# ---- np=1: rolled back, then as if the data never held samples 24-27 ----
FSDPC_TEST_NONFINITE=sample:26 train rb1 1 --batch_size 4 $RB --trace_file "$W/rb1.trace.json" --trace_steps 1:12
FSDPC_TEST_SKIP_SAMPLES=24:4 train ref1 1 --batch_size 4
same rb1 ref1 && [ "$(wc -l <"$W/rb1.jsonl")" = 12 ] && [ "$(rolled rb1)" = 1 ]
check "np=1: step 7's batch (sample 26 NaN) rolled back to step 4 and skipped; every step logged once, bit for bit a run whose data never held samples 24-27" $? \
    "rc=$(cat "$W/rb1.rc") $(grep -m2 'non-finite\|error' "$W/rb1.log" | head -c 400)"
# the trace spans the steps trained again (steps 5-7 twice) and stays JSON (no NaN loss counter)
$PY -c 'import json, sys; ev = json.load(open(sys.argv[1])); ev = ev["traceEvents"] if isinstance(ev, dict) else ev
n = [e["name"] for e in ev if e.get("name", "").startswith("ProfilerStep#")]
assert n.count("ProfilerStep#7") == 2 and n.count("ProfilerStep#4") == 1, n' "$W/rb1.trace.json"
check "--trace_file of a run that rolled back: valid JSON, the replayed steps 5-7 twice" $?

# at --lr 0 the weights never move: after the rollback step k trains on what step k+1 of a run
# without any skip trained on, so its loss is that step's loss, bit for bit (dropout off: its
# masks follow the position in the order, which the skip shifts)
Z="--batch_size 4 --lr 0 --min_lr 0 --dropout 0"
FSDPC_TEST_NONFINITE=sample:26 train z1 1 $Z $RB
train z0 1 $Z --max_steps 13
[ "$(cat "$W/z1.rc")" = 0 ] && cmp -s <(losses "$W/z1.jsonl") <(losses "$W/z0.jsonl" | sed 7d) && [ "$(wc -l <"$W/z1.jsonl")" = 12 ]
check "--lr 0: steps 1-6 the plain run's, steps 7-12 trained on the plain run's steps 8-13 (the skip shifts the order by one batch)" $?

# ---- np=2: only rank 1 reads sample 26, so only it sees the NaN; every rank rolls back ----
FSDPC_TEST_NONFINITE=sample:26 train rb2 2 --batch_size 2 $RB
FSDPC_TEST_SKIP_SAMPLES=24:4 train ref2 2 --batch_size 2
same rb2 ref2 && [ "$(rolled rb2)" = 1 ] && rel_diff "$W/rb1.jsonl" "$W/rb2.jsonl" 12 1e-4 >/dev/null
check "np=2 full-shard: the NaN on rank 1 alone rolls back every rank; bit for bit the np=2 reference, within 1e-4 of np=1" $? \
    "rc=$(cat "$W/rb2.rc") $(grep -m2 'non-finite\|error' "$W/rb2.log" | head -c 400)"
# replicas hold slices they never write: the snapshot keeps them too (here the --async_checkpoint staging buffer)
FSDPC_TEST_NONFINITE=sample:26 train rbd 2 --batch_size 2 --sharding no-shard --async_checkpoint $RB
FSDPC_TEST_SKIP_SAMPLES=24:4 train refd 2 --batch_size 2 --sharding no-shard --async_checkpoint
same rbd refd && [ "$(rolled rbd)" = 1 ] && grep -q "staged in --keep_snapshot's buffer" "$W/rbd.log"
check "np=2 no-shard with --async_checkpoint (one buffer for staging and the snapshot): the replica restores its own state; bit for bit the reference" $? \
    "rc=$(cat "$W/rbd.rc") $(grep -m2 'non-finite\|error' "$W/rbd.log" | head -c 400)"
H="--batch_size 1 --sharding hybrid-full-shard --shard_group_size 2"
FSDPC_TEST_NONFINITE=sample:26 train rb4 4 $H $RB
FSDPC_TEST_SKIP_SAMPLES=24:4 train ref4 4 $H
same rb4 ref4 && [ "$(rolled rb4)" = 1 ]
check "np=4 hybrid-full-shard: bit for bit the reference" $? "rc=$(cat "$W/rb4.rc") $(grep -m2 'non-finite\|error' "$W/rb4.log" | head -c 400)"

# ---- the skip list in checkpoints: written, read back, kept by a resume at another np ----
$PY - "$W/rb1" <<'PY'
import sys, h5py
d = sys.argv[1]
for s in (8, 12):
    assert list(h5py.File(f"{d}/step_{s:08d}.h5", "r")["skipped_samples"][()]) == [24, 25, 26, 27], s
assert "skipped_samples" not in h5py.File(f"{d}/step_00000004.h5", "r")
PY
check "/skipped_samples holds 24-27 in the checkpoints after the rollback, none before it" $?
$MPI -np 1 ./fsdpc $M --batch_size 4 --resume_from_checkpoint "$W/rb1/step_00000008.h5" --checkpoint_freq 0 --metrics_file "$W/re1.jsonl" \
    >"$W/re1.log" 2>&1
$MPI -np 2 ./fsdpc $M --batch_size 2 --resume_from_checkpoint "$W/rb1/step_00000008.h5" --checkpoint_freq 0 --metrics_file "$W/re2.jsonl" \
    >"$W/re2.log" 2>&1
grep -q "^4 sample(s) that rollbacks skipped .* stay out of the data order" "$W/re2.log" &&
    cmp -s <(steady "$W/re1.jsonl") <(grep -E '"step": (9|1[0-2]),' "$W/rb1.jsonl" | steady) &&
    rel_diff <(grep -E '"step": (9|1[0-2]),' "$W/rb1.jsonl") "$W/re2.jsonl" 4 1e-4 >/dev/null
check "resumed from step 8 at np=1 (bit for bit) and at np=2 (within 1e-4): the samples stay skipped" $? "$(tail -c 300 "$W/re2.log")"
# a checkpoint before any rollback holds no list and resumes as before; a damaged list is refused
$PY - "$W/rb1/step_00000008.h5" "$W/bad.h5" <<'PY'
import sys, shutil, h5py
shutil.copy(sys.argv[1], sys.argv[2])
f = h5py.File(sys.argv[2], "r+")
d = f["skipped_samples"]
d[0] = 23  # still ascending: only the checksum tells
PY
mkdir -p "$W/badck" && mv "$W/bad.h5" "$W/badck/step_00000008.h5"
expect_error "a checkpoint whose /skipped_samples was altered" "checkpoint '.*step_00000008.h5': /skipped_samples fails its checksum" \
    $MPI -np 1 ./fsdpc $M --batch_size 4 --resume_from_checkpoint "$W/badck/step_00000008.h5" --checkpoint_freq 0
cp "$W/rb1/step_00000004.h5" "$W/badck/"
$MPI -np 1 ./fsdpc $M --batch_size 4 --resume_from_checkpoint "$W/badck" --checkpoint_freq 0 --max_steps 5 >/dev/null 2>"$W/badck.log"
rc=$?
[ $rc = 0 ] && grep -q "^Checkpoint $W/badck/step_00000008.h5 is unusable, falling back to the one before it: checkpoint .*/skipped_samples fails its checksum" "$W/badck.log" &&
    grep -q "^Resumed from $W/badck/step_00000004.h5" "$W/badck.log"
check "resuming the folder: the altered list makes step 8 unusable, step 4 resumes" $? "rc=$rc $(grep -m2 'unusable\|error' "$W/badck.log" | head -c 300)"

# ---- bounds: a rollback never repeats; --skip_nonfinite_steps bounds them ----
FSDPC_TEST_NONFINITE=7 train again 1 --batch_size 4 $RB
[ "$(cat "$W/again.rc")" = 1 ] && [ "$(grep -c '^fsdpc: error:' "$W/again.log")" = 1 ] &&
    grep -q "^fsdpc: error: step 7: non-finite again after a rollback skipped its samples" "$W/again.log" &&
    [ "$(ls "$W/again" | tr '\n' ' ')" = "step_00000004.h5 " ]
check "steps from 7 on all NaN: one rollback, then step 7 non-finite again stops the run (no second rollback, nothing saved after step 4)" $? \
    "rc=$(cat "$W/again.rc") $(grep -m1 '^fsdpc: error' "$W/again.log" | head -c 300)"
FSDPC_TEST_NONFINITE=sample:26 train budget 1 --batch_size 4 $RB --skip_nonfinite_steps 0
[ "$(cat "$W/budget.rc")" = 1 ] && grep -q "^fsdpc: error: step 7: non-finite loss .*(--skip_nonfinite_steps 0: the run survived that many (--on_nonfinite rollback))" "$W/budget.log"
check "--skip_nonfinite_steps 0 given with rollback: the first non-finite step stops the run" $? "$(grep -m1 '^fsdpc: error' "$W/budget.log" | head -c 300)"
FSDPC_TEST_NONFINITE=2 train skip 1 --batch_size 4 --max_steps 6 --checkpoint_freq 0 --on_nonfinite skip
[ "$(cat "$W/skip.rc")" = 0 ] && grep -q "^step 6: non-finite loss or gradient norm (nan, nan): update skipped (5 so far; --on_nonfinite skip)" "$W/skip.log" &&
    [ "$(grep -c '"skipped": true' "$W/skip.jsonl")" = 5 ]
check "--on_nonfinite skip: every non-finite step's update skipped, the run goes on" $? "rc=$(cat "$W/skip.rc")"

# ---- refusals ----
expect_error "--on_nonfinite rollback without --keep_snapshot" \
    "--on_nonfinite rollback needs --keep_snapshot \(the state in host memory it rolls back to\): add --keep_snapshot" \
    ./fsdpc $M --batch_size 4 --checkpoint_dir "$W/nosnap" --on_nonfinite rollback
expect_error "--on_nonfinite with an unknown action" "--on_nonfinite" ./fsdpc $M --batch_size 4 --checkpoint_dir "$W/nosnap" --on_nonfinite retry

# ---- the snapshot's memory: tracker, start-up check, plan ----
train mem 2 --batch_size 2 --max_steps 2 --keep_snapshot
staged=$(sed -nE 's/.*"staging": \[([0-9]+), ([0-9]+), .*/\2/p' "$W/mem.jsonl" | head -1)
planned=$(./fsdpc plan $M --batch_size 2 --device cpu --world_size 2 --keep_snapshot --json 2>/dev/null | sed -nE 's/.*"staging_bytes": ([0-9]+).*/\1/p')
[ -n "$planned" ] && [ -n "$staged" ] && [ "$staged" -gt 0 ] && awk -v p="$planned" -v m="$staged" 'BEGIN { exit !(p >= m && p <= 1.1 * m) }'
check "the tracker counts the snapshot ($staged bytes on the rank with most); fsdpc plan estimates it ($planned bytes) within 10% above" $?
./fsdpc plan $M --batch_size 2 --device cpu --world_size 2 --keep_snapshot 2>&1 | grep -q "^  staging .*--keep_snapshot: the last checkpoint step's state"
check "fsdpc plan shows the staging row under --keep_snapshot" $?
need=$(sed -nE 's/^memory estimate per rank: ([0-9.]+) MiB.*; snapshot ([0-9.]+) MiB\)$/\1 \2/p' "$W/mem.log")
set -- $need
avail=$(awk -v t="$1" -v s="$2" 'BEGIN { printf "%.0f", 2 * (t - s / 2) * 1048576 }')
[ -n "${2:-}" ] && expect_error "--keep_snapshot whose snapshot does not fit in the node's memory" \
    "--keep_snapshot: its staging buffer \(a host copy of the rank's part of each checkpoint\) takes [0-9.]+ GiB per rank, and with it this node's 2 rank\(s\) need [0-9.]+ GiB, beyond the .*FSDPC_TEST_MEM_AVAILABLE.*; drop --keep_snapshot \(--on_nonfinite rollback needs --keep_snapshot\)" \
    env FSDPC_TEST_MEM_AVAILABLE="$avail" $MPI -np 2 ./fsdpc $M --batch_size 2 --checkpoint_dir "$W/nomem" $RB
[ -n "${2:-}" ] && env FSDPC_TEST_MEM_AVAILABLE="$avail" $MPI -np 2 ./fsdpc $M --batch_size 2 --max_steps 2 --checkpoint_dir "$W/nomem2" >/dev/null 2>&1
check "the start-up estimate counts the snapshot ($need MiB); the same node runs without --keep_snapshot" $?

# ---- the emulated GPU: the snapshot in pinned host memory, restored into device memory ----
if [ ! -x build/fsdpc_emu ]; then
    echo "ok - emulated GPU: rollback equal to the reference # SKIP build/fsdpc_emu not built"
else
    # replicas with --async_checkpoint: the main thread stages every slice from the device, those the writer skips too
    E="--hidden_width 32 --intermediate_size 64 --max_context_width 16 --train_data data/tinyshakespeare.txt --device cuda --batch_size 2
       --sharding no-shard --async_checkpoint --precision bf16"
    FSDPC_TEST_NONFINITE=sample:26 $MPI -np 2 build/fsdpc_emu $M $E $RB --checkpoint_dir "$W/erb" --metrics_file "$W/erb.jsonl" >"$W/erb.log" 2>&1
    echo $? >"$W/erb.rc"
    FSDPC_TEST_SKIP_SAMPLES=24:4 $MPI -np 2 build/fsdpc_emu $M $E --checkpoint_dir "$W/eref" --metrics_file "$W/eref.jsonl" >"$W/eref.log" 2>&1
    echo $? >"$W/eref.rc"
    same erb eref && [ "$(rolled erb)" = 1 ] && grep -q "kept in [0-9.]* MiB of pinned host memory" "$W/erb.log"
    check "emulated GPU, np=2 no-shard, bf16, --async_checkpoint: the snapshot in pinned host memory; rolled back, bit for bit the reference" $? \
        "rc=$(cat "$W/erb.rc") $(grep -m2 'non-finite\|error' "$W/erb.log" | head -c 400)"
fi

# ---- ThreadSanitizer: a rollback while the snapshot's checkpoint is still written in the background ----
if [ ! -x build/fsdpc-tsan ]; then
    echo "ok - ThreadSanitizer: a rollback during a background write # SKIP build/fsdpc-tsan not built (make build/fsdpc-tsan)"
else
    export TSAN_OPTIONS="suppressions=$PWD/test/fixtures/tsan.supp history_size=7 exitcode=66"
    # step 5 holds samples 16-19: its NaN rolls back to step 4 while step 4's write is held (1 s)
    FSDPC_TEST_CKPT_PAUSE=4:1 FSDPC_TEST_NONFINITE=sample:17 build/fsdpc-tsan $M --train_data data/tinyshakespeare.txt --batch_size 4 --max_steps 8 --async_checkpoint $RB \
        --checkpoint_dir "$W/tsan" --metrics_file "$W/tsan.jsonl" >"$W/tsan.log" 2>&1
    rc=$?
    FSDPC_TEST_SKIP_SAMPLES=16:4 build/fsdpc-tsan $M --train_data data/tinyshakespeare.txt --batch_size 4 --max_steps 8 --checkpoint_dir "$W/tsanref" --metrics_file "$W/tsanref.jsonl" >/dev/null 2>&1
    [ $rc = 0 ] && ! grep -q "ThreadSanitizer" "$W/tsan.log" && grep -q "^step 5: non-finite loss .*rolled back to step 4's snapshot" "$W/tsan.log" &&
        cmp -s <(steady "$W/tsan.jsonl") <(steady "$W/tsanref.jsonl")
    check "ThreadSanitizer: rolled back to step 4 while its background write was held; no report, the reference's losses" $? \
        "rc=$rc $(grep -m1 -A3 'WARNING: ThreadSanitizer' "$W/tsan.log" | tr '\n' '|' | head -c 400)"
fi
