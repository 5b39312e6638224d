#!/usr/bin/env bash
# Issue 39, class 2: paths of any length. Files inside a data folder are read under their whole
# names (a name that extends another's is its own file, never read in its place); a
# --checkpoint_dir of 300+ characters saves and resumes at np=2 (Open MPI's lockedfile sharedfp
# component, which aborts on such paths, is left out); path flags longer than fsdpc keeps are
# refused with one line naming the flag and the limit. Inputs unchanged throughout.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="paths: "
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_pml=ob1 OMP_NUM_THREADS=1
SHAPE="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64 --num_threads 1"
SMALL="$SHAPE --batch_size 4 --num_tokens 0 --logging_freq 1 --validation_freq 0"
long() { printf "%${1}s" | tr ' ' "${2:-d}"; }  # N characters

# a data folder 300 characters deep holding N.bin and N.bin.bin, N 240 characters: paths of 550+
# characters, equal in their first 511, two shards of 300 tokens each
D="$W/$(long 140 a)/$(long 140 b)/data"
N=$(long 240 n)
mkdir -p "$D"
head -c 300 data/tinyshakespeare.txt >"$W/s1.txt"
head -c 300 data/tinyshakespeare.txt | tr 'a-z' 'A-Z' >"$W/s2.txt"
./fsdpc prepare --input "$W/s1.txt" --output "$W/p1" --val_fraction 0 >/dev/null 2>&1 &&
    ./fsdpc prepare --input "$W/s2.txt" --output "$W/p2" --val_fraction 0 >/dev/null 2>&1 &&
    cp "$W/p1/train_000000.bin" "$D/$N.bin" && cp "$W/p2/train_000000.bin" "$D/$N.bin.bin"
sha256sum "$D/$N.bin" "$D/$N.bin.bin" >"$W/inputs.sha"
./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --train_data "$D" >"$W/d.log" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "2 files" "$W/d.log" && grep -Eq "60[0-9] tokens|0\.6K tokens|600" "$W/d.log" && sha256sum -c --quiet "$W/inputs.sha" >/dev/null 2>&1
check "a data folder of 550+ character paths: both files read, each under its own name" $? "(rc=$rc: $(grep -i "token\|error" "$W/d.log" | head -3 | tr '\n' '|' | head -c 400))"

# --checkpoint_dir of 320 characters: save, then resume, at np=2
CK="$W/$(long 150 e)/$(long 150 f)/ck"
$MPI -np 2 ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$CK" --train_data "$W/s1.txt" >"$W/c1.log" 2>&1 &&
    [ -f "$CK/step_00000002.h5" ] &&
    $MPI -np 2 ./fsdpc $SMALL --max_steps 4 --checkpoint_freq 2 --resume_from_checkpoint "$CK" --checkpoint_dir "$CK" --train_data "$W/s1.txt" >"$W/c2.log" 2>&1 &&
    [ -f "$CK/step_00000004.h5" ] && ! grep -q "buffer overflow" "$W/c1.log" "$W/c2.log"
check "a 320-character --checkpoint_dir saves and resumes at np=2" $? "$(grep -m3 -i "error\|overflow\|abort" "$W/c1.log" "$W/c2.log" | tr '\n' '|' | head -c 400)"

# every path flag: 200 characters work; beyond fsdpc's limit, one line naming the flag and the limit
P="$W/$(long 200 g)"
mkdir -p "$P"
./fsdpc $SMALL --max_steps 2 --checkpoint_freq 2 --train_data "$W/s1.txt" --checkpoint_dir "$P/ck" --metrics_file "$P/m.jsonl" \
    --tensorboard_dir "$P/tb" --trace_file "$P/t.json" --trace_dir "$P/td" --trace_steps 1:1 --data_cache_dir "$P/cache" >"$W/f.log" 2>&1 &&
    [ -f "$P/ck/step_00000002.h5" ] && [ -s "$P/m.jsonl" ] && [ -s "$P/t.json" ] && [ -n "$(ls "$P/tb")" ] && [ -n "$(ls "$P/td")" ] &&
    ./fsdpc prepare --input "$W/s1.txt" --output "$P/prep" >/dev/null 2>&1 && [ -f "$P/prep/train_000000.bin" ] &&
    ./fsdpc export --checkpoint "$P/ck" --output "$P/hf" >/dev/null 2>&1 && [ -f "$P/hf/config.json" ]
check "200-character paths through every output flag, prepare and export" $? "$(grep -m2 error "$W/f.log")"
for n in 600 4000; do
    L="$W/$(long $n h)"
    for flag in checkpoint_dir metrics_file tensorboard_dir trace_file trace_dir data_cache_dir train_data resume_from_checkpoint; do
        expect_error "--$flag of $n characters" "--$flag value is too long \(max [0-9]+ characters\)" ./fsdpc $SMALL --max_steps 1 --train_data "$W/s1.txt" --$flag "$L"
    done
    expect_error "prepare --output of $n characters" "--output value is too long \(max [0-9]+ characters\)|File name too long" ./fsdpc prepare --input "$W/s1.txt" --output "$L"
    expect_error "export --output of $n characters" "--output value is too long \(max [0-9]+ characters\)|File name too long" ./fsdpc export --checkpoint "$P/ck" --output "$L"
done
sha256sum -c --quiet "$W/inputs.sha" >/dev/null 2>&1
check "no input changed over the whole suite" $?
