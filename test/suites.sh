# The suite runner behind run_tests.sh (and test/meta/test_run_tests.sh, which runs it on made-up
# suites): `source test/suites.sh [--quick]`, then suite/quick/beside lines, then suites_report, whose
# status is the run's. Each suite's seconds follow its lines; the report ends with the ten slowest,
# the total and, past the budget (FSDPC_TEST_BUDGET seconds, else 30 minutes or make check's 3),
# a warning naming the slowest.
LOG=$(mktemp)
TIMES=$(mktemp)
trap 'rm -rf "$LOG" "$DUMP" "$TIMES"' EXIT
DUMP=$(mktemp -d)

TIER=${1:-}
run_suite() {  # run_suite NAME CMD...: a suite that exits non-zero without a "not ok" line still counts as a failure
    echo "# $1"
    local out rc t TIMEFORMAT="%R %U %S" state
    state=$(mktemp -p "$DUMP")  # its own file: a suite started by beside runs at the same time
    t=$({ time { out=$("${@:2}" 2>&1); rc=$?; declare -p out rc >"$state"; }; } 2>&1)
    source "$state"
    # wall seconds, and the CPU seconds of all its processes (a loaded machine stretches only the first)
    echo "$out" | tee -a "$LOG" | grep -E '^(ok|not ok) ' || true
    echo "$out" | grep -vE '^(ok|not ok) ' | sed 's/^/#   /' | tail -n 5
    local failed
    failed=$(echo "$out" | grep -c '^not ok ')
    if [ $rc -ne 0 ] && [ "$failed" = 0 ]; then echo "not ok - $1 exited with $rc" | tee -a "$LOG"; failed=1; fi
    echo "$t" | awk '{ printf "#   %d s wall, %d s cpu\n", $1, $2 + $3 }'
    # TIMES: wall and CPU seconds (a loaded machine stretches only the first), tier, failures, name
    echo "$t $SUITE_TIER $failed $1" | awk '{ w = $1; c = $2 + $3; t = $4; f = $5; $1 = $2 = $3 = $4 = $5 = ""; sub(/^ +/, "")
        printf "%d\t%d\t%s\t%d\t%s\n", w, c, t, f, $0 }' >>"$TIMES"
}
suite() { [ "$TIER" = --quick ] || SUITE_TIER=full run_suite "$@"; }  # the whole suite only (make test)
quick() { SUITE_TIER=quick run_suite "$@"; }                        # both tiers (make check and make test)
# beside NAME CMD...: a whole-suite-only suite that runs next to the suites after it, up to
# beside_wait, which prints its lines. For a suite that is mostly one core's work (a compiler,
# the single-threaded emulator) and measures no time, next to another such.
beside() {
    [ "$TIER" = --quick ] && return
    BESIDE_OUT=$(mktemp -p "$DUMP")
    SUITE_TIER=full run_suite "$@" >"$BESIDE_OUT" &
    BESIDE_PID=$!
}
beside_wait() {
    [ -n "${BESIDE_PID:-}" ] || return 0
    wait "$BESIDE_PID"
    cat "$BESIDE_OUT"
    BESIDE_PID=
}
# test_check_tier.sh reads the quick tier's results and seconds from this run instead of running it again
export FSDPC_SUITE_TIMES=$TIMES


suites_report() {
    passed=$(grep -c '^ok ' "$LOG")
    failed=$(grep -c '^not ok ' "$LOG")
    # the failures again, where a log's tail shows them
    [ "$failed" = 0 ] || { echo "# the failed checks:"; grep '^not ok ' "$LOG" | cut -c1-300 | sed 's/^/#   /'; }
    echo "# the ten slowest suites (make test's budget: 30 minutes on 2 cores; make check's: 3)"
    sort -rn "$TIMES" | head -n 10 | awk -F'\t' '{ printf "#   %5d s wall %5d s cpu  %s\n", $1, $2, $5 }'
    echo "# total: $SECONDS s"
    budget=${FSDPC_TEST_BUDGET:-$([ "$TIER" = --quick ] && echo 180 || echo 1800)}
    # a warning, not a failure: shared CI machines are noisy, and a timing failure would block landing
    [ "$SECONDS" -le "$budget" ] || echo "# warning: the run took $SECONDS s, over its $budget s budget; the slowest: $(sort -rn "$TIMES" | head -n 3 | awk -F'\t' '{ sub(/:.*/, "", $5); printf "%s%s (%d s)", (NR > 1 ? ", " : ""), $5, $1 }')"
    echo "$passed passed, $failed failed"
    [ "$failed" = 0 ] && [ "$passed" -gt 0 ]
}
