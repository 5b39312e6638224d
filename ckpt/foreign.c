// foreign: PyTorch and Hugging Face checkpoints, told by their first bytes or names (foreign.h).
#define _GNU_SOURCE  // memmem
#include "foreign.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/path.h"
#include "../data/format/sniff.h"

#define SCAN_DEPTH 2       // levels of subfolders looked into: <dir>/<step folder>/<tp folder>
#define SCAN_ENTRIES 4096  // entries looked at in all, so a mistyped path (a home folder) costs little
#define HEAD 4096          // bytes read of a file to tell its kind
#define KINDS (CKPT_FILE_DCP + 2)
#define KIND_HF (CKPT_FILE_DCP + 1)  // a folder: config.json beside safetensors, what --init_from reads

// A pickle starts with PROTO (protocol 2 to 5, what torch.save and DCP's .metadata write) and then
// an opcode a pickled state dict begins with: torch.save's magic number (LONG1), a FRAME, an
// empty dict or list, a MARK, a GLOBAL or a short string. Two bytes alone would also match raw
// uint16 tokens (a nanoGPT .bin that starts with token 640).
static int is_pickle(const unsigned char *p, size_t n) {
    return n >= 3 && p[0] == 0x80 && p[1] >= 2 && p[1] <= 5 && p[2] && strchr("\x8a\x95}](c\x8c", p[2]);
}

static CkptFileKind kind_of(const char *path, const char *name) {
    unsigned char head[HEAD];
    ssize_t n = -1;
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // O_NONBLOCK: a FIFO must not wait for a writer
    if (fd >= 0) {
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = read(fd, head, sizeof head);
        close(fd);
    }
    int dcp_name = path_ends_with(name, ".distcp") || !strcmp(name, ".metadata");
    if (n > 0) {
        Sniff s;
        sniff_bytes(head, (size_t)n, (uint64_t)st.st_size, name, &s);
        if (s.format == SNIFF_HDF5) return CKPT_FILE_HDF5;
        if (s.format == SNIFF_SAFETENSORS) return CKPT_FILE_SAFETENSORS;
        // torch.save's zip archive begins with its pickle, <archive>/data.pkl
        if ((s.format == SNIFF_ZIP && memmem(head, (size_t)n, "data.pkl", 8)) || is_pickle(head, (size_t)n))
            return dcp_name ? CKPT_FILE_DCP : CKPT_FILE_TORCH;
    }
    if (dcp_name) return CKPT_FILE_DCP;  // a shard's tensor bytes carry no magic
    if (path_ends_with(name, ".safetensors") || path_ends_with(name, ".safetensors.index.json")) return CKPT_FILE_SAFETENSORS;
    if (path_ends_with(name, ".pt") || path_ends_with(name, ".pth") || !strcmp(name, "pytorch_model.bin.index.json")) return CKPT_FILE_TORCH;
    return CKPT_FILE_OTHER;
}

CkptFileKind ckpt_file_kind(const char *path) {
    const char *slash = strrchr(path, '/');
    return kind_of(path, slash ? slash + 1 : path);
}

typedef struct {
    int n[KINDS];             // files of each kind (KIND_HF: folders)
    char *first[KINDS];       // of each kind the smallest path, the same whatever order folders list in (heap)
    char *index;              // the smallest safetensors index: what --init_from takes for sharded weights (heap)
    int hf_files;             // safetensors files beside first[KIND_HF]'s config.json
    int seen;
} Found;

static void note(Found *f, int kind, const char *path) {
    if (!f->n[kind]++ || strcmp(path, f->first[kind]) < 0) path_set(&f->first[kind], path);
}

static void scan(const char *dir, int depth, Found *f) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct stat st;
    int config = 0, weights = 0;
    for (struct dirent *de; f->seen < SCAN_ENTRIES && (de = readdir(d));) {
        const char *name = de->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
        f->seen++;
        char *path = path_join(dir, name);
        int is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode), is_file = !is_dir && S_ISREG(st.st_mode);
        if (is_dir && depth < SCAN_DEPTH) scan(path, depth + 1, f);
        config |= is_file && !strcmp(name, "config.json");
        CkptFileKind k = is_file ? kind_of(path, name) : CKPT_FILE_OTHER;
        if (k != CKPT_FILE_OTHER && k != CKPT_FILE_HDF5) note(f, k, path);
        weights += k == CKPT_FILE_SAFETENSORS;
        if (k == CKPT_FILE_SAFETENSORS && path_ends_with(name, ".index.json") && (!f->index || strcmp(path, f->index) < 0))
            path_set(&f->index, path);
        free(path);
    }
    closedir(d);
    if (config && weights && (!f->n[KIND_HF] || strcmp(dir, f->first[KIND_HF]) < 0)) f->hf_files = weights;
    if (config && weights) note(f, KIND_HF, dir);
}

// what f's kind k is and how to start from it, into what and fix
static void describe(const Found *f, int k, char *what, size_t wlen, char *fix, size_t flen) {
    char more[64] = "";
    if (f->n[k] > 1) snprintf(more, sizeof more, " and %d more file(s)", f->n[k] - 1);
    static const char convert[] = "export its weights with the recipe's own tools to a Hugging Face folder (config.json and "
                                 "model.safetensors, as save_pretrained(..., safe_serialization=True) writes) and start from "
                                 "that with --init_from DIR";
    switch (k) {
    case KIND_HF:
        snprintf(what, wlen, "a Hugging Face model folder, '%s' (config.json and %d safetensors file(s))", f->first[k], f->hf_files);
        snprintf(fix, flen, "start from its weights with --init_from '%s'", f->first[k]);
        break;
    case CKPT_FILE_DCP:
        snprintf(what, wlen, "a PyTorch Distributed Checkpoint (torch.distributed.checkpoint, as the FSDP recipes save sharded "
                 "state dicts): '%s'%s", f->first[k], more);
        snprintf(fix, flen, "%s", convert);
        break;
    case CKPT_FILE_TORCH:
        snprintf(what, wlen, "PyTorch checkpoints (torch.save: whole or per-rank state dicts): '%s'%s", f->first[k], more);
        snprintf(fix, flen, "%s", convert);
        break;
    default:
        snprintf(what, wlen, "safetensors weights without a config.json: '%s'%s", f->first[k], more);
        snprintf(fix, flen, "start from them with --init_from '%s'", f->index ? f->index : f->first[k]);
    }
}

int ckpt_foreign_find(const char *path, char *what, size_t wlen, char *fix, size_t flen) {
    Found f;
    memset(&f, 0, sizeof f);
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (S_ISDIR(st.st_mode)) scan(path, 0, &f);
    else if (S_ISREG(st.st_mode)) note(&f, ckpt_file_kind(path), path);
    int k = KINDS - 1;
    while (k > CKPT_FILE_HDF5 && !f.n[k]) k--;
    if (k > CKPT_FILE_HDF5) describe(&f, k, what, wlen, fix, flen);
    for (int i = 0; i < KINDS; i++) free(f.first[i]);
    free(f.index);
    return k > CKPT_FILE_HDF5;
}
