// data: file formats, the seeded sample order and the background loader.
#include "data.h"
#include "h5data.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
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

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

const char *data_parse_header(const unsigned char *head, size_t got, uint64_t size, const char *path, TokenFile *f,
                              uint64_t *ntok) {
    static char msg[1200];
    TokFileHeader th;
    memset(&th, 0, sizeof th);
    memcpy(&th, head, got < sizeof th ? got : sizeof th);
    int32_t words[3] = {0, 0, 0};
    memcpy(words, head, got < sizeof words ? got : sizeof words);
    if (got >= sizeof th && !memcmp(th.magic, TOKFILE_MAGIC, 8)) {
        if (th.version != TOKFILE_VERSION || (th.dtype_bytes != 2 && th.dtype_bytes != 4))
            return snprintf(msg, sizeof msg, "data file '%s': unsupported token shard version %u / dtype of %u bytes", path,
                            th.version, th.dtype_bytes), msg;
        f->header = TOKFILE_HEADER_BYTES;
        f->width = (int)th.dtype_bytes;
        *ntok = th.ntokens;
    } else if (got == LLMC_HEADER_BYTES && (words[0] == LLMC_MAGIC_GPT2 || words[0] == LLMC_MAGIC_LLAMA3)) {
        f->header = LLMC_HEADER_BYTES;
        f->width = words[0] == LLMC_MAGIC_GPT2 ? 2 : 4;
        *ntok = (uint64_t)(uint32_t)words[2];
    } else if (ends_with(path, ".bin")) {  // nanoGPT: raw uint16, no header
        if (size % 2) return snprintf(msg, sizeof msg, "data file '%s': odd size %llu for raw uint16 tokens", path, (unsigned long long)size), msg;
        f->header = 0;
        f->width = 2;
        *ntok = size / 2;
    } else {  // text: one byte per token (byte tokenizer)
        f->header = 0;
        f->width = 1;
        f->text = 1;
        *ntok = size;
    }
    // compared by division: a hostile count must not wrap the product into agreement
    if (size < f->header || *ntok != (size - f->header) / (uint64_t)f->width || (size - f->header) % (uint64_t)f->width)
        return snprintf(msg, sizeof msg, "data file '%s' is truncated or corrupt: its header promises %llu tokens of %d bytes "
                        "after a %zu-byte header, but it holds %llu bytes",
                        path, (unsigned long long)*ntok, f->width, f->header, (unsigned long long)size), msg;
    return NULL;
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

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Expands a file / directory / glob into a sorted list of paths.
static char **list_paths(const char *spec, int *n) {
    char **paths = NULL;
    *n = 0;
    struct stat st;
    if (strpbrk(spec, "*?[")) {
        glob_t g;
        if (glob(spec, 0, NULL, &g) == 0) {
            paths = mallocCheck(g.gl_pathc * sizeof(char *));
            for (size_t i = 0; i < g.gl_pathc; i++) paths[(*n)++] = strdup(g.gl_pathv[i]);
        }
        globfree(&g);
    } else if (stat(spec, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *dir = opendir(spec);
        if (!dir) comm_fail_all("cannot read data directory '%s': %s", spec, strerror(errno));
        size_t cap = 16;
        paths = mallocCheck(cap * sizeof(char *));
        for (struct dirent *e; (e = readdir(dir));) {
            if (e->d_name[0] == '.' || ends_with(e->d_name, ".tmp")) continue;
            if (*n == (int)cap) paths = realloc(paths, (cap *= 2) * sizeof(char *));
            size_t len = strlen(spec) + strlen(e->d_name) + 2;
            paths[*n] = mallocCheck(len);
            snprintf(paths[(*n)++], len, "%s/%s", spec, e->d_name);
        }
        closedir(dir);
    } else {
        paths = mallocCheck(sizeof(char *));
        paths[(*n)++] = strdup(spec);
    }
    if (*n) qsort(paths, *n, sizeof(char *), cmp_str);  // a glob matching nothing leaves paths NULL
    return paths;
}

void data_open(Dataset *d, const char *spec, int T, int vocab, double frac_begin, double frac_end) {
    memset(d, 0, sizeof *d);
    snprintf(d->spec, sizeof d->spec, "%s", spec);
    d->T = T;
    d->vocab = vocab;
    char **paths = list_paths(spec, &d->nfiles);
    if (!d->nfiles) comm_fail_all("no data files match '%s'", spec);
    d->files = callocCheck(d->nfiles, sizeof(TokenFile));
    d->chunk_start = callocCheck(d->nfiles + 1, sizeof(uint64_t));
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
    d->nchunks = d->chunk_start[d->nfiles];
    if (!d->nchunks)
        comm_fail_all("data '%s' has fewer tokens than one sample of %d+1 (in its %s part)", spec, T,
                      frac_begin > 0 ? "validation" : "training");
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
    d->files = NULL;
    d->chunk_start = NULL;
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

// Reads chunk c as (inp, tgt); returns 0, or -1 with a message naming the file in err.
static int read_chunk(const Dataset *d, uint64_t c, int32_t *inp, int32_t *tgt, unsigned char *raw, char *err,
                      size_t errlen) {
    int lo = 0, hi = d->nfiles - 1;  // the file whose chunk range holds c
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->chunk_start[mid] <= c) lo = mid;
        else hi = mid - 1;
    }
    const TokenFile *f = &d->files[lo];
    uint64_t k = c - d->chunk_start[lo], row = f->begin + k;  // HDF5: the sample's row
    uint64_t tok = f->row ? row * f->row : f->begin + k * d->T;
    size_t n = (size_t)(d->T + 1) * f->width;
    off_t off = (off_t)(f->header + tok * f->width);
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(f->fd, raw + done, n - done, off + (off_t)done);
        if (r <= 0) {
            snprintf(err, errlen, "cannot read data file '%s' at byte %lld: %s", f->path, (long long)(off + done),
                     r < 0 ? strerror(errno) : "file shrank (truncated?)");
            return -1;
        }
        done += (size_t)r;
    }
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
