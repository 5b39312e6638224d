// lineage: run ids, lineages and pruning (lineage.h).
#include "lineage.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../base/err.h"
#include "../base/log.h"
#include "../base/path.h"
#include "../base/wlock.h"
#include "../comm/comm.h"
#include "h5.h"


// step number of a name step_<digits>.h5, or -1
int lineage_step_of(const char *name) {
    if (strncmp(name, "step_", 5) != 0) return -1;
    size_t n = strspn(name + 5, "0123456789");
    if (n == 0 || n > 9 || strcmp(name + 5 + n, ".h5") != 0) return -1;
    return atoi(name + 5);
}

static int newest_first(const void *a, const void *b) {
    const LineageEntry *x = a, *y = b;
    return x->step != y->step ? (x->step < y->step) - (x->step > y->step) : strcmp(x->name, y->name);
}

// The checkpoints in dir, newest step first: regular files (or links to them) named
// step_<digits>.h5. NULL when dir cannot be read.
LineageEntry *lineage_list(const char *dir, int *n) {
    DIR *d = opendir(dir);
    *n = 0;
    if (!d) return NULL;
    int cap = 16;
    LineageEntry *e = mallocCheck((size_t)cap * sizeof *e);
    struct stat st;
    for (struct dirent *de; (de = readdir(d));) {
        int step = lineage_step_of(de->d_name);
        char *path = step < 0 ? NULL : path_join(dir, de->d_name);
        int file = path && stat(path, &st) == 0 && S_ISREG(st.st_mode);
        free(path);
        if (!file) continue;  // dangling links, directories
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

int lineage_is_run_id(const char *s) { return strlen(s) == CKPT_RUN_ID_LEN && strspn(s, "0123456789abcdef") == CKPT_RUN_ID_LEN; }

// The next "<run_id>:<step>" of a lineage attribute at *p (malformed words are skipped: the
// attribute is the file's to lie in); 0 at its end.
int lineage_next(const char **p, char id[CKPT_RUN_ID_LEN + 1], int *step) {
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


static void kin_add(LineageKin *k, const char *id) {
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 64;
        k->id = realloc(k->id, (size_t)k->cap * sizeof *k->id);
        if (!k->id) err_fatal("out of memory grouping checkpoints by run");
    }
    snprintf(k->id[k->n++], sizeof k->id[0], "%s", id);
}

// a run and the ancestors its lineage names (files from before run ids have none)
static void kin_add_meta(LineageKin *k, const CkptMeta *m) {
    char id[CKPT_RUN_ID_LEN + 1];
    int step;
    if (!m->run_id[0]) return;
    kin_add(k, m->run_id);
    for (const char *p = m->lineage; lineage_next(&p, id, &step);) kin_add(k, id);
}

static int id_cmp(const void *a, const void *b) { return strcmp(a, b); }

// after the last kin_add: sorted, each id once and in a set of its own
static void kin_seal(LineageKin *k) {
    if (k->n) qsort(k->id, (size_t)k->n, sizeof *k->id, id_cmp);
    int n = 0;
    for (int i = 0; i < k->n; i++)
        if (!n || strcmp(k->id[i], k->id[n - 1]) != 0) memmove(k->id[n++], k->id[i], sizeof *k->id);
    k->n = n;
    k->up = mallocCheck((size_t)(n ? n : 1) * sizeof *k->up);
    for (int i = 0; i < n; i++) k->up[i] = i;
}

// the set of id, -1 for an id never added
int lineage_kin_root(LineageKin *k, const char *id) {
    const char(*hit)[CKPT_RUN_ID_LEN + 1] = k->n && id[0] ? bsearch(id, k->id, (size_t)k->n, sizeof *k->id, id_cmp) : NULL;
    if (!hit) return -1;
    int i = (int)(hit - k->id);
    while (k->up[i] != i) i = k->up[i] = k->up[k->up[i]];
    return i;
}

static void kin_join_meta(LineageKin *k, const CkptMeta *m) {
    char id[CKPT_RUN_ID_LEN + 1];
    int step, a = lineage_kin_root(k, m->run_id);
    for (const char *p = m->lineage; a >= 0 && lineage_next(&p, id, &step);) {
        int b = lineage_kin_root(k, id);
        if (b >= 0 && b != a) k->up[b] = a;
    }
}

void lineage_kin_free(LineageKin *k) {
    free(k->id);
    free(k->up);
    memset(k, 0, sizeof *k);
}

// Rank 0: the header of each of dir's n checkpoints, and their lineages: files whose runs are
// linked by lineage attributes are one. `own` (NULL: none), the run about to write there, is
// linked in too. Each entry gets its kind, run id, lineage and whether `ours` (NULL: none)
// accepts its run_inputs; kin keeps the sets.
void lineage_read(const char *dir, LineageEntry *e, int n, const CkptMeta *own, CkptOwnsFn ours, void *ctx, LineageKin *kin) {
    char (*lineage)[sizeof own->lineage] = mallocCheck((size_t)(n ? n : 1) * sizeof *lineage);
    CkptHeader h;
    memset(kin, 0, sizeof *kin);
    if (own) kin_add_meta(kin, own);
    for (int i = 0; i < n; i++) {
        char *path = path_join(dir, e[i].name);
        e[i].kind = h5_read_header_of(path, &h) ? LINEAGE_UNUSABLE : h.meta.run_id[0] ? LINEAGE_RUN : LINEAGE_NO_RUN;
        free(path);
        e[i].match = e[i].kind == LINEAGE_RUN && ours && ours(h.meta.inputs, ctx);
        snprintf(e[i].run_id, sizeof e[i].run_id, "%s", e[i].kind == LINEAGE_RUN ? h.meta.run_id : "");
        snprintf(lineage[i], sizeof lineage[i], "%s", e[i].kind == LINEAGE_RUN ? h.meta.lineage : "");
        if (e[i].kind == LINEAGE_RUN) kin_add_meta(kin, &h.meta);
    }
    kin_seal(kin);
    if (own) kin_join_meta(kin, own);
    CkptMeta m;
    for (int i = 0; i < n; i++) {
        if (e[i].kind != LINEAGE_RUN) continue;
        snprintf(m.run_id, sizeof m.run_id, "%s", e[i].run_id);
        snprintf(m.lineage, sizeof m.lineage, "%s", lineage[i]);
        kin_join_meta(kin, &m);
    }
    for (int i = 0; i < n; i++) e[i].lineage = e[i].kind == LINEAGE_RUN ? lineage_kin_root(kin, e[i].run_id) : -1;
    free(lineage);
}

// "run R (newest step_N.h5), ...": each run of the entries that sel marks once, at its newest
// file, the first few by name
void lineage_describe_runs(const LineageEntry *e, int n, const unsigned char *sel, char *buf, size_t len) {
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

void ckpt_new_run_id(char id[CKPT_RUN_ID_LEN + 1]) {
    _Static_assert(CKPT_RUN_ID_LEN == WLOCK_ID_LEN, "a run id is a writer id");
    if (comm_info.rank == 0) wlock_new_id(id);
    comm_bcast_bytes(comm_world(), id, CKPT_RUN_ID_LEN + 1, 0);
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
    LineageEntry *e = lineage_list(dir, &n);
    if (!e) return;
    Ancestor anc[CKPT_LINEAGE_MAX + 1];
    int na = 0;
    anc[na].last = INT_MAX;
    snprintf(anc[na++].id, sizeof anc[0].id, "%s", meta->run_id);
    for (const char *p = meta->lineage; na <= CKPT_LINEAGE_MAX && lineage_next(&p, anc[na].id, &anc[na].last);) na++;
    // membership is proven by the file's own run_id and step; a file that cannot be read proves nothing
    Member *m = mallocCheck((size_t)(n ? n : 1) * sizeof *m);
    int nm = 0;
    CkptHeader h;
    for (int i = 0; i < n; i++) {
        char *path = path_join(dir, e[i].name);
        int unread = h5_read_header_of(path, &h) != NULL;
        free(path);
        if (unread) continue;
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
        char *path = path_join(dir, e[m[j].entry].name);
        if (stat(path, &st) == 0 && !(have_w && same_file(&st, &ws)) && !(have_r && same_file(&st, &rs)) && unlink(path) != 0)
            log_msg("warning: could not delete old checkpoint %s: %s\n", path, strerror(errno));
        free(path);
    }
    free(m);
    free(e);
}
