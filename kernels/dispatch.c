// dispatch: kern_<op> runs the chosen device's <op>. The CPU is always built; CUDA when nvcc was.
// Allocations also pass the memory tracker here, once for both devices.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "../base/log.h"
#include "backend.h"
#ifdef FSDPC_CUDA
#include "cuda/cuda_backend.h"
#endif
#include "kernels.h"

static int on_gpu;
static char device_name[160] = "cpu";
static char device_uuid[40];

#ifdef FSDPC_CUDA
// FSDPC_GPU_TIMERS=1 (kernels.h): each timed op between two events on the compute stream
static int timers_on = -1;  // read at the first op
static int in_optimizer;    // inside the "optimizer" profiler range

// an op's timer category; -1: not timed (memory management, host copies and waits, size queries)
static int timer_category(const char *op) {
    static const char *const untimed[] = {"alloc", "free", "alloc_host", "free_host", "upload", "download", "sync",
                                          "download_async", "upload_async", "async_wait", "async_fence",
                                          "async_fence_to", "async_after_kernels",
                                          "peak_mem_mib", "mem_info", "attention_saved_floats",
                                          "attention_scratch_floats", "token_error", "rope_table", NULL};
    for (int i = 0; untimed[i]; i++)
        if (!strcmp(op, untimed[i])) return -1;
    if (!strncmp(op, "matmul", 6)) return KERN_TIMER_GEMM;
    if (!strncmp(op, "attention", 9)) return KERN_TIMER_ATTENTION;
    return KERN_TIMER_ELEMENTWISE;
}

// FSDPC_GPU_TIMERS=ops adds the table per op (timers_on 2)
static int timer_start(int *category, int *op_id, const char *op) {
    if (timers_on < 0) {
        const char *e = getenv("FSDPC_GPU_TIMERS");
        timers_on = !e || !*e || !strcmp(e, "0") ? 0 : !strcmp(e, "ops") ? 2 : 1;
    }
    if (!timers_on) return -1;
    if (*category == -2) *category = timer_category(op);
    if (*category < 0) return -1;
    if (*op_id < 0) *op_id = cuda_timer_op(op);
    return cuda_timer_start(in_optimizer && *category == KERN_TIMER_ELEMENTWISE ? KERN_TIMER_OPTIMIZER : *category,
                            *op_id);
}

static void timer_stop(int *handle) {
    if (*handle >= 0) cuda_timer_stop(*handle);
}

// the stop runs as the handle leaves scope, after the op's call (a GNU C cleanup)
#define KERN_ROUTE(ret, op, params, args)                                      \
    ret kern_##op params {                                                     \
        if (!on_gpu) return cpu_##op args;                                     \
        static int category = -2, op_id = -1;                                  \
        __attribute__((cleanup(timer_stop))) int timer = timer_start(&category, &op_id, #op); \
        return cuda_##op args;                                                 \
    }
#else
#define KERN_ROUTE(ret, op, params, args) \
    ret kern_##op params { return cpu_##op args; }
#endif
KERN_OPS(KERN_ROUTE)


// ---- allocation and the memory tracker ----
// Every live buffer by address, with its size, category and kind, in an open-addressing table
// (linear probing, backward-shift deletion) kept at most half full: frees must find their size.
typedef enum { BUF_DEVICE, BUF_HOST, BUF_PINNED } BufKind;
typedef struct {
    void *p;
    size_t bytes;
    KernMem cat;
    BufKind kind;
} MemEntry;
static MemEntry *mem_table;
static size_t mem_cap, mem_live;  // mem_cap: a power of two
// [0]: the compute device (on the CPU every buffer), [1]: a GPU run's host buffers
static double mem_now[2][KERN_MEM_NCAT], mem_peak[2][KERN_MEM_NCAT], mem_sum[2], mem_sum_peak[2];
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t mem_slot(const void *p) { return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull) & (mem_cap - 1); }

static void mem_put(MemEntry e) {
    size_t i = mem_slot(e.p);
    while (mem_table[i].p) i = (i + 1) & (mem_cap - 1);
    mem_table[i] = e;
}

static void mem_count(const MemEntry *e, double sign) {
    int h = e->kind != BUF_DEVICE && on_gpu;
    double *now = &mem_now[h][e->cat], *peak = &mem_peak[h][e->cat];
    *now += sign * (double)e->bytes;
    mem_sum[h] += sign * (double)e->bytes;
    if (*now > *peak) *peak = *now;
    if (mem_sum[h] > mem_sum_peak[h]) mem_sum_peak[h] = mem_sum[h];
}

static void *mem_add(void *p, size_t bytes, KernMem cat, BufKind kind) {
    pthread_mutex_lock(&mem_lock);
    if (2 * (mem_live + 1) > mem_cap) {
        MemEntry *old = mem_table;
        size_t old_cap = mem_cap;
        mem_cap = mem_cap ? 2 * mem_cap : 256;
        mem_table = callocCheck(mem_cap, sizeof *mem_table);
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].p) mem_put(old[i]);
        free(old);
    }
    MemEntry e = {p, bytes, cat, kind};
    mem_put(e);
    mem_live++;
    mem_count(&e, 1.0);
    pthread_mutex_unlock(&mem_lock);
    return p;
}

// Takes p out of the table; it must have come from kern_alloc_host when host, else kern_alloc.
static BufKind mem_remove(void *p, int host, const char *fn) {
    pthread_mutex_lock(&mem_lock);
    size_t i = mem_cap ? mem_slot(p) : 0;
    while (mem_cap && mem_table[i].p && mem_table[i].p != p) i = (i + 1) & (mem_cap - 1);
    if (!mem_cap || mem_table[i].p != p || (mem_table[i].kind != BUF_DEVICE) != host)
        err_fatal("%s: %p was not allocated by %s", fn, p, host ? "kern_alloc_host" : "kern_alloc");
    MemEntry e = mem_table[i];
    mem_count(&e, -1.0);
    // backward shift: later entries of the probe run move into the hole unless their home slot
    // lies cyclically after it
    for (size_t j = i;;) {
        j = (j + 1) & (mem_cap - 1);
        if (!mem_table[j].p) break;
        size_t k = mem_slot(mem_table[j].p);
        if (i <= j ? (k <= i || k > j) : (k <= i && k > j)) mem_table[i] = mem_table[j], i = j;
    }
    mem_table[i].p = NULL;
    mem_live--;
    pthread_mutex_unlock(&mem_lock);
    return e.kind;
}

#ifdef FSDPC_CUDA
#define ON_DEVICE(op) (on_gpu ? cuda_##op : cpu_##op)
#else
#define ON_DEVICE(op) cpu_##op
#endif

void *kern_alloc(size_t bytes, KernMem cat) { return mem_add(ON_DEVICE(alloc)(bytes), bytes, cat, BUF_DEVICE); }

void kern_free(void *p) {
    if (!p) return;
    mem_remove(p, 0, "kern_free");
    ON_DEVICE(free)(p);
}

void *kern_mem_track(void *p, size_t bytes, KernMem cat) { return mem_add(p, bytes, cat, BUF_DEVICE); }

void kern_mem_untrack(void *p) {
    if (p) mem_remove(p, 0, "kern_mem_untrack");
}

void *kern_alloc_host(size_t bytes, KernMem cat, int pinned) {
    // on the CPU every buffer is host memory: nothing to pin
    return pinned && on_gpu ? mem_add(ON_DEVICE(alloc_host)(bytes), bytes, cat, BUF_PINNED)
                            : mem_add(cpu_alloc_host(bytes), bytes, cat, BUF_HOST);
}

void kern_free_host(void *p) {
    if (!p) return;
    if (mem_remove(p, 1, "kern_free_host") == BUF_PINNED) ON_DEVICE(free_host)(p);
    else cpu_free_host(p);
}

const char *kern_mem_name(KernMem cat) {
    static const char *const names[KERN_MEM_NCAT] = {"params", "gathered", "grads", "optimizer", "activations", "buffers", "staging"};
    return names[cat];
}

void kern_mem_stats(KernMemStats *s) {
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&mem_lock);
    for (int c = 0; c < KERN_MEM_NCAT; c++) s->now[c] = mem_now[0][c], s->peak[c] = mem_peak[0][c];
    s->total = mem_sum[0], s->total_peak = mem_sum_peak[0];
    s->host = mem_sum[1], s->host_peak = mem_sum_peak[1];
    pthread_mutex_unlock(&mem_lock);
    ON_DEVICE(mem_held)(&s->held, &s->held_peak, &s->cached);
}

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
        const char *why = cuda_bind(dev, name, sizeof name, device_uuid, sizeof device_uuid);
        if (why) return why;
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

static int compute_bf16;

void kern_set_compute_bf16(int on) {
    compute_bf16 = on;
    cpu_set_compute_bf16(on && !on_gpu);
#ifdef FSDPC_CUDA
    cuda_set_compute(on ? COMPUTE_BF16 : COMPUTE_FP32);
    cuda_set_params_bf16(on);
    cuda_set_acts_bf16(on);
#endif
}

void kern_params_bf16_copy(const float *params, const uint16_t *copy, size_t n) {
    if (!on_gpu) cpu_params_bf16_copy(params, copy, n);
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

void kern_plan_attention(KernAttention want, int bf16, int head_dim) {
#ifdef FSDPC_CUDA
    if (on_gpu) cuda_attention_plan(want, bf16, head_dim);
#else
    (void)want, (void)bf16, (void)head_dim;
#endif
}

size_t kern_ring_scratch_bytes(int B, int T, int H, int KV, int hd, int docs, int window, int fwd_only) {
#ifdef FSDPC_CUDA
    if (on_gpu) return cuda_ring_scratch_bytes(B, T, H, KV, hd, docs, window, fwd_only);
#else
    (void)B, (void)T, (void)H, (void)KV, (void)hd, (void)docs, (void)window, (void)fwd_only;
#endif
    return 0;  // the CPU's part kernels need none
}

const char *kern_attention_kernel(void) {
#ifdef FSDPC_CUDA
    if (on_gpu) return cuda_attention_kernel();
#endif
    return "cpu";
}

int kern_params_bf16(void) { return on_gpu && compute_bf16; }

const void *kern_param_at(const void *p, size_t i) {
    return (const char *)p + i * (kern_params_bf16() ? sizeof(uint16_t) : sizeof(float));
}

int kern_acts_bf16(void) { return on_gpu && compute_bf16; }

size_t kern_act_bytes(void) { return kern_acts_bf16() ? sizeof(uint16_t) : sizeof(float); }

void *kern_act_at(const void *p, size_t i) { return (char *)p + i * kern_act_bytes(); }

void kern_act_download(float *host_dst, const void *src, size_t n) {
    kern_download(host_dst, src, n * kern_act_bytes());
    if (!kern_acts_bf16()) return;
    // widen in place from the back: element i's 2 bytes sit in the first half, before float i
    for (size_t i = n; i-- > 0;) {
        uint16_t b;
        memcpy(&b, (const char *)host_dst + 2 * i, sizeof b);
        uint32_t u = (uint32_t)b << 16;
        memcpy(&host_dst[i], &u, sizeof u);
    }
}

void kern_adamw_host(float *p, uint16_t *p_bf16, const float *g, float *m, float *v, size_t n, const KernAdamW *h) {
    cpu_adamw(p, p_bf16, g, m, v, n, h);
}

const char *kern_init(int num_threads) { return cpu_init(num_threads); }  // the host side runs on CPU threads either way
int kern_num_threads(void) { return cpu_num_threads(); }
const char *kern_cpu_isa(void) {
    static char line[400];
    snprintf(line, sizeof line, "%s%s", cpu_isa_line(), cpu_gemm_line());
    return line;
}

int kern_on_gpu(void) { return on_gpu; }

size_t kern_matmul_scratch_bytes(size_t rows, size_t widest, size_t widest_in, int T, int hd) {
    return on_gpu ? 0 : cpu_gemm_scratch_bytes(rows, widest, widest_in, T, hd, kern_num_threads());
}

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
#ifdef FSDPC_CUDA
    // dense bf16 tensor-core peaks. Hopper's differ by form factor: SXM 989 TFLOP/s (1980 MHz
    // boost), PCIe 756 (114 SMs, 1755 MHz), NVL 835. Names say "PCIe" or "NVL", but an SXM's
    // says only its memory ("H100 80GB HBM3"), so the SM clock settles the rest.
    if (strstr(device_name, "H100") || strstr(device_name, "H200") || strstr(device_name, "H800")) {
        if (strstr(device_name, "NVL")) return 835e12;
        if (strstr(device_name, "PCIe") || cuda_sm_clock_mhz() < 1900) return 756e12;
        return 989e12;
    }
#endif
    if (strstr(device_name, "A100") || strstr(device_name, "A800")) return 312e12;
    return 0.0;
}

#ifdef FSDPC_CUDA
#include <nvtx3/nvToolsExt.h>
// which open ranges are "optimizer" ones, innermost last: its end is a step boundary for the timers
static unsigned long long optimizer_ranges;
static int range_depth;

void kern_range_push(const char *name) {
    if (!on_gpu) return;
    nvtxRangePushA(name);
    const int opt = !strcmp(name, "optimizer");
    if (range_depth < 64) optimizer_ranges = optimizer_ranges << 1 | (unsigned long long)opt;
    range_depth++;
    in_optimizer += opt;
}
void kern_range_pop(void) {
    if (!on_gpu) return;
    nvtxRangePop();
    if (range_depth-- > 64) return;
    if (optimizer_ranges & 1) {
        in_optimizer--;
        if (timers_on > 0) cuda_timer_mark();
    }
    optimizer_ranges >>= 1;
}

void kern_timers_report(void) {
    if (!on_gpu || timers_on <= 0) return;
    double ms[KERN_TIMER_N] = {0};
    const int steps = cuda_timer_totals(ms) - 1;  // marks bound the steps after the first
    if (steps < 1) return;
    const double span = ms[KERN_TIMER_WAIT];  // cuda_timer_totals gives the marked span there
    double busy = 0;
    for (int i = 0; i < KERN_TIMER_WAIT; i++) busy += ms[i];
    ms[KERN_TIMER_WAIT] = span > busy ? span - busy : 0;
    static const char *const names[KERN_TIMER_N] = {"gemm", "attention", "elementwise", "optimizer",
                                                    "waiting (collectives, copies, host)"};
    char line[512];
    int len = snprintf(line, sizeof line, "gpu time per step (CUDA events, %d steps after the first): %.3f ms =", steps,
                       span / steps);
    for (int i = 0; i < KERN_TIMER_N && len < (int)sizeof line; i++)
        len += snprintf(line + len, sizeof line - len, "%s %s %.3f ms (%.1f%%)", i ? "," : "", names[i], ms[i] / steps,
                        span > 0 ? 100 * ms[i] / span : 0.0);
    log_msg("%s\n", line);
    if (timers_on < 2) return;
    // FSDPC_GPU_TIMERS=ops: each op's time per step, the longest first, as a share of the span
    double op_ms[KERN_TIMER_OPS];
    long calls[KERN_TIMER_OPS];
    const char *op_names[KERN_TIMER_OPS];
    const int n = cuda_timer_ops(op_ms, calls, op_names);
    int order[KERN_TIMER_OPS];
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && op_ms[order[j - 1]] < op_ms[i]; j--) order[j] = order[j - 1];
        order[j] = i;
    }
    log_msg("gpu time per op and step (CUDA events, %d steps after the first):\n", steps);
    for (int k = 0; k < n; k++) {
        const int i = order[k];
        log_msg("  %-24s %9.3f ms %6.1f%% %8.1f calls\n", op_names[i], op_ms[i] / steps, span > 0 ? 100 * op_ms[i] / span : 0.0,
                (double)calls[i] / steps);
    }
}
#else
void kern_range_push(const char *name) { (void)name; }
void kern_range_pop(void) {}
void kern_timers_report(void) {}
#endif
const char *kern_device_name(void) { return device_name; }

const char *kern_library_versions(void) {
#ifdef FSDPC_CUDA
    static char out[1024];
    snprintf(out, sizeof out, "CUDA backend: built in\n%s", cuda_library_versions());
    return out;
#else
    return "CUDA backend: none (a CPU-only build)\n";
#endif
}

// Each query's count of keys seen (kpos increasing, so a prefix): zero up to q0, then either nk for
// every query (a rectangle) or one more for each (causal by index).
int kern_block_of(KernBlock *blk, const int32_t *qpos, const int32_t *kpos, int Tq, int Tk) {
    KernBlock b = {0, 0, 0, 0};
    int rect = 1, causal = 1;
    for (int i = 0; i < Tq; i++) {
        int lo = 0, hi = Tk;  // the keys at positions <= qpos[i]
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (kpos[mid] <= qpos[i]) lo = mid + 1;
            else hi = mid;
        }
        if (!b.nq && !lo) {
            b.q0 = i + 1;
            continue;
        }
        if (!b.nq++) b.nk = lo;
        rect &= lo == b.nk;
        causal &= lo == b.nq;
    }
    b.causal = !rect && causal;
    if (!b.nq || !(rect || causal)) return 0;
    if (b.causal) b.nk = b.nq;
    *blk = b;
    return 1;
}
