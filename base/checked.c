// checked: products of named factors that report, instead of wrap (see checked.h).
#include "checked.h"

#include <stdio.h>

int checked_product(uint64_t *out, uint64_t max, const char *what, const CheckedFactor *f, int n, char *err, size_t errlen) {
    uint64_t p = 1;
    int wrapped = 0;
    for (int i = 0; i < n && !wrapped; i++) wrapped = !checked_mul(p, f[i].value, &p);
    if (!wrapped && p <= max) {
        *out = p;
        return 1;
    }
    size_t k = 0;
    for (int i = 0; i < n && k < errlen; i++)
        k += (size_t)snprintf(err + k, errlen - k, "%s%s%s%llu", i ? " x " : "", f[i].name ? f[i].name : "", f[i].name ? " " : "",
                              (unsigned long long)f[i].value);
    if (k < errlen) {
        if (wrapped) snprintf(err + k, errlen - k, " = more than 2^64 %s", what);
        else snprintf(err + k, errlen - k, " = %llu %s, more than %llu", (unsigned long long)p, what, (unsigned long long)max);
    }
    return 0;
}
