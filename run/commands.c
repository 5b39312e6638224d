// commands: the subcommand table and its dispatch (see commands.h).
#define _GNU_SOURCE  // dl_iterate_phdr
#include "commands.h"

#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/err.h"
#include "../base/log.h"
#include "../comm/comm.h"
#include "../kernels/kernels.h"
#include "../model/family.h"
#include "cmd_prepare.h"
#include "cmd_tokenize.h"
#include "config.h"
#include "flags.h"
#include "plan.h"
#include "train.h"

// Training: the configuration's own checks, the threads and the device, then the run.
static int train_command(void *args) {
    Config *cfg = args;
    flags_finish(cfg);
    comm_check_same(flags_hash(cfg), "flags");
    log_timestamps(cfg->run.log_timestamps);
    comm_set_collective_timeout(cfg->run.collective_timeout);
    log_msg("fsdpc: MPI transport %s\n", comm_transport());
    if (cfg->run.environment == ENV_PBS) comm_check_pbs();
    const char *source = "--num_threads";
    int threads = cfg->run.num_threads ? cfg->run.num_threads : comm_default_threads(&source);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 0 && threads > cores) {  // more threads in one rank than the node has cores never helps
        log_msg("warning: %d thread(s) per rank from %s exceed this node's %ld cores: using %ld\n", threads, source, cores, cores);
        threads = (int)cores;
    }
    comm_check_all(kern_init(threads));
    log_msg("fsdpc: %d thread(s) per rank, from %s\n", kern_num_threads(), source);
    // a launcher that binds each rank to fewer cores than its share of the node starves it
    // (mpirun binds np <= 2 to one core each by default): said once, with the flags that fix it
    long share = cores / comm_info.local_world;
    if (comm_pinned_cores() < share)
        log_msg("warning: this rank is bound to %d core(s) of its %ld-core share of the node; let it use them: %s, "
                "srun --cpus-per-task=%ld\n", comm_pinned_cores(), share, comm_bind_flags(share), share);
    if ((long)kern_num_threads() * comm_info.local_world > cores)
        log_msg("warning: %d thread(s) x %d rank(s) on this node exceed its %ld cores: the ranks will slow each other down\n",
                kern_num_threads(), comm_info.local_world, cores);
    cfg->run.num_threads = kern_num_threads();
    comm_check_all(kern_select_device(cfg->run.device, comm_info.local_rank, comm_info.local_world));
    comm_check_all(comm_open_gpu_transport());
    comm_check_distinct_local(kern_device_uuid(), "GPU",
                              "give each rank its own (CUDA_VISIBLE_DEVICES per rank, or srun --gpus-per-task=1 "
                              "--gpu-bind=single:1), or pass --device cpu");
    kern_set_compute_bf16(cfg->shard.precision == PRECISION_BF16);
    return train_run(cfg);
}

static const Command commands[] = {
    {NULL, "fsdpc [SUBCOMMAND] [--flag value | --flag=value ...]", "train, evaluate and generate", &flags_cli, train_command},
    {"prepare", "fsdpc prepare --input FILE ... --output DIR [--flag value ...]",
     "tokenize text, JSON Lines, Arrow and Parquet into token shards, ahead of training", &prepare_cli, cmd_prepare},
    {"tokenize", "fsdpc tokenize --tokenizer SPEC [--flag ...] <input >output",
     "lines of stdin to lines of token ids (or back, or chat JSON Lines to ids)", &tokenize_cli, cmd_tokenize},
    {"export", "fsdpc export --checkpoint DIR|FILE --output DIR [--flag value ...]",
     "a checkpoint's weights, config and tokenizer as a Hugging Face model folder", &cmd_export_cli, cmd_export_main},
    {"plan", "fsdpc plan [training flags] [plan flags]",
     "a run's memory and step time on a cluster it need not run on", &plan_cli, plan_main},
};
enum { NCOMMANDS = sizeof commands / sizeof commands[0] };

static const Command *commands_find(const char *name) {
    for (int i = 1; i < NCOMMANDS; i++)
        if (!strcmp(commands[i].name, name)) return &commands[i];
    return NULL;
}

static void commands_unknown(const char *name) {
    const char *names[NCOMMANDS + 1] = {"help"};
    char list[256] = "help";
    for (int i = 1; i < NCOMMANDS; i++) {
        names[i] = commands[i].name;
        snprintf(list + strlen(list), sizeof list - strlen(list), ", %s", commands[i].name);
    }
    const char *near = cli_nearest(name, names, NCOMMANDS);
    comm_fail_all("unknown subcommand '%s'%s%s%s (subcommands: %s; training takes flags only: fsdpc --help)", name,
                  near ? ": did you mean " : "", near ? near : "", near ? "?" : "", list);
}

// The help of c on stdout, rank 0 only: the synopsis, then for training the subcommands, then the
// flags by group.
static void commands_help(const Command *c) {
    if (comm_info.rank != 0) return;
    printf("usage: %s\n\n", c->usage);
    if (c->name) {
        printf("%s.\n", c->summary);
    } else {
        printf("fsdpc trains language models (%s) with FSDP sharding over MPI.\n\nsubcommands:\n", family_names(", ", 0));
        for (int i = 0; i < NCOMMANDS; i++) printf("  %-10s %s\n", commands[i].name ? commands[i].name : "(none)", commands[i].summary);
        printf("  %-10s this text; `fsdpc help SUBCOMMAND` or `fsdpc SUBCOMMAND --help`: a subcommand's flags;\n"
               "  %-10s `fsdpc help --flags`: every flag and alias, one line each\n\n"
               "Flags take --name value or --name=value; a boolean may stand alone or take 0/1/true/false.\n"
               "docs/flags.md explains each group.\n", "help", "");
    }
    cli_help(c->flags, stdout);
}

// prints the path of each loaded library whose name has one of the `want` words, so a machine
// with two copies of a library (a bundle's and the system's) shows which one runs
static int print_library_path(struct dl_phdr_info *info, size_t size, void *want) {
    (void)size;
    const char *base = strrchr(info->dlpi_name, '/');
    for (const char *const *w = want; base && *w; w++)
        if (strstr(base, *w)) {
            printf("loaded: %s\n", info->dlpi_name);
            break;
        }
    return 0;
}

// `fsdpc --version`: the libraries this process loaded, one "name: version" line each, then the
// paths they came from (make gpu-check's first look at a GPU machine); rank 0 prints
static int commands_version(int argc) {
    if (argc > 1) comm_fail_all("--version takes no other arguments");
    if (comm_info.rank != 0) return 0;
    printf("fsdpc\n%s%s", comm_library_versions(), kern_library_versions());  // these load cuDNN, if anything does
    static const char *const want[] = {"libmpi.", "libcudart.", "libcublasLt.", "libnccl.", "libcudnn.", "libcuda.", NULL};
    dl_iterate_phdr(print_library_path, (void *)want);
    return 0;
}

// `fsdpc help [SUBCOMMAND | --flags]`
static int commands_help_command(int argc, char **argv) {
    if (argc > 2) comm_fail_all("help takes one subcommand or --flags, got %d arguments", argc - 1);
    const char *what = argc > 1 ? argv[1] : NULL;
    if (what && !strcmp(what, "--flags")) {
        for (int i = 0; i < NCOMMANDS && comm_info.rank == 0; i++)
            cli_list(commands[i].flags, commands[i].name ? commands[i].name : "train", stdout);
        return 0;
    }
    const Command *c = what && strcmp(what, "train") ? commands_find(what) : &commands[0];
    if (!c) commands_unknown(what);
    commands_help(c);
    return 0;
}

int commands_run(int argc, char **argv) {
    const char *first = argc > 1 ? argv[1] : "";
    if (!strcmp(first, "--version")) return commands_version(argc - 1);
    if (!strcmp(first, "help")) return commands_help_command(argc - 1, argv + 1);
    const Command *c = &commands[0];
    if (*first && *first != '-' && !(c = commands_find(first))) commands_unknown(first);
    int shift = c->name != NULL;  // a subcommand's argv starts at its name
    void *args = callocCheck(1, c->flags->size);
    char err[2048];  // comm_fail_all's own limit
    int parsed = cli_parse(c->flags, args, argc - shift, argv + shift, err, sizeof err), rc = 0;
    if (parsed == CLI_ERROR) comm_fail_all("%s", err);  // every rank parsed the same argv
    if (parsed == CLI_HELP) commands_help(c);
    else rc = c->main(args);
    cli_free(c->flags, args);
    free(args);
    return rc;
}
