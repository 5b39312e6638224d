#!/usr/bin/env bash
# The recipes as written: each recipe's published argument list, copied verbatim from its launch
# file, trains for two steps on 2 ranks with the model sizes scaled down by flags appended after it;
# every flag fsdpc refuses names itself in one error line; and the features built for the recipes
# behave (learning-rate schedules, validation batch, activation checkpointing, bounded all-gathers,
# shard degree, same seed, the flags that are accepted with no effect).
cd "$(dirname "$0")/../.."
source test/lib.sh
REPO=$(pwd)
FSDPC=$REPO/fsdpc
TOK=$REPO/test/fixtures/tokenizer/tokenizer.model
# appended after a recipe's list: the same spellings as the list uses, since two spellings of one
# setting that disagree are refused
SIZES="--hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 4 --max_context_width 64 --max_steps 2
       --num_threads 1 --num_tokens 0"
SMALL="$SIZES --intermediate_size 128 --logging_freq 1"
trained() {  # trained LOG: two steps logged and no error
    grep -q "^Batch 2 Loss" "$1" && ! grep -q "fsdpc: error" "$1"
}

# ---- a hub cache with what 10.FSDP's Llama-2 list names: the Llama tokenizer and C4 (en) ----
export HF_HUB_CACHE=$W/hub HF_HOME=$W/nohome FSDPC_CACHE_DIR=$W/cache
snap=$W/hub/models--hf-internal-testing--llama-tokenizer/snapshots/0123abcd
mkdir -p "$snap" "$W/hub/models--hf-internal-testing--llama-tokenizer/refs"
echo 0123abcd >"$W/hub/models--hf-internal-testing--llama-tokenizer/refs/main"
cp "$TOK" "$snap/tokenizer.model"
c4=$W/hub/datasets--allenai--c4/snapshots/0123abc
mkdir -p "$c4/en" "$W/hub/datasets--allenai--c4/refs"
echo 0123abc >"$W/hub/datasets--allenai--c4/refs/main"
/usr/bin/python3 - "$c4/en/c4-train.00000-of-01024.json.gz" <<'PY'
import gzip, json, sys
text = open("data/tinyshakespeare.txt", encoding="utf-8").read()[:60000]
with gzip.open(sys.argv[1], "wt", encoding="utf-8") as f:
    for d in text.split("\n\n"):
        if d.strip(): f.write(json.dumps({"text": d.strip() + "\n"}) + "\n")
PY
cd "$W"  # every run's checkpoints and traces stay in the scratch directory

# ---- 10.FSDP: 1.distributed-training-llama2.sbatch's TRAINING_ARGS, verbatim ----
declare -a TRAINING_ARGS=(
    --max_context_width=4096
    --num_key_value_heads=32 # 7b: 32 13b: 40 70b: 8
    --intermediate_size=11008 # 7b: 11008 13b: 13824 70b: 28672
    --hidden_width=4096 # 7b: 4096 13b: 5120 70b: 8192
    --num_layers=32 # 7b: 32 13b: 40 70b: 80
    --num_heads=32 # 7b: 32 13b: 40 70b: 64
    --model_type=llama_v2
    --tokenizer="hf-internal-testing/llama-tokenizer"
    --checkpoint_freq=5000
    --validation_freq=500
    --max_steps=5000
    --checkpoint_dir=./checkpoints
    --dataset='c4'
    --dataset_config_name='en'
    --resume_from_checkpoint=./checkpoints
    --train_batch_size=1
    --val_batch_size=1
    --sharding_strategy="full" # https://pytorch.org/docs/stable/fsdp.html
    --offload_activations=1
)
mkdir -p "$W/fsdp10"
(cd "$W/fsdp10" && $MPI -np 2 "$FSDPC" "${TRAINING_ARGS[@]}" $SMALL >log 2>&1)
trained "$W/fsdp10/log" && grep -q "sharding=full-shard" "$W/fsdp10/log" && [ -f "$W/fsdp10/checkpoints/step_00000002.h5" ] &&
    grep -q "^recipe: 10.FSDP's train.py (its flags --dataset, --train_batch_size)" "$W/fsdp10/log" &&
    grep -q "^model=llama_v2 .* V=50432 .*precision=bf16 .* lr=0.0001 min_lr=1e-05 warmup=0.0032 .*wd=0.2 .*train_data=c4" "$W/fsdp10/log"
check "10.FSDP's Llama-2 TRAINING_ARGS train what its train.py would (C4 and the Llama tokenizer from the hub cache; vocabulary 50432, bf16, lr 1e-4)" $? \
    "($(grep -m3 -E 'error|^model=|^recipe' "$W/fsdp10/log" | tr '\n' '|' | head -c 600))"
[ "$(grep -c -- '--offload_activations: no effect' "$W/fsdp10/log")" = 1 ]
check "--offload_activations=1 is accepted and its lack of effect logged once" $?

# ---- 10.FSDP's own default model: train.py without model flags is GPT-NeoX with gpt-neox-20b's
# tokenizer (model_utils/arguments.py's defaults, spelt out as its parser takes them) ----
neox=$W/hub/models--EleutherAI--gpt-neox-20b
mkdir -p "$neox/snapshots/4567cdef" "$neox/refs" && echo 4567cdef >"$neox/refs/main"
# a tokenizer.json of gpt-neox-20b's kind (NFC, byte-level BPE, <|endoftext|> 0 and <|padding|> 1)
# with a small vocabulary: the real file is not among the fixtures
/usr/bin/python3 - "$neox/snapshots/4567cdef/tokenizer.json" <<'PY'
import json, sys
keep = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE]
ch = {}
for b in range(256): ch[b] = chr(b) if b in keep else chr(256 + len([c for c in range(b) if c not in keep]))
vocab = {"<|endoftext|>": 0, "<|padding|>": 1}
for b in range(256): vocab[ch[b]] = b + 2
merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("\u0120", "a")]
for a, b in merges: vocab[a + b] = len(vocab)
special = lambda i, t: {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
json.dump({"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [special(0, "<|endoftext|>"), special(1, "<|padding|>")], "normalizer": {"type": "NFC"},
           "pre_tokenizer": level, "post_processor": level, "decoder": level,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "", "end_of_word_suffix": "",
                     "fuse_unk": False, "vocab": vocab, "merges": [a + " " + b for a, b in merges]}}, open(sys.argv[1], "w"))
PY
declare -a DEFAULT_ARGS=(
    --train_batch_size=2 --val_batch_size=4 --max_steps=5000 --seed=12345 --same_seed=0 --bf16=1 --grad_clip=1.0
    --weight_decay=0.2 --beta1=0.9 --beta2=0.95 --activation_checkpointing=1 --logging_freq=1
    --max_context_width=2048 --vocab_size=50432 --hidden_width=768 --num_layers=12 --num_heads=12
    --initializer_range=0.02 --model_type=gpt_neox --rotary_pct=0.25 --rotary_emb_base=10000
    --offload_activations=0 --activation_loading_horizon=2 --limit_all_gathers=1 --sharding_strategy=full --cpu_offload=0
    --lr=0.0001 --lr_decay_style=cosine --min_lr=1e-05 --warmup=0.0032 --plateau=0.0
    --dataset=c4 --dataset_config_name=en --tokenizer=EleutherAI/gpt-neox-20b --epochs=3 --checkpoint_freq=1000
    --validation_batches=10
)
mkdir -p "$W/fsdp10neox"
(cd "$W/fsdp10neox" && $MPI -np 2 "$FSDPC" "${DEFAULT_ARGS[@]}" $SIZES --vocab_size 512 --logging_freq 1 >log 2>&1)
trained "$W/fsdp10neox/log" && grep -q "^model=gpt_neox .* sharding=full-shard precision=bf16" "$W/fsdp10neox/log" &&
    /usr/bin/python3 -c "import h5py, sys; t = h5py.File(sys.argv[1], 'r').attrs['tokenizer']; t = t.decode() if isinstance(t, bytes) else t
assert 'models--EleutherAI--gpt-neox-20b' in t and t.endswith('tokenizer.json'), t" "$W/fsdp10neox/checkpoints/step_00000002.h5"
check "10.FSDP's defaults train GPT-NeoX (bf16, the gpt-neox-20b tokenizer.json from the hub cache, C4)" $? \
    "($(grep -m3 -E 'error|^model=|tokenizer' "$W/fsdp10neox/log" | tr '\n' '|' | head -c 600))"

# ---- each launch file's list as published, planned unscaled: the start-up line names the recipe, and
# the shape, parameter count, learning rate, precision and data are what that recipe's script builds
# (values from its parser and get_model_config, written out here) ----
planned() {  # planned NAME KEY=VALUE... -- FLAGS...: fsdpc plan --json of FLAGS, checked field by field
    local name=$1 want=()
    shift
    while [ "$1" != -- ]; do want+=("$1"); shift; done
    shift
    "$FSDPC" plan "$@" --json >"$W/plan_$name.json" 2>"$W/plan_$name.err"
    /usr/bin/python3 - "$W/plan_$name.json" "${want[@]}" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
got = dict(p["model"], **{k: v for k, v in p.items() if k != "model"})
def params(f, V, D, L, H, KV, F, T):  # each family's tensors, as its Hugging Face class holds them
    if f == "llama_v2": return 2 * V * D + L * (2 * D * D + 2 * D * (D // H) * KV + 3 * D * F + 2 * D) + D
    if f == "gpt_neox": return 2 * V * D + L * (4 * D * D + 2 * D * F + F + 9 * D) + 2 * D
    return V * D + T * D + L * (4 * D * D + 2 * D * F + F + 9 * D) + 2 * D  # minGPT: lm_head tied, learned positions
bad = []
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    if k == "num_params":
        m = p["model"]
        v = params(m["model_type"], m["vocab_size"], m["hidden_width"], m["num_layers"], m["num_heads"],
                   m["num_key_value_heads"], m["intermediate_size"], m["max_context_width"]) if v == "formula" else int(v)
    if str(got.get(k)) != str(v): bad.append(f"{k}={got.get(k)} (want {v})")
print("; ".join(bad))
sys.exit(1 if bad else 0)
PY
}
mkdir -p "$W/plans" && cd "$W/plans"  # no checkpoints here: the lists' resume folder starts fresh
out=$(planned fsdp10_llama recipe=fsdp10 model_type=llama_v2 hidden_width=4096 num_layers=32 num_heads=32 \
    num_key_value_heads=32 intermediate_size=11008 max_context_width=4096 vocab_size=50432 num_params=formula lr=0.0001 \
    precision=bf16 train_data=c4 -- "${TRAINING_ARGS[@]}")
check "plan: 10.FSDP's Llama-2 list is 10.FSDP's 7B (its vocabulary 50432, lr 1e-4, bf16, C4)" $? "$out $(head -c 300 "$W/plan_fsdp10_llama.err")"
out=$(planned fsdp10_default recipe=fsdp10 model_type=gpt_neox hidden_width=768 num_layers=12 num_heads=12 \
    num_key_value_heads=12 intermediate_size=3072 max_context_width=4096 vocab_size=50432 num_params=formula lr=0.0001 \
    precision=bf16 max_steps=5000 train_data=allenai/c4 -- --train_batch_size=2)
"$FSDPC" plan --train_batch_size=2 >"$W/plan_fsdp10.txt" 2>&1
[ -z "$out" ] && grep -q "^recipe: 10.FSDP's train.py (its flags --train_batch_size)" "$W/plan_fsdp10.txt" &&
    grep -q -- "--tokenizer EleutherAI/gpt-neox-20b" "$W/plan_fsdp10.txt" && grep -q -- "--activation_checkpoints 1" "$W/plan_fsdp10.txt"
check "plan: a 10.FSDP spelling alone takes train.py's defaults (GPT-NeoX 768x12, gpt-neox-20b's tokenizer, C4, checkpointing)" $? \
    "$out $(head -3 "$W/plan_fsdp10.txt" | tr '\n' '|' | head -c 400)"
SMP70=(--train_batch_size 4 --max_steps 100 --hidden_width 8192 --num_layers 80 --num_heads 64 --llama_intermediate_size 28672
       --shard_degree 64 --model_type llama_v2 --profile_nsys 1 --use_smp_implementation 1 --max_context_width 4096
       --tensor_parallel_degree 1 --use_synthetic_data 1 --training_dir /fsx/path_to_data --test_dir /fsx/path_to_data
       --dataset_type hf --checkpoint_dir "$W/smp70" --checkpoint_freq 100)
expect_error "SMP's launch leaves --fp8 at 1 with --use_smp_implementation 1: refused, saying to add --fp8 0" \
    "SMP v2's train_external.py trains in FP8 .*add --fp8 0" "$FSDPC" plan "${SMP70[@]}"
out=$(planned smp70 recipe=smp model_type=llama_v2 hidden_width=8192 num_layers=80 num_heads=64 num_key_value_heads=64 \
    intermediate_size=28672 max_context_width=4096 vocab_size=50432 num_params=formula lr=0.0001 precision=bf16 \
    reduce_dtype=bf16 shard_group=64 -- "${SMP70[@]}" --fp8 0 --world_size 64)
check "plan: SMP's 70b launch with --fp8 0 is SMP's model (64 key/value heads, vocabulary 50432, bf16 reductions)" $? \
    "$out $(head -c 300 "$W/plan_smp70.err")"
SMP7=(--model_type llama_v2 --hidden_width 4096 --num_layers 32 --num_heads 32 --llama_intermediate_size 11008)
out=$(planned smp7 recipe=smp num_key_value_heads=32 vocab_size=50432 num_params=formula -- "${SMP7[@]}")
out2=$(planned smp7_none recipe=none num_key_value_heads=32 vocab_size=32000 max_context_width=2048 num_params=6738415616 \
    -- "${SMP7[@]}" --recipe_defaults none)
check "plan: SMP's 7b size flags: SMP's vocabulary 50432; with --recipe_defaults none LlamaConfig's, 6738415616 parameters" $? \
    "$out | $out2"
PROF01=(--model_name=llama2_7b --load_ckpt_path=/fsx/llama2/pretrain/ckpt --save_ckpt_path=/fsx/llama2/pretrain/ckpt
        --data_path=/fsx/data/ --fsdp_activation_checkpointing=True --selective_checkpointing=1 --sharding_strategy=fsdp
        --batch_size=2 --learning_rate=3e-4 --grad_clip_thresh=4.0 --num_steps=1200 --report_interval=200
        --checkpoint_interval=20000 --use_profiler=True)
out=$(planned prof01 recipe=profiling model_type=llama_v2 num_params=6738415616 max_context_width=4096 lr=0.0003 \
    max_steps=1200 precision=bf16 sharding=full-shard -- "${PROF01[@]}")
check "plan: the profiling recipe's 01.train.sbatch list is Llama-2 7B at lr 3e-4 for 1200 steps in bf16" $? \
    "$out $(head -c 300 "$W/plan_prof01.err")"
out=$(planned mini recipe=minimal_fsdp model_type=mingpt hidden_width=768 num_layers=12 num_heads=12 intermediate_size=3072 \
    max_context_width=255 vocab_size=50257 num_params=formula lr=0.001 precision=bf16 sharding=no-shard \
    train_data=data/shakespeare/train.h5 -- --max_epochs 20 --environment pbs)
check "plan: minimal_fsdp's run_basic_training.sub flags are its GPT (768x12, MLP 3072, GPT-2's 50257 tokens, rows of 256)" $? \
    "$out $(head -c 300 "$W/plan_mini.err")"
expect_error "two recipes' spellings whose defaults differ are refused, naming both" \
    "--dataset is 10.FSDP's train.py's flag and --shard_degree is SMP v2's train_external.py's.*--recipe_defaults fsdp10\|smp\|none" \
    "$FSDPC" plan --dataset c4 --shard_degree 2
# 10.FSDP's 2.distributed-training-mixtral.sbatch, its stray ' #' words left out (refused above): MixtralConfig's
# 8 experts, 2 per token and rope_theta 1e6 (its script gives Mixtral no rotary flag), no router loss
FSDP_MIXTRAL=(--train_batch_size=4 --val_batch_size=4 --max_steps=5000 --seed=42 --bf16=1 --grad_clip=1.0 --weight_decay=0.2
    --beta1=0.9 --beta2=0.95 --activation_checkpointing=1 --intermediate_size=14336 --num_key_value_heads=8 --logging_freq=1
    --max_context_width=32768 --vocab_size=32000 --hidden_width=4096 --num_layers=32 --num_heads=32 --resid_pdrop=0.1
    --embd_pdrop=0.1 --attn_pdrop=0.1 --summary_first_pdrop=0.1 --initializer_range=0.02 --model_type="mixtral"
    --rotary_pct=0.25 --rotary_emb_base=10000 --lr=0.0001 --lr_decay_style="cosine" --min_lr=1e-5 --warmup=0.0032
    --plateau=0.0 --dataset="allenai/c4" --tokenizer="mistralai/Mixtral-8x7B-v0.1" --epochs=3 --dataset_config_name="en"
    --limit_all_gathers=1 --sharding_strategy="full" --offload_activations=1)
out=$(planned fsdp10_mixtral recipe=fsdp10 model_type=mixtral hidden_width=4096 num_layers=32 num_heads=32 num_key_value_heads=8 \
    intermediate_size=14336 max_context_width=32768 vocab_size=32000 num_params=46702792704 active_params=12879925248 \
    rope_theta=1000000.0 num_experts=8 num_experts_per_tok=2 lr=0.0001 precision=bf16 train_data=allenai/c4 -- "${FSDP_MIXTRAL[@]}")
"$FSDPC" plan "${FSDP_MIXTRAL[@]}" >"$W/plan_fsdp10_mixtral.txt" 2>&1
[ -z "$out" ] && grep -q "^recipe: --rotary_pct and --rotary_emb_base are GPT-NeoX's in 10.FSDP's train.py; its mixtral takes MixtralConfig's RoPE (rope_theta 1e+06" \
    "$W/plan_fsdp10_mixtral.txt"
check "plan: 10.FSDP's Mixtral list is Mixtral 8x7B (46.7B, 12.9B active, rope_theta 1e6 though it passes GPT-NeoX's rotary flags)" $? \
    "$out $(grep -m2 -E 'error|rotary' "$W/plan_fsdp10_mixtral.txt" | head -c 400)"
# 10.FSDP's mathstral_7b-training.sbatch (TRAINING_ARGS, its stray ' #' word left out): MistralConfig with the
# script's RMSNorm epsilon 1e-5 and MistralConfig's own window of 4096 (the script passes none)
FSDP_MATHSTRAL=(--train_batch_size=1 --val_batch_size=1 --max_steps=5000 --seed=42 --grad_clip=1.0 --weight_decay=0.2
    --beta1=0.9 --beta2=0.95 --activation_checkpointing=1 --intermediate_size=14336 --num_key_value_heads=8 --logging_freq=1
    --max_context_width=32768 --vocab_size=32768 --hidden_width=4096 --num_layers=32 --num_heads=32 --resid_pdrop=0.1
    --embd_pdrop=0.1 --attn_pdrop=0.1 --summary_first_pdrop=0.1 --initializer_range=0.02 --model_type=mistral
    --rotary_pct=0.25 --rotary_emb_base=10000 --lr=0.0001 --lr_decay_style=cosine --min_lr=1e-5 --warmup=0.0032
    --plateau=0.0 --dataset=allenai/c4 --tokenizer=mistralai/mathstral-7B-v0.1 --epochs=3
    --checkpoint_dir=./checkpoints/mathstral-7B --resume_from_checkpoint=./checkpoints/mathstral-7B --checkpoint_freq=50
    --validation_freq=500 --dataset_config_name=en --limit_all_gathers=1 --sharding_strategy=full --offload_activations=1
    --train_split=train --val_split=validation)
out=$(planned fsdp10_mathstral recipe=fsdp10 model_type=llama_v2 hidden_width=4096 num_layers=32 num_heads=32 \
    num_key_value_heads=8 intermediate_size=14336 max_context_width=32768 vocab_size=32768 num_params=formula \
    rope_theta=10000 norm_eps=1e-05 sliding_window=4096 lr=0.0001 precision=bf16 train_data=allenai/c4 -- "${FSDP_MATHSTRAL[@]}")
"$FSDPC" plan "${FSDP_MATHSTRAL[@]}" >"$W/plan_fsdp10_mathstral.txt" 2>&1
[ -z "$out" ] && grep -q "^--model_type mistral: the Llama family as MistralConfig builds it, sliding window 4096 and RMSNorm epsilon 1e-05" \
    "$W/plan_fsdp10_mathstral.txt"
check "plan: 10.FSDP's Mathstral list is Mistral 7B's shape with MistralConfig's window 4096 and the script's epsilon 1e-5" $? \
    "$out $(grep -m2 -E 'error|mistral' "$W/plan_fsdp10_mathstral.txt" | head -c 400)"
out=$(planned smp_mistral recipe=smp model_type=llama_v2 norm_eps=1e-06 sliding_window=0 -- --model_type mistral \
    --hidden_width 4096 --num_layers 32 --num_heads 32 --num_key_value_heads 8 --shard_degree 8 --fp8 0)
check "plan: SMP's --model_type mistral: its --sliding_window default None and its epsilon 1e-6" $? "$out"
out=$(planned own_mistral recipe=none model_type=llama_v2 norm_eps=1e-06 sliding_window=4096 -- --model_type mistral)
check "plan: --model_type mistral without a recipe: MistralConfig's window 4096 and epsilon 1e-6" $? "$out"
out=$(planned own_llama recipe=none model_type=llama_v2 norm_eps=1e-05 sliding_window=0 -- --model_type llama_v2 --hidden_width 64)
check "plan: llama_v2 keeps Llama-2's RMSNorm epsilon 1e-5 and no window" $? "$out"
out=$(planned smp_mixtral recipe=smp model_type=mixtral intermediate_size=14336 num_experts=8 num_experts_per_tok=2 rope_theta=1000000.0 \
    -- --model_type mixtral --hidden_width 4096 --num_layers 32 --num_heads 32 --num_key_value_heads 8 --num_local_experts 8 \
    --num_experts_per_tok 2 --shard_degree 8 --fp8 0)
check "plan: SMP's Mixtral flags (--num_local_experts, --num_experts_per_tok): its width 14336 default and MixtralConfig's RoPE" $? "$out"
out=$(planned none recipe=none model_type=llama_v2 hidden_width=128 lr=0.001 precision=float32 -- --train_batch_size=2 --recipe_defaults none)
check "--recipe_defaults none keeps fsdpc's own defaults" $? "$out"
# streamed C4 that is not in the hub cache: refused with the download line, never the bundled text
nohub=$W/hub_tok_only
mkdir -p "$nohub" && cp -r "$W/hub/models--EleutherAI--gpt-neox-20b" "$nohub/" 2>/dev/null
expect_error "10.FSDP's default data set (C4) missing from the hub cache: refused with the hf download line" \
    "no Hugging Face cache here holds dataset allenai/c4.*hf download allenai/c4" \
    env HF_HUB_CACHE="$nohub" "$FSDPC" --train_batch_size=2 $SIZES --vocab_size 512
cd "$W"

# ---- SMP v2: launch_training_conda.sh's variables and srun line, verbatim (torchrun replaced) ----
model_type=llama_v2
model_size=70b
use_synthetic_data=1
export TRAINING_DIR=/fsx/path_to_train_data
export TEST_DIR=/fsx/path_to_test_data
export CHECKPOINT_DIR=$W/smp/checkpoints
HIDDEN_WIDTH=8192
NUM_LAYERS=80
NUM_HEADS=64
LLAMA_INTERMEDIATE_SIZE=28672
DEFAULT_SHARD_DEGREE=64
SHARD_DEGREE=$DEFAULT_SHARD_DEGREE
LLAMA_ARGS="--llama_intermediate_size $LLAMA_INTERMEDIATE_SIZE "
mkdir -p "$W/smp"
(cd "$W/smp" && $MPI -np 2 $FSDPC \
            --train_batch_size 4 \
            --max_steps 100 \
            --hidden_width $HIDDEN_WIDTH \
            --num_layers $NUM_LAYERS \
            --num_heads $NUM_HEADS \
            ${LLAMA_ARGS} \
            --shard_degree $SHARD_DEGREE \
            --model_type $model_type \
            --profile_nsys 1 \
            --use_smp_implementation 1 \
            --max_context_width 4096 \
            --tensor_parallel_degree 1 \
            --use_synthetic_data $use_synthetic_data \
            --training_dir $TRAINING_DIR \
            --test_dir $TEST_DIR \
            --dataset_type hf \
            --checkpoint_dir $CHECKPOINT_DIR \
            --checkpoint_freq 100 \
    $SIZES --llama_intermediate_size 128 --logging_freq 1 --shard_degree 2 --fp8 0 >log 2>&1)
trained "$W/smp/log" && grep -q "shard group 2 x replica group 1" "$W/smp/log" && grep -q "train_data=synthetic" "$W/smp/log" &&
    [ -f "$CHECKPOINT_DIR/step_00000002.h5" ]
check "SMP's launch arguments with --fp8 0 train (synthetic data, --shard_degree 2 over 2 ranks)" $? \
    "($(grep -m2 -E 'error|Batch|shard group' "$W/smp/log" | tr '\n' '|' | head -c 300))"

# ---- the profiling recipe: 01.train.sbatch's MODEL_ARGS, verbatim; the /fsx paths overridden after ----
declare -a MODEL_ARGS=(
    --model_name=llama2_7b
    --ckpt_load_path=/fsx/llama2/pretrain/ckpt
    --ckpt_save_path=/fsx/llama2/pretrain/ckpt
    --data_path=/fsx/data/
    --fsdp_activation_checkpointing=False
    --selective_checkpointing=1
    --sharding_strategy=hsdp
    --low_cpu_fsdp=False
    --batch_size=2
    --report_interval=200
    --checkpoint_interval=20000
    --use_torch_compile=False
    --use_profiler=True
)
PATHS="--ckpt_load_path=ckpt --ckpt_save_path=ckpt --data_path=$REPO/data/tinyshakespeare.txt --vocab_size 256"
prof() {  # prof NAME EXTRA...: the list on 2 ranks in $W/NAME
    mkdir -p "$W/$1"
    local d=$W/$1
    shift
    (cd "$d" && $MPI -np 2 "$FSDPC" "${MODEL_ARGS[@]}" $SIZES --intermediate_size 128 $PATHS --report_interval=1 "$@" >log 2>&1)
}
prof prof --max_steps 6  # its profiler's schedule records steps 4-6
trained "$W/prof/log" && grep -q "sharding=hybrid-full-shard" "$W/prof/log" &&
    [ "$(ls "$W/prof/profile_traces" | grep -c '\.pt\.trace\.json$')" = 2 ] && [ -f "$W/prof/ckpt/step_00000006.h5" ]
check "the profiling recipe's MODEL_ARGS train (hsdp, --use_profiler=True: a trace per rank in profile_traces/)" $? \
    "($(grep -m2 -E 'error|Batch' "$W/prof/log" | tr '\n' '|' | head -c 300))"
# 01.train.sbatch's list (its --num_steps scaled down in its own spelling)
mkdir -p "$W/prof01"
(cd "$W/prof01" && $MPI -np 2 "$FSDPC" "${PROF01[@]}" ${SIZES/--max_steps 2/} --num_steps=2 --intermediate_size 128 \
    --load_ckpt_path=ckpt --save_ckpt_path=ckpt --data_path=$REPO/data/tinyshakespeare.txt --vocab_size 256 \
    --report_interval=1 >log 2>&1)
trained "$W/prof01/log" && grep -q "^recipe: the FSDP profiling recipe's training.py" "$W/prof01/log" &&
    grep -q "^model=llama_v2/llama2_7b .*sharding=full-shard precision=bf16 .* lr=0.0003 min_lr=3e-05 .*wd=0.1 betas=0.9,0.95 grad_clip=4 seed=2023" "$W/prof01/log"
check "the profiling recipe's 01.train.sbatch list trains what its training.py would (lr 3e-4, clip 4.0, bf16, fsdp)" $? \
    "($(grep -m3 -E 'error|^model=|^recipe' "$W/prof01/log" | tr '\n' '|' | head -c 500))"
acts() { sed -nE 's/^Batch 1 memory.* activations ([0-9.]+)\/.*/\1/p' "$1"; }
prof prof_off --num_layers 8 --hidden_width 128
prof prof_on --num_layers 8 --hidden_width 128 --fsdp_activation_checkpointing=True
off=$(acts "$W/prof_off/log") on=$(acts "$W/prof_on/log")
[ -n "$off" ] && [ -n "$on" ] && awk -v a="$off" -v b="$on" 'BEGIN { exit !(b < a) }'
check "--fsdp_activation_checkpointing=False keeps activations; True recomputes them (tracker: $off vs $on MiB)" $?
prof prof_sel --num_layers 8 --hidden_width 128 --fsdp_activation_checkpointing=True --selective_checkpointing=2
sel=$(acts "$W/prof_sel/log")
[ -n "$sel" ] && awk -v a="$off" -v b="$on" -v s="$sel" 'BEGIN { exit !(b < s && s < a) }'
check "--selective_checkpointing=2 recomputes every other block (tracker: $on < $sel < $off MiB)" $?

# ---- refused flags name themselves (their "off" values are accepted) ----
# from here on, the flags' own behaviour, without any recipe's defaults; runs write no checkpoints
B="$FSDPC --max_steps 0 --num_tokens 0 --validation_batches 1 --recipe_defaults none"
SMALL="$SMALL --checkpoint_freq 0 --recipe_defaults none"
while IFS='|' read -r flag value; do
    expect_error "--$flag $value is refused by name" "^fsdpc: error: .*--$flag" $B --$flag $value
done <<'EOF'
fp8|1
use_torch_compile|True
use_wandb|True
save_final_model|1
logging_freq_for_avg|50
tensor_parallel_degree|8
checkpoint_type|local
data_type|bert
backward_fetch_policy|backward_post
auto_wrap_policy|size_based_auto_wrap_policy
framework|megatron
nccl_test_log|nccl.log
restart_epoch|2
model_size|7b
hostfile|/tmp/hosts
nsys_path|/tmp/nsys
nsys_start_step|70
nsys_end_step|75
EOF
# launch-file tokens that no parser defines
expect_error "10.FSDP's mixtral sbatch's stray ' #' word (a backslash-space before its comment) is refused, not dropped" \
    "unexpected argument ' #'" $B --sharding_strategy=full ' #' https://pytorch.org/docs/stable/fsdp.html
expect_error "SMP's EKS item \"--max_steps 100\" (one argument) is refused, not dropped" "unknown flag '--max_steps 100'" \
    $B "--max_steps 100"
$FSDPC $SMALL --max_steps 1 --offload_activation=1 >"$W/oa.log" 2>&1
[ "$(grep -c -- '--offload_activations: no effect' "$W/oa.log")" = 1 ]
check "the EKS manifests' --offload_activation=1 is --offload_activations 1" $? "($(grep -m1 error "$W/oa.log"))"
expect_error "--model_type llama_v3 is refused by name, with what it is" "model_type llama_v3 .*dynamic RoPE" $B --model_type llama_v3
for off in "fp8 0" "use_torch_compile False" "use_wandb False" "save_final_model 0" "tensor_parallel_degree 1" \
    "checkpoint_type sharded" "sliding_window None" "sliding_window 0" "data_type gpt" "framework fsdp" "restart_epoch 0"; do
    $B --$off >"$W/off.log" 2>&1
    check "--$off (what fsdpc does) is accepted" $? "($(grep -m1 error "$W/off.log"))"
done

# ---- learning-rate schedules, as the metrics file logs them ----
LR="$SMALL --max_steps 10 --warmup 2 --lr 1e-3 --min_lr 1e-4 --batch_size 2 --validation_freq 0 --checkpoint_freq 0"
sched() {  # sched NAME FLAGS...: one rank, the lr of each step in $W/NAME.lr
    local n=$1
    shift
    $FSDPC $LR --metrics_file "$W/$n.jsonl" "$@" >"$W/$n.log" 2>&1
    sed -E 's/.*"lr": ([0-9.e+-]+).*/\1/' "$W/$n.jsonl" >"$W/$n.lr"
}
expect() {  # expect NAME PYEXPR(s): the logged lr against a formula of step s (0-based)
    /usr/bin/python3 - "$W/$1.lr" "$2" <<'PY'
import math, sys
got = [float(x) for x in open(sys.argv[1])]
want = [eval(sys.argv[2], {"math": math, "s": s}) for s in range(10)]
sys.exit(not (len(got) == 10 and all(abs(g - w) <= 1e-6 * w for g, w in zip(got, want))))
PY
}
warm="1e-3 * (s + 1) / 2 if s < 2 else"
sched cosine
expect cosine "$warm 1e-4 + 9e-4 * 0.5 * (1 + math.cos(math.pi * (s - 2) / 8))"
check "cosine over --max_steps (the old default)" $? "($(tr '\n' ' ' <"$W/cosine.lr"))"
sched iters --lr_decay_iters 6
expect iters "$warm 1e-4 + 9e-4 * 0.5 * (1 + math.cos(math.pi * min(1, (s - 2) / 4)))"
check "--lr_decay_iters 6 ends the decay at step 6, then --min_lr" $? "($(tr '\n' ' ' <"$W/iters.lr"))"
sched expo --lr_decay_style exponential
expect expo "$warm max(1e-4, 1e-3 * 0.5 ** ((s - 2) / 8))"
check "--lr_decay_style exponential halves the lr over the decay, not below --min_lr" $? "($(tr '\n' ' ' <"$W/expo.lr"))"
sched plat --lr_decay_style plateau --plateau 0.3
expect plat "$warm 1e-3 if s < 5 else 1e-4 + 9e-4 * 0.5 * (1 + math.cos(math.pi * (s - 5) / 5))"
check "--lr_decay_style plateau --plateau 0.3 holds --lr for 3 steps after warm-up, then decays" $? "($(tr '\n' ' ' <"$W/plat.lr"))"
expect_error "--plateau without the plateau schedule names both" "--plateau .*plateau" $B --plateau 0.2

# ---- validation batch ----
V="$SMALL --max_steps 2 --batch_size 4 --validation_freq 2 --validation_batches 2 --checkpoint_freq 0"
vloss() { $FSDPC $V "$@" 2>&1 | sed -nE 's/.*Validation loss: ([0-9.]+).*/\1/p' | tail -1; }
v_def=$(vloss) v_same=$(vloss --val_batch_size 4) v_one=$(vloss --val_batch_size 1) v_six=$(vloss --val_batch_size 6)
[ -n "$v_def" ] && [ "$v_def" = "$v_same" ] && [ -n "$v_one" ] && [ "$v_one" != "$v_def" ] && [ -n "$v_six" ] &&
    [ "$v_six" != "$v_def" ] && [ "$v_six" != "$v_one" ]
check "--val_batch_size sets the validation batch (4 = --batch_size: $v_same; 1: $v_one; 6, above --batch_size: $v_six)" $? \
    "(default $v_def)"

# ---- bounded all-gathers, same seed, shard degree, the accepted no-effect flags ----
gath() { sed -nE 's/^Batch 1 memory.* gathered [0-9.]+\/([0-9.]+),.*/\1/p' "$1"; }
$MPI -np 2 $FSDPC $SMALL --vocab_size 256 --num_layers 4 --limit_all_gathers 1 --metrics_file "$W/lag1.jsonl" >"$W/lag1.log" 2>&1
$MPI -np 2 $FSDPC $SMALL --vocab_size 256 --num_layers 4 --limit_all_gathers 0 --metrics_file "$W/lag0.jsonl" >"$W/lag0.log" 2>&1
# the largest unit: the embedding (256 x 64) or a block (4 x 64^2 attention + 3 x 64 x 128 MLP + 2 x 64 norms)
unit=$(/usr/bin/python3 -c 'print(max(256 * 64, 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) * 4 / 2**20)')
g1=$(gath "$W/lag1.log") g0=$(gath "$W/lag0.log")
[ -n "$g1" ] && [ "$g1" = "$g0" ] && awk -v g="$g1" -v u="$unit" 'BEGIN { exit !(g <= 2 * u + 0.05 && g > u) }'
check "--limit_all_gathers 1 (and 0): at most two units gathered (tracker peak $g1 MiB, a unit $unit MiB)" $?
cmp -s <(steady "$W/lag1.jsonl") <(steady "$W/lag0.jsonl")
check "--limit_all_gathers 0 and 1 train alike" $?
for s in 0 1; do
    $MPI -np 2 $FSDPC $SMALL --vocab_size 256 --dropout 0.1 --same_seed $s --metrics_file "$W/seed$s.jsonl" >"$W/seed$s.log" 2>&1
done
[ -s "$W/seed0.jsonl" ] && cmp -s <(losses "$W/seed0.jsonl") <(losses "$W/seed1.jsonl")
check "--same_seed 0 and 1 give the same losses (every rank draws as one process would)" $?
$MPI -np 2 $FSDPC $SMALL --vocab_size 256 --shard_degree 1 >"$W/sd1.log" 2>&1
grep -q "shard group 1 x replica group 2" "$W/sd1.log"
check "--shard_degree 1 is hybrid sharding over groups of one rank" $? "($(grep -m1 -E 'error|shard group' "$W/sd1.log"))"
for st in no_shard:no-shard shard_grad_op:grad-shard hybrid_shard:hybrid-full-shard full_shard:full-shard; do
    $FSDPC $SMALL --vocab_size 256 --max_steps 1 --sharding_strategy ${st%%:*} >"$W/st.log" 2>&1
    grep -q "sharding=${st#*:} " "$W/st.log"
    check "--sharding_strategy ${st%%:*} is --sharding ${st#*:}" $?
done
ACCEPTED="--use_smp_implementation 1 --patch_neox_rope 1 --enable_memory_profiling 1 --clean_cache 1 --log_reduced_training_loss 1
          --data_num_workers 4 --num_experts_per_tok 2 --num_local_experts 8 --forward_prefetch 1 --use_orig_params 1
          --preserve_np_state 1 --fast_validation 1 --profile_nsys 1 --fp8_amax_history_len 1024 --fp8_amax_compute_algo max
          --model_dir out --summary_first_pdrop 0.1 --distributed_backend nccl --fp8 0 --delayed_param 0 --same_seed 0
          --activation_loading_horizon 2 --use_smp_flash_attn 1 --epochs 3 --max_training_steps 2 --tensorboard_dir $W/tb"
$FSDPC $SMALL --vocab_size 256 --metrics_file "$W/plain.jsonl" >"$W/plain.log" 2>&1
$FSDPC $SMALL --vocab_size 256 $ACCEPTED --metrics_file "$W/acc.jsonl" >"$W/acc.log" 2>&1
[ -s "$W/plain.jsonl" ] && cmp -s <(steady "$W/plain.jsonl") <(steady "$W/acc.jsonl")
check "SMP's flags that change nothing here are accepted, and the run is the plain one" $? "($(grep -m1 error "$W/acc.log"))"
$FSDPC $SMALL --vocab_size 256 --use_synthetic_data 1 --training_dir /nonexistent --test_dir /nonexistent >"$W/syn.log" 2>&1
trained "$W/syn.log" && grep -q "train_data=synthetic" "$W/syn.log"
check "--use_synthetic_data 1 trains on synthetic tokens over --training_dir" $?
mkdir -p "$W/load"
(cd "$W/load" && $FSDPC $SMALL --vocab_size 256 --checkpoint_freq 2 --save_ckpt_path a >log 2>&1 &&
    $FSDPC $SMALL --vocab_size 256 --load_ckpt_path a --max_steps 3 >log2 2>&1)
grep -q "^Batch 3 Loss" "$W/load/log2" && ! grep -q "^Batch 1 Loss" "$W/load/log2"
check "--save_ckpt_path / --load_ckpt_path (the profiling config's spellings) save and resume" $?

# ---- the seed's finetuning flags and SMP's Hugging Face model: one model, three spellings ----
/usr/bin/python3 "$REPO/test/ref/hf_make.py" "$W/hfm" --vocab 256 --context 64 --seed 3 >/dev/null
FT="--num_threads 1 --num_tokens 0 --max_steps 2 --checkpoint_freq 0 --batch_size 2 --max_context_width 64 --recipe_defaults none"
for spell in "init_from $W/hfm" "pretrained_model_name $W/hfm" "hf_pretrained_model_name_or_dir $W/hfm" \
    "finetune_checkpoint_load_dir $W/hfm"; do
    n=${spell%% *}
    $FSDPC $FT --finetune 1 --$spell --metrics_file "$W/ft_$n.jsonl" >"$W/ft_$n.log" 2>&1
done
[ -s "$W/ft_init_from.jsonl" ] && cmp -s <(losses "$W/ft_init_from.jsonl") <(losses "$W/ft_pretrained_model_name.jsonl") &&
    cmp -s <(losses "$W/ft_init_from.jsonl") <(losses "$W/ft_hf_pretrained_model_name_or_dir.jsonl") &&
    cmp -s <(losses "$W/ft_init_from.jsonl") <(losses "$W/ft_finetune_checkpoint_load_dir.jsonl")
check "--finetune 1 with --pretrained_model_name, --hf_pretrained_model_name_or_dir or SMP's documented --finetune_checkpoint_load_dir finetunes what --init_from does" $? \
    "($(grep -h -m1 error "$W"/ft_*.log | head -c 300))"
$FSDPC --model_type gpt2 --max_steps 0 --num_tokens 0 --validation_batches 1 2>&1 | grep -q "^model=mingpt/"
check "SMP's --model_type gpt2 is minGPT (GPT-2's architecture)" $?
