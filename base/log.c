// log: rank-0 log lines and the error printer (see log.h).
#define _GNU_SOURCE  // vasprintf
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "err.h"

static int rank, timestamps;

void log_set_rank(int r) { rank = r; }
int log_rank(void) { return rank; }
void log_timestamps(int on) { timestamps = on; }

// The thread ending the job (log_end_claim): once it has printed its error, the other threads
// print nothing, so the error stays the last line (before it, a checkpoint write it waits for
// still says it was saved)
static atomic_int ending, said;
static _Thread_local int ending_mine;

int log_end_claim(void) {
    if (ending_mine) return 1;
    if (atomic_exchange(&ending, 1)) return 0;
    return ending_mine = 1;
}

static int log_silenced(void) { return atomic_load(&said) && !ending_mine; }

// The error is one line whatever it quotes: a control character in a path, a flag's value or a
// file's text (a newline, a terminal escape) is written as its C escape.
void log_error(const char *msg) {
    if (log_silenced()) return;
    if (ending_mine) atomic_store(&said, 1);
    // built whole, then one write: stderr is unbuffered, and a launcher interleaves writes
    char *line = mallocCheck(strlen(msg) * 4 + 32);
    size_t n = (size_t)sprintf(line, "fsdpc: error: ");
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        if (*p >= 0x20 && *p != 0x7f) line[n++] = (char)*p;
        else if (*p == '\n') n += (size_t)sprintf(line + n, "\\n");
        else if (*p == '\t') n += (size_t)sprintf(line + n, "\\t");
        else if (*p == '\r') n += (size_t)sprintf(line + n, "\\r");
        else n += (size_t)sprintf(line + n, "\\x%02x", *p);
    }
    line[n++] = '\n';
    fwrite(line, 1, n, stderr);
    fflush(stderr);
    free(line);
}

void log_msg(const char *fmt, ...) {
    if (rank != 0 || log_silenced()) return;
    va_list ap;
    va_start(ap, fmt);
    if (!timestamps) {
        vfprintf(stderr, fmt, ap);
    } else {  // "2024-06-12 00:08:25 I [rank 0] ..." on every line, as the recipes' loggers print
        char *msg = NULL;
        if (vasprintf(&msg, fmt, ap) < 0) err_fatal("out of memory formatting a log line");
        char stamp[32];
        time_t now = time(NULL);
        strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime(&now));
        char level = strncmp(msg, "warning:", 8) ? 'I' : 'W';
        for (char *line = msg; *line;) {
            char *end = strchr(line, '\n');
            int len = end ? (int)(end - line) : (int)strlen(line);
            fprintf(stderr, "%s %c [rank %d] %.*s\n", stamp, level, rank, len, line);
            line += len + (end != NULL);
        }
        free(msg);
    }
    va_end(ap);
    if (fflush(stderr) != 0 || ferror(stderr)) err_fatal("cannot write standard error: %s", strerror(errno ? errno : EIO));
}
