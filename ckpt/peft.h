// peft: LoRA adapters as PEFT (Hugging Face's parameter-efficient finetuning library) keeps them:
// a folder of adapter_config.json and adapter_model.safetensors, whose tensors are named
// base_model.model.<the model's name> (model.layers.0.self_attn.q_proj.lora_A.weight under that
// prefix), lora_A (r, in) and lora_B (out, r) as fsdpc's adapter units hold them (model/lora.h).
// In: --init_adapter (peft_load). Out: export --adapter (export.c).
#ifndef FSDPC_PEFT_H
#define FSDPC_PEFT_H

#include <stddef.h>

#include "../model/model.h"
#include "../shard/shard.h"

#define PEFT_CONFIG "adapter_config.json"
#define PEFT_WEIGHTS "adapter_model.safetensors"
#define PEFT_PREFIX "base_model.model."  // PeftModel's wrapping of the base model's names

// The short names (q_proj, v_proj: a module's last name component) of the modules plan's
// adapters adapt, each once in plan order, comma-separated: PEFT's target_modules
void peft_targets(const ModelPlan *plan, char *out, size_t len);
// A model source as PEFT's base_model_name_or_path spells it: a snapshot of the hub cache
// (.../models--ORG--NAME/snapshots/REF) as ORG/NAME, any other path as it is
void peft_base_name(const char *path, char *out, size_t len);
// Collective: the PEFT adapter folder dir into s's adapter units (the base stays), after checking
// that adapter_config.json's r, lora_alpha, use_rslora and target_modules are the run's (plan's
// cfg), that its base_model_name_or_path names init_from's model (by the last path component;
// either empty: not compared), and that the safetensors file holds every adapter tensor of the
// plan, at its full shape, in F32/BF16/F16, and nothing else. Each rank reads its own slices
// (hf_read_units), then shard_master_changed; NaN or infinite values are refused. *ntensors:
// the tensors loaded. 0, or -1 with the same line in err on every rank.
int peft_load(const char *dir, ShardState *s, const char *init_from, int *ntensors, char *err, size_t errlen);

#endif
