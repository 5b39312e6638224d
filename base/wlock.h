// wlock: one writer per output. Every folder or file fsdpc writes (checkpoints, prepare's shards,
// exports, the data cache, traces, TensorBoard events, the metrics file) is guarded by a writer
// lock, and what a writer writes goes under temporary names unique to it (wlock_tmp_name), so
// that two runs given one output stop at start-up instead of interleaving their files.
// base/ is the ground floor: nothing of the project outside base/ is included.
#ifndef FSDPC_BASE_WLOCK_H
#define FSDPC_BASE_WLOCK_H

#include <stddef.h>

#define WLOCK_ID_LEN 16  // a writer id: 16 lowercase hex digits

// A fresh random writer id for this process (ckpt_new_run_id shares rank 0's with every rank).
void wlock_new_id(char id[WLOCK_ID_LEN + 1]);
// The lock file guarding `output` (heap, the caller frees): <dir>/.fsdpc-writer for a folder,
// <folder>/.<name>.fsdpc-writer for a file (is_dir 0).
char *wlock_path(const char *output, int is_dir);
// Takes the lock file `lock` for writer `id` (a word without spaces). `flag` names the output in
// messages ("--checkpoint_dir"), `output` is its path and `kind` what is written there
// ("checkpoints"). A lock this process already holds for id is taken again (counted, so that one
// folder given to two flags is fine); one left by a writer that provably ended (on this host: its
// process is gone, or the host rebooted since) is taken over, logged, under the marker
// <lock>.takeover (one taker at a time; a lock placed meanwhile is never removed). A lock file
// without its whole line yet is waited for while younger than 30 s. NULL, or the one-line
// error (a static buffer; *sys: the errno where the lock's file could not be written there, for a
// caller that names the path's problem, else 0). The lock goes with wlock_release, or at exit.
const char *wlock_take(const char *lock, const char *id, const char *flag, const char *output, const char *kind, int *sys);
// Whether the lock file still holds id: NULL, or the line saying it was removed or taken over.
const char *wlock_lost(const char *lock, const char *id);
// Whether the writer of the lock file `lock` provably ended (1: on this host, its process is gone
// or the host rebooted since), may still run (0: it runs, or it is another host's), or there is
// no readable lock (-1).
int wlock_ended(const char *lock);
// Drops one hold of `lock`; the last removes the file if it still holds id.
void wlock_release(const char *lock, const char *id);
// "<final>.<id>.tmp" (heap): the name under which writer id writes what becomes `final`.
char *wlock_tmp_name(const char *final, const char *id);
// Whether `name` is a temporary of wlock_tmp_name's form ("<x>.<16 hex>.tmp"); its writer's id
// into id unless NULL.
int wlock_is_tmp(const char *name, char id[WLOCK_ID_LEN + 1]);
// After rename(tmp, final): NULL when `final` is the file the writer wrote (device and inode
// dev/ino, taken from the open temporary), else the line (another writer replaced it meanwhile).
const char *wlock_check_renamed(const char *final, unsigned long long dev, unsigned long long ino);

#endif
