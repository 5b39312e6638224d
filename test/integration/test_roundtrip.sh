#!/usr/bin/env bash
# The finetune round trip keeps what --init_from read: a chat Llama (max_position_embeddings 256,
# rope_theta 500000, eos ids [2, 7], a chat_template with newlines, quotes and non-ASCII text) is
# finetuned at context 64 on 2 ranks, its directory removed, and the export still has the
# source's config values and tokenizer files; so does the export of a finetune of that export
# (through an .h5 --init_from and a resume). Without tokenizer files, export writes Llama 2's
# tokenizer_config.json. Checkpoints without /source still load and export.
cd "$(dirname "$0")/../.."
source test/lib.sh
PY=/usr/bin/python3
TOK=test/fixtures/tokenizer/tokenizer.model
RUN="--train_data synthetic --batch_size 2 --num_threads 1 --validation_freq 0 --num_tokens 0 --warmup 0"

$PY test/ref/hf_make.py "$W/src" --vocab 1000 --context 256 --rope_theta 500000 --chat --seed 5 >/dev/null &&
    cp "$TOK" "$W/src/" && cp -r "$W/src" "$W/src.orig" && mkdir -p "$W/tok" && cp "$TOK" "$W/tok/"
check "a chat Llama directory (config.json, tokenizer_config.json with a chat_template, special_tokens_map.json, generation_config.json, chat_template.jinja)" $?

# --tokenizer elsewhere: the import directory can go once the finetune is done
$MPI -np 2 ./fsdpc --init_from "$W/src" --tokenizer "$W/tok/tokenizer.model" --finetune $RUN --max_context_width 64 \
    --max_steps 2 --checkpoint_dir "$W/ft" --checkpoint_freq 2 >/dev/null 2>"$W/ft.log"
check "finetune at context 64 on 2 ranks from the import" $? "$(grep -m2 error "$W/ft.log")"
$PY - "$W/ft/step_00000002.h5" "$W/src" <<'EOF'
import os, sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["max_context_width"] == 64, f.attrs["max_context_width"]
    names = sorted(f["source"])
    for n in names:
        assert f["source"][n][()].tobytes() == open(os.path.join(sys.argv[2], n), "rb").read(), n
assert names == sorted(["config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
                        "chat_template.jinja"]), names
EOF
check "the checkpoint records the source's config.json and tokenizer files under /source, byte for byte" $?
rm -rf "$W/src"
./fsdpc export --checkpoint "$W/ft" --output "$W/exp1" --dtype fp32 >/dev/null 2>"$W/exp1.log" &&
    $PY test/ref/hf_read.py kept "$W/src.orig" "$W/exp1" && $PY test/ref/hf_read.py export "$W/exp1" "$W/ft/step_00000002.h5" fp32
check "with the import directory gone, export keeps max_position_embeddings 256, rope_theta 5e5, the ids and the tokenizer files" $? \
    "$(tail -c 300 "$W/exp1.log")"
grep -q '"max_position_embeddings": 256,' "$W/exp1/config.json" && grep -q '"eos_token_id": \[2, 7\],' "$W/exp1/config.json" &&
    grep -q '"pad_token_id": 0,' "$W/exp1/config.json" && grep -q '"rope_theta": 500000,' "$W/exp1/config.json"
check "config.json: 256 positions (trained at 64), eos_token_id [2, 7], pad_token_id 0, rope_theta 500000" $?
$PY - "$W/src.orig" "$W/exp1" <<'EOF'
import json, os, sys
a, b = (json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8")) for d in sys.argv[1:])
assert a == b and "\n" in b["chat_template"] and '"' in b["chat_template"] and "日本語" in b["chat_template"]
for k in ("bos_token", "eos_token", "pad_token", "unk_token", "add_bos_token", "add_eos_token", "added_tokens_decoder"):
    assert a[k] == b[k], k
EOF
check "tokenizer_config.json: chat_template (newlines, quotes, unicode) and special tokens equal the source's" $?

# chained: that export -> finetune -> checkpoint -> --init_from the .h5 -> resume -> export
$MPI -np 2 ./fsdpc --init_from "$W/exp1" --finetune $RUN --max_context_width 32 --max_steps 2 --checkpoint_dir "$W/ft2" \
    --checkpoint_freq 2 >/dev/null 2>"$W/ft2.log"
./fsdpc --init_from "$W/ft2/step_00000002.h5" $RUN --max_context_width 32 --max_steps 2 --checkpoint_dir "$W/ft3" \
    --checkpoint_freq 2 >/dev/null 2>"$W/ft3.log"
./fsdpc --resume_from_checkpoint "$W/ft3" $RUN --max_context_width 32 --max_steps 4 --checkpoint_dir "$W/ft3" \
    --checkpoint_freq 2 >/dev/null 2>>"$W/ft3.log"
[ -f "$W/ft3/step_00000004.h5" ] && ./fsdpc export --checkpoint "$W/ft3" --output "$W/exp2" >/dev/null 2>"$W/exp2.log" &&
    $PY test/ref/hf_read.py kept "$W/src.orig" "$W/exp2" && $PY test/ref/hf_read.py kept "$W/exp1" "$W/exp2" &&
    $PY test/ref/hf_read.py export "$W/exp2" "$W/ft3/step_00000004.h5" bf16
check "chained (export -> finetune -> .h5 --init_from -> resume -> export): the same values and files" $? \
    "$(grep -m2 error "$W/ft2.log" "$W/ft3.log" "$W/exp2.log")"
./fsdpc --init_from "$W/exp2" $RUN --max_steps 0 >"$W/reload.log" 2>&1
check "the second export reloads with --init_from" $? "$(grep -m2 error "$W/reload.log")"

# without tokenizer files: Llama 2's SentencePiece tokenizer_config.json, kept from then on
$PY test/ref/hf_make.py "$W/bare" --vocab 1000 --context 256 --rope_theta 1000000 --seed 6 >/dev/null && cp "$TOK" "$W/bare/"
./fsdpc --init_from "$W/bare" $RUN --max_context_width 64 --max_steps 1 --checkpoint_dir "$W/fb" --checkpoint_freq 1 \
    >/dev/null 2>&1 && ./fsdpc export --checkpoint "$W/fb" --output "$W/expb" >/dev/null 2>&1 &&
    $PY test/ref/hf_read.py kept "$W/bare" "$W/expb" && grep -q '"rope_theta": 1e+06,' "$W/expb/config.json" &&
    [ ! -e "$W/expb/special_tokens_map.json" ]
check "no tokenizer_config.json in the import: export writes Llama 2's (model_max_length 256), rope_theta 1e6 kept" $?
./fsdpc --init_from "$W/expb" $RUN --max_context_width 32 --max_steps 1 --checkpoint_dir "$W/fb2" --checkpoint_freq 1 \
    >/dev/null 2>&1 && ./fsdpc export --checkpoint "$W/fb2" --output "$W/expb2" >/dev/null 2>&1 &&
    cmp -s "$W/expb/tokenizer_config.json" "$W/expb2/tokenizer_config.json" && $PY test/ref/hf_read.py kept "$W/expb" "$W/expb2"
check "that tokenizer_config.json survives a further round trip byte for byte" $?

# a model trained longer than its source's length exports the length it trained at
$PY test/ref/hf_make.py "$W/short" --vocab 256 --context 32 --seed 7 >/dev/null
./fsdpc --init_from "$W/short" $RUN --max_context_width 64 --max_steps 1 --checkpoint_dir "$W/fs" --checkpoint_freq 1 \
    >/dev/null 2>&1 && ./fsdpc export --checkpoint "$W/fs" --output "$W/exps" >/dev/null 2>&1 &&
    grep -q '"max_position_embeddings": 64,' "$W/exps/config.json" && [ ! -e "$W/exps/tokenizer_config.json" ]
check "source length 32, trained at 64: max_position_embeddings 64; the byte tokenizer writes no tokenizer_config.json" $?

# checkpoints from before /source: they load and export as before (the length they trained at)
$PY -c 'import h5py, sys; f = h5py.File(sys.argv[1], "a"); del f["source"]' "$W/ft/step_00000002.h5"
./fsdpc export --checkpoint "$W/ft/step_00000002.h5" --output "$W/exp_old" >/dev/null 2>&1 &&
    grep -q '"max_position_embeddings": 64,' "$W/exp_old/config.json" && grep -q '"eos_token_id": 2,' "$W/exp_old/config.json" &&
    $PY test/ref/hf_read.py export "$W/exp_old" "$W/ft/step_00000002.h5" bf16
check "a checkpoint without /source exports with its own context and the tokenizer's ids" $?
./fsdpc --resume_from_checkpoint "$W/ft/step_00000002.h5" $RUN --max_steps 3 --checkpoint_dir "$W/old" --checkpoint_freq 3 \
    >/dev/null 2>"$W/old.log" && [ -f "$W/old/step_00000003.h5" ]
check "a checkpoint without /source resumes" $? "$(grep -m2 error "$W/old.log")"

# a hostile /source: one error line naming the checkpoint and the dataset
cp "$W/fb/step_00000001.h5" "$W/bad.h5"
$PY -c 'import h5py, numpy, sys; f = h5py.File(sys.argv[1], "a"); del f["source/config.json"]; f["source/config.json"] = numpy.zeros((2, 3), "f4")' "$W/bad.h5"
expect_error "export: a /source dataset that is not bytes" "checkpoint '.*bad.h5': /source/config.json is not a 1-D byte dataset" \
    ./fsdpc export --checkpoint "$W/bad.h5" --output "$W/x"
expect_error "resume: a /source dataset that is not bytes" "/source/config.json is not a 1-D byte dataset" \
    $MPI -np 2 ./fsdpc --resume_from_checkpoint "$W/bad.h5" $RUN --max_steps 2
cp "$W/fb/step_00000001.h5" "$W/bad2.h5"
$PY -c 'import h5py, numpy, sys; f = h5py.File(sys.argv[1], "a"); del f["source/config.json"]; f["source/config.json"] = numpy.frombuffer(b"{\"max_position_embeddings\": -3}", "u1")' "$W/bad2.h5"
expect_error "export: a recorded config.json with a bad length" "bad2.h5:/source/config.json': max_position_embeddings must be a positive integer" \
    ./fsdpc export --checkpoint "$W/bad2.h5" --output "$W/x"
