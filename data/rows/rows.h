// rows: one reader over a data file's rows, whichever they are: documents (data/rows/docs: text
// to tokenize or ids) or finetuning rows (data/rows/sft: ids with their labels). The format is
// what the caller asks for, or what the file's fields say (sft_detect).
#ifndef FSDPC_ROWS_H
#define FSDPC_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "docs.h"
#include "sft.h"

typedef struct {
    SftOptions sft;           // sft.format SFT_AUTO: from the file's fields; SFT_TEXT: documents
    const char *text_column;  // documents: as docs_open takes them
    int explicit_column;
} RowsOptions;

// One row: a document or a finetuning row (the other NULL), valid until the next rows_next.
typedef struct {
    const Doc *doc;
    const SftRow *sft;
} Row;

typedef struct RowsReader RowsReader;

// NULL with one line in err (naming the file): an unreadable file, or a finetuning format asked of
// plain text.
RowsReader *rows_open(const char *path, DocsKind kind, DocsCompression comp, const RowsOptions *o, char *err, size_t errlen);
// whether its rows are finetuning rows (with labels) rather than documents
int rows_labeled(const RowsReader *r);
// The next row: 1, 0 at the end, -1 with err set (as docs_next and sft_next).
int rows_next(RowsReader *r, Row *row, char *err, size_t errlen);
// As docs_* and sft_* say: the start-up log's words, the null rows skipped, the bytes consumed so
// far, the fields seen.
const char *rows_describe(const RowsReader *r);
uint64_t rows_nulls(const RowsReader *r);
uint64_t rows_progress(const RowsReader *r);
const DocsFields *rows_fields(const RowsReader *r);
void rows_close(RowsReader *r);

#endif
