// elementwise: threading setup, SwiGLU, GELU, bias, embedding, positions, dropout, cross-entropy,
// vector ops, AdamW and bf16.
#define _GNU_SOURCE  // RTLD_DEFAULT
#include <cblas.h>
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../base/half.h"
#include "../../base/limits.h"
#include "../../base/log.h"
#include "../../base/rng.h"
#include "../backend.h"
#include "cpu_common.h"

// ---- threads ----

// OpenBLAS (its OpenMP build) maps buffers of this size from a table it never unmaps: one per
// thread it may run (at load, as many as OMP_NUM_THREADS or the cores say, up to its 64; more
// when openblas_set_num_threads raises the count), and one per GEMM running at once, which the CPU
// kernels call from every thread of a parallel region. When a mapping fails it retries for ever.
// 128 MiB is OpenBLAS 0.3's BUFFER_SIZE on x86-64 (32 << 22); its table holds 2 x 64 buffers.
#define CPU_BLAS_BUFFER ((size_t)128 << 20)
enum { BLAS_MAX_THREADS = 64, BLAS_TABLE = 2 * BLAS_MAX_THREADS };
#define CPU_LOAD_SLACK ((size_t)32 << 20)  // what the other libraries' constructors map
// in the environment of a start run again with OMP_NUM_THREADS=1 that the user had not set
#define CPU_REEXEC_MARK "FSDPC_OMP_NUM_THREADS_ADDED"

static char *user_omp_threads;  // OMP_NUM_THREADS as given, while the libraries load with 1
static int omp_threads_swapped;  // 1: changed in place (user_omp_threads holds it), 2: added by a run again

// The program again, with OMP_NUM_THREADS=1 added to its environment; returns only when the exec fails.
static void cpu_reexec_one_thread(char **argv, char **envp) {
    size_t n = 0;
    while (envp[n]) n++;
    char **env = malloc((n + 3) * sizeof *env);
    if (!env) return;
    memcpy(env, envp, n * sizeof *env);
    env[n] = "OMP_NUM_THREADS=1";
    env[n + 1] = CPU_REEXEC_MARK "=1";
    env[n + 2] = NULL;
    execve("/proc/self/exe", argv, env);
    free(env);
}

// Runs before any library's constructor (the executable's preinit array). When the buffers
// OpenBLAS's constructor would map do not fit under ulimit -v / -d, the libraries load with
// OMP_NUM_THREADS=1 instead: a value the user set is changed in place (a variable added now would
// be dropped when libc starts), an unset one is added by running the program again. cpu_init
// raises the count once it has checked that the buffers fit. A limit too low even for one
// thread's buffers is an error line here, instead of OpenBLAS spinning before main.
static void cpu_preinit(int argc, char **argv, char **envp) {
    (void)argc;
    environ = envp;  // glibc sets it only after the preinit functions
    const char *v = getenv("OMP_NUM_THREADS");
    long n = v && atol(v) > 0 ? atol(v) : sysconf(_SC_NPROCESSORS_CONF);
    n = n < 1 ? 1 : n > BLAS_MAX_THREADS ? BLAS_MAX_THREADS : n;
    if (getenv(CPU_REEXEC_MARK)) {
        omp_threads_swapped = 2;
    } else if (n > 1 && limits_can_map((size_t)(n + 1) * CPU_BLAS_BUFFER + CPU_LOAD_SLACK) != 0) {
        if (v && (user_omp_threads = strdup(v)) && setenv("OMP_NUM_THREADS", "1", 1) == 0) omp_threads_swapped = 1;
        else if (!v) cpu_reexec_one_thread(argv, envp);
    }
    size_t need = (size_t)(omp_threads_swapped ? 2 : n + 1) * CPU_BLAS_BUFFER + CPU_LOAD_SLACK;
    int e = limits_can_map(need);
    double room = limits_room();
    if (e)
        limits_fail_early("cannot map the %zu MiB OpenBLAS needs at start-up under %s: %s (%.0f MiB of address space left): raise "
                          "the limit", need >> 20, limits_summary()[0] ? limits_summary() : "this system's limits", strerror(e),
                          room > 0 ? room / (1 << 20) : 0.0);
}
__attribute__((section(".preinit_array"), used)) static void (*const cpu_preinit_entry)(int, char **, char **) = cpu_preinit;

// After the libraries' constructors, before main: the environment as the user gave it, for
// fsdpc's default thread count, and OpenMP's count to match.
__attribute__((constructor)) static void cpu_restore_threads_env(void) {
    if (!omp_threads_swapped) return;
    if (user_omp_threads) setenv("OMP_NUM_THREADS", user_omp_threads, 1);
    else unsetenv("OMP_NUM_THREADS");
    unsetenv(CPU_REEXEC_MARK);
    int n = user_omp_threads ? atoi(user_omp_threads) : 0;
    omp_set_num_threads(n > 0 ? n : omp_get_num_procs());
    free(user_omp_threads);
    user_omp_threads = NULL;
}

// The stack OpenMP gives each of its threads: OMP_STACKSIZE (or GOMP_STACKSIZE), a size with an
// optional B/K/M/G suffix, kilobytes without; else the threads' default. 0: the default.
static size_t omp_stack_bytes(void) {
    static const char *const vars[] = {"OMP_STACKSIZE", "GOMP_STACKSIZE"};
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        if (!v) continue;
        unsigned long long n = strtoull(v, &end, 10);
        while (isspace((unsigned char)*end)) end++;
        int shift = !*end ? 10 : toupper((unsigned char)*end) == 'B' ? 0 : toupper((unsigned char)*end) == 'K' ? 10
                    : toupper((unsigned char)*end) == 'M' ? 20 : toupper((unsigned char)*end) == 'G' ? 30 : -1;
        if (end != v && shift >= 0 && n < (1ULL << (63 - shift))) return (size_t)(n << shift);
    }
    return 0;
}

static pthread_mutex_t probe_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t probe_cv = PTHREAD_COND_INITIALIZER;
static int probe_done;

static void *probe_thread(void *arg) {
    (void)arg;
    pthread_mutex_lock(&probe_mu);
    while (!probe_done) pthread_cond_wait(&probe_cv, &probe_mu);
    pthread_mutex_unlock(&probe_mu);
    return NULL;
}

// Whether n threads with OpenMP's stacks can run, while `reserve` more bytes (OpenBLAS's new
// buffers) are mapped: starts n - 1 threads that wait, all alive at once, then ends them. NULL, or
// why not into msg. glibc keeps the ended threads' stacks, so OpenMP's team then starts on them.
static const char *threads_fit(int n, size_t reserve, char *msg, size_t len) {
    pthread_attr_t attr;
    size_t stack = omp_stack_bytes();
    pthread_attr_init(&attr);
    if (stack) pthread_attr_setstacksize(&attr, stack);
    pthread_attr_getstacksize(&attr, &stack);
    void *held = reserve ? mmap(NULL, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : NULL;
    int err = held == MAP_FAILED ? errno : 0, started = 0;
    pthread_t *t = err ? NULL : calloc((size_t)n, sizeof *t);
    if (!err && !t) err = ENOMEM;
    while (!err && started < n - 1 && !(err = pthread_create(&t[started], &attr, probe_thread, NULL))) started++;
    pthread_mutex_lock(&probe_mu);
    probe_done = 1;
    pthread_cond_broadcast(&probe_cv);
    pthread_mutex_unlock(&probe_mu);
    for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
    probe_done = 0;
    free(t);
    if (held && held != MAP_FAILED) munmap(held, reserve);
    pthread_attr_destroy(&attr);
    if (!err) return NULL;
    double room = limits_room();
    const char *lim = limits_summary();
    char left[64] = "";
    if (room >= 0) snprintf(left, sizeof left, "; %.0f MiB of address space left", room / (1 << 20));
    snprintf(msg, len, "cannot start %d CPU threads%s%s: %s (each needs a stack of %zu MiB%s%s): lower --num_threads or "
             "OMP_NUM_THREADS, or raise the limit", n, lim[0] ? " under " : "", lim, strerror(err), stack >> 20,
             reserve ? " and two 128 MiB OpenBLAS buffers" : "", left);
    return msg;
}

// OpenBLAS's OpenMP build asks OpenMP for a team of its thread count and spins until every member
// has joined: a team given fewer threads never finishes its GEMM. OMP_DYNAMIC=true (teams sized by
// the load), OMP_MAX_ACTIVE_LEVELS=0 (every team of one thread) and an OMP_THREAD_LIMIT below the
// count do that, so they are overridden here, each with one line; other OpenMP and OpenBLAS
// variables are honoured (binding, waiting, stacks) or replaced by --num_threads (thread counts).
static int cpu_fix_omp_env(int num_threads) {
    if (omp_get_dynamic()) {
        omp_set_dynamic(0);
        log_msg("fsdpc: OMP_DYNAMIC=%s overridden: teams of a fixed size (OpenBLAS waits for every thread it asks for)\n",
                getenv("OMP_DYNAMIC") ? getenv("OMP_DYNAMIC") : "true");
    }
    if (omp_get_max_active_levels() < 1) {
        omp_set_max_active_levels(1);
        log_msg("fsdpc: OMP_MAX_ACTIVE_LEVELS=%s overridden with 1: fsdpc's threads need one active level\n",
                getenv("OMP_MAX_ACTIVE_LEVELS") ? getenv("OMP_MAX_ACTIVE_LEVELS") : "0");
    }
    int limit = omp_get_thread_limit();  // fixed at start-up: a count above it is lowered instead
    if (limit > 0 && num_threads > limit) {
        log_msg("fsdpc: %d thread(s) lowered to OMP_THREAD_LIMIT=%d\n", num_threads, limit);
        num_threads = limit;
    }
    static const char *const blas_vars[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS"};
    static int said;  // cpu_init may run again (plan)
    for (int i = 0; i < 2 && !said; i++) {
        const char *v = getenv(blas_vars[i]);
        if (v && atoi(v) != num_threads)
            log_msg("fsdpc: %s=%s overridden: OpenBLAS runs this rank's %d thread(s)\n", blas_vars[i], v, num_threads);
    }
    said = 1;
    return num_threads;
}

const char *cpu_init(int num_threads) {
    static char msg[600];
    static int mapped;  // OpenBLAS buffers mapped so far (it keeps them)
    if (!mapped) mapped = openblas_get_num_threads();
    if (num_threads <= 0) num_threads = omp_get_max_threads();
    if (num_threads > CPU_MAX_THREADS) num_threads = CPU_MAX_THREADS;
    num_threads = cpu_fix_omp_env(num_threads);
    int want = 2 * num_threads;  // the threads' own, and one per GEMM a thread runs (OpenBLAS may cap the threads lower)
    const char *why = threads_fit(num_threads, want > mapped ? (size_t)(want - mapped) * CPU_BLAS_BUFFER : 0, msg, sizeof msg);
    if (why) return why;
    omp_set_num_threads(num_threads);
    openblas_set_num_threads(num_threads);
    // Map the GEMMs' buffers now, where they were just shown to fit: taken from OpenBLAS's table
    // and given back, they stay mapped, so no GEMM later maps one (and spins if the limit is
    // reached by then). Through dlsym: the two functions are exported but not in cblas.h.
    void *(*take)(int) = (void *(*)(int))dlsym(RTLD_DEFAULT, "blas_memory_alloc");
    void (*give)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "blas_memory_free");
    int threads = openblas_get_num_threads(), gemms = threads;  // the threads it runs at most, each calling GEMM
    if (gemms > BLAS_TABLE - 2 - threads) gemms = BLAS_TABLE - 2 - threads;  // a full table is an error it prints
    if (take && give && gemms > 0 && threads + gemms > mapped) {
        void **b = calloc((size_t)gemms, sizeof *b);
        for (int i = 0; b && i < gemms; i++) b[i] = take(0);
        for (int i = 0; b && i < gemms; i++)
            if (b[i]) give(b[i]);
        free(b);
    }
    if (want > mapped) mapped = want;
    int started = 0;  // a body the compiler keeps: the team starts here, where it was just shown to fit
#pragma omp parallel
    {
#pragma omp atomic write
        started = 1;
    }
    (void)started;
    return NULL;
}

int cpu_num_threads(void) { return omp_get_max_threads(); }

// The calling thread's share [lo, hi) of n items: fixed contiguous blocks by thread number, so
// reductions over them can be combined in thread order and do not depend on timing.
static void ew_thread_range(size_t n, size_t *lo, size_t *hi) {
    const size_t tid = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
    *lo = n * tid / nt;
    *hi = n * (tid + 1) / nt;
}

// The calling thread's columns [lo, hi) of D: whole 64-byte lines (16 floats), so no two threads
// write one line. A thread that owns a column and walks the rows in order sums it as a serial
// loop would: the result depends neither on timing nor on the thread count.
static void ew_col_slice(int D, size_t *lo, size_t *hi) {
    ew_thread_range(((size_t)D + 15) / 16, lo, hi);
    *lo *= 16;
    *hi = *hi * 16 < (size_t)D ? *hi * 16 : (size_t)D;
}

// ---- SwiGLU ----

void cpu_swiglu_fwd(void *h_, const void *gu_, int N, int F) {
    float *h = h_;  // the CPU's activations are fp32
    const float *gu = gu_;
#pragma omp parallel for schedule(static) if ((size_t)N * F >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *gate = gu + (size_t)n * 2 * F, *up = gate + F;
        float *o = h + (size_t)n * F;
#pragma omp simd
        for (int j = 0; j < F; j++) o[j] = gate[j] / (1.0f + cpu_expf(-gate[j])) * up[j];
    }
}

void cpu_swiglu_bwd(void *dgu_, const void *dh_, const void *gu_, int N, int F) {
    float *dgu = dgu_;  // the CPU's activations are fp32
    const float *dh = dh_;
    const float *gu = gu_;
#pragma omp parallel for schedule(static) if ((size_t)N * F >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *gate = gu + (size_t)n * 2 * F, *up = gate + F, *d = dh + (size_t)n * F;
        float *dgate = dgu + (size_t)n * 2 * F, *dup = dgate + F;
#pragma omp simd
        for (int j = 0; j < F; j++) {
            const float g = gate[j], sig = 1.0f / (1.0f + cpu_expf(-g));
            // d silu(g) / dg = sig * (1 + g * (1 - sig))
            dgate[j] = d[j] * up[j] * (sig * (1.0f + g * (1.0f - sig)));
            dup[j] = d[j] * (g * sig);
        }
    }
}

// ---- GELU ----
// The tanh form: 0.5 (1 + tanh(u)) = sigmoid(2u), so gelu(x) = x / (1 + exp(-2u)): no tanh (glibc's
// does not vectorise) and no cancellation in 1 + tanh(u) for very negative u.
#define GELU_C 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_A 0.044715f
#define GELU_R 0.7071067811865476f  // 1 / sqrt(2)
#define GELU_P 0.3989422804014327f  // 1 / sqrt(2 pi)

void cpu_gelu_fwd(void *out_, const void *inp_, size_t n, KernGelu form) {
    float *out = out_;  // the CPU's activations are fp32
    const float *inp = inp_;
    if (form == KERN_GELU_ERF) {
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) out[i] = 0.5f * inp[i] * (1.0f + erff(inp[i] * GELU_R));
        return;
    }
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i], u = GELU_C * (x + GELU_A * x * x * x);
        out[i] = x / (1.0f + cpu_expf(-2.0f * u));
    }
}

void cpu_gelu_bwd(void *dinp_, const void *dout_, const void *inp_, size_t n, KernGelu form) {
    float *dinp = dinp_;  // the CPU's activations are fp32
    const float *dout = dout_;
    const float *inp = inp_;
    if (form == KERN_GELU_ERF) {
        // d/dx x Phi(x) = Phi(x) + x phi(x)
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            const float x = inp[i];
            dinp[i] = dout[i] * (0.5f * (1.0f + erff(x * GELU_R)) + x * GELU_P * expf(-0.5f * x * x));
        }
        return;
    }
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i], u = GELU_C * (x + GELU_A * x * x * x);
        const float s = 1.0f / (1.0f + cpu_expf(-2.0f * u)), du = GELU_C * (1.0f + 3.0f * GELU_A * x * x);
        // d/dx x sigmoid(2u) = s + 2 x s (1 - s) du
        dinp[i] = dout[i] * (s + 2.0f * x * s * (1.0f - s) * du);
    }
}

// ---- bias ----

void cpu_bias_add(void *out_, KernDtype dt, const void *bv, int N, int D) {
    float *out = out_;  // the CPU's activations are fp32
    (void)dt;
    const float *b = bv;  // the CPU's parameters are fp32
#pragma omp parallel for schedule(static) if ((size_t)N * D >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * D;
#pragma omp simd
        for (int j = 0; j < D; j++) o[j] += b[j];
    }
}

void cpu_add_cols(void *out_, KernDtype dt, int ld, int c0, const float *src, int N, int C, float s) {
    float *out = out_;  // the CPU's activations are fp32
    (void)dt;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * ld + c0;
        const float *x = src + (size_t)n * C;
#pragma omp simd
        for (int j = 0; j < C; j++) o[j] += s * x[j];
    }
}

void cpu_get_cols(float *dst, const void *src_, KernDtype dt, int ld, int c0, int N, int C, float s) {
    const float *src = src_;
    (void)dt;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = src + (size_t)n * ld + c0;
        float *o = dst + (size_t)n * C;
#pragma omp simd
        for (int j = 0; j < C; j++) o[j] = s * x[j];
    }
}

void cpu_bias_bwd(float *db, const void *dout_, KernDtype dt, int N, int D) {
    const float *dout = dout_;  // the CPU's activations are fp32
    (void)dt;
    // column slices, rows in order: the serial sum whatever the thread count
#pragma omp parallel if ((size_t)N * D >= CPU_PAR_MIN)
    {
        size_t lo, hi;
        ew_col_slice(D, &lo, &hi);
        for (int n = 0; n < N; n++) {
            const float *src = dout + (size_t)n * D;
#pragma omp simd
            for (size_t j = lo; j < hi; j++) db[j] += src[j];
        }
    }
}

// ---- token ids ----

static long long token_note_index = -1;
static int token_note_id;

void cpu_tokens_check(int32_t *tokens, int32_t *targets, int N, int V, long long base) {
    for (long long i = 0; i < (targets ? 2LL : 1LL) * N; i++) {
        int32_t *t = i < N ? &tokens[i] : &targets[i - N];
        if (*t < V && (*t >= 0 || i >= N)) continue;  // a negative target bears no loss: legal
        if (token_note_index < 0 || base + i < token_note_index) token_note_index = base + i, token_note_id = *t;
        *t = 0;
    }
}

int cpu_token_error(long long *index, int *id) {
    if (token_note_index < 0) return 0;
    *index = token_note_index, *id = token_note_id;
    token_note_index = -1;
    return 1;
}

// ---- embedding ----

void cpu_embedding_fwd(float *out, const int32_t *tokens, const void *wtev, int N, int D) {
    const float *wte = wtev;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * D, wte + (size_t)tokens[n] * D, sizeof(float) * D);
}

// whether token t falls in the rows [v0, v0 + Vl) of a vocabulary-parallel part (in 64 bits: no overflow)
static inline int in_part(int32_t t, int v0, int Vl) { return (int64_t)t - v0 >= 0 && (int64_t)t - v0 < Vl; }

// dwte (Vl, D) += the rows of dout whose token lies in [v0, v0 + Vl), at row token - v0
static void embedding_scatter(float *dwte, const float *dout, const int32_t *tokens, int N, int D, int v0, int Vl) {
    // Each thread owns a slice of the D columns and walks all rows in order: repeated tokens
    // never race and the sums are in row order.
#pragma omp parallel
    {
        size_t lo, hi;
        ew_col_slice(D, &lo, &hi);
        for (int n = 0; n < N; n++) {
            if (!in_part(tokens[n], v0, Vl)) continue;
            const float *src = dout + (size_t)n * D;
            float *dst = dwte + (size_t)(tokens[n] - v0) * D;
#pragma omp simd
            for (size_t j = lo; j < hi; j++) dst[j] += src[j];
        }
    }
}

void cpu_embedding_bwd(float *dwte, const float *dout, const int32_t *tokens, int N, int D) {
    embedding_scatter(dwte, dout, tokens, N, D, 0, INT32_MAX);
}

void cpu_embedding_part_fwd(float *out, const int32_t *tokens, const void *wte_part, int N, int D, int v0, int Vl) {
    const float *wte = wte_part;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * D;
        if (in_part(tokens[n], v0, Vl)) memcpy(o, wte + (size_t)(tokens[n] - v0) * D, sizeof(float) * D);
        else memset(o, 0, sizeof(float) * D);
    }
}

void cpu_embedding_part_bwd(float *dwte_part, const float *dout, const int32_t *tokens, int N, int D, int v0, int Vl) {
    embedding_scatter(dwte_part, dout, tokens, N, D, v0, Vl);
}

// ---- learned positions ----

void cpu_positions_fwd(float *out, const void *wpev, int B, int T, int D, int pos0) {
    const float *wpe = wpev;
    const long rows = (long)B * T;
#pragma omp parallel for schedule(static) if ((size_t)rows * D >= CPU_PAR_MIN)
    for (long bt = 0; bt < rows; bt++) {
        float *o = out + (size_t)bt * D;
        const float *w = wpe + (size_t)(pos0 + bt % T) * D;
#pragma omp simd
        for (int j = 0; j < D; j++) o[j] += w[j];
    }
}

void cpu_positions_bwd(float *dwpe, const float *dout, int B, int T, int D) {
    // every (t, j) is one thread's, summed over b in order (as the GPU does)
#pragma omp parallel for schedule(static) if ((size_t)B * T * D >= CPU_PAR_MIN)
    for (int t = 0; t < T; t++) {
        float *d = dwpe + (size_t)t * D;
        for (int b = 0; b < B; b++) {
            const float *src = dout + ((size_t)b * T + t) * D;
#pragma omp simd
            for (int j = 0; j < D; j++) d[j] += src[j];
        }
    }
}

// ---- dropout ----

void cpu_dropout(float *x, size_t e0, size_t n, size_t M, float p, uint64_t key, uint64_t sample0) {
    if (p == 0.0f || !n) return;
    const uint32_t thr = rng_dropout_threshold(p);
    const float scale = 1.0f / (1.0f - p);
    // each thread a contiguous range of the elements, walked as row segments: one seed per segment
#pragma omp parallel if (n >= CPU_PAR_MIN)
    {
        size_t lo, hi;
        ew_thread_range(n, &lo, &hi);
        lo += e0;
        hi += e0;
        while (lo < hi) {
            const size_t b = lo / M, i0 = lo - b * M, i1 = hi - b * M < M ? hi - b * M : M;
            const uint64_t seed = rng_dropout_seed(key, sample0 + b);
            float *seg = x + (lo - e0);  // element i0 of row b
            // times 0 rather than "= 0": a select of constants vectorises (a guarded multiply does not),
            // and a NaN stays NaN, as in torch's x * mask * scale
#pragma omp simd
            for (size_t i = i0; i < i1; i++) seg[i - i0] *= rng_dropout_keep(seed, i, thr) ? scale : 0.0f;
            lo = b * M + i1;
        }
    }
}

// ---- fused softmax + cross-entropy ----

// vocabulary entries per chunk of the statistics pass: a chunk's max, then its sum of exp, both
// from L1, merged into the row's running (max, sum)
#define CE_CHUNK 1024

// loss of one row of logits x (V); with dscale != 0, x <- (softmax(x) - onehot) * dscale. A negative
// target bears no loss: 0, and a zero gradient row.
static double ce_row(float *x, int target, int V, float dscale) {
    if (target < 0) {
        if (dscale != 0.0f) memset(x, 0, sizeof(float) * (size_t)V);
        return 0.0;
    }
    float mx = -INFINITY, sum = 0.0f;
    for (int j0 = 0; j0 < V; j0 += CE_CHUNK) {
        const int j1 = j0 + CE_CHUNK < V ? j0 + CE_CHUNK : V;
        float cm = x[j0];
#pragma omp simd reduction(max : cm)
        for (int j = j0; j < j1; j++) cm = x[j] > cm ? x[j] : cm;
        // a NaN makes the chunk's max NaN through the sum below, not through the max (which may skip it)
        const float m = cm > mx ? cm : mx;
        float cs = 0.0f;
#pragma omp simd reduction(+ : cs)
        for (int j = j0; j < j1; j++) cs += cpu_expf(x[j] - m);
        sum = sum * cpu_expf(mx - m) + cs;
        mx = m;
    }
    const double loss = log((double)sum) + mx - x[target];
    if (dscale != 0.0f) {
        // recomputing exp costs less than storing it and reading it back
        const float c = dscale / sum;
#pragma omp simd
        for (int j = 0; j < V; j++) x[j] = cpu_expf(x[j] - mx) * c;
        x[target] -= dscale;
    }
    return loss;
}

void cpu_crossentropy_fwd_bwd(void *logits_, const int32_t *targets, int N, int V, float dscale, double *loss) {
    float *logits = logits_;  // the CPU's activations are fp32
    const int nth = omp_get_max_threads();
    double part[CPU_MAX_THREADS];  // per-thread loss sums, added in thread order
    for (int t = 0; t < nth; t++) part[t] = 0.0;
#pragma omp parallel
    {
        size_t lo, hi;
        ew_thread_range((size_t)N, &lo, &hi);
        double s = 0.0;
        for (size_t n = lo; n < hi; n++) s += ce_row(logits + n * V, targets[n], V, dscale);
        part[omp_get_thread_num()] = s;
    }
    double sum = 0.0;
    for (int t = 0; t < nth; t++) sum += part[t];
    *loss += sum;
}

// ---- vocabulary-parallel cross-entropy ----

void cpu_xent_part_max(const void *logits_, int N, int Vl, float *row_max) {
    const float *logits = logits_;
#pragma omp parallel for schedule(static) if ((size_t)N * Vl >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vl;
        float m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (int j = 0; j < Vl; j++) m = x[j] > m ? x[j] : m;
        row_max[n] = m;
    }
}

void cpu_xent_part_sums(const void *logits_, const int32_t *targets, int N, int Vl, int v0, const float *row_max,
                        float *sums) {
    const float *logits = logits_;
#pragma omp parallel for schedule(static) if ((size_t)N * Vl >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vl;
        if (targets[n] < 0) {
            sums[2 * n] = sums[2 * n + 1] = 0.0f;
            continue;
        }
        const float m = row_max[n];
        // float sums over L1-sized chunks (vectorised), added up in double
        double s = 0.0;
        for (int j0 = 0; j0 < Vl; j0 += CE_CHUNK) {
            const int j1 = j0 + CE_CHUNK < Vl ? j0 + CE_CHUNK : Vl;
            float cs = 0.0f;
#pragma omp simd reduction(+ : cs)
            for (int j = j0; j < j1; j++) cs += cpu_expf(x[j] - m);
            s += cs;
        }
        sums[2 * n] = (float)s;
        sums[2 * n + 1] = in_part(targets[n], v0, Vl) ? x[targets[n] - v0] : 0.0f;
    }
}

void cpu_xent_part_finish(void *logits_, const int32_t *targets, int N, int Vl, int v0, const float *row_max,
                          const float *sums, float dscale, int add_loss, double *loss) {
    float *logits = logits_;
    if (dscale == 0.0f && !add_loss) return;
    const int nth = omp_get_max_threads();
    double part[CPU_MAX_THREADS];  // per-thread loss sums, added in thread order (as the fused kernel)
    for (int t = 0; t < nth; t++) part[t] = 0.0;
#pragma omp parallel
    {
        size_t lo, hi;
        ew_thread_range((size_t)N, &lo, &hi);
        double s = 0.0;
        for (size_t n = lo; n < hi; n++) {
            float *x = logits + n * Vl;
            if (targets[n] < 0) {
                if (dscale != 0.0f) memset(x, 0, sizeof(float) * (size_t)Vl);
                continue;
            }
            const float mx = row_max[n], sum = sums[2 * n];
            s += log((double)sum) + mx - sums[2 * n + 1];
            if (dscale != 0.0f) {
                const float c = dscale / sum;
#pragma omp simd
                for (int j = 0; j < Vl; j++) x[j] = cpu_expf(x[j] - mx) * c;
                if (in_part(targets[n], v0, Vl)) x[targets[n] - v0] -= dscale;
            }
        }
        part[omp_get_thread_num()] = s;
    }
    if (!add_loss) return;
    double sum = 0.0;
    for (int t = 0; t < nth; t++) sum += part[t];
    *loss += sum;
}

// ---- elementwise and reductions ----

void cpu_add(float *y, const float *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void cpu_add3(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void cpu_scale(float *x, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void cpu_zero(float *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] = 0.0f;
}

void cpu_copy(float *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

void cpu_act_copy(void *dst, const void *src, size_t n) { cpu_copy(dst, src, n); }

double cpu_sumsq(const float *x, size_t n) {
    const int nth = omp_get_max_threads();
    double part[CPU_MAX_THREADS];  // per-thread partial sums, added in thread order
    for (int t = 0; t < nth; t++) part[t] = 0.0;
#pragma omp parallel if (n >= CPU_PAR_MIN)
    {
        size_t lo, hi;
        ew_thread_range(n, &lo, &hi);
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; i++) s += (double)x[i] * x[i];
        part[omp_get_thread_num()] = s;
    }
    double sum = 0.0;
    for (int t = 0; t < nth; t++) sum += part[t];
    return sum;
}

void cpu_sumsq_to(double *out, const float *x, size_t n) { *out = cpu_sumsq(x, n); }

// ---- AdamW (torch.optim.AdamW, single-tensor form) ----

typedef struct {
    float b1, b2, b1c, b2c, gs, eps, decay, step_size, bc2_sqrt;
} AdamwConst;

// element i's update; returns the new p[i]
static inline float adamw_elem(float *p, const float *g, float *m, float *v, size_t i, const AdamwConst *c) {
    const float gi = g[i] * c->gs;
    const float mi = c->b1 * m[i] + c->b1c * gi, vi = c->b2 * v[i] + c->b2c * gi * gi;
    m[i] = mi;
    v[i] = vi;
    return p[i] = p[i] * c->decay - c->step_size * (mi / (sqrtf(vi) / c->bc2_sqrt + c->eps));
}

// elements [lo, hi) with one weight decay factor; two loops, as a test of pb inside one keeps
// GCC from vectorising the loop without the bf16 copy
static void adamw_range(float *p, uint16_t *pb, const float *g, float *m, float *v, size_t lo, size_t hi,
                        const AdamwConst *c) {
    if (pb) {
#pragma omp parallel for simd schedule(static) if (hi - lo >= CPU_PAR_MIN)
        for (size_t i = lo; i < hi; i++) pb[i] = half_f32_to_bf16(adamw_elem(p, g, m, v, i, c));
    } else {
#pragma omp parallel for simd schedule(static) if (hi - lo >= CPU_PAR_MIN)
        for (size_t i = lo; i < hi; i++) adamw_elem(p, g, m, v, i, c);
    }
}

void cpu_adamw(float *p, uint16_t *p_bf16, const float *g, float *m, float *v, size_t n, const KernAdamW *h) {
    const double bc1 = 1.0 - pow(h->beta1, h->step), bc2 = 1.0 - pow(h->beta2, h->step);
    AdamwConst c = {h->beta1, h->beta2, 1.0f - h->beta1, 1.0f - h->beta2, h->grad_scale, h->eps, 1.0f,
                    (float)(h->lr / bc1), (float)sqrt(bc2)};
    const float decay = (float)(1.0 - (double)h->lr * h->weight_decay);
    // the ranges in order, the gaps between them without decay (p * 1.0f is exact)
    size_t at = 0;
    for (int r = 0; r <= h->ndecay; r++) {
        const size_t lo = r < h->ndecay ? h->decay[r][0] : n, hi = r < h->ndecay ? h->decay[r][1] : n;
        c.decay = 1.0f;
        if (lo > at) adamw_range(p, p_bf16, g, m, v, at, lo, &c);
        c.decay = decay;
        if (hi > lo) adamw_range(p, p_bf16, g, m, v, lo, hi, &c);
        if (hi > at) at = hi;
    }
}

// ---- bf16 ----

void cpu_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = half_f32_to_bf16(src[i]);
}

void cpu_round_bf16(float *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)half_f32_to_bf16(x[i]) << 16;
        memcpy(x + i, &u, sizeof u);
    }
}

void cpu_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = half_bf16_to_f32(src[i]);
}
