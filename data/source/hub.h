// hub: resolves Hugging Face hub names (ORG/NAME) offline, in the local cache clusters keep on
// shared storage: $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
#ifndef FSDPC_HUB_H
#define FSDPC_HUB_H

#include <stddef.h>

// If `spec` names an existing path, copies it to out and returns 1. Else, if it looks like a hub
// name (ORG/NAME, no leading '/' or '.'), resolves it to the snapshot directory
// <cache>/models--ORG--NAME/snapshots/<ref>/ (refs/main when present, else the only snapshot)
// and returns 1. Otherwise returns 0 and writes a one-line reason naming where it looked into out.
int hub_resolve(const char *spec, char *out, size_t len);

// ORG/NAME: one slash, neither part empty nor starting with '.', letters, digits and "-_." only.
int hub_looks_like_name(const char *s);
// The Hugging Face home (heap): $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
char *hub_home_dir(void);
// The hub cache (heap): $HF_HUB_CACHE, else <home>/hub.
char *hub_cache_dir(void);
// The snapshot of repository `name` (ORG/NAME, or a bare NAME) of `kind` ("models", "datasets")
// in the hub cache: <cache>/KIND--ORG--NAME/snapshots/<refs/main, else the only one>. Returns 1
// with its folder in out; 0 when the cache has no snapshot of it, with the repository folder
// looked for in out; -1 when several snapshots and no refs/main leave the choice open, with the
// reason in out.
int hub_snapshot(const char *kind, const char *name, char *out, size_t len);
// The same for a repository folder of the cache given as a path (`name` for messages): 1 with
// the snapshot folder in out, 0 when it holds none (out: the folder), -1 with the reason in out.
int hub_repo_snapshot(const char *repo, const char *name, char *out, size_t len);

#endif
