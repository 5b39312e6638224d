// hf: Hugging Face weights in (safetensors file, index with shards, model directory or hub name,
// read slice by slice) and out (`fsdpc export`: a checkpoint into a model directory), for the
// model families whose descriptors (model/family.h) say how.
#ifndef FSDPC_HF_H
#define FSDPC_HF_H

#include "../base/cli.h"
#include <stddef.h>

#include "ckpt.h"
#include "../model/config.h"
#include "../shard/shard.h"

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
// non-parameter buffers aside), unless allow_unused, which warns instead.
void hf_load(const HfModel *h, ShardState *s, int allow_unused);

// `fsdpc export --checkpoint DIR|FILE --output OUTDIR [--dtype bf16|fp16|fp32] [--max_shard_size BYTES]
// [--overwrite]`: a checkpoint's weights, config and tokenizer as a Hugging Face model directory
// (its family's architecture). OUTDIR is new, empty or an earlier export, unless --overwrite (which replaces only
// files of the names export writes, never the checkpoint or tokenizer files it reads).
// Rank 0 writes; every rank returns the same exit status. args: what cli_parse of export_cli
// filled.
extern const CliTable export_cli;
int hf_export_main(void *args);

#endif
