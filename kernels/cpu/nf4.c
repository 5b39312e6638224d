// nf4: NF4 packing with double quantisation (host memory, the same on every device) and its
// dequantisation on the CPU (kernels.h, "NF4 storage").
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/err.h"
#include "../backend.h"
#include "../nf4.h"
#include "cpu_common.h"

static const float nf4_values[16] = {NF4_VALUES};
static const float nf4_dyn[256] = {NF4_DYNAMIC_MAP};

size_t kern_nf4_bytes(size_t n) { return nf4_layout(n).bytes; }

// NF4's decision tree: how many thresholds v is strictly above, so a value on one takes the lower code
static unsigned nf4_code(float v, const float *mid) {
    unsigned c = 0;
    for (int k = 0; k < 15; k++) c += v > mid[k];
    return c;
}

// the index of the dynamic map's value nearest to v (ties: the lower), from its 255 midpoints
static uint8_t nf4_nearest(double v, const double *mid) {
    unsigned lo = 0, hi = 255;  // how many midpoints v is strictly above, by bisection
    while (lo < hi) {
        const unsigned m = (lo + hi) / 2;
        if (v > mid[m]) lo = m + 1;
        else hi = m;
    }
    return (uint8_t)lo;
}

// each block's codes into dst and its absmax into absmax[b]
static void nf4_pack_blocks(uint8_t *dst, float *absmax, const float *src, size_t n, size_t blocks) {
    float mid[15];  // fp32 (a + b) / 2 of adjacent values: bitsandbytes' hard-coded thresholds
    for (int k = 0; k < 15; k++) mid[k] = (nf4_values[k] + nf4_values[k + 1]) / 2.0f;
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t b = 0; b < blocks; b++) {
        const float *x = src + b * NF4_BLOCK;
        const size_t len = n - b * NF4_BLOCK < NF4_BLOCK ? n - b * NF4_BLOCK : NF4_BLOCK;
        float m = 0.0f;
        for (size_t j = 0; j < len; j++) m = fmaxf(m, fabsf(x[j]));
        absmax[b] = m;
        // times the fp32 reciprocal, as bitsandbytes' kQuantizeBlockwise (not a division: values on a
        // threshold can round to the other side); the padding past n is 0.0's code
        const float inv = m > 0.0f ? 1.0f / m : 0.0f;
        unsigned codes[NF4_BLOCK];
        for (size_t j = 0; j < NF4_BLOCK; j++) codes[j] = nf4_code(j < len ? x[j] * inv : 0.0f, mid);
        for (size_t j = 0; j < NF4_BLOCK; j += 2)
            dst[b * NF4_BLOCK / 2 + j / 2] = (uint8_t)(codes[j] << 4 | codes[j + 1]);
    }
}

void kern_nf4_quantize(uint8_t *dst, const float *src, size_t n) {
    const Nf4Layout l = nf4_layout(n);
    memset(dst, 0, l.bytes);  // the padding before absmax2
    float *absmax = mallocCheck(sizeof(float) * l.blocks);
    nf4_pack_blocks(dst, absmax, src, n, l.blocks);
    // double quantisation: the absmaxes less their mean, each group's scaled by its largest
    // magnitude onto the dynamic map
    double sum = 0.0;
    for (size_t b = 0; b < l.blocks; b++) sum += absmax[b];
    const float offset = (float)(sum / (double)l.blocks);
    double mid[255];  // exact: adjacent fp32 values are close enough in magnitude to add exactly in double
    for (int k = 0; k < 255; k++) mid[k] = ((double)nf4_dyn[k] + nf4_dyn[k + 1]) / 2.0;
    for (size_t g = 0; g < l.groups; g++) {
        const size_t b0 = g * NF4_GROUP, b1 = b0 + NF4_GROUP < l.blocks ? b0 + NF4_GROUP : l.blocks;
        float s = 0.0f;
        for (size_t b = b0; b < b1; b++) s = fmaxf(s, fabsf(absmax[b] - offset));
        const float inv = s > 0.0f ? 1.0f / s : 0.0f;
        for (size_t b = b0; b < b1; b++) dst[l.qabsmax + b] = nf4_nearest((absmax[b] - offset) * inv, mid);
        memcpy(dst + l.absmax2 + sizeof(float) * g, &s, sizeof s);
    }
    memcpy(dst + l.offset, &offset, sizeof offset);
    free(absmax);
}

// block b's scale, dyn[qabsmax] * absmax2 + offset rounded twice: GCC would otherwise fuse it into
// one FMA (-ffp-contract=fast, GNU C's default), unlike CUDA's __fmul_rn/__fadd_rn and the
// reference; not inlined, so the caller's contraction mode cannot apply to it either. Clang (the
// fuzz builds) takes the standard pragma instead of GCC's attribute.
#ifdef __clang__
#define NF4_NO_CONTRACT __attribute__((noinline))
#else
#define NF4_NO_CONTRACT __attribute__((noinline, optimize("fp-contract=off")))
#endif
NF4_NO_CONTRACT static float nf4_scale(const uint8_t *src, const Nf4Layout *l, size_t b) {
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif
    float absmax2, offset;
    memcpy(&absmax2, src + l->absmax2 + sizeof(float) * (b / NF4_GROUP), sizeof absmax2);
    memcpy(&offset, src + l->offset, sizeof offset);
    return nf4_dyn[src[l->qabsmax + b]] * absmax2 + offset;
}

// the CPU's parameters are always fp32 (kern_params_bf16), whatever f32 says
void cpu_nf4_dequantize(void *dst, int f32, const uint8_t *src, size_t n, KernSegs seg) {
    (void)f32;
    float *out = dst;
    const Nf4Layout l = nf4_layout(n);
    if (seg.n == 1 && seg.off == 0) {  // the whole tensor (tp 1): block by block, no index arithmetic per element
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t b = 0; b < l.blocks; b++) {
            const float s = nf4_scale(src, &l, b);
            const size_t hi = (b + 1) * NF4_BLOCK < seg.len ? (b + 1) * NF4_BLOCK : seg.len;
            for (size_t i = b * NF4_BLOCK; i < hi; i++) out[i] = nf4_values[(src[i / 2] >> (i % 2 ? 0 : 4)) & 15] * s;
        }
        return;
    }
    const size_t m = seg.n * seg.len, chunks = (m + NF4_BLOCK - 1) / NF4_BLOCK;
#pragma omp parallel for schedule(static) if (m >= CPU_PAR_MIN)
    for (size_t c = 0; c < chunks; c++) {
        const size_t hi = (c + 1) * NF4_BLOCK < m ? (c + 1) * NF4_BLOCK : m;
        size_t last = (size_t)-1;
        float s = 0.0f;
        for (size_t i = c * NF4_BLOCK; i < hi; i++) {
            const size_t w = i / seg.len * seg.stride + seg.off + i % seg.len, b = w / NF4_BLOCK;
            if (b != last) s = nf4_scale(src, &l, b), last = b;
            out[i] = nf4_values[(src[w / 2] >> (w % 2 ? 0 : 4)) & 15] * s;
        }
    }
}

void kern_nf4_dequantize_host(float *dst, const uint8_t *src, size_t n) { cpu_nf4_dequantize(dst, 1, src, n, (KernSegs){1, n, n, 0}); }
