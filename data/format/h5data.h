// h5data: minimal_fsdp-style HDF5 sample files (one 2-D integer dataset, a sample per row) as
// token data. Only the layout is read with HDF5, at open; the loader preads the rows itself.
#ifndef FSDPC_H5DATA_H
#define FSDPC_H5DATA_H

#include <stdint.h>

#include "shardfile.h"

// An HDF5 file's single 2-D integer dataset: fills f->header (file offset of its contiguous
// rows), width, is_signed, big_endian, row, dset and *rows, with every HDF5 handle closed again,
// so the loader thread can pread the rows without HDF5 (which is not thread-safe here). Returns
// NULL, or a one-line message naming f->path.
// Also f->vocab and f->vocab_attr: the vocabulary the file records (an integer attribute
// vocab_size or n_vocab on the dataset, else on the root group; 0 and NULL when none).
const char *data_h5_layout(TokenFile *f, uint64_t size, uint64_t *rows);
// The vocabulary HDF5 file `path` records, as above; 0 when it records none or is no HDF5 sample
// file (data_open says what is wrong with a file it cannot read).
int data_h5_vocab(const char *path);

#endif
