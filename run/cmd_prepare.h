// cmd_prepare: `fsdpc prepare --input FILE ... --output DIR [--val_fraction F] [--tokenizer SPEC]
// [--dtype uint16|uint32] [--shard_tokens N] [--overwrite]`: documents to token shards
// (data/build/prepare.h says how). Collective; an error on any rank ends every rank with one line.
#ifndef FSDPC_CMD_PREPARE_H
#define FSDPC_CMD_PREPARE_H

#include "../base/cli.h"

extern const CliTable prepare_cli;
// args: what cli_parse of prepare_cli filled (zeroed before); returns the exit status.
int cmd_prepare(void *args);

#endif
