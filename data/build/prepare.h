// prepare: documents (text files, JSON Lines) to token shards on disk, ahead of training.
#ifndef FSDPC_PREPARE_H
#define FSDPC_PREPARE_H

#include <stddef.h>

#include "../../model/cli.h"
#include "../text/tokenizer.h"

// `fsdpc prepare` (data/build/prepare.c): turns text files and JSON Lines into token shards.
//   fsdpc prepare --input FILE [FILE ...] --output DIR [--val_fraction F] [--tokenizer SPEC]
//                 [--dtype uint16|uint32] [--shard_tokens N] [--overwrite]
// A text file is one document, so is a JSON Lines "text"; with a real tokenizer (see
// data/text/tokenizer.h) each is written as <s> ids </s>; with the byte tokenizer (the default) a file as
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
