// inputs: where a training run's model, tokenizer, state and data come from (see run.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "../base/log.h"
#include "../ckpt/peft.h"
#include "../comm/comm.h"
#include "../base/path.h"
#include "../comm/io.h"
#include "../data/source/source.h"
#include "flags.h"
#include "run.h"

// The one decision of which data the run trains on (RunData), and each source resolved to its files.
static void decide_data(const Config *c, RunData *d) {
    data_bundled_path(d->bundled, sizeof d->bundled);
    d->named = c->data.train_data[0] != 0;
    int synthetic = !strcmp(c->data.train_data, "synthetic") || (!d->named && c->data.dataset_type == DATASET_SYNTHETIC);
    d->kind = synthetic ? DATA_SYNTHETIC : d->named ? DATA_EXPLICIT : DATA_BUNDLED;
    snprintf(d->spec, sizeof d->spec, "%s", synthetic ? "synthetic" : d->named ? c->data.train_data : d->bundled);
    const char *config = c->data.dataset_config_name;
    if (!synthetic) data_files_resolve(&d->train_files, d->spec, config, c->data.train_split[0] ? c->data.train_split : "train");
    snprintf(d->val_spec, sizeof d->val_spec, "%s", c->data.val_data[0] ? c->data.val_data : !d->named ? d->bundled : d->kind == DATA_EXPLICIT ? d->spec : "");
    if (!d->val_spec[0]) return;
    data_files_resolve(&d->val_files, d->val_spec, config, c->data.val_split[0] ? c->data.val_split : "validation");
    // named validation data: its validation split when it has splits, else all of it
    d->val_whole = !d->val_files.found && !c->data.val_split[0] && (c->data.val_data[0] || !d->named);
    if (d->val_whole) {
        data_files_free(&d->val_files);
        data_files_resolve(&d->val_files, d->val_spec, config, "train");
    }
}

const char *inputs_data_name(const Run *r) {
    return r->data.kind == DATA_BUNDLED ? "(bundled tinyshakespeare)" : r->data.spec;
}

void inputs_init(Run *r) {
    for (int i = 0; i < INPUTS; i++) r->inputs[i].nfiles = -1;
}

static const char *const input_keys[INPUTS + 1] = {"tokenizer", "train", "val", NULL};  // ident_unknown_keys reads to the NULL
static const char *const input_labels[INPUTS] = {"tokenizer", "training data", "validation data"};

// A resumed run's input i is now `now`: held against the checkpoint's record of it. A change is an
// error naming it, unless --allow_changed_inputs says it is meant (a warning then). A record
// without that input (a validation set added on resume) has nothing to compare.
static void compare_input(Run *r, int i, const IdentSource *now) {
    IdentSource was;
    char err[512], what[1400], msg[4096];
    if (!r->recorded[0] || ident_parse(r->recorded, input_keys[i], &was, err, sizeof err) != 1) return;
    static const IdentWords words = {"now", "then", "new", "gone"};
    int changed = ident_diff(now, &was, &words, what, sizeof what);
    if (changed && i == INPUT_TOKENIZER) {
        char a[700], b[700];
        ident_describe(now, a, sizeof a);
        ident_describe(&was, b, sizeof b);
        snprintf(msg, sizeof msg, "the tokenizer %s differs from the one checkpoint '%s' was trained with, %s", a, path_show(r->resume_file), b);
    } else if (changed) {
        snprintf(msg, sizeof msg, "the %s '%s' changed since checkpoint '%s' was written: %s", input_labels[i], now->spec,
                 path_show(r->resume_file), what);
    }
    ident_source_free(&was);
    if (!changed) return;
    if (!r->cfg->ckpt.allow_changed_inputs)
        comm_fail_all("%s; resume with the inputs the run used, or pass --allow_changed_inputs if the change is meant", msg);
    log_msg("warning: %s; going on with it (--allow_changed_inputs)\n", msg);
}

// Input i of this run is id: every rank must see the same, and a resume the run's own.
static void input_found(Run *r, int i, const IdentSource *id) {
    const char *e = i == INPUT_TOKENIZER ? ident_check_ranks(id, "tokenizer files") : NULL;  // data_open checks the data
    if (e) comm_fail_all("%s", e);
    // an evaluation or generation of a checkpoint (--max_steps 0, minimal_fsdp's --max_epochs -1) may use other data
    if ((i == INPUT_TOKENIZER && !r->tok_added) || (i != INPUT_TOKENIZER && r->max_steps != 0)) compare_input(r, i, id);
    if (r->inputs[i].nfiles >= 0) ident_source_free(&r->inputs[i]);
    ident_source_copy(&r->inputs[i], id);
}

static void train_identified(const IdentSource *id, void *ctx) { input_found(ctx, INPUT_TRAIN, id); }
static void val_identified(const IdentSource *id, void *ctx) { input_found(ctx, INPUT_VAL, id); }

// The resumed checkpoint's record of its run's inputs, checked once: a file from before the
// record existed, or a record this fsdpc cannot read, is resumed without comparing (said once).
static void read_recorded_inputs(Run *r) {
    CkptMeta *meta = mallocCheck(sizeof *meta);
    comm_check_all(ckpt_read_meta(r->resume_file, meta));
    snprintf(r->recorded, sizeof r->recorded, "%s", meta->inputs);
    free(meta);
    IdentSource probe;
    char err[512], unknown[512];
    if (!r->recorded[0]) {
        log_msg("Note: checkpoint %s records no run inputs (written before fsdpc recorded them): its tokenizer and data are not "
                "compared with this run's\n", r->resume_file);
        return;
    }
    for (int i = 0; i < INPUTS; i++) {
        if (ident_parse(r->recorded, input_keys[i], &probe, err, sizeof err) < 0) {
            log_msg("warning: checkpoint %s: its run_inputs cannot be read (%s): its tokenizer and data are not compared with this "
                    "run's\n", r->resume_file, err);
            r->recorded[0] = 0;
            return;
        }
        ident_source_free(&probe);
    }
    if (ident_unknown_keys(r->recorded, input_keys, unknown, sizeof unknown) == 0 && unknown[0])
        log_msg("warning: checkpoint %s: its run_inputs record %s, which this fsdpc does not compare\n", r->resume_file, unknown);
}

// The tokenizer's identity: its file, or "byte".
static void tokenizer_found(Run *r) {
    IdentSource id;
    char err[1400], *path = path_dup(tok_path(r->tok)), *file = path;
    const char *e = ident_source(path, &file, !tok_is_byte(r->tok), &id, err, sizeof err) ? err : NULL;
    free(path);
    comm_check_all(e);
    input_found(r, INPUT_TOKENIZER, &id);
    ident_source_free(&id);
}

// Whether a checkpoint's run_inputs name this run's training data as it is given: what tells the
// run's own lineage from others in one folder (a requeue repeats its command line) before the
// data's files are read; the files themselves are compared once the resumed one is chosen.
static int names_our_data(const char *recorded, void *ctx) {
    const Run *r = ctx;
    char err[256];
    IdentSource was;
    if (ident_parse(recorded, input_keys[INPUT_TRAIN], &was, err, sizeof err) != 1) return 0;
    int same = was.spec && !strcmp(was.spec, r->data.spec);
    ident_source_free(&was);
    return same;
}

// The files of a data source, noted as inputs before the outputs are opened, so that an output
// which is one of them is refused as such (data_open notes them again and reports what cannot be
// resolved).
static void note_data(const DataFiles *f, const char *what) {
    for (int i = 0; f->found > 0 && i < f->files.nfiles; i++) io_input(f->files.files[i], what);
}

// The vocabulary the run's token files record (the larger of training's and validation's), 0 when
// they record none or the data is text (the tokenizer then decides); the file that says so in file.
static int train_vocab_recorded(const Run *r, char *file, size_t filelen) {
    const Config *c = r->cfg;
    char val_file[PATH_MAX] = "";
    int recorded = 0, val = 0;
    file[0] = 0;
    if (!tok_is_byte(r->tok)) return 0;
    if (r->data.kind == DATA_EXPLICIT) recorded = data_recorded_vocab(&r->data.train_files, file, filelen);
    if (c->data.val_data[0]) val = data_recorded_vocab(&r->data.val_files, val_file, sizeof val_file);
    if (val > recorded) snprintf(file, filelen, "%s", val_file);
    return val > recorded ? val : recorded;
}

// What a run that trains no step does with its weights (as train_finish decides): NULL when nothing
static const char *untrained_use(const Config *c) {
    int eval = c->data.val_data[0] != 0, gen = c->gen.num_tokens > 0 && (c->gen.prompt[0] || c->optim.max_epochs < 0);
    return eval && gen ? "evaluate and generate from" : eval ? "evaluate" : gen ? "generate from" : NULL;
}

// --resume_from_checkpoint to the file resumed (r->resume_file), or none: a folder without one
// starts the run fresh, a named file that is missing is an error.
static void resolve_resume(Run *r) {
    const char *p = r->cfg->ckpt.resume_from_checkpoint;
    char line[CKPT_ERR_LEN], *file = NULL;
    int found = p[0] ? ckpt_resolve(p, names_our_data, r, &file, line, sizeof line) : 0;
    if (found < 0) comm_fail_all("%s", line);
    r->resume_file = file ? file : path_dup("");
    if (found || !p[0]) return;
    size_t n = strlen(p);
    if (n > 3 && !strcmp(p + n - 3, ".h5")) comm_fail_all("checkpoint file '%s' does not exist", p);
    // a requeued training run's first start finds none; a run that trains nothing would evaluate
    // and generate from random weights
    if (r->cfg->optim.max_steps == 0 || r->cfg->optim.max_epochs < 0)
        comm_fail_all("--resume_from_checkpoint '%s' holds no checkpoint, and this run trains no step (%s): it would evaluate "
                      "and generate from random weights; name a checkpoint or a folder holding one", p,
                      r->cfg->optim.max_epochs < 0 ? "--max_epochs -1" : "--max_steps 0");
    log_msg("No checkpoint found in %s, starting fresh\n", p);
}

// The checkpoint being resumed wins (its config and tokenizer, so a requeued finetune continues),
// else --init_from, else the flags; the tokenizer sets the vocabulary unless something fixed it.
void inputs_resolve(Run *r) {
    Config *c = r->cfg;
    decide_data(c, &r->data);
    char tok_from_source[PATH_MAX] = "", what[1100], err[1400];
    const char *tok_source = NULL;
    unsigned known = 0;
    resolve_resume(r);
    const char *init = c->ckpt.init_from;
    size_t ni = strlen(init);
    r->init_h5 = !r->resume_file[0] && ni > 3 && !strcmp(init + ni - 3, ".h5");
    // the run's inputs, which no output may replace (io.h); Hugging Face sources note their own files
    io_input(r->resume_file, "the checkpoint being resumed");
    if (r->init_h5) io_input(init, "--init_from");
    if (r->data.kind == DATA_EXPLICIT) note_data(&r->data.train_files, "the training data");
    if (c->data.val_data[0]) note_data(&r->data.val_files, "the validation data");
    if (r->resume_file[0] || r->init_h5) {
        const char *file = r->resume_file[0] ? r->resume_file : init;
        const char *other = ckpt_check_same_file(file);
        if (other) comm_fail_all("%s", other);
        if (r->resume_file[0]) read_recorded_inputs(r);
        ModelConfig m = c->model;
        comm_check_all(ckpt_read_config(file, &m, tok_from_source, sizeof tok_from_source));
        snprintf(what, sizeof what, "checkpoint '%s'", file);
        flags_adopt_model(c, &m, known = MODEL_ALL, what);
        comm_check_all(ckpt_source_read(file, &r->source));
        tok_source = what;
        if (r->resume_file[0] && init[0]) log_msg("Resuming %s: --init_from %s is not loaded again\n", file, init);
    } else if (init[0]) {
        r->hf = hf_open(init, err, sizeof err);
        comm_check_all(r->hf ? NULL : err);
        ModelConfig m = c->model;
        known = hf_model_config(r->hf, &m);
        snprintf(what, sizeof what, "'%s'", hf_source_path(r->hf));
        flags_adopt_model(c, &m, known, what);
        hf_take_source(r->hf, &r->source);
        if (hf_tokenizer_path(r->hf)) snprintf(tok_from_source, sizeof tok_from_source, "%s", hf_tokenizer_path(r->hf));
        tok_source = what;
    } else {
        flags_no_source(c);
    }
    ckpt_source_share(&r->source);
    int tok_given = flags_given(c, "tokenizer");
    // a checkpoint trained on token ids records the byte tokenizer, which says nothing about them
    int recorded_none = r->resume_file[0] && (!tok_from_source[0] || !strcmp(tok_from_source, "byte"));
    r->tok_added = recorded_none && tok_given && r->max_steps == 0 && strcmp(c->data.tokenizer, "byte");
    if (!tok_given && tok_from_source[0]) path_set(&c->data.tokenizer, tok_from_source);
    r->tok = tok_open(c->data.tokenizer, err, sizeof err);
    if (!r->tok && !tok_given && tok_from_source[0])
        comm_fail_all("%s names tokenizer '%s', which cannot be opened (%s); pass --tokenizer", tok_source, tok_from_source, err);
    comm_check_all(r->tok ? NULL : err);
    path_set(&c->data.tokenizer, tok_path(r->tok));  // recorded in checkpoints
    tokenizer_found(r);
    if (strcmp(c->data.tokenizer, "byte")) io_input(c->data.tokenizer, "the tokenizer");
    int V = tok_vocab_size(r->tok);
    int named = tok_given || tok_from_source[0] || strcmp(c->data.tokenizer, "byte");  // strcmp: a recipe's default
    if (!named && (c->size_origin[SIZE_V] == SIZE_FAMILY || c->size_origin[SIZE_V] == SIZE_DEFAULT)) {
        char file[PATH_MAX];
        int recorded = train_vocab_recorded(r, file, sizeof file);
        if (recorded) {
            c->model.vocab_size = recorded;
            c->size_origin[SIZE_V] = SIZE_DATA;
            log_msg("vocabulary: %d, recorded by data file '%s'\n", recorded, file);
        }
    }
    comm_check_all(flags_take_tokenizer_vocab(c, V, named, c->data.tokenizer, tok_source));
    if (r->tok_added)
        log_msg("checkpoint %s records no tokenizer (its training data were token ids): this evaluation takes --tokenizer %s\n",
                r->resume_file, c->data.tokenizer);
    // bytes fed to a model of another vocabulary, and its ids read back as bytes, would be noise
    r->no_text = tok_is_byte(r->tok) && c->model.vocab_size != V;
    if (r->no_text && flags_given(c, "prompt") && c->gen.num_tokens > 0)
        comm_fail_all("--prompt: the model's vocabulary is %d tokens, not the byte tokenizer's %d, and no tokenizer was given%s%s: "
                      "pass --tokenizer with the one its ids come from (encoder.json + vocab.bpe, a tokenizer.json or tokenizer.model)",
                      c->model.vocab_size, V, tok_source ? " or recorded in " : "", tok_source ? tok_source : "");
}

// The resumed checkpoint restores everything; --init_from only weights (fresh AdamW moments, step
// 0, this run's own warmup and decay), and --init_adapter then the LoRA adapters.
void inputs_load_state(Run *r) {
    Config *c = r->cfg;
    char err[CKPT_ERR_LEN];
    if (r->resume_file[0]) {
        CkptMeta meta;
        if (ckpt_load(r->resume_file, &r->st, &meta, err, sizeof err)) comm_fail_all("%s", err);
        ckpt_lineage_of(&meta, r->origin.lineage, sizeof r->origin.lineage);
        snprintf(r->origin.parent, sizeof r->origin.parent, "%s", r->resume_file);
        log_msg("Resumed from %s at step %d (%llu tokens seen)\n", r->resume_file, meta.step,
                (unsigned long long)meta.tokens_seen);
        r->tokens_seen = (double)meta.tokens_seen;
        r->order.sample_base = meta.data_position;
        r->order.base_step = meta.step;
        r->skipped = meta.skipped, r->nskipped = meta.nskipped;  // the run's: rollbacks add to them
        r->order.skipped = r->skipped, r->order.nskipped = r->nskipped;
        if (r->nskipped)
            log_msg("%zu sample(s) that rollbacks skipped (%s's /%s) stay out of the data order\n", r->nskipped, r->resume_file,
                    "skipped_samples");
        // the sample order and dropout follow the seed: the run's own, unless another is asked for by name
        if (meta.rng_state != (uint64_t)c->optim.seed) {
            if (flags_given(c, "seed"))
                comm_fail_all("--seed %d differs from the seed %llu that %s was trained with: resuming with another seed "
                              "changes its data order and dropout; drop --seed to continue the run", c->optim.seed,
                              (unsigned long long)meta.rng_state, r->resume_file);
            c->optim.seed = (int)meta.rng_state;
            if (r->train_loader) {  // built before the checkpoint was read: rebuilt for the run's order
                data_loader_free(r->train_loader);
                r->train_loader = data_loader_new(&r->train, (uint64_t)c->optim.seed, c->optim.batch_size, 1);
            }
        }
        if (meta.data_position != (uint64_t)meta.step * r->order.global_batch)
            log_msg("Resuming at global sample %llu (the checkpoint's data position) with a global batch of %d\n",
                    (unsigned long long)meta.data_position, r->order.global_batch);
    } else if (r->init_h5) {
        if (ckpt_load_weights(c->ckpt.init_from, &r->st, err, sizeof err)) comm_fail_all("%s", err);
        snprintf(r->origin.parent, sizeof r->origin.parent, "%s", c->ckpt.init_from);
        log_msg("Initialized weights from %s (fresh optimizer state, step 0)\n", c->ckpt.init_from);
    } else if (r->hf) {
        if (hf_load(r->hf, &r->st, c->ckpt.allow_unused_weights, err, sizeof err)) comm_fail_all("%s", err);
        snprintf(r->origin.parent, sizeof r->origin.parent, "%s", hf_source_path(r->hf));
        log_msg("Initialized weights from %s (fresh optimizer state, step 0)\n", hf_source_path(r->hf));
        hf_close(r->hf);
        r->hf = NULL;
    } else if ((c->optim.max_steps == 0 || c->optim.max_epochs < 0) && untrained_use(c)) {
        if (!c->ckpt.allow_random_weights)
            comm_fail_all("this run trains no step (%s) and loads no weights: it would %s random weights; give "
                          "--resume_from_checkpoint or --init_from, or --allow_random_weights to use the seed's on purpose",
                          c->optim.max_epochs < 0 ? "--max_epochs -1" : "--max_steps 0", untrained_use(c));
        log_msg("warning: this run trains no step and loads no weights: it will %s random weights (--seed %d, "
                "--allow_random_weights)\n", untrained_use(c), c->optim.seed);
    }
    const char *adapter = c->ckpt.init_adapter;
    if (!adapter[0]) return;
    // the resumed checkpoint holds the adapters trained since: a requeued job repeats its command line
    if (r->resume_file[0]) {
        log_msg("Resuming %s: --init_adapter %s is not loaded again\n", r->resume_file, adapter);
        return;
    }
    int n = 0;
    if (peft_load(adapter, &r->st, c->ckpt.init_from, &n, err, sizeof err)) comm_fail_all("%s", err);
    log_msg("Loaded adapters from %s (%d tensors)\n", adapter, n);
}

// A source of the run's data: what --train_data / --val_data name, read with the run's tokenizer.
static DataSource data_source(Run *r, const char *spec, const DataFiles *files, const char *label) {
    const Config *c = r->cfg;
    return (DataSource){.spec = spec, .files = files, .tok = r->tok, .ctx = r,
                        .text_column = c->data.text_column, .explicit_column = flags_given(c, "text_column"),
                        .cache_dir = c->data.data_cache_dir, .label = label, .stop = &comm_stop_signal, .format = c->data.data_format,
                        .chat_template = c->data.chat_template, .train_on_inputs = c->data.train_on_inputs,
                        .document_masking = c->data.document_masking};
}

// data_open, its error line ending the job on the ranks that found it; -1: stopped by a signal
static int open_dataset(Dataset *d, const DataSource *src, int T, int V, double from, double to) {
    char err[2048];
    int rc = data_open(d, src, T, V, from, to, err, sizeof err);
    if (rc == -1) comm_fail_all("%s", err);
    return rc < 0 ? -1 : rc;
}

int inputs_open_data(Run *r) {
    Config *c = r->cfg;
    const RunData *d = &r->data;
    int T = c->model.max_context_width, V = c->model.vocab_size, B = c->optim.batch_size;
    // the bundled Tiny Shakespeare is bytes: the default data of the byte tokenizer only
    int bundled_ok = tok_is_byte(r->tok), synthetic = d->kind == DATA_SYNTHETIC;
    if (r->max_steps != 0 && d->kind == DATA_BUNDLED && c->recipe.recipe_no_data[0]) comm_fail_all("%s", c->recipe.recipe_no_data);
    if (r->max_steps != 0 && d->kind == DATA_BUNDLED && !bundled_ok)
        comm_fail_all("with --tokenizer %s, give --train_data (text, JSON Lines, Arrow, Parquet, a Hugging Face dataset "
                      "folder or hub name, or token shards): the bundled text is read as bytes", c->data.tokenizer);
    // a bare run trains on the text beside the binary: one copied elsewhere without data/ says so
    if (r->max_steps != 0 && d->kind == DATA_BUNDLED && !path_is_file(d->bundled))
        comm_fail_all("no --train_data given, and the bundled text a run without it trains on is not beside this fsdpc ('%s': "
                      "fsdpc looks for data/ in the folder of its binary, and a copied binary leaves it behind): pass --train_data, "
                      "or run the fsdpc built in its checkout", d->bundled);
    if (r->max_steps != 0) {
        r->has_train = 1;
        DataSource src = data_source(r, d->spec, &d->train_files, "training data");
        src.identified = train_identified;
        if (synthetic) {  // no files: the identity is the name
            IdentSource none;
            char *no_files = NULL, err[64];
            ident_source("synthetic", &no_files, 0, &none, err, sizeof err);
            input_found(r, INPUT_TRAIN, &none);
            ident_source_free(&none);
            data_open_synthetic(&r->train, T, V);
        } else if (open_dataset(&r->train, &src, T, V, 0.0, d->kind == DATA_EXPLICIT ? 1.0 : 0.9) < 0) return 1;  // the bundled text's last 10% validates
        if (c->data.packing && !r->train.rows && !synthetic)
            comm_fail_all("--packing packs finetuning rows (input_ids with attention_mask or labels, prompt/completion, "
                          "Alpaca, chat), and the training data is a token stream, already packed: use --document_masking "
                          "to keep its documents apart");
        if ((c->data.packing || c->data.document_masking) && synthetic)
            comm_fail_all("--%s needs documents, and synthetic data has none", c->data.packing ? "packing" : "document_masking");
        r->train_loader = data_loader_new(&r->train, (uint64_t)c->optim.seed, B, 1);
    }
    // the bundled text validates only where it is read as bytes; a dataset with splits validates
    // on its own (--dataset allenai/c4 reads c4-validation too)
    if (c->data.val_data[0] || (!d->named && bundled_ok) || d->kind == DATA_EXPLICIT) {
        DataSource val = data_source(r, d->val_spec, &d->val_files, "validation data");
        val.optional = !c->data.val_split[0] && !d->val_whole;  // a split the command line named must exist
        val.identified = val_identified;
        double from = !c->data.val_data[0] && !d->named ? 0.9 : 0.0;  // the bundled text's last 10%
        r->has_val = open_dataset(&r->val, &val, T, V, from, 1.0);
    }
    if (r->has_val < 0) return r->has_val = 0, 1;
    if (r->has_val) r->val_loader = data_loader_new(&r->val, 0, B, 0);
    return 0;
}

void inputs_record(Run *r) {
    const IdentSource *found[INPUTS];
    for (int i = 0; i < INPUTS; i++) found[i] = r->inputs[i].nfiles >= 0 ? &r->inputs[i] : NULL;
    ident_line(r->origin.inputs, sizeof r->origin.inputs, input_keys, found, INPUTS);
}

void inputs_free(Run *r) {
    if (r->has_train) {
        data_loader_free(r->train_loader);
        data_free(&r->train);
    }
    if (r->has_val) {
        data_loader_free(r->val_loader);
        data_free(&r->val);
    }
    for (int i = 0; i < INPUTS; i++)
        if (r->inputs[i].nfiles >= 0) ident_source_free(&r->inputs[i]);
    data_files_free(&r->data.train_files);
    data_files_free(&r->data.val_files);
    tok_free(r->tok);
    ckpt_source_free(&r->source);
    free(r->resume_file);
}
