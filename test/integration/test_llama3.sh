#!/usr/bin/env bash
# Llama-3 / 3.1 / 3.2 in the Llama family: rope_theta 500000 with Hugging Face's rope_scaling of
# rope_type llama3 (forward against the PyTorch reference, checkpoints, export and import back),
# tied embeddings, the presets' published sizes, other rope_scaling types refused by name.
cd "$(dirname "$0")/../.."
FSDPC=${FSDPC:-./fsdpc}
source test/lib.sh
PY=/usr/bin/python3
ONE="--num_threads 1 --checkpoint_freq 0 --validation_freq 0"
GEN="--max_steps 0 --allow_random_weights --prompt Hello --num_tokens 24 --temperature 0 $ONE"
KEEP="--max_steps 1 --lr 0 --min_lr 0 --warmup 0 --train_data synthetic --batch_size 1 --num_threads 1 --validation_freq 0 --checkpoint_freq 1"

# random Llamas (D=64, H=4 so hd=16, T=64) with theta 500000 scaled x8 from 64 positions: of the
# 8 frequencies the first is kept, the second in the blended band, the rest slowed
L3="--rope_theta 500000 --llama3 8,1,4,64"
$PY test/ref/hf_make.py "$W/s" --vocab 256 --seed 6 $L3
$PY test/ref/hf_make.py "$W/t" --vocab 256 --seed 7 $L3 --tied
cp -r "$W/s" "$W/plain"
$PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['rope_scaling']=None; json.dump(c, open(p,'w'))" "$W/plain/config.json"

# ---- forward parity: the first step's loss equals the reference's on the same weights ----
head -c 257 data/tinyshakespeare.txt >"$W/four.txt"
STEP="--train_data $W/four.txt --max_steps 1 --batch_size 4 $ONE"
loss_ok() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(a != "" && d <= t) }'; }
for m in s t; do
    ref=$($PY test/ref/hf_ref.py loss "$W/$m" "$W/four.txt")
    ./fsdpc --init_from "$W/$m" $STEP --metrics_file "$W/$m.jsonl" >"$W/$m.log" 2>&1
    loss_ok "$(losses "$W/$m.jsonl")" "$ref" 1e-5
    ok=$?  # before the message's $(...), which would set $? again
    check "rope_scaling llama3$([ $m = t ] && echo ', tied embeddings'): first-step loss $(losses "$W/$m.jsonl") equals the reference's $ref within 1e-5" $ok
done
# tied training: the embedding's gradient is its own plus lm_head's. Two AdamW steps on the one
# batch (the mean loss does not depend on the sample order) against torch's AdamW on the reference
# with lm_head the embedding's Parameter
./fsdpc --init_from "$W/t" --train_data "$W/four.txt" --max_steps 2 --batch_size 4 $ONE --lr 3e-3 --min_lr 3e-3 --warmup 0 \
    --weight_decay 0.1 --beta1 0.9 --beta2 0.95 --grad_clip 0 --metrics_file "$W/t2.jsonl" >/dev/null 2>&1
ref2=$($PY - "$W/t" "$W/four.txt" <<'PYEOF'
import sys
import numpy as np
import torch
sys.path.insert(0, "test/ref")
from llama_ref import adamw_for, load_hf, loss_fn
model = load_hf(sys.argv[1], torch.float64)
model.lm_head.weight = model.model.embed_tokens.weight
T = model.cfg.max_context_width
data = np.fromfile(sys.argv[2], dtype=np.uint8).astype(np.int64)
x = torch.from_numpy(np.stack([data[i * T:i * T + T + 1] for i in range((len(data) - 1) // T)]))
opt = adamw_for(model, 3e-3, (0.9, 0.95), 1e-8, 0.1)
for step in range(2):
    opt.zero_grad()
    loss = loss_fn(model(x[:, :-1]), x[:, 1:])
    loss.backward()
    opt.step()
print(f"{loss.item():.12g}")
PYEOF
)
l2=$(losses "$W/t2.jsonl" | sed -n 2p)
loss_ok "$l2" "$ref2" 1e-4
check "tied training: the second AdamW step's loss $l2 equals torch's with one shared tensor ($ref2) within 1e-4" $?
T2="--init_from $W/t --train_data $W/four.txt --max_steps 2 $ONE --lr 3e-3 --min_lr 3e-3 --warmup 0 --weight_decay 0.1 --beta2 0.95 --grad_clip 0"
$MPI -np 2 ./fsdpc $T2 --batch_size 2 --metrics_file "$W/t2np2.jsonl" >/dev/null 2>&1
d=$(rel_diff "$W/t2.jsonl" "$W/t2np2.jsonl" 2 1e-6)
check "tied, np=2 full-shard (the embedding/head unit sharded): both losses equal np=1's (worst rel diff $d)" $?

# the CUDA kernels (scaled RoPE tables, the tied head) on the emulated GPU against the CPU
if [ -x build/fsdpc_emu ]; then
    E="--train_data $W/four.txt --max_steps 3 --batch_size 2 --max_context_width 32 $ONE --lr 3e-3 --warmup 1"
    timeout 300 ./build/fsdpc_emu --init_from "$W/t" $E --device cuda --metrics_file "$W/emu.jsonl" >"$W/emu.log" 2>&1
    ./fsdpc --init_from "$W/t" $E --device cpu --metrics_file "$W/cpu.jsonl" >/dev/null 2>&1
    d=$(rel_diff "$W/cpu.jsonl" "$W/emu.jsonl" 3 1e-5)
    check "emulated GPU, rope_scaling llama3 and tied embeddings: 3 fp32 losses equal the CPU's (worst rel diff $d)" $? \
        "$(grep -m2 -E 'error|emu' "$W/emu.log")"
else
    check "emulated GPU # SKIP build/fsdpc_emu is not built (make build/fsdpc_emu)" 0
fi
# newer transformers: theta and scaling inside rope_parameters
cp -r "$W/s" "$W/par"
$PY -c "
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c['rope_parameters'] = dict(c.pop('rope_scaling'), rope_theta=c.pop('rope_theta'))
json.dump(c, open(p, 'w'))" "$W/par/config.json"
./fsdpc --init_from "$W/par" $STEP --metrics_file "$W/par.jsonl" >/dev/null 2>&1
[ -n "$(losses "$W/par.jsonl")" ] && [ "$(losses "$W/par.jsonl")" = "$(losses "$W/s.jsonl")" ]
check "rope_parameters {rope_type llama3, rope_theta, ...} (newer transformers) gives the same model" $?
plain=$($PY test/ref/hf_ref.py loss "$W/plain" "$W/four.txt")
! loss_ok "$(losses "$W/s.jsonl")" "$plain" 1e-4
check "the scaling matters: the same weights with plain RoPE give another loss ($plain)" $?
$PY test/ref/hf_ref.py generate Hello 24 "$W/s" "$W/ref.s"
./fsdpc --init_from "$W/s" $GEN >"$W/gen.s" 2>/dev/null
cmp -s "$W/gen.s" "$W/ref.s" && [ "$(wc -c <"$W/gen.s")" -gt 5 ]
check "greedy generation (KV cache, positions past the scaled band) equals the reference" $?

# ---- checkpoints carry the scaling; files from before it load as plain RoPE ----
./fsdpc --init_from "$W/s" $KEEP --checkpoint_dir "$W/ks" >/dev/null 2>&1
CK="$W/ks/step_00000001.h5"
$PY -c "
import h5py, sys
a = h5py.File(sys.argv[1], 'r').attrs
want = {'rope_theta': 500000, 'rope_scaling_factor': 8, 'rope_low_freq_factor': 1, 'rope_high_freq_factor': 4, 'rope_original_context': 64}
sys.exit(any(float(a[k]) != v for k, v in want.items()))" "$CK"
check "the checkpoint stores rope_theta and the four rope_scaling attributes" $?
./fsdpc --resume_from_checkpoint "$CK" $GEN >"$W/ck.gen" 2>/dev/null
cmp -s "$W/ck.gen" "$W/ref.s"
check "generation from the checkpoint equals the reference" $?
cp "$CK" "$W/old.h5"
$PY -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    for k in ('rope_scaling_factor', 'rope_low_freq_factor', 'rope_high_freq_factor', 'rope_original_context'):
        del f.attrs[k]" "$W/old.h5"
$PY test/ref/hf_ref.py generate Hello 24 "$W/plain" "$W/ref.plain"
./fsdpc --resume_from_checkpoint "$W/old.h5" $GEN >"$W/old.gen" 2>/dev/null
cmp -s "$W/old.gen" "$W/ref.plain" && ! cmp -s "$W/old.gen" "$W/ref.s"
check "a checkpoint without the scaling attributes (older fsdpc) loads as plain RoPE" $?

# ---- export and import back ----
./fsdpc export --checkpoint "$CK" --output "$W/exp" --dtype fp32 >/dev/null 2>&1 &&
    $PY test/ref/hf_read.py same "$W/s" "$W/exp" &&
    $PY -c "
import json, sys
c = json.load(open(sys.argv[1]))
r = c['rope_scaling']
ok = c['rope_theta'] == 500000 and r == {'factor': 8, 'low_freq_factor': 1, 'high_freq_factor': 4,
                                          'original_max_position_embeddings': 64, 'rope_type': 'llama3'}
sys.exit(not ok or c['vocab_size'] != 256)" "$W/exp/config.json"
check "export: the source's tensors bit for bit, config.json's rope_theta and rope_scaling llama3 as imported" $? \
    "$(grep -A1 rope_scaling "$W/exp/config.json" 2>/dev/null | head -c 300)"
./fsdpc --init_from "$W/exp" $GEN >"$W/re.gen" 2>/dev/null
$PY test/ref/hf_ref.py generate Hello 24 "$W/exp" "$W/ref.out"
cmp -s "$W/re.gen" "$W/ref.s" && cmp -s "$W/ref.out" "$W/ref.s"
check "the export imports back to the same model, in fsdpc and in the reference" $?
./fsdpc --init_from "$W/t" $KEEP --checkpoint_dir "$W/kt" >/dev/null 2>&1
$PY -c "
import h5py, sys
f = h5py.File(sys.argv[1], 'r')
sys.exit(int(f.attrs['tie_word_embeddings']) != 1 or 'lm_head.weight' in f['model'] or 'model.embed_tokens.weight' not in f['model'])" \
    "$W/kt/step_00000001.h5"
check "a tied model trains tied: the checkpoint has tie_word_embeddings=1 and no lm_head tensor" $?
./fsdpc export --checkpoint "$W/kt" --output "$W/outt" --dtype fp32 >/dev/null 2>&1 &&
    $PY -c "
import json, sys
sys.path.insert(0, 'test/ref')
from hf_read import read_source
a, b = read_source(sys.argv[1]), read_source(sys.argv[2])
c = json.load(open(sys.argv[2] + '/config.json'))
sys.exit(c['tie_word_embeddings'] is not True or sorted(a) != sorted(b) or any(not (a[k] == b[k]).all() for k in a))" "$W/t" "$W/outt"
check "a tied model exports tied: tie_word_embeddings true, no lm_head, every tensor bit for bit" $?
./fsdpc --init_from "$W/outt" --train_data "$W/four.txt" --max_steps 1 --batch_size 4 $ONE --metrics_file "$W/tt.jsonl" >/dev/null 2>&1
[ "$(losses "$W/tt.jsonl")" = "$(losses "$W/t.jsonl")" ]
check "the tied export imports back to the same first-step loss" $?

# ---- Llama-3's vocabulary and RoPE from the command line ----
./fsdpc --rope_theta 500000 --vocab_size 128256 --hidden_width 64 --num_heads 4 --num_key_value_heads 2 \
    --intermediate_size 128 --num_layers 1 --max_context_width 16 --train_data synthetic --batch_size 1 --max_steps 2 \
    $ONE --metrics_file "$W/v.jsonl" >/dev/null 2>&1 && [ "$(wc -l <"$W/v.jsonl")" = 2 ]
check "a 128256-token vocabulary with rope_theta 500000 trains" $?

# ---- presets: the published sizes (parameters as fsdpc plan counts them) ----
for p in "llama3_8b 8.03B" "llama3_70b 70.6B" "llama3.2_1b 1.24B" "llama3.2_3b 3.21B"; do
    set -- $p
    ./fsdpc plan --model_name "$1" --world_size 8 >"$W/plan" 2>&1
    grep -q "$1, $2 parameters (.* V=128256)" "$W/plan"
    check "--model_name $1: $2 parameters, V=128256" $? "$(head -1 "$W/plan")"
done
./fsdpc --model_name llama3.2_1b --num_layers 1 --hidden_width 64 --num_heads 4 --num_key_value_heads 2 \
    --intermediate_size 128 --vocab_size 256 --max_context_width 32 --train_data synthetic --batch_size 1 --max_steps 1 \
    --checkpoint_dir "$W/kp" --num_threads 1 --validation_freq 0 --checkpoint_freq 1 >/dev/null 2>&1 &&
    $PY -c "
import h5py, sys
a = h5py.File(sys.argv[1], 'r').attrs
sys.exit(float(a['rope_theta']) != 500000 or float(a['rope_scaling_factor']) != 32 or float(a['rope_original_context']) != 8192
         or int(a['tie_word_embeddings']) != 1)" "$W/kp/step_00000001.h5"
check "--model_name llama3.2_1b trains tied, with rope_theta 500000 and Llama-3.2's scaling (x32 from 8192)" $?
expect_error "a tied checkpoint resumed untied" "tie_word_embeddings=1 but this run has --tie_word_embeddings 0" \
    ./fsdpc --resume_from_checkpoint "$W/kp/step_00000001.h5" --model_name llama3.2_1b --tie_word_embeddings false --num_layers 1 --hidden_width 64 \
    --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --vocab_size 256 --max_context_width 32 $GEN
expect_error "--tie_word_embeddings for minGPT" "tie_word_embeddings" ./fsdpc --model_type mingpt --tie_word_embeddings $GEN

# ---- refusals by name ----
for t in linear dynamic yarn longrope; do
    $PY test/ref/hf_make.py "$W/r_$t" --vocab 256 --rope_scaling "{\"rope_type\": \"$t\", \"factor\": 2.0}"
    expect_error "rope_scaling rope_type $t is refused by name" "rope_scaling with rope_type $t, which fsdpc does not support.*llama3" \
        ./fsdpc --init_from "$W/r_$t" $GEN
done
$PY test/ref/hf_make.py "$W/r_old" --vocab 256 --rope_scaling '{"type": "dynamic", "factor": 2.0}'
expect_error "older transformers' rope_scaling type dynamic is refused by name" "rope_type dynamic" ./fsdpc --init_from "$W/r_old" $GEN
$PY test/ref/hf_make.py "$W/r_par" --vocab 256
$PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['rope_parameters']={'rope_type': 'yarn', 'rope_theta': 1e4}; json.dump(c, open(p,'w'))" "$W/r_par/config.json"
expect_error "rope_parameters of rope_type yarn is refused by name" "rope_parameters with rope_type yarn" ./fsdpc --init_from "$W/r_par" $GEN
$PY test/ref/hf_make.py "$W/r_miss" --vocab 256 --rope_scaling '{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}'
expect_error "rope_type llama3 without high_freq_factor" "rope_scaling of rope_type llama3 needs high_freq_factor" ./fsdpc --init_from "$W/r_miss" $GEN
$PY test/ref/hf_make.py "$W/r_band" --vocab 256 --llama3 8,4,1,64
expect_error "rope_type llama3 with high_freq_factor below low_freq_factor" "high_freq_factor must exceed its low_freq_factor" \
    ./fsdpc --init_from "$W/r_band" $GEN

# ---- the Llama-3 tokenizer.json (a Split by Llama-3's regex, ByteLevel without its own,
# ignore_merges) against llama3-tokenizer-js, an independent JavaScript implementation ----
if ! npm_fetch llama3-tokenizer-js@1.2.0; then
    check "Llama-3 tokenizer against llama3-tokenizer-js # SKIP $NPM_SKIP" 0
    exit 0
fi
node test/ref/llama3_tok.cjs json "$W/tokenizer.json"
check "a Llama-3 tokenizer.json written from the package's vocabulary and merges" $?
/usr/bin/python3 - "$W/lines.txt" <<'PYEOF'
import random, sys
lines = open("data/tinyshakespeare.txt", encoding="utf-8").read().split("\n")[:400]
lines += ["I'm sure you'll see they've HE'S DON'T we'd", "12345678901 3.14159 1,000,000 x2y33z444",
          "   leading, trailing   ", "tabs\tand\t\tmore\t", "carriage\rreturn\r", "naïve café Über straße",
          "日本語のテキストです。中文字符", "emoji 🙂🚀 and 👩‍👩‍👧", "Ωμέγα Привет мир مرحبا", "a  b   c    d",
          "((x))[[y]]{{z}}!!??...---", "    def f(x):\treturn x**2  # comment", "@#$%^&*_+=|\\~`", "ﬁ ligature ℌ ℍ ①②③"]
rng = random.Random(11)
alphabet = "ab AZ09 '\t\r.,!?-_éü日本🙂\u00a0\u2003Ωж"
lines += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(300)]
open(sys.argv[1], "w", encoding="utf-8").write("\n".join(lines) + "\n")
PYEOF
node test/ref/llama3_tok.cjs encode "$W/lines.txt" >"$W/ref.ids"
{ "$FSDPC" tokenize --tokenizer "$W/tokenizer.json" <"$W/lines.txt" && head -1 "$W/lines.txt" | ./fsdpc tokenize --tokenizer "$W/tokenizer.json" --bos --eos; } >"$W/ids" 2>"$W/tok.log"
n=$(wc -l <"$W/ref.ids")
bad=$(paste -d '\t' "$W/ids" "$W/ref.ids" | awk -F '\t' '$1 != $2' | wc -l)
[ "$n" -gt 700 ] && [ "$bad" = 0 ] && [ "$(wc -l <"$W/ids")" = "$n" ]
check "fsdpc tokenize equals llama3-tokenizer-js on $n lines (Shakespeare, contractions, digits, whitespace, scripts, emoji, random)" $? \
    "($bad differ, first: $(paste -d '\t' "$W/ids" "$W/ref.ids" | awk -F '\t' '$1 != $2' | head -1 | head -c 300); $(head -c 200 "$W/tok.log"))"
tail -1 "$W/ids" | grep -Eq '^128000 .* 128001$'
check "<|begin_of_text|> (128000) is BOS and <|end_of_text|> (128001) EOS" $? "$(tail -1 "$W/ids" | head -c 100)"
"$FSDPC" tokenize --tokenizer "$W/tokenizer.json" <"$W/lines.txt" 2>/dev/null | "$FSDPC" tokenize --tokenizer "$W/tokenizer.json" --decode >"$W/back.txt" 2>/dev/null
cmp -s "$W/back.txt" "$W/lines.txt"
check "--decode gives the text back" $?
/usr/bin/python3 -c "
import json, sys
t = json.load(open(sys.argv[1]))
t['pre_tokenizer']['pretokenizers'][1]['use_regex'] = True
json.dump(t, open(sys.argv[2], 'w'))
t['pre_tokenizer']['pretokenizers'][1]['use_regex'] = False
t['pre_tokenizer']['pretokenizers'][0]['behavior'] = 'Removed'
json.dump(t, open(sys.argv[3], 'w'))" "$W/tokenizer.json" "$W/tworegex.json" "$W/removed.json"
expect_error "Split then a ByteLevel with its own regex" "tworegex.json': pre_tokenizer Split followed by a ByteLevel with use_regex is not supported" \
    "$FSDPC" tokenize --tokenizer "$W/tworegex.json"
expect_error "Split with behavior Removed" "removed.json': pre_tokenizer Split is supported only by a Regex pattern, behavior Isolated" \
    "$FSDPC" tokenize --tokenizer "$W/removed.json"
