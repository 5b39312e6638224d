// source: the model source's files a checkpoint carries under /source (config.json, the
// tokenizer's configuration, the chat template), read from a Hugging Face folder or a checkpoint.
#ifndef FSDPC_CKPT_SOURCE_H
#define FSDPC_CKPT_SOURCE_H

#include <stddef.h>

// The files of a Hugging Face model source that say more than its weights: the length it was
// trained for, its special tokens, its chat template. A run started from one keeps them in every
// checkpoint (/source), and a run started from such a checkpoint passes them on, so `export`
// writes them back (config.json's values, the others byte for byte) wherever the source went.
#define CKPT_SOURCE_MAX_BYTES ((size_t)16 << 20)  // per file: these are small JSON and Jinja files
// indices into ckpt_source_names: the files after CKPT_SRC_TOKENIZER_CONFIG are the tokenizer's too
enum { CKPT_SRC_CONFIG, CKPT_SRC_GENERATION_CONFIG, CKPT_SRC_TOKENIZER_CONFIG, CKPT_SOURCE_FILES = 6 };
extern const char *const ckpt_source_names[CKPT_SOURCE_FILES];
typedef struct {
    char *text[CKPT_SOURCE_FILES];  // the file's bytes, NULL when the source had none
    size_t len[CKPT_SOURCE_FILES];
} CkptSource;
// The files of dir that ckpt_source_names lists (empty ones count as absent). NULL, or a one-line
// error naming the file (unreadable, or larger than CKPT_SOURCE_MAX_BYTES).
const char *ckpt_source_from_dir(const char *dir, CkptSource *src);
// A checkpoint's /source; empty for files written before it existed. Any rank alone. NULL, or a
// one-line error (a dataset that is no 1-D byte array within the limit).
const char *ckpt_source_read(const char *file, CkptSource *src);
// Collective: every rank takes rank 0's source (collective HDF5 creates need the same on all).
void ckpt_source_share(CkptSource *src);
void ckpt_source_free(CkptSource *src);

#endif
