// data: datasets held in memory and a stateless, seeded sample order.
#include "data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../comm/comm.h"

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void data_open_text(Dataset *d, const char *path, int T, int vocab, double frac_begin, double frac_end) {
    memset(d, 0, sizeof *d);
    snprintf(d->path, sizeof d->path, "%s", path);
    d->T = T;
    d->vocab = vocab;
    if (vocab < 256) comm_fail_all("--vocab_size %d is too small for the byte tokenizer (needs 256) reading '%s'", vocab, path);
    FILE *f = fopen(path, "rb");
    if (!f) comm_fail_all("cannot open data file '%s'", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    size_t lo = (size_t)(frac_begin * size), hi = (size_t)(frac_end * size);
    if (hi - lo < (size_t)T + 1) {
        fclose(f);
        comm_fail_all("data file '%s' has %zu tokens in its %s part, fewer than one sample of %d+1", path, hi - lo,
                      frac_begin > 0 ? "validation" : "training", T);
    }
    unsigned char *bytes = mallocCheck(hi - lo);
    fseek(f, (long)lo, SEEK_SET);
    if (fread(bytes, 1, hi - lo, f) != hi - lo) comm_fatal("short read from '%s'", path);
    fclose(f);
    d->ntokens = hi - lo;
    d->tokens = mallocCheck(d->ntokens * sizeof(int32_t));
    for (size_t i = 0; i < d->ntokens; i++) d->tokens[i] = bytes[i];
    free(bytes);
    d->nchunks = (d->ntokens - 1) / T;
}

void data_bundled_path(char *out, size_t len) {
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(out, len, "%s/data/tinyshakespeare.txt", slash ? exe : ".");
}

void data_open_synthetic(Dataset *d, int T, int vocab) {
    memset(d, 0, sizeof *d);
    snprintf(d->path, sizeof d->path, "synthetic");
    d->T = T;
    d->vocab = vocab;
}

void data_free(Dataset *d) {
    free(d->tokens);
    d->tokens = NULL;
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
            uint64_t nl = r, nr = l ^ (mix64(key ^ mix64(r + ((uint64_t)round << 56))) & mask);
            l = nl;
            r = nr;
        }
        i = (l << half) | r;
    } while (i >= n);
    return i;
}

uint64_t data_epoch_of(const Dataset *d, uint64_t g) { return d->tokens ? g / d->nchunks : 0; }

static void copy_chunk(const Dataset *d, uint64_t chunk, int32_t *inp, int32_t *tgt) {
    const int32_t *src = d->tokens + chunk * d->T;
    memcpy(inp, src, d->T * sizeof(int32_t));
    memcpy(tgt, src + 1, d->T * sizeof(int32_t));
}

void data_train_sample(const Dataset *d, uint64_t seed, uint64_t g, int32_t *inp, int32_t *tgt) {
    if (!d->tokens) {  // synthetic: every token a hash of (seed, sample, position)
        uint64_t key = mix64(seed ^ mix64(g));
        for (int t = 0; t <= d->T; t++) {
            int32_t tok = (int32_t)(mix64(key + t) % (uint64_t)d->vocab);
            if (t < d->T) inp[t] = tok;
            if (t > 0) tgt[t - 1] = tok;
        }
        return;
    }
    uint64_t epoch = g / d->nchunks;
    copy_chunk(d, permute(g % d->nchunks, d->nchunks, mix64(seed) ^ mix64(epoch + 1)), inp, tgt);
}

void data_val_sample(const Dataset *d, uint64_t g, int32_t *inp, int32_t *tgt) {
    if (!d->tokens) return data_train_sample(d, 0x5eed, g, inp, tgt);
    copy_chunk(d, g % d->nchunks, inp, tgt);
}
