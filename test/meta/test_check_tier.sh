#!/bin/bash
# test_check_tier: make check's tier (run_tests.sh --quick) passes, ends with "N passed, N failed"
# and takes under 3 minutes, with the suites it must hold: the layer check, the command-line
# table, the kernel and whole-model gradient checks, and a multi-rank equivalence. Within make test
# it judges the quick suites that run already ran (see below); on its own it runs make check's tier.
cd "$(dirname "$0")/../.." || exit 1
source test/lib.sh
# Inside make test the quick suites have already run in this run (run_tests.sh's FSDPC_SUITE_TIMES:
# wall, cpu, tier, failures, name): their results and seconds are make check's, without a second run.
T=${FSDPC_SUITE_TIMES:-}
if [ -n "$T" ] && [ -s "$T" ] && awk -F'\t' '$3 == "quick"' "$T" | grep -q .; then
    awk -F'\t' '$3 == "quick" { print "# " $5 }' "$T" >"$W/quick.out"
    n=$(grep -c . "$W/quick.out")
    failed=$(awk -F'\t' '$3 == "quick" { f += $4 } END { print f + 0 }' "$T")
    secs=$(awk -F'\t' '$3 == "quick" { s += $1 } END { print s + 0 }' "$T")
    [ "$failed" = 0 ]
    check "make check's tier passes (its $n suites, run in this make test: $failed failed)" $?
else
    start=$(date +%s)
    timeout 300 bash test/run_tests.sh --quick >"$W/quick.out" 2>&1
    rc=$?
    secs=$(($(date +%s) - start))
    last=$(tail -1 "$W/quick.out")
    [ $rc = 0 ] && [[ "$last" =~ ^[0-9]+\ passed,\ 0\ failed$ ]]
    check "make check's tier passes and ends with 'N passed, N failed' ($last)" $? "(rc=$rc)"
fi
[ "$secs" -lt 180 ]
check "make check's tier takes under 3 minutes ($secs s)" $?
for s in "layers:" "help:" "kernels:" "model: whole-model gradient check" "shard (fast tier)"; do
    grep -q "^# $s" "$W/quick.out"
    check "make check runs '$s'" $?
done
