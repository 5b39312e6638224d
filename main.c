// fsdpc: FSDP-style training of Llama-2/3/3.2, Mistral, GPT-NeoX and minGPT models in one MPI binary.
// The subcommands and their flags are one table (run/commands.c).
#include "comm/comm.h"
#include "comm/io.h"
#include "run/commands.h"

int main(int argc, char **argv) {
    io_guard_std_streams();
    comm_init(&argc, &argv);
    int rc = commands_run(argc, argv);
    // Collective, last: stdout carries generated text, tokenize's ids, plan's tables and --help,
    // so a write that failed there (a full disk, /dev/full) ends every rank with an error, never
    // exit 0.
    comm_check_all(io_write_error(stdout, "standard output"));
    comm_finalize();
    return rc;
}
