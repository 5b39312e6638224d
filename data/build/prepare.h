// prepare: documents (text files, JSON Lines, Arrow, Parquet) to token shards on disk, ahead of
// training (`fsdpc prepare`, run/cmd_prepare.c).
#ifndef FSDPC_PREPARE_H
#define FSDPC_PREPARE_H

#include <stddef.h>
#include <stdint.h>

#include "../text/tokenizer.h"

typedef struct {
    const char *const *inputs;  // (ninputs) files, folders, globs, Hugging Face dataset folders or hub names
    int ninputs;
    const char *output;         // the folder the shards go to
    const char *tokenizer;      // "" (or "byte"): the byte tokenizer
    double val_fraction;        // documents held out for validation, in [0, 1)
    int dtype_bytes;            // 2 (uint16) or 4 (uint32): widened to 4 when the vocabulary needs it
    int dtype_given;            // --dtype was given: a vocabulary beyond uint16 is then an error
    int overwrite;              // replace the shards an earlier prepare wrote there
    uint64_t shard_tokens;      // tokens per shard file
} PrepareOptions;

// Collective. A text file is one document, so is a JSON Lines "text"; with a real tokenizer (see
// data/text/tokenizer.h) each is written as <s> ids </s>; with the byte tokenizer (the default) a
// file as its bytes, a "text" as its bytes and '\n'.
// The ranks share the inputs (plain JSON Lines by byte ranges, other files whole) and write
// disjoint shards OUTPUT/{train,val}_NNNNNN.bin (rank r of W: r, r + W, ...); which documents go
// to validation does not depend on W. Returns 0; 1 on every rank when a stop signal ended it (the
// line logged, nothing left behind); -1 on every rank with the first failing rank's line in err,
// every rank's shards removed.
int prepare_shards(const PrepareOptions *o, char *err, size_t errlen);
// One JSON Lines line through prepare's reading of it (base/json) and tokenizer (the fuzz target's entry): NULL,
// or the error prepare would report for it.
const char *data_prepare_scan_line(const char *line, size_t n, const Tokenizer *tok, int dtype_bytes);

#endif
