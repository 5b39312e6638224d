// recipes: the seed recipes' defaults and the flag spellings that identify them (recipes.h).
#include "recipes.h"
#include "../base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// One default: fsdpc's flag and the recipe's value. Only for a model of `family` (NULL: any); only
// when the command line gave flag `when` (NULL: always); never when it gave `unless`. `env`: the
// value is that environment variable's (the default is skipped where it is unset).
typedef struct {
    const char *flag, *value, *family, *when, *unless, *env;
} RecipeDefault;

struct Recipe {
    const char *id;    // --recipe_defaults
    const char *name;  // the script whose defaults these are
    const char *const *marks;  // spellings only this recipe's launch lines use (shared ones in several lists)
    const RecipeDefault *defaults;  // the family's default first; ends with {NULL}
    const char *differs;
    const char *(*check)(const Recipe *r, const Config *c);  // recipe_check's, or NULL
    const char *no_data;  // recipe_no_data's
    int rotary_neox_only;  // its script passes --rotary_pct and --rotary_emb_base to GPT-NeoX's config only
};

#define D(f, v, ...) {.flag = f, .value = v, __VA_ARGS__}
#define LLAMA .family = "llama_v2"
#define NEOX .family = "gpt_neox"
#define MINGPT .family = "mingpt"
#define MIXTRAL .family = "mixtral"
#define MISTRAL .family = "mistral"  // --model_type mistral: the Llama family as MistralConfig builds it

// 10.FSDP (3.test_cases/10.FSDP, now pytorch/FSDP): model_utils/arguments.py and train_utils.py's
// get_model_config. Its dropout flags are read but never reach the model (dropout 0); its data is
// C4 streamed with gpt-neox-20b's tokenizer, cut into 4096-token sequences.
static const char *const fsdp10_marks[] = {"dataset", "offload_activation", "train_batch_size", "max_training_steps", "bf16",
                                           "activation_checkpointing", "resid_pdrop", "embd_pdrop", "attn_pdrop",
                                           "summary_first_pdrop", "rotary_emb_base", "same_seed", "epochs", NULL};
static const RecipeDefault fsdp10_defaults[] = {
    D("model_type", "gpt_neox"),
    D("hidden_width", "768"), D("num_layers", "12"), D("num_heads", "12"), D("max_context_width", "4096"),
    D("vocab_size", "50432"), D("intermediate_size", "11008", LLAMA), D("intermediate_size", "11008", MIXTRAL),
    D("initializer_range", "0.02"), D("rotary_pct", "0.25", NEOX), D("rope_theta", "10000", NEOX),
    D("sliding_window", "4096", MISTRAL), D("norm_eps", "1e-05", MISTRAL),
    D("batch_size", "2"), D("val_batch_size", "4"), D("max_steps", "5000"), D("seed", "12345"), D("precision", "bf16"),
    D("grad_clip", "1.0"), D("weight_decay", "0.2"), D("beta1", "0.9"), D("beta2", "0.95"), D("activation_checkpoints", "1"),
    D("logging_freq", "1"), D("lr", "0.0001"), D("lr_decay_style", "cosine"), D("min_lr", "1e-05"), D("warmup", "0.0032"),
    D("plateau", "0"), D("train_data", "allenai/c4"), D("dataset_config_name", "en"),
    D("tokenizer", "EleutherAI/gpt-neox-20b"), D("validation_freq", "0"), D("validation_batches", "10"),
    D("sharding", "full-shard"), D("cpu_offload", "0"),
    // it saves only when given a folder
    D("checkpoint_freq", "1000", .when = "checkpoint_dir"), D("checkpoint_freq", "0", .unless = "checkpoint_dir"),
    {NULL}};

// SMP v2 (3.test_cases/17.SM-modelparallelv2): scripts/arguments.py and train_utils.py. Its data
// is pre-tokenized (--training_dir, SageMaker's SM_CHANNEL_TRAIN) or synthetic; its schedule spans
// --lr_decay_iters 47683 steps whatever --max_steps is, and --warmup is a fraction of that.
static const char *const smp_marks[] = {
    "shard_degree", "use_smp_implementation", "training_dir", "test_dir", "llama_intermediate_size", "use_synthetic_data",
    "fp8", "fp8_amax_history_len", "fp8_amax_compute_algo", "delayed_param", "hf_pretrained_model_name_or_dir",
    "dataset_type", "zipped_data", "data_num_workers", "checkpoint_type", "profile_nsys", "use_smp_flash_attn",
    "patch_neox_rope", "enable_memory_profiling", "clean_cache", "log_reduced_training_loss", "logging_freq_for_avg",
    "model_dir", "save_final_model", "data_type", "forward_prefetch", "use_orig_params", "backward_fetch_policy",
    "auto_wrap_policy", "preserve_np_state", "fast_validation", "distributed_backend", "nccl_test_log", "framework",
    "finetune_checkpoint_load_dir", "pretrained_checkpoint_file",
    "pretrained_model_name", "train_batch_size", "max_training_steps", "bf16", "activation_checkpointing", "resid_pdrop",
    "embd_pdrop", "attn_pdrop", "summary_first_pdrop", "rotary_emb_base", "same_seed", "epochs", NULL};
static const RecipeDefault smp_defaults[] = {
    D("model_type", "gpt_neox"),
    D("hidden_width", "768"), D("num_layers", "12"), D("num_heads", "12"), D("max_context_width", "2048"),
    D("vocab_size", "50432"), D("intermediate_size", "11008", LLAMA), D("intermediate_size", "14336", MIXTRAL),
    D("initializer_range", "0.02"), D("rotary_pct", "0.25", NEOX), D("rope_theta", "10000", NEOX), D("dropout", "0.1", MINGPT),
    D("sliding_window", "None", MISTRAL), D("norm_eps", "1e-06", MISTRAL),
    D("batch_size", "2"), D("val_batch_size", "4"), D("max_steps", "5000"), D("seed", "12345"), D("precision", "bf16"),
    D("reduce_dtype", "bf16"), D("grad_clip", "1.0"), D("weight_decay", "0.2"), D("beta1", "0.9"), D("beta2", "0.95"),
    D("activation_checkpoints", "1"), D("logging_freq", "1"), D("lr", "0.0001"), D("lr_decay_style", "cosine"),
    D("lr_decay_iters", "47683"), D("min_lr", "1e-05"), D("warmup", "153"), D("plateau", "0"),
    D("checkpoint_freq", "1000"), D("checkpoint_dir", "/opt/ml/checkpoints"), D("num_kept_checkpoints", "2"),
    D("validation_freq", "0"), D("validation_batches", "10"), D("sharding", "hybrid-full-shard"),
    D("train_data", NULL, .env = "SM_CHANNEL_TRAIN"), D("val_data", NULL, .env = "SM_CHANNEL_TEST"),
    {NULL}};

// The FSDP profiling recipe (19.FSDP-llama2-profiling): training.py's parse_arge() and
// config/train_config.py. AdamW's betas and weight decay, the precision and the seed are fixed in
// its code; its schedule warms up quadratically over num_steps/20 (at most 2000) steps, then decays
// by cosine to a tenth of the rate.
static const char *const prof_marks[] = {
    "ckpt_load_path", "ckpt_save_path", "load_ckpt_path", "save_ckpt_path", "data_path", "dataset_path",
    "fsdp_activation_checkpointing", "low_cpu_fsdp", "report_interval", "checkpoint_interval", "num_steps",
    "use_torch_compile", "use_wandb", "use_profiler", "use_nsight", "use_nsys", "learning_rate", "grad_clip_thresh", NULL};
static const RecipeDefault prof_defaults[] = {
    D("model_name", "llama2_7b"),
    D("train_data", "/fsx/data/examples_datasets/wikicorpus_llama2_7B_tokenized_4k"),
    D("resume_from_checkpoint", "/fsx/llama2/pretrain/ckpt"), D("checkpoint_dir", "/fsx/llama2/pretrain/ckpt"),
    D("sharding", "full-shard"), D("batch_size", "2"), D("logging_freq", "200"), D("checkpoint_freq", "20000"),
    D("max_steps", "2000"), D("lr", "0.0003"), D("grad_clip", "4.0"), D("weight_decay", "0.1"), D("beta1", "0.9"),
    D("beta2", "0.95"), D("precision", "bf16"), D("reduce_dtype", "bf16"), D("seed", "2023"), D("warmup", "0.05"),
    D("lr_decay_style", "cosine"), D("min_lr", "3e-05"), D("validation_freq", "0"),
    {NULL}};

// azton/minimal_fsdp: utilities.py's get_args() and minGPT.py (an MLP of 3072 whatever the width,
// AdamW with torch's defaults, the gradient clipped at 1). Its rows of 256 GPT-2 ids are inputs of
// 255; it warms up over 10 epochs' steps inside a 50-epoch cosine and validates every epoch.
static const char *const mini_marks[] = {"model", "embed_size", "seq_length", "seq_len", "ffn_hidden_size",
                                         "restart_checkpoint_file", "restart_epoch", "environment", NULL};
static const RecipeDefault mini_defaults[] = {
    D("model_type", "mingpt"),
    D("hidden_width", "768"), D("num_layers", "12"), D("num_heads", "12"), D("max_context_width", "255"),
    D("vocab_size", "50257"), D("intermediate_size", "3072"), D("dropout", "0"),
    D("batch_size", "10"), D("max_epochs", "10"), D("precision", "bf16"), D("reduce_dtype", "bf16"), D("lr", "0.001"),
    D("weight_decay", "0.01"), D("beta1", "0.9"), D("beta2", "0.999"), D("grad_clip", "1.0"), D("sharding", "no-shard"),
    D("train_data", "data/shakespeare/train.h5"), D("val_data", "data/shakespeare/validation.h5"), D("num_tokens", "100"),
    D("run_name", "test"),
    {NULL}};

// SMP trains in FP8 when --use_smp_implementation 1 leaves --fp8 at its default 1
static const char *smp_check(const Recipe *r, const Config *c) {
    static char msg[400];
    if (!c->recipe.use_smp_implementation || cli_spelled("fp8")) return NULL;
    return err_text(msg, sizeof msg, "%s trains in FP8 when --use_smp_implementation 1 leaves --fp8 at its default 1, which "
             "fsdpc does not: add --fp8 0 to train in bf16 (as SMP's README says for P4 instances)", r->name);
}

static const Recipe recipes[] = {
    {"fsdp10", "10.FSDP's train.py", fsdp10_marks, fsdp10_defaults,
     "it trains max_steps + epochs - 1 steps and cuts its data into 4096-token sequences whatever --max_context_width "
     "says, and its dropout flags never reach its model; fsdpc trains --max_steps steps of --max_context_width tokens "
     "and applies --resid_pdrop/--embd_pdrop/--attn_pdrop as --dropout", NULL, NULL, 1},
    {"smp", "SMP v2's train_external.py", smp_marks, smp_defaults,
     "its --warmup is a fraction of --lr_decay_iters (fsdpc's, below 1, of --max_steps: its default is SMP's 153 steps)",
     smp_check, "SMP v2's train_external.py trains on --training_dir (default $SM_CHANNEL_TRAIN, unset here), never on "
     "other text: give --training_dir, or --use_synthetic_data 1", 1},
    {"profiling", "the FSDP profiling recipe's training.py", prof_marks, prof_defaults,
     "its warm-up is quadratic and its RMSNorm epsilon 1e-6 (fsdpc: linear, and Llama-2's 1e-5), it decays to a "
     "tenth of --learning_rate (fsdpc: to --min_lr, 3e-05 unless given), and its type=bool flags take =False as on "
     "(fsdpc does what the flag says)", NULL, NULL, 0},
    {"minimal_fsdp", "minimal_fsdp's basic_training.py", mini_marks, mini_defaults,
     "it warms up over 10 epochs' steps inside a 50-epoch cosine and validates and saves every epoch; fsdpc warms up "
     "over --warmup steps, decays by cosine to --min_lr at the last step, and validates and saves by steps", NULL, NULL, 0},
};
enum { NRECIPES = sizeof recipes / sizeof recipes[0] };

const CliChoice recipe_choices[] = {{"auto", RECIPE_AUTO}, {"none", RECIPE_NONE}, {"fsdp10", 0}, {"smp", 1},
                                    {"profiling", 2}, {"minimal_fsdp", 3}, {NULL, 0}};

const char *recipe_name(const Recipe *r) { return r->name; }
const char *recipe_differs(const Recipe *r) { return r->differs; }

int recipe_rotary_neox_only(const Recipe *r) { return r->rotary_neox_only; }
const char *recipe_check(const Recipe *r, const Config *c) { return r->check ? r->check(r, c) : NULL; }
const char *recipe_no_data(const Recipe *r) { return r->no_data; }

static int marks(const Recipe *r, const char *spelling) {
    for (const char *const *m = r->marks; *m; m++)
        if (!strcmp(*m, spelling)) return 1;
    return 0;
}

// the first default of r for flag (any family), or NULL
static const char *default_of(const Recipe *r, const char *flag) {
    for (const RecipeDefault *d = r->defaults; d->flag; d++)
        if (!strcmp(d->flag, flag) && !d->family && !d->when && !d->unless) return d->env ? NULL : d->value;
    return NULL;
}

// a setting a or b defaults (the other leaving it to fsdpc, or defaulting it otherwise) that the
// command line does not give, or NULL
static const char *differ(const Recipe *a, const Recipe *b, int (*given)(const Config *c, const char *flag), const Config *c) {
    for (const RecipeDefault *d = a->defaults; d->flag; d++) {
        if (d->env || given(c, d->flag)) continue;
        const char *va = default_of(a, d->flag), *vb = default_of(b, d->flag);
        if (!va || !vb || strcmp(va, vb)) return d->flag;
    }
    return NULL;
}

static int chosen = RECIPE_NONE;
int recipe_chosen(void) { return chosen; }

static const Recipe *found(const Recipe *r) {
    chosen = r ? (int)(r - recipes) : RECIPE_NONE;
    return r;
}

const Recipe *recipe_find(int choice, int (*given)(const Config *c, const char *flag), const Config *c, const char **why) {
    static char msg[600];
    *why = NULL;
    chosen = RECIPE_NONE;
    if (choice == RECIPE_NONE) return NULL;
    if (choice >= 0) return found(&recipes[choice]);
    // the first recipe (in table order) whose spellings include every recipe spelling the line uses
    int any = 0;
    for (int i = 0; i < NRECIPES; i++)
        for (const char *const *m = recipes[i].marks; *m; m++) any += cli_spelled(*m);
    if (!any) return NULL;
    for (int i = 0; i < NRECIPES; i++) {
        int all = 1;
        for (int j = 0; j < NRECIPES && all; j++)
            for (const char *const *m = recipes[j].marks; *m && all; m++)
                if (cli_spelled(*m) && !marks(&recipes[i], *m)) all = 0;
        if (all) return found(&recipes[i]);
    }
    // spellings of two recipes: fine only where their defaults agree on what the line leaves out
    const Recipe *a = NULL, *b = NULL;
    const char *ma = NULL, *mb = NULL;
    for (int i = 0; i < NRECIPES; i++)
        for (const char *const *m = recipes[i].marks; *m; m++) {
            if (!cli_spelled(*m)) continue;
            if (!a) a = &recipes[i], ma = *m;
            else if (!marks(a, *m) && !b) b = &recipes[i], mb = *m;
        }
    const char *flag = differ(a, b, given, c);
    if (!flag) flag = differ(b, a, given, c);
    if (!flag) return found(a);
    const char *va = default_of(a, flag), *vb = default_of(b, flag);
    snprintf(msg, sizeof msg, "--%s is %s's flag and --%s is %s's, whose defaults differ (--%s %s against %s): give "
             "--recipe_defaults %s|%s|none, or --%s", ma, a->name, mb, b->name, flag, va ? va : "unset", vb ? vb : "unset",
             a->id, b->id, flag);
    *why = msg;
    return NULL;
}

void recipe_each_default(const Recipe *r, const char *model_type, const char *variant, int (*given)(const Config *c, const char *flag),
                         const Config *c, void (*set)(const char *flag, const char *value, void *ctx), void *ctx) {
    for (const RecipeDefault *d = r->defaults; d->flag; d++) {
        if (d->family && strcmp(d->family, model_type) && (!variant || strcmp(d->family, variant))) continue;
        if ((d->when && !given(c, d->when)) || (d->unless && given(c, d->unless))) continue;
        const char *v = d->env ? getenv(d->env) : d->value;
        if (v && *v) set(d->flag, v, ctx);
    }
}

void recipe_marks_used(const Recipe *r, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (const char *const *m = r->marks; *m && n < len; m++)
        if (cli_spelled(*m)) n += (size_t)snprintf(buf + n, len - n, "%s--%s", n ? ", " : "", *m);
}
