// flags: fsdpc's own flags (training's, which `fsdpc plan` takes too): their table, the seed
// recipes' defaults for what a command line leaves out (recipes.h), and the checks of the whole
// Config they fill (config.h: its sections). A bad value ends the job on every rank with one line.
// The model's own configuration (presets, shape checks) is model/config.h.
#ifndef FSDPC_FLAGS_H
#define FSDPC_FLAGS_H

#include <stdint.h>

#include "../base/cli.h"
#include "config.h"

// The training flags: what `fsdpc` without a subcommand parses into a Config (the defaults
// included), and what `fsdpc plan` takes beside its own.
extern const CliTable flags_cli;
// What follows a cli_parse of flags_cli: the family's own defaults, --run_name, and the checks
// of the whole configuration. On a bad value every rank exits with one clear line. With a model
// source (--resume_from_checkpoint, --init_from) and no --model_type or --model_name, the model's
// checks wait for flags_adopt_model or flags_no_source.
void flags_finish(Config *cfg);
// cli_parse of flags_cli, then flags_finish: fills cfg from defaults, the --model_name preset and
// argv. CLI_HELP (nothing finished) when argv asks for --help.
int flags_parse(Config *cfg, int argc, char **argv);
// Takes the `known` fields of src, read from `source` (e.g. "checkpoint 'x.h5'"). A size the command
// line (or its --model_name preset) gave that disagrees is an error on every rank; the context
// length is only a default (RoPE has no position table, so training may use any length).
// Validates the result.
void flags_adopt_model(Config *cfg, const ModelConfig *src, unsigned known, const char *source);
// No model source was read (the checkpoint directory is empty, or none was named): the flags'
// model, checked as flags_finish defers when a source may name the family.
void flags_no_source(Config *cfg);
// FNV-1a of the parsed config but the thread count, for comm_check_same (Config is zeroed
// before filling, so padding and string tails hash alike on every rank)
uint64_t flags_hash(const Config *cfg);
// whether the command line that filled c gave flag `name` (its canonical name)
int flags_given(const Config *c, const char *name);
// The vocabulary once the tokenizer is known (vocab: its size; named: --tokenizer, a recipe's or
// a source's, rather than the byte default): a vocabulary no flag, preset or source fixed becomes
// the tokenizer's when it was named, or for the default model; else it must hold the tokenizer's
// tokens. NULL, or why not (a static message, naming `source` when the vocabulary came from the model
// being loaded).
const char *flags_take_tokenizer_vocab(Config *cfg, int vocab, int named, const char *tokenizer, const char *source);
// "D L H from flags; KV F T V from LlamaConfig's defaults": where each size came from
void flags_size_origins(const Config *cfg, char *buf, int len);
// The sizes that must fit in 32 bits (base/checked.h) under `world` ranks: a micro-batch's tokens
// (--batch_size x --max_context_width) and a step's sequences (x ranks x --grad_accum). NULL, or
// a static message naming the product, its factors and the fix. Parsing checks it for one rank.
const char *flags_check_world(const Config *cfg, int world);

#endif
