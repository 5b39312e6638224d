#!/usr/bin/env bash
# Issue 23, classes 3 and 9: outputs that overlap inputs, and outputs that fail.
# Class 3: --trace_file, --metrics_file, stdout, prepare's shards, export's files and checkpoints
# never replace or append to an input of the run (training data, resumed checkpoint, tokenizer,
# --init_from, export's checkpoint and tokenizer) nor each other, however the path is spelt
# (../, symbolic links): refused with one line naming the flag and the input, every input's
# sha256 unchanged. prepare --overwrite and export --overwrite replace only their own files.
# Class 9: a write to stdout, the metrics file, a trace or stderr that fails (/dev/full) ends the
# program promptly with a non-zero status, and leaves the checkpoints good.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="outputs: "
export FSDPC_FAIL_AGREE_SECONDS=3
SHAPE="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64"
SMALL="$SHAPE --batch_size 4 --num_tokens 0 --num_threads 1 --logging_freq 1 --validation_freq 0"
GEN="$SHAPE --num_threads 1 --max_steps 0 --allow_random_weights --prompt hello --num_tokens 100000 --temperature 0.8"

# inputs: text data, a SentencePiece tokenizer, a checkpoint (resumed below), a Hugging Face model
head -c 20000 data/tinyshakespeare.txt >"$W/d.txt"
cp test/fixtures/tokenizer/tokenizer.model "$W/tok.model"
./fsdpc $SMALL --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/ck" --train_data "$W/d.txt" >/dev/null 2>&1
CK="$W/ck/step_00000002.h5"
/usr/bin/python3 test/ref/hf_make.py "$W/hf" >/dev/null
echo "notes that are not metrics" >"$W/notes.txt"
mkdir -p "$W/sub"
ln -s "$W/d.txt" "$W/link.txt"
INPUTS=("$W/d.txt" "$W/tok.model" "$CK" "$W/hf/model.safetensors" "$W/hf/config.json" "$W/notes.txt")
sha256sum "${INPUTS[@]}" >"$W/inputs.sha"

# refused NAME REGEX CMD...: CMD ends non-zero (no crash, no hang) with exactly one error line
# matching REGEX, within MAXSEC seconds when set, and every file in INPUTS (and any listed in
# EXTRA) is unchanged
EXTRA=()
MAXSEC=60
refused() {
    local name=$1 re=$2 rc lines t0=$SECONDS
    shift 2
    [ ${#EXTRA[@]} = 0 ] || sha256sum "${EXTRA[@]}" >"$W/extra.sha"
    timeout 60 "$@" >"$W/out" 2>"$W/err"
    rc=$?
    lines=$(grep -c '^fsdpc: error:' "$W/err")
    [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$lines" = 1 ] && grep -Eq -- "$re" "$W/err" && [ $((SECONDS - t0)) -le $MAXSEC ] &&
        sha256sum -c --quiet "$W/inputs.sha" >/dev/null 2>&1 && { [ ${#EXTRA[@]} = 0 ] || sha256sum -c --quiet "$W/extra.sha" >/dev/null 2>&1; }
    check "$name" $? "(rc=$rc, $((SECONDS - t0)) s, $lines error lines: $(grep -m2 . "$W/err" | head -c 300 | tr '\n' '|'); $(sha256sum -c --quiet "$W/inputs.sha" 2>&1 | head -c 200))"
    EXTRA=()
    MAXSEC=60
}
T="$SMALL --max_steps 2 --checkpoint_freq 0"

# ---- class 3: --metrics_file / --trace_file against the run's inputs and each other ----
refused "--metrics_file naming the training data" "--metrics_file '$W/d.txt' is the training data '$W/d.txt'" \
    ./fsdpc $T --train_data "$W/d.txt" --metrics_file "$W/d.txt"
refused "--trace_file spelt with ../ naming the training data" "--trace_file '$W/sub/../d.txt' is the same file as the training data '$W/d.txt'" \
    ./fsdpc $T --train_data "$W/d.txt" --trace_file "$W/sub/../d.txt"
refused "--metrics_file through a symbolic link to the training data" "--metrics_file '$W/link.txt' is the same file as the training data" \
    ./fsdpc $T --train_data "$W/d.txt" --metrics_file "$W/link.txt"
refused "--metrics_file naming a file of a training-data glob" "--metrics_file '$W/link.txt' is the same file as the training data '$W/d.txt'" \
    ./fsdpc $T --train_data "$W/d*.txt" --metrics_file "$W/link.txt"
refused "--trace_file naming the checkpoint being resumed (a folder resolved)" "--trace_file '$CK' is the checkpoint being resumed" \
    ./fsdpc $SMALL --max_steps 4 --checkpoint_freq 2 --resume_from_checkpoint "$W/ck" --checkpoint_dir "$W/ck2" --trace_file "$CK"
refused "--metrics_file naming the checkpoint being resumed, through ../" "--metrics_file '$W/sub/../ck/step_00000002.h5' is the same file as the checkpoint being resumed" \
    ./fsdpc $SMALL --max_steps 4 --checkpoint_freq 0 --resume_from_checkpoint "$CK" --metrics_file "$W/sub/../ck/step_00000002.h5"
refused "--metrics_file naming the tokenizer" "--metrics_file '$W/tok.model' is the tokenizer '$W/tok.model'" \
    ./fsdpc $T --train_data "$W/d.txt" --tokenizer "$W/tok.model" --metrics_file "$W/tok.model"
refused "--trace_file naming --init_from's weights" "--trace_file '$W/hf/model.safetensors' is --init_from" \
    ./fsdpc --init_from "$W/hf" --train_data synthetic --max_steps 1 --checkpoint_freq 0 --num_tokens 0 --num_threads 1 \
    --trace_file "$W/hf/model.safetensors"
refused "--trace_file and --metrics_file naming one new file (../)" "--trace_file '$W/sub/../m.jsonl' is the same file as --metrics_file '$W/m.jsonl'" \
    ./fsdpc $T --metrics_file "$W/m.jsonl" --trace_file "$W/sub/../m.jsonl"
refused "an existing file that holds no metrics lines is not appended to" "--metrics_file '$W/notes.txt' exists and is not a metrics file.*give another path, or remove the file" \
    ./fsdpc $T --metrics_file "$W/notes.txt"
refused "an existing file that is no trace is not replaced" "--trace_file '$W/notes.txt' exists and is not a trace fsdpc wrote" \
    ./fsdpc $T --trace_file "$W/notes.txt" --trace_steps 1:1
# an output of its own kind is appended to (metrics) or replaced (trace)
./fsdpc $T --metrics_file "$W/own.jsonl" --trace_file "$W/own.json" --trace_steps 1:1 >/dev/null 2>&1 &&
    ./fsdpc $T --metrics_file "$W/own.jsonl" --trace_file "$W/own.json" --trace_steps 1:1 >/dev/null 2>"$W/own.err"
[ $? = 0 ] && [ "$(grep -c '^{"step": ' "$W/own.jsonl")" = 4 ] && head -c 30 "$W/own.json" | grep -q displayTimeUnit
check "the last run's metrics file is appended to and its trace replaced" $? "$(grep -m1 error "$W/own.err")"
refused "stdout appended onto the checkpoint a generation run resumes" "standard output '/dev/stdout' is the same file as the checkpoint being resumed" \
    bash -c "./fsdpc $GEN --resume_from_checkpoint '$CK' >>'$CK'"
refused "tokenize's stdout appended onto its tokenizer" "standard output '/dev/stdout' is the same file as --tokenizer '$W/tok.model'" \
    bash -c "echo hi | ./fsdpc tokenize --tokenizer '$W/tok.model' >>'$W/tok.model'"

# ---- class 3: prepare --overwrite replaces only its own shards, never an input ----
mkdir -p "$W/p"
cp "$W/d.txt" "$W/p/in.txt"
./fsdpc prepare --input "$W/p/in.txt" --output "$W/p" >/dev/null 2>&1
old=$(sha256sum "$W/p/train_000000.bin")
./fsdpc prepare --input "$W/p/in.txt" --output "$W/p" --overwrite --val_fraction 0.5 >/dev/null 2>"$W/p.err"
[ $? = 0 ] && cmp -s "$W/p/in.txt" "$W/d.txt" && [ "$(sha256sum "$W/p/train_000000.bin")" != "$old" ]
check "prepare --overwrite with its input inside --output replaces the shards and keeps the input" $? "$(grep -m1 error "$W/p.err")"
EXTRA=("$W/p/in.txt" "$W/p/train_000000.bin" "$W/p/val_000000.bin")
refused "prepare without --overwrite into a folder of shards" "--output '$W/p' already holds shards" \
    ./fsdpc prepare --input "$W/p/in.txt" --output "$W/p"
cp "$W/d.txt" "$W/p/train_000007.bin.tmp"  # an input under a shard's name: --overwrite removed it before
EXTRA=("$W/p/train_000007.bin.tmp" "$W/p/train_000000.bin" "$W/p/val_000000.bin")
refused "prepare --overwrite with an input named like its shards" "--output '$W/p/train_000007.bin.tmp' is (the same file as )?--input" \
    ./fsdpc prepare --input "$W/p/train_000007.bin.tmp" --output "$W/p" --overwrite
rm "$W/p/train_000007.bin.tmp"
echo "not a shard" >"$W/p/val_000003.bin"
EXTRA=("$W/p/val_000003.bin" "$W/p/train_000000.bin" "$W/p/val_000000.bin")
refused "prepare --overwrite with a file named like a shard that prepare did not write" "holds 'val_000003.bin', named like a shard but not one prepare wrote" \
    ./fsdpc prepare --input "$W/p/in.txt" --output "$W/p" --overwrite
rm "$W/p/val_000003.bin"

# ---- class 3: export writes into a new or empty folder, its own earlier export, or with --overwrite ----
./fsdpc export --checkpoint "$CK" --output "$W/ex" >/dev/null 2>&1 && ./fsdpc export --checkpoint "$CK" --output "$W/ex" --dtype fp32 >/dev/null 2>"$W/ex.err"
check "export over its own earlier output" $? "$(grep -m1 error "$W/ex.err")"
echo "# my notes" >"$W/ex/README.md"
EXTRA=("$W/ex/README.md" "$W/ex/model.safetensors" "$W/ex/config.json")
refused "export into a folder holding other files" "--output '$W/ex' is not empty: it holds 'README.md'.*pass --overwrite" \
    ./fsdpc export --checkpoint "$CK" --output "$W/ex"
sum=$(sha256sum "$W/ex/README.md")
./fsdpc export --checkpoint "$CK" --output "$W/ex" --overwrite >/dev/null 2>"$W/ex.err" && [ "$(sha256sum "$W/ex/README.md")" = "$sum" ] &&
    sha256sum -c --quiet "$W/inputs.sha" >/dev/null 2>&1
check "export --overwrite writes its files and leaves the others alone" $? "$(grep -m1 error "$W/ex.err")"
EXTRA=("$W/hf/model.safetensors" "$W/hf/config.json")
refused "export into another model's folder" "--output '$W/hf' holds a model that fsdpc export did not write" \
    ./fsdpc export --checkpoint "$CK" --output "$W/hf"
cp -r "$W/hf" "$W/hft" && cp "$W/tok.model" "$W/hft/tokenizer.model"
./fsdpc --init_from "$W/hft" --train_data synthetic --max_steps 1 --checkpoint_freq 1 --checkpoint_dir "$W/ckt" --num_tokens 0 --num_threads 1 >/dev/null 2>&1
EXTRA=("$W/hft/tokenizer.model" "$W/hft/model.safetensors" "$W/ckt/step_00000001.h5")
refused "export --overwrite over the tokenizer it copies" "--output '$W/hft/tokenizer.model' is the checkpoint's tokenizer" \
    ./fsdpc export --checkpoint "$W/ckt" --output "$W/hft" --overwrite
cp "$CK" "$W/ex/ck.h5"
./fsdpc export --checkpoint "$W/ex/ck.h5" --output "$W/ex" --overwrite >/dev/null 2>"$W/ex.err" && cmp -s "$W/ex/ck.h5" "$CK"
check "export --overwrite of a checkpoint inside --output leaves the checkpoint alone" $? "$(grep -m1 error "$W/ex.err")"

# ---- class 9: a failed write ends the program promptly, non-zero, one line ----
# (stdout and stderr without mpirun: under mpirun the ranks write into mpirun's pipes)
refused "train: --metrics_file /dev/full ends the run at its first line" "cannot write --metrics_file '/dev/full': No space left on device" \
    ./fsdpc $SMALL --max_steps 50 --checkpoint_freq 1 --checkpoint_dir "$W/full" --metrics_file /dev/full
ls "$W/full" | grep -qx step_00000001.h5 && [ ! -e "$W/full/step_00000002.h5" ] &&
    ./fsdpc $SMALL --max_steps 0 --resume_from_checkpoint "$W/full" --checkpoint_freq 0 >/dev/null 2>&1
check "the checkpoint written before the failed metrics line stays good (resumed), none after it" $? "$(ls "$W/full" | tr '\n' ' ')"
refused "np=2: --metrics_file /dev/full ends every rank with one line" "cannot write --metrics_file '/dev/full'" \
    $MPI -np 2 ./fsdpc $SMALL --batch_size 2 --max_steps 50 --checkpoint_freq 0 --metrics_file /dev/full
refused "np=2: --metrics_file /dev/full on the last step's line" "cannot write --metrics_file '/dev/full'" \
    $MPI -np 2 ./fsdpc $SMALL --batch_size 2 --max_steps 1 --checkpoint_freq 0 --metrics_file /dev/full
refused "train: --trace_file /dev/full is refused at start" "--trace_file '/dev/full' is a device" \
    ./fsdpc $T --trace_file /dev/full
MAXSEC=10
refused "generation from a checkpoint to a full stdout stops at the first token" "cannot write standard output: No space left on device" \
    bash -c "./fsdpc $GEN --resume_from_checkpoint '$CK' >/dev/full"
MAXSEC=10
refused "generation from --init_from to a full stdout" "cannot write standard output: No space left on device" \
    bash -c "./fsdpc $GEN --init_from '$CK' >/dev/full"
refused "the sample after training to a full stdout" "cannot write standard output: No space left on device" \
    bash -c "./fsdpc ${SMALL/--num_tokens 0/} --max_steps 2 --checkpoint_freq 0 --num_tokens 50 >/dev/full"
MAXSEC=10
refused "tokenize to a full stdout stops at the first failed write" "cannot write standard output: No space left on device" \
    bash -c "yes 'the quick brown fox' | head -n 2000000 | ./fsdpc tokenize --tokenizer '$W/tok.model' >/dev/full"
refused "tokenize --chat to a full stdout" "cannot write standard output: No space left on device" \
    bash -c "echo '{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}' | ./fsdpc tokenize --tokenizer '$W/tok.model' --chat >/dev/full"
refused "plan to a full stdout" "cannot write standard output: No space left on device" bash -c "./fsdpc plan --model_name llama2_7b >/dev/full"
refused "plan --json to a full stdout" "cannot write standard output: No space left on device" bash -c "./fsdpc plan --model_name llama2_7b --json >/dev/full"
# stderr that cannot be written: no line can be printed, but the status is an error, at once
stderr_full() {  # NAME CMD...
    local name=$1 rc t0=$SECONDS
    shift
    timeout 60 "$@" 2>/dev/full >/dev/null
    rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ $((SECONDS - t0)) -le 10 ] && sha256sum -c --quiet "$W/inputs.sha" >/dev/null 2>&1
    check "$name with stderr on a full device ends non-zero at once" $? "(rc=$rc, $((SECONDS - t0)) s)"
}
stderr_full "train" ./fsdpc $SMALL --max_steps 100000 --checkpoint_freq 0 --train_data "$W/d.txt"
stderr_full "generation" ./fsdpc $GEN --resume_from_checkpoint "$CK"
stderr_full "prepare" ./fsdpc prepare --input "$W/d.txt" --output "$W/pfull"
stderr_full "export" ./fsdpc export --checkpoint "$CK" --output "$W/exfull"
# export and prepare write nothing to stdout: a full stdout is no failure of theirs
./fsdpc export --checkpoint "$CK" --output "$W/exout" >/dev/full 2>/dev/null && [ -f "$W/exout/config.json" ] &&
    ./fsdpc prepare --input "$W/d.txt" --output "$W/pout" >/dev/full 2>/dev/null && [ -f "$W/pout/train_000000.bin" ]
check "export and prepare with stdout on a full device complete (they print nothing there)" $?
# a run refused at start-up (the memory check, after the output folders are made) leaves none of
# the folders it made, nor an events file with no data, nor the empty --metrics_file it created
# (a data glob over its folder would read it: "an empty file"); folders that were there, and an
# empty metrics file that was, stay, and a run that trained keeps its events
mkdir -p "$W/was" "$W/had"
: >"$W/had/m.jsonl"
$MPI -np 2 ./fsdpc --model_name llama2_70b --tokenizer byte --max_steps 1 --checkpoint_dir "$W/new/ck/a/" \
    --tensorboard_dir "$W/was/tb/b//" --trace_dir "$W/new/tr" --metrics_file "$W/was/m.jsonl" >"$W/refused.log" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "fsdpc: error: estimated peak memory" "$W/refused.log" && [ ! -e "$W/new" ] && [ -d "$W/was" ] &&
    [ -z "$(ls -A "$W/was")" ]
check "a run refused by the memory check leaves no folder it made, no empty events file and no empty metrics file (np=2)" $? \
    "(rc=$rc) $(ls -R "$W/new" "$W/was" 2>&1 | head -c 200)"
./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --train_data "$W/had/none.txt" --metrics_file "$W/had/m.jsonl" >/dev/null 2>&1
[ $? = 1 ] && [ "$(ls -A "$W/had")" = m.jsonl ]
check "an empty --metrics_file that was there stays after a refused run" $? "$(ls -A "$W/had")"
./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --tensorboard_dir "$W/was/tb2" --train_data "$W/d.txt" >/dev/null 2>&1
[ "$(ls "$W/was/tb2" | grep -c '^events.out.tfevents')" = 1 ]
check "a run that trained keeps its events file" $?
sha256sum -c --quiet "$W/inputs.sha" >/dev/null 2>&1
check "no input changed over the whole suite" $? "$(sha256sum -c --quiet "$W/inputs.sha" 2>&1 | head -c 300)"
