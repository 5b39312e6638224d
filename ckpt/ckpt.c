// ckpt: checkpoint files, written through a temporary name and published by rename, verified,
// and read back into the shards (ckpt.h); the HDF5 work is h5.c's.
#define _GNU_SOURCE  // fallocate
#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#include "../base/clock.h"
#include "../base/err.h"
#include "../base/log.h"
#include "../base/path.h"
#include "../base/limits.h"
#include "../comm/comm.h"
#include "../comm/io.h"
#include "../data/source/ident.h"
#include "../kernels/kernels.h"
#include "h5.h"

#define VERIFY_CHUNK ((size_t)1 << 20)  // elements read at a time by ckpt_verify

// The crc32 of n sample indices as little-endian uint64 bytes (the file's, on any host).
static uint32_t skipped_crc(const uint64_t *v, size_t n) {
    uLong crc = crc32_z(0, Z_NULL, 0);
    for (size_t i = 0; i < n; i++) {
        unsigned char b[8];
        for (int k = 0; k < 8; k++) b[k] = (unsigned char)(v[i] >> (8 * k));
        crc = crc32_z(crc, b, 8);
    }
    return (uint32_t)crc;
}

// Collective: a 1-D dataset of n values at path (intermediate groups made), which rank 0 writes
// (the others select none) from v; its attribute attr (a u32) too when attr is given. 1 when all
// went well.
static int write_by_rank0(hid_t f, const char *path, hid_t file_type, hid_t mem_type, hsize_t n, const void *v, const char *attr,
                          uint32_t attr_value) {
    hid_t lcpl = h5Check(H5Pcreate(H5P_LINK_CREATE));
    h5Check(H5Pset_create_intermediate_group(lcpl, 1));
    hid_t fs = h5Check(H5Screate_simple(1, &n, NULL)), ms = h5Check(H5Screate_simple(1, &n, NULL));
    hid_t ds = H5Dcreate2(f, path, file_type, fs, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    if (comm_info.rank != 0) {
        h5Check(H5Sselect_none(fs));
        h5Check(H5Sselect_none(ms));
    }
    hid_t dxpl = h5Check(H5Pcreate(H5P_DATASET_XFER));
    h5Check(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
    int ok = ds >= 0 && H5Dwrite(ds, mem_type, ms, fs, dxpl, v) >= 0 && (!attr || h5_attr_write(ds, attr, H5T_STD_U32LE, &attr_value));
    H5Pclose(dxpl);
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Pclose(lcpl);
    return ok;
}

// Collective: /source/<name> as 1-D bytes for each file src holds (the same on every rank); rank 0
// writes the contents.
static const char *write_source(hid_t f, const CkptSource *src) {
    char path[64];
    int ok = 1;
    for (int i = 0; src && ok && i < CKPT_SOURCE_FILES; i++) {
        if (!src->text[i]) continue;
        snprintf(path, sizeof path, "source/%s", ckpt_source_names[i]);
        ok = write_by_rank0(f, path, H5T_STD_U8LE, H5T_NATIVE_UCHAR, src->len[i], src->text[i], NULL, 0);
    }
    return ok ? NULL : "writing the model source's files failed";
}

// Collective: /skipped_samples, the samples rollbacks skipped (none: no dataset), as little-endian
// uint64 with the crc32 of those bytes; rank 0 writes the values.
static const char *write_skipped(hid_t f, const CkptMeta *meta) {
    if (!meta->nskipped) return NULL;
    int ok = write_by_rank0(f, CKPT_SKIPPED_NAME, H5T_STD_U64LE, H5T_NATIVE_UINT64, meta->nskipped, meta->skipped, CKPT_CHECKSUM_NAME,
                            skipped_crc(meta->skipped, meta->nskipped));
    return ok ? NULL : "writing the skipped samples failed";
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

// lora: the plan's config, whose adapter targets are resolved (the family's default when not given)
static const char *write_header(hid_t f, const ModelConfig *m, const ModelConfig *lora, const char *run, const char *tokenizer,
                                const CkptMeta *meta) {
    int version = CKPT_FORMAT_VERSION, ok = 1;
    ok &= h5_attr_write_str(f, "format", CKPT_FORMAT_NAME);
    ok &= h5_attr_write(f, "format_version", H5T_NATIVE_INT, &version);
    ok &= h5_attr_write(f, "step", H5T_NATIVE_INT, &meta->step);
    ok &= h5_attr_write(f, "tokens_seen", H5T_NATIVE_UINT64, &meta->tokens_seen);
    ok &= h5_attr_write(f, "data_position", H5T_NATIVE_UINT64, &meta->data_position);
    ok &= h5_attr_write(f, "rng_state", H5T_NATIVE_UINT64, &meta->rng_state);
    ok &= h5_attr_write_str(f, "model_type", m->model_type);
    const ModelFamily *fam = family_find(m->model_type);
    if (!fam) return "this model family has no checkpoint attributes (model/family.h)";
    for (const FamilyField *fl = fam->ckpt_fields; fl->name; fl++)
        ok &= h5_attr_write(f, fl->name, fl->type != FAMILY_FLOAT ? H5T_NATIVE_INT : H5T_NATIVE_FLOAT, (const char *)m + fl->off);
    if (lora->lora_rank) {
        ok &= h5_attr_write(f, "lora_rank", H5T_NATIVE_INT, &lora->lora_rank);
        ok &= h5_attr_write(f, "lora_alpha", H5T_NATIVE_FLOAT, &lora->lora_alpha);
        ok &= h5_attr_write(f, "use_rslora", H5T_NATIVE_INT, &lora->use_rslora);
        ok &= h5_attr_write_str(f, "lora_target_modules", lora->lora_target_modules);
        ok &= h5_attr_write(f, "lora_dropout", H5T_NATIVE_FLOAT, &lora->lora_dropout);
    }
    if (lora->quantize_base)  // absent: the base as trained
        ok &= h5_attr_write_str(f, "quantize_base", cli_choice_name(config_quantize_names, lora->quantize_base));
    ok &= h5_attr_write_str(f, "run_config", run);
    ok &= h5_attr_write_str(f, "tokenizer", tokenizer);
    ok &= h5_attr_write_str(f, "run_id", meta->run_id);
    ok &= h5_attr_write_str(f, "parent", meta->parent);
    ok &= h5_attr_write_str(f, "lineage", meta->lineage);
    ok &= h5_attr_write_str(f, "run_inputs", meta->inputs);
    ok &= h5_attr_write_str(f, "checksum", CKPT_CHECKSUM_NAME);
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
                if (!ckpt_group_has(plan, u, g)) continue;
                snprintf(path, sizeof path, "%s/%s", ckpt_groups[g], plan->units[u].t[t].name);
                hid_t ds = H5Dopen2(f, path, H5P_DEFAULT);
                uint32_t c = (uint32_t)crcs[k].crc;
                int ok = ds >= 0 && h5_attr_write(ds, CKPT_CHECKSUM_NAME, H5T_STD_U32LE, &c);
                if (ds >= 0) H5Dclose(ds);
                if (!ok) return "writing the checksums failed";
            }
    return NULL;
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
    return err_text(msg, sizeof msg, "reserving %.1f MB for it failed: %s", need / 1e6, strerror(e));
}

double ckpt_state_bytes(const ModelPlan *plan) {
    double bytes = 0;
    for (int u = 0; u < plan->nunits; u++)
        for (int t = 0; t < plan->units[u].ntensors; t++) {
            const TensorSpec *ts = &plan->units[u].t[t];
            size_t whole = (size_t)ts->full[0] * (ts->ndim == 2 ? (size_t)ts->full[1] : 1);
            bytes += ts->nf4 ? (double)h5_stored_len(ts) : (double)whole * sizeof(float);
            if (!plan->units[u].frozen) bytes += 2.0 * (double)whole * sizeof(float);  // AdamW's moments
        }
    return bytes;
}

// One checkpoint write: what it writes (the pieces: this rank's slices, on the shards or staged)
// and where, on the ranks of g.
typedef struct {
    char *dir, *tmp, *run, *tokenizer, *resumed;  // heap copies: a background write outlives its caller's
    const ModelConfig *m;
    const ModelPlan *plan;
    CkptMeta meta;
    const CkptSource *src;
    H5Piece *pieces;
    size_t np;
    double need;
    int checked, keep;
    CommGroup *g;
    CkptSaved out;
} SaveJob;

static void job_free(SaveJob *j) {
    free(j->dir), free(j->tmp), free(j->run), free(j->tokenizer), free(j->resumed), free(j->pieces), free(j->out.path);
    free(j->meta.skipped);
    memset(j, 0, sizeof *j);
}

// Collective on the world: the job's paths and size, and the checks before writing (ulimit -f, the
// folder, the run's inputs, the free space). 0, or -1 with the agreed line in err (nothing written).
static int save_begin(SaveJob *j, const char *dir, const ShardState *s, const ModelConfig *m, const char *run,
                      const char *tokenizer, const CkptMeta *meta, const CkptSource *src, char *err, size_t errlen) {
    char msg[2600] = "";
    const ModelPlan *plan = shard_plan(s);
    int nt = h5_count_tensors(plan);
    *j = (SaveJob){.m = m, .plan = plan, .meta = *meta, .src = src, .checked = !test_no_reserve(), .g = comm_world()};
    j->out.bytes = ckpt_state_bytes(plan);
    j->need = j->out.bytes + (1 << 18) + 3.0 * nt * 4096;  // HDF5's metadata: < 1 KB a tensor
    for (int i = 0; src && i < CKPT_SOURCE_FILES; i++) j->need += (double)src->len[i];
    j->out.path = path_fmt("%s/step_%08d.h5", dir, meta->step);
    j->tmp = path_fmt("%s.%s.tmp", j->out.path, meta->run_id);  // one name per run: two writers never share it
    j->dir = strdup(dir), j->run = strdup(run), j->tokenizer = strdup(tokenizer), j->resumed = strdup("");
    if (!j->dir || !j->run || !j->tokenizer || !j->resumed) err_fatal("out of memory");
    if (meta->nskipped) {  // the job's own: a rollback may add to the caller's during a background write
        j->meta.skipped = mallocCheck(meta->nskipped * sizeof *meta->skipped);
        memcpy(j->meta.skipped, meta->skipped, meta->nskipped * sizeof *meta->skipped);
    }
    j->np = h5_pieces(s, plan, 1, 3, NULL);
    j->pieces = mallocCheck((j->np ? j->np : 1) * sizeof *j->pieces);
    h5_pieces(s, plan, 1, 3, j->pieces);
    const char *overlap = NULL;
    double avail = -1, need = j->need;
    // every rank writes its slices into the file: each one's file-size limit must allow all of it
    uint64_t fmax = limits_file_size();
    if (fmax < (uint64_t)need)
        snprintf(msg, sizeof msg, "cannot write checkpoint '%s': it needs %.1f MB but ulimit -f (file size) allows %.1f MB on rank %d: raise "
                 "it (ulimit -f unlimited); the earlier checkpoints are kept",
                 path_show(j->out.path), need / 1e6, (double)fmax / 1e6, comm_info.rank);
    else if (comm_info.rank == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST)
        snprintf(msg, sizeof msg, "cannot create checkpoint directory '%s': %s", path_show(dir), comm_path_error(dir, errno));
    else if (comm_info.rank == 0 && (overlap = io_output_check(j->out.path, "--checkpoint_dir")))  // one of the run's inputs
        snprintf(msg, sizeof msg, "%s; no checkpoint written", overlap);
    else if (comm_info.rank == 0 && j->checked && (avail = free_bytes(dir)) >= 0 && avail < need)
        snprintf(msg, sizeof msg, "cannot write checkpoint '%s': the file system is full (%.1f MB free, it needs %.1f MB); the earlier "
                 "checkpoints are kept", path_show(j->out.path), avail / 1e6, need / 1e6);
    if (!comm_agree(msg[0] ? msg : NULL, err, errlen)) return 0;
    job_free(j);
    return -1;
}

// One agreed failure on the job's ranks, kept: later agreements reuse the agreement's buffer.
static void agree_in(CommGroup *g, char *why, size_t len, const char *local) {
    const char *e = comm_first_error_in(g, local);
    if (e && !why[0]) snprintf(why, len, "%s", e);
}

// A parallel HDF5 write that fails part-way leaves the ranks' metadata caches out of step:
// closing the file then hangs in a collective some rank never reaches (OpenMPI's OMPIO), or
// fails and crashes in HDF5's exit-time cleanup (one rank). So every step's failure is agreed on
// outside HDF5, the file is never touched again, and the job ends here, through comm_abort_all,
// after removing it. The free-space check and the reservation make that path rare: a file system
// filled by someone else mid-write, an I/O error.
static void save_write(SaveJob *j) {
    char why[1400] = "", msg[400] = "";
    const ModelPlan *plan = j->plan;
    int nt = h5_count_tensors(plan);
    CommCrc *crcs = callocCheck((size_t)3 * nt, sizeof *crcs);
    hid_t f = h5_open_in(j->tmp, 1, j->g);
    agree_in(j->g, why, sizeof why, f < 0 ? h5_create_error(j->tmp) : NULL);
    if (!why[0]) agree_in(j->g, why, sizeof why, comm_info.rank == 0 && j->checked ? reserve_space(j->tmp, j->need) : NULL);
    if (!why[0]) agree_in(j->g, why, sizeof why, write_header(f, j->m, &plan->cfg, j->run, j->tokenizer, &j->meta));
    if (!why[0]) agree_in(j->g, why, sizeof why, write_source(f, j->src));
    if (!why[0]) agree_in(j->g, why, sizeof why, write_skipped(f, &j->meta));
    if (!why[0]) agree_in(j->g, why, sizeof why, h5_xfer_pieces(f, plan, j->pieces, j->np, 1, j->g, crcs));
    if (!why[0]) {
        // only writers hold slices, in rank order: the world's concatenation is the tensor
        if (plan->tp > 1) h5_tp_checksums(plan, 3, j->g, crcs);
        else comm_allreduce_crc32(j->g, crcs, (size_t)3 * nt);
        agree_in(j->g, why, sizeof why, write_checksums(f, plan, crcs));
    }
    if (!why[0]) test_pause(j->meta.step);
    if (!why[0]) agree_in(j->g, why, sizeof why, H5Fflush(f, H5F_SCOPE_GLOBAL) < 0 ? "flushing the file failed" : NULL);
    if (!why[0]) agree_in(j->g, why, sizeof why, H5Fclose(f) < 0 ? "closing the file failed" : NULL);
    free(crcs);
    if (!why[0]) return;
    double left = comm_info.rank == 0 ? free_bytes(j->dir) : -1;
    if (left >= 0 && left < j->need)
        snprintf(msg, sizeof msg, " (the file system has %.1f MB free, the checkpoint needs %.1f MB)", left / 1e6, j->need / 1e6);
    if (comm_info.rank == 0) unlink(j->tmp);
    ckpt_release_dir();  // the abort skips exit handlers
    comm_abort_all("cannot write checkpoint '%s': %s%s; its partial file was removed and the earlier checkpoints are kept",
                   path_show(j->out.path), why, msg);
}

// Collective on the job's ranks, once every rank's slices are on disk: the file renamed to its
// final name, only while the directory is ours. NULL, or the agreed line (the .tmp removed).
static const char *save_publish(SaveJob *j) {
    static _Thread_local char msg[2600];
    struct stat st;  // the reservation's blocks past the end go back (truncating to the size frees them)
    if (comm_info.rank == 0 && j->checked && stat(j->tmp, &st) == 0 && truncate(j->tmp, st.st_size) != 0)
        log_msg("warning: could not trim %s: %s\n", j->tmp, strerror(errno));
    const char *e = comm_info.rank == 0 ? claim_lost() : NULL;
    if (!e && comm_info.rank == 0) e = claim_check_replace(j->out.path, &j->meta);
    if (!e && comm_info.rank == 0 && rename(j->tmp, j->out.path) != 0)
        e = err_text(msg, sizeof msg, "renaming '%s' to '%s' failed: %s", path_show(j->tmp), path_show(j->out.path), strerror(errno));
    if (e) unlink(j->tmp);
    e = comm_first_error_in(j->g, e);
    if (!e) return NULL;
    snprintf(msg, sizeof msg, "checkpoint of step %d not published: %s; the earlier checkpoints are kept", j->meta.step, e);
    return msg;
}

static void deadline_begin(const SaveJob *j) {
    char phase[1300];
    snprintf(phase, sizeof phase, "the checkpoint write of '%s'", j->out.path);
    comm_deadline_begin(phase);
}

int ckpt_save(const char *dir, const ShardState *s, const ModelConfig *m, const char *run, const char *tokenizer,
              const CkptMeta *meta, const CkptSource *src, CkptSaved *out, char *err, size_t errlen) {
    double t0 = clock_now_s();
    SaveJob j;
    comm_deadline_begin("the checks before a checkpoint write");
    int rc = save_begin(&j, dir, s, m, run, tokenizer, meta, src, err, errlen);
    comm_deadline_end();
    out->path = NULL;
    if (rc) return -1;
    deadline_begin(&j);
    save_write(&j);
    const char *e = save_publish(&j);
    comm_deadline_end();
    *out = j.out;  // the path is the caller's now
    out->seconds = clock_now_s() - t0;
    j.out.path = NULL;
    job_free(&j);
    return e ? err_set(err, errlen, "%s", e) : 0;
}

// ---- snapshots: a host copy of the shards' slices (--keep_snapshot, --async_checkpoint) ----

// The slices of the three state groups in one host buffer, in piece order (docs/DESIGN.md,
// "Snapshots and rollback"): those this rank writes (a staging buffer alone), or every slice it
// holds (a snapshot it restores: replicas and tp duplicates hold slices they never write).
struct CkptSnapshot {
    char *buf;       // pinned host memory on a GPU; the tracker's "staging"
    size_t bytes, np;
    H5Piece *pieces;  // where each slice lives on the shards
    size_t *off;      // its place in buf
    int step;         // the optimizer step of the state taken (-1: none yet)
};

static CkptSnapshot *snapshot_make(const ShardState *s, int all) {
    CkptSnapshot *k = callocCheck(1, sizeof *k);
    const ModelPlan *plan = shard_plan(s);
    k->np = h5_pieces(s, plan, !all, 3, NULL);
    k->pieces = mallocCheck((k->np ? k->np : 1) * sizeof *k->pieces);
    k->off = mallocCheck((k->np ? k->np : 1) * sizeof *k->off);
    h5_pieces(s, plan, !all, 3, k->pieces);
    for (size_t i = 0; i < k->np; i++) k->off[i] = k->bytes, k->bytes += h5_piece_bytes(&k->pieces[i]);
    k->buf = kern_alloc_host(k->bytes ? k->bytes : 1, KERN_MEM_STAGING, 1);
    memset(k->buf, 0, k->bytes);  // its pages mapped now, not during the first copy
    k->step = -1;
    return k;
}

// The shards' slices into the buffer (the device's by the thread that owns the device).
static void snapshot_copy_in(CkptSnapshot *k) {
    for (size_t i = 0; i < k->np; i++) {
        const H5Piece *p = &k->pieces[i];
        size_t bytes = h5_piece_bytes(p);
        if (bytes && p->on_device) kern_download(k->buf + k->off[i], p->buf, bytes);
        else if (bytes) memcpy(k->buf + k->off[i], p->buf, bytes);
    }
}

// The bytes of this rank's slices: those it writes, or (all) every one it holds.
static size_t slices_bytes(const ShardState *s, int all) {
    const ModelPlan *plan = shard_plan(s);
    size_t np = h5_pieces(s, plan, !all, 3, NULL), bytes = 0;
    H5Piece *p = mallocCheck((np ? np : 1) * sizeof *p);
    h5_pieces(s, plan, !all, 3, p);
    for (size_t i = 0; i < np; i++) bytes += h5_piece_bytes(&p[i]);
    free(p);
    return bytes;
}

size_t ckpt_snapshot_bytes(const ShardState *s) { return slices_bytes(s, 1); }

CkptSnapshot *ckpt_snapshot_new(const ShardState *s) { return snapshot_make(s, 1); }

void ckpt_snapshot_free(CkptSnapshot *k) {
    if (!k) return;
    kern_free_host(k->buf);
    free(k->pieces);
    free(k->off);
    free(k);
}

void ckpt_snapshot_take(CkptSnapshot *k, const ShardState *s) {
    snapshot_copy_in(k);
    k->step = shard_step(s);
}

int ckpt_snapshot_step(const CkptSnapshot *k) { return k->step; }

int ckpt_snapshot_restore(CkptSnapshot *k, CkptAsync *a, ShardState *s) {
    ckpt_async_fence(a);  // a background write's copy of the shards, if one is being taken, is complete
    if (k->step < 0) err_fatal("internal error: a snapshot restored before one was taken");
    for (size_t i = 0; i < k->np; i++) {
        const H5Piece *p = &k->pieces[i];
        size_t bytes = h5_piece_bytes(p);
        if (bytes && p->on_device) kern_upload(p->buf, k->buf + k->off[i], bytes);
        else if (bytes) memcpy(p->buf, k->buf + k->off[i], bytes);
    }
    shard_master_changed(s);  // the device's and the bf16 copies of the masters
    shard_set_step(s, k->step);
    return k->step;
}

// ---- writing in the background (--async_checkpoint) ----

// The design (docs/DESIGN.md, "Checkpoints written in the background"): this rank's slices are
// copied into one host buffer (by the writer on the CPU, fenced before the next update; by the main
// thread from a GPU) and the step goes on; a writer thread alone then calls HDF5 (the
// Debian build is not thread-safe: h5_own makes any other caller an internal error) and makes
// its MPI calls (MPI-IO's and its agreements) on a communicator of its own, which needs
// MPI_THREAD_MULTIPLE. One write is in flight at a time. With --keep_snapshot the buffer is the
// snapshot's, which holds every slice of the rank: the writer writes its own part of it.
struct CkptAsync {
    CommGroup *g;      // the writer's communicator
    CkptSnapshot *k;   // the staging buffer and where each slice comes from
    int own_k;         // k is the writer's alone (no --keep_snapshot)
    pthread_t thread;
    int running;      // a write started and not yet joined
    atomic_int done;  // the writer has finished (published, or failed to)
    SaveJob job;
    double staged_s;  // how long staging took (the training thread's part on a GPU)
    atomic_int staged;    // the slices are in the staging buffer: the shards may change
    int device;           // they come from the device: copies queued on its copy stream, the last one `ticket`
    int copying, ticket;  // those copies are queued and not yet waited for (the training thread's to wait)
    char err[CKPT_ERR_LEN];  // the writer's agreed failure to publish, or ""
};

static CkptAsync *in_flight;  // for the exit hook
static _Thread_local int is_writer;  // this thread is the writer (its own failure ends the job)
static void on_exit_hook(int clean);

size_t ckpt_stage_bytes(const ShardState *s) { return slices_bytes(s, 0); }

CkptAsync *ckpt_async_new(const ShardState *s, CkptSnapshot *k) {
    CkptAsync *a = callocCheck(1, sizeof *a);
    a->g = comm_group_background("ckpt");
    a->own_k = !k;
    a->k = k ? k : snapshot_make(s, 0);
    comm_on_exit(on_exit_hook);
    return a;
}

// The job's pieces pointed at their copies in the staging buffer.
static void point_pieces(CkptAsync *a) {
    SaveJob *j = &a->job;
    for (size_t i = 0; i < j->np; i++) j->pieces[i].buf = a->k->buf + a->k->off[i], j->pieces[i].on_device = 0;
}

// This rank's slices into the staging buffer. On the CPU the writer copies them while the next
// step's forward and backward read the same shards (nothing writes them before its update:
// ckpt_async_fence).
static void stage(CkptAsync *a) {
    double t0 = clock_now_s();
    snapshot_copy_in(a->k);
    point_pieces(a);
    a->staged_s = clock_now_s() - t0;
    atomic_store(&a->staged, 1);
}

// From a GPU: the training thread (the device's) queues the copies on the copy stream, after the
// kernels that wrote the shards, and trains on; they overlap the next step's forward and backward,
// and ckpt_async_fence waits for them before its update writes the shards.
static void stage_queue(CkptAsync *a) {
    double t0 = clock_now_s();
    CkptSnapshot *k = a->k;
    for (size_t i = 0; i < k->np; i++)
        if (h5_piece_bytes(&k->pieces[i])) a->ticket = kern_download_async(k->buf + k->off[i], k->pieces[i].buf, h5_piece_bytes(&k->pieces[i]));
    point_pieces(a);
    a->copying = 1;
    a->staged_s = clock_now_s() - t0;
}

static void *writer_main(void *arg) {
    CkptAsync *a = arg;
    is_writer = 1;
    while (a->device && !atomic_load(&a->staged)) usleep(100);  // the device's copies, which the training thread waits for
    if (!atomic_load(&a->staged)) stage(a);
    double w0 = clock_now_s();  // the write's own time: not the wait for the device's copies, nor staging
    h5_own(1);
    deadline_begin(&a->job);
    save_write(&a->job);
    const char *e = save_publish(&a->job);
    comm_deadline_end();
    snprintf(a->err, sizeof a->err, "%s", e ? e : "");
    if (!e) {
        double took = clock_now_s() - w0;
        log_msg("Saved checkpoint %s in the background: staged in %.2f s, written in %.2f s (%.1f MB/s)\n", a->job.out.path,
                a->staged_s, took, a->job.out.bytes / 1e6 / (took > 0 ? took : 1e-9));
        // pruning waits for the write it prunes against: it runs here, after the publish
        ckpt_prune(a->job.dir, a->job.keep, &a->job.meta, a->job.out.path, a->job.resumed);
    }
    h5_own(0);
    atomic_store(&a->done, 1);
    return NULL;
}

int ckpt_save_async(CkptAsync *a, const char *dir, const ShardState *s, const ModelConfig *m, const char *run,
                    const char *tokenizer, const CkptMeta *meta, const CkptSource *src, int keep, const char *resumed, char *err,
                    size_t errlen) {
    if (a->running) err_fatal("internal error: a checkpoint staged while another is written");
    comm_deadline_begin("the checks before a checkpoint write");
    int rc = save_begin(&a->job, dir, s, m, run, tokenizer, meta, src, err, errlen);
    comm_deadline_end();
    if (rc) return -1;
    SaveJob *j = &a->job;
    free(j->resumed);
    j->resumed = strdup(resumed);
    if (!j->resumed) err_fatal("out of memory");
    j->keep = keep;
    j->g = a->g;
    int device = 0;
    if (j->np != a->k->np) err_fatal("internal error: the checkpoint's slices are not its staging buffer's");
    for (size_t i = 0; i < j->np; i++) {  // each slice staged at its place in the buffer
        device |= a->k->pieces[i].on_device && a->k->pieces[i].n;  // a snapshot's too, which the writer does not write
        if (h5_piece_bytes(&j->pieces[i]) > h5_piece_bytes(&a->k->pieces[i]))
            err_fatal("internal error: the checkpoint's slices outgrew their staging buffer");
    }
    a->err[0] = 0;
    atomic_store(&a->done, 0);
    atomic_store(&a->staged, 0);
    a->device = device, a->copying = 0;
    if (device) stage_queue(a);  // the device's copies are queued by the main thread, which owns the device
    a->k->step = meta->step;  // the staged state is the snapshot (--keep_snapshot)
    in_flight = a;
    // the stop signals go to the training thread: one delivered to the writer would interrupt its
    // file system and MPI-IO calls (EINTR), failing the write instead of stopping at the next step
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int e = pthread_create(&a->thread, NULL, writer_main, a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e) err_fatal("cannot start the checkpoint writer thread: %s", strerror(e));
    a->running = 1;
    return 0;
}

void ckpt_async_fence(CkptAsync *a) {
    if (!a || !a->running) return;
    if (a->copying) {  // queued a step ago: normally done by now
        double t0 = clock_now_s();
        kern_async_wait(a->ticket);
        a->copying = 0;
        a->staged_s += clock_now_s() - t0;
        atomic_store(&a->staged, 1);
    }
    while (!atomic_load(&a->staged)) usleep(100);
}

// comm's exit hook (comm_on_exit): an error that every rank agreed on (clean) waits for the write
// in flight, which then publishes the state staged before the error; any other end (one rank's
// error, an abort) removes the temporary it was writing, so nothing partial is left under any name
// a resume reads. The writer's own failure comes here too, from its thread: nothing to wait for.
static void on_exit_hook(int clean) {
    CkptAsync *a = in_flight;
    if (!a || is_writer) return;
    if (clean) {
        double waited;
        char err[CKPT_ERR_LEN];
        ckpt_async_wait(a, &waited, err, sizeof err);
    } else if (comm_info.rank == 0) {
        unlink(a->job.tmp);
    }
}

int ckpt_async_busy(const CkptAsync *a) { return a && a->running; }

int ckpt_async_wait(CkptAsync *a, double *waited, char *err, size_t errlen) {
    double t0 = clock_now_s();
    *waited = 0;
    if (!a || !a->running) return 0;
    ckpt_async_fence(a);  // the device's copies, which the writer waits for
    // a stop signal's watchdog must not end the wait: the write's own deadline watches it
    // a writer that failed while this thread was already ending the job stops where it is
    // (comm's end_claim): its thread ends without `done`
    int joined = 0;
    while (!atomic_load(&a->done) && !(joined = pthread_tryjoin_np(a->thread, NULL) == 0)) {
        comm_stop_progress();
        usleep(1000);
    }
    if (!joined) pthread_join(a->thread, NULL);
    a->running = 0;
    in_flight = NULL;
    *waited = clock_now_s() - t0;
    job_free(&a->job);
    return a->err[0] ? err_set(err, errlen, "%s", a->err) : 0;
}

void ckpt_async_free(CkptAsync *a) {
    if (!a) return;
    if (a->own_k) ckpt_snapshot_free(a->k);
    free(a);
}

// ---- reading ----

// Each rank checksums its part of every tensor of the three groups, a bounded chunk at a time;
// the parts combine in rank order. The agreed error or NULL.
static const char *verify_checksums(hid_t f, const char *file, const ModelPlan *plan, const uint32_t *want) {
    static char msg[1400];
    int nt = h5_count_tensors(plan), k = 0;
    size_t W = (size_t)comm_info.world, R = (size_t)comm_info.rank;
    CommCrc *c = callocCheck((size_t)3 * nt, sizeof *c);
    float *buf = mallocCheck(VERIFY_CHUNK * sizeof(float));
    const char *e = NULL;
    char path[160];
    for (int g = 0; g < 3; g++)
        for (int u = 0; u < plan->nunits; u++)
            for (int t = 0; t < plan->units[u].ntensors; t++, k++) {
                const TensorSpec *ts = &plan->units[u].t[t];
                if (!ckpt_group_has(plan, u, g)) continue;
                // an nf4 tensor (QLoRA) is checksummed as its packed bytes
                size_t len = h5_stored_len(ts), lo = len * R / W, hi = len * (R + 1) / W, es = ts->nf4 ? 1 : sizeof(float);
                uLong crc = crc32_z(0, Z_NULL, 0);
                snprintf(path, sizeof path, "%s/%s", ckpt_groups[g], ts->name);
                const char *why;  // h5_check_tensors refused those not stored in the file before
                hid_t ds = e ? -1 : h5_open_stored(f, path, &why), fs = ds < 0 ? -1 : H5Dget_space(ds);
                for (size_t b = lo; !e && b < hi; b += VERIFY_CHUNK) {
                    size_t n = hi - b < VERIFY_CHUNK ? hi - b : VERIFY_CHUNK;
                    hsize_t md[1] = {n};
                    hid_t ms = h5Check(H5Screate_simple(1, md, NULL));
                    if (fs >= 0) h5_select_range(fs, ts, b, n);
                    if (fs < 0 || H5Dread(ds, ts->nf4 ? H5T_NATIVE_UCHAR : H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf) < 0)
                        e = err_text(msg, sizeof msg, "checkpoint '%s': cannot read tensor /%s (corrupt or truncated file?)", path_show(file), path_show(path));
                    else crc = crc32_z(crc, (const Bytef *)buf, n * es);
                    H5Sclose(ms);
                    comm_deadline_progress();
                }
                if (fs >= 0) H5Sclose(fs);
                if (ds >= 0) H5Dclose(ds);
                c[k] = (CommCrc){lo * es, (hi - lo) * es, crc};
            }
    free(buf);
    e = comm_first_error(e);
    if (!e) {
        comm_allreduce_crc32(comm_world(), c, (size_t)3 * nt);
        e = h5_checksum_mismatch(file, plan, 3, c, want);  // the same on every rank
    }
    if (e && e != msg) snprintf(msg, sizeof msg, "%s", e);
    free(c);
    return e ? msg : NULL;
}

enum { MAX_HASHED_FIELDS = 16 };  // config fields a header hash covers (a family stores fewer)
static uint64_t header_hash(const CkptHeader *h) {
    uint64_t x = 0xcbf29ce484222325ULL;
    const ModelFamily *fam = family_find(h->model.model_type);  // known: the header passed its checks
    int v[2 + MAX_HASHED_FIELDS] = {h->version, h->meta.step}, i = 2;
    for (const FamilyField *fl = fam->ckpt_fields; fl->name && i < 2 + MAX_HASHED_FIELDS; fl++, i++)
        if (fl->type != FAMILY_FLOAT) v[i] = *(const int *)((const char *)&h->model + fl->off);
    const unsigned char *b = (const unsigned char *)v;
    for (size_t i = 0; i < sizeof v; i++) x = (x ^ b[i]) * 0x100000001b3ULL;
    return x;
}

static const char *read_skipped(hid_t f, CkptMeta *meta);

int ckpt_verify(const char *file, const char **why, char *err, size_t errlen) {
    static char msg[1400];
    CkptHeader h;
    const char *other = ckpt_check_same_file(file);
    *why = NULL;
    if (other) return err_set(err, errlen, "%s", other);
    char phase[1300];
    snprintf(phase, sizeof phase, "the check of checkpoint '%s'", file);
    comm_deadline_begin(phase);
    hid_t f = h5_open(file, 0, 0);
    const char *e = f < 0 ? h5_open_error(file) : h5_read_header(f, file, &h5_old_defaults, &h);
    // the ranks must be reading one file: a directory private to each node is not one
    uint64_t mine = e ? 0 : header_hash(&h), root = mine;
    comm_bcast_bytes(comm_world(), &root, sizeof root, 0);
    if (!e && root != mine)
        e = err_text(msg, sizeof msg, "rank %d reads other contents in '%s' than rank 0 (is the directory shared by every node?)",
                      comm_info.rank, path_show(file));
    e = comm_first_error(e);
    ModelPlan plan = {0};
    uint32_t *want = NULL;
    if (!e) {
        char big[1024];
        if (model_plan_build(&plan, &h.model, big, sizeof big)) {  // every rank alike: the header is agreed
            H5Fclose(f);
            comm_deadline_end();
            return err_set(err, errlen, "%s", big);
        }
        want = mallocCheck((size_t)3 * h5_count_tensors(&plan) * sizeof *want);
        e = comm_first_error(h5_check_tensors(f, file, &plan, 3, h.version, want));
    }
    if (!e && h.version >= 2) e = verify_checksums(f, file, &plan, want);
    if (!e) {  // the samples rollbacks skipped, when it holds them
        CkptMeta m;
        const char *bad = read_skipped(f, &m);
        free(m.skipped);
        e = comm_first_error(bad ? err_text(msg, sizeof msg, "checkpoint '%s': %s", path_show(file), bad) : NULL);
    }
    if (e && e != msg) snprintf(msg, sizeof msg, "%s", e);
    free(want);
    if (plan.units) model_plan_free(&plan);
    if (f >= 0) H5Fclose(f);
    comm_deadline_end();
    *why = e ? msg : NULL;
    return 0;
}

// Collective open and validation of the first ngroups groups against s's plan: the file, or -1
// with the line in err on every rank. A weights-only load (ngroups 1) of a file without LoRA
// adapters into a run with them reads the base: *plan becomes s's plan without its adapter units
// (they come last, so the others keep their indices), which keep their start.
static hid_t open_checked(const char *file, const ShardState *s, int ngroups, CkptHeader *h, uint32_t *want, ModelPlan *plan,
                          char *err, size_t errlen) {
    const char *other = ckpt_check_same_file(file);
    if (other) return err_set(err, errlen, "%s", other);
    hid_t f = h5_open(file, 0, 1);
    *plan = *shard_plan(s);
    const char *e = f < 0 ? h5_open_error(file) : h5_read_header(f, file, &shard_plan(s)->cfg, h);
    if (!e && ngroups == 1 && !h->model.lora_rank && plan->lora0 >= 0) plan->nunits = plan->lora0, plan->lora0 = -1;
    // QLoRA from weights stored as trained: the file's fp32 tensors, quantised as they are read
    // (load_groups); *plan becomes a copy without nf4 tensors, which the caller frees
    int quantize = !e && ngroups == 1 && !h->model.quantize_base && plan->cfg.quantize_base;
    CkptHeader as_run;
    if (quantize) {
        as_run = *h;
        as_run.model.quantize_base = plan->cfg.quantize_base;
        UnitSpec *units = mallocCheck((size_t)plan->nunits * sizeof *units);
        memcpy(units, plan->units, (size_t)plan->nunits * sizeof *units);
        for (int u = 0; u < plan->nunits; u++) {
            units[u].packed = 0;
            for (int t = 0; t < units[u].ntensors; t++) units[u].t[t].nf4 = 0;
        }
        plan->units = units;
    }
    if (!e) e = ckpt_check_config(quantize ? &as_run : h, file, plan);
    if (!e) e = h5_check_tensors(f, file, plan, ngroups, h->version, want);
    if (comm_agree(e, err, errlen)) {
        if (f >= 0) H5Fclose(f);
        if (quantize) free(plan->units);
        return -1;
    }
    if (h->version < 2)
        log_msg("Note: %s predates checksums (format_version %d): its contents are loaded unverified\n", file, h->version);
    return f;
}

// /skipped_samples into meta (a file without it skipped none): 1-D unsigned 64-bit integers,
// ascending, matching their crc32. NULL, or what is wrong with it.
static const char *read_skipped(hid_t f, CkptMeta *meta) {
    static _Thread_local char msg[300];
    meta->skipped = NULL, meta->nskipped = 0;
    const char *why;
    if (H5Lexists(f, CKPT_SKIPPED_NAME, H5P_DEFAULT) <= 0) return NULL;
    hid_t ds = h5_open_stored(f, CKPT_SKIPPED_NAME, &why);
    if (ds < 0) return err_text(msg, sizeof msg, "/%s is %s", CKPT_SKIPPED_NAME, why ? why : "not a dataset");
    hid_t sp = H5Dget_space(ds), ty = H5Dget_type(ds);
    hsize_t n = 0;
    int shaped = sp >= 0 && H5Sget_simple_extent_ndims(sp) == 1 && H5Sget_simple_extent_dims(sp, &n, NULL) == 1;
    int typed = ty >= 0 && H5Tget_class(ty) == H5T_INTEGER && H5Tget_size(ty) == 8 && H5Tget_sign(ty) == H5T_SGN_NONE;
    CkptAttr crc;
    h5_attr_named(ds, CKPT_CHECKSUM_NAME, &crc);
    uint32_t want = 0;
    // a length beyond the bytes stored for it is a damaged or crafted header: refused before any
    // allocation (fsdpc writes the list uncompressed)
    const char *e = !shaped || !typed || !n ? "is not a list of unsigned 64-bit sample indices"
                    : n > SIZE_MAX / 8 || H5Dget_storage_size(ds) < n * 8 ? "claims more indices than the file stores for it"
                    : !ckpt_crc_value(&crc, &want) ? "has no crc32 attribute" : NULL;
    uint64_t *v = e ? NULL : mallocCheck((size_t)n * sizeof *v);
    if (!e && H5Dread(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) e = "cannot be read";
    if (!e && skipped_crc(v, (size_t)n) != want) e = "fails its checksum";
    for (hsize_t i = 1; !e && i < n; i++)
        if (v[i] <= v[i - 1]) e = "is not in ascending order";
    h5_attr_free(&crc);
    if (ty >= 0) H5Tclose(ty);
    if (sp >= 0) H5Sclose(sp);
    H5Dclose(ds);
    if (e) {
        free(v);
        return err_text(msg, sizeof msg, "/%s %s", CKPT_SKIPPED_NAME, e);
    }
    meta->skipped = v, meta->nskipped = (size_t)n;
    return NULL;
}

// Reading whole fp32 tensors of a file into QLoRA's packed units (shard_fill_packed): the rank
// holding a tensor's first byte in the unit's first replica group checksums it whole.
typedef struct {
    hid_t f;
    const ShardState *s;
    CommCrc *got;  // the weights' checksums, plan order
    char msg[400];
} WholeRead;

static const char *read_whole(void *ctx, int u, int t, float *dst) {
    WholeRead *w = ctx;
    const ModelPlan *plan = shard_plan(w->s);
    const TensorSpec *ts = &plan->units[u].t[t];
    char path[160];
    snprintf(path, sizeof path, "model/%s", ts->name);
    const char *why;
    hid_t ds = h5_open_stored(w->f, path, &why);
    int ok = ds >= 0 && H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) >= 0;
    if (ds >= 0) H5Dclose(ds);
    if (!ok) return snprintf(w->msg, sizeof w->msg, "reading /%s failed", path), w->msg;
    size_t begin, local, k = 0;
    for (int v = 0; v < u; v++) k += (size_t)plan->units[v].ntensors;
    // under tp a tensor each tp rank holds a part or a copy of is checksummed by the first
    size_t n = model_whole_numel(ts);
    if (shard_is_writer(w->s, u) && shard_packed_slice(w->s, u, t, &begin, &local) && begin == 0 &&
        (ts->stored_whole || plan->tp_rank == 0))
        w->got[k + (size_t)t] = (CommCrc){0, n * sizeof(float), crc32_z(crc32_z(0, Z_NULL, 0), (const Bytef *)dst, n * sizeof(float))};
    return NULL;
}

// The first ngroups groups into s, each slice checked against its tensor's checksum. 0, or -1
// with the line in err on every rank.
static int load_groups(const char *file, ShardState *s, int ngroups, CkptMeta *meta, char *err, size_t errlen) {
    ModelPlan read;  // the units read: s's, or its base (open_checked)
    const ModelPlan *plan = &read;
    size_t n = (size_t)ngroups * h5_count_tensors(shard_plan(s));
    uint32_t *want = mallocCheck(n * sizeof *want);
    CommCrc *got = callocCheck(n, sizeof *got);
    CkptHeader h;
    char phase[1300];
    snprintf(phase, sizeof phase, "the checkpoint read of '%s'", file);
    comm_deadline_begin(phase);
    hid_t f = open_checked(file, s, ngroups, &h, want, &read, err, errlen);
    int rc = f < 0 ? -1 : 0;
    const char *e = rc ? NULL : h5_xfer_state(f, s, plan, 0, ngroups, got);
    int quantize = !rc && read.units != shard_plan(s)->units;  // open_checked's copy: the packed units are made here
    WholeRead whole = {.f = f, .s = s, .got = got};
    for (int u = 0; quantize && !e && u < plan->nunits; u++)
        if (shard_unit_packed(s, u)) e = comm_first_error(shard_fill_packed(s, u, read_whole, &whole));
    if (!rc && !e && meta) e = comm_first_error(read_skipped(f, &h.meta));
    if (e) free(h.meta.skipped);
    if (f >= 0) H5Fclose(f);
    if (e) rc = err_set(err, errlen, "checkpoint '%s': %s (corrupt or truncated file?)", path_show(file), e);
    if (!rc && h.version >= 2) {
        // the first replica of every unit holds each tensor once: its slices check what was read
        if (plan->tp > 1) h5_tp_checksums(plan, ngroups, comm_world(), got);
        else comm_allreduce_crc32(comm_world(), got, n);
        rc = comm_agree(h5_checksum_mismatch(file, plan, ngroups, got, want), err, errlen);
    }
    if (quantize) {  // the checks of the file's fp32 tensors are done: s's plan names the same tensors
        free(read.units);
        read.units = shard_plan(s)->units;
    }
    free(want);
    free(got);
    comm_deadline_end();
    if (rc) return rc;
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
        return err_set(err, errlen, "checkpoint '%s' holds NaN or infinite values in %d tensor(s): %s%s (saved after the run "
                       "diverged?): use an earlier checkpoint", path_show(file), nbad, names, nbad > 3 ? ", ..." : "");
    }
    return 0;
}

int ckpt_load(const char *file, ShardState *s, CkptMeta *meta, char *err, size_t errlen) {
    if (load_groups(file, s, 3, meta, err, errlen)) return -1;
    shard_set_step(s, meta->step);
    return 0;
}

int ckpt_load_weights(const char *file, ShardState *s, char *err, size_t errlen) {
    return load_groups(file, s, 1, NULL, err, errlen);
}

const char *ckpt_read_config(const char *file, ModelConfig *m, char *tokenizer, size_t tlen) {
    hid_t f = h5_open(file, 0, 0);
    if (f < 0) return h5_open_error(file);
    CkptHeader h;
    const char *e = h5_read_header(f, file, m, &h);
    H5Fclose(f);
    if (e) return e;
    *m = h.model;
    snprintf(tokenizer, tlen, "%s", h.tokenizer);
    return NULL;
}

const char *ckpt_read_meta(const char *file, CkptMeta *meta) {
    CkptHeader h;
    const char *e = h5_read_header_of(file, &h);
    if (!e) *meta = h.meta;
    return e;
}

const char *ckpt_check_same_file(const char *file) {
    static char msg[2048];
    char mine[1400], *theirs, *root;
    uint64_t size;
    uint32_t crc;
    if (ident_file(file, IDENT_HEAD_MAX, &size, &crc, mine, sizeof mine) == 0)
        snprintf(mine, sizeof mine, "%llu bytes (crc32 %08x of its first MiB and last 64 KiB)", (unsigned long long)size, crc);
    int r = comm_first_different(mine, &theirs, &root);
    if (r < 0) return NULL;
    snprintf(msg, sizeof msg, "rank %d sees another file than rank 0 at checkpoint '%s' (rank %d: %s; rank 0: %s): a relative path "
             "from other working directories, or node-local storage? give every rank the same checkpoint on storage they share",
             r, path_show(file), r, theirs, root);
    free(theirs);
    free(root);
    return msg;
}

struct CkptReader {
    hid_t file;
    char *path;  // heap
    int version;
    const TensorSpec *cur;  // the tensor being read in order, up to element `next`, with its running crc
    size_t next;
    uLong crc;
    const TensorSpec *deq;  // QLoRA: the nf4 tensor last read whole, checked and dequantised into vals
    float *vals;
};

CkptReader *ckpt_reader_open(const char *file, const ModelPlan *plan, const char **err) {
    hid_t f = h5_open(file, 0, 0);
    CkptHeader h;
    *err = f < 0 ? h5_open_error(file) : h5_read_header(f, file, &plan->cfg, &h);
    if (!*err) *err = ckpt_check_config(&h, file, plan);
    if (!*err) *err = h5_check_tensors(f, file, plan, 1, h.version, NULL);
    if (*err) {
        if (f >= 0) H5Fclose(f);
        return NULL;
    }
    CkptReader *r = callocCheck(1, sizeof *r);
    r->file = f;
    r->version = h.version;
    r->path = path_dup(file);
    return r;
}

// An nf4 tensor (QLoRA) whole into r->vals: its packed bytes read, checked against their checksum
// and dequantised (the values training computed with, in fp32).
static const char *reader_dequantize(CkptReader *r, const TensorSpec *t) {
    static char msg[1400];
    if (r->deq == t) return NULL;
    size_t n = model_whole_numel(t), nb = kern_nf4_bytes(n);
    uint8_t *bytes = mallocCheck(nb);
    char path[160];
    snprintf(path, sizeof path, "model/%s", t->name);
    const char *why;
    hid_t ds = h5Check(h5_open_stored(r->file, path, &why));
    const char *e = NULL;
    if (H5Dread(ds, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes) < 0)
        e = err_text(msg, sizeof msg, "cannot read /%s from checkpoint '%s' (corrupt or truncated file?)", path_show(path), r->path);
    uint32_t got = (uint32_t)crc32_z(crc32_z(0, Z_NULL, 0), bytes, nb), want;
    CkptAttr a;
    h5_attr_named(ds, CKPT_CHECKSUM_NAME, &a);
    if (!e && r->version >= 2 && ckpt_crc_value(&a, &want) && want != got)
        e = err_text(msg, sizeof msg, "checkpoint '%s': tensor /%s fails its checksum (crc32 of the data %08x, recorded %08x): the file is corrupt",
                     r->path, path_show(path), got, want);
    h5_attr_free(&a);
    H5Dclose(ds);
    free(r->vals);
    r->vals = e ? NULL : mallocCheck(n * sizeof(float));
    r->deq = e ? NULL : t;
    if (!e) kern_nf4_dequantize_host(r->vals, bytes, n);
    free(bytes);
    return e;
}

const char *ckpt_reader_read(CkptReader *r, const TensorSpec *t, size_t begin, size_t count, float *dst) {
    static char msg[1400];
    char path[160];
    if (t->nf4) {
        const char *e = reader_dequantize(r, t);
        if (!e) memcpy(dst, r->vals + begin, count * sizeof(float));
        return e;
    }
    snprintf(path, sizeof path, "model/%s", t->name);
    const char *why;
    hid_t ds = h5Check(h5_open_stored(r->file, path, &why));
    hid_t fspace = h5Check(H5Dget_space(ds));
    h5_select_range(fspace, t, begin, count);
    hsize_t mdim[1] = {count};
    hid_t mspace = h5Check(H5Screate_simple(1, mdim, NULL));
    int ok = H5Dread(ds, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, dst) >= 0;
    H5Sclose(mspace);
    H5Sclose(fspace);
    const char *e = NULL;
    if (!ok) e = err_text(msg, sizeof msg, "cannot read /%s from checkpoint '%s' (corrupt or truncated file?)", path_show(path), r->path);
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
            h5_attr_named(ds, CKPT_CHECKSUM_NAME, &a);
            if (ckpt_crc_value(&a, &want) && want != r->crc)
                e = err_text(msg, sizeof msg, "checkpoint '%s': tensor /%s fails its checksum (crc32 of the data %08x, recorded %08x): the file is corrupt",
                              r->path, path_show(path), (uint32_t)r->crc, want);
            h5_attr_free(&a);
        }
    }
    H5Dclose(ds);
    return e;
}

void ckpt_reader_close(CkptReader *r) {
    H5Fclose(r->file);
    free(r->vals);
    free(r->path);
    free(r);
}
