// test_parquet: data/format/parquet.c from the command line, for test/integration/test_parquet.sh and
// bench/bench_parquet.sh.
//   test_parquet [--mem] FILE COLUMN...  "nrows N", then one JSON array per row of the columns
//                                        (a list with null items prints as {"nulls":[...]} with 0s)
//   test_parquet --columns FILE          one "name<TAB>type<TAB>kind" line per column
//   test_parquet --count FILE COLUMN...  reads every row; prints rows, items, a checksum and the
//                                        seconds from opening the file to the last row
// --mem reads the file into memory and opens that (parquet_open_mem). Errors: one
// "fsdpc: error: ..." line on stderr and exit status 1.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../data/format/parquet.h"
#include "table_print.h"

static int fail(const char *msg) {
    fprintf(stderr, "fsdpc: error: %s\n", msg);
    return 1;
}


static void print_value(const TableColumn *col, const TableValue *v) {
    if (v->is_null) {
        fputs("null", stdout);
        return;
    }
    if (col->kind == TABLE_STRING) {
        put_str(v->str, v->len);
        return;
    }
    if (col->kind == TABLE_INT) {
        printf("%lld", (long long)v->ints[0]);
        return;
    }
    if (col->kind == TABLE_STRUCT_LIST) {
        print_structs(col, v);
        return;
    }
    if (v->has_null_item) fputs("{\"nulls\":", stdout);
    putchar('[');
    for (size_t i = 0; i < v->len; i++) printf(i ? ",%lld" : "%lld", (long long)v->ints[i]);
    putchar(']');
    if (v->has_null_item) putchar('}');
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, k;
    char *buf = malloc(cap);
    while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *size = n;
    return buf;
}

int main(int argc, char **argv) {
    int mem = 0, columns = 0, count = 0, a = 1;
    for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
        if (!strcmp(argv[a], "--mem")) mem = 1;
        else if (!strcmp(argv[a], "--columns")) columns = 1;
        else if (!strcmp(argv[a], "--count")) count = 1;
        else return fail("unknown option");
    }
    if (a >= argc) return fail("usage: test_parquet [--mem] [--columns | --count] FILE [COLUMN...]");
    char err[1024];
    void *data = NULL;
    size_t size = 0;
    TableReader *r;
    double start = now();
    if (mem) {
        if (!(data = slurp(argv[a], &size))) return fail("cannot read the file");
        r = parquet_open_mem(data, size, argv[a], err, sizeof err);
    } else {
        r = parquet_open(argv[a], err, sizeof err);
    }
    if (!r) return fail(err);
    if (columns) {
        static const char *kinds[] = {"string", "int_list", "int", "struct_list", "other"};
        for (int i = 0; i < r->ncols; i++) printf("%s\t%s\t%s\n", r->cols[i].name, r->cols[i].type, kinds[r->cols[i].kind]);
        r->close(r);
        free(data);
        return 0;
    }
    int sel[8], n = 0, rc = 0;
    for (int i = a + 1; i < argc && !rc; i++) {
        if (n == 8) snprintf(err, sizeof err, "more than 8 columns"), rc = -1;
        else if ((sel[n++] = table_find(r, argv[i])) < 0) snprintf(err, sizeof err, "'%s': no column '%s'", argv[a], argv[i]), rc = -1;
    }
    for (int i = 0; i < n && !rc; i++) rc = choose_strings(r, sel[i], err, sizeof err);
    if (!rc) rc = r->select(r, sel, n, err, sizeof err);
    if (!rc && !count) printf("nrows %lld\n", (long long)r->nrows);
    TableValue v[8];
    long long rows = 0, items = 0;
    unsigned long long sum = 0;
    while (!rc && (rc = r->next(r, v, err, sizeof err)) > 0) {
        rc = 0;
        rows++;
        if (count) {
            for (int i = 0; i < n; i++) {
                items += (long long)v[i].len;
                if (!v[i].is_null && (r->cols[sel[i]].kind == TABLE_INT || r->cols[sel[i]].kind == TABLE_INT_LIST))
                    for (size_t k = 0; k < v[i].len; k++) sum += (unsigned long long)v[i].ints[k];
            }
            continue;
        }
        putchar('[');
        for (int i = 0; i < n; i++) {
            if (i) putchar(',');
            print_value(&r->cols[sel[i]], &v[i]);
        }
        puts("]");
    }
    if (!rc && rows != r->nrows) {
        snprintf(err, sizeof err, "'%s': %lld rows read, the footer says %lld", argv[a], rows, (long long)r->nrows);
        rc = -1;
    }
    r->close(r);
    free(data);
    if (rc < 0) return fail(err);
    if (count) printf("rows %lld items %lld checksum %llu seconds %.4f\n", rows, items, sum, now() - start);
    return 0;
}
