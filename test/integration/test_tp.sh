#!/usr/bin/env bash
# Tensor parallelism (shard/parallel.h, model_plan_tp): --tensor_parallel_degree (--tp) and
# --sequence_parallel parse; the degree must divide the world, a node's ranks, the heads, the
# key/value heads, the MLP width and the vocabulary, and hybrid sharding counts data-parallel
# ranks (world / tp); each misfit is one error line naming the numbers, on every rank, in training
# and in `fsdpc plan`. Every family's blocks split (Megatron's column/row parallel projections, a
# vocabulary-parallel embedding and cross-entropy): Llama's losses at tp 2 and 4, with full-shard
# and hybrid sharding, activation checkpointing, gradient accumulation and masked labels, equal
# the 1-rank run's (1e-5 relative) at every step, validation included; so do minGPT's and
# GPT-NeoX's, with dropout (minGPT's attention masks keyed by global head, on the emulated GPU
# too). So do they with --sequence_parallel (a rank's share of the batch's rows; tp must divide
# the context), dropout and document masks included. Generation runs on the first tp group (its
# first rank gathers the logits' vocabulary shares and samples) and writes the 1-rank run's
# text. Checkpoints hold whole tensors under their Hugging Face names whatever the degree,
# checksummed whole: a tp 2 run resumes at tp 1, and at tp 2 on 4 ranks (or sequence-parallel),
# and back, with the losses of the run that never stopped; --init_from reads a tp rank's part of
# each tensor.
# (test_comm checks the mesh's groups; test_model --tp-plan every family's parts.)
cd "$(dirname "$0")/../.."
source test/lib.sh
RUN="./fsdpc --max_steps 1 --checkpoint_freq 0 --num_tokens 0 --validation_freq 0 --num_threads 1"
M="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 32"
EQ="./fsdpc --max_steps 6 --checkpoint_freq 0 --num_tokens 0 --validation_freq 3 --validation_batches 2 --num_threads 1
    --lr 3e-3 --warmup 2 $M"
NP4="$MPI -np 4"

expect_error "tp 3 at 4 ranks" "tensor_parallel_degree 3 does not divide the world size 4" $NP4 $RUN --tensor_parallel_degree 3
expect_error "tp 4 and 2 key/value heads" "tensor_parallel_degree 4 does not divide --num_key_value_heads 2" $NP4 $RUN --tp 4
expect_error "tp 2 and 3 key/value heads" "does not divide --num_heads 6|does not divide --num_key_value_heads 3" \
    $NP4 $RUN --tp 2 --hidden_width 96 --num_heads 6 --num_key_value_heads 3
expect_error "tp 2 and an odd MLP width" "tensor_parallel_degree 2 does not divide --intermediate_size 343" \
    $NP4 $RUN --tp 2 --intermediate_size 343
expect_error "tp 2 and an odd vocabulary" "tensor_parallel_degree 2 does not divide --vocab_size 257" $NP4 $RUN --tp 2 --vocab_size 257
expect_error "hybrid sharding counts data-parallel ranks" \
    "the 2 data-parallel ranks \(world 4 / --tensor_parallel_degree 2\) is not a multiple of the shard group size 3" \
    $NP4 $RUN --tp 2 --sharding hybrid-full-shard --shard_group_size 3
expect_error "--sequence_parallel: tp must divide the context" \
    "sequence_parallel: --tensor_parallel_degree 2 does not divide --max_context_width 31" $NP4 $RUN --tp 2 --sequence_parallel --max_context_width 31
expect_error "--sequence_parallel without tensor parallelism" "sequence_parallel .* needs --tensor_parallel_degree 2 or more" \
    ./fsdpc --sequence_parallel --max_steps 1
expect_error "--tensor_parallel_degree 0" "tensor_parallel_degree must be at least 1" ./fsdpc --tp 0 --max_steps 1
expect_error "plan: tp must divide the world" "plan: --tensor_parallel_degree 3 does not divide the world size 8" \
    ./fsdpc plan --model_name llama2_7b --world_size 8 --tensor_parallel_degree 3
expect_error "plan: a tp group sits inside a node" "tensor_parallel_degree 8 does not divide the 4 ranks per node" \
    ./fsdpc plan --model_name llama2_7b --world_size 8 --ranks_per_node 4 --tensor_parallel_degree 8
$RUN --tp 1 >"$W/tp1.log" 2>&1
check "--tp 1 trains as before" $? "$(tail -1 "$W/tp1.log")"

# each family's tensor-parallel parts (model_plan_tp) against the whole tensors, at tp 2 and 4
build/test_model --tp-plan >"$W/parts.txt" 2>&1
grep -q "^ok - tp 4: gpt_neox" "$W/parts.txt" && ! grep -q "^not ok" "$W/parts.txt" && [ "$(grep -c '^ok' "$W/parts.txt")" = 6 ]
check "tp 2 and 4: every family's parts cover its tensors once and start as the whole tensors do" $? "$(grep -m2 'not ok' "$W/parts.txt")"

# ---- equal losses: tp 2 and 4 against one rank, the same global batch ----
run() { eq_run "$@"; }
same() { same_losses "$@"; }
run one 1 --batch_size 4
run tp2 2 --batch_size 4 --tp 2
same "np=2 tp 2 (replica 1 x shard 1 x tp 2) trains as one rank" one tp2
run one8 1 --batch_size 8
run fs 4 --batch_size 4 --tp 2
same "np=4 tp 2 x full-shard 2 trains as one rank" one8 fs
run hy 4 --batch_size 4 --tp 2 --sharding hybrid-full-shard --shard_group_size 1
same "np=4 tp 2 x hybrid (replica 2 x shard 1) trains as one rank" one8 hy
run ga 4 --batch_size 2 --grad_accum 2 --val_batch_size 4 --tp 2 --activation_checkpoints
same "np=4 tp 2, activation checkpointing and grad_accum 2 train as one rank" one8 ga
run gpt1 1 --batch_size 8 --model_type mingpt --num_key_value_heads 4
run gpt4 4 --batch_size 4 --model_type mingpt --num_key_value_heads 4 --tp 2
same "minGPT: np=4 tp 2 x full-shard 2 trains as one rank (c_attn's q, k, v blocks split by heads)" gpt1 gpt4
run gptd1 1 --batch_size 8 --model_type mingpt --num_key_value_heads 4 --dropout 0.1
run gptd4 4 --batch_size 4 --model_type mingpt --num_key_value_heads 4 --dropout 0.1 --tp 2
same "minGPT with --dropout 0.1: np=4 tp 2 x full-shard 2 trains as one rank (attention masks keyed by global head)" gptd1 gptd4
run neox1 1 --batch_size 8 --model_type gpt_neox --num_key_value_heads 4 --rotary_pct 0.5 --dropout 0.1
run neox4 4 --batch_size 4 --model_type gpt_neox --num_key_value_heads 4 --rotary_pct 0.5 --dropout 0.1 --tp 2
same "GPT-NeoX: np=4 tp 2 x full-shard 2 trains as one rank (per-head query_key_value, parallel residual, dropout)" neox1 neox4
run one4kv 1 --batch_size 8 --num_key_value_heads 4
run tp4 4 --batch_size 8 --tp 4 --num_key_value_heads 4
same "np=4 tp 4 (a head per rank) trains as one rank" one4kv tp4
# sequence parallelism: the residual stream, norms, dropouts and row-parallel biases on a tp rank's
# share of the batch's rows (a share may start inside a sequence: 4 rows of 32 tokens over tp 4
# with batch 1 per rank), the whole tensors' gradients summed over the tp group
run sp2 2 --batch_size 4 --tp 2 --sequence_parallel
same "--sequence_parallel: np=2 tp 2 trains as one rank" one sp2
run spfs 4 --batch_size 4 --tp 2 --sequence_parallel
same "--sequence_parallel: np=4 tp 2 x full-shard 2 trains as one rank" one8 spfs
run sphy 4 --batch_size 4 --tp 2 --sequence_parallel --sharding hybrid-full-shard --shard_group_size 1
same "--sequence_parallel: np=4 tp 2 x hybrid (replica 2 x shard 1) trains as one rank" one8 sphy
run spga 4 --batch_size 2 --grad_accum 2 --val_batch_size 4 --tp 2 --sequence_parallel --activation_checkpoints
same "--sequence_parallel: np=4 tp 2, activation checkpointing and grad_accum 2 train as one rank" one8 spga
run sppers 4 --batch_size 2 --grad_accum 2 --val_batch_size 4 --tp 2 --sequence_parallel --sharding hybrid-full-shard --shard_group_size 1
same "--sequence_parallel: np=4 tp 2 x hybrid (shard group 1: gradients kept whole over grad_accum 2) trains as one rank" one8 sppers
run spacc 4 --batch_size 2 --grad_accum 2 --val_batch_size 4 --tp 2 --sequence_parallel --accumulate_unsharded
same "--sequence_parallel: np=4 tp 2 with --accumulate_unsharded and grad_accum 2 trains as one rank" one8 spacc
run tpbf 4 --batch_size 4 --tp 2 --reduce_dtype bf16
run spbf 4 --batch_size 4 --tp 2 --sequence_parallel --reduce_dtype bf16
same "--sequence_parallel: np=4 tp 2 with bf16 reductions trains as tp 2 without it" tpbf spbf
run sptp4 4 --batch_size 8 --tp 4 --num_key_value_heads 4 --sequence_parallel
same "--sequence_parallel: np=4 tp 4 trains as one rank" one4kv sptp4
run spgpt 4 --batch_size 4 --model_type mingpt --num_key_value_heads 4 --tp 2 --sequence_parallel
same "--sequence_parallel: minGPT np=4 tp 2 x full-shard 2 (positions of a rank's rows, biases summed) trains as one rank" gpt1 spgpt
run spgptd 4 --batch_size 4 --model_type mingpt --num_key_value_heads 4 --dropout 0.1 --tp 2 --sequence_parallel
same "--sequence_parallel: minGPT with --dropout 0.1 (embedding, attention and residual masks) trains as one rank" gptd1 spgptd
run spneox 4 --batch_size 4 --model_type gpt_neox --num_key_value_heads 4 --rotary_pct 0.5 --dropout 0.1 --tp 2 --sequence_parallel
same "--sequence_parallel: GPT-NeoX np=4 tp 2 x full-shard 2 with dropout (masks of the global tokens) trains as one rank" neox1 spneox
run spdrop 4 --batch_size 1 --tp 4 --num_key_value_heads 4 --dropout 0.1 --sequence_parallel --max_context_width 24
run drop1b 1 --batch_size 1 --dropout 0.1 --num_key_value_heads 4 --max_context_width 24
same "--sequence_parallel: Llama dropout at tp 4 on one 24-token row (6 tokens a rank) trains as one rank" drop1b spdrop
# masked labels (-100): rows of ids whose first half bears no loss
masked_rows "$W/masked.jsonl" 27 8
run mone 1 --batch_size 8 --train_data "$W/masked.jsonl" --val_data "$W/masked.jsonl"
run mtp 4 --batch_size 4 --tp 2 --train_data "$W/masked.jsonl" --val_data "$W/masked.jsonl"
same "np=4 tp 2 with masked labels trains as one rank" mone mtp
run msp 4 --batch_size 4 --tp 2 --sequence_parallel --train_data "$W/masked.jsonl" --val_data "$W/masked.jsonl"
same "--sequence_parallel: np=4 tp 2 with masked labels trains as one rank" mone msp
run pk1 1 --batch_size 4 --packing --train_data "$W/masked.jsonl" --val_data "$W/masked.jsonl"
run pksp 2 --batch_size 4 --packing --tp 2 --sequence_parallel --train_data "$W/masked.jsonl" --val_data "$W/masked.jsonl"
same "--sequence_parallel: --packing (micro-batches of fewer rows) trains as one rank" pk1 pksp
run dgpt1 1 --batch_size 4 --model_type mingpt --num_key_value_heads 4 --document_masking --train_data "$W/masked.jsonl" --val_data "$W/masked.jsonl"
run dgpt2 2 --batch_size 4 --model_type mingpt --num_key_value_heads 4 --document_masking --tp 2 --sequence_parallel \
    --train_data "$W/masked.jsonl" --val_data "$W/masked.jsonl"
same "--sequence_parallel: minGPT with --document_masking (positions restart per document) trains as one rank" dgpt1 dgpt2
grep -q "gathered" "$W/fs.log" && ! grep -q "fsdpc: error" "$W/fs.log"
check "the tp run logs its memory lines and no error" $? "$(grep -m2 error "$W/fs.log")"

# ---- checkpoints: whole tensors at any degree; resume across degrees; --init_from ----
CK="--checkpoint_freq 3 --max_steps 6 --validation_freq 0"
run whole 1 --batch_size 4 $CK --checkpoint_dir "$W/ck1"
run tpck 2 --batch_size 4 --tp 2 $CK --checkpoint_dir "$W/ck2"
/usr/bin/python3 - "$W/ck1/step_00000003.h5" "$W/ck2/step_00000003.h5" <<'PY' >"$W/shapes.txt" 2>&1
import h5py, sys
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and n.startswith(("model/", "optim/")) else None)
bad = [n for n in names if n not in b or b[n].shape != a[n].shape]
assert names and not bad, bad[:3]
print(len(names))
PY
ok=$?  # before the message's $(...), which would set $? again
check "a tp 2 checkpoint holds every tensor whole, under the names and shapes of a tp 1 one ($(head -c 20 "$W/shapes.txt") tensors)" $ok \
    "$(tail -2 "$W/shapes.txt" | tr '\n' '|')"
eq_resumed to1 1 "$W/ck2" --batch_size 4
eq_agree "a tp 2 checkpoint resumes at tp 1 (one rank), losses as the run that never stopped" tpck to1
eq_resumed to2 2 "$W/ck1" --batch_size 4 --tp 2
eq_agree "a tp 1 checkpoint resumes at tp 2" whole to2
eq_resumed to22 4 "$W/ck2" --batch_size 2 --tp 2
eq_agree "a tp 2 checkpoint resumes at tp 2 x full-shard 2 on 4 ranks" tpck to22
eq_resumed tosp 2 "$W/ck1" --batch_size 4 --tp 2 --sequence_parallel
eq_agree "a tp 1 checkpoint resumes at tp 2 with --sequence_parallel" whole tosp
mkdir -p "$W/bad.ck" && cp "$W/ck2/step_00000003.h5" "$W/bad.ck/"
/usr/bin/python3 -c "
import h5py; f = h5py.File('$W/bad.ck/step_00000003.h5', 'r+'); d = f['optim/exp_avg/model.layers.1.self_attn.o_proj.weight']
x = d[()]; x[5, 40] += 1e-3; d[...] = x"
expect_error "a changed element of a tp 2 checkpoint is refused at tp 2 (its whole-tensor checksum)" \
    "o_proj.weight fails its checksum" $MPI -np 2 $EQ --batch_size 4 --tp 2 $CK --checkpoint_dir "$W/bad.ck" --resume_from_checkpoint "$W/bad.ck"
./fsdpc export --checkpoint "$W/ck2/step_00000006.h5" --output "$W/hf" --dtype fp32 >"$W/export.log" 2>&1
run init1 1 --batch_size 4 --init_from "$W/hf" --max_steps 3
run init2 4 --batch_size 2 --tp 2 --init_from "$W/hf" --max_steps 3
d=$(rel_diff "$W/init1.jsonl" "$W/init2.jsonl" 3 1e-5)
check "--init_from a Hugging Face export at tp 2 x full-shard 2 trains as at tp 1 (worst relative loss difference $d)" $? \
    "$(grep -m1 error "$W/init2.log" "$W/export.log")"

# ---- the emulated GPU (build/fsdpc_emu): NCCL's tp communicator, the CUDA vocabulary-parallel kernels ----
EM="--tokenizer byte --max_steps 3 --checkpoint_freq 0 --num_tokens 0 --validation_freq 0 --num_threads 1 --batch_size 2 --hidden_width 32
    --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 64 --max_context_width 16 --lr 3e-3 --warmup 1
    --train_data data/tinyshakespeare.txt"
./fsdpc $EM --metrics_file "$W/cpu.jsonl" >"$W/cpu.log" 2>&1
timeout 600 $MPI -np 2 ./build/fsdpc_emu $EM --device cuda --tp 2 --metrics_file "$W/gpu.jsonl" >"$W/gpu.log" 2>&1
d=$(rel_diff "$W/cpu.jsonl" "$W/gpu.jsonl" 3 1e-5) && grep -q "CPU emulation" "$W/gpu.log"
check "emulated GPU, tp 2: fp32 losses equal one CPU rank's (worst relative difference $d)" $? "$(grep -m2 'error\|emu:' "$W/gpu.log")"
./fsdpc $EM --precision bf16 --metrics_file "$W/cpu16.jsonl" >"$W/cpu16.log" 2>&1
timeout 600 $MPI -np 2 ./build/fsdpc_emu $EM --device cuda --tp 2 --precision bf16 --metrics_file "$W/gpu16.jsonl" >"$W/gpu16.log" 2>&1
d=$(rel_diff "$W/cpu16.jsonl" "$W/gpu16.jsonl" 3 5e-3)
check "emulated GPU, tp 2: bf16 tracks the CPU's bf16 (worst relative difference $d)" $? "$(grep -m2 'error\|emu:' "$W/gpu16.log")"
timeout 600 $MPI -np 2 ./build/fsdpc_emu $EM --device cuda --tp 2 --sequence_parallel --metrics_file "$W/gpusp.jsonl" >"$W/gpusp.log" 2>&1
d=$(rel_diff "$W/cpu.jsonl" "$W/gpusp.jsonl" 3 1e-5)
check "emulated GPU, tp 2 --sequence_parallel: fp32 losses equal one CPU rank's (worst relative difference $d)" $? \
    "$(grep -m2 'error\|emu:' "$W/gpusp.log")"
./fsdpc $EM --precision bf16 --model_type gpt_neox --num_key_value_heads 4 --dropout 0.1 --metrics_file "$W/cpunx.jsonl" >"$W/cpunx.log" 2>&1
timeout 600 $MPI -np 2 ./build/fsdpc_emu $EM --device cuda --tp 2 --sequence_parallel --precision bf16 --model_type gpt_neox \
    --num_key_value_heads 4 --dropout 0.1 --metrics_file "$W/gpunx.jsonl" >"$W/gpunx.log" 2>&1
d=$(rel_diff "$W/cpunx.jsonl" "$W/gpunx.jsonl" 3 5e-3)
check "emulated GPU, tp 2 --sequence_parallel: GPT-NeoX bf16 with dropout tracks the CPU's (worst relative difference $d)" $? \
    "$(grep -m2 'error\|emu:' "$W/gpunx.log")"
EMD="${EM/--num_key_value_heads 2/} --model_type mingpt --dropout 0.1"
./fsdpc $EMD --metrics_file "$W/cpud.jsonl" >"$W/cpud.log" 2>&1
timeout 600 $MPI -np 2 ./build/fsdpc_emu $EMD --device cuda --tp 2 --metrics_file "$W/gpud.jsonl" >"$W/gpud.log" 2>&1
d=$(rel_diff "$W/cpud.jsonl" "$W/gpud.jsonl" 3 1e-5)
check "emulated GPU, tp 2: minGPT with --dropout 0.1 (attention masks by global head) equals one CPU rank (worst relative difference $d)" \
    $? "$(grep -m2 'error\|emu:' "$W/gpud.log" "$W/cpud.log")"

# ---- generation: the first tp group runs the KV cache's forwards; its first rank samples ----
G="--max_steps 4 --checkpoint_freq 0 --validation_freq 0 --num_threads 1 --lr 3e-3 --warmup 2 $M --num_tokens 48 --temperature 0
   --prompt ROMEO:"
$MPI -np 1 ./fsdpc $G --batch_size 4 >"$W/gen1.txt" 2>"$W/gen1.err"
$MPI -np 2 ./fsdpc $G --batch_size 4 --tp 2 >"$W/gen2.txt" 2>"$W/gen2.err"
$MPI -np 4 ./fsdpc $G --batch_size 2 --tp 2 >"$W/gen4.txt" 2>"$W/gen4.err"
$MPI -np 2 ./fsdpc $G --batch_size 4 --tp 2 --sequence_parallel >"$W/gensp.txt" 2>"$W/gensp.err"
tail -1 "$W/gen1.txt" >"$W/g1" && tail -1 "$W/gen2.txt" >"$W/g2" && tail -1 "$W/gen4.txt" >"$W/g4" && tail -1 "$W/gensp.txt" >"$W/gsp"
[ "$(wc -c <"$W/g1")" -gt 40 ] && cmp -s "$W/g1" "$W/g2" && cmp -s "$W/g1" "$W/g4" && cmp -s "$W/g1" "$W/gsp" &&
    [ "$(grep -c ROMEO: "$W/gen2.txt")" = 1 ]
check "the sample after training at tp 2 (2 and 4 ranks, and with --sequence_parallel) is the 1-rank run's text, printed once" $? \
    "$(od -c "$W/g2" | head -2 | tr '\n' '|'; grep -m1 error "$W/gen2.err")"
timeout 600 $MPI -np 2 ./build/fsdpc_emu $G --batch_size 4 --tp 2 --device cuda --train_data data/tinyshakespeare.txt >"$W/geng.txt" 2>"$W/geng.err"
$MPI -np 1 ./fsdpc $G --batch_size 4 --train_data data/tinyshakespeare.txt >"$W/genc.txt" 2>/dev/null
cmp -s <(tail -1 "$W/genc.txt") <(tail -1 "$W/geng.txt")
check "emulated GPU, tp 2: the sample after training is the CPU's" $? "$(grep -m2 'error\|emu:' "$W/geng.err")"

# ---- the trace: the tp group's collectives on their own row ----
$MPI -np 4 $RUN --batch_size 4 --tp 2 --max_steps 3 --trace_file "$W/trace.json" --trace_steps 2:2 >/dev/null 2>&1
/usr/bin/python3 - "$W/trace.json" <<'PY'
import collections, json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
got = collections.Counter((rows.get((e["pid"], e["tid"])), e["args"]["group"]) for e in ev if e.get("cat") == "collective")
assert got[("tensor-parallel collectives", "tp")] > 0, got
assert not any(row == "tensor-parallel collectives" and g != "tp" for row, g in got), got
assert not any(row != "tensor-parallel collectives" and g == "tp" for row, g in got), got
PY
check "the trace shows the tp group's collectives on their own row, and only them" $?
