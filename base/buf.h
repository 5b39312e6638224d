// buf: the one growable buffer: an array grown by doubling, and a byte buffer built on it.
// base/ is the ground floor: nothing of the project outside base/ is included.
#ifndef FSDPC_BASE_BUF_H
#define FSDPC_BASE_BUF_H

#include <stddef.h>
#include <stdint.h>

// p (*cap items of size bytes each) grown by doubling to hold need items, old contents kept;
// returns the (maybe moved) array. Memory running out ends the job (err_fatal).
void *buf_grow(void *p, size_t *cap, size_t need, size_t size);
// the same for an array lvalue p of its own element type: buf_fit(ids, &cap, n) leaves ids able to hold n
#define buf_fit(p, cap, need) ((p) = buf_grow((p), (cap), (need), sizeof *(p)))

// growable bytes; zero-initialised is empty
typedef struct {
    uint8_t *data;
    size_t len, cap;
} Buf;

// room for extra more bytes after len
void buf_reserve(Buf *b, size_t extra);
void buf_append(Buf *b, const void *src, size_t n);
void buf_free(Buf *b);  // back to empty

#endif
