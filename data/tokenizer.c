// tokenizer: the byte tokenizer, SentencePiece models through libsentencepiece, tokenizer.json
// BPE encoded here with SentencePiece's algorithm, GPT-2's byte-level BPE (data/bpe); `fsdpc tokenize`.
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

#include "../comm/comm.h"
#include "../comm/io.h"
#include "bpe.h"
#include "hub.h"
#include "json.h"
#include "sentencepiece.h"
#include "sft.h"

#define TOK_JSON_MAX_BYTES ((size_t)1 << 30)
#define TOK_SPACE "\xE2\x96\x81"           // U+2581 '▁': SentencePiece's visible space
#define TOK_REPLACEMENT "\xEF\xBF\xBD"     // U+FFFD: what bytes that are not UTF-8 become
#define TOK_UNK_SURFACE " \xE2\x81\x87 "  // " ⁇ ": how SentencePiece prints <unk>
#define TOK_CACHE_SLOTS (1 << 16)          // segment cache: at most half used
#define TOK_CACHE_MAX_SEGMENT 64           // bytes: longer segments are rare, merged each time
#define TOK_CACHE_POOL (1 << 22)           // bytes of segments and ids cached, each

typedef enum { TOK_KIND_BYTE, TOK_KIND_SPM, TOK_KIND_BPE, TOK_KIND_GPT2 } TokKind;
typedef enum { TOK_PIECE_NORMAL, TOK_PIECE_CONTROL, TOK_PIECE_UNKNOWN, TOK_PIECE_BYTE } TokPieceType;

typedef struct {
    int32_t prio, id;  // priority (lower merges first) and the merged piece
} TokMerge;

// A tokenizer.json BPE vocabulary: pieces by id, a hash of piece text to id, and the merges as a
// hash of (left id, right id).
typedef struct {
    char *pool;           // piece texts, back to back
    size_t *off, *plen;   // piece id -> its text in pool
    uint8_t *type;        // TokPieceType by id
    int16_t *byte;        // the byte of a <0xNN> piece, else -1
    int32_t *slot;        // piece hash: ids, -1 empty
    size_t slot_mask;
    uint64_t *mkey;       // merge hash: left << 32 | right, UINT64_MAX empty
    TokMerge *mval;
    size_t mkey_mask;
    int32_t ascii[128];   // id of each ASCII character, -1 when it is no piece
    int32_t byte_id[256]; // byte-fallback pieces (<unk> where one is missing)
    bool replace_space;   // ' ' -> '▁'
    bool prepend;         // '▁' before the text (a Prepend normalizer)
    bool prepend_meta;    // '▁' before the text unless it starts with one (Metaspace)
    bool split;           // no merges across a '▁' (Metaspace split: words start at each '▁')
    bool cut_at_space;    // no merged piece holds a character other than '▁' before a '▁'
} TokBpe;

typedef struct TokWork TokWork;

struct Tokenizer {
    TokKind kind;
    char *path;
    int vocab, bos, eos, unk;
    SpmModel *spm;
    TokBpe bpe;
    TokWork *work;  // tokenizer.json only
    Bpe *gpt2;      // GPT-2 byte-level BPE only
};

// p (*cap items of size bytes) grown by doubling to hold need items
static void *tok_grow(void *p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return p;
    size_t want = *cap ? *cap : 256;
    while (want < need) want *= 2;
    p = realloc(p, want * size);
    if (!p) err_fatal("out of memory tokenizing (%zu x %zu bytes)", want, size);
    *cap = want;
    return p;
}

static void tok_reserve(int32_t **ids, size_t *cap, size_t need) { *ids = tok_grow(*ids, cap, need, sizeof **ids); }

// Length of the UTF-8 character at s (n > 0 bytes), or 0 when the bytes there are none, by
// SentencePiece's rules: shortest forms only, no surrogates, at most U+10FFFF.
size_t tok_utf8_len(const uint8_t *s, size_t n) {
    if (s[0] < 0x80) return 1;
    size_t len = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || len > n) return 0;
    uint32_t cp = s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF) return 0;
    return len;
}

// ---- tokenizer.json BPE: hashes ----

static uint64_t tok_hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
    return h;
}

static size_t tok_pow2_above(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

static int32_t tok_bpe_find(const TokBpe *b, const char *s, size_t n) {
    for (size_t i = tok_hash(s, n) & b->slot_mask;; i = (i + 1) & b->slot_mask) {
        int32_t id = b->slot[i];
        if (id < 0) return -1;
        if (b->plen[id] == n && !memcmp(b->pool + b->off[id], s, n)) return id;
    }
}

static size_t tok_merge_slot(const TokBpe *b, uint64_t key) {
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 32) & b->mkey_mask;  // high bits: both ids count
    while (b->mkey[i] != key && b->mkey[i] != UINT64_MAX) i = (i + 1) & b->mkey_mask;
    return i;
}

// ---- tokenizer.json BPE: loading ----

// The first node of a normalizer/pre_tokenizer, or of its Sequence, whose type is none of those
// fsdpc applies; NULL when all are known. Known ones set the matching flags.
static const JsonValue *tok_json_steps(TokBpe *b, const JsonValue *v, const char *list_key, char *why, size_t whylen) {
    if (!v || v->type == JSON_NULL) return NULL;
    const char *type = json_get_string(v, "type");
    if (!type) return snprintf(why, whylen, "a step without a type"), v;
    if (!strcmp(type, "Sequence")) {
        const JsonValue *list = json_get(v, list_key);
        if (!list || list->type != JSON_ARRAY) return snprintf(why, whylen, "a Sequence without \"%s\"", list_key), v;
        for (size_t i = 0; i < list->len; i++) {
            const JsonValue *bad = tok_json_steps(b, &list->items[i], list_key, why, whylen);
            if (bad) return bad;
        }
        return NULL;
    }
    if (!strcmp(type, "Prepend")) {
        const char *with = json_get_string(v, "prepend");
        if (!with || strcmp(with, TOK_SPACE)) return snprintf(why, whylen, "Prepend of something else than \"" TOK_SPACE "\""), v;
        b->prepend = true;
        return NULL;
    }
    if (!strcmp(type, "Replace")) {
        const char *from = json_get_string(json_get(v, "pattern"), "String"), *to = json_get_string(v, "content");
        if (!from || !to || strcmp(from, " ") || strcmp(to, TOK_SPACE))
            return snprintf(why, whylen, "Replace of something else than \" \" by \"" TOK_SPACE "\""), v;
        b->replace_space = true;
        return NULL;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *rep = json_get_string(v, "replacement"), *scheme = json_get_string(v, "prepend_scheme");
        int add_prefix = 1, split = 1;  // the defaults of files that predate prepend_scheme and split
        if (!rep || strcmp(rep, TOK_SPACE)) return snprintf(why, whylen, "Metaspace with a replacement other than \"" TOK_SPACE "\""), v;
        json_get_bool(v, "add_prefix_space", &add_prefix);
        json_get_bool(v, "split", &split);
        if (scheme && strcmp(scheme, "always") && strcmp(scheme, "first") && strcmp(scheme, "never"))
            return snprintf(why, whylen, "Metaspace with prepend_scheme \"%s\"", scheme), v;
        b->replace_space = true;
        // "first" differs from "always" only on text split around added tokens, which fsdpc never splits
        b->prepend_meta = scheme ? strcmp(scheme, "never") != 0 : add_prefix;
        b->split = split;
        return NULL;
    }
    snprintf(why, whylen, "%s", type);
    return v;
}

// Adds piece text s[0, n) as id. The vocabulary holds each id and each text once; an added
// token may repeat a text, which then keeps finding the first id.
static bool tok_bpe_add(TokBpe *b, const char *s, size_t n, int32_t id, bool added, size_t *pool_len, char *why, size_t whylen) {
    if (b->plen[id] != SIZE_MAX) return snprintf(why, whylen, "id %d appears twice in the vocabulary", (int)id), false;
    size_t i = tok_hash(s, n) & b->slot_mask;
    bool repeated = false;
    for (; !repeated && b->slot[i] >= 0; i = (i + 1) & b->slot_mask)
        repeated = b->plen[b->slot[i]] == n && !memcmp(b->pool + b->off[b->slot[i]], s, n);
    if (repeated && !added) return snprintf(why, whylen, "piece \"%.*s\" appears twice in the vocabulary", (int)(n > 40 ? 40 : n), s), false;
    if (!repeated) b->slot[i] = id;
    memcpy(b->pool + *pool_len, s, n);
    b->off[id] = *pool_len;
    b->plen[id] = n;
    *pool_len += n;
    return true;
}

// A merge, "LEFT RIGHT" or ["LEFT", "RIGHT"]; rank is its position (lower merges first).
static bool tok_bpe_merge(TokBpe *b, const JsonValue *m, int32_t rank, char *why, size_t whylen) {
    const char *l, *r;
    size_t ln, rn;
    if (m->type == JSON_STRING) {
        const char *space = memchr(m->str, ' ', m->len);
        if (!space || memchr(space + 1, ' ', m->len - (size_t)(space + 1 - m->str)))
            return snprintf(why, whylen, "merge %d is not two pieces separated by one space", (int)rank), false;
        l = m->str, ln = (size_t)(space - m->str), r = space + 1, rn = m->len - ln - 1;
    } else if (m->type == JSON_ARRAY && m->len == 2 && m->items[0].type == JSON_STRING && m->items[1].type == JSON_STRING) {
        l = m->items[0].str, ln = m->items[0].len, r = m->items[1].str, rn = m->items[1].len;
    } else {
        return snprintf(why, whylen, "merge %d is neither \"a b\" nor [\"a\", \"b\"]", (int)rank), false;
    }
    char *both = mallocCheck(ln + rn);
    memcpy(both, l, ln);
    memcpy(both + ln, r, rn);
    int32_t li = tok_bpe_find(b, l, ln), ri = tok_bpe_find(b, r, rn), id = tok_bpe_find(b, both, ln + rn);
    free(both);
    if (li < 0 || ri < 0 || id < 0) return snprintf(why, whylen, "merge %d joins pieces that are not in the vocabulary", (int)rank), false;
    uint64_t key = (uint64_t)li << 32 | (uint32_t)ri;
    size_t slot = tok_merge_slot(b, key);
    if (b->mkey[slot] == key) return true;  // listed twice: the first rank holds
    b->mkey[slot] = key;
    b->mval[slot] = (TokMerge){rank, id};
    return true;
}

static bool tok_bpe_load(Tokenizer *t, const JsonValue *root, char *why, size_t whylen) {
    TokBpe *b = &t->bpe;
    const JsonValue *model = json_get(root, "model");
    if (!model || model->type != JSON_OBJECT) return snprintf(why, whylen, "no \"model\" object"), false;
    const char *type = json_get_string(model, "type");
    if (type && strcmp(type, "BPE"))
        return snprintf(why, whylen, "model type \"%s\" is not supported (fsdpc reads SentencePiece-style BPE with byte_fallback, as Llama-2 and Mistral use, and GPT-2's byte-level BPE)", type), false;
    const JsonValue *vocab = json_get(model, "vocab"), *merges = json_get(model, "merges");
    if (!vocab || vocab->type != JSON_OBJECT || !merges || merges->type != JSON_ARRAY)
        return snprintf(why, whylen, "model %s has no \"vocab\" object and \"merges\" array", type ? type : "without a type"), false;
    int fallback = 0;
    json_get_bool(model, "byte_fallback", &fallback);
    if (!fallback)  // byte-level ones went to data/bpe
        return snprintf(why, whylen, "BPE without byte_fallback is not supported (fsdpc reads SentencePiece-style BPE with byte_fallback, as Llama-2 and Mistral use, and GPT-2's byte-level BPE)"), false;
    double dropout = 0;
    json_get_number(model, "dropout", &dropout);
    const char *prefix = json_get_string(model, "continuing_subword_prefix"), *suffix = json_get_string(model, "end_of_word_suffix");
    int ignore_merges = 0;
    json_get_bool(model, "ignore_merges", &ignore_merges);
    if (dropout != 0 || (prefix && *prefix) || (suffix && *suffix) || ignore_merges)
        return snprintf(why, whylen, "BPE with %s is not supported", dropout != 0 ? "dropout" : ignore_merges ? "ignore_merges" : "subword prefixes or suffixes"), false;
    char step[96];
    const JsonValue *bad = tok_json_steps(b, json_get(root, "normalizer"), "normalizers", step, sizeof step);
    if (bad) return snprintf(why, whylen, "normalizer %s is not supported (only Prepend and Replace of SentencePiece's '" TOK_SPACE "')", step), false;
    bad = tok_json_steps(b, json_get(root, "pre_tokenizer"), "pretokenizers", step, sizeof step);
    if (bad) return snprintf(why, whylen, "pre_tokenizer %s is not supported (only Metaspace)", step), false;

    // ids: the vocabulary's and the added tokens' (which may lie beyond it)
    const JsonValue *added = json_get(root, "added_tokens");
    int64_t max_id = -1;
    size_t pool_bytes = 0;
    for (size_t i = 0; i < vocab->len; i++) {
        const JsonValue *v = &vocab->items[i];
        if (v->type != JSON_NUMBER || !v->is_int || v->integer < 0 || v->integer >= INT32_MAX)
            return snprintf(why, whylen, "vocabulary entry \"%.40s\" has no valid id", v->key), false;
        if (v->integer > max_id) max_id = v->integer;
        pool_bytes += v->key_len;
    }
    size_t nadded = added && added->type == JSON_ARRAY ? added->len : 0;
    for (size_t i = 0; i < nadded; i++) {
        int64_t id;
        const char *content = json_get_string(&added->items[i], "content");
        if (!json_get_int(&added->items[i], "id", &id) || id < 0 || id >= INT32_MAX || !content)
            return snprintf(why, whylen, "added token %zu has no valid id and content", i), false;
        if (id > max_id) max_id = id;
        pool_bytes += json_get(&added->items[i], "content")->len;
    }
    t->vocab = (int)(max_id + 1);
    b->pool = mallocCheck(pool_bytes);
    b->off = callocCheck((size_t)t->vocab, sizeof *b->off);
    b->plen = mallocCheck((size_t)t->vocab * sizeof *b->plen);
    b->type = callocCheck((size_t)t->vocab, sizeof *b->type);
    b->byte = mallocCheck((size_t)t->vocab * sizeof *b->byte);
    for (int i = 0; i < t->vocab; i++) b->plen[i] = SIZE_MAX, b->byte[i] = -1;
    size_t slots = tok_pow2_above((size_t)t->vocab);
    b->slot = mallocCheck(slots * sizeof *b->slot);
    memset(b->slot, 0xFF, slots * sizeof *b->slot);
    b->slot_mask = slots - 1;
    size_t pool_len = 0;
    for (size_t i = 0; i < vocab->len; i++)
        if (!tok_bpe_add(b, vocab->items[i].key, vocab->items[i].key_len, (int32_t)vocab->items[i].integer, false, &pool_len, why, whylen))
            return false;
    for (size_t i = 0; i < nadded; i++) {
        const JsonValue *a = &added->items[i], *content = json_get(a, "content");
        int64_t id;
        int special = 0;
        json_get_int(a, "id", &id);
        json_get_bool(a, "special", &special);
        // an added token usually repeats a vocabulary entry; one beyond it gets its text here
        if (b->plen[id] == SIZE_MAX && !tok_bpe_add(b, content->str, content->len, (int32_t)id, true, &pool_len, why, whylen)) return false;
        if (special) b->type[id] = TOK_PIECE_CONTROL;
    }
    for (int i = 0; i < t->vocab; i++)
        if (b->plen[i] == SIZE_MAX) return snprintf(why, whylen, "the vocabulary has no id %d (ids must be 0..%d)", i, t->vocab - 1), false;

    const char *unk = json_get_string(model, "unk_token");
    t->unk = unk ? tok_bpe_find(b, unk, strlen(unk)) : -1;
    if (unk && t->unk < 0) return snprintf(why, whylen, "unk_token \"%.40s\" is not in the vocabulary", unk), false;
    if (t->unk >= 0) b->type[t->unk] = TOK_PIECE_UNKNOWN;
    t->bos = tok_bpe_find(b, "<s>", 3);
    t->eos = tok_bpe_find(b, "</s>", 4);
    for (int c = 0; c < 256; c++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", c);
        int32_t id = tok_bpe_find(b, name, 6);
        if (id < 0 && t->unk < 0) return snprintf(why, whylen, "byte_fallback without a %s piece or an unk_token", name), false;
        b->byte_id[c] = id >= 0 ? id : t->unk;
        if (id >= 0) b->type[id] = TOK_PIECE_BYTE, b->byte[id] = (int16_t)c;
    }
    for (int c = 0; c < 128; c++) b->ascii[c] = tok_bpe_find(b, (const char[]){(char)c}, 1);

    // SentencePiece merges the best piece first and ties (splits of one piece) leftmost first: a
    // merge's priority is the rank of the first merge that makes the same piece
    size_t mslots = tok_pow2_above(merges->len);
    b->mkey = mallocCheck(mslots * sizeof *b->mkey);
    memset(b->mkey, 0xFF, mslots * sizeof *b->mkey);
    b->mval = mallocCheck(mslots * sizeof *b->mval);
    b->mkey_mask = mslots - 1;
    if (merges->len >= INT32_MAX) return snprintf(why, whylen, "too many merges"), false;
    for (size_t i = 0; i < merges->len; i++)
        if (!tok_bpe_merge(b, &merges->items[i], (int32_t)i, why, whylen)) return false;
    int32_t *first = mallocCheck((size_t)t->vocab * sizeof *first);
    for (int i = 0; i < t->vocab; i++) first[i] = INT32_MAX;
    for (size_t i = 0; i < mslots; i++)
        if (b->mkey[i] != UINT64_MAX && b->mval[i].prio < first[b->mval[i].id]) first[b->mval[i].id] = b->mval[i].prio;
    b->cut_at_space = true;
    for (size_t i = 0; i < mslots; i++) {
        if (b->mkey[i] == UINT64_MAX) continue;
        int32_t id = b->mval[i].id;
        b->mval[i].prio = first[id];
        const char *p = b->pool + b->off[id];
        for (size_t k = 1; k + 3 <= b->plen[id]; k++)
            if (!memcmp(p + k, TOK_SPACE, 3) && (k < 3 || memcmp(p + k - 3, TOK_SPACE, 3))) b->cut_at_space = false;
    }
    free(first);
    return true;
}

static void tok_bpe_free(TokBpe *b) {
    free(b->pool);
    free(b->off);
    free(b->plen);
    free(b->type);
    free(b->byte);
    free(b->slot);
    free(b->mkey);
    free(b->mval);
}

// ---- tokenizer.json BPE: encoding (SentencePiece's bpe_model algorithm) ----

typedef struct {
    const uint8_t *src;  // the character's normalized bytes, for byte fallback
    int32_t id;          // piece id; -1 for a character that is no piece
    int32_t prev, next;  // neighbours still standing, -1 at the ends
    uint32_t len;        // normalized bytes; 0 once merged into the left neighbour
} TokSym;

typedef struct {
    int32_t prio, left, right, id;
    uint32_t len;  // left.len + right.len when pushed: stale once either has changed
} TokPair;

typedef struct {
    uint64_t hash;  // 0: empty
    uint32_t key, key_len, ids, nids;  // offsets into the cache's pools
} TokCacheSlot;

// Scratch space and the segment cache of one tokenizer.json tokenizer (hence one encoding thread
// at a time per Tokenizer).
struct TokWork {
    uint8_t *norm;  // the normalized text
    size_t norm_cap;
    TokSym *sym;
    size_t sym_cap;
    TokPair *heap;
    size_t nheap, heap_cap;
    TokCacheSlot *slot;  // TOK_CACHE_SLOTS
    size_t nslots_used;
    uint8_t *keys;  // cached segments, back to back
    size_t keys_len, keys_cap;
    int32_t *ids;  // their ids, back to back
    size_t ids_len, ids_cap;
};

static bool tok_pair_before(const TokPair *a, const TokPair *b) {
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

static void tok_heap_push(TokWork *w, TokPair p) {
    w->heap = tok_grow(w->heap, &w->heap_cap, w->nheap + 1, sizeof *w->heap);
    size_t i = w->nheap++;
    while (i > 0 && tok_pair_before(&p, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = p;
}

static TokPair tok_heap_pop(TokWork *w) {
    TokPair top = w->heap[0], last = w->heap[--w->nheap];
    size_t i = 0, n = w->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && tok_pair_before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!tok_pair_before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static void tok_maybe_pair(const TokBpe *b, TokWork *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const TokSym *l = &w->sym[left], *r = &w->sym[right];
    if (l->id < 0 || r->id < 0) return;
    uint64_t key = (uint64_t)l->id << 32 | (uint32_t)r->id;
    size_t slot = tok_merge_slot(b, key);
    if (b->mkey[slot] != key) return;
    tok_heap_push(w, (TokPair){b->mval[slot].prio, left, right, b->mval[slot].id, l->len + r->len});
}

static size_t tok_char_len(uint8_t lead) { return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// Merges normalized segment s[0, n) (whole, valid UTF-8 characters) and appends its ids.
static void tok_bpe_segment(const TokBpe *b, TokWork *w, const uint8_t *s, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    w->sym = tok_grow(w->sym, &w->sym_cap, n, sizeof *w->sym);
    int32_t nsym = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cl = (uint32_t)tok_char_len(s[i]);
        int32_t id = cl == 1 ? b->ascii[s[i] & 0x7F] : tok_bpe_find(b, (const char *)s + i, cl);
        w->sym[nsym] = (TokSym){s + i, id, nsym - 1, nsym + 1, cl};
        nsym++;
        i += cl;
    }
    w->sym[nsym - 1].next = -1;
    w->nheap = 0;
    for (int32_t i = 1; i < nsym; i++) tok_maybe_pair(b, w, i - 1, i);
    while (w->nheap) {
        TokPair p = tok_heap_pop(w);
        TokSym *l = &w->sym[p.left], *r = &w->sym[p.right];
        if (!l->len || !r->len || l->len + r->len != p.len) continue;
        l->id = p.id;
        l->len = p.len;
        l->next = r->next;
        if (r->next >= 0) w->sym[r->next].prev = p.left;
        r->len = 0;
        tok_maybe_pair(b, w, l->prev, p.left);
        tok_maybe_pair(b, w, p.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        const TokSym *sy = &w->sym[i];
        tok_reserve(ids, cap, *len + (sy->id >= 0 ? 1 : sy->len));
        if (sy->id >= 0) (*ids)[(*len)++] = sy->id;
        else
            for (uint32_t k = 0; k < sy->len; k++) (*ids)[(*len)++] = b->byte_id[sy->src[k]];
    }
}

// A segment's ids from the cache, or merged and then cached: text repeats its words.
static void tok_bpe_cached(const TokBpe *b, TokWork *w, const uint8_t *s, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    if (n > TOK_CACHE_MAX_SEGMENT) {
        tok_bpe_segment(b, w, s, n, ids, len, cap);
        return;
    }
    uint64_t h = tok_hash((const char *)s, n) | 1;
    size_t i = (size_t)(h >> 32) & (TOK_CACHE_SLOTS - 1);
    for (; w->slot[i].hash; i = (i + 1) & (TOK_CACHE_SLOTS - 1)) {
        const TokCacheSlot *c = &w->slot[i];
        if (c->hash == h && c->key_len == n && !memcmp(w->keys + c->key, s, n)) {
            tok_reserve(ids, cap, *len + c->nids);
            memcpy(*ids + *len, w->ids + c->ids, c->nids * sizeof **ids);
            *len += c->nids;
            return;
        }
    }
    size_t first = *len;
    tok_bpe_segment(b, w, s, n, ids, len, cap);
    size_t nids = *len - first;
    // once full, the segments seen so far stay cached and new ones are merged each time
    if (2 * (w->nslots_used + 1) > TOK_CACHE_SLOTS || w->keys_len + n > TOK_CACHE_POOL || 4 * (w->ids_len + nids) > TOK_CACHE_POOL) return;
    w->keys = tok_grow(w->keys, &w->keys_cap, w->keys_len + n, 1);
    w->ids = tok_grow(w->ids, &w->ids_cap, w->ids_len + nids, sizeof *w->ids);
    w->slot[i] = (TokCacheSlot){h, (uint32_t)w->keys_len, (uint32_t)n, (uint32_t)w->ids_len, (uint32_t)nids};
    memcpy(w->keys + w->keys_len, s, n);
    memcpy(w->ids + w->ids_len, *ids + first, nids * sizeof **ids);
    w->keys_len += n;
    w->ids_len += nids;
    w->nslots_used++;
}

static size_t tok_bpe_encode(const TokBpe *b, TokWork *w, const uint8_t *text, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    if (!n) return 0;
    static const uint8_t space[] = TOK_SPACE, replacement[] = TOK_REPLACEMENT;
    // normalize: '▁' for ' ', U+FFFD for each byte that starts no UTF-8 character, '▁' prepended
    w->norm = tok_grow(w->norm, &w->norm_cap, 3 * n + 3, 1);
    uint8_t *o = w->norm;
    bool starts_space = (b->replace_space && text[0] == ' ') || (n >= 3 && !memcmp(text, space, 3));
    if (b->prepend || (b->prepend_meta && !starts_space)) memcpy(o, space, 3), o += 3;
    for (size_t i = 0; i < n;) {
        if (text[i] < 0x80) {
            if (text[i] == ' ' && b->replace_space) memcpy(o, space, 3), o += 3;
            else *o++ = text[i];
            i++;
        } else {
            size_t cl = tok_utf8_len(text + i, n - i);
            if (cl) memcpy(o, text + i, cl), o += cl, i += cl;
            else memcpy(o, replacement, 3), o += 3, i++;
        }
    }
    // Merges never cross a segment boundary: before each '▁' with Metaspace's split, else before
    // each '▁' that follows another character when no piece holds such a pair (SentencePiece
    // vocabularies split by whitespace hold none)
    size_t nn = (size_t)(o - w->norm), start = 0, before = *len;
    const uint8_t *nb = w->norm;
    bool cut = b->split || b->cut_at_space, prev_space = true;
    for (size_t i = 0; cut && i < nn; i += tok_char_len(nb[i])) {
        bool is_space = nn - i >= 3 && !memcmp(nb + i, space, 3);
        if (is_space && i > start && (b->split || !prev_space)) {
            tok_bpe_cached(b, w, nb + start, i - start, ids, len, cap);
            start = i;
        }
        prev_space = is_space;
    }
    if (nn > start) tok_bpe_cached(b, w, nb + start, nn - start, ids, len, cap);
    return *len - before;
}

static TokWork *tok_work_new(void) {
    TokWork *w = callocCheck(1, sizeof *w);
    w->slot = callocCheck(TOK_CACHE_SLOTS, sizeof *w->slot);
    return w;
}

static void tok_work_free(TokWork *w) {
    if (!w) return;
    free(w->norm);
    free(w->sym);
    free(w->heap);
    free(w->slot);
    free(w->keys);
    free(w->ids);
    free(w);
}

// ---- opening ----

static bool tok_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

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
    FILE *f = fopen(path, "rb");
    int c = ' ';
    if (f) {
        while (c == ' ' || c == '\t' || c == '\r' || c == '\n') c = fgetc(f);
        fclose(f);
    }
    return c == '{';
}

static bool tok_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
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

// GPT-2's byte-level BPE from encoder.json (parsed: root) and its merges file, or from a
// byte-level tokenizer.json.
static bool tok_open_gpt2(Tokenizer *t, const JsonValue *root, bool encoder, const char *file, const char *merges_given, char *err,
                          size_t errlen) {
    char why[512], merges[4200];
    if (encoder) {
        // encoder.json: OpenAI's merges are vocab.bpe beside it, Hugging Face's copy names them merges.txt
        static const char *const openai[] = {"vocab.bpe", "merges.txt"}, *const hf_names[] = {"merges.txt", "vocab.bpe"};
        if (merges_given) snprintf(merges, sizeof merges, "%s", merges_given);
        else if (!tok_beside(file, tok_named(file, "vocab.json") ? hf_names : openai, 2, merges, sizeof merges))
            return err_set(err, errlen, "tokenizer '%s' is GPT-2's encoder.json and needs its merges (vocab.bpe) beside it: '%s' does not exist",
                           file, merges), false;
    }
    t->gpt2 = encoder ? bpe_load_encoder(root, merges, why, sizeof why) : bpe_load_json(root, why, sizeof why);
    if (!t->gpt2) return err_set(err, errlen, "tokenizer '%s': %s", file, why), false;
    t->kind = TOK_KIND_GPT2;
    t->vocab = bpe_vocab_size(t->gpt2);
    t->eos = bpe_end_of_text(t->gpt2);  // GPT-2 has no BOS: documents are separated by <|endoftext|>
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
    if (tok_is_dir(where)) {
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
    } else if (tok_ends_with(where, ".bpe") || tok_named(where, "merges.txt")) {
        // GPT-2's merges: the vocabulary is the encoder.json (vocab.json) beside them
        static const char *const openai[] = {"encoder.json", "vocab.json"}, *const hf[] = {"vocab.json", "encoder.json"};
        snprintf(merges, sizeof merges, "%s", where);
        if (!tok_beside(where, tok_named(where, "merges.txt") ? hf : openai, 2, file, sizeof file)) {
            err_set(err, errlen, "tokenizer '%s' holds GPT-2's merges and needs encoder.json beside it: '%s' does not exist", where, file);
            return free(t), NULL;
        }
    }
    t->path = tok_strdup(file);
    char why[512];
    if (access(file, R_OK) != 0) {
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
        const JsonValue *model = json_get(root, "model");
        bool encoder = bpe_json_is_encoder(root) || ((!model || model->type != JSON_OBJECT) && (tok_named(file, "encoder.json") || tok_named(file, "vocab.json")));
        bool gpt2 = encoder || bpe_json_is_byte_level(root);
        bool ok = gpt2 ? tok_open_gpt2(t, root, encoder, file, merges[0] ? merges : NULL, err, errlen) : tok_bpe_load(t, root, why, sizeof why);
        json_free(root);
        if (!ok) {
            if (!gpt2) err_set(err, errlen, "tokenizer '%s': %s", file, why);  // tok_open_gpt2 wrote its own
            tok_free(t);
            return NULL;
        }
        if (t->kind == TOK_KIND_BPE) t->work = tok_work_new();
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
    bpe_free(t->gpt2);
    tok_bpe_free(&t->bpe);
    tok_work_free(t->work);
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
    if (t->kind == TOK_KIND_BPE) return tok_bpe_find(&t->bpe, piece, n);
    if (t->kind == TOK_KIND_BYTE) return -1;
    // SentencePiece and GPT-2: a scan of the vocabulary, done once per caller, not per token
    for (int id = 0; id < t->vocab; id++) {
        size_t pn;
        bool special;
        const char *p = t->kind == TOK_KIND_SPM ? spm_piece(t->spm, id, &pn) : bpe_token_bytes(t->gpt2, id, &pn, &special);
        if (pn == n && !memcmp(p, piece, n)) return id;
    }
    return -1;
}

size_t tok_encode(const Tokenizer *t, const char *text, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    if (t->kind == TOK_KIND_BPE) return tok_bpe_encode(&t->bpe, t->work, (const uint8_t *)text, n, ids, len, cap);
    if (t->kind == TOK_KIND_GPT2) return bpe_encode(t->gpt2, text, n, ids, len, cap);
    if (t->kind == TOK_KIND_SPM) {
        char why[256];
        long got = spm_encode(t->spm, text, n, ids, len, cap, why, sizeof why);
        if (got < 0) err_fatal("tokenizing with '%s': %s", t->path, why);
        return (size_t)got;
    }
    tok_reserve(ids, cap, *len + n);
    for (size_t i = 0; i < n; i++) (*ids)[(*len)++] = (uint8_t)text[i];
    return n;
}

// ---- decoding ----

// The piece of id: its type, its text (p, n) and for a byte piece its byte.
static TokPieceType tok_piece(const Tokenizer *t, int32_t id, const char **p, size_t *n, int *byte) {
    *byte = -1;
    if (t->kind == TOK_KIND_BPE) {
        *p = t->bpe.pool + t->bpe.off[id];
        *n = t->bpe.plen[id];
        *byte = t->bpe.byte[id];
        return (TokPieceType)t->bpe.type[id];
    }
    *p = spm_piece(t->spm, id, n);
    if (spm_is_control(t->spm, id)) return TOK_PIECE_CONTROL;
    if (spm_is_unknown(t->spm, id)) return TOK_PIECE_UNKNOWN;
    if (spm_is_byte(t->spm, id)) {
        *byte = (int)strtol(*p + 3, NULL, 16);  // "<0xNN>"
        return TOK_PIECE_BYTE;
    }
    return TOK_PIECE_NORMAL;
}

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
    if (t->kind == TOK_KIND_GPT2) {  // raw bytes, maybe part of a character: the stream joins them
        size_t n;
        bool special;
        const char *p = bpe_token_bytes(t->gpt2, id, &n, &special);
        if (special) return 0;
        n = n < cap ? n : cap;
        memcpy(out, p, n);
        return n;
    }
    const char *p;
    size_t n;
    int byte;
    TokPieceType type = tok_piece(t, id, &p, &n, &byte);
    if (type == TOK_PIECE_BYTE) return out[0] = (char)byte, 1;
    if (type == TOK_PIECE_CONTROL) return 0;
    if (type == TOK_PIECE_UNKNOWN) p = TOK_UNK_SURFACE, n = strlen(TOK_UNK_SURFACE);
    const char *pp;
    size_t pn;
    bool at_start = prev < 0 || (prev < t->vocab && tok_piece(t, prev, &pp, &pn, &byte) == TOK_PIECE_CONTROL);
    bool drops = t->kind == TOK_KIND_SPM || t->bpe.prepend || t->bpe.prepend_meta;
    return tok_unescape(p, n, type == TOK_PIECE_NORMAL && at_start && drops, out, cap);
}

typedef struct {
    char *s;
    size_t len, cap;
} TokText;

static void tok_text_put(TokText *o, const void *p, size_t n) {
    o->s = tok_grow(o->s, &o->cap, o->len + n + 1, 1);
    memcpy(o->s + o->len, p, n);
    o->len += n;
    o->s[o->len] = '\0';
}

// A run of byte pieces becomes its UTF-8 characters, each byte that is none U+FFFD.
static void tok_text_bytes(TokText *o, const uint8_t *bytes, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t len = tok_utf8_len(bytes + i, n - i);
        if (len) tok_text_put(o, bytes + i, len);
        else tok_text_put(o, TOK_REPLACEMENT, 3);
        i += len ? len : 1;
    }
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
    if (t->kind == TOK_KIND_GPT2) {  // the pieces' bytes joined, then read as UTF-8 (lossy)
        TokText raw = {0};
        tok_text_put(&raw, "", 0);
        for (size_t i = 0; i < n; i++) {
            size_t pn;
            bool special;
            const char *p = bpe_token_bytes(t->gpt2, ids[i], &pn, &special);
            if (!special) tok_text_put(&raw, p, pn);
        }
        o.s = tok_grow(o.s, &o.cap, 3 * raw.len + 1, 1);
        o.len = bpe_utf8_lossy((const uint8_t *)raw.s, raw.len, (uint8_t *)o.s);
        o.s[o.len] = '\0';
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
        TokPieceType type = tok_piece(t, ids[i], &p, &pn, &byte);
        if (type == TOK_PIECE_BYTE) {
            run[nrun++] = (uint8_t)byte;
            at_start = false;
            continue;
        }
        tok_text_bytes(&o, run, nrun);  // any other piece ends a run of bytes
        nrun = 0;
        if (type == TOK_PIECE_CONTROL) continue;
        bool drop = at_start && (t->bpe.prepend || t->bpe.prepend_meta);
        at_start = false;
        if (type == TOK_PIECE_UNKNOWN) {
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
    tok_text_bytes(&o, run, nrun);
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
            snprintf(why, whylen, "'%.*s' is not a token id", (int)(wl > 40 ? 40 : wl), s);
            return why;
        }
        if (errno || v >= t->vocab) {
            snprintf(why, whylen, "token id %.*s is out of range for the vocabulary of %d", (int)(end - s > 40 ? 40 : end - s), s, t->vocab);
            return why;
        }
        tok_reserve(ids, cap, *len + 1);
        (*ids)[(*len)++] = (int32_t)v;
        s = end;
    }
}

// Lines of stdin to ids (or ids to text) on stdout, until the end or a stop signal (comm_stop_signal,
// polled between lines: the output ends with a whole line); *lines counts those written.
static const char *tok_run(const Tokenizer *t, bool bos, bool eos, bool decode, unsigned long *lines, char *why, size_t whylen) {
    static char obuf[1 << 16];
    setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
    char *line = NULL;
    size_t line_cap = 0, len = 0, cap = 0;
    int32_t *ids = NULL;
    const char *fail = NULL;
    ssize_t got;
    for (unsigned long line_no = 1; !fail && !comm_stop_signal && (got = getline(&line, &line_cap, stdin)) >= 0; line_no++) {
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
            fwrite(text, 1, n, stdout);
            free(text);
        } else {
            len = 0;
            if (bos && t->bos >= 0) tok_reserve(&ids, &cap, 1), ids[len++] = t->bos;
            tok_encode(t, line, (size_t)got, &ids, &len, &cap);
            if (eos && t->eos >= 0) tok_reserve(&ids, &cap, len + 1), ids[len++] = t->eos;
            for (size_t i = 0; i < len; i++) printf(i ? " %d" : "%d", (int)ids[i]);
        }
        putchar('\n');
        *lines = line_no;
        if (ferror(stdout)) break;  // the first failed write ends the run, not the end of stdin
    }
    if (!fail) fail = io_write_error(stdout, "standard output");
    free(line);
    free(ids);
    return fail;
}

typedef struct {
    char tokenizer[1024];
    int bos, eos, decode, chat, labels;
    int tmpl;  // ChatTemplate
} TokenizeArgs;

static const char *tokenize_template(void *dst, const char *v) {
    static char msg[300];
    ChatTemplate t;
    if (!sft_template_parse(v, &t)) return ((TokenizeArgs *)dst)->tmpl = (int)t, NULL;
    snprintf(msg, sizeof msg, "--chat_template '%.200s' is none of llama2, chatml, none", v);
    return msg;
}

static void tokenize_show_template(const void *dst, char *buf, size_t len) {
    snprintf(buf, len, "%s", sft_template_name((ChatTemplate)((const TokenizeArgs *)dst)->tmpl));
}

static void tokenize_defaults(void *dst) { ((TokenizeArgs *)dst)->tmpl = CHAT_LLAMA2; }

#define TOK_AT(field) .off = offsetof(TokenizeArgs, field)
static const CliFlag tokenize_flags[] = {
    {.name = "tokenizer", .kind = CLI_STR, TOK_AT(tokenizer), .size = sizeof(((TokenizeArgs *)0)->tokenizer), .arg = "SPEC",
     .help = "byte, a tokenizer.model or tokenizer.json, GPT-2's encoder.json, a directory or a hub name (required)"},
    {.name = "bos", .kind = CLI_BOOL, TOK_AT(bos), .help = "begin each line's ids with BOS"},
    {.name = "eos", .kind = CLI_BOOL, TOK_AT(eos), .help = "end each line's ids with EOS"},
    {.name = "decode", .kind = CLI_BOOL, TOK_AT(decode), .help = "read lines of ids, write their text"},
    {.name = "chat", .kind = CLI_BOOL, TOK_AT(chat),
     .help = "read chat JSON Lines ({\"messages\": [...]} or {\"conversations\": [...]}), one line of ids per conversation"},
    {.name = "chat_template", .kind = CLI_CALL, TOK_AT(tmpl), .call = tokenize_template, .show = tokenize_show_template,
     .arg = "llama2|chatml|none", .help = "--chat's template"},
    {.name = "labels", .kind = CLI_BOOL, TOK_AT(labels), .help = "--chat: each line's labels on the next line, -1 where no loss"},
};
static unsigned char tokenize_given[sizeof tokenize_flags / sizeof tokenize_flags[0]];
const CliTable tokenize_cli = {.flags = tokenize_flags, .n = sizeof tokenize_flags / sizeof tokenize_flags[0],
                               .given = tokenize_given, .command = "tokenize", .bare_hint = "tokenize reads standard input",
                               .size = sizeof(TokenizeArgs), .defaults = tokenize_defaults};

int data_tokenize_main(void *args) {
    const TokenizeArgs *a = args;
    const char *spec = a->tokenizer;
    bool bos = a->bos, eos = a->eos, decode = a->decode, chat = a->chat, labels = a->labels;
    bool tmpl_given = cli_given(&tokenize_cli, "chat_template");
    if (!*spec) comm_fail_all("tokenize needs --tokenizer (byte, a tokenizer.model or tokenizer.json, GPT-2's encoder.json, a directory or a hub name)");
    if (decode && (bos || eos)) comm_fail_all("--bos and --eos apply to encoding, not to --decode");
    if (chat && (bos || eos || decode)) comm_fail_all("--chat adds BOS and EOS as its template says; --bos, --eos and --decode do not apply");
    if (!chat && (labels || tmpl_given)) comm_fail_all("%s applies to --chat only", labels ? "--labels" : "--chat_template");
    ChatTemplate tmpl = (ChatTemplate)a->tmpl;
    char err[1024];
    Tokenizer *t = tok_open(spec, err, sizeof err);
    if (!t) comm_fail_all("%s", err);
    // ids or text go to stdout: a file there must not be the tokenizer being read
    if (strcmp(tok_path(t), "byte")) io_input(tok_path(t), "--tokenizer");
    comm_check_all(comm_info.rank == 0 ? io_output("/dev/stdout", "standard output") : NULL);
    // stdin reaches rank 0 only; the others wait to share its outcome
    char why[1024];
    const char *fail = NULL;
    unsigned long lines = 0;
    comm_stop_polled(1);  // between lines; a blocked read of stdin ends with EINTR
    if (comm_info.rank == 0 && chat) {
        static char obuf[1 << 16];
        setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
        fail = sft_tokenize_chat(t, tmpl, labels, stdin, stdout, &comm_stop_signal, &lines, why, sizeof why);
        const char *w = io_write_error(stdout, "standard output");  // the reason, where a write failed
        if (w) fail = w;
    } else if (comm_info.rank == 0) {
        fail = tok_run(t, bos, eos, decode, &lines, why, sizeof why);
    }
    int stopped = comm_info.rank == 0 ? comm_stop_signal : 0;  // rank 0's reading is the job's
    comm_check_all(stopped ? NULL : fail);
    comm_bcast_bytes(comm_world(), &stopped, sizeof stopped, 0);
    if (stopped)
        log_msg("Stopped by signal %d (%s) during tokenize: standard output holds the whole lines of the first %lu input "
                "line(s); exiting with status %d\n", stopped, comm_signal_name(stopped), lines, COMM_EXIT_STOPPED);
    tok_free(t);
    return stopped ? COMM_EXIT_STOPPED : 0;
}
