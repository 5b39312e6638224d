#!/usr/bin/env bash
# fsdpc plan: its JSON; its memory figures against the memory tracker of real runs and their
# measured mem:, and against the start-up estimate on the emulated GPU; its verdicts on Llama-2
# sizes; its errors. run/plot.py on two short runs.
cd "$(dirname "$0")/../.."
source test/lib.sh
PY=/usr/bin/python3

# ---- (1) --json is one object with the documented keys ----
./fsdpc plan --device cpu --world_size 2 --sharding grad-shard --gpu_tflops 1 --json >"$W/p.json" 2>"$W/p.err"
$PY - "$W/p.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d["per_rank_bytes"]) >= {"params", "master", "gathered", "grads", "optimizer", "activations", "buffers", "peak"}, d
for k in ("fits", "comm_bytes_per_step", "step_time_s", "mfu", "collectives"):
    assert k in d, k
b = d["per_rank_bytes"]
assert abs(b["peak"] - sum(b[k] for k in ("params", "gathered", "grads", "optimizer", "activations", "buffers"))) <= 2, b
assert d["fits"] is True and d["comm_bytes_per_step"] > 0 and d["step_time_s"] > 0 and 0 < d["mfu"] < 1, d
PY
check "--json parses, has per_rank_bytes{params,master,gathered,grads,optimizer,activations,buffers,peak}, fits, comm_bytes_per_step, step_time_s, mfu" $? \
    "$(head -c 300 "$W/p.err" "$W/p.json")"

# ---- (2) the planner against the memory tracker of real CPU runs ----
# Per category (params, gathered, grads, optimizer, activations, buffers: docs/sharding.md "Memory
# tracker"), the plan's bytes per rank against the largest rank's peak that the tracker logged
# at step 2 (the metrics line's "mem"), within 10%: np 1/2/4 x full/grad/no-shard x activation
# checkpointing, hybrid full/grad-shard with and without it, selective checkpointing, bf16 gathers
# and reductions, gradient accumulation, minGPT's tied unit, an unsharded start, tensor
# parallelism with and without sequence parallelism, context parallelism (1/N of the activations
# and the ring's buffers). The tracker
# counts what the allocation sites hold, so the resident memory (mem:) is held against the plan
# apart: its growth from 4 to 12 layers against the planned growth.
S="--tokenizer byte --hidden_width 256 --num_heads 4 --intermediate_size 768 --max_context_width 64 --batch_size 4
   --train_data synthetic --num_threads 1 --device cpu"
L="--num_key_value_heads 4 --num_layers 4"
# tracked "BINARY FLAGS" NP ARGS...: "<worst relative difference>[; the categories off by more than 10%]"
tracked() {
    local bin=$1 np=$2
    shift 2
    rm -f "$W/t.jsonl"
    $MPI -np "$np" $bin "$@" --max_steps 2 --logging_freq 1 --num_tokens 0 --checkpoint_freq 0 \
        --metrics_file "$W/t.jsonl" >"$W/t.log" 2>&1 &&
        ${bin%% *} plan ${bin#* } "$@" --world_size "$np" --json >"$W/t.json" 2>>"$W/t.log" &&
        $PY - "$W/t.json" "$W/t.jsonl" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))["per_rank_bytes"]
mem = [json.loads(l) for l in open(sys.argv[2])][-1]["mem"]
worst, bad = 0.0, []
for k in ("params", "gathered", "grads", "optimizer", "activations", "buffers"):
    p, m = plan[k], mem[k][3]  # [now min, now max, peak min, peak max]
    d = abs(p - m) / max(p, m) if max(p, m) else 0.0
    worst = max(worst, d)
    if d > 0.1:
        bad.append("%s: plan %.2f MiB, tracked %.2f MiB" % (k, p / 2**20, m / 2**20))
print("%.1e%s" % (worst, "; " + ", ".join(bad) if bad else ""))
sys.exit(1 if bad else 0)
PY
}
for np in 1 2 4; do
    for st in full-shard grad-shard no-shard; do
        for ac in "" --activation_checkpoints; do
            r=$(tracked "./fsdpc $S" $np $L --sharding $st $ac --meta_init)
            check "np=$np $st${ac:+ $ac}: plan per category = the tracker's peak within 10% (worst rel diff $r)" $? \
                "$(grep -m2 error "$W/t.log")"
        done
    done
done
for args in "4 --sharding hybrid-full-shard --shard_group_size 2 --meta_init" \
    "4 --sharding hybrid-full-shard --shard_group_size 2 --activation_checkpoints --meta_init" \
    "4 --sharding hybrid-grad-shard --shard_group_size 2 --meta_init" \
    "4 --sharding hybrid-grad-shard --shard_group_size 2 --activation_checkpoints --meta_init" \
    "2 --sharding hybrid-full-shard --shard_group_size 1 --meta_init" "2 --sharding full-shard --selective_checkpointing 2 --meta_init" \
    "2 --sharding hybrid-full-shard --shard_group_size 1 --reduce_dtype bf16 --meta_init" \
    "2 --sharding full-shard --precision bf16 --reduce_dtype bf16 --meta_init" \
    "2 --sharding no-shard --precision bf16 --meta_init" "2 --sharding grad-shard --grad_accum 2 --meta_init" \
    "2 --sharding full-shard" "4 --sharding full-shard --tensor_parallel_degree 2 --meta_init" \
    "4 --sharding hybrid-full-shard --shard_group_size 1 --tensor_parallel_degree 2 --activation_checkpoints --meta_init" \
    "4 --sharding full-shard --tensor_parallel_degree 2 --sequence_parallel --meta_init" \
    "2 --sharding full-shard --tensor_parallel_degree 2 --sequence_parallel --activation_checkpoints --meta_init" \
    "2 --sharding full-shard --model_type mixtral --num_experts 4 --meta_init" \
    "2 --sharding hybrid-full-shard --shard_group_size 1 --model_type mixtral --num_experts 4 --activation_checkpoints --grad_accum 2 --router_aux_loss_coef 0.01 --meta_init" \
    "2 --sharding full-shard --model_type mixtral --num_experts 4 --ep 2 --meta_init" \
    "4 --sharding hybrid-full-shard --shard_group_size 2 --model_type mixtral --num_experts 4 --ep 4 --activation_checkpoints --precision bf16 --reduce_dtype bf16 --meta_init" \
    "2 --sharding full-shard --lora_rank 8 --lora_target_modules all-linear --meta_init" \
    "2 --sharding full-shard --lora_rank 8 --lora_target_modules all-linear --precision bf16 --meta_init" \
    "4 --sharding hybrid-full-shard --shard_group_size 2 --lora_rank 8 --lora_dropout 0.1 --activation_checkpoints --meta_init" \
    "2 --sharding no-shard --lora_rank 4 --grad_accum 2 --precision bf16 --reduce_dtype bf16 --meta_init" \
    "4 --sharding full-shard --tensor_parallel_degree 2 --lora_rank 8 --lora_target_modules all-linear --meta_init" \
    "2 --sharding full-shard --model_type mixtral --num_experts 4 --ep 2 --lora_rank 4 --lora_target_modules all-linear --meta_init" \
    "4 --sharding full-shard --model_type mixtral --num_experts 4 --ep 2 --tensor_parallel_degree 2 --lora_rank 4 --lora_target_modules w1,w2,w3,gate --meta_init" \
    "2 --sharding full-shard --cp 2 --meta_init" "4 --sharding full-shard --cp 4 --activation_checkpoints --meta_init" \
    "4 --sharding hybrid-full-shard --shard_group_size 2 --cp 2 --tensor_parallel_degree 2 --meta_init" \
    "4 --sharding full-shard --model_type mixtral --num_experts 4 --cp 2 --ep 2 --activation_checkpoints --meta_init"; do
    set -- $args
    np=$1
    shift
    r=$(tracked "./fsdpc $S" "$np" $L "$@")
    check "np=$np $*: plan per category = the tracker's peak within 10% (worst rel diff $r)" $? "$(grep -m2 error "$W/t.log")"
done
# under bf16 on a CPU with bf16 products, the products' bf16 operand copies (here the logits'
# gradient's: rows x 32000) and attention's packings are activations, in the plan too
r=$(tracked "./fsdpc $S" 1 $L --vocab_size 32000 --precision bf16 --meta_init)
check "np=1 bf16, 32000 tokens (the products' bf16 scratch): plan per category = the tracker's peak within 10% (worst rel diff $r)" $? \
    "$(grep -m2 error "$W/t.log")"
r=$(tracked "./fsdpc $S" 2 --model_type mingpt --num_layers 4 --sharding full-shard --meta_init)
check "np=2 minGPT full-shard (embedding and head share a unit): plan per category = the tracker's peak within 10% (worst rel diff $r)" $? \
    "$(grep -m2 error "$W/t.log")"

real() {  # real NP LAYERS ARGS...: the mem: MiB of a 2-step run
    local np=$1 layers=$2
    shift 2
    $MPI -np "$np" ./fsdpc $S --num_key_value_heads 4 --num_layers "$layers" "$@" --max_steps 2 --logging_freq 1 --num_tokens 0 \
        --checkpoint_freq 0 2>&1 | sed -nE 's/^Batch 2 .*mem: ([0-9]+) MiB$/\1/p'
}
planned() {  # planned NP LAYERS ARGS...: the plan's peak in MiB
    local np=$1 layers=$2
    shift 2
    ./fsdpc plan $S --num_key_value_heads 4 --num_layers "$layers" --world_size "$np" "$@" --json |
        $PY -c 'import json, sys; print(json.load(sys.stdin)["per_rank_bytes"]["peak"] / 2**20)'
}
# (--meta_init is what every start does now; the flag stays accepted)
for args in "2 --sharding full-shard" "1 --sharding no-shard --activation_checkpoints" "4 --sharding grad-shard"; do
    set -- $args
    np=$1
    shift
    m4=$(real "$np" 4 "$@" --meta_init) m12=$(real "$np" 12 "$@" --meta_init)
    p4=$(planned "$np" 4 "$@" --meta_init) p12=$(planned "$np" 12 "$@" --meta_init)
    g=$(awk -v m4="$m4" -v m12="$m12" -v p4="$p4" -v p12="$p12" 'BEGIN { g = (m12 - m4) / (p12 - p4); printf "%.2f", g
        exit !(m4 > 0 && g >= 0.7 && g <= 1.3) }')
    check "np=$np $*: measured mem: growth from 4 to 12 layers $((m12 - m4)) MiB = $g x planned" $?
done

# activation checkpoints (the residual stream's block inputs) are counted in the activation dtype:
# under --activation_checkpoints each extra layer adds one B x T x D entry, 2 bytes each under bf16
# on a GPU, 4 in float32
ckpt_acts() {  # ckpt_acts LAYERS PRECISION
    ./fsdpc plan --tokenizer byte --gpu h100 --hidden_width 256 --num_layers "$1" --num_heads 4 --intermediate_size 512 --max_context_width 64 \
        --batch_size 2 --precision "$2" --activation_checkpoints --json | $PY -c 'import json, sys; print(json.load(sys.stdin)["per_rank_bytes"]["activations"])'
}
b=$(( ($(ckpt_acts 12 bf16) - $(ckpt_acts 4 bf16)) / 8 )) f=$(( ($(ckpt_acts 12 float32) - $(ckpt_acts 4 float32)) / 8 ))
[ "$b" = $((2 * 64 * 256 * 2)) ] && [ "$f" = $((2 * 64 * 256 * 4)) ]
check "GPU plan: an activation checkpoint costs B x T x D x 2 bytes under bf16 ($b per layer), x 4 in float32 ($f)" $?

# a GPU plan against the emulated GPU's own start-up estimate (the device's share, the CUDA
# attention's buffers): exact to the logged 0.1 MiB
E="--tokenizer byte --hidden_width 256 --num_layers 4 --num_heads 8 --num_key_value_heads 4 --intermediate_size 512 --max_context_width 256
   --batch_size 4 --num_threads 1 --precision bf16 --train_data synthetic"
if [ -x build/fsdpc_emu ]; then
    for args in "2 --sharding full-shard" "2 --sharding grad-shard --activation_checkpoints" "2 --sharding full-shard --cpu_offload" \
        "4 --sharding hybrid-full-shard --shard_group_size 2"; do
        set -- $args
        np=$1
        shift
        e=$($MPI -np "$np" ./build/fsdpc_emu $E "$@" --device cuda --max_steps 0 --num_tokens 0 --checkpoint_freq 0 2>&1 |
            sed -nE 's/^memory estimate per rank: ([0-9.]+) MiB on the GPU.*/\1/p')
        p=$(./build/fsdpc_emu plan $E "$@" --world_size "$np" --json | $PY -c 'import json, sys; print(json.load(sys.stdin)["per_rank_bytes"]["peak"] / 2**20)')
        awk -v e="$e" -v p="$p" 'BEGIN { d = p - e; exit !(e > 0 && d * d <= 0.0025) }'
        check "emulated GPU np=$np $*: plan $p MiB vs the run's device estimate $e MiB" $?
    done
else
    check "GPU plan against the emulated GPU (skipped: no build/fsdpc_emu; make build/fsdpc_emu)" 0
fi
# and per category against the emulated GPU's tracker (device buffers, as the plan counts them)
G="--tokenizer byte --hidden_width 32 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 64 --max_context_width 16
   --batch_size 2 --train_data synthetic --num_threads 1 --device cuda"
if [ -x build/fsdpc_emu ]; then
    for args in "1 --precision bf16 --cpu_offload" "2 --sharding full-shard --precision bf16 --reduce_dtype bf16" \
        "2 --sharding grad-shard --activation_checkpoints --grad_accum 2" "4 --sharding hybrid-full-shard --shard_group_size 2" \
        "2 --sharding hybrid-full-shard --shard_group_size 1 --precision bf16 --reduce_dtype bf16"; do
        set -- $args
        np=$1
        shift
        r=$(tracked "./build/fsdpc_emu $G" "$np" "$@")
        check "emulated GPU np=$np $*: plan per category = the tracker's device peak within 10% (worst rel diff $r)" $? \
            "$(grep -m2 error "$W/t.log")"
    done
fi

# ---- (3) Llama-2 on H100 nodes: verdicts and magnitudes ----
gplan() { ./fsdpc plan --precision bf16 --max_context_width 4096 --json "$@"; }
if ./fsdpc plan --model_name llama2_7b --device cuda --json 2>&1 | grep -q "no CUDA backend"; then
    check "Llama-2 GPU plans (skipped: this build has no CUDA backend, whose buffers a GPU plan counts)" 0
else
    gplan --model_name llama2_7b --sharding full-shard --world_size 8 --ranks_per_node 8 --gpu h100 --batch_size 1 \
        --activation_checkpoints >"$W/7b.json" 2>"$W/7b.err"
    $PY - "$W/7b.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
b, n = d["per_rank_bytes"], d["model"]["num_params"]
assert abs(n - 6.74e9) / 6.74e9 < 0.005, n
assert d["fits"] is True and b["peak"] < 78.6 * 2**30, b
assert abs(b["master"] - 4 * n / 8) / (4 * n / 8) < 0.01 and abs(b["optimizer"] - 2 * b["master"]) < 1, b
# all-gathers forward and backward in bf16 (the backward skips embedding and head), reduce-scatter in fp32
assert 0.9 * 7 / 8 * 8 * n < d["comm_bytes_per_step"] < 7 / 8 * 8 * n, d["comm_bytes_per_step"]
assert 0.1 < d["step_time_s"] < 2 and 0.2 < d["mfu"] < 0.6, d
PY
    check "Llama-2 7B full-shard, 8 x H100 in one node, batch 1 x 4096, activation checkpointing: fits; 6.74e9 parameters, 1/8 master each, ~8 bytes/parameter of collectives" $? \
        "$(head -c 400 "$W/7b.err" "$W/7b.json")"
    gplan --model_name llama2_70b --sharding no-shard --world_size 8 --batch_size 1 --activation_checkpoints >"$W/70b.json" 2>"$W/70b.err"
    $PY - "$W/70b.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
n = d["model"]["num_params"]
assert abs(n - 6.898e10) / 6.898e10 < 0.01 and d["fits"] is False and d["per_rank_bytes"]["peak"] > 16 * n, d
PY
    check "Llama-2 70B no-shard on one 8 x H100 node: does not fit (16 bytes per parameter on every rank)" $? "$(head -c 300 "$W/70b.err")"
    gplan --model_name llama2_70b --sharding full-shard --world_size 64 --batch_size 1 --activation_checkpoints >"$W/70f.json" &&
        $PY -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["fits"] and d["nodes"] == 8, d' "$W/70f.json"
    check "Llama-2 70B full-shard over 8 nodes of 8 x H100 (batch 1, activation checkpointing): fits" $?
    gplan --model_name llama2_70b --sharding hybrid-full-shard --world_size 64 --batch_size 1 --activation_checkpoints >"$W/70h.json" &&
        $PY -c 'import json, sys; d = json.load(open(sys.argv[1]))
assert not d["fits"] and d["shard_group"] == 8 and d["replica_group"] == 8, d
assert [c["name"] for c in d["collectives"]][-1] == "all-reduce replicas", d' "$W/70h.json"
    check "Llama-2 70B hybrid-full-shard on 8 nodes: shard group = a node (8) x 8 replicas, replica all-reduce planned; 1/8 of 16 bytes per parameter does not fit" $?
fi

# ---- errors: one line, like training's ----
expect_error "plan: unknown flag" "unknown flag '--bogus'" ./fsdpc plan --device cpu --bogus 1
expect_error "plan: --world_size 0" "world_size expects a positive integer" ./fsdpc plan --device cpu --world_size 0
expect_error "plan: --gpu names a GPU it knows" "--gpu must be one of h100\|h100-pcie\|h200\|a100-80g" ./fsdpc plan --gpu v100
expect_error "plan: whole nodes" "--world_size 12 is not a whole number of nodes of --ranks_per_node 8" ./fsdpc plan --device cpu --world_size 12 --ranks_per_node 8
expect_error "plan: the hybrid group must divide the world" "world size 8 is not a multiple of the shard group size 3" \
    ./fsdpc plan --device cpu --world_size 8 --sharding hybrid-full-shard --shard_group_size 3
# --interconnect names a fabric: efa-p5 is 400 GB/s between nodes, as --inter_node_bw 400 says
N7="--model_name llama2_7b --precision bf16 --batch_size 1 --world_size 32 --json"
[ -n "$(./fsdpc plan $N7 --interconnect efa-p5 2>&1)" ] &&
    [ "$(./fsdpc plan $N7 --interconnect efa-p5 2>&1)" = "$(./fsdpc plan $N7 --inter_node_bw 400 2>&1)" ] &&
    [ "$(./fsdpc plan $N7 --interconnect efa-p4d 2>&1)" = "$(./fsdpc plan $N7 2>&1)" ] &&
    [ "$(./fsdpc plan $N7 --interconnect ib-ndr 2>&1)" != "$(./fsdpc plan $N7 2>&1)" ]
check "plan: --interconnect efa-p5 equals --inter_node_bw 400; efa-p4d is the GPU default; ib-ndr differs" $?
expect_error "plan: --interconnect names a fabric it knows" "--interconnect must be one of efa-p4d\|efa\|efa-p5" \
    ./fsdpc plan --interconnect slingshot
expect_error "plan: --interconnect and --inter_node_bw together" "--interconnect efa-p5 and --inter_node_bw 100 both set" \
    ./fsdpc plan --interconnect efa-p5 --inter_node_bw 100
expect_error "plan: training's flag checks apply" "--batch_size must be positive" ./fsdpc plan --device cpu --batch_size 0

# ---- run/plot.py ----
P="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 96 --max_context_width 32
   --batch_size 4 --max_steps 6 --logging_freq 2 --validation_freq 3 --validation_batches 1 --num_tokens 0
   --checkpoint_freq 0 --num_threads 1"
./fsdpc $P --metrics_file "$W/a.jsonl" 2>/dev/null && ./fsdpc $P --lr 3e-3 --metrics_file "$W/b.jsonl" 2>/dev/null
$PY - "$W/a.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == list(range(1, 7)) and [r["tokens"] for r in rows] == [128 * s for s in range(1, 7)], rows
assert [r["step"] for r in rows if "tokens_per_s" in r] == [1, 2, 4, 6] and all(r["mem_mib"] > 0 for r in rows if "mem_mib" in r), rows
assert [r["step"] for r in rows if "val_loss" in r] == [3, 6] and "mfu" not in rows[0], rows
cats = ["params", "gathered", "grads", "optimizer", "activations", "buffers", "staging", "total", "rss"]
assert [r["step"] for r in rows if "mem" in r] == [1, 2, 4, 6] and all(list(r["mem"]) == cats for r in rows if "mem" in r), rows
for r in rows:
    for k, (now_lo, now_hi, peak_lo, peak_hi) in r.get("mem", {}).items():
        assert 0 <= now_lo <= now_hi <= peak_hi and now_lo <= peak_lo <= peak_hi, (k, r)
    if "mem" in r:
        m = r["mem"]
        assert m["params"][3] > 0 and m["activations"][3] > 0 and m["total"][3] >= max(m[k][3] for k in cats[:7]), m
        assert m["rss"][3] > m["total"][3] and abs(m["rss"][3] / 2**20 - r["mem_mib"]) <= 1, m  # mem: is the peak RSS
PY
check "metrics lines carry tokens, tokens_per_s, mem_mib and the tracker's mem {category: [now min, now max, peak min, peak max]} at log steps, val_loss at validation steps" $? "$(head -3 "$W/a.jsonl")"
$PY run/plot.py "$W/a.jsonl" "$W/b.jsonl" --label "lr 1e-3" --label "lr 3e-3" -o "$W/curves.png" 2>"$W/plot.err"
rc=$?
[ $rc = 0 ] && [ "$(head -c 8 "$W/curves.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && [ "$(wc -c <"$W/curves.png")" -gt 10000 ]
check "plot.py draws two runs into a PNG" $? "(rc=$rc $(head -c 300 "$W/plot.err"))"
steady "$W/a.jsonl" | sed -E 's/, "tokens": [^,}]*//' >"$W/old.jsonl"  # a file from before the tracker and tokens
$PY run/plot.py "$W/old.jsonl" "$W/b.jsonl" -o "$W/old.png" 2>"$W/plot.err" && [ "$(wc -c <"$W/old.png")" -gt 10000 ]
check "plot.py draws a file without the tracker's mem (and without tokens) beside one with it" $? "$(head -c 300 "$W/plot.err")"
printf '{"step": 1, "loss": 5.5}\nnot json\n' >"$W/bad.jsonl"
for bad in "$W/bad.jsonl" "$W/missing.jsonl"; do
    $PY run/plot.py "$W/a.jsonl" "$bad" -o "$W/bad.png" 2>"$W/bad.err"
    rc=$?
    [ $rc = 1 ] && [ "$(wc -l <"$W/bad.err")" = 1 ] && grep -q "^plot.py: error: .*'$bad'" "$W/bad.err" && [ ! -e "$W/bad.png" ]
    ok=$?  # before the message's $(...), which would set $? again
    check "plot.py: $(basename "$bad") gives one error line naming it" $ok "(rc=$rc: $(head -c 300 "$W/bad.err"))"
done
