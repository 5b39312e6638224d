// err: the project's error convention, and the exits and checked allocation every layer uses.
// base/ is the ground floor: its modules include nothing of the project outside base/.
//
// The convention:
// - Something wrong with the input (flags, files, the environment) is ONE line of text that names
//   the thing and, where there is one, the fix. Code below run/ returns it and never exits:
//   * a function that produces something (an object, a count) takes `char *err, size_t errlen`
//     last and fails by returning NULL, -1 or false with the line in err; `return err_set(err,
//     errlen, ...)` writes the line and returns -1 (err_null: NULL);
//   * a check ("what is wrong with this path?") returns `const char *`: NULL when fine, else the
//     line, in storage that stays valid until the next call (`return err_text(buf, sizeof buf, ...)`).
// - run/ and main decide to end the job, through comm/: comm_fail_all when every rank saw the error,
//   comm_check_all when some did. An input error's line is the last line the job prints, and its
//   exit status is 1.
// - err_fatal is for what no caller can recover from: an internal fault (a broken invariant, a
//   CUDA or NCCL error), memory that ran out, a write the disk refused. This rank's flight recorder
//   comes first (which collectives it finished, which it was in), then the error line naming the
//   rank and source line, and the whole job ends.
// - xxxCheck helpers (mallocCheck, callocCheck here; mpiCheck, cudaCheck, ncclCheck, h5Check where
//   their libraries are called) wrap calls that fail only for such reasons, with err_fatal's exit.
//
// The rank-safe exits below run/, the only job-ending calls there (test/meta/check_exits.py reads these
// lines and fails on any other exit, abort, MPI_Abort or comm_fail_*/comm_check_* below run/):
// exit-ok base/err.c exit: err_fatal_at itself, after the hooks that end every rank
// exit-ok base/limits.c _exit,limits_fail_early: before MPI starts, a limit its start-up would
//   crash on: there is nothing to end yet
// exit-ok kernels/cpu/setup.c limits_fail_early: the same, before main, for OpenBLAS's buffers
// exit-ok comm/comm.c exit,_exit,MPI_Abort,comm_fail_all,comm_fail_local,comm_check_all: comm/
//   implements the job's ends: the exits above, a stop signal's status 75, an expired deadline
// exit-ok ckpt/ckpt.c comm_abort_all: a parallel HDF5 write that failed part-way, which the
//   library cannot close cleanly (the temporary file is removed and the lock released first)
// exit-ok comm/comm.c limits_fail_early: comm_init's checks of the launch, before anything runs
//   (srun without PMIx, torchrun's variables, PBS)
#ifndef FSDPC_BASE_ERR_H
#define FSDPC_BASE_ERR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

// The one way an error line is built: written into a buffer (len bytes) by one of these three,
// which differ only in what they return for the caller to pass on. err_set: -1, so producers can
// `return err_set(...)`; err_null: NULL, for producers of pointers; err_text: the buffer, for
// checks that return their line.
// (Inline, so that a program without err.c's exits, such as the fuzz builds, builds lines alike.)
static inline int err_set(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void *err_null(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline const char *err_text(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline const char *err_text(char *buf, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return buf;
}
static inline int err_set(char *err, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}
static inline void *err_null(char *err, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return NULL;
}

// "fsdpc: error: <msg> (rank R, file:line)" after the hooks' `before`, then `end`, then exit(1).
void err_fatal_at(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
#define err_fatal(...) err_fatal_at(__FILE__, __LINE__, __VA_ARGS__)
// What a fatal error does beyond its line, set by comm_init: `before` prints this rank's flight
// recorder, `end` aborts the communicators and every rank (MPI_Abort). NULL: nothing.
void err_on_fatal(void (*before)(void), void (*end)(void));

// Checked allocation: out of memory is fatal, with the size and the process's limits.
void *err_malloc_at(const char *file, int line, size_t bytes);
void *err_calloc_at(const char *file, int line, size_t n, size_t size);
#define mallocCheck(n) err_malloc_at(__FILE__, __LINE__, (n))
#define callocCheck(n, s) err_calloc_at(__FILE__, __LINE__, (n), (s))

#endif
