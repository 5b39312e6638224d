// export: a checkpoint's weights, config and tokenizer as a Hugging Face model folder (its
// family's architecture), for `fsdpc export` (run/cmd_export.c).
#ifndef FSDPC_CKPT_EXPORT_H
#define FSDPC_CKPT_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

typedef struct {
    const char *output;  // the folder to write: new, empty or an earlier export, unless overwrite
    StDtype dtype;       // the weights' type
    uint64_t max_shard;  // largest safetensors file in bytes; larger models are split, with an index
    int overwrite;       // write into a folder holding other files (never over the export's own inputs)
    int adapter;         // PEFT's adapter folder of a LoRA checkpoint (peft.h) instead of the model
    int accept_lossy;    // write values dtype cannot hold as infinity or NaN instead of refusing the export
} ExportOptions;

// What an export wrote: its parameters, and how many weights took a LoRA checkpoint's adapters
// merged in (W + s B A in fp32; 0: none), with their rank, alpha and scale s
typedef struct {
    size_t params;
    int merged, lora_rank;
    float lora_alpha, lora_scale;
} ExportResult;

// export_checkpoint's outcome when a stop signal ended it (comm_stop_signal, polled per chunk read)
extern const char export_stopped[];

// One rank alone: exports checkpoint file into o->output, every file written as <name>.tmp and
// renamed once all are complete (config.json, or adapter_config.json, last); on failure none is
// left and a folder it created is removed. A LoRA checkpoint exports as the model with its
// adapters merged, or with o->adapter as the adapters alone. NULL with *res set, or the
// one-line error (export_stopped after a stop signal).
const char *export_checkpoint(const char *file, const ExportOptions *o, ExportResult *res);

#endif
