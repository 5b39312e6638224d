// timers: opt-in GPU time per category (kernels.h, FSDPC_GPU_TIMERS) from CUDA events around
// each op on the compute stream. Events are read back in batches, when the pool is full (one
// wait per 4096 ops) and at the report, so timing perturbs the run little.
#include <string.h>

#include "common.cuh"

namespace {

constexpr int kPairs = 4096;
cudaEvent_t starts[kPairs], stops[kPairs], first_mark, last_mark;
int categories[kPairs], ops[kPairs], used, marks;
double totals[KERN_TIMER_N];
const char *op_names[KERN_TIMER_OPS];
int n_ops;
double op_ms[KERN_TIMER_OPS];
long op_calls[KERN_TIMER_OPS];

cudaEvent_t timing_event() {
    cudaEvent_t e;
    cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDefault));
    return e;
}

// adds the recorded pairs' times to the totals and frees the pool
void flush() {
    if (!used) return;
    cudaCheck(cudaEventSynchronize(stops[used - 1]));
    for (int i = 0; i < used; i++) {
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, starts[i], stops[i]));
        totals[categories[i]] += ms;
        op_ms[ops[i]] += ms;
        op_calls[ops[i]]++;
    }
    used = 0;
}

}  // namespace

extern "C" {

int cuda_timer_op(const char *name) {
    for (int i = 0; i < n_ops; i++)
        if (!strcmp(op_names[i], name)) return i;
    if (n_ops == KERN_TIMER_OPS - 1) op_names[n_ops++] = "(other ops)";
    if (n_ops == KERN_TIMER_OPS) return KERN_TIMER_OPS - 1;
    op_names[n_ops] = name;
    return n_ops++;
}

int cuda_timer_start(int category, int op) {
    if (!marks) return -1;  // before the first step boundary: warm-up
    if (!starts[0])
        for (int i = 0; i < kPairs; i++) starts[i] = timing_event(), stops[i] = timing_event();
    if (used == kPairs) flush();
    categories[used] = category;
    ops[used] = op;
    cudaCheck(cudaEventRecord(starts[used], cuda_stream()));
    return used++;
}

void cuda_timer_stop(int handle) { cudaCheck(cudaEventRecord(stops[handle], cuda_stream())); }

void cuda_timer_mark(void) {
    if (!first_mark) first_mark = timing_event(), last_mark = timing_event();
    cudaCheck(cudaEventRecord(marks ? last_mark : first_mark, cuda_stream()));
    marks++;
}

int cuda_timer_totals(double *ms) {
    flush();
    for (int i = 0; i < KERN_TIMER_N; i++) ms[i] = totals[i];
    if (marks >= 2) {
        float span;
        cudaCheck(cudaEventSynchronize(last_mark));
        cudaCheck(cudaEventElapsedTime(&span, first_mark, last_mark));
        ms[KERN_TIMER_N - 1] = span;
    }
    return marks;
}

int cuda_timer_ops(double *ms, long *calls, const char **names) {
    flush();
    for (int i = 0; i < n_ops; i++) ms[i] = op_ms[i], calls[i] = op_calls[i], names[i] = op_names[i];
    return n_ops;
}

}  // extern "C"
