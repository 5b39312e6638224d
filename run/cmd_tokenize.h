// cmd_tokenize: `fsdpc tokenize --tokenizer SPEC [--bos] [--eos] [--decode]`: one line of
// space-separated ids per line of stdin (spm_encode --output_format=id), or with --decode one line
// of text per line of ids (spm_decode --input_format=id). With --chat [--chat_template T]
// [--labels], chat JSON Lines through data/text/chat's templates.
#ifndef FSDPC_CMD_TOKENIZE_H
#define FSDPC_CMD_TOKENIZE_H

#include "../base/cli.h"

extern const CliTable tokenize_cli;
// args: what cli_parse of tokenize_cli filled; returns the exit status.
int cmd_tokenize(void *args);

#endif
