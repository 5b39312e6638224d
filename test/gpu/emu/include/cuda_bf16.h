// CPU emulation of the bf16 type (testing only): round to nearest even, NaN stays NaN.
#pragma once
#include <cstdint>
#include <cstring>
struct __nv_bfloat16 { uint16_t x; };
static inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    r.x = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u) : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return r;
}
static inline float __bfloat162float(__nv_bfloat16 b) { uint32_t u = (uint32_t)b.x << 16; float f; memcpy(&f, &u, 4); return f; }
