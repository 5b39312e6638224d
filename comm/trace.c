// trace: events kept as JSON text per rank, gathered to rank 0 at the end of the window.
#include "trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"
#include "io.h"

int trace_on;

enum {
    TID_BASE = 1,        // rows TRACE_COMPUTE.. are tids 1..
    TID_COMM = 10,       // collective rows: overlapping collectives (CPU runs) go on further rows
    COMM_LANES = 6,
    TID_TP = 20,         // the tensor-parallel group's collectives, on the compute's critical path
    DEPTH = 8,           // nested spans per row
    BYTES_PER_STEP = 4 << 20,  // the whole file's budget per traced step, shared by the ranks
};

static const char *const row_names[TRACE_NTHREADS] = {"compute", "data loading", "copy/offload stream"};

typedef struct {
    char name[48];
    int unit;
    int64_t start;
} Open;

static struct {
    char path[1024];
    int first, last, step, done;
    int64_t zero_us;  // every rank's time zero, taken right after a barrier
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
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(msg, sizeof msg, "cannot read --trace_file '%s': %s", path, strerror(errno)), msg;
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    if (n == sizeof head && !memcmp(head, trace_head, sizeof head)) return NULL;
    snprintf(msg, sizeof msg, "--trace_file '%s' exists and is not a trace fsdpc wrote: it replaces only an earlier trace; give "
             "another path, or remove the file", path);
    return msg;
}

// the tmp file rank 0 writes before renaming it over `path`
static void tmp_path(char *out, size_t len) { snprintf(out, len, "%s.tmp.%ld", T.path, (long)getpid()); }

void trace_open(const char *path, int first_step, int last_step) {
    static char err[1200];
    const char *e = NULL;
    snprintf(T.path, sizeof T.path, "%s", path);
    T.first = first_step;
    T.last = last_step;
    if (comm_info.rank == 0) e = comm_output_path_problem(path, "--trace_file", 1);
    if (comm_info.rank == 0 && !e) e = io_output(path, "--trace_file");  // not an input, nor another output
    if (comm_info.rank == 0 && !e) e = replace_problem(path);
    if (comm_info.rank == 0 && !e) {  // refused now, not after the window has run
        char tmp[1100];
        tmp_path(tmp, sizeof tmp);
        FILE *f = fopen(tmp, "w");
        if (!f) e = (snprintf(err, sizeof err, "cannot write --trace_file '%s' (%s): %s", path, tmp, comm_path_error(tmp, errno)), err);
        else fclose(f), unlink(tmp);
    }
    comm_check_all(e);
    T.limit = (size_t)(last_step - first_step + 1) * BYTES_PER_STEP / (size_t)comm_info.world;
    if (T.limit < (64 << 10)) T.limit = 64 << 10;
    comm_barrier(comm_world());
    T.zero_us = clock_now_us();
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

// The metadata that names rank R's process and rows, then its events: one JSON array body.
static void write_file(void) {
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
    char *all = NULL;
    size_t total = 0;
    comm_gather_bytes(comm_world(), T.buf, T.len, &all, &total);
    const char *e = NULL;
    static char err[1400];
    // checked again: the path may have become something else since start-up, and the rename must not land on it
    if (comm_info.rank == 0) e = comm_output_path_problem(T.path, "--trace_file", 1);
    if (comm_info.rank == 0 && !e) e = io_output_check(T.path, "--trace_file");
    if (comm_info.rank == 0 && !e) e = replace_problem(T.path);
    if (comm_info.rank == 0 && !e) {
        char tmp[1100];
        tmp_path(tmp, sizeof tmp);
        FILE *f = fopen(tmp, "w");
        while (total >= 2 && (all[total - 1] == '\n' || all[total - 1] == ','))
            total--;  // the last event's separator
        int ok = f && fputs(trace_head, f) >= 0 && fwrite(all, 1, total, f) == total &&
                 fprintf(f, "\n],\"otherData\":{\"producer\":\"fsdpc\",\"steps\":\"%d:%d\"}}\n", T.first, T.step - 1) > 0;
        if (f && fclose(f) != 0) ok = 0;
        if (!ok || rename(tmp, T.path) != 0) {
            snprintf(err, sizeof err, "cannot write --trace_file '%s': %s", T.path, strerror(errno));
            unlink(tmp);
            e = err;
        } else {
            log_msg("trace of steps %d-%d written to %s (%.1f MB)\n", T.first, T.step - 1, T.path, total / 1e6);
        }
    }
    free(all);
    free(T.buf);
    T.buf = NULL;
    T.len = T.cap = 0;
    comm_check_all(e);
}

void trace_step(int step) {
    if (!T.path[0] || T.done) return;
    T.step = step;
    if (step >= T.first && step <= T.last) trace_on = 1;  // a resumed run may start inside the window
    if (trace_on && step > T.last) {
        trace_on = 0;
        T.done = 1;
        write_file();
        return;
    }
    trace_counter("memory", rss_mib());
}

void trace_close(void) {
    if (T.path[0] && !T.done && !trace_on) {  // asked for, never written: say so rather than leave no file unexplained
        log_msg("warning: --trace_file %s not written: the run never reached --trace_steps %d:%d (%s)\n", T.path, T.first,
                T.last, T.step ? "it ended before them, or resumed after them" : "it ran no training step");
        return;
    }
    if (!trace_on) return;
    trace_on = 0;
    T.done = 1;
    T.step++;  // the window ended after the step that ran last
    write_file();
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
    emit("{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{%s\"step\":%d}}",
         o->name, row_names[t], comm_info.rank, TID_BASE + t, rel_us(o->start), (double)(now - o->start), unit, T.step);
}

void trace_counter_at(const char *name, double value) {
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
