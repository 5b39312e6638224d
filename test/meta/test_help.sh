#!/usr/bin/env bash
# The command table: --help, -h and `fsdpc help` for every subcommand on 1 and 2 ranks (exit 0,
# printed once, every flag of its table listed), unknown flags and subcommands answered with the
# nearest name, and the table against the flags the docs name. FLAGS_DOC is the file that lists
# the training flags (its "## Flags" section, or the whole file when it has none).
cd "$(dirname "$0")/../.."
source test/lib.sh
FSDPC=${FSDPC:-./fsdpc}
FLAGS_DOC=${FLAGS_DOC:-docs/flags.md}
COMMANDS="train prepare tokenize export plan"

argv() { [ "$1" = train ] || echo "$1"; }  # a command's name on the command line
table() { awk -v c="$1" '$1 == c { for (i = 2; i <= NF; i++) print $i }' "$W/flags"; }  # its flags and aliases
named() { grep -qE -- "$1([^a-z0-9_]|\$)" "${@:2}"; }  # named FLAG FILE...: the file names --FLAG

timeout 60 "$FSDPC" help --flags >"$W/flags" 2>"$W/flags.err"
rc=$?
n=$(wc -l <"$W/flags")
absent=$(for c in $COMMANDS; do grep -q "^$c --" "$W/flags" || echo "$c"; done)
[ $rc = 0 ] && [ "$n" -gt 100 ] && [ ! -s "$W/flags.err" ] && [ -z "$absent" ]
check "help --flags lists the flags of every command ($n lines)" $?

for c in $COMMANDS; do
    for form in --help -h; do
        timeout 60 "$FSDPC" $(argv $c) $form >"$W/h" 2>"$W/e"
        rc=$?
        [ $rc = 0 ] && head -1 "$W/h" | grep -q "^usage: fsdpc" && ! grep -q "error" "$W/e"
        check "$c $form exits 0 with the usage on stdout" $? "(rc=$rc: $(head -c 200 "$W/e"))"
    done
    missing=$(table $c | while read -r f; do named "$f" "$W/h" || echo "$f"; done | tr '\n' ' ')
    [ -z "$missing" ] && [ -n "$(table $c)" ]
    check "$c --help lists every flag and alias of its table" $? "(missing: $missing)"
    long=$(awk 'length($0) > 100' "$W/h" | wc -l)
    [ "$long" = 0 ]
    check "$c --help keeps within 100 columns" $? "($long longer lines)"
    if [ $c != train ]; then
        timeout 60 "$FSDPC" help $c >"$W/h2" 2>/dev/null && cmp -s "$W/h" "$W/h2"
        check "fsdpc help $c prints what $c --help does" $?
    fi
    $MPI -np 2 "$FSDPC" $(argv $c) --help >"$W/h2" 2>"$W/e2"
    rc=$?
    [ $rc = 0 ] && [ "$(grep -c '^usage:' "$W/h2")" = 1 ] && cmp -s "$W/h" "$W/h2"
    check "$c --help on 2 ranks exits 0 and prints once" $? "(rc=$rc, $(grep -c '^usage:' "$W/h2") usage lines)"
done

for form in help "--help --lr 1" "--max_steps 3 -h"; do
    timeout 60 "$FSDPC" $form >"$W/h" 2>/dev/null
    [ $? = 0 ] && grep -q "^subcommands:" "$W/h" && grep -q "^  prepare " "$W/h" && grep -q "^seed recipes" "$W/h"
    check "fsdpc $form lists the subcommands and the flags by group" $?
done
"$FSDPC" --help >"$W/h"
groups=$(grep -E '^[a-z][a-z ]*(\(.*\))?:$' "$W/h" | cut -d: -f1 | cut -d' ' -f1-2 | tr '\n' ,)
[ "$groups" = "subcommands,model,sharding,training,data,finetuning data,checkpoints,run,generate,seed recipes," ]
check "training flags are grouped as the README groups them" $? "($groups)"
grep -A2 -E '^  --batch_size ' "$W/h" | grep -q -- "alias --train_batch_size" &&
    grep -A3 -E '^  --resume_from_checkpoint ' "$W/h" | grep -q -- "--restart_checkpoint_file, --ckpt_load_path"
check "seed-recipe spellings are listed as aliases of their flag" $?
grep -A1 -E '^  --batch_size ' "$W/h" | grep -q "default: 16" && grep -A2 -E '^  --sharding ' "$W/h" | grep -q "default: full-shard" &&
    grep -A1 -E '^  --trace_steps ' "$W/h" | grep -q "default: 1:3"
check "defaults come from the defaults parsing sets" $?
"$FSDPC" prepare --help | grep -A1 -E '^  --shard_tokens ' | grep -q "default: 100000000"
check "a subcommand's defaults come from its own" $?
timeout 60 "$FSDPC" prepare --output "$W/x" --input a.txt -h >/dev/null 2>"$W/e"
check "-h among the inputs still asks for help" $? "$(head -c 200 "$W/e")"

# a typo names the nearest flag, of the command's table or (plan) its base
expect_error "a typo of a flag" "unknown flag '--batchsize' \(did you mean --batch_size\?\)$" "$FSDPC" --batchsize 4
expect_error "a typo of an alias" "did you mean --seq_len\?" "$FSDPC" --seqlen 64
expect_error "dashes for underscores" "did you mean --max_steps\?" "$FSDPC" --max-steps 3
expect_error "two letters swapped" "did you mean --num_heads\?" "$FSDPC" --nmu_heads 3
expect_error "nothing near: the help is named" "unknown flag '--bogus' \(fsdpc --help lists the flags\)" "$FSDPC" --bogus 1
expect_error "prepare: a typo" "unknown flag '--outptu' for prepare \(did you mean --output\?\)" "$FSDPC" prepare --outptu x
expect_error "export: a typo" "unknown flag '--chekpoint' for export \(did you mean --checkpoint\?\)" "$FSDPC" export --chekpoint x
expect_error "tokenize: a typo" "unknown flag '--tokeniser' for tokenize \(did you mean --tokenizer\?\)" "$FSDPC" tokenize --tokeniser byte
expect_error "plan: a typo of its own flag" "for plan \(did you mean --world_size\?\)" "$FSDPC" plan --wrold_size 4
expect_error "plan: a typo of a training flag" "for plan \(did you mean --hidden_width\?\)" "$FSDPC" plan --hiden_width 64
expect_error "tokenize: nothing near" "unknown flag '--bogus' for tokenize \(fsdpc tokenize --help lists the flags\)" \
    "$FSDPC" tokenize --tokenizer byte --bogus
expect_error "a typo of a subcommand" "unknown subcommand 'prepar': did you mean prepare\? \(subcommands: help, prepare, tokenize, export, plan;" \
    "$FSDPC" prepar --input x
expect_error "an unknown subcommand" "unknown subcommand 'train' \(subcommands: help, prepare" "$FSDPC" train --lr 1
expect_error "help of an unknown subcommand" "unknown subcommand 'bogus'" "$FSDPC" help bogus
expect_error "two spellings of one setting that disagree" "--embed_size 32 contradicts --hidden_width given before it" \
    "$FSDPC" --hidden_width 64 --embed_size 32
expect_error "two aliases of one setting that disagree" "--embd_pdrop 0.2 contradicts --resid_pdrop given before it" \
    "$FSDPC" --resid_pdrop 0.1 --embd_pdrop 0.2
expect_error "a typo on 2 ranks: one line" "did you mean --batch_size\?" $MPI -np 2 "$FSDPC" --batchsize 4

# the table against the docs: every flag the flags section names is a flag, every training flag
# (and alias) is in FLAGS_DOC, every subcommand's flag somewhere in README.md or docs/
awk '/^## / { if (on) exit; if ($0 ~ /^## Flags/) on = 1 } on' "$FLAGS_DOC" >"$W/section"
[ -s "$W/section" ] || cp "$FLAGS_DOC" "$W/section"
unknown=$(grep -oE -- '--[a-z][a-z0-9_]*' "$W/section" | sort -u | grep -vx -- --flag |
    while read -r f; do grep -qE -- " $f( |\$)" "$W/flags" || echo "$f"; done | tr '\n' ' ')
[ -s "$W/section" ] && [ -z "$unknown" ]
check "every flag $FLAGS_DOC's flags section names is in the table" $? "(not in the table: $unknown)"
undoc=$(table train | while read -r f; do named "$f" "$FLAGS_DOC" || echo "$f"; done | tr '\n' ' ')
[ -z "$undoc" ]
check "every training flag and alias is in $FLAGS_DOC" $? "(not there: $undoc)"
docs=$(ls README.md docs/*.md 2>/dev/null)
undoc=$(for c in prepare tokenize export plan; do table $c; done | sort -u | while read -r f; do named "$f" $docs || echo "$f"; done | tr '\n' ' ')
[ -z "$undoc" ]
check "every subcommand flag is in README.md or docs/" $? "(not there: $undoc)"
