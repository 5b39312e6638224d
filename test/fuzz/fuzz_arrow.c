// Fuzz target: the Arrow IPC reader (data/format/arrow.c) on one file or stream per input: open it, select
// every selectable column (up to 8; a struct list with all its string fields chosen), read every
// row and touch every value.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../data/format/arrow.h"
#include "stub.h"

static volatile uint64_t sink;

// The string fields of a struct list column (into f when given), all of which the harness chooses.
static int fuzz_strings(const TableColumn *c, int *f) {
    int n = 0;
    for (int j = 0; j < c->nfields; j++)
        if (c->fields[j].is_string) {
            if (f) f[n] = j;
            n++;
        }
    return n;
}

static void fuzz_read(const uint8_t *data, size_t size) {
    char err[512];
    TableReader *r = arrow_open_mem(data, size, "fuzz.arrow", err, sizeof err);
    if (!r) return;
    int sel[8], n = 0;
    for (int c = 0; c < r->ncols && n < 8; c++) {
        const TableColumn *tc = &r->cols[c];
        int f[TABLE_MAX_FIELDS], nf = fuzz_strings(tc, f);
        if (tc->kind == TABLE_STRUCT_LIST && r->choose_fields(r, c, f, nf, err, sizeof err)) abort();  // the reader's own fields
        if (tc->kind != TABLE_OTHER) sel[n++] = c;
    }
    TableValue v[8];
    // no column selected: rows would come from the batches' claimed lengths alone, so none are read
    if (n && !r->select(r, sel, n, err, sizeof err)) {
        uint64_t h = 0;
        while (r->next(r, v, err, sizeof err) == 1)
            for (int k = 0; k < n; k++) {
                if (v[k].is_null) continue;
                if (r->cols[sel[k]].kind == TABLE_STRUCT_LIST) {  // every chosen field of every element
                    const size_t nf = (size_t)fuzz_strings(&r->cols[sel[k]], NULL);
                    for (size_t j = 0; j < v[k].len * nf; j++) {
                        const TableStr *t = &v[k].items[j];
                        for (size_t b = 0; !t->is_null && b < t->len; b++) h += (uint8_t)t->str[b];
                    }
                    continue;
                }
                for (size_t j = 0; j < v[k].len; j++)
                    h += v[k].str ? (uint8_t)v[k].str[j] : (uint64_t)v[k].ints[j];
                h += (uint64_t)v[k].has_null_item;
            }
        sink = h;
    }
    r->close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_TRY(fuzz_read(data, size));
    return 0;
}
