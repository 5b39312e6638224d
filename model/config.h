// config: the model's configuration (presets, shape checks, derived sizes) and the Config that
// fsdpc's flags fill (run/flags.h: flag names of the PyTorch FSDP seed scripts).
#ifndef FSDPC_CONFIG_H
#define FSDPC_CONFIG_H

#include <stdint.h>

#include "../kernels/kernels.h"
#include "../base/cli.h"

// What --use_profiler (the profiling recipe's flag) records unless told otherwise: the folder its
// tensorboard_trace_handler writes to, and the steps of its torch.profiler.schedule(wait=1,
// warmup=2, active=3), 1-based as logged
#define TRACE_PROFILER_DIR "profile_traces"
enum { TRACE_PROFILER_FIRST = 4, TRACE_PROFILER_LAST = 6 };

// Enumerated settings, parsed once; model/config.c holds each one's list of names (flags, error
// messages, config_describe and logs all read it). Stored as int by the flag parser.
// --sharding, after torch's ShardingStrategy
typedef enum { SHARD_FULL, SHARD_GRAD_OP, SHARD_NONE, SHARD_HYBRID_FULL, SHARD_HYBRID_GRAD_OP } ShardStrategy;
typedef enum { PRECISION_FP32, PRECISION_BF16 } Precision;  // --precision, --reduce_dtype
typedef enum { LR_DECAY_COSINE, LR_DECAY_LINEAR, LR_DECAY_CONSTANT, LR_DECAY_EXPONENTIAL, LR_DECAY_PLATEAU } LrDecay;
typedef enum { ENV_LOCAL, ENV_PBS } RunEnvironment;  // --environment
// --data_format: what finetuning rows are (data/sft.c); --chat_template: how chat rows become text
typedef enum { SFT_AUTO, SFT_TEXT, SFT_IDS, SFT_PROMPT_COMPLETION, SFT_ALPACA, SFT_CHAT } SftFormat;
typedef enum { CHAT_LLAMA2, CHAT_CHATML, CHAT_NONE } ChatTemplate;
extern const CliChoice config_data_formats[], config_chat_templates[];  // their names
// --hidden_act (GPT-NeoX's MLP), as config.json spells it: the exact erf GELU, or one of the three
// names of its tanh approximation, each kept so that an export writes back the name it read
typedef enum { MODEL_ACT_GELU, MODEL_ACT_GELU_NEW, MODEL_ACT_GELU_FAST, MODEL_ACT_GELU_PYTORCH_TANH } ModelAct;
extern const CliChoice config_hidden_acts[];

// SMP's --dataset_type: the format is found from the content, so only synthetic changes anything
enum { DATASET_GPT_JSONL, DATASET_HF, DATASET_SYNTHETIC };

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
} ModelConfig;

// Where each of the model's sizes came from, for the start-up line and `fsdpc plan`: the default
// model (tiny), a flag, the --model_name preset, a recipe's parser default, the family's Hugging
// Face config class, the checkpoint or Hugging Face folder read, the tokenizer, a data file.
typedef enum { SIZE_DEFAULT, SIZE_FLAG, SIZE_PRESET, SIZE_RECIPE, SIZE_FAMILY, SIZE_SOURCE, SIZE_TOKENIZER, SIZE_DATA } SizeOrigin;
enum { SIZE_D, SIZE_L, SIZE_H, SIZE_KV, SIZE_F, SIZE_T, SIZE_V, SIZE_COUNT };

// The recipe flags that take only fsdpc's own behaviour (run/flags.c): they store nothing, but each
// has a place of its own in Config, which is how the flag parser tells settings apart.
enum {
    RECIPE_ONLY_CHECKPOINT_TYPE, RECIPE_ONLY_DATA_TYPE, RECIPE_ONLY_BACKWARD_FETCH, RECIPE_ONLY_WRAP_POLICY, RECIPE_ONLY_BACKEND,
    RECIPE_ONLY_FRAMEWORK, RECIPE_ONLY_NCCL_TEST_LOG, RECIPE_ONLY_COUNT
};

typedef struct {
    ModelConfig model;
    unsigned char size_origin[SIZE_COUNT];  // SizeOrigin of hidden_width ... vocab_size
    // sharding
    ShardStrategy sharding;
    int shard_group_size;
    int tensor_parallel_degree, sequence_parallel;  // the mesh's tp degree (shard/parallel.h); --sequence_parallel
    Precision precision, reduce_dtype;
    int cpu_offload, activation_checkpoints, selective_checkpointing, meta_init;
    int accumulate_unsharded;  // --grad_accum > 1 keeps full gradients and reduces once a step (FSDP no_sync)
    // training
    int batch_size, grad_accum, max_steps, max_epochs, seed;
    int skip_nonfinite_steps;  // updates with a non-finite loss/grad norm skipped before the run stops
    float lr, min_lr, warmup, weight_decay, beta1, beta2, grad_clip, adam_eps;
    LrDecay lr_decay_style;
    int lr_decay_iters;  // steps the decay spans after warm-up (0: to --max_steps); --min_lr after them
    float plateau;       // plateau schedule: steps (below 1: a fraction of --max_steps) held at --lr after warm-up
    int val_batch_size;  // sequences per rank in a validation batch (0: --batch_size)
    int same_seed;       // SMP's: every rank draws as one process would either way (docs/recipes.md)
    int limit_all_gathers, offload_activations, activation_loading_horizon;
    int shard_degree;        // SMP's hybrid shard degree (0: unset): --sharding hybrid-full-shard --shard_group_size N
    int use_synthetic_data;  // SMP's: --train_data synthetic
    // the recipes' flags that change nothing here (docs/recipes.md says why for each)
    struct {
        int use_smp_implementation, patch_neox_rope, enable_memory_profiling, clean_cache, log_reduced_training_loss;
        int data_num_workers, num_experts_per_tok, num_local_experts, forward_prefetch, use_orig_params;
        int preserve_np_state, fast_validation, profile_nsys, fp8_amax_history_len;
        float summary_first_pdrop;
        char fp8_amax_compute_algo[32], model_dir[512];
    } recipe;
    int recipe_only[RECIPE_ONLY_COUNT];  // where the recipe flags that take only fsdpc's own behaviour point
    int recipe_defaults;     // --recipe_defaults: RECIPE_AUTO, RECIPE_NONE or a recipe (run/recipes.h)
    char recipe_line[2048];  // the start-up line naming the recipe whose defaults were taken, or ""
    char recipe_note[512];   // its line on what fsdpc cannot match of that recipe, or ""
    char recipe_no_data[400];  // why that recipe trains nothing without --train_data (never the bundled text), or ""
    // data
    char train_data[512], val_data[512];  // files, folders, globs, Hugging Face dataset folders or hub names
    char dataset_config_name[128];        // the hub dataset's config (C4: "en"); "" the only or default one
    char text_column[128];                // the column / JSON member holding text ("" : "text")
    char data_cache_dir[512];             // where tokenized caches go ("" : cache_default_root)
    char train_split[64], val_split[64];  // 10.FSDP's splits of a dataset with splits ("": train, and validation)
    int zipped_data;                      // SMP's flag: compression is found from the content either way
    int dataset_type;                     // SMP's --dataset_type: DATASET_SYNTHETIC means synthetic tokens
    // finetuning data (docs/data.md, "Finetuning data")
    int data_format;       // SftFormat: what rows are (auto: from their fields)
    int chat_template;     // ChatTemplate of chat rows
    int train_on_inputs;   // every real token of a row bears loss, prompts too
    int packing;           // pack a step's rows into fewer contexts, documents kept apart
    int document_masking;  // streams keep their documents apart (attention, positions, the crossing target)
    char tokenizer[1024];  // byte, a tokenizer.model / tokenizer.json path or a hub name; resolved path after start-up
    // weights in: a safetensors file / index / Hugging Face directory / hub name, or an fsdpc .h5
    char init_from[1024];
    char pretrained_model_name[1024];  // the seed's --pretrained_model_name: --init_from when that is not given
    int finetune;
    int validation_freq, validation_batches;
    // checkpoints
    char checkpoint_dir[512], resume_from_checkpoint[512];
    char run_name[128];  // minimal_fsdp's --run_name: checkpoints go to checkpoint_dir/run_name
    int checkpoint_freq, num_kept_checkpoints;
    int overwrite_checkpoints;  // a run may replace checkpoints of other lineages (never its own input)
    int allow_unused_weights;   // --init_from files may hold tensors the model does not use (warned, not refused)
    int allow_changed_inputs;   // a resume may read another tokenizer or data than its checkpoint's run (warned, not refused)
    // run
    KernDevice device;
    KernAttention attention;  // --attention auto|cudnn|native
    char metrics_file[512];
    char tensorboard_dir[512];  // 10.FSDP's flag: rank 0 writes TensorBoard event files there (run/tboard.h)
    RunEnvironment environment;  // minimal_fsdp's --environment local|pbs: pbs logs the job and checks its node file
    int logging_freq, num_threads, profile;
    int log_timestamps;  // date, level and rank before every log line
    char trace_file[512];          // Chrome trace of steps trace_steps[0]..trace_steps[1] (1-based), or ""
    char trace_dir[512];           // the same steps, a file per rank as torch.profiler's TensorBoard handler writes, or ""
    int trace_steps[2];
    int use_profiler;              // the profiling recipe's switch: TRACE_PROFILER_DIR and its steps
    int use_nsys;                  // the profiling recipe's nsys switch: the launch must run under nsys
    float collective_timeout;      // seconds a collective may wait before the job ends; 0: for ever
    // generate
    char prompt[4096];
    int num_tokens;
    float temperature, top_p;
} Config;

// Fields of ModelConfig that a model source (a checkpoint, a Hugging Face config.json) determines.
enum {
    MODEL_HIDDEN = 1, MODEL_LAYERS = 2, MODEL_HEADS = 4, MODEL_KV_HEADS = 8, MODEL_INTERMEDIATE = 16,
    MODEL_VOCAB = 32, MODEL_CONTEXT = 64, MODEL_ROPE_THETA = 128, MODEL_NORM_EPS = 256, MODEL_TYPE = 512,
    MODEL_ROTARY_PCT = 1024, MODEL_ROPE_SCALING = 2048, MODEL_TIED = 4096, MODEL_WINDOW = 8192, MODEL_ACT = 16384,
    MODEL_ALL = 32767
};

int config_head_dim(const ModelConfig *m);
// the dimensions of each head RoPE rotates: head_dim x rotary_pct, rounded down as Hugging Face's
// int(head_size * rotary_pct)
int config_rotary_dims(const ModelConfig *m);
// one-line summary of the run configuration (stored in checkpoints, logged at start)
void config_describe(const Config *cfg, char *buf, int len);
// checks a model config; returns NULL when valid, else a static message
const char *config_validate_model(const ModelConfig *m);
// fills m with a named preset; returns 0 when the name is unknown
int config_preset(ModelConfig *m, const char *name);
// the names of enumerated settings: their one list (the first entry of a value is its name, later
// ones other spellings the command line accepts), and a value's name
extern const CliChoice config_sharding_names[], config_precision_names[], config_lr_decay_names[];
const char *config_sharding_name(ShardStrategy s);
const char *config_precision_name(Precision p);
const char *config_lr_decay_name(LrDecay d);

#endif
