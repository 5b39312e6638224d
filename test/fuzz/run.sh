#!/usr/bin/env bash
# make fuzz: runs each libFuzzer target for SECONDS from the regression corpus; new crashes land in
# build/fuzz/ as crash-<target>-* (copy them into test/fuzz/corpus/<target>/ once fixed).
# Usage: run.sh SECONDS TARGET...
set -u
cd "$(dirname "$0")/../.."
secs=$1
shift
status=0
for t in "$@"; do
    name=$(basename "$t")
    work=build/fuzz/work-$name
    mkdir -p "$work" "test/fuzz/corpus/$name"
    "$t" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="build/fuzz/crash-$name-" "$work" \
        "test/fuzz/corpus/$name" >"build/fuzz/$name.log" 2>&1
    rc=$?
    execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "build/fuzz/$name.log")
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "build/fuzz/$name.log" | tail -1)
    printf '%-20s %s s  %s executions  %s  %s\n' "$name" "$secs" "${execs:-?}" "${cov:-?}" "$([ $rc = 0 ] && echo clean || echo "FOUND A CRASH (rc=$rc): build/fuzz/$name.log")"
    [ $rc = 0 ] || status=1
done
exit $status
