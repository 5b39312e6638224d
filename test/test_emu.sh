#!/usr/bin/env bash
# The whole program on the emulated GPU (build/fsdpc_emu: the CUDA kernels, cuBLASLt, NCCL over
# MPI, all on the CPU, device memory unreadable by host code, streams checked for races): every
# GPU code path of the training loop runs, in fp32 and bf16, with offload, two ranks, gradient
# accumulation, activation checkpointing, checkpoints and generation, against the CPU build.
# Few steps of a tiny model: the emulation is slow.
cd "$(dirname "$0")/.."
source test/lib.sh
PREFIX="emulated gpu: "
M="--hidden_width 32 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 64 --max_context_width 16
   --batch_size 2 --max_steps 3 --lr 3e-3 --warmup 1 --num_tokens 0 --validation_freq 0 --checkpoint_freq 0
   --train_data data/tinyshakespeare.txt --num_threads 1"
EMU="./build/fsdpc_emu $M --device cuda"  # flags after these override them
CPU="./fsdpc $M --device cpu"

# run NAME CMD...: the run's losses go to $W/NAME.jsonl, its log to $W/NAME.log
run() {
    local name=$1
    shift
    timeout 300 "$@" --metrics_file "$W/$name.jsonl" >"$W/$name.log" 2>&1
    echo $? >"$W/$name.rc"
}

# same NAME A B TOL: runs A and B logged the same 3 losses, to TOL relative
same() {
    local d
    d=$(rel_diff "$W/$2.jsonl" "$W/$3.jsonl" 3 "$4") && [ "$(cat "$W/$2.rc" "$W/$3.rc")" = "$(printf '0\n0')" ]
    check "$1 (worst rel diff $d, tolerance $4)" $? "$(grep -m2 -E 'error|emu' "$W/$2.log" "$W/$3.log")"
}

# the race checks themselves: unordered work on two streams, or host code on device memory or on
# a pinned buffer still being copied, aborts with a message; the ordered program runs
for c in raw:race war:race pinned:"touched pinned memory" host:"touched device memory"; do
    ./build/emu_race_check "${c%%:*}" >"$W/race.log" 2>&1
    [ $? -ge 128 ] && grep -q "^emu: .*${c#*:}" "$W/race.log"
    check "the race check catches case ${c%%:*}" $? "$(head -c 300 "$W/race.log")"
done
./build/emu_race_check ordered >"$W/race.log" 2>&1
check "the race check passes ordered work" $? "$(head -c 300 "$W/race.log")"

run cpu $CPU
run gpu $EMU
grep -q "on cuda:0 (CPU emulation)" "$W/gpu.log"
check "--device cuda runs on the emulated GPU" $? "$(head -c 300 "$W/gpu.log")"
same "fp32 losses equal the CPU's" cpu gpu 1e-5
run cpu_bf16 $CPU --precision bf16
run gpu_bf16 $EMU --precision bf16
same "bf16 (tensor-core forms) tracks the CPU's bf16" cpu_bf16 gpu_bf16 5e-3
run offload $EMU --cpu_offload
same "--cpu_offload (host AdamW, async copies) equals the on-device optimizer" gpu offload 1e-5
run ac $EMU --activation_checkpoints
same "--activation_checkpoints equals no checkpointing" gpu ac 1e-6
run np2 $MPI -np 2 $EMU --batch_size 1 --sharding full-shard
same "np=2 full-shard over emulated NCCL equals np=1" gpu np2 1e-5
run np2_hybrid_bf16 $MPI -np 2 $EMU --batch_size 1 --sharding hybrid-full-shard --shard_group_size 1 --precision bf16 \
    --reduce_dtype bf16
same "np=2 hybrid, bf16 gathers and reductions over emulated NCCL track np=1 bf16" gpu_bf16 np2_hybrid_bf16 1e-3
expect_error "more ranks on a node than GPUs" "^fsdpc: error: 2 ranks on this node but 1 GPU\(s\): each rank needs its own GPU" \
    env FSDPC_EMU_GPUS=1 $MPI -np 2 $EMU
# the device memory check before allocating, on a 48 MiB (then 250 MiB) emulated GPU: the estimate,
# the GPU's free memory and what would fit, on every rank, before any cudaMalloc fails
expect_error "a batch too big for the GPU's free memory" \
    "^fsdpc: error: estimated peak device memory 0\.10 GiB per rank \(.*activations 0\.10.*\) exceeds the 0\.0. GiB free on cuda:0 \(CPU emulation\) \(of 0\.05 GiB\); would fit: --batch_size 8 " \
    env FSDPC_EMU_GPU_MEM_MIB=48 $EMU --batch_size 64 --max_context_width 256
expect_error "np=2: a batch too big for the GPUs' free memory" "^fsdpc: error: estimated peak device memory .* would fit: --batch_size 8 " \
    env FSDPC_EMU_GPU_MEM_MIB=48 $MPI -x FSDPC_EMU_GPU_MEM_MIB -np 2 $EMU --batch_size 64 --max_context_width 256
BIG="--hidden_width 512 --num_heads 8 --intermediate_size 2048 --num_layers 4"
expect_error "a model whose optimizer state does not fit on the GPU: --cpu_offload would" \
    "^fsdpc: error: estimated peak device memory 0\.26 GiB per rank .*optimizer 0\.12.* exceeds .* GiB free on cuda:0 .*would fit: --cpu_offload " \
    env FSDPC_EMU_GPU_MEM_MIB=250 $EMU $BIG
run offload_fits env FSDPC_EMU_GPU_MEM_MIB=250 $EMU $BIG --cpu_offload --max_steps 0
[ "$(cat "$W/offload_fits.rc")" = 0 ]
check "--cpu_offload keeps the optimizer state off the device: the same model then passes the check" $? "$(grep -m2 error "$W/offload_fits.log")"
run np1_accum $EMU --grad_accum 2
run np2_zero2_accum_offload $MPI -np 2 $EMU --batch_size 1 --grad_accum 2 --sharding grad-shard --cpu_offload
same "np=2 grad-shard, 2 micro-batches, offload equals np=1" np1_accum np2_zero2_accum_offload 1e-5

# checkpoints: 2 steps + resume 1 equals 3 straight, bit for bit; the file loads on the CPU build
run ck2 $EMU --checkpoint_dir "$W/ck" --checkpoint_freq 2
rm -f "$W/ck/step_00000003.h5"
run ck_resumed $EMU --resume_from_checkpoint "$W/ck"
[ "$(cat "$W/ck2.rc" "$W/ck_resumed.rc")" = "$(printf '0\n0')" ] &&
    grep -q "Resumed from $W/ck/step_00000002.h5 at step 2" "$W/ck_resumed.log" &&
    cmp -s <(grep '"step": 3,' "$W/gpu.jsonl" | steady) <(steady "$W/ck_resumed.jsonl")
check "2 steps + resume 1 equals 3 straight, bit for bit" $? "$(grep -m2 -E 'error|Resumed' "$W/ck_resumed.log")"
$CPU --resume_from_checkpoint "$W/ck/step_00000002.h5" --max_steps 2 >"$W/eval.log" 2>&1
check "its checkpoint loads on the CPU build" $? "$(grep -m1 error "$W/eval.log")"

# generation with the KV cache: greedy decoding prints the prompt and 8 more bytes
out=$(timeout 300 $EMU --resume_from_checkpoint "$W/ck/step_00000002.h5" --max_steps 0 --prompt "ROMEO:" \
    --num_tokens 8 --temperature 0 2>"$W/gen.err")
[ "${#out}" -ge 14 ] && [ "${out:0:6}" = "ROMEO:" ]
check "generation with the KV cache" $? "(got '${out}', $(grep -m1 error "$W/gen.err"))"
