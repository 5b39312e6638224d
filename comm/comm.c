// comm: MPI bootstrap, error exits, host-buffer collectives.
#define _GNU_SOURCE  // sched_getaffinity, CPU_COUNT
#include "comm.h"

#include "../base/clock.h"
#include "../base/err.h"
#include "../base/log.h"
#include "../kernels/backend.h"
#include "../kernels/kernels.h"
#include "flight.h"
#include "io.h"
#include "../base/limits.h"
#include "../base/path.h"
#include "trace.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <malloc.h>
#include <sched.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#ifdef FSDPC_CUDA
#include "nccl.h"
#endif

struct CommGroup {
    MPI_Comm comm;
    void *nccl;        // NcclComm when the group moves device buffers (GPU runs), else NULL
    const char *name;  // "world", "shard", "replica": in the flight recorder and the trace
    uint64_t seq;      // collectives issued on the group so far; its members count alike
    // another thread's group (comm_group_background): its collectives skip the flight recorder, the
    // trace and the timeout's side channel, which belong to the main thread
    int background;
};

CommInfo comm_info;
static CommGroup world_group = {.name = "world"};
static MPI_Op bf16_sum_op;
static MPI_Comm fail_comm;   // only comm_fail_all meets on it, so it never crosses another collective
static MPI_Comm watch_comm;  // the side channel on which timed-out ranks tell each other where they wait
static double collective_timeout = 600;  // seconds; 0: wait for ever
static int thread_level;  // what MPI_Init_thread provided
static void (*exit_hook)(int clean);

void comm_on_exit(void (*hook)(int clean)) { exit_hook = hook; }
enum { TIMEOUT_TAG = 7, GRACE_SECONDS = 5, RING_TAG = 8 };  // RING_TAG: a ring shift's point-to-point messages
static void fatal_before(void);
static void fatal_end(void);
#ifdef FSDPC_CUDA
enum { NCCL_GROUPS = 9 };
// the shard, replica and tp groups' NCCL communicators, then the expert groups', the whole groups'
// and the cp group's, to abort or destroy
static CommGroup *nccl_groups[NCCL_GROUPS];
static void nccl_init_groups(int first, int n);
static void nccl_abort_all(void);
#else
static void nccl_abort_all(void) {}
#endif

#define mpiCheck(call) mpi_check((call), __FILE__, __LINE__)
static void mpi_check(int err, const char *file, int line) {
    if (err == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    err_fatal_at(file, line, "MPI call failed: %s (is the launcher/network healthy?)", msg);
}

// MPI reduction op for bf16 stored as uint16: inout = bf16(f32(in) + f32(inout))
// It runs on every reduction step of every bf16 collective, so its fp32 scratch is kept and
// only grows (MPI is initialised single-threaded: one caller at a time).
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    static float *scratch;
    static size_t cap;
    size_t n = (size_t)*len;
    if (2 * n > cap) {
        free(scratch);
        cap = 2 * n;
        scratch = mallocCheck(cap * sizeof(float));
    }
    float *a = scratch, *b = scratch + n;
    cpu_bf16_to_f32(a, in, n);  // MPI moves host buffers: the CPU kernels do the sum
    cpu_bf16_to_f32(b, inout, n);
    cpu_add(b, a, n);
    cpu_f32_to_bf16(inout, b, n);
}

// A string MPI_T control variable ("pml", "mtl_ofi_provider_include") into out; "" when this MPI
// does not have it. MPI_T failures only cost the log line its detail, so they are not fatal.
static void cvar_string(const char *want, char *out, size_t len) {
    int n = 0;
    out[0] = 0;
    if (MPI_T_cvar_get_num(&n) != MPI_SUCCESS) return;
    for (int i = 0; i < n; i++) {
        char name[256], desc[8];
        int name_len = sizeof name, desc_len = sizeof desc, verbosity, bind, scope, count = 0;
        MPI_Datatype type;
        MPI_T_enum en;
        if (MPI_T_cvar_get_info(i, name, &name_len, &verbosity, &type, &en, desc, &desc_len, &bind, &scope) != MPI_SUCCESS ||
            strcmp(name, want) || type != MPI_CHAR || bind != MPI_T_BIND_NO_OBJECT)
            continue;
        char value[4096];
        MPI_T_cvar_handle h;
        if (MPI_T_cvar_handle_alloc(i, NULL, &h, &count) != MPI_SUCCESS) return;
        if (count > 0 && (size_t)count <= sizeof value && MPI_T_cvar_read(h, value) == MPI_SUCCESS) {
            value[count - 1] = 0;
            size_t n = strnlen(value, len - 1);  // a longer value is cut: it only goes into a log line
            memcpy(out, value, n);
            out[n] = 0;
        }
        MPI_T_cvar_handle_free(&h);
        return;
    }
}

// The component Open MPI selected ("ob1", "cm", "ofi"), from its exported base variable: MPI_T
// only holds what was asked for ("^ucx" from Debian's openmpi-mca-params.conf, or nothing), and
// the default choice differs by machine (cm+ofi on EFA). The 4.x mca_base_component_t layout
// (3 ints, project[16], 3 ints, type[32], 3 ints, name[64]) is checked through its project and
// type names, so another MPI or layout gives NULL and the caller falls back to MPI_T.
static const char *ompi_selected(const char *symbol, const char *type, int is_pointer) {
    // the offsets below are Open MPI 4.x's mca_base_component_t; other versions keep to MPI_T
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    if (MPI_Get_library_version(lib, &len) != MPI_SUCCESS || strncmp(lib, "Open MPI v4.", 12)) return NULL;
    const char *c = dlsym(RTLD_DEFAULT, symbol);
    if (c && is_pointer) c = *(const char *const *)c;
    if (!c || strncmp(c + 12, "ompi", 16) || strncmp(c + 40, type, 32) || !memchr(c + 84, 0, 64) || !c[84]) return NULL;
    return c + 84;
}

static char transport[512] = "unknown";

const char *comm_transport(void) { return transport; }

// Appends `sep` and the words of `s` up to its first newline to out (at n of cap), each run of
// blanks as one space; returns the new length. Library strings only go into the log line, so a
// long one is cut.
static size_t append_words(char *out, size_t n, size_t cap, const char *sep, const char *s) {
    s += strspn(s, " \t\r");
    if (!*s || *s == '\n') return n;
    n += (size_t)snprintf(out + n, cap - n, "%s", sep);
    if (n >= cap) n = cap - 1;
    for (int blank = 0; *s && *s != '\n' && n + 1 < cap; s++) {
        if (*s == ' ' || *s == '\t' || *s == '\r') {
            blank = 1;
            continue;
        }
        if (blank && n + 2 < cap) out[n++] = ' ';
        blank = 0;
        out[n++] = *s;
    }
    out[n] = 0;
    return n;
}

const char *comm_library_versions(void) {
    static char out[MPI_MAX_LIBRARY_VERSION_STRING + 700];  // room for NCCL's "none (why)"
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "unknown";
    int len;
    if (MPI_Get_library_version(lib, &len) != MPI_SUCCESS) snprintf(lib, sizeof lib, "unknown");
    size_t n = append_words(out, 0, sizeof out, "MPI: ", lib);
#ifdef FSDPC_CUDA
    snprintf(out + n, sizeof out - n, "\nNCCL: %s\n", comm_nccl_version());
#else
    snprintf(out + n, sizeof out - n, "\n");
#endif
    return out;
}

// Under an MPI other than Open MPI its component names mean nothing: the library's first line
// ("MPICH Version: 4.0.2", Cray's "MPI VERSION : CRAY MPICH version 8.1.28 ..."), MPICH's device
// ("ch4:ucx", "ch4:ofi") and the libfabric provider asked for (FI_PROVIDER), as far as each is said.
static void library_transport(const char *lib) {
    static const char device[] = "\nMPICH Device:";
    size_t n = append_words(transport, 0, sizeof transport, "", lib);
    if (!n) n = strlen(transport);  // "unknown"
    const char *dev = strstr(lib, device), *v;
    if (dev) n = append_words(transport, n, sizeof transport, ", device ", dev + strlen(device));
    if ((v = getenv("FI_PROVIDER"))) append_words(transport, n, sizeof transport, ", provider ", v);
}

// MPI_T's string control variables wanted[i] into out[i] (each 256 bytes), all "" when MPI_T is
// not there. MPI_T_init loads every component library Open MPI has, whatever the MCA selection
// (libfabric and the PSM libraries, whose loading calibrates a timer for ~0.3 s), so it is asked
// only what the selected components cannot tell.
static void cvar_strings(const char *const *wanted, char (*out)[256], int n) {
    int provided;
    for (int i = 0; i < n; i++) out[i][0] = 0;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return;
    for (int i = 0; i < n; i++) cvar_string(wanted[i], out[i], sizeof out[i]);
    MPI_T_finalize();
}

// Fills `transport` once MPI is up: the PML, the MTL when cm drives one, and the libfabric
// provider asked for when that MTL is ofi (EFA runs must say "provider=efa", not tcp).
static void find_transport(void) {
    int len;
    char pml[256] = "", mtl[256] = "", prov[1][256], lib[MPI_MAX_LIBRARY_VERSION_STRING];
    const char *v;
    if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS && strncmp(lib, "Open MPI", 8)) {
        library_transport(lib);
        return;
    }
    const char *sel_pml = ompi_selected("mca_pml_base_selected_component", "pml", 0);
    if (sel_pml) {  // the MTL matters only under cm; NULL pointer: no MTL was selected
        const char *sel_mtl = strcmp(sel_pml, "cm") ? NULL : ompi_selected("ompi_mtl_base_selected_component", "mtl", 1);
        snprintf(pml, sizeof pml, "%s", sel_pml);
        snprintf(mtl, sizeof mtl, "%s", sel_mtl ? sel_mtl : "");
    } else {
        static const char *const names[] = {"pml", "mtl"};
        char got[2][256];
        cvar_strings(names, got, 2);
        // the environment, for an MPI whose MPI_T does not tell (the MCA variables are Open MPI's)
        snprintf(pml, sizeof pml, "%s", got[0][0] ? got[0] : (v = getenv("OMPI_MCA_pml")) ? v : "");
        snprintf(mtl, sizeof mtl, "%s", got[1][0] ? got[1] : (v = getenv("OMPI_MCA_mtl")) ? v : "");
        if (mtl[0] == '^') mtl[0] = 0;  // an exclusion list names no MTL in use
    }
    int n = snprintf(transport, sizeof transport, "pml=%s", pml[0] ? pml : "unknown");
    if (mtl[0]) n += snprintf(transport + n, sizeof transport - n, " mtl=%s", mtl);
    if (strcmp(mtl, "ofi")) return;
    static const char *const provider[] = {"mtl_ofi_provider_include"};
    cvar_strings(provider, prov, 1);
    if (!prov[0][0] && (v = getenv("OMPI_MCA_mtl_ofi_provider_include"))) snprintf(prov[0], sizeof prov[0], "%s", v);
    if (!prov[0][0] && (v = getenv("FI_PROVIDER"))) snprintf(prov[0], sizeof prov[0], "%s", v);
    snprintf(transport + n, sizeof transport - n, " provider=%s", prov[0][0] ? prov[0] : "auto");
}

volatile sig_atomic_t comm_stop_signal;
static volatile sig_atomic_t stop_polled;
static volatile sig_atomic_t stop_silent;  // a rank other than 0: an immediate stop prints nothing
static const char *volatile stop_phase = "start-up";
enum { STOP_FILES = 16, STOP_PATH = PATH_MAX };  // any path the system takes
static char stop_files[STOP_FILES][STOP_PATH];
static volatile sig_atomic_t stop_file_used[STOP_FILES];
// SIGXCPU: a soft CPU-time limit reached (ulimit -S -t, a batch system's CPU-time limit), sent again
// each CPU second until the hard limit's SIGKILL: time enough for a checkpoint
static const int stop_sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGXCPU};

const char *comm_signal_name(int sig) {
    static const char *const names[] = {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGXCPU"};
    for (size_t i = 0; i < sizeof stop_sigs / sizeof *stop_sigs; i++)
        if (stop_sigs[i] == sig) return names[i];
    return "a signal";
}

// only async-signal-safe calls from here to the _exit: write, unlink, nanosleep
static size_t stop_append(char *buf, size_t n, size_t cap, const char *s) {
    while (*s && n + 1 < cap) buf[n++] = *s++;
    return n;
}

// stop_append with control characters escaped as log_error writes them (\n, \t, \r, \xNN)
static size_t stop_append_escaped(char *buf, size_t n, size_t cap, const char *s) {
    static const char hex[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)s; *p && n + 5 < cap; p++) {
        if (*p >= 0x20 && *p != 0x7f) buf[n++] = (char)*p;
        else if (*p == '\n' || *p == '\t' || *p == '\r') buf[n++] = '\\', buf[n++] = *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r';
        else buf[n++] = '\\', buf[n++] = 'x', buf[n++] = hex[*p >> 4], buf[n++] = hex[*p & 15];
    }
    return n;
}

// The end of an immediate stop: the registered files removed, rank 0's line "Stopped by signal N
// (SIG...) during <phase>: <what>" and status 75. From the handler, or from the stop watchdog.
static void __attribute__((noreturn)) stop_exit(int sig, const char *what) {
    for (int i = 0; i < STOP_FILES; i++)
        if (stop_file_used[i]) unlink(stop_files[i]);
    if (!stop_silent) {
        char line[512], num[12];
        int k = (int)sizeof num - 1, v = sig;
        num[k] = 0;
        do num[--k] = (char)('0' + v % 10);
        while ((v /= 10) && k > 0);
        size_t n = stop_append(line, 0, sizeof line, "Stopped by signal ");
        n = stop_append(line, n, sizeof line, num + k);
        n = stop_append(line, n, sizeof line, " (");
        n = stop_append(line, n, sizeof line, comm_signal_name(sig));
        n = stop_append(line, n, sizeof line, ") during ");
        n = stop_append(line, n, sizeof line, stop_phase);
        n = stop_append(line, n, sizeof line, what);
        ssize_t w = write(STDERR_FILENO, line, n);
        (void)w;
    } else {
        // the other ranks leave a moment later: a launcher that ends the job at the first exit
        // would otherwise take rank 0 down before its line is out
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    _exit(COMM_EXIT_STOPPED);
}

static void on_stop(int sig) {
    if (stop_polled) {
        __atomic_store_n(&comm_stop_signal, sig, __ATOMIC_RELAXED);  // read by the stop watchdog's thread too
        return;
    }
    stop_exit(sig, ": nothing partial left; exiting with status 75\n");
}

// A read of a mapped input whose file got shorter under its map (base/path.h path_map_read): one
// error line naming the file, and the job ends as on any one rank's error. Any other SIGBUS stays
// the crash it is (the default action, on the faulting instruction's retry).
static void on_bus(int sig, siginfo_t *si, void *ctx) {
    (void)ctx;
    const char *name = si->si_code > 0 ? path_mapped_name(si->si_addr) : NULL;  // <= 0: sent, no address
    if (!name) {  // the default action: a fault's retry, or the sent signal (pending until this returns)
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    for (int i = 0; i < STOP_FILES; i++)  // the writer locks go, as on a stop
        if (stop_file_used[i]) unlink(stop_files[i]);
    char line[PATH_MAX + 512], num[12];
    int k = (int)sizeof num - 1, v = comm_info.rank;
    num[k] = 0;
    do num[--k] = (char)('0' + v % 10);
    while ((v /= 10) && k > 0);
    size_t n = stop_append(line, 0, sizeof line, "fsdpc: error: '");
    n = stop_append_escaped(line, n, sizeof line, name);
    n = stop_append(line, n, sizeof line, "' got shorter while it was being read (another program truncated or rewrote it "
                                          "in place): restore it (a data cache part: remove its cache folder to rebuild it) "
                                          "and resume from the last checkpoint");
    if (comm_info.world > 1) {
        n = stop_append(line, n, sizeof line, " (rank ");
        n = stop_append(line, n, sizeof line, num + k);
        n = stop_append(line, n, sizeof line, ")");
    }
    n = stop_append(line, n, sizeof line, "\n");
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
    stop_silent = 1;  // the launcher's SIGTERM to the others adds no stop line after the error
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited && comm_info.world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

static void stop_signals_install(void) {
    struct sigaction bus = {.sa_sigaction = on_bus, .sa_flags = SA_SIGINFO};
    sigemptyset(&bus.sa_mask);
    sigaction(SIGBUS, &bus, NULL);
    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);  // one handler at a time: a second signal waits for the first's exit
    for (size_t i = 0; i < sizeof stop_sigs / sizeof *stop_sigs; i++) sigaddset(&sa.sa_mask, stop_sigs[i]);
    for (size_t i = 0; i < sizeof stop_sigs / sizeof *stop_sigs; i++) sigaction(stop_sigs[i], &sa, NULL);
    signal(SIGPIPE, SIG_IGN);  // a write to a closed pipe (| head) returns EPIPE, which the writers report
}

// From the first moment: the executable's pre-initialisers run before any shared library's
// constructors (CUDA's and BLAS's take a tenth of a second), let alone main and MPI_Init.
static void stop_signals_early(int argc, char **argv, char **envp) {
    (void)argc, (void)argv, (void)envp;
    stop_signals_install();
}
__attribute__((section(".preinit_array"), used)) static void (*const stop_signals_preinit)(int, char **, char **) = stop_signals_early;

void comm_stop_polled(int on) {
    __atomic_store_n(&stop_polled, on, __ATOMIC_RELAXED);
    if (!on && comm_stop_signal) raise(comm_stop_signal);  // a signal polled for but not acted on ends the process now
}

void comm_stop_phase(const char *phase) { stop_phase = phase; }

int comm_stop_unlink(const char *path, int on) {
    for (int i = 0; i < STOP_FILES; i++) {
        if (on && !stop_file_used[i] && strlen(path) < STOP_PATH) {
            memcpy(stop_files[i], path, strlen(path) + 1);
            stop_file_used[i] = 1;  // set after the path is complete: the handler may run at any point
            return 0;
        }
        if (!on && stop_file_used[i] && !strcmp(stop_files[i], path)) stop_file_used[i] = 0;
    }
    return on ? -1 : 0;
}

int comm_stop_any(void) {
    double sig = comm_stop_signal;
    comm_allreduce_max_f64(comm_world(), &sig, 1);
    return (int)sig;
}

// What fsdpc is built with, for the lines that name a launch that does not fit it, and how srun
// wires tasks into one job for that MPI.
#if defined(OPEN_MPI)
#define MPI_NAME "Open MPI"
#define SRUN_PMI "PMIx"
#define SRUN_WIRING "pass --mpi=pmix (Debian's OpenMPI speaks PMIx only; plain srun and --mpi=pmi2 cannot wire the ranks into one job)"
#else
#if defined(MPICH_VERSION)
#define MPI_NAME "MPICH " MPICH_VERSION
#else
#define MPI_NAME "this MPI"
#endif
#define SRUN_PMI "PMI"
#define SRUN_WIRING "pass --mpi=pmi2, or --mpi=pmix where this MPI has PMIx (plain srun cannot wire the ranks into one job)"
#endif

// The launcher's rank before MPI_Init says it (Open MPI, PMIx, PMI, Slurm): only rank 0 prints a
// stop. Kept for later: an Open MPI singleton's MPI_Init sets OMPI_COMM_WORLD_RANK=0 in every copy.
static int launcher_rank_nonzero;
static void stop_rank_from_launcher(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            stop_silent = launcher_rank_nonzero = atoi(v) != 0;
            return;
        }
    }
}

// Open MPI's isolated singletons (no orted) all take the job family 0, so concurrent ones on one
// host share the session folder ompi.HOST.UID/jf.0: one ending removes it while another is
// creating its own below it, and that MPI_Init fails. Each gets a folder of its own, which Open MPI
// creates and removes as it would jf.0. Left alone when the user names one.
static void singleton_session_dir(int wired) {
#if defined(OPEN_MPI)
    const char *iso = getenv("OMPI_MCA_ess_singleton_isolated");
    if (wired || !iso || !iso[0] || !strchr("1tTyY", iso[0]) || getenv("OMPI_MCA_orte_jobfam_session_dir")) return;
    const char *base = getenv("OMPI_MCA_orte_tmpdir_base");  // Open MPI's order for the base
    if (!base || !*base) base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    char host[64] = "host", dir[4096];
    gethostname(host, sizeof host - 1);
    snprintf(dir, sizeof dir, "%s/ompi.%s.%u.jf%ld", base, host, (unsigned)getuid(), (long)getpid());
    setenv("OMPI_MCA_orte_jobfam_session_dir", dir, 0);
#else
    (void)wired;
#endif
}

// The executable's GNU build ID (the linker's hash of the program: the Makefile links with
// --build-id) as hex, from the main program's note segments; "" when it has none.
static int build_id_note(struct dl_phdr_info *info, size_t size, void *out) {
    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_NOTE) continue;
        const char *p = (const char *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr), *end = p + info->dlpi_phdr[i].p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
            const char *name = p + sizeof *n, *desc = name + ((n->n_namesz + 3) & ~3u);
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && !memcmp(name, "GNU", 4) && desc + n->n_descsz <= end) {
                char *hex = out;
                for (unsigned k = 0; k < n->n_descsz && k < 32; k++) sprintf(hex + 2 * k, "%02x", (unsigned char)desc[k]);
                return 1;
            }
            p = desc + ((n->n_descsz + 3) & ~3u);
        }
    }
    return 1;  // the first object is the main program: stop there
}

static char *text_of(const char *mine, int from);

// Ranks started from different fsdpc builds (a node-local install one upgrade behind, a binary
// rebuilt while the job started) may order collectives differently or train other numbers:
// every rank checks that its build is rank 0's, before any work.
static void check_same_build(void) {
    char id[65] = "", exe[PATH_MAX] = "?", host[256] = "?", mine[PATH_MAX + 400];
    dl_iterate_phdr(build_id_note, id);
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 1] = 0;
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    snprintf(mine, sizeof mine, "build %s (%s on %s)", id[0] ? id : "without an ID", exe, host);
    char *theirs, *root;
    // the build alone decides: the same file may sit at other paths on other nodes
    int r = comm_first_different(id, &theirs, &root);
    if (r < 0) return;
    free(theirs), free(root);
    theirs = text_of(mine, r), root = text_of(mine, 0);
    comm_fail_all("rank %d runs another fsdpc build than rank 0: %s, rank 0 %s; start every rank from one build (install "
                  "the same fsdpc on every node)", r, theirs, root);
}

void comm_init(int *argc, char ***argv) {
    stop_rank_from_launcher();
    stop_signals_install();  // again (see stop_signals_early): MPI's start-up can take a while
    limits_check_start();    // what would make MPI_Init fail with its own text
    // big buffers (units, MPI temporaries) go straight to mmap and back to the OS when freed,
    // instead of glibc raising its threshold and keeping them in a growing heap
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    // srun without --mpi=pmix: Open MPI would fail inside MPI_Init with a banner per copy (MPICH
    // would start N one-rank jobs); an MPICH build also takes srun's PMI-2 (PMI_FD, PMI_RANK)
    const char *tasks = getenv("SLURM_STEP_NUM_TASKS"), *procid = getenv("SLURM_PROCID");
    int wired = getenv("PMIX_RANK") || getenv("OMPI_COMM_WORLD_RANK");
#ifndef OPEN_MPI
    wired = wired || getenv("PMI_FD") || getenv("PMI_RANK");
#endif
    if (tasks && atoi(tasks) > 1 && !wired) {
        char msg[256];
        snprintf(msg, sizeof msg, "srun started %s tasks without " SRUN_PMI ": " SRUN_WIRING, tasks);
        if (!procid || atoi(procid) == 0) log_error(msg);
        exit(1);
    }
    singleton_session_dir(wired);
#if defined(OPEN_MPI)
    // Open MPI's lockedfile shared-file-pointer component, which MPI-IO (parallel HDF5) opens with
    // every file, keeps the file's path in a fixed buffer and aborts the job on a checkpoint path
    // of 207 characters or more; fsdpc never uses shared file pointers, so it is left out unless
    // the user chose the components (OMPI_MCA_sharedfp).
    setenv("OMPI_MCA_sharedfp", "^lockedfile", 0);
#endif
    clock_test_pause("start-up");
    const char *launcher_stdout = io_launcher_stdout();  // before MPI_Init, which sets a singleton's OMPI_* variables
    // a checkpoint written in the background (--async_checkpoint) makes MPI calls from its own
    // thread, on a communicator of its own, while training's go on: that needs MPI_THREAD_MULTIPLE,
    // which other runs do not pay for (some transports lock more, or step aside, under it)
    int multiple = 0;
    for (int i = 1; i < *argc; i++)
        multiple |= !strncmp((*argv)[i], "--async_checkpoint", 18) && strchr("=", (*argv)[i][18]);
    MPI_Init_thread(argc, argv, multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &thread_level);
    // errors come back to us so they are reported with file:line, not as a bare abort
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    world_group.comm = MPI_COMM_WORLD;
    mpiCheck(MPI_Comm_dup(MPI_COMM_WORLD, &fail_comm));
    mpiCheck(MPI_Comm_dup(MPI_COMM_WORLD, &watch_comm));
    mpiCheck(MPI_Op_create(bf16_sum, 1, &bf16_sum_op));
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &comm_info.rank));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &comm_info.world));
    log_set_rank(comm_info.rank);
    err_on_fatal(fatal_before, fatal_end);
    find_transport();
    stop_silent = comm_info.rank != 0;
    stop_signals_install();  // again, in case the MPI library installed its own
    flight_install_signal(comm_info.rank);
    comm_check_all(launcher_stdout);
    // local rank from shared-memory domains, so mpiexec, srun and a bare start all agree
    MPI_Comm node;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm_info.rank, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Comm_rank(node, &comm_info.local_rank));
    mpiCheck(MPI_Comm_size(node, &comm_info.local_world));
    MPI_Comm_free(&node);
    // A launcher that starts N copies without wiring them into one MPI job (srun without
    // --mpi=pmix, PMI2 against a PMIx-only MPI, one MPI's mpiexec starting a build against
    // another) gives N 1-rank runs writing one directory. Each is its own rank 0: the launcher's
    // rank 0 alone says so.
    static const char *const sizes[] = {"SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "PMI_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const char *v = getenv(sizes[i]);
        if (v && atoi(v) > comm_info.world && launcher_rank_nonzero) _exit(1);
        if (v && atoi(v) > comm_info.world)
            limits_fail_early("the launcher started %d tasks (%s) but MPI sees %d rank(s): they are not one job (this fsdpc is built "
                          "with " MPI_NAME ": start it with that MPI's mpiexec; with srun, " SRUN_WIRING ")", atoi(v), sizes[i],
                          comm_info.world);
    }
    if (comm_info.world > 1) check_same_build();
    // torchrun (every PyTorch recipe's launcher) sets WORLD_SIZE/RANK but no MPI: each copy would train alone
    const char *torch_world = getenv("WORLD_SIZE");
    if (torch_world && atoi(torch_world) > 1 && atoi(torch_world) != comm_info.world)
        comm_fail_all("WORLD_SIZE=%d (torchrun's variables) but MPI sees %d rank(s): fsdpc is an MPI program, launch it with "
                      "mpirun -n %d ./fsdpc, srun --mpi=pmix, or an MPIJob, not torchrun", atoi(torch_world), comm_info.world, atoi(torch_world));
}

void comm_check_pbs(void) {
    const char *job = getenv("PBS_JOBID"), *nodefile = getenv("PBS_NODEFILE");
    if (!job || !*job) comm_fail_all("--environment pbs: PBS_JOBID is not set (submit with qsub, or use --environment local)");
    if (!nodefile || !*nodefile) comm_fail_all("--environment pbs: PBS_NODEFILE is not set (submit with qsub, or use --environment local)");
    FILE *f = path_fopen_read(nodefile);
    if (!f) comm_fail_all("--environment pbs: cannot read PBS_NODEFILE '%s': %s", nodefile, path_strerror(errno));
    // a line per slot, a node's lines together: Open MPI's launch lists each node mpiprocs times;
    // MPICH's (Polaris: mpiexec -ppn 4) often once, with -ppn placing the ranks
    char cur[256], last[256] = "";
    size_t len = 0;
    int slots = 0, hosts = 0, c;
    do {
        c = getc(f);
        if (c != '\n' && c != EOF) {
            if (c != '\r' && len + 1 < sizeof cur) cur[len++] = (char)c;
            continue;
        }
        if (!len) continue;
        cur[len] = 0, len = 0, slots++;
        if (strcmp(cur, last)) hosts++, memcpy(last, cur, sizeof cur);
    } while (c != EOF);
    fclose(f);
    int first = comm_info.local_rank == 0, nodes = 0;
    mpiCheck(MPI_Allreduce(&first, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    const char *name = getenv("PBS_JOBNAME");
    log_msg("PBS job %s%s%s%s, PBS_NODEFILE %s: %d slot(s) for %d rank(s)\n", job, name ? " (" : "", name ? name : "",
             name ? ")" : "", nodefile, slots, comm_info.world);
    // more ranks than slots is -ppn at work, unless they were crowded onto fewer nodes than listed
    if (slots < comm_info.world && nodes < hosts)
        log_msg("warning: PBS_NODEFILE lists %d slot(s) on %d node(s) but %d ranks run on %d: pass mpiexec --hostfile "
                "\"$PBS_NODEFILE\"\n", slots, hosts, comm_info.world, nodes);
}

int comm_pinned_cores(void) {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
}

const char *comm_bind_flags(long cores) {
    static char flags[160];
#ifdef OPEN_MPI
    snprintf(flags, sizeof flags, "mpirun --bind-to none or --map-by slot:PE=%ld", cores);
#else  // Hydra (MPICH's mpiexec) binds nothing unless asked; Cray's PALS mpiexec binds a core a rank
    snprintf(flags, sizeof flags, "mpiexec -bind-to core:%ld (MPICH's Hydra) or --depth %ld --cpu-bind depth (Cray PALS)", cores, cores);
#endif
    return flags;
}

int comm_default_threads(const char **source) {
    const char *v = getenv("OMP_NUM_THREADS");
    if (v && atoi(v) > 0) return *source = "OMP_NUM_THREADS", atoi(v);
    if ((v = getenv("SLURM_CPUS_PER_TASK")) && atoi(v) > 0) return *source = "SLURM_CPUS_PER_TASK", atoi(v);
    int n = comm_pinned_cores();
    *source = "the cores this rank is pinned to";
    // unpinned ranks (--bind-to none, task/none) each see every core of the node: share them
    if (n >= sysconf(_SC_NPROCESSORS_ONLN)) n /= comm_info.local_world, *source = "the node's cores shared by its ranks";
    return n > 0 ? n : 1;
}

void comm_finalize(void) {
#ifdef FSDPC_CUDA
    for (int i = 0; i < NCCL_GROUPS; i++)
        if (nccl_groups[i]) comm_nccl_destroy(nccl_groups[i]->nccl);
#endif
    MPI_Finalize();
}

void comm_set_collective_timeout(double seconds) { collective_timeout = seconds; }

// ---- the watchdog of phases that wait where comm_wait cannot see ----

enum { DEADLINE_TICK_US = 50000 };
static pthread_mutex_t deadline_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t deadline_opened = PTHREAD_COND_INITIALIZER;
static int deadline_depth, deadline_thread;
static char deadline_what[512];
static int64_t deadline_mark_us;  // the phase's start or its last progress (clock_awake_us)

// The timeout passed in a phase: one line, the flight recorder, and the job ends. Rank 0 tells
// at once; another rank only after a grace period, in which rank 0 (in the same phase: ranks
// enter checkpoint I/O together) has normally ended the job, so the job prints one line.
static void __attribute__((noreturn)) deadline_expired(const char *what, double waited) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s made no progress for %.1f s on rank %d (--collective_timeout %g): a rank stopped or died, or "
             "the file system hangs; the job is ended instead of hanging", what, waited, comm_info.rank, collective_timeout);
    flight_dump(msg);
    log_error(msg);  // after the recorder: the error is the last line
    fflush(NULL);
    nccl_abort_all();
    alarm(GRACE_SECONDS * 2);  // an MPI_Abort from this thread that does not end the process: SIGALRM does
    if (comm_info.world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

// a watchdog thread nobody joins; 0, or pthread_create's error
static int start_detached(void *(*fn)(void *)) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, fn, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

static void *deadline_main(void *arg) {
    pthread_mutex_lock(&deadline_lock);
    for (;;) {
        if (!deadline_depth || collective_timeout <= 0) {
            pthread_cond_wait(&deadline_opened, &deadline_lock);
            continue;
        }
        double limit = collective_timeout + (comm_info.rank ? (collective_timeout < GRACE_SECONDS ? collective_timeout : GRACE_SECONDS) : 0);
        int64_t waited = clock_awake_us() - deadline_mark_us;
        if (waited > (int64_t)(limit * 1e6)) {
            char what[sizeof deadline_what];
            memcpy(what, deadline_what, sizeof what);
            pthread_mutex_unlock(&deadline_lock);
            deadline_expired(what, waited / 1e6);
        }
        pthread_mutex_unlock(&deadline_lock);
        usleep(DEADLINE_TICK_US);
        pthread_mutex_lock(&deadline_lock);
    }
    return arg;
}

void comm_deadline_begin(const char *what) {
    pthread_mutex_lock(&deadline_lock);
    if (!deadline_depth++) {
        snprintf(deadline_what, sizeof deadline_what, "%s", what);
        deadline_mark_us = clock_awake_us();
    }
    if (!deadline_thread) {  // started on first use; it sleeps while no phase is open
        int rc = start_detached(deadline_main);
        if (rc) {
            pthread_mutex_unlock(&deadline_lock);
            err_fatal("cannot start the --collective_timeout watchdog thread: %s", strerror(rc));
        }
        deadline_thread = 1;
    }
    pthread_cond_signal(&deadline_opened);
    pthread_mutex_unlock(&deadline_lock);
}

void comm_deadline_progress(void) {
    comm_stop_progress();  // a checkpoint written after a stop moves too
    pthread_mutex_lock(&deadline_lock);
    deadline_mark_us = clock_awake_us();
    pthread_mutex_unlock(&deadline_lock);
}

void comm_deadline_end(void) {
    pthread_mutex_lock(&deadline_lock);
    if (deadline_depth > 0) deadline_depth--;
    pthread_mutex_unlock(&deadline_lock);
}

// ---- the watchdog of stop signals a polling phase never reaches ----

enum { STOP_TICK_US = 100000 };
static const char *volatile stop_watched;  // the phase watched, NULL when none
static _Atomic int64_t stop_progress_us;  // the watched phase's last progress
static pthread_once_t stop_watch_once = PTHREAD_ONCE_INIT;

// Polls rather than waits: a signal handler can set comm_stop_signal but wake nothing.
static void *stop_watch_main(void *arg) {
    int64_t seen_us = 0;  // when this thread first saw the pending signal
    for (;;) {
        usleep(STOP_TICK_US);
        // the handler's store is seen by this thread: an atomic load (sig_atomic_t orders nothing between threads)
        int sig = __atomic_load_n(&comm_stop_signal, __ATOMIC_RELAXED);
        const char *watched = __atomic_load_n(&stop_watched, __ATOMIC_RELAXED);
        if (!sig || !__atomic_load_n(&stop_polled, __ATOMIC_RELAXED) || !watched || collective_timeout <= 0) {
            seen_us = 0;
            continue;
        }
        int64_t now = clock_awake_us();
        if (!seen_us) seen_us = now;
        int64_t since = stop_progress_us > seen_us ? stop_progress_us : seen_us;
        if (now - since <= (int64_t)(collective_timeout * 1e6)) continue;
        char what[400];
        stop_phase = watched;
        snprintf(what, sizeof what, ": nothing moved for %.0f s after it (--collective_timeout %g; a compute kernel that does "
                 "not return?), so it ends without the checkpoint it would have written; nothing partial left; exiting with "
                 "status 75\n", (now - since) / 1e6, collective_timeout);
        stop_exit(sig, what);
    }
    return arg;
}

static void stop_watch_start(void) {
    int rc = start_detached(stop_watch_main);
    if (rc) err_fatal("cannot start the stop-signal watchdog thread: %s", strerror(rc));
}

void comm_stop_watch(const char *phase) {
    stop_progress_us = clock_awake_us();
    __atomic_store_n(&stop_watched, phase, __ATOMIC_RELAXED);
    if (phase) pthread_once(&stop_watch_once, stop_watch_start);
}

void comm_stop_progress(void) { stop_progress_us = clock_awake_us(); }

double comm_peak_mem_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;  // Linux reports KiB
}

// first number in a file (a cgroup control file), or -1 ("max" or absent)
static double read_number(const char *path) {
    FILE *f = path_fopen_read(path);
    double v = -1;
    if (f) {
        if (fscanf(f, "%lf", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

double comm_mem_available(const char **source) {
    double avail = -1;
    *source = "MemAvailable";
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &avail) == 1) {
            avail *= 1024;
            break;
        }
    if (f) fclose(f);
    // cgroup v2: "0::/path" in /proc/self/cgroup; v1 keeps the memory controller elsewhere
    char rel[512] = "", path[700];
    f = fopen("/proc/self/cgroup", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "0::", 3)) {
            snprintf(rel, sizeof rel, "%s", line + 3);
            rel[strcspn(rel, "\n")] = 0;
        }
    if (f) fclose(f);
    static const char *const files[2][2] = {{"memory.max", "memory.current"},
                                             {"memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"}};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/%s", k == 0 ? rel : "", files[k][0]);
        double limit = read_number(path);
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/%s", k == 0 ? rel : "", files[k][1]);
        double used = read_number(path);
        // v1 reports "no limit" as a huge number
        if (limit > 0 && limit < 1e18 && used >= 0 && (avail < 0 || limit - used < avail)) {
            avail = limit - used;
            *source = "cgroup limit";
        }
    }
    return avail;
}

// A job ends once: the checkpoint writer's thread and the training thread may both fail at once,
// and two threads in the ending protocol (fail_comm's barriers) would not match. The first to
// begin ends the job; a later thread stops there and leaves the process to it.
static void end_claim(void) {
    if (!log_end_claim()) pthread_exit(NULL);
}

// err_fatal's hooks: the flight recorder before the error line, then every rank ends
// which collectives this rank finished, which it was in; and no stop line after the error's
static void fatal_before(void) {
    end_claim();
    stop_silent = 1;
    flight_dump("fatal error");
}

static void fatal_end(void) {
    if (exit_hook) exit_hook(0);
    nccl_abort_all();
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited && comm_info.world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
}

void comm_fail_all(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    // Meant for errors every rank sees alike, but a flag or file can differ between nodes: the
    // ranks meet on a communicator of their own, and a rank that waits in vain reports its own
    // message and aborts the job rather than hang (or let the others hang) in MPI_Finalize.
    int inited = 0, arrived = comm_info.world <= 1;
    MPI_Initialized(&inited);
    if (inited && !arrived) {
        MPI_Request req;
        double t0 = MPI_Wtime(), wait = getenv("FSDPC_FAIL_AGREE_SECONDS") ? atof(getenv("FSDPC_FAIL_AGREE_SECONDS")) : 10.0;
        MPI_Ibarrier(fail_comm, &req);
        while (!arrived && MPI_Wtime() - t0 < wait) {
            MPI_Test(&req, &arrived, MPI_STATUS_IGNORE);
            if (!arrived) usleep(1000);
        }
    }
    if (!arrived) comm_fail_local("%s", msg);
    end_claim();
    // an error every rank agreed on is an input error, not a hang: the error is the last line, and
    // the launcher's SIGTERM when another rank leaves first must not add a stop line after it
    stop_silent = 1;
    if (exit_hook) exit_hook(1);  // before the line, which stays the last
    if (comm_info.rank == 0) log_error(msg);
    fflush(stdout);
    if (inited) MPI_Finalize();
    exit(1);
}

void comm_fail_local(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (comm_info.world > 1 && n >= 0 && (size_t)n < sizeof msg) snprintf(msg + n, sizeof msg - (size_t)n, " (rank %d)", comm_info.rank);
    end_claim();
    stop_silent = 1;  // the error is this rank's last line
    log_error(msg);
    fflush(NULL);
    fatal_end();
    exit(1);
}

void comm_abort_all(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    end_claim();
    if (comm_info.rank == 0) log_error(msg);
    fflush(NULL);
    if (exit_hook) exit_hook(0);
    nccl_abort_all();
    if (comm_info.world == 1) _exit(1);
    MPI_Barrier(fail_comm);  // the line is out before any rank's abort can end rank 0
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);  // MPI_Abort does not return; the compiler cannot know
}

void comm_check_distinct_local(const char *value, const char *what, const char *hint) {
    enum { LEN = 64 };
    char mine[LEN] = {0}, *all = callocCheck((size_t)comm_info.local_world, LEN);
    snprintf(mine, sizeof mine, "%s", value);
    MPI_Comm node;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm_info.rank, MPI_INFO_NULL, &node));
    mpiCheck(MPI_Allgather(mine, LEN, MPI_CHAR, all, LEN, MPI_CHAR, node));
    MPI_Comm_free(&node);
    char msg[512] = "";
    for (int i = 0; i < comm_info.local_world && !msg[0]; i++)
        for (int j = i + 1; j < comm_info.local_world && !msg[0]; j++)
            if (all[i * LEN] && !strcmp(all + i * LEN, all + j * LEN))
                snprintf(msg, sizeof msg, "local ranks %d and %d on one node share %s %s: %s", i, j, what, all + i * LEN, hint);
    free(all);
    comm_check_all(msg[0] ? msg : NULL);
}

const char *comm_output_path_problem(const char *path, const char *flag, int replace) {
    static char msg[1200];
    struct stat st;
    if (stat(path, &st) != 0) return NULL;  // a new file: whether it can be created is the caller's open
    const char *what = S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket"
                       : S_ISREG(st.st_mode) || (!replace && S_ISCHR(st.st_mode)) ? NULL : "a device";
    if (!what) return NULL;
    return err_text(msg, sizeof msg, "%s '%s' is %s: give the path of a regular file%s", flag, path_show(path), what,
             replace ? " (it is written under a temporary name and renamed over the path)" : "");
}

FILE *comm_fopen_at(const char *file, int line, const char *path, const char *mode) {
    FILE *f = fopen(path, mode);
    if (!f) err_fatal_at(file, line, "cannot open '%s' (mode %s): %s", path, mode, comm_path_error(path, errno));
    return f;
}

const char *comm_path_error(const char *path, int err) {
    static _Thread_local char msg[1200];  // the checkpoint writer thread names paths too
    struct stat st;
    if (err == EFBIG && limits_file_size() != UINT64_MAX)  // past ulimit -f (SIGXFSZ is ignored: comm_init)
        return snprintf(msg, sizeof msg, "%s (ulimit -f allows %.1f MB: raise it)", strerror(err), limits_file_size() / 1e6), msg;
    char *p = path && (err == ENOTDIR || err == EACCES) ? path_dup(path) : NULL;
    const char *e = NULL;
    for (char *c = p ? p + 1 : NULL; c && *c && !e; c++) {  // each folder on the way, shortest first
        if (*c != '/') continue;
        *c = 0;
        if (stat(p, &st) == 0 && err == ENOTDIR && !S_ISDIR(st.st_mode))
            e = err_text(msg, sizeof msg, "'%s' is a file, not a folder", p);
        else if (stat(p, &st) == 0 && err == EACCES && S_ISDIR(st.st_mode) && access(p, X_OK) != 0)
            e = err_text(msg, sizeof msg, "%s (the folder '%s' cannot be entered)", strerror(err), p);
        *c = '/';
    }
    free(p);
    return e ? e : path_strerror(err);
}

const char *comm_read_problem(const char *path) {
    static char msg[1300];
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK);  // a FIFO does not wait for a writer
    if (fd < 0) return errno == ENOENT ? "it does not exist" : err_text(msg, sizeof msg, "%s", comm_path_error(path, errno));
    int e = fstat(fd, &st) == 0 ? 0 : errno;
    close(fd);
    if (e) return strerror(e);
    if (S_ISDIR(st.st_mode)) return "it is a folder, not a file";
    if (!S_ISREG(st.st_mode)) return "it is not a regular file";
    return st.st_size ? NULL : "it is empty";
}

const char *comm_folder_problem(const char *path, const char *what) {
    static char msg[2600];
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return NULL;
        return err_text(msg, sizeof msg, "%s '%s' is %s, not a folder", what, path_show(path), S_ISREG(st.st_mode) ? "a file" : "a special file");
    }
    if (errno == ENOENT) return NULL;  // made when needed
    return err_text(msg, sizeof msg, "%s '%s': %s", what, path_show(path), comm_path_error(path, errno));
}

CommGroup *comm_world(void) { return &world_group; }

int comm_group_rank(const CommGroup *g) {
    int r;
    mpiCheck(MPI_Comm_rank(g->comm, &r));
    return r;
}

int comm_group_size(const CommGroup *g) {
    int s;
    mpiCheck(MPI_Comm_size(g->comm, &s));
    return s;
}

// ---- requests: every collective is non-blocking underneath, so a wait can watch the clock ----

// The element types the collectives move: fp32, and bf16 as uint16 with a custom sum.
typedef struct {
    MPI_Datatype mpi;
    int bf16;          // selects the MPI sum op and the NCCL type
    const char *name;  // in the trace
    size_t size;
} Elem;
static const Elem F32 = {MPI_FLOAT, 0, "fp32", 4}, BF16 = {MPI_UINT16_T, 1, "bf16", 2}, F64 = {MPI_DOUBLE, 0, "fp64", 8},
                  I32 = {MPI_INT, 0, "int32", 4}, U32 = {MPI_UINT32_T, 0, "uint32", 4}, BYTES = {MPI_BYTE, 0, "bytes", 1};

struct CommRequest {
    MPI_Request req;
    MPI_Request send;  // a ring shift's send (req: its receive); MPI_REQUEST_NULL for a collective
    void *nccl;  // NcclReq for the GPU transport
    CommGroup *g;
    const char *op, *dtype;
    uint64_t seq, flight;
    size_t bytes;
    int64_t start_us;
};

// A collective about to be issued on g: numbered in g's sequence and opened in the flight recorder.
static CommRequest *request_new(CommGroup *g, const char *op, Elem e, size_t count) {
    CommRequest *r = callocCheck(1, sizeof(CommRequest));
    r->send = MPI_REQUEST_NULL;
    r->g = g;
    r->op = op;
    r->dtype = e.name;
    r->seq = ++g->seq;
    r->bytes = count * e.size;
    r->start_us = clock_now_us();
    if (!g->background) r->flight = flight_start(op, g->name, r->seq, r->bytes, r->start_us);
    return r;
}


// What a timed-out rank tells the others on watch_comm.
typedef struct {
    int32_t rank;
    uint64_t seq;
    char op[24], group[16];
} WaitStatus;

// --collective_timeout ran out while waiting on r: print the ring, trade positions with the other
// ranks that timed out (a stopped or dead rank, or one stuck outside any collective, sends
// nothing), name the ranks not heard from, and end the job through MPI_Abort instead of hanging.
// A rank still waiting when another rank's time ran out joins at once (joined), so ranks whose
// waits began far apart are all heard within the grace period.
static void __attribute__((noreturn)) collective_timed_out(const CommRequest *r, double waited, int joined) {
    char why[256];
    snprintf(why, sizeof why, "waited %.1f s in %s #%llu on group %s (%s--collective_timeout %g)", waited, r->op,
             (unsigned long long)r->seq, r->g->name, joined ? "another rank ran out of " : "", collective_timeout);
    flight_dump(why);
    int world = comm_info.world, me = comm_info.rank;
    WaitStatus mine = {.rank = me, .seq = r->seq}, *got = callocCheck((size_t)world, sizeof *got);
    snprintf(mine.op, sizeof mine.op, "%s", r->op);
    snprintf(mine.group, sizeof mine.group, "%s", r->g->name);
    char *heard = callocCheck((size_t)world, 1);
    MPI_Request *sends = callocCheck((size_t)world, sizeof *sends);
    for (int p = 0; p < world; p++)
        if (p != me) MPI_Isend(&mine, sizeof mine, MPI_BYTE, p, TIMEOUT_TAG, watch_comm, &sends[p]);
    got[me] = mine;
    heard[me] = 1;
    int nheard = 1;
    double grace = collective_timeout < GRACE_SECONDS ? collective_timeout : GRACE_SECONDS, t0 = MPI_Wtime();
    while (nheard < world && MPI_Wtime() - t0 < grace) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TIMEOUT_TAG, watch_comm, &flag, &st);
        if (!flag) {
            usleep(1000);
            continue;
        }
        WaitStatus s;
        MPI_Recv(&s, sizeof s, MPI_BYTE, st.MPI_SOURCE, TIMEOUT_TAG, watch_comm, MPI_STATUS_IGNORE);
        if (!heard[st.MPI_SOURCE]) heard[st.MPI_SOURCE] = 1, nheard++;
        got[st.MPI_SOURCE] = s;
    }
    char missing[512] = "", waiting[1024] = "";
    size_t nm = 0, nw = 0;
    int lowest = me;
    for (int p = 0; p < world; p++) {
        if (!heard[p] && nm < sizeof missing)
            nm += snprintf(missing + nm, sizeof missing - nm, "%s%d", nm ? ", " : "", p);
        else if (heard[p] && p != me && nw < sizeof waiting)
            nw += snprintf(waiting + nw, sizeof waiting - nw, "; rank %d waits in %.23s #%llu on %.15s", p, got[p].op,
                           (unsigned long long)got[p].seq, got[p].group);
        if (heard[p] && p < lowest) lowest = p;
    }
    char msg[2048];
    snprintf(msg, sizeof msg, "collective timeout: rank %d %s; %s%s%s", me, why,
             nm ? "rank(s) not arrived (stopped, dead, or stuck outside a collective): " : "every rank is waiting",
             missing, waiting);
    // one error line for the job: the lowest rank that timed out prints it, the others say where they were
    if (me == lowest) log_error(msg);
    else fprintf(stderr, "fsdpc: rank %d: %s\n", me, msg);
    fflush(NULL);
    nccl_abort_all();
    // the job's error line is the lowest rank's: an earlier abort from here could kill it unprinted, so
    // wait out its grace period (its own abort ends this process) before aborting as a fallback
    if (me != lowest) usleep((useconds_t)((grace + 1) * 1e6));
    if (world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

// One non-blocking test of r: 1 when done.
static int request_test(CommRequest *r) {
#ifdef FSDPC_CUDA
    if (r->nccl) {
        const char *err = NULL;
        int done = comm_nccl_test(r->nccl, &err);
        if (err)
            err_fatal("NCCL failed in %s #%llu on group %s: %s (communicators aborted)", r->op, (unsigned long long)r->seq,
                       r->g->name, err);
        return done;
    }
#endif
    int done = 0;
    MPI_Request both[2] = {r->req, r->send};
    mpiCheck(MPI_Testall(2, both, &done, MPI_STATUSES_IGNORE));
    r->req = both[0], r->send = both[1];
    return done;
}

void comm_wait(CommRequest *r) {
    if (!r) return;
    // spin first (most waits are short), then yield the core; the clock is read every few tests
    // a background group's waits are watched by comm_deadline_begin's watchdog instead
    int64_t t0 = clock_awake_us(), limit = r->g->background ? 0 : (int64_t)(collective_timeout * 1e6);
    for (unsigned spins = 1; !request_test(r); spins++) {
        if (spins % 64) continue;
        int64_t waited = clock_awake_us() - t0;
        if (limit > 0 && waited > limit) collective_timed_out(r, waited / 1e6, 0);
        if (limit > 0 && waited > 1000000) {  // a long wait: has another rank already timed out?
            int other = 0;
            MPI_Iprobe(MPI_ANY_SOURCE, TIMEOUT_TAG, watch_comm, &other, MPI_STATUS_IGNORE);
            if (other) collective_timed_out(r, waited / 1e6, 1);
        }
        if (waited > 10000) usleep(100);
    }
    int64_t start = r->start_us, end = clock_now_us();
#ifdef FSDPC_CUDA
    if (r->nccl) comm_nccl_finish(r->nccl, &start, &end);  // the stream's own times when the trace asked for them
#endif
    if (r->g->background) {
        free(r);
        return;
    }
    flight_end(r->flight, end);
    if (trace_on) trace_collective(r->op, r->g->name, r->seq, r->bytes, r->dtype, start, end);
    free(r);
}

// MPI counts are int: large buffers go in chunks
#define COMM_CHUNK ((size_t)1 << 30)

static void allreduce_blocking(CommGroup *g, void *buf, size_t n, Elem e, MPI_Op op) {
    for (size_t o = 0; o < n; o += COMM_CHUNK) {
        int c = (int)(n - o < COMM_CHUNK ? n - o : COMM_CHUNK);
        CommRequest *r = request_new(g, "all-reduce", e, (size_t)c);
        mpiCheck(MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + o * e.size, c, e.mpi, op, g->comm, &r->req));
        comm_wait(r);
    }
}

static void bcast_blocking(CommGroup *g, void *buf, size_t n, Elem e, int root) {
    for (size_t o = 0; o < n; o += COMM_CHUNK) {
        int c = (int)(n - o < COMM_CHUNK ? n - o : COMM_CHUNK);
        CommRequest *r = request_new(g, "broadcast", e, (size_t)c);
        mpiCheck(MPI_Ibcast((char *)buf + o * e.size, c, e.mpi, root, g->comm, &r->req));
        comm_wait(r);
    }
}

void comm_barrier(CommGroup *g) {
    CommRequest *r = request_new(g, "barrier", BYTES, 0);
    mpiCheck(MPI_Ibarrier(g->comm, &r->req));
    comm_wait(r);
}

void comm_allreduce_sum_f32(CommGroup *g, float *buf, size_t n) { allreduce_blocking(g, buf, n, F32, MPI_SUM); }
void comm_allreduce_sum_f64(CommGroup *g, double *buf, size_t n) { allreduce_blocking(g, buf, n, F64, MPI_SUM); }
void comm_allreduce_max_f64(CommGroup *g, double *buf, size_t n) { allreduce_blocking(g, buf, n, F64, MPI_MAX); }
void comm_allreduce_xor_u32(CommGroup *g, uint32_t *buf, size_t n) { allreduce_blocking(g, buf, n, U32, MPI_BXOR); }
void comm_bcast_bytes(CommGroup *g, void *buf, size_t n, int root) { bcast_blocking(g, buf, n, BYTES, root); }

const char *comm_first_error_in(CommGroup *g, const char *local_error) {
    static _Thread_local char msg[1024];  // a background thread agrees on its own errors
    int size = comm_group_size(g), first = local_error ? comm_group_rank(g) : size;
    allreduce_blocking(g, &first, 1, I32, MPI_MIN);
    if (first == size) return NULL;
    // ship the failing rank's message to every rank so exactly one line is printed
    memset(msg, 0, sizeof msg);
    if (local_error) snprintf(msg, sizeof msg, "%s", local_error);
    bcast_blocking(g, msg, sizeof msg, BYTES, first);
    return msg;
}

const char *comm_first_error(const char *local_error) { return comm_first_error_in(&world_group, local_error); }

int comm_thread_multiple(void) { return thread_level >= MPI_THREAD_MULTIPLE; }

CommGroup *comm_group_background(const char *name) {
    CommGroup *g = callocCheck(1, sizeof *g);
    mpiCheck(MPI_Comm_dup(MPI_COMM_WORLD, &g->comm));
    g->name = name;
    g->background = 1;
    return g;
}

int comm_group_fortran(const CommGroup *g) { return (int)MPI_Comm_c2f(g->comm); }

int comm_agree(const char *local_error, char *err, size_t errlen) {
    const char *e = comm_first_error(local_error);
    return e ? err_set(err, errlen, "%s", e) : 0;
}

void comm_check_all(const char *local_error) {
    const char *e = comm_first_error(local_error);
    if (e) comm_fail_all("%s", e);
}

void comm_check_same(uint64_t value, const char *what) {
    uint64_t root = value;
    bcast_blocking(&world_group, &root, sizeof root, BYTES, 0);
    int first = root == value ? comm_info.world : comm_info.rank;
    allreduce_blocking(&world_group, &first, 1, I32, MPI_MIN);
    if (first < comm_info.world)
        comm_fail_all("rank %d has different %s than rank 0 (every rank must be started with the same flags and files)",
                      first, what);
}

static uint64_t text_hash(const char *s) {
    uint64_t x = 0xcbf29ce484222325ULL;
    for (; *s; s++) x = (x ^ (unsigned char)*s) * 0x100000001b3ULL;
    return x;
}

// rank `from`'s text, on every rank (malloc'd)
static char *text_of(const char *mine, int from) {
    uint64_t n = strlen(mine);
    bcast_blocking(&world_group, &n, sizeof n, BYTES, from);
    char *t = mallocCheck((size_t)n + 1);
    if (comm_info.rank == from) memcpy(t, mine, (size_t)n);
    bcast_blocking(&world_group, t, (size_t)n, BYTES, from);
    t[n] = 0;
    return t;
}

int comm_first_different(const char *mine, char **theirs, char **root) {
    uint64_t h = text_hash(mine), h0 = h;
    bcast_blocking(&world_group, &h0, sizeof h0, BYTES, 0);
    int first = h0 == h ? comm_info.world : comm_info.rank;
    allreduce_blocking(&world_group, &first, 1, I32, MPI_MIN);
    *theirs = *root = NULL;
    if (first == comm_info.world) return -1;
    *root = text_of(mine, 0);
    *theirs = text_of(mine, first);
    return first;
}

void comm_gather_bytes(CommGroup *g, const void *buf, size_t n, char **all, size_t *total) {
    int size = comm_group_size(g), me = comm_group_rank(g), len = (int)n;
    if (n > (size_t)INT32_MAX) err_fatal("gather of %zu bytes exceeds MPI's int count", n);
    int *lens = callocCheck((size_t)size, sizeof(int)), *offs = callocCheck((size_t)size, sizeof(int));
    CommRequest *r = request_new(g, "gather", I32, 1);
    mpiCheck(MPI_Igather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, g->comm, &r->req));
    comm_wait(r);
    size_t sum = 0;
    for (int i = 0; i < size; i++) {
        if (sum + (size_t)lens[i] > (size_t)INT32_MAX) err_fatal("gather of more than 2 GB at rank 0");
        offs[i] = (int)sum;
        sum += (size_t)lens[i];
    }
    *all = me == 0 ? mallocCheck(sum) : NULL;
    *total = me == 0 ? sum : 0;
    r = request_new(g, "gather", BYTES, n);
    mpiCheck(MPI_Igatherv(buf, len, MPI_BYTE, *all, lens, offs, MPI_BYTE, 0, g->comm, &r->req));
    comm_wait(r);
    free(lens);
    free(offs);
}

// MPI applies a non-commutative op in rank order: inout = in ++ inout, range by range
static void crc_concat(void *in, void *inout, int *len, MPI_Datatype *type) {
    const CommCrc *a = in;
    CommCrc *b = inout;
    for (int i = 0; i < *len; i++) {
        if (!a[i].len) continue;
        if (!b[i].len) b[i] = a[i];
        else if (a[i].len == UINT64_MAX || b[i].len == UINT64_MAX || a[i].begin + a[i].len != b[i].begin) b[i].len = UINT64_MAX;
        else b[i] = (CommCrc){a[i].begin, a[i].len + b[i].len, crc32_combine(a[i].crc, b[i].crc, (z_off_t)b[i].len)};
    }
}

void comm_allreduce_crc32(CommGroup *g, CommCrc *r, size_t n) {
    static Elem crc = {MPI_DATATYPE_NULL, 0, "crc32", sizeof(CommCrc)};
    static MPI_Op op;
    if (crc.mpi == MPI_DATATYPE_NULL) {
        mpiCheck(MPI_Type_contiguous(3, MPI_UINT64_T, &crc.mpi));
        mpiCheck(MPI_Type_commit(&crc.mpi));
        mpiCheck(MPI_Op_create(crc_concat, 0, &op));
    }
    allreduce_blocking(g, r, n, crc, op);
}

static CommGroup *group_from(MPI_Comm c, const char *name) {
    CommGroup *g = callocCheck(1, sizeof *g);  // nccl stays NULL unless a GPU run sets it
    g->comm = c;
    g->name = name;
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    return g;
}

void comm_make_mesh(int tp, int shard_size, CommGroup **tp_group, CommGroup **shard, CommGroup **replica) {
    MPI_Comm t, s, r;
    int rank = comm_info.rank, block = shard_size * tp;  // rank = (replica * shard_size + shard) * tp + tp rank
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, rank / tp, rank, &t));
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, rank / block * tp + rank % tp, rank, &s));
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, rank % block, rank, &r));
    *tp_group = group_from(t, "tp");
    *shard = group_from(s, "shard");
    *replica = group_from(r, "replica");
#ifdef FSDPC_CUDA
    if (kern_on_gpu()) {  // parameters, gradients and activations live on the GPU: NCCL moves them
        // (a group of one rank gets no NCCL communicator: comm_nccl_init copies its collectives)
        nccl_groups[0] = *shard;
        nccl_groups[1] = *replica;
        nccl_groups[2] = *tp_group;
        nccl_init_groups(0, 3);
    }
#endif
}

void comm_make_cp_group(int tp, int cp, CommGroup **cp_group) {
    MPI_Comm c;
    int rank = comm_info.rank;  // cp consecutive data-parallel ranks rank / tp with the same tp rank
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, rank / tp / cp * tp + rank % tp, rank, &c));
    *cp_group = group_from(c, "cp");
#ifdef FSDPC_CUDA
    if (kern_on_gpu()) {  // the ring moves activations on the GPU
        nccl_groups[8] = *cp_group;
        nccl_init_groups(8, 1);
    }
#endif
}

void comm_make_expert_groups(int tp, int shard_size, int ep, int eshard, CommGroup **ep_group, CommGroup **expert_shard,
                             CommGroup **expert_replica) {
    MPI_Comm e, s, r;
    int rank = comm_info.rank, d = rank / tp, t = rank % tp, es = eshard > 1 ? d % shard_size / ep : 0;
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, d / ep * tp + t, rank, &e));
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, eshard > 1 ? (d / shard_size * ep + d % ep) * tp + t : rank, rank, &s));
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, (d % ep * eshard + es) * tp + t, rank, &r));
    *ep_group = group_from(e, "ep");
    *expert_shard = group_from(s, "expert shard");
    *expert_replica = group_from(r, "expert replica");
#ifdef FSDPC_CUDA
    if (kern_on_gpu()) {
        nccl_groups[3] = *ep_group;
        nccl_groups[4] = *expert_shard;
        nccl_groups[5] = *expert_replica;
        nccl_init_groups(3, 3);
    }
#endif
}

void comm_make_whole_groups(int tp, int shard_size, int ep, int eshard, CommGroup **whole, CommGroup **expert_whole) {
    MPI_Comm w, e;
    int rank = comm_info.rank, d = rank / tp;
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, d / shard_size, rank, &w));
    *whole = group_from(w, "shard x tp");
    *expert_whole = NULL;
    if (ep > 1) {  // the expert shard group's key without its tp rank (comm_make_expert_groups)
        mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, eshard > 1 ? d / shard_size * ep + d % ep : d, rank, &e));
        *expert_whole = group_from(e, "expert shard x tp");
    }
#ifdef FSDPC_CUDA
    if (kern_on_gpu()) {
        nccl_groups[6] = *whole;
        nccl_groups[7] = *expert_whole;
        nccl_init_groups(6, ep > 1 ? 2 : 1);
    }
#endif
}

const char *comm_open_gpu_transport(void) {
#ifdef FSDPC_CUDA
    if (kern_on_gpu() && comm_info.world > 1) return comm_nccl_open();  // one rank moves nothing through NCCL
#endif
    return NULL;
}

#ifdef FSDPC_CUDA
static void nccl_init_groups(int first, int n) {
    for (int i = first; i < first + n; i++)
        nccl_groups[i]->nccl = comm_nccl_init(&nccl_groups[i]->comm, comm_group_rank(nccl_groups[i]), comm_group_size(nccl_groups[i]));
}

static void nccl_abort_all(void) {
    for (int i = 0; i < NCCL_GROUPS; i++)
        if (nccl_groups[i] && nccl_groups[i]->nccl) comm_nccl_abort(nccl_groups[i]->nccl);
}
#define NCCL_ROUTE(g, r, call) \
    if ((g)->nccl) return (r)->nccl = (call), (r)
#define NCCL_TYPE(e) ((e).bf16 ? NCCL_BF16 : NCCL_F32)
#else
#define NCCL_ROUTE(g, r, call)
#endif

// Non-blocking collectives take one int count: FSDP units stay far below 2^31 elements per rank
// (a 70B layer is 0.9e9 elements unsharded), so larger ones are refused, not split.
static int count_of(size_t n) {
    if (n > (size_t)INT32_MAX) err_fatal("collective of %zu elements per rank exceeds MPI's int count", n);
    return (int)n;
}

static MPI_Op sum_op(Elem e) { return e.bf16 ? bf16_sum_op : MPI_SUM; }

// the trace's byte counts are the whole (unsharded) buffer's
static CommRequest *all_gather(CommGroup *g, const void *in, void *out, size_t n, Elem e) {
    CommRequest *r = request_new(g, "all-gather", e, n * (size_t)comm_group_size(g));
    NCCL_ROUTE(g, r, comm_nccl_all_gather(g->nccl, in, out, n, NCCL_TYPE(e), trace_on));
    mpiCheck(MPI_Iallgather(in, count_of(n), e.mpi, out, count_of(n), e.mpi, g->comm, &r->req));
    return r;
}

static CommRequest *reduce_scatter(CommGroup *g, const void *in, void *out, size_t n, Elem e) {
    CommRequest *r = request_new(g, "reduce-scatter", e, n * (size_t)comm_group_size(g));
    NCCL_ROUTE(g, r, comm_nccl_reduce_scatter(g->nccl, in, out, n, NCCL_TYPE(e), trace_on));
    mpiCheck(MPI_Ireduce_scatter_block(in, out, count_of(n), e.mpi, sum_op(e), g->comm, &r->req));
    return r;
}

static CommRequest *allreduce(CommGroup *g, void *buf, size_t n, Elem e, int max) {
    CommRequest *r = request_new(g, max ? "all-reduce max" : "all-reduce", e, n);
    NCCL_ROUTE(g, r, comm_nccl_allreduce(g->nccl, buf, n, NCCL_TYPE(e), max, trace_on));
    mpiCheck(MPI_Iallreduce(MPI_IN_PLACE, buf, count_of(n), e.mpi, max ? MPI_MAX : sum_op(e), g->comm, &r->req));
    return r;
}

CommRequest *comm_all_gather_start(CommGroup *g, const float *in, float *out, size_t n) {
    return all_gather(g, in, out, n, F32);
}
CommRequest *comm_reduce_scatter_start(CommGroup *g, const float *in, float *out, size_t n) {
    return reduce_scatter(g, in, out, n, F32);
}
CommRequest *comm_allreduce_start(CommGroup *g, float *buf, size_t n) { return allreduce(g, buf, n, F32, 0); }
CommRequest *comm_allreduce_max_start(CommGroup *g, float *buf, size_t n) { return allreduce(g, buf, n, F32, 1); }
CommRequest *comm_all_gather_bf16_start(CommGroup *g, const uint16_t *in, uint16_t *out, size_t n) {
    return all_gather(g, in, out, n, BF16);
}
CommRequest *comm_reduce_scatter_bf16_start(CommGroup *g, const uint16_t *in, uint16_t *out, size_t n) {
    return reduce_scatter(g, in, out, n, BF16);
}
CommRequest *comm_allreduce_bf16_start(CommGroup *g, uint16_t *buf, size_t n) { return allreduce(g, buf, n, BF16, 0); }

CommRequest *comm_bcast_start(CommGroup *g, float *buf, size_t n, int root) {
    CommRequest *r = request_new(g, "broadcast", F32, n);
    NCCL_ROUTE(g, r, comm_nccl_bcast(g->nccl, buf, n, root, trace_on));
    mpiCheck(MPI_Ibcast(buf, count_of(n), MPI_FLOAT, root, g->comm, &r->req));
    return r;
}

void comm_all_to_all(CommGroup *g, const void *send, const size_t *send_rows, void *recv, const size_t *recv_rows,
                     size_t row_bytes) {
    int p = comm_group_size(g);
    size_t total = 0;
    for (int j = 0; j < p; j++) total += recv_rows[j];
    Elem row = {MPI_DATATYPE_NULL, 0, "rows", row_bytes};
    CommRequest *r = request_new(g, "all-to-all", row, total);
#ifdef FSDPC_CUDA
    if (g->nccl) {
        r->nccl = comm_nccl_all_to_all(g->nccl, send, send_rows, recv, recv_rows, row_bytes, trace_on);
        comm_wait(r);
        return;
    }
#endif
    int *c = callocCheck(4 * (size_t)p, sizeof(int));  // send counts, displacements, then receive's
    for (int j = 0, so = 0, ro = 0; j < p; j++) {
        c[j] = count_of(send_rows[j]), c[p + j] = so, so = count_of((size_t)so + send_rows[j]);
        c[2 * p + j] = count_of(recv_rows[j]), c[3 * p + j] = ro, ro = count_of((size_t)ro + recv_rows[j]);
    }
    MPI_Datatype rowtype;
    mpiCheck(MPI_Type_contiguous(count_of(row_bytes), MPI_BYTE, &rowtype));
    mpiCheck(MPI_Type_commit(&rowtype));
    mpiCheck(MPI_Ialltoallv(send, c, c + p, rowtype, recv, c + 2 * p, c + 3 * p, rowtype, g->comm, &r->req));
    comm_wait(r);
    MPI_Type_free(&rowtype);
    free(c);
}

CommRequest *comm_ring_shift_start(CommGroup *g, const float *send, float *recv, size_t n) {
    int p = comm_group_size(g), me = comm_group_rank(g);
    CommRequest *r = request_new(g, "ring shift", F32, n);
    NCCL_ROUTE(g, r, comm_nccl_ring_shift(g->nccl, send, recv, n * sizeof(float), (me + 1) % p, (me + p - 1) % p, trace_on));
    mpiCheck(MPI_Irecv(recv, count_of(n), MPI_FLOAT, (me + p - 1) % p, RING_TAG, g->comm, &r->req));
    mpiCheck(MPI_Isend(send, count_of(n), MPI_FLOAT, (me + 1) % p, RING_TAG, g->comm, &r->send));
    return r;
}

void comm_all_gather(CommGroup *g, const float *in, float *out, size_t n) { comm_wait(comm_all_gather_start(g, in, out, n)); }

void comm_reduce_scatter(CommGroup *g, const float *in, float *out, size_t n) {
    comm_wait(comm_reduce_scatter_start(g, in, out, n));
}
