// foreign: checkpoints fsdpc did not write, told apart from its own. Users of the PyTorch FSDP
// recipes point fsdpc at the folders those recipes wrote (checkpoint dir = resume dir); such a
// folder is named for what it holds rather than taken for an empty one, where a resume would
// start afresh and fsdpc would then write beside the recipe's files.
#ifndef FSDPC_CKPT_FOREIGN_H
#define FSDPC_CKPT_FOREIGN_H

#include <stddef.h>

// What one file is, by its first bytes where they tell, else by its name. In ascending order of
// how much a folder's files say about it.
typedef enum {
    CKPT_FILE_OTHER,        // none of these (unreadable files too)
    CKPT_FILE_HDF5,         // fsdpc's checkpoint format (a user block of up to 2 KiB allowed)
    CKPT_FILE_SAFETENSORS,  // a safetensors header, or *.safetensors / *.safetensors.index.json
    CKPT_FILE_TORCH,        // torch.save: a zip archive holding data.pkl, or a pickle; by name .pt / .pth
    CKPT_FILE_DCP,          // a Distributed Checkpoint's .metadata or *.distcp shard
} CkptFileKind;
CkptFileKind ckpt_file_kind(const char *path);

// Whether path, a file or a folder (with its subfolders two levels down, where the recipes keep
// their step and tensor-parallel folders), holds PyTorch or Hugging Face checkpoints: files of
// the kinds above but HDF5, and Hugging Face model folders (config.json beside safetensors).
// Returns 0 when it holds none; else 1, with `what` a phrase naming the kind, one file and how
// many more ("a PyTorch Distributed Checkpoint (...): 'd/x/.metadata' and 2 more file(s)") and
// `fix` the way on ("start from its weights with --init_from 'd'"). Any rank alone.
int ckpt_foreign_find(const char *path, char *what, size_t wlen, char *fix, size_t flen);

#endif
