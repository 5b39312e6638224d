// Fuzz target: the Parquet reader (footer Thrift, schema, page headers, codecs, levels, encodings):
// every readable column selected (a struct list with all its string fields chosen, then with its
// last one alone), every row read and its values touched.
#include <stdint.h>
#include <stdlib.h>

#include "../../data/format/parquet.h"
#include "stub.h"

// a few bytes of RLE runs can stand for billions of legitimately empty rows: reading stops here
#define FUZZ_MAX_ROWS 100000

static volatile uint64_t sink;

// The string fields of a struct list column, all of them or the last alone, chosen: how many.
static int choose(TableReader *r, int col, int last_only) {
    const TableColumn *c = &r->cols[col];
    int f[TABLE_MAX_FIELDS], n = 0;
    char err[512];
    for (int j = 0; j < c->nfields; j++)
        if (c->fields[j].is_string) f[n++] = j;
    if (last_only && n) f[0] = f[n - 1], n = 1;
    if (r->choose_fields(r, col, f, n, err, sizeof err) < 0) abort();  // the reader's own fields
    return n;
}

static void read_rows(TableReader *r, const int *sel, int n, int last_only) {
    char err[512];
    TableValue v[8];
    int nf[8] = {0};
    for (int i = 0; i < n; i++)
        if (r->cols[sel[i]].kind == TABLE_STRUCT_LIST) nf[i] = choose(r, sel[i], last_only);
    if (r->select(r, sel, n, err, sizeof err) < 0) return;
    uint64_t h = 0;
    for (int rows = 0; rows < FUZZ_MAX_ROWS && r->next(r, v, err, sizeof err) > 0; rows++)
        for (int i = 0; i < n; i++) {
            if (v[i].is_null) continue;
            if (r->cols[sel[i]].kind == TABLE_STRING)
                for (size_t k = 0; k < v[i].len; k++) h += (uint8_t)v[i].str[k];
            else if (r->cols[sel[i]].kind == TABLE_STRUCT_LIST)
                for (size_t k = 0; k < v[i].len * (size_t)nf[i]; k++)
                    for (size_t b = 0; !v[i].items[k].is_null && b < v[i].items[k].len; b++) h += (uint8_t)v[i].items[k].str[b];
            else
                for (size_t k = 0; k < v[i].len; k++) h += (uint64_t)v[i].ints[k];
        }
    sink = h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    TableReader *r = NULL;
    FUZZ_TRY(r = parquet_open_mem(data, size, "fuzz.parquet", err, sizeof err));
    if (!r) return 0;
    int sel[8], n = 0, other = -1;
    for (int i = 0; i < r->ncols; i++) {
        if (r->cols[i].kind == TABLE_OTHER) other = i;
        else if (n < 8) sel[n++] = i;
    }
    if (n) {
        read_rows(r, sel, n, 0);
        read_rows(r, &sel[n - 1], 1, 1);  // selecting again starts over
    }
    if (other >= 0) read_rows(r, &other, 1, 0);  // refused
    r->close(r);
    return 0;
}
