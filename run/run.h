// run: what the training run's parts share (run-internal: train.c drives the phases; inputs.c,
// outputs.c and sample.c each take one concern of the run).
#ifndef FSDPC_RUN_H
#define FSDPC_RUN_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "../ckpt/ckpt.h"
#include "../ckpt/hf.h"
#include "../data/data.h"
#include "../data/source/ident.h"
#include "../data/loader/pack.h"
#include "../data/text/tokenizer.h"
#include "../model/model.h"
#include "../shard/shard.h"
#include "config.h"
#include "tboard.h"

// Which data the run trains on, decided once (inputs_decide): what --train_data names, the bundled
// Tiny Shakespeare (the byte tokenizer's default), or synthetic tokens.
typedef enum { DATA_EXPLICIT, DATA_BUNDLED, DATA_SYNTHETIC } RunDataKind;
typedef struct {
    RunDataKind kind;
    char spec[PATH_MAX];  // the training data as recorded: --train_data, the bundled file's path, or "synthetic"
    char bundled[PATH_MAX];
    // --train_data was given (--dataset_type synthetic leaves it unnamed: the bundled text then validates)
    int named;
    // The training data (but synthetic) and the validation data, each resolved once: noted as
    // inputs, their recorded vocabulary read, opened. Validation: --val_data, else the bundled
    // text with the bundled training data, else the training data's own validation split.
    char val_spec[PATH_MAX];  // "": none
    DataFiles train_files, val_files;
    int val_whole;  // --val_data (or the bundled text) without a validation split, and no --val_split: read whole
} RunData;

enum { INPUT_TOKENIZER, INPUT_TRAIN, INPUT_VAL, INPUTS };

typedef struct {
    Config *cfg;
    RunData data;
    ModelPlan plan;
    ParallelDims dims;
    ShardState st;
    Activations acts;
    Dataset train, val;
    DataLoader *train_loader, *val_loader;
    int has_train, has_val;
    DataBatch *batch;  // this rank's micro-batch
    PackLayout order;  // the sample order's layout: data position, global batch, data-parallel place
    PackPlans plans;   // this rank's micro-batches of a step and the next
    int tp_rank;       // the tp ranks of a tensor-parallel group read the same samples
    int cp_rank;       // so do the ranks of a context-parallel group, each keeping its chunks of them
    long long truncated, lost;  // rows cut at the context so far (and of them, those left with no loss)
    double tokens_seen;         // loss-bearing targets trained on since step 0 (checkpoints carry it)
    int max_steps, start_step;
    double flops_per_token;
    // since the last log point: its time, loss-bearing targets and steps (Speed and tokens/sec)
    double t_log, log_tokens;
    int log_steps;
    FILE *metrics;
    TBoard *tb;  // rank 0's --tensorboard_dir events file
    // rank 0: why a metrics line or TensorBoard event could not be written; the run ends at the next step
    char metrics_error[1400];
    int metrics_newline;  // the file ends in a line cut short (a crash, a full disk): the next line starts afresh
    Tokenizer *tok;
    // an evaluation of a checkpoint that recorded no tokenizer (it was trained on token ids) takes
    // the --tokenizer given, which is then not compared with that record
    int tok_added;
    // the model's vocabulary is not the byte tokenizer's, and no tokenizer maps text to its ids
    int no_text;
    char *resume_file;  // heap: the checkpoint this run continues, or ""
    CkptMeta origin;         // run_id, parent and lineage recorded in this run's checkpoints
    HfModel *hf;             // --init_from a Hugging Face source
    int init_h5;             // --init_from an fsdpc checkpoint file
    CkptAsync *async;        // --async_checkpoint's writer and staging buffer, else NULL
    // --keep_snapshot: the state of the last checkpoint step (or of the start) in host memory, and
    // what the run had counted then besides the shards; else NULL
    CkptSnapshot *snapshot;
    struct {
        double tokens_seen;
        long long truncated, lost;
    } snap;
    // the global sample indices rollbacks skipped, ascending (r->order reads them; checkpoints keep them)
    uint64_t *skipped;
    size_t nskipped;
    int nonfinite;     // non-finite steps so far (--skip_nonfinite_steps bounds them)
    int replay_end;    // a rollback replays the steps before this one (0-based), already logged
    int rolled_back;   // the step (0-based) of the last rollback, -1: none
    CkptSource source;       // that source's side files (config.json, tokenizer_config.json...), passed on
    // what defines the run besides its flags (data/source/ident.h): the tokenizer, the training and the
    // validation data (nfiles < 0: none), recorded in every checkpoint (CkptMeta.inputs); and the
    // resumed checkpoint's record of them ("": none to compare with)
    IdentSource inputs[INPUTS];
    char recorded[CKPT_INPUTS_LEN];
} Run;

// One optimizer step's outcome (train_step).
typedef struct {
    double loss;    // mean over the global batch's loss-bearing targets, plus the router losses with their coefficients
    double router_aux, router_z;  // a mixture of experts' load-balancing and z losses (0 for a dense model)
    double router_dropped;        // --capacity_factor: the fraction of the step's expert assignments dropped (else -1)
    double gnorm;   // gradient norm
    double tokens;  // the global batch's loss-bearing targets
    int applied;    // the update ran (a non-finite loss or norm, or no loss-bearing target, skips it)
    int preempt;    // some rank got a preemption signal
} StepResult;

// More than any count of ranks: a stop signal on every rank still sums below it.
#define OUTPUT_FAILED 16777216.0

// inputs.c: where the model, tokenizer, state and data come from.
void inputs_init(Run *r);
// the training data for the configuration's line: its spec, "synthetic" or "(bundled tinyshakespeare)"
const char *inputs_data_name(const Run *r);
// Where the model comes from, before anything is built, then the tokenizer (which may set the vocabulary).
void inputs_resolve(Run *r);
// Opens the training and validation data; returns 1 when a preemption signal stopped a data cache
// build (on every rank alike), else 0.
int inputs_open_data(Run *r);
// The run's inputs as its checkpoints record them (origin.inputs), once the data is open.
void inputs_record(Run *r);
// Weights after the shards exist: the resumed checkpoint, or --init_from.
void inputs_load_state(Run *r);
void inputs_free(Run *r);

// outputs.c: the checkpoint folder's claim, the metrics file, TensorBoard and the memory log.
// Refuses (comm_fail_all) an output whose longest name the operating system would refuse.
void outputs_check_paths(const Config *c);
void outputs_open(Run *r);
void outputs_claim_checkpoint_dir(Run *r);
// The step's metrics line into line (returns its length, 0 when none is pending) and TensorBoard
// scalars; a skipped step's line is written at once.
int outputs_step(Run *r, int done, float lr, const StepResult *s, char *line, size_t cap);
// A log point: the Batch line, cut rows, the memory tracker, and their figures added to line.
void outputs_log_point(Run *r, int done, float lr, const StepResult *s, char *line, size_t cap, int *len);
// Validation's loss into the step's line and events.
void outputs_validation(Run *r, int done, double vl, char *line, size_t cap, int *len);
// Ends and writes the step's line (len 0: none), and flushes the step's events.
void outputs_step_done(Run *r, char *line, size_t cap, int len);
// Closes the metrics file and events file; any failed write ends the run on every rank.
void outputs_close(Run *r);

// sample.c: collective; returns NULL, or rank 0's reason why the generated text could not be written.
const char *sample_generate(Run *r);

#endif
