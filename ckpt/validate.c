// validate: checkpoint attribute and dataset checks over plain data (see validate.h). Nothing
// here trusts the description: ranks, sizes and strings are bounded before they are used.
#include "validate.h"
#include "../base/err.h"
#include "../kernels/kernels.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const ckpt_groups[CKPT_NGROUPS] = {"model", "optim/exp_avg", "optim/exp_avg_sq"};

int ckpt_group_has(const ModelPlan *plan, int u, int g) { return g == 0 || !plan->units[u].frozen; }

static char msg[1600];

// A string from the file, for a message: control and non-ASCII bytes as \xNN, at most ~120
// bytes, so the error stays one printable line whatever the file holds.
static const char *shown(const char *s, char *buf, size_t len) {
    size_t n = 0;
    for (; *s && n + 8 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (n >= 120) {
            n += (size_t)snprintf(buf + n, len - n, "...");
            break;
        }
        if (c < 0x20 || c >= 0x7f || c == '\\') n += (size_t)snprintf(buf + n, len - n, "\\x%02x", c);
        else buf[n++] = (char)c;
    }
    buf[n] = 0;
    return buf;
}

// the attribute called name; *twice when the description holds it more than once
static const CkptAttr *find_attr(const CkptDesc *d, const char *name, int *twice) {
    const CkptAttr *a = NULL;
    *twice = 0;
    for (size_t i = 0; i < d->nattrs; i++)
        if (d->attrs[i].name && !strcmp(d->attrs[i].name, name)) {
            if (a) *twice = 1;
            else a = &d->attrs[i];
        }
    return a;
}

// the attribute, or NULL and msg set when it is absent (or listed twice) and required
static const CkptAttr *need_attr(const CkptDesc *d, const char *file, const char *name, int required, const char **err) {
    int twice;
    const CkptAttr *a = find_attr(d, name, &twice);
    *err = NULL;
    if (twice) *err = err_text(msg, sizeof msg, "checkpoint '%s' has the '%s' attribute twice", file, name);
    else if (!a && required) *err = err_text(msg, sizeof msg, "checkpoint '%s' lacks the '%s' attribute", file, name);
    return *err ? NULL : a;
}

static const char *not_a(const char *file, const char *name, const char *want) {
    return err_text(msg, sizeof msg, "checkpoint '%s': attribute '%s' is not %s", file, name, want);
}

static const char *get_int(const CkptDesc *d, const char *file, const char *name, int64_t lo, int64_t hi, int *out) {
    const char *e;
    const CkptAttr *a = need_attr(d, file, name, 1, &e);
    if (e) return e;
    if (a->kind != CKPT_ATTR_INT) return not_a(file, name, "an integer scalar");
    int64_t x = (int64_t)a->bits;
    // unsigned values past INT64_MAX wrap to negatives here: the first test keeps them out
    if ((!a->neg && a->bits > (uint64_t)INT64_MAX) || x < lo || x > hi) {
        char val[32];
        if (a->neg) snprintf(val, sizeof val, "%lld", (long long)x);
        else snprintf(val, sizeof val, "%llu", (unsigned long long)a->bits);
        return err_text(msg, sizeof msg, "checkpoint '%s': attribute '%s' is %s, outside [%lld, %lld]", file, name, val, (long long)lo,
                 (long long)hi);
    }
    *out = (int)x;
    return NULL;
}

static const char *get_u64(const CkptDesc *d, const char *file, const char *name, uint64_t *out) {
    const char *e;
    const CkptAttr *a = need_attr(d, file, name, 1, &e);
    if (e) return e;
    if (a->kind != CKPT_ATTR_INT || a->neg) return not_a(file, name, "a non-negative integer scalar");
    *out = a->bits;
    return NULL;
}

static int str_fits(const CkptAttr *a, size_t len) { return a->kind == CKPT_ATTR_STR && a->s && strlen(a->s) < len; }

// NULL when attribute a (`name`) is a string of under len bytes; else what it is instead: another
// kind, or a string too long to keep (a type or a length, said as such)
static const char *str_problem(const CkptAttr *a, const char *file, const char *name, size_t len) {
    if (a->kind != CKPT_ATTR_STR) return not_a(file, name, "a string scalar");
    if (str_fits(a, len)) return NULL;
    return err_text(msg, sizeof msg, "checkpoint '%s': attribute '%s' is a string longer than the %zu bytes fsdpc keeps for it "
                    "(a damaged or crafted file?)", file, name, len - 1);
}

static const char *get_str(const CkptDesc *d, const char *file, const char *name, char *buf, size_t len) {
    const char *e;
    const CkptAttr *a = need_attr(d, file, name, 1, &e);
    if (e) return e;
    if ((e = str_problem(a, file, name, len))) return e;
    snprintf(buf, len, "%s", a->s);
    return NULL;
}

// absent: *out = absent (files from before the attribute existed)
static const char *get_positive_float(const CkptDesc *d, const char *file, const char *name, float absent, float *out) {
    const char *e;
    const CkptAttr *a = need_attr(d, file, name, 0, &e);
    if (!e && !a) *out = absent;
    if (e || !a) return e;
    if (a->kind != CKPT_ATTR_FLOAT) return not_a(file, name, "a floating-point scalar");
    double v = a->f;
    if (!isfinite(v) || v <= 0 || v > 3.4e38) {
        return err_text(msg, sizeof msg, "checkpoint '%s': attribute '%s' is %g, not a positive finite number", file, name, v);
    }
    *out = (float)v;
    return NULL;
}

static int is_run_id(const char *s) { return strlen(s) == CKPT_RUN_ID_LEN && strspn(s, "0123456789abcdef") == CKPT_RUN_ID_LEN; }

int ckpt_name_step(const char *path, uint64_t *step) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strncmp(base, "step_", 5) != 0) return 0;
    size_t n = strspn(base + 5, "0123456789");
    if (n == 0 || strcmp(base + 5 + n, ".h5") != 0) return 0;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) x = x > (UINT64_MAX - 9) / 10 ? UINT64_MAX : x * 10 + (uint64_t)(base[5 + i] - '0');
    *step = x;
    return 1;
}

static const char *unknown_family(const char *file, const char *type) {
    char known[256], show[160];
    snprintf(known, sizeof known, "%s", family_names(", ", 0));
    return err_text(msg, sizeof msg, "checkpoint '%s' holds a '%s' model; this fsdpc implements %s", file, shown(type, show, sizeof show), known);
}

const char *ckpt_check_header(const CkptDesc *d, const char *file, const ModelConfig *base, CkptHeader *h) {
    if (d->linked)
        return err_text(msg, sizeof msg, "checkpoint '%s': %s: fsdpc reads only what the checkpoint file itself stores, as it writes "
                        "it (a crafted or rewritten file?)", file, d->linked);
    memset(h, 0, sizeof *h);
    h->model = *base;
    int twice;
    const CkptAttr *fmt = find_attr(d, "format", &twice);
    if (twice || !fmt || !str_fits(fmt, 64) || strcmp(fmt->s, CKPT_FORMAT_NAME) != 0) {
        int str = fmt && str_fits(fmt, 64) && !twice;
        char show[160];
        return err_text(msg, sizeof msg, "'%s' is not an fsdpc checkpoint (format attribute %s%s%s)", file, str ? "'" : "",
                 twice ? "given twice" : str ? shown(fmt->s, show, sizeof show) : !fmt ? "missing" : "not a string", str ? "'" : "");
    }
    const char *e = get_int(d, file, "format_version", 1, INT_MAX, &h->version);
    if (!e && h->version > CKPT_FORMAT_VERSION) {
        return err_text(msg, sizeof msg, "checkpoint '%s' has format_version %d; this fsdpc reads versions 1 to %d (a newer fsdpc wrote it)",
                 file, h->version, CKPT_FORMAT_VERSION);
    }
    CkptMeta *m = &h->meta;
    if (!e) e = get_int(d, file, "step", 0, INT_MAX, &m->step);
    // a checkpoint is found, resumed and replaced by its name: a name that says another step
    // (a renamed or copied file) would be resumed at the wrong step, or overwritten as that step
    uint64_t named;
    if (!e && ckpt_name_step(file, &named) && named != (uint64_t)m->step) {
        return err_text(msg, sizeof msg, "checkpoint '%s' is named for step %llu but records step %d (renamed or copied?); rename it "
                 "step_%08d.h5, or give it a name that is not step_<N>.h5", file, (unsigned long long)named, m->step, m->step);
    }
    if (!e) e = get_u64(d, file, "tokens_seen", &m->tokens_seen);
    if (!e) e = get_u64(d, file, "data_position", &m->data_position);
    if (!e) e = get_u64(d, file, "rng_state", &m->rng_state);
    if (!e) e = get_str(d, file, "model_type", h->model.model_type, sizeof h->model.model_type);
    const ModelFamily *fam = e ? NULL : family_find(h->model.model_type);
    if (!e && !fam) return unknown_family(file, h->model.model_type);
    for (const FamilyField *fl = e ? NULL : fam->ckpt_fields; fl && fl->name && !e; fl++) {
        void *dst = (char *)&h->model + fl->off;
        const int optional = fl->type == FAMILY_BOOL || fl->type == FAMILY_INT_OPTIONAL || fl->type == FAMILY_CHOICE;
        const CkptAttr *have = optional ? need_attr(d, file, fl->name, 0, &e) : NULL;
        if (e) break;
        int hi = fl->type == FAMILY_BOOL ? 1 : INT_MAX;
        if (fl->type == FAMILY_CHOICE)  // the values are 0 .. n-1
            for (hi = 0; fl->choices[hi + 1].name; hi++) {}
        if (optional && !have) *(int *)dst = 0;  // written before the field existed: off
        else e = fl->type != FAMILY_FLOAT ? get_int(d, file, fl->name, fl->type == FAMILY_INT, hi, (int *)dst)
                                          : get_positive_float(d, file, fl->name, fl->absent, (float *)dst);
    }
    // LoRA: absent in a file written without adapters (or before them)
    const CkptAttr *lr = e ? NULL : need_attr(d, file, "lora_rank", 0, &e);
    h->model.lora_rank = 0;
    if (!e && lr) e = get_int(d, file, "lora_rank", 0, INT_MAX, &h->model.lora_rank);
    if (!e && h->model.lora_rank) e = get_positive_float(d, file, "lora_alpha", 0.0f, &h->model.lora_alpha);
    if (!e && h->model.lora_rank) e = get_int(d, file, "use_rslora", 0, 1, &h->model.use_rslora);
    if (!e && h->model.lora_rank)
        e = get_str(d, file, "lora_target_modules", h->model.lora_target_modules, sizeof h->model.lora_target_modules);
    if (!e && h->model.lora_rank && !(h->model.lora_alpha > 0.0f)) e = not_a(file, "lora_alpha", "a positive number");
    // the dropout the adapters trained with, for PEFT's adapter_config.json (export --adapter)
    const CkptAttr *ld = e || !h->model.lora_rank ? NULL : need_attr(d, file, "lora_dropout", 0, &e);
    h->model.lora_dropout = 0.0f;
    if (!e && ld && (ld->kind != CKPT_ATTR_FLOAT || !(ld->f >= 0.0 && ld->f < 1.0))) e = not_a(file, "lora_dropout", "a number in [0, 1)");
    if (!e && ld) h->model.lora_dropout = (float)ld->f;
    // QLoRA: absent when the base is stored as trained
    const CkptAttr *qb = e ? NULL : need_attr(d, file, "quantize_base", 0, &e);
    h->model.quantize_base = MODEL_QUANT_NONE;
    if (!e && qb) {
        char q[16];
        e = get_str(d, file, "quantize_base", q, sizeof q);
        if (!e && strcmp(q, cli_choice_name(config_quantize_names, MODEL_QUANT_NF4))) e = not_a(file, "quantize_base", "\"nf4\"");
        if (!e && !h->model.lora_rank) e = not_a(file, "quantize_base", "absent in a checkpoint without LoRA adapters");
        if (!e) h->model.quantize_base = MODEL_QUANT_NF4;
    }
    // a family without grouped-query attention stores no num_key_value_heads: every head has its own
    if (!e && !fam->gqa) h->model.num_key_value_heads = h->model.num_heads;
    const CkptAttr *tok = e ? NULL : need_attr(d, file, "tokenizer", 0, &e);
    if (!e && tok) e = str_problem(tok, file, "tokenizer", sizeof h->tokenizer);
    if (!e) snprintf(h->tokenizer, sizeof h->tokenizer, "%s", tok ? tok->s : "byte");  // "byte": before the attribute existed
    if (!e && h->version >= 2) {
        char sum[32];
        e = get_str(d, file, "run_id", m->run_id, sizeof m->run_id);
        if (!e && !is_run_id(m->run_id)) e = not_a(file, "run_id", "16 lowercase hex digits");
        if (!e) e = get_str(d, file, "parent", m->parent, sizeof m->parent);
        if (!e) e = get_str(d, file, "lineage", m->lineage, sizeof m->lineage);
        const CkptAttr *in = e ? NULL : need_attr(d, file, "run_inputs", 0, &e);  // absent before it existed
        if (!e && in) e = str_problem(in, file, "run_inputs", sizeof m->inputs);
        if (!e && in) snprintf(m->inputs, sizeof m->inputs, "%s", in->s);
        if (!e) e = get_str(d, file, "checksum", sum, sizeof sum);
        if (!e && strcmp(sum, CKPT_CHECKSUM_NAME) != 0) e = not_a(file, "checksum", "\"" CKPT_CHECKSUM_NAME "\"");
    }
    if (e) return e;
    const char *bad = config_validate_model(&h->model);
    if (bad) return snprintf(msg, sizeof msg, "checkpoint '%s': %s", file, bad), msg;
    // every layer is a unit of at least one tensor: a corrupt num_layers must not size a plan
    // (billions of unit records) before the file is seen to hold that many tensors
    if (d->model_links < h->model.num_layers) {
        if (d->model_links < 0) snprintf(msg, sizeof msg, "checkpoint '%s' has no /model group", file);
        else snprintf(msg, sizeof msg, "checkpoint '%s' holds %lld tensors in /model, too few for its num_layers=%d", file,
                      (long long)d->model_links, h->model.num_layers);
        return msg;
    }
    return NULL;
}

// whether each comma-separated name of a (spaces around it aside) is one of b's
static int names_in(const char *a, const char *b) {
    for (const char *p = a; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        size_t n = strcspn(p, ","), lead = strspn(p, " ");
        if (lead >= n) continue;
        while (n > lead && p[n - 1] == ' ') n--;
        int found = 0;
        for (const char *q = b; *q && !found; q += strcspn(q, ",") + (q[strcspn(q, ",")] == ',')) {
            size_t m = strcspn(q, ","), ql = strspn(q, " ");
            while (m > ql && q[m - 1] == ' ') m--;
            found = m - ql == n - lead && !strncmp(q + ql, p + lead, n - lead);
        }
        if (!found) return 0;
    }
    return 1;
}

// the same set of LoRA target names, in any order
static int same_names(const char *a, const char *b) { return names_in(a, b) && names_in(b, a); }

const char *ckpt_check_config(const CkptHeader *h, const char *file, const ModelPlan *plan) {
    if (plan->cfg.model_type[0] && strcmp(h->model.model_type, plan->cfg.model_type) != 0) {
        char show[160];
        return err_text(msg, sizeof msg, "checkpoint '%s' holds a '%s' model but this run has --model_type %s", file,
                 shown(h->model.model_type, show, sizeof show), plan->cfg.model_type);
    }
    const ModelFamily *fam = family_find(h->model.model_type);
    if (!fam) return unknown_family(file, h->model.model_type);
    const ModelConfig *a = &h->model, *b = &plan->cfg;
    // LoRA's adapters are tensors of the model; their dropout is the run's to keep. A weights-only
    // load of a file without adapters into a run with them is the run's base (ckpt.c).
    if (a->lora_rank && (a->lora_rank != b->lora_rank || a->lora_alpha != b->lora_alpha || a->use_rslora != b->use_rslora ||
                         !same_names(a->lora_target_modules, b->lora_target_modules)))
        return err_text(msg, sizeof msg, "checkpoint '%s' has LoRA adapters (--lora_rank %d --lora_alpha %g --lora_target_modules "
                        "%s%s) but this run has %s%d --lora_alpha %g --lora_target_modules %s%s: give the checkpoint's", file,
                        a->lora_rank, a->lora_alpha, a->lora_target_modules, a->use_rslora ? " --use_rslora" : "",
                        b->lora_rank ? "--lora_rank " : "none (--lora_rank ", b->lora_rank, b->lora_alpha, b->lora_target_modules,
                        b->use_rslora ? " --use_rslora" : "");
    if (a->quantize_base != b->quantize_base) {
        const char *qa = cli_choice_name(config_quantize_names, a->quantize_base), *qb = cli_choice_name(config_quantize_names, b->quantize_base);
        return err_text(msg, sizeof msg, "checkpoint '%s' stores its base %s (--quantize_base %s) but this run has --quantize_base %s: "
                        "give the checkpoint's", file, a->quantize_base ? "in NF4" : "as trained", qa, qb);
    }
    for (const FamilyField *fl = fam->ckpt_fields; fl->name; fl++) {
        if (fl->type == FAMILY_FLOAT) continue;  // sizes (and the window) are the model; the rest is the run's to keep
        int v = *(const int *)((const char *)&h->model + fl->off), want = *(const int *)((const char *)&plan->cfg + fl->off);
        if (v != want) {
            return err_text(msg, sizeof msg, "checkpoint '%s' has %s=%d but this run has --%s %d", file, fl->name, v, fl->name, want);
        }
    }
    return NULL;
}

// ---- entries outside the schema ----

const char *const ckpt_source_names[CKPT_SOURCE_FILES] = {
    [CKPT_SRC_CONFIG] = "config.json", [CKPT_SRC_GENERATION_CONFIG] = "generation_config.json",
    [CKPT_SRC_TOKENIZER_CONFIG] = "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
};

// the root attributes of every family (a new one goes here and into ckpt.c's write_header); the
// config's are the family's (model/family.h)
static const char *const root_attrs[] = {"format", "format_version", "step", "tokens_seen", "data_position", "rng_state",
                                         "model_type", "run_config", "tokenizer", "run_id", "parent", "lineage", "run_inputs",
                                         "checksum", CKPT_LORA_ATTRS};

static int in_list(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], name)) return 1;
    return 0;
}

// a field of the file's family, or of any family when the file names none this fsdpc knows
static int family_field(const CkptDesc *d, const char *name) {
    int twice;
    const CkptAttr *t = find_attr(d, "model_type", &twice);
    const ModelFamily *own = t && t->kind == CKPT_ATTR_STR && t->s ? family_find(t->s) : NULL;
    for (size_t f = 0; f < family_count(); f++)
        for (const FamilyField *fl = family_at(f)->ckpt_fields; fl->name; fl++)
            if ((!own || own == family_at(f)) && !strcmp(fl->name, name)) return 1;
    return 0;
}

static int known_link(const char *path) {
    static const char *const root[] = {"model", "optim", "source", CKPT_SKIPPED_NAME}, *const optim[] = {"exp_avg", "exp_avg_sq"};
    if (!strncmp(path, "optim/", 6)) return in_list(path + 6, optim, 2);
    if (!strncmp(path, "source/", 7)) return in_list(path + 7, ckpt_source_names, CKPT_SOURCE_FILES);
    return in_list(path, root, 4);
}

size_t ckpt_unknown_entries(const CkptDesc *d, char *out, size_t len) {
    enum { SHOWN = 8 };  // names per kind; the rest are counted
    size_t n = 0, at = 0;
    char show[160];
    out[0] = 0;
    for (int links = 0; links < 2; links++) {
        size_t total = links ? d->nlinks : d->nattrs, count = 0;
        for (size_t i = 0; i < total; i++) {
            const char *name = links ? d->links[i] : d->attrs[i].name;
            int known = !name || (links ? known_link(name)
                                        : in_list(name, root_attrs, sizeof root_attrs / sizeof *root_attrs) || family_field(d, name));
            if (known || count++ >= SHOWN || at >= len) continue;
            const char *sep = count > 1 ? ", " : at ? "; " : "";
            if (links) at += (size_t)snprintf(out + at, len - at, "%s/%s", sep, shown(name, show, sizeof show));
            else at += (size_t)snprintf(out + at, len - at, "%s%s'%s'", sep, count == 1 ? "attributes " : "", shown(name, show, sizeof show));
        }
        if (count > SHOWN && at < len) at += (size_t)snprintf(out + at, len - at, " and %zu more", count - SHOWN);
        n += count;
    }
    return n;
}

int ckpt_crc_value(const CkptAttr *a, uint32_t *crc) {
    if (a->kind != CKPT_ATTR_INT || a->neg || a->bits > 0xffffffffu) return 0;
    *crc = (uint32_t)a->bits;
    return 1;
}

// ---- datasets ----

typedef struct {
    int group;
    const char *name;
    size_t idx;  // into d->datasets
} Key;

static int key_cmp(const void *pa, const void *pb) {
    const Key *a = pa, *b = pb;
    if (a->group != b->group) return a->group < b->group ? -1 : 1;
    return strcmp(a->name, b->name);
}

static void shape_str(char *buf, size_t len, int nd, const uint64_t *d) {
    int n = snprintf(buf, len, "[");
    for (int i = 0; i < nd && n < (int)len; i++) n += snprintf(buf + n, len - n, "%s%llu", i ? "," : "", (unsigned long long)d[i]);
    if (n < (int)len) snprintf(buf + n, len - n, "]");
}

// One plan tensor against its dataset (NULL: none).
static const char *check_one(const CkptDataset *ds, const char *file, const char *path, const TensorSpec *ts, int version, uint32_t *want) {
    char have[64], need[64];
    const uint64_t want_dims[2] = {(uint64_t)ts->full[0], (uint64_t)ts->full[1]};  // the whole tensor at any tp degree
    shape_str(need, sizeof need, ts->ndim, want_dims);
    if (!ds) return snprintf(msg, sizeof msg, "checkpoint '%s' lacks tensor /%s", file, path), msg;
    if (ds->foreign)
        return snprintf(msg, sizeof msg, "checkpoint '%s': /%s is %s: fsdpc reads only tensors stored in the checkpoint file "
                        "itself, as it writes them (a crafted or rewritten file?)", file, path, ds->foreign), msg;
    if (ds->ndim < 0) return snprintf(msg, sizeof msg, "checkpoint '%s': /%s is not a readable dataset", file, path), msg;
    if (ts->nf4) {  // QLoRA: the packed bytes of the whole tensor
        uint64_t nb = kern_nf4_bytes(model_whole_numel(ts));
        if (ds->ndim != 1 || ds->dims[0] != nb || !ds->u8) {
            shape_str(have, sizeof have, ds->ndim, ds->dims);
            return snprintf(msg, sizeof msg, "checkpoint '%s' tensor /%s is %s %s but this QLoRA model needs its NF4 bytes: 1-D uint8 "
                            "[%llu] (its %s tensor packed)", file, path, ds->u8 ? "uint8" : ds->fp32 ? "fp32" : "another type", have,
                            (unsigned long long)nb, need), msg;
        }
    }
    // the rank first: only then are the extents read, and only as many as the plan has
    if (!ts->nf4 && ds->ndim != ts->ndim)
        return snprintf(msg, sizeof msg, "checkpoint '%s' tensor /%s has %d dimensions but the model needs %s", file, path, ds->ndim, need), msg;
    int same = 1;
    for (int i = 0; i < ts->ndim && !ts->nf4; i++) same &= ds->dims[i] == want_dims[i];
    if (!same) {
        shape_str(have, sizeof have, ts->ndim, ds->dims);
        return snprintf(msg, sizeof msg, "checkpoint '%s' tensor /%s has shape %s but the model needs %s", file, path, have, need), msg;
    }
    if (!ds->fp32 && !ts->nf4) return snprintf(msg, sizeof msg, "checkpoint '%s' tensor /%s is not fp32", file, path), msg;
    uint32_t crc;
    if (version >= 2 && !ckpt_crc_value(&ds->crc, &crc))
        return snprintf(msg, sizeof msg, "checkpoint '%s' tensor /%s %s " CKPT_CHECKSUM_NAME " checksum attribute", file, path,
                        ds->crc.kind == CKPT_ATTR_ABSENT ? "lacks its" : "has a malformed"),
               msg;
    if (version >= 2 && want) *want = crc;
    return NULL;
}

const char *ckpt_check_tensors(const CkptDesc *d, const char *file, const ModelPlan *plan, int ngroups, int version, uint32_t *want) {
    if (d->linked)
        return err_text(msg, sizeof msg, "checkpoint '%s': %s: fsdpc reads only what the checkpoint file itself stores, as it writes "
                        "it (a crafted or rewritten file?)", file, d->linked);
    if (ngroups < 0 || ngroups > CKPT_NGROUPS) return "internal error: bad group count";
    // the checked groups' links by (group, name), so each plan tensor is a binary search
    size_t n = 0;
    Key *keys = malloc((d->ndatasets ? d->ndatasets : 1) * sizeof *keys);
    unsigned char *used = calloc(d->ndatasets ? d->ndatasets : 1, 1);
    const char *e = !keys || !used ? "out of memory checking the checkpoint's tensors" : NULL;
    for (size_t i = 0; !e && i < d->ndatasets; i++)
        if (d->datasets[i].group >= 0 && d->datasets[i].group < ngroups && d->datasets[i].name)
            keys[n++] = (Key){d->datasets[i].group, d->datasets[i].name, i};
    if (!e) qsort(keys, n, sizeof *keys, key_cmp);
    char show[160];
    for (size_t i = 1; !e && i < n; i++)
        if (!key_cmp(&keys[i - 1], &keys[i]))
            e = err_text(msg, sizeof msg, "checkpoint '%s' holds /%s/%s twice", file, ckpt_groups[keys[i].group],
                          shown(keys[i].name, show, sizeof show));
    char path[256];
    int k = 0;
    for (int g = 0; g < ngroups && !e; g++)
        for (int u = 0; u < plan->nunits && !e; u++)
            for (int t = 0; t < plan->units[u].ntensors && !e; t++, k++) {
                const TensorSpec *ts = &plan->units[u].t[t];
                if (!ckpt_group_has(plan, u, g)) continue;
                Key key = {g, ts->name, 0}, *hit = n ? bsearch(&key, keys, n, sizeof *keys, key_cmp) : NULL;
                snprintf(path, sizeof path, "%s/%s", ckpt_groups[g], ts->name);
                if (hit) used[hit->idx] = 1;
                e = check_one(hit ? &d->datasets[hit->idx] : NULL, file, path, ts, version, want ? &want[k] : NULL);
            }
    // a tensor the plan lacks means another model (family, tying, biases) wrote the file
    for (size_t i = 0; !e && i < n; i++)
        if (!used[keys[i].idx])
            e = err_text(msg, sizeof msg, "checkpoint '%s' holds /%s/%s, which is not a tensor of its %s model", file,
                          ckpt_groups[keys[i].group], shown(keys[i].name, show, sizeof show),
                          plan->cfg.model_type[0] ? plan->cfg.model_type : "(unnamed)");
    free(keys);
    free(used);
    return e;
}
