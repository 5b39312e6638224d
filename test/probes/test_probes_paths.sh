#!/usr/bin/env bash
# Issue 39, class 2: paths of any length. Files inside a data folder are read under their whole
# names (a name that extends another's is its own file, never read in its place); a
# --checkpoint_dir of 300+ characters saves and resumes at np=2 (Open MPI's lockedfile sharedfp
# component, which aborts on such paths, is left out); paths of 200, 1000, 2000 and ~4000
# characters (folders of 200-character names) through every path flag work end to end, and a
# path the operating system would refuse (PATH_MAX, 4095 bytes, whole or once an output's own
# names are added) is refused at start-up with one line naming the flag, its length and the
# limit, nothing written. Inputs unchanged throughout.
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

# deep N: a folder of about N characters under $W, of 200-character names (made)
deep() {
    local d=$W/p$1 c=$2
    while [ ${#d} -lt $(($1 - 201)) ]; do d="$d/$(long 200 "$c")"; done
    d="$d/$(long $(($1 - ${#d} - 1)) "$c")"
    mkdir -p "$d" && echo "$d"
}
# at each length: train with a SentencePiece tokenizer from the long folder (checkpoint, metrics,
# TensorBoard, both traces, the data cache and the data there too), resume from it (the checkpoint
# records the tokenizer's whole path), prepare into it and train on that, export into it (the
# tokenizer copied from its recorded path), tokenize with it
for n in 200 1000 2000 3990; do
    P=$(deep $n g)
    cp "$W/s1.txt" test/fixtures/tokenizer/tokenizer.model "$P/"
    sha256sum "$P/s1.txt" "$P/tokenizer.model" >>"$W/inputs.sha" 2>/dev/null
    ./fsdpc $SMALL --tokenizer "$P/tokenizer.model" --max_steps 2 --checkpoint_freq 2 --train_data "$P/s1.txt" --checkpoint_dir "$P/ck" \
        --metrics_file "$P/m.jsonl" --tensorboard_dir "$P/tb" --trace_file "$P/t.json" --trace_dir "$P/td" --trace_steps 1:1 \
        --data_cache_dir "$P/cache" >"$W/f$n.log" 2>&1 &&
        [ -f "$P/ck/step_00000002.h5" ] && [ -s "$P/m.jsonl" ] && [ -s "$P/t.json" ] && [ -n "$(ls "$P/tb")" ] && [ -n "$(ls "$P/td")" ] &&
        [ -n "$(ls "$P/cache")" ] &&
        ./fsdpc $SMALL --tokenizer "$P/tokenizer.model" --max_steps 4 --checkpoint_freq 2 --train_data "$P/s1.txt" --checkpoint_dir "$P/ck" \
            --resume_from_checkpoint "$P/ck" --metrics_file "$P/m.jsonl" --data_cache_dir "$P/cache" >>"$W/f$n.log" 2>&1 &&
        [ -f "$P/ck/step_00000004.h5" ] && grep -q "Resumed from $P/ck/step_00000002.h5" "$W/f$n.log"
    check "${#P}-character paths: train with every output flag and the tokenizer there, then resume" $? \
        "$(grep -a -m2 error "$W/f$n.log" | tail -c 300)"
    ./fsdpc prepare --input "$P/s1.txt" --output "$P/prep" --val_fraction 0 >"$W/p$n.log" 2>&1 && [ -f "$P/prep/train_000000.bin" ] &&
        ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --train_data "$P/prep" >>"$W/p$n.log" 2>&1 &&
        ./fsdpc export --checkpoint "$P/ck" --output "$P/hf" >>"$W/p$n.log" 2>&1 && [ -f "$P/hf/config.json" ] &&
        [ -f "$P/hf/model.safetensors" ] && cmp -s "$P/hf/tokenizer.model" "$P/tokenizer.model" &&
        [ "$(echo "hello world" | ./fsdpc tokenize --tokenizer "$P/tokenizer.model")" = "$(echo "hello world" | ./fsdpc tokenize --tokenizer test/fixtures/tokenizer/tokenizer.model)" ]
    check "${#P}-character paths: prepare into it, train on it, export into it, tokenize with its tokenizer" $? \
        "$(grep -a -m2 error "$W/p$n.log" | tail -c 300)"
done
# np=2 at the longest: MPI-IO (ompio and romio) and parallel HDF5 take names of ~4030 characters
for io in ompio romio321; do
    OMPI_MCA_io=$io $MPI -np 2 ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$P/ck2$io" --train_data "$P/s1.txt" >"$W/n2.log" 2>&1 &&
        OMPI_MCA_io=$io $MPI -np 2 ./fsdpc $SMALL --max_steps 4 --checkpoint_freq 2 --checkpoint_dir "$P/ck2$io" --resume_from_checkpoint "$P/ck2$io" \
            --train_data "$P/s1.txt" >>"$W/n2.log" 2>&1 && [ -f "$P/ck2$io/step_00000004.h5" ]
    check "np=2 ($io): a ${#P}-character --checkpoint_dir saves and resumes" $? "$(grep -a -m2 error "$W/n2.log" | tail -c 300)"
done
sha256sum "$P/ck/step_00000004.h5" "$P/m.jsonl" "$P/hf/config.json" >>"$W/inputs.sha" 2>/dev/null
# an error line naming a path of thousands of characters still ends with its cause and fix (the
# path is shown with a marked gap, not cut off with the rest of the line)
refused_unchanged "another run's checkpoints in a ${#P}-character --checkpoint_dir: the whole line, cause and fix" \
    "^fsdpc: error: --checkpoint_dir '.*\[\.\.\.[0-9]+ characters\.\.\.\].*' already holds 2 checkpoint\(s\).*or pass --overwrite_checkpoints" \
    ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 1 --train_data "$P/s1.txt" --checkpoint_dir "$P/ck"

# beyond the operating system's limit: refused at start-up, naming the flag, nothing written
X=$(deep 4060 h)  # 4060 characters: the folder is fine, the names a run writes in it are not
for flag in checkpoint_dir tensorboard_dir trace_dir data_cache_dir; do
    refused_unchanged "--$flag of ${#X} characters: its longest file refused at start-up" \
        "--$flag's (file|writer lock) .* would be a path of 4[0-9]{3} characters, beyond the 4095 the operating system accepts" \
        ./fsdpc $SMALL --max_steps 1 --train_data "$W/s1.txt" --$flag "$X"
done
[ -z "$(ls -A "$X")" ]
check "nothing written in the refused folder" $? "$(ls -A "$X" | head -3)"
refused_unchanged "--trace_file of ${#X}+ characters: its temporary refused" "--trace_file's (temporary|writer lock) .* 4095" \
    ./fsdpc $SMALL --max_steps 1 --train_data "$W/s1.txt" --trace_file "$X/t.json"
refused_unchanged "prepare --output of ${#X} characters" "--output's file .* 4095" ./fsdpc prepare --input "$W/s1.txt" --output "$X"
refused_unchanged "export --output of ${#X} characters" "--output's file .* 4095" ./fsdpc export --checkpoint "$P/ck" --output "$X"
Y="$X/$(long 200 i)"  # 4261 characters: no path the operating system takes
for flag in checkpoint_dir metrics_file train_data val_data resume_from_checkpoint init_from init_adapter tokenizer; do
    refused_unchanged "--$flag of ${#Y} characters refused at start-up" "^fsdpc: error: --$flag would be a path of ${#Y} characters, beyond the 4095" \
        ./fsdpc $SMALL --max_steps 1 --train_data "$W/s1.txt" --$flag "$Y"
done
# a name longer than NAME_MAX (255), given or joined (--run_name)
refused_unchanged "--checkpoint_dir with a 300-character name refused at start-up" \
    "^fsdpc: error: --checkpoint_dir would have a file or folder name of 300 characters .*NAME_MAX" \
    ./fsdpc $SMALL --max_steps 1 --train_data "$W/s1.txt" --checkpoint_dir "$W/$(long 300 j)"
refused_unchanged "--run_name of 300 characters refused at start-up" "^fsdpc: error: --run_name would have a file or folder name of 300 characters" \
    ./fsdpc $SMALL --max_steps 1 --train_data "$W/s1.txt" --checkpoint_dir "$W/ckr" --run_name "$(long 300 j)"
[ ! -e "$W/ckr" ]
check "nothing made for the refused --run_name" $?
refused_unchanged "prepare --input of ${#Y} characters" "--input would be a path of ${#Y} characters" ./fsdpc prepare --input "$Y" --output "$W/po"
refused_unchanged "export --checkpoint of ${#Y} characters" "--checkpoint would be a path of ${#Y} characters" ./fsdpc export --checkpoint "$Y" --output "$W/eo"
echo hello | ./fsdpc tokenize --tokenizer "$Y" >"$W/out" 2>"$W/err"
rc=$?
[ $rc != 0 ] && [ "$(grep -c '^fsdpc: error:' "$W/err")" = 1 ] && grep -q -- "--tokenizer would be a path of ${#Y} characters" "$W/err"
check "tokenize --tokenizer of ${#Y} characters refused" $? "(rc=$rc: $(head -c 200 "$W/err"))"
sha256sum -c --quiet "$W/inputs.sha" >/dev/null 2>&1
check "no input or earlier output changed over the whole suite" $?
