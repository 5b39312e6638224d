// setup: the CPU backend's process-wide state, compiled once (the kernel files are compiled once per
// instruction set, cpu_common.h): threads, the instruction set the kernels run on, and the token note.
#define _GNU_SOURCE  // RTLD_DEFAULT
#include <cblas.h>
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../base/limits.h"
#include "../../base/log.h"
#include "../backend.h"
#include "cpu_common.h"

// ---- the kernels' instruction set ----

static CpuIsa isa;
static int isa_bf16;
static char isa_line[160];
static char isa_error[200];  // FSDPC_CPU_ISA refused: cpu_init returns it
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static void isa_select(void) {
    __builtin_cpu_init();
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    const int bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
    const char *want = getenv("FSDPC_CPU_ISA");
    const char *why = avx512 ? "this CPU has AVX-512 F, BW, DQ and VL" : "this CPU has no AVX-512 F, BW, DQ and VL";
    isa = avx512 ? CPU_ISA_AVX512 : CPU_ISA_AVX2;
    if (want && !strcmp(want, "avx2")) {
        isa = CPU_ISA_AVX2;
        why = "FSDPC_CPU_ISA=avx2";
    } else if (want && !strcmp(want, "avx512") && avx512) {
        why = "FSDPC_CPU_ISA=avx512";
    } else if (want && *want && strcmp(want, "auto")) {
        snprintf(isa_error, sizeof isa_error, "FSDPC_CPU_ISA=%.40s: %s", want,
                 strcmp(want, "avx512") ? "not an instruction set fsdpc builds its kernels for (auto, avx2 or avx512)"
                                        : "this CPU has no AVX-512 F, BW, DQ and VL (unset it, or auto, or avx2)");
    }
    isa_bf16 = bf16 && isa == CPU_ISA_AVX512;
    snprintf(isa_line, sizeof isa_line, "%s (%s)%s", isa == CPU_ISA_AVX512 ? "avx512" : "avx2", why,
             isa_bf16 ? ", AVX512_BF16" : "");
}

CpuIsa cpu_isa(void) {
    pthread_once(&isa_once, isa_select);
    return isa;
}

int cpu_has_bf16(void) { return cpu_isa(), isa_bf16; }

const char *cpu_isa_line(void) { return cpu_isa(), isa_line; }

#define CPU_ROUTE_ISA(ret, op, params, args) \
    ret cpu_##op params { return cpu_isa() == CPU_ISA_AVX512 ? cpu_##op##_avx512 args : cpu_##op##_avx2 args; }
KERN_SIMD_OPS(CPU_ROUTE_ISA)

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
    if (cpu_isa(), isa_error[0]) return isa_error;
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

