# The suite runner behind run_tests.sh (and test/meta/test_run_tests.sh, which runs it on made-up
# suites): `source test/suites.sh [--quick]`, then suite/quick/alone lines, then suites_report,
# whose status is the run's. Each suite's lines and seconds are printed in the order the suites
# were given, whatever order they end in; the report ends with the ten slowest, the total and,
# past the budget (FSDPC_TEST_BUDGET seconds, else 30 minutes or make check's 3), a warning naming
# the slowest.
#
# `suite`s run FSDPC_TEST_JOBS at a time (default 2: CI's cores). Most suites wait on processes
# that wait on each other (mpirun's ranks, timeouts, Python and node start-up) and use about half
# a core, so two at a time finish in little more than the longer one's time. `quick` suites (make
# check's tier, whose seconds test_check_tier judges) and `alone` suites run with nothing beside.
LOG=$(mktemp)
TIMES=$(mktemp)
DUMP=$(mktemp -d)
OUTS=$(mktemp -d)
chmod 711 "$OUTS"
trap 'rm -rf "$LOG" "$DUMP" "$TIMES" "$OUTS"' EXIT
JOBS=${FSDPC_TEST_JOBS:-2}
PENDING=()  # the output files of started suites not yet printed, in the order they were given
STARTED=0

TIER=${1:-}
run_suite() {  # run_suite NAME CMD... >OUT: a suite that exits non-zero without a "not ok" line still counts as a failure
    echo "# $1"
    local out rc t TIMEFORMAT="%R %U %S"
    t=$({ time { out=$("${@:2}" 2>&1); rc=$?; declare -p out rc >"$OUT.state"; }; } 2>&1)
    source "$OUT.state"
    echo "$out" | grep -E '^(ok|not ok) ' | tee "$OUT.log" || true
    echo "$out" | grep -vE '^(ok|not ok) ' | sed 's/^/#   /' | tail -n 5
    local failed
    failed=$(grep -c '^not ok ' "$OUT.log")
    if [ $rc -ne 0 ] && [ "$failed" = 0 ]; then echo "not ok - $1 exited with $rc" | tee -a "$OUT.log"; failed=1; fi
    # wall seconds, and the CPU seconds of all its processes (a loaded machine stretches only the first)
    echo "$t" | awk '{ printf "#   %d s wall, %d s cpu\n", $1, $2 + $3 }'
    # TIMES: wall and CPU seconds, tier, failures, name
    echo "$t $SUITE_TIER $failed $1" | awk '{ w = $1; c = $2 + $3; t = $4; f = $5; $1 = $2 = $3 = $4 = $5 = ""; sub(/^ +/, "")
        printf "%d\t%d\t%s\t%d\t%s\n", w, c, t, f, $0 }' >"$OUT.time"
}
suites_print() {  # the finished suites at the head of the queue: their lines, in the order given
    while [ ${#PENDING[@]} -gt 0 ] && [ -e "${PENDING[0]}.done" ]; do
        cat "${PENDING[0]}"
        cat "${PENDING[0]}.log" >>"$LOG"
        cat "${PENDING[0]}.time" >>"$TIMES"
        PENDING=("${PENDING[@]:1}")
    done
}
suites_wait() {  # until at most $1 suites run
    while [ "$(jobs -rp | wc -l)" -gt "$1" ]; do wait -n; suites_print; done
    suites_print
}
start_suite() {  # start_suite TIER NAME CMD...
    STARTED=$((STARTED + 1))
    local out
    out=$OUTS/$(printf %03d $STARTED)
    PENDING+=("$out")
    # Open MPI's session folders per suite: a singleton that ends removes the shared top folder
    # while another suite's start is creating its own inside it ("mkdir ... No such file")
    # (mode 1777 in a folder others may cross, as /tmp: probes run fsdpc as another user)
    mkdir -p -m 1777 "$out.ompi"
    { OMPI_MCA_orte_tmpdir_base=$out.ompi SUITE_TIER=$1 OUT=$out run_suite "${@:2}" >"$out"; touch "$out.done"; } &
}
suite() {  # the whole suite only (make test), beside others
    [ "$TIER" = --quick ] && return
    suites_wait $((JOBS - 1))
    start_suite full "$@"
}
alone() {  # the whole suite only, with nothing beside it
    [ "$TIER" = --quick ] && return
    suites_wait 0; start_suite full "$@"; suites_wait 0
}
quick() { suites_wait 0; start_suite quick "$@"; suites_wait 0; }  # both tiers (make check and make test), alone
# test_check_tier.sh reads the quick tier's results and seconds from this run instead of running it again
export FSDPC_SUITE_TIMES=$TIMES

suites_report() {
    suites_wait 0
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
