// h5data: where an HDF5 sample file (the (samples, length) token rows of minimal_fsdp's data) keeps
// its rows. Read once per rank on the main thread at open; the loader thread then preads the rows
// itself, since this HDF5 build is not thread-safe and checkpoints use it while batches load.
// Kept out of data.c so that the fuzz targets, which link data.c alone, need no HDF5.
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../base/err.h"
#include "../../base/path.h"
#include "../../comm/comm.h"
#include "h5data.h"

typedef struct {
    char found[640];   // the datasets seen, for a message when none or several qualify
    size_t used;
    int candidates;    // 2-D integer datasets
    char name[1024];   // the last of them
    int failed;        // an HDF5 call failed while scanning
} Scan;

// "uint16 (70, 257)": a dataset's element type and shape, for messages
static int describe(char *out, size_t len, hid_t type, hid_t space) {
    H5T_class_t cls = H5Tget_class(type);
    size_t bits = H5Tget_size(type) * 8;
    int nd = H5Sget_simple_extent_ndims(space);
    hsize_t dims[H5S_MAX_RANK];
    if (cls < 0 || !bits || nd < 0 || H5Sget_simple_extent_dims(space, dims, NULL) != nd) return -1;
    int n;
    if (cls == H5T_INTEGER) {
        H5T_sign_t sign = H5Tget_sign(type);
        if (sign < 0) return -1;
        n = snprintf(out, len, "%s%zu", sign == H5T_SGN_NONE ? "uint" : "int", bits);
    } else if (cls == H5T_FLOAT) {
        n = snprintf(out, len, "float%zu", bits);
    } else {
        n = snprintf(out, len, "%s", cls == H5T_STRING ? "string" : cls == H5T_COMPOUND ? "compound" : cls == H5T_ENUM ? "enum" : "non-numeric");
    }
    for (int i = 0; i < nd && n >= 0 && (size_t)n < len; i++)
        n += snprintf(out + n, len - n, "%s%llu", i ? ", " : " (", (unsigned long long)dims[i]);
    if (n >= 0 && (size_t)n < len) snprintf(out + n, len - n, "%s", nd ? (nd == 1 ? ",)" : ")") : " scalar");
    return 0;
}

static herr_t visit(hid_t obj, const char *name, const H5O_info_t *info, void *arg) {
    Scan *s = arg;
    if (info->type != H5O_TYPE_DATASET) return 0;
    hid_t ds = H5Dopen2(obj, name, H5P_DEFAULT);
    hid_t type = ds < 0 ? -1 : H5Dget_type(ds), space = ds < 0 ? -1 : H5Dget_space(ds);
    char what[160];
    int ok = type >= 0 && space >= 0 && describe(what, sizeof what, type, space) == 0;
    if (ok) {
        int two_d_int = H5Tget_class(type) == H5T_INTEGER && H5Sget_simple_extent_ndims(space) == 2;
        if (two_d_int && s->candidates++ == 0) snprintf(s->name, sizeof s->name, "%s", name);
        if (s->used < sizeof s->found) {
            int n = snprintf(s->found + s->used, sizeof s->found - s->used, "%s'/%s' %s", s->used ? ", " : "", name, what);
            s->used = n < 0 ? sizeof s->found : s->used + (size_t)n;
        }
    }
    if (space >= 0 && H5Sclose(space) < 0) ok = 0;
    if (type >= 0 && H5Tclose(type) < 0) ok = 0;
    if (ds >= 0 && H5Dclose(ds) < 0) ok = 0;
    if (!ok) s->failed = 1;
    return ok ? 0 : -1;
}

// The vocabulary the file records for its ids (f->vocab, f->vocab_attr; 0 when none): an integer
// attribute on the token dataset, else on the root group. minimal_fsdp writes none; the names are
// those of Hugging Face configs and nanoGPT's meta.pkl (vocab_size) and tiktoken (n_vocab).
static const char *read_vocab(hid_t file, hid_t ds, TokenFile *f, char *msg, size_t len) {
    static const char *const names[] = {"vocab_size", "n_vocab"};
    hid_t objs[2] = {ds, file};
    for (int o = 0; o < 2; o++) {
        for (int i = 0; i < 2; i++) {
            htri_t has = H5Aexists(objs[o], names[i]);
            if (has == 0) continue;
            hid_t a = has > 0 ? H5Aopen(objs[o], names[i], H5P_DEFAULT) : -1;
            hid_t type = a < 0 ? -1 : H5Aget_type(a), space = a < 0 ? -1 : H5Aget_space(a);
            long long v = 0;
            int ok = type >= 0 && space >= 0 && H5Tget_class(type) == H5T_INTEGER && H5Sget_simple_extent_npoints(space) == 1 &&
                     H5Aread(a, H5T_NATIVE_LLONG, &v) >= 0 && v > 0 && v <= INT32_MAX;
            if (space >= 0) H5Sclose(space);
            if (type >= 0) H5Tclose(type);
            if (a >= 0) H5Aclose(a);
            if (!ok) {
                char where[300] = "the root group";
                if (!o) snprintf(where, sizeof where, "dataset '%s'", f->dset);
                return err_text(msg, len, "data file '%s': attribute '%s' of %s is not a vocabulary size (one positive integer)",
                         f->path, names[i], where);
            }
            f->vocab = (int)v;
            f->vocab_attr = names[i];
            return NULL;
        }
    }
    return NULL;
}

const char *data_h5_layout(TokenFile *f, uint64_t size, uint64_t *rows) {
    static char msg[2048];
    static Scan s;
    const char *err = NULL;
#define FAIL(...) (err = err_text(msg, sizeof msg, __VA_ARGS__))
// the system's reason first (permissions, a folder), then what the bytes are
#define UNREADABLE()                                                                                               \
    (comm_read_problem(f->path) ? FAIL("data file '%s': %s", f->path, comm_read_problem(f->path))                     \
                                : FAIL("data file '%s' is %s", f->path,                                               \
                                       H5Fis_hdf5(f->path) > 0 ? "a damaged HDF5 file (truncated or corrupt?)" : "not an HDF5 file"))
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);  // errors are reported as one line of ours
    hid_t file = -1, ds = -1, type = -1, space = -1, dcpl = -1;
    int fd = path_open_read(f->path);  // HDF5's own open would wait on a FIFO; UNREADABLE says why
    if (fd >= 0) close(fd);
    hid_t fapl = fd < 0 ? -1 : H5Pcreate(H5P_FILE_ACCESS);
    // a plain per-rank open; locking off as for checkpoints (parallel file systems lack flock)
    if (fapl < 0 || (!getenv("HDF5_USE_FILE_LOCKING") && H5Pset_file_locking(fapl, 0, 1) < 0) ||
        (file = H5Fopen(f->path, H5F_ACC_RDONLY, fapl)) < 0) {
        UNREADABLE();
        goto done;
    }
    memset(&s, 0, sizeof s);
    if (H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, visit, &s, H5O_INFO_BASIC) < 0 || s.failed) {
        UNREADABLE();
        goto done;
    }
    if (s.candidates != 1) {
        FAIL("data file '%s' holds %s 2-D integer dataset (samples, length) to read as token rows%s%s%s", f->path,
             s.candidates ? "more than one" : "no", s.used ? ": found " : " (it holds no datasets)", s.found,
             s.candidates ? "; keep one per file" : "");
        goto done;
    }
    snprintf(f->dset, sizeof f->dset, "/%.254s", s.name);  // for messages only
    hsize_t dims[2];
    H5T_sign_t sign;
    H5T_order_t order;
    H5D_layout_t layout;
    size_t bytes;
    int external;
    if ((ds = H5Dopen2(file, s.name, H5P_DEFAULT)) < 0 || (type = H5Dget_type(ds)) < 0 || (space = H5Dget_space(ds)) < 0 ||
        (dcpl = H5Dget_create_plist(ds)) < 0 || !(bytes = H5Tget_size(type)) || (sign = H5Tget_sign(type)) < 0 ||
        (order = H5Tget_order(type)) < 0 || H5Sget_simple_extent_dims(space, dims, NULL) != 2 ||
        (layout = H5Pget_layout(dcpl)) < 0 || (external = H5Pget_external_count(dcpl)) < 0) {
        UNREADABLE();
        goto done;
    }
    // padded or bit-field integers are legal HDF5 but no tokenizer writes them
    if ((bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8) || (order != H5T_ORDER_LE && order != H5T_ORDER_BE) ||
        H5Tget_precision(type) != bytes * 8 || H5Tget_offset(type) != 0) {
        FAIL("data file '%s': dataset '%s' holds integers of an unsupported layout (%zu bytes, %zu bits of precision); "
             "write plain int8..int64 or uint8..uint64", f->path, f->dset, bytes, H5Tget_precision(type));
        goto done;
    }
    if (layout != H5D_CONTIGUOUS || external) {
        FAIL("data file '%s': dataset '%s' is stored %s, but fsdpc reads each rank's rows straight from a contiguous "
             "dataset: rewrite it with `h5repack -f NONE -l CONTI '%s' OUT.h5`", f->path, f->dset,
             external ? "in external files" : layout == H5D_CHUNKED ? "chunked (compressed or resizable)"
             : layout == H5D_COMPACT ? "compact" : "virtual", f->path);
        goto done;
    }
    if (read_vocab(file, ds, f, msg, sizeof msg)) {
        err = msg;
        goto done;
    }
    if (!dims[1]) {  // row 0 means "not HDF5" to data_open
        FAIL("data file '%s': dataset '%s' has rows of 0 tokens", f->path, f->dset);
        goto done;
    }
    haddr_t addr = H5Dget_offset(ds);  // HADDR_UNDEF when nothing was ever written
    if (dims[0] && dims[1] && addr == HADDR_UNDEF) {
        FAIL("data file '%s': dataset '%s' of %llu rows has no data written", f->path, f->dset, (unsigned long long)dims[0]);
        goto done;
    }
    uint64_t base = addr == HADDR_UNDEF ? 0 : (uint64_t)addr;
    // compared by division: a hostile shape must not wrap the product into agreement
    if (base > size || (dims[0] && dims[1] && (dims[1] > (size - base) / bytes || dims[0] > (size - base) / bytes / dims[1]))) {
        FAIL("data file '%s' is truncated or corrupt: dataset '%s' of %llu x %llu integers of %zu bytes at byte %llu "
             "does not fit in its %llu bytes", f->path, f->dset, (unsigned long long)dims[0], (unsigned long long)dims[1],
             bytes, (unsigned long long)base, (unsigned long long)size);
        goto done;
    }
    f->header = (size_t)base;
    f->width = (int)bytes;
    f->is_signed = sign != H5T_SGN_NONE;
    f->big_endian = order == H5T_ORDER_BE;
    f->row = dims[1];
    *rows = dims[0];
done:
    // closed before the loader starts: no HDF5 handle outlives the open
    if (dcpl >= 0 && H5Pclose(dcpl) < 0 && !err) UNREADABLE();
    if (space >= 0 && H5Sclose(space) < 0 && !err) UNREADABLE();
    if (type >= 0 && H5Tclose(type) < 0 && !err) UNREADABLE();
    if (ds >= 0 && H5Dclose(ds) < 0 && !err) UNREADABLE();
    if (file >= 0 && H5Fclose(file) < 0 && !err) UNREADABLE();
    if (fapl >= 0 && H5Pclose(fapl) < 0 && !err) UNREADABLE();
    return err;
#undef UNREADABLE
#undef FAIL
}

int data_h5_vocab(const char *path) {
    struct stat st;
    TokenFile f;
    uint64_t rows;
    memset(&f, 0, sizeof f);
    f.path = path;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);  // a file that is not HDF5 is no error here
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || H5Fis_hdf5(path) <= 0 || data_h5_layout(&f, (uint64_t)st.st_size, &rows))
        return 0;
    return f.vocab;
}
