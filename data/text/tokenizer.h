// tokenizer: text to token ids and back. Four kinds: "byte" (every byte a token), a SentencePiece
// tokenizer.model (through libsentencepiece, the reference implementation), a Hugging Face
// tokenizer.json of the SentencePiece-style BPE with byte fallback that Llama-2 and Mistral use
// (giving the ids libsentencepiece gives on the same vocabulary), and GPT-2's byte-level BPE
// (encoder.json + vocab.bpe, or a tokenizer.json of that kind); data/bpe encodes both BPE kinds.
#ifndef FSDPC_TOKENIZER_H
#define FSDPC_TOKENIZER_H

#include "../../base/cli.h"
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct Tokenizer Tokenizer;

// spec: "byte", a tokenizer.model, a tokenizer.json, GPT-2's encoder.json or vocab.bpe (the other
// beside it; Hugging Face's copies vocab.json and merges.txt too), a directory holding one
// (tokenizer.model first, then tokenizer.json, encoder.json, vocab.json), or a hub name (ORG/NAME)
// found in the local Hugging Face cache. NULL with a one-line reason in err on failure (missing
// file, unsupported kind, corrupt file).
Tokenizer *tok_open(const char *spec, char *err, size_t errlen);
// The specs tok_open takes, in words (for help and errors)
#define TOK_SPECS "byte, a tokenizer.model or tokenizer.json, GPT-2's encoder.json, a directory or a hub name"
void tok_free(Tokenizer *t);
int tok_vocab_size(const Tokenizer *t);
int tok_bos(const Tokenizer *t);  // -1 when the tokenizer has none (byte, GPT-2)
int tok_eos(const Tokenizer *t);  // -1 when none; GPT-2: <|endoftext|>, its document separator
int tok_is_byte(const Tokenizer *t);  // ids are bytes: raw text is already this tokenizer's ids
const char *tok_path(const Tokenizer *t);  // the resolved file ("byte" for byte; GPT-2: encoder.json)
// The id of the vocabulary piece spelled exactly `piece` ("<|im_start|>"), or -1 when there is
// none (the byte tokenizer has no pieces). tokenizer.json: its vocab and added_tokens.
int tok_piece_id(const Tokenizer *t, const char *piece);

// Encodes text[0, n) (no BOS/EOS), appending to *ids (realloc-grown, *cap its capacity); returns
// the count appended. Bytes that are not UTF-8 encode as U+FFFD (GPT-2: one per maximal
// ill-formed subpart, as WHATWG's TextDecoder reads them) and text spelling a special token ("<s>",
// "<|endoftext|>") as text, as SentencePiece does. One thread at a time per Tokenizer
// (tokenizer.json and GPT-2 keep a cache of the segments they merged).
size_t tok_encode(const Tokenizer *t, const char *text, size_t n, int32_t **ids, size_t *len, size_t *cap);
// Decodes ids (each in [0, vocab size)) as SentencePiece's DecodeIds does: BOS/EOS vanish, byte
// pieces join into UTF-8 (U+FFFD for bytes that form none), '▁' becomes a space and the leading
// one goes. GPT-2: the pieces' bytes join, special tokens vanish, and ill-formed UTF-8 becomes
// U+FFFD per maximal subpart (as its ByteLevel decoder). Returns a malloc'd, NUL-terminated
// string; *len its length.
char *tok_decode(const Tokenizer *t, const int32_t *ids, size_t n, size_t *len);
// The bytes token `id` contributes when printed after token `prev` (-1 at the start): streaming
// decode for generation (byte pieces give their raw byte, '▁' a space, and the leading space
// after BOS or at the start is dropped as the decoder does; GPT-2 gives the piece's raw bytes,
// maybe part of a UTF-8 character, and nothing for <|endoftext|>). Returns the byte count written
// to out, at most cap (64 is enough for Llama vocabularies, 128 for GPT-2's).
size_t tok_piece_bytes(const Tokenizer *t, int32_t prev, int32_t id, char *out, size_t cap);

// Length of the UTF-8 character at s (n > 0 bytes), or 0 when the bytes there form none
// (shortest forms only, no surrogates, at most U+10FFFF).
size_t tok_utf8_len(const uint8_t *s, size_t n);

// Lines of in to lines of space-separated ids on out (spm_encode --output_format=id), with BOS
// and EOS around each when asked; decode: lines of ids to lines of text (spm_decode
// --input_format=id). Reading ends early, between lines, once *stop is non-zero (stop may be NULL);
// *lines is the number of the last input line whose output is out. NULL when all went well (a
// failed write to out ends it early, for the caller to find), else the reason, with the line
// number, in why.
const char *tok_lines(const Tokenizer *t, int bos, int eos, int decode, FILE *in, FILE *out, const volatile int *stop,
                      unsigned long *lines, char *why, size_t whylen);
// After a loop of getline(in) that ended: NULL at the end of the input or a stop, else why the
// input could not be read (a closed or unreadable stdin reads as an error, never as no lines).
const char *tok_read_error(FILE *in, const volatile int *stop, char *why, size_t whylen);

#endif
