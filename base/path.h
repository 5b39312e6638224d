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
// Paths are heap strings of their whole length, never cut to a buffer's size: each of these
// returns one the caller frees (out of memory is fatal).
// printf into a new string
char *path_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// a copy of s
char *path_dup(const char *s);
// dir + "/" + name
char *path_join(const char *dir, const char *name);
// the folder part of path ("." without one, "/" for the root's files)
char *path_dirname(const char *path);
// Replaces *field (a heap path or NULL) by a copy of value.
void path_set(char **field, const char *value);
// The path itself, or "" for NULL: a path setting left unset reads as empty.
static inline const char *path_or_empty(const char *p) { return p ? p : ""; }
// The limits the operating system puts on a path: PATH_MAX - 1 bytes in all, NAME_MAX in one
// component. NULL when path is within both, else why not (valid until the next call), naming
// `what` (the flag or file it is), the length and the limit.
const char *path_too_long(const char *what, const char *path);
// Opens path for reading (close-on-exec) without waiting for anything: a FIFO, a device or a
// socket planted where a file is expected is refused with errno EINVAL (path_strerror names it),
// so no read blocks for ever on one. -1 / NULL with errno set on failure.
int path_open_read(const char *path);
FILE *path_fopen_read(const char *path);
// strerror, with path_open_read's EINVAL named for what it is
const char *path_strerror(int err);
// p for an error line: itself up to PATH_SHOW_MAX characters, else its first and last parts around
// a marked gap ("/a/b[...3612 characters...]c/d"), so that a line naming a long path still fits
// the line's buffer with its cause and fix after it. In one of 4 static buffers used in turn: up
// to 4 in one call's arguments.
#define PATH_SHOW_MAX 400
const char *path_show(const char *p);
// mkdir -p: 0, or -1 with the line naming the part that could not be made (or is not a folder)
int path_mkdirs(const char *dir, char *err, size_t errlen);
// Read-only maps of input files (mmap PROT_READ, MAP_PRIVATE, of len bytes at off of fd), kept in a
// table with the file's name: a file that shrinks under its map (another program truncating or
// rewriting it in place) raises SIGBUS on the next read, and the handler names the file by the
// faulting address (path_mapped_name) instead of crashing. MAP_FAILED with errno set on failure;
// path_unmap releases one (p as returned, len as given).
void *path_map_read(int fd, size_t len, long long off, const char *path);
void path_unmap(void *p, size_t len);
// The name of the registered map holding addr, or NULL; safe in a signal handler.
const char *path_mapped_name(const void *addr);

#endif
