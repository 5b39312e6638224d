// prepare: `fsdpc prepare` turns text files and JSON Lines (plain or gzipped) into token shards.
#include "shardfile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../comm/comm.h"

#define PREPARE_IO_BYTES (1 << 20)
#define PREPARE_JSON_DEPTH 256  // nesting limit for skipped values: bounds the recursion
#define PREPARE_BAR_WIDTH 20
#define PREPARE_BAR_PERIOD 0.2  // seconds between progress redraws

typedef struct {
    uint8_t *data;
    size_t len, cap;
} PrepareBuf;

// One output split (train or val): a sequence of shards DIR/NAME_NNNNNN.bin.
typedef struct {
    const char *dir, *name;
    int dtype_bytes;
    uint64_t max_tokens;  // per shard
    FILE *f;              // the open shard, written as its .tmp name; NULL between shards
    char *path, *tmp;     // the shard's final name and the one it is written under
    size_t path_cap;
    uint64_t in_shard, total;
    int nshards;          // completed shards
} PrepareSplit;

typedef struct {
    // flags
    const char **inputs;
    int ninputs;
    const char *output;
    double val_fraction;
    int dtype_bytes;
    uint64_t shard_tokens;
    // work
    PrepareSplit train, val;
    PrepareBuf cur;      // the document being read, encoded as output tokens
    PrepareBuf pending;  // the last document with tokens, held back (see prepare_end_doc)
    PrepareBuf line, text, key;
    uint8_t *io;         // PREPARE_IO_BYTES of input
    uint64_t ndocs, pending_index;
    // progress
    uint64_t bytes_total, bytes_before;  // all inputs; inputs already finished
    double t_start, t_drawn;
    bool bar_drawn;
} Prepare;

typedef struct {
    gzFile gz;
    const char *path;
    size_t pos, len;  // unread input is p->io[pos, len)
    uint64_t line_no;
} PrepareInput;

// One-line user error; ends an unfinished progress bar line first so the message starts a line.
static int prepare_fail(Prepare *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int prepare_fail(Prepare *p, const char *fmt, ...) {
    if (p->bar_drawn) fputc('\n', stderr);
    p->bar_drawn = false;
    va_list ap;
    va_start(ap, fmt);
    fputs("fsdpc: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

// ---- growable byte buffers ----

static void prepare_buf_reserve(PrepareBuf *b, size_t extra) {
    if (b->len + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    uint8_t *data = realloc(b->data, cap);
    if (!data) comm_fatal("out of memory growing a buffer to %zu bytes (one document must fit in memory)", cap);
    b->data = data;
    b->cap = cap;
}

static void prepare_buf_append(PrepareBuf *b, const void *src, size_t n) {
    if (!n) return;  // b->data may still be NULL, which memcpy must not see
    prepare_buf_reserve(b, n);
    memcpy(b->data + b->len, src, n);
    b->len += n;
}

static void prepare_put_le(uint8_t *dst, uint64_t v, int nbytes) {
    for (int i = 0; i < nbytes; i++) dst[i] = (uint8_t)(v >> (8 * i));
}

static void prepare_push_token(Prepare *p, PrepareBuf *doc, uint32_t token) {
    prepare_buf_reserve(doc, (size_t)p->dtype_bytes);
    prepare_put_le(doc->data + doc->len, token, p->dtype_bytes);
    doc->len += (size_t)p->dtype_bytes;
}

// byte tokenizer: every byte is one token, so only the low (first, little-endian) byte is non-zero
static void prepare_push_bytes(Prepare *p, PrepareBuf *doc, const uint8_t *bytes, size_t n) {
    if (!n) return;  // doc->data may still be NULL
    size_t width = (size_t)p->dtype_bytes;
    prepare_buf_reserve(doc, n * width);
    uint8_t *dst = doc->data + doc->len;
    memset(dst, 0, n * width);
    for (size_t i = 0; i < n; i++) dst[i * width] = bytes[i];
    doc->len += n * width;
}

// ---- shard writing ----

static void prepare_header(uint8_t out[TOKFILE_HEADER_BYTES], int dtype_bytes, uint64_t ntokens) {
    memset(out, 0, TOKFILE_HEADER_BYTES);
    memcpy(out + offsetof(TokFileHeader, magic), TOKFILE_MAGIC, 8);
    prepare_put_le(out + offsetof(TokFileHeader, version), TOKFILE_VERSION, 4);
    prepare_put_le(out + offsetof(TokFileHeader, dtype_bytes), (uint64_t)dtype_bytes, 4);
    prepare_put_le(out + offsetof(TokFileHeader, ntokens), ntokens, 8);
}

static void prepare_split_init(PrepareSplit *s, const Prepare *p, const char *name) {
    memset(s, 0, sizeof *s);
    s->dir = p->output;
    s->name = name;
    s->dtype_bytes = p->dtype_bytes;
    s->max_tokens = p->shard_tokens;
    s->path_cap = strlen(p->output) + strlen(name) + 32;
    s->path = mallocCheck(s->path_cap);
    s->tmp = mallocCheck(s->path_cap + 4);
}

static void prepare_split_name(PrepareSplit *s, int index) {
    snprintf(s->path, s->path_cap, "%s/%s_%06d.bin", s->dir, s->name, index);
    snprintf(s->tmp, s->path_cap + 4, "%s.tmp", s->path);
}

static void prepare_split_open(PrepareSplit *s) {
    prepare_split_name(s, s->nshards);
    s->f = fopenCheck(s->tmp, "wb");
    // stdio's own buffer, enlarged: spans of a document go out in big writes
    setvbuf(s->f, NULL, _IOFBF, PREPARE_IO_BYTES);
    uint8_t header[TOKFILE_HEADER_BYTES];
    prepare_header(header, s->dtype_bytes, 0);  // ntokens is patched on close
    if (fwrite(header, 1, sizeof header, s->f) != sizeof header) comm_fatal("cannot write '%s': %s", s->tmp, strerror(errno));
    s->in_shard = 0;
}

// The shard gets its final name only once complete, so a crash never leaves a truncated one.
static void prepare_split_close(PrepareSplit *s) {
    uint8_t header[TOKFILE_HEADER_BYTES];
    prepare_header(header, s->dtype_bytes, s->in_shard);
    if (fseek(s->f, 0, SEEK_SET) != 0 || fwrite(header, 1, sizeof header, s->f) != sizeof header || fclose(s->f) != 0)
        comm_fatal("cannot write '%s': %s (disk full?)", s->tmp, strerror(errno));
    s->f = NULL;
    if (rename(s->tmp, s->path) != 0) comm_fatal("cannot rename '%s' to '%s': %s", s->tmp, s->path, strerror(errno));
    s->nshards++;
}

static void prepare_split_write(PrepareSplit *s, const uint8_t *tokens, uint64_t n) {
    while (n > 0) {
        if (!s->f) prepare_split_open(s);
        uint64_t room = s->max_tokens - s->in_shard, take = n < room ? n : room;
        if (fwrite(tokens, (size_t)s->dtype_bytes, take, s->f) != take)
            comm_fatal("cannot write '%s': %s (disk full?)", s->tmp, strerror(errno));
        tokens += take * (uint64_t)s->dtype_bytes;
        n -= take;
        s->in_shard += take;
        s->total += take;
        if (s->in_shard == s->max_tokens) prepare_split_close(s);
    }
}

// Closes the last shard, then removes higher-numbered shards an earlier run left in the
// directory: a reader taking DIR/train_*.bin must see this run's data only.
static void prepare_split_finish(PrepareSplit *s) {
    if (s->f) prepare_split_close(s);
    for (int i = s->nshards;; i++) {
        prepare_split_name(s, i);
        if (unlink(s->path) != 0) break;
    }
}

// after an error: the unfinished shard is dropped (its .tmp name never becomes final)
static void prepare_split_abandon(PrepareSplit *s) {
    if (!s->f) return;
    fclose(s->f);
    s->f = NULL;
    unlink(s->tmp);
}

static void prepare_split_free(PrepareSplit *s) {
    free(s->path);
    free(s->tmp);
}

// ---- documents and the train/validation split ----

static uint64_t prepare_splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// document k goes to validation when its hash, as a fraction of 2^64, falls below val_fraction
static bool prepare_doc_is_val(const Prepare *p, uint64_t k) {
    return (double)(prepare_splitmix64(k) >> 11) * 0x1.0p-53 < p->val_fraction;
}

// tokens [0, split) of doc to train, the rest to validation
static void prepare_send(Prepare *p, const PrepareBuf *doc, uint64_t split) {
    uint64_t n = doc->len / (size_t)p->dtype_bytes;
    prepare_split_write(&p->train, doc->data, split);
    prepare_split_write(&p->val, doc->data + split * (uint64_t)p->dtype_bytes, n - split);
}

// Ends document cur. The last document with tokens is held back: only at the end is it known
// whether it is the last of all, whose tail may have to become the validation set.
static void prepare_end_doc(Prepare *p) {
    p->ndocs++;
    if (p->cur.len == 0) return;
    if (p->pending.len) {
        uint64_t n = p->pending.len / (size_t)p->dtype_bytes;
        prepare_send(p, &p->pending, prepare_doc_is_val(p, p->pending_index) ? 0 : n);
    }
    PrepareBuf t = p->pending;
    p->pending = p->cur;
    p->cur = t;
    p->cur.len = 0;
    p->pending_index = p->ndocs - 1;
}

// A single document, or a run where no document hashed into validation, gives the last
// val_fraction of the last document's tokens to validation.
static void prepare_end_docs(Prepare *p) {
    if (!p->pending.len) return;
    uint64_t n = p->pending.len / (size_t)p->dtype_bytes;
    bool whole_val = p->ndocs > 1 && prepare_doc_is_val(p, p->pending_index);
    uint64_t split = whole_val ? 0 : n;
    if (!whole_val && (p->ndocs == 1 || p->val.total == 0)) split = (uint64_t)((1.0 - p->val_fraction) * (double)n);
    prepare_send(p, &p->pending, split);
}

// ---- progress ----

static void prepare_count(char out[16], uint64_t n) {
    if (n < 1000) snprintf(out, 16, "%llu", (unsigned long long)n);
    else if (n < 1000000) snprintf(out, 16, "%.1fK", n / 1e3);
    else if (n < 1000000000) snprintf(out, 16, "%.1fM", n / 1e6);
    else snprintf(out, 16, "%.1fB", n / 1e9);
}

// Redraws the bar in place ('\r'), done of all input bytes read (compressed bytes for .gz), at
// most every PREPARE_BAR_PERIOD seconds unless forced.
static void prepare_progress(Prepare *p, uint64_t done, bool force) {
    double now = comm_time();
    if (!force && now - p->t_drawn < PREPARE_BAR_PERIOD) return;
    p->t_drawn = now;
    double frac = p->bytes_total ? (double)done / (double)p->bytes_total : 1.0;
    if (frac > 1.0) frac = 1.0;  // a file that grew since it was measured
    char bar[PREPARE_BAR_WIDTH + 1], train[16], val[16];
    int filled = (int)(frac * PREPARE_BAR_WIDTH);
    for (int i = 0; i < PREPARE_BAR_WIDTH; i++) bar[i] = i < filled ? '#' : '-';
    bar[PREPARE_BAR_WIDTH] = '\0';
    prepare_count(train, p->train.total);
    prepare_count(val, p->val.total);
    double elapsed = now - p->t_start;
    comm_log("\rprepare [%s] %3d%%  %5.1f MB/s  train %6s tok  val %6s tok", bar, (int)(frac * 100),
             elapsed > 0 ? done / elapsed / 1e6 : 0.0, train, val);
    p->bar_drawn = true;
}

// ---- input ----

// Refills p->io from in; returns the bytes read (0 at the end of the input) or -1 after an error.
static long prepare_fill(Prepare *p, PrepareInput *in) {
    int got = gzread(in->gz, p->io, PREPARE_IO_BYTES);
    int err = Z_OK;
    const char *msg = gzerror(in->gz, &err);
    if (got < 0) {
        prepare_fail(p, "cannot read input '%s': %s", in->path, msg);
        return -1;
    }
    // gzread reports a gzip stream cut short as a quiet end of input; gzerror tells them apart
    if (got == 0 && err == Z_BUF_ERROR) {
        prepare_fail(p, "input '%s' ends in the middle of its gzip stream (truncated?)", in->path);
        return -1;
    }
    in->pos = 0;
    in->len = (size_t)got;
    prepare_progress(p, p->bytes_before + (uint64_t)gzoffset(in->gz), false);
    return got;
}

// Reads the next line, without its '\n', into p->line: 1 for a line, 0 at the end of input, -1 on error.
static int prepare_read_line(Prepare *p, PrepareInput *in) {
    p->line.len = 0;
    for (;;) {
        if (in->pos == in->len) {
            long got = prepare_fill(p, in);
            if (got < 0) return -1;
            if (got == 0) return p->line.len > 0;  // a last line without '\n' still counts
        }
        uint8_t *start = p->io + in->pos, *nl = memchr(start, '\n', in->len - in->pos);
        size_t n = nl ? (size_t)(nl - start) : in->len - in->pos;
        prepare_buf_append(&p->line, start, n);
        in->pos += n + (nl != NULL);
        if (nl) return 1;
    }
}

// ---- a scanner for one JSON Lines object ----

typedef struct {
    Prepare *p;
    const uint8_t *begin, *s, *end;  // the line, and the scan position in it
    char err[160];                   // the first problem found; empty while fine
    bool has_text, has_ids;          // what the line's object held
} PrepareJson;

static bool prepare_json_error(PrepareJson *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool prepare_json_error(PrepareJson *j, const char *fmt, ...) {
    if (j->err[0]) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->err, sizeof j->err, fmt, ap);
    va_end(ap);
    return false;
}

static void prepare_json_ws(PrepareJson *j) {
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\r' || *j->s == '\n')) j->s++;
}

// the next character after whitespace, or -1 at the end of the line
static int prepare_json_peek(PrepareJson *j) {
    prepare_json_ws(j);
    return j->s < j->end ? *j->s : -1;
}

// consumes c (after whitespace) if it is next
static bool prepare_json_eat(PrepareJson *j, char c) {
    if (prepare_json_peek(j) != (uint8_t)c) return false;
    j->s++;
    return true;
}

static void prepare_utf8(PrepareBuf *out, uint32_t cp) {
    static const uint8_t lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};  // by length
    size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    uint8_t b[4];
    b[0] = (uint8_t)(lead[n] | cp >> (6 * (n - 1)));
    for (size_t i = 1; i < n; i++) b[i] = (uint8_t)(0x80 | (cp >> (6 * (n - 1 - i)) & 0x3F));
    prepare_buf_append(out, b, n);
}

// four hex digits after "\u"
static bool prepare_json_hex4(PrepareJson *j, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++, j->s++) {
        int c = j->s < j->end ? *j->s : -1;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return prepare_json_error(j, "malformed JSON: \\u needs four hex digits");
        *v = *v << 4 | (uint32_t)d;
    }
    return true;
}

// Decodes the string at j->s (its opening quote) as UTF-8 into out, or only checks it when out is NULL.
static bool prepare_json_string(PrepareJson *j, PrepareBuf *out) {
    if (!prepare_json_eat(j, '"')) return prepare_json_error(j, "malformed JSON: expected a string");
    if (out) out->len = 0;
    for (;;) {
        const uint8_t *run = j->s;  // unescaped runs are copied in one go
        while (j->s < j->end && *j->s != '"' && *j->s != '\\' && *j->s >= 0x20) j->s++;
        if (out) prepare_buf_append(out, run, (size_t)(j->s - run));
        if (j->s == j->end) return prepare_json_error(j, "malformed JSON: unterminated string");
        uint8_t c = *j->s++;
        if (c == '"') return true;
        if (c != '\\') return prepare_json_error(j, "malformed JSON: raw control character in a string");
        uint8_t e = j->s < j->end ? *j->s++ : 0, lit;
        uint32_t cp;
        switch (e) {
        case '"': case '\\': case '/': lit = e; break;
        case 'b': lit = '\b'; break;
        case 'f': lit = '\f'; break;
        case 'n': lit = '\n'; break;
        case 'r': lit = '\r'; break;
        case 't': lit = '\t'; break;
        case 'u':
            if (!prepare_json_hex4(j, &cp)) return false;
            if (cp >= 0xD800 && cp < 0xDC00 && j->end - j->s >= 2 && j->s[0] == '\\' && j->s[1] == 'u') {
                const uint8_t *back = j->s;
                uint32_t lo;
                j->s += 2;
                if (!prepare_json_hex4(j, &lo)) return false;
                if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else j->s = back;  // not a low surrogate: decoded on its own next
            }
            // a lone surrogate has no UTF-8 form: U+FFFD, as Python's errors="replace" gives
            if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
            if (out) prepare_utf8(out, cp);
            continue;
        default: return prepare_json_error(j, "malformed JSON: bad escape in a string");
        }
        if (out) prepare_buf_append(out, &lit, 1);
    }
}

static bool prepare_json_digits(PrepareJson *j, uint64_t *mag) {
    if (j->s == j->end || *j->s < '0' || *j->s > '9') return prepare_json_error(j, "malformed JSON: expected a digit");
    for (; j->s < j->end && *j->s >= '0' && *j->s <= '9'; j->s++)
        *mag = *mag >= UINT64_MAX / 10 ? UINT64_MAX : *mag * 10 + (uint64_t)(*j->s - '0');  // saturates
    return true;
}

// A JSON number at j->s; *is_int tells it has no fraction or exponent, and then *neg and *mag
// (saturated) give its value.
static bool prepare_json_number(PrepareJson *j, bool *is_int, bool *neg, uint64_t *mag) {
    uint64_t ignored = 0;
    *neg = j->s < j->end && *j->s == '-';
    j->s += *neg;
    *mag = 0;
    const uint8_t *first = j->s;
    if (!prepare_json_digits(j, mag)) return false;
    if (*first == '0' && j->s - first > 1) return prepare_json_error(j, "malformed JSON: a number with a leading zero");
    *is_int = true;
    if (j->s < j->end && *j->s == '.') {
        j->s++;
        *is_int = false;
        if (!prepare_json_digits(j, &ignored)) return false;
    }
    if (j->s < j->end && (*j->s == 'e' || *j->s == 'E')) {
        j->s++;
        *is_int = false;
        if (j->s < j->end && (*j->s == '+' || *j->s == '-')) j->s++;
        if (!prepare_json_digits(j, &ignored)) return false;
    }
    return true;
}

// "input_ids": [ints] (j->s at the '['), encoded into p->cur
static bool prepare_json_ids(PrepareJson *j) {
    Prepare *p = j->p;
    j->s++;
    p->cur.len = 0;
    if (prepare_json_eat(j, ']')) return true;
    do {
        int c = prepare_json_peek(j);
        if (c != '-' && (c < '0' || c > '9')) return prepare_json_error(j, "\"input_ids\" must hold integers only");
        const uint8_t *lit = j->s;
        bool is_int, neg;
        uint64_t id;
        if (!prepare_json_number(j, &is_int, &neg, &id)) return false;
        int lit_len = (int)(j->s - lit);
        j->s = lit;  // errors below point at the id
        if (!is_int) return prepare_json_error(j, "\"input_ids\" must hold integers only, not %.*s", lit_len, lit);
        if (neg && id > 0) return prepare_json_error(j, "token id %.*s is negative", lit_len, lit);
        if (p->dtype_bytes == 2 && id > UINT16_MAX)
            return prepare_json_error(j, "token id %.*s does not fit --dtype uint16: pass --dtype uint32", lit_len, lit);
        if (id > UINT32_MAX) return prepare_json_error(j, "token id %.*s does not fit --dtype uint32", lit_len, lit);
        j->s += lit_len;
        prepare_push_token(p, &p->cur, (uint32_t)id);
    } while (prepare_json_eat(j, ','));
    return prepare_json_eat(j, ']') || prepare_json_error(j, "malformed JSON: expected ',' or ']'");
}

static bool prepare_json_value(PrepareJson *j, int depth);

static bool prepare_key_is(const PrepareBuf *key, const char *name) {
    return key->len == strlen(name) && !memcmp(key->data, name, key->len);
}

// A member of the line's own object: "text" and "input_ids" are kept, the rest checked and skipped.
static bool prepare_json_member(PrepareJson *j) {
    Prepare *p = j->p;
    int c = prepare_json_peek(j);
    if (prepare_key_is(&p->key, "text") && c == '"') return j->has_text = prepare_json_string(j, &p->text);
    if (prepare_key_is(&p->key, "input_ids") && c == '[') return j->has_ids = prepare_json_ids(j);
    return prepare_json_value(j, 1);
}

// The members or elements of an object or array up to close (its opener already eaten); depth 0
// is the line's own object.
static bool prepare_json_list(PrepareJson *j, char close, bool members, int depth) {
    if (depth > PREPARE_JSON_DEPTH) return prepare_json_error(j, "JSON nested deeper than %d levels", PREPARE_JSON_DEPTH);
    if (prepare_json_eat(j, close)) return true;
    do {
        if (members) {
            if (!prepare_json_string(j, depth == 0 ? &j->p->key : NULL)) return false;
            if (!prepare_json_eat(j, ':')) return prepare_json_error(j, "malformed JSON: expected ':' after a key");
        }
        if (!(depth == 0 ? prepare_json_member(j) : prepare_json_value(j, depth + 1))) return false;
    } while (prepare_json_eat(j, ','));
    return prepare_json_eat(j, close) || prepare_json_error(j, "malformed JSON: expected ',' or '%c'", close);
}

static bool prepare_json_value(PrepareJson *j, int depth) {
    static const char *const literals[] = {"true", "false", "null"};
    int c = prepare_json_peek(j);
    if (c == '"') return prepare_json_string(j, NULL);
    if (c == '{' || c == '[') {
        j->s++;
        return prepare_json_list(j, c == '{' ? '}' : ']', c == '{', depth);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        bool is_int, neg;
        uint64_t mag;
        return prepare_json_number(j, &is_int, &neg, &mag);
    }
    for (size_t i = 0; i < sizeof literals / sizeof *literals; i++) {
        size_t n = strlen(literals[i]);
        if ((size_t)(j->end - j->s) >= n && !memcmp(j->s, literals[i], n)) {
            j->s += n;
            return true;
        }
    }
    return prepare_json_error(j, "malformed JSON: expected a value");
}

// One JSON Lines object into p->cur: its "input_ids" as they are (they win over "text" when an
// object has both: they are the tokenization its producer chose), else the bytes of its "text"
// and '\n' as the document separator.
static bool prepare_json_object(PrepareJson *j) {
    Prepare *p = j->p;
    if (!prepare_json_eat(j, '{')) return prepare_json_error(j, "malformed JSON: a line must hold one object");
    if (!prepare_json_list(j, '}', true, 0)) return false;
    if (prepare_json_peek(j) >= 0) return prepare_json_error(j, "malformed JSON: text after the object");
    if (!j->has_ids && !j->has_text) return prepare_json_error(j, "the object has no \"text\" string and no \"input_ids\" array");
    if (!j->has_ids) {
        p->cur.len = 0;
        prepare_push_bytes(p, &p->cur, p->text.data, p->text.len);
        prepare_push_token(p, &p->cur, '\n');
    }
    return true;
}

static int prepare_jsonl(Prepare *p, PrepareInput *in) {
    int got;
    while ((got = prepare_read_line(p, in)) > 0) {
        in->line_no++;
        PrepareJson j = {.p = p, .begin = p->line.data, .s = p->line.data, .end = p->line.data + p->line.len};
        if (prepare_json_peek(&j) < 0) continue;  // blank line
        if (!prepare_json_object(&j))
            return prepare_fail(p, "%s:%llu:%zu: %s", in->path, (unsigned long long)in->line_no,
                                (size_t)(j.s - j.begin) + 1, j.err);
        prepare_end_doc(p);
    }
    return got < 0;
}

// a plain text file: its bytes, as one document
static int prepare_text(Prepare *p, PrepareInput *in) {
    long got;
    while ((got = prepare_fill(p, in)) > 0) prepare_push_bytes(p, &p->cur, p->io, (size_t)got);
    if (got < 0) return 1;
    prepare_end_doc(p);
    return 0;
}

static bool prepare_is_jsonl(const char *path) {
    size_t n = strlen(path);
    if (n >= 3 && !strcmp(path + n - 3, ".gz")) n -= 3;  // the kind is the name under the compression
    return (n >= 6 && !strncmp(path + n - 6, ".jsonl", 6)) || (n >= 5 && !strncmp(path + n - 5, ".json", 5));
}

static int prepare_input(Prepare *p, const char *path) {
    errno = 0;  // gzopen leaves it 0 when it ran out of memory
    PrepareInput in = {.gz = gzopen(path, "rb"), .path = path};
    if (!in.gz) return prepare_fail(p, "cannot open input '%s': %s", path, strerror(errno ? errno : ENOMEM));
    gzbuffer(in.gz, PREPARE_IO_BYTES);
    int rc = prepare_is_jsonl(path) ? prepare_jsonl(p, &in) : prepare_text(p, &in);
    if (!rc) p->bytes_before += (uint64_t)gzoffset(in.gz);
    gzclose(in.gz);
    return rc;
}

// ---- flags ----

// mkdir -p
static int prepare_mkdirs(Prepare *p, const char *dir) {
    char *path = mallocCheck(strlen(dir) + 1);
    strcpy(path, dir);
    int rc = 0;
    for (char *c = path + 1;; c++) {
        if (*c != '/' && *c != '\0') continue;
        char keep = *c;
        *c = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            rc = prepare_fail(p, "cannot create output directory '%s' (--output): %s", path, strerror(errno));
            break;
        }
        *c = keep;
        if (!keep) break;
    }
    free(path);
    struct stat st;
    if (!rc && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))) rc = prepare_fail(p, "--output '%s' is not a directory", dir);
    if (!rc && access(dir, W_OK | X_OK) != 0) rc = prepare_fail(p, "cannot write to --output '%s': %s", dir, strerror(errno));
    return rc;
}

static int prepare_parse(Prepare *p, int argc, char **argv) {
    p->inputs = mallocCheck((size_t)argc * sizeof *p->inputs);
    p->val_fraction = 0.01;
    p->dtype_bytes = 2;
    p->shard_tokens = 100000000;
    bool in_inputs = false;  // after --input, bare arguments are more inputs
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0) {
            if (!in_inputs) return prepare_fail(p, "unexpected argument '%s' (input files follow --input)", arg);
            p->inputs[p->ninputs++] = arg;
            continue;
        }
        in_inputs = false;
        // --flag=value or --flag value
        const char *eq = strchr(arg, '='), *value;
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(name_len < sizeof name - 1 ? name_len : sizeof name - 1), arg);
        if (eq) value = eq + 1;
        else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) value = argv[++i];
        else if (!strcmp(name, "--input")) return prepare_fail(p, "--input needs at least one file");
        else return prepare_fail(p, "%s needs a value", name);
        if (!*value) return prepare_fail(p, "%s needs a value", name);
        char *rest;
        if (!strcmp(name, "--input")) {
            p->inputs[p->ninputs++] = value;
            in_inputs = true;
        } else if (!strcmp(name, "--output")) {
            p->output = value;
        } else if (!strcmp(name, "--val_fraction")) {
            p->val_fraction = strtod(value, &rest);
            if (rest == value || *rest || !(p->val_fraction >= 0 && p->val_fraction < 1))
                return prepare_fail(p, "--val_fraction expects a number in [0, 1), got '%s'", value);
        } else if (!strcmp(name, "--tokenizer")) {
            if (strcmp(value, "byte") != 0)
                return prepare_fail(p, "--tokenizer '%s' is not supported by prepare (only 'byte'); pre-tokenized data can come as JSON Lines with \"input_ids\"", value);
        } else if (!strcmp(name, "--dtype")) {
            if (!strcmp(value, "uint16")) p->dtype_bytes = 2;
            else if (!strcmp(value, "uint32")) p->dtype_bytes = 4;
            else return prepare_fail(p, "--dtype must be uint16 or uint32, got '%s'", value);
        } else if (!strcmp(name, "--shard_tokens")) {
            errno = 0;
            p->shard_tokens = strtoull(value, &rest, 10);
            if (value[0] < '0' || value[0] > '9' || *rest || errno || p->shard_tokens == 0)
                return prepare_fail(p, "--shard_tokens expects a positive integer, got '%s'", value);
        } else {
            return prepare_fail(p, "unknown flag '%s' for prepare (flags: --input, --output, --val_fraction, --tokenizer, --dtype, --shard_tokens)", name);
        }
    }
    if (!p->ninputs) return prepare_fail(p, "prepare needs --input FILE [FILE ...]");
    if (!p->output) return prepare_fail(p, "prepare needs --output DIR");
    // every input must be there before anything is written
    for (int i = 0; i < p->ninputs; i++) {
        struct stat st;
        if (stat(p->inputs[i], &st) != 0) return prepare_fail(p, "cannot open input '%s': %s", p->inputs[i], strerror(errno));
        if (S_ISDIR(st.st_mode)) return prepare_fail(p, "input '%s' is a directory (give its files)", p->inputs[i]);
        p->bytes_total += (uint64_t)st.st_size;
    }
    return prepare_mkdirs(p, p->output);
}

static int prepare_run(Prepare *p) {
    prepare_split_init(&p->train, p, "train");
    prepare_split_init(&p->val, p, "val");
    p->io = mallocCheck(PREPARE_IO_BYTES);
    p->t_start = p->t_drawn = comm_time();  // the first redraw comes after one period
    for (int i = 0; i < p->ninputs; i++)
        if (prepare_input(p, p->inputs[i])) return 1;
    prepare_end_docs(p);
    if (p->train.total + p->val.total == 0) return prepare_fail(p, "the inputs hold no tokens");
    prepare_split_finish(&p->train);
    prepare_split_finish(&p->val);
    prepare_progress(p, p->bytes_total, true);
    comm_log("\nprepare: %llu documents, %llu train tokens in %d shards, %llu val tokens in %d shards -> %s\n",
             (unsigned long long)p->ndocs, (unsigned long long)p->train.total, p->train.nshards,
             (unsigned long long)p->val.total, p->val.nshards, p->output);
    return 0;
}

int data_prepare(int argc, char **argv) {
    if (comm_info.rank != 0) return 0;
    Prepare p = {0};
    int rc = prepare_parse(&p, argc, argv);
    if (!rc) rc = prepare_run(&p);
    prepare_split_abandon(&p.train);
    prepare_split_abandon(&p.val);
    prepare_split_free(&p.train);
    prepare_split_free(&p.val);
    PrepareBuf *bufs[] = {&p.cur, &p.pending, &p.line, &p.text, &p.key};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]->data);
    free(p.io);
    free(p.inputs);
    return rc;
}
