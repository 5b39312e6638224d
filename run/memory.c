// memory: the memory estimate and the start-up check (see memory.h).
#include "memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/log.h"
#include "../comm/comm.h"
#include "../kernels/kernels.h"

int memory_offload_horizon(const Config *c, int gpu) {
    return gpu && c->shard.offload_activations ? c->shard.activation_loading_horizon : 0;
}

int memory_ckpt_every(const Config *c, int gpu) {
    int on = c->shard.activation_checkpoints || memory_offload_horizon(c, gpu) > 0;
    return !on ? 0 : c->shard.selective_checkpointing > 0 ? c->shard.selective_checkpointing : 1;
}

// A writer's slices of a checkpoint are its master shard and AdamW moments (the file's padding
// and a replica's or tp rank's duplicates aside, which it does not write): at most that much. A
// snapshot holds all of them, in the same buffer when both flags are given.
double memory_staging(const ShardMemEstimate *e, const Config *c) {
    int staged = (c->ckpt.async_checkpoint && c->ckpt.checkpoint_freq > 0) || c->ckpt.keep_snapshot;
    return staged ? e->master + e->optimizer : 0;
}

const char *memory_staging_flags(const Config *c) {
    int async = c->ckpt.async_checkpoint && c->ckpt.checkpoint_freq > 0;
    return async && c->ckpt.keep_snapshot ? "--async_checkpoint and --keep_snapshot" : async ? "--async_checkpoint" : "--keep_snapshot";
}

// bytes per rank under config c: shard state by kind into *e, plus activations into *acts, plus
// --async_checkpoint's staging buffer; the kinds are the memory tracker's categories
static double rank_bytes(const ModelPlan *plan, const Config *c, const ParallelDims *dims, ShardMemEstimate *e, double *acts) {
    int B = c->optim.batch_size, T = c->model.max_context_width;
    shard_estimate(plan, &c->shard, c->optim.grad_accum, dims, e);
    *acts = (double)model_acts_bytes(plan, B, T, 0, memory_ckpt_every(c, 0), 0, NULL);
    return e->params + e->gathered + e->grads + e->optimizer + e->buffers + *acts + memory_staging(e, c);
}

// the activations a GPU holds (offloaded ones in pinned host memory, *host)
static double gpu_acts_bytes(const ModelPlan *plan, const Config *c, double *host) {
    size_t h;
    double d = (double)model_acts_bytes(plan, c->optim.batch_size, c->model.max_context_width, 0, memory_ckpt_every(c, 1),
                                        memory_offload_horizon(c, 1), &h);
    if (host) *host = (double)h;
    return d;
}

// The part of rank_bytes a GPU holds (*e becomes the device's share): not the whole model an
// unsharded start builds on the host before sharding it, nor, under --cpu_offload, the master
// shard and AdamW moments, which then live in host memory (the device keeps a copy of the master
// shard for the gathers, so that much stays).
static double device_bytes(const ModelPlan *plan, const Config *c, const ParallelDims *dims, ShardMemEstimate *e, double *acts) {
    rank_bytes(plan, c, dims, e, acts);
    *acts = gpu_acts_bytes(plan, c, NULL);
    e->params = e->master;
    if (c->shard.cpu_offload) e->optimizer = 0;
    return e->params + e->gathered + e->grads + e->optimizer + e->buffers + *acts;
}

double memory_estimate(const ModelPlan *plan, const Config *c, const ParallelDims *dims, int device, ShardMemEstimate *e,
                       double *acts, double *acts_host) {
    *acts_host = 0;
    if (device) gpu_acts_bytes(plan, c, acts_host);
    return (device ? device_bytes : rank_bytes)(plan, c, dims, e, acts);
}

// --async_checkpoint's staging buffer, `staging` bytes per rank: NULL, or the refusal when the node
// cannot hold it. On the CPU need (the node's estimate with it) is held against avail (limit says
// what that is), and the buffer is named when the run would fit without it; on a GPU it is pinned
// host memory, held with the offloaded activations (host_other per rank) against the node's.
static const char *staging_refusal(const Config *c, double staging, double need, double avail, const char *limit, double host_other,
                                   int gpu) {
    const double G = 1024.0 * 1024.0 * 1024.0;
    static char msg[1024], what[160];
    double n = comm_info.local_world;
    if (gpu) {
        const char *source;
        avail = comm_mem_available(&source);
        const char *hook = getenv("FSDPC_TEST_MEM_AVAILABLE");
        if (hook) avail = atof(hook), source = "FSDPC_TEST_MEM_AVAILABLE";
        need = n * (staging + host_other);
        snprintf(what, sizeof what, "%.2f GiB of host memory available (%s)", avail / G, source);
        limit = what;
    }
    if (avail <= 0 || need <= avail || (!gpu && need - n * staging > avail)) return NULL;
    const char *flags = memory_staging_flags(c);
    snprintf(msg, sizeof msg, "%s: its staging buffer (a host copy of the rank's part of each checkpoint) takes %.2f GiB per "
             "rank, and with it this node's %d rank(s) need %.2f GiB%s, beyond the %s; drop %s (%s)", flags, staging / G, (int)n,
             need / G, gpu ? " of host memory" : "", limit, flags,
             c->ckpt.keep_snapshot ? "--on_nonfinite rollback needs --keep_snapshot" : "checkpoints are then written synchronously");
    return msg;
}

// Before allocating: this rank's estimated peak (shard state and buffers from shard's layout
// rules, activations from the model's) against what it may use: on the CPU, times the ranks on
// this node, against the node's memory; on a GPU, the part the device holds against the GPU's
// free memory. A run that cannot fit stops at once with what would fit, instead of being killed
// (or failing a cudaMalloc) later.
void memory_check(const ModelPlan *plan, const Config *c, const ParallelDims *dims) {
    const double G = 1024.0 * 1024.0 * 1024.0, M = 1024.0 * 1024.0;
    int gpu = kern_on_gpu();
    double (*bytes)(const ModelPlan *, const Config *, const ParallelDims *, ShardMemEstimate *, double *) =
        gpu ? device_bytes : rank_bytes;
    ShardMemEstimate e, e2;
    // each rank has a GPU of its own, while the node's ranks share its host memory
    double acts, acts2, n = gpu ? 1 : comm_info.local_world, need = n * bytes(plan, c, dims, &e, &acts), avail;
    char limit[320];
    int known;
    if (gpu) {
        size_t free_b, total_b;
        kern_mem_info(&free_b, &total_b);
        avail = (double)free_b, known = total_b > 0;
        snprintf(limit, sizeof limit, "%.2f GiB free on %s (of %.2f GiB)", avail / G, kern_device_name(), total_b / G);
    } else {
        const char *source;
        avail = comm_mem_available(&source);
        const char *hook = getenv("FSDPC_TEST_MEM_AVAILABLE");  // tests pose as a smaller node
        if (hook) avail = atof(hook), source = "FSDPC_TEST_MEM_AVAILABLE";
        known = avail > 0;
        snprintf(limit, sizeof limit, "%.2f GiB available (%s)", avail / G, source);
    }
    // logged, so fsdpc plan's figures and the measured mem: can be held against it
    double acts_host = 0;
    if (gpu) gpu_acts_bytes(plan, c, &acts_host);
    char host[80] = "";
    if (acts_host > 0) snprintf(host, sizeof host, "; offloaded activations %.1f MiB in pinned host memory", acts_host / M);
    double staging = memory_staging(&e, c);
    if (staging > 0)
        snprintf(host + strlen(host), sizeof host - strlen(host), "; %s %.1f MiB%s",
                 c->ckpt.keep_snapshot ? "snapshot" : "checkpoint staging", staging / M, gpu ? " in pinned host memory" : "");
    log_msg("memory estimate per rank: %.1f MiB%s (parameters %.1f, gathered %.1f, gradients %.1f, optimizer %.1f, "
             "activations %.1f, buffers %.1f MiB%s)\n", need / n / M, gpu ? " on the GPU" : "", e.params / M, e.gathered / M,
             e.grads / M, e.optimizer / M, acts / M, e.buffers / M, host);
    const char *staged = staging > 0 ? staging_refusal(c, staging, need, known ? avail : -1, limit, acts_host, gpu) : NULL;
    if (staged || !known || need <= avail) {
        comm_check_all(staged);
        return;
    }
    // what would fit, cheapest change first: a smaller batch, recomputation, then on a GPU the
    // optimizer state in host memory
    static Config alt;
    alt = *c;
    char fits[256];
    snprintf(fits, sizeof fits, "more ranks on more %s (sharding divides parameters, gradients and optimizer state)", gpu ? "GPUs" : "nodes");
    while (alt.optim.batch_size > 1 && n * bytes(plan, &alt, dims, &e2, &acts2) > avail) alt.optim.batch_size /= 2;
    if (n * bytes(plan, &alt, dims, &e2, &acts2) <= avail) {
        snprintf(fits, sizeof fits, "--batch_size %d (and --grad_accum to keep the global batch)", alt.optim.batch_size);
    } else if ((alt.shard.activation_checkpoints = 1, n * bytes(plan, &alt, dims, &e2, &acts2) <= avail)) {
        snprintf(fits, sizeof fits, "--activation_checkpoints --batch_size %d", alt.optim.batch_size);
    } else if (gpu && !c->shard.offload_activations && (alt.shard.offload_activations = 1, n * bytes(plan, &alt, dims, &e2, &acts2) <= avail)) {
        snprintf(fits, sizeof fits, "--offload_activations --batch_size %d (checkpointed blocks' inputs in pinned host memory)",
                 alt.optim.batch_size);
    } else if (gpu && !c->shard.cpu_offload) {
        alt = *c;
        alt.shard.cpu_offload = 1;
        if (n * bytes(plan, &alt, dims, &e2, &acts2) <= avail)
            snprintf(fits, sizeof fits, "--cpu_offload (master weights and AdamW moments in host memory)");
    }
    char ranks[64] = "";
    if (!gpu) snprintf(ranks, sizeof ranks, " x %d rank(s) on this node", (int)n);
    static char msg[1024];
    snprintf(msg, sizeof msg,
             "estimated peak %smemory %.2f GiB per rank (parameters %.2f, gathered %.2f, gradients %.2f, optimizer %.2f, "
             "activations %.2f, buffers %.2f GiB)%s exceeds the %s; would fit: %s",
             gpu ? "device " : "", need / n / G, e.params / G, e.gathered / G, e.grads / G, e.optimizer / G, acts / G,
             e.buffers / G, ranks, limit, fits);
    comm_check_all(msg);  // nodes and GPUs differ in what they have: any rank's verdict ends the job
}
