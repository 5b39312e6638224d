// hub: the Hugging Face cache layout, read offline (no network on compute nodes).
#include "hub.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int hub_is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

// ORG/NAME with one slash, neither part empty, '.' or '..', and no leading '/' or '.'
static int hub_looks_like_name(const char *s) {
    const char *slash = strchr(s, '/');
    if (!slash || strchr(slash + 1, '/') || slash == s || !slash[1] || s[0] == '.' || slash[1] == '.') return 0;
    for (const char *c = s; *c; c++)
        if (!(*c == '/' || *c == '-' || *c == '_' || *c == '.' || (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
              (*c >= 'A' && *c <= 'Z')))
            return 0;
    return 1;
}

static void hub_cache_dir(char *out, size_t len) {
    const char *cache = getenv("HF_HUB_CACHE"), *home = getenv("HF_HOME");
    if (cache && *cache) snprintf(out, len, "%s", cache);
    else if (home && *home) snprintf(out, len, "%s/hub", home);
    else snprintf(out, len, "%s/.cache/huggingface/hub", getenv("HOME") ? getenv("HOME") : "");
}

int hub_resolve(const char *spec, char *out, size_t len) {
    struct stat st;
    if (stat(spec, &st) == 0) return snprintf(out, len, "%s", spec), 1;
    if (!hub_looks_like_name(spec)) return snprintf(out, len, "'%s' does not exist", spec), 0;
    char cache[1024], repo[2048], snaps[2100], ref[128] = "", path[2400];
    hub_cache_dir(cache, sizeof cache);
    const char *slash = strchr(spec, '/');
    snprintf(repo, sizeof repo, "%s/models--%.*s--%s", cache, (int)(slash - spec), spec, slash + 1);
    snprintf(snaps, sizeof snaps, "%s/snapshots", repo);
    // refs/main names the snapshot the cache's owner last fetched
    snprintf(path, sizeof path, "%s/refs/main", repo);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(ref, sizeof ref, f)) ref[0] = 0;
        fclose(f);
        ref[strcspn(ref, " \r\n")] = 0;
    }
    if (ref[0] && !strchr(ref, '/')) {
        snprintf(path, sizeof path, "%s/%s", snaps, ref);
        if (hub_is_dir(path)) return snprintf(out, len, "%s", path), 1;
    }
    // without refs/main: the one snapshot there is (several are ambiguous)
    int n = 0;
    DIR *d = opendir(snaps);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            snprintf(path, sizeof path, "%s/%s", snaps, e->d_name);
            if (!hub_is_dir(path)) continue;
            if (++n == 1) snprintf(out, len, "%s", path);
        }
        closedir(d);
    }
    if (n == 1) return 1;
    if (n > 1)
        snprintf(out, len, "'%s' has %d snapshots in %s and no refs/main to choose one; pass the snapshot directory", spec, n, snaps);
    else
        snprintf(out, len, "'%s' is neither a file nor in the Hugging Face cache (looked in %s; set HF_HOME or HF_HUB_CACHE, or pass a path)",
                 spec, repo);
    return 0;
}
