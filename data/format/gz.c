// gz: see gz.h.
#include "gz.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../../base/err.h"

struct GzReader {
    int fd;
    z_stream z;
    unsigned char *in;
    size_t cap;
    uint64_t raw;     // bytes read from the file
    int eof;          // the file has no more
    int between;      // a member ended (or none began): the next bytes must start one, or be the end
    int members;      // members begun
    char why[160];
};

GzReader *gz_open(int fd, size_t bufsize) {
    GzReader *g = callocCheck(1, sizeof *g);
    g->fd = fd, g->cap = bufsize, g->between = 1;
    g->in = mallocCheck(bufsize);
    if (inflateInit2(&g->z, 15 + 16) != Z_OK) err_fatal("cannot initialise zlib");  // gzip wrapper only
    g->z.next_in = g->in;
    return g;
}

// more compressed bytes after the avail_in left (kept at the buffer's start); -1 on a read error
static int refill(GzReader *g) {
    memmove(g->in, g->z.next_in, g->z.avail_in);
    ssize_t got;
    do got = read(g->fd, g->in + g->z.avail_in, g->cap - g->z.avail_in);
    while (got < 0 && errno == EINTR);
    if (got < 0) return -1;
    g->z.next_in = g->in;
    g->z.avail_in += (uInt)got;
    g->raw += (uint64_t)got;
    if (!got) g->eof = 1;
    return 0;
}

static long fail(GzReader *g, GzError k, GzError *kind, const char **why) { return *kind = k, *why = g->why, -1; }

long gz_read(GzReader *g, void *buf, size_t n, GzError *kind, const char **why) {
    *kind = GZ_OK, *why = "";
    g->z.next_out = buf;
    g->z.avail_out = (uInt)(n < (1u << 30) ? n : 1u << 30);
    const uInt want = g->z.avail_out;
    while (g->z.avail_out == want) {
        if (g->z.avail_in < 2 && !g->eof && refill(g) < 0) {
            snprintf(g->why, sizeof g->why, "%s", strerror(errno));
            return fail(g, GZ_IO, kind, why);
        }
        if (g->between) {
            if (!g->z.avail_in) return 0;  // the end, after whole members
            if (g->z.avail_in < 2 || g->z.next_in[0] != 0x1f || g->z.next_in[1] != 0x8b) {
                snprintf(g->why, sizeof g->why, "the bytes from byte %llu on follow its last gzip member and are not one (garbage, "
                         "or another file appended)", (unsigned long long)gz_offset(g));
                if (!g->members) return fail(g, GZ_CORRUPT, kind, why);
                return fail(g, GZ_TRAILING, kind, why);
            }
            if (g->members++ && inflateReset(&g->z) != Z_OK) err_fatal("cannot reset zlib");
            g->between = 0;
        }
        if (!g->z.avail_in && g->eof) {
            snprintf(g->why, sizeof g->why, "it ends in the middle of a gzip member");
            return fail(g, GZ_TRUNCATED, kind, why);
        }
        int rc = inflate(&g->z, Z_NO_FLUSH);
        if (rc == Z_STREAM_END) g->between = 1;
        else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            snprintf(g->why, sizeof g->why, "%s", g->z.msg ? g->z.msg : "invalid compressed data");
            return fail(g, GZ_CORRUPT, kind, why);
        }
    }
    return (long)(want - g->z.avail_out);
}

uint64_t gz_offset(const GzReader *g) { return g->raw - g->z.avail_in; }

void gz_close(GzReader *g) {
    if (!g) return;
    inflateEnd(&g->z);
    close(g->fd);
    free(g->in);
    free(g);
}
