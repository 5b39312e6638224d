#!/usr/bin/env bash
# QLoRA (--quantize_base nf4): LoRA adapters over a frozen base whose block linear weights are
# stored in NF4 and dequantised per unit as it is gathered. The same losses at every layout
# (strategies, hybrid, activation checkpointing, grad accumulation, a Mixtral with expert
# parallelism); QLoRA tracks bf16 LoRA; a resume across world sizes is bit-exact and the
# checkpoint holds the packed bytes (uint8, ~0.52 B per weight); the tracker's params bytes and
# fsdpc plan's; the emulated GPU; --init_from Hugging Face weights; export dequantises; bad
# input refused by one line each.
cd "$(dirname "$0")/../.."
source test/lib.sh
PY=/usr/bin/python3
ONE="--num_threads 1 --checkpoint_freq 0 --validation_freq 0 --num_tokens 0 --logging_freq 1"
Q="--lora_rank 8 --lora_target_modules all-linear --quantize_base nf4 --train_data data/tinyshakespeare.txt $ONE"

# ---- the same losses at every layout (global batch 4) ----
./fsdpc $Q --max_steps 4 --batch_size 4 --metrics_file "$W/np1.jsonl" >"$W/np1.log" 2>&1
check "np=1 trains the tiny llama with an NF4 base" $? "$(grep -m2 error "$W/np1.log")"
# tensor parallelism: a unit holding NF4 tensors is stored whole over the shard group's tp ranks,
# each dequantising its part, so the blocks and groups are the whole tensor's at every tp degree
layouts=("2 --batch_size 2" "4 --batch_size 1 --sharding hybrid-full-shard --shard_group_size 2"
         "2 --batch_size 2 --sharding no-shard" "2 --batch_size 2 --sharding grad-shard"
         "2 --batch_size 2 --activation_checkpoints 1" "2 --batch_size 1 --grad_accum 2 --sharding grad-shard"
         "2 --batch_size 4 --tensor_parallel_degree 2" "4 --batch_size 2 --tensor_parallel_degree 2 --sequence_parallel"
         "4 --batch_size 2 --tensor_parallel_degree 2 --sharding hybrid-full-shard --shard_group_size 1")
for i in "${!layouts[@]}"; do
    set -- ${layouts[$i]}
    np=$1
    shift
    $MPI -np $np ./fsdpc $Q --max_steps 4 "$@" --metrics_file "$W/l$i.jsonl" >"$W/l$i.log" 2>&1
    d=$(rel_diff "$W/np1.jsonl" "$W/l$i.jsonl" 4 1e-5)
    check "np=$np $* equals np=1 at every step (worst $d)" $? "$(grep -m2 error "$W/l$i.log")"
done
M="--model_name mixtral_tiny --num_layers 2 --lora_rank 8 --lora_target_modules q_proj,v_proj --quantize_base nf4
   --train_data data/tinyshakespeare.txt $ONE --max_steps 3"
./fsdpc $M --batch_size 4 --metrics_file "$W/m1.jsonl" >"$W/m1.log" 2>&1
$MPI -np 2 ./fsdpc $M --batch_size 2 --ep 2 --metrics_file "$W/m2.jsonl" >"$W/m2.log" 2>&1
d=$(rel_diff "$W/m1.jsonl" "$W/m2.jsonl" 3 1e-5)
check "Mixtral QLoRA (experts and router in NF4): np=2 --ep 2 equals np=1 (worst $d)" $? "$(grep -m2 error "$W/m2.log" "$W/m1.log")"
$MPI -np 4 ./fsdpc $M --batch_size 2 --ep 2 --tensor_parallel_degree 2 --metrics_file "$W/m4.jsonl" >"$W/m4.log" 2>&1
d=$(rel_diff "$W/m1.jsonl" "$W/m4.jsonl" 3 1e-5)
check "Mixtral QLoRA: np=4 --ep 2 x tp 2 equals np=1 (worst $d)" $? "$(grep -m2 error "$W/m4.log")"
# adapters on the NF4 experts and router too (all-linear; rank 4: the router has 4 outputs)
MA="${M/--lora_rank 8 --lora_target_modules q_proj,v_proj/--lora_rank 4 --lora_target_modules all-linear}"
./fsdpc $MA --batch_size 4 --metrics_file "$W/ma1.jsonl" >"$W/ma1.log" 2>&1
$MPI -np 4 ./fsdpc $MA --batch_size 2 --ep 2 --tensor_parallel_degree 2 --metrics_file "$W/ma4.jsonl" >"$W/ma4.log" 2>&1
d=$(rel_diff "$W/ma1.jsonl" "$W/ma4.jsonl" 3 1e-5)
check "Mixtral QLoRA with adapted experts and router: np=4 --ep 2 x tp 2 equals np=1 (worst $d)" $? "$(grep -m2 error "$W/ma4.log" "$W/ma1.log")"
# minGPT: a fused q|k|v split in 3 blocks over the tp ranks, and biases
./fsdpc $Q --model_type mingpt --max_steps 3 --batch_size 4 --metrics_file "$W/g1.jsonl" >"$W/g1.log" 2>&1
$MPI -np 2 ./fsdpc $Q --model_type mingpt --max_steps 3 --batch_size 4 --tensor_parallel_degree 2 --metrics_file "$W/g2.jsonl" \
    >"$W/g2.log" 2>&1
d=$(rel_diff "$W/g1.jsonl" "$W/g2.jsonl" 3 1e-5)
check "minGPT QLoRA (fused c_attn, biases): np=2 tp 2 equals np=1 (worst $d)" $? "$(grep -m2 error "$W/g2.log" "$W/g1.log")"

# ---- QLoRA tracks LoRA: the mean relative loss difference of steps 41-50 below 2% ----
T="--lora_rank 8 --lora_target_modules all-linear --train_data data/tinyshakespeare.txt $ONE --max_steps 50 --batch_size 4
   --lr 3e-3 --warmup 5 --precision bf16"
./fsdpc $T --metrics_file "$W/lora.jsonl" >/dev/null 2>&1
./fsdpc $T --quantize_base nf4 --metrics_file "$W/qlora.jsonl" >"$W/q.log" 2>&1
d=$(paste <(losses "$W/lora.jsonl") <(losses "$W/qlora.jsonl") | awk 'NR > 40 { d = ($1 - $2) / $1; s += d < 0 ? -d : d; k++ }
    END { printf "%.4f", k ? s / k : 1; exit !(k == 10 && s / k < 0.02) }')
check "QLoRA tracks bf16 LoRA over 50 steps: mean relative loss difference of the last 10 steps $d < 0.02" $? \
    "$(grep -m2 error "$W/q.log")"
# and it is not the unquantised run: the NF4 base changes the losses
d=$(rel_diff "$W/lora.jsonl" "$W/qlora.jsonl" 50 1 1e-4)
check "... and differs from it (worst step $d > 1e-4): the base is quantised" $?

# ---- QLoRA is LoRA on the dequantised base: at --lr 0 (B stays zero), a LoRA run --init_from the
# QLoRA checkpoint's export (its NF4 weights dequantised) has its losses bit for bit, in fp32 and
# under --precision bf16 (whose gathers round the dequantised values to bf16 on the CPU as a GPU's
# bf16 dequantisation does) ----
Z="--lora_rank 8 --lora_target_modules all-linear --train_data data/tinyshakespeare.txt $ONE --lr 0 --min_lr 0 --warmup 0
   --batch_size 4 --max_steps 2"
for prec in float32 bf16; do
    ./fsdpc $Z --quantize_base nf4 --precision $prec --checkpoint_dir "$W/z$prec" --checkpoint_freq 2 --metrics_file "$W/zq$prec.jsonl" \
        >"$W/zq.log" 2>&1 && ./fsdpc export --checkpoint "$W/z$prec" --output "$W/zhf$prec" --dtype fp32 >/dev/null 2>&1 &&
        ./fsdpc $Z --init_from "$W/zhf$prec" --precision $prec --metrics_file "$W/zl$prec.jsonl" >"$W/zl.log" 2>&1
    [ "$(losses "$W/zq$prec.jsonl")" = "$(losses "$W/zl$prec.jsonl")" ] && [ "$(wc -l <"$W/zl$prec.jsonl")" = 2 ]
    ok=$?  # before the message's substitutions, which set $? again
    check "--precision $prec: QLoRA's losses are LoRA's on its dequantised export, bit for bit ($(losses "$W/zq$prec.jsonl" | tr '\n' ' ')= $(losses "$W/zl$prec.jsonl" | tr '\n' ' '))" $ok \
        "$(grep -m2 error "$W/zq.log" "$W/zl.log")"
done

# ---- resume: a checkpoint of np=1 at step 3 resumed at np=2 continues bit for bit ----
./fsdpc $Q --batch_size 4 --max_steps 3 --checkpoint_dir "$W/ck" --checkpoint_freq 3 >"$W/c1.log" 2>&1
$MPI -np 2 ./fsdpc $Q --batch_size 2 --max_steps 6 --metrics_file "$W/u2.jsonl" >/dev/null 2>&1
$MPI -np 2 ./fsdpc $Q --batch_size 2 --max_steps 6 --resume_from_checkpoint "$W/ck" --metrics_file "$W/r2.jsonl" >"$W/r2.log" 2>&1
[ "$(losses "$W/r2.jsonl")" = "$(losses "$W/u2.jsonl" | tail -3)" ] && [ "$(wc -l <"$W/r2.jsonl")" = 3 ]
check "np=1's step-3 checkpoint resumed at np=2: steps 4-6 equal the uninterrupted np=2 run exactly" $? \
    "$(grep -m2 error "$W/r2.log" "$W/c1.log")"
# a tp 2 checkpoint: resumed at tp 2 bit for bit and at np=1 with np=1's losses; its NF4 bytes
# and frozen tensors are np=1's, byte for byte
$MPI -np 2 ./fsdpc $Q --batch_size 4 --max_steps 3 --tensor_parallel_degree 2 --checkpoint_dir "$W/ct" --checkpoint_freq 3 \
    >"$W/ct.log" 2>&1
$MPI -np 2 ./fsdpc $Q --batch_size 4 --max_steps 6 --tensor_parallel_degree 2 --metrics_file "$W/ut.jsonl" >/dev/null 2>&1
$MPI -np 2 ./fsdpc $Q --batch_size 4 --max_steps 6 --tensor_parallel_degree 2 --resume_from_checkpoint "$W/ct" \
    --metrics_file "$W/rt.jsonl" >"$W/rt.log" 2>&1
[ "$(losses "$W/rt.jsonl")" = "$(losses "$W/ut.jsonl" | tail -3)" ] && [ "$(wc -l <"$W/rt.jsonl")" = 3 ]
check "a tp 2 checkpoint resumed at tp 2: steps 4-6 equal the uninterrupted run exactly" $? "$(grep -m2 error "$W/rt.log" "$W/ct.log")"
./fsdpc $Q --batch_size 4 --max_steps 6 --resume_from_checkpoint "$W/ct" --metrics_file "$W/rt1.jsonl" >"$W/rt1.log" 2>&1
./fsdpc $Q --batch_size 4 --max_steps 6 --metrics_file "$W/ut1.jsonl" >/dev/null 2>&1
tail -3 "$W/ut1.jsonl" >"$W/ut1t.jsonl"
d=$(rel_diff "$W/ut1t.jsonl" "$W/rt1.jsonl" 3 1e-5)
check "the tp 2 checkpoint resumed at np=1: steps 4-6 equal np=1's (worst $d)" $? "$(grep -m2 error "$W/rt1.log")"
$PY - "$W/ck/step_00000003.h5" "$W/ct/step_00000003.h5" <<'PYEOF'
import sys, h5py, numpy as np
a, b = (h5py.File(f, "r")["model"] for f in sys.argv[1:])
frozen = [k for k in a if ".lora_" not in k]
bad = [k for k in frozen if a[k].dtype != b[k].dtype or not np.array_equal(a[k][()], b[k][()])]
print(f"{len(frozen)} frozen tensors ({sum(a[k].dtype == 'uint8' for k in frozen)} NF4), {len(bad)} differ: {bad[:3]}")
sys.exit(bool(bad) or not frozen)
PYEOF
check "the tp 2 checkpoint's NF4 bytes and frozen tensors equal np=1's byte for byte" $?
CK=$W/ck/step_00000003.h5
bpe=$($PY - "$CK" <<'PYEOF'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
assert f.attrs["quantize_base"] in (b"nf4", "nf4"), dict(f.attrs)
m = f["model"]
q = [k for k in m if m[k].dtype == "uint8"]
# the quantised weights are the blocks' linear ones: q/k/v/o, gate/up/down of 4 layers
assert len(q) == 28 and all(".layers." in k and k.endswith("_proj.weight") for k in q), q
assert all(m[k].dtype == "float32" for k in m if k not in q)
D, KVhd, F = 128, 64, 344  # tiny: hidden 128, 2 key/value heads of 32, MLP 344
numel = 4 * (2 * D * D + 2 * KVhd * D + 3 * F * D)
b = sum(m[k].shape[0] for k in q)
print("%.4f" % (b / numel))
sys.exit(not 0.51 < b / numel < 0.53)
PYEOF
)
check "the checkpoint stores the 28 block linear weights as uint8 NF4 datasets, $bpe bytes per weight" $?

# ---- memory: packed bytes per rank, the tracker against fsdpc plan ----
$MPI -np 2 ./fsdpc $Q --batch_size 2 --max_steps 2 --device cpu --metrics_file "$W/mem.jsonl" >/dev/null 2>&1
./fsdpc plan $Q --batch_size 2 --world_size 2 --device cpu --json >"$W/plan.json" 2>"$W/plan.err"
mem=$($PY - "$W/mem.jsonl" "$W/plan.json" <<'PYEOF'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][-1]["mem"]
plan = json.load(open(sys.argv[2]))["per_rank_bytes"]
# params now = this rank's fp32 shards of the units that stay fp32 (embedding, head, final norm,
# adapters: halved by the 2 ranks) + its bytes of the packed units; the quantised weights are
# the blocks' q/k/v/o (2 D^2 + 2 KVhd D) and MLP (3 F D) of 4 layers, half of them per rank
D, KVhd, F, V, L, r = 128, 64, 344, 256, 4, 8
fp32 = 2 * V * D + D + L * r * ((D + D) + (D + KVhd) * 2 + (D + D) + 3 * (D + F))
quant = L * (2 * D * D + 2 * KVhd * D + 3 * F * D)
packed = m["params"][1] - 4 * fp32 / 2
bpp = packed / (quant / 2)
worst = max(abs(plan[k] - m[k][3]) / max(plan[k], m[k][3]) for k in ("params", "gathered", "buffers"))
print("%.3f B per quantised parameter; plan vs tracker worst %.3f (params %d/%d, gathered %d/%d, buffers %d/%d)" % (
    bpp, worst, plan["params"], m["params"][3], plan["gathered"], m["gathered"][3], plan["buffers"], m["buffers"][3]))
sys.exit(not (0 < bpp < 0.6 and worst <= 0.05))
PYEOF
)
check "np=2 full-shard: $mem (< 0.6 and <= 5%)" $? "$(head -c 300 "$W/plan.err")"
# tp 2: the packed units split over the shard group's tp ranks (np=2: tp 2 alone; np=4: x 2)
for np in 2 4; do
    $MPI -np $np ./fsdpc $Q --batch_size 2 --max_steps 2 --device cpu --tensor_parallel_degree 2 --metrics_file "$W/memt$np.jsonl" \
        >"$W/memt$np.log" 2>&1
    ./fsdpc plan $Q --batch_size 2 --world_size $np --tensor_parallel_degree 2 --device cpu --json >"$W/plant$np.json" 2>"$W/plan.err"
    r=$($PY - "$W/memt$np.jsonl" "$W/plant$np.json" <<'PYEOF'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][-1]["mem"]
plan = json.load(open(sys.argv[2]))["per_rank_bytes"]
worst = max(abs(plan[k] - m[k][3]) / max(plan[k], m[k][3]) for k in ("params", "gathered", "buffers", "optimizer"))
print("worst %.3f (params %d/%d, gathered %d/%d)" % (worst, plan["params"], m["params"][3], plan["gathered"], m["gathered"][3]))
sys.exit(not worst <= 0.05)
PYEOF
)
    check "np=$np tp 2: fsdpc plan against the tracker, $r (<= 5%)" $? "$(head -c 300 "$W/plan.err") $(grep -m2 error "$W/memt$np.log")"
done
grep -q "stored in NF4" <(./fsdpc plan $Q --batch_size 2 --world_size 2 --device cpu 2>&1)
check "fsdpc plan's LoRA line says the base is NF4" $?

# ---- the emulated GPU: bf16 parameters dequantised by the CUDA kernel ----
if [ -x build/fsdpc_emu ]; then
    E="$Q --batch_size 2 --max_steps 3 --max_context_width 32 --precision bf16"
    ./fsdpc $E --device cpu --metrics_file "$W/ecpu.jsonl" >/dev/null 2>&1
    timeout 300 ./build/fsdpc_emu $E --device cuda --metrics_file "$W/egpu.jsonl" >"$W/egpu.log" 2>&1
    d=$(rel_diff "$W/ecpu.jsonl" "$W/egpu.jsonl" 3 1e-2) && grep -q "CPU emulation" "$W/egpu.log"
    check "emulated GPU, bf16: QLoRA trains and its losses track the CPU's within 1e-2 (worst $d)" $? "$(grep -m2 error "$W/egpu.log")"
    # tp 2: each rank dequantises its part with the CUDA kernel; fp32 within 1e-5 of np=1 (and of
    # the CPU), bf16 within its activations' rounding (the tp sums round in another order)
    E32="$Q --batch_size 2 --max_steps 3 --max_context_width 32"
    timeout 300 ./build/fsdpc_emu $E32 --device cuda --metrics_file "$W/egpu32.jsonl" >"$W/egpu32.log" 2>&1
    timeout 300 $MPI -np 2 ./build/fsdpc_emu $E32 --device cuda --tensor_parallel_degree 2 --metrics_file "$W/egpu32t.jsonl" \
        >"$W/egpu32t.log" 2>&1
    ./fsdpc $E32 --metrics_file "$W/ecpu32.jsonl" >/dev/null 2>&1
    d=$(rel_diff "$W/egpu32.jsonl" "$W/egpu32t.jsonl" 3 1e-5) && d2=$(rel_diff "$W/ecpu32.jsonl" "$W/egpu32t.jsonl" 3 1e-5)
    check "emulated GPU, fp32, tp 2: equals np=1 (worst $d) and the CPU (worst $d2)" $? "$(grep -m2 error "$W/egpu32t.log" "$W/egpu32.log")"
    timeout 300 $MPI -np 2 ./build/fsdpc_emu $E --device cuda --tensor_parallel_degree 2 --metrics_file "$W/egpu2.jsonl" \
        >"$W/egpu2.log" 2>&1
    d=$(rel_diff "$W/egpu.jsonl" "$W/egpu2.jsonl" 3 1e-4)
    check "emulated GPU, bf16, tp 2: within 1e-4 of np=1 (worst $d)" $? "$(grep -m2 error "$W/egpu2.log")"
else
    echo "ok - # SKIP emulated GPU: build/fsdpc_emu not built (make build/fsdpc_emu)"
fi

# ---- weights in: the base quantised from --init_from, at np=1 and np=2 ----
./fsdpc --batch_size 2 --max_steps 1 $ONE --checkpoint_dir "$W/base" --checkpoint_freq 1 --train_data data/tinyshakespeare.txt \
    >/dev/null 2>&1 && ./fsdpc export --checkpoint "$W/base" --output "$W/hf" --dtype fp32 >/dev/null 2>&1
./fsdpc $Q --init_from "$W/hf" --batch_size 4 --max_steps 2 --metrics_file "$W/i1.jsonl" >"$W/i1.log" 2>&1
$MPI -np 2 ./fsdpc $Q --init_from "$W/hf" --batch_size 2 --max_steps 2 --metrics_file "$W/i2.jsonl" >"$W/i2.log" 2>&1
d=$(rel_diff "$W/i1.jsonl" "$W/i2.jsonl" 2 1e-5)
check "--init_from a Hugging Face folder quantises the base alike at np=1 and np=2 (worst $d)" $? "$(grep -m2 error "$W/i1.log" "$W/i2.log")"
$MPI -np 2 ./fsdpc $Q --init_from "$W/hf" --batch_size 4 --max_steps 2 --tensor_parallel_degree 2 --metrics_file "$W/i4.jsonl" \
    >"$W/i4.log" 2>&1
d=$(rel_diff "$W/i1.jsonl" "$W/i4.jsonl" 2 1e-5)
check "--init_from a Hugging Face folder at tp 2: each tensor quantised whole, as at np=1 (worst $d)" $? "$(grep -m2 error "$W/i4.log")"
# the same fp32 weights from the fsdpc checkpoint they were exported from: read whole, quantised alike
$MPI -np 2 ./fsdpc $Q --init_from "$W/base/step_00000001.h5" --batch_size 2 --max_steps 2 --metrics_file "$W/i3.jsonl" >"$W/i3.log" 2>&1
d=$(rel_diff "$W/i2.jsonl" "$W/i3.jsonl" 2 0)
check "--init_from an fsdpc checkpoint stored as trained quantises the same base (losses equal its export's, $d)" $? \
    "$(grep -m2 error "$W/i3.log")"

# a NaN in a weight to be quantised: NF4 would give it a finite code, so it is refused by name
mkdir -p "$W/hfnan" && cp "$W/hf"/* "$W/hfnan/"
$PY - "$W/hfnan/model.safetensors" <<'PYEOF'
import json, struct, sys
import numpy as np
raw = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
e = json.loads(raw[8:8 + n])["model.layers.1.self_attn.q_proj.weight"]
at = 8 + n + e["data_offsets"][0] + 4 * 37
raw[at:at + 4] = np.array([np.nan], "<f4").tobytes()
open(sys.argv[1], "wb").write(bytes(raw))
PYEOF
expect_error "a NaN in a weight quantised to NF4" "model.layers.1.self_attn.q_proj.weight holds NaN or infinite values \(element 37\)" \
    $MPI -np 2 ./fsdpc $Q --init_from "$W/hfnan" --batch_size 2 --max_steps 1 --checkpoint_freq 0

# ---- export: the base written dequantised, the adapters merged into it (W = deq(NF4) + s B A) ----
./fsdpc export --checkpoint "$CK" --output "$W/qhf" --dtype fp32 >"$W/ex.log" 2>&1
grep -q "dequantised" "$W/ex.log"
check "export of a QLoRA checkpoint logs that the NF4 base is written dequantised" $? "$(grep -m2 error "$W/ex.log")"
$PY - "$CK" "$W/qhf/model.safetensors" <<'PYEOF'
import json, struct, sys
import h5py, numpy as np
sys.path.insert(0, "test/ref")
from nf4_ref import dequantize
h = h5py.File(sys.argv[1], "r")
f = h["model"]
scale = float(h.attrs["lora_alpha"]) / int(h.attrs["lora_rank"])
raw = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
worst, k = 0.0, 0
for name, e in hdr.items():
    if name == "__metadata__" or name not in f or f[name].dtype != "uint8":
        continue
    a, b = e["data_offsets"]
    got = np.frombuffer(raw[8 + n + a:8 + n + b], "<f4")
    want = dequantize(f[name][()].tobytes(), got.size).astype(np.float64)
    lora = name[: -len(".weight")] + ".lora_A.weight"
    if lora in f:  # merged in fp32, as export does
        B, A = f[lora.replace("lora_A", "lora_B")][()], f[lora][()]
        want = (want.astype(np.float32).reshape(B.shape[0], A.shape[1]) + np.float32(scale) * (B @ A)).reshape(-1)
    worst = max(worst, float(np.abs(got - want).max()))
    k += 1
print("export: %d NF4 tensors, worst difference %.1e" % (k, worst))
sys.exit(not (k == 28 and worst <= 1e-6))
PYEOF
check "the exported weights equal the reference dequantisation of the checkpoint's NF4 bytes plus s B A within 1e-6" $?

# ---- bad input: one line each ----
expect_error "nf4 without --lora_rank" "quantize_base nf4.*--lora_rank" ./fsdpc --quantize_base nf4 --max_steps 1
expect_error "a QLoRA checkpoint resumed without --quantize_base nf4" "stores its base in NF4.*--quantize_base none" \
    ./fsdpc --lora_rank 8 --lora_target_modules all-linear $ONE --max_steps 4 --resume_from_checkpoint "$CK"
cp "$CK" "$W/short.h5"
$PY - "$W/short.h5" <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    name = "model/model.layers.1.self_attn.q_proj.weight"
    d = f[name]
    data, crc = d[()], d.attrs["crc32"]
    del f[name]
    f.create_dataset(name, data=data[:-4]).attrs["crc32"] = crc
PYEOF
expect_error "an NF4 dataset of the wrong length" "q_proj.weight is uint8 \[[0-9]+\] but this QLoRA model needs its NF4 bytes" \
    ./fsdpc $Q --max_steps 4 --resume_from_checkpoint "$W/short.h5"
