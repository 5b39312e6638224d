// sentencepiece: the part of libsentencepiece (C++, no C API) the tokenizer module uses, behind
// C linkage. Implemented in data/text/sentencepiece.cpp; only data/text/tokenizer.c calls it.
#ifndef FSDPC_SENTENCEPIECE_H
#define FSDPC_SENTENCEPIECE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct SpmModel SpmModel;

// Loads a tokenizer.model; NULL with libsentencepiece's reason in err on failure.
SpmModel *spm_load(const char *path, char *err, size_t errlen);
void spm_free(SpmModel *m);
int spm_vocab_size(const SpmModel *m);
int spm_bos(const SpmModel *m);  // -1 when the model has none
int spm_eos(const SpmModel *m);
int spm_unk(const SpmModel *m);
// Encodes text[0, n) (no BOS/EOS), appending to *ids (grown with realloc, *cap its capacity).
// Returns the count appended, or -1 with the reason in err.
long spm_encode(const SpmModel *m, const char *text, size_t n, int32_t **ids, size_t *len, size_t *cap, char *err,
                size_t errlen);
// The piece of an id in range, as stored in the model (valid as long as the model), its length in *len.
const char *spm_piece(const SpmModel *m, int id, size_t *len);
int spm_is_byte(const SpmModel *m, int id);
int spm_is_control(const SpmModel *m, int id);
int spm_is_unknown(const SpmModel *m, int id);
// Decodes ids (all in range) as DecodeIds does; returns a malloc'd string (its length in *len),
// or NULL with the reason in err.
char *spm_decode(const SpmModel *m, const int32_t *ids, size_t n, size_t *len, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
