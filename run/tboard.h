// tboard: TensorBoard event files for --tensorboard_dir. One file per run (a resumed run adds its
// own beside the first, as TensorBoard's writers do), holding TFRecord-framed `Event` protobufs:
// the file_version record first, then one Event per scalar. The protobuf and the framing are
// written here (no protobuf library): only the few fields TensorBoard's scalar plugin reads.
// Rank 0 alone writes; the module calls no MPI and decides nothing about the run: a failed write
// is returned as one error line, and the caller ends the run.
#ifndef FSDPC_RUN_TBOARD_H
#define FSDPC_RUN_TBOARD_H

#include <stddef.h>
#include <stdint.h>

typedef struct TBoard TBoard;

// Creates a new events file "events.out.tfevents.<unix seconds>.<host>.<pid>.<n>" in the existing
// folder dir (TensorBoard's own name pattern; n makes it unique) and writes its file_version
// record. NULL with one error line in err when the file cannot be made or written.
TBoard *tboard_open(const char *dir, char *err, size_t errlen);
// the events file's path
const char *tboard_path(const TBoard *tb);
// Adds the scalar `tag` ("train/loss") at `step` as one Event stamped with the wall clock, into
// the file's buffer: tboard_flush writes it out and reports a failed write.
void tboard_scalar(TBoard *tb, const char *tag, int64_t step, double value);
// Flushes what tboard_scalar added to the file: NULL, or "cannot write --tensorboard_dir
// file '<path>': <reason>" (valid until the next call).
const char *tboard_flush(TBoard *tb);
// Flushes and closes the file and frees tb (NULL: nothing): NULL, or the error line as above.
const char *tboard_close(TBoard *tb);

#endif
