// docs: documents out of text, JSON Lines (plain, gzip, zstd), Arrow IPC and Parquet files.
#include "docs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "../../base/err.h"
#include "../format/gz.h"
#include "../format/arrow.h"
#include "../../base/buf.h"
#include "../../base/json.h"
#include "../../base/path.h"
#include "../format/parquet.h"
#include "../format/table.h"

#define DOCS_IO_BYTES (1 << 20)
#define DOCS_MAX_LINE ((size_t)1 << 30)  // one JSON Lines object must fit in memory; beyond this it is no line

struct DocsReader {
    char *path;  // a copy: any length the system takes
    DocsKind kind;
    DocsCompression comp;
    char describe[256];
    uint64_t nulls;
    // byte input (text, JSON Lines)
    int fd;
    GzReader *gz;
    ZSTD_DStream *zs;
    uint8_t *zin;            // compressed input for zstd
    size_t zin_len, zin_pos;
    size_t zlast;            // ZSTD_decompressStream's last hint: non-zero at the end means a cut frame
    int zeof;
    uint64_t consumed;       // file bytes read
    uint8_t *io;             // decompressed input
    size_t io_len, io_pos;
    int at_end, done;
    uint64_t line_no;
    Buf line;
    // JSON Lines
    const char *column;
    int explicit_column;
    JsonValue *obj;
    int64_t *ids;
    size_t ids_cap;
    // Arrow / Parquet
    TableReader *table;
    TableValue value;
    int use_ids;
    int rows;  // docs_open_rows: the caller reads objects or table rows itself
    DocsFields fields;
};

// ---- fields ----

void docs_fields_note(DocsFields *f, const char *name, size_t len, int used) {
    char shown[64];
    size_t n = 0;
    for (size_t i = 0; i < len && n + 5 < sizeof shown; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c >= 0x7f || c == '\\' || c == ',') n += (size_t)snprintf(shown + n, sizeof shown - n, "\\x%02x", c);
        else shown[n++] = (char)c;
    }
    shown[n] = 0;
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->name[i], shown)) {
            f->used[i] |= used != 0;
            return;
        }
    if (f->n == DOCS_FIELDS_MAX) {
        f->more = 1;
        return;
    }
    memcpy(f->name[f->n], shown, n + 1);
    f->used[f->n++] = used != 0;
}

int docs_fields_list(const DocsFields *f, int used, char *out, size_t len) {
    int k = 0;
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < f->n; i++)
        if (!f->used[i] == !used && at < len) at += (size_t)snprintf(out + at, len - at, "%s%s", k++ ? ", " : "", f->name[i]);
    if (!used && f->more && at < len) snprintf(out + at, len - at, "%s", k++ ? " and more" : "more");
    return k;
}

// "+name" (used) or "-name" per field, space-separated, and "*" for more; a space in a name is
// written \x20 (so it comes back escaped: only shown, never matched against a row's fields)
void docs_fields_save(const DocsFields *f, char *out, size_t len) {
    size_t at = 0;
    for (int i = 0; i < f->n && at + 8 < len; i++) {
        if (i) out[at++] = ' ';
        out[at++] = f->used[i] ? '+' : '-';
        for (const char *c = f->name[i]; *c && at + 8 < len; c++) {
            if (*c != ' ') out[at++] = *c;
            else memcpy(out + at, "\\x20", 4), at += 4;
        }
    }
    if (f->more && at + 3 < len) {
        if (at) out[at++] = ' ';
        out[at++] = '*';
    }
    out[at] = 0;
}

void docs_fields_parse(DocsFields *f, const char *line) {
    while (*line) {
        size_t n = strcspn(line, " \n");
        if (n == 1 && *line == '*') {
            f->more = 1;
        } else if (n > 1 && (*line == '+' || *line == '-')) {
            int used = *line == '+', k = -1;
            for (int i = 0; i < f->n && k < 0; i++)
                if (strlen(f->name[i]) == n - 1 && !memcmp(f->name[i], line + 1, n - 1)) k = i;
            if (k >= 0) f->used[k] |= used;
            else if (f->n == DOCS_FIELDS_MAX || n - 1 >= sizeof f->name[0]) f->more = 1;
            else memcpy(f->name[f->n], line + 1, n - 1), f->name[f->n][n - 1] = 0, f->used[f->n++] = used;
        }
        line += n;
        while (*line == ' ' || *line == '\n') line++;
    }
}

int docs_fields_warning(const DocsFields *f, const char *label, const char *hint, char *out, size_t len) {
    // the members and columns some row format reads (docs, data/sft)
    static const char *const formats[] = {"text", "input_ids", "attention_mask", "labels", "prompt", "completion", "instruction",
                                          "input", "output", "messages", "conversations"};
    char ignored[DOCS_FIELDS_MAX * 70 + 16], used[DOCS_FIELDS_MAX * 70 + 16], meant[DOCS_FIELDS_MAX * 70] = "";
    int n = docs_fields_list(f, 0, ignored, sizeof ignored), nu = docs_fields_list(f, 1, used, sizeof used), nm = 0;
    out[0] = 0;
    if (!n) return 0;
    for (int i = 0; i < f->n; i++)
        for (size_t k = 0; !f->used[i] && k < sizeof formats / sizeof *formats; k++)
            if (!strcmp(f->name[i], formats[k]))
                snprintf(meant + strlen(meant), sizeof meant - strlen(meant), "%s%s", nm++ ? ", " : "", f->name[i]);
    snprintf(out, len, "warning: %s: field%s %s %s not used (%s %s read)%s%s%s%s", label, n == 1 ? "" : "s", ignored, n == 1 ? "is" : "are",
             nu ? used : "none", nu == 1 ? "is" : "are", nm ? "; " : "", meant, !nm ? "" : nm == 1 ? " is " : " are ", nm ? hint : "");
    return 1;
}

// ---- decompressed bytes ----

// Reads up to n bytes of the (decompressed) input: the count, 0 at its end, -1 with err set.
static long docs_read(DocsReader *r, uint8_t *buf, size_t n, char *err, size_t errlen) {
    if (r->comp == DOCS_GZIP) {
        GzError kind;
        const char *why;
        long got = gz_read(r->gz, buf, n, &kind, &why);
        r->consumed = gz_offset(r->gz);
        if (kind == GZ_TRUNCATED) return err_set(err, errlen, "'%s' ends in the middle of its gzip stream (truncated?)", r->path);
        if (kind == GZ_TRAILING) return err_set(err, errlen, "'%s': %s: remove them, or recompress the file", r->path, why);
        if (got < 0) return err_set(err, errlen, "cannot read '%s': %s%s%s", r->path, kind == GZ_IO ? "" : "gzip stream is corrupt (",
                                    why, kind == GZ_IO ? "" : ")");
        return got;
    }
    if (r->comp == DOCS_ZSTD) {
        ZSTD_outBuffer out = {buf, n, 0};
        while (out.pos == 0) {
            if (r->zin_pos == r->zin_len) {
                if (r->zeof) {
                    if (r->zlast) return err_set(err, errlen, "'%s' ends in the middle of its zstd frame (truncated?)", r->path);
                    return 0;
                }
                ssize_t got;
                do got = read(r->fd, r->zin, DOCS_IO_BYTES);
                while (got < 0 && errno == EINTR);
                if (got < 0) return err_set(err, errlen, "cannot read '%s': %s", r->path, strerror(errno));
                r->zin_len = (size_t)got;
                r->zin_pos = 0;
                r->consumed += (uint64_t)got;
                if (!got) {
                    r->zeof = 1;
                    continue;
                }
            }
            ZSTD_inBuffer in = {r->zin, r->zin_len, r->zin_pos};
            size_t rc = ZSTD_decompressStream(r->zs, &out, &in);
            r->zin_pos = in.pos;
            if (ZSTD_isError(rc)) return err_set(err, errlen, "cannot read '%s': zstd stream is corrupt (%s)", r->path, ZSTD_getErrorName(rc));
            r->zlast = rc;
        }
        return (long)out.pos;
    }
    ssize_t got;
    do got = read(r->fd, buf, n);
    while (got < 0 && errno == EINTR);
    if (got < 0) return err_set(err, errlen, "cannot read '%s': %s", r->path, strerror(errno));
    r->consumed += (uint64_t)got;
    return (long)got;
}

// The next line without its '\n' into r->line: 1, 0 at the end, -1 on error.
static int docs_line(DocsReader *r, char *err, size_t errlen) {
    r->line.len = 0;
    for (;;) {
        if (r->io_pos == r->io_len) {
            if (r->at_end) return r->line.len > 0;
            long got = docs_read(r, r->io, DOCS_IO_BYTES, err, errlen);
            if (got < 0) return -1;
            r->io_len = (size_t)got;
            r->io_pos = 0;
            if (!got) {
                r->at_end = 1;
                return r->line.len > 0;  // a last line without '\n' still counts
            }
        }
        uint8_t *start = r->io + r->io_pos, *nl = memchr(start, '\n', r->io_len - r->io_pos);
        size_t n = nl ? (size_t)(nl - start) : r->io_len - r->io_pos;
        if (r->line.len + n > DOCS_MAX_LINE)
            return err_set(err, errlen, "'%s' line %llu is longer than %zu bytes: not JSON Lines", r->path,
                            (unsigned long long)r->line_no + 1, DOCS_MAX_LINE);
        buf_append(&r->line, start, n);
        r->io_pos += n + (nl != NULL);
        if (nl) return 1;
    }
}

// ---- JSON Lines ----

static int docs_json_ids(DocsReader *r, const JsonValue *a, Doc *d, char *err, size_t errlen) {
    if (a->len > r->ids_cap) {
        r->ids_cap = a->len;
        free(r->ids);
        r->ids = mallocCheck(r->ids_cap * sizeof *r->ids);
    }
    for (size_t i = 0; i < a->len; i++) {
        const JsonValue *v = &a->items[i];
        if (v->type != JSON_NUMBER || !v->is_int || v->integer < 0)
            return err_set(err, errlen, "'%s' line %llu: \"input_ids\" item %zu is not a non-negative integer", r->path,
                            (unsigned long long)r->line_no, i);
        r->ids[i] = v->integer;
    }
    d->is_ids = 1;
    d->ids = r->ids;
    d->len = a->len;
    return 1;
}

// The next non-blank line parsed into r->obj, which must be an object: 1, 0 at the end, -1 with err set.
static int docs_jsonl_object(DocsReader *r, char *err, size_t errlen) {
    for (;;) {
        int rc = docs_line(r, err, errlen);
        if (rc <= 0) return rc;
        r->line_no++;
        size_t i = 0;
        while (i < r->line.len && strchr(" \t\r", r->line.data[i])) i++;
        if (i == r->line.len) continue;  // blank line
        json_free(r->obj);
        char jerr[160];
        r->obj = json_parse((const char *)r->line.data, r->line.len, jerr, sizeof jerr);
        if (!r->obj) return err_set(err, errlen, "'%s' line %llu is not JSON (%s)", r->path, (unsigned long long)r->line_no, jerr);
        if (r->obj->type != JSON_OBJECT)
            return err_set(err, errlen, "'%s' line %llu is not a JSON object: JSON Lines rows must be objects", r->path,
                            (unsigned long long)r->line_no);
        return 1;
    }
}

// every member of the row, the one read (NULL: none) as used
static void docs_note_members(DocsReader *r, const JsonValue *read) {
    for (size_t i = 0; i < r->obj->len; i++) {
        const JsonValue *m = &r->obj->items[i];
        docs_fields_note(&r->fields, m->key, m->key_len, read && m->key_len == read->key_len && !memcmp(m->key, read->key, m->key_len));
    }
}

static int docs_jsonl_next(DocsReader *r, Doc *d, char *err, size_t errlen) {
    int rc;
    while ((rc = docs_jsonl_object(r, err, errlen)) > 0) {
        const JsonValue *ids = r->explicit_column ? NULL : json_get(r->obj, "input_ids");
        const JsonValue *text = json_get(r->obj, r->column);
        docs_note_members(r, ids && (ids->type == JSON_ARRAY || !text || text->type != JSON_STRING) ? ids : text);
        if (ids && ids->type == JSON_ARRAY) return docs_json_ids(r, ids, d, err, errlen);
        if (text && text->type == JSON_STRING) {
            d->is_ids = 0;
            d->text = text->str;
            d->len = text->len;
            return 1;
        }
        if ((ids && ids->type == JSON_NULL) || (text && text->type == JSON_NULL)) {
            r->nulls++;
            continue;
        }
        if (ids) return err_set(err, errlen, "'%s' line %llu: \"input_ids\" is not an array of ids", r->path, (unsigned long long)r->line_no);
        if (text) return err_set(err, errlen, "'%s' line %llu: \"%s\" is not a string", r->path, (unsigned long long)r->line_no, r->column);
        return err_set(err, errlen, "'%s' line %llu has no \"%s\" string%s", r->path, (unsigned long long)r->line_no, r->column,
                        r->explicit_column ? " (--text_column)" : " and no \"input_ids\" array");
    }
    return rc;
}

// ---- a whole text file ----

static int docs_text_next(DocsReader *r, Doc *d, char *err, size_t errlen) {
    if (r->done) return 0;
    r->line.len = 0;
    for (long got; (got = docs_read(r, r->io, DOCS_IO_BYTES, err, errlen)) != 0;) {
        if (got < 0) return -1;
        buf_append(&r->line, r->io, (size_t)got);
    }
    r->done = 1;
    d->is_ids = 0;
    d->text = (const char *)r->line.data;
    d->len = r->line.len;
    return 1;
}

// ---- Arrow and Parquet ----

static void docs_columns(const TableReader *t, char *out, size_t len) {
    size_t n = 0;
    out[0] = 0;
    for (int i = 0; i < t->ncols && n + 1 < len; i++) {
        int w = snprintf(out + n, len - n, "%s%s (%s)", i ? ", " : "", t->cols[i].name, t->cols[i].type);
        if (w < 0) break;
        n += (size_t)w;
    }
    if (!t->ncols) snprintf(out, len, "none");
}

static int docs_table_open(DocsReader *r, char *err, size_t errlen) {
    r->table = r->kind == DOCS_ARROW ? arrow_open(r->path, err, errlen) : parquet_open(r->path, err, errlen);
    if (!r->table) return -1;
    TableReader *t = r->table;
    int ids = r->explicit_column ? -1 : table_find(t, "input_ids"), text = table_find(t, r->column);
    int col = ids >= 0 ? ids : text;
    char cols[600];
    docs_columns(t, cols, sizeof cols);
    if (col < 0)
        return err_set(err, errlen, "'%s' (%s) has no '%s' column%s; its columns: %s", r->path, t->format, r->column,
                        r->explicit_column ? " (--text_column)" : " and no 'input_ids' column", cols);
    TableKind want = col == ids ? TABLE_INT_LIST : TABLE_STRING;
    if (t->cols[col].kind != want)
        return err_set(err, errlen, "'%s' (%s): column '%s' is %s, but fsdpc reads %s there", r->path, t->format, t->cols[col].name,
                        t->cols[col].type, want == TABLE_STRING ? "text (string or large_string)" : "token ids (a list of integers)");
    if (t->select(t, &col, 1, err, errlen)) return -1;
    for (int i = 0; i < t->ncols; i++) docs_fields_note(&r->fields, t->cols[i].name, strlen(t->cols[i].name), i == col);
    r->use_ids = col == ids;
    snprintf(r->describe, sizeof r->describe, "%s, column %s (%s)", t->format, t->cols[col].name, t->cols[col].type);
    return 0;
}

static int docs_table_next(DocsReader *r, Doc *d, char *err, size_t errlen) {
    for (;;) {
        int rc = r->table->next(r->table, &r->value, err, errlen);
        if (rc <= 0) return rc;
        if (r->value.is_null) {
            r->nulls++;
            continue;
        }
        d->is_ids = r->use_ids;
        d->len = r->value.len;
        if (!r->use_ids) {
            d->text = r->value.str;
            return 1;
        }
        if (r->value.has_null_item) return err_set(err, errlen, "'%s': a row's input_ids list holds a null id", r->path);
        d->ids = r->value.ints;  // the range of each id is the consumer's to check, as it writes it
        return 1;
    }
}

// ---- the reader ----

// rows: the raw rows for a caller that reads them itself (docs_next_object, docs_table); no column chosen.
static DocsReader *docs_open_any(const char *path, DocsKind kind, DocsCompression comp, const char *text_column, int explicit_column,
                                 int rows, char *err, size_t errlen) {
    DocsReader *r = callocCheck(1, sizeof *r);
    r->path = strdup(path);
    if (!r->path) err_fatal("out of memory copying '%s'", path);
    r->kind = kind;
    r->comp = comp;
    r->fd = -1;
    r->column = text_column && text_column[0] ? text_column : "text";
    r->explicit_column = explicit_column;
    r->rows = rows;
    static const char *const comp_names[] = {"", "gzip-compressed ", "zstd-compressed "};
    if (kind == DOCS_ARROW || kind == DOCS_PARQUET) {
        if (rows) {
            r->table = kind == DOCS_ARROW ? arrow_open(path, err, errlen) : parquet_open(path, err, errlen);
            if (!r->table) return docs_close(r), NULL;
            snprintf(r->describe, sizeof r->describe, "%s", r->table->format);
            return r;
        }
        if (docs_table_open(r, err, errlen)) return docs_close(r), NULL;
        return r;
    }
    if (rows && kind != DOCS_JSONL) {
        snprintf(err, errlen, "'%s' is a text file, not rows (JSON Lines, Arrow or Parquet)", path);
        return docs_close(r), NULL;
    }
    r->fd = path_open_read(path);
    if (r->fd < 0) {
        snprintf(err, errlen, "cannot open data file '%s': %s", path, path_strerror(errno));
        return docs_close(r), NULL;
    }
    r->io = mallocCheck(DOCS_IO_BYTES);
    if (comp == DOCS_GZIP) {
        int fd = dup(r->fd);
        if (fd < 0) {
            snprintf(err, errlen, "cannot open data file '%s': %s", path, strerror(errno));
            return docs_close(r), NULL;
        }
        r->gz = gz_open(fd, DOCS_IO_BYTES);
    } else if (comp == DOCS_ZSTD) {
        r->zs = ZSTD_createDStream();
        if (!r->zs) err_fatal("out of memory starting a zstd stream");
        ZSTD_initDStream(r->zs);
        r->zin = mallocCheck(DOCS_IO_BYTES);
    }
    if (rows)
        snprintf(r->describe, sizeof r->describe, "%sJSON Lines", comp_names[comp]);
    else if (kind == DOCS_JSONL)
        snprintf(r->describe, sizeof r->describe, "%sJSON Lines, member %s%s", comp_names[comp], explicit_column ? "" : "input_ids or ", r->column);
    else
        snprintf(r->describe, sizeof r->describe, "%stext, one document", comp_names[comp]);
    return r;
}

DocsReader *docs_open(const char *path, DocsKind kind, DocsCompression comp, const char *text_column, int explicit_column,
                      char *err, size_t errlen) {
    return docs_open_any(path, kind, comp, text_column, explicit_column, 0, err, errlen);
}

DocsReader *docs_open_rows(const char *path, DocsKind kind, DocsCompression comp, char *err, size_t errlen) {
    return docs_open_any(path, kind, comp, NULL, 0, 1, err, errlen);
}

int docs_next_object(DocsReader *r, const JsonValue **obj, uint64_t *line_no, char *err, size_t errlen) {
    if (!r->rows || r->kind != DOCS_JSONL) return err_set(err, errlen, "'%s' is not JSON Lines opened for its rows", r->path);
    int rc = docs_jsonl_object(r, err, errlen);
    *obj = rc > 0 ? r->obj : NULL;
    *line_no = r->line_no;
    return rc;
}

TableReader *docs_table(DocsReader *r) { return r->rows ? r->table : NULL; }

int docs_next(DocsReader *r, Doc *d, char *err, size_t errlen) {
    if (r->rows) return err_set(err, errlen, "'%s' was opened for its rows, not documents", r->path);
    switch (r->kind) {
    case DOCS_JSONL: return docs_jsonl_next(r, d, err, errlen);
    case DOCS_TEXT: return docs_text_next(r, d, err, errlen);
    default: return docs_table_next(r, d, err, errlen);
    }
}

const char *docs_describe(const DocsReader *r) { return r->describe; }
uint64_t docs_nulls(const DocsReader *r) { return r->nulls; }
const DocsFields *docs_fields(const DocsReader *r) { return &r->fields; }
uint64_t docs_progress(const DocsReader *r) { return r->consumed; }

void docs_close(DocsReader *r) {
    if (!r) return;
    if (r->table) r->table->close(r->table);
    gz_close(r->gz);
    if (r->zs) ZSTD_freeDStream(r->zs);
    if (r->fd >= 0) close(r->fd);
    json_free(r->obj);
    free(r->zin);
    free(r->io);
    buf_free(&r->line);
    free(r->ids);
    free(r->path);
    free(r);
}
