// arrow: Apache Arrow IPC files and streams (what Hugging Face `datasets` caches) read through the
// row interface of data/table.h. The file is mapped read-only and read one record batch at a time;
// the FlatBuffers metadata is parsed by a bounds-checked reader of our own, and ZSTD / LZ4_FRAME
// body compression is undone per batch for the selected columns only. Dictionary-encoded string
// and integer-list columns read as their values, through the dictionaries current at each batch.
#ifndef FSDPC_ARROW_H
#define FSDPC_ARROW_H

#include <stddef.h>

#include "table.h"

// Opens an Arrow IPC stream (messages, each an optional 0xFFFFFFFF continuation marker, an int32
// metadata length, a FlatBuffers Message and its body; an end-of-stream marker or the end of the
// file ends it) or an Arrow IPC file ("ARROW1" magic, the stream, a footer). Returns a TableReader
// or NULL with a one-line message naming the file in err.
TableReader *arrow_open(const char *path, char *err, size_t errlen);
// The same over bytes in memory, which must outlive the reader; `name` stands for the path in
// messages.
TableReader *arrow_open_mem(const void *data, size_t size, const char *name, char *err, size_t errlen);

#endif
