// test_gpu_emu: test_gpu on the CPU emulation in test/emu/include. The comm functions the
// kernels call (errors, checked allocation) without MPI; test_gpu.c is built with main renamed.
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
extern "C" {
#include "comm/comm.h"
CommInfo comm_info;
void comm_fatal_at(const char *file, int line, const char *fmt, ...) {
    va_list ap; va_start(ap, fmt); fprintf(stderr, "fsdpc: error: "); vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (%s:%d)\n", file, line); va_end(ap); abort();
}
void *comm_malloc_at(const char *f, int l, size_t n) { void *p = malloc(n ? n : 1); if (!p) comm_fatal_at(f, l, "oom"); return p; }
void *comm_calloc_at(const char *f, int l, size_t n, size_t s) { void *p = calloc(n ? n : 1, s ? s : 1); if (!p) comm_fatal_at(f, l, "oom"); return p; }
void comm_log(const char *fmt, ...) { va_list ap; va_start(ap, fmt); vprintf(fmt, ap); va_end(ap); }
void comm_init(int *, char ***) {}
void comm_finalize(void) {}
int test_main(int argc, char **argv);
}
int main(int argc, char **argv) { setvbuf(stdout, NULL, _IOLBF, 0); return test_main(argc, argv); }
