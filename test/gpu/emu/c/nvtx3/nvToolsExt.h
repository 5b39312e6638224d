// CPU emulation (testing only): profiler ranges mark the steps of the emulator's roofline model.
#ifndef FSDPC_EMU_NVTX_H
#define FSDPC_EMU_NVTX_H
#include "../../emu_device.h"
static inline int nvtxRangePushA(const char *name) { emu_range_push(name); return 0; }
static inline int nvtxRangePop(void) { emu_range_pop(); return 0; }
#endif
