// commands: fsdpc's subcommands as one table (training, which takes no subcommand, then prepare,
// tokenize, export and plan): each one's name, synopsis, summary, flag table and entry point.
// Every one parses through base/cli, and `--help` / `-h` / `fsdpc help` print from the table.
#ifndef FSDPC_COMMANDS_H
#define FSDPC_COMMANDS_H

#include "../base/cli.h"

typedef struct {
    const char *name;     // argv[1]; NULL: training, the command without a name
    const char *usage;    // the synopsis --help begins with
    const char *summary;  // one line
    const CliTable *flags;
    int (*main)(void *args);  // runs on what cli_parse of flags filled; returns the exit status
} Command;

// Collective: runs the command argv names (training when argv[1] is a flag or absent), or prints
// the help it asks for (from rank 0, to stdout). Returns the exit status. An unknown subcommand
// ends every rank with one line naming the nearest.
int commands_run(int argc, char **argv);

// `fsdpc export --checkpoint DIR|FILE --output OUTDIR [--dtype bf16|fp16|fp32] [--max_shard_size BYTES]
// [--overwrite]` (cmd_export.c): a checkpoint's weights, config and tokenizer as a Hugging Face
// model directory (its family's architecture). OUTDIR is new, empty or an earlier export, unless
// --overwrite (which replaces only files of the names export writes, never the checkpoint or
// tokenizer files it reads). Rank 0 writes; every rank returns the same exit status. args: what
// cli_parse of cmd_export_cli filled.
extern const CliTable cmd_export_cli;
int cmd_export_main(void *args);

#endif
