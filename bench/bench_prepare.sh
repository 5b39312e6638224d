#!/usr/bin/env bash
# make bench: `fsdpc prepare` against python3-sentencepiece on the same JSON Lines (Tiny Shakespeare
# repeated to ~4 MB, one document per paragraph), one core each: both read the lines, tokenize each
# "text" with <s> and </s> and write uint16 tokens. Prints MB/s of input and their ratio, then
# the tokenizer.json path (fsdpc's own BPE) against the tokenizer.model one (libsentencepiece).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
FSDPC=${FSDPC:-./fsdpc}
TOK=test/fixtures/tokenizer
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

/usr/bin/python3 - "$W/docs.jsonl" <<'EOF'
import json, sys
paragraphs = [p for p in open("data/tinyshakespeare.txt", encoding="utf-8").read().split("\n\n") if p.strip()]
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for _ in range(4):
        for p in paragraphs:
            f.write(json.dumps({"text": p}, ensure_ascii=False) + "\n")
EOF

# MB/s from prepare's summary line (its clock starts once the tokenizer is loaded)
fsdpc_rate() {
    "$FSDPC" prepare --input "$W/docs.jsonl" --output "$W/out" --overwrite --val_fraction 0 --tokenizer "$1" 2>&1 |
        sed -nE 's/^prepare: .* ([0-9.]+) MB\/s\)$/\1/p'
}
py=$(/usr/bin/python3 - "$TOK/tokenizer.model" "$W/docs.jsonl" "$W/py" <<'EOF'
import json, os, sys, time
import numpy as np
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
start = time.perf_counter()
texts = [json.loads(line)["text"] for line in open(sys.argv[2], encoding="utf-8")]
ids = sp.encode(texts, num_threads=1)
bos, eos = sp.bos_id(), sp.eos_id()
tokens = np.fromiter((t for doc in ids for t in [bos, *doc, eos]), dtype=np.uint16)
tokens.tofile(sys.argv[3])
print("%.2f" % (os.path.getsize(sys.argv[2]) / (time.perf_counter() - start) / 1e6))
EOF
)
model=$(fsdpc_rate "$TOK/tokenizer.model")
json=$(fsdpc_rate "$TOK/tokenizer.json")
echo "prepare, $(($(stat -c %s "$W/docs.jsonl") / 1000000)) MB of JSON Lines, one core, the 1000-piece fixture tokenizer:"
awk -v a="$model" -v b="$py" 'BEGIN { printf "prepare/sentencepiece-python: %.2fx (fsdpc %s MB/s, python %s MB/s)\n", a / b, a, b }'
awk -v a="$json" -v b="$model" 'BEGIN { printf "prepare tokenizer.json/tokenizer.model: %.2fx (fsdpc BPE %s MB/s, libsentencepiece %s MB/s)\n", a / b, a, b }'
