// shard: the FSDP engine. Each unit's parameters form one flat buffer, padded to divide the
// shard group; every rank owns a contiguous shard (fp32 master + AdamW moments) and gathers the
// full unit only around its compute. Strategies follow torch's ShardingStrategy.
#ifndef FSDPC_SHARD_H
#define FSDPC_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "../comm/comm.h"
#include "../model/model.h"
#include "parallel.h"
#include "shard_config.h"

// A unit's ranges of the tensors the gradient norm counts, or whose gradients the tp group sums:
// under tensor parallelism LoRA's adapters of split weights alternate (one factor split, the
// other a share), up to two ranges for each expert of a block's adapters
enum { SHARD_MAX_RANGES = KERN_ADAMW_MAX_RANGES + 2 * CONFIG_MAX_EXPERTS };

// where a gather happens: training forward, evaluation forward, backward
typedef enum { PHASE_FWD, PHASE_EVAL, PHASE_BWD } ShardPhase;

typedef struct {
    // the ranks that split the unit (its shard group) and those that hold the same shard of it (its
    // replica group): the mesh's, or under expert parallelism an experts' unit's expert groups
    CommGroup *group, *replicas;
    int group_size, group_rank, replica_size, replica_rank;
    int frozen;                   // LoRA's frozen base: the master shard alone, no gradient or optimizer state
    int member;                   // this rank holds the unit (expert parallelism: its own experts' only);
                                  // the others keep no state for it and never gather it
    size_t numel;                 // elements of the unit
    size_t padded;                // numel rounded up to a multiple of the shard group size
    size_t shard_off, shard_len;  // this rank's slice of the flat buffer
    float *master;                // (shard_len) fp32 master shard, updated by AdamW
    float *exp_avg, *exp_avg_sq;  // (shard_len) AdamW moments
    float *grad_shard;            // (shard_len) reduced gradient, on the device
    // --cpu_offload on a GPU: master and moments above live in pinned host memory, AdamW runs
    // on the CPU, and the device keeps only this copy of the master shard for the gathers
    float *device_master;         // (shard_len) == master unless offloaded
    uint16_t *master_bf16;        // (shard_len) --precision bf16 at shard group 1 on a GPU: device_master
                                  // rounded, the unit's parameters themselves (AdamW writes them); else NULL
    int send_slot;                // the send_stage slot its bf16 gather reads, while in flight; else -1
    int ndecay;                   // this shard's weight-decay ranges (KernAdamW.decay), local offsets
    size_t decay[KERN_ADAMW_MAX_RANGES][2];
    int nnorm;                    // the ranges the gradient norm counts: all of the shard, but at tp ranks
    size_t norm[SHARD_MAX_RANGES][2];  // after the first not the tensors every tp rank holds whole
    int nwhole;                   // the shard's ranges of the tensors whose gradients each tp rank has a share of
    size_t whole[SHARD_MAX_RANGES][2];  // (sequence parallelism's whole tensors, LoRA's tp_partial factors)
    float *host_grad;             // (shard_len) offload: the gradient shard copied to the host
    int copy_ticket;              // offload: the kern_*_async copy of host_grad
    void *params;                 // (padded) gathered parameters (kern_params_bf16's dtype) while gathered, else NULL
    float *grads;                 // (padded) full gradient while backward needs it (grad_shard itself when
                                  // direct_grads), else NULL
    int param_slot, grad_slot;    // pool slot in use, or -1
    int grad_open;                // the gradient buffer is handed out and not yet ready
    int grad_fresh;               // grad_shard holds nothing of this step yet: the next reduction lands in it
    int reduce_adds;              // bf16 reduction in flight: add it to grad_shard (earlier micro-batches are there)
    int reduce_last;              // the reduction in flight is the step's last for u: the replicas reduce then
    int expand_pending;           // bf16 gather landed in the staging buffer, not yet in params (a packed
                                  // unit: its bytes, not yet dequantised)
    // QLoRA and a bf16 base: a packed unit (UnitSpec.packed bytes) shards its bytes as 4-byte words: numel is then
    // its elements, padded, shard_off and shard_len words, master (== device_master) the bytes;
    // no gradient, moments or bf16 copy. It is gathered through the packed slots, never kept.
    size_t packed;
    CommRequest *gather_req, *reduce_req;
} FlatUnit;

typedef struct {
    const ModelPlan *plan;
    ParallelDims dims;              // strategy, shard and replica group sizes
    int shard_rank, replica_rank;   // this rank in its shard group and its replica group
    CommGroup *tp_group, *shard_group, *replica_group;  // the mesh's groups (parallel.h)
    CommGroup *ep_group, *expert_shard_group, *expert_replica_group;  // expert parallelism's (ep > 1), else NULL
    CommGroup *whole_group, *expert_whole_group;  // units stored whole under tp (UnitSpec.stored_whole), else NULL
    int bf16_params;                // --precision bf16: gather bf16
    int bf16_gathered;              // ... and hold them so (a GPU); else compute from the fp32 expansion (the CPU)
    int bf16_reduce;                // --reduce_dtype bf16: reduce gradients in bf16
    int offload;                    // --cpu_offload with a GPU: optimizer state on the host
    int persistent_grads;           // full gradients live across micro-batches (--accumulate_unsharded, or shard
                                    // group 1 where the shard is the whole unit)
    int accum_sharded;              // grad_accum > 1 otherwise: every micro-batch is reduce-scattered and its shard
                                    // added into grad_shard (no extra buffer), so full gradients never outlive
                                    // their micro-batch
    int direct_grads;               // shard group 1: backward adds into grad_shard itself (bf16 reductions: rounded
                                    // there, or all-reduced over replicas through the grad_stage slots)
    int nunits;
    FlatUnit *units;
    // pools of full-size buffers: 2 for parameters (current + prefetched) under ZeRO-3, one per
    // unit otherwise; 2 for gradients (current + being reduced) unless they persist
    int nparam_slots, ngrad_slots;
    void **param_pool;
    float **grad_pool;
    // --precision bf16 gathers: the shard rounded to bf16 just before its all-gather, into one of
    // two slots (current + prefetched), so no bf16 copy of the shards outlives its gather
    uint16_t *send_stage[2];        // (max shard_len)
    int send_owner[2];              // unit whose gather reads each slot, or -1
    int *param_owner, *grad_owner;  // unit using each slot, or -1
    // bf16 staging per slot: the full buffer (parameters expanded to fp32), the full buffer and the
    // received shard (gradients)
    uint16_t **param_stage, **grad_stage, **grad_recv;
    // QLoRA's packed units, always gathered through these slots and released after each use (never
    // kept from forward to backward, nor whole at shard group 1): the gathered bytes, and the unit
    // dequantised into the kernels' parameter dtype
    int npacked_slots;
    uint8_t *packed_stage[1 + MAX_BLOCK_UNITS];
    void *packed_params[1 + MAX_BLOCK_UNITS];
    int packed_owner[1 + MAX_BLOCK_UNITS];
    int nranges;                    // a unit's norm ranges at most, on any rank: ntensors, at least 8, at most SHARD_MAX_RANGES
    double *unit_sumsq;             // (nunits, nranges) sums of squares of the norm ranges, on the device
    double *step_red;               // (nunits + 2) host: what the step's one all-reduce carries
    int tp_sums;                    // some gradient shards are summed over the tp group (pick_whole in shard.c)
    CommRequest **whole_reqs;       // (nunits * SHARD_MAX_RANGES) the step's sums of those gradient shards
    int whole_pending;              // over the tp group, and whether they are due
    int step;                       // optimizer steps taken
} ShardState;

// Makes the process groups of layout pd (parallel_dims_build) and allocates every unit for steps
// of grad_accum micro-batches; with init_values, initialises the rank's shards from (seed, name,
// index), a unit at a time, never the whole model. Without init_values the shards stay zero: the
// caller loads them.
void shard_init(ShardState *s, const ModelPlan *plan, const ShardConfig *cfg, const ParallelDims *pd, int grad_accum, int seed,
                int init_values);
void shard_free(ShardState *s);

// Per-rank bytes shard_init and the step will hold for plan under cfg in layout pd, by kind,
// from the same layout rules as shard_init (for the memory check before allocating).
// The kinds are the memory tracker's categories (kernels.h KernMem), so the two compare directly.
typedef struct {
    double params;     // master shards, plus one unit's shard while the start initialises it
    double master;     // the master shards alone (LoRA: the frozen base's too, which has no moments)
    double gathered;   // full-size buffers of gathered parameters
    double grads;      // gradient shards and full-size gradient buffers
    double optimizer;  // AdamW moments
    double buffers;    // communication buffers: bf16 staging of the gathers and the reductions
    double shard_params;  // parameters in the rank's shards (a packed unit's elements, whatever its bytes)
} ShardMemEstimate;
void shard_estimate(const ModelPlan *plan, const ShardConfig *cfg, int grad_accum, const ParallelDims *pd, ShardMemEstimate *e);

// Full parameters of unit u (waits for its all-gather), in the kernels' parameter dtype
// (kern_params_bf16), and starts the non-blocking all-gather of unit `next` (-1: none) so it
// overlaps u's compute. At most two units are gathered at once.
const void *shard_gather(ShardState *s, int u, int next);
// Done with unit u's parameters in `phase`: frees them when the strategy reshards then.
void shard_release(ShardState *s, int u, ShardPhase phase);
// Starts a step's gradients: zeroes accumulated full gradients (grad_accum > 1) and marks every
// gradient shard empty, so the step's first reduction overwrites it.
void shard_zero_grads(ShardState *s);
// Gradient buffer (padded) for unit u's backward; zeroed unless it accumulates micro-batches.
float *shard_grad_buffer(ShardState *s, int u);
// u's backward is done: on the last micro-batch its gradient is reduced into grad_shard.
void shard_grad_ready(ShardState *s, int u, int last_micro);
// Waits for every reduction of the step.
void shard_grads_finish(ShardState *s);

// Mixed precision for activations: under --precision bf16 rounds x (n) to bf16 values, the
// storage precision of activations between units; a no-op in fp32.
void shard_cast_activation(ShardState *s, float *x, size_t n);

// The step's statistics in one all-reduce over all ranks, after shard_grads_finish: the loss sum
// (the device double *loss_dev), a flag any rank may raise (preemption), the loss-bearing target
// count (each rank's own), and the global L2 norm of the reduced gradients. The sums of squares are queued per unit on the device and fetched
// with the loss in the step's one wait for the device; only the first replica group adds them,
// so every shard counts once.
typedef struct {
    double loss, flag, tokens, grad_norm;
} ShardStepStats;
void shard_step_stats(ShardState *s, const double *loss_dev, double flag, double tokens, ShardStepStats *out);
// AdamW, one kernel per unit shard: weight decay on the unit's decay ranges, the gradient scaled
// to max norm cfg->grad_clip (torch's clip_grad_norm_ coefficient from grad_norm; <= 0: no clip)
// in the same pass, and under --precision bf16 the bf16 copy the next gathers send, too. The
// gradients are first multiplied by grad_scale (a loss sum's gradients become the mean's), and
// grad_norm is the norm after that.
void shard_adamw_step(ShardState *s, const OptimConfig *cfg, float lr, double grad_norm, double grad_scale);

// After the master shards were overwritten (checkpoint load): refreshes the device and bf16 copies.
void shard_master_changed(ShardState *s);
// Whether master and moments are device buffers (else host memory).
int shard_state_on_device(const ShardState *s);
// A tensor of the training state: state 0 the weights, 1 and 2 AdamW's two moments.
typedef struct {
    int state, unit, tensor;
} ShardTensorRef;
// Collective, after a load: how many tensors of the first nstates states hold a NaN or an
// infinity on any rank, the first `most` of them (in plan order) into found.
int shard_nonfinite(const ShardState *s, int nstates, ShardTensorRef *found, int most);

// The part of tensor t of unit u in this rank's shard: elements [*begin, *begin + count) of the
// flattened tensor, at offset *local in the shard buffers. Returns count (0 if none).
size_t shard_tensor_slice(const ShardState *s, int u, int t, size_t *begin, size_t *local);
// Whether this rank writes its slices of unit u into checkpoints (the unit's first replica group writes).
int shard_is_writer(const ShardState *s, int u);

// Packed units (UnitSpec.packed: QLoRA, a bf16 base): the bytes of unit u's tensor t in this
// rank's shard, [*begin, *begin + count) of the tensor's stored bytes (model_piece_bytes: an nf4
// tensor's packed bytes, a bf16 one's values, another's fp32 values), at byte offset *local in the
// master shard. Returns count (0 if none).
size_t shard_packed_slice(const ShardState *s, int u, int t, size_t *begin, size_t *local);
// Writes tensor t of unit u whole (model_whole_numel fp32 values, at any tp degree) into dst;
// NULL, or what failed.
typedef const char *(*ShardTensorValues)(void *ctx, int u, int t, float *dst);
// Makes this rank's bytes of packed unit u from whole tensors (each nf4 one quantised here, each
// bf16 one rounded to nearest even) and uploads them, one tensor's values at a time on the host.
// NULL, or the first failure of values on this rank (the caller agrees with the others).
const char *shard_fill_packed(ShardState *s, int u, ShardTensorValues values, void *ctx);
// Packed unit u, this tp rank's part of it, into full (numel fp32 on the compute device):
// collective over its group.
void shard_unpack_unit(const ShardState *s, int u, float *full);

// ---- what checkpoints and the run loop read and set (ShardState's fields are the engine's) ----
const ModelPlan *shard_plan(const ShardState *s);
CommGroup *shard_group(const ShardState *s);  // the ranks that split each dense unit
CommGroup *shard_unit_group(const ShardState *s, int u);  // the ranks that split unit u
int shard_unit_member(const ShardState *s, int u);        // this rank holds unit u (expert parallelism)
int shard_num_units(const ShardState *s);
size_t shard_unit_len(const ShardState *s, int u);     // elements of this rank's shard of unit u
size_t shard_unit_padded(const ShardState *s, int u);  // elements of unit u gathered (padded)
size_t shard_unit_packed(const ShardState *s, int u);  // QLoRA: the bytes of a packed unit, else 0
// Unit u's fp32 master shard (host memory under offload; see shard_master_changed) and the copy
// the gathers read (on the compute device; the same buffer unless offloaded).
float *shard_master(const ShardState *s, int u);
const float *shard_device_master(const ShardState *s, int u);
void shard_moments(const ShardState *s, int u, float **exp_avg, float **exp_avg_sq);  // AdamW's, beside the master
const float *shard_grad(const ShardState *s, int u);  // the reduced gradient shard (device)
// optimizer steps taken: AdamW's bias correction, and the step a checkpoint resumes at
int shard_step(const ShardState *s);
void shard_set_step(ShardState *s, int step);

#endif
