// prepare: `fsdpc prepare` turns text files and JSON Lines (plain or gzipped) into token shards,
// the input split among the MPI ranks, each writing shards of its own.
#include "prepare.h"
#include "../../base/clock.h"
#include "../../base/err.h"
#include "../../base/log.h"
#include "../../base/path.h"
#include "../../base/wlock.h"
#include "../format/gz.h"
#include "../format/shardfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../../comm/comm.h"
#include "../../comm/io.h"
#include "../../base/rng.h"
#include "../rows/rows.h"
#include "../source/source.h"
#include "../format/sniff.h"
#include "../text/tokenizer.h"
#include "shards.h"
#include "../../base/buf.h"
#include "../../base/json.h"
#include "../../base/cli.h"

#define PREPARE_IO_BYTES (1 << 20)
#define PREPARE_BAR_WIDTH 20
#define PREPARE_BAR_PERIOD 0.2  // seconds between progress redraws
// Shards per split at most: their names hold six digits, and a folder of a million files (--shard_tokens 1)
// is a mistake, not a dataset.
#define PREPARE_MAX_SHARDS 100000

// One output split (train or val): a sequence of shards DIR/NAME_NNNNNN.bin. Rank r of W writes
// the shards numbered r, r + W, r + 2W, ...: no two ranks write one file.
struct Prepare;
typedef struct {
    struct Prepare *p;    // whose first error a failed write becomes
    const char *dir, *name;
    int dtype_bytes;
    int rank, world;
    uint64_t max_tokens;  // per shard
    ShardFile f;          // the open shard (shards_file_is_open), written under its temporary name
    char *path;           // a shard's name (prepare_split_name)
    size_t path_cap;
    uint64_t total;
    int nshards;          // completed shards
} PrepareSplit;

// The part of one input a rank reads: a whole file, or a byte range of a plain JSON Lines file
// (the lines that start in it).
typedef struct {
    int file;
    uint64_t begin, end;  // end UINT64_MAX: to the end of the file
} PrepareWork;

typedef struct Prepare {
    // what to do (PrepareOptions)
    const char **inputs;   // (ninputs) the caller's, then (inputs_owned) their files, prepare_expand's
    int ninputs;
    char *output;
    char *tokenizer;  // "": the byte tokenizer
    char id[WLOCK_ID_LEN + 1];  // this rank's writer id: its temporaries' names
    char *lock;       // rank 0: the writer lock of --output
    double val_fraction;
    int dtype_bytes;
    bool dtype_given;
    int overwrite;
    uint64_t shard_tokens;
    // the inputs, and this rank's share of them
    uint64_t *sizes;
    bool *gzipped;
    bool inputs_owned;      // inputs holds prepare_expand's strings rather than the caller's
    bool *as_docs;          // read through data/rows and shards_build (zstd, Arrow, Parquet), as docs_kind/docs_comp say
    DocsKind *docs_kind;
    DocsCompression *docs_comp;
    PrepareWork *work;
    int nwork;
    // work
    Tokenizer *tok;
    bool check_ids;      // "input_ids" must be below the vocabulary (an explicit --tokenizer)
    PrepareSplit train, val;
    Buf cur;      // the document being read, encoded as output tokens
    Buf pending;  // the last document with tokens, held back (see prepare_end_doc)
    Buf line, text;
    int32_t *ids;        // tokenizer output
    size_t ids_cap;
    uint8_t *io;         // PREPARE_IO_BYTES of input
    uint64_t ndocs;
    int cur_file, pending_file;  // where the current and the pending document start
    uint64_t cur_offset, pending_offset;
    char err[1024];      // the first error of this rank; empty while fine
    bool stopped;        // a stop signal ended this rank's reading (comm_stop_signal)
    DocsFields fields;   // the inputs' row fields, "text" and "input_ids" used
    // progress (rank 0 draws its own share)
    uint64_t bytes_total, bytes_before;  // this rank's input; inputs already finished
    double t_start, t_drawn;
    bool bar_drawn;
} Prepare;

typedef struct {
    GzReader *gz;         // a whole file (plain or gzip) ...
    int fd;               // ... or a range of a plain file (gz NULL)
    const char *path;
    uint64_t base;        // offset in the (uncompressed) file of p->io[0]
    uint64_t end;         // lines starting here or later belong to the next range
    uint64_t range_begin; // where the range starts (for the progress of a range)
    size_t pos, len;      // unread input is p->io[pos, len)
    uint64_t line_start;  // offset of the line just read
    uint64_t line_no;     // its number; 0 when the range began inside the file (counted on error)
} PrepareInput;

// Records this rank's first error (agreed on through prepare_sync); returns 1.
static int prepare_fail(Prepare *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int prepare_fail(Prepare *p, const char *fmt, ...) {
    if (p->err[0]) return 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof p->err, fmt, ap);
    va_end(ap);
    return 1;
}

// Collective: -1 on every rank when any has failed, with the lowest failing rank's line in p->err,
// else 0. Ends rank 0's progress bar line first so that the error line starts its own.
static int prepare_sync(Prepare *p) {
    if (p->bar_drawn) fputc('\n', stderr);
    p->bar_drawn = false;
    return comm_agree(p->err[0] ? p->err : NULL, p->err, sizeof p->err);
}

// The document in p->text into p->cur (see shards_put_text).
static void prepare_encode_text(Prepare *p) {
    p->cur.len = 0;
    shards_put_text(&p->cur, p->dtype_bytes, p->tok, (const char *)p->text.data, p->text.len, &p->ids, &p->ids_cap);
}

// ---- shard writing ----

static void prepare_split_init(PrepareSplit *s, Prepare *p, const char *name) {
    memset(s, 0, sizeof *s);
    s->p = p;
    s->dir = p->output;
    s->name = name;
    s->dtype_bytes = p->dtype_bytes;
    s->rank = comm_info.rank;
    s->world = comm_info.world;
    s->max_tokens = p->shard_tokens;
    s->path_cap = strlen(p->output) + strlen(name) + 32;
    s->path = mallocCheck(s->path_cap);
}

// names this rank's shard number `index` (0, 1, ... for this rank)
static void prepare_split_name(PrepareSplit *s, int index) {
    snprintf(s->path, s->path_cap, "%s/%s_%06lld.bin", s->dir, s->name, (long long)index * s->world + s->rank);
}

// The shard gets its final name only once complete, so a crash never leaves a truncated one.
// After an earlier error (the first is kept) the shard is only removed.
static void prepare_split_close(PrepareSplit *s) {
    if (shards_file_close(&s->f, s->p->err[0] ? -1 : 0, s->p->err, sizeof s->p->err) == 0) s->nshards++;
}

// Nothing more is written after a failure (this rank's first error, in s->p->err).
static void prepare_split_write(PrepareSplit *s, const uint8_t *tokens, uint64_t n) {
    Prepare *p = s->p;
    while (n > 0 && !p->err[0]) {
        if (!shards_file_is_open(&s->f)) {
            if ((long long)s->nshards * s->world + s->rank >= PREPARE_MAX_SHARDS) {
                prepare_fail(p, "prepare would write more than %d %s shards (--shard_tokens %llu): the limit is %d shard files per split; "
                             "give a larger --shard_tokens", PREPARE_MAX_SHARDS, s->name, (unsigned long long)s->max_tokens, PREPARE_MAX_SHARDS);
                return;
            }
            prepare_split_name(s, s->nshards);
            if (shards_file_open(&s->f, s->path, p->id, s->dtype_bytes, PREPARE_IO_BYTES, p->err, sizeof p->err)) return;
        }
        uint64_t room = s->max_tokens - s->f.count, take = n < room ? n : room;
        if (shards_file_write(&s->f, tokens, take, p->err, sizeof p->err)) return;
        tokens += take * (uint64_t)s->dtype_bytes;
        n -= take;
        s->total += take;
        if (s->f.count == s->max_tokens) prepare_split_close(s);
    }
}

// After an error on any rank: the unfinished shard is dropped (its temporary name never becomes
// final) and the finished ones removed, so a failed run leaves nothing behind.
static void prepare_split_abandon(PrepareSplit *s) {
    if (shards_file_is_open(&s->f)) shards_file_close(&s->f, -1, NULL, 0);
    for (int i = 0; i < s->nshards; i++) {
        prepare_split_name(s, i);
        unlink(s->path);
    }
    s->nshards = 0;
}

static void prepare_split_free(PrepareSplit *s) { free(s->path); }

// Collective: prepare_sync after a failure anywhere makes every rank remove what it wrote.
static int prepare_failed(Prepare *p) {
    double failed = p->err[0] != 0;
    comm_allreduce_max_f64(comm_world(), &failed, 1);
    if (failed) {
        prepare_split_abandon(&p->train);
        prepare_split_abandon(&p->val);
    }
    return prepare_sync(p);
}

// ---- documents and the train/validation split ----

// The document starting at byte `offset` of input `file` goes to validation when its hash, as a
// fraction of 2^64, falls below val_fraction: the same choice whichever rank reads it.
static bool prepare_doc_is_val(const Prepare *p, int file, uint64_t offset) {
    uint64_t h = rng_splitmix64(rng_splitmix64((uint64_t)file) ^ offset);
    return (double)(h >> 11) * 0x1.0p-53 < p->val_fraction;
}

// tokens [0, split) of doc to train, the rest to validation
static void prepare_send(Prepare *p, const Buf *doc, uint64_t split) {
    uint64_t n = doc->len / (size_t)p->dtype_bytes;
    prepare_split_write(&p->train, doc->data, split);
    prepare_split_write(&p->val, doc->data + split * (uint64_t)p->dtype_bytes, n - split);
}

static void prepare_send_pending(Prepare *p) {
    uint64_t n = p->pending.len / (size_t)p->dtype_bytes;
    prepare_send(p, &p->pending, prepare_doc_is_val(p, p->pending_file, p->pending_offset) ? 0 : n);
    p->pending.len = 0;
}

// Ends document cur. The last document with tokens is held back: only at the end is it known
// whether it is the last of all, whose tail may have to become the validation set.
static void prepare_end_doc(Prepare *p) {
    p->ndocs++;
    if (p->cur.len == 0) return;
    if (p->pending.len) prepare_send_pending(p);
    Buf t = p->pending;
    p->pending = p->cur;
    p->cur = t;
    p->cur.len = 0;
    p->pending_file = p->cur_file;
    p->pending_offset = p->cur_offset;
}

// Collective. A single document, or a run where no document hashed into validation, gives the
// last val_fraction of the last document's tokens to validation; the last document is the one
// that starts last in the inputs, whichever rank holds it.
static void prepare_end_docs(Prepare *p) {
    CommGroup *world = comm_world();
    double last_file = p->pending.len ? p->pending_file : -1.0;
    comm_allreduce_max_f64(world, &last_file, 1);
    double last_offset = p->pending.len && p->pending_file == last_file ? (double)p->pending_offset : -1.0;
    comm_allreduce_max_f64(world, &last_offset, 1);
    bool mine = p->pending.len && p->pending_file == last_file && (double)p->pending_offset == last_offset;
    if (p->pending.len && !mine) prepare_send_pending(p);
    double sums[2] = {(double)p->ndocs, (double)p->val.total};
    comm_allreduce_sum_f64(world, sums, 2);
    if (!mine) return;
    uint64_t n = p->pending.len / (size_t)p->dtype_bytes;
    bool whole_val = sums[0] > 1 && prepare_doc_is_val(p, p->pending_file, p->pending_offset);
    uint64_t split = whole_val ? 0 : n;
    if (!whole_val && (sums[0] == 1 || sums[1] == 0)) split = (uint64_t)((1.0 - p->val_fraction) * (double)n);
    prepare_send(p, &p->pending, split);
    p->pending.len = 0;
}

// ---- progress ----

static void prepare_count(char out[16], uint64_t n) {
    if (n < 1000) snprintf(out, 16, "%llu", (unsigned long long)n);
    else if (n < 1000000) snprintf(out, 16, "%.1fK", n / 1e3);
    else if (n < 1000000000) snprintf(out, 16, "%.1fM", n / 1e6);
    else snprintf(out, 16, "%.1fB", n / 1e9);
}

// Redraws rank 0's bar in place ('\r'), done of its input bytes read (compressed bytes for .gz),
// at most every PREPARE_BAR_PERIOD seconds unless forced.
static void prepare_progress(Prepare *p, uint64_t done, bool force) {
    if (comm_info.rank != 0) return;
    double now = clock_now_s();
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
    log_msg("\rprepare [%s] %3d%%  %5.1f MB/s  train %6s tok  val %6s tok%s", bar, (int)(frac * 100),
            elapsed > 0 ? done / elapsed / 1e6 : 0.0, train, val, comm_info.world > 1 ? "  (rank 0)" : "");
    p->bar_drawn = true;
}

// ---- input ----

// Refills p->io from in; returns the bytes read (0 at the end of the input) or -1 after an error.
static long prepare_fill(Prepare *p, PrepareInput *in) {
    if (comm_stop_signal) return p->stopped = true, -1;  // polled once per PREPARE_IO_BYTES of input
    in->base += in->len;
    in->pos = in->len = 0;
    long got;
    if (in->gz) {
        GzError kind;
        const char *why;
        got = gz_read(in->gz, p->io, PREPARE_IO_BYTES, &kind, &why);
        if (kind == GZ_TRUNCATED) return prepare_fail(p, "input '%s' ends in the middle of its gzip stream (truncated?)", in->path), -1;
        if (kind == GZ_TRAILING) return prepare_fail(p, "input '%s': %s: remove them, or recompress the file", in->path, why), -1;
        if (got < 0) return prepare_fail(p, "cannot read input '%s': %s", in->path, why), -1;
        prepare_progress(p, p->bytes_before + gz_offset(in->gz), false);
    } else {
        do got = read(in->fd, p->io, PREPARE_IO_BYTES);
        while (got < 0 && errno == EINTR);
        if (got < 0) return prepare_fail(p, "cannot read input '%s': %s", in->path, strerror(errno)), -1;
        uint64_t read_to = in->base + (uint64_t)got;  // the range's reading starts a byte early
        prepare_progress(p, p->bytes_before + (read_to > in->range_begin ? read_to - in->range_begin : 0), false);
    }
    in->len = (size_t)got;
    return got;
}

// Reads the next line, without its '\n', into p->line: 1 for a line, 0 at the end of input, -1 on error.
static int prepare_read_line(Prepare *p, PrepareInput *in) {
    p->line.len = 0;
    in->line_start = in->base + in->pos;
    for (;;) {
        if (in->pos == in->len) {
            long got = prepare_fill(p, in);
            if (got < 0) return -1;
            if (got == 0) return p->line.len > 0;  // a last line without '\n' still counts
        }
        uint8_t *start = p->io + in->pos, *nl = memchr(start, '\n', in->len - in->pos);
        size_t n = nl ? (size_t)(nl - start) : in->len - in->pos;
        buf_append(&p->line, start, n);
        in->pos += n + (nl != NULL);
        if (nl) return 1;
    }
}

// The number of the line starting at byte `offset` of a plain file (for errors in a range that
// began inside the file).
static uint64_t prepare_line_number(Prepare *p, const char *path, uint64_t offset) {
    int fd = path_open_read(path);
    uint64_t line = 1, at = 0;
    for (ssize_t got; fd >= 0 && at < offset && (got = read(fd, p->io, PREPARE_IO_BYTES)) > 0; at += (uint64_t)got) {
        size_t n = offset - at < (uint64_t)got ? (size_t)(offset - at) : (size_t)got;
        for (const uint8_t *c = p->io, *e = p->io + n; (c = memchr(c, '\n', (size_t)(e - c))); c++) line++;
    }
    if (fd >= 0) close(fd);
    return line;
}

// ---- one JSON Lines object ----

// finetuning rows' members (attention_mask or labels, a chat, prompt/completion, Alpaca): such
// rows are samples with their own loss masks, which a token stream cannot keep
enum { ROWKEY_MASK = 1, ROWKEY_CHAT = 2, ROWKEY_PROMPT = 4, ROWKEY_COMPLETION = 8, ROWKEY_INSTRUCTION = 16, ROWKEY_OUTPUT = 32 };

typedef struct {
    Prepare *p;
    const char *line;  // the line, line[0, n)
    size_t n;
    size_t col;        // where the first problem is (1-based)
    char err[200];     // the first problem found; empty while fine
} PrepareJson;

// the problem at byte `at` of the line; returns false
static bool prepare_json_error(PrepareJson *j, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool prepare_json_error(PrepareJson *j, size_t at, const char *fmt, ...) {
    j->col = at + 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->err, sizeof j->err, fmt, ap);
    va_end(ap);
    return false;
}

// the first byte of line[0, n) that is not JSON whitespace, n when there is none (a blank line)
static size_t prepare_json_start(const char *line, size_t n) {
    size_t i = 0;
    while (i < n && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n')) i++;
    return i;
}

// "input_ids" (an array) encoded into p->cur. An id's message quotes it as written, so the
// literal is read back from the line.
static bool prepare_json_ids(PrepareJson *j, const JsonValue *ids) {
    Prepare *p = j->p;
    p->cur.len = 0;
    for (size_t i = 0; i < ids->len; i++) {
        const JsonValue *v = &ids->items[i];
        if (v->type != JSON_NUMBER) return prepare_json_error(j, v->at, "\"input_ids\" must hold integers only");
        const char *lit = j->line + v->at;
        int lit_len = 0;
        while (v->at + (size_t)lit_len < j->n && lit[lit_len] && strchr("0123456789+-.eE", lit[lit_len])) lit_len++;
        bool neg = lit[0] == '-';
        if (memchr(lit, '.', (size_t)lit_len) || memchr(lit, 'e', (size_t)lit_len) || memchr(lit, 'E', (size_t)lit_len))
            return prepare_json_error(j, v->at, "\"input_ids\" must hold integers only, not %.*s", lit_len, lit);
        // the magnitude, saturated beyond int64
        uint64_t id = !v->is_int ? UINT64_MAX : v->integer < 0 ? 0 - (uint64_t)v->integer : (uint64_t)v->integer;
        if (neg && id > 0) return prepare_json_error(j, v->at, "token id %.*s is negative", lit_len, lit);
        if (p->dtype_bytes == 2 && id > UINT16_MAX)
            return prepare_json_error(j, v->at, "token id %.*s does not fit --dtype uint16: pass --dtype uint32", lit_len, lit);
        if (id > UINT32_MAX) return prepare_json_error(j, v->at, "token id %.*s does not fit --dtype uint32", lit_len, lit);
        if (p->check_ids && id >= (uint64_t)tok_vocab_size(p->tok))
            return prepare_json_error(j, v->at, "token id %.*s is not below the vocabulary size %d of --tokenizer %s", lit_len, lit,
                                      tok_vocab_size(p->tok), tok_path(p->tok));
        shards_put(&p->cur, p->dtype_bytes, (uint32_t)id);
    }
    return true;
}

static bool prepare_key_is(const JsonValue *m, const char *name) {
    return m->key_len == strlen(name) && !memcmp(m->key, name, m->key_len);
}

// The members of the line's object, in order: "text" and "input_ids" are kept (the last of each),
// the finetuning rows' keys noted.
static bool prepare_json_members(PrepareJson *j, const JsonValue *obj, bool *has_text, bool *has_ids, unsigned *row_keys) {
    Prepare *p = j->p;
    static const char *const keys[] = {"attention_mask", "labels", "messages", "conversations", "prompt", "completion",
                                       "instruction", "output"};
    static const unsigned bits[] = {ROWKEY_MASK, ROWKEY_MASK, ROWKEY_CHAT, ROWKEY_CHAT, ROWKEY_PROMPT, ROWKEY_COMPLETION,
                                    ROWKEY_INSTRUCTION, ROWKEY_OUTPUT};
    for (size_t i = 0; i < obj->len; i++) {
        const JsonValue *m = &obj->items[i];
        bool text = prepare_key_is(m, "text"), ids = prepare_key_is(m, "input_ids");
        docs_fields_note(&p->fields, m->key, m->key_len, text || ids);
        if (text && m->type == JSON_STRING) {
            p->text.len = 0;
            buf_append(&p->text, m->str, m->len);
            *has_text = true;
        } else if (ids && m->type == JSON_ARRAY) {
            if (!prepare_json_ids(j, m)) return false;
            *has_ids = true;
        }
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            if (prepare_key_is(m, keys[k]) && m->type != JSON_NULL) *row_keys |= bits[k];  // a null member is none
    }
    return true;
}

// One JSON Lines object (a line that is not blank) into p->cur: its "input_ids" as they are (they
// win over "text" when an object has both: they are the tokenization its producer chose), else
// its "text" tokenized.
static bool prepare_json_object(PrepareJson *j) {
    Prepare *p = j->p;
    size_t first = prepare_json_start(j->line, j->n);
    if (j->line[first] != '{') return prepare_json_error(j, first, "malformed JSON: a line must hold one object");
    char what[160];
    JsonValue *obj = json_parse_line(j->line, j->n, &j->col, what, sizeof what);
    if (!obj) return snprintf(j->err, sizeof j->err, "malformed JSON: %s", what), false;
    bool has_text = false, has_ids = false;
    unsigned k = 0;
    bool ok = prepare_json_members(j, obj, &has_text, &has_ids, &k);
    json_free(obj);
    if (!ok) return false;
    if ((has_ids && (k & ROWKEY_MASK)) || (!has_ids && !has_text && ((k & ROWKEY_CHAT) ||
        (k & (ROWKEY_PROMPT | ROWKEY_COMPLETION)) == (ROWKEY_PROMPT | ROWKEY_COMPLETION) ||
        (k & (ROWKEY_INSTRUCTION | ROWKEY_OUTPUT)) == (ROWKEY_INSTRUCTION | ROWKEY_OUTPUT))))
        return prepare_json_error(j, j->n, "a finetuning row (%s) keeps its own loss mask, which token shards cannot: train on the file itself",
                                  has_ids ? "input_ids with attention_mask or labels" : k & ROWKEY_CHAT ? "a chat" :
                                  k & ROWKEY_PROMPT ? "prompt/completion" : "Alpaca");
    if (!has_ids && !has_text) return prepare_json_error(j, j->n, "the object has no \"text\" string and no \"input_ids\" array");
    if (!has_ids) prepare_encode_text(p);
    return true;
}

const char *data_prepare_scan_line(const char *line, size_t n, const Tokenizer *tok, int dtype_bytes) {
    static Prepare p;
    static char err[sizeof p.err];
    p.tok = (Tokenizer *)tok;
    p.check_ids = true;
    p.dtype_bytes = dtype_bytes;
    p.cur.len = p.text.len = 0;
    PrepareJson j = {.p = &p, .line = line, .n = n};
    if (prepare_json_start(line, n) == n || prepare_json_object(&j)) return NULL;
    return err_text(err, sizeof err, "%s", j.err);
}

static int prepare_jsonl(Prepare *p, PrepareInput *in, int file) {
    int got = 0;
    uint64_t line_no = 0;  // since the range's start
    while (!p->err[0] && (got = prepare_read_line(p, in)) > 0 && in->line_start < in->end) {
        line_no++;
        PrepareJson j = {.p = p, .line = (const char *)p->line.data, .n = p->line.len};
        if (prepare_json_start(j.line, j.n) == j.n) continue;  // blank line
        p->cur_file = file;
        p->cur_offset = in->line_start;
        if (!prepare_json_object(&j)) {
            // p->io is done with: it may count the lines before a range that began inside the file
            if (in->range_begin > 0) line_no = prepare_line_number(p, in->path, in->line_start);
            return prepare_fail(p, "%s:%llu:%zu: %s", in->path, (unsigned long long)line_no, j.col, j.err);
        }
        prepare_end_doc(p);
    }
    return got < 0 || p->err[0];
}

// a plain text file: one document, streamed as bytes by the byte tokenizer, else read whole
static int prepare_text(Prepare *p, PrepareInput *in, int file) {
    bool bytes = !p->tokenizer[0];
    long got;
    p->text.len = 0;
    while ((got = prepare_fill(p, in)) > 0) {
        if (bytes) shards_put_bytes(&p->cur, p->dtype_bytes, p->io, (size_t)got);
        else buf_append(&p->text, p->io, (size_t)got);
    }
    if (got < 0) return 1;
    if (!bytes) prepare_encode_text(p);
    p->cur_file = file;
    p->cur_offset = 0;
    prepare_end_doc(p);
    return 0;
}

static bool prepare_is_jsonl(const char *path) {
    size_t n = strlen(path);
    if (n >= 3 && !strcmp(path + n - 3, ".gz")) n -= 3;  // the kind is the name under the compression
    return (n >= 6 && !strncmp(path + n - 6, ".jsonl", 6)) || (n >= 5 && !strncmp(path + n - 5, ".json", 5));
}

// A file read through data/rows as documents: each row (or the whole text) one document,
// identified for the train/validation choice by its row number.
typedef struct {
    ShardsSink sink;
    Prepare *p;
    int file;
} PrepareSink;

static int prepare_row(ShardsSink *sink, const Buf *tokens, const SftRow *sft, uint64_t index, char *err, size_t errlen) {
    PrepareSink *ps = (PrepareSink *)sink;
    Prepare *p = ps->p;
    p->cur_file = ps->file;
    p->cur_offset = index;
    p->cur.len = 0;
    buf_append(&p->cur, tokens->data, tokens->len);
    prepare_end_doc(p);
    return p->err[0] ? err_set(err, errlen, "%s", p->err) : 0;
}

static void prepare_row_progress(ShardsSink *sink, uint64_t bytes_read) {
    Prepare *p = ((PrepareSink *)sink)->p;
    prepare_progress(p, p->bytes_before + bytes_read, false);
}

static int prepare_docs(Prepare *p, int file) {
    const char *path = p->inputs[file];
    RowsOptions o = {.sft = {.format = SFT_TEXT}, .text_column = "text"};
    RowsReader *r = rows_open(path, p->docs_kind[file], p->docs_comp[file], &o, p->err, sizeof p->err);
    if (!r) return 1;
    // ids fit the shards' width; an explicit tokenizer's also its vocabulary
    int64_t limit = (int64_t)1 << (8 * p->dtype_bytes);
    char range[1200];
    if (p->check_ids) limit = tok_vocab_size(p->tok), snprintf(range, sizeof range, "the vocabulary [0, %lld) of %s", (long long)limit, tok_path(p->tok));
    else snprintf(range, sizeof range, "what --dtype %s holds, [0, %lld)%s", p->dtype_bytes == 2 ? "uint16" : "uint32", (long long)limit,
                  p->dtype_bytes == 2 ? ": pass --dtype uint32" : "");
    PrepareSink ps = {.sink = {.width = p->dtype_bytes, .tok = p->tok, .id_limit = limit, .id_range = range, .stop = &comm_stop_signal,
                               .row = prepare_row, .progress = prepare_row_progress},
                      .p = p, .file = file};
    uint64_t rows = 0;
    char err[sizeof p->err];
    int rc = shards_build(r, path, &ps.sink, &rows, err, sizeof err);
    if (rc == SHARDS_STOPPED) p->stopped = true;
    else if (rc) prepare_fail(p, "%s", err);
    p->bytes_before += p->sizes[file];
    char fields[DOCS_FIELDS_MAX * 260];
    docs_fields_save(rows_fields(r), fields, sizeof fields);
    docs_fields_parse(&p->fields, fields);
    rows_close(r);
    return rc != 0 || p->err[0];
}

static int prepare_input(Prepare *p, const PrepareWork *w) {
    const char *path = p->inputs[w->file];
    if (p->as_docs[w->file]) return prepare_docs(p, w->file);
    PrepareInput in = {.fd = -1, .path = path, .end = w->end, .range_begin = w->begin};
    int rc = 0;
    if (w->end == UINT64_MAX) {
        int fd = path_open_read(path);
        if (fd < 0) return prepare_fail(p, "cannot open input '%s': %s", path, path_strerror(errno));
        if (p->gzipped[w->file]) in.gz = gz_open(fd, PREPARE_IO_BYTES);
        else in.fd = fd;
    } else {
        in.fd = path_open_read(path);
        if (in.fd < 0) return prepare_fail(p, "cannot open input '%s': %s", path, path_strerror(errno));
        // from the byte before the range: the line running into the range belongs to the one before
        if (w->begin > 0) {
            in.base = w->begin - 1;
            if (lseek(in.fd, (off_t)in.base, SEEK_SET) < 0) rc = prepare_fail(p, "cannot read input '%s': %s", path, strerror(errno));
            else rc = prepare_read_line(p, &in) < 0;
        }
    }
    if (!rc) rc = prepare_is_jsonl(path) ? prepare_jsonl(p, &in, w->file) : prepare_text(p, &in, w->file);
    if (!rc) p->bytes_before += in.gz ? gz_offset(in.gz) : w->end == UINT64_MAX ? in.base + in.len : w->end - w->begin;
    gz_close(in.gz);
    if (in.fd >= 0) close(in.fd);
    return rc;
}

// This rank's share of the inputs, alike on every rank: each plain JSON Lines file is cut into
// one byte range per rank; every other file goes whole to the rank with the fewest bytes so far.
static void prepare_assign(Prepare *p) {
    int world = comm_info.world, rank = comm_info.rank;
    uint64_t *load = callocCheck((size_t)world, sizeof *load);
    p->work = mallocCheck((size_t)p->ninputs * sizeof *p->work);
    for (int i = 0; i < p->ninputs; i++) {
        uint64_t size = p->sizes[i];
        if (world > 1 && !p->gzipped[i] && !p->as_docs[i] && prepare_is_jsonl(p->inputs[i])) {
            for (int r = 0; r < world; r++) load[r] += size / (uint64_t)world;
            uint64_t begin = size / (uint64_t)world * (uint64_t)rank, end = rank == world - 1 ? size : begin + size / (uint64_t)world;
            p->work[p->nwork++] = (PrepareWork){i, begin, end};
            p->bytes_total += end - begin;
            continue;
        }
        int least = 0;
        for (int r = 1; r < world; r++)
            if (load[r] < load[least]) least = r;
        load[least] += size;
        if (least == rank) {
            p->work[p->nwork++] = (PrepareWork){i, 0, UINT64_MAX};
            p->bytes_total += size;
        }
    }
    free(load);
}

// ---- flags and the output directory ----

static int prepare_mkdirs(Prepare *p, const char *dir) {
    char err[1200];
    if (path_mkdirs(dir, err, sizeof err)) return prepare_fail(p, "%s (--output)", err);
    if (access(dir, W_OK | X_OK) != 0) return prepare_fail(p, "cannot write to --output '%s': %s", dir, strerror(errno));
    return 0;
}

// train_NNNNNN.bin, val_NNNNNN.bin and their temporaries (.bin.<writer id>.tmp; .bin.tmp of older
// versions): what prepare writes
static bool prepare_is_shard(const char *name) {
    const char *s = !strncmp(name, "train_", 6) ? name + 6 : !strncmp(name, "val_", 4) ? name + 4 : NULL;
    if (!s || *s < '0' || *s > '9') return false;
    while (*s >= '0' && *s <= '9') s++;
    return !strcmp(s, ".bin") || !strcmp(s, ".bin.tmp") || (!strncmp(s, ".bin.", 5) && strlen(s) == 9 + WLOCK_ID_LEN && wlock_is_tmp(s, NULL));
}

// Whether the file at path is one prepare wrote: a token shard whose header matches its size, or
// (tmp) a shard still being written, empty or with its magic begun. lstat: a link is not one.
static bool prepare_wrote(const char *path, bool tmp) {
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    if (tmp && st.st_size == 0) return true;
    TokFileHeader h;
    FILE *f = path_fopen_read(path);
    size_t n = f ? fread(&h, 1, sizeof h, f) : 0;
    if (f) fclose(f);
    if (n < sizeof h.magic || memcmp(h.magic, TOKFILE_MAGIC, sizeof h.magic)) return false;
    if (tmp) return true;
    return n == sizeof h && h.version == TOKFILE_VERSION && (h.dtype_bytes == 2 || h.dtype_bytes == 4) &&
           (uint64_t)st.st_size >= sizeof h && ((uint64_t)st.st_size - sizeof h) / h.dtype_bytes == h.ntokens &&
           ((uint64_t)st.st_size - sizeof h) % h.dtype_bytes == 0;
}

// Rank 0: creates the output directory and takes its writer lock (base/wlock.h): a second
// prepare into it stops here rather than mix its shards with this one's. Temporaries of another
// writer are then what a killed prepare left: removed. Shards of an earlier run there would mix
// with this one's (readers take DIR/train_*.bin): refused, or removed with --overwrite, which
// removes only files prepare wrote (by name and header), and never one of the inputs (by
// identity, comm/io.h). Every shard-named file is checked before any is removed, so a refusal
// leaves the folder as it was.
static int prepare_output_dir(Prepare *p) {
    if (prepare_mkdirs(p, p->output)) return 1;
    const char *locked;
    if (!(p->lock = io_lock_output(p->output, 1, p->id, "--output", "shards", &locked))) return prepare_fail(p, "%s", locked);
    DIR *d = opendir(p->output);
    if (!d) return prepare_fail(p, "cannot list --output '%s': %s", p->output, strerror(errno));
    size_t cap = strlen(p->output) + 300;
    char *path = mallocCheck(cap);
    for (int remove = 0; remove < 2 && !p->err[0]; remove++) {
        rewinddir(d);
        for (struct dirent *e; !p->err[0] && (e = readdir(d));) {
            if (!prepare_is_shard(e->d_name)) continue;
            snprintf(path, cap, "%s/%s", p->output, e->d_name);
            if (!remove && wlock_is_tmp(e->d_name, NULL) && prepare_wrote(path, true)) {
                if (unlink(path) == 0) log_msg("Removed %s, left by an interrupted prepare\n", path);
                continue;
            }
            const char *input = remove ? NULL : io_output_check(path, "--output");
            if (input)
                prepare_fail(p, "%s", input);
            else if (!p->overwrite)
                prepare_fail(p, "--output '%s' already holds shards (%s): pass --overwrite to replace them", p->output, e->d_name);
            else if (!remove && !prepare_wrote(path, strstr(e->d_name, ".tmp") != NULL))
                prepare_fail(p, "--output '%s' holds '%s', named like a shard but not one prepare wrote: --overwrite replaces only "
                             "prepare's own shards; move it away, or give another --output", p->output, e->d_name);
            else if (remove && unlink(path) != 0)
                prepare_fail(p, "cannot remove the old shard '%s' (--overwrite): %s", path, strerror(errno));
        }
    }
    closedir(d);
    free(path);
    return p->err[0] != 0;
}

// Each --input as source_resolve reads it (a file, glob, folder, Hugging Face dataset folder or hub
// name), replaced by its files; a Hugging Face dataset gives its train split.
static void prepare_expand(Prepare *p) {
    const char **all = NULL;
    int n = 0;
    size_t cap = 0;
    for (int i = 0; i < p->ninputs && !p->err[0]; i++) {
        SourceFiles hf;
        memset(&hf, 0, sizeof hf);
        if (source_resolve(p->inputs[i], "", "train", &hf, p->err, sizeof p->err) <= 0) {
            if (!p->err[0]) prepare_fail(p, "input '%s' has no train split", p->inputs[i]);
            break;
        }
        if (!hf.nfiles) prepare_fail(p, "no input files match '%s'", p->inputs[i]);
        buf_fit(all, &cap, (size_t)n + (size_t)hf.nfiles);
        for (int k = 0; k < hf.nfiles; k++) all[n++] = hf.files[k];
        hf.nfiles = 0;  // the strings now belong to the list
        source_files_free(&hf);
    }
    if (p->inputs_owned) free(p->inputs);
    p->inputs = all;
    p->ninputs = n;
    p->inputs_owned = true;
}

// A file the inputs name twice (one --input given twice, a glob and a folder that overlap, a link)
// would be tokenized twice: refused rather than guess which was meant. By identity, so that
// spellings and links do not hide it.
static int prepare_check_repeats(Prepare *p) {
    int a, b;
    if (source_find_repeat(p->inputs, p->ninputs, &a, &b))
        prepare_fail(p, "--input names the file '%s' twice (also as '%s'): it would be tokenized twice; give each input once",
                     p->inputs[a], p->inputs[b]);
    return p->err[0] != 0;
}

// The tokenizer, the token width, and the inputs (every one must be there before anything is
// written): alike on every rank.
static int prepare_setup(Prepare *p) {
    p->tok = tok_open(p->tokenizer[0] ? p->tokenizer : "byte", p->err, sizeof p->err);
    if (!p->tok) return 1;
    p->check_ids = p->tokenizer[0] != 0;
    if (p->tokenizer[0]) io_input(tok_path(p->tok), "--tokenizer");
    if (!strcmp(p->tokenizer, "byte")) p->tokenizer[0] = 0;  // the byte path, with its ids checked
    if (tok_vocab_size(p->tok) > UINT16_MAX + 1) {
        if (p->dtype_given && p->dtype_bytes == 2)
            return prepare_fail(p, "--dtype uint16 cannot hold the ids of --tokenizer %s (vocabulary %d): use uint32", tok_path(p->tok),
                                tok_vocab_size(p->tok));
        p->dtype_bytes = 4;
    }
    prepare_expand(p);
    if (p->err[0] || prepare_check_repeats(p)) return 1;
    p->sizes = callocCheck((size_t)p->ninputs, sizeof *p->sizes);
    p->gzipped = callocCheck((size_t)p->ninputs, sizeof *p->gzipped);
    p->as_docs = callocCheck((size_t)p->ninputs, sizeof *p->as_docs);
    p->docs_kind = callocCheck((size_t)p->ninputs, sizeof *p->docs_kind);
    p->docs_comp = callocCheck((size_t)p->ninputs, sizeof *p->docs_comp);
    for (int i = 0; i < p->ninputs; i++) {
        const char *path = p->inputs[i];
        struct stat st;
        if (stat(path, &st) != 0) return prepare_fail(p, "cannot open input '%s': %s", path, strerror(errno));
        p->sizes[i] = (uint64_t)st.st_size;
        io_input(path, "--input");  // never removed nor replaced by an output (prepare_output_dir)
        Sniff sn;
        if (sniff_path(path, &sn, p->err, sizeof p->err)) return 1;
        SniffFormat inner = sn.format == SNIFF_GZIP || sn.format == SNIFF_ZSTD ? sn.inner : sn.format;
        if (inner != SNIFF_TEXT && inner != SNIFF_JSONL && inner != SNIFF_ARROW_STREAM && inner != SNIFF_ARROW_FILE && inner != SNIFF_PARQUET)
            return prepare_fail(p, "input '%s' is %s, which prepare does not read (it reads text, JSON Lines, Arrow and Parquet)", path, sn.what);
        p->gzipped[i] = sn.format == SNIFF_GZIP;
        // the stream path reads plain and gzip text and JSON Lines (by name), with byte ranges; the rest goes through
        // data/rows into shards_build, as the data cache reads every input
        // (a file named .jsonl keeps the stream path whatever it holds: its scanner names the bad line)
        p->as_docs[i] = sn.format == SNIFF_ZSTD || inner == SNIFF_ARROW_STREAM || inner == SNIFF_ARROW_FILE || inner == SNIFF_PARQUET ||
                        (inner == SNIFF_JSONL && !prepare_is_jsonl(path));
        p->docs_comp[i] = sn.format == SNIFF_GZIP ? DOCS_GZIP : sn.format == SNIFF_ZSTD ? DOCS_ZSTD : DOCS_PLAIN;
        p->docs_kind[i] = inner == SNIFF_JSONL ? DOCS_JSONL : inner == SNIFF_TEXT ? DOCS_TEXT : inner == SNIFF_PARQUET ? DOCS_PARQUET : DOCS_ARROW;
    }
    // Refused now rather than after a million files: plain text under the byte tokenizer has a
    // token per byte at least, so its shard count is known from the sizes. Other inputs meet the
    // same limit as their shards are written (prepare_split_write).
    uint64_t least = 0;
    for (int i = 0; i < p->ninputs; i++) least += !p->tokenizer[0] && !p->gzipped[i] && !p->as_docs[i] && p->docs_kind[i] == DOCS_TEXT ? p->sizes[i] : 0;
    if (least / p->shard_tokens > 2 * (uint64_t)PREPARE_MAX_SHARDS)
        return prepare_fail(p, "prepare would write more than %d shards (--shard_tokens %llu, at least %llu tokens): the limit is %d shard "
                            "files per split; give a larger --shard_tokens (at least %llu)", 2 * PREPARE_MAX_SHARDS,
                            (unsigned long long)p->shard_tokens, (unsigned long long)least, PREPARE_MAX_SHARDS,
                            (unsigned long long)(least / (2 * (uint64_t)PREPARE_MAX_SHARDS) + 1));
    return 0;
}

// ---- the run ----

// This rank's share; errors stay in p->err.
static void prepare_run(Prepare *p) {
    prepare_split_init(&p->train, p, "train");
    prepare_split_init(&p->val, p, "val");
    p->io = mallocCheck(PREPARE_IO_BYTES);
    p->t_start = p->t_drawn = clock_now_s();  // the first redraw comes after one period
    prepare_assign(p);
    for (int i = 0; i < p->nwork; i++)
        if (prepare_input(p, &p->work[i]) || p->err[0]) return;
    prepare_progress(p, p->bytes_total, true);
}

// Collective, after every rank's share went well: the held-back documents, the last shards, totals.
// 0, or -1 on every rank with the line in p->err.
static int prepare_finish(Prepare *p) {
    prepare_end_docs(p);
    if (shards_file_is_open(&p->train.f)) prepare_split_close(&p->train);
    if (shards_file_is_open(&p->val.f)) prepare_split_close(&p->val);
    const char *lost = p->lock ? wlock_lost(p->lock, p->id) : NULL;  // another writer took the folder meanwhile
    if (lost) prepare_fail(p, "%s", lost);
    if (prepare_failed(p)) return -1;
    double sums[6] = {(double)p->ndocs, (double)p->train.total, (double)p->train.nshards, (double)p->val.total,
                      (double)p->val.nshards, (double)(p->bytes_total)};
    comm_allreduce_sum_f64(comm_world(), sums, 6);
    double seconds = clock_now_s() - p->t_start;
    if (sums[1] + sums[3] == 0) return prepare_fail(p, "the inputs hold no tokens"), -1;  // alike on every rank
    // every rank's row fields to rank 0, for one warning about those no row used
    char mine[DOCS_FIELDS_MAX * 260] = "", *all = NULL, warn[DOCS_FIELDS_MAX * 200 + 200];
    size_t total = 0;
    docs_fields_save(&p->fields, mine, sizeof mine);
    comm_gather_bytes(comm_world(), mine, sizeof mine, &all, &total);
    DocsFields merged = {0};
    for (size_t at = 0; all && at + sizeof mine <= total; at += sizeof mine) docs_fields_parse(&merged, all + at);
    free(all);
    if (comm_info.rank == 0 && docs_fields_warning(&merged, "prepare --input", "read only in finetuning rows, which token shards cannot hold", warn,
                                                   sizeof warn)) log_msg("%s\n", warn);
    log_msg("prepare: %.0f documents, %.0f train tokens in %.0f shards, %.0f val tokens in %.0f shards -> %s (%.1f MB in %.2f s, %.1f MB/s%s)\n",
            sums[0], sums[1], sums[2], sums[3], sums[4], p->output, sums[5] / 1e6, seconds,
            seconds > 0 ? sums[5] / 1e6 / seconds : 0.0, comm_info.world > 1 ? ", all ranks" : "");
    return 0;
}

// After a stop or a failure removed every shard: the folder this run created goes too (empty once
// its lock goes; one that held other files stays, as rmdir leaves it)
static void prepare_drop_output(Prepare *p, bool created_output) {
    if (!created_output || comm_info.rank != 0) return;
    io_unlock_output(p->lock, p->id);
    p->lock = NULL;
    rmdir(p->output);
}

// Collective: whether a stop signal ended any rank's share. Every rank then removes what it
// wrote (a dataset is whole or absent) and rank 0 says so.
static bool prepare_stopped(Prepare *p) {
    double stopped[2] = {p->stopped ? comm_stop_signal : 0, p->train.nshards + p->val.nshards};
    comm_allreduce_max_f64(comm_world(), stopped, 1);
    if (!stopped[0]) return false;
    prepare_split_abandon(&p->train);
    prepare_split_abandon(&p->val);
    comm_allreduce_sum_f64(comm_world(), stopped + 1, 1);
    if (p->bar_drawn) fputc('\n', stderr);
    log_msg("Stopped by signal %d (%s) during prepare: the %.0f shard(s) written so far were removed, nothing partial is left "
            "in '%s'; exiting with status %d\n", (int)stopped[0], comm_signal_name((int)stopped[0]), stopped[1], p->output,
            COMM_EXIT_STOPPED);
    return true;
}

int prepare_shards(const PrepareOptions *o, char *err, size_t errlen) {
    Prepare *p = callocCheck(1, sizeof *p);
    p->inputs = (const char **)o->inputs;  // replaced by their files (prepare_expand) before any change
    p->ninputs = o->ninputs;
    p->output = strdup(o->output);
    p->tokenizer = strdup(o->tokenizer);
    if (!p->output || !p->tokenizer) err_fatal("out of memory copying prepare's paths");
    wlock_new_id(p->id);
    p->val_fraction = o->val_fraction;
    p->dtype_bytes = o->dtype_bytes;
    p->dtype_given = o->dtype_given;
    p->overwrite = o->overwrite;
    p->shard_tokens = o->shard_tokens;
    comm_stop_polled(1);  // reading polls; what was written goes on a stop
    prepare_setup(p);
    int rc = prepare_sync(p), sig = rc ? 0 : comm_stop_any();
    if (sig) {
        rc = 1;
        log_msg("Stopped by signal %d (%s) during prepare, before anything was written; exiting with status %d\n", sig,
                comm_signal_name(sig), COMM_EXIT_STOPPED);
    }
    bool created_output = comm_info.rank == 0 && access(p->output, F_OK) != 0;
    if (!rc && comm_info.rank == 0) prepare_output_dir(p);
    if (!rc) rc = prepare_sync(p);
    if (!rc) prepare_run(p);
    // a failure anywhere: every rank removes what it wrote, then all return the first message
    if (!rc) rc = prepare_failed(p);
    if (!rc && prepare_stopped(p)) rc = 1;
    if (!rc) rc = prepare_finish(p);
    if (rc < 0) err_set(err, errlen, "%s", p->err);
    if (rc) prepare_drop_output(p, created_output);
    io_unlock_output(p->lock, p->id);
    free(p->output);
    free(p->tokenizer);
    tok_free(p->tok);
    prepare_split_free(&p->train);
    prepare_split_free(&p->val);
    Buf *bufs[] = {&p->cur, &p->pending, &p->line, &p->text};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) buf_free(bufs[i]);
    free(p->ids);
    free(p->io);
    if (p->inputs_owned) {
        for (int i = 0; i < p->ninputs; i++) free((char *)p->inputs[i]);
        free(p->inputs);
    }
    free(p->as_docs);
    free(p->docs_kind);
    free(p->docs_comp);
    free(p->sizes);
    free(p->gzipped);
    free(p->work);
    free(p);
    return rc;
}
