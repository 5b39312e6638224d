#!/usr/bin/env bash
# Mixtral: Mistral's attention and a sparse MLP of experts (router softmax, top-K renormalised,
# dropless). The model-level parity dump (logits, the loss with the load-balancing and z losses,
# gradients, 5 AdamW steps) equals the PyTorch reference; losses and router losses are equal at
# np=1/2/4 (full and hybrid sharding, activation checkpointing); a PyTorch-made MixtralForCausalLM
# imports (greedy text and training loss equal the reference), checkpoints, resumes and exports
# back; the recipes' spellings; bad sizes and layouts are refused by name. Expert parallelism:
# the same losses at every ep degree, strategy and tp degree, checkpoints that resume across degrees (bit for
# bit at the same one), a one-expert imbalance, generation, and the emulated GPU's all-to-all.
cd "$(dirname "$0")/../.."
source test/lib.sh
PY=/usr/bin/python3
ONE="--num_threads 1 --checkpoint_freq 0 --validation_freq 0"

# ---- model-level parity: E=4, K=2, router losses on ----
build/test_model --dump "$W/dump" mixtral --num_experts 4 --num_experts_per_tok 2 --router_aux_loss_coef 0.02 \
    --router_z_loss_coef 0.001 >"$W/dump.log" 2>&1
check "the parity dump of a tiny Mixtral (4 experts, 2 per token)" $? "$(tail -c 300 "$W/dump.log")"
$PY test/ref/parity.py "$W/dump/step_00000000.h5" | sed 's/^\(not \)\{0,1\}ok - /&mixtral /'

# ---- the same losses at every layout ----
router_diff() {  # the worst relative difference of two metrics files' router losses; fails above 1e-6
    $PY - "$1" "$2" <<'PYEOF'
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
w = max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(a, b) for k in ("router_aux_loss", "router_z_loss"))
print("%.1e" % w)
sys.exit(not (len(a) == len(b) > 0 and w <= 1e-6))
PYEOF
}
F="--model_name mixtral_tiny --num_layers 2 --train_data data/tinyshakespeare.txt --max_steps 6 $ONE --router_aux_loss_coef 0.02 --router_z_loss_coef 0.001"
./fsdpc $F --batch_size 4 --metrics_file "$W/np1.jsonl" >/dev/null 2>"$W/np1.log"
check "np=1 trains a Mixtral with router losses" $? "$(grep -m2 error "$W/np1.log")"
grep -q '"router_aux_loss": [0-9]' "$W/np1.jsonl" && grep -q "router aux: [0-9.]*, router z: [0-9.]*" "$W/np1.log"
check "the metrics and the log line carry the router's load-balancing and z losses" $?
# the router losses' global batch spans the micro-batches too: --grad_accum runs a routing pass first
# expert parallelism: E/ep experts per rank (sharded over their shard group's ranks with the same
# experts, or whole), tokens to them by all-to-all
layouts=("2 --batch_size 2 --sharding full-shard" "4 --batch_size 1 --sharding hybrid-full-shard --shard_group_size 2"
         "2 --batch_size 2 --sharding full-shard --activation_checkpoints 1" "4 --batch_size 1 --sharding no-shard --selective_checkpointing 2"
         "1 --batch_size 2 --grad_accum 2" "2 --batch_size 1 --grad_accum 2 --sharding full-shard --activation_checkpoints 1"
         "2 --batch_size 2 --ep 2" "4 --batch_size 1 --expert_parallel_degree 4" "4 --batch_size 1 --ep 2 --sharding hybrid-full-shard --shard_group_size 2"
         "4 --batch_size 1 --ep 2 --sharding no-shard" "4 --batch_size 1 --ep 2 --sharding grad-shard"
         "2 --batch_size 1 --grad_accum 2 --ep 2 --activation_checkpoints 1" "2 --batch_size 1 --grad_accum 2 --ep 2 --accumulate_unsharded 1"
         "2 --batch_size 4 --tensor_parallel_degree 2" "4 --batch_size 2 --tensor_parallel_degree 2 --ep 2 --activation_checkpoints 1")
for i in "${!layouts[@]}"; do
    set -- ${layouts[$i]}
    np=$1
    shift
    $MPI -np $np ./fsdpc $F "$@" --metrics_file "$W/l$i.jsonl" >/dev/null 2>"$W/l$i.log"
    d=$(rel_diff "$W/np1.jsonl" "$W/l$i.jsonl" 6 1e-5)
    ok=$?
    r=$(router_diff "$W/np1.jsonl" "$W/l$i.jsonl") || ok=1
    check "np=$np $* equals np=1 at every step (worst $d), router losses too (worst $r)" $ok "$(grep -m2 error "$W/l$i.log")"
done
./fsdpc $F --dropout 0.1 --batch_size 4 --metrics_file "$W/da.jsonl" >/dev/null 2>&1
$MPI -np 2 ./fsdpc $F --dropout 0.1 --batch_size 1 --grad_accum 2 --metrics_file "$W/db.jsonl" >/dev/null 2>"$W/db.log"
d=$(rel_diff "$W/da.jsonl" "$W/db.jsonl" 6 1e-5) && r=$(router_diff "$W/da.jsonl" "$W/db.jsonl")
check "dropout 0.1: np=2 x --grad_accum 2 equals np=1 (the routing pass draws the training pass's masks; worst $d, router $r)" $? \
    "$(grep -m2 error "$W/db.log")"
# packed rows whose padding differs at each world size: the router losses count the loss-bearing tokens
padded_rows "$W/rows.jsonl" 5 400 999
P="${F/--train_data data\/tinyshakespeare.txt/--train_data $W/rows.jsonl} --packing --max_context_width 80 --vocab_size 1000 --max_steps 4"
./fsdpc $P --batch_size 8 --metrics_file "$W/pa.jsonl" >/dev/null 2>"$W/pa.log"
$MPI -np 4 ./fsdpc $P --batch_size 2 --metrics_file "$W/pb.jsonl" >/dev/null 2>"$W/pb.log"
d=$(rel_diff "$W/pa.jsonl" "$W/pb.jsonl" 4 1e-5) && r=$(router_diff "$W/pa.jsonl" "$W/pb.jsonl")
check "--packing (padding differs per layout): np=4 equals np=1, router losses too (worst $d, router $r)" $? \
    "$(grep -m2 error "$W/pa.log" "$W/pb.log")"
# CPU bf16: the routing pass rounds the residual stream as the training pass does
./fsdpc $F --precision bf16 --batch_size 4 --max_steps 1 --metrics_file "$W/ba.jsonl" >/dev/null 2>&1
./fsdpc $F --precision bf16 --batch_size 2 --grad_accum 2 --max_steps 1 --metrics_file "$W/bb.jsonl" >/dev/null 2>&1
r=$(router_diff "$W/ba.jsonl" "$W/bb.jsonl")
check "CPU bf16: the first step's router losses at --grad_accum 2 equal batch 4's (worst $r)" $?
./fsdpc $F --router_jitter_noise 0.1 --batch_size 4 --metrics_file "$W/ja.jsonl" >/dev/null 2>&1
$MPI -np 2 ./fsdpc $F --router_jitter_noise 0.1 --batch_size 1 --grad_accum 2 --activation_checkpoints 1 --metrics_file "$W/jb.jsonl" \
    >/dev/null 2>"$W/jb.log"
d=$(rel_diff "$W/ja.jsonl" "$W/jb.jsonl" 6 1e-5) && r=$(router_diff "$W/ja.jsonl" "$W/jb.jsonl") && ! cmp -s "$W/ja.jsonl" "$W/np1.jsonl"
check "router jitter 0.1: np=2 x --grad_accum 2 with checkpointing equals np=1 (a layout-free draw; worst $d, router $r), and differs from none" $? \
    "$(grep -m2 error "$W/jb.log")"
./fsdpc ${F/--router_aux_loss_coef 0.02 --router_z_loss_coef 0.001/} --batch_size 2 --grad_accum 2 --metrics_file "$W/ga.jsonl" >/dev/null 2>"$W/ga.log"
./fsdpc ${F/--router_aux_loss_coef 0.02 --router_z_loss_coef 0.001/} --batch_size 4 --metrics_file "$W/gc.jsonl" >/dev/null 2>&1
r=$(router_diff "$W/gc.jsonl" "$W/ga.jsonl") && ! grep -q "routing pass" "$W/ga.log" &&
    grep -q "^mixture of experts: the router losses span a step's micro-batches (--grad_accum 2), so a step of several runs a routing pass" "$W/db.log"
check "router losses logged without training them (coefficients 0) cover every micro-batch (worst $r) with no routing pass; with them, one, said at start-up" $?

# ---- the emulated GPU (build/fsdpc_emu): the CUDA routing, grouping and combining kernels ----
if [ -x build/fsdpc_emu ]; then
    EM="--model_name mixtral_tiny --hidden_width 32 --num_layers 2 --num_heads 2 --num_key_value_heads 1 --intermediate_size 48
        --max_context_width 16 --batch_size 2 --max_steps 3 --lr 3e-3 --warmup 1 $ONE --num_tokens 0
        --train_data data/tinyshakespeare.txt --router_aux_loss_coef 0.02 --router_z_loss_coef 0.001 --router_jitter_noise 0.1"
    for p in float32:1e-6 bf16:5e-3; do
        timeout 300 ./fsdpc $EM --device cpu --precision ${p%%:*} --metrics_file "$W/ecpu_${p%%:*}.jsonl" >/dev/null 2>&1
        timeout 300 ./build/fsdpc_emu $EM --device cuda --precision ${p%%:*} --metrics_file "$W/egpu_${p%%:*}.jsonl" >"$W/egpu.log" 2>&1
        d=$(rel_diff "$W/ecpu_${p%%:*}.jsonl" "$W/egpu_${p%%:*}.jsonl" 3 ${p#*:}) && grep -q "CPU emulation" "$W/egpu.log"
        check "emulated GPU, ${p%%:*}: a Mixtral's losses track the CPU's within ${p#*:} (worst $d)" $? "$(grep -m2 error "$W/egpu.log")"
        # without libcublas the experts' GEMMs loop over cuBLASLt instead of one grouped call each
        timeout 300 env FSDPC_EMU_CUBLAS=missing ./build/fsdpc_emu $EM --device cuda --precision ${p%%:*} \
            --metrics_file "$W/eloop_${p%%:*}.jsonl" >"$W/eloop.log" 2>&1
        lt="$lt ${p%%:*} $(rel_diff "$W/egpu_${p%%:*}.jsonl" "$W/eloop_${p%%:*}.jsonl" 3 1e-5)" || lt_rc=1
    done
    check "emulated GPU: the experts' GEMMs as a loop of cuBLASLt products (FSDPC_EMU_CUBLAS=missing) give the grouped calls' losses within 1e-5 (worst:$lt)" \
        ${lt_rc:-0} "$(grep -m2 error "$W/eloop.log")"
else
    check "emulated GPU # SKIP build/fsdpc_emu is not built (make build/fsdpc_emu)" 0
fi

# ---- Hugging Face: import, generation, loss, checkpoint, export ----
PROMPT="Hello there, mixture"
$PY test/ref/hf_make.py "$W/m" --vocab 256 --seed 7 --experts 4,2 --shards 2
check "a Hugging Face MixtralForCausalLM directory (2 shards) made by PyTorch" $?
$PY test/ref/hf_ref.py generate "$PROMPT" 24 "$W/m" "$W/ref.m"
gen() {  # gen OUT CMD...: the greedy text of an fsdpc command line
    local out=$1
    shift
    "$@" --max_steps 0 --allow_random_weights --prompt "$PROMPT" --num_tokens 24 --temperature 0 $ONE >"$W/$out" 2>"$W/$out.log"
}
gen gen.m ./fsdpc --init_from "$W/m"
cmp -s "$W/gen.m" "$W/ref.m" && [ "$(wc -c <"$W/gen.m")" -gt 40 ]
check "imported Mixtral: greedy text equals the PyTorch reference (KV cache)" $? "$(grep -m2 error "$W/gen.m.log")"
gen gen.np2 $MPI -np 2 ./fsdpc --init_from "$W/m" --sharding full-shard
cmp -s "$W/gen.np2" "$W/ref.m"
check "np=2 full-shard generates the same" $?
if [ -x build/fsdpc_emu ]; then
    gen gen.emu timeout 300 ./build/fsdpc_emu --init_from "$W/m" --device cuda --train_data data/tinyshakespeare.txt
    cmp -s "$W/gen.emu" "$W/ref.m"
    check "the emulated GPU generates the same (its KV cache and routing kernels)" $? "$(grep -m2 error "$W/gen.emu.log")"
fi
head -c 257 data/tinyshakespeare.txt >"$W/four.txt"
ref_loss=$($PY test/ref/hf_ref.py loss "$W/m" "$W/four.txt")
./fsdpc --init_from "$W/m" --train_data "$W/four.txt" --max_steps 1 --batch_size 4 $ONE --metrics_file "$W/hl.jsonl" >/dev/null 2>"$W/hl.log"
awk -v a="$(losses "$W/hl.jsonl")" -v b="$ref_loss" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5) }'
ok=$?  # before the message's $(...), which would set $? again
check "imported Mixtral: training loss equals the reference's ($(losses "$W/hl.jsonl") vs $ref_loss)" $ok "$(grep -m2 error "$W/hl.log")"
# the worst imbalance: routers of 0 tie every token's probabilities, so all go to expert 0 (K=1);
# dropless, each still gets its expert: the reference's text and loss, the balance loss E x 1 x 1/E
$PY test/ref/hf_make.py "$W/z" --vocab 256 --seed 3 --experts 4,1 --zero_router
$PY test/ref/hf_ref.py generate "$PROMPT" 24 "$W/z" "$W/ref.z"
ref_loss=$($PY test/ref/hf_ref.py loss "$W/z" "$W/four.txt")
for dev in cpu cuda; do
    bin=./fsdpc
    [ $dev = cuda ] && bin=./build/fsdpc_emu && [ ! -x $bin ] && continue
    gen gen.z timeout 300 $bin --init_from "$W/z" --device $dev --train_data data/tinyshakespeare.txt
    timeout 300 $bin --init_from "$W/z" --device $dev --train_data "$W/four.txt" --max_steps 1 --batch_size 4 $ONE \
        --router_aux_loss_coef 0.1 --metrics_file "$W/z.$dev.jsonl" >/dev/null 2>"$W/z.log"
    cmp -s "$W/gen.z" "$W/ref.z" && grep -q '"router_aux_loss": 1,' "$W/z.$dev.jsonl" &&
        awk -v a="$(losses "$W/z.$dev.jsonl")" -v b="$ref_loss" 'BEGIN { d = (a - 0.1 - b) / b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5) }'
    check "$dev: every token routed to one expert: the reference's text and loss, plus 0.1 x a balance loss of exactly 1" $? \
        "$(grep -m2 error "$W/z.log" "$W/gen.z.log") $(cut -c1-160 "$W/z.$dev.jsonl") ref $ref_loss"
done
KEEP="--max_steps 2 --lr 0 --min_lr 0 --warmup 0 --train_data synthetic --batch_size 1 --num_threads 1 --validation_freq 0 --checkpoint_freq 2"
./fsdpc --init_from "$W/m" $KEEP --checkpoint_dir "$W/k" >/dev/null 2>"$W/k.log"
$PY -c 'import h5py,sys; f=h5py.File(sys.argv[1]); a=f.attrs
sys.exit(not (a["model_type"] == b"mixtral" and int(a["num_experts"]) == 4 and int(a["num_experts_per_tok"]) == 2
              and "model.layers.1.block_sparse_moe.experts.3.w2.weight" in f["model"]))' "$W/k/step_00000002.h5" 2>"$W/k.py"
check "the checkpoint records the experts and holds each under its Hugging Face name" $? "$(grep -m2 error "$W/k.log") $(tail -1 "$W/k.py")"
./fsdpc export --checkpoint "$W/k/step_00000002.h5" --output "$W/exp" --dtype fp32 >/dev/null 2>"$W/x.log"
$PY -c 'import json,sys; c=json.load(open(sys.argv[1]))
sys.exit(not (c["architectures"] == ["MixtralForCausalLM"] and c["model_type"] == "mixtral" and c["num_local_experts"] == 4
              and c["num_experts_per_tok"] == 2 and c["output_router_logits"] is False and c["sliding_window"] is None
              and c["rope_theta"] == 1e6))' "$W/exp/config.json"
check "export writes a Mixtral config.json (architecture, experts, router keys, no window)" $? "$(tail -c 300 "$W/x.log")"
$PY test/ref/hf_ref.py generate "$PROMPT" 24 "$W/exp" "$W/ref.exp"
cmp -s "$W/ref.exp" "$W/ref.m"
check "the export generates in the reference what the source does" $?
./fsdpc --model_name mixtral_tiny --num_layers 2 --train_data data/tinyshakespeare.txt --batch_size 2 $ONE --max_steps 4 \
    --checkpoint_freq 2 --checkpoint_dir "$W/r" --metrics_file "$W/r.jsonl" >/dev/null 2>"$W/r.log"
$MPI -np 2 ./fsdpc --model_name mixtral_tiny --num_layers 2 --train_data data/tinyshakespeare.txt --batch_size 1 $ONE \
    --max_steps 4 --resume_from_checkpoint "$W/r/step_00000002.h5" --metrics_file "$W/r2.jsonl" >/dev/null 2>"$W/r2.log"
tail -2 "$W/r.jsonl" >"$W/r34.jsonl"
d=$(rel_diff "$W/r34.jsonl" "$W/r2.jsonl" 2 1e-5) && r=$(router_diff "$W/r34.jsonl" "$W/r2.jsonl")
check "a Mixtral checkpoint resumes at np=2 with the uninterrupted run's steps 3-4 (worst $d, router $r)" $? "$(grep -m2 error "$W/r2.log")"

# ---- expert parallelism: resume across degrees, the worst imbalance, generation, the GPU path ----
T0="--train_data data/tinyshakespeare.txt --batch_size 2 $ONE --max_steps 1"
EPF="--model_name mixtral_tiny --num_layers 2 --train_data data/tinyshakespeare.txt $ONE --router_aux_loss_coef 0.02"
./fsdpc $EPF --batch_size 4 --max_steps 4 --metrics_file "$W/e1.jsonl" >/dev/null 2>"$W/e1.log"
$MPI -np 2 ./fsdpc $EPF --batch_size 2 --ep 2 --max_steps 4 --metrics_file "$W/e2.jsonl" >/dev/null 2>"$W/e2.log"
$MPI -np 2 ./fsdpc $EPF --batch_size 2 --ep 2 --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/ek" >/dev/null 2>"$W/ek.log"
check "ep 2 saves a checkpoint" $? "$(grep -m2 error "$W/ek.log")"
$MPI -np 2 ./fsdpc $EPF --batch_size 2 --ep 2 --max_steps 4 --resume_from_checkpoint "$W/ek/step_00000002.h5" \
    --metrics_file "$W/e2r.jsonl" >/dev/null 2>"$W/e2r.log"
tail -2 "$W/e2.jsonl" | steady >"$W/e2t.jsonl"
steady "$W/e2r.jsonl" | cmp -s - "$W/e2t.jsonl"
check "resumed at ep 2, steps 3-4 are bit for bit the uninterrupted ep 2 run's" $? "$(grep -m2 error "$W/e2r.log")"
tail -2 "$W/e1.jsonl" >"$W/e1t.jsonl"
k=0
for lay in "1 --batch_size 4" "4 --batch_size 1 --ep 4 --sharding hybrid-full-shard --shard_group_size 2"; do
    set -- $lay
    k=$((k + 1))
    np=$1
    shift
    $MPI -np $np ./fsdpc $EPF "$@" --max_steps 4 --resume_from_checkpoint "$W/ek/step_00000002.h5" \
        --metrics_file "$W/er$k.jsonl" >/dev/null 2>"$W/er$k.log"
    d=$(rel_diff "$W/e1t.jsonl" "$W/er$k.jsonl" 2 1e-5) && r=$(router_diff "$W/e1t.jsonl" "$W/er$k.jsonl")
    check "the ep 2 checkpoint resumes at np=$np $* with the 1-rank run's steps 3-4 (worst $d, router $r)" $? \
        "$(grep -m2 error "$W/er$k.log")"
done
# a flipped value in one expert's tensor: whichever ranks hold it, its checksum names it
cp "$W/ek/step_00000002.h5" "$W/ekx.h5"
$PY -c 'import h5py,sys; d=h5py.File(sys.argv[1], "r+")["model/model.layers.1.block_sparse_moe.experts.3.w2.weight"]; a=d[...]; a[5, 7] += 1; d[...]=a' "$W/ekx.h5"
expect_error "ep 4 resuming a checkpoint with a corrupted expert tensor" "tensor /model/model.layers.1.block_sparse_moe.experts.3.w2.weight fails its checksum" \
    $MPI -np 4 ./fsdpc $EPF --batch_size 1 --ep 4 --max_steps 4 --resume_from_checkpoint "$W/ekx.h5"
# every token to expert 0, which only ep rank 0 holds: it computes them all (dropless)
ref_loss=$($PY test/ref/hf_ref.py loss "$W/z" "$W/four.txt")
for bin in ./fsdpc build/fsdpc_emu; do
    [ -x $bin ] || continue
    dev=cpu
    [ $bin = build/fsdpc_emu ] && dev=cuda
    timeout 300 $MPI -np 2 $bin --init_from "$W/z" --ep 2 --device $dev --train_data "$W/four.txt" --max_steps 1 --batch_size 2 \
        $ONE --router_aux_loss_coef 0.1 --metrics_file "$W/ze.$dev.jsonl" >/dev/null 2>"$W/ze.log"
    awk -v a="$(losses "$W/ze.$dev.jsonl")" -v b="$ref_loss" 'BEGIN { d = (a - 0.1 - b) / b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5) }'
    check "$dev ep 2: every token to the expert of one rank, the reference's loss (dropless)" $? \
        "$(grep -m2 error "$W/ze.log") $(cut -c1-120 "$W/ze.$dev.jsonl") ref $ref_loss"
done
gen gen.ep $MPI -np 4 ./fsdpc --init_from "$W/m" --ep 4
cmp -s "$W/gen.ep" "$W/ref.m"
check "np=4 ep 4 generates the reference's greedy text (every expert gathered)" $? "$(grep -m2 error "$W/gen.ep.log")"
gen gen.tp $MPI -np 4 ./fsdpc --init_from "$W/m" --ep 2 --tensor_parallel_degree 2
cmp -s "$W/gen.tp" "$W/ref.m"
check "np=4 ep 2 x tp 2 generates the reference's greedy text" $? "$(grep -m2 error "$W/gen.tp.log")"
if [ -x build/fsdpc_emu ]; then
    timeout 300 $MPI -np 2 build/fsdpc_emu --device cuda $EPF --batch_size 2 --ep 2 --max_steps 4 --metrics_file "$W/eg.jsonl" \
        >/dev/null 2>"$W/eg.log"
    d=$(rel_diff "$W/e1.jsonl" "$W/eg.jsonl" 4 1e-5)
    check "the emulated GPU at ep 2 (NCCL's grouped send/recv) equals the 1-rank CPU run (worst $d)" $? "$(grep -m2 error "$W/eg.log")"
fi

# ---- --capacity_factor: drops by the step's global token order, the same at every layout ----
CF="$EPF --max_steps 3 --router_z_loss_coef 0.001"
./fsdpc $CF --batch_size 4 --capacity_factor 0.8 --metrics_file "$W/c0.jsonl" >/dev/null 2>"$W/c0.log"
$PY -c 'import json,sys; d=[json.loads(l)["router_dropped"] for l in open(sys.argv[1])]; sys.exit(not (len(d) == 3 and all(0.05 < x < 0.9 for x in d)))' \
    "$W/c0.jsonl" && grep -q "dropped: [0-9.]*%" "$W/c0.log"
check "--capacity_factor 0.8 drops a share of the assignments, in the metrics and the log line" $? "$(grep -m2 error "$W/c0.log") $(head -c 300 "$W/c0.jsonl")"
k=0
for lay in "2 --batch_size 2" "4 --batch_size 1 --ep 4 --activation_checkpoints 1" "4 --batch_size 1 --ep 2 --sharding hybrid-full-shard --shard_group_size 2" \
    "4 --batch_size 2 --tensor_parallel_degree 2 --ep 2"; do
    set -- $lay
    np=$1
    shift
    k=$((k + 1))
    $MPI -np $np ./fsdpc $CF --capacity_factor 0.8 "$@" --metrics_file "$W/c$k.jsonl" >/dev/null 2>"$W/c$k.log"
    d=$(rel_diff "$W/c0.jsonl" "$W/c$k.jsonl" 3 1e-5) &&
        $PY -c 'import json,sys; a, b = ([json.loads(l)["router_dropped"] for l in open(f)] for f in sys.argv[1:]); sys.exit(a != b)' "$W/c0.jsonl" "$W/c$k.jsonl"
    check "capacity 0.8 at np=$np $*: the 1-rank run's losses (worst $d) and dropped shares" $? "$(grep -m2 error "$W/c$k.log")"
done
./fsdpc $CF --batch_size 2 --grad_accum 2 --capacity_factor 0.8 --metrics_file "$W/cg0.jsonl" >/dev/null 2>&1
$MPI -np 2 ./fsdpc $CF --batch_size 1 --grad_accum 2 --ep 2 --capacity_factor 0.8 --metrics_file "$W/cg1.jsonl" >/dev/null 2>"$W/cg1.log"
d=$(rel_diff "$W/cg0.jsonl" "$W/cg1.jsonl" 3 1e-5)
check "capacity over a step of 2 micro-batches (the routing pass too): np=2 ep 2 equals np=1 (worst $d)" $? "$(grep -m2 error "$W/cg1.log")"
# a capacity of E/K even shares fits every token: the dropless run bit for bit, nothing dropped
./fsdpc $CF --batch_size 4 --metrics_file "$W/cn.jsonl" >/dev/null 2>&1
./fsdpc $CF --batch_size 4 --capacity_factor 2 --metrics_file "$W/cb.jsonl" >/dev/null 2>&1
[ "$(steady "$W/cn.jsonl")" = "$(steady "$W/cb.jsonl" | sed 's/, "router_dropped": 0//')" ] && grep -q '"router_dropped": 0}' "$W/cb.jsonl"
check "--capacity_factor 2 (4 experts, 2 per token: room for every token) equals dropless routing bit for bit" $?
expect_error "--capacity_factor with --packing" "--capacity_factor with --packing" ./fsdpc --model_name mixtral_tiny --capacity_factor 1 --packing $T0
expect_error "a negative --capacity_factor" "--capacity_factor -1: must be positive" ./fsdpc --model_name mixtral_tiny --capacity_factor -1 $T0

# ---- presets and recipes ----
./fsdpc plan --model_name mixtral_8x7b --world_size 8 --json >"$W/plan.json" 2>"$W/plan.log"
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not 46.6e9 < d["model"]["num_params"] < 46.8e9)' "$W/plan.json"
check "mixtral_8x7b holds Mixtral 8x7B's 46.7B parameters" $? "$(grep -m2 error "$W/plan.log")"

# ---- refusals ----
T="--train_data data/tinyshakespeare.txt --batch_size 2 $ONE --max_steps 1"
expect_error "more experts per token than experts" "--num_experts_per_tok 5: each token goes to 1 to --num_experts 4 experts" \
    ./fsdpc --model_name mixtral_tiny --num_experts_per_tok 5 $T
expect_error "--num_experts on a dense family" "--num_experts applies to the families with experts \(mixtral\)" \
    ./fsdpc --model_name tiny --num_experts 4 $T
expect_error "an ep degree above the data-parallel ranks" "--expert_parallel_degree 2 does not divide the 1 data-parallel ranks" \
    ./fsdpc --model_name mixtral_tiny --ep 2 $T
expect_error "an ep degree that does not divide the experts" "--expert_parallel_degree 3 does not divide --num_experts 4" \
    ./fsdpc plan --model_name mixtral_tiny --ep 3 --world_size 6
expect_error "an ep degree and a shard group that do not nest" "--expert_parallel_degree 2 and the shard group of 3 ranks" \
    ./fsdpc plan --model_name mixtral_tiny --ep 2 --world_size 6 --sharding hybrid-full-shard --shard_group_size 3
expect_error "expert parallelism of a dense model" "applies to a mixture of experts; this model has none" \
    ./fsdpc plan --model_name tiny --ep 2 --world_size 2
expect_error "--ep 0" "--expert_parallel_degree must be at least 1" ./fsdpc --model_name mixtral_tiny --ep 0 $T
expect_error "router jitter of 1 or more" "--router_jitter_noise must be in \[0, 1\)" \
    ./fsdpc --model_name mixtral_tiny --router_jitter_noise 1.5 $T
expect_error "np=2 sequence parallelism of experts" "--sequence_parallel with a mixture of experts" \
    $MPI -np 2 ./fsdpc --model_name mixtral_tiny --tensor_parallel_degree 2 --sequence_parallel $T
$PY test/ref/hf_make.py "$W/miss" --vocab 256 --seed 7 --experts 4,2 --drop model.layers.1.block_sparse_moe.experts.2.w3.weight
expect_error "a Mixtral folder missing an expert tensor" "model.layers.1.block_sparse_moe.experts.2.w3.weight" \
    ./fsdpc --init_from "$W/miss" $T
