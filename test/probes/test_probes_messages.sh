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
