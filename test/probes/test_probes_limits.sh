#!/usr/bin/env bash
# Probes of resource limits, sizes that wrap and errors that must name their cause (issue 23,
# classes 2, 8 and 15): under ulimit -v/-n/-f, a umask that locks the owner out, thread counts far
# above the cores, overflowing sizes, unreadable files and paths through files, every run ends
# with exactly one "fsdpc: error:" line naming the cause, or succeeds; never a hang or a crash,
# and no input changes.
cd "$(dirname "$0")/../.."
source test/lib.sh
# one line each: they also go into `bash -c` strings (and in another order than test_faults.sh's,
# whose preemption probe signals the processes that match its command line)
SMALL="--tokenizer byte --num_layers 2 --hidden_width 64 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64 --batch_size 4 --num_tokens 0 --validation_freq 0"
export FSDPC_FAIL_AGREE_SECONDS=3
INT_MAX=2147483647

# ends_cleanly NAME CMD...: CMD (under `timeout`) succeeds, or fails with one error line and no
# signal; a dynamic loader that cannot map the libraries at all (before fsdpc runs) is said so
ends_cleanly() {
    local name=$1
    shift
    timeout 60 "$@" >"$W/out" 2>"$W/err"
    local rc=$? lines
    lines=$(grep -c '^fsdpc: error:' "$W/err")
    if [ $rc = 127 ] && grep -q "error while loading shared libraries" "$W/err"; then
        echo "ok - ${PREFIX:-}$name (the dynamic loader cannot map fsdpc's libraries under this limit, before fsdpc runs)"
        return
    fi
    { [ $rc = 0 ] && [ "$lines" = 0 ]; } || { [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$lines" = 1 ]; }
    ok=$?  # before the message's $(...), which would set $? again
    check "$name (rc=$rc$([ $rc = 0 ] || echo ": $(grep -m1 '^fsdpc: error:' "$W/err" | cut -c15-90)"))" $ok \
        "(rc=$rc, $lines error lines: $(grep -v '^Batch' "$W/err" | grep -m3 . | head -c 300 | tr '\n' '|'))"
}

inputs_sum() { sha256sum "$@" | sha256sum; }

# a checkpoint to read, and a model whose checkpoints are larger than Open MPI's 16 MiB floor
./fsdpc $SMALL --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/ck" >/dev/null 2>&1
CK="$W/ck/step_00000002.h5"
[ -f "$CK" ]
check "a checkpoint to probe with" $?

# ---- class 2: resource limits ----
# every ulimit -v from 256 MiB up, 128 MiB apart, until a run fits: each attempt fails with one
# line (the loader, OpenBLAS's buffers, MPI's start-up, the CPU threads, an allocation) or runs
fitted=""
for kib in $(seq 262144 131072 6291456); do
    (ulimit -v $kib && exec timeout 60 ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 0) >"$W/out" 2>"$W/err"
    rc=$?
    lines=$(grep -c '^fsdpc: error:' "$W/err")
    if [ $rc = 0 ]; then fitted=$kib; break; fi
    if ! { [ $rc = 127 ] && grep -q "error while loading shared libraries" "$W/err"; } &&
        ! { [ $rc -lt 124 ] && [ "$lines" = 1 ]; }; then
        check "ulimit -v $kib: one error line or a run" 1 "(rc=$rc, $lines error lines: $(grep -v '^Batch' "$W/err" | grep -m3 . | head -c 300 | tr '\n' '|'))"
        break
    fi
    grep -q '^fsdpc: error:' "$W/err" && echo "#   ulimit -v $kib: $(grep -m1 '^fsdpc: error:' "$W/err" | cut -c15-120)"
done
[ -n "$fitted" ]
check "ulimit -v from 256 MiB up: one error line naming the limit at each value, until a run fits at $fitted KiB" $?
for kib in 204800 512000 1048576 2097152 4194304; do
    ends_cleanly "ulimit -v $kib" bash -c "ulimit -v $kib && exec ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0"
    ends_cleanly "ulimit -v $kib, OMP_NUM_THREADS=64" bash -c "ulimit -v $kib && OMP_NUM_THREADS=64 exec ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0"
done
ends_cleanly "ulimit -v 1 GiB, np=2" bash -c "ulimit -v 1048576 && exec $MPI -np 2 ./fsdpc $SMALL --batch_size 2 --max_steps 2 --checkpoint_freq 0"
# room for a run of the cores' threads, not for 64 (plan starts what --num_threads says: it sizes the
# attention scratch of another node): the count, the limit and the fix
if [ -n "$fitted" ]; then
    expect_error "threads that do not fit under ulimit -v name the count and the limit" \
        "cannot start 64 CPU threads under ulimit -v $fitted KiB: .* \\(each needs a stack of [0-9]+ MiB and two 128 MiB OpenBLAS buffers.*lower --num_threads" \
        bash -c "ulimit -v $fitted && exec ./fsdpc plan --num_threads 64 --device cpu --train_data synthetic"
fi
for t in 64 1000; do
    OMP_NUM_THREADS=$t timeout 60 ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 0 >"$W/out" 2>"$W/err"
    rc=$?
    [ $rc = 0 ] && grep -q "^warning: $t thread(s) per rank from OMP_NUM_THREADS exceed this node's $(nproc) cores: using $(nproc)" "$W/err" &&
        grep -q "^fsdpc: $(nproc) thread(s) per rank" "$W/err"
    ok=$?  # before the message's $(...), which would set $? again
    check "OMP_NUM_THREADS=$t on $(nproc) cores: capped at the cores with a warning" $ok "rc=$rc $(grep -m2 -E 'error|warning' "$W/err")"
done
timeout 60 ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --num_threads 1000 >"$W/out" 2>"$W/err"
[ $? = 0 ] && grep -q "^warning: 1000 thread(s) per rank from --num_threads exceed" "$W/err"
check "--num_threads 1000: capped at the cores with a warning" $?

# ---- class 8: sizes that wrap ----
for run in "plan" "train"; do
    if [ $run = plan ]; then cmd=(./fsdpc plan --train_data synthetic --device cpu); else cmd=(./fsdpc --max_steps 1 --checkpoint_freq 0); fi
    expect_error "$run: --batch_size x --max_context_width beyond 32 bits names the product" \
        "--batch_size $INT_MAX x --max_context_width 2147483646 = 4611686011984936962 tokens per micro-batch, more than 2147483647" \
        "${cmd[@]}" --batch_size $INT_MAX --max_context_width 2147483646
    expect_error "$run: --batch_size x --grad_accum beyond 32 bits" "--batch_size 65536 x ranks 1 x --grad_accum 65536 = 4294967296 sequences per optimizer step" \
        "${cmd[@]}" --batch_size 65536 --max_context_width 8 --grad_accum 65536
    expect_error "$run: --intermediate_size $INT_MAX overflows the fused GEMM" "2 x --intermediate_size $INT_MAX = 4294967294 rows of the fused gate and up projections" \
        "${cmd[@]}" --intermediate_size $INT_MAX
    expect_error "$run: --num_layers $INT_MAX" "--num_layers $INT_MAX: at most" "${cmd[@]}" --num_layers $INT_MAX
    expect_error "$run: a model too large to count names its parameters" \
        "too large to count: parameters [0-9]+ x 16 = [0-9]+ bytes of fp32 weights, gradients and AdamW moments, more than 72057594037927936" \
        "${cmd[@]}" --vocab_size $INT_MAX --hidden_width 1048576 --num_heads 8 --num_key_value_heads 8
    expect_error "$run: 2^30 context: the attention probabilities wrap 64 bits" \
        "--max_context_width 1073741824 x --max_context_width 1073741824 x 4 = more than 2\\^64 bytes of attention probabilities" \
        "${cmd[@]}" --batch_size 1 --max_context_width 1073741824 --device cpu
done
expect_error "plan: 2^16 ranks x 2^16 sequences" "--batch_size 65536 x ranks 65536 x --grad_accum 1" \
    ./fsdpc plan --train_data synthetic --world_size 65536 --ranks_per_node 8 --batch_size 65536 --max_context_width 8
timeout 60 ./fsdpc plan --train_data synthetic --device cpu --batch_size 65535 --max_context_width 32768 >"$W/out" 2>"$W/err"
[ $? = 0 ] && grep -q "DOES NOT FIT" "$W/out" && ! grep -q "^  fits" "$W/out"
check "plan: large sizes that do not wrap are counted, and do not fit" $? "$(grep -m1 -E 'FIT|fits|error' "$W/out" "$W/err")"

# ---- class 15: errors that name the real cause ----
echo "not a checkpoint" >"$W/afile"
head -c 4096 "$CK" >"$W/trunc.h5"
before=$(inputs_sum "$CK" "$W/afile" "$W/trunc.h5")
expect_error "--checkpoint_dir that is a file says so" "--checkpoint_dir '$W/afile' is a file, not a folder" \
    ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 1 --checkpoint_dir "$W/afile"
expect_error "--checkpoint_dir under a file names the file" "--checkpoint_dir '$W/afile/sub': '$W/afile' is a file, not a folder" \
    ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 1 --checkpoint_dir "$W/afile/sub"
expect_error "--resume_from_checkpoint under a file is not a fresh start" "checkpoint '$W/afile/sub': '$W/afile' is a file, not a folder" \
    ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 0 --resume_from_checkpoint "$W/afile/sub"
expect_error "--resume_from_checkpoint naming a file that is not HDF5" "cannot open checkpoint '$W/afile': not an HDF5 file" \
    ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 0 --resume_from_checkpoint "$W/afile"
expect_error "a truncated checkpoint is a damaged HDF5 file" "cannot open checkpoint '$W/trunc.h5': a damaged HDF5 file \\(truncated" \
    ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 0 --init_from "$W/trunc.h5"
expect_error "--metrics_file under a file" "--metrics_file '$W/afile/m.jsonl'.*: '$W/afile' is a file, not a folder" \
    ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --metrics_file "$W/afile/m.jsonl"
expect_error "export --output that is a file" "--output '$W/afile' is a file, not a folder" ./fsdpc export --checkpoint "$W/ck" --output "$W/afile"
expect_error "--train_data under a file" "'$W/afile/x.txt': '$W/afile' is a file, not a folder" \
    ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --train_data "$W/afile/x.txt"
[ "$before" = "$(inputs_sum "$CK" "$W/afile" "$W/trunc.h5")" ]
check "the inputs of the path probes are unchanged" $?

# permissions: root reads everything, so those probes run as nobody (or skip)
DROP=""
if [ "$(id -u)" != 0 ]; then
    DROP="env"
elif setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null; then
    DROP="setpriv --reuid=nobody --regid=nogroup --clear-groups"
elif runuser -u nobody -- true 2>/dev/null; then
    DROP="runuser -u nobody --"
fi
chmod 755 "$W" && mkdir -p "$W/nb/tmp" && chmod -R 1777 "$W/nb"
if [ -z "$DROP" ]; then
    echo "ok - ${PREFIX:-}permission probes # SKIP cannot run as another user here (no setpriv or runuser)"
elif ! $DROP test -x ./fsdpc -a -r data/tinyshakespeare.txt 2>/dev/null; then
    echo "ok - ${PREFIX:-}permission probes # SKIP the user they run as cannot read the repository at $PWD"
else
    AS="$DROP env HOME=$W/nb TMPDIR=$W/nb/tmp"  # Open MPI's session folder, away from /tmp
    cp "$CK" "$W/nb/noread.h5" && chmod 600 "$W/nb/noread.h5"
    /usr/bin/python3 -c "
import h5py, numpy as np, sys
rows = np.frombuffer(open('data/tinyshakespeare.txt', 'rb').read()[:65 * 1000], np.uint8).reshape(-1, 65).astype(np.uint16)
with h5py.File(sys.argv[1], 'w') as f: f.create_dataset('input_ids', data=rows)" "$W/nb/rows.h5" && chmod 600 "$W/nb/rows.h5"
    cp data/tinyshakespeare.txt "$W/nb/tok.model" && chmod 600 "$W/nb/tok.model"
    before=$(inputs_sum "$W/nb/noread.h5" "$W/nb/rows.h5")
    expect_error "an unreadable --init_from checkpoint: Permission denied" "cannot open checkpoint '$W/nb/noread.h5': Permission denied" \
        $AS ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 0 --init_from "$W/nb/noread.h5"
    expect_error "an unreadable --resume_from_checkpoint: Permission denied" "cannot open checkpoint '$W/nb/noread.h5': Permission denied" \
        $AS ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 0 --resume_from_checkpoint "$W/nb/noread.h5"
    expect_error "unreadable HDF5 training data: Permission denied" "'$W/nb/rows.h5': Permission denied" \
        $AS ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 0 --train_data "$W/nb/rows.h5"
    expect_error "an unreadable tokenizer: Permission denied" "cannot read tokenizer '$W/nb/tok.model': Permission denied" \
        $AS ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 0 --tokenizer "$W/nb/tok.model"
    [ "$before" = "$(inputs_sum "$W/nb/noread.h5" "$W/nb/rows.h5")" ]
    check "the unreadable inputs are unchanged" $?
    mkdir -m 1777 "$W/nb/tmpu"
    expect_error "umask 0400 as a user: one line before Open MPI's" "umask 0400 takes the owner's own read permission.*set umask 022" \
        bash -c "umask 0400 && exec $DROP env HOME=$W/nb TMPDIR=$W/nb/tmpu ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0"
    [ -z "$(ls -A "$W/nb/tmpu")" ]
    check "the refused umask left no Open MPI session folder behind (one would break the user's later runs)" $? "$(ls -A "$W/nb/tmpu")"
fi

# limits Open MPI would fail on with its own text are checked first, one line each with the fix
expect_error "umask 0777" "umask 0777 takes the owner's own read permission .*: set umask 022" \
    bash -c "umask 0777 && exec ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0"
expect_error "umask 0200" "umask 0200 takes the owner's own write permission" bash -c "umask 0200 && exec ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0"
(umask 077 && timeout 60 ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 1 --checkpoint_dir "$W/u077" >/dev/null 2>&1)
[ $? = 0 ] && [ "$(stat -c %a "$W/u077/step_00000001.h5")" = 600 ]
check "umask 077 is a private run, not refused" $?
expect_error "ulimit -n 16 (hard)" "ulimit -n 16 \\(open files\\) is below the [0-9]+ that Open MPI and fsdpc need .*raise it \\(ulimit -n 4096\\)" \
    bash -c "ulimit -n 16 && exec ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0"
(ulimit -Sn 16 && exec timeout 60 ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0) >/dev/null 2>"$W/err"
check "ulimit -Sn 16 under a higher hard limit: raised, the run goes on" $? "$(grep -m1 error "$W/err")"
# more data files than open files: 1100 text files under ulimit -n 1024 (hard), np=2, with validation
# on the same folder; the files a dataset keeps open are bounded, the others opened when sampled
mkdir -p "$W/many"
/usr/bin/python3 -c '
import sys
t = open("data/tinyshakespeare.txt").read()
for i in range(1100): open(f"{sys.argv[1]}/f{i:05d}.txt", "w").write(t[i * 400:(i + 1) * 400 + 100])' "$W/many"
(ulimit -n 1024 && exec $MPI -np 2 ./fsdpc $SMALL --train_data "$W/many" --val_data "$W/many" --validation_freq 5 \
    --validation_batches 20 --max_steps 10 --checkpoint_freq 0 --num_threads 1) >"$W/many.log" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "^Batch 10 Loss" "$W/many.log" && grep -q "Validation loss" "$W/many.log"
check "1100 data files under ulimit -n 1024 (np=2, validation too): trains" $? "(rc=$rc) $(grep -m2 error "$W/many.log")"
expect_error "ulimit -f 1000 KiB" "ulimit -f 1000 KiB \\(file size\\) is below the 16 MiB that Open MPI's shared-memory files need.*ulimit -f unlimited" \
    bash -c "ulimit -f 1000 && exec ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0"
expect_error "ulimit -s 64 (hard)" "ulimit -s 64 KiB \\(stack\\) is below the 1024 KiB .*raise it \\(ulimit -s 8192\\)" \
    bash -c "ulimit -s 64 && exec ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0"
(ulimit -Ss 64 && exec timeout 60 ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0) >/dev/null 2>"$W/err"
check "ulimit -Ss 64 under a higher hard limit: raised, the run goes on" $? "$(grep -m1 error "$W/err")"
touch "$W/tmpfile"
expect_error "TMPDIR naming a file" "TMPDIR '$W/tmpfile' is a file, not a folder: Open MPI makes its session folder there" \
    env -u OMPI_MCA_orte_tmpdir_base TMPDIR="$W/tmpfile" ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0
expect_error "TMPDIR naming no folder" "TMPDIR '$W/none' does not exist" env -u OMPI_MCA_orte_tmpdir_base TMPDIR="$W/none" ./fsdpc $SMALL \
    --max_steps 1 --checkpoint_freq 0
# Open MPI's own tmpdir base goes before TMPDIR (the suites set it), and is checked the same way
expect_error "OMPI_MCA_orte_tmpdir_base naming a file" "OMPI_MCA_orte_tmpdir_base '$W/tmpfile' is a file, not a folder" \
    env OMPI_MCA_orte_tmpdir_base="$W/tmpfile" ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0
BIG="--tokenizer byte --hidden_width 256 --num_layers 4 --num_heads 4 --num_key_value_heads 4 --intermediate_size 512 --max_context_width 32 --batch_size 2 --num_tokens 0 --validation_freq 0"
./fsdpc $BIG --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/fck" >/dev/null 2>&1
before=$(inputs_sum "$W/fck/step_00000002.h5")
expect_error "checkpoints larger than ulimit -f: refused at start-up" \
    "checkpoints of this model take 33.1 MB but ulimit -f \\(file size\\) allows 20.5 MB on rank 0: raise it" \
    bash -c "ulimit -f 20000 && exec ./fsdpc $BIG --max_steps 4 --checkpoint_freq 1 --checkpoint_dir $W/fck --resume_from_checkpoint $W/fck"
[ "$before" = "$(inputs_sum "$W/fck/step_00000002.h5")" ] && [ "$(ls "$W/fck")" = step_00000002.h5 ]
check "the earlier checkpoint is intact, nothing else written" $? "$(ls "$W/fck")"
for i in $(seq 18); do cat data/tinyshakespeare.txt; done >"$W/big.txt"
expect_error "a write past ulimit -f is EFBIG, not SIGXFSZ" "cannot write '.*': File too large \\(ulimit -f allows 17.4 MB: raise it\\)" \
    bash -c "ulimit -f 17000 && exec ./fsdpc prepare --input $W/big.txt --output $W/prep"

# NaN or infinity in loaded weights is named at load, with the file
cp "$CK" "$W/nan.h5"
/usr/bin/python3 test/ref/ckpt_tamper.py nan "$W/nan.h5" nan model/model.layers.0.mlp.up_proj.weight optim/exp_avg/lm_head.weight
/usr/bin/python3 test/ref/ckpt_tamper.py nan "$W/nan.h5" inf model/model.norm.weight
before=$(inputs_sum "$W/nan.h5")
expect_error "resuming NaN weights names the tensors and the file" \
    "checkpoint '$W/nan.h5' holds NaN or infinite values in 3 tensor\\(s\\): model/model.layers.0.mlp.up_proj.weight, model/model.norm.weight, optim/exp_avg/lm_head.weight" \
    ./fsdpc $SMALL --max_steps 4 --checkpoint_freq 0 --resume_from_checkpoint "$W/nan.h5"
expect_error "np=2: --init_from NaN weights, one line" "checkpoint '$W/nan.h5' holds NaN or infinite values in 2 tensor\\(s\\): model/model.layers.0.mlp.up_proj.weight, model/model.norm.weight \\(" \
    $MPI -np 2 ./fsdpc $SMALL --batch_size 2 --max_steps 4 --checkpoint_freq 0 --init_from "$W/nan.h5"
[ "$before" = "$(inputs_sum "$W/nan.h5")" ]
check "the NaN checkpoint is unchanged" $?
HF="--hidden 64 --layers 2 --heads 4 --kv_heads 2 --intermediate 128 --vocab 256 --context 64"
/usr/bin/python3 test/ref/hf_make.py "$W/hf" $HF >/dev/null && /usr/bin/python3 - "$W/hf/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    t = header["model.layers.1.self_attn.o_proj.weight"]
    assert t["dtype"] == "F32"
    f.seek(8 + n + t["data_offsets"][0] + 4 * 5)
    f.write(struct.pack("<f", float("nan")))
PY
expect_error "NaN in a safetensors model names the tensor" "'$W/hf' holds NaN or infinite values in 1 tensor\\(s\\): model.layers.1.self_attn.o_proj.weight" \
    ./fsdpc --max_steps 1 --checkpoint_freq 0 --num_tokens 0 --validation_freq 0 --batch_size 2 --init_from "$W/hf"
