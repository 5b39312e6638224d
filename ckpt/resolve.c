// resolve: a resume path to the checkpoint it names (resolve.h).
#include "resolve.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/err.h"
#include "../base/log.h"
#include "../base/path.h"
#include "../comm/comm.h"
#include "foreign.h"

// Several lineages in one directory: the newest usable checkpoint of each (verified, as a resume
// would), and of those the one whose run_inputs name the run's sources, when exactly one does.
static int resolve_lineages(const char *path, int asked, LineageEntry *e, int n, int nl, char **out, char *err, size_t errlen) {
    int *pick = mallocCheck((size_t)nl * sizeof *pick);
    for (int l = 0; l < nl; l++) pick[l] = -1;
    char first[1400] = "";
    for (int i = 0; i < n; i++) {
        if (e[i].kind == LINEAGE_RUN && pick[e[i].lineage] >= 0) continue;  // an older file of a lineage already settled
        char *file = path_join(path, e[i].name);
        const char *why = NULL;
        int rc = e[i].kind == LINEAGE_NO_RUN ? 0 : ckpt_verify(file, &why, err, errlen);
        if (e[i].kind == LINEAGE_NO_RUN)
            log_msg("Checkpoint %s predates run ids (format_version 1) and belongs to none of the runs in %s: passed over\n", file, path);
        else if (!rc && !why && e[i].kind == LINEAGE_RUN)
            pick[e[i].lineage] = i;
        else if (!rc && why) {
            int older = 0;
            for (int j = i + 1; j < n && !older; j++) older = e[j].kind == LINEAGE_RUN && e[i].kind == LINEAGE_RUN && e[j].lineage == e[i].lineage;
            if (!first[0]) snprintf(first, sizeof first, "%s", why);
            log_msg("Checkpoint %s is unusable%s: %s\n", file, older ? ", falling back to the one before it in its run's lineage" : "", why);
        }
        free(file);
        if (rc) {
            free(pick);
            return -1;
        }
    }
    int usable = 0, matching = 0, chosen = -1;
    for (int l = 0; l < nl; l++) {
        if (pick[l] < 0) continue;
        usable++;
        matching += e[pick[l]].match;
        if (usable == 1 || (e[pick[l]].match && matching == 1)) chosen = l;  // the only one, or the one that matches
    }
    if (!usable) {
        free(pick);
        return err_set(err, errlen, "none of the %d checkpoint(s) in '%s' is usable; the newest: %s", n, path_show(path), first);
    }
    unsigned char *sel = callocCheck((size_t)n, 1);
    char runs[1200];
    for (int l = 0; l < nl; l++)
        if (pick[l] >= 0) sel[pick[l]] = 1;
    if (usable > 1 && matching != 1) {
        lineage_describe_runs(e, n, sel, runs, sizeof runs);
        char why[160] = "";
        if (asked)
            snprintf(why, sizeof why, matching ? ", and %d of them record this run's training data"
                                               : ", none of which records this run's training data", matching);
        int newest = n;
        for (int l = 0; l < nl; l++)
            if (pick[l] >= 0 && pick[l] < newest) newest = pick[l];
        err_set(err, errlen, "'%s' holds the checkpoints of %d unrelated runs%s: %s; give --resume_from_checkpoint the file to "
                "resume (such as %s/%s), or move the other runs' files out of the folder",
                path_show(path), usable, why, runs, path_show(path), e[newest].name);
        free(sel);
        free(pick);
        return -1;
    }
    *out = path_join(path, e[pick[chosen]].name);
    if (usable > 1) {
        sel[pick[chosen]] = 0;
        lineage_describe_runs(e, n, sel, runs, sizeof runs);
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
    return err_text(msg, sizeof msg, "checkpoint '%s' holds %s, not fsdpc checkpoints (step_<N>.h5), so fsdpc cannot resume it; %s", path_show(path),
             what, fix);
}

int ckpt_resolve(const char *path, CkptOwnsFn ours, void *ctx, char **out, char *err, size_t errlen) {
    // rank 0 looks, lists and reads the headers, so every rank takes the same path and verifies
    // the same candidates
    struct stat st;
    static char why[1400];
    int kind = 0;  // 0: nothing there (a fresh start), 1: a file, 2: a folder
    const char *bad = NULL;
    if (comm_info.rank == 0 && stat(path, &st) == 0) {
        kind = S_ISDIR(st.st_mode) ? 2 : 1;
        if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
            bad = err_text(why, sizeof why, "checkpoint '%s' is neither a file nor a folder", path_show(path));
        else if (!S_ISDIR(st.st_mode))
            bad = foreign_resume(path);
    } else if (comm_info.rank == 0 && errno != ENOENT) {  // there may be something, out of reach: not a fresh start
        bad = err_text(why, sizeof why, "checkpoint '%s': %s", path_show(path), comm_path_error(path, errno));
    }
    if (comm_agree(bad, err, errlen)) return -1;
    comm_bcast_bytes(comm_world(), &kind, sizeof kind, 0);
    *out = NULL;
    if (kind == 0) return 0;  // a resume dir that does not exist yet: start fresh
    if (kind == 1) {
        *out = path_dup(path);  // its header, the name's step included, is checked when it is read
        return 1;
    }
    int n = 0, nl = 0;
    LineageEntry *e = comm_info.rank == 0 ? lineage_list(path, &n) : NULL;
    static char msg[1200];
    bad = NULL;
    if (comm_info.rank == 0 && !e)
        bad = err_text(msg, sizeof msg, "cannot read checkpoint directory '%s': %s", path_show(path), comm_path_error(path, errno));
    else if (comm_info.rank == 0 && !n)  // only a folder without fsdpc's checkpoints would start afresh
        bad = foreign_resume(path);
    if (comm_agree(bad, err, errlen)) {
        free(e);
        return -1;
    }
    if (comm_info.rank == 0) {
        LineageKin kin;
        lineage_read(path, e, n, NULL, ours, ctx, &kin);
        int *num = mallocCheck((size_t)(kin.n ? kin.n : 1) * sizeof *num);  // lineages numbered newest first
        for (int i = 0; i < kin.n; i++) num[i] = -1;
        for (int i = 0; i < n; i++)
            if (e[i].kind == LINEAGE_RUN) e[i].lineage = num[e[i].lineage] >= 0 ? num[e[i].lineage] : (num[e[i].lineage] = nl++);
        free(num);
        lineage_kin_free(&kin);
    }
    comm_bcast_bytes(comm_world(), &n, sizeof n, 0);
    comm_bcast_bytes(comm_world(), &nl, sizeof nl, 0);
    if (comm_info.rank != 0) e = mallocCheck((size_t)(n ? n : 1) * sizeof *e);
    comm_bcast_bytes(comm_world(), e, (size_t)n * sizeof *e, 0);
    if (nl > 1) {
        int r = resolve_lineages(path, ours != NULL, e, n, nl, out, err, errlen);
        free(e);
        return r;
    }
    // one lineage (files from before run ids belong to it): its newest usable checkpoint
    char first[1400] = "";
    for (int i = 0; i < n; i++) {
        char *file = path_join(path, e[i].name);
        const char *why;
        int rc = ckpt_verify(file, &why, err, errlen);
        if (rc || !why) {
            free(e);
            if (!rc) *out = file;
            else free(file);
            return rc ? rc : 1;
        }
        if (!i) snprintf(first, sizeof first, "%s", why);
        log_msg("Checkpoint %s is unusable%s: %s\n", file, i + 1 < n ? ", falling back to the one before it" : "", why);
        free(file);
    }
    free(e);
    if (n) return err_set(err, errlen, "none of the %d checkpoint(s) in '%s' is usable; the newest: %s", n, path_show(path), first);
    return 0;
}
