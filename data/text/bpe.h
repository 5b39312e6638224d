// bpe: the one byte-pair-encoding engine. A vocabulary of pieces, a table of merges, merging by
// a heap of candidate pairs and a cache of the segments merged serve every BPE vocabulary fsdpc
// reads: SentencePiece-style tokenizer.json (Llama-2, Mistral) and byte-level BPE (GPT-2's
// encoder.json + vocab.bpe or tokenizer.json; Llama-3's tokenizer.json, its own regex; GPT-NeoX's,
// NFC and added tokens). What differs between them is a BpeOptions table.
// Only data/text/tokenizer.c calls it.
#ifndef FSDPC_BPE_H
#define FSDPC_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../base/json.h"

typedef struct Bpe Bpe;

// How the normalised text is cut into segments, which merges never cross.
typedef enum {
    BPE_SPLIT_NONE,       // the whole text is one segment
    BPE_SPLIT_REGEX,      // the pre-tokenizer regex's matches (and any text between them)
    BPE_SPLIT_METASPACE,  // a segment starts at each '▁' (Metaspace's split)
    BPE_SPLIT_WORDS,      // at each '▁' after another character; exact only when no merged piece
                          // holds such a pair (SentencePiece's vocabularies), else as NONE
} BpeSplit;

// What the text is normalised by before it is split (Hugging Face's normalizer).
typedef enum { BPE_NORM_NONE, BPE_NORM_NFC } BpeNormalizer;

// The table of choices: what one BPE vocabulary does differently from another.
typedef struct {
    bool byte_level;      // pieces are bytes, spelt in the files through GPT-2's byte-to-unicode map;
                          // merging starts from bytes. Else it starts from characters, and one that is
                          // no piece falls back to its <0xNN> byte pieces (<unk> where one is missing)
    bool piece_priority;  // a merge ranks as the first merge that makes its piece (SentencePiece's
                          // piece scores); else by its own position in the merge list (GPT-2)
    bool space_to_meta;   // ' ' becomes '▁'
    const char *prefix;   // put before the text (" ": ByteLevel's add_prefix_space; "▁"), NULL none
    bool prefix_always;   // even when the normalised text starts with it (a Prepend normalizer)
    bool lossy_per_byte;  // each byte that starts no UTF-8 character is one U+FFFD (SentencePiece);
                          // else one per maximal ill-formed subpart (WHATWG, Hugging Face)
    BpeSplit split;
    const char *regex;    // BPE_SPLIT_REGEX's pre-tokenizer (PCRE2 with Unicode properties)
    const char *special;  // a piece that is special even when no added token says so, or NULL
    bool whole_pieces;    // a segment that is itself a (normal) piece is that piece, unmerged
                          // (tokenizer.json's ignore_merges: Llama-3's, as tiktoken encodes)
    BpeNormalizer normalizer;  // applied to each text between added tokens, before the split
    bool split_added;     // the non-special added tokens are cut out of the text first, the longest
                          // leftmost match, as literal strings (GPT-NeoX's runs of spaces)
} BpeOptions;

typedef enum { BPE_PIECE_NORMAL, BPE_PIECE_SPECIAL, BPE_PIECE_UNKNOWN, BPE_PIECE_BYTE } BpePieceType;

// Whether a parsed JSON file is an encoder.json (an object of piece -> id, no "model" object).
bool bpe_json_is_encoder(const JsonValue *root);
// Whether a parsed tokenizer.json is byte-level BPE (a ByteLevel pre_tokenizer or decoder).
bool bpe_json_is_byte_level(const JsonValue *root);

// encoder.json (already parsed) with its merges file (vocab.bpe: "#version" then one "LEFT RIGHT"
// a line, best first): GPT-2's choices. NULL with a one-line reason in why on failure.
Bpe *bpe_load_encoder(const JsonValue *encoder, const char *merges_path, char *why, size_t whylen);
// A tokenizer.json of BPE, byte-level or SentencePiece-style (byte_fallback); its normalizer and
// pre_tokenizer give the choices. NULL with a one-line reason for the variants not supported.
Bpe *bpe_load_json(const JsonValue *root, char *why, size_t whylen);
void bpe_free(Bpe *b);

const BpeOptions *bpe_options(const Bpe *b);
int bpe_vocab_size(const Bpe *b);
int bpe_unk(const Bpe *b);  // the unk_token's id, -1 when none
// The id of the piece whose bytes are s[0, n) (a byte-level piece: its raw bytes), -1 when none.
int32_t bpe_piece_id(const Bpe *b, const char *s, size_t n);
// Piece id (in [0, vocab size)): its bytes in *p, *n (byte-level: raw bytes) and its type.
BpePieceType bpe_piece(const Bpe *b, int32_t id, const char **p, size_t *n);

// Encodes text[0, n), appending to *ids (realloc-grown, *cap its capacity); returns the count
// appended. Text spelling a special token is text; one spelling a non-special added token is that
// token with split_added. One thread at a time per Bpe (scratch space and a cache of the segments
// merged).
size_t bpe_encode(Bpe *b, const char *text, size_t n, int32_t **ids, size_t *len, size_t *cap);

// Copies s[0, n) to out (room for 3n bytes) with ill-formed UTF-8 as U+FFFD: one per byte when
// per_byte, else one per maximal ill-formed subpart; returns the bytes written.
size_t bpe_utf8_lossy(const uint8_t *s, size_t n, uint8_t *out, bool per_byte);

#endif
