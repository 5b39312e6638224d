// CPU emulation of the WMMA subset used by kernels/cuda (testing only). Every lane holds the
// whole 16x16 tile; loads check the pointer and leading-dimension rules of the real API. A store
// writes 8 of the 256 elements per lane and does not wait for the other lanes, as the hardware's
// does not promise: a lane must __syncwarp before reading what other lanes stored.
#pragma once
#include <type_traits>
#include <cstdio>
#include <cstdlib>
#include "cuda_bf16.h"
#include "cuda_runtime.h"
namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {}; struct row_major {}; struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "emu: only 16x16x16");
    float x[256];
};
static inline float emu_f(float v) { return v; }
static inline float emu_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> static inline void emu_check(const T *p, unsigned ld) {
    if ((uintptr_t)p % 32 || (ld * sizeof(T)) % 16) { fprintf(stderr, "emu wmma: pointer %p or ld %u misaligned\n", (const void *)p, ld); abort(); }
}
template <class Use, class T, class L> static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ld) {
    emu_check(p, ld);
    constexpr bool row = std::is_same<L, row_major>::value;
    for (int i = 0; i < 16; i++) for (int j = 0; j < 16; j++) f.x[i * 16 + j] = emu_f(row ? p[i * ld + j] : p[j * ld + i]);
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ld, layout_t l) {
    emu_check(p, ld);
    for (int i = 0; i < 16; i++) for (int j = 0; j < 16; j++) f.x[i * 16 + j] = l == mem_row_major ? p[i * ld + j] : p[j * ld + i];
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ld, layout_t l) {
    emu_check(p, ld);
    for (int e = emu::lane(); e < 256; e += 32) {
        const int i = e / 16, j = e % 16;
        (l == mem_row_major ? p[i * ld + j] : p[j * ld + i]) = f.x[e];
    }
}
template <class U, class T, class L> static inline void fill_fragment(fragment<U, 16, 16, 16, T, L> &f, float v) { for (float &e : f.x) e = v; }
template <class LA, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b, const fragment<accumulator, 16, 16, 16, float> &c) {
    float r[256];
    for (int i = 0; i < 16; i++) for (int j = 0; j < 16; j++) {
        float s = c.x[i * 16 + j];
        for (int k = 0; k < 16; k++) s += a.x[i * 16 + k] * b.x[k * 16 + j];
        r[i * 16 + j] = s;
    }
    for (int e = 0; e < 256; e++) d.x[e] = r[e];
    if (emu::lane() == 0) emu_op_cost(-1, 2.0 * 16 * 16 * 16, 1);  // every lane computes the tile; the warp's work once
}
} }
