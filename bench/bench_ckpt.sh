#!/usr/bin/env bash
# Step time on checkpoint steps against ordinary steps, with and without --async_checkpoint: one
# rank, one compute thread (the writer gets the machine's other core), a 25.6M-parameter model
# whose 307 MB checkpoint takes several steps to write. Each step's time is its span in the
# Chrome trace (the step, its checkpoint included); ordinary steps are the median of the run's
# steps that checkpoint nothing (under --async_checkpoint most of them run beside a write, which
# takes memory bandwidth and, on a small machine, CPU from them: said apart), and the run's last
# checkpoint (always written before the run ends) is left out. What a checkpoint costs the run
# in all: steps 2 to the one before the last against the same steps of a run without checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
FREQ=10 STEPS=41
MODEL="--tokenizer byte --vocab_size 256 --hidden_width 512 --num_layers 8 --num_heads 8 --num_key_value_heads 8 --intermediate_size 1376
       --max_context_width 32 --batch_size 1 --train_data synthetic --num_tokens 0 --validation_freq 0 --num_threads 1 --logging_freq 1000"
for mode in none sync async; do
    flag="--checkpoint_freq $FREQ"
    [ $mode = none ] && flag="--checkpoint_freq 0"
    [ $mode = async ] && flag="$flag --async_checkpoint"
    OMP_NUM_THREADS=1 ./fsdpc $MODEL --max_steps $STEPS --checkpoint_dir "$D/$mode" $flag \
        --trace_file "$D/$mode.json" --trace_steps 1:$STEPS >"$D/$mode.log" 2>&1
done
/usr/bin/python3 - "$D" $FREQ $STEPS <<'PY'
import json, re, statistics, sys
d, freq, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def spans(mode):
    ev = json.load(open(f"{d}/{mode}.json"))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    return {int(e["name"].split("#")[1]): e["dur"] / 1e6 for e in ev if e.get("name", "").startswith("ProfilerStep#") and "dur" in e}
writes = [float(x) for x in re.findall(r"written in ([0-9.]+) s", open(f"{d}/async.log").read())]
print(f"checkpoints: 25.6M parameters, 307 MB per checkpoint, every {freq} steps, 1 rank x 1 thread (the writer on another core)")
none = spans("none")
base = sum(none[s] for s in range(2, steps))
print(f" none: ordinary step {statistics.median(none[s] for s in range(2, steps)):.3f} s (median); steps 2-{steps - 1} in {base:.1f} s")
for mode in ("sync", "async"):
    t = spans(mode)
    ck = [t[s] for s in range(freq, steps, freq)]  # the last step's checkpoint is synchronous in both
    plain = [t[s] for s in range(2, steps) if s % freq]
    med = statistics.median(plain)
    line = (f"{mode:>5}: checkpoint step {statistics.mean(ck):.3f} s, ordinary step {med:.3f} s (median): "
            f"ratio {statistics.mean(ck) / med:.2f}x; each checkpoint added {(sum(t[s] for s in range(2, steps)) - base) / len(ck):.2f} s to the run")
    if mode == "async":
        quiet = [t[s] for s in range(2, steps) if s % freq and s % freq > 7]  # the last two before each checkpoint
        line += (f"; the steps before a checkpoint, its write done, {statistics.median(quiet):.3f} s (median); "
                 f"a write took {statistics.mean(writes):.2f} s = {statistics.mean(writes) / med:.1f} steps")
    print(line)
PY
