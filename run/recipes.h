// recipes: the seed recipes' dialects. A command line written in one recipe's flag spellings (its
// launch file, pasted) trains what that recipe's own script would have trained: every setting the
// line leaves out takes that script's default (model, learning rate and schedule, precision,
// checkpointing, data set, tokenizer), not fsdpc's. Each recipe's defaults were read from its
// argument parser and model-config code; docs/recipes.md lists them and what fsdpc cannot match.
#ifndef FSDPC_RECIPES_H
#define FSDPC_RECIPES_H

#include <stddef.h>

#include "../base/cli.h"
#include "config.h"

typedef struct Recipe Recipe;

// --recipe_defaults: auto (from the flags' spellings), none (fsdpc's own defaults), or a recipe's id
enum { RECIPE_AUTO = -1, RECIPE_NONE = -2 };
extern const CliChoice recipe_choices[];

// The recipe of the last parse's flags: `choice` (a recipe_choices value), else the recipe whose
// flag spellings the command line uses (cli_spelled). NULL for fsdpc's own dialect. When the
// spellings belong to two recipes whose defaults differ on a setting the line does not give
// (given(c, flag): whether c's command line set that setting, under any spelling), NULL and *why names both (a
// static message).
const Recipe *recipe_find(int choice, int (*given)(const Config *c, const char *flag), const Config *c, const char **why);
// The recipe_choices value of the recipe the last flags_finish took defaults from (RECIPE_NONE: none)
int recipe_chosen(void);
// The recipe's name as the start-up line gives it ("10.FSDP's train.py")
const char *recipe_name(const Recipe *r);
// Why the recipe trains nothing without --train_data (where it has no data set of its own), or NULL
const char *recipe_no_data(const Recipe *r);
// What fsdpc cannot match of the recipe's script, in one sentence, or NULL
const char *recipe_differs(const Recipe *r);
// Its script passes --rotary_pct and --rotary_emb_base to the partial-rotary family's config only
// (the others take their own config class's RoPE)
int recipe_rotary_neox_only(const Recipe *r);
// Calls set(flag, value, ctx) for each of r's defaults whose conditions hold: given(c, flag) says
// whether c's command line set a flag, and family-specific ones apply when the string at
// model_type, read again before each (the first default settles the family), names that family, or
// variant (NULL: none) names the model of that family the command line chose ("mistral").
void recipe_each_default(const Recipe *r, const char *model_type, const char *variant, int (*given)(const Config *c, const char *flag),
                         const Config *c, void (*set)(const char *flag, const char *value, void *ctx), void *ctx);
// What the recipe's script would train from c that fsdpc cannot, as one line (refused rather than
// trained otherwise), or NULL.
const char *recipe_check(const Recipe *r, const Config *c);
// "--train_batch_size, --dataset": the spellings of r that the last parse read, for the start-up line
void recipe_marks_used(const Recipe *r, char *buf, size_t len);

#endif
