// hf: Hugging Face model sources read slice by slice (hf.h). What a family's config.json, tensor
// names and transforms are is its descriptor's (model/family.h): this file only reads descriptors.
#include "hf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/path.h"
#include "../base/err.h"
#include "../base/log.h"
#include "../comm/comm.h"
#include "../comm/io.h"
#include "../data/source/hub.h"
#include "../base/json.h"
#include "../kernels/kernels.h"
#include "../model/family.h"
#include "ckpt.h"
#include "safetensors.h"

struct HfModel {
    char path[HF_PATH];       // the resolved source
    char *tokenizer;          // NULL when none
    const ModelFamily *fam;  // the family config.json (or the tensor names) describe
    ModelConfig m;
    unsigned fields;  // MODEL_* (config.h)
    int tied;  // the family's tied tensor comes from the one it is tied to
    int nfiles;
    StFile *files;
    CkptSource source;  // config.json, tokenizer_config.json, ... beside the weights
};

// 1 for a readable regular file, 0 when nothing is there, -1 (err set) when something is there but
// cannot be used: absent and unusable are different outcomes, and only absent has a fallback
static int hf_present(const char *p, char *err, size_t len) {
    struct stat st;
    if (lstat(p, &st) != 0 && errno == ENOENT) return 0;
    if (stat(p, &st) != 0) return err_set(err, len, "'%s' is there but cannot be used: %s", p, strerror(errno));
    if (!S_ISREG(st.st_mode)) return err_set(err, len, "'%s' is there but is not a regular file", p);
    if (access(p, R_OK) != 0) return err_set(err, len, "'%s' is there but cannot be read: %s", p, strerror(errno));
    return 1;
}

// A file name read from a file (an index's weight_map): it must stay inside the folder that holds
// the index, so no absolute path and no '..' step.
static int hf_inside(const char *name) {
    if (!name[0] || name[0] == '/') return 0;
    for (const char *s = name; *s;) {
        size_t n = strcspn(s, "/");
        if (n == 2 && s[0] == '.' && s[1] == '.') return 0;
        s += n + (s[n] == '/');
    }
    return 1;
}

// tokenizer.model, else tokenizer.json, in dir; 0 when neither
char *hf_find_tokenizer(const char *dir) {
    static const char *const names[] = {"tokenizer.model", "tokenizer.json"};
    for (int i = 0; i < 2; i++) {
        char *p = path_join(dir, names[i]);
        if (path_is_file(p)) return p;
        free(p);
    }
    return NULL;
}

// ---- model source ----

static const StTensor *hf_find(const HfModel *h, const char *name, int *file) {
    for (int i = 0; i < h->nfiles; i++) {
        const StTensor *t = st_find(&h->files[i], name);
        if (t) return *file = i, t;
    }
    return NULL;
}

static int hf_add_file(HfModel *h, const char *path, char *err, size_t len) {
    StFile *files = realloc(h->files, (size_t)(h->nfiles + 1) * sizeof(StFile));
    if (!files) err_fatal("out of memory opening '%s'", path);
    h->files = files;
    if (st_open(&h->files[h->nfiles], path, err, len) != 0) return -1;
    io_input(path, "--init_from");  // an input no output of the run may replace
    h->nfiles++;
    return 0;
}

static int hf_open_index(HfModel *h, const char *index, char *err, size_t len) {
    char jerr[600], *dir = path_dirname(index);
    JsonValue *v = json_parse_file(index, 64u << 20, jerr, sizeof jerr);
    if (!v) return free(dir), err_set(err, len, "invalid index: %s", jerr);
    const JsonValue *map = json_get(v, "weight_map");
    int rc = 0;
    if (!map || map->type != JSON_OBJECT) rc = err_set(err, len, "index '%s' has no weight_map object", path_show(index));
    // every shard the map names, once, in order of first mention
    for (size_t i = 0; rc == 0 && i < map->len; i++) {
        const JsonValue *e = &map->items[i];
        if (e->type != JSON_STRING) {
            rc = err_set(err, len, "index '%s' maps %s to something other than a file name", path_show(index), e->key);
            break;
        }
        if (!hf_inside(e->str)) {
            rc = err_set(err, len, "index '%s' maps %s to '%s', outside the index's folder: shards must be files beside it",
                         path_show(index), e->key, e->str);
            break;
        }
        char *shard = path_join(dir, e->str);
        int known = 0;
        for (int f = 0; f < h->nfiles && !known; f++) known = !strcmp(h->files[f].path, shard);
        if (!known && !path_is_file(shard)) rc = err_set(err, len, "index '%s' names shard '%s', which does not exist", path_show(index), e->str);
        else if (!known) rc = hf_add_file(h, shard, err, len);
        free(shard);
    }
    for (size_t i = 0; rc == 0 && i < map->len; i++) {
        const JsonValue *e = &map->items[i];
        char *shard = path_join(dir, e->str);
        int f = 0;
        while (strcmp(h->files[f].path, shard)) f++;
        free(shard);
        if (!st_find(&h->files[f], e->key))
            rc = err_set(err, len, "index '%s' maps %s to '%s', which does not hold it", path_show(index), e->key, e->str);
    }
    json_free(v);
    free(dir);
    return rc;
}

// absent, or null as transformers writes unset options (sliding_window in Mistral's configs)
static int hf_unset(const JsonValue *c, const char *key) {
    const JsonValue *v = json_get(c, key);
    return !v || v->type == JSON_NULL;
}

// a positive int member: 1; unset: 0 (an error when required) and *out untouched; else -1
static int hf_size(const JsonValue *c, const char *path, const char *key, int required, int *out, char *err, size_t len) {
    int64_t v;
    if (hf_unset(c, key)) return required ? err_set(err, len, "'%s' lacks %s", path_show(path), key) : 0;
    if (!json_get_int(c, key, &v) || v <= 0 || v > INT_MAX)
        return err_set(err, len, "'%s': %s must be a positive integer", path_show(path), key);
    *out = (int)v;
    return 1;
}

static int hf_positive(const JsonValue *c, const char *path, const char *key, float *out, char *err, size_t len) {
    double v;
    if (hf_unset(c, key)) return 0;
    if (!json_get_number(c, key, &v) || !(v > 0)) return err_set(err, len, "'%s': %s must be a positive number", path_show(path), key);
    *out = (float)v;
    return 1;
}

static int hf_in(const char *s, const char *const *list) {
    for (; list && *list; list++)
        if (!strcmp(*list, s)) return 1;
    return 0;
}

// what fsdpc reads Hugging Face sources as, for messages
static const char *hf_importable(void) {
    static char what[600];
    size_t n = 0;
    what[0] = 0;
    for (size_t i = 0; i < family_count() && n < sizeof what; i++)
        if (family_at(i)->hf_import.keys)
            n += (size_t)snprintf(what + n, sizeof what - n, "%s%s", n ? " or " : "", family_at(i)->hf_import.what);
    return n ? what : "no Hugging Face models";
}

// The family a config.json describes: its model_type (when given) and one of its architectures
// (when listed) must be the family's. NULL when none; *what names the model for the message.
static const ModelFamily *hf_family_of(const JsonValue *c, const char **what) {
    const JsonValue *arch = json_get(c, "architectures");
    const char *type = json_get_string(c, "model_type");
    int listed = arch && arch->type == JSON_ARRAY && arch->len;
    *what = type;
    if (listed && arch->items[0].type == JSON_STRING) *what = arch->items[0].str;
    for (size_t f = 0; f < family_count(); f++) {
        const FamilyHfImport *im = &family_at(f)->hf_import;
        int ok = im->keys && (!type || hf_in(type, im->model_types)), named = 0;
        for (size_t i = 0; ok && listed && i < arch->len; i++)
            named |= arch->items[i].type == JSON_STRING && hf_in(arch->items[i].str, im->architectures);
        if (ok && (!listed || named)) return family_at(f);
    }
    return NULL;
}

// an object's rope_type (older transformers: type), or NULL
static const char *hf_rope_type(const JsonValue *o) {
    const char *t = json_get_string(o, "rope_type");
    return t ? t : json_get_string(o, "type");
}

// whether rope_type t is one the family implements: plain RoPE, or its frequency scaling
static int hf_rope_known(const char *t, const FamilyHfRope *r) {
    return !strcmp(t, "default") || (r->scaled && !strcmp(t, r->scaled));
}

// Rotary embeddings in either spelling: rope_scaling (older transformers; null, or an object of
// rope_type "default" or the family's scaled one) and rope_parameters (newer: {"rope_theta": ...,
// "rope_type": "default"}). Any other rope_type (linear, dynamic, yarn...) is refused by name.
static int hf_check_rope(const JsonValue *c, const FamilyHfRope *r, const char *path, char *err, size_t len) {
    if (!r->theta) return 0;
    const JsonValue *scaling = json_get(c, r->scaling), *par = json_get(c, r->parameters);
    const char *t = scaling && scaling->type == JSON_OBJECT ? hf_rope_type(scaling) : NULL;
    char built[64];
    snprintf(built, sizeof built, "plain RoPE%s%s", r->scaled ? " and rope_type " : "", r->scaled ? r->scaled : "");
    if (scaling && scaling->type != JSON_NULL && !(t && hf_rope_known(t, r)))
        return err_set(err, len, "'%s' sets %s%s%s, which fsdpc does not support (%s only)", path_show(path), r->scaling,
                       t ? " with rope_type " : "", t ? t : "", built);
    if (!par || par->type == JSON_NULL) return 0;
    if (par->type != JSON_OBJECT) return err_set(err, len, "'%s': %s must be an object", path_show(path), r->parameters);
    if ((t = hf_rope_type(par)) && !hf_rope_known(t, r))
        return err_set(err, len, "'%s' sets %s with rope_type %s, which fsdpc does not implement (%s only)", path_show(path),
                       r->parameters, t, built);
    return 0;
}

// The family's RoPE frequency scaling (rope_type r->scaled) from rope_scaling or rope_parameters,
// into m's rope_scaling_* fields: 1 when the config has it, 0 when not, -1 on an error.
static int hf_read_rope_scaling(const JsonValue *c, const FamilyHfRope *r, const char *path, ModelConfig *m, char *err,
                                size_t len) {
    const char *const names[2] = {r->scaling, r->parameters};
    const JsonValue *o = NULL;
    const char *name = NULL;
    for (int i = 0; i < 2 && !o && r->scaled; i++) {
        const JsonValue *v = json_get(c, names[i]);
        const char *t = v && v->type == JSON_OBJECT ? hf_rope_type(v) : NULL;
        if (t && !strcmp(t, r->scaled)) o = v, name = names[i];
    }
    if (!o) return 0;
    static const char *const keys[] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    float *dst[] = {&m->rope_scaling_factor, &m->rope_low_freq_factor, &m->rope_high_freq_factor, &m->rope_original_context};
    for (int i = 0; i < 4; i++) {
        double v;
        if (!json_get_number(o, keys[i], &v) || !(v > 0) || !(v < 1e30))
            return err_set(err, len, "'%s': %s of rope_type %s needs %s, a positive number", path_show(path), name, r->scaled, keys[i]);
        *dst[i] = (float)v;
    }
    if (!(m->rope_high_freq_factor > m->rope_low_freq_factor))
        return err_set(err, len, "'%s': %s.high_freq_factor must exceed its low_freq_factor", path_show(path), name);
    return 1;
}

// The family of config.json c, and the settings of it that the family cannot honour.
// A switch of config.json that is neither true, false nor null: transformers takes its truth, so
// 0 would turn a feature off and "false" on; fsdpc names it rather than guess.
static int hf_not_switch(const JsonValue *c, const char *key, const char *path, char *err, size_t len) {
    const JsonValue *v = json_get(c, key);
    const char *type = v->type == JSON_NUMBER ? "a number" : v->type == JSON_STRING ? "a string" : v->type == JSON_ARRAY ? "an array" : "an object";
    return err_set(err, len, "'%s': %s is %s, not true or false: transformers would take its truth (0 is false, \"false\" is true); "
                   "write true or false", path_show(path), key, type);
}

static int hf_check_config(const JsonValue *c, const char *path, const ModelFamily **fam, char *err, size_t len) {
    if (c->type != JSON_OBJECT) return err_set(err, len, "'%s' is not a JSON object", path_show(path));
    const char *what;
    const ModelFamily *f = *fam = hf_family_of(c, &what);
    if (!f) return err_set(err, len, "'%s' describes a%s %s model; fsdpc loads %s", path_show(path), what ? "" : "n", what ? what : "unknown",
                           hf_importable());
    if (hf_check_rope(c, &f->hf_import.rope, path, err, len)) return -1;
    for (const FamilyHfCheck *k = f->hf_import.checks; k && k->key; k++) {
        int b = 0;
        const char *v = k->value ? json_get_string(c, k->key) : NULL;
        if (k->value && !v && json_get(c, k->key))
            return err_set(err, len, "'%s': %s must be a string (fsdpc's %s %s)", path_show(path), k->key, f->display, k->why);
        int set = k->value ? 0 : json_get_switch(c, k->key, &b);
        if (set < 0) return hf_not_switch(c, k->key, path, err, len);
        if (k->must_be_true) {
            if (set && !b)
                return err_set(err, len, "'%s' sets %s false, but fsdpc's %s %s", path_show(path), k->key, f->display, k->why);
            continue;
        }
        if (set && b) return err_set(err, len, "'%s' sets %s, but fsdpc's %s %s", path_show(path), k->key, f->display, k->why);
        if (v && strcmp(v, k->value))
            return err_set(err, len, "'%s' has %s %s; fsdpc's %s %s", path_show(path), k->key, v, f->display, k->why);
    }
    return 0;
}

// The model's length as family im spells it: 1 with *out set, 0 when unset, -1 on an error
int hf_context(const JsonValue *c, const FamilyHfImport *im, const char *path, int *out, char *err, size_t len) {
    return im->context ? hf_size(c, path, im->context, 0, out, err, len) : 0;
}

// one key of the family's list into m; 0, or -1 with err set
static int hf_read_key(const JsonValue *c, const FamilyHfKey *k, const char *path, ModelConfig *m, char *err, size_t len) {
    void *dst = (char *)m + k->off;
    if (k->type == FAMILY_INT) return hf_size(c, path, k->key, k->required, (int *)dst, err, len) < 0 ? -1 : 0;
    if (k->type == FAMILY_CHOICE) {
        *(int *)dst = 0;
        if (hf_unset(c, k->key)) return 0;
        const char *v = json_get_string(c, k->key);
        for (const CliChoice *ch = k->choices; v && ch->name; ch++)
            if (!strcmp(v, ch->name)) return *(int *)dst = ch->value, 0;
        char names[256] = "";
        for (size_t i = 0, n = 0; k->choices[i].name && n < sizeof names; i++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", k->choices[i].name);
        return err_set(err, len, "'%s' has %s %.60s%s; fsdpc builds %s", path_show(path), k->key, v ? v : "(not a string)", v ? "" : "", names);
    }
    if (k->required && hf_unset(c, k->key)) return err_set(err, len, "'%s' lacks %s", path_show(path), k->key);
    *(float *)dst = k->absent;
    return hf_positive(c, path, k->key, (float *)dst, err, len) < 0 ? -1 : 0;
}

static int hf_read_config(HfModel *h, const char *path, char *err, size_t len) {
    char jerr[600];
    JsonValue *c = json_parse_file(path, 16u << 20, jerr, sizeof jerr);
    if (!c) return err_set(err, len, "invalid model config: %s", jerr);
    ModelConfig *m = &h->m;
    int rc = hf_check_config(c, path, &h->fam, err, len);
    const FamilyHfImport *im = rc ? NULL : &h->fam->hf_import;
    // the required keys, then the optional ones: a config without num_key_value_heads has one per head
    for (int required = 1; rc == 0 && required >= 0; required--) {
        if (!required) m->num_key_value_heads = m->num_heads;
        for (const FamilyHfKey *k = im->keys; rc == 0 && k->key; k++)
            if (k->required == required) rc = hf_read_key(c, k, path, m, err, len), h->fields |= k->bit;
    }
    // newer transformers keep rope_theta inside rope_parameters
    const JsonValue *par = rc == 0 && im->rope.parameters ? json_get(c, im->rope.parameters) : NULL;
    if (par && par->type != JSON_OBJECT) par = NULL;
    // the top-level rope_theta of a family whose own key is another, then the parameters object's
    const JsonValue *at = rc || !im->rope.theta || !hf_unset(c, im->rope.theta) ? NULL
                          : !hf_unset(c, "rope_theta") ? c : par && !hf_unset(par, "rope_theta") ? par : NULL;
    if (at) {
        double v;
        if (!json_get_number(at, "rope_theta", &v) || !(v > 0) || v > 3.4e38)
            rc = err_set(err, len, "'%s': %s%srope_theta must be a positive number", path_show(path), at == par ? im->rope.parameters : "",
                         at == par ? "." : "");
        else m->rope_theta = (float)v, h->fields |= MODEL_ROPE_THETA;
    }
    // partial rotary as newer transformers spell it
    at = rc || !im->rope.partial || !hf_unset(c, im->rope.partial) ? NULL
         : !hf_unset(c, "partial_rotary_factor") ? c : par && !hf_unset(par, "partial_rotary_factor") ? par : NULL;
    if (at) {
        double v;
        if (!json_get_number(at, "partial_rotary_factor", &v) || !(v > 0) || v > 1)
            rc = err_set(err, len, "'%s': %s%spartial_rotary_factor must be a number in (0, 1]", path_show(path),
                         at == par ? im->rope.parameters : "", at == par ? "." : "");
        else m->rotary_pct = (float)v, h->fields |= MODEL_ROTARY_PCT;
    }
    int r = rc ? rc : hf_read_rope_scaling(c, &im->rope, path, m, err, len);
    if (r > 0) h->fields |= MODEL_ROPE_SCALING;
    r = r < 0 ? -1 : hf_context(c, im, path, &m->max_context_width, err, len);
    if (r > 0) h->fields |= MODEL_CONTEXT;
    rc = r < 0 ? -1 : 0;
    int64_t head_dim;
    if (rc == 0 && json_get_int(c, "head_dim", &head_dim) && head_dim * m->num_heads != m->hidden_width)
        rc = err_set(err, len, "'%s': head_dim %lld is not hidden_size / num_attention_heads, which fsdpc requires", path_show(path),
                     (long long)head_dim);
    if (rc == 0 && im->tied && json_get_switch(c, "tie_word_embeddings", &h->tied) < 0)
        rc = hf_not_switch(c, "tie_word_embeddings", path, err, len);
    if (rc == 0 && h->fam->tie_option) {  // a tied model trains tied: no lm_head to copy
        m->tie_word_embeddings = h->tied, h->fields |= MODEL_TIED;
        h->tied = 0;
    }
    json_free(c);
    return rc;
}

// Without config.json: the first importable family whose embedding the files hold (else the
// first importable one), and the sizes the tensor shapes give (heads and context cannot be told
// apart).
static void hf_infer_config(HfModel *h) {
    int f;
    for (size_t i = 0; i < family_count(); i++) {
        const ModelFamily *fam = family_at(i);
        if (!fam->hf_import.keys) continue;
        if (!h->fam) h->fam = fam;
        if (hf_find(h, fam->hf_import.embed, &f)) {
            h->fam = fam;
            break;
        }
    }
    if (!h->fam) return;
    const FamilyHfImport *im = &h->fam->hf_import;
    const StTensor *e = hf_find(h, im->embed, &f), *g = hf_find(h, im->mlp, &f);
    if (e && e->ndim == 2 && e->shape[0] <= INT_MAX && e->shape[1] <= INT_MAX) {
        h->m.vocab_size = (int)e->shape[0];
        h->m.hidden_width = (int)e->shape[1];
        h->fields |= MODEL_VOCAB | MODEL_HIDDEN;
    }
    if (g && g->ndim == 2 && g->shape[0] <= INT_MAX) {
        h->m.intermediate_size = (int)g->shape[0];
        h->fields |= MODEL_INTERMEDIATE;
    }
    int layers = 0;
    for (int i = 0; i < h->nfiles; i++)
        for (int t = 0; t < h->files[i].ntensors; t++) {
            int l;
            if (sscanf(h->files[i].tensors[t].name, im->layer_fmt, &l) == 1 && l >= layers && l < INT_MAX) layers = l + 1;
        }
    if (layers) h->m.num_layers = layers, h->fields |= MODEL_LAYERS;
    // safetensors stores a tied pair once, under the name of the tensor it is tied to
    h->tied = im->tied && e && !hf_find(h, im->tied, &f);
}

// the weights (an index or a file) and config.json (when there) found in dir
static int hf_open_files(HfModel *h, const char *dir, const char *weights, const char *config, char *err, size_t len) {
    int has_config = hf_present(config, err, len);
    if (has_config < 0 || (has_config && hf_read_config(h, config, err, len) != 0)) return -1;
    if (path_ends_with(weights, ".json") ? hf_open_index(h, weights, err, len) : hf_add_file(h, weights, err, len)) return -1;
    io_input(weights, "--init_from");
    io_input(config, "--init_from");
    if (!has_config) hf_infer_config(h);
    if (!h->fam) return err_set(err, len, "'%s': this fsdpc reads no Hugging Face model family", h->path);
    h->fields |= MODEL_TYPE;
    h->tokenizer = hf_find_tokenizer(dir);
    const char *e = ckpt_source_from_dir(dir, &h->source);
    return e ? err_set(err, len, "%s", e) : 0;
}

static int hf_open_source(HfModel *h, char *err, size_t len) {
    char *dir, *weights;
    int have = 1;
    if (path_is_dir(h->path)) {
        dir = path_dup(h->path);
        weights = path_join(dir, "model.safetensors.index.json");
        if (!(have = hf_present(weights, err, len))) {
            free(weights);
            weights = path_join(dir, "model.safetensors");
            have = hf_present(weights, err, len);
        }
        if (!have) err_set(err, len, "'%s' holds neither model.safetensors nor model.safetensors.index.json", path_show(dir));
    } else {
        dir = path_dirname(h->path);
        weights = path_dup(h->path);
    }
    char *config = path_join(dir, "config.json");
    int rc = have > 0 ? hf_open_files(h, dir, weights, config, err, len) : -1;
    free(dir), free(weights), free(config);
    return rc;
}

HfModel *hf_open(const char *spec, char *err, size_t errlen) {
    HfModel *h = callocCheck(1, sizeof *h);
    if (!hub_resolve(spec, h->path, sizeof h->path)) {
        snprintf(err, errlen, "%s", h->path);
        free(h);
        return NULL;
    }
    if (hf_open_source(h, err, errlen) != 0) {
        hf_close(h);
        return NULL;
    }
    return h;
}

void hf_close(HfModel *h) {
    if (!h) return;
    for (int i = 0; i < h->nfiles; i++) st_close(&h->files[i]);
    free(h->files);
    ckpt_source_free(&h->source);
    free(h->tokenizer);
    free(h);
}

unsigned hf_model_config(const HfModel *h, ModelConfig *m) {
    unsigned f = h->fields;
    if (f & MODEL_TYPE) snprintf(m->model_type, sizeof m->model_type, "%s", h->fam->model_type);
    if (f & MODEL_HIDDEN) m->hidden_width = h->m.hidden_width;
    if (f & MODEL_LAYERS) m->num_layers = h->m.num_layers;
    if (f & MODEL_HEADS) m->num_heads = h->m.num_heads;
    if (f & MODEL_KV_HEADS) m->num_key_value_heads = h->m.num_key_value_heads;
    if (f & MODEL_INTERMEDIATE) m->intermediate_size = h->m.intermediate_size;
    if (f & MODEL_VOCAB) m->vocab_size = h->m.vocab_size;
    if (f & MODEL_CONTEXT) m->max_context_width = h->m.max_context_width;
    if (f & MODEL_ROPE_THETA) m->rope_theta = h->m.rope_theta;
    if (f & MODEL_NORM_EPS) m->norm_eps = h->m.norm_eps;
    if (f & MODEL_ROTARY_PCT) m->rotary_pct = h->m.rotary_pct;
    if (f & MODEL_TIED) m->tie_word_embeddings = h->m.tie_word_embeddings;
    if (f & MODEL_ROPE_SCALING) {
        m->rope_scaling_factor = h->m.rope_scaling_factor;
        m->rope_low_freq_factor = h->m.rope_low_freq_factor;
        m->rope_high_freq_factor = h->m.rope_high_freq_factor;
        m->rope_original_context = h->m.rope_original_context;
    }
    if (f & MODEL_WINDOW) m->sliding_window = h->m.sliding_window;
    if (f & MODEL_ACT) m->hidden_act = h->m.hidden_act;
    if (f & MODEL_EXPERTS) m->num_experts = h->m.num_experts;
    if (f & MODEL_EXPERTS_PER_TOK) m->num_experts_per_tok = h->m.num_experts_per_tok;
    return f;
}

const char *hf_tokenizer_path(const HfModel *h) { return h->tokenizer; }

const char *hf_source_path(const HfModel *h) { return h->path; }

void hf_take_source(HfModel *h, CkptSource *src) {
    *src = h->source;
    memset(&h->source, 0, sizeof h->source);
}

// The file tensor the model's tensor spec loads from, after checking it; NULL with msg set.
static const StTensor *hf_source_tensor(const HfModel *h, const TensorSpec *spec, int *file, char *msg, size_t len) {
    const FamilyHfImport *im = &h->fam->hf_import;
    const char *name = h->tied && !strcmp(spec->name, im->tied) ? im->tied_to : spec->name;
    const StTensor *t = hf_find(h, name, file);
    if (!t) return err_set(msg, len, "tensor %s is missing from '%s'", name, h->path), NULL;
    const char *path = h->files[*file].path;
    if (t->dtype == ST_OTHER)
        return err_set(msg, len, "tensor %s in '%s' has dtype %s; fsdpc loads F32, BF16 and F16", name, path_show(path), t->dtype_name), NULL;
    int ok = t->ndim == spec->ndim;
    for (int d = 0; ok && d < spec->ndim; d++) ok = t->shape[d] == spec->full[d];  // the whole tensor at any tp degree
    if (!ok) {
        char got[160] = "", want[64];
        for (int d = 0; d < t->ndim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), d ? ",%lld" : "%lld", (long long)t->shape[d]);
        snprintf(want, sizeof want, spec->ndim == 1 ? "%d" : "%d,%d", spec->full[0], spec->full[1]);
        return err_set(msg, len, "tensor %s in '%s' has shape [%s] but the model config needs [%s]", name, path_show(path), got, want), NULL;
    }
    return t;
}

// Buffers some exports carry that are no parameters: rotary inverse frequencies and the causal
// attention masks some architectures save. Skipped without a word.
static int hf_known_buffer(const char *name) {
    static const char *const suffixes[] = {".rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias", ".attention.bias",
                                           ".attention.masked_bias"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
        size_t k = strlen(suffixes[i]);
        if (n > k && !strcmp(name + n - k, suffixes[i])) return 1;
    }
    return 0;
}

// Tensors in the files the model does not load: a trainer that drops weights silently has lost
// the run, so they are refused (naming the first few) unless --allow_unused_weights; NULL or msg.
static const char *hf_unused(const HfModel *h, const ModelPlan *plan, int allow, char *msg, size_t len) {
    int count = 0, u, t;
    char names[400] = "";
    for (int i = 0; i < h->nfiles; i++)
        for (int k = 0; k < h->files[i].ntensors; k++) {
            const char *name = h->files[i].tensors[k].name;
            if (model_find_tensor(plan, name, &u, &t) || hf_known_buffer(name)) continue;
            if (count++ < 3) snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", count > 1 ? ", " : "", name);
        }
    if (!count) return NULL;
    snprintf(msg, len, "'%s' holds %d tensor%s the %s model does not use (%s%s)%s", h->path, count, count == 1 ? "" : "s",
             plan->cfg.model_type, names, count > 3 ? ", ..." : "",
             allow ? "; they are not loaded (--allow_unused_weights)" : ": is it another architecture or a larger model? "
                                                                        "--allow_unused_weights loads the rest anyway");
    if (!allow) return msg;
    log_msg("warning: %s\n", msg);
    return NULL;
}

// QLoRA's packed units are made from whole tensors (shard_fill_packed): one read whole from its file
typedef struct {
    const StFile *files;
    int *fds;
    HfSourceFn find;
    const void *ctx;
    const ModelPlan *plan;
    char *msg;
    size_t len;
} HfWhole;

static const char *hf_whole_tensor(void *ctx, int u, int t, float *dst) {
    HfWhole *w = ctx;
    int file;
    const TensorSpec *ts = &w->plan->units[u].t[t];
    const StTensor *src = w->find(w->ctx, ts, &file, w->msg, w->len);
    if (!src) return w->msg;
    const StFile *sf = &w->files[file];
    if (w->fds[file] < 0 && (w->fds[file] = path_open_read(sf->path)) < 0)
        return snprintf(w->msg, w->len, "cannot open '%s': %s", sf->path, path_strerror(errno)), w->msg;
    return st_read_f32(w->fds[file], sf, src, 0, model_whole_numel(ts), dst);
}

const char *hf_read_units(ShardState *s, int u0, int u1, const StFile *files, int nfiles, HfSourceFn find, const void *ctx,
                          char *msg, size_t len) {
    const ModelPlan *plan = shard_plan(s);
    const char *bad = NULL;
    int file, on_device = shard_state_on_device(s), *fds = mallocCheck((size_t)(nfiles ? nfiles : 1) * sizeof(int));
    for (int i = 0; i < nfiles; i++) fds[i] = -1;
    size_t stage_len = 0;
    for (int u = u0; u < u1; u++)
        if (shard_unit_len(s, u) > stage_len) stage_len = shard_unit_len(s, u);
    float *stage = on_device ? mallocCheck((stage_len < HF_CHUNK ? stage_len : HF_CHUNK) * sizeof(float)) : NULL;
    HfWhole whole = {files, fds, find, ctx, plan, msg, len};
    for (int u = u0; u < u1 && !bad; u++)
        if (shard_unit_packed(s, u)) bad = shard_fill_packed(s, u, hf_whole_tensor, &whole);
    for (int u = u0; u < u1 && !bad; u++)
        for (int t = 0; t < plan->units[u].ntensors && !bad; t++) {
            size_t begin, local, n = shard_tensor_slice(s, u, t, &begin, &local);
            if (!n) continue;
            const StTensor *src = find(ctx, &plan->units[u].t[t], &file, msg, len);
            if (!src) {
                bad = msg;
                break;
            }
            const StFile *sf = &files[file];
            if (fds[file] < 0 && (fds[file] = path_open_read(sf->path)) < 0) {
                snprintf(msg, len, "cannot open '%s': %s", sf->path, path_strerror(errno));
                bad = msg;
                break;
            }
            float *dst = shard_master(s, u) + local;
            // a tp part is runs of the whole tensor (model_tp_run), each read where it lies
            for (size_t at = 0; at < n && !bad;) {
                size_t from = begin + at, run = n - at;
                if (plan->tp > 1 && (run = model_tp_run(&plan->units[u].t[t], plan->tp, plan->tp_rank, begin + at, &from)) > n - at)
                    run = n - at;
                if (!on_device) bad = st_read_f32(fds[file], sf, src, from, run, dst + at);
                for (size_t done = 0; on_device && done < run && !bad; done += HF_CHUNK) {
                    size_t k = run - done < HF_CHUNK ? run - done : HF_CHUNK;
                    if (!(bad = st_read_f32(fds[file], sf, src, from + done, k, stage))) kern_upload(dst + at + done, stage, k * sizeof(float));
                }
                at += run;
            }
        }
    for (int i = 0; i < nfiles; i++)
        if (fds[i] >= 0) close(fds[i]);
    free(fds);
    free(stage);
    return bad;
}

int hf_check_finite(const ShardState *s, const char *path, const char *what, char *err, size_t errlen) {
    const ModelPlan *plan = shard_plan(s);
    ShardTensorRef nonfinite[3];
    int nbad = shard_nonfinite(s, 1, nonfinite, 3);
    if (!nbad) return 0;
    char names[900] = "";
    size_t k = 0;
    for (int i = 0; i < nbad && i < 3 && k < sizeof names; i++)
        k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", plan->units[nonfinite[i].unit].t[nonfinite[i].tensor].name);
    return err_set(err, errlen, "'%s' holds NaN or infinite values in %d tensor(s): %s%s: %s cannot be trained from (fetch or "
                   "export them again)", path_show(path), nbad, names, nbad > 3 ? ", ..." : "", what);
}

static const StTensor *hf_find_source(const void *ctx, const TensorSpec *spec, int *file, char *msg, size_t len) {
    return hf_source_tensor(ctx, spec, file, msg, len);
}

int hf_load(const HfModel *h, ShardState *s, int allow_unused, char *err, size_t errlen) {
    static char msg[2 * HF_PATH];
    const ModelPlan *plan = shard_plan(s);
    const char *bad = NULL;
    int file, nu = plan->lora0 >= 0 ? plan->lora0 : plan->nunits;  // LoRA's adapters (the last units) keep their start
    for (int u = 0; u < nu && !bad; u++)
        for (int t = 0; t < plan->units[u].ntensors && !bad; t++)
            if (!hf_source_tensor(h, &plan->units[u].t[t], &file, msg, sizeof msg)) bad = msg;
    if (!bad) bad = hf_unused(h, plan, allow_unused, msg, sizeof msg);
    if (comm_agree(bad, err, errlen)) return -1;
    if (h->tied)
        log_msg("%s: %s is tied to %s; fsdpc trains an untied copy of it\n", h->path, h->fam->hf_import.tied, h->fam->hf_import.tied_to);
    bad = hf_read_units(s, 0, nu, h->files, h->nfiles, hf_find_source, h, msg, sizeof msg);
    if (comm_agree(bad, err, errlen)) return -1;  // a read error is this rank's alone
    shard_master_changed(s);
    return hf_check_finite(s, h->path, "these weights", err, errlen);
}
