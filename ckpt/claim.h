// claim: one writer per checkpoint folder. Rank 0 takes the folder's writer lock before a run
// writes there and checks that what the folder holds is the run's to replace (its lineage's
// checkpoints, nothing another program wrote); before each publish the writer checks the lock
// and the file it replaces again.
#ifndef FSDPC_CKPT_CLAIM_H
#define FSDPC_CKPT_CLAIM_H

#include "ckpt.h"

// Rank 0, before a run writes to dir: takes the directory's writer lock for run_id (see claim.c)
// and checks that the checkpoints there are the run's to replace. `resumed` is the checkpoint the
// run continues ("" for a fresh run), `init` the checkpoint its weights come from ("" for none).
// A run owns the files of its lineage: runs linked to it by lineage attributes (its ancestors,
// and after a rewind the future it abandoned), and files from before run ids. Unless overwrite,
// it is refused a directory holding checkpoints of other runs (for a fresh run, any), or files
// named like checkpoints it cannot read at steps it may write; and, before the lock is taken, a
// directory holding files fsdpc did not write (PyTorch checkpoints, source files: claim.c's
// check_strays). Overwrite lets it replace those checkpoints (logged) and write beside those
// files, but never replace `resumed` or `init` (by device and inode). ckpt_save checks each file it
// replaces again. NULL, or a one-line error. The lock goes with ckpt_release_dir or at exit.
const char *ckpt_claim_dir(const char *dir, const char *run_id, const char *resumed, const char *init, int overwrite);
void ckpt_release_dir(void);
// Any rank, once rank 0 has claimed dir for run_id: NULL when this rank sees that writer lock,
// else a one-line error naming this rank and the folder (it is another folder here).
const char *ckpt_check_claim(const char *dir, const char *run_id);

// Rank 0, before a publish: NULL while this run holds the lock it took, else the line.
const char *claim_lost(void);
// Rank 0, before a publish replaces path: NULL when the file there (if any) is this run's to
// replace, else the line.
const char *claim_check_replace(const char *path, const CkptMeta *meta);

#endif
