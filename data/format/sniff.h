// sniff: what a data file is, from its content (magic numbers first, then its name), so a
// file fsdpc cannot read is refused with a line naming what it is, not trained on as bytes.
#ifndef FSDPC_SNIFF_H
#define FSDPC_SNIFF_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    SNIFF_NONE,          // Sniff.inner of a file that is not gzip or zstd
    SNIFF_EMPTY,         // no bytes at all
    SNIFF_TOKSHARD,      // fsdpc token shard (FSDPCTOK)
    SNIFF_LLMC,          // llm.c token shard (magic 20240520 or 20240801)
    SNIFF_NANOGPT_BIN,   // a .bin without a magic: nanoGPT's raw uint16 tokens
    SNIFF_HDF5,          // signature at 0, 512, 1024, 2048, ...
    SNIFF_ARROW_STREAM,  // Arrow IPC stream (datasets' save_to_disk and cache files)
    SNIFF_ARROW_FILE,    // Arrow IPC file ("ARROW1", Feather v2)
    SNIFF_PARQUET,       // "PAR1"
    SNIFF_JSONL,         // UTF-8, its first non-blank line one JSON object
    SNIFF_JSON_ARRAY,    // a .json / .jsonl whose first non-blank byte is '['
    SNIFF_JSON_DOC,      // a .json / .jsonl whose first object spans several lines
    SNIFF_TEXT,          // UTF-8 without NUL bytes, in what was sampled
    SNIFF_UTF16,         // a UTF-16 byte order mark
    SNIFF_GZIP,
    SNIFF_ZSTD,
    SNIFF_BZIP2,
    SNIFF_XZ,
    SNIFF_LZ4,
    SNIFF_ZIP,
    SNIFF_TAR,
    SNIFF_7Z,
    SNIFF_NPY,           // NumPy's np.save format
    SNIFF_SAFETENSORS,   // model weights
    SNIFF_BINARY,        // none of the above
} SniffFormat;

typedef struct {
    SniffFormat format;
    SniffFormat inner;  // gzip / zstd: what the decompressed start is (SNIFF_BINARY if it does not decompress); else SNIFF_NONE
    int readable;       // a format fsdpc reads: token shards, nanoGPT .bin, HDF5, Arrow, Parquet, JSON Lines, text,
                        // an empty file, and JSON Lines or text (or nothing) inside gzip or zstd
    // A noun phrase that reads well in "data file 'x' is <what>, which fsdpc does not read":
    // "gzip-compressed JSON Lines", "bzip2-compressed data", "a JSON array", "binary data (not
    // UTF-8 text: a NUL byte at byte 100000)", "a truncated Parquet file (no PAR1 footer ...)".
    char what[200];
    char hint[256];     // when not readable: what to do instead ("decompress it (bunzip2) or ..."); else ""
} Sniff;

// Opens and samples the file (its first 256 KiB; for larger files, three 64 KiB blocks further in
// and the end; HDF5 signatures at 512 * 2^k). Returns 0, or -1 with a one-line message naming
// the path in err (cannot open, not a regular file, cannot read).
int sniff_path(const char *path, Sniff *out, char *err, size_t errlen);
// The same on the first n bytes of a file of `size` bytes named `name` (NULL: no name); for
// tests and fuzzing. n < size means the bytes are a prefix (a character cut at the end is fine).
void sniff_bytes(const unsigned char *head, size_t n, uint64_t size, const char *name, Sniff *out);
// A short stable name for the format ("jsonl", "gzip", "arrow_stream", ...), for logs and tests.
const char *sniff_format_name(SniffFormat f);

#endif
