#!/usr/bin/env bash
# LoRA adapters in PEFT's format, in and out, and the merged export: a PEFT adapter folder written
# by test/ref/peft_ref.py (random A and B, r 4, alpha 8, q_proj and v_proj of the tiny Llama) loads
# with --init_adapter (np 1, and np 2 at tp 2), changes the loss, and export --adapter of the run's
# checkpoint at --lr 0 gives back the same names, shapes, config and fp32 values bit for bit; the
# merged export's weights are W + s B A of the checkpoint (torch, 1e-6) and generate the adapter
# run's greedy text; a mixture of experts' experts and router adapted at --ep 2 go out under
# PEFT's names, come back in bit for bit (np 1 and --ep 2), and merge; bad adapter folders and
# exports end with one error line each.
cd "$(dirname "$0")/../.."
source test/lib.sh
PY=/usr/bin/python3
REF=test/ref/peft_ref.py
LORA="--lora_rank 4 --lora_target_modules q_proj,v_proj"
RUN="$LORA --batch_size 4 --num_tokens 0"
NOCK="--checkpoint_freq 0"  # a refusal that failed to refuse writes no checkpoint into the repository
NOCK="--checkpoint_freq 0"  # a refusal that failed to refuse writes nothing here
FROZEN="--max_steps 2 --lr 0 --min_lr 0"  # the adapters come out as they went in

$PY $REF write "$W/ref"
check "the reference writes a PEFT adapter folder" $?
./fsdpc $RUN $FROZEN --checkpoint_freq 0 --metrics_file "$W/base.jsonl" >/dev/null 2>"$W/base.log"
check "the base run (adapters at their start: B zero)" $? "$(tail -c 300 "$W/base.log")"
./fsdpc $RUN $FROZEN --init_adapter "$W/ref" --checkpoint_dir "$W/c0" --checkpoint_freq 2 --metrics_file "$W/ad.jsonl" \
    >/dev/null 2>"$W/ad.log"
rc=$?
grep -q "Loaded adapters from $W/ref (16 tensors)" "$W/ad.log"
check "--init_adapter loads the folder's 16 tensors and trains 2 steps" $((rc | $?)) "$(grep -m2 'error\|Loaded' "$W/ad.log")"
a=$(losses "$W/base.jsonl" | head -1)
b=$(losses "$W/ad.jsonl" | head -1)
[ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ]
check "the adapters change the step-1 loss ($a -> $b)" $?
./fsdpc export --checkpoint "$W/c0" --output "$W/out0" --adapter --dtype fp32 >/dev/null 2>"$W/ex0.log" &&
    [ "$(ls "$W/out0" | tr '\n' ' ')" = "adapter_config.json adapter_model.safetensors " ]
check "export --adapter writes adapter_config.json and adapter_model.safetensors only" $? "$(tail -c 300 "$W/ex0.log"; ls "$W/out0")"
out=$($PY $REF same "$W/ref" "$W/out0" 2>&1)
check "export --adapter gives back the reference's names, shapes, config and values bit for bit ($out)" $? "$(echo "$out" | tail -2)"
$MPI -np 2 ./fsdpc $RUN $FROZEN --tensor_parallel_degree 2 --init_adapter "$W/ref" --checkpoint_dir "$W/c1" --checkpoint_freq 2 \
    >/dev/null 2>"$W/tp.log" &&
    ./fsdpc export --checkpoint "$W/c1" --output "$W/out1" --adapter --dtype fp32 >/dev/null 2>&1 &&
    $PY $REF same "$W/ref" "$W/out1" >/dev/null 2>"$W/same1.log"
check "np 2 at tp 2: each rank loads its slices, and the export is the reference's bit for bit" $? \
    "$(grep -m2 error "$W/tp.log"; tail -2 "$W/same1.log")"

# merged: the adapters trained further, then merged into the model
./fsdpc $RUN --max_steps 3 --lr 1e-2 --init_adapter "$W/ref" --checkpoint_dir "$W/c2" --checkpoint_freq 3 >/dev/null 2>"$W/tr.log"
check "--init_adapter, then 3 steps of training" $? "$(tail -c 300 "$W/tr.log")"
./fsdpc export --checkpoint "$W/c2" --output "$W/merged" --dtype fp32 >/dev/null 2>"$W/merge.log"
rc=$?
grep -q "Merged the LoRA adapters into 8 weights (W + s B A in fp32: rank 4, alpha 8, scale 2)" "$W/merge.log"
check "export merges the adapters, and says so" $((rc | $?)) "$(tail -c 300 "$W/merge.log")"
out=$($PY $REF merged "$W/c2/step_00000003.h5" "$W/merged" 2>&1)
check "the merged export is W + s B A of the checkpoint within 1e-6, without adapter tensors ($out)" $? "$(echo "$out" | tail -2)"
PROMPT="ROMEO: What say you"
./fsdpc $LORA --max_steps 0 --resume_from_checkpoint "$W/c2/step_00000003.h5" --prompt "$PROMPT" --num_tokens 40 \
    --temperature 0 >"$W/lora.txt" 2>"$W/gen1.log"
check "greedy generation with the adapters" $? "$(tail -c 300 "$W/gen1.log")"
./fsdpc --max_steps 0 --init_from "$W/merged" --prompt "$PROMPT" --num_tokens 40 --temperature 0 >"$W/merged.txt" 2>"$W/gen2.log"
check "greedy generation from the merged export" $? "$(tail -c 300 "$W/gen2.log")"
cmp -s "$W/lora.txt" "$W/merged.txt" && [ "$(wc -c <"$W/lora.txt")" -gt ${#PROMPT} ]
check "the merged export generates the adapter run's text" $? "lora: $(head -c 80 "$W/lora.txt") merged: $(head -c 80 "$W/merged.txt")"

# the base's name: recorded by export --adapter, compared by --init_adapter with --init_from's last component
$PY $REF write "$W/named" --base "someone/merged"
./fsdpc $RUN --max_steps 1 --init_from "$W/merged" --init_adapter "$W/named" --checkpoint_dir "$W/c3" --checkpoint_freq 1 \
    >/dev/null 2>"$W/named.log" &&
    ./fsdpc export --checkpoint "$W/c3" --output "$W/out3" --adapter >/dev/null 2>&1 &&
    $PY -c 'import json, sys; c = json.load(open(sys.argv[1])); sys.exit(c["base_model_name_or_path"] != sys.argv[2])' \
        "$W/out3/adapter_config.json" "$W/merged"
check "a hub-style base name matches --init_from's folder; export --adapter records --init_from as the base" $? \
    "$(grep -m2 error "$W/named.log"; grep base_model "$W/out3/adapter_config.json")"

# refusals
$PY $REF write "$W/small" --hidden 64
expect_error "an adapter for another base (its shapes)" "tensor base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight has shape \[4,64\] but this run's adapter needs \[4,128\]" \
    ./fsdpc $RUN --max_steps 1 $NOCK --init_adapter "$W/small"
$PY $REF write "$W/r8" --r 8
expect_error "another r" "has r 8, lora_alpha 8 but this run has --lora_rank 4 --lora_alpha 8" \
    ./fsdpc $RUN --max_steps 1 $NOCK --init_adapter "$W/r8"
$PY $REF write "$W/qk" --targets q_proj,k_proj
expect_error "other target modules" "adapts target_modules q_proj,k_proj but this run adapts q_proj,v_proj" \
    ./fsdpc $RUN --max_steps 1 $NOCK --init_adapter "$W/qk"
$PY $REF write "$W/llama" --base meta-llama/Llama-2-7b-hf
expect_error "base_model_name_or_path another model than --init_from" "trained on base_model_name_or_path meta-llama/Llama-2-7b-hf, but this run's --init_from is .*/merged" \
    $MPI -np 2 ./fsdpc $RUN --max_steps 1 $NOCK --init_from "$W/merged" --init_adapter "$W/llama"
mkdir "$W/noweights" && cp "$W/ref/adapter_config.json" "$W/noweights/"
expect_error "no adapter_model.safetensors" "holds no adapter_model.safetensors" ./fsdpc $RUN --max_steps 1 $NOCK --init_adapter "$W/noweights"
$PY $REF write "$W/extra" --extra
expect_error "a tensor that is not one of the run's adapters" "holds tensor .*lora_magnitude_vector, which is not one of this run's adapters" \
    ./fsdpc $RUN --max_steps 1 $NOCK --init_adapter "$W/extra"
$PY $REF write "$W/nan" --nan
expect_error "NaN in an adapter" "holds NaN or infinite values in 1 tensor" $MPI -np 2 ./fsdpc $RUN --max_steps 1 $NOCK --init_adapter "$W/nan"
$PY $REF write "$W/int" --dtype I32
expect_error "an integer dtype" "has dtype I32; fsdpc loads F32, BF16 and F16" ./fsdpc $RUN --max_steps 1 $NOCK --init_adapter "$W/int"
expect_error "--init_adapter without --lora_rank" "loads LoRA adapters: give --lora_rank" ./fsdpc --max_steps 1 $NOCK --init_adapter "$W/ref"
./fsdpc --max_steps 1 --batch_size 4 --num_tokens 0 --checkpoint_dir "$W/full" --checkpoint_freq 1 >/dev/null 2>&1
expect_error "export --adapter of a checkpoint without adapters" "holds no LoRA adapters .*export the model without --adapter" \
    ./fsdpc export --checkpoint "$W/full" --output "$W/none" --adapter
[ ! -e "$W/none" ]
check "the refused export leaves no folder" $?
./fsdpc $RUN --max_steps 1 $NOCK --init_adapter "$W/ref" --resume_from_checkpoint "$W/c0" --checkpoint_dir "$W/c0" >/dev/null 2>"$W/res.log"
rc=$?
grep -q "is not loaded again" "$W/res.log"
check "a resumed run keeps its checkpoint's adapters (--init_adapter is not loaded again)" $((rc | $?)) "$(grep -m2 'error\|Resum' "$W/res.log")"
# settings PEFT honours that would change what the adapters compute: refused, never ignored
for s in 'alpha_pattern={"v_proj": 64}' 'rank_pattern={"q_proj": 8}' 'use_dora=true' 'bias="lora_only"' 'modules_to_save=["lm_head"]' \
    'layers_to_transform=[0, 1]'; do
    k=${s%%=*}
    mkdir -p "$W/p-$k"
    cp "$W/ref/adapter_model.safetensors" "$W/p-$k/"
    $PY -c "import json, sys; c = json.load(open(sys.argv[1])); c[sys.argv[2]] = json.loads(sys.argv[3]); json.dump(c, open(sys.argv[4], 'w'))" \
        "$W/ref/adapter_config.json" "$k" "${s#*=}" "$W/p-$k/adapter_config.json"
    expect_error "an adapter_config.json with $s" "$k" ./fsdpc $RUN --max_steps 1 $NOCK --init_adapter "$W/p-$k"
done
# minGPT's c_proj names two layers: an adapter on one is exported under its parent's name too, and loads back
./fsdpc --model_type mingpt --lora_rank 2 --lora_target_modules mlp.c_proj,c_attn --max_steps 1 --num_tokens 0 \
    --checkpoint_dir "$W/mg" --checkpoint_freq 1 >/dev/null 2>&1
./fsdpc export --checkpoint "$W/mg" --output "$W/mgx" --adapter >/dev/null 2>&1
grep -q '"target_modules": \["c_attn", "mlp.c_proj"\]' "$W/mgx/adapter_config.json"
check "minGPT's mlp.c_proj alone is exported as mlp.c_proj (c_proj would adapt attn.c_proj too)" $? "$(head -c 300 "$W/mgx/adapter_config.json")"
./fsdpc --model_type mingpt --lora_rank 2 --lora_target_modules mlp.c_proj,c_attn --max_steps 1 $NOCK --init_adapter "$W/mgx" >/dev/null 2>"$W/mg.log"
check "and loads back into the same adapters" $? "$(grep -m2 error "$W/mg.log")"
expect_error "the mlp.c_proj adapter into a run adapting both c_proj" "adapts target_modules c_attn,mlp.c_proj but this run adapts" \
    ./fsdpc --model_type mingpt --lora_rank 2 --lora_target_modules c_proj,c_attn --max_steps 1 $NOCK --init_adapter "$W/mgx"

# ---- a mixture of experts' experts and router: out under PEFT's names from an --ep 2 run, back in, merged ----
XM="--model_name mixtral_tiny --num_layers 2 --lora_rank 4 --lora_alpha 8 --lora_target_modules all-linear"
$MPI -np 2 ./fsdpc $XM --batch_size 2 --num_tokens 0 --ep 2 --max_steps 12 --lr 1e-2 --warmup 1 --checkpoint_dir "$W/xk" \
    --checkpoint_freq 12 >/dev/null 2>"$W/xk.log" &&
    ./fsdpc export --checkpoint "$W/xk" --output "$W/xa" --adapter --dtype fp32 >/dev/null 2>"$W/xa.log"
check "Mixtral's experts and router adapted at --ep 2, exported with --adapter" $? "$(grep -m2 error "$W/xk.log" "$W/xa.log")"
$PY - "$W/xa" <<'PYEOF'
import json, struct, sys
b = open(sys.argv[1] + "/adapter_model.safetensors", "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
h.pop("__metadata__", None)
c = json.load(open(sys.argv[1] + "/adapter_config.json"))
p = "base_model.model.model.layers."
want = {p + "1.block_sparse_moe.experts.3.w2.lora_A.weight": [4, 96], p + "1.block_sparse_moe.experts.3.w2.lora_B.weight": [128, 4],
        p + "0.block_sparse_moe.experts.0.w1.lora_B.weight": [96, 4], p + "0.block_sparse_moe.gate.lora_A.weight": [4, 128],
        p + "0.block_sparse_moe.gate.lora_B.weight": [4, 4]}
ok = len(h) == 2 * (4 + 1 + 4 * 3) * 2 and all(h.get(k, {}).get("shape") == s for k, s in want.items()) and \
    sorted(c["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate", "w1", "w2", "w3"])
print(len(h), c["target_modules"])
sys.exit(not ok)
PYEOF
check "the adapter folder holds every expert's and the router's factors under PEFT's names and shapes, target_modules with gate, w1, w2, w3" $?
for lay in "1 --batch_size 4" "2 --batch_size 2 --ep 2"; do
    set -- $lay
    np=$1
    shift
    rm -rf "$W/xk2" "$W/xa2"
    $MPI -np $np ./fsdpc $XM "$@" --num_tokens 0 $FROZEN --init_adapter "$W/xa" --checkpoint_dir "$W/xk2" --checkpoint_freq 2 \
        >/dev/null 2>"$W/xk2.log" &&
        ./fsdpc export --checkpoint "$W/xk2" --output "$W/xa2" --adapter --dtype fp32 >/dev/null 2>&1 &&
        cmp -s "$W/xa/adapter_model.safetensors" "$W/xa2/adapter_model.safetensors"
    rc=$?
    grep -q "Loaded adapters from $W/xa (68 tensors)" "$W/xk2.log"
    check "np=$np $*: --init_adapter loads the experts' and router's 68 adapter tensors, exported back bit for bit" $((rc | $?)) \
        "$(grep -m2 'error\|Loaded' "$W/xk2.log")"
done
./fsdpc export --checkpoint "$W/xk" --output "$W/xm" --dtype fp32 >/dev/null 2>"$W/xm.log" &&
    grep -q "Merged the LoRA adapters into 34 weights" "$W/xm.log" && out=$($PY $REF merged "$W/xk/step_00000012.h5" "$W/xm" 2>&1)
check "the merged export is W + s B A for the experts and the router too ($out)" $? "$(tail -c 300 "$W/xm.log"; echo "$out" | tail -2)"
$MPI -np 2 ./fsdpc $XM --ep 2 --max_steps 0 --resume_from_checkpoint "$W/xk/step_00000012.h5" --prompt "$PROMPT" --num_tokens 40 \
    --temperature 0 >"$W/xl.txt" 2>"$W/xl.log" &&
    ./fsdpc --max_steps 0 --init_from "$W/xm" --prompt "$PROMPT" --num_tokens 40 --temperature 0 >"$W/xmg.txt" 2>"$W/xmg.log" &&
    cmp -s "$W/xl.txt" "$W/xmg.txt" && [ "$(wc -c <"$W/xl.txt")" -gt ${#PROMPT} ]
check "the merged export generates the --ep 2 adapter run's greedy text" $? "$(grep -m2 error "$W/xl.log" "$W/xmg.log")"
