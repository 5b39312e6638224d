// generate: autoregressive sampling with a KV cache (temperature, nucleus/top-p).
#ifndef FSDPC_GENERATE_H
#define FSDPC_GENERATE_H

#include <stdint.h>

#include "model.h"

// unit_params[u]: full parameters of unit u, in the kernels' parameter dtype. Continues the n prompt tokens (n >= 1) by
// at most num_tokens tokens, handing each new token to emit, which returns 0 to stop (an end-of-
// text token). temperature 0 = greedy. 0, or -1 with the line in err when a logit is not finite.
int model_generate(const ModelPlan *plan, const void *const *unit_params, const int32_t *prompt, int n,
                   int num_tokens, float temperature, float top_p, uint64_t seed, int (*emit)(int32_t tok, void *ctx),
                   void *ctx, char *err, size_t errlen);

// Picks a token from logits (V): greedy at temperature 0, else nucleus sampling. rng is advanced.
// -1 with the line in err when a logit is not finite (diverged weights).
int32_t model_sample(float *logits, int V, float temperature, float top_p, uint64_t *rng, char *err, size_t errlen);

#endif
