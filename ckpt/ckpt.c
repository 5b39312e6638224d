// ckpt: parallel HDF5 write/read of full tensors by element-range hyperslabs, a CRC-32 per
// tensor, the checkpoint directory's writer lock and lineage-aware pruning.
#define _GNU_SOURCE  // fallocate
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "../comm/comm.h"
#include "../comm/io.h"
#include "../base/limits.h"
#include "../data/source/ident.h"
#include "../kernels/kernels.h"
#include "foreign.h"
#include "validate.h"

#define FORMAT_NAME CKPT_FORMAT_NAME
#define FORMAT_VERSION CKPT_FORMAT_VERSION
#define CHECKSUM_NAME CKPT_CHECKSUM_NAME
#define VERIFY_CHUNK ((size_t)1 << 20)  // elements read at a time by ckpt_verify

// Checksums are defined over the little-endian fp32 bytes; this host's floats are those bytes.
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint checksums assume a little-endian host"
#endif

#define h5Check(x) h5_check((long)(x), #x, __FILE__, __LINE__)
static long h5_check(long r, const char *what, const char *file, int line) {
    if (r < 0) err_fatal_at(file, line, "HDF5 call failed: %s (disk full, permissions, or a corrupt file?)", what);
    return r;
}

// collective: every rank opens the file through MPI-IO; else this rank alone reads it
static hid_t open_file_with(const char *path, int create, int collective) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);  // we report errors ourselves, one line each
    hid_t fapl = h5Check(H5Pcreate(H5P_FILE_ACCESS));
    if (collective) h5Check(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
    // Parallel file systems often lack the flock() HDF5 uses, and readers never see a file
    // before its atomic rename anyway: locking is off unless HDF5_USE_FILE_LOCKING says otherwise.
    if (!getenv("HDF5_USE_FILE_LOCKING")) h5Check(H5Pset_file_locking(fapl, 0, 1));
    hid_t f = create ? H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl) : H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    return f;
}

static hid_t open_file(const char *path, int create) { return open_file_with(path, create, 1); }

// Why HDF5 could not open a checkpoint: the system's reason first (missing, permissions, a
// folder, a path through a file), then what the bytes are.
static const char *open_error(const char *file) {
    static char err[2600];
    const char *why = comm_read_problem(file);
    if (!why)
        why = H5Fis_hdf5(file) > 0 ? "a damaged HDF5 file (truncated or still being written?)"
                                   : "not an HDF5 file (fsdpc checkpoints are; give a checkpoint folder or its step_*.h5)";
    snprintf(err, sizeof err, "cannot open checkpoint '%s': %s", file, why);
    return err;
}

// Why creating a checkpoint's file failed, when HDF5 does not say: the system's reason, if a
// plain create fails too (the caller removes the file either way).
static const char *create_error(const char *path) {
    static char err[1400];
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) return close(fd), "creating the file failed (in HDF5)";
    snprintf(err, sizeof err, "creating the file failed: %s", comm_path_error(path, errno));
    return err;
}

// ---- attributes ----

static int attr_write(hid_t loc, const char *name, hid_t type, const void *val) {
    hid_t sp = H5Screate(H5S_SCALAR), a = sp < 0 ? -1 : H5Acreate2(loc, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    int ok = a >= 0 && H5Awrite(a, type, val) >= 0;
    if (a >= 0) H5Aclose(a);
    if (sp >= 0) H5Sclose(sp);
    return ok;
}

static int attr_write_str(hid_t loc, const char *name, const char *val) {
    hid_t t = H5Tcopy(H5T_C_S1);
    int ok = t >= 0 && H5Tset_size(t, strlen(val) + 1) >= 0 && attr_write(loc, name, t, val);
    if (t >= 0) H5Tclose(t);
    return ok;
}

// ---- reading what a file holds, for validate.c to judge ----

// An attribute as it is: its class and shape are recorded, never converted (a string where a
// number belongs stays a string). A string is kept up to 1 MiB.
static void attr_value(hid_t a, CkptAttr *out) {
    out->kind = CKPT_ATTR_OTHER;
    hid_t sp = H5Aget_space(a), t = H5Aget_type(a);
    int scalar = sp >= 0 && H5Sget_simple_extent_type(sp) == H5S_SCALAR;
    H5T_class_t cls = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    if (scalar && cls == H5T_INTEGER && H5Tget_size(t) <= 8) {
        int64_t x = 0;
        if (H5Tget_sign(t) == H5T_SGN_NONE) {
            if (H5Aread(a, H5T_NATIVE_UINT64, &out->bits) >= 0) out->kind = CKPT_ATTR_INT;
        } else if (H5Aread(a, H5T_NATIVE_INT64, &x) >= 0) {
            out->bits = (uint64_t)x;
            out->neg = x < 0;
            out->kind = CKPT_ATTR_INT;
        }
    } else if (scalar && cls == H5T_FLOAT) {
        if (H5Aread(a, H5T_NATIVE_DOUBLE, &out->f) >= 0) out->kind = CKPT_ATTR_FLOAT;
    } else if (scalar && cls == H5T_STRING) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        if (mt >= 0 && H5Tset_cset(mt, H5Tget_cset(t)) >= 0) {
            if (H5Tis_variable_str(t) > 0) {  // h5py writes these
                char *s = NULL;
                if (H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, &s) >= 0) {
                    out->kind = CKPT_ATTR_STR;
                    out->s = !s ? strdup("") : strlen(s) <= (1u << 20) ? strdup(s) : NULL;
                }
                if (s) H5free_memory(s);
            } else {
                size_t n = H5Tget_size(t);  // one more in memory keeps a full-width unterminated string whole
                char *s = n > 0 && n <= (1u << 20) ? mallocCheck(n + 1) : NULL;
                out->kind = CKPT_ATTR_STR;
                if (s && (H5Tset_size(mt, n + 1) < 0 || H5Aread(a, mt, s) < 0)) out->kind = CKPT_ATTR_OTHER;
                if (out->kind == CKPT_ATTR_STR) out->s = s;
                else free(s);
            }
        }
        if (mt >= 0) H5Tclose(mt);
    }
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
}

// the attribute name of object loc (kind ABSENT when it has none)
static void attr_named(hid_t loc, const char *name, CkptAttr *out) {
    memset(out, 0, sizeof *out);
    out->name = name;
    htri_t e = H5Aexists(loc, name);
    if (e == 0) return;
    hid_t a = e < 0 ? -1 : H5Aopen(loc, name, H5P_DEFAULT);
    out->kind = CKPT_ATTR_OTHER;
    if (a >= 0) {
        attr_value(a, out);
        H5Aclose(a);
    }
}

typedef struct {
    CkptAttr *a;
    size_t n, cap;
} AttrList;

static herr_t collect_attr(hid_t loc, const char *name, const H5A_info_t *info, void *arg) {
    AttrList *l = arg;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->a = realloc(l->a, l->cap * sizeof *l->a);
        if (!l->a) err_fatal("out of memory reading checkpoint attributes");
    }
    CkptAttr *a = &l->a[l->n++];
    attr_named(loc, name, a);
    a->name = strdup(name);
    if (!a->name) err_fatal("out of memory reading checkpoint attributes");
    return 0;
}

static void attr_free(CkptAttr *a) { free((char *)a->s); }

// The names of the links in group `dir` of f ("." for the root), appended to *links as
// "dir/name" (bare names at the root); a missing or unreadable group adds none.
static void links_read(hid_t f, const char *dir, char ***links, size_t *n, size_t *cap) {
    int root = !strcmp(dir, ".");
    H5G_info_t gi;  // fails for a dataset of that name: it has no links
    if ((!root && H5Lexists(f, dir, H5P_DEFAULT) <= 0) || H5Gget_info_by_name(f, dir, &gi, H5P_DEFAULT) < 0) return;
    for (hsize_t i = 0; i < gi.nlinks; i++) {
        ssize_t len = H5Lget_name_by_idx(f, dir, H5_INDEX_NAME, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
        if (len < 0 || len > 4096) continue;  // a name that long is no schema entry; it is not listed
        size_t pre = root ? 0 : strlen(dir) + 1;
        char *path = mallocCheck(pre + (size_t)len + 1);
        if (!root) memcpy(path, dir, pre - 1), path[pre - 1] = '/';
        if (H5Lget_name_by_idx(f, dir, H5_INDEX_NAME, H5_ITER_INC, i, path + pre, (size_t)len + 1, H5P_DEFAULT) < 0) {
            free(path);
            continue;
        }
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 16;
            *links = realloc(*links, *cap * sizeof **links);
            if (!*links) err_fatal("out of memory listing checkpoint entries");
        }
        (*links)[(*n)++] = path;
    }
}

// What the file holds: every root attribute, the number of links in /model and the links at the
// root, in /optim and in /source; with ngroups > 0 also every link of the first ngroups state
// groups, with its rank, extents, type and crc32 attribute.
static void desc_read(hid_t f, int ngroups, CkptDesc *d) {
    memset(d, 0, sizeof *d);
    AttrList l = {0};
    H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_INC, NULL, collect_attr, &l);  // an unreadable list reads as no attributes
    d->attrs = l.a, d->nattrs = l.n;
    H5G_info_t gi;
    d->model_links = H5Lexists(f, "model", H5P_DEFAULT) > 0 && H5Gget_info_by_name(f, "model", &gi, H5P_DEFAULT) >= 0 ? (int64_t)gi.nlinks : -1;
    char **links = NULL;
    size_t nlinks = 0, lcap = 0;
    links_read(f, ".", &links, &nlinks, &lcap);
    links_read(f, "optim", &links, &nlinks, &lcap);
    links_read(f, "source", &links, &nlinks, &lcap);
    d->links = (const char *const *)links, d->nlinks = nlinks;
    size_t cap = 0;
    CkptDataset *ds = NULL;
    for (int g = 0; g < ngroups; g++) {
        hid_t grp = H5Lexists(f, ckpt_groups[g], H5P_DEFAULT) > 0 ? H5Gopen2(f, ckpt_groups[g], H5P_DEFAULT) : -1;
        if (grp < 0 || H5Gget_info(grp, &gi) < 0) gi.nlinks = 0;  // a missing group: its tensors are missing
        for (hsize_t i = 0; i < gi.nlinks; i++) {
            ssize_t len = H5Lget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
            if (len < 0) continue;
            char *name = mallocCheck((size_t)len + 1);
            H5Lget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, (size_t)len + 1, H5P_DEFAULT);
            if (d->ndatasets == cap) {
                cap = cap ? 2 * cap : 64;
                ds = realloc(ds, cap * sizeof *ds);
                if (!ds) err_fatal("out of memory listing checkpoint tensors");
            }
            CkptDataset *x = &ds[d->ndatasets++];
            memset(x, 0, sizeof *x);
            x->group = g, x->name = name, x->ndim = -1, x->crc.name = CHECKSUM_NAME;
            hid_t dset = H5Dopen2(grp, name, H5P_DEFAULT);  // fails for groups and dangling links
            if (dset < 0) continue;
            hid_t sp = H5Dget_space(dset), ty = H5Dget_type(dset);
            int nd = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
            hsize_t dims[H5S_MAX_RANK];
            if (nd >= 0 && nd <= H5S_MAX_RANK && H5Sget_simple_extent_dims(sp, dims, NULL) == nd) {
                uint64_t *dd = mallocCheck((size_t)(nd ? nd : 1) * sizeof *dd);
                for (int j = 0; j < nd; j++) dd[j] = dims[j];
                x->ndim = nd, x->dims = dd;
            }
            x->fp32 = ty >= 0 && H5Tget_class(ty) == H5T_FLOAT && H5Tget_size(ty) == 4;
            attr_named(dset, CHECKSUM_NAME, &x->crc);
            if (ty >= 0) H5Tclose(ty);
            if (sp >= 0) H5Sclose(sp);
            H5Dclose(dset);
        }
        if (grp >= 0) H5Gclose(grp);
    }
    d->datasets = ds;
}

static void desc_free(CkptDesc *d) {
    for (size_t i = 0; i < d->nattrs; i++) {
        attr_free((CkptAttr *)&d->attrs[i]);
        free((char *)d->attrs[i].name);
    }
    for (size_t i = 0; i < d->ndatasets; i++) {
        attr_free((CkptAttr *)&d->datasets[i].crc);
        free((char *)d->datasets[i].name);
        free((uint64_t *)d->datasets[i].dims);
    }
    for (size_t i = 0; i < d->nlinks; i++) free((char *)d->links[i]);
    free((CkptAttr *)d->attrs);
    free((CkptDataset *)d->datasets);
    free((char **)d->links);
    memset(d, 0, sizeof *d);
}

typedef CkptHeader Header;

// Every root attribute, read and checked; base supplies model fields a file may lack.
static const char *read_header(hid_t f, const char *file, const ModelConfig *base, Header *h) {
    CkptDesc d;
    desc_read(f, 0, &d);
    const char *e = ckpt_check_header(&d, file, base, h);
    desc_free(&d);
    return e;
}

// a config field the file's family does not store (rope_theta without rotary positions) keeps
// fsdpc's default, as validation wants one
static const ModelConfig old_defaults = {.rope_theta = 10000.0f};

// The header of a file this rank opens alone.
static const char *read_header_of(const char *path, Header *h) {
    hid_t f = open_file_with(path, 0, 0);
    if (f < 0) return open_error(path);
    const char *e = read_header(f, path, &old_defaults, h);
    H5Fclose(f);
    return e;
}

// ---- the model source's files (/source) ----

void ckpt_source_free(CkptSource *src) {
    for (int i = 0; i < CKPT_SOURCE_FILES; i++) free(src->text[i]);
    memset(src, 0, sizeof *src);
}

const char *ckpt_source_from_dir(const char *dir, CkptSource *src) {
    static char msg[1400];
    char path[1200];
    memset(src, 0, sizeof *src);
    for (int i = 0; i < CKPT_SOURCE_FILES; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, ckpt_source_names[i]);
        FILE *f = fopen(path, "rb");
        struct stat st;
        if (!f && errno == ENOENT) continue;
        const char *why = !f || fstat(fileno(f), &st) != 0 ? strerror(errno) : !S_ISREG(st.st_mode) ? "not a regular file"
                          : (uint64_t)st.st_size > CKPT_SOURCE_MAX_BYTES ? "larger than the 16 MiB fsdpc keeps of such a file" : NULL;
        size_t n = why ? 0 : (size_t)st.st_size;
        char *text = n ? mallocCheck(n) : NULL;
        if (text && fread(text, 1, n, f) != n) why = "a short read";
        if (f) fclose(f);
        if (why) {
            free(text);
            ckpt_source_free(src);
            snprintf(msg, sizeof msg, "cannot read '%s': %s", path, why);
            return msg;
        }
        src->text[i] = text, src->len[i] = n;
    }
    return NULL;
}

const char *ckpt_source_read(const char *file, CkptSource *src) {
    static char msg[1600];
    char path[64];
    memset(src, 0, sizeof *src);
    hid_t f = open_file_with(file, 0, 0);
    if (f < 0) return open_error(file);
    const char *e = NULL;
    int has = H5Lexists(f, "source", H5P_DEFAULT) > 0;
    for (int i = 0; has && !e && i < CKPT_SOURCE_FILES; i++) {
        snprintf(path, sizeof path, "source/%s", ckpt_source_names[i]);
        if (H5Lexists(f, path, H5P_DEFAULT) <= 0) continue;
        hid_t ds = H5Dopen2(f, path, H5P_DEFAULT), sp = ds < 0 ? -1 : H5Dget_space(ds), ty = ds < 0 ? -1 : H5Dget_type(ds);
        hsize_t n = 0;
        int ok = sp >= 0 && ty >= 0 && H5Sget_simple_extent_ndims(sp) == 1 && H5Sget_simple_extent_dims(sp, &n, NULL) == 1 &&
                 H5Tget_class(ty) == H5T_INTEGER && H5Tget_size(ty) == 1 && n > 0 && n <= CKPT_SOURCE_MAX_BYTES;
        char *text = ok ? mallocCheck((size_t)n) : NULL;
        if (ok && H5Dread(ds, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, text) < 0) ok = 0;
        if (ok) src->text[i] = text, src->len[i] = (size_t)n;
        else free(text);
        if (!ok)
            e = (snprintf(msg, sizeof msg, "checkpoint '%s': /%s is not a 1-D byte dataset of 1 byte to 16 MiB (corrupt file?)", file,
                          path), msg);
        if (ty >= 0) H5Tclose(ty);
        if (sp >= 0) H5Sclose(sp);
        if (ds >= 0) H5Dclose(ds);
    }
    H5Fclose(f);
    if (e) ckpt_source_free(src);
    return e;
}

void ckpt_source_share(CkptSource *src) {
    uint64_t len[CKPT_SOURCE_FILES];
    for (int i = 0; i < CKPT_SOURCE_FILES; i++) len[i] = src->text[i] ? src->len[i] : 0;
    comm_bcast_bytes(comm_world(), len, sizeof len, 0);
    for (int i = 0; i < CKPT_SOURCE_FILES; i++) {
        if (comm_info.rank != 0) {
            free(src->text[i]);
            src->text[i] = len[i] ? mallocCheck((size_t)len[i]) : NULL;
            src->len[i] = (size_t)len[i];
        }
        if (len[i]) comm_bcast_bytes(comm_world(), src->text[i], (size_t)len[i], 0);
    }
}

// Collective: /source/<name> as 1-D bytes for each file src holds (the same on every rank); rank 0
// writes the contents.
static const char *write_source(hid_t f, const CkptSource *src) {
    char path[64];
    int ok = 1;
    for (int i = 0; src && ok && i < CKPT_SOURCE_FILES; i++) {
        if (!src->text[i]) continue;
        snprintf(path, sizeof path, "source/%s", ckpt_source_names[i]);
        hsize_t n = src->len[i];
        hid_t lcpl = h5Check(H5Pcreate(H5P_LINK_CREATE));
        h5Check(H5Pset_create_intermediate_group(lcpl, 1));
        hid_t fs = h5Check(H5Screate_simple(1, &n, NULL)), ms = h5Check(H5Screate_simple(1, &n, NULL));
        hid_t ds = H5Dcreate2(f, path, H5T_STD_U8LE, fs, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        if (comm_info.rank != 0) {
            h5Check(H5Sselect_none(fs));
            h5Check(H5Sselect_none(ms));
        }
        hid_t dxpl = h5Check(H5Pcreate(H5P_DATASET_XFER));
        h5Check(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
        ok = ds >= 0 && H5Dwrite(ds, H5T_NATIVE_UCHAR, ms, fs, dxpl, src->text[i]) >= 0;
        H5Pclose(dxpl);
        if (ds >= 0) H5Dclose(ds);
        H5Sclose(ms);
        H5Sclose(fs);
        H5Pclose(lcpl);
    }
    return ok ? NULL : "writing the model source's files failed";
}

// ---- tensors ----

static int count_tensors(const ModelPlan *plan) {
    int n = 0;
    for (int u = 0; u < plan->nunits; u++) n += plan->units[u].ntensors;
    return n;
}

// The first ngroups groups hold exactly plan's tensors, each of the right rank, shape and type
// with, from format_version 2 on, its crc32 attribute (into want, group-major, plan order).
// Every load and verify comes here: a file that passes and holds entries outside the schema gets
// one warning naming them (once per file, rank 0).
static const char *check_tensors(hid_t f, const char *file, const ModelPlan *plan, int ngroups, int version, uint32_t *want) {
    static char warned[1400];
    char extra[1200];
    CkptDesc d;
    desc_read(f, ngroups, &d);
    const char *e = ckpt_check_tensors(&d, file, plan, ngroups, version, want);
    if (!e && ckpt_unknown_entries(&d, extra, sizeof extra) && strcmp(warned, file) != 0) {
        snprintf(warned, sizeof warned, "%s", file);
        log_msg("warning: checkpoint '%s' holds %s, which this fsdpc does not read (a newer fsdpc may have written them): "
                "ignored\n", file, extra);
    }
    desc_free(&d);
    return e;
}

// Adds elements [begin, begin+count) (count > 0) of the whole row-major tensor t (1-D or 2-D) to
// the selection as at most three hyperslabs: a partial first row, whole rows, a partial last row.
// op: H5S_SELECT_SET for the first, then H5S_SELECT_OR, which it returns.
static H5S_seloper_t select_flat(hid_t space, const TensorSpec *t, size_t begin, size_t count, H5S_seloper_t op) {
    if (t->ndim == 1) {
        hsize_t st[1] = {begin}, ct[1] = {count};
        h5Check(H5Sselect_hyperslab(space, op, st, NULL, ct, NULL));
        return H5S_SELECT_OR;
    }
    size_t C = (size_t)t->full[1], end = begin + count;
    size_t r0 = begin / C, r1 = end / C;
    if (begin % C) {  // partial first row
        size_t stop = (r0 + 1) * C < end ? (r0 + 1) * C : end;
        hsize_t st[2] = {r0, begin % C}, ct[2] = {1, stop - begin};
        h5Check(H5Sselect_hyperslab(space, op, st, NULL, ct, NULL));
        op = H5S_SELECT_OR;
        r0++;
        if (stop == end) return op;
    }
    if (r1 > r0) {
        hsize_t st[2] = {r0, 0}, ct[2] = {r1 - r0, C};
        h5Check(H5Sselect_hyperslab(space, op, st, NULL, ct, NULL));
        op = H5S_SELECT_OR;
    }
    if (end % C && r1 >= r0) {
        hsize_t st[2] = {r1, 0}, ct[2] = {1, end % C};
        h5Check(H5Sselect_hyperslab(space, op, st, NULL, ct, NULL));
        op = H5S_SELECT_OR;
    }
    return op;
}

static void select_range(hid_t space, const TensorSpec *t, size_t begin, size_t count) {
    if (!count) h5Check(H5Sselect_none(space));
    else select_flat(space, t, begin, count, H5S_SELECT_SET);
}

// Selects tp rank `rank`'s elements [begin, begin+count) of its part of t (model_tp_run) in the
// whole tensor, in their order: runs inside one row that repeat a row apart (a column split's
// rows) become one 2-D hyperslab, the others their flat ranges.
static void select_part(hid_t space, const TensorSpec *t, int tp, int rank, size_t begin, size_t count) {
    if (tp < 2 || !count) {
        select_range(space, t, begin, count);
        return;
    }
    H5S_seloper_t op = H5S_SELECT_SET;
    size_t C = t->ndim == 2 ? (size_t)t->full[1] : 1, b0 = 0, blen = 0, brows = 0;
    for (size_t done = 0; done <= count;) {
        size_t full = 0, n = 0;
        if (done < count) {
            n = model_tp_run(t, tp, rank, begin + done, &full);
            if (n > count - done) n = count - done;
        }
        int in_row = done < count && t->ndim == 2 && full % C + n <= C;
        if (brows && in_row && n == blen && full == b0 + brows * C) {
            brows++;
        } else {
            if (brows) {  // the block so far
                hsize_t st[2] = {b0 / C, b0 % C}, ct[2] = {brows, blen};
                h5Check(H5Sselect_hyperslab(space, op, st, NULL, ct, NULL));
                op = H5S_SELECT_OR;
                brows = 0;
            }
            if (in_row) b0 = full, blen = n, brows = 1;
            else if (done < count) op = select_flat(space, t, full, n, op);
        }
        if (done == count) break;
        done += n;
    }
}

// crc32 of n zero bytes (n of them: the gaps between a tp rank's runs repeat, so the last is kept)
static uLong zeros_crc(size_t n) {
    static size_t last_n = 0;
    static uLong last = 0;
    if (n == last_n) return last;
    uLong r = 0, p = crc32_z(0, (const Bytef *)"", 0);
    static const Bytef zero[1] = {0};
    p = crc32_z(p, zero, 1);
    size_t plen = 1, m = n;
    for (; m; m >>= 1, p = crc32_combine(p, p, (z_off_t)plen), plen *= 2)
        if (m & 1) r = crc32_combine(r, p, (z_off_t)plen);
    last_n = n;
    return last = r;
}

// The crc32 of the whole tensor t with this rank's elements [begin, begin+count) of its tp part
// (x, in their order) in place and zeros everywhere else. crc32 is affine, so XOR-ing every
// rank's such checksum (a rank holding nothing gives the zeros' checksum) over k ranks, plus the
// zeros' checksum once more when k is even, is the whole tensor's (tp_checksum_combine).
static size_t whole_numel(const TensorSpec *t) { return (size_t)t->full[0] * (t->ndim == 2 ? (size_t)t->full[1] : 1); }

static uint32_t piece_crc(const TensorSpec *t, int tp, int rank, size_t begin, size_t count, const float *x) {
    uLong acc = crc32_z(0, Z_NULL, 0);
    size_t pos = 0, total = whole_numel(t);
    for (size_t done = 0; done < count;) {
        size_t full, n = model_tp_run(t, tp, rank, begin + done, &full);
        if (n > count - done) n = count - done;
        if (full > pos) acc = crc32_combine(acc, zeros_crc((full - pos) * sizeof(float)), (z_off_t)((full - pos) * sizeof(float)));
        acc = crc32_combine(acc, crc32_z(crc32_z(0, Z_NULL, 0), (const Bytef *)(x + done), n * sizeof(float)), (z_off_t)(n * sizeof(float)));
        pos = full + n;
        done += n;
    }
    if (total > pos) acc = crc32_combine(acc, zeros_crc((total - pos) * sizeof(float)), (z_off_t)((total - pos) * sizeof(float)));
    return (uint32_t)acc;
}

static uint32_t crc_of(const float *x, size_t n) { return (uint32_t)crc32_z(crc32_z(0, Z_NULL, 0), (const Bytef *)x, n * sizeof(float)); }

// Collective read or write of this rank's slice of one tensor; `dev` is on the compute device
// when on_device (HDF5 then goes through a host copy). *crc gets the slice's range and CRC.
// Returns NULL or what failed on this rank (the caller agrees with the others).
// Under tensor parallelism (plan tp > 1) the slice is of this tp rank's part of t, placed in the
// whole tensor (select_part), and *crc is its piece checksum (piece_crc) when `counted`, else
// the zeros' (a slice another rank's piece covers).
static const char *xfer_tensor(hid_t file, const char *group, const TensorSpec *t, const ModelPlan *plan, size_t begin,
                               size_t count, float *dev, int on_device, int write, int counted, CommCrc *crc) {
    static char msg[256];
    float *buf = dev;
    if (on_device) {
        buf = mallocCheck((count ? count : 1) * sizeof(float));
        if (write && count) kern_download(buf, dev, count * sizeof(float));
    }
    char path[160];
    snprintf(path, sizeof path, "%s/%s", group, t->name);
    int tp = plan->tp > 1 ? plan->tp : 1;
    hsize_t dims[2] = {(hsize_t)t->full[0], (hsize_t)t->full[1]};  // the whole tensor, at every tp degree
    hid_t fspace = h5Check(H5Screate_simple(t->ndim, dims, NULL));
    hid_t ds = write ? H5Dcreate2(file, path, H5T_IEEE_F32LE, fspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                     : H5Dopen2(file, path, H5P_DEFAULT);
    select_part(fspace, t, tp, plan->tp_rank, begin, count);
    hsize_t mdim[1] = {count ? count : 1};
    hid_t mspace = h5Check(H5Screate_simple(1, mdim, NULL));
    if (!count) h5Check(H5Sselect_none(mspace));
    hid_t dxpl = h5Check(H5Pcreate(H5P_DATASET_XFER));
    h5Check(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
    int ok = ds >= 0 && (write ? H5Dwrite(ds, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, buf)
                               : H5Dread(ds, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, buf)) >= 0;
    H5Pclose(dxpl);
    H5Sclose(mspace);
    H5Sclose(fspace);
    if (ds >= 0) H5Dclose(ds);
    if (tp > 1) *crc = (CommCrc){0, whole_numel(t) * sizeof(float), ok ? piece_crc(t, tp, plan->tp_rank, begin, counted ? count : 0, buf) : 0};
    else *crc = (CommCrc){begin * sizeof(float), count * sizeof(float), ok && count ? crc_of(buf, count) : 0};
    if (buf != dev) {
        if (ok && !write && count) kern_upload(dev, buf, count * sizeof(float));
        free(buf);
    }
    if (ok) return NULL;
    snprintf(msg, sizeof msg, "%s /%s failed", write ? (ds < 0 ? "creating" : "writing") : "reading", path);
    return msg;
}

// the buffer of state group `which` (ckpt_groups order: weights, then AdamW's two moments)
static float *state_buffer(const ShardState *s, int u, int which) {
    float *exp_avg, *exp_avg_sq;
    shard_moments(s, u, &exp_avg, &exp_avg_sq);
    return which == 0 ? shard_master(s, u) : which == 1 ? exp_avg : exp_avg_sq;
}

// Every tensor of every unit with this rank's slice in the first ngroups state groups (1: the
// weights only); crcs (group-major, plan order) get the slices' checksums. Stops at the first
// failure on any rank: returns the agreed message (valid until the next agreement) or NULL.
static const char *xfer_state(hid_t file, const ShardState *s, int write, int ngroups, CommCrc *crcs) {
    const ModelPlan *plan = shard_plan(s);
    int k = 0;
    for (int g = 0; g < ngroups; g++)
        for (int u = 0; u < plan->nunits; u++)
            for (int t = 0; t < plan->units[u].ntensors; t++, k++) {
                size_t begin, local, n = shard_tensor_slice(s, u, t, &begin, &local);
                // replicas hold the same slices, and a tensor every tp rank holds whole is the same
                // on each: one group, and its first tp rank, writes and counts them
                int dup = plan->tp > 1 && plan->units[u].t[t].tp_split == TP_WHOLE && plan->tp_rank > 0;
                int counted = shard_is_writer(s) && !dup;
                if (write && !counted) n = 0;
                const char *e = comm_first_error(xfer_tensor(file, ckpt_groups[g], &plan->units[u].t[t], plan, begin, n,
                                                             state_buffer(s, u, g) + local, shard_state_on_device(s), write,
                                                             counted, &crcs[k]));
                if (e) return e;
                comm_deadline_progress();
            }
    return NULL;
}

// The checksums of the first ngroups groups' whole tensors from every rank's pieces (plan tp > 1):
// XOR over all ranks, then the zeros' checksum once more when their number is even (piece_crc).
static void tp_checksums(const ModelPlan *plan, int ngroups, CommCrc *c) {
    size_t n = (size_t)ngroups * count_tensors(plan);
    uint32_t *x = mallocCheck(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (uint32_t)c[i].crc;
    comm_allreduce_xor_u32(comm_world(), x, n);
    for (size_t i = 0; i < n; i++)
        c[i].crc = x[i] ^ (comm_info.world % 2 ? 0 : (uint32_t)zeros_crc(c[i].len));
    free(x);
}

// After comm_allreduce_crc32 over ranks that together hold every tensor once: the first tensor
// whose combined checksum is not want's.
static const char *checksum_mismatch(const char *file, const ModelPlan *plan, int ngroups, const CommCrc *got, const uint32_t *want) {
    static char msg[1400];
    int k = 0;
    for (int g = 0; g < ngroups; g++)
        for (int u = 0; u < plan->nunits; u++)
            for (int t = 0; t < plan->units[u].ntensors; t++, k++) {
                const TensorSpec *ts = &plan->units[u].t[t];
                if (got[k].begin != 0 || got[k].len != whole_numel(ts) * sizeof(float))
                    err_fatal("internal error: the slices of /%s/%s do not tile it", ckpt_groups[g], ts->name);
                if ((uint32_t)got[k].crc != want[k])
                    return snprintf(msg, sizeof msg, "checkpoint '%s': tensor /%s/%s fails its checksum (crc32 of the data %08x, recorded %08x): the file is corrupt",
                                    file, ckpt_groups[g], ts->name, (uint32_t)got[k].crc, want[k]),
                           msg;
            }
    return NULL;
}

// Fault-injection hook for tests: FSDPC_TEST_CKPT_PAUSE="STEP:SECONDS[:RANK]" holds the write of
// that step's checkpoint half-way (data written, file not closed or published), on every rank or
// only on RANK, so a test can kill a rank or leave the others waiting.
static void test_pause(int step) {
    const char *e = getenv("FSDPC_TEST_CKPT_PAUSE");
    int at, sec, rank = -1;
    if (!e || sscanf(e, "%d:%d:%d", &at, &sec, &rank) < 2 || at != step || (rank >= 0 && rank != comm_info.rank)) return;
    fprintf(stderr, "test hook: checkpoint write of step %d paused (rank %d, pid %d)\n", step, comm_info.rank, (int)getpid());
    fflush(stderr);
    sleep((unsigned)sec);
}

static const char *write_header(hid_t f, const Config *cfg, const CkptMeta *meta) {
    const ModelConfig *m = &cfg->model;
    int version = FORMAT_VERSION, ok = 1;
    char run[2048];
    config_describe(cfg, run, sizeof run);
    ok &= attr_write_str(f, "format", FORMAT_NAME);
    ok &= attr_write(f, "format_version", H5T_NATIVE_INT, &version);
    ok &= attr_write(f, "step", H5T_NATIVE_INT, &meta->step);
    ok &= attr_write(f, "tokens_seen", H5T_NATIVE_UINT64, &meta->tokens_seen);
    ok &= attr_write(f, "data_position", H5T_NATIVE_UINT64, &meta->data_position);
    ok &= attr_write(f, "rng_state", H5T_NATIVE_UINT64, &meta->rng_state);
    ok &= attr_write_str(f, "model_type", m->model_type);
    const ModelFamily *fam = family_find(m->model_type);
    if (!fam) return "this model family has no checkpoint attributes (model/family.h)";
    for (const FamilyField *fl = fam->ckpt_fields; fl->name; fl++)
        ok &= attr_write(f, fl->name, fl->type != FAMILY_FLOAT ? H5T_NATIVE_INT : H5T_NATIVE_FLOAT, (const char *)m + fl->off);
    ok &= attr_write_str(f, "run_config", run);
    ok &= attr_write_str(f, "tokenizer", cfg->tokenizer);
    ok &= attr_write_str(f, "run_id", meta->run_id);
    ok &= attr_write_str(f, "parent", meta->parent);
    ok &= attr_write_str(f, "lineage", meta->lineage);
    ok &= attr_write_str(f, "run_inputs", meta->inputs);
    ok &= attr_write_str(f, "checksum", CHECKSUM_NAME);
    for (int g = 0; g < 3 && ok; g++) {
        hid_t lcpl = h5Check(H5Pcreate(H5P_LINK_CREATE));
        h5Check(H5Pset_create_intermediate_group(lcpl, 1));
        hid_t grp = H5Gcreate2(f, ckpt_groups[g], lcpl, H5P_DEFAULT, H5P_DEFAULT);
        ok = grp >= 0;
        if (ok) H5Gclose(grp);
        H5Pclose(lcpl);
    }
    return ok ? NULL : "writing the attributes failed";
}

// every dataset's crc32 attribute, identical on every rank (a collective metadata write)
static const char *write_checksums(hid_t f, const ModelPlan *plan, const CommCrc *crcs) {
    char path[160];
    int k = 0;
    for (int g = 0; g < 3; g++)
        for (int u = 0; u < plan->nunits; u++)
            for (int t = 0; t < plan->units[u].ntensors; t++, k++) {
                snprintf(path, sizeof path, "%s/%s", ckpt_groups[g], plan->units[u].t[t].name);
                hid_t ds = H5Dopen2(f, path, H5P_DEFAULT);
                uint32_t c = (uint32_t)crcs[k].crc;
                int ok = ds >= 0 && attr_write(ds, CHECKSUM_NAME, H5T_STD_U32LE, &c);
                if (ds >= 0) H5Dclose(ds);
                if (!ok) return "writing the checksums failed";
            }
    return NULL;
}

static char claim_path[1100], claim_id[CKPT_RUN_ID_LEN + 1];  // rank 0's writer lock, if any
static const char *claim_lost(void);
static const char *check_replace(const char *path, const CkptMeta *meta);

// One agreed failure, kept: later agreements reuse comm_first_error's buffer.
static void agree(char *why, size_t len, const char *local) {
    const char *e = comm_first_error(local);
    if (e && !why[0]) snprintf(why, len, "%s", e);
}

// Test hook: FSDPC_TEST_CKPT_NO_RESERVE=1 skips the space check and reservation below, so that a
// test on a small file system can make the HDF5 write itself fail.
static int test_no_reserve(void) {
    const char *e = getenv("FSDPC_TEST_CKPT_NO_RESERVE");
    return e && !strcmp(e, "1");
}

// -1 when unknown: some network and FUSE file systems report no sizes at all
static double free_bytes(const char *dir) {
    struct statvfs v;
    return statvfs(dir, &v) == 0 && v.f_blocks > 0 ? (double)v.f_bavail * v.f_frsize : -1;
}

// Rank 0, once the file exists: the blocks the write will fill are allocated first (leaving the
// size to HDF5), so a disk that fills up cannot fail the collective writes part-way; quotas count
// here too. File systems without fallocate have had the statvfs check alone.
static const char *reserve_space(const char *tmp, double need) {
    static char msg[1400];
    int fd = open(tmp, O_WRONLY);
    int rc = fd < 0 ? -1 : fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)need), e = errno;
    if (fd >= 0) close(fd);
    if (rc == 0 || (fd >= 0 && (e == EOPNOTSUPP || e == ENOSYS || e == EINVAL))) return NULL;
    snprintf(msg, sizeof msg, "reserving %.1f MB for it failed: %s", need / 1e6, strerror(e));
    return msg;
}

// A parallel HDF5 write that fails part-way leaves the ranks' metadata caches out of step:
// closing the file then hangs in a collective some rank never reaches (OpenMPI's OMPIO), or
// fails and crashes in HDF5's exit-time cleanup (one rank). So every step's failure is agreed on
// outside HDF5, the file is never touched again, and the job ends through comm_abort_all after
// removing it. The free-space check and the reservation make that path rare: a file system
// filled by someone else mid-write, an I/O error.
void ckpt_save(const char *dir, const ShardState *s, const Config *cfg, const CkptMeta *meta, const CkptSource *src,
               CkptSaved *out) {
    double t0 = clock_now_s();
    char why[1400] = "", tmp[1200], err[2600] = "";
    const ModelPlan *plan = shard_plan(s);
    int nt = count_tensors(plan), checked = !test_no_reserve();
    out->bytes = 3.0 * (double)plan->num_params * sizeof(float);
    double need = out->bytes + (1 << 18) + 3.0 * nt * 4096, avail = -1;  // HDF5's metadata: < 1 KB a tensor
    for (int i = 0; src && i < CKPT_SOURCE_FILES; i++) need += (double)src->len[i];
    snprintf(out->path, sizeof out->path, "%s/step_%08d.h5", dir, meta->step);
    snprintf(tmp, sizeof tmp, "%s.%s.tmp", out->path, meta->run_id);  // one name per run: two writers never share it
    char phase[1300];
    snprintf(phase, sizeof phase, "the checkpoint write of '%s'", out->path);
    comm_deadline_begin(phase);
    const char *overlap = NULL;
    // every rank writes its slices into the file: each one's file-size limit must allow all of it
    uint64_t fmax = limits_file_size();
    if (fmax < (uint64_t)need)
        snprintf(err, sizeof err, "cannot write checkpoint '%s': it needs %.1f MB but ulimit -f (file size) allows %.1f MB on rank %d: raise "
                 "it (ulimit -f unlimited); the earlier checkpoints are kept", out->path, need / 1e6, (double)fmax / 1e6, comm_info.rank);
    else if (comm_info.rank == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST)
        snprintf(err, sizeof err, "cannot create checkpoint directory '%s': %s", dir, comm_path_error(dir, errno));
    else if (comm_info.rank == 0 && (overlap = io_output_check(out->path, "--checkpoint_dir")))  // one of the run's inputs
        snprintf(err, sizeof err, "%s; no checkpoint written", overlap);
    else if (comm_info.rank == 0 && checked && (avail = free_bytes(dir)) >= 0 && avail < need)
        snprintf(err, sizeof err, "cannot write checkpoint '%s': the file system is full (%.1f MB free, it needs %.1f MB); the earlier "
                 "checkpoints are kept", out->path, avail / 1e6, need / 1e6);
    comm_check_all(err[0] ? err : NULL);
    CommCrc *crcs = callocCheck((size_t)3 * nt, sizeof *crcs);
    hid_t f = open_file(tmp, 1);
    agree(why, sizeof why, f < 0 ? create_error(tmp) : NULL);
    if (!why[0]) agree(why, sizeof why, comm_info.rank == 0 && checked ? reserve_space(tmp, need) : NULL);
    if (!why[0]) agree(why, sizeof why, write_header(f, cfg, meta));
    if (!why[0]) agree(why, sizeof why, write_source(f, src));
    if (!why[0]) agree(why, sizeof why, xfer_state(f, s, 1, 3, crcs));
    if (!why[0]) {
        // only writers hold slices, in rank order: the world's concatenation is the tensor
        if (plan->tp > 1) tp_checksums(plan, 3, crcs);
        else comm_allreduce_crc32(comm_world(), crcs, (size_t)3 * nt);
        agree(why, sizeof why, write_checksums(f, plan, crcs));
    }
    if (!why[0]) test_pause(meta->step);
    if (!why[0]) agree(why, sizeof why, H5Fflush(f, H5F_SCOPE_GLOBAL) < 0 ? "flushing the file failed" : NULL);
    if (!why[0]) agree(why, sizeof why, H5Fclose(f) < 0 ? "closing the file failed" : NULL);
    free(crcs);
    if (why[0]) {
        double left = comm_info.rank == 0 ? free_bytes(dir) : -1;
        if (left >= 0 && left < need)
            snprintf(err, sizeof err, " (the file system has %.1f MB free, the checkpoint needs %.1f MB)", left / 1e6, need / 1e6);
        if (comm_info.rank == 0) unlink(tmp);
        ckpt_release_dir();  // the abort skips exit handlers
        comm_abort_all("cannot write checkpoint '%s': %s%s; its partial file was removed and the earlier checkpoints are kept",
                       out->path, why, err);
    }
    struct stat st;  // the reservation's blocks past the end go back (truncating to the size frees them)
    if (comm_info.rank == 0 && checked && stat(tmp, &st) == 0 && truncate(tmp, st.st_size) != 0)
        log_msg("warning: could not trim %s: %s\n", tmp, strerror(errno));
    // publish once every rank's slices are on disk, and only while the directory is ours
    const char *e = comm_info.rank == 0 ? claim_lost() : NULL;
    if (!e && comm_info.rank == 0) e = check_replace(out->path, meta);
    if (!e && comm_info.rank == 0 && rename(tmp, out->path) != 0)
        e = (snprintf(err, sizeof err, "renaming '%s' to '%s' failed: %s", tmp, out->path, strerror(errno)), err);
    if (e) unlink(tmp);
    e = comm_first_error(e);
    if (e) comm_fail_all("checkpoint of step %d not published: %s; the earlier checkpoints are kept", meta->step, e);
    comm_deadline_end();
    out->seconds = clock_now_s() - t0;
}

// ---- reading ----

// Each rank checksums its part of every tensor of the three groups, a bounded chunk at a time;
// the parts combine in rank order. The agreed error or NULL.
static const char *verify_checksums(hid_t f, const char *file, const ModelPlan *plan, const uint32_t *want) {
    static char msg[1400];
    int nt = count_tensors(plan), k = 0;
    size_t W = (size_t)comm_info.world, R = (size_t)comm_info.rank;
    CommCrc *c = callocCheck((size_t)3 * nt, sizeof *c);
    float *buf = mallocCheck(VERIFY_CHUNK * sizeof(float));
    const char *e = NULL;
    char path[160];
    for (int g = 0; g < 3; g++)
        for (int u = 0; u < plan->nunits; u++)
            for (int t = 0; t < plan->units[u].ntensors; t++, k++) {
                const TensorSpec *ts = &plan->units[u].t[t];
                size_t lo = ts->numel * R / W, hi = ts->numel * (R + 1) / W;
                uLong crc = crc32_z(0, Z_NULL, 0);
                snprintf(path, sizeof path, "%s/%s", ckpt_groups[g], ts->name);
                hid_t ds = e ? -1 : H5Dopen2(f, path, H5P_DEFAULT), fs = ds < 0 ? -1 : H5Dget_space(ds);
                for (size_t b = lo; !e && b < hi; b += VERIFY_CHUNK) {
                    size_t n = hi - b < VERIFY_CHUNK ? hi - b : VERIFY_CHUNK;
                    hsize_t md[1] = {n};
                    hid_t ms = h5Check(H5Screate_simple(1, md, NULL));
                    if (fs >= 0) select_range(fs, ts, b, n);
                    if (fs < 0 || H5Dread(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf) < 0)
                        e = (snprintf(msg, sizeof msg, "checkpoint '%s': cannot read tensor /%s (corrupt or truncated file?)", file, path), msg);
                    else crc = crc32_z(crc, (const Bytef *)buf, n * sizeof(float));
                    H5Sclose(ms);
                    comm_deadline_progress();
                }
                if (fs >= 0) H5Sclose(fs);
                if (ds >= 0) H5Dclose(ds);
                c[k] = (CommCrc){lo * sizeof(float), (hi - lo) * sizeof(float), crc};
            }
    free(buf);
    e = comm_first_error(e);
    if (!e) {
        comm_allreduce_crc32(comm_world(), c, (size_t)3 * nt);
        e = checksum_mismatch(file, plan, 3, c, want);  // the same on every rank
    }
    if (e && e != msg) snprintf(msg, sizeof msg, "%s", e);
    free(c);
    return e ? msg : NULL;
}

enum { MAX_HASHED_FIELDS = 16 };  // config fields a header hash covers (a family stores fewer)
static uint64_t header_hash(const Header *h) {
    uint64_t x = 0xcbf29ce484222325ULL;
    const ModelFamily *fam = family_find(h->model.model_type);  // known: the header passed its checks
    int v[2 + MAX_HASHED_FIELDS] = {h->version, h->meta.step}, i = 2;
    for (const FamilyField *fl = fam->ckpt_fields; fl->name && i < 2 + MAX_HASHED_FIELDS; fl++, i++)
        if (fl->type != FAMILY_FLOAT) v[i] = *(const int *)((const char *)&h->model + fl->off);
    const unsigned char *b = (const unsigned char *)v;
    for (size_t i = 0; i < sizeof v; i++) x = (x ^ b[i]) * 0x100000001b3ULL;
    return x;
}

const char *ckpt_verify(const char *file) {
    static char msg[1400];
    Header h;
    ckpt_check_same_file(file);
    char phase[1300];
    snprintf(phase, sizeof phase, "the check of checkpoint '%s'", file);
    comm_deadline_begin(phase);
    hid_t f = open_file_with(file, 0, 0);
    const char *e = f < 0 ? open_error(file) : read_header(f, file, &old_defaults, &h);
    // the ranks must be reading one file: a directory private to each node is not one
    uint64_t mine = e ? 0 : header_hash(&h), root = mine;
    comm_bcast_bytes(comm_world(), &root, sizeof root, 0);
    if (!e && root != mine)
        e = (snprintf(msg, sizeof msg, "rank %d reads other contents in '%s' than rank 0 (is the directory shared by every node?)",
                      comm_info.rank, file), msg);
    e = comm_first_error(e);
    ModelPlan plan = {0};
    uint32_t *want = NULL;
    if (!e) {
        model_plan_build(&plan, &h.model);
        want = mallocCheck((size_t)3 * count_tensors(&plan) * sizeof *want);
        e = comm_first_error(check_tensors(f, file, &plan, 3, h.version, want));
    }
    if (!e && h.version >= 2) e = verify_checksums(f, file, &plan, want);
    if (e && e != msg) snprintf(msg, sizeof msg, "%s", e);
    free(want);
    if (plan.units) model_plan_free(&plan);
    if (f >= 0) H5Fclose(f);
    comm_deadline_end();
    return e ? msg : NULL;
}

// Collective open and validation of the first ngroups groups against s's plan.
static hid_t open_checked(const char *file, const ShardState *s, int ngroups, Header *h, uint32_t *want) {
    ckpt_check_same_file(file);
    hid_t f = open_file(file, 0);
    const char *e = f < 0 ? open_error(file) : read_header(f, file, &shard_plan(s)->cfg, h);
    if (!e) e = ckpt_check_config(h, file, shard_plan(s));
    if (!e) e = check_tensors(f, file, shard_plan(s), ngroups, h->version, want);
    comm_check_all(e);
    if (h->version < 2)
        log_msg("Note: %s predates checksums (format_version %d): its contents are loaded unverified\n", file, h->version);
    return f;
}

// The first ngroups groups into s, each slice checked against its tensor's checksum.
static void load_groups(const char *file, ShardState *s, int ngroups, CkptMeta *meta) {
    const ModelPlan *plan = shard_plan(s);
    size_t n = (size_t)ngroups * count_tensors(plan);
    uint32_t *want = mallocCheck(n * sizeof *want);
    CommCrc *got = callocCheck(n, sizeof *got);
    Header h;
    char phase[1300];
    snprintf(phase, sizeof phase, "the checkpoint read of '%s'", file);
    comm_deadline_begin(phase);
    hid_t f = open_checked(file, s, ngroups, &h, want);
    const char *e = xfer_state(f, s, 0, ngroups, got);
    H5Fclose(f);
    if (e) comm_fail_all("checkpoint '%s': %s (corrupt or truncated file?)", file, e);
    if (h.version >= 2) {
        // every shard group holds every tensor once: each checks what its ranks read
        if (plan->tp > 1) tp_checksums(plan, ngroups, got);
        else comm_allreduce_crc32(shard_group(s), got, n);
        comm_check_all(checksum_mismatch(file, plan, ngroups, got, want));
    }
    free(want);
    free(got);
    comm_deadline_end();
    if (meta) *meta = h.meta;
    shard_master_changed(s);
    // a run that diverged can have saved NaN: said here by name, not as a non-finite first loss
    ShardTensorRef bad[3];
    int nbad = shard_nonfinite(s, ngroups, bad, 3);
    if (nbad) {
        char names[900] = "";
        size_t k = 0;
        for (int i = 0; i < nbad && i < 3 && k < sizeof names; i++)
            k += (size_t)snprintf(names + k, sizeof names - k, "%s%s/%s", i ? ", " : "", ckpt_groups[bad[i].state],
                                  plan->units[bad[i].unit].t[bad[i].tensor].name);
        comm_fail_all("checkpoint '%s' holds NaN or infinite values in %d tensor(s): %s%s (saved after the run diverged?): use an "
                      "earlier checkpoint", file, nbad, names, nbad > 3 ? ", ..." : "");
    }
}

void ckpt_load(const char *file, ShardState *s, const Config *cfg, CkptMeta *meta) {
    load_groups(file, s, 3, meta);
    shard_set_step(s, meta->step);
}

void ckpt_load_weights(const char *file, ShardState *s, const Config *cfg) { load_groups(file, s, 1, NULL); }

const char *ckpt_read_config(const char *file, ModelConfig *m, char *tokenizer, size_t tlen) {
    hid_t f = open_file_with(file, 0, 0);
    if (f < 0) return open_error(file);
    Header h;
    const char *e = read_header(f, file, m, &h);
    H5Fclose(f);
    if (e) return e;
    *m = h.model;
    snprintf(tokenizer, tlen, "%s", h.tokenizer);
    return NULL;
}

const char *ckpt_read_meta(const char *file, CkptMeta *meta) {
    Header h;
    const char *e = read_header_of(file, &h);
    if (!e) *meta = h.meta;
    return e;
}

void ckpt_check_same_file(const char *file) {
    char mine[1400], *theirs, *root;
    uint64_t size;
    uint32_t crc;
    if (ident_file(file, IDENT_HEAD_MAX, &size, &crc, mine, sizeof mine) == 0)
        snprintf(mine, sizeof mine, "%llu bytes (crc32 %08x of its first MiB and last 64 KiB)", (unsigned long long)size, crc);
    int r = comm_first_different(mine, &theirs, &root);
    if (r < 0) return;
    comm_fail_all("rank %d sees another file than rank 0 at checkpoint '%s' (rank %d: %s; rank 0: %s): a relative path from other "
                  "working directories, or node-local storage? give every rank the same checkpoint on storage they share",
                  r, file, r, theirs, root);
}

struct CkptReader {
    hid_t file;
    char path[1024];
    int version;
    const TensorSpec *cur;  // the tensor being read in order, up to element `next`, with its running crc
    size_t next;
    uLong crc;
};

CkptReader *ckpt_reader_open(const char *file, const ModelPlan *plan, const char **err) {
    hid_t f = open_file_with(file, 0, 0);
    Header h;
    *err = f < 0 ? open_error(file) : read_header(f, file, &plan->cfg, &h);
    if (!*err) *err = ckpt_check_config(&h, file, plan);
    if (!*err) *err = check_tensors(f, file, plan, 1, h.version, NULL);
    if (*err) {
        if (f >= 0) H5Fclose(f);
        return NULL;
    }
    CkptReader *r = callocCheck(1, sizeof *r);
    r->file = f;
    r->version = h.version;
    snprintf(r->path, sizeof r->path, "%s", file);
    return r;
}

const char *ckpt_reader_read(CkptReader *r, const TensorSpec *t, size_t begin, size_t count, float *dst) {
    static char msg[1400];
    char path[160];
    snprintf(path, sizeof path, "model/%s", t->name);
    hid_t ds = h5Check(H5Dopen2(r->file, path, H5P_DEFAULT));
    hid_t fspace = h5Check(H5Dget_space(ds));
    select_range(fspace, t, begin, count);
    hsize_t mdim[1] = {count};
    hid_t mspace = h5Check(H5Screate_simple(1, mdim, NULL));
    int ok = H5Dread(ds, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, dst) >= 0;
    H5Sclose(mspace);
    H5Sclose(fspace);
    const char *e = NULL;
    if (!ok) e = (snprintf(msg, sizeof msg, "cannot read /%s from checkpoint '%s' (corrupt or truncated file?)", path, r->path), msg);
    if (ok && r->version >= 2) {
        if (begin == 0) r->cur = t, r->next = 0, r->crc = crc32_z(0, Z_NULL, 0);
        if (r->cur == t && r->next == begin) {
            r->crc = crc32_z(r->crc, (const Bytef *)dst, count * sizeof(float));
            r->next = begin + count;
        } else {
            r->cur = NULL;  // read out of order: nothing to check against
        }
        if (r->cur == t && r->next == t->numel) {  // read whole: check it (open checked the attribute)
            CkptAttr a;
            uint32_t want;
            attr_named(ds, CHECKSUM_NAME, &a);
            if (ckpt_crc_value(&a, &want) && want != r->crc)
                e = (snprintf(msg, sizeof msg, "checkpoint '%s': tensor /%s fails its checksum (crc32 of the data %08x, recorded %08x): the file is corrupt",
                              r->path, path, (uint32_t)r->crc, want),
                     msg);
            attr_free(&a);
        }
    }
    H5Dclose(ds);
    return e;
}

void ckpt_reader_close(CkptReader *r) {
    H5Fclose(r->file);
    free(r);
}

// ---- the checkpoint directory ----

// A file named like a checkpoint and, once read_lineages has read its header, whose it is.
enum { ENTRY_UNUSABLE, ENTRY_NO_RUN, ENTRY_RUN };
typedef struct {
    char name[256];
    int step;     // from the name
    int kind;     // ENTRY_*: no usable header (unreadable, or its name says another step), written
                  // before run ids (format_version 1), or a run's
    int lineage;  // ENTRY_RUN: its lineage (a Kin set)
    int match;    // ENTRY_RUN: the caller's `ours` accepts its run_inputs
    char run_id[CKPT_RUN_ID_LEN + 1];
} Entry;

// step number of a name step_<digits>.h5, or -1
static int step_of(const char *name) {
    if (strncmp(name, "step_", 5) != 0) return -1;
    size_t n = strspn(name + 5, "0123456789");
    if (n == 0 || n > 9 || strcmp(name + 5 + n, ".h5") != 0) return -1;
    return atoi(name + 5);
}

static int newest_first(const void *a, const void *b) {
    const Entry *x = a, *y = b;
    return x->step != y->step ? (x->step < y->step) - (x->step > y->step) : strcmp(x->name, y->name);
}

// The checkpoints in dir, newest step first: regular files (or links to them) named
// step_<digits>.h5. NULL when dir cannot be read.
static Entry *list_checkpoints(const char *dir, int *n) {
    DIR *d = opendir(dir);
    *n = 0;
    if (!d) return NULL;
    int cap = 16;
    Entry *e = mallocCheck((size_t)cap * sizeof *e);
    char path[1400];
    struct stat st;
    for (struct dirent *de; (de = readdir(d));) {
        int step = step_of(de->d_name);
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (step < 0 || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;  // dangling links, directories
        if (*n == cap) e = realloc(e, (size_t)(cap *= 2) * sizeof *e);
        if (!e) err_fatal("out of memory listing '%s'", dir);
        memset(&e[*n], 0, sizeof e[*n]);
        snprintf(e[*n].name, sizeof e[*n].name, "%s", de->d_name);
        e[(*n)++].step = step;
    }
    closedir(d);
    qsort(e, *n, sizeof *e, newest_first);
    return e;
}

static int is_run_id(const char *s) { return strlen(s) == CKPT_RUN_ID_LEN && strspn(s, "0123456789abcdef") == CKPT_RUN_ID_LEN; }

// The next "<run_id>:<step>" of a lineage attribute at *p (malformed words are skipped: the
// attribute is the file's to lie in); 0 at its end.
static int lineage_next(const char **p, char id[CKPT_RUN_ID_LEN + 1], int *step) {
    for (;;) {
        const char *s = *p + strspn(*p, " ");
        size_t w = strcspn(s, " "), digits = w > CKPT_RUN_ID_LEN + 1 ? w - CKPT_RUN_ID_LEN - 1 : 0;
        *p = s + w;
        if (!w) return 0;
        if (strspn(s, "0123456789abcdef") != CKPT_RUN_ID_LEN || s[CKPT_RUN_ID_LEN] != ':' || digits == 0 || digits > 10 ||
            strspn(s + CKPT_RUN_ID_LEN + 1, "0123456789") != digits)
            continue;
        long long v = 0;
        for (size_t i = 0; i < digits; i++) v = v * 10 + (s[CKPT_RUN_ID_LEN + 1 + i] - '0');
        if (v > INT_MAX) continue;
        memcpy(id, s, CKPT_RUN_ID_LEN);
        id[CKPT_RUN_ID_LEN] = 0;
        *step = (int)v;
        return 1;
    }
}

// Run ids in sets (union-find): a checkpoint joins its run with every ancestor its lineage
// names, so the runs of one history (requeues, rewinds and the futures they abandoned) end up in
// one set, even past the CKPT_LINEAGE_MAX ancestors one file remembers, through the files between.
typedef struct {
    char (*id)[CKPT_RUN_ID_LEN + 1];  // sorted once sealed
    int *up;
    int n, cap;
} Kin;

static void kin_add(Kin *k, const char *id) {
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 64;
        k->id = realloc(k->id, (size_t)k->cap * sizeof *k->id);
        if (!k->id) err_fatal("out of memory grouping checkpoints by run");
    }
    snprintf(k->id[k->n++], sizeof k->id[0], "%s", id);
}

// a run and the ancestors its lineage names (files from before run ids have none)
static void kin_add_meta(Kin *k, const CkptMeta *m) {
    char id[CKPT_RUN_ID_LEN + 1];
    int step;
    if (!m->run_id[0]) return;
    kin_add(k, m->run_id);
    for (const char *p = m->lineage; lineage_next(&p, id, &step);) kin_add(k, id);
}

static int id_cmp(const void *a, const void *b) { return strcmp(a, b); }

// after the last kin_add: sorted, each id once and in a set of its own
static void kin_seal(Kin *k) {
    if (k->n) qsort(k->id, (size_t)k->n, sizeof *k->id, id_cmp);
    int n = 0;
    for (int i = 0; i < k->n; i++)
        if (!n || strcmp(k->id[i], k->id[n - 1]) != 0) memmove(k->id[n++], k->id[i], sizeof *k->id);
    k->n = n;
    k->up = mallocCheck((size_t)(n ? n : 1) * sizeof *k->up);
    for (int i = 0; i < n; i++) k->up[i] = i;
}

// the set of id, -1 for an id never added
static int kin_root(Kin *k, const char *id) {
    const char(*hit)[CKPT_RUN_ID_LEN + 1] = k->n && id[0] ? bsearch(id, k->id, (size_t)k->n, sizeof *k->id, id_cmp) : NULL;
    if (!hit) return -1;
    int i = (int)(hit - k->id);
    while (k->up[i] != i) i = k->up[i] = k->up[k->up[i]];
    return i;
}

static void kin_join_meta(Kin *k, const CkptMeta *m) {
    char id[CKPT_RUN_ID_LEN + 1];
    int step, a = kin_root(k, m->run_id);
    for (const char *p = m->lineage; a >= 0 && lineage_next(&p, id, &step);) {
        int b = kin_root(k, id);
        if (b >= 0 && b != a) k->up[b] = a;
    }
}

static void kin_free(Kin *k) {
    free(k->id);
    free(k->up);
    memset(k, 0, sizeof *k);
}

// Rank 0: the header of each of dir's n checkpoints, and their lineages: files whose runs are
// linked by lineage attributes are one. `own` (NULL: none), the run about to write there, is
// linked in too. Each entry gets its kind, run id, lineage and whether `ours` (NULL: none)
// accepts its run_inputs; kin keeps the sets.
static void read_lineages(const char *dir, Entry *e, int n, const CkptMeta *own, CkptOwnsFn ours, void *ctx, Kin *kin) {
    char (*lineage)[sizeof own->lineage] = mallocCheck((size_t)(n ? n : 1) * sizeof *lineage);
    char path[1400];
    Header h;
    memset(kin, 0, sizeof *kin);
    if (own) kin_add_meta(kin, own);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, e[i].name);
        e[i].kind = read_header_of(path, &h) ? ENTRY_UNUSABLE : h.meta.run_id[0] ? ENTRY_RUN : ENTRY_NO_RUN;
        e[i].match = e[i].kind == ENTRY_RUN && ours && ours(h.meta.inputs, ctx);
        snprintf(e[i].run_id, sizeof e[i].run_id, "%s", e[i].kind == ENTRY_RUN ? h.meta.run_id : "");
        snprintf(lineage[i], sizeof lineage[i], "%s", e[i].kind == ENTRY_RUN ? h.meta.lineage : "");
        if (e[i].kind == ENTRY_RUN) kin_add_meta(kin, &h.meta);
    }
    kin_seal(kin);
    if (own) kin_join_meta(kin, own);
    CkptMeta m;
    for (int i = 0; i < n; i++) {
        if (e[i].kind != ENTRY_RUN) continue;
        snprintf(m.run_id, sizeof m.run_id, "%s", e[i].run_id);
        snprintf(m.lineage, sizeof m.lineage, "%s", lineage[i]);
        kin_join_meta(kin, &m);
    }
    for (int i = 0; i < n; i++) e[i].lineage = e[i].kind == ENTRY_RUN ? kin_root(kin, e[i].run_id) : -1;
    free(lineage);
}

// "run R (newest step_N.h5), ...": each run of the entries that sel marks once, at its newest
// file, the first few by name
static void describe_runs(const Entry *e, int n, const unsigned char *sel, char *buf, size_t len) {
    int shown = 0, more = 0;
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = sel[j] && !strcmp(e[j].run_id, e[i].run_id);
        if (!sel[i] || seen) continue;
        if (shown == 4) {
            more++;
            continue;
        }
        if (k < len) k += (size_t)snprintf(buf + k, len - k, "%srun %s (newest step %d: %s)", shown++ ? ", " : "", e[i].run_id, e[i].step,
                                   e[i].name);
    }
    if (more && k < len) snprintf(buf + k, len - k, " and %d more run%s", more, more > 1 ? "s" : "");
}

// Several lineages in one directory: the newest usable checkpoint of each (verified, as a resume
// would), and of those the one whose run_inputs name the run's sources, when exactly one does.
static int resolve_lineages(const char *path, int asked, Entry *e, int n, int nl, char *out, size_t len) {
    int *pick = mallocCheck((size_t)nl * sizeof *pick);
    for (int l = 0; l < nl; l++) pick[l] = -1;
    char file[1400], first[1400] = "";
    for (int i = 0; i < n; i++) {
        if (e[i].kind == ENTRY_RUN && pick[e[i].lineage] >= 0) continue;  // an older file of a lineage already settled
        snprintf(file, sizeof file, "%s/%s", path, e[i].name);
        if (e[i].kind == ENTRY_NO_RUN) {
            log_msg("Checkpoint %s predates run ids (format_version 1) and belongs to none of the runs in %s: passed over\n", file, path);
            continue;
        }
        const char *err = ckpt_verify(file);
        if (!err) {
            if (e[i].kind == ENTRY_RUN) pick[e[i].lineage] = i;
            continue;
        }
        int older = 0;
        for (int j = i + 1; j < n && !older; j++) older = e[j].kind == ENTRY_RUN && e[i].kind == ENTRY_RUN && e[j].lineage == e[i].lineage;
        if (!first[0]) snprintf(first, sizeof first, "%s", err);
        log_msg("Checkpoint %s is unusable%s: %s\n", file, older ? ", falling back to the one before it in its run's lineage" : "", err);
    }
    int usable = 0, matching = 0, chosen = -1;
    for (int l = 0; l < nl; l++) {
        if (pick[l] < 0) continue;
        usable++;
        matching += e[pick[l]].match;
        if (usable == 1 || (e[pick[l]].match && matching == 1)) chosen = l;  // the only one, or the one that matches
    }
    if (!usable) comm_fail_all("none of the %d checkpoint(s) in '%s' is usable; the newest: %s", n, path, first);
    unsigned char *sel = callocCheck((size_t)n, 1);
    char runs[1200];
    for (int l = 0; l < nl; l++)
        if (pick[l] >= 0) sel[pick[l]] = 1;
    if (usable > 1 && matching != 1) {
        describe_runs(e, n, sel, runs, sizeof runs);
        char why[160] = "";
        if (asked)
            snprintf(why, sizeof why, matching ? ", and %d of them record this run's training data"
                                               : ", none of which records this run's training data", matching);
        int newest = n;
        for (int l = 0; l < nl; l++)
            if (pick[l] >= 0 && pick[l] < newest) newest = pick[l];
        comm_fail_all("'%s' holds the checkpoints of %d unrelated runs%s: %s; give --resume_from_checkpoint the file to resume "
                      "(such as %s/%s), or move the other runs' files out of the folder", path, usable, why, runs, path, e[newest].name);
    }
    snprintf(out, len, "%s/%s", path, e[pick[chosen]].name);
    if (usable > 1) {
        sel[pick[chosen]] = 0;
        describe_runs(e, n, sel, runs, sizeof runs);
        log_msg("%s holds the checkpoints of %d unrelated runs: resuming run %s (its checkpoints record this run's training data); "
                "passed over: %s\n", path, usable, e[pick[chosen]].run_id, runs);
    } else {
        log_msg("%s also holds checkpoints of other runs, none of them usable: resuming run %s\n", path, e[pick[chosen]].run_id);
    }
    free(sel);
    free(pick);
    return 1;
}

// A resume path that holds PyTorch's or Hugging Face's checkpoints instead of fsdpc's: the one-line
// refusal, or NULL. Taken for an empty folder, it would start the run afresh, and with checkpoint
// dir = resume dir the run would then write its checkpoints beside the recipe's.
static const char *foreign_resume(const char *path) {
    static char msg[2000];
    char what[900], fix[600];
    if (!ckpt_foreign_find(path, what, sizeof what, fix, sizeof fix)) return NULL;
    snprintf(msg, sizeof msg, "checkpoint '%s' holds %s, not fsdpc checkpoints (step_<N>.h5), so fsdpc cannot resume it; %s", path,
             what, fix);
    return msg;
}

int ckpt_resolve(const char *path, CkptOwnsFn ours, void *ctx, char *out, size_t len) {
    // rank 0 looks, lists and reads the headers, so every rank takes the same path and verifies
    // the same candidates
    struct stat st;
    static char why[1400];
    int kind = 0;  // 0: nothing there (a fresh start), 1: a file, 2: a folder
    const char *bad = NULL;
    if (comm_info.rank == 0 && stat(path, &st) == 0) {
        kind = S_ISDIR(st.st_mode) ? 2 : 1;
        if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
            bad = (snprintf(why, sizeof why, "checkpoint '%s' is neither a file nor a folder", path), why);
        else if (!S_ISDIR(st.st_mode))
            bad = foreign_resume(path);
    } else if (comm_info.rank == 0 && errno != ENOENT) {  // there may be something, out of reach: not a fresh start
        bad = (snprintf(why, sizeof why, "checkpoint '%s': %s", path, comm_path_error(path, errno)), why);
    }
    comm_check_all(bad);
    comm_bcast_bytes(comm_world(), &kind, sizeof kind, 0);
    out[0] = 0;
    if (kind == 0) return 0;  // a resume dir that does not exist yet: start fresh
    if (kind == 1) {
        snprintf(out, len, "%s", path);  // its header, the name's step included, is checked when it is read
        return 1;
    }
    int n = 0, nl = 0;
    Entry *e = comm_info.rank == 0 ? list_checkpoints(path, &n) : NULL;
    static char msg[1200];
    bad = NULL;
    if (comm_info.rank == 0 && !e)
        bad = (snprintf(msg, sizeof msg, "cannot read checkpoint directory '%s': %s", path, comm_path_error(path, errno)), msg);
    else if (comm_info.rank == 0 && !n)  // only a folder without fsdpc's checkpoints would start afresh
        bad = foreign_resume(path);
    comm_check_all(bad);
    if (comm_info.rank == 0) {
        Kin kin;
        read_lineages(path, e, n, NULL, ours, ctx, &kin);
        int *num = mallocCheck((size_t)(kin.n ? kin.n : 1) * sizeof *num);  // lineages numbered newest first
        for (int i = 0; i < kin.n; i++) num[i] = -1;
        for (int i = 0; i < n; i++)
            if (e[i].kind == ENTRY_RUN) e[i].lineage = num[e[i].lineage] >= 0 ? num[e[i].lineage] : (num[e[i].lineage] = nl++);
        free(num);
        kin_free(&kin);
    }
    comm_bcast_bytes(comm_world(), &n, sizeof n, 0);
    comm_bcast_bytes(comm_world(), &nl, sizeof nl, 0);
    if (comm_info.rank != 0) e = mallocCheck((size_t)(n ? n : 1) * sizeof *e);
    comm_bcast_bytes(comm_world(), e, (size_t)n * sizeof *e, 0);
    if (nl > 1) {
        int r = resolve_lineages(path, ours != NULL, e, n, nl, out, len);
        free(e);
        return r;
    }
    // one lineage (files from before run ids belong to it): its newest usable checkpoint
    char file[1400], first[1400] = "";
    for (int i = 0; i < n; i++) {
        snprintf(file, sizeof file, "%s/%s", path, e[i].name);
        const char *err = ckpt_verify(file);
        if (!err) {
            free(e);
            snprintf(out, len, "%s", file);
            return 1;
        }
        if (!i) snprintf(first, sizeof first, "%s", err);
        log_msg("Checkpoint %s is unusable%s: %s\n", file, i + 1 < n ? ", falling back to the one before it" : "", err);
    }
    free(e);
    if (n) comm_fail_all("none of the %d checkpoint(s) in '%s' is usable; the newest: %s", n, path, first);
    return 0;
}

void ckpt_new_run_id(char id[CKPT_RUN_ID_LEN + 1]) {
    uint64_t x = 0;
    if (comm_info.rank == 0 && getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
        struct timespec ts;  // no entropy source: the clock and pid still differ between runs
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_sec * 6364136223846793005ULL ^ (uint64_t)ts.tv_nsec << 16 ^ (uint64_t)getpid();
    }
    comm_bcast_bytes(comm_world(), &x, sizeof x, 0);
    snprintf(id, CKPT_RUN_ID_LEN + 1, "%016" PRIx64, x);
}

void ckpt_lineage_of(const CkptMeta *from, char *lineage, size_t len) {
    lineage[0] = 0;
    if (!from->run_id[0]) return;  // written before run ids: no ancestry to prove
    size_t n = (size_t)snprintf(lineage, len, "%s:%d", from->run_id, from->step);
    const char *p = from->lineage + strspn(from->lineage, " ");
    for (int i = 1; i < CKPT_LINEAGE_MAX && *p; i++) {  // the oldest ancestors drop off
        size_t w = strcspn(p, " ");
        if (n + 1 + w >= len) break;
        lineage[n++] = ' ';
        memcpy(lineage + n, p, w);
        lineage[n += w] = 0;
        p += w;
        p += strspn(p, " ");
    }
}

// The writer lock. A run that will write checkpoints first creates <dir>/.fsdpc-writer with
// O_EXCL, atomic on local and network file systems alike, holding "fsdpc-writer <run_id> <host>
// <pid> <boot_id> <start>". A second run (a job requeued while the first still runs, two jobs given
// one directory) then stops at start-up instead of interleaving checkpoints. The lock goes when
// the run ends, even on an error; one left by a killed run is taken over when it is provably dead:
// on this host, when its process has ended (see process_running) or the host has rebooted since.
// Another host's processes cannot be checked, so that case names the file to remove. Before each
// publish the writer re-reads the lock, so a run whose lock was removed or taken over stops
// rather than write on.
typedef struct {
    char id[32], host[256], boot[64];
    long pid;
    unsigned long long start;  // the process's start in clock ticks after boot; 0 in older locks: unknown
} Lock;

static int read_lock(const char *path, Lock *l) {
    char line[512];
    FILE *f = fopen(path, "r");
    l->id[0] = 0;
    l->start = 0;
    int ok = f && fgets(line, sizeof line, f) &&
             sscanf(line, "fsdpc-writer %16s %255s %ld %63s %llu", l->id, l->host, &l->pid, l->boot, &l->start) >= 4 && l->pid > 0;
    if (f) fclose(f);
    return ok;
}

// Field 22 of /proc/<pid>/stat, the process's start after boot, for `pid` (0: this process), and
// its state (field 3) into *state unless NULL; 0 when /proc cannot tell. The command name (field
// 2) may hold spaces and parentheses: the fields are counted from its closing one.
static unsigned long long process_start(long pid, char *state) {
    char path[64], buf[1024], st;
    unsigned long long start = 0;
    if (pid) snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    else snprintf(path, sizeof path, "/proc/self/stat");
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    if (!p || sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu", &st, &start) != 2)
        return 0;
    if (state) *state = st;
    return start;
}

// Whether the process that wrote lock l on this host still runs. A zombie has ended though
// kill(pid, 0) still finds it: the ranks of a job that failed stay zombies until reaped, for a
// second or so after mpirun returns, and a run started right after it must not be refused. A
// process that started at another time than the lock records has taken over a reused pid.
// Without /proc (or where it hides others' processes) the pid alone decides.
static int process_running(const Lock *l) {
    char state = 0;
    unsigned long long start = process_start(l->pid, &state);
    if (!start) return !(kill((pid_t)l->pid, 0) != 0 && errno == ESRCH);
    return state != 'Z' && state != 'X' && (!l->start || start == l->start);
}

static void host_identity(char *host, size_t hlen, char *boot, size_t blen) {
    if (gethostname(host, hlen) != 0 || !host[0]) snprintf(host, hlen, "unknown");
    host[hlen - 1] = 0;
    host[strcspn(host, " \t\n")] = 0;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(boot, (int)blen, f)) snprintf(boot, blen, "unknown");
    boot[strcspn(boot, " \t\n")] = 0;
    if (f) fclose(f);
}

static const char *claim_lost(void) {
    static char msg[1400];
    Lock l;
    if (!claim_path[0] || (read_lock(claim_path, &l) && !strcmp(l.id, claim_id))) return NULL;
    snprintf(msg, sizeof msg, "this run no longer holds the writer lock '%s' (removed, or taken over by another run)", claim_path);
    return msg;
}

const char *ckpt_check_claim(const char *dir, const char *run_id) {
    static char msg[1800];
    char path[1100], why[300] = "";
    Lock l;
    snprintf(path, sizeof path, "%s/.fsdpc-writer", dir);
    // a file rank 0 has just created may take a moment to appear on a network file system
    for (int attempt = 0; attempt < 10; attempt++) {
        if (read_lock(path, &l) && !strcmp(l.id, run_id)) return NULL;
        if (access(path, F_OK) != 0) snprintf(why, sizeof why, "%s", strerror(errno));
        else snprintf(why, sizeof why, "it holds %s", l.id[0] ? "another run's id" : "no writer lock");
        usleep(100000);
    }
    snprintf(msg, sizeof msg, "rank %d does not see the writer lock that rank 0 just took in --checkpoint_dir '%s' ('%s': %s): the "
             "folder is another one on rank %d (a relative path from another working directory, or node-local storage?); give every "
             "rank the same --checkpoint_dir on storage they share", comm_info.rank, dir, path, why, comm_info.rank);
    return msg;
}

void ckpt_release_dir(void) {
    Lock l;
    if (claim_path[0] && read_lock(claim_path, &l) && !strcmp(l.id, claim_id)) unlink(claim_path);
    if (claim_path[0]) comm_stop_unlink(claim_path, 0);
    claim_path[0] = 0;
}

static void release_at_exit(void) { ckpt_release_dir(); }

// whether name is a step_<digits>.h5.<run id>.tmp, a checkpoint being written; its run into id
static int tmp_of(const char *name, char id[CKPT_RUN_ID_LEN + 1]) {
    const char *dot = strstr(name, ".h5.");
    char head[256];
    if (!dot || (size_t)(dot - name) + 3 >= sizeof head) return 0;
    snprintf(head, (size_t)(dot - name) + 4, "%s", name);
    if (step_of(head) < 0 || strlen(dot + 4) != CKPT_RUN_ID_LEN + 4 || strcmp(dot + 4 + CKPT_RUN_ID_LEN, ".tmp") != 0) return 0;
    memcpy(id, dot + 4, CKPT_RUN_ID_LEN);
    id[CKPT_RUN_ID_LEN] = 0;
    return is_run_id(id);
}

// Rank 0, for ckpt_claim_dir before anything is written there: a --checkpoint_dir holding what
// fsdpc did not write (another program's checkpoints, or source files: a mistyped path) is
// refused, or under --overwrite_checkpoints written beside, logged: fsdpc replaces and prunes only
// its own names. Passed as fsdpc's: checkpoints and other HDF5 files (copies, renamed ones),
// checkpoints being written (step_<N>.h5.<run>.tmp), TensorBoard event files, this run's own
// outputs (--metrics_file, --trace_file, stdout and stderr redirected there), hidden files (the
// writer lock; NFS's .nfs* names of removed files still open) and subfolders (--run_name's runs),
// unless they hold PyTorch checkpoints. NULL, or a one-line error.
static const char *check_strays(const char *dir, int overwrite) {
    static char msg[2400];
    char what[900], fix[600], names[3][256], id[CKPT_RUN_ID_LEN + 1], path[1400];
    if (ckpt_foreign_find(dir, what, sizeof what, fix, sizeof fix)) {
        if (!overwrite)
            return snprintf(msg, sizeof msg, "--checkpoint_dir '%s' holds %s, which fsdpc did not write; give fsdpc a folder of its "
                            "own for its checkpoints (another --checkpoint_dir), or pass --overwrite_checkpoints to write beside them "
                            "(fsdpc leaves them as they are)", dir, what), msg;
        log_msg("--overwrite_checkpoints: %s holds %s; fsdpc writes beside them and leaves them as they are\n", dir, what);
        return NULL;
    }
    DIR *d = opendir(dir);
    if (!d) return NULL;  // the lock or check_ownership's listing says why
    int n = 0;  // strays; names keeps the first three in byte order, the same whatever the listing's order
    struct stat st;
    for (struct dirent *de; (de = readdir(d));) {
        const char *name = de->d_name;
        snprintf(path, sizeof path, "%s/%s", dir, name);
        size_t len = strlen(name);  // events.out.tfevents.*: --tensorboard_dir's; *.pt.trace.json: --trace_dir's
        if (name[0] == '.' || step_of(name) >= 0 || tmp_of(name, id) || !strncmp(name, "events.out.tfevents.", 20) ||
            (len > 14 && !strcmp(name + len - 14, ".pt.trace.json")) ||
            (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) || ckpt_file_kind(path) == CKPT_FILE_HDF5 || io_is_output(path))
            continue;
        int at = n < 3 ? n : 3;
        while (at > 0 && strcmp(name, names[at - 1]) < 0) at--;
        if (at < 3) {
            memmove(names[at + 1], names[at], (size_t)((n < 3 ? n : 2) - at) * sizeof names[0]);
            snprintf(names[at], sizeof names[at], "%s", name);
        }
        n++;
    }
    closedir(d);
    if (!n) return NULL;
    char list[900];
    size_t w = 0;
    for (int i = 0; i < n && i < 3; i++) w += (size_t)snprintf(list + w, sizeof list - w, "%s%s", i ? ", " : "", names[i]);
    if (n > 3) snprintf(list + w, sizeof list - w, " and %d more", n - 3);
    if (!overwrite)
        return snprintf(msg, sizeof msg, "--checkpoint_dir '%s' holds %d file(s) that fsdpc did not write and that are no checkpoints: "
                        "%s; give fsdpc a folder of its own for its checkpoints (another --checkpoint_dir), move them away, or pass "
                        "--overwrite_checkpoints to write beside them (fsdpc leaves them as they are)", dir, n, list), msg;
    log_msg("--overwrite_checkpoints: %s holds %d file(s) that fsdpc did not write (%s); fsdpc writes beside them and leaves them "
            "as they are\n", dir, n, list);
    return NULL;
}

// What the claim learned, for the check before each publish: the runs of this run's history (its
// own and those linked to it in the directory), --overwrite_checkpoints, and the files the run
// starts from, which nothing replaces.
static struct {
    char (*ids)[CKPT_RUN_ID_LEN + 1];
    int nids, overwrite, ninputs;
    struct {
        dev_t dev;
        ino_t ino;
        const char *flag;
    } input[2];
} owner;

// Rank 0, for ckpt_claim_dir: whether the checkpoints in dir are this run's to replace (see
// ckpt.h). Fills `owner`. NULL, or a one-line error.
static const char *check_ownership(const char *dir, const char *run_id, const char *resumed, const char *init, int overwrite) {
    static char msg[2000];
    char runs[1200], path[1400];
    Header h;
    CkptMeta own;
    memset(&own, 0, sizeof own);
    snprintf(own.run_id, sizeof own.run_id, "%s", run_id);
    free(owner.ids);
    memset(&owner, 0, sizeof owner);
    owner.overwrite = overwrite;
    const char *in[2] = {resumed, init}, *flag[2] = {"--resume_from_checkpoint", "--init_from"};
    struct stat st;
    for (int i = 0; i < 2; i++)
        if (in[i][0] && stat(in[i], &st) == 0) {
            owner.input[owner.ninputs].dev = st.st_dev;
            owner.input[owner.ninputs].ino = st.st_ino;
            owner.input[owner.ninputs++].flag = flag[i];
        }
    int start = 0;  // the run writes the steps after it
    if (resumed[0]) {
        const char *e = read_header_of(resumed, &h);
        if (e) return e;
        start = h.meta.step;
        ckpt_lineage_of(&h.meta, own.lineage, sizeof own.lineage);
    }
    int n;
    Entry *e = list_checkpoints(dir, &n);
    if (!e) return snprintf(msg, sizeof msg, "cannot list --checkpoint_dir '%s': %s", dir, strerror(errno)), msg;
    Kin kin;
    read_lineages(dir, e, n, &own, NULL, NULL, &kin);
    int me = kin_root(&kin, run_id);
    for (int i = 0; i < kin.n; i++)
        if (kin_root(&kin, kin.id[i]) == me) {
            if (owner.nids % 64 == 0) owner.ids = realloc(owner.ids, (size_t)(owner.nids + 64) * sizeof *owner.ids);
            if (!owner.ids) err_fatal("out of memory listing the runs of this run's lineage");
            memcpy(owner.ids[owner.nids++], kin.id[i], sizeof *owner.ids);
        }
    kin_free(&kin);
    // another run's: for a fresh run anything; for a resumed one the files of runs outside its
    // history, and files it cannot read at steps it may write (files from before run ids prove
    // nothing either way and stay as they were: replaceable, never pruned)
    unsigned char *other = callocCheck((size_t)(n ? n : 1), 1);
    int nother = 0, nrun = 0, nunusable = 0, unusable = -1, hit = -1, hit_input = 0;
    for (int i = 0; i < n; i++) {
        other[i] = !resumed[0] || (e[i].kind == ENTRY_RUN && e[i].lineage != me) || (e[i].kind == ENTRY_UNUSABLE && e[i].step > start);
        nother += other[i];
        nrun += other[i] && e[i].kind == ENTRY_RUN;
        if (other[i] && e[i].kind == ENTRY_UNUSABLE && !nunusable++) unusable = i;
        snprintf(path, sizeof path, "%s/%s", dir, e[i].name);
        for (int k = 0; k < owner.ninputs && hit < 0; k++)
            if (e[i].step > start && stat(path, &st) == 0 && st.st_dev == owner.input[k].dev && st.st_ino == owner.input[k].ino)
                hit = i, hit_input = k;
    }
    for (int i = 0; i < n; i++) other[i] = other[i] && e[i].kind == ENTRY_RUN;
    describe_runs(e, n, other, runs, sizeof runs);
    const char *err = NULL;
    char why[1600] = "", also[400] = "";
    if (unusable >= 0) {
        snprintf(path, sizeof path, "%s/%s", dir, e[unusable].name);
        const char *r = read_header_of(path, &h);
        snprintf(why, sizeof why, "%s", r ? r : "it changed while being read");
        snprintf(also, sizeof also, " (and %d unusable file(s) named like checkpoints, the newest %s)", nunusable, e[unusable].name);
    }
    if (nother && !overwrite && !resumed[0]) {
        err = msg;
        snprintf(msg, sizeof msg, "--checkpoint_dir '%s' already holds %d checkpoint(s) (the newest %s) of another run; resume them "
                 "with --resume_from_checkpoint %s, give another --checkpoint_dir, or pass --overwrite_checkpoints%s%s", dir, n,
                 e[0].name, dir, nrun ? "; they are of " : "", runs);
    } else if (nrun && !overwrite) {
        err = msg;
        snprintf(msg, sizeof msg, "--checkpoint_dir '%s' holds %d checkpoint(s) of runs outside the lineage of the checkpoint "
                 "this run resumes ('%s'): %s%s; give this run another --checkpoint_dir, resume from '%s' instead, or pass "
                 "--overwrite_checkpoints to replace them at the steps this run writes", dir, nrun, resumed, runs, also, dir);
    } else if (nother && !overwrite) {
        err = msg;
        snprintf(msg, sizeof msg, "--checkpoint_dir '%s' holds %d file(s) named like checkpoints at steps this run may write that "
                 "are no usable checkpoints of it, the newest %s (%s); move them away, give this run another --checkpoint_dir, "
                 "or pass --overwrite_checkpoints to replace them", dir, nunusable, e[unusable].name, why);
    } else if (hit >= 0) {
        err = msg;
        snprintf(msg, sizeof msg, "--checkpoint_dir '%s' holds %s, the checkpoint this run starts from (%s), at a step this run "
                 "writes: even --overwrite_checkpoints never replaces a run's own input; give this run another --checkpoint_dir",
                 dir, e[hit].name, owner.input[hit_input].flag);
    } else if (nother) {
        log_msg("--overwrite_checkpoints: %s holds %d checkpoint(s) of other runs%s%s; those at steps this run writes are "
                "replaced, the others kept\n", dir, nother, nrun ? ": " : "", runs);
    }
    free(other);
    free(e);
    return err;
}

// whether run id is of the writer's history: the claim's runs, the writer and its ancestors
static int of_history(const char *id, const CkptMeta *writer) {
    char a[CKPT_RUN_ID_LEN + 1];
    int step;
    for (int k = 0; k < owner.nids; k++)
        if (!strcmp(id, owner.ids[k])) return 1;
    if (!strcmp(id, writer->run_id)) return 1;
    for (const char *p = writer->lineage; lineage_next(&p, a, &step);)
        if (!strcmp(id, a)) return 1;
    return 0;
}

// Rank 0, before a publish replaces path: the file there must be of this run's history (after a
// rewind, the future it abandoned, logged), or from before run ids, or, under
// --overwrite_checkpoints, anything but a file this run started from. The claim checked the
// directory at start-up; this catches what another run or program wrote since.
static const char *check_replace(const char *path, const CkptMeta *meta) {
    static char msg[1600];
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    for (int k = 0; k < owner.ninputs; k++)
        if (st.st_dev == owner.input[k].dev && st.st_ino == owner.input[k].ino)
            return snprintf(msg, sizeof msg, "'%s' is the checkpoint this run started from (%s) and is never replaced; give this "
                            "run another --checkpoint_dir", path, owner.input[k].flag), msg;
    Header h;
    if (read_header_of(path, &h)) {
        if (!owner.overwrite)
            return snprintf(msg, sizeof msg, "'%s' appeared after start-up and is no usable checkpoint of this run, so it is not "
                            "replaced (is another program writing to --checkpoint_dir?); move it away, or pass "
                            "--overwrite_checkpoints", path), msg;
        log_msg("Replacing %s, which is not a usable checkpoint\n", path);
        return NULL;
    }
    int step, ours = !h.meta.run_id[0] || of_history(h.meta.run_id, meta);
    char id[CKPT_RUN_ID_LEN + 1];
    for (const char *p = h.meta.lineage; !ours && lineage_next(&p, id, &step);) ours = of_history(id, meta);
    if (ours || owner.overwrite) {
        if (!h.meta.run_id[0] || strcmp(h.meta.run_id, meta->run_id) != 0)
            log_msg("Replacing %s of run %s%s\n", path, h.meta.run_id[0] ? h.meta.run_id : "(unknown)", ours ? "" : " (--overwrite_checkpoints)");
        return NULL;
    }
    return snprintf(msg, sizeof msg, "'%s' holds a checkpoint of run %s, outside this run's lineage, written there after start-up "
                    "(is another run writing to --checkpoint_dir?), so it is not replaced; give this run another --checkpoint_dir, "
                    "or pass --overwrite_checkpoints", path, h.meta.run_id), msg;
}

const char *ckpt_claim_dir(const char *dir, const char *run_id, const char *resumed, const char *init, int overwrite) {
    static char msg[2400];
    char path[1100], host[256], boot[64], line[512];
    Lock o;  // another run's
    const char *stray = check_strays(dir, overwrite);
    if (stray) return stray;
    snprintf(path, sizeof path, "%s/.fsdpc-writer", dir);
    host_identity(host, sizeof host, boot, sizeof boot);
    int len = snprintf(line, sizeof line, "fsdpc-writer %s %s %ld %s %llu\n", run_id, host, (long)getpid(), boot, process_start(0, NULL));
    for (int attempt = 0;; attempt++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd >= 0) {
            comm_stop_unlink(path, 1);  // a stop signal before training begins removes it too
            int ok = write(fd, line, (size_t)len) == len;
            ok = close(fd) == 0 && ok;
            if (ok) break;
            unlink(path);
            comm_stop_unlink(path, 0);
            return snprintf(msg, sizeof msg, "cannot write the writer lock '%s': %s", path, strerror(errno)), msg;
        }
        if (errno != EEXIST) return snprintf(msg, sizeof msg, "cannot create the writer lock '%s': %s", path, strerror(errno)), msg;
        int parsed = read_lock(path, &o);
        if (!parsed && access(path, F_OK) != 0 && attempt < 3) continue;  // released meanwhile
        int here = parsed && !strcmp(o.host, host);
        int dead = here && (strcmp(o.boot, boot) != 0 || !process_running(&o));
        if (!parsed)
            return snprintf(msg, sizeof msg, "'%s' is not an fsdpc writer lock; if no run is writing to --checkpoint_dir '%s', remove it",
                            path, dir),
                   msg;
        if (!dead && here)
            return snprintf(msg, sizeof msg, "another fsdpc run (run %s, pid %ld on this host) is writing checkpoints to '%s'; wait for it "
                            "to end or give this run another --checkpoint_dir", o.id, o.pid, dir),
                   msg;
        if (!dead)
            return snprintf(msg, sizeof msg, "fsdpc run %s on host %s (pid %ld) holds the writer lock '%s'; if that run is gone (a lost "
                            "node), remove the file and start again", o.id, o.host, o.pid, path),
                   msg;
        if (attempt >= 3) return snprintf(msg, sizeof msg, "cannot take over the writer lock '%s': another run keeps taking it", path), msg;
        log_msg("Taking over the writer lock of run %s in %s (its process %ld on this host is gone)\n", o.id, dir, o.pid);
        unlink(path);
    }
    if (!claim_path[0]) atexit(release_at_exit);
    snprintf(claim_path, sizeof claim_path, "%s", path);
    snprintf(claim_id, sizeof claim_id, "%s", run_id);
    const char *bad = check_ownership(dir, run_id, resumed, init, overwrite);
    if (bad) {
        ckpt_release_dir();
        return bad;
    }
    // a .tmp of another run is a write that never finished: its writer held this lock and is gone
    DIR *d = opendir(dir);
    char tmp[1400], tmp_id[CKPT_RUN_ID_LEN + 1];
    for (struct dirent *de; d && (de = readdir(d));)
        if (tmp_of(de->d_name, tmp_id) && strcmp(tmp_id, run_id) != 0) {
            snprintf(tmp, sizeof tmp, "%s/%s", dir, de->d_name);
            if (unlink(tmp) == 0) log_msg("Removed %s, left by an interrupted checkpoint write\n", tmp);
        }
    if (d) closedir(d);
    return NULL;
}

typedef struct {
    char id[CKPT_RUN_ID_LEN + 1];
    int last;  // the newest step of that run in the lineage
} Ancestor;

typedef struct {
    int entry, step;
} Member;

static int member_newest_first(const void *a, const void *b) {
    const Member *x = a, *y = b;
    return x->step != y->step ? (x->step < y->step) - (x->step > y->step) : x->entry - y->entry;
}

static int same_file(const struct stat *a, const struct stat *b) { return a->st_dev == b->st_dev && a->st_ino == b->st_ino; }

void ckpt_prune(const char *dir, int keep, const CkptMeta *meta, const char *written, const char *resumed) {
    if (keep <= 0 || comm_info.rank != 0) return;
    int n;
    Entry *e = list_checkpoints(dir, &n);
    if (!e) return;
    Ancestor anc[CKPT_LINEAGE_MAX + 1];
    int na = 0;
    anc[na].last = INT_MAX;
    snprintf(anc[na++].id, sizeof anc[0].id, "%s", meta->run_id);
    for (const char *p = meta->lineage; na <= CKPT_LINEAGE_MAX && lineage_next(&p, anc[na].id, &anc[na].last);) na++;
    // membership is proven by the file's own run_id and step; a file that cannot be read proves nothing
    Member *m = mallocCheck((size_t)(n ? n : 1) * sizeof *m);
    int nm = 0;
    char path[1400];
    Header h;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, e[i].name);
        if (read_header_of(path, &h)) continue;
        for (int a = 0; a < na; a++)
            if (!strcmp(h.meta.run_id, anc[a].id) && h.meta.step <= anc[a].last) {
                m[nm++] = (Member){i, h.meta.step};
                break;
            }
    }
    qsort(m, nm, sizeof *m, member_newest_first);
    struct stat ws, rs, st;
    int have_w = written[0] && stat(written, &ws) == 0, have_r = resumed[0] && stat(resumed, &rs) == 0;
    for (int j = keep; j < nm; j++) {
        snprintf(path, sizeof path, "%s/%s", dir, e[m[j].entry].name);
        if (stat(path, &st) != 0 || (have_w && same_file(&st, &ws)) || (have_r && same_file(&st, &rs))) continue;
        if (unlink(path) != 0) log_msg("warning: could not delete old checkpoint %s: %s\n", path, strerror(errno));
    }
    free(m);
    free(e);
}
