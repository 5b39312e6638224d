#include "../base/err.h"
// recipes: the seed recipes' defaults and the flag spellings that identify them (recipes.h).
#include "../base/err.h"
#include "recipes.h"
#include "../base/err.h"

#include "../base/err.h"
#include <stdio.h>
#include "../base/err.h"
#include <stdlib.h>
#include "../base/err.h"
#include <string.h>
#include "../base/err.h"

#include "../base/err.h"
// One default: fsdpc's flag and the recipe's value. Only for a model of `family` (NULL: any); only
#include "../base/err.h"
// when the command line gave flag `when` (NULL: always); never when it gave `unless`. `env`: the
#include "../base/err.h"
// value is that environment variable's (the default is skipped where it is unset).
#include "../base/err.h"
typedef struct {
#include "../base/err.h"
    const char *flag, *value, *family, *when, *unless, *env;
#include "../base/err.h"
} RecipeDefault;
#include "../base/err.h"

#include "../base/err.h"
struct Recipe {
#include "../base/err.h"
    const char *id;    // --recipe_defaults
#include "../base/err.h"
    const char *name;  // the script whose defaults these are
#include "../base/err.h"
    const char *const *marks;  // spellings only this recipe's launch lines use (shared ones in several lists)
#include "../base/err.h"
    const RecipeDefault *defaults;  // the family's default first; ends with {NULL}
#include "../base/err.h"
    const char *differs;
#include "../base/err.h"
    const char *(*check)(const Recipe *r, const Config *c);  // recipe_check's, or NULL
#include "../base/err.h"
    const char *no_data;  // recipe_no_data's
#include "../base/err.h"
};
#include "../base/err.h"

#include "../base/err.h"
#define D(f, v, ...) {.flag = f, .value = v, __VA_ARGS__}
#include "../base/err.h"
#define LLAMA .family = "llama_v2"
#include "../base/err.h"
#define NEOX .family = "gpt_neox"
#include "../base/err.h"
#define MINGPT .family = "mingpt"
#include "../base/err.h"

#include "../base/err.h"
// 10.FSDP (3.test_cases/10.FSDP, now pytorch/FSDP): model_utils/arguments.py and train_utils.py's
#include "../base/err.h"
// get_model_config. Its dropout flags are read but never reach the model (dropout 0); its data is
#include "../base/err.h"
// C4 streamed with gpt-neox-20b's tokenizer, cut into 4096-token sequences.
#include "../base/err.h"
static const char *const fsdp10_marks[] = {"dataset", "offload_activation", "train_batch_size", "max_training_steps", "bf16",
#include "../base/err.h"
                                           "activation_checkpointing", "resid_pdrop", "embd_pdrop", "attn_pdrop",
#include "../base/err.h"
                                           "summary_first_pdrop", "rotary_emb_base", "same_seed", "epochs", NULL};
#include "../base/err.h"
static const RecipeDefault fsdp10_defaults[] = {
#include "../base/err.h"
    D("model_type", "gpt_neox"),
#include "../base/err.h"
    D("hidden_width", "768"), D("num_layers", "12"), D("num_heads", "12"), D("max_context_width", "4096"),
#include "../base/err.h"
    D("vocab_size", "50432"), D("intermediate_size", "11008", LLAMA), D("initializer_range", "0.02"),
#include "../base/err.h"
    D("rotary_pct", "0.25", NEOX), D("rope_theta", "10000", NEOX),
#include "../base/err.h"
    D("batch_size", "2"), D("val_batch_size", "4"), D("max_steps", "5000"), D("seed", "12345"), D("precision", "bf16"),
#include "../base/err.h"
    D("grad_clip", "1.0"), D("weight_decay", "0.2"), D("beta1", "0.9"), D("beta2", "0.95"), D("activation_checkpoints", "1"),
#include "../base/err.h"
    D("logging_freq", "1"), D("lr", "0.0001"), D("lr_decay_style", "cosine"), D("min_lr", "1e-05"), D("warmup", "0.0032"),
#include "../base/err.h"
    D("plateau", "0"), D("train_data", "allenai/c4"), D("dataset_config_name", "en"),
#include "../base/err.h"
    D("tokenizer", "EleutherAI/gpt-neox-20b"), D("validation_freq", "0"), D("validation_batches", "10"),
#include "../base/err.h"
    D("sharding", "full-shard"), D("cpu_offload", "0"),
#include "../base/err.h"
    // it saves only when given a folder
#include "../base/err.h"
    D("checkpoint_freq", "1000", .when = "checkpoint_dir"), D("checkpoint_freq", "0", .unless = "checkpoint_dir"),
#include "../base/err.h"
    {NULL}};
#include "../base/err.h"

#include "../base/err.h"
// SMP v2 (3.test_cases/17.SM-modelparallelv2): scripts/arguments.py and train_utils.py. Its data
#include "../base/err.h"
// is pre-tokenized (--training_dir, SageMaker's SM_CHANNEL_TRAIN) or synthetic; its schedule spans
#include "../base/err.h"
// --lr_decay_iters 47683 steps whatever --max_steps is, and --warmup is a fraction of that.
#include "../base/err.h"
static const char *const smp_marks[] = {
#include "../base/err.h"
    "shard_degree", "use_smp_implementation", "training_dir", "test_dir", "llama_intermediate_size", "use_synthetic_data",
#include "../base/err.h"
    "fp8", "fp8_amax_history_len", "fp8_amax_compute_algo", "delayed_param", "hf_pretrained_model_name_or_dir",
#include "../base/err.h"
    "dataset_type", "zipped_data", "data_num_workers", "checkpoint_type", "profile_nsys", "use_smp_flash_attn",
#include "../base/err.h"
    "patch_neox_rope", "enable_memory_profiling", "clean_cache", "log_reduced_training_loss", "logging_freq_for_avg",
#include "../base/err.h"
    "model_dir", "save_final_model", "data_type", "forward_prefetch", "use_orig_params", "backward_fetch_policy",
#include "../base/err.h"
    "auto_wrap_policy", "preserve_np_state", "fast_validation", "distributed_backend", "nccl_test_log", "framework",
#include "../base/err.h"
    "num_experts_per_tok", "num_local_experts", "finetune_checkpoint_load_dir", "pretrained_checkpoint_file",
#include "../base/err.h"
    "pretrained_model_name", "train_batch_size", "max_training_steps", "bf16", "activation_checkpointing", "resid_pdrop",
#include "../base/err.h"
    "embd_pdrop", "attn_pdrop", "summary_first_pdrop", "rotary_emb_base", "same_seed", "epochs", NULL};
#include "../base/err.h"
static const RecipeDefault smp_defaults[] = {
#include "../base/err.h"
    D("model_type", "gpt_neox"),
#include "../base/err.h"
    D("hidden_width", "768"), D("num_layers", "12"), D("num_heads", "12"), D("max_context_width", "2048"),
#include "../base/err.h"
    D("vocab_size", "50432"), D("intermediate_size", "11008", LLAMA), D("initializer_range", "0.02"),
#include "../base/err.h"
    D("rotary_pct", "0.25", NEOX), D("rope_theta", "10000", NEOX), D("dropout", "0.1", MINGPT),
#include "../base/err.h"
    D("batch_size", "2"), D("val_batch_size", "4"), D("max_steps", "5000"), D("seed", "12345"), D("precision", "bf16"),
#include "../base/err.h"
    D("reduce_dtype", "bf16"), D("grad_clip", "1.0"), D("weight_decay", "0.2"), D("beta1", "0.9"), D("beta2", "0.95"),
#include "../base/err.h"
    D("activation_checkpoints", "1"), D("logging_freq", "1"), D("lr", "0.0001"), D("lr_decay_style", "cosine"),
#include "../base/err.h"
    D("lr_decay_iters", "47683"), D("min_lr", "1e-05"), D("warmup", "153"), D("plateau", "0"),
#include "../base/err.h"
    D("checkpoint_freq", "1000"), D("checkpoint_dir", "/opt/ml/checkpoints"), D("num_kept_checkpoints", "2"),
#include "../base/err.h"
    D("validation_freq", "0"), D("validation_batches", "10"), D("sharding", "hybrid-full-shard"),
#include "../base/err.h"
    D("train_data", NULL, .env = "SM_CHANNEL_TRAIN"), D("val_data", NULL, .env = "SM_CHANNEL_TEST"),
#include "../base/err.h"
    {NULL}};
#include "../base/err.h"

#include "../base/err.h"
// The FSDP profiling recipe (19.FSDP-llama2-profiling): training.py's parse_arge() and
#include "../base/err.h"
// config/train_config.py. AdamW's betas and weight decay, the precision and the seed are fixed in
#include "../base/err.h"
// its code; its schedule warms up quadratically over num_steps/20 (at most 2000) steps, then decays
#include "../base/err.h"
// by cosine to a tenth of the rate.
#include "../base/err.h"
static const char *const prof_marks[] = {
#include "../base/err.h"
    "ckpt_load_path", "ckpt_save_path", "load_ckpt_path", "save_ckpt_path", "data_path", "dataset_path",
#include "../base/err.h"
    "fsdp_activation_checkpointing", "low_cpu_fsdp", "report_interval", "checkpoint_interval", "num_steps",
#include "../base/err.h"
    "use_torch_compile", "use_wandb", "use_profiler", "use_nsight", "use_nsys", "learning_rate", "grad_clip_thresh", NULL};
#include "../base/err.h"
static const RecipeDefault prof_defaults[] = {
#include "../base/err.h"
    D("model_name", "llama2_7b"),
#include "../base/err.h"
    D("train_data", "/fsx/data/examples_datasets/wikicorpus_llama2_7B_tokenized_4k"),
#include "../base/err.h"
    D("resume_from_checkpoint", "/fsx/llama2/pretrain/ckpt"), D("checkpoint_dir", "/fsx/llama2/pretrain/ckpt"),
#include "../base/err.h"
    D("sharding", "full-shard"), D("batch_size", "2"), D("logging_freq", "200"), D("checkpoint_freq", "20000"),
#include "../base/err.h"
    D("max_steps", "2000"), D("lr", "0.0003"), D("grad_clip", "4.0"), D("weight_decay", "0.1"), D("beta1", "0.9"),
#include "../base/err.h"
    D("beta2", "0.95"), D("precision", "bf16"), D("reduce_dtype", "bf16"), D("seed", "2023"), D("warmup", "0.05"),
#include "../base/err.h"
    D("lr_decay_style", "cosine"), D("min_lr", "3e-05"), D("validation_freq", "0"),
#include "../base/err.h"
    {NULL}};
#include "../base/err.h"

#include "../base/err.h"
// azton/minimal_fsdp: utilities.py's get_args() and minGPT.py (an MLP of 3072 whatever the width,
#include "../base/err.h"
// AdamW with torch's defaults, the gradient clipped at 1). Its rows of 256 GPT-2 ids are inputs of
#include "../base/err.h"
// 255; it warms up over 10 epochs' steps inside a 50-epoch cosine and validates every epoch.
#include "../base/err.h"
static const char *const mini_marks[] = {"model", "embed_size", "seq_length", "seq_len", "ffn_hidden_size",
#include "../base/err.h"
                                         "restart_checkpoint_file", "restart_epoch", "environment", NULL};
#include "../base/err.h"
static const RecipeDefault mini_defaults[] = {
#include "../base/err.h"
    D("model_type", "mingpt"),
#include "../base/err.h"
    D("hidden_width", "768"), D("num_layers", "12"), D("num_heads", "12"), D("max_context_width", "255"),
#include "../base/err.h"
    D("vocab_size", "50257"), D("intermediate_size", "3072"), D("dropout", "0"),
#include "../base/err.h"
    D("batch_size", "10"), D("max_epochs", "10"), D("precision", "bf16"), D("reduce_dtype", "bf16"), D("lr", "0.001"),
#include "../base/err.h"
    D("weight_decay", "0.01"), D("beta1", "0.9"), D("beta2", "0.999"), D("grad_clip", "1.0"), D("sharding", "no-shard"),
#include "../base/err.h"
    D("train_data", "data/shakespeare/train.h5"), D("val_data", "data/shakespeare/validation.h5"), D("num_tokens", "100"),
#include "../base/err.h"
    D("run_name", "test"),
#include "../base/err.h"
    {NULL}};
#include "../base/err.h"

#include "../base/err.h"
// SMP trains in FP8 when --use_smp_implementation 1 leaves --fp8 at its default 1
#include "../base/err.h"
static const char *smp_check(const Recipe *r, const Config *c) {
#include "../base/err.h"
    static char msg[400];
#include "../base/err.h"
    if (!c->recipe.use_smp_implementation || cli_spelled("fp8")) return NULL;
#include "../base/err.h"
    return err_text(msg, sizeof msg, "%s trains in FP8 when --use_smp_implementation 1 leaves --fp8 at its default 1, which "
#include "../base/err.h"
             "fsdpc does not: add --fp8 0 to train in bf16 (as SMP's README says for P4 instances)", r->name);
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
static const Recipe recipes[] = {
#include "../base/err.h"
    {"fsdp10", "10.FSDP's train.py", fsdp10_marks, fsdp10_defaults,
#include "../base/err.h"
     "it trains max_steps + epochs - 1 steps and cuts its data into 4096-token sequences whatever --max_context_width "
#include "../base/err.h"
     "says, and its dropout flags never reach its model; fsdpc trains --max_steps steps of --max_context_width tokens "
#include "../base/err.h"
     "and applies --resid_pdrop/--embd_pdrop/--attn_pdrop as --dropout", NULL, NULL},
#include "../base/err.h"
    {"smp", "SMP v2's train_external.py", smp_marks, smp_defaults,
#include "../base/err.h"
     "its --warmup is a fraction of --lr_decay_iters (fsdpc's, below 1, of --max_steps: its default is SMP's 153 steps)",
#include "../base/err.h"
     smp_check, "SMP v2's train_external.py trains on --training_dir (default $SM_CHANNEL_TRAIN, unset here), never on "
#include "../base/err.h"
     "other text: give --training_dir, or --use_synthetic_data 1"},
#include "../base/err.h"
    {"profiling", "the FSDP profiling recipe's training.py", prof_marks, prof_defaults,
#include "../base/err.h"
     "its warm-up is quadratic and its RMSNorm epsilon 1e-6 (fsdpc: linear, and Llama-2's 1e-5), it decays to a "
#include "../base/err.h"
     "tenth of --learning_rate (fsdpc: to --min_lr, 3e-05 unless given), and its type=bool flags take =False as on "
#include "../base/err.h"
     "(fsdpc does what the flag says)", NULL, NULL},
#include "../base/err.h"
    {"minimal_fsdp", "minimal_fsdp's basic_training.py", mini_marks, mini_defaults,
#include "../base/err.h"
     "it warms up over 10 epochs' steps inside a 50-epoch cosine and validates and saves every epoch; fsdpc warms up "
#include "../base/err.h"
     "over --warmup steps, decays by cosine to --min_lr at the last step, and validates and saves by steps", NULL, NULL},
#include "../base/err.h"
};
#include "../base/err.h"
enum { NRECIPES = sizeof recipes / sizeof recipes[0] };
#include "../base/err.h"

#include "../base/err.h"
const CliChoice recipe_choices[] = {{"auto", RECIPE_AUTO}, {"none", RECIPE_NONE}, {"fsdp10", 0}, {"smp", 1},
#include "../base/err.h"
                                    {"profiling", 2}, {"minimal_fsdp", 3}, {NULL, 0}};
#include "../base/err.h"

#include "../base/err.h"
const char *recipe_name(const Recipe *r) { return r->name; }
#include "../base/err.h"
const char *recipe_differs(const Recipe *r) { return r->differs; }
#include "../base/err.h"
const char *recipe_check(const Recipe *r, const Config *c) { return r->check ? r->check(r, c) : NULL; }
#include "../base/err.h"
const char *recipe_no_data(const Recipe *r) { return r->no_data; }
#include "../base/err.h"

#include "../base/err.h"
static int marks(const Recipe *r, const char *spelling) {
#include "../base/err.h"
    for (const char *const *m = r->marks; *m; m++)
#include "../base/err.h"
        if (!strcmp(*m, spelling)) return 1;
#include "../base/err.h"
    return 0;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
// the first default of r for flag (any family), or NULL
#include "../base/err.h"
static const char *default_of(const Recipe *r, const char *flag) {
#include "../base/err.h"
    for (const RecipeDefault *d = r->defaults; d->flag; d++)
#include "../base/err.h"
        if (!strcmp(d->flag, flag) && !d->family && !d->when && !d->unless) return d->env ? NULL : d->value;
#include "../base/err.h"
    return NULL;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
// a setting a or b defaults (the other leaving it to fsdpc, or defaulting it otherwise) that the
#include "../base/err.h"
// command line does not give, or NULL
#include "../base/err.h"
static const char *differ(const Recipe *a, const Recipe *b, int (*given)(const Config *c, const char *flag), const Config *c) {
#include "../base/err.h"
    for (const RecipeDefault *d = a->defaults; d->flag; d++) {
#include "../base/err.h"
        if (d->env || given(c, d->flag)) continue;
#include "../base/err.h"
        const char *va = default_of(a, d->flag), *vb = default_of(b, d->flag);
#include "../base/err.h"
        if (!va || !vb || strcmp(va, vb)) return d->flag;
#include "../base/err.h"
    }
#include "../base/err.h"
    return NULL;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
static int chosen = RECIPE_NONE;
#include "../base/err.h"
int recipe_chosen(void) { return chosen; }
#include "../base/err.h"

#include "../base/err.h"
static const Recipe *found(const Recipe *r) {
#include "../base/err.h"
    chosen = r ? (int)(r - recipes) : RECIPE_NONE;
#include "../base/err.h"
    return r;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
const Recipe *recipe_find(int choice, int (*given)(const Config *c, const char *flag), const Config *c, const char **why) {
#include "../base/err.h"
    static char msg[600];
#include "../base/err.h"
    *why = NULL;
#include "../base/err.h"
    chosen = RECIPE_NONE;
#include "../base/err.h"
    if (choice == RECIPE_NONE) return NULL;
#include "../base/err.h"
    if (choice >= 0) return found(&recipes[choice]);
#include "../base/err.h"
    // the first recipe (in table order) whose spellings include every recipe spelling the line uses
#include "../base/err.h"
    int any = 0;
#include "../base/err.h"
    for (int i = 0; i < NRECIPES; i++)
#include "../base/err.h"
        for (const char *const *m = recipes[i].marks; *m; m++) any += cli_spelled(*m);
#include "../base/err.h"
    if (!any) return NULL;
#include "../base/err.h"
    for (int i = 0; i < NRECIPES; i++) {
#include "../base/err.h"
        int all = 1;
#include "../base/err.h"
        for (int j = 0; j < NRECIPES && all; j++)
#include "../base/err.h"
            for (const char *const *m = recipes[j].marks; *m && all; m++)
#include "../base/err.h"
                if (cli_spelled(*m) && !marks(&recipes[i], *m)) all = 0;
#include "../base/err.h"
        if (all) return found(&recipes[i]);
#include "../base/err.h"
    }
#include "../base/err.h"
    // spellings of two recipes: fine only where their defaults agree on what the line leaves out
#include "../base/err.h"
    const Recipe *a = NULL, *b = NULL;
#include "../base/err.h"
    const char *ma = NULL, *mb = NULL;
#include "../base/err.h"
    for (int i = 0; i < NRECIPES; i++)
#include "../base/err.h"
        for (const char *const *m = recipes[i].marks; *m; m++) {
#include "../base/err.h"
            if (!cli_spelled(*m)) continue;
#include "../base/err.h"
            if (!a) a = &recipes[i], ma = *m;
#include "../base/err.h"
            else if (!marks(a, *m) && !b) b = &recipes[i], mb = *m;
#include "../base/err.h"
        }
#include "../base/err.h"
    const char *flag = differ(a, b, given, c);
#include "../base/err.h"
    if (!flag) flag = differ(b, a, given, c);
#include "../base/err.h"
    if (!flag) return found(a);
#include "../base/err.h"
    const char *va = default_of(a, flag), *vb = default_of(b, flag);
#include "../base/err.h"
    snprintf(msg, sizeof msg, "--%s is %s's flag and --%s is %s's, whose defaults differ (--%s %s against %s): give "
#include "../base/err.h"
             "--recipe_defaults %s|%s|none, or --%s", ma, a->name, mb, b->name, flag, va ? va : "unset", vb ? vb : "unset",
#include "../base/err.h"
             a->id, b->id, flag);
#include "../base/err.h"
    *why = msg;
#include "../base/err.h"
    return NULL;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
void recipe_each_default(const Recipe *r, const char *model_type, int (*given)(const Config *c, const char *flag),
#include "../base/err.h"
                         const Config *c, void (*set)(const char *flag, const char *value, void *ctx), void *ctx) {
#include "../base/err.h"
    for (const RecipeDefault *d = r->defaults; d->flag; d++) {
#include "../base/err.h"
        if (d->family && strcmp(d->family, model_type)) continue;
#include "../base/err.h"
        if ((d->when && !given(c, d->when)) || (d->unless && given(c, d->unless))) continue;
#include "../base/err.h"
        const char *v = d->env ? getenv(d->env) : d->value;
#include "../base/err.h"
        if (v && *v) set(d->flag, v, ctx);
#include "../base/err.h"
    }
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
void recipe_marks_used(const Recipe *r, char *buf, size_t len) {
#include "../base/err.h"
    size_t n = 0;
#include "../base/err.h"
    buf[0] = 0;
#include "../base/err.h"
    for (const char *const *m = r->marks; *m && n < len; m++)
#include "../base/err.h"
        if (cli_spelled(*m)) n += (size_t)snprintf(buf + n, len - n, "%s--%s", n ? ", " : "", *m);
#include "../base/err.h"
}
