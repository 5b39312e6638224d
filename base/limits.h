// limits: the process's resource limits (ulimit -v/-d/-n/-f/-u, the umask), checked before the
// libraries that would fail on them with their own text or spin for ever (Open MPI's start-up,
// OpenBLAS's buffers, OpenMP's threads), and named in the error lines of what they stop.
#ifndef FSDPC_BASE_LIMITS_H
#define FSDPC_BASE_LIMITS_H

#include <stddef.h>
#include <stdint.h>

// A failure before MPI is up (a library's start-up, comm_init's checks): "fsdpc: error: <msg>"
// from the process whose launcher rank (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID)
// is 0 or unset, so a job prints it once; every process exits with status 1.
void limits_fail_early(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

// comm_init, before MPI_Init: refuses a umask that takes the owner's own permissions, raises the
// open-files soft limit to what Open MPI and fsdpc need (or refuses a hard limit below it),
// refuses a file-size limit below Open MPI's shared-memory files, and ignores SIGXFSZ, so a write
// past ulimit -f fails with EFBIG (an error line) instead of killing the process.
void limits_check_start(void);

// The finite limits on what this process may map or start, for error lines:
// "ulimit -v 500000 KiB, ulimit -u 200 processes"; "" when there are none.
const char *limits_summary(void);
// Bytes of address space this process may still map under ulimit -v and ulimit -d (the smaller),
// or -1 when neither is set.
double limits_room(void);
// Whether `bytes` more of private writable memory can be mapped now (it is mapped and unmapped at
// once, never touched): 0, else the errno of the failed mmap.
int limits_can_map(size_t bytes);
// The largest file this process may write (ulimit -f), in bytes; UINT64_MAX when unlimited.
uint64_t limits_file_size(void);

#endif
