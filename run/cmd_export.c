// cmd_export: `fsdpc export`, its flags and its run on every rank (commands.h); the export
// itself is ckpt/export.c's.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../base/log.h"
#include "../ckpt/ckpt.h"
#include "../ckpt/export.h"
#include "../base/path.h"
#include "../comm/comm.h"
#include "../comm/io.h"
#include "../base/cli.h"
#include "commands.h"

typedef struct {
    char *checkpoint, *output;  // heap, any length (CLI_PATH)
    int dtype;  // StDtype
    uint64_t max_shard;
    int overwrite;  // write into a folder that holds other files (never over the export's own inputs)
    int adapter;    // a LoRA checkpoint's adapters as PEFT's adapter folder
    int accept_lossy;  // values --dtype cannot hold written as infinity or NaN instead of refused
} ExportArgs;

static int cmd_export_positive(const void *v) { return *(const uint64_t *)v > 0; }

static const CliChoice cmd_export_dtypes[] = {{"bf16", ST_BF16}, {"fp16", ST_F16}, {"fp32", ST_F32}, {NULL, 0}};
#define CMD_EXPORT_AT(field) .off = offsetof(ExportArgs, field)
static const CliFlag cmd_export_flags[] = {
    {.name = "checkpoint", .kind = CLI_PATH, CMD_EXPORT_AT(checkpoint), .arg = "DIR|FILE",
     .help = "the checkpoint, or a folder's newest (required)"},
    {.name = "output", .kind = CLI_PATH, CMD_EXPORT_AT(output), .arg = "DIR",
     .help = "the Hugging Face folder to write: new, empty or an earlier export (required)"},
    {.name = "dtype", .kind = CLI_ENUM, CMD_EXPORT_AT(dtype), .choices = cmd_export_dtypes, .help = "the weights' type"},
    {.name = "max_shard_size", .kind = CLI_U64, CMD_EXPORT_AT(max_shard), .text = "a positive byte count", .valid = cmd_export_positive,
     .arg = "BYTES", .help = "largest safetensors file; larger models are split, with an index"},
    {.name = "overwrite", .kind = CLI_BOOL, CMD_EXPORT_AT(overwrite),
     .help = "write into a folder holding other files (replacing only names export writes)"},
    {.name = "adapter", .kind = CLI_BOOL, CMD_EXPORT_AT(adapter),
     .help = "a LoRA checkpoint's adapters as a PEFT adapter folder (without: the model, adapters merged)"},
    {.name = "accept_lossy", .kind = CLI_BOOL, CMD_EXPORT_AT(accept_lossy),
     .help = "write weights beyond --dtype's range as infinity (without: such an export is refused, naming the tensors)"},
};
static const char cmd_export_usage[] =
    "usage: fsdpc export --checkpoint DIR|FILE --output DIR [--dtype bf16|fp16|fp32] [--max_shard_size BYTES] [--overwrite] [--adapter] [--accept_lossy]";

static void cmd_export_defaults(void *dst) {
    ExportArgs *a = dst;
    a->dtype = ST_BF16;
    a->max_shard = 5000000000ull;  // Hugging Face's default shard size, 5 GB
}

const CliTable cmd_export_cli = {.flags = cmd_export_flags, .n = sizeof cmd_export_flags / sizeof cmd_export_flags[0], .command = "export",
                             .bare_hint = "export takes flags only", .strict = 1, .size = sizeof(ExportArgs),
                             .defaults = cmd_export_defaults};


int cmd_export_main(void *args) {
    const ExportArgs a = *(const ExportArgs *)args;
    if (!a.checkpoint[0] || !a.output[0]) comm_fail_all("%s", cmd_export_usage);
    // names the operating system refuses, said now: the longest file's temporary, <name>.<writer id>.tmp
    const char *bad = path_too_long("--checkpoint", a.checkpoint);
    if (!bad) bad = io_check_output_path(a.output, 1, "model-00001-of-00001.safetensors.ffffffffffffffff.tmp", "--output");
    if (bad) comm_fail_all("%s", bad);
    comm_stop_polled(1);  // the weight loop polls; temporaries go on a stop
    char *file = NULL, summary[2400] = "", line[CKPT_ERR_LEN];
    int found = ckpt_resolve(a.checkpoint, NULL, NULL, &file, line, sizeof line);
    if (found < 0) comm_fail_all("%s", line);
    if (!found)
        comm_fail_all(access(a.checkpoint, F_OK) == 0 ? "no checkpoint in '%s'" : "checkpoint '%s' does not exist", a.checkpoint);
    // one writer: the ranks of a parallel file system's clients need not agree on partial pages
    const ExportOptions o = {.output = a.output, .dtype = (StDtype)a.dtype, .max_shard = a.max_shard, .overwrite = a.overwrite,
                             .adapter = a.adapter, .accept_lossy = a.accept_lossy};
    ExportResult res = {0};
    const char *err = comm_info.rank == 0 ? export_checkpoint(file, &o, &res) : NULL;
    char merged[200] = "";
    if (res.merged)
        snprintf(merged, sizeof merged, "Merged the LoRA adapters into %d weights (W + s B A in fp32: rank %d, alpha %g, scale %g)\n",
                 res.merged, res.lora_rank, (double)res.lora_alpha, (double)res.lora_scale);
    if (comm_info.rank == 0 && !err)
        snprintf(summary, sizeof summary, "%sExported %s%s (%.2fM parameters, %s) to %s\n", merged, a.adapter ? "the LoRA adapters of " : "",
                 file, res.params / 1e6, cli_choice_name(cmd_export_dtypes, a.dtype), a.output);
    free(file);
    int stopped = err == export_stopped ? comm_stop_signal : 0;  // rank 0's outcome is the job's
    comm_check_all(stopped ? NULL : err);
    comm_bcast_bytes(comm_world(), &stopped, sizeof stopped, 0);
    if (stopped) {
        log_msg("Stopped by signal %d (%s) during export: its temporary files were removed, nothing was written under a "
                "final name in '%s'; exiting with status %d\n", stopped, comm_signal_name(stopped), a.output, COMM_EXIT_STOPPED);
        return COMM_EXIT_STOPPED;
    }
    log_msg("%s", summary);
    return 0;
}
