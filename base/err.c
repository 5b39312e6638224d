// err: the error convention's exits and checked allocation (see err.h).
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limits.h"
#include "log.h"

static void (*fatal_before)(void), (*fatal_end)(void);

void err_on_fatal(void (*before)(void), void (*end)(void)) {
    fatal_before = before;
    fatal_end = end;
}

void err_fatal_at(const char *file, int line, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof msg) snprintf(msg + n, sizeof msg - (size_t)n, " (rank %d, %s:%d)", log_rank(), file, line);
    if (fatal_before) fatal_before();
    log_error(msg);  // the last line this rank prints
    if (fatal_end) fatal_end();
    exit(1);
}

// what to try after an allocation failed: under ulimit -v / -d, the limit comes first
static const char *oom_fix(void) {
    static char fix[320];
    const char *lim = limits_summary();
    if (lim[0]) snprintf(fix, sizeof fix, " under %s: raise the limit, or try a smaller model/batch or more ranks", lim);
    else snprintf(fix, sizeof fix, " (try a smaller model/batch or more ranks)");
    return fix;
}

void *err_malloc_at(const char *file, int line, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) err_fatal_at(file, line, "out of memory allocating %zu bytes%s", bytes, oom_fix());
    return p;
}

void *err_calloc_at(const char *file, int line, size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) err_fatal_at(file, line, "out of memory allocating %zu x %zu bytes%s", n, size, oom_fix());
    return p;
}
