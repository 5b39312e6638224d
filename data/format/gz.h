// gz: gzip files read through zlib's inflate, member after member. zlib's gzread ends quietly
// at bytes after the last member, so a file with something appended (garbage, another file)
// would pass for the gzip part alone; here those bytes are an error naming where they start.
#ifndef FSDPC_GZ_H
#define FSDPC_GZ_H

#include <stddef.h>
#include <stdint.h>

typedef struct GzReader GzReader;
typedef enum { GZ_OK, GZ_CORRUPT, GZ_TRUNCATED, GZ_TRAILING, GZ_IO } GzError;

// A reader of the gzip file open at fd (reads of bufsize bytes; it closes fd in gz_close)
GzReader *gz_open(int fd, size_t bufsize);
// Up to n decompressed bytes into buf: the count, 0 at the end of the last member, or -1 with
// *kind and *why (static text: zlib's word, the byte where the trailing bytes start, or errno's)
long gz_read(GzReader *g, void *buf, size_t n, GzError *kind, const char **why);
// the compressed bytes consumed so far
uint64_t gz_offset(const GzReader *g);
void gz_close(GzReader *g);

#endif
