#!/usr/bin/env bash
# A real single-node Slurm from Debian's packages: munged, slurmctld and slurmd as root with their
# own key, config, ports, state and logs in the scratch directory. srun with PMIx against mpirun,
# srun without it refused, and run/launch/slurm.sbatch itself (not a copy: scaled down by sbatch options
# and its environment) submitted, cancelled and resubmitted, preempted and requeued.
# Where the daemons cannot run here (not root, packages not installable, daemons that refuse this
# container) it prints "# SKIP slurm tests: REASON" and exits 0. On every exit it stops exactly the
# processes it started (by PID, and whatever still carries this cluster's SLURM_CONF).
# SLURM_TEST_KEEP=DIR keeps a copy of the scratch directory (logs, slurm.conf) for a post-mortem.
cd "$(dirname "$0")/../.." || exit 1
source test/lib.sh
[ -d "$W" ] || { echo "# SKIP slurm tests: no scratch directory"; exit 0; }
S=$W/slurm
DAEMONS=""  # PIDs of munged, slurmctld, slurmd, in start order
UP=""       # set once the node is idle: there may be jobs to cancel

skip() { echo "# SKIP slurm tests: $*"; exit 0; }
ours() {  # PIDs of live processes whose environment holds this cluster's SLURM_CONF (steps, tasks)
    grep -lzxF "SLURM_CONF=$SLURM_CONF" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | grep -vx "$$"
}
stop_all() {
    local p alive
    if [ -n "$UP" ]; then
        # jobs first, while slurmd can still end their steps; then the daemons, newest first
        timeout 5 scancel --quiet --full "--user=$(id -un)" 2>/dev/null
        local t=$((SECONDS + 10))
        while [ $SECONDS -lt $t ] && [ -n "$(timeout 2 squeue -h -o %i 2>/dev/null)" ]; do sleep 0.2; done
    fi
    if [ -n "$DAEMONS" ]; then
        for p in $(echo $DAEMONS | tr ' ' '\n' | tac); do kill -TERM "$p" 2>/dev/null; done
        for _ in $(seq 50); do
            alive=""
            for p in $DAEMONS; do kill -0 "$p" 2>/dev/null && alive=1; done
            [ -z "$alive" ] && break
            sleep 0.1
        done
        for p in $DAEMONS; do kill -KILL "$p" 2>/dev/null; done
    fi
    # anything left that this cluster started (a slurmstepd or task orphaned by a timeout)
    [ -n "${SLURM_CONF:-}" ] && for p in $(ours); do
        [ "$(ps -o sid= -p "$p" 2>/dev/null | tr -d ' ')" = "$(ps -o sid= -p $$ | tr -d ' ')" ] && continue  # our own shells
        kill -KILL "$p" 2>/dev/null
    done
    DAEMONS=""
}
trap 'stop_all; [ -n "${SLURM_TEST_KEEP:-}" ] && cp -a "$W" "$SLURM_TEST_KEEP"; rm -rf "$W"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# ---- packages ----
[ "$(id -u)" = 0 ] || skip "not root (this script runs its own slurmctld, slurmd and munged as root)"
PKGS="slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins"  # the last holds mpi_pmix.so
missing=""
for p in $PKGS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"; done
if [ -n "$missing" ]; then
    echo "# installing:$missing"
    export DEBIAN_FRONTEND=noninteractive  # their services are not started: ours run below
    if ! timeout 240 apt-get install -y -qq --no-install-recommends $missing >"$W/apt.log" 2>&1; then
        timeout 120 apt-get update -qq >>"$W/apt.log" 2>&1
        timeout 240 apt-get install -y -qq --no-install-recommends $missing >>"$W/apt.log" 2>&1 ||
            skip "cannot install$missing ($(grep -m1 -E '^E:' "$W/apt.log"))"
    fi
fi
ls /usr/lib/*/slurm-wlm/mpi_pmix.so >/dev/null 2>&1 || skip "no mpi_pmix.so Slurm plugin (slurm-wlm-basic-plugins)"

# ---- configuration: this machine as the one node, on free ports of 127.0.0.1, no cgroups ----
mkdir -p "$S/state" "$S/spool" "$S/log" || skip "cannot create $S"
chmod 755 "$W" "$S"  # munged wants every directory above its socket searchable by all
read -r CTLD_PORT SLURMD_PORT < <(/usr/bin/python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')
NODE=$(hostname -s)
CPUS=$(nproc --all)
MEM=$(awk '/^MemTotal:/ { print int($2 / 1024 * 0.9) }' /proc/meminfo)
export SLURM_CONF=$S/slurm.conf  # for every client command, the daemons and the jobs
cat >"$SLURM_CONF" <<EOF
ClusterName=fsdpctest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# a requeued job waits cred_expire (default 120 s) before it may start again
AuthInfo=socket=$S/munge.sock,cred_expire=5
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
# as on many clusters: the recipe must ask for --mpi=pmix itself
MpiDefault=none
# cgroups are not delegated to every container: track processes by their parents
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
# start a batch job at once (not up to 3 s later), a requeued one once eligible (not up to 60 s later)
SchedulerParameters=batch_sched_delay=0,sched_interval=1
ReturnToService=2
KillWait=10
MinJobAge=600
InactiveLimit=0
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

# ---- daemons ----
start() {  # start NAME PIDFILE CMD...: CMD daemonizes; the daemon's PID comes from its pid file
    local name=$1 pidfile=$2
    shift 2
    timeout 10 "$@" >"$S/log/$name.out" 2>&1 || skip "$name did not start: $(tail -c 300 "$S/log/$name.out" | tr '\n' ' ')"
    for _ in $(seq 50); do [ -s "$pidfile" ] && break; sleep 0.1; done
    [ -s "$pidfile" ] || skip "$name wrote no pid file: $(tail -n 3 "$S/log/$name.log" 2>/dev/null | tr '\n' ' ')"
    DAEMONS="$DAEMONS $(cat "$pidfile")"
}
mungekey --create --keyfile="$S/munge.key" >"$S/log/mungekey.out" 2>&1 ||
    { dd if=/dev/urandom of="$S/munge.key" bs=1024 count=1 2>/dev/null && chmod 600 "$S/munge.key"; }
start munged "$S/munged.pid" munged --key-file="$S/munge.key" --socket="$S/munge.sock" --pid-file="$S/munged.pid" \
    --log-file="$S/log/munged.log" --seed-file="$S/munged.seed"
start slurmctld "$S/slurmctld.pid" slurmctld -f "$SLURM_CONF" -i
start slurmd "$S/slurmd.pid" slurmd -f "$SLURM_CONF"
state="" t=$((SECONDS + 20))
while [ $SECONDS -lt $t ]; do
    state=$(timeout 3 sinfo -h -N -o %t 2>/dev/null)
    [ "$state" = idle ] && break
    sleep 0.2
done
[ "$state" = idle ] || skip "node $NODE not idle (state '${state:-none}'): $(tail -q -n 2 "$S/log/slurmd.log" "$S/log/slurmctld.log" 2>/dev/null | tr '\n' ' ' | head -c 400)"
UP=1
echo "# slurm $(sinfo --version | cut -d' ' -f2): node $NODE, $CPUS CPUs, slurmctld/slurmd on 127.0.0.1:$CTLD_PORT/$SLURMD_PORT"
DEADLINE=$((SECONDS + 120))  # the waits below end by then (or after 3 s each), within ~3 minutes in all
left() { local l=$((DEADLINE - SECONDS)); [ $l -lt $1 ] && l=$1; [ $l -gt $2 ] && l=$2; echo $l; }  # left MIN MAX

# ---- srun: one 2-rank job with PMIx (the same losses as mpirun); without it, refused ----
SMALL="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64 --num_tokens 0"
T="$SMALL --batch_size 2 --max_steps 4 --logging_freq 1 --checkpoint_freq 0"
timeout "$(left 3 40)" srun --mpi=pmix -n 2 ./fsdpc $T --metrics_file "$W/srun.jsonl" >"$W/srun.out" 2>&1
rc=$?
timeout "$(left 3 60)" mpirun --oversubscribe --allow-run-as-root -np 2 ./fsdpc $T --metrics_file "$W/mpirun.jsonl" >/dev/null 2>&1
d=$(rel_diff "$W/srun.jsonl" "$W/mpirun.jsonl" 4 0 2>/dev/null)
ok=$?
[ $ok = 0 ] && grep -q "^fsdpc: 2 rank(s)" "$W/srun.out"
check "srun --mpi=pmix -n 2: one 2-rank job, losses equal to mpirun -np 2's ($d)" $? "rc=$rc $(tail -c 300 "$W/srun.out" | tr '\n' '|')"
for m in "" --mpi=pmi2; do
    rm -f "$W/unwired.jsonl"
    timeout "$(left 3 30)" srun $m -n 2 ./fsdpc $T --metrics_file "$W/unwired.jsonl" >"$W/unwired.out" 2>&1
    rc=$?
    # fsdpc checks before MPI_Init, where Open MPI would fail with a banner per copy
    [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ ! -s "$W/unwired.jsonl" ] &&
        [ "$(grep -c '^fsdpc: error: srun started 2 tasks without PMIx: pass --mpi=pmix' "$W/unwired.out")" = 1 ]
    check "srun ${m:-with MpiDefault=none} -n 2: one error line, nothing trains" $? \
        "rc=$rc $(grep -m3 -E 'error|OMPI' "$W/unwired.out" | head -c 300 | tr '\n' '|')"
done

# ---- run/launch/slurm.sbatch as written, scaled down by sbatch options and its environment ----
MODEL="--tokenizer byte --hidden_width 128 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 256 --max_context_width 128 --num_tokens 0"
STEPS=20
submit() {  # submit NAME: 1 node x 2 ranks; log $W/NAME.log, checkpoints $W/NAME, losses $W/NAME.jsonl (appended by each run)
    DATA=data/tinyshakespeare.txt MODEL_ARGS="$MODEL" STEPS=$STEPS WARMUP=5 CKPT="$W/$1" CKPT_FREQ=5 \
        EXTRA_ARGS="--logging_freq 1 --metrics_file $W/$1.jsonl" \
        timeout 10 sbatch --parsable -N 1 --ntasks-per-node=2 --cpus-per-task=1 -o "$W/$1.log" -J "fsdpc-$1" run/launch/slurm.sbatch
}
field() { [ -n "$1" ] && timeout 5 scontrol show job "$1" 2>/dev/null | grep -oE "(^| )$2=[^ ]*" | head -1 | cut -d= -f2; }  # field JOB NAME
wait_job() {  # wait_job JOB SECONDS: until it has ended; cancels it when it has not
    local t=$((SECONDS + $(left 3 $2)))
    [ -n "$1" ] || return 1
    while [ $SECONDS -lt $t ]; do
        case $(field "$1" JobState) in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED | BOOT_FAIL | DEADLINE) return 0 ;; esac
        sleep 0.2
    done
    timeout 5 scancel "$1"
    return 1
}
wait_step() {  # wait_step LOG N SECONDS: until the log shows step N or later
    local t=$((SECONDS + $(left 3 $3)))
    while [ $SECONDS -lt $t ]; do
        [ "$(sed -nE 's/^Batch ([0-9]+) .*/\1/p' "$1" 2>/dev/null | tail -1)" -ge "$2" ] 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}
ckpt() { printf '%s/step_%08d.h5' "$1" "$2"; }  # ckpt DIR STEP

# sbatch: trains as one 2-rank job, checkpoints, completes
start=$SECONDS
id=$(submit full)
wait_job "$id" 40
state=$(field "$id" JobState) exit=$(field "$id" ExitCode)
[ "$state" = COMPLETED ] && [ "$exit" = 0:0 ] && grep -q "^fsdpc: 2 rank(s)" "$W/full.log" && grep -q "^Batch $STEPS Loss" "$W/full.log" &&
    [ -f "$(ckpt "$W/full" $STEPS)" ] && [ "$(wc -l <"$W/full.jsonl")" = $STEPS ]
st=$?
check "sbatch run/launch/slurm.sbatch (1 node x 2 ranks): trains $STEPS steps as one job, checkpoints, completes ($((SECONDS - start)) s)" $st \
    "state=$state exit=$exit $(ls "$W/full" 2>/dev/null | tr '\n' ' ') $(tail -n 3 "$W/full.log" | head -c 300 | tr '\n' '|')"

# scancel mid-run (SIGTERM: the step ends, checkpoints; no requeue), then a resubmission resumes exactly
id=$(submit cancel)
wait_step "$W/cancel.log" 6 30
timeout 5 scancel "$id"
wait_job "$id" 20
state=$(field "$id" JobState) restarts=$(field "$id" Restarts)
c=$(sed -nE 's/^Preempted \(signal\) after step ([0-9]+): checkpoint written.*/\1/p' "$W/cancel.log")
[ "$state" = CANCELLED ] && [ "$restarts" = 0 ] && [ -n "$c" ] && [ -f "$(ckpt "$W/cancel" "$c")" ] && [ "$c" -lt $STEPS ]
check "scancel mid-run: every rank checkpoints after its step (${c:-none}), the job ends, not requeued" $? \
    "state=$state restarts=$restarts $(tail -n 3 "$W/cancel.log" | head -c 300 | tr '\n' '|')"
id=$(submit cancel)
wait_job "$id" 40
state=$(field "$id" JobState)
n=$((STEPS - ${c:-0}))
d=$(rel_diff <(tail -n $n "$W/full.jsonl") <(tail -n $n "$W/cancel.jsonl") $n 0)
ok=$?
[ $ok = 0 ] && [ "$state" = COMPLETED ] && grep -q "^Resumed from $(ckpt "$W/cancel" "${c:-0}") at step ${c:-0} " "$W/cancel.log"
check "resubmitted: resumes at step ${c:-?}, its $n steps equal to the uninterrupted job's ($d)" $? \
    "state=$state $(grep -m1 '^Resumed' "$W/cancel.log")"

# preemption (the USR1 that --signal=USR1@120 sends): checkpoint, exit 75, the recipe requeues its job
id=$(submit preempt)
wait_step "$W/preempt.log" 4 30
timeout 5 scancel --signal=USR1 "$id"
t=$((SECONDS + $(left 3 20)))
while [ $SECONDS -lt $t ] && [ "$(field "$id" Restarts)" != 1 ]; do sleep 0.2; done
wait_job "$id" 40
state=$(field "$id" JobState) restarts=$(field "$id" Restarts)
p=$(sed -nE 's/^Preempted \(signal\) after step ([0-9]+): checkpoint written.*/\1/p' "$W/preempt.log")
[ -n "$p" ] && grep -q "^Saved checkpoint $(ckpt "$W/preempt" "$p") " "$W/preempt.log" &&
    grep -Eq "tasks? [0-9-]+: Exited with exit code 75" "$W/preempt.log" && grep -q "^fsdpc exited with 75 (preempted): requeueing job $id " "$W/preempt.log" && [ "$restarts" = 1 ]
check "scancel --signal=USR1: every rank checkpoints after step ${p:-?}, srun exits 75, the job requeues itself" $? \
    "restarts=$restarts $(grep -E '^(Preempted|srun|fsdpc)' "$W/preempt.log" | head -c 300 | tr '\n' '|')"
d=$(rel_diff "$W/full.jsonl" "$W/preempt.jsonl" $STEPS 0)
ok=$?
[ $ok = 0 ] && [ "$state" = COMPLETED ] && [ "$restarts" = 1 ] && grep -q "^Resumed from $(ckpt "$W/preempt" "${p:-0}") at step ${p:-0} " "$W/preempt.log"
check "the requeued job resumes at step ${p:-?} and completes, losses equal to the uninterrupted job's ($d)" $? \
    "state=$state restarts=$restarts $(grep -m1 '^Resumed' "$W/preempt.log")"
