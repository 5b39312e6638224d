// h5: the HDF5 side of checkpoints, for the other ckpt/ modules only: opening files (collective
// MPI-IO or one rank alone), attributes, the header as validate.c judges it, and the tensors,
// each rank's slice by element-range hyperslabs with the CRC-32 of what it moved.
#ifndef FSDPC_CKPT_H5_H
#define FSDPC_CKPT_H5_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "../comm/comm.h"
#include "../model/model.h"
#include "../shard/shard.h"
#include "validate.h"

// An HDF5 call that fails only for reasons no caller can recover from: err_fatal's exit.
#define h5Check(x) h5_check((long)(x), #x, __FILE__, __LINE__)
long h5_check(long r, const char *what, const char *file, int line);

// Opens (create: creates, truncating) path; collective: every rank through MPI-IO, else this
// rank alone. A negative id on failure, which h5_open_error explains.
hid_t h5_open(const char *path, int create, int collective);
// The same, collective over g's ranks (NULL: this rank alone).
hid_t h5_open_in(const char *path, int create, CommGroup *g);
// on: the calling thread alone may use HDF5 from now on (a checkpoint's background writer); an
// open from another thread then ends the process as an internal error. off: any thread again.
void h5_own(int on);
// Opens the dataset at path (below loc) when the file itself stores it: every link on the way
// hard (a soft link could alias another tensor of the file, an external one a tensor of another
// file) and its data neither in external files nor a virtual dataset's sources. Else -1, and
// *why says which of those it is (static text), or is NULL: no such dataset.
hid_t h5_open_stored(hid_t loc, const char *path, const char **why);
// NULL when every link on the way to `path` (a group) is hard and names its object alone, or when
// the path is missing; else what the first that is not is (static text). Checked before anything
// follows the path, so an external link is never opened.
const char *h5_linked(hid_t f, const char *path);
// Why a checkpoint could not be opened: the system's reason, else what the bytes are.
const char *h5_open_error(const char *file);
// Why creating a checkpoint's file failed, when HDF5 does not say.
const char *h5_create_error(const char *path);

// Scalar attributes; 1 when written, 0 on failure.
int h5_attr_write(hid_t loc, const char *name, hid_t type, const void *val);
int h5_attr_write_str(hid_t loc, const char *name, const char *val);
// The attribute `name` of loc as it is (kind ABSENT when it has none); h5_attr_free releases it.
void h5_attr_named(hid_t loc, const char *name, CkptAttr *out);
void h5_attr_free(CkptAttr *a);

// Every root attribute, read and checked; base supplies model fields a file may lack.
const char *h5_read_header(hid_t f, const char *file, const ModelConfig *base, CkptHeader *h);
// The defaults of config fields a file's family does not store (validation wants a value).
extern const ModelConfig h5_old_defaults;
// The header of a file this rank opens alone.
const char *h5_read_header_of(const char *path, CkptHeader *h);

int h5_count_tensors(const ModelPlan *plan);
// The first ngroups groups hold exactly plan's tensors (their crc32 attributes into want, group-
// major, plan order, unless NULL); warns once per file about entries outside the schema.
const char *h5_check_tensors(hid_t f, const char *file, const ModelPlan *plan, int ngroups, int version, uint32_t *want);
// Selects elements [begin, begin+count) of the whole row-major tensor t (none when count is 0).
// An nf4 tensor (QLoRA) is its packed bytes, 1-D.
void h5_select_range(hid_t space, const TensorSpec *t, size_t begin, size_t count);
// What the dataset of t holds: elements of the whole tensor, or an nf4 tensor's packed bytes.
size_t h5_stored_len(const TensorSpec *t);
// This rank's slice of one tensor of one state group, as it moves between the shards and a file.
typedef struct {
    int group, k;  // the state group (ckpt_groups) and the tensor's index in group-major plan order
    const TensorSpec *ts;
    size_t begin, n;  // in the stored tensor's elements (an nf4 tensor's bytes); n 0: none here
    char *buf;        // the slice's data: fp32, or a packed unit's bf16 or nf4 bytes
    int counted;      // this rank's slice counts in the tensor's checksum (the first replica's)
    int packed;       // of a packed unit (QLoRA's base)
    int on_device;    // buf is on the compute device
} H5Piece;
// The pieces of the first ngroups state groups (every tensor, in group-major plan order, also
// those this rank holds nothing of: their collective calls are made all the same) into out, or
// only counted when out is NULL; their number. Writing, only the ranks that write hold data.
size_t h5_pieces(const ShardState *s, const ModelPlan *plan, int write, int ngroups, H5Piece *out);
// The bytes of p's data
size_t h5_piece_bytes(const H5Piece *p);
// Collective over g: the pieces written or read; crcs get the slices' checksums. The agreed first
// failure, or NULL.
const char *h5_xfer_pieces(hid_t file, const ModelPlan *plan, const H5Piece *p, size_t np, int write, CommGroup *g, CommCrc *crcs);
// Collective: this rank's slice of every tensor of the first ngroups state groups, written or
// read; crcs get the slices' checksums. The agreed first failure, or NULL.
const char *h5_xfer_state(hid_t file, const ShardState *s, const ModelPlan *plan, int write, int ngroups, CommCrc *crcs);
// Collective over g (plan tp > 1): the whole tensors' checksums from every rank's pieces.
void h5_tp_checksums(const ModelPlan *plan, int ngroups, CommGroup *g, CommCrc *c);
// After the ranks' checksums are combined: the first tensor whose checksum is not want's, or NULL.
const char *h5_checksum_mismatch(const char *file, const ModelPlan *plan, int ngroups, const CommCrc *got, const uint32_t *want);

#endif
