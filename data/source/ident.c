// ident: identities of input files and sources, their JSON line and their differences; see ident.h.
#include "ident.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../../base/err.h"
#include "../../comm/comm.h"
#include "../../base/json.h"

#define IDENT_HEAD_MIN ((uint64_t)8 << 10)
#define IDENT_HEAD_BUDGET ((uint64_t)64 << 20)  // head bytes read per source at most, when it has many files
#define IDENT_SPEC_MAX 200                      // bytes of the spec kept in a record (it only labels messages)

static int read_crc(int fd, uint64_t from, uint64_t n, uLong *crc, unsigned char *buf, size_t cap) {
    while (n > 0) {
        size_t want = n < cap ? (size_t)n : cap;
        ssize_t got = pread(fd, buf, want, (off_t)from);
        if (got <= 0) {
            if (got == 0) errno = 0;
            return -1;
        }
        *crc = crc32_z(*crc, buf, (size_t)got);
        from += (uint64_t)got;
        n -= (uint64_t)got;
    }
    return 0;
}

int ident_file(const char *path, uint64_t head, uint64_t *size, uint32_t *crc, char *err, size_t errlen) {
    // O_NONBLOCK: a FIFO must not wait for a writer; it is refused below
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return err_set(err, errlen, "cannot read '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, errlen, "'%s' is not a regular file", path);
    }
    *size = (uint64_t)st.st_size;
    uint64_t h = *size < head ? *size : head, tail = head / 16, tail_from = *size - (*size - h < tail ? *size - h : tail);
    unsigned char buf[1 << 16];
    uLong c = crc32_z(0, Z_NULL, 0);
    int rc = read_crc(fd, 0, h, &c, buf, sizeof buf);
    if (!rc) rc = read_crc(fd, tail_from, *size - tail_from, &c, buf, sizeof buf);
    int e = errno;
    close(fd);
    if (rc) return err_set(err, errlen, "cannot read '%s': %s", path, e ? strerror(e) : "it shrank while being read");
    *crc = (uint32_t)c;
    return 0;
}

// A name as valid UTF-8 (a byte that forms no character becomes U+00XX), so that it survives
// the JSON record unchanged and compares equal to itself read back.
static char *utf8_name(const char *s) {
    size_t n = strlen(s), o = 0, bad;
    char *out = mallocCheck(2 * n + 1);
    for (size_t i = 0; i < n;) {
        size_t l = json_utf8_char((const uint8_t *)s + i, n - i, &bad);
        if (l) {
            memcpy(out + o, s + i, l);
            o += l, i += l;
        } else {
            unsigned char b = (unsigned char)s[i++];
            out[o++] = (char)(0xc0 | b >> 6);
            out[o++] = (char)(0x80 | (b & 0x3f));
        }
    }
    out[o] = 0;
    return out;
}

// The length of the prefix that source names are relative to: a folder spec itself, else the
// folder of a file or glob spec (0: the working directory).
static size_t base_len(const char *spec) {
    struct stat st;
    size_t n = strlen(spec);
    if (!(stat(spec, &st) == 0 && S_ISDIR(st.st_mode))) {
        const char *slash = strrchr(spec, '/');
        n = slash ? (size_t)(slash - spec) : 0;
    }
    while (n > 1 && spec[n - 1] == '/') n--;
    return n;
}

// path's name relative to the source (base: spec's first n bytes): its path from there; in a
// hub snapshot, its path in the repository; else its base name. So ranks with other working
// directories, and a resume from a moved copy, name the same files alike.
static char *rel_name(const char *spec, size_t n, const char *path) {
    const char *r = NULL;
    if (n && !strncmp(path, spec, n) && path[n] == '/') r = path + n;
    else if (!n && path[0] != '/') r = path;
    if (!r && (r = strstr(path, "/snapshots/"))) r = strchr(r + 11, '/');
    if (!r) r = strrchr(path, '/');
    if (!r) r = path;
    while (*r == '/') r++;
    return utf8_name(*r ? r : path);
}

static void put_le(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

// the source's CRC: every file's name (with its NUL), size and CRC, in order
static void ident_total(IdentSource *s) {
    uLong c = crc32_z(0, Z_NULL, 0);
    s->bytes = 0;
    for (int i = 0; i < s->nlisted; i++) {
        const IdentFile *f = &s->list[i];
        unsigned char rec[12];
        put_le(rec, f->size, 8);
        put_le(rec + 8, f->crc, 4);
        c = crc32_z(c, (const Bytef *)f->name, strlen(f->name) + 1);
        c = crc32_z(c, rec, sizeof rec);
        s->bytes += f->size;
    }
    s->crc = (uint32_t)c;
}

int ident_source(const char *spec, char *const *files, int n, IdentSource *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->spec = utf8_name(spec);
    out->list = callocCheck((size_t)(n > 0 ? n : 1), sizeof *out->list);
    uint64_t head = n > 0 ? IDENT_HEAD_BUDGET / (uint64_t)n : IDENT_HEAD_MAX;
    head = head > IDENT_HEAD_MAX ? IDENT_HEAD_MAX : head < IDENT_HEAD_MIN ? IDENT_HEAD_MIN : head;
    size_t base = base_len(spec);
    for (int i = 0; i < n; i++) {
        IdentFile *f = &out->list[i];
        if (ident_file(files[i], head, &f->size, &f->crc, err, errlen)) {
            ident_source_free(out);
            return -1;
        }
        f->name = rel_name(spec, base, files[i]);
        out->nlisted = out->nfiles = i + 1;
    }
    ident_total(out);
    return 0;
}

void ident_source_free(IdentSource *s) {
    for (int i = 0; i < s->nlisted; i++) free(s->list[i].name);
    free(s->list);
    free(s->spec);
    memset(s, 0, sizeof *s);
}

// ---- the JSON line ----

// s (NUL-terminated, valid UTF-8) as a JSON string into out[*o, cap); returns 0 when it did not fit
static int put_str(char *out, size_t *o, size_t cap, const char *s, size_t maxbytes) {
    size_t k = *o;
    if (k + 1 >= cap) return 0;
    out[k++] = '"';
    for (size_t i = 0; s[i] && i < maxbytes; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        int m = c == '"' || c == '\\' ? snprintf(esc, sizeof esc, "\\%c", c) : c < 0x20 ? snprintf(esc, sizeof esc, "\\u%04x", c) : 0;
        if (!m) esc[0] = (char)c, m = 1;
        if (k + (size_t)m + 1 >= cap) return 0;
        memcpy(out + k, esc, (size_t)m);
        k += (size_t)m;
    }
    out[k++] = '"';
    *o = k;
    return 1;
}

static int put_fmt(char *out, size_t *o, size_t cap, const char *fmt, unsigned long long a, unsigned long long b) {
    int m = snprintf(out + *o, cap - *o, fmt, a, b);
    if (m < 0 || *o + (size_t)m + 1 >= cap) return 0;
    *o += (size_t)m;
    return 1;
}

// the byte length of the spec's first IDENT_SPEC_MAX bytes that end on a character boundary
static size_t spec_cut(const char *s) {
    size_t n = strlen(s);
    if (n <= IDENT_SPEC_MAX) return n;
    n = IDENT_SPEC_MAX;
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--;
    return n;
}

// s as a JSON object after `key` in out[o, end): its list cut to the first files that fit; 0 when
// not even the rest fits
static size_t source_json(const IdentSource *s, const char *key, char *out, size_t o, size_t end) {
    int m = snprintf(out + o, end - o, ",\"%s\":{\"spec\":", key);
    if (m < 0 || o + (size_t)m >= end) return 0;
    o += (size_t)m;
    if (!(put_str(out, &o, end, s->spec, spec_cut(s->spec)) &&
          put_fmt(out, &o, end, ",\"files\":%llu,\"bytes\":%llu", (unsigned long long)s->nfiles, (unsigned long long)s->bytes) &&
          put_fmt(out, &o, end, ",\"crc32\":\"%08llx\",\"list\":[", s->crc, 0) && o + 3 < end))
        return 0;
    for (int i = 0; i < s->nlisted; i++) {
        size_t mark = o;
        int fits = (!i || put_fmt(out, &o, end, ",", 0, 0)) && put_fmt(out, &o, end, "[", 0, 0) &&
                   put_str(out, &o, end, s->list[i].name, SIZE_MAX) &&
                   put_fmt(out, &o, end, ",%llu,\"%08llx\"]", s->list[i].size, s->list[i].crc) && o + 3 < end;
        if (!fits) {  // the rest are counted and summed, not listed
            o = mark;
            break;
        }
    }
    out[o++] = ']';
    out[o++] = '}';
    out[o] = 0;
    return o;
}

void ident_line(char *out, size_t cap, const char *const *keys, const IdentSource *const *srcs, int n) {
    size_t o = (size_t)snprintf(out, cap, "{\"version\":%d", IDENT_VERSION);
    for (int i = 0; i < n; i++) {
        if (!srcs[i]) continue;
        size_t share = (cap - 2 - o) / (size_t)(n - i);  // what one source leaves unused goes to the next
        size_t next = source_json(srcs[i], keys[i], out, o, o + share);
        if (next) o = next;
        out[o] = 0;
    }
    snprintf(out + o, cap - o, "}");
}

static int hex32(const JsonValue *v, uint32_t *out) {
    if (!v || v->type != JSON_STRING || v->len != 8 || strspn(v->str, "0123456789abcdef") != 8) return 0;
    *out = (uint32_t)strtoul(v->str, NULL, 16);
    return 1;
}

static int count_of(const JsonValue *v, int64_t limit, uint64_t *out) {
    if (!v || v->type != JSON_NUMBER || !v->is_int || v->integer < 0 || v->integer > limit) return 0;
    *out = (uint64_t)v->integer;
    return 1;
}

static int parse_source(const JsonValue *o, IdentSource *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    const JsonValue *spec = json_get(o, "spec"), *list = json_get(o, "list");
    uint64_t files, bytes;
    if (!spec || spec->type != JSON_STRING || strlen(spec->str) != spec->len || !count_of(json_get(o, "files"), INT_MAX, &files) ||
        !count_of(json_get(o, "bytes"), INT64_MAX, &bytes) || !hex32(json_get(o, "crc32"), &s->crc) || !list ||
        list->type != JSON_ARRAY || list->len > files)
        return err_set(err, errlen, "a source without spec, files, bytes, crc32 and a list of at most its files");
    s->spec = strdup(spec->str);
    s->list = callocCheck(list->len ? list->len : 1, sizeof *s->list);
    if (!s->spec) err_fatal("out of memory");
    s->nfiles = (int)files;
    s->bytes = bytes;
    for (size_t i = 0; i < list->len; i++) {
        const JsonValue *e = &list->items[i];
        IdentFile *f = &s->list[i];
        uint64_t size;
        if (e->type != JSON_ARRAY || e->len != 3 || e->items[0].type != JSON_STRING || strlen(e->items[0].str) != e->items[0].len ||
            !count_of(&e->items[1], INT64_MAX, &size) || !hex32(&e->items[2], &f->crc)) {
            ident_source_free(s);
            return err_set(err, errlen, "file %zu of a source is not [name, size, \"crc32\"]", i + 1);
        }
        f->size = size;
        f->name = strdup(e->items[0].str);
        if (!f->name) err_fatal("out of memory");
        s->nlisted = (int)i + 1;
    }
    return 0;
}

// the line's object, its version checked; NULL with err set
static JsonValue *parse_line(const char *line, char *err, size_t errlen) {
    char why[256];
    JsonValue *root = json_parse(line, strlen(line), why, sizeof why);
    int64_t version = 0;
    if (!root) err_set(err, errlen, "not JSON (%s)", why);
    else if (root->type != JSON_OBJECT) err_set(err, errlen, "not a JSON object");
    else if (!json_get_int(root, "version", &version) || version != IDENT_VERSION)
        err_set(err, errlen, "version %lld, and this fsdpc reads version %d", (long long)version, IDENT_VERSION);
    else return root;
    json_free(root);
    return NULL;
}

int ident_parse(const char *line, const char *key, IdentSource *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    JsonValue *root = parse_line(line, err, errlen);
    if (!root) return -1;
    const JsonValue *o = json_get(root, key);
    int rc = !o ? 0 : o->type != JSON_OBJECT ? err_set(err, errlen, "\"%s\" is not an object", key) : parse_source(o, out, err, errlen);
    if (rc < 0 && o && o->type == JSON_OBJECT) {
        char why[512];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, errlen, "\"%s\": %s", key, why);
    }
    json_free(root);
    return rc < 0 ? -1 : o ? 1 : 0;
}

int ident_unknown_keys(const char *line, const char *const *known, char *out, size_t len) {
    char err[256];
    out[0] = 0;
    JsonValue *root = json_parse(line, strlen(line), err, sizeof err);
    if (!root || root->type != JSON_OBJECT) {
        json_free(root);
        return -1;
    }
    size_t o = 0;
    for (size_t i = 0; i < root->len; i++) {
        const char *k = root->items[i].key;
        int is_known = !strcmp(k, "version");
        for (const char *const *q = known; *q && !is_known; q++) is_known = !strcmp(k, *q);
        if (!is_known && o + strlen(k) + 3 < len) o += (size_t)snprintf(out + o, len - o, "%s%s", o ? ", " : "", k);
    }
    json_free(root);
    return 0;
}

// ---- differences ----

// A source's listed files by name, for lookups in O(log n) (the ranks' lists can be long).
typedef struct {
    const IdentFile **by_name;
    int n;
} IdentIndex;

static int by_name(const void *a, const void *b) { return strcmp((*(const IdentFile *const *)a)->name, (*(const IdentFile *const *)b)->name); }

static IdentIndex index_of(const IdentSource *s) {
    IdentIndex x = {callocCheck((size_t)(s->nlisted > 0 ? s->nlisted : 1), sizeof *x.by_name), s->nlisted};
    for (int i = 0; i < s->nlisted; i++) x.by_name[i] = &s->list[i];
    qsort(x.by_name, (size_t)x.n, sizeof *x.by_name, by_name);
    return x;
}

static const IdentFile *find(const IdentIndex *x, const char *name) {
    IdentFile key = {.name = (char *)name};
    const IdentFile *k = &key, **hit = bsearch(&k, x->by_name, (size_t)x->n, sizeof *x->by_name, by_name);
    return hit ? *hit : NULL;
}

// the listed files of x that y lacks (only when y lists all of its files): "label: a, b, c and 2 more"
static void lacking(const IdentSource *x, const IdentSource *y, const IdentIndex *yi, const char *label, char *out, size_t len) {
    if (y->nlisted < y->nfiles) return;
    int shown = 0, more = 0;
    size_t o = 0;
    for (int i = 0; i < x->nlisted; i++) {
        if (find(yi, x->list[i].name)) continue;
        if (shown < 3 && o < len) o += (size_t)snprintf(out + o, len - o, "%s%s", shown ? ", " : label, x->list[i].name), shown++;
        else more++;
    }
    if (more && o < len) snprintf(out + o, len - o, " and %d more", more);
}

static int diff(const IdentSource *a, const IdentSource *b, const IdentIndex *ai, const IdentIndex *bi, const IdentWords *w, char *out,
                size_t len) {
    char only_a[600] = "", only_b[600] = "", la[64], lb[64];
    snprintf(la, sizeof la, "%s: ", w->only_a);
    snprintf(lb, sizeof lb, "%s: ", w->only_b);
    lacking(a, b, bi, la, only_a, sizeof only_a);
    lacking(b, a, ai, lb, only_b, sizeof only_b);
    const char *sep = only_a[0] && only_b[0] ? "; " : "";
    if (only_a[0] || only_b[0]) {
        if (a->nfiles != b->nfiles)
            snprintf(out, len, "%d file%s %s, %d %s (%s%s%s)", a->nfiles, a->nfiles == 1 ? "" : "s", w->a, b->nfiles, w->b, only_a, sep, only_b);
        else
            snprintf(out, len, "other files %s than %s (%s%s%s)", w->a, w->b, only_a, sep, only_b);
        return 1;
    }
    for (int i = 0; i < a->nlisted; i++) {  // same names where both list them: the first that changed
        const IdentFile *x = &a->list[i], *y = find(bi, x->name);
        if (y && x->size == y->size && x->crc != y->crc) {
            snprintf(out, len, "'%s' has other contents %s than %s (%llu bytes each; crc32 %08x %s, %08x %s)", x->name, w->a, w->b,
                     (unsigned long long)x->size, x->crc, w->a, y->crc, w->b);
            return 1;
        }
        if (y && x->size != y->size) {
            snprintf(out, len, "'%s' is %llu bytes (crc32 %08x) %s, %llu bytes (crc32 %08x) %s", x->name, (unsigned long long)x->size,
                     x->crc, w->a, (unsigned long long)y->size, y->crc, w->b);
            return 1;
        }
    }
    if (a->nfiles == b->nfiles && a->nlisted == a->nfiles && b->nlisted == b->nfiles)  // the same files, in another order
        for (int i = 0; i < a->nlisted; i++)
            if (strcmp(a->list[i].name, b->list[i].name)) {
                snprintf(out, len, "the same files in another order: file %d is '%s' %s, '%s' %s", i + 1, a->list[i].name, w->a,
                         b->list[i].name, w->b);
                return 1;
            }
    snprintf(out, len, "%d file%s of %llu bytes (crc32 %08x over all) %s, %d of %llu bytes (crc32 %08x) %s", a->nfiles,
             a->nfiles == 1 ? "" : "s", (unsigned long long)a->bytes, a->crc, w->a, b->nfiles, (unsigned long long)b->bytes, b->crc, w->b);
    return 1;
}

int ident_diff(const IdentSource *a, const IdentSource *b, const IdentWords *w, char *out, size_t len) {
    if (a->nfiles == b->nfiles && a->bytes == b->bytes && a->crc == b->crc) return 0;
    IdentIndex ai = index_of(a), bi = index_of(b);
    int rc = diff(a, b, &ai, &bi, w, out, len);
    free(ai.by_name);
    free(bi.by_name);
    return rc;
}

void ident_describe(const IdentSource *s, char *out, size_t len) {
    if (!s->nfiles) snprintf(out, len, "'%s'", s->spec);
    else if (s->nfiles == 1 && s->nlisted == 1)
        snprintf(out, len, "'%s' (%llu bytes, crc32 %08x)", s->list[0].name, (unsigned long long)s->list[0].size, s->list[0].crc);
    else snprintf(out, len, "%d files of %llu bytes (crc32 %08x)", s->nfiles, (unsigned long long)s->bytes, s->crc);
}

void ident_source_copy(IdentSource *dst, const IdentSource *src) {
    *dst = *src;
    dst->spec = strdup(src->spec);
    dst->list = callocCheck((size_t)(src->nlisted > 0 ? src->nlisted : 1), sizeof *dst->list);
    if (!dst->spec) err_fatal("out of memory");
    for (int i = 0; i < src->nlisted; i++) {
        dst->list[i] = src->list[i];
        if (!(dst->list[i].name = strdup(src->list[i].name))) err_fatal("out of memory");
    }
}

const char *ident_check_ranks(const IdentSource *id, const char *label) {
    static char msg[2048];
    size_t cap = 1024;
    for (int i = 0; i < id->nlisted; i++) cap += 6 * strlen(id->list[i].name) + 48;  // \u00XX escapes at most
    char *line = mallocCheck(cap), *theirs, *root, what[1024] = "", err[256];
    const char *key = "source";
    ident_line(line, cap, &key, &id, 1);  // room for every file: a rank's difference is named exactly
    int r = comm_first_different(line, &theirs, &root);
    free(line);
    if (r < 0) return NULL;
    IdentSource a, b;
    char on_r[32], only_r[40];
    snprintf(on_r, sizeof on_r, "on rank %d", r);
    snprintf(only_r, sizeof only_r, "only on rank %d", r);
    IdentWords w = {on_r, "on rank 0", only_r, "only on rank 0"};
    if (ident_parse(theirs, key, &a, err, sizeof err) == 1) {
        if (ident_parse(root, key, &b, err, sizeof err) == 1) {
            ident_diff(&a, &b, &w, what, sizeof what);
            ident_source_free(&b);
        }
        ident_source_free(&a);
    }
    free(theirs);
    free(root);
    return err_text(msg, sizeof msg, "rank %d sees different %s than rank 0 at '%s': %s (other working directories, or node-local disks?); "
             "give every rank the same files on storage they share", r, label, id->spec, what[0] ? what : "their identities differ");
}
