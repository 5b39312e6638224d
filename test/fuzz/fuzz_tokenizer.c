// Fuzz target, differential: the C encoder of tokenizer.json against libsentencepiece on the
// same vocabulary (the fixture), on any bytes; ids must be equal, and decoding must not crash.
// Then the same BPE core under byte-level choices (a small GPT-2-style vocabulary, and the same
// as Llama-3 lays it out: its own regex in a Split, ignore_merges; and as GPT-NeoX's: NFC and
// added tokens): the pieces' bytes must spell the text back (ill-formed UTF-8 as U+FFFD per
// maximal subpart; NFC for GPT-NeoX's).
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

#include "../../data/text/bpe.h"
#include "../../data/text/tokenizer.h"
#include "stub.h"

// A byte-level tokenizer.json: the 256 bytes spelt as GPT-2 spells them, a few merges; llama3:
// Llama-3's pre-tokenizer (a Split by its regex, ByteLevel without one) and ignore_merges, with a
// piece no merge makes ("and") that only whole pieces reach. neox: an NFC normalizer and added
// tokens that are not special (two and three spaces, "\u00e9\u00e9"), cut out before the split.
typedef enum { FUZZ_GPT2, FUZZ_LLAMA3, FUZZ_NEOX, FUZZ_KINDS } FuzzKind;

static Tokenizer *fuzz_byte_level(FuzzKind kind, char *err, size_t errlen) {
    bool llama3 = kind == FUZZ_LLAMA3;
    char path[] = "/tmp/fuzz_tokenizer_XXXXXX.json";
    int fd = mkstemps(path, 5);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f) return snprintf(err, errlen, "cannot write a temporary file"), NULL;
    if (llama3)
        fprintf(f, "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                   "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|"
                   "\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
                   "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}, "
                   "\"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"vocab\": {\"and\": 261, ");
    else if (kind == FUZZ_NEOX)
        fprintf(f, "{\"normalizer\": {\"type\": \"NFC\"}, \"added_tokens\": [{\"id\": 260, \"content\": \"<|endoftext|>\", \"special\": true, "
                   "\"normalized\": false}, {\"id\": 261, \"content\": \"  \", \"special\": false}, {\"id\": 262, \"content\": \"   \", "
                   "\"special\": false, \"normalized\": true}, {\"id\": 263, \"content\": \"\\u00e9\\u00e9\", \"special\": false}], "
                   "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}, \"model\": {\"type\": \"BPE\", \"vocab\": "
                   "{\"\\u0120\\u0120\": 261, \"\\u0120\\u0120\\u0120\": 262, \"\\u00c3\\u00a9\\u00c3\\u00a9\": 263, ");
    else
        fprintf(f, "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}, \"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (int c = 0, next = 256; c < 256; c++) {
        bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
        fprintf(f, "\"\\u%04x\": %d, ", printable ? c : next++, c);
    }
    fprintf(f, "\"\\u0120t\": 256, \"he\": 257, \"\\u0120the\": 258, \"in\": 259, \"<|endoftext|>\": 260}, "
               "\"merges\": [\"\\u0120 t\", \"h e\", \"\\u0120t he\", \"i n\"]}}");
    fclose(f);
    Tokenizer *t = tok_open(path, err, errlen);
    unlink(path);
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static Tokenizer *json, *spm, *level[FUZZ_KINDS];
    char err[512];
    if (!json && (!(json = tok_open("test/fixtures/tokenizer/tokenizer.json", err, sizeof err)) ||
                  !(spm = tok_open("test/fixtures/tokenizer/tokenizer.model", err, sizeof err)) ||
                  !(level[FUZZ_GPT2] = fuzz_byte_level(FUZZ_GPT2, err, sizeof err)) ||
                  !(level[FUZZ_LLAMA3] = fuzz_byte_level(FUZZ_LLAMA3, err, sizeof err)) ||
                  !(level[FUZZ_NEOX] = fuzz_byte_level(FUZZ_NEOX, err, sizeof err)))) {
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

    uint8_t *lossy = malloc(3 * size + 1), *nfc = NULL;
    size_t nlossy = bpe_utf8_lossy(data, size, lossy, false);
    utf8proc_ssize_t nnfc = nlossy ? utf8proc_map(lossy, (utf8proc_ssize_t)nlossy, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE) : 0;
    if (nnfc < 0) __builtin_trap();
    for (int kind = 0; kind < FUZZ_KINDS; kind++) {
        Tokenizer *t = level[kind];
        const uint8_t *want = kind == FUZZ_NEOX && nnfc ? nfc : lossy;
        size_t nwant = kind == FUZZ_NEOX ? (size_t)nnfc : nlossy, ngot = 0;
        uint8_t *got = malloc(nwant + 1);
        nb = 0;
        tok_encode(t, (const char *)data, size, &b, &nb, &cb);
        for (size_t i = 0; i < nb; i++) {
            size_t k = tok_piece_bytes(t, i ? b[i - 1] : -1, b[i], piece, sizeof piece);
            if (ngot + k > nwant) __builtin_trap();
            memcpy(got + ngot, piece, k);
            ngot += k;
        }
        if (ngot != nwant || memcmp(got, want, nwant)) __builtin_trap();
        char *text = tok_decode(t, b, nb, &len);
        if (len != nwant || memcmp(text, want, nwant)) __builtin_trap();
        free(text);
        free(got);
    }
    free(lossy);
    free(nfc);
    free(a);
    free(b);
    return 0;
}
