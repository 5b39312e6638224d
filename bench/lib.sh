# Helpers the bench scripts share (sourced): the caller sets MODEL, STEPS, MPI and LOG.

# bench_run NAME FLAGS...: "tokens/s activations-MiB" of a run's timed steps (the first is warm-up);
# NAME labels the failure line
bench_run() {
    local name=$1 t m
    shift
    $MPI ./fsdpc $MODEL --train_data synthetic --max_steps $((STEPS + 1)) --logging_freq $((STEPS + 1)) --checkpoint_freq 0 \
        --num_tokens 0 --validation_freq 0 --num_threads 1 "$@" >"$LOG" 2>&1 || true
    read -r t m < <(awk -v s=$((STEPS + 1)) '$0 ~ "^Batch " s " Loss" { sub(/.*tokens\/sec: /, ""); split($0, a, ","); t = a[1] }
        $0 ~ "^Batch " s " memory" { sub(/.*activations [0-9.]+\//, ""); split($0, b, ","); m = b[1] } END { print t, m }' "$LOG")
    if [ -z "$m" ]; then
        echo "$name: no reading from the run with $*:" >&2
        tail -5 "$LOG" >&2
        exit 1
    fi
    echo "$t $m"
}
