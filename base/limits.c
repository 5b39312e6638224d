// limits: resource limits checked before the libraries that would fail on them (see limits.h).
#include "limits.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

// Open MPI's start-up writes files of several MiB (4 MiB shared-memory segments per rank, PMIx's
// store), and with fewer than a few dozen descriptors it aborts in MPI_Init with its own text.
enum { MPI_FILE_BYTES = 16 << 20, BASE_FILES = 64, FILES_PER_RANK = 2, FILES_RAISED = 4096 };
// the stack Open MPI's start-up and the compute threads need (256 KiB was measured to start; the
// usual default is 8 MiB): a lower soft limit is raised as far as the hard one allows
enum { STACK_NEEDED = 1 << 20, STACK_RAISED = 8 << 20 };
// a process limit (ulimit -u) below this is named in thread-start errors
enum { NPROC_NOTED = 4096 };
// MPI_Init maps its components' libraries, its threads' stacks and a shared-memory segment per
// rank on the node: about 200 MiB for one rank here, 23 MiB more per local rank
#define MPI_START_BYTES ((size_t)256 << 20)
#define MPI_LOCAL_RANK_BYTES ((size_t)32 << 20)

static int launcher_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

// the first of the launcher's variables that holds a positive count, else 1
static long launcher_count(const char *const *vars, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(vars[i]);
        if (v && atol(v) > 0) return atol(v);
    }
    return 1;
}

// the ranks the launcher says it started, and those on this node
static long launcher_world(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_NTASKS"};
    return launcher_count(vars, sizeof vars / sizeof vars[0]);
}
static long launcher_local(void) {
    // Open MPI, MPICH's Hydra, Cray's PALS, Slurm
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"};
    return launcher_count(vars, sizeof vars / sizeof vars[0]);
}

void limits_fail_early(const char *fmt, ...) {
    if (launcher_rank() == 0) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        log_error(msg);
    }
    _exit(1);  // nothing has started that needs an orderly end
}

void limits_check_start(void) {
    // an umask that masks the owner's bits: checkpoints unreadable to the run that wrote them,
    // folders it cannot add to, and Open MPI's session folder broken for every later run
    mode_t mask = umask(0);
    umask(mask);
    if (mask & 0700)
        limits_fail_early("umask %04o takes the owner's own %s permission from the files and folders fsdpc and Open MPI create "
                          "(checkpoints, caches, the session folder): set umask 022 (or 077) before starting fsdpc",
                          (unsigned)mask, mask & 0400 ? "read" : mask & 0200 ? "write" : "search (execute)");
    struct rlimit r;
    long world = launcher_world();
    rlim_t files = (rlim_t)(BASE_FILES + FILES_PER_RANK * world);
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < files) {
        // a low soft limit is raised as far as the hard one allows: only a low hard limit stops the run
        rlim_t want = files > FILES_RAISED ? files : FILES_RAISED;
        struct rlimit raised = {r.rlim_max == RLIM_INFINITY || r.rlim_max > want ? want : r.rlim_max, r.rlim_max};
        if (raised.rlim_cur < files || setrlimit(RLIMIT_NOFILE, &raised) != 0)
            limits_fail_early("ulimit -n %llu (open files) is below the %llu that Open MPI and fsdpc need with %ld rank(s), and the "
                              "hard limit (%llu) allows no more: raise it (ulimit -n %d) before starting fsdpc",
                              (unsigned long long)r.rlim_cur, (unsigned long long)files, world,
                              (unsigned long long)r.rlim_max, FILES_RAISED);
    }
    if (getrlimit(RLIMIT_FSIZE, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < MPI_FILE_BYTES)
        limits_fail_early("ulimit -f %llu KiB (file size) is below the %d MiB that Open MPI's shared-memory files need at start-up "
                          "(checkpoints need more): raise it (ulimit -f unlimited) before starting fsdpc",
                          (unsigned long long)r.rlim_cur / 1024, MPI_FILE_BYTES >> 20);
    signal(SIGXFSZ, SIG_IGN);  // a write past the limit returns EFBIG, which the writers report
    if (getrlimit(RLIMIT_STACK, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < STACK_NEEDED) {
        struct rlimit raised = {r.rlim_max == RLIM_INFINITY || r.rlim_max > STACK_RAISED ? STACK_RAISED : r.rlim_max, r.rlim_max};
        if (raised.rlim_cur < STACK_NEEDED || setrlimit(RLIMIT_STACK, &raised) != 0)
            limits_fail_early("ulimit -s %llu KiB (stack) is below the %d KiB Open MPI's start-up and fsdpc's threads need, and the "
                              "hard limit (%llu KiB) allows no more: raise it (ulimit -s %d) before starting fsdpc",
                              (unsigned long long)r.rlim_cur / 1024, STACK_NEEDED >> 10,
                              (unsigned long long)(r.rlim_max == RLIM_INFINITY ? 0 : r.rlim_max / 1024), STACK_RAISED >> 10);
    }
    // Open MPI's session folder goes under its tmpdir base, else TMPDIR, else /tmp; it cannot
    // start without one, and says so only in its own banner
    const char *base = getenv("OMPI_MCA_orte_tmpdir_base"), *var = "OMPI_MCA_orte_tmpdir_base";
    if (!base || !*base) base = getenv("TMPDIR"), var = "TMPDIR";
    struct stat st;
    if (base && *base && (stat(base, &st) != 0 || !S_ISDIR(st.st_mode) || access(base, W_OK | X_OK) != 0))
        limits_fail_early("%s '%s' %s: Open MPI makes its session folder there; point %s at a folder you can write, or unset it",
                          var, base, stat(base, &st) != 0 ? "does not exist" : !S_ISDIR(st.st_mode) ? "is a file, not a folder"
                                                                                                   : "is a folder you cannot write",
                          var);
    size_t need = MPI_START_BYTES + MPI_LOCAL_RANK_BYTES * (size_t)launcher_local();
    int e = limits_can_map(need);
    if (e) {
        double room = limits_room();
        limits_fail_early("cannot start MPI under %s: %s (its start-up maps about %zu MiB; %.0f MiB of address space left): raise the "
                          "limit", limits_summary()[0] ? limits_summary() : "this system's limits", strerror(e), need >> 20,
                          room > 0 ? room / (1 << 20) : 0.0);
    }
}

const char *limits_summary(void) {
    static char out[256];
    static const struct {
        int res;
        const char *flag;
        long unit;  // ulimit's unit in bytes, or 1 for counts
        const char *what;
    } lims[] = {{RLIMIT_AS, "-v", 1024, "KiB"}, {RLIMIT_DATA, "-d", 1024, "KiB"}, {RLIMIT_NPROC, "-u", 1, "processes"}};
    size_t n = 0;
    out[0] = 0;
    for (size_t i = 0; i < sizeof lims / sizeof lims[0] && n < sizeof out; i++) {
        struct rlimit r;
        if (getrlimit(lims[i].res, &r) != 0 || r.rlim_cur == RLIM_INFINITY) continue;
        // the process limit holds for users other than root, and its usual values are in the tens of thousands
        if (lims[i].res == RLIMIT_NPROC && (geteuid() == 0 || r.rlim_cur >= NPROC_NOTED)) continue;
        n += (size_t)snprintf(out + n, sizeof out - n, "%sulimit %s %llu %s", n ? ", " : "", lims[i].flag,
                              (unsigned long long)(r.rlim_cur / (rlim_t)lims[i].unit), lims[i].what);
    }
    return out;
}

// this process's mapped address space in bytes (/proc/self/statm's first field), or -1
static double mapped_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    int ok = f && fscanf(f, "%llu", &pages) == 1;
    if (f) fclose(f);
    return ok ? (double)pages * (double)sysconf(_SC_PAGESIZE) : -1;
}

double limits_room(void) {
    double room = -1, used = mapped_bytes();
    static const int res[] = {RLIMIT_AS, RLIMIT_DATA};
    for (size_t i = 0; i < 2; i++) {
        struct rlimit r;
        if (getrlimit(res[i], &r) != 0 || r.rlim_cur == RLIM_INFINITY) continue;
        // data counts fewer mappings than the address space: the address space's use bounds it from above
        double left = (double)r.rlim_cur - (used > 0 ? used : 0);
        if (room < 0 || left < room) room = left > 0 ? left : 0;
    }
    return room;
}

int limits_can_map(size_t bytes) {
    if (!bytes) return 0;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return errno ? errno : ENOMEM;
    munmap(p, bytes);
    return 0;
}

uint64_t limits_file_size(void) {
    struct rlimit r;
    return getrlimit(RLIMIT_FSIZE, &r) != 0 || r.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)r.rlim_cur;
}
