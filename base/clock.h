// clock: the monotonic clock every layer times with (step times, the flight recorder, traces,
// deadlines). Not the wall clock: a time step of the system clock never makes a span negative.
#ifndef FSDPC_BASE_CLOCK_H
#define FSDPC_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t clock_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline double clock_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The monotonic clock less the time the process spent frozen: stopped (a job its scheduler suspends,
// ^Z, SIGSTOP) or paused (a VM's host). Timeouts that wait on other ranks read it, so a job
// suspended whole and resumed later does not end as if a rank had died, while a rank that is
// stopped alone still times out on the ranks that wait for it. Any gap of more than
// CLOCK_FROZEN_GAP_US between two reads (by any thread) counts as frozen beyond that, so a caller
// timing something reads it at least that often.
enum { CLOCK_FROZEN_GAP_US = 2000000 };
int64_t clock_awake_us(void);

// Fault injection for tests: FSDPC_TEST_PAUSE="POINT:SECONDS" holds the program that long where
// it calls clock_test_pause(POINT) ("start-up": before MPI starts; "export": once the export's
// first file exists under its temporary name; "stepN": in training step N's compute, as a kernel
// that does not return would be; "wlock-create": a writer lock created in place, still empty; "wlock-takeover": a writer that found a lock's
// writer ended, before it takes the lock over), so a signal or a second process reliably lands
// there whatever the machine's speed. Unset or another point: returns at once.
void clock_test_pause(const char *point);

#endif
