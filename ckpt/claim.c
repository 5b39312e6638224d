// claim: the checkpoint folder's writer lock and what the run may replace there (claim.h).
#include "claim.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/err.h"
#include "../base/wlock.h"
#include "../base/log.h"
#include "../base/path.h"
#include "../comm/comm.h"
#include "../comm/io.h"
#include "foreign.h"
#include "h5.h"
#include "lineage.h"

// The writer lock (base/wlock.h): a second run given the folder (a job requeued while the first
// still runs, two jobs given one directory) stops at start-up instead of interleaving
// checkpoints. Before each publish the writer re-reads the lock, so a run whose lock was removed
// or taken over stops rather than write on.
static char *claim_lock, claim_id[CKPT_RUN_ID_LEN + 1];  // rank 0's writer lock, if any

const char *claim_lost(void) { return claim_lock ? wlock_lost(claim_lock, claim_id) : NULL; }

const char *ckpt_check_claim(const char *dir, const char *run_id) {
    static char msg[16384];
    char why[300] = "", *path = wlock_path(dir, 1);
    // a file rank 0 has just created may take a moment to appear on a network file system
    for (int attempt = 0; attempt < 10; attempt++) {
        if (!wlock_lost(path, run_id)) return free(path), NULL;
        if (access(path, F_OK) != 0) snprintf(why, sizeof why, "%s", strerror(errno));
        else snprintf(why, sizeof why, "it holds another run's id, or no writer lock");
        usleep(100000);
    }
    err_text(msg, sizeof msg, "rank %d does not see the writer lock that rank 0 just took in --checkpoint_dir '%s' ('%s': %s): the "
             "folder is another one on rank %d (a relative path from another working directory, or node-local storage?); give every "
             "rank the same --checkpoint_dir on storage they share", comm_info.rank, path_show(dir), path_show(path), why, comm_info.rank);
    free(path);
    return msg;
}

void ckpt_release_dir(void) {
    io_unlock_output(claim_lock, claim_id);
    claim_lock = NULL;
}

// whether name is a step_<digits>.h5.<run id>.tmp, a checkpoint being written; its run into id
static int tmp_of(const char *name, char id[CKPT_RUN_ID_LEN + 1]) {
    const char *dot = strstr(name, ".h5.");
    char head[256];
    if (!dot || (size_t)(dot - name) + 3 >= sizeof head) return 0;
    snprintf(head, (size_t)(dot - name) + 4, "%s", name);
    if (lineage_step_of(head) < 0 || strlen(dot + 4) != CKPT_RUN_ID_LEN + 4 || strcmp(dot + 4 + CKPT_RUN_ID_LEN, ".tmp") != 0) return 0;
    memcpy(id, dot + 4, CKPT_RUN_ID_LEN);
    id[CKPT_RUN_ID_LEN] = 0;
    return lineage_is_run_id(id);
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
    char what[900], fix[600], names[3][256], id[CKPT_RUN_ID_LEN + 1];
    if (ckpt_foreign_find(dir, what, sizeof what, fix, sizeof fix)) {
        if (!overwrite)
            return snprintf(msg, sizeof msg, "--checkpoint_dir '%s' holds %s, which fsdpc did not write; give fsdpc a folder of its "
                            "own for its checkpoints (another --checkpoint_dir), or pass --overwrite_checkpoints to write beside them "
                            "(fsdpc leaves them as they are)", path_show(dir), what), msg;
        log_msg("--overwrite_checkpoints: %s holds %s; fsdpc writes beside them and leaves them as they are\n", dir, what);
        return NULL;
    }
    DIR *d = opendir(dir);
    if (!d) return NULL;  // the lock or check_ownership's listing says why
    int n = 0;  // strays; names keeps the first three in byte order, the same whatever the listing's order
    struct stat st;
    for (struct dirent *de; (de = readdir(d));) {
        const char *name = de->d_name;
        char *path = path_join(dir, name);
        size_t len = strlen(name);  // events.out.tfevents.*: --tensorboard_dir's; *.pt.trace.json: --trace_dir's
        int passed = name[0] == '.' || lineage_step_of(name) >= 0 || tmp_of(name, id) || !strncmp(name, "events.out.tfevents.", 20) ||
                     (len > 14 && !strcmp(name + len - 14, ".pt.trace.json")) ||
                     (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) || ckpt_file_kind(path) == CKPT_FILE_HDF5 || io_is_output(path);
        free(path);
        if (passed) continue;
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
                        "--overwrite_checkpoints to write beside them (fsdpc leaves them as they are)", path_show(dir), n, list), msg;
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

// whether file lies in dir itself (the same folder, by device and inode)
static int same_dir(const char *file, const char *dir) {
    char *parent = path_dirname(file);
    struct stat a, b;
    int same = stat(parent, &a) == 0 && stat(dir, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    free(parent);
    return same;
}

// Rank 0, for ckpt_claim_dir: whether the checkpoints in dir are this run's to replace (see
// ckpt.h). Fills `owner`. NULL, or a one-line error.
static const char *check_ownership(const char *dir, const char *run_id, const char *resumed, const char *init, int overwrite) {
    static char msg[2000];
    char runs[1200];
    CkptHeader h;
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
        const char *e = h5_read_header_of(resumed, &h);
        if (e) return e;
        start = h.meta.step;
        ckpt_lineage_of(&h.meta, own.lineage, sizeof own.lineage);
    }
    int n;
    LineageEntry *e = lineage_list(dir, &n);
    if (!e) return snprintf(msg, sizeof msg, "cannot list --checkpoint_dir '%s': %s", path_show(dir), strerror(errno)), msg;
    LineageKin kin;
    lineage_read(dir, e, n, &own, NULL, NULL, &kin);
    int me = lineage_kin_root(&kin, run_id);
    for (int i = 0; i < kin.n; i++)
        if (lineage_kin_root(&kin, kin.id[i]) == me) {
            if (owner.nids % 64 == 0) owner.ids = realloc(owner.ids, (size_t)(owner.nids + 64) * sizeof *owner.ids);
            if (!owner.ids) err_fatal("out of memory listing the runs of this run's lineage");
            memcpy(owner.ids[owner.nids++], kin.id[i], sizeof *owner.ids);
        }
    lineage_kin_free(&kin);
    // another run's: for a fresh run anything; for a resumed one the files of runs outside its
    // history, and files it cannot read at steps it may write (files from before run ids prove
    // nothing either way and stay as they were: replaceable, never pruned)
    unsigned char *other = callocCheck((size_t)(n ? n : 1), 1);
    int nother = 0, nrun = 0, nunusable = 0, unusable = -1, hit = -1, hit_input = 0;
    for (int i = 0; i < n; i++) {
        other[i] = !resumed[0] || (e[i].kind == LINEAGE_RUN && e[i].lineage != me) || (e[i].kind == LINEAGE_UNUSABLE && e[i].step > start);
        nother += other[i];
        nrun += other[i] && e[i].kind == LINEAGE_RUN;
        if (other[i] && e[i].kind == LINEAGE_UNUSABLE && !nunusable++) unusable = i;
        char *path = path_join(dir, e[i].name);
        for (int k = 0; k < owner.ninputs && hit < 0; k++)
            if (e[i].step > start && stat(path, &st) == 0 && st.st_dev == owner.input[k].dev && st.st_ino == owner.input[k].ino)
                hit = i, hit_input = k;
        free(path);
    }
    for (int i = 0; i < n; i++) other[i] = other[i] && e[i].kind == LINEAGE_RUN;
    lineage_describe_runs(e, n, other, runs, sizeof runs);
    const char *err = NULL;
    char why[1600] = "", also[400] = "";
    if (unusable >= 0) {
        char *path = path_join(dir, e[unusable].name);
        const char *r = h5_read_header_of(path, &h);
        free(path);
        snprintf(why, sizeof why, "%s", r ? r : "it changed while being read");
        snprintf(also, sizeof also, " (and %d unusable file(s) named like checkpoints, the newest %s)", nunusable, e[unusable].name);
    }
    if (nother && !overwrite && !resumed[0]) {
        err = msg;
        snprintf(msg, sizeof msg, "--checkpoint_dir '%s' already holds %d checkpoint(s) (the newest %s) of another run; resume them "
                 "with --resume_from_checkpoint %s, give another --checkpoint_dir, or pass --overwrite_checkpoints%s%s", path_show(dir), n,
                 e[0].name, path_show(dir), nrun ? "; they are of " : "", runs);
    } else if (nrun && !overwrite && same_dir(resumed, dir)) {  // resumed from this folder: it picked one of its runs
        err = msg;
        snprintf(msg, sizeof msg, "--checkpoint_dir '%s' holds, beside '%s' (the run this one resumes), %d checkpoint(s) of "
                 "unrelated runs: %s%s; move those runs' files out of '%s', give this run another --checkpoint_dir, or pass "
                 "--overwrite_checkpoints to replace them at the steps this run writes",
                 path_show(dir), path_show(resumed), nrun, runs, also, path_show(dir));
    } else if (nrun && !overwrite) {
        err = msg;
        snprintf(msg, sizeof msg, "--checkpoint_dir '%s' holds %d checkpoint(s) of runs outside the lineage of the checkpoint "
                 "this run resumes ('%s'): %s%s; give this run another --checkpoint_dir, resume from '%s' instead, or pass "
                 "--overwrite_checkpoints to replace them at the steps this run writes",
                 path_show(dir), nrun, path_show(resumed), runs, also, path_show(dir));
    } else if (nother && !overwrite) {
        err = msg;
        snprintf(msg, sizeof msg, "--checkpoint_dir '%s' holds %d file(s) named like checkpoints at steps this run may write that "
                 "are no usable checkpoints of it, the newest %s (%s); move them away, give this run another --checkpoint_dir, "
                 "or pass --overwrite_checkpoints to replace them", path_show(dir), nunusable, e[unusable].name, why);
    } else if (hit >= 0) {
        err = msg;
        snprintf(msg, sizeof msg, "--checkpoint_dir '%s' holds %s, the checkpoint this run starts from (%s), at a step this run "
                 "writes: even --overwrite_checkpoints never replaces a run's own input; give this run another --checkpoint_dir",
                 path_show(dir), e[hit].name, owner.input[hit_input].flag);
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
const char *claim_check_replace(const char *path, const CkptMeta *meta) {
    static char msg[1600];
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    for (int k = 0; k < owner.ninputs; k++)
        if (st.st_dev == owner.input[k].dev && st.st_ino == owner.input[k].ino)
            return snprintf(msg, sizeof msg, "'%s' is the checkpoint this run started from (%s) and is never replaced; give this "
                            "run another --checkpoint_dir", path_show(path), owner.input[k].flag), msg;
    CkptHeader h;
    if (h5_read_header_of(path, &h)) {
        if (!owner.overwrite)
            return snprintf(msg, sizeof msg, "'%s' appeared after start-up and is no usable checkpoint of this run, so it is not "
                            "replaced (is another program writing to --checkpoint_dir?); move it away, or pass "
                            "--overwrite_checkpoints", path_show(path)), msg;
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
                    "or pass --overwrite_checkpoints", path_show(path), h.meta.run_id), msg;
}

const char *ckpt_claim_dir(const char *dir, const char *run_id, const char *resumed, const char *init, int overwrite) {
    const char *stray = check_strays(dir, overwrite), *err;
    if (stray) return stray;
    ckpt_release_dir();
    char *lock = io_lock_output(dir, 1, run_id, "--checkpoint_dir", "checkpoints", &err);
    if (!lock) return err;
    claim_lock = lock;
    snprintf(claim_id, sizeof claim_id, "%s", run_id);
    const char *bad = check_ownership(dir, run_id, resumed, init, overwrite);
    if (bad) {
        ckpt_release_dir();
        return bad;
    }
    // a .tmp of another run is a write that never finished: its writer held this lock and is gone
    DIR *d = opendir(dir);
    char tmp_id[CKPT_RUN_ID_LEN + 1];
    for (struct dirent *de; d && (de = readdir(d));)
        if (tmp_of(de->d_name, tmp_id) && strcmp(tmp_id, run_id) != 0) {
            char *tmp = path_join(dir, de->d_name);
            if (unlink(tmp) == 0) log_msg("Removed %s, left by an interrupted checkpoint write\n", tmp);
            free(tmp);
        }
    if (d) closedir(d);
    // anyone could replace or add checkpoints there (the sticky bit, as /tmp's, stops replacing)
    struct stat st;
    if (stat(dir, &st) == 0 && (st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
        log_msg("warning: --checkpoint_dir '%s' is writable by every user (mode %04o): another user could replace its checkpoints or "
                "add others that a resume would load; chmod o-w it\n", dir, (unsigned)(st.st_mode & 07777));
    return NULL;
}
