// Fuzz target: a checkpoint's run_inputs line (data/source/ident.h), read back on resume: every source,
// their differences both ways, and a line written from what was read, which must read back the same.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../data/source/ident.h"
#include "stub.h"

static const char *const keys[] = {"tokenizer", "train", "val", NULL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *line = malloc(size + 1), err[512], what[1400], unknown[256], out[8192];
    memcpy(line, data, size);
    line[size] = 0;
    IdentSource s[3];
    const IdentSource *found[3];
    static const IdentWords w = {"now", "then", "new", "gone"};
    for (int i = 0; i < 3; i++) {
        found[i] = NULL;
        FUZZ_TRY(if (ident_parse(line, keys[i], &s[i], err, sizeof err) == 1) found[i] = &s[i]);
    }
    ident_unknown_keys(line, keys, unknown, sizeof unknown);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            if (found[i] && found[j]) ident_diff(found[i], found[j], &w, what, sizeof what);
    for (int i = 0; i < 3; i++)
        if (found[i]) ident_describe(found[i], what, sizeof what);
    ident_line(out, sizeof out, keys, found, 3);
    for (int i = 0; i < 3; i++) {
        IdentSource again;
        if (!found[i]) continue;
        if (ident_parse(out, keys[i], &again, err, sizeof err) != 1 || ident_diff(found[i], &again, &w, what, sizeof what)) abort();
        ident_source_free(&again);
        ident_source_free(&s[i]);
    }
    free(line);
    return 0;
}
