// ident: what a run's inputs are, so that a resumed run can be held against the checkpoint it
// continues and one rank against another: a source's files (the data as resolved, the tokenizer's
// file), each by its name relative to the source, its size and a CRC-32 of its head and tail
// (cheap on big files, and it catches a swapped or rewritten file), plus the count, total size
// and one CRC over all of them. Written as one line of JSON (a checkpoint's run_inputs), which is
// read back as hostile input.
#ifndef FSDPC_IDENT_H
#define FSDPC_IDENT_H

#include <stddef.h>
#include <stdint.h>

#define IDENT_VERSION 1
#define IDENT_HEAD_MAX ((uint64_t)1 << 20)  // a file's first bytes in its CRC (less when a source has many files)

typedef struct {
    char *name;  // relative to the source
    uint64_t size;
    uint32_t crc;
} IdentFile;

typedef struct {
    char *spec;        // what the source was called (for messages; not compared)
    int nfiles;
    uint64_t bytes;    // all files' sizes
    uint32_t crc;      // over every file's name, size and CRC, in order
    int nlisted;       // files in list: all of them, or (read from a cut-down record) the first few
    IdentFile *list;
} IdentSource;

// The size of a file and the CRC-32 of its first `head` bytes followed by its last head / 16
// (the whole file when that covers it): 1 MiB and 64 KiB for a source of up to 64 files, down to
// 8 KiB and 512 bytes for one of thousands, so a source costs at most about 64 MiB of reads. 0, or -1 with a one-line error naming path (errno).
int ident_file(const char *path, uint64_t head, uint64_t *size, uint32_t *crc, char *err, size_t errlen);
// The identity of the n files a source spec resolved to (names relative to spec). 0, or -1 with
// a one-line error naming the file that cannot be read.
int ident_source(const char *spec, char *const *files, int n, IdentSource *out, char *err, size_t errlen);
void ident_source_free(IdentSource *s);
void ident_source_copy(IdentSource *dst, const IdentSource *src);
// Collective: NULL when every rank's s is rank 0's; else, on every rank, one line naming the
// first rank that differs and its first difference ("rank 1 sees different training data than
// rank 0 at 'd/': 'a.jsonl' is 2048 bytes (crc32 ..) on rank 1, 4096 bytes (crc32 ..) on rank 0...").
// label names what s is ("training data", "tokenizer files"). A static buffer, valid until the next call.
const char *ident_check_ranks(const IdentSource *s, const char *label);

// The inputs line: {"version":1,"KEY":{"spec":..,"files":N,"bytes":N,"crc32":"hex","list":[[name,
// size,"crc32"],...]},...} for the n sources (NULL ones left out) under their keys, in at most
// cap bytes with its NUL (cap >= 1024 per source): a long list is cut to its first files.
void ident_line(char *out, size_t cap, const char *const *keys, const IdentSource *const *srcs, int n);
// Member `key` of an inputs line (a JSON object of sources and "version"): 1 with *out filled, 0
// when the line lacks it, -1 with a one-line reason when the line or the member is malformed.
int ident_parse(const char *line, const char *key, IdentSource *out, char *err, size_t errlen);
// Members of an inputs line that are not `version` and not one of the NULL-terminated known
// keys, comma-separated into out ("" when none); -1 when the line is no JSON object.
int ident_unknown_keys(const char *line, const char *const *known, char *out, size_t len);

// How a difference is told: a and b name the two sides ("now" / "then", "on rank 1" / "on rank 0"),
// only_a / only_b introduce the files one side has and the other lacks ("new" / "gone").
typedef struct {
    const char *a, *b, *only_a, *only_b;
} IdentWords;
// 0 when a and b are the same inputs; else 1 with their first difference in out, e.g.
// "3 files now, 2 then (new: c.jsonl)" or "'a.jsonl' is 4096 bytes (crc32 0badc0de) now, 2048 bytes (crc32 12345678) then".
int ident_diff(const IdentSource *a, const IdentSource *b, const IdentWords *w, char *out, size_t len);
// One file's identity as words: "'tok.model' (1234 bytes, crc32 0badc0de)", or "none" for a source without files.
void ident_describe(const IdentSource *s, char *out, size_t len);

#endif
