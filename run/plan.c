// plan: fsdpc plan (see plan.h; docs/planning.md states every assumption below).
#include "plan.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ckpt/ckpt.h"
#include "../comm/comm.h"
#include "../data/text/tokenizer.h"
#include "../kernels/kernels.h"
#include "../base/cli.h"
#include "../model/config.h"
#include "../model/model.h"
#include "flags.h"
#include "recipes.h"
#include "../shard/parallel.h"
#include "../shard/shard.h"
#include "train.h"

typedef enum { GPU_H100, GPU_H100_PCIE, GPU_H200, GPU_A100, GPU_A100_40G } PlanGpu;

// Compute efficiency of a bf16 GPU plan, fitted by run/plan_fit.py to the published PyTorch FSDP
// runs in test/fixtures/plan_calibration.tsv (docs/planning.md). A GPU reaches
//   E x D / (D + D0) x m / (m + M0)
// of its bf16 peak: E per GPU architecture (FIT_E_A100, FIT_E_H100); D the model width, with
// D0 = FIT_K x peak / HBM bandwidth, since the elementwise work streams activations through HBM
// (it grows as D per token and layer, the matmuls as D^2); m the micro-batch's tokens, M0 a fixed
// cost per micro-batch. A recomputed block's forward costs FIT_RHO of its FLOPs at that rate.
static const double FIT_E_A100 = 0.759, FIT_E_H100 = 0.579, FIT_K = 3.23, FIT_M0 = 1178, FIT_RHO = 0.671;

// The GPUs a plan may name. Memory: the total cudaMemGetInfo reports on the SXM parts. Peaks:
// dense bf16 tensor cores (kern_peak_flops's figures) and plain FP32, since --precision float32
// computes with COMPUTE_32F, not TF32. NVLink: per direction (the PCIe part without a bridge: PCIe
// Gen5 x16). HBM: what AdamW streams through. fit_e: the fit's E of the GPU's architecture (the
// H100 PCIe and the H200 share the H100 SXM's, which the fit saw).
static const struct {
    const char *name;
    double mem_gib, bf16_tflops, fp32_tflops, nvlink_gbs, hbm_gbs, fit_e;
} gpus[] = {
    [GPU_H100] = {"H100 SXM 80GB", 79.6, 989, 67, 450, 3350, FIT_E_H100},
    [GPU_H100_PCIE] = {"H100 PCIe 80GB", 79.6, 756, 51, 64, 2000, FIT_E_H100},
    [GPU_H200] = {"H200 SXM 141GB", 140.4, 989, 67, 450, 4800, FIT_E_H100},
    [GPU_A100] = {"A100 SXM 80GB", 79.3, 312, 19.5, 300, 2039, FIT_E_A100},
    [GPU_A100_40G] = {"A100 SXM 40GB", 39.6, 312, 19.5, 300, 1555, FIT_E_A100},
};
static const CliChoice gpu_names[] = {{"h100", GPU_H100}, {"h100-pcie", GPU_H100_PCIE}, {"h200", GPU_H200},
                                     {"a100-80g", GPU_A100}, {"a100", GPU_A100}, {"a100-40g", GPU_A100_40G}, {NULL, 0}};

// --interconnect: a node's fabric to the other nodes, per direction (NVLink inside a node comes
// with --gpu). EFA: 4 x 100 Gb/s on p4d, 32 x 100 Gb/s on p5; InfiniBand: 8 x 200 Gb/s HDR (DGX
// A100), 8 x 400 Gb/s NDR (DGX H100).
typedef enum { NET_DEFAULT, NET_EFA_P4D, NET_EFA_P5, NET_IB_HDR, NET_IB_NDR, NET_ETH_100G } PlanNet;
static const double net_gbs[] = {[NET_EFA_P4D] = 50, [NET_EFA_P5] = 400, [NET_IB_HDR] = 200, [NET_IB_NDR] = 400,
                                 [NET_ETH_100G] = 12.5};
static const CliChoice net_names[] = {{"efa-p4d", NET_EFA_P4D}, {"efa", NET_EFA_P4D}, {"efa-p5", NET_EFA_P5},
                                      {"ib-hdr", NET_IB_HDR}, {"ib-ndr", NET_IB_NDR}, {"ethernet-100g", NET_ETH_100G},
                                      {NULL, 0}};

// what the roofline assumes unless told (docs/planning.md)
enum { GPU_RANKS_PER_NODE = 8 };
static const double GIB = 1024.0 * 1024.0 * 1024.0, GB = 1e9;
static const double RESERVE_GIB = 1.0;      // CUDA context, NCCL and cuBLASLt workspaces: outside the estimate
static const PlanNet GPU_NET = NET_EFA_P4D, CPU_NET = NET_ETH_100G;
static const double CPU_INTRA_GBS = 10.0;  // MPI over shared memory
static const double HOST_ADAMW_GBS = 20.0;  // one rank's AdamW on CPU threads (--cpu_offload, or a CPU run)
static const double ADAMW_BYTES = 28.0;     // per element: reads p, g, m, v; writes p, m, v (fp32)
static const double ADAMW_BF16_BYTES = 2.0; // --precision bf16 on the device: also writes the gathers' bf16 copy
static const double UNFITTED_EFFICIENCY = 0.5;  // float32 and CPU plans: no published runs to fit

typedef struct {
    int world_size, ranks_per_node, gpu, net, json;
    double gpu_memory, gpu_tflops, intra_bw, inter_bw, efficiency, host_memory;
} PlanArgs;

static int positive_int(const void *v) { return *(const int *)v > 0; }
static int positive(const void *v) { return *(const double *)v > 0; }
static int fraction(const void *v) { return *(const double *)v > 0 && *(const double *)v <= 1; }

// what plan parses: its own flags, and the training run's (names, aliases, presets, errors)
typedef struct {
    PlanArgs a;
    Config cfg;
} PlanCommand;

#define AT(field) .off = offsetof(PlanArgs, field)
#define NUM(n, field, what, ok, h, u) {.name = n, .kind = CLI_DOUBLE, AT(field), .text = what, .valid = ok, .help = h, .unset = u}
static const CliFlag plan_flags[] = {
    {.name = "world_size", .kind = CLI_INT, AT(world_size), .text = "a positive integer", .valid = positive_int,
     .help = "ranks of the run", .unset = "--ranks_per_node, else 8 GPUs or 1 CPU rank"},
    {.name = "ranks_per_node", .kind = CLI_INT, AT(ranks_per_node), .text = "a positive integer", .valid = positive_int,
     .help = "ranks on each node", .unset = "8 GPUs, or --world_size on the CPU"},
    {.name = "gpu", .kind = CLI_ENUM, AT(gpu), .choices = gpu_names, .help = "the GPU's memory, peak and links"},
    NUM("gpu_memory", gpu_memory, "GiB, a positive number", positive, "GiB of one GPU", "--gpu's"),
    NUM("gpu_tflops", gpu_tflops, "TFLOP/s, a positive number", positive, "peak TFLOP/s", "--gpu's"),
    NUM("intra_node_bw", intra_bw, "GB/s, a positive number", positive, "GB/s between a node's ranks, per direction", "--gpu's NVLink, or MPI's shared memory"),
    NUM("inter_node_bw", inter_bw, "GB/s, a positive number", positive, "GB/s from a node to the others, per direction", "--interconnect's"),
    {.name = "interconnect", .kind = CLI_ENUM, AT(net), .choices = net_names,
     .help = "the fabric between nodes", .unset = "efa-p4d for GPUs, ethernet-100g for CPUs"},
    NUM("compute_efficiency", efficiency, "a fraction in (0, 1]", fraction, "fraction of the peak compute reaches", "the fit's; 0.5 for float32 and CPU plans"),
    NUM("host_memory", host_memory, "GiB, a positive number", positive, "GiB of a CPU node", "this machine's available memory"),
    {.name = "json", .kind = CLI_BOOL, AT(json), .help = "one JSON object instead of the tables"},
};

static void plan_defaults(void *dst) { ((PlanArgs *)dst)->gpu = GPU_H100; }

const CliTable plan_cli = {.flags = plan_flags, .n = sizeof plan_flags / sizeof plan_flags[0], .command = "plan",
                           .bare_hint = "plan takes flags only", .size = sizeof(PlanCommand), .defaults = plan_defaults,
                           .base = &flags_cli, .base_off = offsetof(PlanCommand, cfg)};

// A ring collective over a group of n ranks: all-gather and reduce-scatter send (n-1)/n of the
// payload from each rank, an all-reduce twice that.
typedef struct {
    const char *name;
    int n;
    double payload, sent, bw, time;
} Coll;

static Coll ring(const char *name, int n, double payload, double bw, int allreduce) {
    Coll c = {.name = name, .n = n, .payload = payload, .bw = bw};
    c.sent = n > 1 ? (allreduce ? 2.0 : 1.0) * (n - 1) / n * payload : 0.0;
    c.time = c.sent / bw;
    return c;
}

// Bandwidth of a group holding `per_node` ranks on each node it spans: the intra-node links when
// it fits in one node, else its share of the node's inter-node bandwidth, which the groups of
// the node's other ranks use at the same time.
static double group_bw(int fits, int per_node, int rpn, double intra, double inter) {
    return fits ? intra : inter * per_node / rpn;
}

// a row of the memory table, in GiB, or MiB for a model that small (unit)
// a row of the memory table: its bytes, and per parameter of the rank's shard (shard_params)
static void mem_row(const char *what, double bytes, double unit, double shard_params, const char *note) {
    printf("  %-12s %9.2f %s %7.2f B/param%s%s\n", what, bytes / unit, unit == GIB ? "GiB" : "MiB", bytes / shard_params,
           note[0] ? "  " : "", note);
}

int plan_main(void *args) {
    comm_stop_phase("plan");  // writes only stdout: a stop ends it at once
    PlanCommand *pc = args;
    const PlanArgs a = pc->a;
    Config *cfg = &pc->cfg;
    flags_finish(cfg);
    // a resume folder that holds no checkpoint starts the run fresh (the recipes' launch lines name one)
    char found[1024], err[CKPT_ERR_LEN];
    int resumed = !cfg->init_from[0] && cfg->resume_from_checkpoint[0] ?
                      ckpt_resolve(cfg->resume_from_checkpoint, NULL, NULL, found, sizeof found, err, sizeof err) : 0;
    if (resumed < 0) comm_fail_all("%s", err);
    if (cfg->init_from[0] || resumed)
        comm_fail_all("plan: the model's sizes come from --model_name and the size flags; --init_from and "
                      "--resume_from_checkpoint are not read");
    flags_no_source(cfg);  // no source to wait for: settle the family and its sizes as training would
    // the vocabulary follows the tokenizer unless something fixed it, as in training
    // the tokenizer is read only where the vocabulary follows it (training checks the rest)
    int named = flags_given("tokenizer") || strcmp(cfg->tokenizer, "byte");
    if (cfg->size_origin[SIZE_V] == SIZE_DEFAULT || (cfg->size_origin[SIZE_V] == SIZE_FAMILY && named)) {
        char err[1400];
        Tokenizer *t = tok_open(cfg->tokenizer, err, sizeof err);
        if (!t) comm_fail_all("%s", err);
        const char *why = flags_take_tokenizer_vocab(cfg, tok_vocab_size(t), named, cfg->tokenizer, NULL);
        tok_free(t);
        if (why) comm_fail_all("plan: %s", why);
    }
    int gpu = cfg->device != KERN_DEVICE_CPU;
    int world = a.world_size, rpn = a.ranks_per_node;
    if (!world) world = rpn ? rpn : gpu ? GPU_RANKS_PER_NODE : 1;
    if (!rpn) rpn = gpu ? GPU_RANKS_PER_NODE : world;
    if (rpn > world) rpn = world;
    if (world % rpn)
        comm_fail_all("plan: --world_size %d is not a whole number of nodes of --ranks_per_node %d", world, rpn);
    int nodes = world / rpn;
    const char *sizes = flags_check_world(cfg, world);
    if (sizes) comm_fail_all("plan: %s", sizes);
    ParallelDims dims;
    const char *why = parallel_dims_build(&dims, cfg, world, rpn);
    if (why) comm_fail_all("plan: %s", why);
    if (gpu && (why = kern_size_as_gpu())) comm_fail_all("plan: %s", why);
    kern_set_compute_bf16(cfg->precision == PRECISION_BF16);  // activation sizes follow (kern_act_bytes)
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    // a CPU run's attention scratch is per thread: the threads each of the node's ranks would get
    comm_check_all(kern_init(cfg->num_threads ? cfg->num_threads : cores / rpn > 1 ? (int)(cores / rpn) : 1));
    cfg->num_threads = kern_num_threads();

    ModelPlan plan;
    char big[1024];
    if (model_plan_build(&plan, &cfg->model, big, sizeof big)) comm_fail_all("%s", big);
    int tp = dims.tp;
    if (tp > 1) model_plan_tp(&plan, tp, 0, NULL, dims.sequence_parallel);  // a tp rank's parts: every tp rank's are the same size
    if ((sizes = model_check_sizes(&plan, cfg->batch_size, cfg->model.max_context_width))) comm_fail_all("plan: %s", sizes);
    const ModelConfig *m = &cfg->model;
    int B = cfg->batch_size, T = m->max_context_width, M = cfg->grad_accum, L = m->num_layers;

    // ---- memory: the start-up check's estimate, the GPU's share or the host's ----
    ShardMemEstimate e, host;
    double acts, host_acts, acts_offloaded, unused;
    double peak = train_memory_estimate(&plan, cfg, &dims, gpu, &e, &acts, &acts_offloaded);
    train_memory_estimate(&plan, cfg, &dims, 0, &host, &host_acts, &unused);
    double master = host.optimizer / 2;  // each AdamW moment is the master shard's size
    double start_host = host.params - master;  // the start's staging beside the shards: one unit's shard
    double capacity;  // what one rank may use
    char capacity_what[160];
    const char *mem_source = "--host_memory";
    if (gpu) {
        double gib = a.gpu_memory > 0 ? a.gpu_memory : gpus[a.gpu].mem_gib;
        capacity = (gib - RESERVE_GIB) * GIB;
        snprintf(capacity_what, sizeof capacity_what, "%.1f GiB of the GPU's %.1f GiB (%.0f GiB kept for CUDA, NCCL, cuBLASLt)",
                 capacity / GIB, gib, RESERVE_GIB);
    } else {
        double node = a.host_memory > 0 ? a.host_memory * GIB : comm_mem_available(&mem_source);
        capacity = node / rpn;
        snprintf(capacity_what, sizeof capacity_what, "%.2f GiB, 1/%d of the node's %.2f GiB (%s)", capacity / GIB, rpn,
                 node / GIB, mem_source);
    }
    int fits = capacity <= 0 || peak <= capacity;

    // ---- communication per step ----
    int g = dims.shard_size, r = dims.replica_size, reshard = dims.reshard_after_forward;
    double pb = cfg->precision == PRECISION_BF16 ? 2 : 4, gb = cfg->reduce_dtype == PRECISION_BF16 ? 2 : 4;
    double all = 0, blocks = 0, embed = 0, block_params = 0;
    for (int u = 0; u < plan.nunits; u++) {
        double padded = (double)((plan.units[u].numel + g - 1) / g * g);  // shard's padding to the group
        all += padded;
        if (u >= plan.block0 && u < plan.block0 + L) blocks += padded, block_params += (double)plan.units[u].numel;
        if (u == plan.embed_unit) embed = padded;
    }
    double intra = a.intra_bw > 0 ? a.intra_bw : gpu ? gpus[a.gpu].nvlink_gbs : CPU_INTRA_GBS;
    if (a.net != NET_DEFAULT && a.inter_bw > 0)
        comm_fail_all("plan: --interconnect %s and --inter_node_bw %g both set the bandwidth between nodes; give one",
                      cli_choice_name(net_names, a.net), a.inter_bw);
    double inter = a.inter_bw > 0 ? a.inter_bw : net_gbs[a.net != NET_DEFAULT ? a.net : (int)(gpu ? GPU_NET : CPU_NET)];
    // a shard group is every tp-th rank of g * tp consecutive ones (consecutive at tp 1); replica
    // groups take one rank of each replica's block
    int tpd = dims.tp, block = g * tpd, shard_fits = block <= rpn && rpn % block == 0;
    double shard_bw = group_bw(shard_fits, block < rpn ? g : rpn / tpd, rpn, intra, inter) * GB;
    double replica_bw = group_bw(world <= rpn, block < rpn && rpn % block == 0 ? rpn / block : 1, rpn, intra, inter) * GB;
    // gathers per micro-batch: every unit in forward (a tied embedding/head unit twice when freed
    // in between), and under full-shard every block again in backward
    double fwd = all + (reshard && plan.embed_unit == plan.head_unit ? embed : 0), bwd = reshard ? blocks : 0;
    // sharded accumulation reduces every micro-batch; --accumulate_unsharded and shard group 1 once a step
    int reductions = g > 1 && !cfg->accumulate_unsharded ? M : 1;
    Coll c[8];
    int nc = 0;
    if (g > 1) {
        c[nc++] = ring("all-gather forward", g, M * fwd * pb, shard_bw, 0);
        if (bwd > 0) c[nc++] = ring("all-gather backward", g, M * bwd * pb, shard_bw, 0);
        c[nc++] = ring("reduce-scatter", g, reductions * all * gb, shard_bw, 0);
    }
    if (r > 1) c[nc++] = ring("all-reduce replicas", r, reductions * all / g * gb, replica_bw, 1);
    // tensor parallelism, per micro-batch: forward sums the embedding and each block's two
    // row-parallel outputs (fp32, the residual stream's), again for each recomputed block; backward
    // the head's and each block's two input gradients (the activation dtype); a tp group is inside
    // a node. These wait on the compute stream: none overlaps. Sequence parallelism turns each sum
    // into a reduce-scatter and gathers what the column-parallel matmuls read: in forward the
    // norm outputs (each block's two and the head's), in backward the branch gradients and the
    // embedding's (fp32) and the two norm outputs again, which it keeps only as the rank's rows.
    // (The norms' and biases' gradients summed over the group once a step are left out: D each.)
    int every_tp = !cfg->activation_checkpoints ? 0 : cfg->selective_checkpointing > 0 ? cfg->selective_checkpointing : 1;
    int recomputed_tp = every_tp > 0 ? (L + every_tp - 1) / every_tp : 0;
    double act_bytes = (double)B * T * m->hidden_width, tp_exposed = 0;
    if (tp > 1) {
        double fwd_n = 1.0 + 2.0 * (L + recomputed_tp), bwd_n = 1.0 + 2.0 * L, ab = gpu && cfg->precision == PRECISION_BF16 ? 2 : 4;
        if (dims.sequence_parallel) {
            c[nc++] = ring("tp reduce-scatter fwd", tp, M * fwd_n * act_bytes * 4, intra * GB, 0);
            c[nc++] = ring("tp all-gather fwd", tp, M * fwd_n * act_bytes * ab, intra * GB, 0);
            c[nc++] = ring("tp reduce-scatter bwd", tp, M * bwd_n * act_bytes * ab, intra * GB, 0);
            c[nc++] = ring("tp all-gather bwd", tp, M * (bwd_n * 4 + 2.0 * L * ab) * act_bytes, intra * GB, 0);
            for (int i = nc - 4; i < nc; i++) tp_exposed += c[i].time;
        } else {
            c[nc++] = ring("tp all-reduce forward", tp, M * fwd_n * act_bytes * 4, intra * GB, 1);
            tp_exposed += c[nc - 1].time;
            c[nc++] = ring("tp all-reduce backward", tp, M * bwd_n * act_bytes * ab, intra * GB, 1);
            tp_exposed += c[nc - 1].time;
        }
    }
    double comm_bytes = 0, comm_time = 0;
    for (int i = 0; i < nc; i++) comm_bytes += c[i].sent, comm_time += c[i].time;
    // never hidden: each micro-batch's first gather (nothing computes before it) and the last
    // unit's reduction (nothing computes after it); the rest overlaps compute on its own stream
    double edge = g > 1 ? M * ring("", g, embed * pb, shard_bw, 0).time + ring("", g, embed * gb, shard_bw, 0).time : 0;
    if (r > 1) edge += ring("", r, embed / g * gb, replica_bw, 1).time;
    edge += tp_exposed;

    // ---- step time: a roofline ----
    double fpt = model_flops_per_token(&plan, T), tokens = (double)B * T * M;
    int every = train_ckpt_every(cfg, gpu), horizon = train_offload_horizon(cfg, gpu);
    int recomputed = every > 0 ? (L + every - 1) / every : 0;  // blocks 0, every, 2*every, ... (model.h)
    // a recomputed block runs its forward again: a third of its training FLOPs
    double block_fpt = fpt - 6.0 * ((double)plan.num_params - block_params);
    double recompute_fpt = L > 0 ? (double)recomputed / L * block_fpt / 3.0 : 0.0;
    double peak_flops = a.gpu_tflops > 0 ? a.gpu_tflops * 1e12
                        : gpu ? (cfg->precision == PRECISION_BF16 ? gpus[a.gpu].bf16_tflops : gpus[a.gpu].fp32_tflops) * 1e12
                              : 0.0;  // a CPU's peak is for --gpu_tflops to say
    // the fit covers bf16 on a GPU; elsewhere recomputation costs its FLOPs at a flat efficiency
    int fitted = gpu && cfg->precision == PRECISION_BF16;
    double micro = (double)B * T, width_half = FIT_K * peak_flops / (gpus[a.gpu].hbm_gbs * GB);
    double width_factor = m->hidden_width / (m->hidden_width + width_half), micro_factor = micro / (micro + FIT_M0);
    double efficiency = a.efficiency > 0 ? a.efficiency
                        : fitted ? gpus[a.gpu].fit_e * width_factor * micro_factor
                                 : UNFITTED_EFFICIENCY;
    const char *efficiency_source = a.efficiency > 0 ? "--compute_efficiency" : fitted ? "fit" : "unfitted";
    double rho = fitted ? FIT_RHO : 1.0;
    double adam_bw = (gpu && !cfg->cpu_offload ? gpus[a.gpu].hbm_gbs : HOST_ADAMW_GBS) * GB;
    double adam_bytes = ADAMW_BYTES + (gpu && !cfg->cpu_offload && cfg->precision == PRECISION_BF16 ? ADAMW_BF16_BYTES : 0.0);
    double optim = master / 4 * adam_bytes / adam_bw;
    // a tp rank does 1/tp of its tp group's matmuls on the group's tokens
    double compute = peak_flops > 0 ? tokens * (fpt + rho * recompute_fpt) / tp / (peak_flops * efficiency) : 0;
    double exposed = edge + (comm_time - edge > compute ? comm_time - edge - compute : 0);
    double step = compute + exposed + optim, mfu = step > 0 ? tokens * fpt / tp / (step * peak_flops) : 0;
    double tokens_s = step > 0 ? tokens * dims.dp / step : 0;  // a tp group's ranks share their tokens
    int timed = peak_flops > 0;

    if (comm_info.rank != 0) return 0;
    char device[160];
    if (gpu) snprintf(device, sizeof device, "%s", gpus[a.gpu].name);
    else snprintf(device, sizeof device, "cpu");
    if (a.json) {
        printf("{\"model\": {\"model_type\": \"%s\", \"model_name\": \"%s\", \"num_params\": %zu, \"hidden_width\": %d, "
               "\"num_layers\": %d, \"num_heads\": %d, \"num_key_value_heads\": %d, \"intermediate_size\": %d, "
               "\"max_context_width\": %d, \"vocab_size\": %d}, ",
               m->model_type, m->model_name, plan.num_params, m->hidden_width, L, m->num_heads, m->num_key_value_heads,
               m->intermediate_size, T, m->vocab_size);
        printf("\"recipe\": \"%s\", \"lr\": %g, \"max_steps\": %d, \"train_data\": \"%s\", ",
               cli_choice_name(recipe_choices, recipe_chosen()), (double)cfg->lr, cfg->max_steps, cfg->train_data);
        printf("\"device\": \"%s\", \"world_size\": %d, \"ranks_per_node\": %d, \"nodes\": %d, \"sharding\": \"%s\", "
               "\"shard_group\": %d, \"replica_group\": %d, \"tp\": %d, \"precision\": \"%s\", \"reduce_dtype\": \"%s\", "
               "\"batch_size\": %d, \"grad_accum\": %d, \"checkpoint_every\": %d, \"cpu_offload\": %s, "
               "\"offload_horizon\": %d, \"offloaded_activations_bytes\": %.0f, ",
               device, world, rpn, nodes, config_sharding_name(dims.strategy), g, r, tp, config_precision_name(cfg->precision),
               config_precision_name(cfg->reduce_dtype), B, M, every, cfg->cpu_offload ? "true" : "false", horizon,
               acts_offloaded);
        printf("\"per_rank_bytes\": {\"params\": %.0f, \"master\": %.0f, \"gathered\": %.0f, \"grads\": %.0f, "
               "\"optimizer\": %.0f, \"activations\": %.0f, \"buffers\": %.0f, \"peak\": %.0f}, \"capacity_bytes\": %.0f, "
               "\"fits\": %s, \"host_start_bytes_per_node\": %.0f, ",
               e.params, master, e.gathered, e.grads, e.optimizer, acts, e.buffers, peak, capacity, fits ? "true" : "false",
               gpu ? start_host * rpn : 0.0);
        printf("\"collectives\": [");
        for (int i = 0; i < nc; i++)
            printf("%s{\"name\": \"%s\", \"group_size\": %d, \"payload_bytes\": %.0f, \"sent_bytes\": %.0f, "
                   "\"bandwidth_bytes_s\": %.6g, \"time_s\": %.6g}",
                   i ? ", " : "", c[i].name, c[i].n, c[i].payload, c[i].sent, c[i].bw, c[i].time);
        printf("], \"comm_bytes_per_step\": %.0f, \"comm_time_s\": %.6g, \"exposed_comm_s\": %.6g, ", comm_bytes, comm_time,
               exposed);
        printf("\"flops_per_token\": %.6g, \"recompute_flops_per_token\": %.6g, \"recompute_cost\": %g, "
               "\"tokens_per_step_per_rank\": %.0f, \"peak_flops\": %.6g, \"hbm_bytes_s\": %.6g, \"compute_efficiency\": %.6g, "
               "\"efficiency_source\": \"%s\", \"unhidden_comm_s\": %.6g, ",
               fpt, recompute_fpt, rho, tokens, peak_flops, gpu ? gpus[a.gpu].hbm_gbs * GB : 0.0, efficiency, efficiency_source,
               edge);
        if (timed)
            printf("\"compute_time_s\": %.6g, \"optimizer_time_s\": %.6g, \"step_time_s\": %.6g, \"tokens_per_s\": %.6g, "
                   "\"mfu\": %.4f}\n",
                   compute, optim, step, tokens_s, mfu);
        else
            printf("\"compute_time_s\": null, \"optimizer_time_s\": %.6g, \"step_time_s\": null, \"tokens_per_s\": null, "
                   "\"mfu\": null}\n",
                   optim);
        return 0;
    }

    char origins[400];
    flags_size_origins(cfg, origins, sizeof origins);
    printf("fsdpc plan: %s%s%s, %.3g%s parameters (D=%d L=%d H=%d KV=%d F=%d V=%d), context %d; %s\n", m->model_type,
           m->model_name[0] ? " " : "", m->model_name, plan.num_params / (plan.num_params >= 1e9 ? 1e9 : 1e6),
           plan.num_params >= 1e9 ? "B" : "M", m->hidden_width, L, m->num_heads, m->num_key_value_heads, m->intermediate_size,
           m->vocab_size, T, origins);
    if (cfg->recipe_line[0]) printf("%s\n", cfg->recipe_line);
    if (cfg->recipe_note[0]) printf("%s\n", cfg->recipe_note);
    char tps[48] = "";
    if (tp > 1) snprintf(tps, sizeof tps, " x tp %d%s", tp, dims.sequence_parallel ? " (sequence parallel)" : "");
    printf("layout: %d rank(s), %d node(s) of %d on %s; %s: shard group %d x replica group %d%s; %s, reduce %s\n", world,
           nodes, rpn, device, config_sharding_name(dims.strategy), g, r, tps, config_precision_name(cfg->precision),
           config_precision_name(cfg->reduce_dtype));
    printf("batch: %d x %d tokens x grad_accum %d = %.0f tokens per rank per step, %.0f per step%s\n", B, T, M, tokens,
           tokens * dims.dp, tp > 1 ? " (a tp group's ranks read the same tokens)" : "");
    char ck[96] = "every block stored";
    if (every) snprintf(ck, sizeof ck, "%d of %d blocks recomputed in backward%s", recomputed, L,
                        acts_offloaded > 0 ? ", their inputs offloaded" : "");
    printf("\nmemory per rank (%s, as the start-up check counts it; B/param: per parameter of the rank's shard)\n",
           gpu ? "on the GPU" : "host");
    double shard_params = master / sizeof(float);
    char note[160];
    double unit = peak >= GIB ? GIB : GIB / 1024;
    snprintf(note, sizeof note, "fp32 master shard %.2f %s, plus one unit's shard while the start initialises it", master / unit,
             unit == GIB ? "GiB" : "MiB");
    mem_row("parameters", e.params, unit, shard_params, note);
    mem_row("gathered", e.gathered, unit, shard_params, "full parameters of gathered units");
    mem_row("gradients", e.grads, unit, shard_params,
            M == 1 ? "" : g == 1 ? "micro-batches add into the shard (shard group 1)"
            : cfg->accumulate_unsharded ? "the whole model's, held over the micro-batches (--accumulate_unsharded)"
                                       : "each micro-batch reduce-scattered into the shard");
    mem_row("optimizer", e.optimizer, unit, shard_params, gpu && cfg->cpu_offload ? "in host memory (--cpu_offload)" : "AdamW moments");
    mem_row("activations", acts, unit, shard_params, ck);
    mem_row("buffers", e.buffers, unit, shard_params, "communication: bf16 staging of gathers and reductions");
    mem_row("peak", peak, unit, shard_params, "");
    if (acts_offloaded > 0) {
        snprintf(note, sizeof note, "activations in pinned host memory, not in the peak (--offload_activations, horizon %d)",
                 horizon);
        mem_row("offloaded", acts_offloaded, unit, shard_params, note);
    }
    if (capacity > 0) printf("  %s: %s\n", fits ? "fits" : "DOES NOT FIT", capacity_what);
    // per parameter of the rank's shard: what lives all run long; bf16 copies exist only while a
    // unit is gathered or reduced (shard group 1 on a GPU aside, whose units are always gathered)
    double moments = host.optimizer / shard_params;
    printf("  sharded state: %.0f bytes per parameter of the rank's shard (fp32 master %.0f, fp32 gradient %.0f, AdamW moments %.0f%s)\n",
           2 * master / shard_params + moments, master / shard_params, master / shard_params, moments,
           gpu && cfg->cpu_offload ? " in host memory" : "");

    printf("\ncommunication per step and rank (ring: (n-1)/n x payload / bandwidth, all-reduce twice that)\n");
    printf("  %-22s %5s %12s %12s %11s %10s\n", "collective", "ranks", "payload GB", "sent GB", "GB/s", "ms");
    for (int i = 0; i < nc; i++)
        printf("  %-22s %5d %12.3f %12.3f %11.1f %10.2f\n", c[i].name, c[i].n, c[i].payload / GB, c[i].sent / GB, c[i].bw / GB,
               c[i].time * 1e3);
    if (!nc) printf("  none (one rank holds everything)\n");
    printf("  %-22s %5s %12s %12.3f %11s %10.2f\n", "total", "", "", comm_bytes / GB, "", comm_time * 1e3);

    printf("\nstep time (roofline)\n");
    if (!timed) {
        printf("  a CPU's peak is not known: pass --gpu_tflops (its peak, TFLOP/s) for a step time; optimizer %.2f ms\n",
               optim * 1e3);
        return 0;
    }
    char rc[64] = "";
    if (recompute_fpt > 0) snprintf(rc, sizeof rc, " (+ recomputation at %.2f of its FLOPs)", rho);
    printf("  compute     %9.2f ms  %.0f tokens x %.3g FLOP/token%s / (%.0f TFLOP/s x %.3f efficiency)\n", compute * 1e3,
           tokens, fpt, rc, peak_flops / 1e12, efficiency);
    if (a.efficiency > 0)
        printf("              efficiency from --compute_efficiency\n");
    else if (fitted)
        printf("              efficiency fitted to published runs: %.3f x width %d/(%d + %.0f) x micro-batch %.0f/(%.0f + %.0f) "
               "tokens\n",
               gpus[a.gpu].fit_e, m->hidden_width, m->hidden_width, width_half, micro, micro, FIT_M0);
    else
        printf("              efficiency %g, not fitted (float32 or a CPU)\n", UNFITTED_EFFICIENCY);
    printf("  exposed comm %8.2f ms  each micro-batch's first gather and the last reduction; the rest overlaps compute\n",
           exposed * 1e3);
    printf("  optimizer   %9.2f ms  AdamW over the shard at %.0f GB/s\n", optim * 1e3, adam_bw / GB);
    printf("  step        %9.3f s   %.0f tokens/s, MFU %.1f%% (model FLOPs / (step time x %.0f TFLOP/s))\n", step,
           tokens_s, 100 * mfu, peak_flops / 1e12);
    return 0;
}
