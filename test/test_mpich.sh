#!/usr/bin/env bash
# MPICH: `make MPI=mpich` builds ./fsdpc-mpich against Debian's MPICH; 2 ranks under its Hydra
# mpiexec train to the losses of ./fsdpc on 2 Open MPI ranks; a bad flag ends with one error line
# and status 1; SIGTERM (and Ctrl-C) to mpiexec stops both ranks with one line; a rank bound to
# fewer cores than its share is told Hydra's flag; and each binary started by the other MPI's
# launcher is refused with one line. Where MPICH is not installed it prints one SKIP line.
cd "$(dirname "$0")/.." || exit 1
source test/lib.sh
skip() { echo "ok - mpich # SKIP $*"; exit 0; }

dpkg-query -W -f='${Status}' libmpich-dev 2>/dev/null | grep -q "install ok installed" ||
    skip "libmpich-dev is not installed (make deps installs it)"
command -v mpiexec.mpich >/dev/null || skip "mpiexec.mpich is not installed (Debian's mpich package; make deps installs it)"

start=$(date +%s)
make --no-print-directory MPI=mpich >"$W/build.log" 2>&1
rc=$?
echo "# make MPI=mpich: $(($(date +%s) - start)) s"
check "make MPI=mpich builds ./fsdpc-mpich" $rc "(rc=$rc: $(tail -c 300 "$W/build.log" | tr '\n' '|'))"
[ $rc = 0 ] || exit 0
ldd ./fsdpc-mpich | grep -q 'libmpich\.so' && ! ldd ./fsdpc-mpich | grep -q 'libmpi\.so' &&
    ldd ./fsdpc | grep -q 'libmpi\.so' && ! ldd ./fsdpc | grep -q 'libmpich\.so'
check "./fsdpc-mpich links MPICH and ./fsdpc stays Open MPI" $?

HYDRA="timeout 120 mpiexec.mpich"
FLAGS=(--hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128
       --max_context_width 64 --batch_size 2 --num_tokens 0 --checkpoint_freq 0)

$HYDRA -n 2 -ppn 2 ./fsdpc-mpich "${FLAGS[@]}" --max_steps 8 --metrics_file "$W/mpich.jsonl" >"$W/mpich.out" 2>"$W/mpich.err"
rc=$?
check "MPICH np=2 run exits 0" $rc "(rc=$rc: $(tail -c 300 "$W/mpich.err" | tr '\n' '|'))"
$MPI -np 2 ./fsdpc "${FLAGS[@]}" --max_steps 8 --metrics_file "$W/ompi.jsonl" >"$W/ompi.out" 2>"$W/ompi.err"
rc=$?
check "Open MPI np=2 run exits 0" $rc "(rc=$rc: $(tail -c 300 "$W/ompi.err" | tr '\n' '|'))"
d=$(rel_diff "$W/mpich.jsonl" "$W/ompi.jsonl" 8 1e-6)
rc=$?
echo "# worst relative loss difference, MPICH against Open MPI: $d"
check "MPICH and Open MPI losses agree over 8 steps (1e-6 relative)" $rc "(worst $d)"

line=$(grep '^fsdpc: MPI transport ' "$W/mpich.err")
echo "# mpich: $line"
[ "$(echo "$line" | wc -l)" = 1 ] && echo "$line" | grep -q '^fsdpc: MPI transport MPICH Version: [0-9]' && ! echo "$line" | grep -q 'pml='
check "the MPICH run's transport line names MPICH, once" $? "(got '$line')"
grep -q '2 rank(s) on cpu' "$W/mpich.out" "$W/mpich.err"
check "MPICH's mpiexec -n 2 -ppn 2 gives one job of 2 ranks" $?

$HYDRA -n 2 -ppn 2 ./fsdpc-mpich --no_such_flag 1 >"$W/bad.out" 2>"$W/bad.err"
rc=$?
n=$(grep -c '^fsdpc: error:' "$W/bad.err")
[ $rc = 1 ] && [ "$n" = 1 ] && grep -q "^fsdpc: error: unknown flag '--no_such_flag'" "$W/bad.err"
check "MPICH np=2 bad flag: one 'fsdpc: error:' line, status 1" $? "(rc=$rc, $n lines: $(head -c 300 "$W/bad.err" | tr '\n' '|'))"

# stop signals: Hydra relays SIGTERM and SIGINT to the ranks, which stop as under mpirun
for sig in TERM INT; do
    $HYDRA -n 2 -ppn 2 ./fsdpc-mpich "${FLAGS[@]}" --max_steps 100000 --checkpoint_dir "$W/ck_$sig" \
        --metrics_file "$W/$sig.jsonl" >"$W/$sig.out" 2>"$W/$sig.err" &
    pid=$!
    for _ in $(seq 600); do [ -s "$W/$sig.jsonl" ] && break; sleep 0.1; done  # training (flushed each step)
    kill -$sig $pid
    wait $pid
    rc=$?
    sleep 0.5
    n=$(cat "$W/$sig.out" "$W/$sig.err" | grep -c '^Preempted (signal)')
    left=$(pgrep -f "$W/ck_$sig" | wc -l)
    echo "# SIG$sig to mpiexec.mpich: its status $rc, $n 'Preempted' line(s)"
    if [ $sig = TERM ]; then
        [ $rc = 75 ] && [ "$n" = 1 ] && [ "$left" = 0 ]
        check "SIGTERM to mpiexec.mpich: both ranks stop, one line, status 75" $? "(rc=$rc, $n lines, $left left)"
    else  # Hydra's own status after a Ctrl-C it relayed is sometimes the ranks' 75, sometimes 0: not checked
        [ "$n" = 1 ] && [ "$left" = 0 ]
        check "SIGINT to mpiexec.mpich: both ranks stop with one line" $? "(rc=$rc, $n lines, $left left)"
    fi
done

# Hydra binds nothing by default; bound to one core of a larger share, the warning names its flag
if [ "$(nproc)" -ge 2 ]; then
    $HYDRA -n 1 -bind-to core ./fsdpc-mpich "${FLAGS[@]}" --max_steps 1 >"$W/bind.log" 2>&1
    grep -q 'is bound to 1 core(s) of its [0-9]*-core share of the node; let it use them: mpiexec -bind-to core:' "$W/bind.log" &&
        ! grep -q 'is bound to' "$W/mpich.out" "$W/mpich.err"
    check "a rank Hydra binds to fewer cores than its share is told mpiexec -bind-to core:N; unbound, nothing" $? \
        "($(grep -m1 'bound to' "$W/bind.log"))"
fi

# each MPI's launcher starting the other's build: N one-rank jobs, refused by the launcher's rank 0
$HYDRA -n 2 ./fsdpc "${FLAGS[@]}" --max_steps 1 >"$W/x1.out" 2>"$W/x1.err"
rc=$?
n=$(grep -c '^fsdpc: error:' "$W/x1.err")
[ $rc = 1 ] && [ "$n" = 1 ] && grep -q 'they are not one job (this fsdpc is built with Open MPI' "$W/x1.err"
check "mpiexec.mpich starting the Open MPI build: one error line naming Open MPI, status 1" $? \
    "(rc=$rc, $n lines: $(head -c 300 "$W/x1.err" | tr '\n' '|'))"
$MPI -np 2 ./fsdpc-mpich "${FLAGS[@]}" --max_steps 1 >"$W/x2.out" 2>"$W/x2.err"
rc=$?
n=$(grep -c '^fsdpc: error:' "$W/x2.err")
[ $rc != 0 ] && [ $rc -lt 124 ] && [ "$n" = 1 ] && grep -q 'they are not one job (this fsdpc is built with MPICH' "$W/x2.err"
check "Open MPI's mpirun starting the MPICH build: one error line naming MPICH" $? \
    "(rc=$rc, $n lines: $(head -c 300 "$W/x2.err" | tr '\n' '|'))"
