#!/usr/bin/env bash
# GPT-NeoX (--model_type gpt_neox): forward, gradients and AdamW steps against a PyTorch reference
# written from the published architecture (test/ref/neox_ref.py); training; `fsdpc export` as
# GPTNeoXForCausalLM read back by the reference; import of that export (--init_from) and greedy
# generation (the KV cache, partial rotary at an offset) against the reference; the Hugging Face
# settings fsdpc cannot honour refused by name; --rotary_pct / --rotary_emb_base; --hidden_act's tanh
# GELU (GPT-NeoX-20B's gelu_fast) against the reference, through checkpoints, export and import.
cd "$(dirname "$0")/../.."
source test/lib.sh
PY=/usr/bin/python3
ONE="--num_threads 1 --validation_freq 0"
GEN="--max_steps 0 --allow_random_weights --prompt Hello --num_tokens 16 --temperature 0 $ONE --checkpoint_freq 0"
KEEP="--max_steps 1 --lr 0 --min_lr 0 --warmup 0 --train_data synthetic --batch_size 1 $ONE --checkpoint_freq 1"

# ---- parity: logits, loss, every gradient and 5 AdamW steps against the PyTorch reference ----
build/test_model --dump "$W/dump" gpt_neox >/dev/null 2>&1
$PY test/ref/parity.py "$W/dump/step_00000000.h5" >"$W/parity" 2>&1
grep -q "^ok - parity logits" "$W/parity" && ! grep -q "^not ok" "$W/parity" && [ "$(grep -c '^ok' "$W/parity")" -ge 30 ]
check "parity: logits, loss, 28 gradients and 5 training losses equal the PyTorch GPT-NeoX" $? "$(grep -m3 'not ok\|Error' "$W/parity" | tr '\n' '|')"

# GPT-NeoX-20B's MLP (hidden_act gelu_fast, the tanh GELU): the exact GELU is within 1e-4 of it on
# this model, so each comparison must come within 10x of torch's own fp32 noise (or 2e-6)
build/test_model --dump "$W/dump_fast" gpt_neox --hidden_act gelu_fast >/dev/null 2>&1
$PY test/ref/parity.py "$W/dump_fast/step_00000000.h5" >"$W/parity_fast" 2>&1
grep -q "^ok - parity logits" "$W/parity_fast" && ! grep -q "^not ok" "$W/parity_fast" &&
    awk '/max rel err/ { n++; e = $0; sub(/.*max rel err /, "", e); sub(/;.*/, "", e); t = $0; sub(/.*torch fp32 /, "", t)
         sub(/;.*/, "", t); lim = 10 * t; if (lim < 2e-6) lim = 2e-6; if (e + 0 > lim) { print; bad = 1 } }
         END { exit bad || n < 30 }' "$W/parity_fast" >"$W/parity_fast.bad"
check "parity, hidden_act gelu_fast: logits, loss, gradients and steps within 10x torch's fp32 noise of the reference's tanh GELU" $? \
    "$(head -3 "$W/parity_fast.bad" "$W/parity_fast" | tr '\n' '|' | head -c 400)"

# ---- training: a small NeoX (rotary_pct 0.5, base 20000 through 10.FSDP's spelling) learns ----
TRAIN="--recipe_defaults none --model_type gpt_neox --model_name neox_tiny --hidden_width 64 --num_layers 2 --num_heads 4 --max_context_width 32
    --batch_size 4 --rotary_pct 0.5 --rotary_emb_base 20000 --lr 3e-3 --warmup 2 $ONE"
./fsdpc $TRAIN --max_steps 30 --checkpoint_freq 30 --checkpoint_dir "$W/ck" --metrics_file "$W/m.jsonl" >"$W/train.log" 2>&1
first=$(losses "$W/m.jsonl" | head -1) last=$(losses "$W/m.jsonl" | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'
check "neox_tiny trains on Tiny Shakespeare (loss $first -> $last)" $?
CK=$W/ck/step_00000030.h5
$PY - "$CK" <<'PYEOF'
import sys, h5py
a = h5py.File(sys.argv[1], "r").attrs
assert a["model_type"] in (b"gpt_neox", "gpt_neox"), a["model_type"]
assert abs(float(a["rope_theta"]) - 20000) < 1e-3 and abs(float(a["rotary_pct"]) - 0.5) < 1e-7, dict(a)
PYEOF
check "the checkpoint records model_type gpt_neox, rope_theta 20000 (--rotary_emb_base) and rotary_pct 0.5" $?
# the same global batch: 2 sequences on each of 2 ranks
$MPI -np 2 ./fsdpc $TRAIN --batch_size 2 --max_steps 3 --checkpoint_freq 0 --metrics_file "$W/m2.jsonl" >/dev/null 2>&1
./fsdpc $TRAIN --max_steps 3 --checkpoint_freq 0 --metrics_file "$W/m1.jsonl" >/dev/null 2>&1
d=$(rel_diff "$W/m1.jsonl" "$W/m2.jsonl" 3 1e-4)
check "np=2 full-shard trains as np=1 does (worst relative loss difference $d)" $?
./fsdpc $TRAIN --max_steps 3 --checkpoint_freq 0 --activation_checkpoints --metrics_file "$W/mac.jsonl" >/dev/null 2>&1
d=$(rel_diff "$W/m1.jsonl" "$W/mac.jsonl" 3 1e-6)
check "--activation_checkpoints (blocks recomputed in backward) trains as without (worst relative loss difference $d)" $?

# ---- export as GPTNeoXForCausalLM, read back by the reference ----
./fsdpc export --checkpoint "$CK" --output "$W/hf" --dtype fp32 >"$W/export.log" 2>&1 &&
    $PY test/ref/neox_ref.py hf "$W/hf" "$CK" >"$W/hfcheck" 2>&1
check "export: config.json (gpt_neox, rotary_pct, rotary_emb_base, ...) and every tensor equal the checkpoint; the reference's logits on it equal the checkpoint's" $? "$(tr '\n' '|' <"$W/hfcheck" | head -c 400)"
./fsdpc --resume_from_checkpoint "$CK" $GEN >"$W/ck.gen" 2>"$W/ck.gen.log"
$PY test/ref/neox_ref.py greedy "$W/hf" Hello 16 "$W/ref.gen"
cmp -s "$W/ck.gen" "$W/ref.gen" && [ "$(wc -c <"$W/ck.gen")" -gt 5 ]
check "greedy generation (KV cache, partial rotary at each position) equals the reference's on the export" $? "$(od -c "$W/ck.gen" | head -2 | tr '\n' '|')"

# ---- import: the export loads back through --init_from ----
./fsdpc --init_from "$W/hf" $GEN >"$W/re.gen" 2>"$W/re.gen.log"
cmp -s "$W/re.gen" "$W/ck.gen"
check "an exported directory imports back (--init_from) to the same model" $? "$(tail -2 "$W/re.gen.log" | tr '\n' '|')"
./fsdpc --init_from "$W/hf" $KEEP --checkpoint_dir "$W/k" >/dev/null 2>&1 &&
    ./fsdpc export --checkpoint "$W/k/step_00000001.h5" --output "$W/hf2" --dtype fp32 >/dev/null 2>&1 &&
    $PY test/ref/hf_read.py same "$W/hf" "$W/hf2" >"$W/same" 2>&1
check "round trip: import fp32 -> export fp32 gives the source's tensors bit for bit" $? "$(head -3 "$W/same" | tr '\n' '|')"
$PY - "$W/hf/config.json" "$W/hf2/config.json" <<'PYEOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size", "rotary_pct",
        "rotary_emb_base", "layer_norm_eps", "max_position_embeddings", "model_type", "architectures")
bad = [k for k in keys if a.get(k) != b.get(k)]
assert not bad, [(k, a.get(k), b.get(k)) for k in bad]
PYEOF
check "round trip: config.json keeps its sizes, rotary_pct and rotary_emb_base" $?
# a config.json without rotary_pct / rotary_emb_base / layer_norm_eps takes GPTNeoXConfig's defaults
mkdir -p "$W/dflt" && cp "$W/hf/model.safetensors" "$W/dflt/"
$PY -c "
import json, sys
c = json.load(open('$W/hf/config.json'))
for k in ('rotary_pct', 'rotary_emb_base', 'layer_norm_eps'): c.pop(k)
json.dump(c, open('$W/dflt/config.json', 'w'))"
./fsdpc --init_from "$W/dflt" $KEEP --checkpoint_dir "$W/kd" >/dev/null 2>&1
$PY -c "
import h5py
a = h5py.File('$W/kd/step_00000001.h5', 'r').attrs
assert float(a['rotary_pct']) == 0.25 and float(a['rope_theta']) == 10000 and abs(float(a['norm_eps']) - 1e-5) < 1e-12, dict(a)"
check "config.json without rotary_pct, rotary_emb_base, layer_norm_eps: 0.25, 10000, 1e-5 (GPTNeoXConfig's defaults)" $?

# newer transformers spell them rope_theta and partial_rotary_factor (top level or in rope_parameters)
for form in top params; do
    mkdir -p "$W/new_$form" && cp "$W/hf/model.safetensors" "$W/new_$form/"
    $PY -c "
import json
c = json.load(open('$W/hf/config.json'))
theta, pct = c.pop('rotary_emb_base'), c.pop('rotary_pct')
if '$form' == 'top': c.update(rope_theta=theta, partial_rotary_factor=pct)
else: c['rope_parameters'] = {'rope_type': 'default', 'rope_theta': theta, 'partial_rotary_factor': pct}
json.dump(c, open('$W/new_$form/config.json', 'w'))"
    ./fsdpc --init_from "$W/new_$form" $GEN >"$W/new_$form.gen" 2>"$W/new_$form.log"
    cmp -s "$W/new_$form.gen" "$W/ck.gen"
    check "config.json with rope_theta and partial_rotary_factor ($form) imports the same model" $? "$(tail -1 "$W/new_$form.log")"
done

# ---- hidden_act gelu_fast (GPT-NeoX-20B's): stored in the checkpoint, exported and imported by name ----
./fsdpc $TRAIN --hidden_act gelu_fast --max_steps 3 --checkpoint_freq 3 --checkpoint_dir "$W/ckf" >"$W/trainf.log" 2>&1
CKF=$W/ckf/step_00000003.h5
$PY -c "import h5py; a = h5py.File('$CKF', 'r').attrs; assert int(a['hidden_act']) == 2, dict(a)"
check "--hidden_act gelu_fast trains and the checkpoint records it (hidden_act 2)" $? "$(tail -2 "$W/trainf.log" | tr '\n' '|')"
./fsdpc export --checkpoint "$CKF" --output "$W/hff" --dtype fp32 >/dev/null 2>&1 &&
    $PY test/ref/neox_ref.py hf "$W/hff" "$CKF" >"$W/hffcheck" 2>&1 && grep -q '"hidden_act": "gelu_fast"' "$W/hff/config.json"
check "export writes hidden_act gelu_fast, and the reference's logits on it equal the checkpoint's" $? "$(tr '\n' '|' <"$W/hffcheck" | head -c 300)"
./fsdpc --resume_from_checkpoint "$CKF" $GEN >"$W/ckf.gen" 2>/dev/null
./fsdpc --init_from "$W/hff" $GEN >"$W/hff.gen" 2>"$W/hff.gen.log"
$PY test/ref/neox_ref.py greedy "$W/hff" Hello 16 "$W/reff.gen"
cmp -s "$W/ckf.gen" "$W/reff.gen" && cmp -s "$W/hff.gen" "$W/ckf.gen"
check "greedy generation with gelu_fast: the checkpoint, its import and the reference agree" $? "$(tail -1 "$W/hff.gen.log")"
./fsdpc --resume_from_checkpoint "$CK" --rotary_pct 0.5 --hidden_act gelu $GEN >/dev/null 2>"$W/same_flags.log"
check "a resume that repeats the checkpoint's --rotary_pct and --hidden_act runs (the family is the checkpoint's)" $? \
    "$(tail -1 "$W/same_flags.log")"
expect_error "a resume with another --hidden_act" "has hidden_act gelu_fast but this run has --hidden_act gelu\b" \
    ./fsdpc --resume_from_checkpoint "$CKF" --hidden_act gelu $GEN
expect_error "--hidden_act on a family whose activation is fixed" "hidden_act applies to gpt_neox; the MLP of llama_v2" \
    ./fsdpc --model_type llama_v2 --hidden_act gelu_fast --max_steps 1
expect_error "--hidden_act of a name fsdpc does not build" "hidden_act.*relu" ./fsdpc --model_type gpt_neox --hidden_act relu --max_steps 1
./fsdpc --model_name gpt_neox_20b --hidden_width 64 --num_layers 1 --num_heads 4 --intermediate_size 128 --vocab_size 256 \
    --max_context_width 32 --batch_size 2 $ONE --max_steps 1 --checkpoint_freq 1 --checkpoint_dir "$W/ck20" >/dev/null 2>&1
$PY -c "import h5py; assert int(h5py.File('$W/ck20/step_00000001.h5', 'r').attrs['hidden_act']) == 2"
check "--model_name gpt_neox_20b is gelu_fast, as its config.json" $?

# ---- the emulated GPU (build/fsdpc_emu): the family's CUDA path (per-head split, partial rotary,
# erf GELU) against the CPU build; generation through the GPU's KV cache ----
EM="--tokenizer byte --model_type gpt_neox --hidden_width 32 --num_layers 2 --num_heads 2 --intermediate_size 64 --max_context_width 16
    --batch_size 2 --max_steps 3 --lr 3e-3 --warmup 1 --validation_freq 0 --checkpoint_freq 0 --num_threads 1 --num_tokens 0
    --train_data data/tinyshakespeare.txt"
emu() {  # emu NAME ARGS...: losses of a 3-step run into $W/NAME.jsonl
    local name=$1
    shift
    timeout 300 "$@" --metrics_file "$W/$name.jsonl" >"$W/$name.log" 2>&1
}
emu cpu ./fsdpc $EM --device cpu
emu gpu ./build/fsdpc_emu $EM --device cuda
d=$(rel_diff "$W/cpu.jsonl" "$W/gpu.jsonl" 3 1e-5) && grep -q "CPU emulation" "$W/gpu.log"
check "emulated GPU: fp32 losses equal the CPU's (worst rel diff $d)" $? "$(grep -m2 error "$W/gpu.log")"
emu cpu_bf16 ./fsdpc $EM --device cpu --precision bf16
emu gpu_bf16 ./build/fsdpc_emu $EM --device cuda --precision bf16
d=$(rel_diff "$W/cpu_bf16.jsonl" "$W/gpu_bf16.jsonl" 3 5e-3)
check "emulated GPU: bf16 tracks the CPU's bf16 (worst rel diff $d)" $? "$(grep -m2 error "$W/gpu_bf16.log")"
timeout 300 ./build/fsdpc_emu --device cuda --init_from "$W/hf" --train_data data/tinyshakespeare.txt $GEN >"$W/emu.gen" 2>"$W/emu.gen.log"
cmp -s "$W/emu.gen" "$W/ck.gen"
check "emulated GPU: greedy generation from the export equals the CPU's" $? "$(tail -1 "$W/emu.gen.log")"

# ---- Hugging Face settings fsdpc does not build, refused by name ----
bad() {  # bad NAME REGEX PYTHON-EDIT: a copy of the export whose config.json the edit changed is refused
    local name=$1 re=$2 edit=$3 dir=$W/bad.$RANDOM
    mkdir -p "$dir" && cp "$W/hf/model.safetensors" "$dir/"
    $PY -c "
import json
c = json.load(open('$W/hf/config.json'))
$edit
json.dump(c, open('$dir/config.json', 'w'))"
    expect_error "$name" "$re" ./fsdpc --init_from "$dir" $GEN
}
bad "use_parallel_residual false" "use_parallel_residual false.*GPT-NeoX" "c['use_parallel_residual'] = False"
bad "attention_bias false" "attention_bias false.*GPT-NeoX" "c['attention_bias'] = False"
bad "hidden_act relu" "hidden_act relu; fsdpc builds gelu, gelu_new, gelu_fast, gelu_pytorch_tanh" "c['hidden_act'] = 'relu'"
bad "rope_scaling linear" "rope_scaling.*linear" "c['rope_scaling'] = {'type': 'linear', 'factor': 2.0}"
bad "rope_parameters of another rope_type" "rope_parameters.*dynamic" "c['rope_parameters'] = {'rope_type': 'dynamic', 'factor': 2.0}"
bad "a GPTNeoX model_type with another architecture" "describes a.*GPTNeoXForSequenceClassification" "c['architectures'] = ['GPTNeoXForSequenceClassification']"
bad "rotary_pct that rotates an odd number of dimensions" "rotary_pct.*even" "c['rotary_pct'] = 0.1875"

# ---- flags ----
expect_error "--rotary_pct on a family without partial rotary" "rotary_pct applies to .*gpt_neox" ./fsdpc --model_type llama_v2 --rotary_pct 0.5 --max_steps 1
expect_error "--rotary_pct out of range" "rotary_pct 1.5" ./fsdpc --model_type gpt_neox --model_name neox_tiny --rotary_pct 1.5 --max_steps 1
expect_error "--rotary_emb_base on minGPT" "rope_theta applies to" ./fsdpc --model_type mingpt --rotary_emb_base 500 --max_steps 1
./fsdpc plan --model_name pythia_1b --world_size 8 >"$W/plan" 2>&1
grep -q "gpt_neox" "$W/plan"
check "fsdpc plan knows the Pythia presets (pythia_1b)" $? "$(head -3 "$W/plan" | tr '\n' '|')"

# GPT-NeoX-20B's kind of tokenizer.json (byte-level BPE after an NFC normalizer, an added token for
# a run of spaces) is read: a decomposed accent and the run come out as Hugging Face makes them
# (test/integration/test_neox_tokenizer.sh compares a whole file of lines against a reference)
$PY - "$W/neox_tok.json" <<'PYEOF'
import json, sys
keep = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE]
extra = iter(range(256, 512))
ch = {b: chr(b) if b in keep else chr(next(extra)) for b in range(256)}
vocab = {"<|endoftext|>": 0, "<|padding|>": 1}
for b in range(256): vocab[ch[b]] = b + 2
vocab["\u00c3\u00a9"] = 258  # é's two bytes, spelt
vocab["\u0120\u0120"] = 259  # two spaces, spelt
added = [{"id": 0, "content": "<|endoftext|>", "special": True, "normalized": False},
         {"id": 1, "content": "<|padding|>", "special": True, "normalized": False},
         {"id": 259, "content": "  ", "special": False, "normalized": True, "lstrip": False, "rstrip": False, "single_word": False}]
level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
json.dump({"version": "1.0", "added_tokens": added, "normalizer": {"type": "NFC"}, "pre_tokenizer": level,
           "post_processor": level, "decoder": level,
           "model": {"type": "BPE", "dropout": None, "vocab": vocab, "merges": ["\u00c3 \u00a9"]}}, open(sys.argv[1], "w"))
PYEOF
got=$(printf 'e\xcc\x81  e\n' | ./fsdpc tokenize --tokenizer "$W/neox_tok.json" 2>&1)
[ "$got" = "258 259 103" ]
check "GPT-NeoX-20B's kind of tokenizer.json: NFC, then a run of spaces as its added token" $? "got '$got'"
