#!/usr/bin/env bash
# Seeing inside a run: the Chrome trace (--trace_file, --trace_steps, --use_profiler) checked
# against the trace-event format with every unit's spans on every rank and the prefetched
# all-gather overlapping compute; the per-rank files of --trace_dir checked against what
# TensorBoard's PyTorch profiler plugin reads (names, top-level members, events, steps), alone and
# beside --trace_file; --profile_steps in both spellings; --use_nsys under nsys and not; the
# flight recorder on SIGUSR2 (training goes on) and
# --collective_timeout with a rank stopped mid-training (the others name it and the job ends);
# the same trace on the emulated GPU (collectives timed with CUDA events) and an NCCL
# asynchronous error ending the job.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="trace: "
M="--tokenizer byte --hidden_width 32 --num_layers 3 --num_heads 4 --num_key_value_heads 2 --intermediate_size 64 --max_context_width 16
   --batch_size 2 --lr 3e-3 --warmup 1 --num_tokens 0 --checkpoint_freq 0 --train_data data/tinyshakespeare.txt
   --num_threads 1"

# validate FILE RANKS UNITS [recompute] [overlap] [gathers]: the trace-event format (required keys
# per phase, numeric non-negative ts/dur, integer pid/tid, named processes and threads), every
# unit's forward and backward span on every rank, spans of a row nested, memory and loss counters;
# with the options: recompute spans, all-gather spans, and an all-gather issued in unit u's
# forward (unit u+1's prefetch) still running when u's compute ends
validate() {
    /usr/bin/python3 - "$@" <<'EOF'
import json, sys
path, ranks, units = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
want_recompute, want_overlap = "recompute" in sys.argv[4:], "overlap" in sys.argv[4:]
doc = json.load(open(path))
ev = doc["traceEvents"]
def fail(msg):
    print(msg); sys.exit(1)
num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
for e in ev:
    ph = e.get("ph")
    need = {"X": ["name", "ph", "ts", "dur", "pid", "tid"], "C": ["name", "ph", "ts", "pid", "args"],
            "M": ["name", "ph", "pid", "args"]}.get(ph)
    if need is None: fail(f"unexpected phase {ph!r}: {e}")
    for k in need:
        if k not in e: fail(f"{ph} event without {k}: {e}")
    if not isinstance(e["pid"], int) or ("tid" in e and not isinstance(e["tid"], int)): fail(f"pid/tid not int: {e}")
    for k in ("ts", "dur"):
        if k in e and (not num(e[k]) or e[k] < 0): fail(f"bad {k}: {e}")
    if ph == "C" and not all(num(v) for v in e["args"].values()): fail(f"counter with non-numeric value: {e}")
    if ph == "M":
        if e["name"] not in ("process_name", "thread_name", "process_sort_index", "process_labels"): fail(f"metadata {e}")
        if e["name"].endswith("_name") and not isinstance(e["args"].get("name"), str): fail(f"metadata without a name: {e}")
    if ph == "X" and e.get("cat") == "collective":
        a = e.get("args", {})
        if not (isinstance(a.get("bytes"), int) and isinstance(a.get("group"), str) and isinstance(a.get("dtype"), str)):
            fail(f"collective without bytes/group/dtype: {e}")
# spans on one row nest (Perfetto draws X events of a thread as a stack); ties in ts: longer first
rows = {}
for e in ev:
    if e["ph"] == "X": rows.setdefault((e["pid"], e["tid"]), []).append(e)
for key, spans in rows.items():
    stack = []
    for e in sorted(spans, key=lambda e: (e["ts"], -e["dur"])):
        while stack and stack[-1] <= e["ts"]: stack.pop()
        if stack and e["ts"] + e["dur"] > stack[-1] + 0.002: fail(f"row {key}: {e['name']} overlaps without nesting")
        stack.append(e["ts"] + e["dur"])
for r in range(ranks):
    pname = [e for e in ev if e["ph"] == "M" and e["name"] == "process_name" and e["pid"] == r]
    if not pname: fail(f"rank {r} has no process_name")
    tnames = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == r}
    for want in ("compute", "collectives", "data loading", "copy/offload stream"):
        if want not in tnames.values(): fail(f"rank {r}: no thread named {want}: {tnames}")
    used = {e["tid"] for e in ev if e["pid"] == r and e["ph"] == "X"}
    if used - set(tnames): fail(f"rank {r}: unnamed threads {used - set(tnames)}")
    X = [e for e in ev if e["pid"] == r and e["ph"] == "X"]
    names = {e["name"] for e in X}
    for u in range(units):
        fwd = f"forward unit {u}" in names or f"forward+backward unit {u}" in names
        bwd = f"backward unit {u}" in names or f"forward+backward unit {u}" in names
        if not (fwd and bwd): fail(f"rank {r}: unit {u} lacks a forward or backward span")
    for n in ("data wait", "optimizer", "clip grad norm"):
        if n not in names: fail(f"rank {r}: no {n} span")
    if want_recompute and not any(n.startswith("recompute unit") for n in names): fail(f"rank {r}: no recompute span")
    for c in ("memory", "loss"):
        if not any(e["ph"] == "C" and e["name"] == c and e["pid"] == r for e in ev): fail(f"rank {r}: no {c} counter")
    gathers = [e for e in X if e["name"] == "all-gather"]
    if (want_overlap or "gathers" in sys.argv[4:]) and not gathers: fail(f"rank {r}: no all-gather span")
    blocks = sorted(int(e["name"].split()[-1]) for e in X if e["name"].startswith("forward unit"))[1:]
    overlapped = 0
    for f in (e for e in X if e["name"].startswith("forward unit") and e["args"]["unit"] in blocks[:-1]):
        end = f["ts"] + f["dur"]
        if any(f["ts"] <= g["ts"] <= end < g["ts"] + g["dur"] for g in gathers): overlapped += 1
    if want_overlap and overlapped == 0: fail(f"rank {r}: no all-gather runs on past the compute of the unit that issued it")
print(f"{len(ev)} events")
EOF
}

# np=2 full-shard, steps 2-3 (validation in step 2 too)
$MPI -np 2 ./fsdpc $M --sharding full-shard --max_steps 4 --validation_freq 2 --val_data data/tinyshakespeare.txt \
    --validation_batches 1 --trace_file "$W/np2.json" --trace_steps 2:3 >"$W/np2.log" 2>&1
rc=$?
out=$(validate "$W/np2.json" 2 5 overlap 2>&1)
[ $rc = 0 ] && grep -q "trace of steps 2-3 written to $W/np2.json" "$W/np2.log"
check "np=2 full-shard writes the trace of steps 2-3" $? "(rc=$rc) $(tail -c 300 "$W/np2.log")"
[ -n "$out" ] && [ "${out% events}" != "$out" ]
check "np=2: valid trace events, every unit's forward and backward on both ranks, prefetched all-gather overlapping compute ($out)" $? "$out"
/usr/bin/python3 -c '
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
steps = {e["args"]["step"] for e in ev if e["ph"] == "X"}
names = {e["name"] for e in ev}
sys.exit(not (steps == {2, 3} and "validation" in names))' "$W/np2.json"
check "the window holds steps 2 and 3 only, validation included" $?

# activation checkpointing: the recomputed forward is a span of its own
$MPI -np 2 ./fsdpc $M --sharding grad-shard --max_steps 2 --validation_freq 0 --activation_checkpoints \
    --trace_file "$W/ac.json" >"$W/ac.log" 2>&1
out=$(validate "$W/ac.json" 2 5 recompute 2>&1)
check "--activation_checkpoints: recompute spans (default window, a run shorter than it)" $? "$out"

# tbdir DIR RANKS WORLD STEPS: DIR holds one file per rank as torch.profiler's
# tensorboard_trace_handler names them (<host>_<pid>.<number>.pt.trace.json, each rank its own
# pid) and shapes them for TensorBoard's PyTorch profiler plugin: schemaVersion,
# deviceProperties (a list), distributedInfo (rank, world_size, backend), traceEvents whose every
# event has a name and every span a category, a ProfilerStep#N span per step around the compute
# row's spans; the events are the rank's own and of STEPS only (e.g. 2,3)
tbdir() {
    /usr/bin/python3 - "$@" <<'EOF'
import json, os, re, sys
d, ranks, world, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), {int(s) for s in sys.argv[4].split(",")}
def fail(msg):
    print(msg); sys.exit(1)
names = sorted(os.listdir(d))
if len(names) != ranks: fail(f"{len(names)} files, not {ranks}: {names}")
seen, pids = set(), set()
for n in names:
    m = re.fullmatch(r"(.+)_([0-9]+)\.([0-9]+)\.pt\.trace\.json", n)
    if not m: fail(f"not a tensorboard_trace_handler name: {n}")
    pids.add(m.group(2))
    doc = json.load(open(os.path.join(d, n)))
    if doc.get("schemaVersion") != 1 or not isinstance(doc.get("deviceProperties"), list): fail(f"{n}: schemaVersion/deviceProperties")
    info = doc.get("distributedInfo", {})
    r = info.get("rank")
    if info.get("world_size") != world or info.get("backend") not in ("mpi", "nccl") or not isinstance(r, int): fail(f"{n}: {info}")
    seen.add(r)
    ev = doc["traceEvents"]
    if any(not isinstance(e.get("name"), str) for e in ev): fail(f"{n}: an event without a name")
    if any(e["ph"] == "X" and not e.get("cat") for e in ev): fail(f"{n}: a span without a category")
    if {e["pid"] for e in ev} != {r}: fail(f"{n}: events of other ranks: {sorted({e['pid'] for e in ev})}")
    got = {e["args"]["step"] for e in ev if e["ph"] == "X"}
    if got != steps: fail(f"{n}: spans of steps {sorted(got)}, not {sorted(steps)}")
    marks = {int(e["name"].split("#")[1]): e for e in ev if e["name"].startswith("ProfilerStep#")}
    if set(marks) != steps or any(e["cat"] != "user_annotation" for e in marks.values()): fail(f"{n}: ProfilerStep spans {sorted(marks)}")
    for e in ev:  # the compute row's spans lie in their step's span
        s = marks.get(e.get("args", {}).get("step"))
        if e["ph"] == "X" and e["tid"] == s["tid"] and not (s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 0.002):
            fail(f"{n}: {e['name']} of step {e['args']['step']} outside ProfilerStep#{e['args']['step']}")
    if not any(e["ph"] == "X" and e["cat"] == "cpu_op" and e["name"].startswith("forward unit") for e in ev): fail(f"{n}: no forward span")
if seen != set(range(world)): fail(f"files of ranks {sorted(seen)}")
if len(pids) != ranks: fail(f"worker names share a pid: {names}")
print(f"{len(names)} files")
EOF
}

# --trace_dir, np=2, steps chosen as torch.profiler.schedule(wait=1, warmup=0, active=2) would: 2-3
$MPI -np 2 ./fsdpc $M --sharding full-shard --max_steps 4 --validation_freq 0 --trace_dir "$W/tb/run" \
    --profile_steps 1,0,2 >"$W/tb.log" 2>&1
rc=$?
out=$(tbdir "$W/tb/run" 2 2 2,3 2>&1)
[ $rc = 0 ] && [ "$out" = "2 files" ] && grep -q "trace of steps 2-3 written to $W/tb/run: a file per rank" "$W/tb.log"
check "--trace_dir, np=2, --profile_steps 1,0,2: a file per rank, named and shaped for TensorBoard's profiler plugin, steps 2-3 only" \
    $? "(rc=$rc) $out $(tail -c 300 "$W/tb.log")"

# both outputs at once: the one file holds what the per-rank files hold
$MPI -np 2 ./fsdpc $M --sharding full-shard --max_steps 3 --validation_freq 0 --trace_dir "$W/both" --trace_file "$W/both.json" \
    --profile_steps 2:2 >"$W/both.log" 2>&1
rc=$?
out=$(tbdir "$W/both" 2 2 2 2>&1)
/usr/bin/python3 - "$W/both.json" "$W/both" <<'EOF'
import json, os, sys
key = lambda e: json.dumps(e, sort_keys=True)
merged = sorted(key(e) for e in json.load(open(sys.argv[1]))["traceEvents"])
ranks = sorted(key(e) for n in os.listdir(sys.argv[2]) for e in json.load(open(os.path.join(sys.argv[2], n)))["traceEvents"])
sys.exit(not (merged and merged == ranks))
EOF
same=$?
[ $rc = 0 ] && [ "$out" = "2 files" ] && [ $same = 0 ] && validate "$W/both.json" 2 5 >/dev/null
check "--trace_dir with --trace_file: both written, the one file holding every rank's file's events" $? "(rc=$rc, same=$same) $out"

# --use_profiler (the profiling recipe): its handler's folder, profile_traces, and its schedule's steps 4-6
(cd "$W" && "$OLDPWD/fsdpc" $M --train_data "$OLDPWD/data/tinyshakespeare.txt" --max_steps 6 --validation_freq 0 \
    --use_profiler=True --recipe_defaults none >"$W/prof.log" 2>&1)
out=$(tbdir "$W/profile_traces" 1 1 4,5,6 2>&1)
check "--use_profiler=True writes profile_traces/ as the recipe's tensorboard_trace_handler does, steps 4-6" $? \
    "$out $(tail -c 300 "$W/prof.log")"
./fsdpc $M --max_steps 2 --validation_freq 0 --use_profiler --recipe_defaults none --trace_file "$W/uf.json" --profile_steps 2:2 >"$W/uf.log" 2>&1
[ $? = 0 ] && /usr/bin/python3 -c '
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
sys.exit({e["args"]["step"] for e in ev if e["ph"] == "X"} != {2})' "$W/uf.json" && ! grep -q profile_traces "$W/uf.log"
check "--use_profiler with --trace_file and --profile_steps: that file, those steps, no folder" $? "$(tail -c 300 "$W/uf.log")"

expect_error "an unwritable --trace_file is refused at start-up" "^fsdpc: error: cannot write --trace_file '/nonexistent/t.json'" \
    $MPI -np 2 ./fsdpc $M --max_steps 1 --trace_file /nonexistent/t.json
for bad in 3:1 0:2 x 2 1:2:3 1,2 1,2,0 -1,0,1 1,2,3,1; do
    expect_error "--trace_steps $bad" "^fsdpc: error: --trace_steps must be A:B with 1 <= A <= B .*, or W,U,A as torch.profiler.schedule's" \
        ./fsdpc $M --trace_steps "$bad"
done
expect_error "--profile_steps spells --trace_steps" "^fsdpc: error: --trace_steps must be A:B" ./fsdpc $M --profile_steps 0:1
touch "$W/afile"
expect_error "a file as --trace_dir" "^fsdpc: error: --trace_dir '$W/afile' is a file, not a folder" \
    $MPI -np 2 ./fsdpc $M --max_steps 1 --trace_dir "$W/afile"

# --use_nsys: refused with the nsys line when not under nsys; under it (nsys's variable in the
# environment) logged once with what the report shows; off, nothing
expect_error "--use_nsys without nsys names the launch under nsys" \
    "^fsdpc: error: --use_nsys: this rank does not run under nsys.* srun --mpi=pmix nsys profile --trace=cuda,nvtx,mpi -o fsdpc_%q\{SLURM_PROCID\} ./fsdpc" \
    $MPI -np 2 ./fsdpc $M --max_steps 1 --use_nsys=True --recipe_defaults none
NSYS_PROFILING_SESSION_ID=1 $MPI -np 2 -x NSYS_PROFILING_SESSION_ID ./fsdpc $M --max_steps 1 --validation_freq 0 \
    --use_nsys=True --recipe_defaults none >"$W/nsys.log" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(grep -c '^--use_nsys: under nsys, on the CPU device, where fsdpc marks no NVTX ranges' "$W/nsys.log")" = 1 ]
check "--use_nsys under nsys: runs, one line saying what the report holds" $? "(rc=$rc) $(tail -c 300 "$W/nsys.log")"
./fsdpc $M --max_steps 1 --validation_freq 0 --use_nsys=False --recipe_defaults none >"$W/nsys0.log" 2>&1
[ $? = 0 ] && ! grep -q nsys "$W/nsys0.log"
check "--use_nsys=False: no check, no line" $? "$(tail -c 300 "$W/nsys0.log")"
expect_error "--collective_timeout -1" "^fsdpc: error: --collective_timeout must be in \[0, 1e7\]" ./fsdpc $M --collective_timeout -1

# start_job NAME NP ARGS...: an NP-rank run in the background; sets JOB (its timeout) and RANKS
# (the ranks' pids)
start_job() {
    local name=$1 np=$2 mpirun_pid i
    shift 2
    timeout 90 mpirun --oversubscribe --allow-run-as-root -np $np ./fsdpc $M "$@" >"$W/$name.out" 2>"$W/$name.err" &
    JOB=$!
    for i in $(seq 100); do  # the ranks, once they have logged a step
        mpirun_pid=$(pgrep -P $JOB)
        RANKS=$(pgrep -P "$mpirun_pid" 2>/dev/null | tr '\n' ' ')
        [ "$(echo $RANKS | wc -w)" = $np ] && grep -q '^Batch' "$W/$name.err" && return
        sleep 0.2
    done
}
rank_of() { tr '\0' '\n' <"/proc/$1/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p'; }  # a rank's pid to its rank

# SIGUSR2 on one rank: its ring on stderr, and training goes on (steps logged after the ring), until
# SIGTERM ends the run as a preemption (status 75)
start_job usr2 2 --max_steps 100000000 --logging_freq 100 --validation_freq 0
kill -USR2 ${RANKS%% *}
for i in $(seq 150); do  # the ring, then a step logged after it
    sed -n '/SIGUSR2; flight recorder/,$p' "$W/usr2.err" | grep -q '^Batch' && break
    sleep 0.2
done
kill -TERM ${RANKS%% *}
wait $JOB
rc=$?
[ $rc = 75 ] && grep -Eq '^fsdpc: rank [01]: SIGUSR2; flight recorder, last 64 of [0-9]+ collectives' "$W/usr2.err" &&
    [ "$(grep -Ec '^fsdpc: rank [01]:   (all-gather|reduce-scatter|all-reduce|broadcast|barrier|gather) #[0-9]+ on (world|shard|replica), [0-9]+ bytes, start' "$W/usr2.err")" = 64 ] &&
    sed -n '/SIGUSR2; flight recorder/,$p' "$W/usr2.err" | grep -q '^Batch'
check "SIGUSR2 prints the last 64 collectives and training continues" $? "(rc=$rc) $(grep -m3 -v '^Batch' "$W/usr2.err" | head -c 400)"

# 3 ranks, one stopped mid-training: the other two print their rings and the collective each waits
# in, trade positions on the side channel, and the lower of them names the stopped rank in the
# job's one error line; the job ends non-zero well within the test's bound
start_job stop 3 --max_steps 100000000 --logging_freq 100000 --validation_freq 0 --collective_timeout 10
pid=$(echo $RANKS | cut -d' ' -f2)
stopped=$(rank_of $pid)
t0=$(date +%s)
kill -STOP $pid
wait $JOB
rc=$?
took=$(($(date +%s) - t0))
kill -KILL $pid 2>/dev/null
others=$(echo 0 1 2 | tr ' ' '\n' | grep -v "^$stopped$" | tr '\n' ' ')
lowest=${others%% *}
set -- $others
# (ranks' stderr reaches the log through mpirun in chunks, so a line may start mid-line: matches are
# not anchored; and Open MPI's kill sequence sends SIGCONT first, so the stopped rank may add its
# own ring at the very end: it is not checked)
[ -n "$stopped" ] && [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ $took -lt 40 ] &&
    [ "$(grep -Eo "fsdpc: rank ($1|$2): waited [0-9]+\.[0-9] s in [a-z-]+ #[0-9]+ on group (world|shard) \((another rank ran out of )?--collective_timeout 10\); flight recorder" "$W/stop.err" | cut -d: -f2 | sort -u | wc -l)" = 2 ] &&
    grep -Eq 'NOT FINISHED after 1[0-9]\.' "$W/stop.err" &&
    [ "$(grep -o 'fsdpc: error:' "$W/stop.err" | wc -l)" = 1 ] &&
    grep -Eq "fsdpc: error: collective timeout: rank $lowest waited .* #[0-9]+ on group .*rank\(s\) not arrived \(stopped, dead, or stuck outside a collective\): $stopped; rank $2 waits in [a-z-]+ #[0-9]+ on (world|shard)\$" "$W/stop.err"
check "--collective_timeout 10, 3 ranks, rank ${stopped:-?} stopped: the others print their rings and stuck sequences, rank $lowest names rank ${stopped:-?}, the job exits $rc after ${took}s" $? \
    "$(grep -v '^fsdpc: rank [0-9]:   ' "$W/stop.err" | grep -m4 -E 'fsdpc|rc' | head -c 600)"

# the emulated GPU: collectives over emulated NCCL, timed with CUDA events, in the trace
E="--tokenizer byte --hidden_width 32 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 64 --max_context_width 16
   --batch_size 1 --max_steps 2 --num_tokens 0 --validation_freq 0 --checkpoint_freq 0 --train_data data/tinyshakespeare.txt
   --num_threads 1 --device cuda"
$MPI -np 2 ./build/fsdpc_emu $E --sharding full-shard --trace_file "$W/emu.json" --trace_dir "$W/emu" >"$W/emu.log" 2>&1
out=$(validate "$W/emu.json" 2 4 gathers 2>&1)
check "emulated GPU, np=2: valid trace with NCCL collectives timed on their stream" $? "$out $(tail -c 300 "$W/emu.log")"
out=$(tbdir "$W/emu" 2 2 1,2 2>&1) && out=$(/usr/bin/python3 -c '
import glob, json, sys
for n in glob.glob(sys.argv[1] + "/*.pt.trace.json"):
    d = json.load(open(n))
    p, info = d["deviceProperties"], d["distributedInfo"]
    if info["backend"] != "nccl" or len(p) != 1 or not p[0]["name"] or p[0]["totalGlobalMem"] <= 0 or not isinstance(p[0]["id"], int):
        sys.exit(n + ": " + json.dumps(p) + " " + json.dumps(info))' "$W/emu" 2>&1)
check "emulated GPU, np=2: --trace_dir files name the rank's device (id, name, memory) and NCCL" $? "$out"
expect_error "an NCCL asynchronous error (emulated) ends the job" \
    "^fsdpc: error: NCCL failed in [a-z-]+ #[0-9]+ on group shard: emulated NCCL error \(communicators aborted\)" \
    $MPI -np 2 bash -c '[ "$OMPI_COMM_WORLD_RANK" = 0 ] && export FSDPC_EMU_NCCL_ASYNC_ERROR=5; exec "$@"' _ \
    ./build/fsdpc_emu $E --sharding full-shard  # two ranks: one rank has no gathers to fail

# a window the run never reaches: no file, and a warning saying why (not silence)
./fsdpc $M --max_steps 2 --trace_file "$W/never.json" --trace_steps 5:6 >"$W/never.log" 2>&1
[ $? = 0 ] && [ ! -e "$W/never.json" ] &&
    grep -q "^warning: --trace_file $W/never.json not written: the run never reached --trace_steps 5:6" "$W/never.log"
check "--trace_steps past the run's end: no file, one warning naming the window" $? "$(tail -c 300 "$W/never.log")"
