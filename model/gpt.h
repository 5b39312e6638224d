// gpt: the minGPT family (minimal_fsdp's model, GPT-2's architecture): learned token and position
// embeddings, pre-LayerNorm blocks with biases, fused c_attn, tanh-GELU MLP, lm_head tied to wte.
// Units: 0 the embeddings and the final LayerNorm (used by the embedding and by the head, as
// FSDP's root unit is), 1..L the blocks. Linear weights are (out, in), as nn.Linear keeps them.
#ifndef FSDPC_GPT_H
#define FSDPC_GPT_H

#include "model.h"

extern const ModelFamily model_mingpt;

#endif
