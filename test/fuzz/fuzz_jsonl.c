// Fuzz target: prepare's JSON Lines scanner, one line per input, with the byte tokenizer and the
// fixture SentencePiece model ("text" encoded, "input_ids" checked against the vocabulary).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../data/build/prepare.h"
#include "../../data/text/tokenizer.h"
#include "stub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static Tokenizer *tok[2];
    char err[512];
    if (!tok[0] && (!(tok[0] = tok_open("byte", err, sizeof err)) ||
                    !(tok[1] = tok_open("test/fixtures/tokenizer/tokenizer.model", err, sizeof err)))) {
        fprintf(stderr, "fuzz_jsonl: %s (run from the repository root)\n", err);
        abort();
    }
    for (int i = 0; i < 2; i++) FUZZ_TRY(data_prepare_scan_line((const char *)data, size, tok[i], 2 + 2 * i));
    return 0;
}
