// The emulation's dlopen/dlsym (test/gpu/emu/device.cpp's emu_dlopen, emu_dlsym, emu_dlerror): the
// GPU code opens the fake libcudnn, libcublasLt and libnccl through the same calls it makes on a GPU
// machine, and FSDPC_EMU_CUDNN=missing (FSDPC_EMU_CUBLASLT, FSDPC_EMU_NCCL) makes the open fail.
// For both C++ (this folder) and C (test/gpu/emu/c/dlfcn.h is a link to it): the real header
// first, for RTLD_DEFAULT and the emulation's own calls of the real dlsym.
#pragma once
#include_next <dlfcn.h>
#include "../emu_device.h"
#ifndef EMU_DL_REAL
#define dlopen emu_dlopen
#define dlsym emu_dlsym
#define dlerror emu_dlerror
#endif
