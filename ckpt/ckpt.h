// ckpt: HDF5 checkpoints in the layout-free docs/DESIGN.md schema (full tensors under Hugging Face
// names, each with the CRC-32 of its contents); each rank writes and reads only the slices it
// owns, through MPI-IO. Also the checkpoint directory's housekeeping: one writer at a time, and
// pruning that follows the run's lineage.
#ifndef FSDPC_CKPT_H
#define FSDPC_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "../model/config.h"
#include "../shard/shard.h"

#define CKPT_RUN_ID_LEN 16  // hex digits of a run id
#define CKPT_LINEAGE_MAX 32  // ancestors a checkpoint remembers; older ones are never pruned
#define CKPT_INPUTS_LEN 8192  // bytes of CkptMeta.inputs, its NUL included

typedef struct {
    int step;
    uint64_t tokens_seen;
    uint64_t data_position;  // global training samples consumed
    uint64_t rng_state;      // seed of the sample order
    char run_id[CKPT_RUN_ID_LEN + 1];  // the run that wrote it ("" before format_version 2)
    char parent[1024];  // the checkpoint (or source) that run resumed or initialised from, "" if fresh
    // the run's ancestry, nearest first: "<run_id>:<step>" of the checkpoint each resumed from
    char lineage[CKPT_LINEAGE_MAX * (CKPT_RUN_ID_LEN + 12)];
    // what defines the run besides its flags (the tokenizer's checksum, the data sources'
    // identities): one line of text, compared on resume; "" in files written before it existed
    char inputs[CKPT_INPUTS_LEN];
} CkptMeta;

// The files of a Hugging Face model source that say more than its weights: the length it was
// trained for, its special tokens, its chat template. A run started from one keeps them in every
// checkpoint (/source), and a run started from such a checkpoint passes them on, so `export`
// writes them back (config.json's values, the others byte for byte) wherever the source went.
#define CKPT_SOURCE_MAX_BYTES ((size_t)16 << 20)  // per file: these are small JSON and Jinja files
// indices into ckpt_source_names: the files after CKPT_SRC_TOKENIZER_CONFIG are the tokenizer's too
enum { CKPT_SRC_CONFIG, CKPT_SRC_GENERATION_CONFIG, CKPT_SRC_TOKENIZER_CONFIG, CKPT_SOURCE_FILES = 6 };
extern const char *const ckpt_source_names[CKPT_SOURCE_FILES];
typedef struct {
    char *text[CKPT_SOURCE_FILES];  // the file's bytes, NULL when the source had none
    size_t len[CKPT_SOURCE_FILES];
} CkptSource;
// The files of dir that ckpt_source_names lists (empty ones count as absent). NULL, or a one-line
// error naming the file (unreadable, or larger than CKPT_SOURCE_MAX_BYTES).
const char *ckpt_source_from_dir(const char *dir, CkptSource *src);
// A checkpoint's /source; empty for files written before it existed. Any rank alone. NULL, or a
// one-line error (a dataset that is no 1-D byte array within the limit).
const char *ckpt_source_read(const char *file, CkptSource *src);
// Collective: every rank takes rank 0's source (collective HDF5 creates need the same on all).
void ckpt_source_share(CkptSource *src);
void ckpt_source_free(CkptSource *src);

typedef struct {
    double seconds, bytes;  // time spent; payload size
    char path[1100];        // the published file
} CkptSaved;

// Writes <dir>/step_<NNNNNNNN>.h5 through <that>.<run_id>.tmp, renamed once every rank is done
// (and, when the directory is claimed, only while the claim still holds, and only over a file
// the claim's rules let it replace). Collective. Any failure (a full disk) removes the .tmp and
// ends every rank with one error line.
// Also writes src (NULL: none) under /source.
void ckpt_save(const char *dir, const ShardState *s, const Config *cfg, const CkptMeta *meta, const CkptSource *src,
               CkptSaved *out);
// A file resolves to itself (its header, read later, must record the step its name says). A
// directory resolves to the newest checkpoint of its lineage that passes ckpt_verify (a file
// named step_<N>.h5 that records another step does not); each newer one passed over gets a log
// line, and none passing is an error. Files whose runs are linked by their lineage attributes are
// one lineage; of several, the one whose newest usable file's run_inputs `ours` accepts (train.c:
// those that name the run's training data) (when
// ours is not NULL) is taken, with a log line, and any other outcome is an error naming the runs.
// Returns 0 (out empty) when the path does not exist or the directory holds no checkpoint. A file,
// or a folder without fsdpc checkpoints, that holds PyTorch's or Hugging Face's checkpoints
// (foreign.h) ends every rank with one line naming them, before the caller writes anything.
// Collective.
typedef int (*CkptOwnsFn)(const char *run_inputs, void *ctx);
int ckpt_resolve(const char *path, CkptOwnsFn ours, void *ctx, char *out, size_t len);
// Whether file is a complete checkpoint: every attribute, every tensor's shape and type, and
// every tensor's checksum (the ranks read a part each, in bounded chunks). Collective; NULL, or
// the same one-line reason on every rank.
const char *ckpt_verify(const char *file);
// Loads model, optimizer and meta into s; shapes and config are checked against cfg, checksums
// against the slices read. Collective.
void ckpt_load(const char *file, ShardState *s, const Config *cfg, CkptMeta *meta);
// Loads only the weights (/model) into s, for finetuning: moments and step stay as they are
// (zero after shard_init). Validated like ckpt_load. Collective.
void ckpt_load_weights(const char *file, ShardState *s, const Config *cfg);
// The model config attributes of a checkpoint and its `tokenizer` attribute ("byte" in files
// written before it existed), without tensors. Any rank alone. NULL, or a one-line error.
const char *ckpt_read_config(const char *file, ModelConfig *m, char *tokenizer, size_t tlen);

// A checkpoint's metadata (step, run id, lineage, run_inputs...), without tensors. Any rank
// alone. NULL, or a one-line error.
const char *ckpt_read_meta(const char *file, CkptMeta *meta);
// Collective, before the ranks open file together: each rank's view of it (its size and a CRC of
// its first MiB and last 64 KiB, or why it cannot be read) must be rank 0's; else every rank
// ends with one line naming the first rank that differs.
void ckpt_check_same_file(const char *file);

// One rank alone reading a checkpoint's weights (export).
typedef struct CkptReader CkptReader;
// Opens file and checks its format, config and every /model tensor against plan; NULL with the
// reason in *err.
CkptReader *ckpt_reader_open(const char *file, const ModelPlan *plan, const char **err);
// Elements [begin, begin + count) (count > 0) of /model/<t->name> into dst; NULL or an error. A
// tensor read from its start to its end in order is checked against its checksum.
const char *ckpt_reader_read(CkptReader *r, const TensorSpec *t, size_t begin, size_t count, float *dst);
void ckpt_reader_close(CkptReader *r);

// A new random run id on every rank (rank 0 draws it). Collective.
void ckpt_new_run_id(char id[CKPT_RUN_ID_LEN + 1]);
// The lineage of a run that resumed from a checkpoint with meta `from`.
void ckpt_lineage_of(const CkptMeta *from, char *lineage, size_t len);
// Rank 0, before a run writes to dir: takes the directory's writer lock for run_id (see ckpt.c)
// and checks that the checkpoints there are the run's to replace. `resumed` is the checkpoint the
// run continues ("" for a fresh run), `init` the checkpoint its weights come from ("" for none).
// A run owns the files of its lineage: runs linked to it by lineage attributes (its ancestors,
// and after a rewind the future it abandoned), and files from before run ids. Unless overwrite,
// it is refused a directory holding checkpoints of other runs (for a fresh run, any), or files
// named like checkpoints it cannot read at steps it may write; and, before the lock is taken, a
// directory holding files fsdpc did not write (PyTorch checkpoints, source files: ckpt.c's
// check_strays). Overwrite lets it replace those checkpoints (logged) and write beside those
// files, but never replace `resumed` or `init` (by device and inode). ckpt_save checks each file it
// replaces again. NULL, or a one-line error. The lock goes with ckpt_release_dir or at exit.
const char *ckpt_claim_dir(const char *dir, const char *run_id, const char *resumed, const char *init, int overwrite);
void ckpt_release_dir(void);
// Any rank, once rank 0 has claimed dir for run_id: NULL when this rank sees that writer lock,
// else a one-line error naming this rank and the folder (it is another folder here).
const char *ckpt_check_claim(const char *dir, const char *run_id);
// Rank 0: keeps the newest `keep` checkpoints of this run's lineage in dir (keep <= 0 keeps all):
// its own (meta->run_id) and its ancestors' (meta->lineage) up to the step resumed from. Never
// deletes `written`, `resumed` (paths, "" for none), nor anything outside the lineage.
void ckpt_prune(const char *dir, int keep, const CkptMeta *meta, const char *written, const char *resumed);

#endif
