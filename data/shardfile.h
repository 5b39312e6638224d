// shardfile: the on-disk token formats fsdpc reads, and the one `fsdpc prepare` writes.
#ifndef FSDPC_SHARDFILE_H
#define FSDPC_SHARDFILE_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

// fsdpc token shard: a 64-byte little-endian header, then ntokens tokens of dtype_bytes each.
#define TOKFILE_MAGIC "FSDPCTOK"  // 8 bytes, no terminator on disk
#define TOKFILE_VERSION 1
#define TOKFILE_HEADER_BYTES 64
typedef struct {
    char magic[8];         // TOKFILE_MAGIC
    uint32_t version;      // TOKFILE_VERSION
    uint32_t dtype_bytes;  // 2 (uint16) or 4 (uint32)
    uint64_t ntokens;
    uint8_t reserved[40];  // zero
} TokFileHeader;
_Static_assert(sizeof(TokFileHeader) == TOKFILE_HEADER_BYTES, "token shard header is 64 bytes");

// llm.c token shards: 256 int32 header words; word 0 the magic, word 2 the token count.
#define LLMC_HEADER_BYTES 1024
#define LLMC_MAGIC_GPT2 20240520   // uint16 tokens
#define LLMC_MAGIC_LLAMA3 20240801 // uint32 tokens

// The 64-byte header of an fsdpc token shard holding ntokens of dtype_bytes each.
void data_shard_header(uint8_t out[TOKFILE_HEADER_BYTES], int dtype_bytes, uint64_t ntokens);
// mkdir -p: 0, or -1 with a one-line message naming the folder
int data_mkdirs(const char *dir, char *err, size_t errlen);

// `fsdpc prepare` (data/prepare.c): turns text files and JSON Lines into token shards.
//   fsdpc prepare --input FILE [FILE ...] --output DIR [--val_fraction F] [--tokenizer SPEC]
//                 [--dtype uint16|uint32] [--shard_tokens N] [--overwrite]
// A text file is one document, so is a JSON Lines "text"; with a real tokenizer (see
// tokenizer.h) each is written as <s> ids </s>; with the byte tokenizer (the default) a file as
// its bytes, a "text" as its bytes and '\n'.
// Under mpiexec the ranks share the inputs (plain JSON Lines by byte ranges, other files whole)
// and write disjoint shards DIR/{train,val}_NNNNNN.bin (rank r of W: r, r + W, ...); which
// documents go to validation does not depend on W. Collective; returns 0 (an error on any rank
// ends every rank with one line, its shards removed). args: what cli_parse of prepare_cli filled
// (zeroed before).
extern const CliTable prepare_cli;
int data_prepare(void *args);
// One JSON Lines line through prepare's scanner and tokenizer (the fuzz target's entry): NULL,
// or the error prepare would report for it.
const char *data_prepare_scan_line(const char *line, size_t n, const Tokenizer *tok, int dtype_bytes);

#endif
