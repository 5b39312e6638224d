// chat: the Llama-2, ChatML and plain templates, and the rows they build.
#include "chat.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/buf.h"
#include "../../base/err.h"

// Meta's Llama-2 chat markers (llama/generation.py)
#define SFT_B_INST "[INST]"
#define SFT_E_INST "[/INST]"
#define SFT_B_SYS "<<SYS>>\n"
#define SFT_E_SYS "\n<</SYS>>\n\n"

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT } SftRole;

// ---- rows and text ----

void sft_push(SftRow *row, int32_t id, int32_t label) {
    size_t labels_cap = row->cap;  // ids and labels grow alike: one cap serves both
    buf_fit(row->labels, &labels_cap, row->len + 1);
    buf_fit(row->ids, &row->cap, row->len + 1);
    row->ids[row->len] = id;
    row->labels[row->len++] = label;
}

// ids[from, to) onto the row, each its own label when loss, else none
static void sft_push_ids(SftRow *row, const int32_t *ids, size_t from, size_t to, bool loss) {
    for (size_t i = from; i < to; i++) sft_push(row, ids[i], loss ? ids[i] : SFT_NO_LOSS);
}

void sft_push_special(SftRow *row, int id, bool loss) {
    if (id >= 0) sft_push(row, id, loss ? id : SFT_NO_LOSS);
}

void sft_text_put(SftText *t, const char *s, size_t n) {
    buf_fit(t->s, &t->cap, t->len + n + 1);
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

void sft_text_str(SftText *t, const char *s) { sft_text_put(t, s, strlen(s)); }

// Encodes text[0, n) onto the row, with loss or not
void sft_push_text(const Tokenizer *tok, SftRow *row, const char *text, size_t n, bool loss, int32_t **tmp, size_t *cap) {
    size_t len = 0;
    tok_encode(tok, text, n, tmp, &len, cap);
    sft_push_ids(row, *tmp, 0, len, loss);
}

// Python's str.isspace on the UTF-8 character at s (n > 0 bytes): its length when it is
// whitespace, else 0.
static size_t sft_space_len(const uint8_t *s, size_t n) {
    size_t len = tok_utf8_len(s, n);
    if (!len) return 0;
    uint32_t c = len == 1 ? s[0] : s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) c = c << 6 | (s[i] & 0x3F);
    bool space = (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
                 (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
    return space ? len : 0;
}

// Python's str.strip(): s[0, *n) without leading and trailing Unicode whitespace; returns the new start.
static const char *sft_strip(const char *s, size_t *n) {
    const uint8_t *p = (const uint8_t *)s;
    size_t start = 0, end = *n, k;
    while (start < end && (k = sft_space_len(p + start, end - start))) start += k;
    while (end > start) {
        size_t j = end - 1;
        while (j > start && end - j < 4 && (p[j] & 0xC0) == 0x80) j--;  // back to the last character's lead byte
        if (sft_space_len(p + j, end - j) != end - j) break;
        end = j;
    }
    *n = end - start;
    return s + start;
}

// ---- chat templates ----

static int sft_role(const SftMessage *m) {
    static const struct {
        const char *name;
        SftRole role;
    } names[] = {{"system", ROLE_SYSTEM}, {"user", ROLE_USER}, {"human", ROLE_USER}, {"assistant", ROLE_ASSISTANT}, {"gpt", ROLE_ASSISTANT}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (m->role_len == strlen(names[i].name) && !memcmp(m->role, names[i].name, m->role_len)) return (int)names[i].role;
    return -1;
}

const CliChoice sft_template_names[] = {{"llama2", CHAT_LLAMA2}, {"chatml", CHAT_CHATML}, {"none", CHAT_NONE}, {NULL, 0}};

static const char *const sft_role_names[] = {"system", "user", "assistant"};

// Length of the common prefix of a[0, na) and b[0, nb)
static size_t sft_common(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

// Llama-2 as Meta's chat_completion builds it: a leading system message goes inside the first user
// turn; each user/assistant pair is "[INST] {user} [/INST] {answer} " (both stripped) encoded on its
// own between BOS and EOS ids; a last user turn without answer is "[INST] {user} [/INST]" after BOS.
// The loss covers what follows the pair's tokens shared with its "[INST] {user} [/INST]" alone, and EOS.
static int sft_llama2(const Tokenizer *tok, const SftMessage *m, const int *roles, int n, bool all, SftRow *row, char *err,
                      size_t errlen) {
    int first = roles[0] == ROLE_SYSTEM;
    if (first && n == 1) return err_set(err, errlen, "a system message alone: Llama-2 chat needs a user message after it");
    for (int k = first; k < n; k++) {
        int want = (k - first) % 2 ? ROLE_ASSISTANT : ROLE_USER;
        if (roles[k] != want)
            return err_set(err, errlen, "message %d is %s where Llama-2 chat needs %s (roles: an optional system message, then user and assistant alternating)",
                            k + 1, roles[k] == ROLE_SYSTEM ? "a system message" : sft_role_names[roles[k]], sft_role_names[want]);
    }
    SftText user = {0}, full = {0};
    int32_t *a = NULL, *b = NULL;
    size_t acap = 0, bcap = 0;
    for (int k = first; k < n; k += 2) {
        user.len = 0;
        if (k == first && first) {
            sft_text_str(&user, SFT_B_SYS);
            sft_text_put(&user, m[0].content, m[0].content_len);
            sft_text_str(&user, SFT_E_SYS);
        }
        sft_text_put(&user, m[k].content, m[k].content_len);
        size_t ulen = user.len;
        const char *u = sft_strip(user.s, &ulen);
        full.len = 0;
        sft_text_str(&full, SFT_B_INST " ");
        sft_text_put(&full, u, ulen);
        sft_text_str(&full, " " SFT_E_INST);
        size_t plen = full.len, na = 0, nb = 0;
        tok_encode(tok, full.s, plen, &b, &nb, &bcap);
        sft_push_special(row, tok_bos(tok), all);
        if (k + 1 == n) {  // a last user turn: the prompt a generation would follow
            sft_push_ids(row, b, 0, nb, all);
            break;
        }
        size_t alen = m[k + 1].content_len;
        const char *ans = sft_strip(m[k + 1].content, &alen);
        sft_text_str(&full, " ");
        sft_text_put(&full, ans, alen);
        sft_text_str(&full, " ");
        tok_encode(tok, full.s, full.len, &a, &na, &acap);
        size_t shared = sft_common(a, na, b, nb);
        sft_push_ids(row, a, 0, shared, all);
        sft_push_ids(row, a, shared, na, true);
        sft_push_special(row, tok_eos(tok), true);
    }
    free(user.s);
    free(full.s);
    free(a);
    free(b);
    return 0;
}

// ChatML: "<|im_start|>{role}\n{content}<|im_end|>\n" per message, the markers single ids and the
// role its canonical name (ShareGPT's human is user, gpt assistant). The role line and content are encoded as one text; an assistant message's loss covers the tokens after
// those shared with "{role}\n" alone, and its <|im_end|>.
static void sft_chatml(const Tokenizer *tok, const SftMessage *m, const int *roles, int n, bool all, const int markers[2], SftRow *row) {
    int start = markers[0], end = markers[1];
    SftText text = {0};
    int32_t *a = NULL, *b = NULL;
    size_t acap = 0, bcap = 0;
    for (int k = 0; k < n; k++) {
        bool loss = all || roles[k] == ROLE_ASSISTANT;
        text.len = 0;
        sft_text_str(&text, sft_role_names[roles[k]]);
        sft_text_str(&text, "\n");
        size_t na = 0, nb = 0;
        tok_encode(tok, text.s, text.len, &b, &nb, &bcap);
        sft_text_put(&text, m[k].content, m[k].content_len);
        tok_encode(tok, text.s, text.len, &a, &na, &acap);
        size_t shared = sft_common(a, na, b, nb);
        sft_push_special(row, start, all);
        sft_push_ids(row, a, 0, shared, all);
        sft_push_ids(row, a, shared, na, loss);
        sft_push_special(row, end, loss);
        sft_push_text(tok, row, "\n", 1, all, &a, &acap);
    }
    free(text.s);
    free(a);
    free(b);
}

// No template: BOS, each message's content encoded on its own, EOS; the loss covers the assistant
// messages, and EOS when the conversation ends with one.
static void sft_plain(const Tokenizer *tok, const SftMessage *m, const int *roles, int n, bool all, SftRow *row) {
    int32_t *a = NULL;
    size_t acap = 0;
    sft_push_special(row, tok_bos(tok), all);
    for (int k = 0; k < n; k++) sft_push_text(tok, row, m[k].content, m[k].content_len, all || roles[k] == ROLE_ASSISTANT, &a, &acap);
    sft_push_special(row, tok_eos(tok), all || roles[n - 1] == ROLE_ASSISTANT);
    free(a);
}

int sft_chatml_markers(const Tokenizer *tok, int markers[2], char *err, size_t errlen) {
    markers[0] = tok_piece_id(tok, "<|im_start|>");
    markers[1] = tok_piece_id(tok, "<|im_end|>");
    if (markers[0] >= 0 && markers[1] >= 0) return 0;
    return err_set(err, errlen, "the tokenizer has no %s token; ChatML needs <|im_start|> and <|im_end|> in its vocabulary (use --chat_template llama2|none)",
                    markers[0] < 0 ? "<|im_start|>" : "<|im_end|>");
}

int sft_chat_row(const Tokenizer *tok, ChatTemplate t, const int markers[2], const SftMessage *m, int n, int train_on_inputs,
                        SftRow *row, char *err, size_t errlen) {
    row->len = 0;
    if (n <= 0) return err_set(err, errlen, "the conversation has no messages");
    int *roles = mallocCheck((size_t)n * sizeof *roles);
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) {
        if (!m[k].role || !m[k].content) rc = (snprintf(err, errlen, "message %d has no %s", k + 1, m[k].role ? "content" : "role"), -1);
        else if ((roles[k] = sft_role(&m[k])) < 0)
            rc = (snprintf(err, errlen, "message %d has role \"%.*s\", which is none of system, user, assistant (ShareGPT: human, gpt)", k + 1,
                           (int)(m[k].role_len > 40 ? 40 : m[k].role_len), m[k].role), -1);
    }
    if (!rc) {
        if (t == CHAT_LLAMA2) rc = sft_llama2(tok, m, roles, n, train_on_inputs, row, err, errlen);
        else if (t == CHAT_CHATML) sft_chatml(tok, m, roles, n, train_on_inputs, markers, row);
        else sft_plain(tok, m, roles, n, train_on_inputs, row);
    }
    free(roles);
    if (rc) row->len = 0;
    return rc;
}

int sft_chat_encode(const Tokenizer *tok, ChatTemplate t, const SftMessage *m, int n, int train_on_inputs, SftRow *row,
                    char *err, size_t errlen) {
    int markers[2] = {-1, -1};
    row->len = 0;
    if (t == CHAT_CHATML && sft_chatml_markers(tok, markers, err, errlen)) return -1;
    return sft_chat_row(tok, t, markers, m, n, train_on_inputs, row, err, errlen);
}

int sft_json_messages(const JsonValue *obj, SftMessage **msgs, size_t *cap, int *n, char *why, size_t whylen) {
    const char *key = "messages", *rk = "role", *ck = "content";
    const JsonValue *list = json_get(obj, key);
    if (!list) key = "conversations", rk = "from", ck = "value", list = json_get(obj, key);
    if (!list) return err_set(why, whylen, "no \"messages\" (or ShareGPT \"conversations\") array");
    if (list->type == JSON_NULL) return 0;
    if (list->type != JSON_ARRAY) return err_set(why, whylen, "\"%s\" is not an array of messages", key);
    if (list->len > INT32_MAX) return err_set(why, whylen, "\"%s\" holds too many messages", key);
    if (list->len > *cap) {
        *cap = list->len;
        free(*msgs);
        *msgs = mallocCheck(*cap * sizeof **msgs);
    }
    for (size_t i = 0; i < list->len; i++) {
        const JsonValue *it = &list->items[i], *role = json_get(it, rk), *content = json_get(it, ck);
        if (it->type != JSON_OBJECT) return err_set(why, whylen, "message %zu of \"%s\" is not an object", i + 1, key);
        if (!role || role->type != JSON_STRING)
            return err_set(why, whylen, "message %zu of \"%s\" has %s \"%s\"", i + 1, key, role ? "a non-string" : "no", rk);
        if (!content || content->type != JSON_STRING)
            return err_set(why, whylen, "message %zu of \"%s\" has %s \"%s\"", i + 1, key, content ? "a non-string" : "no", ck);
        (*msgs)[i] = (SftMessage){role->str, role->len, content->str, content->len};
    }
    *n = (int)list->len;
    return 1;
}

void sft_row_free(SftRow *row) {
    free(row->ids);
    free(row->labels);
    *row = (SftRow){0};
}

// ---- fsdpc tokenize --chat ----

static int sft_print(FILE *out, const int32_t *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fprintf(out, i ? " %d" : "%d", (int)v[i]) < 0) return -1;
    return fputc('\n', out) == EOF ? -1 : 0;
}

const char *sft_tokenize_chat(const Tokenizer *tok, ChatTemplate t, int labels, FILE *in, FILE *out, const volatile int *stop,
                              unsigned long *lines, char *why, size_t whylen) {
    char *line = NULL, msg[600];
    size_t line_cap = 0, msgs_cap = 0;
    SftMessage *msgs = NULL;
    SftRow row = {0};
    const char *fail = NULL;
    ssize_t got;
    int markers[2] = {-1, -1};
    bool have_markers = false;
    for (unsigned long line_no = 1; !fail && !(stop && *stop) && (got = getline(&line, &line_cap, in)) >= 0; line_no++) {
        size_t i = 0;
        while (i < (size_t)got && strchr(" \t\r\n", line[i])) i++;
        if (i == (size_t)got) continue;  // a blank line is no conversation
        JsonValue *obj = json_parse(line, (size_t)got, msg, sizeof msg);
        int n = 0, rc = -1;
        if (!obj) snprintf(why, whylen, "stdin line %lu is not JSON (%s)", line_no, msg);
        else if (obj->type != JSON_OBJECT) snprintf(why, whylen, "stdin line %lu is not a JSON object", line_no);
        else if ((rc = sft_json_messages(obj, &msgs, &msgs_cap, &n, msg, sizeof msg)) <= 0)
            snprintf(why, whylen, "stdin line %lu: %s", line_no, rc ? msg : "the conversation is null");
        else if (t == CHAT_CHATML && !have_markers && (rc = sft_chatml_markers(tok, markers, msg, sizeof msg)) < 0)
            snprintf(why, whylen, "stdin line %lu: %s", line_no, msg);
        else if ((have_markers = true, rc = sft_chat_row(tok, t, markers, msgs, n, 0, &row, msg, sizeof msg)) < 0)
            snprintf(why, whylen, "stdin line %lu: %s", line_no, msg);
        else rc = 1;
        json_free(obj);
        if (rc <= 0) fail = why;
        else if (sft_print(out, row.ids, row.len) || (labels && sft_print(out, row.labels, row.len))) fail = "cannot write to stdout";
        else *lines = line_no;
    }
    if (!fail) fail = tok_read_error(in, stop, why, whylen);
    free(line);
    free(msgs);
    sft_row_free(&row);
    return fail;
}
