// source: where a dataset's files are for one split: a file, a glob, a folder, a Hugging Face
// `datasets` folder (save_to_disk, DatasetDict, load_dataset cache) or a hub name found offline
// in the local caches (no network, ever). Only locations: what the files hold is data/sniff's.
#ifndef FSDPC_SOURCE_H
#define FSDPC_SOURCE_H

#include <stddef.h>

typedef struct {
    char **files;    // (nfiles) paths, in the dataset's order (shard order; else sorted by name)
    int nfiles;
    char split[64];  // the split the files are: the one asked for, or what stands in for "validation"
    char desc[256];  // for logs: "save_to_disk folder 'd' (2 shards) split train (2 files)",
                     // "hub cache allenai/c4 revision 1c2d3e4 config en split train (3 files)"
} SourceFiles;

// Resolves `spec` to the files of one split. split: "train", "validation" (which takes, when the
// dataset has no such split, "valid", "val", "dev", then "test"), or any other split name.
// config: NULL or "" for none; it chooses among a hub repository's or a datasets cache's configs;
// sources without configs refuse any but "default".
//
// spec, in this order:
//   a path that exists: a file; a DatasetDict folder (dataset_dict.json: one save_to_disk folder
//     per split); a save_to_disk folder (state.json's _data_files, in order); a load_dataset cache
//     folder at any depth of NS___NAME/CONFIG/VERSION/HASH/NAME-SPLIT[-SSSSS-of-NNNNN].arrow
//     (cache-*.arrow are .map() outputs, never data; of several HASH folders the newest by
//     modification time); a repository layout (a hub snapshot, an `hf download --local-dir` folder,
//     or a folder holding only sub-folders): its configs are top-level folders and its splits
//     are named by file and folder names as `datasets` names them (data/SPLIT-NNNNN-of-NNNNN.*,
//     then folder names, then file names, with the keywords train/training,
//     validation/valid/dev/val, test/testing/eval/evaluation), else every file is train;
//     any other folder: its files (not hidden, *.tmp, *.lock, cache-*.arrow), split by file
//     name only when every file names one, else all train;
//   a glob: the files it matches, sorted;
//   a hub name, ORG/NAME or a short name ("c4" is "allenai/c4"): the hub cache's snapshot
//     (datasets--ORG--NAME, refs/main or the only one), then the datasets cache (ORG___name).
// A source without splits (a file, a glob, a save_to_disk folder, a folder whose names mark none)
// is all "train", as datasets' load_dataset calls it: other splits give 0.
//
// Returns 1 with out filled; 0 when split is not "train" and the dataset has no such split;
// -1 with a one-line message in err (nothing there, a dangling symlink, a bad state.json, a
// name in no cache: every place looked at, and how to fetch it where there is internet).
int source_resolve(const char *spec, const char *config, const char *split, SourceFiles *out, char *err, size_t errlen);
void source_files_free(SourceFiles *f);

// Two of paths[0, n) that are one file (by device and inode: a symbolic or hard link, another
// spelling), which a run would read twice: 1 with *a < *b their indices, else 0. Files of a hub
// snapshot that share one blob (the dataset holds the same bytes twice, and datasets reads both)
// do not count.
int source_find_repeat(const char *const *paths, int n, int *a, int *b);

#endif
