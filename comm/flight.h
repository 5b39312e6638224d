// flight: the collective flight recorder. Every rank keeps its last FLIGHT_RING collectives (op,
// group, bytes, the group's sequence number, start and end time) and prints them when the job
// dies (fatal errors, --collective_timeout) or on SIGUSR2, so a hang or crash shows which
// collective each rank was in. comm.c records; nothing else needs to.
#ifndef FSDPC_COMM_FLIGHT_H
#define FSDPC_COMM_FLIGHT_H

#include <stddef.h>
#include <stdint.h>

enum { FLIGHT_RING = 64 };

// Opens an entry for a collective just issued; returns its handle for flight_end.
uint64_t flight_start(const char *op, const char *group, uint64_t seq, size_t bytes, int64_t start_us);
// Closes the entry (a no-op when newer collectives have overwritten it).
void flight_end(uint64_t handle, int64_t end_us);
// Writes the ring to stderr, oldest first, each line "fsdpc: rank R: ..." with `why` on the first
// line (nothing before the first collective). Async-signal-safe (write(2) from a stack buffer),
// so the SIGUSR2 handler uses it too.
void flight_dump(const char *why);
// SIGUSR2 prints the ring and the run goes on.
void flight_install_signal(int rank);

#endif
