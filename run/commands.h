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

#endif
