# lib: helpers the test scripts share; source it from the repository root.
# W is a scratch directory removed on exit; PREFIX goes before every check's name.
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# data caches inside the suite's own folder: no run reads a cache another suite (or run) left
export FSDPC_CACHE_DIR=$W/cache
MPI="timeout 120 mpirun --oversubscribe --allow-run-as-root"

check() {  # check NAME STATUS [DETAIL]: "ok" when STATUS is 0
    if [ "$2" = 0 ]; then echo "ok - ${PREFIX:-}$1"; else echo "not ok - ${PREFIX:-}$1 ${3:-}"; fi
}

# expect_error NAME REGEX CMD...: CMD exits non-zero without crashing or hanging (60 s), with
# exactly one "fsdpc: error:" line on stderr, matching REGEX
expect_error() {
    local name=$1 re=$2
    shift 2
    timeout 60 "$@" >"$W/out" 2>"$W/err"
    local rc=$? lines
    lines=$(grep -c '^fsdpc: error:' "$W/err")
    [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$lines" = 1 ] && grep -Eq -- "$re" "$W/err"
    check "error: $name" $? "(rc=$rc, $lines error lines: $(tr '\r' '\n' <"$W/err" | grep -m3 . | head -c 300 | tr '\n' '|'))"
}

# run NAME CMD...: a run (5 minutes at most) whose metrics go to $W/NAME.jsonl, stdout (generated
# text) to $W/NAME.out, stderr to $W/NAME.log and exit status to $W/NAME.rc; suites with runs of
# another shape define their own
run() {
    local name=$1
    shift
    timeout 300 "$@" --metrics_file "$W/$name.jsonl" >"$W/$name.out" 2>"$W/$name.log"
    echo $? >"$W/$name.rc"
}

losses() { sed -E 's/.*"loss": ([0-9.e+-]+).*/\1/' "$1"; }  # from a --metrics_file
# a --metrics_file (or stdin) without the fields that are measured (speed, memory, MFU, the
# memory tracker's "mem" object) rather than computed, which differ between equal runs: for
# byte-exact comparisons
steady() { sed -E 's/, "(tokens_per_s|mem_mib|mfu)": [^,}]*//g; s/, "mem": \{[^}]*\}//g' "$@"; }

# rel_diff A B N MAX [MIN]: prints the worst relative difference between the losses of two
# metrics files; succeeds when both hold N steps and MIN < worst <= MAX
rel_diff() {
    paste <(losses "$1") <(losses "$2") | awk -v n="$3" -v max="$4" -v min="${5:--1}" '
        NF == 2 { k++; d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d }
        END { printf "%.1e", w; exit !(k == n && w <= max && w > min) }'
}

# padded_rows FILE SEED ROWS MAX_ID: JSON Lines of ROWS padded rows of 48 token ids (5 to 40 real
# ones in 3..MAX_ID, then 0s) with their attention masks: packing's input, each layout padding it
# differently
padded_rows() {
    /usr/bin/python3 -c "
import json, random, sys
random.seed(int(sys.argv[2]))
with open(sys.argv[1], 'w') as f:
    for i in range(int(sys.argv[3])):
        n = random.randint(5, 40)
        f.write(json.dumps({'input_ids': [random.randint(3, int(sys.argv[4])) for _ in range(n)] + [0] * (48 - n),
                            'attention_mask': [1] * n + [0] * (48 - n)}) + '\\n')" "$@"
}

NPM=${FSDPC_NPM_CACHE:-build/npm}
# npm_fetch NAME@VERSION...: test fixtures from the npm registry, each installed once into
# $NPM/NAME and kept for later runs; NODE_PATH is set to them. Returns 1 with the reason in
# NPM_SKIP when node or npm is missing or the registry cannot be reached.
npm_fetch() {
    NPM_SKIP=""
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        NPM_SKIP="node or npm is not installed"
        return 1
    fi
    local p dir paths=""
    for p; do
        dir=$NPM/${p%@*}
        if [ ! -f "$dir/.complete" ]; then
            if ! { rm -rf "$dir" && mkdir -p "$dir" &&
                timeout 180 npm install --loglevel error --no-audit --no-fund --no-package-lock --fetch-retries 1 --fetch-timeout 30000 \
                    --prefix "$dir" "$p" >"$W/npm.log" 2>&1 && touch "$dir/.complete"; }; then
                NPM_SKIP="npm cannot fetch $p, is the registry reachable? ($(grep -m1 "npm error code" "$W/npm.log" | head -c 80))"
                return 1
            fi
        fi
        paths="$paths${paths:+:}$(cd "$dir" && pwd)/node_modules"
    done
    export NODE_PATH=$paths
}

# refused_unchanged NAME REGEX CMD...: CMD ends non-zero (no crash, no hang) with exactly one
# error line matching REGEX, and every input listed in $W/inputs.sha is unchanged
refused_unchanged() {
    local name=$1 re=$2 rc lines
    shift 2
    timeout 60 "$@" >"$W/out" 2>"$W/err"
    rc=$?
    lines=$(grep -c '^fsdpc: error:' "$W/err")
    [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$lines" = 1 ] && grep -Eq -- "$re" "$W/err" && sha256sum -c --quiet "$W/inputs.sha" >/dev/null 2>&1
    check "$name" $? "(rc=$rc, $lines error lines: $(grep -m2 . "$W/err" | head -c 300 | tr '\n' '|'))"
}

# kill_paused_rank1 LOG: waits (30 s at most) for a run's "paused (rank 1, pid N)" line in LOG
# (FSDPC_TEST_CKPT_PAUSE), then kills that rank with SIGKILL; its pid is left in $victim
kill_paused_rank1() {
    for _ in $(seq 300); do grep -q "paused (rank 1" "$1" && break; sleep 0.1; done
    victim=$(sed -nE 's/.*paused \(rank 1, pid ([0-9]+)\).*/\1/p' "$1" | head -1)
    [ -n "$victim" ] && kill -9 "$victim"
}

# Equal-loss suites (tp, cp): eq_run NAME NP FLAGS... runs $EQ FLAGS at NP ranks (under $MPI past
# one), metrics into $W/NAME.jsonl, log into $W/NAME.log; same_losses NAME A B checks that runs A
# and B's training and validation losses agree within 1e-5 relative (over STEPS steps, 6 unless a
# fourth argument gives them)
eq_run() {
    local name=$1 np=$2
    shift 2
    if [ "$np" = 1 ]; then $EQ "$@" --metrics_file "$W/$name.jsonl" >"$W/$name.log" 2>&1
    else $MPI -np "$np" $EQ "$@" --metrics_file "$W/$name.jsonl" >"$W/$name.log" 2>&1; fi
}
val_losses() { grep -o '"val_loss": [0-9.e+-]*' "$1" | sed 's/.*: //'; }
same_losses() {
    local d rc rv
    d=$(rel_diff "$W/$2.jsonl" "$W/$3.jsonl" "${4:-6}" 1e-5)
    rc=$?
    paste <(val_losses "$W/$2.jsonl") <(val_losses "$W/$3.jsonl") |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (NF < 2 || d > 1e-5 * $1) bad = 1; n++ } END { exit bad || n < 2 }'
    rv=$?
    [ $rc = 0 ] && [ $rv = 0 ]
    check "$1 (worst relative loss difference $d)" $? "$(tail -c 300 "$W/$3.log" | tr '\n' '|')"
}
eq_resumed() {  # eq_resumed NAME NP SOURCE_DIR FLAGS...: steps 4-6 from SOURCE_DIR's step 3 (the suite sets $CK)
    local name=$1 np=$2 src=$3
    shift 3
    mkdir -p "$W/$name.ck" && cp "$src/step_00000003.h5" "$W/$name.ck/"
    eq_run "$name" "$np" $CK --checkpoint_dir "$W/$name.ck" --resume_from_checkpoint "$W/$name.ck" "$@"
    grep -o '"loss": [0-9.e+-]*' "$W/$name.jsonl" | sed 's/.*: //' >"$W/$name.losses"
}
eq_tail_losses() { grep -o '"loss": [0-9.e+-]*' "$W/$1.jsonl" | tail -3 | sed 's/.*: //'; }
eq_agree() {  # eq_agree NAME A B: the resumed run B's three losses against A's last three (1e-5 relative)
    paste <(eq_tail_losses "$2") "$W/$3.losses" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (NF < 2 || d > 1e-5 * $1) bad = 1; n++ }
        END { exit bad || n != 3 }'
    check "$1" $? "$(paste <(eq_tail_losses "$2") "$W/$3.losses" | tr '\n' '|'; grep -m1 error "$W/$3.log")"
}
# masked_rows FILE SEED MIN: 200 JSON rows of 1..255 ids (MIN to 32 of them) whose first half's
# labels are -100 (no loss)
masked_rows() {
    /usr/bin/python3 - "$@" <<'PY'
import json, random, sys
rng = random.Random(int(sys.argv[2]))
with open(sys.argv[1], "w") as f:
    for _ in range(200):
        ids = [rng.randrange(1, 256) for _ in range(rng.randrange(int(sys.argv[3]), 33))]
        f.write(json.dumps({"input_ids": ids, "labels": [-100] * (len(ids) // 2) + ids[len(ids) // 2:]}) + "\n")
PY
}
