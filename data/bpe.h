// bpe: GPT-2's byte-level BPE, from OpenAI's encoder.json + vocab.bpe or from a Hugging Face
// tokenizer.json of that kind. Text is split by GPT-2's pretokenizer regex (PCRE2, Unicode
// properties), each piece's bytes are merged by rank. Only data/tokenizer.c calls it.
#ifndef FSDPC_BPE_H
#define FSDPC_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json.h"

typedef struct Bpe Bpe;

// Whether a parsed JSON file is an encoder.json (an object of piece -> id, no "model" object).
bool bpe_json_is_encoder(const JsonValue *root);
// Whether a parsed tokenizer.json is byte-level BPE (a ByteLevel pre_tokenizer or decoder).
bool bpe_json_is_byte_level(const JsonValue *root);

// encoder.json (already parsed) with its merges file (vocab.bpe: "#version" then one "LEFT RIGHT"
// a line, best first). NULL with a one-line reason in why on failure.
Bpe *bpe_load_encoder(const JsonValue *encoder, const char *merges_path, char *why, size_t whylen);
// A byte-level tokenizer.json; NULL with a one-line reason for the variants not supported.
Bpe *bpe_load_json(const JsonValue *root, char *why, size_t whylen);
void bpe_free(Bpe *b);

int bpe_vocab_size(const Bpe *b);
int bpe_end_of_text(const Bpe *b);  // the id of <|endoftext|>, -1 when the vocabulary lacks it

// Encodes text[0, n), appending to *ids (realloc-grown, *cap its capacity); returns the count
// appended. Ill-formed UTF-8 is read as U+FFFD per maximal subpart (as WHATWG's TextDecoder and
// Rust's from_utf8_lossy do); text spelling a special token is text. One thread at a time per Bpe
// (scratch space and a cache of the pieces merged).
size_t bpe_encode(Bpe *b, const char *text, size_t n, int32_t **ids, size_t *len, size_t *cap);
// The bytes of token id (in [0, vocab size)): a piece's raw bytes, a special token's text.
const char *bpe_token_bytes(const Bpe *b, int32_t id, size_t *n, bool *special);

// Copies s[0, n) to out (room for 3n bytes) with each maximal ill-formed UTF-8 subpart replaced by
// U+FFFD; returns the bytes written.
size_t bpe_utf8_lossy(const uint8_t *s, size_t n, uint8_t *out);

#endif
