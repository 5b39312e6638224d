// Fuzz target: the token-file header parser. Input: 8 bytes of claimed file size, one byte
// choosing the name (.bin / .txt / .tok), then the file's first bytes.
#include <stdint.h>
#include <string.h>

#include "../../data/data.h"
#include "stub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 9) return 0;
    uint64_t fsize;
    memcpy(&fsize, data, 8);
    static const char *const names[] = {"x.bin", "x.txt", "x.tok"};
    const char *path = names[data[8] % 3];
    size_t got = size - 9 < LLMC_HEADER_BYTES ? size - 9 : LLMC_HEADER_BYTES;
    TokenFile f;
    memset(&f, 0, sizeof f);
    uint64_t ntok = 0;
    const char *err = NULL;
    FUZZ_TRY(err = data_parse_header(data + 9, got, fsize, path, &f, &ntok));
    // an accepted header must describe bytes inside the file
    if (!err && (f.header > fsize || ntok > (fsize - f.header) / (uint64_t)f.width)) __builtin_trap();
    return 0;
}
