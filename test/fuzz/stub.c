// Fuzz builds link the parsers with this stand-in for comm/: an error that would end the job
// longjmps back to the harness instead, so one run can try many inputs.
#include "stub.h"
#include "../../base/err.h"
#include "../../data/format/h5data.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

CommInfo comm_info = {0, 1, 0, 1};
jmp_buf fuzz_env;
int fuzz_armed;

static void __attribute__((noreturn)) fuzz_bail(void) {
    if (!fuzz_armed) abort();  // an error path outside the harness's setjmp is a bug of the harness
    longjmp(fuzz_env, 1);
}

void comm_fail_all(const char *fmt, ...) {
    (void)fmt;
    fuzz_bail();
    __builtin_unreachable();
}
void err_fatal_at(const char *file, int line, const char *fmt, ...) {
    (void)file, (void)line, (void)fmt;
    fuzz_bail();
    __builtin_unreachable();
}
void comm_fail_local(const char *fmt, ...) {
    (void)fmt;
    fuzz_bail();
    __builtin_unreachable();
}
void comm_check_all(const char *e) {
    if (e) fuzz_bail();
}
void comm_check_same(uint64_t v, const char *what) { (void)v, (void)what; }
int comm_agree(const char *e, char *err, size_t errlen) { return e ? err_set(err, errlen, "%s", e) : 0; }
void log_msg(const char *fmt, ...) { (void)fmt; }
void *err_malloc_at(const char *f, int l, size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) err_fatal_at(f, l, "oom");
    return p;
}
void *err_calloc_at(const char *f, int l, size_t n, size_t s) {
    void *p = calloc(n ? n : 1, s ? s : 1);
    if (!p) err_fatal_at(f, l, "oom");
    return p;
}
FILE *comm_fopen_at(const char *f, int l, const char *path, const char *mode) {
    FILE *fp = fopen(path, mode);
    if (!fp) err_fatal_at(f, l, "fopen");
    return fp;
}
double comm_time(void) { return 0.0; }
// one rank: the group is the world and reductions leave their input as it is
CommGroup *comm_world(void) { return NULL; }
void comm_allreduce_sum_f64(CommGroup *g, double *buf, size_t n) { (void)g, (void)buf, (void)n; }
void comm_allreduce_max_f64(CommGroup *g, double *buf, size_t n) { (void)g, (void)buf, (void)n; }
// one rank: its text is rank 0's
int comm_first_different(const char *mine, char **theirs, char **root) {
    (void)mine;
    *theirs = *root = NULL;
    return -1;
}

// no signals reach a fuzz run: nothing ever stops
volatile sig_atomic_t comm_stop_signal;
int comm_stop_unlink(const char *path, int on) { return 0; }
void comm_stop_polled(int on) { (void)on; }
int comm_stop_any(void) { return 0; }
const char *comm_signal_name(int sig) { return (void)sig, "a signal"; }
void comm_bcast_bytes(CommGroup *g, void *buf, size_t n, int root) { (void)g, (void)buf, (void)n, (void)root; }
void comm_gather_bytes(CommGroup *g, const void *buf, size_t n, char **all, size_t *total) {
    (void)g;
    *all = malloc(n ? n : 1);
    if (!*all) abort();
    memcpy(*all, buf, n);
    *total = n;
}
const char *comm_path_error(const char *path, int err) {
    (void)path;
    return strerror(err);
}
// the header fuzz target parses HDF5 signatures but links no HDF5: such a file is refused here
const char *data_h5_layout(TokenFile *f, uint64_t size, uint64_t *rows) {
    (void)size, (void)rows;
    static char msg[600];
    snprintf(msg, sizeof msg, "data file '%s' is HDF5 (not read in the fuzz build)", f->path);
    return msg;
}
