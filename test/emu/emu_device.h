// Emulated device memory (device.cpp), shared by the C and C++ sides of the emulation.
#ifndef FSDPC_EMU_DEVICE_H
#define FSDPC_EMU_DEVICE_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
void *emu_dev_alloc(size_t n);    // 256-byte aligned; never reused (the caching allocator keeps blocks)
int emu_is_dev(const void *p);    // inside an emulated device allocation
void emu_device_access(int on);   // nested on/off pairs around emulated device work
#ifdef __cplusplus
}
// device memory is accessible while one of these lives
struct EmuDeviceWork {
    EmuDeviceWork() { emu_device_access(1); }
    ~EmuDeviceWork() { emu_device_access(0); }
};
#endif
#endif
