// test_arrow: dumps an Arrow IPC file or stream through data/format/arrow.c for test/integration/test_arrow.sh, in the
// JSON text test/fixtures/make_arrow.mjs writes as the expectation: a header line (format, nrows,
// the columns with type and kind), then one object per row with the selected columns.
//   build/test_arrow [--mem] FILE [COLUMN...]   all selectable columns when none are named;
//                                               --mem: through arrow_open_mem
//   build/test_arrow --bench FILE COLUMN        reads every row; prints rows, values, a checksum,
//                                               the most the resident set grew while reading
//                                               (KiB over what it was after open) and the
//                                               seconds from open to close
// Errors: one "fsdpc: error: ..." line on stderr, exit status 1.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/format/arrow.h"
#include "table_print.h"

static void die(const char *msg) {
    fprintf(stderr, "fsdpc: error: %s\n", msg);
    exit(1);
}


// The resident set (VmRSS) in KiB.
static long resident_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kib = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kib;
}

static const char *kind_name(TableKind k) {
    return k == TABLE_STRING ? "string" : k == TABLE_INT_LIST ? "int_list" : k == TABLE_INT ? "int" : k == TABLE_STRUCT_LIST ? "struct_list" : "other";
}

int main(int argc, char **argv) {
    int mem = 0, bench = 0, a = 1;
    if (a < argc && !strcmp(argv[a], "--mem")) mem = 1, a++;
    else if (a < argc && !strcmp(argv[a], "--bench")) bench = 1, a++;
    if (a >= argc) die("usage: test_arrow [--mem|--bench] FILE [COLUMN...]");
    const char *path = argv[a++];
    char err[1024];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    TableReader *r;
    char *bytes = NULL;
    if (mem) {
        FILE *f = fopen(path, "rb");
        if (!f) die("cannot open the file");
        fseek(f, 0, SEEK_END);
        const long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        bytes = malloc(size ? (size_t)size : 1);
        if (!bytes || fread(bytes, 1, (size_t)size, f) != (size_t)size) die("cannot read the file");
        fclose(f);
        r = arrow_open_mem(bytes, (size_t)size, path, err, sizeof err);
    } else {
        r = arrow_open(path, err, sizeof err);
    }
    if (!r) die(err);

    int sel[8], n = 0;
    for (; a < argc; a++) {
        if (n == 8) die("at most 8 columns");
        if ((sel[n++] = table_find(r, argv[a])) < 0) die("no such column");
    }
    if (!n)
        for (int c = 0; c < r->ncols && n < 8; c++)
            if (r->cols[c].kind != TABLE_OTHER) sel[n++] = c;
    for (int k = 0; k < n; k++)
        if (choose_strings(r, sel[k], err, sizeof err)) die(err);
    if (r->select(r, sel, n, err, sizeof err)) die(err);

    TableValue v[8];
    int rc;
    if (bench) {
        uint64_t rows = 0, values = 0, sum = 0;
        const long base = resident_kib();
        long grew = 0;
        while ((rc = r->next(r, v, err, sizeof err)) == 1) {
            if (!(rows++ & 255)) {  // now and then: what reading keeps resident
                const long kib = resident_kib() - base;
                if (kib > grew) grew = kib;
            }
            values += v[0].len;
            if (!v[0].is_null && v[0].ints) sum += (uint64_t)v[0].ints[0] + (uint64_t)v[0].ints[v[0].len ? v[0].len - 1 : 0];
        }
        if (rc < 0) die(err);
        r->close(r);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("rows %llu values %llu checksum %llu resident_kib %ld seconds %.6f\n", (unsigned long long)rows, (unsigned long long)values,
               (unsigned long long)sum, grew, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
        return 0;
    }

    printf("{\"format\":\"%s\",\"nrows\":%lld,\"columns\":[", r->format, (long long)r->nrows);
    for (int c = 0; c < r->ncols; c++) {
        printf("%s[", c ? "," : "");
        put_str(r->cols[c].name, strlen(r->cols[c].name));
        putchar(',');
        put_str(r->cols[c].type, strlen(r->cols[c].type));
        printf(",\"%s\"]", kind_name(r->cols[c].kind));
    }
    printf("]}\n");
    while ((rc = r->next(r, v, err, sizeof err)) == 1) {
        putchar('{');
        for (int k = 0; k < n; k++) {
            const TableColumn *c = &r->cols[sel[k]];
            printf("%s", k ? "," : "");
            put_str(c->name, strlen(c->name));
            putchar(':');
            if (v[k].is_null) {
                printf("null");
            } else if (c->kind == TABLE_STRING) {
                put_str(v[k].str, v[k].len);
            } else if (c->kind == TABLE_STRUCT_LIST) {
                print_structs(c, &v[k]);
            } else if (c->kind == TABLE_INT) {
                printf("%lld", (long long)v[k].ints[0]);
            } else {
                putchar('[');
                for (size_t j = 0; j < v[k].len; j++) printf("%s%lld", j ? "," : "", (long long)v[k].ints[j]);
                putchar(']');
                if (v[k].has_null_item) printf(",\"%s.has_null_item\":1", c->name);
            }
        }
        printf("}\n");
    }
    if (rc < 0) die(err);
    r->close(r);
    free(bytes);
    return 0;
}
