#!/usr/bin/env bash
# Checkpoints fsdpc did not write (issue 34). A resume folder or file holding PyTorch's or Hugging
# Face's checkpoints, in the layouts the recipes write (10.FSDP's and SMP v2's Distributed
# Checkpoint step folders, SMP's tensor-parallel subfolders and per-rank .pt files, its final
# pytorch_model.bin, the profiling recipe's checkpoints/step_<N>_ckp folders and .pth files,
# torch.save files, safetensors, a Hugging Face folder), is refused with one line naming the kind,
# a file and the way on, at np=1 and np=2, before anything is written into it. A --checkpoint_dir
# holding files fsdpc did not write (source files) is refused naming them; fsdpc's own kinds of
# files, --run_name and --overwrite_checkpoints pass.
cd "$(dirname "$0")/../.."
source test/lib.sh
M="--hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 96 --max_context_width 32
   --num_tokens 0 --validation_freq 0 --num_threads 1 --batch_size 4"
PY=/usr/bin/python3
# every file and folder under DIR with its type, size, contents and the folders' times: a file
# created and removed again (a lock) changes its folder's time
listing() { (cd "$1" && find . -printf '%p %y %s\n' && find . -type d -printf '%p %T@\n' && find . -type f -exec sha256sum {} +) | sort; }
# refused NAME REGEX DIR ARGS...: fsdpc ARGS, at np=1 and at np=2, fails without a step with one
# error line matching REGEX, and DIR is as it was
refused() {
    local name=$1 re=$2 dir=$3 np rc lines
    shift 3
    listing "$dir" >"$W/before"
    for np in 1 2; do
        if [ $np = 1 ]; then timeout 60 ./fsdpc "$@" >"$W/out" 2>"$W/err"; else $MPI -np 2 ./fsdpc "$@" >"$W/out" 2>"$W/err"; fi
        rc=$?
        lines=$(grep -c '^fsdpc: error:' "$W/err")
        [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$lines" = 1 ] && grep -Eq -- "$re" "$W/err" && ! grep -q "^Batch " "$W/err" &&
            listing "$dir" | cmp -s "$W/before" -
        check "refused, np=$np: $name" $? "(rc=$rc, $lines error lines: $(grep -m2 error "$W/err" | head -c 500 | tr '\n' '|'))"
    done
}
# resumed NAME REGEX DIR: DIR as checkpoint dir = resume dir is refused
resumed() { refused "$1" "$2" "$3" $M --max_steps 2 --checkpoint_freq 1 --checkpoint_dir "$3" --resume_from_checkpoint "$3"; }
DCP="a PyTorch Distributed Checkpoint \(torch.distributed.checkpoint"
TORCH="PyTorch checkpoints \(torch.save"
EXPORT="export its weights with the recipe's own tools to a Hugging Face folder .* --init_from DIR$"

# The recipes' layouts. Debian's torch 1.13 cannot import torch.distributed._shard.checkpoint under
# Python 3.11, so the Distributed Checkpoint folders are written by name: .metadata (a pickle) and
# one __<rank>_0.distcp per rank (tensor bytes, no magic), as FileSystemWriter lays them out.
$PY - "$W" <<'EOF'
import os, pickle, sys
import torch
w = sys.argv[1]
state = {"model.embed_tokens.weight": torch.zeros(4, 4), "model.norm.weight": torch.ones(4)}

def dcp(d, ranks=2):
    os.makedirs(d, exist_ok=True)
    with open(d + "/.metadata", "wb") as f:
        pickle.dump({"state_dict_metadata": {k: list(v.shape) for k, v in state.items()}}, f, protocol=4)
    for r in range(ranks):
        with open(f"{d}/__{r}_0.distcp", "wb") as f:
            f.write(os.urandom(256))

# 10.FSDP (model_utils/checkpoint.py): <checkpoint_dir>/<model_type>-<N>steps/, a DCP folder
dcp(w + "/fsdp/llama_v2-100steps")
dcp(w + "/fsdp/llama_v2-200steps")
# SMP v2 sharded under tensor parallelism: <dir>/<model_type>-<N>steps/tp<T>-<tp rank>/
dcp(w + "/smp_tp/llama_v2-100steps/tp2-0")
dcp(w + "/smp_tp/llama_v2-100steps/tp2-1")
# SMP v2 local: <dir>/<model_type>-<N>steps/<rank>.pt
os.makedirs(w + "/smp_local/llama_v2-100steps")
for r in range(2):
    torch.save({"model": state, "total_steps": 100}, f"{w}/smp_local/llama_v2-100steps/{r}.pt")
# SMP v2's final model: <dir>/model/pytorch_model.bin and config.json
os.makedirs(w + "/smp_full/model")
torch.save(state, w + "/smp_full/model/pytorch_model.bin")
open(w + "/smp_full/model/config.json", "w").write('{"model_type": "llama"}\n')
# the profiling recipe: <ckpdir>/checkpoints/step_<N>_ckp/ (one .distcp per rank, metadata.pth)
# and the single-file step_<N>_ckp.pth
dcp(w + "/prof/checkpoints/step_100_ckp", 1)
torch.save({"step": 100}, w + "/prof/checkpoints/step_100_ckp/metadata.pth")
torch.save({"step": 200, "model_state": state}, w + "/prof/checkpoints/step_200_ckp.pth")
# torch.save's legacy pickle format, resumed by file
os.makedirs(w + "/legacy")
torch.save({"model_state_dict": state, "epoch": 3}, w + "/legacy/epoch_3.pt", _use_new_zipfile_serialization=False)
# shards told by their names alone
os.makedirs(w + "/named")
for n in ("model_0.pt", "optimizer_0.pth"):
    open(f"{w}/named/{n}", "w").write("not readable by torch either\n")
EOF
check "fixtures: the recipes' checkpoint layouts written" $?
/usr/bin/python3 test/ref/hf_make.py "$W/hf" --vocab 256 --context 32 >/dev/null &&
    /usr/bin/python3 test/ref/hf_make.py "$W/st" --vocab 256 --context 32 --no_config >/dev/null &&
    /usr/bin/python3 test/ref/hf_make.py "$W/st2" --vocab 256 --context 32 --no_config --shards 2 >/dev/null &&
    mkdir -p "$W/mix" && cp -r "$W/fsdp/llama_v2-100steps" "$W/hf" "$W/mix/"
check "fixtures: safetensors, sharded, a Hugging Face folder, one beside a DCP folder" $?

# ---- checkpoint dir = resume dir, holding what the recipe wrote ----
resumed "10.FSDP's step folders (Distributed Checkpoint)" \
    "checkpoint '$W/fsdp' holds $DCP.*'$W/fsdp/llama_v2-100steps/.metadata' and 5 more file\(s\), not fsdpc checkpoints .*$EXPORT" "$W/fsdp"
resumed "SMP v2's tensor-parallel folders two levels down" "'$W/smp_tp/llama_v2-100steps/tp2-0/.metadata' and 5 more file\(s\)" "$W/smp_tp"
resumed "SMP v2's per-rank local .pt shards" "holds $TORCH.*'$W/smp_local/llama_v2-100steps/0.pt' and 1 more file\(s\).*$EXPORT" "$W/smp_local"
resumed "SMP v2's final pytorch_model.bin beside config.json" "holds $TORCH.*'$W/smp_full/model/pytorch_model.bin'," "$W/smp_full"
resumed "the profiling recipe's checkpoints/step_<N>_ckp folders" "holds $DCP.*'$W/prof/checkpoints/step_100_ckp/.metadata' and 1 more file" "$W/prof"
resumed "shards known by their names only (model_0.pt, optimizer_0.pth)" "holds $TORCH.*'$W/named/model_0.pt' and 1 more file" "$W/named"
resumed "safetensors without a config.json" \
    "holds safetensors weights without a config.json: '$W/st/model.safetensors', .*start from them with --init_from '$W/st/model.safetensors'$" "$W/st"
resumed "sharded safetensors: the fix names the index" "'$W/st2/model-00001-of-00002.safetensors' and 2 more file\(s\), .*--init_from '$W/st2/model.safetensors.index.json'$" "$W/st2"
resumed "a Hugging Face folder" \
    "checkpoint '$W/hf' holds a Hugging Face model folder, '$W/hf' \(config.json and 1 safetensors file\(s\)\), .*start from its weights with --init_from '$W/hf'$" "$W/hf"
resumed "a Hugging Face folder beside a DCP step folder: the one --init_from reads is named" \
    "holds a Hugging Face model folder, '$W/mix/hf' .*--init_from '$W/mix/hf'$" "$W/mix"
refused "a torch.save file (legacy pickle) resumed by name" "checkpoint '$W/legacy/epoch_3.pt' holds $TORCH.*'$W/legacy/epoch_3.pt', not fsdpc" \
    "$W/legacy" $M --max_steps 2 --checkpoint_freq 1 --checkpoint_dir "$W/legacy/ck" --resume_from_checkpoint "$W/legacy/epoch_3.pt"
refused "a zip-format torch.save file (.pth) resumed by name" "holds $TORCH.*'$W/prof/checkpoints/step_200_ckp.pth'" \
    "$W/prof" $M --max_steps 2 --checkpoint_freq 1 --checkpoint_dir "$W/prof" --resume_from_checkpoint "$W/prof/checkpoints/step_200_ckp.pth"
refused "safetensors resumed by name" "holds safetensors weights .*--init_from '$W/st/model.safetensors'$" \
    "$W/st" $M --max_steps 2 --checkpoint_freq 0 --resume_from_checkpoint "$W/st/model.safetensors"
expect_error "export of a DCP folder" "checkpoint '$W/fsdp' holds $DCP" ./fsdpc export --checkpoint "$W/fsdp" --output "$W/fsdp.hf"
[ ! -e "$W/fsdp.hf" ]
check "... and no export folder was made" $?
./fsdpc --max_steps 1 --checkpoint_freq 0 --num_threads 1 --num_tokens 0 --validation_freq 0 --init_from "$W/hf" >/dev/null 2>"$W/init.err"
check "the Hugging Face folder's fix works: --init_from it trains" $? "$(grep -m1 error "$W/init.err")"

# ---- a --checkpoint_dir that holds what fsdpc did not write ----
refused "a PyTorch checkpoint folder as --checkpoint_dir only" \
    "--checkpoint_dir '$W/fsdp' holds $DCP.*, which fsdpc did not write; give fsdpc a folder of its own .* or pass --overwrite_checkpoints" \
    "$W/fsdp" $M --max_steps 2 --checkpoint_freq 1 --checkpoint_dir "$W/fsdp"
mkdir -p "$W/src" && cp ckpt/ckpt.[ch] ckpt/foreign.[ch] ckpt/validate.[ch] "$W/src/"  # a fixed set: the refusal names the first three
nsrc=$(ls "$W/src" | wc -l)
refused "a folder of source files" \
    "--checkpoint_dir '$W/src' holds $nsrc file\(s\) that fsdpc did not write and that are no checkpoints: ckpt.c, ckpt.h, foreign.c and $((nsrc - 3)) more; give fsdpc a folder of its own" \
    "$W/src" $M --max_steps 2 --checkpoint_freq 1 --checkpoint_dir "$W/src"
mkdir -p "$W/few" && touch "$W/few/notes.txt" "$W/few/b.py"
refused "two stray files are both named" "--checkpoint_dir '$W/few' holds 2 file\(s\) .*: b.py, notes.txt; give" \
    "$W/few" $M --max_steps 2 --checkpoint_freq 1 --checkpoint_dir "$W/few" --resume_from_checkpoint "$W/few"
(cd "$W/src" && sha256sum ./*) >"$W/src.sum"
./fsdpc $M --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/src" --overwrite_checkpoints >/dev/null 2>"$W/ow.err"
rc=$?
[ $rc = 0 ] && grep -q "^--overwrite_checkpoints: $W/src holds $nsrc file(s) that fsdpc did not write (ckpt.c, ckpt.h, foreign.c and" "$W/ow.err" &&
    [ -f "$W/src/step_00000002.h5" ] && (cd "$W/src" && sha256sum -c --quiet "$W/src.sum")
check "--overwrite_checkpoints writes beside them, logged, and leaves them as they were" $? "rc=$rc $(grep -m1 error "$W/ow.err")"
./fsdpc $M --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/few" --run_name r1 --resume_from_checkpoint "$W/few" >/dev/null 2>"$W/rn.err"
rc=$?
[ $rc = 0 ] && [ -f "$W/few/r1/step_00000002.h5" ] && grep -q "No checkpoint found in $W/few/r1, starting fresh" "$W/rn.err"
check "--run_name: checkpoint_dir/run_name is the folder checked, whatever its parent holds" $? "rc=$rc $(grep -m1 error "$W/rn.err")"

# what fsdpc writes, and what is its own, passes: checkpoints and other HDF5 files, another
# run's checkpoint being written, TensorBoard events, this run's metrics file and redirected
# stderr, hidden files (the lock, NFS's .nfs*), and subfolders
mkdir -p "$W/own/sub" && cp "$W/src/step_00000002.h5" "$W/own/best.h5" && cp "$W/src/step_00000002.h5" "$W/own/step_00000001.h5.0123456789abcdef.tmp" &&
    touch "$W/own/.nfs0000000000abcd00000001" "$W/own/.gitignore" "$W/own/events.out.tfevents.1700000000.node1" "$W/own/sub/notes.txt"
./fsdpc $M --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/own" --resume_from_checkpoint "$W/own" --metrics_file "$W/own/metrics.jsonl" \
    >/dev/null 2>"$W/own/train.log"
rc=$?
[ $rc = 0 ] && [ -f "$W/own/step_00000002.h5" ] && [ -s "$W/own/metrics.jsonl" ] && [ -f "$W/own/best.h5" ] && [ -f "$W/own/.nfs0000000000abcd00000001" ]
check "a folder of fsdpc's own kinds of files, this run's metrics file and its stderr passes" $? "rc=$rc $(grep -m1 error "$W/own/train.log")"
./fsdpc $M --max_steps 4 --checkpoint_freq 2 --checkpoint_dir "$W/own" --resume_from_checkpoint "$W/own" >/dev/null 2>"$W/own2.err"
rc=$?
[ $rc = 1 ] && grep -q "^fsdpc: error: --checkpoint_dir '$W/own' holds 2 file(s) that fsdpc did not write and that are no checkpoints: metrics.jsonl, train.log;" "$W/own2.err"
check "... which, left by an earlier run and not this one's outputs, are named" $? "rc=$rc $(grep -m1 error "$W/own2.err")"
./fsdpc $M --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/new/deeper" --resume_from_checkpoint "$W/new/deeper" >/dev/null 2>"$W/new.err"
check "a missing folder is created and used" $? "$(grep -m1 error "$W/new.err")"
