// hub: resolves Hugging Face hub names (ORG/NAME) offline, in the local cache clusters keep on
// shared storage: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub.
#ifndef FSDPC_HUB_H
#define FSDPC_HUB_H

#include <stddef.h>

// If `spec` names an existing path, copies it to out and returns 1. Else, if it looks like a hub
// name (ORG/NAME, no leading '/' or '.'), resolves it to the snapshot directory
// <cache>/models--ORG--NAME/snapshots/<ref>/ (refs/main when present, else the only snapshot)
// and returns 1. Otherwise returns 0 and writes a one-line reason naming where it looked into out.
int hub_resolve(const char *spec, char *out, size_t len);

#endif
