// Emulated device memory (testing only): one reserved address range that is readable and
// writable only while emulated device work runs (kernels, copies, cuBLASLt, CUB, NCCL), so host
// code that touches device memory faults at once, as it would with a real GPU.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "emu_device.h"

namespace {
constexpr size_t kReserve = (size_t)32 << 30;  // address space only: pages are committed when touched
std::mutex mu;
char *base;
size_t used;
int access_depth;

void protect() {  // mu held
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), len = (used + page - 1) / page * page;
    if (len && mprotect(base, len, access_depth > 0 ? PROT_READ | PROT_WRITE : PROT_NONE)) {
        perror("emu: mprotect");
        abort();
    }
}
}  // namespace

extern "C" void *emu_dev_alloc(size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    if (!base) {
        void *p = mmap(nullptr, kReserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            perror("emu: mmap");
            abort();
        }
        base = (char *)p;
    }
    used = (used + 255) / 256 * 256;
    if (used + n > kReserve) return nullptr;
    void *p = base + used;
    used += n ? n : 1;
    protect();
    return p;
}

extern "C" int emu_is_dev(const void *p) {
    std::lock_guard<std::mutex> lock(mu);
    return base && (const char *)p >= base && (const char *)p < base + used;
}

extern "C" void emu_device_access(int on) {
    std::lock_guard<std::mutex> lock(mu);
    const int was = access_depth > 0;
    access_depth += on ? 1 : -1;
    if (was != (access_depth > 0)) protect();
}
