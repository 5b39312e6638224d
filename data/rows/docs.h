// docs: the documents in one data file, whatever its container: a plain text file (one
// document), JSON Lines (plain, gzip or zstd; one object a line), Arrow IPC or Parquet (one row
// each). A document is text to tokenize or ids to take as they are. The caller says what the file
// is (data/sniff found it from its content); a file that lies gives one error line, never a crash.
#ifndef FSDPC_DOCS_H
#define FSDPC_DOCS_H

#include <stddef.h>
#include <stdint.h>

#include "../../base/json.h"
#include "../format/table.h"

typedef enum { DOCS_TEXT, DOCS_JSONL, DOCS_ARROW, DOCS_PARQUET } DocsKind;
typedef enum { DOCS_PLAIN, DOCS_GZIP, DOCS_ZSTD } DocsCompression;

typedef struct {
    int is_ids;           // ids (pre-tokenized) rather than text
    const char *text;     // !is_ids: the document's bytes (not NUL-terminated)
    size_t len;           // !is_ids: bytes; is_ids: ids
    const int64_t *ids;   // is_ids
} Doc;

typedef struct DocsReader DocsReader;

// The fields (JSON Lines members, table columns) a file's rows hold, and which of them a reader
// uses: the rest is named in one warning per data source, never silently dropped. Names are
// kept printable (control bytes, non-ASCII, '\\' and ',' as \xNN; long ones cut).
#define DOCS_FIELDS_MAX 16  // distinct names kept; beyond them `more` is set
typedef struct {
    char name[DOCS_FIELDS_MAX][64];
    unsigned char used[DOCS_FIELDS_MAX];
    int n, more;
} DocsFields;
// Notes field name[0, len) as seen; used: read by this row's format (used once is used).
void docs_fields_note(DocsFields *f, const char *name, size_t len, int used);
// The fields of f with that use, joined by ", " into out; returns how many (more counts as one).
int docs_fields_list(const DocsFields *f, int used, char *out, size_t len);
// One line without tabs or newlines that docs_fields_parse adds back to a DocsFields (the data
// cache keeps it beside each part; ranks send it to rank 0); merging is saving and parsing.
void docs_fields_save(const DocsFields *f, char *out, size_t len);
void docs_fields_parse(DocsFields *f, const char *line);
// The warning for the fields no row format read: "warning: <label>: fields url, timestamp are
// not used (text is read)"; a name that some row format reads (as "labels" beside "text": probably
// meant) is named again with hint ("read only in another row format"). 1 with the line in out,
// 0 (out "") when every field was read.
int docs_fields_warning(const DocsFields *f, const char *label, const char *hint, char *out, size_t len);

// text_column: the column (or JSON member) holding text, "text" unless --text_column named
// another; explicit: it was named, so it wins over an "input_ids" column. NULL with a one-line
// message naming the file in err.
DocsReader *docs_open(const char *path, DocsKind kind, DocsCompression comp, const char *text_column, int explicit_column,
                      char *err, size_t errlen);
// The next document: 1, 0 at the end, -1 with err set. Null rows are skipped (docs_nulls counts them).
int docs_next(DocsReader *r, Doc *d, char *err, size_t errlen);
// What was read, for the start-up log: "Parquet, column input_ids (list<int32>)".
const char *docs_describe(const DocsReader *r);
uint64_t docs_nulls(const DocsReader *r);
// The fields seen so far and the one(s) read; docs_open_rows readers note none (their caller does).
const DocsFields *docs_fields(const DocsReader *r);
// Bytes of the file consumed so far (compressed bytes for gzip/zstd; 0 when the format does not tell).
uint64_t docs_progress(const DocsReader *r);
void docs_close(DocsReader *r);

// The raw rows, for readers that interpret them (data/sft): a JSON Lines, Arrow or Parquet file
// opened without choosing a column (a text file is refused). docs_progress and docs_close apply.
DocsReader *docs_open_rows(const char *path, DocsKind kind, DocsCompression comp, char *err, size_t errlen);
// JSON Lines: the next non-blank line's object (valid until the next call) and its 1-based line
// number: 1, 0 at the end, -1 with err set (a line that is not a JSON object, a truncated stream).
int docs_next_object(DocsReader *r, const JsonValue **obj, uint64_t *line_no, char *err, size_t errlen);
// Arrow / Parquet: the table, for the caller to select columns and read rows through; NULL for JSON Lines.
TableReader *docs_table(DocsReader *r);

#endif
