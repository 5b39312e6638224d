// family: a model family described once. Each family is one file in model/ that defines a
// ModelFamily (its presets, how its config is stored in checkpoints and spelt in Hugging Face's
// config.json, its tensors' Hugging Face names and transforms, and its forward and backward);
// family.c's table lists them. The rest of the program reads descriptors and never names a
// family, so adding one is one file and one table entry (docs/DESIGN.md, "Model families").
#ifndef FSDPC_FAMILY_H
#define FSDPC_FAMILY_H

#include <stddef.h>

#include "config.h"
#include "model.h"

// Fuzz builds of the parsers compile the family files with FAMILY_DESCRIPTION_ONLY: descriptors
// without their code (the parsers read only the description), so kernels/ stays out of the link.
#ifdef FAMILY_DESCRIPTION_ONLY
#define FAMILY_CODE(f) NULL
#else
#define FAMILY_CODE(f) f
#endif

// A --model_name preset: the sizes it sets. Lists end with a {NULL} entry.
typedef struct {
    const char *name;
    int hidden_width, num_layers, num_heads, num_key_value_heads, intermediate_size, max_context_width, vocab_size;
    float rope_theta;           // 0: the default (10000)
    float rope_scaling_factor;  // 0: none; else Llama-3's scaling, its other parameters Llama-3.1's
    int tie_word_embeddings;    // lm_head is the embedding (families with tie_option)
    int sliding_window;         // 0: full attention
    ModelAct hidden_act;        // families with hidden_act_option
    int num_experts, num_experts_per_tok;  // families with experts_option
} FamilyPreset;

typedef enum { FAMILY_INT, FAMILY_FLOAT, FAMILY_BOOL, FAMILY_INT_OPTIONAL, FAMILY_CHOICE } FamilyType;

// A ModelConfig field stored as a checkpoint root attribute, named as its --flag. INT fields are
// in [1, INT_MAX] and required; INT_OPTIONAL ones in [0, INT_MAX] (0: the setting is off) and
// BOOL ones (an int) 0 or 1, both 0 in a file written before the attribute existed; FLOAT fields
// positive and finite, and a file written before the attribute existed has `absent`. CHOICE
// fields are an int, one of `choices`' values, which are 0 .. n-1 in order (0 when the file
// predates them). INT, BOOL,
// INT_OPTIONAL and CHOICE fields are the model (its tensors' layout, its attention, its
// activation). Lists end with a {NULL} entry.
typedef struct {
    const char *name;
    FamilyType type;
    size_t off;  // offsetof(ModelConfig, ...): an int or a float
    float absent;
    const CliChoice *choices;  // CHOICE: the values and their names
} FamilyField;

// A ModelConfig field as a Hugging Face config.json key, read on import. Required keys must be
// there; an optional INT left out keeps what was there before (num_key_value_heads: the heads),
// an optional FLOAT takes `absent` (Hugging Face's default). A CHOICE key is a string, one of
// `choices`' names (left out: value 0); any other is refused, naming those. Lists end with a
// {NULL} entry.
typedef struct {
    const char *key;
    unsigned bit;  // MODEL_* (config.h)
    FamilyType type;
    size_t off;
    int required;
    float absent;
    const CliChoice *choices;
} FamilyHfKey;

// A config.json setting the family cannot honour: a boolean that must not be true (value NULL),
// one that must not be false (must_be_true), or a string that must be `value` when given. Refused with "fsdpc's <display> <why>".
typedef struct {
    const char *key, *value, *why;
    int must_be_true;  // instead: a boolean that must not be false (a feature the family always has)
} FamilyHfCheck;

// Rotary embeddings in config.json, in both spellings: the top-level theta key (its default is
// in the keys list) and scaling object of older transformers versions, and the parameters
// object of newer ones ({"rope_theta": ..., "rope_type": "default"}), whose theta is read when
// the top-level key is absent (so is a top-level rope_theta, newer transformers' spelling of a
// family whose own key is another). A rope_type other than "default" is refused by name in either,
// except `scaled`: the rope_type of Llama-3's frequency scaling (factor, low_freq_factor,
// high_freq_factor, original_max_position_embeddings: ModelConfig's rope_scaling_*) when the
// family has it. partial: the family's partial-rotary key (GPT-NeoX's rotary_pct), or NULL; when
// it is absent, newer transformers' partial_rotary_factor (top level, or in the parameters
// object) is read.
typedef struct {
    const char *theta, *scaling, *parameters, *partial, *scaled;
} FamilyHfRope;

// How a Hugging Face model directory becomes this family (import). NULL lists: not importable.
typedef struct {
    const char *const *model_types;    // config.json model_type values read as this family (absent reads as it too)
    const char *const *architectures;  // "architectures" entries read as it (an empty list does not object)
    const char *what;                  // for messages: what fsdpc loads as this family
    const FamilyHfKey *keys;
    const char *context;           // the model's length
    FamilyHfRope rope;             // NULLs for a family without rotary embeddings
    const FamilyHfCheck *checks;   // ends with {NULL}
    // without config.json the sizes come from tensor shapes: the (V, D) embedding, block 0's
    // (F, D) MLP weight, the block name pattern (one %d) that counts the layers
    const char *embed, *mlp, *layer_fmt;
    // a tied pair: safetensors stores `tied` once, under `tied_to`'s name. With tie_option and
    // tie_word_embeddings true in config.json the model is tied; otherwise fsdpc trains a copy
    const char *tied, *tied_to;
} FamilyHfImport;

// One config.json key an export writes, in order.
typedef enum {
    FAMILY_OUT_RAW,        // raw: the JSON text
    FAMILY_OUT_INT,        // the int field at off
    FAMILY_OUT_FLOAT,      // the float field at off, in its shortest exact spelling
    FAMILY_OUT_POSITIONS,  // the model's length: the source's own when longer than the trained context
    FAMILY_OUT_MLP_WIDTH,  // intermediate_size, null when it is mlp_ratio x hidden_width (the family's default)
    FAMILY_OUT_BOS, FAMILY_OUT_EOS,  // the source's ids, else the tokenizer's (null without)
    FAMILY_OUT_PAD,        // the source's id, else left out
    FAMILY_OUT_DTYPE,      // the weights' torch dtype
    FAMILY_OUT_ROPE_SCALING,  // null, or the object of hf_import.rope.scaled's rope_type
    FAMILY_OUT_BOOL,       // the int field at off as true / false
    FAMILY_OUT_CHOICE,     // the int field at off as the string `choices` names it
    // settings that are off at 0 (a sliding window): the entry is left out when the int field at
    // off is 0 (RAW_IF_SET, INT_IF_SET) or when it is not (RAW_UNLESS_SET); a key may have one
    // entry of each kind, so its value follows the setting (Mistral's architecture, Llama's without)
    FAMILY_OUT_RAW_IF_SET, FAMILY_OUT_RAW_UNLESS_SET, FAMILY_OUT_INT_IF_SET,
} FamilyOutKind;
typedef struct {
    const char *key;
    FamilyOutKind kind;
    const char *raw;
    size_t off;
    const CliChoice *choices;  // OUT_CHOICE
} FamilyHfOut;

// How `fsdpc export` writes the family as a Hugging Face model directory.
typedef struct {
    const char *architecture;   // for messages
    const FamilyHfOut *config;  // config.json's keys, in order; ends with {NULL}
    // 2-D tensors whose names start with this are stored transposed ((in, out): GPT-style Conv1D)
    const char *transposed;
} FamilyHfExport;

struct ModelFamily {
    const char *model_type;  // the checkpoint attribute and --model_type
    const char *short_name;  // the seed recipes' --model spelling (may equal model_type)
    const char *display;     // in messages: "fsdpc's <display> has no biases"
    const FamilyPreset *presets;
    // the architecture, as far as config and validation need it
    int gqa;        // grouped-query attention: num_key_value_heads may be below num_heads (else equal, and not stored)
    int rope;       // rotary positions: rope_theta applies, head dimension even
    int gated_mlp;  // the MLP's gate and up projections are one GEMM of 2 x intermediate_size rows
    int mlp_ratio;  // intermediate_size defaults to mlp_ratio x hidden_width when not given (0: the preset's)
    float rotary_pct;  // partial rotary: --rotary_pct applies, with this default (0: every head dimension rotates)
    int tie_option;    // tie_word_embeddings may be set: lm_head is then the embedding, trained as one tensor
    int sliding_window;  // its attention may be windowed (--sliding_window; a checkpoint field of the family)
    int hidden_act_option;  // its MLP's GELU is --hidden_act's (a checkpoint field of the family); else fixed
    int experts_option;     // its MLP is a mixture of experts (model/moe.h): --num_experts, --num_experts_per_tok
    int attn_dropout;       // --dropout also drops its attention probabilities (model_attn_dropout)
    const char *lora_targets;  // --lora_target_modules when not given: PEFT's default for the family
    // The sizes of a run that gives --hidden_width, --num_layers or --num_heads without --model_name
    // and leaves others out: Hugging Face's config class for the family (its name is `name`) and
    // its defaults. num_key_value_heads 0: one per head; intermediate_size 0: mlp_ratio x width.
    FamilyPreset hf_defaults;
    const FamilyField *ckpt_fields;  // the checkpoint attributes of its config
    FamilyHfImport hf_import;
    FamilyHfExport hf_export;
    // the model (model.h): plan, activations, forward and backward
    void (*plan_build)(ModelPlan *plan);  // fills units and the stage indices from plan->cfg
    // allocates every buffer this family uses through model_acts_buf (so sizes can be counted)
    void (*acts_alloc)(Activations *a, const ModelConfig *c, size_t nslots, int with_kv_cache);
    void (*embed_fwd)(const ModelPlan *plan, const void *p, Activations *a, int T, int pos0);
    void (*block_fwd)(const ModelPlan *plan, int layer, const void *const *p, Activations *a, int T, int pos0);
    void (*head_fwd_bwd)(const ModelPlan *plan, const void *p, float *g, Activations *a, int with_targets, int T,
                         float dscale);
    void (*block_bwd)(const ModelPlan *plan, int layer, const void *const *p, float *const *g, Activations *a);
    void (*embed_bwd)(const ModelPlan *plan, float *g, Activations *a);
    // training FLOPs (forward + backward) per token at sequence length T
    double (*flops_per_token)(const ModelPlan *plan, int T);
};

// the table: families 0 .. family_count()-1
size_t family_count(void);
const ModelFamily *family_at(size_t i);
// the family of a --model_type / checkpoint model_type, or NULL
const ModelFamily *family_find(const char *model_type);
// the families' model_types joined by sep ("llama_v2|mingpt"), for messages; those of the
// families with rotary positions only when rope_only
const char *family_names(const char *sep, int rope_only);
// the preset called name and its family, or NULL
const FamilyPreset *family_preset(const char *name, const ModelFamily **family);
// every preset's name, ", "-separated
const char *family_preset_names(void);

#endif
