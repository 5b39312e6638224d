// data: file formats, the seeded sample order and the background loader.
#include "data.h"
#include "cache.h"
#include "h5data.h"
#include "hfdata.h"
#include "sniff.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "../kernels/rng.h"

void data_bundled_path(char *out, size_t len) {
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(out, len, "%s/data/tinyshakespeare.txt", slash ? exe : ".");
}



// HDF5's superblock sits at 0 or, after a user block, at 512, 1024, 2048, ...
static int is_hdf5(const TokenFile *f, const unsigned char *head, size_t got, uint64_t size) {
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    for (uint64_t off = 0; off + 8 <= size; off = off ? 2 * off : 512) {
        unsigned char b[8];
        errno = 0;  // a short read sets none
        if (off + 8 <= got) memcpy(b, head + off, 8);
        else if (pread(f->fd, b, 8, (off_t)off) != 8)
            comm_fail_all("cannot read data file '%s' at byte %llu: %s", f->path, (unsigned long long)off,
                          errno ? strerror(errno) : "file shrank");
        if (!memcmp(b, sig, 8)) return 1;
    }
    return 0;
}

// Recognises the format from the first bytes and the size; fills header/width and returns the
// token count (HDF5: the row count, f->row set), or fails on every rank naming the file.
static uint64_t probe(TokenFile *f, uint64_t size) {
    unsigned char head[LLMC_HEADER_BYTES] = {0};
    ssize_t got = pread(f->fd, head, sizeof head, 0);
    if (got < 0) comm_fail_all("cannot read data file '%s': %s", f->path, strerror(errno));
    if (is_hdf5(f, head, (size_t)got, size)) {
        uint64_t rows;
        const char *err = data_h5_layout(f, size, &rows);
        if (err) comm_fail_all("%s", err);
        return rows;
    }
    uint64_t ntok;
    const char *err = data_parse_header(head, (size_t)got, size, f->path, f, &ntok);
    if (err) comm_fail_all("%s", err);
    return ntok;
}



static int data_refuse(const char *path, const Sniff *s, char *err, size_t errlen) {
    return snprintf(err, errlen, "data file '%s' is %s, which fsdpc does not read%s%s", path, s->what, s->hint[0] ? "; " : "", s->hint), -1;
}

// How file `path` is read: 1 as tokens (a shard, HDF5, or text as bytes under the byte
// tokenizer), 0 as documents into the cache (in->kind, in->comp set), -1 refused (err set).
static int data_classify(const char *path, const Tokenizer *tok, CacheInput *in, char *err, size_t errlen) {
    Sniff s;
    if (sniff_path(path, &s, err, errlen)) return -1;
    in->path = path;
    in->comp = DOCS_PLAIN;
    SniffFormat what = s.format;
    if (what == SNIFF_GZIP || what == SNIFF_ZSTD) {
        in->comp = what == SNIFF_GZIP ? DOCS_GZIP : DOCS_ZSTD;
        what = s.inner;
        if (what != SNIFF_JSONL && what != SNIFF_TEXT) return data_refuse(path, &s, err, errlen);
    }
    switch (what) {
    case SNIFF_TOKSHARD: case SNIFF_LLMC: case SNIFF_NANOGPT_BIN: case SNIFF_HDF5: return 1;
    case SNIFF_TEXT:
        if (in->comp == DOCS_PLAIN && tok_is_byte(tok)) return 1;
        in->kind = DOCS_TEXT;
        return 0;
    case SNIFF_JSONL: in->kind = DOCS_JSONL; return 0;
    case SNIFF_ARROW_STREAM: case SNIFF_ARROW_FILE: in->kind = DOCS_ARROW; return 0;
    case SNIFF_PARQUET: in->kind = DOCS_PARQUET; return 0;
    default: return data_refuse(path, &s, err, errlen);
    }
}

// The token files of a source: its files as they are, documents replaced by their cache parts.
// *found: 1, 0 (no such split) or -1 (stopped by a signal during a cache build).
static char **data_token_paths(const DataSource *src, int vocab, int *n, int *found, int *all_docs) {
    HfFiles hf;
    memset(&hf, 0, sizeof hf);
    char err[2048] = "";
    int rc = hf_resolve(src->spec, src->config ? src->config : "", src->split ? src->split : "train", &hf, err, sizeof err);
    double failing = rc < 0;
    comm_allreduce_sum_f64(comm_world(), &failing, 1);
    if (rc < 0 && failing < comm_info.world)  // a file system that differs between nodes: say where
        snprintf(err + strlen(err), sizeof err - strlen(err), " (on rank %d; not every rank sees the same files: is the data on storage every node shares?)",
                 comm_info.rank);
    comm_check_all(rc < 0 ? err : NULL);
    double rcs[2] = {rc, -rc};  // max and -min over ranks
    comm_allreduce_max_f64(comm_world(), rcs, 2);
    if (rcs[0] != -rcs[1]) comm_fail_all("%s '%s' is found on some ranks and not on others: is it on storage every node sees?", src->label, src->spec);
    *found = rc;
    *n = 0;
    if (!rc) return NULL;
    if (!hf.nfiles) comm_fail_all("no data files match '%s'", src->spec);
    if (comm_info.rank == 0 && !(hf.nfiles == 1 && !strcmp(hf.files[0], src->spec))) comm_log("%s '%s': %s\n", src->label, src->spec, hf.desc);
    CacheInput *docs = callocCheck((size_t)hf.nfiles, sizeof *docs);
    int *doc_of = callocCheck((size_t)hf.nfiles, sizeof *doc_of), ndocs = 0;
    for (int i = 0; i < hf.nfiles && !err[0]; i++) {
        int how = data_classify(hf.files[i], src->tok, &docs[ndocs], err, sizeof err);
        doc_of[i] = how == 0 ? ndocs++ : -1;
    }
    comm_check_all(err[0] ? err : NULL);
    if (src->explicit_column && !ndocs)
        comm_log("warning: --text_column %s has no effect on %s '%s': it holds tokens, not documents\n", src->text_column, src->label, src->spec);
    char **paths = callocCheck((size_t)hf.nfiles, sizeof *paths), dir[4096] = "";
    if (ndocs) {
        char label[700];
        snprintf(label, sizeof label, "%s '%s'", src->label, src->spec);
        CacheRequest q = {.inputs = docs, .n = ndocs, .tok = src->tok, .text_column = src->text_column ? src->text_column : "",
                          .explicit_column = src->explicit_column, .vocab = vocab, .root = src->cache_dir, .label = label,
                          .stop = src->stop};
        if (cache_ensure(&q, dir, sizeof dir)) {  // stopped by a signal: nothing to open
            *found = -1;
            free(paths);
            paths = NULL;
            hf_files_free(&hf);
        }
    }
    for (int i = 0; paths && i < hf.nfiles; i++) {
        char part[4200];
        if (doc_of[i] >= 0) cache_part_path(dir, doc_of[i], part, sizeof part);
        paths[i] = strdup(doc_of[i] >= 0 ? part : hf.files[i]);
        if (!paths[i]) comm_fatal("out of memory");
    }
    *n = paths ? hf.nfiles : 0;
    *all_docs = ndocs == hf.nfiles;
    free(docs);
    free(doc_of);
    hf_files_free(&hf);
    return paths;
}

int data_open(Dataset *d, const DataSource *src, int T, int vocab, double frac_begin, double frac_end) {
    memset(d, 0, sizeof *d);
    snprintf(d->spec, sizeof d->spec, "%s", src->spec);
    d->T = T;
    d->vocab = vocab;
    int found;
    char **paths = data_token_paths(src, vocab, &d->nfiles, &found, &d->concat);
    if (found < 0) return -1;
    if (!found) {
        if (src->optional) return 0;
        comm_fail_all("%s '%s' has no '%s' split", src->label, src->spec, src->split);
    }
    const char *spec = src->spec;
    d->files = callocCheck(d->nfiles, sizeof(TokenFile));
    d->chunk_start = callocCheck(d->nfiles + 1, sizeof(uint64_t));
    d->tok_start = callocCheck(d->nfiles + 1, sizeof(uint64_t));
    int noted = 0;  // the long-rows note is logged once per dataset, not once per file
    for (int i = 0; i < d->nfiles; i++) {
        TokenFile *f = &d->files[i];
        snprintf(f->path, sizeof f->path, "%s", paths[i]);
        free(paths[i]);
        // O_NONBLOCK: opening a FIFO must not wait for a writer; only regular files are data
        f->fd = open(f->path, O_RDONLY | O_NONBLOCK);
        struct stat st;
        if (f->fd < 0 || fstat(f->fd, &st) != 0) comm_fail_all("cannot open data file '%s': %s", f->path, strerror(errno));
        if (!S_ISREG(st.st_mode))
            comm_fail_all("data file '%s' is not a regular file (a FIFO, device or directory cannot be sampled)", f->path);
        uint64_t ntok = probe(f, (uint64_t)st.st_size);
        if (f->text && vocab < 256)
            comm_fail_all("--vocab_size %d is too small for '%s' read as bytes (needs 256)", vocab, f->path);
        d->tok_start[i + 1] = d->tok_start[i] + ntok;
        if (d->concat) continue;  // the range and the samples are the stream's, below
        uint64_t lo = (uint64_t)(frac_begin * ntok), hi = (uint64_t)(frac_end * ntok);
        f->begin = lo;
        if (f->row) {  // HDF5 rows: ntok counts rows, each one sample, as minimal_fsdp reads them
            // no padding or loss mask exists, so a short row cannot make a sample of T positions
            if (f->row < (uint64_t)T + 1)
                comm_fail_all("data file '%s': dataset '%s' has rows of %llu tokens, but --max_context_width %d needs "
                              "rows of at least %d (inputs row[:-1], targets row[1:]); use --max_context_width %llu",
                              f->path, f->dset, (unsigned long long)f->row, T, T + 1, (unsigned long long)f->row - 1);
            if (f->row > (uint64_t)T + 1 && !noted++)
                comm_log("data '%s': rows of %llu tokens in '%s'; each sample is the first %d tokens of its row "
                         "(--max_context_width %d)\n", spec, (unsigned long long)f->row, f->path, T + 1, T);
            f->nchunks = hi - lo;
        } else {
            f->nchunks = hi - lo > (uint64_t)T ? (hi - lo - 1) / T : 0;
        }
        d->chunk_start[i + 1] = d->chunk_start[i] + f->nchunks;
    }
    free(paths);
    if (d->concat) {
        uint64_t total = d->tok_start[d->nfiles], lo = (uint64_t)(frac_begin * total), hi = (uint64_t)(frac_end * total);
        d->begin = lo;
        d->chunk_start[d->nfiles] = hi - lo > (uint64_t)T ? (hi - lo - 1) / T : 0;
    }
    d->nchunks = d->chunk_start[d->nfiles];
    if (!d->nchunks)
        comm_fail_all("data '%s' has fewer tokens than one sample of %d+1 (in its %s part)", spec, T,
                      frac_begin > 0 ? "validation" : "training");
    if (!d->concat && comm_info.rank == 0) {  // a cache's sources logged their line as it was found
        const TokenFile *f = &d->files[0];
        const char *what = f->row ? "HDF5 sample rows" : f->text ? "text read as bytes" : f->width == 4 ? "uint32 token shards" : "uint16 token shards";
        comm_log("%s '%s': %d file%s, %s%s, %llu %s, %llu samples in the part used\n", src->label, spec, d->nfiles, d->nfiles == 1 ? "" : "s",
                 what, d->nfiles > 1 ? " (first file)" : "", (unsigned long long)d->tok_start[d->nfiles], f->row ? "rows" : "tokens",
                 (unsigned long long)d->nchunks);
    }
    return 1;
}

void data_open_synthetic(Dataset *d, int T, int vocab) {
    memset(d, 0, sizeof *d);
    snprintf(d->spec, sizeof d->spec, "synthetic");
    d->T = T;
    d->vocab = vocab;
}

void data_free(Dataset *d) {
    for (int i = 0; i < d->nfiles; i++) close(d->files[i].fd);
    free(d->files);
    free(d->chunk_start);
    free(d->tok_start);
    d->files = NULL;
    d->chunk_start = NULL;
    d->tok_start = NULL;
}

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
            uint64_t nl = r, nr = l ^ (kern_splitmix64(key ^ kern_splitmix64(r + ((uint64_t)round << 56))) & mask);
            l = nl;
            r = nr;
        }
        i = (l << half) | r;
    } while (i >= n);
    return i;
}

uint64_t data_train_chunk(const Dataset *d, uint64_t seed, uint64_t g) {
    uint64_t epoch = g / d->nchunks;
    return permute(g % d->nchunks, d->nchunks, kern_splitmix64(seed) ^ kern_splitmix64(epoch + 1));
}

// Token t of a sample's raw bytes, sign-extended (HDF5 integers may be signed or big-endian).
static uint64_t token_at(const TokenFile *f, const unsigned char *raw, int t) {
    const unsigned char *p = raw + (size_t)t * f->width;
    uint64_t v = 0;
    for (int k = 0; k < f->width; k++) v |= (uint64_t)p[f->big_endian ? f->width - 1 - k : k] << (8 * k);
    if (f->is_signed && f->width < 8 && (v >> (8 * f->width - 1)) & 1) v |= ~(uint64_t)0 << (8 * f->width);
    return v;
}

// Reads n bytes at off of f into raw, retrying short reads; 0, or -1 with err set.
static int read_exact(const TokenFile *f, unsigned char *raw, size_t n, off_t off, char *err, size_t errlen) {
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(f->fd, raw + done, n - done, off + (off_t)done);
        if (r <= 0) {
            snprintf(err, errlen, "cannot read data file '%s' at byte %lld: %s", f->path, (long long)(off + done),
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
        if (read_exact(f, raw, (size_t)take * f->width, (off_t)(f->header + at * f->width), err, errlen)) return -1;
        for (int k = 0; k < take; k++) {
            uint64_t v = token_at(f, raw, k);
            if (v >= (uint64_t)d->vocab)
                return snprintf(err, errlen, "data file '%s' holds token id %llu at token %llu, not below --vocab_size %d", f->path,
                                (unsigned long long)v, (unsigned long long)(at + k), d->vocab), -1;
            if (t + k < d->T) inp[t + k] = (int32_t)v;
            if (t + k > 0) tgt[t + k - 1] = (int32_t)v;
        }
        t += take;
    }
    return 0;
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
    if (read_exact(f, raw, (size_t)(d->T + 1) * f->width, (off_t)(f->header + tok * f->width), err, errlen)) return -1;
    for (int t = 0; t <= d->T; t++) {
        uint64_t v = token_at(f, raw, t);
        if (v >= (uint64_t)d->vocab) {  // a negative signed id wraps to a huge value: caught too
            char id[32];
            if (f->is_signed) snprintf(id, sizeof id, "%lld", (long long)v);
            else snprintf(id, sizeof id, "%llu", (unsigned long long)v);
            if (f->row)
                snprintf(err, errlen, "data file '%s' holds token id %s in sample (row) %llu, position %d of dataset '%s', "
                         "not in [0, --vocab_size %d)", f->path, id, (unsigned long long)row, t, f->dset, d->vocab);
            else
                snprintf(err, errlen, "data file '%s' holds token id %s at token %llu, not below --vocab_size %d", f->path,
                         id, (unsigned long long)(tok + t), d->vocab);
            return -1;
        }
        if (t < d->T) inp[t] = (int32_t)v;
        if (t > 0) tgt[t - 1] = (int32_t)v;
    }
    return 0;
}

static void synthetic_sample(const Dataset *d, uint64_t seed, uint64_t g, int32_t *inp, int32_t *tgt) {
    uint64_t key = kern_splitmix64(seed ^ kern_splitmix64(g));  // every token a hash of (seed, sample, position)
    for (int t = 0; t <= d->T; t++) {
        int32_t tok = (int32_t)(kern_splitmix64(key + t) % (uint64_t)d->vocab);
        if (t < d->T) inp[t] = tok;
        if (t > 0) tgt[t - 1] = tok;
    }
}

struct DataLoader {
    const Dataset *d;
    uint64_t seed;
    int B, shuffled;
    int32_t *inp, *tgt;  // (B, T) the batch being read or ready
    unsigned char *raw;  // one sample's bytes
    uint64_t first;      // first sample of that batch
    int pending, ready, quit;
    char err[1024];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void read_batch(DataLoader *l) {
    const Dataset *d = l->d;
    int T = d->T;
    l->err[0] = 0;
    for (int b = 0; b < l->B && !l->err[0]; b++) {
        uint64_t g = l->first + b;
        int32_t *inp = l->inp + (size_t)b * T, *tgt = l->tgt + (size_t)b * T;
        if (!d->nchunks) {
            synthetic_sample(d, l->shuffled ? l->seed : 0x5eed, g, inp, tgt);
            continue;
        }
        uint64_t c = l->shuffled ? data_train_chunk(d, l->seed, g) : g % d->nchunks;
        char err[sizeof l->err - 32];
        if (read_chunk(d, c, inp, tgt, l->raw, err, sizeof err))
            snprintf(l->err, sizeof l->err, "sample %llu: %s", (unsigned long long)g, err);
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
    l->inp = mallocCheck((size_t)B * d->T * sizeof(int32_t));
    l->tgt = mallocCheck((size_t)B * d->T * sizeof(int32_t));
    l->raw = mallocCheck((size_t)(d->T + 1) * 8);  // the widest token: HDF5 int64
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if (pthread_create(&l->thread, NULL, loader_main, l) != 0) comm_fatal("cannot start the data loader thread");
    return l;
}

// caller holds the lock: waits for the batch in flight, if any
static void wait_idle(DataLoader *l) {
    while (l->pending) pthread_cond_wait(&l->cv, &l->mu);
}

static void request(DataLoader *l, uint64_t first) {
    l->first = first;
    l->ready = 0;
    l->pending = 1;
    pthread_cond_broadcast(&l->cv);
}

void data_loader_next(DataLoader *l, uint64_t first, uint64_t first_next, int32_t *inp, int32_t *tgt, const char *what) {
    size_t n = (size_t)l->B * l->d->T;
    pthread_mutex_lock(&l->mu);
    wait_idle(l);
    if (!l->ready || l->first != first) {  // not prefetched (first batch, or after a jump)
        request(l, first);
        wait_idle(l);
    }
    if (l->err[0]) {
        pthread_mutex_unlock(&l->mu);
        comm_fatal("%s%s%s", what ? what : "", what ? ": " : "", l->err);
    }
    memcpy(inp, l->inp, n * sizeof(int32_t));
    memcpy(tgt, l->tgt, n * sizeof(int32_t));
    l->ready = 0;
    if (first_next != UINT64_MAX) request(l, first_next);
    pthread_mutex_unlock(&l->mu);
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
    free(l->inp);
    free(l->tgt);
    free(l->raw);
    free(l);
}
