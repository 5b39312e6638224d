// h5: HDF5 files, attributes and tensors for the checkpoint modules (h5.h).
#include "h5.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../base/err.h"
#include "../base/half.h"
#include "../base/log.h"
#include "../base/path.h"
#include "../kernels/kernels.h"

// Checksums are defined over the little-endian fp32 bytes; this host's floats are those bytes.
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint checksums assume a little-endian host"
#endif

long h5_check(long r, const char *what, const char *file, int line) {
    if (r < 0) err_fatal_at(file, line, "HDF5 call failed: %s (disk full, permissions, or a corrupt file?)", what);
    return r;
}

// The thread that owns HDF5 while a checkpoint is written in the background (h5_own): the Debian
// build is not thread-safe, so no other thread may call it then.
static pthread_t owner;
static atomic_int owned;

void h5_own(int on) {
    if (on) owner = pthread_self();
    atomic_store(&owned, on);
}

// Every HDF5 use begins with an open: one from another thread while the writer owns HDF5 is a bug.
static void check_owner(void) {
    if (atomic_load(&owned) && !pthread_equal(owner, pthread_self()))
        err_fatal("internal error: HDF5 called from another thread while a checkpoint is written in the background");
}

hid_t h5_open(const char *path, int create, int collective) {
    return h5_open_in(path, create, collective ? comm_world() : NULL);
}

// collective: every rank of g opens the file through MPI-IO; else (NULL) this rank alone reads it
hid_t h5_open_in(const char *path, int create, CommGroup *g) {
    check_owner();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);  // we report errors ourselves, one line each
    int fd = create ? -1 : path_open_read(path);  // HDF5's own open would wait on a FIFO; h5_open_error says why
    if (!create && fd < 0) return -1;
    if (fd >= 0) close(fd);
    hid_t fapl = h5Check(H5Pcreate(H5P_FILE_ACCESS));
    if (g) h5Check(H5Pset_fapl_mpio(fapl, MPI_Comm_f2c(comm_group_fortran(g)), MPI_INFO_NULL));
    // Parallel file systems often lack the flock() HDF5 uses, and readers never see a file
    // before its atomic rename anyway: locking is off unless HDF5_USE_FILE_LOCKING says otherwise.
    if (!getenv("HDF5_USE_FILE_LOCKING")) h5Check(H5Pset_file_locking(fapl, 0, 1));
    hid_t f = create ? H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl) : H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    return f;
}

hid_t h5_open_stored(hid_t loc, const char *path, const char **why) {
    *why = NULL;
    size_t n = strlen(path);
    char *part = mallocCheck(n + 1);
    for (size_t i = 0; i <= n; i++) {  // each link from the first component to the whole path
        if (i < n && path[i] != '/') continue;
        memcpy(part, path, i), part[i] = 0;
        H5L_info_t li;
        if (!i || path[i - 1] == '/') continue;
        if (H5Lexists(loc, part, H5P_DEFAULT) <= 0 || H5Lget_info(loc, part, &li, H5P_DEFAULT) < 0) return free(part), -1;
        if (li.type != H5L_TYPE_HARD)
            return free(part), *why = li.type == H5L_TYPE_SOFT ? "a soft link (to another entry of the file)" : "an external link (to another file)", -1;
    }
    free(part);
    hid_t ds = H5Dopen2(loc, path, H5P_DEFAULT);
    if (ds < 0) return -1;
    hid_t dcpl = H5Dget_create_plist(ds);
    int outside = dcpl < 0 || H5Pget_layout(dcpl) == H5D_VIRTUAL || H5Pget_external_count(dcpl) != 0;
    if (dcpl >= 0) H5Pclose(dcpl);
    H5O_info_t oi;
    int alias = H5Oget_info2(ds, &oi, H5O_INFO_BASIC) < 0 || oi.rc != 1;
    if (!outside && !alias) return ds;
    H5Dclose(ds);
    *why = outside ? "a dataset whose data lives outside the file (external storage or a virtual dataset)"
                   : "a second name of another entry of the file (a hard link: fsdpc writes each tensor once)";
    return -1;
}

// Why HDF5 could not open a checkpoint: the system's reason first (missing, permissions, a
// folder, a path through a file), then what the bytes are.
const char *h5_open_error(const char *file) {
    static char err[2600];
    const char *why = comm_read_problem(file);
    if (!why)
        why = H5Fis_hdf5(file) > 0 ? "a damaged HDF5 file (truncated or still being written?)"
                                   : "not an HDF5 file (fsdpc checkpoints are; give a checkpoint folder or its step_*.h5)";
    return err_text(err, sizeof err, "cannot open checkpoint '%s': %s", file, why);
}

// Why creating a checkpoint's file failed, when HDF5 does not say: the system's reason, if a
// plain create fails too (the caller removes the file either way).
const char *h5_create_error(const char *path) {
    static char err[1400];
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) return close(fd), "creating the file failed (in HDF5)";
    return err_text(err, sizeof err, "creating the file failed: %s", comm_path_error(path, errno));
}

// ---- attributes ----

int h5_attr_write(hid_t loc, const char *name, hid_t type, const void *val) {
    hid_t sp = H5Screate(H5S_SCALAR), a = sp < 0 ? -1 : H5Acreate2(loc, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    int ok = a >= 0 && H5Awrite(a, type, val) >= 0;
    if (a >= 0) H5Aclose(a);
    if (sp >= 0) H5Sclose(sp);
    return ok;
}

int h5_attr_write_str(hid_t loc, const char *name, const char *val) {
    hid_t t = H5Tcopy(H5T_C_S1);
    int ok = t >= 0 && H5Tset_size(t, strlen(val) + 1) >= 0 && h5_attr_write(loc, name, t, val);
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
void h5_attr_named(hid_t loc, const char *name, CkptAttr *out) {
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
    h5_attr_named(loc, name, a);
    a->name = strdup(name);
    if (!a->name) err_fatal("out of memory reading checkpoint attributes");
    return 0;
}

void h5_attr_free(CkptAttr *a) { free((char *)a->s); }

// The names of the links in group `dir` of f ("." for the root), appended to *links as
// "dir/name" (bare names at the root); a missing or unreadable group adds none.
static void links_read(hid_t f, const char *dir, char ***links, size_t *n, size_t *cap) {
    int root = !strcmp(dir, ".");
    if (!root && h5_linked(f, dir)) return;  // desc_read refuses it
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

const char *h5_linked(hid_t f, const char *path) {
    static char why[200];
    size_t n = strlen(path);
    char *part = mallocCheck(n + 1);
    const char *e = NULL;
    for (size_t i = 1; i <= n && !e; i++) {
        if (i < n && path[i] != '/') continue;
        memcpy(part, path, i), part[i] = 0;
        H5L_info_t li;
        H5O_info_t oi;
        if (H5Lexists(f, part, H5P_DEFAULT) <= 0 || H5Lget_info(f, part, &li, H5P_DEFAULT) < 0) break;  // missing
        if (li.type != H5L_TYPE_HARD)
            e = err_text(why, sizeof why, "/%s is %s", part, li.type == H5L_TYPE_SOFT ? "a soft link" : "an external link (to another file)");
        else if (H5Oget_info_by_name2(f, part, &oi, H5O_INFO_BASIC, H5P_DEFAULT) >= 0 && oi.rc != 1)
            e = err_text(why, sizeof why, "/%s is a second name of another group of the file (a hard link)", part);
    }
    free(part);
    return e;
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
    static const char *const groups[] = {"model", "optim", "optim/exp_avg", "optim/exp_avg_sq", "source"};
    for (size_t i = 0; i < sizeof groups / sizeof *groups && !d->linked; i++) d->linked = h5_linked(f, groups[i]);
    d->model_links = !d->linked && H5Lexists(f, "model", H5P_DEFAULT) > 0 && H5Gget_info_by_name(f, "model", &gi, H5P_DEFAULT) >= 0
                         ? (int64_t)gi.nlinks : -1;
    char **links = NULL;
    size_t nlinks = 0, lcap = 0;
    links_read(f, ".", &links, &nlinks, &lcap);
    links_read(f, "optim", &links, &nlinks, &lcap);
    links_read(f, "source", &links, &nlinks, &lcap);
    d->links = (const char *const *)links, d->nlinks = nlinks;
    size_t cap = 0;
    CkptDataset *ds = NULL;
    for (int g = 0; g < ngroups; g++) {
        hid_t grp = !d->linked && H5Lexists(f, ckpt_groups[g], H5P_DEFAULT) > 0 ? H5Gopen2(f, ckpt_groups[g], H5P_DEFAULT) : -1;
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
            x->group = g, x->name = name, x->ndim = -1, x->crc.name = CKPT_CHECKSUM_NAME;
            hid_t dset = h5_open_stored(grp, name, &x->foreign);  // fails for groups and dangling links
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
            x->u8 = ty >= 0 && H5Tget_class(ty) == H5T_INTEGER && H5Tget_size(ty) == 1 && H5Tget_sign(ty) == H5T_SGN_NONE;
            h5_attr_named(dset, CKPT_CHECKSUM_NAME, &x->crc);
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
        h5_attr_free((CkptAttr *)&d->attrs[i]);
        free((char *)d->attrs[i].name);
    }
    for (size_t i = 0; i < d->ndatasets; i++) {
        h5_attr_free((CkptAttr *)&d->datasets[i].crc);
        free((char *)d->datasets[i].name);
        free((uint64_t *)d->datasets[i].dims);
    }
    for (size_t i = 0; i < d->nlinks; i++) free((char *)d->links[i]);
    free((CkptAttr *)d->attrs);
    free((CkptDataset *)d->datasets);
    free((char **)d->links);
    memset(d, 0, sizeof *d);
}

typedef CkptHeader CkptHeader;

// Every root attribute, read and checked; base supplies model fields a file may lack.
const char *h5_read_header(hid_t f, const char *file, const ModelConfig *base, CkptHeader *h) {
    CkptDesc d;
    desc_read(f, 0, &d);
    const char *e = ckpt_check_header(&d, file, base, h);
    desc_free(&d);
    return e;
}

// a config field the file's family does not store (rope_theta without rotary positions) keeps
// fsdpc's default, as validation wants one
const ModelConfig h5_old_defaults = {.rope_theta = 10000.0f};

// The header of a file this rank opens alone.
const char *h5_read_header_of(const char *path, CkptHeader *h) {
    hid_t f = h5_open(path, 0, 0);
    if (f < 0) return h5_open_error(path);
    const char *e = h5_read_header(f, path, &h5_old_defaults, h);
    H5Fclose(f);
    return e;
}

// ---- tensors ----

int h5_count_tensors(const ModelPlan *plan) {
    int n = 0;
    for (int u = 0; u < plan->nunits; u++) n += plan->units[u].ntensors;
    return n;
}

// The first ngroups groups hold exactly plan's tensors, each of the right rank, shape and type
// with, from format_version 2 on, its crc32 attribute (into want, group-major, plan order).
// Every load and verify comes here: a file that passes and holds entries outside the schema gets
// one warning naming them (once per file, rank 0).
const char *h5_check_tensors(hid_t f, const char *file, const ModelPlan *plan, int ngroups, int version, uint32_t *want) {
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

void h5_select_range(hid_t space, const TensorSpec *t, size_t begin, size_t count) {
    if (!count) h5Check(H5Sselect_none(space));
    else if (t->nf4) {  // its packed bytes, 1-D
        hsize_t st[1] = {begin}, ct[1] = {count};
        h5Check(H5Sselect_hyperslab(space, H5S_SELECT_SET, st, NULL, ct, NULL));
    } else select_flat(space, t, begin, count, H5S_SELECT_SET);
}

size_t h5_stored_len(const TensorSpec *t) {
    return t->nf4 ? kern_nf4_bytes(model_whole_numel(t)) : model_whole_numel(t);
}

// Selects tp rank `rank`'s elements [begin, begin+count) of its part of t (model_tp_run) in the
// whole tensor, in their order: runs inside one row that repeat a row apart (a column split's
// rows) become one 2-D hyperslab, the others their flat ranges.
static void select_part(hid_t space, const TensorSpec *t, int tp, int rank, size_t begin, size_t count) {
    if (tp < 2 || !count) {
        h5_select_range(space, t, begin, count);
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

// The crc32 of the whole stored tensor t (h5_stored_len elements of es bytes) with this rank's
// elements [begin, begin+count) of its tp part (x, in their order; a tensor stored whole: of the
// whole) in place and zeros everywhere else. crc32 is affine, so XOR-ing every rank's such
// checksum (a rank holding nothing gives the zeros' checksum) over k ranks, plus the zeros'
// checksum once more when k is even, is the whole tensor's (h5_tp_checksums).
static uint32_t piece_crc(const TensorSpec *t, int tp, int rank, size_t begin, size_t count, const void *x, size_t es) {
    uLong acc = crc32_z(0, Z_NULL, 0);
    size_t pos = 0, total = h5_stored_len(t);
    for (size_t done = 0; done < count;) {
        size_t full = begin + done, n = count - done;
        if (!t->stored_whole) n = model_tp_run(t, tp, rank, begin + done, &full);
        if (n > count - done) n = count - done;
        if (full > pos) acc = crc32_combine(acc, zeros_crc((full - pos) * es), (z_off_t)((full - pos) * es));
        acc = crc32_combine(acc, crc32_z(crc32_z(0, Z_NULL, 0), (const Bytef *)x + done * es, n * es), (z_off_t)(n * es));
        pos = full + n;
        done += n;
    }
    if (total > pos) acc = crc32_combine(acc, zeros_crc((total - pos) * es), (z_off_t)((total - pos) * es));
    return (uint32_t)acc;
}

static uint32_t crc_of(const void *x, size_t bytes) { return (uint32_t)crc32_z(crc32_z(0, Z_NULL, 0), (const Bytef *)x, bytes); }

// Collective read or write of this rank's slice of one tensor; `dev` is on the compute device
// when on_device (HDF5 then goes through a host copy). *crc gets the slice's range and CRC.
// Returns NULL or what failed on this rank (the caller agrees with the others).
// Under tensor parallelism (plan tp > 1) the slice is of this tp rank's part of t, placed in the
// whole tensor (select_part; a tensor stored whole: the slice of the whole), and *crc is its
// piece checksum (piece_crc) when `counted`, else the zeros' (a slice another rank's piece covers).
// QLoRA's nf4 tensors (t->nf4) move their packed bytes instead: a 1-D uint8 dataset, begin and
// count in bytes, checksummed as bytes.
static const char *xfer_tensor(hid_t file, const char *group, const TensorSpec *t, const ModelPlan *plan, size_t begin,
                               size_t count, void *dev, int on_device, int write, int counted, CommCrc *crc) {
    static char msg[256];
    size_t es = t->nf4 ? 1 : sizeof(float);
    float *buf = dev;
    if (on_device) {
        buf = mallocCheck((count ? count : 1) * es);
        if (write && count) kern_download(buf, dev, count * es);
    }
    char path[160];
    snprintf(path, sizeof path, "%s/%s", group, t->name);
    int tp = plan->tp > 1 ? plan->tp : 1;
    hsize_t dims[2] = {(hsize_t)t->full[0], (hsize_t)t->full[1]};  // the whole tensor, at every tp degree
    if (t->nf4) dims[0] = h5_stored_len(t);
    hid_t fspace = h5Check(H5Screate_simple(t->nf4 ? 1 : t->ndim, dims, NULL));
    const char *why;
    hid_t ds = write ? H5Dcreate2(file, path, t->nf4 ? H5T_STD_U8LE : H5T_IEEE_F32LE, fspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                     : h5_open_stored(file, path, &why);
    hid_t mem_type = t->nf4 ? H5T_NATIVE_UCHAR : H5T_NATIVE_FLOAT;
    select_part(fspace, t, t->stored_whole ? 1 : tp, plan->tp_rank, begin, count);
    hsize_t mdim[1] = {count ? count : 1};
    hid_t mspace = h5Check(H5Screate_simple(1, mdim, NULL));
    if (!count) h5Check(H5Sselect_none(mspace));
    hid_t dxpl = h5Check(H5Pcreate(H5P_DATASET_XFER));
    h5Check(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
    int ok = ds >= 0 && (write ? H5Dwrite(ds, mem_type, mspace, fspace, dxpl, buf) : H5Dread(ds, mem_type, mspace, fspace, dxpl, buf)) >= 0;
    H5Pclose(dxpl);
    H5Sclose(mspace);
    H5Sclose(fspace);
    if (ds >= 0) H5Dclose(ds);
    if (tp > 1) *crc = (CommCrc){0, h5_stored_len(t) * es, ok ? piece_crc(t, tp, plan->tp_rank, begin, counted ? count : 0, buf, es) : 0};
    else if (counted) *crc = (CommCrc){begin * es, count * es, ok && count ? crc_of(buf, count * es) : 0};
    else *crc = (CommCrc){0, 0, 0};  // a replica's slice: the first replica's counts
    if (buf != dev) {
        if (ok && !write && count) kern_upload(dev, buf, count * es);
        free(buf);
    }
    if (ok) return NULL;
    return err_text(msg, sizeof msg, "%s /%s failed", write ? (ds < 0 ? "creating" : "writing") : "reading", path);
}

// A bf16 piece of a packed unit (a frozen base under --precision bf16), count values at `piece`,
// as xfer_tensor moves fp32: the file holds them widened, exactly, so the tensor keeps the fp32
// schema (export and verify read it as any other) and a read rounds them back bit for bit (an
// fp32 file's values round as a bf16 gather would).
static const char *xfer_bf16(hid_t file, const char *group, const TensorSpec *t, const ModelPlan *plan, size_t begin,
                             size_t count, uint16_t *piece, int on_device, int write, int counted, CommCrc *crc) {
    size_t m = count ? count : 1;
    uint16_t *h = on_device ? mallocCheck(m * sizeof *h) : piece;
    float *vals = mallocCheck(m * sizeof *vals);
    if (write && count && on_device) kern_download(h, piece, count * sizeof *h);
    for (size_t i = 0; write && i < count; i++) vals[i] = half_bf16_to_f32(h[i]);
    const char *e = xfer_tensor(file, group, t, plan, begin, count, vals, 0, write, counted, crc);
    for (size_t i = 0; !e && !write && i < count; i++) h[i] = half_f32_to_bf16(vals[i]);
    if (!e && !write && count && on_device) kern_upload(piece, h, count * sizeof *h);
    if (h != piece) free(h);
    free(vals);
    return e;
}

// the buffer of state group `which` (ckpt_groups order: weights, then AdamW's two moments)
static float *state_buffer(const ShardState *s, int u, int which) {
    float *exp_avg, *exp_avg_sq;
    shard_moments(s, u, &exp_avg, &exp_avg_sq);
    return which == 0 ? shard_master(s, u) : which == 1 ? exp_avg : exp_avg_sq;
}

size_t h5_piece_bytes(const H5Piece *p) {
    return p->n * (p->ts->bf16 && p->packed ? sizeof(uint16_t) : p->ts->nf4 ? 1 : sizeof(float));
}

size_t h5_pieces(const ShardState *s, const ModelPlan *plan, int write, int ngroups, H5Piece *out) {
    size_t np = 0;
    int k = 0;
    for (int g = 0; g < ngroups; g++)
        for (int u = 0; u < plan->nunits; u++)
            for (int t = 0; t < plan->units[u].ntensors; t++, k++) {
                if (!ckpt_group_has(plan, u, g)) continue;
                if (!out) {
                    np++;
                    continue;
                }
                size_t begin, local, n = shard_tensor_slice(s, u, t, &begin, &local);
                const TensorSpec *ts = &plan->units[u].t[t];
                char *buf = (char *)(state_buffer(s, u, g) + local);
                if (shard_unit_packed(s, u) && plan->units[u].packed) {  // the byte range's piece (nf4 bytes, bf16 or fp32)
                    n = shard_packed_slice(s, u, t, &begin, &local);
                    buf = (char *)shard_master(s, u) + local;
                    if (ts->bf16) n /= sizeof(uint16_t), begin /= sizeof(uint16_t);
                    else if (!ts->nf4) n /= sizeof(float), begin /= sizeof(float);
                } else if (shard_unit_packed(s, u)) {
                    n = 0;  // a file stored as trained into a packed unit: read whole and quantised by the caller
                }
                // replicas hold the same slices, and a tensor every tp rank holds whole is the same
                // on each: one group, and its first tp rank, writes and counts them (an experts'
                // unit: its own first replica group, among the ranks holding it)
                int dup = plan->tp > 1 && ts->tp_split == TP_WHOLE && !ts->stored_whole && plan->tp_rank > 0;
                int counted = shard_is_writer(s, u) && !dup;
                if (write && !counted) n = 0;
                out[np++] = (H5Piece){.group = g, .k = k, .ts = ts, .begin = begin, .n = n, .buf = buf, .counted = counted,
                                      .packed = plan->units[u].packed, .on_device = shard_state_on_device(s)};
            }
    return np;
}

const char *h5_xfer_pieces(hid_t file, const ModelPlan *plan, const H5Piece *p, size_t np, int write, CommGroup *g, CommCrc *crcs) {
    for (size_t i = 0; i < np; i++, p++) {
        const char *e = comm_first_error_in(
            g, p->ts->bf16 && p->packed
                   ? xfer_bf16(file, ckpt_groups[p->group], p->ts, plan, p->begin, p->n, (uint16_t *)p->buf, p->on_device, write,
                               p->counted, &crcs[p->k])
                   : xfer_tensor(file, ckpt_groups[p->group], p->ts, plan, p->begin, p->n, p->buf, p->on_device, write, p->counted,
                                 &crcs[p->k]));
        if (e) return e;
        comm_deadline_progress();
    }
    return NULL;
}

const char *h5_xfer_state(hid_t file, const ShardState *s, const ModelPlan *plan, int write, int ngroups, CommCrc *crcs) {
    size_t np = h5_pieces(s, plan, write, ngroups, NULL);
    H5Piece *p = mallocCheck((np ? np : 1) * sizeof *p);
    h5_pieces(s, plan, write, ngroups, p);
    const char *e = h5_xfer_pieces(file, plan, p, np, write, comm_world(), crcs);
    free(p);
    return e;
}

// The checksums of the first ngroups groups' whole tensors from every rank's pieces (plan tp > 1):
// XOR over all ranks, then the zeros' checksum once more when their number is even (piece_crc).
void h5_tp_checksums(const ModelPlan *plan, int ngroups, CommGroup *g, CommCrc *c) {
    size_t n = (size_t)ngroups * h5_count_tensors(plan);
    uint32_t *x = mallocCheck(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (uint32_t)c[i].crc;
    comm_allreduce_xor_u32(g, x, n);
    for (size_t i = 0; i < n; i++)
        c[i].crc = x[i] ^ (comm_info.world % 2 ? 0 : (uint32_t)zeros_crc(c[i].len));
    free(x);
}

// After comm_allreduce_crc32 over ranks that together hold every tensor once: the first tensor
// whose combined checksum is not want's.
const char *h5_checksum_mismatch(const char *file, const ModelPlan *plan, int ngroups, const CommCrc *got, const uint32_t *want) {
    static char msg[1400];
    int k = 0;
    for (int g = 0; g < ngroups; g++)
        for (int u = 0; u < plan->nunits; u++)
            for (int t = 0; t < plan->units[u].ntensors; t++, k++) {
                const TensorSpec *ts = &plan->units[u].t[t];
                if (!ckpt_group_has(plan, u, g)) continue;
                if (got[k].begin != 0 || got[k].len != h5_stored_len(ts) * (ts->nf4 ? 1 : sizeof(float)))
                    err_fatal("internal error: the slices of /%s/%s do not tile it", ckpt_groups[g], ts->name);
                if ((uint32_t)got[k].crc != want[k])
                    return snprintf(msg, sizeof msg, "checkpoint '%s': tensor /%s/%s fails its checksum (crc32 of the data %08x, recorded %08x): the file is corrupt",
                                    file, ckpt_groups[g], ts->name, (uint32_t)got[k].crc, want[k]),
                           msg;
            }
    return NULL;
}
