// Fuzz target: data/sft on one JSON Lines file per input (gzip or zstd when it starts with their
// magic): every row format, the three chat templates, with the byte tokenizer and the fixture
// SentencePiece model; and the same bytes through `tokenize --chat`'s reader.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../data/rows/sft.h"
#include "stub.h"

static volatile uint64_t sink;

static void fuzz_rows(const char *path, DocsCompression comp, const SftOptions *o) {
    char err[1024];
    SftFormat f;
    if (sft_detect(path, DOCS_JSONL, comp, &f, err, sizeof err) == 0) sink += (uint64_t)f;
    SftReader *r = sft_open(path, DOCS_JSONL, comp, o, err, sizeof err);
    if (!r) return;
    SftRow row = {0};
    uint64_t h = 0;
    while (sft_next(r, &row, err, sizeof err) == 1)
        for (size_t i = 0; i < row.len; i++) h += (uint64_t)row.ids[i] * 31 + (uint64_t)row.labels[i];
    sink += h + sft_nulls(r) + sft_progress(r);
    sft_row_free(&row);
    sft_close(r);
}

static void fuzz_chat(const uint8_t *data, size_t size, const Tokenizer *tok, ChatTemplate t) {
    FILE *in = fmemopen((void *)data, size, "r"), *out = fopen("/dev/null", "w");
    char why[1024];
    unsigned long lines = 0;
    if (in && out) sink += sft_tokenize_chat(tok, t, 1, in, out, NULL, &lines, why, sizeof why) != NULL;
    if (in) fclose(in);
    if (out) fclose(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static Tokenizer *tok[2];
    static int fd = -1;
    static char path[64];
    char err[512];
    if (!tok[0]) {
        if (!(tok[0] = tok_open("byte", err, sizeof err)) || !(tok[1] = tok_open("test/fixtures/tokenizer/tokenizer.model", err, sizeof err))) {
            fprintf(stderr, "fuzz_sft: %s (run from the repository root)\n", err);
            abort();
        }
        fd = memfd_create("fuzz_sft", 0);
        if (fd < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    DocsCompression comp = size >= 2 && data[0] == 0x1f && data[1] == 0x8b ? DOCS_GZIP
                           : size >= 4 && data[0] == 0x28 && data[1] == 0xb5 && data[2] == 0x2f && data[3] == 0xfd ? DOCS_ZSTD
                                                                                                                  : DOCS_PLAIN;
    static const SftFormat formats[] = {SFT_AUTO, SFT_TEXT, SFT_IDS, SFT_PROMPT_COMPLETION, SFT_ALPACA, SFT_CHAT, SFT_CHAT, SFT_CHAT};
    for (int i = 0; i < 8; i++) {
        SftOptions o = {.format = formats[i], .tmpl = (ChatTemplate)(i % 3), .tok = tok[i & 1], .train_on_inputs = i == 3, .vocab = 300};
        FUZZ_TRY(fuzz_rows(path, comp, &o));
    }
    for (int t = 0; t < 3; t++) FUZZ_TRY(fuzz_chat(data, size, tok[t == 0], (ChatTemplate)t));
    return 0;
}
