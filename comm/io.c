// io: inputs and outputs compared by file identity, and checked stream writes (see io.h).
#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/err.h"
#include "../base/path.h"
#include "../base/wlock.h"
#include "comm.h"

typedef struct {
    char *path, *label;  // as given; what the file is (an input's description, an output's flag)
    dev_t dev;           // an input's identity (inputs are noted once they exist)
    ino_t ino;
} IoFile;

static IoFile *inputs, *outputs;
static size_t ninputs, noutputs, inputs_cap, outputs_cap;
static char conflict[2400];

static void io_push(IoFile **list, size_t *n, size_t *cap, const char *path, const char *label, const struct stat *st) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        IoFile *grown = mallocCheck(*cap * sizeof *grown);
        if (*n) memcpy(grown, *list, *n * sizeof *grown);
        free(*list);
        *list = grown;
    }
    (*list)[(*n)++] = (IoFile){path_dup(path), path_dup(label), st ? st->st_dev : 0, st ? st->st_ino : 0};
}

// A path's folder (stat'ed into *st) and its last component (*name); 0 when the path ends in '/'
// or its folder cannot be stat'ed: it names no file that could be written.
static int io_folder(const char *path, struct stat *st, const char **name) {
    const char *slash = strrchr(path, '/');
    *name = slash ? slash + 1 : path;
    if (!**name) return 0;
    char *dir = path_dirname(path);
    int ok = stat(dir, st) == 0;
    free(dir);
    return ok;
}

// Whether two outputs are one file: both regular files of one identity, or both still absent
// under one folder and name. A device or anything else that exists is never "the same" (two
// outputs may both be /dev/null).
static int io_same_output(const char *a, const char *b) {
    struct stat sa, sb;
    int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea && eb) return S_ISREG(sa.st_mode) && S_ISREG(sb.st_mode) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea || eb) return 0;
    const char *na, *nb;
    return io_folder(a, &sa, &na) && io_folder(b, &sb, &nb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && !strcmp(na, nb);
}

static const char *io_keep(const char *msg) {
    if (!conflict[0]) snprintf(conflict, sizeof conflict, "%s", msg);
    return msg;
}

static const char *io_overwrites(const char *flag, const char *out, const IoFile *in) {
    static char msg[2400];
    int is_flag = !strncmp(flag, "--", 2);  // else a stream the shell redirected ("standard output")
    return err_text(msg, sizeof msg, "%s '%s' %s %s '%s': writing it would overwrite an input of this run; %s %s %s", flag, out,
             strcmp(out, in->path) ? "is the same file as" : "is", in->label, in->path, is_flag ? "give" : "send", flag,
             is_flag ? "another path" : "elsewhere");
}

// The noted input that `path` is, or NULL.
static const IoFile *io_input_at(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return NULL;
    for (size_t i = 0; i < ninputs; i++)
        if (inputs[i].dev == st.st_dev && inputs[i].ino == st.st_ino) return &inputs[i];
    return NULL;
}

const char *io_output_check(const char *path, const char *flag) {
    static char msg[2400];
    const IoFile *in = io_input_at(path);
    if (in) return io_overwrites(flag, path, in);
    for (size_t i = 0; i < noutputs; i++)
        if (strcmp(outputs[i].label, flag) && io_same_output(path, outputs[i].path)) {
            return err_text(msg, sizeof msg, "%s '%s' is the same file as %s '%s': the two outputs would overwrite each other; give them "
                     "different paths", flag, path_show(path), outputs[i].label, outputs[i].path);
        }
    return NULL;
}

void io_guard_std_streams(void) {
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {  // the lowest free number: fd itself
            int got = open("/dev/null", (fd ? O_RDONLY : O_WRONLY));
            if (got >= 0 && got != fd) close(got);
        }
}

const char *io_stdout_open(void) {
    int fl = fcntl(STDOUT_FILENO, F_GETFL);  // io_guard_std_streams left a closed one read-only
    if (fl >= 0 && (fl & O_ACCMODE) != O_RDONLY) return NULL;
    return "standard output is closed (the launch gave >&-, to fsdpc or to mpirun): what this run writes there would be lost; "
           "redirect it to a file, or to /dev/null to discard it";
}

const char *io_output(const char *path, const char *flag) {
    const char *e = io_output_check(path, flag);
    if (e) return io_keep(e);
    io_push(&outputs, &noutputs, &outputs_cap, path, flag, NULL);
    return NULL;
}

const char *io_input(const char *path, const char *what) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || io_input_at(path)) return NULL;
    io_push(&inputs, &ninputs, &inputs_cap, path, what, &st);
    // an output noted earlier (the order callers resolve things in does not matter)
    for (size_t i = 0; i < noutputs; i++) {
        struct stat so;
        if (stat(outputs[i].path, &so) == 0 && so.st_dev == st.st_dev && so.st_ino == st.st_ino)
            return io_keep(io_overwrites(outputs[i].label, outputs[i].path, &inputs[ninputs - 1]));
    }
    return NULL;
}

int io_is_output(const char *path) {
    struct stat st, so;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    const int streams[2] = {STDOUT_FILENO, STDERR_FILENO};
    for (int i = 0; i < 2; i++)
        if (fstat(streams[i], &so) == 0 && so.st_dev == st.st_dev && so.st_ino == st.st_ino) return 1;
    for (size_t i = 0; i < noutputs; i++)
        if (stat(outputs[i].path, &so) == 0 && so.st_dev == st.st_dev && so.st_ino == st.st_ino) return 1;
    return 0;
}

const char *io_conflict(void) { return conflict[0] ? conflict : NULL; }

// Whether pid holds, besides its descriptor `fd`, another end of the same pipe: a pipe to itself
// (Open MPI's mpirun started with its stdout closed reuses number 1 for its signal pipe, and would
// read the ranks' forwarded text as signals to forward), not an output.
static int pipe_to_itself(int pid, int fd, const struct stat *pipe) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));) {
        struct stat st;
        char fdpath[64 + 256];
        if (e->d_name[0] == '.' || atoi(e->d_name) == fd) continue;
        snprintf(fdpath, sizeof fdpath, "%s/%s", path, e->d_name);
        found = stat(fdpath, &st) == 0 && S_ISFIFO(st.st_mode) && st.st_dev == pipe->st_dev && st.st_ino == pipe->st_ino;
    }
    closedir(d);
    return found;
}

const char *io_launcher_stdout(void) {
    static char msg[160];
    char path[64];
    struct stat mine, theirs;
    // started by Open MPI's launcher itself (mpirun, mpiexec and orterun are one program, orterun;
    // prterun for Open MPI 5), which set its variables before MPI_Init sets a singleton's
    char comm[32] = "";
    snprintf(path, sizeof path, "/proc/%d/comm", (int)getppid());
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
        fclose(f);
    }
    comm[strcspn(comm, "\n")] = 0;
    int launched = getenv("OMPI_COMM_WORLD_SIZE") && (!strcmp(comm, "mpirun") || !strcmp(comm, "mpiexec") ||
                                                      !strcmp(comm, "orterun") || !strcmp(comm, "prterun"));
    snprintf(path, sizeof path, "/proc/%d/fd/1", (int)getppid());
    if (!launched || fstat(STDOUT_FILENO, &mine) != 0 || stat(path, &theirs) != 0 || !S_ISFIFO(theirs.st_mode) ||
        (mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino))
        return NULL;  // no launcher between this process and a pipe
    if (pipe_to_itself((int)getppid(), STDOUT_FILENO, &theirs)) {  // the launcher's stdout was closed: as this one's
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null >= 0 && fflush(stdout) == 0) dup2(null, STDOUT_FILENO);
        if (null >= 0) close(null);
        return NULL;
    }
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC), flags;  // blocking, it would wait for a reader
    if (fd < 0)  // ENXIO: the reader is gone already; anything else: the pipe stays the launcher's to write
        return errno == ENXIO ? err_text(msg, sizeof msg, "cannot write standard output: %s", strerror(EPIPE)) : NULL;
    // where any step fails, stdout stays the launcher's to forward
    if ((flags = fcntl(fd, F_GETFL)) >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 && fflush(stdout) == 0)
        dup2(fd, STDOUT_FILENO);
    close(fd);
    return NULL;
}

const char *io_write_error(FILE *f, const char *what) {
    static char msg[512];
    int err = errno;
    if (fflush(f) != 0) err = errno;
    else if (!ferror(f)) return NULL;
    return err_text(msg, sizeof msg, "cannot write %s: %s", what, strerror(err ? err : EIO));
}

const char *io_check_output_path(const char *output, int is_dir, const char *longest, const char *flag) {
    static char msg[700];
    char id[WLOCK_ID_LEN + 1];
    memset(id, 'f', WLOCK_ID_LEN);  // a writer id's length
    id[WLOCK_ID_LEN] = 0;
    char *lock = wlock_path(output, is_dir), *paths[] = {path_dup(output), wlock_tmp_name(lock, id),
                                                         path_fmt("%s%s%s", output, is_dir ? "/" : "", longest)};
    const char *e = NULL;
    for (int i = 0; i < 3; i++) {
        char *what = i == 0 ? path_dup(flag)
                     : i == 1 ? path_fmt("%s's writer lock '%s'", flag, strrchr(paths[1], '/') ? strrchr(paths[1], '/') + 1 : paths[1])
                     : path_fmt(is_dir ? "%s's file '%s'" : "%s's temporary '...%s'", flag, longest);
        if (!e && (e = path_too_long(what, paths[i]))) e = err_text(msg, sizeof msg, "%s", e);
        free(what);
        free(paths[i]);
    }
    free(lock);
    return e;
}

char *io_lock_output(const char *output, int is_dir, const char *id, const char *flag, const char *kind, const char **err) {
    static char msg[2600];
    char *lock = wlock_path(output, is_dir);
    int sys;
    *err = wlock_take(lock, id, flag, output, kind, &sys);
    if (*err && (sys == ENOTDIR || sys == ENOENT || sys == EACCES))  // the way to the output: its own words
        *err = err_text(msg, sizeof msg, "cannot write %s '%s': %s", flag, path_show(output), comm_path_error(lock, sys));
    if (*err) {
        free(lock);
        return NULL;
    }
    comm_stop_unlink(lock, 1);  // an immediate stop removes it too
    return lock;
}

void io_unlock_output(char *lock, const char *id) {
    if (!lock) return;
    wlock_release(lock, id);
    if (access(lock, F_OK) != 0) comm_stop_unlink(lock, 0);
    free(lock);
}
