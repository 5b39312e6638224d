// llama: the Llama-2 family (LlamaForCausalLM): RMSNorm, RoPE, grouped-query attention, SwiGLU.
// Units: 0 the embedding, 1..L the blocks, L+1 the final norm and lm_head.
#ifndef FSDPC_LLAMA_H
#define FSDPC_LLAMA_H

#include "model.h"

extern const ModelFamily model_llama;

#endif
