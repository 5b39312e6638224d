// clock: the tests' pause points (see clock.h).
#include "clock.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void clock_test_pause(const char *point) {
    const char *e = getenv("FSDPC_TEST_PAUSE");
    size_t n = strlen(point);
    if (!e || strncmp(e, point, n) || e[n] != ':') return;
    double s = atof(e + n + 1);
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}  // a handled signal resumes the pause
}
