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

// A lock is the file created with O_EXCL, atomic on local and network file systems alike, holding
// "fsdpc-writer <id> <host> <pid> <boot_id> <start>". Another host's processes cannot be checked,
// so a lock of another host is never taken over: its line names the file to remove.
typedef struct {
    char id[32], host[256], boot[64];
    long pid;
    unsigned long long start;  // the process's start in clock ticks after boot; 0 in older locks: unknown
} Lock;

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

static int read_lock(const char *path, Lock *l) {
    char line[512];
    FILE *f = path_fopen_read(path);
    l->id[0] = 0;
    l->start = 0;
    int ok = f && fgets(line, sizeof line, f) &&
             sscanf(line, "fsdpc-writer %31s %255s %ld %63s %llu", l->id, l->host, &l->pid, l->boot, &l->start) >= 4 && l->pid > 0;
    if (f) fclose(f);
    return ok;
}

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

// Removes the dead writer d's lock. Moved aside first, atomically: when another writer took it over
// in the meantime, the file moved is that writer's fresh lock, which goes back (two writers
// seeing one dead lock must not both end up holding it).
static void take_dead(const char *lock, const char *mine, const Lock *d) {
    size_t n = strlen(mine) + 8;
    char *aside = mallocCheck(n);
    snprintf(aside, n, "%s.dead", mine);
    Lock o;
    if (rename(lock, aside) == 0 && read_lock(aside, &o) && (strcmp(o.id, d->id) || o.pid != d->pid || o.start != d->start) &&
        link(aside, lock) != 0 && no_hard_links(errno))  // not the dead one: returned, and the next look finds it held
        (void)renameat2(AT_FDCWD, aside, AT_FDCWD, lock, RENAME_NOREPLACE);
    unlink(aside);
    free(aside);
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
    // the name exists, atomically on local and network file systems alike, and another writer never
    // reads a lock that is still empty
    char *mine = wlock_tmp_name(lock, id);
    int fd = open(mine, O_WRONLY | O_CREAT | O_TRUNC, 0644), ok = fd >= 0 && write(fd, line, (size_t)len) == len, why = errno;
    if (fd >= 0 && close(fd) != 0 && ok) ok = 0, why = errno;
    if (!ok) {
        unlink(mine);
        free(mine);
        *sys = why;
        return err_text(msg, sizeof msg, "cannot write the writer lock '%s': %s", lock, strerror(why));
    }
    for (int attempt = 0, empty_waits = 0;; attempt++) {
        if (place(mine, lock, line, len) == 0) break;
        if (errno != EEXIST) {
            why = errno;
            unlink(mine);
            free(mine);
            return err_text(msg, sizeof msg, "cannot create the writer lock '%s': %s", lock, strerror(why));
        }
        int parsed = read_lock(lock, &o);
        struct stat ls;
        // read empty, but its line written since (place()'s last fallback): read again
        if (!parsed && stat(lock, &ls) == 0 && ls.st_size > 0) parsed = read_lock(lock, &o);
        if (!parsed && access(lock, F_OK) != 0 && attempt < 3) continue;  // released meanwhile
        // place()'s last fallback, still being written: its writer may be descheduled on a loaded
        // node, so the wait is counted in time (5 s), apart from the takeover attempts
        if (!parsed && empty_waits < 250 && stat(lock, &ls) == 0 && ls.st_size == 0) {
            empty_waits++, attempt--;
            usleep(20000);
            continue;
        }
        int here = parsed && !strcmp(o.host, host), dead = parsed && wlock_ended(lock) == 1;
        if (!parsed)
            return unlink(mine), free(mine), err_text(msg, sizeof msg, "'%s' is not an fsdpc writer lock; if no run is writing to %s '%s', remove it", lock, flag, output);
        if (!dead && here)
            return unlink(mine), free(mine), err_text(msg, sizeof msg, "another fsdpc run (run %s, pid %ld on this host) is writing %s to '%s'; wait for it to end or give "
                                 "this run another %s", o.id, o.pid, kind, output, flag);
        if (!dead)
            return unlink(mine), free(mine), err_text(msg, sizeof msg, "fsdpc run %s on host %s (pid %ld) holds the writer lock '%s'; if that run is gone (a lost node), "
                                 "remove the file and start again", o.id, o.host, o.pid, lock);
        if (attempt >= 3) return unlink(mine), free(mine), err_text(msg, sizeof msg, "cannot take over the writer lock '%s': another run keeps taking it", lock);
        log_msg("Taking over the writer lock of run %s in %s (its process %ld on this host is gone%s)\n", o.id, output, o.pid,
                pid_reused(&o) ? "; that pid now runs another program" : "");
        take_dead(lock, mine, &o);
    }
    unlink(mine);
    free(mine);
    struct stat st;
    if (stat(lock, &st) != 0) {  // removed the moment it was made: another writer took it over
        why = errno;
        return err_text(msg, sizeof msg, "the writer lock '%s' vanished as it was taken: %s", lock, strerror(why));
    }
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
    if (read_lock(lock, &l) && !strcmp(l.id, id)) return NULL;
    return err_text(msg, sizeof msg, "this run no longer holds the writer lock '%s' (removed, or taken over by another run)", lock);
}

int wlock_ended(const char *lock) {
    char host[256], boot[64];
    Lock l;
    if (!read_lock(lock, &l)) return -1;
    host_identity(host, sizeof host, boot, sizeof boot);
    return !strcmp(l.host, host) && (strcmp(l.boot, boot) != 0 || !process_running(&l));
}

void wlock_release(const char *lock, const char *id) {
    int at = held_at(lock, id);
    for (int i = 0; at < 0 && i < nheld; i++)  // the file is gone or another's: forget the hold
        if (held[i].refs && !strcmp(held[i].path, lock) && !strcmp(held[i].id, id)) at = i;
    if (at < 0 || --held[at].refs) return;
    Lock l;
    if (read_lock(held[at].path, &l) && !strcmp(l.id, id) && l.pid == (long)getpid()) unlink(held[at].path);
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
