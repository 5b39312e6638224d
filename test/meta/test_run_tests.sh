#!/bin/bash
# test_run_tests: the suite runner (test/suites.sh, behind make test and make check) on made-up
# suites: each suite's seconds after its lines, the failures again, the ten slowest, the total,
# and the over-budget warning naming the slowest (a warning: the status stays the suites').
cd "$(dirname "$0")/../.." || exit 1
source test/lib.sh
cat >"$W/fake.sh" <<'EOF'
cd "$1" && shift
source test/suites.sh
suite "slow one" bash -c 'sleep 2; echo "ok - slept"'
beside "beside one" bash -c 'sleep 1; echo "ok - beside"'
quick "quick one" bash -c 'echo "ok - quick"'
beside_wait
[ -n "${FAKE_FAIL:-}" ] && suite "broken one" bash -c 'echo "not ok - planted"'
[ -n "${FAKE_FAIL:-}" ] && suite "silent crash" bash -c 'exit 3'
suites_report
EOF
FSDPC_TEST_BUDGET=1 bash "$W/fake.sh" "$PWD" >"$W/over.out" 2>&1
rc=$?
[ $rc = 0 ] && tail -1 "$W/over.out" | grep -qx '3 passed, 0 failed'
check "a passing run exits 0 and ends with 'N passed, N failed' past its budget" $? "(rc=$rc: $(tail -1 "$W/over.out"))"
[ "$(grep -cE '^#   [0-9]+ s wall, [0-9]+ s cpu$' "$W/over.out")" = 3 ]
check "each suite's wall and CPU seconds follow its lines" $? "$(grep -c 's wall' "$W/over.out")"
grep -A1 '^# slow one' "$W/over.out" | grep -q '^ok - slept' && grep -qE '^#   +[2-9] s wall +[0-9]+ s cpu  slow one$' "$W/over.out"
check "the ten slowest list the sleeping suite with its seconds" $? "$(grep -A4 'ten slowest' "$W/over.out" | tr '\n' '|')"
grep -qE '^# warning: the run took [0-9]+ s, over its 1 s budget; the slowest: slow one \([2-9] s\), beside one' "$W/over.out"
check "past the budget a warning names the slowest suites first" $? "$(grep warning "$W/over.out")"

FSDPC_TEST_BUDGET=100 bash "$W/fake.sh" "$PWD" >"$W/under.out" 2>&1
! grep -q '^# warning' "$W/under.out" && grep -qE '^# total: [0-9]+ s$' "$W/under.out"
check "within the budget: the total, no warning" $?

FAKE_FAIL=1 FSDPC_TEST_BUDGET=100 bash "$W/fake.sh" "$PWD" >"$W/fail.out" 2>&1
rc=$?
[ $rc != 0 ] && tail -1 "$W/fail.out" | grep -qx '3 passed, 2 failed' &&
    grep -A3 '^# the failed checks:' "$W/fail.out" | grep -q 'planted' &&
    grep -q '^not ok - silent crash exited with 3' "$W/fail.out"
check "failures (a 'not ok' line, a suite exiting 3 without one) fail the run and are listed again" $? "(rc=$rc: $(tail -1 "$W/fail.out"))"
