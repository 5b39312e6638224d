// parquet: Apache Parquet files as a TableReader (data/table.h): the Thrift compact-protocol
// footer, then the selected columns' pages one row group at a time (v1 and v2 data pages; PLAIN,
// dictionary and DELTA encodings; uncompressed, Snappy, gzip, zstd, LZ4 and LZ4_RAW).
#ifndef FSDPC_PARQUET_H
#define FSDPC_PARQUET_H

#include <stddef.h>

#include "table.h"

// Opens a Parquet file ("PAR1" at both ends, a Thrift compact-protocol FileMetaData footer).
// Returns a TableReader, or NULL with a one-line message naming the file in err.
TableReader *parquet_open(const char *path, char *err, size_t errlen);
// The same over `size` bytes in memory, which must outlive the reader; `name` stands for the
// path in messages.
TableReader *parquet_open_mem(const void *data, size_t size, const char *name, char *err, size_t errlen);

#endif
