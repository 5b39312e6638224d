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
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "../comm/io.h"
#include "../base/limits.h"
#include "../base/rng.h"

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



// A cache part's document index and labels beside it (data/cache.h): maps the index, opens the
// labels. Returns 0, or -1 with err set for an index that does not fit its tokens.
static int open_index(TokenFile *f, uint64_t ntok, char *err, size_t errlen) {
    char path[sizeof f->path + 8];
    size_t n = strlen(f->path);
    if (n < 4 || strcmp(f->path + n - 4, ".bin")) return 0;
    snprintf(path, sizeof path, "%.*s.idx", (int)(n - 4), f->path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;  // token shards have none
    struct stat st;
    unsigned char head[TOKFILE_HEADER_BYTES];
    uint64_t count = 0;
    if (fstat(fd, &st) != 0 || pread(fd, head, sizeof head, 0) != (ssize_t)sizeof head || memcmp(head, TOKFILE_MAGIC, 8) ||
        (memcpy(&count, head + 16, 8), count < 1) || (uint64_t)st.st_size != TOKFILE_HEADER_BYTES + 8 * count) {
        close(fd);
        return snprintf(err, errlen, "data cache index '%s' is damaged (remove the cache folder to rebuild it)", path), -1;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return snprintf(err, errlen, "cannot map '%s': %s", path, strerror(errno)), -1;
    f->idx = (const uint64_t *)((const unsigned char *)m + TOKFILE_HEADER_BYTES);
    f->nidx = count;
    f->idx_bytes = (size_t)st.st_size;
    for (uint64_t i = 0; i < count; i++)  // checked once here, so reads index with them freely
        if ((i ? f->idx[i] < f->idx[i - 1] : f->idx[0] != 0) || f->idx[i] > ntok)
            return snprintf(err, errlen, "data cache index '%s' is damaged at entry %llu (remove the cache folder to rebuild it)", path,
                            (unsigned long long)i), -1;
    if (f->idx[count - 1] != ntok) return snprintf(err, errlen, "data cache index '%s' does not end at its tokens' end (remove the cache folder)", path), -1;
    snprintf(path, sizeof path, "%.*s.lab", (int)(n - 4), f->path);
    f->lab_fd = open(path, O_RDONLY);
    if (f->lab_fd >= 0 && (fstat(f->lab_fd, &st) != 0 || (uint64_t)st.st_size != TOKFILE_HEADER_BYTES + 4 * ntok))
        return snprintf(err, errlen, "data cache labels '%s' do not match their tokens (remove the cache folder to rebuild it)", path), -1;
    return 0;
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
    if (comm_info.rank == 0 && !(hf.nfiles == 1 && !strcmp(hf.files[0], src->spec))) log_msg("%s '%s': %s\n", src->label, src->spec, hf.desc);
    // a file some rank cannot read is reported below, as the readers word it
    IdentSource id;
    int unread = ident_source(src->spec, hf.files, hf.nfiles, &id, err, sizeof err);
    err[0] = 0;
    if (!comm_first_error(unread ? "unread" : NULL)) {
        const char *e = ident_check_ranks(&id, src->label);
        if (e) comm_fail_all("%s", e);
        if (src->identified) src->identified(&id, src->ctx);
    }
    ident_source_free(&id);
    CacheInput *docs = callocCheck((size_t)hf.nfiles, sizeof *docs);
    int *doc_of = callocCheck((size_t)hf.nfiles, sizeof *doc_of), ndocs = 0;
    for (int i = 0; i < hf.nfiles && !err[0]; i++) {
        int how = data_classify(hf.files[i], src->tok, &docs[ndocs], err, sizeof err);
        doc_of[i] = how == 0 ? ndocs++ : -1;
        io_input(hf.files[i], src->label);  // no output of the run may be one of them (comm/io.h)
    }
    // an output that is one of these files ends the run here, before a cache is built from it
    comm_check_all(err[0] ? err : io_conflict());
    if (src->explicit_column && !ndocs)
        log_msg("warning: --text_column %s has no effect on %s '%s': it holds tokens, not documents\n", src->text_column, src->label, src->spec);
    char **paths = callocCheck((size_t)hf.nfiles, sizeof *paths), dir[4096] = "";
    if (ndocs) {
        char label[700];
        snprintf(label, sizeof label, "%s '%s'", src->label, src->spec);
        CacheRequest q = {.inputs = docs, .n = ndocs, .tok = src->tok, .text_column = src->text_column ? src->text_column : "",
                          .explicit_column = src->explicit_column, .vocab = vocab, .root = src->cache_dir, .label = label,
                          .stop = src->stop, .format = (SftFormat)src->format, .tmpl = (ChatTemplate)src->chat_template,
                          .train_on_inputs = src->train_on_inputs};
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
        if (!paths[i]) err_fatal("out of memory");
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
        f->lab_fd = -1;
        char ierr[1200] = "";
        if (open_index(f, ntok, ierr, sizeof ierr)) comm_fail_all("%s", ierr);
        int rows = f->lab_fd >= 0;
        if (i == 0) d->rows = rows;
        else if (rows != d->rows) comm_fail_all("%s '%s' mixes finetuning rows and plain documents", src->label, spec);
        if (src->document_masking && !f->idx)
            comm_fail_all("--document_masking needs the documents' boundaries, and '%s' is %s that does not record them: give "
                          "the documents themselves (JSON Lines, Arrow, Parquet, or text with a real --tokenizer) so the data "
                          "cache records them", f->path, f->text ? "text read as bytes, one stream" : "a token file");
        if (f->text && vocab < 256)
            comm_fail_all("--vocab_size %d is too small for '%s' read as bytes (needs 256)", vocab, f->path);
        if (f->vocab > vocab)
            comm_fail_all("data file '%s' records a vocabulary of %d (attribute %s), larger than the model's %d: the model "
                          "must cover its ids (--vocab_size %d, or the --tokenizer they come from)", f->path, f->vocab,
                          f->vocab_attr, vocab, f->vocab);
        d->tok_start[i + 1] = d->tok_start[i] + ntok;
        if (d->rows) {  // a row is a sample, whatever its length
            uint64_t nrows = f->nidx - 1, lo = (uint64_t)(frac_begin * nrows), hi = (uint64_t)(frac_end * nrows);
            f->begin = lo;
            f->nchunks = hi - lo;
            d->chunk_start[i + 1] = d->chunk_start[i] + f->nchunks;
            continue;
        }
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
                log_msg("data '%s': rows of %llu tokens in '%s'; each sample is the first %d tokens of its row "
                        "(--max_context_width %d)\n", spec, (unsigned long long)f->row, f->path, T + 1, T);
            f->nchunks = hi - lo;
        } else {
            f->nchunks = hi - lo > (uint64_t)T ? (hi - lo - 1) / T : 0;
        }
        d->chunk_start[i + 1] = d->chunk_start[i] + f->nchunks;
    }
    free(paths);
    d->doc_mask = src->document_masking && !d->rows;
    if (d->concat && !d->rows) {
        uint64_t total = d->tok_start[d->nfiles], lo = (uint64_t)(frac_begin * total), hi = (uint64_t)(frac_end * total);
        d->begin = lo;
        d->chunk_start[d->nfiles] = hi - lo > (uint64_t)T ? (hi - lo - 1) / T : 0;
    }
    d->nchunks = d->chunk_start[d->nfiles];
    if (!d->nchunks && d->rows) comm_fail_all("data '%s' has no rows (in its %s part)", spec, frac_begin > 0 ? "validation" : "training");
    if (!d->nchunks)
        comm_fail_all("data '%s' has fewer tokens than one sample of %d+1 (in its %s part)", spec, T,
                      frac_begin > 0 ? "validation" : "training");
    if (!d->concat && comm_info.rank == 0) {  // a cache's sources logged their line as it was found
        const TokenFile *f = &d->files[0];
        const char *what = f->row ? "HDF5 sample rows" : f->text ? "text read as bytes" : f->width == 4 ? "uint32 token shards" : "uint16 token shards";
        log_msg("%s '%s': %d file%s, %s%s, %llu %s, %llu samples in the part used\n", src->label, spec, d->nfiles, d->nfiles == 1 ? "" : "s",
                what, d->nfiles > 1 ? " (first file)" : "", (unsigned long long)d->tok_start[d->nfiles], f->row ? "rows" : "tokens",
                (unsigned long long)d->nchunks);
    }
    return 1;
}

int data_recorded_vocab(const char *spec, const char *config, const char *split, char *file, size_t filelen) {
    HfFiles hf;
    char err[2048];
    int vocab = 0;
    memset(&hf, 0, sizeof hf);
    if (!spec[0] || !strcmp(spec, "synthetic")) return 0;
    int found = hf_resolve(spec, config ? config : "", split, &hf, err, sizeof err);
    if (!found && !strcmp(split, "validation")) {  // validation data without splits are read whole
        hf_files_free(&hf);
        found = hf_resolve(spec, config ? config : "", "train", &hf, err, sizeof err);
    }
    for (int i = 0; found > 0 && i < hf.nfiles; i++) {
        int v = data_h5_vocab(hf.files[i]);
        if (v > vocab) {
            vocab = v;
            snprintf(file, filelen, "%s", hf.files[i]);
        }
    }
    hf_files_free(&hf);
    return vocab;
}

void data_open_synthetic(Dataset *d, int T, int vocab) {
    memset(d, 0, sizeof *d);
    snprintf(d->spec, sizeof d->spec, "synthetic");
    d->T = T;
    d->vocab = vocab;
}

void data_free(Dataset *d) {
    for (int i = 0; i < d->nfiles; i++) {
        TokenFile *f = &d->files[i];
        close(f->fd);
        if (f->lab_fd >= 0) close(f->lab_fd);
        if (f->idx) munmap((void *)((const unsigned char *)f->idx - TOKFILE_HEADER_BYTES), f->idx_bytes);
    }
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
    if (read_exact(f, raw, (size_t)(d->T + 1) * f->width, (off_t)(f->header + tok * f->width), err, errlen)) return -1;
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
    if (read_exact(f, raw, (size_t)take * f->width, (off_t)(f->header + s * f->width), err, errlen)) return -1;
    unsigned char *lab = raw + (size_t)take * f->width;
    TokenFile lf = *f;
    lf.fd = f->lab_fd;
    if (read_exact(&lf, lab, (size_t)take * 4, (off_t)(TOKFILE_HEADER_BYTES + s * 4), err, errlen)) return -1;
    int len = (int)(take < (uint64_t)d->T ? take : (uint64_t)d->T), bearing = 0;
    for (int t = 0; t < len; t++) {
        uint64_t v = token_at(f, raw, t);
        if (v >= (uint64_t)d->vocab)
            return snprintf(err, errlen, "data file '%s' holds token id %llu at token %llu, not below --vocab_size %d", f->path,
                            (unsigned long long)v, (unsigned long long)(s + t), d->vocab), -1;
        inp[t] = (int32_t)v;
        int32_t y = -1;
        if ((uint64_t)t + 1 < take) {
            const unsigned char *q = lab + 4 * ((size_t)t + 1);
            uint32_t u = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
            if (u != UINT32_MAX && u >= (uint32_t)d->vocab)
                return snprintf(err, errlen, "data cache labels '%s' hold label %u at token %llu, not below --vocab_size %d", f->path, u,
                                (unsigned long long)(s + t + 1), d->vocab), -1;
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

void data_loader_next(DataLoader *l, const DataPlan *cur, const DataPlan *next, DataBatch *out, const char *what) {
    size_t n = (size_t)l->B * l->d->T;
    pthread_mutex_lock(&l->mu);
    wait_idle(l);
    if (!l->ready || !same_plan(l->plan, cur)) {  // not prefetched (first batch, or after a jump)
        request(l, cur);
        wait_idle(l);
    }
    if (l->err[0]) {
        pthread_mutex_unlock(&l->mu);
        comm_fail_local("%s%s%s", what ? what : "", what ? ": " : "", l->err);
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
