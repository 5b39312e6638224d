// Emulated device memory, streams and events (device.cpp), shared by the C and C++ sides of the
// emulation. Work runs at once, in the order it is queued, but every device page remembers which
// stream last wrote and read it, and when: an access from another stream that no event chain
// orders after those is reported as a race, as is host code touching device memory or a pinned
// buffer that an async copy may still be using. So a missing event wait fails here, although
// this in-order emulation would compute the right numbers anyway. Deferred ops (the emulated
// NCCL's collectives) are the exception to "at once": their bytes land later (see emu_op_defer).
#ifndef FSDPC_EMU_DEVICE_H
#define FSDPC_EMU_DEVICE_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
void *emu_dev_alloc(size_t n);    // page aligned; never reused (the caching allocator keeps blocks)
size_t emu_dev_used(void);        // bytes emu_dev_alloc has handed out and emu_dev_free not taken back
// cudaFree: 0 if p is no block's start. Aborts while any stream has work the host has not waited
// for (a real cudaFree waits for the device); later accesses to the block abort too.
int emu_dev_free(void *p);
int emu_is_dev(const void *p);    // inside an emulated device allocation
void emu_device_access(int on);   // nested on/off pairs: device memory readable and writable, untracked
void *emu_host_alloc(size_t n);   // pinned host memory
int emu_host_free(void *p);       // 0 if p is not pinned memory

// Streams are small integers (0 is the host), which a cudaStream_t carries as its pointer value;
// an event holds the clocks of its stream when recorded.
int emu_stream_new(void);
static inline int emu_sid(const void *stream) { return (int)(intptr_t)stream; }
void *emu_event_new(void);
void emu_event_free(void *e);
void emu_event_record(void *e, int stream);
// host time between the two events' work: each is done when recorded, or when the last deferred
// op it follows landed (the host waits for that)
float emu_event_elapsed_ms(const void *a, const void *b);
void emu_stream_wait_event(int stream, void *e);
int emu_event_query(void *e);  // cudaEventQuery: 0 while a deferred op it follows has not landed
void emu_event_sync(void *e);
void emu_stream_sync(int stream);
void emu_device_sync(void);  // cudaDeviceSynchronize: the host waits for every stream

// Device work queued on a stream: between begin and end, the device pages it touches are found
// by page faults; emu_op_access names them instead for code that must not fault (MPI).
// An op waits (on the host) for the deferred ops it follows to land.
void emu_op_begin(int stream, const char *what);
void emu_op_access(const void *p, size_t n, int write);
void emu_op_end(void);
// A deferred op: device work whose bytes land later, as a collective's do when its peers arrive.
// emu_op_begin_deferred starts it without waiting for what it follows, except where a pending op
// it follows writes its input [in, in + n), which it reads when queued. Its accesses are declared
// as for any op (emu_op_access), then emu_op_defer(poll, arg) before emu_op_end makes it pending:
// from then on the host calls poll(arg, 0), which answers 1 once its bytes are ready to land, and
// then poll(arg, 1) once, when every pending op it follows has landed, to write them (under
// emu_device_access). Until then the events after it are not ready, and work that follows it
// waits. The host polls whenever it enters the emulation (op begins, event queries, syncs).
void emu_op_begin_deferred(int stream, const char *what, const void *in, size_t n);
void emu_op_defer(int (*poll)(void *arg, int land), void *arg);
// A copy between device memory and host memory, inside an op: moves the bytes and, when the host
// side is pinned, keeps host code off it until the host has waited for this op.
void emu_op_copy(void *dst, const void *src, size_t n, int to_host);
extern long emu_reads_back;  // the program's device-to-host copies, for tests that must see none

// The roofline model (device.cpp): every op's bytes (page grants, unless declared here: bytes < 0
// keeps the grants) and flops (bf16: at the tensor-core rate). Profiler ranges mark the steps;
// with FSDPC_EMU_ROOFLINE set, the last step's modelled H100 time is printed at exit (=ops: per op name too).
void emu_op_cost(double bytes, double flops, int bf16);
void emu_range_push(const char *name);
void emu_range_pop(void);

// The emulated dlopen/dlsym/dlerror (include/dlfcn.h routes the GPU code's calls here): each fake
// library registers its file name, the environment variable whose value "missing" makes its
// dlopen fail, and its symbols (a table that outlives the program). dlsym on any other handle is
// the real one's (RTLD_DEFAULT lookups of the host code).
typedef struct {
    const char *name;
    void *fn;
} EmuSym;
void emu_dl_register(const char *file, const char *missing_env, const EmuSym *syms, int n);
void *emu_dlopen(const char *file, int mode);
void *emu_dlsym(void *handle, const char *name);
char *emu_dlerror(void);
#ifdef __cplusplus
}
// raw device access while one of these lives (allocation fills)
struct EmuDeviceWork {
    EmuDeviceWork() { emu_device_access(1); }
    ~EmuDeviceWork() { emu_device_access(0); }
};
// one op of device work on a stream, for the scope's life
struct EmuOp {
    EmuOp(int stream, const char *what) { emu_op_begin(stream, what); }
    ~EmuOp() { emu_op_end(); }
};
#endif
#endif
