#include "shards.h"

#include <string.h>

#include "../format/shardfile.h"

void shards_put(Buf *out, int width, uint64_t token) {
    buf_reserve(out, (size_t)width);
    for (int k = 0; k < width; k++) out->data[out->len++] = (uint8_t)(token >> (8 * k));
}

// only the low (first, little-endian) byte of each token is non-zero
void shards_put_bytes(Buf *out, int width, const uint8_t *bytes, size_t n) {
    if (!n) return;  // out->data may still be NULL
    buf_reserve(out, n * (size_t)width);
    uint8_t *dst = out->data + out->len;
    memset(dst, 0, n * (size_t)width);
    for (size_t i = 0; i < n; i++) dst[i * (size_t)width] = bytes[i];
    out->len += n * (size_t)width;
}

void shards_put_text(Buf *out, int width, const Tokenizer *tok, const char *text, size_t n, int32_t **ids, size_t *cap) {
    if (tok_is_byte(tok)) {
        shards_put_bytes(out, width, (const uint8_t *)text, n);
        shards_put(out, width, '\n');
        return;
    }
    size_t nids = 0;
    tok_encode(tok, text, n, ids, &nids, cap);
    buf_reserve(out, (nids + 2) * (size_t)width);
    if (tok_bos(tok) >= 0) shards_put(out, width, (uint64_t)tok_bos(tok));
    for (size_t i = 0; i < nids; i++) shards_put(out, width, (uint64_t)(*ids)[i]);
    if (tok_eos(tok) >= 0) shards_put(out, width, (uint64_t)tok_eos(tok));
}

int shards_header(FILE *f, int width, uint64_t count) {
    uint8_t header[TOKFILE_HEADER_BYTES];
    data_shard_header(header, width, count);
    return fseek(f, 0, SEEK_SET) == 0 && fwrite(header, 1, sizeof header, f) == sizeof header ? 0 : -1;
}
