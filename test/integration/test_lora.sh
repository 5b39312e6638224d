#!/usr/bin/env bash
# LoRA: adapters on every family's projections against the PyTorch reference (PEFT's formulas:
# logits, loss, the adapters' gradients, 5 AdamW steps); step 0 equals the base model exactly;
# equal losses at np=1/2/4 across strategies, tensor and sequence parallelism, activation
# checkpointing, micro-batches, packing and expert parallelism, adapter dropout included; a
# mixture of experts' experts and router adapted (step 0 the base's, the same losses at every
# layout, resume bit for bit at ep 2, the emulated GPU's grouped GEMMs); resume bit for bit across
# layouts; a base checkpoint and a Hugging Face folder load under adapters;
# the tracker holds gradients and moments of the adapters alone; under --precision bf16 the frozen
# base is stored in bf16 (the losses unchanged, 2 bytes per frozen parameter, resume bit for bit);
# refusals by name.
cd "$(dirname "$0")/../.."
source test/lib.sh
PY=/usr/bin/python3
ONE="--num_threads 1 --checkpoint_freq 0 --validation_freq 0 --num_tokens 0"

# ---- parity: each family, every adaptable layer (B moved off zero so both factors show) ----
for fam in "llama_v2 --lora_target_modules all-linear" "mingpt --lora_target_modules c_attn,c_fc,mlp.c_proj" \
           "gpt_neox --lora_target_modules all-linear --use_rslora 1" \
           "mixtral --num_experts 4 --num_experts_per_tok 2 --lora_target_modules all-linear"; do
    set -- $fam
    mkdir -p "$W/dump-$1"
    build/test_model --dump "$W/dump-$1" "$@" --lora_rank 4 --lora_alpha 8 >"$W/dump-$1.log" 2>&1
    check "the parity dump of a $1 with LoRA ($*)" $? "$(tail -c 300 "$W/dump-$1.log")"
    $PY test/ref/parity.py "$W/dump-$1/step_00000000.h5" | sed "s/^\(not \)\{0,1\}ok - /&$1 LoRA /"
done

# ---- step 0 is the base model ----
F="--train_data data/tinyshakespeare.txt --batch_size 4 --max_steps 1 $ONE"
run base ./fsdpc $F
run lora0 ./fsdpc $F --lora_rank 8 --lora_target_modules all-linear --lora_dropout 0.1
[ "$(losses "$W/base.jsonl")" = "$(losses "$W/lora0.jsonl")" ] && [ -n "$(losses "$W/base.jsonl")" ]
ok=$?  # before the message's $(...), which would set $? again
check "step 1's loss with fresh adapters (B = 0) equals the base model's exactly ($(losses "$W/base.jsonl"))" $ok
grep -q "LoRA r=8 alpha=8 (scale 1) on all-linear, adapter dropout: 0.07M adapter parameters train" "$W/lora0.log"
check "the start-up line names the rank, scale, targets and the trained share" $? "$(grep -m1 LoRA "$W/lora0.log")"

# ---- the same losses at every layout ----
L="--train_data data/tinyshakespeare.txt --max_steps 6 $ONE --lora_rank 8 --lora_alpha 16 --lora_target_modules all-linear"
./fsdpc $L --batch_size 8 --metrics_file "$W/np1.jsonl" >/dev/null 2>"$W/np1.log"
check "np=1 trains LoRA on every linear layer" $? "$(grep -m2 error "$W/np1.log")"
layouts=("2 --batch_size 4 --sharding full-shard" "4 --batch_size 2 --sharding hybrid-full-shard --shard_group_size 2"
         "2 --batch_size 4 --sharding no-shard" "2 --batch_size 4 --sharding grad-shard --activation_checkpoints 1"
         "2 --batch_size 2 --grad_accum 2" "2 --batch_size 2 --grad_accum 2 --accumulate_unsharded 1"
         "2 --batch_size 8 --tensor_parallel_degree 2" "4 --batch_size 4 --tensor_parallel_degree 2 --sequence_parallel")
for i in "${!layouts[@]}"; do
    set -- ${layouts[$i]}
    np=$1
    shift
    $MPI -np $np ./fsdpc $L "$@" --metrics_file "$W/l$i.jsonl" >/dev/null 2>"$W/l$i.log"
    d=$(rel_diff "$W/np1.jsonl" "$W/l$i.jsonl" 6 1e-5)
    check "LoRA np=$np $* equals np=1 at every step (worst $d)" $? "$(grep -m2 error "$W/l$i.log")"
done
# adapter dropout: masks keyed by the global sample, so micro-batching and tp on column-parallel layers keep them
D="$L --lora_dropout 0.1 --lora_target_modules q_proj,v_proj,gate_proj,up_proj"
./fsdpc $D --batch_size 8 --metrics_file "$W/d1.jsonl" >/dev/null 2>&1
$MPI -np 2 ./fsdpc $D --batch_size 2 --grad_accum 2 --metrics_file "$W/d2.jsonl" >/dev/null 2>"$W/d2.log"
d=$(rel_diff "$W/d1.jsonl" "$W/d2.jsonl" 6 1e-5)
check "adapter dropout 0.1: np=2 x --grad_accum 2 equals np=1 (worst $d)" $? "$(grep -m2 error "$W/d2.log")"
$MPI -np 4 ./fsdpc $D --batch_size 4 --tensor_parallel_degree 2 --metrics_file "$W/d3.jsonl" >/dev/null 2>"$W/d3.log"
d=$(rel_diff "$W/d1.jsonl" "$W/d3.jsonl" 6 1e-5)
check "adapter dropout 0.1 on column-parallel layers: np=4 tp 2 equals np=1 (worst $d)" $? "$(grep -m2 error "$W/d3.log")"
run nodrop ./fsdpc ${D/--lora_dropout 0.1/} --batch_size 8
d=$(rel_diff "$W/d1.jsonl" "$W/nodrop.jsonl" 6 1 1e-6)
check "the adapter dropout changes the losses (worst difference $d from none)" $?
# packed finetuning rows with document masks
padded_rows "$W/rows.jsonl" 3 300 250
P="${L/--train_data data\/tinyshakespeare.txt/--train_data $W/rows.jsonl} --packing --document_masking 1 --max_context_width 80 --max_steps 4"
./fsdpc $P --batch_size 8 --metrics_file "$W/pa.jsonl" >/dev/null 2>"$W/pa.log"
$MPI -np 4 ./fsdpc $P --batch_size 2 --metrics_file "$W/pb.jsonl" >/dev/null 2>"$W/pb.log"
d=$(rel_diff "$W/pa.jsonl" "$W/pb.jsonl" 4 1e-5)
check "--packing with document masks: np=4 equals np=1 (worst $d)" $? "$(grep -m2 error "$W/pa.log" "$W/pb.log")"
# other families, and a mixture of experts' attention under expert parallelism
for fam in mingpt gpt_neox; do
    ./fsdpc $L --model_type $fam --batch_size 4 --max_steps 3 --metrics_file "$W/$fam-1.jsonl" >/dev/null 2>&1
    $MPI -np 2 ./fsdpc $L --model_type $fam --batch_size 4 --max_steps 3 --tensor_parallel_degree 2 --metrics_file "$W/$fam-2.jsonl" \
        >/dev/null 2>"$W/$fam-2.log"
    d=$(rel_diff "$W/$fam-1.jsonl" "$W/$fam-2.jsonl" 3 1e-5)
    check "LoRA on every linear layer of $fam: np=2 tp 2 equals np=1 (worst $d)" $? "$(grep -m2 error "$W/$fam-2.log")"
done
X="--model_name mixtral_tiny --num_layers 2 ${L/--lora_target_modules all-linear/--lora_target_modules q_proj,k_proj,v_proj,o_proj} --max_steps 3"
./fsdpc $X --batch_size 4 --metrics_file "$W/x1.jsonl" >/dev/null 2>&1
$MPI -np 2 ./fsdpc $X --batch_size 2 --ep 2 --metrics_file "$W/x2.jsonl" >/dev/null 2>"$W/x2.log"
d=$(rel_diff "$W/x1.jsonl" "$W/x2.jsonl" 3 1e-5)
check "Mixtral with LoRA on its attention: np=2 --ep 2 (frozen experts split) equals np=1 (worst $d)" $? "$(grep -m2 error "$W/x2.log")"

# ---- a mixture of experts' experts and router adapted (their grouped GEMMs, expert parallelism) ----
XB="--model_name mixtral_tiny --num_layers 2 --train_data data/tinyshakespeare.txt $ONE --lr 3e-3 --warmup 1"
run xbase ./fsdpc $XB --batch_size 4 --max_steps 1
for t in all-linear w1,w2,w3,gate; do
    run "xe-$t" ./fsdpc $XB --batch_size 4 --max_steps 4 --lora_rank 4 --lora_alpha 16 --lora_target_modules $t
    [ "$(losses "$W/xbase.jsonl")" = "$(losses "$W/xe-$t.jsonl" | head -1)" ] && [ -n "$(losses "$W/xbase.jsonl")" ] &&
        awk 'NR == 1 { a = $1 } END { exit !(NR == 4 && $1 < a) }' <(losses "$W/xe-$t.jsonl")
    ok=$?  # before the message's $(...), which would set $? again
    check "Mixtral, LoRA on $t (experts and router): step 1 equals the base model exactly, and the loss falls ($(losses "$W/xe-$t.jsonl" | tr '\n' ' '))" $ok \
        "$(grep -m2 error "$W/xe-$t.log")"
done
grep -q "LoRA r=4 alpha=16 (scale 4) on w1,w2,w3,gate: 0.02M adapter parameters train" "$W/xe-w1,w2,w3,gate.log"
check "the start-up line counts the experts' and router's adapters" $? "$(grep -m1 LoRA "$W/xe-w1,w2,w3,gate.log")"
XE="$XB --max_steps 4 --lora_rank 4 --lora_alpha 16 --lora_target_modules all-linear"
cp "$W/xe-all-linear.jsonl" "$W/xe1.jsonl"
for lay in "2 --batch_size 2 --sharding full-shard" "2 --batch_size 2 --ep 2" \
           "4 --batch_size 1 --ep 2 --sharding hybrid-full-shard --shard_group_size 2" "4 --batch_size 1 --ep 4" \
           "2 --batch_size 4 --tensor_parallel_degree 2" "4 --batch_size 2 --tensor_parallel_degree 2 --ep 2"; do
    set -- $lay
    np=$1
    shift
    rm -f "$W/xe2.jsonl"
    $MPI -np $np ./fsdpc $XE "$@" --metrics_file "$W/xe2.jsonl" >/dev/null 2>"$W/xe2.log"
    d=$(rel_diff "$W/xe1.jsonl" "$W/xe2.jsonl" 4 1e-5)
    check "Mixtral with adapted experts and router: np=$np $* equals np=1 (worst $d)" $? "$(grep -m2 error "$W/xe2.log")"
done
# a checkpoint of ep 2's split adapters: resumed at ep 2 (every figure bit for bit) and at np=1
XC="$XB --max_steps 6 --lora_rank 4 --lora_alpha 16 --lora_target_modules w1,w2,w3,gate"
$MPI -np 2 ./fsdpc $XC --batch_size 2 --ep 2 --checkpoint_dir "$W/xck" --checkpoint_freq 3 --metrics_file "$W/xc1.jsonl" \
    >/dev/null 2>"$W/xc1.log"
check "Mixtral expert LoRA at --ep 2 checkpoints" $? "$(grep -m2 error "$W/xc1.log")"
$MPI -np 2 ./fsdpc $XC --batch_size 2 --ep 2 --checkpoint_dir "$W/xck" --resume_from_checkpoint "$W/xck/step_00000003.h5" \
    --checkpoint_freq 0 --metrics_file "$W/xc2.jsonl" >/dev/null 2>"$W/xc2.log"
[ "$(steady "$W/xc2.jsonl")" = "$(steady "$W/xc1.jsonl" | tail -3)" ] && [ "$(wc -l <"$W/xc2.jsonl")" = 3 ]
check "expert LoRA resumed at --ep 2 from step 3: steps 4-6 equal bit for bit (every figure)" $? "$(grep -m2 error "$W/xc2.log")"
./fsdpc $XC --batch_size 4 --checkpoint_dir "$W/xck" --resume_from_checkpoint "$W/xck/step_00000003.h5" --checkpoint_freq 0 \
    --metrics_file "$W/xc3.jsonl" >/dev/null 2>"$W/xc3.log"
d=$(rel_diff <(tail -3 "$W/xc1.jsonl") "$W/xc3.jsonl" 3 1e-5)
check "expert LoRA resumed at np=1 from --ep 2's step 3: steps 4-6 equal (worst $d)" $? "$(grep -m2 error "$W/xc3.log")"
$PY - "$W/xck/step_00000003.h5" <<'PYEOF'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
names, moments = [], []
f["model"].visit(names.append)
f["optim/exp_avg"].visit(moments.append)
adapters = [n for n in names if ".lora_" in n]
# 2 blocks: the router and 4 experts x (w1, w2, w3), two factors each
ok = len(adapters) == 2 * (1 + 4 * 3) * 2 and sorted(moments) == sorted(adapters) and \
    "model.layers.1.block_sparse_moe.experts.3.w2.lora_B.weight" in adapters
print(f"{len(adapters)} adapters, {len(moments)} moments")
sys.exit(not ok)
PYEOF
check "the ep 2 checkpoint holds every expert's and the router's adapters once, with their moments, under PEFT's names" $?

# ---- checkpoints: the adapters' moments only; resume bit for bit across layouts ----
C="$L --lora_dropout 0.1 --lora_target_modules q_proj,v_proj,gate_proj --num_tokens 0"
./fsdpc $C --batch_size 8 --checkpoint_dir "$W/ck" --checkpoint_freq 3 --metrics_file "$W/c1.jsonl" >/dev/null 2>"$W/c1.log"
check "a LoRA run checkpoints" $? "$(grep -m2 error "$W/c1.log")"
$PY - "$W/ck/step_00000003.h5" <<'PYEOF'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
names = []
f["model"].visit(names.append)
moments = []
f["optim/exp_avg"].visit(moments.append)
adapters = [n for n in names if ".lora_" in n]
t = f.attrs["lora_target_modules"]
t = t.decode() if isinstance(t, bytes) else str(t)
ok = (len(adapters) == 4 * 3 * 2 and sorted(moments) == sorted(adapters) and f.attrs["lora_rank"] == 8
      and f.attrs["lora_alpha"] == 16 and t == "q_proj,v_proj,gate_proj")
print(f"{len(names)} weights, {len(adapters)} adapters, {len(moments)} moments")
sys.exit(not ok)
PYEOF
check "the checkpoint holds every weight and AdamW moments of the 24 adapter tensors only, with the LoRA attributes" $?
# the same layout: every logged figure; another data-parallel one: the losses (the gradient norm
# sums in another order); tensor parallelism splits the products, so its losses agree to rounding
for lay in "1 --batch_size 8" "2 --batch_size 4" "4 --batch_size 4 --tensor_parallel_degree 2"; do
    set -- $lay
    np=$1
    shift
    $MPI -np $np ./fsdpc $C "$@" --checkpoint_dir "$W/ck" --resume_from_checkpoint "$W/ck/step_00000003.h5" --checkpoint_freq 0 \
        --metrics_file "$W/c2-$np.jsonl" >/dev/null 2>"$W/c2.log"
    if [ $np = 1 ]; then
        [ "$(steady "$W/c2-$np.jsonl")" = "$(steady "$W/c1.jsonl" | tail -3)" ]
        check "resumed at np=1 from step 3: steps 4-6 equal bit for bit (every figure)" $? "$(grep -m2 error "$W/c2.log")"
    elif [ $np = 2 ]; then
        [ "$(losses "$W/c2-$np.jsonl")" = "$(losses "$W/c1.jsonl" | tail -3)" ]
        check "resumed at np=$np $* from np=1's step 3: the losses of steps 4-6 equal bit for bit" $? "$(grep -m2 error "$W/c2.log")"
    else
        d=$(rel_diff <(tail -3 "$W/c1.jsonl") "$W/c2-$np.jsonl" 3 1e-5)
        check "resumed at np=$np $* from np=1's step 3: steps 4-6 equal np=1's (worst $d)" $? "$(grep -m2 error "$W/c2.log")"
    fi
done
expect_error "a LoRA checkpoint resumed without its adapters' settings" "has LoRA adapters .*--lora_rank 8.*but this run has none" \
    ./fsdpc --train_data data/tinyshakespeare.txt --max_steps 6 $ONE --checkpoint_dir "$W/ck" --resume_from_checkpoint "$W/ck/step_00000003.h5"
./fsdpc ${C/q_proj,v_proj,gate_proj/gate_proj,v_proj,q_proj} --checkpoint_dir "$W/ck" \
    --resume_from_checkpoint "$W/ck/step_00000003.h5" --max_steps 4 --checkpoint_freq 0 >/dev/null 2>"$W/ro.log"
check "the same targets in another order resume" $? "$(grep -m2 error "$W/ro.log")"
expect_error "a LoRA checkpoint resumed with another rank" "has LoRA adapters \(--lora_rank 8.*but this run has --lora_rank 4" \
    ./fsdpc ${C/--lora_rank 8/--lora_rank 4} --checkpoint_dir "$W/ck" --resume_from_checkpoint "$W/ck/step_00000003.h5"

# ---- a base loaded under fresh adapters: an fsdpc checkpoint, a Hugging Face folder ----
./fsdpc --train_data data/tinyshakespeare.txt --batch_size 4 --max_steps 2 $ONE --checkpoint_dir "$W/base" --checkpoint_freq 2 \
    --metrics_file "$W/b1.jsonl" >/dev/null 2>&1
./fsdpc export --checkpoint "$W/base" --output "$W/hf" --dtype fp32 >/dev/null 2>&1
for src in "$W/base/step_00000002.h5" "$W/hf"; do
    k=${src##*/}
    run "$k-0" ./fsdpc --train_data data/tinyshakespeare.txt --batch_size 4 --max_steps 1 $ONE --init_from "$src"
    run "$k-1" ./fsdpc --train_data data/tinyshakespeare.txt --batch_size 4 --max_steps 1 $ONE --init_from "$src" --lora_rank 4 \
        --lora_target_modules all-linear
    [ "$(losses "$W/$k-0.jsonl")" = "$(losses "$W/$k-1.jsonl")" ] && [ -n "$(losses "$W/$k-0.jsonl")" ]
    ok=$?  # before the message's $(...), which would set $? again
    check "--init_from $k under fresh adapters: step 1's loss equals the base's ($(losses "$W/$k-1.jsonl"))" $ok \
        "$(grep -m2 error "$W/$k-1.log")"
done

# ---- memory: the tracker holds the adapters' gradients and moments alone ----
M="--train_data data/tinyshakespeare.txt --batch_size 2 --max_steps 1 $ONE --lora_rank 4"
$MPI -np 2 ./fsdpc $M --sharding full-shard --metrics_file "$W/m.jsonl" >/dev/null 2>"$W/m.log"
$MPI -np 2 ./fsdpc ${M/--lora_rank 4/} --sharding full-shard --metrics_file "$W/mf.jsonl" >/dev/null 2>&1
$PY - "$W/m.jsonl" "$W/mf.jsonl" <<'PYEOF'
import json, sys
m = json.loads(open(sys.argv[1]).read().splitlines()[-1])["mem"]
full = json.loads(open(sys.argv[2]).read().splitlines()[-1])["mem"]
# q_proj (128x128) and v_proj (64x128) at r=4 in each of the 4 blocks: A (4, 128) and B (out, 4)
adapters = 4 * ((4 * 128 + 128 * 4) + (4 * 128 + 64 * 4))
unit = adapters // 4
opt, grads = m["optimizer"][3], m["grads"][3]  # the peak, the largest over ranks
ok = opt == 2 * 4 * adapters // 2 and 4 * adapters // 2 <= grads <= 4 * adapters // 2 + 4 * 4 * unit + 4096
print(f"optimizer {opt} B (adapters' moments {2 * 4 * adapters // 2}), gradients {grads} B, full finetuning's {full['grads'][3]} and {full['optimizer'][3]}")
sys.exit(not ok)
PYEOF
check "np=2 full-shard: the tracker's optimizer bytes are the adapters' moments' shard exactly, gradients within one adapter unit of their shard" $? \
    "$(grep -m2 error "$W/m.log")"

# ---- a bf16 base (--precision bf16): the frozen units stored as bf16 values, 2 bytes each ----
# the values its gathers rounded the fp32 master to before: at --lr 0 (the base alone computes,
# B stays zero) the losses equal full finetuning's, whose gathers round an fp32 master, bit for bit
Z="--train_data data/tinyshakespeare.txt --max_steps 3 $ONE --precision bf16 --lr 0 --min_lr 0 --warmup 0"
for lay in "1 --batch_size 4" "2 --batch_size 2 --sharding full-shard" "2 --batch_size 2 --sharding no-shard" \
    "2 --batch_size 4 --tensor_parallel_degree 2" "4 --batch_size 2 --tensor_parallel_degree 2 --model_type mingpt"; do
    set -- $lay
    np=$1
    shift
    rm -f "$W/z-full.jsonl" "$W/z-lora.jsonl"  # a metrics file is appended to
    $MPI -np $np ./fsdpc $Z "$@" --metrics_file "$W/z-full.jsonl" >/dev/null 2>"$W/z-full.log"
    $MPI -np $np ./fsdpc $Z "$@" --lora_rank 8 --lora_target_modules all-linear --metrics_file "$W/z-lora.jsonl" >/dev/null 2>"$W/z-lora.log"
    [ "$(losses "$W/z-full.jsonl")" = "$(losses "$W/z-lora.jsonl")" ] && [ "$(wc -l <"$W/z-lora.jsonl")" = 3 ]
    ok=$?
    check "bf16 base np=$np $*: the losses at --lr 0 equal full finetuning's bit for bit ($(losses "$W/z-lora.jsonl" | tr '\n' ' '))" $ok \
        "$(grep -m2 error "$W/z-lora.log" "$W/z-full.log")"
done
# the tracker: the rank's share of the frozen parameters at 2 bytes each
$MPI -np 2 ./fsdpc $M --sharding full-shard --precision bf16 --metrics_file "$W/mb.jsonl" >/dev/null 2>"$W/mb.log"
bpp=$($PY - "$W/mb.jsonl" <<'PYEOF'
import json, sys
m = json.loads(open(sys.argv[1]).read().splitlines()[-1])["mem"]
# tiny llama: V 256, D 128, 4 blocks of 2 norms, q/o (D, D), k/v (KVhd, D), gate/up/down (F, D); the
# adapters (q_proj, v_proj at r=4) stay fp32, half of them per rank; params[1]: the bytes held now
V, D, KVhd, F, L = 256, 128, 64, 344, 4
adapters = L * ((4 * 128 + 128 * 4) + (4 * 128 + 64 * 4))
frozen = 2 * V * D + D + L * (2 * D + 2 * D * D + 2 * KVhd * D + 3 * F * D)
bpp = (m["params"][1] - 4 * adapters / 2) / (frozen / 2)
print("%.3f" % bpp)
sys.exit(not 1.95 < bpp < 2.05)
PYEOF
)
check "bf16 base np=2 full-shard: the tracker's params hold $bpp bytes per frozen parameter of the rank's share (about 2)" $? \
    "$(grep -m2 error "$W/mb.log")"
# under tensor parallelism each tp rank stores its part of the base in bf16: at np=2 tp 2 the same
# share as np=2 full-shard, and a checkpoint of it holds the np=1 run's frozen values exactly
T2="--train_data data/tinyshakespeare.txt --batch_size 2 --max_steps 3 --num_threads 1 --validation_freq 0 --num_tokens 0
    --lora_rank 4 --precision bf16 --checkpoint_freq 3"
$MPI -np 2 ./fsdpc $T2 --tensor_parallel_degree 2 --checkpoint_dir "$W/tk2" --metrics_file "$W/mt.jsonl" >/dev/null 2>"$W/mt.log"
./fsdpc $T2 --checkpoint_dir "$W/tk1" --metrics_file "$W/mt1.jsonl" >/dev/null 2>"$W/mt1.log"
r=$($PY - "$W/mt.jsonl" "$W/mb.jsonl" <<'PYEOF'
import json, sys
# the same share of the frozen base per rank (half), but the tp ranks both hold the norms and the
# adapters' whole factors: within 5%
a, b = (json.loads(open(f).read().splitlines()[-1])["mem"]["params"][1] for f in sys.argv[1:])
print("%.3f" % (a / b))
sys.exit(not 0.97 < a / b < 1.05)
PYEOF
)
check "bf16 base np=2 tp 2: the tracker's params bytes are np=2 full-shard's ($r of them: the base in bf16, split over the tp ranks)" $? \
    "$(grep -m2 error "$W/mt.log")"
d=$(rel_diff "$W/mt1.jsonl" "$W/mt.jsonl" 3 1e-5)
check "bf16 base np=2 tp 2 equals np=1 (worst $d)" $? "$(grep -m2 error "$W/mt.log" "$W/mt1.log")"
$PY - "$W/tk1/step_00000003.h5" "$W/tk2/step_00000003.h5" <<'PYEOF'
import sys, h5py, numpy as np
a, b = (h5py.File(f, "r")["model"] for f in sys.argv[1:])
frozen = [k for k in a if ".lora_" not in k]
bad = [k for k in frozen if not np.array_equal(a[k][()], b[k][()])]
print(f"{len(frozen)} frozen tensors, {len(bad)} differ: {bad[:3]}")
sys.exit(bool(bad) or not frozen)
PYEOF
check "bf16 base: the np=2 tp 2 checkpoint's frozen tensors equal np=1's exactly" $?
# resume: np=1's checkpoint at step 3 continues at np=2 bit for bit (on the emulated GPU, whose
# bf16 runs at np=1 and np=2 are the same bit for bit; the CPU's sum their gradients in other
# orders); the frozen tensors are fp32 datasets of bf16 values
R="--tokenizer byte --hidden_width 32 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 64
   --max_context_width 16 --max_steps 6 --lr 3e-3 --warmup 1 $ONE --train_data data/tinyshakespeare.txt --lora_rank 4
   --lora_target_modules all-linear --lora_dropout 0.1 --device cuda --precision bf16"
./build/fsdpc_emu $R --batch_size 2 --checkpoint_dir "$W/bk" --checkpoint_freq 3 --metrics_file "$W/bu1.jsonl" >/dev/null 2>"$W/bk1.log"
$MPI -np 2 ./build/fsdpc_emu $R --batch_size 1 --checkpoint_dir "$W/bk" --resume_from_checkpoint "$W/bk/step_00000003.h5" \
    --checkpoint_freq 0 --metrics_file "$W/br2.jsonl" >/dev/null 2>"$W/br2.log"
[ "$(losses "$W/br2.jsonl")" = "$(losses "$W/bu1.jsonl" | tail -3)" ] && [ "$(wc -l <"$W/br2.jsonl")" = 3 ]
ok=$?
check "bf16 base: np=1's step-3 checkpoint resumed at np=2: steps 4-6 equal the uninterrupted run bit for bit" $ok \
    "$(grep -m2 -E 'error|emu' "$W/br2.log" "$W/bk1.log")"
$PY - "$W/bk/step_00000003.h5" <<'PYEOF'
import sys, h5py, numpy as np
m = h5py.File(sys.argv[1], "r")["model"]
frozen = [k for k in m if ".lora_" not in k]
bad = [k for k in frozen if m[k].dtype != "float32" or np.any(m[k][()].view(np.uint32) & 0xFFFF)]
print(f"{len(frozen)} frozen tensors, {len(bad)} not bf16 values in fp32: {bad[:3]}")
sys.exit(bool(bad) or not frozen)
PYEOF
check "the bf16 base's checkpoint stores each frozen tensor as an fp32 dataset of bf16 values" $?

# ---- refusals ----
expect_error "an adapter on a layer the family lacks" "has no linear layer 'qkv_proj' \(its layers: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj" \
    ./fsdpc $F --lora_rank 4 --lora_target_modules q_proj,qkv_proj
expect_error "a rank larger than a layer" "--lora_rank 200 is larger than model.layers.0.self_attn.q_proj \(128 x 128\)" \
    ./fsdpc $F --lora_rank 200
expect_error "LoRA settings without --lora_rank" "--lora_dropout applies to LoRA adapters" ./fsdpc $F --lora_dropout 0.1
expect_error "a negative rank" "--lora_rank must be >= 0" ./fsdpc $F --lora_rank -2
expect_error "dropout of 1" "--lora_dropout must be in \[0, 1\)" ./fsdpc $F --lora_rank 2 --lora_dropout 1
expect_error "adapter dropout on the experts" "--lora_dropout with adapters on the experts .*drop --lora_dropout or the experts" \
    ./fsdpc $F --model_name mixtral_tiny --lora_rank 2 --lora_target_modules w1,gate --lora_dropout 0.1
expect_error "some experts adapted, not all" "adapts model.layers.0.block_sparse_moe.experts.0.w1.weight but not .*experts.1.w1" \
    ./fsdpc $F --model_name mixtral_tiny --lora_rank 2 --lora_target_modules experts.0.w1
expect_error "a layer the family lacks lists the experts and router" "its layers: q_proj, k_proj, v_proj, o_proj, gate, w1, w3, w2" \
    ./fsdpc $F --model_name mixtral_tiny --lora_rank 2 --lora_target_modules gate_proj
expect_error "adapter dropout on a row-parallel layer under tp" "--lora_dropout with --tensor_parallel_degree 2 on o_proj" \
    $MPI -np 2 ./fsdpc $F --lora_rank 2 --lora_target_modules q_proj,o_proj --lora_dropout 0.1 --tensor_parallel_degree 2
expect_error "no module named" "--lora_target_modules names no module" ./fsdpc $F --lora_rank 2 --lora_target_modules " , "

# ---- the emulated GPU: the CUDA kernels of the adapters (column adds, bf16 dropout) against the CPU ----
G="--tokenizer byte --hidden_width 32 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 64 --max_context_width 16
   --batch_size 2 --max_steps 3 --lr 3e-3 --warmup 1 $ONE --train_data data/tinyshakespeare.txt --lora_rank 4
   --lora_target_modules all-linear --lora_dropout 0.1"
run g-cpu ./fsdpc $G --device cpu
run g-gpu ./build/fsdpc_emu $G --device cuda
d=$(rel_diff "$W/g-cpu.jsonl" "$W/g-gpu.jsonl" 3 1e-6)
check "emulated GPU, fp32: LoRA with adapter dropout equals the CPU (worst $d)" $? "$(grep -m2 -E 'error|emu' "$W/g-gpu.log")"
run g-bf1 ./build/fsdpc_emu $G --device cuda --precision bf16
$MPI -np 2 ./build/fsdpc_emu $G --device cuda --precision bf16 --batch_size 1 --metrics_file "$W/g-bf2.jsonl" >/dev/null 2>"$W/g-bf2.log"
d=$(rel_diff "$W/g-cpu.jsonl" "$W/g-bf1.jsonl" 3 1e-3) && [ "$(losses "$W/g-bf1.jsonl")" = "$(losses "$W/g-bf2.jsonl")" ]
check "emulated GPU, bf16: within 1e-3 of the CPU's fp32 (worst $d), and np=2 equals np=1 bit for bit" $? \
    "$(grep -m2 -E 'error|emu' "$W/g-bf1.log" "$W/g-bf2.log")"
# the experts' adapters through the CUDA grouped GEMMs, at ep 1 and ep 2
GX="${G/--lora_dropout 0.1/} --model_name mixtral_tiny"
run gx-cpu ./fsdpc $GX --device cpu
run gx-gpu ./build/fsdpc_emu $GX --device cuda
$MPI -np 2 ./build/fsdpc_emu $GX --device cuda --batch_size 1 --ep 2 --metrics_file "$W/gx-ep2.jsonl" >/dev/null 2>"$W/gx-ep2.log"
d=$(rel_diff "$W/gx-cpu.jsonl" "$W/gx-gpu.jsonl" 3 1e-6) && e=$(rel_diff "$W/gx-cpu.jsonl" "$W/gx-ep2.jsonl" 3 1e-5)
check "emulated GPU, fp32: Mixtral with adapted experts and router equals the CPU at ep 1 (worst $d) and ep 2 (worst $e)" $? \
    "$(grep -m2 -E 'error|emu' "$W/gx-gpu.log" "$W/gx-ep2.log")"
