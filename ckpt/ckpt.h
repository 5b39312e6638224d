// ckpt: HDF5 checkpoints in the layout-free DESIGN.md schema (full tensors under Hugging Face
// names); each rank writes and reads only the slices it owns, through MPI-IO.
#ifndef FSDPC_CKPT_H
#define FSDPC_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "../model/config.h"
#include "../shard/shard.h"

typedef struct {
    int step;
    uint64_t tokens_seen;
    uint64_t data_position;  // global training samples consumed
    uint64_t rng_state;      // seed of the sample order
} CkptMeta;

// Writes <dir>/step_<NNNNNNNN>.h5 through a .tmp file renamed once every rank is done.
// Collective. Returns seconds spent; *bytes gets the file's payload size.
double ckpt_save(const char *dir, const ShardState *s, const Config *cfg, const CkptMeta *meta, double *bytes);
// A directory resolves to its newest complete checkpoint, a file to itself. Returns 0 (and
// leaves out empty) when a directory holds none. A missing path is an error.
int ckpt_resolve(const char *path, char *out, size_t len);
// Loads model, optimizer and meta into s; shapes and config are checked against cfg. Collective.
void ckpt_load(const char *file, ShardState *s, const Config *cfg, CkptMeta *meta);
// Loads only the weights (/model) into s, for finetuning: moments and step stay as they are
// (zero after shard_init). Validated like ckpt_load. Collective.
void ckpt_load_weights(const char *file, ShardState *s, const Config *cfg);
// The model config attributes of a checkpoint and its `tokenizer` attribute ("byte" in files
// written before it existed), without tensors. Any rank alone. NULL, or a one-line error.
const char *ckpt_read_config(const char *file, ModelConfig *m, char *tokenizer, size_t tlen);

// One rank alone reading a checkpoint's weights (export).
typedef struct CkptReader CkptReader;
// Opens file and checks its format, config and every /model tensor against plan; NULL with the
// reason in *err.
CkptReader *ckpt_reader_open(const char *file, const ModelPlan *plan, const char **err);
// Elements [begin, begin + count) (count > 0) of /model/<t->name> into dst; NULL or an error.
const char *ckpt_reader_read(CkptReader *r, const TensorSpec *t, size_t begin, size_t count, float *dst);
void ckpt_reader_close(CkptReader *r);
// Keeps the newest `keep` checkpoints in dir (keep <= 0 keeps all). Rank 0 only.
void ckpt_prune(const char *dir, int keep);

#endif
