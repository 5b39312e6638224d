// dispatch: kern_<op> runs the chosen device's <op>. The CPU is always built; CUDA when nvcc was.
#include <stdio.h>
#include <string.h>

#include "backend.h"
#ifdef FSDPC_CUDA
#include "cuda/cuda_backend.h"
#endif
#include "kernels.h"

static int on_gpu;
static char device_name[160] = "cpu";
static char device_uuid[40];

#ifdef FSDPC_CUDA
#define KERN_ROUTE(ret, op, params, args) \
    ret kern_##op params { return on_gpu ? cuda_##op args : cpu_##op args; }
#else
#define KERN_ROUTE(ret, op, params, args) \
    ret kern_##op params { return cpu_##op args; }
#endif
KERN_OPS(KERN_ROUTE)

const char *kern_device_uuid(void) { return device_uuid; }

const char *kern_select_device(KernDevice want, int local_rank, int local_world) {
    on_gpu = 0;
    device_uuid[0] = 0;
    snprintf(device_name, sizeof device_name, "cpu");
    if (want == KERN_DEVICE_CPU) return NULL;
#ifdef FSDPC_CUDA
    int n = cuda_device_count();
    if (n > 0) {
        static char err[240];
        // one visible GPU per rank (CUDA_VISIBLE_DEVICES per rank, srun --gpus-per-task/--gpu-bind):
        // each rank takes the one it sees, and the caller checks that they differ
        if (local_world > n && n > 1) {
            snprintf(err, sizeof err,
                     "%d ranks on this node but %d GPU(s) visible: each rank needs its own GPU (start at most %d ranks "
                     "per node, make each rank see one GPU, or pass --device cpu)", local_world, n, n);
            return err;
        }
        int dev = n == 1 ? 0 : local_rank;
        char name[128];
        cuda_bind(dev, name, sizeof name, device_uuid, sizeof device_uuid);
        snprintf(device_name, sizeof device_name, "cuda:%d (%s)", dev, name);
        on_gpu = 1;
        return NULL;
    }
    if (want == KERN_DEVICE_CUDA) return "--device cuda: no CUDA GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)";
#else
    (void)local_rank, (void)local_world;
    if (want == KERN_DEVICE_CUDA) return "--device cuda: this build has no CUDA backend (rebuild with nvcc on PATH, CUDA=1)";
#endif
    return NULL;  // auto without a GPU: the CPU
}

void kern_set_compute_bf16(int on) {
#ifdef FSDPC_CUDA
    cuda_set_compute(on ? COMPUTE_BF16 : COMPUTE_FP32);
#else
    (void)on;
#endif
}

const char *kern_select_attention(KernAttention want, int bf16, int head_dim, int *failed) {
    *failed = 0;
#ifdef FSDPC_CUDA
    if (on_gpu) return cuda_attention_select(want, bf16, head_dim, failed);
#else
    (void)bf16, (void)head_dim;
#endif
    if (want != KERN_ATTENTION_CUDNN) return NULL;  // the CPU kernel, as always
    *failed = 1;
    return "--attention cudnn: cuDNN runs on a GPU and this run is on the CPU (--device cuda on a GPU machine, or "
           "--attention auto|native)";
}

void kern_adamw_host(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2,
                     float eps, float wd, int step) {
    cpu_adamw(p, g, m, v, n, lr, beta1, beta2, eps, wd, step);
}

void kern_init(int num_threads) { cpu_init(num_threads); }  // the host side runs on CPU threads either way
int kern_num_threads(void) { return cpu_num_threads(); }

int kern_on_gpu(void) { return on_gpu; }

const char *kern_size_as_gpu(void) {
#ifdef FSDPC_CUDA
    on_gpu = 1;  // routes the size queries to CUDA; the planner never runs a kernel after this
    return NULL;
#else
    return "this build has no CUDA backend, whose buffers a GPU plan counts (rebuild with nvcc on PATH, CUDA=1), "
           "or plan a CPU run with --device cpu";
#endif
}

double kern_peak_flops(void) {
    if (!on_gpu) return 0.0;
    // dense bf16 tensor-core peaks (SXM parts)
    if (strstr(device_name, "H100") || strstr(device_name, "H200") || strstr(device_name, "H800")) return 989e12;
    if (strstr(device_name, "A100") || strstr(device_name, "A800")) return 312e12;
    return 0.0;
}

#ifdef FSDPC_CUDA
#include <nvtx3/nvToolsExt.h>
void kern_range_push(const char *name) {
    if (on_gpu) nvtxRangePushA(name);
}
void kern_range_pop(void) {
    if (on_gpu) nvtxRangePop();
}
#else
void kern_range_push(const char *name) { (void)name; }
void kern_range_pop(void) {}
#endif
const char *kern_device_name(void) { return device_name; }
