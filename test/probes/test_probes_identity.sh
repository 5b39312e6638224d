#!/usr/bin/env bash
# Issue 23, classes 10 and 12: a resume holds its inputs (tokenizer, training and validation data)
# against what its checkpoint's run read, and every rank must see the same data, tokenizer,
# checkpoint folder and resumed checkpoint; checkpoint I/O that stops waiting ends the job.
# Every refusal is one "fsdpc: error:" line naming what differs, no input is changed, nothing hangs.
cd "$(dirname "$0")/../.."
source test/lib.sh
SIZES="--hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 32 --batch_size 2 --num_tokens 0 --logging_freq 100"
SMALL="--tokenizer byte $SIZES"
export FSDPC_FAIL_AGREE_SECONDS=3
FSDPC=$PWD/fsdpc
sums() { (cd "$W" && find in -type f -not -path '*/ck/*' -not -path '*/rk/*' -print0 | sort -z | xargs -0 sha256sum); }  # the inputs
attr() {  # FILE NAME: a root attribute of a checkpoint
    /usr/bin/python3 -c "import h5py, sys; v = h5py.File(sys.argv[1])['/'].attrs.get(sys.argv[2], b''); print(v.decode() if isinstance(v, bytes) else v)" "$1" "$2"
}
cut_text() { head -c "$2" data/tinyshakespeare.txt | tail -c "$3" >"$1"; }  # FILE END LEN: a slice of the bundled text

# ---- class 10: a resume with changed inputs ----
mkdir -p "$W/in/d"
cut_text "$W/in/d/a.txt" 30000 30000
cut_text "$W/in/d/b.txt" 60000 20000
R="$SMALL --train_data $W/in/d --checkpoint_freq 2 --checkpoint_dir $W/ck --resume_from_checkpoint $W/ck"
"$FSDPC" $R --max_steps 2 >/dev/null 2>"$W/fresh.log"
rc=$?
[ $rc = 0 ] && grep -q "No checkpoint found in $W/ck, starting fresh" "$W/fresh.log" && [ -f "$W/ck/step_00000002.h5" ] &&
    attr "$W/ck/step_00000002.h5" run_inputs | grep -q '"train":{"spec":"'"$W"'/in/d","files":2,"bytes":50000,.*\["a.txt",30000,"[0-9a-f]*"\],\["b.txt",20000,'
check "the first launch with --resume_from_checkpoint on a missing folder starts fresh and records its inputs" $? "rc=$rc $(tail -c 300 "$W/fresh.log")"
mkdir "$W/empty"
"$FSDPC" $SMALL --train_data "$W/in/d" --max_steps 1 --checkpoint_dir "$W/empty" --resume_from_checkpoint "$W/empty" >/dev/null 2>"$W/empty.log"
rc=$?
[ $rc = 0 ] && grep -q "No checkpoint found in $W/empty, starting fresh" "$W/empty.log" && [ -f "$W/empty/step_00000001.h5" ]
check "... and so does one on an empty folder" $? "rc=$rc $(grep -m1 error "$W/empty.log")"
"$FSDPC" $R --max_steps 4 >/dev/null 2>"$W/same.log"
rc=$?
[ $rc = 0 ] && grep -q "Resumed from $W/ck/step_00000002.h5" "$W/same.log" && ! grep -qE "warning|Note" "$W/same.log"
check "a resume with the same inputs goes on without a word" $? "rc=$rc $(grep -m2 -E 'warning|Note|error' "$W/same.log")"

before=$(sums)
cut_text "$W/in/d/c.txt" 80000 10000
before=$(sums)
expect_error "a data file added since the checkpoint" "the training data '$W/in/d' changed since checkpoint '$W/ck/step_00000004.h5' was written: 3 files now, 2 then \(new: c.txt\); .*--allow_changed_inputs" \
    "$FSDPC" $R --max_steps 6
[ "$before" = "$(sums)" ] && [ ! -f "$W/ck/step_00000006.h5" ]
check "the refused resume changed no input and wrote nothing" $?
rm "$W/in/d/c.txt" "$W/in/d/b.txt"
before=$(sums)
expect_error "a data file removed since the checkpoint" "1 file now, 2 then \(gone: b.txt\)" "$FSDPC" $R --max_steps 6
cut_text "$W/in/d/b.txt" 60000 20000
tr 'a-z' 'b-za' <"$W/in/d/a.txt" >"$W/a.rot" && mv "$W/a.rot" "$W/in/d/a.txt"  # same size, other bytes
before=$(sums)
expect_error "a data file swapped for one of the same size" "'a.txt' has other contents now than then \(30000 bytes each; crc32 [0-9a-f]{8} now, [0-9a-f]{8} then\)" \
    "$FSDPC" $R --max_steps 6
[ "$before" = "$(sums)" ]
check "no input changed by the refusals" $?
"$FSDPC" $R --max_steps 6 --allow_changed_inputs >/dev/null 2>"$W/allow.log"
rc=$?
[ $rc = 0 ] && [ "$(grep -c "^warning: the training data '$W/in/d' changed since .*'a.txt' has other contents now than then.*going on with it (--allow_changed_inputs)" "$W/allow.log")" = 1 ] &&
    [ -f "$W/ck/step_00000006.h5" ] && ! grep -q "fsdpc: error" "$W/allow.log"
check "--allow_changed_inputs: one warning naming the change, and the run goes on" $? "rc=$rc $(grep -m2 -E 'warning|error' "$W/allow.log")"
"$FSDPC" $R --max_steps 8 >/dev/null 2>"$W/after.log"
check "after an allowed change, the checkpoints record the new inputs: the next resume goes on" $? "$(grep -m1 error "$W/after.log")"

# a checkpoint written before run_inputs existed: resumed, with one note
cp "$W/ck/step_00000008.h5" "$W/old.h5"
/usr/bin/python3 -c "import h5py, sys; del h5py.File(sys.argv[1], 'r+')['/'].attrs['run_inputs']" "$W/old.h5"
"$FSDPC" $SMALL --train_data "$W/in/d" --max_steps 9 --checkpoint_freq 0 --resume_from_checkpoint "$W/old.h5" >/dev/null 2>"$W/old.log"
rc=$?
[ $rc = 0 ] && [ "$(grep -c "^Note: checkpoint $W/old.h5 records no run inputs" "$W/old.log")" = 1 ]
check "a checkpoint without run_inputs (an older fsdpc) is resumed with one note" $? "rc=$rc $(grep -m2 -E 'Note|error' "$W/old.log")"
/usr/bin/python3 -c "import h5py, sys; h5py.File(sys.argv[1], 'r+')['/'].attrs['run_inputs'] = '{\"version\":1,\"train\":[1,2]}'" "$W/old.h5"
"$FSDPC" $SMALL --train_data "$W/in/d" --max_steps 9 --checkpoint_freq 0 --resume_from_checkpoint "$W/old.h5" >/dev/null 2>"$W/bad.log"
rc=$?
[ $rc = 0 ] && grep -q "^warning: checkpoint $W/old.h5: its run_inputs cannot be read (\"train\" is not an object)" "$W/bad.log"
check "a run_inputs fsdpc cannot read is a warning, not silence" $? "rc=$rc $(grep -m2 -E 'warning|error' "$W/bad.log")"

# the tokenizer: a swapped file is refused by name; another vocabulary too
mkdir -p "$W/in/tok"
cp test/fixtures/tokenizer/tokenizer.model "$W/in/tok/tok.model"
for i in $(seq 60); do echo "{\"text\": \"$(head -c $((i * 500)) data/tinyshakespeare.txt | tail -c 400 | tr -d '"\\\n\r')\"}"; done >"$W/in/docs.jsonl"
# no --tokenizer: a resume takes the checkpoint's, which is what the swap below tests
TR="$SIZES --train_data $W/in/docs.jsonl --data_cache_dir $W/cache --checkpoint_freq 2 --checkpoint_dir $W/tk --resume_from_checkpoint $W/tk"
"$FSDPC" $TR --tokenizer "$W/in/tok/tok.model" --max_steps 2 >/dev/null 2>"$W/tok.log"
check "a run with a SentencePiece tokenizer and JSON Lines documents" $? "$(grep -m1 error "$W/tok.log")"
cp test/fixtures/tokenizer/tokenizer.json "$W/in/tok/tok.model"  # the same vocabulary in the other format: other bytes
before=$(sums)
expect_error "a tokenizer file swapped since the checkpoint" "the tokenizer 'tok.model' \([0-9]+ bytes, crc32 [0-9a-f]{8}\) differs from the one checkpoint '$W/tk/step_00000002.h5' was trained with, 'tok.model' \(14179 bytes, crc32 [0-9a-f]{8}\)" \
    "$FSDPC" $TR --max_steps 4
[ "$before" = "$(sums)" ] && ! ls "$W/cache" 2>/dev/null | grep -q build
check "the refused tokenizer changed no input" $?
expect_error "another --vocab_size on resume" "checkpoint '$W/tk/step_00000002.h5' has vocab_size=1000 but this run has --vocab_size 1200" \
    "$FSDPC" $TR --max_steps 4 --vocab_size 1200 --allow_changed_inputs
expect_error "a tokenizer with a larger vocabulary on resume" "the tokenizer '.*' has 1000 tokens but the model's vocabulary is 256" \
    "$FSDPC" $SMALL --max_steps 4 --checkpoint_dir "$W/ck" --resume_from_checkpoint "$W/ck" --tokenizer test/fixtures/tokenizer/tokenizer.model \
    --train_data "$W/in/docs.jsonl" --data_cache_dir "$W/cache" --allow_changed_inputs
expect_error "the byte tokenizer's run resumed with a tokenizer file" "the tokenizer 'tokenizer.model' \(14179 bytes, crc32 [0-9a-f]{8}\) differs from the one checkpoint '$W/ck/step_00000008.h5' was trained with, 'byte'" \
    "$FSDPC" $SMALL --max_steps 10 --checkpoint_dir "$W/ck" --resume_from_checkpoint "$W/ck" --tokenizer test/fixtures/tokenizer/tokenizer.model

# ---- class 12: ranks that see different things (other working directories: node-local disks) ----
mkdir -p "$W/in/r0" "$W/in/r1"
cut_text "$W/in/r0/data.txt" 30000 30000
cut_text "$W/in/r1/data.txt" 30000 30000
sed -i 's/the/THE/' "$W/in/r1/data.txt"
mpmd=$W/mpmd.sh  # ARGS...: rank 0 in $W/in/r0, rank 1 in $W/in/r1, with the same flags (a script: expect_error runs it under timeout)
printf '#!/usr/bin/env bash\nexec mpirun --oversubscribe --allow-run-as-root -x FSDPC_FAIL_AGREE_SECONDS -np 1 --wdir "%s" "%s" %s "$@" : -np 1 --wdir "%s" "%s" %s "$@"\n' \
    "$W/in/r0" "$FSDPC" "$SMALL" "$W/in/r1" "$FSDPC" "$SMALL" >"$mpmd"
chmod +x "$mpmd"
before=$(sums)
expect_error "ranks reading same-named data files of different content" \
    "rank 1 sees different training data than rank 0 at 'data.txt': 'data.txt' has other contents on rank 1 than on rank 0 \(30000 bytes each.*give every rank the same files" \
    "$mpmd" --train_data data.txt --max_steps 2 --checkpoint_freq 0
mkdir -p "$W/in/r0/g" "$W/in/r1/g"
cut_text "$W/in/r0/g/a.txt" 30000 30000 && cp "$W/in/r0/g/a.txt" "$W/in/r1/g/a.txt" && cut_text "$W/in/r0/g/b.txt" 60000 30000
expect_error "a glob that matches other files on another rank" "rank 1 sees different training data than rank 0 at 'g/\*.txt': 1 file on rank 1, 2 on rank 0 \(only on rank 0: b.txt\)" \
    "$mpmd" --train_data 'g/*.txt' --max_steps 2 --checkpoint_freq 0
cut_text "$W/in/r0/val.txt" 90000 5000 && cut_text "$W/in/r1/val.txt" 95000 5000
cp "$W/in/r0/data.txt" "$W/in/r1/same.txt" && cp "$W/in/r0/data.txt" "$W/in/r0/same.txt"
expect_error "another validation file on another rank" "rank 1 sees different validation data than rank 0 at 'val.txt': 'val.txt' has other contents on rank 1" \
    "$mpmd" --train_data same.txt --val_data val.txt --max_steps 2 --checkpoint_freq 0
cp test/fixtures/tokenizer/tokenizer.model "$W/in/r0/tok.model" && cp test/fixtures/tokenizer/tokenizer.json "$W/in/r1/tok.model"
expect_error "another tokenizer file on another rank" "rank 1 sees different tokenizer files than rank 0 at '.*tok.model': 'tok.model' is [0-9]+ bytes .* on rank 1, 14179 bytes .* on rank 0" \
    "$mpmd" --tokenizer tok.model --train_data synthetic --max_steps 2 --checkpoint_freq 0
start=$SECONDS
expect_error "a relative --checkpoint_dir that is another folder on each rank (it hung the first checkpoint)" \
    "rank 1 does not see the writer lock that rank 0 just took in --checkpoint_dir 'ck' \('ck/.fsdpc-writer': No such file or directory\)" \
    "$mpmd" --train_data same.txt --max_steps 2 --checkpoint_freq 1 --checkpoint_dir ck
[ $((SECONDS - start)) -lt 30 ] && [ ! -e "$W/in/r0/ck/.fsdpc-writer" ]
check "... refused at start-up, the lock released" $? "$((SECONDS - start)) s"
(cd "$W/in/r0" && "$FSDPC" $SMALL --train_data same.txt --max_steps 2 --checkpoint_dir rk --seed 1 2>/dev/null)
(cd "$W/in/r1" && "$FSDPC" $SMALL --train_data same.txt --max_steps 2 --checkpoint_dir rk --seed 2 2>/dev/null)
before=$(sums)
expect_error "a resume folder whose newest checkpoint is another file on another rank" \
    "rank 1 sees another file than rank 0 at checkpoint 'rk/step_00000002.h5' \(rank 1: [0-9]+ bytes \(crc32 [0-9a-f]{8}.*; rank 0: [0-9]+ bytes" \
    "$mpmd" --train_data same.txt --max_steps 4 --checkpoint_freq 0 --resume_from_checkpoint rk
rm -r "$W/in/r1/rk"
expect_error "a resumed checkpoint file that one rank does not see" \
    "rank 1 sees another file than rank 0 at checkpoint 'rk/step_00000002.h5' \(rank 1: cannot read 'rk/step_00000002.h5': No such file or directory; rank 0:" \
    "$mpmd" --train_data same.txt --max_steps 4 --checkpoint_freq 0 --resume_from_checkpoint rk/step_00000002.h5
[ "$before" = "$(sums)" ]
check "no input changed by the refusals of different views" $?

# ---- checkpoint I/O that stops waiting: the collective timeout covers it ----
for rank in 1 0; do
    start=$SECONDS
    expect_error "a checkpoint write stuck on rank $rank ends the job after --collective_timeout" \
        "the checkpoint write of '$W/wd$rank/step_00000002.h5' made no progress for 3\.[0-9] s on rank 0 \(--collective_timeout 3\)" \
        $MPI -np 2 -x FSDPC_TEST_CKPT_PAUSE=2:60:$rank "$FSDPC" $SMALL --max_steps 3 --checkpoint_freq 2 --checkpoint_dir "$W/wd$rank" --collective_timeout 3
    [ $((SECONDS - start)) -lt 20 ] && [ ! -f "$W/wd$rank/step_00000002.h5" ]
    check "... within bounds ($((SECONDS - start)) s), nothing published" $?
done
"$FSDPC" $SMALL --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/wd1" >/dev/null 2>"$W/next.log"
rc=$?
[ $rc = 0 ] && [ -f "$W/wd1/step_00000002.h5" ] && [ -z "$(ls "$W/wd1" | grep tmp)" ]
check "the next run takes the folder over and clears the stuck write's partial file" $? "rc=$rc $(grep -m2 -E 'error|Removed' "$W/next.log")"

# ---- ranks started from different fsdpc builds ----
# another build: this binary with its GNU build ID changed (what a rebuilt or one-upgrade-behind
# install on another node has); rank 1 runs it
# (objcopy rewrites the file it reads when given no output: only the copy, never the binary in use)
cp "$FSDPC" "$W/fsdpc-other" && objcopy --dump-section .note.gnu.build-id="$W/id.bin" "$W/fsdpc-other" &&
    /usr/bin/python3 -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[-1] ^= 1; open(sys.argv[2], 'wb').write(b)" "$W/id.bin" "$W/id2.bin" &&
    objcopy --update-section .note.gnu.build-id="$W/id2.bin" "$W/fsdpc-other"
check "objcopy makes a copy of fsdpc with another build ID" $?
$MPI -q -np 2 bash -c 'o=$1 f=$2; shift 2; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && exec "$o" "$@"; exec "$f" "$@"' _ "$W/fsdpc-other" "$FSDPC" $SMALL --train_data synthetic --max_steps 1 --checkpoint_freq 0 \
    >/dev/null 2>"$W/build.err"
rc=$?
[ $rc = 1 ] && [ "$(grep -c '^fsdpc: error: rank 1 runs another fsdpc build than rank 0: build [0-9a-f]* (.*fsdpc-other on .*), rank 0 build [0-9a-f]* (.*/fsdpc on ' "$W/build.err")" = 1 ] &&
    [ "$(grep -c 'fsdpc: error' "$W/build.err")" = 1 ]
check "np=2, rank 1 started from another build: one error line naming both builds, exit 1" $? "rc=$rc $(head -c 400 "$W/build.err")"
