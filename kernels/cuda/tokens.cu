// tokens: the batch's ids checked against the vocabulary on the device (kernels.h, "token ids").
// A bad id is replaced by 0 and its place noted with an integer atomicMin, so the note is the
// first bad place whatever the thread order; the host fetches it once per step.
#include "common.cuh"

namespace {

constexpr int kThreads = 256;

// ids (n): tokens then targets, one index space; tokens in [0, V), targets below V
__global__ void tokens_check_kernel(int32_t *tokens, int32_t *targets, int N, int V, long long base,
                                    unsigned long long *note) {
    const long long n = targets ? 2LL * N : N;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        int32_t *t = i < N ? &tokens[i] : &targets[i - N];
        if (*t < V && (*t >= 0 || i >= N)) continue;  // a negative target bears no loss: legal
        atomicMin(note, (unsigned long long)(base + i) << 32 | (uint32_t)*t);
        *t = 0;
    }
}

}  // namespace

extern "C" {

void cuda_tokens_check(int32_t *tokens, int32_t *targets, int N, int V, long long base) {
    if (N <= 0) return;
    tokens_check_kernel<<<grid_for((targets ? 2 : 1) * (size_t)N, kThreads), kThreads, 0, cuda_stream()>>>(
        tokens, targets, N, V, base, &cuda_ctx.result_dev->token_note);
    cudaCheckLaunch();
}

int cuda_token_error(long long *index, int *id) {
    cudaCheck(cudaMemcpyAsync(&cuda_ctx.result_host->token_note, &cuda_ctx.result_dev->token_note,
                              sizeof cuda_ctx.result_host->token_note, cudaMemcpyDeviceToHost, cuda_stream()));
    cudaCheck(cudaStreamSynchronize(cuda_stream()));
    const unsigned long long note = cuda_ctx.result_host->token_note;
    if (note == ~0ull) return 0;
    *index = (long long)(note >> 32), *id = (int)(uint32_t)note;
    cuda_ctx.result_host->token_note = ~0ull;
    cudaCheck(cudaMemsetAsync(&cuda_ctx.result_dev->token_note, 0xff, sizeof note, cuda_stream()));
    return 1;
}

}  // extern "C"
