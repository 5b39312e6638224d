#!/usr/bin/env bash
# Parallel checkpoints: bit-exact resume at the same layout, resharded resume at another, a rank
# killed mid-write, bad files refused on every rank; lineage pruning, one writer per directory (a
# lock left by a zombie or a reused pid taken over), checksums, falling back past a bad newest
# checkpoint, a full disk.
cd "$(dirname "$0")/../.."
source test/lib.sh
M="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 96 --max_context_width 32
   --num_tokens 0 --validation_freq 0 --warmup 3 --lr 3e-3 --lr_decay_style linear --min_lr 1e-4 --max_steps 20 --num_threads 1"
tail10() { grep -E '"step": (1[1-9]|20),' "$1"; }

# same layout: 20 straight == 10 + resume 10, bit for bit (np=2 full-shard)
$MPI -np 2 ./fsdpc $M --batch_size 4 --sharding full-shard --checkpoint_freq 0 --metrics_file "$W/straight.jsonl" >/dev/null 2>&1
# (the schedule depends on --max_steps, so the first run is the 20-step run cut back to step 10)
$MPI -np 2 ./fsdpc $M --batch_size 4 --sharding full-shard --checkpoint_dir "$W/ck" --checkpoint_freq 5 >"$W/first.log" 2>&1
rm -f "$W/ck/step_00000015.h5" "$W/ck/step_00000020.h5"
$MPI -np 2 ./fsdpc $M --batch_size 4 --sharding full-shard --checkpoint_dir "$W/ck" --resume_from_checkpoint "$W/ck" \
    --checkpoint_freq 0 --metrics_file "$W/resumed.jsonl" >"$W/resumed.log" 2>&1
grep -q "Resumed from $W/ck/step_00000010.h5 at step 10" "$W/resumed.log" && cmp -s <(tail10 "$W/straight.jsonl" | steady) <(steady "$W/resumed.jsonl")
check "np=2 full-shard: 10 steps + resume 10 equals 20 straight, bit for bit" $?
grep -Eq "Saved checkpoint .*step_00000005.h5 in [0-9.]+ s \([0-9.]+ MB/s\)" "$W/first.log"
check "checkpoint writes log time and bandwidth" $?

# minGPT with dropout: the same, and the model (family, sizes) comes back from the file alone
G="--recipe_defaults none --tokenizer byte --model mingpt --embed_size 64 --num_layers 2 --num_heads 4 --seq_len 32 --dropout 0.1 --num_tokens 0
   --validation_freq 0 --warmup 3 --lr 3e-3 --max_steps 12 --num_threads 1 --batch_size 4"
$MPI -np 2 ./fsdpc $G --checkpoint_freq 0 --metrics_file "$W/gstraight.jsonl" >/dev/null 2>&1
$MPI -np 2 ./fsdpc $G --checkpoint_dir "$W/gck" --checkpoint_freq 6 >/dev/null 2>&1
rm -f "$W/gck/step_00000012.h5"
$MPI -np 2 ./fsdpc $G --checkpoint_dir "$W/gck" --resume_from_checkpoint "$W/gck" --checkpoint_freq 0 \
    --metrics_file "$W/gresumed.jsonl" >"$W/gresumed.log" 2>&1
cmp -s <(grep -E '"step": ([7-9]|1[0-2]),' "$W/gstraight.jsonl" | steady) <(steady "$W/gresumed.jsonl")
check "minGPT dropout 0.1, np=2: 6 steps + resume 6 equals 12 straight, bit for bit" $?
./fsdpc --max_steps 0 --resume_from_checkpoint "$W/gck/step_00000006.h5" --num_tokens 5 --prompt "ab" >"$W/gen.out" 2>"$W/gen.err"
[ $? = 0 ] && grep -q "^model=mingpt/tiny D=64 L=2 H=4 KV=4 F=256 T=32 V=256 " "$W/gen.err" && [ "$(head -c 2 "$W/gen.out")" = ab ]
check "--max_steps 0 --resume_from_checkpoint rebuilds a minGPT from the file alone" $? "$(grep -m1 -E 'model=|error' "$W/gen.err")"
expect_error "a minGPT checkpoint resumed as --model_type llama_v2" "holds a mingpt model but this run has --model_type llama_v2" \
    ./fsdpc --model_type llama_v2 --max_steps 0 --resume_from_checkpoint "$W/gck/step_00000006.h5"

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
kill_paused_rank1 "$W/kill.log"
wait $mpid
rc=$?
ls "$W/kill" >"$W/kill.ls"
[ $rc -ne 0 ] && [ -n "$victim" ] && grep -qx "step_00000005.h5" "$W/kill.ls" && ! grep -qx "step_00000010.h5" "$W/kill.ls"
check "a rank killed mid-write leaves step 5 complete and no step 10" $? "(files: $(tr '\n' ' ' <"$W/kill.ls"))"
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

# ---- lineage: pruning keeps a rollback's checkpoints and the abandoned future ----
PY=/usr/bin/python3
T="test/ref/ckpt_tamper.py"
./fsdpc $M --batch_size 4 --max_steps 40 --checkpoint_dir "$W/rb" --checkpoint_freq 10 >/dev/null 2>&1
echo "not a checkpoint" >"$W/rb/step_00000001.h5"
./fsdpc $M --batch_size 4 --max_steps 30 --checkpoint_dir "$W/rb" --resume_from_checkpoint "$W/rb/step_00000020.h5" \
    --checkpoint_freq 10 --num_kept_checkpoints 2 >/dev/null 2>&1
ls "$W/rb" >"$W/rb.ls"
[ "$(tr '\n' ' ' <"$W/rb.ls")" = "step_00000001.h5 step_00000020.h5 step_00000030.h5 step_00000040.h5 " ] &&
    $PY -c "import h5py, sys; a = h5py.File(sys.argv[1]).attrs; b = h5py.File(sys.argv[2]).attrs
sys.exit(not (a['parent'] == sys.argv[3].encode() and a['lineage'].startswith(b['run_id'] + b':20') and a['run_id'] != b['run_id']))" \
    "$W/rb/step_00000030.h5" "$W/rb/step_00000040.h5" "$W/rb/step_00000020.h5"
check "rollback to step 20 with --num_kept_checkpoints 2 keeps its new step 30, the step it resumed, the abandoned step 40 and a file it cannot read; only step 10 goes" $? \
    "(files: $(tr '\n' ' ' <"$W/rb.ls"))"
./fsdpc $M --batch_size 4 --max_steps 40 --checkpoint_dir "$W/rb" --resume_from_checkpoint "$W/rb/step_00000030.h5" \
    --checkpoint_freq 10 --num_kept_checkpoints 2 >/dev/null 2>"$W/rb3.log"
[ "$(ls "$W/rb" | tr '\n' ' ')" = "step_00000001.h5 step_00000030.h5 step_00000040.h5 " ] &&
    grep -q "^Replacing $W/rb/step_00000040.h5 of run [0-9a-f]\{16\}$" "$W/rb3.log"
check "a run resumed from the rollback says it replaces the abandoned step 40 and prunes its grandparent's step 20 through the lineage" $? \
    "(files: $(ls "$W/rb" | tr '\n' ' '))"

# ---- whose directory: a fresh run does not write into another run's checkpoints ----
expect_error "a fresh run into a directory holding another run's checkpoints" \
    "--checkpoint_dir '$W/rb' already holds 3 checkpoint\(s\) \(the newest step_00000040.h5\) of another run; resume them with --resume_from_checkpoint $W/rb" \
    ./fsdpc $M --batch_size 4 --max_steps 2 --checkpoint_dir "$W/rb" --checkpoint_freq 1
./fsdpc $M --batch_size 4 --max_steps 1 --checkpoint_dir "$W/rb" --checkpoint_freq 0 >/dev/null 2>&1
check "a run that writes no checkpoints may name that directory" $?
cp -r "$W/rb" "$W/ow"
./fsdpc $M --batch_size 4 --max_steps 10 --checkpoint_dir "$W/ow" --checkpoint_freq 10 --overwrite_checkpoints >/dev/null 2>&1 &&
    [ "$(ls "$W/ow" | tr '\n' ' ')" = "step_00000001.h5 step_00000010.h5 step_00000030.h5 step_00000040.h5 " ]
check "--overwrite_checkpoints lets it write there, keeping the other run's files" $?

# ---- one writer at a time ----
FSDPC_TEST_CKPT_PAUSE=5:30 ./fsdpc $M --batch_size 4 --max_steps 10 --checkpoint_dir "$W/two" --checkpoint_freq 5 >/dev/null 2>"$W/two.log" &
first=$!
for _ in $(seq 300); do grep -q "paused" "$W/two.log" && break; sleep 0.1; done
expect_error "a second run writing to the same directory" \
    "another fsdpc run \(run [0-9a-f]{16}, pid $first on this host\) is writing checkpoints to '$W/two'" \
    $MPI -np 2 ./fsdpc $M --batch_size 4 --max_steps 10 --checkpoint_dir "$W/two" --resume_from_checkpoint "$W/two" --checkpoint_freq 5
kill -9 $first
wait $first 2>/dev/null
./fsdpc $M --batch_size 4 --max_steps 6 --checkpoint_dir "$W/two" --resume_from_checkpoint "$W/two" --checkpoint_freq 5 >/dev/null 2>"$W/two2.log"
rc=$?
[ $rc = 0 ] && grep -q "Taking over the writer lock of run [0-9a-f]* in $W/two (its process $first on this host is gone)" "$W/two2.log" &&
    grep -q "Removed $W/two/step_00000005.h5.[0-9a-f]*.tmp, left by an interrupted checkpoint write" "$W/two2.log" &&
    [ "$(ls -A "$W/two" | tr '\n' ' ')" = "step_00000005.h5 step_00000006.h5 " ]
check "a killed writer's lock and partial file are taken over and removed by the next run on its host; the lock goes at exit" $? "rc=$rc $(ls -A "$W/two" | tr '\n' ' ')"
mkdir -p "$W/lock" && echo "fsdpc-writer 0123456789abcdef node17 4242 x" >"$W/lock/.fsdpc-writer"
expect_error "a lock held on another host" \
    "fsdpc run 0123456789abcdef on host node17 \(pid 4242\) holds the writer lock '$W/lock/.fsdpc-writer'; if that run is gone .*remove the file" \
    ./fsdpc $M --batch_size 4 --max_steps 2 --checkpoint_dir "$W/lock" --checkpoint_freq 1
# A run right after a failed one: the failed job's ranks, killed by mpirun, stay zombies until
# reaped (by init, a second or so after mpirun returns), and their lock must count as gone. The
# failing run is an np=2 job whose data holds a token beyond the vocabulary, found at step 44 by
# one rank, which ends the job through MPI_Abort with the lock left; it runs under a child
# subreaper that reaps only after the second run, so every try meets the zombie.
/usr/bin/python3 - "$W/badtok.bin" <<'PY'
import struct, sys
n = 20000
toks = [(i * 7) % 250 for i in range(n)]
toks[500] = 1000
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 1, n, *[0] * 253) + struct.pack("<%dH" % n, *toks))
PY
cat >"$W/zombie.py" <<'PY'
import ctypes, os, subprocess, sys
# zombie.py TRIES FAILING SECOND DIR: each try runs FAILING, then SECOND (shell commands, with
# $TRY set) into DIR; prints the try, the state of the process DIR's lock names once FAILING has
# returned ("Z": a zombie; "R": still exiting; "-": no lock left) and SECOND's exit status; then
# reaps the orphans it adopted.
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed")
tries, failing, second, folder = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
for i in range(tries):
    env = dict(os.environ, TRY=str(i))
    subprocess.run(["rm", "-rf", folder])
    subprocess.run(["bash", "-c", failing], env=env)
    try:
        pid = open(folder + "/.fsdpc-writer").read().split()[3]
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        state = "-"
    print(i, state, subprocess.run(["bash", "-c", second], env=env).returncode, flush=True)
    try:
        while True:
            os.waitpid(-1, 0)
    except ChildProcessError:
        pass
PY
M1=${M//$'\n'/ }  # one line: the commands go through bash -c
/usr/bin/python3 "$W/zombie.py" 10 \
    "$MPI -np 2 -x FSDPC_FAIL_AGREE_SECONDS=1 ./fsdpc $M1 --batch_size 4 --max_steps 60 --train_data $W/badtok.bin --checkpoint_dir $W/zomb --checkpoint_freq 100 >/dev/null 2>&1" \
    "./fsdpc $M1 --batch_size 4 --max_steps 1 --checkpoint_dir $W/zomb --checkpoint_freq 1 >/dev/null 2>$W/zomb.\$TRY.log" "$W/zomb" >"$W/zomb.tries"
took=0
for i in $(seq 0 9); do
    grep -qx "$i [A-Z] 0" "$W/zomb.tries" && grep -q "^Taking over the writer lock of run [0-9a-f]* in $W/zomb (its process [0-9]* on this host is gone)" "$W/zomb.$i.log" &&
        took=$((took + 1))
done
[ $took = 10 ]
check "a run right after a failed np=2 job takes the lock its zombie rank 0 left, 10 of 10 times" $? \
    "($took of 10; tries: $(tr '\n' ' ' <"$W/zomb.tries") $(grep -h -m1 error "$W"/zomb.*.log | head -1))"
# a pid on this host that another process now holds: the lock records its writer's start time
mkdir -p "$W/reuse"
host=$(hostname) boot=$(cat /proc/sys/kernel/random/boot_id) start=$(awk '{print $22}' /proc/$$/stat)
echo "fsdpc-writer 0123456789abcdef $host $$ $boot 1" >"$W/reuse/.fsdpc-writer"
./fsdpc $M --batch_size 4 --max_steps 1 --checkpoint_dir "$W/reuse" --checkpoint_freq 1 >/dev/null 2>"$W/reuse.log"
rc=$?
[ $rc = 0 ] && grep -q "^Taking over the writer lock of run 0123456789abcdef in $W/reuse (its process $$ on this host is gone; that pid now runs another program)" "$W/reuse.log"
check "a lock whose pid now belongs to a process started at another time is taken over" $? "rc=$rc $(grep -m1 error "$W/reuse.log")"
# an older lock without the start: a live process named fsdpc holds it, another program's pid does not
cp /bin/sleep "$W/fsdpc-sleep"
"$W/fsdpc-sleep" 60 &
old=$!
for lock in "$$ $boot $start" "$old $boot"; do
    rm -rf "$W/live" && mkdir -p "$W/live" && echo "fsdpc-writer 0123456789abcdef $host $lock" >"$W/live/.fsdpc-writer"
    expect_error "a lock of a live process on this host ($(echo "$lock" | wc -w) fields after the host)" \
        "another fsdpc run \(run 0123456789abcdef, pid ${lock%% *} on this host\) is writing checkpoints to '$W/live'" \
        ./fsdpc $M --batch_size 4 --max_steps 1 --checkpoint_dir "$W/live" --checkpoint_freq 1
done
kill $old
FSDPC_TEST_CKPT_PAUSE=2:3 ./fsdpc $M --batch_size 4 --max_steps 4 --checkpoint_dir "$W/lost" --checkpoint_freq 2 >/dev/null 2>"$W/lost.log" &
lost=$!
for _ in $(seq 300); do grep -q "paused" "$W/lost.log" && break; sleep 0.1; done
rm -f "$W/lost/.fsdpc-writer"
wait $lost
rc=$?
[ $rc = 1 ] && [ "$(grep -c '^fsdpc: error:' "$W/lost.log")" = 1 ] &&
    grep -q "checkpoint of step 2 not published: this run no longer holds the writer lock '$W/lost/.fsdpc-writer'" "$W/lost.log" &&
    [ -z "$(ls -A "$W/lost")" ]
check "a run whose lock was removed does not publish its checkpoint" $? "rc=$rc $(ls -A "$W/lost" | tr '\n' ' ')"

# ---- checksums ----
$PY $T crcs "$W/rb/step_00000040.h5" "$W/ck/step_00000005.h5" "$W/hy/step_00000005.h5" >"$W/crcs.out"
check "every tensor's crc32 is zlib's CRC-32 of its data, written by 1, 2 or 4 (hybrid) ranks" $? "$(cat "$W/crcs.out")"
./fsdpc $M --batch_size 4 --resume_from_checkpoint "$W/ck" --max_steps 11 --checkpoint_freq 0 >"$W/np1.log" 2>&1
$MPI -np 3 ./fsdpc $M --batch_size 4 --resume_from_checkpoint "$W/ck" --max_steps 11 --checkpoint_freq 0 >"$W/np3.log" 2>&1
grep -q "Resumed from $W/ck/step_00000010.h5 at step 10" "$W/np1.log" && grep -q "Resumed from $W/ck/step_00000010.h5 at step 10" "$W/np3.log"
check "an np=2 checkpoint verifies and loads at np=1 and np=3 (uneven slices)" $?
mkdir -p "$W/flip"
$PY $T flip "$W/ck/step_00000010.h5" "$W/flip" 20 >"$W/flip.list"
bad=""
while read -r file tensor; do  # four at a time: each run is mostly start-up
    (./fsdpc $M --batch_size 4 --max_steps 0 --resume_from_checkpoint "$file" >/dev/null 2>"$file.err"; echo $? >"$file.rc") &
    [ "$(jobs -r | wc -l)" -ge 4 ] && wait -n
done <"$W/flip.list"
wait
while read -r file tensor; do
    [ "$(cat "$file.rc")" = 1 ] && [ "$(grep -c '^fsdpc: error:' "$file.err")" = 1 ] &&
        grep -q "^fsdpc: error: checkpoint '$file': tensor /$tensor fails its checksum" "$file.err" || bad="$bad $tensor(rc=$(cat "$file.rc"))"
done <"$W/flip.list"
[ -z "$bad" ] && [ "$(wc -l <"$W/flip.list")" = 20 ]
check "20 single-byte flips in tensor data (all three groups) are each refused, naming the tensor and the file" $? "$bad"
expect_error "export of a checkpoint with a flipped weight byte" "checkpoint '$W/flip/flip00.h5': tensor /model/.* fails its checksum" \
    ./fsdpc export --checkpoint "$W/flip/flip00.h5" --output "$W/flipx" --dtype fp32

# ---- a bad newest checkpoint: fall back to the one before ----
# a directory and a dangling link named like checkpoints are no candidates
mkdir -p "$W/fb/step_00000099.h5" && ln -s nowhere "$W/fb/step_00000098.h5" && cp "$W/ck/step_00000005.h5" "$W/fb/"
fallback() {  # NAME REASON: step 10 is damaged; resuming the directory lands on step 5
    $MPI -np 2 ./fsdpc $M --batch_size 4 --resume_from_checkpoint "$W/fb" --max_steps 6 --checkpoint_freq 0 >"$W/fb.log" 2>&1
    local rc=$?
    [ $rc = 0 ] && [ "$(grep -c "is unusable" "$W/fb.log")" = 1 ] &&
        grep -Eq "^Checkpoint $W/fb/step_00000010.h5 is unusable, falling back to the one before it: .*$2" "$W/fb.log" &&
        grep -q "^Resumed from $W/fb/step_00000005.h5 at step 5" "$W/fb.log"
    check "np=2: newest checkpoint $1: one log line, resumed from the one before" $? "rc=$rc $(grep -m2 'unusable\|error' "$W/fb.log")"
}
cp "$W/ck/step_00000010.h5" "$W/fb/" && $PY $T flip1 "$W/fb/step_00000010.h5" 7 >/dev/null
fallback "with a flipped byte" "fails its checksum"
cp "$W/ck/step_00000010.h5" "$W/fb/" && truncate -s 600000 "$W/fb/step_00000010.h5"
fallback "truncated" "cannot open checkpoint"
cp "$W/ck/step_00000010.h5" "$W/fb/" && $PY $T attr "$W/fb/step_00000010.h5" step delete
fallback "without its step attribute" "lacks the 'step' attribute"
cp "$W/ck/step_00000010.h5" "$W/fb/" && $PY $T dims32 "$W/fb/step_00000010.h5" optim/exp_avg_sq/lm_head.weight
fallback "with a 32-dimensional tensor" "has 32 dimensions"
$PY $T flip1 "$W/fb/step_00000005.h5" 3 >/dev/null
expect_error "np=2: no usable checkpoint in the directory" "none of the 2 checkpoint\(s\) in '$W/fb' is usable; the newest: .*step_00000010.h5" \
    $MPI -np 2 ./fsdpc $M --batch_size 4 --resume_from_checkpoint "$W/fb" --max_steps 6 --checkpoint_freq 0

# ---- every attribute and shape checked before use ----
bad_file() {  # NAME REGEX TAMPER...: a copy of step 10 changed by ckpt_tamper.py TAMPER, resumed by name
    local name=$1 re=$2
    shift 2
    cp "$W/ck/step_00000010.h5" "$W/bad.h5" && $PY $T "$1" "$W/bad.h5" "${@:2}" >/dev/null
    expect_error "$name" "$re" ./fsdpc $M --batch_size 4 --max_steps 0 --resume_from_checkpoint "$W/bad.h5"
}
bad_file "step stored as a string" "checkpoint '$W/bad.h5': attribute 'step' is not an integer scalar" attr step str 10
bad_file "negative step" "attribute 'step' is -3, outside \[0, 2147483647\]" attr step int -3
bad_file "num_layers stored as an array" "attribute 'num_layers' is not an integer scalar" attr num_layers intarray 2,2
bad_file "model_type stored as an integer" "attribute 'model_type' is not a string scalar" attr model_type int 5
bad_file "rope_theta nan" "attribute 'rope_theta' is nan, not a positive finite number" attr rope_theta float nan
bad_file "a newer format_version" "has format_version 3; this fsdpc reads versions 1 to 2" attr format_version int 3
bad_file "no tokens_seen" "lacks the 'tokens_seen' attribute" attr tokens_seen delete
bad_file "a malformed run_id" "attribute 'run_id' is not 16 lowercase hex digits" attr run_id str xyz
bad_file "a 32-dimensional tensor" "tensor /model/model.norm.weight has 32 dimensions but the model needs \[64\]" dims32 model/model.norm.weight
cp "$W/ck/step_00000010.h5" "$W/v1.h5" && $PY $T v1 "$W/v1.h5"
./fsdpc $M --batch_size 4 --max_steps 11 --resume_from_checkpoint "$W/v1.h5" --checkpoint_freq 0 >"$W/v1.log" 2>&1 &&
    grep -q "Note: $W/v1.h5 predates checksums (format_version 1)" "$W/v1.log" && grep -q "Resumed from $W/v1.h5 at step 10" "$W/v1.log"
check "a format_version 1 checkpoint (no checksums) still loads, with a note" $?

# ---- a full disk: one error, no partial file, the earlier checkpoint intact, no crash ----
full() {  # NAME SIZE ENV...: a run whose step 4 checkpoint does not fit on a SIZE tmpfs
    local name=$1 size=$2
    shift 2
    mkdir -p "$W/full"
    if ! mount -t tmpfs -o size="$size" tmpfs "$W/full" 2>"$W/mount.err"; then
        echo "ok - ${PREFIX:-}disk full: $name # SKIP cannot mount a tmpfs here: $(head -c 120 "$W/mount.err")"
        return
    fi
    env "$@" ./fsdpc $M --batch_size 4 --max_steps 4 --checkpoint_dir "$W/full/ck" --checkpoint_freq 2 >/dev/null 2>"$W/full.err"
    local rc=$?
    ls -A "$W/full/ck" >"$W/full.ls"
    ./fsdpc $M --batch_size 4 --max_steps 3 --checkpoint_dir "$W/full/ck" --resume_from_checkpoint "$W/full/ck" \
        --checkpoint_freq 0 >/dev/null 2>"$W/full2.err"
    [ $rc = 1 ] && [ "$(grep -c '^fsdpc: error:' "$W/full.err")" = 1 ] &&
        grep -q "^fsdpc: error: cannot write checkpoint '$W/full/ck/step_00000004.h5': .*the file system .* MB free.*the earlier checkpoints are kept" "$W/full.err" &&
        [ "$(tr '\n' ' ' <"$W/full.ls")" = "step_00000002.h5 " ] && grep -q "Resumed from $W/full/ck/step_00000002.h5 at step 2" "$W/full2.err"
    check "disk full: $name" $? "rc=$rc $(tr '\n' ' ' <"$W/full.ls") $(grep -m1 . "$W/full.err" | head -c 300)"
    umount "$W/full"
}
full "the free-space check stops the write; step 2 stays and resumes" 2600k
full "a write that fails part-way ends with the partial file removed, step 2 intact, no crash at exit" 1500k FSDPC_TEST_CKPT_NO_RESERVE=1
