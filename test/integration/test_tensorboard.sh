#!/usr/bin/env bash
# --tensorboard_dir: the event files decode with protobuf's own decoder (test/ref/tboard_read.py, every
# TFRecord CRC checked), hold the metrics file's scalars at its steps, a resumed run adds its own
# file, and bad folders and failed writes end the run with one error line.
cd "$(dirname "$0")/../.."
source test/lib.sh
SMALL="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64 --batch_size 4 --num_tokens 0"
R="$SMALL --lr_decay_style constant --warmup 2 --lr 2e-3 --logging_freq 2 --validation_freq 3 --validation_batches 1 --num_threads 1"
READ="/usr/bin/python3 test/ref/tboard_read.py"

if ! /usr/bin/python3 -c "import google.protobuf" 2>/dev/null; then
    echo "ok - tensorboard # SKIP python3-protobuf is not installed (run/install-deps.sh installs it)"
    exit 0
fi

# ---- one run: every record decodes, the scalars are the metrics file's ----
./fsdpc $R --max_steps 7 --checkpoint_freq 0 --tensorboard_dir "$W/tb/a/b" --metrics_file "$W/one.jsonl" >/dev/null 2>"$W/one.log"
rc=$?
out=$($READ "$W/tb/a/b" "$W/one.jsonl")
st=$?
[ $rc = 0 ] && [ $st = 0 ] && echo "$out" | grep -q "steps 1..7, " && echo "$out" | grep -q "train/loss train/lr train/tokens val/loss"
check "a run's events file (folder made with its parents) decodes, every CRC right, scalars equal the metrics file's" $? "rc=$rc $out"

# the reader fails on a flipped byte, a missing scalar and a cut file, so the check above can fail
f=$(ls "$W/tb/a/b"/events.out.tfevents.*)
mkdir -p "$W/bad1" "$W/bad2" "$W/bad3"
cp "$f" "$W/bad1/${f##*/}" && printf 'X' | dd of="$W/bad1/${f##*/}" bs=1 seek=200 conv=notrunc status=none
out1=$($READ "$W/bad1" "$W/one.jsonl")
st1=$?
size=$(stat -c %s "$f")
head -c $((size - 3)) "$f" >"$W/bad2/${f##*/}"
out2=$($READ "$W/bad2" "$W/one.jsonl")
st2=$?
sed '5s/"loss": \([0-9.]*\)/"loss": 1\1/' "$W/one.jsonl" >"$W/bad3.jsonl"  # step 5's loss, changed
cp "$f" "$W/bad3/"
out3=$($READ "$W/bad3" "$W/bad3.jsonl")
st3=$?
[ $st1 = 1 ] && echo "$out1" | grep -q "CRC" && [ $st2 = 1 ] && [ $st3 = 1 ] && echo "$out3" | grep -q "train/loss at step 5 "
check "the reader refuses a flipped byte, a cut file and another loss" $? "$out1 | $out2 | $out3"

# ---- a resumed run (on 2 ranks: rank 0 alone writes) adds a second file with the later steps ----
./fsdpc $R --max_steps 4 --checkpoint_freq 4 --checkpoint_dir "$W/ck" --tensorboard_dir "$W/tb2" --metrics_file "$W/r1.jsonl" \
    >/dev/null 2>"$W/r1.log"
rc1=$?
$MPI -np 2 ./fsdpc $R --batch_size 2 --max_steps 8 --checkpoint_freq 0 --resume_from_checkpoint "$W/ck/step_00000004.h5" \
    --tensorboard_dir "$W/tb2" --metrics_file "$W/r2.jsonl" >/dev/null 2>"$W/r2.log"
rc2=$?
out=$($READ "$W/tb2" "$W/r1.jsonl" "$W/r2.jsonl")
st=$?
[ $rc1 = 0 ] && [ $rc2 = 0 ] && [ $st = 0 ] && [ "$(ls "$W/tb2" | wc -l)" = 2 ] && echo "$out" | grep -q "steps 1..4, " &&
    echo "$out" | grep -q "steps 5..8, "
check "a resumed run on 2 ranks writes one more events file, steps 5..8" $? "rc=$rc1,$rc2 $out $(grep -m1 error "$W/r2.log")"

# ---- skipped non-finite steps: train/lr only, written before the run stops ----
FSDPC_TEST_NONFINITE=2 ./fsdpc $SMALL --min_lr 0 --warmup 0 --checkpoint_freq 0 --logging_freq 1 --max_steps 6 --skip_nonfinite_steps 1 \
    --metrics_file "$W/div.jsonl" --tensorboard_dir "$W/div" >/dev/null 2>"$W/div.log"
rc=$?
out=$($READ "$W/div" "$W/div.jsonl")
st=$?
[ $rc = 1 ] && [ $st = 0 ] && [ "$(grep -c '"skipped": true' "$W/div.jsonl")" = 2 ]
check "skipped steps (the last one stopping the run) have their train/lr, as their metrics lines" $? "rc=$rc $out"

# ---- bad folders: one error line before any step ----
touch "$W/file"
expect_error "--tensorboard_dir naming a file" "--tensorboard_dir '$W/file' is a file, not a folder: give a folder" \
    ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 0 --tensorboard_dir "$W/file"
expect_error "--tensorboard_dir under a file" "--tensorboard_dir '$W/file/tb': '$W/file' is a file, not a folder" \
    ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 0 --tensorboard_dir "$W/file/tb"
expect_error "--tensorboard_dir under a file (2 ranks)" "--tensorboard_dir '$W/file/tb'" \
    $MPI -np 2 ./fsdpc $SMALL --batch_size 2 --max_steps 2 --checkpoint_freq 0 --tensorboard_dir "$W/file/tb"

# ---- a full disk ends the run at the step whose events it could not write ----
mkdir -p "$W/full"
if mount -t tmpfs -o size=12k tmpfs "$W/full" 2>/dev/null; then  # the writer lock takes a block too
    trap 'umount "$W/full" 2>/dev/null; rm -rf "$W"' EXIT
    expect_error "a full --tensorboard_dir ends the run" \
        "cannot write --tensorboard_dir file '$W/full/events.out.tfevents.[^']*': No space left on device \\(the run stops" \
        ./fsdpc $SMALL --max_steps 200 --logging_freq 1 --checkpoint_freq 0 --tensorboard_dir "$W/full"
    umount "$W/full"
else
    echo "ok - error: a full --tensorboard_dir ends the run # SKIP cannot mount a small tmpfs here (not root)"
fi
