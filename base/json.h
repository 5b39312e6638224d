// json: a small DOM parser for the JSON fsdpc reads: files read whole (tokenizer.json, config.json,
// safetensors headers and indexes) and JSON Lines corpora, a line at a time.
#ifndef FSDPC_JSON_H
#define FSDPC_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue JsonValue;
struct JsonValue {
    JsonType type;
    const char *key;  // member name (NUL-terminated, UTF-8) when the value sits in an object, else NULL
    size_t key_len;
    int boolean;      // JSON_BOOL
    double number;    // JSON_NUMBER
    int is_int;       // JSON_NUMBER written without fraction or exponent and within int64
    int64_t integer;  // JSON_NUMBER when is_int
    const char *str;  // JSON_STRING: decoded UTF-8, NUL-terminated (may hold NULs: use len)
    size_t len;       // JSON_STRING: bytes; JSON_ARRAY/JSON_OBJECT: number of items
    JsonValue *items; // JSON_ARRAY elements / JSON_OBJECT members, in file order
    size_t at;        // byte offset of the value's first character in the text parsed (for messages)
};

// Parses text[0, len). On failure returns NULL and writes "line L, column C: what" into err.
// Nesting is limited (no stack overflow on hostile input); lone surrogates in \u escapes decode
// to U+FFFD. The result owns all its strings; free it with json_free.
JsonValue *json_parse(const char *text, size_t len, char *err, size_t errlen);
// JSON Lines: the value on one line, line[0, len) without its '\n'. On failure returns NULL with
// *col the problem's 1-based column and the problem alone (no position) in err, for the caller's
// "path:line:column: " prefix. A blank line is no value: callers skip those first.
JsonValue *json_parse_line(const char *line, size_t len, size_t *col, char *err, size_t errlen);
// Reads and parses a whole file (at most max_bytes). On failure returns NULL with the reason
// (including the path) in err.
JsonValue *json_parse_file(const char *path, size_t max_bytes, char *err, size_t errlen);
void json_free(JsonValue *v);

// Member `key` of an object (the last one when repeated), or NULL when v is not an object or lacks it.
const JsonValue *json_get(const JsonValue *v, const char *key);
// Typed member lookups: 1 when present with the right type (ints: an integral number), else 0.
int json_get_int(const JsonValue *obj, const char *key, int64_t *out);
int json_get_number(const JsonValue *obj, const char *key, double *out);
int json_get_bool(const JsonValue *obj, const char *key, int *out);
const char *json_get_string(const JsonValue *obj, const char *key);  // NULL unless a string
// A switch as Python reads it from a config file fsdpc shares with transformers or PEFT: 1 with
// *out set (true, false, or null, which is None and so false), 0 when absent, -1 for any other
// type (0, "false": Python takes such a value by its truth, which "false" has, so no guess is safe).
int json_get_switch(const JsonValue *obj, const char *key, int *out);

// Length of the well-formed UTF-8 character at s (n > 0 bytes), or 0 with *bad the length of the
// maximal ill-formed subpart there (Unicode's table of well-formed byte sequences): what JSON text
// must be, and what the tokenizers' lossy decoding checks.
size_t json_utf8_char(const uint8_t *s, size_t n, size_t *bad);

#endif
