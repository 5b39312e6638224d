// shards: what a document becomes in a token shard, once for both builders of shards (the data
// cache, data/build/cache.c, and `fsdpc prepare`, data/build/prepare.c): tokens little-endian at
// the shard's width (2 or 4 bytes), appended to a byte buffer.
#ifndef FSDPC_SHARDS_H
#define FSDPC_SHARDS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../../base/buf.h"
#include "../text/tokenizer.h"

// one token
void shards_put(Buf *out, int width, uint64_t token);
// bytes as the byte tokenizer's tokens (one each)
void shards_put_bytes(Buf *out, int width, const uint8_t *bytes, size_t n);
// A document's text: its bytes and '\n' with the byte tokenizer, else <s>, its tokens and </s>
// (where the tokenizer has them). *ids (*cap its capacity) is the tokenizer's scratch.
void shards_put_text(Buf *out, int width, const Tokenizer *tok, const char *text, size_t n, int32_t **ids, size_t *cap);

// The token shard header (count items of width bytes; data/format/shardfile.h) at the start of f:
// a placeholder (count 0) when the file is created, the count once it is complete. The data
// cache's side files (document index, labels) carry the same header. 0, or -1 with errno.
int shards_header(FILE *f, int width, uint64_t count);

#endif
