// cache: token shards built from document files, once, by all ranks; see cache.h.
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../base/path.h"
#include "../../base/buf.h"
#include "../../base/clock.h"
#include "../../base/err.h"
#include "../../base/log.h"
#include "../../base/wlock.h"
#include "../../comm/comm.h"
#include "../../comm/io.h"
#include "../rows/rows.h"
#include "../source/ident.h"
#include "shards.h"

#define CACHE_VERSION 3  // 2: a document index beside each part, finetuning rows; 3: the rows' fields in part-N.txt
#define CACHE_PROGRESS_PERIOD 1.0  // seconds between rank 0's progress lines
static const char cache_probe_text[] = "Hello, world! 1234 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\n\t  <s> end.";

typedef struct {
    uint64_t a, b;  // two FNV-1a lanes: 128 bits, so unrelated inputs never share a folder
} CacheHash;

static void cache_hash(CacheHash *h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h->a = (h->a ^ p[i]) * 0x100000001b3ULL;
        h->b = (h->b ^ p[i]) * 0x100000001b3ULL + 0x9e37;
    }
}

static void cache_hash_str(CacheHash *h, const char *s) { cache_hash(h, s, strlen(s) + 1); }

static void cache_hash_u64(CacheHash *h, uint64_t v) { cache_hash(h, &v, sizeof v); }

static void cache_hash_file(CacheHash *h, const char *path) {
    FILE *f = path_fopen_read(path);
    if (!f) return cache_hash_str(h, path);  // not a file (the byte tokenizer): its name says it all
    unsigned char buf[1 << 16];
    for (size_t got; (got = fread(buf, 1, sizeof buf, f)) > 0;) cache_hash(h, buf, got);
    fclose(f);
}

static int cache_width(int vocab) { return vocab > 65536 ? 4 : 2; }

// The folder name: what the tokens depend on, and nothing about the run's layout. Without the
// inputs' sizes and times (versions 0): the source, which stays as the files change, so that a
// rebuild after an edit can tell the folders it replaces.
static void cache_key(const CacheRequest *q, int versions, char *out, size_t len) {
    CacheHash h = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL};
    cache_hash_u64(&h, CACHE_VERSION);
    cache_hash_file(&h, tok_path(q->tok));
    int32_t *ids = NULL;
    size_t nids = 0, cap = 0;
    tok_encode(q->tok, cache_probe_text, sizeof cache_probe_text - 1, &ids, &nids, &cap);
    cache_hash(&h, ids, nids * sizeof *ids);
    free(ids);
    cache_hash_u64(&h, (uint64_t)tok_vocab_size(q->tok) << 32 ^ (uint64_t)(uint32_t)tok_bos(q->tok) << 16 ^ (uint32_t)tok_eos(q->tok));
    cache_hash_str(&h, q->text_column);
    cache_hash_u64(&h, (uint64_t)q->explicit_column << 8 | (uint64_t)cache_width(q->vocab));
    cache_hash_u64(&h, (uint64_t)q->format << 16 | (uint64_t)q->tmpl << 8 | (uint64_t)q->train_on_inputs);
    for (int i = 0; i < q->n; i++) {
        char *real = realpath(q->inputs[i].path, NULL);
        const char *p = real ? real : q->inputs[i].path;
        struct stat st;
        memset(&st, 0, sizeof st);
        stat(p, &st);
        cache_hash_str(&h, p);
        if (versions) cache_hash_u64(&h, (uint64_t)st.st_size);
        if (versions) cache_hash_u64(&h, (uint64_t)st.st_mtim.tv_sec * 1000000000ULL + (uint64_t)st.st_mtim.tv_nsec);
        // and the content's: a file rewritten with its size and time kept (ident's head and tail
        // CRC, less of each file when there are many); an unreadable one fails later, by name
        uint64_t size;
        uint32_t crc = 0;
        char why[8];
        if (versions && ident_file(p, q->n <= 64 ? 65536 : 8192, &size, &crc, why, sizeof why) == 0) cache_hash_u64(&h, crc);
        free(real);
        cache_hash_u64(&h, (uint64_t)q->inputs[i].kind << 8 | q->inputs[i].comp);
    }
    snprintf(out, len, "tok-%016llx%016llx", (unsigned long long)h.a, (unsigned long long)h.b);
}

char *cache_default_root(void) {
    const char *env = getenv("FSDPC_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env && env[0]) return path_dup(env);
    if (xdg && xdg[0]) return path_join(xdg, "fsdpc");
    return path_join(home && home[0] ? home : ".", ".cache/fsdpc");
}

// part i's file with extension ext ("bin": the tokens, "txt": its record, "idx": the document
// index, "lab": finetuning labels): heap
static char *cache_file(const char *dir, int i, const char *ext) { return path_fmt("%s/part-%06d.%s", dir, i, ext); }

char *cache_part_path(const char *dir, int i) { return cache_file(dir, i, "bin"); }

typedef struct {
    uint64_t bytes_total, bytes_done;  // this rank's inputs
    uint64_t tokens;
    double t_start, t_drawn;
} CacheProgress;

// done_now bytes of the current input read and part_tokens of its tokens written
static void cache_progress(CacheProgress *g, uint64_t done_now, uint64_t part_tokens, int force) {
    if (comm_info.rank != 0) return;
    double now = clock_now_s();
    if (!force && now - g->t_drawn < CACHE_PROGRESS_PERIOD) return;
    g->t_drawn = now;
    double mb = (double)(g->bytes_done + done_now) / 1e6, dt = now - g->t_start;
    log_msg("data cache: %.0f%% of rank 0's %.1f MB read, %.0f MB/s, %llu tokens so far%s\n",
            g->bytes_total ? 100.0 * (double)(g->bytes_done + done_now) / (double)g->bytes_total : 100.0, (double)g->bytes_total / 1e6,
            dt > 0 ? mb / dt : 0.0, (unsigned long long)(g->tokens + part_tokens), comm_info.world > 1 ? " (each rank builds its share)" : "");
}

// ---- one part ----

typedef struct {
    ShardsSink sink;
    ShardFile bin, idx, lab;  // the tokens; the rows' first tokens, then the end; labels (finetuning rows)
    CacheProgress *g;
} CachePart;

// One row: its tokens to the shard, its start to the index, a finetuning row's labels beside.
static int cache_row(ShardsSink *sink, const Buf *tokens, const SftRow *sft, uint64_t index, char *err, size_t errlen) {
    CachePart *p = (CachePart *)sink;
    uint64_t start = p->bin.count;
    if (shards_file_write(&p->idx, &start, 1, err, errlen) || shards_file_write(&p->bin, tokens->data, tokens->len / (size_t)sink->width, err, errlen))
        return -1;
    for (size_t i = 0; sft && i < sft->len; i++) {
        uint32_t y = sft->labels[i] < 0 ? UINT32_MAX : (uint32_t)sft->labels[i];
        uint8_t b[4] = {(uint8_t)y, (uint8_t)(y >> 8), (uint8_t)(y >> 16), (uint8_t)(y >> 24)};
        if (shards_file_write(&p->lab, b, 1, err, errlen)) return -1;
    }
    return 0;
}

static void cache_part_progress(ShardsSink *sink, uint64_t bytes_read) {
    CachePart *p = (CachePart *)sink;
    cache_progress(p->g, bytes_read, p->bin.count, 0);
}

static int cache_write_part(const CacheRequest *q, int i, const char *path, const char *stats, const char *ipath, const char *lpath,
                            const char *id, CacheProgress *g, char *err, size_t errlen);

// Builds part i into folder dir: each file under writer id's temporary name first, renamed once complete.
static int cache_build_part(const CacheRequest *q, int i, const char *dir, const char *id, CacheProgress *g, char *err, size_t errlen) {
    char *path = cache_file(dir, i, "bin"), *stats = cache_file(dir, i, "txt"), *ipath = cache_file(dir, i, "idx"),
         *lpath = cache_file(dir, i, "lab");
    int rc = cache_write_part(q, i, path, stats, ipath, lpath, id, g, err, errlen);
    free(path), free(stats), free(ipath), free(lpath);
    return rc;
}

// cache_build_part's work, into the files path (tokens), stats (its record), ipath (the document
// index) and lpath (labels)
static int cache_write_part(const CacheRequest *q, int i, const char *path, const char *stats, const char *ipath, const char *lpath,
                            const char *id, CacheProgress *g, char *err, size_t errlen) {
    const CacheInput *in = &q->inputs[i];
    // rows (finetuning formats) or documents: as --data_format says, or as the file's fields say
    RowsOptions o = {.sft = {.format = q->format, .tmpl = q->tmpl, .tok = q->tok, .train_on_inputs = q->train_on_inputs, .vocab = q->vocab},
                     .text_column = q->text_column, .explicit_column = q->explicit_column};
    RowsReader *r = rows_open(in->path, in->kind, in->comp, &o, err, errlen);
    if (!r) return -1;
    char range[64];
    snprintf(range, sizeof range, "the vocabulary [0, %d)", q->vocab);
    CachePart p = {.sink = {.width = cache_width(q->vocab), .tok = q->tok, .id_limit = q->vocab, .id_range = range, .stop = q->stop,
                            .row = cache_row, .progress = cache_part_progress},
                   .g = g};
    uint64_t rows = 0;
    int rc = shards_file_open(&p.bin, path, id, p.sink.width, 0, err, errlen);
    if (!rc) rc = shards_file_open(&p.idx, ipath, id, 8, 0, err, errlen);
    if (!rc && rows_labeled(r)) rc = shards_file_open(&p.lab, lpath, id, 4, 0, err, errlen);
    if (!rc) rc = shards_build(r, in->path, &p.sink, &rows, err, errlen);
    uint64_t tokens = p.bin.count;
    if (!rc) rc = shards_file_write(&p.idx, &tokens, 1, err, errlen);
    ShardFile *files[] = {&p.bin, &p.idx, &p.lab};
    for (size_t k = 0; k < 3; k++)
        if (shards_file_is_open(files[k])) rc = shards_file_close(files[k], rc, err, errlen);
    if (!rc) {
        char fields[DOCS_FIELDS_MAX * 260];
        docs_fields_save(rows_fields(r), fields, sizeof fields);
        FILE *s = fopen(stats, "w");
        if (!s || fprintf(s, "%llu %llu %llu\n%s\n%s\n", (unsigned long long)rows, (unsigned long long)rows_nulls(r),
                          (unsigned long long)tokens, rows_describe(r), fields) < 0 || fclose(s) != 0)
            rc = err_set(err, errlen, "cannot write the data cache file '%s': %s", stats, strerror(errno));
    }
    if (rc) unlink(path), unlink(ipath), unlink(lpath);  // a part is whole or absent
    g->tokens += tokens;
    g->bytes_done += rows_progress(r);
    rows_close(r);
    return rc;
}

// ---- the folder ----

static void cache_remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *path = path_join(dir, e->d_name);
            unlink(path);
            free(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

// A finished folder in use: each process reading it holds a shared lock on its "complete" file
// until it exits, and cache_sweep removes an earlier version only under an exclusive one, so a
// run still reading that version (on another node of a shared file system, where a file removed
// under an open descriptor is gone) keeps it. flock() reaches NFS as a byte-range lock.
static char *cache_complete_path(const char *dir) { return path_join(dir, "complete"); }

static void cache_hold(const char *dir) {
    char *path = cache_complete_path(dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_SH) != 0) close(fd);  // without locks (a file system that has none) it is not held
    free(path);  // the descriptor stays open, and the lock held, until the process ends
}

// Rank 0, cache_sweep: 1 with the folder's "complete" file locked exclusively into *fd (no run reads
// it), 0 while a run holds it; a folder without one (an older build) is nobody's
static int cache_unheld(const char *dir, int *fd) {
    char *path = cache_complete_path(dir);
    // NFS turns flock() into a byte-range lock, whose exclusive kind needs a file open for writing
    *fd = open(path, O_RDWR | O_CLOEXEC);
    if (*fd < 0 && errno == EACCES) *fd = open(path, O_RDONLY | O_CLOEXEC);
    int gone = *fd < 0 && errno == ENOENT;
    free(path);
    if (gone || (*fd >= 0 && flock(*fd, LOCK_EX | LOCK_NB) == 0)) return 1;
    // only a file system without locks proves nobody reads it; any other failure keeps the folder
    int unlockable = *fd >= 0 && (errno == ENOLCK || errno == ENOSYS || errno == EOPNOTSUPP);
    if (!unlockable && *fd >= 0) close(*fd), *fd = -1;
    return unlockable;
}

static int cache_complete(const char *dir) {
    char *path = cache_complete_path(dir);
    int ok = access(path, R_OK) == 0;
    free(path);
    return ok;
}

// Builds the parts i with i % stride == first into tmp; on rank 0 writes "complete" after all are in.
static int cache_build(const CacheRequest *q, const char *tmp, const char *id, int first, int stride, char *err, size_t errlen) {
    CacheProgress g = {.t_start = clock_now_s()};
    g.t_drawn = g.t_start;
    for (int i = first; i < q->n; i += stride) {
        struct stat st;
        if (stat(q->inputs[i].path, &st) == 0) g.bytes_total += (uint64_t)st.st_size;
    }
    for (int i = first; i < q->n; i += stride) {
        int rc = cache_build_part(q, i, tmp, id, &g, err, errlen);
        if (rc) return rc;
    }
    cache_progress(&g, 0, 0, 1);
    return 0;
}

static int cache_seal(const char *tmp, const char *dir, char *err, size_t errlen) {
    char *path = cache_complete_path(tmp);
    FILE *f = fopen(path, "w");
    int bad = !f || fprintf(f, "fsdpc data cache %d\n", CACHE_VERSION) < 0 || fclose(f) != 0;
    if (bad) snprintf(err, errlen, "cannot write '%s': %s", path_show(path), comm_path_error(path, errno));
    free(path);
    if (bad) {
        cache_remove_tree(tmp);
        return -1;
    }
    if (rename(tmp, dir) == 0) return 0;
    if (errno == EEXIST || errno == ENOTEMPTY) {  // another run built the same cache meanwhile: its copy is as good
        cache_remove_tree(tmp);
        return 0;
    }
    snprintf(err, errlen, "cannot rename '%s' to '%s': %s", path_show(tmp), path_show(dir), strerror(errno));
    cache_remove_tree(tmp);
    return -1;
}

// Rank 0: one line for the whole source, from the parts' records, and one warning for the fields
// its rows hold that were not read.
static void cache_log(const CacheRequest *q, const char *dir, int built, double seconds) {
    if (comm_info.rank != 0) return;
    unsigned long long rows = 0, nulls = 0, tokens = 0;
    char formats[512] = "";
    DocsFields fields = {0};
    for (int i = 0; i < q->n; i++) {
        char what[256] = "", line[DOCS_FIELDS_MAX * 260], *path = cache_file(dir, i, "txt");
        unsigned long long r = 0, nu = 0, t = 0;
        FILE *f = path_fopen_read(path);
        free(path);
        if (f) {
            if (fscanf(f, "%llu %llu %llu\n", &r, &nu, &t) != 3 || !fgets(what, sizeof what, f)) what[0] = 0;
            if (what[0] && fgets(line, sizeof line, f)) docs_fields_parse(&fields, line);
            fclose(f);
        }
        what[strcspn(what, "\n")] = 0;
        rows += r, nulls += nu, tokens += t;
        if (what[0] && !strstr(formats, what) && strlen(formats) + strlen(what) + 3 < sizeof formats)
            snprintf(formats + strlen(formats), sizeof formats - strlen(formats), "%s%s", formats[0] ? "; " : "", what);
    }
    char took[64] = "";
    if (built) snprintf(took, sizeof took, ", built in %.3f s", seconds);
    log_msg("%s: %d file%s, %s: %llu rows (%llu null, skipped), %llu tokens (data cache %s%s)\n", q->label, q->n,
            q->n == 1 ? "" : "s", formats, rows, nulls, tokens, dir, took);
    char warn[DOCS_FIELDS_MAX * 200 + 1000];
    if (docs_fields_warning(&fields, q->label, "read only in another row format (see --data_format)", warn, sizeof warn)) log_msg("%s\n", warn);
}

// Rank 0, after building or finding the cache `key` in root: what the cache's own builds left
// there goes. A build folder (<key>.<writer id>.tmp) whose writer provably ended (a killed build:
// the lock's process is gone on this host, or the lock was never written and the folder is a
// minute old), and a finished folder of the same source (the same inputs and settings: cache_key
// without the inputs' versions) built before the inputs changed, unless a run still reads it.
static void cache_sweep(const char *root, const char *key, const char *source) {
    DIR *d = opendir(root);
    if (!d) return;
    char theirs[64];
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "tok-", 4) || !strcmp(e->d_name, key)) continue;
        size_t n = strlen(root) + strlen(e->d_name) + 2;
        char *path = mallocCheck(n), *lock = NULL, *src = NULL;
        snprintf(path, n, "%s/%s", root, e->d_name);
        struct stat st;
        const char *why = NULL;
        if (wlock_is_tmp(e->d_name, NULL)) {
            lock = wlock_path(path, 1);
            int ended = wlock_ended(lock);
            // the folder's age by the wall clock, as its mtime is (clock_now_s is time since boot)
            if (ended > 0 || (ended < 0 && stat(path, &st) == 0 && difftime(time(NULL), st.st_mtime) > 60))
                why = "left by an interrupted data cache build";
        } else if (strlen(e->d_name) == strlen(key)) {
            src = mallocCheck(n + 8);
            snprintf(src, n + 8, "%s/source", path);
            FILE *f = path_fopen_read(src);
            if (f && fgets(theirs, sizeof theirs, f) && !strcmp(theirs, source)) why = "built from an earlier version of the same inputs";
            if (f) fclose(f);
        }
        int held = -1;
        if (why && src && !cache_unheld(path, &held))
            log_msg("Kept the data cache folder %s, %s: another run may still read it (a later run removes it)\n", path, why), why = NULL;
        if (why) cache_remove_tree(path), log_msg("Removed the data cache folder %s, %s\n", path, why);
        if (held >= 0) close(held);
        free(path);
        free(lock);
        free(src);
    }
    closedir(d);
}

// Rank 0: the source key into the build folder, for cache_sweep; 0, or -1 with the line in err.
static int cache_write_source(const char *tmp, const char *source, char *err, size_t errlen) {
    size_t n = strlen(tmp) + 8;
    char *path = mallocCheck(n);
    snprintf(path, n, "%s/source", tmp);
    FILE *f = fopen(path, "w");
    int rc = !f || fputs(source, f) < 0 || fclose(f) != 0 ? err_set(err, errlen, "cannot write '%s': %s", path_show(path), comm_path_error(path, errno)) : 0;
    if (f && rc) fclose(f);
    free(path);
    return rc;
}

// A build folder for this process (writer id into id): <dir>.<id>.tmp (heap), made and locked
// (base/wlock.h) so that cache_sweep leaves it alone while the build runs. NULL with err set.
static char *cache_begin(const char *root, const char *dir, char id[WLOCK_ID_LEN + 1], char **lock, char *err, size_t errlen) {
    wlock_new_id(id);
    char *tmp = wlock_tmp_name(dir, id);
    const char *locked = NULL;
    if (path_mkdirs(root, err, errlen)) snprintf(err + strlen(err), errlen - strlen(err), " (--data_cache_dir)");
    else if (mkdir(tmp, 0777) != 0) err_set(err, errlen, "cannot create the data cache folder '%s': %s (--data_cache_dir)", path_show(tmp), strerror(errno));
    else if (!(*lock = io_lock_output(tmp, 1, id, "--data_cache_dir", "a data cache", &locked))) err_set(err, errlen, "%s", locked);
    else return tmp;
    if (locked) rmdir(tmp);
    free(tmp);
    return NULL;
}

// The build folder's end: its lock released (before its removal or rename) and the path freed.
static void cache_end(char *tmp, char *lock, const char *id) {
    io_unlock_output(lock, id);
    free(tmp);
}

static int cache_find_or_build(const CacheRequest *q, const char *root, const char *key, const char *dir, char *line, size_t linelen);

int cache_ensure(const CacheRequest *q, char **dir, char *line, size_t linelen) {
    char key[64];
    char *root = q->root && q->root[0] ? path_dup(q->root) : cache_default_root();
    cache_key(q, 1, key, sizeof key);
    *dir = path_join(root, key);
    int rc = cache_find_or_build(q, root, key, *dir, line, linelen);
    free(root);
    if (rc) free(*dir), *dir = NULL;
    return rc;
}

// cache_ensure's work, for the cache key in root (its folder dir)
static int cache_find_or_build(const CacheRequest *q, const char *root, const char *key, const char *dir, char *line, size_t linelen) {
    char source[64], id[WLOCK_ID_LEN + 1] = "", err[16384] = "";
    cache_key(q, 0, source, sizeof source);
    // the folder must be one fsdpc built here: a link (to another source's cache, say) is refused
    struct stat lst;
    if (lstat(dir, &lst) == 0 && !S_ISDIR(lst.st_mode))
        snprintf(err, sizeof err, "the data cache folder '%s' is %s, not a folder fsdpc built there: remove it (fsdpc builds it "
                 "again)", path_show(dir), S_ISLNK(lst.st_mode) ? "a symbolic link" : "not a folder");
    if (comm_agree(err[0] ? err : NULL, line, linelen)) return -1;
    CommGroup *world = comm_world();
    double lacking = !cache_complete(dir);
    comm_allreduce_max_f64(world, &lacking, 1);
    if (!lacking) {
        cache_hold(dir);
        if (comm_info.rank == 0) cache_sweep(root, key, source);  // what a build left while another run held it
        return cache_log(q, dir, 0, 0), 0;
    }
    double t0 = clock_now_s();
    // rank 0 makes the build folder; when every rank sees it (shared storage) each builds its share
    char *tmp = NULL, *lock = NULL;
    if (comm_info.rank == 0 && (tmp = cache_begin(root, dir, id, &lock, err, sizeof err)) && cache_write_source(tmp, source, err, sizeof err))
        cache_remove_tree(tmp);
    if (comm_agree(err[0] ? err : NULL, line, linelen)) return cache_end(tmp, lock, id), -1;
    comm_bcast_bytes(world, id, sizeof id, 0);  // the build's writer id: its files' temporary names
    size_t tlen = comm_info.rank == 0 ? strlen(tmp) + 1 : 0;
    comm_bcast_bytes(world, &tlen, sizeof tlen, 0);
    if (comm_info.rank != 0) tmp = mallocCheck(tlen);
    comm_bcast_bytes(world, tmp, tlen, 0);
    struct stat st;
    double unseen = !(stat(tmp, &st) == 0 && S_ISDIR(st.st_mode));
    comm_allreduce_max_f64(world, &unseen, 1);
    int rc = 0;
    if (!unseen) {
        rc = cache_build(q, tmp, id, comm_info.rank, comm_info.world, err, sizeof err);
    } else {
        // node-local storage: each rank that lacks the cache builds all of it in its own folder
        if (comm_info.rank == 0) io_unlock_output(lock, id), lock = NULL, cache_remove_tree(tmp);
        free(tmp);
        tmp = NULL;
        if (!cache_complete(dir)) {
            tmp = cache_begin(root, dir, id, &lock, err, sizeof err);
            rc = tmp ? cache_write_source(tmp, source, err, sizeof err) : -1;
            if (!rc) rc = cache_build(q, tmp, id, 0, 1, err, sizeof err);
            io_unlock_output(lock, id), lock = NULL;
            if (!rc) rc = cache_seal(tmp, dir, err, sizeof err);
        }
    }
    // a signal anywhere stops every rank; else an error anywhere fails them all with its line
    double stopped = rc == SHARDS_STOPPED;
    comm_allreduce_max_f64(world, &stopped, 1);
    int failed = stopped ? 0 : comm_agree(rc ? err : NULL, line, linelen);
    if (stopped || failed) {
        if (tmp && (unseen || comm_info.rank == 0)) io_unlock_output(lock, id), lock = NULL, cache_remove_tree(tmp);
        comm_barrier(world);  // the folder is gone before any rank leaves
        cache_end(tmp, lock, id);
        return failed ? -1 : 1;
    }
    if (!unseen && comm_info.rank == 0) io_unlock_output(lock, id), lock = NULL, rc = cache_seal(tmp, dir, err, sizeof err);
    cache_end(tmp, lock, id);
    if (comm_agree(rc ? err : NULL, line, linelen)) return -1;
    cache_hold(dir);
    if (comm_info.rank == 0) cache_sweep(root, key, source);
    cache_log(q, dir, 1, clock_now_s() - t0);
    return 0;
}
