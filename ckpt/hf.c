// hf: Hugging Face model sources read slice by slice, and checkpoints exported as model
// directories. What a family's config.json, tensor names and transforms are is its descriptor's
// (model/family.h): this file only reads descriptors.
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

#include "../comm/comm.h"
#include "../comm/io.h"
#include "../data/source/hub.h"
#include "../base/json.h"
#include "../kernels/kernels.h"
#include "../model/cli.h"
#include "../model/family.h"
#include "ckpt.h"
#include "safetensors.h"

enum { HF_PATH = 4096 };
// elements per device upload or export chunk (64 MiB of fp32): bounded memory whatever the model size
#define HF_CHUNK ((size_t)16 << 20)

struct HfModel {
    char path[HF_PATH];       // the resolved source
    char tokenizer[HF_PATH + 32];  // "" when none
    const ModelFamily *fam;  // the family config.json (or the tensor names) describe
    ModelConfig m;
    unsigned fields;  // MODEL_* (config.h)
    int tied;  // the family's tied tensor comes from the one it is tied to
    int nfiles;
    StFile *files;
    CkptSource source;  // config.json, tokenizer_config.json, ... beside the weights
};

static int hf_is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

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

static int hf_is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void hf_join(char *out, size_t len, const char *dir, const char *name) { snprintf(out, len, "%s/%s", dir, name); }

static void hf_dirname(char *out, size_t len, const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, len, ".");
    else if (slash == path) snprintf(out, len, "/");
    else snprintf(out, len, "%.*s", (int)(slash - path), path);
}

static const char *hf_basename(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int hf_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

// tokenizer.model, else tokenizer.json, in dir; 0 when neither
static int hf_find_tokenizer(const char *dir, char *out, size_t len) {
    static const char *const names[] = {"tokenizer.model", "tokenizer.json"};
    for (int i = 0; i < 2; i++) {
        hf_join(out, len, dir, names[i]);
        if (hf_is_file(out)) return 1;
    }
    out[0] = 0;
    return 0;
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
    char jerr[600], dir[HF_PATH], shard[2 * HF_PATH];
    JsonValue *v = json_parse_file(index, 64u << 20, jerr, sizeof jerr);
    if (!v) return err_set(err, len, "invalid index: %s", jerr);
    const JsonValue *map = json_get(v, "weight_map");
    int rc = 0;
    if (!map || map->type != JSON_OBJECT) rc = err_set(err, len, "index '%s' has no weight_map object", index);
    hf_dirname(dir, sizeof dir, index);
    // every shard the map names, once, in order of first mention
    for (size_t i = 0; rc == 0 && i < map->len; i++) {
        const JsonValue *e = &map->items[i];
        if (e->type != JSON_STRING) {
            rc = err_set(err, len, "index '%s' maps %s to something other than a file name", index, e->key);
            break;
        }
        if (!hf_inside(e->str)) {
            rc = err_set(err, len, "index '%s' maps %s to '%s', outside the index's folder: shards must be files beside it",
                         index, e->key, e->str);
            break;
        }
        hf_join(shard, sizeof shard, dir, e->str);
        int known = 0;
        for (int f = 0; f < h->nfiles && !known; f++) known = !strcmp(h->files[f].path, shard);
        if (known) continue;
        if (!hf_is_file(shard)) rc = err_set(err, len, "index '%s' names shard '%s', which does not exist", index, e->str);
        else rc = hf_add_file(h, shard, err, len);
    }
    for (size_t i = 0; rc == 0 && i < map->len; i++) {
        const JsonValue *e = &map->items[i];
        hf_join(shard, sizeof shard, dir, e->str);
        int f = 0;
        while (strcmp(h->files[f].path, shard)) f++;
        if (!st_find(&h->files[f], e->key))
            rc = err_set(err, len, "index '%s' maps %s to '%s', which does not hold it", index, e->key, e->str);
    }
    json_free(v);
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
    if (hf_unset(c, key)) return required ? err_set(err, len, "'%s' lacks %s", path, key) : 0;
    if (!json_get_int(c, key, &v) || v <= 0 || v > INT_MAX)
        return err_set(err, len, "'%s': %s must be a positive integer", path, key);
    *out = (int)v;
    return 1;
}

static int hf_positive(const JsonValue *c, const char *path, const char *key, float *out, char *err, size_t len) {
    double v;
    if (hf_unset(c, key)) return 0;
    if (!json_get_number(c, key, &v) || !(v > 0)) return err_set(err, len, "'%s': %s must be a positive number", path, key);
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
        return err_set(err, len, "'%s' sets %s%s%s, which fsdpc does not support (%s only)", path, r->scaling,
                       t ? " with rope_type " : "", t ? t : "", built);
    if (!par || par->type == JSON_NULL) return 0;
    if (par->type != JSON_OBJECT) return err_set(err, len, "'%s': %s must be an object", path, r->parameters);
    if ((t = hf_rope_type(par)) && !hf_rope_known(t, r))
        return err_set(err, len, "'%s' sets %s with rope_type %s, which fsdpc does not implement (%s only)", path,
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
            return err_set(err, len, "'%s': %s of rope_type %s needs %s, a positive number", path, name, r->scaled, keys[i]);
        *dst[i] = (float)v;
    }
    if (!(m->rope_high_freq_factor > m->rope_low_freq_factor))
        return err_set(err, len, "'%s': %s.high_freq_factor must exceed its low_freq_factor", path, name);
    return 1;
}

// The family of config.json c, and the settings of it that the family cannot honour.
static int hf_check_config(const JsonValue *c, const char *path, const ModelFamily **fam, char *err, size_t len) {
    if (c->type != JSON_OBJECT) return err_set(err, len, "'%s' is not a JSON object", path);
    const char *what;
    const ModelFamily *f = *fam = hf_family_of(c, &what);
    if (!f) return err_set(err, len, "'%s' describes a%s %s model; fsdpc loads %s", path, what ? "" : "n", what ? what : "unknown",
                           hf_importable());
    if (hf_check_rope(c, &f->hf_import.rope, path, err, len)) return -1;
    for (const FamilyHfCheck *k = f->hf_import.checks; k && k->key; k++) {
        int b = 0;
        const char *v = k->value ? json_get_string(c, k->key) : NULL;
        if (k->must_be_true) {
            if (json_get_bool(c, k->key, &b) && !b)
                return err_set(err, len, "'%s' sets %s false, but fsdpc's %s %s", path, k->key, f->display, k->why);
            continue;
        }
        if (!k->value && json_get_bool(c, k->key, &b) && b)
            return err_set(err, len, "'%s' sets %s, but fsdpc's %s %s", path, k->key, f->display, k->why);
        if (v && strcmp(v, k->value))
            return err_set(err, len, "'%s' has %s %s; fsdpc's %s %s", path, k->key, v, f->display, k->why);
    }
    return 0;
}

// The model's length as family im spells it: 1 with *out set, 0 when unset, -1 on an error
static int hf_context(const JsonValue *c, const FamilyHfImport *im, const char *path, int *out, char *err, size_t len) {
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
        return err_set(err, len, "'%s' has %s %.60s%s; fsdpc builds %s", path, k->key, v ? v : "(not a string)", v ? "" : "", names);
    }
    if (k->required && hf_unset(c, k->key)) return err_set(err, len, "'%s' lacks %s", path, k->key);
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
            rc = err_set(err, len, "'%s': %s%srope_theta must be a positive number", path, at == par ? im->rope.parameters : "",
                         at == par ? "." : "");
        else m->rope_theta = (float)v, h->fields |= MODEL_ROPE_THETA;
    }
    // partial rotary as newer transformers spell it
    at = rc || !im->rope.partial || !hf_unset(c, im->rope.partial) ? NULL
         : !hf_unset(c, "partial_rotary_factor") ? c : par && !hf_unset(par, "partial_rotary_factor") ? par : NULL;
    if (at) {
        double v;
        if (!json_get_number(at, "partial_rotary_factor", &v) || !(v > 0) || v > 1)
            rc = err_set(err, len, "'%s': %s%spartial_rotary_factor must be a number in (0, 1]", path,
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
        rc = err_set(err, len, "'%s': head_dim %lld is not hidden_size / num_attention_heads, which fsdpc requires", path,
                     (long long)head_dim);
    if (rc == 0 && im->tied) json_get_bool(c, "tie_word_embeddings", &h->tied);
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

static int hf_open_source(HfModel *h, char *err, size_t len) {
    char dir[HF_PATH], weights[2 * HF_PATH], config[2 * HF_PATH];
    if (hf_is_dir(h->path)) {
        snprintf(dir, sizeof dir, "%s", h->path);
        hf_join(weights, sizeof weights, dir, "model.safetensors.index.json");
        int have = hf_present(weights, err, len);
        if (!have) {
            hf_join(weights, sizeof weights, dir, "model.safetensors");
            have = hf_present(weights, err, len);
        }
        if (have < 0) return -1;
        if (!have) return err_set(err, len, "'%s' holds neither model.safetensors nor model.safetensors.index.json", dir);
    } else {
        hf_dirname(dir, sizeof dir, h->path);
        snprintf(weights, sizeof weights, "%s", h->path);
    }
    hf_join(config, sizeof config, dir, "config.json");
    int has_config = hf_present(config, err, len);
    if (has_config < 0 || (has_config && hf_read_config(h, config, err, len) != 0)) return -1;
    if (hf_ends_with(weights, ".json") ? hf_open_index(h, weights, err, len) : hf_add_file(h, weights, err, len)) return -1;
    io_input(weights, "--init_from");
    io_input(config, "--init_from");
    if (!has_config) hf_infer_config(h);
    if (!h->fam) return err_set(err, len, "'%s': this fsdpc reads no Hugging Face model family", h->path);
    h->fields |= MODEL_TYPE;
    hf_find_tokenizer(dir, h->tokenizer, sizeof h->tokenizer);
    const char *e = ckpt_source_from_dir(dir, &h->source);
    return e ? err_set(err, len, "%s", e) : 0;
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
    return f;
}

const char *hf_tokenizer_path(const HfModel *h) { return h->tokenizer[0] ? h->tokenizer : NULL; }

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
        return err_set(msg, len, "tensor %s in '%s' has dtype %s; fsdpc loads F32, BF16 and F16", name, path, t->dtype_name), NULL;
    int ok = t->ndim == spec->ndim;
    for (int d = 0; ok && d < spec->ndim; d++) ok = t->shape[d] == spec->full[d];  // the whole tensor at any tp degree
    if (!ok) {
        char got[160] = "", want[64];
        for (int d = 0; d < t->ndim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), d ? ",%lld" : "%lld", (long long)t->shape[d]);
        snprintf(want, sizeof want, spec->ndim == 1 ? "%d" : "%d,%d", spec->full[0], spec->full[1]);
        return err_set(msg, len, "tensor %s in '%s' has shape [%s] but the model config needs [%s]", name, path, got, want), NULL;
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

void hf_load(const HfModel *h, ShardState *s, int allow_unused) {
    static char msg[2 * HF_PATH];
    const ModelPlan *plan = shard_plan(s);
    const char *err = NULL;
    int file;
    for (int u = 0; u < plan->nunits && !err; u++)
        for (int t = 0; t < plan->units[u].ntensors && !err; t++)
            if (!hf_source_tensor(h, &plan->units[u].t[t], &file, msg, sizeof msg)) err = msg;
    if (!err) err = hf_unused(h, plan, allow_unused, msg, sizeof msg);
    comm_check_all(err);
    if (h->tied)
        log_msg("%s: %s is tied to %s; fsdpc trains an untied copy of it\n", h->path, h->fam->hf_import.tied, h->fam->hf_import.tied_to);
    int on_device = shard_state_on_device(s), *fds = mallocCheck((size_t)h->nfiles * sizeof(int));
    for (int i = 0; i < h->nfiles; i++) fds[i] = -1;
    size_t stage_len = 0;
    for (int u = 0; u < plan->nunits; u++)
        if (shard_unit_len(s, u) > stage_len) stage_len = shard_unit_len(s, u);
    float *stage = on_device ? mallocCheck((stage_len < HF_CHUNK ? stage_len : HF_CHUNK) * sizeof(float)) : NULL;
    for (int u = 0; u < plan->nunits && !err; u++)
        for (int t = 0; t < plan->units[u].ntensors && !err; t++) {
            size_t begin, local, n = shard_tensor_slice(s, u, t, &begin, &local);
            if (!n) continue;
            const StTensor *src = hf_source_tensor(h, &plan->units[u].t[t], &file, msg, sizeof msg);
            const StFile *sf = &h->files[file];
            if (fds[file] < 0 && (fds[file] = open(sf->path, O_RDONLY)) < 0) {
                snprintf(msg, sizeof msg, "cannot open '%s': %s", sf->path, strerror(errno));
                err = msg;
                break;
            }
            float *dst = shard_master(s, u) + local;
            // a tp part is runs of the whole tensor (model_tp_run), each read where it lies
            for (size_t at = 0; at < n && !err;) {
                size_t from = begin + at, run = n - at;
                if (plan->tp > 1 && (run = model_tp_run(&plan->units[u].t[t], plan->tp, plan->tp_rank, begin + at, &from)) > n - at)
                    run = n - at;
                if (!on_device) err = st_read_f32(fds[file], sf, src, from, run, dst + at);
                for (size_t done = 0; on_device && done < run && !err; done += HF_CHUNK) {
                    size_t k = run - done < HF_CHUNK ? run - done : HF_CHUNK;
                    if (!(err = st_read_f32(fds[file], sf, src, from + done, k, stage))) kern_upload(dst + at + done, stage, k * sizeof(float));
                }
                at += run;
            }
        }
    for (int i = 0; i < h->nfiles; i++)
        if (fds[i] >= 0) close(fds[i]);
    free(fds);
    free(stage);
    comm_check_all(err);  // a read error is this rank's alone
    shard_master_changed(s);
    ShardTensorRef bad[3];
    int nbad = shard_nonfinite(s, 1, bad, 3);
    if (nbad) {
        char names[900] = "";
        size_t k = 0;
        for (int i = 0; i < nbad && i < 3 && k < sizeof names; i++)
            k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", plan->units[bad[i].unit].t[bad[i].tensor].name);
        comm_fail_all("'%s' holds NaN or infinite values in %d tensor(s): %s%s: these weights cannot be trained from (fetch or "
                      "export them again)", h->path, nbad, names, nbad > 3 ? ", ..." : "");
    }
}

// ---- export ----

typedef struct {
    char checkpoint[1024], output[1024];
    int dtype;  // StDtype
    uint64_t max_shard;
    int overwrite;  // write into a folder that holds other files (never over the export's own inputs)
} ExportArgs;

static int export_positive(const void *v) { return *(const uint64_t *)v > 0; }

static const CliChoice export_dtypes[] = {{"bf16", ST_BF16}, {"fp16", ST_F16}, {"fp32", ST_F32}, {NULL, 0}};
#define EXPORT_AT(field) .off = offsetof(ExportArgs, field)
#define EXPORT_STR(field) EXPORT_AT(field), .size = sizeof(((ExportArgs *)0)->field)
static const CliFlag export_flags[] = {
    {.name = "checkpoint", .kind = CLI_STR, EXPORT_STR(checkpoint), .arg = "DIR|FILE",
     .help = "the checkpoint, or a folder's newest (required)"},
    {.name = "output", .kind = CLI_STR, EXPORT_STR(output), .arg = "DIR",
     .help = "the Hugging Face folder to write: new, empty or an earlier export (required)"},
    {.name = "dtype", .kind = CLI_ENUM, EXPORT_AT(dtype), .choices = export_dtypes, .help = "the weights' type"},
    {.name = "max_shard_size", .kind = CLI_U64, EXPORT_AT(max_shard), .text = "a positive byte count", .valid = export_positive,
     .arg = "BYTES", .help = "largest safetensors file; larger models are split, with an index"},
    {.name = "overwrite", .kind = CLI_BOOL, EXPORT_AT(overwrite),
     .help = "write into a folder holding other files (replacing only names export writes)"},
};
static const char export_usage[] =
    "usage: fsdpc export --checkpoint DIR|FILE --output DIR [--dtype bf16|fp16|fp32] [--max_shard_size BYTES] [--overwrite]";

static void export_defaults(void *dst) {
    ExportArgs *a = dst;
    a->dtype = ST_BF16;
    a->max_shard = 5000000000ull;  // Hugging Face's default shard size, 5 GB
}

const CliTable export_cli = {.flags = export_flags, .n = sizeof export_flags / sizeof export_flags[0], .command = "export",
                             .bare_hint = "export takes flags only", .strict = 1, .size = sizeof(ExportArgs),
                             .defaults = export_defaults};

// The files an export writes, as <final>.tmp until every one is complete.
typedef struct {
    char dir[1024];
    int n;
    char (*names)[256];  // basenames
} ExportFiles;

static FILE *export_create(ExportFiles *ef, const char *name, const char **err) {
    static char msg[1400];
    char tmp[1310];
    snprintf(ef->names[ef->n], sizeof ef->names[0], "%s", name);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", ef->dir, name);
    unlink(tmp);  // a crashed export's; created afresh, so a link left under the name is never followed
    FILE *f = fopen(tmp, "wbx");
    if (f) ef->n++;
    else *err = (snprintf(msg, sizeof msg, "cannot create '%s': %s", tmp, strerror(errno)), msg);
    return f;
}

// Closes f; an error (short write, full disk) becomes the message.
static const char *export_close(ExportFiles *ef, FILE *f, const char *err) {
    static char msg[1400];
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return err ? err : (snprintf(msg, sizeof msg, "cannot write '%s/%s.tmp': %s", ef->dir, ef->names[ef->n - 1], strerror(errno)), msg);
    return err;
}

static void export_discard(ExportFiles *ef) {
    char tmp[1310];
    for (int i = 0; i < ef->n; i++) {
        snprintf(tmp, sizeof tmp, "%s/%s.tmp", ef->dir, ef->names[i]);
        unlink(tmp);
    }
}

// model.safetensors, or a shard of it (model-00001-of-00003.safetensors); with index, its index too
static int export_is_weights(const char *name, int index) {
    int a, b, n = 0;
    return !strcmp(name, "model.safetensors") || (index && !strcmp(name, "model.safetensors.index.json")) ||
           (sscanf(name, "model-%d-of-%d.safetensors%n", &a, &b, &n) == 2 && !name[n]);
}

// Whether `name` is a file an export writes (or its .tmp while the export runs); tokname: the
// basename the checkpoint's tokenizer is copied under ("" for none).
static int export_name(const char *name, const char *tokname) {
    static const char *const fixed[] = {"config.json", "generation_config.json", "tokenizer.model", "tokenizer.json",
                                        "vocab.json", "merges.txt"};
    char base[256];
    size_t n = strlen(name);
    if (n >= sizeof base) return 0;
    memcpy(base, name, n + 1);
    if (n > 4 && !strcmp(base + n - 4, ".tmp")) base[n - 4] = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        if (!strcmp(base, fixed[i])) return 1;
    for (int i = 0; i < CKPT_SOURCE_FILES; i++)
        if (!strcmp(base, ckpt_source_names[i])) return 1;
    return (tokname[0] && !strcmp(base, tokname)) || export_is_weights(base, 1);
}

// Rank 0, before anything is written. The folder --output names may be new, empty, or an earlier
// export (every entry a regular file under a name export writes, and weights that an export
// wrote, or only the .tmp files of one that stopped); anything else needs --overwrite, which
// still leaves files of other names alone. Even then, no file export replaces or removes may be
// one of its inputs (the checkpoint, the tokenizer files it copies): compared by identity.
static const char *export_check_output(const ExportArgs *a, const char *tokname) {
    static char msg[2800];
    DIR *d = opendir(a->output);
    if (!d) return NULL;  // not there yet, or no folder (which creating it reports)
    char path[1400], other[256] = "", final[256] = "";
    int written = 0;
    const char *e = NULL;
    for (struct dirent *x; !e && (x = readdir(d));) {
        if (!strcmp(x->d_name, ".") || !strcmp(x->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", a->output, x->d_name);
        struct stat st;
        int named = export_name(x->d_name, tokname), regular = lstat(path, &st) == 0 && S_ISREG(st.st_mode);
        if (named) e = io_output_check(path, "--output");
        if (!(named && regular)) {
            if (!other[0]) snprintf(other, sizeof other, "%s", x->d_name);
            continue;
        }
        if (!hf_ends_with(x->d_name, ".tmp") && !final[0]) snprintf(final, sizeof final, "%s", x->d_name);
        written |= export_is_weights(x->d_name, 0) && st_written_by_fsdpc(path);
    }
    closedir(d);
    if (e || a->overwrite) return e;
    if (other[0])
        return snprintf(msg, sizeof msg, "--output '%s' is not empty: it holds '%s', which export does not write; give a new or empty "
                        "folder, or pass --overwrite to export there (files of other names are left alone)", a->output, other), msg;
    if (final[0] && !written)
        return snprintf(msg, sizeof msg, "--output '%s' holds a model that fsdpc export did not write ('%s'; its weights carry no "
                        "fsdpc export metadata); give a new or empty folder, or pass --overwrite to replace it", a->output, final), msg;
    return NULL;
}

// Publishes the .tmp files, config.json last: a directory with a config.json is complete. Weight
// files of an earlier export with another sharding go, so no loader mixes them up.
static const char *export_publish(ExportFiles *ef) {
    static char msg[2700];
    DIR *d = opendir(ef->dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        int ours = 0, weights = export_is_weights(e->d_name, 1);
        for (int i = 0; i < ef->n; i++) ours |= !strcmp(e->d_name, ef->names[i]);
        if (weights && !ours) {
            snprintf(msg, sizeof msg, "%s/%s", ef->dir, e->d_name);
            unlink(msg);
        }
    }
    if (d) closedir(d);
    for (int i = 0; i < ef->n; i++) {  // config.json was created first: renamed last
        int k = (i + 1) % ef->n;
        char final[1300], tmp[1310];
        snprintf(final, sizeof final, "%s/%s", ef->dir, ef->names[k]);
        snprintf(tmp, sizeof tmp, "%s.tmp", final);
        if (rename(tmp, final) != 0) return snprintf(msg, sizeof msg, "cannot rename '%s' to '%s': %s", tmp, final, strerror(errno)), msg;
    }
    return NULL;
}

static void export_float(char *buf, size_t len, float x) {
    for (int p = 6; p <= 9; p++) {  // the shortest text that reads back as the same float
        snprintf(buf, len, "%.*g", p, x);
        if (strtof(buf, NULL) == x) return;
    }
}

// Whether a parsed tokenizer JSON is a byte-level BPE vocabulary (encoder.json / vocab.json): one
// object of piece -> id with no "model" object (a piece may be spelt "model": an id there).
static int export_is_bpe_vocab(const JsonValue *v) {
    const JsonValue *model = json_get(v, "model");
    return v->type == JSON_OBJECT && v->len > 0 && v->items[0].type == JSON_NUMBER && (!model || model->type != JSON_OBJECT);
}

// bos/eos ids of the tokenizer for config.json; -1 when it has none (the byte tokenizer)
static void export_special_ids(const char *tok, int *bos, int *eos) {
    *bos = *eos = -1;
    if (hf_ends_with(tok, ".model")) {  // the SentencePiece models' convention
        *bos = 1, *eos = 2;
        return;
    }
    if (!hf_ends_with(tok, ".json")) return;
    char jerr[600];
    JsonValue *v = json_parse_file(tok, 256u << 20, jerr, sizeof jerr);
    if (!v) return;
    const JsonValue *added = json_get(v, "added_tokens"), *model = json_get(v, "model"), *vocab = model ? json_get(model, "vocab") : NULL;
    if (export_is_bpe_vocab(v)) vocab = v;  // <|endoftext|> is one of its pieces
    static const char *const bos_names[] = {"<s>", "<|endoftext|>"}, *const eos_names[] = {"</s>", "<|endoftext|>"};
    for (int k = 0; k < 2; k++) {
        int *id = k ? eos : bos;
        const char *const *names = k ? eos_names : bos_names;
        for (int j = 0; j < 2 && *id < 0; j++) {
            int64_t x;
            for (size_t i = 0; added && added->type == JSON_ARRAY && i < added->len && *id < 0; i++) {
                const char *c = json_get_string(&added->items[i], "content");
                if (c && !strcmp(c, names[j]) && json_get_int(&added->items[i], "id", &x)) *id = (int)x;
            }
            if (*id < 0 && vocab && json_get_int(vocab, names[j], &x)) *id = (int)x;
        }
    }
    json_free(v);
}

// key's value in the source's config.json (src, or NULL) when that is an id, a list of ids (some
// configs' eos_token_id names every turn's end) or null; else NULL
static const JsonValue *export_src_id(const JsonValue *src, const char *key) {
    const JsonValue *v = json_get(src, key);
    int ok = v && (v->type == JSON_NULL || v->type == JSON_ARRAY || (v->type == JSON_NUMBER && v->is_int && v->integer >= 0));
    for (size_t i = 0; ok && v->type == JSON_ARRAY && i < v->len; i++)
        ok = v->items[i].type == JSON_NUMBER && v->items[i].is_int && v->items[i].integer >= 0;
    return ok ? v : NULL;
}

// v (export_src_id's) when non-NULL, else id (-1: null)
static void export_print_id(FILE *f, const JsonValue *v, int id) {
    if (!v) {
        if (id >= 0) fprintf(f, "%d", id);
        else fprintf(f, "null");
        return;
    }
    if (v->type == JSON_NULL) fprintf(f, "null");
    else if (v->type == JSON_NUMBER) fprintf(f, "%lld", (long long)v->integer);
    for (size_t i = 0; v->type == JSON_ARRAY && i < v->len; i++) fprintf(f, "%s%lld", i ? ", " : "[", (long long)v->items[i].integer);
    if (v->type == JSON_ARRAY) fprintf(f, v->len ? "]" : "[]");
}

// key as the source's config.json gives it (export_src_id), else `id` (-1: null; below that: left out)
static void export_id_from(FILE *f, const JsonValue *src, const char *key, int id, const char *sep) {
    const JsonValue *v = export_src_id(src, key);
    if (!v && id < -1) return;
    fprintf(f, "  \"%s\": ", key);
    export_print_id(f, v, id);
    fprintf(f, "%s\n", sep);
}

static const char *export_dtype_name(StDtype dt) {
    return dt == ST_F32 ? "float32" : dt == ST_BF16 ? "bfloat16" : "float16";
}

// rope_scaling: null for plain RoPE, else the family's scaled rope_type with its parameters
static void export_rope_scaling(FILE *f, const ModelFamily *fam, const ModelConfig *m) {
    if (m->rope_scaling_factor == 1.0f || !fam->hf_import.rope.scaled) {
        fprintf(f, "null");
        return;
    }
    char a[32], b[32], c[32];
    export_float(a, sizeof a, m->rope_scaling_factor);
    export_float(b, sizeof b, m->rope_low_freq_factor);
    export_float(c, sizeof c, m->rope_high_freq_factor);
    fprintf(f, "{\"factor\": %s, \"low_freq_factor\": %s, \"high_freq_factor\": %s, \"original_max_position_embeddings\": %.0f, "
               "\"rope_type\": \"%s\"}", a, b, c, (double)m->rope_original_context, fam->hf_import.rope.scaled);
}

// config.json as the family's descriptor lists it. positions: the model's length, which a
// finetune at a shorter context does not shorten; the token ids come from the source's
// config.json (src) where it had them, else from the tokenizer (bos, eos; -1: none)
static void export_config_json(FILE *f, const ModelFamily *fam, const ModelConfig *m, int positions, const JsonValue *src,
                               StDtype dt, int bos, int eos) {
    int n = 0;
    fprintf(f, "{\n");
    for (const FamilyHfOut *o = fam->hf_export.config; o->key; o++) {
        const char *field = (const char *)m + o->off;
        int id = o->kind == FAMILY_OUT_BOS ? bos : o->kind == FAMILY_OUT_EOS ? eos : -2;
        const JsonValue *v = id != -2 || o->kind == FAMILY_OUT_PAD ? export_src_id(src, o->key) : NULL;
        if (o->kind == FAMILY_OUT_PAD && !v) continue;  // only when the source had one
        int set = (o->kind == FAMILY_OUT_RAW_IF_SET || o->kind == FAMILY_OUT_RAW_UNLESS_SET || o->kind == FAMILY_OUT_INT_IF_SET)
                      ? *(const int *)field != 0 : -1;
        if (set == (o->kind == FAMILY_OUT_RAW_UNLESS_SET)) continue;  // an entry for the setting's other state
        fprintf(f, "%s  \"%s\": ", n++ ? ",\n" : "", o->key);
        char num[32];
        switch (o->kind) {
        case FAMILY_OUT_RAW: fprintf(f, "%s", o->raw); break;
        case FAMILY_OUT_INT: fprintf(f, "%d", *(const int *)field); break;
        case FAMILY_OUT_FLOAT:
            export_float(num, sizeof num, *(const float *)field);
            fprintf(f, "%s", num);
            break;
        case FAMILY_OUT_POSITIONS: fprintf(f, "%d", positions); break;
        case FAMILY_OUT_MLP_WIDTH:
            if (fam->mlp_ratio && m->intermediate_size == fam->mlp_ratio * m->hidden_width) fprintf(f, "null");
            else fprintf(f, "%d", m->intermediate_size);
            break;
        case FAMILY_OUT_BOS: case FAMILY_OUT_EOS: case FAMILY_OUT_PAD: export_print_id(f, v, id); break;
        case FAMILY_OUT_DTYPE: fprintf(f, "\"%s\"", export_dtype_name(dt)); break;
        case FAMILY_OUT_ROPE_SCALING: export_rope_scaling(f, fam, m); break;
        case FAMILY_OUT_BOOL: fprintf(f, *(const int *)field ? "true" : "false"); break;
        case FAMILY_OUT_CHOICE: fprintf(f, "\"%s\"", cli_choice_name(o->choices, *(const int *)field)); break;
        case FAMILY_OUT_RAW_IF_SET: case FAMILY_OUT_RAW_UNLESS_SET: fprintf(f, "%s", o->raw); break;
        case FAMILY_OUT_INT_IF_SET: fprintf(f, "%d", *(const int *)field); break;
        }
    }
    fprintf(f, "\n}\n");
}

static const char *export_bytes(ExportFiles *ef, const char *name, const char *text, size_t len) {
    const char *err = NULL;
    FILE *f = export_create(ef, name, &err);
    if (!f) return err;
    fwrite(text, 1, len, f);
    return export_close(ef, f, NULL);
}

// What the checkpoint recorded of the model source it started from (ckpt_source_names order);
// cfg is its config.json parsed, NULL without one.
typedef struct {
    CkptSource files;
    JsonValue *cfg;
} ExportSource;

// config.json and generation_config.json (the source's own, when recorded)
static const char *export_config(ExportFiles *ef, const ModelConfig *m, int positions, const ExportSource *src, StDtype dt,
                                 int bos, int eos) {
    const char *err = NULL;
    FILE *f = export_create(ef, "config.json", &err);
    if (!f) return err;
    export_config_json(f, family_find(m->model_type), m, positions, src->cfg, dt, bos, eos);
    err = export_close(ef, f, NULL);
    if (err) return err;
    int g = CKPT_SRC_GENERATION_CONFIG;
    if (src->files.text[g]) return export_bytes(ef, ckpt_source_names[g], src->files.text[g], src->files.len[g]);
    if (!(f = export_create(ef, "generation_config.json", &err))) return err;
    fprintf(f, "{\n  \"_from_model_config\": true,\n");
    export_id_from(f, src->cfg, "bos_token_id", bos, ",");
    export_id_from(f, src->cfg, "eos_token_id", eos, "");
    fprintf(f, "}\n");
    return export_close(ef, f, NULL);
}

// The source's tokenizer files byte for byte; without its tokenizer_config.json, a SentencePiece
// tokenizer.model gets one in LlamaTokenizer's terms: its special tokens, <s> before every text and no
// </s> after it, model_max_length the model's length.
static const char *export_tokenizer_files(ExportFiles *ef, const ExportSource *src, const char *tokfile, int positions) {
    const char *err = NULL;
    for (int i = CKPT_SRC_TOKENIZER_CONFIG; i < CKPT_SOURCE_FILES && !err; i++)
        if (src->files.text[i]) err = export_bytes(ef, ckpt_source_names[i], src->files.text[i], src->files.len[i]);
    if (err || src->files.text[CKPT_SRC_TOKENIZER_CONFIG] || !hf_ends_with(tokfile, ".model")) return err;
    FILE *f = export_create(ef, "tokenizer_config.json", &err);
    if (!f) return err;
    fprintf(f,
            "{\n  \"tokenizer_class\": \"LlamaTokenizer\",\n  \"bos_token\": \"<s>\",\n  \"eos_token\": \"</s>\",\n"
            "  \"unk_token\": \"<unk>\",\n  \"pad_token\": null,\n  \"add_bos_token\": true,\n  \"add_eos_token\": false,\n"
            "  \"clean_up_tokenization_spaces\": false,\n  \"model_max_length\": %d\n}\n",
            positions);
    return export_close(ef, f, NULL);
}

// The checkpoint's /source, and the model length its config.json gives (as on import); NULL or
// the error.
static const char *export_source(const char *file, const ModelFamily *fam, ExportSource *src, int *positions) {
    static char msg[2000];
    memset(src, 0, sizeof *src);
    const char *err = ckpt_source_read(file, &src->files);
    const char *text = src->files.text[CKPT_SRC_CONFIG];
    if (err || !text) return err;
    char jerr[300], label[1300];
    snprintf(label, sizeof label, "%s:/source/config.json", file);  // the file and the dataset in it
    src->cfg = json_parse(text, src->files.len[CKPT_SRC_CONFIG], jerr, sizeof jerr);
    if (!src->cfg) return snprintf(msg, sizeof msg, "'%s' is not valid JSON (%s)", label, jerr), msg;
    int n = 0;
    if (hf_context(src->cfg, &fam->hf_import, label, &n, msg, sizeof msg) < 0) return msg;
    if (n > *positions) *positions = n;  // never below the length the checkpoint trained at
    return NULL;
}

// src copied into the export as `name`
static const char *export_copy(ExportFiles *ef, const char *src, const char *name) {
    static char msg[1400];
    FILE *in = fopen(src, "rb");
    if (!in) return snprintf(msg, sizeof msg, "cannot read the checkpoint's tokenizer '%s': %s", src, strerror(errno)), msg;
    const char *err = NULL;
    FILE *out = export_create(ef, name, &err);
    char *buf = mallocCheck(1 << 20);
    for (size_t n; out && (n = fread(buf, 1, 1 << 20, in)) > 0;)
        if (fwrite(buf, 1, n, out) != n) break;
    if (ferror(in)) err = (snprintf(msg, sizeof msg, "cannot read the checkpoint's tokenizer '%s': %s", src, strerror(errno)), msg);
    free(buf);
    fclose(in);
    return out ? export_close(ef, out, err) : err;
}

// The tokenizer a checkpoint names ("byte", a file, a directory or a hub name) as a file; NULL when
// it is the byte tokenizer, else the message when it is gone.
static const char *export_tokenizer(const char *tok, char *file, size_t len) {
    static char msg[HF_PATH + 128];
    file[0] = 0;
    if (!strcmp(tok, "byte")) return NULL;
    char where[HF_PATH];
    if (!hub_resolve(tok, where, sizeof where))
        return snprintf(msg, sizeof msg, "the checkpoint's tokenizer is gone: %s", where), msg;
    if (!hf_is_dir(where)) snprintf(file, len, "%s", where);
    else if (!hf_find_tokenizer(where, file, len))
        return snprintf(msg, sizeof msg, "the checkpoint's tokenizer directory '%s' holds no tokenizer.model or tokenizer.json", where), msg;
    return NULL;
}

// Whether t is stored transposed on export: the family keeps some linear weights as nn.Linear
// does, (out, in), where Hugging Face's model keeps them as Conv1D, (in, out).
static int export_conv1d(const ModelPlan *plan, const TensorSpec *t) {
    const char *prefix = plan->family->hf_export.transposed;
    return prefix && t->ndim == 2 && !strncmp(t->name, prefix, strlen(prefix));
}

// Scratch of one export: fp32 as read, fp32 transposed (Conv1D exports only), converted output.
typedef struct {
    size_t chunk;  // elements per buffer: HF_CHUNK, or one source row if wider
    float *fbuf, *tbuf;
    void *obuf;
} ExportBufs;

// Writes t (rows, cols) as its transpose (cols, rows) from f's position on. Blocks of whole source
// rows are read in order (so the checksum is still checked); each block is a column band of the
// output, written as one segment per output row. Memory stays one chunk whatever the tensor size.
static int export_transposed(FILE *f, const TensorSpec *t, StDtype dt, CkptReader *r, ExportBufs *b, const char **err) {
    size_t rows = (size_t)t->shape[0], cols = (size_t)t->shape[1], es = st_dtype_size(dt), step = b->chunk / cols;
    off_t base = ftello(f);
    if (base < 0) return 1;
    for (size_t r0 = 0; r0 < rows; r0 += step) {
        size_t nr = rows - r0 < step ? rows - r0 : step;
        if ((*err = ckpt_reader_read(r, t, r0 * cols, nr * cols, b->fbuf))) return 0;
        for (size_t c = 0; c < cols; c++)
            for (size_t i = 0; i < nr; i++) b->tbuf[c * nr + i] = b->fbuf[i * cols + c];
        st_from_f32(b->obuf, b->tbuf, nr * cols, dt);
        if (nr == rows) {  // the whole tensor in one block: already in output order
            if (fwrite(b->obuf, es, nr * cols, f) != nr * cols) return 1;
            continue;
        }
        for (size_t c = 0; c < cols; c++)
            if (fseeko(f, base + (off_t)((c * rows + r0) * es), SEEK_SET) != 0 ||
                fwrite((char *)b->obuf + c * nr * es, es, nr, f) != nr)
                return 1;
    }
    return fseeko(f, base + (off_t)(rows * cols * es), SEEK_SET) != 0;  // the next tensor follows
}

// A byte-level BPE tokenizer as OpenAI ships it (encoder.json + vocab.bpe) or as Hugging Face does
// (vocab.json + merges.txt): the vocabulary file `tok` (what checkpoints record) and its merges,
// looked up beside it in the order data/tokenizer.c uses, into merges. 0 when tok is no such file;
// -1 with the message in *err when its merges are gone.
static int export_bpe_tokenizer(const char *tok, char *merges, size_t len, const char **err) {
    static char msg[2 * HF_PATH + 160];
    merges[0] = 0;
    if (!hf_ends_with(tok, ".json")) return 0;
    char jerr[600];
    JsonValue *v = json_parse_file(tok, 256u << 20, jerr, sizeof jerr);
    int bpe = v && export_is_bpe_vocab(v);
    json_free(v);
    if (!bpe) return 0;
    static const char *const openai[] = {"vocab.bpe", "merges.txt"}, *const hf[] = {"merges.txt", "vocab.bpe"};
    const char *const *names = !strcmp(hf_basename(tok), "vocab.json") ? hf : openai;
    char dir[HF_PATH];
    hf_dirname(dir, sizeof dir, tok);
    for (int i = 0; i < 2; i++) {
        hf_join(merges, len, dir, names[i]);
        if (hf_is_file(merges)) return 1;
    }
    snprintf(msg, sizeof msg, "the checkpoint's tokenizer '%s' is a byte-level BPE vocabulary, and its merges ('%s/%s') are gone", tok, dir, names[0]);
    *err = msg;
    return -1;
}

// export_run's outcome when a stop signal ended it (comm_stop_signal, polled per chunk read)
static const char export_stopped[] = "stopped by a signal";

// One safetensors file holding plan tensors [t0, t1) in plan order (flattened over units).
static const char *export_shard(ExportFiles *ef, const char *name, const ModelPlan *plan, const TensorSpec *const *ts, int t0,
                                int t1, StDtype dt, CkptReader *r, ExportBufs *b) {
    const char *err = NULL;
    FILE *f = export_create(ef, name, &err);
    if (!f) return err;
    StEntry *e = mallocCheck((size_t)(t1 - t0) * sizeof(StEntry));
    int(*shapes)[2] = mallocCheck((size_t)(t1 - t0) * sizeof *shapes);
    for (int i = t0; i < t1; i++) {
        int tr = export_conv1d(plan, ts[i]);
        shapes[i - t0][0] = ts[i]->shape[tr], shapes[i - t0][1] = ts[i]->shape[!tr];
        e[i - t0] = (StEntry){ts[i]->name, ts[i]->ndim, shapes[i - t0]};
    }
    int bad = st_write_header(f, e, t1 - t0, dt);
    free(e);
    free(shapes);
    size_t es = st_dtype_size(dt);
    for (int i = t0; i < t1 && !bad && !err; i++) {
        if (comm_stop_signal) {
            err = export_stopped;
            break;
        }
        if (export_conv1d(plan, ts[i])) {
            bad = export_transposed(f, ts[i], dt, r, b, &err);
            continue;
        }
        for (size_t o = 0; o < ts[i]->numel && !bad && !err; o += b->chunk) {
            size_t n = ts[i]->numel - o < b->chunk ? ts[i]->numel - o : b->chunk;
            if (comm_stop_signal) err = export_stopped;
            else if (!(err = ckpt_reader_read(r, ts[i], o, n, b->fbuf))) {
                st_from_f32(b->obuf, b->fbuf, n, dt);
                bad = fwrite(b->obuf, es, n, f) != n;
            }
        }
    }
    return export_close(ef, f, err);
}

static const char *export_weights(ExportFiles *ef, const ModelPlan *plan, StDtype dt, uint64_t max_shard, CkptReader *r) {
    int nt = 0;
    for (int u = 0; u < plan->nunits; u++) nt += plan->units[u].ntensors;
    const TensorSpec **ts = mallocCheck((size_t)nt * sizeof *ts);
    int *shard = mallocCheck((size_t)nt * sizeof(int)), nshards = 0, k = 0;
    uint64_t filled = 0, total = 0;
    for (int u = 0; u < plan->nunits; u++)
        for (int t = 0; t < plan->units[u].ntensors; t++) ts[k++] = &plan->units[u].t[t];
    ExportBufs b = {.chunk = HF_CHUNK};
    int conv1d = 0;
    for (int i = 0; i < nt; i++) {  // greedy in name order, as transformers shards; a tensor never splits
        uint64_t bytes = (uint64_t)ts[i]->numel * st_dtype_size(dt);
        if (!nshards || (filled && filled + bytes > max_shard)) nshards++, filled = 0;
        shard[i] = nshards - 1;
        filled += bytes;
        total += bytes;
        if (export_conv1d(plan, ts[i])) {
            conv1d = 1;
            if ((size_t)ts[i]->shape[1] > b.chunk) b.chunk = (size_t)ts[i]->shape[1];  // a transposed block is whole rows
        }
    }
    b.fbuf = mallocCheck(b.chunk * sizeof(float));
    b.tbuf = conv1d ? mallocCheck(b.chunk * sizeof(float)) : NULL;
    b.obuf = mallocCheck(b.chunk * st_dtype_size(dt));
    const char *err = NULL;
    char name[64];
    for (int s = 0, i = 0; s < nshards && !err; s++) {
        int j = i;
        while (j < nt && shard[j] == s) j++;
        if (nshards == 1) snprintf(name, sizeof name, "model.safetensors");
        else snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, nshards);
        err = export_shard(ef, name, plan, ts, i, j, dt, r, &b);
        i = j;
    }
    FILE *f = NULL;
    if (!err && nshards > 1 && (f = export_create(ef, "model.safetensors.index.json", &err))) {
        fprintf(f, "{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {\n", (unsigned long long)total);
        for (int i = 0; i < nt; i++)
            fprintf(f, "    \"%s\": \"model-%05d-of-%05d.safetensors\"%s\n", ts[i]->name, shard[i] + 1, nshards, i + 1 < nt ? "," : "");
        fprintf(f, "  }\n}\n");
        err = export_close(ef, f, NULL);
    }
    free(b.fbuf);
    free(b.tbuf);
    free(b.obuf);
    free(ts);
    free(shard);
    return err;
}

static const char *export_run(const ExportArgs *a, const char *file, char *summary, size_t slen) {
    static char msg[2400];
    // a family without rotary embeddings stores no rope_theta: the base's stands in, as validation
    // wants one (the others store their own)
    ModelConfig m = {.rope_theta = 10000.0f};
    char tok[1024], tokfile[HF_PATH + 32];
    const char *err = ckpt_read_config(file, &m, tok, sizeof tok);
    if (err) return err;
    const ModelFamily *fam = family_find(m.model_type);
    if (!fam || !fam->hf_export.config) {
        char fams[400] = "";
        for (size_t i = 0, n = 0; i < family_count() && n < sizeof fams; i++)
            if (family_at(i)->hf_export.config)
                n += (size_t)snprintf(fams + n, sizeof fams - n, "%s%s (%s)", n ? ", " : "", family_at(i)->model_type,
                                      family_at(i)->hf_export.architecture);
        return snprintf(msg, sizeof msg, "checkpoint '%s' holds a %s model; export writes %s models", file, m.model_type, fams), msg;
    }
    if ((err = config_validate_model(&m))) return snprintf(msg, sizeof msg, "checkpoint '%s': %s", file, err), msg;
    if ((err = export_tokenizer(tok, tokfile, sizeof tokfile))) return err;
    // a byte-level BPE vocabulary and its merges go under Hugging Face's names, which its tokenizers and fsdpc read
    char merges[HF_PATH + 32];
    int bpe_tok = tokfile[0] ? export_bpe_tokenizer(tokfile, merges, sizeof merges, &err) : 0;
    if (bpe_tok < 0) return err;
    ExportSource src;
    int positions = m.max_context_width;
    if ((err = export_source(file, fam, &src, &positions))) {
        json_free(src.cfg);
        ckpt_source_free(&src.files);
        return err;
    }
    // the inputs no file of the export may replace, then the folder it writes into
    io_input(file, "the checkpoint being exported");
    if (tokfile[0]) io_input(tokfile, "the checkpoint's tokenizer");
    if (bpe_tok) io_input(merges, "the checkpoint's tokenizer merges");
    if ((err = export_check_output(a, !tokfile[0] ? "" : bpe_tok ? "vocab.json" : hf_basename(tokfile)))) {
        json_free(src.cfg);
        ckpt_source_free(&src.files);
        return err;
    }
    const char *bad = comm_folder_problem(a->output, "--output");
    int created = !bad && mkdir(a->output, 0755) == 0;
    if (bad || (!created && (errno != EEXIST || !hf_is_dir(a->output)))) {
        if (!bad) snprintf(msg, sizeof msg, "cannot create output directory '%s': %s", a->output, comm_path_error(a->output, errno));
        else snprintf(msg, sizeof msg, "%s", bad);
        json_free(src.cfg);
        ckpt_source_free(&src.files);
        return msg;
    }
    ModelPlan plan;
    model_plan_build(&plan, &m);
    CkptReader *r = ckpt_reader_open(file, &plan, &err);
    // weights, index, config, generation config, tokenizer and merges, the source's tokenizer files
    ExportFiles ef = {.names = callocCheck((size_t)plan.nunits * MAX_UNIT_TENSORS + 6 + CKPT_SOURCE_FILES, sizeof ef.names[0])};
    snprintf(ef.dir, sizeof ef.dir, "%s", a->output);
    int bos, eos;
    export_special_ids(tokfile, &bos, &eos);
    if (r) err = export_config(&ef, &m, positions, &src, (StDtype)a->dtype, bos, eos);
    if (r && !err && tokfile[0]) err = export_copy(&ef, tokfile, bpe_tok ? "vocab.json" : hf_basename(tokfile));
    if (r && !err && bpe_tok) err = export_copy(&ef, merges, "merges.txt");
    if (r && !err) err = export_tokenizer_files(&ef, &src, tokfile, positions);
    if (r && !err) err = export_weights(&ef, &plan, (StDtype)a->dtype, a->max_shard, r);
    if (r && !err && comm_stop_signal) err = export_stopped;
    if (r && !err) err = export_publish(&ef);
    if (err) {
        export_discard(&ef);
        if (created) rmdir(a->output);  // empty again: no trace of an export that did not happen
    } else {
        snprintf(summary, slen, "Exported %s (%.2fM parameters, %s) to %s\n", file, plan.num_params / 1e6,
                 cli_choice_name(export_dtypes, a->dtype), a->output);
    }
    if (r) ckpt_reader_close(r);
    free(ef.names);
    model_plan_free(&plan);
    json_free(src.cfg);
    ckpt_source_free(&src.files);
    return err;
}

int hf_export_main(void *args) {
    const ExportArgs a = *(const ExportArgs *)args;
    if (!a.checkpoint[0] || !a.output[0]) comm_fail_all("%s", export_usage);
    comm_stop_polled(1);  // the weight loop polls; temporaries go on a stop
    char file[1024], summary[2400] = "";
    if (!ckpt_resolve(a.checkpoint, NULL, NULL, file, sizeof file))
        comm_fail_all(access(a.checkpoint, F_OK) == 0 ? "no checkpoint in '%s'" : "checkpoint '%s' does not exist", a.checkpoint);
    // one writer: the ranks of a parallel file system's clients need not agree on partial pages
    const char *err = comm_info.rank == 0 ? export_run(&a, file, summary, sizeof summary) : NULL;
    int stopped = err == export_stopped ? comm_stop_signal : 0;  // rank 0's outcome is the job's
    comm_check_all(stopped ? NULL : err);
    comm_bcast_bytes(comm_world(), &stopped, sizeof stopped, 0);
    if (stopped) {
        log_msg("Stopped by signal %d (%s) during export: its temporary files were removed, nothing was written under a "
                "final name in '%s'; exiting with status %d\n", stopped, comm_signal_name(stopped), a.output, COMM_EXIT_STOPPED);
        return COMM_EXIT_STOPPED;
    }
    log_msg("%s", summary);
    return 0;
}
