// table: the row interface fsdpc reads columnar datasets through (Arrow IPC in data/arrow.c,
// Parquet in data/parquet.c). A reader lists its columns, is told which ones to read, then gives
// one row at a time: strings as bytes, integer lists widened to int64. Memory stays bounded by
// one record batch (Arrow) or one row group's selected column chunks (Parquet), whatever the file size.
#ifndef FSDPC_TABLE_H
#define FSDPC_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    TABLE_STRING,    // string / large_string (Parquet: BYTE_ARRAY, annotated UTF8/STRING or not)
    TABLE_INT_LIST,  // list / large_list / fixed_size_list of int8..int64, uint8..uint64
    TABLE_INT,       // a scalar int8..int64 / uint8..uint64
    TABLE_OTHER,     // anything else: listed for messages, cannot be selected
} TableKind;

typedef struct {
    char name[128];
    char type[64];  // human-readable, for messages: "string", "list<int32>", "large_list<int64>", "double", ...
    TableKind kind;
} TableColumn;

// One selected column's value in the current row; valid until the next call to next() or close().
typedef struct {
    int is_null;          // a null row (or a null list); str/ints unset
    const char *str;      // TABLE_STRING: the bytes, not NUL-terminated
    size_t len;           // TABLE_STRING: bytes; TABLE_INT_LIST: elements; TABLE_INT: 1
    const int64_t *ints;  // TABLE_INT_LIST / TABLE_INT (a null list element reads as 0 and sets has_null_item)
    int has_null_item;    // an int list held a null element
} TableValue;

typedef struct TableReader TableReader;
struct TableReader {
    const char *format;  // "Arrow IPC stream", "Arrow IPC file", "Parquet"
    int ncols;
    const TableColumn *cols;  // (ncols) the top-level columns in schema order
    int64_t nrows;            // rows in the file; -1 when the format does not say without a scan
    // Chooses the columns next() fills, by index into cols, in that order (n <= 8). Refuses
    // TABLE_OTHER with a message naming the column and its type. Returns 0, or -1 with err set.
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

#endif
