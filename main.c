// fsdpc: FSDP-style training of Llama-2 and minGPT models in one MPI binary.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/hf.h"
#include "comm/comm.h"
#include "comm/io.h"
#include "data/shardfile.h"
#include "data/tokenizer.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "run/plan.h"
#include "run/train.h"

// Collective, last: stdout carries generated text, tokenize's ids and plan's tables, so a write
// that failed there (a full disk, /dev/full) ends every rank with an error, never exit 0.
static int finish(int rc) {
    comm_check_all(io_write_error(stdout, "standard output"));
    comm_finalize();
    return rc;
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    if (argc > 1 && !strcmp(argv[1], "prepare")) return finish(data_prepare(argc - 1, argv + 1));
    if (argc > 1 && !strcmp(argv[1], "tokenize")) return finish(data_tokenize_main(argc - 1, argv + 1));
    if (argc > 1 && !strcmp(argv[1], "export")) return finish(hf_export_main(argc - 1, argv + 1));
    if (argc > 1 && !strcmp(argv[1], "plan")) {
        comm_stop_phase("plan");  // writes only stdout: a stop ends it at once
        return finish(plan_main(argc - 1, argv + 1));
    }
    static Config cfg;  // large (paths, prompt): keep it off the stack
    config_parse(&cfg, argc, argv);
    comm_check_same(config_hash(&cfg), "flags");
    log_timestamps(cfg.log_timestamps);
    comm_set_collective_timeout(cfg.collective_timeout);
    log_msg("fsdpc: MPI transport %s\n", comm_transport());
    if (cfg.environment == ENV_PBS) comm_check_pbs();
    const char *source = "--num_threads";
    int threads = cfg.num_threads ? cfg.num_threads : comm_default_threads(&source);
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
    cfg.num_threads = kern_num_threads();
    comm_check_all(kern_select_device(cfg.device, comm_info.local_rank, comm_info.local_world));
    comm_check_distinct_local(kern_device_uuid(), "GPU",
                              "give each rank its own (CUDA_VISIBLE_DEVICES per rank, or srun --gpus-per-task=1 "
                              "--gpu-bind=single:1), or pass --device cpu");
    kern_set_compute_bf16(cfg.precision == PRECISION_BF16);
    return finish(train_run(&cfg));
}
