#!/bin/bash
# test_run_tests: the suite runner (test/suites.sh, behind make test and make check) on made-up
# suites: two at a time but printed in the order given, `alone` with nothing beside, each suite's
# seconds after its lines, the failures again, the ten slowest, the total, and the over-budget
# warning naming the slowest (a warning: the status stays the suites').
cd "$(dirname "$0")/../.." || exit 1
source test/lib.sh
cat >"$W/fake.sh" <<'EOF'
cd "$1" && shift
source test/suites.sh
suite "slow one" bash -c 'touch "$FAKE/slow"; sleep 2; rm "$FAKE/slow"; echo "ok - slept"'
# ends first, while the slow one runs (or exits 1: nothing ran beside it)
suite "beside one" bash -c 'for _ in $(seq 50); do [ -e "$FAKE/slow" ] && break; sleep 0.1; done; [ -e "$FAKE/slow" ] && echo "ok - beside"'
alone "alone one" bash -c '[ ! -e "$FAKE/slow" ] && echo "ok - alone"'
quick "quick one" bash -c 'echo "ok - quick"'
[ -n "${FAKE_FAIL:-}" ] && suite "broken one" bash -c 'echo "not ok - planted"'
[ -n "${FAKE_FAIL:-}" ] && suite "silent crash" bash -c 'exit 3'
suites_report
EOF
export FAKE=$W
FSDPC_TEST_BUDGET=1 bash "$W/fake.sh" "$PWD" >"$W/over.out" 2>&1
rc=$?
[ $rc = 0 ] && tail -1 "$W/over.out" | grep -qx '4 passed, 0 failed'
check "a passing run exits 0 and ends with 'N passed, N failed' past its budget" $? "(rc=$rc: $(tail -1 "$W/over.out"))"
[ "$(grep -cE '^#   [0-9]+ s wall, [0-9]+ s cpu$' "$W/over.out")" = 4 ]
check "each suite's wall and CPU seconds follow its lines" $? "$(grep -c 's wall' "$W/over.out")"
[ "$(grep -E '^(# [a-z]+ one|ok - )' "$W/over.out" | tr '\n' '|')" = \
    "# slow one|ok - slept|# beside one|ok - beside|# alone one|ok - alone|# quick one|ok - quick|" ]
check "two suites run at a time, printed in the order given (the second ended first); alone with nothing beside" $? \
    "$(grep -E '^(# [a-z]+ one|ok - |not ok)' "$W/over.out" | tr '\n' '|')"
FSDPC_TEST_JOBS=1 bash "$W/fake.sh" "$PWD" >"$W/one.out" 2>&1
grep -q '^not ok - beside one exited with 1' "$W/one.out"
check "FSDPC_TEST_JOBS=1: one suite at a time" $? "$(tail -1 "$W/one.out")"
grep -A1 '^# slow one' "$W/over.out" | grep -q '^ok - slept' && grep -qE '^#   +[2-9] s wall +[0-9]+ s cpu  slow one$' "$W/over.out"
check "the ten slowest list the sleeping suite with its seconds" $? "$(grep -A4 'ten slowest' "$W/over.out" | tr '\n' '|')"
grep -qE '^# warning: the run took [0-9]+ s, over its 1 s budget; the slowest: slow one \([2-9] s\), ' "$W/over.out"
check "past the budget a warning names the slowest suites first" $? "$(grep warning "$W/over.out")"

FSDPC_TEST_BUDGET=100 bash "$W/fake.sh" "$PWD" >"$W/under.out" 2>&1
! grep -q '^# warning' "$W/under.out" && grep -qE '^# total: [0-9]+ s$' "$W/under.out"
check "within the budget: the total, no warning" $?

FAKE_FAIL=1 FSDPC_TEST_BUDGET=100 bash "$W/fake.sh" "$PWD" >"$W/fail.out" 2>&1
rc=$?
[ $rc != 0 ] && tail -1 "$W/fail.out" | grep -qx '4 passed, 2 failed' &&
    grep -A3 '^# the failed checks:' "$W/fail.out" | grep -q 'planted' &&
    grep -q '^not ok - silent crash exited with 3' "$W/fail.out"
check "failures (a 'not ok' line, a suite exiting 3 without one) fail the run and are listed again" $? "(rc=$rc: $(tail -1 "$W/fail.out"))"
