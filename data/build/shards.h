// shards: the one pipeline from rows to token shards, shared by both builders of shards (the data
// cache, data/build/cache.c, and `fsdpc prepare`, data/build/prepare.c):
//   encode:  a row's tokens little-endian at the shard's width (2 or 4 bytes) in a byte buffer:
//            a document's text through the tokenizer, its ids checked, a finetuning row's ids;
//   build:   every row of a reader (data/rows) encoded and handed to the builder's sink, with
//            progress and the stop check every SHARDS_POLL_ROWS rows;
//   files:   a token file (shard, document index, labels) under a temporary name with a header
//            placeholder, then its count, synced, and renamed: whole under its name or absent.
// What each builder does with a row (the cache: one part per input beside its document index and
// labels; prepare: shards of --shard_tokens split into train and validation) is its sink.
#ifndef FSDPC_SHARDS_H
#define FSDPC_SHARDS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../../base/buf.h"
#include "../rows/rows.h"
#include "../text/tokenizer.h"

// ---- encode ----

// one token
void shards_put(Buf *out, int width, uint64_t token);
// bytes as the byte tokenizer's tokens (one each)
void shards_put_bytes(Buf *out, int width, const uint8_t *bytes, size_t n);
// A document's text: its bytes and '\n' with the byte tokenizer, else <s>, its tokens and </s>
// (where the tokenizer has them). *ids (*cap its capacity) is the tokenizer's scratch.
void shards_put_text(Buf *out, int width, const Tokenizer *tok, const char *text, size_t n, int32_t **ids, size_t *cap);

// ---- build ----

#define SHARDS_POLL_ROWS 256
#define SHARDS_STOPPED 2  // shards_build's status when the stop flag was seen

typedef struct ShardsSink ShardsSink;
struct ShardsSink {
    int width;                 // bytes per token
    const Tokenizer *tok;      // for documents' text
    int64_t id_limit;          // documents' ids must lie in [0, id_limit) ...
    const char *id_range;      // ... which the error line calls this ("the vocabulary [0, 32000)")
    const volatile int *stop;  // non-zero: the build ends with SHARDS_STOPPED (NULL: never)
    // One row (index from 0): tokens holds its tokens at width, sft its labels for a finetuning
    // row (NULL for a document). 0, or -1 with the line in err.
    int (*row)(ShardsSink *s, const Buf *tokens, const SftRow *sft, uint64_t index, char *err, size_t errlen);
    // every SHARDS_POLL_ROWS rows (NULL: none): the reader's bytes consumed so far
    void (*progress)(ShardsSink *s, uint64_t bytes_read);
};

// Every row of r (read from path) through sink->row, counted in *rows. 0; -1 with one line in err
// (the reader's, an id outside the range, or the sink's); SHARDS_STOPPED.
int shards_build(RowsReader *r, const char *path, ShardsSink *sink, uint64_t *rows, char *err, size_t errlen);

// ---- files ----

typedef struct {
    FILE *f;
    char *path, *tmp;  // the final name and the one written under (path.<writer id>.tmp)
    int width;         // bytes per item
    uint64_t count;    // items written
    unsigned long long dev, ino;  // the temporary's identity, checked at its final name after the rename
} ShardFile;

// Creates path.<id>.tmp (wlock_tmp_name: writer id's own) with a header placeholder (count 0;
// data/format/shardfile.h) for items of width bytes, buffered by io_bytes (0: stdio's default). The data cache's side files (document
// index, labels) carry the same header. 0, or -1 with one line in err.
int shards_file_open(ShardFile *s, const char *path, const char *id, int width, size_t io_bytes, char *err, size_t errlen);
// n items of s->width bytes. 0, or -1 with one line in err.
int shards_file_write(ShardFile *s, const void *items, uint64_t n, char *err, size_t errlen);
// rc 0: the header's count, flushed, synced, closed and renamed to its name. rc != 0 (an earlier
// failure): closed and removed. After the rename the file at its name must be the one written
// (wlock_check_renamed). Returns rc, or -1 with one line in err for a failure here.
int shards_file_close(ShardFile *s, int rc, char *err, size_t errlen);
// whether s is open (between shards_file_open and shards_file_close)
static inline int shards_file_is_open(const ShardFile *s) { return s->f != NULL; }

#endif
