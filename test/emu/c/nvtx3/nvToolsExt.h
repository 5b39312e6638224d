// CPU emulation (testing only): profiler ranges do nothing.
#ifndef FSDPC_EMU_NVTX_H
#define FSDPC_EMU_NVTX_H
static inline int nvtxRangePushA(const char *name) { (void)name; return 0; }
static inline int nvtxRangePop(void) { return 0; }
#endif
