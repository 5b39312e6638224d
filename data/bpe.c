// bpe: GPT-2's byte-level BPE. Pieces are kept as their raw bytes (the files' byte -> character
// mapping only matters when reading them), merges as a hash of (left id, right id) -> rank.
#include "bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../comm/comm.h"

#define BPE_MERGES_MAX_BYTES ((size_t)1 << 30)
#define BPE_MAP_CPS (256 + 68)        // code points of the byte -> character mapping
#define BPE_EOT "<|endoftext|>"       // GPT-2's document separator
#define BPE_CACHE_SLOTS (1 << 16)     // piece cache: at most half used
#define BPE_CACHE_MAX_PIECE 64        // bytes: longer pieces are rare, merged each time
#define BPE_CACHE_POOL (1 << 22)      // bytes of pieces and of ids cached, each
#define BPE_JIT_STACK_MAX (1 << 20)   // PCRE2's default 32 KiB JIT stack can fall short on long runs

// GPT-2's pretokenizer. Its \s is Unicode's White_Space property as tiktoken and Hugging Face
// tokenizers read it; PCRE2's \s (with UCP) also takes U+180E, so the property is named instead.
static const char bpe_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\p{White_Space}\\p{L}\\p{N}]+"
    "|\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+";

typedef struct {
    int32_t rank, id;  // rank: position in the merge list (lower merges first); id: the joined piece
} BpeMerge;

typedef struct {
    int32_t id;          // piece id; -1 once merged into the left neighbour
    int32_t prev, next;  // neighbours still standing, -1 at the ends
} BpeSym;

typedef struct {
    int32_t rank, left, right, id;
    int32_t lid, rid;  // the two ids when pushed: stale once either has changed
} BpePair;

typedef struct {
    uint64_t hash;  // 0: empty
    uint32_t key, key_len, ids, nids;  // offsets into the cache's pools
} BpeCacheSlot;

struct Bpe {
    int vocab, eot;
    char *pool;        // raw bytes of the pieces, back to back
    size_t *off;       // id -> its bytes in pool
    uint32_t *plen;    // UINT32_MAX while the id is unseen
    uint8_t *special;  // special tokens: never merged into, vanish when decoding
    int32_t *slot;     // hash of raw bytes -> id, -1 empty
    size_t slot_mask;
    uint64_t *mkey;    // merge hash: left << 32 | right, UINT64_MAX empty
    BpeMerge *mval;
    size_t mkey_mask;
    int32_t byte_id[256];
    bool add_prefix_space;  // a space before text that starts with none (HF ByteLevel option)
    bool use_regex;         // split with the pretokenizer (HF ByteLevel option; GPT-2 does)
    pcre2_code *re;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    // scratch space and the piece cache (hence one encoding thread at a time)
    uint8_t *text;
    size_t text_cap;
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

// p (*cap items of size bytes) grown by doubling to hold need items
static void *bpe_grow(void *p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return p;
    size_t want = *cap ? *cap : 256;
    while (want < need) want *= 2;
    p = realloc(p, want * size);
    if (!p) err_fatal("out of memory tokenizing (%zu x %zu bytes)", want, size);
    *cap = want;
    return p;
}

// ---- UTF-8 ----

// Length of the well-formed UTF-8 character at s (n > 0 bytes), or 0 with *bad the length of the
// maximal ill-formed subpart there (Unicode's table of well-formed byte sequences).
static size_t bpe_utf8_char(const uint8_t *s, size_t n, size_t *bad) {
    uint8_t c = s[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return *bad = 1, 0;
    size_t k = 1;
    if (n > 1 && s[1] >= lo && s[1] <= hi)
        for (k = 2; k < len && k < n && s[k] >= 0x80 && s[k] <= 0xBF;) k++;
    if (k == len) return len;
    return *bad = k, 0;
}

static bool bpe_utf8_valid(const uint8_t *s, size_t n) {
    size_t bad;
    for (size_t i = 0, len; i < n; i += len)
        if (!(len = s[i] < 0x80 ? 1 : bpe_utf8_char(s + i, n - i, &bad))) return false;
    return true;
}

size_t bpe_utf8_lossy(const uint8_t *s, size_t n, uint8_t *out) {
    size_t k = 0, len, bad;
    for (size_t i = 0; i < n;) {
        if ((len = bpe_utf8_char(s + i, n - i, &bad))) {
            memcpy(out + k, s + i, len);
            k += len, i += len;
        } else {
            memcpy(out + k, "\xEF\xBF\xBD", 3);
            k += 3, i += bad;
        }
    }
    return k;
}

// ---- reading the files ----

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

// A piece's raw bytes into out (room for n): its characters through cp_byte, or its text as it is
// when some character is no byte's (as Hugging Face's ByteLevel decoder does). Returns the length.
static size_t bpe_unlevel(const int16_t *cp_byte, const char *s, size_t n, char *out) {
    const uint8_t *u = (const uint8_t *)s;
    size_t k = 0, len, bad;
    for (size_t i = 0; i < n; i += len) {
        len = bpe_utf8_char(u + i, n - i, &bad);
        int32_t cp = len == 1 ? u[i] : len == 2 ? (u[i] & 0x1F) << 6 | (u[i + 1] & 0x3F) : -1;  // mapped ones: < U+0800
        if (cp < 0 || cp >= BPE_MAP_CPS || cp_byte[cp] < 0) return memcpy(out, s, n), n;
        out[k++] = (char)cp_byte[cp];
    }
    return k;
}

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

static int32_t bpe_find(const Bpe *b, const char *s, size_t n) {
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

// Tables for ids [0, vocab) whose piece texts total pool_bytes, and for nmerges merges.
static void bpe_tables(Bpe *b, int vocab, size_t pool_bytes, size_t nmerges) {
    b->vocab = vocab;
    b->pool = mallocCheck(pool_bytes ? pool_bytes : 1);  // raw bytes never outnumber the text's
    b->off = callocCheck((size_t)vocab, sizeof *b->off);
    b->plen = mallocCheck((size_t)vocab * sizeof *b->plen);
    b->special = callocCheck((size_t)vocab, sizeof *b->special);
    for (int i = 0; i < vocab; i++) b->plen[i] = UINT32_MAX;
    size_t slots = bpe_pow2_above((size_t)vocab);
    b->slot = mallocCheck(slots * sizeof *b->slot);
    memset(b->slot, 0xFF, slots * sizeof *b->slot);
    b->slot_mask = slots - 1;
    size_t mslots = bpe_pow2_above(nmerges);
    b->mkey = mallocCheck(mslots * sizeof *b->mkey);
    memset(b->mkey, 0xFF, mslots * sizeof *b->mkey);
    b->mval = mallocCheck(mslots * sizeof *b->mval);
    b->mkey_mask = mslots - 1;
}

// Adds piece text s[0, n) as id. Each id comes once and each vocabulary piece's bytes once; an
// added token may repeat a piece, whose bytes then keep finding the first id.
static bool bpe_add(Bpe *b, const int16_t *cp_byte, const char *s, size_t n, int32_t id, bool added, size_t *pool_len,
                    char *why, size_t whylen) {
    if (b->plen[id] != UINT32_MAX) return snprintf(why, whylen, "id %d appears twice in the vocabulary", (int)id), false;
    if (n >= UINT32_MAX) return snprintf(why, whylen, "piece %d is too long", (int)id), false;
    char *raw = b->pool + *pool_len;
    size_t rn = bpe_unlevel(cp_byte, s, n, raw);
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

// The merge of pieces l + r (texts as in the files) at rank; where names it in errors.
static bool bpe_merge(Bpe *b, const int16_t *cp_byte, const char *l, size_t ln, const char *r, size_t rn, int32_t rank,
                      const char *where, char *why, size_t whylen) {
    char *both = mallocCheck(ln + rn + 1);
    size_t bl = bpe_unlevel(cp_byte, l, ln, both), br = bpe_unlevel(cp_byte, r, rn, both + bl);
    int32_t li = bpe_find(b, both, bl), ri = bpe_find(b, both + bl, br), id = bpe_find(b, both, bl + br);
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

// After the vocabulary and merges: the byte pieces, <|endoftext|>, the regex and scratch space.
static bool bpe_finish(Bpe *b, char *why, size_t whylen) {
    for (int i = 0; i < b->vocab; i++)
        if (b->plen[i] == UINT32_MAX) return snprintf(why, whylen, "the vocabulary has no id %d (ids must be 0..%d)", i, b->vocab - 1), false;
    for (int c = 0; c < 256; c++) {
        b->byte_id[c] = bpe_find(b, &(char){(char)c}, 1);
        if (b->byte_id[c] < 0 || b->special[b->byte_id[c]])
            return snprintf(why, whylen, "byte-level BPE without a piece for byte 0x%02X (it needs all 256)", c), false;
    }
    b->eot = bpe_find(b, BPE_EOT, strlen(BPE_EOT));
    if (b->eot >= 0) b->special[b->eot] = 1;
    int code;
    PCRE2_SIZE at;
    b->re = pcre2_compile((PCRE2_SPTR)bpe_pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    if (!b->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return snprintf(why, whylen, "PCRE2 cannot compile GPT-2's pretokenizer (%s at offset %zu)", (const char *)msg, (size_t)at), false;
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
    b->cache = callocCheck(BPE_CACHE_SLOTS, sizeof *b->cache);
    return true;
}

static Bpe *bpe_fail(Bpe *b) {
    bpe_free(b);
    return NULL;
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

// The vocabulary object (piece -> id) and added tokens (an array of {id, content, special}, or
// NULL) into the tables.
static bool bpe_vocab(Bpe *b, const int16_t *cp_byte, const JsonValue *vocab, const JsonValue *added, size_t nmerges, char *why,
                      size_t whylen) {
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
        if (id > max_id) max_id = id;
        pool_bytes += content->len;
    }
    if (max_id < 0) return snprintf(why, whylen, "the vocabulary is empty"), false;
    bpe_tables(b, (int)(max_id + 1), pool_bytes, nmerges);
    size_t pool_len = 0;
    for (size_t i = 0; i < vocab->len; i++)
        if (!bpe_add(b, cp_byte, vocab->items[i].key, vocab->items[i].key_len, (int32_t)vocab->items[i].integer, false, &pool_len, why, whylen))
            return false;
    for (size_t i = 0; i < nadded; i++) {
        const JsonValue *a = &added->items[i], *content = json_get(a, "content");
        int64_t id;
        int special = 0;
        json_get_int(a, "id", &id);
        json_get_bool(a, "special", &special);
        // an added token usually repeats a vocabulary entry; one beyond it gets its text here
        if (b->plen[id] == UINT32_MAX && !bpe_add(b, cp_byte, content->str, content->len, (int32_t)id, true, &pool_len, why, whylen))
            return false;
        if (special) b->special[id] = 1;
    }
    return true;
}

Bpe *bpe_load_encoder(const JsonValue *encoder, const char *merges_path, char *why, size_t whylen) {
    if (encoder->type != JSON_OBJECT) return snprintf(why, whylen, "encoder.json is not an object of pieces and ids"), NULL;
    FILE *f = fopen(merges_path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        snprintf(why, whylen, "cannot open '%s': %s", merges_path, strerror(errno));
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
    int16_t cp_byte[BPE_MAP_CPS];
    bpe_byte_map(cp_byte);
    Bpe *b = callocCheck(1, sizeof *b);
    b->use_regex = true;  // GPT-2: the regex, no prefix space
    bool ok = bpe_vocab(b, cp_byte, encoder, NULL, nlines, why, whylen);
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
            ok = bpe_merge(b, cp_byte, line, (size_t)(space - line), space + 1, (size_t)(end - space - 1), rank++, where, why, whylen);
        }
        line = next;
    }
    free(text);
    if (!ok || !bpe_finish(b, why, whylen)) return bpe_fail(b);
    return b;
}

// The type of a tokenizer.json step that is neither absent, null nor `allowed`; NULL when fine.
static const char *bpe_json_other(const JsonValue *v, const char *allowed) {
    if (!v || v->type == JSON_NULL) return NULL;
    const char *type = json_get_string(v, "type");
    if (!type) return "without a type";
    return allowed && !strcmp(type, allowed) ? NULL : type;
}

Bpe *bpe_load_json(const JsonValue *root, char *why, size_t whylen) {
    const JsonValue *model = json_get(root, "model");
    if (!model || model->type != JSON_OBJECT) return snprintf(why, whylen, "no \"model\" object"), NULL;
    const char *type = json_get_string(model, "type"), *other;
    if (type && strcmp(type, "BPE"))
        return snprintf(why, whylen, "model type \"%s\" with a ByteLevel pre_tokenizer is not supported (fsdpc reads GPT-2's byte-level BPE)", type), NULL;
    const JsonValue *vocab = json_get(model, "vocab"), *merges = json_get(model, "merges");
    if (!vocab || vocab->type != JSON_OBJECT || !merges || merges->type != JSON_ARRAY)
        return snprintf(why, whylen, "model %s has no \"vocab\" object and \"merges\" array", type ? type : "without a type"), NULL;
    int fallback = 0, ignore_merges = 0;
    double dropout = 0;
    json_get_bool(model, "byte_fallback", &fallback);
    json_get_bool(model, "ignore_merges", &ignore_merges);
    json_get_number(model, "dropout", &dropout);
    const char *prefix = json_get_string(model, "continuing_subword_prefix"), *suffix = json_get_string(model, "end_of_word_suffix");
    if (fallback || dropout != 0 || ignore_merges || (prefix && *prefix) || (suffix && *suffix))
        return snprintf(why, whylen, "byte-level BPE with %s is not supported",
                        fallback ? "byte_fallback" : dropout != 0 ? "dropout" : ignore_merges ? "ignore_merges" : "subword prefixes or suffixes"),
               NULL;
    if ((other = bpe_json_other(json_get(root, "normalizer"), NULL)))
        return snprintf(why, whylen, "normalizer %s is not supported with byte-level BPE (GPT-2 has none)", other), NULL;
    const JsonValue *pre = json_get(root, "pre_tokenizer");
    if (!pre || pre->type == JSON_NULL) return snprintf(why, whylen, "byte-level BPE without a ByteLevel pre_tokenizer is not supported"), NULL;
    if ((other = bpe_json_other(pre, "ByteLevel")))
        return snprintf(why, whylen, "pre_tokenizer %s is not supported with byte-level BPE (only ByteLevel, as GPT-2's)", other), NULL;
    if ((other = bpe_json_other(json_get(root, "decoder"), "ByteLevel")))
        return snprintf(why, whylen, "decoder %s is not supported with byte-level BPE (only ByteLevel)", other), NULL;
    if (merges->len >= INT32_MAX) return snprintf(why, whylen, "too many merges"), NULL;
    int16_t cp_byte[BPE_MAP_CPS];
    bpe_byte_map(cp_byte);
    Bpe *b = callocCheck(1, sizeof *b);
    int add_prefix = 1, use_regex = 1;  // the defaults of Hugging Face's ByteLevel
    json_get_bool(pre, "add_prefix_space", &add_prefix);
    json_get_bool(pre, "use_regex", &use_regex);
    b->add_prefix_space = add_prefix, b->use_regex = use_regex;
    if (!bpe_vocab(b, cp_byte, vocab, json_get(root, "added_tokens"), merges->len, why, whylen)) return bpe_fail(b);
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
                return snprintf(why, whylen, "merge %zu is not two pieces separated by one space", i), bpe_fail(b);
            l = m->str, r = space + 1;
        } else if (m->type == JSON_ARRAY && m->len == 2 && m->items[0].type == JSON_STRING && m->items[1].type == JSON_STRING) {
            l = m->items[0].str, ln = m->items[0].len, r = m->items[1].str, rn = m->items[1].len;
        } else {
            return snprintf(why, whylen, "merge %zu is neither \"a b\" nor [\"a\", \"b\"]", i), bpe_fail(b);
        }
        if (!bpe_merge(b, cp_byte, l, ln, r, rn, (int32_t)i, where, why, whylen)) return bpe_fail(b);
    }
    if (!bpe_finish(b, why, whylen)) return bpe_fail(b);
    return b;
}

void bpe_free(Bpe *b) {
    if (!b) return;
    pcre2_match_data_free(b->md);
    pcre2_match_context_free(b->mctx);
    pcre2_jit_stack_free(b->jit);
    pcre2_code_free(b->re);
    free(b->pool);
    free(b->off);
    free(b->plen);
    free(b->special);
    free(b->slot);
    free(b->mkey);
    free(b->mval);
    free(b->text);
    free(b->sym);
    free(b->heap);
    free(b->cache);
    free(b->keys);
    free(b->cids);
    free(b);
}

int bpe_vocab_size(const Bpe *b) { return b->vocab; }
int bpe_end_of_text(const Bpe *b) { return b->eot; }

const char *bpe_token_bytes(const Bpe *b, int32_t id, size_t *n, bool *special) {
    *n = b->plen[id];
    *special = b->special[id];
    return b->pool + b->off[id];
}

// ---- encoding ----

static bool bpe_pair_before(const BpePair *a, const BpePair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void bpe_heap_push(Bpe *b, BpePair p) {
    b->heap = bpe_grow(b->heap, &b->heap_cap, b->nheap + 1, sizeof *b->heap);
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
    uint64_t key = (uint64_t)(uint32_t)lid << 32 | (uint32_t)rid;
    size_t slot = bpe_merge_slot(b, key);
    if (b->mkey[slot] == key) bpe_heap_push(b, (BpePair){b->mval[slot].rank, left, right, b->mval[slot].id, lid, rid});
}

static void bpe_reserve(int32_t **ids, size_t *cap, size_t need) { *ids = bpe_grow(*ids, cap, need, sizeof **ids); }

// Merges the bytes of piece s[0, n) by rank, the leftmost first among equals (as GPT-2's
// encoder.py and Hugging Face do), and appends the ids.
static void bpe_piece(Bpe *b, const uint8_t *s, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    b->sym = bpe_grow(b->sym, &b->sym_cap, n, sizeof *b->sym);
    for (size_t i = 0; i < n; i++) b->sym[i] = (BpeSym){b->byte_id[s[i]], (int32_t)i - 1, (int32_t)i + 1};
    b->sym[n - 1].next = -1;
    b->nheap = 0;
    for (size_t i = 1; i < n; i++) bpe_maybe_pair(b, (int32_t)i - 1, (int32_t)i);
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
        bpe_reserve(ids, cap, *len + 1);
        (*ids)[(*len)++] = b->sym[i].id;
    }
}

// A piece's ids from the cache, or merged and then cached: text repeats its words.
static void bpe_cached(Bpe *b, const uint8_t *s, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    if (n > BPE_CACHE_MAX_PIECE) {
        bpe_piece(b, s, n, ids, len, cap);
        return;
    }
    uint64_t h = bpe_hash(s, n) | 1;
    size_t i = (size_t)(h >> 32) & (BPE_CACHE_SLOTS - 1);
    for (; b->cache[i].hash; i = (i + 1) & (BPE_CACHE_SLOTS - 1)) {
        const BpeCacheSlot *c = &b->cache[i];
        if (c->hash == h && c->key_len == n && !memcmp(b->keys + c->key, s, n)) {
            bpe_reserve(ids, cap, *len + c->nids);
            memcpy(*ids + *len, b->cids + c->ids, c->nids * sizeof **ids);
            *len += c->nids;
            return;
        }
    }
    size_t first = *len;
    bpe_piece(b, s, n, ids, len, cap);
    size_t nids = *len - first;
    // once full, the pieces seen so far stay cached and new ones are merged each time
    if (2 * (b->ncached + 1) > BPE_CACHE_SLOTS || b->keys_len + n > BPE_CACHE_POOL || 4 * (b->cids_len + nids) > BPE_CACHE_POOL) return;
    b->keys = bpe_grow(b->keys, &b->keys_cap, b->keys_len + n, 1);
    b->cids = bpe_grow(b->cids, &b->cids_cap, b->cids_len + nids, sizeof *b->cids);
    b->cache[i] = (BpeCacheSlot){h, (uint32_t)b->keys_len, (uint32_t)n, (uint32_t)b->cids_len, (uint32_t)nids};
    memcpy(b->keys + b->keys_len, s, n);
    memcpy(b->cids + b->cids_len, *ids + first, nids * sizeof **ids);
    b->keys_len += n;
    b->cids_len += nids;
    b->ncached++;
}

size_t bpe_encode(Bpe *b, const char *text, size_t n, int32_t **ids, size_t *len, size_t *cap) {
    const uint8_t *s = (const uint8_t *)text;
    size_t before = *len;
    bool prefix = b->add_prefix_space && n && s[0] != ' ';
    if (prefix || !bpe_utf8_valid(s, n)) {  // PCRE2's UTF mode needs valid UTF-8
        b->text = bpe_grow(b->text, &b->text_cap, 3 * n + 1, 1);
        size_t k = prefix ? (b->text[0] = ' ', 1) : 0;
        n = k + bpe_utf8_lossy(s, n, b->text + k);
        s = b->text;
    }
    if (!b->use_regex) {
        if (n) bpe_cached(b, s, n, ids, len, cap);
        return *len - before;
    }
    for (size_t at = 0; at < n;) {
        int rc = pcre2_match(b->re, s, n, at, PCRE2_NO_UTF_CHECK, b->md, b->mctx);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            err_fatal("GPT-2's pretokenizer failed on a text of %zu bytes (PCRE2: %s)", n, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(b->md);
        // every character is a letter, a number, a space or another: no gaps, no empty matches;
        // were there any, their bytes would still be encoded, never dropped
        if (rc == PCRE2_ERROR_NOMATCH || ov[1] <= ov[0]) {
            bpe_cached(b, s + at, n - at, ids, len, cap);
            break;
        }
        if (ov[0] > at) bpe_cached(b, s + at, ov[0] - at, ids, len, cap);
        bpe_cached(b, s + ov[0], ov[1] - ov[0], ids, len, cap);
        at = ov[1];
    }
    return *len - before;
}
