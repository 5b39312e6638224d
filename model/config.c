// config: defaults, presets and a table-driven command-line parser.
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/comm.h"

typedef struct {
    const char *name, *model_type;
    int hidden_width, num_layers, num_heads, num_key_value_heads, intermediate_size, max_context_width, vocab_size;
} Preset;

// llama2_* are the published Llama-2 sizes; tiny is the default Shakespeare model (byte vocab),
// small enough that `make run` learns visibly in a couple of minutes on 2 cores. gpt2* are GPT-2's
// sizes as minGPT builds them, the vocabulary 50257 padded to 50304 (a multiple of 64).
static const Preset presets[] = {
    {"tiny", "llama_v2", 128, 4, 4, 2, 344, 128, 256},
    {"llama2_7b", "llama_v2", 4096, 32, 32, 32, 11008, 4096, 32000},
    {"llama2_13b", "llama_v2", 5120, 40, 40, 40, 13824, 4096, 32000},
    {"llama2_70b", "llama_v2", 8192, 80, 64, 8, 28672, 4096, 32000},
    {"gpt2", "mingpt", 768, 12, 12, 12, 3072, 1024, 50304},
    {"gpt2-medium", "mingpt", 1024, 24, 16, 16, 4096, 1024, 50304},
    {"gpt2-large", "mingpt", 1280, 36, 20, 20, 5120, 1024, 50304},
    {"gpt2-xl", "mingpt", 1600, 48, 25, 25, 6400, 1024, 50304},
};

static const char *preset_names(void) {
    static char names[256];
    if (!names[0])
        for (size_t i = 0, n = 0; i < sizeof presets / sizeof presets[0]; i++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", presets[i].name);
    return names;
}

int config_preset(ModelConfig *m, const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const Preset *p = &presets[i];
        if (strcmp(p->name, name) != 0) continue;
        snprintf(m->model_name, sizeof m->model_name, "%s", name);
        snprintf(m->model_type, sizeof m->model_type, "%s", p->model_type);
        m->hidden_width = p->hidden_width;
        m->num_layers = p->num_layers;
        m->num_heads = p->num_heads;
        m->num_key_value_heads = p->num_key_value_heads;
        m->intermediate_size = p->intermediate_size;
        m->max_context_width = p->max_context_width;
        m->vocab_size = p->vocab_size;
        return 1;
    }
    return 0;
}

int config_head_dim(const ModelConfig *m) { return m->hidden_width / m->num_heads; }

// F_MAP, F_BOOLSTR and F_UNSUP carry the seed recipes' spellings onto fsdpc's own settings:
// F_MAP translates a value ("from=to|..." in choices) into a string setting, F_BOOLSTR a boolean
// into one of two values ("on|off"), and F_UNSUP names a feature fsdpc lacks (choices says
// why): its "off" values are accepted, anything else is refused.
typedef enum { F_INT, F_FLOAT, F_STR, F_BOOL, F_MAP, F_BOOLSTR, F_UNSUP } FlagKind;

typedef struct {
    const char *name;
    const char *alias;    // the other spelling the seed scripts use, or NULL
    FlagKind kind;
    size_t off, size;     // where the value lives in Config (size for strings)
    const char *choices;  // "a|b|c" for an enumerated string, a map or a reason (above), else NULL
} Flag;

#define I(n, field) {n, NULL, F_INT, offsetof(Config, field), 0, NULL}
#define FL(n, field) {n, NULL, F_FLOAT, offsetof(Config, field), 0, NULL}
#define S(n, field, ch) {n, NULL, F_STR, offsetof(Config, field), sizeof(((Config *)0)->field), ch}
#define B(n, field) {n, NULL, F_BOOL, offsetof(Config, field), 0, NULL}
#define ALIAS(n, kind, field) {n, NULL, kind, offsetof(Config, field), sizeof(((Config *)0)->field), NULL}
#define MAP(n, kind, field, map) {n, NULL, kind, offsetof(Config, field), sizeof(((Config *)0)->field), map}
#define UNSUP(n, why) {n, NULL, F_UNSUP, 0, 0, why}

static const Flag flags[] = {
    S("model_type", model.model_type, "llama_v2|mingpt"),
    // minimal_fsdp's --model takes the family's short name
    MAP("model", F_MAP, model.model_type, "mingpt=mingpt|llama=llama_v2|llama_v2=llama_v2"),
    S("model_name", model.model_name, NULL),
    {"hidden_width", "embed_size", F_INT, offsetof(Config, model.hidden_width), 0, NULL},
    I("num_layers", model.num_layers),
    I("num_heads", model.num_heads),
    I("num_key_value_heads", model.num_key_value_heads),
    {"intermediate_size", "llama_intermediate_size", F_INT, offsetof(Config, model.intermediate_size), 0, NULL},
    ALIAS("ffn_hidden_size", F_INT, model.intermediate_size),
    {"max_context_width", "seq_len", F_INT, offsetof(Config, model.max_context_width), 0, NULL},
    ALIAS("seq_length", F_INT, model.max_context_width),
    I("vocab_size", model.vocab_size),
    FL("rope_theta", model.rope_theta),
    FL("initializer_range", model.initializer_range),
    FL("dropout", model.dropout),
    S("sharding", sharding, "full-shard|grad-shard|no-shard|hybrid-full-shard|hybrid-grad-shard|hybrid-shard"),
    I("shard_group_size", shard_group_size),
    S("precision", precision, "float32|bf16"),
    S("reduce_dtype", reduce_dtype, "float32|bf16"),
    B("cpu_offload", cpu_offload),
    B("activation_checkpoints", activation_checkpoints),
    I("selective_checkpointing", selective_checkpointing),
    B("meta_init", meta_init),
    I("batch_size", batch_size),
    I("grad_accum", grad_accum),
    I("max_steps", max_steps),
    I("max_epochs", max_epochs),
    FL("lr", lr),
    FL("min_lr", min_lr),
    FL("warmup", warmup),
    S("lr_decay_style", lr_decay_style, "cosine|linear|constant"),
    FL("weight_decay", weight_decay),
    FL("beta1", beta1),
    FL("beta2", beta2),
    FL("grad_clip", grad_clip),
    I("seed", seed),
    I("skip_nonfinite_steps", skip_nonfinite_steps),
    S("train_data", train_data, NULL),
    S("val_data", val_data, NULL),
    I("validation_freq", validation_freq),
    I("validation_batches", validation_batches),
    S("tokenizer", tokenizer, NULL),
    {"init_from", "pretrained_checkpoint_file", F_STR, offsetof(Config, init_from), sizeof(((Config *)0)->init_from), NULL},
    B("finetune", finetune),
    S("checkpoint_dir", checkpoint_dir, NULL),
    S("run_name", run_name, NULL),
    I("checkpoint_freq", checkpoint_freq),
    {"resume_from_checkpoint", "restart_checkpoint_file", F_STR, offsetof(Config, resume_from_checkpoint),
     sizeof(((Config *)0)->resume_from_checkpoint), NULL},
    I("num_kept_checkpoints", num_kept_checkpoints),
    B("overwrite_checkpoints", overwrite_checkpoints),
    S("device", device, "auto|cpu|cuda"),
    S("environment", environment, "local|pbs"),
    I("logging_freq", logging_freq),
    S("metrics_file", metrics_file, NULL),
    B("profile", profile),
    B("log_timestamps", log_timestamps),
    I("num_threads", num_threads),
    S("prompt", prompt, NULL),
    I("num_tokens", num_tokens),
    FL("temperature", temperature),
    FL("top_p", top_p),
    // the seed recipes' spellings (README, "Flags of the seed recipes")
    ALIAS("train_batch_size", F_INT, batch_size),
    UNSUP("val_batch_size", "validation runs at --batch_size"),
    MAP("sharding_strategy", F_MAP, sharding,
        "full=full-shard|hybrid=hybrid-full-shard|fsdp=full-shard|hsdp=hybrid-full-shard|ddp=no-shard"),
    ALIAS("activation_checkpointing", F_BOOL, activation_checkpoints),
    ALIAS("fsdp_activation_checkpointing", F_BOOL, activation_checkpoints),
    MAP("bf16", F_BOOLSTR, precision, "bf16|float32"),
    ALIAS("resid_pdrop", F_FLOAT, model.dropout),
    ALIAS("embd_pdrop", F_FLOAT, model.dropout),
    ALIAS("attn_pdrop", F_FLOAT, model.dropout),
    UNSUP("plateau", "the learning rate follows --lr_decay_style (cosine, linear or constant), not a plateau schedule"),
    ALIAS("epochs", F_INT, max_epochs),
    UNSUP("restart_epoch", "a checkpoint records its step, and a resumed run continues from there"),
    ALIAS("ckpt_load_path", F_STR, resume_from_checkpoint),
    ALIAS("ckpt_save_path", F_STR, checkpoint_dir),
    ALIAS("report_interval", F_INT, logging_freq),
    ALIAS("checkpoint_interval", F_INT, checkpoint_freq),
    ALIAS("data_path", F_STR, train_data),
    ALIAS("low_cpu_fsdp", F_BOOL, meta_init),
    UNSUP("use_profiler", "use --profile for the per-phase table, or nsys with the NVTX ranges on a GPU"),
    UNSUP("zipped_data", "training reads token shards: turn .jsonl.gz into them with fsdpc prepare, which reads gzip"),
};
#define NFLAGS (sizeof flags / sizeof flags[0])

static void defaults(Config *c) {
    memset(c, 0, sizeof *c);
    ModelConfig *m = &c->model;
    snprintf(m->model_type, sizeof m->model_type, "llama_v2");
    config_preset(m, "tiny");
    m->rope_theta = 10000.0f;
    m->norm_eps = 1e-5f;
    m->initializer_range = 0.02f;
    snprintf(c->sharding, sizeof c->sharding, "full-shard");
    snprintf(c->precision, sizeof c->precision, "float32");
    snprintf(c->reduce_dtype, sizeof c->reduce_dtype, "float32");
    c->batch_size = 16;
    c->grad_accum = 1;
    c->max_steps = -1;  // unset: --max_epochs decides, else 300
    c->seed = 1234;
    c->lr = 1e-3f;
    c->min_lr = 1e-4f;
    c->warmup = 20;
    snprintf(c->lr_decay_style, sizeof c->lr_decay_style, "cosine");
    c->weight_decay = 0.1f;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->adam_eps = 1e-8f;
    c->grad_clip = 1.0f;
    snprintf(c->tokenizer, sizeof c->tokenizer, "byte");
    c->validation_freq = 100;
    c->validation_batches = 8;
    snprintf(c->checkpoint_dir, sizeof c->checkpoint_dir, "checkpoints");
    c->checkpoint_freq = 100;
    snprintf(c->device, sizeof c->device, "auto");
    snprintf(c->environment, sizeof c->environment, "local");
    c->logging_freq = 10;
    c->num_tokens = 256;
    c->temperature = 0.8f;
    c->top_p = 0.95f;
}

// which flags the command line set (a preset counts for the sizes it sets): a model config read
// from a checkpoint or a Hugging Face config.json fills the others and must agree with these
static unsigned char flag_given[NFLAGS];

static const Flag *find_flag(const char *name) {
    for (size_t i = 0; i < NFLAGS; i++)
        if (strcmp(flags[i].name, name) == 0 || (flags[i].alias && strcmp(flags[i].alias, name) == 0)) return &flags[i];
    return NULL;
}

static int parse_bool(const char *v, int *out) {
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "True")) return *out = 1, 1;
    if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "False")) return *out = 0, 1;
    return 0;
}

static void set_flag(Config *c, const Flag *f, const char *v) {
    char *field = (char *)c + f->off, *end = NULL;
    switch (f->kind) {
    case F_INT: {
        long x = strtol(v, &end, 10);
        if (!*v || *end || x < -2147483647L || x > 2147483647L) comm_fail_all("--%s expects an integer, got '%s'", f->name, v);
        *(int *)field = (int)x;
        break;
    }
    case F_FLOAT: {
        float x = strtof(v, &end);
        if (!*v || *end) comm_fail_all("--%s expects a number, got '%s'", f->name, v);
        if (!isfinite(x)) comm_fail_all("--%s must be a finite number, got '%s'", f->name, v);
        *(float *)field = x;
        break;
    }
    case F_BOOL:
        if (!parse_bool(v, (int *)field)) comm_fail_all("--%s expects 0/1/true/false, got '%s'", f->name, v);
        break;
    case F_MAP: {
        size_t n = strlen(v);
        for (const char *p = f->choices; *p;) {
            const char *eq = strchr(p, '='), *bar = strchr(p, '|');
            size_t to_len = bar ? (size_t)(bar - eq - 1) : strlen(eq + 1);
            if ((size_t)(eq - p) == n && !strncmp(p, v, n)) {
                snprintf(field, f->size, "%.*s", (int)to_len, eq + 1);
                return;
            }
            p = bar ? bar + 1 : eq + 1 + to_len;
        }
        comm_fail_all("--%s must be one of %s (each as from=setting), got '%s'", f->name, f->choices, v);
    }
    case F_BOOLSTR: {
        int on;
        if (!parse_bool(v, &on)) comm_fail_all("--%s expects 0/1/true/false, got '%s'", f->name, v);
        const char *bar = strchr(f->choices, '|');
        if (on) snprintf(field, f->size, "%.*s", (int)(bar - f->choices), f->choices);
        else snprintf(field, f->size, "%s", bar + 1);
        break;
    }
    case F_UNSUP: {
        int on;
        if (!parse_bool(v, &on) || on) comm_fail_all("--%s %s is not supported yet: %s", f->name, v, f->choices);
        break;
    }
    case F_STR:
        if (strlen(v) >= f->size) comm_fail_all("--%s value is too long (max %zu characters)", f->name, f->size - 1);
        if (f->choices) {
            size_t n = strlen(v);
            const char *p = f->choices;
            int ok = 0;
            while (*p && !ok) {
                const char *bar = strchr(p, '|');
                size_t len = bar ? (size_t)(bar - p) : strlen(p);
                ok = len == n && strncmp(p, v, n) == 0;
                p += len + (bar != NULL);
            }
            if (!ok) comm_fail_all("--%s must be one of %s, got '%s'", f->name, f->choices, v);
        }
        snprintf(field, f->size, "%s", v);
        break;
    }
}

const char *config_validate_model(const ModelConfig *m) {
    static char msg[256];
    if (m->hidden_width <= 0 || m->num_layers <= 0 || m->num_heads <= 0 || m->num_key_value_heads <= 0 ||
        m->intermediate_size <= 0 || m->max_context_width <= 0 || m->vocab_size <= 0)
        return "model sizes (--hidden_width, --num_layers, --num_heads, --num_key_value_heads, --intermediate_size, "
               "--max_context_width, --vocab_size) must all be positive";
    if (m->hidden_width % m->num_heads) {
        snprintf(msg, sizeof msg, "--num_heads %d does not divide --hidden_width %d", m->num_heads, m->hidden_width);
        return msg;
    }
    if (m->num_heads % m->num_key_value_heads) {
        snprintf(msg, sizeof msg, "--num_key_value_heads %d does not divide --num_heads %d", m->num_key_value_heads, m->num_heads);
        return msg;
    }
    int llama = !strcmp(m->model_type, "llama_v2");
    if (!llama && m->num_key_value_heads != m->num_heads) {
        snprintf(msg, sizeof msg, "--num_key_value_heads %d: model_type %s has no grouped-query attention (it must equal --num_heads %d)",
                 m->num_key_value_heads, m->model_type, m->num_heads);
        return msg;
    }
    if (llama && config_head_dim(m) % 2) {
        snprintf(msg, sizeof msg, "head dimension %d (hidden_width/num_heads) must be even for RoPE", config_head_dim(m));
        return msg;
    }
    if (m->rope_theta <= 0 || m->norm_eps <= 0) return "--rope_theta and the norm epsilon must be positive";
    return NULL;
}

static void validate(const Config *c) {
    const ModelConfig *m = &c->model;
    const char *err = config_validate_model(m);
    if (err) comm_fail_all("%s", err);
    // refused with a reason rather than silently ignored: these arrive with later work
    if (m->dropout < 0.0f || m->dropout >= 1.0f) comm_fail_all("--dropout must be in [0, 1), got %g", m->dropout);
    if (c->batch_size <= 0) comm_fail_all("--batch_size must be positive");
    if (c->grad_accum <= 0) comm_fail_all("--grad_accum must be positive");
    if (c->skip_nonfinite_steps < 0) comm_fail_all("--skip_nonfinite_steps must be >= 0");
    if (c->max_steps < -1) comm_fail_all("--max_steps must be >= 0");
    if (c->max_epochs < 0 && c->max_steps > 0)
        comm_fail_all("--max_epochs %d (evaluate, then generate) and --max_steps %d contradict each other", c->max_epochs, c->max_steps);
    if (c->lr < 0 || c->min_lr < 0 || c->min_lr > c->lr) comm_fail_all("need 0 <= --min_lr <= --lr");
    if (c->warmup < 0) comm_fail_all("--warmup must be >= 0 (steps, or a fraction of --max_steps when below 1)");
    if (c->beta1 < 0 || c->beta1 >= 1 || c->beta2 < 0 || c->beta2 >= 1) comm_fail_all("--beta1/--beta2 must be in [0, 1)");
    if (c->weight_decay < 0) comm_fail_all("--weight_decay must be >= 0");
    if (c->logging_freq <= 0) comm_fail_all("--logging_freq must be positive");
    if (c->checkpoint_freq < 0 || c->validation_freq < 0) comm_fail_all("--checkpoint_freq/--validation_freq must be >= 0");
    if (c->validation_batches <= 0) comm_fail_all("--validation_batches must be positive");
    if (c->num_kept_checkpoints < 0) comm_fail_all("--num_kept_checkpoints must be >= 0 (0 keeps all)");
    if (c->num_tokens < 0) comm_fail_all("--num_tokens must be >= 0");
    if (c->temperature < 0) comm_fail_all("--temperature must be >= 0 (0 = greedy)");
    if (c->top_p <= 0 || c->top_p > 1) comm_fail_all("--top_p must be in (0, 1]");
    if (c->shard_group_size < 0) comm_fail_all("--shard_group_size must be positive");
    if (c->shard_group_size > 0 && strncmp(c->sharding, "hybrid-", 7) != 0)
        comm_fail_all("--shard_group_size %d only applies to --sharding hybrid-full-shard|hybrid-grad-shard (this run uses %s)",
                      c->shard_group_size, c->sharding);
    if (c->model.initializer_range <= 0) comm_fail_all("--initializer_range must be positive");
    if (c->grad_clip < 0) comm_fail_all("--grad_clip must be >= 0 (0 = no clipping)");
    if (!c->checkpoint_dir[0]) comm_fail_all("--checkpoint_dir needs a directory (--checkpoint_freq 0 turns checkpoints off)");
    if (c->selective_checkpointing < 0) comm_fail_all("--selective_checkpointing must be >= 0 (every Nth block)");
    if (c->num_threads < 0) comm_fail_all("--num_threads must be >= 0 (0 = all cores)");
    if (!c->tokenizer[0]) comm_fail_all("--tokenizer needs a value: byte, a tokenizer.model / tokenizer.json, a directory or a hub name");
    if (c->finetune && !c->init_from[0])
        comm_fail_all("--finetune needs the weights to start from: --init_from PATH (or --pretrained_checkpoint_file FILE)");
}

uint64_t config_hash(const Config *c) {
    static Config copy;
    memcpy(&copy, c, sizeof copy);  // bytes, padding included
    copy.num_threads = 0;  // cores per node may differ once resolved
    uint64_t h = 0xcbf29ce484222325ULL;
    const unsigned char *b = (const unsigned char *)&copy;
    for (size_t i = 0; i < sizeof copy; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

int config_given(const char *name) {
    const Flag *f = find_flag(name);
    return f && flag_given[f - flags];
}

void config_adopt_model(Config *c, const ModelConfig *src, unsigned known, const char *source) {
    static const struct {
        unsigned bit;
        const char *flag;  // NULL: no flag sets it
        size_t off;
        int is_float, from_preset;
    } fields[] = {
        {MODEL_HIDDEN, "hidden_width", offsetof(ModelConfig, hidden_width), 0, 1},
        {MODEL_LAYERS, "num_layers", offsetof(ModelConfig, num_layers), 0, 1},
        {MODEL_HEADS, "num_heads", offsetof(ModelConfig, num_heads), 0, 1},
        {MODEL_KV_HEADS, "num_key_value_heads", offsetof(ModelConfig, num_key_value_heads), 0, 1},
        {MODEL_INTERMEDIATE, "intermediate_size", offsetof(ModelConfig, intermediate_size), 0, 1},
        {MODEL_VOCAB, "vocab_size", offsetof(ModelConfig, vocab_size), 0, 1},
        {MODEL_CONTEXT, "max_context_width", offsetof(ModelConfig, max_context_width), 0, 0},
        {MODEL_ROPE_THETA, "rope_theta", offsetof(ModelConfig, rope_theta), 1, 0},
        {MODEL_NORM_EPS, NULL, offsetof(ModelConfig, norm_eps), 1, 0},
    };
    ModelConfig *m = &c->model;
    if ((known & MODEL_TYPE) && strcmp(m->model_type, src->model_type) != 0) {
        if (config_given("model_type") || config_given("model_name"))
            comm_fail_all("%s holds a %s model but this run has --model_type %s%s", source, src->model_type, m->model_type,
                          config_given("model_type") ? "" : " (from --model_name; drop it to take the model from the source)");
        snprintf(m->model_type, sizeof m->model_type, "%s", src->model_type);
        if (!strcmp(m->model_type, "mingpt")) m->num_key_value_heads = m->num_heads;
    }
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (!(known & fields[i].bit)) continue;
        char *dst = (char *)m + fields[i].off;
        const char *val = (const char *)src + fields[i].off;
        int given = fields[i].flag && (config_given(fields[i].flag) || (fields[i].from_preset && config_given("model_name")));
        if (given && fields[i].bit == MODEL_CONTEXT) continue;
        int same = fields[i].is_float ? *(const float *)dst == *(const float *)val : *(const int *)dst == *(const int *)val;
        if (given && !same) {
            if (fields[i].is_float)
                comm_fail_all("%s has %s=%g but this run has --%s %g", source, fields[i].flag, *(const float *)val,
                              fields[i].flag, *(const float *)dst);
            comm_fail_all("%s has %s=%d but this run has --%s %d%s", source, fields[i].flag, *(const int *)val,
                          fields[i].flag, *(const int *)dst,
                          config_given(fields[i].flag) ? "" : " (from --model_name; drop it to take the sizes from the source)");
        }
        memcpy(dst, val, fields[i].is_float ? sizeof(float) : sizeof(int));
    }
    validate(c);
}

// What a family fixes that the Llama-shaped defaults do not: minGPT has one key/value head per
// head, an MLP of 4*D unless told, and learned positions instead of RoPE.
static void family_defaults(Config *c) {
    ModelConfig *m = &c->model;
    ModelConfig preset = *m;
    if (config_given("model_name") && config_given("model_type") && config_preset(&preset, m->model_name) &&
        strcmp(preset.model_type, m->model_type) != 0)
        comm_fail_all("--model_name %s is a %s preset but this run has --model_type %s", m->model_name, preset.model_type,
                      m->model_type);
    if (!strcmp(m->model_type, "llama_v2")) return;
    if (config_given("rope_theta")) comm_fail_all("--rope_theta applies to llama_v2; %s learns its positions", m->model_type);
    if (!config_given("num_key_value_heads")) m->num_key_value_heads = m->num_heads;
    if (!config_given("intermediate_size")) m->intermediate_size = 4 * m->hidden_width;
}

// --run_name R puts checkpoints in checkpoint_dir/R, and a resume directory equal to the
// checkpoint directory follows it (checkpoint dir = resume dir)
static void join_run_name(Config *c) {
    if (!c->run_name[0]) return;
    if (strchr(c->run_name, '/') || !strcmp(c->run_name, ".") || !strcmp(c->run_name, ".."))
        comm_fail_all("--run_name '%s' names a subdirectory of --checkpoint_dir: no '/', '.' or '..'", c->run_name);
    int follow = !strcmp(c->resume_from_checkpoint, c->checkpoint_dir);
    char dir[sizeof c->checkpoint_dir] = {0};  // whole: the config hash reads every byte
    if (snprintf(dir, sizeof dir, "%s/%s", c->checkpoint_dir, c->run_name) >= (int)sizeof dir)
        comm_fail_all("--checkpoint_dir/--run_name is too long (max %zu characters)", sizeof dir - 1);
    memcpy(c->checkpoint_dir, dir, sizeof dir);
    if (follow) memcpy(c->resume_from_checkpoint, dir, sizeof dir);
}

void config_parse(Config *c, int argc, char **argv) {
    defaults(c);
    memset(flag_given, 0, sizeof flag_given);
    // the preset goes first so explicit size flags override it wherever they appear
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 1; i < argc; i++) {
            const char *a = argv[i];
            if (strncmp(a, "--", 2) != 0) comm_fail_all("unexpected argument '%s' (flags look like --name value or --name=value)", a);
            char name[64];
            const char *eq = strchr(a + 2, '='), *val = NULL;
            size_t nlen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            if (nlen >= sizeof name) comm_fail_all("unknown flag '%s'", a);
            memcpy(name, a + 2, nlen);
            name[nlen] = 0;
            if (!strcmp(name, "help")) comm_fail_all("usage: fsdpc [--flag value ...]; flags are listed in README.md");
            const Flag *f = find_flag(name);
            if (!f) comm_fail_all("unknown flag '--%s' (see README.md for the list)", name);
            if (eq) {
                val = eq + 1;
            } else if (f->kind == F_UNSUP) {  // any value may follow; none means "on"
                val = i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 ? argv[++i] : "1";
            } else if (f->kind == F_BOOL || f->kind == F_BOOLSTR) {
                int dummy;  // a bare boolean flag means true; an explicit 0/1 after it is consumed
                val = (i + 1 < argc && parse_bool(argv[i + 1], &dummy)) ? argv[++i] : "1";
            } else {
                if (i + 1 >= argc) comm_fail_all("flag '--%s' needs a value", name);
                val = argv[++i];
            }
            int is_preset = f->off == offsetof(Config, model.model_name);
            if (pass == 0 && is_preset && !config_preset(&c->model, val))
                comm_fail_all("--model_name '%s' is not a preset (%s)", val, preset_names());
            if (pass == 0 && is_preset) flag_given[f - flags] = 1;
            if (pass == 1 && !is_preset) {
                set_flag(c, f, val);
                // an alias counts as its setting given, whichever spelling the command line used
                for (size_t j = 0; j < NFLAGS; j++)
                    if (flags[j].off == f->off && flags[j].kind != F_UNSUP && f->kind != F_UNSUP) flag_given[j] = 1;
            }
        }
    }
    family_defaults(c);
    join_run_name(c);
    validate(c);
}

void config_describe(const Config *c, char *buf, int len) {
    const ModelConfig *m = &c->model;
    snprintf(buf, len,
             "model=%s/%s D=%d L=%d H=%d KV=%d F=%d T=%d V=%d sharding=%s precision=%s batch_size=%d grad_accum=%d "
             "max_steps=%d lr=%g min_lr=%g warmup=%g decay=%s wd=%g betas=%g,%g grad_clip=%g seed=%d train_data=%s",
             m->model_type, m->model_name, m->hidden_width, m->num_layers, m->num_heads, m->num_key_value_heads,
             m->intermediate_size, m->max_context_width, m->vocab_size, c->sharding, c->precision, c->batch_size,
             c->grad_accum, c->max_steps, c->lr, c->min_lr, c->warmup, c->lr_decay_style, c->weight_decay, c->beta1,
             c->beta2, c->grad_clip, c->seed, c->train_data[0] ? c->train_data : "(bundled tinyshakespeare)");
}
