#!/usr/bin/env bash
# Issue 39, class 9: messages that name the real cause and the fix. A checkpoint records its
# tokenizer's absolute path, so `export` run from another folder finds it; a uint64 token id above
# 2^63 - 1 is also named as the file holds it, beside the negative number it wraps to. (The stack limit
# and TMPDIR: test_probes_limits.sh; a byte-order mark: test_probes_crafted.sh.)
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="messages: "
FSDPC=$PWD/fsdpc
M="--hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 32
   --batch_size 2 --num_tokens 0 --num_threads 1 --validation_freq 0"

# a relative --tokenizer, then export from elsewhere
mkdir -p "$W/run" "$W/elsewhere"
cp test/fixtures/tokenizer/tokenizer.model "$W/run/"
(cd "$W/run" && "$FSDPC" $M --tokenizer tokenizer.model --train_data "$OLDPWD/data/tinyshakespeare.txt" --max_steps 1 \
    --checkpoint_freq 1 --checkpoint_dir ck >"$W/train.log" 2>&1)
(cd "$W/elsewhere" && "$FSDPC" export --checkpoint "$W/run/ck" --output "$W/exp" >"$W/export.log" 2>&1) &&
    cmp -s "$W/exp/tokenizer.model" test/fixtures/tokenizer/tokenizer.model
check "a relative --tokenizer is recorded whole: export from another folder copies it" $? "$(grep -m2 error "$W/train.log" "$W/export.log")"

# a uint64 token id of 2^64 - 1 in an Arrow file
if npm_fetch apache-arrow@21.2.0; then
    cat >"$W/u64.mjs" <<'EOF'
import { createRequire } from 'module';
import fs from 'fs';
const A = createRequire(import.meta.url)('apache-arrow');
const t = new A.List(new A.Field('item', new A.Uint64(), true));
const rows = [BigUint64Array.from([1n, 2n, 3n]), BigUint64Array.from([5n, 18446744073709551615n, 7n])];
fs.writeFileSync(process.argv[2], A.tableToIPC(new A.Table({ input_ids: A.vectorFromArray(rows, t) }), 'file'));
EOF
    node "$W/u64.mjs" "$W/u64.arrow"
    expect_error "a uint64 token id of 2^64 - 1 is named as the file holds it" \
        "holds token id -1 \(18446744073709551615 as an unsigned 64-bit value\), outside the vocabulary" \
        ./fsdpc $M --train_data "$W/u64.arrow" --max_steps 1 --checkpoint_freq 0
else
    echo "ok - ${PREFIX}a uint64 token id of 2^64 - 1 # SKIP $NPM_SKIP"
fi

# a world-writable checkpoint folder (no sticky bit): warned, the run goes on
mkdir -p "$W/ww" && chmod 777 "$W/ww"
./fsdpc $M --train_data data/tinyshakespeare.txt --max_steps 1 --checkpoint_freq 1 --checkpoint_dir "$W/ww" >"$W/ww.log" 2>&1 &&
    grep -q "warning: --checkpoint_dir '$W/ww' is writable by every user (mode 0777)" "$W/ww.log"
check "a world-writable --checkpoint_dir is warned about" $? "$(grep -m2 'error\|warning' "$W/ww.log")"
chmod 1777 "$W/ww" && ./fsdpc $M --train_data data/tinyshakespeare.txt --max_steps 2 --checkpoint_freq 1 --checkpoint_dir "$W/ww" \
    --resume_from_checkpoint "$W/ww" >"$W/ww2.log" 2>&1 && ! grep -q "writable by every user" "$W/ww2.log"
check "... not with the sticky bit (as /tmp)" $? "$(grep -m2 'error\|warning' "$W/ww2.log")"

# a copied binary run bare: the bundled text it looks for beside itself is named
mkdir -p "$W/bin" && cp fsdpc "$W/bin/"
(cd "$W" && expect_error "a copied binary without --train_data names the bundled text it looks for beside itself" \
    "no --train_data given, and the bundled text .* is not beside this fsdpc \('$W/bin/data/tinyshakespeare.txt'" \
    "$W/bin/fsdpc" --max_steps 1 --num_threads 1)

# a 60 KB string attribute: a string too long, not "not a string"
cp "$W/run/ck/step_00000001.h5" "$W/long.h5"
/usr/bin/python3 -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r+'); f.attrs['lineage'] = 'x' * 60000; f.close()" "$W/long.h5"
expect_error "a 60 KB string attribute is named as a string too long" "attribute 'lineage' is a string longer than the [0-9]+ bytes fsdpc keeps" \
    ./fsdpc $M --tokenizer test/fixtures/tokenizer/tokenizer.model --resume_from_checkpoint "$W/long.h5" --max_steps 2

# a folder holding an old and a new run: resuming the folder picks the run of this data; the
# refusal that follows names the other run's files to move, not the folder already given
head -c 30000 data/tinyshakespeare.txt >"$W/d1.txt"
tail -c 30000 data/tinyshakespeare.txt >"$W/d2.txt"
B="./fsdpc $M --tokenizer byte"
$B --train_data "$W/d1.txt" --max_steps 4 --checkpoint_freq 4 --checkpoint_dir "$W/two" >/dev/null 2>&1
$B --train_data "$W/d2.txt" --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/two" --overwrite_checkpoints >/dev/null 2>&1
sha256sum "$W/two"/*.h5 "$W/d2.txt" >"$W/inputs.sha"
refused_unchanged "a folder of two runs, resumed: the other run's files are named, not the folder given" \
    "^fsdpc: error: --checkpoint_dir '$W/two' holds, beside '$W/two/step_00000002.h5' \(the run this one resumes\), 1 checkpoint\(s\) of unrelated runs: run [0-9a-f]{16} \(newest step 4: step_00000004.h5\); move those runs' files out of '$W/two'" \
    $B --train_data "$W/d2.txt" --max_steps 4 --checkpoint_freq 2 --checkpoint_dir "$W/two" --resume_from_checkpoint "$W/two"
! grep -q "resume from '$W/two' instead" "$W/err"
check "that refusal does not advise resuming from the folder already given" $?
rm "$W/two/step_00000004.h5"
$B --train_data "$W/d2.txt" --max_steps 4 --checkpoint_freq 2 --checkpoint_dir "$W/two" --resume_from_checkpoint "$W/two" >"$W/two.log" 2>&1 &&
    grep -q "Resumed from $W/two/step_00000002.h5 at step 2" "$W/two.log" && [ -f "$W/two/step_00000004.h5" ]
check "with the other run's file moved out, the same command resumes and saves" $? "$(grep -m2 'error\|Resumed' "$W/two.log")"

# control characters in what an error quotes (a path, a flag's value): the error stays one line,
# each such byte written as its C escape, at np=1 and np=2
one_line() {  # one_line NAME ESCAPED CMD...: one stderr line starts with "fsdpc: error:", holds ESCAPED, and the
    local name=$1 want=$2                # stderr has no line that is the quoted text's tail
    shift 2
    timeout 60 "$@" >/dev/null 2>"$W/cc.err"
    local rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(grep -c '^fsdpc: error:' "$W/cc.err")" = 1 ] &&
        grep '^fsdpc: error:' "$W/cc.err" | grep -qF -- "$want" && ! grep -q '^TAIL' "$W/cc.err" && ! grep -q $'\x1b' "$W/cc.err"
    check "$name" $? "(rc=$rc) $(head -c 300 "$W/cc.err" | od -c | head -3 | tr '\n' '|')"
}
one_line "a newline in --train_data's path: one error line, the newline as \\n" '/no\nTAIL' \
    ./fsdpc $M --train_data "$W/no"$'\n'"TAIL" --max_steps 1
one_line "an escape sequence in --tokenizer's path: written as \\x1b" '\x1b[31mTAIL' \
    ./fsdpc $M --tokenizer "$W/t"$'\x1b'"[31mTAIL" --max_steps 1
one_line "np=2: a newline in --checkpoint_dir under a file: one error line" '\nTAIL' \
    $MPI -np 2 ./fsdpc $M --checkpoint_dir /proc/version/x$'\n'TAIL --max_steps 1 --checkpoint_freq 1
