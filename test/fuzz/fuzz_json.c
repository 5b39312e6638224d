// Fuzz target: the JSON parser behind tokenizer.json, config.json and safetensors headers.
#include <stdint.h>
#include <stdlib.h>

#include "../../base/json.h"
#include "stub.h"

static void walk(const JsonValue *v, int depth) {
    if (v->type != JSON_ARRAY && v->type != JSON_OBJECT) return;
    for (size_t i = 0; i < v->len; i++) walk(&v->items[i], depth + 1);
    int64_t n;
    double d;
    int b;
    json_get_int(v, "a", &n);
    json_get_number(v, "b", &d);
    json_get_bool(v, "c", &b);
    json_get_string(v, "d");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    JsonValue *v = NULL;
    FUZZ_TRY(v = json_parse((const char *)data, size, err, sizeof err));
    if (v) walk(v, 0);
    json_free(v);
    return 0;
}
