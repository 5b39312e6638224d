#!/usr/bin/env bash
# Faults a careless or unlucky user meets: divergence, preemption signals, errors on one rank
# only, memory that cannot fit, special files, bad flags and output paths. Each run must end with
# one "fsdpc: error:" line (or its documented exit status), never a hang, a crash or lost work.
cd "$(dirname "$0")/../.."
source test/lib.sh
SMALL="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64 --batch_size 4 --num_tokens 0"
export FSDPC_FAIL_AGREE_SECONDS=3  # how long a rank waits for the others before it aborts the job

# ---- divergence: detected at its step, nothing written after it ----
export FSDPC_TEST_NONFINITE=2  # steps 2 on diverge (no --lr in its range reliably does)
DIV="$SMALL --min_lr 0 --warmup 0 --checkpoint_freq 1 --logging_freq 1"
expect_error "a diverging run stops at the first non-finite step" "step 2: non-finite loss" \
    ./fsdpc $DIV --max_steps 6 --checkpoint_dir "$W/div"
[ "$(ls "$W/div")" = "step_00000001.h5" ]
check "no checkpoint after the first non-finite step" $? "$(ls "$W/div" | tr '\n' ' ')"
./fsdpc $DIV --max_steps 6 --checkpoint_dir "$W/div2" --skip_nonfinite_steps 2 --metrics_file "$W/div2.jsonl" 2>"$W/div2.log"
rc=$?
[ $rc = 1 ] && grep -q "step 2: non-finite loss or gradient norm (nan, nan): update skipped (1 of" "$W/div2.log" &&
    grep -q "step 4: non-finite loss" "$W/div2.log" && [ "$(ls "$W/div2")" = "step_00000001.h5" ] &&
    grep -q '"step": 2, "loss": null, .*"skipped": true' "$W/div2.jsonl"
check "--skip_nonfinite_steps 2 skips two updates, then stops; skipped steps write no checkpoint" $? "rc=$rc $(ls "$W/div2" | tr '\n' ' ')"
$MPI -np 2 ./fsdpc $DIV --batch_size 2 --max_steps 4 --checkpoint_dir "$W/div3" >/dev/null 2>"$W/div3.log"
rc=$?
[ $rc = 1 ] && [ "$(grep -c '^fsdpc: error: step 2: non-finite' "$W/div3.log")" = 1 ]
check "np=2: every rank stops at the non-finite step, one error line" $? "rc=$rc"
unset FSDPC_TEST_NONFINITE

# ---- preemption: finish the step, checkpoint, exit 75; a signal to one rank is enough ----
P="$SMALL --lr_decay_style constant --warmup 5 --lr 2e-3 --max_steps 400 --checkpoint_freq 1000 --logging_freq 1"
$MPI -np 2 ./fsdpc $P --batch_size 2 --checkpoint_dir "$W/pre" --metrics_file "$W/pre.jsonl" >/dev/null 2>"$W/pre.log" &
mpirun_pid=$!
for _ in $(seq 100); do grep -q "^Batch 3 " "$W/pre.log" 2>/dev/null && break; sleep 0.2; done
pids=$(pgrep -P "$(pgrep -P $mpirun_pid)" | sort -n)  # this mpirun's ranks (timeout -> mpirun -> ranks), not other runs
kill -USR1 "$(echo "$pids" | tail -1)"  # one rank only, not rank 0 necessarily
wait $mpirun_pid
rc=$?
step=$(sed -nE 's/^Preempted \(signal\) after step ([0-9]+).*/\1/p' "$W/pre.log")
[ $rc = 75 ] && [ -n "$step" ] && [ -f "$W/pre/$(printf 'step_%08d.h5' "$step")" ]
check "SIGUSR1 to one rank: all ranks checkpoint after the step and exit 75" $? "rc=$rc step=$step $(tail -c 300 "$W/pre.log")"
# the preempted run resumes exactly where an uninterrupted run would be
end=$((step + 3))
./fsdpc ${P/--max_steps 400/--max_steps $end} --batch_size 4 --checkpoint_freq 0 --metrics_file "$W/straight.jsonl" 2>/dev/null
$MPI -np 2 ./fsdpc ${P/--max_steps 400/--max_steps $end} --batch_size 2 --resume_from_checkpoint "$W/pre" \
    --checkpoint_dir "$W/pre" --metrics_file "$W/pre.jsonl" >/dev/null 2>&1
d=$(rel_diff <(tail -n $end "$W/straight.jsonl") "$W/pre.jsonl" $end 1e-5)
check "the preempted run, resumed, follows the uninterrupted one ($d)" $?

# ---- errors on one rank only end every rank ----
mkdir -p "$W/a" "$W/b"
head -c 20000 data/tinyshakespeare.txt >"$W/a/local.txt"
start=$(date +%s)
timeout 60 mpirun --oversubscribe --allow-run-as-root -x FSDPC_FAIL_AGREE_SECONDS -np 1 --wdir "$W/a" "$PWD/fsdpc" $SMALL \
    --train_data local.txt --max_steps 2 --checkpoint_freq 0 : -np 1 --wdir "$W/b" "$PWD/fsdpc" $SMALL --train_data local.txt \
    --max_steps 2 --checkpoint_freq 0 >/dev/null 2>"$W/one.err"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(grep -c '^fsdpc: error:' "$W/one.err")" = 1 ] && grep -q "'local.txt' does not exist.*on rank 1" "$W/one.err"
st=$?
check "a data file missing on one node only ends the job with its message ($(($(date +%s) - start)) s)" $st "rc=$rc $(grep -m2 . "$W/one.err" | head -c 300)"
timeout 60 mpirun --oversubscribe --allow-run-as-root -np 1 ./fsdpc $SMALL --lr 1e-3 --max_steps 1 : \
    -np 1 ./fsdpc $SMALL --lr 2e-3 --max_steps 1 >/dev/null 2>"$W/flags.err"
rc=$?
[ $rc = 1 ] && [ "$(grep -c '^fsdpc: error:' "$W/flags.err")" = 1 ] && grep -q "rank 1 has different flags than rank 0" "$W/flags.err"
check "a flag that differs between ranks is named at start-up" $? "rc=$rc $(head -c 300 "$W/flags.err")"

# ---- memory: a run that cannot fit stops before allocating, saying what would ----
expect_error "batch too large for memory" "estimated peak memory .* exceeds the 0.09 GiB available \(FSDPC_TEST_MEM_AVAILABLE\); would fit: --batch_size 8" \
    env FSDPC_TEST_MEM_AVAILABLE=1e8 ./fsdpc --batch_size 512 --max_steps 1
expect_error "llama2_70b on one CPU node" "estimated peak memory .* GiB per rank .* would fit: more ranks" \
    ./fsdpc --model_name llama2_70b --max_steps 1 --train_data synthetic
$MPI -np 2 env FSDPC_TEST_MEM_AVAILABLE=1e8 ./fsdpc --batch_size 512 --max_steps 1 >/dev/null 2>"$W/mem2.err"
[ $? = 1 ] && [ "$(grep -c '^fsdpc: error: estimated peak memory' "$W/mem2.err")" = 1 ]
check "np=2: the memory verdict ends every rank with one line" $?

# ---- special files and paths ----
mkfifo "$W/fifo"
expect_error "a FIFO as training data" "'$W/fifo' is not a regular file" ./fsdpc $SMALL --train_data "$W/fifo" --max_steps 1
# outputs: a FIFO would block the open, and the trace (written aside, then renamed over the path)
# must never replace a device or a directory; a metrics file that cannot be written ends the run
expect_error "a FIFO as --metrics_file" "--metrics_file '$W/fifo' is a FIFO: give the path of a regular file" \
    ./fsdpc $SMALL --checkpoint_freq 0 --metrics_file "$W/fifo" --max_steps 1
expect_error "a device as --trace_file" "--trace_file '/dev/full' is a device: give the path of a regular file" \
    ./fsdpc $SMALL --checkpoint_freq 0 --trace_file /dev/full --max_steps 1
[ -c /dev/full ]
check "--trace_file /dev/full left the device alone" $?
expect_error "a directory as --trace_file" "--trace_file '$W' is a directory" ./fsdpc $SMALL --checkpoint_freq 0 --trace_file "$W" --max_steps 1
expect_error "--metrics_file on a full device ends the run at its first line" "cannot write --metrics_file '/dev/full': No space left on device" \
    ./fsdpc $SMALL --checkpoint_freq 0 --metrics_file /dev/full --max_steps 3
# stdout is the product of generation, tokenize and plan: a failed write is an error, not exit 0
expect_error "generated text to a full device" "cannot write standard output: No space left on device" \
    bash -c './fsdpc --max_steps 0 --allow_random_weights --prompt hello --num_tokens 20 --temperature 0 >/dev/full'
expect_error "tokenize's ids to a full device" "cannot write" bash -c 'echo hi | ./fsdpc tokenize --tokenizer byte >/dev/full'
expect_error "plan's table to a full device" "cannot write standard output" bash -c './fsdpc plan --model_name llama2_7b >/dev/full'
./fsdpc $SMALL --checkpoint_freq 0 --metrics_file /dev/null --max_steps 1 >/dev/null 2>"$W/null.err"
check "--metrics_file /dev/null is accepted" $? "$(grep -m1 error "$W/null.err")"
touch "$W/ro" && chmod 0444 "$W/ro"
mkdir -p "$W/rodir" && chmod 0555 "$W/rodir"
if [ "$(id -u)" != 0 ]; then
    expect_error "unwritable checkpoint directory at start-up" "cannot write to --checkpoint_dir" ./fsdpc $SMALL --checkpoint_dir "$W/rodir" --max_steps 1
fi
expect_error "checkpoint dir under a file" "--checkpoint_dir '$W/ro/ck': '$W/ro' is a file, not a folder" ./fsdpc $SMALL --checkpoint_dir "$W/ro/ck" --max_steps 50
expect_error "metrics file in a missing directory" "cannot (open|write) --metrics_file" ./fsdpc $SMALL --metrics_file "$W/no/such/m.jsonl" --max_steps 50
expect_error "empty --checkpoint_dir" "--checkpoint_dir needs a directory" ./fsdpc $SMALL --checkpoint_dir "" --max_steps 1
expect_error "--shard_group_size without a hybrid strategy" "only applies to --sharding hybrid" ./fsdpc $SMALL --shard_group_size 2
for f in lr min_lr warmup weight_decay beta1 grad_clip temperature top_p initializer_range rope_theta; do
    expect_error "--$f nan" "--$f must be a finite number" ./fsdpc $SMALL --$f nan
done
expect_error "--lr inf" "--lr must be a finite number" ./fsdpc $SMALL --lr inf
expect_error "--beta2 1" "beta2 must be in \[0, 1\)" ./fsdpc $SMALL --beta2 1
expect_error "--top_p 0" "top_p must be in \(0, 1\]" ./fsdpc $SMALL --top_p 0
expect_error "--finetune without weights" "--finetune needs the weights" ./fsdpc $SMALL --finetune

# ---- a NaN written into a checkpoint: its checksum refuses it; with the checksum made to match,
# the load names the tensor; weights too large for the forward stop generation with one error
# instead of reading out of bounds ----
./fsdpc $SMALL --max_steps 2 --checkpoint_dir "$W/g" --checkpoint_freq 2 2>/dev/null
nan_into() {  # FILE FIX_CRC [TENSOR VALUE]: VALUE (NaN) into element 3,5 of TENSOR (lm_head), or all of a 1-D one
    /usr/bin/python3 -c "
import h5py, numpy as np, sys, zlib
with h5py.File(sys.argv[1], 'r+') as f:
    d = f['model/' + sys.argv[3]]; a = d[...]
    if a.ndim == 2: a[3, 5] = float(sys.argv[4])
    else: a[:] = float(sys.argv[4])
    d[...] = a
    if sys.argv[2] == '1': d.attrs['crc32'] = np.uint32(zlib.crc32(a.astype('<f4').tobytes()))
" "$1" "$2" "${3:-lm_head.weight}" "${4:-nan}"
}
cp "$W/g/step_00000002.h5" "$W/g/nan.h5" && nan_into "$W/g/nan.h5" 0
expect_error "NaN written into a checkpoint fails its checksum" "tensor /model/lm_head.weight fails its checksum" \
    ./fsdpc $SMALL --max_steps 0 --resume_from_checkpoint "$W/g/nan.h5" --prompt "ROMEO:" --num_tokens 5 --temperature 0.7
cp "$W/g/step_00000002.h5" "$W/g/huge.h5" && nan_into "$W/g/huge.h5" 1 model.norm.weight 3e38
nan_into "$W/g/step_00000002.h5" 1
expect_error "NaN weights with matching checksums are named at load" "checkpoint '$W/g/step_00000002.h5' holds NaN or infinite values in 1 tensor\\(s\\): model/lm_head.weight" \
    ./fsdpc $SMALL --max_steps 0 --resume_from_checkpoint "$W/g/step_00000002.h5" --prompt "ROMEO:" --num_tokens 5 --temperature 0.7
expect_error "NaN logits in generation" "generation: logit .* is -?nan: the weights are not finite or too large" \
    ./fsdpc $SMALL --max_steps 0 --resume_from_checkpoint "$W/g/huge.h5" --prompt "ROMEO:" --num_tokens 5 --temperature 0.7

# ---- launch: copies not wired into one job, threads of unpinned ranks ----
expect_error "a torchrun-style launch is refused with the MPI command" "WORLD_SIZE=2 \\(torchrun's variables\\) but MPI sees 1 rank.*mpirun -n 2" \
    env WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 ./fsdpc --max_steps 1
expect_error "N unwired copies are refused" "the launcher started 2 tasks \(OMPI_COMM_WORLD_SIZE\) but MPI sees 1 rank" \
    env OMPI_COMM_WORLD_SIZE=2 ./fsdpc $SMALL --max_steps 1
expect_error "srun without PMIx is refused before MPI_Init" "srun started 2 tasks without PMIx: pass --mpi=pmix" \
    env SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0 ./fsdpc $SMALL --max_steps 1
$MPI -np 2 --bind-to none ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 2>&1 | grep -q "2 rank(s) on cpu, $(($(nproc) / 2 > 0 ? $(nproc) / 2 : 1)) thread(s)/rank"
check "unpinned ranks share the node's cores instead of each taking all" $?
SLURM_CPUS_PER_TASK=1 ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 2>&1 | grep -q "1 rank(s) on cpu, 1 thread(s)/rank"
check "SLURM_CPUS_PER_TASK sets the threads per rank" $?
# run/launch/pbs.sh as written, on a fake 2-slot node file (Debian's OpenMPI has no PBS tm support)
printf 'localhost\nlocalhost\n' >"$W/nodes"
PBS_O_WORKDIR="$PWD" PBS_NODEFILE="$W/nodes" DATA=data/tinyshakespeare.txt STEPS=3 CKPT_FREQ=3 MODEL_ARGS="$SMALL" \
    EXTRA_ARGS="--logging_freq 1" CKPT="$W/pbsck" timeout 120 bash run/launch/pbs.sh >/dev/null 2>"$W/pbs.log"
rc=$?
[ $rc = 0 ] && grep -q "^fsdpc: 2 rank(s) on cpu" "$W/pbs.log" && [ -f "$W/pbsck/step_00000003.h5" ]
check "run/launch/pbs.sh trains as written (hostfile from PBS_NODEFILE)" $? "rc=$rc $(tail -c 300 "$W/pbs.log")"
# minimal_fsdp on PBS: run/launch/pbs.sh with its model and --environment pbs, which names the job
PBS_JOBID=4242.pbs01 PBS_JOBNAME=mingpt PBS_O_WORKDIR="$PWD" PBS_NODEFILE="$W/nodes" DATA=data/tinyshakespeare.txt STEPS=2 \
    CKPT_FREQ=2 MODEL_ARGS="--recipe_defaults none --tokenizer byte --model mingpt --embed_size 64 --num_layers 2 --num_heads 4 --seq_len 64 --dropout 0.1 --num_tokens 0" \
    EXTRA_ARGS="--environment pbs --sharding hybrid-full-shard" CKPT="$W/pbsgpt" timeout 120 bash run/launch/pbs.sh >/dev/null 2>"$W/pbsgpt.log"
rc=$?
[ $rc = 0 ] && grep -q "^PBS job 4242.pbs01 (mingpt), PBS_NODEFILE $W/nodes: 2 slot(s) for 2 rank(s)" "$W/pbsgpt.log" &&
    [ -f "$W/pbsgpt/step_00000002.h5" ]
check "run/launch/pbs.sh trains minimal_fsdp's minGPT with --environment pbs, naming the job and its node file" $? "rc=$rc $(tail -c 300 "$W/pbsgpt.log")"
expect_error "--environment pbs outside a PBS job" "--environment pbs: PBS_JOBID is not set" \
    env -u PBS_JOBID ./fsdpc $SMALL --environment pbs --recipe_defaults none --max_steps 1
expect_error "run/launch/pbs.sh without DATA says what to set" "set DATA to the training token shards" \
    env -u DATA PBS_NODEFILE="$W/nodes" bash run/launch/pbs.sh
# run/launch/local.sh as written (as root here: it adds --allow-run-as-root itself); later flags win
NP=2 timeout 120 bash run/launch/local.sh $SMALL --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/lc" \
    --resume_from_checkpoint "$W/lc" >/dev/null 2>"$W/local.log"
rc=$?
[ $rc = 0 ] && grep -q "^fsdpc: 2 rank(s) on cpu" "$W/local.log" && [ -f "$W/lc/step_00000002.h5" ]
ok=$?  # before the message's $(...), which would set $? again
check "run/launch/local.sh trains as written (as $(id -un))" $ok "rc=$rc $(tail -c 300 "$W/local.log")"
# the sample after training goes to job logs: text, not raw bytes of an undertrained byte model
./fsdpc $SMALL --max_steps 3 --num_tokens 300 --checkpoint_freq 0 >"$W/sample.log" 2>&1
LC_ALL=C.UTF-8 grep -Iq "Batch 3 Loss" "$W/sample.log" && ! LC_ALL=C.UTF-8 grep -q $'\r' "$W/sample.log"
check "the end-of-run sample leaves the log greppable text (other bytes as \\xNN)" $?
$MPI -np 2 ./fsdpc $SMALL --num_threads $(($(nproc) + 1)) --max_steps 1 --checkpoint_freq 0 2>&1 | grep -q "^warning: .* exceed its $(nproc) cores"
check "threads x ranks beyond the node's cores is warned about" $?
./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 2>&1 | grep -q "^fsdpc: [0-9]* thread(s) per rank, from "
check "the thread count's source is logged" $?

# class 4: paths read from files stay inside their folder; class 5: there-but-unusable is an error, not "absent"
/usr/bin/python3 test/ref/hf_make.py "$W/hfp" --shards 2 >/dev/null
cp -r "$W/hfp" "$W/hft" && mkdir -p "$W/outside" && mv "$W/hft/$(ls "$W/hft" | grep -m1 'safetensors$')" "$W/outside/"
shard=$(ls "$W/outside")
sed -i "s|\"$shard\"|\"../outside/$shard\"|g" "$W/hft/model.safetensors.index.json"
expect_error "an index whose weight_map leaves the model folder" "outside the index's folder" ./fsdpc --init_from "$W/hft" --max_steps 1
sed -i "s|\"../outside/$shard\"|\"$W/outside/$shard\"|g" "$W/hft/model.safetensors.index.json"
expect_error "an index whose weight_map is an absolute path" "outside the index's folder" ./fsdpc --init_from "$W/hft" --max_steps 1
cp -r "$W/hfp" "$W/hfc" && rm "$W/hfc/config.json" && mkdir "$W/hfc/config.json"
expect_error "a config.json that is a folder is no absent config" "config.json' is there but is not a regular file" ./fsdpc --init_from "$W/hfc" --max_steps 1
rmdir "$W/hfc/config.json" && ln -s "$W/nowhere.json" "$W/hfc/config.json"
expect_error "a config.json that is a dangling link is no absent config" "config.json' is there but cannot be used" ./fsdpc --init_from "$W/hfc" --max_steps 1

# class 13: a resume continues the recorded run: its seed (another one by name is refused) and its data position in samples
R="--max_steps 10 --checkpoint_freq 5 --num_tokens 0 --logging_freq 100 --batch_size 8"
./fsdpc $R --seed 7 --checkpoint_dir "$W/rs" --metrics_file "$W/rs_a.jsonl" >/dev/null 2>&1
./fsdpc $R --resume_from_checkpoint "$W/rs/step_00000005.h5" --checkpoint_dir "$W/rs_b" --metrics_file "$W/rs_b.jsonl" >/dev/null 2>&1
cmp -s <(losses "$W/rs_a.jsonl" | tail -5) <(losses "$W/rs_b.jsonl")
check "a resume without --seed continues with the checkpoint's seed (7), bit for bit" $?
expect_error "a resume with another --seed" "--seed 8 differs from the seed 7" ./fsdpc $R --resume_from_checkpoint "$W/rs/step_00000005.h5" \
    --checkpoint_dir "$W/rs_c" --seed 8
./fsdpc $R --resume_from_checkpoint "$W/rs/step_00000005.h5" --checkpoint_dir "$W/rs_d" --batch_size 4 >"$W/rs_d.log" 2>&1
pos=$(/usr/bin/python3 -c "import h5py, sys; print(int(h5py.File(sys.argv[1])['/'].attrs['data_position']))" "$W/rs_d/step_00000010.h5")
grep -q "Resuming at position 40 of the data order" "$W/rs_d.log" && [ "$pos" = 60 ]
check "a resume with another global batch starts at the recorded sample (40) and goes on from there (60 after 5 steps of 4)" $? "pos=$pos"

# class 1: stop signals in every polled phase, from the first moment
./fsdpc --max_steps 0 --allow_random_weights --prompt "ROMEO:" --num_tokens 100000 --temperature 0.8 >"$W/gen_sig.txt" 2>"$W/gen_sig.log" &
pid=$!
sleep 3
kill -TERM $pid
t0=$SECONDS
wait $pid
rc=$?
grep -q "Stopped by signal 15 (SIGTERM) during generation" "$W/gen_sig.log" && [ $rc = 75 ] && [ $((SECONDS - t0)) -le 10 ]
check "SIGTERM during generation stops it at the next token, exit 75" $? "rc=$rc $(tail -c 200 "$W/gen_sig.log")"
for sig in HUP INT QUIT; do
    # the last run's log goes first: the shell truncates it only once the new run has forked, and
    # a signal sent before the run installs its handlers is lost (a background job ignores INT, QUIT)
    rm -rf "$W/sigck" "$W/sig.log"
    ./fsdpc --max_steps 100000 --checkpoint_freq 100000 --checkpoint_dir "$W/sigck" --num_tokens 0 --logging_freq 1 >"$W/sig.log" 2>&1 &
    pid=$!
    for i in $(seq 100); do grep -q "^Batch 1 Loss" "$W/sig.log" && break; sleep 0.2; done
    kill -$sig $pid
    wait $pid
    rc=$?
    [ $rc = 75 ] && ls "$W/sigck"/step_*.h5 >/dev/null 2>&1 && grep -q "Preempted (signal)" "$W/sig.log"
    check "SIG$sig during training: a checkpoint, then exit 75" $? "rc=$rc $(grep -m2 'Preempted\|error' "$W/sig.log")"
done
# a signal before any work (during start-up) is honoured at the first step boundary too
./fsdpc --max_steps 100000 --checkpoint_freq 100000 --checkpoint_dir "$W/sigck0" --num_tokens 0 >"$W/sig0.log" 2>&1 &
pid=$!
sleep 0.3
kill -TERM $pid
wait $pid
rc=$?
[ $rc = 75 ] || [ $rc = 143 ]
check "SIGTERM during start-up ends the run as preempted (75), or before MPI starts, as the signal would (143)" $? "rc=$rc $(tail -c 200 "$W/sig0.log")"

# class 6: tensors the model does not use are refused by name (known buffers aside), or loaded around with --allow_unused_weights
/usr/bin/python3 test/ref/hf_make.py "$W/hfx" --inv_freq >/dev/null
/usr/bin/python3 - "$W/hfx/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
raw = open(p, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
end = max(v["data_offsets"][1] for k, v in head.items() if k != "__metadata__")
head["model.layers.7.mlp.extra.weight"] = {"dtype": "F32", "shape": [2], "data_offsets": [end, end + 8]}
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
open(p, "wb").write(struct.pack("<Q", len(h)) + h + data[:end] + b"\0" * 8)
PY
expect_error "a weights file with a tensor the model does not use" "holds 1 tensor the llama_v2 model does not use \(model.layers.7.mlp.extra.weight\)" \
    ./fsdpc --init_from "$W/hfx" --max_steps 1 --num_tokens 0 --checkpoint_freq 0
./fsdpc --init_from "$W/hfx" --max_steps 1 --num_tokens 0 --checkpoint_freq 0 --allow_unused_weights >"$W/unused.log" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "warning: .*model.layers.7.mlp.extra.weight.*not loaded (--allow_unused_weights)" "$W/unused.log" && ! grep -q "inv_freq" "$W/unused.log"
check "--allow_unused_weights loads the rest with a warning; rotary_emb.inv_freq buffers pass without a word" $? "rc=$rc $(grep -m2 'warning\|error' "$W/unused.log")"

# ---- a launcher that starves a rank: mpirun binds np=1 to one core of the node's two ----
if [ "$(nproc)" -ge 2 ]; then
    timeout 60 mpirun --oversubscribe --allow-run-as-root --bind-to core -np 1 ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 \
        >/dev/null 2>"$W/bind.log"
    timeout 60 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 1 ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 \
        >/dev/null 2>"$W/unbound.log"
    [ "$(grep -c '^warning: this rank is bound to 1 core(s) of its [0-9]*-core share of the node; .*--bind-to none' "$W/bind.log")" = 1 ] &&
        ! grep -q "is bound to" "$W/unbound.log"
    check "a rank bound to fewer cores than its share is told once which launcher flag fixes it; unbound, nothing" $?
fi
