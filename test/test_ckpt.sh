#!/usr/bin/env bash
# Parallel checkpoints: bit-exact resume at the same layout, resharded resume at another, a rank
# killed mid-write, bad files refused on every rank.
cd "$(dirname "$0")/.."
source test/lib.sh
M="--hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 96 --max_context_width 32
   --num_tokens 0 --validation_freq 0 --warmup 3 --lr 3e-3 --lr_decay_style linear --min_lr 1e-4 --max_steps 20 --num_threads 1"
tail10() { grep -E '"step": (1[1-9]|20),' "$1"; }

# same layout: 20 straight == 10 + resume 10, bit for bit (np=2 full-shard)
$MPI -np 2 ./fsdpc $M --batch_size 4 --sharding full-shard --checkpoint_freq 0 --metrics_file "$W/straight.jsonl" >/dev/null 2>&1
# (the schedule depends on --max_steps, so the first run is the 20-step run cut back to step 10)
$MPI -np 2 ./fsdpc $M --batch_size 4 --sharding full-shard --checkpoint_dir "$W/ck" --checkpoint_freq 5 >"$W/first.log" 2>&1
rm -f "$W/ck/step_00000015.h5" "$W/ck/step_00000020.h5"
$MPI -np 2 ./fsdpc $M --batch_size 4 --sharding full-shard --checkpoint_dir "$W/ck" --resume_from_checkpoint "$W/ck" \
    --checkpoint_freq 0 --metrics_file "$W/resumed.jsonl" >"$W/resumed.log" 2>&1
grep -q "Resumed from $W/ck/step_00000010.h5 at step 10" "$W/resumed.log" && cmp -s <(tail10 "$W/straight.jsonl") "$W/resumed.jsonl"
check "np=2 full-shard: 10 steps + resume 10 equals 20 straight, bit for bit" $?
grep -Eq "Saved checkpoint .*step_00000005.h5 in [0-9.]+ s \([0-9.]+ MB/s\)" "$W/first.log"
check "checkpoint writes log time and bandwidth" $?

# another layout: the np=2 full-shard checkpoint resumes as np=4 hybrid (2 x 2), within 1e-4
$MPI -np 4 ./fsdpc $M --batch_size 2 --sharding hybrid-full-shard --shard_group_size 2 --resume_from_checkpoint "$W/ck" \
    --checkpoint_freq 0 --metrics_file "$W/reshard.jsonl" >"$W/reshard.log" 2>&1
paste <(losses <(tail10 "$W/straight.jsonl")) <(losses "$W/reshard.jsonl") | awk '
    { n++; d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d } END { exit !(n == 10 && w <= 1e-4) }'
check "np=2 full-shard checkpoint resumed as np=4 hybrid-full-shard continues within 1e-4" $?
# and a hybrid run writes from one replica group only, giving the same file contents
$MPI -np 4 ./fsdpc $M --batch_size 2 --sharding hybrid-grad-shard --shard_group_size 2 \
    --checkpoint_dir "$W/hy" --checkpoint_freq 5 >/dev/null 2>&1
/usr/bin/python3 - "$W/hy/step_00000005.h5" "$W/ck/step_00000005.h5" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) else None)
worst = max(float(np.max(np.abs(a[n][()] - b[n][()])) / (np.max(np.abs(b[n][()])) + 1e-12)) for n in names)
assert len(names) == 3 * (1 + 2 * 9 + 2), len(names)
assert a.attrs["step"] == 5 and a.attrs["data_position"] == 5 * 8, dict(a.attrs)
sys.exit(0 if worst < 1e-4 else 1)
PY
check "hybrid checkpoint (one replica group writes) holds every tensor and matches full-shard's" $?

# kill -9 one rank while step 10's checkpoint is being written: step 5 survives and is picked
rm -rf "$W/kill"
FSDPC_TEST_CKPT_PAUSE=10:30 $MPI -np 2 ./fsdpc $M --batch_size 4 --checkpoint_dir "$W/kill" --checkpoint_freq 5 \
    --metrics_file "$W/killmark.jsonl" >"$W/kill.log" 2>&1 &
mpid=$!
for _ in $(seq 300); do grep -q "paused (rank 1" "$W/kill.log" && break; sleep 0.1; done
victim=$(sed -nE 's/.*paused \(rank 1, pid ([0-9]+)\).*/\1/p' "$W/kill.log" | head -1)
[ -n "$victim" ] && kill -9 "$victim"
wait $mpid
rc=$?
ls "$W/kill" >"$W/kill.ls"
[ $rc -ne 0 ] && [ -n "$victim" ] && grep -qx "step_00000005.h5" "$W/kill.ls" && ! grep -qx "step_00000010.h5" "$W/kill.ls"
check "a rank killed mid-write leaves step 5 complete and no step 10 (files: $(tr '\n' ' ' <"$W/kill.ls"))" $?
$MPI -np 2 ./fsdpc $M --batch_size 4 --resume_from_checkpoint "$W/kill" --max_steps 6 --checkpoint_freq 0 >"$W/after.log" 2>&1
grep -q "Resumed from $W/kill/step_00000005.h5 at step 5" "$W/after.log"
check "resume after the crash picks the surviving step 5" $?

# bad files on every rank: one line, non-zero exit
cp "$W/ck/step_00000010.h5" "$W/trunc.h5" && truncate -s 20000 "$W/trunc.h5"
$MPI -np 2 ./fsdpc $M --batch_size 4 --resume_from_checkpoint "$W/trunc.h5" >"$W/bad.out" 2>"$W/bad.err"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(grep -c '^fsdpc: error:' "$W/bad.err")" = 1 ] && grep -q "cannot open checkpoint" "$W/bad.err"
check "np=2: truncated checkpoint refused with one line" $? "rc=$rc"
$MPI -np 2 ./fsdpc ${M/--intermediate_size 96/--intermediate_size 64} --batch_size 4 --resume_from_checkpoint "$W/ck" >"$W/bad.out" 2>"$W/bad.err"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(grep -c '^fsdpc: error:' "$W/bad.err")" = 1 ] && grep -q "intermediate_size=96 but this run has --intermediate_size 64" "$W/bad.err"
check "np=2: checkpoint with other shapes refused with one line" $? "rc=$rc"

# num_kept_checkpoints, and a resume dir with nothing in it yet
$MPI -np 2 ./fsdpc $M --batch_size 4 --max_steps 8 --checkpoint_dir "$W/keep" --resume_from_checkpoint "$W/keep" \
    --checkpoint_freq 2 --num_kept_checkpoints 2 >"$W/keep.log" 2>&1
[ "$(ls "$W/keep" | tr '\n' ' ')" = "step_00000006.h5 step_00000008.h5 " ] && grep -q "No checkpoint found in $W/keep, starting fresh" "$W/keep.log"
check "np=2: keeps the newest 2 checkpoints; an empty resume dir starts fresh" $?
