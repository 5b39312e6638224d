// Fuzz target, differential: the C encoder of tokenizer.json against libsentencepiece on the
// same vocabulary (the fixture), on any bytes; ids must be equal, and decoding must not crash.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../data/tokenizer.h"
#include "stub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static Tokenizer *json, *spm;
    char err[512];
    if (!json && (!(json = tok_open("test/fixtures/tokenizer/tokenizer.json", err, sizeof err)) ||
                  !(spm = tok_open("test/fixtures/tokenizer/tokenizer.model", err, sizeof err)))) {
        fprintf(stderr, "fuzz_tokenizer: %s (run from the repository root)\n", err);
        abort();
    }
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0, ca = 0, cb = 0;
    tok_encode(json, (const char *)data, size, &a, &na, &ca);
    tok_encode(spm, (const char *)data, size, &b, &nb, &cb);
    if (na != nb || (na && memcmp(a, b, na * sizeof *a))) __builtin_trap();
    size_t len;
    free(tok_decode(spm, a, na, &len));
    free(tok_decode(json, a, na, &len));
    char piece[256];
    for (size_t i = 0; i < na; i++) tok_piece_bytes(json, i ? a[i - 1] : -1, a[i], piece, sizeof piece);
    free(a);
    free(b);
    return 0;
}
