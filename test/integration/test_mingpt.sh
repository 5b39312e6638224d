#!/usr/bin/env bash
# minGPT end to end against the PyTorch reference (test/ref/gpt_ref.py): a tiny model trained 30 steps;
# its greedy continuation from the checkpoint alone (KV cache, no model flags) equals the
# reference's, also through minimal_fsdp's --max_epochs -1 --restart_checkpoint_file spelling;
# `fsdpc export` writes a GPT2LMHeadModel directory (Conv1D (in, out) weights, lm_head tied to wte)
# whose logits in the reference equal the checkpoint's, and copies a GPT-2 tokenizer under
# Hugging Face's names. recipes.md's minimal_fsdp lines run as written on minimal_fsdp-shaped
# GPT-2 ids (vocabulary 50257): without a tokenizer --prompt is refused at start-up and the sample
# after training skipped; an evaluation takes --tokenizer without training data.
cd "$(dirname "$0")/../.."
source test/lib.sh
set -f  # globs such as train_*.bin go to fsdpc as written
PY=/usr/bin/python3
PREFIX="mingpt: "

# A scene of the bundled text (ROMEO and BENVOLIO, 16 lines) repeated: 30 steps learn it well
# enough for varied greedy text. On the whole corpus 30 steps stop at single-byte frequencies,
# whose greedy continuation is only spaces, which would not exercise the KV cache.
awk '/^ROMEO:$/ && !n { n = 1 } n && n++ <= 16' data/tinyshakespeare.txt >"$W/scene.txt"
for _ in $(seq 60); do cat "$W/scene.txt"; done >"$W/corpus.txt"
[ "$(wc -l <"$W/scene.txt")" = 16 ]
check "a training text from the bundled tinyshakespeare" $?

./fsdpc --recipe_defaults none --tokenizer byte --model mingpt --embed_size 64 --num_layers 2 --num_heads 4 --seq_len 64 --batch_size 8 --max_steps 30 \
    --lr 1e-2 --warmup 5 --train_data "$W/corpus.txt" --checkpoint_dir "$W/ck" --num_tokens 0 --checkpoint_freq 30 \
    --metrics_file "$W/train.jsonl" >/dev/null 2>"$W/train.log"
rc=$?
CK=$W/ck/step_00000030.h5
first=$(losses "$W/train.jsonl" | head -1)
last=$(losses "$W/train.jsonl" | tail -1)
[ $rc = 0 ] && [ -f "$CK" ] && awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a - 1)}'
check "train a tiny minGPT 30 steps (loss $first -> $last)" $? "rc=$rc $(grep -m3 error "$W/train.log")"
[ "$($PY -c 'import h5py, sys; print(h5py.File(sys.argv[1], "r").attrs["model_type"].decode())' "$CK")" = mingpt ]
check "the checkpoint's model_type attribute says mingpt" $?

# prompt + continuation (6 + 40 bytes) stay inside the 64-token context: no refill of the window
PROMPT="ROMEO:"
./fsdpc --max_steps 0 --resume_from_checkpoint "$W/ck" --prompt "$PROMPT" --num_tokens 40 --temperature 0 \
    >"$W/fsdpc.txt" 2>"$W/gen.log"
check "greedy generation from the checkpoint alone (no model flags)" $? "$(grep -m3 error "$W/gen.log")"
$PY test/ref/gpt_ref.py greedy "$CK" "$PROMPT" 40 "$W/ref.txt"
cmp -s "$W/fsdpc.txt" "$W/ref.txt"
check "fsdpc's greedy continuation (KV cache) equals the reference's (full forwards, float64)" $? \
    "fsdpc: $(od -c "$W/fsdpc.txt" | head -3 | tr '\n' '|') ref: $(od -c "$W/ref.txt" | head -3 | tr '\n' '|')"
distinct=$(tail -c 40 "$W/fsdpc.txt" | od -An -v -tx1 | tr ' ' '\n' | grep . | sort -u | wc -l)
[ "$(wc -c <"$W/fsdpc.txt")" = 46 ] && [ "$distinct" -ge 5 ]
check "the continuation is 40 bytes of varied text ($distinct distinct bytes), not a run of one" $?
./fsdpc --recipe_defaults none --max_epochs -1 --restart_checkpoint_file "$CK" --prompt "$PROMPT" --num_tokens 20 --temperature 0 \
    >"$W/restart.txt" 2>"$W/restart.log"
rc=$?
[ $rc = 0 ] && cmp -s "$W/restart.txt" <(head -c 26 "$W/ref.txt")
check "--max_epochs -1 --restart_checkpoint_file prints the same continuation" $? \
    "rc=$rc $(grep -m2 error "$W/restart.log") got: $(od -c "$W/restart.txt" | head -2 | tr '\n' '|')"
expect_error "a checkpoint of the other family" "holds a mingpt model but this run has --model_type llama_v2" \
    ./fsdpc --model_type llama_v2 --max_steps 0 --resume_from_checkpoint "$W/ck" --prompt "$PROMPT" --num_tokens 5

# ---- export as GPT2LMHeadModel ----
./fsdpc export --checkpoint "$W/ck" --output "$W/hf" --dtype fp32 >/dev/null 2>"$W/export.log"
rc=$?
[ $rc = 0 ] && [ -f "$W/hf/model.safetensors" ] && [ -f "$W/hf/config.json" ] && [ -f "$W/hf/generation_config.json" ] &&
    [ "$(ls "$W/hf" | wc -l)" = 3 ]
check "export (fp32): model.safetensors, config.json, generation_config.json; no tokenizer files for bytes" $? \
    "rc=$rc $(tail -c 300 "$W/export.log") $(ls "$W/hf" | tr '\n' ' ')"
$PY test/ref/gpt_ref.py hf "$W/hf" "$CK" --tol 1e-5 >"$W/hf.out" 2>&1
check "the export read by hand in the Conv1D layout: every tensor bit for bit, logits equal, config.json right ($(grep -o 'max rel err [^ ]*' "$W/hf.out"))" \
    $? "$(tail -c 400 "$W/hf.out")"
$PY - "$W/hf/model.safetensors" <<'EOF'
# names and shapes as transformers' GPT2LMHeadModel has them: Conv1D (in, out), no lm_head
import sys
sys.path.insert(0, "test/ref")
from hf_read import read_header
h, _ = read_header(sys.argv[1])
D, F, V, T = 64, 256, 256, 64
want = {"transformer.wte.weight": [V, D], "transformer.wpe.weight": [T, D], "transformer.ln_f.weight": [D],
        "transformer.ln_f.bias": [D]}
for l in range(2):
    p = f"transformer.h.{l}."
    want.update({p + "ln_1.weight": [D], p + "ln_1.bias": [D], p + "attn.c_attn.weight": [D, 3 * D],
                 p + "attn.c_attn.bias": [3 * D], p + "attn.c_proj.weight": [D, D], p + "attn.c_proj.bias": [D],
                 p + "ln_2.weight": [D], p + "ln_2.bias": [D], p + "mlp.c_fc.weight": [D, F], p + "mlp.c_fc.bias": [F],
                 p + "mlp.c_proj.weight": [F, D], p + "mlp.c_proj.bias": [D]})
got = {k: v["shape"] for k, v in h.items()}
sys.exit(0 if got == want else f"got {got}")
EOF
check "safetensors names and shapes are GPT2LMHeadModel's (c_fc (D, F), mlp.c_proj (F, D), no lm_head)" $?
./fsdpc export --checkpoint "$CK" --output "$W/hf_sh" --max_shard_size 100000 >/dev/null 2>"$W/export_sh.log" &&
    [ -f "$W/hf_sh/model.safetensors.index.json" ] && [ "$(ls "$W/hf_sh" | grep -c '^model-0000[0-9]-of-0000[0-9].safetensors$')" -ge 3 ] &&
    $PY test/ref/gpt_ref.py hf "$W/hf_sh" "$CK" --tol 1e-2 >"$W/hf_sh.out" 2>&1
ok=$?  # before the message's $(...), which would set $? again
check "export bf16 in shards with an index: logits within bf16 rounding ($(grep -o 'max rel err [^ ]*' "$W/hf_sh.out"))" $ok \
    "$(tail -c 300 "$W/export_sh.log") $(tail -c 300 "$W/hf_sh.out")"

# ---- a GPT-2 tokenizer travels with the export: a tiny encoder.json + vocab.bpe (256 bytes, 2 merges) ----
mkdir "$W/tok"
$PY - "$W/tok" <<'EOF'
import json, sys
d = sys.argv[1]
# byte-level BPE spells bytes as characters: printable Latin-1 as itself, the rest from U+0100 up
shown = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
enc, extra = {}, 0
for b in range(256):
    enc[chr(b) if b in shown else chr(0x100 + extra)] = b
    extra += b not in shown
enc.update({"th": 256, "\u0120th": 257, "<|endoftext|>": 258})
json.dump(enc, open(d + "/encoder.json", "w"))
open(d + "/vocab.bpe", "w", encoding="utf-8").write("#version: 0.2\nt h\n\u0120 th\n")
EOF
./fsdpc prepare --tokenizer "$W/tok" --input "$W/corpus.txt" --output "$W/tokdata" --val_fraction 0.05 >/dev/null 2>"$W/prep.log" &&
    ./fsdpc --recipe_defaults none --model mingpt --embed_size 32 --num_layers 1 --num_heads 2 --seq_len 32 --batch_size 2 --max_steps 2 \
        --tokenizer "$W/tok" --train_data "$W/tokdata/train_*.bin" --checkpoint_dir "$W/ckt" --num_tokens 0 --checkpoint_freq 2 >/dev/null 2>"$W/tt.log" &&
    ./fsdpc export --checkpoint "$W/ckt" --output "$W/hft" --dtype fp32 >/dev/null 2>"$W/export_t.log"
check "a minGPT on GPT-2 BPE tokens (vocabulary 259) trains and exports" $? \
    "$(tail -c 200 "$W/prep.log") $(grep -m2 error "$W/tt.log") $(tail -c 200 "$W/export_t.log")"
cmp -s "$W/tok/encoder.json" "$W/hft/vocab.json" && cmp -s "$W/tok/vocab.bpe" "$W/hft/merges.txt" && [ "$(ls "$W/hft" | wc -l)" = 5 ]
check "export copies encoder.json + vocab.bpe as Hugging Face's vocab.json + merges.txt" $? "$(ls "$W/hft" | tr '\n' ' ')"
$PY test/ref/gpt_ref.py hf "$W/hft" "$W/ckt/step_00000002.h5" --tol 1e-5 >"$W/hft.out" 2>&1
check "that export's logits, tensors and config.json (bos/eos = <|endoftext|> 258)" $? "$(tail -c 400 "$W/hft.out")"
[ "$(printf 'the thing\n' | ./fsdpc tokenize --tokenizer "$W/hft" 2>&1)" = "$(printf 'the thing\n' | ./fsdpc tokenize --tokenizer "$W/tok" 2>&1)" ]
check "the exported directory tokenizes as the original tokenizer does" $?
rm "$W/tok/vocab.bpe"
expect_error "export: the checkpoint's GPT-2 merges are gone" "tokenizer '$W/tok/encoder.json' is a byte-level BPE vocabulary, and its merges .* are gone" \
    ./fsdpc export --checkpoint "$W/ckt" --output "$W/hft_gone"
[ ! -e "$W/hft_gone" ]
check "a tokenizer without its merges stops export before it writes anything" $?

# minimal_fsdp's own command lines, unchanged: its HDF5 samples (dataset input_ids, rows of
# seq_len + 1 tokens), mpiexec -n 2, --run_name, then --max_epochs -1 --restart_checkpoint_file
$PY - "$W" <<'EOF2'
import sys, h5py, numpy as np
w = sys.argv[1]
b = np.frombuffer(open("data/tinyshakespeare.txt", "rb").read()[:70000], dtype=np.uint8).astype(np.uint16)
rows = np.stack([b[i:i + 129] for i in range(0, len(b) - 129, 128)])
with h5py.File(w + "/train.h5", "w") as f: f["input_ids"] = rows[:-40]
with h5py.File(w + "/validation.h5", "w") as f: f["input_ids"] = rows[-40:]
with h5py.File(w + "/w256.h5", "w") as f: f["input_ids"] = np.stack([b[i:i + 256] for i in range(0, 2560, 256)])
EOF2
MF="--model mingpt --embed_size 128 --num_layers 4 --num_heads 4 --seq_len 128 --dropout 0.1 --vocab_size 256"
$MPI -np 2 ./fsdpc $MF --max_epochs 1 --batch_size 16 --train_data "$W/train.h5" --val_data "$W/validation.h5" \
    --run_name test --checkpoint_dir "$W/mf" --num_tokens 0 >"$W/mf.log" 2>&1
rc=$?
last=$(ls "$W/mf/test" 2>/dev/null | tail -1)
[ $rc = 0 ] && [ "$last" = step_00000016.h5 ] && grep -q "^Batch 16 Loss" "$W/mf.log"
check "mpiexec -n 2 minimal_fsdp flags: one epoch of its HDF5 samples (506 rows / 32 a step = 16 steps) into checkpoint_dir/run_name" $? \
    "rc=$rc last=$last $(grep -m1 error "$W/mf.log")"
$MPI -np 2 ./fsdpc $MF --max_epochs -1 --restart_checkpoint_file "$W/mf/test/$last" --val_data "$W/validation.h5" \
    --prompt "ROMEO:" --num_tokens 30 --checkpoint_dir "$W/mf2" >"$W/mf_gen.out" 2>"$W/mf_gen.err"
rc=$?
[ $rc = 0 ] && grep -q "Resumed from $W/mf/test/$last" "$W/mf_gen.err" && grep -q "Validation loss" "$W/mf_gen.err" && [ "$(head -c 6 "$W/mf_gen.out")" = "ROMEO:" ] &&
    [ "$(wc -c <"$W/mf_gen.out")" -ge 36 ] && [ -z "$(ls "$W/mf2" 2>/dev/null)" ]
check "--max_epochs -1 --restart_checkpoint_file evaluates, then generates, and trains nothing" $? \
    "rc=$rc $(grep -m2 -E 'Validation|error' "$W/mf_gen.err") out=$(head -c 60 "$W/mf_gen.out")"
expect_error "minimal_fsdp's 256-wide rows at --seq_length 256" "row.*256.*use --max_context_width 255" \
    ./fsdpc --model mingpt --embed_size 32 --num_layers 1 --num_heads 2 --seq_length 256 --train_data "$W/w256.h5" --max_steps 1

# ---- minimal_fsdp's own data: GPT-2 ids (vocabulary 50257) in uint16 rows of 256, no attributes ----
# A byte-level BPE of GPT-2's size (the 256 bytes, 50000 merges, <|endoftext|>), made up here since
# GPT-2's own files need the network, kept as openai-community/gpt2 in a Hugging Face cache
hub=$W/hf/hub/models--openai-community--gpt2
mkdir -p "$hub/snapshots/0" "$hub/refs" "$W/mfg"
echo 0 >"$hub/refs/main"
export HF_HOME=$W/hf
$PY - "$hub/snapshots/0" <<'EOF2'
import json, string, sys
d = sys.argv[1]
shown = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
ch, extra = {}, 0
for b in range(256):
    ch[b] = chr(b) if b in shown else chr(0x100 + extra)
    extra += b not in shown
enc = {ch[b]: b for b in range(256)}
# merges over the letters and the space's stand-in: every pair, then pairs + a letter
sym = [ch[b] for b in string.ascii_letters.encode()] + [ch[0x20]]
merges = [(a, b) for a in sym for b in sym]
merges += [(a + b, c) for a in sym for b in sym for c in sym][:50000 - len(merges)]
for a, b in merges:
    enc[a + b] = len(enc)
enc["<|endoftext|>"] = len(enc)
json.dump(enc, open(d + "/vocab.json", "w"))
open(d + "/merges.txt", "w", encoding="utf-8").write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
EOF2
head -c 120000 data/tinyshakespeare.txt | ./fsdpc tokenize --tokenizer openai-community/gpt2 >"$W/gpt2_ids.txt" 2>"$W/gpt2_tok.log" &&
    $PY - "$W/gpt2_ids.txt" "$W/mfg" <<'EOF2'
# as minimal_fsdp's tokenization_ex.ipynb writes them: dataset input_ids, uint16, rows of 256
import sys, h5py, numpy as np
ids = np.array([int(t) for line in open(sys.argv[1]) for t in line.split()], np.uint16)
rows = ids[:len(ids) // 256 * 256].reshape(-1, 256)
assert rows.max() > 40000 and len(rows) >= 80
with h5py.File(sys.argv[2] + "/train.h5", "w") as f: f.create_dataset("input_ids", data=rows[:64], dtype=np.uint16)
with h5py.File(sys.argv[2] + "/validation.h5", "w") as f: f.create_dataset("input_ids", data=rows[64:80], dtype=np.uint16)
EOF2
check "a made-up GPT-2-sized tokenizer (50257) in the hub cache; minimal_fsdp-shaped .h5 files of its ids" $? "$(tail -c 300 "$W/gpt2_tok.log")"

# recipes.md's migration lines, as written there (mpiexec and ./fsdpc point at this build)
TRAIN_LINE=$(grep -o '`mpiexec -n 2 ./fsdpc --model mingpt [^`]*`' docs/recipes.md | tr -d '`')
GEN_TAIL=$(grep -o '`\.\.\. --max_epochs -1 --restart_checkpoint_file checkpoints/test/step_[0-9]*\.h5 [^`]*`' docs/recipes.md | tr -d '`')
[ -n "$TRAIN_LINE" ] && [ -n "$GEN_TAIL" ]
check "docs/recipes.md has the minimal_fsdp migration lines" $?
FS=$PWD/fsdpc
cat >"$W/docs_line.sh" <<EOF2
cd "$W/mfg" && eval "\${1/#mpiexec -n 2 .\/fsdpc/$MPI -np 2 $FS}"
EOF2
docs_line() { bash "$W/docs_line.sh" "$1"; }  # runs a docs line in $W/mfg
docs_line "${TRAIN_LINE% --vocab_size 50257} --recipe_defaults none --tokenizer byte --checkpoint_dir ck_old" >"$W/mfg_old.out" 2>"$W/mfg_old.err"
rc=$?
# a rank's own batch: each rank that reads such an id says so (comm_fail_local)
[ $rc != 0 ] && ! grep '^fsdpc: error:' "$W/mfg_old.err" | grep -vq "^fsdpc: error: step 1: sample [0-9]*: data file 'train.h5' holds token id [0-9]* in sample (row) [0-9]*, position [0-9]* of dataset '/input_ids', not in \[0, --vocab_size 256); the file records no vocabulary: for GPT-2's ids (minimal_fsdp's data) pass --vocab_size 50257, or --tokenizer" &&
    grep -q '^fsdpc: error:' "$W/mfg_old.err"
check "the line with the byte vocabulary (--tokenizer byte, no recipe defaults) stops at step 1, saying to pass --vocab_size 50257 (or --tokenizer)" $? "rc=$rc $(grep -m1 error "$W/mfg_old.err")"
docs_line "${TRAIN_LINE% --vocab_size 50257} --max_steps 1 --checkpoint_dir ck_mini" >"$W/mfg_rec.out" 2>"$W/mfg_rec.err"
rc=$?
[ $rc = 0 ] && grep -q "^recipe: minimal_fsdp's basic_training.py" "$W/mfg_rec.err" && grep -q " V=50257 .*precision=bf16" "$W/mfg_rec.err"
check "without --vocab_size the line takes minimal_fsdp's defaults: GPT-2's 50257 tokens, bf16" $? "rc=$rc $(grep -m2 -E 'error|^model=' "$W/mfg_rec.err")"
docs_line "$TRAIN_LINE" >"$W/mfg.out" 2>"$W/mfg.err"
rc=$?
# minimal_fsdp's batch of 10 a rank: 64 rows are 4 steps, the last checkpoint the run's
CK=checkpoints/test/$(ls "$W/mfg/checkpoints/test" 2>/dev/null | tail -1)
[ $rc = 0 ] && [ "$CK" = checkpoints/test/step_00000004.h5 ] && grep -q "^Batch 4 Loss" "$W/mfg.err" && grep -q " V=50257 " "$W/mfg.err"
check "the docs' line trains minimal_fsdp-shaped GPT-2 ids on 2 ranks (64 rows, batch 10 a rank: 4 steps, V=50257)" $? "rc=$rc $(grep -m2 error "$W/mfg.err")"
[ ! -s "$W/mfg.out" ] && [ "$(grep -c "^no sample: no tokenizer for a vocabulary of 50257 " "$W/mfg.err")" = 1 ]
check "no tokenizer: the sample after training is skipped, with one line saying why" $? "out=$(head -c 80 "$W/mfg.out")"
GEN_LINE="${TRAIN_LINE/--max_epochs 1/} ${GEN_TAIL#... }"
GEN_LINE=${GEN_LINE/checkpoints\/test\/step_00000016.h5/$CK}
expect_error "--prompt, no tokenizer given or recorded, vocabulary 50257: refused before loading" \
    "^fsdpc: error: --prompt: the model's vocabulary is 50257 tokens, not the byte tokenizer's 256, and no tokenizer was given or recorded in checkpoint '$CK': pass --tokenizer" \
    bash "$W/docs_line.sh" "${GEN_LINE% --tokenizer openai-community/gpt2}"
! grep -q "Resumed from\|Validation loss" "$W/err"
check "... before the checkpoint's weights are loaded" $?
docs_line "$GEN_LINE" >"$W/mfg_gen.out" 2>"$W/mfg_gen.err"
rc=$?
[ $rc = 0 ] && grep -q "records no tokenizer (its training data were token ids): this evaluation takes --tokenizer" "$W/mfg_gen.err" &&
    grep -q "Validation loss" "$W/mfg_gen.err" && [ "$(head -c 6 "$W/mfg_gen.out")" = "ROMEO:" ] && [ "$(wc -c <"$W/mfg_gen.out")" -gt 100 ]
check "the docs' evaluate-and-generate line with the GPT-2 tokenizer: validation, then text" $? \
    "rc=$rc $(grep -m2 error "$W/mfg_gen.err") out=$(head -c 80 "$W/mfg_gen.out")"
(cd "$W/mfg" && timeout 120 "$FS" --max_steps 0 --resume_from_checkpoint "$CK" --tokenizer openai-community/gpt2 --prompt "ROMEO:" \
    --num_tokens 20 --temperature 0 >"$W/mfg_g0.out" 2>"$W/mfg_g0.err")
rc=$?
[ $rc = 0 ] && [ "$(head -c 6 "$W/mfg_g0.out")" = "ROMEO:" ] && [ "$(wc -c <"$W/mfg_g0.out")" -gt 10 ] && ! grep -q "^training data" "$W/mfg_g0.err"
check "--max_steps 0 with --tokenizer generates from that checkpoint with no training data" $? "rc=$rc $(grep -m2 error "$W/mfg_g0.err")"
(cd "$W/mfg" && timeout 120 "$FS" --max_epochs -1 --restart_checkpoint_file "$CK" --tokenizer openai-community/gpt2 --val_data validation.h5 \
    --prompt "ROMEO:" --num_tokens 20 >"$W/mfg_e1.out" 2>"$W/mfg_e1.err")
rc=$?
[ $rc = 0 ] && grep -q "Validation loss" "$W/mfg_e1.err" && [ "$(head -c 6 "$W/mfg_e1.out")" = "ROMEO:" ] && ! grep -q "^training data" "$W/mfg_e1.err"
check "--max_epochs -1 with --tokenizer and --val_data only: validates and generates, reading no training data" $? \
    "rc=$rc $(grep -m2 error "$W/mfg_e1.err")"
expect_error "a fresh --prompt run on a 50257 vocabulary without a tokenizer: refused before training" \
    "^fsdpc: error: --prompt: the model's vocabulary is 50257 tokens, not the byte tokenizer's 256, and no tokenizer was given: pass --tokenizer" \
    ./fsdpc --model mingpt --embed_size 32 --num_layers 1 --num_heads 2 --vocab_size 50257 --max_steps 5 --prompt "ROMEO:" --checkpoint_dir "$W/ck_fresh"
! grep -q "^Batch" "$W/err" && [ ! -e "$W/ck_fresh" ]
check "... nothing trained, no checkpoint folder" $?
expect_error "evaluating a checkpoint of token ids (vocabulary 256) with a larger tokenizer" \
    "the tokenizer '.*vocab.json' has 50257 tokens but the model's vocabulary is 256 \(checkpoint '$W/mf/test/$last'\)" \
    ./fsdpc --max_steps 0 --resume_from_checkpoint "$W/mf/test/$last" --tokenizer openai-community/gpt2 --prompt "ROMEO:" --num_tokens 5
expect_error "a checkpoint that recorded a real tokenizer still refuses another one" \
    "the tokenizer .*vocab.json.* differs from the one checkpoint '$W/ckt/step_00000002.h5' was trained with" \
    ./fsdpc --max_steps 0 --resume_from_checkpoint "$W/ckt" --tokenizer openai-community/gpt2 --prompt "ROMEO:" --num_tokens 5
