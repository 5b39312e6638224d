// cuDNN's headers include this one: the emulated runtime's types stand in for it.
#pragma once
#include "cuda_runtime.h"
typedef struct CUgraph_st *cudaGraph_t;
