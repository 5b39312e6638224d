// path: see path.h.
#include "path.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "err.h"

int path_is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int path_is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int path_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int path_open_read(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // O_NONBLOCK: a FIFO's open would wait for a writer
    if (fd < 0) return -1;
    struct stat st;
    int e = fstat(fd, &st) ? errno : S_ISDIR(st.st_mode) ? EISDIR : !S_ISREG(st.st_mode) ? EINVAL : 0;
    if (!e && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) e = errno;
    if (!e) return fd;
    close(fd);
    errno = e;
    return -1;
}

FILE *path_fopen_read(const char *path) {
    int fd = path_open_read(path);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
    if (!f && fd >= 0) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

const char *path_strerror(int err) { return err == EINVAL ? "not a regular file (a FIFO, a device or a socket)" : strerror(err); }

char *path_fmt(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) err_fatal("a path's format '%s' does not print", fmt);
    char *s = mallocCheck((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

char *path_dup(const char *s) { return path_fmt("%s", s); }

char *path_join(const char *dir, const char *name) { return path_fmt("%s/%s", dir, name); }

char *path_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    return !slash ? path_dup(".") : slash == path ? path_dup("/") : path_fmt("%.*s", (int)(slash - path), path);
}

void path_set(char **field, const char *value) {
    char *old = *field;
    *field = path_dup(value);
    free(old);
}

const char *path_too_long(const char *what, const char *path) {
    static char why[512];
    size_t n = strlen(path);
    if (n > PATH_MAX - 1)
        return err_text(why, sizeof why, "%s would be a path of %zu characters, beyond the %d the operating system accepts (PATH_MAX); "
                        "use a shorter one", what, n, PATH_MAX - 1);
    for (const char *c = path; *c;) {
        size_t k = strcspn(c, "/");
        if (k > NAME_MAX)
            return err_text(why, sizeof why, "%s would have a file or folder name of %zu characters ('%.40s...'), beyond the %d "
                            "the operating system accepts in one (NAME_MAX); use shorter names", what, k, c, NAME_MAX);
        c += k + (c[k] == '/');
    }
    return NULL;
}

const char *path_show(const char *p) {
    static _Thread_local char bufs[4][PATH_SHOW_MAX + 64];  // the checkpoint writer's thread shows paths too
    static _Thread_local int next;
    size_t n = strlen(p), keep = PATH_SHOW_MAX / 2 - 20;
    if (n <= PATH_SHOW_MAX) return p;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%.*s[...%zu characters...]%s", (int)keep, p, n - 2 * keep, p + n - keep);
    return b;
}

int path_mkdirs(const char *dir, char *err, size_t errlen) {
    char *path = path_dup(dir);
    int rc = 0;
    for (char *c = path + 1; c[-1] && !rc; c++) {
        if (*c != '/' && *c != '\0') continue;
        char keep = *c;
        *c = '\0';
        struct stat st = {0};
        if (mkdir(path, 0777) != 0 && errno != EEXIST) rc = err_set(err, errlen, "cannot create the folder '%s': %s", path, strerror(errno));
        else if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            rc = err_set(err, errlen, "'%s' is %s, not a folder", path, S_ISREG(st.st_mode) ? "a file" : "a special file");
        *c = keep;
    }
    free(path);
    return rc;
}

// The maps path_map_read made: a slot is claimed by a compare-and-swap on `used` and filled before
// `ready` is set, so the SIGBUS handler (path_mapped_name) reads only whole slots. Maps beyond the
// table still work; a fault in one is then a crash without the file's name.
enum { MAPS = 8192 };
static struct {
    int used, ready;
    const char *start;
    size_t len;
    char *name;
} maps[MAPS];

void *path_map_read(int fd, size_t len, long long off, const char *path) {
    void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, (off_t)off);
    if (p == MAP_FAILED) return p;
    for (int i = 0; i < MAPS; i++) {
        int free_slot = 0;
        if (!__atomic_compare_exchange_n(&maps[i].used, &free_slot, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) continue;
        maps[i].start = p, maps[i].len = len, maps[i].name = path_dup(path);
        __atomic_store_n(&maps[i].ready, 1, __ATOMIC_RELEASE);
        break;
    }
    return p;
}

void path_unmap(void *p, size_t len) {
    for (int i = 0; i < MAPS; i++)
        if (__atomic_load_n(&maps[i].ready, __ATOMIC_ACQUIRE) && maps[i].start == p) {
            __atomic_store_n(&maps[i].ready, 0, __ATOMIC_RELEASE);
            free(maps[i].name);
            __atomic_store_n(&maps[i].used, 0, __ATOMIC_RELEASE);
            break;
        }
    munmap(p, len);
}

const char *path_mapped_name(const void *addr) {
    const char *a = addr;
    for (int i = 0; i < MAPS; i++)
        if (__atomic_load_n(&maps[i].ready, __ATOMIC_ACQUIRE) && a >= maps[i].start && a < maps[i].start + maps[i].len)
            return maps[i].name;
    return NULL;
}
