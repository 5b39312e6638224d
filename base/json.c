// json: recursive-descent parser into a tree of JsonValue; each container's items are one array.
#include "json.h"
#include "path.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "buf.h"
#include "err.h"

#define JSON_MAX_DEPTH 512  // bounds the recursion on hostile input

typedef struct {
    const char *begin, *s, *end;
    int failed;
    size_t line, col;  // where the first problem is (1-based), and what it is
    char what[160];
} JsonParser;

static int json_fail(JsonParser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int json_fail(JsonParser *p, const char *fmt, ...) {
    if (p->failed) return 0;
    p->failed = 1;
    p->line = p->col = 1;
    for (const char *c = p->begin; c < p->s && c < p->end; c++) {
        if (*c == '\n') p->line++, p->col = 1;
        else p->col++;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->what, sizeof p->what, fmt, ap);
    va_end(ap);
    return 0;
}

static void json_ws(JsonParser *p) {
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')) p->s++;
}

// a growable array of values, copied into the container once complete
typedef struct {
    JsonValue *v;
    size_t n, cap;
} JsonVec;

static JsonValue *json_vec_push(JsonVec *vec) {
    buf_fit(vec->v, &vec->cap, vec->n + 1);
    JsonValue *v = &vec->v[vec->n++];
    memset(v, 0, sizeof *v);
    return v;
}

static int json_hex4(JsonParser *p, unsigned *out) {
    *out = 0;
    for (int i = 0; i < 4; i++, p->s++) {
        int c = p->s < p->end ? (unsigned char)*p->s : -1;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return json_fail(p, "\\u needs four hex digits");
        *out = *out << 4 | (unsigned)d;
    }
    return 1;
}

static size_t json_utf8(char *dst, unsigned cp) {
    if (cp < 0x80) return dst[0] = (char)cp, 1;
    if (cp < 0x800) return dst[0] = (char)(0xC0 | cp >> 6), dst[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return dst[0] = (char)(0xE0 | cp >> 12), dst[1] = (char)(0x80 | (cp >> 6 & 0x3F)), dst[2] = (char)(0x80 | (cp & 0x3F)), 3;
    dst[0] = (char)(0xF0 | cp >> 18), dst[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    dst[2] = (char)(0x80 | (cp >> 6 & 0x3F)), dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

// The string at p->s (its opening quote) decoded into a fresh NUL-terminated buffer. The decoded
// text is never longer than its escaped form, so one allocation of the raw length suffices.
static int json_string(JsonParser *p, const char **out, size_t *len) {
    p->s++;
    const char *q = p->s;
    while (q < p->end && *q != '"') q += *q == '\\' ? 2 : 1;
    if (q >= p->end) return json_fail(p, "unterminated string");
    char *buf = mallocCheck((size_t)(q - p->s) + 1), *d = buf;
    *out = buf;
    while (*p->s != '"') {
        unsigned char c = (unsigned char)*p->s++;
        if (c < 0x20) return *len = 0, *d = 0, json_fail(p, "raw control character in a string");
        if (c != '\\') {
            *d++ = (char)c;
            continue;
        }
        char e = *p->s++;
        unsigned cp;
        switch (e) {
        case '"': case '\\': case '/': *d++ = e; break;
        case 'b': *d++ = '\b'; break;
        case 'f': *d++ = '\f'; break;
        case 'n': *d++ = '\n'; break;
        case 'r': *d++ = '\r'; break;
        case 't': *d++ = '\t'; break;
        case 'u':
            if (!json_hex4(p, &cp)) return *len = 0, *d = 0, 0;
            if (cp >= 0xD800 && cp < 0xDC00 && p->end - p->s >= 6 && p->s[0] == '\\' && p->s[1] == 'u') {
                const char *back = p->s;
                unsigned lo;
                p->s += 2;
                if (!json_hex4(p, &lo)) return *len = 0, *d = 0, 0;
                if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else p->s = back;
            }
            if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;  // a lone surrogate has no UTF-8 form
            d += json_utf8(d, cp);
            break;
        default: return *len = 0, *d = 0, json_fail(p, "bad escape '\\%c' in a string", e);
        }
    }
    p->s++;
    *d = 0;
    *len = (size_t)(d - buf);
    return 1;
}

static int json_number(JsonParser *p, JsonValue *v) {
    const char *start = p->s;
    if (p->s < p->end && *p->s == '-') p->s++;
    if (p->s >= p->end || *p->s < '0' || *p->s > '9') return json_fail(p, "expected a value");
    if (*p->s == '0' && p->s + 1 < p->end && p->s[1] >= '0' && p->s[1] <= '9') return json_fail(p, "a number with a leading zero");
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') p->s++;
    int integral = 1;
    if (p->s < p->end && *p->s == '.') {
        integral = 0;
        p->s++;
        if (p->s >= p->end || *p->s < '0' || *p->s > '9') return json_fail(p, "expected a digit after '.'");
        while (p->s < p->end && *p->s >= '0' && *p->s <= '9') p->s++;
    }
    if (p->s < p->end && (*p->s == 'e' || *p->s == 'E')) {
        integral = 0;
        p->s++;
        if (p->s < p->end && (*p->s == '+' || *p->s == '-')) p->s++;
        if (p->s >= p->end || *p->s < '0' || *p->s > '9') return json_fail(p, "expected a digit in the exponent");
        while (p->s < p->end && *p->s >= '0' && *p->s <= '9') p->s++;
    }
    char tmp[64];
    size_t n = (size_t)(p->s - start);
    if (n >= sizeof tmp) {  // long literals: only the double is meaningful
        char *big = mallocCheck(n + 1);
        memcpy(big, start, n);
        big[n] = 0;
        v->number = strtod(big, NULL);
        free(big);
    } else {
        memcpy(tmp, start, n);
        tmp[n] = 0;
        v->number = strtod(tmp, NULL);
        if (integral) {
            errno = 0;
            long long x = strtoll(tmp, NULL, 10);
            v->is_int = errno == 0;
            v->integer = x;
        }
    }
    v->type = JSON_NUMBER;
    return 1;
}

static int json_value(JsonParser *p, JsonValue *v, int depth);

static int json_container(JsonParser *p, JsonValue *v, int depth) {
    int object = *p->s == '{';
    char close = object ? '}' : ']';
    if (depth >= JSON_MAX_DEPTH) return json_fail(p, "nested deeper than %d levels", JSON_MAX_DEPTH);
    p->s++;
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    JsonVec vec = {0};
    json_ws(p);
    int ok = 1;
    if (p->s < p->end && *p->s == close) {
        p->s++;
    } else {
        for (;;) {
            JsonValue *item = json_vec_push(&vec);
            json_ws(p);
            if (object) {
                if (p->s >= p->end || *p->s != '"') { ok = json_fail(p, "expected a member name"); break; }
                if (!json_string(p, &item->key, &item->key_len)) { ok = 0; break; }
                json_ws(p);
                if (p->s >= p->end || *p->s != ':') { ok = json_fail(p, "expected ':' after a member name"); break; }
                p->s++;
            }
            if (!json_value(p, item, depth + 1)) { ok = 0; break; }
            json_ws(p);
            if (p->s < p->end && *p->s == ',') { p->s++; continue; }
            if (p->s < p->end && *p->s == close) { p->s++; break; }
            ok = json_fail(p, "expected ',' or '%c'", close);
            break;
        }
    }
    v->items = vec.v;
    v->len = vec.n;
    return ok;
}

static int json_value(JsonParser *p, JsonValue *v, int depth) {
    json_ws(p);
    v->at = (size_t)(p->s - p->begin);
    if (p->s >= p->end) return json_fail(p, "unexpected end of input");
    char c = *p->s;
    if (c == '{' || c == '[') return json_container(p, v, depth);
    if (c == '"') {
        v->type = JSON_STRING;
        return json_string(p, &v->str, &v->len);
    }
    static const struct { const char *lit; JsonType type; int b; } words[] = {
        {"true", JSON_BOOL, 1}, {"false", JSON_BOOL, 0}, {"null", JSON_NULL, 0}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i].lit);
        if ((size_t)(p->end - p->s) >= n && !memcmp(p->s, words[i].lit, n)) {
            p->s += n;
            v->type = words[i].type;
            v->boolean = words[i].b;
            return 1;
        }
    }
    return json_number(p, v);
}

static void json_free_items(JsonValue *v) {
    free((void *)v->key);
    if (v->type == JSON_STRING) free((void *)v->str);
    if (v->type == JSON_ARRAY || v->type == JSON_OBJECT) {
        for (size_t i = 0; i < v->len; i++) json_free_items(&v->items[i]);
        free(v->items);
    }
}

void json_free(JsonValue *v) {
    if (!v) return;
    json_free_items(v);
    free(v);
}

// The one value in text[0, len); NULL when it is not, with the problem in p.
static JsonValue *json_parse_all(JsonParser *p, const char *text, size_t len) {
    *p = (JsonParser){.begin = text, .s = text, .end = text + len};
    JsonValue *v = callocCheck(1, sizeof *v);
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3))  // editors' UTF-8 signature: named, as JSON (RFC 8259) has none
        json_fail(p, "a UTF-8 byte-order mark (bytes EF BB BF) before the value, which JSON does not allow: remove it");
    else if (json_value(p, v, 0)) {
        json_ws(p);
        if (p->s < p->end) json_fail(p, "text after the JSON value");
    }
    if (!p->failed) return v;
    json_free(v);
    return NULL;
}

JsonValue *json_parse(const char *text, size_t len, char *err, size_t errlen) {
    JsonParser p;
    JsonValue *v = json_parse_all(&p, text, len);
    if (!v && err) snprintf(err, errlen, "line %zu, column %zu: %s", p.line, p.col, p.what);
    return v;
}

JsonValue *json_parse_line(const char *line, size_t len, size_t *col, char *err, size_t errlen) {
    JsonParser p;
    JsonValue *v = json_parse_all(&p, line, len);
    if (!v) {
        *col = p.col;
        snprintf(err, errlen, "%s", p.what);
    }
    return v;
}

JsonValue *json_parse_file(const char *path, size_t max_bytes, char *err, size_t errlen) {
    FILE *f = path_fopen_read(path);
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        snprintf(err, errlen, "cannot open '%s': %s", path, path_strerror(errno));
        if (f) fclose(f);
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || (size_t)st.st_size > max_bytes) {
        snprintf(err, errlen, "'%s' is %s", path, S_ISREG(st.st_mode) ? "too large for a JSON file" : "not a regular file");
        fclose(f);
        return NULL;
    }
    size_t n = (size_t)st.st_size;
    char *text = mallocCheck(n ? n : 1);
    size_t got = fread(text, 1, n, f);
    int e = ferror(f) ? errno : 0;
    fclose(f);
    if (got != n) {
        snprintf(err, errlen, "cannot read '%s': %s", path, e ? strerror(e) : "it shrank while being read");
        free(text);
        return NULL;
    }
    char why[256];
    JsonValue *v = json_parse(text, n, why, sizeof why);
    free(text);
    if (!v) snprintf(err, errlen, "'%s' is not valid JSON (%s)", path, why);
    return v;
}

const JsonValue *json_get(const JsonValue *v, const char *key) {
    if (!v || v->type != JSON_OBJECT) return NULL;
    size_t n = strlen(key);
    for (size_t i = v->len; i-- > 0;)
        if (v->items[i].key_len == n && !memcmp(v->items[i].key, key, n)) return &v->items[i];
    return NULL;
}

int json_get_int(const JsonValue *obj, const char *key, int64_t *out) {
    const JsonValue *v = json_get(obj, key);
    if (!v || v->type != JSON_NUMBER || !v->is_int) return 0;
    *out = v->integer;
    return 1;
}

int json_get_number(const JsonValue *obj, const char *key, double *out) {
    const JsonValue *v = json_get(obj, key);
    if (!v || v->type != JSON_NUMBER || !isfinite(v->number)) return 0;
    *out = v->number;
    return 1;
}

int json_get_bool(const JsonValue *obj, const char *key, int *out) {
    const JsonValue *v = json_get(obj, key);
    if (!v || v->type != JSON_BOOL) return 0;
    *out = v->boolean;
    return 1;
}

int json_get_switch(const JsonValue *obj, const char *key, int *out) {
    const JsonValue *v = json_get(obj, key);
    if (!v) return 0;
    if (v->type != JSON_BOOL && v->type != JSON_NULL) return -1;
    *out = v->type == JSON_BOOL && v->boolean;
    return 1;
}

const char *json_get_string(const JsonValue *obj, const char *key) {
    const JsonValue *v = json_get(obj, key);
    return v && v->type == JSON_STRING ? v->str : NULL;
}

size_t json_utf8_char(const uint8_t *s, size_t n, size_t *bad) {
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
