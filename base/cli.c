// cli: the table-driven command-line parser (see cli.h).
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "path.h"

static int parse_bool(const char *v, int *out) {
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "True")) return *out = 1, 1;
    if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "False")) return *out = 0, 1;
    return 0;
}

const char *cli_choice_name(const CliChoice *c, int value) {
    for (; c->name; c++)
        if (c->value == value) return c->name;
    return "?";
}

// The flags of t and its base as one list: index i < t->n is t's own, the rest its base's, whose
// values live base_off further into the destination.
static size_t flag_count(const CliTable *t) { return t->n + (t->base ? t->base->n : 0); }

static const CliFlag *flag_at(const CliTable *t, size_t i, size_t *off) {
    if (off) *off = i < t->n ? 0 : t->base_off;
    return i < t->n ? &t->flags[i] : &t->base->flags[i - t->n];
}

static unsigned char *given_at(const CliTable *t, void *dst, size_t i) {
    const CliTable *owner = i < t->n ? t : t->base;
    if (!owner->given_off) return NULL;
    return (unsigned char *)dst + (i < t->n ? 0 : t->base_off) + owner->given_off + (i < t->n ? i : i - t->n);
}

// The index of the flag spelt `name` (its name or an alias), with that spelling; -1 if none.
static long find_flag(const CliTable *t, const char *name, const char **spelling) {
    for (size_t i = 0; i < flag_count(t); i++) {
        const CliFlag *f = flag_at(t, i, NULL);
        if (!strcmp(f->name, name)) return *spelling = f->name, (long)i;
        for (const char *const *a = f->aliases; a && *a; a++)
            if (!strcmp(*a, name)) return *spelling = *a, (long)i;
    }
    return -1;
}

// the spellings the last parse read (pointers to static names in the flag tables)
static const char *seen[CLI_MAX_FLAGS];
static size_t nseen;

int cli_spelled(const char *spelling) {
    for (size_t i = 0; i < nseen; i++)
        if (!strcmp(seen[i], spelling)) return 1;
    return 0;
}

static void note_spelling(const char *spelling) {
    if (!cli_spelled(spelling) && nseen < CLI_MAX_FLAGS) seen[nseen++] = spelling;
}

int cli_given(const CliTable *t, const void *dst, const char *name) {
    const char *spelling;
    long i = find_flag(t, name, &spelling);
    unsigned char *g = i < 0 ? NULL : given_at(t, (void *)dst, (size_t)i);
    return g && *g;
}

void cli_forget(const CliTable *t, void *dst, const char *name) {
    const char *spelling;
    long i = find_flag(t, name, &spelling);
    unsigned char *g = i < 0 ? NULL : given_at(t, dst, (size_t)i);
    if (g) *g = 0;
}

// Optimal string alignment distance (edits and swaps of neighbours), for names under 64 bytes.
static size_t edit_distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b), d[64][64];
    if (na >= 64 || nb >= 64) return (size_t)-1;
    for (size_t i = 0; i <= na; i++)
        for (size_t j = 0; j <= nb; j++) {
            if (!i || !j) {
                d[i][j] = i + j;
                continue;
            }
            size_t sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]), del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            size_t best = sub < del ? sub : del;
            if (ins < best) best = ins;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best) best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[na][nb];
}

const char *cli_nearest(const char *word, const char *const *names, size_t n) {
    // a third of the word's letters may be wrong, at least one: "batchsize" finds batch_size,
    // "bogus" nothing
    size_t limit = strlen(word) / 3 ? strlen(word) / 3 : 1, best = limit + 1;
    const char *found = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(word, names[i]);
        if (d < best) best = d, found = names[i];
    }
    return found;
}

static int unknown_flag(const CliTable *t, const char *name, char *err, size_t errlen) {
    static const char *names[4 * CLI_MAX_FLAGS];
    size_t n = 0;
    for (size_t i = 0; i < flag_count(t) && n < sizeof names / sizeof names[0]; i++) {
        const CliFlag *f = flag_at(t, i, NULL);
        names[n++] = f->name;
        for (const char *const *a = f->aliases; a && *a && n < sizeof names / sizeof names[0]; a++) names[n++] = *a;
    }
    const char *near = cli_nearest(name, names, n), *cmd = t->command ? t->command : "";
    if (near) return err_set(err, errlen, "unknown flag '--%s'%s%s (did you mean --%s?)", name, *cmd ? " for " : "", cmd, near);
    return err_set(err, errlen, "unknown flag '--%s'%s%s (fsdpc%s%s --help lists the flags)", name, *cmd ? " for " : "", cmd,
                   *cmd ? " " : "", cmd);
}

// the spellings a choice flag accepts, "a|b|c" ("from=setting|..." for a map)
static const char *choice_list(const CliFlag *f) {
    static char buf[1024];
    size_t n = 0;
    buf[0] = 0;
    for (const CliChoice *c = f->choices; c->name && n < sizeof buf; c++)
        n += (size_t)(f->kind == CLI_MAP ? snprintf(buf + n, sizeof buf - n, "%s%s=%s", n ? "|" : "", c->name,
                                                    cli_choice_name(f->names, c->value))
                                         : snprintf(buf + n, sizeof buf - n, "%s%s", n ? "|" : "", c->name));
    return buf;
}

static void store_choice(const CliFlag *f, char *field, int value) {
    if (f->size) snprintf(field, f->size, "%s", cli_choice_name(f->names ? f->names : f->choices, value));
    else *(int *)field = value;
}

static int bad_number(const CliFlag *f, const char *v, const char *what, char *err, size_t errlen) {
    return err_set(err, errlen, "--%s expects %s, got '%s'", f->name, f->text ? f->text : what, v);
}

// Whether x lies in f's range (see CliFlag); one that does not parse refuses every value, so a
// table's typo shows at once
static int in_range(const CliFlag *f, double x) {
    char open, close;
    double lo, hi;
    if (!f->range) return 1;
    if (sscanf(f->range, "%c%lf ,%lf %c", &open, &lo, &hi, &close) != 4) return 0;
    return (open == '[' ? x >= lo : x > lo) && (close == ']' ? x <= hi : x < hi);
}

static int out_of_range(const CliFlag *f, const char *v, char *err, size_t errlen) {
    return err_set(err, errlen, "--%s must be in %s, got '%s'", f->name, f->range, v);
}

// Stores v as f's value in dst: 0, or -1 with the line in err.
static int set_value(const CliFlag *f, void *dst, const char *v, int argc, char *err, size_t errlen) {
    char *field = (char *)dst + f->off, *end = NULL;
    switch (f->kind) {
    case CLI_INT: {
        long x = strtol(v, &end, 10);
        char what[80];
        snprintf(what, sizeof what, "an integer in %s", f->range ? f->range : "[-2147483647, 2147483647]");
        if (!*v || *end || x < -2147483647L || x > 2147483647L) return bad_number(f, v, what, err, errlen);
        *(int *)field = (int)x;
        if (f->valid && !f->valid(field)) return bad_number(f, v, "an integer", err, errlen);
        if (!in_range(f, (double)x)) return out_of_range(f, v, err, errlen);
        break;
    }
    case CLI_U64: {
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (*v < '0' || *v > '9' || *end || errno)
            return bad_number(f, v, "an integer in [0, 18446744073709551615]", err, errlen);
        *(uint64_t *)field = x;
        if (f->valid && !f->valid(field)) return bad_number(f, v, "a non-negative integer", err, errlen);
        if (!in_range(f, (double)x)) return out_of_range(f, v, err, errlen);
        break;
    }
    case CLI_FLOAT:
    case CLI_DOUBLE: {
        // a float parses as one, so a value beyond its range is infinite rather than rounded
        double x = f->kind == CLI_FLOAT ? strtof(v, &end) : strtod(v, &end);
        if (!*v || *end) return bad_number(f, v, "a number", err, errlen);
        if (f->kind == CLI_FLOAT) *(float *)field = (float)x;
        else *(double *)field = x;
        if (f->valid && !f->valid(field)) return bad_number(f, v, "a number", err, errlen);
        if (!isfinite(x)) return err_set(err, errlen, "--%s must be a finite number, got '%s'", f->name, v);
        if (!in_range(f, x)) return out_of_range(f, v, err, errlen);
        break;
    }
    case CLI_BOOL:
        if (!parse_bool(v, (int *)field)) return err_set(err, errlen, "--%s expects 0/1/true/false, got '%s'", f->name, v);
        break;
    case CLI_ENUM:
    case CLI_MAP: {
        const CliChoice *c = f->choices;
        while (c->name && strcmp(c->name, v) != 0) c++;
        if (!c->name)
            return err_set(err, errlen, "--%s must be one of %s%s, got '%s'", f->name, choice_list(f),
                          f->kind == CLI_MAP ? " (each as from=setting)" : "", v);
        store_choice(f, field, c->value);
        break;
    }
    case CLI_BOOLENUM: {
        int on;
        if (!parse_bool(v, &on)) return err_set(err, errlen, "--%s expects 0/1/true/false, got '%s'", f->name, v);
        store_choice(f, field, f->choices[on ? 0 : 1].value);
        break;
    }
    case CLI_UNSUP: {
        int on;
        if (!parse_bool(v, &on) || on) return err_set(err, errlen, "--%s %s is not supported yet: %s", f->name, v, f->text);
        break;
    }
    case CLI_STR:
        if (strlen(v) >= f->size) return err_set(err, errlen, "--%s value is too long (max %zu characters)", f->name, f->size - 1);
        snprintf(field, f->size, "%s", v);
        break;
    case CLI_PATH:
        path_set((char **)field, v);
        break;
    case CLI_LIST: {
        CliList *l = (CliList *)field;
        if (!l->v) l->v = mallocCheck((size_t)argc * sizeof *l->v);  // argv cannot hold more items
        l->v[l->n++] = v;
        break;
    }
    case CLI_CALL: {
        const char *e = f->call(dst, v);
        if (e) return err_set(err, errlen, "%s", e);
        break;
    }
    }
    return 0;
}

// bytes a flag's stored value occupies, for telling whether two spellings of one setting disagree
static size_t value_size(const CliFlag *f) {
    switch (f->kind) {
    case CLI_U64: return sizeof(uint64_t);
    case CLI_FLOAT: return sizeof(float);
    case CLI_DOUBLE: return sizeof(double);
    case CLI_STR: return f->size;
    case CLI_PATH: return sizeof(char *);  // compared as strings (cli_parse)
    case CLI_INT: case CLI_BOOL: case CLI_ENUM: case CLI_MAP: case CLI_BOOLENUM: return f->size ? f->size : sizeof(int);
    default: return 0;  // lists, calls and unsupported flags store nothing comparable
    }
}

// the address of each CLI_PATH value of t (and its base) in dst, in turn: *i from 0
static char **next_path(const CliTable *t, void *dst, size_t *i) {
    while (*i < flag_count(t)) {
        size_t off;
        const CliFlag *f = flag_at(t, (*i)++, &off);
        if (f->kind == CLI_PATH) return (char **)((char *)dst + off + f->off);
    }
    return NULL;
}

// the base's defaults, then the table's own; a path neither set reads as ""
static void fill_defaults(const CliTable *t, void *dst) {
    if (t->base && t->base->defaults) t->base->defaults((char *)dst + t->base_off);
    if (t->defaults) t->defaults(dst);
    size_t i = 0;
    for (char **p; (p = next_path(t, dst, &i));)
        if (!*p) *p = path_dup("");
}

void cli_free(const CliTable *t, void *dst) {
    size_t i = 0;
    for (char **p; (p = next_path(t, dst, &i));) free(*p), *p = NULL;
}

int cli_parse(const CliTable *t, void *dst, int argc, char **argv, char *err, size_t errlen) {
    size_t nf = flag_count(t);
    if (nf > CLI_MAX_FLAGS || (t->base && t->base->base)) err_fatal("a flag table has %zu flags (or a base with a base)", nf);
    fill_defaults(t, dst);
    nseen = 0;
    for (size_t i = 0; i < nf; i++)
        if (given_at(t, dst, i)) *given_at(t, dst, i) = 0;
    // the spelling that set each flag's value: two different spellings of one setting (an alias
    // and its flag, or two flags storing the same field) that disagree are refused rather than
    // letting the later one win unseen; repeating one spelling still overrides, as scripts that
    // append overrides expect (on the stack: an error returns from anywhere in the loop)
    const char *spelled[CLI_MAX_FLAGS] = {0};
    unsigned char before[1024];
    // flags marked `first` are applied in pass 0, so the others override them wherever they appear
    for (int pass = 0; pass < 2; pass++) {
        const CliFlag *list = NULL;  // the list flag that bare arguments add to
        size_t list_off = 0;
        for (int i = 1; i < argc; i++) {
            const char *a = argv[i];
            if (!strcmp(a, "-h")) return CLI_HELP;
            if (strncmp(a, "--", 2) != 0) {
                if (!list) return err_set(err, errlen, "unexpected argument '%s' (%s)", a, t->bare_hint);
                if (pass == !list->first && set_value(list, (char *)dst + list_off, a, argc, err, errlen)) return -1;
                continue;
            }
            list = NULL;
            char name[64];
            const char *eq = strchr(a + 2, '='), *val, *spelling;
            size_t nlen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            if (nlen >= sizeof name) return err_set(err, errlen, "unknown flag '%s'", a);
            memcpy(name, a + 2, nlen);
            name[nlen] = 0;
            if (!strcmp(name, "help")) return CLI_HELP;
            long idx = find_flag(t, name, &spelling);
            if (idx < 0) return unknown_flag(t, name, err, errlen);
            size_t off;
            const CliFlag *f = flag_at(t, (size_t)idx, &off);
            note_spelling(spelling);
            const char *next = i + 1 < argc ? argv[i + 1] : NULL;
            int dummy, next_is_flag = next && !strncmp(next, "--", 2);
            if (eq) {
                val = eq + 1;
            } else if (f->kind == CLI_UNSUP) {  // any value may follow; none means "on"
                val = next && !next_is_flag ? argv[++i] : "1";
            } else if (f->kind == CLI_BOOL || f->kind == CLI_BOOLENUM) {
                // a bare boolean flag means true; an explicit 0/1 after it is consumed
                val = next && parse_bool(next, &dummy) ? argv[++i] : "1";
            } else if (!next || (t->strict && next_is_flag)) {
                if (f->kind == CLI_LIST) return err_set(err, errlen, "--%s needs at least one %s", name, f->text);
                return err_set(err, errlen, "--%s needs a value", name);
            } else {
                val = argv[++i];
            }
            if (t->strict && !*val) return err_set(err, errlen, "--%s needs a value", name);
            if (!*val && (f->kind == CLI_STR || f->kind == CLI_PATH))  // a job script's unset variable: never the flag's default
                return err_set(err, errlen, "--%s needs %s, not an empty one (an unset variable in a job script?); leave the flag out for its default", name,
                               f->arg && !strcmp(f->arg, "DIR") ? "a directory" : f->arg && !strcmp(f->arg, "FILE") ? "a file" : "a value");
            if (f->kind == CLI_LIST) list = f, list_off = off;
            if (pass != !f->first) continue;
            size_t vs = f->first ? 0 : value_size(f), at = off + f->off;
            const char *prev = NULL;
            for (size_t j = 0; j < nf && vs && vs <= sizeof before; j++) {
                size_t joff;
                const CliFlag *g = flag_at(t, j, &joff);
                if (spelled[j] && joff + g->off == at && (j != (size_t)idx || spelled[j] != spelling)) prev = spelled[j];
            }
            char *was = prev && f->kind == CLI_PATH ? path_dup(*(char **)((char *)dst + at)) : NULL;  // set_value frees it
            if (prev) memcpy(before, (char *)dst + at, vs);
            int bad = set_value(f, (char *)dst + off, val, argc, err, errlen);
            int differs = !bad && prev && (was ? strcmp(was, *(char **)((char *)dst + at)) : memcmp(before, (char *)dst + at, vs)) != 0;
            free(was);
            if (bad) return -1;
            if (differs)
                return err_set(err, errlen, "--%s %s contradicts --%s given before it (both set one setting; give one)", name, val, prev);
            if (vs) spelled[idx] = spelling;
            // an alias counts as its setting given, whichever spelling the command line used
            if (given_at(t, dst, (size_t)idx)) *given_at(t, dst, (size_t)idx) = 1;
            for (size_t j = 0; j < nf && f->kind != CLI_UNSUP; j++) {
                size_t joff;
                const CliFlag *g = flag_at(t, j, &joff);
                if (joff + g->off == at && g->kind != CLI_UNSUP && given_at(t, dst, j)) *given_at(t, dst, j) = 1;
            }
        }
    }
    return CLI_OK;
}

int cli_set_default(const CliTable *t, void *dst, const char *name, const char *value, char *err, size_t errlen) {
    const char *spelling;
    long idx = find_flag(t, name, &spelling);
    if (idx < 0) err_fatal("no flag --%s to default", name);  // a table's own entry names it: a bug
    size_t off;
    const CliFlag *f = flag_at(t, (size_t)idx, &off);
    unsigned char *g = given_at(t, dst, (size_t)idx);
    return g && *g ? 0 : set_value(f, (char *)dst + off, value, 1, err, errlen);
}

// ---- --help ----

enum { HELP_WIDTH = 100, HELP_COLUMN = 30 };

// Writes text from column col on, wrapping within HELP_WIDTH at spaces and after '|' (a long
// list of choices), continuation lines starting at HELP_COLUMN. HELP_NBSP is a space that keeps
// its neighbours on one line.
#define HELP_NBSP '\x01'

static void help_wrap(FILE *out, size_t col, const char *text) {
    int space = 0;  // a space is owed before the next piece, unless it starts a line
    while (*text) {
        size_t n = strcspn(text, " |");
        if (text[n] == '|') n++;
        if (col + (size_t)space + n > HELP_WIDTH && col > HELP_COLUMN) col = (size_t)fprintf(out, "\n%*s", HELP_COLUMN, "") - 1;
        else if (space) col += (size_t)fprintf(out, " ");
        for (size_t k = 0; k < n; k++) fputc(text[k] == HELP_NBSP ? ' ' : text[k], out);
        col += n;
        text += n;
        space = *text == ' ';
        text += space;
    }
    fputc('\n', out);
}

// the value's name after the flag: "N", "X", "[0|1]", or the table's own
static const char *help_arg(const CliFlag *f) {
    if (f->arg) return f->arg;
    switch (f->kind) {
    case CLI_INT: case CLI_U64: return "N";
    case CLI_FLOAT: case CLI_DOUBLE: return "X";
    case CLI_BOOL: case CLI_BOOLENUM: case CLI_UNSUP: return "[0|1]";
    case CLI_ENUM: case CLI_MAP: return "NAME";
    case CLI_LIST: return "ITEM ...";
    default: return "VALUE";
    }
}

// the default of flag f whose part of the destination is d, or "" for none (an empty string, a
// boolean that is off, a spelling of another flag's setting)
static const char *help_default(const CliFlag *f, const char *d, char *buf, size_t len) {
    const char *field = d + f->off;
    buf[0] = 0;
    switch (f->kind) {
    case CLI_INT: snprintf(buf, len, "%d", *(const int *)field); break;
    case CLI_U64: snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)field); break;
    case CLI_FLOAT: snprintf(buf, len, "%g", *(const float *)field); break;
    case CLI_DOUBLE: snprintf(buf, len, "%g", *(const double *)field); break;
    case CLI_BOOL: snprintf(buf, len, "%s", *(const int *)field ? "on" : ""); break;
    case CLI_ENUM: snprintf(buf, len, "%s", f->size ? field : cli_choice_name(f->choices, *(const int *)field)); break;
    case CLI_STR: snprintf(buf, len, "%s", field); break;
    case CLI_PATH: snprintf(buf, len, "%s", path_or_empty(*(char *const *)field)); break;
    case CLI_CALL:
        if (f->show) f->show(d, buf, len);
        else if (f->size) snprintf(buf, len, "%s", field);
        break;
    default: break;
    }
    int unset = (f->kind == CLI_INT || f->kind == CLI_U64 || f->kind == CLI_FLOAT || f->kind == CLI_DOUBLE) ? !strcmp(buf, "0")
                : f->kind == CLI_ENUM ? !strcmp(buf, "?") : !buf[0];
    if (unset && f->unset) snprintf(buf, len, "%s", f->unset);
    return buf;
}

// appends to the help text buf (cap bytes, *n used), cutting what does not fit
static void help_add(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, cap - *n, fmt, ap);
    va_end(ap);
    *n = k < 0 || (size_t)k >= cap - *n ? cap - 1 : *n + (size_t)k;
}

static void help_flag(FILE *out, const CliFlag *f, const char *d) {
    char left[96], text[2048] = "", def[256];
    int col = snprintf(left, sizeof left, "  --%s %s", f->name, help_arg(f));
    size_t n = 0;
    help_add(text, sizeof text, &n, "%s", f->help ? f->help : "");
    const char *sep = " (";
    if (n > 1 && text[n - 1] == ')') text[--n] = 0, sep = "; ";  // one parenthesis: "(0: none; default: 1)"
    if (f->kind == CLI_ENUM || f->kind == CLI_MAP || (f->kind == CLI_CALL && f->choices)) help_add(text, sizeof text, &n, "%sone of %s", sep, choice_list(f)), sep = "; ";
    if (f->kind == CLI_UNSUP)
        help_add(text, sizeof text, &n, "%snot supported: %s; its off value 0 is accepted", sep, f->text), sep = "; ";
    for (const char *const *a = f->aliases; a && *a; a++, sep = "; ")
        help_add(text, sizeof text, &n, "%s%s--%s", a == f->aliases ? sep : ", ",
                 a == f->aliases ? (a[1] ? "aliases " : "alias ") : "", *a);
    if (*help_default(f, d, def, sizeof def)) help_add(text, sizeof text, &n, "%sdefault:%c%s", sep, HELP_NBSP, def), sep = "; ";
    if (*sep == ';') help_add(text, sizeof text, &n, ")");
    fputs(left, out);
    if (col >= HELP_COLUMN - 1) col = fprintf(out, "\n%*s", HELP_COLUMN, "") - 1;
    else col += fprintf(out, "%*s", HELP_COLUMN - col, "");
    help_wrap(out, (size_t)col, text);
}

void cli_help(const CliTable *t, FILE *out) {
    char *d = callocCheck(1, t->size);
    fill_defaults(t, d);
    const char *groups[64];
    size_t ng = 0, nf = flag_count(t);
    for (size_t i = 0; i < nf; i++) {  // each group once, in the order of the table
        const char *g = flag_at(t, i, NULL)->group, *own = "";
        size_t k = 0;
        while (k < ng && strcmp(groups[k], g ? g : own) != 0) k++;
        if (k == ng && ng < sizeof groups / sizeof groups[0]) groups[ng++] = g ? g : own;
    }
    for (size_t k = 0; k < ng; k++) {
        if (*groups[k]) fprintf(out, "\n%s:\n", groups[k]);
        else fprintf(out, "\n%s%sflags:\n", t->command ? t->command : "", t->command ? " " : "");
        for (size_t i = 0; i < nf; i++) {
            size_t off;
            const CliFlag *f = flag_at(t, i, &off);
            if (!strcmp(f->group ? f->group : "", groups[k])) help_flag(out, f, d + off);
        }
    }
    cli_free(t, d);
    free(d);
}

void cli_list(const CliTable *t, const char *prefix, FILE *out) {
    for (size_t i = 0; i < flag_count(t); i++) {
        const CliFlag *f = flag_at(t, i, NULL);
        fprintf(out, "%s --%s", prefix, f->name);
        for (const char *const *a = f->aliases; a && *a; a++) fprintf(out, " --%s", *a);
        fputc('\n', out);
    }
}
