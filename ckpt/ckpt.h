// ckpt: HDF5 checkpoints in the layout-free docs/DESIGN.md schema (full tensors under Hugging Face
// names, each with the CRC-32 of its contents); each rank writes and reads only the slices it
// owns, through MPI-IO. This header is the one the rest of the program includes: it declares the
// checkpoint files (written, published, verified, read: ckpt.c) and includes the headers of the
// other concerns, the model source's files (source.h), run ids, lineages and pruning (lineage.h),
// the folder's writer lock (claim.h) and which checkpoint a resume path names (resolve.h). The
// HDF5 side (h5.h) is ckpt/'s own.
#ifndef FSDPC_CKPT_H
#define FSDPC_CKPT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "../model/config.h"
#include "../shard/shard.h"
#include "source.h"

#define CKPT_RUN_ID_LEN 16  // hex digits of a run id
#define CKPT_LINEAGE_MAX 32  // ancestors a checkpoint remembers; older ones are never pruned
#define CKPT_INPUTS_LEN 8192  // bytes of CkptMeta.inputs, its NUL included

// The checkpoint section of the run's configuration (run/config.h): where checkpoints go, what a
// run resumes or initialises from, and what it may replace or accept
typedef struct {
    // the paths are heap strings of any length (base/cli.h's CLI_PATH), "" when unset
    char *checkpoint_dir, *resume_from_checkpoint;
    char *run_name;  // minimal_fsdp's --run_name: checkpoints go to checkpoint_dir/run_name
    int checkpoint_freq, num_kept_checkpoints;
    int overwrite_checkpoints;  // a run may replace checkpoints of other lineages (never its own input)
    int async_checkpoint;  // checkpoints staged in host memory and written in the background (CkptAsync)
    int keep_snapshot;     // the last checkpoint step's state kept in host memory (CkptSnapshot), for rollbacks
    // weights in: a safetensors file / index / Hugging Face directory / hub name, or an fsdpc .h5
    char *init_from;
    char *init_adapter;  // a PEFT LoRA adapter folder loaded into the adapters after the base (ckpt/peft.h)
    char *pretrained_model_name;  // the seed's --pretrained_model_name: --init_from when that is not given
    int finetune;
    int allow_unused_weights;  // --init_from files may hold tensors the model does not use (warned, not refused)
    int allow_random_weights;  // a run that trains nothing may evaluate or generate from the seed's random weights
    int allow_changed_inputs;  // a resume may read another tokenizer or data than its checkpoint's run (warned, not refused)
} CkptConfig;

typedef struct {
    int step;
    uint64_t tokens_seen;
    uint64_t data_position;  // global training samples consumed
    uint64_t rng_state;      // seed of the sample order
    char run_id[CKPT_RUN_ID_LEN + 1];  // the run that wrote it ("" before format_version 2)
    char parent[PATH_MAX];  // the checkpoint (or source) that run resumed or initialised from, "" if fresh
    // the run's ancestry, nearest first: "<run_id>:<step>" of the checkpoint each resumed from
    char lineage[CKPT_LINEAGE_MAX * (CKPT_RUN_ID_LEN + 12)];
    // what defines the run besides its flags (the tokenizer's checksum, the data sources'
    // identities): one line of text, compared on resume; "" in files written before it existed
    char inputs[CKPT_INPUTS_LEN];
    // the global sample indices rollbacks skipped (--on_nonfinite rollback), ascending, nskipped of
    // them (NULL: none): the dataset /skipped_samples; ckpt_load allocates them (the caller frees)
    uint64_t *skipped;
    size_t nskipped;
} CkptMeta;

// Whether a checkpoint's run_inputs are the caller's run's (train.c: they name its training data).
typedef int (*CkptOwnsFn)(const char *run_inputs, void *ctx);

typedef struct {
    double seconds, bytes;  // time spent; payload size
    char *path;             // the published file (heap: the caller frees it, whether the save worked or not)
} CkptSaved;

// The longest name a checkpoint folder holds: a checkpoint's temporary, step_<N>.h5.<run id>.tmp
#define CKPT_LONGEST_NAME "step_2147483647.h5.ffffffffffffffff.tmp"

// The error lines of ckpt/ fit in this many bytes (comm_fail_all's line): give err that much.
#define CKPT_ERR_LEN 2048

// Bytes of a checkpoint of plan: every weight (an NF4 one as its packed bytes) and the AdamW moments
// of the units that train; the HDF5 metadata aside.
double ckpt_state_bytes(const ModelPlan *plan);
// Writes <dir>/step_<NNNNNNNN>.h5 through <that>.<run_id>.tmp, renamed once every rank is done
// (and, when the directory is claimed, only while the claim still holds, and only over a file
// the claim's rules let it replace). Collective: 0, or -1 with the same line in err on every rank
// (a full disk found before writing, a publish refused: the .tmp is removed). A write that failed
// part-way ends every rank here with one error line, after removing the .tmp (comm_abort_all:
// parallel HDF5 cannot be shut down cleanly after it).
// Also writes src (NULL: none) under /source; the attributes name model m, the run (`run`: its
// config_describe line) and its tokenizer.
int ckpt_save(const char *dir, const ShardState *s, const ModelConfig *m, const char *run, const char *tokenizer,
              const CkptMeta *meta, const CkptSource *src, CkptSaved *out, char *err, size_t errlen);
// Checkpoints written in the background (--async_checkpoint; docs/DESIGN.md): ckpt_save_async
// copies this rank's slices into a staging buffer and returns, a writer thread writes and
// publishes them as ckpt_save does (and prunes after it), and ckpt_async_wait joins it. One write
// is in flight at a time.
typedef struct CkptAsync CkptAsync;
// --keep_snapshot (docs/DESIGN.md, "Snapshots and rollback"): a host copy of every slice of the
// three state groups this rank holds (also those it does not write: a replica's, a tp rank's
// duplicate, so every rank restores its own shards), and the step it was taken at.
typedef struct CkptSnapshot CkptSnapshot;
// Its bytes on this rank (pinned host memory on a GPU; the tracker counts it as "staging").
size_t ckpt_snapshot_bytes(const ShardState *s);
CkptSnapshot *ckpt_snapshot_new(const ShardState *s);
void ckpt_snapshot_free(CkptSnapshot *k);
// Copies s's state into k now, on the calling thread (the one owning the device).
void ckpt_snapshot_take(CkptSnapshot *k, const ShardState *s);
// The step of the state k holds (-1: none taken).
int ckpt_snapshot_step(const CkptSnapshot *k);
// Puts k's state back into s (after a's copy of the shards is taken, when a write is in flight;
// a may be NULL): weights, moments, the device's and bf16 copies, and the step, which it returns.
int ckpt_snapshot_restore(CkptSnapshot *k, CkptAsync *a, ShardState *s);
// The bytes of this rank's slices of a checkpoint of s: the staging buffer's size without a snapshot.
size_t ckpt_stage_bytes(const ShardState *s);
// Collective, after shard_init: the writer's communicator and the staging buffer (pinned host
// memory on a GPU; the tracker counts it as "staging"); with k the staging buffer is k's, so each
// checkpoint's staged state becomes the snapshot (k holds every slice: the writer writes its part).
CkptAsync *ckpt_async_new(const ShardState *s, CkptSnapshot *k);
void ckpt_async_free(CkptAsync *a);
// Collective: the checks of ckpt_save (0, or -1 with the agreed line in err and nothing started),
// then the write started, its first act a copy of s's slices (queued on the device's copy stream by
// the main thread when they are on the device; ckpt_async_fence before s changes); keep and resumed are ckpt_prune's. The caller has waited
// for the previous write. A write that fails part-way ends the job from the writer thread, as
// ckpt_save's does.
int ckpt_save_async(CkptAsync *a, const char *dir, const ShardState *s, const ModelConfig *m, const char *run,
                    const char *tokenizer, const CkptMeta *meta, const CkptSource *src, int keep, const char *resumed, char *err,
                    size_t errlen);
// Main thread, before the shards change (the optimizer's update): waits until the write in flight,
// if any, has its copy of them (made while the next step computed: on the CPU by the writer thread,
// from a GPU on the copy stream, which only the main thread waits for; the writer waits for that).
void ckpt_async_fence(CkptAsync *a);
// Whether a write is in flight (a may be NULL)
int ckpt_async_busy(const CkptAsync *a);
// Collective: waits for the write in flight, if any (*waited: the seconds spent waiting). 0 once it
// is published, or -1 with the agreed line in err when its publish was refused.
int ckpt_async_wait(CkptAsync *a, double *waited, char *err, size_t errlen);
// Whether file is a complete checkpoint: every attribute, every tensor's shape and type, and
// every tensor's checksum (the ranks read a part each, in bounded chunks). Collective: 0 with
// *why NULL, or the same one-line reason in *why on every rank (valid until the next call); -1
// with the line in err on every rank when the ranks see different files there.
int ckpt_verify(const char *file, const char **why, char *err, size_t errlen);
// Loads model, optimizer and meta into s; shapes and config are checked against s's model,
// checksums against the slices read. Collective: 0, or -1 with the same line in err on every rank.
int ckpt_load(const char *file, ShardState *s, CkptMeta *meta, char *err, size_t errlen);
// Loads only the weights (/model) into s, for finetuning: moments and step stay as they are
// (zero after shard_init). Validated like ckpt_load. Collective: 0, or -1 with the line in err.
int ckpt_load_weights(const char *file, ShardState *s, char *err, size_t errlen);
// The model config attributes of a checkpoint and its `tokenizer` attribute ("byte" in files
// written before it existed), without tensors. Any rank alone. NULL, or a one-line error.
const char *ckpt_read_config(const char *file, ModelConfig *m, char *tokenizer, size_t tlen);

// A checkpoint's metadata (step, run id, lineage, run_inputs...), without tensors. Any rank
// alone. NULL, or a one-line error.
const char *ckpt_read_meta(const char *file, CkptMeta *meta);
// Collective, before the ranks open file together: each rank's view of it (its size and a CRC of
// its first MiB and last 64 KiB, or why it cannot be read) must be rank 0's. NULL, or on every
// rank the same line naming the first rank that differs (valid until the next call).
const char *ckpt_check_same_file(const char *file);

// One rank alone reading a checkpoint's weights (export).
typedef struct CkptReader CkptReader;
// Opens file and checks its format, config and every /model tensor against plan; NULL with the
// reason in *err.
CkptReader *ckpt_reader_open(const char *file, const ModelPlan *plan, const char **err);
// Elements [begin, begin + count) (count > 0) of /model/<t->name> into dst; NULL or an error. A
// tensor read from its start to its end in order is checked against its checksum.
const char *ckpt_reader_read(CkptReader *r, const TensorSpec *t, size_t begin, size_t count, float *dst);
void ckpt_reader_close(CkptReader *r);

// The other concerns' headers, so that the rest of the program includes this one alone.
#include "claim.h"
#include "lineage.h"
#include "resolve.h"

#endif
