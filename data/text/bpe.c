// bpe: one merge engine under a table of choices (BpeOptions). Pieces are kept as the bytes the
// merges see (byte-level: raw bytes; the files' byte -> character mapping only matters when
// reading them), merges as a hash of (left id, right id) -> priority.
#include "bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "../../base/buf.h"
#include "../../base/err.h"
#include "../../base/path.h"

#define BPE_MERGES_MAX_BYTES ((size_t)1 << 30)
#define BPE_MAP_CPS (256 + 68)        // code points of the byte -> character mapping
#define BPE_SPACE "\xE2\x96\x81"      // U+2581 '▁': SentencePiece's visible space
#define BPE_CACHE_SLOTS (1 << 16)     // segment cache: at most half used
#define BPE_CACHE_MAX_SEGMENT 64      // bytes: longer segments are rare, merged each time
#define BPE_CACHE_POOL (1 << 22)      // bytes of segments and of ids cached, each
#define BPE_JIT_STACK_MAX (1 << 20)   // PCRE2's default 32 KiB JIT stack can fall short on long runs
#define BPE_SPM_KINDS "fsdpc reads SentencePiece-style BPE with byte_fallback, as Llama-2 and Mistral use, and GPT-2's byte-level BPE"

// GPT-2's pretokenizer. Its \s is Unicode's White_Space property as tiktoken and Hugging Face
// tokenizers read it; PCRE2's \s (with UCP) also takes U+180E, so the property is named instead.
static const char bpe_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\p{White_Space}\\p{L}\\p{N}]+"
    "|\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+";

typedef struct {
    int32_t prio, id;  // priority (lower merges first) and the joined piece
} BpeMerge;

typedef struct {
    const uint8_t *src;  // the symbol's first bytes, for byte fallback
    int32_t id;          // piece id; -1 for a character that is no piece, or once merged away
    int32_t prev, next;  // neighbours still standing, -1 at the ends
    uint32_t len;        // bytes before merging
} BpeSym;

typedef struct {
    int32_t prio, left, right, id;
    int32_t lid, rid;  // the two ids when pushed: stale once either has changed
} BpePair;

typedef struct {
    uint32_t off, len;  // the token's bytes in added_pool (NFC'd when normalized and the file's normalizer is)
    int32_t id;
    bool normalized;    // matched in the normalised text; else in the text as given
    uint8_t first;      // its first byte
} BpeAdded;

typedef struct {
    uint64_t hash;  // 0: empty
    uint32_t key, key_len, ids, nids;  // offsets into the cache's pools
} BpeCacheSlot;

struct Bpe {
    BpeOptions opt;
    char *regex;  // opt.regex's own copy
    int vocab, unk;
    char *pool;        // the pieces' bytes, back to back
    size_t *off;       // id -> its bytes in pool
    uint32_t *plen;    // UINT32_MAX while the id is unseen
    uint8_t *type;     // BpePieceType by id
    int32_t *slot;     // hash of bytes -> id, -1 empty
    size_t slot_mask;
    uint64_t *mkey;    // merge hash: left << 32 | right, UINT64_MAX empty
    BpeMerge *mval;
    size_t mkey_mask;
    int32_t byte_id[256];  // byte-level: each byte's piece; else the byte-fallback pieces
    int32_t ascii[128];    // not byte-level: each ASCII character's piece, -1 when none
    int16_t cp_byte[BPE_MAP_CPS];  // byte-level files: character -> byte, -1 for none
    pcre2_code *re;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    BpeAdded *added;        // split_added: the non-special added tokens, by first byte, longest first
    size_t nadded;
    uint32_t added_at[257]; // first byte c -> added[added_at[c], added_at[c + 1])
    char *added_pool;
    // scratch space and the segment cache (hence one encoding thread at a time)
    uint8_t *norm;
    size_t norm_cap;
    uint8_t *raw;  // the text as well-formed UTF-8 (U+FFFD for ill-formed), before added tokens and NFC
    size_t raw_cap;
    BpeSym *sym;
    size_t sym_cap;
    BpePair *heap;
    size_t nheap, heap_cap;
    BpeCacheSlot *cache;
    size_t ncached;
    uint8_t *keys;
    size_t keys_len, keys_cap;
    int32_t *cids;
    size_t cids_len, cids_cap;
};


// ---- UTF-8 ----

static bool bpe_utf8_valid(const uint8_t *s, size_t n) {
    size_t bad;
    for (size_t i = 0, len; i < n; i += len)
        if (!(len = s[i] < 0x80 ? 1 : json_utf8_char(s + i, n - i, &bad))) return false;
    return true;
}

size_t bpe_utf8_lossy(const uint8_t *s, size_t n, uint8_t *out, bool per_byte) {
    size_t k = 0, len, bad;
    for (size_t i = 0; i < n;) {
        if ((len = json_utf8_char(s + i, n - i, &bad))) {
            memcpy(out + k, s + i, len);
            k += len, i += len;
        } else {
            memcpy(out + k, "\xEF\xBF\xBD", 3);
            k += 3, i += per_byte ? 1 : bad;
        }
    }
    return k;
}

// s[0, *n) (well-formed UTF-8) in NFC: s itself when ASCII (already NFC), else utf8proc's copy,
// which *owned holds for the caller to free.
static const uint8_t *bpe_nfc(const uint8_t *s, size_t *n, uint8_t **owned) {
    *owned = NULL;
    size_t i = 0;
    while (i < *n && s[i] < 0x80) i++;
    if (i == *n) return s;
    if (*n > (size_t)PTRDIFF_MAX / 16) err_fatal("a text of %zu bytes is too long to normalise", *n);
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t k = utf8proc_map(s, (utf8proc_ssize_t)*n, &out, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    // the text is well-formed by now, so only running out of memory is left
    if (k < 0) err_fatal("cannot normalise a text of %zu bytes to NFC (utf8proc: %s)", *n, utf8proc_errmsg(k));
    *owned = out;
    *n = (size_t)k;
    return out;
}

static size_t bpe_char_len(uint8_t lead) { return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// ---- the tables ----

static uint64_t bpe_hash(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    return h;
}

static size_t bpe_pow2_above(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

int32_t bpe_piece_id(const Bpe *b, const char *s, size_t n) {
    for (size_t i = bpe_hash(s, n) & b->slot_mask;; i = (i + 1) & b->slot_mask) {
        int32_t id = b->slot[i];
        if (id < 0) return -1;
        if (b->plen[id] == n && !memcmp(b->pool + b->off[id], s, n)) return id;
    }
}

static size_t bpe_merge_slot(const Bpe *b, uint64_t key) {
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 32) & b->mkey_mask;  // high bits: both ids count
    while (b->mkey[i] != key && b->mkey[i] != UINT64_MAX) i = (i + 1) & b->mkey_mask;
    return i;
}

// GPT-2 writes each byte as a printable character: '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF
// as themselves, the other 68 bytes as U+0100 onwards in byte order. cp_byte inverts that.
static void bpe_byte_map(int16_t cp_byte[BPE_MAP_CPS]) {
    for (int i = 0; i < BPE_MAP_CPS; i++) cp_byte[i] = -1;
    int next = 256;
    for (int c = 0; c < 256; c++) {
        bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
        cp_byte[printable ? c : next++] = (int16_t)c;
    }
}

// A piece as the files spell it, s[0, n), into the bytes the merges see (out, room for n).
// Byte-level: its characters through cp_byte, or its text as it is when some character is no
// byte's (as Hugging Face's ByteLevel decoder does). Returns the length.
static size_t bpe_unspell(const Bpe *b, const char *s, size_t n, char *out) {
    if (!b->opt.byte_level) return memcpy(out, s, n), n;
    const uint8_t *u = (const uint8_t *)s;
    size_t k = 0, len, bad;
    for (size_t i = 0; i < n; i += len) {
        len = json_utf8_char(u + i, n - i, &bad);
        int32_t cp = len == 1 ? u[i] : len == 2 ? (u[i] & 0x1F) << 6 | (u[i + 1] & 0x3F) : -1;  // mapped ones: < U+0800
        if (cp < 0 || cp >= BPE_MAP_CPS || b->cp_byte[cp] < 0) return memcpy(out, s, n), n;
        out[k++] = (char)b->cp_byte[cp];
    }
    return k;
}

static Bpe *bpe_new(const BpeOptions *opt) {
    Bpe *b = callocCheck(1, sizeof *b);
    b->opt = *opt;
    if (opt->regex) {
        b->regex = mallocCheck(strlen(opt->regex) + 1);
        b->opt.regex = strcpy(b->regex, opt->regex);
    }
    b->unk = -1;
    bpe_byte_map(b->cp_byte);
    return b;
}

static Bpe *bpe_fail(Bpe *b) {
    bpe_free(b);
    return NULL;
}

// Adds piece text s[0, n) as id. Each id comes once and each vocabulary piece's bytes once; an
// added token may repeat a piece, whose bytes then keep finding the first id.
static bool bpe_add(Bpe *b, const char *s, size_t n, int32_t id, bool added, size_t *pool_len, char *why, size_t whylen) {
    if (b->plen[id] != UINT32_MAX) return snprintf(why, whylen, "id %d appears twice in the vocabulary", (int)id), false;
    if (n >= UINT32_MAX) return snprintf(why, whylen, "piece %d is too long", (int)id), false;
    char *raw = b->pool + *pool_len;
    size_t rn = bpe_unspell(b, s, n, raw);
    size_t i = bpe_hash(raw, rn) & b->slot_mask;
    for (; b->slot[i] >= 0; i = (i + 1) & b->slot_mask) {
        int32_t other = b->slot[i];
        if (b->plen[other] != rn || memcmp(b->pool + b->off[other], raw, rn)) continue;
        if (!added) return snprintf(why, whylen, "piece \"%.*s\" appears twice in the vocabulary", (int)(n > 40 ? 40 : n), s), false;
        break;
    }
    if (b->slot[i] < 0) b->slot[i] = id;
    b->off[id] = *pool_len;
    b->plen[id] = (uint32_t)rn;
    *pool_len += rn;
    return true;
}

// The vocabulary object (piece -> id) and added tokens (an array of {id, content, special}, or
// NULL) into the tables, with room for nmerges merges.
static bool bpe_vocab(Bpe *b, const JsonValue *vocab, const JsonValue *added, size_t nmerges, char *why, size_t whylen) {
    int64_t max_id = -1;
    size_t pool_bytes = 0, nadded = added && added->type == JSON_ARRAY ? added->len : 0;
    for (size_t i = 0; i < vocab->len; i++) {
        const JsonValue *v = &vocab->items[i];
        if (v->type != JSON_NUMBER || !v->is_int || v->integer < 0 || v->integer >= INT32_MAX)
            return snprintf(why, whylen, "vocabulary entry \"%.40s\" has no valid id", v->key), false;
        if (v->integer > max_id) max_id = v->integer;
        pool_bytes += v->key_len;
    }
    for (size_t i = 0; i < nadded; i++) {
        int64_t id;
        const JsonValue *content = json_get(&added->items[i], "content");
        if (!json_get_int(&added->items[i], "id", &id) || id < 0 || id >= INT32_MAX || !content || content->type != JSON_STRING)
            return snprintf(why, whylen, "added token %zu has no valid id and content", i), false;
        // Hugging Face's loader refuses a switch of another type; taking it as absent would
        // split or normalise text around the token unlike the model's own tokenizer
        static const char *const switches[] = {"special", "normalized", "lstrip", "rstrip", "single_word"};
        int on;
        for (size_t k = 0; k < sizeof switches / sizeof switches[0]; k++)
            if (json_get_switch(&added->items[i], switches[k], &on) < 0)
                return snprintf(why, whylen, "added token %zu (\"%.40s\"): %s must be true or false", i, content->str, switches[k]), false;
        if (id > max_id) max_id = id;
        pool_bytes += content->len;
    }
    if (max_id < 0) return snprintf(why, whylen, "the vocabulary is empty"), false;
    // every id below the largest must be there: tables sized by a lying id would be mostly holes
    if ((uint64_t)max_id >= 2 * (uint64_t)(vocab->len + nadded) + 1024)
        return snprintf(why, whylen, "the vocabulary's ids run to %lld but it holds %zu pieces", (long long)max_id, vocab->len + nadded), false;
    b->vocab = (int)(max_id + 1);
    b->pool = mallocCheck(pool_bytes ? pool_bytes : 1);  // raw bytes never outnumber the text's
    b->off = callocCheck((size_t)b->vocab, sizeof *b->off);
    b->plen = mallocCheck((size_t)b->vocab * sizeof *b->plen);
    b->type = callocCheck((size_t)b->vocab, sizeof *b->type);
    for (int i = 0; i < b->vocab; i++) b->plen[i] = UINT32_MAX;
    size_t slots = bpe_pow2_above((size_t)b->vocab);
    b->slot = mallocCheck(slots * sizeof *b->slot);
    memset(b->slot, 0xFF, slots * sizeof *b->slot);
    b->slot_mask = slots - 1;
    size_t mslots = bpe_pow2_above(nmerges);
    b->mkey = mallocCheck(mslots * sizeof *b->mkey);
    memset(b->mkey, 0xFF, mslots * sizeof *b->mkey);
    b->mval = mallocCheck(mslots * sizeof *b->mval);
    b->mkey_mask = mslots - 1;
    size_t pool_len = 0;
    for (size_t i = 0; i < vocab->len; i++)
        if (!bpe_add(b, vocab->items[i].key, vocab->items[i].key_len, (int32_t)vocab->items[i].integer, false, &pool_len, why, whylen))
            return false;
    for (size_t i = 0; i < nadded; i++) {
        const JsonValue *a = &added->items[i], *content = json_get(a, "content");
        int64_t id;
        int special = 0;
        json_get_int(a, "id", &id);
        json_get_bool(a, "special", &special);
        // an added token usually repeats a vocabulary entry; one beyond it gets its text here
        if (b->plen[id] == UINT32_MAX && !bpe_add(b, content->str, content->len, (int32_t)id, true, &pool_len, why, whylen)) return false;
        if (special) b->type[id] = BPE_PIECE_SPECIAL;
    }
    for (int i = 0; i < b->vocab; i++)
        if (b->plen[i] == UINT32_MAX) return snprintf(why, whylen, "the vocabulary has no id %d (ids must be 0..%d)", i, b->vocab - 1), false;
    return true;
}

static int bpe_added_cmp(const void *x, const void *y) {
    const BpeAdded *a = x, *c = y;
    if (a->first != c->first) return a->first < c->first ? -1 : 1;
    if (a->len != c->len) return a->len > c->len ? -1 : 1;  // longest first: the first match is the longest
    return (a->id > c->id) - (a->id < c->id);
}

// split_added's table: the added tokens (already checked by bpe_vocab) that are not special and
// not empty. Those that would strip spaces or match whole words only are refused, not ignored.
static bool bpe_added_table(Bpe *b, const JsonValue *added, char *why, size_t whylen) {
    size_t n = added && added->type == JSON_ARRAY ? added->len : 0, pool = 0, cap = 0;
    b->added = mallocCheck((n ? n : 1) * sizeof *b->added);
    for (size_t i = 0; i < n; i++) {
        const JsonValue *a = &added->items[i], *content = json_get(a, "content");
        int64_t id;
        int special = 0, lstrip = 0, rstrip = 0, single = 0, normalized;
        json_get_int(a, "id", &id);
        json_get_bool(a, "special", &special);
        if (special || !content->len) continue;
        normalized = 1;  // Hugging Face's default for a token that is not special
        json_get_bool(a, "normalized", &normalized);
        json_get_bool(a, "lstrip", &lstrip);
        json_get_bool(a, "rstrip", &rstrip);
        json_get_bool(a, "single_word", &single);
        if (lstrip || rstrip || single)
            return snprintf(why, whylen, "added token \"%.40s\" with lstrip, rstrip or single_word is not supported (only literal ones, as GPT-NeoX's)",
                            content->str),
                   false;
        const uint8_t *c = (const uint8_t *)content->str;
        size_t cn = content->len;
        if (!bpe_utf8_valid(c, cn)) return snprintf(why, whylen, "added token %zu is not well-formed UTF-8", i), false;
        uint8_t *owned = NULL;
        if (normalized && b->opt.normalizer == BPE_NORM_NFC) c = bpe_nfc(c, &cn, &owned);
        if (cn >= UINT32_MAX - pool) {
            free(owned);
            return snprintf(why, whylen, "the added tokens are too long"), false;
        }
        buf_fit(b->added_pool, &cap, pool + cn);
        memcpy(b->added_pool + pool, c, cn);
        b->added[b->nadded++] = (BpeAdded){(uint32_t)pool, (uint32_t)cn, (int32_t)id, normalized != 0, c[0]};
        pool += cn;
        free(owned);
    }
    qsort(b->added, b->nadded, sizeof *b->added, bpe_added_cmp);
    for (size_t c = 0, k = 0; c <= 256; c++) {
        while (k < b->nadded && b->added[k].first < c) k++;
        b->added_at[c] = (uint32_t)k;
    }
    return true;
}

// The merge of pieces l + r (texts as in the files) at rank; where names it in errors.
static bool bpe_merge(Bpe *b, const char *l, size_t ln, const char *r, size_t rn, int32_t rank, const char *where, char *why,
                      size_t whylen) {
    char *both = mallocCheck(ln + rn + 1);
    size_t bl = bpe_unspell(b, l, ln, both), br = bpe_unspell(b, r, rn, both + bl);
    int32_t li = bpe_piece_id(b, both, bl), ri = bpe_piece_id(b, both + bl, br), id = bpe_piece_id(b, both, bl + br);
    free(both);
    if (li < 0 || ri < 0 || id < 0)
        return snprintf(why, whylen, "%s (\"%.*s\" \"%.*s\") %s", where, (int)(ln > 40 ? 40 : ln), l, (int)(rn > 40 ? 40 : rn), r,
                        li < 0 || ri < 0 ? "joins pieces that are not in the vocabulary" : "makes a piece that is not in the vocabulary"),
               false;
    uint64_t key = (uint64_t)(uint32_t)li << 32 | (uint32_t)ri;
    size_t slot = bpe_merge_slot(b, key);
    if (b->mkey[slot] == key) return true;  // listed twice: the first rank holds
    b->mkey[slot] = key;
    b->mval[slot] = (BpeMerge){rank, id};
    return true;
}

// A tokenizer.json's merges: each "LEFT RIGHT" or ["LEFT", "RIGHT"], best first.
static bool bpe_json_merges(Bpe *b, const JsonValue *merges, char *why, size_t whylen) {
    for (size_t i = 0; i < merges->len; i++) {
        const JsonValue *m = &merges->items[i];
        char where[48];
        snprintf(where, sizeof where, "merge %zu", i);
        const char *l, *r;
        size_t ln, rn;
        if (m->type == JSON_STRING) {
            const char *space = memchr(m->str, ' ', m->len);
            ln = space ? (size_t)(space - m->str) : 0, rn = space ? m->len - ln - 1 : 0;
            if (!ln || !rn || memchr(space + 1, ' ', rn))
                return snprintf(why, whylen, "merge %zu is not two pieces separated by one space", i), false;
            l = m->str, r = space + 1;
        } else if (m->type == JSON_ARRAY && m->len == 2 && m->items[0].type == JSON_STRING && m->items[1].type == JSON_STRING) {
            l = m->items[0].str, ln = m->items[0].len, r = m->items[1].str, rn = m->items[1].len;
        } else {
            return snprintf(why, whylen, "merge %zu is neither \"a b\" nor [\"a\", \"b\"]", i), false;
        }
        if (!bpe_merge(b, l, ln, r, rn, (int32_t)i, where, why, whylen)) return false;
    }
    return true;
}

// Piece priority: SentencePiece merges the best piece first and ties (splits of one piece)
// leftmost first, so a merge ranks as the first merge that makes the same piece.
static void bpe_piece_priorities(Bpe *b) {
    int32_t *first = mallocCheck((size_t)b->vocab * sizeof *first);
    for (int i = 0; i < b->vocab; i++) first[i] = INT32_MAX;
    for (size_t i = 0; i <= b->mkey_mask; i++)
        if (b->mkey[i] != UINT64_MAX && b->mval[i].prio < first[b->mval[i].id]) first[b->mval[i].id] = b->mval[i].prio;
    for (size_t i = 0; i <= b->mkey_mask; i++)
        if (b->mkey[i] != UINT64_MAX) b->mval[i].prio = first[b->mval[i].id];
    free(first);
}

// Whether some merge makes a piece with a character before a '▁' (merges could then cross the
// places BPE_SPLIT_WORDS cuts at).
static bool bpe_crosses_words(const Bpe *b) {
    for (size_t i = 0; i <= b->mkey_mask; i++) {
        if (b->mkey[i] == UINT64_MAX) continue;
        const char *p = b->pool + b->off[b->mval[i].id];
        for (size_t k = 1; k + 3 <= b->plen[b->mval[i].id]; k++)
            if (!memcmp(p + k, BPE_SPACE, 3) && (k < 3 || memcmp(p + k - 3, BPE_SPACE, 3))) return true;
    }
    return false;
}

// After the vocabulary and merges: the special piece, <unk> (unk: its text, or NULL), the pieces
// merging starts from, the merges' priorities, the split, the regex and the cache.
static bool bpe_finish(Bpe *b, const char *unk, char *why, size_t whylen) {
    const char *special = b->opt.special;
    int32_t id = special ? bpe_piece_id(b, special, strlen(special)) : -1;
    if (id >= 0) b->type[id] = BPE_PIECE_SPECIAL;
    if (unk && (b->unk = bpe_piece_id(b, unk, strlen(unk))) < 0)
        return snprintf(why, whylen, "unk_token \"%.40s\" is not in the vocabulary", unk), false;
    if (b->unk >= 0) b->type[b->unk] = BPE_PIECE_UNKNOWN;
    for (int c = 0; c < 256; c++) {
        char name[8];
        if (b->opt.byte_level) {
            b->byte_id[c] = bpe_piece_id(b, &(char){(char)c}, 1);
            if (b->byte_id[c] < 0 || b->type[b->byte_id[c]] == BPE_PIECE_SPECIAL)
                return snprintf(why, whylen, "byte-level BPE without a piece for byte 0x%02X (it needs all 256)", c), false;
            continue;
        }
        snprintf(name, sizeof name, "<0x%02X>", c);
        id = bpe_piece_id(b, name, 6);
        if (id < 0 && b->unk < 0) return snprintf(why, whylen, "byte_fallback without a %s piece or an unk_token", name), false;
        b->byte_id[c] = id >= 0 ? id : b->unk;
        if (id >= 0) b->type[id] = BPE_PIECE_BYTE;
        if (c < 128) b->ascii[c] = bpe_piece_id(b, &(char){(char)c}, 1);
    }
    if (b->opt.piece_priority) bpe_piece_priorities(b);
    if (b->opt.split == BPE_SPLIT_WORDS && bpe_crosses_words(b)) b->opt.split = BPE_SPLIT_NONE;
    if (b->opt.split == BPE_SPLIT_REGEX) {
        int code;
        PCRE2_SIZE at;
        b->re = pcre2_compile((PCRE2_SPTR)b->regex, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
        if (!b->re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(code, msg, sizeof msg);
            return snprintf(why, whylen, "PCRE2 cannot compile the pre-tokenizer (%s at offset %zu)", (const char *)msg, (size_t)at), false;
        }
        // JIT where PCRE2 has it for this machine; the interpreter gives the same matches otherwise
        if (pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE) == 0) {
            b->mctx = pcre2_match_context_create(NULL);
            b->jit = pcre2_jit_stack_create(32 * 1024, BPE_JIT_STACK_MAX, NULL);
            if (!b->mctx || !b->jit) err_fatal("out of memory creating PCRE2's JIT stack");
            pcre2_jit_stack_assign(b->mctx, NULL, b->jit);
        }
        b->md = pcre2_match_data_create_from_pattern(b->re, NULL);
        if (!b->md) err_fatal("out of memory creating PCRE2 match data");
    }
    b->cache = callocCheck(BPE_CACHE_SLOTS, sizeof *b->cache);
    return true;
}

// ---- the files: GPT-2's, tokenizer.json ----

// GPT-2's choices: byte-level pieces merged by rank, split by its regex (use_regex, Hugging Face's
// ByteLevel option; GPT-2's own files always), a space before the text with add_prefix_space.
static BpeOptions bpe_gpt2_options(bool add_prefix, bool use_regex) {
    return (BpeOptions){.byte_level = true, .prefix = add_prefix ? " " : NULL, .split = use_regex ? BPE_SPLIT_REGEX : BPE_SPLIT_NONE,
                        .regex = use_regex ? bpe_gpt2_pattern : NULL, .special = "<|endoftext|>"};
}

bool bpe_json_is_encoder(const JsonValue *root) {
    const JsonValue *model = json_get(root, "model");  // "model" is also a GPT-2 piece: an id there
    return root->type == JSON_OBJECT && root->len > 0 && root->items[0].type == JSON_NUMBER && (!model || model->type != JSON_OBJECT);
}

bool bpe_json_is_byte_level(const JsonValue *root) {
    const JsonValue *pre = json_get(root, "pre_tokenizer");
    const char *pt = json_get_string(pre, "type"), *dt = json_get_string(json_get(root, "decoder"), "type");
    if ((pt && !strcmp(pt, "ByteLevel")) || (dt && !strcmp(dt, "ByteLevel"))) return true;
    const JsonValue *list = pt && !strcmp(pt, "Sequence") ? json_get(pre, "pretokenizers") : NULL;
    for (size_t i = 0; list && list->type == JSON_ARRAY && i < list->len; i++) {
        const char *t = json_get_string(&list->items[i], "type");
        if (t && !strcmp(t, "ByteLevel")) return true;
    }
    return false;
}

Bpe *bpe_load_encoder(const JsonValue *encoder, const char *merges_path, char *why, size_t whylen) {
    if (encoder->type != JSON_OBJECT) return err_null(why, whylen, "encoder.json is not an object of pieces and ids");
    FILE *f = path_fopen_read(merges_path);
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        snprintf(why, whylen, "cannot open '%s': %s", merges_path, path_strerror(errno));
        if (f) fclose(f);
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || (size_t)st.st_size > BPE_MERGES_MAX_BYTES) {
        snprintf(why, whylen, "'%s' is %s", merges_path, S_ISREG(st.st_mode) ? "too large for a merges file" : "not a regular file");
        fclose(f);
        return NULL;
    }
    size_t n = (size_t)st.st_size;
    char *text = mallocCheck(n + 1);
    size_t got = fread(text, 1, n, f);
    int e = ferror(f) ? errno : 0;
    fclose(f);
    if (got != n) {
        snprintf(why, whylen, "cannot read '%s': %s", merges_path, e ? strerror(e) : "it shrank while being read");
        free(text);
        return NULL;
    }
    text[n] = '\0';
    size_t nlines = 1;
    for (size_t i = 0; i < n; i++) nlines += text[i] == '\n';
    if (nlines >= INT32_MAX) {
        snprintf(why, whylen, "'%s' holds too many merges", merges_path);
        free(text);
        return NULL;
    }
    BpeOptions opt = bpe_gpt2_options(false, true);  // GPT-2: the regex, no prefix space
    Bpe *b = bpe_new(&opt);
    bool ok = bpe_vocab(b, encoder, NULL, nlines, why, whylen);
    int32_t rank = 0;
    char *line = text;
    for (size_t line_no = 1; ok && line < text + n; line_no++) {
        char *end = memchr(line, '\n', (size_t)(text + n - line)), *next;
        next = end ? end + 1 : text + n;
        if (!end) end = text + n;
        if (end > line && end[-1] == '\r') end--;
        size_t len = (size_t)(end - line);
        // the "#version: 0.2" header; blank lines (the last one) carry nothing
        if (len && !(line_no == 1 && line[0] == '#')) {
            char *space = memchr(line, ' ', len), where[4200];
            if (!space || space == line || space + 1 == end || memchr(space + 1, ' ', (size_t)(end - space - 1))) {
                snprintf(why, whylen, "line %zu of '%s' is not two pieces separated by one space", line_no, merges_path);
                ok = false;
                break;
            }
            snprintf(where, sizeof where, "line %zu of '%s'", line_no, merges_path);
            ok = bpe_merge(b, line, (size_t)(space - line), space + 1, (size_t)(end - space - 1), rank++, where, why, whylen);
        }
        line = next;
    }
    free(text);
    if (!ok || !bpe_finish(b, NULL, why, whylen)) return bpe_fail(b);
    return b;
}

// The type of a tokenizer.json step that is neither absent, null nor `allowed`; NULL when fine.
static const char *bpe_json_other(const JsonValue *v, const char *allowed) {
    if (!v || v->type == JSON_NULL) return NULL;
    const char *type = json_get_string(v, "type");
    if (!type) return "without a type";
    return allowed && !strcmp(type, allowed) ? NULL : type;
}

// A byte-level tokenizer.json's normalizer, pre_tokenizer and decoder: GPT-2's choices or an error.
static bool bpe_json_byte_level(const JsonValue *root, BpeOptions *opt, char *why, size_t whylen) {
    const char *other;
    if ((other = bpe_json_other(json_get(root, "normalizer"), "NFC")))
        return snprintf(why, whylen, "normalizer %s is not supported with byte-level BPE (only none, as GPT-2's, or NFC, as GPT-NeoX's)", other), false;
    const JsonValue *pre = json_get(root, "pre_tokenizer"), *split = NULL;
    if (!pre || pre->type == JSON_NULL) return snprintf(why, whylen, "byte-level BPE without a ByteLevel pre_tokenizer is not supported"), false;
    // Llama-3's: a Sequence of a Split by its own regex, then ByteLevel without GPT-2's regex
    const char *pt = json_get_string(pre, "type");
    const JsonValue *list = pt && !strcmp(pt, "Sequence") ? json_get(pre, "pretokenizers") : NULL;
    if (list && list->type == JSON_ARRAY && list->len == 2) {
        const char *t0 = json_get_string(&list->items[0], "type"), *t1 = json_get_string(&list->items[1], "type");
        if (t0 && t1 && !strcmp(t0, "Split") && !strcmp(t1, "ByteLevel")) split = &list->items[0], pre = &list->items[1];
    }
    const char *regex = split ? json_get_string(json_get(split, "pattern"), "Regex") : NULL;
    const char *behavior = split ? json_get_string(split, "behavior") : NULL;
    int invert = 0, add_prefix = 1, use_regex = 1;  // the defaults of Hugging Face's ByteLevel
    if (split && json_get_switch(split, "invert", &invert) < 0) return snprintf(why, whylen, "pre_tokenizer Split: invert must be true or false"), false;
    if (split && (!regex || !behavior || strcmp(behavior, "Isolated") || invert))
        return snprintf(why, whylen, "pre_tokenizer Split is supported only by a Regex pattern, behavior Isolated, not inverted (as Llama-3's)"), false;
    if ((other = bpe_json_other(pre, "ByteLevel")))
        return snprintf(why, whylen, "pre_tokenizer %s is not supported with byte-level BPE (only ByteLevel, as GPT-2's)", other), false;
    if ((other = bpe_json_other(json_get(root, "decoder"), "ByteLevel")))
        return snprintf(why, whylen, "decoder %s is not supported with byte-level BPE (only ByteLevel)", other), false;
    if (json_get_switch(pre, "add_prefix_space", &add_prefix) < 0 || json_get_switch(pre, "use_regex", &use_regex) < 0)
        return snprintf(why, whylen, "pre_tokenizer ByteLevel: add_prefix_space and use_regex must be true or false"), false;
    if (split && use_regex)
        return snprintf(why, whylen, "pre_tokenizer Split followed by a ByteLevel with use_regex is not supported (only one regex: Llama-3's has use_regex false)"), false;
    *opt = bpe_gpt2_options(add_prefix, use_regex || split);
    if (split) opt->regex = regex, opt->special = NULL;
    opt->normalizer = json_get(root, "normalizer") && json_get(root, "normalizer")->type != JSON_NULL ? BPE_NORM_NFC : BPE_NORM_NONE;
    opt->split_added = true;
    return true;
}

// The first node of a SentencePiece-style normalizer/pre_tokenizer, or of its Sequence, whose
// type is none of those fsdpc applies; NULL when all are known. Known ones set their choices.
static const JsonValue *bpe_json_steps(BpeOptions *o, const JsonValue *v, const char *list_key, char *why, size_t whylen) {
    if (!v || v->type == JSON_NULL) return NULL;
    const char *type = json_get_string(v, "type");
    if (!type) return snprintf(why, whylen, "a step without a type"), v;
    if (!strcmp(type, "Sequence")) {
        const JsonValue *list = json_get(v, list_key);
        if (!list || list->type != JSON_ARRAY) return snprintf(why, whylen, "a Sequence without \"%s\"", list_key), v;
        for (size_t i = 0; i < list->len; i++) {
            const JsonValue *bad = bpe_json_steps(o, &list->items[i], list_key, why, whylen);
            if (bad) return bad;
        }
        return NULL;
    }
    if (!strcmp(type, "Prepend")) {
        const char *with = json_get_string(v, "prepend");
        if (!with || strcmp(with, BPE_SPACE)) return snprintf(why, whylen, "Prepend of something else than \"" BPE_SPACE "\""), v;
        o->prefix = BPE_SPACE, o->prefix_always = true;
        return NULL;
    }
    if (!strcmp(type, "Replace")) {
        const char *from = json_get_string(json_get(v, "pattern"), "String"), *to = json_get_string(v, "content");
        if (!from || !to || strcmp(from, " ") || strcmp(to, BPE_SPACE))
            return snprintf(why, whylen, "Replace of something else than \" \" by \"" BPE_SPACE "\""), v;
        o->space_to_meta = true;
        return NULL;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *rep = json_get_string(v, "replacement"), *scheme = json_get_string(v, "prepend_scheme");
        int add_prefix = 1, split = 1;  // the defaults of files that predate prepend_scheme and split
        if (!rep || strcmp(rep, BPE_SPACE)) return snprintf(why, whylen, "Metaspace with a replacement other than \"" BPE_SPACE "\""), v;
        if (json_get_switch(v, "add_prefix_space", &add_prefix) < 0 || json_get_switch(v, "split", &split) < 0)
            return snprintf(why, whylen, "Metaspace with add_prefix_space or split neither true nor false"), v;
        if (scheme && strcmp(scheme, "always") && strcmp(scheme, "first") && strcmp(scheme, "never"))
            return snprintf(why, whylen, "Metaspace with prepend_scheme \"%s\"", scheme), v;
        o->space_to_meta = true;
        // "first" differs from "always" only on text split around added tokens, which fsdpc never splits
        if (scheme ? strcmp(scheme, "never") != 0 : add_prefix) o->prefix = BPE_SPACE;
        o->split = split ? BPE_SPLIT_METASPACE : BPE_SPLIT_WORDS;
        return NULL;
    }
    snprintf(why, whylen, "%s", type);
    return v;
}

Bpe *bpe_load_json(const JsonValue *root, char *why, size_t whylen) {
    const JsonValue *model = json_get(root, "model");
    if (!model || model->type != JSON_OBJECT) return err_null(why, whylen, "no \"model\" object");
    bool byte_level = bpe_json_is_byte_level(root);
    const char *type = json_get_string(model, "type");
    if (type && strcmp(type, "BPE"))
        return err_null(why, whylen, "model type \"%s\"%s is not supported (%s)", type, byte_level ? " with a ByteLevel pre_tokenizer" : "",
                        byte_level ? "fsdpc reads GPT-2's byte-level BPE" : BPE_SPM_KINDS);
    const JsonValue *vocab = json_get(model, "vocab"), *merges = json_get(model, "merges");
    if (!vocab || vocab->type != JSON_OBJECT || !merges || merges->type != JSON_ARRAY)
        return err_null(why, whylen, "model %s has no \"vocab\" object and \"merges\" array", type ? type : "without a type");
    int fallback = 0, ignore_merges = 0;
    double dropout = 0;
    if (json_get_switch(model, "byte_fallback", &fallback) < 0 || json_get_switch(model, "ignore_merges", &ignore_merges) < 0)
        return err_null(why, whylen, "model BPE: byte_fallback and ignore_merges must be true or false");
    json_get_number(model, "dropout", &dropout);
    const char *prefix = json_get_string(model, "continuing_subword_prefix"), *suffix = json_get_string(model, "end_of_word_suffix");
    if (!byte_level && !fallback) return err_null(why, whylen, "BPE without byte_fallback is not supported (" BPE_SPM_KINDS ")");
    if ((byte_level && fallback) || dropout != 0 || (ignore_merges && !byte_level) || (prefix && *prefix) || (suffix && *suffix))
        return err_null(why, whylen, "%sBPE with %s is not supported", byte_level ? "byte-level " : "",
                        byte_level && fallback ? "byte_fallback" : dropout != 0 ? "dropout" : ignore_merges ? "ignore_merges" : "subword prefixes or suffixes");
    // SentencePiece-style: characters with byte fallback, piece priority, per-byte U+FFFD
    BpeOptions opt = {.piece_priority = true, .lossy_per_byte = true, .split = BPE_SPLIT_WORDS};
    char step[96];
    if (byte_level) {
        if (!bpe_json_byte_level(root, &opt, why, whylen)) return NULL;
        opt.whole_pieces = ignore_merges;
    } else if (bpe_json_steps(&opt, json_get(root, "normalizer"), "normalizers", step, sizeof step)) {
        return err_null(why, whylen, "normalizer %s is not supported (only Prepend and Replace of SentencePiece's '" BPE_SPACE "')", step);
    } else if (bpe_json_steps(&opt, json_get(root, "pre_tokenizer"), "pretokenizers", step, sizeof step)) {
        return err_null(why, whylen, "pre_tokenizer %s is not supported (only Metaspace)", step);
    }
    if (merges->len >= INT32_MAX) return err_null(why, whylen, "too many merges");
    Bpe *b = bpe_new(&opt);
    if (!bpe_vocab(b, vocab, json_get(root, "added_tokens"), merges->len, why, whylen) ||
        (opt.split_added && !bpe_added_table(b, json_get(root, "added_tokens"), why, whylen)) || !bpe_json_merges(b, merges, why, whylen) ||
        !bpe_finish(b, byte_level ? NULL : json_get_string(model, "unk_token"), why, whylen))
        return bpe_fail(b);
    return b;
}

void bpe_free(Bpe *b) {
    if (!b) return;
    pcre2_match_data_free(b->md);
    pcre2_match_context_free(b->mctx);
    pcre2_jit_stack_free(b->jit);
    pcre2_code_free(b->re);
    free(b->regex);
    free(b->pool);
    free(b->off);
    free(b->plen);
    free(b->type);
    free(b->slot);
    free(b->mkey);
    free(b->mval);
    free(b->norm);
    free(b->raw);
    free(b->added);
    free(b->added_pool);
    free(b->sym);
    free(b->heap);
    free(b->cache);
    free(b->keys);
    free(b->cids);
    free(b);
}

const BpeOptions *bpe_options(const Bpe *b) { return &b->opt; }
int bpe_vocab_size(const Bpe *b) { return b->vocab; }
int bpe_unk(const Bpe *b) { return b->unk; }

BpePieceType bpe_piece(const Bpe *b, int32_t id, const char **p, size_t *n) {
    *p = b->pool + b->off[id];
    *n = b->plen[id];
    return (BpePieceType)b->type[id];
}

// ---- encoding ----

static bool bpe_pair_before(const BpePair *a, const BpePair *b) {
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

static void bpe_heap_push(Bpe *b, BpePair p) {
    buf_fit(b->heap, &b->heap_cap, b->nheap + 1);
    size_t i = b->nheap++;
    while (i > 0 && bpe_pair_before(&p, &b->heap[(i - 1) / 2])) {
        b->heap[i] = b->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    b->heap[i] = p;
}

static BpePair bpe_heap_pop(Bpe *b) {
    BpePair top = b->heap[0], last = b->heap[--b->nheap];
    size_t i = 0, n = b->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bpe_pair_before(&b->heap[c + 1], &b->heap[c])) c++;
        if (!bpe_pair_before(&b->heap[c], &last)) break;
        b->heap[i] = b->heap[c];
        i = c;
    }
    if (n) b->heap[i] = last;
    return top;
}

static void bpe_maybe_pair(Bpe *b, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    int32_t lid = b->sym[left].id, rid = b->sym[right].id;
    if (lid < 0 || rid < 0) return;
    uint64_t key = (uint64_t)(uint32_t)lid << 32 | (uint32_t)rid;
    size_t slot = bpe_merge_slot(b, key);
    if (b->mkey[slot] == key) bpe_heap_push(b, (BpePair){b->mval[slot].prio, left, right, b->mval[slot].id, lid, rid});
}

// Merges segment s[0, n) (whole characters) by priority, the leftmost first among equals (as
// GPT-2's encoder.py, Hugging Face and SentencePiece do), and appends the ids.
static void bpe_segment(Bpe *b, const uint8_t *s, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    buf_fit(b->sym, &b->sym_cap, n);
    int32_t nsym = 0;
    for (size_t i = 0; b->opt.byte_level && i < n; i++, nsym++) b->sym[nsym] = (BpeSym){s + i, b->byte_id[s[i]], nsym - 1, nsym + 1, 1};
    for (size_t i = 0, cl; !b->opt.byte_level && i < n; i += cl, nsym++) {
        cl = bpe_char_len(s[i]);
        int32_t id = cl == 1 ? b->ascii[s[i] & 0x7F] : bpe_piece_id(b, (const char *)s + i, cl);
        b->sym[nsym] = (BpeSym){s + i, id, nsym - 1, nsym + 1, (uint32_t)cl};
    }
    b->sym[nsym - 1].next = -1;
    b->nheap = 0;
    for (int32_t i = 1; i < nsym; i++) bpe_maybe_pair(b, i - 1, i);
    while (b->nheap) {
        BpePair p = bpe_heap_pop(b);
        BpeSym *l = &b->sym[p.left], *r = &b->sym[p.right];
        if (l->id != p.lid || l->next != p.right || r->id != p.rid) continue;
        l->id = p.id;
        l->next = r->next;
        if (r->next >= 0) b->sym[r->next].prev = p.left;
        r->id = -1;
        bpe_maybe_pair(b, l->prev, p.left);
        bpe_maybe_pair(b, p.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = b->sym[i].next) {
        const BpeSym *sy = &b->sym[i];
        buf_fit(*ids, cap, *len + (sy->id >= 0 ? 1 : sy->len));
        if (sy->id >= 0) (*ids)[(*len)++] = sy->id;
        else
            for (uint32_t k = 0; k < sy->len; k++) (*ids)[(*len)++] = b->byte_id[sy->src[k]];
    }
}

// A segment's ids from the cache, or merged and then cached: text repeats its words.
static void bpe_cached(Bpe *b, const uint8_t *s, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    if (b->opt.whole_pieces) {
        int32_t id = bpe_piece_id(b, (const char *)s, n);
        if (id >= 0 && b->type[id] == BPE_PIECE_NORMAL) {
            buf_fit(*ids, cap, *len + 1);
            (*ids)[(*len)++] = id;
            return;
        }
    }
    if (n > BPE_CACHE_MAX_SEGMENT) {
        bpe_segment(b, s, n, ids, len, cap);
        return;
    }
    uint64_t h = bpe_hash(s, n) | 1;
    size_t i = (size_t)(h >> 32) & (BPE_CACHE_SLOTS - 1);
    for (; b->cache[i].hash; i = (i + 1) & (BPE_CACHE_SLOTS - 1)) {
        const BpeCacheSlot *c = &b->cache[i];
        if (c->hash == h && c->key_len == n && !memcmp(b->keys + c->key, s, n)) {
            buf_fit(*ids, cap, *len + c->nids);
            memcpy(*ids + *len, b->cids + c->ids, c->nids * sizeof **ids);
            *len += c->nids;
            return;
        }
    }
    size_t first = *len;
    bpe_segment(b, s, n, ids, len, cap);
    size_t nids = *len - first;
    // once full, the segments seen so far stay cached and new ones are merged each time
    if (2 * (b->ncached + 1) > BPE_CACHE_SLOTS || b->keys_len + n > BPE_CACHE_POOL || 4 * (b->cids_len + nids) > BPE_CACHE_POOL) return;
    buf_fit(b->keys, &b->keys_cap, b->keys_len + n);
    buf_fit(b->cids, &b->cids_cap, b->cids_len + nids);
    b->cache[i] = (BpeCacheSlot){h, (uint32_t)b->keys_len, (uint32_t)n, (uint32_t)b->cids_len, (uint32_t)nids};
    memcpy(b->keys + b->keys_len, s, n);
    memcpy(b->cids + b->cids_len, *ids + first, nids * sizeof **ids);
    b->keys_len += n;
    b->cids_len += nids;
    b->ncached++;
}

// The text as the merges see it, s[0, *n) itself when that changes nothing: ill-formed UTF-8 as
// U+FFFD, ' ' as '▁' (space_to_meta), the prefix before it.
static const uint8_t *bpe_normalize(Bpe *b, const uint8_t *s, size_t *n) {
    const BpeOptions *o = &b->opt;
    size_t pn = o->prefix ? strlen(o->prefix) : 0;
    bool starts = pn && *n >= pn && !memcmp(s, o->prefix, pn);
    if (!o->space_to_meta && (!pn || (starts && !o->prefix_always)) && bpe_utf8_valid(s, *n)) return s;
    buf_fit(b->norm, &b->norm_cap, pn + 3 * *n);
    uint8_t *text = b->norm + pn, *w = text;
    for (size_t i = 0, cl, bad; i < *n;) {
        if (s[i] == ' ' && o->space_to_meta) {
            memcpy(w, BPE_SPACE, 3), w += 3, i++;
        } else if (s[i] < 0x80) {
            *w++ = s[i++];
        } else if ((cl = json_utf8_char(s + i, *n - i, &bad))) {
            memcpy(w, s + i, cl), w += cl, i += cl;
        } else {
            memcpy(w, "\xEF\xBF\xBD", 3), w += 3, i += o->lossy_per_byte ? 1 : bad;
        }
    }
    if (pn && (o->prefix_always || (size_t)(w - text) < pn || memcmp(text, o->prefix, pn))) text = memcpy(b->norm, o->prefix, pn);
    *n = (size_t)(w - text);
    return text;
}

// Text without added tokens: its pieces after the split and the merges.
static void bpe_encode_part(Bpe *b, const uint8_t *text, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    if (!n) return;
    const uint8_t *s = bpe_normalize(b, text, &n);
    size_t start = 0;
    if (b->opt.split == BPE_SPLIT_REGEX) {
        for (size_t at = 0; at < n;) {
            int rc = pcre2_match(b->re, s, n, at, PCRE2_NO_UTF_CHECK, b->md, b->mctx);
            if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(rc, msg, sizeof msg);
                err_fatal("the pre-tokenizer failed on a text of %zu bytes (PCRE2: %s)", n, (const char *)msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(b->md);
            // GPT-2's regex leaves no gaps and matches nothing empty; were there any, their bytes
            // would still be encoded, never dropped
            if (rc == PCRE2_ERROR_NOMATCH || ov[1] <= ov[0]) break;
            if (ov[0] > at) bpe_cached(b, s + at, ov[0] - at, ids, len, cap);
            bpe_cached(b, s + ov[0], ov[1] - ov[0], ids, len, cap);
            at = start = ov[1];
        }
    } else if (b->opt.split != BPE_SPLIT_NONE) {
        // a segment starts before each '▁' (METASPACE), or before each '▁' after another character (WORDS)
        bool metaspace = b->opt.split == BPE_SPLIT_METASPACE, prev_space = true;
        for (size_t i = 0; i < n; i += bpe_char_len(s[i])) {
            bool is_space = n - i >= 3 && !memcmp(s + i, BPE_SPACE, 3);
            if (is_space && i > start && (metaspace || !prev_space)) {
                bpe_cached(b, s + start, i - start, ids, len, cap);
                start = i;
            }
            prev_space = is_space;
        }
    }
    if (n > start) bpe_cached(b, s + start, n - start, ids, len, cap);
}

// The leftmost longest added token (the normalized ones, or the others) in s[0, n): its index in
// b->added and its start in *at; -1 when none.
static int64_t bpe_added_find(const Bpe *b, const uint8_t *s, size_t n, bool normalized, size_t *at) {
    for (size_t i = 0; i < n; i++)
        for (uint32_t k = b->added_at[s[i]]; k < b->added_at[s[i] + 1]; k++) {
            const BpeAdded *a = &b->added[k];
            if (a->normalized == normalized && a->len <= n - i && !memcmp(b->added_pool + a->off, s + i, a->len)) return *at = i, (int64_t)k;
        }
    return -1;
}

static void bpe_encode_normalized(Bpe *b, const uint8_t *s, size_t n, int32_t **ids, size_t *len, size_t *cap);

// Hugging Face's added vocabulary: the tokens of one kind are cut out of s[0, n) (well-formed
// UTF-8); the text between goes on to the normalizer (before it) or to the split (after it).
static void bpe_encode_added(Bpe *b, const uint8_t *s, size_t n, bool normalized, int32_t **ids, size_t *len, size_t *cap) {
    for (;;) {
        size_t at = n;
        int64_t k = bpe_added_find(b, s, n, normalized, &at);
        if (normalized) bpe_encode_part(b, s, at, ids, len, cap);
        else bpe_encode_normalized(b, s, at, ids, len, cap);
        if (k < 0) return;
        buf_fit(*ids, cap, *len + 1);
        (*ids)[(*len)++] = b->added[k].id;
        s += at + b->added[k].len, n -= at + b->added[k].len;
    }
}

// Text between the added tokens that are matched before normalising: normalised, then split at
// the normalized added tokens.
static void bpe_encode_normalized(Bpe *b, const uint8_t *s, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    if (!n) return;
    uint8_t *owned = NULL;
    if (b->opt.normalizer == BPE_NORM_NFC) s = bpe_nfc(s, &n, &owned);
    bpe_encode_added(b, s, n, true, ids, len, cap);
    free(owned);
}

size_t bpe_encode(Bpe *b, const char *text, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    size_t before = *len;
    const uint8_t *s = (const uint8_t *)text;
    if (!b->nadded && b->opt.normalizer == BPE_NORM_NONE) {
        bpe_encode_part(b, s, n, ids, len, cap);
        return *len - before;
    }
    if (!bpe_utf8_valid(s, n)) {  // added tokens and NFC see characters (Hugging Face's text is a String)
        buf_fit(b->raw, &b->raw_cap, 3 * n);
        n = bpe_utf8_lossy(s, n, b->raw, b->opt.lossy_per_byte);
        s = b->raw;
    }
    bpe_encode_added(b, s, n, false, ids, len, cap);
    return *len - before;
}
