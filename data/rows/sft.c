// sft: finetuning rows to (ids, labels): pre-tokenized ids, prompt/completion, Alpaca, chat.
#include "sft.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/err.h"
#include "../../base/json.h"
#include "../format/table.h"

#define SFT_HF_IGNORE (-100)  // Hugging Face's "no loss" label
// Stanford Alpaca's prompts. "### Response:" ends without a newline, as Stanford's train.py has it
// (torchtune's variant adds one).
#define SFT_ALPACA_INPUT                                                                                                  \
    "Below is an instruction that describes a task, paired with an input that provides further context. Write a response " \
    "that appropriately completes the request.\n\n### Instruction:\n"
#define SFT_ALPACA_NO_INPUT \
    "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n### Instruction:\n"

// Table columns (and JSON members) a format reads, by position in SftReader.cols
enum { COL_IDS, COL_MASK, COL_LABELS, NCOLS_IDS };
enum { COL_PROMPT, COL_COMPLETION };
enum { COL_INSTRUCTION, COL_INPUT, COL_OUTPUT };

struct SftReader {
    char *path;  // a copy: any length the system takes
    SftOptions o;
    DocsReader *docs;
    TableReader *table;  // Arrow / Parquet (owned by docs)
    int ncols, cols[3], col_of[3];  // selected table columns; col_of[COL_x]: its slot in vals, -1 absent
    TableValue vals[3];
    uint64_t row;        // JSON Lines: the line of the last row; tables: rows read so far
    uint64_t nulls;
    char describe[400];
    SftMessage *msgs;
    size_t msgs_cap;
    int64_t *ints[3];    // JSON lists as int64
    size_t ints_cap[3];
    SftText text;
    int markers[2];      // ChatML's <|im_start|>, <|im_end|>
    int32_t *tmp;        // encoding scratch
    size_t tmp_cap;
    DocsFields fields;   // rows' fields and those the format reads (SFT_TEXT: the docs reader's)
};

// ---- names ----

const CliChoice sft_format_names[] = {{"auto", SFT_AUTO}, {"text", SFT_TEXT}, {"input_ids", SFT_IDS},
                                      {"prompt_completion", SFT_PROMPT_COMPLETION}, {"alpaca", SFT_ALPACA},
                                      {"chat", SFT_CHAT}, {NULL, 0}};

const char *sft_id_text(int64_t id, char *buf, size_t len) {
    int n = id >= 0 ? snprintf(buf, len, "%lld", (long long)id)
                    : snprintf(buf, len, "%lld (%llu as an unsigned 64-bit value)", (long long)id, (unsigned long long)id);
    (void)n;  // 96 bytes hold the longest
    return buf;
}

const char *sft_format_name(SftFormat f) { return cli_choice_name(sft_format_names, f); }
const char *sft_template_name(ChatTemplate t) { return cli_choice_name(sft_template_names, t); }

static int sft_choice_parse(const CliChoice *c, const char *s, int *out) {
    for (; c->name; c++)
        if (!strcmp(s, c->name)) return *out = c->value, 0;
    return -1;
}

int sft_format_parse(const char *s, SftFormat *out) {
    int v;
    return sft_choice_parse(sft_format_names, s, &v) ? -1 : (*out = (SftFormat)v, 0);
}

int sft_template_parse(const char *s, ChatTemplate *out) {
    int v;
    return sft_choice_parse(sft_template_names, s, &v) ? -1 : (*out = (ChatTemplate)v, 0);
}

// ---- detection ----

// What a row with these members (present and not null) or columns is; -1 when none of them says.
static int sft_detect_members(bool (*has)(const void *, const char *), const void *src) {
    if (has(src, "messages") || has(src, "conversations")) return SFT_CHAT;
    if (has(src, "input_ids")) return has(src, "attention_mask") || has(src, "labels") ? SFT_IDS : SFT_TEXT;
    if (has(src, "prompt") && has(src, "completion")) return SFT_PROMPT_COMPLETION;
    if (has(src, "instruction") && has(src, "output")) return SFT_ALPACA;
    if (has(src, "text")) return SFT_TEXT;
    return -1;
}

static bool sft_json_has(const void *obj, const char *key) {
    const JsonValue *v = json_get(obj, key);
    return v && v->type != JSON_NULL;
}

static bool sft_json_mentions(const void *obj, const char *key) { return json_get(obj, key) != NULL; }

static bool sft_table_has(const void *t, const char *name) { return table_find(t, name) >= 0; }

int sft_detect(const char *path, DocsKind kind, DocsCompression comp, SftFormat *out, char *err, size_t errlen) {
    *out = SFT_TEXT;
    if (kind == DOCS_TEXT) return 0;
    DocsReader *d = docs_open_rows(path, kind, comp, err, errlen);
    if (!d) return -1;
    int rc = 0;
    if (docs_table(d)) {
        int f = sft_detect_members(sft_table_has, docs_table(d));
        if (f >= 0) *out = (SftFormat)f;
    } else {
        const JsonValue *obj;
        uint64_t line;
        while ((rc = docs_next_object(d, &obj, &line, err, errlen)) > 0) {
            int f = sft_detect_members(sft_json_has, obj);
            if (f >= 0) {
                *out = (SftFormat)f;
                break;
            }
            if (sft_detect_members(sft_json_mentions, obj) < 0) break;  // a row of none of these: text's reader says what is wrong
        }
        rc = rc < 0 ? -1 : 0;
    }
    docs_close(d);
    return rc;
}

// ---- the reader ----

static const char *const sft_members[][3] = {
    [SFT_IDS] = {"input_ids", "attention_mask", "labels"},
    [SFT_PROMPT_COMPLETION] = {"prompt", "completion", NULL},
    [SFT_ALPACA] = {"instruction", "input", "output"},
};
static const bool sft_required[][3] = {
    [SFT_IDS] = {true, false, false},
    [SFT_PROMPT_COMPLETION] = {true, true, false},
    [SFT_ALPACA] = {true, false, true},
};

// whether member `name` is one format f reads
static bool sft_member_of(SftFormat f, const char *name) {
    for (int c = 0; c < 3 && f != SFT_CHAT; c++)
        if (sft_members[f][c] && !strcmp(sft_members[f][c], name)) return true;
    return false;
}

// A JSON row's members (and a chat's message fields, as "messages.weight") into r->fields, those
// the format reads as used.
static void sft_note_json(SftReader *r, const JsonValue *obj) {
    SftFormat f = r->o.format;
    const char *chat = json_get(obj, "messages") ? "messages" : "conversations";
    for (size_t i = 0; i < obj->len; i++) {
        const JsonValue *m = &obj->items[i];
        bool used = f == SFT_CHAT ? !strcmp(m->key, chat) : sft_member_of(f, m->key);
        docs_fields_note(&r->fields, m->key, m->key_len, used);
        if (f != SFT_CHAT || !used || m->type != JSON_ARRAY) continue;
        const char *rk = !strcmp(chat, "messages") ? "role" : "from", *ck = !strcmp(chat, "messages") ? "content" : "value";
        char name[200];
        for (size_t e = 0; e < m->len; e++)
            for (size_t k = 0; m->items[e].type == JSON_OBJECT && k < m->items[e].len; k++) {
                const JsonValue *x = &m->items[e].items[k];
                int n = snprintf(name, sizeof name, "%s.%.*s", chat, (int)(x->key_len < 150 ? x->key_len : 150), x->key);
                docs_fields_note(&r->fields, name, (size_t)n, !strcmp(x->key, rk) || !strcmp(x->key, ck));
            }
    }
}

// Chat rows from a table: the "messages" column's role and content fields (or ShareGPT's
// "conversations" with from and value), a list of structs.
static int sft_table_chat(SftReader *r, char *err, size_t errlen) {
    TableReader *t = r->table;
    const char *key = "messages", *names[2] = {"role", "content"};
    int i = table_find(t, key);
    if (i < 0) key = "conversations", names[0] = "from", names[1] = "value", i = table_find(t, key);
    if (i < 0) return err_set(err, errlen, "'%s' (%s) has no 'messages' (or ShareGPT 'conversations') column, which --data_format chat reads", r->path, t->format);
    const TableColumn *c = &t->cols[i];
    if (c->kind != TABLE_STRUCT_LIST)
        return err_set(err, errlen, "'%s' (%s): column '%s' is %s, but chat rows are a list of structs with string fields %s and %s", r->path,
                        t->format, key, c->type, names[0], names[1]);
    int fields[2];
    for (int k = 0; k < 2; k++) {
        fields[k] = table_find_field(c, names[k]);
        if (fields[k] < 0 || !c->fields[fields[k]].is_string)
            return err_set(err, errlen, "'%s' (%s): column '%s' (%s) has %s field '%s', which chat rows need", r->path, t->format, key, c->type,
                            fields[k] < 0 ? "no" : "a non-string", names[k]);
    }
    r->ncols = 1;
    r->cols[0] = i;
    char name[200];
    for (int k = 0; k < c->nfields && k < TABLE_MAX_FIELDS; k++) {  // a message's other fields (a weight, a name) are not read
        int n = snprintf(name, sizeof name, "%s.%s", key, c->fields[k].name);
        docs_fields_note(&r->fields, name, (size_t)n < sizeof name ? (size_t)n : sizeof name - 1, k == fields[0] || k == fields[1]);
    }
    if (t->choose_fields(t, i, fields, 2, err, errlen)) return -1;
    return t->select(t, r->cols, 1, err, errlen);
}

static int sft_table_columns(SftReader *r, char *err, size_t errlen) {
    TableReader *t = r->table;
    SftFormat f = r->o.format;
    for (int i = 0; i < t->ncols; i++) {
        const char *n = t->cols[i].name;
        int used = f == SFT_CHAT ? !strcmp(n, table_find(t, "messages") >= 0 ? "messages" : "conversations")
                                 : sft_member_of(f, n);
        docs_fields_note(&r->fields, n, strlen(n), used);
    }
    if (f == SFT_CHAT) return sft_table_chat(r, err, errlen);
    for (int c = 0; c < 3; c++) {
        r->col_of[c] = -1;
        const char *name = sft_members[f][c];
        int i = name ? table_find(t, name) : -1;
        if (i < 0) {
            if (name && sft_required[f][c])
                return err_set(err, errlen, "'%s' (%s) has no '%s' column, which --data_format %s reads", r->path, t->format, name,
                                sft_format_name(f));
            continue;
        }
        TableKind want = f == SFT_IDS ? TABLE_INT_LIST : TABLE_STRING;
        if (t->cols[i].kind != want)
            return err_set(err, errlen, "'%s' (%s): column '%s' is %s, but --data_format %s reads %s there", r->path, t->format, name,
                            t->cols[i].type, sft_format_name(f), want == TABLE_STRING ? "text (string or large_string)" : "a list of integers");
        r->col_of[c] = r->ncols;
        r->cols[r->ncols++] = i;
    }
    return t->select(t, r->cols, r->ncols, err, errlen);
}

static void sft_describe_set(SftReader *r) {
    static const char *const what[] = {
        [SFT_TEXT] = "text documents (BOS, text, EOS; all tokens carry loss)",
        [SFT_IDS] = "input_ids",
        [SFT_PROMPT_COMPLETION] = "prompt/completion",
        [SFT_ALPACA] = "Alpaca (instruction/input/output, Stanford's prompt)",
        [SFT_CHAT] = "chat (messages or conversations)",
    };
    char ids[80] = "";
    if (r->o.format == SFT_IDS && r->table)
        snprintf(ids, sizeof ids, "%s%s", r->col_of[COL_MASK] >= 0 ? " with attention_mask" : "",
                 r->col_of[COL_LABELS] >= 0 ? (r->col_of[COL_MASK] >= 0 ? " and labels" : " with labels") : "");
    else if (r->o.format == SFT_IDS)
        snprintf(ids, sizeof ids, " (attention_mask, labels where present)");
    char tmpl[40] = "";
    if (r->o.format == SFT_CHAT) snprintf(tmpl, sizeof tmpl, ", %s template", sft_template_name(r->o.tmpl));
    snprintf(r->describe, sizeof r->describe, "%s, %s%s%s%s", docs_describe(r->docs), what[r->o.format], ids, tmpl,
             r->o.train_on_inputs && r->o.format != SFT_TEXT ? ", training on inputs too" : "");
}

SftReader *sft_open(const char *path, DocsKind kind, DocsCompression comp, const SftOptions *o, char *err, size_t errlen) {
    SftReader *r = callocCheck(1, sizeof *r);
    r->path = strdup(path);
    if (!r->path) err_fatal("out of memory copying '%s'", path);
    r->o = *o;
    if (r->o.vocab <= 0 && o->tok) r->o.vocab = tok_vocab_size(o->tok);
    if (r->o.format == SFT_AUTO && sft_detect(path, kind, comp, &r->o.format, err, errlen)) return sft_close(r), NULL;
    if (!o->tok && (r->o.format != SFT_IDS || r->o.vocab <= 0)) {  // only token ids read without a tokenizer
        snprintf(err, errlen, "'%s' holds %s rows, which need a tokenizer (--tokenizer)", path, sft_format_name(r->o.format));
        return sft_close(r), NULL;
    }
    if ((unsigned)r->o.format > SFT_CHAT) {
        snprintf(err, errlen, "'%s': data format %d is none fsdpc knows", path, (int)r->o.format);
        return sft_close(r), NULL;
    }
    if (r->o.format != SFT_TEXT && kind == DOCS_TEXT) {
        snprintf(err, errlen, "'%s' is a text file; --data_format %s reads rows (JSON Lines, Arrow or Parquet)", path, sft_format_name(r->o.format));
        return sft_close(r), NULL;
    }
    r->docs = r->o.format == SFT_TEXT ? docs_open(path, kind, comp, "text", 0, err, errlen) : docs_open_rows(path, kind, comp, err, errlen);
    if (!r->docs) return sft_close(r), NULL;
    r->table = r->o.format == SFT_TEXT ? NULL : docs_table(r->docs);
    if (r->table && sft_table_columns(r, err, errlen)) return sft_close(r), NULL;
    char why[400];
    if (r->o.format == SFT_CHAT && r->o.tmpl == CHAT_CHATML && sft_chatml_markers(o->tok, r->markers, why, sizeof why)) {
        snprintf(err, errlen, "'%s' holds chat rows, but %s", path, why);
        return sft_close(r), NULL;
    }
    sft_describe_set(r);
    return r;
}

// The ints of JSON array a (a list member of the row) into r->ints[slot]: 0, or -1 with why.
static int sft_json_ints(SftReader *r, int slot, const JsonValue *a, const char *name, char *why, size_t whylen) {
    if (a->type != JSON_ARRAY) return err_set(why, whylen, "\"%s\" is not an array of integers", name);
    if (a->len > r->ints_cap[slot]) {
        r->ints_cap[slot] = a->len;
        free(r->ints[slot]);
        r->ints[slot] = mallocCheck(a->len * sizeof *r->ints[slot]);
    }
    for (size_t i = 0; i < a->len; i++) {
        const JsonValue *v = &a->items[i];
        if (v->type != JSON_NUMBER || !v->is_int)
            return err_set(why, whylen, "\"%s\" item %zu is %s, not an integer", name, i, v->type == JSON_NULL ? "null" : "something else");
        r->ints[slot][i] = v->integer;
    }
    return 0;
}

// A pre-tokenized row: the positions whose mask is 1, their labels (-100 none) or the ids themselves.
static int sft_ids_row(SftReader *r, const int64_t *ids, size_t n, const int64_t *mask, size_t nmask, const int64_t *labels,
                       size_t nlabels, SftRow *row, char *why, size_t whylen) {
    if (mask && nmask != n) return err_set(why, whylen, "attention_mask has %zu items but input_ids %zu", nmask, n);
    if (labels && nlabels != n) return err_set(why, whylen, "labels has %zu items but input_ids %zu", nlabels, n);
    int vocab = r->o.vocab;
    char idt[96];
    for (size_t i = 0; i < n; i++) {
        if (mask && mask[i] != 0 && mask[i] != 1)
            return err_set(why, whylen, "attention_mask item %zu is %lld: masks hold 0 (padding) and 1", i, (long long)mask[i]);
        if (mask && !mask[i]) continue;  // padding leaves the row: its id and label do not matter
        if (ids[i] < 0 || ids[i] >= vocab)
            return err_set(why, whylen, "input_ids item %zu is %s, outside the vocabulary [0, %d)", i, sft_id_text(ids[i], idt, sizeof idt),
                           vocab);
        int64_t l = labels && !r->o.train_on_inputs ? labels[i] : ids[i];
        if (l != SFT_HF_IGNORE && (l < 0 || l >= vocab))
            return err_set(why, whylen, "labels item %zu is %lld: labels are -100 (no loss) or ids in [0, %d)", i, (long long)l, vocab);
        sft_push(row, (int32_t)ids[i], l == SFT_HF_IGNORE ? SFT_NO_LOSS : (int32_t)l);
    }
    return 0;
}

// BOS, the prompt without loss, the answer and EOS with it. Prompt and answer are encoded apart,
// so the boundary is exact (with a SentencePiece dummy prefix, the answer starts as a new word).
static void sft_prompt_answer(SftReader *r, const char *p, size_t np, const char *a, size_t na, SftRow *row, int32_t **tmp, size_t *cap) {
    bool all = r->o.train_on_inputs;
    sft_push_special(row, tok_bos(r->o.tok), all);
    sft_push_text(r->o.tok, row, p, np, all, tmp, cap);
    sft_push_text(r->o.tok, row, a, na, true, tmp, cap);
    sft_push_special(row, tok_eos(r->o.tok), true);
}

static void sft_alpaca(SftReader *r, const char *ins, size_t nins, const char *in, size_t nin, const char *out, size_t nout,
                       SftRow *row, int32_t **tmp, size_t *cap) {
    SftText *t = &r->text;
    t->len = 0;
    sft_text_str(t, nin ? SFT_ALPACA_INPUT : SFT_ALPACA_NO_INPUT);
    sft_text_put(t, ins, nins);
    if (nin) {
        sft_text_str(t, "\n\n### Input:\n");
        sft_text_put(t, in, nin);
    }
    sft_text_str(t, "\n\n### Response:");
    sft_prompt_answer(r, t->s, t->len, out, nout, row, tmp, cap);
}

static const int64_t sft_empty[1];

typedef struct {
    const char *s;
    size_t n;
    bool null, present;
} SftStr;

static SftStr sft_json_str(const JsonValue *obj, const char *key) {
    const JsonValue *v = json_get(obj, key);
    if (!v) return (SftStr){0};
    if (v->type == JSON_NULL) return (SftStr){.null = true, .present = true};
    if (v->type != JSON_STRING) return (SftStr){.present = true};
    return (SftStr){v->str, v->len, false, true};
}

static SftStr sft_table_str(const SftReader *r, int c) {
    if (r->col_of[c] < 0) return (SftStr){0};
    const TableValue *v = &r->vals[r->col_of[c]];
    if (v->is_null) return (SftStr){.null = true, .present = true};
    return (SftStr){v->str ? v->str : "", v->len, false, true};
}

// Strings of a prompt/completion or Alpaca row: 1 a row, 0 a null row, -1 with why.
static int sft_strings(SftReader *r, const JsonValue *obj, SftStr s[3], char *why, size_t whylen) {
    SftFormat f = r->o.format;
    for (int c = 0; c < 3; c++) {
        const char *name = sft_members[f][c];
        s[c] = !name ? (SftStr){0} : obj ? sft_json_str(obj, name) : sft_table_str(r, c);
        if (!name) continue;
        if (sft_required[f][c] && s[c].null) return 0;
        if (sft_required[f][c] && !s[c].present) return err_set(why, whylen, "no \"%s\" member (--data_format %s)", name, sft_format_name(f));
        if (s[c].present && !s[c].null && !s[c].s) return err_set(why, whylen, "\"%s\" is not a string", name);
    }
    return 1;
}

// The conversation of a table row (role and content of each list element) into r->msgs: 1, 0
// for a null list (a null row), -1 with why.
static int sft_table_messages(SftReader *r, int *n, char *why, size_t whylen) {
    const TableValue *v = &r->vals[0];
    if (v->is_null) return 0;
    if (v->len > INT32_MAX) return err_set(why, whylen, "the conversation holds too many messages");
    if (v->len > r->msgs_cap) {
        r->msgs_cap = v->len;
        free(r->msgs);
        r->msgs = mallocCheck(r->msgs_cap * sizeof *r->msgs);
    }
    for (size_t i = 0; i < v->len; i++) {
        const TableStr *role = &v->items[2 * i], *content = &v->items[2 * i + 1];
        r->msgs[i] = (SftMessage){role->is_null ? NULL : role->str, role->len, content->is_null ? NULL : content->str, content->len};
    }
    *n = (int)v->len;
    return 1;
}

// One row: 1, 0 for a null row, -1 with why.
static int sft_row(SftReader *r, const JsonValue *obj, SftRow *row, int32_t **tmp, size_t *cap, char *why, size_t whylen) {
    SftFormat f = r->o.format;
    if (f == SFT_CHAT) {
        int n = 0, rc = obj ? sft_json_messages(obj, &r->msgs, &r->msgs_cap, &n, why, whylen) : sft_table_messages(r, &n, why, whylen);
        if (rc <= 0) return rc;
        return sft_chat_row(r->o.tok, r->o.tmpl, r->markers, r->msgs, n, r->o.train_on_inputs, row, why, whylen) ? -1 : 1;
    }
    if (f == SFT_IDS) {
        const int64_t *lists[3] = {0};
        size_t lens[3] = {0};
        for (int c = 0; c < 3; c++) {
            const char *name = sft_members[f][c];
            if (obj) {
                const JsonValue *v = json_get(obj, name);
                if (!v && c == COL_IDS) return err_set(why, whylen, "no \"input_ids\" member (--data_format input_ids)");
                if (!v || v->type == JSON_NULL) {
                    if (c == COL_IDS) return 0;
                    continue;
                }
                if (sft_json_ints(r, c, v, name, why, whylen)) return -1;
                lists[c] = r->ints[c];
                lens[c] = v->len;
            } else if (r->col_of[c] >= 0) {
                const TableValue *v = &r->vals[r->col_of[c]];
                if (v->is_null) {
                    if (c == COL_IDS) return 0;
                    continue;
                }
                if (v->has_null_item) return err_set(why, whylen, "%s holds a null item", name);
                lists[c] = v->ints ? v->ints : sft_empty;  // an empty list is still there
                lens[c] = v->len;
            }
        }
        return sft_ids_row(r, lists[COL_IDS], lens[COL_IDS], lists[COL_MASK], lens[COL_MASK], lists[COL_LABELS], lens[COL_LABELS], row,
                           why, whylen) ? -1 : 1;
    }
    SftStr s[3];
    int rc = sft_strings(r, obj, s, why, whylen);
    if (rc <= 0) return rc;
    if (f == SFT_PROMPT_COMPLETION) sft_prompt_answer(r, s[0].s, s[0].n, s[1].s, s[1].n, row, tmp, cap);
    else sft_alpaca(r, s[0].s, s[0].n, s[1].s, s[1].n, s[2].s, s[2].n, row, tmp, cap);
    return 1;
}

// A text document as a row: BOS, the text, EOS (pre-tokenized ids as they are), all with loss.
static int sft_text_row(SftReader *r, SftRow *row, int32_t **tmp, size_t *cap, char *err, size_t errlen) {
    Doc d;
    int rc = docs_next(r->docs, &d, err, errlen);
    if (rc <= 0) return rc;
    r->row++;
    if (!d.is_ids) {
        sft_push_special(row, tok_bos(r->o.tok), true);
        sft_push_text(r->o.tok, row, d.text, d.len, true, tmp, cap);
        sft_push_special(row, tok_eos(r->o.tok), true);
        return 1;
    }
    char idt[96];
    for (size_t i = 0; i < d.len; i++) {
        if (d.ids[i] < 0 || d.ids[i] >= r->o.vocab)
            return err_set(err, errlen, "'%s' document %llu: input_ids item %zu is %s, outside the vocabulary [0, %d)", r->path,
                            (unsigned long long)r->row, i, sft_id_text(d.ids[i], idt, sizeof idt), r->o.vocab);
        sft_push(row, (int32_t)d.ids[i], (int32_t)d.ids[i]);
    }
    return 1;
}

int sft_next(SftReader *r, SftRow *row, char *err, size_t errlen) {
    int rc;
    char why[600];
    for (;;) {
        row->len = 0;
        if (r->o.format == SFT_TEXT) {
            rc = sft_text_row(r, row, &r->tmp, &r->tmp_cap, err, errlen);
            break;
        }
        const JsonValue *obj = NULL;
        if (r->table) {
            rc = r->table->next(r->table, r->vals, err, errlen);
            if (rc <= 0) break;
            r->row++;
        } else {
            rc = docs_next_object(r->docs, &obj, &r->row, err, errlen);
            if (rc <= 0) break;
            sft_note_json(r, obj);
        }
        rc = sft_row(r, obj, row, &r->tmp, &r->tmp_cap, why, sizeof why);
        if (rc < 0) {
            if (r->table) snprintf(err, errlen, "'%s' (%s) row %llu (counting from 0): %s", r->path, r->table->format, (unsigned long long)r->row - 1, why);
            else snprintf(err, errlen, "'%s' line %llu: %s", r->path, (unsigned long long)r->row, why);
            break;
        }
        if (rc > 0) break;
        r->nulls++;
    }
    if (rc <= 0) row->len = 0;
    return rc;
}

const char *sft_describe(const SftReader *r) { return r->describe; }
uint64_t sft_nulls(const SftReader *r) { return r->nulls + (r->o.format == SFT_TEXT && r->docs ? docs_nulls(r->docs) : 0); }
uint64_t sft_progress(const SftReader *r) { return r->docs ? docs_progress(r->docs) : 0; }
const DocsFields *sft_fields(const SftReader *r) { return r->o.format == SFT_TEXT && r->docs ? docs_fields(r->docs) : &r->fields; }

void sft_close(SftReader *r) {
    if (!r) return;
    docs_close(r->docs);
    free(r->msgs);
    for (int i = 0; i < 3; i++) free(r->ints[i]);
    free(r->text.s);
    free(r->tmp);
    free(r->path);
    free(r);
}
