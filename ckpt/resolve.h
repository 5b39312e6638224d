// resolve: which checkpoint a resume path names, when it is a folder of several.
#ifndef FSDPC_CKPT_RESOLVE_H
#define FSDPC_CKPT_RESOLVE_H

#include <stddef.h>

#include "ckpt.h"
#include "lineage.h"

// A file resolves to itself (its header, read later, must record the step its name says). A
// directory resolves to the newest checkpoint of its lineage that passes ckpt_verify (a file
// named step_<N>.h5 that records another step does not); each newer one passed over gets a log
// line, and none passing is an error. Files whose runs are linked by their lineage attributes are
// one lineage; of several, the one whose newest usable file's run_inputs `ours` accepts (train.c:
// those that name the run's training data) (when
// ours is not NULL) is taken, with a log line, and any other outcome is an error naming the runs.
// Returns 1 with the file in *out (a heap path the caller frees), 0 (*out NULL) when the path does not exist or the directory
// holds no checkpoint, or -1 with the line in err on every rank: among them a file, or a folder
// without fsdpc checkpoints, that holds PyTorch's or Hugging Face's checkpoints (foreign.h),
// named before the caller writes anything. Collective.
int ckpt_resolve(const char *path, CkptOwnsFn ours, void *ctx, char **out, char *err, size_t errlen);

#endif
