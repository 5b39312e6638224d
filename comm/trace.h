// trace: a Chrome trace-event timeline of a window of training steps (--trace_steps), one process
// per rank: every rank's in one file (--trace_file, for Perfetto or chrome://tracing), and/or one
// file per rank in a folder, named and shaped as torch.profiler's tensorboard_trace_handler writes
// them (--trace_dir, for TensorBoard's PyTorch profiler plugin). Callers mark spans and counters;
// comm.c adds each collective as a span of its own. Off, every call is one branch.
#ifndef FSDPC_COMM_TRACE_H
#define FSDPC_COMM_TRACE_H

#include <stddef.h>
#include <stdint.h>

// the timeline rows of a rank besides its collectives (which get rows of their own)
typedef enum { TRACE_COMPUTE, TRACE_DATA, TRACE_COPY, TRACE_NTHREADS } TraceThread;

extern int trace_on;  // nonzero while the step window is being recorded

// Collective, at start-up: checks that rank 0 can write `file` and every rank a file in the
// folder `dir` (made by the caller), either "" when not asked for (every rank fails with one line
// if not), and aligns the ranks' clocks (a barrier, then each rank's time zero). Steps
// first..last (1-based, as logged) are recorded. 0, or -1 on every rank with the line in err.
int trace_open(const char *file, const char *dir, int first_step, int last_step, char *err, size_t errlen);
// Collective, before step `step` (1-based) runs: starts the window, or after its last step writes
// the outputs: each rank its file in `dir`, and rank 0 `file` with every rank's events gathered
// (each written under a temporary name, then renamed). NULL, or on every rank the line of the
// first rank that could not write.
const char *trace_step(int step);
// Collective, at the end of the run: writes the outputs if the window is still open (NULL, or the
// line as trace_step's).
const char *trace_close(void);

void trace_begin_at(TraceThread t, const char *name, int unit);
void trace_end_at(TraceThread t);
void trace_counter_at(const char *name, double value);
// A finished collective: start and end on clock_now_us's clock.
void trace_collective(const char *op, const char *group, uint64_t seq, size_t bytes, const char *dtype, int64_t start_us,
                      int64_t end_us);

// A span on row t, nested in the row's open spans; unit < 0: not about one unit.
static inline void trace_begin(TraceThread t, const char *name, int unit) {
    if (trace_on) trace_begin_at(t, name, unit);
}
static inline void trace_end(TraceThread t) {
    if (trace_on) trace_end_at(t);
}
static inline void trace_counter(const char *name, double value) {
    if (trace_on) trace_counter_at(name, value);
}

#endif
