// sniff: magic numbers, a light look at an Arrow stream's first message, the first 64 KiB of
// gzip / zstd decompressed and classified again, and UTF-8 / JSON Lines checks on samples.
#include "sniff.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "../../base/path.h"
#include "../../base/err.h"
#include "../../base/json.h"
#include "shardfile.h"

#define SNIFF_HEAD (256u << 10)  // bytes sampled from the start of a file
#define SNIFF_BLOCK (64u << 10)  // each later sample; also the decompressed start of gzip / zstd

typedef struct {
    const char *name;     // sniff_format_name
    const char *article;  // "a", "an", or "" for a mass noun ("text", "JSON Lines")
    const char *noun, *detail;
    int readable;
    const char *hint;     // when not readable
} SniffInfo;

static const char BINARY_HINT[] = "fsdpc reads text, JSON Lines, Parquet, Arrow IPC, HDF5, token shards (fsdpc, llm.c, "
                                  "nanoGPT .bin), and text or JSON Lines compressed with gzip or zstd";

static const SniffInfo sniff_info[] = {
    [SNIFF_NONE] = {"none", "", "nothing", "", 0, ""},
    [SNIFF_EMPTY] = {"empty", "an", "empty file", "", 1, ""},
    [SNIFF_TOKSHARD] = {"tokshard", "an", "fsdpc token shard", "", 1, ""},
    [SNIFF_LLMC] = {"llmc", "an", "llm.c token shard", "", 1, ""},
    [SNIFF_NANOGPT_BIN] = {"nanogpt_bin", "a", "nanoGPT token file", " (raw uint16 tokens, no header)", 1, ""},
    [SNIFF_HDF5] = {"hdf5", "an", "HDF5 file", "", 1, ""},
    [SNIFF_ARROW_STREAM] = {"arrow_stream", "an", "Arrow IPC stream", "", 1, ""},
    [SNIFF_ARROW_FILE] = {"arrow_file", "an", "Arrow IPC file", "", 1, ""},
    [SNIFF_PARQUET] = {"parquet", "a", "Parquet file", "", 1, ""},
    [SNIFF_JSONL] = {"jsonl", "", "JSON Lines", "", 1, ""},
    [SNIFF_JSON_ARRAY] = {"json_array", "a", "JSON array", " (one document holding every record, not JSON Lines)", 0,
                          "convert it to JSON Lines, one object per line: jq -c '.[]' IN > OUT.jsonl"},
    [SNIFF_JSON_DOC] = {"json_doc", "a", "JSON document", " spread over several lines (not JSON Lines, one object per line)", 0,
                        "convert it to JSON Lines, one object per line: jq -c . IN > OUT.jsonl"},
    [SNIFF_TEXT] = {"text", "", "UTF-8 text", "", 1, ""},
    [SNIFF_UTF16] = {"utf16", "", "UTF-16 text", "", 0, "convert it to UTF-8: iconv -f UTF-16 -t UTF-8 IN > OUT"},
    [SNIFF_GZIP] = {"gzip", "", "gzip-compressed data", "", 0, ""},
    [SNIFF_ZSTD] = {"zstd", "", "zstd-compressed data", "", 0, ""},
    [SNIFF_BZIP2] = {"bzip2", "", "bzip2-compressed data", "", 0,
                     "decompress it (bunzip2) or recompress it with gzip or zstd, which fsdpc reads"},
    [SNIFF_XZ] = {"xz", "", "xz-compressed data", "", 0, "decompress it (unxz) or recompress it with gzip or zstd, which fsdpc reads"},
    [SNIFF_LZ4] = {"lz4", "", "lz4-compressed data", "", 0,
                   "decompress it (lz4 -d) or recompress it with gzip or zstd, which fsdpc reads"},
    [SNIFF_ZIP] = {"zip", "a", "zip archive", "", 0, "unpack it (unzip) and give the files inside"},
    [SNIFF_TAR] = {"tar", "a", "tar archive", "", 0, "unpack it (tar xf) and give the files inside"},
    [SNIFF_7Z] = {"7z", "a", "7-Zip archive", "", 0, "unpack it (7z x) and give the files inside"},
    [SNIFF_NPY] = {"npy", "a", "NumPy .npy array", "", 0,
                   "write token ids as nanoGPT's raw uint16 .bin (ndarray.astype(np.uint16).tofile(...)) or make token "
                   "shards with fsdpc prepare"},
    [SNIFF_SAFETENSORS] = {"safetensors", "a", "safetensors file", " (model weights, not training data)", 0, BINARY_HINT},
    [SNIFF_BINARY] = {"binary", "", "binary data", " (not text, not a format fsdpc knows)", 0, BINARY_HINT},
};

const char *sniff_format_name(SniffFormat f) {
    return (unsigned)f < sizeof sniff_info / sizeof *sniff_info ? sniff_info[f].name : "?";
}

// detail: what follows the noun; NULL for the format's own (" (not text, not a format fsdpc knows)")
static void sniff_set(Sniff *s, SniffFormat f, const char *detail) {
    const SniffInfo *fi = &sniff_info[f];
    s->format = f;
    s->inner = SNIFF_NONE;
    s->readable = fi->readable;
    snprintf(s->what, sizeof s->what, "%s%s%s%s", fi->article, *fi->article ? " " : "", fi->noun, detail ? detail : fi->detail);
    snprintf(s->hint, sizeof s->hint, "%s", fi->readable ? "" : fi->hint);
}

static uint32_t le32(const unsigned char *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint16_t le16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

static int ends_with_ci(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcasecmp(s + n - m, suffix);
}

static int is_jsonish(const char *name) {
    return name && (ends_with_ci(name, ".json") || ends_with_ci(name, ".jsonl") || ends_with_ci(name, ".ndjson"));
}

static const unsigned char HDF5_SIG[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

// HDF5's superblock sits at 0 or, after a user block, at 512, 1024, 2048, ...
static int hdf5_in(const unsigned char *p, size_t n) {
    for (uint64_t off = 0; off + 8 <= n; off = off ? 2 * off : 512)
        if (!memcmp(p + off, HDF5_SIG, 8)) return 1;
    return 0;
}

// The 0xFFFFFFFF continuation marker, a metadata length that fits the file and keeps the body
// 8-byte aligned, and (as far as the sample reaches) a FlatBuffers Message whose header is a
// Schema, as a stream's first message must be. The Arrow reader validates the rest.
static int arrow_stream_plausible(const unsigned char *p, size_t n, uint64_t size) {
    if (n < 8 || le32(p) != 0xFFFFFFFFu) return 0;
    uint32_t len = le32(p + 4);
    if (len == 0 || len > INT32_MAX || len % 8 || (uint64_t)len + 8 > size) return 0;
    const unsigned char *m = p + 8;
    size_t have = n - 8 < len ? n - 8 : len;  // metadata bytes in the sample
    if (have < 4) return 1;
    uint32_t root = le32(m);  // offset of the Message table
    if (root < 4 || root > len - 4) return 0;
    if ((size_t)root + 4 > have) return 1;
    int64_t vt = (int64_t)root - (int32_t)le32(m + root);  // its vtable
    if (vt < 0 || vt + 4 > (int64_t)len) return 0;
    if (vt + 4 > (int64_t)have) return 1;
    uint32_t vtsize = le16(m + vt), tsize = le16(m + vt + 2);
    if (vtsize < 4 || vtsize % 2 || vt + vtsize > (int64_t)len || tsize < 4 || (uint64_t)root + tsize > len) return 0;
    if (vt + vtsize > (int64_t)have) return 1;
    // field 1, header_type (a byte): Schema is 1; absent means NONE
    uint32_t ht = vtsize >= 8 ? le16(m + vt + 6) : 0;
    if (!ht || ht >= tsize) return 0;
    if ((size_t)root + ht < have && m[root + ht] != 1) return 0;
    // field 0, version: MetadataVersion V1..V5 are 0..4
    uint32_t ver = vtsize >= 6 ? le16(m + vt + 4) : 0;
    if (ver && ver + 2 > tsize) return 0;
    if (ver && (size_t)root + ver + 2 <= have && le16(m + root + ver) > 4) return 0;
    return 1;
}

// Offset of the first NUL byte or invalid UTF-8 in p[0, n), or n. A sequence cut by the end is
// fine when cut_ok (the sample is a prefix).
static size_t utf8_scan(const unsigned char *p, size_t n, int cut_ok, int *nul) {
    *nul = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        if (c < 0x80) {
            if (!c) return *nul = 1, i;
            i++;
            continue;
        }
        int more;
        unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
        if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c >= 0xE0 && c <= 0xEF) more = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) more = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else return i;
        for (int k = 1; k <= more; k++) {
            if (i + k >= n) return cut_ok ? n : i;
            unsigned b = p[i + k];
            if (k == 1 ? b < lo || b > hi : (b & 0xC0) != 0x80) return i;
        }
        i += (size_t)more + 1;
    }
    return n;
}

// Brace/bracket depth at the end of one line, strings skipped (JSON strings hold no raw newline).
static long json_line_depth(const unsigned char *p, size_t n) {
    long depth = 0;
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') in_str = 1;
        else if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') depth--;
    }
    return depth;
}

// Control characters (other than whitespace) in at most 1% of the bytes: text, if not UTF-8 text;
// random or structured binary data has far more.
static int mostly_text(const unsigned char *p, size_t n) {
    size_t ctl = 0;
    for (size_t i = 0; i < n; i++) ctl += (p[i] < 0x20 && !(p[i] >= '\t' && p[i] <= '\r')) || p[i] == 0x7F;
    return ctl * 100 <= n;
}

// A sample p[0, n) with a NUL or invalid UTF-8 at `at` (an offset in the file, or in what it decompresses to).
static void set_not_text(Sniff *s, const unsigned char *p, size_t n, size_t at, int nul, int inner) {
    if (!mostly_text(p, n)) {
        sniff_set(s, SNIFF_BINARY, NULL);
        return;
    }
    char detail[120];
    snprintf(detail, sizeof detail, " (not UTF-8 text: %s at %soffset %zu)", nul ? "a NUL byte" : "invalid UTF-8",
             inner ? "decompressed " : "", at);
    sniff_set(s, SNIFF_BINARY, detail);
    if (!nul)
        snprintf(s->hint, sizeof s->hint, "if it is text in another encoding, convert it to UTF-8 first (iconv -f LATIN1 -t UTF-8 IN > OUT)");
}

// Text, JSON Lines, a JSON array or a multi-line JSON document; anything else is binary.
static SniffFormat classify_text(const unsigned char *p, size_t n, uint64_t size, const char *name, size_t *bad, int *nul) {
    int prefix = (uint64_t)n < size;
    *bad = utf8_scan(p, n, prefix, nul);
    if (*bad < n) return SNIFF_BINARY;
    size_t i = n >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3) ? 3 : 0;  // a UTF-8 byte order mark
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n')) i++;
    int jsonish = is_jsonish(name);
    if (i < n && p[i] == '[' && jsonish) return SNIFF_JSON_ARRAY;
    if (i == n || p[i] != '{') return SNIFF_TEXT;
    const unsigned char *nl = memchr(p + i, '\n', n - i);
    size_t len = nl ? (size_t)(nl - (p + i)) : n - i;
    if (!nl && prefix)  // one line longer than the sample: only its start can be judged
        return jsonish || (len >= 2 && p[i + 1] == '"') ? SNIFF_JSONL : SNIFF_TEXT;
    // the reader reports a bad line precisely; here only: one object per line, or not
    if (jsonish) return nl && json_line_depth(p + i, len) > 0 ? SNIFF_JSON_DOC : SNIFF_JSONL;
    // any other name: JSON Lines only if the first line parses as an object
    char err[8];
    JsonValue *v = json_parse((const char *)p + i, len, err, sizeof err);
    int object = v && v->type == JSON_OBJECT;
    json_free(v);
    return object ? SNIFF_JSONL : SNIFF_TEXT;
}

static void classify(const unsigned char *p, size_t n, uint64_t size, const char *name, int depth, Sniff *s);

// "x.json.gz" -> "x.json": the inside's name, for its extension
static void strip_compression(const char *name, char *out, size_t len) {
    static const char *const exts[] = {".gz", ".gzip", ".zst", ".zstd"};
    snprintf(out, len, "%s", name ? name : "");
    for (size_t k = 0; k < sizeof exts / sizeof *exts; k++)
        if (ends_with_ci(out, exts[k])) {
            out[strlen(out) - strlen(exts[k])] = 0;
            break;
        }
}

// The outer gzip / zstd Sniff from what its decompressed start is (or why it does not decompress).
static void set_compressed(Sniff *s, SniffFormat outer, const unsigned char *out, size_t got, int complete, const char *bad,
                           const char *name, int depth) {
    const char *tool = outer == SNIFF_GZIP ? "gzip" : "zstd", *undo = outer == SNIFF_GZIP ? "gunzip" : "zstd -d";
    s->format = outer;
    s->readable = 0;
    if (bad) {
        s->inner = SNIFF_BINARY;
        snprintf(s->what, sizeof s->what, "%s-compressed data that does not decompress (%.80s)", tool, bad);
        snprintf(s->hint, sizeof s->hint, "the file is damaged (%s -t checks it): fetch or write it again", tool);
        return;
    }
    char inner_name[512];
    strip_compression(name, inner_name, sizeof inner_name);
    Sniff in;
    classify(out, got, complete ? got : UINT64_MAX, name ? inner_name : NULL, depth + 1, &in);
    const SniffInfo *fi = &sniff_info[in.format];
    const char *noun = in.what + strlen(fi->article) + (*fi->article ? 1 : 0);  // in.what without its article
    s->inner = in.format;
    snprintf(s->what, sizeof s->what, "%s%s-compressed %s", *fi->article ? "a " : "", tool, noun);
    s->readable = in.format == SNIFF_JSONL || in.format == SNIFF_TEXT || in.format == SNIFF_EMPTY;
    if (s->readable) s->hint[0] = 0;
    else if (in.format == SNIFF_BINARY) snprintf(s->hint, sizeof s->hint, "%s", in.hint);
    else if (!fi->readable && in.hint[0]) snprintf(s->hint, sizeof s->hint, "decompress it (%s), then %.200s", undo, in.hint);
    else snprintf(s->hint, sizeof s->hint, "decompress it (%s): fsdpc reads only text and JSON Lines compressed", undo);
}

static void sniff_gzip(const unsigned char *p, size_t n, uint64_t size, const char *name, int depth, Sniff *s) {
    unsigned char *out = mallocCheck(SNIFF_BLOCK);
    z_stream z;
    memset(&z, 0, sizeof z);
    const char *bad = NULL;
    int ended = 0;
    if (inflateInit2(&z, 15 + 16) != Z_OK) err_fatal("cannot initialise zlib");
    z.next_in = (unsigned char *)p;
    z.avail_in = n < (1u << 30) ? (uInt)n : 1u << 30;
    z.next_out = out;
    z.avail_out = SNIFF_BLOCK;
    while (z.avail_out > 0) {
        int rc = inflate(&z, Z_NO_FLUSH);
        if (rc == Z_STREAM_END) {
            // gzip members may be concatenated; anything else after the last one is ignored, as gzip does
            if (z.avail_in >= 2 && z.next_in[0] == 0x1f && z.next_in[1] == 0x8b && inflateReset(&z) == Z_OK) continue;
            ended = 1;
            break;
        }
        if (rc == Z_BUF_ERROR || (rc == Z_OK && z.avail_in == 0)) break;  // the sample ran out
        if (rc != Z_OK) {
            bad = z.msg ? z.msg : "invalid compressed data";
            break;
        }
    }
    size_t got = SNIFF_BLOCK - z.avail_out;
    char why[96];
    if (bad) snprintf(why, sizeof why, "%s", bad);
    inflateEnd(&z);
    set_compressed(s, SNIFF_GZIP, out, got, ended && (uint64_t)n >= size, bad ? why : NULL, name, depth);
    free(out);
}

static void sniff_zstd(const unsigned char *p, size_t n, uint64_t size, const char *name, int depth, Sniff *s) {
    unsigned char *out = mallocCheck(SNIFF_BLOCK);
    ZSTD_DCtx *d = ZSTD_createDCtx();
    if (!d) err_fatal("out of memory (zstd)");
    ZSTD_inBuffer in = {p, n, 0};
    ZSTD_outBuffer o = {out, SNIFF_BLOCK, 0};
    const char *bad = NULL;
    size_t last = 1;  // of the last call that made progress: 0 once a frame is complete and flushed
    while (o.pos < o.size) {
        size_t before_in = in.pos, before_out = o.pos;
        size_t rc = ZSTD_decompressStream(d, &o, &in);
        if (ZSTD_isError(rc)) {
            bad = ZSTD_getErrorName(rc);
            break;
        }
        if (in.pos == before_in && o.pos == before_out) break;  // the sample ran out
        last = rc;
    }
    set_compressed(s, SNIFF_ZSTD, out, o.pos, !bad && last == 0 && in.pos == in.size && (uint64_t)n >= size, bad, name, depth);
    ZSTD_freeDCtx(d);
    free(out);
}

// A format told by its first bytes (or, for nanoGPT, its name), else SNIFF_NONE.
static SniffFormat sniff_magic(const unsigned char *p, size_t n, uint64_t size, const char *name, const char **detail) {
    *detail = NULL;
    if (hdf5_in(p, n)) return SNIFF_HDF5;  // first, as data.c probes
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b) return SNIFF_GZIP;
    if (n >= 4 && !memcmp(p, "\x28\xb5\x2f\xfd", 4)) return SNIFF_ZSTD;
    // "BZh", the block size, then a block's or the end-of-stream marker (pi or sqrt(pi) in BCD)
    if (n >= 10 && !memcmp(p, "BZh", 3) && p[3] >= '1' && p[3] <= '9' &&
        (!memcmp(p + 4, "\x31\x41\x59\x26\x53\x59", 6) || !memcmp(p + 4, "\x17\x72\x45\x38\x50\x90", 6)))
        return SNIFF_BZIP2;
    if (n >= 6 && !memcmp(p, "\xfd\x37\x7a\x58\x5a\x00", 6)) return SNIFF_XZ;
    if (n >= 4 && !memcmp(p, "\x04\x22\x4d\x18", 4)) return SNIFF_LZ4;
    if (n >= 4 && (!memcmp(p, "PK\3\4", 4) || !memcmp(p, "PK\5\6", 4))) return SNIFF_ZIP;
    if (n >= 6 && !memcmp(p, "\x37\x7a\xbc\xaf\x27\x1c", 6)) return SNIFF_7Z;
    if (n >= 262 && !memcmp(p + 257, "ustar", 5)) return SNIFF_TAR;
    if (n >= 8 && !memcmp(p, TOKFILE_MAGIC, 8)) return SNIFF_TOKSHARD;
    if (n >= 4 && (le32(p) == LLMC_MAGIC_GPT2 || le32(p) == LLMC_MAGIC_LLAMA3)) {
        *detail = le32(p) == LLMC_MAGIC_GPT2 ? " (GPT-2, uint16 tokens)" : " (Llama 3, uint32 tokens)";
        return SNIFF_LLMC;
    }
    if (n >= 6 && !memcmp(p, "ARROW1", 6)) return SNIFF_ARROW_FILE;
    if (arrow_stream_plausible(p, n, size)) return SNIFF_ARROW_STREAM;
    if (n >= 4 && !memcmp(p, "PAR1", 4)) return SNIFF_PARQUET;
    if (n >= 6 && !memcmp(p, "\x93NUMPY", 6)) return SNIFF_NPY;
    // safetensors: a little-endian u64 header length that fits, then the JSON header
    if (n >= 10 && size >= 10 && p[8] == '{' && (p[9] == '"' || p[9] == '}') &&
        (le32(p) | (uint64_t)le32(p + 4) << 32) <= size - 8)
        return SNIFF_SAFETENSORS;
    if (name && path_ends_with(name, ".bin")) return SNIFF_NANOGPT_BIN;
    if (n >= 2 && ((p[0] == 0xFF && p[1] == 0xFE) || (p[0] == 0xFE && p[1] == 0xFF))) return SNIFF_UTF16;
    return SNIFF_NONE;
}

// depth: 0 for a file, 1 for what a compressed file holds (not decompressed again)
static void classify(const unsigned char *p, size_t n, uint64_t size, const char *name, int depth, Sniff *s) {
    const char *detail = NULL;
    SniffFormat f = size == 0 ? SNIFF_EMPTY : n == 0 ? SNIFF_BINARY : sniff_magic(p, n, size, name, &detail);
    if (size && !n) detail = " (nothing of it could be sampled)";
    if (f == SNIFF_GZIP && !depth) sniff_gzip(p, n, size, name, depth, s);
    else if (f == SNIFF_ZSTD && !depth) sniff_zstd(p, n, size, name, depth, s);
    else if (f != SNIFF_NONE) sniff_set(s, f, detail);
    else {
        size_t bad;
        int nul;
        f = classify_text(p, n, size, name, &bad, &nul);
        if (f == SNIFF_BINARY) set_not_text(s, p, n, bad, nul, depth > 0);
        else sniff_set(s, f, NULL);
    }
}

void sniff_bytes(const unsigned char *head, size_t n, uint64_t size, const char *name, Sniff *out) {
    memset(out, 0, sizeof *out);
    if ((uint64_t)n > size) n = (size_t)size;  // a caller's size below the bytes given: trust the size
    classify(head, n, size, name, 0, out);
}

// Reads up to n bytes at off; returns the count (short only at the end of the file) or -1.
static ssize_t read_at(int fd, unsigned char *buf, size_t n, uint64_t off) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

// Blocks further into a file that looked like text: a NUL or invalid UTF-8 there makes it binary.
static int check_blocks(int fd, uint64_t size, size_t head, unsigned char *buf, Sniff *s) {
    uint64_t starts[4] = {size / 4, size / 2, size / 4 * 3, size - SNIFF_BLOCK};
    for (int k = 0; k < 4; k++) {
        uint64_t at = starts[k] & ~(uint64_t)4095;
        if (at < head) at = head;
        if (at >= size) continue;
        ssize_t got = read_at(fd, buf, SNIFF_BLOCK, at);
        if (got < 0) return -1;
        size_t i = 0;  // a character begun before the block
        while (i < 3 && i < (size_t)got && (buf[i] & 0xC0) == 0x80) i++;
        int nul;
        size_t bad = utf8_scan(buf + i, (size_t)got - i, 1, &nul);
        if (bad < (size_t)got - i) {
            set_not_text(s, buf + i, (size_t)got - i, (size_t)(at + i + bad), nul, 0);
            return 0;
        }
    }
    return 0;
}

int sniff_path(const char *path, Sniff *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    // O_NONBLOCK: opening a FIFO must not wait for a writer
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot open data file '%s': %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "data file '%s' is not a regular file (%s)", path,
                 S_ISDIR(st.st_mode) ? "a folder" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
        close(fd);
        return -1;
    }
    uint64_t size = (uint64_t)st.st_size;
    unsigned char *buf = mallocCheck(SNIFF_HEAD);
    ssize_t got = read_at(fd, buf, size < SNIFF_HEAD ? (size_t)size : SNIFF_HEAD, 0);
    int rc = 0;
    if (got < 0) goto fail;
    if ((uint64_t)got < size && (size_t)got < SNIFF_HEAD) size = (uint64_t)got;  // it shrank while read
    // an HDF5 user block may be larger than the sample: the superblock further in, before anything else
    for (uint64_t off = 512; (uint64_t)got >= SNIFF_HEAD && off + 8 <= size; off *= 2) {
        unsigned char sig[8];
        if (off + 8 <= (uint64_t)got) continue;
        if (read_at(fd, sig, 8, off) != 8) goto fail;
        if (!memcmp(sig, HDF5_SIG, 8)) {
            sniff_set(out, SNIFF_HDF5, NULL);
            goto done;
        }
    }
    sniff_bytes(buf, (size_t)got, size, path, out);
    SniffFormat f = out->format;
    if ((f == SNIFF_TEXT || f == SNIFF_JSONL || f == SNIFF_JSON_ARRAY || f == SNIFF_JSON_DOC) && size > (uint64_t)got) {
        if (check_blocks(fd, size, (size_t)got, buf, out)) goto fail;
    } else if (f == SNIFF_PARQUET || f == SNIFF_ARROW_FILE) {
        // the footer ends the file: without it the file was cut short (an interrupted download)
        const char *magic = f == SNIFF_PARQUET ? "PAR1" : "ARROW1";
        size_t m = strlen(magic);
        unsigned char tail[8];
        if (size < 2 * m || read_at(fd, tail, m, size - m) != (ssize_t)m || memcmp(tail, magic, m)) {
            snprintf(out->what, sizeof out->what, "a truncated %s (it begins with %s but does not end with it)",
                     f == SNIFF_PARQUET ? "Parquet file" : "Arrow IPC file", magic);
            snprintf(out->hint, sizeof out->hint, "the file was cut short (an interrupted download or copy?): fetch it again");
            out->readable = 0;
        }
    }
    goto done;
fail:
    snprintf(err, errlen, "cannot read data file '%s': %s", path, strerror(errno));
    rc = -1;
done:
    free(buf);
    close(fd);
    return rc;
}
