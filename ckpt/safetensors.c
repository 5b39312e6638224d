// safetensors: header validation, ranged fp32 reads, and the writer's header and conversions.
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/err.h"
#include "../base/half.h"
#include "../comm/comm.h"
#include "../base/json.h"
#include "../base/path.h"

// the format's own cap on the header (safetensors refuses larger ones too)
#define ST_MAX_HEADER (100ull << 20)

static const struct {
    const char *name;
    int size;
    StDtype dt;
} st_types[] = {
    {"F32", 4, ST_F32},   {"BF16", 2, ST_BF16}, {"F16", 2, ST_F16},    {"F64", 8, ST_OTHER},     {"I64", 8, ST_OTHER},
    {"U64", 8, ST_OTHER}, {"I32", 4, ST_OTHER}, {"U32", 4, ST_OTHER},  {"I16", 2, ST_OTHER},     {"U16", 2, ST_OTHER},
    {"I8", 1, ST_OTHER},  {"U8", 1, ST_OTHER},  {"BOOL", 1, ST_OTHER}, {"F8_E4M3", 1, ST_OTHER}, {"F8_E5M2", 1, ST_OTHER},
};

size_t st_dtype_size(StDtype dt) { return dt == ST_F32 ? 4 : 2; }

static const char *st_dtype_name(StDtype dt) { return dt == ST_F32 ? "F32" : dt == ST_BF16 ? "BF16" : "F16"; }

// pread of exactly n bytes; returns 0, or -1 with errno (0 at end of file)
static int st_pread_full(int fd, void *buf, size_t n, uint64_t off) {
    for (size_t done = 0; done < n;) {
        size_t want = n - done < (1u << 30) ? n - done : (1u << 30);
        ssize_t r = pread(fd, (char *)buf + done, want, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = 0;
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

static void st_shape_str(const StTensor *t, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < t->ndim && n < len; d++) n += (size_t)snprintf(buf + n, len - n, d ? ",%lld" : "%lld", (long long)t->shape[d]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

// One header entry into t; data ranges are checked against data_bytes.
static int st_parse_entry(const StFile *f, const JsonValue *v, StTensor *t, uint64_t data_start, uint64_t data_bytes,
                          char *err, size_t len) {
    const char *name = v->key;
    if (v->type != JSON_OBJECT) return err_set(err, len, "'%s': header entry '%s' is not an object", f->path, name);
    const char *dtype = json_get_string(v, "dtype");
    const JsonValue *shape = json_get(v, "shape"), *offs = json_get(v, "data_offsets");
    if (!dtype || !shape || shape->type != JSON_ARRAY || !offs || offs->type != JSON_ARRAY || offs->len != 2)
        return err_set(err, len, "'%s': tensor %s lacks a dtype string, a shape array or a 2-element data_offsets", f->path, name);
    int size = 0;
    for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
        if (!strcmp(dtype, st_types[i].name)) size = st_types[i].size, t->dtype = st_types[i].dt;
    if (!size) return err_set(err, len, "'%s': tensor %s has unknown dtype '%.20s'", f->path, name, dtype);
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dtype);
    if (shape->len > ST_MAX_DIMS) return err_set(err, len, "'%s': tensor %s has %zu dimensions (at most %d)", f->path, name, shape->len, ST_MAX_DIMS);
    t->ndim = (int)shape->len;
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        const JsonValue *x = &shape->items[d];
        if (x->type != JSON_NUMBER || !x->is_int || x->integer < 0)
            return err_set(err, len, "'%s': tensor %s has a shape entry that is not a non-negative integer", f->path, name);
        t->shape[d] = x->integer;
        if (x->integer && t->numel > UINT64_MAX / 8 / (uint64_t)x->integer)
            return err_set(err, len, "'%s': tensor %s has a shape whose size overflows", f->path, name);
        t->numel *= (uint64_t)x->integer;
    }
    uint64_t o[2];
    for (int i = 0; i < 2; i++) {
        const JsonValue *x = &offs->items[i];
        if (x->type != JSON_NUMBER || !x->is_int || x->integer < 0)
            return err_set(err, len, "'%s': tensor %s has data_offsets that are not non-negative integers", f->path, name);
        o[i] = (uint64_t)x->integer;
    }
    if (o[0] > o[1] || o[1] > data_bytes)
        return err_set(err, len, "'%s': tensor %s has data_offsets [%llu, %llu] outside the file's %llu data bytes (truncated file?)",
                       f->path, name, (unsigned long long)o[0], (unsigned long long)o[1], (unsigned long long)data_bytes);
    if (o[1] - o[0] != t->numel * (uint64_t)size) {
        char sh[160];
        st_shape_str(t, sh, sizeof sh);
        return err_set(err, len, "'%s': tensor %s spans %llu bytes but %s %s needs %llu", f->path, name,
                       (unsigned long long)(o[1] - o[0]), dtype, sh, (unsigned long long)(t->numel * (uint64_t)size));
    }
    t->begin = data_start + o[0];
    t->end = data_start + o[1];
    t->name = strdup(name);
    if (!t->name) err_fatal("out of memory reading '%s'", f->path);
    return 0;
}

static int st_by_begin(const void *a, const void *b) {
    const StTensor *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

static int st_by_name(const void *a, const void *b) { return strcmp(((const StTensor *)a)->name, ((const StTensor *)b)->name); }

static int st_parse(StFile *f, int fd, char *err, size_t len) {
    uint8_t lb[8];
    if (f->size < 8 || st_pread_full(fd, lb, 8, 0) != 0)
        return err_set(err, len, "'%s' is not a safetensors file: %llu bytes, too short for the header length", f->path,
                       (unsigned long long)f->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | lb[i];
    if (n > f->size - 8)
        return err_set(err, len, "'%s': header length %llu runs past the end of the file (%llu bytes): truncated or not a safetensors file",
                       f->path, (unsigned long long)n, (unsigned long long)f->size);
    if (n > ST_MAX_HEADER) return err_set(err, len, "'%s': header length %llu exceeds the format's 100 MB limit", f->path, (unsigned long long)n);
    char *text = mallocCheck(n + 1);
    if (st_pread_full(fd, text, n, 8) != 0) {
        free(text);
        return err_set(err, len, "cannot read the header of '%s': %s", f->path, errno ? strerror(errno) : "unexpected end of file");
    }
    char jerr[256];
    JsonValue *root = json_parse(text, n, jerr, sizeof jerr);
    free(text);
    if (!root) return err_set(err, len, "'%s': invalid JSON header: %s", f->path, jerr);
    int rc = 0;
    if (root->type != JSON_OBJECT) rc = err_set(err, len, "'%s': the header is not a JSON object", f->path);
    f->tensors = callocCheck(root->type == JSON_OBJECT ? root->len : 0, sizeof(StTensor));
    for (size_t i = 0; rc == 0 && i < root->len; i++) {
        if (!strcmp(root->items[i].key, "__metadata__")) continue;
        rc = st_parse_entry(f, &root->items[i], &f->tensors[f->ntensors], 8 + n, f->size - 8 - n, err, len);
        if (rc == 0) f->ntensors++;
    }
    json_free(root);
    if (rc) return rc;
    // zero-size tensors own no bytes and cannot overlap anything; the others tile the data bytes
    // with no hole, as the format requires (a hole could hide another file's content: a polyglot)
    qsort(f->tensors, f->ntensors, sizeof(StTensor), st_by_begin);
    const StTensor *prev = NULL;
    uint64_t data = 8 + n;
    for (int i = 0; i < f->ntensors; i++) {
        const StTensor *t = &f->tensors[i];
        if (t->begin == t->end) continue;
        if (prev && t->begin < prev->end) return err_set(err, len, "'%s': tensors %s and %s overlap in the data", f->path, prev->name, t->name);
        uint64_t from = prev ? prev->end : data;
        if (t->begin > from)
            return err_set(err, len, "'%s': %llu data bytes before tensor %s belong to no tensor (a hole, which the safetensors format "
                           "forbids: a crafted or damaged file?)", f->path, (unsigned long long)(t->begin - from), t->name);
        prev = t;
    }
    if ((prev ? prev->end : data) < f->size)
        return err_set(err, len, "'%s': its last %llu bytes belong to no tensor (the safetensors format allows no bytes after the "
                       "data: a crafted or damaged file?)", f->path, (unsigned long long)(f->size - (prev ? prev->end : data)));
    qsort(f->tensors, f->ntensors, sizeof(StTensor), st_by_name);
    for (int i = 1; i < f->ntensors; i++)
        if (!strcmp(f->tensors[i - 1].name, f->tensors[i].name))
            return err_set(err, len, "'%s': tensor %s appears twice in the header", f->path, f->tensors[i].name);
    return 0;
}

int st_open(StFile *f, const char *path, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    int fd = path_open_read(path);
    if (fd < 0) return err_set(err, errlen, "cannot open '%s': %s", path, path_strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st) != 0 ? err_set(err, errlen, "cannot stat '%s': %s", path, strerror(errno)) : 0;
    if (rc == 0) {
        f->size = (uint64_t)st.st_size;
        rc = st_parse(f, fd, err, errlen);
    }
    close(fd);
    if (rc) st_close(f);
    return rc;
}

void st_close(StFile *f) {
    for (int i = 0; i < f->ntensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    f->tensors = NULL;
    f->ntensors = 0;
}

const StTensor *st_find(const StFile *f, const char *name) {
    StTensor key = {.name = (char *)name};
    return f->ntensors ? bsearch(&key, f->tensors, f->ntensors, sizeof(StTensor), st_by_name) : NULL;
}

const char *st_read_f32(int fd, const StFile *f, const StTensor *t, uint64_t first, uint64_t count, float *dst) {
    static char msg[sizeof f->path + 256];
    size_t es = st_dtype_size(t->dtype);
    // 16-bit data lands in the upper half of dst; widening from the front never overwrites an
    // element not yet read (element i's fp32 ends before 16-bit element i+1 starts)
    char *raw = (char *)dst + count * (4 - es);
    if (st_pread_full(fd, raw, count * es, t->begin + first * es) != 0)
        return snprintf(msg, sizeof msg, "cannot read tensor %s from '%s': %s", t->name, f->path,
                        errno ? strerror(errno) : "unexpected end of file (truncated?)"),
               msg;
    if (t->dtype == ST_F32) return NULL;
    for (uint64_t i = 0; i < count; i++) {
        uint16_t h;
        memcpy(&h, raw + 2 * i, 2);
        dst[i] = t->dtype == ST_BF16 ? half_bf16_to_f32(h) : half_f16_to_f32(h);
    }
    return NULL;
}

void st_from_f32(void *dst, const float *src, size_t n, StDtype dt) {
    if (dt == ST_F32) {
        memcpy(dst, src, n * 4);
        return;
    }
    uint16_t *o = dst;
    for (size_t i = 0; i < n; i++) o[i] = dt == ST_BF16 ? half_f32_to_bf16(src[i]) : half_f32_to_f16(src[i]);
}

int st_write_header(FILE *out, const StEntry *e, int n, StDtype dt) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) err_fatal("out of memory building a safetensors header");
    // tensor names are fsdpc's own Hugging Face names: plain ASCII, nothing to escape
    fputs(ST_FSDPC_HEADER, m);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1;
        fprintf(m, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", e[i].name, st_dtype_name(dt));
        for (int d = 0; d < e[i].ndim; d++) {
            fprintf(m, d ? ",%d" : "%d", e[i].shape[d]);
            numel *= (uint64_t)e[i].shape[d];
        }
        uint64_t end = off + numel * st_dtype_size(dt);
        fprintf(m, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)end);
        off = end;
    }
    fputc('}', m);
    while (ftell(m) % 8) fputc(' ', m);
    fclose(m);
    uint8_t lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (uint8_t)((uint64_t)len >> (8 * i));
    int ok = fwrite(lb, 1, 8, out) == 8 && fwrite(buf, 1, len, out) == len;
    free(buf);
    return ok ? 0 : -1;
}

int st_written_by_fsdpc(const char *path) {
    char head[8 + sizeof ST_FSDPC_HEADER - 1];
    FILE *f = path_fopen_read(path);
    size_t n = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    return n == sizeof head && !memcmp(head + 8, ST_FSDPC_HEADER, sizeof ST_FSDPC_HEADER - 1);
}
