// shardfile: reading fsdpc, llm.c and nanoGPT token shard headers, writing fsdpc's, and the
// folder helper the writers of shards (prepare, the data cache) share.
#include "shardfile.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../../base/path.h"

const char *data_parse_header(const unsigned char *head, size_t got, uint64_t size, const char *path, TokenFile *f,
                              uint64_t *ntok) {
    static char msg[1200];
    TokFileHeader th;
    memset(&th, 0, sizeof th);
    memcpy(&th, head, got < sizeof th ? got : sizeof th);
    int32_t words[3] = {0, 0, 0};
    memcpy(words, head, got < sizeof words ? got : sizeof words);
    if (got >= sizeof th && !memcmp(th.magic, TOKFILE_MAGIC, 8)) {
        if (th.version != TOKFILE_VERSION || (th.dtype_bytes != 2 && th.dtype_bytes != 4))
            return snprintf(msg, sizeof msg, "data file '%s': unsupported token shard version %u / dtype of %u bytes", path,
                            th.version, th.dtype_bytes), msg;
        f->header = TOKFILE_HEADER_BYTES;
        f->width = (int)th.dtype_bytes;
        *ntok = th.ntokens;
    } else if (got == LLMC_HEADER_BYTES && (words[0] == LLMC_MAGIC_GPT2 || words[0] == LLMC_MAGIC_LLAMA3)) {
        f->header = LLMC_HEADER_BYTES;
        f->width = words[0] == LLMC_MAGIC_GPT2 ? 2 : 4;
        *ntok = (uint64_t)(uint32_t)words[2];
    } else if (path_ends_with(path, ".bin")) {  // nanoGPT: raw uint16, no header
        if (size % 2) return snprintf(msg, sizeof msg, "data file '%s': odd size %llu for raw uint16 tokens", path, (unsigned long long)size), msg;
        f->header = 0;
        f->width = 2;
        *ntok = size / 2;
    } else {  // text: one byte per token (byte tokenizer)
        f->header = 0;
        f->width = 1;
        f->text = 1;
        *ntok = size;
    }
    // compared by division: a hostile count must not wrap the product into agreement
    if (size < f->header || *ntok != (size - f->header) / (uint64_t)f->width || (size - f->header) % (uint64_t)f->width)
        return snprintf(msg, sizeof msg, "data file '%s' is truncated or corrupt: its header promises %llu tokens of %d bytes "
                        "after a %zu-byte header, but it holds %llu bytes",
                        path, (unsigned long long)*ntok, f->width, f->header, (unsigned long long)size), msg;
    return NULL;
}

void data_shard_header(uint8_t out[TOKFILE_HEADER_BYTES], int dtype_bytes, uint64_t ntokens) {
    memset(out, 0, TOKFILE_HEADER_BYTES);
    memcpy(out + offsetof(TokFileHeader, magic), TOKFILE_MAGIC, 8);
    for (int i = 0; i < 4; i++) out[offsetof(TokFileHeader, version) + i] = (uint8_t)((uint32_t)TOKFILE_VERSION >> (8 * i));
    for (int i = 0; i < 4; i++) out[offsetof(TokFileHeader, dtype_bytes) + i] = (uint8_t)((uint32_t)dtype_bytes >> (8 * i));
    for (int i = 0; i < 8; i++) out[offsetof(TokFileHeader, ntokens) + i] = (uint8_t)(ntokens >> (8 * i));
}

