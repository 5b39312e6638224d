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
// Collective: this rank's slice of every tensor of the first ngroups state groups, written or
// read; crcs get the slices' checksums. The agreed first failure, or NULL.
const char *h5_xfer_state(hid_t file, const ShardState *s, const ModelPlan *plan, int write, int ngroups, CommCrc *crcs);
// Collective (plan tp > 1): the whole tensors' checksums from every rank's pieces.
void h5_tp_checksums(const ModelPlan *plan, int ngroups, CommCrc *c);
// After the ranks' checksums are combined: the first tensor whose checksum is not want's, or NULL.
const char *h5_checksum_mismatch(const char *file, const ModelPlan *plan, int ngroups, const CommCrc *got, const uint32_t *want);

#endif
