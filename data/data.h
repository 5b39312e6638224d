// data: token datasets streamed from disk (fsdpc token shards, llm.c shards, nanoGPT .bin, text
// read as bytes, HDF5 (samples, length) integer datasets; documents in text, JSON Lines, Arrow or
// Parquet files, and Hugging Face dataset folders and hub names, through the tokenized cache),
// synthetic tokens, a layout-free sample order, and a prefetching loader.
// The one header the rest of the program uses. Its stages are folders, each using only those above it:
//   format/  what bytes on disk are: token shards, HDF5 samples, Arrow, Parquet, sniffing (base, and
//            comm's message for an unreadable path)
//   source/  where a spec's files are: Hugging Face folders and hub caches, and their identities
//   text/    text to ids and back: the tokenizers, BPE, SentencePiece, chat templates
//   rows/    the documents and finetuning rows of one file
//   build/   rows to token shards (shards_build): the data cache, and `fsdpc prepare`'s library part
//   loader/  the dataset, the sample order and the background loader (this header's functions)
#ifndef FSDPC_DATA_H
#define FSDPC_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "source/ident.h"
#include "source/source.h"
#include "format/shardfile.h"
#include "text/tokenizer.h"
#include "rows/sft.h"

// SMP's --dataset_type: the format is found from the content, so only synthetic changes anything
enum { DATASET_GPT_JSONL, DATASET_HF, DATASET_SYNTHETIC };

// The data section of the run's configuration (run/config.h): what is read, how it is tokenized,
// how finetuning rows become samples, and validation
typedef struct {
    // the paths are heap strings of any length (base/cli.h's CLI_PATH), "" when unset
    char *train_data, *val_data;  // files, folders, globs, Hugging Face dataset folders or hub names
    char dataset_config_name[128];        // the hub dataset's config (C4: "en"); "" the only or default one
    char text_column[128];                // the column / JSON member holding text ("" : "text")
    char *data_cache_dir;                 // where tokenized caches go ("" : cache_default_root)
    char train_split[64], val_split[64];  // 10.FSDP's splits of a dataset with splits ("": train, and validation)
    int dataset_type;                     // SMP's --dataset_type: DATASET_SYNTHETIC means synthetic tokens
    int use_synthetic_data;               // SMP's: --train_data synthetic
    // finetuning data (docs/data.md, "Finetuning data")
    int data_format;       // SftFormat: what rows are (auto: from their fields)
    int chat_template;     // ChatTemplate of chat rows
    int train_on_inputs;   // every real token of a row bears loss, prompts too
    int packing;           // pack a step's rows into fewer contexts, documents kept apart
    int document_masking;  // streams keep their documents apart (attention, positions, the crossing target)
    char *tokenizer;  // byte, a tokenizer.model / tokenizer.json path or a hub name; resolved path after start-up
    int validation_freq, validation_batches;
    int val_batch_size;  // sequences per rank in a validation batch (0: --batch_size)
} DataConfig;

typedef struct {
    char spec[512];
    TokenFile *files;
    int nfiles;
    uint64_t *chunk_start;  // (nfiles + 1) first global chunk of each file
    // concat: the files are one token stream (a cache's parts, one per input file), so samples run
    // across file boundaries and the samples do not depend on how the documents were split into files
    int concat;
    uint64_t *tok_start;    // (nfiles + 1) concat: first stream token of each file
    uint64_t begin;         // concat: first stream token of the used range
    int T, vocab;
    uint64_t nchunks;       // samples per epoch; 0 for synthetic (endless) data
    // rows: finetuning data, one sample per row (a cache's rows with their labels), padded or cut
    // to T; chunk_start then counts rows. doc_mask: a stream whose documents are kept apart
    // (--document_masking): attention and positions restart at each document, and the target that
    // would cross into the next document bears no loss.
    int rows, doc_mask;
    int open_files, hand;  // data_file_fd's: files with descriptors open, and where eviction looks next
} Dataset;

// A data spec resolved to the files of one split, once: what the run notes as its inputs before
// any output opens, what data_recorded_vocab reads and what data_open opens are the same files.
typedef struct {
    SourceFiles files;
    const char *split;  // the split resolved
    int found;          // 1; 0: no such split; -1: err says why (on this rank)
    char err[2048];
} DataFiles;
// source_resolve(spec, config, split) into f; data_files_free releases it.
void data_files_resolve(DataFiles *f, const char *spec, const char *config, const char *split);
void data_files_free(DataFiles *f);

// Where a dataset comes from.
typedef struct {
    const char *spec;         // a file, folder, glob, Hugging Face dataset folder or hub name (data/source/source.h)
    const DataFiles *files;   // spec resolved (data_files_resolve), its split's name in messages
    int optional;             // a missing split is no error: data_open returns 0
    const Tokenizer *tok;     // for documents (and: is plain text already its ids?)
    const char *text_column;  // NULL or "": "text"
    int explicit_column;      // --text_column was given: it wins over "input_ids"
    const char *cache_dir;    // --data_cache_dir ("": cache_default_root)
    const char *label;        // for messages: "training data"
    const volatile int *stop; // set by a preemption signal: a cache build stops (data_open returns -1)
    int format;               // SftFormat (data/sft.h): what the rows are; SFT_AUTO detects it from their fields
    int chat_template;        // ChatTemplate for chat rows
    int train_on_inputs;      // every real token of a row bears loss
    int document_masking;     // --document_masking: streams keep their documents apart
    // called on every rank with the source's identity (valid during the call) once every rank
    // found the same files, before a cache is built from them; NULL: not called
    void (*identified)(const IdentSource *id, void *ctx);
    void *ctx;
} DataSource;

// Collective. Checks that every rank resolved src to the same files (data/source/ident.h:
// names, sizes, a CRC of each one's head and tail; a rank that differs is named with the first
// file that differs), recognises each file by its content (data/format/sniff.h): token shards and
// HDF5 are read as they are, plain text as bytes under the byte tokenizer, and documents (text,
// JSON Lines, Arrow, Parquet) through the tokenized cache (data/build/cache.h); anything else is
// refused naming the file and what it is. Keeps the part [frac_begin, frac_end) of each file's
// tokens, so one file can give a training head and a validation tail. Returns 1; 0 when an
// optional split does not exist; DATA_STOPPED on every rank when *src->stop was set during a
// cache build; -1 with one line in err (2048 bytes hold any) on every rank that found it (a file
// one rank cannot read: that rank alone).
#define DATA_STOPPED (-2)
int data_open(Dataset *d, const DataSource *src, int T, int vocab, double frac_begin, double frac_end, char *err, size_t errlen);
void data_open_synthetic(Dataset *d, int T, int vocab);
// The open descriptor of file f of d (its labels' with labels): a dataset keeps at most
// DATA_OPEN_FILES files open, so one of thousands of files is opened again when read, and a file
// whose name now leads elsewhere (replaced, or another size) is an error. -1 with err set. Called
// by the one thread that reads d.
#define DATA_OPEN_FILES 64
int data_file_fd(const Dataset *d, const TokenFile *f, int labels, char *err, size_t errlen);
// The largest vocabulary the HDF5 files of a resolved spec record (data/format/h5data.h), 0 when
// none does; *file names the file it came from. Resolution problems are data_open's to report.
int data_recorded_vocab(const DataFiles *f, char *file, size_t filelen);

void data_free(Dataset *d);
// Path of the Tiny Shakespeare copy shipped next to the binary (data/tinyshakespeare.txt).
void data_bundled_path(char *out, size_t len);

// Chunk holding training sample g (global sample index = step * global_batch + position):
// epochs are shuffled by a seeded permutation, so it depends only on (seed, g).
uint64_t data_train_chunk(const Dataset *d, uint64_t seed, uint64_t g);

// Positions sample g takes in a row: T for streams, its tokens (at most T) for finetuning rows, 0
// for a row with nothing to predict. shuffled: training order (else validation order).
int data_sample_len(const Dataset *d, uint64_t seed, uint64_t g, int shuffled);

// One micro-batch as the model takes it. Targets < 0 bear no loss (padding, prompts, the last
// token of a document); with docs, kstart gives each token's document start in its row.
typedef struct {
    int32_t *inp, *tgt, *kstart;  // (B, T)
    int docs;
    long long loss_tokens;  // targets >= 0
    long long truncated;    // rows longer than T+1 tokens, cut at the context
    long long lost;         // of them, rows the cut left with no loss-bearing target
} DataBatch;
DataBatch *data_batch_new(int B, int T);
void data_batch_free(DataBatch *b);

// Which samples a micro-batch holds: row r (r < nrows <= B) packs samples[first[r] .. first[r+1])
// one after the other (one each unless packing); rows nrows..B-1 are padding.
typedef struct {
    int nrows;
    int *first;         // (B + 1)
    uint64_t *samples;  // (B * T) global sample indices
} DataPlan;
DataPlan *data_plan_new(int B, int T);
void data_plan_free(DataPlan *p);
// the plain plan: row b holds sample first + b
void data_plan_rows(DataPlan *p, int B, uint64_t first);

// Reads micro-batches on a background thread (pread), so I/O overlaps compute and a dataset
// larger than memory streams; each rank reads only its own samples.
typedef struct DataLoader DataLoader;
// shuffled: training order (data_train_chunk); else validation order (chunks in file order)
DataLoader *data_loader_new(const Dataset *d, uint64_t seed, int B, int shuffled);
// Returns NULL with the micro-batch of plan cur in out, then starts reading plan next in the
// background (NULL: nothing). A read error (I/O, token id >= vocab) is this rank's alone: the
// line, `what` (the batch, e.g. "step 3"; NULL: none), the file name and the global sample, valid
// until the next call.
const char *data_loader_next(DataLoader *l, const DataPlan *cur, const DataPlan *next, DataBatch *out, const char *what);
void data_loader_free(DataLoader *l);

#endif
