// dataset: a data spec to its token files (recognised, checked, the cache built where documents
// need it), the used part of each, and synthetic data.
#include "../../base/err.h"
#include "../../base/log.h"
#include "../../base/path.h"
#include "../data.h"
#include "../build/cache.h"
#include "../format/h5data.h"
#include "../source/source.h"
#include "../format/sniff.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../comm/comm.h"
#include "../../comm/io.h"

void data_bundled_path(char *out, size_t len) {
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(out, len, "%s/data/tinyshakespeare.txt", slash ? exe : ".");
}



// HDF5's superblock sits at 0 or, after a user block, at 512, 1024, 2048, ...: 1, 0, or -1 with err.
static int is_hdf5(const TokenFile *f, const unsigned char *head, size_t got, uint64_t size, char *err, size_t errlen) {
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    for (uint64_t off = 0; off + 8 <= size; off = off ? 2 * off : 512) {
        unsigned char b[8];
        errno = 0;  // a short read sets none
        if (off + 8 <= got) memcpy(b, head + off, 8);
        else if (pread(f->fd, b, 8, (off_t)off) != 8)
            return err_set(err, errlen, "cannot read data file '%s' at byte %llu: %s", f->path, (unsigned long long)off,
                           errno ? strerror(errno) : "file shrank");
        if (!memcmp(b, sig, 8)) return 1;
    }
    return 0;
}

// Recognises the format from the first bytes and the size; fills header/width and *ntok, the
// token count (HDF5: the row count, f->row set). 0, or -1 with a line naming the file in err.
static int probe(TokenFile *f, uint64_t size, uint64_t *ntok, char *err, size_t errlen) {
    unsigned char head[LLMC_HEADER_BYTES] = {0};
    ssize_t got = pread(f->fd, head, sizeof head, 0);
    if (got < 0) return err_set(err, errlen, "cannot read data file '%s': %s", f->path, strerror(errno));
    int hdf5 = is_hdf5(f, head, (size_t)got, size, err, errlen);
    if (hdf5 < 0) return -1;
    const char *e = hdf5 ? data_h5_layout(f, size, ntok) : data_parse_header(head, (size_t)got, size, f->path, f, ntok);
    return e ? err_set(err, errlen, "%s", e) : 0;
}

// open_index's work, path (room for n + 1 bytes) holding the index's name
static int open_side_files(TokenFile *f, uint64_t ntok, char *path, size_t n, char *err, size_t errlen) {
    int fd = path_open_read(path);
    if (fd < 0) return 0;  // token shards have none
    struct stat st;
    unsigned char head[TOKFILE_HEADER_BYTES];
    uint64_t count = 0;
    if (fstat(fd, &st) != 0 || pread(fd, head, sizeof head, 0) != (ssize_t)sizeof head || memcmp(head, TOKFILE_MAGIC, 8) ||
        (memcpy(&count, head + 16, 8), count < 1) || (uint64_t)st.st_size != TOKFILE_HEADER_BYTES + 8 * count) {
        close(fd);
        return err_set(err, errlen, "data cache index '%s' is damaged (remove the cache folder to rebuild it)", path);
    }
    void *m = path_map_read(fd, (size_t)st.st_size, 0, path);
    close(fd);
    if (m == MAP_FAILED) return err_set(err, errlen, "cannot map '%s': %s", path, strerror(errno));
    f->idx = (const uint64_t *)((const unsigned char *)m + TOKFILE_HEADER_BYTES);
    f->nidx = count;
    f->idx_bytes = (size_t)st.st_size;
    for (uint64_t i = 0; i < count; i++)  // checked once here, so reads index with them freely
        if ((i ? f->idx[i] < f->idx[i - 1] : f->idx[0] != 0) || f->idx[i] > ntok)
            return err_set(err, errlen, "data cache index '%s' is damaged at entry %llu (remove the cache folder to rebuild it)", path,
                            (unsigned long long)i);
    if (f->idx[count - 1] != ntok) return err_set(err, errlen, "data cache index '%s' does not end at its tokens' end (remove the cache folder)", path);
    snprintf(path, n + 1, "%.*s.lab", (int)(n - 4), f->path);
    f->lab_fd = path_open_read(path);
    if (f->lab_fd >= 0 && (fstat(f->lab_fd, &st) != 0 || (uint64_t)st.st_size != TOKFILE_HEADER_BYTES + 4 * ntok))
        return err_set(err, errlen, "data cache labels '%s' do not match their tokens (remove the cache folder to rebuild it)", path);
    if (f->lab_fd >= 0) f->lab_path = path_dup(path), f->lab_dev = st.st_dev, f->lab_ino = st.st_ino, f->lab_bytes = st.st_size;
    return 0;
}

// A cache part's document index and labels beside it (data/cache.h): maps the index, opens the
// labels. Returns 0, or -1 with err set for an index that does not fit its tokens.
static int open_index(TokenFile *f, uint64_t ntok, char *err, size_t errlen) {
    size_t n = strlen(f->path);
    if (n < 4 || strcmp(f->path + n - 4, ".bin")) return 0;
    char *path = mallocCheck(n + 1);  // the side files' names are as long as the part's
    snprintf(path, n + 1, "%.*s.idx", (int)(n - 4), f->path);
    int rc = open_side_files(f, ntok, path, n, err, errlen);
    free(path);
    return rc;
}

static int data_refuse(const char *path, const Sniff *s, char *err, size_t errlen) {
    return err_set(err, errlen, "data file '%s' is %s, which fsdpc does not read%s%s", path, s->what, s->hint[0] ? "; " : "", s->hint);
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
// *found: 1, 0 (no such split), DATA_STOPPED (by a signal during a cache build), or -1 with the
// line in err (on every rank but for a file one rank alone cannot read).
static char **data_token_paths(const DataSource *src, int vocab, int *n, int *found, int *all_docs, char *err, size_t errlen) {
    const SourceFiles *hf = &src->files->files;
    *n = 0;
    *found = -1;
    int rc = src->files->found;
    snprintf(err, errlen, "%s", rc < 0 ? src->files->err : "");
    double failing = rc < 0;
    comm_allreduce_sum_f64(comm_world(), &failing, 1);
    if (rc < 0 && failing < comm_info.world)  // a file system that differs between nodes: say where
        snprintf(err + strlen(err), errlen - strlen(err), " (on rank %d; not every rank sees the same files: is the data on storage every node shares?)",
                 comm_info.rank);
    if (comm_agree(rc < 0 ? err : NULL, err, errlen)) return NULL;
    double rcs[2] = {rc, -rc};  // max and -min over ranks
    comm_allreduce_max_f64(comm_world(), rcs, 2);
    if (rcs[0] != -rcs[1]) {
        err_set(err, errlen, "%s '%s' is found on some ranks and not on others: is it on storage every node sees?", src->label, src->spec);
        return NULL;
    }
    if (!rc) return *found = 0, NULL;
    if (!hf->nfiles) return err_set(err, errlen, "no data files match '%s'", src->spec), NULL;
    if (comm_info.rank == 0 && !(hf->nfiles == 1 && !strcmp(hf->files[0], src->spec))) log_msg("%s '%s': %s\n", src->label, src->spec, hf->desc);
    // a file some rank cannot read is reported below, as the readers word it
    IdentSource id;
    int unread = ident_source(src->spec, hf->files, hf->nfiles, &id, err, errlen);
    err[0] = 0;
    if (!comm_first_error(unread ? "unread" : NULL)) {
        const char *e = ident_check_ranks(&id, src->label);
        if (e) return err_set(err, errlen, "%s", e), ident_source_free(&id), NULL;
        if (src->identified) src->identified(&id, src->ctx);
    }
    ident_source_free(&id);
    CacheInput *docs = callocCheck((size_t)hf->nfiles, sizeof *docs);
    int *doc_of = callocCheck((size_t)hf->nfiles, sizeof *doc_of), ndocs = 0;
    for (int i = 0; i < hf->nfiles && !err[0]; i++) {
        int how = data_classify(hf->files[i], src->tok, &docs[ndocs], err, errlen);
        doc_of[i] = how == 0 ? ndocs++ : -1;
        io_input(hf->files[i], src->label);  // no output of the run may be one of them (comm/io.h)
    }
    // an output that is one of these files ends the run here, before a cache is built from it
    if (comm_agree(err[0] ? err : io_conflict(), err, errlen)) {
        free(docs);
        free(doc_of);
        return NULL;
    }
    if (src->explicit_column && !ndocs)
        log_msg("warning: --text_column %s has no effect on %s '%s': it holds tokens, not documents\n", src->text_column, src->label, src->spec);
    char **paths = callocCheck((size_t)hf->nfiles, sizeof *paths), *dir = NULL;
    if (ndocs) {
        char label[700];
        snprintf(label, sizeof label, "%s '%s'", src->label, src->spec);
        CacheRequest q = {.inputs = docs, .n = ndocs, .tok = src->tok, .text_column = src->text_column ? src->text_column : "",
                          .explicit_column = src->explicit_column, .vocab = vocab, .root = src->cache_dir, .label = label,
                          .stop = src->stop, .format = (SftFormat)src->format, .tmpl = (ChatTemplate)src->chat_template,
                          .train_on_inputs = src->train_on_inputs};
        int rc = cache_ensure(&q, &dir, err, errlen);
        if (rc) {  // failed, or stopped by a signal: nothing to open
            *found = rc < 0 ? -1 : DATA_STOPPED;
            free(paths);
            paths = NULL;
        }
    }
    if (paths) *found = 1;
    for (int i = 0; paths && i < hf->nfiles; i++) paths[i] = doc_of[i] >= 0 ? cache_part_path(dir, doc_of[i]) : path_dup(hf->files[i]);
    free(dir);
    *n = paths ? hf->nfiles : 0;
    *all_docs = ndocs == hf->nfiles;
    free(docs);
    free(doc_of);
    return paths;
}

static void free_paths(char **paths, int n) {
    for (int i = 0; paths && i < n; i++) free(paths[i]);
    free(paths);
}

int data_open(Dataset *d, const DataSource *src, int T, int vocab, double frac_begin, double frac_end, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    snprintf(d->spec, sizeof d->spec, "%s", src->spec);
    d->T = T;
    d->vocab = vocab;
    int found, n;
    char **paths = data_token_paths(src, vocab, &n, &found, &d->concat, err, errlen);
    if (found < 0) return found;
    if (!found) {
        if (src->optional) return 0;
        return err_set(err, errlen, "%s '%s' has no '%s' split", src->label, src->spec, src->files->split);
    }
    const char *spec = src->spec;
#define FAIL(...) do { err_set(err, errlen, __VA_ARGS__); goto fail; } while (0)
    d->files = callocCheck(n, sizeof(TokenFile));
    d->chunk_start = callocCheck(n + 1, sizeof(uint64_t));
    d->tok_start = callocCheck(n + 1, sizeof(uint64_t));
    int noted = 0;  // the long-rows note is logged once per dataset, not once per file
    for (int i = 0; i < n; i++) {
        TokenFile *f = &d->files[i];
        f->path = strdup(paths[i]);
        if (!f->path) err_fatal("out of memory copying the data file names");
        f->lab_fd = -1;
        d->nfiles = i + 1;  // the files data_free closes
        // O_NONBLOCK: opening a FIFO must not wait for a writer; only regular files are data
        f->fd = open(f->path, O_RDONLY | O_NONBLOCK);
        struct stat st;
        uint64_t ntok;
        if (f->fd < 0 || fstat(f->fd, &st) != 0) FAIL("cannot open data file '%s': %s", f->path, strerror(errno));
        if (!S_ISREG(st.st_mode))
            FAIL("data file '%s' is not a regular file (a FIFO, device or directory cannot be sampled)", f->path);
        if (probe(f, (uint64_t)st.st_size, &ntok, err, errlen) || open_index(f, ntok, err, errlen)) goto fail;
        f->dev = st.st_dev, f->ino = st.st_ino, f->bytes = st.st_size;
        int rows = f->lab_path != NULL;
        if (i >= DATA_OPEN_FILES) {  // read again when sampled (data_file_fd)
            close(f->fd);
            if (f->lab_fd >= 0) close(f->lab_fd);
            f->fd = f->lab_fd = -1;
        } else {
            d->open_files++;
        }
        if (i == 0) d->rows = rows;
        else if (rows != d->rows) FAIL("%s '%s' mixes finetuning rows and plain documents", src->label, spec);
        if (src->document_masking && !f->idx)
            FAIL("--document_masking needs the documents' boundaries, and '%s' is %s that does not record them: give "
                 "the documents themselves (JSON Lines, Arrow, Parquet, or text with a real --tokenizer) so the data "
                 "cache records them", f->path, f->text ? "text read as bytes, one stream" : "a token file");
        if (f->text && vocab < 256)
            FAIL("--vocab_size %d is too small for '%s' read as bytes (needs 256)", vocab, f->path);
        if (f->vocab > vocab)
            FAIL("data file '%s' records a vocabulary of %d (attribute %s), larger than the model's %d: the model "
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
                FAIL("data file '%s': dataset '%s' has rows of %llu tokens, but --max_context_width %d needs "
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
    free_paths(paths, n);
    paths = NULL;
    d->doc_mask = src->document_masking && !d->rows;
    if (d->concat && !d->rows) {
        uint64_t total = d->tok_start[d->nfiles], lo = (uint64_t)(frac_begin * total), hi = (uint64_t)(frac_end * total);
        d->begin = lo;
        d->chunk_start[d->nfiles] = hi - lo > (uint64_t)T ? (hi - lo - 1) / T : 0;
    }
    d->nchunks = d->chunk_start[d->nfiles];
    if (!d->nchunks && d->rows) FAIL("data '%s' has no rows (in its %s part)", spec, frac_begin > 0 ? "validation" : "training");
    if (!d->nchunks)
        FAIL("data '%s' has fewer tokens than one sample of %d+1 (in its %s part)", spec, T,
             frac_begin > 0 ? "validation" : "training");
    if (!d->concat && comm_info.rank == 0) {  // a cache's sources logged their line as it was found
        const TokenFile *f = &d->files[0];
        const char *what = f->row ? "HDF5 sample rows" : f->text ? "text read as bytes" : f->width == 4 ? "uint32 token shards" : "uint16 token shards";
        log_msg("%s '%s': %d file%s, %s%s, %llu %s, %llu samples in the part used\n", src->label, spec, d->nfiles, d->nfiles == 1 ? "" : "s",
                what, d->nfiles > 1 ? " (first file)" : "", (unsigned long long)d->tok_start[d->nfiles], f->row ? "rows" : "tokens",
                (unsigned long long)d->nchunks);
    }
    return 1;
fail:
    free_paths(paths, n);
    data_free(d);
    return -1;
#undef FAIL
}

void data_files_resolve(DataFiles *f, const char *spec, const char *config, const char *split) {
    memset(f, 0, sizeof *f);
    f->split = split;
    f->found = source_resolve(spec, config ? config : "", split, &f->files, f->err, sizeof f->err);
}

void data_files_free(DataFiles *f) {
    source_files_free(&f->files);
    memset(f, 0, sizeof *f);
}

int data_recorded_vocab(const DataFiles *f, char *file, size_t filelen) {
    int vocab = 0;
    for (int i = 0; f->found > 0 && i < f->files.nfiles; i++) {
        int v = data_h5_vocab(f->files.files[i]);
        if (v > vocab) {
            vocab = v;
            snprintf(file, filelen, "%s", f->files.files[i]);
        }
    }
    return vocab;
}

void data_open_synthetic(Dataset *d, int T, int vocab) {
    memset(d, 0, sizeof *d);
    snprintf(d->spec, sizeof d->spec, "synthetic");
    d->T = T;
    d->vocab = vocab;
}

// Opens path again for data_file_fd: its descriptor, or -1 with err set when it cannot be opened or
// is no longer the file first read (another inode, or another size).
static int reopen(const char *path, uint64_t dev, uint64_t ino, int64_t bytes, char *err, size_t errlen) {
    int fd = path_open_read(path);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return err_set(err, errlen, "cannot open data file '%s' again: %s", path, path_strerror(e));
    }
    if ((uint64_t)st.st_dev != dev || (uint64_t)st.st_ino != ino || (int64_t)st.st_size != bytes) {
        close(fd);
        return err_set(err, errlen, "data file '%s' changed while the run read it (%s): restore it, or start the run "
                        "again on the data as it is now", path, (int64_t)st.st_size != bytes ? "its size differs" : "another file has its name");
    }
    return fd;
}

int data_file_fd(const Dataset *d, const TokenFile *f, int labels, char *err, size_t errlen) {
    if (f->fd >= 0) return labels ? f->lab_fd : f->fd;
    // the descriptors are the one part of a dataset its reader changes
    Dataset *m = (Dataset *)d;
    TokenFile *w = (TokenFile *)f;
    while (m->open_files >= DATA_OPEN_FILES) {  // close the next open file after the hand (never f: it is closed)
        TokenFile *v = &m->files[m->hand];
        m->hand = (m->hand + 1) % m->nfiles;
        if (v->fd < 0) continue;
        close(v->fd);
        if (v->lab_fd >= 0) close(v->lab_fd);
        v->fd = v->lab_fd = -1;
        m->open_files--;
    }
    w->fd = reopen(f->path, f->dev, f->ino, f->bytes, err, errlen);
    if (w->fd < 0) return -1;
    if (f->lab_path && (w->lab_fd = reopen(f->lab_path, f->lab_dev, f->lab_ino, f->lab_bytes, err, errlen)) < 0) {
        close(w->fd);
        return w->fd = -1;
    }
    m->open_files++;
    return labels ? f->lab_fd : f->fd;
}

void data_free(Dataset *d) {
    for (int i = 0; i < d->nfiles; i++) {
        TokenFile *f = &d->files[i];
        free((char *)f->path);
        free(f->lab_path);
        if (f->fd >= 0) close(f->fd);
        if (f->lab_fd >= 0) close(f->lab_fd);
        if (f->idx) path_unmap((void *)((const unsigned char *)f->idx - TOKFILE_HEADER_BYTES), f->idx_bytes);
    }
    free(d->files);
    free(d->chunk_start);
    free(d->tok_start);
    d->files = NULL;
    d->chunk_start = NULL;
    d->tok_start = NULL;
}
