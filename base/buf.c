#include "buf.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"

void *buf_grow(void *p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return p;
    size_t want = *cap ? *cap : 16;
    // doubling stops short of overflowing want * size; need itself is then the size asked for
    while (want < need) want = want > SIZE_MAX / 2 / size ? need : want * 2;
    if (want > SIZE_MAX / size) err_fatal("out of memory growing a buffer to %zu x %zu bytes", want, size);
    void *q = realloc(p, want * size);
    if (!q) err_fatal("out of memory growing a buffer to %zu x %zu bytes", want, size);
    *cap = want;
    return q;
}

void buf_reserve(Buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len) err_fatal("out of memory growing a buffer past %zu bytes", b->len);
    b->data = buf_grow(b->data, &b->cap, b->len + extra, 1);
}

void buf_append(Buf *b, const void *src, size_t n) {
    if (!n) return;
    buf_reserve(b, n);
    memcpy(b->data + b->len, src, n);
    b->len += n;
}

void buf_free(Buf *b) {
    free(b->data);
    *b = (Buf){0};
}
