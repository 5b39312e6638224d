#!/usr/bin/env bash
# test_docs: README.md stays short, the docs' links lead somewhere, DESIGN.md's source tree is the
#  tree's, and their marked commands run.
#  (a) README.md is under 200 lines and links every docs/ page; every relative link in README.md
#      and docs/*.md names an existing file, and every #anchor a heading of it; no source file
#      sends readers to a README section (they moved into docs/); docs/DESIGN.md's source-tree
#      table names every folder of source files in `git ls-files`, and no path that is not there.
#  (b) each shell block marked by a `<!-- test -->` line just before it runs, command by command,
#      in a scratch folder of its own, and every command must exit 0 (pipelines: every part).
#      The folder holds ./fsdpc and the fixtures the docs name, at the paths they write:
#        data/tinyshakespeare.txt   the bundled corpus
#        tokenizer.model            test/fixtures/tokenizer/tokenizer.model (a 1000-piece SentencePiece model)
#        corpus.jsonl               400 {"text": ...} documents, Tiny Shakespeare's first paragraphs
#      Mark only blocks that are cheap on a CPU (the tiny model, a few steps; plan; tokenize).
cd "$(dirname "$0")/../.."
source test/lib.sh
PY=/usr/bin/python3
DOCS=(README.md docs/*.md)

n=$(wc -l <README.md)
[ "$n" -lt 200 ]
check "README.md is under 200 lines ($n)" $?

missing=""
for page in docs/*.md; do
    grep -qF "(${page})" README.md || missing+=" $page"
done
[ -z "$missing" ]
check "README.md links every docs/ page" $? "(not linked:$missing)"

$PY test/meta/docs_check.py links . "${DOCS[@]}" >"$W/links.out" 2>&1
check "every relative link and #anchor in README.md and docs/*.md resolves" $? "$(head -c 600 "$W/links.out" | tr '\n' '|')"

# the checker can fail: a missing file and a missing anchor, in a copy of the layout
mkdir -p "$W/plant/docs"
printf '# Top\n\n## Two words\n\n[a](docs/b.md#two-words) [ok](#two-words) [code, not a link: `[x](gone.md)`]\n' >"$W/plant/README.md"
printf '# B\n\n## Two words\n\n[up](../README.md#top) [gone](gone.md) [bad](../README.md#three-words)\n' >"$W/plant/docs/b.md"
$PY test/meta/docs_check.py links "$W/plant" "$W/plant/README.md" "$W/plant/docs/b.md" >"$W/plant.out" 2>&1
[ $? = 1 ] && [ "$(wc -l <"$W/plant.out")" = 2 ] && grep -q 'docs/b.md:5: \[gone.md\]: no file docs/gone.md' "$W/plant.out" &&
    grep -q 'docs/b.md:5: \[../README.md#three-words\]: README.md has no heading with the anchor #three-words' "$W/plant.out"
check "a planted missing file and missing anchor are found, and nothing else" $? "$(tr '\n' '|' <"$W/plant.out")"

# docs/DESIGN.md's source-tree table names every folder of source files, and only paths that exist
$PY test/meta/docs_check.py tree . >"$W/tree.out" 2>&1
check "docs/DESIGN.md's source-tree table matches git ls-files" $? "$(head -c 600 "$W/tree.out" | tr '\n' '|')"

# the tree check can fail: a folder of a .c file the table does not name, and a row naming a path
# that does not exist, in a root of links to this tree with a copy of DESIGN.md
mkdir -p "$W/plant4/docs" "$W/plant4/extra"
for f in *; do [ "$f" = docs ] || ln -s "$PWD/$f" "$W/plant4/$f"; done
sed '/^## Source tree/,/^|---/{/^|---/a | `gone/` | a folder that is not there |
}' docs/DESIGN.md >"$W/plant4/docs/DESIGN.md"
touch "$W/plant4/extra/x.c"
$PY test/meta/docs_check.py tree "$W/plant4" $(git ls-files) extra/x.c >"$W/plant4.out" 2>&1
[ $? = 1 ] && [ "$(wc -l <"$W/plant4.out")" = 2 ] &&
    grep -q '^docs/DESIGN.md:[0-9]*: `gone/` is in the source-tree table but not in the tree$' "$W/plant4.out" &&
    grep -q "^extra/: a folder of source files that docs/DESIGN.md's source-tree table does not name$" "$W/plant4.out"
check "a planted unnamed folder and a row naming a missing path are found, and nothing else" $? "$(tr '\n' '|' <"$W/plant4.out")"

stale=$(grep -rnE "README('s|(\\.md)?(, |: | )\\(?\")" --include='*.c' --include='*.h' --include='*.cu' --include='*.cpp' \
    --include='*.sh' --include='*.py' --include=Makefile --include='*.md' \
    base kernels comm model shard data ckpt run main.c test bench docs Makefile 2>/dev/null | grep -v '^test/meta/test_docs.sh:')
[ -z "$stale" ]
check "no source or doc sends readers to a README section" $? "$(echo "$stale" | head -3 | tr '\n' '|')"

# ---- (b) the marked commands ----
sandbox() {  # sandbox DIR: a clean clone of this repository, with ./fsdpc and the documented fixtures (ignored there)
    git clone -q --shared "$PWD" "$1" || return 1
    ln -s "$PWD/fsdpc" "$1/fsdpc"
    ln -s "$PWD/test/fixtures/tokenizer/tokenizer.model" "$1/tokenizer.model"
    ln -s "$W/corpus.jsonl" "$1/corpus.jsonl"
    printf '/tokenizer.model\n/corpus.jsonl\n' >>"$1/.git/info/exclude"
}
$PY - "$W/corpus.jsonl" <<'EOF'
import json, sys
docs = [d for d in open("data/tinyshakespeare.txt").read().split("\n\n") if d.strip()][:400]
with open(sys.argv[1], "w") as f:
    for d in docs:
        f.write(json.dumps({"text": d}) + "\n")
EOF

# run_blocks TAG FILE...: runs the marked blocks of FILEs, each from the root of a clean clone as a
# reader would; one ok/not ok line per command, and one per block for the clone's git status
# staying clean (no command writes into the source tree)
run_blocks() {
    local tag=$1 where block cmd rc dir n=0 dirs=()
    shift
    while IFS=$'\t' read -r -d '' where block cmd; do
        dir="$W/$tag/$(basename "${where%%:*}" .md).$block"
        [ -d "$dir" ] || { sandbox "$dir" && dirs+=("$dir:${where%%:*}"); }
        (cd "$dir" && timeout 120 bash -o pipefail -c "$cmd") >"$dir.out" 2>&1
        rc=$?
        check "$where runs: $(echo "$cmd" | cut -c1-110)" $rc "(exit $rc: $(tail -c 300 "$dir.out" | tr '\n' '|'))"
        n=$((n + 1))
    done < <($PY test/meta/docs_check.py blocks "$@")
    for d in "${dirs[@]}"; do
        dirty=$(git -C "${d%%:*}" status --porcelain | head -5 | tr '\n' ' ')
        [ -z "$dirty" ]
        check "${d#*:} block ${d%%:*}: git status of the clone stays clean" $? "($dirty)"
    done
    echo "# $n commands from $tag"
}
mkdir -p "$W/docs" "$W/plant2"
run_blocks docs "${DOCS[@]}" | tee "$W/run.out"
cmds=$(grep -c '^\(ok\|not ok\) - .* runs: ' "$W/run.out")
[ "$cmds" -ge 12 ]
check "the docs hold marked commands ($cmds, at least 12)" $?

# the runner can fail: a planted block with an unknown flag
printf '# P\n\n<!-- test -->\n```sh\n./fsdpc --max_steps 0 \\\n    --no_such_flag 1\n```\n' >"$W/plant2/p.md"
run_blocks plant2 "$W/plant2/p.md" >"$W/plant2.out" 2>&1
grep -q "^not ok - .*p.md:5 runs: ./fsdpc --max_steps 0     --no_such_flag 1 (exit 1: .*unknown flag '--no_such_flag'" "$W/plant2.out"
check "a planted command that fails is reported with its file, line and error" $? "$(tr '\n' '|' <"$W/plant2.out" | head -c 400)"

# the clean-tree check can fail: a planted block that writes beside the sources
mkdir -p "$W/plant3"
printf '# P\n\n<!-- test -->\n```sh\necho x >ckpt/planted.txt\n```\n' >"$W/plant3/p.md"
run_blocks plant3 "$W/plant3/p.md" >"$W/plant3.out" 2>&1
grep -q "^not ok - .*p.md block .*: git status of the clone stays clean (?? ckpt/planted.txt" "$W/plant3.out"
check "a planted command that writes into the source tree is caught by the clone's git status" $? "$(tr '\n' '|' <"$W/plant3.out" | head -c 400)"
