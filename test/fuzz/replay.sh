#!/usr/bin/env bash
# make test: every input in the regression corpus (seeds and past crashes) runs once through its
# fuzz target under ASan/UBSan; "ok"/"not ok" per target.
cd "$(dirname "$0")/../.."
source test/lib.sh
for dir in test/fuzz/corpus/*/; do
    name=$(basename "$dir")
    n=$(ls "$dir" | wc -l)
    out=$("build/fuzz/$name" -runs=0 "$dir" 2>&1)
    check "fuzz corpus replay: $name ($n inputs)" $? "$(echo "$out" | grep -m3 -E 'ERROR|SUMMARY|runtime error')"
done
