#!/usr/bin/env bash
# Mistral: Llama with sliding-window attention (a query sees its own and the sliding_window - 1
# keys before it). A PyTorch-made MistralForCausalLM imports and equals the PyTorch reference
# (loss, and greedy generation from a prompt longer than the window: the KV-cache path); the
# window is a checkpoint attribute, exported back as a Mistral config; the model-level parity
# dump (logits, gradients, 5 training steps) equals the reference with the window's mask.
cd "$(dirname "$0")/../.."
source test/lib.sh
PY=/usr/bin/python3
ONE="--num_threads 1 --checkpoint_freq 0 --validation_freq 0"
PROMPT="Hello there, longer than eight"  # 30 bytes, the window 8; 30 + 24 tokens fit the context (64)
gen() {  # gen OUT CMD...: the greedy text of an fsdpc command line
    local out=$1
    shift
    "$@" --max_steps 0 --allow_random_weights --prompt "$PROMPT" --num_tokens 24 --temperature 0 $ONE >"$W/$out" 2>"$W/$out.log"
}

# a random Mistral (D=64, H=4, KV=2, F=128, L=2, T=64, window 8), V=256 so every token prints as a
# byte; the same weights as a Llama (no window) to show the window changes the answer
$PY test/ref/hf_make.py "$W/m" --vocab 256 --seed 7 --sliding_window 8
check "a Hugging Face MistralForCausalLM directory made by PyTorch" $?
mkdir -p "$W/full" && cp "$W/m/model.safetensors" "$W/full/"
$PY -c 'import json,sys; c=json.load(open(sys.argv[1])); c.update(architectures=["LlamaForCausalLM"], model_type="llama")
c.pop("sliding_window"); json.dump(c, open(sys.argv[2], "w"))' "$W/m/config.json" "$W/full/config.json"
$PY test/ref/hf_ref.py generate "$PROMPT" 24 "$W/m" "$W/ref.m" "$W/full" "$W/ref.full"
[ -s "$W/ref.m" ] && [ -s "$W/ref.full" ] && ! cmp -s "$W/ref.m" "$W/ref.full"
check "the reference's greedy text with the window differs from without it" $?

gen gen.m ./fsdpc --init_from "$W/m"
cmp -s "$W/gen.m" "$W/ref.m" && [ "$(wc -c <"$W/gen.m")" -gt 50 ]
check "imported Mistral: greedy text from a prompt longer than the window equals the PyTorch reference (KV cache)" $? \
    "$(od -c "$W/gen.m" | head -2 | tr '\n' '|') ref $(od -c "$W/ref.m" | head -2 | tr '\n' '|') $(grep -m2 error "$W/gen.m.log")"
gen gen.full ./fsdpc --init_from "$W/full"
cmp -s "$W/gen.full" "$W/ref.full"
check "the same weights as a Llama (no window) equal the reference without the window" $?
gen gen.np2 $MPI -np 2 ./fsdpc --init_from "$W/m" --sharding full-shard
cmp -s "$W/gen.np2" "$W/ref.m"
check "np=2 full-shard generates the same" $?

# the first step's loss (training forward, T=64 with a window of 8) against the reference's
head -c 257 data/tinyshakespeare.txt >"$W/four.txt"
ref_loss=$($PY test/ref/hf_ref.py loss "$W/m" "$W/four.txt")
./fsdpc --init_from "$W/m" --train_data "$W/four.txt" --max_steps 1 --batch_size 4 $ONE --metrics_file "$W/l.jsonl" \
    >/dev/null 2>"$W/l.log"
awk -v a="$(losses "$W/l.jsonl")" -v b="$ref_loss" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5) }'
ok=$?  # before the message's $(...), which would set $? again
check "imported Mistral: training loss equals the reference's ($(losses "$W/l.jsonl") vs $ref_loss)" $ok "$(grep -m2 error "$W/l.log")"

# the window in the checkpoint, and export back as MistralForCausalLM
KEEP="--max_steps 1 --lr 0 --min_lr 0 --warmup 0 --train_data synthetic --batch_size 1 --num_threads 1 --validation_freq 0 --checkpoint_freq 1"
./fsdpc --init_from "$W/m" $KEEP --checkpoint_dir "$W/k" >/dev/null 2>"$W/k.log"
$PY -c 'import h5py,sys; a=h5py.File(sys.argv[1]).attrs; sys.exit(int(a["sliding_window"]) != 8)' "$W/k/step_00000001.h5"
check "the checkpoint records sliding_window=8" $? "$(grep -m2 error "$W/k.log")"
./fsdpc export --checkpoint "$W/k/step_00000001.h5" --output "$W/exp" --dtype fp32 >/dev/null 2>"$W/x.log"
$PY -c 'import json,sys; c=json.load(open(sys.argv[1]))
sys.exit(not (c["architectures"] == ["MistralForCausalLM"] and c["model_type"] == "mistral" and c["sliding_window"] == 8
              and c["max_position_embeddings"] == 64))' "$W/exp/config.json"
check "export writes a Mistral config.json (architecture, model_type, sliding_window)" $? "$(tail -c 300 "$W/x.log")"
$PY test/ref/hf_ref.py generate "$PROMPT" 24 "$W/exp" "$W/ref.out"
gen gen.out ./fsdpc --init_from "$W/exp"
cmp -s "$W/ref.out" "$W/ref.m" && cmp -s "$W/gen.out" "$W/ref.m"
check "the export generates what the source does, in the reference and in fsdpc" $?
./fsdpc --init_from "$W/full" $KEEP --checkpoint_dir "$W/kf" >/dev/null 2>&1
./fsdpc export --checkpoint "$W/kf/step_00000001.h5" --output "$W/outf" --dtype fp32 >/dev/null 2>&1
$PY -c 'import json,sys; c=json.load(open(sys.argv[1]))
sys.exit(not (c["architectures"] == ["LlamaForCausalLM"] and c["model_type"] == "llama" and "sliding_window" not in c))' \
    "$W/outf/config.json"
check "without a window export still writes a Llama config.json (no sliding_window key)" $?

# presets, flags, resume
T="--train_data data/tinyshakespeare.txt --batch_size 2 --num_threads 1 --num_tokens 0 --logging_freq 1"
# the bundled text: training and validation data
./fsdpc --model_name mistral_tiny ${T/--train_data data\/tinyshakespeare.txt/} --max_steps 3 --validation_freq 3 \
    --validation_batches 1 --checkpoint_freq 3 --checkpoint_dir "$W/tiny" --metrics_file "$W/tiny.jsonl" >"$W/tiny.out" 2>"$W/tiny.log"
[ $? = 0 ] && [ "$(grep -c '"loss"' "$W/tiny.jsonl")" -ge 3 ] && grep -q "window=32" "$W/tiny.log" &&
    grep -q "Validation loss" "$W/tiny.log"
check "--model_name mistral_tiny (window 32 of 128) trains and validates" $? "$(grep -m2 error "$W/tiny.log")"
./fsdpc --model_name mistral_tiny $T --max_steps 4 --resume_from_checkpoint "$W/tiny" --checkpoint_dir "$W/tiny" \
    --checkpoint_freq 0 >/dev/null 2>"$W/resume.log"
check "a windowed checkpoint resumes" $? "$(grep -m2 error "$W/resume.log")"
./fsdpc $T --max_steps 4 --resume_from_checkpoint "$W/tiny/step_00000003.h5" --checkpoint_freq 0 --prompt Hi \
    --num_tokens 4 >/dev/null 2>"$W/adopt.log"
check "resuming without flags takes the window from the checkpoint" $? "$(grep -m2 error "$W/adopt.log")"
expect_error "a resume with another window" "sliding_window=32 but this run has --sliding_window 16" \
    ./fsdpc --model_name mistral_tiny --sliding_window 16 $T --max_steps 4 --resume_from_checkpoint "$W/tiny/step_00000003.h5"
expect_error "--sliding_window on minGPT" "--sliding_window 4: model_type mingpt has no sliding-window attention" \
    ./fsdpc --model_type mingpt --sliding_window 4 $T --max_steps 1
expect_error "a negative window" "--sliding_window (must be >= 0|expects a window of N >= 0)" ./fsdpc --sliding_window -1 $T --max_steps 1
./fsdpc --help 2>/dev/null | grep -q -- "--sliding_window"
check "--help lists --sliding_window" $?

# model-level parity: logits, loss, gradients and 5 AdamW steps with a window of 5 (T=16)
build/test_model --dump "$W/dump" llama_v2 --sliding_window 5 >"$W/dump.log" 2>&1
$PY -c 'import h5py,sys; sys.exit(int(h5py.File(sys.argv[1]).attrs["sliding_window"]) != 5)' "$W/dump/step_00000000.h5"
check "the parity dump has sliding_window=5" $? "$(tail -c 300 "$W/dump.log")"
$PY test/ref/parity.py "$W/dump/step_00000000.h5" | sed 's/^\(not \)\{0,1\}ok - /&windowed parity: /'

# --model_type mistral: the Llama family with MistralConfig's window (4096) and RMSNorm epsilon
# (1e-6): the same run as those two given to llama_v2, and different from llama_v2's own defaults
./fsdpc --model_type mistral $T --max_steps 2 --checkpoint_freq 0 --metrics_file "$W/mt.jsonl" >/dev/null 2>"$W/mt.log"
./fsdpc --model_type llama_v2 --sliding_window 4096 --norm_eps 1e-6 $T --max_steps 2 --checkpoint_freq 0 --metrics_file "$W/ml.jsonl" >/dev/null 2>"$W/ml.log"
./fsdpc --model_type llama_v2 $T --max_steps 2 --checkpoint_freq 0 --metrics_file "$W/m5.jsonl" >/dev/null 2>"$W/m5.log"
[ -n "$(losses "$W/mt.jsonl")" ] && [ "$(losses "$W/mt.jsonl")" = "$(losses "$W/ml.jsonl")" ] &&
    [ "$(losses "$W/mt.jsonl")" != "$(losses "$W/m5.jsonl")" ] &&
    grep -q "^--model_type mistral: the Llama family as MistralConfig builds it, sliding window 4096 and RMSNorm epsilon 1e-06" "$W/mt.log" &&
    grep -q "model=llama_v2[^ ]* .* window=4096 " "$W/mt.log"
check "--model_type mistral is llama_v2 with --sliding_window 4096 --norm_eps 1e-6 (MistralConfig's), said in one line" $? \
    "$(losses "$W/mt.jsonl") / $(losses "$W/ml.jsonl") / $(losses "$W/m5.jsonl") $(grep -m2 -E 'error|mistral' "$W/mt.log")"
# the epsilon reaches the kernels and the checkpoint: parity with the reference at a large one
build/test_model --dump "$W/dump_eps" llama_v2 --norm_eps 0.25 >"$W/dump_eps.log" 2>&1
$PY -c 'import h5py,sys; sys.exit(abs(float(h5py.File(sys.argv[1]).attrs["norm_eps"]) - 0.25) > 1e-9)' "$W/dump_eps/step_00000000.h5"
check "--norm_eps 0.25 is the checkpoint's norm_eps" $? "$(tail -c 300 "$W/dump_eps.log")"
$PY test/ref/parity.py "$W/dump_eps/step_00000000.h5" | sed 's/^\(not \)\{0,1\}ok - /&--norm_eps 0.25 parity: /'
expect_error "a resume with another epsilon" "norm_eps=1e-05 but this run has --norm_eps 1e-06" \
    ./fsdpc --model_name mistral_tiny --norm_eps 1e-6 $T --max_steps 4 --resume_from_checkpoint "$W/tiny/step_00000003.h5"
expect_error "--norm_eps 0" "--norm_eps" ./fsdpc --norm_eps 0 $T --max_steps 1
