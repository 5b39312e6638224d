// Fuzz target: what a data file is from its first bytes (magic numbers, Arrow's first message,
// gzip / zstd decompressed and classified again, UTF-8 and JSON Lines checks). Input: 8 bytes of
// claimed file size, one byte choosing the name, then the file's first bytes.
#include <stdint.h>
#include <string.h>

#include "../../data/format/sniff.h"
#include "stub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 9) return 0;
    uint64_t fsize;
    memcpy(&fsize, data, 8);
    static const char *const names[] = {"x.txt", "x.json", "x.jsonl", "x.bin", "x.json.gz", "x.jsonl.zst", "x.parquet", NULL};
    const char *name = names[data[8] % 8];
    // a claimed size below the bytes given is the file's real size: both orders are exercised
    if (data[8] & 8) fsize = size - 9;
    Sniff s;
    FUZZ_TRY(sniff_bytes(data + 9, size - 9, fsize, name, &s));
    // a description always, a hint exactly when refused, and an inner format only for gzip / zstd
    if (!s.what[0] || !memchr(s.what, 0, sizeof s.what) || !memchr(s.hint, 0, sizeof s.hint)) __builtin_trap();
    if (s.readable != !s.hint[0]) __builtin_trap();
    if ((s.inner != SNIFF_NONE) != (s.format == SNIFF_GZIP || s.format == SNIFF_ZSTD)) __builtin_trap();
    return 0;
}
