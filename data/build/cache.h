// cache: token shards made from document files (text, JSON Lines, Arrow, Parquet) the first time
// a run reads them, so training samples them at random like any shard and every later run (any
// world size) starts at once. A cache folder is keyed by the inputs (resolved path, size,
// modification time), the tokenizer (its file's bytes and its ids for a probe text), the column,
// the row format and the token width; it is built by all ranks together (one input each, round
// robin), appears under its final name only when complete, and holds per input NNNNNN (in order):
//   part-NNNNNN.bin  the tokens, a token shard (data/shardfile.h);
//   part-NNNNNN.idx  the documents' (rows') first tokens, then the end: uint64 after a shard header;
//   part-NNNNNN.lab  finetuning rows only: each token's label (uint32, 0xffffffff = no loss), aligned
//                    with the tokens and unshifted, after a shard header;
//   part-NNNNNN.txt  what was read (rows, null rows, tokens, the reader's description).
#ifndef FSDPC_CACHE_H
#define FSDPC_CACHE_H

#include <stddef.h>

#include "../rows/docs.h"
#include "../rows/sft.h"
#include "../text/tokenizer.h"

typedef struct {
    const char *path;
    DocsKind kind;
    DocsCompression comp;
} CacheInput;

typedef struct {
    const CacheInput *inputs;
    int n;
    const Tokenizer *tok;
    const char *text_column;  // "" for "text"
    int explicit_column;      // --text_column was given
    int vocab;                // the model's: ids must be below it; above 65536 the shards hold uint32
    const char *root;         // the folder caches live in ("" : cache_default_root)
    const char *label;        // what the log calls the data: "training data 'x'"
    const volatile int *stop; // non-zero (a preemption signal): the build stops, leaving nothing
    SftFormat format;         // rows (finetuning formats) or documents (SFT_TEXT); SFT_AUTO: per file, by its fields
    ChatTemplate tmpl;        // chat rows' template
    int train_on_inputs;      // rows: every real token bears loss
} CacheRequest;

// Collective. Finds or builds the cache of q's inputs, its folder into *dir (heap; NULL unless 0 is
// returned); rank 0 logs one
// line: the formats, rows (null rows skipped), tokens and the folder. Returns 0; 1 on every rank
// when *q->stop was set on any rank during the build (its partial folder removed); -1 on every
// rank with one line in err (an input that cannot be read, named), leaving no cache behind.
int cache_ensure(const CacheRequest *q, char **dir, char *err, size_t errlen);
// The shard made of input i (heap).
char *cache_part_path(const char *dir, int i);
// --data_cache_dir's default (heap): $FSDPC_CACHE_DIR, else $XDG_CACHE_HOME/fsdpc, else ~/.cache/fsdpc.
char *cache_default_root(void);

#endif
