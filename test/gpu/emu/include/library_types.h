// What cuDNN's headers take from CUDA's library_types.h (its cudaDataType is cublasLt.h's here).
#pragma once
typedef enum libraryPropertyType_t { MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL } libraryPropertyType;
