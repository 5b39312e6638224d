#!/usr/bin/env bash
# Checks of data/format/arrow.c (build/test_arrow dumps what it reads) against apache-arrow (JS): IPC
# streams and files that test/fixtures/make_arrow.mjs writes (string, large_string, binary, lists
# of every integer type, large_list, fixed_size_list, large_list<struct> chat messages, nulls and
# null items, several batches, an empty batch, struct and view columns around the ones read,
# dictionary-encoded strings and integer lists with every index type, deltas, a replacement and a
# dictionary two columns share, the pre-0.15 stream framing, ZSTD and LZ4_FRAME bodies) must read
# back as the rows it wrote; damaged files (cut short, lengths and metadata bytes changed,
# unsupported codec, version, endianness, types, dictionary indices outside the dictionary, a
# dictionary missing or replaced in a file) give one error line and never crash or hang. apache-arrow is fetched once
# into build/npm (npm, the registry); without it the checks print "ok - ... # SKIP reason".
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="arrow: "
T=build/test_arrow

if ! npm_fetch apache-arrow@21.2.0; then
    check "Arrow IPC reader against apache-arrow # SKIP $NPM_SKIP" 0
    exit 0
fi
FX=$W/fx
node test/fixtures/make_arrow.mjs "$FX" 2>"$W/node.log"
check "apache-arrow writes the fixtures" $? "$(head -c 300 "$W/node.log")"

# ---- the rows apache-arrow wrote ----
same() {  # same NAME EXPECTED ARGS...: build/test_arrow ARGS prints EXPECTED exactly
    local name=$1 exp=$2
    shift 2
    timeout 60 "$T" "$@" >"$W/out" 2>"$W/err"
    local rc=$?
    [ $rc = 0 ] && cmp -s "$W/out" "$exp"
    check "$name" $? "(rc=$rc $(head -c 200 "$W/err") $(diff "$W/out" "$exp" | head -4 | tr '\n' '|' | head -c 400))"
}
for f in basic.arrows basic.arrow large.arrows large.arrow fixed.arrows fixed.arrow view.arrows; do
    same "$f reads as written" "$FX/$f.expected.jsonl" "$FX/$f"
done
same "dictionary-encoded strings and integer lists in a stream (deltas, a replacement, a shared dictionary) read as their values" \
    "$FX/dict.arrows.expected.jsonl" "$FX/dict.arrows"
same "dictionary-encoded columns in a file (deltas in the footer's order) read as their values" "$FX/dict.arrow.expected.jsonl" "$FX/dict.arrow"
same "dictionary indices of every integer type (int8..int64, uint8..uint64), stream" "$FX/idx.arrows.expected.jsonl" "$FX/idx.arrows"
same "dictionary indices of every integer type, file" "$FX/idx.arrow.expected.jsonl" "$FX/idx.arrow"
same "a dictionary batch after a record batch whose indices are all null (stream)" "$FX/late-dict.arrows.expected.jsonl" "$FX/late-dict.arrows"
same "the pre-0.15 stream framing (no continuation marker)" "$FX/legacy.arrows.expected.jsonl" "$FX/legacy.arrows"
same "a stream with a schema and no batches: no rows" "$FX/empty.arrows.expected.jsonl" "$FX/empty.arrows"
same "a file with a schema and no batches: no rows" "$FX/empty.arrow.expected.jsonl" "$FX/empty.arrow"
same "selected columns come in the order asked" "$FX/basic.subset.jsonl" "$FX/basic.arrows" labels text small chat lang
same "bytes in memory (arrow_open_mem): stream" "$FX/basic.arrows.expected.jsonl" --mem "$FX/basic.arrows"
same "bytes in memory (arrow_open_mem): file" "$FX/large.arrow.expected.jsonl" --mem "$FX/large.arrow"
for tool in zstd lz4; do
    if grep -qw "$tool" "$FX/compressed.txt"; then
        same "$tool-compressed stream reads as written" "$FX/$tool.arrows.expected.jsonl" "$FX/$tool.arrows"
        same "$tool-compressed file reads as written" "$FX/$tool.arrow.expected.jsonl" "$FX/$tool.arrow"
        same "$tool-compressed dictionaries, stream" "$FX/$tool-dict.arrows.expected.jsonl" "$FX/$tool-dict.arrows"
        same "$tool-compressed dictionaries, file" "$FX/$tool-dict.arrow.expected.jsonl" "$FX/$tool-dict.arrow"
    else
        check "$tool-compressed bodies # SKIP the $tool command-line tool is not installed" 0
    fi
done

# memory: a stream whose every batch brings a replacement dictionary reads in about one batch's
# memory (a dropped dictionary's pages leave the resident set) and gives the same rows as plain
# list<int32> (build/test_arrow --bench: rows, values, a checksum, what reading kept resident)
node test/fixtures/make_arrow.mjs --bench "$W/plain.arrows" 24 && node test/fixtures/make_arrow.mjs --bench "$W/replaced.arrows" 24 dict
p=$("$T" --bench "$W/plain.arrows" input_ids 2>&1) d=$("$T" --bench "$W/replaced.arrows" input_ids 2>&1)
kib=$(echo "$d" | sed -nE 's/.* resident_kib (-?[0-9]+) .*/\1/p') size=$(($(stat -c %s "$W/replaced.arrows") / 1024))
[ "${p% resident_kib*}" = "${d% resident_kib*}" ] && [ -n "$kib" ] && [ "$kib" -lt $((size / 4)) ]
check "a replacement dictionary per batch ($size KiB stream): the plain rows, reading kept $kib KiB more resident" $? "(plain: $p; dictionary: $d)"

# ---- refusals ----
expect_error "a double column selected" "^fsdpc: error: '$FX/basic.arrows': column 'score' is double; fsdpc reads string, integer, integer-list and struct-list columns\$" \
    "$T" "$FX/basic.arrows" score
expect_error "a dictionary of doubles selected" "column 'score' is dictionary<double>; fsdpc reads dictionary-encoded columns whose values are strings" \
    "$T" "$FX/dict.arrows" score
expect_error "a dictionary inside a dictionary's values selected" "column 'nest' is dictionary<list<dictionary<string>>>; .*no dictionary inside" \
    "$T" "$FX/dict.arrow" nest
expect_error "a list of dictionary-encoded strings selected" "column 'tags' is list<dictionary<string>>;" "$T" "$FX/dict.arrows" tags
expect_error "a dictionary index past its dictionary" \
    "^fsdpc: error: '$FX/bad-dict-index.arrows' is corrupt: record batch 0, column 'cat': row 1's dictionary index 7 is outside its dictionary of 3 values\$" \
    "$T" "$FX/bad-dict-index.arrows"
expect_error "a negative dictionary index" "'$FX/bad-dict-negative.arrow' is corrupt: record batch 0, column 'cat': row 2's dictionary index -2 is negative" \
    "$T" "$FX/bad-dict-negative.arrow"
expect_error "a uint64 dictionary index past INT64_MAX" "row 1's dictionary index 9223372036854775813 is outside its dictionary of 3 values" \
    "$T" "$FX/bad-dict-uint64.arrows"
for f in bad-dict-missing.arrows bad-dict-missing.arrow; do
    expect_error "a dictionary id no dictionary batch holds ($f)" \
        "^fsdpc: error: '$FX/$f' is corrupt: column 'ids' uses dictionary id 22, but no dictionary batch with that id comes before record batch 0\$" \
        "$T" "$FX/$f"
done
expect_error "a non-null index before its dictionary batch" \
    "^fsdpc: error: '$FX/bad-dict-late.arrows' is corrupt: column 'cat' uses dictionary id 41, but no dictionary batch with that id comes before record batch 0\$" \
    "$T" "$FX/bad-dict-late.arrows"
expect_error "a replacement dictionary in a file" "'$FX/bad-dict-replace.arrow' is corrupt: dictionary batch [0-9]+ replaces dictionary 21 \(column 'word'\)" \
    "$T" "$FX/bad-dict-replace.arrow"
expect_error "two columns on one dictionary id with different value types" \
    "columns 'cat' \(dictionary<string>\) and 'ids' \(dictionary<list<int32>>\) share dictionary id 20 but not its value type" \
    "$T" "$FX/bad-dict-shared.arrows"
expect_error "a struct column selected" "column 'meta' is struct<a: int32, b: string>;" "$T" "$FX/basic.arrow" meta
expect_error "a list<list<int32>> column selected" "column 'nested' is list<list<int32>>;" "$T" "$FX/basic.arrows" text nested
expect_error "a list<float> column selected" "column 'floats' is list<float>;" "$T" "$FX/basic.arrows" floats
expect_error "a string_view column selected" "column 'sv' is string_view;" "$T" "$FX/view.arrows" sv
: >"$W/empty"
expect_error "an empty file" "^fsdpc: error: '$W/empty' is empty, not an Arrow IPC file or stream\$" "$T" "$W/empty"
printf 'PAR1 and more bytes' >"$W/par1"
expect_error "another format" "^fsdpc: error: '$W/par1' is not an Arrow IPC file or stream: it starts with neither ARROW1 nor a stream message\$" "$T" "$W/par1"
printf '\377\377\377\377\0\0\0\0' >"$W/eos"
expect_error "only an end-of-stream marker" "'$W/eos' is an empty Arrow IPC stream: it ends before its schema" "$T" "$W/eos"
expect_error "a codec the format does not define" "record batch 0 uses compression codec 7, which fsdpc does not read" "$T" "$FX/bad-codec.arrows"
expect_error "metadata version V3" "message 0 uses Arrow metadata version V3; fsdpc reads V4 and V5" "$T" "$FX/bad-version.arrows"
expect_error "a big-endian schema" "'$FX/bad-endian.arrows' holds big-endian Arrow data, which fsdpc does not read" "$T" "$FX/bad-endian.arrows"
expect_error "an unknown type before the column read" "column 'text' comes after column 'id' \\(unknown type 99\\), whose buffer layout fsdpc does not know" \
    "$T" "$FX/bad-type.arrows" text
"$T" "$FX/bad-type.arrows" input_ids >/dev/null 2>&1
[ $? = 1 ]
check "an unknown type: no column after it is read" $?

# ---- damaged files: one error line each, no crash, no hang ----
# one_error FILE: build/test_arrow exits 1 with exactly one error line naming FILE
one_error() {
    timeout 20 "$T" "$1" >/dev/null 2>"$W/err"
    local rc=$?
    [ $rc = 1 ] && [ "$(grep -c . "$W/err")" = 1 ] && grep -q "^fsdpc: error: .*'$1'" "$W/err"
}
/usr/bin/python3 - "$FX" "$W/cut" <<'EOF'
# every fixture cut at odd lengths: no message or padding ends at an odd offset, so none of them
# is a complete stream or file
import os, sys
fx, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
for f in sorted(os.listdir(fx)):
    if not f.endswith(('.arrow', '.arrows')) or f.startswith('bad-'): continue
    b = open(os.path.join(fx, f), 'rb').read()
    n = len(b)
    for c in sorted({1, 5, 9, 13, 63, n // 4 | 1, n // 2 | 1, 3 * n // 4 | 1, n - 9 | 1, n - 3 | 1, n - 1 | 1}):
        if 0 < c < n: open(os.path.join(out, '%s.%d' % (f, c)), 'wb').write(b[:c])
EOF
bad=""
n=0
for f in "$W"/cut/*; do
    n=$((n + 1))
    one_error "$f" || bad="$bad $(basename "$f"):$(head -c 150 "$W/err")"
done
[ -z "$bad" ] && [ $n -gt 100 ]
check "every fixture cut short at 7 to 11 points ($n files): one error line each" $? "$bad"
# metadata lengths and the footer's length changed
/usr/bin/python3 - "$FX" "$W/len" <<'EOF'
import os, struct, sys
fx, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
s = open(os.path.join(fx, 'basic.arrows'), 'rb').read()
f = open(os.path.join(fx, 'basic.arrow'), 'rb').read()
def put(name, b, at, fmt, v):
    b = bytearray(b); struct.pack_into(fmt, b, at, v); open(os.path.join(out, name), 'wb').write(b)
put('meta-huge.arrows', s, 4, '<i', 0x7fffffff)
put('meta-negative.arrows', s, 4, '<i', -8)
put('meta-short.arrows', s, 4, '<i', 8)
put('meta-tiny.arrows', s, 4, '<i', 2)
schema_len = struct.unpack_from('<i', s, 4)[0]
put('second-meta-huge.arrows', s, 8 + schema_len + 4, '<i', 0x7ffffff8)
put('footer-huge.arrow', f, len(f) - 10, '<i', 0x7fffffff)
put('footer-negative.arrow', f, len(f) - 10, '<i', -1)
put('footer-short.arrow', f, len(f) - 10, '<i', 16)
put('root-offset.arrows', s, 8, '<I', 0xfffffff0)
put('vtable-offset.arrows', s, 8 + struct.unpack_from('<I', s, 8)[0], '<i', -0x7ffffff0)
EOF
bad=""
for f in "$W"/len/*; do one_error "$f" || bad="$bad $(basename "$f"):$(head -c 150 "$W/err")"; done
[ -z "$bad" ]
check "metadata lengths, the footer length, a root and a vtable offset changed: one error line each" $? "$bad"

# random bytes changed in the metadata and anywhere: a file may stay valid, but the reader must
# end with rows (0) or one error line (1), never a crash or a hang
/usr/bin/python3 - "$FX" "$W/flip" <<'EOF'
import os, random, struct, sys
fx, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
rng = random.Random(7)
for f in ['basic.arrows', 'basic.arrow', 'large.arrows', 'fixed.arrow', 'view.arrows', 'zstd.arrows', 'lz4.arrow', 'legacy.arrows',
          'dict.arrows', 'dict.arrow', 'idx.arrows', 'zstd-dict.arrows', 'lz4-dict.arrow']:
    p = os.path.join(fx, f)
    if not os.path.exists(p): continue
    b = open(p, 'rb').read()
    # the metadata read first (a file's footer, a stream's schema), then anywhere in the file
    if f.endswith('.arrow'):
        flen = struct.unpack_from('<i', b, len(b) - 10)[0]
        meta = (len(b) - 10 - flen, len(b) - 10)
    elif f == 'legacy.arrows':
        meta = (4, 4 + struct.unpack_from('<i', b, 0)[0])
    else:
        meta = (8, 8 + struct.unpack_from('<i', b, 4)[0])
    for k in range(40):
        c = bytearray(b)
        span = meta if k < 20 else (0, len(b))
        for _ in range(1 + k % 3):
            at = rng.randrange(*span)
            c[at] = rng.choice([0, 0xff, 0x7f, 0x80, c[at] ^ (1 << rng.randrange(8)), rng.randrange(256)])
        open(os.path.join(out, '%s.%d' % (f, k)), 'wb').write(c)
EOF
bad=""
n=0
errs=0
for f in "$W"/flip/*; do
    n=$((n + 1))
    timeout 20 "$T" "$f" >/dev/null 2>"$W/err"
    rc=$?
    lines=$(grep -c . "$W/err")
    if [ $rc = 1 ] && [ "$lines" = 1 ] && grep -q "^fsdpc: error: .*'$f'" "$W/err"; then
        errs=$((errs + 1))
    elif [ $rc != 0 ] || [ "$lines" != 0 ]; then
        bad="$bad $(basename "$f"):rc=$rc:$(head -c 150 "$W/err")"
    fi
done
[ -z "$bad" ] && [ $n -gt 300 ]
check "random bytes changed in $n copies: rows or one error line each ($errs errors), no crash or hang" $? "$bad"
