// export: a checkpoint's weights, config and tokenizer as a Hugging Face model folder (export.h).
#include "export.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/log.h"
#include "../base/path.h"
#include "../base/clock.h"
#include "../base/err.h"
#include "../base/wlock.h"
#include "../comm/comm.h"
#include "../comm/io.h"
#include "../data/source/hub.h"
#include "../base/json.h"
#include "../base/cli.h"
#include "../model/family.h"
#include "hf.h"
#include "peft.h"

static const char *export_basename(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

// The files an export writes, as <final>.<writer id>.tmp (wlock_tmp_name) until every one is
// complete, in a folder whose writer lock the export holds.
typedef struct {
    const char *dir;
    char id[WLOCK_ID_LEN + 1], *lock;
    int n;
    char (*names)[256];  // basenames
    unsigned long long (*ident)[2];  // each temporary's device and inode, checked after its rename
} ExportFiles;

// dir/name, or its temporary (tmp 1): heap
static char *export_path(const ExportFiles *ef, const char *name, int tmp) {
    char *final = path_join(ef->dir, name);
    if (!tmp) return final;
    char *t = wlock_tmp_name(final, ef->id);
    free(final);
    return t;
}

static FILE *export_create(ExportFiles *ef, const char *name, const char **err) {
    static char msg[16384];
    snprintf(ef->names[ef->n], sizeof ef->names[0], "%s", name);
    char *tmp = export_path(ef, name, 1);
    FILE *f = fopen(tmp, "wbx");  // a new name: a link left under it is never followed
    struct stat st;
    if (f && !ef->n) clock_test_pause("export");
    if (f && fstat(fileno(f), &st) == 0) ef->ident[ef->n][0] = (unsigned long long)st.st_dev, ef->ident[ef->n][1] = (unsigned long long)st.st_ino;
    if (f) ef->n++;
    else *err = err_text(msg, sizeof msg, "cannot create '%s': %s", path_show(tmp), strerror(errno));
    free(tmp);
    return f;
}

// Closes f; an error (short write, full disk) becomes the message.
static const char *export_close(ExportFiles *ef, FILE *f, const char *err) {
    static char msg[16384];
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        if (err) return err;
        int why = errno;
        char *tmp = export_path(ef, ef->names[ef->n - 1], 1);
        err_text(msg, sizeof msg, "cannot write '%s': %s", path_show(tmp), strerror(why));
        free(tmp);
        return msg;
    }
    return err;
}

static void export_discard(ExportFiles *ef) {
    for (int i = 0; i < ef->n; i++) {
        char *tmp = export_path(ef, ef->names[i], 1);
        unlink(tmp);
        free(tmp);
    }
}

// model.safetensors, a shard of it (model-00001-of-00003.safetensors) or PEFT's adapter weights;
// with index, the model's index and the adapter's config too: an export of one kind removes the
// other's (export_publish), so no loader takes a model for an adapter or the reverse
static int export_is_weights(const char *name, int index) {
    int a, b, n = 0;
    return !strcmp(name, "model.safetensors") || !strcmp(name, PEFT_WEIGHTS) ||
           (index && (!strcmp(name, "model.safetensors.index.json") || !strcmp(name, PEFT_CONFIG))) ||
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
    if (wlock_is_tmp(base, NULL)) base[n - 5 - WLOCK_ID_LEN] = 0;
    else if (n > 4 && !strcmp(base + n - 4, ".tmp")) base[n - 4] = 0;  // older versions' temporaries
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
static const char *export_check_output(const ExportOptions *a, const char *tokname) {
    static char msg[2800];
    DIR *d = opendir(a->output);
    if (!d) return NULL;  // not there yet, or no folder (which creating it reports)
    char other[NAME_MAX + 1] = "", final[NAME_MAX + 1] = "";
    int written = 0;
    const char *e = NULL;
    for (struct dirent *x; !e && (x = readdir(d));) {
        // .fsdpc-writer: the writer lock of an export killed before it could remove it (export takes
        // it over); .fsdpc-writer.takeover: the marker of another run taking such a lock over
        if (!strcmp(x->d_name, ".") || !strcmp(x->d_name, "..") || !strcmp(x->d_name, ".fsdpc-writer") ||
            !strcmp(x->d_name, ".fsdpc-writer.takeover"))
            continue;
        char *path = path_join(a->output, x->d_name);
        struct stat st;
        int named = export_name(x->d_name, tokname), regular = lstat(path, &st) == 0 && S_ISREG(st.st_mode);
        if (named) e = io_output_check(path, "--output");
        if (!(named && regular)) {
            if (!other[0]) snprintf(other, sizeof other, "%s", x->d_name);
        } else {
            if (!path_ends_with(x->d_name, ".tmp") && !final[0]) snprintf(final, sizeof final, "%s", x->d_name);
            written |= export_is_weights(x->d_name, 0) && st_written_by_fsdpc(path);
        }
        free(path);
    }
    closedir(d);
    if (e || a->overwrite) return e;
    if (other[0])
        return snprintf(msg, sizeof msg, "--output '%s' is not empty: it holds '%s', which export does not write; give a new or empty "
                        "folder, or pass --overwrite to export there (files of other names are left alone)",
                        path_show(a->output), other), msg;
    if (final[0] && !written)
        return snprintf(msg, sizeof msg, "--output '%s' holds a model that fsdpc export did not write ('%s'; its weights carry no "
                        "fsdpc export metadata); give a new or empty folder, or pass --overwrite to replace it",
                        path_show(a->output), final), msg;
    return NULL;
}

// Publishes the .tmp files, config.json last: a directory with a config.json is complete. Weight
// files of an earlier export with another sharding go, so no loader mixes them up.
static const char *export_publish(ExportFiles *ef) {
    static char msg[16384];
    const char *lost = wlock_lost(ef->lock, ef->id);  // another writer took the folder meanwhile
    if (lost) return lost;
    DIR *d = opendir(ef->dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        int ours = 0, weights = export_is_weights(e->d_name, 1);
        for (int i = 0; i < ef->n; i++) ours |= !strcmp(e->d_name, ef->names[i]);
        if (weights && !ours) {
            char *p = path_join(ef->dir, e->d_name);
            unlink(p);
            free(p);
        }
    }
    if (d) closedir(d);
    for (int i = 0; i < ef->n; i++) {  // config.json was created first: renamed last
        int k = (i + 1) % ef->n;
        char *final = export_path(ef, ef->names[k], 0), *tmp = export_path(ef, ef->names[k], 1);
        const char *e = rename(tmp, final) != 0 ? err_text(msg, sizeof msg, "cannot rename '%s' to '%s': %s", path_show(tmp), final, strerror(errno))
                                                : wlock_check_renamed(final, ef->ident[k][0], ef->ident[k][1]);
        free(final);
        free(tmp);
        for (int j = 0; e && j < i; j++) {  // a failed publish leaves none of this export's files: they are no whole model
            char *done = export_path(ef, ef->names[(j + 1) % ef->n], 0);
            unlink(done);
            free(done);
        }
        if (e) return e;
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
    if (path_ends_with(tok, ".model")) {  // the SentencePiece models' convention
        *bos = 1, *eos = 2;
        return;
    }
    if (!path_ends_with(tok, ".json")) return;
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
    if (err || src->files.text[CKPT_SRC_TOKENIZER_CONFIG] || !path_ends_with(tokfile, ".model")) return err;
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
    FILE *in = path_fopen_read(src);
    if (!in) return snprintf(msg, sizeof msg, "cannot read the checkpoint's tokenizer '%s': %s", src, path_strerror(errno)), msg;
    const char *err = NULL;
    FILE *out = export_create(ef, name, &err);
    char *buf = mallocCheck(1 << 20);
    for (size_t n; out && (n = fread(buf, 1, 1 << 20, in)) > 0;)
        if (fwrite(buf, 1, n, out) != n) break;
    if (ferror(in)) err = err_text(msg, sizeof msg, "cannot read the checkpoint's tokenizer '%s': %s", src, strerror(errno));
    free(buf);
    fclose(in);
    return out ? export_close(ef, out, err) : err;
}

// The tokenizer a checkpoint names ("byte", a file, a directory or a hub name) as a file; NULL when
// it is the byte tokenizer, else the message when it is gone.
static const char *export_tokenizer(const char *tok, char **file) {
    static char msg[HF_PATH + 128];
    *file = NULL;
    if (!strcmp(tok, "byte")) return NULL;
    char where[HF_PATH];
    if (!hub_resolve(tok, where, sizeof where))
        return snprintf(msg, sizeof msg, "the checkpoint's tokenizer is gone: %s", where), msg;
    if (!path_is_dir(where)) *file = path_dup(where);
    else if (!(*file = hf_find_tokenizer(where)))
        return snprintf(msg, sizeof msg, "the checkpoint's tokenizer directory '%s' holds no tokenizer.model or tokenizer.json", where), msg;
    return NULL;
}


// Scratch of one export: fp32 as read, fp32 transposed (Conv1D exports only), converted output;
// and how its tensors are written.
typedef struct {
    size_t chunk;  // elements per buffer: HF_CHUNK, or one source row if wider
    float *fbuf, *tbuf;
    void *obuf;
    const ModelPlan *plan;
    int adapter;  // PEFT's adapter file: the adapter units' tensors, named under PEFT_PREFIX, never transposed
    // merging (a LoRA checkpoint's model): the tensor being written's lora_A and lora_B, read whole
    // (NULL: not adapted), and the adapters' scale
    float *a, *b;
    int rank, in;
    float scale;
    // values --dtype cannot hold (beyond its range, or not finite): the tensors that have them
    int accept_lost;  // written as they convert (infinity) instead of refused
    size_t lost, lost_here;  // in every tensor, in the tensor being written
    int lost_tensors;
    char lost_names[700];
} ExportBufs;

// Counts, into b->lost_here, the values of n converted to dt (in out) that are not finite: a
// finite weight beyond fp16's range (65504) becomes infinity.
static void export_count_lost(ExportBufs *b, const float *src, const void *out, size_t n, StDtype dt) {
    const uint16_t *h = out, mask = dt == ST_F16 ? 0x7c00 : 0x7f80;  // the exponent, all ones: infinity or NaN
    for (size_t i = 0; i < n; i++) b->lost_here += dt == ST_F32 ? !isfinite(src[i]) : (h[i] & mask) == mask;
}

// After tensor `name`: notes it when it lost values.
static void export_note_lost(ExportBufs *b, const char *name) {
    if (!b->lost_here) return;
    size_t len = strlen(b->lost_names);
    if (b->lost_tensors < 4)
        snprintf(b->lost_names + len, sizeof b->lost_names - len, "%s'%s' (%zu)", len ? ", " : "", name, b->lost_here);
    else if (b->lost_tensors == 4)
        snprintf(b->lost_names + len, sizeof b->lost_names - len, ", ...");
    b->lost_tensors++;
    b->lost += b->lost_here;
    b->lost_here = 0;
}

// Elements [begin, begin + count) of t into dst as ckpt_reader_read gives them; with a merge
// (b->a set) the adapted weight W + s B A, its product summed in fp32.
static const char *export_read(CkptReader *r, const TensorSpec *t, size_t begin, size_t count, float *dst, const ExportBufs *b) {
    const char *err = ckpt_reader_read(r, t, begin, count, dst);
    if (err || !b->a) return err;
    size_t in = (size_t)b->in, rank = (size_t)b->rank;
    for (size_t e = 0; e < count; e++) {
        size_t i = (begin + e) / in, j = (begin + e) % in;
        float sum = 0.0f;
        for (size_t k = 0; k < rank; k++) sum += b->b[i * rank + k] * b->a[k * in + j];
        dst[e] += b->scale * sum;
    }
    return NULL;
}

// Whether t is stored transposed on export: the family keeps some linear weights as nn.Linear
// does, (out, in), where Hugging Face's model keeps them as Conv1D, (in, out). PEFT keeps an
// adapter's factors as nn.Linear weights whatever the base layer (fan_in_fan_out).
static int export_conv1d(const ModelPlan *plan, const TensorSpec *t) {
    const char *prefix = plan->family->hf_export.transposed;
    return prefix && t->ndim == 2 && !strncmp(t->name, prefix, strlen(prefix));
}

// Writes t (rows, cols) as its transpose (cols, rows) from f's position on. Blocks of whole source
// rows are read in order (so the checksum is still checked); each block is a column band of the
// output, written as one segment per output row. Memory stays one chunk whatever the tensor size.
static int export_transposed(FILE *f, const TensorSpec *t, StDtype dt, CkptReader *r, ExportBufs *b, const char **err) {
    size_t rows = (size_t)t->shape[0], cols = (size_t)t->shape[1], es = st_dtype_size(dt), step = b->chunk / cols;
    off_t base = ftello(f);
    if (base < 0) return 1;
    for (size_t r0 = 0; r0 < rows; r0 += step) {
        size_t nr = rows - r0 < step ? rows - r0 : step;
        if ((*err = export_read(r, t, r0 * cols, nr * cols, b->fbuf, b))) return 0;
        for (size_t c = 0; c < cols; c++)
            for (size_t i = 0; i < nr; i++) b->tbuf[c * nr + i] = b->fbuf[i * cols + c];
        st_from_f32(b->obuf, b->tbuf, nr * cols, dt);
        export_count_lost(b, b->tbuf, b->obuf, nr * cols, dt);
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
// looked up beside it in the order data/text/tokenizer.c uses, into *merges (heap). 0 when tok is no
// such file; -1 with the message in *err when its merges are gone.
static int export_bpe_tokenizer(const char *tok, char **merges, const char **err) {
    static char msg[2 * HF_PATH + 160];
    *merges = NULL;
    if (!path_ends_with(tok, ".json")) return 0;
    char jerr[600];
    JsonValue *v = json_parse_file(tok, 256u << 20, jerr, sizeof jerr);
    int bpe = v && export_is_bpe_vocab(v);
    json_free(v);
    if (!bpe) return 0;
    static const char *const openai[] = {"vocab.bpe", "merges.txt"}, *const hf[] = {"merges.txt", "vocab.bpe"};
    const char *const *names = !strcmp(export_basename(tok), "vocab.json") ? hf : openai;
    char *dir = path_dirname(tok);
    for (int i = 0; i < 2; i++) {
        *merges = path_join(dir, names[i]);
        if (path_is_file(*merges)) return free(dir), 1;
        free(*merges);
        *merges = NULL;
    }
    snprintf(msg, sizeof msg, "the checkpoint's tokenizer '%s' is a byte-level BPE vocabulary, and its merges ('%s/%s') are gone", tok, path_show(dir), names[0]);
    free(dir);
    *err = msg;
    return -1;
}

const char export_stopped[] = "stopped by a signal";

// The lora_A and lora_B of base tensor t (of unit u) read whole into b for export_read (b->a NULL
// when t has no adapter or the export writes the adapters themselves); NULL or the error.
static const char *export_adapter_of(CkptReader *r, int u, const TensorSpec *t, ExportBufs *b) {
    free(b->a);
    free(b->b);
    b->a = b->b = NULL;
    const ModelPlan *plan = b->plan;
    if (b->adapter || plan->lora0 < 0 || u >= plan->lora0 || t->lora < 0) return NULL;
    const UnitSpec *ad = &plan->units[plan->lora0 + plan->units[u].layer];
    const TensorSpec *A = &ad->t[t->lora], *B = &ad->t[t->lora + 1];
    b->rank = A->shape[0], b->in = A->shape[1];
    b->a = mallocCheck(A->numel * sizeof(float));
    b->b = mallocCheck(B->numel * sizeof(float));
    const char *err = ckpt_reader_read(r, A, 0, A->numel, b->a);
    return err ? err : ckpt_reader_read(r, B, 0, B->numel, b->b);
}

// One safetensors file holding plan tensors [t0, t1) in plan order (flattened over units; unit[i]:
// tensor i's unit).
static const char *export_shard(ExportFiles *ef, const char *name, const TensorSpec *const *ts, const int *unit, int t0, int t1,
                                StDtype dt, CkptReader *r, ExportBufs *b) {
    const ModelPlan *plan = b->plan;
    const char *err = NULL;
    FILE *f = export_create(ef, name, &err);
    if (!f) return err;
    StEntry *e = mallocCheck((size_t)(t1 - t0) * sizeof(StEntry));
    int(*shapes)[2] = mallocCheck((size_t)(t1 - t0) * sizeof *shapes);
    char(*names)[sizeof PEFT_PREFIX + sizeof ts[0]->name] = mallocCheck((size_t)(t1 - t0) * sizeof *names);
    for (int i = t0; i < t1; i++) {
        int tr = !b->adapter && export_conv1d(plan, ts[i]);
        shapes[i - t0][0] = ts[i]->shape[tr], shapes[i - t0][1] = ts[i]->shape[!tr];
        snprintf(names[i - t0], sizeof names[0], "%s%s", b->adapter ? PEFT_PREFIX : "", ts[i]->name);
        e[i - t0] = (StEntry){names[i - t0], ts[i]->ndim, shapes[i - t0]};
    }
    int bad = st_write_header(f, e, t1 - t0, dt);
    free(e);
    free(shapes);
    free(names);
    size_t es = st_dtype_size(dt);
    for (int i = t0; i < t1 && !bad && !err; i++) {
        if (comm_stop_signal) {
            err = export_stopped;
            break;
        }
        if ((err = export_adapter_of(r, unit[i], ts[i], b))) break;
        if (!b->adapter && export_conv1d(plan, ts[i])) {
            bad = export_transposed(f, ts[i], dt, r, b, &err);
        } else {
            for (size_t o = 0; o < ts[i]->numel && !bad && !err; o += b->chunk) {
                size_t n = ts[i]->numel - o < b->chunk ? ts[i]->numel - o : b->chunk;
                if (comm_stop_signal) err = export_stopped;
                else if (!(err = export_read(r, ts[i], o, n, b->fbuf, b))) {
                    st_from_f32(b->obuf, b->fbuf, n, dt);
                    export_count_lost(b, b->fbuf, b->obuf, n, dt);
                    bad = fwrite(b->obuf, es, n, f) != n;
                }
            }
        }
        export_note_lost(b, ts[i]->name);
    }
    return export_close(ef, f, err);
}

// The weights: the model's tensors (a LoRA checkpoint's adapters merged into them), or with
// adapter PEFT's adapter file of the adapter units' tensors. *n: the tensors written.
static const char *export_weights(ExportFiles *ef, const ModelPlan *plan, int adapter, StDtype dt, uint64_t max_shard,
                                  int accept_lost, CkptReader *r, size_t *params) {
    static char msg[1000];
    int u0 = 0, u1 = plan->lora0 >= 0 ? plan->lora0 : plan->nunits, nt = 0;
    if (adapter) u0 = plan->lora0, u1 = plan->nunits;
    for (int u = u0; u < u1; u++) nt += plan->units[u].ntensors;
    const TensorSpec **ts = mallocCheck((size_t)nt * sizeof *ts);
    int *shard = mallocCheck((size_t)nt * sizeof(int)), *unit = mallocCheck((size_t)nt * sizeof(int)), nshards = 0, k = 0;
    uint64_t filled = 0, total = 0;
    for (int u = u0; u < u1; u++)
        for (int t = 0; t < plan->units[u].ntensors; t++) unit[k] = u, ts[k++] = &plan->units[u].t[t];
    ExportBufs b = {.chunk = HF_CHUNK, .plan = plan, .adapter = adapter, .scale = plan->lora_scale, .accept_lost = accept_lost};
    int conv1d = 0;
    *params = 0;
    for (int i = 0; i < nt; i++) {  // greedy in name order, as transformers shards; a tensor never splits
        uint64_t bytes = (uint64_t)ts[i]->numel * st_dtype_size(dt);
        // PEFT reads one adapter file
        if (!nshards || (filled && filled + bytes > max_shard && !adapter)) nshards++, filled = 0;
        shard[i] = nshards - 1;
        filled += bytes;
        total += bytes;
        *params += ts[i]->numel;
        if (!adapter && export_conv1d(plan, ts[i])) {
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
        if (adapter) snprintf(name, sizeof name, "%s", PEFT_WEIGHTS);
        else if (nshards == 1) snprintf(name, sizeof name, "model.safetensors");
        else snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, nshards);
        err = export_shard(ef, name, ts, unit, i, j, dt, r, &b);
        i = j;
    }
    if (!err && b.lost && !b.accept_lost)  // before any file is published: the temporaries go
        err = err_text(msg, sizeof msg, "--dtype %s cannot hold %zu value(s) of %d tensor(s), which would be written as "
                       "infinity or NaN: %s; export with --dtype %s, or pass --accept_lossy to write them as they convert",
                       dt == ST_F16 ? "fp16" : dt == ST_BF16 ? "bf16" : "fp32", b.lost, b.lost_tensors, b.lost_names,
                       dt == ST_F16 ? "bf16 or fp32" : "fp32");
    if (!err && b.lost)
        log_msg("warning: --accept_lossy: %zu value(s) of %d tensor(s) written as infinity or NaN: %s\n", b.lost, b.lost_tensors,
                b.lost_names);
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
    free(b.a);
    free(b.b);
    free(ts);
    free(shard);
    free(unit);
    return err;
}

// s as a JSON string, quotes included
static void export_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

// The model the adapters of checkpoint file were trained on, as PEFT's base_model_name_or_path:
// the source the first run of its lineage to hold adapters was initialised from (--init_from: a
// Hugging Face model or a checkpoint without adapters), found by following each checkpoint's
// parent. "" when that run started from random weights, or when an ancestor is gone (pruned,
// moved) and the chain cannot be followed.
static void export_base_model(const char *file, char *out, size_t len) {
    char cur[PATH_MAX];
    CkptMeta *meta = mallocCheck(sizeof *meta);
    snprintf(cur, sizeof cur, "%s", file);
    out[0] = 0;
    for (int hops = 0; hops <= CKPT_LINEAGE_MAX; hops++) {
        ModelConfig m = {.rope_theta = 10000.0f};
        char tok[PATH_MAX];
        if (ckpt_read_meta(cur, meta) || !meta->parent[0]) break;
        if (!path_ends_with(meta->parent, ".h5")) {  // a Hugging Face source
            peft_base_name(meta->parent, out, len);
            break;
        }
        // a checkpoint: the base when it holds no adapters, else one more run of the adapters
        if (ckpt_read_config(meta->parent, &m, tok, sizeof tok)) break;
        if (!m.lora_rank) {
            snprintf(out, len, "%s", meta->parent);
            break;
        }
        snprintf(cur, sizeof cur, "%s", meta->parent);
    }
    free(meta);
}

// PEFT's adapter_config.json for plan's adapters, as PEFT writes a LoRA's (inference_mode: saved
// for use; base: base_model_name_or_path, "" for null)
static const char *export_adapter_config(ExportFiles *ef, const ModelPlan *plan, const char *base) {
    const ModelConfig *m = &plan->cfg;
    const char *err = NULL;
    FILE *f = export_create(ef, PEFT_CONFIG, &err);
    if (!f) return err;
    char targets[512], alpha[32], drop[32];
    peft_targets(plan, targets, sizeof targets);
    int fan_in_fan_out = 0;  // the family keeps the adapted layers as Conv1D, transposed
    for (int u = 0; u < plan->lora0; u++)
        for (int t = 0; t < plan->units[u].ntensors; t++)
            fan_in_fan_out |= plan->units[u].t[t].lora >= 0 && export_conv1d(plan, &plan->units[u].t[t]);
    export_float(alpha, sizeof alpha, m->lora_alpha);
    export_float(drop, sizeof drop, m->lora_dropout);
    fprintf(f, "{\n  \"base_model_name_or_path\": ");
    if (base[0]) export_json_string(f, base);
    else fprintf(f, "null");
    fprintf(f, ",\n  \"bias\": \"none\",\n  \"fan_in_fan_out\": %s,\n  \"inference_mode\": true,\n  \"init_lora_weights\": true,\n"
               "  \"lora_alpha\": %s,\n  \"lora_dropout\": %s,\n  \"modules_to_save\": null,\n  \"peft_type\": \"LORA\",\n"
               "  \"r\": %d,\n  \"revision\": null,\n  \"target_modules\": [",
            fan_in_fan_out ? "true" : "false", alpha, drop, m->lora_rank);
    for (const char *p = targets; *p;) {
        size_t n = strcspn(p, ",");
        fprintf(f, "%s\"%.*s\"", p == targets ? "" : ", ", (int)n, p);
        p += n + (p[n] == ',');
    }
    fprintf(f, "],\n  \"task_type\": \"CAUSAL_LM\",\n  \"use_rslora\": %s\n}\n", m->use_rslora ? "true" : "false");
    return export_close(ef, f, NULL);
}

static const char *export_model(const char *file, const ExportOptions *a, ExportResult *res, const ModelConfig *mc,
                                const ModelFamily *fam, const char *tokfile, const char *merges);

const char *export_checkpoint(const char *file, const ExportOptions *a, ExportResult *res) {
    static char msg[2400];
    // a family without rotary embeddings stores no rope_theta: the base's stands in, as validation
    // wants one (the others store their own)
    ModelConfig m = {.rope_theta = 10000.0f};
    char tok[PATH_MAX];
    const char *err = ckpt_read_config(file, &m, tok, sizeof tok);
    if (err) return err;
    const ModelFamily *fam = family_find(m.model_type);
    if (!fam || !fam->hf_export.config) {
        char fams[400] = "";
        for (size_t i = 0, n = 0; i < family_count() && n < sizeof fams; i++)
            if (family_at(i)->hf_export.config)
                n += (size_t)snprintf(fams + n, sizeof fams - n, "%s%s (%s)", n ? ", " : "", family_at(i)->model_type,
                                      family_at(i)->hf_export.architecture);
        return snprintf(msg, sizeof msg, "checkpoint '%s' holds a %s model; export writes %s models", path_show(file), m.model_type, fams), msg;
    }
    if ((err = config_validate_model(&m))) return snprintf(msg, sizeof msg, "checkpoint '%s': %s", path_show(file), err), msg;
    if (a->adapter && !m.lora_rank)
        return snprintf(msg, sizeof msg, "export --adapter: checkpoint '%s' holds no LoRA adapters (it was trained without "
                        "--lora_rank): export the model without --adapter", path_show(file)), msg;
    char *tokfile, *merges = NULL;
    if ((err = export_tokenizer(tok, &tokfile))) return err;
    // a byte-level BPE vocabulary and its merges go under Hugging Face's names, which its tokenizers and fsdpc read
    int bpe_tok = tokfile ? export_bpe_tokenizer(tokfile, &merges, &err) : 0;
    if (bpe_tok >= 0) err = export_model(file, a, res, &m, fam, tokfile ? tokfile : "", bpe_tok ? merges : NULL);
    free(tokfile);
    free(merges);
    return err;
}

// export_checkpoint's export of checkpoint file, its model m of family fam, once the checkpoint's
// tokenizer file (tokfile, "" for none) and a byte-level BPE's merges (else NULL) are found
static const char *export_model(const char *file, const ExportOptions *a, ExportResult *res, const ModelConfig *mc,
                                const ModelFamily *fam, const char *tokfile, const char *merges) {
    static char msg[2400];
    ModelConfig m = *mc;
    int bpe_tok = merges != NULL;
    const char *err;
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
    const char *tokname = a->adapter || !tokfile[0] ? "" : bpe_tok ? "vocab.json" : export_basename(tokfile);
    if ((err = export_check_output(a, tokname))) {
        json_free(src.cfg);
        ckpt_source_free(&src.files);
        return err;
    }
    const char *bad = comm_folder_problem(a->output, "--output");
    int created = !bad && mkdir(a->output, 0755) == 0;
    if (bad || (!created && (errno != EEXIST || !path_is_dir(a->output)))) {
        if (!bad) snprintf(msg, sizeof msg, "cannot create output directory '%s': %s", path_show(a->output), comm_path_error(a->output, errno));
        else snprintf(msg, sizeof msg, "%s", bad);
        json_free(src.cfg);
        ckpt_source_free(&src.files);
        return msg;
    }
    ModelPlan plan;
    if (model_plan_build(&plan, &m, msg, sizeof msg)) {  // the checkpoint's model cannot be built
        if (created) rmdir(a->output);
        json_free(src.cfg);
        ckpt_source_free(&src.files);
        return msg;
    }
    ExportFiles ef = {.dir = a->output};
    wlock_new_id(ef.id);
    if (!(ef.lock = io_lock_output(a->output, 1, ef.id, "--output", "an export", &err))) {
        if (created) rmdir(a->output);
        model_plan_free(&plan);
        json_free(src.cfg);
        ckpt_source_free(&src.files);
        return err;
    }
    // temporaries of another writer: what a killed export left, now that this one holds the folder
    DIR *d = opendir(a->output);
    for (struct dirent *x; d && (x = readdir(d));)
        if (wlock_is_tmp(x->d_name, NULL) && export_name(x->d_name, tokname)) {
            char *left = export_path(&ef, x->d_name, 0);
            if (unlink(left) == 0) log_msg("Removed %s, left by an interrupted export\n", left);
            free(left);
        }
    if (d) closedir(d);
    CkptReader *r = ckpt_reader_open(file, &plan, &err);
    if (r && m.quantize_base) log_msg("%s: its QLoRA base is stored in NF4: the export writes those weights dequantised\n", file);
    // weights, index, config, generation config, tokenizer and merges, the source's tokenizer files
    size_t nfiles = (size_t)plan.nunits * MAX_UNIT_TENSORS + 6 + CKPT_SOURCE_FILES;
    ef.names = callocCheck(nfiles, sizeof ef.names[0]);
    ef.ident = callocCheck(nfiles, sizeof ef.ident[0]);
    int bos, eos;
    export_special_ids(tokfile, &bos, &eos);
    char base[PATH_MAX];
    if (r && a->adapter) {  // PEFT's two files; the model, its config and tokenizer are the base's
        export_base_model(file, base, sizeof base);
        err = export_adapter_config(&ef, &plan, base);
    } else if (r) {
        err = export_config(&ef, &m, positions, &src, a->dtype, bos, eos);
        if (!err && tokfile[0]) err = export_copy(&ef, tokfile, tokname);
        if (!err && bpe_tok) err = export_copy(&ef, merges, "merges.txt");
        if (!err) err = export_tokenizer_files(&ef, &src, tokfile, positions);
    }
    memset(res, 0, sizeof *res);
    if (r && !err) err = export_weights(&ef, &plan, a->adapter, a->dtype, a->max_shard, a->accept_lossy, r, &res->params);
    if (r && !err && comm_stop_signal) err = export_stopped;
    if (r && !err) err = export_publish(&ef);
    if (err) export_discard(&ef);
    io_unlock_output(ef.lock, ef.id);
    if (err) {
        if (created) rmdir(a->output);  // empty again: no trace of an export that did not happen
    } else if (!a->adapter && plan.lora0 >= 0) {
        for (int u = 0; u < plan.lora0; u++)
            for (int t = 0; t < plan.units[u].ntensors; t++) res->merged += plan.units[u].t[t].lora >= 0;
        res->lora_rank = m.lora_rank, res->lora_alpha = m.lora_alpha, res->lora_scale = plan.lora_scale;
    }
    if (r) ckpt_reader_close(r);
    free(ef.names);
    free(ef.ident);
    model_plan_free(&plan);
    json_free(src.cfg);
    ckpt_source_free(&src.files);
    return err;
}
