#!/usr/bin/env bash
# Context parallelism (shard/parallel.h, model/context.c): --context_parallel_degree (--cp) N splits
# every sequence over N consecutive data-parallel ranks, rank r holding chunks r and 2N-1-r of 2N
# (head and mirrored tail), attention by a ring of key/value blocks merged by log-sum-exp. The
# degree must divide the data-parallel ranks, split --max_context_width into 2N chunks and nest
# with the shard group: one error line each, in training and in `fsdpc plan`; generation runs
# unsplit. Losses at cp 2 and 4, full-shard and hybrid, with tensor parallelism, activation
# checkpointing and gradient accumulation, for every family (RoPE and minGPT's learned positions by
# global position, Mistral's window), with masked labels, packing, document masking, dropout
# (minGPT's attention probabilities too), LoRA's and a mixture of experts (with expert parallelism,
# capacity and the router's jitter), equal the 1-rank run's within 1e-5 relative at every step,
# validation included; a checkpoint resumes across cp degrees with the losses of the run that never
# stopped. On the emulated GPU (build/fsdpc_emu: the CUDA part kernels, the ring as NCCL send/recv
# on the collectives' stream) cp 2 and cp 4, with document masks and a sliding window, minGPT's
# attention dropout and a mixture of experts' jitter, train as the emulated GPU's one rank does,
# validation included, and in bf16 within 1e-3.
# (test_kernels and test_gpu check the ring's blocks against whole-sequence attention, forward and backward.)
cd "$(dirname "$0")/../.."
source test/lib.sh
RUN="./fsdpc --max_steps 1 --checkpoint_freq 0 --num_tokens 0 --validation_freq 0 --num_threads 1"
M="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 32"
EQ="./fsdpc --max_steps 6 --checkpoint_freq 0 --num_tokens 0 --validation_freq 3 --validation_batches 2 --num_threads 1
    --lr 3e-3 --warmup 2 $M"
NP4="$MPI -np 4"

# ---- the checks: one line each ----
expect_error "cp 3 at 4 ranks" "context_parallel_degree 3 does not divide the 4 data-parallel ranks" $NP4 $RUN $M --cp 3
expect_error "cp 4 and tp 2 at 4 ranks" "context_parallel_degree 4 does not divide the 2 data-parallel ranks \(world 4 / --tensor_parallel_degree 2\)" \
    $NP4 $RUN $M --cp 4 --tp 2
expect_error "a context that does not split into 2N chunks" \
    "context_parallel_degree 2: --max_context_width 30 does not split into 4 equal chunks" $MPI -np 2 $RUN $M --cp 2 --max_context_width 30
expect_error "a cp group across shard groups that do not nest" \
    "context_parallel_degree 4 and the shard group of 6 ranks \(--sharding hybrid-full-shard\) do not nest" \
    ./fsdpc plan --model_name llama2_7b --world_size 24 --ranks_per_node 24 --sharding hybrid-full-shard --shard_group_size 6 --cp 4
expect_error "--sequence_parallel: tp must divide a cp rank's tokens" \
    "tensor_parallel_degree 8 does not divide a context-parallel rank's 12 tokens" \
    ./fsdpc plan --model_name llama2_7b --world_size 16 --max_context_width 24 --tp 8 --sequence_parallel --cp 2
expect_error "--context_parallel_degree 0" "context_parallel_degree must be at least 1" ./fsdpc --cp 0 --max_steps 1

# the planner: a cp rank's activations are 1/N of each sequence's (and the ring's buffers)
acts() { sed -n 's/^ *activations *\([0-9.]*\).*/\1/p' "$W/$1.plan" | head -1; }
./fsdpc plan --model_name llama2_7b --world_size 8 --max_context_width 32768 --batch_size 1 >"$W/p1.plan" 2>&1
./fsdpc plan --model_name llama2_7b --world_size 8 --max_context_width 32768 --batch_size 1 --cp 4 >"$W/p4.plan" 2>&1
a1=$(acts p1) a4=$(acts p4)
awk -v a="$a1" -v b="$a4" 'BEGIN { exit !(a > 0 && b > 0 && b <= 0.3 * a) }' && grep -q "x cp 4 (ring attention)" "$W/p4.plan"
check "plan --cp 4: activations per rank $a4 against cp 1's $a1 (at most 0.3x), the layout names cp" $? \
    "$(grep -m3 -E 'error|activations|layout' "$W/p4.plan" | tr '\n' '|')"
# on a GPU where cuDNN takes the ring's blocks (bf16, head dim 128, --attention auto) a rank also
# holds their scratch: at Llama-2 7B, 128K, cp 8 (T/N = 16384, 32 heads) B x T/N x 3 x 32 x 128
# bf16 values + 768 bytes, and 2 x 32 x T/N floats; --attention native and --document_masking none
pa() {
    ./fsdpc plan --model_name llama2_7b --precision bf16 --world_size 8 --max_context_width 131072 --batch_size 1 --cp 8 \
        --activation_checkpoints --device cuda --json "$@" 2>&1 | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["per_rank_bytes"]["activations"])'
}
if ./fsdpc plan --model_name llama2_7b --device cuda --json 2>&1 | grep -q "no CUDA backend"; then
    check "plan: the cuDNN ring blocks' scratch (skipped: this build has no CUDA backend, whose buffers a GPU plan counts)" 0
else
    pc=$(pa) pn=$(pa --attention native) pd=$(pa --document_masking)
    [ $((pc - pn)) = $((16384 * 3 * 32 * 128 * 2 + 768 + 2 * 32 * 16384 * 4)) ] && [ "$pd" = "$pn" ]
    check "plan, 7B at 128K on cp 8 GPUs: cuDNN's ring blocks add $((pc - pn)) bytes of scratch per rank, none under --attention native or --document_masking" $?
fi

# the planner's ring: a shift is 2 x B x T/N x KV x head_dim values (bf16 on a GPU), the gradients'
# too (the ring moves them in the activations' dtype); NVLink hides it behind 7B's blocks; a tiny model on a 1 MB/s link exposes each shift whole:
# 2 layers x (forward 1 shift of 16384 bytes, backward 1 of k/v and grads 32768 + the last grads 16384) = 0.131072 s
./fsdpc plan --model_name llama2_7b --precision bf16 --world_size 8 --max_context_width 32768 --batch_size 1 --cp 4 --json \
    >"$W/r7.json" 2>&1
./fsdpc plan --device cpu $M --batch_size 4 --world_size 2 --cp 2 --intra_node_bw 0.001 --gpu_tflops 1 --json >"$W/rs.json" 2>&1
/usr/bin/python3 - "$W/r7.json" "$W/rs.json" <<'PY'
import json, sys
d, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
r = d["cp_ring"]
assert d["cp"] == 4 and r["kv_bytes"] == 2 * 8192 * 32 * 128 * 2 and r["grad_bytes"] == r["kv_bytes"], r
assert r["bandwidth_bytes_s"] == 450e9 and r["exposed_s"] == 0 and 0 < r["bwd_shift_s"] < r["bwd_block_s"], r
assert any(c["name"].startswith("cp ring") for c in d["collectives"]), d["collectives"]
r = s["cp_ring"]
assert r["kv_bytes"] == 16384 and r["grad_bytes"] == 16384 and r["bandwidth_bytes_s"] == 1e6, r
assert abs(r["exposed_s"] - 0.131072) < 1e-5 and s["exposed_comm_s"] >= r["exposed_s"] and s["step_time_s"] > r["exposed_s"], (r, s)
PY
check "plan --cp: the ring's shifts (k/v and their grads 2 x B x T/N x KV x hd each), hidden on NVLink at 7B x 32K, exposed in full on a 1 MB/s link (0.131 s)" $? \
    "$(head -c 400 "$W/r7.json" "$W/rs.json")"
./fsdpc plan --model_name llama2_7b --precision bf16 --world_size 16 --ranks_per_node 1 --max_context_width 32768 --batch_size 1 \
    --cp 2 --inter_node_bw 5 >"$W/rn.plan" 2>&1
grep -qE "^    cp ring +[1-9][0-9.]* ms  of it: per layer, forward 2 steps" "$W/rn.plan"
check "plan --cp 2 across nodes (one rank per node, 5 GB/s): the report prints the ring's exposed time per step" $? \
    "$(grep -m3 -E 'error|cp ring' "$W/rn.plan" | tr '\n' '|')"
# a cp rank's tp all-reduces and experts' all-to-alls carry its T/N tokens' rows
for cp in 1 2; do
    ./fsdpc plan --model_name mixtral_8x7b --world_size 8 --max_context_width 8192 --batch_size 1 --tp 2 --ep 2 --cp $cp --json \
        >"$W/tc$cp.json" 2>&1
done
/usr/bin/python3 - "$W/tc1.json" "$W/tc2.json" <<'PY'
import json, sys
one, two = ({c["name"]: c["payload_bytes"] for c in json.load(open(f))["collectives"]} for f in sys.argv[1:])
for k in ("tp all-reduce forward", "tp all-reduce backward", "all-to-all experts"):
    assert abs(two[k] / one[k] - 0.5) < 1e-9, (k, one[k], two[k])
PY
check "plan --cp 2: the tp all-reduces and the experts' all-to-alls carry half of cp 1's rows" $? "$(head -c 300 "$W/tc2.json")"

# ---- equal losses: cp 2 and 4 against one rank, the same global batch ----
run() { eq_run "$@"; }
same() { same_losses "$@"; }
run one 1 --batch_size 4
run cp2 2 --batch_size 4 --cp 2
same "np=2 cp 2 trains as one rank" one cp2
run cp4 4 --batch_size 4 --cp 4
same "np=4 cp 4 (a ring of 4, chunks of 4 tokens) trains as one rank" one cp4
run one8 1 --batch_size 8
run fs 4 --batch_size 4 --cp 2
same "np=4 cp 2 x full-shard (2 batches, the shard group across both cp groups) trains as one rank" one8 fs
run hy 4 --batch_size 4 --cp 2 --sharding hybrid-full-shard --shard_group_size 2
same "np=4 cp 2 x hybrid (each shard group one cp group, replicated twice) trains as one rank" one8 hy
run hy1 4 --batch_size 4 --cp 2 --sharding hybrid-full-shard --shard_group_size 1
same "np=4 cp 2 x hybrid shard groups of 1 (a cp group holds two) trains as one rank" one8 hy1
run tpcp 4 --batch_size 4 --cp 2 --tp 2
same "np=4 tp 2 x cp 2 (each ring over a tp rank's heads) trains as one rank" one tpcp
run spcp 4 --batch_size 4 --cp 2 --tp 2 --sequence_parallel
same "np=4 tp 2 x cp 2 with --sequence_parallel trains as one rank" one spcp
run ga 2 --batch_size 2 --grad_accum 2 --val_batch_size 4 --cp 2 --activation_checkpoints
same "np=2 cp 2, activation checkpointing (the ring again in recompute) and grad_accum 2 train as one rank" one ga
run gpt1 1 --batch_size 4 --model_type mingpt --num_key_value_heads 4
run gpt2 2 --batch_size 4 --model_type mingpt --num_key_value_heads 4 --cp 2
same "minGPT: np=2 cp 2 (learned positions by global position) trains as one rank" gpt1 gpt2
run neox1 1 --batch_size 4 --model_type gpt_neox --num_key_value_heads 4 --rotary_pct 0.5
run neox4 4 --batch_size 4 --model_type gpt_neox --num_key_value_heads 4 --rotary_pct 0.5 --cp 4
same "GPT-NeoX: np=4 cp 4 (partial RoPE by global position) trains as one rank" neox1 neox4
run drop1 1 --batch_size 4 --dropout 0.1
run drop4 4 --batch_size 4 --dropout 0.1 --cp 4
same "--dropout 0.1 (residual masks of each token's place in the whole sequence): np=4 cp 4 trains as one rank" drop1 drop4
run gptd1 1 --batch_size 4 --model_type mingpt --num_key_value_heads 4 --dropout 0.1
run gptd4 4 --batch_size 4 --model_type mingpt --num_key_value_heads 4 --dropout 0.1 --cp 4
same "minGPT --dropout 0.1 (attention-probability masks by the whole sequence's query and key): np=4 cp 4 trains as one rank" gptd1 gptd4
run neoxd1 1 --batch_size 4 --model_type gpt_neox --num_key_value_heads 4 --dropout 0.1
run neoxd2 4 --batch_size 4 --model_type gpt_neox --num_key_value_heads 4 --dropout 0.1 --cp 2 --tp 2 --sequence_parallel
same "GPT-NeoX --dropout 0.1: np=4 tp 2 x cp 2 with --sequence_parallel (a rank's rows of its chunks) trains as one rank" neoxd1 neoxd2
run lora1 1 --batch_size 4 --lora_rank 2 --lora_target_modules all-linear --lora_dropout 0.2
run lora2 2 --batch_size 4 --lora_rank 2 --lora_target_modules all-linear --lora_dropout 0.2 --cp 2
same "LoRA with --lora_dropout 0.2 (its masks by position too): np=2 cp 2 trains as one rank" lora1 lora2
run win1 1 --batch_size 4 --sliding_window 5
run win2 4 --batch_size 4 --sliding_window 5 --cp 4
same "Mistral's --sliding_window 5 (shorter than a chunk): np=4 cp 4 trains as one rank" win1 win2

# masked labels (-100), and packing (documents kept apart): rows of ids whose first half bears no loss
masked_rows "$W/masked.jsonl" 42 5
D="--train_data $W/masked.jsonl --val_data $W/masked.jsonl"
run mone 1 --batch_size 8 $D
run mcp 4 --batch_size 4 --cp 2 $D
same "np=4 cp 2 with masked labels (the loss count of a cp group once) trains as one rank" mone mcp
run pk1 1 --batch_size 4 --packing $D
run pkcp 4 --batch_size 4 --packing --cp 4 $D
same "--packing (documents apart in a packed row, across the chunks): np=4 cp 4 trains as one rank" pk1 pkcp
run dgpt1 1 --batch_size 4 --model_type mingpt --num_key_value_heads 4 --packing $D
run dgpt2 2 --batch_size 4 --model_type mingpt --num_key_value_heads 4 --packing --cp 2 $D
same "minGPT with --packing (learned positions restart per document): np=2 cp 2 trains as one rank" dgpt1 dgpt2
run gptd2 4 --batch_size 4 --model_type mingpt --num_key_value_heads 4 --dropout 0.1 --cp 2 --tp 2 --packing $D
run gptdp 1 --batch_size 4 --model_type mingpt --num_key_value_heads 4 --dropout 0.1 --packing $D
same "minGPT --dropout 0.1 with --packing: np=4 tp 2 x cp 2 (a tp rank's heads: head0) trains as one rank" gptdp gptd2
/usr/bin/python3 - "$W/docs.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
with open(sys.argv[1], "w") as f:
    for _ in range(300):
        f.write(json.dumps({"text": "".join(rng.choice("abcdefgh ") for _ in range(rng.randrange(3, 20)))}) + "\n")
PY
run doc1 1 --batch_size 4 --document_masking --train_data "$W/docs.jsonl" --val_data "$W/docs.jsonl"
run doc4 4 --batch_size 4 --document_masking --cp 4 --train_data "$W/docs.jsonl" --val_data "$W/docs.jsonl"
same "--document_masking on a token stream (short documents across every chunk): np=4 cp 4 trains as one rank" doc1 doc4
run dwin1 1 --batch_size 4 --packing --sliding_window 6 $D
run dwin2 4 --batch_size 4 --packing --sliding_window 6 --cp 2 --tp 2 $D
same "--packing with --sliding_window 6: np=4 tp 2 x cp 2 trains as one rank" dwin1 dwin2

# a mixture of experts: each cp rank routes its own tokens; the router's statistics sum them over
# every rank (the balance and z losses of the global batch), the loss-bearing count once per cp group
X="--model_type mixtral --num_experts 4 --router_aux_loss_coef 0.02 --router_z_loss_coef 0.001"
run moe1 1 --batch_size 4 $X
run moe2 2 --batch_size 2 --grad_accum 2 --val_batch_size 4 $X --cp 2
same "Mixtral (router losses on): np=2 cp 2 with grad_accum 2 (the statistics collected over the step) trains as one rank" moe1 moe2
run moe4 4 --batch_size 4 $X --cp 4 --ep 2
same "Mixtral: np=4 cp 4 x ep 2 (the experts split over a cp group) trains as one rank" moe1 moe4
run moetp 4 --batch_size 4 $X --cp 2 --tp 2
same "Mixtral: np=4 tp 2 x cp 2 trains as one rank" moe1 moetp
run moem1 1 --batch_size 8 $X $D
run moem4 4 --batch_size 4 $X --cp 2 --ep 2 $D
same "Mixtral with masked labels: np=4 cp 2 x ep 2 (2 cp groups; the router counts loss-bearing tokens) trains as one rank" moem1 moem4
# --capacity_factor 0.8 (a third of the assignments dropped): kept in the step's token order, a cp
# group's chunks by their place in the sequence
run cap1 1 --batch_size 4 $X --capacity_factor 0.8
run cap4 4 --batch_size 4 $X --capacity_factor 0.8 --cp 4 --ep 2
same "Mixtral --capacity_factor 0.8: np=4 cp 4 x ep 2 (each expert's capacity by the sequence's token order) trains as one rank" cap1 cap4
run capg1 1 --batch_size 2 --grad_accum 2 --val_batch_size 4 $X --capacity_factor 0.8
run capg4 4 --batch_size 2 --grad_accum 2 --val_batch_size 4 $X --capacity_factor 0.8 --cp 2 --tp 2
same "Mixtral --capacity_factor 0.8, grad_accum 2 (the routing pass): np=4 tp 2 x cp 2 trains as one rank" capg1 capg4
# the router's jitter: each token's noise is the one its place in the whole sequence draws
run jit1 1 --batch_size 4 $X --router_jitter_noise 0.1
run jit2 2 --batch_size 4 $X --router_jitter_noise 0.1 --cp 2
same "Mixtral --router_jitter_noise 0.1 (noise by each token's place in the sequence): np=2 cp 2 trains as one rank" jit1 jit2
run jit4 4 --batch_size 4 $X --router_jitter_noise 0.1 --cp 4
same "Mixtral --router_jitter_noise 0.1: np=4 cp 4 trains as one rank" jit1 jit4

# ---- the whole-sequence attention scratch (per thread, T x T) is not held under cp: the ring never reads it ----
acts_at() {  # acts_at THREADS: the tracked activations (MiB) of a cp 2 step on 4096-token rows
    $MPI -np 2 ./fsdpc --max_steps 1 --checkpoint_freq 0 --num_tokens 0 --validation_freq 0 --tokenizer byte --hidden_width 64 \
        --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 4096 --batch_size 1 --cp 2 \
        --num_threads "$1" 2>&1 | sed -nE 's/^Batch 1 memory.*activations [0-9.]+\/([0-9.]+),.*/\1/p' | head -1
}
a1=$(acts_at 1) a2=$(acts_at 2)
[ -n "$a1" ] && [ "$a1" = "$a2" ]
check "cp 2 on 4096-token rows: activations do not grow with threads ($a1 MiB at 1, $a2 MiB at 2)" $?

# ---- generation stays unsplit: the first cp rank (with its tp group) runs whole sequences on its KV cache ----
GN="--max_steps 30 --checkpoint_freq 0 --validation_freq 0 --num_threads 1 --lr 1e-2 --warmup 2 $M --batch_size 4 --num_tokens 48
    --temperature 1 --top_p 0.9 --prompt ROMEO: --train_data data/tinyshakespeare.txt"
$MPI -np 1 ./fsdpc $GN >"$W/gen1.txt" 2>"$W/gen1.err"
$MPI -np 2 ./fsdpc $GN --cp 2 --checkpoint_freq 30 --checkpoint_dir "$W/genck" >"$W/gen2.txt" 2>"$W/gen2.err"
$MPI -np 4 ./fsdpc $GN --cp 4 >"$W/gen4.txt" 2>"$W/gen4.err"
$MPI -np 4 ./fsdpc $GN --cp 2 --tp 2 >"$W/gentp.txt" 2>"$W/gentp.err"
$MPI -np 2 ./fsdpc ${GN/--max_steps 30/--max_steps 0} --cp 2 --resume_from_checkpoint "$W/genck" >"$W/genr.txt" 2>"$W/genr.err"
# (stdout holds the sample alone; a pure generation run ends it without the newline)
for g in gen1 gen2 gen4 gentp genr; do tr -d '\n' <"$W/$g.txt" >"$W/$g.last"; done
[ "$(wc -c <"$W/gen1.last")" -gt 40 ] && cmp -s "$W/gen1.last" "$W/gen2.last" && cmp -s "$W/gen1.last" "$W/gen4.last" &&
    cmp -s "$W/gen1.last" "$W/gentp.last" && cmp -s "$W/gen1.last" "$W/genr.last" && [ "$(grep -c ROMEO: "$W/gen4.txt")" = 1 ]
check "--prompt under cp (the sample after training at cp 2, cp 4, tp 2 x cp 2, and generating from a cp 2 checkpoint): the 1-rank run's tokens, printed once" $? \
    "$(od -c "$W/gen2.last" | head -2 | tr '\n' '|'; grep -m1 error "$W"/gen*.err)"

# ---- resume across cp degrees ----
CK="--checkpoint_freq 3 --max_steps 6 --validation_freq 0"
run whole 1 --batch_size 4 $CK --checkpoint_dir "$W/ck1"
run cpck 2 --batch_size 4 --cp 2 $CK --checkpoint_dir "$W/ck2"
eq_resumed to1 1 "$W/ck2" --batch_size 4
eq_agree "a cp 2 checkpoint resumes at cp 1 (one rank), losses as the run that never stopped" cpck to1
eq_resumed to4 4 "$W/ck1" --batch_size 4 --cp 4
eq_agree "a cp 1 checkpoint resumes at cp 4" whole to4

# ---- the emulated GPU: the CUDA part kernels and the NCCL ring (few steps of a tiny model: the emulation is slow) ----
if [ -x build/fsdpc_emu ]; then
    GM="--tokenizer byte --hidden_width 32 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 64
        --max_context_width 16 --batch_size 4"
    EQ="build/fsdpc_emu --device cuda --max_steps 4 --checkpoint_freq 0 --num_tokens 0 --validation_freq 2 --validation_batches 1
        --num_threads 1 --lr 3e-3 --warmup 1 $GM"
    G="--train_data data/tinyshakespeare.txt --val_data data/tinyshakespeare.txt"
    GD="--document_masking --sliding_window 5 --train_data $W/docs.jsonl --val_data $W/docs.jsonl"
    run gone 1 $G
    run gcp2 2 $G --cp 2 --trace_file "$W/gcp2.trace.json"
    grep -q "ring blocks on the native part kernels (cuDNN does not run this model's attention" "$W/gcp2.log"
    check "emulated GPU cp 2: the run says which kernels compute the ring's blocks" $? "$(grep -m2 -E 'error|context' "$W/gcp2.log")"
    /usr/bin/python3 - "$W/gcp2.trace.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
ring = [e for e in ev if e.get("name") == "ring shift"]
assert ring and all(e["args"]["group"] == "cp" for e in ring)
# each traced step, on each rank: 2 layers, a shift each forward and two each backward (and
# validation's forwards)
per = {}
for e in ring:
    per[e["pid"], e["args"]["step"]] = per.get((e["pid"], e["args"]["step"]), 0) + 1
assert {p for p, _ in per} == {0, 1} and min(per.values()) >= 6, per
PY
    check "emulated GPU cp 2: the trace shows the ring's NCCL shifts on the cp group, 6 a step or more on each rank" $?
    same "emulated GPU: np=2 cp 2 (NCCL send/recv ring) trains as one emulated GPU" gone gcp2 4
    # bf16 activations (the blocks and their sums in bf16, as the one rank's attention is not): close, not equal
    run gbf1 1 $G --precision bf16
    run gbf2 2 $G --precision bf16 --cp 2
    d=$(rel_diff "$W/gbf1.jsonl" "$W/gbf2.jsonl" 4 1e-3)
    check "emulated GPU, --precision bf16: np=2 cp 2 tracks one emulated GPU within 1e-3 (worst $d)" $? "$(grep -m2 error "$W/gbf2.log")"
    # cuDNN's SDPA for the blocks (head dim 64, bf16): a rank's own block causal, the others full
    # rectangles, merged by log-sum-exp, against cuDNN's whole-sequence attention on one emulated GPU
    GC="--tokenizer byte --hidden_width 128 --num_layers 2 --num_heads 2 --num_key_value_heads 1 --intermediate_size 128
        --max_context_width 32 --batch_size 2 --precision bf16 --attention cudnn"
    EQ0=$EQ
    EQ=${EQ/"$GM"/$GC}
    run gcd1 1 $G
    FSDPC_EMU_CUDNN_COUNTS="$W/gcd2.counts" run gcd2 2 $G --cp 2
    grep -q "the ring blocks through cuDNN's SDPA" "$W/gcd2.log" && grep -Eq "ring-block executions [1-9]" "$W/gcd2.counts"
    check "emulated GPU, --attention cudnn: cp 2's ring blocks run through cuDNN's SDPA, and the run says so" $? \
        "$(grep -m2 -E 'error|context par|attention' "$W/gcd2.log"; cat "$W/gcd2.counts" 2>&1)"
    d=$(rel_diff "$W/gcd1.jsonl" "$W/gcd2.jsonl" 4 1e-3)
    check "emulated GPU, --attention cudnn: np=2 cp 2 tracks one emulated GPU within 1e-3 (worst $d)" $? "$(grep -m2 error "$W/gcd2.log")"
    # the blocks' scratch (O, or dQ, dK, dV, and the statistics) is tracked activations memory, and
    # fsdpc plan's activations are the tracker's peak to the byte; where the blocks stay native
    # (--attention native, documents) the plan counts none of it, as the native run's tracker holds
    pacts() {
        ${EQ%% *} plan ${EQ#* } $G --cp 2 --world_size 2 --json "$@" 2>>"$W/pacts.err" |
            /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["per_rank_bytes"]["activations"])'
    }
    tacts() { /usr/bin/python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["mem"]["activations"][3])' "$W/$1.jsonl"; }
    run gnat2 2 $G --cp 2 --attention native
    pc=$(pacts) pn=$(pacts --attention native) pd=$(pacts --document_masking) tc=$(tacts gcd2) tn=$(tacts gnat2)
    s=$((2 * 16 * (2 + 2 * 1) * 64 * 2 + 768 + 2 * 2 * 2 * 16 * 4))  # B x T/2 x (H + 2 KV) x hd bf16 + 768, 2 x B x H x T/2 floats
    [ -n "$pc" ] && [ "$pc" = "$tc" ] && [ "$pn" = "$tn" ] && [ "$pd" = "$pn" ] && [ $((pc - pn)) = "$s" ]
    check "emulated GPU, --attention cudnn cp 2: the plan's activations are the tracker's peak, the ring blocks' $s bytes of scratch included (tracked $tc, planned $pc; native: tracked $tn, planned $pn, with --document_masking $pd)" $? \
        "$(grep -m2 error "$W/gnat2.log" "$W/pacts.err")"
    # minGPT's attention dropout keeps training's blocks native; evaluation's (no dropout) take
    # cuDNN, so the plan counts forward's scratch alone: B x T/2 x H x hd bf16 and B x H x T/2 floats
    GDC="--model_type mingpt --num_key_value_heads 2 --dropout 0.1"
    run gmdc2 2 $G --cp 2 $GDC
    pc=$(pacts $GDC) pn=$(pacts $GDC --attention native) tc=$(tacts gmdc2)
    s=$((2 * 16 * 2 * 64 * 2 + 2 * 2 * 16 * 4))
    [ -n "$pc" ] && [ "$pc" = "$tc" ] && [ $((pc - pn)) = "$s" ]
    check "emulated GPU, minGPT --dropout 0.1 --attention cudnn cp 2: the plan counts evaluation's blocks' $s bytes of forward scratch, the tracker's peak (tracked $tc, planned $pc, native $pn)" $? \
        "$(grep -m2 error "$W/gmdc2.log" "$W/pacts.err")"
    EQ=$EQ0
    run gdoc1 1 $GD
    run gdoc4 4 $GD --cp 4
    same "emulated GPU: np=4 cp 4 with --document_masking and --sliding_window 5 trains as one emulated GPU" gdoc1 gdoc4 4
    # minGPT's attention dropout: the part kernels draw the masks the whole-sequence kernels draw
    # for the same (query, key), so the one emulated GPU's run (whole-sequence attention) is the reference
    GP="--model_type mingpt --num_key_value_heads 4 --dropout 0.1"
    run gdrop1 1 $G $GP
    run gdrop2 2 $G $GP --cp 2
    same "emulated GPU: minGPT --dropout 0.1 (attention-probability masks by the whole sequence's query and key) at np=2 cp 2 trains as one emulated GPU" \
        gdrop1 gdrop2 4
    run gjit1 1 $G $X --router_jitter_noise 0.1
    run gjit2 2 $G $X --router_jitter_noise 0.1 --cp 2
    same "emulated GPU: Mixtral --router_jitter_noise 0.1 at np=2 cp 2 trains as one emulated GPU" gjit1 gjit2 4
else
    check "cp on the emulated GPU # SKIP build/fsdpc_emu is not built (make build/fsdpc_emu)" 0
fi
