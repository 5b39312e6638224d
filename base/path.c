// path: see path.h.
#include "path.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
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

void path_join(char *out, size_t len, const char *dir, const char *name) { snprintf(out, len, "%s/%s", dir, name); }

void path_dirname(char *out, size_t len, const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, len, ".");
    else if (slash == path) snprintf(out, len, "/");
    else snprintf(out, len, "%.*s", (int)(slash - path), path);
}

int path_mkdirs(const char *dir, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    for (char *c = path + 1;; c++) {
        if (*c != '/' && *c != '\0') continue;
        char keep = *c;
        *c = '\0';
        struct stat st = {0};
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return err_set(err, errlen, "cannot create the folder '%s': %s", path, strerror(errno));
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            return err_set(err, errlen, "'%s' is %s, not a folder", path, S_ISREG(st.st_mode) ? "a file" : "a special file");
        *c = keep;
        if (!keep) break;
    }
    return 0;
}
