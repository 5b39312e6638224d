// flags: the table of fsdpc's own flags (parsed by base/cli), the recipes' defaults taken into
// it, and the checks of the whole configuration, which end the job with one line (see flags.h).
#include "flags.h"

#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "../base/checked.h"
#include "../base/path.h"
#include "../comm/comm.h"
#include "../model/family.h"
#include "recipes.h"

// The names of the settings that only the command line has (each section's own are its module's:
// --hidden_act's model/config.c, sharding's, precision's and the schedule's shard/shard_config.c,
// the finetuning formats' data/): first entry of a value its name, then other spellings.
static const CliChoice device_names[] = {
    {"auto", KERN_DEVICE_AUTO}, {"cpu", KERN_DEVICE_CPU}, {"cuda", KERN_DEVICE_CUDA}, {NULL, 0}};
static const CliChoice attention_names[] = {
    {"auto", KERN_ATTENTION_AUTO}, {"cudnn", KERN_ATTENTION_CUDNN}, {"native", KERN_ATTENTION_NATIVE}, {NULL, 0}};
static const CliChoice dataset_type_names[] = {
    {"gpt_jsonl", DATASET_GPT_JSONL}, {"hf", DATASET_HF}, {"synthetic", DATASET_SYNTHETIC}, {NULL, 0}};
static const CliChoice environment_names[] = {{"local", ENV_LOCAL}, {"pbs", ENV_PBS}, {NULL, 0}};
// model_type stays a string (checkpoints and config.json name the family); these number its names,
// family i as i, from the family table (family_choices fills them before parsing)
enum { MAX_FAMILIES = 32 };
static CliChoice model_type_names[MAX_FAMILIES + 1];
// the seed recipes' spellings of those settings: each family's short name, and its model_type
static CliChoice model_spellings[2 * MAX_FAMILIES + 1];
static const CliChoice strategy_spellings[] = {
    {"full", SHARD_FULL}, {"hybrid", SHARD_HYBRID_FULL}, {"fsdp", SHARD_FULL}, {"hsdp", SHARD_HYBRID_FULL}, {"ddp", SHARD_NONE},
    // SMP's (PyTorch's ShardingStrategy names)
    {"full_shard", SHARD_FULL}, {"shard_grad_op", SHARD_GRAD_OP}, {"no_shard", SHARD_NONE}, {"hybrid_shard", SHARD_HYBRID_FULL},
    {"_hybrid_shard_zero2", SHARD_HYBRID_GRAD_OP}, {NULL, 0}};
static const CliChoice attention_spellings[] = {{"1", KERN_ATTENTION_AUTO}, {"0", KERN_ATTENTION_NATIVE}, {NULL, 0}};
static const CliChoice bf16_values[] = {{"1", PRECISION_BF16}, {"0", PRECISION_FP32}, {NULL, 0}};  // true, false
_Static_assert(sizeof(ShardStrategy) == sizeof(int) && sizeof(Precision) == sizeof(int) && sizeof(LrDecay) == sizeof(int) &&
                   sizeof(KernDevice) == sizeof(int) && sizeof(KernAttention) == sizeof(int) &&
                   sizeof(RunEnvironment) == sizeof(int) && sizeof(ModelAct) == sizeof(int),
               "the flag parser stores enumerated settings as int");

// --sliding_window N, or SMP's None (its parser's default) for none
static const char *parse_window(void *dst, const char *v) {
    static char msg[256];
    char *end;
    long w = strtol(v, &end, 10);
    int *window = &((Config *)dst)->model.sliding_window;
    if (!strcmp(v, "None") || !strcmp(v, "none")) return *window = 0, NULL;
    if (!*v || *end || w < 0 || w > 2147483647L)
        return snprintf(msg, sizeof msg, "--sliding_window expects a window of N >= 0 tokens or None, got '%s'", v), msg;
    *window = (int)w;
    return NULL;
}

// --trace_steps A:B (alias --profile_steps), the 1-based steps as logged; or W,U,A, the wait,
// warmup and active steps of a torch.profiler.schedule, whose active steps are W+U+1..W+U+A
static const char *parse_trace_steps(void *dst, const char *v) {
    static char msg[300];
    int *steps = ((Config *)dst)->run.trace_steps, w, u, a, n = 0;
    if (sscanf(v, "%d,%d,%d%n", &w, &u, &a, &n) == 3 && !v[n] && w >= 0 && u >= 0 && a >= 1 && u <= 1000000000 &&
        a <= 1000000000 && w <= 1000000000 - u - a)  // the steps stay ints
        return steps[0] = w + u + 1, steps[1] = w + u + a, NULL;
    n = 0;
    if (sscanf(v, "%d:%d%n", &steps[0], &steps[1], &n) != 2 || v[n] || steps[0] < 1 || steps[1] < steps[0]) {
        return err_text(msg, sizeof msg, "--trace_steps must be A:B with 1 <= A <= B (steps as logged, e.g. 2:4), or W,U,A as "
                 "torch.profiler.schedule's wait,warmup,active (e.g. 1,2,3: steps 4-6), got '%s'", v);
    }
    return NULL;
}

// --model_name: the preset's sizes, which size flags anywhere on the command line override
static const char *apply_preset(void *dst, const char *name) {
    static char msg[512];
    if (config_preset(&((Config *)dst)->model, name)) return NULL;
    return err_text(msg, sizeof msg, "--model_name '%s' is not a preset (%s)", name, family_preset_names());
}

// --model_type mistral: the Llama family as MistralConfig builds it (mistral_defaults)
static int type_mistral;

// --model_type: a family's model_type; the recipes' names of models fsdpc does not build are
// refused with what they are
static const char *set_model_type(void *dst, const char *v) {
    static char msg[600];
    char *type = ((Config *)dst)->model.model_type;
    if (!strcmp(v, "llama_v3")) {
        return "--model_type llama_v3 is not supported: the recipes' llama_v3 is Llama-2's tokenizer with dynamic RoPE "
               "scaling x2 at the default rope_theta, which fsdpc does not implement (a Hugging Face Llama-3 config is "
               "another model)";
    }
    const char *name = strcmp(v, "gpt2") || !family_find("mingpt") ? v : "mingpt";  // SMP's gpt2: minGPT builds GPT-2
    if (!strcmp(v, "mistral_8x7b")) name = "mixtral";  // the recipes' other name of it
    type_mistral = !strcmp(v, "mistral");
    if (type_mistral) name = "llama_v2";
    if (!family_find(name) || strlen(name) >= sizeof ((Config *)0)->model.model_type) {
        return err_text(msg, sizeof msg, "--model_type must be one of %s, got '%.60s'", family_names("|", 0), v);
    }
    snprintf(type, sizeof ((Config *)0)->model.model_type, "%s", name);
    return NULL;
}

// A recipe flag with no setting here: the values in ok are what fsdpc does anyway, any other is
// refused by name with why.
static const char *only_values(const char *flag, const char *v, const char *const *ok, const char *why) {
    static char msg[512];
    for (; *ok; ok++)
        if (!strcmp(v, *ok)) return NULL;
    return err_text(msg, sizeof msg, "--%s %.60s is not supported: %s", flag, v, why);
}
#define ONLY(fn, flag, why, ...)                                                   \
    static const char *fn(void *dst, const char *v) {                              \
        (void)dst;                                                                 \
        return only_values(flag, v, (const char *const[]){__VA_ARGS__, NULL}, why); \
    }
ONLY(only_checkpoint_type, "checkpoint_type", "fsdpc writes one sharded HDF5 checkpoint that loads at any rank count", "sharded")
ONLY(only_data_type, "data_type", "fsdpc trains causal language models (gpt), not masked ones (bert)", "gpt", "GPT")
ONLY(only_backward_fetch, "backward_fetch_policy", "fsdpc gathers the next unit before each unit's backward (backward_pre)",
     "backward_pre")
ONLY(only_wrap_policy, "auto_wrap_policy", "fsdpc's units are the transformer blocks (with the embedding and the head)",
     "transformer_auto_wrap_policy")
ONLY(only_backend, "distributed_backend", "fsdpc's collectives are MPI's, and NCCL's on GPUs", "nccl", "smddp")
ONLY(only_framework, "framework", "fsdpc is an FSDP (ZeRO) trainer", "fsdp")
ONLY(only_nccl_test_log, "nccl_test_log", "fsdpc runs no NCCL test", "")

// --trace_steps's default, as the flag spells it
static void show_trace_steps(const void *dst, char *buf, size_t len) {
    snprintf(buf, len, "%d:%d", ((const Config *)dst)->run.trace_steps[0], ((const Config *)dst)->run.trace_steps[1]);
}

// --help's headings, in docs/flags.md's order
#define G_MODEL "model"
#define G_SHARD "sharding"
#define G_TRAIN "training"
#define G_DATA "data"
#define G_SFT "finetuning data"
#define G_CKPT "checkpoints"
#define G_RUN "run"
#define G_GEN "generate"
#define G_SEED "seed recipes (their spellings of the flags above; aliases are listed with each flag)"

#define AT(field) .off = offsetof(Config, field)
#define STRLEN(field) .size = sizeof(((Config *)0)->field)
#define I(n, field, g, h, ...) {.name = n, .kind = CLI_INT, AT(field), .group = g, .help = h, __VA_ARGS__}
#define FL(n, field, g, h, ...) {.name = n, .kind = CLI_FLOAT, AT(field), .group = g, .help = h, __VA_ARGS__}
#define S(n, field, g, a, h, ...) {.name = n, .kind = CLI_STR, AT(field), STRLEN(field), .group = g, .arg = a, .help = h, __VA_ARGS__}
#define P(n, field, g, a, h, ...) {.name = n, .kind = CLI_PATH, AT(field), .group = g, .arg = a, .help = h, __VA_ARGS__}
#define B(n, field, g, h, ...) {.name = n, .kind = CLI_BOOL, AT(field), .group = g, .help = h, __VA_ARGS__}
#define E(n, field, names, g, h) {.name = n, .kind = CLI_ENUM, AT(field), .choices = names, .group = g, .help = h}
#define MAP(n, field, spellings, setting, h) \
    {.name = n, .kind = CLI_MAP, AT(field), .choices = spellings, .names = setting, .group = G_SEED, .help = h}
#define UNSUP(n, why, h) {.name = n, .kind = CLI_UNSUP, .text = why, .group = G_SEED, .help = h}

static const CliFlag flags[] = {
    {.name = "model_name", .kind = CLI_CALL, AT(model.model_name), STRLEN(model.model_name), .call = apply_preset, .first = 1,
     .group = G_MODEL, .arg = "NAME", .help = "a preset's sizes (tiny, llama2_7b, gpt2, ...), which size flags override"},
    {.name = "model_type", .kind = CLI_CALL, AT(model.model_type), STRLEN(model.model_type), .call = set_model_type,
     .choices = model_type_names, .group = G_MODEL, .arg = "NAME", .help = "the family (SMP's gpt2 is mingpt; mistral is llama_v2 with MistralConfig's window and epsilon)"},
    I("hidden_width", model.hidden_width, G_MODEL, "model width", CLI_ALIASES("embed_size")),
    I("num_layers", model.num_layers, G_MODEL, "transformer blocks"),
    I("num_heads", model.num_heads, G_MODEL, "attention heads"),
    I("num_key_value_heads", model.num_key_value_heads, G_MODEL, "key/value heads (Llama only; grouped-query attention)"),
    I("intermediate_size", model.intermediate_size, G_MODEL, "MLP width (minGPT: 4 x width unless given)",
      CLI_ALIASES("llama_intermediate_size", "ffn_hidden_size")),
    I("max_context_width", model.max_context_width, G_MODEL, "context length in tokens", CLI_ALIASES("seq_len", "seq_length")),
    I("vocab_size", model.vocab_size, G_MODEL, "vocabulary (the tokenizer's unless given or a preset's)"),
    FL("rope_theta", model.rope_theta, G_MODEL, "RoPE base (the families with rotary positions)", CLI_ALIASES("rotary_emb_base"), .range = "(0, 1e12]"),
    FL("norm_eps", model.norm_eps, G_MODEL, "the norms' epsilon (Llama-2's and GPT's 1e-5; MistralConfig's 1e-6)",
       CLI_ALIASES("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon"), .range = "(0, 1]"),
    FL("rotary_pct", model.rotary_pct, G_MODEL, "share of each head's dimensions RoPE rotates (GPT-NeoX: 0.25 unless given; the others rotate all)"),
    B("tie_word_embeddings", model.tie_word_embeddings, G_MODEL, "lm_head is the embedding, one tensor (Llama only; Llama-3.2's)"),
    E("hidden_act", model.hidden_act, config_hidden_acts, G_MODEL,
      "the MLP's GELU (GPT-NeoX): gelu is the exact erf form; gelu_new, gelu_fast and gelu_pytorch_tanh name its tanh approximation"),
    {.name = "sliding_window", .kind = CLI_CALL, AT(model.sliding_window), .call = parse_window, .group = G_MODEL, .arg = "N",
     .help = "a token attends to the last N positions, itself included (Mistral; 0 or None: the whole context)"},
    I("num_experts", model.num_experts, G_MODEL, "experts in each block's MLP (mixtral; its presets' and MixtralConfig's 8)",
      CLI_ALIASES("num_local_experts")),
    I("num_experts_per_tok", model.num_experts_per_tok, G_MODEL, "experts each token goes to (mixtral: 2 unless given)"),
    FL("router_aux_loss_coef", model.router_aux_loss_coef, G_MODEL,
       "weight of the router's load-balancing loss (Switch's, over the global batch; 0: logged, not trained)", .range = "[0, 100]"),
    FL("router_z_loss_coef", model.router_z_loss_coef, G_MODEL, "weight of the router's z-loss (ST-MoE's; 0: logged, not trained)", .range = "[0, 100]"),
    FL("router_jitter_noise", model.router_jitter_noise, G_MODEL, "training only: the MLP input times U(1 - j, 1 + j) (Mixtral's)"),
    FL("capacity_factor", model.capacity_factor, G_MODEL, "each expert's capacity, in its even share of a step's tokens: assignments beyond it in the global batch's token order are dropped (0: dropless)"),
    I("expert_parallel_degree", shard.expert_parallel_degree, G_SHARD, "ranks that split the experts, E/N each, tokens sent to them by all-to-all (1: every rank holds all)",
      CLI_ALIASES("ep")),
    I("lora_rank", model.lora_rank, G_MODEL, "LoRA: adapters of rank r on --lora_target_modules, every other weight frozen (0: full finetuning)",
      CLI_ALIASES("lora_r")),
    FL("lora_alpha", model.lora_alpha, G_MODEL, "LoRA: the adapters' scale is alpha / r (PEFT's default alpha 8)", .range = "(0, 1e6]"),
    FL("lora_dropout", model.lora_dropout, G_MODEL, "LoRA: training only, dropout on the adapters' input", .range = "[0, 1)"),
    S("lora_target_modules", model.lora_target_modules, G_MODEL, "NAMES",
      "LoRA: the layers adapted, Hugging Face module names comma-separated (q_proj,v_proj,...) or all-linear (PEFT's default "
      "for the family unless given)"),
    B("use_rslora", model.use_rslora, G_MODEL, "LoRA: scale alpha / sqrt(r) (rank-stabilised LoRA) instead of alpha / r"),
    E("quantize_base", model.quantize_base, config_quantize_names, G_MODEL,
      "QLoRA: the frozen base's block linear weights in 4-bit NormalFloat (nf4), dequantised as each unit is gathered"),
    FL("initializer_range", model.initializer_range, G_MODEL, "standard deviation of the initial weights", .range = "(0, 10]"),
    FL("dropout", model.dropout, G_MODEL,
       "training only: residual branches, and for minGPT embeddings and attention probabilities",
       CLI_ALIASES("resid_pdrop", "embd_pdrop", "attn_pdrop"), .range = "[0, 1)"),

    E("sharding", shard.sharding, shard_strategy_names, G_SHARD, "what each rank keeps of parameters, gradients and optimizer state"),
    I("shard_group_size", shard.shard_group_size, G_SHARD, "data-parallel ranks a hybrid strategy shards over (0: a node's)"),
    I("tensor_parallel_degree", shard.tensor_parallel_degree, G_SHARD,
      "ranks that split each block's matmuls (consecutive ranks, inside a node); 1: none", CLI_ALIASES("tp")),
    I("context_parallel_degree", shard.context_parallel_degree, G_SHARD,
      "ranks that split every sequence (two mirrored chunks each), attention by a ring between them; 1: none", CLI_ALIASES("cp")),
    B("sequence_parallel", shard.sequence_parallel, G_SHARD, "with tensor parallelism, the residual stream, norms and dropout on a tp rank's share of the rows"),
    E("precision", shard.precision, shard_precision_names, G_SHARD, "compute precision (master weights stay float32)"),
    E("reduce_dtype", shard.reduce_dtype, shard_precision_names, G_SHARD, "precision of the gradient reduction"),
    B("cpu_offload", shard.cpu_offload, G_SHARD, "keep the shards and AdamW on the host"),
    B("activation_checkpoints", shard.activation_checkpoints, G_SHARD, "recompute each block's activations in the backward",
      CLI_ALIASES("activation_checkpointing", "fsdp_activation_checkpointing")),
    I("selective_checkpointing", shard.selective_checkpointing, G_SHARD,
      "with checkpointing, every Nth block only (0: every block); on its own it turns checkpointing on"),
    B("meta_init", shard.meta_init, G_SHARD, "build each rank's shard without the whole model", CLI_ALIASES("low_cpu_fsdp", "delayed_param")),
    B("limit_all_gathers", recipe.limit_all_gathers, G_SHARD, "at most two units gathered (current + prefetched): fsdpc's only way, 0 or 1"),
    B("offload_activations", shard.offload_activations, G_SHARD,
      "GPU: checkpointed blocks' inputs wait in pinned host memory (turns checkpointing on); CPU: no effect",
      CLI_ALIASES("offload_activation")),
    I("activation_loading_horizon", shard.activation_loading_horizon, G_SHARD,
      "with --offload_activations: checkpointed blocks' inputs fetched this many blocks ahead in backward"),
    I("shard_degree", shard.shard_degree, G_SHARD, "SMP's hybrid shard degree: --sharding hybrid-full-shard --shard_group_size N",
      .unset = "unset"),

    I("batch_size", optim.batch_size, G_TRAIN, "sequences per rank and micro-batch", CLI_ALIASES("train_batch_size")),
    I("grad_accum", optim.grad_accum, G_TRAIN, "micro-batches per step"),
    B("accumulate_unsharded", shard.accumulate_unsharded, G_TRAIN, "keep full gradients over --grad_accum, reduce once a step"),
    I("max_steps", optim.max_steps, G_TRAIN, "steps to train (-1: --max_epochs decides, else 300; 0: evaluate only)",
      CLI_ALIASES("max_training_steps", "num_steps"), .range = "[-1, 2147483647]"),
    I("max_epochs", optim.max_epochs, G_TRAIN, "passes over the data (-1: evaluate, then generate)", .unset = "--max_steps decides",
      CLI_ALIASES("epochs")),
    FL("lr", optim.lr, G_TRAIN, "peak learning rate", CLI_ALIASES("learning_rate"), .range = "[0, 10]"),
    FL("min_lr", optim.min_lr, G_TRAIN, "learning rate at the end of the decay", .range = "[0, 10]"),
    FL("warmup", optim.warmup, G_TRAIN, "warm-up steps (below 1: a fraction of --max_steps)", .range = "[0, 1e9]"),
    E("lr_decay_style", optim.lr_decay_style, shard_lr_decay_names, G_TRAIN, "learning-rate decay after warm-up"),
    I("lr_decay_iters", optim.lr_decay_iters, G_TRAIN, "the step where the decay ends at --min_lr", .unset = "--max_steps"),
    FL("plateau", optim.plateau, G_TRAIN, "plateau: steps held at --lr after warm-up (below 1: a fraction of --max_steps)", .range = "[0, 1e9]"),
    FL("weight_decay", optim.weight_decay, G_TRAIN, "AdamW weight decay (not on norm weights)", .range = "[0, 10]"),
    FL("beta1", optim.beta1, G_TRAIN, "AdamW beta1", .range = "[0, 1)"),
    FL("beta2", optim.beta2, G_TRAIN, "AdamW beta2", .range = "[0, 1)"),
    FL("grad_clip", optim.grad_clip, G_TRAIN, "gradient norm clip (0: none)", CLI_ALIASES("grad_clip_thresh"), .range = "[0, 1e9]"),
    I("seed", optim.seed, G_TRAIN, "initialization, data order and dropout"),
    I("skip_nonfinite_steps", optim.skip_nonfinite_steps, G_TRAIN,
      "non-finite steps a run survives (their update skipped, or rolled back) before it stops (unbounded under --on_nonfinite skip|rollback unless given)"),
    E("on_nonfinite", optim.on_nonfinite, shard_nonfinite_names, G_TRAIN,
      "a non-finite loss or gradient norm: stop (after --skip_nonfinite_steps skipped updates), skip the update, or rollback to the --keep_snapshot state and skip the step's samples"),

    P("train_data", data.train_data, G_DATA, "PATH|NAME",
      "a file, folder, glob, Hugging Face dataset folder or hub name, or synthetic", .unset = "the bundled Tiny Shakespeare",
      CLI_ALIASES("data_path", "dataset_path", "dataset", "training_dir")),
    P("val_data", data.val_data, G_DATA, "PATH", "validation data", .unset = "the source's validation split, if any", CLI_ALIASES("test_dir")),
    S("dataset_config_name", data.dataset_config_name, G_DATA, "NAME", "a hub dataset's config (C4: en)", .unset = "its only or default one"),
    S("train_split", data.train_split, G_DATA, "NAME", "the split training reads", .unset = "train"),
    S("val_split", data.val_split, G_DATA, "NAME", "the split validation reads", .unset = "validation, else train"),
    S("text_column", data.text_column, G_DATA, "NAME", "the column or JSON member holding text", .unset = "text"),
    P("data_cache_dir", data.data_cache_dir, G_DATA, "DIR", "where tokenized data is cached", .unset = "$FSDPC_CACHE_DIR, else ~/.cache/fsdpc"),
    I("validation_freq", data.validation_freq, G_DATA, "steps between validations"),
    I("validation_batches", data.validation_batches, G_DATA, "batches per validation"),
    I("val_batch_size", data.val_batch_size, G_DATA, "sequences per rank in a validation batch", .unset = "--batch_size"),
    P("tokenizer", data.tokenizer, G_DATA, "SPEC", "byte, a tokenizer.model or tokenizer.json, a directory holding one, or a hub name"),

    E("data_format", data.data_format, sft_format_names, G_SFT, "what rows are (auto: from their fields)"),
    E("chat_template", data.chat_template, sft_template_names, G_SFT, "the format of chat rows, and of --prompt"),
    B("train_on_inputs", data.train_on_inputs, G_SFT, "prompts bear loss too"),
    B("packing", data.packing, G_SFT, "pack a step's rows into fewer contexts, documents kept apart"),
    B("document_masking", data.document_masking, G_SFT, "streams keep their documents apart"),

    P("checkpoint_dir", ckpt.checkpoint_dir, G_CKPT, "DIR", "where checkpoints go", CLI_ALIASES("ckpt_save_path", "save_ckpt_path")),
    P("run_name", ckpt.run_name, G_CKPT, "R", "checkpoints in checkpoint_dir/R (a resume dir equal to it follows)"),
    I("checkpoint_freq", ckpt.checkpoint_freq, G_CKPT, "steps between checkpoints (0: never)", CLI_ALIASES("checkpoint_interval")),
    P("resume_from_checkpoint", ckpt.resume_from_checkpoint, G_CKPT, "DIR|FILE", "resume from a checkpoint, or a folder's newest",
      CLI_ALIASES("restart_checkpoint_file", "ckpt_load_path", "load_ckpt_path")),
    I("num_kept_checkpoints", ckpt.num_kept_checkpoints, G_CKPT, "checkpoints kept (0: all)"),
    B("overwrite_checkpoints", ckpt.overwrite_checkpoints, G_CKPT, "replace checkpoints of another run's lineage"),
    B("async_checkpoint", ckpt.async_checkpoint, G_CKPT, "stage checkpoints in host memory and write them in the background"),
    B("keep_snapshot", ckpt.keep_snapshot, G_CKPT, "keep the last checkpoint step's state (or the start's) in host memory, for --on_nonfinite rollback"),
    P("init_from", ckpt.init_from, G_CKPT, "PATH", "weights only: safetensors, a Hugging Face folder or hub name, or a checkpoint",
      CLI_ALIASES("pretrained_checkpoint_file", "hf_pretrained_model_name_or_dir", "finetune_checkpoint_load_dir")),
    P("init_adapter", ckpt.init_adapter, G_CKPT, "DIR", "LoRA: a PEFT adapter folder as the adapters' start (after --init_from)"),
    B("finetune", ckpt.finetune, G_CKPT, "finetune from --init_from"),
    B("allow_unused_weights", ckpt.allow_unused_weights, G_CKPT, "--init_from may hold tensors the model does not use (warned)"),
    B("allow_random_weights", ckpt.allow_random_weights, G_CKPT, "a run that trains nothing may evaluate or generate from random weights"),
    B("allow_changed_inputs", ckpt.allow_changed_inputs, G_CKPT, "a resume may read other data or tokenizer than it wrote (warned)"),

    E("device", run.device, device_names, G_RUN, "where to compute"),
    E("attention", run.attention, attention_names, G_RUN, "GPU attention: cuDNN's fused flash attention or the native kernel"),
    E("environment", run.environment, environment_names, G_RUN, "pbs: log $PBS_JOBID and check $PBS_NODEFILE"),
    I("logging_freq", run.logging_freq, G_RUN, "steps between log lines", CLI_ALIASES("report_interval")),
    P("metrics_file", run.metrics_file, G_RUN, "FILE", "one JSON line per step: loss, lr, grad_norm, tokens, memory"),
    P("tensorboard_dir", run.tensorboard_dir, G_RUN, "DIR", "TensorBoard event files of the metrics file's values (rank 0; tensorboard --logdir DIR)"),
    B("profile", run.profile, G_RUN, "time per phase at the end"),
    B("log_timestamps", run.log_timestamps, G_RUN, "date, level and rank before each log line"),
    P("trace_file", run.trace_file, G_RUN, "FILE", "a Chrome/Perfetto timeline of --trace_steps, every rank in one file"),
    P("trace_dir", run.trace_dir, G_RUN, "DIR", "the same timeline, a file per rank for TensorBoard's PyTorch profiler plugin"),
    {.name = "trace_steps", .kind = CLI_CALL, AT(run.trace_steps), .call = parse_trace_steps, .show = show_trace_steps,
     .group = G_RUN, .arg = "A:B", .help = "the steps the trace covers, as logged (or W,U,A: torch.profiler.schedule's)",
     CLI_ALIASES("profile_steps")},
    FL("collective_timeout", run.collective_timeout, G_RUN, "seconds a collective may wait (0: for ever)", .range = "[0, 1e7]"),
    I("num_threads", run.num_threads, G_RUN, "threads per rank (0: OMP_NUM_THREADS, SLURM_CPUS_PER_TASK, else all cores)", .range = "[0, 65536]"),

    S("prompt", gen.prompt, G_GEN, "TEXT", "text to continue after training (with --chat_template: the user's turn)"),
    I("num_tokens", gen.num_tokens, G_GEN, "tokens to generate"),
    FL("temperature", gen.temperature, G_GEN, "sampling temperature (0: greedy)", .range = "[0, 100]"),
    FL("top_p", gen.top_p, G_GEN, "nucleus sampling threshold", .range = "(0, 1]"),

    // the seed recipes' spellings that are not plain aliases (docs/flags.md, "Flags of the seed recipes")
    {.name = "model", .kind = CLI_MAP, AT(model.model_type), STRLEN(model.model_type), .choices = model_spellings,
     .names = model_type_names, .group = G_SEED, .help = "minimal_fsdp's --model_type"},
    MAP("sharding_strategy", shard.sharding, strategy_spellings, shard_strategy_names, "10.FSDP's and profiling's --sharding"),
    {.name = "bf16", .kind = CLI_BOOLENUM, AT(shard.precision), .choices = bf16_values, .names = shard_precision_names, .group = G_SEED,
     .help = "10.FSDP's --precision bf16 (0: float32)"},
    UNSUP("restart_epoch", "a checkpoint records its step, and a resumed run continues from there", "minimal_fsdp's restart epoch"),
    E("recipe_defaults", recipe.recipe_defaults, recipe_choices, G_SEED,
      "whose defaults fill what the command line leaves out: auto (the recipe whose flag spellings it uses), none (fsdpc's)"),
    UNSUP("model_size", "it is SMP's scripts/model.sh's, which picks --hidden_width, --num_layers and --num_heads from it: "
          "give those", "SMP's model.sh (forwarded, unused by its train_external.py)"),
    UNSUP("hostfile", "it is SMP's scripts/model.sh's torchrun host list; MPI's launcher places fsdpc's ranks",
          "SMP's model.sh"),
    UNSUP("nsys_path", "it is SMP's scripts/model.sh's nsys wrapper: run fsdpc under nsys profile itself (docs/observability.md)",
          "SMP's model.sh"),
    UNSUP("nsys_start_step", "it is the 5.nsight copy's own train.py flag: fsdpc marks each step as an NVTX range \"step N\", "
          "so nsys profile --capture-range=nvtx --nvtx-capture=\"step N\" picks one (docs/observability.md)", "the 5.nsight copy's"),
    UNSUP("nsys_end_step", "it is the 5.nsight copy's own train.py flag: fsdpc marks each step as an NVTX range \"step N\", "
          "so nsys profile --capture-range=nvtx --nvtx-capture=\"step N\" picks one (docs/observability.md)", "the 5.nsight copy's"),
    B("use_profiler", run.use_profiler, G_SEED, "the profiling recipe's trace: --trace_dir profile_traces of steps 4:6 unless given"),
    B("use_nsys", run.use_nsys, G_SEED, "the profiling recipe's: the launch runs under nsys profile (refused when it does not)",
      CLI_ALIASES("use_nsight")),
    B("zipped_data", recipe.zipped_data, G_SEED, "SMP's: accepted; compression is found from the content"),
    E("dataset_type", data.dataset_type, dataset_type_names, G_SEED, "SMP's: synthetic trains on synthetic tokens; the rest is found"),
    B("same_seed", recipe.same_seed, G_SEED, "SMP's: accepted; every rank draws as one process would, 0 or 1"),
    P("pretrained_model_name", ckpt.pretrained_model_name, G_SEED, "NAME",
      "the seed's model to finetune (a folder or hub name): --init_from unless that names a file"),
    B("use_synthetic_data", data.use_synthetic_data, G_SEED, "SMP's --train_data synthetic (over --training_dir)"),
    {.name = "use_smp_flash_attn", .kind = CLI_BOOLENUM, AT(run.attention), .choices = attention_spellings, .names = attention_names,
     .group = G_SEED, .help = "SMP's: 1 --attention auto, 0 --attention native"},
    UNSUP("fp8", "fsdpc computes in bf16 (--bf16 1) or float32; fp8 comes later", "SMP's fp8 (its default 1; fsdpc's 0)"),
    UNSUP("use_torch_compile", "fsdpc is compiled C and CUDA; there is no graph compiler to turn on", "the profiling recipe's"),
    UNSUP("use_wandb", "fsdpc has no Weights & Biases client: --metrics_file or --tensorboard_dir", "the profiling recipe's"),
    UNSUP("save_final_model", "`fsdpc export` writes a checkpoint as a Hugging Face folder", "SMP's final model"),
    UNSUP("logging_freq_for_avg", "fsdpc logs no running average; --metrics_file has every step's loss", "SMP's running average"),
#define IGNORED(n, field, h) B(n, recipe.field, G_SEED, h)
    IGNORED("use_smp_implementation", use_smp_implementation, "SMP's: accepted; fsdpc has one implementation of each family"),
    IGNORED("patch_neox_rope", patch_neox_rope, "SMP's: accepted; no effect (a patch of its own GPT-NeoX code)"),
    IGNORED("enable_memory_profiling", enable_memory_profiling, "SMP's: accepted; the memory tracker logs at every log step"),
    IGNORED("clean_cache", clean_cache, "SMP's: accepted; no effect (fsdpc keeps no PyTorch caching allocator)"),
    IGNORED("log_reduced_training_loss", log_reduced_training_loss, "SMP's: accepted; the logged loss is every rank's mean"),
    IGNORED("forward_prefetch", forward_prefetch, "SMP's: accepted; fsdpc always gathers the next unit ahead"),
    IGNORED("use_orig_params", use_orig_params, "SMP's: accepted; no effect (weight decay skips norms either way)"),
    IGNORED("preserve_np_state", preserve_np_state, "SMP's: accepted; validation leaves the training order alone"),
    IGNORED("fast_validation", fast_validation, "SMP's: accepted; validation reads --validation_batches of --val_data"),
    IGNORED("profile_nsys", profile_nsys, "SMP's: accepted; fsdpc always marks NVTX ranges (run under nsys)"),
#undef IGNORED
    I("data_num_workers", recipe.data_num_workers, G_SEED, "SMP's: accepted; fsdpc's loader reads ahead on its own thread"),
    I("fp8_amax_history_len", recipe.fp8_amax_history_len, G_SEED, "SMP's fp8 setting: accepted; fp8 is refused"),
    S("fp8_amax_compute_algo", recipe.fp8_amax_compute_algo, G_SEED, "ALGO", "SMP's fp8 setting: accepted; fp8 is refused"),
    P("model_dir", recipe.model_dir, G_SEED, "DIR", "SMP's final-model folder: accepted; --save_final_model is refused"),
    FL("summary_first_pdrop", recipe.summary_first_pdrop, G_SEED, "accepted; no effect (a GPT-2 classification head's dropout)", .range = "[0, 1)"),
#define CALL(n, k, fn, a, h) {.name = n, .kind = CLI_CALL, AT(recipe.recipe_only[k]), .call = fn, .group = G_SEED, .arg = a, .help = h}
    CALL("checkpoint_type", RECIPE_ONLY_CHECKPOINT_TYPE, only_checkpoint_type, "sharded", "SMP's: sharded (fsdpc's only kind)"),
    CALL("data_type", RECIPE_ONLY_DATA_TYPE, only_data_type, "gpt", "SMP's: gpt (causal language modelling)"),
    CALL("backward_fetch_policy", RECIPE_ONLY_BACKWARD_FETCH, only_backward_fetch, "backward_pre", "SMP's: backward_pre (what fsdpc does)"),
    CALL("auto_wrap_policy", RECIPE_ONLY_WRAP_POLICY, only_wrap_policy, "transformer_auto_wrap_policy", "SMP's: units are blocks"),
    CALL("distributed_backend", RECIPE_ONLY_BACKEND, only_backend, "nccl|smddp", "SMP's: accepted; MPI, and NCCL on GPUs"),
    CALL("framework", RECIPE_ONLY_FRAMEWORK, only_framework, "fsdp", "SMP's: fsdp"),
    CALL("nccl_test_log", RECIPE_ONLY_NCCL_TEST_LOG, only_nccl_test_log, "\"\"", "SMP's: empty only"),
#undef CALL
};
#define NFLAGS (sizeof flags / sizeof flags[0])

// the --model_type and --model spellings, from the family table
static void family_choices(void) {
    size_t n = family_count() < MAX_FAMILIES ? family_count() : MAX_FAMILIES, k = 0;
    for (size_t i = 0; i < n; i++) {
        const ModelFamily *f = family_at(i);
        model_type_names[i] = (CliChoice){f->model_type, (int)i};
        model_spellings[k++] = (CliChoice){f->short_name, (int)i};
        if (strcmp(f->short_name, f->model_type)) model_spellings[k++] = (CliChoice){f->model_type, (int)i};
    }
}

static void defaults(void *dst) {
    Config *c = dst;
    family_choices();  // before parsing, and before --help prints the choices
    memset(c, 0, sizeof *c);
    type_mistral = 0;
    ModelConfig *m = &c->model;
    config_preset(m, "tiny");  // the default model, and its family (rope_theta and scaling too)
    m->rotary_pct = 1.0f;
    m->norm_eps = 1e-5f;
    m->initializer_range = 0.02f;
    m->lora_alpha = 8.0f;  // PEFT's LoraConfig default
    c->shard.sharding = SHARD_FULL;
    c->shard.tensor_parallel_degree = 1;
    c->shard.expert_parallel_degree = 1;
    c->shard.context_parallel_degree = 1;
    c->shard.precision = c->shard.reduce_dtype = PRECISION_FP32;
    c->optim.batch_size = 16;
    c->optim.grad_accum = 1;
    c->optim.max_steps = -1;  // unset: --max_epochs decides, else 300
    c->optim.seed = 1234;
    c->optim.lr = 1e-3f;
    c->optim.min_lr = 1e-4f;
    c->optim.warmup = 20;
    c->optim.lr_decay_style = LR_DECAY_COSINE;
    c->optim.weight_decay = 0.1f;
    c->optim.beta1 = 0.9f;
    c->optim.beta2 = 0.95f;
    c->optim.adam_eps = 1e-8f;
    c->optim.grad_clip = 1.0f;
    path_set(&c->data.tokenizer, "byte");
    c->data.validation_freq = 100;
    c->data.validation_batches = 8;
    path_set(&c->ckpt.checkpoint_dir, "checkpoints");
    c->ckpt.checkpoint_freq = 100;
    c->run.device = KERN_DEVICE_AUTO;
    c->run.attention = KERN_ATTENTION_AUTO;
    c->run.environment = ENV_LOCAL;
    c->run.logging_freq = 10;
    c->run.trace_steps[0] = 1;
    c->run.trace_steps[1] = 3;
    c->run.collective_timeout = 600;
    c->shard.activation_loading_horizon = 2;  // SMP's
    c->recipe.recipe_defaults = RECIPE_AUTO;
    c->gen.num_tokens = 256;
    c->gen.temperature = 0.8f;
    c->gen.top_p = 0.95f;
}

// Config.given: which flags the command line set (a preset counts for the sizes it sets): a model
// config read from a checkpoint or a Hugging Face config.json fills the others and must agree with these
_Static_assert(NFLAGS <= sizeof ((Config *)0)->given, "Config.given holds a byte per flag");
const CliTable flags_cli = {.flags = flags, .n = NFLAGS, .given_off = offsetof(Config, given), .size = sizeof(Config), .defaults = defaults,
                            .bare_hint = "flags look like --name value or --name=value; subcommands come first"};

const char *flags_check_world(const Config *c, int world) {
    static char msg[600];
    uint64_t n;
    char why[300];
    // token counts, positions and the data order's sample indices are ints
    CheckedFactor micro[] = {{"--batch_size", (uint64_t)c->optim.batch_size}, {"--max_context_width", (uint64_t)c->model.max_context_width}};
    CheckedFactor global[] = {{"--batch_size", (uint64_t)c->optim.batch_size}, {"ranks", (uint64_t)world}, {"--grad_accum", (uint64_t)c->optim.grad_accum}};
    if (!checked_product(&n, INT32_MAX, "tokens per micro-batch", micro, 2, why, sizeof why))
        snprintf(msg, sizeof msg, "%s (fsdpc counts a micro-batch's tokens in 32 bits): lower --batch_size (raise --grad_accum "
                 "to keep the global batch) or --max_context_width", why);
    else if (!checked_product(&n, INT32_MAX, "sequences per optimizer step", global, 3, why, sizeof why))
        snprintf(msg, sizeof msg, "%s (fsdpc counts a step's sequences in 32 bits): lower --batch_size or --grad_accum", why);
    else
        return NULL;
    return msg;
}

// The sizes, in SIZE_* order: where each lives and the flag that sets it.
static const struct {
    size_t off;
    const char *flag;
} size_fields[SIZE_COUNT] = {
    {offsetof(ModelConfig, hidden_width), "hidden_width"}, {offsetof(ModelConfig, num_layers), "num_layers"},
    {offsetof(ModelConfig, num_heads), "num_heads"}, {offsetof(ModelConfig, num_key_value_heads), "num_key_value_heads"},
    {offsetof(ModelConfig, intermediate_size), "intermediate_size"}, {offsetof(ModelConfig, max_context_width), "max_context_width"},
    {offsetof(ModelConfig, vocab_size), "vocab_size"},
};
static int *size_at(ModelConfig *m, int i) { return (int *)((char *)m + size_fields[i].off); }
static void fill_sizes(Config *c);
// The recipe whose defaults the last flags_finish took, and the flags it set.
static const char *recipe_took[128];
static int nrecipe_took;

static int took_from_recipe(const char *flag) {
    for (int i = 0; i < nrecipe_took; i++)
        if (!strcmp(recipe_took[i], flag)) return 1;
    return 0;
}


// A model source (a checkpoint being resumed, --init_from) may name the family after the flags
// are parsed: until it has been read (flags_adopt_model) or found absent (flags_no_source),
// the flags that apply to some families only, and the model's own checks, wait for its family.
static int family_pending;

// the families that have a setting, as a|b
static int has_partial_rotary(const ModelFamily *f) { return f->rotary_pct != 0.0f; }
static int has_hidden_act(const ModelFamily *f) { return f->hidden_act_option; }
static int has_experts(const ModelFamily *f) { return f->experts_option; }
static const char *families_with(int (*has)(const ModelFamily *)) {
    static char names[256];
    names[0] = 0;
    for (size_t i = 0, n = 0; i < family_count() && n < sizeof names; i++)
        if (has(family_at(i))) n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", n ? "|" : "", family_at(i)->model_type);
    return names;
}

// a flag given for a setting the family does not have: refused by name, never ignored
static void family_flags_apply(const Config *c) {
    const ModelConfig *m = &c->model;
    const ModelFamily *fam = family_find(m->model_type);
    if (!fam) return;  // config_validate_model names it
    if (!fam->rope && flags_given(c, "rope_theta"))
        comm_fail_all("--rope_theta applies to %s; %s learns its positions", family_names("|", 1), m->model_type);
    if (!has_partial_rotary(fam) && flags_given(c, "rotary_pct"))
        comm_fail_all("--rotary_pct applies to the families with partial rotary embeddings (%s); %s rotates every head "
                      "dimension", families_with(has_partial_rotary), m->model_type);
    if (!has_hidden_act(fam) && flags_given(c, "hidden_act"))
        comm_fail_all("--hidden_act applies to %s; the MLP of %s has a fixed activation", families_with(has_hidden_act),
                      m->model_type);
    static const char *const moe_flags[] = {"num_experts", "num_experts_per_tok", "router_aux_loss_coef", "router_z_loss_coef",
                                            "router_jitter_noise", "capacity_factor"};
    for (size_t i = 0; i < sizeof moe_flags / sizeof moe_flags[0] && !fam->experts_option; i++)
        if (flags_given(c, moe_flags[i]))
            comm_fail_all("--%s applies to the families with experts (%s); the MLP of %s is dense", moe_flags[i],
                          families_with(has_experts), m->model_type);
}

// What fsdpc's mixture of experts does not do yet, refused by name (issue 37's later parts).
static void experts_check(const Config *c) {
    const ModelConfig *m = &c->model;
    if (c->shard.expert_parallel_degree < 1)
        comm_fail_all("--expert_parallel_degree must be at least 1 (1: every rank holds all the experts)");
    if (!m->num_experts) return;
    if (m->capacity_factor < 0.0f || !isfinite(m->capacity_factor))
        comm_fail_all("--capacity_factor %g: must be positive (each expert takes that many times its even share of a step's "
                      "tokens), or 0 for dropless routing", m->capacity_factor);
    if (m->capacity_factor > 0.0f && c->data.packing)
        comm_fail_all("--capacity_factor with --packing: the rule drops by the global batch's token order, which packed rows "
                      "(filled differently at each layout) do not keep; drop --packing or route dropless");
    if (c->shard.tensor_parallel_degree > 1 && c->shard.sequence_parallel)
        comm_fail_all("--sequence_parallel with a mixture of experts: the router and the experts run on the whole batch's "
                      "rows on each tp rank; drop --sequence_parallel (tensor parallelism of the experts works without it)");
}

// LoRA's settings: refused when out of range, or given without adapters
static void lora_check(const Config *c) {
    const ModelConfig *m = &c->model;
    if (m->lora_rank < 0) comm_fail_all("--lora_rank must be >= 0 (0: no adapters, every weight trains)");
    static const char *const lora_flags[] = {"lora_alpha", "lora_dropout", "lora_target_modules", "use_rslora"};
    for (size_t i = 0; i < sizeof lora_flags / sizeof lora_flags[0] && !m->lora_rank; i++)
        if (flags_given(c, lora_flags[i]))
            comm_fail_all("--%s applies to LoRA adapters: give --lora_rank r (r > 0) too", lora_flags[i]);
    if (m->quantize_base && !m->lora_rank)
        comm_fail_all("--quantize_base %s quantises the frozen base of LoRA adapters (QLoRA): give --lora_rank r (r > 0) too",
                      cli_choice_name(config_quantize_names, m->quantize_base));
    if (!m->lora_rank) return;
}

// The context-parallel degree. (Everything composes with it: generation runs whole sequences on
// the first cp rank: model_generate; dropout masks, minGPT's attention-probability masks in the
// ring's blocks on either device, and the router's jitter are drawn by each token's place in the
// whole sequence; the router's statistics sum every rank's tokens, and capacity orders a cp
// group's chunks by their place in the sequence: moe.c.)
static void cp_check(const Config *c) {
    if (c->shard.context_parallel_degree < 1)
        comm_fail_all("--context_parallel_degree must be at least 1 (1: every rank holds whole sequences)");
}

static void validate(const Config *c) {
    const ModelConfig *m = &c->model;
    lora_check(c);
    cp_check(c);
    if (!family_pending) family_flags_apply(c);
    const char *err = family_pending ? NULL : config_validate_model(m);
    if (err) comm_fail_all("%s", err);
    if (!family_pending) experts_check(c);
    // the floats' ranges (and some ints') are the flag table's (cli.h); here the counts' bounds and what relates flags
    if (c->optim.batch_size <= 0) comm_fail_all("--batch_size must be positive");
    if (c->optim.grad_accum <= 0) comm_fail_all("--grad_accum must be positive");
    if (c->optim.skip_nonfinite_steps < 0) comm_fail_all("--skip_nonfinite_steps must be >= 0");
    if (c->ckpt.keep_snapshot && c->optim.on_nonfinite != NONFINITE_ROLLBACK)
        comm_fail_all("--keep_snapshot keeps a state in host memory for --on_nonfinite rollback only: add --on_nonfinite "
                      "rollback, or drop --keep_snapshot");
    if (c->optim.on_nonfinite == NONFINITE_ROLLBACK && !c->ckpt.keep_snapshot)
        comm_fail_all("--on_nonfinite rollback needs --keep_snapshot (the state in host memory it rolls back to): add "
                      "--keep_snapshot, or use --on_nonfinite stop|skip");
    if (c->optim.max_epochs == 0 && flags_given(c, "max_epochs"))  // 0 is "unset": given, it would mean nothing
        comm_fail_all("--max_epochs must be at least 1 (or -1: evaluate, then generate), got 0; leave it out to let --max_steps decide");
    if (c->optim.max_epochs < -1) comm_fail_all("--max_epochs must be at least 1, or -1 (evaluate, then generate), got %d", c->optim.max_epochs);
    if (c->optim.max_epochs < 0 && c->optim.max_steps > 0)
        comm_fail_all("--max_epochs %d (evaluate, then generate) and --max_steps %d contradict each other", c->optim.max_epochs, c->optim.max_steps);
    if (c->optim.min_lr > c->optim.lr) comm_fail_all("need --min_lr <= --lr");
    if (c->run.logging_freq <= 0) comm_fail_all("--logging_freq must be positive");
    if (c->ckpt.checkpoint_freq < 0 || c->data.validation_freq < 0) comm_fail_all("--checkpoint_freq/--validation_freq must be >= 0");
    if (c->data.validation_batches <= 0) comm_fail_all("--validation_batches must be positive");
    if (c->ckpt.num_kept_checkpoints < 0) comm_fail_all("--num_kept_checkpoints must be >= 0 (0 keeps all)");
    if (c->gen.num_tokens < 0) comm_fail_all("--num_tokens must be >= 0");
    if (c->shard.shard_group_size < 0) comm_fail_all("--shard_group_size must be positive");
    if (c->shard.tensor_parallel_degree < 1) comm_fail_all("--tensor_parallel_degree must be at least 1 (1: no tensor parallelism)");
    if (c->shard.sequence_parallel && c->shard.tensor_parallel_degree < 2)
        comm_fail_all("--sequence_parallel splits the sequence across a tensor-parallel group: it needs --tensor_parallel_degree "
                      "2 or more");
    if (c->shard.shard_group_size > 0 && c->shard.sharding != SHARD_HYBRID_FULL && c->shard.sharding != SHARD_HYBRID_GRAD_OP)
        comm_fail_all("--shard_group_size %d only applies to --sharding %s|%s (this run uses %s)", c->shard.shard_group_size,
                      shard_strategy_name(SHARD_HYBRID_FULL), shard_strategy_name(SHARD_HYBRID_GRAD_OP),
                      shard_strategy_name(c->shard.sharding));
    if (!c->ckpt.checkpoint_dir[0]) comm_fail_all("--checkpoint_dir needs a directory (--checkpoint_freq 0 turns checkpoints off)");
    if (c->data.val_batch_size < 0) comm_fail_all("--val_batch_size must be >= 0 (0: --batch_size)");
    if (c->optim.lr_decay_iters < 0) comm_fail_all("--lr_decay_iters must be >= 0 (0: --max_steps)");
    if (c->optim.plateau > 0 && c->optim.lr_decay_style != LR_DECAY_PLATEAU)
        comm_fail_all("--plateau %g applies to --lr_decay_style plateau (this run uses %s)", c->optim.plateau,
                      shard_lr_decay_name(c->optim.lr_decay_style));
    if (c->shard.shard_degree < 0) comm_fail_all("--shard_degree must be positive");
    if (c->shard.activation_loading_horizon < 1) comm_fail_all("--activation_loading_horizon must be >= 1 (blocks fetched ahead)");
    if (c->shard.selective_checkpointing < 0) comm_fail_all("--selective_checkpointing must be >= 0 (every Nth block)");
    if (!c->data.tokenizer[0]) comm_fail_all("--tokenizer needs a value: byte, a tokenizer.model / tokenizer.json, a directory or a hub name");
    const char *sizes = flags_check_world(c, 1);
    if (sizes) comm_fail_all("%s", sizes);
    if (c->ckpt.finetune && !c->ckpt.init_from[0])
        comm_fail_all("--finetune needs the weights to start from: --init_from PATH (or --pretrained_checkpoint_file FILE)");
    for (size_t i = 0; i < NFLAGS; i++) {  // a path the operating system refuses, said now and by its flag
        char flag[80];
        snprintf(flag, sizeof flag, "--%s", flags[i].name);
        const char *e = flags[i].kind == CLI_PATH ? path_too_long(flag, *(char *const *)((const char *)c + flags[i].off)) : NULL;
        if (e) comm_fail_all("%s", e);
    }
}

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ULL;
    return h;
}

uint64_t flags_hash(const Config *c) {
    static Config copy;
    memcpy(&copy, c, sizeof copy);  // bytes, padding included
    copy.run.num_threads = 0;  // cores per node may differ once resolved
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < NFLAGS; i++)  // the paths by their text (NUL included): their addresses differ between ranks
        if (flags[i].kind == CLI_PATH) {
            char **p = (char **)((char *)&copy + flags[i].off);
            h = hash_bytes(h, path_or_empty(*p), strlen(path_or_empty(*p)) + 1);
            *p = NULL;
        }
    return hash_bytes(h, &copy, sizeof copy);
}

int flags_given(const Config *c, const char *name) { return cli_given(&flags_cli, c, name); }

void flags_no_source(Config *c) {
    family_pending = 0;
    fill_sizes(c);
    validate(c);
}

void flags_adopt_model(Config *c, const ModelConfig *src, unsigned known, const char *source) {
    family_pending = 0;
    static const struct {
        unsigned bit;
        const char *flag;  // NULL: no flag sets it
        size_t off;
        int is_float, from_preset;
        const CliChoice *names;  // an enumerated setting, shown by name
    } fields[] = {
        {MODEL_HIDDEN, "hidden_width", offsetof(ModelConfig, hidden_width), 0, 1, NULL},
        {MODEL_LAYERS, "num_layers", offsetof(ModelConfig, num_layers), 0, 1, NULL},
        {MODEL_HEADS, "num_heads", offsetof(ModelConfig, num_heads), 0, 1, NULL},
        {MODEL_KV_HEADS, "num_key_value_heads", offsetof(ModelConfig, num_key_value_heads), 0, 1, NULL},
        {MODEL_INTERMEDIATE, "intermediate_size", offsetof(ModelConfig, intermediate_size), 0, 1, NULL},
        {MODEL_VOCAB, "vocab_size", offsetof(ModelConfig, vocab_size), 0, 1, NULL},
        {MODEL_CONTEXT, "max_context_width", offsetof(ModelConfig, max_context_width), 0, 0, NULL},
        {MODEL_ROPE_THETA, "rope_theta", offsetof(ModelConfig, rope_theta), 1, 0, NULL},
        {MODEL_NORM_EPS, "norm_eps", offsetof(ModelConfig, norm_eps), 1, 0, NULL},
        {MODEL_ROTARY_PCT, "rotary_pct", offsetof(ModelConfig, rotary_pct), 1, 0, NULL},
        {MODEL_ROPE_SCALING, NULL, offsetof(ModelConfig, rope_scaling_factor), 1, 0, NULL},
        {MODEL_ROPE_SCALING, NULL, offsetof(ModelConfig, rope_low_freq_factor), 1, 0, NULL},
        {MODEL_ROPE_SCALING, NULL, offsetof(ModelConfig, rope_high_freq_factor), 1, 0, NULL},
        {MODEL_ROPE_SCALING, NULL, offsetof(ModelConfig, rope_original_context), 1, 0, NULL},
        {MODEL_TIED, "tie_word_embeddings", offsetof(ModelConfig, tie_word_embeddings), 0, 1, NULL},
        {MODEL_WINDOW, "sliding_window", offsetof(ModelConfig, sliding_window), 0, 1, NULL},
        {MODEL_ACT, "hidden_act", offsetof(ModelConfig, hidden_act), 0, 1, config_hidden_acts},
        {MODEL_EXPERTS, "num_experts", offsetof(ModelConfig, num_experts), 0, 1, NULL},
        {MODEL_EXPERTS_PER_TOK, "num_experts_per_tok", offsetof(ModelConfig, num_experts_per_tok), 0, 1, NULL},
    };
    ModelConfig *m = &c->model;
    if ((known & MODEL_TYPE) && strcmp(m->model_type, src->model_type) != 0) {
        if (flags_given(c, "model_type") || flags_given(c, "model_name"))
            comm_fail_all("%s holds a %s model but this run has --model_type %s%s", source, src->model_type, m->model_type,
                          flags_given(c, "model_type") ? "" : " (from --model_name; drop it to take the model from the source)");
        snprintf(m->model_type, sizeof m->model_type, "%s", src->model_type);
        const ModelFamily *fam = family_find(m->model_type);  // known: the source's reader checked it
        if (fam && !fam->gqa) m->num_key_value_heads = m->num_heads;
    }
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (!(known & fields[i].bit)) continue;
        char *dst = (char *)m + fields[i].off;
        const char *val = (const char *)src + fields[i].off;
        int given = fields[i].flag && (flags_given(c, fields[i].flag) || (fields[i].from_preset && flags_given(c, "model_name")));
        if (given && fields[i].bit == MODEL_CONTEXT) continue;
        int same = fields[i].is_float ? *(const float *)dst == *(const float *)val : *(const int *)dst == *(const int *)val;
        if (given && !same) {
            if (fields[i].names)
                comm_fail_all("%s has %s %s but this run has --%s %s", source, fields[i].flag,
                              cli_choice_name(fields[i].names, *(const int *)val), fields[i].flag,
                              cli_choice_name(fields[i].names, *(const int *)dst));
            if (fields[i].is_float)
                comm_fail_all("%s has %s=%g but this run has --%s %g", source, fields[i].flag, *(const float *)val,
                              fields[i].flag, *(const float *)dst);
            comm_fail_all("%s has %s=%d but this run has --%s %d%s", source, fields[i].flag, *(const int *)val,
                          fields[i].flag, *(const int *)dst,
                          flags_given(c, fields[i].flag) ? "" : " (from --model_name; drop it to take the sizes from the source)");
        }
        memcpy(dst, val, fields[i].is_float ? sizeof(float) : sizeof(int));
    }
    static const unsigned size_bits[SIZE_COUNT] = {MODEL_HIDDEN, MODEL_LAYERS, MODEL_HEADS, MODEL_KV_HEADS, MODEL_INTERMEDIATE,
                                                   MODEL_CONTEXT, MODEL_VOCAB};
    for (int i = 0; i < SIZE_COUNT; i++)
        c->size_origin[i] = flags_given(c, size_fields[i].flag)   ? SIZE_FLAG
                            : flags_given(c, "model_name")           ? SIZE_PRESET
                            : known & size_bits[i]                 ? SIZE_SOURCE
                            : took_from_recipe(size_fields[i].flag) ? SIZE_RECIPE
                                                                   : SIZE_DEFAULT;
    // a recipe's preset names no model read from a source
    if (took_from_recipe("model_name") && (known & MODEL_HIDDEN)) memset(m->model_name, 0, sizeof m->model_name);
    validate(c);
}

// What a family fixes that the defaults (the first family's) do not: without grouped-query
// attention one key/value head per head, an MLP of mlp_ratio x D unless told, and no rope_theta
// where positions are learned.
static void family_defaults(Config *c) {
    ModelConfig *m = &c->model;
    const ModelFamily *fam = family_find(m->model_type), *preset_fam;  // known: the flag takes only family names
    if (flags_given(c, "model_name") && flags_given(c, "model_type") && family_preset(m->model_name, &preset_fam) && preset_fam != fam)
        comm_fail_all("--model_name %s is a %s preset but this run has --model_type %s", m->model_name, preset_fam->model_type,
                      m->model_type);
    if (fam->rotary_pct && !flags_given(c, "rotary_pct")) m->rotary_pct = fam->rotary_pct;
    if (!fam->rotary_pct && !flags_given(c, "rotary_pct")) m->rotary_pct = 1.0f;  // given: refused by the family, or a source's to check
    if (!fam->gqa && !flags_given(c, "num_key_value_heads")) m->num_key_value_heads = m->num_heads;
    if (fam->mlp_ratio && !flags_given(c, "intermediate_size") && !took_from_recipe("intermediate_size"))
        m->intermediate_size = fam->mlp_ratio * m->hidden_width;
    // the experts and rope_theta of a family's own config class where no preset gave them (Mixtral's 8, 2 and 1e6)
    int preset = flags_given(c, "model_name") || took_from_recipe("model_name");
    if (fam->experts_option && !preset && !flags_given(c, "num_experts") && !took_from_recipe("num_experts"))
        m->num_experts = fam->hf_defaults.num_experts;
    if (fam->experts_option && !preset && !flags_given(c, "num_experts_per_tok") && !took_from_recipe("num_experts_per_tok"))
        m->num_experts_per_tok = fam->hf_defaults.num_experts_per_tok;
    if (fam->hf_defaults.rope_theta && !preset && !flags_given(c, "rope_theta") && !took_from_recipe("rope_theta"))
        m->rope_theta = fam->hf_defaults.rope_theta;
}

// Each size's origin, and the family's Hugging Face defaults for those no flag or preset gave when
// the run names its own shape (--hidden_width, --num_layers or --num_heads without --model_name):
// such a model is the family's, never the default tiny one's with some sizes changed.
static void fill_sizes(Config *c) {
    ModelConfig *m = &c->model;
    const ModelFamily *fam = family_find(m->model_type);  // known: the flag takes only family names
    const FamilyPreset *d = &fam->hf_defaults;
    int preset = flags_given(c, "model_name");
    int own_shape = !preset && (flags_given(c, "hidden_width") || flags_given(c, "num_layers") || flags_given(c, "num_heads") ||
                                took_from_recipe("hidden_width"));
    const int hf[SIZE_COUNT] = {d->hidden_width, d->num_layers, d->num_heads, d->num_key_value_heads, d->intermediate_size,
                                d->max_context_width, d->vocab_size};
    for (int i = 0; i < SIZE_COUNT; i++) {
        c->size_origin[i] = flags_given(c, size_fields[i].flag)   ? SIZE_FLAG
                            : took_from_recipe(size_fields[i].flag) ? SIZE_RECIPE
                            : preset                               ? SIZE_PRESET
                            : own_shape                            ? SIZE_FAMILY
                                                                   : SIZE_DEFAULT;
        if (c->size_origin[i] == SIZE_FAMILY && hf[i]) *size_at(m, i) = hf[i];
    }
    // the rules that follow other sizes, applied once those are final
    if (c->size_origin[SIZE_KV] == SIZE_FAMILY || (!fam->gqa && !flags_given(c, "num_key_value_heads")))
        m->num_key_value_heads = m->num_heads;
    if (fam->mlp_ratio && !flags_given(c, "intermediate_size") && !took_from_recipe("intermediate_size"))
        m->intermediate_size = fam->mlp_ratio * m->hidden_width;
    if (own_shape && !took_from_recipe("model_name")) memset(m->model_name, 0, sizeof m->model_name);
}

const char *flags_take_tokenizer_vocab(Config *c, int vocab, int named, const char *tokenizer, const char *source) {
    static char msg[1400];
    unsigned char *o = &c->size_origin[SIZE_V];
    if ((named && *o == SIZE_FAMILY) || *o == SIZE_DEFAULT) {
        c->model.vocab_size = vocab;
        *o = SIZE_TOKENIZER;
        return NULL;
    }
    if (c->model.vocab_size >= vocab) return NULL;
    static const char *const by[] = {[SIZE_FLAG] = "--vocab_size", [SIZE_PRESET] = "--model_name", [SIZE_RECIPE] = "the recipe's default",
                                     [SIZE_FAMILY] = "the family's default", [SIZE_SOURCE] = "the model being loaded",
                                     [SIZE_DATA] = "the data file"};
    const char *why = *o == SIZE_SOURCE && source ? source : *o < sizeof by / sizeof by[0] && by[*o] ? by[*o] : "--vocab_size";
    return err_text(msg, sizeof msg, "the tokenizer '%.800s' has %d tokens but the model's vocabulary is %d (%.400s)", tokenizer, vocab,
             c->model.vocab_size, why);
}

void flags_size_origins(const Config *c, char *buf, int len) {
    static const char *const names[SIZE_COUNT] = {"D", "L", "H", "KV", "F", "T", "V"};
    const ModelFamily *fam = family_find(c->model.model_type);
    int n = snprintf(buf, len, "sizes:");
    for (int o = SIZE_DEFAULT; o <= SIZE_DATA && n < len; o++) {
        int any = 0;
        for (int i = 0; i < SIZE_COUNT && n < len; i++)
            if (c->size_origin[i] == o) n += snprintf(buf + n, len - n, "%s %s", any++ ? "" : n > 6 ? ";" : "", names[i]);
        if (!any || n >= len) continue;
        switch (o) {
        case SIZE_DEFAULT: n += snprintf(buf + n, len - n, " from the default model (tiny)"); break;
        case SIZE_FLAG: n += snprintf(buf + n, len - n, " from flags"); break;
        case SIZE_PRESET: n += snprintf(buf + n, len - n, " from --model_name %s", c->model.model_name); break;
        case SIZE_RECIPE: n += snprintf(buf + n, len - n, " from the recipe's defaults"); break;
        case SIZE_FAMILY: n += snprintf(buf + n, len - n, " from %s's defaults", fam ? fam->hf_defaults.name : "the family"); break;
        case SIZE_SOURCE: n += snprintf(buf + n, len - n, " from the model loaded"); break;
        case SIZE_TOKENIZER: n += snprintf(buf + n, len - n, " from the tokenizer"); break;
        default: n += snprintf(buf + n, len - n, " from the data"); break;
        }
    }
}

// --run_name R puts checkpoints in checkpoint_dir/R, and a resume directory equal to the
// checkpoint directory follows it (checkpoint dir = resume dir)
static void join_run_name(Config *c) {
    if (!c->ckpt.run_name[0]) return;
    if (strchr(c->ckpt.run_name, '/') || !strcmp(c->ckpt.run_name, ".") || !strcmp(c->ckpt.run_name, ".."))
        comm_fail_all("--run_name '%s' names a subdirectory of --checkpoint_dir: no '/', '.' or '..'", c->ckpt.run_name);
    const char *e = path_too_long("--run_name", c->ckpt.run_name);  // a name the file system refuses, by its own flag
    if (e) comm_fail_all("%s", e);
    int follow = !strcmp(c->ckpt.resume_from_checkpoint, c->ckpt.checkpoint_dir);
    char *dir = path_join(c->ckpt.checkpoint_dir, c->ckpt.run_name);
    if (follow) path_set(&c->ckpt.resume_from_checkpoint, dir);
    free(c->ckpt.checkpoint_dir);
    c->ckpt.checkpoint_dir = dir;
}

static int is_size_flag(const char *flag) {
    for (int i = 0; i < SIZE_COUNT; i++)
        if (!strcmp(size_fields[i].flag, flag)) return 1;
    return 0;
}

// a recipe's default for one flag the command line left out; a preset sets only the sizes no
// flag gave, as --model_name on the command line does. A --model_name or --model_type the line
// gives settles the model: the recipe's family and sizes stay out.
static void take_default(const char *flag, const char *value, void *ctx) {
    Config *c = ctx;
    int model_given = flags_given(c, "model_name") && (is_size_flag(flag) || !strcmp(flag, "model_type"));
    if (flags_given(c, flag) || model_given || took_from_recipe(flag)) return;
    if (!strcmp(flag, "model_name") && flags_given(c, "model_type")) return;
    if (nrecipe_took + SIZE_COUNT + 1 > (int)(sizeof recipe_took / sizeof *recipe_took))
        err_fatal("a recipe sets more than %zu flags", sizeof recipe_took / sizeof *recipe_took);  // its table: a bug
    if (!strcmp(flag, "model_name")) {
        ModelConfig p = c->model;
        if (!config_preset(&p, value)) return;
        for (int i = 0; i < SIZE_COUNT; i++)
            if (!flags_given(c, size_fields[i].flag)) *size_at(&c->model, i) = *size_at(&p, i), recipe_took[nrecipe_took++] = size_fields[i].flag;
        memcpy(c->model.model_name, p.model_name, sizeof p.model_name);
        memcpy(c->model.model_type, p.model_type, sizeof p.model_type);
    } else {
        char err[2048];
        if (cli_set_default(&flags_cli, c, flag, value, err, sizeof err)) comm_fail_all("%s", err);
    }
    recipe_took[nrecipe_took++] = flag;
    size_t n = strlen(c->recipe.recipe_line);
    if (n < sizeof c->recipe.recipe_line)
        snprintf(c->recipe.recipe_line + n, sizeof c->recipe.recipe_line - n, " --%s %s", flag, value);
}

// the defaults of the recipe whose dialect the command line is written in (recipes.h)
static void take_recipe(Config *c) {
    nrecipe_took = 0;
    memset(c->recipe.recipe_line, 0, sizeof c->recipe.recipe_line);
    memset(c->recipe.recipe_note, 0, sizeof c->recipe.recipe_note);
    memset(c->recipe.recipe_no_data, 0, sizeof c->recipe.recipe_no_data);
    const char *why;
    const Recipe *r = recipe_find(c->recipe.recipe_defaults, flags_given, c, &why);
    if (why) comm_fail_all("%s", why);
    if (!r) return;
    char used[512], head[800];
    recipe_marks_used(r, used, sizeof used);
    snprintf(head, sizeof head, "recipe: %s%s%s%s; the defaults taken from it (--recipe_defaults none: fsdpc's own):", recipe_name(r),
             used[0] ? " (its flags " : " (--recipe_defaults)", used, used[0] ? ")" : "");
    memcpy(c->recipe.recipe_line, head, strlen(head) < sizeof c->recipe.recipe_line ? strlen(head) + 1 : sizeof c->recipe.recipe_line);
    recipe_each_default(r, c->model.model_type, type_mistral ? "mistral" : NULL, flags_given, c, take_default, c);
    // a rate the line gives below the recipe's floor: the floor follows it (as AnnealingLR's max does)
    if (took_from_recipe("min_lr") && c->optim.min_lr > c->optim.lr) c->optim.min_lr = c->optim.lr;
    if (recipe_no_data(r)) snprintf(c->recipe.recipe_no_data, sizeof c->recipe.recipe_no_data, "%s", recipe_no_data(r));
    if (recipe_differs(r))
        snprintf(c->recipe.recipe_note, sizeof c->recipe.recipe_note, "recipe: where fsdpc differs from %s: %s", recipe_name(r), recipe_differs(r));
    const char *refused = recipe_check(r, c);
    if (refused) comm_fail_all("%s", refused);
    // its launch files pass one family's flags with every model: what its script ignores is ignored, and said
    const ModelFamily *fam = family_find(c->model.model_type);
    int pct = cli_spelled("rotary_pct"), base = cli_spelled("rotary_emb_base");  // fsdpc's own --rope_theta stays
    if (recipe_rotary_neox_only(r) && fam && fam->rope && !fam->rotary_pct && (pct || base)) {
        if (pct) cli_forget(&flags_cli, c, "rotary_pct"), c->model.rotary_pct = 1.0f;
        if (base) {
            cli_forget(&flags_cli, c, "rope_theta");
            c->model.rope_theta = fam->hf_defaults.rope_theta ? fam->hf_defaults.rope_theta : 10000.0f;
        }
        size_t n = strlen(c->recipe.recipe_note);
        snprintf(c->recipe.recipe_note + n, sizeof c->recipe.recipe_note - n,
                 "%srecipe: %s GPT-NeoX's in %s; its %s takes %s's RoPE (rope_theta %g, every dimension), and so does fsdpc",
                 n ? "\n" : "", pct && base ? "--rotary_pct and --rotary_emb_base are" : pct ? "--rotary_pct is" : "--rotary_emb_base is",
                 recipe_name(r), c->model.model_type, fam->hf_defaults.name, c->model.rope_theta);
    }
}

// SMP's launch lines pass its Mixtral flags (--num_local_experts, --num_experts_per_tok) with every
// model, and its script reads them for Mixtral only: with a dense family they are accepted with a
// line, whatever --recipe_defaults says (fsdpc's own --num_experts is still refused there)
static void smp_expert_flags(Config *c) {
    const ModelFamily *fam = family_find(c->model.model_type);
    if (!fam || fam->experts_option || cli_spelled("num_experts") || !(cli_spelled("num_local_experts") || cli_spelled("num_experts_per_tok")))
        return;
    cli_forget(&flags_cli, c, "num_experts");
    cli_forget(&flags_cli, c, "num_experts_per_tok");
    c->model.num_experts = c->model.num_experts_per_tok = 0;
    size_t n = strlen(c->recipe.recipe_note);
    snprintf(c->recipe.recipe_note + n, sizeof c->recipe.recipe_note - n, "%s--num_local_experts and --num_experts_per_tok are "
             "SMP's Mixtral settings: %s has a dense MLP, they have no effect", n ? "\n" : "", c->model.model_type);
}

// --model_type mistral without a preset: MistralConfig's window (4096) and RMSNorm epsilon (1e-6)
// where neither the line nor its recipe (10.FSDP's and SMP's scripts build MistralConfig with their
// own) gave them, said in one line
static void mistral_defaults(Config *c) {
    ModelConfig *m = &c->model;
    if (!type_mistral || flags_given(c, "model_name") || took_from_recipe("model_name")) return;
    if (!flags_given(c, "sliding_window") && !took_from_recipe("sliding_window")) m->sliding_window = 4096;
    if (!flags_given(c, "norm_eps") && !took_from_recipe("norm_eps")) m->norm_eps = 1e-6f;
    char window[32] = "none (the whole context)";
    if (m->sliding_window) snprintf(window, sizeof window, "%d", m->sliding_window);
    size_t n = strlen(c->recipe.recipe_note);
    snprintf(c->recipe.recipe_note + n, sizeof c->recipe.recipe_note - n,
             "%s--model_type mistral: the Llama family as MistralConfig builds it, sliding window %s and RMSNorm epsilon %g%s",
             n ? "\n" : "", window, (double)m->norm_eps,
             c->ckpt.resume_from_checkpoint[0] || c->ckpt.init_from[0] || c->ckpt.pretrained_model_name[0]
                 ? " (a checkpoint or model the run starts from keeps its own)" : "");
}

int flags_parse(Config *c, int argc, char **argv) {
    char err[2048];
    int rc = cli_parse(&flags_cli, c, argc, argv, err, sizeof err);
    if (rc == CLI_ERROR) comm_fail_all("%s", err);
    if (rc == CLI_HELP) return CLI_HELP;
    flags_finish(c);
    return CLI_OK;
}

void flags_finish(Config *c) {
    take_recipe(c);
    mistral_defaults(c);
    smp_expert_flags(c);
    family_pending = (c->ckpt.resume_from_checkpoint[0] || c->ckpt.init_from[0] || c->ckpt.pretrained_model_name[0]) &&
                     !flags_given(c, "model_type") && !flags_given(c, "model_name");
    family_defaults(c);
    if (!family_pending) fill_sizes(c);
    join_run_name(c);
    // checkpointing every Nth block implies checkpointing, unless the command line turned it off
    if (c->shard.selective_checkpointing > 0 && !flags_given(c, "activation_checkpoints")) c->shard.activation_checkpoints = 1;
    // offloading moves the checkpointed blocks' inputs (a GPU run turns checkpointing on for it:
    // memory_ckpt_every), so a command line that turned checkpointing off contradicts it
    if (c->shard.offload_activations && flags_given(c, "activation_checkpoints") && !c->shard.activation_checkpoints)
        comm_fail_all("--offload_activations 1 offloads the inputs of checkpointed blocks, and --activation_checkpoints 0 "
                      "turns checkpointing off: drop one of the two");
    if (c->shard.shard_degree > 0) {  // SMP: an explicit degree makes the strategy hybrid over groups of that many ranks
        if (c->shard.sharding != SHARD_HYBRID_GRAD_OP) c->shard.sharding = SHARD_HYBRID_FULL;
        if (flags_given(c, "shard_group_size") && c->shard.shard_group_size != c->shard.shard_degree)
            comm_fail_all("--shard_degree %d and --shard_group_size %d contradict each other (give one)", c->shard.shard_degree,
                          c->shard.shard_group_size);
        c->shard.shard_group_size = c->shard.shard_degree;
    }
    // the seed's pair: the model's name, and the file holding its weights, which wins when given
    if (c->ckpt.pretrained_model_name[0] && !c->ckpt.init_from[0]) path_set(&c->ckpt.init_from, c->ckpt.pretrained_model_name);
    if (c->data.use_synthetic_data) {  // SMP: synthetic tokens instead of --training_dir/--test_dir
        path_set(&c->data.train_data, "synthetic");
        path_set(&c->data.val_data, "");
    }
    // the profiling recipe's profiler: its folder unless an output is named, its schedule unless steps are
    if (c->run.use_profiler && !c->run.trace_file[0] && !c->run.trace_dir[0]) path_set(&c->run.trace_dir, TRACE_PROFILER_DIR);
    if (c->run.use_profiler && !flags_given(c, "trace_steps")) c->run.trace_steps[0] = TRACE_PROFILER_FIRST, c->run.trace_steps[1] = TRACE_PROFILER_LAST;
    validate(c);
}
