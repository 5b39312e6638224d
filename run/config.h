// config: the whole run's configuration, which fsdpc's flags fill (run/flags.h: flag names of the
// PyTorch FSDP seed scripts), in sections after torchtitan's JobConfig. Each section's type and
// its enumerated settings live with the module that reads it, which takes that section alone:
//   model   ModelConfig (model/config.h)       the family and its sizes
//   shard   ShardConfig (shard/shard_config.h)  sharding, precision, the mesh, checkpointing of activations
//   optim   OptimConfig (shard/shard_config.h)  AdamW, its schedule, and the training part: batch
//           size, micro-batches, steps, epochs, seed
//   data    DataConfig (data/data.h)            what is read, the tokenizer, finetuning rows, validation
//   ckpt    CkptConfig (ckpt/ckpt.h)            checkpoints written, resumed, initialised from
//   run     RunConfig (here)                    device, logging, metrics, tracing, environment
//   gen     GenConfig (here)                    generation after training
//   recipe  RecipeConfig (here)                 the seed recipes' flags that change nothing, and
//           whose defaults were taken
//   given   which flags the command line set (flags_given)
#ifndef FSDPC_RUN_CONFIG_H
#define FSDPC_RUN_CONFIG_H

#include "../base/cli.h"
#include "../ckpt/ckpt.h"
#include "../data/data.h"
#include "../kernels/kernels.h"
#include "../model/config.h"
#include "../shard/shard_config.h"

// What --use_profiler (the profiling recipe's flag) records unless told otherwise: the folder its
// tensorboard_trace_handler writes to, and the steps of its torch.profiler.schedule(wait=1,
// warmup=2, active=3), 1-based as logged
#define TRACE_PROFILER_DIR "profile_traces"
enum { TRACE_PROFILER_FIRST = 4, TRACE_PROFILER_LAST = 6 };

typedef enum { ENV_LOCAL, ENV_PBS } RunEnvironment;  // --environment

// The recipe flags that take only fsdpc's own behaviour (run/flags.c): they store nothing, but each
// has a place of its own in Config, which is how the flag parser tells settings apart.
enum {
    RECIPE_ONLY_CHECKPOINT_TYPE, RECIPE_ONLY_DATA_TYPE, RECIPE_ONLY_BACKWARD_FETCH, RECIPE_ONLY_WRAP_POLICY, RECIPE_ONLY_BACKEND,
    RECIPE_ONLY_FRAMEWORK, RECIPE_ONLY_NCCL_TEST_LOG, RECIPE_ONLY_COUNT
};

// where the job runs and what it reports
typedef struct {
    KernDevice device;
    KernAttention attention;  // --attention auto|cudnn|native
    RunEnvironment environment;  // minimal_fsdp's --environment local|pbs: pbs logs the job and checks its node file
    int logging_freq, num_threads, profile;
    int log_timestamps;  // date, level and rank before every log line
    // the paths are heap strings of any length (base/cli.h's CLI_PATH), "" when unset
    char *metrics_file;
    char *tensorboard_dir;  // 10.FSDP's flag: rank 0 writes TensorBoard event files there (run/tboard.h)
    char *trace_file;       // Chrome trace of steps trace_steps[0]..trace_steps[1] (1-based), or ""
    char *trace_dir;        // the same steps, a file per rank as torch.profiler's TensorBoard handler writes, or ""
    int trace_steps[2];
    int use_profiler;              // the profiling recipe's switch: TRACE_PROFILER_DIR and its steps
    int use_nsys;                  // the profiling recipe's nsys switch: the launch must run under nsys
    float collective_timeout;      // seconds a collective may wait before the job ends; 0: for ever
} RunConfig;

// generation after training
typedef struct {
    char prompt[4096];
    int num_tokens;
    float temperature, top_p;
} GenConfig;

// the seed recipes: their flags that change nothing here (docs/recipes.md says why for each), and
// whose defaults this run took
typedef struct {
    int use_smp_implementation, patch_neox_rope, enable_memory_profiling, clean_cache, log_reduced_training_loss;
    int data_num_workers, forward_prefetch, use_orig_params;
    int preserve_np_state, fast_validation, profile_nsys, fp8_amax_history_len;
    int zipped_data;        // SMP's: compression is found from the content either way
    int limit_all_gathers;  // SMP's: at most two units are ever gathered
    int same_seed;          // SMP's: every rank draws as one process would either way (docs/recipes.md)
    float summary_first_pdrop;
    char fp8_amax_compute_algo[32];
    char *model_dir;
    int recipe_only[RECIPE_ONLY_COUNT];  // where the recipe flags that take only fsdpc's own behaviour point
    int recipe_defaults;     // --recipe_defaults: RECIPE_AUTO, RECIPE_NONE or a recipe (run/recipes.h)
    char recipe_line[2048];  // the start-up line naming the recipe whose defaults were taken, or ""
    char recipe_note[1024];  // its lines on what fsdpc cannot match of that recipe and what it ignores, or ""
    char recipe_no_data[400];  // why that recipe trains nothing without --train_data (never the bundled text), or ""
} RecipeConfig;

typedef struct {
    ModelConfig model;
    unsigned char size_origin[SIZE_COUNT];  // SizeOrigin of model's hidden_width ... vocab_size
    ShardConfig shard;
    OptimConfig optim;
    DataConfig data;
    CkptConfig ckpt;
    RunConfig run;
    GenConfig gen;
    RecipeConfig recipe;
    unsigned char given[CLI_MAX_FLAGS];  // flags_cli's flags the command line set (cli_given)
} Config;

// one-line summary of the run configuration (stored in checkpoints, logged at start); train_data:
// what the run trains on, as run/inputs.c decided it (inputs_data_name)
void config_describe(const Config *cfg, const char *train_data, char *buf, int len);

#endif
