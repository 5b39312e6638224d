// timers: opt-in GPU time per category (kernels.h, FSDPC_GPU_TIMERS) from CUDA events around
// each op on the compute stream. Events are read back in batches, when the pool is full (one
// wait per 4096 ops) and at the report, so timing perturbs the run little.
#include "common.cuh"

namespace {

constexpr int kPairs = 4096;
cudaEvent_t starts[kPairs], stops[kPairs], first_mark, last_mark;
int categories[kPairs], used, marks;
double totals[KERN_TIMER_N];

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
    }
    used = 0;
}

}  // namespace

extern "C" {

int cuda_timer_start(int category) {
    if (!marks) return -1;  // before the first step boundary: warm-up
    if (!starts[0])
        for (int i = 0; i < kPairs; i++) starts[i] = timing_event(), stops[i] = timing_event();
    if (used == kPairs) flush();
    categories[used] = category;
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

}  // extern "C"
