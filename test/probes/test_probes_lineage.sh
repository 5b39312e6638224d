#!/usr/bin/env bash
# Checkpoint folders that hold other runs (issue 23, class 11): a run replaces or prunes only
# checkpoints of its own lineage unless --overwrite_checkpoints says otherwise, and never the file
# it starts from; a file whose name says another step than it records is refused; a folder of
# several unrelated runs is an error naming them. Each refusal: non-zero exit, one error line,
# nothing in the folders changed.
cd "$(dirname "$0")/../.."
source test/lib.sh
M="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 96 --max_context_width 32
   --num_tokens 0 --validation_freq 0 --num_threads 1 --batch_size 4 --logging_freq 1"
F="timeout 60 ./fsdpc $M"
PY=/usr/bin/python3
sums() { (cd "$1" && sha256sum step_*.h5 2>/dev/null); }
run_id() { $PY -c "import h5py, sys; print(h5py.File(sys.argv[1], 'r').attrs['run_id'].decode())" "$1"; }
lineage() { $PY -c "import h5py, sys; print(h5py.File(sys.argv[1], 'r').attrs['lineage'].decode())" "$1"; }
# refused NAME REGEX DIR CMD...: CMD fails at start-up (no step trained) with one error line
# matching REGEX, and DIR's checkpoints are unchanged
refused() {
    local name=$1 re=$2 dir=$3
    shift 3
    sums "$dir" >"$W/before"
    "$@" >"$W/out" 2>"$W/err"
    local rc=$? lines
    lines=$(grep -c '^fsdpc: error:' "$W/err")
    [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$lines" = 1 ] && grep -Eq -- "$re" "$W/err" && ! grep -q "^Batch " "$W/err" &&
        cmp -s "$W/before" <(sums "$dir")
    check "refused: $name" $? "(rc=$rc, $lines error lines: $(grep -m2 . "$W/err" | head -c 400 | tr '\n' '|'))"
}

# run A writes X; run B, unrelated, writes Y
$F --max_steps 6 --checkpoint_freq 2 --checkpoint_dir "$W/X" >/dev/null 2>&1
$F --max_steps 4 --checkpoint_freq 2 --seed 7 --checkpoint_dir "$W/Y" >/dev/null 2>&1
A=$(run_id "$W/X/step_00000006.h5")
B=$(run_id "$W/Y/step_00000004.h5")
[ ${#A} = 16 ] && [ ${#B} = 16 ] && [ "$A" != "$B" ]
check "two runs, two run ids" $? "A=$A B=$B"
mkdir -p "$W/keep" && cp "$W/X/step_00000004.h5" "$W/keep/A4.h5" && cp "$W/Y/step_00000002.h5" "$W/keep/B2.h5"

# ---- B resumed from its own folder and told to write into A's ----
refused "a resumed run told to write into another run's folder (np=2)" \
    "--checkpoint_dir '$W/X' holds 3 checkpoint\(s\) of runs outside the lineage .*run $A \(newest step 6: step_00000006.h5\).*another --checkpoint_dir, resume from '$W/X' instead, or pass --overwrite_checkpoints" \
    "$W/X" $MPI -np 2 ./fsdpc $M --max_steps 8 --checkpoint_freq 2 --resume_from_checkpoint "$W/Y" --checkpoint_dir "$W/X"
sums "$W/Y" >"$W/y.sum"
sums "$W/X" | grep -v step_00000006 >"$W/x.sum"
$F --max_steps 8 --checkpoint_freq 2 --resume_from_checkpoint "$W/Y" --checkpoint_dir "$W/X" --overwrite_checkpoints >/dev/null 2>"$W/ow.err"
rc=$?
[ $rc = 0 ] && grep -q "^--overwrite_checkpoints: $W/X holds 3 checkpoint(s) of other runs: run $A" "$W/ow.err" &&
    grep -q "^Replacing $W/X/step_00000006.h5 of run $A (--overwrite_checkpoints)$" "$W/ow.err" &&
    [ "$(lineage "$W/X/step_00000006.h5")" = "$B:4" ] && [ "$(lineage "$W/X/step_00000008.h5")" = "$B:4" ] &&
    cmp -s "$W/x.sum" <(sums "$W/X" | grep -v 'step_0000000[68]') && cmp -s "$W/y.sum" <(sums "$W/Y")
check "--overwrite_checkpoints: replaces A's step 6 (logged), keeps A's others, the resumed folder untouched" $? \
    "rc=$rc $(grep -m2 'overwrite\|error' "$W/ow.err" | head -c 300)"

# ---- never the file a run starts from, even under --overwrite_checkpoints ----
mkdir -p "$W/Z" && cp "$W/keep/A4.h5" "$W/Z/step_00000004.h5"
refused "--overwrite_checkpoints over the --init_from file itself" \
    "--checkpoint_dir '$W/Z' holds step_00000004.h5, the checkpoint this run starts from \(--init_from\), at a step this run writes" \
    "$W/Z" $F --max_steps 4 --checkpoint_freq 2 --init_from "$W/Z/step_00000004.h5" --checkpoint_dir "$W/Z" --overwrite_checkpoints

# ---- the publish checks again: another run's file written after start-up is not replaced ----
FSDPC_TEST_CKPT_PAUSE=4:4 $F --max_steps 4 --checkpoint_freq 2 --checkpoint_dir "$W/P" >/dev/null 2>"$W/pub.err" &
pid=$!
for _ in $(seq 300); do grep -qs "paused" "$W/pub.err" && break; sleep 0.1; done
cp "$W/Y/step_00000004.h5" "$W/P/step_00000004.h5"
sha=$(sha256sum <"$W/P/step_00000004.h5")
wait $pid
rc=$?
[ $rc = 1 ] && [ "$(grep -c '^fsdpc: error:' "$W/pub.err")" = 1 ] &&
    grep -q "^fsdpc: error: checkpoint of step 4 not published: '$W/P/step_00000004.h5' holds a checkpoint of run $B, outside this run's lineage" "$W/pub.err" &&
    [ "$(sha256sum <"$W/P/step_00000004.h5")" = "$sha" ] && [ -z "$(ls "$W/P" | grep tmp)" ]
check "a checkpoint of another run written into the folder mid-run is not renamed over" $? "rc=$rc $(grep -m1 error "$W/pub.err" | head -c 300)"

# ---- a file's name must say the step it records ----
mkdir -p "$W/N" && cp "$W/keep/A4.h5" "$W/N/step_00000009.h5"
expect_error "a checkpoint renamed to another step, resumed by file" \
    "checkpoint '$W/N/step_00000009.h5' is named for step 9 but records step 4" \
    $F --max_steps 12 --checkpoint_freq 0 --resume_from_checkpoint "$W/N/step_00000009.h5"
expect_error "the same file as --init_from" "checkpoint '$W/N/step_00000009.h5' is named for step 9 but records step 4" \
    $F --max_steps 2 --checkpoint_freq 0 --init_from "$W/N/step_00000009.h5"
cp "$W/keep/A4.h5" "$W/N/step_00000004.h5" && cp "$W/keep/A4.h5" "$W/N/best.h5"
$F --max_steps 5 --checkpoint_freq 0 --resume_from_checkpoint "$W/N" >/dev/null 2>"$W/n.err"
rc=$?
[ $rc = 0 ] && grep -q "^Checkpoint $W/N/step_00000009.h5 is unusable, falling back to the one before it: .*named for step 9 but records step 4" "$W/n.err" &&
    grep -q "^Resumed from $W/N/step_00000004.h5 at step 4" "$W/n.err"
check "resumed by folder, the renamed file is passed over with a log line" $? "rc=$rc $(grep -m2 'unusable\|error' "$W/n.err" | head -c 300)"
refused "writing into that folder, where step 9 would replace the renamed file" \
    "--checkpoint_dir '$W/N' holds 1 file\(s\) named like checkpoints at steps this run may write that are no usable checkpoints of it, the newest step_00000009.h5 \(.*named for step 9" \
    "$W/N" $F --max_steps 10 --checkpoint_freq 5 --resume_from_checkpoint "$W/N" --checkpoint_dir "$W/N"
$F --max_steps 5 --checkpoint_freq 0 --resume_from_checkpoint "$W/N/best.h5" >/dev/null 2>"$W/best.err"
check "a file not named step_<N>.h5 carries no number and resumes" $? "$(grep -m1 error "$W/best.err")"

# ---- a folder of two unrelated runs ----
mkdir -p "$W/G" && cp "$W/keep/A4.h5" "$W/G/step_00000004.h5" && cp "$W/keep/B2.h5" "$W/G/step_00000002.h5"
refused "resuming a folder that holds two unrelated runs (np=2)" \
    "'$W/G' holds the checkpoints of 2 unrelated runs, and 2 of them record this run's training data: run $A \(newest step 4: step_00000004.h5\), run $B \(newest step 2: step_00000002.h5\); give --resume_from_checkpoint the file to resume" \
    "$W/G" $MPI -np 2 ./fsdpc $M --max_steps 6 --checkpoint_freq 0 --resume_from_checkpoint "$W/G"
expect_error "export of that folder" "'$W/G' holds the checkpoints of 2 unrelated runs: run $A .*run $B" \
    ./fsdpc export --checkpoint "$W/G" --output "$W/G.hf"
$F --max_steps 5 --checkpoint_freq 0 --resume_from_checkpoint "$W/G/step_00000002.h5" >/dev/null 2>"$W/g1.err"
check "naming one of the files resolves it" $? "$(grep -m1 error "$W/g1.err")"
$PY test/ref/ckpt_tamper.py flip1 "$W/G/step_00000004.h5" 3 >/dev/null
$F --max_steps 5 --checkpoint_freq 0 --resume_from_checkpoint "$W/G" >/dev/null 2>"$W/g2.err"
rc=$?
[ $rc = 0 ] && grep -q "^Checkpoint $W/G/step_00000004.h5 is unusable: .*fails its checksum" "$W/g2.err" &&
    grep -q "^$W/G also holds checkpoints of other runs, none of them usable: resuming run $B" "$W/g2.err" &&
    grep -q "^Resumed from $W/G/step_00000002.h5 at step 2" "$W/g2.err"
check "when only one run's checkpoints are usable, that run is resumed, with log lines" $? "rc=$rc $(grep -m2 'unusable\|error' "$W/g2.err" | head -c 300)"

# of two unrelated runs on different data, the one that trained on this run's --train_data is
# its own (a requeue repeats its command line)
$F --max_steps 2 --checkpoint_freq 2 --train_data synthetic --checkpoint_dir "$W/S" >/dev/null 2>&1
S=$(run_id "$W/S/step_00000002.h5")
mkdir -p "$W/G2" && cp "$W/keep/A4.h5" "$W/G2/step_00000004.h5" && cp "$W/S/step_00000002.h5" "$W/G2/step_00000002.h5"
$F --max_steps 3 --checkpoint_freq 0 --train_data synthetic --resume_from_checkpoint "$W/G2" >/dev/null 2>"$W/g3.err"
rc=$?
[ $rc = 0 ] && grep -q "^$W/G2 holds the checkpoints of 2 unrelated runs: resuming run $S (its checkpoints record this run's training data); passed over: run $A" "$W/g3.err" &&
    grep -q "^Resumed from $W/G2/step_00000002.h5 at step 2" "$W/g3.err"
check "a folder of two runs on different data resolves to the one that trained on this run's data" $? "rc=$rc $(grep -m2 'holds\|error' "$W/g3.err" | head -c 300)"
$F --max_steps 5 --checkpoint_freq 0 --resume_from_checkpoint "$W/G2" >/dev/null 2>"$W/g4.err"
rc=$?
[ $rc = 0 ] && grep -q "^Resumed from $W/G2/step_00000004.h5 at step 4" "$W/g4.err"
check "... and on the bundled data, to the other one" $? "rc=$rc $(grep -m2 'holds\|error' "$W/g4.err" | head -c 300)"

# ---- one lineage: a rewind still replaces its abandoned future, and requeues go on ----
$F --max_steps 6 --checkpoint_freq 2 --checkpoint_dir "$W/R" >/dev/null 2>&1
R1=$(run_id "$W/R/step_00000006.h5")
$F --max_steps 4 --checkpoint_freq 2 --resume_from_checkpoint "$W/R/step_00000002.h5" --checkpoint_dir "$W/R" >/dev/null 2>"$W/r1.err"
rc=$?
[ $rc = 0 ] && grep -q "^Replacing $W/R/step_00000004.h5 of run $R1$" "$W/r1.err" && [ "$(run_id "$W/R/step_00000004.h5")" != "$R1" ]
check "a rewind replaces its own lineage's later step, logged" $? "rc=$rc $(grep -m1 error "$W/r1.err")"
$F --max_steps 8 --checkpoint_freq 2 --resume_from_checkpoint "$W/R" --checkpoint_dir "$W/R" >/dev/null 2>"$W/r2.err"
rc=$?
[ $rc = 0 ] && grep -q "^Resumed from $W/R/step_00000006.h5 at step 6" "$W/r2.err" && [ -f "$W/R/step_00000008.h5" ]
check "the folder after the rewind is one lineage: a requeue resumes its newest and writes on" $? "rc=$rc $(grep -m1 error "$W/r2.err")"

# ---- a fresh run into a folder of checkpoints names their run ----
refused "a fresh run into another run's folder" \
    "--checkpoint_dir '$W/Y' already holds 2 checkpoint\(s\) \(the newest step_00000004.h5\) of another run; resume them with --resume_from_checkpoint $W/Y, give another --checkpoint_dir, or pass --overwrite_checkpoints; they are of run $B" \
    "$W/Y" $F --max_steps 2 --checkpoint_freq 1 --checkpoint_dir "$W/Y"
