// cmd_prepare: `fsdpc prepare`, its flags, and their checks before data/build/prepare does the work.
#include "cmd_prepare.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../base/path.h"
#include "../comm/comm.h"
#include "../comm/io.h"
#include "../data/build/prepare.h"

typedef struct {
    CliList inputs;
    char *output;
    char *tokenizer;  // "": the byte tokenizer
    double val_fraction;
    int dtype_bytes;
    int overwrite;
    uint64_t shard_tokens;
    unsigned char given[CLI_MAX_FLAGS];  // which of prepare_cli's flags the command line set
} PrepareArgs;

static int cmd_prepare_fraction_ok(const void *v) { return *(const double *)v >= 0 && *(const double *)v < 1; }
static int cmd_prepare_positive(const void *v) { return *(const uint64_t *)v > 0; }

static const CliChoice cmd_prepare_dtypes[] = {{"uint16", 2}, {"uint32", 4}, {NULL, 0}};  // bytes per token
#define CMD_PREPARE_AT(field) .off = offsetof(PrepareArgs, field)
static const CliFlag cmd_prepare_flags[] = {
    {.name = "input", .kind = CLI_LIST, CMD_PREPARE_AT(inputs), .text = "file", .arg = "FILE ...",
     .help = "text, JSON Lines, Arrow or Parquet files, folders, globs, Hugging Face dataset folders or hub names (required)"},
    {.name = "output", .kind = CLI_PATH, CMD_PREPARE_AT(output), .arg = "DIR", .help = "where the shards go (required)"},
    {.name = "val_fraction", .kind = CLI_DOUBLE, CMD_PREPARE_AT(val_fraction), .text = "a number in [0, 1)", .valid = cmd_prepare_fraction_ok,
     .help = "documents held out for validation"},
    {.name = "tokenizer", .kind = CLI_PATH, CMD_PREPARE_AT(tokenizer), .arg = "SPEC",
     .help = "byte (each file's bytes), a tokenizer.model or tokenizer.json, a directory or a hub name", .unset = "byte"},
    {.name = "dtype", .kind = CLI_ENUM, CMD_PREPARE_AT(dtype_bytes), .choices = cmd_prepare_dtypes,
     .help = "the token width (uint32 when the vocabulary needs it)"},
    {.name = "shard_tokens", .kind = CLI_U64, CMD_PREPARE_AT(shard_tokens), .text = "a positive integer", .valid = cmd_prepare_positive,
     .help = "tokens per shard file"},
    {.name = "overwrite", .kind = CLI_BOOL, CMD_PREPARE_AT(overwrite), .help = "replace the shards an earlier prepare wrote there"},
};
#define CMD_PREPARE_NFLAGS (sizeof cmd_prepare_flags / sizeof cmd_prepare_flags[0])

static void cmd_prepare_defaults(void *dst) {
    PrepareArgs *a = dst;
    a->val_fraction = 0.01;
    a->dtype_bytes = 2;
    a->shard_tokens = 100000000;
}

const CliTable prepare_cli = {.flags = cmd_prepare_flags, .n = CMD_PREPARE_NFLAGS, .given_off = offsetof(PrepareArgs, given), .command = "prepare",
                              .bare_hint = "input files follow --input", .strict = 1, .size = sizeof(PrepareArgs),
                              .defaults = cmd_prepare_defaults};

int cmd_prepare(void *args) {
    PrepareArgs *a = args;
    if (!a->inputs.n) comm_fail_all("prepare needs --input FILE [FILE ...]");
    if (!a->output[0]) comm_fail_all("prepare needs --output DIR");
    // names the operating system refuses, said now: the longest shard's temporary, <split>_<N>.bin.<writer id>.tmp
    const char *e = io_check_output_path(a->output, 1, "train_9999999.bin.ffffffffffffffff.tmp", "--output");
    for (int i = 0; i < a->inputs.n && !e; i++) e = path_too_long("--input", a->inputs.v[i]);
    if (!e && a->tokenizer[0]) e = path_too_long("--tokenizer", a->tokenizer);
    if (e) comm_fail_all("%s", e);
    PrepareOptions o = {.inputs = a->inputs.v, .ninputs = a->inputs.n, .output = a->output, .tokenizer = a->tokenizer,
                        .val_fraction = a->val_fraction, .dtype_bytes = a->dtype_bytes, .dtype_given = cli_given(&prepare_cli, a, "dtype"),
                        .overwrite = a->overwrite, .shard_tokens = a->shard_tokens};
    char err[1024];
    int rc = prepare_shards(&o, err, sizeof err);
    if (rc < 0) comm_fail_all("%s", err);
    free(a->inputs.v);
    return rc ? COMM_EXIT_STOPPED : 0;
}
