// flight: a ring of this rank's last collectives, printed without stdio (signal handlers).
#include "flight.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "../base/clock.h"

typedef struct {
    const char *op, *group;  // string literals: safe to read from a signal handler
    uint64_t seq, bytes;
    int64_t start_us, end_us;  // end 0: not finished
} FlightEntry;

static FlightEntry ring[FLIGHT_RING];
static uint64_t count;  // entries ever opened; entry i lives in ring[i % FLIGHT_RING]
static int my_rank;
static int64_t origin_us;  // times print relative to the first entry's start

uint64_t flight_start(const char *op, const char *group, uint64_t seq, size_t bytes, int64_t start_us) {
    if (!count) origin_us = start_us;
    ring[count % FLIGHT_RING] = (FlightEntry){op, group, seq, bytes, start_us, 0};
    return count++;
}

void flight_end(uint64_t handle, int64_t end_us) {
    if (count - handle <= FLIGHT_RING) ring[handle % FLIGHT_RING].end_us = end_us;
}

// ---- formatting without stdio (async-signal-safe) ----

typedef struct {
    char b[512];
    size_t n;
} Line;

static void put_str(Line *l, const char *s) {
    while (*s && l->n < sizeof l->b - 1) l->b[l->n++] = *s++;
}

static void put_u64(Line *l, uint64_t v) {
    char d[24];
    int k = 0;
    do d[k++] = (char)('0' + v % 10);
    while ((v /= 10) && k < (int)sizeof d);
    while (k && l->n < sizeof l->b - 1) l->b[l->n++] = d[--k];
}

// microseconds as seconds with 6 decimals ("12.000345 s")
static void put_seconds(Line *l, int64_t us) {
    if (us < 0) put_str(l, "-"), us = -us;
    put_u64(l, (uint64_t)us / 1000000);
    put_str(l, ".");
    char frac[7] = "000000";
    uint64_t f = (uint64_t)us % 1000000;
    for (int i = 5; i >= 0; i--, f /= 10) frac[i] = (char)('0' + f % 10);
    put_str(l, frac);
    put_str(l, " s");
}

static void line_start(Line *l) {
    l->n = 0;
    put_str(l, "fsdpc: rank ");
    put_u64(l, (uint64_t)my_rank);
    put_str(l, ": ");
}

static void line_flush(Line *l) {
    l->b[l->n++] = '\n';
    for (size_t off = 0; off < l->n;) {
        ssize_t w = write(2, l->b + off, l->n - off);
        if (w <= 0) return;  // stderr is gone: nothing better to do in a dying process
        off += (size_t)w;
    }
}

void flight_dump(const char *why) {
    Line l;
    uint64_t n = count, first = n > FLIGHT_RING ? n - FLIGHT_RING : 0;
    int64_t now = clock_now_us();
    if (!n) return;  // an error before the first collective: nothing to tell
    line_start(&l);
    put_str(&l, why);
    put_str(&l, "; flight recorder, last ");
    put_u64(&l, n - first);
    put_str(&l, " of ");
    put_u64(&l, n);
    put_str(&l, " collectives (oldest first, times since the first):");
    line_flush(&l);
    for (uint64_t i = first; i < n; i++) {
        const FlightEntry *e = &ring[i % FLIGHT_RING];
        line_start(&l);
        put_str(&l, "  ");
        put_str(&l, e->op);
        put_str(&l, " #");
        put_u64(&l, e->seq);
        put_str(&l, " on ");
        put_str(&l, e->group);
        put_str(&l, ", ");
        put_u64(&l, e->bytes);
        put_str(&l, " bytes, start ");
        put_seconds(&l, e->start_us - origin_us);
        if (e->end_us) {
            put_str(&l, ", took ");
            put_seconds(&l, e->end_us - e->start_us);
        } else {
            put_str(&l, ", NOT FINISHED after ");
            put_seconds(&l, now - e->start_us);
        }
        line_flush(&l);
    }
}

static void on_usr2(int sig) {
    (void)sig;
    flight_dump("SIGUSR2");
}

void flight_install_signal(int rank) {
    my_rank = rank;
    struct sigaction sa = {.sa_handler = on_usr2, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
}
