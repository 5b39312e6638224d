#!/usr/bin/env bash
# Multi-rank invariants: the same global batch gives the same losses at every world size and
# sharding strategy; full-shard memory scales as 1/N; bad layouts fail cleanly on every rank.
cd "$(dirname "$0")/../.."
source test/lib.sh
M="--tokenizer byte --hidden_width 64 --num_layers 3 --num_heads 4 --num_key_value_heads 2 --intermediate_size 96 --max_context_width 32
   --num_tokens 0 --checkpoint_freq 0 --validation_freq 0 --max_steps 8 --warmup 2 --lr 3e-3 --num_threads 1"
GLOBAL=8  # sequences per step, split over ranks and micro-batches

run() {  # run NAME NP ARGS...: training run writing $W/NAME.jsonl
    local name=$1 np=$2
    shift 2
    $MPI -np "$np" ./fsdpc $M --metrics_file "$W/$name.jsonl" "$@" >"$W/$name.log" 2>&1
}

# matches NAME NP DESCRIPTION MAX MIN ARGS...: a run whose 8 losses are within MAX (and above
# MIN) relative of the np=1 no-shard reference
matches() {
    local name=$1 np=$2 desc=$3 max=$4 min=$5 w
    shift 5
    run "$name" "$np" "$@"
    w=$(rel_diff "$W/ref.jsonl" "$W/$name.jsonl" 8 "$max" "$min")
    check "$desc (worst rel diff $w)" $?
}
equal() { matches "$1" "$2" "$3" 1e-4 -1 "${@:4}"; }

run ref 1 --sharding no-shard --batch_size $GLOBAL
if [ "${FSDPC_QUICK:-}" = 1 ]; then  # make check's one multi-rank case
    equal full-shard-2 2 "np=2 full-shard losses equal np=1 no-shard over 8 steps" --sharding full-shard --batch_size $((GLOBAL / 2))
    exit 0
fi
for np in 2 4; do
    for st in no-shard full-shard grad-shard; do
        equal "$st-$np" $np "np=$np $st losses equal np=1 no-shard over 8 steps" --sharding $st --batch_size $((GLOBAL / np))
    done
done
for st in hybrid-full-shard hybrid-grad-shard; do
    equal "$st" 4 "np=4 $st (group 2) losses equal np=1" --sharding $st --shard_group_size 2 --batch_size 2
done
grep -q "shard group 2 x replica group 2" "$W/hybrid-full-shard.log"
check "hybrid layout is 2 shard ranks x 2 replicas" $?
equal accum 2 "np=2 full-shard with grad_accum 2 equals np=1" --sharding full-shard --batch_size 2 --grad_accum 2
equal accum1 1 "np=1 grad_accum 8 x batch 1 equals batch 8" --sharding no-shard --batch_size 1 --grad_accum 8
# sharded accumulation (each micro-batch reduce-scattered into the shard) and --accumulate_unsharded
equal accum4 2 "np=2 full-shard grad_accum 4 (sharded accumulation) equals np=1" --sharding full-shard --batch_size 1 --grad_accum 4
equal accum-u 2 "np=2 full-shard grad_accum 4 --accumulate_unsharded equals np=1" --sharding full-shard --batch_size 1 \
    --grad_accum 4 --accumulate_unsharded
equal accum-h 4 "np=4 hybrid-full-shard (group 2) grad_accum 2: replicas reduce the step's sum, equals np=1" \
    --sharding hybrid-full-shard --shard_group_size 2 --batch_size 1 --grad_accum 2
equal accum-hg 4 "np=4 hybrid-grad-shard (group 2) grad_accum 2 equals np=1" --sharding hybrid-grad-shard --shard_group_size 2 \
    --batch_size 1 --grad_accum 2
equal ckpt 2 "np=2 full-shard --activation_checkpoints equals np=1" --sharding full-shard --batch_size 4 --activation_checkpoints
equal sel 1 "--selective_checkpointing 2 equals storing every block" --sharding no-shard --batch_size 8 --selective_checkpointing 2
equal meta 4 "np=4 full-shard --meta_init equals np=1" --sharding full-shard --batch_size 2 --meta_init

# minGPT (tied wte: the embedding and the head share unit 0) with dropout on: the masks follow
# the global sample index, so every layout, micro-batching and recompute draws the same ones
M_LLAMA=$M
M="--recipe_defaults none --tokenizer byte --model mingpt --embed_size 64 --num_layers 3 --num_heads 4 --seq_len 32 --dropout 0.1
   --num_tokens 0 --checkpoint_freq 0 --validation_freq 0 --max_steps 8 --warmup 2 --lr 3e-3 --num_threads 1"
rm -f "$W/ref.jsonl"  # metrics files append (a resumed run continues its file)
run ref 1 --sharding no-shard --batch_size $GLOBAL
if [ "${FSDPC_QUICK:-}" = 1 ]; then  # make check's one multi-rank case
    equal full-shard-2 2 "np=2 full-shard losses equal np=1 no-shard over 8 steps" --sharding full-shard --batch_size $((GLOBAL / 2))
    exit 0
fi
for np in 2 4; do
    for st in no-shard full-shard grad-shard; do
        equal "gpt-$st-$np" $np "minGPT dropout 0.1: np=$np $st losses equal np=1 no-shard" --sharding $st --batch_size $((GLOBAL / np))
    done
done
for st in hybrid-full-shard hybrid-grad-shard; do
    equal "gpt-$st" 4 "minGPT dropout 0.1: np=4 $st (group 2) equals np=1" --sharding $st --shard_group_size 2 --batch_size 2
done
equal gpt-accum 2 "minGPT dropout 0.1: np=2 full-shard grad_accum 2 equals np=1" --sharding full-shard --batch_size 2 --grad_accum 2
equal gpt-ckpt 2 "minGPT dropout 0.1: np=2 --activation_checkpoints equals np=1" --sharding full-shard --batch_size 4 \
    --activation_checkpoints
run gpt-nodrop 1 --sharding no-shard --batch_size $GLOBAL --dropout 0
w=$(rel_diff "$W/ref.jsonl" "$W/gpt-nodrop.jsonl" 8 1 1e-4)
check "minGPT dropout 0.1 really changes the losses (rel diff $w from dropout 0)" $?
M=$M_LLAMA
rm -f "$W/ref.jsonl"
run ref 1 --sharding no-shard --batch_size $GLOBAL
if [ "${FSDPC_QUICK:-}" = 1 ]; then  # make check's one multi-rank case
    equal full-shard-2 2 "np=2 full-shard losses equal np=1 no-shard over 8 steps" --sharding full-shard --batch_size $((GLOBAL / 2))
    exit 0
fi

# bf16 (parameters gathered and activations stored in bf16, fp32 master and moments) tracks
# fp32 within 5e-3 relative, and really differs from it
matches bf16 2 "np=2 full-shard --precision bf16 tracks fp32 within 5e-3 relative" 5e-3 1e-6 \
    --sharding full-shard --batch_size 4 --precision bf16
matches bf16r 4 "np=4 hybrid bf16 with --reduce_dtype bf16 tracks fp32 within 5e-3 relative" 5e-3 1e-6 \
    --sharding hybrid-full-shard --shard_group_size 2 --batch_size 2 --precision bf16 --reduce_dtype bf16
matches accum-bf16 4 "np=4 hybrid bf16 reduce, grad_accum 2: the fp32 sum of bf16 micro-batch shards tracks fp32 within 5e-3" \
    5e-3 1e-6 --sharding hybrid-full-shard --shard_group_size 2 --batch_size 1 --grad_accum 2 --precision bf16 --reduce_dtype bf16
run offload 2 --sharding full-shard --batch_size 4 --cpu_offload
[ "$(grep -c 'cpu_offload: no effect on the CPU device' "$W/offload.log")" = 1 ] && rel_diff "$W/ref.jsonl" "$W/offload.jsonl" 8 1e-4 >/dev/null
check "--cpu_offload on CPU says so once and changes nothing" $?

# memory: the per-layer growth of peak memory under full-shard --meta_init at np=4 is ~1/4 of
# the replicated run's (differences of two depths cancel fixed costs: MPI, BLAS buffers)
peak() {  # peak NP LAYERS ARGS...
    local np=$1 layers=$2
    shift 2
    $MPI -np "$np" ./fsdpc --tokenizer byte --hidden_width 512 --num_layers "$layers" --num_heads 8 --num_key_value_heads 8 \
        --intermediate_size 1536 --max_context_width 16 --batch_size 1 --train_data synthetic --max_steps 2 \
        --logging_freq 1 --num_tokens 0 --checkpoint_freq 0 --num_threads 1 "$@" 2>&1 |
        sed -nE 's/^Batch 2 .*mem: ([0-9]+) MiB$/\1/p'
}
r4=$(peak 1 4 --sharding no-shard)
r12=$(peak 1 12 --sharding no-shard)
s4=$(peak 4 4 --sharding full-shard --meta_init)
s12=$(peak 4 12 --sharding full-shard --meta_init)
awk -v r4="$r4" -v r12="$r12" -v s4="$s4" -v s12="$s12" 'BEGIN { exit !(r12 > r4 + 300 && (s12 - s4) <= 0.35 * (r12 - r4)) }'
check "full-shard --meta_init per-layer peak memory at np=4 is ~1/4 of replicated (8 extra layers: ${r4}->${r12} MiB replicated, ${s4}->${s12} MiB sharded)" $?

# a sharded start: peak host memory at start-up (peak RSS of a run that builds the model and
# stops) grows with the model as 1/world size: 8 more layers cost np=2 ranks about half, np=4
# ranks about a quarter, of what they cost one rank
start_peak() {  # start_peak NP LAYERS: the largest rank's peak RSS in KiB
    rm -f "$W/sp".*
    $MPI -np "$1" sh -c '/usr/bin/time -f "peak_kb %M" -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$W/sp" ./fsdpc --hidden_width 1024 \
        --num_layers "$2" --num_heads 8 --intermediate_size 2048 --vocab_size 256 --max_context_width 16 --batch_size 1 \
        --train_data synthetic --max_steps 0 --num_tokens 0 --checkpoint_freq 0 --num_threads 1 --sharding full-shard >/dev/null 2>&1
    cat "$W/sp".* | sed -n 's/^peak_kb //p' | sort -n | tail -1
}
g1=$(( $(start_peak 1 10) - $(start_peak 1 2) ))
g2=$(( $(start_peak 2 10) - $(start_peak 2 2) ))
g4=$(( $(start_peak 4 10) - $(start_peak 4 2) ))
awk -v a="$g1" -v b="$g2" -v c="$g4" 'BEGIN { exit !(a > 200000 && b < 0.65 * a && b > 0.35 * a && c < 0.37 * a) }'
check "start-up peak host memory per rank scales as 1/world size (8 layers add $g1 KiB at np=1, $g2 at np=2, $g4 at np=4)" $?

# gradient memory (the tracker's grads peak, max over ranks) does not grow with --grad_accum under
# sharded accumulation; --accumulate_unsharded holds the whole model's gradients
grads_peak() {  # grads_peak NP ARGS...
    local np=$1
    shift
    rm -f "$W/gm.jsonl"
    $MPI -np "$np" ./fsdpc --hidden_width 256 --num_layers 4 --num_heads 4 --intermediate_size 512 --vocab_size 4096 \
        --max_context_width 16 --batch_size 1 --train_data synthetic --max_steps 2 --logging_freq 1 --num_tokens 0 \
        --checkpoint_freq 0 --num_threads 1 --metrics_file "$W/gm.jsonl" "$@" >"$W/gm.log" 2>&1 &&
        tail -1 "$W/gm.jsonl" | /usr/bin/python3 -c "import json, sys; m = json.load(sys.stdin)['mem']; print(m['grads'][3], m['total'][3])"
}
unit_bytes=$(( (4 * 256 * 256 + 3 * 256 * 512 + 2 * 256) * 4 ))  # one block's fp32 gradient
for layout in "2 --sharding full-shard" "4 --sharding full-shard" "4 --sharding hybrid-full-shard --shard_group_size 2"; do
    read -r g1 t1 <<<"$(grads_peak $layout --grad_accum 1)"
    read -r g8 t8 <<<"$(grads_peak $layout --grad_accum 8)"
    read -r u8 tu <<<"$(grads_peak $layout --grad_accum 8 --accumulate_unsharded)"
    [ -n "$g1" ] && [ -n "$g8" ] && [ -n "$u8" ] && [ "$g8" -le $((g1 + unit_bytes)) ] && [ "$u8" -gt $((g8 + unit_bytes)) ] &&
        [ "$t8" -le $((t1 + unit_bytes)) ]
    check "np=${layout%% *} ${layout#* }: grads and total peak at --grad_accum 8 within one unit of --grad_accum 1 (grads $g1 -> $g8, total $t1 -> $t8 bytes; unsharded grads $u8)" $?
done

# sharded state is 16 bytes per parameter under --precision bf16 too (fp32 master, gradient and
# two moments; bf16 copies only while a unit is gathered): the tracker's peaks of params, grads,
# optimizer and buffers grow from 4 to 12 layers by 16 bytes per added parameter of the shard
state_peak() {  # state_peak LAYERS: the sum of the four categories' peaks, max over ranks
    rm -f "$W/st.jsonl"
    $MPI -np 2 ./fsdpc --hidden_width 256 --num_layers "$1" --num_heads 4 --num_key_value_heads 4 --intermediate_size 512 --vocab_size 4096 \
        --max_context_width 16 --batch_size 1 --train_data synthetic --max_steps 2 --logging_freq 1 --num_tokens 0 \
        --checkpoint_freq 0 --num_threads 1 --sharding full-shard --precision bf16 --metrics_file "$W/st.jsonl" >"$W/st.log" 2>&1 &&
        tail -1 "$W/st.jsonl" | /usr/bin/python3 -c "import json, sys; m = json.load(sys.stdin)['mem']
print(sum(m[k][3] for k in ('params', 'grads', 'optimizer', 'buffers')))"
}
s4=$(state_peak 4)
s12=$(state_peak 12)
per=$(awk -v a="$s4" -v b="$s12" 'BEGIN { printf "%.2f", (b - a) / (8 * (4 * 256 * 256 + 3 * 256 * 512 + 2 * 256) / 2) }')
awk -v p="$per" 'BEGIN { exit !(p > 15.9 && p < 16.1) }'
check "--precision bf16 full-shard np=2: sharded state grows by $per bytes per added parameter of the shard (16)" $?

# bad layouts: one error line, every rank exits non-zero, within seconds
start=$(date +%s)
$MPI -np 4 ./fsdpc $M --sharding hybrid-full-shard --shard_group_size 3 >"$W/bad.out" 2>"$W/bad.err"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(grep -c '^fsdpc: error:' "$W/bad.err")" = 1 ] &&
    grep -q "world size 4 is not a multiple of the shard group size 3" "$W/bad.err" && [ $(($(date +%s) - start)) -lt 30 ]
check "np=4 with --shard_group_size 3 fails cleanly on every rank" $? "rc=$rc $(head -c 200 "$W/bad.err")"
$MPI -np 2 ./fsdpc $M --num_heads 5 >"$W/bad.out" 2>"$W/bad.err"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(grep -c '^fsdpc: error:' "$W/bad.err")" = 1 ]
check "np=2 with a bad flag: one error line, non-zero exit" $? "rc=$rc"
