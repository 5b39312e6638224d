// safetensors: the Hugging Face tensor file. An 8-byte little-endian header length N, N bytes of
// JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the
// raw little-endian data; offsets count from the first byte after the header.
#ifndef FSDPC_SAFETENSORS_H
#define FSDPC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// the element types fsdpc converts to and from fp32; ST_OTHER is any other valid safetensors type
typedef enum { ST_F32, ST_BF16, ST_F16, ST_OTHER } StDtype;

enum { ST_MAX_DIMS = 8 };

typedef struct {
    char *name;
    char dtype_name[12];  // as the file spells it, e.g. "BF16"
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end;  // absolute byte range in the file
} StTensor;

typedef struct {
    char path[4096];
    uint64_t size;  // file bytes
    int ntensors;
    StTensor *tensors;  // sorted by name
} StFile;

// Reads and validates the header of `path` (no tensor data): header length within the file, JSON,
// known dtypes, shapes, data ranges inside the file, matching the shape and not overlapping.
// Returns 0, or -1 with a one-line reason naming the file in err.
int st_open(StFile *f, const char *path, char *err, size_t errlen);
void st_close(StFile *f);
const StTensor *st_find(const StFile *f, const char *name);

// Reads elements [first, first + count) of t (an ST_F32/BF16/F16 tensor) from fd, the open file,
// into dst as fp32. No buffer beyond dst: 16-bit data is read into dst's tail and widened in place.
// Returns NULL, or an error message naming the tensor and file.
const char *st_read_f32(int fd, const StFile *f, const StTensor *t, uint64_t first, uint64_t count, float *dst);

// Bytes per element of a writable dtype (ST_F32, ST_BF16, ST_F16).
size_t st_dtype_size(StDtype dt);
// fp32 to dt, rounding to nearest even (numpy's float16 cast; bf16 as torch rounds it).
void st_from_f32(void *dst, const float *src, size_t n, StDtype dt);

// One tensor of a file being written: its data follows in the order given.
typedef struct {
    const char *name;
    int ndim;
    const int *shape;
} StEntry;
// Writes the length and the JSON header (space-padded so the data starts 8-byte aligned) for
// tensors of dtype dt laid out back to back. Returns 0, or -1 on a write error.
int st_write_header(FILE *out, const StEntry *e, int n, StDtype dt);
// How st_write_header's JSON begins: the metadata says which program wrote the file, so a later
// export can tell its own earlier output from another model's (st_written_by_fsdpc).
#define ST_FSDPC_HEADER "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"fsdpc export\"}"
// Whether the file at path is a safetensors file st_write_header began.
int st_written_by_fsdpc(const char *path);

#endif
