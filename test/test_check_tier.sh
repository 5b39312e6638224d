#!/bin/bash
# test_check_tier: make check's tier (run_tests.sh --quick) passes, ends with "N passed, N failed"
# and takes under 3 minutes, with the suites it must hold: the layer check, the command-line
# table, the kernel and whole-model gradient checks, and a multi-rank equivalence.
cd "$(dirname "$0")/.." || exit 1
source test/lib.sh
start=$(date +%s)
timeout 300 bash test/run_tests.sh --quick >"$W/quick.out" 2>&1
rc=$?
secs=$(($(date +%s) - start))
last=$(tail -1 "$W/quick.out")
[ $rc = 0 ] && [[ "$last" =~ ^[0-9]+\ passed,\ 0\ failed$ ]]
check "make check's tier passes and ends with 'N passed, N failed' ($last)" $? "(rc=$rc)"
[ $secs -lt 180 ]
check "make check's tier takes under 3 minutes ($secs s)" $?
for s in "layers:" "help:" "kernels:" "model: whole-model gradient check" "shard (fast tier)"; do
    grep -q "^# $s" "$W/quick.out"
    check "make check runs '$s'" $?
done
