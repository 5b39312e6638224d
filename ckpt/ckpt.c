// ckpt: parallel HDF5 write/read of full tensors by element-range hyperslabs.
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "../kernels/kernels.h"

#define FORMAT_NAME "fsdpc-ckpt"
#define FORMAT_VERSION 1

#define h5Check(x) h5_check((long)(x), #x, __FILE__, __LINE__)
static long h5_check(long r, const char *what, const char *file, int line) {
    if (r < 0) comm_fatal_at(file, line, "HDF5 call failed: %s (disk full, permissions, or a corrupt file?)", what);
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

// ---- attributes ----

static void attr_write(hid_t loc, const char *name, hid_t type, const void *val) {
    hid_t sp = h5Check(H5Screate(H5S_SCALAR));
    hid_t a = h5Check(H5Acreate2(loc, name, type, sp, H5P_DEFAULT, H5P_DEFAULT));
    h5Check(H5Awrite(a, type, val));
    H5Aclose(a);
    H5Sclose(sp);
}

static void attr_write_str(hid_t loc, const char *name, const char *val) {
    hid_t t = h5Check(H5Tcopy(H5T_C_S1));
    h5Check(H5Tset_size(t, strlen(val) + 1));
    attr_write(loc, name, t, val);
    H5Tclose(t);
}

static int attr_read(hid_t loc, const char *name, hid_t type, void *val) {
    if (H5Aexists(loc, name) <= 0) return 0;
    hid_t a = h5Check(H5Aopen(loc, name, H5P_DEFAULT));
    int ok = H5Aread(a, type, val) >= 0;
    H5Aclose(a);
    return ok;
}

static int attr_read_str(hid_t loc, const char *name, char *buf, size_t len) {
    if (H5Aexists(loc, name) <= 0) return 0;
    hid_t a = h5Check(H5Aopen(loc, name, H5P_DEFAULT));
    hid_t ft = h5Check(H5Aget_type(a));
    size_t n = H5Tget_size(ft);
    hid_t t = h5Check(H5Tcopy(H5T_C_S1));
    h5Check(H5Tset_size(t, n));
    char *tmp = mallocCheck(n + 1);
    int ok = H5Aread(a, t, tmp) >= 0;
    tmp[n] = 0;
    snprintf(buf, len, "%s", tmp);
    free(tmp);
    H5Tclose(t);
    H5Tclose(ft);
    H5Aclose(a);
    return ok;
}

typedef struct {
    const char *name;
    size_t off;
} IntField;

static const IntField model_ints[] = {
    {"hidden_width", offsetof(ModelConfig, hidden_width)},
    {"num_layers", offsetof(ModelConfig, num_layers)},
    {"num_heads", offsetof(ModelConfig, num_heads)},
    {"num_key_value_heads", offsetof(ModelConfig, num_key_value_heads)},
    {"intermediate_size", offsetof(ModelConfig, intermediate_size)},
    {"vocab_size", offsetof(ModelConfig, vocab_size)},
    {"max_context_width", offsetof(ModelConfig, max_context_width)},
};
#define NMODEL_INTS (sizeof model_ints / sizeof model_ints[0])

// ---- tensor slices ----

// Selects elements [begin, begin+count) of a row-major dataset (1-D or 2-D) as at most three
// hyperslabs: a partial first row, whole rows, a partial last row.
static void select_range(hid_t space, const TensorSpec *t, size_t begin, size_t count) {
    if (!count) {
        h5Check(H5Sselect_none(space));
        return;
    }
    if (t->ndim == 1) {
        hsize_t st[1] = {begin}, ct[1] = {count};
        h5Check(H5Sselect_hyperslab(space, H5S_SELECT_SET, st, NULL, ct, NULL));
        return;
    }
    size_t C = t->shape[1], end = begin + count;
    H5S_seloper_t op = H5S_SELECT_SET;
    size_t r0 = begin / C, r1 = end / C;
    if (begin % C) {  // partial first row
        size_t stop = (r0 + 1) * C < end ? (r0 + 1) * C : end;
        hsize_t st[2] = {r0, begin % C}, ct[2] = {1, stop - begin};
        h5Check(H5Sselect_hyperslab(space, op, st, NULL, ct, NULL));
        op = H5S_SELECT_OR;
        r0++;
        if (stop == end) return;
    }
    if (r1 > r0) {
        hsize_t st[2] = {r0, 0}, ct[2] = {r1 - r0, C};
        h5Check(H5Sselect_hyperslab(space, op, st, NULL, ct, NULL));
        op = H5S_SELECT_OR;
    }
    if (end % C && r1 >= r0) {
        hsize_t st[2] = {r1, 0}, ct[2] = {1, end % C};
        h5Check(H5Sselect_hyperslab(space, op, st, NULL, ct, NULL));
    }
}

// Collective read or write of this rank's slice of one tensor; `dev` is on the compute device
// when on_device (HDF5 then goes through a host copy).
static void xfer_tensor(hid_t file, const char *group, const TensorSpec *t, size_t begin, size_t count, float *dev,
                        int on_device, int write) {
    float *buf = dev;
    if (on_device) {
        buf = mallocCheck((count ? count : 1) * sizeof(float));
        if (write && count) kern_download(buf, dev, count * sizeof(float));
    }
    char path[160];
    snprintf(path, sizeof path, "%s/%s", group, t->name);
    hsize_t dims[2] = {(hsize_t)t->shape[0], (hsize_t)t->shape[1]};
    hid_t fspace = h5Check(H5Screate_simple(t->ndim, dims, NULL));
    hid_t ds = write ? H5Dcreate2(file, path, H5T_IEEE_F32LE, fspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                     : H5Dopen2(file, path, H5P_DEFAULT);
    h5Check(ds);
    select_range(fspace, t, begin, count);
    hsize_t mdim[1] = {count ? count : 1};
    hid_t mspace = h5Check(H5Screate_simple(1, mdim, NULL));
    if (!count) h5Check(H5Sselect_none(mspace));
    hid_t dxpl = h5Check(H5Pcreate(H5P_DATASET_XFER));
    h5Check(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
    if (write)
        h5Check(H5Dwrite(ds, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, buf));
    else
        h5Check(H5Dread(ds, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, buf));
    H5Pclose(dxpl);
    H5Sclose(mspace);
    H5Sclose(fspace);
    H5Dclose(ds);
    if (buf != dev) {
        if (!write && count) kern_upload(dev, buf, count * sizeof(float));
        free(buf);
    }
}

static const char *const groups[] = {"model", "optim/exp_avg", "optim/exp_avg_sq"};

static float *state_buffer(const FlatUnit *f, int which) {
    return which == 0 ? f->master : which == 1 ? f->exp_avg : f->exp_avg_sq;
}

// Visits every tensor of every unit with this rank's slice in the first ngroups state groups
// (1: the weights only).
static void xfer_state(hid_t file, const ShardState *s, int write, int ngroups) {
    const ModelPlan *plan = s->plan;
    for (int g = 0; g < ngroups; g++)
        for (int u = 0; u < plan->nunits; u++)
            for (int t = 0; t < plan->units[u].ntensors; t++) {
                size_t begin, local, n = shard_tensor_slice(s, u, t, &begin, &local);
                if (write && !shard_is_writer(s)) n = 0;  // replicas hold the same slices: one group writes
                xfer_tensor(file, groups[g], &plan->units[u].t[t], begin, n, state_buffer(&s->units[u], g) + local,
                            shard_state_on_device(s), write);
            }
}

// Fault-injection hook for tests: FSDPC_TEST_CKPT_PAUSE="STEP:SECONDS" holds the write of that
// step's checkpoint half-way (data written, file not closed or published) so a test can kill a rank.
static void test_pause(int step) {
    const char *e = getenv("FSDPC_TEST_CKPT_PAUSE");
    int at, sec;
    if (!e || sscanf(e, "%d:%d", &at, &sec) != 2 || at != step) return;
    fprintf(stderr, "test hook: checkpoint write of step %d paused (rank %d, pid %d)\n", step, comm_info.rank, (int)getpid());
    fflush(stderr);
    sleep((unsigned)sec);
}

double ckpt_save(const char *dir, const ShardState *s, const Config *cfg, const CkptMeta *meta, double *bytes) {
    double t0 = comm_time();
    if (comm_info.rank == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST)
        comm_fatal("cannot create checkpoint directory '%s': %s", dir, strerror(errno));
    comm_barrier(comm_world());
    char final[1024], tmp[1040];
    snprintf(final, sizeof final, "%s/step_%08d.h5", dir, meta->step);
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    hid_t f = open_file(tmp, 1);
    if (f < 0) comm_fatal("cannot create checkpoint '%s' (check the directory and free space)", tmp);
    attr_write_str(f, "format", FORMAT_NAME);
    int version = FORMAT_VERSION;
    attr_write(f, "format_version", H5T_NATIVE_INT, &version);
    attr_write(f, "step", H5T_NATIVE_INT, &meta->step);
    attr_write(f, "tokens_seen", H5T_NATIVE_UINT64, &meta->tokens_seen);
    attr_write(f, "data_position", H5T_NATIVE_UINT64, &meta->data_position);
    attr_write(f, "rng_state", H5T_NATIVE_UINT64, &meta->rng_state);
    const ModelConfig *m = &cfg->model;
    attr_write_str(f, "model_type", m->model_type);
    for (size_t i = 0; i < NMODEL_INTS; i++) attr_write(f, model_ints[i].name, H5T_NATIVE_INT, (const char *)m + model_ints[i].off);
    attr_write(f, "rope_theta", H5T_NATIVE_FLOAT, &m->rope_theta);
    attr_write(f, "norm_eps", H5T_NATIVE_FLOAT, &m->norm_eps);
    char run[2048];
    config_describe(cfg, run, sizeof run);
    attr_write_str(f, "run_config", run);
    attr_write_str(f, "tokenizer", cfg->tokenizer);
    for (int g = 0; g < 3; g++) {
        hid_t lcpl = h5Check(H5Pcreate(H5P_LINK_CREATE));
        h5Check(H5Pset_create_intermediate_group(lcpl, 1));
        H5Gclose(h5Check(H5Gcreate2(f, groups[g], lcpl, H5P_DEFAULT, H5P_DEFAULT)));
        H5Pclose(lcpl);
    }
    xfer_state(f, s, 1, 3);
    test_pause(meta->step);
    h5Check(H5Fflush(f, H5F_SCOPE_GLOBAL));
    h5Check(H5Fclose(f));
    comm_barrier(comm_world());  // publish only once every rank's slices are on disk
    if (comm_info.rank == 0 && rename(tmp, final) != 0)
        comm_fatal("cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
    comm_barrier(comm_world());
    *bytes = 3.0 * (double)s->plan->num_params * sizeof(float);
    return comm_time() - t0;
}

// step number of a name step_<digits>.h5, or -1
static int step_of(const char *name) {
    int step, n = 0;
    if (sscanf(name, "step_%d.h5%n", &step, &n) == 1 && name[n] == 0) return step;
    return -1;
}

int ckpt_resolve(const char *path, char *out, size_t len) {
    struct stat st;
    out[0] = 0;
    if (stat(path, &st) != 0) return 0;  // a resume dir that does not exist yet: start fresh
    if (!S_ISDIR(st.st_mode)) {
        snprintf(out, len, "%s", path);
        return 1;
    }
    DIR *d = opendir(path);
    if (!d) comm_fail_all("cannot read checkpoint directory '%s'", path);
    int best = -1;
    for (struct dirent *e; (e = readdir(d));) {
        int s = step_of(e->d_name);
        if (s > best) best = s;
    }
    closedir(d);
    if (best < 0) return 0;
    snprintf(out, len, "%s/step_%08d.h5", path, best);
    return 1;
}

// Checks format, config and every tensor shape in the first ngroups groups; returns an error
// message or NULL.
static const char *validate(hid_t f, const char *file, const ModelPlan *plan, int ngroups) {
    static char msg[1024];
    char fmt[64] = "";
    if (!attr_read_str(f, "format", fmt, sizeof fmt) || strcmp(fmt, FORMAT_NAME) != 0)
        return snprintf(msg, sizeof msg, "'%s' is not an fsdpc checkpoint (format attribute '%s')", file, fmt), msg;
    for (size_t i = 0; i < NMODEL_INTS; i++) {
        int v = -1, want = *(const int *)((const char *)&plan->cfg + model_ints[i].off);
        if (!attr_read(f, model_ints[i].name, H5T_NATIVE_INT, &v))
            return snprintf(msg, sizeof msg, "checkpoint '%s' lacks the '%s' attribute", file, model_ints[i].name), msg;
        if (v != want)
            return snprintf(msg, sizeof msg, "checkpoint '%s' has %s=%d but this run has --%s %d", file, model_ints[i].name,
                            v, model_ints[i].name, want),
                   msg;
    }
    char path[160];
    for (int g = 0; g < ngroups; g++)
        for (int u = 0; u < plan->nunits; u++)
            for (int t = 0; t < plan->units[u].ntensors; t++) {
                const TensorSpec *ts = &plan->units[u].t[t];
                snprintf(path, sizeof path, "%s/%s", groups[g], ts->name);
                if (H5Lexists(f, groups[g], H5P_DEFAULT) <= 0 || H5Lexists(f, path, H5P_DEFAULT) <= 0)
                    return snprintf(msg, sizeof msg, "checkpoint '%s' lacks tensor /%s", file, path), msg;
                hid_t ds = h5Check(H5Dopen2(f, path, H5P_DEFAULT));
                hid_t sp = h5Check(H5Dget_space(ds));
                hsize_t dims[2] = {0, 0};
                int nd = H5Sget_simple_extent_dims(sp, dims, NULL);
                H5Sclose(sp);
                H5Dclose(ds);
                int ok = nd == ts->ndim && dims[0] == (hsize_t)ts->shape[0] && (nd == 1 || dims[1] == (hsize_t)ts->shape[1]);
                if (!ok)
                    return snprintf(msg, sizeof msg, "checkpoint '%s' tensor /%s has shape [%llu%s%llu] but the model needs [%d%s%d]",
                                    file, path, (unsigned long long)dims[0], nd > 1 ? "," : "",
                                    nd > 1 ? (unsigned long long)dims[1] : 0ULL, ts->shape[0], ts->ndim > 1 ? "," : "",
                                    ts->ndim > 1 ? ts->shape[1] : 0),
                           msg;
            }
    return NULL;
}

static const char *open_error(const char *file) {
    static char err[1200];
    snprintf(err, sizeof err, "cannot open checkpoint '%s': %s", file,
             access(file, F_OK) != 0 ? "it does not exist" : "not a readable HDF5 file (truncated or still being written?)");
    return err;
}

// Collective open and validation of the first ngroups groups against s's plan.
static hid_t open_checked(const char *file, const ShardState *s, int ngroups) {
    hid_t f = open_file(file, 0);
    comm_check_all(f < 0 ? open_error(file) : validate(f, file, s->plan, ngroups));
    return f;
}

void ckpt_load(const char *file, ShardState *s, const Config *cfg, CkptMeta *meta) {
    hid_t f = open_checked(file, s, 3);
    attr_read(f, "step", H5T_NATIVE_INT, &meta->step);
    attr_read(f, "tokens_seen", H5T_NATIVE_UINT64, &meta->tokens_seen);
    attr_read(f, "data_position", H5T_NATIVE_UINT64, &meta->data_position);
    attr_read(f, "rng_state", H5T_NATIVE_UINT64, &meta->rng_state);
    xfer_state(f, s, 0, 3);
    H5Fclose(f);
    shard_master_changed(s);
    s->step = meta->step;
}

void ckpt_load_weights(const char *file, ShardState *s, const Config *cfg) {
    hid_t f = open_checked(file, s, 1);
    xfer_state(f, s, 0, 1);
    H5Fclose(f);
    shard_master_changed(s);
}

const char *ckpt_read_config(const char *file, ModelConfig *m, char *tokenizer, size_t tlen) {
    static char msg[1200];
    hid_t f = open_file_with(file, 0, 0);
    if (f < 0) return open_error(file);
    char fmt[64] = "";
    const char *e = NULL;
    if (!attr_read_str(f, "format", fmt, sizeof fmt) || strcmp(fmt, FORMAT_NAME) != 0)
        e = (snprintf(msg, sizeof msg, "'%s' is not an fsdpc checkpoint (format attribute '%s')", file, fmt), msg);
    if (!e && !attr_read_str(f, "model_type", m->model_type, sizeof m->model_type))
        e = (snprintf(msg, sizeof msg, "checkpoint '%s' lacks the 'model_type' attribute", file), msg);
    for (size_t i = 0; !e && i < NMODEL_INTS; i++)
        if (!attr_read(f, model_ints[i].name, H5T_NATIVE_INT, (char *)m + model_ints[i].off))
            e = (snprintf(msg, sizeof msg, "checkpoint '%s' lacks the '%s' attribute", file, model_ints[i].name), msg);
    // written by every fsdpc version; a missing one means the defaults of the time
    if (!e) attr_read(f, "rope_theta", H5T_NATIVE_FLOAT, &m->rope_theta);
    if (!e) attr_read(f, "norm_eps", H5T_NATIVE_FLOAT, &m->norm_eps);
    if (!e && !attr_read_str(f, "tokenizer", tokenizer, tlen)) snprintf(tokenizer, tlen, "byte");  // before the attribute existed
    H5Fclose(f);
    return e;
}

struct CkptReader {
    hid_t file;
    char path[1024];
};

CkptReader *ckpt_reader_open(const char *file, const ModelPlan *plan, const char **err) {
    hid_t f = open_file_with(file, 0, 0);
    *err = f < 0 ? open_error(file) : validate(f, file, plan, 1);
    if (*err) {
        if (f >= 0) H5Fclose(f);
        return NULL;
    }
    CkptReader *r = mallocCheck(sizeof *r);
    r->file = f;
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
    H5Dclose(ds);
    if (ok) return NULL;
    snprintf(msg, sizeof msg, "cannot read /%s from checkpoint '%s' (corrupt or truncated file?)", path, r->path);
    return msg;
}

void ckpt_reader_close(CkptReader *r) {
    H5Fclose(r->file);
    free(r);
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

void ckpt_prune(const char *dir, int keep) {
    if (keep <= 0 || comm_info.rank != 0) return;
    DIR *d = opendir(dir);
    if (!d) return;
    int steps[4096], n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 4096;) {
        int s = step_of(e->d_name);
        if (s >= 0) steps[n++] = s;
    }
    closedir(d);
    qsort(steps, n, sizeof(int), cmp_int);
    char path[1024];
    for (int i = 0; i < n - keep; i++) {
        snprintf(path, sizeof path, "%s/step_%08d.h5", dir, steps[i]);
        if (unlink(path) != 0) comm_log("warning: could not delete old checkpoint %s: %s\n", path, strerror(errno));
    }
}
