// memory: on the CPU the "device" is host memory.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/err.h"
#include "../../base/log.h"
#include "../backend.h"

void *cpu_alloc(size_t bytes) { return callocCheck(1, bytes); }
void cpu_free(void *p) { free(p); }
void *cpu_alloc_host(size_t bytes) { return callocCheck(1, bytes); }
void cpu_free_host(void *p) { free(p); }
void cpu_upload(void *dst, const void *host_src, size_t bytes) { memcpy(dst, host_src, bytes); }
void cpu_download(void *host_dst, const void *src, size_t bytes) { memcpy(host_dst, src, bytes); }
void cpu_sync(void) {}
int cpu_download_async(void *host_dst, const void *src, size_t bytes) { return memcpy(host_dst, src, bytes), 0; }
int cpu_upload_async(void *dst, const void *host_src, size_t bytes) { return memcpy(dst, host_src, bytes), 0; }
void cpu_async_wait(int ticket) { (void)ticket; }
void cpu_async_fence(void) {}
void cpu_async_fence_to(int ticket) { (void)ticket; }
void cpu_async_after_kernels(void) {}
double cpu_peak_mem_mib(void) { return 0.0; }
void cpu_mem_info(size_t *free_bytes, size_t *total_bytes) { *free_bytes = *total_bytes = 0; }  // not a device

// The allocator's view on the CPU is the process's: resident memory now and at most (kB in
// /proc/self/status); malloc keeps no cache worth reporting apart.
void cpu_mem_held(double *held, double *held_peak, double *cached) {
    *held = *held_peak = *cached = 0;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %lf kB", &kb) == 1) *held = kb * 1024;
        if (sscanf(line, "VmHWM: %lf kB", &kb) == 1) *held_peak = kb * 1024;
    }
    if (f) fclose(f);
}
