// peft: PEFT's LoRA adapter folders in (peft.h).
#include "peft.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "../base/json.h"
#include "../base/path.h"
#include "../comm/comm.h"
#include "../comm/io.h"
#include "../model/lora.h"
#include "hf.h"
#include "safetensors.h"

// the module short name of an adapted base weight's name ("model.layers.0.self_attn.q_proj.weight": q_proj)
static void peft_short_name(const char *weight, char *out, size_t len) {
    size_t n = strlen(weight) - strlen(".weight");
    const char *s = weight + n;
    while (s > weight && s[-1] != '.') s--;
    snprintf(out, len, "%.*s", (int)(weight + n - s), s);
}

// whether name is one of the comma-separated list's entries
static int peft_listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, ",");
        if (k == n && !strncmp(p, name, n)) return 1;
        p += k + (p[k] == ',');
    }
    return 0;
}

// a weight of plan's blocks with the short name `name` that is not adapted (an attn.c_proj
// beside an adapted mlp.c_proj): PEFT, matching by suffix, would adapt it too
static int peft_ambiguous(const ModelPlan *plan, const char *name) {
    char other[80];
    for (int u = 0; u < plan->lora0; u++)
        for (int t = 0; plan->units[u].layer >= 0 && t < plan->units[u].ntensors; t++) {
            const TensorSpec *ts = &plan->units[u].t[t];
            if (ts->lora >= 0 || ts->ndim != 2 || strlen(ts->name) < 8 || strcmp(ts->name + strlen(ts->name) - 7, ".weight"))
                continue;
            peft_short_name(ts->name, other, sizeof other);
            if (!strcmp(other, name)) return 1;
        }
    return 0;
}

void peft_targets(const ModelPlan *plan, char *out, size_t len) {
    size_t k = 0;
    out[0] = 0;
    for (int u = 0; plan->lora0 >= 0 && u < plan->lora0; u++)
        for (int t = 0; t < plan->units[u].ntensors; t++) {
            char name[2 * sizeof plan->units[u].t[t].name], last[sizeof plan->units[u].t[t].name];
            if (plan->units[u].t[t].lora < 0) continue;
            peft_short_name(plan->units[u].t[t].name, last, sizeof last);
            snprintf(name, sizeof name, "%s", last);
            if (peft_ambiguous(plan, last)) {  // its parent's name too: mlp.c_proj
                const char *w = plan->units[u].t[t].name, *end = w + strlen(w) - strlen(".weight") - strlen(last) - 1, *p = end;
                while (p > w && p[-1] != '.') p--;
                snprintf(name, sizeof name, "%.*s.%s", (int)(end - p), p, last);
            }
            if (peft_listed(out, name) || k >= len) continue;
            k += (size_t)snprintf(out + k, len - k, "%s%s", k ? "," : "", name);
        }
}

void peft_base_name(const char *path, char *out, size_t len) {
    const char *repo = strstr(path, "/models--"), *snap = repo ? strstr(repo + 9, "/snapshots/") : NULL;
    const char *name = repo ? repo + 9 : NULL, *sep = name ? strstr(name, "--") : NULL;
    if (!snap || !sep || sep > snap) {
        snprintf(out, len, "%s", path_show(path));
        return;
    }
    snprintf(out, len, "%.*s/%.*s", (int)(sep - name), name, (int)(snap - sep - 2), sep + 2);
}

// a path's or hub name's last component, trailing slashes aside, into out
static void peft_last_component(const char *path, char *out, size_t len) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    snprintf(out, len, "%.*s", (int)(n - b), path + b);
}

// What the adapters are read from: the safetensors file, and the folder for messages.
typedef struct {
    const StFile *file;
    const char *dir;
} PeftSource;

// The file's tensor of adapter tensor spec, checked: present, a loadable dtype, the full shape.
static const StTensor *peft_source_tensor(const void *ctx, const TensorSpec *spec, int *file, char *msg, size_t len) {
    const PeftSource *p = ctx;
    char name[sizeof PEFT_PREFIX + sizeof spec->name];
    snprintf(name, sizeof name, PEFT_PREFIX "%s", spec->name);
    *file = 0;
    const StTensor *t = st_find(p->file, name);
    if (!t)
        return err_set(msg, len, "--init_adapter '%s': tensor %s is missing from %s: is the adapter for another model, or "
                       "another --lora_target_modules?", p->dir, name, PEFT_WEIGHTS), NULL;
    if (t->dtype == ST_OTHER)
        return err_set(msg, len, "--init_adapter '%s': tensor %s has dtype %s; fsdpc loads F32, BF16 and F16", p->dir, name,
                       t->dtype_name), NULL;
    if (t->ndim != 2 || t->shape[0] != spec->full[0] || t->shape[1] != spec->full[1]) {
        char got[160] = "";
        for (int d = 0; d < t->ndim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), d ? ",%lld" : "%lld", (long long)t->shape[d]);
        return err_set(msg, len, "--init_adapter '%s': tensor %s has shape [%s] but this run's adapter needs [%d,%d] (--lora_rank "
                       "and the model's sizes)", p->dir, name, got, spec->full[0], spec->full[1]), NULL;
    }
    return t;
}

// adapter_config.json against the run's LoRA settings; NULL or the message in msg
static const char *peft_check_config(const JsonValue *c, const char *path, const ModelPlan *plan, const char *init_from,
                                     char *msg, size_t len) {
    const ModelConfig *m = &plan->cfg;
    if (c->type != JSON_OBJECT) return err_text(msg, len, "--init_adapter: '%s' is not a JSON object", path_show(path));
    const char *type = json_get_string(c, "peft_type");
    if (type && strcmp(type, "LORA"))
        return err_text(msg, len, "--init_adapter: '%s' has peft_type %s; fsdpc loads LORA adapters", path_show(path), type);
    // settings that change what the adapters compute and fsdpc does not build: refused, never ignored
    static const char *const patterns[] = {"rank_pattern", "alpha_pattern", "layers_to_transform", "layers_pattern",
                                           "modules_to_save"};
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++) {
        const JsonValue *v = json_get(c, patterns[i]);
        if (v && v->type != JSON_NULL && !((v->type == JSON_OBJECT || v->type == JSON_ARRAY) && v->len == 0))
            return err_text(msg, len, "--init_adapter: '%s' sets %s, which fsdpc does not build (every adapted layer takes r "
                            "and lora_alpha, and only the adapters train)", path_show(path), patterns[i]);
    }
    int on = 0, dora = json_get_switch(c, "use_dora", &on);
    if (dora < 0)
        return err_text(msg, len, "--init_adapter: '%s': use_dora is neither true nor false (PEFT would take its truth: \"false\" "
                        "is true); write true or false", path_show(path));
    if (on) return err_text(msg, len, "--init_adapter: '%s' is a DoRA adapter (use_dora), which fsdpc does not build", path_show(path));
    const char *bias = json_get_string(c, "bias");
    if (!bias && json_get(c, "bias"))
        return err_text(msg, len, "--init_adapter: '%s': bias must be a string (\"none\", as fsdpc's adapters have none)", path_show(path));
    if (bias && strcmp(bias, "none"))
        return err_text(msg, len, "--init_adapter: '%s' trains biases (bias %s); fsdpc's adapters have none (bias \"none\")",
                        path_show(path), bias);
    int64_t r;
    double alpha;
    int rslora = 0;
    if (!json_get_int(c, "r", &r) || r <= 0) return err_text(msg, len, "--init_adapter: '%s' has no positive integer r", path_show(path));
    if (!json_get_number(c, "lora_alpha", &alpha)) return err_text(msg, len, "--init_adapter: '%s' has no number lora_alpha", path_show(path));
    if (json_get_switch(c, "use_rslora", &rslora) < 0)
        return err_text(msg, len, "--init_adapter: '%s': use_rslora must be true or false", path_show(path));
    if (r != m->lora_rank || (float)alpha != m->lora_alpha || rslora != m->use_rslora)
        return err_text(msg, len, "--init_adapter: '%s' has r %lld, lora_alpha %g%s but this run has --lora_rank %d --lora_alpha "
                        "%g%s: give the adapter's", path_show(path), (long long)r, alpha, rslora ? ", use_rslora" : "", m->lora_rank,
                        (double)m->lora_alpha, m->use_rslora ? " --use_rslora" : "");
    // target_modules as a set of short names; PEFT's string form is a regular expression, except all-linear
    char ours[512], theirs[512] = "";
    peft_targets(plan, ours, sizeof ours);
    const JsonValue *tm = json_get(c, "target_modules");
    const char *all = json_get_string(c, "target_modules");
    if (all && !strcmp(all, "all-linear") && !strcmp(m->lora_target_modules, "all-linear")) snprintf(theirs, sizeof theirs, "%s", ours);
    else if (!tm || tm->type != JSON_ARRAY)
        return err_text(msg, len, "--init_adapter: '%s': target_modules must be a list of module names (or all-linear with "
                        "--lora_target_modules all-linear)", path_show(path));
    // the same weights adapted: their names select, by PEFT's suffix rule, exactly the run's adapted layers
    for (size_t i = 0, k = 0; tm->type == JSON_ARRAY && i < tm->len; i++) {
        if (tm->items[i].type != JSON_STRING)
            return err_text(msg, len, "--init_adapter: '%s': target_modules holds something other than a name", path_show(path));
        if (k < sizeof theirs) k += (size_t)snprintf(theirs + k, sizeof theirs - k, "%s%s", k ? "," : "", tm->items[i].str);
    }
    int same = 1;
    for (int u = 0; u < plan->lora0 && same; u++)
        for (int t = 0; plan->units[u].layer >= 0 && t < plan->units[u].ntensors && same; t++) {
            const TensorSpec *ts = &plan->units[u].t[t];
            char module[80];
            if (!lora_linear_module(ts, module, sizeof module)) continue;
            int picked = 0;
            for (const char *p = theirs; *p && !picked; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
                char one[80];
                snprintf(one, sizeof one, "%.*s", (int)strcspn(p, ","), p);
                picked = lora_target_matches(module, one);
            }
            same = picked == (ts->lora >= 0);
        }
    if (!same)
        return err_text(msg, len, "--init_adapter: '%s' adapts target_modules %s but this run adapts %s (--lora_target_modules "
                        "%s): give the adapter's", path_show(path), theirs, ours, m->lora_target_modules);
    const char *base = json_get_string(c, "base_model_name_or_path");
    char a[512], b[512];
    if (base && base[0] && init_from[0]) {
        peft_last_component(base, a, sizeof a);
        peft_last_component(init_from, b, sizeof b);
        if (strcmp(a, b))
            return err_text(msg, len, "--init_adapter: '%s' was trained on base_model_name_or_path %s, but this run's --init_from "
                            "is %s: load the adapter onto its own base model", path_show(path), base, init_from);
    }
    return NULL;
}

// The folder's config and tensors (its files config and weights) against the run's plan; NULL or the message in msg.
static const char *peft_check_files(const char *dir, const char *config, const char *weights, const ModelPlan *plan,
                                    const char *init_from, StFile *sf, int *opened, char *msg, size_t len) {
    char jerr[600];
    for (int i = 0; i < 2; i++)
        if (!path_is_file(i ? weights : config))
            return err_text(msg, len, "--init_adapter '%s' holds no %s: a PEFT adapter folder has %s and %s", path_show(dir),
                            i ? PEFT_WEIGHTS : PEFT_CONFIG, PEFT_CONFIG, PEFT_WEIGHTS);
    io_input(config, "--init_adapter");  // inputs no output of the run may replace
    io_input(weights, "--init_adapter");
    JsonValue *c = json_parse_file(config, 16u << 20, jerr, sizeof jerr);
    if (!c) return err_text(msg, len, "--init_adapter: invalid %s: %s", PEFT_CONFIG, jerr);
    const char *e = peft_check_config(c, config, plan, init_from, msg, len);
    json_free(c);
    if (e) return e;
    char serr[1200];
    if (st_open(sf, weights, serr, sizeof serr)) return err_text(msg, len, "--init_adapter: %s", serr);
    *opened = 1;
    PeftSource src = {sf, dir};
    int file;
    for (int u = plan->lora0; u < plan->nunits; u++)
        for (int t = 0; t < plan->units[u].ntensors; t++)
            if (!peft_source_tensor(&src, &plan->units[u].t[t], &file, msg, len)) return msg;
    // a tensor that is not one of ours: another model's, or a part of the adapter fsdpc would drop
    for (int i = 0; i < sf->ntensors; i++) {
        const char *name = sf->tensors[i].name;
        int u = -1, t;
        int ours = !strncmp(name, PEFT_PREFIX, strlen(PEFT_PREFIX)) && model_find_tensor(plan, name + strlen(PEFT_PREFIX), &u, &t) &&
                   u >= plan->lora0;
        if (!ours)
            return err_text(msg, len, "--init_adapter '%s': %s holds tensor %s, which is not one of this run's adapters (another "
                            "model's, or settings fsdpc does not train: modules_to_save, biases, DoRA)",
                            path_show(dir), PEFT_WEIGHTS, name);
    }
    return NULL;
}

static const char *peft_check(const char *dir, const ModelPlan *plan, const char *init_from, StFile *sf, int *opened, char *msg,
                              size_t len) {
    if (!path_is_dir(dir)) return err_text(msg, len, "--init_adapter '%s' is not a folder: give a PEFT adapter folder (%s and %s)", path_show(dir),
                                           PEFT_CONFIG, PEFT_WEIGHTS);
    char *config = path_join(dir, PEFT_CONFIG), *weights = path_join(dir, PEFT_WEIGHTS);
    const char *e = peft_check_files(dir, config, weights, plan, init_from, sf, opened, msg, len);
    free(config);
    free(weights);
    return e;
}

int peft_load(const char *dir, ShardState *s, const char *init_from, int *ntensors, char *err, size_t errlen) {
    static char msg[9000];
    const ModelPlan *plan = shard_plan(s);
    if (plan->lora0 < 0)
        return err_set(err, errlen, "--init_adapter '%s' loads LoRA adapters: give --lora_rank (and the adapter's --lora_alpha and "
                       "--lora_target_modules) too", path_show(dir));
    StFile sf;
    int opened = 0;
    memset(&sf, 0, sizeof sf);
    const char *bad = peft_check(dir, plan, init_from, &sf, &opened, msg, sizeof msg);
    if (!comm_agree(bad, err, errlen)) {
        PeftSource src = {&sf, dir};
        bad = hf_read_units(s, plan->lora0, plan->nunits, &sf, 1, peft_source_tensor, &src, msg, sizeof msg);
        if (!comm_agree(bad, err, errlen)) bad = NULL;
        else bad = err;
    } else {
        bad = err;
    }
    if (opened) st_close(&sf);
    if (bad) return -1;
    shard_master_changed(s);
    *ntensors = 0;
    for (int u = plan->lora0; u < plan->nunits; u++) *ntensors += plan->units[u].ntensors;
    char *path = path_join(dir, PEFT_WEIGHTS);
    int rc = hf_check_finite(s, path, "these adapters", err, errlen);
    free(path);
    return rc;
}
