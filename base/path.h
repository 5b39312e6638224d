// path: the file-system questions and path strings every layer asks about (one copy of each).
// base/ is the ground floor: nothing of the project outside base/ is included.
#ifndef FSDPC_BASE_PATH_H
#define FSDPC_BASE_PATH_H

#include <stddef.h>

// whether p names a directory / a regular file (links followed)
int path_is_dir(const char *p);
int path_is_file(const char *p);
// whether s ends with suffix
int path_ends_with(const char *s, const char *suffix);
// dir + "/" + name into out
void path_join(char *out, size_t len, const char *dir, const char *name);
// the folder part of path into out ("." without one, "/" for the root's files)
void path_dirname(char *out, size_t len, const char *path);
// mkdir -p: 0, or -1 with the line naming the part that could not be made (or is not a folder)
int path_mkdirs(const char *dir, char *err, size_t errlen);

#endif
