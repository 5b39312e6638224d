// data: byte-level text datasets, synthetic tokens, and a layout-free sample order.
#ifndef FSDPC_DATA_H
#define FSDPC_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char path[512];
    int32_t *tokens;  // NULL for synthetic data
    size_t ntokens;
    int T;            // tokens per sample (targets are the next T)
    int vocab;
    size_t nchunks;   // non-overlapping samples of T+1 tokens per epoch
} Dataset;

// Text file with the byte tokenizer; keeps the part [frac_begin, frac_end) of the file, so one
// file can give a training head and a validation tail. Errors name the file.
void data_open_text(Dataset *d, const char *path, int T, int vocab, double frac_begin, double frac_end);
// Path of the Tiny Shakespeare copy shipped next to the binary (data/tinyshakespeare.txt).
void data_bundled_path(char *out, size_t len);
// Random tokens, for benchmarks: an endless dataset.
void data_open_synthetic(Dataset *d, int T, int vocab);
void data_free(Dataset *d);

// Training sample g (global sample index = step * global_batch + position in the step): epochs
// are shuffled by a seeded permutation, so the sample depends only on (seed, g). inp/tgt: (T)
void data_train_sample(const Dataset *d, uint64_t seed, uint64_t g, int32_t *inp, int32_t *tgt);
// Validation sample g: chunks in file order.
void data_val_sample(const Dataset *d, uint64_t g, int32_t *inp, int32_t *tgt);
// Which epoch global sample g falls in (0 for synthetic data).
uint64_t data_epoch_of(const Dataset *d, uint64_t g);

#endif
