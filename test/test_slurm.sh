#!/usr/bin/env bash
# A real single-node Slurm from Debian's packages (munged, slurmctld, slurmd as root, own key,
# config, ports and state in a scratch directory): srun with PMIx against mpirun, the unwired
# launch refused, and run/slurm.sbatch itself submitted, cancelled, resumed and preempted.
# Where the daemons cannot run (not root, no packages, a container that refuses them) it prints
# "# SKIP ..." and exits 0. It stops exactly the daemons it started, by PID, on every exit.
cd "$(dirname "$0")/.."
source test/lib.sh
SMALL="--hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128 --max_context_width 64 --num_tokens 0"
S=$W/slurm
DAEMONS=""  # PIDs we started, stopped by the EXIT trap

skip() { echo "# SKIP slurm tests: $*"; exit 0; }
stop_daemons() {
    local p
    # jobs first (only ours exist in this private cluster), then the daemons, newest first
    [ -n "$DAEMONS" ] && [ -n "${SLURM_CONF:-}" ] && timeout 10 scancel --quiet --full "--user=$(id -un)" 2>/dev/null
    for p in $(echo $DAEMONS | tr ' ' '\n' | tac); do kill -TERM "$p" 2>/dev/null; done
    for _ in $(seq 50); do
        local alive=""
        for p in $DAEMONS; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ -z "$alive" ] && break
        sleep 0.1
    done
    for p in $DAEMONS; do kill -KILL "$p" 2>/dev/null; done
    DAEMONS=""
}
trap 'stop_daemons; [ -n "${SLURM_TEST_KEEP:-}" ] && cp -a "$W" "$SLURM_TEST_KEEP"; rm -rf "$W"' EXIT

# ---- packages ----
[ "$(id -u)" = 0 ] || skip "not root (the daemons run as root here)"
PKGS="slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins"
missing=""
for p in $PKGS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"; done
if [ -n "$missing" ]; then
    echo "# installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    # policy-rc.d, if any, keeps the packages' own services from starting; ours run below
    if ! timeout 300 apt-get install -y -qq --no-install-recommends $missing >"$W/apt.log" 2>&1; then
        timeout 120 apt-get update -qq >>"$W/apt.log" 2>&1
        timeout 300 apt-get install -y -qq --no-install-recommends $missing >>"$W/apt.log" 2>&1 ||
            skip "cannot install$missing ($(grep -m1 -E '^E:' "$W/apt.log"))"
    fi
fi
PLUGDIR=$(dirname "$(ls /usr/lib/*/slurm-wlm/mpi_pmix.so /usr/lib/*/slurm/mpi_pmix.so 2>/dev/null | head -1)" 2>/dev/null)
[ -f "$PLUGDIR/mpi_pmix.so" ] || skip "no mpi_pmix plugin installed"

# ---- configuration: one node (this machine), ports on 127.0.0.1, everything under $S ----
mkdir -p "$S/state" "$S/spool" "$S/log"
chmod 755 "$W" "$S"  # munged wants every directory above its socket searchable by all
read -r CTLD_PORT SLURMD_PORT < <(/usr/bin/python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')
NODE=$(hostname -s)
CPUS=$(nproc --all)
MEM=$(awk '/^MemTotal:/ { print int($2 / 1024 * 0.9) }' /proc/meminfo)
export SLURM_CONF=$S/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=fsdpctest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job waits cred_expire (default 120 s) before it starts again
AuthInfo=socket=$S/munge.sock,cred_expire=5
CredType=cred/munge
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# the recipe names --mpi=pmix itself, as it must on clusters whose default is none
MpiDefault=none
# no cgroups: a container may not delegate them
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
# start a batch job at once, not up to 3 s later
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
KillWait=2
MinJobAge=300
InactiveLimit=0
SlurmdTimeout=60
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

# ---- daemons ----
wait_file() {  # wait_file PATH SECONDS
    for _ in $(seq $(($2 * 10))); do [ -s "$1" ] && return 0; sleep 0.1; done
    return 1
}
start() {  # start NAME PIDFILE CMD...: the daemon forks; its PID comes from its pid file
    local name=$1 pidfile=$2
    shift 2
    timeout 20 "$@" >"$S/log/$name.out" 2>&1 || skip "$name did not start: $(tail -c 300 "$S/log/$name.out" | tr '\n' ' ')"
    wait_file "$pidfile" 10 || skip "$name wrote no pid file: $(tail -n 3 "$S/log/$name.log" 2>/dev/null | tr '\n' ' ')"
    DAEMONS="$DAEMONS $(cat "$pidfile")"
}
mungekey --create --keyfile="$S/munge.key" >"$S/log/mungekey.out" 2>&1 ||
    { dd if=/dev/urandom of="$S/munge.key" bs=1024 count=1 2>/dev/null && chmod 600 "$S/munge.key"; }
start munged "$S/munged.pid" munged --key-file="$S/munge.key" --socket="$S/munge.sock" --pid-file="$S/munged.pid" \
    --log-file="$S/log/munged.log" --seed-file="$S/munged.seed"
start slurmctld "$S/slurmctld.pid" slurmctld -f "$SLURM_CONF" -i
start slurmd "$S/slurmd.pid" slurmd -f "$SLURM_CONF"
idle=""
for _ in $(seq 150); do
    state=$(timeout 5 sinfo -h -N -o %t 2>/dev/null)
    case $state in idle*) idle=1; break ;; esac
    sleep 0.2
done
[ -n "$idle" ] || skip "node not idle after 30 s (state '${state:-none}'): $(tail -n 2 "$S/log/slurmd.log" "$S/log/slurmctld.log" 2>/dev/null | tr '\n' ' ' | head -c 400)"
echo "# slurm $(sinfo --version | cut -d' ' -f2) up: node $NODE, $CPUS CPUs, ports $CTLD_PORT/$SLURMD_PORT"

# ---- 1. srun with PMIx: one 2-rank job, the same losses as mpirun ----
T="$SMALL --batch_size 2 --max_steps 4 --logging_freq 1 --checkpoint_freq 0"
timeout 60 srun --mpi=pmix -n 2 ./fsdpc $T --metrics_file "$W/srun.jsonl" >"$W/srun.out" 2>&1
rc=$?
$MPI -np 2 ./fsdpc $T --metrics_file "$W/mpirun.jsonl" >/dev/null 2>&1
d=$(rel_diff "$W/srun.jsonl" "$W/mpirun.jsonl" 4 0)
check "srun --mpi=pmix -n 2 trains as one job, losses equal to mpirun -np 2 ($d)" $? "rc=$rc $(tail -c 300 "$W/srun.out" | tr '\n' '|')"


# ---- 2. srun without PMIx (the default here, and PMI2): refused at once, nothing trained ----
for m in "" --mpi=pmi2; do
    timeout 60 srun $m -n 2 ./fsdpc $T --metrics_file "$W/unwired.jsonl" >"$W/unwired.out" 2>&1
    rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ ! -s "$W/unwired.jsonl" ] &&
        grep -Eq "^fsdpc: error: .*--mpi=pmix|OMPI was not built with SLURM's PMI support" "$W/unwired.out"
    check "srun ${m:---mpi=none (MpiDefault)} -n 2: unwired copies refused, nothing trained" $? "rc=$rc $(grep -m3 -E 'error|OMPI' "$W/unwired.out" | head -c 300 | tr '\n' '|')"
done

# ---- the recipe itself, scaled down by sbatch options and its environment ----
MODEL="--hidden_width 128 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 256 --max_context_width 128 --num_tokens 0"
STEPS=30
# submit NAME [SBATCH OPTIONS]: run/slurm.sbatch on 1 node x 2 ranks; log $W/NAME.log,
# checkpoints $W/NAME, losses $W/NAME.jsonl (appended to by every run of the job)
submit() {
    local name=$1
    shift
    DATA=data/tinyshakespeare.txt MODEL_ARGS="$MODEL" STEPS=$STEPS WARMUP=5 CKPT="$W/$name" CKPT_FREQ=10 \
        EXTRA_ARGS="--logging_freq 1 --metrics_file $W/$name.jsonl" \
        timeout 20 sbatch --parsable -N 1 --ntasks-per-node=2 --cpus-per-task=1 -o "$W/$name.log" -J "fsdpc-$name" "$@" run/slurm.sbatch
}
job_field() { timeout 10 scontrol show job "$1" 2>/dev/null | grep -oE "(^| )$2=[^ ]*" | head -1 | cut -d= -f2; }
wait_job() {  # wait_job ID SECONDS: until the job has ended (state other than pending/running/...)
    local s
    for _ in $(seq $(($2 * 5))); do
        s=$(job_field "$1" JobState)
        case $s in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED | BOOT_FAIL | DEADLINE) return 0 ;; esac
        sleep 0.2
    done
    timeout 10 scancel "$1"
    return 1
}
wait_step() {  # wait_step LOG N SECONDS: until the log shows step N (or later)
    for _ in $(seq $(($3 * 10))); do
        [ "$(sed -nE 's/^Batch ([0-9]+) .*/\1/p' "$1" 2>/dev/null | tail -1)" -ge "$2" ] 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
ckpt_name() { printf 'step_%08d.h5' "$1"; }

# ---- 3. sbatch run/slurm.sbatch: trains, checkpoints, completes ----
start=$(date +%s)
id=$(submit full)
wait_job "$id" 60
state=$(job_field "$id" JobState) exit=$(job_field "$id" ExitCode)
[ "$state" = COMPLETED ] && [ "$exit" = 0:0 ] && grep -q "^Batch $STEPS Loss" "$W/full.log" &&
    [ -f "$W/full/$(ckpt_name $STEPS)" ] && [ "$(wc -l <"$W/full.jsonl")" = $STEPS ]
check "sbatch run/slurm.sbatch (1 node x 2 ranks): trains $STEPS steps, checkpoints, completes ($(($(date +%s) - start)) s)" $? \
    "state=$state exit=$exit $(ls "$W/full" 2>/dev/null | tr '\n' ' ') $(tail -n 3 "$W/full.log" | head -c 300 | tr '\n' '|')"


# ---- 4. scancel mid-run (SIGTERM: checkpoint, no requeue), then a resubmission resumes exactly ----
id=$(submit cancel)
wait_step "$W/cancel.log" 8 60
timeout 10 scancel "$id"
wait_job "$id" 30
state=$(job_field "$id" JobState) restarts=$(job_field "$id" Restarts)
last=$(ls "$W/cancel" 2>/dev/null | sed -nE 's/^step_0*([0-9]+)\.h5$/\1/p' | sort -n | tail -1)
[ "$state" = CANCELLED ] && [ "$restarts" = 0 ] && [ -n "$last" ] && [ "$last" -lt $STEPS ] && grep -q "^Preempted (signal) after step $last" "$W/cancel.log"
check "scancel mid-run: the job ends (not requeued) with a checkpoint of its last step (${last:-none})" $? \
    "state=$state restarts=$restarts $(tail -n 3 "$W/cancel.log" | head -c 300 | tr '\n' '|')"
id=$(submit cancel)
wait_job "$id" 60
state=$(job_field "$id" JobState)
n=$((STEPS - ${last:-0}))
d=$(rel_diff <(tail -n $n "$W/full.jsonl") <(tail -n $n "$W/cancel.jsonl") $n 0)
ok=$?
[ $ok = 0 ] && [ "$state" = COMPLETED ] && grep -q "^Resumed from $W/cancel/$(ckpt_name "${last:-0}") at step ${last:-0} " "$W/cancel.log"
check "resubmitted, it resumes at step ${last:-?} and its $n steps match the uninterrupted job's ($d)" $? \
    "state=$state $(grep -m1 '^Resumed' "$W/cancel.log")"

# ---- 5. preemption signal: checkpoint, exit 75, the recipe requeues itself and resumes ----
id=$(submit preempt)
wait_step "$W/preempt.log" 5 60
timeout 10 scancel --signal=USR1 "$id"
for _ in $(seq 300); do [ "$(job_field "$id" Restarts)" = 1 ] && break; sleep 0.1; done
wait_job "$id" 60
state=$(job_field "$id" JobState) restarts=$(job_field "$id" Restarts)
p=$(sed -nE 's/^Preempted \(signal\) after step ([0-9]+): checkpoint written.*/\1/p' "$W/preempt.log")
[ -n "$p" ] && grep -q "^Saved checkpoint $W/preempt/$(ckpt_name "$p") " "$W/preempt.log" &&
    grep -q "tasks 0-1: Exited with exit code 75" "$W/preempt.log" && grep -q "^fsdpc exited with 75 .*requeueing job $id" "$W/preempt.log"
check "scancel --signal=USR1: every rank checkpoints after step ${p:-?}, srun exits 75, the job requeues itself" $? \
    "$(grep -E '^(Preempted|srun|fsdpc)' "$W/preempt.log" | head -c 300 | tr '\n' '|')"
d=$(rel_diff "$W/full.jsonl" "$W/preempt.jsonl" $STEPS 0)
ok=$?
[ $ok = 0 ] && [ "$state" = COMPLETED ] && [ "$restarts" = 1 ] && grep -q "^Resumed from $W/preempt/$(ckpt_name "${p:-0}") at step ${p:-0} " "$W/preempt.log"
check "the requeued job resumes at step ${p:-?} and completes, losses equal to the uninterrupted job's ($d)" $? \
    "state=$state restarts=$restarts $(grep -m1 '^Resumed' "$W/preempt.log")"

echo "# done"
