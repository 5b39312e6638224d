// shards: rows encoded into token files; see shards.h.
#include "shards.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../base/err.h"
#include "../../base/wlock.h"
#include "../../comm/comm.h"
#include "../format/shardfile.h"
#include "../rows/sft.h"

// ---- encode ----

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

// ---- build ----

// row `row` (from 1, as the error line counts) of path into out
static int shards_encode(const ShardsSink *s, Buf *out, const Row *r, const char *path, uint64_t row, int32_t **ids, size_t *cap,
                         char *err, size_t errlen) {
    out->len = 0;
    if (r->sft) {
        for (size_t i = 0; i < r->sft->len; i++) shards_put(out, s->width, (uint64_t)(uint32_t)r->sft->ids[i]);
        return 0;
    }
    const Doc *d = r->doc;
    if (!d->is_ids) return shards_put_text(out, s->width, s->tok, d->text, d->len, ids, cap), 0;
    char idt[96];
    for (size_t i = 0; i < d->len; i++) {
        if (d->ids[i] < 0 || d->ids[i] >= s->id_limit)
            return err_set(err, errlen, "'%s' row %llu holds token id %s, outside %s", path, (unsigned long long)row,
                           sft_id_text(d->ids[i], idt, sizeof idt), s->id_range);
        shards_put(out, s->width, (uint64_t)d->ids[i]);
    }
    return 0;
}

int shards_build(RowsReader *r, const char *path, ShardsSink *sink, uint64_t *rows, char *err, size_t errlen) {
    Buf tokens = {0};
    int32_t *ids = NULL;
    size_t cap = 0;
    Row row;
    int got, rc = 0;
    *rows = 0;
    while (!rc && (got = rows_next(r, &row, err, errlen)) != 0) {
        if (got < 0) rc = -1;
        if (!rc) rc = shards_encode(sink, &tokens, &row, path, *rows + 1, &ids, &cap, err, errlen);
        if (!rc) rc = sink->row(sink, &tokens, row.sft, (*rows)++, err, errlen);
        if (!rc && !(*rows % SHARDS_POLL_ROWS)) {
            if (sink->progress) sink->progress(sink, rows_progress(r));
            if (sink->stop && *sink->stop) rc = (err_set(err, errlen, "stopped by a signal"), SHARDS_STOPPED);
        }
    }
    buf_free(&tokens);
    free(ids);
    return rc;
}

// ---- files ----

static int shards_header(FILE *f, int width, uint64_t count) {
    uint8_t header[TOKFILE_HEADER_BYTES];
    data_shard_header(header, width, count);
    return fseek(f, 0, SEEK_SET) == 0 && fwrite(header, 1, sizeof header, f) == sizeof header ? 0 : -1;
}

int shards_file_open(ShardFile *s, const char *path, const char *id, int width, size_t io_bytes, char *err, size_t errlen) {
    size_t n = strlen(path) + 1;
    *s = (ShardFile){.path = mallocCheck(n), .tmp = wlock_tmp_name(path, id), .width = width};
    memcpy(s->path, path, n);
    s->f = fopen(s->tmp, "wbx");  // never through a link left under the name
    struct stat st;
    if (s->f && fstat(fileno(s->f), &st) == 0) s->dev = (unsigned long long)st.st_dev, s->ino = (unsigned long long)st.st_ino;
    if (!s->f) return shards_file_close(s, err_set(err, errlen, "cannot create '%s': %s", s->tmp, comm_path_error(s->tmp, errno)), err, errlen);
    // spans of a document go out in big writes
    if (io_bytes) setvbuf(s->f, NULL, _IOFBF, io_bytes);
    if (shards_header(s->f, width, 0))
        return shards_file_close(s, err_set(err, errlen, "cannot write '%s': %s", s->tmp, comm_path_error(s->tmp, errno)), err, errlen);
    return 0;
}

int shards_file_write(ShardFile *s, const void *items, uint64_t n, char *err, size_t errlen) {
    if (n && fwrite(items, (size_t)s->width, n, s->f) != n)
        return err_set(err, errlen, "cannot write '%s': %s", s->tmp, comm_path_error(s->tmp, errno));
    s->count += n;
    return 0;
}

int shards_file_close(ShardFile *s, int rc, char *err, size_t errlen) {
    if (s->f) {
        if (!rc && (shards_header(s->f, s->width, s->count) || fflush(s->f) != 0 || fsync(fileno(s->f)) != 0))
            rc = err_set(err, errlen, "cannot write '%s': %s", s->tmp, comm_path_error(s->tmp, errno));
        if (fclose(s->f) != 0 && !rc) rc = err_set(err, errlen, "cannot write '%s': %s", s->tmp, comm_path_error(s->tmp, errno));
        if (!rc && rename(s->tmp, s->path) != 0) rc = err_set(err, errlen, "cannot rename '%s' to '%s': %s", s->tmp, s->path, strerror(errno));
        const char *other = rc ? NULL : wlock_check_renamed(s->path, s->dev, s->ino);
        if (other) rc = err_set(err, errlen, "%s", other);
        if (rc) unlink(s->tmp);  // never to become a shard
    }
    free(s->path);
    free(s->tmp);
    *s = (ShardFile){0};
    return rc;
}
