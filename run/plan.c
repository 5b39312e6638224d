// plan: fsdpc plan (see plan.h; docs/planning.md states every assumption below).
#include "plan.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ckpt/ckpt.h"
#include "../comm/comm.h"
#include "../model/lora.h"
#include "../model/moe.h"
#include "../data/text/tokenizer.h"
#include "../kernels/kernels.h"
#include "../base/cli.h"
#include "../model/model.h"
#include "recipes.h"
#include "../shard/parallel.h"
#include "../shard/shard.h"
#include "flags.h"
#include "memory.h"
#include "config.h"

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

// a row of the memory table: its bytes, in GiB, or MiB for a model that small (unit), and per
// parameter of the rank's shard (shard_params)
// What the staging row holds, and whether the peak counts it.
static const char *staging_note(const Config *c, int gpu) {
    static char note[200];
    snprintf(note, sizeof note, "%s: %s, %s", memory_staging_flags(c),
             c->ckpt.keep_snapshot ? "the last checkpoint step's state, kept for a rollback" : "the checkpoint's copy for its background write",
             gpu ? "in pinned host memory, not in the peak" : "in the peak");
    return note;
}

static void mem_row(const char *what, double bytes, double unit, double shard_params, const char *note) {
    printf("  %-12s %9.2f %s %7.2f B/param%s%s\n", what, bytes / unit, unit == GIB ? "GiB" : "MiB", bytes / shard_params,
           note[0] ? "  " : "", note);
}

// What a plan works out, section by section (plan_main).
typedef struct {
    PlanArgs a;
    Config *cfg;
    int gpu, world, rpn, nodes, tp;
    ParallelDims dims;
    ModelPlan plan;
    // memory: the estimate (e, acts, peak: the GPU's share or the host's; host: the host's), what
    // one rank may use (capacity, said in capacity_what) and whether the peak fits in it
    ShardMemEstimate e, host;
    double acts, acts_offloaded, peak, master, trained, start_host, capacity;
    char capacity_what[160];
    int fits;
    // communication: the collectives of a step, their sum, and the part nothing hides (edge)
    int shard, replicas;  // the shard and replica groups' sizes
    Coll coll[24];
    int nc;
    double block_params, comm_bytes, comm_time, edge;
    // the cp ring (context parallelism): its bandwidth, the bytes of one step's shift (k and v;
    // their gradients), each shift's and each block's attention time, its total and exposed time
    double ring_bw, ring_kv, ring_dkv, ring_time, ring_fwd_shift, ring_bwd_shift, ring_fwd_block, ring_bwd_block, ring_exposed;
    // step time
    double fpt, tokens, recompute_fpt, peak_flops, micro, width_half, efficiency, rho, adam_bw, optim, compute, exposed, step,
        mfu, tokens_s;
    const char *efficiency_source;
    int every, horizon, recomputed, fitted, timed;
} PlanFigures;

// The model and the layout the plan is for, settled as training would settle them.
static void plan_model(PlanFigures *f) {
    Config *cfg = f->cfg;
    const PlanArgs a = f->a;
    flags_finish(cfg);
    // a resume folder that holds no checkpoint starts the run fresh (the recipes' launch lines name one)
    char *found = NULL, err[CKPT_ERR_LEN];
    int resumed = !cfg->ckpt.init_from[0] && cfg->ckpt.resume_from_checkpoint[0] ?
                      ckpt_resolve(cfg->ckpt.resume_from_checkpoint, NULL, NULL, &found, err, sizeof err) : 0;
    free(found);
    if (resumed < 0) comm_fail_all("%s", err);
    if (cfg->ckpt.init_from[0] || resumed)
        comm_fail_all("plan: the model's sizes come from --model_name and the size flags; --init_from and "
                      "--resume_from_checkpoint are not read");
    flags_no_source(cfg);  // no source to wait for: settle the family and its sizes as training would
    // the vocabulary follows the tokenizer unless something fixed it, as in training
    // the tokenizer is read only where the vocabulary follows it (training checks the rest)
    int named = flags_given(cfg, "tokenizer") || strcmp(cfg->data.tokenizer, "byte");
    if (cfg->size_origin[SIZE_V] == SIZE_DEFAULT || (cfg->size_origin[SIZE_V] == SIZE_FAMILY && named)) {
        char err[1400];
        Tokenizer *t = tok_open(cfg->data.tokenizer, err, sizeof err);
        if (!t) comm_fail_all("%s", err);
        const char *why = flags_take_tokenizer_vocab(cfg, tok_vocab_size(t), named, cfg->data.tokenizer, NULL);
        tok_free(t);
        if (why) comm_fail_all("plan: %s", why);
    }
    f->gpu = cfg->run.device != KERN_DEVICE_CPU;
    f->world = a.world_size;
    f->rpn = a.ranks_per_node;
    if (!f->world) f->world = f->rpn ? f->rpn : f->gpu ? GPU_RANKS_PER_NODE : 1;
    if (!f->rpn) f->rpn = f->gpu ? GPU_RANKS_PER_NODE : f->world;
    if (f->rpn > f->world) f->rpn = f->world;
    if (f->world % f->rpn)
        comm_fail_all("plan: --world_size %d is not a whole number of nodes of --ranks_per_node %d", f->world, f->rpn);
    f->nodes = f->world / f->rpn;
    const char *sizes = flags_check_world(cfg, f->world);
    if (sizes) comm_fail_all("plan: %s", sizes);
    const char *why = parallel_dims_build(&f->dims, &cfg->shard, &cfg->model, f->world, f->rpn);
    if (why) comm_fail_all("plan: %s", why);
    if (f->gpu && (why = kern_size_as_gpu())) comm_fail_all("plan: %s", why);
    kern_set_compute_bf16(cfg->shard.precision == PRECISION_BF16);  // activation sizes follow (kern_act_bytes)
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    // a CPU run's attention scratch is per thread: the threads each of the node's ranks would get
    comm_check_all(kern_init(cfg->run.num_threads ? cfg->run.num_threads : cores / f->rpn > 1 ? (int)(cores / f->rpn) : 1));
    cfg->run.num_threads = kern_num_threads();
    char big[1024];
    cfg->model.base_bf16 = shard_base_bf16(&cfg->shard);
    if (model_plan_build(&f->plan, &cfg->model, big, sizeof big)) comm_fail_all("%s", big);
    f->tp = f->dims.tp;
    // a tp rank's parts: every tp rank's are the same size
    if (f->tp > 1) model_plan_tp(&f->plan, f->tp, 0, NULL, f->dims.sequence_parallel);
    if (f->dims.ep > 1) model_plan_ep(&f->plan, f->dims.ep, 0, NULL);  // every ep rank's experts are the same size
    f->plan.cp = f->dims.cp;  // a cp rank's activations: its 1/cp of each sequence, and the ring's buffers
    f->plan.cp_docs = cfg->data.document_masking;
    // the ring blocks' scratch where cuDNN would take them, assuming it loads and accepts the graphs
    kern_plan_attention(cfg->run.attention, cfg->shard.precision == PRECISION_BF16, config_head_dim(&cfg->model));
    if ((sizes = model_check_sizes(&f->plan, cfg->optim.batch_size, cfg->model.max_context_width))) comm_fail_all("plan: %s", sizes);
}

// ---- memory: the start-up check's estimate, the GPU's share or the host's ----
static void plan_memory(PlanFigures *f) {
    const Config *cfg = f->cfg;
    const PlanArgs a = f->a;
    double host_acts, unused;
    f->peak = memory_estimate(&f->plan, cfg, &f->dims, f->gpu, &f->e, &f->acts, &f->acts_offloaded);
    memory_estimate(&f->plan, cfg, &f->dims, 0, &f->host, &host_acts, &unused);
    f->master = f->host.master;
    f->trained = f->host.optimizer / 2;  // each AdamW moment is the size of the master shard that trains
    f->start_host = f->host.params - f->master;  // the start's staging beside the shards: one unit's shard
    const char *mem_source = "--host_memory";
    if (f->gpu) {
        double gib = a.gpu_memory > 0 ? a.gpu_memory : gpus[a.gpu].mem_gib;
        f->capacity = (gib - RESERVE_GIB) * GIB;
        snprintf(f->capacity_what, sizeof f->capacity_what, "%.1f GiB of the GPU's %.1f GiB (%.0f GiB kept for CUDA, NCCL, cuBLASLt)",
                 f->capacity / GIB, gib, RESERVE_GIB);
    } else {
        double node = a.host_memory > 0 ? a.host_memory * GIB : comm_mem_available(&mem_source);
        f->capacity = node / f->rpn;
        snprintf(f->capacity_what, sizeof f->capacity_what, "%.2f GiB, 1/%d of the node's %.2f GiB (%s)", f->capacity / GIB, f->rpn,
                 node / GIB, mem_source);
    }
    f->fits = f->capacity <= 0 || f->peak <= f->capacity;
}

// Tensor parallelism, per micro-batch: forward sums the embedding and each block's two
// row-parallel outputs (fp32, the residual stream's), again for each recomputed block; backward
// the head's and each block's two input gradients (the activation dtype); a tp group is inside
// a node. These wait on the compute stream: none overlaps. Sequence parallelism turns each sum
// into a reduce-scatter and gathers what the column-parallel matmuls read: in forward the
// norm outputs (each block's two and the head's), in backward the branch gradients and the
// embedding's (fp32) and the two norm outputs again, which it keeps only as the rank's rows.
// (The norms' and biases' gradients summed over the group once a step are left out: D each.)
// Adds them to f->coll; returns their time.
static double tp_collectives(PlanFigures *f, double intra) {
    const Config *cfg = f->cfg;
    const ModelConfig *m = &cfg->model;
    int B = cfg->optim.batch_size, T = m->max_context_width, M = cfg->optim.grad_accum, L = m->num_layers;
    int every_tp = !cfg->shard.activation_checkpoints ? 0 : cfg->shard.selective_checkpointing > 0 ? cfg->shard.selective_checkpointing : 1;
    int recomputed_tp = every_tp > 0 ? (L + every_tp - 1) / every_tp : 0;
    double act_bytes = (double)B * T / f->dims.cp * m->hidden_width, tp_exposed = 0;  // a cp rank's rows
    if (f->tp > 1) {
        double fwd_n = 1.0 + 2.0 * (L + recomputed_tp), bwd_n = 1.0 + 2.0 * L, ab = f->gpu && cfg->shard.precision == PRECISION_BF16 ? 2 : 4;
        if (f->dims.sequence_parallel) {
            f->coll[f->nc++] = ring("tp reduce-scatter fwd", f->tp, M * fwd_n * act_bytes * 4, intra * GB, 0);
            f->coll[f->nc++] = ring("tp all-gather fwd", f->tp, M * fwd_n * act_bytes * ab, intra * GB, 0);
            f->coll[f->nc++] = ring("tp reduce-scatter bwd", f->tp, M * bwd_n * act_bytes * ab, intra * GB, 0);
            f->coll[f->nc++] = ring("tp all-gather bwd", f->tp, M * (bwd_n * 4 + 2.0 * L * ab) * act_bytes, intra * GB, 0);
            for (int i = f->nc - 4; i < f->nc; i++) tp_exposed += f->coll[i].time;
        } else {
            f->coll[f->nc++] = ring("tp all-reduce forward", f->tp, M * fwd_n * act_bytes * 4, intra * GB, 1);
            tp_exposed += f->coll[f->nc - 1].time;
            f->coll[f->nc++] = ring("tp all-reduce backward", f->tp, M * bwd_n * act_bytes * ab, intra * GB, 1);
            tp_exposed += f->coll[f->nc - 1].time;
        }
    }
    return tp_exposed;
}

// ---- communication per step ----
// Expert parallelism: the experts' units (`experts` elements padded, this rank's) gather and
// reduce over their expert shard and replica groups, and every block's sparse MLP sends its rows
// to their experts' ranks and back, in forward, backward and any recompute: two all-to-alls each
// way over the ep group (ep x tp consecutive ranks), in the activation dtype out and fp32 back.
// With balanced routing (ep - 1)/ep of a rank's B x T x K rows leave it. The all-to-alls sit
// inside the block's compute, which waits for them: their time is never hidden.
static double expert_collectives(PlanFigures *f, double experts, double trained, double intra, double inter) {
    const Config *cfg = f->cfg;
    const ModelConfig *m = &cfg->model;
    int M = cfg->optim.grad_accum, L = m->num_layers, ep = f->dims.ep, es = f->dims.expert_shard_size, er = f->dims.expert_replica_size;
    int tpd = f->dims.tp, reshard = f->dims.reshard_after_forward;
    double pb = cfg->shard.precision == PRECISION_BF16 ? 2 : 4, gb = cfg->shard.reduce_dtype == PRECISION_BF16 ? 2 : 4;
    double ab = f->gpu && cfg->shard.precision == PRECISION_BF16 ? 2 : 4;  // the activation dtype the rows go out in
    // an expert shard group is es ranks ep apart inside a shard group; its replicas span the rest
    int span = es * ep * tpd, step = ep * tpd;
    double es_bw = group_bw(span <= f->rpn && f->rpn % span == 0, span < f->rpn ? es : f->rpn / step > 0 ? f->rpn / step : 1, f->rpn,
                            intra, inter) * GB;
    double er_bw = group_bw(f->world <= f->rpn, span < f->rpn && f->rpn % span == 0 ? f->rpn / span : 1, f->rpn, intra, inter) * GB;
    int reductions = es > 1 && !cfg->shard.accumulate_unsharded ? M : 1;
    if (es > 1) {
        f->coll[f->nc++] = ring("expert all-gather forward", es, M * experts * pb, es_bw, 0);
        if (reshard) f->coll[f->nc++] = ring("expert all-gather backward", es, M * experts * pb, es_bw, 0);
        f->coll[f->nc++] = ring("expert reduce-scatter", es, reductions * trained * gb, es_bw, 0);
    }
    if (er > 1) f->coll[f->nc++] = ring("expert all-reduce replicas", er, reductions * trained / es * gb, er_bw, 1);
    int every = memory_ckpt_every(cfg, f->gpu), recomputed = every > 0 ? (L + every - 1) / every : 0;
    double rows = (double)cfg->optim.batch_size * m->max_context_width / f->dims.cp * m->num_experts_per_tok;  // a cp rank's tokens
    double per_layer = rows * m->hidden_width * (2 * ab + 2 * 4.0);  // out and back, forward and backward
    double payload = M * (L * per_layer + recomputed * rows * m->hidden_width * (ab + 4.0));
    int fits = ep * tpd <= f->rpn;
    double bw = group_bw(fits, fits ? ep : f->rpn / tpd, f->rpn, intra, inter) * GB;
    Coll c = ring("all-to-all experts", ep, payload, bw, 0);
    f->coll[f->nc++] = c;
    return c.time;
}

// Context parallelism's ring, per micro-batch and layer: forward passes each rank's key/value
// block on cp - 1 times (again for a recomputed block), backward passes it on cp - 1 times and
// the block's key/value gradients (fp32, summed along the ring) cp times. A cp group is cp ranks
// tp apart (cp x tp consecutive ones): inside a node NVLink, else one rank per node sends to the
// next node at its share of the node's bandwidth. Adds the ring to f->coll; its exposure needs the
// block's compute time (plan_time).
static void cp_ring(PlanFigures *f, double intra, double inter) {
    const Config *cfg = f->cfg;
    const ModelConfig *m = &cfg->model;
    const int n = f->dims.cp, tpd = f->dims.tp, L = m->num_layers, M = cfg->optim.grad_accum;
    if (n == 1) return;
    const int every = memory_ckpt_every(cfg, f->gpu), recomputed = every > 0 ? (L + every - 1) / every : 0;
    double ab = f->gpu && cfg->shard.precision == PRECISION_BF16 ? 2 : 4;
    double kv = (double)cfg->optim.batch_size * (m->max_context_width / n) * m->num_key_value_heads / tpd * config_head_dim(m);
    f->ring_kv = 2 * kv * ab;
    f->ring_dkv = 2 * kv * ab;  // the gradients travel in the activations' dtype too
    int fits = n * tpd <= f->rpn && f->rpn % (n * tpd) == 0;
    f->ring_bw = group_bw(fits, fits ? n : f->rpn / tpd, f->rpn, intra, inter) * GB;
    double sent = M * ((L + recomputed) * (n - 1) * f->ring_kv + L * ((n - 1) * f->ring_kv + n * f->ring_dkv));
    Coll c = {.name = "cp ring k/v (+ grads)", .n = n, .payload = sent, .sent = sent, .bw = f->ring_bw, .time = sent / f->ring_bw};
    f->coll[f->nc++] = c;
    f->ring_time = c.time;
}

// The ring's exposed time: a shift waits for nothing but the step's block of attention (causal,
// balanced: half of a full T/cp x T/cp block; backward twice forward), so each step exposes
// max(0, shift - block). Needs plan_time's rate (FLOP/s).
static void cp_ring_exposed(PlanFigures *f, double rate) {
    const Config *cfg = f->cfg;
    const ModelConfig *m = &cfg->model;
    const int n = f->dims.cp, L = m->num_layers, M = cfg->optim.grad_accum;
    if (n == 1 || rate <= 0) return;
    double tl = (double)m->max_context_width / n, heads = (double)m->num_heads / f->dims.tp * config_head_dim(m);
    f->ring_fwd_block = 2.0 * cfg->optim.batch_size * tl * tl * heads / rate;
    f->ring_bwd_block = 2 * f->ring_fwd_block;
    f->ring_fwd_shift = f->ring_kv / f->ring_bw;
    f->ring_bwd_shift = (f->ring_kv + f->ring_dkv) / f->ring_bw;
    double last = f->ring_dkv / f->ring_bw;  // backward's last step returns only the gradients
#define EXPOSED(shift, block) ((shift) > (block) ? (shift) - (block) : 0.0)
    double fwd = (n - 1) * EXPOSED(f->ring_fwd_shift, f->ring_fwd_block);
    double bwd = (n - 1) * EXPOSED(f->ring_bwd_shift, f->ring_bwd_block) + EXPOSED(last, f->ring_bwd_block);
#undef EXPOSED
    int every = f->every, recomputed = every > 0 ? (L + every - 1) / every : 0;
    f->ring_exposed = M * ((L + recomputed) * fwd + L * bwd);
}

static void plan_comm(PlanFigures *f) {
    const Config *cfg = f->cfg;
    const PlanArgs a = f->a;
    int M = cfg->optim.grad_accum;
    f->shard = f->dims.shard_size;
    f->replicas = f->dims.replica_size;
    int reshard = f->dims.reshard_after_forward;
    double pb = cfg->shard.precision == PRECISION_BF16 ? 2 : 4, gb = cfg->shard.reduce_dtype == PRECISION_BF16 ? 2 : 4;
    double all = 0, blocks = 0, embed = 0, experts = 0;  // experts: this rank's experts' units (expert parallelism)
    double trained = 0, experts_trained = 0;  // what reduces: LoRA's frozen base does not
    // QLoRA's packed units gather their bytes, in forward and again in backward whatever the
    // strategy (they are released after each: shard.c)
    double packed = 0, packed_whole = 0;  // packed_whole: units stored whole under tp, over shard x tp ranks
    int es = f->dims.expert_shard_size;
    f->block_params = 0;
    for (int u = 0; u < f->plan.nunits; u++) {
        const UnitSpec *us = &f->plan.units[u];
        if (us->layer >= 0) f->block_params += (double)us->numel;  // every ep place's experts: the whole model's
        if (us->ep_index > 0) continue;  // another ep place's experts, of the same size
        if (us->ep_index == 0) {
            experts += (double)((us->numel + es - 1) / es * es);
            if (!us->frozen) experts_trained += (double)((us->numel + es - 1) / es * es);
            continue;
        }
        if (us->packed) {
            size_t g4 = (size_t)f->shard * (us->stored_whole ? (size_t)f->dims.tp : 1) * 4;  // bytes padded to 4 x the group
            *(us->stored_whole ? &packed_whole : &packed) += (double)((us->packed + g4 - 1) / g4 * g4);
            continue;
        }
        double padded = (double)((us->numel + f->shard - 1) / f->shard * f->shard);  // shard's padding to the group
        all += padded;
        if (!us->frozen) trained += padded;
        if (us->layer >= 0) blocks += padded;
        if (u == f->plan.embed_unit) embed = padded;
    }
    double intra = a.intra_bw > 0 ? a.intra_bw : f->gpu ? gpus[a.gpu].nvlink_gbs : CPU_INTRA_GBS;
    if (a.net != NET_DEFAULT && a.inter_bw > 0)
        comm_fail_all("plan: --interconnect %s and --inter_node_bw %g both set the bandwidth between nodes; give one",
                      cli_choice_name(net_names, a.net), a.inter_bw);
    double inter = a.inter_bw > 0 ? a.inter_bw : net_gbs[a.net != NET_DEFAULT ? a.net : (int)(f->gpu ? GPU_NET : CPU_NET)];
    // a shard group is every tp-th rank of g * tp consecutive ones (consecutive at tp 1); replica
    // groups take one rank of each replica's block
    int tpd = f->dims.tp, block = f->shard * tpd, shard_fits = block <= f->rpn && f->rpn % block == 0;
    double shard_bw = group_bw(shard_fits, block < f->rpn ? f->shard : f->rpn / tpd, f->rpn, intra, inter) * GB;
    double replica_bw =
        group_bw(f->world <= f->rpn, block < f->rpn && f->rpn % block == 0 ? f->rpn / block : 1, f->rpn, intra, inter) * GB;
    // gathers per micro-batch: every unit in forward (a tied embedding/head unit twice when freed
    // in between), and under full-shard every block again in backward
    double fwd = all + (reshard && f->plan.embed_unit == f->plan.head_unit ? embed : 0), bwd = reshard ? blocks : 0;
    // sharded accumulation reduces every micro-batch; --accumulate_unsharded and shard group 1 once a step
    int reductions = f->shard > 1 && !cfg->shard.accumulate_unsharded ? M : 1;
    f->nc = 0;
    if (f->shard > 1) {
        f->coll[f->nc++] = ring("all-gather forward", f->shard, M * (fwd * pb + packed), shard_bw, 0);
        if (bwd > 0 || packed > 0) f->coll[f->nc++] = ring("all-gather backward", f->shard, M * (bwd * pb + packed), shard_bw, 0);
        f->coll[f->nc++] = ring("reduce-scatter", f->shard, reductions * trained * gb, shard_bw, 0);
    }
    if (packed_whole > 0) {  // a replica's consecutive ranks
        double whole_bw = group_bw(block <= f->rpn, block < f->rpn ? block : f->rpn, f->rpn, intra, inter) * GB;
        f->coll[f->nc++] = ring("all-gather NF4 fwd (shard x tp)", block, M * packed_whole, whole_bw, 0);
        f->coll[f->nc++] = ring("all-gather NF4 bwd (shard x tp)", block, M * packed_whole, whole_bw, 0);
    }
    if (f->replicas > 1) f->coll[f->nc++] = ring("all-reduce replicas", f->replicas, reductions * trained / f->shard * gb, replica_bw, 1);
    double tp_exposed = tp_collectives(f, intra);
    double a2a = experts > 0 ? expert_collectives(f, experts, experts_trained, intra, inter) : 0;
    cp_ring(f, intra, inter);
    f->comm_bytes = 0;
    f->comm_time = 0;
    for (int i = 0; i < f->nc; i++) f->comm_bytes += f->coll[i].sent, f->comm_time += f->coll[i].time;
    // never hidden: each micro-batch's first gather (nothing computes before it) and the last
    // unit's reduction (nothing computes after it); the rest overlaps compute on its own stream
    // (a frozen embedding, LoRA's, reduces nothing: its last reduction is a block's adapters, left out)
    double embed_red = f->plan.units[f->plan.embed_unit].frozen ? 0 : embed;
    f->edge = f->shard > 1 ? M * ring("", f->shard, embed * pb, shard_bw, 0).time + ring("", f->shard, embed_red * gb, shard_bw, 0).time : 0;
    if (f->replicas > 1) f->edge += ring("", f->replicas, embed_red / f->shard * gb, replica_bw, 1).time;
    f->edge += tp_exposed + a2a;
}

// ---- step time: a roofline ----
static void plan_time(PlanFigures *f) {
    const Config *cfg = f->cfg;
    const PlanArgs a = f->a;
    const ModelConfig *m = &cfg->model;
    int B = cfg->optim.batch_size, T = m->max_context_width, M = cfg->optim.grad_accum, L = m->num_layers;
    f->fpt = model_flops_per_token(&f->plan, T);
    f->tokens = (double)B * T * M / f->dims.cp;  // a cp group's ranks split each sequence
    f->every = memory_ckpt_every(cfg, f->gpu);
    f->horizon = memory_offload_horizon(cfg, f->gpu);
    f->recomputed = f->every > 0 ? (L + f->every - 1) / f->every : 0;  // blocks 0, every, 2*every, ... (model.h)
    // a recomputed block runs its forward again: a third of its training FLOPs
    double block_fpt = f->fpt - 6.0 * ((double)f->plan.num_params - f->block_params);
    f->recompute_fpt = L > 0 ? (double)f->recomputed / L * block_fpt / 3.0 : 0.0;
    f->peak_flops = a.gpu_tflops > 0 ? a.gpu_tflops * 1e12
                        : f->gpu ? (cfg->shard.precision == PRECISION_BF16 ? gpus[a.gpu].bf16_tflops : gpus[a.gpu].fp32_tflops) * 1e12
                              : 0.0;  // a CPU's peak is for --gpu_tflops to say
    // the fit covers bf16 on a GPU; elsewhere recomputation costs its FLOPs at a flat efficiency
    f->fitted = f->gpu && cfg->shard.precision == PRECISION_BF16;
    f->micro = (double)B * T / f->dims.cp;  // a rank's matmuls: its 1/cp of each sequence
    f->width_half = FIT_K * f->peak_flops / (gpus[a.gpu].hbm_gbs * GB);
    double width_factor = m->hidden_width / (m->hidden_width + f->width_half), micro_factor = f->micro / (f->micro + FIT_M0);
    f->efficiency = a.efficiency > 0 ? a.efficiency
                        : f->fitted ? gpus[a.gpu].fit_e * width_factor * micro_factor
                                 : UNFITTED_EFFICIENCY;
    f->efficiency_source = a.efficiency > 0 ? "--compute_efficiency" : f->fitted ? "fit" : "unfitted";
    f->rho = f->fitted ? FIT_RHO : 1.0;
    f->adam_bw = (f->gpu && !cfg->shard.cpu_offload ? gpus[a.gpu].hbm_gbs : HOST_ADAMW_GBS) * GB;
    double adam_bytes = ADAMW_BYTES + (f->gpu && !cfg->shard.cpu_offload && cfg->shard.precision == PRECISION_BF16 ? ADAMW_BF16_BYTES : 0.0);
    f->optim = f->trained / 4 * adam_bytes / f->adam_bw;
    // a tp rank does 1/tp of its tp group's matmuls on the group's tokens
    f->compute = f->peak_flops > 0 ? f->tokens * (f->fpt + f->rho * f->recompute_fpt) / f->tp / (f->peak_flops * f->efficiency) : 0;
    // the ring overlaps attention, not the other collectives' compute: its own exposure
    cp_ring_exposed(f, f->peak_flops * f->efficiency);
    double pooled = f->comm_time - f->ring_time - f->edge;
    f->exposed = f->edge + f->ring_exposed + (pooled > f->compute ? pooled - f->compute : 0);
    f->step = f->compute + f->exposed + f->optim;
    f->mfu = f->step > 0 ? f->tokens * f->fpt / f->tp / (f->step * f->peak_flops) : 0;
    f->tokens_s = f->step > 0 ? f->tokens * f->dims.dp / f->step : 0;  // a tp group's ranks share their tokens
    f->timed = f->peak_flops > 0;
}

// the parameters a token reaches: all but a mixture of experts' unchosen experts
static double active_params(const PlanFigures *f) {
    return (double)f->plan.num_params - (f->cfg->model.num_experts ? moe_inactive_params(&f->cfg->model) : 0.0);
}

// fsdpc plan --json: one object with every figure.
static void print_json(const PlanFigures *f, const char *device) {
    const Config *cfg = f->cfg;
    const PlanArgs a = f->a;
    const ModelConfig *m = &cfg->model;
    int B = cfg->optim.batch_size, T = m->max_context_width, M = cfg->optim.grad_accum, L = m->num_layers;
    printf("{\"model\": {\"model_type\": \"%s\", \"model_name\": \"%s\", \"num_params\": %zu, \"active_params\": %.0f, "
           "\"hidden_width\": %d, \"num_layers\": %d, \"num_heads\": %d, \"num_key_value_heads\": %d, \"intermediate_size\": %d, "
           "\"max_context_width\": %d, \"vocab_size\": %d, \"rope_theta\": %g, \"norm_eps\": %g, \"sliding_window\": %d, "
           "\"num_experts\": %d, \"num_experts_per_tok\": %d}, ",
           m->model_type, m->model_name, f->plan.num_params, active_params(f), m->hidden_width, L, m->num_heads,
           m->num_key_value_heads, m->intermediate_size, T, m->vocab_size, (double)m->rope_theta, (double)m->norm_eps,
           m->sliding_window, m->num_experts,
           m->num_experts ? m->num_experts_per_tok : 0);
    printf("\"recipe\": \"%s\", \"lr\": %g, \"max_steps\": %d, \"train_data\": \"%s\", ",
           cli_choice_name(recipe_choices, recipe_chosen()), (double)cfg->optim.lr, cfg->optim.max_steps, cfg->data.train_data);
    printf("\"device\": \"%s\", \"world_size\": %d, \"ranks_per_node\": %d, \"nodes\": %d, \"sharding\": \"%s\", "
           "\"shard_group\": %d, \"replica_group\": %d, \"tp\": %d, \"ep\": %d, \"expert_shard_group\": %d, "
           "\"expert_replica_group\": %d, \"precision\": \"%s\", \"reduce_dtype\": \"%s\", "
           "\"batch_size\": %d, \"grad_accum\": %d, \"checkpoint_every\": %d, \"cpu_offload\": %s, "
           "\"offload_horizon\": %d, \"offloaded_activations_bytes\": %.0f, \"staging_bytes\": %.0f, ",
           device, f->world, f->rpn, f->nodes, shard_strategy_name(f->dims.strategy), f->shard, f->replicas, f->tp, f->dims.ep,
           f->dims.expert_shard_size, f->dims.expert_replica_size, shard_precision_name(cfg->shard.precision),
           shard_precision_name(cfg->shard.reduce_dtype), B, M, f->every, cfg->shard.cpu_offload ? "true" : "false", f->horizon,
           f->acts_offloaded, memory_staging(&f->host, cfg));
    printf("\"per_rank_bytes\": {\"params\": %.0f, \"master\": %.0f, \"gathered\": %.0f, \"grads\": %.0f, "
           "\"optimizer\": %.0f, \"activations\": %.0f, \"buffers\": %.0f, \"peak\": %.0f}, \"capacity_bytes\": %.0f, "
           "\"fits\": %s, \"host_start_bytes_per_node\": %.0f, ",
           f->e.params, f->master, f->e.gathered, f->e.grads, f->e.optimizer, f->acts, f->e.buffers, f->peak, f->capacity,
           f->fits ? "true" : "false",
           f->gpu ? f->start_host * f->rpn : 0.0);
    printf("\"collectives\": [");
    for (int i = 0; i < f->nc; i++)
        printf("%s{\"name\": \"%s\", \"group_size\": %d, \"payload_bytes\": %.0f, \"sent_bytes\": %.0f, "
               "\"bandwidth_bytes_s\": %.6g, \"time_s\": %.6g}",
               i ? ", " : "", f->coll[i].name, f->coll[i].n, f->coll[i].payload, f->coll[i].sent, f->coll[i].bw, f->coll[i].time);
    double a2a = 0;  // the experts' all-to-alls (expert parallelism), inside the blocks' compute
    for (int i = 0; i < f->nc; i++)
        if (!strcmp(f->coll[i].name, "all-to-all experts")) a2a = f->coll[i].time;
    printf("], \"comm_bytes_per_step\": %.0f, \"comm_time_s\": %.6g, \"exposed_comm_s\": %.6g, \"all_to_all_time_s\": %.6g, ",
           f->comm_bytes, f->comm_time, f->exposed, a2a);
    printf("\"flops_per_token\": %.6g, \"recompute_flops_per_token\": %.6g, \"recompute_cost\": %g, "
           "\"tokens_per_step_per_rank\": %.0f, \"peak_flops\": %.6g, \"hbm_bytes_s\": %.6g, \"compute_efficiency\": %.6g, "
           "\"efficiency_source\": \"%s\", \"unhidden_comm_s\": %.6g, ",
           f->fpt, f->recompute_fpt, f->rho, f->tokens, f->peak_flops, f->gpu ? gpus[a.gpu].hbm_gbs * GB : 0.0, f->efficiency,
           f->efficiency_source,
           f->edge);
    printf("\"cp\": %d, \"cp_ring\": {\"bandwidth_bytes_s\": %.6g, \"kv_bytes\": %.0f, \"grad_bytes\": %.0f, \"time_s\": %.6g, "
           "\"fwd_shift_s\": %.6g, \"fwd_block_s\": %.6g, \"bwd_shift_s\": %.6g, \"bwd_block_s\": %.6g, \"exposed_s\": %.6g}, ",
           f->dims.cp, f->ring_bw, f->ring_kv, f->ring_dkv, f->ring_time, f->ring_fwd_shift, f->ring_fwd_block, f->ring_bwd_shift,
           f->ring_bwd_block, f->ring_exposed);
    if (f->timed)
        printf("\"compute_time_s\": %.6g, \"optimizer_time_s\": %.6g, \"step_time_s\": %.6g, \"tokens_per_s\": %.6g, "
               "\"mfu\": %.4f}\n",
               f->compute, f->optim, f->step, f->tokens_s, f->mfu);
    else
        printf("\"compute_time_s\": null, \"optimizer_time_s\": %.6g, \"step_time_s\": null, \"tokens_per_s\": null, "
               "\"mfu\": null}\n",
               f->optim);
}

// The tables' head: the model, the layout and the batch.
static void print_layout(const PlanFigures *f, const char *device) {
    const Config *cfg = f->cfg;
    const ModelConfig *m = &cfg->model;
    int B = cfg->optim.batch_size, T = m->max_context_width, M = cfg->optim.grad_accum, L = m->num_layers;
    char origins[400], experts[96] = "";
    flags_size_origins(cfg, origins, sizeof origins);
    double scale = f->plan.num_params >= 1e9 ? 1e9 : 1e6;
    const char *unit = f->plan.num_params >= 1e9 ? "B" : "M";
    if (m->num_experts)
        snprintf(experts, sizeof experts, ", %.3g%s active (%d of %d experts per token)", active_params(f) / scale, unit,
                 m->num_experts_per_tok, m->num_experts);
    printf("fsdpc plan: %s%s%s, %.3g%s parameters%s (D=%d L=%d H=%d KV=%d F=%d V=%d), context %d; %s\n", m->model_type,
           m->model_name[0] ? " " : "", m->model_name, f->plan.num_params / scale, unit, experts, m->hidden_width, L, m->num_heads,
           m->num_key_value_heads, m->intermediate_size, m->vocab_size, T, origins);
    if (cfg->recipe.recipe_line[0]) printf("%s\n", cfg->recipe.recipe_line);
    if (cfg->recipe.recipe_note[0]) printf("%s\n", cfg->recipe.recipe_note);
    char tps[160] = "";
    size_t n = 0;
    if (f->tp > 1) n = snprintf(tps, sizeof tps, " x tp %d%s", f->tp, f->dims.sequence_parallel ? " (sequence parallel)" : "");
    if (f->dims.cp > 1) n += snprintf(tps + n, sizeof tps - n, " x cp %d (ring attention)", f->dims.cp);
    if (f->dims.ep > 1)
        snprintf(tps + n, sizeof tps - n, "; ep %d (%d experts per rank, sharded over %d x %d replica(s))", f->dims.ep,
                 cfg->model.num_experts / f->dims.ep, f->dims.expert_shard_size, f->dims.expert_replica_size);
    printf("layout: %d rank(s), %d node(s) of %d on %s; %s: shard group %d x replica group %d%s; %s, reduce %s\n", f->world,
           f->nodes, f->rpn, device, shard_strategy_name(f->dims.strategy), f->shard, f->replicas, tps,
           shard_precision_name(cfg->shard.precision),
           shard_precision_name(cfg->shard.reduce_dtype));
    printf("batch: %d x %d tokens x grad_accum %d%s = %.0f tokens per rank per step, %.0f per step%s\n", B, T, M,
           f->dims.cp > 1 ? " / cp" : "", f->tokens, f->tokens * f->dims.dp, f->tp > 1 ? " (a tp group's ranks read the same tokens)" : "");
}

static void print_memory(const PlanFigures *f) {
    const Config *cfg = f->cfg;
    int M = cfg->optim.grad_accum, L = cfg->model.num_layers;
    char ck[96] = "every block stored";
    if (f->every) snprintf(ck, sizeof ck, "%d of %d blocks recomputed in backward%s", f->recomputed, L,
                        f->acts_offloaded > 0 ? ", their inputs offloaded" : "");
    printf("\nmemory per rank (%s, as the start-up check counts it; B/param: per parameter of the rank's shard)\n",
           f->gpu ? "on the GPU" : "host");
    double shard_params = f->host.shard_params;
    char note[160];
    double unit = f->peak >= GIB ? GIB : GIB / 1024;
    snprintf(note, sizeof note, "master shard %.2f %s, plus one unit's shard while the start initialises it", f->master / unit,
             unit == GIB ? "GiB" : "MiB");
    mem_row("parameters", f->e.params, unit, shard_params, note);
    mem_row("gathered", f->e.gathered, unit, shard_params, "full parameters of gathered units");
    mem_row("gradients", f->e.grads, unit, shard_params,
            M == 1 ? "" : f->shard == 1 ? "micro-batches add into the shard (shard group 1)"
            : cfg->shard.accumulate_unsharded ? "the whole model's, held over the micro-batches (--accumulate_unsharded)"
                                       : "each micro-batch reduce-scattered into the shard");
    mem_row("optimizer", f->e.optimizer, unit, shard_params,
            f->gpu && cfg->shard.cpu_offload ? "in host memory (--cpu_offload)" : "AdamW moments");
    mem_row("activations", f->acts, unit, shard_params, ck);
    const double ring = f->gpu ? (double)model_cp_scratch(&f->plan, cfg->optim.batch_size, cfg->model.max_context_width) : 0;
    if (ring > 0)
        printf("    of them %.2f %s: cuDNN's scratch for the ring's blocks (assuming cuDNN loads and accepts their graphs; "
               "a run whose cuDNN refuses runs them native, without it)\n", ring / unit, unit == GIB ? "GiB" : "MiB");
    mem_row("buffers", f->e.buffers, unit, shard_params, "communication: bf16 staging of gathers and reductions");
    mem_row("peak", f->peak, unit, shard_params, "");
    if (f->acts_offloaded > 0) {
        snprintf(note, sizeof note, "activations in pinned host memory, not in the peak (--offload_activations, horizon %d)",
                 f->horizon);
        mem_row("offloaded", f->acts_offloaded, unit, shard_params, note);
    }
    double staging = memory_staging(&f->host, cfg);
    if (staging > 0)
        mem_row("staging", staging, unit, shard_params, staging_note(cfg, f->gpu));
    if (f->capacity > 0) printf("  %s: %s\n", f->fits ? "fits" : "DOES NOT FIT", f->capacity_what);
    // per parameter of the rank's shard: what lives all run long; bf16 copies exist only while a
    // unit is gathered or reduced (shard group 1 on a GPU aside, whose units are always gathered)
    double moments = f->host.optimizer / shard_params, grad = f->trained / shard_params;
    // (a LoRA base under --precision bf16 holds bf16 values: the master below 4 bytes)
    printf("  sharded state: %.2f bytes per parameter of the rank's shard (master %.2f, fp32 gradient %.2f, AdamW moments %.2f%s)\n",
           f->master / shard_params + grad + moments, f->master / shard_params, grad, moments,
           f->gpu && cfg->shard.cpu_offload ? " in host memory" : "");
    if (f->plan.lora0 >= 0)
        printf("  LoRA: r=%d on %s, %.2fM adapter parameters train (%.3f%% of %.2fB); the base is frozen: no gradient, no moments%s%s\n",
               cfg->model.lora_rank, f->plan.cfg.lora_target_modules, lora_trained_params(&f->plan) / 1e6,
               100.0 * lora_trained_params(&f->plan) / (double)f->plan.num_params, (double)f->plan.num_params / 1e9,
               f->plan.cfg.quantize_base ? "; its block linear weights are stored in NF4 (QLoRA: about 0.52 bytes each, dequantised "
                                           "per unit as it is gathered)" : "",
               !f->plan.cfg.base_bf16 ? "" : f->plan.cfg.quantize_base ? ", its other tensors in bf16"
                                                                       : "; it is stored in bf16 (2 bytes each), the values its gathers compute with");
}

static void print_comm(const PlanFigures *f) {
    printf("\ncommunication per step and rank (ring: (n-1)/n x payload / bandwidth, all-reduce twice that)\n");
    printf("  %-26s %5s %12s %12s %11s %10s\n", "collective", "ranks", "payload GB", "sent GB", "GB/s", "ms");
    for (int i = 0; i < f->nc; i++)
        printf("  %-26s %5d %12.3f %12.3f %11.1f %10.2f\n", f->coll[i].name, f->coll[i].n, f->coll[i].payload / GB,
               f->coll[i].sent / GB, f->coll[i].bw / GB, f->coll[i].time * 1e3);
    if (!f->nc) printf("  none (one rank holds everything)\n");
    printf("  %-26s %5s %12s %12.3f %11s %10.2f\n", "total", "", "", f->comm_bytes / GB, "", f->comm_time * 1e3);
}

static void print_time(const PlanFigures *f) {
    const PlanArgs a = f->a;
    const ModelConfig *m = &f->cfg->model;
    printf("\nstep time (roofline)\n");
    if (!f->timed) {
        printf("  a CPU's peak is not known: pass --gpu_tflops (its peak, TFLOP/s) for a step time; optimizer %.2f ms\n",
               f->optim * 1e3);
        return;
    }
    char rc[64] = "";
    if (f->recompute_fpt > 0) snprintf(rc, sizeof rc, " (+ recomputation at %.2f of its FLOPs)", f->rho);
    printf("  compute     %9.2f ms  %.0f tokens x %.3g FLOP/token%s / (%.0f TFLOP/s x %.3f efficiency)\n", f->compute * 1e3,
           f->tokens, f->fpt, rc, f->peak_flops / 1e12, f->efficiency);
    if (a.efficiency > 0)
        printf("              efficiency from --compute_efficiency\n");
    else if (f->fitted)
        printf("              efficiency fitted to published runs: %.3f x width %d/(%d + %.0f) x micro-batch %.0f/(%.0f + %.0f) "
               "tokens\n",
               gpus[a.gpu].fit_e, m->hidden_width, m->hidden_width, f->width_half, f->micro, f->micro, FIT_M0);
    else
        printf("              efficiency %g, not fitted (float32 or a CPU)\n", UNFITTED_EFFICIENCY);
    printf("  exposed comm %8.2f ms  each micro-batch's first gather and the last reduction; the rest overlaps compute\n",
           f->exposed * 1e3);
    if (f->dims.cp > 1)
        printf("    cp ring   %9.2f ms  of it: per layer, forward %d steps each shifting %.1f MB in %.3f ms while a block's "
               "attention takes %.3f ms; backward %d steps each shifting %.1f MB (k/v and their grads) in %.3f ms against %.3f ms\n",
               f->ring_exposed * 1e3, f->dims.cp, f->ring_kv / 1e6, f->ring_fwd_shift * 1e3, f->ring_fwd_block * 1e3, f->dims.cp,
               (f->ring_kv + f->ring_dkv) / 1e6, f->ring_bwd_shift * 1e3, f->ring_bwd_block * 1e3);
    printf("  optimizer   %9.2f ms  AdamW over the shard at %.0f GB/s\n", f->optim * 1e3, f->adam_bw / GB);
    printf("  step        %9.3f s   %.0f tokens/s, MFU %.1f%% (model FLOPs / (step time x %.0f TFLOP/s))\n", f->step,
           f->tokens_s, 100 * f->mfu, f->peak_flops / 1e12);
}

int plan_main(void *args) {
    comm_stop_phase("plan");  // writes only stdout: a stop ends it at once
    PlanCommand *pc = args;
    PlanFigures f = {.a = pc->a, .cfg = &pc->cfg};
    plan_model(&f);
    plan_memory(&f);
    plan_comm(&f);
    plan_time(&f);
    if (comm_info.rank != 0) return 0;
    char device[160];
    if (f.gpu) snprintf(device, sizeof device, "%s", gpus[f.a.gpu].name);
    else snprintf(device, sizeof device, "cpu");
    if (f.a.json) {
        print_json(&f, device);
        return 0;
    }
    print_layout(&f, device);
    print_memory(&f);
    print_comm(&f);
    print_time(&f);
    return 0;
}
