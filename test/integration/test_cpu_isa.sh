#!/usr/bin/env bash
# The CPU kernels' instruction set and --precision bf16 on the CPU: the start-up summary names the
# kernels chosen (AVX-512 where the CPU has it, AVX2 under FSDPC_CPU_ISA=avx2); the AVX-512 kernels
# train as the AVX2 ones do, bit for bit; on a CPU with AVX512_BF16, bf16 matmuls train 100 steps within the
# GPU's bf16 tolerance of fp32, and the forced emulation (AVX2 kernels) gives the emulation's losses.
cd "$(dirname "$0")/../.."
source test/lib.sh
M="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 172
   --max_context_width 64 --batch_size 4 --num_tokens 0 --checkpoint_freq 0 --validation_freq 0 --warmup 10 --lr 3e-3
   --num_threads 1"
train() {  # train NAME STEPS ARGS...
    local name=$1 steps=$2
    shift 2
    run "$name" ./fsdpc $M --max_steps "$steps" "$@"
}

train auto 20
FSDPC_CPU_ISA=avx2 run avx2 ./fsdpc $M --max_steps 20
grep -q "^fsdpc: CPU kernels: avx2 (FSDPC_CPU_ISA=avx2)" "$W/avx2.log"
check "FSDPC_CPU_ISA=avx2: the summary names the AVX2 kernels" $? "$(grep -m1 'CPU kernels' "$W/avx2.log")"
expect_error "FSDPC_CPU_ISA of an unknown set is refused" "FSDPC_CPU_ISA=sse4: not an instruction set.*auto, avx2 or avx512" \
    env FSDPC_CPU_ISA=sse4 ./fsdpc $M --max_steps 1
if ! grep -q "^fsdpc: CPU kernels: avx512 (this CPU has AVX-512" "$W/auto.log"; then
    grep -q "^fsdpc: CPU kernels: avx2 (this CPU has no AVX-512" "$W/auto.log"
    check "the summary names the kernels: AVX2 on a CPU without AVX-512" $? "$(grep -m1 'CPU kernels' "$W/auto.log")"
    echo "ok - the AVX-512 kernels and bf16 matmuls # SKIP this CPU has no AVX-512 F, BW, DQ and VL"
    exit 0
fi
check "the summary names the AVX-512 kernels on this CPU" 0
# the AVX-512 build's reductions keep AVX2's order: the same losses bit for bit
[ "$(losses "$W/avx2.jsonl")" = "$(losses "$W/auto.jsonl")" ] && [ "$(wc -l <"$W/auto.jsonl")" = 20 ]
check "AVX-512 kernels train as the AVX2 ones over 20 steps, bit for bit" $? "$(rel_diff "$W/avx2.jsonl" "$W/auto.jsonl" 20 0)"
if ! grep -q "AVX512_BF16" "$W/auto.log"; then
    echo "ok - bf16 matmuls on the CPU # SKIP this CPU has no AVX512_BF16"
    exit 0
fi

# 100 steps: fp32, bf16 on oneDNN's matmuls, and the emulation forced by the AVX2 kernels
train fp32 100
train bf16 100 --precision bf16
FSDPC_CPU_ISA=avx2 train emu 100 --precision bf16
grep -q "^fsdpc: CPU kernels: avx512 .*AVX512_BF16; --precision bf16: matmuls on bf16 operands through oneDNN .*, attention's through AVX512_BF16" "$W/bf16.log"
check "the summary says bf16 matmuls run on oneDNN, attention's products on AVX512_BF16" $? "$(grep -m1 'CPU kernels' "$W/bf16.log")"
[ "$(grep -c "emulated in fp32 (bf16-rounded weights, fp32 matmuls): the AVX2 kernels" "$W/emu.log")" = 1 ]
check "FSDPC_CPU_ISA=avx2 --precision bf16 says once that bf16 is emulated" $? "$(grep -m1 'CPU kernels' "$W/emu.log")"
# the GPU's bf16 (run_gpu_tests.sh) is held to 5e-2 of the CPU's losses; 1e-4 below: not fp32 itself
w=$(rel_diff "$W/fp32.jsonl" "$W/bf16.jsonl" 100 5e-2 1e-4)
check "bf16 matmuls track fp32 over 100 steps within 5e-2 relative (worst $w)" $?
# the emulation (bf16-rounded weights, fp32 products) as test_shard.sh holds it: 5e-3 of fp32
w=$(rel_diff "$W/fp32.jsonl" "$W/emu.jsonl" 100 5e-3 1e-6)
check "the forced emulation tracks fp32 within 5e-3 over 100 steps (worst $w)" $?
w=$(rel_diff "$W/emu.jsonl" "$W/bf16.jsonl" 100 1 1e-5)
check "the forced emulation's losses are not the bf16 matmuls' (rel diff $w)" $?
