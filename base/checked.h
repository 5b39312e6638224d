// checked: size arithmetic that cannot wrap. Every size computed from flags or from a file's
// contents (batch x context, the model's tensors, buffers sized from flags) goes through these:
// a result that does not fit is an error naming the product and its factors, never a wrapped
// value carried on into "it fits".
#ifndef FSDPC_BASE_CHECKED_H
#define FSDPC_BASE_CHECKED_H

#include <stddef.h>
#include <stdint.h>

// The largest byte count fsdpc computes with: 2^56 (64 PiB), far beyond any machine's memory,
// and a sum of a few hundred such sizes still fits in 64 bits, so code past the checks may add
// them up in plain size_t.
#define CHECKED_MAX_BYTES ((uint64_t)1 << 56)

// *out = a * b (a + b); 1 when it fits in 64 bits, else 0 and *out is unspecified.
static inline int checked_mul(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline int checked_add(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }

// One factor of a product, with the name an error shows before its value ("--batch_size"), or
// NULL for a constant (bytes per element).
typedef struct {
    const char *name;
    uint64_t value;
} CheckedFactor;

// The product of f[0..n) into *out when it is at most max: returns 1. Else returns 0 and writes
// one line into err: "<name> <value> x <name> <value> ... = <product> <what>, more than <max>",
// or "... = more than 2^64 <what>" when it would wrap. The caller adds the fix.
int checked_product(uint64_t *out, uint64_t max, const char *what, const CheckedFactor *f, int n, char *err, size_t errlen);

#endif
