#pragma once
#include <algorithm>
#include <vector>
#include "../../cuda_runtime.h"
#include <numeric>
namespace cub {
struct DeviceRadixSort {
    template <class K, class V, class N>
    static cudaError_t SortPairs(void *temp, size_t &bytes, const K *kin, K *kout, const V *vin, V *vout, N n,
                                 int, int, cudaStream_t stream) {
        if (!temp) { bytes = 1000; return 0; }
        EmuOp op(emu_sid(stream), "cub::DeviceRadixSort::SortPairs");
        std::vector<size_t> idx(n);
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return kin[a] < kin[b]; });
        std::vector<K> k(n); std::vector<V> v(n);
        for (size_t i = 0; i < (size_t)n; i++) k[i] = kin[idx[i]], v[i] = vin[idx[i]];
        std::copy(k.begin(), k.end(), kout); std::copy(v.begin(), v.end(), vout);
        memset(temp, 0xff, bytes);
        return 0;
    }
};
}
