#!/usr/bin/env bash
# The emulated GPU's libraries answering as the real ones do where a happy path would hide it:
# cuBLASLt's heuristic saying "not supported" (fsdpc's fp32 fallback, one note per problem);
# NCCL collectives completing asynchronously, with a delay (events not ready at first, a rank
# that never arrives tripping --collective_timeout with the flight recorder, ncclCommAbort
# dropping what is in flight); groups of one rank making no NCCL call at all; and a library that
# cannot be loaded named in one line.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="emulated libraries: "
M="--tokenizer byte --hidden_width 32 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 64 --max_context_width 16
   --batch_size 2 --max_steps 3 --lr 3e-3 --warmup 1 --num_tokens 0 --validation_freq 0 --checkpoint_freq 0
   --train_data data/tinyshakespeare.txt --num_threads 1"
EMU="./build/fsdpc_emu $M --device cuda"
# every emulated NCCL run logs its communicators and counts; collectives land 20 ms after queued
export FSDPC_EMU_NCCL_LOG=1 FSDPC_EMU_NCCL_DELAY_MS=20
MPI="$MPI -x FSDPC_EMU_NCCL_LOG -x FSDPC_EMU_NCCL_DELAY_MS"


# same NAME A B TOL: runs A and B logged the same 3 losses, to TOL relative
same() {
    local d
    d=$(rel_diff "$W/$2.jsonl" "$W/$3.jsonl" 3 "$4") && [ "$(cat "$W/$2.rc" "$W/$3.rc")" = "$(printf '0\n0')" ]
    check "$1 (worst rel diff $d, tolerance $4)" $? "$(grep -m2 -E 'error|emu' "$W/$2.log" "$W/$3.log")"
}

# the emulator's deferred ops, under the collectives: the event after one is not ready until it
# lands, and a kernel ordered after it waits for it and reads its bytes
./build/emu_race_check deferred >"$W/deferred.log" 2>&1
check "a deferred op: its event not ready at first, work after it sees its bytes" $? "$(head -c 300 "$W/deferred.log")"

# cuBLASLt answers CUBLAS_STATUS_NOT_SUPPORTED where no algorithm fits (here: bf16 products whose
# C has a leading dimension not a multiple of 64): those products run in fp32, each noted once
run bf16 $EMU --precision bf16
run bf16_lt env FSDPC_EMU_LT_BF16_LDC=64 $EMU --precision bf16
notes=$(grep -c '^fsdpc: note: cuBLASLt has no bf16 algorithm for m=[0-9]* .*: this product runs in fp32$' "$W/bf16_lt.log")
[ "$notes" -gt 0 ] && [ "$notes" = "$(grep '^fsdpc: note: cuBLASLt' "$W/bf16_lt.log" | sort -u | wc -l)" ] &&
    ! grep -q "cuBLASLt has no" "$W/bf16.log"
check "cuBLASLt 'not supported': the fp32 fallback runs, one note per problem over 3 steps ($notes problems)" $? \
    "$(grep -m3 -E 'cuBLASLt|error' "$W/bf16_lt.log")"
same "cuBLASLt 'not supported': the losses match the bf16 products'" bf16 bf16_lt 1e-3

# one rank: no NCCL call, training and generation (its gather over the 1-rank group is a copy)
# as on the CPU
G="--num_tokens 8 --prompt ROMEO: --temperature 0"
run cpu ./fsdpc $M --device cpu $G
run one $EMU $G
grep -q '^emu nccl: 0 NCCL calls (0 collectives)' "$W/one.log" && [ "$(cat "$W/one.out")" = "$(cat "$W/cpu.out")" ]
check "one rank makes no NCCL call and generates the CPU's text" $? "($(cat "$W/one.out") vs $(cat "$W/cpu.out")) $(grep -m2 -E 'emu nccl|error' "$W/one.log")"
same "one rank without NCCL: the losses equal the CPU's" cpu one 1e-5

# cuBLASLt and NCCL are opened at run time: where one cannot be, a GPU run stops with one line
# naming it on every rank, but one rank needs no NCCL and trains without the library
expect_error "two ranks without cuBLASLt" "^fsdpc: error: cannot load libcublasLt\.so\.13 \(.*; LD_LIBRARY_PATH=.*--device cpu" \
    env FSDPC_EMU_CUBLASLT=missing $MPI -x FSDPC_EMU_CUBLASLT -np 2 $EMU --batch_size 1 --max_steps 0
expect_error "two ranks without NCCL" "^fsdpc: error: cannot load libnccl\.so\.2 \(.*; LD_LIBRARY_PATH=.*--device cpu" \
    env FSDPC_EMU_NCCL=missing $MPI -x FSDPC_EMU_NCCL -np 2 $EMU --batch_size 1 --max_steps 0
run one_no_nccl env FSDPC_EMU_NCCL=missing $EMU $G
same "one rank where libnccl cannot be loaded: the losses equal the CPU's" cpu one_no_nccl 1e-5

# two ranks where one group has a single rank: only the other group makes a communicator; the
# collectives land late, so the host polls events that are not ready
# comms NAME: each of the 2 ranks made exactly one communicator, of 2 ranks, and saw events not ready
comms() {
    [ "$(grep -c '^emu nccl: rank [01]: ncclCommInitRank of 2 ranks$' "$W/$1.log")" = 2 ] &&
        ! grep -q 'ncclCommInitRank of 1 ranks' "$W/$1.log" &&
        [ "$(grep -Ec '^emu nccl: [0-9]+ NCCL calls \([1-9][0-9]* collectives\), [1-9][0-9]* event queries answered not ready$' "$W/$1.log")" = 2 ]
}
for layout in "full-shard:--batch_size 1 --sharding full-shard:replica" \
    "hybrid:--batch_size 1 --sharding hybrid-full-shard --shard_group_size 1:shard" "tp:--tp 2:shard and replica"; do
    IFS=: read -r name flags one <<<"$layout"
    run np2_$name $MPI -np 2 $EMU $flags
    comms np2_$name
    check "np=2 $name: no communicator for the 1-rank $one group, events polled while not ready" $? \
        "$(grep -m4 -E 'emu nccl|error' "$W/np2_$name.log")"
    same "np=2 $name with collectives landing 20 ms late: the losses equal one rank's" one np2_$name 1e-5
done

# a rank that never arrives (its 5th collective call never returns): the other waits on its
# collective's event, trips --collective_timeout with its flight recorder, and ncclCommAbort
# drops what it had in flight; the job ends well within the test's bound
t0=$(date +%s)
${MPI/timeout 120/timeout 60} -np 2 bash -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && export FSDPC_EMU_NCCL_STALL=5; exec "$@"' _ \
    $EMU --batch_size 1 --sharding full-shard --collective_timeout 2 >"$W/stall.out" 2>"$W/stall.err"
rc=$?
took=$(($(date +%s) - t0))
[ $rc -ne 0 ] && [ $rc -lt 124 ] && [ $took -lt 60 ] &&
    grep -Eq 'fsdpc: rank 0: waited [0-9.]+ s in [a-z-]+ #[0-9]+ on group shard \(--collective_timeout 2\); flight recorder' "$W/stall.err" &&
    grep -Eq 'fsdpc: rank 0:   [a-z-]+ #[0-9]+ on shard, [0-9]+ bytes, start [0-9.]+ s, NOT FINISHED after [2-9]\.' "$W/stall.err" &&
    [ "$(grep -o 'fsdpc: error:' "$W/stall.err" | wc -l)" = 1 ] &&
    grep -Eq "fsdpc: error: collective timeout: rank 0 waited .* #[0-9]+ on group shard .*rank\(s\) not arrived \(stopped, dead, or stuck outside a collective\): 1\$" "$W/stall.err" &&
    grep -Eq 'emu nccl: rank 0: ncclCommAbort drops [1-9][0-9]* collective\(s\) in flight' "$W/stall.err"
check "a rank that never arrives: --collective_timeout 2 with the flight recorder, NCCL aborted, exit $rc after ${took}s" $? \
    "$(grep -v '^fsdpc: rank [0-9]:   ' "$W/stall.err" | grep -m4 -E 'fsdpc|emu' | head -c 600)"
