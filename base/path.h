// path: the file-system questions and path strings every layer asks about (one copy of each).
// base/ is the ground floor: nothing of the project outside base/ is included.
#ifndef FSDPC_BASE_PATH_H
#define FSDPC_BASE_PATH_H

#include <stddef.h>
#include <stdio.h>

// whether p names a directory / a regular file (links followed)
int path_is_dir(const char *p);
int path_is_file(const char *p);
// whether s ends with suffix
int path_ends_with(const char *s, const char *suffix);
// dir + "/" + name into out
void path_join(char *out, size_t len, const char *dir, const char *name);
// the folder part of path into out ("." without one, "/" for the root's files)
void path_dirname(char *out, size_t len, const char *path);
// Opens path for reading (close-on-exec) without waiting for anything: a FIFO, a device or a
// socket planted where a file is expected is refused with errno EINVAL (path_strerror names it),
// so no read blocks for ever on one. -1 / NULL with errno set on failure.
int path_open_read(const char *path);
FILE *path_fopen_read(const char *path);
// strerror, with path_open_read's EINVAL named for what it is
const char *path_strerror(int err);
// mkdir -p: 0, or -1 with the line naming the part that could not be made (or is not a folder)
int path_mkdirs(const char *dir, char *err, size_t errlen);

#endif
