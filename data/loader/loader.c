// loader: the seeded, layout-free sample order, reading samples and rows into micro-batches, and the
// background thread that reads the next one.
#include "../data.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../base/err.h"
#include "../../base/limits.h"
#include "../../base/rng.h"

// A bijection on [0, n): a 4-round Feistel network on the next even power of two, walking the
// cycle until the value lands inside the range. O(1) memory whatever the dataset size.
static uint64_t permute(uint64_t i, uint64_t n, uint64_t key) {
    int bits = 2;
    while (((uint64_t)1 << bits) < n) bits += 2;
    int half = bits / 2;
    uint64_t mask = ((uint64_t)1 << half) - 1;
    do {
        uint64_t l = i >> half, r = i & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t nl = r, nr = l ^ (rng_splitmix64(key ^ rng_splitmix64(r + ((uint64_t)round << 56))) & mask);
            l = nl;
            r = nr;
        }
        i = (l << half) | r;
    } while (i >= n);
    return i;
}

uint64_t data_train_chunk(const Dataset *d, uint64_t seed, uint64_t g) {
    uint64_t epoch = g / d->nchunks;
    return permute(g % d->nchunks, d->nchunks, rng_splitmix64(seed) ^ rng_splitmix64(epoch + 1));
}

// Token t of a sample's raw bytes, sign-extended (HDF5 integers may be signed or big-endian).
static uint64_t token_at(const TokenFile *f, const unsigned char *raw, int t) {
    const unsigned char *p = raw + (size_t)t * f->width;
    uint64_t v = 0;
    for (int k = 0; k < f->width; k++) v |= (uint64_t)p[f->big_endian ? f->width - 1 - k : k] << (8 * k);
    if (f->is_signed && f->width < 8 && (v >> (8 * f->width - 1)) & 1) v |= ~(uint64_t)0 << (8 * f->width);
    return v;
}

// Reads n bytes at off of f (its labels with labels) into raw, retrying short reads; 0, or -1 with
// err set.
static int read_exact(const Dataset *d, const TokenFile *f, int labels, unsigned char *raw, size_t n, off_t off, char *err,
                      size_t errlen) {
    int fd = data_file_fd(d, f, labels, err, errlen);
    if (fd < 0) return -1;
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(fd, raw + done, n - done, off + (off_t)done);
        if (r <= 0) {
            snprintf(err, errlen, "cannot read data file '%s' at byte %lld: %s", labels ? f->lab_path : f->path, (long long)(off + done),
                     r < 0 ? strerror(errno) : "file shrank (truncated?)");
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

// Chunk c of a concatenated stream: T+1 tokens from stream token begin + c*T, across files.
static int read_stream_chunk(const Dataset *d, uint64_t c, int32_t *inp, int32_t *tgt, unsigned char *raw, char *err, size_t errlen) {
    uint64_t tok = d->begin + c * (uint64_t)d->T;
    int lo = 0, hi = d->nfiles - 1;  // the file holding stream token tok
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->tok_start[mid] <= tok) lo = mid;
        else hi = mid - 1;
    }
    for (int t = 0; t <= d->T;) {
        const TokenFile *f = &d->files[lo];
        uint64_t at = tok + (uint64_t)t - d->tok_start[lo], have = d->tok_start[lo + 1] - d->tok_start[lo] - at;
        if (have == 0) {  // this file is used up (or empty): the stream goes on in the next
            lo++;
            continue;
        }
        int take = (uint64_t)(d->T + 1 - t) < have ? d->T + 1 - t : (int)have;
        if (read_exact(d, f, 0, raw, (size_t)take * f->width, (off_t)(f->header + at * f->width), err, errlen)) return -1;
        for (int k = 0; k < take; k++) {
            uint64_t v = token_at(f, raw, k);
            if (v >= (uint64_t)d->vocab)
                return err_set(err, errlen, "data file '%s' holds token id %llu at token %llu, not below --vocab_size %d", f->path,
                                (unsigned long long)v, (unsigned long long)(at + k), d->vocab);
            if (t + k < d->T) inp[t + k] = (int32_t)v;
            if (t + k > 0) tgt[t + k - 1] = (int32_t)v;
        }
        t += take;
    }
    return 0;
}

// What to do about id v at or above the model's vocabulary in file f: a file that records no
// vocabulary most often holds GPT-2's ids (minimal_fsdp's HDF5 rows, nanoGPT's .bin), which the
// byte tokenizer's default of 256 cannot cover.
static void vocab_hint(const TokenFile *f, uint64_t v, char *out, size_t len) {
    if (f->vocab) snprintf(out, len, "; the file records a vocabulary of %d (attribute %s)", f->vocab, f->vocab_attr);
    else if (v < 50257) snprintf(out, len, "; the file records no vocabulary: for GPT-2's ids%s pass --vocab_size 50257, or "
                                 "--tokenizer with GPT-2's encoder.json + vocab.bpe", f->row ? " (minimal_fsdp's data)" : "");
    else snprintf(out, len, "; the file records no vocabulary: pass --vocab_size, or the --tokenizer its ids come from");
}

// Reads chunk c as (inp, tgt); returns 0, or -1 with a message naming the file in err.
static int read_chunk(const Dataset *d, uint64_t c, int32_t *inp, int32_t *tgt, unsigned char *raw, char *err,
                      size_t errlen) {
    if (d->concat) return read_stream_chunk(d, c, inp, tgt, raw, err, errlen);
    int lo = 0, hi = d->nfiles - 1;  // the file whose chunk range holds c
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->chunk_start[mid] <= c) lo = mid;
        else hi = mid - 1;
    }
    const TokenFile *f = &d->files[lo];
    uint64_t k = c - d->chunk_start[lo], row = f->begin + k;  // HDF5: the sample's row
    uint64_t tok = f->row ? row * f->row : f->begin + k * d->T;
    if (read_exact(d, f, 0, raw, (size_t)(d->T + 1) * f->width, (off_t)(f->header + tok * f->width), err, errlen)) return -1;
    for (int t = 0; t <= d->T; t++) {
        uint64_t v = token_at(f, raw, t);
        if (v >= (uint64_t)d->vocab) {  // a negative signed id wraps to a huge value: caught too
            char id[32], hint[200] = "";
            if (f->is_signed) snprintf(id, sizeof id, "%lld", (long long)v);
            else snprintf(id, sizeof id, "%llu", (unsigned long long)v);
            if (!f->is_signed || (int64_t)v >= 0) vocab_hint(f, v, hint, sizeof hint);  // a negative id is damage
            if (f->row)
                snprintf(err, errlen, "data file '%s' holds token id %s in sample (row) %llu, position %d of dataset '%s', "
                         "not in [0, --vocab_size %d)%s", f->path, id, (unsigned long long)row, t, f->dset, d->vocab, hint);
            else
                snprintf(err, errlen, "data file '%s' holds token id %s at token %llu, not below --vocab_size %d%s", f->path,
                         id, (unsigned long long)(tok + t), d->vocab, hint);
            return -1;
        }
        if (t < d->T) inp[t] = (int32_t)v;
        if (t > 0) tgt[t - 1] = (int32_t)v;
    }
    return 0;
}

static void synthetic_sample(const Dataset *d, uint64_t seed, uint64_t g, int32_t *inp, int32_t *tgt) {
    uint64_t key = rng_splitmix64(seed ^ rng_splitmix64(g));  // every token a hash of (seed, sample, position)
    for (int t = 0; t <= d->T; t++) {
        int32_t tok = (int32_t)(rng_splitmix64(key + t) % (uint64_t)d->vocab);
        if (t < d->T) inp[t] = tok;
        if (t > 0) tgt[t - 1] = tok;
    }
}

// ---- finetuning rows and document boundaries (a cache's index) ----

// The file holding global row (or stream token, by tok_start) x of starts (nfiles + 1).
static int file_of(const uint64_t *starts, int nfiles, uint64_t x) {
    int lo = 0, hi = nfiles - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (starts[mid] <= x) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// The chunk (stream sample or row) of global sample g.
static uint64_t sample_chunk(const Dataset *d, uint64_t seed, uint64_t g, int shuffled) {
    return shuffled ? data_train_chunk(d, seed, g) : g % d->nchunks;
}

// Row c's file and its token range [*s, *e) there.
static const TokenFile *row_range(const Dataset *d, uint64_t c, uint64_t *s, uint64_t *e) {
    int f = file_of(d->chunk_start, d->nfiles, c);
    const TokenFile *tf = &d->files[f];
    uint64_t k = tf->begin + (c - d->chunk_start[f]);
    *s = tf->idx[k];
    *e = tf->idx[k + 1];
    return tf;
}

int data_sample_len(const Dataset *d, uint64_t seed, uint64_t g, int shuffled) {
    if (!d->rows) return d->T;
    uint64_t s, e;
    row_range(d, sample_chunk(d, seed, g, shuffled), &s, &e);
    uint64_t n = e - s;
    return n < 2 ? 0 : n > (uint64_t)d->T ? d->T : (int)n;
}

// Row c into positions [0, len) of inp/tgt (len = its tokens, at most T): inputs its ids, targets
// its labels shifted by one (-1: no loss; the last input predicts nothing). Returns len, or -1.
static int read_row(const Dataset *d, uint64_t c, int32_t *inp, int32_t *tgt, unsigned char *raw, DataBatch *st,
                    char *err, size_t errlen) {
    uint64_t s, e;
    const TokenFile *f = row_range(d, c, &s, &e);
    uint64_t n = e - s, take = n > (uint64_t)d->T + 1 ? (uint64_t)d->T + 1 : n;
    if (n < 2) return 0;  // nothing to predict: the row adds no position
    if (read_exact(d, f, 0, raw, (size_t)take * f->width, (off_t)(f->header + s * f->width), err, errlen)) return -1;
    unsigned char *lab = raw + (size_t)take * f->width;
    if (read_exact(d, f, 1, lab, (size_t)take * 4, (off_t)(TOKFILE_HEADER_BYTES + s * 4), err, errlen)) return -1;
    int len = (int)(take < (uint64_t)d->T ? take : (uint64_t)d->T), bearing = 0;
    for (int t = 0; t < len; t++) {
        uint64_t v = token_at(f, raw, t);
        if (v >= (uint64_t)d->vocab)
            return err_set(err, errlen, "data file '%s' holds token id %llu at token %llu, not below --vocab_size %d", f->path,
                            (unsigned long long)v, (unsigned long long)(s + t), d->vocab);
        inp[t] = (int32_t)v;
        int32_t y = -1;
        if ((uint64_t)t + 1 < take) {
            const unsigned char *q = lab + 4 * ((size_t)t + 1);
            uint32_t u = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
            if (u != UINT32_MAX && u >= (uint32_t)d->vocab)
                return err_set(err, errlen, "data cache labels '%s' hold label %u at token %llu, not below --vocab_size %d", f->path, u,
                                (unsigned long long)(s + t + 1), d->vocab);
            y = u == UINT32_MAX ? -1 : (int32_t)u;
        }
        tgt[t] = y;
        bearing += y >= 0;
    }
    if (n > (uint64_t)d->T + 1) {
        st->truncated++;
        if (!bearing) st->lost++;
    }
    return len;
}

// Smallest document start of the concatenated stream after stream token x (UINT64_MAX: none).
static uint64_t doc_next_after(const Dataset *d, uint64_t x) {
    for (int f = file_of(d->tok_start, d->nfiles, x); f < d->nfiles; f++) {
        const TokenFile *tf = &d->files[f];
        uint64_t base = d->tok_start[f];
        // first index entry (a document start, file-local) above x - base
        uint64_t lo = 0, hi = tf->nidx ? tf->nidx - 1 : 0;  // the last entry is the file's end, no start
        while (lo < hi) {
            uint64_t mid = (lo + hi) / 2;
            if (base + tf->idx[mid] > x) hi = mid;
            else lo = mid + 1;
        }
        if (lo < (tf->nidx ? tf->nidx - 1 : 0) && base + tf->idx[lo] > x) return base + tf->idx[lo];
        if (f + 1 < d->nfiles && d->tok_start[f + 1] > x) return d->tok_start[f + 1];  // a part's start is a document's
    }
    return UINT64_MAX;
}

// Stream chunk c (already in inp/tgt) kept inside its documents: kstart from the index, and the
// target at each document's last token (the next one's first) bears no loss.
static void stream_docs(const Dataset *d, uint64_t c, int32_t *tgt, int32_t *ks) {
    uint64_t tok = d->begin + c * (uint64_t)d->T, next = doc_next_after(d, tok);
    int start = 0;
    for (int t = 0; t < d->T; t++) {
        if (tok + (uint64_t)t == next) {
            start = t;
            next = doc_next_after(d, next);
        }
        ks[t] = start;
        if (tok + (uint64_t)t + 1 == next) tgt[t] = -1;
    }
}

DataBatch *data_batch_new(int B, int T) {
    DataBatch *b = callocCheck(1, sizeof *b);
    b->inp = mallocCheck((size_t)B * T * sizeof(int32_t));
    b->tgt = mallocCheck((size_t)B * T * sizeof(int32_t));
    b->kstart = mallocCheck((size_t)B * T * sizeof(int32_t));
    return b;
}

void data_batch_free(DataBatch *b) {
    if (!b) return;
    free(b->inp);
    free(b->tgt);
    free(b->kstart);
    free(b);
}

DataPlan *data_plan_new(int B, int T) {
    DataPlan *p = callocCheck(1, sizeof *p);
    p->first = callocCheck((size_t)B + 1, sizeof(int));
    p->samples = callocCheck((size_t)B * T, sizeof(uint64_t));
    return p;
}

void data_plan_free(DataPlan *p) {
    if (!p) return;
    free(p->first);
    free(p->samples);
    free(p);
}

void data_plan_rows(DataPlan *p, int B, uint64_t first) {
    p->nrows = B;
    for (int b = 0; b <= B; b++) p->first[b] = b;
    for (int b = 0; b < B; b++) p->samples[b] = first + b;
}

struct DataLoader {
    const Dataset *d;
    uint64_t seed;
    int B, shuffled;
    DataBatch *batch;    // the batch being read or ready
    DataPlan *plan;      // its plan
    unsigned char *raw;  // one sample's bytes (and a row's labels)
    int pending, ready, quit;
    char err[1024];
    char line[1100];     // data_loader_next's error: the batch, then err
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void copy_plan(DataPlan *dst, const DataPlan *src, int B) {
    dst->nrows = src->nrows;
    memcpy(dst->first, src->first, ((size_t)B + 1) * sizeof(int));
    memcpy(dst->samples, src->samples, (size_t)src->first[src->nrows] * sizeof(uint64_t));
}

static int same_plan(const DataPlan *a, const DataPlan *b) {
    if (a->nrows != b->nrows || memcmp(a->first, b->first, ((size_t)a->nrows + 1) * sizeof(int))) return 0;
    return !memcmp(a->samples, b->samples, (size_t)a->first[a->nrows] * sizeof(uint64_t));
}

static void read_batch(DataLoader *l) {
    const Dataset *d = l->d;
    const DataPlan *p = l->plan;
    DataBatch *o = l->batch;
    int T = d->T;
    l->err[0] = 0;
    o->docs = d->rows || d->doc_mask;
    o->loss_tokens = o->truncated = o->lost = 0;
    for (int b = 0; b < l->B && !l->err[0]; b++) {
        int32_t *inp = o->inp + (size_t)b * T, *tgt = o->tgt + (size_t)b * T, *ks = o->kstart + (size_t)b * T;
        int at = 0;  // positions filled
        for (int i = b < p->nrows ? p->first[b] : 0; b < p->nrows && i < p->first[b + 1] && !l->err[0]; i++) {
            uint64_t g = p->samples[i];
            char err[sizeof l->err - 32];
            int rc = 0;
            if (!d->nchunks) {
                synthetic_sample(d, l->shuffled ? l->seed : 0x5eed, g, inp, tgt);
                rc = T;
            } else if (d->rows) {
                rc = read_row(d, sample_chunk(d, l->seed, g, l->shuffled), inp + at, tgt + at, l->raw, o, err, sizeof err);
            } else {
                uint64_t c = sample_chunk(d, l->seed, g, l->shuffled);
                rc = read_chunk(d, c, inp, tgt, l->raw, err, sizeof err) ? -1 : T;
                if (rc > 0 && d->doc_mask) stream_docs(d, c, tgt, ks);
            }
            if (rc < 0) {
                snprintf(l->err, sizeof l->err, "sample %llu: %s", (unsigned long long)g, err);
                break;
            }
            if (rc > T - at) {  // a plan that overfills a row is a bug, not a data error
                snprintf(l->err, sizeof l->err, "sample %llu does not fit its row (%d + %d > %d)", (unsigned long long)g, at, rc, T);
                break;
            }
            if (d->rows || !d->doc_mask)
                for (int t = at; t < at + rc; t++) ks[t] = at;
            at += rc;
        }
        if (at < T) {  // padding: a document of its own that bears no loss, with a fixed id
            for (int t = at; t < T; t++) inp[t] = 0, tgt[t] = -1, ks[t] = at;
        }
        for (int t = 0; t < T; t++) o->loss_tokens += tgt[t] >= 0;
    }
}

static void *loader_main(void *arg) {
    DataLoader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->pending && !l->quit) pthread_cond_wait(&l->cv, &l->mu);
        if (l->quit) break;
        pthread_mutex_unlock(&l->mu);
        read_batch(l);
        pthread_mutex_lock(&l->mu);
        l->pending = 0;
        l->ready = 1;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

DataLoader *data_loader_new(const Dataset *d, uint64_t seed, int B, int shuffled) {
    DataLoader *l = callocCheck(1, sizeof *l);
    l->d = d;
    l->seed = seed;
    l->B = B;
    l->shuffled = shuffled;
    l->batch = data_batch_new(B, d->T);
    l->plan = data_plan_new(B, d->T);
    l->raw = mallocCheck((size_t)(d->T + 1) * 12);  // the widest token (HDF5 int64), or a row's ids and labels
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    int e = pthread_create(&l->thread, NULL, loader_main, l);
    if (e) {
        const char *lim = limits_summary();
        err_fatal("cannot start the data loader thread: %s%s%s: raise the limit or lower --num_threads", strerror(e),
                  lim[0] ? " under " : "", lim);
    }
    return l;
}

// caller holds the lock: waits for the batch in flight, if any
static void wait_idle(DataLoader *l) {
    while (l->pending) pthread_cond_wait(&l->cv, &l->mu);
}

static void request(DataLoader *l, const DataPlan *p) {
    copy_plan(l->plan, p, l->B);
    l->ready = 0;
    l->pending = 1;
    pthread_cond_broadcast(&l->cv);
}

const char *data_loader_next(DataLoader *l, const DataPlan *cur, const DataPlan *next, DataBatch *out, const char *what) {
    size_t n = (size_t)l->B * l->d->T;
    pthread_mutex_lock(&l->mu);
    wait_idle(l);
    if (!l->ready || !same_plan(l->plan, cur)) {  // not prefetched (first batch, or after a jump)
        request(l, cur);
        wait_idle(l);
    }
    if (l->err[0]) {
        pthread_mutex_unlock(&l->mu);
        return err_text(l->line, sizeof l->line, "%s%s%s", what ? what : "", what ? ": " : "", l->err);
    }
    const DataBatch *b = l->batch;
    memcpy(out->inp, b->inp, n * sizeof(int32_t));
    memcpy(out->tgt, b->tgt, n * sizeof(int32_t));
    memcpy(out->kstart, b->kstart, n * sizeof(int32_t));
    out->docs = b->docs;
    out->loss_tokens = b->loss_tokens;
    out->truncated = b->truncated;
    out->lost = b->lost;
    l->ready = 0;
    if (next) request(l, next);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

void data_loader_free(DataLoader *l) {
    pthread_mutex_lock(&l->mu);
    wait_idle(l);
    l->quit = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    data_batch_free(l->batch);
    data_plan_free(l->plan);
    free(l->raw);
    free(l);
}
