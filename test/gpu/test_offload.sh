#!/usr/bin/env bash
# Activation offloading (--offload_activations, --activation_loading_horizon) on the emulated GPU
# (build/fsdpc_emu: its streams are checked for races, so a copy that compute does not wait for,
# or that overwrites what compute still reads, aborts the run): the same losses bit for bit as
# checkpointing without offload (fp32 and bf16, 1 and 2 ranks, gradient accumulation, selective
# checkpointing, validation, generation, tensor parallelism (and sequence parallelism), the three families, with
# --cpu_offload); the tracker's device activations lower by the entries that wait in host memory,
# which the host figure shows; fsdpc plan and the start-up estimate agree with the tracker, and
# the memory check proposes the flag where it makes a model fit; on the CPU the flag does nothing
# (logged once); the contradiction with --activation_checkpoints 0 is refused.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="offload: "
PY=${PYTHON:-python3}
if [ ! -x build/fsdpc_emu ]; then
    check "activation offloading on the emulated GPU (skipped: no build/fsdpc_emu; make build/fsdpc_emu)" 0
    exit 0
fi
# D=64, T=16, B=2: a residual entry is 8 KiB in fp32, 4 KiB in bf16, whole pages of the emulator's
# page-granular race check (entries sharing a page would look like one buffer copied and written at once)
M="--tokenizer byte --hidden_width 64 --num_layers 6 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 16
   --batch_size 2 --max_steps 3 --lr 3e-3 --warmup 1 --checkpoint_freq 0 --num_tokens 0 --train_data data/tinyshakespeare.txt
   --num_threads 1 --logging_freq 1 --validation_freq 2 --validation_batches 2 --val_data data/tinyshakespeare.txt"
EMU="./build/fsdpc_emu $M --device cuda"
GEN="--num_tokens 8 --temperature 0 --prompt ROMEO:"

# same NAME A B: both ran, and logged the same losses, gradient norms and validation losses, byte for byte
same() {
    [ "$(cat "$W/$2.rc" "$W/$3.rc")" = "$(printf '0\n0')" ] && [ "$(grep -c '"loss"' "$W/$2.jsonl")" = 3 ] &&
        cmp -s <(steady "$W/$2.jsonl") <(steady "$W/$3.jsonl") &&
        cmp -s <(grep 'Validation loss' "$W/$2.log") <(grep 'Validation loss' "$W/$3.log")
    check "$1" $? "(rc $(cat "$W/$2.rc" "$W/$3.rc" | tr '\n' ' ')$(grep -m2 -hE '^emu|error' "$W/$2.log" "$W/$3.log" | head -c 300))"
}
# mem NAME CATEGORY INDEX: the tracker's bytes from the run's last metrics line ("mem": [now min,
# now max, peak min, peak max])
mem() { tail -1 "$W/$1.jsonl" | $PY -c "import json, sys; print(int(json.load(sys.stdin)['mem']['$2'][$3]))"; }

# ---- the same losses, bit for bit ----
# (the fp32 pair also validates every 2 steps, forward only: its entries never leave the device)
run ac $EMU --activation_checkpoints $GEN
run off $EMU --offload_activations 1 $GEN
same "fp32, every block checkpointed, horizon 2 (the default): losses, grad norms and validation equal checkpointing alone" ac off
grep -q "^--offload_activations: activation checkpointing on (implied); the inputs of 6 checkpointed blocks pass through 3 device entries; 3 of them wait in pinned host memory" "$W/off.log"
check "--offload_activations turns checkpointing on and says what it offloads" $? "$(grep -m1 -- '--offload' "$W/off.log")"
[ "$(grep -c 'Validation loss' "$W/off.log")" = 1 ] && [ -s "$W/off.out" ] && cmp -s "$W/ac.out" "$W/off.out"
ok=$?  # before the message's $(...), which would set $? again
check "a validation pass between steps, then generation (KV cache, no offload), write the same text ('$(head -c 40 "$W/off.out")')" $ok
# blocks 0, 2, 4 checkpointed: with horizon 1, two of their inputs stay in the ring, one goes to the host
S="--selective_checkpointing 2 --precision bf16 --validation_freq 0"
run bf_ac $EMU $S --grad_accum 2
run bf_off $EMU $S --grad_accum 2 --offload_activations 1 --activation_loading_horizon 1
same "bf16 stream, --selective_checkpointing 2, --grad_accum 2, horizon 1: equal" bf_ac bf_off
run np2_ac $MPI -np 2 $EMU --sharding full-shard --grad_accum 2 --activation_checkpoints
run np2_off $MPI -np 2 $EMU --sharding full-shard --grad_accum 2 --offload_activations 1
same "np=2 full-shard fp32, --grad_accum 2: equal" np2_ac np2_off
run np2_bf_ac $MPI -np 2 $EMU --sharding hybrid-full-shard --shard_group_size 1 $S
run np2_bf_off $MPI -np 2 $EMU --sharding hybrid-full-shard --shard_group_size 1 $S --offload_activations 1 \
    --activation_loading_horizon 1
same "np=2 hybrid bf16, --selective_checkpointing 2, horizon 1: equal" np2_bf_ac np2_bf_off

# tensor parallelism: each rank of a tp group holds the whole residual stream, offloaded alike
run tp_ac $MPI -np 2 $EMU --tensor_parallel_degree 2 --activation_checkpoints --validation_freq 0
run tp_off $MPI -np 2 $EMU --tensor_parallel_degree 2 --offload_activations 1 --validation_freq 0
same "np=2 --tensor_parallel_degree 2: equal" tp_ac tp_off
# sequence parallelism: a rank's share of the rows is what it offloads
run sp_ac $MPI -np 2 $EMU --tensor_parallel_degree 2 --sequence_parallel --activation_checkpoints --validation_freq 0
run sp_off $MPI -np 2 $EMU --tensor_parallel_degree 2 --sequence_parallel --offload_activations 1 --validation_freq 0
same "np=2 --tensor_parallel_degree 2 --sequence_parallel: equal" sp_ac sp_off
# the other families (minGPT's tied head, GPT-NeoX's parallel residual) go through the same entries
for mt in mingpt gpt_neox; do
    F="./build/fsdpc_emu ${M/--num_key_value_heads 2/} --device cuda --model_type $mt --validation_freq 0"
    run ${mt}_ac $F --activation_checkpoints
    run ${mt}_off $F --offload_activations 1
    same "--model_type $mt: equal" ${mt}_ac ${mt}_off
done
# with --cpu_offload the optimizer's copies share the copy stream with the activations'
run cpo_ac $EMU --cpu_offload --activation_checkpoints --validation_freq 0
run cpo_off $EMU --cpu_offload --offload_activations 1 --validation_freq 0
same "with --cpu_offload (the same copy stream): equal" cpo_ac cpo_off

# ---- memory: the tracker, the start-up estimate, the plan ----
# an entry of the residual stream: B x T x D activations (4 bytes in fp32, 2 in bf16); the
# entries beyond the ring of horizon + 1 wait in host memory (6 - 3 in fp32, 3 - 2 in bf16 here)
for pair in "ac off 2 16 64 4 3" "bf_ac bf_off 2 16 64 2 1" "np2_ac np2_off 2 16 64 4 3"; do
    set -- $pair
    entry=$(($3 * $4 * $5 * $6)) moved=$(($7 * $3 * $4 * $5 * $6))
    a=$(mem "$1" activations 3) o=$(mem "$2" activations 3) h=$(mem "$2" host 1) h0=$(mem "$1" host 1)
    [ "$((a - o))" = "$moved" ] && [ "$h" = "$moved" ] && [ "$h0" = 0 ]
    check "tracker ($2): device activations peak $a -> $o bytes (-$7 entries of $entry), host $h0 -> $h bytes" $?
done
grep -qE "^memory estimate per rank: .*; offloaded activations [0-9.]+ MiB in pinned host memory\)" "$W/off.log" &&
    ! grep -q "offloaded activations" "$W/ac.log"
check "the start-up estimate names the offloaded activations" $? "$(grep -m1 '^memory estimate' "$W/off.log")"
# the plan of the same runs, against the tracker: device activations and host bytes within 1%
plan() { ./build/fsdpc_emu plan $M --device cuda --world_size 1 --json "$@" 2>"$W/plan.err"; }
for pair in "off --offload_activations 1" "bf_off $S --grad_accum 2 --offload_activations 1 --activation_loading_horizon 1" \
    "ac --activation_checkpoints"; do
    set -- $pair
    name=$1
    shift
    read -r pa ph <<<"$(plan "$@" | $PY -c 'import json, sys; d = json.load(sys.stdin)
print(int(d["per_rank_bytes"]["activations"]), int(d["offloaded_activations_bytes"]))')"
    ta=$(mem "$name" activations 3) th=$(mem "$name" host 1)
    awk -v pa="$pa" -v ph="$ph" -v ta="$ta" -v th="$th" 'BEGIN { d = (pa - ta) / ta; e = th ? (ph - th) / th : ph
        exit !(pa > 0 && d * d <= 1e-4 && e * e <= 1e-4) }'
    check "plan $*: device activations $pa, host $ph bytes = the tracker's $ta, $th (within 1%)" $? "$(head -c 200 "$W/plan.err")"
done
plan --offload_activations 1 | $PY -c 'import json, sys; d = json.load(sys.stdin); assert d["offload_horizon"] == 2 and d["checkpoint_every"] == 1' &&
    plan --offload_activations 1 | grep -q . && ./build/fsdpc_emu plan $M --device cuda --world_size 1 --offload_activations 1 |
    grep -qE "^  offloaded +[0-9.]+ MiB .*pinned host memory, not in the peak \(--offload_activations, horizon 2\)"
check "plan: horizon 2 by default, checkpointing implied, an 'offloaded' row" $?
# a Llama-2 7B plan: context 4096, batch 1, bf16: 32 block inputs of 32 MiB each, 29 of them on the host
read -r a0 a1 h1 <<<"$(for o in "" "--offload_activations 1"; do
    ./build/fsdpc_emu plan --model_name llama2_7b --precision bf16 --max_context_width 4096 --batch_size 1 --activation_checkpoints \
        --world_size 8 --json $o | $PY -c 'import json, sys; d = json.load(sys.stdin)
print(int(d["per_rank_bytes"]["activations"]), int(d["offloaded_activations_bytes"]))'
done | tr '\n' ' ' | awk '{ print $1, $3, $4 }')"
[ $((a0 - a1)) = $((29 * 4096 * 4096 * 2)) ] && [ "$h1" = $((29 * 4096 * 4096 * 2)) ]
check "plan llama2_7b at 4096: offloading moves 29 of 32 checkpoints (928 MiB) from the device ($a0 -> $a1) to the host" $?

# the memory check before allocating, on a 100 MiB emulated GPU: 24 blocks' checkpoints at context
# 4096 (1 MiB each) do not fit it (estimated 69.5 MiB against some 70 free), offloaded they do
# (48.5; the caching allocator's rounding takes most of the rest: at 90 MiB the start runs out)
BIG="./build/fsdpc_emu ${M%%--validation_freq*} --device cuda --num_layers 24 --max_context_width 4096 --batch_size 1 --max_steps 0"
expect_error "a GPU too small for the checkpoints: would fit with --offload_activations" \
    "^fsdpc: error: estimated peak device memory .* exceeds the 0\.0. GiB free .*; would fit: --offload_activations --batch_size 1 " \
    env FSDPC_EMU_GPU_MEM_MIB=100 $BIG
run fits env FSDPC_EMU_GPU_MEM_MIB=100 $BIG --offload_activations 1
[ "$(cat "$W/fits.rc")" = 0 ] && grep -q "^--offload_activations: .*the inputs of 24 checkpointed blocks pass through 3 device entries" "$W/fits.log"
check "... and with it the run starts" $? "$(grep -m2 -E 'error|emu' "$W/fits.log")"

# two blocks and the default horizon: both inputs fit the ring of 3, nothing moves
run few $EMU --num_layers 2 --offload_activations 1 --validation_freq 0
[ "$(cat "$W/few.rc")" = 0 ] && grep -q "^--offload_activations: activation checkpointing on (implied); nothing to move" "$W/few.log" &&
    [ "$(mem few host 1)" = 0 ]
check "two checkpointed blocks within the ring: nothing moves (logged), no host memory" $? "$(grep -m1 -- '--offload' "$W/few.log")"

# ---- the CPU: no effect, logged once; checkpointing as the flags set it ----
CPU="./fsdpc $M --device cpu"
run cpu $MPI -np 2 $CPU --batch_size 1
run cpu_off $MPI -np 2 $CPU --batch_size 1 --offload_activations 1
same "CPU np=2: --offload_activations trains exactly as without" cpu cpu_off
[ "$(grep -c -- '--offload_activations: no effect on the CPU device' "$W/cpu_off.log")" = 1 ]
check "CPU: 'no effect' logged once" $? "($(grep -c -- '--offload_activations' "$W/cpu_off.log") lines)"
e0=$(grep -m1 '^memory estimate' "$W/cpu.log") e1=$(grep -m1 '^memory estimate' "$W/cpu_off.log")
[ -n "$e0" ] && [ "$e0" = "$e1" ] && [ "$(mem cpu activations 3)" = "$(mem cpu_off activations 3)" ]
check "CPU: it does not turn checkpointing on (the same activation memory, estimated and tracked)" $? "($e0 | $e1)"

# ---- refusals ----
expect_error "--offload_activations 1 with --activation_checkpoints 0" \
    "^fsdpc: error: --offload_activations 1 offloads the inputs of checkpointed blocks, and --activation_checkpoints 0 turns checkpointing off: drop one of the two$" \
    $EMU --offload_activations 1 --activation_checkpoints 0
expect_error "the contradiction on the CPU too" "^fsdpc: error: --offload_activations 1 .* --activation_checkpoints 0" \
    $CPU --offload_activations 1 --activation_checkpoints 0
expect_error "--activation_loading_horizon 0" "^fsdpc: error: --activation_loading_horizon must be >= 1" \
    $EMU --offload_activations 1 --activation_loading_horizon 0
