// source: a spec becomes a table of splits (name -> files), chosen from by one rule for every
// kind of source; names and layouts follow datasets' and huggingface_hub's own conventions.
#include "source.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../base/buf.h"
#include "../../base/path.h"
#include "../../base/err.h"
#include "../../comm/comm.h"
#include "hub.h"
#include "../../base/json.h"

#define HF_MAX_FILES (1 << 22)  // a walk of a larger tree is refused, not exhausted
#define HF_MAX_DEPTH 16
#define HF_JSON_MAX ((size_t)64 << 20)  // state.json lists one small object per shard

typedef struct {
    char **v;
    int n;
    size_t cap;
} StrList;

static void sl_push(StrList *l, char *s) {
    buf_fit(l->v, &l->cap, (size_t)l->n + 1);
    l->v[l->n++] = s;
}

static void sl_free(StrList *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static void sl_sort(StrList *l) {
    if (l->n) qsort(l->v, (size_t)l->n, sizeof *l->v, cmp_str);
}

// "a, b, c" into out (truncated with "...")
static void join_names(char *const *v, int n, char *out, size_t len) {
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < n && at + 1 < len; i++) {
        int w = snprintf(out + at, len - at, "%s%s", i ? ", " : "", v[i]);
        if (w < 0 || (size_t)w >= len - at) {
            if (len > 4) strcpy(out + len - 4, "...");
            break;
        }
        at += (size_t)w;
    }
}

typedef struct {
    char *name;
    StrList files;
} SourceSplit;

typedef struct {
    SourceSplit *v;
    int n;
    size_t cap;
    int nosplits;  // a source with no split structure: all of it is "train"
    int ordered;   // the files are in the dataset's order (state.json's); else they are sorted
} SourceSplits;

static SourceSplit *splits_at(SourceSplits *ss, const char *name) {
    for (int i = 0; i < ss->n; i++)
        if (!strcmp(ss->v[i].name, name)) return &ss->v[i];
    buf_fit(ss->v, &ss->cap, (size_t)ss->n + 1);
    SourceSplit *sp = &ss->v[ss->n++];
    memset(sp, 0, sizeof *sp);
    sp->name = path_fmt("%s", name);
    return sp;
}

static void splits_free(SourceSplits *ss) {
    for (int i = 0; i < ss->n; i++) {
        free(ss->v[i].name);
        sl_free(&ss->v[i].files);
    }
    free(ss->v);
    memset(ss, 0, sizeof *ss);
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

// Folder entries, sorted; hidden ones ("."-prefixed: .cache, .git, .locks) left out.
static int list_entries(const char *dir, StrList *out, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return err_set(err, errlen, "cannot read folder '%s': %s", dir, strerror(errno));
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') sl_push(out, path_fmt("%s", e->d_name));
    closedir(d);
    sl_sort(out);
    return 0;
}

// Never data in any folder: partial writes, locks, and datasets' .map() caches.
static int skipped_name(const char *name) {
    return path_ends_with(name, ".tmp") || path_ends_with(name, ".lock") || path_ends_with(name, ".incomplete") ||
           (!strncmp(name, "cache-", 6) && path_ends_with(name, ".arrow"));
}

// A data file of a repository (as datasets would load one): a data format's extension, maybe
// compressed, and not one of datasets' metadata files.
static int repo_data_name(const char *name) {
    static const char *const meta[] = {"dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json", "config.json"};
    static const char *const packed[] = {".gz", ".bz2", ".xz", ".zst", ".zstd", ".lz4"};
    static const char *const exts[] = {".parquet", ".arrow", ".jsonl", ".json", ".ndjson", ".txt", ".text",
                                       ".csv", ".tsv", ".bin", ".h5", ".hdf5"};
    if (skipped_name(name)) return 0;
    for (size_t i = 0; i < sizeof meta / sizeof *meta; i++)
        if (!strcmp(name, meta[i])) return 0;
    char stem[512];
    snprintf(stem, sizeof stem, "%s", name);
    for (size_t i = 0; i < sizeof packed / sizeof *packed; i++)
        if (strlen(stem) > strlen(packed[i]) && !strcasecmp(stem + strlen(stem) - strlen(packed[i]), packed[i])) {
            stem[strlen(stem) - strlen(packed[i])] = 0;
            break;
        }
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++) {
        size_t n = strlen(stem), m = strlen(exts[i]);
        if (n > m && !strcasecmp(stem + n - m, exts[i])) return 1;
    }
    return 0;
}

// Files under root/rel (paths relative to root), not following symlinked folders.
static int walk(const char *root, const char *rel, int depth, StrList *out, char *err, size_t errlen) {
    char *dir = rel[0] ? path_fmt("%s/%s", root, rel) : path_fmt("%s", root);
    StrList names = {0};
    int rc = list_entries(dir, &names, err, errlen);
    for (int i = 0; !rc && i < names.n; i++) {
        char *path = path_fmt("%s/%s", dir, names.v[i]);
        char *r = rel[0] ? path_fmt("%s/%s", rel, names.v[i]) : path_fmt("%s", names.v[i]);
        struct stat st, target;
        if (lstat(path, &st) != 0) free(r);  // gone meanwhile
        else if (S_ISDIR(st.st_mode)) {
            if (depth >= HF_MAX_DEPTH) rc = err_set(err, errlen, "'%s' nests folders more than %d deep", root, HF_MAX_DEPTH);
            else rc = walk(root, r, depth + 1, out, err, errlen);
            free(r);
        } else if (S_ISLNK(st.st_mode) && stat(path, &target) == 0 && S_ISDIR(target.st_mode)) {
            free(r);  // a symlinked folder may loop back
        } else if (out->n >= HF_MAX_FILES) {
            rc = err_set(err, errlen, "'%s' holds more than %d files", root, HF_MAX_FILES);
            free(r);
        } else sl_push(out, r);
        free(path);
    }
    sl_free(&names);
    free(dir);
    return rc;
}

// Every chosen file must be there: a hub snapshot's symlink whose blob is missing is named.
static int check_files(const StrList *files, char *err, size_t errlen) {
    for (int i = 0; i < files->n; i++) {
        struct stat st;
        const char *p = files->v[i];
        if (stat(p, &st) == 0) continue;
        char target[1024];
        ssize_t n = lstat(p, &st) == 0 && S_ISLNK(st.st_mode) ? readlink(p, target, sizeof target - 1) : -1;
        if (n >= 0) {
            target[n] = 0;
            return err_set(err, errlen, "'%s' is a dangling symlink (to '%s', which is missing: an interrupted download or "
                               "a pruned cache?); fetch the dataset again", p, target);
        }
        return err_set(err, errlen, "cannot read data file '%s': %s", p, strerror(errno));
    }
    return 0;
}

typedef struct {
    dev_t dev;
    ino_t ino;
    int at;  // its index in the paths
} FileIdentity;

static int identity_cmp(const void *a, const void *b) {
    const FileIdentity *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return x->at - y->at;
}

// a hub cache's content-named blob, which every snapshot file of the same bytes links to
static int hub_blob(const char *path) {
    char *real = realpath(path, NULL);
    int blob = real && strstr(real, "/datasets--") && strstr(real, "/blobs/");
    free(real);
    return blob;
}

int source_find_repeat(const char *const *paths, int n, int *a, int *b) {
    FileIdentity *id = mallocCheck(((size_t)n + 1) * sizeof *id);
    int k = 0, found = 0;
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(paths[i], &st) == 0) id[k++] = (FileIdentity){st.st_dev, st.st_ino, i};
    }
    qsort(id, (size_t)k, sizeof *id, identity_cmp);
    for (int i = 1; i < k && !found; i++)
        if (id[i].dev == id[i - 1].dev && id[i].ino == id[i - 1].ino && !(hub_blob(paths[id[i - 1].at]) && hub_blob(paths[id[i].at])))
            found = 1, *a = id[i - 1].at, *b = id[i].at;
    free(id);
    return found;
}

// --- split names -------------------------------------------------------------------------

static const char *const TRAIN_WORDS[] = {"train", "training", NULL};
static const char *const VALIDATION_WORDS[] = {"validation", "valid", "dev", "val", NULL};
static const char *const TEST_WORDS[] = {"test", "testing", "eval", "evaluation", NULL};
static const struct {
    const char *split;
    const char *const *words;
} DEFAULT_SPLITS[] = {{"train", TRAIN_WORDS}, {"validation", VALIDATION_WORDS}, {"test", TEST_WORDS}};
#define NDEFAULT_SPLITS 3
// what "validation" takes when a dataset has no split of that name, in order
static const char *const VALIDATION_STANDINS[] = {"validation", "valid", "val", "dev", "test"};

static int is_sep(char c) { return c == '-' || c == '.' || c == '_' || c == ' ' || (c >= '0' && c <= '9'); }

// `word` in s[0, n) as datasets' patterns find split keywords: at the start or after one of
// "-._ 0-9", and followed by one of them; a folder name may also end with it.
static int has_word(const char *s, size_t n, const char *word, int folder) {
    size_t k = strlen(word);
    for (size_t i = 0; i + k <= n; i++) {
        if (strncmp(s + i, word, k) || (i && !is_sep(s[i - 1]))) continue;
        if (i + k < n ? is_sep(s[i + k]) : folder) return 1;
    }
    return 0;
}

// The default split (index into DEFAULT_SPLITS) a name carries, or -1.
static int word_split(const char *s, size_t n, int folder) {
    for (int d = 0; d < NDEFAULT_SPLITS; d++)
        for (const char *const *w = DEFAULT_SPLITS[d].words; *w; w++)
            if (has_word(s, n, *w, folder)) return d;
    return -1;
}

// Split named by the folders of a relative path (the first that names one), or -1.
static int folder_split(const char *rel) {
    for (const char *c = rel, *slash; (slash = strchr(c, '/')); c = slash + 1) {
        int d = word_split(c, (size_t)(slash - c), 1);
        if (d >= 0) return d;
    }
    return -1;
}

static int file_split(const char *rel) {
    const char *b = base_name(rel);
    return word_split(b, strlen(b), 0);
}

static int split_chars_ok(const char *s, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '_' || s[i] == '.' || (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
            return 0;
    return 1;
}

// "-NNNNN-of-NNNNN" at s (datasets' and push_to_hub's shard numbering); stops at s's end
static int shard_suffix_at(const char *s) {
    static const char form[] = "-#####-of-#####";  // '#': a digit
    for (int i = 0; form[i]; i++)
        if (form[i] == '#' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != form[i]) return 0;
    return 1;
}

// datasets' sharded layout, [data/]SPLIT-NNNNN-of-NNNNN*.*: the split into out, or 0.
static int sharded_split(const char *rel, char *out, size_t len) {
    const char *b = base_name(rel);
    if (b != rel && !(b - rel == 5 && !strncmp(rel, "data/", 5))) return 0;
    const char *dash = strchr(b, '-');
    if (!dash || !shard_suffix_at(dash) || !strchr(dash + 15, '.') || !split_chars_ok(b, (size_t)(dash - b))) return 0;
    snprintf(out, len, "%.*s", (int)(dash - b), b);
    return 1;
}

// datasets' cache files, PREFIX-SPLIT.arrow or PREFIX-SPLIT-NNNNN-of-NNNNN.arrow (or .parquet).
static int cache_split(const char *name, char *out, size_t len) {
    if (skipped_name(name)) return 0;
    size_t n = strlen(name);
    if (path_ends_with(name, ".arrow")) n -= 6;
    else if (path_ends_with(name, ".parquet")) n -= 8;
    else return 0;
    if (n > 15 && shard_suffix_at(name + n - 15)) n -= 15;
    const char *dash = NULL;
    for (size_t i = 0; i < n; i++)
        if (name[i] == '-') dash = name + i;
    if (!dash || dash == name || !split_chars_ok(dash + 1, (size_t)(name + n - dash - 1))) return 0;
    snprintf(out, len, "%.*s", (int)(name + n - dash - 1), dash + 1);
    return 1;
}

// Index of the split `split` asks for among names, or -1.
static int pick_split(char *const *names, int n, const char *split) {
    int validation = !strcmp(split, "validation");
    int nwant = validation ? (int)(sizeof VALIDATION_STANDINS / sizeof *VALIDATION_STANDINS) : 1;
    for (int w = 0; w < nwant; w++)
        for (int i = 0; i < n; i++)
            if (!strcmp(names[i], validation ? VALIDATION_STANDINS[w] : split)) return i;
    return -1;
}

// The chosen split's files into out (ownership moves), or 0 / -1 as source_resolve says.
static int finish(SourceSplits *ss, const char *split, const char *src, SourceFiles *out, char *err, size_t errlen) {
    if (!ss->n) return err_set(err, errlen, "%s holds no data files", src);
    char *names[64];
    int nn = ss->n < 64 ? ss->n : 64;
    for (int i = 0; i < nn; i++) names[i] = ss->v[i].name;
    int k = pick_split(names, nn, split);
    if (k < 0) {
        if (strcmp(split, "train")) return 0;
        char list[400];
        join_names(names, nn, list, sizeof list);
        return err_set(err, errlen, "%s has no train split (its splits: %s)", src, list);
    }
    SourceSplit *sp = &ss->v[k];
    if (!ss->ordered) sl_sort(&sp->files);
    if (check_files(&sp->files, err, errlen)) return -1;
    int a, b;
    if (source_find_repeat((const char *const *)sp->files.v, sp->files.n, &a, &b))
        return err_set(err, errlen, "%s reaches one file twice, as '%s' and as '%s' (a link): it would be read twice, each epoch "
                       "training on it twice; remove the link, or name the files to read", src, sp->files.v[a], sp->files.v[b]);
    out->files = sp->files.v;
    out->nfiles = sp->files.n;
    memset(&sp->files, 0, sizeof sp->files);
    snprintf(out->split, sizeof out->split, "%s", sp->name);
    char which[128] = "";
    if (!ss->nosplits)
        snprintf(which, sizeof which, " split %s%s", sp->name, strcmp(sp->name, split) ? " (for validation)" : "");
    snprintf(out->desc, sizeof out->desc, "%s%s (%d file%s)", src, which, out->nfiles, out->nfiles == 1 ? "" : "s");
    return 1;
}

// Sources without configs take none but "default".
static int no_configs(const char *config, const char *src, char *err, size_t errlen) {
    if (config && *config && strcmp(config, "default"))
        return err_set(err, errlen, "%s has no configs; config '%s' does not apply to it", src, config);
    return 0;
}

// --- datasets' save_to_disk and DatasetDict folders --------------------------------------

// A plain file name: no folder part, not "." or "..", no NUL inside.
static int plain_name(const JsonValue *v) {
    return v && v->type == JSON_STRING && v->len && strlen(v->str) == v->len && !strchr(v->str, '/') && strcmp(v->str, ".") &&
           strcmp(v->str, "..");
}

// state.json's _data_files, in order, as paths under dir.
static int load_state(const char *dir, StrList *files, char *err, size_t errlen) {
    char *path = path_fmt("%s/state.json", dir), why[600];
    JsonValue *v = json_parse_file(path, HF_JSON_MAX, why, sizeof why);
    int rc = 0;
    const JsonValue *df = v ? json_get(v, "_data_files") : NULL, *idx = v ? json_get(v, "_indices_data_files") : NULL;
    if (!v) rc = err_set(err, errlen, "save_to_disk folder '%s': %s", dir, why);
    else if (!df || df->type != JSON_ARRAY)
        rc = err_set(err, errlen, "'%s' has no _data_files list (not written by datasets' save_to_disk?)", path);
    else if (idx && idx->type == JSON_ARRAY && idx->len)
        rc = err_set(err, errlen, "save_to_disk folder '%s' holds an indices mapping (a select/shuffle/filter view of "
                         "its data): save a flat copy with dataset.flatten_indices().save_to_disk(...)", dir);
    else if (!df->len) rc = err_set(err, errlen, "'%s' lists no data files", path);
    for (size_t i = 0; !rc && i < df->len; i++) {
        const JsonValue *name = json_get(&df->items[i], "filename");
        if (!plain_name(name))
            rc = err_set(err, errlen, "'%s': _data_files[%zu] is not a file name in its folder", path, i);
        else sl_push(files, path_fmt("%s/%s", dir, name->str));
    }
    json_free(v);
    free(path);
    return rc;
}

static int save_to_disk_resolve(const char *dir, const char *config, const char *split, SourceFiles *out, char *err, size_t errlen) {
    SourceSplits ss = {0};
    ss.nosplits = ss.ordered = 1;
    char src[1200];
    snprintf(src, sizeof src, "save_to_disk folder '%s'", dir);
    if (no_configs(config, src, err, errlen)) return -1;
    SourceSplit *sp = splits_at(&ss, "train");
    int rc = load_state(dir, &sp->files, err, errlen);
    if (!rc) {
        snprintf(src, sizeof src, "save_to_disk folder '%s' (%d shard%s)", dir, sp->files.n, sp->files.n == 1 ? "" : "s");
        rc = finish(&ss, split, src, out, err, errlen);
    }
    splits_free(&ss);
    return rc;
}

static int dataset_dict_resolve(const char *dir, const char *config, const char *split, SourceFiles *out, char *err, size_t errlen) {
    char *path = path_fmt("%s/dataset_dict.json", dir), why[600], src[1200];
    snprintf(src, sizeof src, "DatasetDict folder '%s'", dir);
    JsonValue *v = json_parse_file(path, HF_JSON_MAX, why, sizeof why);
    const JsonValue *list = v ? json_get(v, "splits") : NULL;
    int rc = no_configs(config, src, err, errlen);
    if (!rc && !v) rc = err_set(err, errlen, "DatasetDict folder '%s': %s", dir, why);
    else if (!rc && (!list || list->type != JSON_ARRAY || !list->len))
        rc = err_set(err, errlen, "'%s' has no \"splits\" list", path);
    char *names[64];
    int n = 0;
    for (size_t i = 0; !rc && i < list->len && n < 64; i++) {
        if (!plain_name(&list->items[i])) rc = err_set(err, errlen, "'%s': splits[%zu] is not a folder name", path, i);
        else names[n++] = (char *)list->items[i].str;
    }
    if (!rc) {
        int k = pick_split(names, n, split);
        if (k < 0 && strcmp(split, "train")) rc = 0;
        else if (k < 0) {
            char all[400];
            join_names(names, n, all, sizeof all);
            rc = err_set(err, errlen, "%s has no train split (its splits: %s)", src, all);
        } else {
            // each split is a save_to_disk folder of its own
            SourceSplits ss = {0};
            ss.ordered = 1;
            SourceSplit *sp = splits_at(&ss, names[k]);
            char *sub = path_fmt("%s/%s", dir, names[k]);
            rc = load_state(sub, &sp->files, err, errlen);
            if (!rc) rc = finish(&ss, split, src, out, err, errlen);
            free(sub);
            splits_free(&ss);
        }
    }
    json_free(v);
    free(path);
    return rc;
}

// --- the load_dataset cache: NS___NAME/CONFIG/VERSION/HASH/NAME-SPLIT*.arrow ------------------

static int visible_dir_name(const char *name) { return name[0] != '.' && !path_ends_with(name, ".incomplete") && !path_ends_with(name, ".lock"); }

// A finished build: its dataset_info.json and at least one split file.
static int is_cache_build(const char *dir) {
    char *info = path_fmt("%s/dataset_info.json", dir);
    int ok = path_is_file(info);
    free(info);
    if (!ok) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    ok = 0;
    char split[128];
    for (struct dirent *e; !ok && (e = readdir(d));) ok = cache_split(e->d_name, split, sizeof split);
    closedir(d);
    return ok;
}

// Sub-folders of dir (sorted), as names; d_type spares a stat per file in folders of many files.
static int sub_dirs(const char *dir, StrList *out, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return err_set(err, errlen, "cannot read folder '%s': %s", dir, strerror(errno));
    for (struct dirent *e; (e = readdir(d));) {
        if (!visible_dir_name(e->d_name) || (e->d_type != DT_DIR && e->d_type != DT_LNK && e->d_type != DT_UNKNOWN)) continue;
        char *sub = path_fmt("%s/%s", dir, e->d_name);
        if (path_is_dir(sub)) sl_push(out, path_fmt("%s", e->d_name));
        free(sub);
    }
    closedir(d);
    sl_sort(out);
    return 0;
}

// How far above a build `dir` sits (0: the HASH folder, 1: VERSION, 2: CONFIG, 3: NS___NAME), or -1.
static int cache_level(const char *dir, int max) {
    if (is_cache_build(dir)) return 0;
    if (!max) return -1;
    StrList subs = {0};
    char ignore[8];
    if (sub_dirs(dir, &subs, ignore, sizeof ignore)) return -1;
    int best = -1;
    for (int i = 0; i < subs.n && best != 1; i++) {
        char *sub = path_fmt("%s/%s", dir, subs.v[i]);
        int l = cache_level(sub, max - 1);
        if (l >= 0 && (best < 0 || l + 1 < best)) best = l + 1;
        free(sub);
    }
    sl_free(&subs);
    return best;
}

// The builds under dir at `level` (1: dir/HASH, 2: dir/VERSION/HASH), as paths.
static void cache_builds(const char *dir, int level, StrList *out) {
    StrList subs = {0};
    char ignore[8];
    if (sub_dirs(dir, &subs, ignore, sizeof ignore)) return;
    for (int i = 0; i < subs.n; i++) {
        char *sub = path_fmt("%s/%s", dir, subs.v[i]);
        if (level == 1 && is_cache_build(sub)) sl_push(out, sub);
        else {
            if (level > 1) cache_builds(sub, level - 1, out);
            free(sub);
        }
    }
    sl_free(&subs);
}

static int cache_resolve(const char *dir, int level, const char *config, const char *split, const char *label, SourceFiles *out,
                         char *err, size_t errlen) {
    char src[1400], cfg[256] = "", how[160] = "";
    char *build = NULL, *chosen = NULL;
    int rc = 0;
    if (level == 3) {  // choose the config: the one named, else "default" or the only one
        StrList cfgs = {0};
        if (sub_dirs(dir, &cfgs, err, errlen)) return -1;
        int k = -1, prefixed = -1, nprefixed = 0;
        const char *want = config && *config ? config : "default";
        for (int i = 0; i < cfgs.n; i++) {
            if (!strcmp(cfgs.v[i], want)) k = i;
            // data_files or other arguments give a config folder WANT-<hash>: taken when it is the only one
            else if (!strncmp(cfgs.v[i], want, strlen(want)) && cfgs.v[i][strlen(want)] == '-') prefixed = i, nprefixed++;
        }
        if (k < 0 && nprefixed == 1) k = prefixed;
        if (k < 0 && !(config && *config) && cfgs.n == 1) k = 0;
        char list[400];
        join_names(cfgs.v, cfgs.n, list, sizeof list);
        if (k < 0 && config && *config)
            rc = err_set(err, errlen, "%s has no config '%s' in the datasets cache (its configs: %s)", label, config, list);
        else if (k < 0)
            rc = err_set(err, errlen, "%s has several configs in the datasets cache (%s): choose one", label, list);
        else {
            snprintf(cfg, sizeof cfg, "%s", cfgs.v[k]);
            chosen = path_fmt("%s/%s", dir, cfgs.v[k]);
        }
        sl_free(&cfgs);
        if (rc) return rc;
        dir = chosen;
        level = 2;
    }
    if (level == 0) build = path_fmt("%s", dir);
    else {  // several builds of one config: the newest, as datasets itself reuses
        StrList builds = {0};
        cache_builds(dir, level, &builds);
        time_t newest = 0;
        for (int i = 0; i < builds.n; i++) {
            struct stat st;
            if (stat(builds.v[i], &st) != 0) continue;
            if (!build || st.st_mtime >= newest) build = builds.v[i], newest = st.st_mtime;
        }
        build = build ? path_fmt("%s", build) : NULL;
        if (builds.n > 1) snprintf(how, sizeof how, ", the newest of %d builds by modification time", builds.n);
        sl_free(&builds);
        if (!build) rc = err_set(err, errlen, "%s: no finished build in the datasets cache folder '%s'", label, dir);
    }
    if (!rc) {
        SourceSplits ss = {0};
        StrList names = {0};
        rc = list_entries(build, &names, err, errlen);
        for (int i = 0; !rc && i < names.n; i++) {
            char sp[128];
            if (cache_split(names.v[i], sp, sizeof sp)) sl_push(&splits_at(&ss, sp)->files, path_fmt("%s/%s", build, names.v[i]));
        }
        sl_free(&names);
        snprintf(src, sizeof src, "%s%s%s (build '%s'%s)", label, cfg[0] ? " config " : "", cfg, build, how);
        if (!rc) rc = finish(&ss, split, src, out, err, errlen);
        splits_free(&ss);
    }
    free(build);
    free(chosen);
    return rc;
}

// --- repository layouts: hub snapshots, hf download --local-dir, folders of folders ---------

static int repo_resolve(const char *root, const char *config, const char *split, const char *label, SourceFiles *out, char *err,
                        size_t errlen) {
    StrList all = {0}, rel = {0}, tops = {0};
    if (walk(root, "", 0, &all, err, errlen)) return sl_free(&all), -1;
    for (int i = 0; i < all.n; i++) {
        if (repo_data_name(base_name(all.v[i]))) sl_push(&rel, all.v[i]);
        else free(all.v[i]);
        all.v[i] = NULL;
    }
    sl_free(&all);
    // configs are top-level folders; "data" is the default config's
    int root_files = 0, split_tops = 0, has_data = 0, has_default = 0;
    for (int i = 0; i < rel.n; i++) {
        const char *slash = strchr(rel.v[i], '/');
        if (!slash) {
            root_files++;
            continue;
        }
        size_t n = (size_t)(slash - rel.v[i]);
        if (tops.n && strlen(tops.v[tops.n - 1]) == n && !strncmp(tops.v[tops.n - 1], rel.v[i], n)) continue;  // sorted walk
        sl_push(&tops, path_fmt("%.*s", (int)n, rel.v[i]));
        if (!strcmp(tops.v[tops.n - 1], "data")) has_data = 1;
        else if (!strcmp(tops.v[tops.n - 1], "default")) has_default = 1;
        else if (word_split(rel.v[i], n, 1) >= 0) split_tops = 1;
    }
    // the folder the config's files are under (NULL: the whole repository), and the config's name
    const char *scope = NULL, *cfg = NULL;
    int rc = 0, data_only = has_data && !root_files;  // push_to_hub: the default config in data/, others in CONFIG/
    char list[400];
    join_names(tops.v, tops.n, list, sizeof list);
    if (config && *config) {
        for (int i = 0; i < tops.n; i++)
            if (!strcmp(tops.v[i], config)) scope = cfg = config;
        if (!scope && !strcmp(config, "default")) {
            scope = data_only ? "data" : NULL;
            cfg = "default";
        } else if (!scope)
            rc = err_set(err, errlen, "%s has no config '%s' (its folders with data: %s)", label, config, tops.n ? list : "none");
    } else if (has_default) scope = cfg = "default";
    else if (data_only) scope = "data", cfg = "default";
    else if (!root_files && !split_tops && tops.n == 1) scope = cfg = tops.v[0];
    else if (!root_files && !split_tops && tops.n > 1)
        rc = err_set(err, errlen, "%s holds several configs (%s): choose one", label, list);
    SourceSplits ss = {0};
    if (!rc) {
        // only the scope's files, relative to it
        size_t sn = scope ? strlen(scope) : 0;
        int kept = 0;
        for (int i = 0; i < rel.n; i++) {
            if (scope && (strncmp(rel.v[i], scope, sn) || rel.v[i][sn] != '/')) free(rel.v[i]);
            else if (scope) {
                memmove(rel.v[i], rel.v[i] + sn + 1, strlen(rel.v[i] + sn + 1) + 1);
                rel.v[kept++] = rel.v[i];
            } else rel.v[kept++] = rel.v[i];
        }
        rel.n = kept;
        // datasets' order of conventions: the sharded layout, then split folders, then split file names
        char name[128];
        int by_shard = 0, by_folder = 0, by_file = 0;
        for (int i = 0; i < rel.n; i++) {
            by_shard |= sharded_split(rel.v[i], name, sizeof name);
            by_folder |= folder_split(rel.v[i]) >= 0;
            by_file |= file_split(rel.v[i]) >= 0;
        }
        for (int i = 0; i < rel.n; i++) {
            int d = by_folder ? folder_split(rel.v[i]) : file_split(rel.v[i]);
            const char *sp = by_shard ? (sharded_split(rel.v[i], name, sizeof name) ? name : NULL)
                             : by_folder || by_file ? (d >= 0 ? DEFAULT_SPLITS[d].split : NULL)
                                                    : "train";
            if (sp) sl_push(&splits_at(&ss, sp)->files, scope ? path_fmt("%s/%s/%s", root, scope, rel.v[i]) : path_fmt("%s/%s", root, rel.v[i]));
        }
        char src[1400];
        snprintf(src, sizeof src, "%s%s%s", label, cfg ? " config " : "", cfg ? cfg : "");
        if (!rel.n)  // what is there may be data by another name: say which names count
            rc = err_set(err, errlen, "%s holds no data files (.parquet, .arrow, .jsonl, .json, .txt, .csv, .tsv, .bin, .h5, "
                             "maybe compressed)", src);
        else rc = finish(&ss, split, src, out, err, errlen);
    }
    splits_free(&ss);
    sl_free(&rel);
    sl_free(&tops);
    return rc;
}

// --- plain folders, globs, files ----------------------------------------------------------

static int plain_resolve(const char *dir, const StrList *files, const char *config, const char *split, SourceFiles *out, char *err,
                         size_t errlen) {
    char src[1200];
    snprintf(src, sizeof src, "folder '%s'", dir);
    if (no_configs(config, src, err, errlen)) return -1;
    // split by file name only when every file names one (prepare's train_* / val_*): else all is train
    int named = files->n > 0;
    for (int i = 0; named && i < files->n; i++) named = file_split(files->v[i]) >= 0;
    SourceSplits ss = {0};
    ss.nosplits = !named;
    for (int i = 0; i < files->n; i++)
        sl_push(&splits_at(&ss, named ? DEFAULT_SPLITS[file_split(files->v[i])].split : "train")->files,
                path_fmt("%s/%s", dir, files->v[i]));
    int rc = finish(&ss, split, src, out, err, errlen);
    splits_free(&ss);
    return rc;
}

static int folder_resolve(const char *dir, const char *config, const char *split, const char *label, int repo, SourceFiles *out,
                          char *err, size_t errlen);

// A repository folder of the hub cache (blobs/, refs/, snapshots/) given as a path: its snapshot.
static int hub_repo_resolve(const char *dir, const char *config, const char *split, SourceFiles *out, char *err, size_t errlen) {
    char snap[4500], label[1200];
    int rc = hub_repo_snapshot(dir, dir, snap, sizeof snap);
    if (rc < 0) return err_set(err, errlen, "hub cache folder %s", snap);
    if (rc == 0) return err_set(err, errlen, "hub cache folder '%s' holds no snapshot", dir);
    snprintf(label, sizeof label, "hub cache folder '%s' revision %.7s", dir, base_name(snap));
    return folder_resolve(snap, config, split, label, 1, out, err, errlen);
}

static int in_hub_snapshot(const char *dir) {
    char real[4096];
    return realpath(dir, real) && strstr(real, "/datasets--") && strstr(real, "/snapshots/");
}

// A folder: whichever of datasets' layouts it is, else a repository layout, else its files.
static int folder_resolve(const char *dir, const char *config, const char *split, const char *label, int repo, SourceFiles *out,
                          char *err, size_t errlen) {
    char *p = path_fmt("%s/dataset_dict.json", dir);
    int dd = path_is_file(p);
    free(p);
    if (dd) return dataset_dict_resolve(dir, config, split, out, err, errlen);
    p = path_fmt("%s/state.json", dir);
    int st = path_is_file(p);
    free(p);
    if (st) return save_to_disk_resolve(dir, config, split, out, err, errlen);
    int level = repo ? -1 : cache_level(dir, 3);
    if (level >= 0) {
        char lab[1200];
        snprintf(lab, sizeof lab, "datasets cache folder '%s'", dir);
        return cache_resolve(dir, level, config, split, label ? label : lab, out, err, errlen);
    }
    p = path_fmt("%s/snapshots", dir);
    char *b = path_fmt("%s/blobs", dir);
    int hub_repo = !repo && path_is_dir(p) && path_is_dir(b);
    free(p);
    free(b);
    if (hub_repo) return hub_repo_resolve(dir, config, split, out, err, errlen);
    p = path_fmt("%s/.cache/huggingface", dir);
    repo |= path_is_dir(p) || in_hub_snapshot(dir);
    free(p);
    StrList names = {0}, files = {0};
    if (list_entries(dir, &names, err, errlen)) return -1;
    int subdirs = 0;
    for (int i = 0; i < names.n; i++) {
        char *path = path_fmt("%s/%s", dir, names.v[i]);
        struct stat s;
        if (path_is_dir(path)) subdirs++;
        else if (!skipped_name(names.v[i]) && lstat(path, &s) == 0) sl_push(&files, path_fmt("%s", names.v[i]));
        free(path);
    }
    sl_free(&names);
    int rc;
    if (repo || (!files.n && subdirs)) {  // a folder of folders is laid out as a repository
        char lab[1200];
        snprintf(lab, sizeof lab, "dataset folder '%s'", dir);
        rc = repo_resolve(dir, config, split, label ? label : lab, out, err, errlen);
    } else rc = plain_resolve(dir, &files, config, split, out, err, errlen);
    sl_free(&files);
    return rc;
}

static int glob_resolve(const char *spec, const char *config, const char *split, SourceFiles *out, char *err, size_t errlen) {
    char src[1200];
    snprintf(src, sizeof src, "glob '%s'", spec);
    if (no_configs(config, src, err, errlen)) return -1;
    glob_t g;
    int grc = glob(spec, GLOB_NOSORT, NULL, &g);
    if (grc == GLOB_NOMATCH || (grc == 0 && !g.gl_pathc)) {
        if (!grc) globfree(&g);
        return err_set(err, errlen, "no files match '%s'", spec);
    }
    if (grc) return err_set(err, errlen, "cannot expand '%s' (%s)", spec, grc == GLOB_NOSPACE ? "out of memory" : "a read error");
    SourceSplits ss = {0};
    ss.nosplits = 1;
    SourceSplit *sp = splits_at(&ss, "train");
    for (size_t i = 0; i < g.gl_pathc; i++)
        if (!path_is_dir(g.gl_pathv[i])) sl_push(&sp->files, path_fmt("%s", g.gl_pathv[i]));
    globfree(&g);
    sl_sort(&sp->files);
    int rc = sp->files.n ? finish(&ss, split, src, out, err, errlen) : err_set(err, errlen, "'%s' matches only folders", spec);
    splits_free(&ss);
    return rc;
}

// --- hub names --------------------------------------------------------------------------

// Canonical datasets that moved under an organisation: the short name still means them.
static const struct {
    const char *name, *repo;
} HF_SHORT_NAMES[] = {
    {"c4", "allenai/c4"},           {"wikitext", "Salesforce/wikitext"}, {"openwebtext", "Skylion007/openwebtext"},
    {"bookcorpus", "bookcorpus/bookcorpus"}, {"wikipedia", "wikimedia/wikipedia"}, {"imdb", "stanfordnlp/imdb"},
    {"squad", "rajpurkar/squad"},   {"glue", "nyu-mll/glue"},
};

// datasets' folder name for a dataset: NAME camel-case turned snake-case, ORG as it is.
static void snake_case(const char *in, char *out, size_t len) {
    size_t o = 0, n = strlen(in);
#define IS_UP(c) ((c) >= 'A' && (c) <= 'Z')
#define IS_LO(c) ((c) >= 'a' && (c) <= 'z')
    for (size_t i = 0; i < n && o + 3 < len; i++) {
        char c = in[i];
        // "ABCd" -> "AB_Cd", then "aB" / "1B" -> "a_B"
        if (i && IS_UP(c) && ((IS_UP(in[i - 1]) && i + 1 < n && IS_LO(in[i + 1])) || IS_LO(in[i - 1]) || (in[i - 1] >= '0' && in[i - 1] <= '9')))
            out[o++] = '_';
        out[o++] = IS_UP(c) ? (char)(c - 'A' + 'a') : c;
    }
#undef IS_UP
#undef IS_LO
    out[o] = 0;
}

// datasets' cache (heap): $HF_DATASETS_CACHE, else <home>/datasets
static char *datasets_cache_dir(void) {
    const char *env = getenv("HF_DATASETS_CACHE");
    if (env && *env) return path_dup(env);
    char *home = hub_home_dir(), *dir = path_join(home, "datasets");
    free(home);
    return dir;
}

// ORG/NAME or a bare NAME of letters, digits and "-_."
static int looks_like_dataset_name(const char *s) {
    if (strchr(s, '/')) return hub_looks_like_name(s);
    if (!*s || s[0] == '.') return 0;
    for (const char *c = s; *c; c++)
        if (!(*c == '-' || *c == '_' || *c == '.' || (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')))
            return 0;
    return 1;
}

static void fetch_hint(const char *repo, const char *config, char *out, size_t len) {
    char inc[300] = "";
    if (!strcmp(repo, "allenai/c4") && (!config || !*config || !strcmp(config, "en")))
        snprintf(inc, sizeof inc, " --include 'en/c4-train.0000*-of-01024.json.gz' --include 'en/c4-validation.00000-of-00008.json.gz'");
    else if (config && *config) snprintf(inc, sizeof inc, " --include '%s/*'", config);
    snprintf(out, len, "where there is internet, run: hf download %s --repo-type dataset%s --local-dir DIR, then pass DIR "
             "(or download with HF_HUB_CACHE=DIR set, and set HF_HUB_CACHE=DIR here)", repo, inc);
}

static int name_resolve(const char *spec, const char *config, const char *split, SourceFiles *out, char *err, size_t errlen) {
    const char *cands[2];
    int nc = 0;
    for (size_t i = 0; i < sizeof HF_SHORT_NAMES / sizeof *HF_SHORT_NAMES; i++)
        if (!strcmp(spec, HF_SHORT_NAMES[i].name)) cands[nc++] = HF_SHORT_NAMES[i].repo;
    cands[nc++] = spec;
    StrList places = {0};
    int rc = 2;  // 2: not found yet
    for (int i = 0; rc == 2 && i < nc; i++) {
        char where[4400], label[600];
        int s = hub_snapshot("datasets", cands[i], where, sizeof where);
        if (s < 0) rc = err_set(err, errlen, "dataset %s", where);
        else if (s == 0) sl_push(&places, path_fmt("%s", where));
        else {
            snprintf(label, sizeof label, "hub cache %s revision %.7s", cands[i], base_name(where));
            rc = folder_resolve(where, config, split, label, 1, out, err, errlen);
        }
    }
    char *cache = datasets_cache_dir();
    for (int i = 0; rc == 2 && i < nc; i++) {
        char snake[300], *dir;
        const char *slash = strchr(cands[i], '/');
        snake_case(slash ? slash + 1 : cands[i], snake, sizeof snake);
        dir = slash ? path_fmt("%s/%.*s___%s", cache, (int)(slash - cands[i]), cands[i], snake) : path_fmt("%s/%s", cache, snake);
        if (path_is_dir(dir)) {
            char label[600];
            snprintf(label, sizeof label, "datasets cache %s", cands[i]);
            rc = cache_resolve(dir, 3, config, split, label, out, err, errlen);
            free(dir);
        } else sl_push(&places, dir);
    }
    free(cache);
    if (rc == 2) {
        char list[2000], hint[700];
        join_names(places.v, places.n, list, sizeof list);
        fetch_hint(cands[0], config, hint, sizeof hint);
        rc = err_set(err, errlen, "'%s' is not a file or folder, and no Hugging Face cache here holds dataset %s (fsdpc never "
                         "downloads; looked in %s); %s", spec, cands[0], list, hint);
    }
    sl_free(&places);
    return rc;
}

int source_resolve(const char *spec, const char *config, const char *split, SourceFiles *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!split || !*split) split = "train";
    struct stat st;
    if (stat(spec, &st) != 0 && errno != ENOENT)  // there, or on a path that cannot be followed: not absent
        return err_set(err, errlen, "'%s': %s", spec, comm_path_error(spec, errno));
    if (stat(spec, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return folder_resolve(spec, config, split, NULL, 0, out, err, errlen);
        char src[1200];
        snprintf(src, sizeof src, "file '%s'", spec);
        if (no_configs(config, src, err, errlen)) return -1;
        SourceSplits ss = {0};
        ss.nosplits = 1;
        sl_push(&splits_at(&ss, "train")->files, path_fmt("%s", spec));
        int rc = finish(&ss, split, src, out, err, errlen);
        splits_free(&ss);
        return rc;
    }
    if (lstat(spec, &st) == 0) {  // a dangling symlink
        StrList one = {0};
        sl_push(&one, path_fmt("%s", spec));
        int rc = check_files(&one, err, errlen);
        sl_free(&one);
        return rc;
    }
    if (strpbrk(spec, "*?[")) return glob_resolve(spec, config, split, out, err, errlen);
    // a file name with a data extension is a missing file, not a dataset name
    if (!looks_like_dataset_name(spec) || repo_data_name(base_name(spec)))
        return err_set(err, errlen, "'%s' does not exist (no such file or folder)", spec);
    return name_resolve(spec, config, split, out, err, errlen);
}

void source_files_free(SourceFiles *f) {
    for (int i = 0; i < f->nfiles; i++) free(f->files[i]);
    free(f->files);
    memset(f, 0, sizeof *f);
}
