#!/usr/bin/env bash
# The whole program on the emulated GPU (build/fsdpc_emu: the CUDA kernels, cuBLASLt, NCCL over
# MPI, all on the CPU, device memory unreadable by host code, streams checked for races): every
# GPU code path of the training loop runs, in fp32 and bf16, with offload, two ranks, gradient
# accumulation, activation checkpointing, checkpoints and generation, against the CPU build.
# Few steps of a tiny model: the emulation is slow.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="emulated gpu: "
M="--tokenizer byte --hidden_width 32 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 64 --max_context_width 16
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
for c in raw:race war:race pinned:"touched pinned memory" host:"touched device memory" free:"cudaFree.* while stream 1" \
    reuse:"after cudaFree"; do
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
# a sliding window (Mistral's) of 5 of the 16 positions: the windowed kernels, fp32 and tensor-core,
# training and generation (the prompt and the 8 new tokens run past the window on the KV cache)
run cpu_win $CPU --sliding_window 5 --checkpoint_dir "$W/ckw" --checkpoint_freq 3
run gpu_win $EMU --sliding_window 5
same "a sliding window (5 of 16): fp32 losses equal the CPU's" cpu_win gpu_win 1e-5
rel_diff "$W/cpu.jsonl" "$W/cpu_win.jsonl" 3 1 1e-6 >/dev/null
check "the window changes the losses" $?
run cpu_win_bf16 $CPU --sliding_window 5 --precision bf16
run gpu_win_bf16 $EMU --sliding_window 5 --precision bf16
same "a sliding window: bf16 tracks the CPU's bf16" cpu_win_bf16 gpu_win_bf16 5e-3
GW="--resume_from_checkpoint $W/ckw/step_00000003.h5 --max_steps 0 --prompt ROMEO: --num_tokens 8 --temperature 0"
out=$(timeout 300 $EMU $GW 2>"$W/genw.err")
ref=$($CPU $GW 2>/dev/null)
[ "${#out}" -ge 14 ] && [ "$out" = "$ref" ]
check "generation with a sliding window equals the CPU's greedy text" $? "(got '${out}', CPU '${ref}', $(grep -m1 error "$W/genw.err"))"
# The emulator's roofline model of one bf16 training step on an H100 (a model, not a measurement:
# docs/gpu.md), on a fixed shape a little bigger than the tiny one, so its buffers span pages.
ROOF="D=128 L=2 H=4 KV=2 F=352 T=64 B=2 V=256, step 2"
run roofline env FSDPC_EMU_ROOFLINE=1 $EMU --precision bf16 --hidden_width 128 --intermediate_size 352 \
    --max_context_width 64 --vocab_size 256 --max_steps 2
line=$(sed -n 's/^emu: \(modelled H100 step time: [^;]*\);.*/\1/p' "$W/roofline.log")
echo "# $line [bf16, $ROOF]"
echo "$line" | awk '{ exit !($5 > 0 && NF >= 20) }' && [ "$(cat "$W/roofline.rc")" = 0 ]
check "the roofline model prints a positive modelled H100 step time" $? "$(tail -c 300 "$W/roofline.log")"
# the throughput work's goal: at most half the 0.0227 ms this shape modelled before the fusions and bf16
echo "$line" | awk '{ exit !($5 <= 0.01135) }'
ok=$?  # before the message's $(...), which would set $? again
check "the modelled step time is at most half the starting 0.0227 ms: $(echo "$line" | awk '{print $5}') ms" $ok
run offload $EMU --cpu_offload
same "--cpu_offload (host AdamW, async copies) equals the on-device optimizer" gpu offload 1e-5
run ac $EMU --activation_checkpoints
same "--activation_checkpoints equals no checkpointing" gpu ac 1e-6
run np2 $MPI -np 2 $EMU --batch_size 1 --sharding full-shard
same "np=2 full-shard over emulated NCCL equals np=1" gpu np2 1e-5
run np2_hybrid_bf16 $MPI -np 2 $EMU --batch_size 1 --sharding hybrid-full-shard --shard_group_size 1 --precision bf16 \
    --reduce_dtype bf16
same "np=2 hybrid, bf16 gathers and reductions over emulated NCCL track np=1 bf16" gpu_bf16 np2_hybrid_bf16 1e-3
expect_error "more ranks on a node than GPUs" "^fsdpc: error: 4 ranks on this node but 2 GPU\(s\) visible: each rank needs its own GPU" \
    env FSDPC_EMU_GPUS=2 $MPI -np 4 $EMU
# one visible GPU per rank: the same physical GPU (one UUID) is refused, distinct ones train
expect_error "two ranks that see the same single GPU" "^fsdpc: error: local ranks 0 and 1 on one node share GPU [0-9a-f]+: give each rank its own" \
    env FSDPC_EMU_GPUS=1 $MPI -np 2 $EMU
run np2_gpu_per_rank env FSDPC_EMU_GPUS=1 $MPI -np 2 bash -c 'FSDPC_EMU_GPU_ID=g$OMPI_COMM_WORLD_RANK exec "$@"' _ $EMU \
    --batch_size 1 --sharding full-shard
same "np=2 with one GPU visible per rank (CUDA_VISIBLE_DEVICES per rank) equals np=2 on one node's GPUs" np2 np2_gpu_per_rank 0
# shared memory: sm_80 code also runs on sm_86/89 parts with 99 KB per block. At head dim 128
# the fp32 backward then picks smaller tiles and bf16 attention the fp32 kernels (with a note);
# a limit nothing fits is one clear error
HD128="--tokenizer byte --hidden_width 128 --num_layers 1 --num_heads 1 --num_key_value_heads 1"
for p in float32 bf16; do
    run smem227_$p $EMU $HD128 --precision $p
    run smem99_$p env FSDPC_EMU_SMEM_KB=99 $EMU $HD128 --precision $p
done
same "99 KB of shared memory: fp32 attention with smaller backward tiles equals the default tiles" smem227_float32 \
    smem99_float32 1e-5
grep -q "^fsdpc: note: bf16 attention at head dim 128 needs 111 KB .* allows 99 KB" "$W/smem99_bf16.log"
check "99 KB of shared memory: bf16 attention says it runs on the fp32 kernels" $? "$(grep -m2 -E 'note|error' "$W/smem99_bf16.log")"
same "99 KB of shared memory: bf16 with fp32 attention tracks the tensor-core attention" smem227_bf16 smem99_bf16 5e-3
expect_error "a GPU whose shared memory fits no attention tiles" \
    "^fsdpc: error: attention: a kernel needs 72 KB of shared memory per block, but this GPU allows 40 KB" \
    env FSDPC_EMU_SMEM_KB=40 $EMU $HD128
# out of memory: every allocation first fails and the caching allocator frees its cache and
# retries, collectives in flight; the emulated cudaFree aborts while any stream still runs work
# (a real one waits for the device holding the driver's lock), so the allocator drains it first
run np2_oom_retry env FSDPC_EMU_MALLOC_RETRY_AFTER=1 $MPI -x FSDPC_EMU_MALLOC_RETRY_AFTER -np 2 $EMU --batch_size 1 \
    --sharding full-shard --precision bf16
grep -q "^emu: cudaMalloc.* fails" "$W/np2_oom_retry.log"
check "the out-of-memory retry path runs (emulated cudaMalloc failures)" $? "$(grep -m2 -E 'emu|error' "$W/np2_oom_retry.log")"
same "np=2 bf16 with an out-of-memory retry at every allocation tracks np=1 bf16" gpu_bf16 np2_oom_retry 1e-3
# FSDPC_GPU_TIMERS: the per-category split of the compute stream's time from CUDA events (here,
# emulated events timed on the host)
run timers env FSDPC_GPU_TIMERS=1 $EMU --max_steps 4
grep -Eq "^gpu time per step \(CUDA events, 3 steps after the first\): [0-9.]+ ms = gemm [0-9.]+ ms .*, attention .*, elementwise .*, optimizer .*, waiting \(collectives, copies, host\) [0-9.]+ ms" "$W/timers.log"
check "FSDPC_GPU_TIMERS prints the GPU time per step by category" $? "$(tail -c 300 "$W/timers.log")"
# MFU's peak: an H100 PCIe (756 TFLOP/s dense bf16) is told from an SXM (989) by name, or by the
# SM clock where the name says only the memory
for c in "NVIDIA H100 PCIe:1755:756" "NVIDIA H100 80GB HBM3:1980:989" "NVIDIA H100 80GB HBM3:1755:756" "NVIDIA H100 NVL:1785:835"; do
    IFS=: read -r name mhz tf <<<"$c"
    FSDPC_EMU_GPU_NAME="$name" FSDPC_EMU_SM_CLOCK_MHZ=$mhz timeout 120 $EMU --max_steps 0 >"$W/peak.log" 2>&1
    grep -q "^MFU against $tf TFLOP/s dense bf16 per GPU" "$W/peak.log"
    check "MFU peak of a '$name' at $mhz MHz: $tf TFLOP/s" $? "$(grep -m2 -E 'MFU|error' "$W/peak.log")"
done
# a token id >= the vocabulary: the loader's check names step, sample and file on both builds alike
# (the kernels' own check, kern_tokens_check, is test_gpu's)
perl -e 'print pack("l<256", 20240520, 1, 40), pack("S<*", map { $_ == 16 ? 300 : 65 + $_ } 0 .. 39)' >"$W/bigid.bin"
for b in "$CPU" "$EMU"; do
    expect_error "a token id above the vocabulary ($([ "$b" = "$CPU" ] && echo CPU || echo emulated GPU))" \
        "^fsdpc: error: step 1: sample [01]: data file '.*bigid.bin' holds token id 300 at token 16, not below --vocab_size 256" \
        $b --train_data "$W/bigid.bin"
done
# the device memory check before allocating, on a 48 MiB (then 250 MiB) emulated GPU: the estimate,
# the GPU's free memory and what would fit, on every rank, before any cudaMalloc fails
expect_error "a batch too big for the GPU's free memory" \
    "^fsdpc: error: estimated peak device memory 0\.10 GiB per rank \(.*activations 0\.10.*\) exceeds the 0\.0. GiB free on cuda:0 \(CPU emulation\) \(of 0\.05 GiB\); would fit: --batch_size 8 " \
    env FSDPC_EMU_GPU_MEM_MIB=48 $EMU --batch_size 64 --max_context_width 256
expect_error "np=2: a batch too big for the GPUs' free memory" "^fsdpc: error: estimated peak device memory .* would fit: --batch_size 8 " \
    env FSDPC_EMU_GPU_MEM_MIB=48 $MPI -x FSDPC_EMU_GPU_MEM_MIB -np 2 $EMU --batch_size 64 --max_context_width 256
BIG="--tokenizer byte --hidden_width 512 --num_heads 8 --intermediate_size 2048 --num_layers 4"
expect_error "a model whose optimizer state does not fit on the GPU: --cpu_offload would" \
    "^fsdpc: error: estimated peak device memory 0\.24 GiB per rank .*optimizer 0\.12.* exceeds .* GiB free on cuda:0 .*would fit: --cpu_offload " \
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
run ck2_bf16 $EMU --precision bf16 --checkpoint_dir "$W/ck16" --checkpoint_freq 2
rm -f "$W/ck16/step_00000003.h5"
run ck16_resumed $EMU --precision bf16 --resume_from_checkpoint "$W/ck16"
[ "$(cat "$W/ck2_bf16.rc" "$W/ck16_resumed.rc")" = "$(printf '0\n0')" ] &&
    cmp -s <(grep '"step": 3,' "$W/gpu_bf16.jsonl" | steady) <(steady "$W/ck16_resumed.jsonl")
check "bf16 (bf16 activations): 2 steps + resume 1 equals 3 straight, bit for bit" $? \
    "$(grep -m2 -E 'error|Resumed' "$W/ck16_resumed.log")"
$CPU --resume_from_checkpoint "$W/ck/step_00000002.h5" --max_steps 2 >"$W/eval.log" 2>&1
check "its checkpoint loads on the CPU build" $? "$(grep -m1 error "$W/eval.log")"

# generation with the KV cache: greedy decoding prints the prompt and 8 more bytes
out=$(timeout 300 $EMU --resume_from_checkpoint "$W/ck/step_00000002.h5" --max_steps 0 --prompt "ROMEO:" \
    --num_tokens 8 --temperature 0 2>"$W/gen.err")
[ "${#out}" -ge 14 ] && [ "${out:0:6}" = "ROMEO:" ]
check "generation with the KV cache" $? "(got '${out}', $(grep -m1 error "$W/gen.err"))"
# bf16: the gathered parameters bf16 as the kernels read them, bf16 activations and KV cache; 12
# tokens run past the 16-token context (the refill). Greedy text equals the CPU's bf16 run here.
G="--resume_from_checkpoint $W/ck/step_00000002.h5 --max_steps 0 --prompt ROMEO: --num_tokens 12 --temperature 0 --precision bf16"
out=$(timeout 300 $EMU $G 2>"$W/gen16.err")
ref=$($CPU $G 2>/dev/null)
[ "${#out}" -ge 18 ] && [ "$out" = "$ref" ]
check "bf16 generation with the KV cache equals the CPU's greedy text" $? "(got '${out}', CPU '${ref}', $(grep -m1 error "$W/gen16.err"))"

# --attention: cuDNN's fused attention (the emulation's fake libcudnn runs its graphs on the CPU
# attention) at head dim 64 with GQA; FSDPC_EMU_CUDNN makes cuDNN missing, refuse or disagree
C="--tokenizer byte --hidden_width 128 --num_heads 2 --num_key_value_heads 1 --precision bf16"
run att_native $EMU $C --attention native
run att_cudnn $EMU $C --attention cudnn
same "--attention cudnn under --precision bf16 equals the native attention within bf16 tolerance" att_native att_cudnn 5e-3
grep -q "^fsdpc: attention: cuDNN 9.19.0 fused flash attention (bf16, head dim 64; agrees with the native kernel)" \
    "$W/att_cudnn.log"
check "--attention cudnn logs that cuDNN runs attention" $? "$(grep -m2 -E 'attention|error' "$W/att_cudnn.log")"
run att_native_win $EMU $C --attention native --sliding_window 5
run att_cudnn_win $EMU $C --attention cudnn --sliding_window 5
same "--attention cudnn with a sliding window (cuDNN declines it: the native kernel) equals --attention native" \
    att_native_win att_cudnn_win 1e-6
run att_auto $EMU $C
grep -q "^fsdpc: attention: cuDNN " "$W/att_auto.log" && cmp -s <(steady "$W/att_cudnn.jsonl") <(steady "$W/att_auto.jsonl")
check "--attention auto (the default) logs its choice of cuDNN and trains as --attention cudnn does" $? \
    "$(grep -m2 -E 'attention|error' "$W/att_auto.log")"
for f in "missing:cannot load libcudnn.so.9 .*LD_LIBRARY_PATH=" "nofinalize:cuDNN could not build the forward graph" \
    "wrong:cuDNN and the native kernel disagree"; do
    run "att_${f%%:*}" env FSDPC_EMU_CUDNN="${f%%:*}" $EMU $C --max_steps 0
    grep -q "^fsdpc: attention: the native flash kernel (${f#*:}" "$W/att_${f%%:*}.log"
    check "--attention auto falls back to the native kernel, saying why: cuDNN ${f%%:*}" $? \
        "$(grep -m2 -E 'attention|error' "$W/att_${f%%:*}.log")"
    expect_error "--attention cudnn when cuDNN is ${f%%:*}" "^fsdpc: error: --attention cudnn: ${f#*:}" \
        env FSDPC_EMU_CUDNN="${f%%:*}" $EMU $C --max_steps 0 --attention cudnn
done
# the cuDNN frontend's version rules, kept by fsdpc: at cuDNN 9.5 (the dQ accumulator zeroed before
# each backward, the padding mask at T = 16 and the second one of 9.x: without any of them the
# emulated 9.5 corrupts the gradients) training follows the native attention; 9.10.1 is refused
run att_cudnn_95 env FSDPC_EMU_CUDNN_VERSION=90500 $EMU $C --attention cudnn
same "--attention cudnn at cuDNN 9.5 equals the native attention within bf16 tolerance" att_native att_cudnn_95 5e-3
run att_9101 env FSDPC_EMU_CUDNN_VERSION=91001 $EMU $C --max_steps 0
grep -q "^fsdpc: attention: the native flash kernel (cuDNN 9.10.1 has known bugs in its fused attention" "$W/att_9101.log"
check "--attention auto at cuDNN 9.10.1 falls back to the native kernel, saying why" $? \
    "$(grep -m2 -E 'attention|error' "$W/att_9101.log")"
expect_error "--attention cudnn at cuDNN 9.10.1" "^fsdpc: error: --attention cudnn: cuDNN 9.10.1 has known bugs" \
    env FSDPC_EMU_CUDNN_VERSION=91001 $EMU $C --max_steps 0 --attention cudnn
# document masks through cuDNN (padding mask over ragged rows): packed documents and padded rows
# train as the native kernels do, and cuDNN ran their attention
TOK=test/fixtures/tokenizer/tokenizer.model
for i in $(seq 24); do printf '{"text": "%s"}\n' "$(sed -n "$((i * 7)),$((i * 7 + 1 + i % 3))p" data/tinyshakespeare.txt | tr -d '"\\' | tr '\n' ' ')"; done >"$W/docs.jsonl"
/usr/bin/python3 test/fixtures/sft_train.py smp 40 24 1 0 right >"$W/padded.jsonl"
for d in docs padded; do
    D="$C --tokenizer $TOK --train_data $W/$d.jsonl --max_context_width 32 --document_masking"
    run "dm_${d}_native" env FSDPC_CACHE_DIR="$W/cache_$d" $EMU $D --attention native
    run "dm_${d}_cudnn" env FSDPC_CACHE_DIR="$W/cache_$d" FSDPC_EMU_CUDNN_COUNTS="$W/dm_$d.counts" $EMU $D --attention cudnn
    same "--document_masking ($d rows): cuDNN's attention trains as the native kernels do" "dm_${d}_native" "dm_${d}_cudnn" 5e-3
    grep -Eq "document-masked executions [1-9]" "$W/dm_$d.counts"
    check "--document_masking ($d rows): cuDNN ran the document-masked attention" $? "$(cat "$W/dm_$d.counts" 2>&1)"
done
# versions whose frontend declines document-masked graphs: the native kernels run them, said once
D="$C --tokenizer $TOK --train_data $W/docs.jsonl --max_context_width 32 --document_masking"
run dm_docs_cc8 env FSDPC_CACHE_DIR="$W/cache_docs" FSDPC_EMU_CUDNN_VERSION=91800 FSDPC_EMU_CC_MAJOR=8 $EMU $D
same "--document_masking at cuDNN 9.18.0 before Hopper: the native kernels run the documents" dm_docs_native dm_docs_cc8 5e-3
[ "$(grep -c "^fsdpc: attention: cuDNN below 9.18.1 runs document-masked (ragged) graphs on Hopper and newer GPUs only; the native" \
    "$W/dm_docs_cc8.log")" = 1 ]
check "... and says so once" $? "$(grep -m2 -E 'attention:|error' "$W/dm_docs_cc8.log")"
expect_error "--attention cudnn on documents with grouped-query heads at cuDNN 9.5" \
    "^fsdpc: error: --attention cudnn: cuDNN below 9.6 has no document-masked \(ragged\) backward with grouped-query heads" \
    env FSDPC_CACHE_DIR="$W/cache_docs" FSDPC_EMU_CUDNN_VERSION=90500 $EMU $D --attention cudnn --max_steps 1
run att_fp32 $EMU $C --precision float32 --max_steps 0
grep -q "^fsdpc: attention: the native flash kernel (cuDNN's fused attention runs bf16 operands only" "$W/att_fp32.log"
check "--attention auto under --precision float32 keeps the native kernel, saying why" $? \
    "$(grep -m2 -E 'attention|error' "$W/att_fp32.log")"
run att_hd8 $EMU --precision bf16 --max_steps 0
grep -q "^fsdpc: attention: the native flash kernel (head dim 8: " "$W/att_hd8.log"
check "--attention auto at head dim 8 keeps the native kernel, saying why" $? "$(grep -m2 -E 'attention|error' "$W/att_hd8.log")"
expect_error "--attention cudnn under --precision float32" "^fsdpc: error: --attention cudnn: cuDNN's fused attention runs bf16" \
    $EMU $C --precision float32 --attention cudnn --max_steps 0
expect_error "--attention cudnn on two ranks without cuDNN" "^fsdpc: error: --attention cudnn: cannot load libcudnn.so.9" \
    env FSDPC_EMU_CUDNN=missing $MPI -x FSDPC_EMU_CUDNN -np 2 $EMU $C --batch_size 1 --max_steps 0 --attention cudnn
expect_error "--attention cudnn on the CPU device" "^fsdpc: error: --attention cudnn: cuDNN runs on a GPU and this run is on the CPU" \
    $CPU --attention cudnn --max_steps 0
