// parquet: Apache Parquet files as a TableReader (see parquet.h). A small bounds-checked Thrift
// compact-protocol reader parses the footer; each selected column is decoded page by page through
// a window of levels, so memory stays at one row group's mapped column chunks plus one
// decompressed page (and its dictionary) per selected column.
#include "parquet.h"

#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <snappy-c.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "../../base/buf.h"
#include "../../base/err.h"
#include "../../base/path.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "data/format/parquet.c reads Parquet's little-endian values in place"
#endif

#define PQ_MAX_SELECT 8
#define PQ_MAX_DEPTH 64           // schema nesting: levels stay below 64, so they fit a byte
#define TC_MAX_DEPTH 64           // Thrift nesting of skipped (unknown) fields
#define PQ_WINDOW 16384           // levels decoded at a time
#define PQ_MAX_PAGE (1u << 30)    // bytes of one decompressed page
#define PQ_MAX_ITEMS (1u << 26)   // items of one list row
#define PQ_MAX_ELEMS (1u << 20)   // elements of one struct list row
#define PQ_MAX_TEXT (1u << 28)    // bytes of strings copied for one struct list row, all its fields together
#define PQ_IDX_CHUNK 256          // dictionary indices unpacked at a time
#define PQ_RELEASE (8u << 20)     // mapped bytes read past before they are handed back

enum { PQ_BOOLEAN, PQ_INT32, PQ_INT64, PQ_INT96, PQ_FLOAT, PQ_DOUBLE, PQ_BYTE_ARRAY, PQ_FIXED };
enum { PQ_REQUIRED, PQ_OPTIONAL, PQ_REPEATED };
enum { CODEC_UNCOMPRESSED, CODEC_SNAPPY, CODEC_GZIP, CODEC_LZO, CODEC_BROTLI, CODEC_LZ4, CODEC_ZSTD, CODEC_LZ4_RAW };
enum {
    ENC_PLAIN = 0, ENC_PLAIN_DICT = 2, ENC_RLE = 3, ENC_BIT_PACKED = 4, ENC_DELTA = 5, ENC_DELTA_LENGTH = 6,
    ENC_DELTA_BYTES = 7, ENC_RLE_DICT = 8, ENC_BYTE_STREAM_SPLIT = 9, ENC_ALP = 10,
};
enum { PAGE_DATA = 0, PAGE_DICT = 2, PAGE_DATA_V2 = 3 };
// ConvertedType and LogicalType (union field ids) values this reader names
enum { CONV_UTF8 = 0, CONV_MAP = 1, CONV_MAP_KV = 2, CONV_LIST = 3, CONV_ENUM = 4, CONV_UINT_8 = 11, CONV_INT_64 = 18,
       CONV_JSON = 19 };
enum { LOG_STRING = 1, LOG_MAP = 2, LOG_LIST = 3, LOG_ENUM = 4, LOG_INTEGER = 10, LOG_JSON = 12 };

static const char *pq_codec_name(int codec) {
    static const char *names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
    return codec >= 0 && codec < 8 ? names[codec] : "unknown";
}

static const char *pq_encoding_name(int enc) {
    static const char *names[] = {"PLAIN", "GROUP_VAR_INT", "PLAIN_DICTIONARY", "RLE", "BIT_PACKED",
                                  "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
                                  "RLE_DICTIONARY", "BYTE_STREAM_SPLIT", "ALP"};
    return enc >= 0 && enc < 11 ? names[enc] : "unknown";
}

// ---- Thrift compact protocol ----
// Every read checks the bounds; on malformed input `bad` is set and the cursor jumps to the end,
// so every loop over fields or elements stops at once.

typedef struct {
    const uint8_t *p, *end;
    int bad, depth;
    const char *why;         // the first problem found beyond malformed Thrift, for the message
    const uint8_t *fail_at;  // where it was found
} Tc;

enum { TC_STOP, TC_TRUE, TC_FALSE, TC_I8, TC_I16, TC_I32, TC_I64, TC_DOUBLE, TC_BINARY, TC_LIST, TC_SET, TC_MAP,
       TC_STRUCT, TC_UUID };

static void tc_fail(Tc *t, const char *why) {
    if (!t->bad) t->why = why, t->fail_at = t->p;
    t->bad = 1;
    t->p = t->end;
}

static uint64_t tc_varint(Tc *t) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && t->p < t->end; shift += 7) {
        uint8_t b = *t->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    tc_fail(t, NULL);
    return 0;
}

static int64_t tc_zigzag(Tc *t) {
    uint64_t v = tc_varint(t);
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

// The next field of a struct: its type (TC_STOP at the struct's end, and on an error) and its id,
// kept in *id since ids are written as deltas from the previous field's.
static int tc_field(Tc *t, int *id) {
    if (t->p >= t->end) {
        tc_fail(t, NULL);
        return TC_STOP;
    }
    uint8_t b = *t->p++;
    if (b == 0) return TC_STOP;
    int64_t v = b >> 4 ? *id + (b >> 4) : tc_zigzag(t);
    if (v < INT16_MIN || v > INT16_MAX) {
        tc_fail(t, NULL);
        return TC_STOP;
    }
    *id = (int)v;
    return b & 15;
}

static int64_t tc_int(Tc *t, int type) {
    if (type == TC_I8) {
        if (t->p < t->end) return (int8_t)*t->p++;
    } else if (type == TC_I16 || type == TC_I32 || type == TC_I64) {
        return tc_zigzag(t);
    }
    tc_fail(t, NULL);
    return 0;
}

// An integer field that must lie in [lo, hi]; `what` names it in the message otherwise.
static int64_t tc_range(Tc *t, int type, int64_t lo, int64_t hi, const char *what) {
    int64_t v = tc_int(t, type);
    if (!t->bad && (v < lo || v > hi)) tc_fail(t, what);
    return t->bad ? lo : v;
}

static int tc_bool(Tc *t, int type) {
    if (type != TC_TRUE && type != TC_FALSE) tc_fail(t, NULL);
    return type == TC_TRUE;
}

static const uint8_t *tc_binary(Tc *t, int type, size_t *len) {
    *len = 0;
    uint64_t n = type == TC_BINARY ? tc_varint(t) : 0;
    if (type != TC_BINARY || n > (uint64_t)(t->end - t->p)) {
        tc_fail(t, NULL);
        return NULL;
    }
    const uint8_t *s = t->p;
    t->p += n;
    *len = n;
    return s;
}

// A list's (or set's) header: its element type into *etype and its length, which is at most the
// bytes left since every element takes one byte at least.
static int64_t tc_list(Tc *t, int type, int *etype) {
    if ((type != TC_LIST && type != TC_SET) || t->p >= t->end) {
        tc_fail(t, NULL);
        return 0;
    }
    uint8_t b = *t->p++;
    uint64_t n = b >> 4;
    *etype = b & 15;
    if (n == 15) n = tc_varint(t);
    if (n > (uint64_t)(t->end - t->p)) tc_fail(t, NULL);
    return t->bad ? 0 : (int64_t)n;
}

// Skips a value of `type` (a field, or with in_list an element, where booleans take a byte).
static void tc_skip(Tc *t, int type, int in_list) {
    if (++t->depth > TC_MAX_DEPTH) {
        tc_fail(t, "Thrift structures nested too deeply");
        return;
    }
    size_t n = 0;
    switch (type) {
    case TC_TRUE:
    case TC_FALSE: n = in_list; break;
    case TC_I8: n = 1; break;
    case TC_DOUBLE: n = 8; break;
    case TC_UUID: n = 16; break;
    case TC_I16:
    case TC_I32:
    case TC_I64: tc_varint(t); break;
    case TC_BINARY: tc_binary(t, type, &n), n = 0; break;
    case TC_LIST:
    case TC_SET: {
        int et;
        int64_t len = tc_list(t, type, &et);
        for (int64_t i = 0; i < len && !t->bad; i++) tc_skip(t, et, 1);
        break;
    }
    case TC_MAP: {
        uint64_t len = tc_varint(t);
        if (!len || t->bad) break;
        if (t->p >= t->end || len > (uint64_t)(t->end - t->p) / 2) {
            tc_fail(t, NULL);
            break;
        }
        uint8_t kv = *t->p++;
        for (uint64_t i = 0; i < len && !t->bad; i++) {
            tc_skip(t, kv >> 4, 1);
            tc_skip(t, kv & 15, 1);
        }
        break;
    }
    case TC_STRUCT: {
        int id = 0, ft;
        while ((ft = tc_field(t, &id)) != TC_STOP) tc_skip(t, ft, 0);
        break;
    }
    default: tc_fail(t, NULL);
    }
    if (n > (size_t)(t->end - t->p)) tc_fail(t, NULL);
    else t->p += n;
    t->depth--;
}

// ---- footer ----

typedef struct {
    const uint8_t *name;
    size_t name_len;
    int type;          // physical type; -1 for a group
    int type_length;
    int repetition;
    int num_children;
    int converted;     // -1: none
    int logical;       // the LogicalType union's field id; 0: none
    int int_bits, int_signed;  // LogicalType INTEGER
    // from the tree walk (pq_schema)
    int def, rep;      // the levels of this node: its optional and repeated ancestors, itself included
    int leaf;          // the column chunk index of a leaf; -1 for a group
} PqElem;

typedef struct {
    int64_t num_values, data_off, dict_off, size;  // dict_off -1: none
    int type, codec;
    int bad_encoding;  // an encoding in the list that fsdpc cannot read values of, or -1
    int external;      // the data lives in another file (ColumnChunk.file_path)
    int encrypted;
} PqChunk;

typedef struct {
    int64_t rows;
    size_t first, nchunks;  // its column chunks in PqFooter.chunks
} PqRowGroup;

typedef struct {
    PqElem *elems;
    size_t nelems, elems_cap;
    PqChunk *chunks;
    size_t nchunks, chunks_cap;
    PqRowGroup *rgs;
    size_t nrg, rg_cap;
    int64_t num_rows;
    int encrypted;
} PqFooter;

static void parse_logical(Tc *t, PqElem *e) {
    int id = 0, ft;
    while ((ft = tc_field(t, &id)) != TC_STOP) {
        if (ft != TC_STRUCT) {
            tc_fail(t, NULL);
            break;
        }
        e->logical = id;
        if (id != LOG_INTEGER) {
            tc_skip(t, ft, 0);
            continue;
        }
        int id2 = 0, ft2;
        while ((ft2 = tc_field(t, &id2)) != TC_STOP) {
            if (id2 == 1) e->int_bits = (int)tc_range(t, ft2, 0, 127, "an integer annotation of a bad width");
            else if (id2 == 2) e->int_signed = tc_bool(t, ft2);
            else tc_skip(t, ft2, 0);
        }
    }
}

static void parse_schema_elem(Tc *t, PqElem *e) {
    memset(e, 0, sizeof *e);
    e->type = -1;
    e->converted = -1;
    int id = 0, ft, named = 0;
    while ((ft = tc_field(t, &id)) != TC_STOP) {
        switch (id) {
        case 1: e->type = (int)tc_range(t, ft, 0, PQ_FIXED, "a schema element of an unknown physical type"); break;
        case 2: e->type_length = (int)tc_range(t, ft, 0, INT32_MAX, "a negative type_length"); break;
        case 3: e->repetition = (int)tc_range(t, ft, 0, PQ_REPEATED, "an unknown repetition type"); break;
        case 4: e->name = tc_binary(t, ft, &e->name_len), named = 1; break;
        case 5: e->num_children = (int)tc_range(t, ft, 0, INT32_MAX, "a negative num_children"); break;
        case 6: e->converted = (int)tc_range(t, ft, 0, INT32_MAX, "an unknown converted type"); break;
        case 10:
            if (ft != TC_STRUCT) tc_fail(t, NULL);
            else parse_logical(t, e);
            break;
        default: tc_skip(t, ft, 0);
        }
    }
    if (!named) tc_fail(t, "a schema element without a name");
}

static void parse_col_meta(Tc *t, PqChunk *c) {
    int id = 0, ft;
    unsigned seen = 0;
    while ((ft = tc_field(t, &id)) != TC_STOP) {
        switch (id) {
        case 1: c->type = (int)tc_range(t, ft, 0, PQ_FIXED, "a column chunk of an unknown physical type"), seen |= 1; break;
        case 2: {
            int et;
            int64_t n = tc_list(t, ft, &et);
            for (int64_t i = 0; i < n && !t->bad; i++) {
                int64_t enc = tc_int(t, et);
                // BIT_PACKED and RLE are listed for levels too: pages refuse them where they are values
                int known = enc == ENC_PLAIN || (enc >= ENC_PLAIN_DICT && enc <= ENC_RLE_DICT);
                if (!known && c->bad_encoding < 0) c->bad_encoding = enc < 0 || enc > INT16_MAX ? INT16_MAX : (int)enc;
            }
            break;
        }
        case 4: c->codec = (int)tc_range(t, ft, 0, INT32_MAX, "a negative codec"), seen |= 2; break;
        case 5: c->num_values = tc_range(t, ft, 0, INT64_MAX, "a negative num_values"); break;
        case 7: c->size = tc_range(t, ft, 0, INT64_MAX, "a negative total_compressed_size"), seen |= 4; break;
        case 9: c->data_off = tc_range(t, ft, 0, INT64_MAX, "a negative data_page_offset"), seen |= 8; break;
        case 11: c->dict_off = tc_range(t, ft, 0, INT64_MAX, "a negative dictionary_page_offset"); break;
        default: tc_skip(t, ft, 0);
        }
    }
    if (seen != 15) tc_fail(t, "column metadata without its type, codec, size or data page offset");
}

static void parse_col_chunk(Tc *t, PqChunk *c) {
    memset(c, 0, sizeof *c);
    c->dict_off = -1;
    c->bad_encoding = -1;
    int id = 0, ft, has_meta = 0;
    size_t n;
    while ((ft = tc_field(t, &id)) != TC_STOP) {
        switch (id) {
        case 1: tc_binary(t, ft, &n), c->external = 1; break;
        case 3:
            if (ft != TC_STRUCT) tc_fail(t, NULL);
            else parse_col_meta(t, c), has_meta = 1;
            break;
        case 8:
        case 9: c->encrypted = 1, tc_skip(t, ft, 0); break;
        default: tc_skip(t, ft, 0);
        }
    }
    if (!has_meta && !c->encrypted) tc_fail(t, "a column chunk without metadata");
}

static void parse_row_group(Tc *t, PqFooter *f) {
    buf_fit(f->rgs, &f->rg_cap, f->nrg + 1);
    PqRowGroup *g = &f->rgs[f->nrg++];
    *g = (PqRowGroup){0, f->nchunks, 0};
    int id = 0, ft, seen = 0;
    while ((ft = tc_field(t, &id)) != TC_STOP) {
        if (id == 1) {
            int et;
            int64_t n = tc_list(t, ft, &et);
            if (n && et != TC_STRUCT) tc_fail(t, NULL);
            for (int64_t i = 0; i < n && !t->bad; i++) {
                buf_fit(f->chunks, &f->chunks_cap, f->nchunks + 1);
                parse_col_chunk(t, &f->chunks[f->nchunks++]);
                g->nchunks++;
            }
            seen |= 1;
        } else if (id == 3) {
            g->rows = tc_range(t, ft, 0, INT64_MAX, "a row group with a negative row count");
            seen |= 2;
        } else {
            tc_skip(t, ft, 0);
        }
    }
    if (seen != 3) tc_fail(t, "a row group without its columns or row count");
}

static void parse_footer(Tc *t, PqFooter *f) {
    int id = 0, ft, seen = 0, et;
    while ((ft = tc_field(t, &id)) != TC_STOP) {
        switch (id) {
        case 2: {
            int64_t n = tc_list(t, ft, &et);
            if (n && et != TC_STRUCT) tc_fail(t, NULL);
            for (int64_t i = 0; i < n && !t->bad; i++) {
                buf_fit(f->elems, &f->elems_cap, f->nelems + 1);
                parse_schema_elem(t, &f->elems[f->nelems++]);
            }
            seen |= 1;
            break;
        }
        case 3: f->num_rows = tc_range(t, ft, 0, INT64_MAX, "a negative row count"), seen |= 2; break;
        case 4: {
            int64_t n = tc_list(t, ft, &et);
            if (n && et != TC_STRUCT) tc_fail(t, NULL);
            for (int64_t i = 0; i < n && !t->bad; i++) parse_row_group(t, f);
            seen |= 4;
            break;
        }
        case 8: f->encrypted = 1, tc_skip(t, ft, 0); break;
        default: tc_skip(t, ft, 0);
        }
    }
    if (seen != 7) tc_fail(t, "FileMetaData without its schema, row count or row groups");
}

// ---- the reader ----

typedef struct PqField PqField;
struct PqField {
    TableKind kind;
    int leaf;             // its column chunk (one leaf, but for a struct list: one per field)
    int phys;             // physical type of the leaf
    int is_unsigned;      // an INT32 holding uint8..uint32: zero-extended
    uint8_t max_def, max_rep;
    uint8_t d_list, d_rep;  // lists: the definition level of a present list, of a present item
    uint8_t d_elem;       // struct lists: of a present (non-null) struct element
    // TABLE_STRUCT_LIST: a field each (kind TABLE_STRING where fsdpc reads it, name "column.field"),
    // and those choose_fields picked
    PqField *sub;
    char *name;
    int nf, nchosen, chosen[TABLE_MAX_FIELDS];
};

typedef struct {
    uint8_t *p;
    size_t cap;
} PqBuf;

// RLE / bit-packed hybrid: levels and dictionary indices
typedef struct {
    const uint8_t *p, *end;
    unsigned bw;
    uint64_t left;        // values left in the current run
    int repeat;           // the run repeats `value`; else it is bit-packed at bp
    uint32_t value;
    const uint8_t *bp;
    size_t bp_len;
    uint64_t bit;
} PqRle;

// DELTA_BINARY_PACKED, read as a stream
typedef struct {
    const uint8_t *p, *end;
    uint64_t nmini, per_mini;   // miniblocks per block, values per miniblock
    uint64_t left;              // values not yet read
    uint64_t last, min_delta;
    int started;                // the first value (from the header) was read
    const uint8_t *widths;      // the current block's miniblock bit widths
    uint64_t mini;              // the next miniblock of the block (nmini: a new block)
    const uint8_t *mp;          // the current miniblock
    uint64_t mbit, mleft;
    unsigned mw;
} PqDelta;

typedef struct PqReader PqReader;

typedef struct {
    const uint8_t *p;
    size_t len;
} PqStr;

// A chosen field's string in the current row: in the column chunk's dictionary (p), which
// outlives the row, or copied to the column's arena at off (pages change within a row)
typedef struct {
    const uint8_t *p;
    size_t off, len;
} PqSpan;

typedef struct PqCol PqCol;
struct PqCol {
    PqReader *r;
    const PqField *f;
    const char *name;
    // the column chunk of the current row group
    void *map;
    size_t map_len, released;  // bytes of the mapping handed back (from its start)
    PqBuf copy;           // the chunk read with pread where mmap fails
    const uint8_t *cur, *end;
    int rg, page, codec, open;
    // dictionary
    PqBuf dictbuf;
    int64_t *dict_ints;    // padded with zeros to dict_pad entries, a power of two
    PqStr *dict_strs;
    size_t dict_cap, dict_pad;
    uint32_t dict_n;
    int has_dict, seen_data;
    // the current data page
    PqBuf pagebuf;
    PqRle rep_dec, def_dec;
    uint64_t levels_left;
    int venc, vready;
    const uint8_t *vp, *vend;  // its values
    PqRle idx;
    uint32_t ibuf[PQ_IDX_CHUNK];  // dictionary indices unpacked ahead
    size_t ipos, ilen;
    PqDelta d1, d2;
    PqBuf sbuf[2];        // DELTA_BYTE_ARRAY: the value and the one before
    int scur;
    size_t prev_len;
    // the levels window
    uint8_t *rep, *def;
    uint32_t pos, count;
    // the current row
    int64_t *row;
    size_t row_cap, row_len;
    int row_null, row_has_null;
    const uint8_t *str;
    size_t str_len;
    // a struct list: one column per chosen field, read in step, and the row's elements x fields
    PqCol *sub;
    int nsub;
    TableStr *items;
    size_t items_cap;
    // a chosen field of a struct list: each element's definition level and string in this row
    uint8_t *edef;
    PqSpan *espan;
    size_t e_cap, e_len;
    PqBuf arena;
    size_t arena_len;
};

struct PqReader {
    TableReader base;
    char *path;
    int fd;
    const uint8_t *mem;   // parquet_open_mem
    uint64_t size, footer_start;
    TableColumn *cols;
    PqField *fields;
    int nleaves;
    PqFooter ft;
    PqCol sel[PQ_MAX_SELECT];
    int nsel;
    size_t rg;            // the current row group, +1 (0: none yet)
    int64_t rg_left;      // its rows not yet read
    int done, failed;
    int nsub_text;        // the struct fields selected, plus 1: PQ_MAX_TEXT is shared out among them
    z_stream zs;
    int zs_ready;
    ZSTD_DCtx *zd;
    char *err;
    size_t errlen;
};

static int pq_vfail(PqReader *r, const char *prefix, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    err_set(r->err, r->errlen, "'%s': %s%s", r->path, prefix, msg);
    return -1;
}

__attribute__((format(printf, 2, 3))) static int pq_fail(PqReader *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pq_vfail(r, "", fmt, ap);
    va_end(ap);
    return -1;
}

// "'path': column 'name' <what>": a property of the column (an unsupported codec or encoding)
__attribute__((format(printf, 2, 3))) static int col_fail(PqCol *c, const char *fmt, ...) {
    char prefix[200];
    snprintf(prefix, sizeof prefix, "column '%s' ", c->name);
    va_list ap;
    va_start(ap, fmt);
    pq_vfail(c->r, prefix, fmt, ap);
    va_end(ap);
    c->r->failed = 1;
    return -1;
}

// "'path': column 'name', row group G, page P: <what>": damaged data
__attribute__((format(printf, 2, 3))) static int col_corrupt(PqCol *c, const char *fmt, ...) {
    char prefix[200];
    snprintf(prefix, sizeof prefix, "column '%s', row group %d, page %d: ", c->name, c->rg + 1, c->page);
    va_list ap;
    va_start(ap, fmt);
    pq_vfail(c->r, prefix, fmt, ap);
    va_end(ap);
    c->r->failed = 1;
    return -1;
}

// Room for `n` bytes (old contents dropped); the cap is real memory, the sizes were validated.
static uint8_t *pq_scratch(PqBuf *b, size_t n) {
    if (n > b->cap || !b->p) {
        free(b->p);
        b->cap = n > b->cap ? n : b->cap;
        b->p = mallocCheck(b->cap ? b->cap : 1);
    }
    return b->p;
}

// n bytes at off, however many reads that takes: 0, or -1 with errno (0: the file is shorter)
static int pq_pread(int fd, void *buf, size_t n, uint64_t off) {
    for (size_t got = 0; got < n;) {
        ssize_t k = pread(fd, (uint8_t *)buf + got, n - got, (off_t)(off + got));
        if (k <= 0) {
            if (!k) errno = 0;
            return -1;
        }
        got += (size_t)k;
    }
    return 0;
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint32_t be32(const uint8_t *p) { return (uint32_t)p[3] | (uint32_t)p[2] << 8 | (uint32_t)p[1] << 16 | (uint32_t)p[0] << 24; }

// ---- decompression ----

static int pq_gunzip(PqReader *r, const uint8_t *src, size_t n, uint8_t *dst, size_t size) {
    z_stream *z = &r->zs;
    if (!r->zs_ready) {
        memset(z, 0, sizeof *z);
        if (inflateInit2(z, 15 + 32) != Z_OK) return -1;  // gzip or zlib, by the header
        r->zs_ready = 1;
    } else if (inflateReset(z) != Z_OK) {
        return -1;
    }
    z->next_in = (Bytef *)src;
    z->avail_in = (uInt)n;
    z->next_out = dst;
    z->avail_out = (uInt)size;
    for (;;) {
        int rc = inflate(z, Z_FINISH);
        if (rc != Z_STREAM_END) return -1;
        if (!z->avail_in || !z->avail_out) break;
        if (inflateReset(z) != Z_OK) return -1;  // concatenated gzip members
    }
    return z->avail_in || z->avail_out ? -1 : 0;
}

// Hadoop's LZ4 framing (4-byte big-endian decompressed and compressed lengths before each block).
static int pq_lz4_hadoop(const uint8_t *src, size_t n, uint8_t *dst, size_t size) {
    size_t in = 0, out = 0;
    while (n - in >= 8) {
        uint32_t ul = be32(src + in), cl = be32(src + in + 4);
        in += 8;
        if (cl > n - in || ul > size - out) return -1;
        if (LZ4_decompress_safe((const char *)src + in, (char *)dst + out, (int)cl, (int)ul) != (int)ul) return -1;
        in += cl;
        out += ul;
    }
    return in == n && out == size ? 0 : -1;
}

// The `n` bytes of a page body at `src` decompressed to `size` bytes (into buf, or src itself when
// the chunk is not compressed); *out points to them.
static int col_inflate(PqCol *c, const uint8_t *src, size_t n, size_t size, PqBuf *buf, const uint8_t **out) {
    if (c->codec == CODEC_UNCOMPRESSED) {
        if (size != n) return col_corrupt(c, "the page says %zu bytes uncompressed but stores %zu, uncompressed", size, n);
        *out = src;
        return 0;
    }
    // the most each codec can expand: a lying size allocates nothing beyond that
    uint64_t ratio = c->codec == CODEC_SNAPPY ? 24 : c->codec == CODEC_GZIP ? 1032 : c->codec == CODEC_ZSTD ? 32768 : 256;
    if (size > PQ_MAX_PAGE || size > (uint64_t)n * ratio + 64)
        return col_corrupt(c, "the page says %zu bytes uncompressed from %zu %s-compressed bytes, more than that codec produces",
                           size, n, pq_codec_name(c->codec));
    uint8_t *dst = pq_scratch(buf, size);
    int ok = 0;
    size_t got;
    switch (c->codec) {
    case CODEC_SNAPPY:
        got = size;
        ok = snappy_uncompressed_length((const char *)src, n, &got) == SNAPPY_OK && got == size &&
             snappy_uncompress((const char *)src, n, (char *)dst, &got) == SNAPPY_OK && got == size;
        break;
    case CODEC_GZIP: ok = pq_gunzip(c->r, src, n, dst, size) == 0; break;
    case CODEC_ZSTD:
        if (!c->r->zd) c->r->zd = ZSTD_createDCtx();
        if (!c->r->zd) return col_corrupt(c, "out of memory for zstd");
        got = ZSTD_decompressDCtx(c->r->zd, dst, size, src, n);
        ok = !ZSTD_isError(got) && got == size;
        break;
    case CODEC_LZ4_RAW: ok = LZ4_decompress_safe((const char *)src, (char *)dst, (int)n, (int)size) == (int)size; break;
    case CODEC_LZ4:  // Hadoop-framed as arrow-rs and parquet-mr write it; older writers: a bare block
        ok = pq_lz4_hadoop(src, n, dst, size) == 0 ||
             LZ4_decompress_safe((const char *)src, (char *)dst, (int)n, (int)size) == (int)size;
        break;
    }
    if (!ok) return col_corrupt(c, "%s data does not decompress to the %zu bytes the page header says", pq_codec_name(c->codec), size);
    *out = dst;
    return 0;
}

// ---- bit unpacking, RLE / bit-packed hybrid, DELTA_BINARY_PACKED ----

// 8 bytes at p + byte, zeros past len
static inline uint64_t load_tail(const uint8_t *p, size_t len, size_t byte) {
    uint64_t w = 0;
    if (byte < len) memcpy(&w, p + byte, len - byte < 8 ? len - byte : 8);
    return w;
}

// m values of bw <= 32 bits from bit `bit` of p[0..len), least significant bit first
static void unpack32(const uint8_t *p, size_t len, uint64_t bit, unsigned bw, uint32_t *out, size_t m) {
    uint64_t mask = (1ull << bw) - 1, w;
    size_t i = 0;
    if (len >= 8)
        for (; i < m && (bit >> 3) <= len - 8; i++, bit += bw) {
            memcpy(&w, p + (bit >> 3), 8);
            out[i] = (uint32_t)((w >> (bit & 7)) & mask);
        }
    for (; i < m; i++, bit += bw) out[i] = (uint32_t)((load_tail(p, len, bit >> 3) >> (bit & 7)) & mask);
}

// Dictionary indices of B bits, whole groups of 8 (B bytes a group) with 8 readable bytes past the
// last, gathered from a dictionary of at least 2^B entries (so any index reads inside it): a
// constant width lets the compiler unroll a group with fixed shifts. Returns the largest index,
// for the caller to check against the dictionary's real size.
#define PQ_GATHER(B)                                                                                   \
    static uint32_t gather_w##B(const uint8_t *p, const int64_t *dict, int64_t *out, size_t groups) {  \
        uint32_t max = 0;                                                                              \
        for (size_t g = 0; g < groups; g++, p += B, out += 8)                                          \
            for (unsigned j = 0; j < 8; j++) {                                                         \
                uint64_t w;                                                                            \
                memcpy(&w, p + j * B / 8, 8);                                                          \
                uint32_t k = (uint32_t)((w >> (j * B % 8)) & ((1ull << B) - 1));                       \
                max = k > max ? k : max;                                                               \
                out[j] = dict[k];                                                                      \
            }                                                                                          \
        return max;                                                                                    \
    }
PQ_GATHER(1) PQ_GATHER(2) PQ_GATHER(3) PQ_GATHER(4) PQ_GATHER(5) PQ_GATHER(6) PQ_GATHER(7) PQ_GATHER(8)
PQ_GATHER(9) PQ_GATHER(10) PQ_GATHER(11) PQ_GATHER(12) PQ_GATHER(13) PQ_GATHER(14) PQ_GATHER(15) PQ_GATHER(16)
PQ_GATHER(17) PQ_GATHER(18) PQ_GATHER(19) PQ_GATHER(20) PQ_GATHER(21) PQ_GATHER(22) PQ_GATHER(23) PQ_GATHER(24)
PQ_GATHER(25) PQ_GATHER(26) PQ_GATHER(27) PQ_GATHER(28) PQ_GATHER(29) PQ_GATHER(30) PQ_GATHER(31) PQ_GATHER(32)
static uint32_t (*const gather_w[33])(const uint8_t *, const int64_t *, int64_t *, size_t) = {
    NULL, gather_w1, gather_w2, gather_w3, gather_w4, gather_w5, gather_w6, gather_w7, gather_w8, gather_w9, gather_w10,
    gather_w11, gather_w12, gather_w13, gather_w14, gather_w15, gather_w16, gather_w17, gather_w18, gather_w19, gather_w20,
    gather_w21, gather_w22, gather_w23, gather_w24, gather_w25, gather_w26, gather_w27, gather_w28, gather_w29, gather_w30,
    gather_w31, gather_w32};

// the same for levels (bw <= 8)
static void unpack8(const uint8_t *p, size_t len, uint64_t bit, unsigned bw, uint8_t *out, size_t m) {
    uint64_t mask = (1ull << bw) - 1, w;
    size_t i = 0;
    if (len >= 8)
        for (; i < m && (bit >> 3) <= len - 8; i++, bit += bw) {
            memcpy(&w, p + (bit >> 3), 8);
            out[i] = (uint8_t)((w >> (bit & 7)) & mask);
        }
    for (; i < m; i++, bit += bw) out[i] = (uint8_t)((load_tail(p, len, bit >> 3) >> (bit & 7)) & mask);
}

// one value of w <= 64 bits; the caller guarantees bit + w <= 8 * len
static inline uint64_t bits64(const uint8_t *p, size_t len, uint64_t bit, unsigned w) {
    if (!w) return 0;
    size_t byte = bit >> 3;
    unsigned sh = bit & 7;
    uint64_t v = load_tail(p, len, byte) >> sh;
    if (sh + w > 64) v |= (uint64_t)p[byte + 8] << (64 - sh);
    return w == 64 ? v : v & ((1ull << w) - 1);
}

static void rle_init(PqRle *d, const uint8_t *p, size_t n, unsigned bw) {
    memset(d, 0, sizeof *d);
    d->p = p;
    d->end = p + n;
    d->bw = bw;
}

// Starts the next run; -1 where the data ends or is malformed.
static int rle_run(PqRle *d) {
    do {
        Tc t = {.p = d->p, .end = d->end};
        uint64_t h = tc_varint(&t);
        if (t.bad || h > UINT32_MAX) return -1;
        d->p = t.p;
        size_t avail = (size_t)(d->end - d->p);
        if (h & 1) {
            uint64_t bytes = (h >> 1) * d->bw, count = (h >> 1) * 8;
            if (bytes > avail) bytes = avail, count = bytes * 8 / d->bw;  // a cut last run: the values it holds
            d->repeat = 0;
            d->bp = d->p;
            d->bp_len = bytes;
            d->bit = 0;
            d->left = count;
            d->p += bytes;
        } else {
            unsigned nb = (d->bw + 7) / 8;
            if (avail < nb) return -1;
            uint32_t v = 0;
            for (unsigned k = 0; k < nb; k++) v |= (uint32_t)d->p[k] << 8 * k;
            d->p += nb;
            d->repeat = 1;
            d->value = v;
            d->left = h >> 1;
        }
    } while (!d->left);
    return 0;
}

static int rle_levels(PqRle *d, uint8_t *out, size_t n) {
    while (n) {
        if (!d->left && rle_run(d) < 0) return -1;
        size_t m = n < d->left ? n : d->left;
        if (d->repeat) {
            memset(out, d->value > 255 ? 255 : (int)d->value, m);
        } else {
            unpack8(d->bp, d->bp_len, d->bit, d->bw, out, m);
            d->bit += (uint64_t)m * d->bw;
        }
        d->left -= m;
        out += m;
        n -= m;
    }
    return 0;
}

// The next values of the current bit-packed run, at most PQ_IDX_CHUNK, into out; their count.
static size_t rle_unpack(PqRle *d, uint32_t *out) {
    size_t m = d->left < PQ_IDX_CHUNK ? (size_t)d->left : PQ_IDX_CHUNK;
    unpack32(d->bp, d->bp_len, d->bit, d->bw, out, m);
    d->bit += (uint64_t)m * d->bw;
    d->left -= m;
    return m;
}

static int delta_init(PqDelta *d, const uint8_t *p, const uint8_t *end) {
    memset(d, 0, sizeof *d);
    Tc t = {.p = p, .end = end};
    uint64_t block = tc_varint(&t), nmini = tc_varint(&t);
    d->left = tc_varint(&t);
    d->last = (uint64_t)tc_zigzag(&t);
    if (t.bad || !block || block % 128 || block > (1u << 20) || !nmini || block % nmini || (block / nmini) % 32) return -1;
    d->p = t.p;
    d->end = end;
    d->nmini = nmini;
    d->per_mini = block / nmini;
    d->mini = nmini;
    return 0;
}

// Moves to the next miniblock, reading a block header where one starts.
static int delta_mini(PqDelta *d) {
    if (d->mini == d->nmini) {
        Tc t = {.p = d->p, .end = d->end};
        d->min_delta = (uint64_t)tc_zigzag(&t);
        if (t.bad || (uint64_t)(d->end - t.p) < d->nmini) return -1;
        d->widths = t.p;
        d->p = t.p + d->nmini;
        d->mini = 0;
    }
    unsigned w = d->widths[d->mini++];
    uint64_t bytes = d->per_mini * w / 8;
    if (w > 64 || bytes > (uint64_t)(d->end - d->p)) return -1;
    d->mp = d->p;
    d->p += bytes;
    d->mbit = 0;
    d->mw = w;
    d->mleft = d->per_mini;
    return 0;
}

// The next n values (sums wrap as the writer's did; is32 truncates them to int32).
static int delta_get(PqDelta *d, int64_t *out, size_t n, int is32) {
    if (n > d->left) return -1;
    d->left -= n;
    for (size_t i = 0; i < n;) {
        if (!d->started) {
            d->started = 1;
        } else {
            if (!d->mleft && delta_mini(d) < 0) return -1;
            size_t m = n - i < d->mleft ? n - i : d->mleft;
            size_t len = d->per_mini * d->mw / 8;
            uint64_t last = d->last;
            for (size_t k = 0; k < m; k++, d->mbit += d->mw) {
                last += d->min_delta + bits64(d->mp, len, d->mbit, d->mw);
                out[i + k] = is32 ? (int32_t)(uint32_t)last : (int64_t)last;
            }
            d->last = last;
            d->mleft -= m;
            i += m;
            continue;
        }
        out[i++] = is32 ? (int32_t)(uint32_t)d->last : (int64_t)d->last;
    }
    return 0;
}

// Where the values of a freshly initialised stream end (the data that follows them starts).
static const uint8_t *delta_end(const PqDelta *d0) {
    PqDelta d = *d0;
    uint64_t n = d.left > 0 ? d.left - 1 : 0;  // the first value sits in the header
    while (n) {
        if (delta_mini(&d) < 0) return NULL;
        n -= n < d.per_mini ? n : d.per_mini;
    }
    return d.p;
}

// ---- pages ----

typedef struct {
    int type;
    int64_t usize, csize;
    int64_t num_values;
    int enc, def_enc, rep_enc;
    int64_t def_len, rep_len;
    int compressed;
    int has_header;  // the header for its type was there
} PqPage;

static void parse_page_sub(Tc *t, PqPage *pg, int kind) {
    int id = 0, ft;
    unsigned seen = 0;
    while ((ft = tc_field(t, &id)) != TC_STOP) {
        int key = kind << 16 | (id & 0xffff);
        switch (key) {
        case 5 << 16 | 1:
        case 7 << 16 | 1:
        case 8 << 16 | 1: pg->num_values = tc_range(t, ft, 0, INT32_MAX, "a negative value count"), seen |= 1; break;
        case 5 << 16 | 2:
        case 7 << 16 | 2:
        case 8 << 16 | 4: pg->enc = (int)tc_range(t, ft, 0, INT16_MAX, "an unknown encoding"), seen |= 2; break;
        case 5 << 16 | 3: pg->def_enc = (int)tc_range(t, ft, 0, INT16_MAX, "an unknown encoding"); break;
        case 5 << 16 | 4: pg->rep_enc = (int)tc_range(t, ft, 0, INT16_MAX, "an unknown encoding"); break;
        case 8 << 16 | 5: pg->def_len = tc_range(t, ft, 0, INT32_MAX, "a negative level length"), seen |= 4; break;
        case 8 << 16 | 6: pg->rep_len = tc_range(t, ft, 0, INT32_MAX, "a negative level length"), seen |= 8; break;
        case 8 << 16 | 7: pg->compressed = tc_bool(t, ft); break;
        default: tc_skip(t, ft, 0);
        }
    }
    if ((seen & 3) != 3 || (kind == 8 && seen != 15)) tc_fail(t, "a page header without its value count, encoding or level lengths");
    pg->has_header = 1;
}

static void parse_page(Tc *t, PqPage *pg) {
    memset(pg, 0, sizeof *pg);
    pg->compressed = 1;
    pg->def_enc = pg->rep_enc = ENC_RLE;
    int id = 0, ft;
    unsigned seen = 0;
    while ((ft = tc_field(t, &id)) != TC_STOP) {
        switch (id) {
        case 1: pg->type = (int)tc_range(t, ft, 0, INT32_MAX, "an unknown page type"), seen |= 1; break;
        case 2: pg->usize = tc_range(t, ft, 0, INT32_MAX, "a negative page size"), seen |= 2; break;
        case 3: pg->csize = tc_range(t, ft, 0, INT32_MAX, "a negative page size"), seen |= 4; break;
        case 5:
        case 7:
        case 8:
            // the header of the page's own type; another one is skipped
            if (ft != TC_STRUCT) tc_fail(t, NULL);
            else if ((id == 5 && pg->type == PAGE_DATA) || (id == 7 && pg->type == PAGE_DICT) || (id == 8 && pg->type == PAGE_DATA_V2))
                parse_page_sub(t, pg, id);
            else tc_skip(t, ft, 0);
            break;
        default: tc_skip(t, ft, 0);
        }
    }
    if (seen != 7) tc_fail(t, "a page header without its type or sizes");
}

static int col_encoding_ok(const PqCol *c, int enc) {
    int ints = c->f->phys != PQ_BYTE_ARRAY;
    return enc == ENC_PLAIN || enc == ENC_PLAIN_DICT || enc == ENC_RLE_DICT || (ints && enc == ENC_DELTA) ||
           (!ints && (enc == ENC_DELTA_LENGTH || enc == ENC_DELTA_BYTES));
}

static int col_bad_encoding(PqCol *c, int enc) {
    if (enc > ENC_ALP) return col_fail(c, "uses an unknown encoding (%d), which fsdpc does not read", enc);
    return col_fail(c, "uses encoding %s, which fsdpc does not read", pq_encoding_name(enc));
}

static int col_dictionary(PqCol *c, const PqPage *pg, const uint8_t *body) {
    if (c->has_dict || c->seen_data) return col_corrupt(c, "a dictionary page after the first page of its column chunk");
    if (!pg->has_header) return col_corrupt(c, "a dictionary page without its header");
    if (pg->enc != ENC_PLAIN && pg->enc != ENC_PLAIN_DICT) return col_bad_encoding(c, pg->enc);
    const uint8_t *d;
    if (col_inflate(c, body, pg->csize, pg->usize, &c->dictbuf, &d) < 0) return -1;
    size_t len = pg->usize, n = pg->num_values;
    const PqField *f = c->f;
    size_t w = f->phys == PQ_INT32 ? 4 : f->phys == PQ_INT64 ? 8 : 4;  // BYTE_ARRAY: a length at least
    if (n > len / w) return col_corrupt(c, "the dictionary page has %zu bytes, too few for its %zu values", len, n);
    if (f->phys == PQ_BYTE_ARRAY) {
        buf_fit(c->dict_strs, &c->dict_cap, n);
        const uint8_t *p = d, *end = d + len;
        for (size_t i = 0; i < n; i++) {
            uint32_t l = (size_t)(end - p) >= 4 ? le32(p) : UINT32_MAX;
            if ((size_t)(end - p) < 4 || l > (size_t)(end - p) - 4)
                return col_corrupt(c, "dictionary value %zu runs past the end of its page", i);
            c->dict_strs[i] = (PqStr){p + 4, l};
            p += 4 + (size_t)l;
        }
    } else {
        size_t pad = 1;
        while (pad < n) pad *= 2;
        buf_fit(c->dict_ints, &c->dict_cap, pad);
        memset(c->dict_ints + n, 0, (pad - n) * sizeof *c->dict_ints);
        c->dict_pad = pad;
        for (size_t i = 0; i < n; i++) {
            if (w == 8) memcpy(&c->dict_ints[i], d + 8 * i, 8);
            else if (f->is_unsigned) c->dict_ints[i] = le32(d + 4 * i);
            else c->dict_ints[i] = (int32_t)le32(d + 4 * i);
        }
    }
    c->dict_n = (uint32_t)n;
    c->has_dict = 1;
    return 0;
}

static unsigned bit_width(unsigned v) {
    unsigned n = 0;
    while (v >> n) n++;
    return n;
}

static int col_data_page(PqCol *c, const PqPage *pg, const uint8_t *body) {
    const PqField *f = c->f;
    if (!pg->has_header) return col_corrupt(c, "a data page without its header");
    if (!col_encoding_ok(c, pg->enc)) return col_bad_encoding(c, pg->enc);
    const uint8_t *data, *p;
    size_t len;
    if (pg->type == PAGE_DATA) {
        if (f->max_rep && pg->rep_enc != ENC_RLE) return col_fail(c, "uses %s repetition levels, which fsdpc does not read", pq_encoding_name(pg->rep_enc));
        if (f->max_def && pg->def_enc != ENC_RLE) return col_fail(c, "uses %s definition levels, which fsdpc does not read", pq_encoding_name(pg->def_enc));
        if (col_inflate(c, body, pg->csize, pg->usize, &c->pagebuf, &data) < 0) return -1;
        p = data;
        len = pg->usize;
        for (int k = 0; k < 2; k++) {  // repetition levels, then definition levels, each after its length
            unsigned max = k ? f->max_def : f->max_rep;
            if (!max) continue;
            uint32_t l = len - (size_t)(p - data) >= 4 ? le32(p) : UINT32_MAX;
            if (len - (size_t)(p - data) < 4 || l > len - (size_t)(p - data) - 4)
                return col_corrupt(c, "its %s levels run past the end of the page", k ? "definition" : "repetition");
            rle_init(k ? &c->def_dec : &c->rep_dec, p + 4, l, bit_width(max));
            p += 4 + (size_t)l;
        }
        c->vp = p;
        c->vend = data + len;
    } else {
        // v2: the levels stay uncompressed before the (maybe compressed) values
        int64_t lv = pg->rep_len + pg->def_len;
        if (lv > pg->csize || lv > pg->usize) return col_corrupt(c, "its levels are longer than the page");
        rle_init(&c->rep_dec, body, pg->rep_len, bit_width(f->max_rep));
        rle_init(&c->def_dec, body + pg->rep_len, pg->def_len, bit_width(f->max_def));
        const uint8_t *src = body + lv;
        size_t n = pg->csize - lv, size = pg->usize - lv;
        if (!pg->compressed && size != n) return col_corrupt(c, "the page says %zu bytes uncompressed but stores %zu, uncompressed", size, n);
        if (!pg->compressed) data = src;
        else if (col_inflate(c, src, n, size, &c->pagebuf, &data) < 0) return -1;
        c->vp = data;
        c->vend = data + size;
    }
    c->venc = pg->enc;
    c->vready = 0;
    c->levels_left = pg->num_values;
    return 0;
}

// Hands the mapped file pages before `upto` back, so that resident memory stays near
// PQ_RELEASE rather than the chunk (whatever is touched again faults back in from the page cache).
static void col_release(PqCol *c, const uint8_t *upto) {
    if (!c->map) return;
    long pg = sysconf(_SC_PAGESIZE);
    size_t done = (size_t)(upto - (const uint8_t *)c->map);
    done -= done % (size_t)(pg > 0 ? pg : 4096);
    if (done < c->released + PQ_RELEASE) return;
    madvise((uint8_t *)c->map + c->released, done - c->released, MADV_DONTNEED);
    c->released = done;
}

// Reads page headers up to the next data page with values: 1, 0 at the end of the chunk, -1.
static int col_next_page(PqCol *c) {
    col_release(c, c->cur);
    while (c->cur < c->end) {
        Tc t = {.p = c->cur, .end = c->end};
        PqPage pg;
        c->page++;
        parse_page(&t, &pg);
        if (t.bad) return col_corrupt(c, "corrupt page header (%s)", t.why ? t.why : "malformed Thrift data");
        if (pg.csize > t.end - t.p) return col_corrupt(c, "the page's %lld bytes run past the end of its column chunk", (long long)pg.csize);
        const uint8_t *body = t.p;
        c->cur = body + pg.csize;
        if (pg.type == PAGE_DICT) {
            if (col_dictionary(c, &pg, body) < 0) return -1;
        } else if (pg.type == PAGE_DATA || pg.type == PAGE_DATA_V2) {
            c->seen_data = 1;
            if (col_data_page(c, &pg, body) < 0) return -1;
            if (c->levels_left) return 1;
        }  // index pages and unknown kinds are skipped
    }
    return 0;
}

// Fills the levels window from the current page, moving on to the next data page where it is
// used up: 1, 0 at the end of the column chunk, -1 on an error.
static int col_refill(PqCol *c) {
    const PqField *f = c->f;
    while (!c->levels_left) {
        int rc = col_next_page(c);
        if (rc <= 0) return rc;
    }
    uint32_t n = c->levels_left < PQ_WINDOW ? (uint32_t)c->levels_left : PQ_WINDOW;
    if (!f->max_rep) memset(c->rep, 0, n);
    else if (rle_levels(&c->rep_dec, c->rep, n) < 0) return col_corrupt(c, "its repetition levels end early");
    if (!f->max_def) memset(c->def, 0, n);
    else if (rle_levels(&c->def_dec, c->def, n) < 0) return col_corrupt(c, "its definition levels end early");
    uint8_t mr = 0, md = 0;
    for (uint32_t i = 0; i < n; i++) {
        mr = c->rep[i] > mr ? c->rep[i] : mr;
        md = c->def[i] > md ? c->def[i] : md;
    }
    if (mr > f->max_rep || md > f->max_def) return col_corrupt(c, "a level above the column's maximum");
    c->levels_left -= n;
    c->pos = 0;
    c->count = n;
    return 1;
}

static int col_values_init(PqCol *c) {
    c->vready = 1;
    switch (c->venc) {
    case ENC_PLAIN_DICT:
    case ENC_RLE_DICT:
        if (!c->has_dict) return col_corrupt(c, "dictionary-encoded values without a dictionary page");
        if (c->vp >= c->vend || *c->vp > 32) return col_corrupt(c, "no valid bit width for its dictionary indices");
        rle_init(&c->idx, c->vp + 1, (size_t)(c->vend - c->vp - 1), *c->vp);
        c->ipos = c->ilen = 0;
        return 0;
    case ENC_DELTA:
        if (delta_init(&c->d1, c->vp, c->vend) < 0) return col_corrupt(c, "a malformed DELTA_BINARY_PACKED header");
        return 0;
    case ENC_DELTA_LENGTH:
        if (delta_init(&c->d1, c->vp, c->vend) < 0 || !(c->vp = delta_end(&c->d1)))
            return col_corrupt(c, "malformed DELTA_LENGTH_BYTE_ARRAY lengths");
        return 0;
    case ENC_DELTA_BYTES: {
        const uint8_t *q;
        if (delta_init(&c->d1, c->vp, c->vend) < 0 || !(q = delta_end(&c->d1)) || delta_init(&c->d2, q, c->vend) < 0 ||
            !(c->vp = delta_end(&c->d2)))
            return col_corrupt(c, "malformed DELTA_BYTE_ARRAY lengths");
        c->prev_len = 0;
        return 0;
    }
    }
    return 0;  // PLAIN
}

// The next stretch of a bit-packed run of dictionary indices into c->ibuf, each checked.
static int col_unpack_indices(PqCol *c) {
    c->ilen = rle_unpack(&c->idx, c->ibuf);
    c->ipos = 0;
    uint32_t max = 0;
    for (size_t i = 0; i < c->ilen; i++) max = c->ibuf[i] > max ? c->ibuf[i] : max;
    if (c->ilen && max >= c->dict_n) return col_corrupt(c, "dictionary index %u is past its %u values", max, c->dict_n);
    return 0;
}

static int col_truncated(PqCol *c) { return col_corrupt(c, "the page holds fewer values than its levels say"); }

// n integer values of the page into dst
static int col_ints(PqCol *c, int64_t *dst, size_t n) {
    if (!n) return 0;
    if (!c->vready && col_values_init(c) < 0) return -1;
    const PqField *f = c->f;
    const uint8_t *p = c->vp;
    switch (c->venc) {
    case ENC_PLAIN:
        if (f->phys == PQ_INT64) {
            if ((size_t)(c->vend - p) / 8 < n) return col_truncated(c);
            memcpy(dst, p, n * 8);
            c->vp += n * 8;
            return 0;
        }
        if ((size_t)(c->vend - p) / 4 < n) return col_truncated(c);
        if (f->is_unsigned)
            for (size_t i = 0; i < n; i++) {
                uint32_t v;
                memcpy(&v, p + 4 * i, 4);
                dst[i] = v;
            }
        else
            for (size_t i = 0; i < n; i++) {
                int32_t v;
                memcpy(&v, p + 4 * i, 4);
                dst[i] = v;
            }
        c->vp += n * 4;
        return 0;
    case ENC_DELTA:
        if (delta_get(&c->d1, dst, n, f->phys == PQ_INT32) < 0) return col_truncated(c);
        if (f->is_unsigned)
            for (size_t i = 0; i < n; i++) dst[i] = (uint32_t)dst[i];
        return 0;
    }
    // dictionary indices: runs fill; bit-packed groups gather straight from the packed bytes where
    // the padded dictionary covers every index of their width, the rest through c->ibuf
    PqRle *d = &c->idx;
    const int64_t *dict = c->dict_ints;
    while (n) {
        if (c->ipos == c->ilen) {
            if (!d->left && rle_run(d) < 0) return col_truncated(c);
            if (d->repeat) {
                size_t m = n < d->left ? n : (size_t)d->left;
                if (d->value >= c->dict_n) return col_corrupt(c, "dictionary index %u is past its %u values", d->value, c->dict_n);
                int64_t v = dict[d->value];
                for (size_t i = 0; i < m; i++) dst[i] = v;
                d->left -= m;
                dst += m;
                n -= m;
                continue;
            }
            size_t groups = (n < d->left ? n : (size_t)d->left) / 8;
            const uint8_t *p = d->bp + (d->bit >> 3);
            if (groups && d->bw && !(d->bit & 7) && (1ull << d->bw) <= c->dict_pad && groups * d->bw + 8 <= (size_t)(d->end - p)) {
                uint32_t max = gather_w[d->bw](p, dict, dst, groups);
                if (max >= c->dict_n) return col_corrupt(c, "dictionary index %u is past its %u values", max, c->dict_n);
                d->bit += (uint64_t)groups * 8 * d->bw;
                d->left -= groups * 8;
                dst += groups * 8;
                n -= groups * 8;
                continue;
            }
            if (col_unpack_indices(c) < 0) return -1;
        }
        size_t m = n < c->ilen - c->ipos ? n : c->ilen - c->ipos;
        const uint32_t *k = c->ibuf + c->ipos;
        for (size_t i = 0; i < m; i++) dst[i] = dict[k[i]];
        c->ipos += m;
        dst += m;
        n -= m;
    }
    return 0;
}

// the page's next string into c->str / c->str_len
static int col_string(PqCol *c) {
    if (!c->vready && col_values_init(c) < 0) return -1;
    size_t avail = (size_t)(c->vend - c->vp);
    int64_t len, pre;
    switch (c->venc) {
    case ENC_PLAIN: {
        uint32_t l = avail >= 4 ? le32(c->vp) : 0;
        if (avail < 4 || l > avail - 4) return col_truncated(c);
        c->str = c->vp + 4;
        c->str_len = l;
        c->vp += 4 + (size_t)l;
        return 0;
    }
    case ENC_DELTA_LENGTH:
        if (delta_get(&c->d1, &len, 1, 1) < 0 || len < 0 || (uint64_t)len > avail) return col_truncated(c);
        c->str = c->vp;
        c->str_len = (size_t)len;
        c->vp += len;
        return 0;
    case ENC_DELTA_BYTES: {
        if (delta_get(&c->d1, &pre, 1, 1) < 0 || delta_get(&c->d2, &len, 1, 1) < 0 || len < 0 || (uint64_t)len > avail)
            return col_truncated(c);
        if (pre < 0 || (uint64_t)pre > c->prev_len) return col_corrupt(c, "a DELTA_BYTE_ARRAY prefix longer than the value before");
        PqBuf *prev = &c->sbuf[c->scur], *next = &c->sbuf[c->scur ^ 1];
        uint8_t *s = pq_scratch(next, (size_t)pre + (size_t)len);
        if (pre) memcpy(s, prev->p, (size_t)pre);
        if (len) memcpy(s + pre, c->vp, (size_t)len);
        c->vp += len;
        c->scur ^= 1;
        c->prev_len = (size_t)(pre + len);
        c->str = s;
        c->str_len = c->prev_len;
        return 0;
    }
    }
    uint32_t k;
    if (c->ipos < c->ilen) {
        k = c->ibuf[c->ipos++];
    } else {
        if (!c->idx.left && rle_run(&c->idx) < 0) return col_truncated(c);
        if (!c->idx.repeat) {
            if (col_unpack_indices(c) < 0) return -1;
            k = c->ibuf[c->ipos++];
        } else {
            k = c->idx.value;
            c->idx.left--;
        }
    }
    if (k >= c->dict_n) return col_corrupt(c, "dictionary index %u is past its %u values", k, c->dict_n);
    c->str = c->dict_strs[k].p;
    c->str_len = c->dict_strs[k].len;
    return 0;
}

// The items at levels [a, b) of the window, all of one list, appended to the row.
static int col_items(PqCol *c, uint32_t a, uint32_t b) {
    const PqField *f = c->f;
    size_t n = b - a, present = n;
    const uint8_t *def = c->def + a;
    uint8_t maxd = f->max_def, drep = f->d_rep, other = 0;
    for (size_t i = 0; i < n; i++) other |= def[i] ^ maxd;  // bytewise: 32 levels an instruction
    if (other) {  // null items (or damage): count the values
        int below = 0;
        present = 0;
        for (size_t i = 0; i < n; i++) {
            present += def[i] == maxd;
            below |= def[i] < drep;
        }
        if (below) return col_corrupt(c, "a null or empty list continues with items");
    }
    if (c->row_len + n > PQ_MAX_ITEMS) return col_corrupt(c, "a list of more than %u items", PQ_MAX_ITEMS);
    buf_fit(c->row, &c->row_cap, c->row_len + n);
    int64_t *dst = c->row + c->row_len;
    if (present == n) {
        if (col_ints(c, dst, n) < 0) return -1;
    } else {
        // values land at the end of the span, then spread forward with zeros at the null items
        size_t gap = n - present;
        if (col_ints(c, dst + gap, present) < 0) return -1;
        for (size_t i = 0, j = gap; i < n; i++) dst[i] = def[i] == maxd ? dst[j++] : 0;
        c->row_has_null = 1;
    }
    c->row_len += n;
    return 0;
}

// The next row of an int list column: 1, 0 at the end of the chunk, -1.
static int col_next_list(PqCol *c) {
    c->row_len = 0;
    c->row_null = c->row_has_null = 0;
    if (c->pos == c->count) {
        int rc = col_refill(c);
        if (rc <= 0) return rc;
    }
    if (c->rep[c->pos]) return col_corrupt(c, "a row that does not start at repetition level 0");
    uint8_t d = c->def[c->pos];
    if (d < c->f->d_rep) {  // a null or an empty list: one level, no items
        c->row_null = d < c->f->d_list;
        c->pos++;
        return 1;
    }
    uint32_t from = c->pos + 1;
    for (;;) {
        const uint8_t *q = memchr(c->rep + from, 0, c->count - from);
        uint32_t end = q ? (uint32_t)(q - c->rep) : c->count;
        if (col_items(c, c->pos, end) < 0) return -1;
        c->pos = end;
        if (q) return 1;
        int rc = col_refill(c);  // the row may go on in the next window
        if (rc < 0) return -1;
        if (!rc || !c->rep[0]) return 1;
        from = 0;
    }
}

// The next row of a string or integer column: 1, 0 at the end of the chunk, -1.
static int col_next_scalar(PqCol *c) {
    if (c->pos == c->count) {
        int rc = col_refill(c);
        if (rc <= 0) return rc;
    }
    c->row_null = c->def[c->pos++] < c->f->max_def;
    if (c->row_null) return 1;
    if (c->f->kind == TABLE_STRING) return col_string(c) < 0 ? -1 : 1;
    buf_fit(c->row, &c->row_cap, 1);
    return col_ints(c, c->row, 1) < 0 ? -1 : 1;
}

// One element of a struct field's row: its definition level and, where present, its string.
static int col_field_elem(PqCol *c, uint8_t d) {
    const PqField *f = c->f;
    if (d < f->d_rep) return col_corrupt(c, "a null or empty list continues with items");
    if (c->e_len == PQ_MAX_ELEMS) return col_corrupt(c, "a list of more than %u structs", PQ_MAX_ELEMS);
    if (c->e_len == c->e_cap) {
        size_t cap = c->e_cap;
        buf_fit(c->edef, &cap, c->e_len + 1);
        cap = c->e_cap;
        buf_fit(c->espan, &cap, c->e_len + 1);
        c->e_cap = cap;
    }
    PqSpan sp = {NULL, 0, 0};
    if (d == f->max_def) {
        if (col_string(c) < 0) return -1;
        sp.len = c->str_len;
        if (c->venc == ENC_PLAIN_DICT || c->venc == ENC_RLE_DICT) {
            sp.p = c->str;
        } else if (sp.len) {
            // a DELTA_BYTE_ARRAY prefix repeats bytes at no cost in the file: the copies are capped
            if (sp.len > PQ_MAX_TEXT / (unsigned)c->r->nsub_text - c->arena_len)
                return col_corrupt(c, "a row's strings add up to more than %u bytes", PQ_MAX_TEXT / (unsigned)c->r->nsub_text);
            if (c->arena_len + sp.len > c->arena.cap) {
                size_t cap = c->arena.cap ? c->arena.cap : 4096;
                while (cap < c->arena_len + sp.len) cap *= 2;
                uint8_t *q = mallocCheck(cap);
                if (c->arena_len) memcpy(q, c->arena.p, c->arena_len);
                free(c->arena.p);
                c->arena = (PqBuf){q, cap};
            }
            memcpy(c->arena.p + c->arena_len, c->str, sp.len);
            sp.off = c->arena_len;
            c->arena_len += sp.len;
        }
    }
    c->edef[c->e_len] = d;
    c->espan[c->e_len++] = sp;
    return 0;
}

// The next row of a chosen field of a struct list, element by element: 1, 0 at the end of the
// chunk, -1.
static int col_next_field(PqCol *c) {
    c->e_len = c->arena_len = 0;
    c->row_null = 0;
    if (c->pos == c->count) {
        int rc = col_refill(c);
        if (rc <= 0) return rc;
    }
    if (c->rep[c->pos]) return col_corrupt(c, "a row that does not start at repetition level 0");
    uint8_t d = c->def[c->pos];
    if (d < c->f->d_rep) {  // a null or an empty list: one level, no elements
        c->row_null = d < c->f->d_list;
        c->pos++;
        return 1;
    }
    do {
        if (col_field_elem(c, c->def[c->pos++]) < 0) return -1;
        if (c->pos == c->count) {  // the row may go on in the next window
            int rc = col_refill(c);
            if (rc < 0) return -1;
            if (!rc) break;
        }
    } while (c->rep[c->pos]);
    return 1;
}

static int col_disagree(PqCol *c, int j) {
    c->r->failed = 1;
    return pq_fail(c->r, "corrupt file: column '%s', row group %d: its fields '%s' and '%s' disagree on a row's elements", c->name,
                   c->sub[0].rg + 1, c->sub[0].name, c->sub[j].name);
}

// The next row of a struct list: each chosen field's row, checked to hold the same elements, into
// c->items. 1, 0 at the end of the chunk, -1.
static int col_next_structs(PqCol *c) {
    int rc0 = 0;
    for (int j = 0; j < c->nsub; j++) {
        int rc = col_next_field(&c->sub[j]);
        if (rc < 0) return -1;
        if (!j) rc0 = rc;
        else if (rc != rc0) return col_disagree(c, j);
    }
    if (!rc0) return 0;
    const PqCol *a = &c->sub[0];
    const uint8_t de = c->f->d_elem;
    for (int j = 1; j < c->nsub; j++)
        if (c->sub[j].row_null != a->row_null || c->sub[j].e_len != a->e_len) return col_disagree(c, j);
    c->row_null = a->row_null;
    c->row_len = a->e_len;
    size_t n = a->e_len * (size_t)c->nsub;
    buf_fit(c->items, &c->items_cap, n);
    TableStr *out = c->items;
    for (size_t e = 0; e < a->e_len; e++)
        for (int j = 0; j < c->nsub; j++, out++) {
            const PqCol *b = &c->sub[j];
            const uint8_t d = b->edef[e];
            if ((d < de) != (a->edef[e] < de)) return col_disagree(c, j);  // a null struct is null in every field
            if (d < b->f->max_def) {
                *out = (TableStr){NULL, 0, 1};
                continue;
            }
            const PqSpan *sp = &b->espan[e];
            const uint8_t *p = sp->p ? sp->p : sp->len ? b->arena.p + sp->off : (const uint8_t *)"";
            *out = (TableStr){(const char *)p, sp->len, 0};
        }
    return 1;
}

static void col_unmap(PqCol *c) {
    if (c->map) path_unmap(c->map, c->map_len);
    c->map = NULL;
    c->open = 0;
}

static int col_open(PqCol *c, size_t rg) {
    PqReader *r = c->r;
    const PqChunk *m = &r->ft.chunks[r->ft.rgs[rg].first + c->f->leaf];
    int64_t start = m->data_off;
    if (m->dict_off >= 4 && m->dict_off < start) start = m->dict_off;
    size_t len = (size_t)m->size;
    c->rg = (int)rg;
    c->page = 0;
    c->codec = m->codec;
    c->has_dict = c->seen_data = 0;
    c->levels_left = 0;
    c->pos = c->count = 0;
    const uint8_t *base;
    if (r->mem) {
        base = r->mem + start;
    } else {
        long pg = sysconf(_SC_PAGESIZE);
        int64_t a = start - start % (pg > 0 ? pg : 4096);
        c->map_len = len + (size_t)(start - a);
        c->map = len ? path_map_read(r->fd, c->map_len, a, r->path) : NULL;
        c->released = 0;
        if (c->map == MAP_FAILED) {
            // where mmap is refused: read it
            c->map = NULL;
            uint8_t *b = pq_scratch(&c->copy, len);
            if (pq_pread(r->fd, b, len, (uint64_t)start) < 0)
                return col_corrupt(c, "cannot read the column chunk: %s", errno ? strerror(errno) : "the file got shorter");
            base = b;
        } else {
            base = c->map ? (const uint8_t *)c->map + (start - a) : NULL;
        }
    }
    c->cur = base;
    c->end = base ? base + len : NULL;
    c->open = 1;
    return 0;
}

// At the end of a row group: the chunk must hold no further rows.
static int col_finish(PqCol *c) {
    if (!c->open) return 0;
    int rc = c->pos < c->count ? 1 : col_refill(c);
    if (rc > 0) return col_corrupt(c, "the column chunk holds more rows than its row group's %lld",
                                   (long long)c->r->ft.rgs[c->rg].rows);
    col_unmap(c);
    return rc;
}

// A selected column's chunks of row group rg: its own, or those of its chosen fields.
static int sel_open(PqCol *c, size_t rg) {
    if (!c->nsub) return col_open(c, rg);
    for (int j = 0; j < c->nsub; j++)
        if (col_open(&c->sub[j], rg) < 0) return -1;
    return 0;
}

static int sel_finish(PqCol *c) {
    if (!c->nsub) return col_finish(c);
    for (int j = 0; j < c->nsub; j++)
        if (col_finish(&c->sub[j]) < 0) return -1;
    return 0;
}

static int pq_next(TableReader *base, TableValue *out, char *err, size_t errlen) {
    PqReader *r = (PqReader *)base;
    r->err = err;
    r->errlen = errlen;
    if (r->failed) return pq_fail(r, "reading stopped at an earlier error");
    if (!r->nsel) return pq_fail(r, "no columns were selected");
    while (!r->rg_left) {
        if (r->done) return 0;
        for (int i = 0; i < r->nsel; i++)
            if (sel_finish(&r->sel[i]) < 0) return -1;
        if (r->rg == r->ft.nrg) {
            r->done = 1;
            return 0;
        }
        r->rg_left = r->ft.rgs[r->rg++].rows;
        for (int i = 0; r->rg_left && i < r->nsel; i++)
            if (sel_open(&r->sel[i], r->rg - 1) < 0) return -1;
    }
    for (int i = 0; i < r->nsel; i++) {
        PqCol *c = &r->sel[i];
        int rc = c->f->kind == TABLE_INT_LIST ? col_next_list(c) : c->f->kind == TABLE_STRUCT_LIST ? col_next_structs(c) : col_next_scalar(c);
        if (rc < 0) return -1;
        if (!rc) return col_corrupt(c, "the column chunk holds fewer rows than its row group's %lld", (long long)r->ft.rgs[c->rg].rows);
        TableValue *v = &out[i];
        memset(v, 0, sizeof *v);
        v->is_null = c->row_null;
        if (c->row_null) continue;
        if (c->f->kind == TABLE_STRING) {
            v->str = c->str ? (const char *)c->str : "";
            v->len = c->str_len;
        } else if (c->f->kind == TABLE_STRUCT_LIST) {
            v->items = c->items;
            v->len = c->row_len;
        } else {
            v->ints = c->row;
            v->len = c->f->kind == TABLE_INT ? 1 : c->row_len;
            v->has_null_item = c->row_has_null;
        }
    }
    r->rg_left--;
    return 1;
}

static void col_free(PqCol *c) {
    for (int j = 0; j < c->nsub; j++) col_free(&c->sub[j]);
    free(c->sub);
    free(c->items);
    free(c->edef);
    free(c->espan);
    free(c->arena.p);
    col_unmap(c);
    free(c->copy.p);
    free(c->dictbuf.p);
    free(c->dict_ints);
    free(c->dict_strs);
    free(c->pagebuf.p);
    free(c->sbuf[0].p);
    free(c->sbuf[1].p);
    free(c->rep);
    free(c->def);
    free(c->row);
    memset(c, 0, sizeof *c);
}

// The chunks of a column (or a struct list's field) fsdpc is asked to read: in the file, of its
// type, readable codecs.
static int pq_check_chunks(PqReader *r, const PqField *f, const char *name) {
    for (size_t g = 0; g < r->ft.nrg; g++) {
        const PqChunk *m = &r->ft.chunks[r->ft.rgs[g].first + f->leaf];
        if (m->encrypted) return pq_fail(r, "column '%s' is encrypted, which fsdpc does not read", name);
        if (m->external) return pq_fail(r, "column '%s' keeps its data in another file, which fsdpc does not read", name);
        if (m->codec > CODEC_LZ4_RAW) return pq_fail(r, "column '%s' uses an unknown codec (%d), which fsdpc does not read", name, m->codec);
        if (m->codec == CODEC_LZO || m->codec == CODEC_BROTLI)
            return pq_fail(r, "column '%s' uses codec %s, which fsdpc does not read", name, pq_codec_name(m->codec));
        if (m->bad_encoding >= 0 && m->bad_encoding <= ENC_ALP)
            return pq_fail(r, "column '%s' uses encoding %s, which fsdpc does not read", name, pq_encoding_name(m->bad_encoding));
        if (m->bad_encoding >= 0) return pq_fail(r, "column '%s' uses an unknown encoding (%d), which fsdpc does not read", name, m->bad_encoding);
        if (m->type != f->phys) return pq_fail(r, "column '%s': row group %zu stores another physical type than the schema says", name, g + 1);
        int64_t start = m->data_off;
        if (m->dict_off >= 4 && m->dict_off < start) start = m->dict_off;
        if (start < 4 || (uint64_t)start > r->footer_start || (uint64_t)m->size > r->footer_start - (uint64_t)start)
            return pq_fail(r, "column '%s': row group %zu's column chunk (%lld bytes at %lld) lies outside the file's %llu data bytes "
                           "(truncated?)", name, g + 1, (long long)m->size, (long long)start, (unsigned long long)r->footer_start);
    }
    return 0;
}

static void col_init(PqCol *c, PqReader *r, const PqField *f, const char *name) {
    c->r = r;
    c->f = f;
    c->name = name;
    c->rep = mallocCheck(PQ_WINDOW);
    c->def = mallocCheck(PQ_WINDOW);
    c->row_cap = 4096;  // an empty list's ints point somewhere too
    c->row = mallocCheck(c->row_cap * sizeof *c->row);
}

static int pq_choose(TableReader *base, int col, const int *fields, int n, char *err, size_t errlen) {
    PqReader *r = (PqReader *)base;
    r->err = err;
    r->errlen = errlen;
    if (col < 0 || col >= r->base.ncols) return pq_fail(r, "there is no column %d (the file has %d)", col, r->base.ncols);
    if (table_check_fields(r->path, &r->cols[col], fields, n, err, errlen)) return -1;
    PqField *f = &r->fields[col];
    memcpy(f->chosen, fields, (size_t)n * sizeof *fields);
    f->nchosen = n;
    return 0;
}

static int pq_select(TableReader *base, const int *cols, int n, char *err, size_t errlen) {
    PqReader *r = (PqReader *)base;
    r->err = err;
    r->errlen = errlen;
    if (n < 1 || n > PQ_MAX_SELECT) return pq_fail(r, "%d columns selected; 1 to %d can be", n, PQ_MAX_SELECT);
    for (int i = 0; i < n; i++) {
        int k = cols[i];
        if (k < 0 || k >= r->base.ncols) return pq_fail(r, "there is no column %d (the file has %d)", k, r->base.ncols);
        const PqField *f = &r->fields[k];
        if (f->kind == TABLE_OTHER)
            return pq_fail(r, "column '%s' is %s; fsdpc reads strings, integers, lists of integers and lists of structs", r->cols[k].name,
                           r->cols[k].type);
        if (f->kind == TABLE_STRUCT_LIST && !f->nchosen)
            return pq_fail(r, "column '%s' (%s) is selected before its fields were chosen", r->cols[k].name, r->cols[k].type);
        if (f->kind != TABLE_STRUCT_LIST && pq_check_chunks(r, f, r->cols[k].name) < 0) return -1;
        for (int j = 0; j < f->nchosen && f->kind == TABLE_STRUCT_LIST; j++)
            if (pq_check_chunks(r, &f->sub[f->chosen[j]], f->sub[f->chosen[j]].name) < 0) return -1;
    }
    for (int i = 0; i < r->nsel; i++) col_free(&r->sel[i]);
    r->nsel = n;
    r->nsub_text = 1;
    for (int i = 0; i < n; i++) {
        PqCol *c = &r->sel[i];
        const PqField *f = &r->fields[cols[i]];
        col_init(c, r, f, r->cols[cols[i]].name);
        if (f->kind != TABLE_STRUCT_LIST) continue;
        c->nsub = f->nchosen;
        c->sub = callocCheck((size_t)c->nsub, sizeof *c->sub);
        for (int j = 0; j < c->nsub; j++) col_init(&c->sub[j], r, &f->sub[f->chosen[j]], f->sub[f->chosen[j]].name);
        r->nsub_text += c->nsub;
    }
    r->rg = 0;
    r->rg_left = 0;
    r->done = r->failed = 0;
    return 0;
}

static void pq_close(TableReader *base) {
    PqReader *r = (PqReader *)base;
    if (!r) return;
    for (int i = 0; i < r->nsel; i++) col_free(&r->sel[i]);
    if (r->fd >= 0) close(r->fd);
    if (r->zs_ready) inflateEnd(&r->zs);
    ZSTD_freeDCtx(r->zd);
    free(r->ft.elems);
    free(r->ft.chunks);
    free(r->ft.rgs);
    free(r->cols);
    for (int i = 0; r->fields && i < r->base.ncols; i++) {
        for (int j = 0; j < r->fields[i].nf; j++) free(r->fields[i].sub[j].name);
        free(r->fields[i].sub);
    }
    free(r->fields);
    free(r->path);
    free(r);
}

// ---- schema ----

static int pq_is_list(const PqElem *e) { return e->type < 0 && (e->converted == CONV_LIST || e->logical == LOG_LIST); }
static int pq_is_map(const PqElem *e) {
    return e->type < 0 && (e->converted == CONV_MAP || e->converted == CONV_MAP_KV || e->logical == LOG_MAP);
}

// The item of LIST-annotated group i (LogicalTypes.md's compatibility rules): its repeated child
// when that is a leaf (2-level) or a group of several fields (a struct), else the child's only
// field (3-level `list`/`element`, and legacy `array`/`item` groups); -1 for a malformed list.
static int pq_list_item(const PqElem *E, int i) {
    if (E[i].num_children != 1 || E[i + 1].repetition != PQ_REPEATED) return -1;
    return E[i + 1].type >= 0 || E[i + 1].num_children != 1 ? i + 1 : i + 2;
}

// A leaf's type as fsdpc names it ("string", "int8", "double", ...) and how it reads.
static TableKind pq_leaf(const PqElem *e, char *name, size_t len, int *is_unsigned) {
    int lg = e->logical, cv = e->converted, bits = 0, sign = 1;
    *is_unsigned = 0;
    if (lg == LOG_INTEGER) bits = e->int_bits, sign = e->int_signed;
    else if (!lg && cv >= CONV_UINT_8 && cv <= CONV_INT_64) bits = 8 << ((cv - CONV_UINT_8) % 4), sign = cv >= CONV_UINT_8 + 4;
    const char *s = NULL;
    if (e->type == PQ_BYTE_ARRAY) {
        if (lg == LOG_STRING || lg == LOG_ENUM || lg == LOG_JSON || (!lg && (cv == CONV_UTF8 || cv == CONV_ENUM || cv == CONV_JSON))) {
            snprintf(name, len, "%s", lg == LOG_ENUM || cv == CONV_ENUM ? "enum" : lg == LOG_JSON || cv == CONV_JSON ? "json" : "string");
            return TABLE_STRING;
        }
        if (!lg && cv < 0) {
            snprintf(name, len, "binary");
            return TABLE_STRING;
        }
    } else if (e->type == PQ_INT32 || e->type == PQ_INT64) {
        int width = e->type == PQ_INT32 ? 32 : 64;
        if (!lg && cv < 0) bits = width;
        if (bits == 8 || bits == 16 || bits == 32 || bits == 64) {
            if (bits > width) {
                snprintf(name, len, "int%d stored as int%d", bits, width);
                return TABLE_OTHER;
            }
            snprintf(name, len, "%sint%d", sign ? "" : "u", bits);
            *is_unsigned = !sign && width == 32;
            return TABLE_INT;
        }
    }
    switch (lg) {
    case 0: break;
    case 5: s = "decimal"; break;
    case 6: s = "date32"; break;
    case 7: s = "time"; break;
    case 8: s = "timestamp"; break;
    case 11: s = "null"; break;
    case 13: s = "bson"; break;
    case 14: s = "uuid"; break;
    case 15: s = "float16"; break;
    case 16: s = "variant"; break;
    case 17: s = "geometry"; break;
    case 18: s = "geography"; break;
    case LOG_INTEGER: s = "an integer of a bad width"; break;
    default: s = "an unknown logical type";
    }
    if (!s && cv >= 0) {
        switch (cv) {
        case 5: s = "decimal"; break;
        case 6: s = "date32"; break;
        case 7:
        case 8: s = "time"; break;
        case 9:
        case 10: s = "timestamp"; break;
        case 20: s = "bson"; break;
        case 21: s = "interval"; break;
        default: s = "an unknown converted type";
        }
    }
    if (!s) {
        static const char *phys[] = {"boolean", "int32", "int64", "int96", "float", "double", "binary", "fixed_size_binary"};
        s = phys[e->type];
    }
    if (e->type == PQ_FIXED && !strcmp(s, "fixed_size_binary")) snprintf(name, len, "fixed_size_binary[%d]", e->type_length);
    else snprintf(name, len, "%s", s);
    return TABLE_OTHER;
}

// The type of element i as fsdpc names it ("list<int32>", "struct", "map", ...); as_item: the
// item of a list, whose own repetition is the list's.
static void pq_type_name(const PqElem *E, int i, int as_item, char *buf, size_t len) {
    const PqElem *e = &E[i];
    char inner[64];
    int is_unsigned, item;
    if (e->type >= 0) pq_leaf(e, inner, sizeof inner, &is_unsigned);
    else if (pq_is_map(e)) snprintf(inner, sizeof inner, "map");
    else if (pq_is_list(e) && (item = pq_list_item(E, i)) >= 0) {
        char el[64];
        pq_type_name(E, item, 1, el, sizeof el);
        snprintf(inner, sizeof inner, "list<%.55s>", el);
    } else snprintf(inner, sizeof inner, "%s", pq_is_list(e) ? "list (malformed)" : "struct");
    if (e->repetition == PQ_REPEATED && !as_item) snprintf(buf, len, "list<%.55s>", inner);
    else snprintf(buf, len, "%s", inner);
}

// Group g, the item of a list column, as a struct of leaves: its fields, the string ones readable.
static void pq_struct_list(const PqElem *E, int g, TableColumn *col, PqField *fd) {
    const PqElem *e = &E[g];
    if (pq_is_list(e) || pq_is_map(e) || e->num_children < 1 || e->num_children > TABLE_MAX_FIELDS || e->rep != 1) return;
    int strings = 0, k = g + 1, is_unsigned;
    char tmp[64];
    fd->sub = callocCheck((size_t)e->num_children, sizeof *fd->sub);
    fd->nf = col->nfields = e->num_children;
    for (int j = 0; j < e->num_children; j++) {
        const PqElem *c = &E[k];
        TableField *tf = &col->fields[j];
        PqField *sf = &fd->sub[j];
        snprintf(tf->name, sizeof tf->name, "%.*s", (int)(c->name_len < 63 ? c->name_len : 63), c->name ? (const char *)c->name : "");
        tf->is_string = c->type >= 0 && c->repetition != PQ_REPEATED && pq_leaf(c, tmp, sizeof tmp, &is_unsigned) == TABLE_STRING;
        strings += tf->is_string;
        sf->kind = tf->is_string ? TABLE_STRING : TABLE_OTHER;
        sf->leaf = c->leaf;
        sf->phys = c->type;
        sf->max_def = (uint8_t)c->def;
        sf->max_rep = (uint8_t)c->rep;
        sf->d_list = fd->d_list, sf->d_rep = fd->d_rep, sf->d_elem = (uint8_t)e->def;
        size_t n = strlen(col->name) + strlen(tf->name) + 2;
        sf->name = mallocCheck(n);
        snprintf(sf->name, n, "%s.%s", col->name, tf->name);
        for (int todo = 1; todo > 0; todo--, k++) todo += E[k].type < 0 ? E[k].num_children : 0;  // its subtree
    }
    if (!strings) return;
    col->kind = fd->kind = TABLE_STRUCT_LIST;
    fd->d_elem = (uint8_t)e->def;
}

// Top-level field f (element index) as a column.
static void pq_field(const PqElem *E, int f, TableColumn *col, PqField *fd) {
    const PqElem *e = &E[f];
    snprintf(col->name, sizeof col->name, "%.*s", (int)(e->name_len < 127 ? e->name_len : 127), e->name ? (const char *)e->name : "");
    pq_type_name(E, f, 0, col->type, sizeof col->type);
    col->kind = fd->kind = TABLE_OTHER;
    int item = -1, is_unsigned;
    char tmp[64];
    if (e->type >= 0 && e->repetition != PQ_REPEATED) {
        col->kind = fd->kind = pq_leaf(e, tmp, sizeof tmp, &is_unsigned);
        item = f;
    } else if (e->type >= 0) {  // a bare repeated leaf: a list of required items
        item = f;
        fd->d_list = 0;
        fd->d_rep = (uint8_t)e->def;
    } else if (pq_is_list(e) && e->repetition != PQ_REPEATED && (item = pq_list_item(E, f)) >= 0) {
        fd->d_list = (uint8_t)e->def;
        fd->d_rep = (uint8_t)E[f + 1].def;
    } else if (e->repetition == PQ_REPEATED && !pq_is_list(e) && !pq_is_map(e)) {  // a bare repeated group: a list of required structs
        item = f;
        fd->d_list = 0;
        fd->d_rep = (uint8_t)e->def;
    }
    if (item >= 0 && E[item].type < 0) pq_struct_list(E, item, col, fd);
    if (item < 0 || E[item].type < 0) return;
    if (col->kind == TABLE_OTHER) {
        if (E[item].rep != 1 || pq_leaf(&E[item], tmp, sizeof tmp, &is_unsigned) != TABLE_INT) return;
        col->kind = fd->kind = TABLE_INT_LIST;
    }
    if (col->kind == TABLE_OTHER) return;
    fd->leaf = E[item].leaf;
    fd->phys = E[item].type;
    pq_leaf(&E[item], tmp, sizeof tmp, &fd->is_unsigned);
    fd->max_def = (uint8_t)E[item].def;
    fd->max_rep = (uint8_t)E[item].rep;
}

// Levels and leaves of the flattened schema tree, then its top-level fields as columns.
static int pq_schema(PqReader *r) {
    PqElem *E = r->ft.elems;
    int n = (int)r->ft.nelems;
    if (r->ft.nelems > INT32_MAX / 2 || n < 1 || E[0].type >= 0) return pq_fail(r, "corrupt footer: the schema has no root group");
    int stack[PQ_MAX_DEPTH], left[PQ_MAX_DEPTH], sp = 0, i = 1, nleaves = 0;
    stack[0] = 0;
    left[0] = E[0].num_children;
    E[0].def = E[0].rep = 0;
    E[0].leaf = -1;
    while (sp >= 0) {
        if (!left[sp]) {
            sp--;
            continue;
        }
        if (i >= n) return pq_fail(r, "corrupt footer: the schema has fewer elements than its groups' num_children say");
        left[sp]--;
        PqElem *e = &E[i], *p = &E[stack[sp]];
        e->def = p->def + (e->repetition != PQ_REQUIRED);
        e->rep = p->rep + (e->repetition == PQ_REPEATED);
        e->leaf = -1;
        if (e->type < 0) {
            if (sp + 1 >= PQ_MAX_DEPTH) return pq_fail(r, "the schema nests groups more than %d deep", PQ_MAX_DEPTH - 1);
            stack[++sp] = i;
            left[sp] = e->num_children;
        } else {
            e->leaf = nleaves++;
        }
        i++;
    }
    if (i != n) return pq_fail(r, "corrupt footer: the schema has %d elements beyond its root's fields", n - i);
    r->nleaves = nleaves;
    int nf = E[0].num_children;
    r->cols = callocCheck(nf ? nf : 1, sizeof *r->cols);
    r->fields = callocCheck(nf ? nf : 1, sizeof *r->fields);
    // the root's children: each next one after the previous one's subtree
    int f = 1;
    for (int k = 0; k < nf; k++) {
        pq_field(E, f, &r->cols[k], &r->fields[k]);
        for (int todo = 1; todo > 0; todo--, f++) todo += E[f].type < 0 ? E[f].num_children : 0;  // its subtree
    }
    r->base.ncols = nf;
    r->base.cols = r->cols;
    return 0;
}

static TableReader *pq_open(PqReader *r) {
    uint8_t head[4], tail[8];
    if (r->size < 12) {
        pq_fail(r, "not a Parquet file (%llu bytes, too short for one)", (unsigned long long)r->size);
        goto fail;
    }
    if (r->mem) {
        memcpy(head, r->mem, 4);
        memcpy(tail, r->mem + r->size - 8, 8);
    } else if (pq_pread(r->fd, head, 4, 0) < 0 || pq_pread(r->fd, tail, 8, r->size - 8) < 0) {
        pq_fail(r, "cannot read: %s", errno ? strerror(errno) : "the file got shorter");
        goto fail;
    }
    if (memcmp(head, "PAR1", 4)) {
        pq_fail(r, "not a Parquet file (it does not start with PAR1)");
        goto fail;
    }
    if (!memcmp(tail + 4, "PARE", 4)) {
        pq_fail(r, "the Parquet footer is encrypted, which fsdpc does not read");
        goto fail;
    }
    if (memcmp(tail + 4, "PAR1", 4)) {
        pq_fail(r, "truncated Parquet file (it does not end with PAR1)");
        goto fail;
    }
    uint64_t flen = le32(tail);
    if (flen > r->size - 12) {
        pq_fail(r, "truncated or corrupt Parquet file: the footer length (%llu bytes) exceeds the file",
                (unsigned long long)flen);
        goto fail;
    }
    r->footer_start = r->size - 8 - flen;
    const uint8_t *fbuf;
    uint8_t *owned = NULL;
    if (r->mem) {
        fbuf = r->mem + r->footer_start;
    } else {
        owned = mallocCheck(flen ? flen : 1);
        if (pq_pread(r->fd, owned, flen, r->footer_start) < 0) {
            free(owned);
            pq_fail(r, "cannot read the footer: %s", errno ? strerror(errno) : "the file got shorter");
            goto fail;
        }
        fbuf = owned;
    }
    Tc t = {.p = fbuf, .end = fbuf + flen};
    parse_footer(&t, &r->ft);
    int rc = 0;
    if (t.bad) rc = pq_fail(r, "corrupt Parquet footer (%s at byte %lld of %llu)", t.why ? t.why : "malformed Thrift data",
                            (long long)(t.fail_at - fbuf), (unsigned long long)flen);
    else if (r->ft.encrypted) rc = pq_fail(r, "the file's columns are encrypted, which fsdpc does not read");
    else rc = pq_schema(r);
    free(owned);  // names live on in the columns
    if (rc < 0) goto fail;
    int64_t rows = 0;
    for (size_t g = 0; g < r->ft.nrg; g++) {
        const PqRowGroup *rg = &r->ft.rgs[g];
        if (rg->nchunks != (size_t)r->nleaves) {
            pq_fail(r, "corrupt footer: row group %zu has %zu column chunks for %d schema columns", g + 1, rg->nchunks, r->nleaves);
            goto fail;
        }
        if (rg->rows > INT64_MAX - rows) break;
        rows += rg->rows;
    }
    if (rows != r->ft.num_rows) {
        pq_fail(r, "corrupt footer: the row groups hold other than the file's %lld rows", (long long)r->ft.num_rows);
        goto fail;
    }
    r->base.nrows = r->ft.num_rows;
    return &r->base;
fail:
    pq_close(&r->base);
    return NULL;
}

static PqReader *pq_new(const char *name, char *err, size_t errlen) {
    PqReader *r = callocCheck(1, sizeof *r);
    r->path = mallocCheck(strlen(name) + 1);
    strcpy(r->path, name);
    r->fd = -1;
    r->err = err;
    r->errlen = errlen;
    r->base.format = "Parquet";
    r->base.nrows = -1;
    r->base.choose_fields = pq_choose;
    r->base.select = pq_select;
    r->base.next = pq_next;
    r->base.close = pq_close;
    return r;
}

TableReader *parquet_open(const char *path, char *err, size_t errlen) {
    int fd = path_open_read(path);
    if (fd < 0) {
        err_set(err, errlen, "cannot open '%s': %s", path, path_strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        err_set(err, errlen, "'%s' is not a regular file", path);
        close(fd);
        return NULL;
    }
    PqReader *r = pq_new(path, err, errlen);
    r->fd = fd;
    r->size = (uint64_t)st.st_size;
    return pq_open(r);
}

TableReader *parquet_open_mem(const void *data, size_t size, const char *name, char *err, size_t errlen) {
    PqReader *r = pq_new(name, err, errlen);
    r->mem = data;
    r->size = size;
    return pq_open(r);
}
