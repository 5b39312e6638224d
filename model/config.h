// config: the model's configuration (presets, shape checks, derived sizes). The whole run's
// configuration, of which it is one section, is run/config.h's Config.
#ifndef FSDPC_CONFIG_H
#define FSDPC_CONFIG_H

#include <stdint.h>

#include "../base/cli.h"

// --hidden_act (GPT-NeoX's MLP), as config.json spells it: the exact erf GELU, or one of the three
// names of its tanh approximation, each kept so that an export writes back the name it read
typedef enum { MODEL_ACT_GELU, MODEL_ACT_GELU_NEW, MODEL_ACT_GELU_FAST, MODEL_ACT_GELU_PYTORCH_TANH } ModelAct;
extern const CliChoice config_hidden_acts[];

typedef struct {
    char model_type[16];  // the family (model/family.h): its model_type
    char model_name[32];  // preset the sizes came from
    int hidden_width;     // D
    int num_layers;       // L
    int num_heads;        // H
    int num_key_value_heads;  // KV (grouped-query attention)
    int intermediate_size;    // F
    int max_context_width;    // T
    int vocab_size;           // V
    int sliding_window;       // a query sees the last sliding_window positions, itself included (0: all)
    float rope_theta;
    float rotary_pct;     // partial rotary (GPT-NeoX): the share of each head's dimensions RoPE rotates; else 1
    // Llama-3's RoPE frequency scaling (Hugging Face rope_type "llama3"): wavelengths longer than
    // original_context / low_freq_factor are divided by factor, those shorter than
    // original_context / high_freq_factor kept, the band between interpolated. factor 1: none.
    float rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_context;
    int tie_word_embeddings;  // lm_head is the embedding (Llama-3.2 1B/3B); families with tie_option
    ModelAct hidden_act;      // families with hidden_act_option (the others' activation is fixed)
    float norm_eps;
    float initializer_range;
    float dropout;        // training only: residual branches (both), embeddings and attention probabilities (minGPT)
    // a mixture of experts (families with experts_option): each block's MLP is E experts of width
    // F, a router sends each token to K of them. 0 experts: a dense MLP
    int num_experts;          // E
    int num_experts_per_tok;  // K
    // training only: the router's load-balancing (Switch) and z (ST-MoE) losses' weights, and its
    // input's jitter (Mixtral's: each element times U(1 - j, 1 + j))
    float router_aux_loss_coef, router_z_loss_coef, router_jitter_noise;
    float capacity_factor;  // 0: dropless (every token reaches its experts)
    // LoRA (model/lora.h): adapters of rank lora_rank on the block projections lora_target_modules
    // names (Hugging Face module names, comma-separated, or all-linear), scaled alpha/r (rsLoRA:
    // alpha/sqrt(r)), their input dropped out with lora_dropout; every other weight is frozen.
    // Rank 0: no adapters, every weight trains.
    int lora_rank;
    float lora_alpha, lora_dropout;
    int use_rslora;
    char lora_target_modules[256];
    // QLoRA (lora_rank > 0): the frozen base's block linear weights stored in 4-bit NormalFloat
    // (kernels.h kern_nf4_*), dequantised when their unit is gathered; MODEL_QUANT_NONE: as trained
    int quantize_base;
    // LoRA under --precision bf16: the frozen base's tensors (those quantize_base leaves) stored as
    // bf16 values, the values its gathers would round to anyway. Set by the run from its sharding
    // section (shard_base_bf16) before its plan is built; not stored in checkpoints, whose
    // datasets hold those values as fp32
    int base_bf16;
} ModelConfig;

typedef enum { MODEL_QUANT_NONE, MODEL_QUANT_NF4 } ModelQuant;
extern const CliChoice config_quantize_names[];

enum { CONFIG_MAX_EXPERTS = 64 };  // a block unit holds each expert's 3 tensors (model.h MAX_UNIT_TENSORS)

// Where each of the model's sizes came from, for the start-up line and `fsdpc plan`: the default
// model (tiny), a flag, the --model_name preset, a recipe's parser default, the family's Hugging
// Face config class, the checkpoint or Hugging Face folder read, the tokenizer, a data file.
typedef enum { SIZE_DEFAULT, SIZE_FLAG, SIZE_PRESET, SIZE_RECIPE, SIZE_FAMILY, SIZE_SOURCE, SIZE_TOKENIZER, SIZE_DATA } SizeOrigin;
enum { SIZE_D, SIZE_L, SIZE_H, SIZE_KV, SIZE_F, SIZE_T, SIZE_V, SIZE_COUNT };

// Fields of ModelConfig that a model source (a checkpoint, a Hugging Face config.json) determines.
enum {
    MODEL_HIDDEN = 1, MODEL_LAYERS = 2, MODEL_HEADS = 4, MODEL_KV_HEADS = 8, MODEL_INTERMEDIATE = 16,
    MODEL_VOCAB = 32, MODEL_CONTEXT = 64, MODEL_ROPE_THETA = 128, MODEL_NORM_EPS = 256, MODEL_TYPE = 512,
    MODEL_ROTARY_PCT = 1024, MODEL_ROPE_SCALING = 2048, MODEL_TIED = 4096, MODEL_WINDOW = 8192, MODEL_ACT = 16384,
    MODEL_EXPERTS = 32768, MODEL_EXPERTS_PER_TOK = 65536, MODEL_ALL = 131071
};

int config_head_dim(const ModelConfig *m);
// the dimensions of each head RoPE rotates: head_dim x rotary_pct, rounded down as Hugging Face's
// int(head_size * rotary_pct)
int config_rotary_dims(const ModelConfig *m);
// checks a model config; returns NULL when valid, else a static message
const char *config_validate_model(const ModelConfig *m);
// fills m with a named preset; returns 0 when the name is unknown
int config_preset(ModelConfig *m, const char *name);
#endif
