// table_print: the test drivers' (test_arrow, test_parquet) printing of table rows as JSON, the
// way the fixtures' JavaScript writers print them, so the two outputs compare as text.
#ifndef FSDPC_TABLE_PRINT_H
#define FSDPC_TABLE_PRINT_H

#include <stdio.h>
#include <string.h>

#include "../../data/format/table.h"

// as JavaScript's JSON.stringify writes a string: bytes are UTF-8 already
static void put_str(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\b': fputs("\\b", stdout); break;
        case '\f': fputs("\\f", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        default:
            if (c < 0x20) printf("\\u%04x", c);
            else putchar(c);
        }
    }
    putchar('"');
}

// A struct list's string fields, all chosen, in schema order.
static int choose_strings(TableReader *r, int col, char *err, size_t errlen) {
    const TableColumn *c = &r->cols[col];
    int f[TABLE_MAX_FIELDS], n = 0;
    for (int j = 0; j < c->nfields; j++)
        if (c->fields[j].is_string) f[n++] = j;
    return c->kind == TABLE_STRUCT_LIST ? r->choose_fields(r, col, f, n, err, errlen) : 0;
}

// A struct list row as [{"field": "value" or null, ...}, ...] with the chosen (string) fields
static void print_structs(const TableColumn *c, const TableValue *v) {
    int n = 0;
    for (int j = 0; j < c->nfields; j++) n += c->fields[j].is_string;
    putchar('[');
    for (size_t e = 0; e < v->len; e++) {
        printf("%s{", e ? "," : "");
        for (int j = 0, k = 0; j < c->nfields; j++) {
            if (!c->fields[j].is_string) continue;
            const TableStr *t = &v->items[e * (size_t)n + (size_t)k];
            printf("%s", k++ ? "," : "");
            put_str(c->fields[j].name, strlen(c->fields[j].name));
            putchar(':');
            if (t->is_null) fputs("null", stdout);
            else put_str(t->str, t->len);
        }
        putchar('}');
    }
    putchar(']');
}

#endif
