#!/usr/bin/env bash
# Hugging Face weights in and out: --init_from safetensors (file, index + shards, directory, hub
# name) against the PyTorch reference, exact bf16/fp16 widening, layout-independence, peak memory,
# bad files refused on every rank; `fsdpc export` read back with numpy alone, and round trips.
cd "$(dirname "$0")/../.."
source test/lib.sh
PY=/usr/bin/python3
ONE="--num_threads 1 --checkpoint_freq 0 --validation_freq 0"
GEN="--max_steps 0 --allow_random_weights --prompt Hello --num_tokens 24 --temperature 0 $ONE"
# --lr 0: one step that leaves the weights as loaded, so its checkpoint shows what was imported
KEEP="--max_steps 1 --lr 0 --min_lr 0 --warmup 0 --train_data synthetic --batch_size 1 --num_threads 1 --validation_freq 0 --checkpoint_freq 1"

# random Llamas (D=64, H=4, KV=2, F=128, L=2, T=64); V=256 where generation is compared, so every
# token prints as a byte
$PY test/ref/hf_make.py "$W/g32" --vocab 256 --seed 1
$PY test/ref/hf_make.py "$W/g16" --vocab 256 --seed 2 --dtype bf16 --shards 3 --inv_freq
$PY test/ref/hf_make.py "$W/gh" --vocab 256 --seed 3 --dtype fp16 --tied
$PY test/ref/hf_make.py "$W/l32" --vocab 1000 --seed 4
mkdir -p "$W/bare" "$W/hub/hub/models--test-org--tiny-llama/snapshots/0123abc" "$W/hub/hub/models--test-org--tiny-llama/refs"
cp "$W/g32/model.safetensors" "$W/bare/"
for f in config.json model.safetensors; do ln -s "$W/g32/$f" "$W/hub/hub/models--test-org--tiny-llama/snapshots/0123abc/$f"; done
echo 0123abc >"$W/hub/hub/models--test-org--tiny-llama/refs/main"
$PY test/ref/hf_ref.py generate Hello 24 "$W/g32" "$W/ref.g32" "$W/g16" "$W/ref.g16" "$W/gh" "$W/ref.gh"

# ---- weights in: greedy generation equals the reference on the same weights ----
gen() {  # gen OUT FSDPC-ARGS...: greedy text of ./fsdpc (np=1 unless the args start with mpirun's)
    local out=$1
    shift
    "$@" $GEN >"$W/gen.$out" 2>"$W/gen.$out.log"
}
gen g32 ./fsdpc --init_from "$W/g32"
cmp -s "$W/gen.g32" "$W/ref.g32" && [ "$(wc -c <"$W/gen.g32")" -gt 5 ]
check "fp32 model.safetensors + config.json: greedy text equals the PyTorch reference" $? "$(od -c "$W/gen.g32" | head -2 | tr '\n' '|')"
gen g16 ./fsdpc --init_from "$W/g16/model.safetensors.index.json"
cmp -s "$W/gen.g16" "$W/ref.g16"
check "bf16, index with 3 shards and rotary_emb.inv_freq buffers: greedy text equals the reference" $?
gen gh ./fsdpc --init_from "$W/gh"
cmp -s "$W/gen.gh" "$W/ref.gh"
check "fp16 with tied embeddings (trained tied: lm_head is the embedding), greedy text equals the reference" $?
gen g16np2 $MPI -np 2 ./fsdpc --init_from "$W/g16" --sharding full-shard
gen g16np4 $MPI -np 4 ./fsdpc --init_from "$W/g16" --sharding full-shard
cmp -s "$W/gen.g16np2" "$W/ref.g16" && cmp -s "$W/gen.g16np4" "$W/ref.g16"
check "np=2 and np=4 full-shard (each rank reads its slices) generate what np=1 does" $?
gen bare ./fsdpc --init_from "$W/bare/model.safetensors" --num_heads 4 --num_key_value_heads 2 --max_context_width 64
cmp -s "$W/gen.bare" "$W/ref.g32"
check "a bare .safetensors (no config.json): sizes from the shapes, heads from the flags" $?
HF_HOME="$W/hub" gen hub ./fsdpc --init_from test-org/tiny-llama
cmp -s "$W/gen.hub" "$W/ref.g32"
check "a hub name resolves in the local cache (HF_HOME, refs/main, symlinked files)" $?

# ---- exact values: bf16/fp16 widen to the very fp32 values (checkpoint of a --lr 0 step) ----
$MPI -np 2 ./fsdpc --init_from "$W/g16" $KEEP --checkpoint_dir "$W/k16" >/dev/null 2>&1
$PY test/ref/hf_read.py same "$W/g16" "$W/k16/step_00000001.h5"
check "np=2: bf16 shards load to exactly their fp32 values" $?
$MPI -np 4 ./fsdpc --init_from "$W/gh" $KEEP --checkpoint_dir "$W/kh" >/dev/null 2>&1
$PY test/ref/hf_read.py same "$W/gh" "$W/kh/step_00000001.h5"
check "np=4: fp16 (tied) loads to exactly its fp32 values, lm_head equal to the embedding" $?
./fsdpc --init_from "$W/g32" $KEEP --checkpoint_dir "$W/k32" >/dev/null 2>&1
$PY test/ref/hf_read.py same "$W/g32" "$W/k32/step_00000001.h5"
check "fp32 loads bit for bit" $?

# ---- loss parity: the first step's loss equals the reference's on the same weights and tokens ----
# 4 samples of T=64 tokens, one global batch: its mean loss does not depend on the sample order
head -c 257 data/tinyshakespeare.txt >"$W/four.txt"
ref_loss=$($PY test/ref/hf_ref.py loss "$W/l32" "$W/four.txt")
STEP="--train_data $W/four.txt --max_steps 1 --sharding full-shard $ONE"
./fsdpc --init_from "$W/l32" $STEP --batch_size 4 --metrics_file "$W/l1.jsonl" >/dev/null 2>&1
$MPI -np 2 ./fsdpc --init_from "$W/l32" $STEP --batch_size 2 --metrics_file "$W/l2.jsonl" >/dev/null 2>&1
$MPI -np 4 ./fsdpc --init_from "$W/l32" $STEP --batch_size 1 --metrics_file "$W/l4.jsonl" >/dev/null 2>&1
loss_ok() { awk -v a="$(losses "$1")" -v b="$ref_loss" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5) }'; }
loss_ok "$W/l1.jsonl"
st=$?
check "np=1 first-step loss $(losses "$W/l1.jsonl") equals the reference's $ref_loss within 1e-5" $st
loss_ok "$W/l2.jsonl" && loss_ok "$W/l4.jsonl" && rel_diff "$W/l1.jsonl" "$W/l2.jsonl" 1 1e-6 >/dev/null &&
    rel_diff "$W/l1.jsonl" "$W/l4.jsonl" 1 1e-6 >/dev/null
check "np=2 and np=4 full-shard loads give np=1's loss" $?
# an fsdpc checkpoint as --init_from: weights only
./fsdpc --init_from "$W/l32" $KEEP --checkpoint_dir "$W/kl" >/dev/null 2>&1
./fsdpc --init_from "$W/kl/step_00000001.h5" $STEP --batch_size 4 --metrics_file "$W/lh5.jsonl" >"$W/lh5.out" 2>&1
cmp -s <(losses "$W/lh5.jsonl") <(losses "$W/l1.jsonl")
check "--init_from an fsdpc .h5 (weights only) gives the imported model's loss" $?

# ---- peak memory: a rank holds its own slices, never the file ----
# Two bf16 files, 2 and 12 layers (D=512, F=2048): the larger has ~84 MB more data, of which each
# of 2 ranks owns half, widened to fp32 (~84 MB). A reader that held the file (or even one rank's
# tensors whole) would add that much again. Peak RSS per rank from /usr/bin/time, each rank's into
# its own file (on one stream the two ranks' reports can interleave mid-line).
for L in 2 12; do
    $PY test/ref/hf_make.py "$W/mem$L" --dtype bf16 --hidden 512 --heads 8 --kv_heads 8 --intermediate 2048 --vocab 256 --layers $L
    $MPI -np 2 sh -c '/usr/bin/time -f "peak_kb %M" -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$W/mem$L.peak" \
        ./fsdpc --init_from "$W/mem$L" --meta_init --max_steps 0 --num_tokens 0 $ONE >/dev/null 2>"$W/mem$L.log"
done
peak() { cat "$1".* | sed -n 's/^peak_kb //p' | sort -n | tail -1; }
awk -v a="$(peak "$W/mem2.peak")" -v b="$(peak "$W/mem12.peak")" -v fa="$(stat -c %s "$W/mem2/model.safetensors")" \
    -v fb="$(stat -c %s "$W/mem12/model.safetensors")" 'BEGIN {
    grow = (b - a) / 1024; file = (fb - fa) / 1048576; own = file  # MiB; bf16 -> fp32 doubles, 2 ranks halve
    printf "+%.0f MiB of file, +%.0f MiB owned per rank, peak +%.0f MiB (%.0f -> %.0f)", file, own, grow, a / 1024, b / 1024
    exit !(a > 0 && b > 0 && grow < own + 0.2 * file) }' >"$W/mem.txt"
st=$?
check "peak RSS per rank grows with its own slices only: $(cat "$W/mem.txt")" $st
rm -rf "$W/mem2" "$W/mem12"

# ---- weights out: fsdpc export ----
$MPI -np 2 ./fsdpc --init_from "$W/g32" --max_steps 2 --lr 1e-4 --warmup 0 --batch_size 2 --train_data synthetic \
    --checkpoint_dir "$W/ck" --checkpoint_freq 2 --num_threads 1 --validation_freq 0 >/dev/null 2>&1
CK="$W/ck/step_00000002.h5"
for dt in fp32 fp16; do
    ./fsdpc export --checkpoint "$W/ck" --output "$W/out_$dt" --dtype $dt >/dev/null 2>&1 && $PY test/ref/hf_read.py export "$W/out_$dt" "$CK" $dt
    check "export --dtype $dt: headers, config.json and every tensor match the checkpoint (read with numpy + json)" $?
done
./fsdpc export --checkpoint "$CK" --output "$W/out_bf16" >/dev/null 2>&1 && $PY test/ref/hf_read.py export "$W/out_bf16" "$CK" bf16
check "export defaults to bf16: every tensor the round-to-nearest-even of the checkpoint's fp32" $?
./fsdpc export --checkpoint "$CK" --output "$W/out_sh" --dtype fp32 --max_shard_size 60000 >/dev/null 2>&1 &&
    $PY test/ref/hf_read.py export "$W/out_sh" "$CK" fp32 && [ "$(ls "$W/out_sh" | grep -c '^model-0000[0-9]-of-0000[0-9].safetensors$')" -ge 3 ] &&
    $PY test/ref/hf_read.py same "$W/out_sh" "$W/out_fp32"
check "export --max_shard_size: several shards plus model.safetensors.index.json, equal to the single file" $? "$(ls "$W/out_sh" | tr '\n' ' ')"
$MPI -np 2 ./fsdpc export --checkpoint "$W/ck" --output "$W/out_np2" --dtype fp32 >/dev/null 2>&1 &&
    cmp -s "$W/out_np2/model.safetensors" "$W/out_fp32/model.safetensors" && cmp -s "$W/out_np2/config.json" "$W/out_fp32/config.json"
check "export under mpirun -np 2 writes the same files" $?
./fsdpc --resume_from_checkpoint "$CK" $GEN >"$W/ck.gen" 2>/dev/null
$PY test/ref/hf_ref.py generate Hello 24 "$W/out_fp32" "$W/ref.out"
cmp -s "$W/ck.gen" "$W/ref.out" && [ "$(wc -c <"$W/ck.gen")" -gt 5 ]
check "the reference's greedy text on the exported directory equals fsdpc's on the checkpoint" $?
gen reimport ./fsdpc --init_from "$W/out_fp32"
cmp -s "$W/gen.reimport" "$W/ck.gen"
check "an exported directory imports back to the same model" $?
./fsdpc export --checkpoint "$W/k32" --output "$W/rt32" --dtype fp32 >/dev/null 2>&1 && $PY test/ref/hf_read.py same "$W/g32" "$W/rt32"
check "round trip: import fp32 -> export fp32 gives the source's tensors bit for bit" $?
./fsdpc export --checkpoint "$W/k16" --output "$W/rt16" --dtype bf16 >/dev/null 2>&1 && $PY test/ref/hf_read.py same "$W/g16" "$W/rt16"
check "round trip: import bf16 shards -> export bf16 gives the source's values bit for bit" $?

# the tokenizer beside the weights is recorded in checkpoints and copied by export (bos/eos 1/2)
cp -r "$W/l32" "$W/lt" && cp test/fixtures/tokenizer/tokenizer.model "$W/lt/"
./fsdpc --init_from "$W/lt" $KEEP --checkpoint_dir "$W/kt" >/dev/null 2>&1
./fsdpc export --checkpoint "$W/kt" --output "$W/out_tok" >/dev/null 2>&1 && $PY test/ref/hf_read.py export "$W/out_tok" "$W/kt/step_00000001.h5" bf16 &&
    cmp -s "$W/out_tok/tokenizer.model" test/fixtures/tokenizer/tokenizer.model &&
    grep -q '"bos_token_id": 1,' "$W/out_tok/config.json" && grep -q '"eos_token_id": 2,' "$W/out_tok/config.json"
check "export copies the checkpoint's tokenizer.model and names bos/eos 1/2" $?
grep -q '"bos_token_id": null' "$W/out_fp32/config.json"
check "byte-tokenizer export leaves bos/eos null" $?

# ---- export errors: one line on every rank, nothing that looks complete left behind ----
expect_error "export: missing checkpoint" "checkpoint '$W/nope' does not exist" ./fsdpc export --checkpoint "$W/nope" --output "$W/x"
mkdir -p "$W/emptyck"
expect_error "export: directory without checkpoints" "no checkpoint in '$W/emptyck'" ./fsdpc export --checkpoint "$W/emptyck" --output "$W/x"
$PY -c 'import h5py, sys; h5py.File(sys.argv[1], "w").attrs["format"] = "other"' "$W/other.h5"
expect_error "export: not an fsdpc checkpoint" "is not an fsdpc checkpoint" ./fsdpc export --checkpoint "$W/other.h5" --output "$W/x"
head -c 3000 "$CK" >"$W/trunc.h5"
expect_error "export: truncated checkpoint" "cannot open checkpoint '$W/trunc.h5'" ./fsdpc export --checkpoint "$W/trunc.h5" --output "$W/x"
touch "$W/afile"
expect_error "export: output under a file" "--output '$W/afile/out': '$W/afile' is a file, not a folder" ./fsdpc export --checkpoint "$CK" --output "$W/afile/out"
expect_error "export: unknown --dtype" "--dtype must be one of bf16.fp16.fp32, got 'int8'" ./fsdpc export --checkpoint "$CK" --output "$W/x" --dtype int8
expect_error "export: no --output" "usage: fsdpc export" ./fsdpc export --checkpoint "$CK"
mkdir -p "$W/tokdir" && cp test/fixtures/tokenizer/tokenizer.model "$W/tokdir/"
./fsdpc --init_from "$W/l32" --tokenizer "$W/tokdir/tokenizer.model" $KEEP --checkpoint_dir "$W/kgone" >/dev/null 2>&1
rm "$W/tokdir/tokenizer.model"
expect_error "np=2 export: the checkpoint's tokenizer is gone" "tokenizer is gone: '$W/tokdir/tokenizer.model' does not exist" \
    $MPI -np 2 ./fsdpc export --checkpoint "$W/kgone" --output "$W/out_gone"
[ ! -e "$W/out_gone" ]
check "a tokenizer that is gone stops export before it writes anything" $?
mkdir -p "$W/out_fail/model.safetensors/x"  # the weights cannot be published: the other files already were
expect_error "export: a file that cannot be published" "cannot rename '$W/out_fail/model.safetensors.[0-9a-f]+.tmp' to '$W/out_fail/model.safetensors'" \
    ./fsdpc export --checkpoint "$CK" --output "$W/out_fail" --overwrite
[ "$(ls -A "$W/out_fail")" = "model.safetensors" ]
check "a failed export leaves no config.json or partial files" $? "$(ls -A "$W/out_fail" | tr '\n' ' ')"

# ---- bad sources: one line naming the file or tensor, on every rank ----
$PY - "$W" <<'PY'
import json, os, shutil, struct, sys
sys.path.insert(0, "test/ref")
import numpy as np
from hf_make import write_safetensors
from hf_read import read_source

W = sys.argv[1]
good = read_source(W + "/l32")
cfg = json.load(open(W + "/l32/config.json"))


def case(name, tensors=None, config=cfg, raw=None):
    d = f"{W}/bad_{name}"
    os.makedirs(d)
    if config is not None:
        with open(d + "/config.json", "w") as f:
            f.write(config if isinstance(config, str) else json.dumps(config))
    if raw is not None:
        open(d + "/model.safetensors", "wb").write(raw)
    elif tensors is not None:
        write_safetensors(d + "/model.safetensors", tensors, "F32")


def with_header(header, data=b""):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


full = open(W + "/l32/model.safetensors", "rb").read()
case("trunc", raw=full[: len(full) // 2])
case("hdrlen", raw=struct.pack("<Q", 10**9) + b"{}" * 8)
n = struct.unpack("<Q", full[:8])[0]
h = json.loads(full[8 : 8 + n])
h["model.norm.weight"]["data_offsets"] = [0, 10**12]
case("offsets", raw=with_header(h, full[8 + n :]))
h = json.loads(full[8 : 8 + n])
h["model.norm.weight"]["data_offsets"] = h["model.layers.0.input_layernorm.weight"]["data_offsets"]
case("overlap", raw=with_header(h, full[8 + n :]))
case("shape", good, dict(cfg, intermediate_size=96))
t = dict(good)
del t["model.layers.1.mlp.up_proj.weight"]
case("missing", t)
header, blobs, off = {}, [], 0
for k, x in good.items():  # one tensor in F64, the others F32
    dt = "F64" if k == "model.layers.1.self_attn.v_proj.weight" else "F32"
    b = x.astype({"F32": "<f4", "F64": "<f8"}[dt]).tobytes()
    header[k] = {"dtype": dt, "shape": list(x.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
case("f64", raw=with_header(header, b"".join(blobs)))
case("q4", raw=with_header({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 1]}}, b"\0"))
case("gpt2", good, dict(cfg, architectures=["GPT2LMHeadModel"], model_type="gpt2"))
case("rope", good, dict(cfg, rope_scaling={"type": "linear", "factor": 2.0}))
case("badjson", good, '{"hidden_size": 64,')
case("badheader", raw=struct.pack("<Q", 8) + b"{not j  ")
case("noweights", config=cfg)
shutil.copytree(W + "/g16", W + "/bad_shard")
os.remove(W + "/bad_shard/model-00002-of-00003.safetensors")
PY
B="$W/bad"
expect_error "truncated safetensors" "bad_trunc/model.safetensors': tensor .* outside the file's .* data bytes \(truncated file\?\)" ./fsdpc --init_from "$B"_trunc $GEN
expect_error "np=2: truncated safetensors" "bad_trunc/model.safetensors': tensor .* outside the file" $MPI -np 2 ./fsdpc --init_from "$B"_trunc $GEN
expect_error "header length past the end of the file" "bad_hdrlen/model.safetensors': header length 1000000000 runs past the end of the file" ./fsdpc --init_from "$B"_hdrlen $GEN
expect_error "data_offsets outside the file" "tensor model.norm.weight has data_offsets \[0, 1000000000000\] outside" ./fsdpc --init_from "$B"_offsets $GEN
expect_error "overlapping data_offsets" "tensors .* and .* overlap" ./fsdpc --init_from "$B"_overlap $GEN
# weights that cannot load: an evaluation (no --prompt: this model's vocabulary needs a tokenizer for text)
EVAL="--max_steps 0 --num_tokens 0 $ONE"
expect_error "shape mismatch vs config.json" "tensor model.layers.0.mlp.gate_proj.weight in '.*bad_shape/model.safetensors' has shape \[128,64\] but the model config needs \[96,64\]" \
    ./fsdpc --init_from "$B"_shape $EVAL
expect_error "missing tensor" "tensor model.layers.1.mlp.up_proj.weight is missing from '${B}_missing" ./fsdpc --init_from "$B"_missing $EVAL
expect_error "np=2: missing tensor" "tensor model.layers.1.mlp.up_proj.weight is missing" $MPI -np 2 ./fsdpc --init_from "$B"_missing $EVAL
expect_error "unsupported dtype F64" "tensor model.layers.1.self_attn.v_proj.weight in '.*bad_f64/model.safetensors' has dtype F64; fsdpc loads F32, BF16 and F16" \
    ./fsdpc --init_from "$B"_f64 $EVAL
expect_error "unknown dtype" "bad_q4/model.safetensors': tensor w has unknown dtype 'Q4'" ./fsdpc --init_from "$B"_q4 $EVAL
expect_error "index naming a missing shard" "names shard 'model-00002-of-00003.safetensors', which does not exist" ./fsdpc --init_from "$B"_shard $GEN
expect_error "non-Llama config.json" "bad_gpt2/config.json' describes a GPT2LMHeadModel model" ./fsdpc --init_from "$B"_gpt2 $GEN
expect_error "rope_scaling refused" "bad_rope/config.json' sets rope_scaling" ./fsdpc --init_from "$B"_rope $GEN
expect_error "invalid config.json" "invalid model config: .*bad_badjson/config.json" ./fsdpc --init_from "$B"_badjson $GEN
expect_error "invalid header JSON" "bad_badheader/model.safetensors': invalid JSON header: line 1" ./fsdpc --init_from "$B"_badheader $GEN
expect_error "a directory without weights" "holds neither model.safetensors nor model.safetensors.index.json" ./fsdpc --init_from "$B"_noweights $GEN
mkdir -p "$W/emptyhf"
HF_HOME="$W/emptyhf" expect_error "hub name not in the cache" "'nobody/no-model' is neither a file nor in the Hugging Face cache" \
    ./fsdpc --init_from nobody/no-model $GEN

# ---- rope_parameters, newer transformers' spelling: rope_theta read from it when the top-level
# key is absent; a rope_type fsdpc does not implement is refused by name, in either spelling ----
$PY test/ref/hf_make.py "$W/rp" --vocab 256 --seed 7 --rope_theta 500000 >/dev/null
$PY - "$W/rp" <<'PY'
import json, os, shutil, sys
d = sys.argv[1]
cfg = json.load(open(d + "/config.json"))
theta = cfg.pop("rope_theta")
cfg.pop("rope_scaling")
def variant(name, params, **extra):
    os.makedirs(d + "_" + name)
    shutil.copy(d + "/model.safetensors", d + "_" + name)
    json.dump(dict(cfg, rope_parameters=params, **extra), open(d + "_" + name + "/config.json", "w"))
variant("params", {"rope_theta": theta, "rope_type": "default"})
for t in ("linear", "yarn"):  # llama3: test_llama3.sh
    variant(t, {"rope_theta": theta, "rope_type": t, "factor": 8.0})
variant("scaling", {"rope_theta": theta, "rope_type": "default"}, rope_scaling={"rope_type": "yarn", "factor": 4.0})
variant("badtheta", {"rope_theta": "big", "rope_type": "default"})
PY
./fsdpc --init_from "$W/rp_params" $KEEP --checkpoint_dir "$W/krp" >"$W/krp.log" 2>&1
$PY -c "import h5py, sys; sys.exit(float(h5py.File(sys.argv[1], 'r').attrs['rope_theta']) != 500000)" "$W/krp/step_00000001.h5"
check "rope_parameters {rope_theta 5e5, rope_type default} without a top-level rope_theta: the model has rope_theta 500000" $? \
    "$(tail -c 300 "$W/krp.log")"
for t in linear yarn; do
    expect_error "rope_parameters of rope_type $t refused by name" \
        "rp_$t/config.json' sets rope_parameters with rope_type $t, which fsdpc does not implement" ./fsdpc --init_from "$W/rp_$t" $GEN
done
expect_error "rope_scaling of rope_type yarn refused by name beside a default rope_parameters" \
    "rp_scaling/config.json' sets rope_scaling with rope_type yarn, which fsdpc does not support" ./fsdpc --init_from "$W/rp_scaling" $GEN
expect_error "rope_parameters with a rope_theta that is no number" "rp_badtheta/config.json': rope_parameters.rope_theta must be a positive number" \
    ./fsdpc --init_from "$W/rp_badtheta" $GEN
