// rng: the project's one splitmix64, and the counter-based dropout mask built on it. Plain C that
// CUDA device code can call too (kernels/cuda), so the CPU and the GPU draw identical masks.
#ifndef FSDPC_RNG_H
#define FSDPC_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define RNG_FN static inline __host__ __device__
#else
#define RNG_FN static inline
#endif

// splitmix64 (Steele, Lea, Flood 2014) as a hash: the output of a splitmix64 generator whose state
// is x before its step. A bijection of the 64-bit values whose every output bit depends on every
// input bit, so hashes of consecutive counters look independent.
RNG_FN uint64_t rng_splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// The splitmix64 stream: advances *state and returns the next output (rng_splitmix64 of the old state).
RNG_FN uint64_t rng_splitmix64_next(uint64_t *state) {
    const uint64_t x = *state;
    *state = x + 0x9e3779b97f4a7c15ULL;
    return rng_splitmix64(x);
}

// ---- dropout mask ----
// Element i of sample s under key k is kept iff u(k, s, i) >= p, where
//   u(k, s, i) = (rng_splitmix64(rng_dropout_seed(k, s) ^ i) >> 40) / 2^24   (uniform in [0, 1)).
// A pure function of (key, sample, element): the mask does not depend on how samples are spread
// over ranks, micro-batches or threads, nor on the device.

// per-sample seed, computed once per row
RNG_FN uint64_t rng_dropout_seed(uint64_t key, uint64_t sample) {
    return rng_splitmix64(key ^ rng_splitmix64(sample));
}

// u >= p  <=>  top24 >= ceil(p * 2^24) (p * 2^24 is exact in float): the integer form of the test.
// p <= 0 keeps everything, p >= 1 nothing.
RNG_FN uint32_t rng_dropout_threshold(float p) {
    if (!(p > 0.0f)) return 0;
    if (p >= 1.0f) return 1u << 24;
    const float x = p * 16777216.0f;
    uint32_t t = (uint32_t)x;
    return (float)t < x ? t + 1 : t;
}

RNG_FN int rng_dropout_keep(uint64_t seed, uint64_t i, uint32_t threshold) {
    return (uint32_t)(rng_splitmix64(seed ^ i) >> 40) >= threshold;
}

// u(seed, i) in [0, 1), as the dropout mask draws it: Mixtral's router jitter
RNG_FN float rng_unit(uint64_t seed, uint64_t i) { return (float)(rng_splitmix64(seed ^ i) >> 40) * (1.0f / 16777216.0f); }

#endif
