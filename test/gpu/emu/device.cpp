// Emulated device memory, streams and events (testing only); see emu_device.h.
//
// Device memory is one reserved address range, inaccessible outside device work. While an op
// (kernel, copy, cuBLASLt call, sort) runs, the pages it touches are granted one by one from the
// SIGSEGV handler, which records each as a read or a write of that op. Ordering is tracked with
// vector clocks: stream s has seen op k of stream t iff clocks[s][t] >= k. An op joins what the
// host has seen when queued; an event copies its stream's clocks when recorded; a stream wait or
// a host sync joins them in. An access races when the page's last write, or (for a write) a
// read, came from another stream at a time the accessing stream has not seen.
//
// The same page grants give each op its bytes for a roofline model of the step on an H100
// (FSDPC_EMU_ROOFLINE; see emu_device.h): page-granular for kernels (an upper bound), declared
// exactly where the op knows them (copies, cuBLASLt, collectives).
//
// A deferred op (the emulated NCCL's collectives) is queued like any other, so the clocks judge it
// at its place in the stream, but its bytes land later, when its completion function says so. Until
// then the events that follow it are not ready, and work that follows it (a later op on a stream
// that has seen it, a host sync) first waits for it to land; ops land in the order their streams saw
// them. Everything still runs on the host thread: it polls the pending ops whenever it enters the
// emulation, as a GPU would progress them on its own.
#define EMU_DL_REAL  // this file implements the emulated dlopen: the real one's names stay
#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "emu_device.h"

namespace {
constexpr size_t kReserve = (size_t)32 << 30;  // address space only: pages are committed when touched
constexpr int kStreams = 16;                   // stream 0 is the host
typedef uint32_t Clock[kStreams];

std::mutex mu;  // allocation (the rest runs on one thread: work happens when it is queued)
size_t page;
char *base;
size_t used;  // bytes of the range handed out, a whole number of pages
size_t freed;  // of those, bytes given back by cudaFree (never handed out again)
std::map<char *, size_t> blocks;  // live allocations: start -> length
int access_depth;

struct PageRec {
    uint32_t w_epoch, w_stream;  // last write: op w_epoch of stream w_stream (0: never written)
    const char *w_what;
    Clock r_epoch;  // last read by each stream since that write
    const char *r_what[kStreams];
    bool freed;  // its block was given back: any access is a use after free
};
std::vector<PageRec> recs;    // one per page of the range
std::vector<uint8_t> level;   // during an op: 0 not granted, 1 readable, 2 writable
std::vector<size_t> touched;  // pages granted during the op; capacity reserved outside the handler
size_t op_page_reads, op_page_writes;  // grants during the op: a page read, then written, counts both

Clock clocks[kStreams];
int nstreams = 1;
int op_stream = -1;  // the running op's stream, or -1
uint32_t op_epoch;
const char *op_what;
const char *last_what[kStreams];  // each stream's last op, for messages

struct Deferred {
    int stream;
    uint32_t epoch;
    Clock seen;                   // its stream's clocks when queued: the ops it follows
    std::vector<size_t> written;  // the pages it writes when it lands
    int (*poll)(void *, int);
    void *arg;
};
std::vector<Deferred> deferred;  // queued and not landed, in queue order
// each stream's landed deferred ops, (epoch, host ms), in epoch order: an event is done no sooner
// than the ops it follows
std::vector<std::pair<uint32_t, double>> landed[kStreams];

struct Pinned {
    char *p;
    size_t len;
    Clock to_host, from_host;  // pending copies that write it (host must not touch) or read it (must not write)
    int prot;
};
std::vector<Pinned> pinned;
struct sigaction old_segv;

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

void set_prot(char *p, size_t len, int prot) {
    if (len && mprotect(p, len, prot)) {
        perror("emu: mprotect");
        abort();
    }
}

void protect_all() { set_prot(base, used, access_depth > 0 ? PROT_READ | PROT_WRITE : PROT_NONE); }

[[noreturn]] void race(size_t pg, bool write, int other, const char *other_what, bool other_wrote) {
    fprintf(stderr,
            "emu: race on device memory %p: %s on stream %d %s it, but %s on stream %d %s it and no event wait orders "
            "the two\n",
            (void *)(base + pg * page), op_what, op_stream, write ? "writes" : "reads", other_what, other,
            other_wrote ? "wrote" : "read");
    abort();
}

// the running op accesses page pg
void touch(size_t pg, bool write) {
    PageRec &r = recs[pg];
    const uint32_t *seen = clocks[op_stream];
    if (r.w_epoch && seen[r.w_stream] < r.w_epoch) race(pg, write, (int)r.w_stream, r.w_what, true);
    if (!write) {
        r.r_epoch[op_stream] = op_epoch, r.r_what[op_stream] = op_what;
        return;
    }
    for (int t = 1; t < nstreams; t++)
        if (r.r_epoch[t] > seen[t]) race(pg, write, t, r.r_what[t], false);
    r.w_epoch = op_epoch, r.w_stream = (uint32_t)op_stream, r.w_what = op_what;
    memset(r.r_epoch, 0, sizeof r.r_epoch);
}

void grant(size_t pg, bool write) {
    if (recs[pg].freed) die("%s touches device memory %p after cudaFree gave it back", op_what, base + pg * page);
    const uint8_t want = write ? 2 : 1;
    if (level[pg] >= want) return;
    if (!level[pg]) touched.push_back(pg);
    (write ? op_page_writes : op_page_reads)++;
    level[pg] = want;
    set_prot(base + pg * page, page, write ? PROT_READ | PROT_WRITE : PROT_READ);
    touch(pg, write);
}

Pinned *find_pinned(const void *p) {
    for (Pinned &h : pinned)
        if ((const char *)p >= h.p && (const char *)p < h.p + h.len) return &h;
    return nullptr;
}

bool pending(const Clock c) {
    for (int t = 1; t < nstreams; t++)
        if (c[t] > clocks[0][t]) return true;
    return false;
}

// what host code may do with a pinned buffer, given the copies it has not waited for
void reprotect(Pinned &h) {
    const int prot = pending(h.to_host) ? PROT_NONE : pending(h.from_host) ? PROT_READ : PROT_READ | PROT_WRITE;
    if (prot != h.prot) set_prot(h.p, h.len, prot);
    h.prot = prot;
}

void host_synced() {
    for (Pinned &h : pinned) reprotect(h);
}

void on_segv(int sig, siginfo_t *si, void *uc) {
    char *a = (char *)si->si_addr;
    if (base && a >= base && a < base + used) {
        if (op_stream < 0)
            die("host code touched device memory at %p (copy it with kern_download, or do the work in a kernel)", a);
        const size_t pg = (size_t)(a - base) / page;
#if defined(__x86_64__)
        const bool write = ((ucontext_t *)uc)->uc_mcontext.gregs[REG_ERR] & 2;
#else
        const bool write = level[pg] == 1;  // a fault on a readable page is a write
#endif
        if (level[pg] == 2) die("fault on granted device page %p", a);
        grant(pg, write || level[pg] == 1);
        return;
    }
    if (find_pinned(a))
        die("host code touched pinned memory at %p while an async copy may still use it (wait for the copy first)", a);
    sigaction(sig, &old_segv, nullptr);  // not ours: fault again, as if this handler were not there
}

int stream_id(int s) {
    if (s <= 0 || s >= nstreams) die("work queued on stream %d, which cudaStreamCreate did not make", s);
    return s;
}

void join(Clock into, const Clock from) {
    for (int t = 0; t < kStreams; t++) into[t] = std::max(into[t], from[t]);
}

double now_ms() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

bool follows(const Clock c, const Deferred &d) { return c[d.stream] >= d.epoch; }

bool follows_pending(const Clock c) {
    for (const Deferred &d : deferred)
        if (follows(c, d)) return true;
    return false;
}

// One pass over the pending ops: each is polled (which lets its transfer progress), and one that
// is ready lands unless it follows an op still pending.
void progress() {
    if (op_stream >= 0) die("deferred work polled inside device work (%s)", op_what);
    for (size_t i = 0; i < deferred.size();) {
        Deferred &d = deferred[i];
        bool blocked = false;
        for (size_t j = 0; j < i && !blocked; j++) blocked = follows(d.seen, deferred[j]);
        if (!d.poll(d.arg, 0) || blocked) {
            i++;
            continue;
        }
        d.poll(d.arg, 1);
        landed[d.stream].emplace_back(d.epoch, now_ms());
        deferred.erase(deferred.begin() + (long)i);
    }
}

// The host waits until every pending op that clock c has seen has landed.
void land_seen(const Clock c) {
    for (progress(); follows_pending(c); progress()) usleep(50);
}

// ---- roofline model ----
// Each op costs max(bytes / HBM bandwidth, flops / peak) on an H100 SXM; the ops between the
// ends of two "optimizer" profiler ranges are one training step. Categories: cuBLASLt calls,
// attention kernels, copies (memcpy, memset, collectives), any other work in the optimizer
// range, and the remaining kernels (elementwise).
enum { kGemm, kAttention, kElementwise, kOptimizer, kCopies, kCategories };
const char *const category_names[kCategories] = {"gemm", "attention", "elementwise", "optimizer", "copies"};
constexpr double kHbmBytesPerSec = 3.0e12, kBf16Flops = 989e12, kFp32Flops = 67e12;
struct Cost {
    double sec[kCategories], bytes, flops;
};
Cost step_cost, last_step;  // the step in progress, the last one finished
// FSDPC_EMU_ROOFLINE=ops: the last step's time per op name too, to see where it goes
std::map<std::string, std::pair<double, int>> step_ops, last_ops;  // name -> (seconds, calls)
int steps_done;
double op_bytes = -1, op_flops;  // declared by the op (bytes < 0: its page grants)
bool op_bf16;
std::vector<std::string> ranges;  // open profiler ranges
bool in_optimizer;

bool starts(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

int category_of(const char *what) {
    if (starts(what, "cublasLt")) return kGemm;
    if (strstr(what, "/attention")) return kAttention;  // a kernel of kernels/cuda/attention*.cu
    if (starts(what, "cudaMem") || starts(what, "nccl")) return kCopies;
    return in_optimizer ? kOptimizer : kElementwise;
}

void account_op() {
    const double bytes = op_bytes >= 0 ? op_bytes : (double)(op_page_reads + op_page_writes) * page;
    const double sec = std::max(bytes / kHbmBytesPerSec, op_flops / (op_bf16 ? kBf16Flops : kFp32Flops));
    step_cost.sec[category_of(op_what)] += sec;
    auto &o = step_ops[op_what];
    o.first += sec, o.second++;
    step_cost.bytes += bytes, step_cost.flops += op_flops;
    op_bytes = -1, op_flops = 0, op_bf16 = false, op_page_reads = op_page_writes = 0;
}

void report_roofline() {
    if (!steps_done) return;
    const Cost &c = last_step;
    double total = 0;
    for (double s : c.sec) total += s;
    fprintf(stderr, "emu: modelled H100 step time: %.4f ms (", total * 1e3);
    for (int i = 0; i < kCategories; i++) fprintf(stderr, "%s%s %.4f ms", i ? ", " : "", category_names[i], c.sec[i] * 1e3);
    fprintf(stderr, "); step %d of the run, %.3f MB moved, %.3f GFLOP\n", steps_done, c.bytes / 1e6, c.flops / 1e9);
    if (strcmp(getenv("FSDPC_EMU_ROOFLINE"), "ops")) return;
    std::vector<std::pair<double, std::string>> by_time;
    for (auto &o : last_ops) by_time.emplace_back(o.second.first, o.first);
    std::sort(by_time.rbegin(), by_time.rend());
    for (auto &t : by_time)
        fprintf(stderr, "emu:   %.5f ms %4d x %s\n", t.first * 1e3, last_ops[t.second].second, t.second.c_str());
}
}  // namespace

extern "C" void emu_op_cost(double bytes, double flops, int bf16) {
    if (op_stream < 0) die("emu_op_cost outside device work");
    if (bytes >= 0) op_bytes = bytes;
    op_flops += flops;
    op_bf16 = op_bf16 || bf16;
}

extern "C" void emu_range_push(const char *name) {
    static bool registered;
    if (!registered && getenv("FSDPC_EMU_ROOFLINE")) registered = true, atexit(report_roofline);
    ranges.emplace_back(name);
    in_optimizer = in_optimizer || ranges.back() == "optimizer";
}

extern "C" void emu_range_pop(void) {
    if (ranges.empty()) die("nvtxRangePop without a push");
    if (ranges.back() == "optimizer") {  // a step ends
        last_step = step_cost, step_cost = Cost{};
        last_ops.swap(step_ops), step_ops.clear();
        steps_done++;
        in_optimizer = false;
    }
    ranges.pop_back();
}

extern "C" void *emu_dev_alloc(size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    if (!base) {
        page = (size_t)sysconf(_SC_PAGESIZE);
        void *p = mmap(nullptr, kReserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            perror("emu: mmap");
            abort();
        }
        base = (char *)p;
        struct sigaction sa = {};
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigaction(SIGSEGV, &sa, &old_segv);
    }
    // whole pages: blocks never share a page, so a page's history is one block's
    const size_t len = (std::max(n, (size_t)1) + page - 1) / page * page;
    if (used + len > kReserve) return nullptr;
    char *p = base + used;
    used += len;
    blocks[p] = len;
    recs.resize(used / page);
    level.resize(used / page);
    touched.reserve(used / page);
    protect_all();
    return p;
}

extern "C" size_t emu_dev_used(void) {
    std::lock_guard<std::mutex> lock(mu);
    return used - freed;
}

extern "C" int emu_dev_free(void *p) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = blocks.find((char *)p);
    if (it == blocks.end()) return 0;
    for (int t = 1; t < nstreams; t++)  // a real cudaFree waits for the whole device, here
        if (clocks[0][t] < clocks[t][t])
            die("cudaFree(%p) while stream %d still runs work the host has not waited for (%s): cudaFree would wait "
                "for it, holding the driver's lock, which can hang NCCL kernels in flight (drain the device first)",
                p, t, last_what[t]);
    for (size_t pg = (size_t)(it->first - base) / page; pg < (size_t)(it->first + it->second - base) / page; pg++)
        recs[pg].freed = true;
    freed += it->second;
    blocks.erase(it);
    return 1;
}

extern "C" void emu_device_sync(void) {
    while (!deferred.empty()) land_seen(deferred.back().seen);
    for (int t = 1; t < nstreams; t++) join(clocks[0], clocks[t]);
    host_synced();
}

extern "C" int emu_is_dev(const void *p) {
    std::lock_guard<std::mutex> lock(mu);
    return base && (const char *)p >= base && (const char *)p < base + used;
}

extern "C" void emu_device_access(int on) {
    std::lock_guard<std::mutex> lock(mu);
    const int was = access_depth > 0;
    access_depth += on ? 1 : -1;
    if (was != (access_depth > 0)) protect_all();
}

extern "C" void *emu_host_alloc(size_t n) {
    if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t len = (std::max(n, (size_t)1) + page - 1) / page * page;
    void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    memset(p, 0xff, len);  // not zeroed, like cudaHostAlloc
    pinned.push_back(Pinned{(char *)p, len, {}, {}, PROT_READ | PROT_WRITE});
    return p;
}

extern "C" int emu_host_free(void *p) {
    for (size_t i = 0; i < pinned.size(); i++)
        if (pinned[i].p == p) {
            if (pending(pinned[i].to_host) || pending(pinned[i].from_host))
                die("cudaFreeHost(%p) while an async copy may still use it", p);
            munmap(pinned[i].p, pinned[i].len);
            pinned.erase(pinned.begin() + (long)i);
            return 1;
        }
    return 0;
}

extern "C" int emu_stream_new(void) {
    if (nstreams == kStreams) die("more than %d streams", kStreams - 1);
    return nstreams++;
}

// an event: its stream's clocks, then the host time it was recorded at
struct Event {
    Clock c;
    double ms;
};
// the host time its work was done: when recorded, or when the last deferred op it follows landed
double event_ms(const Event *e) {
    land_seen(e->c);
    double ms = e->ms;
    for (int t = 1; t < nstreams; t++) {
        auto it = std::upper_bound(landed[t].begin(), landed[t].end(), std::make_pair(e->c[t], 1e300));
        if (it != landed[t].begin()) ms = std::max(ms, std::prev(it)->second);
    }
    return ms;
}
extern "C" void *emu_event_new(void) { return calloc(1, sizeof(Event)); }
extern "C" void emu_event_free(void *e) { free(e); }
extern "C" void emu_event_record(void *e, int s) {
    memcpy(e, clocks[stream_id(s)], sizeof(Clock));
    ((Event *)e)->ms = now_ms();
}
extern "C" float emu_event_elapsed_ms(const void *a, const void *b) {
    return (float)(event_ms((const Event *)b) - event_ms((const Event *)a));
}
extern "C" void emu_stream_wait_event(int s, void *e) { join(clocks[stream_id(s)], (const uint32_t *)e); }

extern "C" int emu_event_query(void *e) {
    if (!deferred.empty()) progress();
    return !follows_pending((const uint32_t *)e);
}

extern "C" void emu_event_sync(void *e) {
    land_seen((const uint32_t *)e);
    join(clocks[0], (const uint32_t *)e);
    host_synced();
}

extern "C" void emu_stream_sync(int s) {
    land_seen(clocks[stream_id(s)]);
    join(clocks[0], clocks[s]);
    host_synced();
}

// op_begin without waiting for the deferred ops the op follows
void begin(int s, const char *what) {
    if (op_stream >= 0) die("device work (%s) started inside device work", what);
    s = stream_id(s);
    join(clocks[s], clocks[0]);  // queued after everything the host has waited for
    op_epoch = ++clocks[s][s];
    op_stream = s, op_what = last_what[s] = what;
}

extern "C" void emu_op_begin(int s, const char *what) {
    if (!deferred.empty()) {  // it runs now, so what it follows lands first
        Clock c;
        memcpy(c, clocks[stream_id(s)], sizeof c);
        join(c, clocks[0]);
        land_seen(c);
    }
    begin(s, what);
}

extern "C" void emu_op_begin_deferred(int s, const char *what, const void *in, size_t n) {
    Clock c;
    memcpy(c, clocks[stream_id(s)], sizeof c);
    join(c, clocks[0]);
    // its input is read now: if a pending op it follows writes those pages, they land first
    const char *lo = (const char *)in, *hi = lo + n;
    bool wait = false;
    for (const Deferred &d : deferred)
        for (size_t pg : d.written) wait = wait || (follows(c, d) && base + pg * page < hi && base + (pg + 1) * page > lo);
    if (wait) land_seen(c);
    begin(s, what);
}

extern "C" void emu_op_defer(int (*poll)(void *arg, int land), void *arg) {
    if (op_stream < 0) die("emu_op_defer outside device work");
    Deferred d{op_stream, op_epoch, {}, {}, poll, arg};
    memcpy(d.seen, clocks[op_stream], sizeof(Clock));
    for (size_t pg : touched)
        if (level[pg] == 2) d.written.push_back(pg);
    deferred.push_back(std::move(d));
}

extern "C" void emu_op_access(const void *p, size_t n, int write) {
    if (!n) return;
    if (!emu_is_dev(p) || !emu_is_dev((const char *)p + n - 1)) die("%s of %p, which is not device memory", op_what, p);
    for (size_t pg = (size_t)((const char *)p - base) / page; pg <= (size_t)((const char *)p + n - 1 - base) / page; pg++)
        grant(pg, write);
}

extern "C" void emu_op_end(void) {
    account_op();
    for (size_t pg : touched) level[pg] = 0;
    touched.clear();
    protect_all();
    op_stream = -1;
}

long emu_reads_back;

extern "C" void emu_op_copy(void *dst, const void *src, size_t n, int to_host) {
    Pinned *h = find_pinned(to_host ? dst : src);
    if (h) set_prot(h->p, h->len, PROT_READ | PROT_WRITE), h->prot = PROT_READ | PROT_WRITE;
    memmove(dst, src, n);
    if (!h) return;  // pageable memory: the real copy is synchronous for the host
    (to_host ? h->to_host : h->from_host)[op_stream] = op_epoch;
    reprotect(*h);
}

// ---- the emulated dlopen/dlsym (emu_device.h) ----

namespace {
struct EmuLib {
    const char *file, *missing_env;
    const EmuSym *syms;
    int n;
};
EmuLib libs[8];
int nlibs;
char dl_error[256];
}  // namespace

extern "C" void emu_dl_register(const char *file, const char *missing_env, const EmuSym *syms, int n) {
    if (nlibs == (int)(sizeof libs / sizeof libs[0])) abort();
    libs[nlibs++] = {file, missing_env, syms, n};
}

extern "C" void *emu_dlopen(const char *file, int) {
    for (int i = 0; i < nlibs; i++) {
        const char *m = getenv(libs[i].missing_env);
        if (!strcmp(file, libs[i].file) && !(m && !strcmp(m, "missing"))) return &libs[i];
    }
    snprintf(dl_error, sizeof dl_error, "%s: cannot open shared object file: No such file or directory", file);
    return nullptr;
}

extern "C" void *emu_dlsym(void *h, const char *name) {
    if (h < (void *)libs || h >= (void *)(libs + nlibs)) return dlsym(h, name);
    const EmuLib *l = (const EmuLib *)h;
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->syms[i].name, name)) return l->syms[i].fn;
    snprintf(dl_error, sizeof dl_error, "undefined symbol: %s", name);
    return nullptr;
}

extern "C" char *emu_dlerror(void) { return dl_error; }
