// hub: the Hugging Face cache layout, read offline (no network on compute nodes).
#include "hub.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../base/err.h"
#include "../../base/path.h"
#include "../../comm/comm.h"

int hub_looks_like_name(const char *s) {
    const char *slash = strchr(s, '/');
    if (!slash || strchr(slash + 1, '/') || slash == s || !slash[1] || s[0] == '.' || slash[1] == '.') return 0;
    for (const char *c = s; *c; c++)
        if (!(*c == '/' || *c == '-' || *c == '_' || *c == '.' || (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
              (*c >= 'A' && *c <= 'Z')))
            return 0;
    return 1;
}

char *hub_home_dir(void) {
    const char *home = getenv("HF_HOME"), *xdg = getenv("XDG_CACHE_HOME");
    if (home && *home) return path_dup(home);
    if (xdg && *xdg) return path_join(xdg, "huggingface");
    return path_join(getenv("HOME") ? getenv("HOME") : "", ".cache/huggingface");
}

char *hub_cache_dir(void) {
    const char *cache = getenv("HF_HUB_CACHE");
    if (cache && *cache) return path_dup(cache);
    char *home = hub_home_dir(), *hub = path_join(home, "hub");
    free(home);
    return hub;
}

int hub_snapshot(const char *kind, const char *name, char *out, size_t len) {
    char *cache = hub_cache_dir(), *repo;
    const char *slash = strchr(name, '/');
    if (slash) repo = path_fmt("%s/%s--%.*s--%s", cache, kind, (int)(slash - name), name, slash + 1);
    else repo = path_fmt("%s/%s--%s", cache, kind, name);
    int rc = hub_repo_snapshot(repo, name, out, len);
    free(cache);
    free(repo);
    return rc;
}

// refs/main of repo: the snapshot the cache's owner last fetched, when it names a folder there (heap), else NULL
static char *hub_main_snapshot(const char *repo, const char *snaps) {
    char ref[128] = "", *path = path_join(repo, "refs/main");
    FILE *f = path_fopen_read(path);
    free(path);
    if (f) {
        if (!fgets(ref, sizeof ref, f)) ref[0] = 0;
        fclose(f);
        ref[strcspn(ref, " \r\n")] = 0;
    }
    if (!ref[0] || strchr(ref, '/') || !strcmp(ref, ".") || !strcmp(ref, "..")) return NULL;
    path = path_join(snaps, ref);
    if (path_is_dir(path)) return path;
    free(path);
    return NULL;
}

int hub_repo_snapshot(const char *repo, const char *name, char *out, size_t len) {
    char *snaps = path_join(repo, "snapshots"), *main = hub_main_snapshot(repo, snaps);
    // without refs/main: the one snapshot there is (several are ambiguous)
    int n = main ? 1 : 0;
    DIR *d = main ? NULL : opendir(snaps);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char *path = path_join(snaps, e->d_name);
        if (path_is_dir(path) && ++n == 1) main = path;
        else free(path);
    }
    if (d) closedir(d);
    int rc = n == 1 ? (snprintf(out, len, "%s", main), 1)
         : n > 1 ? err_set(out, len, "'%s' has %d snapshots in %s and no refs/main to choose one; pass the snapshot directory", name, n, snaps)
                 : (snprintf(out, len, "%s", repo), 0);
    free(snaps);
    free(main);
    return rc;
}

int hub_resolve(const char *spec, char *out, size_t len) {
    struct stat st;
    if (stat(spec, &st) == 0) return snprintf(out, len, "%s", spec), 1;
    if (errno != ENOENT) return snprintf(out, len, "'%s': %s", spec, comm_path_error(spec, errno)), 0;
    if (!hub_looks_like_name(spec)) return snprintf(out, len, "'%s' does not exist", spec), 0;
    char where[4500];
    int rc = hub_snapshot("models", spec, where, sizeof where);
    if (rc > 0) return snprintf(out, len, "%s", where), 1;
    if (rc < 0) snprintf(out, len, "%s", where);
    else
        snprintf(out, len, "'%s' is neither a file nor in the Hugging Face cache (looked in %s; set HF_HOME or HF_HUB_CACHE, or pass a path)",
                 spec, where);
    return 0;
}
