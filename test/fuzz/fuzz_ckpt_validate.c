// Fuzz target: the checkpoint attribute and dataset checks (ckpt/validate.c), the code every
// checkpoint load runs on what it read from HDF5. The input builds a model plan and a
// description of a file, starting from one that matches the plan, then edits it:
//   byte 0   flags: bits 0-1 groups checked (1 + v % 3), bit 2 start from an empty description,
//            bit 3 the run's config differs from the file's, bit 4 model_type mingpt if known
//   byte 1   units - 1 (mod 8); per unit: tensors - 1 (mod 9), per tensor a byte (bit 0: 2-D)
//            and two extents (1 + byte, 255 = INT_MAX)
//   then     edits: an opcode byte (low 4 bits, see the switch), an attribute and a dataset index
//            byte (taken mod their counts), then the opcode's operands
// Bytes past the end read as 0. A rejected description must come back as one printable line; an accepted
// one must match the plan exactly.
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../ckpt/validate.h"
#include "stub.h"

enum { MAX_ATTRS = 256, MAX_DATASETS = 1024, MAX_DIMS = 1024, MAX_OPS = 4096 };

typedef struct {
    const uint8_t *p;
    size_t n, at;
} In;

static uint8_t u8(In *in) { return in->at < in->n ? in->p[in->at++] : 0; }
static uint64_t u64(In *in) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)u8(in) << (8 * i);
    return v;
}

// everything a run allocates, freed at its end
static void *owned[MAX_OPS * 2 + MAX_DATASETS * 4 + 64];
static size_t nowned;
static void *own(void *p) {
    if (!p) abort();
    owned[nowned++] = p;
    return p;
}
static char *own_str(const char *s) { return own(strdup(s)); }

static CkptAttr attrs[MAX_ATTRS];
static CkptDataset dsets[MAX_DATASETS];
static size_t nattrs, ndsets;

static CkptAttr *add_attr(const char *name) {
    if (nattrs == MAX_ATTRS) return NULL;
    CkptAttr *a = &attrs[nattrs++];
    memset(a, 0, sizeof *a);
    a->name = name;
    return a;
}
static void attr_int(const char *name, uint64_t v) {
    CkptAttr *a = add_attr(name);
    if (a) a->kind = CKPT_ATTR_INT, a->bits = v;
}
static void attr_str(const char *name, const char *s) {
    CkptAttr *a = add_attr(name);
    if (a) a->kind = CKPT_ATTR_STR, a->s = s;
}

static uint64_t *dims_of(int nd, const uint64_t *from, int nfrom) {
    uint64_t *d = own(calloc(nd > 0 ? (size_t)nd : 1, sizeof *d));
    for (int i = 0; i < nd; i++) d[i] = i < nfrom ? from[i] : 1;
    return d;
}

// the test's values for a family's fields, chosen to pass config_validate_model
static double field_value(const char *name) {
    static const struct {
        const char *name;
        double v;
    } vals[] = {{"hidden_width", 64}, {"num_heads", 4}, {"num_key_value_heads", 2}, {"num_layers", 1}, {"rope_theta", 10000},
                {"norm_eps", 1e-5}, {"rope_low_freq_factor", 1}, {"rope_high_freq_factor", 4}, {"tie_word_embeddings", 1}, {"hidden_act", 2}};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        if (!strcmp(vals[i].name, name)) return vals[i].v;
    return 8;
}

static const char *const attr_names[] = {"format", "format_version", "step", "tokens_seen", "data_position", "rng_state", "model_type",
                                         "tokenizer", "run_id", "parent", "lineage", "checksum", "run_config", "crc32", "", "num_layers",
                                         "hidden_width", "rope_theta", "norm_eps", "vocab_size"};
#define NATTR_NAMES (sizeof attr_names / sizeof attr_names[0])

// a message is one printable line, whatever bytes the file's strings hold
static void check_line(const char *e) {
    if (!e || !e[0]) __builtin_trap();
    for (const unsigned char *c = (const unsigned char *)e; *c; c++)
        if (*c < 0x20 || *c == 0x7f) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    In in = {data, size, 0};
    nowned = nattrs = ndsets = 0;
    uint8_t flags = u8(&in);
    int ngroups = 1 + (flags & 3) % 3;
    const ModelFamily *fam = family_at((size_t)(flags >> 4) % family_count());  // every family
    if (!fam) __builtin_trap();

    // the plan: its own names and shapes (the checks know no tensor names)
    ModelPlan plan;
    memset(&plan, 0, sizeof plan);
    plan.nunits = 1 + u8(&in) % 8;
    plan.units = own(calloc((size_t)plan.nunits, sizeof *plan.units));
    int ntensors = 0;
    for (int u = 0; u < plan.nunits; u++) {
        UnitSpec *us = &plan.units[u];
        us->ntensors = 1 + u8(&in) % MAX_UNIT_TENSORS;
        for (int t = 0; t < us->ntensors; t++, ntensors++) {
            TensorSpec *ts = &us->t[t];
            snprintf(ts->name, sizeof ts->name, "unit.%d.tensor.%d.weight", u, t);
            ts->ndim = 1 + (u8(&in) & 1);
            for (int i = 0; i < 2; i++) {
                uint8_t b = u8(&in);
                ts->full[i] = ts->shape[i] = i < ts->ndim ? (b == 255 ? INT_MAX : 1 + b) : 0;
            }
            ts->numel = (size_t)ts->shape[0] * (ts->ndim == 2 ? (size_t)ts->shape[1] : 1);
        }
    }

    // a file that matches it
    ModelConfig base = {.rope_theta = 10000.0f, .norm_eps = 1e-5f}, good = base;
    snprintf(good.model_type, sizeof good.model_type, "%s", fam->model_type);
    attr_str("format", CKPT_FORMAT_NAME);
    attr_int("format_version", CKPT_FORMAT_VERSION);
    attr_int("step", 100);
    attr_int("tokens_seen", 1u << 20);
    attr_int("data_position", 512);
    attr_int("rng_state", 1234);
    attr_str("model_type", fam->model_type);
    for (const FamilyField *f = fam->ckpt_fields; f->name; f++) {
        double v = field_value(f->name);
        CkptAttr *a = add_attr(f->name);
        if (f->type != FAMILY_FLOAT) a->kind = CKPT_ATTR_INT, a->bits = (uint64_t)v, *(int *)((char *)&good + f->off) = (int)v;
        else a->kind = CKPT_ATTR_FLOAT, a->f = v, *(float *)((char *)&good + f->off) = (float)v;
    }
    attr_str("tokenizer", "byte");
    attr_str("run_id", "0123456789abcdef");
    attr_str("parent", "");
    attr_str("lineage", "fedcba9876543210:50");
    attr_str("checksum", CKPT_CHECKSUM_NAME);
    attr_str("run_config", "--batch_size 4");
    for (int g = 0; g < CKPT_NGROUPS; g++)
        for (int u = 0; u < plan.nunits; u++)
            for (int t = 0; t < plan.units[u].ntensors; t++) {
                const TensorSpec *ts = &plan.units[u].t[t];
                CkptDataset *d = &dsets[ndsets++];
                const uint64_t sh[2] = {(uint64_t)ts->shape[0], (uint64_t)ts->shape[1]};
                *d = (CkptDataset){.group = g, .name = ts->name, .ndim = ts->ndim, .dims = dims_of(ts->ndim, sh, 2), .fp32 = 1,
                                   .crc = {.name = CKPT_CHECKSUM_NAME}};
                d->crc.kind = CKPT_ATTR_INT, d->crc.bits = (uint64_t)(ndsets * 2654435761u) & 0xffffffffu;
            }
    int64_t links = ntensors;
    int version_override = 0;
    if (flags & 4) nattrs = ndsets = 0, links = -1;

    // the edits
    for (int op = 0; op < MAX_OPS && in.at < in.n; op++) {
        uint8_t code = u8(&in) & 15, ai = u8(&in), di = u8(&in);  // opcode, attribute, dataset (mod their counts)
        CkptAttr *a = nattrs ? &attrs[ai % nattrs] : NULL;
        CkptDataset *d = ndsets ? &dsets[di % ndsets] : NULL;
        switch (code) {
        case 0:  // remove an attribute
            if (a) *a = attrs[--nattrs];
            break;
        case 1:  // change its kind, keeping its value fields
            if (a) a->kind = (CkptAttrKind)(u8(&in) % 5);
            break;
        case 2:  // an integer, signed or not
            if (a) a->kind = CKPT_ATTR_INT, a->bits = u64(&in), a->neg = u8(&in) & 1;
            break;
        case 3: {  // a float: a special value or raw bits
            static const double special[] = {NAN, INFINITY, -INFINITY, 0.0, -1.0, 1e39, 1e-45, 10000.0};
            uint8_t s = u8(&in);
            double v;
            uint64_t bits = u64(&in);
            memcpy(&v, &bits, sizeof v);
            if (a) a->kind = CKPT_ATTR_FLOAT, a->f = s < 8 ? special[s] : v;
            break;
        }
        case 4: {  // a string; 255: longer than the reader keeps
            uint8_t len = u8(&in);
            char *s = own(calloc(len + 1u, 1));
            for (int i = 0; i < len && len != 255; i++) s[i] = (char)u8(&in);
            if (a) a->kind = CKPT_ATTR_STR, a->s = len == 255 ? NULL : s;
            break;
        }
        case 5: {  // another attribute, possibly a second of one name
            CkptAttr *n = add_attr(attr_names[u8(&in) % NATTR_NAMES]);
            if (n) n->kind = CKPT_ATTR_INT, n->bits = u64(&in);
            break;
        }
        case 6: {  // a dataset's rank, absurd ones included
            static const int nds[] = {-1, 0, 1, 2, 3, 32, 1000, 64, 255, 5};
            int nd = nds[u8(&in) % 10];
            if (d) d->dims = dims_of(nd, d->dims, d->ndim), d->ndim = nd;
            break;
        }
        case 7: {  // one extent
            uint8_t j = u8(&in);
            uint64_t v = u64(&in);
            if (d && d->ndim > 0) ((uint64_t *)d->dims)[j % d->ndim] = v;
            break;
        }
        case 8: {  // another name: a plan tensor's, or any bytes
            uint8_t s = u8(&in);
            if (s < 128) {
                int k = s % ntensors;
                for (int u = 0; u < plan.nunits; k -= plan.units[u++].ntensors)
                    if (k < plan.units[u].ntensors) {
                        if (d) d->name = plan.units[u].t[k].name;
                        break;
                    }
            } else {
                uint8_t len = u8(&in);
                char *n = own(calloc(len + 1u, 1));
                for (int i = 0; i < len; i++) n[i] = (char)u8(&in);
                if (d) d->name = n;
            }
            break;
        }
        case 9:  // another group, or none
            if (d) d->group = (int)(u8(&in) % 6) - 1;
            break;
        case 10:  // not fp32
            if (d) d->fp32 = !d->fp32;
            break;
        case 11: {  // its crc32 attribute
            uint8_t k = u8(&in);
            uint64_t v = u64(&in);
            if (d) d->crc.kind = (CkptAttrKind)(k % 5), d->crc.bits = v, d->crc.neg = k >> 7;
            break;
        }
        case 12:  // a copy: the same name twice
            if (d && ndsets < MAX_DATASETS) {
                dsets[ndsets] = *d;
                dsets[ndsets].dims = dims_of(d->ndim, d->dims, d->ndim);
                ndsets++;
            }
            break;
        case 13:  // remove a dataset
            if (d) *d = dsets[--ndsets];
            break;
        case 14:  // the link count of /model
            links = (int64_t)u64(&in);
            break;
        case 15:  // the version the tensors are checked at when the header fails
            version_override = u8(&in) % 4;
            break;
        }
    }

    // the links outside the state groups: the schema's, then the datasets' names (any bytes) at the
    // root, in /optim and in /source by group
    static const char *link_paths[MAX_DATASETS + 4];
    static const char *const prefixes[] = {"", "optim/", "source/"};
    size_t nlinks = 0;
    link_paths[nlinks++] = "model", link_paths[nlinks++] = "optim", link_paths[nlinks++] = "source/config.json";
    for (size_t i = 0; i < ndsets && nlinks < MAX_DATASETS + 4; i++) {
        const char *pre = prefixes[(size_t)(dsets[i].group + 1) % 3], *name = dsets[i].name ? dsets[i].name : "";
        char *path = own(calloc(strlen(pre) + strlen(name) + 1, 1));
        strcat(strcat(path, pre), name);
        link_paths[nlinks++] = path;
    }
    CkptDesc desc = {attrs, nattrs, links, dsets, ndsets, link_paths, nlinks};
    // what the file holds outside the schema: one printable line whenever there is any
    char extra[1200];
    size_t nextra = 0, cap = (size_t)(flags >> 5) * 40 + 1;  // a short buffer too: the list is cut, never overrun
    FUZZ_TRY(nextra = ckpt_unknown_entries(&desc, extra, cap));
    if (strlen(extra) >= cap || (!nextra && extra[0]) || (nextra && cap > 40 && !extra[0])) __builtin_trap();
    if (extra[0]) check_line(extra);
    CkptHeader h;
    const char *e = NULL;
    FUZZ_TRY(e = ckpt_check_header(&desc, "x.h5", &base, &h));
    if (e) {
        check_line(e);
    } else {
        // an accepted header holds what the loader relies on
        if (h.version < 1 || h.version > CKPT_FORMAT_VERSION || h.meta.step < 0 || config_validate_model(&h.model) ||
            !family_find(h.model.model_type) || links < h.model.num_layers || !memchr(h.tokenizer, 0, sizeof h.tokenizer) ||
            !memchr(h.meta.parent, 0, sizeof h.meta.parent) || !memchr(h.meta.lineage, 0, sizeof h.meta.lineage))
            __builtin_trap();
        plan.cfg = h.model;
        if (flags & 8) plan.cfg.hidden_width++;
        FUZZ_TRY(e = ckpt_check_config(&h, "x.h5", &plan));
        if (e) check_line(e);
    }
    if (!e) plan.cfg = good;
    int version = e ? version_override : h.version;
    uint32_t *want = own(calloc((size_t)ngroups * ntensors, sizeof *want));
    FUZZ_TRY(e = ckpt_check_tensors(&desc, "x.h5", &plan, ngroups, version, want));
    if (e) {
        check_line(e);
    } else {
        // accepted: each plan tensor once, as planned, and nothing else in the checked groups
        size_t seen = 0;
        for (size_t i = 0; i < ndsets; i++) seen += dsets[i].group >= 0 && dsets[i].group < ngroups && dsets[i].name;
        if (seen != (size_t)ngroups * ntensors) __builtin_trap();
        for (size_t i = 0; i < ndsets; i++) {
            const CkptDataset *d = &dsets[i];
            if (d->group < 0 || d->group >= ngroups || !d->name) continue;
            int u, t;
            if (!model_find_tensor(&plan, d->name, &u, &t)) __builtin_trap();
            const TensorSpec *ts = &plan.units[u].t[t];
            if (d->ndim != ts->ndim || !d->fp32 || d->dims[0] != (uint64_t)ts->shape[0] ||
                (ts->ndim == 2 && d->dims[1] != (uint64_t)ts->shape[1]))
                __builtin_trap();
        }
    }
    for (size_t i = 0; i < nowned; i++) free(owned[i]);
    return 0;
}

// model_find_tensor lives with the model's kernels; the harness needs only the lookup
int model_find_tensor(const ModelPlan *plan, const char *name, int *unit, int *tensor) {
    for (int u = 0; u < plan->nunits; u++)
        for (int t = 0; t < plan->units[u].ntensors; t++)
            if (!strcmp(plan->units[u].t[t].name, name)) return *unit = u, *tensor = t, 1;
    return 0;
}
