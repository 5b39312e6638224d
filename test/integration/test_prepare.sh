#!/usr/bin/env bash
# Checks of `fsdpc prepare`: round trips of text, JSON Lines ("text" and "input_ids") and gzip
# inputs through token shards, the train/validation split, shard sizes, reruns and --overwrite,
# errors; real tokenizers (<s> ids </s> per document, as python3-sentencepiece encodes them) and
# several ranks (disjoint shards, the same documents, failures on one rank ending all).
# Prints one "ok - prepare ..." / "not ok - prepare ..." line per check. FSDPC overrides the binary.
cd "$(dirname "$0")/../.."
FSDPC=${FSDPC:-./fsdpc}
source test/lib.sh
PREFIX="prepare: "

prep() { "$FSDPC" prepare "$@" 2>"$W/log"; }

# Reads shards: checks each header (magic, version, dtype, count against the file size, zero
# reserved bytes), then `bytes OUT FILES` writes the tokens as bytes, `ids FILES` prints them,
# `info FILE` prints "dtype_bytes ntokens".
cat >"$W/shards.py" <<'EOF'
import struct, sys

def read(path):
    b = open(path, "rb").read()
    magic, version, width, n = struct.unpack_from("<8sIIQ", b)
    assert magic == b"FSDPCTOK" and version == 1 and width in (2, 4), path
    assert b[24:64] == bytes(40) and len(b) == 64 + n * width, path
    return width, struct.unpack_from("<%d%s" % (n, "H" if width == 2 else "I"), b, 64)

mode, args = sys.argv[1], sys.argv[2:]
if mode == "bytes":
    toks = [t for p in args[1:] for t in read(p)[1]]
    assert all(t < 256 for t in toks)
    open(args[0], "wb").write(bytes(toks))
elif mode == "ids":
    print(" ".join(str(t) for p in args for t in read(p)[1]))
else:
    width, toks = read(args[0])
    print(width, len(toks))
EOF
shards() { /usr/bin/python3 "$W/shards.py" "$@"; }

# text round trip: one document, so the last 10% of its bytes are the validation set
{ head -c 200000 data/tinyshakespeare.txt; printf 'caf\xc3\xa9 end'; } >"$W/t.txt"
size=$(stat -c %s "$W/t.txt")
prep --input "$W/t.txt" --output "$W/text" --val_fraction 0.1
check "text file exits 0" $? "$(tail -c 300 "$W/log")"
shards bytes "$W/text.all" "$W/text"/train_*.bin "$W/text"/val_*.bin && cmp -s "$W/t.txt" "$W/text.all"
check "text: train + val shards give back the file byte for byte" $?
read -r width nval < <(shards info "$W/text/val_000000.bin")
[ "$width" = 2 ] && [ $((nval * 100 / size)) -ge 9 ] && [ $((nval * 100 / size)) -le 10 ] &&
    shards bytes "$W/text.val" "$W/text/val_000000.bin" && cmp -s "$W/text.val" <(tail -c "$nval" "$W/t.txt")
check "text: validation is the last 10% of the file, as uint16" $? "(width $width, $nval of $size tokens)"
grep -Eq "^prepare: 1 documents, $((size - nval)) train tokens in 1 shards, $nval val tokens in 1 shards -> $W/text \(0\.2 MB in [0-9.]+ s, [0-9.]+ MB/s\)\$" "$W/log"
check "summary line, with the throughput" $? "$(tail -c 200 "$W/log")"
grep -q $'\rprepare \[####################\] 100%  .* MB/s  train .* tok  val .* tok' "$W/log"
check "progress bar reaches 100%" $?
! ls "$W/text" | grep -q tmp
check "no .tmp files left" $? "$(ls "$W/text")"

# JSON Lines "text": escapes, surrogate pairs, nested values of other keys skipped, blank lines
cat >"$W/esc.jsonl" <<'EOF'
{"id": 1, "meta": {"tags": ["a", {"b": "x\"}]"}], "n": -1.5e3, "ok": true, "z": null}, "text": "caf\u00e9 \ud83d\ude00 \"q\"\n"}

{"text": "tab\there \\ slash\/ \b\f\r", "extra": [[], {}]}
  {"text":""}  
EOF
printf 'caf\xc3\xa9 \xf0\x9f\x98\x80 "q"\n\ntab\there \\ slash/ \b\f\r\n\n' >"$W/esc.want"
prep --input "$W/esc.jsonl" --output "$W/esc" --val_fraction 0
check "jsonl text exits 0" $? "$(tail -c 300 "$W/log")"
shards bytes "$W/esc.got" "$W/esc"/train_*.bin && cmp -s "$W/esc.want" "$W/esc.got"
check "jsonl text: escapes and \\u surrogate pairs decode to UTF-8, '\\n' after each document" $? \
    "$(od -c "$W/esc.got" 2>/dev/null | head -3 | tr '\n' '|')"
! ls "$W/esc" | grep -q val && grep -q '^prepare: 3 documents' "$W/log"
check "jsonl text: --val_fraction 0 writes no validation shard, 3 documents" $? "$(ls "$W/esc")"

# the same file gzipped gives the same tokens; so does a gzipped text file
gzip -c "$W/esc.jsonl" >"$W/esc.jsonl.gz"
prep --input "$W/esc.jsonl.gz" --output "$W/escgz" --val_fraction 0 &&
    cmp -s "$W/esc/train_000000.bin" "$W/escgz/train_000000.bin"
check ".jsonl.gz gives the same shard as .jsonl" $?
gzip -c "$W/t.txt" >"$W/t.txt.gz"
prep --input "$W/t.txt.gz" --output "$W/textgz" --val_fraction 0.1 &&
    cmp -s "$W/text/train_000000.bin" "$W/textgz/train_000000.bin" && cmp -s "$W/text/val_000000.bin" "$W/textgz/val_000000.bin"
check ".txt.gz gives the same shards as .txt" $?

# JSON Lines "input_ids": taken as they are, no separator; uint32 for large ids
cat >"$W/ids.jsonl" <<'EOF'
{"input_ids": [1, 2, 65535, 0], "meta": [1, 1, 1, 1]}
{"input_ids": [], "source": [-100]}
{"input_ids":[7]}
EOF
prep --input "$W/ids.jsonl" --output "$W/ids" --val_fraction 0 &&
    [ "$(shards ids "$W/ids"/train_*.bin)" = "1 2 65535 0 7" ] && [ "$(shards info "$W/ids/train_000000.bin")" = "2 5" ]
check "input_ids round trip as uint16" $? "$(shards ids "$W/ids"/train_*.bin 2>&1 | head -c 200)"
printf '{"input_ids": [5]}\n{"input_ids": [65536, 4294967295, 3]}\n' >"$W/big.jsonl"
prep --input="$W/big.jsonl" --output="$W/big" --dtype=uint32 --val_fraction=0 &&
    [ "$(shards ids "$W/big"/train_*.bin)" = "5 65536 4294967295 3" ] && [ "$(shards info "$W/big/train_000000.bin")" = "4 4" ]
check "input_ids round trip as uint32 (--flag=value form)" $? "$(shards ids "$W/big"/train_*.bin 2>&1 | head -c 200)"
expect_error "id too large for uint16 names file:line and --dtype uint32" \
    "^fsdpc: error: $W/big.jsonl:2:[0-9]+: token id 65536 does not fit --dtype uint16: pass --dtype uint32\$" \
    "$FSDPC" prepare --input "$W/big.jsonl" --output "$W/big16"
# a zstd file is read as rows (data/rows) through the pipeline the data cache uses (shards_build)
zstd -q -c "$W/ids.jsonl" >"$W/ids.jsonl.zst" && zstd -q -c "$W/big.jsonl" >"$W/big.jsonl.zst"
prep --input "$W/ids.jsonl.zst" --output "$W/idszst" --val_fraction 0 && [ "$(shards ids "$W/idszst"/train_*.bin)" = "1 2 65535 0 7" ]
check "input_ids from zstd JSON Lines (read as rows) as from plain JSON Lines" $? "$(shards ids "$W/idszst"/train_*.bin 2>&1 | head -c 200)"
expect_error "an id too large for uint16 in a file read as rows names its row and --dtype uint32" \
    "^fsdpc: error: '$W/big.jsonl.zst' row 2 holds token id 65536, outside what --dtype uint16 holds, \\[0, 65536\\): pass --dtype uint32\$" \
    "$FSDPC" prepare --input "$W/big.jsonl.zst" --output "$W/bigzst"
[ ! -e "$W/bigzst" ] || [ -z "$(ls -A "$W/bigzst")" ]
check "nothing is left of the refused file's shards" $? "$(ls -A "$W/bigzst" 2>&1 | head -c 200)"
printf '{"input_ids": [4294967296]}\n' >"$W/huge.jsonl"
expect_error "id too large for uint32" "huge.jsonl:1:[0-9]+: token id 4294967296 does not fit --dtype uint32" "$FSDPC" prepare \
    --input "$W/huge.jsonl" --output "$W/huge" --dtype uint32
printf '{"input_ids": [3, -1]}\n' >"$W/neg.jsonl"
expect_error "negative id" "neg.jsonl:1:[0-9]+: token id -1 is negative" "$FSDPC" prepare --input "$W/neg.jsonl" --output "$W/neg"
printf '{"input_ids": [3, 1.5]}\n' >"$W/frac.jsonl"
expect_error "non-integer id" "frac.jsonl:1:[0-9]+: \"input_ids\" must hold integers" "$FSDPC" prepare --input "$W/frac.jsonl" --output "$W/frac"

# several inputs after one --input and a repeated --input, in order, each a document
printf 'AB' >"$W/a.txt"
printf 'CD' >"$W/b.txt"
prep --input "$W/a.txt" "$W/b.txt" --val_fraction 0 --input "$W/ids.jsonl" --output "$W/multi" &&
    [ "$(shards ids "$W/multi"/train_*.bin)" = "65 66 67 68 1 2 65535 0 7" ] && grep -q '^prepare: 5 documents' "$W/log"
check "several inputs per --input and repeated --input, in order" $? "$(shards ids "$W/multi"/train_*.bin 2>&1 | head -c 200)"

# --shard_tokens: 750 train tokens -> 300+300+150, 250 val tokens -> one shard
head -c 1000 data/tinyshakespeare.txt >"$W/k.txt"
prep --input "$W/k.txt" --output "$W/split" --val_fraction 0.25 --shard_tokens 300 &&
    [ "$(for f in "$W/split"/*.bin; do shards info "$f" | cut -d' ' -f2; done | tr '\n' ' ')" = "300 300 150 250 " ] &&
    shards bytes "$W/split.all" "$W/split"/train_*.bin "$W/split"/val_*.bin && cmp -s "$W/k.txt" "$W/split.all"
check "--shard_tokens 300 splits 750+250 tokens into 300/300/150 + 250, concatenating to the whole" $? "$(ls "$W/split" | tr '\n' ' ')"
expect_error "a rerun into a directory holding shards, without --overwrite" \
    "^fsdpc: error: --output '$W/split' already holds shards \((train|val)_00000[0-2].bin\): pass --overwrite to replace them\$" \
    "$FSDPC" prepare --input "$W/k.txt" --output "$W/split" --val_fraction 0.25
[ "$(ls "$W/split" | tr '\n' ' ')" = "train_000000.bin train_000001.bin train_000002.bin val_000000.bin " ]
check "the refused rerun left the shards there alone" $? "$(ls "$W/split" | tr '\n' ' ')"
touch "$W/split/notes.txt" "$W/split/train_000009.bin.tmp"
prep --input "$W/k.txt" --output "$W/split" --val_fraction 0.25 --overwrite &&
    [ "$(ls "$W/split" | tr '\n' ' ')" = "notes.txt train_000000.bin val_000000.bin " ]
check "--overwrite removes the earlier run's shards (and .tmp), keeps other files" $? "$(ls "$W/split" | tr '\n' ' ')"

# many documents: each goes whole to train or validation by a hash of its index
/usr/bin/python3 -c '
import json
for i in range(2000): print(json.dumps({"text": "document %d" % i}))' >"$W/docs.jsonl"
prep --input "$W/docs.jsonl" --output "$W/docs" --val_fraction 0.1 &&
    shards bytes "$W/docs.train" "$W/docs"/train_*.bin && shards bytes "$W/docs.val" "$W/docs"/val_*.bin
check "2000 documents exit 0" $?
nv=$(wc -l <"$W/docs.val")
[ "$nv" -ge 140 ] && [ "$nv" -le 260 ] &&
    cmp -s <(sort "$W/docs.train" "$W/docs.val") <(seq 0 1999 | sed 's/^/document /' | sort)
check "documents split whole: $nv of 2000 (~10%) in validation, every document once" $?
prep --input "$W/docs.jsonl" --output "$W/docs2" --val_fraction 0.1 && cmp -s "$W/docs/val_000000.bin" "$W/docs2/val_000000.bin"
check "the document split is deterministic" $?
head -5 "$W/docs.jsonl" >"$W/few.jsonl"
prep --input "$W/few.jsonl" --output "$W/few" --val_fraction 0.001 &&
    shards bytes "$W/few.all" "$W/few"/train_*.bin "$W/few"/val_*.bin &&
    [ "$(shards info "$W/few/val_000000.bin" | cut -d' ' -f2)" = 1 ] &&
    cmp -s "$W/few.all" <(printf 'document %d\n' 0 1 2 3 4)
check "no document hashed into validation: the last one's tail goes there" $? "$(ls "$W/few" | tr '\n' ' ')"

# errors: one line, non-zero exit, nothing left behind
expect_error "unknown flag" "unknown flag '--bogus'" "$FSDPC" prepare --input "$W/t.txt" --output "$W/e" --bogus 1
expect_error "missing input file" "'$W/nope.txt' does not exist" "$FSDPC" prepare --input "$W/t.txt" "$W/nope.txt" --output "$W/e"
printf '{"text": "fine"}\n\n{"text": "a" "b"}\n' >"$W/bad.jsonl"
expect_error "malformed JSON names file:line" "^fsdpc: error: $W/bad.jsonl:3:14: malformed JSON: expected ',' or '}'\$" "$FSDPC" prepare \
    --input "$W/bad.jsonl" --output "$W/e"
printf '{"title": "x", "ids": [1]}\n' >"$W/nokey.jsonl"
expect_error "object without text or input_ids" "nokey.jsonl:1:[0-9]+: the object has no \"text\" string and no \"input_ids\" array" \
    "$FSDPC" prepare --input "$W/nokey.jsonl" --output "$W/e"
printf '{"text": "x"}\n[1]\n' >"$W/arr.jsonl"
expect_error "a line that is not an object" "arr.jsonl:2:1: malformed JSON: a line must hold one object" "$FSDPC" prepare --input "$W/arr.jsonl" --output "$W/e"
printf '{"text": "\\ud83d\\u12"}\n' >"$W/hex.jsonl"
expect_error "short \\u escape" "hex.jsonl:1:[0-9]+: malformed JSON: .u needs four hex digits" "$FSDPC" prepare --input "$W/hex.jsonl" --output "$W/e"
head -c $(($(stat -c %s "$W/t.txt.gz") / 2)) "$W/t.txt.gz" >"$W/cut.txt.gz"
expect_error "truncated gzip" "cut.txt.gz' ends in the middle of its gzip stream" "$FSDPC" prepare --input "$W/cut.txt.gz" --output "$W/e"
! ls "$W/e" 2>/dev/null | grep -q .
check "failed runs leave no shard and no .tmp" $? "$(ls "$W/e" | tr '\n' ' ')"
expect_error "no inputs" "prepare needs --input" "$FSDPC" prepare --output "$W/e"
expect_error "--input without files" "--input needs at least one file" "$FSDPC" prepare --input --output "$W/e"
expect_error "missing --output" "prepare needs --output DIR" "$FSDPC" prepare --input "$W/t.txt"
expect_error "--output without value" "--output needs a value" "$FSDPC" prepare --input "$W/t.txt" --output
expect_error "stray argument" "unexpected argument 'extra'" "$FSDPC" prepare --output "$W/e" extra --input "$W/t.txt"
expect_error "bad dtype" "--dtype must be one of uint16\\|uint32, got 'int8'" "$FSDPC" prepare --input "$W/t.txt" --output "$W/e" --dtype int8
expect_error "missing tokenizer" "^fsdpc: error: tokenizer 'llama2' does not exist\$" "$FSDPC" prepare --input "$W/t.txt" --output "$W/e" --tokenizer llama2
expect_error "bad val_fraction" "--val_fraction expects a number in \[0, 1\), got '1.5'" "$FSDPC" prepare --input "$W/t.txt" --output "$W/e" --val_fraction 1.5
expect_error "bad shard_tokens" "--shard_tokens expects a positive integer, got '0'" "$FSDPC" prepare --input "$W/t.txt" --output "$W/e" --shard_tokens 0
mkdir -p "$W/bindir" && head -c 3000 /dev/urandom >"$W/bindir/x.txt"
expect_error "a binary file in an input folder is named, not read as text" "input '$W/bindir/x.txt' is binary data" "$FSDPC" prepare --input "$W/bindir" --output "$W/e"
printf 'text\0with a NUL\n' >"$W/nul.txt"
expect_error "a NUL byte makes a .txt binary" "nul.txt' is binary data" "$FSDPC" prepare --input "$W/nul.txt" --output "$W/e"
: >"$W/empty.txt"
expect_error "an empty input is named" "empty.txt' is an empty file" "$FSDPC" prepare --input "$W/empty.txt" --output "$W/e"
expect_error "output under a file" "'$W/t.txt' is a file, not a folder \\(--output\\)" "$FSDPC" prepare --input "$W/a.txt" --output "$W/t.txt/sub"

# ---- real tokenizers: each document is <s> ids </s>, the ids python3-sentencepiece gives ----
TOK=test/fixtures/tokenizer
# docs SHARDS...: one line per document (the ids from <s>=1 to </s>=2) in the shards' order
cat >"$W/docs.py" <<'PY'
import struct, sys
toks = []
for path in sys.argv[1:]:
    b = open(path, "rb").read()
    width, n = struct.unpack_from("<4xxxxxIIQ", b)[1:]
    toks += struct.unpack_from("<%d%s" % (n, "H" if width == 2 else "I"), b, 64)
line = []
for t in toks:
    line.append(str(t))
    if t == 2: print(" ".join(line)); line = []
assert not line, "a document without </s>"
PY
docs() { /usr/bin/python3 "$W/docs.py" "$@"; }
# ref FILES...: the same from python3-sentencepiece: a JSON Lines "text" (lone surrogates as
# U+FFFD) or a whole text file is one document
cat >"$W/ref.py" <<'PY'
import json, re, sys
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file="test/fixtures/tokenizer/tokenizer.model")
for path in sys.argv[1:]:
    if path.endswith(".jsonl"):
        texts = [json.loads(l)["text"] for l in open(path, encoding="utf-8") if l.strip()]
    else:
        texts = [open(path, encoding="utf-8", newline="").read()]
    for t in texts:
        print(" ".join(map(str, [1] + sp.encode(re.sub("[\ud800-\udfff]", "\ufffd", t)) + [2])))
PY
/usr/bin/python3 - "$W" <<'PY'
import json, random, sys
r = random.Random(5)
words = open("data/tinyshakespeare.txt", encoding="utf-8").read().split()
bits = ["café", "Straße", "你好", "世界", "😀", "\u2581", "\ufffd", "  ", "    ", "\t", "\n", "\r\n", "\u3000", "１２", "0123"]
def text(n):
    return "".join(r.choice(words) + (r.choice(bits) if r.random() < 0.3 else " ") for _ in range(n))
with open(sys.argv[1] + "/mix.jsonl", "w") as f:
    for t in ["", " ", "  lead and trail  ", "a\ud800b \udfff", "\ud83d\ude00 pair", "<s> </s> <unk> literal"]:
        f.write(json.dumps({"text": t}) + "\n")
    for i in range(300):
        f.write(json.dumps({"text": text(r.randint(0, 60))}, ensure_ascii=r.random() < 0.5) + "\n")
# one text document long enough to go to libsentencepiece in parts
open(sys.argv[1] + "/long.txt", "w", encoding="utf-8", newline="").write(" " + text(6000) + "\n  end  ")
PY
/usr/bin/python3 "$W/ref.py" "$W/mix.jsonl" "$W/long.txt" >"$W/mix.want"
for kind in model json; do
    prep --input "$W/mix.jsonl" "$W/long.txt" --output "$W/tok_$kind" --tokenizer "$TOK/tokenizer.$kind" --val_fraction 0 &&
        docs "$W/tok_$kind"/train_*.bin >"$W/mix.$kind" && cmp -s "$W/mix.want" "$W/mix.$kind" &&
        [ "$(shards info "$W/tok_$kind/train_000000.bin" | cut -d' ' -f1)" = 2 ]
    st=$?
    check "tokenizer.$kind: each document is <s> + python sentencepiece's ids + </s>, as uint16 ($(wc -l <"$W/mix.want") documents)" $st \
        "$(diff "$W/mix.want" "$W/mix.$kind" 2>&1 | head -c 300)"
done
prep --input "$W/mix.jsonl" "$W/long.txt" --output "$W/tok_dir" --tokenizer "$TOK" --val_fraction 0 &&
    cmp -s "$W/tok_model/train_000000.bin" "$W/tok_dir/train_000000.bin"
check "--tokenizer DIR takes the directory's tokenizer.model" $?

# ids already tokenized must lie in the tokenizer's vocabulary
printf '{"input_ids": [1, 999, 2]}\n{"input_ids": [1, 1000]}\n' >"$W/vocab.jsonl"
expect_error "input_ids beyond the tokenizer's vocabulary name file:line" \
    "^fsdpc: error: $W/vocab.jsonl:2:[0-9]+: token id 1000 is not below the vocabulary size 1000 of --tokenizer [^ ]*$TOK/tokenizer.model\$" \
    "$FSDPC" prepare --input "$W/vocab.jsonl" --output "$W/e" --tokenizer "$TOK/tokenizer.model"

expect_error "an explicit --tokenizer byte checks input_ids too" "vocab.jsonl:1:[0-9]+: token id 999 is not below the vocabulary size 256 of --tokenizer byte" \
    "$FSDPC" prepare --input "$W/vocab.jsonl" --output "$W/e" --tokenizer byte

# a vocabulary beyond uint16: uint32 by default, --dtype uint16 refused
/usr/bin/python3 - "$W/big_vocab.json" <<'PY'
import json, sys
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
vocab.update({"<0x%02X>" % b: 3 + b for b in range(256)})
vocab.update({"\u2581": 259, "a": 260, "\u2581a": 261})
vocab.update({"w%d" % i: 262 + i for i in range(70000)})
json.dump({"model": {"type": "BPE", "byte_fallback": True, "unk_token": "<unk>", "vocab": vocab, "merges": ["\u2581 a"]},
           "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                          {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}}, open(sys.argv[1], "w"))
PY
printf '{"text": "a a"}\n' >"$W/a.jsonl"
prep --input "$W/a.jsonl" --output "$W/wide" --tokenizer "$W/big_vocab.json" --val_fraction 0 &&
    [ "$(shards ids "$W/wide"/train_*.bin)" = "1 261 261 2" ] && [ "$(shards info "$W/wide/train_000000.bin")" = "4 4" ]
check "a vocabulary of 70262 gives uint32 shards" $? "$(shards ids "$W/wide"/train_*.bin 2>&1 | head -c 200)"
expect_error "--dtype uint16 with a vocabulary beyond it" "--dtype uint16 cannot hold the ids of --tokenizer $W/big_vocab.json \\(vocabulary 70262\\): use uint32" \
    "$FSDPC" prepare --input "$W/a.jsonl" --output "$W/e" --tokenizer "$W/big_vocab.json" --dtype uint16

# ---- several ranks: disjoint shards holding the documents one rank writes ----
/usr/bin/python3 -c '
import json
for i in range(4000): print(json.dumps({"text": "document %d, %s" % (i, "word " * (i % 37))}))' >"$W/many.jsonl"
head -n 1500 "$W/many.jsonl" | gzip >"$W/many2.jsonl.gz"
inputs=("$W/many.jsonl" "$W/long.txt" "$W/many2.jsonl.gz" "$W/mix.jsonl")
prep --input "${inputs[@]}" --output "$W/np1" --tokenizer "$TOK/tokenizer.model" --val_fraction 0.2 --shard_tokens 30000
check "np=1 exits 0" $? "$(tail -c 300 "$W/log")"
$MPI -np 2 "$FSDPC" prepare --input "${inputs[@]}" --output "$W/np2" --tokenizer "$TOK/tokenizer.model" --val_fraction 0.2 \
    --shard_tokens 30000 >/dev/null 2>"$W/log2"
check "np=2 exits 0" $? "$(tail -c 300 "$W/log2")"
# a document may continue in its rank's next shard (rank r writes shards r, r+2, ...): read
# np=2's shards rank by rank
by_rank() { for r in 0 1; do ls "$1"/${2}_*.bin | awk -v r=$r '{ n = substr($0, length($0) - 9, 6) + 0; if (n % 2 == r) print }'; done; }
for split in train val; do
    cmp -s <(docs "$W/np1"/${split}_*.bin | sort) <(docs $(by_rank "$W/np2" $split) | sort)
    st=$?
    check "np=2 $split shards hold the documents of np=1's ($(docs "$W/np1"/${split}_*.bin | wc -l))" $st
done
ls "$W/np2" | grep -q '[13579]\.bin$' && ls "$W/np2" | grep -q '[02468]\.bin$' && ! ls "$W/np2" | grep -qv '^\(train\|val\)_[0-9]\{6\}\.bin$'
check "np=2: both ranks wrote shards, numbered apart (rank r: r, r+2, ...)" $? "$(ls "$W/np2" | tr '\n' ' ')"
grep -Eq '^prepare: 5807 documents, .* -> .* MB/s, all ranks\)$' "$W/log2"
check "np=2: one summary line for all ranks" $? "$(grep '^prepare:' "$W/log2")"

# a failure only one rank sees: a bad line in the second half of a JSON Lines file (rank 1's
# range, its line number counted from the file's start), or a gzip file rank 1 reads whole
{ head -n 3000 "$W/many.jsonl"; echo '{"text": oops}'; tail -n 100 "$W/many.jsonl"; } >"$W/bad.jsonl"
expect_error "np=2, bad line in rank 1's range: one error line with file:line, every rank ends" \
    "^fsdpc: error: $W/bad.jsonl:3001:10: malformed JSON: expected a value\$" \
    $MPI -np 2 "$FSDPC" prepare --input "$W/bad.jsonl" --output "$W/e2" --tokenizer "$TOK/tokenizer.model"
{ head -n 10 "$W/many.jsonl"; echo '{"txt": "x"}'; } | gzip >"$W/bad.jsonl.gz"
expect_error "np=2, a bad gzip file only rank 1 reads: one error line, every rank ends" \
    "^fsdpc: error: $W/bad.jsonl.gz:11:[0-9]+: the object has no \"text\" string" \
    $MPI -np 2 "$FSDPC" prepare --input "$W/long.txt" "$W/bad.jsonl.gz" --output "$W/e2" --tokenizer "$TOK/tokenizer.model"
! ls "$W/e2" | grep -q .
check "np=2 failures leave no shards behind (rank 0's are removed too)" $? "$(ls "$W/e2" | tr '\n' ' ')"
expect_error "np=2 rerun into np=1's output without --overwrite" "already holds shards" \
    $MPI -np 2 "$FSDPC" prepare --input "$W/many.jsonl" --output "$W/np1" --tokenizer "$TOK/tokenizer.model"
