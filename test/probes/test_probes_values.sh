#!/usr/bin/env bash
# Issue 39, classes 5 and 6. Class 5: counts of zero and values that mean nothing: a string flag
# given empty (a job script's unset variable) is refused by name; a numeric flag outside its sane
# range is refused naming the range (an int's overflow too); counts at 0, 1 and their largest
# value; a validation where no target bears loss says nothing was validated; a run that trains no
# step says when it evaluates nothing, and refuses a resume folder that holds no checkpoint;
# --max_epochs beside --max_steps says which wins. Class 6: export refuses a --dtype that turns
# weights into infinity (fp16 beyond 65504, bf16 near fp32's limit), naming the tensors, unless
# --accept_lossy. Each refusal: one error line, a non-zero exit, inputs and earlier outputs unchanged.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="values: "
SHAPE="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64"
SMALL="$SHAPE --batch_size 4 --num_tokens 0 --num_threads 1 --logging_freq 1 --validation_freq 0"
T="$SMALL --max_steps 1 --checkpoint_freq 0"

# inputs: text data, a checkpoint, and one whose embedding holds values fp16 and bf16 cannot
head -c 20000 data/tinyshakespeare.txt >"$W/d.txt"
./fsdpc $SMALL --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/ck" --train_data "$W/d.txt" >/dev/null 2>&1
/usr/bin/python3 test/ref/hf_make.py "$W/hf" --hidden 64 --layers 2 --heads 4 --kv_heads 2 --intermediate 128 --vocab 256 \
    --context 64 >/dev/null
# rows of tokens the text never holds, so training leaves them as they are: 1e5 (beyond fp16's
# 65504) in row 255, 3.3999e38 (rounds past bf16's largest finite value) in row 254
/usr/bin/python3 - "$W/hf/model.safetensors" <<'EOF'
import json, struct, sys
import numpy as np
with open(sys.argv[1], 'r+b') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    t = json.loads(f.read(n))['model.embed_tokens.weight']
    cols = t['shape'][1]
    for row, v in ((255, 1e5), (254, 3.3999e38)):
        f.seek(8 + n + t['data_offsets'][0] + row * cols * 4)
        f.write(np.full(cols, v, dtype='<f4').tobytes())
EOF
./fsdpc --init_from "$W/hf" --tokenizer byte --train_data "$W/d.txt" --max_steps 1 --batch_size 2 --checkpoint_freq 1 \
    --checkpoint_dir "$W/big" --num_tokens 0 --num_threads 1 --lr 1e-6 --min_lr 0 >/dev/null 2>&1
CK="$W/ck/step_00000002.h5"
BIG="$W/big/step_00000001.h5"
INPUTS=("$W/d.txt" "$CK" "$BIG")
sha256sum "${INPUTS[@]}" >"$W/inputs.sha"


# ---- empty values: refused by name, never the flag's default ----
for f in train_data val_data resume_from_checkpoint init_from init_adapter metrics_file tensorboard_dir trace_file trace_dir \
    data_cache_dir checkpoint_dir tokenizer prompt run_name text_column; do
    refused_unchanged "--$f '' is refused by name" "^fsdpc: error: --$f needs .*not an empty one \(an unset variable" ./fsdpc $T --$f ''
done
refused_unchanged "--train_data= (empty after =) is refused" "^fsdpc: error: --train_data needs a value, not an empty one" ./fsdpc $T --train_data=
refused_unchanged "export --output '' is refused" "^fsdpc: error: --output needs a value" ./fsdpc export --checkpoint "$CK" --output ''
refused_unchanged "prepare --input '' is refused" "^fsdpc: error: --input needs a value" ./fsdpc prepare --input '' --output "$W/p"
[ ! -e "$W/p" ]
check "prepare --input '' created nothing" $?

# ---- ranges: refused naming the range ----
refused_unchanged "--weight_decay 1e10" "^fsdpc: error: --weight_decay must be in \[0, 10\], got '1e10'" ./fsdpc $T --weight_decay 1e10
refused_unchanged "--lr 11" "^fsdpc: error: --lr must be in \[0, 10\], got '11'" ./fsdpc $T --lr 11
refused_unchanged "--lr -1" "^fsdpc: error: --lr must be in \[0, 10\]" ./fsdpc $T --lr -1
refused_unchanged "--beta1 1" "^fsdpc: error: --beta1 must be in \[0, 1\)" ./fsdpc $T --beta1 1
refused_unchanged "--dropout 1" "^fsdpc: error: --dropout must be in \[0, 1\)" ./fsdpc $T --dropout 1
refused_unchanged "--grad_clip 1e20" "^fsdpc: error: --grad_clip must be in \[0, 1e9\]" ./fsdpc $T --grad_clip 1e20
refused_unchanged "--warmup 1e12" "^fsdpc: error: --warmup must be in \[0, 1e9\]" ./fsdpc $T --warmup 1e12
refused_unchanged "--temperature 1000" "^fsdpc: error: --temperature must be in \[0, 100\]" ./fsdpc $T --temperature 1000
refused_unchanged "--initializer_range 0" "^fsdpc: error: --initializer_range must be in \(0, 10\]" ./fsdpc $T --initializer_range 0
refused_unchanged "--rope_theta 1e20" "^fsdpc: error: --rope_theta must be in \(0, 1e12\]" ./fsdpc $T --rope_theta 1e20
refused_unchanged "--collective_timeout 1e9" "^fsdpc: error: --collective_timeout must be in \[0, 1e7\]" ./fsdpc $T --collective_timeout 1e9
refused_unchanged "--num_threads 100000" "^fsdpc: error: --num_threads must be in \[0, 65536\]" ./fsdpc $T --num_threads 100000
refused_unchanged "--max_steps 2147483648 names the range" "^fsdpc: error: --max_steps expects an integer in \[-1, 2147483647\], got '2147483648'" \
    ./fsdpc $T --max_steps 2147483648
refused_unchanged "--max_steps -2" "^fsdpc: error: --max_steps must be in \[-1, 2147483647\]" ./fsdpc $T --max_steps -2
refused_unchanged "--batch_size 2147483648 names the int range" "^fsdpc: error: --batch_size expects an integer in \[-2147483647, 2147483647\]" \
    ./fsdpc $T --batch_size 2147483648
refused_unchanged "--shard_tokens 18446744073709551616 names the range" "^fsdpc: error: --shard_tokens expects .*got '18446744073709551616'" \
    ./fsdpc prepare --input "$W/d.txt" --output "$W/p" --shard_tokens 18446744073709551616
# values inside the ranges the recipes use still run
./fsdpc $T --weight_decay 0.2 --lr 3e-4 --beta2 0.999 --grad_clip 4.0 --warmup 0.0032 >/dev/null 2>"$W/ok.err"
check "values the recipes use are accepted" $? "$(grep -m1 error "$W/ok.err")"

# ---- counts at 0, 1 and their largest value ----
refused_unchanged "--batch_size 0" "^fsdpc: error: --batch_size must be positive" ./fsdpc $T --batch_size 0
refused_unchanged "--grad_accum 0" "^fsdpc: error: --grad_accum must be positive" ./fsdpc $T --grad_accum 0
refused_unchanged "--validation_batches 0" "^fsdpc: error: --validation_batches must be positive" ./fsdpc $T --validation_batches 0
refused_unchanged "--logging_freq 0" "^fsdpc: error: --logging_freq must be positive" ./fsdpc $T --logging_freq 0
refused_unchanged "--batch_size 2147483647: a micro-batch's tokens overflow 32 bits" "^fsdpc: error: --batch_size 2147483647 x --max_context_width 64" \
    ./fsdpc $T --batch_size 2147483647
refused_unchanged "--grad_accum 2147483647: a step's sequences overflow 32 bits" "^fsdpc: error: .*--grad_accum 2147483647 = .* sequences per optimizer step" \
    ./fsdpc $T --grad_accum 2147483647
refused_unchanged "--max_epochs 0 given means nothing" "^fsdpc: error: --max_epochs must be at least 1 \(or -1" ./fsdpc $T --max_epochs 0
refused_unchanged "--max_epochs -2" "^fsdpc: error: --max_epochs must be at least 1, or -1" ./fsdpc $T --max_epochs -2
for a in "--max_steps 2 --checkpoint_freq 1 --num_kept_checkpoints 1 --checkpoint_dir $W/one" \
    "--max_steps 2 --checkpoint_freq 2147483647 --checkpoint_dir $W/last" "--max_steps 1 --checkpoint_freq 0 --logging_freq 2147483647" \
    "--max_steps 1 --checkpoint_freq 0 --max_epochs 2147483647 --train_data $W/d.txt" \
    "--max_steps 1 --checkpoint_freq 0 --skip_nonfinite_steps 2147483647" "--max_steps 1 --checkpoint_freq 0 --lr_decay_iters 2147483647"; do
    # shellcheck disable=SC2086
    timeout 60 ./fsdpc $SMALL $a >/dev/null 2>"$W/c.err"
    check "counts at 1 or their largest value run: $a" $? "$(grep -m1 error "$W/c.err")"
done
[ "$(ls "$W/one")" = "step_00000002.h5" ] && [ "$(ls "$W/last")" = "step_00000002.h5" ]
check "--num_kept_checkpoints 1 keeps the newest; --checkpoint_freq 2147483647 writes the last step only" $? \
    "$(ls "$W/one" "$W/last" 2>&1 | tr '\n' ' ')"

# ---- --max_epochs beside --max_steps: which one wins is said ----
./fsdpc $SMALL --train_data "$W/d.txt" --max_epochs 1 --max_steps 2 --checkpoint_freq 0 >/dev/null 2>"$W/ep.err"
rc=$?
[ $rc = 0 ] && grep -q "^--max_steps 2 and --max_epochs 1 (.* steps here): the run stops at whichever comes first, step 2 (--max_steps)" "$W/ep.err"
check "--max_epochs beside --max_steps: one line names the winner" $? "rc=$rc $(grep -m1 'max_epochs\|error' "$W/ep.err")"
./fsdpc $SMALL --train_data synthetic --max_epochs 3 --max_steps 2 --checkpoint_freq 0 >/dev/null 2>"$W/syn.err"
grep -q "^--max_epochs 3 does not apply: synthetic data has no epochs, so --max_steps decides (2 steps)" "$W/syn.err"
check "--max_epochs on synthetic data: said not to apply" $? "$(grep -m1 'epochs\|error' "$W/syn.err")"

# ---- runs that train nothing need weights, and say what they evaluated ----
refused_unchanged "--max_steps 0 with a misspelt resume folder" "^fsdpc: error: --resume_from_checkpoint '$W/ckk' holds no checkpoint, and this run trains no step \(--max_steps 0\)" \
    ./fsdpc $SHAPE --num_threads 1 --max_steps 0 --resume_from_checkpoint "$W/ckk" --prompt hello --num_tokens 5
refused_unchanged "--max_epochs -1 with a misspelt resume folder" "holds no checkpoint, and this run trains no step \(--max_epochs -1\)" \
    ./fsdpc $SHAPE --num_threads 1 --max_epochs -1 --resume_from_checkpoint "$W/ckk" --val_data "$W/d.txt" --num_tokens 5
[ ! -e "$W/ckk" ]
check "the misspelt resume folder was not created" $?
./fsdpc $SHAPE --num_threads 1 --max_steps 0 --num_tokens 0 >/dev/null 2>"$W/z.err"
rc=$?
[ $rc = 0 ] && grep -q "^nothing evaluated: this run trains no step and has no --val_data" "$W/z.err" &&
    ! grep -q "random weights" "$W/z.err"
check "--max_steps 0 without weights or validation data: a dry start-up that says it evaluated nothing" $? "rc=$rc $(grep -m2 'nothing\|warning\|error' "$W/z.err" | tr '\n' '|')"
refused_unchanged "--max_steps 0 validating without weights" "^fsdpc: error: this run trains no step \(--max_steps 0\) and loads no weights: it would evaluate random weights; give --resume_from_checkpoint or --init_from, or --allow_random_weights" \
    ./fsdpc $SHAPE --num_threads 1 --max_steps 0 --val_data "$W/d.txt"
refused_unchanged "--max_epochs -1 generating without weights" "^fsdpc: error: this run trains no step \(--max_epochs -1\) and loads no weights: it would generate from random weights" \
    ./fsdpc $SHAPE --num_threads 1 --max_epochs -1 --num_tokens 5
$MPI -np 2 ./fsdpc $SHAPE --num_threads 1 --max_steps 0 --val_data "$W/d.txt" --prompt hi --num_tokens 3 >/dev/null 2>"$W/z2.err"
rc=$?
[ $rc != 0 ] && [ "$(grep -c '^fsdpc: error: .*it would evaluate and generate from random weights' "$W/z2.err")" = 1 ]
check "np=2: evaluating and generating without weights is one error line and a failed job" $? "rc=$rc $(grep -m2 error "$W/z2.err" | tr '\n' '|')"
./fsdpc $SHAPE --num_threads 1 --max_steps 0 --val_data "$W/d.txt" --validation_batches 1 --allow_random_weights --prompt hi --num_tokens 3 >/dev/null 2>"$W/z3.err"
rc=$?
[ $rc = 0 ] && grep -q "^warning: this run trains no step and loads no weights: it will evaluate and generate from random weights" "$W/z3.err" &&
    grep -q "Validation loss" "$W/z3.err"
check "--allow_random_weights evaluates and generates from the seed's weights, warned" $? "rc=$rc $(grep -m2 'warning\|error' "$W/z3.err" | tr '\n' '|')"

# ---- a validation where no target bears loss ----
/usr/bin/python3 -c "
import json, sys
with open(sys.argv[1], 'w') as a, open(sys.argv[2], 'w') as b:
    for i in range(40):
        ids = [65 + (i + j) % 20 for j in range(48)]
        a.write(json.dumps({'input_ids': ids, 'labels': [-100] * 48}) + '\n')
        b.write(json.dumps({'input_ids': ids, 'attention_mask': [0] * 48}) + '\n')" "$W/labels.jsonl" "$W/mask.jsonl"
for v in labels mask; do
    ./fsdpc $SHAPE --num_threads 1 --max_steps 0 --resume_from_checkpoint "$CK" --val_data "$W/$v.jsonl" --num_tokens 0 \
        --validation_batches 2 >/dev/null 2>"$W/v.err"
    rc=$?
    [ $rc = 0 ] && grep -q "^Batch 2 Validation: nothing validated, no target in its 2 batch(es) bears loss" "$W/v.err" &&
        ! grep -q "Validation loss" "$W/v.err"
    check "all-masked validation ($v): nothing validated, said so, no loss printed" $? "rc=$rc $(grep -m1 'Validation\|error' "$W/v.err")"
done
./fsdpc $SMALL --train_data "$W/d.txt" --val_data "$W/labels.jsonl" --validation_freq 1 --validation_batches 1 --max_steps 1 \
    --checkpoint_freq 0 --metrics_file "$W/vm.jsonl" >/dev/null 2>"$W/vm.err"
rc=$?
[ $rc = 0 ] && grep -q '"val_loss": null' "$W/vm.jsonl" && /usr/bin/python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$W/vm.jsonl"
check "all-masked validation in training: the metrics line holds val_loss null (valid JSON)" $? "rc=$rc $(head -c 200 "$W/vm.jsonl")"
sha256sum -c --quiet "$W/inputs.sha" >/dev/null 2>&1
check "the runs above left every input unchanged" $?

# ---- class 6: an export that cannot hold the weights ----
refused_unchanged "export --dtype fp16 of weights beyond fp16's range" \
    "^fsdpc: error: --dtype fp16 cannot hold 128 value\(s\) of 1 tensor\(s\), which would be written as infinity or NaN: 'model.embed_tokens.weight' \(128\); export with --dtype bf16 or fp32, or pass --accept_lossy" \
    ./fsdpc export --checkpoint "$BIG" --output "$W/x16" --dtype fp16
[ ! -e "$W/x16" ]
check "the refused fp16 export left no folder" $?
refused_unchanged "export --dtype bf16 of a weight that rounds past bf16's range" \
    "^fsdpc: error: --dtype bf16 cannot hold 64 value\(s\) of 1 tensor\(s\).*'model.embed_tokens.weight' \(64\); export with --dtype fp32" \
    ./fsdpc export --checkpoint "$BIG" --output "$W/xbf" --dtype bf16
# an earlier export in the folder stays as it was when the next one is refused
./fsdpc export --checkpoint "$BIG" --output "$W/x" --dtype fp32 >/dev/null 2>&1
sha256sum "$W"/x/* >"$W/x.sha"
refused_unchanged "export --dtype fp16 over an earlier export is refused" "cannot hold 128 value" ./fsdpc export --checkpoint "$BIG" --output "$W/x" --dtype fp16
sha256sum -c --quiet "$W/x.sha" >/dev/null 2>&1 && [ "$(ls "$W/x" | wc -l)" = "$(wc -l <"$W/x.sha")" ]
check "the earlier export's files are unchanged, and no temporary is left" $? "$(ls "$W/x" | tr '\n' ' ')"
./fsdpc export --checkpoint "$BIG" --output "$W/xl" --dtype fp16 --accept_lossy >/dev/null 2>"$W/xl.err"
rc=$?
[ $rc = 0 ] && grep -q "^warning: --accept_lossy: 128 value(s) of 1 tensor(s) written as infinity or NaN: 'model.embed_tokens.weight'" "$W/xl.err" &&
    [ -s "$W/xl/model.safetensors" ]
check "export --accept_lossy writes them, with a warning" $? "rc=$rc $(grep -m1 'warning\|error' "$W/xl.err")"
./fsdpc export --checkpoint "$CK" --output "$W/ok16" --dtype fp16 >/dev/null 2>"$W/ok16.err"
check "export --dtype fp16 of ordinary weights runs" $? "$(grep -m1 error "$W/ok16.err")"
