// trace: events kept as JSON text per rank; at the end of the window each rank writes its own
// file (--trace_dir) and/or gathers them to rank 0, which writes one file (--trace_file).
#include "trace.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../base/clock.h"
#include "../base/err.h"
#include "../base/log.h"
#include "../base/path.h"
#include "../kernels/kernels.h"
#include "comm.h"
#include "io.h"

int trace_on;

enum {
    TID_BASE = 1,        // rows TRACE_COMPUTE.. are tids 1..
    TID_COMM = 10,       // collective rows: overlapping collectives (CPU runs) go on further rows
    COMM_LANES = 6,
    TID_TP = 20,         // the tensor-parallel group's collectives, on the compute's critical path
    DEPTH = 8,           // nested spans per row
    BYTES_PER_STEP = 4 << 20,  // a file's budget per traced step: --trace_file's shared by the ranks
};

static const char *const row_names[TRACE_NTHREADS] = {"compute", "data loading", "copy/offload stream"};

typedef struct {
    char name[48];
    int unit;
    int64_t start;
} Open;

static struct {
    char *path, *dir;  // --trace_file, --trace_dir (heap; "" when not asked for)
    int first, last, step, done;
    int64_t zero_us;     // every rank's time zero, taken right after a barrier
    int64_t step_start;  // when the step being recorded began
    char *buf;        // this rank's events, each followed by ",\n"
    size_t len, cap, limit;
    uint64_t dropped;
    Open open[TRACE_NTHREADS][DEPTH];
    int depth[TRACE_NTHREADS];
    int64_t lane_end[COMM_LANES];
    int lanes_used, tp_used;
} T;

static double rel_us(int64_t us) { return (double)(us - T.zero_us); }

// Appends one event; past the budget events are counted, not kept.
static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emit(const char *fmt, ...) {
    char ev[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(ev, sizeof ev - 2, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof ev - 2 || T.len + (size_t)n + 2 > T.limit) {
        T.dropped++;
        return;
    }
    if (T.len + (size_t)n + 3 > T.cap) {
        T.cap = 2 * (T.len + (size_t)n + 3);
        if (T.cap > T.limit + 1) T.cap = T.limit + 1;
        char *grown = realloc(T.buf, T.cap);
        if (!grown) err_fatal("out of memory growing the trace buffer to %zu bytes", T.cap);
        T.buf = grown;
    }
    memcpy(T.buf + T.len, ev, (size_t)n);
    memcpy(T.buf + T.len + n, ",\n", 3);
    T.len += (size_t)n + 2;
}

// What write_file's trace begins with: an existing file that does not is no earlier trace.
static const char trace_head[] = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";

// Why an existing --trace_file must not be replaced, or NULL: it is empty or an earlier trace.
static const char *replace_problem(const char *path) {
    static char msg[1300];
    char head[sizeof trace_head - 1];
    struct stat st;
    if (stat(path, &st) != 0 || st.st_size == 0) return NULL;
    FILE *f = path_fopen_read(path);
    if (!f) return snprintf(msg, sizeof msg, "cannot read --trace_file '%s': %s", path_show(path), path_strerror(errno)), msg;
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    if (n == sizeof head && !memcmp(head, trace_head, sizeof head)) return NULL;
    return err_text(msg, sizeof msg, "--trace_file '%s' exists and is not a trace fsdpc wrote: it replaces only an earlier trace; give "
             "another path, or remove the file", path_show(path));
}

// the tmp file rank 0 writes before renaming it over `path`
// whether a path is asked for (NULL: trace_open never ran)
static int has(const char *p) { return p && *p; }

static char *tmp_path(void) { return path_fmt("%s.tmp.%ld", T.path, (long)getpid()); }

// This process's worker name as tensorboard_trace_handler gives it by default, "<host>_<pid>" (the
// plugin reads the node and the process from it); characters a file name should not hold become _.
static void worker_name(char *out, size_t len) {
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    for (char *h = host; *h; h++)
        if (!(*h == '-' || *h == '.' || *h == '_' || (*h >= '0' && *h <= '9') || ((*h | 32) >= 'a' && (*h | 32) <= 'z'))) *h = '_';
    snprintf(out, len, "%s_%ld", host, (long)getpid());
}

int trace_open(const char *file, const char *dir, int first_step, int last_step, char *line, size_t linelen) {
    static char err[2400], derr[1400];
    const char *e = NULL;
    path_set(&T.path, file);
    path_set(&T.dir, dir);
    T.first = first_step;
    T.last = last_step;
    if (has(T.path) && comm_info.rank == 0) e = comm_output_path_problem(T.path, "--trace_file", 1);
    if (has(T.path) && comm_info.rank == 0 && !e) e = io_output(T.path, "--trace_file");  // not an input, nor another output
    if (has(T.path) && comm_info.rank == 0 && !e) e = replace_problem(T.path);
    if (has(T.path) && comm_info.rank == 0 && !e) {  // refused now, not after the window has run
        char *tmp = tmp_path();
        FILE *f = fopen(tmp, "w");
        if (!f) e = err_text(err, sizeof err, "cannot write --trace_file '%s' (%s): %s", path_show(T.path), path_show(tmp), comm_path_error(tmp, errno));
        else fclose(f), unlink(tmp);
        free(tmp);
    }
    if (has(T.dir) && !e) {  // every rank writes there (the folder may be each node's own)
        char name[300];
        worker_name(name, sizeof name);
        char *tmp = path_fmt("%s/%s.pt.trace.json.tmp", T.dir, name);
        FILE *f = fopen(tmp, "w");
        if (!f)
            e = err_text(derr, sizeof derr, "cannot write a file in --trace_dir '%s' on rank %d: %s", path_show(T.dir), comm_info.rank,
                          comm_path_error(tmp, errno));
        else fclose(f), unlink(tmp);
        free(tmp);
    }
    if (comm_agree(e, line, linelen)) return -1;
    // the events' budget: the merged file's, shared by the ranks; else each rank's file has its own
    T.limit = (size_t)(last_step - first_step + 1) * BYTES_PER_STEP / (size_t)(has(T.path) ? comm_info.world : 1);
    if (T.limit < (64 << 10)) T.limit = 64 << 10;
    comm_barrier(comm_world());
    T.zero_us = clock_now_us();
    return 0;
}

// current resident memory of this process in MiB, from /proc/self/statm (pages)
static double rss_mib(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

// JSON string contents: a device name is the only text here not written by fsdpc itself
static void json_text(char *out, size_t len, const char *in) {
    size_t n = 0;
    for (; *in && n + 3 < len; in++) {
        if (*in == '"' || *in == '\\') out[n++] = '\\';
        out[n++] = (unsigned char)*in < 0x20 ? ' ' : *in;
    }
    out[n] = 0;
}

// What torch-tb-profiler reads besides the events (as Kineto writes them): the schema version,
// the rank's device ("cuda:D (NAME)" from kern_device_name; none on the CPU) and the rank within
// the job, whose collectives are NCCL's on a GPU and MPI's on the CPU.
static int rank_file_head(FILE *f) {
    char props[600] = "", name[300];
    int dev;
    if (kern_on_gpu() && sscanf(kern_device_name(), "cuda:%d (", &dev) == 1) {
        const char *open = strchr(kern_device_name(), '(');
        size_t free_bytes = 0, total_bytes = 0;
        kern_mem_info(&free_bytes, &total_bytes);
        json_text(name, sizeof name, open + 1);
        if (name[0] && name[strlen(name) - 1] == ')') name[strlen(name) - 1] = 0;
        snprintf(props, sizeof props, "{\"id\":%d,\"name\":\"%s\",\"totalGlobalMem\":%zu}", dev, name, total_bytes);
    }
    return fprintf(f, "{\"schemaVersion\":1,\"deviceProperties\":[%s],\"distributedInfo\":{\"backend\":\"%s\",\"rank\":%d,"
            "\"world_size\":%d},\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", props, kern_on_gpu() ? "nccl" : "mpi",
            comm_info.rank, comm_info.world);
}

// Writes `len` bytes of events (each followed by ",\n") between `head` (or rank_file_head when
// NULL) and the closing members into tmp, then renames it to path. NULL, or why not (errno's).
static const char *write_events(const char *tmp, const char *path, const char *head, const char *ev, size_t len) {
    static char err[1400];
    while (len >= 2 && (ev[len - 1] == '\n' || ev[len - 1] == ','))
        len--;  // the last event's separator
    FILE *f = fopen(tmp, "w");
    int ok = f && (head ? fputs(head, f) >= 0 : rank_file_head(f) > 0) && fwrite(ev, 1, len, f) == len &&
             fprintf(f, "\n],\"otherData\":{\"producer\":\"fsdpc\",\"steps\":\"%d:%d\"}}\n", T.first, T.step - 1) > 0;
    if (f && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) == 0) return NULL;
    snprintf(err, sizeof err, "%s", comm_path_error(tmp, errno));
    unlink(tmp);
    return err;
}

// --trace_dir: this rank's own file, <worker>.<nanoseconds>.pt.trace.json as torch names it (a
// new name, so no earlier file is ever replaced). NULL, or the error line.
static const char *write_rank_file(double *mb) {
    static char err[2000];
    char name[300];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    worker_name(name, sizeof name);
    char *path = path_fmt("%s/%s.%lld%09ld.pt.trace.json", T.dir, name, (long long)now.tv_sec, (long)now.tv_nsec);
    char *tmp = path_fmt("%s.tmp", path);  // a name the plugin's pattern does not list
    const char *e = write_events(tmp, path, NULL, T.buf, T.len);
    *mb = T.len / 1e6;
    if (e) err_text(err, sizeof err, "cannot write --trace_dir file '%s' on rank %d: %s", path_show(path), comm_info.rank, e);
    free(path);
    free(tmp);
    return e ? err : NULL;
}

// --trace_file: every rank's events gathered to rank 0, which writes them. NULL, or the error line.
static const char *write_merged_file(double *mb) {
    static char err[1400];
    char *all = NULL;
    size_t total = 0;
    comm_gather_bytes(comm_world(), T.buf, T.len, &all, &total);
    const char *e = NULL;
    // checked again: the path may have become something else since start-up, and the rename must not land on it
    if (comm_info.rank == 0) e = comm_output_path_problem(T.path, "--trace_file", 1);
    if (comm_info.rank == 0 && !e) e = io_output_check(T.path, "--trace_file");
    if (comm_info.rank == 0 && !e) e = replace_problem(T.path);
    if (comm_info.rank == 0 && !e) {
        char *tmp = tmp_path();
        const char *why = write_events(tmp, T.path, trace_head, all, total);
        free(tmp);
        if (why) e = err_text(err, sizeof err, "cannot write --trace_file '%s': %s", path_show(T.path), why);
    }
    *mb = total / 1e6;
    free(all);
    return e;
}

// The metadata that names rank R's process and rows, then the outputs.
// NULL, or the first failing rank's line on every rank
static const char *write_outputs(void) {
    T.limit += 64 << 10;  // room for the metadata past the events' budget
    emit("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}}", comm_info.rank,
         comm_info.rank);
    emit("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}", comm_info.rank,
         comm_info.rank);
    for (int t = 0; t < TRACE_NTHREADS; t++)
        emit("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", comm_info.rank,
             TID_BASE + t, row_names[t]);
    for (int l = 0; l < (T.lanes_used ? T.lanes_used : 1); l++) {
        char name[32] = "collectives";
        if (l) snprintf(name, sizeof name, "collectives %d", l + 1);
        emit("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", comm_info.rank,
             TID_COMM + l, name);
    }
    if (T.tp_used)
        emit("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"tensor-parallel collectives\"}}",
             comm_info.rank, TID_TP);
    if (T.dropped)
        emit("{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"labels\":\"%llu events dropped "
             "(trace budget)\"}}", comm_info.rank, (unsigned long long)T.dropped);
    const char *e = NULL;
    double mb = 0;
    if (has(T.dir)) e = write_rank_file(&mb);
    if (!e && has(T.dir) && comm_info.rank == 0)
        log_msg("trace of steps %d-%d written to %s: a file per rank (rank 0's %.1f MB)\n", T.first, T.step - 1, T.dir, mb);
    if (has(T.path)) {  // collective: every rank takes part even after its own file failed
        const char *fe = write_merged_file(&mb);
        if (!e) e = fe;
        if (!fe && comm_info.rank == 0) log_msg("trace of steps %d-%d written to %s (%.1f MB)\n", T.first, T.step - 1, T.path, mb);
    }
    free(T.buf);
    T.buf = NULL;
    T.len = T.cap = 0;
    return comm_first_error(e);
}

// The step just recorded as one span around its rows' spans, named as torch.profiler names a
// step ("ProfilerStep#N", N the step as logged): TensorBoard's plugin divides its views by them.
static void step_span_end(void) {
    emit("{\"name\":\"ProfilerStep#%d\",\"cat\":\"user_annotation\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
         "\"dur\":%.3f,\"args\":{\"step\":%d}}", T.step, comm_info.rank, TID_BASE + TRACE_COMPUTE, rel_us(T.step_start),
         (double)(clock_now_us() - T.step_start), T.step);
}

const char *trace_step(int step) {
    if ((!has(T.path) && !has(T.dir)) || T.done) return NULL;
    if (trace_on) step_span_end();
    T.step = step;
    if (step >= T.first && step <= T.last) trace_on = 1;  // a resumed run may start inside the window
    if (trace_on && step > T.last) {
        trace_on = 0;
        T.done = 1;
        return write_outputs();
    }
    T.step_start = clock_now_us();
    trace_counter("memory", rss_mib());
    return NULL;
}

const char *trace_close(void) {
    if ((has(T.path) || has(T.dir)) && !T.done && !trace_on) {  // asked for, never written: say so rather than leave no file unexplained
        char what[2100] = "";
        if (has(T.path)) snprintf(what, sizeof what, "--trace_file %s", T.path);
        if (has(T.dir)) snprintf(what + strlen(what), sizeof what - strlen(what), "%s--trace_dir %s", has(T.path) ? " and " : "", T.dir);
        log_msg("warning: %s not written: the run never reached --trace_steps %d:%d (%s)\n", what, T.first, T.last,
                T.step ? "it ended before them, or resumed after them" : "it ran no training step");
        return NULL;
    }
    if (!trace_on) return NULL;
    step_span_end();
    trace_on = 0;
    T.done = 1;
    T.step++;  // the window ended after the step that ran last
    return write_outputs();
}

void trace_begin_at(TraceThread t, const char *name, int unit) {
    if (T.depth[t] >= DEPTH) return;
    Open *o = &T.open[t][T.depth[t]++];
    snprintf(o->name, sizeof o->name, "%s", name);
    o->unit = unit;
    o->start = clock_now_us();
}

void trace_end_at(TraceThread t) {
    if (!T.depth[t]) return;
    const Open *o = &T.open[t][--T.depth[t]];
    int64_t now = clock_now_us();
    char unit[32] = "";
    if (o->unit >= 0) snprintf(unit, sizeof unit, "\"unit\":%d,", o->unit);
    // "cpu_op": Kineto's category of host-side spans, which the plugin's Overview and Operator views count
    emit("{\"name\":\"%s\",\"cat\":\"cpu_op\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{%s\"step\":%d}}",
         o->name, comm_info.rank, TID_BASE + t, rel_us(o->start), (double)(now - o->start), unit, T.step);
}

void trace_counter_at(const char *name, double value) {
    if (!isfinite(value)) return;  // JSON has no NaN: a non-finite step's loss would spoil the whole file
    emit("{\"name\":\"%s\",\"ph\":\"C\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"args\":{\"%s\":%.6g}}", name, comm_info.rank,
         rel_us(clock_now_us()), name, value);
}

void trace_collective(const char *op, const char *group, uint64_t seq, size_t bytes, const char *dtype, int64_t start_us,
                      int64_t end_us) {
    // X events on one row must nest: a collective that overlaps an earlier one goes a row down;
    // the tp group's (comm_make_mesh) wait inside the compute, one at a time, on their own row
    int tp = !strcmp(group, "tp"), lane = 0;
    while (!tp && lane < COMM_LANES - 1 && T.lane_end[lane] > start_us) lane++;
    if (!tp && T.lane_end[lane] < end_us) T.lane_end[lane] = end_us;
    if (!tp && lane + 1 > T.lanes_used) T.lanes_used = lane + 1;
    T.tp_used |= tp;
    emit("{\"name\":\"%s\",\"cat\":\"collective\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
         "\"args\":{\"bytes\":%zu,\"group\":\"%s\",\"dtype\":\"%s\",\"seq\":%llu,\"step\":%d}}",
         op, comm_info.rank, tp ? TID_TP : TID_COMM + lane, rel_us(start_us), (double)(end_us - start_us), bytes, group, dtype,
         (unsigned long long)seq, T.step);
}
