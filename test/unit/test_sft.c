// test_sft: the driver test/integration/test_sft.sh checks data/sft through.
//   test_sft [--format F] [--template T] [--train_on_inputs] [--vocab N] TOKENIZER FILE
// Prints "format=NAME" (what sft_detect says), "describe=...", then each row as two lines,
// "ids: ..." and "labels: ...", then "nulls=N"; or one line "error: MESSAGE" (exit 1) when the
// file fails to open or a row is bad. Exits 2 on bad usage.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/rows/sft.h"
#include "data/format/sniff.h"

static void print_ids(const char *what, const int32_t *v, size_t n) {
    printf("%s:", what);
    for (size_t i = 0; i < n; i++) printf(" %d", (int)v[i]);
    putchar('\n');
}

int main(int argc, char **argv) {
    SftOptions o = {.format = SFT_AUTO, .tmpl = CHAT_LLAMA2};
    int i = 1;
    for (; i + 1 < argc && !strncmp(argv[i], "--", 2); i++) {
        if (!strcmp(argv[i], "--train_on_inputs")) o.train_on_inputs = 1;
        else if (!strcmp(argv[i], "--format") && sft_format_parse(argv[++i], &o.format) == 0) continue;
        else if (!strcmp(argv[i], "--template") && sft_template_parse(argv[++i], &o.tmpl) == 0) continue;
        else if (!strcmp(argv[i], "--vocab")) o.vocab = atoi(argv[++i]);
        else return fprintf(stderr, "test_sft: bad flag %s\n", argv[i]), 2;
    }
    if (argc - i != 2) return fprintf(stderr, "usage: test_sft [--format F] [--template T] [--train_on_inputs] [--vocab N] TOKENIZER FILE\n"), 2;
    const char *path = argv[i + 1];
    char err[2048];
    Tokenizer *tok = tok_open(argv[i], err, sizeof err);
    if (!tok) return printf("error: %s\n", err), 1;
    o.tok = tok;
    Sniff sn;
    if (sniff_path(path, &sn, err, sizeof err)) return printf("error: %s\n", err), 1;
    SniffFormat inner = sn.format == SNIFF_GZIP || sn.format == SNIFF_ZSTD ? sn.inner : sn.format;
    DocsCompression comp = sn.format == SNIFF_GZIP ? DOCS_GZIP : sn.format == SNIFF_ZSTD ? DOCS_ZSTD : DOCS_PLAIN;
    DocsKind kind = inner == SNIFF_JSONL ? DOCS_JSONL : inner == SNIFF_PARQUET ? DOCS_PARQUET
                    : inner == SNIFF_ARROW_STREAM || inner == SNIFF_ARROW_FILE ? DOCS_ARROW : DOCS_TEXT;
    SftFormat f;
    if (sft_detect(path, kind, comp, &f, err, sizeof err)) return printf("error: %s\n", err), 1;
    printf("format=%s\n", sft_format_name(f));
    SftReader *r = sft_open(path, kind, comp, &o, err, sizeof err);
    if (!r) return printf("error: %s\n", err), 1;
    printf("describe=%s\n", sft_describe(r));
    SftRow row = {0};
    int rc;
    while ((rc = sft_next(r, &row, err, sizeof err)) > 0) {
        print_ids("ids", row.ids, row.len);
        print_ids("labels", row.labels, row.len);
    }
    if (rc < 0) printf("error: %s\n", err);
    else printf("nulls=%llu\n", (unsigned long long)sft_nulls(r));
    sft_row_free(&row);
    sft_close(r);
    tok_free(tok);
    return rc < 0;
}
