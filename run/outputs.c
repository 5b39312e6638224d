// outputs: what a training run writes besides checkpoints: the metrics file, TensorBoard events
// and the log's step and memory lines (see run.h).
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/err.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/path.h"
#include "../comm/comm.h"
#include "../comm/io.h"
#include "../kernels/kernels.h"
#include "run.h"

// Appends one line to --metrics_file and flushes it, so a run's curves can be followed and
// survive a crash. A failed write (a full disk) is kept in metrics_error: the step's reduction
// carries it to every rank, and the run ends there (train_step).
static void metrics_put(Run *r, const char *line) {
    if (!r->metrics) return;
    if (r->metrics_newline) fputc('\n', r->metrics), r->metrics_newline = 0;
    fputs(line, r->metrics);
    char what[600];
    snprintf(what, sizeof what, "--metrics_file '%s'", r->cfg->run.metrics_file);
    const char *e = io_write_error(r->metrics, what);
    if (!e) return;
    snprintf(r->metrics_error, sizeof r->metrics_error, "%s (the run stops: no later step is trained or saved)", e);
    fclose(r->metrics);
    r->metrics = NULL;
}

// Flushes the step's TensorBoard events, as metrics_put does its line; a failure ends the run alike.
static void tboard_step_done(Run *r) {
    if (!r->tb) return;
    const char *e = tboard_flush(r->tb);
    if (!e) return;
    if (!r->metrics_error[0])
        snprintf(r->metrics_error, sizeof r->metrics_error, "%s (the run stops: no later step is trained or saved)", e);
    tboard_close(r->tb);
    r->tb = NULL;
}

static int metrics_line(const char *s, size_t n) { return n >= 9 && !memcmp(s, "{\"step\": ", 9); }

// Why an existing --metrics_file must not be appended to, or NULL: it is empty, or its first and
// last lines are metrics lines as metrics_put writes them (a resumed run goes on with its file).
// Anything else is some other file that appending would spoil.
static const char *metrics_file_problem(Run *r, const char *path) {
    static char msg[1400];
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return NULL;  // new, empty, or a stream (/dev/null)
    FILE *f = path_fopen_read(path);
    if (!f) return snprintf(msg, sizeof msg, "cannot read --metrics_file '%s': %s", path_show(path), path_strerror(errno)), msg;
    char head[4096], tail[4097];
    size_t nh = fread(head, 1, sizeof head, f), nt = 0;
    long from = st.st_size > (off_t)(sizeof tail - 1) ? (long)(st.st_size - (off_t)(sizeof tail - 1)) : 0;
    if (fseek(f, from, SEEK_SET) == 0) nt = fread(tail, 1, sizeof tail - 1, f);
    fclose(f);
    const char *bad = metrics_line(head, nh) && !memchr(head, 0, nh) ? NULL : "its first line";
    if (!bad) {  // the last line: after the last line break that is not the file's final byte
        r->metrics_newline = nt > 0 && tail[nt - 1] != '\n';
        size_t end = nt - (nt > 0 && tail[nt - 1] == '\n'), start = end;
        while (start > 0 && tail[start - 1] != '\n') start--;
        if ((start == 0 && from > 0) || !metrics_line(tail + start, end - start) || memchr(tail, 0, nt)) bad = "its last line";
    }
    if (!bad) return NULL;
    return err_text(msg, sizeof msg, "--metrics_file '%s' exists and is not a metrics file (%s is not a line fsdpc writes): it is appended "
             "to only when it holds metrics lines or is empty; give another path, or remove the file", path_show(path), bad);
}

// The folders this process made (make_folder), each with the length of its deepest ancestor that
// was there before: at exit each is removed up to that ancestor while empty, so a run refused or
// stopped before it wrote anything there leaves no empty folder behind.
enum { MADE_MAX = 3 };
static struct {
    char *path;
    size_t kept;
} made[MADE_MAX];
static int nmade;

static void remove_empty_made(void) {
    for (int i = nmade - 1; i >= 0; i--) {  // the last made first: an earlier one may hold it
        char *p = made[i].path;
        for (size_t n = strlen(p); n > made[i].kept && rmdir(p) == 0;) {
            while (n > made[i].kept && p[n - 1] != '/') n--;  // up to the parent
            while (n > made[i].kept && p[n - 1] == '/') n--;
            p[n] = 0;
        }
    }
}

static void note_made(const char *path) {
    size_t kept = strlen(path);
    char *p = path_dup(path);
    struct stat st;
    while (kept > 0 && stat(p, &st) != 0) {  // the part of the path already there
        while (kept > 0 && p[kept - 1] != '/') kept--;
        while (kept > 1 && p[kept - 1] == '/') kept--;
        p[kept] = 0;
    }
    free(p);
    if (kept == strlen(path) || nmade == MADE_MAX) return;
    if (!nmade) atexit(remove_empty_made);
    char *q = path_dup(path);
    for (size_t n = strlen(q); n > kept + 1 && q[n - 1] == '/';) q[--n] = 0;  // "a/b/" climbs as "a/b"
    made[nmade].path = q, made[nmade++].kept = kept;
}

// A metrics file this run created: at exit, while it is still that file and empty (a run refused
// or stopped before its first step), it goes, as its folders and TensorBoard file do; else it
// would stay as an empty file that a data glob over its folder then reads.
static struct {
    char *path;
    dev_t dev;
    ino_t ino;
} made_file;

static void remove_empty_file(void) {
    struct stat st;
    if (stat(made_file.path, &st) == 0 && st.st_dev == made_file.dev && st.st_ino == made_file.ino && S_ISREG(st.st_mode) &&
        st.st_size == 0)
        unlink(made_file.path);
}

static void note_made_file(const char *path) {
    struct stat st;
    if (made_file.path || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return;
    made_file.path = path_dup(path), made_file.dev = st.st_dev, made_file.ino = st.st_ino;
    atexit(remove_empty_file);
}

// Makes the folder `path` (with its parents) that `flag` names: NULL, or the error line.
static const char *make_folder(const char *path, const char *flag) {
    static char err[1400];
    const char *e = comm_folder_problem(path, flag);
    if (e) return snprintf(err, sizeof err, "%s: give a folder (it is made when missing)", e), err;
    char why[1200];
    note_made(path);
    if (path_mkdirs(path, why, sizeof why)) return snprintf(err, sizeof err, "%s: %s", flag, why), err;
    if (access(path, W_OK | X_OK) != 0)
        return snprintf(err, sizeof err, "cannot write to %s '%s': %s", flag, path_show(path), comm_path_error(path, errno)), err;
    return NULL;
}

// Rank 0: the writer lock (base/wlock.h) of an output file or folder, for this run: a second run
// given the same --metrics_file, --tensorboard_dir or trace stops now instead of interleaving its
// lines or files with this one's. A stream (/dev/null, a pipe) needs none. It goes at exit.
static const char *lock_output(Run *r, const char *path, int is_dir, const char *flag, const char *kind) {
    struct stat st;
    if (!is_dir && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return NULL;
    const char *e;
    char *lock = io_lock_output(path, is_dir, r->origin.run_id, flag, kind, &e);
    free(lock);  // the lock keeps its own copy of the name
    return lock ? NULL : e;
}

// Every name the run's outputs will have fits the operating system's limits, checked before any
// work: the longest of each output (the temporaries that carry a writer id, this host's name, a
// pid up to 7 digits) is composed and measured, so that no write fails on a name
// after hours of training (a --checkpoint_dir short enough to pass and long enough that its
// checkpoints' names are not).
void outputs_check_paths(const Config *c) {
    char host[HOST_NAME_MAX + 1] = "localhost", tb[HOST_NAME_MAX + 80], worker[HOST_NAME_MAX + 80];
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    snprintf(tb, sizeof tb, "events.out.tfevents.0000000000.%s.4194304.99", host);
    snprintf(worker, sizeof worker, "%s_4194304.0000000000000000000.pt.trace.json.tmp", host);
    const struct {
        const char *path, *longest, *flag;
        int is_dir;
    } out[] = {
        {c->ckpt.checkpoint_dir, CKPT_LONGEST_NAME, "--checkpoint_dir", 1},
        {c->run.metrics_file, "", "--metrics_file", 0},
        {c->run.tensorboard_dir, tb, "--tensorboard_dir", 1},
        {c->run.trace_file, ".tmp.4194304", "--trace_file", 0},
        {c->run.trace_dir, worker, "--trace_dir", 1},
        // a cache's build folder, tok-<key>.<writer id>.tmp, and its writer lock's temporary
        {c->data.data_cache_dir, "tok-ffffffffffffffffffffffffffffffff.ffffffffffffffff.tmp/.fsdpc-writer.ffffffffffffffff.tmp",
         "--data_cache_dir", 1},
    };
    // each rank measures with its own host name (trace files are every rank's); TensorBoard's are
    // rank 0's alone; the first failure, any rank's, is every rank's line
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++) {
        int mine = out[i].path[0] && (out[i].longest != tb || comm_info.rank == 0);
        comm_check_all(mine ? io_check_output_path(out[i].path, out[i].is_dir, out[i].longest, out[i].flag) : NULL);
    }
}

// Output paths are checked before any work, not when the first checkpoint is due: rank 0
// creates the checkpoint directory (with its parents), opens the metrics file and starts the
// TensorBoard events file. The files may not be one of the run's inputs (noted by
// inputs_resolve) or the other's file.
void outputs_open(Run *r) {
    Config *c = r->cfg;
    static char err[1400];
    const char *e = NULL;
    // generated text goes to stdout: a file there is an output like the others (checked before
    // any folder is made)
    if (comm_info.rank == 0) e = io_output("/dev/stdout", "standard output");
    if (!e && comm_info.rank == 0 && c->gen.num_tokens > 0) e = io_stdout_open();
    if (!e && comm_info.rank == 0 && r->max_steps != 0 && c->ckpt.checkpoint_freq > 0) e = make_folder(c->ckpt.checkpoint_dir, "--checkpoint_dir");
    if (!e && comm_info.rank == 0 && c->run.metrics_file[0]) e = comm_output_path_problem(c->run.metrics_file, "--metrics_file", 0);
    if (!e && comm_info.rank == 0 && c->run.metrics_file[0]) e = io_output(c->run.metrics_file, "--metrics_file");
    if (!e && comm_info.rank == 0 && c->run.metrics_file[0]) e = lock_output(r, c->run.metrics_file, 0, "--metrics_file", "metrics");
    if (!e && comm_info.rank == 0 && c->run.metrics_file[0]) e = metrics_file_problem(r, c->run.metrics_file);
    struct stat st;
    int made_metrics = !e && comm_info.rank == 0 && c->run.metrics_file[0] && stat(c->run.metrics_file, &st) != 0;
    if (!e && comm_info.rank == 0 && c->run.metrics_file[0] && !(r->metrics = fopen(c->run.metrics_file, "a")))
        e = err_text(err, sizeof err, "cannot open --metrics_file '%s' for appending: %s", c->run.metrics_file,
                      comm_path_error(c->run.metrics_file, errno));
    if (!e && made_metrics) note_made_file(c->run.metrics_file);
    // a new events file per run, so nothing of an earlier run's is ever rewritten
    if (!e && comm_info.rank == 0 && c->run.tensorboard_dir[0]) e = make_folder(c->run.tensorboard_dir, "--tensorboard_dir");
    if (!e && comm_info.rank == 0 && c->run.tensorboard_dir[0]) e = lock_output(r, c->run.tensorboard_dir, 1, "--tensorboard_dir", "TensorBoard events");
    if (!e && comm_info.rank == 0 && c->run.tensorboard_dir[0] && !(r->tb = tboard_open(c->run.tensorboard_dir, err, sizeof err))) e = err;
    if (!e && comm_info.rank == 0 && c->run.trace_dir[0]) e = make_folder(c->run.trace_dir, "--trace_dir");
    if (!e && comm_info.rank == 0 && c->run.trace_dir[0]) e = lock_output(r, c->run.trace_dir, 1, "--trace_dir", "traces");
    if (!e && comm_info.rank == 0 && c->run.trace_file[0] && !comm_output_path_problem(c->run.trace_file, "--trace_file", 1))
        e = lock_output(r, c->run.trace_file, 0, "--trace_file", "a trace");  // trace_open names what is wrong with the path
    comm_check_all(e);
    // each rank writes its own --trace_dir file, so each makes the folder where it is missing (a
    // node's own), after rank 0: a folder rank 0 made is then its alone to remove at exit
    if (comm_info.rank != 0 && c->run.trace_dir[0]) comm_check_all(make_folder(c->run.trace_dir, "--trace_dir"));
    else if (c->run.trace_dir[0]) comm_check_all(NULL);
}

// Before the model is built, rank 0 claims --checkpoint_dir for this run (ckpt_claim_dir): a
// second run writing there, or a run into checkpoints of another lineage, stops now rather than
// at its first checkpoint. A run that writes none needs no claim.
// Every rank then checks that it sees that lock: a folder that differs between ranks (a relative
// path from other working directories, node-local storage) would hang the first checkpoint.
void outputs_claim_checkpoint_dir(Run *r) {
    Config *c = r->cfg;
    if (r->max_steps == 0 || c->ckpt.checkpoint_freq <= 0) return;
    comm_check_all(comm_info.rank == 0 ? ckpt_claim_dir(c->ckpt.checkpoint_dir, r->origin.run_id, r->resume_file,
                                                        r->init_h5 ? c->ckpt.init_from : "", c->ckpt.overwrite_checkpoints)
                                       : NULL);
    comm_check_all(ckpt_check_claim(c->ckpt.checkpoint_dir, r->origin.run_id));
}

enum { MEM_TOTAL = KERN_MEM_NCAT, MEM_HELD, MEM_HOST, MEM_ROWS, MEM_N = 2 * MEM_ROWS + 1 };

// "x" MiB when every rank agrees (to 0.1 MiB), else "min..max"
static int mib_range(char *out, size_t cap, double lo, double hi) {
    const double M = 1024.0 * 1024.0;
    if (hi - lo < 0.05 * M) return snprintf(out, cap, "%.1f", hi / M);
    return snprintf(out, cap, "%.1f..%.1f", lo / M, hi / M);
}

// The memory tracker at log steps: per category (kernels.h KernMem), the bytes each rank holds
// now and held at most, then the allocator's view (the process's resident memory on the CPU; on
// a GPU what the caching allocator holds, its cached part, and the host buffers). Rank 0 logs
// the min and max over ranks and appends the same figures, in bytes, to the metrics line as
// "mem": {name: [now min, now max, peak min, peak max]} ("cached": [min, max]).
static void log_memory(int step, char *line, size_t cap, int *len) {
    KernMemStats st;
    kern_mem_stats(&st);
    int gpu = kern_on_gpu(), rows = gpu ? MEM_ROWS : MEM_HOST;
    double v[2 * MEM_N];  // now and peak per row, then cached; negated copies give the minima
    for (int c = 0; c < KERN_MEM_NCAT; c++) v[2 * c] = st.now[c], v[2 * c + 1] = st.peak[c];
    v[2 * MEM_TOTAL] = st.total, v[2 * MEM_TOTAL + 1] = st.total_peak;
    v[2 * MEM_HELD] = st.held, v[2 * MEM_HELD + 1] = st.held_peak;
    v[2 * MEM_HOST] = st.host, v[2 * MEM_HOST + 1] = st.host_peak;
    v[MEM_N - 1] = st.cached;
    for (int i = 0; i < MEM_N; i++) v[MEM_N + i] = -v[i];
    comm_allreduce_max_f64(comm_world(), v, 2 * MEM_N);
    if (comm_info.rank != 0) return;
    const double *hi = v, *lo_neg = v + MEM_N;
    char text[1024];
    size_t n = (size_t)snprintf(text, sizeof text, "Batch %d memory (MiB now/peak, min..max over ranks when they differ):", step);
    for (int row = 0; row < rows; row++) {
        const char *name = row < KERN_MEM_NCAT ? kern_mem_name(row)
                           : row == MEM_TOTAL  ? "total"
                           : row == MEM_HELD   ? (gpu ? "reserved" : "rss")
                                               : "host";
        n += snprintf(text + n, sizeof text - n, "%s %s ", row >= MEM_HELD ? ";" : row ? "," : "", name);
        n += mib_range(text + n, sizeof text - n, -lo_neg[2 * row], hi[2 * row]);
        n += snprintf(text + n, sizeof text - n, "/");
        n += mib_range(text + n, sizeof text - n, -lo_neg[2 * row + 1], hi[2 * row + 1]);
        if (row == MEM_HELD && gpu) {
            n += snprintf(text + n, sizeof text - n, " (cached ");
            n += mib_range(text + n, sizeof text - n, -lo_neg[MEM_N - 1], hi[MEM_N - 1]);
            n += snprintf(text + n, sizeof text - n, ")");
        }
        if (*len)
            *len += snprintf(line + *len, cap - *len, "%s\"%s\": [%.0f, %.0f, %.0f, %.0f]", row ? ", " : ", \"mem\": {", name,
                             -lo_neg[2 * row], hi[2 * row], -lo_neg[2 * row + 1], hi[2 * row + 1]);
    }
    log_msg("%s\n", text);
    if (*len && gpu) *len += snprintf(line + *len, cap - *len, ", \"cached\": [%.0f, %.0f]", -lo_neg[MEM_N - 1], hi[MEM_N - 1]);
    if (*len) *len += snprintf(line + *len, cap - *len, "}");
}

int outputs_step(Run *r, int done, float lr, const StepResult *s, char *line, size_t cap) {
    int len = 0;
    if (!s->applied) {
        snprintf(line, cap, "{\"step\": %d, \"loss\": null, \"lr\": %.9g, \"grad_norm\": null, \"skipped\": true}\n", done, lr);
        metrics_put(r, line);
        if (r->tb) tboard_scalar(r->tb, "train/lr", done, lr), tboard_step_done(r);  // before a stop just after
        return 0;
    }
    if (r->metrics)  // tokens: loss-bearing targets, this step's and those since this run started
        len = snprintf(line, cap, "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens\": %.0f, "
                       "\"loss_tokens\": %.0f", done, s->loss, lr, s->gnorm, r->tokens_seen, s->tokens);
    if (r->metrics && r->cfg->model.num_experts)
        len += snprintf(line + len, cap - len, ", \"router_aux_loss\": %.9g, \"router_z_loss\": %.9g", s->router_aux, s->router_z);
    if (r->metrics && s->router_dropped >= 0) len += snprintf(line + len, cap - len, ", \"router_dropped\": %.9g", s->router_dropped);
    if (r->tb) {  // TensorBoard's scalars: the metrics line's figures (docs/observability.md)
        tboard_scalar(r->tb, "train/loss", done, s->loss);
        tboard_scalar(r->tb, "train/lr", done, lr);
        tboard_scalar(r->tb, "train/grad_norm", done, s->gnorm);
        tboard_scalar(r->tb, "train/tokens", done, r->tokens_seen);
        if (r->cfg->model.num_experts) {
            tboard_scalar(r->tb, "train/router_aux_loss", done, s->router_aux);
            tboard_scalar(r->tb, "train/router_z_loss", done, s->router_z);
            if (s->router_dropped >= 0) tboard_scalar(r->tb, "train/router_dropped", done, s->router_dropped);
        }
    }
    return len;
}

void outputs_log_point(Run *r, int done, float lr, const StepResult *s, char *line, size_t cap, int *len) {
    int T = r->cfg->model.max_context_width;
    double dt = clock_now_s() - r->t_log, samples = (double)r->log_steps * r->order.global_batch;
    // the largest rank's peak: device memory on a GPU, resident memory on the CPU
    double mem = kern_on_gpu() ? kern_peak_mem_mib() : comm_peak_mem_mib();
    comm_allreduce_max_f64(comm_world(), &mem, 1);
    char mfu[48] = "";
    double peak = kern_peak_flops();
    if (peak > 0)  // MFU against the dense bf16 peak, over the positions computed
        snprintf(mfu, sizeof mfu, ", MFU: %.1f%%", 100.0 * samples * T / dt * r->flops_per_token / (peak * comm_info.world));
    // tokens/sec counts loss-bearing targets: padding and prompts are work, not progress
    char router[112] = "";  // a mixture of experts' balance, in the recipes' line after its fields
    if (r->cfg->model.num_experts) {
        int n = snprintf(router, sizeof router, ", router aux: %.5f, router z: %.5f", s->router_aux, s->router_z);
        if (s->router_dropped >= 0 && n >= 0 && (size_t)n < sizeof router)  // a diverged run's huge z fills the line
            snprintf(router + n, sizeof router - n, ", dropped: %.2f%%", 100.0 * s->router_dropped);
    }
    log_msg("Batch %d Loss: %.5f, Speed: %.2f samples/sec, lr: %.6f, tokens/sec: %.0f%s, grad_norm: %.4f, loss tokens: %.0f, "
            "mem: %.0f MiB%s\n", done, s->loss, samples / dt, lr, r->log_tokens / dt, mfu, s->gnorm, s->tokens, mem, router);
    double cut[2] = {(double)r->truncated, (double)r->lost};
    comm_allreduce_sum_f64(comm_world(), cut, 2);
    if (cut[0] > 0)
        log_msg("%lld row%s longer than the context were cut to %d+1 tokens so far (%lld of them left with no loss-bearing "
                 "target)\n", (long long)cut[0], cut[0] == 1 ? "" : "s", T, (long long)cut[1]);
    if (*len)  // measured, unlike the rest of the line: byte-exact comparisons drop these
        *len += snprintf(line + *len, cap - *len, ", \"tokens_per_s\": %.6g, \"mem_mib\": %.0f", r->log_tokens / dt, mem);
    if (*len && peak > 0)
        *len += snprintf(line + *len, cap - *len, ", \"mfu\": %.4g", samples * T / dt * r->flops_per_token / (peak * comm_info.world));
    if (r->tb && s->applied) {  // a skipped step's line has only lr (outputs_step)
        tboard_scalar(r->tb, "perf/tokens_per_s", done, r->log_tokens / dt);
        tboard_scalar(r->tb, "mem/peak_mib", done, mem);
        if (peak > 0) tboard_scalar(r->tb, "perf/mfu", done, samples * T / dt * r->flops_per_token / (peak * comm_info.world));
    }
    log_memory(done, line, cap, len);
    r->t_log = clock_now_s();
    r->log_steps = 0;
    r->log_tokens = 0.0;
}

void outputs_validation(Run *r, int done, double vl, char *line, size_t cap, int *len) {
    if (isnan(vl)) {  // nothing validated: no target bore loss
        if (*len) *len += snprintf(line + *len, cap - *len, ", \"val_loss\": null");
        return;
    }
    if (*len) *len += snprintf(line + *len, cap - *len, ", \"val_loss\": %.9g", vl);
    if (r->tb) tboard_scalar(r->tb, "val/loss", done, vl);
}

void outputs_step_done(Run *r, char *line, size_t cap, int len) {
    if (len) {
        snprintf(line + len, cap - len, "}\n");
        metrics_put(r, line);
    }
    tboard_step_done(r);
}

void outputs_close(Run *r) {
    const Config *c = r->cfg;
    if (r->metrics && fclose(r->metrics) != 0 && !r->metrics_error[0])
        snprintf(r->metrics_error, sizeof r->metrics_error, "cannot write --metrics_file '%s': %s", c->run.metrics_file, strerror(errno));
    r->metrics = NULL;
    const char *tb_failed = tboard_close(r->tb);
    if (tb_failed && !r->metrics_error[0])
        snprintf(r->metrics_error, sizeof r->metrics_error, "%s", tb_failed);
    r->tb = NULL;
    // the last step's line and events
    if (c->run.metrics_file[0] || c->run.tensorboard_dir[0]) comm_check_all(r->metrics_error[0] ? r->metrics_error : NULL);
}
