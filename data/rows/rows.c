// rows: a tagged reader, one of docs or sft set, and the row last read.
#include "rows.h"

#include <stdio.h>
#include <stdlib.h>

#include "../../base/err.h"

struct RowsReader {
    DocsReader *docs;  // documents ...
    SftReader *sft;    // ... or finetuning rows
    Doc doc;
    SftRow row;
};

RowsReader *rows_open(const char *path, DocsKind kind, DocsCompression comp, const RowsOptions *o, char *err, size_t errlen) {
    SftOptions so = o->sft;
    if (so.format == SFT_AUTO && kind != DOCS_TEXT && sft_detect(path, kind, comp, &so.format, err, errlen)) return NULL;
    if (so.format == SFT_AUTO) so.format = SFT_TEXT;
    if (so.format != SFT_TEXT && kind == DOCS_TEXT)
        return err_null(err, errlen, "--data_format %s reads rows of JSON Lines, Arrow or Parquet, and '%s' is plain text",
                        sft_format_name(so.format), path);
    RowsReader *r = callocCheck(1, sizeof *r);
    if (so.format == SFT_TEXT) r->docs = docs_open(path, kind, comp, o->text_column, o->explicit_column, err, errlen);
    else r->sft = sft_open(path, kind, comp, &so, err, errlen);
    if (r->docs || r->sft) return r;
    free(r);
    return NULL;
}

int rows_labeled(const RowsReader *r) { return r->sft != NULL; }

int rows_next(RowsReader *r, Row *row, char *err, size_t errlen) {
    *row = (Row){0};
    if (r->sft) {
        row->sft = &r->row;
        return sft_next(r->sft, &r->row, err, errlen);
    }
    row->doc = &r->doc;
    return docs_next(r->docs, &r->doc, err, errlen);
}

const char *rows_describe(const RowsReader *r) { return r->sft ? sft_describe(r->sft) : docs_describe(r->docs); }
uint64_t rows_nulls(const RowsReader *r) { return r->sft ? sft_nulls(r->sft) : docs_nulls(r->docs); }
uint64_t rows_progress(const RowsReader *r) { return r->sft ? sft_progress(r->sft) : docs_progress(r->docs); }
const DocsFields *rows_fields(const RowsReader *r) { return r->sft ? sft_fields(r->sft) : docs_fields(r->docs); }

void rows_close(RowsReader *r) {
    if (!r) return;
    if (r->sft) sft_close(r->sft);
    else docs_close(r->docs);
    sft_row_free(&r->row);
    free(r);
}
