// testutil: what the C test programs share: ok/not ok reporting and a seeded random source.
#ifndef FSDPC_TESTUTIL_H
#define FSDPC_TESTUTIL_H

#include "base/rng.h"
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int failures;
static char test_prefix[48];  // put before every check name, e.g. "gpu "

// Prints "ok - <prefix><name>", or "not ok - <prefix><name> (<detail>)" and counts a failure.
static void report(int ok, const char *name, const char *fmt, ...) {
    printf("%s - %s%s", ok ? "ok" : "not ok", test_prefix, name);
    if (!ok) {
        va_list ap;
        va_start(ap, fmt);
        printf(" (");
        vprintf(fmt, ap);
        printf(")");
        va_end(ap);
        failures++;
    }
    printf("\n");
}

static uint64_t rng_state = 0x853c49e6748fea9bULL;

static uint64_t rng_next(void) { return rng_splitmix64_next(&rng_state); }

static float rng_uniform(float lo, float hi) { return lo + (hi - lo) * (float)((rng_next() >> 40) * 0x1p-24); }

static float *rand_vec(size_t n, float lo, float hi) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    if (!x) abort();
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(lo, hi);
    return x;
}

#endif
