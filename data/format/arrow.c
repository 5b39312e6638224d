// arrow: Arrow IPC streams and files as a TableReader (see arrow.h). The layout facts come from
// the Arrow columnar format and IPC specification; the field ids below are the declaration order
// of the tables in its Schema.fbs, Message.fbs and File.fbs.
//
// FlatBuffers are read by the small reader below rather than by libflatbuffers: without generated
// code its Verifier needs the same table-by-table knowledge, written out by hand, and reading with
// a bounds check at every access leaves no verified-then-trusted gap. Every offset only moves
// forward, so no walk can cycle; shared subtrees are bounded by a budget of fields.
#include "arrow.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lz4frame.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "../../base/buf.h"
#include "../../base/err.h"
#include "../../base/path.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "arrow.c reads little-endian Arrow data with plain loads"
#endif

// ---- limits against lying headers ----
enum {
    AR_MAX_COLS = 1 << 16,     // top-level columns
    AR_MAX_FIELDS = 1 << 20,   // fields visited in one schema (shared subtrees count each time)
    AR_MAX_DEPTH = 64,         // type nesting
};
// buffers of one selected column read at once: a struct list's validity, offsets, the struct's
// validity, then validity, offsets and data of each chosen field
#define AR_SLOTS (3 + 3 * TABLE_MAX_FIELDS)
static const int64_t AR_MAX_LEN = (int64_t)1 << 56;        // rows or values in one array
static const int64_t AR_MAX_INFLATE = (int64_t)1 << 30;    // bytes one compressed buffer may expand to

// ---- the FlatBuffers wire format, bounds-checked ----

static inline uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

typedef struct {
    const uint8_t *p;
    size_t n;
    int bad;  // an offset or length pointed outside p[0, n)
} Fb;

typedef struct {
    size_t t;  // the table's position; 0: absent (no table can start at 0, the root offset is there)
    size_t vt;
    unsigned vtlen, tlen;
} FbTable;

static FbTable fb_table(Fb *b, size_t pos) {
    FbTable t = {0, 0, 0, 0};
    if (b->bad || !pos) return t;
    if (pos > b->n || b->n - pos < 4) return b->bad = 1, t;
    const int64_t vt = (int64_t)pos - (int32_t)ld32(b->p + pos);
    if (vt < 0 || (uint64_t)vt > b->n - 4) return b->bad = 1, t;
    const unsigned vtlen = ld16(b->p + vt), tlen = ld16(b->p + vt + 2);
    if (vtlen < 4 || (vtlen & 1) || vtlen > b->n - (size_t)vt || tlen < 4 || tlen > b->n - pos) return b->bad = 1, t;
    t.t = pos, t.vt = (size_t)vt, t.vtlen = vtlen, t.tlen = tlen;
    return t;
}

static FbTable fb_root(Fb *b) {
    if (b->n < 4) return b->bad = 1, (FbTable){0, 0, 0, 0};
    return fb_table(b, ld32(b->p));
}

// Position of field `id` (`size` bytes, inside the table), 0 when absent.
static size_t fb_field(Fb *b, const FbTable *t, int id, size_t size) {
    if (!t->t || b->bad) return 0;
    const size_t at = 4 + 2 * (size_t)id;
    if (at + 2 > t->vtlen) return 0;
    const unsigned fo = ld16(b->p + t->vt + at);
    if (!fo) return 0;
    if (fo < 4 || fo + size > t->tlen) return b->bad = 1, 0;
    return t->t + fo;
}

static int64_t fb_i64(Fb *b, const FbTable *t, int id, int64_t def) {
    const size_t f = fb_field(b, t, id, 8);
    return f ? (int64_t)ld64(b->p + f) : def;
}
static int32_t fb_i32(Fb *b, const FbTable *t, int id, int32_t def) {
    const size_t f = fb_field(b, t, id, 4);
    return f ? (int32_t)ld32(b->p + f) : def;
}
static int fb_i16(Fb *b, const FbTable *t, int id, int def) {
    const size_t f = fb_field(b, t, id, 2);
    return f ? (int16_t)ld16(b->p + f) : def;
}
static int fb_u8(Fb *b, const FbTable *t, int id, int def) {
    const size_t f = fb_field(b, t, id, 1);
    return f ? b->p[f] : def;
}

// Target of the uoffset stored at pos (always forward), 0 on a bad one.
static size_t fb_follow(Fb *b, size_t pos) {
    const uint32_t rel = ld32(b->p + pos);
    if (!rel || rel > b->n - pos) return b->bad = 1, 0;
    return pos + rel;
}
static size_t fb_ref(Fb *b, const FbTable *t, int id) {
    const size_t f = fb_field(b, t, id, 4);
    return f ? fb_follow(b, f) : 0;
}
static FbTable fb_child(Fb *b, const FbTable *t, int id) { return fb_table(b, fb_ref(b, t, id)); }

// Vector field `id` of `esize`-byte elements: the position of its first element and *len, or 0.
static size_t fb_vec(Fb *b, const FbTable *t, int id, size_t esize, size_t *len) {
    *len = 0;
    const size_t v = fb_ref(b, t, id);
    if (!v) return 0;
    if (b->n - v < 4) return b->bad = 1, 0;
    const uint32_t k = ld32(b->p + v);
    if (k > (b->n - v - 4) / esize) return b->bad = 1, 0;
    *len = k;
    return v + 4;
}
static FbTable fb_vec_table(Fb *b, size_t vec, size_t i) { return fb_table(b, fb_follow(b, vec + 4 * i)); }
static const char *fb_str(Fb *b, const FbTable *t, int id, size_t *len) {
    const size_t v = fb_vec(b, t, id, 1, len);
    return v ? (const char *)b->p + v : NULL;
}

// ---- the Arrow schema ----

enum {  // the Type union
    T_NONE, T_NULL, T_INT, T_FLOAT, T_BINARY, T_UTF8, T_BOOL, T_DECIMAL, T_DATE, T_TIME, T_TIMESTAMP, T_INTERVAL,
    T_LIST, T_STRUCT, T_UNION, T_FIXED_BINARY, T_FIXED_LIST, T_MAP, T_DURATION, T_LARGE_BINARY, T_LARGE_UTF8,
    T_LARGE_LIST, T_RUN_END, T_BINARY_VIEW, T_UTF8_VIEW, T_LIST_VIEW, T_LARGE_LIST_VIEW,
};
enum { H_SCHEMA = 1, H_DICTIONARY = 2, H_RECORD_BATCH = 3, H_TENSOR = 4, H_SPARSE_TENSOR = 5 };
enum { V4 = 3, V5 = 4 };  // MetadataVersion: V4 is Arrow 0.8 to 0.17, V5 1.0 on
// table fields
enum { MSG_VERSION, MSG_HEADER_TYPE, MSG_HEADER, MSG_BODY_LENGTH };
enum { SCHEMA_ENDIANNESS, SCHEMA_FIELDS };
enum { FIELD_NAME, FIELD_NULLABLE, FIELD_TYPE_TYPE, FIELD_TYPE, FIELD_DICTIONARY, FIELD_CHILDREN };
enum { RB_LENGTH, RB_NODES, RB_BUFFERS, RB_COMPRESSION, RB_VARIADIC };
enum { FOOTER_VERSION, FOOTER_SCHEMA, FOOTER_DICTIONARIES, FOOTER_BATCHES };
enum { DB_ID, DB_DATA, DB_IS_DELTA };                            // DictionaryBatch
enum { DENC_ID, DENC_INDEX_TYPE, DENC_IS_ORDERED, DENC_KIND };  // DictionaryEncoding

// Where a top-level column's arrays sit in a record batch, and how to read a selectable one.
typedef struct {
    int64_t node, buf;  // its first FieldNode and buffer (before the variadic buffers of earlier fields)
    int64_t var;        // fields with variadic buffers (string_view, binary_view) before it
    int off;            // offset bytes of a string or list: 4 or 8; 0 for fixed_size_list
    int32_t fixed;      // fixed_size_list: values per row
    int width, is_signed;  // integer bytes (TABLE_INT, TABLE_INT_LIST's values)
    // TABLE_STRUCT_LIST: each struct field's first node and buffer, counted from the struct's
    // first child, and its offset bytes (0: no string); the fields choose_fields picked
    int nf;
    struct {
        int32_t node, buf;
        int off;
    } f[TABLE_MAX_FIELDS];
    int nchosen, chosen[TABLE_MAX_FIELDS];
    // dictionary-encoded (the kind and layout above are its values'): its ArrowDict, -1 for none,
    // and the integer type of its indices
    int dict;
    int iwidth, isigned;
} ArrowCol;

// A type's name, built into a fixed buffer; what does not fit ends in "..."
typedef struct {
    char *s;
    size_t cap, len;
    int full;
} Name;

static void name_put(Name *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void name_put(Name *n, const char *fmt, ...) {
    if (n->full) return;
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(n->s + n->len, n->cap - n->len, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= n->cap - n->len) {
        n->full = 1;
        n->len = n->cap - 1;
        if (n->cap >= 4) memcpy(n->s + n->cap - 4, "...", 4);
    } else {
        n->len += (size_t)k;
    }
}

static void name_field(Fb *b, FbTable f, Name *n, int depth);

static void name_children(Fb *b, const FbTable *f, Name *n, int depth, int with_names) {
    size_t k;
    const size_t ch = fb_vec(b, f, FIELD_CHILDREN, 4, &k);
    for (size_t i = 0; i < k && !n->full && !b->bad; i++) {
        const FbTable c = fb_vec_table(b, ch, i);
        if (i) name_put(n, ", ");
        if (with_names) {
            size_t len;
            const char *s = fb_str(b, &c, FIELD_NAME, &len);
            name_put(n, "%.*s: ", s ? (int)(len > 64 ? 64 : len) : 0, s ? s : "");
        }
        name_field(b, c, n, depth + 1);
    }
}

static const char *name_unit(int u) { return u >= 0 && u < 4 ? (const char *[]){"s", "ms", "us", "ns"}[u] : "?"; }

// The value type of field f (for a dictionary-encoded field, of its dictionary).
static void name_value(Fb *b, const FbTable *f, Name *n, int depth) {
    const int tt = fb_u8(b, f, FIELD_TYPE_TYPE, T_NONE);
    const FbTable ty = fb_child(b, f, FIELD_TYPE);
    size_t len;
    const char *s;
    switch (tt) {
    case T_NULL: name_put(n, "null"); break;
    case T_INT: name_put(n, "%sint%d", fb_u8(b, &ty, 1, 0) ? "" : "u", fb_i32(b, &ty, 0, 0)); break;
    case T_FLOAT: {
        const int p = fb_i16(b, &ty, 0, 0);
        name_put(n, "%s", p == 0 ? "halffloat" : p == 1 ? "float" : p == 2 ? "double" : "floating point");
        break;
    }
    case T_BINARY: name_put(n, "binary"); break;
    case T_UTF8: name_put(n, "string"); break;
    case T_BOOL: name_put(n, "bool"); break;
    case T_DECIMAL:
        name_put(n, "decimal%d(%d, %d)", fb_i32(b, &ty, 2, 128), fb_i32(b, &ty, 0, 0), fb_i32(b, &ty, 1, 0));
        break;
    case T_DATE: name_put(n, "%s", fb_i16(b, &ty, 0, 1) == 0 ? "date32" : "date64"); break;
    case T_TIME: name_put(n, "time%d[%s]", fb_i32(b, &ty, 1, 32), name_unit(fb_i16(b, &ty, 0, 1))); break;
    case T_TIMESTAMP:
        s = fb_str(b, &ty, 1, &len);
        name_put(n, "timestamp[%s%s%.*s]", name_unit(fb_i16(b, &ty, 0, 0)), s ? ", tz=" : "", s ? (int)(len > 32 ? 32 : len) : 0,
                 s ? s : "");
        break;
    case T_INTERVAL: {
        const int u = fb_i16(b, &ty, 0, 0);
        name_put(n, "%s", u == 0 ? "month_interval" : u == 1 ? "day_time_interval" : "month_day_nano_interval");
        break;
    }
    case T_DURATION: name_put(n, "duration[%s]", name_unit(fb_i16(b, &ty, 0, 1))); break;
    case T_FIXED_BINARY: name_put(n, "fixed_size_binary[%d]", fb_i32(b, &ty, 0, 0)); break;
    case T_LARGE_BINARY: name_put(n, "large_binary"); break;
    case T_LARGE_UTF8: name_put(n, "large_string"); break;
    case T_BINARY_VIEW: name_put(n, "binary_view"); break;
    case T_UTF8_VIEW: name_put(n, "string_view"); break;
    case T_LIST:
    case T_LARGE_LIST:
    case T_LIST_VIEW:
    case T_LARGE_LIST_VIEW:
    case T_FIXED_LIST:
    case T_STRUCT:
    case T_UNION:
    case T_RUN_END:
    case T_MAP: {
        const char *what = tt == T_LIST ? "list" : tt == T_LARGE_LIST ? "large_list" : tt == T_LIST_VIEW ? "list_view"
                         : tt == T_LARGE_LIST_VIEW ? "large_list_view" : tt == T_FIXED_LIST ? "fixed_size_list"
                         : tt == T_STRUCT ? "struct" : tt == T_RUN_END ? "run_end_encoded" : tt == T_MAP ? "map"
                         : fb_i16(b, &ty, 0, 0) == 1 ? "dense_union" : "sparse_union";
        name_put(n, "%s<", what);
        if (tt == T_MAP) {  // map<key, value>: the types inside its one entries struct
            size_t k;
            const size_t ch = fb_vec(b, f, FIELD_CHILDREN, 4, &k);
            if (k) {
                const FbTable e = fb_vec_table(b, ch, 0);
                name_children(b, &e, n, depth + 1, 0);
            }
        } else {
            name_children(b, f, n, depth, tt == T_STRUCT);
        }
        name_put(n, ">");
        if (tt == T_FIXED_LIST) name_put(n, "[%d]", fb_i32(b, &ty, 0, 0));
        break;
    }
    default: name_put(n, "unknown type %d", tt); break;
    }
}

static void name_field(Fb *b, FbTable f, Name *n, int depth) {
    if (n->full || b->bad) return;
    if (depth > AR_MAX_DEPTH) return name_put(n, "...");
    if (fb_ref(b, &f, FIELD_DICTIONARY)) {
        name_put(n, "dictionary<");
        name_value(b, &f, n, depth);
        name_put(n, ">");
    } else {
        name_value(b, &f, n, depth);
    }
}

// Counts the FieldNodes and buffers field f takes in a record batch (pre-order, children after
// their parent), as the IPC format lays them out.
typedef struct {
    Fb *b;
    int version;
    int64_t node, buf, var;
    long fields;  // visited, against AR_MAX_FIELDS
    int too_big;  // past AR_MAX_FIELDS or AR_MAX_DEPTH
    int unknown;  // met a type whose buffers fsdpc does not know
} Layout;

static void layout_field(Layout *l, FbTable f, int depth) {
    Fb *b = l->b;
    if (b->bad || l->too_big || l->unknown) return;
    if (++l->fields > AR_MAX_FIELDS || depth > AR_MAX_DEPTH) {
        l->too_big = 1;
        return;
    }
    l->node++;
    if (fb_ref(b, &f, FIELD_DICTIONARY)) {  // dictionary-encoded: validity and indices, no children
        l->buf += 2;
        return;
    }
    const int tt = fb_u8(b, &f, FIELD_TYPE_TYPE, T_NONE);
    int own;
    switch (tt) {
    case T_NULL:
    case T_RUN_END: own = 0; break;
    case T_STRUCT:
    case T_FIXED_LIST: own = 1; break;  // validity
    case T_INT:
    case T_FLOAT:
    case T_BOOL:
    case T_DECIMAL:
    case T_DATE:
    case T_TIME:
    case T_TIMESTAMP:
    case T_INTERVAL:
    case T_DURATION:
    case T_FIXED_BINARY:
    case T_LIST:
    case T_LARGE_LIST:
    case T_MAP: own = 2; break;  // validity, values or offsets
    case T_BINARY:
    case T_UTF8:
    case T_LARGE_BINARY:
    case T_LARGE_UTF8:
    case T_LIST_VIEW:
    case T_LARGE_LIST_VIEW: own = 3; break;  // validity, offsets, data (or sizes)
    case T_BINARY_VIEW:
    case T_UTF8_VIEW:
        own = 2;  // validity, views, then as many data buffers as the batch's variadicBufferCounts say
        l->var++;
        break;
    case T_UNION: {
        const FbTable ty = fb_child(b, &f, FIELD_TYPE);
        // type ids (+ offsets when dense); before V5 unions had a validity bitmap too
        own = (fb_i16(b, &ty, 0, 0) == 1 ? 2 : 1) + (l->version < V5);
        break;
    }
    default: l->unknown = 1; return;
    }
    l->buf += own;
    size_t k;
    const size_t ch = fb_vec(b, &f, FIELD_CHILDREN, 4, &k);
    for (size_t i = 0; i < k && !b->bad && !l->too_big && !l->unknown; i++) layout_field(l, fb_vec_table(b, ch, i), depth + 1);
}

// The integer type of an Int table: bytes in *width, or 0 when it is no 8/16/32/64-bit integer.
static int int_type(Fb *b, const FbTable *ty, int *width, int *is_signed) {
    const int32_t bits = fb_i32(b, ty, 0, 0);
    if (bits != 8 && bits != 16 && bits != 32 && bits != 64) return 0;
    *width = bits / 8;
    *is_signed = fb_u8(b, ty, 1, 0) != 0;
    return 1;
}

// The struct item st of a list: its fields' names, which are strings, and where their arrays sit.
// TABLE_OTHER for more than TABLE_MAX_FIELDS fields, none a string, or a field whose buffers
// fsdpc cannot count (unknown or variadic). *visited: fields walked so far in the schema, bounded
// by AR_MAX_FIELDS like the schema's own walk.
static TableKind classify_structs(Fb *b, const FbTable *st, int version, long *visited, ArrowCol *a, TableColumn *col) {
    size_t k;
    const size_t ch = fb_vec(b, st, FIELD_CHILDREN, 4, &k);
    if (k < 1 || k > TABLE_MAX_FIELDS) return TABLE_OTHER;
    Layout l = {b, version, 0, 0, 0, *visited, 0, 0};
    int strings = 0;
    for (size_t j = 0; j < k && !b->bad; j++) {
        const FbTable c = fb_vec_table(b, ch, j);
        TableField *tf = &col->fields[j];
        size_t len;
        const char *s = fb_str(b, &c, FIELD_NAME, &len);
        if (s) memcpy(tf->name, s, len < sizeof tf->name ? len : sizeof tf->name - 1);
        const int tt = fb_u8(b, &c, FIELD_TYPE_TYPE, T_NONE);
        const int dict = fb_ref(b, &c, FIELD_DICTIONARY) != 0;
        a->f[j].node = (int32_t)l.node, a->f[j].buf = (int32_t)l.buf;
        a->f[j].off = dict ? 0 : tt == T_UTF8 || tt == T_BINARY ? 4 : tt == T_LARGE_UTF8 || tt == T_LARGE_BINARY ? 8 : 0;
        tf->is_string = a->f[j].off != 0;
        strings += tf->is_string;
        layout_field(&l, c, 2);
    }
    *visited = l.fields;
    if (l.unknown || l.too_big || l.var || b->bad || !strings) return TABLE_OTHER;
    col->nfields = a->nf = (int)k;
    return TABLE_STRUCT_LIST;
}

// What kind of values field f's type holds, for table.h, and how to read them (for a
// dictionary-encoded field: its dictionary's values).
static TableKind classify_type(Fb *b, const FbTable *f, int version, long *visited, ArrowCol *a, TableColumn *col) {
    const int tt = fb_u8(b, f, FIELD_TYPE_TYPE, T_NONE);
    const FbTable ty = fb_child(b, f, FIELD_TYPE);
    switch (tt) {
    case T_UTF8:
    case T_BINARY: a->off = 4; return TABLE_STRING;
    case T_LARGE_UTF8:
    case T_LARGE_BINARY: a->off = 8; return TABLE_STRING;
    case T_INT: return int_type(b, &ty, &a->width, &a->is_signed) ? TABLE_INT : TABLE_OTHER;
    case T_LIST:
    case T_LARGE_LIST:
    case T_FIXED_LIST: {
        size_t k;
        const size_t ch = fb_vec(b, f, FIELD_CHILDREN, 4, &k);
        if (k != 1) return TABLE_OTHER;
        const FbTable c = fb_vec_table(b, ch, 0);
        const FbTable cty = fb_child(b, &c, FIELD_TYPE);
        if (tt != T_FIXED_LIST && !fb_ref(b, &c, FIELD_DICTIONARY) && fb_u8(b, &c, FIELD_TYPE_TYPE, T_NONE) == T_STRUCT) {
            a->off = tt == T_LIST ? 4 : 8;
            return classify_structs(b, &c, version, visited, a, col);
        }
        if (fb_ref(b, &c, FIELD_DICTIONARY) || fb_u8(b, &c, FIELD_TYPE_TYPE, T_NONE) != T_INT ||
            !int_type(b, &cty, &a->width, &a->is_signed))
            return TABLE_OTHER;
        a->off = tt == T_LIST ? 4 : tt == T_LARGE_LIST ? 8 : 0;
        // size 0 would give rows without bytes: as many as a header claims, for nothing
        if (tt == T_FIXED_LIST && (a->fixed = fb_i32(b, &ty, 0, 0)) < 1) return TABLE_OTHER;
        return TABLE_INT_LIST;
    }
    default: return TABLE_OTHER;
    }
}

// What kind of column field f is, and how to read it. A dictionary-encoded field reads as its
// values when they are strings or integer lists (a dictionary inside them is not read); its
// indices are signed int32 unless the encoding names another integer type (Schema.fbs).
// *is_dict: the field is dictionary-encoded, *dict_id its dictionary.
static TableKind classify(Fb *b, const FbTable *f, int version, long *visited, ArrowCol *a, TableColumn *col, int *is_dict, int64_t *dict_id) {
    a->dict = -1;
    if (!fb_ref(b, f, FIELD_DICTIONARY)) return classify_type(b, f, version, visited, a, col);
    *is_dict = 1;
    const FbTable de = fb_child(b, f, FIELD_DICTIONARY);
    const FbTable it = fb_child(b, &de, DENC_INDEX_TYPE);
    *dict_id = fb_i64(b, &de, DENC_ID, 0);
    if (fb_i16(b, &de, DENC_KIND, 0) != 0) return TABLE_OTHER;  // DenseArray is the only kind defined
    if (!it.t) a->iwidth = 4, a->isigned = 1;
    else if (!int_type(b, &it, &a->iwidth, &a->isigned)) return TABLE_OTHER;
    const TableKind k = classify_type(b, f, version, visited, a, col);
    if (k == TABLE_STRING || k == TABLE_INT_LIST) return k;
    col->nfields = a->nf = 0;  // a struct list's fields, listed by classify_structs, are not offered
    return TABLE_OTHER;
}

// ---- the reader ----

typedef struct {
    uint64_t meta;   // the FlatBuffers Message
    uint32_t mlen;
    uint64_t body;   // and its body
    uint64_t blen;
} ArrowBatch;

// A decompressed buffer (compressed bodies), kept to be reused.
typedef struct {
    uint8_t *p;
    size_t cap;
} ArrowKeep;

// The buffers of one array, located and checked.
typedef struct {
    const uint8_t *valid;   // validity bitmap; NULL: no nulls
    const uint8_t *off;     // offsets (strings, lists)
    const uint8_t *data;    // string bytes, integers, a list's values, or a dictionary's indices
    const uint8_t *cvalid;  // a list's values' validity; NULL: no null values
    int64_t lim;            // string bytes or list values: what offsets may reach
    int64_t longest;        // an integer list's longest row
    int zero_copy;          // int64 values without nulls, aligned: handed out in place
} ArrowArr;

// The values one dictionary batch gave a dictionary: indices [base, base + len). Located when a
// selected column first needs them, and kept (decompressed, when the body is) until a
// replacement dictionary drops them.
typedef struct {
    int64_t msg;  // its ArrowDictMsg
    int64_t base, len;
    ArrowArr v;
    ArrowKeep inflated[4];
} ArrowPiece;

// A dictionary the readable dictionary-encoded columns use, as it stands for the loaded batch.
typedef struct {
    int64_t id;
    int col;          // the first column using it: the values' kind and layout, and a name for messages
    int found;        // the file holds a dictionary batch for it
    int seen;         // one has come before the loaded record batch
    int64_t len;      // its values
    int64_t longest;  // the longest loaded integer list
    ArrowPiece *pieces;
    int64_t npieces;
    size_t cap;
    int64_t nloaded;  // pieces located: the first nloaded (pieces are added at the end)
} ArrowDict;

// A dictionary batch of the stream or file, in the order it applies.
typedef struct {
    uint64_t meta;
    uint32_t mlen;
    uint64_t body, blen;
    int64_t before;  // the record batches it comes after (a file's all come before the first)
    int64_t len;     // values
    int64_t num;     // its number among the dictionary batches, for messages
    int dict;        // its ArrowDict
    int delta;       // appends to the dictionary rather than replacing it
} ArrowDictMsg;

// One selected column's arrays in the current record batch.
typedef struct {
    int col;
    TableKind kind;
    ArrowArr arr;           // a dictionary-encoded column: validity and indices
    int64_t *ints;          // the current row's values, widened
    size_t cap;
    int64_t one;            // TABLE_INT's value
    // TABLE_STRUCT_LIST: the struct's validity and length, then each chosen field's arrays
    const uint8_t *svalid;
    int nf;
    struct {
        const uint8_t *valid, *off, *data;
        int64_t lim;
        int w;
    } fld[TABLE_MAX_FIELDS];
    TableStr *strs;         // the current row's elements x chosen fields
    size_t strs_cap;
    ArrowKeep inflated[AR_SLOTS];  // decompressed buffers (compressed bodies), kept for the next batch
} ArrowSel;

typedef struct {
    TableReader base;  // first: a TableReader * is an ArrowReader *
    char *name;
    const uint8_t *p;
    size_t size;
    int mapped;
    int version;  // the schema's metadata version
    TableColumn *cols;
    ArrowCol *acols;
    int unknown_col;  // the first column whose buffer layout is unknown; -1: none
    ArrowBatch *batches;
    int64_t nbatches;
    size_t batches_cap;
    int64_t bi;          // the loaded batch; -1 before the first
    int64_t row, rows;   // the next row in it, and its length
    ArrowDict *dicts;
    int ndicts;
    ArrowDictMsg *dmsgs;
    int64_t ndmsgs;
    size_t dmsgs_cap;
    int64_t dnext;       // the first dictionary batch not applied yet
    int64_t dvalues;     // values in all dictionary batches, against AR_MAX_LEN
    ArrowSel sel[8];
    int nsel;
    char *fail;  // next() failed: its message, given again on later calls
    ZSTD_DCtx *zstd;
    LZ4F_dctx *lz4;
} ArrowReader;

// A framed message: its metadata and where its body lies.
typedef struct {
    Fb b;
    FbTable header;
    int type;
    uint64_t meta, body, blen, next;
    uint32_t mlen;
} ArrowMessage;

static char *ar_strdup(const char *s) {
    const size_t n = strlen(s) + 1;
    return memcpy(mallocCheck(n), s, n);
}

// The message framed at pos, the idx-th of the stream (0-based). body_at: where the body starts
// when the caller knows (an IPC file's block), else 0 (right after the metadata). Returns 1, 0 at
// the end of the stream (an end-of-stream marker or the end of the file), -1 with err set.
static int ar_message(ArrowReader *r, uint64_t pos, int64_t idx, uint64_t body_at, ArrowMessage *m, char *err, size_t errlen) {
    const size_t size = r->size;
    if (pos == size) return 0;
    if (size - pos < 4)
        return err_set(err, errlen, "'%s' is truncated: message %" PRId64 "'s length at offset %" PRIu64 " is cut off (the file has %zu bytes)",
                       r->name, idx, pos, size);
    uint64_t meta = pos + 4;
    int32_t len = (int32_t)ld32(r->p + pos);
    if (len == -1) {  // the continuation marker (Arrow 0.15 on); before it, the length came first
        if (size - pos < 8)
            return err_set(err, errlen, "'%s' is truncated: message %" PRId64 "'s length at offset %" PRIu64 " is cut off (the file has %zu bytes)",
                           r->name, idx, pos, size);
        len = (int32_t)ld32(r->p + pos + 4);
        meta = pos + 8;
    }
    if (len == 0) return 0;
    if (len < 0)
        return err_set(err, errlen, "'%s' is not a valid Arrow IPC stream: message %" PRId64 " at offset %" PRIu64 " has metadata length %d",
                       r->name, idx, pos, len);
    if ((uint64_t)len > size - meta)
        return err_set(err, errlen, "'%s' is truncated: message %" PRId64 "'s metadata needs %d bytes at offset %" PRIu64 ", the file has %zu",
                       r->name, idx, len, meta, size);
    m->b = (Fb){r->p + meta, (size_t)len, 0};
    m->meta = meta;
    m->mlen = (uint32_t)len;
    FbTable root = fb_root(&m->b);
    const int version = fb_i16(&m->b, &root, MSG_VERSION, 0);
    m->type = fb_u8(&m->b, &root, MSG_HEADER_TYPE, 0);
    m->header = fb_child(&m->b, &root, MSG_HEADER);
    const int64_t blen = fb_i64(&m->b, &root, MSG_BODY_LENGTH, 0);
    if (m->b.bad || !root.t || !m->header.t || blen < 0)
        return err_set(err, errlen, "'%s' is corrupt: the metadata of message %" PRId64 " (offset %" PRIu64 ") is not a valid Arrow message",
                       r->name, idx, pos);
    if (version < V4 || version > V5)
        return err_set(err, errlen, "'%s': message %" PRId64 " uses Arrow metadata version V%d; fsdpc reads V4 and V5 (Arrow 0.8 and later)",
                       r->name, idx, version + 1);
    char what[64];  // the message, for messages: batches are counted as they are added
    if (m->type == H_RECORD_BATCH) snprintf(what, sizeof what, "record batch %" PRId64, r->nbatches);
    else if (m->type == H_SCHEMA) snprintf(what, sizeof what, "the schema");
    else snprintf(what, sizeof what, "message %" PRId64, idx);
    const uint64_t body = body_at ? body_at : meta + (uint64_t)len;
    if (body < meta + (uint64_t)len || body > size)
        return err_set(err, errlen, "'%s' is corrupt: %s's metadata (offset %" PRIu64 ", %d bytes) overruns its block", r->name, what, meta, len);
    if ((uint64_t)blen > size - body)
        return err_set(err, errlen, "'%s' is truncated: %s's body needs %" PRId64 " bytes at offset %" PRIu64 ", the file has %zu", r->name, what,
                       blen, body, size);
    m->body = body;
    m->blen = (uint64_t)blen;
    m->next = body + (uint64_t)blen;
    return 1;
}

// A readable dictionary-encoded column and the dictionary id it names, while the schema is read.
typedef struct {
    int64_t id;
    int col;
} DictUse;

static int dict_use_cmp(const void *x, const void *y) {
    const DictUse *a = x, *b = y;
    return a->id != b->id ? (a->id < b->id ? -1 : 1) : a->col - b->col;
}

// One ArrowDict per dictionary id the readable dictionary-encoded columns name (sorted by id, for
// ar_dict_find); columns sharing an id must agree on what its values are.
static int ar_dicts_make(ArrowReader *r, DictUse *u, int n, char *err, size_t errlen) {
    qsort(u, (size_t)n, sizeof *u, dict_use_cmp);
    r->dicts = callocCheck(n ? (size_t)n : 1, sizeof *r->dicts);
    for (int i = 0; i < n; i++) {
        if (!i || u[i].id != u[i - 1].id) r->dicts[r->ndicts++] = (ArrowDict){.id = u[i].id, .col = u[i].col};
        const ArrowDict *d = &r->dicts[r->ndicts - 1];
        const ArrowCol *a = &r->acols[u[i].col], *f = &r->acols[d->col];
        if (r->cols[u[i].col].kind != r->cols[d->col].kind || a->off != f->off || a->fixed != f->fixed || a->width != f->width ||
            a->is_signed != f->is_signed)
            return err_set(err, errlen, "'%s' is corrupt: columns '%s' (%s) and '%s' (%s) share dictionary id %" PRId64 " but not its value type", r->name,
                           r->cols[d->col].name, r->cols[d->col].type, r->cols[u[i].col].name, r->cols[u[i].col].type, d->id);
        r->acols[u[i].col].dict = r->ndicts - 1;
    }
    return 0;
}

// The ArrowDict of dictionary id `id`, or -1 when no readable column uses it.
static int ar_dict_find(const ArrowReader *r, int64_t id) {
    int lo = 0, hi = r->ndicts;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (r->dicts[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < r->ndicts && r->dicts[lo].id == id ? lo : -1;
}

static int ar_schema(ArrowReader *r, Fb *b, const FbTable *schema, char *err, size_t errlen) {
    if (fb_i16(b, schema, SCHEMA_ENDIANNESS, 0) != 0 && !b->bad)
        return err_set(err, errlen, "'%s' holds big-endian Arrow data, which fsdpc does not read", r->name);
    size_t n;
    const size_t fields = fb_vec(b, schema, SCHEMA_FIELDS, 4, &n);
    if (b->bad) return err_set(err, errlen, "'%s' is corrupt: its schema is not valid Arrow metadata", r->name);
    if (n > AR_MAX_COLS)
        return err_set(err, errlen, "'%s' has %zu columns, more than the %d fsdpc reads", r->name, n, AR_MAX_COLS);
    r->cols = callocCheck(n ? n : 1, sizeof *r->cols);
    r->acols = callocCheck(n ? n : 1, sizeof *r->acols);
    r->base.ncols = (int)n;
    r->base.cols = r->cols;
    DictUse *uses = mallocCheck((n ? n : 1) * sizeof *uses);
    int nuses = 0, rc = 0;
    Layout l = {b, r->version, 0, 0, 0, 0, 0, 0};
    long visited = 0;  // by classify_structs
    for (size_t i = 0; i < n && !rc; i++) {
        const FbTable f = fb_vec_table(b, fields, i);
        TableColumn *c = &r->cols[i];
        ArrowCol *a = &r->acols[i];
        size_t len;
        const char *s = fb_str(b, &f, FIELD_NAME, &len);
        if (s) memcpy(c->name, s, len < sizeof c->name ? len : sizeof c->name - 1);
        Name nm = {c->type, sizeof c->type, 0, 0};
        name_field(b, f, &nm, 0);
        int is_dict = 0;
        int64_t id = 0;
        c->kind = classify(b, &f, r->version, &visited, a, c, &is_dict, &id);
        if (is_dict && c->kind != TABLE_OTHER) uses[nuses++] = (DictUse){id, (int)i};
        a->node = l.node, a->buf = l.buf, a->var = l.var;
        if (r->unknown_col < 0) {
            layout_field(&l, f, 0);
            if (l.unknown) r->unknown_col = (int)i;
        }
        if (l.too_big)
            rc = err_set(err, errlen, "'%s': the schema has more than %d fields or nests types deeper than %d levels", r->name, AR_MAX_FIELDS,
                         AR_MAX_DEPTH);
        else if (b->bad)
            rc = err_set(err, errlen, "'%s' is corrupt: its schema is not valid Arrow metadata (column %zu)", r->name, i);
    }
    if (!rc) rc = ar_dicts_make(r, uses, nuses, err, errlen);
    free(uses);
    return rc;
}

static void ar_add_batch(ArrowReader *r, const ArrowMessage *m) {
    buf_fit(r->batches, &r->batches_cap, (size_t)r->nbatches + 1);
    r->batches[r->nbatches++] = (ArrowBatch){m->meta, m->mlen, m->body, m->blen};
}

// A record batch's body compression: *codec -1 (none), 0 (LZ4_FRAME) or 1 (ZSTD). `what` names
// the batch ("record batch 3") in messages.
static int ar_codec(ArrowReader *r, Fb *b, const FbTable *rb, const char *what, int *codec, char *err, size_t errlen) {
    const FbTable comp = fb_child(b, rb, RB_COMPRESSION);
    const int method = fb_u8(b, &comp, 1, 0);
    *codec = comp.t ? fb_u8(b, &comp, 0, 0) : -1;
    if (b->bad) return err_set(err, errlen, "'%s' is corrupt: %s's metadata is not valid", r->name, what);
    if (*codec > 1)
        return err_set(err, errlen, "'%s': %s uses compression codec %d, which fsdpc does not read (it reads LZ4_FRAME and ZSTD)", r->name, what,
                       *codec);
    if (method != 0)
        return err_set(err, errlen, "'%s': %s uses body compression method %d, which fsdpc does not read (it reads BUFFER)", r->name, what, method);
    return 0;
}

// A record batch message's row count, added to nrows; its compression is checked here already.
static int ar_count_rows(ArrowReader *r, ArrowMessage *m, int64_t bi, char *err, size_t errlen) {
    const int64_t len = fb_i64(&m->b, &m->header, RB_LENGTH, 0);
    int codec;
    char what[48];
    snprintf(what, sizeof what, "record batch %" PRId64, bi);
    if (m->b.bad || len < 0 || len > AR_MAX_LEN)
        return err_set(err, errlen, "'%s' is corrupt: %s has no valid length", r->name, what);
    if (ar_codec(r, &m->b, &m->header, what, &codec, err, errlen)) return -1;
    r->base.nrows += len;
    if (r->base.nrows > AR_MAX_LEN)
        return err_set(err, errlen, "'%s' is corrupt: its record batches add up to more than 2^56 rows", r->name);
    return 0;
}

// Dictionary batch `num` (counted from 0 in the stream, or in the file's footer), which comes
// after `before` record batches: recorded when a readable column uses its dictionary, skipped
// otherwise (its values are never read). `file`: the IPC file format, where a dictionary is
// given once and only extended by deltas.
static int ar_dict_batch(ArrowReader *r, const ArrowMessage *m, int64_t num, int64_t before, int file, char *err, size_t errlen) {
    Fb b = m->b;
    char what[48];
    snprintf(what, sizeof what, "dictionary batch %" PRId64, num);
    const int64_t id = fb_i64(&b, &m->header, DB_ID, 0);
    const FbTable rb = fb_child(&b, &m->header, DB_DATA);
    const int delta = fb_u8(&b, &m->header, DB_IS_DELTA, 0) != 0;
    const int64_t len = fb_i64(&b, &rb, RB_LENGTH, 0);
    if (b.bad || !rb.t || len < 0 || len > AR_MAX_LEN)
        return err_set(err, errlen, "'%s' is corrupt: %s is not a valid dictionary batch", r->name, what);
    const int d = ar_dict_find(r, id);
    if (d < 0) return 0;
    int codec;
    if (ar_codec(r, &b, &rb, what, &codec, err, errlen)) return -1;
    ArrowDict *dict = &r->dicts[d];
    if (file && !delta && dict->found)
        return err_set(err, errlen, "'%s' is corrupt: %s replaces dictionary %" PRId64 " (column '%s'); an Arrow IPC file may only add to a dictionary", r->name,
                       what, id, r->cols[dict->col].name);
    dict->found = 1;
    r->dvalues += len;
    if (r->dvalues > AR_MAX_LEN) return err_set(err, errlen, "'%s' is corrupt: its dictionary batches add up to more than 2^56 values", r->name);
    buf_fit(r->dmsgs, &r->dmsgs_cap, (size_t)r->ndmsgs + 1);
    r->dmsgs[r->ndmsgs++] = (ArrowDictMsg){m->meta, m->mlen, m->body, m->blen, before, len, num, d, delta};
    return 0;
}

static int ar_open_stream(ArrowReader *r, char *err, size_t errlen) {
    // a stream starts with the continuation marker, or (before 0.15) a metadata length; a length
    // of 16 MiB or more is text or another format, not metadata
    if (r->size >= 4 && ld32(r->p) != 0xFFFFFFFF && ld32(r->p) - 1 >= (1u << 24) - 1)
        return err_set(err, errlen, "'%s' is not an Arrow IPC file or stream: it starts with neither ARROW1 nor a stream message", r->name);
    ArrowMessage m;
    int rc = ar_message(r, 0, 0, 0, &m, err, errlen);
    if (rc < 0) return -1;
    if (rc == 0) return err_set(err, errlen, "'%s' is an empty Arrow IPC stream: it ends before its schema", r->name);
    if (m.type != H_SCHEMA)
        return err_set(err, errlen, "'%s' is not a valid Arrow IPC stream: its first message is not a schema (header type %d)", r->name, m.type);
    FbTable root = fb_root(&m.b);
    r->version = fb_i16(&m.b, &root, MSG_VERSION, V5);
    if (ar_schema(r, &m.b, &m.header, err, errlen)) return -1;
    uint64_t pos = m.next;
    for (int64_t idx = 1, ndict = 0;; idx++) {
        rc = ar_message(r, pos, idx, 0, &m, err, errlen);
        if (rc < 0) return -1;
        if (rc == 0) return 0;
        switch (m.type) {
        case H_RECORD_BATCH:
            if (ar_count_rows(r, &m, r->nbatches, err, errlen)) return -1;
            ar_add_batch(r, &m);
            break;
        case H_DICTIONARY:
            if (ar_dict_batch(r, &m, ndict++, r->nbatches, 0, err, errlen)) return -1;
            break;
        case H_SCHEMA:
            return err_set(err, errlen, "'%s' holds a second schema (message %" PRId64 "); fsdpc reads one table per stream", r->name, idx);
        default:
            return err_set(err, errlen, "'%s': message %" PRId64 " is %s, not part of a table", r->name, idx,
                           m.type == H_TENSOR ? "a tensor" : m.type == H_SPARSE_TENSOR ? "a sparse tensor" : "of an unknown kind");
        }
        pos = m.next;
    }
}

// Block i of a file footer's vector `blocks` (record batches, or dictionaries when `dict`): the
// message it points at, which must be of that kind.
static int ar_file_block(ArrowReader *r, const Fb *b, size_t blocks, size_t i, uint64_t fstart, int dict, ArrowMessage *m, char *err, size_t errlen) {
    const char *what = dict ? "dictionary batch" : "record batch";
    const uint8_t *blk = b->p + blocks + 24 * i;  // Block: offset int64, metaDataLength int32 (+4), bodyLength int64
    const int64_t off = (int64_t)ld64(blk), blen = (int64_t)ld64(blk + 16);
    const int32_t mlen = (int32_t)ld32(blk + 8);
    if (off < 8 || mlen <= 0 || blen < 0 || (uint64_t)off > fstart || (uint64_t)mlen > fstart - (uint64_t)off ||
        (uint64_t)blen > fstart - (uint64_t)off - (uint64_t)mlen)
        return err_set(err, errlen, "'%s' is corrupt: %s %zu's block (offset %" PRId64 ", %d + %" PRId64 " bytes) lies outside the file's data", r->name, what,
                       i, off, mlen, blen);
    const int rc = ar_message(r, (uint64_t)off, (int64_t)i, (uint64_t)off + (uint64_t)mlen, m, err, errlen);
    if (rc < 0) return -1;
    if (rc == 0 || m->type != (dict ? H_DICTIONARY : H_RECORD_BATCH) || m->blen > (uint64_t)blen)
        return err_set(err, errlen, "'%s' is corrupt: %s %zu's block (offset %" PRId64 ") does not hold a %s", r->name, what, i, off, what);
    return 0;
}

static int ar_open_file(ArrowReader *r, char *err, size_t errlen) {
    const size_t size = r->size;
    // "ARROW1", 2 bytes of padding, the stream, the footer, its int32 length, "ARROW1"
    if (size < 18 || memcmp(r->p + size - 6, "ARROW1", 6))
        return err_set(err, errlen, "'%s' is truncated: it starts as an Arrow IPC file (ARROW1) but does not end with the ARROW1 footer magic",
                       r->name);
    const int32_t flen = (int32_t)ld32(r->p + size - 10);
    if (flen <= 0 || (size_t)flen > size - 18)
        return err_set(err, errlen, "'%s' is corrupt: its footer length %d does not fit in the file (%zu bytes)", r->name, flen, size);
    const uint64_t fstart = size - 10 - (size_t)flen;
    Fb b = {r->p + fstart, (size_t)flen, 0};
    FbTable root = fb_root(&b);
    const int version = fb_i16(&b, &root, FOOTER_VERSION, 0);
    FbTable schema = fb_child(&b, &root, FOOTER_SCHEMA);
    size_t n, nd;
    const size_t blocks = fb_vec(&b, &root, FOOTER_BATCHES, 24, &n);
    const size_t dblocks = fb_vec(&b, &root, FOOTER_DICTIONARIES, 24, &nd);
    if (b.bad || !root.t || !schema.t) return err_set(err, errlen, "'%s' is corrupt: its footer is not valid Arrow metadata", r->name);
    if (version < V4 || version > V5)
        return err_set(err, errlen, "'%s' uses Arrow metadata version V%d; fsdpc reads V4 and V5 (Arrow 0.8 and later)", r->name, version + 1);
    r->version = version;
    if (ar_schema(r, &b, &schema, err, errlen)) return -1;
    ArrowMessage m;
    // every dictionary applies to every record batch, its deltas in the footer's order
    for (size_t i = 0; i < nd; i++)
        if (ar_file_block(r, &b, dblocks, i, fstart, 1, &m, err, errlen) || ar_dict_batch(r, &m, (int64_t)i, 0, 1, err, errlen)) return -1;
    for (size_t i = 0; i < n; i++) {
        if (ar_file_block(r, &b, blocks, i, fstart, 0, &m, err, errlen) || ar_count_rows(r, &m, (int64_t)i, err, errlen)) return -1;
        ar_add_batch(r, &m);
    }
    return 0;
}

// ---- record batches ----

// A record batch's metadata (or a dictionary batch's) while its arrays are located.
typedef struct {
    Fb b;
    char what[64];  // "record batch 3", "dictionary batch 0 (id 1)": for messages
    int64_t len;
    const uint8_t *body;
    uint64_t blen;
    int codec;  // its body compression: -1 none, 0 LZ4_FRAME, 1 ZSTD
    size_t nodes, nnodes, bufs, nbufs, var, nvar;
} Batch;

// The batch whose message is at meta (its body at body): the RecordBatch itself, or when `dict`
// the one inside a DictionaryBatch. c->what must be set.
static int ar_batch(ArrowReader *r, Batch *c, uint64_t meta, uint32_t mlen, uint64_t body, uint64_t blen, int dict, char *err, size_t errlen) {
    c->b = (Fb){r->p + meta, mlen, 0};
    c->body = r->p + body, c->blen = blen;
    FbTable root = fb_root(&c->b);
    FbTable rb = fb_child(&c->b, &root, MSG_HEADER);
    if (dict) rb = fb_child(&c->b, &rb, DB_DATA);
    c->len = fb_i64(&c->b, &rb, RB_LENGTH, 0);
    c->nodes = fb_vec(&c->b, &rb, RB_NODES, 16, &c->nnodes);
    c->bufs = fb_vec(&c->b, &rb, RB_BUFFERS, 16, &c->nbufs);
    c->var = fb_vec(&c->b, &rb, RB_VARIADIC, 8, &c->nvar);
    return ar_codec(r, &c->b, &rb, c->what, &c->codec, err, errlen);
}

// Buffer i of the batch, decompressed into *keep (reused from call to call) when the body is
// compressed.
static int ar_buffer(ArrowReader *r, const Batch *c, ArrowKeep *keep, int64_t i, const uint8_t **ptr, int64_t *len, char *err, size_t errlen) {
    const uint8_t *d = c->b.p + c->bufs + 16 * (size_t)i;  // Buffer: offset int64, length int64
    const int64_t off = (int64_t)ld64(d), blen = (int64_t)ld64(d + 8);
    if (off < 0 || blen < 0 || (uint64_t)off > c->blen || (uint64_t)blen > c->blen - (uint64_t)off)
        return err_set(err, errlen, "'%s' is corrupt: %s's buffer %" PRId64 " (offset %" PRId64 ", %" PRId64 " bytes) lies outside its %" PRIu64 "-byte body",
                       r->name, c->what, i, off, blen, c->blen);
    const uint8_t *q = c->body + off;
    if (c->codec < 0 || blen == 0) {
        *ptr = q, *len = blen;
        return 0;
    }
    // compressed: the uncompressed length (int64, -1: stored as is), then the codec's bytes
    if (blen < 8)
        return err_set(err, errlen, "'%s' is corrupt: %s's compressed buffer %" PRId64 " is shorter than its length prefix",
                       r->name, c->what, i);
    const int64_t ulen = (int64_t)ld64(q);
    if (ulen == -1) {
        *ptr = q + 8, *len = blen - 8;
        return 0;
    }
    if (ulen < 0 || ulen > AR_MAX_INFLATE)
        return err_set(err, errlen, "'%s': %s's buffer %" PRId64 " claims %" PRId64 " bytes uncompressed; fsdpc inflates at most %" PRId64 " per buffer",
                       r->name, c->what, i, ulen, AR_MAX_INFLATE);
    if (!keep->p || (size_t)ulen > keep->cap) {
        free(keep->p);
        keep->p = mallocCheck(ulen ? (size_t)ulen : 1);
        keep->cap = (size_t)ulen;
    }
    uint8_t *dst = keep->p;
    const uint8_t *src = q + 8;
    const size_t slen = (size_t)blen - 8;
    const char *why = NULL;
    size_t got = 0;
    if (c->codec == 1) {
        if (!r->zstd && !(r->zstd = ZSTD_createDCtx())) err_fatal("out of memory for a zstd context");
        got = ZSTD_decompressDCtx(r->zstd, dst, (size_t)ulen, src, slen);
        if (ZSTD_isError(got)) why = ZSTD_getErrorName(got);
    } else {
        if (!r->lz4 && LZ4F_isError(LZ4F_createDecompressionContext(&r->lz4, LZ4F_VERSION)))
            err_fatal("out of memory for an lz4 context");
        LZ4F_resetDecompressionContext(r->lz4);
        size_t in = 0;
        for (;;) {
            size_t dl = (size_t)ulen - got, sl = slen - in;
            const size_t h = LZ4F_decompress(r->lz4, dst + got, &dl, src + in, &sl, NULL);
            if (LZ4F_isError(h)) {
                why = LZ4F_getErrorName(h);
                break;
            }
            in += sl, got += dl;
            if (!h) break;  // the frame is complete
            if (!sl && !dl) {
                why = got == (size_t)ulen ? "more data than its length prefix says" : "the frame is cut short";
                break;
            }
        }
    }
    if (!why && got != (size_t)ulen) why = "fewer bytes than its length prefix says";
    if (why)
        return err_set(err, errlen, "'%s' is corrupt: %s's buffer %" PRId64 " does not decompress (%s: %s)", r->name, c->what, i,
                       c->codec == 1 ? "ZSTD" : "LZ4_FRAME", why);
    *ptr = dst, *len = ulen;
    return 0;
}

// FieldNode i: its length and null count, checked against each other.
static int ar_node(ArrowReader *r, const Batch *c, int64_t i, const char *col, int64_t *len, int64_t *nulls, char *err, size_t errlen) {
    if ((uint64_t)i >= c->nnodes)
        return err_set(err, errlen, "'%s' is corrupt: %s has %zu field nodes, column '%s' needs node %" PRId64, r->name, c->what,
                       c->nnodes, col, i);
    const uint8_t *d = c->b.p + c->nodes + 16 * (size_t)i;
    *len = (int64_t)ld64(d);
    *nulls = (int64_t)ld64(d + 8);
    if (*len < 0 || *len > AR_MAX_LEN || *nulls < 0 || *nulls > *len)
        return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': %" PRId64 " values with %" PRId64 " nulls", r->name, c->what,
                       col, *len, *nulls);
    return 0;
}

static int64_t ar_offset(const uint8_t *o, int w, int64_t i) { return w == 4 ? (int32_t)ld32(o + 4 * i) : (int64_t)ld64(o + 8 * i); }
static inline int ar_bit(const uint8_t *bits, int64_t i) { return (bits[i >> 3] >> (i & 7)) & 1; }

// Checks n + 1 offsets: non-negative, non-decreasing, at most lim. Returns the first bad row or -1;
// *longest: the longest row.
static int64_t ar_check_offsets(const uint8_t *o, int w, int64_t n, int64_t lim, int64_t *longest) {
    int64_t prev = ar_offset(o, w, 0), most = 0;
    if (prev < 0 || prev > lim) return 0;
    for (int64_t i = 1; i <= n; i++) {
        const int64_t cur = ar_offset(o, w, i);
        if (cur < prev || cur > lim) return i - 1;
        if (cur - prev > most) most = cur - prev;
        prev = cur;
    }
    *longest = most;
    return -1;
}

// A validity bitmap of n bits, or NULL when the array has no nulls.
static int ar_bitmap(ArrowReader *r, const Batch *c, ArrowKeep *keep, int64_t bufi, int64_t n, int64_t nulls, const char *col, const uint8_t **out,
                     char *err, size_t errlen) {
    *out = NULL;
    if (!nulls) return 0;  // the bitmap may be left out then, and need not be read when present
    int64_t len;
    if (ar_buffer(r, c, keep, bufi, out, &len, err, errlen)) return -1;
    if (len < (n + 7) / 8)
        return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': a validity bitmap of %" PRId64 " bytes for %" PRId64 " values",
                       r->name, c->what, col, len, n);
    return 0;
}

// A list of structs past its validity (n > 0 rows): the list's offsets into the struct array,
// the struct's validity, and each chosen field's validity, offsets and bytes, all checked.
static int ar_load_structs(ArrowReader *r, const Batch *c, ArrowSel *s, int64_t buf, int64_t n, char *err, size_t errlen) {
    const ArrowCol *a = &r->acols[s->col];
    const char *col = r->cols[s->col].name;
    int64_t len, sn = 0, snulls = 0, longest = 0, bad;
    if (ar_buffer(r, c, &s->inflated[1], buf + 1, &s->arr.off, &len, err, errlen)) return -1;
    if (len / a->off <= n)
        return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': %" PRId64 " bytes of offsets for %" PRId64 " rows",
                       r->name, c->what, col, len, n);
    if (ar_node(r, c, a->node + 1, col, &sn, &snulls, err, errlen)) return -1;
    if ((bad = ar_check_offsets(s->arr.off, a->off, n, sn, &longest)) >= 0)
        return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': row %" PRId64 "'s offsets are out of order or past its %" PRId64 " structs",
                       r->name, c->what, col, bad, sn);
    s->arr.lim = sn;
    if (!sn) return 0;  // every list is empty: no struct is read
    if (ar_bitmap(r, c, &s->inflated[2], buf + 2, sn, snulls, col, &s->svalid, err, errlen)) return -1;
    for (int j = 0; j < s->nf; j++) {
        const int fi = a->chosen[j];
        const char *fname = r->cols[s->col].fields[fi].name;
        const int64_t fb = buf + 3 + a->f[fi].buf;
        int64_t fn = 0, fnulls = 0, dummy;
        if (ar_node(r, c, a->node + 2 + a->f[fi].node, col, &fn, &fnulls, err, errlen)) return -1;
        if (fn < sn)
            return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': field '%s' has %" PRId64 " values for %" PRId64 " structs",
                           r->name, c->what, col, fname, fn, sn);
        const int w = a->f[fi].off;
        s->fld[j].w = w;
        if (ar_bitmap(r, c, &s->inflated[3 + 3 * j], fb, fn, fnulls, col, &s->fld[j].valid, err, errlen)) return -1;
        if (ar_buffer(r, c, &s->inflated[4 + 3 * j], fb + 1, &s->fld[j].off, &len, err, errlen)) return -1;
        if (len / w <= sn)
            return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': field '%s' has %" PRId64 " bytes of offsets for %" PRId64 " structs",
                           r->name, c->what, col, fname, len, sn);
        if (ar_buffer(r, c, &s->inflated[5 + 3 * j], fb + 2, &s->fld[j].data, &s->fld[j].lim, err, errlen)) return -1;
        if ((bad = ar_check_offsets(s->fld[j].off, w, sn, s->fld[j].lim, &dummy)) >= 0)
            return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': field '%s' of struct %" PRId64 " has offsets out of order or past its %" PRId64 " bytes",
                           r->name, c->what, col, fname, bad, s->fld[j].lim);
    }
    // longest <= sn, and each chosen field holds 4 bytes of offsets per struct at least: bounded by the body
    if ((size_t)longest * (size_t)s->nf > s->strs_cap) {
        free(s->strs);
        s->strs_cap = (size_t)longest * (size_t)s->nf;
        s->strs = mallocCheck(s->strs_cap * sizeof *s->strs);
    }
    return 0;
}

// The start of an array of n rows at FieldNode `node` whose nbuf buffers start at buffer `buf`:
// checks they are there and the node's length, and locates the validity into v (reset) and keep[0].
static int ar_array(ArrowReader *r, const Batch *c, int64_t node, int64_t buf, int nbuf, int64_t n, const char *col, ArrowArr *v, ArrowKeep *keep,
                    char *err, size_t errlen) {
    *v = (ArrowArr){0};
    if ((uint64_t)buf + (uint64_t)nbuf > c->nbufs)
        return err_set(err, errlen, "'%s' is corrupt: %s has %zu buffers, column '%s' needs buffer %" PRId64, r->name, c->what, c->nbufs, col,
                       buf + nbuf - 1);
    int64_t len = 0, nulls = 0;
    if (ar_node(r, c, node, col, &len, &nulls, err, errlen)) return -1;
    if (len != n)
        return err_set(err, errlen, "'%s' is corrupt: %s has %" PRId64 " rows but column '%s' has %" PRId64, r->name, c->what, n, col, len);
    return ar_bitmap(r, c, keep, buf, n, nulls, col, &v->valid, err, errlen);
}

// The rest of a string or integer-list array started by ar_array (n > 0 rows) with a's layout:
// offsets and bytes, or offsets (none for fixed_size_list) and the values array, all checked.
// Buffers are decompressed into keep[1..3].
static int ar_values(ArrowReader *r, const Batch *c, const ArrowCol *a, TableKind kind, int64_t node, int64_t buf, int64_t n, const char *col,
                     ArrowArr *v, ArrowKeep *keep, char *err, size_t errlen) {
    int64_t len = 0, longest = 0, bad = -1;
    if (kind == TABLE_STRING) {
        if (ar_buffer(r, c, &keep[1], buf + 1, &v->off, &len, err, errlen)) return -1;
        if (len / a->off <= n)
            return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': %" PRId64 " bytes of offsets for %" PRId64 " rows",
                           r->name, c->what, col, len, n);
        if (ar_buffer(r, c, &keep[2], buf + 2, &v->data, &v->lim, err, errlen)) return -1;
        if ((bad = ar_check_offsets(v->off, a->off, n, v->lim, &longest)) >= 0)
            return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': row %" PRId64 "'s offsets are out of order or past its %" PRId64 " bytes",
                           r->name, c->what, col, bad, v->lim);
        return 0;
    }
    int64_t cn = 0, cnulls = 0;
    if (ar_node(r, c, node + 1, col, &cn, &cnulls, err, errlen)) return -1;
    int64_t vb = buf + 1;
    if (a->off) {
        if (ar_buffer(r, c, &keep[1], buf + 1, &v->off, &len, err, errlen)) return -1;
        if (len / a->off <= n)
            return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': %" PRId64 " bytes of offsets for %" PRId64 " rows",
                           r->name, c->what, col, len, n);
        if ((bad = ar_check_offsets(v->off, a->off, n, cn, &longest)) >= 0)
            return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': row %" PRId64 "'s offsets are out of order or past its %" PRId64 " values",
                           r->name, c->what, col, bad, cn);
        vb = buf + 2;
    } else {
        int64_t need;
        if (__builtin_mul_overflow(n, (int64_t)a->fixed, &need) || need > cn)
            return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': %" PRId64 " values for %" PRId64 " rows of %d", r->name, c->what,
                           col, cn, n, a->fixed);
        longest = a->fixed;
    }
    v->lim = cn;
    if (ar_bitmap(r, c, &keep[2], vb, cn, cnulls, col, &v->cvalid, err, errlen)) return -1;
    if (ar_buffer(r, c, &keep[3], vb + 1, &v->data, &len, err, errlen)) return -1;
    if (len / a->width < cn)
        return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': %" PRId64 " bytes of values for %" PRId64 " of %d bytes",
                       r->name, c->what, col, len, cn, a->width);
    v->longest = longest;
    v->zero_copy = a->width == 8 && !v->cvalid && !((uintptr_t)v->data & 7);
    return 0;
}

// Buffers of a string or integer-list array with a's layout.
static int ar_nbuf(TableKind kind, const ArrowCol *a) { return kind == TABLE_STRING ? 3 : a->off ? 4 : 3; }

// Drops the pages of the mapped file's bytes [lo, hi) from the mapping: they stay in the page
// cache, and come back from there if read again.
static void ar_release(const ArrowReader *r, uint64_t lo, uint64_t hi) {
    if (!r->mapped) return;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)(r->p + lo) & ~(pg - 1);
    madvise((void *)a, (uintptr_t)(r->p + hi) - a, MADV_DONTNEED);
}

// Brings the dictionaries to where record batch bi reads them: applies the dictionary batches
// before it that are not applied yet (batches are loaded in order). A replacement drops the pieces
// of the dictionary it replaces (their copies and their pages), so only the current dictionaries
// stay in memory.
static void ar_dicts_apply(ArrowReader *r, int64_t bi) {
    for (; r->dnext < r->ndmsgs && r->dmsgs[r->dnext].before <= bi; r->dnext++) {
        const ArrowDictMsg *m = &r->dmsgs[r->dnext];
        ArrowDict *d = &r->dicts[m->dict];
        if (!m->delta) {
            for (int64_t k = 0; k < d->npieces; k++) {
                const ArrowDictMsg *o = &r->dmsgs[d->pieces[k].msg];
                for (int j = 0; j < 4; j++) free(d->pieces[k].inflated[j].p);
                if (k < d->nloaded) ar_release(r, o->meta, o->body + o->blen);
            }
            d->npieces = d->nloaded = d->len = d->longest = 0;
        }
        buf_fit(d->pieces, &d->cap, (size_t)d->npieces + 1);
        d->pieces[d->npieces++] = (ArrowPiece){.msg = r->dnext, .base = d->len, .len = m->len};
        d->len += m->len;
        d->seen = 1;
    }
}

// Locates and checks the values of dictionary d's pieces not located yet.
static int ar_dict_load(ArrowReader *r, ArrowDict *d, char *err, size_t errlen) {
    const ArrowCol *a = &r->acols[d->col];
    const TableColumn *tc = &r->cols[d->col];
    for (; d->nloaded < d->npieces; d->nloaded++) {
        ArrowPiece *p = &d->pieces[d->nloaded];
        const ArrowDictMsg *m = &r->dmsgs[p->msg];
        Batch c;
        snprintf(c.what, sizeof c.what, "dictionary batch %" PRId64 " (id %" PRId64 ")", m->num, d->id);
        if (ar_batch(r, &c, m->meta, m->mlen, m->body, m->blen, 1, err, errlen) ||
            ar_array(r, &c, 0, 0, ar_nbuf(tc->kind, a), p->len, tc->name, &p->v, p->inflated, err, errlen) ||
            (p->len && ar_values(r, &c, a, tc->kind, 0, 0, p->len, tc->name, &p->v, p->inflated, err, errlen)))
            return -1;
        if (p->v.longest > d->longest) d->longest = p->v.longest;
    }
    return 0;
}

// s->ints holds n widened values at least.
static void ar_ints_cap(ArrowSel *s, int64_t n) {
    if ((size_t)n <= s->cap) return;
    free(s->ints);
    s->ints = mallocCheck((size_t)n * sizeof *s->ints);
    s->cap = (size_t)n;
}

static int ar_load_col(ArrowReader *r, const Batch *c, ArrowSel *s, char *err, size_t errlen) {
    const ArrowCol *a = &r->acols[s->col];
    const char *col = r->cols[s->col].name;
    int64_t buf = a->buf;
    if (a->var) {  // the variadic buffers of string_view / binary_view fields before this column
        if ((uint64_t)a->var > c->nvar)
            return err_set(err, errlen, "'%s' is corrupt: %s lacks the variadic buffer counts of its view columns", r->name, c->what);
        for (int64_t j = 0; j < a->var; j++) {
            const int64_t k = (int64_t)ld64(c->b.p + c->var + 8 * (size_t)j);
            if (k < 0 || (uint64_t)k > c->nbufs)
                return err_set(err, errlen, "'%s' is corrupt: %s has a variadic buffer count of %" PRId64, r->name, c->what, k);
            buf += k;
        }
    }
    int nbuf = a->dict >= 0 || s->kind == TABLE_INT ? 2 : s->kind == TABLE_STRUCT_LIST ? 3 : ar_nbuf(s->kind, a);
    for (int j = 0; s->kind == TABLE_STRUCT_LIST && j < s->nf; j++)
        if (3 + a->f[a->chosen[j]].buf + 3 > nbuf) nbuf = 3 + a->f[a->chosen[j]].buf + 3;
    s->svalid = NULL;
    if (ar_array(r, c, a->node, buf, nbuf, c->len, col, &s->arr, s->inflated, err, errlen)) return -1;
    const int64_t n = c->len;
    if (!n) return 0;
    if (s->kind == TABLE_STRUCT_LIST) return ar_load_structs(r, c, s, buf, n, err, errlen);
    if (a->dict < 0 && s->kind != TABLE_INT) {
        if (ar_values(r, c, a, s->kind, a->node, buf, n, col, &s->arr, s->inflated, err, errlen)) return -1;
        if (s->kind == TABLE_INT_LIST && !s->arr.zero_copy) ar_ints_cap(s, s->arr.longest);
        return 0;
    }
    // a scalar integer, or a dictionary-encoded column's indices
    const int w = a->dict >= 0 ? a->iwidth : a->width;
    int64_t len;
    if (ar_buffer(r, c, &s->inflated[1], buf + 1, &s->arr.data, &len, err, errlen)) return -1;
    if (len / w < n)
        return err_set(err, errlen, "'%s' is corrupt: %s, column '%s': %" PRId64 " bytes of %s for %" PRId64 " rows", r->name, c->what, col, len,
                       a->dict >= 0 ? "dictionary indices" : "values", n);
    if (a->dict < 0) return 0;
    ArrowDict *d = &r->dicts[a->dict];
    // a batch whose indices are all null may come before its dictionary (the IPC format allows it)
    if (!d->seen) {
        for (int64_t i = 0; i < n; i++)
            if (!s->arr.valid || ar_bit(s->arr.valid, i))
                return err_set(err, errlen, "'%s' is corrupt: column '%s' uses dictionary id %" PRId64 ", but no dictionary batch with that id comes before %s",
                               r->name, col, d->id, c->what);
        return 0;
    }
    if (ar_dict_load(r, d, err, errlen)) return -1;
    if (s->kind == TABLE_INT_LIST) ar_ints_cap(s, d->longest);
    return 0;
}

static int ar_load(ArrowReader *r, int64_t bi, char *err, size_t errlen) {
    const ArrowBatch *m = &r->batches[bi];
    Batch c;
    snprintf(c.what, sizeof c.what, "record batch %" PRId64, bi);
    if (ar_batch(r, &c, m->meta, m->mlen, m->body, m->blen, 0, err, errlen)) return -1;
    if (r->mapped) {
        // keep the resident set at about one batch: the previous one's pages leave the mapping
        // (they stay in the page cache), this one is read ahead
        const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        if (r->bi >= 0 && r->bi != bi) ar_release(r, r->batches[r->bi].meta, r->batches[r->bi].body + r->batches[r->bi].blen);
        const uintptr_t lo = (uintptr_t)c.body & ~(pg - 1);
        madvise((void *)lo, (uintptr_t)(c.body + c.blen) - lo, MADV_WILLNEED);
    }
    ar_dicts_apply(r, bi);
    r->bi = bi, r->row = 0, r->rows = 0;  // nothing to read until every column is located
    for (int k = 0; k < r->nsel; k++)
        if (ar_load_col(r, &c, &r->sel[k], err, errlen)) return -1;
    r->rows = c.len;
    return 0;
}

// ---- TableReader ----

static int ar_select(TableReader *t, const int *cols, int n, char *err, size_t errlen) {
    ArrowReader *r = (ArrowReader *)t;
    if (n < 0 || n > 8) return err_set(err, errlen, "'%s': %d columns selected; at most 8 can be read together", r->name, n);
    for (int k = 0; k < n; k++) {
        const int c = cols[k];
        if (c < 0 || c >= r->base.ncols) return err_set(err, errlen, "'%s' has no column %d", r->name, c);
        const TableColumn *tc = &r->cols[c];
        if (tc->kind == TABLE_OTHER && !strncmp(tc->type, "dictionary<", 11))
            return err_set(err, errlen, "'%s': column '%s' is %s; fsdpc reads dictionary-encoded columns whose values are strings or integer lists "
                           "(no dictionary inside them)", r->name, tc->name, tc->type);
        if (tc->kind == TABLE_OTHER)
            return err_set(err, errlen, "'%s': column '%s' is %s; fsdpc reads string, integer, integer-list and struct-list columns", r->name, tc->name, tc->type);
        if (tc->kind == TABLE_STRUCT_LIST && !r->acols[c].nchosen)
            return err_set(err, errlen, "'%s': column '%s' (%s) is selected before its fields were chosen", r->name, tc->name, tc->type);
        if (r->unknown_col >= 0 && c > r->unknown_col)
            return err_set(err, errlen, "'%s': column '%s' comes after column '%s' (%s), whose buffer layout fsdpc does not know, so it cannot be located",
                           r->name, tc->name, r->cols[r->unknown_col].name, r->cols[r->unknown_col].type);
    }
    for (int k = 0; k < n; k++) {
        ArrowSel *s = &r->sel[k];
        s->col = cols[k];
        s->kind = r->cols[cols[k]].kind;
        s->nf = r->acols[cols[k]].nchosen;
    }
    r->nsel = n;
    free(r->fail);
    r->fail = NULL;
    if (r->bi >= 0) {  // mid-batch: locate the new columns in it, keeping the position
        const int64_t row = r->row;
        if (ar_load(r, r->bi, err, errlen)) {
            r->fail = ar_strdup(err);
            return -1;
        }
        r->row = row;
    }
    return 0;
}

static int ar_choose(TableReader *t, int col, const int *fields, int n, char *err, size_t errlen) {
    ArrowReader *r = (ArrowReader *)t;
    if (col < 0 || col >= r->base.ncols) return err_set(err, errlen, "'%s' has no column %d", r->name, col);
    if (table_check_fields(r->name, &r->cols[col], fields, n, err, errlen)) return -1;
    ArrowCol *a = &r->acols[col];
    memcpy(a->chosen, fields, (size_t)n * sizeof *fields);
    a->nchosen = n;
    return 0;
}

// n integers of `width` bytes at src into dst: one tight loop per type, for the compiler to vectorize.
static void ar_widen(int64_t *restrict dst, const uint8_t *restrict src, int64_t n, int width, int is_signed) {
#define AR_WIDEN(T)                                   \
    for (int64_t j = 0; j < n; j++) {                 \
        T v;                                          \
        memcpy(&v, src + sizeof(T) * (size_t)j, sizeof v); \
        dst[j] = (int64_t)v;                          \
    }                                                 \
    break;
    switch (width * 2 + is_signed) {
    case 2: AR_WIDEN(uint8_t)
    case 3: AR_WIDEN(int8_t)
    case 4: AR_WIDEN(uint16_t)
    case 5: AR_WIDEN(int16_t)
    case 8: AR_WIDEN(uint32_t)
    case 9: AR_WIDEN(int32_t)
    case 16: AR_WIDEN(uint64_t)
    default: AR_WIDEN(int64_t)
    }
#undef AR_WIDEN
}

// Elements [lo, hi) of a struct list into s->strs, the chosen fields of each.
static int ar_structs(ArrowReader *r, ArrowSel *s, int64_t lo, int64_t hi, char *err, size_t errlen) {
    if ((uint64_t)(hi - lo) * (uint64_t)s->nf > s->strs_cap) goto changed;
    TableStr *out = s->strs;
    for (int64_t e = lo; e < hi; e++) {
        const int enull = s->svalid && !ar_bit(s->svalid, e);
        for (int j = 0; j < s->nf; j++, out++) {
            if (enull || (s->fld[j].valid && !ar_bit(s->fld[j].valid, e))) {
                *out = (TableStr){NULL, 0, 1};
                continue;
            }
            const int64_t a = ar_offset(s->fld[j].off, s->fld[j].w, e), b = ar_offset(s->fld[j].off, s->fld[j].w, e + 1);
            if (a < 0 || b < a || b > s->fld[j].lim) goto changed;
            *out = (TableStr){(const char *)s->fld[j].data + a, (size_t)(b - a), 0};
        }
    }
    return 0;
changed:  // checked when the batch was loaded
    err_set(err, errlen, "'%s' changed while being read (record batch %" PRId64 ", column '%s')", r->name, r->bi, r->cols[s->col].name);
    r->fail = ar_strdup(err);
    return -1;
}

// Row i (not null) of arr, a string, integer-list or struct-list array with a's layout, into v.
static int ar_value(ArrowReader *r, ArrowSel *s, const ArrowCol *a, const ArrowArr *arr, int64_t i, TableValue *v, char *err, size_t errlen) {
    int64_t lo, hi;
    if (a->off) {
        lo = ar_offset(arr->off, a->off, i), hi = ar_offset(arr->off, a->off, i + 1);
    } else {
        lo = i * a->fixed, hi = lo + a->fixed;
    }
    // checked when the batch was loaded; a mapped file rewritten since would fail here, not crash
    if (lo < 0 || hi < lo || hi > arr->lim || (s->kind == TABLE_INT_LIST && !arr->zero_copy && (uint64_t)(hi - lo) > s->cap)) {
        err_set(err, errlen, "'%s' changed while being read (record batch %" PRId64 ", column '%s')", r->name, r->bi, r->cols[s->col].name);
        r->fail = ar_strdup(err);
        return -1;
    }
    const int64_t len = hi - lo;
    v->len = (size_t)len;
    if (s->kind == TABLE_STRUCT_LIST) {
        if (ar_structs(r, s, lo, hi, err, errlen)) return -1;
        v->items = s->strs;
    } else if (s->kind == TABLE_STRING) {
        v->str = (const char *)arr->data + lo;
    } else if (arr->zero_copy) {
        v->ints = (const int64_t *)(const void *)(arr->data + 8 * (size_t)lo);
    } else {
        ar_widen(s->ints, arr->data + (size_t)lo * (size_t)a->width, len, a->width, a->is_signed);
        if (arr->cvalid)
            for (int64_t j = 0; j < len; j++)
                if (!ar_bit(arr->cvalid, lo + j)) s->ints[j] = 0, v->has_null_item = 1;
        v->ints = s->ints;
    }
    return 0;
}

// The piece of dictionary d holding index x (0 <= x < d->len).
static const ArrowPiece *ar_piece(const ArrowDict *d, int64_t x) {
    int64_t lo = 0, hi = d->npieces - 1;
    while (lo < hi) {
        const int64_t mid = hi - (hi - lo) / 2;
        if (d->pieces[mid].base <= x) lo = mid;
        else hi = mid - 1;
    }
    return &d->pieces[lo];
}

static int ar_next(TableReader *t, TableValue *out, char *err, size_t errlen) {
    ArrowReader *r = (ArrowReader *)t;
    if (r->fail) return err_set(err, errlen, "%s", r->fail);
    while (r->row >= r->rows) {
        if (r->bi + 1 >= r->nbatches) return 0;
        if (ar_load(r, r->bi + 1, err, errlen)) {
            r->fail = ar_strdup(err);
            return -1;
        }
    }
    const int64_t i = r->row++;
    for (int k = 0; k < r->nsel; k++) {
        ArrowSel *s = &r->sel[k];
        const ArrowCol *a = &r->acols[s->col];
        TableValue *v = &out[k];
        v->str = NULL, v->ints = NULL, v->items = NULL, v->len = 0, v->has_null_item = 0;
        v->is_null = s->arr.valid && !ar_bit(s->arr.valid, i);
        if (v->is_null) continue;
        if (s->kind == TABLE_INT) {
            ar_widen(&s->one, s->arr.data + (size_t)i * (size_t)a->width, 1, a->width, a->is_signed);
            v->ints = &s->one, v->len = 1;
            continue;
        }
        if (a->dict < 0) {
            if (ar_value(r, s, a, &s->arr, i, v, err, errlen)) return -1;
            continue;
        }
        const ArrowDict *d = &r->dicts[a->dict];
        int64_t x;
        ar_widen(&x, s->arr.data + (size_t)i * (size_t)a->iwidth, 1, a->iwidth, a->isigned);
        if (x < 0 || x >= d->len) {  // a uint64 index past INT64_MAX widens to a negative x
            if (x < 0 && a->isigned)
                err_set(err, errlen, "'%s' is corrupt: record batch %" PRId64 ", column '%s': row %" PRId64 "'s dictionary index %" PRId64 " is negative", r->name,
                        r->bi, r->cols[s->col].name, i, x);
            else
                err_set(err, errlen, "'%s' is corrupt: record batch %" PRId64 ", column '%s': row %" PRId64 "'s dictionary index %" PRIu64
                        " is outside its dictionary of %" PRId64 " values", r->name, r->bi, r->cols[s->col].name, i, (uint64_t)x, d->len);
            r->fail = ar_strdup(err);
            return -1;
        }
        const ArrowPiece *p = ar_piece(d, x);
        v->is_null = p->v.valid && !ar_bit(p->v.valid, x - p->base);  // a null value in the dictionary
        if (!v->is_null && ar_value(r, s, a, &p->v, x - p->base, v, err, errlen)) return -1;
    }
    return 1;
}

static void ar_close(TableReader *t) {
    if (!t) return;
    ArrowReader *r = (ArrowReader *)t;
    for (int k = 0; k < 8; k++) {
        free(r->sel[k].ints);
        free(r->sel[k].strs);
        for (int j = 0; j < AR_SLOTS; j++) free(r->sel[k].inflated[j].p);
    }
    for (int d = 0; d < r->ndicts; d++) {
        for (int64_t k = 0; k < r->dicts[d].npieces; k++)
            for (int j = 0; j < 4; j++) free(r->dicts[d].pieces[k].inflated[j].p);
        free(r->dicts[d].pieces);
    }
    free(r->dicts);
    free(r->dmsgs);
    if (r->mapped) path_unmap((void *)r->p, r->size);
    ZSTD_freeDCtx(r->zstd);
    LZ4F_freeDecompressionContext(r->lz4);
    free(r->batches);
    free(r->cols);
    free(r->acols);
    free(r->fail);
    free(r->name);
    free(r);
}

// Takes over the mapping (when mapped) whether it succeeds or not.
static TableReader *ar_open(const void *data, size_t size, const char *name, int mapped, char *err, size_t errlen) {
    ArrowReader *r = callocCheck(1, sizeof *r);
    r->name = ar_strdup(name);
    r->p = data;
    r->size = size;
    r->mapped = mapped;
    r->unknown_col = -1;
    r->bi = -1;
    r->base.choose_fields = ar_choose;
    r->base.select = ar_select;
    r->base.next = ar_next;
    r->base.close = ar_close;
    const int file = size >= 6 && !memcmp(data, "ARROW1", 6);
    r->base.format = file ? "Arrow IPC file" : "Arrow IPC stream";
    if (!size) {
        err_set(err, errlen, "'%s' is empty, not an Arrow IPC file or stream", name);
        ar_close(&r->base);
        return NULL;
    }
    if (file ? ar_open_file(r, err, errlen) : ar_open_stream(r, err, errlen)) {
        ar_close(&r->base);
        return NULL;
    }
    if (mapped) madvise((void *)r->p, r->size, MADV_DONTNEED);  // the scan's pages: not needed until read
    return &r->base;
}

TableReader *arrow_open_mem(const void *data, size_t size, const char *name, char *err, size_t errlen) {
    return ar_open(data, size, name, 0, err, errlen);
}

TableReader *arrow_open(const char *path, char *err, size_t errlen) {
    const int fd = path_open_read(path);
    if (fd < 0) {
        err_set(err, errlen, "cannot open '%s': %s", path, path_strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        err_set(err, errlen, "'%s' is not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size == 0) {
        close(fd);
        return ar_open(NULL, 0, path, 0, err, errlen);
    }
    void *m = path_map_read(fd, (size_t)st.st_size, 0, path);
    const int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        err_set(err, errlen, "cannot map '%s': %s", path, strerror(e));
        return NULL;
    }
    return ar_open(m, (size_t)st.st_size, path, 1, err, errlen);
}
