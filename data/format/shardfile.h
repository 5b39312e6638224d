// shardfile: the on-disk token formats fsdpc reads, and the one `fsdpc prepare` writes.
#ifndef FSDPC_SHARDFILE_H
#define FSDPC_SHARDFILE_H

#include <stddef.h>
#include <stdint.h>

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

// An open token file of one of these formats (or HDF5 samples, data/format/h5data.h), as the
// loader reads it.
typedef struct {
    const char *path;  // the caller's (dataset.c's copy, freed by data_free)
    int fd;
    size_t header;     // bytes before the first token (HDF5: the file offset of the dataset's rows)
    int width;         // bytes per token: 1 (text as bytes), 2 or 4; HDF5 integers also 1 or 8
    int text;          // a file of no known format, read as bytes (the byte tokenizer's ids)
    uint64_t begin;    // first token of the used range (HDF5: first row)
    uint64_t nchunks;  // samples in the used range: T+1 tokens each, stride T (HDF5: rows)
    // HDF5 (samples, length) datasets: each row is one sample, its first T+1 tokens
    uint64_t row;      // tokens per row; 0 for the token stream formats
    int is_signed, big_endian;
    char dset[256];    // the dataset's name, for messages
    int vocab;         // the vocabulary the file records (an HDF5 attribute), 0: none
    const char *vocab_attr;  // that attribute's name
    // a data cache part's index (data/cache.h): nidx - 1 documents (rows), document i its tokens
    // idx[i] .. idx[i+1]; NULL for files without one
    const uint64_t *idx;
    uint64_t nidx;
    size_t idx_bytes;  // the mapping's length
    int lab_fd;        // finetuning rows: the labels beside the tokens (-1: none, or closed)
    // fd and lab_fd may be closed to keep a dataset of many files under the open-file limit
    // (data_file_fd opens them again): the labels' name, and the identity both had when first read
    char *lab_path;    // NULL: no labels
    uint64_t dev, ino, lab_dev, lab_ino;
    int64_t bytes, lab_bytes;
} TokenFile;

// The format of a data file from its first bytes (got of them, at most LLMC_HEADER_BYTES) and its
// size: sets f->header and f->width and *ntok, or returns a one-line message naming path.
const char *data_parse_header(const unsigned char *head, size_t got, uint64_t size, const char *path, TokenFile *f,
                              uint64_t *ntok);

// The 64-byte header of an fsdpc token shard holding ntokens of dtype_bytes each.
void data_shard_header(uint8_t out[TOKFILE_HEADER_BYTES], int dtype_bytes, uint64_t ntokens);

#endif
