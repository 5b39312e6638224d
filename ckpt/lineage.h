// lineage: whose checkpoints are whose. A run's id and its ancestry ("<run_id>:<step>" of each
// checkpoint it resumed from) are in every file it writes; the files of a folder whose runs are
// linked by them are one lineage. Pruning follows it. The listing and grouping are shared with
// resolve.c and claim.c.
#ifndef FSDPC_CKPT_LINEAGE_H
#define FSDPC_CKPT_LINEAGE_H

#include <stddef.h>

#include "ckpt.h"

// A new random run id on every rank (rank 0 draws it). Collective.
void ckpt_new_run_id(char id[CKPT_RUN_ID_LEN + 1]);
// The lineage of a run that resumed from a checkpoint with meta `from`.
void ckpt_lineage_of(const CkptMeta *from, char *lineage, size_t len);
// Rank 0: keeps the newest `keep` checkpoints of this run's lineage in dir (keep <= 0 keeps all):
// its own (meta->run_id) and its ancestors' (meta->lineage) up to the step resumed from. Never
// deletes `written`, `resumed` (paths, "" for none), nor anything outside the lineage.
void ckpt_prune(const char *dir, int keep, const CkptMeta *meta, const char *written, const char *resumed);

// A file named like a checkpoint and, once lineage_read has read its header, whose it is.
enum { LINEAGE_UNUSABLE, LINEAGE_NO_RUN, LINEAGE_RUN };
typedef struct {
    char name[256];
    int step;     // from the name
    int kind;     // LINEAGE_*: no usable header (unreadable, or its name says another step), written
                  // before run ids (format_version 1), or a run's
    int lineage;  // LINEAGE_RUN: its lineage (a LineageKin set)
    int match;    // LINEAGE_RUN: the caller's `ours` accepts its run_inputs
    char run_id[CKPT_RUN_ID_LEN + 1];
} LineageEntry;

// Run ids in sets (union-find): a checkpoint joins its run with every ancestor its lineage
// names, so the runs of one history (requeues, rewinds and the futures they abandoned) end up in
// one set, even past the CKPT_LINEAGE_MAX ancestors one file remembers, through the files between.
typedef struct {
    char (*id)[CKPT_RUN_ID_LEN + 1];  // sorted once sealed
    int *up;
    int n, cap;
} LineageKin;

// The step number of a name step_<digits>.h5, or -1.
int lineage_step_of(const char *name);
// The checkpoints in dir, newest step first (malloc'd); NULL when dir cannot be read.
LineageEntry *lineage_list(const char *dir, int *n);
// Whether s is CKPT_RUN_ID_LEN hex digits.
int lineage_is_run_id(const char *s);
// The next "<run_id>:<step>" of a lineage attribute at *p; 0 at its end.
int lineage_next(const char **p, char id[CKPT_RUN_ID_LEN + 1], int *step);
// The set of run id in kin, -1 for an id never added; lineage_kin_free releases kin.
int lineage_kin_root(LineageKin *k, const char *id);
void lineage_kin_free(LineageKin *k);
// Rank 0: reads the headers of dir's n checkpoints e and groups them into lineages (kin), `own`
// (NULL: none) linked in too; each entry gets its kind, run id, lineage and whether `ours`
// (NULL: none) accepts its run_inputs.
void lineage_read(const char *dir, LineageEntry *e, int n, const CkptMeta *own, CkptOwnsFn ours, void *ctx, LineageKin *kin);
// "run R (newest step N: name), ...": each run of the entries sel marks once, the first few.
void lineage_describe_runs(const LineageEntry *e, int n, const unsigned char *sel, char *buf, size_t len);

#endif
