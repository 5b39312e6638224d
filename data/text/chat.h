// chat: conversations in a chat template as token ids and the labels that bear loss (the
// finetuning rows' chat format, `fsdpc tokenize --chat`, generation's prompt), and the row those
// ids and labels are built in, which the finetuning formats of data/rows/sft share. The names keep
// the sft_ prefix of the rows they build.
#ifndef FSDPC_CHAT_H
#define FSDPC_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../../base/cli.h"
#include "../../base/json.h"
#include "tokenizer.h"

#define SFT_NO_LOSS (-1)  // a label that bears no loss
// --chat_template: how chat rows become text; sft_template_names lists its names
typedef enum { CHAT_LLAMA2, CHAT_CHATML, CHAT_NONE } ChatTemplate;
extern const CliChoice sft_template_names[];
// The templates' names (--chat_template), as a flag's argument and as a list in words
#define CHAT_TEMPLATE_CHOICES "llama2|chatml|none"
#define CHAT_TEMPLATE_LIST "llama2, chatml, none"

typedef struct {
    int32_t *ids;     // the row's real tokens (padding removed), BOS/EOS where the format adds them
    int32_t *labels;  // aligned with ids, unshifted (Hugging Face's convention): labels[t] is the target
                      // predicted at position t-1; -1 = no loss (Hugging Face's -100). The loss shifts.
    size_t len, cap;  // realloc-grown by sft_next; a row of padding only has len 0
} SftRow;

void sft_row_free(SftRow *row);

// Appending to a row: one token with its label; a special token (id < 0: none) with its own label
// when loss; text[0, n) encoded, each token its own label when loss (*tmp, *cap: scratch).
void sft_push(SftRow *row, int32_t id, int32_t label);
void sft_push_special(SftRow *row, int id, bool loss);
void sft_push_text(const Tokenizer *tok, SftRow *row, const char *text, size_t n, bool loss, int32_t **tmp, size_t *cap);

// A growable NUL-terminated text (a prompt being built).
typedef struct {
    char *s;
    size_t len, cap;
} SftText;
void sft_text_put(SftText *t, const char *s, size_t n);
void sft_text_str(SftText *t, const char *s);

// One conversation in a template (sft_next's chat rows, `fsdpc tokenize --chat`). Roles are
// system, user, assistant, or ShareGPT's human (user) and gpt (assistant). Sets *row (its old
// content replaced). 0, or -1 with err (what is wrong with the conversation; the caller names
// the file and row).
typedef struct {
    const char *role;
    size_t role_len;
    const char *content;
    size_t content_len;
} SftMessage;
int sft_chat_encode(const Tokenizer *tok, ChatTemplate t, const SftMessage *m, int n, int train_on_inputs, SftRow *row,
                    char *err, size_t errlen);

// `fsdpc tokenize --chat`: chat JSON Lines from in, one line of ids per conversation to out (with
// labels, each followed by a line of its labels, -1 where no loss). NULL when all went well, else
// the reason (with the line number) in why. Reading ends early, between lines, once *stop is
// non-zero (stop may be NULL); *lines is the number of the last input line whose output is out.
const char *sft_tokenize_chat(const Tokenizer *tok, ChatTemplate t, int labels, FILE *in, FILE *out, const volatile int *stop,
                              unsigned long *lines, char *why, size_t whylen);
// ChatML's <|im_start|> and <|im_end|> ids: 0, or -1 with err when the tokenizer lacks one.
int sft_chatml_markers(const Tokenizer *tok, int markers[2], char *err, size_t errlen);
// sft_chat_encode with ChatML's marker ids already found (a vocabulary scan for SentencePiece)
int sft_chat_row(const Tokenizer *tok, ChatTemplate t, const int markers[2], const SftMessage *m, int n, int train_on_inputs,
                 SftRow *row, char *err, size_t errlen);
// The conversation of a JSON row into *msgs (realloc-grown, *cap its capacity): 1, 0 when its list
// is null (a null row), -1 with why (no "messages" or "conversations" array, a message without
// role or content).
int sft_json_messages(const JsonValue *obj, SftMessage **msgs, size_t *cap, int *n, char *why, size_t whylen);

#endif
