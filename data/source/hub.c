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

void hub_home_dir(char *out, size_t len) {
    const char *home = getenv("HF_HOME"), *xdg = getenv("XDG_CACHE_HOME");
    if (home && *home) snprintf(out, len, "%s", home);
    else if (xdg && *xdg) snprintf(out, len, "%s/huggingface", xdg);
    else snprintf(out, len, "%s/.cache/huggingface", getenv("HOME") ? getenv("HOME") : "");
}

void hub_cache_dir(char *out, size_t len) {
    const char *cache = getenv("HF_HUB_CACHE");
    char home[1024];
    hub_home_dir(home, sizeof home);
    if (cache && *cache) snprintf(out, len, "%s", cache);
    else snprintf(out, len, "%s/hub", home);
}

int hub_snapshot(const char *kind, const char *name, char *out, size_t len) {
    char cache[2048], repo[4096];
    hub_cache_dir(cache, sizeof cache);
    const char *slash = strchr(name, '/');
    if (slash) snprintf(repo, sizeof repo, "%s/%s--%.*s--%s", cache, kind, (int)(slash - name), name, slash + 1);
    else snprintf(repo, sizeof repo, "%s/%s--%s", cache, kind, name);
    return hub_repo_snapshot(repo, name, out, len);
}

int hub_repo_snapshot(const char *repo, const char *name, char *out, size_t len) {
    char snaps[4200], ref[128] = "", path[4500];
    snprintf(snaps, sizeof snaps, "%s/snapshots", repo);
    // refs/main names the snapshot the cache's owner last fetched
    snprintf(path, sizeof path, "%s/refs/main", repo);
    FILE *f = path_fopen_read(path);
    if (f) {
        if (!fgets(ref, sizeof ref, f)) ref[0] = 0;
        fclose(f);
        ref[strcspn(ref, " \r\n")] = 0;
    }
    if (ref[0] && !strchr(ref, '/') && strcmp(ref, ".") && strcmp(ref, "..")) {
        snprintf(path, sizeof path, "%s/%s", snaps, ref);
        if (path_is_dir(path)) return snprintf(out, len, "%s", path), 1;
    }
    // without refs/main: the one snapshot there is (several are ambiguous)
    int n = 0;
    DIR *d = opendir(snaps);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            snprintf(path, sizeof path, "%s/%s", snaps, e->d_name);
            if (!path_is_dir(path)) continue;
            if (++n == 1) snprintf(out, len, "%s", path);
        }
        closedir(d);
    }
    if (n == 1) return 1;
    if (n > 1)
        return err_set(out, len, "'%s' has %d snapshots in %s and no refs/main to choose one; pass the snapshot directory",
                        name, n, snaps);
    return snprintf(out, len, "%s", repo), 0;
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
