// clock: the clock that skips frozen time, and the tests' pause points (see clock.h).
#include "clock.h"

#include <errno.h>
#include <pthread.h>
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

int64_t clock_awake_us(void) {
    // one lock: a thread must never read a gap another thread has seen but not yet counted
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static int64_t last_us, frozen_us;
    pthread_mutex_lock(&lock);
    int64_t now = clock_now_us();
    if (last_us && now - last_us > CLOCK_FROZEN_GAP_US) frozen_us += now - last_us - CLOCK_FROZEN_GAP_US;
    last_us = now;
    int64_t awake = now - frozen_us;
    pthread_mutex_unlock(&lock);
    return awake;
}
