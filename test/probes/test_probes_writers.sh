#!/usr/bin/env bash
# Issue 39, classes 1 and 8: concurrent writers to one output, leftovers and runaway outputs.
# Class 1: two prepares into one --output never mix their shards: one writes, the other stops with
# one line (the folder's writer lock, base/wlock.h), whichever starts first; the same lock guards
# exports, --metrics_file, --tensorboard_dir and the traces. Class 8: temporaries of a killed
# writer are removed by the next one, a killed data cache build and the caches of earlier input
# versions go, --shard_tokens that would write more than 100000 shards and a repeated --input
# are refused with one line. Every check: exit status, the one error line, inputs unchanged.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="writers: "
SHAPE="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64 --num_threads 1"
SMALL="$SHAPE --batch_size 4 --num_tokens 0 --logging_freq 1 --validation_freq 0"
HOST=$(hostname)
BOOT=$(cat /proc/sys/kernel/random/boot_id)
# a lock held by a live process of this host (this shell), or by one that has ended
sleep 0 & DEAD=$!
wait $DEAD
START=$(sed 's/.*) //' /proc/$$/stat | awk '{print $20}')  # field 22: this shell's start, as fsdpc records its own
lock_live() { echo "fsdpc-writer 0123456789abcdef $HOST $$ $BOOT $START" >"$1"; }
lock_dead() { echo "fsdpc-writer 0123456789abcdef $HOST $DEAD $BOOT 0" >"$1"; }

head -c 60000 data/tinyshakespeare.txt >"$W/a.txt"
tail -c 90000 data/tinyshakespeare.txt >"$W/b.txt"
INPUTS=("$W/a.txt" "$W/b.txt")
sha256sum "${INPUTS[@]}" >"$W/inputs.sha"
# each input's shards prepared alone: what a folder must hold after a race
for x in a b; do
    ./fsdpc prepare --input "$W/$x.txt" --output "$W/ref_$x" --shard_tokens 7000 >/dev/null 2>&1
    cat "$W/ref_$x"/*.bin | sha256sum | cut -d' ' -f1 >"$W/ref_$x.sum"
done


# ---- class 1: concurrent prepares into one folder, 20 rounds, both orders ----
# race ROUNDS NAME [ENV...]: prepare pairs into one --output, the runs under `env ENV...`
race() {
    local rounds=$1 name=$2 bad="" i first second p1 p2 rc1 rc2 win lose
    shift 2
    for i in $(seq 1 "$rounds"); do
        first=a second=b
        [ $((i % 2)) = 0 ] && first=b second=a
        rm -rf "$W/race"
        env "$@" ./fsdpc prepare --input "$W/$first.txt" --output "$W/race" --shard_tokens 7000 >"$W/r1.out" 2>"$W/r1.err" &
        p1=$!
        env "$@" ./fsdpc prepare --input "$W/$second.txt" --output "$W/race" --shard_tokens 7000 >"$W/r2.out" 2>"$W/r2.err" &
        p2=$!
        wait $p1; rc1=$?
        wait $p2; rc2=$?
        if [ $rc1 = 0 ] && [ $rc2 != 0 ]; then win=$first lose=r2; elif [ $rc2 = 0 ] && [ $rc1 != 0 ]; then win=$second lose=r1;
        else bad="$bad round $i: rc $rc1/$rc2;"; continue; fi
        [ "$(grep -c '^fsdpc: error:' "$W/$lose.err")" = 1 ] &&
            grep -Eq "another fsdpc run \(run [0-9a-f]{16}, pid [0-9]+ on this host\) is writing shards to '$W/race'|already holds shards" "$W/$lose.err" ||
            bad="$bad round $i: loser said $(grep -m1 . "$W/$lose.err" | head -c 200);"
        [ "$(cat "$W/race"/*.bin | sha256sum | cut -d' ' -f1)" = "$(cat "$W/ref_$win.sum")" ] || bad="$bad round $i: shards are not $win's alone;"
        ls -a "$W/race" | grep -q 'tmp\|fsdpc-writer' && bad="$bad round $i: leftovers $(ls -a "$W/race" | tr '\n' ' ');"
    done
    sha256sum -c --quiet "$W/inputs.sha" >/dev/null 2>&1 || bad="$bad inputs changed"
    [ -z "$bad" ]
    check "$name" $? "$bad"
}
race 20 "20 concurrent prepare pairs into one --output (both orders): one writes its shards alone, the other stops with one line"
# a file system without hard links (SMB, FUSE object stores): link() fails with EPERM, and the
# lock falls back to a rename that replaces nothing; without that either (EINVAL, as over NFS), to
# an exclusive create that is empty for a moment
gcc -shared -fPIC -o "$W/nolink.so" -x c - <<'C'
#include <errno.h>
int link(const char *a, const char *b) { (void)a; (void)b; errno = EPERM; return -1; }
int linkat(int fa, const char *a, int fb, const char *b, int fl) { (void)fa; (void)a; (void)fb; (void)b; (void)fl; errno = EPERM; return -1; }
C
gcc -shared -fPIC -o "$W/nolinknorename.so" -x c - <<'C'
#include <errno.h>
int link(const char *a, const char *b) { (void)a; (void)b; errno = EPERM; return -1; }
int linkat(int fa, const char *a, int fb, const char *b, int fl) { (void)fa; (void)a; (void)fb; (void)b; (void)fl; errno = EPERM; return -1; }
int renameat2(int fa, const char *a, int fb, const char *b, unsigned fl) { (void)fa; (void)a; (void)fb; (void)b; (void)fl; errno = EINVAL; return -1; }
C
NOLINK="LD_PRELOAD=$W/nolink.so"
race 6 "without hard links: 6 concurrent prepare pairs, one writes alone, the other stops with one line" "$NOLINK"
race 6 "without hard links or an exclusive rename: 6 concurrent prepare pairs, one writes alone, the other stops with one line" "LD_PRELOAD=$W/nolinknorename.so"
# held NAME PAUSE PRELOAD: a first prepare, with neither hard links nor an exclusive rename, is held
# PAUSE s between creating its lock in place and writing its line (a loaded node); a second one
# under PRELOAD must wait for the line, then stop with one line, the shards being the first's
held() {
    local name=$1 pause=$2 preload=$3 slow rc1 rc2
    rm -rf "$W/race"
    env LD_PRELOAD="$W/nolinknorename.so" FSDPC_TEST_PAUSE=wlock-create:$pause ./fsdpc prepare --input "$W/a.txt" \
        --output "$W/race" --shard_tokens 7000 >/dev/null 2>"$W/slow1.err" &
    slow=$!
    for _ in $(seq 100); do [ -e "$W/race/.fsdpc-writer" ] && break; sleep 0.02; done
    env LD_PRELOAD="$preload" ./fsdpc prepare --input "$W/b.txt" --output "$W/race" --shard_tokens 7000 >/dev/null 2>"$W/slow2.err"
    rc2=$?
    wait $slow
    rc1=$?
    [ $rc1 = 0 ] && [ $rc2 != 0 ] && [ "$(grep -c '^fsdpc: error:' "$W/slow2.err")" = 1 ] &&
        grep -Eq "another fsdpc run \(run [0-9a-f]{16}, pid [0-9]+ on this host\) is writing shards to '$W/race'|already holds shards" "$W/slow2.err" &&
        [ "$(cat "$W/race"/*.bin | sha256sum | cut -d' ' -f1)" = "$(cat "$W/ref_a.sum")" ]
    check "without hard links or an exclusive rename: $name" $? "rc $rc1/$rc2 $(head -c 300 "$W/slow2.err")"
}
held "a lock still empty for 1.5 s is waited for, then the second writer refused" 1.5 "$W/nolinknorename.so"
# held for 6 s, past the 5 s that earlier builds waited before they called the lock foreign
held "a lock still empty for 6 s is waited for, not called foreign" 6 "$W/nolinknorename.so"
# the CI flake's interleaving: a reader found the lock empty (its size 0), then the line was written
# before its next look at the file (here access() returns only once the lock holds something), and
# earlier builds judged that later, non-empty file unparsed: "not an fsdpc writer lock"
gcc -shared -fPIC -o "$W/lateaccess.so" -x c - -ldl <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
int access(const char *p, int m) {
    static int (*real)(const char *, int);
    if (!real) real = (int (*)(const char *, int))dlsym(RTLD_NEXT, "access");
    size_t n = strlen(p);
    struct stat st;
    for (int i = 0; n >= 14 && !strcmp(p + n - 14, "/.fsdpc-writer") && i < 500 && (stat(p, &st) != 0 || st.st_size == 0); i++) usleep(10000);
    return real(p, m);
}
C
held "a lock read empty, then written before the reader's next look, is not called foreign" 0.5 \
    "$W/nolinknorename.so:$W/lateaccess.so"
# a live writer's line read half written (a network file system): its truncated boot id must not
# read as a reboot; the reader waits for the whole line
mkdir -p "$W/half"
printf 'fsdpc-writer 0123456789abcdef %s %s %.8s' "$HOST" $$ "$BOOT" >"$W/half/.fsdpc-writer"
(sleep 1; lock_live "$W/half/.fsdpc-writer") &
refused_unchanged "a live writer's half-written lock line is waited for, then the folder refused" \
    "another fsdpc run \(run 0123456789abcdef, pid $$ on this host\) is writing shards to '$W/half'" ./fsdpc prepare --input "$W/a.txt" --output "$W/half"
wait
[ "$(ls -A "$W/half")" = ".fsdpc-writer" ] && [ "$(cat "$W/half/.fsdpc-writer")" = "fsdpc-writer 0123456789abcdef $HOST $$ $BOOT $START" ]
check "the half-written lock's folder is left as it was" $? "$(ls -A "$W/half" | tr '\n' ' ')"
# a lock its writer stopped making (empty for minutes): one line at once, no wait
mkdir -p "$W/empty"
: >"$W/empty/.fsdpc-writer"
touch -d '-2 minutes' "$W/empty/.fsdpc-writer"
SECONDS=0
refused_unchanged "a lock left empty for minutes is refused at once, named" \
    "'$W/empty/.fsdpc-writer' has held no whole writer line for 1[0-9]{2} s: a writer stopped while it made it.*remove it" \
    ./fsdpc prepare --input "$W/a.txt" --output "$W/empty"
[ $SECONDS -lt 5 ] && [ "$(ls -A "$W/empty")" = ".fsdpc-writer" ]
check "the empty lock is not waited for, and stays" $? "$SECONDS s, $(ls -A "$W/empty" | tr '\n' ' ')"

# Taking over a dead writer's lock: a taker that found it dead is held before its takeover while
# the lock changes under it to a live writer's (what another taker that came first leaves): the
# live lock stays, in each of the three ways of placing a lock. wait_pause PID: until the taker
# sleeps in its pause (/proc's syscall number: x86-64's nanosleep or clock_nanosleep); where /proc
# does not show it, half a second
wait_pause() {
    for _ in $(seq 200); do
        grep -Eq '^(35|230) ' "/proc/$1/syscall" 2>/dev/null && return 0
        head -c1 "/proc/$1/syscall" >/dev/null 2>&1 || { sleep 0.5; return 0; }
        sleep 0.02
    done
    return 1
}
bad=""
for mode in "" "$W/nolink.so" "$W/nolinknorename.so"; do
    rm -rf "$W/tk" && mkdir -p "$W/tk"
    lock_dead "$W/tk/.fsdpc-writer"
    env LD_PRELOAD="$mode" FSDPC_TEST_PAUSE=wlock-takeover:1 ./fsdpc prepare --input "$W/a.txt" --output "$W/tk" --shard_tokens 7000 \
        >/dev/null 2>"$W/tk.err" &
    taker=$!
    wait_pause $taker || bad="$bad ${mode:-link}: the taker never paused;"
    rm "$W/tk/.fsdpc-writer" && lock_live "$W/tk/.fsdpc-writer"
    wait $taker
    rc=$?
    [ $rc != 0 ] && [ "$(grep -c '^fsdpc: error:' "$W/tk.err")" = 1 ] &&
        grep -q "another fsdpc run (run 0123456789abcdef, pid $$ on this host) is writing shards to '$W/tk'" "$W/tk.err" &&
        [ "$(ls -A "$W/tk")" = ".fsdpc-writer" ] && [ "$(cat "$W/tk/.fsdpc-writer")" = "fsdpc-writer 0123456789abcdef $HOST $$ $BOOT $START" ] ||
        bad="$bad ${mode:-link}: rc $rc, $(grep -m1 . "$W/tk.err" | head -c 200), left $(ls -A "$W/tk" | tr '\n' ' ');"
done
[ -z "$bad" ]
check "a dead lock replaced by a live one while its taker is held: the live lock stays, the taker is refused (all three ways)" $? "$bad"
# two takers of one dead lock, both held after they found it dead, then let go together: one takes
# it and writes its shards alone, the other stops with one line; nothing is left but the shards
bad=""
for i in 1 2 3 4; do
    first=a second=b
    [ $((i % 2)) = 0 ] && first=b second=a
    rm -rf "$W/tk" && mkdir -p "$W/tk"
    lock_dead "$W/tk/.fsdpc-writer"
    for x in $first $second; do
        env LD_PRELOAD="$W/nolinknorename.so" FSDPC_TEST_PAUSE=wlock-takeover:1 ./fsdpc prepare --input "$W/$x.txt" --output "$W/tk" \
            --shard_tokens 7000 >/dev/null 2>"$W/tk_$x.err" &
        eval "p_$x=$!"
    done
    wait $p_a; rc_a=$?
    wait $p_b; rc_b=$?
    if [ $rc_a = 0 ] && [ $rc_b != 0 ]; then win=a lose=b; elif [ $rc_b = 0 ] && [ $rc_a != 0 ]; then win=b lose=a;
    else bad="$bad round $i: rc $rc_a/$rc_b $(grep -h -m1 error "$W/tk_a.err" "$W/tk_b.err" | head -c 300);"; continue; fi
    [ "$(grep -c '^fsdpc: error:' "$W/tk_$lose.err")" = 1 ] &&
        grep -Eq "another fsdpc run \(run [0-9a-f]{16}, pid [0-9]+ on this host\) is writing shards to '$W/tk'|already holds shards" "$W/tk_$lose.err" ||
        bad="$bad round $i: loser said $(grep -m1 . "$W/tk_$lose.err" | head -c 200);"
    [ "$(cat "$W/tk"/*.bin | sha256sum | cut -d' ' -f1)" = "$(cat "$W/ref_$win.sum")" ] || bad="$bad round $i: shards are not $win's alone;"
    ls -a "$W/tk" | grep -q 'tmp\|fsdpc-writer' && bad="$bad round $i: leftovers $(ls -a "$W/tk" | tr '\n' ' ');"
done
[ -z "$bad" ]
check "without hard links or an exclusive rename: two takers of one dead lock, let go together: one writes alone, the other stops with one line" $? "$bad"
# the takeover's marker: another taker's (fresh) is waited for; one left by a stopped taker (old)
# names both files to remove
rm -rf "$W/tk" && mkdir -p "$W/tk"
lock_dead "$W/tk/.fsdpc-writer"
: >"$W/tk/.fsdpc-writer.takeover"
(sleep 1; rm "$W/tk/.fsdpc-writer.takeover") &
./fsdpc prepare --input "$W/a.txt" --output "$W/tk" --shard_tokens 7000 >/dev/null 2>"$W/tk.err"
rc=$?
wait
[ $rc = 0 ] && grep -q "Taking over the writer lock of run 0123456789abcdef in $W/tk" "$W/tk.err" &&
    [ "$(cat "$W/tk"/*.bin | sha256sum | cut -d' ' -f1)" = "$(cat "$W/ref_a.sum")" ] && ! ls -a "$W/tk" | grep -q 'tmp\|fsdpc-writer'
check "another taker's marker is waited for, then the dead lock taken over" $? "rc $rc $(grep -m2 'error\|writer' "$W/tk.err")"
rm -rf "$W/tk" && mkdir -p "$W/tk"
lock_dead "$W/tk/.fsdpc-writer"
: >"$W/tk/.fsdpc-writer.takeover"
touch -d '-2 minutes' "$W/tk/.fsdpc-writer.takeover"
refused_unchanged "a takeover marker left by a stopped taker: refused, both files named" \
    "'$W/tk/.fsdpc-writer.takeover' was left by a run stopped while it took over the writer lock '$W/tk/.fsdpc-writer' of an ended run; if no fsdpc run is writing to --output '$W/tk', remove both files" \
    ./fsdpc prepare --input "$W/a.txt" --output "$W/tk"
[ "$(ls -A "$W/tk" | tr '\n' ' ')" = ".fsdpc-writer .fsdpc-writer.takeover " ]
check "the stopped taker's marker and the dead lock stay" $? "$(ls -A "$W/tk" | tr '\n' ' ')"
rm "$W/tk/.fsdpc-writer"  # as the line says: the marker alone, a taker stopped after its takeover
./fsdpc prepare --input "$W/a.txt" --output "$W/tk" --shard_tokens 7000 >/dev/null 2>"$W/tk.err" && ! ls -a "$W/tk" | grep -q 'tmp\|fsdpc-writer'
check "a stopped taker's marker without its lock: the next writer takes the lock and removes the marker" $? "$(grep -m1 . "$W/tk.err") $(ls -A "$W/tk" | tr '\n' ' ')"
mkdir -p "$W/nl_held" "$W/nl_dead"
lock_live "$W/nl_held/.fsdpc-writer"
refused_unchanged "without hard links: a live writer's folder is refused" "another fsdpc run \(run 0123456789abcdef, pid $$ on this host\) is writing shards to '$W/nl_held'" \
    env "$NOLINK" ./fsdpc prepare --input "$W/a.txt" --output "$W/nl_held"
lock_dead "$W/nl_dead/.fsdpc-writer"
env "$NOLINK" ./fsdpc prepare --input "$W/a.txt" --output "$W/nl_dead" --shard_tokens 7000 >/dev/null 2>"$W/nl.err" &&
    grep -q "Taking over the writer lock of run 0123456789abcdef in $W/nl_dead" "$W/nl.err" &&
    [ "$(cat "$W/nl_dead"/*.bin | sha256sum | cut -d' ' -f1)" = "$(cat "$W/ref_a.sum")" ] && [ ! -e "$W/nl_dead/.fsdpc-writer" ]
check "without hard links: a dead writer's lock is taken over, the shards written, the lock released" $? "$(grep -m2 'error\|writer' "$W/nl.err")"
$MPI -np 2 -x LD_PRELOAD="$W/nolink.so" ./fsdpc $SMALL --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/nl_ck" >"$W/nlck.log" 2>&1 &&
    [ "$(ls -A "$W/nl_ck")" = "step_00000002.h5" ]
check "without hard links: an np=2 run takes and releases the checkpoint folder's lock" $? "$(grep -m2 'error' "$W/nlck.log")"

mkdir -p "$W/held"
lock_live "$W/held/.fsdpc-writer"
refused_unchanged "prepare into a folder another live prepare holds" "another fsdpc run \(run 0123456789abcdef, pid $$ on this host\) is writing shards to '$W/held'; wait for it to end or give this run another --output" \
    ./fsdpc prepare --input "$W/a.txt" --output "$W/held"
[ "$(ls -A "$W/held")" = ".fsdpc-writer" ]
check "the refused prepare wrote nothing there" $?

# a killed prepare's lock and temporary: taken over and removed, the run completes
mkdir -p "$W/killed"
lock_dead "$W/killed/.fsdpc-writer"
cp "$W/ref_a/train_000000.bin" "$W/killed/train_000003.bin.fedcba9876543210.tmp"
./fsdpc prepare --input "$W/a.txt" --output "$W/killed" --shard_tokens 7000 >"$W/k.out" 2>"$W/k.err"
[ $? = 0 ] && grep -q "Taking over the writer lock of run 0123456789abcdef in $W/killed" "$W/k.err" &&
    grep -q "Removed $W/killed/train_000003.bin.fedcba9876543210.tmp, left by an interrupted prepare" "$W/k.err" &&
    [ "$(cat "$W/killed"/*.bin | sha256sum | cut -d' ' -f1)" = "$(cat "$W/ref_a.sum")" ] && ! ls -A "$W/killed" | grep -q 'tmp\|writer'
check "a killed prepare's lock is taken over and its temporary removed" $? "$(grep -m3 . "$W/k.err" | tr '\n' '|' | head -c 300)"

# ---- new classes: exports, metrics, TensorBoard and traces shared by two runs ----
./fsdpc $SMALL --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/ck" --train_data "$W/a.txt" >/dev/null 2>&1
CK="$W/ck/step_00000002.h5"
sha256sum "${INPUTS[@]}" "$CK" >"$W/inputs.sha"
mkdir -p "$W/exp"
lock_live "$W/exp/.fsdpc-writer"
refused_unchanged "export into a folder another live export holds" "another fsdpc run \(run 0123456789abcdef, pid $$ on this host\) is writing an export to '$W/exp'" \
    ./fsdpc export --checkpoint "$CK" --output "$W/exp"
[ "$(ls -A "$W/exp")" = ".fsdpc-writer" ]
check "the refused export wrote nothing there" $?
( ./fsdpc export --checkpoint "$CK" --output "$W/exp2" >"$W/e1.out" 2>"$W/e1.err"; echo $? >"$W/e1.rc" ) &
( ./fsdpc export --checkpoint "$CK" --output "$W/exp2" >"$W/e2.out" 2>"$W/e2.err"; echo $? >"$W/e2.rc" ) &
wait
ok=$(cat "$W/e1.rc" "$W/e2.rc" | grep -cx 0)
[ "$ok" -ge 1 ] && [ -f "$W/exp2/config.json" ] && ! ls -A "$W/exp2" | grep -q 'tmp\|writer' &&
    for e in e1 e2; do [ "$(cat "$W/$e.rc")" = 0 ] || { [ "$(grep -c '^fsdpc: error:' "$W/$e.err")" = 1 ] && grep -q "is writing an export to\|export did not write\|is not empty" "$W/$e.err"; } || exit 1; done
check "two concurrent exports into one folder: a whole export, any loser stops with one line" $? "$(cat "$W/e1.rc" "$W/e2.rc" "$W/e1.err" "$W/e2.err" | tr '\n' '|' | head -c 400)"
lock_dead "$W/exp2/.fsdpc-writer"
touch "$W/exp2/config.json.0123456789abcdef.tmp"
./fsdpc export --checkpoint "$CK" --output "$W/exp2" >"$W/e3.out" 2>"$W/e3.err"
[ $? = 0 ] && grep -q "Removed $W/exp2/config.json.0123456789abcdef.tmp, left by an interrupted export" "$W/e3.err" && ! ls -A "$W/exp2" | grep -q 'tmp\|writer'
check "a killed export's lock is taken over and its temporary removed" $? "$(grep -m3 . "$W/e3.err" | tr '\n' '|' | head -c 300)"
: >"$W/exp2/.fsdpc-writer.takeover"
touch -d '-2 minutes' "$W/exp2/.fsdpc-writer.takeover"
./fsdpc export --checkpoint "$CK" --output "$W/exp2" >"$W/e4.out" 2>"$W/e4.err" && ! ls -A "$W/exp2" | grep -q 'tmp\|writer'
check "an export folder with a stopped taker's marker: exported, the marker removed" $? "$(grep -m1 . "$W/e4.err") $(ls -A "$W/exp2" | tr '\n' ' ')"
# a writer's copy of its lock line (".fsdpc-writer.<id>.tmp": a racing export's for a moment, or
# one killed then) is the lock's, not an output's: the export goes on
: >"$W/exp2/.fsdpc-writer.0123456789abcdef.tmp"
./fsdpc export --checkpoint "$CK" --output "$W/exp2" >"$W/e5.out" 2>"$W/e5.err"
check "an export folder holding another writer's copy of its lock line: exported" $? "$(grep -m1 . "$W/e5.err")"
rm -f "$W/exp2/.fsdpc-writer.0123456789abcdef.tmp"

T="$SMALL --max_steps 2 --checkpoint_freq 0 --train_data $W/a.txt"
lock_live "$W/.m.jsonl.fsdpc-writer"
refused_unchanged "a --metrics_file another live run appends to" "another fsdpc run \(run 0123456789abcdef, pid $$ on this host\) is writing metrics to '$W/m.jsonl'; wait for it to end or give this run another --metrics_file" \
    ./fsdpc $T --metrics_file "$W/m.jsonl"
[ ! -e "$W/m.jsonl" ]
check "the refused run did not create the metrics file" $?
mkdir -p "$W/tb"
lock_live "$W/tb/.fsdpc-writer"
refused_unchanged "a --tensorboard_dir another live run writes" "is writing TensorBoard events to '$W/tb'" ./fsdpc $T --tensorboard_dir "$W/tb"
lock_live "$W/.t.json.fsdpc-writer"
refused_unchanged "a --trace_file another live run writes" "is writing a trace to '$W/t.json'; wait for it to end or give this run another --trace_file" \
    ./fsdpc $T --trace_file "$W/t.json"
mkdir -p "$W/td"
lock_live "$W/td/.fsdpc-writer"
refused_unchanged "a --trace_dir another live run writes" "is writing traces to '$W/td'" ./fsdpc $T --trace_dir "$W/td"
./fsdpc $T --metrics_file "$W/m2.jsonl" --tensorboard_dir "$W/m2tb" --trace_file "$W/m2.json" --trace_steps 1:2 >"$W/own.log" 2>&1
[ $? = 0 ] && [ -s "$W/m2.jsonl" ] && [ -s "$W/m2.json" ] && ! ls -A "$W" "$W/m2tb" | grep -q '^\.m2\|^\.fsdpc-writer$'
check "a run's own metrics, events and trace: written, and their locks gone at its end" $? "$(ls -A "$W" "$W/m2tb" | tr '\n' ' ')"

# ---- class 8: runaway outputs and repeated inputs ----
refused_unchanged "the same --input given twice" "--input names the file '$W/a.txt' twice \(also as '$W/../$(basename "$W")/a.txt'\): it would be tokenized twice" \
    ./fsdpc prepare --input "$W/a.txt" "$W/../$(basename "$W")/a.txt" --output "$W/twice"
[ ! -e "$W/twice" ]
check "the repeated input wrote nothing" $?
# a training source that reaches one file twice (a link in a data folder, a hard link a glob also
# matches) would train on it twice each epoch: refused, naming both; a hub snapshot's two files of
# the same bytes (one blob) are the dataset's own, read twice as datasets reads them
mkdir -p "$W/rep" "$W/hub/datasets--org--dup/blobs" "$W/hub/datasets--org--dup/snapshots/r1"
cp "$W/a.txt" "$W/rep/a.txt" && cp "$W/b.txt" "$W/rep/c.txt" && ln -s a.txt "$W/rep/latest.txt" && ln "$W/b.txt" "$W/rep_b.txt"
refused_unchanged "a data folder holding a link to one of its files" \
    "folder '$W/rep' reaches one file twice, as '$W/rep/a.txt' and as '$W/rep/latest.txt' \(a link\): it would be read twice" \
    ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --train_data "$W/rep"
refused_unchanged "a glob matching a file and its hard link" "glob '$W/\*.txt' reaches one file twice, as '$W/b.txt' and as '$W/rep_b.txt'" \
    ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --train_data "$W/*.txt"
refused_unchanged "a validation folder holding a link" "folder '$W/rep' reaches one file twice" \
    ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --train_data "$W/a.txt" --val_data "$W/rep"
refused_unchanged "prepare of a glob reaching one file twice" "glob '$W/rep/\*' reaches one file twice" \
    ./fsdpc prepare --input "$W/rep/*" --output "$W/reptwice"
cp "$W/a.txt" "$W/hub/datasets--org--dup/blobs/0abc"
ln -s ../../blobs/0abc "$W/hub/datasets--org--dup/snapshots/r1/part1.txt"
ln -s ../../blobs/0abc "$W/hub/datasets--org--dup/snapshots/r1/part2.txt"
./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --train_data "$W/hub/datasets--org--dup/snapshots/r1" >"$W/hubdup.log" 2>&1 &&
    grep -q "2 files, text read as bytes.*120000 tokens" "$W/hubdup.log"
check "a hub snapshot's two files of one blob train, both read" $? "$(grep -m2 'error\|training data' "$W/hubdup.log")"
rm -rf "$W/rep" "$W/rep_b.txt" "$W/hub"
t0=$SECONDS
cp data/tinyshakespeare.txt "$W/ts.txt"
refused_unchanged "--shard_tokens 1 for Tiny Shakespeare (a million shards), refused at once" "prepare would write more than 200000 shards \(--shard_tokens 1, at least 1115394 tokens\): the limit is 100000 shard files per split; give a larger --shard_tokens \(at least 6\)" \
    ./fsdpc prepare --input "$W/ts.txt" --output "$W/many" --shard_tokens 1
[ ! -e "$W/many" ] || [ -z "$(ls -A "$W/many")" ]
[ $((SECONDS - t0)) -le 5 ]
check "the refused shard count left no files, within 5 s ($((SECONDS - t0)) s)" $?

# the data cache: a killed build's folder, and the caches of earlier versions of the inputs
for i in $(seq 1 200); do echo "{\"text\": \"row $i of the documents, $(head -c 80 "$W/a.txt" | tr -d '\n\"\\')\"}"; done >"$W/d.jsonl"
C="$W/cache"
mkdir -p "$C/tok-0123456789abcdef0123456789abcdef.fedcba9876543210.tmp"
lock_dead "$C/tok-0123456789abcdef0123456789abcdef.fedcba9876543210.tmp/.fsdpc-writer"
touch "$C/tok-0123456789abcdef0123456789abcdef.fedcba9876543210.tmp/part-000000.bin.fedcba9876543210.tmp"
mkdir -p "$C/tok-11111111111111111111111111111111.2222222222222222.tmp"
lock_live "$C/tok-11111111111111111111111111111111.2222222222222222.tmp/.fsdpc-writer"
./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --train_data "$W/d.jsonl" --data_cache_dir "$C" >"$W/c1.log" 2>&1
[ $? = 0 ] && [ ! -e "$C/tok-0123456789abcdef0123456789abcdef.fedcba9876543210.tmp" ] &&
    [ -e "$C/tok-11111111111111111111111111111111.2222222222222222.tmp" ] &&
    grep -q "Removed the data cache folder $C/tok-0123456789abcdef0123456789abcdef.fedcba9876543210.tmp, left by an interrupted data cache build" "$W/c1.log"
check "a killed cache build's folder is removed, a running build's kept" $? "$(ls -A "$C" | tr "\\n" " "; grep -m3 "rror\|Removed" "$W/c1.log")"
# a build folder whose lock was never written: removed once it is a minute old by the wall clock
# (its mtime's), kept while younger (a build that is starting)
mkdir -p "$C/tok-33333333333333333333333333333333.4444444444444444.tmp" "$C/tok-55555555555555555555555555555555.6666666666666666.tmp"
touch -d '-2 minutes' "$C/tok-33333333333333333333333333333333.4444444444444444.tmp"
./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --train_data "$W/d.jsonl" --data_cache_dir "$C" >"$W/c0.log" 2>&1
[ $? = 0 ] && [ ! -e "$C/tok-33333333333333333333333333333333.4444444444444444.tmp" ] &&
    [ -e "$C/tok-55555555555555555555555555555555.6666666666666666.tmp" ] &&
    grep -q "Removed the data cache folder $C/tok-33333333333333333333333333333333.4444444444444444.tmp, left by an interrupted data cache build" "$W/c0.log"
check "a lockless cache build folder 2 minutes old is removed, a new one kept" $? "$(ls -A "$C" | tr "\\n" " "; grep -m3 "rror\|Removed" "$W/c0.log")"
rm -rf "$C/tok-55555555555555555555555555555555.6666666666666666.tmp"
for i in 1 2 3; do
    touch -d "2020-01-0$i" "$W/d.jsonl"
    ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --train_data "$W/d.jsonl" --data_cache_dir "$C" >"$W/c2.log" 2>&1 || break
done
[ "$(ls -A "$C" | grep -c '^tok-[0-9a-f]*$')" = 1 ] && grep -q "built from an earlier version of the same inputs" "$W/c2.log"
check "each change of the input's time replaces its cache folder instead of adding one" $? "$(ls -A "$C" | tr '\n' ' ')"
# an earlier version's folder that a run still reads (at np=2, each rank holds it) is kept, and the
# first run after that reader ended removes it
FSDPC_TEST_PAUSE=step2:30 $MPI -np 2 -x FSDPC_TEST_PAUSE ./fsdpc $SMALL --batch_size 2 --max_steps 2 --checkpoint_freq 0 \
    --train_data "$W/d.jsonl" --data_cache_dir "$C" >"$W/hold.log" 2>&1 &
holder=$!
old=$(ls -A "$C" | grep '^tok-[0-9a-f]*$')
for _ in $(seq 300); do grep -q '^Step 1\b\|"step": 1\|Batch 1 ' "$W/hold.log" && break; sleep 0.1; done
flock -n -x "$C/$old/complete" true
held=$?
touch -d "2020-02-01" "$W/d.jsonl"
./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --train_data "$W/d.jsonl" --data_cache_dir "$C" >"$W/c3.log" 2>&1
rc=$?
[ $held != 0 ] && [ $rc = 0 ] && [ -e "$C/$old/complete" ] &&
    grep -q "^Kept the data cache folder $C/$old, built from an earlier version of the same inputs: another run may still read it" "$W/c3.log"
check "an earlier version's cache folder that a running np=2 job reads is kept, and said so" $? "held=$held rc=$rc $(ls -A "$C" | tr '\n' ' ') $(grep -m2 'Kept\|Removed\|error' "$W/c3.log")"
kill $holder 2>/dev/null
wait $holder 2>/dev/null
# mpirun may return before its ranks have exited: the job has ended once none holds the folder
for _ in $(seq 100); do flock -n -x "$C/$old/complete" true && break; sleep 0.1; done
./fsdpc $SMALL --max_steps 1 --checkpoint_freq 0 --train_data "$W/d.jsonl" --data_cache_dir "$C" >"$W/c4.log" 2>&1 &&
    [ ! -e "$C/$old" ] && grep -q "^Removed the data cache folder $C/$old, built from an earlier version" "$W/c4.log" &&
    [ "$(ls -A "$C" | grep -c '^tok-[0-9a-f]*$')" = 1 ]
check "once that job ended, the next run that finds the cache removes the old folder" $? "$(ls -A "$C" | tr '\n' ' ') $(grep -m2 'Kept\|Removed\|error' "$W/c4.log")"
# a lock whose pid now runs another program (pid 1 after a container restart): taken over, said,
# both with the process's start recorded (it differs) and without it (older locks: not fsdpc's name)
for start in 12345 0; do
    rm -rf "$W/pid1"
    mkdir -p "$W/pid1"
    echo "fsdpc-writer 0123456789abcdef $HOST 1 $BOOT $start" >"$W/pid1/.fsdpc-writer"
    ./fsdpc $SMALL --max_steps 1 --checkpoint_freq 1 --checkpoint_dir "$W/pid1" >"$W/pid1.log" 2>&1
    rc=$?
    [ $rc = 0 ] && grep -q "^Taking over the writer lock of run 0123456789abcdef in $W/pid1 (its process 1 on this host is gone; that pid now runs another program)" "$W/pid1.log" &&
        [ -f "$W/pid1/step_00000001.h5" ] && [ ! -e "$W/pid1/.fsdpc-writer" ]
    check "a lock of pid 1 (start $start), now another program's, is taken over and said so" $? "rc=$rc $(grep -m2 'error\|writer' "$W/pid1.log" | tr '\n' '|')"
done

# a full disk during prepare: one line, no temporaries, the folder it created gone, others' files kept
mkdir -p "$W/fp"
if mount -t tmpfs -o size=300k tmpfs "$W/fp" 2>"$W/mount.err"; then
    echo keep >"$W/fp/sentinel"
    mkdir "$W/fp/had"
    echo keep >"$W/fp/had/other.txt"
    for np in 1 2; do
        for out in new had; do
            $MPI -np $np ./fsdpc prepare --input data/tinyshakespeare.txt --output "$W/fp/$out" --tokenizer byte >/dev/null 2>"$W/fp.err"
            rc=$?
            left=$(cd "$W/fp" && find . -mindepth 1 | sort | tr '\n' ' ')
            want="./had ./had/other.txt ./sentinel "
            [ $rc != 0 ] && [ "$(grep -c '^fsdpc: error:' "$W/fp.err")" = 1 ] &&
                grep -q "^fsdpc: error: cannot write '$W/fp/$out/train_000000.bin.[0-9a-f]*.tmp': No space left on device" "$W/fp.err" &&
                [ "$left" = "$want" ] && [ "$(cat "$W/fp/sentinel" "$W/fp/had/other.txt")" = "keep
keep" ]
            check "a full disk during prepare into a $out folder at np=$np: one line, nothing of it left" $? "rc=$rc [$left] $(grep -m2 error "$W/fp.err" | tr '\n' '|')"
        done
    done
    umount "$W/fp"
else
    echo "ok - ${PREFIX}a full disk during prepare # SKIP cannot mount a tmpfs here: $(head -c 120 "$W/mount.err")"
fi

sha256sum -c --quiet "$W/inputs.sha" >/dev/null 2>&1
check "no input changed over the whole suite" $?
