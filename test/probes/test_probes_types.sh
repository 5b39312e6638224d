#!/usr/bin/env bash
# Switches of the wrong JSON type in files fsdpc shares with Python programs. transformers and
# PEFT read a config.json or adapter_config.json switch by its truth, so 0 and null are false and
# "false" is true; Hugging Face's tokenizers refuses a tokenizer.json switch that is not a
# boolean. fsdpc took any of them as absent: a GPT-NeoX config.json with "use_parallel_residual": 0
# (transformers' sequential block) trained as the parallel one, "attention_bias": 1 and an
# adapter's "use_dora": "false" (a DoRA adapter to PEFT) passed their checks. Now a switch that
# is neither true, false nor null is one error line naming the file and the key; null is false,
# as Python reads it; a string a check compares must be a string. Inputs unchanged throughout.
cd "$(dirname "$0")/../.."
source test/lib.sh
head -c 100000 data/tinyshakespeare.txt >"$W/d.txt"
TOK=test/fixtures/tokenizer/tokenizer.json
ONE="--train_data $W/d.txt --num_threads 1 --validation_freq 0 --num_tokens 0 --batch_size 2"
TRY="$ONE --max_steps 1 --checkpoint_freq 0"

# src NAME FLAGS...: a one-step run's checkpoint exported as $W/NAME (a Hugging Face folder, or with
# --adapter among FLAGS a PEFT adapter folder)
src() {
    local name=$1 ex=""
    shift
    case " $* " in *" --lora_rank "*) ex=--adapter ;; esac
    ./fsdpc $ONE --max_steps 1 --checkpoint_dir "$W/ck_$name" --checkpoint_freq 1 "$@" >"$W/src.log" 2>&1 &&
        ./fsdpc export --checkpoint "$W/ck_$name" --output "$W/$name" $ex >>"$W/src.log" 2>&1
    check "source $name exported" $? "$(grep -m2 error "$W/src.log")"
}
# edit SRC FILE KEY JSON OUT: a copy of folder SRC whose FILE has KEY (a.b: inside object a) set
# to the JSON value; FILE can be a path of its own (then SRC is unused and OUT a file)
edit() {
    local from=$1 file=$2
    if [ -d "$from" ]; then
        rm -rf "$5" && cp -r "$from" "$5" && file="$5/$file"
    else
        cp "$from" "$5" && file=$5
    fi
    /usr/bin/python3 - "$file" "$3" "$4" <<'EOF'
import json, sys
path, key, value = sys.argv[1:]
d = json.load(open(path, encoding='utf-8'))
o, keys = d, key.split('.')
for k in keys[:-1]:
    o = o[int(k)] if isinstance(o, list) else o[k]
o[keys[-1]] = json.loads(value)
json.dump(d, open(path, 'w', encoding='utf-8'), ensure_ascii=False, indent=1)
EOF
}
# same_inputs NAME DIR: DIR's files hash as before the run
hashes() { (cd "$1" && sha256sum $(ls) 2>/dev/null); }
refused() {  # refused NAME REGEX DIR ARGS...: one error line matching REGEX, DIR unchanged
    local name=$1 re=$2 dir=$3 before
    shift 3
    before=$(hashes "$dir")
    expect_error "$name" "$re" ./fsdpc "$@"
    [ "$before" = "$(hashes "$dir")" ]
    check "$name: inputs unchanged" $?
}
trains() {  # trains NAME ARGS...: a step is trained, no error
    local name=$1
    shift
    timeout 60 ./fsdpc "$@" >"$W/ok.log" 2>&1 && grep -q "^Batch 1 Loss" "$W/ok.log" && ! grep -q "fsdpc: error" "$W/ok.log"
    check "$name trains" $? "$(grep -m2 error "$W/ok.log")"
}

src neox --model_type gpt_neox
src llama
src tied --tie_word_embeddings
src lora --lora_rank 4 --lora_target_modules q_proj,v_proj

# ---- config.json ----
for v in 0 1 '"false"' '[]'; do
    edit "$W/neox" config.json use_parallel_residual "$v" "$W/x"
    refused "neox use_parallel_residual $v" "'.*x/config.json': use_parallel_residual is (a number|a string|an array), not true or false" \
        "$W/x" $TRY --init_from "$W/x"
done
edit "$W/neox" config.json use_parallel_residual null "$W/x"
refused "neox use_parallel_residual null (None: transformers' sequential block)" "sets use_parallel_residual false" "$W/x" $TRY --init_from "$W/x"
edit "$W/neox" config.json use_parallel_residual true "$W/x"
trains "neox use_parallel_residual true" $TRY --init_from "$W/x"
edit "$W/llama" config.json attention_bias 1 "$W/x"
refused "llama attention_bias 1" "attention_bias is a number, not true or false" "$W/x" $TRY --init_from "$W/x"
edit "$W/llama" config.json attention_bias null "$W/x"
trains "llama attention_bias null" $TRY --init_from "$W/x"
edit "$W/llama" config.json hidden_act 5 "$W/x"
refused "llama hidden_act 5" "hidden_act must be a string" "$W/x" $TRY --init_from "$W/x"
edit "$W/tied" config.json tie_word_embeddings '"true"' "$W/x"
refused "tied tie_word_embeddings \"true\"" "tie_word_embeddings is a string, not true or false" "$W/x" $TRY --init_from "$W/x"
trains "tied tie_word_embeddings true" $TRY --init_from "$W/tied"

# ---- adapter_config.json (PEFT) ----
edit "$W/lora" adapter_config.json use_dora '"false"' "$W/x"
refused "adapter use_dora \"false\"" "use_dora is neither true nor false" "$W/x" $TRY --lora_rank 4 --lora_target_modules q_proj,v_proj \
    --init_adapter "$W/x"
edit "$W/lora" adapter_config.json bias 0 "$W/x"
refused "adapter bias 0" "bias must be a string" "$W/x" $TRY --lora_rank 4 --lora_target_modules q_proj,v_proj --init_adapter "$W/x"
edit "$W/lora" adapter_config.json use_rslora 1 "$W/x"
refused "adapter use_rslora 1" "use_rslora must be true or false" "$W/x" $TRY --lora_rank 4 --lora_target_modules q_proj,v_proj \
    --init_adapter "$W/x"
edit "$W/lora" adapter_config.json use_dora null "$W/x"
trains "adapter use_dora null" $TRY --lora_rank 4 --lora_target_modules q_proj,v_proj --init_adapter "$W/x"

# ---- tokenizer.json ----
mkdir -p "$W/t"
edit "$TOK" - added_tokens.1.special 1 "$W/t/special.json"
refused "tokenizer added token special 1" "added token 1 \(\"<s>\"\): special must be true or false" "$W/t" $TRY --tokenizer "$W/t/special.json"
edit "$TOK" - model.byte_fallback '"true"' "$W/t/fallback.json"
refused "tokenizer byte_fallback \"true\"" "byte_fallback and ignore_merges must be true or false" "$W/t" $TRY --tokenizer "$W/t/fallback.json"
trains "the tokenizer as it is" $TRY --tokenizer "$TOK"
