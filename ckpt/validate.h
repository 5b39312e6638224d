// validate: the checkpoint checks that decide whether a file's attributes and datasets may be
// used, as pure functions of what the reader found (no HDF5, no MPI), so that the code a fuzzer
// runs (test/fuzz/fuzz_ckpt_validate.c) is the code that loads checkpoints.
#ifndef FSDPC_CKPT_VALIDATE_H
#define FSDPC_CKPT_VALIDATE_H

#include <stddef.h>
#include <limits.h>
#include <stdint.h>

#include "../model/config.h"
#include "../model/family.h"
#include "../model/model.h"
#include "ckpt.h"

#define CKPT_FORMAT_NAME "fsdpc-ckpt"
// 1: the first schema; 2: run_id, parent, lineage, checksum = "crc32" and a crc32 per dataset
#define CKPT_FORMAT_VERSION 2
#define CKPT_CHECKSUM_NAME "crc32"
#define CKPT_NGROUPS 3
// the samples rollbacks skipped (--on_nonfinite rollback): a root dataset, absent when none
#define CKPT_SKIPPED_NAME "skipped_samples"

// the state groups, in the order of ckpt_check_tensors' `want`: weights, then AdamW's moments
extern const char *const ckpt_groups[CKPT_NGROUPS];
// Whether group g holds unit u's tensors: the weights of every unit, AdamW's moments of the units
// that train (LoRA's frozen base has none)
int ckpt_group_has(const ModelPlan *plan, int u, int g);
// LoRA's settings as root attributes (absent: no adapters), beside the family's fields
#define CKPT_LORA_ATTRS "lora_rank", "lora_alpha", "use_rslora", "lora_target_modules", "lora_dropout", "quantize_base"

// What an attribute held, as read: nothing is converted, so the checks see what is in the file.
typedef enum {
    CKPT_ATTR_ABSENT,  // not there
    CKPT_ATTR_INT,     // an integer scalar of up to 64 bits
    CKPT_ATTR_FLOAT,   // a floating-point scalar
    CKPT_ATTR_STR,     // a string scalar
    CKPT_ATTR_OTHER,   // another class or shape (an array), or unreadable
} CkptAttrKind;

typedef struct {
    const char *name;
    CkptAttrKind kind;
    uint64_t bits;  // INT: the value's two's-complement bits
    int neg;        // INT: a signed type holding a negative value
    double f;       // FLOAT
    const char *s;  // STR: NUL-terminated, or NULL when longer than the reader keeps
} CkptAttr;

// One link inside a state group.
typedef struct {
    int group;         // index into ckpt_groups
    const char *name;  // the link's name in that group
    int ndim;          // -1: not a readable dataset
    const uint64_t *dims;  // ndim extents (any ndim: a rank beyond the plan's is reported, not copied)
    int fp32;          // a 4-byte floating-point type
    int u8;            // a 1-byte unsigned integer type (QLoRA's nf4 tensors)
    CkptAttr crc;      // its crc32 attribute (kind ABSENT when missing)
    const char *foreign;  // not stored in the file itself: what it is instead (h5_open_stored), else NULL
} CkptDataset;

typedef struct {
    const CkptAttr *attrs;  // the root attributes
    size_t nattrs;
    int64_t model_links;  // links in /model, -1 without the group: bounds num_layers before a plan is built
    const CkptDataset *datasets;  // the state groups' links (only for ckpt_check_tensors)
    size_t ndatasets;
    const char *const *links;  // the links at the root, in /optim and in /source, as paths ("optim/exp_avg")
    size_t nlinks;
    const char *linked;  // a group of the schema that is a link or an alias, said whole (not followed), else NULL
} CkptDesc;

// The root attributes, validated.
typedef struct {
    int version;
    CkptMeta meta;
    ModelConfig model;
    char tokenizer[PATH_MAX];
} CkptHeader;

// Every root attribute of d, checked and parsed into h. The model_type's family (model/family.h)
// says which config fields are stored and what a file written before a field existed holds;
// `base` supplies the fields the family does not store; a file named step_<N>.h5 must
// record step N. NULL, or a one-line message naming file.
const char *ckpt_check_header(const CkptDesc *d, const char *file, const ModelConfig *base, CkptHeader *h);
// Whether path's last component is named like a checkpoint, step_<digits>.h5; *step gets the
// number (UINT64_MAX when it does not fit). A file so named must record that step.
int ckpt_name_step(const char *path, uint64_t *step);
// The header's model config equals the run's (plan->cfg), field by field. NULL or a message.
const char *ckpt_check_config(const CkptHeader *h, const char *file, const ModelPlan *plan);
// The datasets of the first ngroups groups are exactly plan's tensors: each present once with
// the plan's rank and shape, fp32, and from format_version 2 on a crc32 attribute, which goes
// to want (group-major, plan order) when non-NULL. NULL or a message.
const char *ckpt_check_tensors(const CkptDesc *d, const char *file, const ModelPlan *plan, int ngroups, int version, uint32_t *want);
// What d holds that this fsdpc does not read: root attributes outside the schema (and the file's
// family's fields), links at the root other than model, optim and source, in /optim other than
// the two moments, in /source other than ckpt_source_names. A newer fsdpc may add optional
// entries, so these are for a warning, not an error. Writes them to out as one printable line
// ("attributes 'a', 'b'; /extra, /source/notes.txt", at most the first few of each) and returns
// how many there are (0: out is "").
size_t ckpt_unknown_entries(const CkptDesc *d, char *out, size_t len);
// A dataset's crc32 attribute: 1 with *crc set when it is an unsigned 32-bit integer.
int ckpt_crc_value(const CkptAttr *a, uint32_t *crc);

#endif
