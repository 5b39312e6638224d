#include "../base/err.h"
// validate: checkpoint attribute and dataset checks over plain data (see validate.h). Nothing
#include "../base/err.h"
// here trusts the description: ranks, sizes and strings are bounded before they are used.
#include "../base/err.h"
#include "validate.h"
#include "../base/err.h"

#include "../base/err.h"
#include <limits.h>
#include "../base/err.h"
#include <math.h>
#include "../base/err.h"
#include <stdio.h>
#include "../base/err.h"
#include <stdlib.h>
#include "../base/err.h"
#include <string.h>
#include "../base/err.h"

#include "../base/err.h"
const char *const ckpt_groups[CKPT_NGROUPS] = {"model", "optim/exp_avg", "optim/exp_avg_sq"};
#include "../base/err.h"

#include "../base/err.h"
static char msg[1600];
#include "../base/err.h"

#include "../base/err.h"
// A string from the file, for a message: control and non-ASCII bytes as \xNN, at most ~120
#include "../base/err.h"
// bytes, so the error stays one printable line whatever the file holds.
#include "../base/err.h"
static const char *shown(const char *s, char *buf, size_t len) {
#include "../base/err.h"
    size_t n = 0;
#include "../base/err.h"
    for (; *s && n + 8 < len; s++) {
#include "../base/err.h"
        unsigned char c = (unsigned char)*s;
#include "../base/err.h"
        if (n >= 120) {
#include "../base/err.h"
            n += (size_t)snprintf(buf + n, len - n, "...");
#include "../base/err.h"
            break;
#include "../base/err.h"
        }
#include "../base/err.h"
        if (c < 0x20 || c >= 0x7f || c == '\\') n += (size_t)snprintf(buf + n, len - n, "\\x%02x", c);
#include "../base/err.h"
        else buf[n++] = (char)c;
#include "../base/err.h"
    }
#include "../base/err.h"
    buf[n] = 0;
#include "../base/err.h"
    return buf;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
// the attribute called name; *twice when the description holds it more than once
#include "../base/err.h"
static const CkptAttr *find_attr(const CkptDesc *d, const char *name, int *twice) {
#include "../base/err.h"
    const CkptAttr *a = NULL;
#include "../base/err.h"
    *twice = 0;
#include "../base/err.h"
    for (size_t i = 0; i < d->nattrs; i++)
#include "../base/err.h"
        if (d->attrs[i].name && !strcmp(d->attrs[i].name, name)) {
#include "../base/err.h"
            if (a) *twice = 1;
#include "../base/err.h"
            else a = &d->attrs[i];
#include "../base/err.h"
        }
#include "../base/err.h"
    return a;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
// the attribute, or NULL and msg set when it is absent (or listed twice) and required
#include "../base/err.h"
static const CkptAttr *need_attr(const CkptDesc *d, const char *file, const char *name, int required, const char **err) {
#include "../base/err.h"
    int twice;
#include "../base/err.h"
    const CkptAttr *a = find_attr(d, name, &twice);
#include "../base/err.h"
    *err = NULL;
#include "../base/err.h"
    if (twice) *err = err_text(msg, sizeof msg, "checkpoint '%s' has the '%s' attribute twice", file, name);
#include "../base/err.h"
    else if (!a && required) *err = err_text(msg, sizeof msg, "checkpoint '%s' lacks the '%s' attribute", file, name);
#include "../base/err.h"
    return *err ? NULL : a;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
static const char *not_a(const char *file, const char *name, const char *want) {
#include "../base/err.h"
    return err_text(msg, sizeof msg, "checkpoint '%s': attribute '%s' is not %s", file, name, want);
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
static const char *get_int(const CkptDesc *d, const char *file, const char *name, int64_t lo, int64_t hi, int *out) {
#include "../base/err.h"
    const char *e;
#include "../base/err.h"
    const CkptAttr *a = need_attr(d, file, name, 1, &e);
#include "../base/err.h"
    if (e) return e;
#include "../base/err.h"
    if (a->kind != CKPT_ATTR_INT) return not_a(file, name, "an integer scalar");
#include "../base/err.h"
    int64_t x = (int64_t)a->bits;
#include "../base/err.h"
    // unsigned values past INT64_MAX wrap to negatives here: the first test keeps them out
#include "../base/err.h"
    if ((!a->neg && a->bits > (uint64_t)INT64_MAX) || x < lo || x > hi) {
#include "../base/err.h"
        char val[32];
#include "../base/err.h"
        if (a->neg) snprintf(val, sizeof val, "%lld", (long long)x);
#include "../base/err.h"
        else snprintf(val, sizeof val, "%llu", (unsigned long long)a->bits);
#include "../base/err.h"
        return err_text(msg, sizeof msg, "checkpoint '%s': attribute '%s' is %s, outside [%lld, %lld]", file, name, val, (long long)lo,
#include "../base/err.h"
                 (long long)hi);
#include "../base/err.h"
    }
#include "../base/err.h"
    *out = (int)x;
#include "../base/err.h"
    return NULL;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
static const char *get_u64(const CkptDesc *d, const char *file, const char *name, uint64_t *out) {
#include "../base/err.h"
    const char *e;
#include "../base/err.h"
    const CkptAttr *a = need_attr(d, file, name, 1, &e);
#include "../base/err.h"
    if (e) return e;
#include "../base/err.h"
    if (a->kind != CKPT_ATTR_INT || a->neg) return not_a(file, name, "a non-negative integer scalar");
#include "../base/err.h"
    *out = a->bits;
#include "../base/err.h"
    return NULL;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
static int str_fits(const CkptAttr *a, size_t len) { return a->kind == CKPT_ATTR_STR && a->s && strlen(a->s) < len; }
#include "../base/err.h"

#include "../base/err.h"
static const char *get_str(const CkptDesc *d, const char *file, const char *name, char *buf, size_t len) {
#include "../base/err.h"
    const char *e;
#include "../base/err.h"
    const CkptAttr *a = need_attr(d, file, name, 1, &e);
#include "../base/err.h"
    if (e) return e;
#include "../base/err.h"
    if (!str_fits(a, len)) {
#include "../base/err.h"
        char want[64];
#include "../base/err.h"
        snprintf(want, sizeof want, "a string scalar of under %zu bytes", len);
#include "../base/err.h"
        return not_a(file, name, want);
#include "../base/err.h"
    }
#include "../base/err.h"
    snprintf(buf, len, "%s", a->s);
#include "../base/err.h"
    return NULL;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
// absent: *out = absent (files from before the attribute existed)
#include "../base/err.h"
static const char *get_positive_float(const CkptDesc *d, const char *file, const char *name, float absent, float *out) {
#include "../base/err.h"
    const char *e;
#include "../base/err.h"
    const CkptAttr *a = need_attr(d, file, name, 0, &e);
#include "../base/err.h"
    if (!e && !a) *out = absent;
#include "../base/err.h"
    if (e || !a) return e;
#include "../base/err.h"
    if (a->kind != CKPT_ATTR_FLOAT) return not_a(file, name, "a floating-point scalar");
#include "../base/err.h"
    double v = a->f;
#include "../base/err.h"
    if (!isfinite(v) || v <= 0 || v > 3.4e38) {
#include "../base/err.h"
        return err_text(msg, sizeof msg, "checkpoint '%s': attribute '%s' is %g, not a positive finite number", file, name, v);
#include "../base/err.h"
    }
#include "../base/err.h"
    *out = (float)v;
#include "../base/err.h"
    return NULL;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
static int is_run_id(const char *s) { return strlen(s) == CKPT_RUN_ID_LEN && strspn(s, "0123456789abcdef") == CKPT_RUN_ID_LEN; }
#include "../base/err.h"

#include "../base/err.h"
int ckpt_name_step(const char *path, uint64_t *step) {
#include "../base/err.h"
    const char *base = strrchr(path, '/');
#include "../base/err.h"
    base = base ? base + 1 : path;
#include "../base/err.h"
    if (strncmp(base, "step_", 5) != 0) return 0;
#include "../base/err.h"
    size_t n = strspn(base + 5, "0123456789");
#include "../base/err.h"
    if (n == 0 || strcmp(base + 5 + n, ".h5") != 0) return 0;
#include "../base/err.h"
    uint64_t x = 0;
#include "../base/err.h"
    for (size_t i = 0; i < n; i++) x = x > (UINT64_MAX - 9) / 10 ? UINT64_MAX : x * 10 + (uint64_t)(base[5 + i] - '0');
#include "../base/err.h"
    *step = x;
#include "../base/err.h"
    return 1;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
static const char *unknown_family(const char *file, const char *type) {
#include "../base/err.h"
    char known[256], show[160];
#include "../base/err.h"
    snprintf(known, sizeof known, "%s", family_names(", ", 0));
#include "../base/err.h"
    return err_text(msg, sizeof msg, "checkpoint '%s' holds a '%s' model; this fsdpc implements %s", file, shown(type, show, sizeof show), known);
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
const char *ckpt_check_header(const CkptDesc *d, const char *file, const ModelConfig *base, CkptHeader *h) {
#include "../base/err.h"
    memset(h, 0, sizeof *h);
#include "../base/err.h"
    h->model = *base;
#include "../base/err.h"
    int twice;
#include "../base/err.h"
    const CkptAttr *fmt = find_attr(d, "format", &twice);
#include "../base/err.h"
    if (twice || !fmt || !str_fits(fmt, 64) || strcmp(fmt->s, CKPT_FORMAT_NAME) != 0) {
#include "../base/err.h"
        int str = fmt && str_fits(fmt, 64) && !twice;
#include "../base/err.h"
        char show[160];
#include "../base/err.h"
        return err_text(msg, sizeof msg, "'%s' is not an fsdpc checkpoint (format attribute %s%s%s)", file, str ? "'" : "",
#include "../base/err.h"
                 twice ? "given twice" : str ? shown(fmt->s, show, sizeof show) : !fmt ? "missing" : "not a string", str ? "'" : "");
#include "../base/err.h"
    }
#include "../base/err.h"
    const char *e = get_int(d, file, "format_version", 1, INT_MAX, &h->version);
#include "../base/err.h"
    if (!e && h->version > CKPT_FORMAT_VERSION) {
#include "../base/err.h"
        return err_text(msg, sizeof msg, "checkpoint '%s' has format_version %d; this fsdpc reads versions 1 to %d (a newer fsdpc wrote it)",
#include "../base/err.h"
                 file, h->version, CKPT_FORMAT_VERSION);
#include "../base/err.h"
    }
#include "../base/err.h"
    CkptMeta *m = &h->meta;
#include "../base/err.h"
    if (!e) e = get_int(d, file, "step", 0, INT_MAX, &m->step);
#include "../base/err.h"
    // a checkpoint is found, resumed and replaced by its name: a name that says another step
#include "../base/err.h"
    // (a renamed or copied file) would be resumed at the wrong step, or overwritten as that step
#include "../base/err.h"
    uint64_t named;
#include "../base/err.h"
    if (!e && ckpt_name_step(file, &named) && named != (uint64_t)m->step) {
#include "../base/err.h"
        return err_text(msg, sizeof msg, "checkpoint '%s' is named for step %llu but records step %d (renamed or copied?); rename it "
#include "../base/err.h"
                 "step_%08d.h5, or give it a name that is not step_<N>.h5", file, (unsigned long long)named, m->step, m->step);
#include "../base/err.h"
    }
#include "../base/err.h"
    if (!e) e = get_u64(d, file, "tokens_seen", &m->tokens_seen);
#include "../base/err.h"
    if (!e) e = get_u64(d, file, "data_position", &m->data_position);
#include "../base/err.h"
    if (!e) e = get_u64(d, file, "rng_state", &m->rng_state);
#include "../base/err.h"
    if (!e) e = get_str(d, file, "model_type", h->model.model_type, sizeof h->model.model_type);
#include "../base/err.h"
    const ModelFamily *fam = e ? NULL : family_find(h->model.model_type);
#include "../base/err.h"
    if (!e && !fam) return unknown_family(file, h->model.model_type);
#include "../base/err.h"
    for (const FamilyField *fl = e ? NULL : fam->ckpt_fields; fl && fl->name && !e; fl++) {
#include "../base/err.h"
        void *dst = (char *)&h->model + fl->off;
#include "../base/err.h"
        const int optional = fl->type == FAMILY_BOOL || fl->type == FAMILY_INT_OPTIONAL || fl->type == FAMILY_CHOICE;
#include "../base/err.h"
        const CkptAttr *have = optional ? need_attr(d, file, fl->name, 0, &e) : NULL;
#include "../base/err.h"
        if (e) break;
#include "../base/err.h"
        int hi = fl->type == FAMILY_BOOL ? 1 : INT_MAX;
#include "../base/err.h"
        if (fl->type == FAMILY_CHOICE)  // the values are 0 .. n-1
#include "../base/err.h"
            for (hi = 0; fl->choices[hi + 1].name; hi++) {}
#include "../base/err.h"
        if (optional && !have) *(int *)dst = 0;  // written before the field existed: off
#include "../base/err.h"
        else e = fl->type != FAMILY_FLOAT ? get_int(d, file, fl->name, fl->type == FAMILY_INT, hi, (int *)dst)
#include "../base/err.h"
                                          : get_positive_float(d, file, fl->name, fl->absent, (float *)dst);
#include "../base/err.h"
    }
#include "../base/err.h"
    // a family without grouped-query attention stores no num_key_value_heads: every head has its own
#include "../base/err.h"
    if (!e && !fam->gqa) h->model.num_key_value_heads = h->model.num_heads;
#include "../base/err.h"
    const CkptAttr *tok = e ? NULL : need_attr(d, file, "tokenizer", 0, &e);
#include "../base/err.h"
    if (!e && tok && !str_fits(tok, sizeof h->tokenizer)) e = not_a(file, "tokenizer", "a string scalar");
#include "../base/err.h"
    if (!e) snprintf(h->tokenizer, sizeof h->tokenizer, "%s", tok ? tok->s : "byte");  // "byte": before the attribute existed
#include "../base/err.h"
    if (!e && h->version >= 2) {
#include "../base/err.h"
        char sum[32];
#include "../base/err.h"
        e = get_str(d, file, "run_id", m->run_id, sizeof m->run_id);
#include "../base/err.h"
        if (!e && !is_run_id(m->run_id)) e = not_a(file, "run_id", "16 lowercase hex digits");
#include "../base/err.h"
        if (!e) e = get_str(d, file, "parent", m->parent, sizeof m->parent);
#include "../base/err.h"
        if (!e) e = get_str(d, file, "lineage", m->lineage, sizeof m->lineage);
#include "../base/err.h"
        const CkptAttr *in = e ? NULL : need_attr(d, file, "run_inputs", 0, &e);  // absent before it existed
#include "../base/err.h"
        if (!e && in && !str_fits(in, sizeof m->inputs)) e = not_a(file, "run_inputs", "a string scalar");
#include "../base/err.h"
        if (!e && in) snprintf(m->inputs, sizeof m->inputs, "%s", in->s);
#include "../base/err.h"
        if (!e) e = get_str(d, file, "checksum", sum, sizeof sum);
#include "../base/err.h"
        if (!e && strcmp(sum, CKPT_CHECKSUM_NAME) != 0) e = not_a(file, "checksum", "\"" CKPT_CHECKSUM_NAME "\"");
#include "../base/err.h"
    }
#include "../base/err.h"
    if (e) return e;
#include "../base/err.h"
    const char *bad = config_validate_model(&h->model);
#include "../base/err.h"
    if (bad) return snprintf(msg, sizeof msg, "checkpoint '%s': %s", file, bad), msg;
#include "../base/err.h"
    // every layer is a unit of at least one tensor: a corrupt num_layers must not size a plan
#include "../base/err.h"
    // (billions of unit records) before the file is seen to hold that many tensors
#include "../base/err.h"
    if (d->model_links < h->model.num_layers) {
#include "../base/err.h"
        if (d->model_links < 0) snprintf(msg, sizeof msg, "checkpoint '%s' has no /model group", file);
#include "../base/err.h"
        else snprintf(msg, sizeof msg, "checkpoint '%s' holds %lld tensors in /model, too few for its num_layers=%d", file,
#include "../base/err.h"
                      (long long)d->model_links, h->model.num_layers);
#include "../base/err.h"
        return msg;
#include "../base/err.h"
    }
#include "../base/err.h"
    return NULL;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
const char *ckpt_check_config(const CkptHeader *h, const char *file, const ModelPlan *plan) {
#include "../base/err.h"
    if (plan->cfg.model_type[0] && strcmp(h->model.model_type, plan->cfg.model_type) != 0) {
#include "../base/err.h"
        char show[160];
#include "../base/err.h"
        return err_text(msg, sizeof msg, "checkpoint '%s' holds a '%s' model but this run has --model_type %s", file,
#include "../base/err.h"
                 shown(h->model.model_type, show, sizeof show), plan->cfg.model_type);
#include "../base/err.h"
    }
#include "../base/err.h"
    const ModelFamily *fam = family_find(h->model.model_type);
#include "../base/err.h"
    if (!fam) return unknown_family(file, h->model.model_type);
#include "../base/err.h"
    for (const FamilyField *fl = fam->ckpt_fields; fl->name; fl++) {
#include "../base/err.h"
        if (fl->type == FAMILY_FLOAT) continue;  // sizes (and the window) are the model; the rest is the run's to keep
#include "../base/err.h"
        int v = *(const int *)((const char *)&h->model + fl->off), want = *(const int *)((const char *)&plan->cfg + fl->off);
#include "../base/err.h"
        if (v != want) {
#include "../base/err.h"
            return err_text(msg, sizeof msg, "checkpoint '%s' has %s=%d but this run has --%s %d", file, fl->name, v, fl->name, want);
#include "../base/err.h"
        }
#include "../base/err.h"
    }
#include "../base/err.h"
    return NULL;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
// ---- entries outside the schema ----
#include "../base/err.h"

#include "../base/err.h"
const char *const ckpt_source_names[CKPT_SOURCE_FILES] = {
#include "../base/err.h"
    [CKPT_SRC_CONFIG] = "config.json", [CKPT_SRC_GENERATION_CONFIG] = "generation_config.json",
#include "../base/err.h"
    [CKPT_SRC_TOKENIZER_CONFIG] = "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
#include "../base/err.h"
};
#include "../base/err.h"

#include "../base/err.h"
// the root attributes of every family (a new one goes here and into ckpt.c's write_header); the
#include "../base/err.h"
// config's are the family's (model/family.h)
#include "../base/err.h"
static const char *const root_attrs[] = {"format", "format_version", "step", "tokens_seen", "data_position", "rng_state",
#include "../base/err.h"
                                         "model_type", "run_config", "tokenizer", "run_id", "parent", "lineage", "run_inputs",
#include "../base/err.h"
                                         "checksum"};
#include "../base/err.h"

#include "../base/err.h"
static int in_list(const char *name, const char *const *list, size_t n) {
#include "../base/err.h"
    for (size_t i = 0; i < n; i++)
#include "../base/err.h"
        if (!strcmp(list[i], name)) return 1;
#include "../base/err.h"
    return 0;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
// a field of the file's family, or of any family when the file names none this fsdpc knows
#include "../base/err.h"
static int family_field(const CkptDesc *d, const char *name) {
#include "../base/err.h"
    int twice;
#include "../base/err.h"
    const CkptAttr *t = find_attr(d, "model_type", &twice);
#include "../base/err.h"
    const ModelFamily *own = t && t->kind == CKPT_ATTR_STR && t->s ? family_find(t->s) : NULL;
#include "../base/err.h"
    for (size_t f = 0; f < family_count(); f++)
#include "../base/err.h"
        for (const FamilyField *fl = family_at(f)->ckpt_fields; fl->name; fl++)
#include "../base/err.h"
            if ((!own || own == family_at(f)) && !strcmp(fl->name, name)) return 1;
#include "../base/err.h"
    return 0;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
static int known_link(const char *path) {
#include "../base/err.h"
    static const char *const root[] = {"model", "optim", "source"}, *const optim[] = {"exp_avg", "exp_avg_sq"};
#include "../base/err.h"
    if (!strncmp(path, "optim/", 6)) return in_list(path + 6, optim, 2);
#include "../base/err.h"
    if (!strncmp(path, "source/", 7)) return in_list(path + 7, ckpt_source_names, CKPT_SOURCE_FILES);
#include "../base/err.h"
    return in_list(path, root, 3);
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
size_t ckpt_unknown_entries(const CkptDesc *d, char *out, size_t len) {
#include "../base/err.h"
    enum { SHOWN = 8 };  // names per kind; the rest are counted
#include "../base/err.h"
    size_t n = 0, at = 0;
#include "../base/err.h"
    char show[160];
#include "../base/err.h"
    out[0] = 0;
#include "../base/err.h"
    for (int links = 0; links < 2; links++) {
#include "../base/err.h"
        size_t total = links ? d->nlinks : d->nattrs, count = 0;
#include "../base/err.h"
        for (size_t i = 0; i < total; i++) {
#include "../base/err.h"
            const char *name = links ? d->links[i] : d->attrs[i].name;
#include "../base/err.h"
            int known = !name || (links ? known_link(name)
#include "../base/err.h"
                                        : in_list(name, root_attrs, sizeof root_attrs / sizeof *root_attrs) || family_field(d, name));
#include "../base/err.h"
            if (known || count++ >= SHOWN || at >= len) continue;
#include "../base/err.h"
            const char *sep = count > 1 ? ", " : at ? "; " : "";
#include "../base/err.h"
            if (links) at += (size_t)snprintf(out + at, len - at, "%s/%s", sep, shown(name, show, sizeof show));
#include "../base/err.h"
            else at += (size_t)snprintf(out + at, len - at, "%s%s'%s'", sep, count == 1 ? "attributes " : "", shown(name, show, sizeof show));
#include "../base/err.h"
        }
#include "../base/err.h"
        if (count > SHOWN && at < len) at += (size_t)snprintf(out + at, len - at, " and %zu more", count - SHOWN);
#include "../base/err.h"
        n += count;
#include "../base/err.h"
    }
#include "../base/err.h"
    return n;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
int ckpt_crc_value(const CkptAttr *a, uint32_t *crc) {
#include "../base/err.h"
    if (a->kind != CKPT_ATTR_INT || a->neg || a->bits > 0xffffffffu) return 0;
#include "../base/err.h"
    *crc = (uint32_t)a->bits;
#include "../base/err.h"
    return 1;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
// ---- datasets ----
#include "../base/err.h"

#include "../base/err.h"
typedef struct {
#include "../base/err.h"
    int group;
#include "../base/err.h"
    const char *name;
#include "../base/err.h"
    size_t idx;  // into d->datasets
#include "../base/err.h"
} Key;
#include "../base/err.h"

#include "../base/err.h"
static int key_cmp(const void *pa, const void *pb) {
#include "../base/err.h"
    const Key *a = pa, *b = pb;
#include "../base/err.h"
    if (a->group != b->group) return a->group < b->group ? -1 : 1;
#include "../base/err.h"
    return strcmp(a->name, b->name);
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
static void shape_str(char *buf, size_t len, int nd, const uint64_t *d) {
#include "../base/err.h"
    int n = snprintf(buf, len, "[");
#include "../base/err.h"
    for (int i = 0; i < nd && n < (int)len; i++) n += snprintf(buf + n, len - n, "%s%llu", i ? "," : "", (unsigned long long)d[i]);
#include "../base/err.h"
    if (n < (int)len) snprintf(buf + n, len - n, "]");
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
// One plan tensor against its dataset (NULL: none).
#include "../base/err.h"
static const char *check_one(const CkptDataset *ds, const char *file, const char *path, const TensorSpec *ts, int version, uint32_t *want) {
#include "../base/err.h"
    char have[64], need[64];
#include "../base/err.h"
    const uint64_t want_dims[2] = {(uint64_t)ts->full[0], (uint64_t)ts->full[1]};  // the whole tensor at any tp degree
#include "../base/err.h"
    shape_str(need, sizeof need, ts->ndim, want_dims);
#include "../base/err.h"
    if (!ds) return snprintf(msg, sizeof msg, "checkpoint '%s' lacks tensor /%s", file, path), msg;
#include "../base/err.h"
    if (ds->ndim < 0) return snprintf(msg, sizeof msg, "checkpoint '%s': /%s is not a readable dataset", file, path), msg;
#include "../base/err.h"
    // the rank first: only then are the extents read, and only as many as the plan has
#include "../base/err.h"
    if (ds->ndim != ts->ndim)
#include "../base/err.h"
        return snprintf(msg, sizeof msg, "checkpoint '%s' tensor /%s has %d dimensions but the model needs %s", file, path, ds->ndim, need), msg;
#include "../base/err.h"
    int same = 1;
#include "../base/err.h"
    for (int i = 0; i < ts->ndim; i++) same &= ds->dims[i] == want_dims[i];
#include "../base/err.h"
    if (!same) {
#include "../base/err.h"
        shape_str(have, sizeof have, ts->ndim, ds->dims);
#include "../base/err.h"
        return snprintf(msg, sizeof msg, "checkpoint '%s' tensor /%s has shape %s but the model needs %s", file, path, have, need), msg;
#include "../base/err.h"
    }
#include "../base/err.h"
    if (!ds->fp32) return snprintf(msg, sizeof msg, "checkpoint '%s' tensor /%s is not fp32", file, path), msg;
#include "../base/err.h"
    uint32_t crc;
#include "../base/err.h"
    if (version >= 2 && !ckpt_crc_value(&ds->crc, &crc))
#include "../base/err.h"
        return snprintf(msg, sizeof msg, "checkpoint '%s' tensor /%s %s " CKPT_CHECKSUM_NAME " checksum attribute", file, path,
#include "../base/err.h"
                        ds->crc.kind == CKPT_ATTR_ABSENT ? "lacks its" : "has a malformed"),
#include "../base/err.h"
               msg;
#include "../base/err.h"
    if (version >= 2 && want) *want = crc;
#include "../base/err.h"
    return NULL;
#include "../base/err.h"
}
#include "../base/err.h"

#include "../base/err.h"
const char *ckpt_check_tensors(const CkptDesc *d, const char *file, const ModelPlan *plan, int ngroups, int version, uint32_t *want) {
#include "../base/err.h"
    if (ngroups < 0 || ngroups > CKPT_NGROUPS) return "internal error: bad group count";
#include "../base/err.h"
    // the checked groups' links by (group, name), so each plan tensor is a binary search
#include "../base/err.h"
    size_t n = 0;
#include "../base/err.h"
    Key *keys = malloc((d->ndatasets ? d->ndatasets : 1) * sizeof *keys);
#include "../base/err.h"
    unsigned char *used = calloc(d->ndatasets ? d->ndatasets : 1, 1);
#include "../base/err.h"
    const char *e = !keys || !used ? "out of memory checking the checkpoint's tensors" : NULL;
#include "../base/err.h"
    for (size_t i = 0; !e && i < d->ndatasets; i++)
#include "../base/err.h"
        if (d->datasets[i].group >= 0 && d->datasets[i].group < ngroups && d->datasets[i].name)
#include "../base/err.h"
            keys[n++] = (Key){d->datasets[i].group, d->datasets[i].name, i};
#include "../base/err.h"
    if (!e) qsort(keys, n, sizeof *keys, key_cmp);
#include "../base/err.h"
    char show[160];
#include "../base/err.h"
    for (size_t i = 1; !e && i < n; i++)
#include "../base/err.h"
        if (!key_cmp(&keys[i - 1], &keys[i]))
#include "../base/err.h"
            e = err_text(msg, sizeof msg, "checkpoint '%s' holds /%s/%s twice", file, ckpt_groups[keys[i].group],
#include "../base/err.h"
                          shown(keys[i].name, show, sizeof show));
#include "../base/err.h"
    char path[256];
#include "../base/err.h"
    int k = 0;
#include "../base/err.h"
    for (int g = 0; g < ngroups && !e; g++)
#include "../base/err.h"
        for (int u = 0; u < plan->nunits && !e; u++)
#include "../base/err.h"
            for (int t = 0; t < plan->units[u].ntensors && !e; t++, k++) {
#include "../base/err.h"
                const TensorSpec *ts = &plan->units[u].t[t];
#include "../base/err.h"
                Key key = {g, ts->name, 0}, *hit = n ? bsearch(&key, keys, n, sizeof *keys, key_cmp) : NULL;
#include "../base/err.h"
                snprintf(path, sizeof path, "%s/%s", ckpt_groups[g], ts->name);
#include "../base/err.h"
                if (hit) used[hit->idx] = 1;
#include "../base/err.h"
                e = check_one(hit ? &d->datasets[hit->idx] : NULL, file, path, ts, version, want ? &want[k] : NULL);
#include "../base/err.h"
            }
#include "../base/err.h"
    // a tensor the plan lacks means another model (family, tying, biases) wrote the file
#include "../base/err.h"
    for (size_t i = 0; !e && i < n; i++)
#include "../base/err.h"
        if (!used[keys[i].idx])
#include "../base/err.h"
            e = err_text(msg, sizeof msg, "checkpoint '%s' holds /%s/%s, which is not a tensor of its %s model", file,
#include "../base/err.h"
                          ckpt_groups[keys[i].group], shown(keys[i].name, show, sizeof show),
#include "../base/err.h"
                          plan->cfg.model_type[0] ? plan->cfg.model_type : "(unnamed)");
#include "../base/err.h"
    free(keys);
#include "../base/err.h"
    free(used);
#include "../base/err.h"
    return e;
#include "../base/err.h"
}
