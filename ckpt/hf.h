// hf: Hugging Face weights in (safetensors file, index with shards, model directory or hub name,
// read slice by slice), for the model families whose descriptors (model/family.h) say how; the
// way out is export.h.
#ifndef FSDPC_HF_H
#define FSDPC_HF_H

#include <stddef.h>

#include "../base/json.h"
#include "../model/config.h"
#include "../model/family.h"
#include "../shard/shard.h"
#include "ckpt.h"
#include "safetensors.h"

typedef struct HfModel HfModel;
// Opens a Hugging Face model source: reads config.json (when present) and every safetensors header
// (no tensor data). NULL with a one-line reason in err on failure (missing file, bad JSON, truncated
// file, header length past the end of the file, overlapping/out-of-range data offsets, unsupported dtype...).
HfModel *hf_open(const char *spec, char *err, size_t errlen);
void hf_close(HfModel *h);
// Which model-config fields the source determines (MODEL_* bits, config.h; MODEL_TYPE: its
// family), and their values into *m.
unsigned hf_model_config(const HfModel *h, ModelConfig *m);
const char *hf_tokenizer_path(const HfModel *h);  // tokenizer.model (preferred) or tokenizer.json beside the weights, else NULL
const char *hf_source_path(const HfModel *h);     // resolved path, for log lines
// Moves the source's side files (config.json, tokenizer_config.json, ...: ckpt_source_names) into
// *src, for the run's checkpoints; the caller frees them with ckpt_source_free.
void hf_take_source(HfModel *h, CkptSource *src);
// Collective: every rank reads only the byte ranges of its own slices (shard_tensor_slice) with pread,
// converts fp32/bf16/fp16 to the fp32 master shards (and uploads when shard_state_on_device), then
// shard_master_changed(s). A missing tensor, a wrong shape, or an unsupported dtype gives one line
// naming the tensor and the file, on every rank; so do tensors the model does not use (known
// non-parameter buffers aside), unless allow_unused, which warns instead. 0, or -1 with that line
// in err on every rank.
int hf_load(const HfModel *h, ShardState *s, int allow_unused, char *err, size_t errlen);

// Shared with peft.c (adapters in): the safetensors tensor a model tensor loads from, checked,
// with the index of its file in *file; NULL with the line in msg.
typedef const StTensor *(*HfSourceFn)(const void *ctx, const TensorSpec *spec, int *file, char *msg, size_t len);
// This rank's slices (shard_tensor_slice; a tp part as runs of the whole tensor, model_tp_run) of
// every tensor of units [u0, u1), read from files as fp32 into the master shards (uploaded under
// shard_state_on_device). NULL, or this rank's error line (in msg, or st_read_f32's): the caller
// agrees on it (comm_agree), then calls shard_master_changed.
const char *hf_read_units(ShardState *s, int u0, int u1, const StFile *files, int nfiles, HfSourceFn find, const void *ctx,
                          char *msg, size_t len);
// Collective, after shard_master_changed: 0, or -1 with a line in err naming the first tensors that
// hold NaN or infinite values, read from path (`what` they are, for the message).
int hf_check_finite(const ShardState *s, const char *path, const char *what, char *err, size_t errlen);

// Shared with export.c: paths, and the model length a config.json gives.
enum { HF_PATH = 4096 };
// elements per device upload or export chunk (64 MiB of fp32): bounded memory whatever the model size
#define HF_CHUNK ((size_t)16 << 20)
// tokenizer.model, else tokenizer.json, in dir (a heap path the caller frees); NULL when neither
char *hf_find_tokenizer(const char *dir);
// The model's length as family im spells it in config c (path: for the error): 1 with *out
// set, 0 when unset, -1 with err set.
int hf_context(const JsonValue *c, const FamilyHfImport *im, const char *path, int *out, char *err, size_t len);

#endif
