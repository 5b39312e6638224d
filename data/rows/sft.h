// sft: finetuning rows to samples. Each row of a JSON Lines (plain, gzip, zstd), Arrow or Parquet
// file becomes its token ids and, aligned with them, the labels that carry loss: pre-tokenized
// input_ids (with attention_mask and labels), prompt/completion, Alpaca, and chat conversations
// in the Llama-2, ChatML or a plain template. Rows come from data/docs; a bad row gives one
// error line naming the file and the row.
#ifndef FSDPC_SFT_H
#define FSDPC_SFT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "docs.h"
#include "../text/chat.h"
#include "../text/tokenizer.h"

// --data_format: what finetuning rows are; sft_format_names lists its names (ChatTemplate, of
// --chat_template, is text/chat.h's)
typedef enum { SFT_AUTO, SFT_TEXT, SFT_IDS, SFT_PROMPT_COMPLETION, SFT_ALPACA, SFT_CHAT } SftFormat;
extern const CliChoice sft_format_names[];
// a token id read from a file, for a message: a negative one also as the unsigned 64-bit value
// it wraps (a uint64 column's 2^64 - 1 reads as -1), in buf (96 bytes hold any)
const char *sft_id_text(int64_t id, char *buf, size_t len);
const char *sft_format_name(SftFormat f);
int sft_format_parse(const char *s, SftFormat *out);  // 0, or -1 for a name that is none of the above

const char *sft_template_name(ChatTemplate t);
int sft_template_parse(const char *s, ChatTemplate *out);

typedef struct {
    SftFormat format;     // SFT_AUTO: detected from the file's first non-null row (sft_detect)
    ChatTemplate tmpl;
    const Tokenizer *tok;  // NULL only for SFT_IDS rows with vocab set (pre-tokenized: nothing to encode)
    int train_on_inputs;  // 1: every real token carries loss (no masking)
    int vocab;            // the model's vocabulary: input_ids and labels read from a file must be below it
                          // (0: the tokenizer's)
} SftOptions;

typedef struct SftReader SftReader;

// What the file's rows are, from its first non-null row (JSON Lines) or its columns (Arrow,
// Parquet): chat for "messages" or "conversations", SFT_IDS for input_ids with attention_mask
// or labels, prompt/completion, Alpaca for instruction and output; SFT_TEXT for anything else
// (a "text" member, input_ids alone: those stay a pretraining stream, and the docs reader words
// the errors). 0, or -1 with one line naming the file in err.
int sft_detect(const char *path, DocsKind kind, DocsCompression comp, SftFormat *out, char *err, size_t errlen);
SftReader *sft_open(const char *path, DocsKind kind, DocsCompression comp, const SftOptions *o, char *err, size_t errlen);
// The next row into *row: 1, 0 at the end, -1 with one line in err naming the file, the row
// (1-based line for JSON Lines, 0-based row index for Arrow/Parquet) and what is wrong. Null rows
// (the format's member null) are skipped and counted (sft_nulls).
int sft_next(SftReader *r, SftRow *row, char *err, size_t errlen);
const char *sft_describe(const SftReader *r);  // for the start-up log: "JSON Lines, chat (messages), llama2 template"
uint64_t sft_nulls(const SftReader *r);
uint64_t sft_progress(const SftReader *r);     // bytes of the file consumed so far (as docs_progress)
// The rows' fields seen so far, those the format reads marked used (see DocsFields).
const DocsFields *sft_fields(const SftReader *r);
void sft_close(SftReader *r);


#endif
