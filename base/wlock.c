// wlock: see wlock.h.
#define _GNU_SOURCE  // renameat2
#include "wlock.h"
#include "path.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "err.h"
#include "log.h"

// A lock is one line, "fsdpc-writer <id> <host> <pid> <boot_id> <start>\n", in the file at the lock's
// name, placed there only where the name is free (place()). Another host's processes cannot be
// checked, so a lock of another host is never taken over: its line names the file to remove.
typedef struct {
    char id[32], host[256], boot[64];
    long pid;
    unsigned long long start;  // the process's start in clock ticks after boot; 0 in older locks: unknown
} Lock;

// What a reading of a lock's file found: no file; a file without its whole line yet (place()'s last
// fallback creates the file before it writes the line: empty, or over a network file system partly
// written), whose writer may still be at it; something else; a writer's whole line.
typedef enum { LOCK_GONE, LOCK_MAKING, LOCK_FOREIGN, LOCK_OK } LockRead;

// A file that its writer makes and completes at once (a lock's line after its exclusive create, a
// takeover's marker) still unfinished this many seconds after it was last written: its writer
// stopped there. Readers wait for it that long, by its age and by their own wait alike (a network
// file system's clock may differ from this host's).
enum { WLOCK_MAKING_S = 30, WLOCK_WAIT_US = 20000 };

// the locks this process holds; released at exit (an error's exit too)
static struct {
    char *path, id[WLOCK_ID_LEN + 1];
    dev_t dev;
    ino_t ino;
    int refs;
} *held;
static int nheld;
static size_t held_cap;
static char msg[16384];  // the last error line: room for the longest paths the system takes

void wlock_new_id(char id[WLOCK_ID_LEN + 1]) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
        struct timespec ts;  // no entropy source: the clock and pid still differ between runs
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_sec * 6364136223846793005ULL ^ (uint64_t)ts.tv_nsec << 16 ^ (uint64_t)getpid();
    }
    snprintf(id, WLOCK_ID_LEN + 1, "%016" PRIx64, x);
}

static char *concat(const char *a, const char *b, const char *c) { return path_fmt("%s%s%s", a, b, c); }

char *wlock_path(const char *output, int is_dir) {
    if (is_dir) return concat(output, "/", ".fsdpc-writer");
    const char *slash = strrchr(output, '/');
    if (!slash) return concat(".", output, ".fsdpc-writer");
    char *dir = concat(output, "", "");
    dir[slash - output + 1] = 0;
    char *hidden = concat(dir, ".", slash + 1), *p = concat(hidden, ".fsdpc-writer", "");
    free(dir);
    free(hidden);
    return p;
}

static LockRead read_lock(const char *path, Lock *l, struct stat *st) {
    static const char tag[] = "fsdpc-writer ";
    char line[512] = "";
    memset(l, 0, sizeof *l);
    FILE *f = path_fopen_read(path);
    if (!f) return errno == ENOENT ? LOCK_GONE : LOCK_FOREIGN;
    struct stat s = {0};
    int got = fstat(fileno(f), &s) == 0 && fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (st) *st = s;
    size_t n = got ? strlen(line) : 0;  // a NUL read (a block not yet written) ends the line early
    if (strncmp(line, tag, n < sizeof tag - 1 ? n : sizeof tag - 1)) return LOCK_FOREIGN;
    if (!n || line[n - 1] != '\n') return n >= sizeof line - 1 ? LOCK_FOREIGN : LOCK_MAKING;
    int ok = sscanf(line, "fsdpc-writer %31s %255s %ld %63s %llu", l->id, l->host, &l->pid, l->boot, &l->start) >= 4 && l->pid > 0;
    return ok ? LOCK_OK : LOCK_FOREIGN;
}

static int same_writer(const Lock *a, const Lock *b) {
    return !strcmp(a->id, b->id) && !strcmp(a->host, b->host) && a->pid == b->pid && !strcmp(a->boot, b->boot) && a->start == b->start;
}

// seconds since st's file was last written, by this host's clock
static double age_s(const struct stat *st) { return difftime(time(NULL), st->st_mtime); }

// Field 22 of /proc/<pid>/stat, the process's start after boot, for `pid` (0: this process), and
// its state (field 3) into *state unless NULL; 0 when /proc cannot tell. The command name (field
// 2) may hold spaces and parentheses: the fields are counted from its closing one.
static unsigned long long process_start(long pid, char *state) {
    char path[64], buf[1024], st;
    unsigned long long start = 0;
    if (pid) snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    else snprintf(path, sizeof path, "/proc/self/stat");
    FILE *f = path_fopen_read(path);
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    if (!p || sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu", &st, &start) != 2)
        return 0;
    if (state) *state = st;
    return start;
}

// For a lock without its process's start (older builds): whether pid runs fsdpc, by its command
// name or its executable being this one; a pid reused by another program (pid 1 after a container
// restart) is not. Where /proc shows no command name, it may be.
static int process_is_fsdpc(long pid) {
    char path[64], comm[32] = "";
    snprintf(path, sizeof path, "/proc/%ld/comm", pid);
    FILE *f = path_fopen_read(path);
    if (!f) return 1;
    int named = fgets(comm, sizeof comm, f) != NULL;
    fclose(f);
    if (!named || !strncmp(comm, "fsdpc", 5)) return 1;
    struct stat theirs, mine;
    snprintf(path, sizeof path, "/proc/%ld/exe", pid);
    // another command name: fsdpc only if it is this very executable, renamed (unknown: not)
    return stat(path, &theirs) == 0 && stat("/proc/self/exe", &mine) == 0 && theirs.st_dev == mine.st_dev &&
           theirs.st_ino == mine.st_ino;
}

// Whether the process that wrote lock l on this host still runs. A zombie has ended though
// kill(pid, 0) still finds it: the ranks of a job that failed stay zombies until reaped, for a
// second or so after mpirun returns, and a run started right after it must not be refused. A
// process that started at another time than the lock records has taken over a reused pid.
// Without /proc (or where it hides others' processes) the pid alone decides.
static int process_running(const Lock *l) {
    char state = 0;
    unsigned long long start = process_start(l->pid, &state);
    if (!start) return !(kill((pid_t)l->pid, 0) != 0 && errno == ESRCH);
    return state != 'Z' && state != 'X' && (l->start ? start == l->start : process_is_fsdpc(l->pid));
}

// whether lock l's pid runs, but not as its writer: another program took the number over
static int pid_reused(const Lock *l) {
    char state = 0;
    return process_start(l->pid, &state) && state != 'Z' && state != 'X' && !process_running(l);
}

static void host_identity(char *host, size_t hlen, char *boot, size_t blen) {
    if (gethostname(host, hlen) != 0 || !host[0]) snprintf(host, hlen, "unknown");
    host[hlen - 1] = 0;
    host[strcspn(host, " \t\n")] = 0;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(boot, (int)blen, f)) snprintf(boot, blen, "unknown");
    boot[strcspn(boot, " \t\n")] = 0;
    if (f) fclose(f);
}

// whether lock l's writer provably ended: it is of this host (host, boot), and the host rebooted
// since or its process is gone
static int lock_ended(const Lock *l, const char *host, const char *boot) {
    return !strcmp(l->host, host) && (strcmp(l->boot, boot) != 0 || !process_running(l));
}

static void release_all(void) {
    for (int i = 0; i < nheld; i++)
        while (held[i].refs) wlock_release(held[i].path, held[i].id);
}

// the entry holding the file at lock for id, or -1
static int held_at(const char *lock, const char *id) {
    struct stat st;
    if (stat(lock, &st) != 0) return -1;
    for (int i = 0; i < nheld; i++)
        if (held[i].refs && held[i].dev == st.st_dev && held[i].ino == st.st_ino && !strcmp(held[i].id, id)) return i;
    return -1;
}

// whether link() failed for want of hard links on the file system (SMB, FUSE object stores)
static int no_hard_links(int e) { return e == EPERM || e == ENOTSUP || e == EOPNOTSUPP || e == ENOSYS || e == EMLINK; }

static char *marker_path(const char *lock) { return concat(lock, ".takeover", ""); }

// Removes the lock of the ended writer d under the marker <lock>.takeover, made with O_EXCL
// (atomic on every file system, network ones too). A lock's file is removed only by its writer or
// by the marker's maker after it read d's whole line there again: a lock placed meanwhile (by a
// taker of d before this one, or by a writer that found the name free) stays, and of two takers
// of d one removes it. Once the name is free any writer may place its lock first; the next look
// finds it held. 0: d's lock is gone; 1: another taker holds the marker (wait unless !may_wait);
// -1: msg says why.
static int take_dead(const char *lock, const Lock *d, const char *flag, const char *output, int may_wait) {
    char *marker = marker_path(lock);
    int fd = open(marker, O_WRONLY | O_CREAT | O_EXCL, 0644), e = errno, rc = 0;
    struct stat ms;
    Lock now;
    if (fd < 0 && e == EEXIST && (!may_wait || (stat(marker, &ms) == 0 && age_s(&ms) >= WLOCK_MAKING_S))) {
        rc = -1;
        err_text(msg, sizeof msg, "'%s' was left by a run stopped while it took over the writer lock '%s' of an ended run; if no "
                 "fsdpc run is writing to %s '%s', remove both files", marker, lock, flag, output);
    } else if (fd < 0 && e != EEXIST) {
        rc = -1;
        err_text(msg, sizeof msg, "cannot take over the writer lock '%s' of ended run %s: cannot create '%s': %s", lock, d->id, marker, strerror(e));
    } else if (fd < 0) {
        rc = 1;
    } else {
        close(fd);
        if (read_lock(lock, &now, NULL) == LOCK_OK && same_writer(&now, d)) {
            if (unlink(lock) == 0)
                log_msg("Taking over the writer lock of run %s in %s (its process %ld on this host is gone%s)\n", d->id, output, d->pid,
                        pid_reused(d) ? "; that pid now runs another program" : "");
            else rc = -1, e = errno, err_text(msg, sizeof msg, "cannot remove the writer lock '%s' of ended run %s: %s", lock, d->id, strerror(e));
        }
        unlink(marker);
    }
    free(marker);
    return rc;
}

// The lock's file under its name from this writer's whole copy `mine`: a hard link, which fails
// when the name exists. Where the file system has no hard links (SMB, FUSE object stores), mine
// renamed there without replacing; where it has neither, an exclusive create written in place,
// empty for a moment (readers wait for its line). 0, or -1 with errno (EEXIST: another writer's).
static int place(const char *mine, const char *lock, const char *line, int len) {
    if (link(mine, lock) == 0) return 0;
    if (!no_hard_links(errno)) return -1;
    if (renameat2(AT_FDCWD, mine, AT_FDCWD, lock, RENAME_NOREPLACE) == 0) return 0;
    if (errno == EEXIST) return -1;
    int fd = open(lock, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) return -1;
    clock_test_pause("wlock-create");
    int ok = write(fd, line, (size_t)len) == len, e = errno;
    if (close(fd) != 0 && ok) ok = 0, e = errno;
    if (ok) return 0;
    unlink(lock);
    errno = e;
    return -1;
}

const char *wlock_take(const char *lock, const char *id, const char *flag, const char *output, const char *kind, int *sys) {
    char host[256], boot[64], line[512];
    Lock o;  // another writer's
    *sys = 0;
    int at = held_at(lock, id);
    if (at >= 0) return held[at].refs++, NULL;
    host_identity(host, sizeof host, boot, sizeof boot);
    int len = snprintf(line, sizeof line, "fsdpc-writer %s %s %ld %s %llu\n", id, host, (long)getpid(), boot, process_start(0, NULL));
    // written whole under a name of this writer's, then linked to the lock's name: link() fails when
    // the name exists, atomically on local and network file systems alike, and another writer reads
    // the whole line (but after place()'s last fallback, which it waits for)
    char *mine = wlock_tmp_name(lock, id);
    int fd = open(mine, O_WRONLY | O_CREAT | O_TRUNC, 0644), ok = fd >= 0 && write(fd, line, (size_t)len) == len, why = errno;
    if (fd >= 0 && close(fd) != 0 && ok) ok = 0, why = errno;
    if (!ok) {
        unlink(mine);
        free(mine);
        *sys = why;
        return err_text(msg, sizeof msg, "cannot write the writer lock '%s': %s", lock, strerror(why));
    }
    const char *e = NULL;
    for (int attempt = 0, waits = 0; !e;) {
        int patient = waits < WLOCK_MAKING_S * (1000000 / WLOCK_WAIT_US);
        if (place(mine, lock, line, len) == 0) break;
        if (errno != EEXIST) {
            e = err_text(msg, sizeof msg, "cannot create the writer lock '%s': %s", lock, strerror(errno));
            break;
        }
        struct stat ls;
        LockRead r = read_lock(lock, &o, &ls);
        if (r == LOCK_GONE && attempt < 3) {  // released meanwhile
            attempt++;
            continue;
        }
        if (r == LOCK_MAKING && patient && age_s(&ls) < WLOCK_MAKING_S) {  // its writer is writing the line
            waits++, usleep(WLOCK_WAIT_US);
            continue;
        }
        int here = r == LOCK_OK && !strcmp(o.host, host), dead = r == LOCK_OK && lock_ended(&o, host, boot);
        if (r == LOCK_MAKING)
            e = err_text(msg, sizeof msg, "'%s' has held no whole writer line for %.0f s: a writer stopped while it made it, or it is "
                         "not an fsdpc writer lock; if no run is writing to %s '%s', remove it", lock, age_s(&ls), flag, output);
        else if (r == LOCK_FOREIGN)
            e = err_text(msg, sizeof msg, "'%s' is not an fsdpc writer lock; if no run is writing to %s '%s', remove it", lock, flag, output);
        else if (r == LOCK_OK && !dead && here)
            e = err_text(msg, sizeof msg, "another fsdpc run (run %s, pid %ld on this host) is writing %s to '%s'; wait for it to end or "
                         "give this run another %s", o.id, o.pid, kind, output, flag);
        else if (r == LOCK_OK && !dead)
            e = err_text(msg, sizeof msg, "fsdpc run %s on host %s (pid %ld) holds the writer lock '%s'; if that run is gone (a lost "
                         "node), remove the file and start again", o.id, o.host, o.pid, lock);
        else if (attempt >= 3)
            e = err_text(msg, sizeof msg, "cannot take over the writer lock '%s': another run keeps taking it", lock);
        if (e) break;
        clock_test_pause("wlock-takeover");
        int t = take_dead(lock, &o, flag, output, patient);
        if (t < 0) e = msg;
        else if (t == 0) attempt++;
        else waits++, usleep(WLOCK_WAIT_US);
    }
    unlink(mine);
    free(mine);
    if (e) return e;
    struct stat st;
    if (stat(lock, &st) != 0) {  // removed the moment it was made: another writer took it over
        why = errno;
        return err_text(msg, sizeof msg, "the writer lock '%s' vanished as it was taken: %s", lock, strerror(why));
    }
    // a marker left by a taker stopped after it removed the lock it took over: while this writer
    // holds the lock no taker removes anything (none reads its ended writer's line there)
    char *marker = marker_path(lock);
    struct stat ms;
    if (stat(marker, &ms) == 0 && age_s(&ms) >= WLOCK_MAKING_S) unlink(marker);
    free(marker);
    if (!nheld) atexit(release_all);
    buf_fit(held, &held_cap, (size_t)nheld + 1);
    held[nheld].path = concat(lock, "", "");
    snprintf(held[nheld].id, sizeof held[nheld].id, "%s", id);
    held[nheld].dev = st.st_dev;
    held[nheld].ino = st.st_ino;
    held[nheld++].refs = 1;
    return NULL;
}

const char *wlock_lost(const char *lock, const char *id) {
    Lock l;
    if (read_lock(lock, &l, NULL) == LOCK_OK && !strcmp(l.id, id)) return NULL;
    return err_text(msg, sizeof msg, "this run no longer holds the writer lock '%s' (removed, or taken over by another run)", lock);
}

int wlock_ended(const char *lock) {
    char host[256], boot[64];
    Lock l;
    if (read_lock(lock, &l, NULL) != LOCK_OK) return -1;
    host_identity(host, sizeof host, boot, sizeof boot);
    return lock_ended(&l, host, boot);
}

void wlock_release(const char *lock, const char *id) {
    int at = held_at(lock, id);
    for (int i = 0; at < 0 && i < nheld; i++)  // the file is gone or another's: forget the hold
        if (held[i].refs && !strcmp(held[i].path, lock) && !strcmp(held[i].id, id)) at = i;
    if (at < 0 || --held[at].refs) return;
    Lock l;
    if (read_lock(held[at].path, &l, NULL) == LOCK_OK && !strcmp(l.id, id) && l.pid == (long)getpid()) unlink(held[at].path);
}

char *wlock_tmp_name(const char *final, const char *id) {
    char *a = concat(final, ".", id), *s = concat(a, ".tmp", "");
    free(a);
    return s;
}

int wlock_is_tmp(const char *name, char id[WLOCK_ID_LEN + 1]) {
    size_t n = strlen(name);
    if (n < WLOCK_ID_LEN + 6 || strcmp(name + n - 4, ".tmp") != 0 || name[n - 5 - WLOCK_ID_LEN] != '.') return 0;
    const char *h = name + n - 4 - WLOCK_ID_LEN;
    for (int i = 0; i < WLOCK_ID_LEN; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f'))) return 0;
    if (id) memcpy(id, h, WLOCK_ID_LEN), id[WLOCK_ID_LEN] = 0;
    return 1;
}

const char *wlock_check_renamed(const char *final, unsigned long long dev, unsigned long long ino) {
    struct stat st;
    if (stat(final, &st) == 0 && (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino) return NULL;
    return err_text(msg, sizeof msg, "'%s' is not the file this run just wrote there: another program replaced or removed it meanwhile (is "
                         "another run writing to the same output?)", final);
}
