// half: scalar conversions between fp32 and the 16-bit formats (bf16, IEEE fp16), round to
// nearest even, NaN kept a NaN. The CPU kernels, the checkpoint and safetensors code all use these,
// so a value rounds the same wherever it is converted. 16-bit values are stored as uint16_t.
#ifndef FSDPC_BASE_HALF_H
#define FSDPC_BASE_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t half_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float half_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t half_f32_to_bf16(float f) {
    const uint32_t u = half_f32_bits(f);
    const uint16_t r = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // add 0x7fff plus the lowest kept bit
    // a NaN must not round into Inf: keep its top bits and force a quiet-NaN mantissa bit (a
    // select, not a branch, so loops over it vectorize)
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u) : r;
}

static inline float half_bf16_to_f32(uint16_t h) { return half_bits_f32((uint32_t)h << 16); }

static inline float half_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) return copysignf(ldexpf((float)m, -24), sign ? -1.0f : 1.0f);  // zero and subnormals
    return half_bits_f32(e == 31 ? sign | 0x7f800000u | m << 13 : sign | (e + 112) << 23 | m << 13);
}

static inline uint16_t half_f32_to_f16(float v) {
    uint32_t x = half_f32_bits(v);
    uint16_t sign = (uint16_t)(x >> 16 & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00;
    if (ax >= 0x477ff000u) return sign | 0x7c00;  // from 65520 up: infinity
    if (ax < 0x38800000u)  // below 2^-14: a subnormal, in units of 2^-24 (exact scaling, then RNE)
        return sign | (uint16_t)nearbyintf(fabsf(v) * 16777216.0f);
    uint32_t m = ax - 0x38000000u;  // exponent bias 127 -> 15
    return sign | (uint16_t)((m + 0xfffu + (m >> 13 & 1)) >> 13);
}

#endif
