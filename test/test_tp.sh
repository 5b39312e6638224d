#!/usr/bin/env bash
# Tensor parallelism's mesh (shard/parallel.h): --tensor_parallel_degree (--tp) and
# --sequence_parallel parse; the degree must divide the world, a node's ranks, the heads, the
# key/value heads, the MLP width and the vocabulary, and hybrid sharding counts data-parallel
# ranks (world / tp); each misfit is one error line naming the numbers, on every rank, in training
# and in `fsdpc plan`. A layout that fits is then refused by name: the split blocks are not built
# yet. (test_comm checks the mesh's groups: tp groups of consecutive ranks, shard groups across.)
# The families already declare how each tensor splits (model_tensor_split), checked here.
cd "$(dirname "$0")/.."
source test/lib.sh
RUN="./fsdpc --max_steps 1 --checkpoint_freq 0 --num_tokens 0 --validation_freq 0 --num_threads 1"
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
expect_error "a fitting layout is refused by name (the split blocks are not built yet)" \
    "tensor_parallel_degree 2: the layout fits \(replica 1 x shard 2 x tp 2\), but this fsdpc does not split" $NP4 $RUN --tp 2
expect_error "hybrid at tp 2: replica 2 x shard 1 x tp 2" "layout fits \(replica 2 x shard 1 x tp 2\)" \
    $NP4 $RUN --tensor_parallel_degree 2 --sharding hybrid-full-shard --shard_group_size 1
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
