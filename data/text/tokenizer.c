// tokenizer: the byte tokenizer, SentencePiece models through libsentencepiece, and BPE
// tokenizer.json / GPT-2 files through data/bpe's one merge engine; `fsdpc tokenize`.
#include "tokenizer.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "../../base/path.h"
#include "../../base/buf.h"
#include "../../base/err.h"
#include "../../comm/comm.h"
#include "bpe.h"
#include "../source/hub.h"
#include "../../base/json.h"
#include "sentencepiece.h"

#define TOK_JSON_MAX_BYTES ((size_t)1 << 30)
#define TOK_SPACE "\xE2\x96\x81"           // U+2581 '▁': SentencePiece's visible space
#define TOK_UNK_SURFACE " \xE2\x81\x87 "  // " ⁇ ": how SentencePiece prints <unk>

typedef enum { TOK_KIND_BYTE, TOK_KIND_SPM, TOK_KIND_BPE } TokKind;

struct Tokenizer {
    TokKind kind;
    char *path;
    int vocab, bos, eos, unk;
    SpmModel *spm;
    Bpe *bpe;
};


size_t tok_utf8_len(const uint8_t *s, size_t n) {
    size_t bad;
    return json_utf8_char(s, n, &bad);
}

// ---- opening ----

static bool tok_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

static char *tok_strdup(const char *s) {
    char *copy = mallocCheck(strlen(s) + 1);
    return strcpy(copy, s);
}

// a tokenizer.json by its name or, failing that, by starting with '{'
static bool tok_looks_json(const char *path) {
    size_t n = strlen(path);
    if (n >= 5 && !strcmp(path + n - 5, ".json")) return true;
    FILE *f = path_fopen_read(path);
    int c = ' ';
    if (f) {
        while (c == ' ' || c == '\t' || c == '\r' || c == '\n') c = fgetc(f);
        fclose(f);
    }
    return c == '{';
}

// whether path's last component is name
static bool tok_named(const char *path, const char *name) {
    const char *slash = strrchr(path, '/');
    return !strcmp(slash ? slash + 1 : path, name);
}

// The first of names[0..n) found beside path (in its directory) into out; false (out the first
// name's path) when none is there.
static bool tok_beside(const char *path, const char *const *names, int n, char *out, size_t len) {
    const char *slash = strrchr(path, '/');
    int dir = slash ? (int)(slash - path) : 0;
    for (int i = 0; i < n; i++) {
        snprintf(out, len, "%.*s%s%s", dir, path, slash ? "/" : "", names[i]);
        if (tok_is_file(out)) return true;
    }
    snprintf(out, len, "%.*s%s%s", dir, path, slash ? "/" : "", names[0]);
    return false;
}

// A BPE tokenizer (data/bpe) from a parsed tokenizer.json, or from GPT-2's encoder.json and its
// merges file (merges_given, else found beside it).
static bool tok_open_bpe(Tokenizer *t, const JsonValue *root, const char *file, const char *merges_given, char *err, size_t errlen) {
    char why[512], merges[4200];
    const JsonValue *model = json_get(root, "model");
    bool encoder = bpe_json_is_encoder(root) || ((!model || model->type != JSON_OBJECT) && (tok_named(file, "encoder.json") || tok_named(file, "vocab.json")));
    if (encoder) {
        // encoder.json: OpenAI's merges are vocab.bpe beside it, Hugging Face's copy names them merges.txt
        static const char *const openai[] = {"vocab.bpe", "merges.txt"}, *const hf_names[] = {"merges.txt", "vocab.bpe"};
        if (merges_given) snprintf(merges, sizeof merges, "%s", merges_given);
        else if (!tok_beside(file, tok_named(file, "vocab.json") ? hf_names : openai, 2, merges, sizeof merges))
            return err_set(err, errlen, "tokenizer '%s' is GPT-2's encoder.json and needs its merges (vocab.bpe) beside it: '%s' does not exist",
                           file, merges), false;
    }
    t->bpe = encoder ? bpe_load_encoder(root, merges, why, sizeof why) : bpe_load_json(root, why, sizeof why);
    if (!t->bpe) return err_set(err, errlen, "tokenizer '%s': %s", file, why), false;
    // SentencePiece-style: <s> and </s>; GPT-2 has no BOS: documents are separated by
    // <|endoftext|>; Llama-3 begins them with <|begin_of_text|> and ends them with <|end_of_text|>
    bool byte_level = bpe_options(t->bpe)->byte_level;
    t->vocab = bpe_vocab_size(t->bpe);
    t->bos = bpe_piece_id(t->bpe, byte_level ? "<|begin_of_text|>" : "<s>", byte_level ? 17 : 3);
    t->eos = byte_level ? bpe_piece_id(t->bpe, "<|endoftext|>", 13) : bpe_piece_id(t->bpe, "</s>", 4);
    if (byte_level && t->eos < 0) t->eos = bpe_piece_id(t->bpe, "<|end_of_text|>", 15);
    t->unk = bpe_unk(t->bpe);
    return true;
}

Tokenizer *tok_open(const char *spec, char *err, size_t errlen) {
    Tokenizer *t = callocCheck(1, sizeof *t);
    t->bos = t->eos = t->unk = -1;
    if (!strcmp(spec, "byte")) {
        t->kind = TOK_KIND_BYTE;
        t->vocab = 256;
        t->path = tok_strdup("byte");
        return t;
    }
    char where[4096], file[4200], merges[4200] = "";
    if (!hub_resolve(spec, where, sizeof where)) {
        err_set(err, errlen, "tokenizer %s", where);
        return free(t), NULL;
    }
    snprintf(file, sizeof file, "%s", where);
    if (path_is_dir(where)) {
        // SentencePiece first, then Hugging Face's tokenizer.json, then GPT-2's files (OpenAI's or Hugging Face's names)
        static const char *const names[] = {"tokenizer.model", "tokenizer.json", "encoder.json", "vocab.json"};
        size_t i = 0;
        for (; i < sizeof names / sizeof *names; i++) {
            snprintf(file, sizeof file, "%s/%s", where, names[i]);
            if (tok_is_file(file)) break;
        }
        if (i == sizeof names / sizeof *names) {
            err_set(err, errlen, "tokenizer directory '%s' holds neither tokenizer.model nor tokenizer.json (nor GPT-2's encoder.json and vocab.bpe)", where);
            return free(t), NULL;
        }
    } else if (path_ends_with(where, ".bpe") || tok_named(where, "merges.txt")) {
        // GPT-2's merges: the vocabulary is the encoder.json (vocab.json) beside them
        static const char *const openai[] = {"encoder.json", "vocab.json"}, *const hf[] = {"vocab.json", "encoder.json"};
        snprintf(merges, sizeof merges, "%s", where);
        if (!tok_beside(where, tok_named(where, "merges.txt") ? hf : openai, 2, file, sizeof file)) {
            err_set(err, errlen, "tokenizer '%s' holds GPT-2's merges and needs encoder.json beside it: '%s' does not exist", where, file);
            return free(t), NULL;
        }
    }
    char *abs = realpath(file, NULL);  // checkpoints record it: an export from another folder must find it
    t->path = tok_strdup(abs ? abs : file);
    free(abs);
    char why[512];
    int fd = path_open_read(file);  // also refuses a FIFO, on which libsentencepiece's own open would wait
    if (fd >= 0) close(fd);
    if (fd < 0) {
        err_set(err, errlen, "cannot read tokenizer '%s': %s", file, comm_path_error(file, errno));
        tok_free(t);
        return NULL;
    }
    if (tok_looks_json(file)) {
        t->kind = TOK_KIND_BPE;
        JsonValue *root = json_parse_file(file, TOK_JSON_MAX_BYTES, why, sizeof why);
        if (!root) {
            err_set(err, errlen, "cannot read tokenizer: %s", why);
            tok_free(t);
            return NULL;
        }
        bool ok = tok_open_bpe(t, root, file, merges[0] ? merges : NULL, err, errlen);
        json_free(root);
        if (!ok) {
            tok_free(t);
            return NULL;
        }
        return t;
    }
    t->kind = TOK_KIND_SPM;
    t->spm = spm_load(file, why, sizeof why);
    if (!t->spm) {
        err_set(err, errlen, "tokenizer '%s' is neither a SentencePiece model nor a tokenizer.json (libsentencepiece: %s)", file, why);
        tok_free(t);
        return NULL;
    }
    t->vocab = spm_vocab_size(t->spm);
    t->bos = spm_bos(t->spm);
    t->eos = spm_eos(t->spm);
    t->unk = spm_unk(t->spm);
    return t;
}

void tok_free(Tokenizer *t) {
    if (!t) return;
    if (t->spm) spm_free(t->spm);
    bpe_free(t->bpe);
    free(t->path);
    free(t);
}

int tok_vocab_size(const Tokenizer *t) { return t->vocab; }
int tok_bos(const Tokenizer *t) { return t->bos; }
int tok_eos(const Tokenizer *t) { return t->eos; }
int tok_is_byte(const Tokenizer *t) { return t->kind == TOK_KIND_BYTE; }
const char *tok_path(const Tokenizer *t) { return t->path; }

int tok_piece_id(const Tokenizer *t, const char *piece) {
    size_t n = strlen(piece);
    if (t->kind == TOK_KIND_BPE) return bpe_piece_id(t->bpe, piece, n);
    if (t->kind == TOK_KIND_BYTE) return -1;
    // SentencePiece: a scan of the vocabulary, done once per caller, not per token
    for (int id = 0; id < t->vocab; id++) {
        size_t pn;
        const char *p = spm_piece(t->spm, id, &pn);
        if (pn == n && !memcmp(p, piece, n)) return id;
    }
    return -1;
}

size_t tok_encode(const Tokenizer *t, const char *text, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    if (t->kind == TOK_KIND_BPE) return bpe_encode(t->bpe, text, n, ids, len, cap);
    if (t->kind == TOK_KIND_SPM) {
        char why[256];
        long got = spm_encode(t->spm, text, n, ids, len, cap, why, sizeof why);
        if (got < 0) err_fatal("tokenizing with '%s': %s", t->path, why);
        return (size_t)got;
    }
    buf_fit(*ids, cap, *len + n);
    for (size_t i = 0; i < n; i++) (*ids)[(*len)++] = (uint8_t)text[i];
    return n;
}

// ---- decoding ----

// The piece of id: its type, its text (p, n) and for a byte piece its byte.
static BpePieceType tok_piece(const Tokenizer *t, int32_t id, const char **p, size_t *n, int *byte) {
    BpePieceType type;
    if (t->kind == TOK_KIND_BPE) {
        type = bpe_piece(t->bpe, id, p, n);
    } else {
        *p = spm_piece(t->spm, id, n);
        type = spm_is_control(t->spm, id) ? BPE_PIECE_SPECIAL
             : spm_is_unknown(t->spm, id) ? BPE_PIECE_UNKNOWN
             : spm_is_byte(t->spm, id)    ? BPE_PIECE_BYTE
                                          : BPE_PIECE_NORMAL;
    }
    *byte = type == BPE_PIECE_BYTE ? (int)strtol(*p + 3, NULL, 16) : -1;  // "<0xNN>"
    return type;
}

// Whether decoding drops the '▁' that starts the text (the one encoding put there).
static bool tok_drops_lead(const Tokenizer *t) { return t->kind == TOK_KIND_SPM || bpe_options(t->bpe)->prefix; }

// Writes piece text p[0, n) to out[0, cap) with each '▁' as a space, dropping a leading one
// when drop_lead; returns the bytes written.
static size_t tok_unescape(const char *p, size_t n, bool drop_lead, char *out, size_t cap) {
    size_t k = 0;
    if (drop_lead && n >= 3 && !memcmp(p, TOK_SPACE, 3)) p += 3, n -= 3;
    for (size_t i = 0; i < n && k < cap;) {
        if (n - i >= 3 && !memcmp(p + i, TOK_SPACE, 3)) out[k++] = ' ', i += 3;
        else out[k++] = p[i++];
    }
    return k;
}

size_t tok_piece_bytes(const Tokenizer *t, int32_t prev, int32_t id, char *out, size_t cap) {
    if (id < 0 || id >= t->vocab || !cap) return 0;
    if (t->kind == TOK_KIND_BYTE) return out[0] = (char)id, 1;
    const char *p;
    size_t n;
    int byte;
    BpePieceType type = tok_piece(t, id, &p, &n, &byte);
    if (t->kind == TOK_KIND_BPE && bpe_options(t->bpe)->byte_level) {  // raw bytes, maybe part of a character: the stream joins them
        if (type == BPE_PIECE_SPECIAL) return 0;
        n = n < cap ? n : cap;
        memcpy(out, p, n);
        return n;
    }
    if (type == BPE_PIECE_BYTE) return out[0] = (char)byte, 1;
    if (type == BPE_PIECE_SPECIAL) return 0;
    if (type == BPE_PIECE_UNKNOWN) p = TOK_UNK_SURFACE, n = strlen(TOK_UNK_SURFACE);
    const char *pp;
    size_t pn;
    bool at_start = prev < 0 || (prev < t->vocab && tok_piece(t, prev, &pp, &pn, &byte) == BPE_PIECE_SPECIAL);
    return tok_unescape(p, n, type == BPE_PIECE_NORMAL && at_start && tok_drops_lead(t), out, cap);
}

typedef struct {
    char *s;
    size_t len, cap;
} TokText;

static void tok_text_put(TokText *o, const void *p, size_t n) {
    buf_fit(o->s, &o->cap, o->len + n + 1);
    memcpy(o->s + o->len, p, n);
    o->len += n;
    o->s[o->len] = '\0';
}

// Bytes as UTF-8 characters, ill-formed ones U+FFFD (one per byte when per_byte, as
// SentencePiece's byte pieces; else per maximal subpart, as GPT-2's ByteLevel decoder).
static void tok_text_lossy(TokText *o, const uint8_t *bytes, size_t n, bool per_byte) {
    buf_fit(o->s, &o->cap, o->len + 3 * n + 1);
    o->len += bpe_utf8_lossy(bytes, n, (uint8_t *)o->s + o->len, per_byte);
    o->s[o->len] = '\0';
}

char *tok_decode(const Tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    if (t->kind == TOK_KIND_SPM) {
        char why[256];
        char *s = spm_decode(t->spm, ids, n, len, why, sizeof why);
        if (!s) err_fatal("decoding with '%s': %s", t->path, why);
        return s;
    }
    TokText o = {0};
    tok_text_put(&o, "", 0);
    if (t->kind == TOK_KIND_BPE && bpe_options(t->bpe)->byte_level) {  // the pieces' bytes joined, then read as UTF-8
        TokText raw = {0};
        tok_text_put(&raw, "", 0);
        for (size_t i = 0; i < n; i++) {
            const char *p;
            size_t pn;
            if (bpe_piece(t->bpe, ids[i], &p, &pn) != BPE_PIECE_SPECIAL) tok_text_put(&raw, p, pn);
        }
        tok_text_lossy(&o, (const uint8_t *)raw.s, raw.len, false);
        free(raw.s);
        *len = o.len;
        return o.s;
    }
    if (t->kind == TOK_KIND_BYTE) {
        for (size_t i = 0; i < n; i++) tok_text_put(&o, &(char){(char)ids[i]}, 1);
        *len = o.len;
        return o.s;
    }
    uint8_t *run = mallocCheck(n ? n : 1);  // the pending run of byte pieces
    size_t nrun = 0;
    bool at_start = true;  // only control pieces so far: a leading '▁' is the prepended one
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t pn;
        int byte;
        BpePieceType type = tok_piece(t, ids[i], &p, &pn, &byte);
        if (type == BPE_PIECE_BYTE) {
            run[nrun++] = (uint8_t)byte;
            at_start = false;
            continue;
        }
        tok_text_lossy(&o, run, nrun, true);  // any other piece ends a run of bytes
        nrun = 0;
        if (type == BPE_PIECE_SPECIAL) continue;
        bool drop = at_start && tok_drops_lead(t);
        at_start = false;
        if (type == BPE_PIECE_UNKNOWN) {
            tok_text_put(&o, TOK_UNK_SURFACE, strlen(TOK_UNK_SURFACE));
            continue;
        }
        if (drop && pn >= 3 && !memcmp(p, TOK_SPACE, 3)) p += 3, pn -= 3;
        for (size_t at = 0; at < pn;) {
            if (pn - at >= 3 && !memcmp(p + at, TOK_SPACE, 3)) {
                tok_text_put(&o, " ", 1);
                at += 3;
                continue;
            }
            size_t end = at + 1;
            while (end < pn && (uint8_t)p[end] != (uint8_t)TOK_SPACE[0]) end++;
            tok_text_put(&o, p + at, end - at);
            at = end;
        }
    }
    tok_text_lossy(&o, run, nrun, true);
    free(run);
    *len = o.len;
    return o.s;
}

// ---- fsdpc tokenize ----

// Parses one line of ids into *ids; NULL when fine, else the reason.
static const char *tok_parse_ids(const Tokenizer *t, char *line, int32_t **ids, size_t *len, size_t *cap, char *why, size_t whylen) {
    *len = 0;
    for (char *s = line;;) {
        while (*s == ' ' || *s == '\t' || *s == '\r') s++;
        if (!*s) return NULL;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (*s < '0' || *s > '9' || (*end && *end != ' ' && *end != '\t' && *end != '\r')) {
            size_t wl = strcspn(s, " \t\r");
            return err_text(why, whylen, "'%.*s' is not a token id", (int)(wl > 40 ? 40 : wl), s);
        }
        if (errno || v >= t->vocab) {
            return err_text(why, whylen, "token id %.*s is out of range for the vocabulary of %d", (int)(end - s > 40 ? 40 : end - s), s, t->vocab);
        }
        buf_fit(*ids, cap, *len + 1);
        (*ids)[(*len)++] = (int32_t)v;
        s = end;
    }
}

const char *tok_lines(const Tokenizer *t, int bos, int eos, int decode, FILE *in, FILE *out, const volatile int *stop,
                      unsigned long *lines, char *why, size_t whylen) {
    char *line = NULL;
    size_t line_cap = 0, len = 0, cap = 0;
    int32_t *ids = NULL;
    const char *fail = NULL;
    ssize_t got;
    for (unsigned long line_no = 1; !fail && !(stop && *stop) && (got = getline(&line, &line_cap, in)) >= 0; line_no++) {
        if (got > 0 && line[got - 1] == '\n') line[--got] = '\0';
        if (decode) {
            char reason[160];
            if ((fail = tok_parse_ids(t, line, &ids, &len, &cap, reason, sizeof reason))) {
                snprintf(why, whylen, "stdin line %lu: %s", line_no, reason);
                fail = why;
                break;
            }
            size_t n;
            char *text = tok_decode(t, ids, len, &n);
            fwrite(text, 1, n, out);
            free(text);
        } else {
            len = 0;
            if (bos && t->bos >= 0) buf_fit(ids, &cap, 1), ids[len++] = t->bos;
            tok_encode(t, line, (size_t)got, &ids, &len, &cap);
            if (eos && t->eos >= 0) buf_fit(ids, &cap, len + 1), ids[len++] = t->eos;
            for (size_t i = 0; i < len; i++) fprintf(out, i ? " %d" : "%d", (int)ids[i]);
        }
        fputc('\n', out);
        *lines = line_no;
        if (ferror(out)) break;  // the first failed write ends the run, not the end of stdin
    }
    if (!fail && !ferror(out)) fail = tok_read_error(in, stop, why, whylen);
    free(line);
    free(ids);
    return fail;
}

const char *tok_read_error(FILE *in, const volatile int *stop, char *why, size_t whylen) {
    if (!ferror(in) || (stop && *stop)) return NULL;  // a stop's EINTR is the stop, said by the caller
    snprintf(why, whylen, "cannot read standard input: %s", strerror(errno ? errno : EIO));
    return why;
}
