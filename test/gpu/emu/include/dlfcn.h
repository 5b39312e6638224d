// The emulation's dlopen/dlsym (test/gpu/emu/cudnn.cpp): the GPU code opens the fake libcudnn through
// the same calls it makes on a GPU machine, and FSDPC_EMU_CUDNN=missing makes the open fail.
#pragma once
#define RTLD_LAZY 0x1
#define RTLD_NOW 0x2
#define RTLD_LOCAL 0
extern "C" {
void *emu_dlopen(const char *file, int mode);
void *emu_dlsym(void *handle, const char *name);
char *emu_dlerror(void);
}
#define dlopen emu_dlopen
#define dlsym emu_dlsym
#define dlerror emu_dlerror
