#!/usr/bin/env bash
# Checks of the Parquet reader (data/format/parquet.c) through build/test_parquet: files written by
# parquet-wasm (arrow-rs) in every codec, page version, dictionary/fallback/DELTA encoding and
# row-group/page layout against the rows that wrote them; hand-built files in legacy list shapes;
# hostile files (truncated, corrupt footers and page headers, lying sizes, unsupported codecs and
# encodings): one error line each, never a crash or a hang. The npm packages are fetched once
# into build/npm; without them those checks print "ok - ... # SKIP reason".
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="parquet: "
TP=${TEST_PARQUET:-build/test_parquet}  # TEST_PARQUET: another build of it (e.g. with sanitizers)
COLS="text input_ids attention_mask labels n"

# ---- hand-built files: legacy list shapes (no download needed) ----
/usr/bin/python3 test/fixtures/make_parquet_legacy.py "$W/lg"
timeout 20 $TP "$W/lg/legacy.parquet" ids old two s >"$W/out" 2>"$W/err"
cmp -s "$W/out" "$W/lg/legacy.expected"
check "legacy lists: bare repeated int32, 2-level 'array', 'array'/'item' groups" $? "$(head -c 300 "$W/err")"
printf 'ids\tlist<int32>\tint_list\nold\tlist<int32>\tint_list\ntwo\tlist<int64>\tint_list\ns\tbinary\tstring\n' >"$W/want"
printf 'msgs\tlist<struct>\tstruct_list\nconv\tlist<struct>\tstruct_list\n' >>"$W/want"
$TP --columns "$W/lg/legacy.parquet" | cmp -s - "$W/want"
check "legacy lists: column types" $?
timeout 20 $TP "$W/lg/legacy.parquet" msgs conv >"$W/out" 2>"$W/err"
cmp -s "$W/out" "$W/lg/structs.expected"
check "legacy lists of structs: 2-level 'array' group, bare repeated group; null lists, structs, fields" $? \
    "$(head -c 300 "$W/err") $(diff "$W/out" "$W/lg/structs.expected" | head -c 300 | tr '\n' '|')"
expect_error "struct fields disagreeing on a row's elements" \
    "^fsdpc: error: '$W/lg/disagree.parquet': corrupt file: column 'conv', row group 1: its fields 'conv.from' and 'conv.value' disagree on a row's elements\$" \
    $TP "$W/lg/disagree.parquet" conv
expect_error "BIT_PACKED levels" "^fsdpc: error: '$W/lg/bitpacked.parquet': column 'ids' uses BIT_PACKED repetition levels, which fsdpc does not read\$" \
    $TP "$W/lg/bitpacked.parquet" ids
expect_error "a row group saying more rows than its chunks hold" \
    "^fsdpc: error: '$W/lg/rows4.parquet': column 'ids', row group 1, page 1: the column chunk holds fewer rows than its row group's 4\$" \
    $TP "$W/lg/rows4.parquet" ids s
expect_error "a row group saying fewer rows than its chunks hold" \
    "^fsdpc: error: '$W/lg/rows2.parquet': column 'two', row group 1, page 1: the column chunk holds more rows than its row group's 2\$" \
    $TP "$W/lg/rows2.parquet" two
: >"$W/empty"
expect_error "an empty file" "'$W/empty': not a Parquet file \\(0 bytes" $TP "$W/empty" text
printf 'text,input_ids\nhello,1 2 3\n' >"$W/csv.parquet"
expect_error "a CSV file named .parquet" "'$W/csv.parquet': not a Parquet file \\(it does not start with PAR1\\)" $TP "$W/csv.parquet" text
expect_error "a missing file" "cannot open '$W/none.parquet'" $TP "$W/none.parquet" text

# ---- parquet-wasm files ----
if ! npm_fetch parquet-wasm@0.8.0 apache-arrow@21.2.0; then
    check "parquet-wasm files # SKIP $NPM_SKIP" 0
    exit 0
fi
F=$W/fx
node test/fixtures/make_parquet.mjs "$F" >"$W/make.log" 2>&1
check "fixtures written and their layouts checked (dictionary fallback inside a chunk, row groups, pages, DELTA)" $? "$(tail -c 300 "$W/make.log")"

for v in $(cat "$F/variants.txt"); do
    for mode in "" --mem; do
        timeout 60 $TP $mode "$F/$v.parquet" $COLS >"$W/out" 2>"$W/err"
        cmp -s "$W/out" "$F/expected.txt"
        check "$v${mode:+ ($mode)}: the rows parquet-wasm wrote" $? "$(head -c 300 "$W/err"; diff "$W/out" "$F/expected.txt" | head -c 300)"
    done
done
# other selections and orders: the rows stay aligned across columns of different page layouts
/usr/bin/python3 - "$F/expected.txt" "$W/want" <<'EOF2'
import json, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
with open(sys.argv[2], "w", encoding="utf-8") as out:
    out.write(lines[0] + "\n")
    for line in lines[1:]:
        row = json.loads(line)
        out.write(json.dumps([row[3], row[4], row[0]], ensure_ascii=False, separators=(",", ":")) + "\n")
EOF2
for v in paged_v1 paged_v2; do
    timeout 60 $TP "$F/$v.parquet" labels n text >"$W/out" 2>&1
    cmp -s "$W/out" "$W/want"
    check "$v: labels, n, text in that order" $? "$(head -c 300 "$W/out")"
done

cat >"$W/want" <<'EOF'
text	string	string
input_ids	list<int32>	int_list
attention_mask	list<int8>	int_list
labels	list<int64>	int_list
n	uint32	int
score	double	other
tags	list<string>	other
EOF
$TP --columns "$F/snappy_v1.parquet" | cmp -s - "$W/want"
check "column types and kinds" $?
cat >"$W/want" <<'EOF'
i8	int8	int
u16	uint16	int
i64	int64	int
u64	uint64	int
f32	float	other
flag	boolean	other
bin	binary	string
day	date32	other
ts	timestamp	other
u8s	list<uint8>	int_list
nested	list<list<int32>>	other
point	struct	other
EOF
$TP --columns "$F/types.parquet" | cmp -s - "$W/want"
check "types: names of other columns" $? "$($TP --columns "$F/types.parquet" | tr '\n\t' '| ')"
printf 'nrows 2\n[1,1,1,1,"\\u0000\xff",[1,255]]\n[-2,65535,-2,-1,"",[]]\n' >"$W/want"
$TP "$F/types.parquet" i8 u16 i64 u64 bin u8s | cmp -s - "$W/want"
check "types: int8, uint16, int64, uint64 (wraps to int64), binary, list<uint8>" $?
printf 'nrows 0\n' >"$W/want"
timeout 20 $TP "$F/empty.parquet" $COLS | cmp -s - "$W/want"
check "an empty table: zero rows, no error" $?

# ---- refusals ----
expect_error "an unsupported codec" "^fsdpc: error: '$F/brotli.parquet': column 'input_ids' uses codec BROTLI, which fsdpc does not read\$" \
    $TP "$F/brotli.parquet" input_ids
expect_error "a double column selected" "^fsdpc: error: '$F/plain_v1.parquet': column 'score' is double; fsdpc reads strings, integers, lists of integers and lists of structs\$" \
    $TP "$F/plain_v1.parquet" text score
expect_error "a list<string> column selected" "column 'tags' is list<string>; fsdpc reads" $TP "$F/plain_v1.parquet" tags

# ---- hostile files: exactly one error line, no crash, no hang ----
src=$F/snappy_v1.parquet
size=$(stat -c %s "$src")
for cut in 3 11 100 $((size / 2)) $((size - 9)) $((size - 1)); do
    head -c $cut "$src" >"$W/cut.parquet"
    expect_error "truncated to $cut of $size bytes" "'$W/cut.parquet': (not a Parquet file|truncated)" $TP "$W/cut.parquet" $COLS
done
# the footer kept, the data before it cut: the chunks lie outside the file
/usr/bin/python3 - "$src" "$W/hole.parquet" <<'EOF'
import struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<I", b[-8:-4])[0]
open(sys.argv[2], "wb").write(b[:1000] + b[-8 - n:])
EOF
expect_error "the data before the footer cut out" "column 'text': row group 1's column chunk .* lies outside the file" $TP "$W/hole.parquet" $COLS
# footer length, magic and Thrift bytes damaged; lying page sizes (same-length varints)
/usr/bin/python3 - "$src" "$W" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
w = sys.argv[2]
n = struct.unpack("<I", b[-8:-4])[0]
def save(name, data): open("%s/%s.parquet" % (w, name), "wb").write(data)
save("biglen", b[:-8] + struct.pack("<I", 0xFFFFFF00) + b"PAR1")
save("smalllen", b[:-8] + struct.pack("<I", 10) + b"PAR1")
save("badtail", b[:-4] + b"PAR2")
f = bytearray(b)
f[-8 - n] = 0xFF  # a field header of an unknown type
save("badfield", f)
f = bytearray(b)
f[-8 - n:-8] = b"\x19" * n  # field 1 as a list, over and over: runs off the end
save("lists", f)
# the first page header (at byte 4): type, uncompressed size, compressed size, each i32 field 0x15 + varint
def lie(field, value_bytes):
    f = bytearray(b)
    p = 4
    for k in range(field):
        assert f[p] == 0x15, f[p]
        p += 1
        q = p
        while f[p] & 0x80: p += 1
        p += 1
    f[q:p] = value_bytes(p - q)
    return f
big = lambda L: b"\xfe" * (L - 1) + b"\x7f"  # the largest even same-length varint: a large positive size
save("usize", lie(2, big))
save("csize", lie(3, big))
save("negsize", lie(3, lambda L: b"\xff" * (L - 1) + b"\x7f"))  # odd: a negative size
EOF
expect_error "a footer length past the start of the file" "'$W/biglen.parquet': truncated or corrupt Parquet file: the footer length \\(4294967040 bytes\\) exceeds the file" \
    $TP "$W/biglen.parquet" $COLS
expect_error "a footer length too short" "'$W/smalllen.parquet': corrupt Parquet footer" $TP "$W/smalllen.parquet" $COLS
expect_error "a wrong magic at the end" "'$W/badtail.parquet': truncated Parquet file \\(it does not end with PAR1\\)" $TP "$W/badtail.parquet" $COLS
expect_error "a footer field of an unknown Thrift type" "'$W/badfield.parquet': corrupt Parquet footer \\(malformed Thrift data at byte 1 of" \
    $TP "$W/badfield.parquet" $COLS
expect_error "a footer of nested lists" "'$W/lists.parquet': corrupt Parquet footer" $TP "$W/lists.parquet" $COLS
expect_error "a lying uncompressed page size" "'$W/usize.parquet': column 'text', row group 1, page 1: (the page says [0-9]+ bytes uncompressed from [0-9]+ SNAPPY-compressed bytes, more than that codec produces|SNAPPY data does not decompress)" \
    $TP "$W/usize.parquet" $COLS
expect_error "a lying compressed page size" "'$W/csize.parquet': column 'text', row group 1, page 1: the page's [0-9]+ bytes run past the end of its column chunk" \
    $TP "$W/csize.parquet" $COLS
expect_error "a negative page size" "'$W/negsize.parquet': column 'text', row group 1, page 1: corrupt page header \\(a negative page size\\)" \
    $TP "$W/negsize.parquet" $COLS

# flipped bytes all over several files: a clean read or one error line, never a crash or a hang
/usr/bin/python3 - "$F" "$W/flip" <<'EOF'
import os, random, struct, sys
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
rng = random.Random(7)
k = 0
for name in ("snappy_v1", "paged_v2", "delta_v2", "fallback_v1", "gzip_v1", "lz4raw_v2"):
    b = open("%s/%s.parquet" % (src, name), "rb").read()
    n = struct.unpack("<I", b[-8:-4])[0]
    for i in range(40):
        f = bytearray(b)
        # half in the footer, half anywhere (page headers, levels, values)
        lo = len(b) - 8 - n if i % 2 else 4
        for _ in range(rng.choice((1, 1, 2, 8))):
            p = rng.randrange(lo, len(b) - 8)
            f[p] = rng.randrange(256) if rng.random() < 0.5 else f[p] ^ (1 << rng.randrange(8))
        open("%s/%03d.parquet" % (out, k), "wb").write(f)
        k += 1
EOF
bad=""
for f in "$W"/flip/*.parquet; do
    timeout 20 $TP "$f" $COLS >/dev/null 2>"$W/err"
    rc=$?
    lines=$(grep -c . "$W/err")
    if ! { [ $rc = 0 ] && [ "$lines" = 0 ]; } && ! { [ $rc = 1 ] && [ "$lines" = 1 ] && grep -q "^fsdpc: error: '$f': " "$W/err"; }; then
        bad="$bad $(basename "$f"):rc=$rc,$lines-lines"
    fi
done
check "$(ls "$W"/flip | wc -l) files with flipped bytes: a clean read or one error line each" "$([ -z "$bad" ]; echo $?)" "$bad"
