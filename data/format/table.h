// table: the row interface fsdpc reads columnar datasets through (Arrow IPC in data/arrow.c,
// Parquet in data/format/parquet.c). A reader lists its columns, is told which ones to read, then gives
// one row at a time: strings as bytes, integer lists widened to int64, lists of structs (chat
// messages) as the chosen string fields of each element. Memory stays bounded by one record batch
// (Arrow) or one row group's selected column chunks (Parquet), whatever the file size.
#ifndef FSDPC_TABLE_H
#define FSDPC_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TABLE_MAX_FIELDS 8  // fields of a TABLE_STRUCT_LIST's struct

typedef enum {
    TABLE_STRING,    // string / large_string (Parquet: BYTE_ARRAY, annotated UTF8/STRING or not;
                     // Arrow: dictionary-encoded too)
    TABLE_INT_LIST,  // list / large_list / fixed_size_list of int8..int64, uint8..uint64 (Arrow:
                     // dictionary-encoded too)
    TABLE_INT,       // a scalar int8..int64 / uint8..uint64
    TABLE_STRUCT_LIST,  // list / large_list of a struct of 1..TABLE_MAX_FIELDS fields, one a string at least
                        // (Parquet: a LIST of a group of leaves; 3-level, 2-level or a bare repeated group)
    TABLE_OTHER,     // anything else: listed for messages, cannot be selected
} TableKind;

typedef struct {
    char name[64];
    int is_string;  // string / large_string / binary (Parquet: BYTE_ARRAY); only these can be chosen
} TableField;

typedef struct {
    char name[128];
    char type[64];  // human-readable, for messages: "string", "list<int32>", "large_list<int64>", "double", ...
    TableKind kind;
    int nfields;    // TABLE_STRUCT_LIST: the struct's fields, in schema order
    TableField fields[TABLE_MAX_FIELDS];
} TableColumn;

// One chosen field of one element of a TABLE_STRUCT_LIST row.
typedef struct {
    const char *str;  // the bytes, not NUL-terminated ("" when empty); NULL when is_null
    size_t len;
    int is_null;      // the field is null, or the whole struct element is
} TableStr;

// One selected column's value in the current row; valid until the next call to next() or close().
typedef struct {
    int is_null;          // a null row (or a null list); str/ints/items unset
    const char *str;      // TABLE_STRING: the bytes, not NUL-terminated
    size_t len;           // TABLE_STRING: bytes; TABLE_INT_LIST, TABLE_STRUCT_LIST: elements; TABLE_INT: 1
    const int64_t *ints;  // TABLE_INT_LIST / TABLE_INT (a null list element reads as 0 and sets has_null_item)
    int has_null_item;    // an int list held a null element
    const TableStr *items;  // TABLE_STRUCT_LIST: len x the chosen fields; element e's j-th at items[e * nchosen + j]
} TableValue;

typedef struct TableReader TableReader;
struct TableReader {
    const char *format;  // "Arrow IPC stream", "Arrow IPC file", "Parquet"
    int ncols;
    const TableColumn *cols;  // (ncols) the top-level columns in schema order
    int64_t nrows;            // rows in the file; -1 when the format does not say without a scan
    // TABLE_STRUCT_LIST column `col`: the string fields next() gives for each element, by index
    // into cols[col].fields, in that order (1 <= n <= TABLE_MAX_FIELDS). Must come before the
    // select() that reads the column. Returns 0, or -1 with err set (a field that is no string).
    int (*choose_fields)(TableReader *r, int col, const int *fields, int n, char *err, size_t errlen);
    // Chooses the columns next() fills, by index into cols, in that order (n <= 8). Refuses
    // TABLE_OTHER, and a TABLE_STRUCT_LIST without chosen fields, with a message naming the column
    // and its type. Returns 0, or -1 with err set.
    int (*select)(TableReader *r, const int *cols, int n, char *err, size_t errlen);
    // The next row's selected values into out[0..n): 1 for a row, 0 after the last, -1 with err
    // set (a message naming the file and what is wrong: truncated, corrupt, unsupported codec).
    int (*next)(TableReader *r, TableValue *out, char *err, size_t errlen);
    void (*close)(TableReader *r);
};

// Index of the column named `name`, or -1.
static inline int table_find(const TableReader *r, const char *name) {
    for (int i = 0; i < r->ncols; i++) {
        const char *a = r->cols[i].name, *b = name;
        while (*a && *a == *b) a++, b++;
        if (*a == *b) return i;
    }
    return -1;
}

// Index of field `name` of a TABLE_STRUCT_LIST column, or -1.
static inline int table_find_field(const TableColumn *c, const char *name) {
    for (int i = 0; i < c->nfields && i < TABLE_MAX_FIELDS; i++) {
        const char *a = c->fields[i].name, *b = name;
        while (*a && *a == *b) a++, b++;
        if (*a == *b) return i;
    }
    return -1;
}

// choose_fields' checks, shared by the readers: 0, or -1 with err naming the file.
static inline int table_check_fields(const char *path, const TableColumn *c, const int *fields, int n, char *err, size_t errlen) {
    if (c->kind != TABLE_STRUCT_LIST)
        return snprintf(err, errlen, "'%s': column '%s' is %s, not a list of structs", path, c->name, c->type), -1;
    if (n < 1 || n > TABLE_MAX_FIELDS)
        return snprintf(err, errlen, "'%s': %d fields of column '%s' chosen; 1 to %d can be", path, n, c->name, TABLE_MAX_FIELDS), -1;
    for (int j = 0; j < n; j++) {
        if (fields[j] < 0 || fields[j] >= c->nfields)
            return snprintf(err, errlen, "'%s': column '%s' has no field %d", path, c->name, fields[j]), -1;
        if (!c->fields[fields[j]].is_string)
            return snprintf(err, errlen, "'%s': field '%s' of column '%s' (%s) is not a string", path, c->fields[fields[j]].name,
                            c->name, c->type), -1;
    }
    return 0;
}

#endif
