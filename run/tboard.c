// tboard: TensorBoard event files (see tboard.h).
#include "tboard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../base/err.h"
#include "../base/path.h"
#include "../comm/comm.h"
#include "../comm/io.h"

struct TBoard {
    FILE *f;
    char *path;  // heap
    char *what;  // "--tensorboard_dir file '<path>'", for io_write_error
    int scalars;  // none: the file says nothing, and goes at close or exit
};

// The open file, for the exit of a run refused or stopped before its first scalar: TensorBoard
// would list it as a run with no data.
static TBoard *open_tb;
static void remove_unused(void) {
    if (open_tb && !open_tb->scalars) unlink(open_tb->path);
}

// ---- CRC-32C, TFRecord's checksum: reflected polynomial 0x82F63B78, one table lookup per byte ----

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[i] = c;
    }
}

static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n--) c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

// TFRecord stores the CRC rotated and offset, so that a CRC of data holding CRCs stays strong
static uint32_t crc_masked(const uint8_t *p, size_t n) {
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

// ---- the protobuf wire format, as far as Event needs it ----

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_BYTES = 2, WIRE_FIXED32 = 5 };
// Event: wall_time 1 (double), step 2 (int64), file_version 3 (string), summary 5 (Summary);
// Summary: value 1 (repeated Value); Summary.Value: tag 1 (string), simple_value 2 (float)
enum { EVENT_WALL_TIME = 1, EVENT_STEP = 2, EVENT_FILE_VERSION = 3, EVENT_SUMMARY = 5 };
enum { SUMMARY_VALUE = 1, VALUE_TAG = 1, VALUE_SIMPLE = 2 };
#define TAG_MAX 200  // the longest tag or string field: tags are the caller's constants
#define MSG_MAX (TAG_MAX + 64)

static size_t put_varint(uint8_t *p, uint64_t v) {
    size_t n = 0;
    for (; v >= 0x80; v >>= 7) p[n++] = (uint8_t)(v | 0x80);
    p[n++] = (uint8_t)v;
    return n;
}

static size_t put_key(uint8_t *p, unsigned field, unsigned wire) { return put_varint(p, (uint64_t)(field << 3 | wire)); }

static size_t put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
    return (size_t)bytes;
}

static size_t put_bytes(uint8_t *p, unsigned field, const void *s, size_t len) {
    size_t n = put_key(p, field, WIRE_BYTES);
    n += put_varint(p + n, len);
    memcpy(p + n, s, len);
    return n + len;
}

static double wall_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// an Event's common head: wall_time, then step unless it is 0 (proto3 leaves defaults out)
static size_t put_event_head(uint8_t *p, int64_t step) {
    uint64_t bits;
    double now = wall_clock();
    memcpy(&bits, &now, sizeof bits);
    size_t n = put_key(p, EVENT_WALL_TIME, WIRE_FIXED64);
    n += put_le(p + n, bits, 8);
    if (step != 0) n += put_key(p + n, EVENT_STEP, WIRE_VARINT), n += put_varint(p + n, (uint64_t)step);
    return n;
}

// one TFRecord: length, its masked CRC, the data, the data's masked CRC
static void put_record(TBoard *tb, const uint8_t *data, size_t n) {
    uint8_t head[12], tail[4];
    put_le(head, n, 8);
    put_le(head + 8, crc_masked(head, 8), 4);
    put_le(tail, crc_masked(data, n), 4);
    fwrite(head, 1, sizeof head, tb->f);
    fwrite(data, 1, n, tb->f);
    fwrite(tail, 1, sizeof tail, tb->f);
}

TBoard *tboard_open(const char *dir, char *err, size_t errlen) {
    if (!crc_table[1]) crc_init();
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    for (char *h = host; *h; h++)  // the name is part of a file name
        if (!(*h == '-' || *h == '.' || *h == '_' || (*h >= '0' && *h <= '9') || ((*h | 32) >= 'a' && (*h | 32) <= 'z'))) *h = '_';
    TBoard *tb = callocCheck(1, sizeof *tb);
    long long secs = (long long)time(NULL);
    int fd = -1;
    // TensorBoard orders a folder's files by name; the counter only parts two runs of one second and pid
    for (int uid = 0; fd < 0 && uid < 100; uid++) {
        free(tb->path);
        tb->path = path_fmt("%s/events.out.tfevents.%010lld.%s.%ld.%d", dir, secs, host, (long)getpid(), uid);
        fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0 || !(tb->f = fdopen(fd, "wb"))) {
        err_set(err, errlen, "cannot create an events file in --tensorboard_dir '%s': %s", path_show(dir), comm_path_error(tb->path, errno));
        if (fd >= 0) close(fd);
        free(tb->path);
        free(tb);
        return NULL;
    }
    tb->what = path_fmt("--tensorboard_dir file '%s'", tb->path);
    // TensorBoard reads a file whose first event names this version ("brain.Event:2": summaries
    // as Summary protos, steps as given)
    static const char version[] = "brain.Event:2";
    uint8_t ev[MSG_MAX];
    size_t n = put_event_head(ev, 0);
    n += put_bytes(ev + n, EVENT_FILE_VERSION, version, sizeof version - 1);
    put_record(tb, ev, n);
    const char *e = tboard_flush(tb);
    if (e) {
        err_set(err, errlen, "%s", e);
        tboard_close(tb);
        return NULL;
    }
    if (!open_tb) atexit(remove_unused);
    open_tb = tb;
    return tb;
}

const char *tboard_path(const TBoard *tb) { return tb->path; }

void tboard_scalar(TBoard *tb, const char *tag, int64_t step, double value) {
    size_t len = strlen(tag);
    if (len > TAG_MAX) err_fatal("TensorBoard tag '%.40s...' is longer than %d bytes", tag, TAG_MAX);
    uint8_t val[MSG_MAX], sum[MSG_MAX], ev[MSG_MAX];
    size_t nv = put_bytes(val, VALUE_TAG, tag, len);
    float f = (float)value;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    nv += put_key(val + nv, VALUE_SIMPLE, WIRE_FIXED32);
    nv += put_le(val + nv, bits, 4);
    size_t ns = put_bytes(sum, SUMMARY_VALUE, val, nv);
    size_t n = put_event_head(ev, step);
    n += put_bytes(ev + n, EVENT_SUMMARY, sum, ns);
    put_record(tb, ev, n);
    tb->scalars++;
}

const char *tboard_flush(TBoard *tb) { return io_write_error(tb->f, tb->what); }

const char *tboard_close(TBoard *tb) {
    if (!tb) return NULL;
    const char *e = tboard_flush(tb);
    static char msg[1500];
    if (fclose(tb->f) != 0 && !e) e = err_text(msg, sizeof msg, "cannot write %s: %s", tb->what, strerror(errno));
    if (!tb->scalars) unlink(tb->path);
    if (tb == open_tb) open_tb = NULL;
    free(tb->path);
    free(tb->what);
    free(tb);
    return e;
}
