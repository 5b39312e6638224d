// cli: the table-driven command-line parser (see cli.h).
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/comm.h"

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

static const CliFlag *find_flag(const CliTable *t, const char *name) {
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->flags[i].name, name) || (t->flags[i].alias && !strcmp(t->flags[i].alias, name))) return &t->flags[i];
    return NULL;
}

int cli_given(const CliTable *t, const char *name) {
    const CliFlag *f = find_flag(t, name);
    return f && t->given && t->given[f - t->flags];
}

static void unknown_flag(const CliTable *t, const char *name) {
    char list[512];
    const char *hint = t->unknown_hint;
    if (!hint) {  // a short table names its flags
        size_t n = (size_t)snprintf(list, sizeof list, "flags:");
        for (size_t i = 0; i < t->n && n < sizeof list; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s --%s", i ? "," : "", t->flags[i].name);
        hint = list;
    }
    comm_fail_all("unknown flag '--%s'%s%s (%s)", name, t->command ? " for " : "", t->command ? t->command : "", hint);
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

static void bad_number(const CliFlag *f, const char *v, const char *what) {
    comm_fail_all("--%s expects %s, got '%s'", f->name, f->text ? f->text : what, v);
}

static void set_value(const CliFlag *f, void *dst, const char *v, int argc) {
    char *field = (char *)dst + f->off, *end = NULL;
    switch (f->kind) {
    case CLI_INT: {
        long x = strtol(v, &end, 10);
        if (!*v || *end || x < -2147483647L || x > 2147483647L) bad_number(f, v, "an integer");
        *(int *)field = (int)x;
        if (f->valid && !f->valid(field)) bad_number(f, v, "an integer");
        break;
    }
    case CLI_U64: {
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (*v < '0' || *v > '9' || *end || errno) bad_number(f, v, "a non-negative integer");
        *(uint64_t *)field = x;
        if (f->valid && !f->valid(field)) bad_number(f, v, "a non-negative integer");
        break;
    }
    case CLI_FLOAT:
    case CLI_DOUBLE: {
        // a float parses as one, so a value beyond its range is infinite rather than rounded
        double x = f->kind == CLI_FLOAT ? strtof(v, &end) : strtod(v, &end);
        if (!*v || *end) bad_number(f, v, "a number");
        if (f->kind == CLI_FLOAT) *(float *)field = (float)x;
        else *(double *)field = x;
        if (f->valid && !f->valid(field)) bad_number(f, v, "a number");
        if (!isfinite(x)) comm_fail_all("--%s must be a finite number, got '%s'", f->name, v);
        break;
    }
    case CLI_BOOL:
        if (!parse_bool(v, (int *)field)) comm_fail_all("--%s expects 0/1/true/false, got '%s'", f->name, v);
        break;
    case CLI_ENUM:
    case CLI_MAP: {
        const CliChoice *c = f->choices;
        while (c->name && strcmp(c->name, v) != 0) c++;
        if (!c->name)
            comm_fail_all("--%s must be one of %s%s, got '%s'", f->name, choice_list(f),
                          f->kind == CLI_MAP ? " (each as from=setting)" : "", v);
        store_choice(f, field, c->value);
        break;
    }
    case CLI_BOOLENUM: {
        int on;
        if (!parse_bool(v, &on)) comm_fail_all("--%s expects 0/1/true/false, got '%s'", f->name, v);
        store_choice(f, field, f->choices[on ? 0 : 1].value);
        break;
    }
    case CLI_UNSUP: {
        int on;
        if (!parse_bool(v, &on) || on) comm_fail_all("--%s %s is not supported yet: %s", f->name, v, f->text);
        break;
    }
    case CLI_STR:
        if (strlen(v) >= f->size) comm_fail_all("--%s value is too long (max %zu characters)", f->name, f->size - 1);
        snprintf(field, f->size, "%s", v);
        break;
    case CLI_LIST: {
        CliList *l = (CliList *)field;
        if (!l->v) l->v = mallocCheck((size_t)argc * sizeof *l->v);  // argv cannot hold more items
        l->v[l->n++] = v;
        break;
    }
    case CLI_CALL: {
        const char *e = f->call(dst, v);
        if (e) comm_fail_all("%s", e);
        break;
    }
    }
}

// bytes a flag's stored value occupies, for telling whether two spellings of one setting disagree
static size_t value_size(const CliFlag *f) {
    switch (f->kind) {
    case CLI_U64: return sizeof(uint64_t);
    case CLI_FLOAT: return sizeof(float);
    case CLI_DOUBLE: return sizeof(double);
    case CLI_STR: return f->size;
    case CLI_INT: case CLI_BOOL: case CLI_ENUM: case CLI_MAP: case CLI_BOOLENUM: return f->size ? f->size : sizeof(int);
    default: return 0;  // lists, calls and unsupported flags store nothing comparable
    }
}

void cli_parse(const CliTable *t, void *dst, int argc, char **argv) {
    if (t->given) memset(t->given, 0, t->n);
    // which spelling set each setting: two different spellings of one setting (an alias and its
    // flag, say) that disagree are refused rather than letting the later one win unseen;
    // repeating one flag still overrides, as scripts that append overrides expect
    // (on the stack: an error longjmps out of a fuzzed parse, which would leak a heap array)
    const CliFlag *setter[CLI_MAX_FLAGS] = {0};
    unsigned char before[1024];
    if (t->n > CLI_MAX_FLAGS) err_fatal("a flag table has %zu flags, more than CLI_MAX_FLAGS", t->n);
    // flags marked `first` are applied in pass 0, so the others override them wherever they appear
    for (int pass = 0; pass < 2; pass++) {
        const CliFlag *list = NULL;  // the list flag that bare arguments add to
        for (int i = 1; i < argc; i++) {
            const char *a = argv[i];
            if (strncmp(a, "--", 2) != 0) {
                if (!list) comm_fail_all("unexpected argument '%s' (%s)", a, t->bare_hint);
                if (pass == !list->first) set_value(list, dst, a, argc);
                continue;
            }
            list = NULL;
            char name[64];
            const char *eq = strchr(a + 2, '='), *val;
            size_t nlen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            if (nlen >= sizeof name) comm_fail_all("unknown flag '%s'", a);
            memcpy(name, a + 2, nlen);
            name[nlen] = 0;
            if (t->usage && !strcmp(name, "help")) comm_fail_all("%s", t->usage);
            const CliFlag *f = find_flag(t, name);
            if (!f) unknown_flag(t, name);
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
                if (f->kind == CLI_LIST) comm_fail_all("--%s needs at least one %s", name, f->text);
                comm_fail_all("--%s needs a value", name);
            } else {
                val = argv[++i];
            }
            if (t->strict && !*val) comm_fail_all("--%s needs a value", name);
            if (f->kind == CLI_LIST) list = f;
            if (pass != !f->first) continue;
            size_t vs = f->first ? 0 : value_size(f);
            const CliFlag *prev = NULL;
            for (size_t j = 0; j < t->n && vs && vs <= sizeof before; j++)
                if (t->flags[j].off == f->off && setter[j] && setter[j] != f) prev = setter[j];
            if (prev) memcpy(before, (char *)dst + f->off, vs);
            set_value(f, dst, val, argc);
            if (prev && memcmp(before, (char *)dst + f->off, vs) != 0)
                comm_fail_all("--%s %s contradicts --%s given before it (both set one setting; give one)", name, val,
                              prev->name);
            if (vs) setter[f - t->flags] = f;
            if (!t->given) continue;
            // an alias counts as its setting given, whichever spelling the command line used
            t->given[f - t->flags] = 1;
            for (size_t j = 0; j < t->n && f->kind != CLI_UNSUP; j++)
                if (t->flags[j].off == f->off && t->flags[j].kind != CLI_UNSUP) t->given[j] = 1;
        }
    }
}
