// test_model: whole-model gradient check by finite differences (and context parallelism's chunks of a
// batch), and the dump that
// test/ref/parity.py compares with a PyTorch Llama.
//   build/test_model              gradient check (prints ok/not ok lines)
//   build/test_model --dump DIR [MODEL_TYPE [FLAGS...]]   writes DIR/step_00000000.h5 plus batch, logits, grads,
//                                              step losses (llama_v2 unless MODEL_TYPE: mingpt, gpt_neox)
//   build/test_model --tp-plan                 each family's tensor-parallel parts (model_plan_tp) against
//                                              the whole tensors: places, coverage and initial values
#include <hdf5.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "data/data.h"
#include "kernels/kernels.h"
#include "shard/shard.h"
#include "run/flags.h"
#include "run/train.h"
#include "../../base/err.h"

static int failures = 0;

static void report(int ok, const char *name, const char *detail) {
    printf("%s - %s%s%s\n", ok ? "ok" : "not ok", name, detail[0] ? " " : "", detail);
    failures += !ok;
}

typedef struct {
    Config cfg;
    ModelPlan plan;
    ShardState st;
    Activations acts;
    int32_t *inp, *tgt;
} Setup;

static void setup(Setup *s, int argc, char **argv) {
    flags_parse(&s->cfg, argc, argv);
    char err[1024];
    s->cfg.model.base_bf16 = shard_base_bf16(&s->cfg.shard);
    if (model_plan_build(&s->plan, &s->cfg.model, err, sizeof err)) err_fatal("%s", err);
    ParallelDims pd;
    comm_check_all(parallel_dims_build(&pd, &s->cfg.shard, &s->cfg.model, comm_info.world, comm_info.local_world));
    shard_init(&s->st, &s->plan, &s->cfg.shard, &pd, s->cfg.optim.grad_accum, s->cfg.optim.seed, 1);
    int B = s->cfg.optim.batch_size, T = s->cfg.model.max_context_width;
    model_acts_alloc(&s->acts, &s->plan, B, T, 0, 0, 0);
    s->inp = mallocCheck((size_t)B * T * sizeof(int32_t));
    s->tgt = mallocCheck((size_t)B * T * sizeof(int32_t));
}

static void batch(Setup *s, uint64_t first) {
    Dataset d;
    data_open_synthetic(&d, s->cfg.model.max_context_width, s->cfg.model.vocab_size);
    DataLoader *l = data_loader_new(&d, 7, s->cfg.optim.batch_size, 1);
    DataPlan *plan = data_plan_new(s->cfg.optim.batch_size, d.T);
    DataBatch *b = data_batch_new(s->cfg.optim.batch_size, d.T);
    data_plan_rows(plan, s->cfg.optim.batch_size, first);
    data_loader_next(l, plan, NULL, b, NULL);
    memcpy(s->inp, b->inp, sizeof(int32_t) * s->cfg.optim.batch_size * d.T);
    memcpy(s->tgt, b->tgt, sizeof(int32_t) * s->cfg.optim.batch_size * d.T);
    data_batch_free(b);
    data_plan_free(plan);
    data_loader_free(l);
}

static double mean_loss(Setup *s) {
    double n = (double)s->cfg.optim.batch_size * s->cfg.model.max_context_width;
    model_loss_reset(&s->acts);
    train_micro_step(&s->st, &s->acts, s->inp, s->tgt, NULL, s->cfg.optim.batch_size, 0.0f, 1, 0);
    return model_loss_read(&s->acts) / n;
}

// Gradient of the mean loss over the current batch, reduced into the shards.
// A mixture of experts adds its router losses with their coefficients (weight 1: the mean loss).
static double loss_and_grad(Setup *s) {
    double n = (double)s->cfg.optim.batch_size * s->cfg.model.max_context_width, aux, z;
    shard_zero_grads(&s->st);
    model_loss_reset(&s->acts);
    model_router_train(&s->acts, 1.0);
    train_micro_step(&s->st, &s->acts, s->inp, s->tgt, NULL, s->cfg.optim.batch_size, (float)(1.0 / n), 1, 0);
    shard_grads_finish(&s->st);
    model_router_losses(&s->acts, &aux, &z);
    return model_loss_read(&s->acts) / n + s->cfg.model.router_aux_loss_coef * aux + s->cfg.model.router_z_loss_coef * z;
}

// LoRA's B starts at zero, which zeroes A's gradient and hides the adapters from the logits: moved
// off it so a check sees both factors at work
static void adapters_off_zero(Setup *s) {
    for (int u = 0; u < s->plan.nunits; u++)
        for (int t = 0; s->plan.units[u].adapter && t < s->plan.units[u].ntensors; t++) {
            const TensorSpec *ts = &s->plan.units[u].t[t];
            if (ts->init == INIT_ZEROS)
                for (size_t i = 0; i < ts->numel; i++) shard_master(&s->st, u)[ts->offset + i] = 0.05f * (float)((int)((i * 7) % 11) - 5);
        }
    shard_master_changed(&s->st);
}

// The mean loss in training mode (dropout on, with the masks of model_set_dropout); the gradient
// this leaves in the shards is discarded.
static double train_mode_loss(Setup *s) { return loss_and_grad(s); }

// Central differences on a few elements of every tensor against the analytic gradient. With
// dropout the masks are fixed (same seed and samples), so the loss is a smooth function too.
// lora: LoRA flags (NULL: none); its dropout is the model's
static void gradcheck(const char *model_type, const char *dropout, const char *lora) {
    char *args[] = {"t", "--model_type", (char *)model_type, "--hidden_width", "16", "--num_layers", "2", "--num_heads",
                    "4", "--intermediate_size", "24", "--max_context_width", "8", "--vocab_size", "32", "--batch_size",
                    "2", "--initializer_range", "0.3", "--dropout", (char *)dropout, "--num_key_value_heads",
                    strcmp(model_type, "llama_v2") ? "4" : "2", "--rotary_pct", "0.5"};
    // a mixture of experts in training mode (dropout): its router losses and jitter too
    char *moe[] = {"--router_aux_loss_coef", "0.05", "--router_z_loss_coef", "0.01", "--router_jitter_noise", "0.1"};
    int nargs = sizeof args / sizeof args[0] - (strcmp(model_type, "gpt_neox") ? 2 : 0);
    int nmoe = !strcmp(model_type, "mixtral") && strcmp(dropout, "0") ? 6 : 0, nlora = 0;
    char **all = mallocCheck(sizeof(char *) * (size_t)(nargs + nmoe + 12)), lora_buf[200], *save = NULL;
    memcpy(all, args, sizeof(char *) * (size_t)nargs);
    memcpy(all + nargs, moe, sizeof(char *) * (size_t)nmoe);
    if (lora) {
        snprintf(lora_buf, sizeof lora_buf, "%s --lora_dropout %s", lora, dropout);
        for (char *tok = strtok_r(lora_buf, " ", &save); tok && nlora < 12; tok = strtok_r(NULL, " ", &save))
            all[nargs + nmoe + nlora++] = tok;
    }
    Setup s;
    // GPT-NeoX rotates half of each head (2 of 4 dimensions); the others take no --rotary_pct
    setup(&s, nargs + nmoe + nlora, all);
    free(all);
    adapters_off_zero(&s);
    batch(&s, 0);
    model_set_dropout(&s.acts, s.cfg.model.dropout, 99, 5, 1);
    // norm weights start at 1 and biases at 0: move them off so their gradients are generic
    for (int u = 0; u < s.plan.nunits; u++)
        for (int t = 0; t < s.plan.units[u].ntensors; t++) {
            const TensorSpec *ts = &s.plan.units[u].t[t];
            if (ts->ndim == 1)
                for (size_t i = 0; i < ts->numel; i++) shard_master(&s.st, u)[ts->offset + i] = 1.0f + 0.1f * (float)((i * 7) % 5);
        }
    loss_and_grad(&s);
    float **grad = mallocCheck(s.plan.nunits * sizeof *grad);
    for (int u = 0; u < s.plan.nunits; u++) {
        grad[u] = mallocCheck(shard_unit_len(&s.st, u) * sizeof(float));
        if (!s.plan.units[u].frozen) memcpy(grad[u], shard_grad(&s.st, u), shard_unit_len(&s.st, u) * sizeof(float));
    }
    double (*loss)(Setup *) = s.cfg.model.dropout > 0 ? train_mode_loss : mean_loss;
    const float eps = strcmp(model_type, "mixtral") ? 1e-2f : 2e-3f;  // smaller steps cross fewer routing changes
    for (int u = 0; u < s.plan.nunits; u++)
        for (int t = 0; !s.plan.units[u].frozen && t < s.plan.units[u].ntensors; t++) {  // LoRA: the adapters
            const TensorSpec *ts = &s.plan.units[u].t[t];
            float *p = shard_master(&s.st, u) + ts->offset, *g = grad[u] + ts->offset;
            double max_err = 0, max_g = 0;
            for (int k = 0; k < 6; k++) {
                size_t i = (size_t)(k * 2654435761u) % ts->numel;
                float save = p[i];
                p[i] = save + eps;
                double lp = loss(&s);
                p[i] = save - eps;
                double lm = loss(&s);
                p[i] = save;
                double num = (lp - lm) / (2 * eps);
                max_err = fmax(max_err, fabs(num - g[i]));
                max_g = fmax(max_g, fabs(num));
            }
            char name[160], detail[96];
            snprintf(name, sizeof name, "model gradcheck %s%s%s%s %s", model_type, s.cfg.model.dropout > 0 ? " dropout " : "",
                     s.cfg.model.dropout > 0 ? dropout : "", lora ? " LoRA" : "", ts->name);
            snprintf(detail, sizeof detail, "(max abs err %.2e, max |grad| %.2e)", max_err, max_g);
            report(max_err <= 2e-2 * max_g + 2e-4, name, detail);
        }
    for (int u = 0; u < s.plan.nunits; u++) free(grad[u]);
    free(grad);
}

static void write_dataset(hid_t f, const char *name, hid_t ftype, hid_t mtype, const void *x, int ndim, const hsize_t *dims) {
    hid_t sp = H5Screate_simple(ndim, dims, NULL);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t ds = H5Dcreate2(f, name, ftype, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    if (ds < 0 || H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0) err_fatal("cannot write %s", name);
    H5Dclose(ds);
    H5Pclose(lcpl);
    H5Sclose(sp);
}

static void write_ints(hid_t f, const char *name, const int32_t *x, int ndim, const hsize_t *dims) {
    write_dataset(f, name, H5T_STD_I32LE, H5T_NATIVE_INT32, x, ndim, dims);
}

static void write_floats(hid_t f, const char *name, const float *x, int ndim, const hsize_t *dims) {
    write_dataset(f, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, x, ndim, dims);
}

static void write_attr(hid_t f, const char *name, float v) {
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, H5T_NATIVE_FLOAT, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_FLOAT, &v);
    H5Aclose(a);
    H5Sclose(sp);
}

enum { PARITY_STEPS = 5 };

// more: flags after the model type (--sliding_window 5: Mistral's windowed attention)
static void dump(const char *dir, const char *model_type, int nmore, char **more) {
    int llama = !strcmp(model_type, "llama_v2") || !strcmp(model_type, "mixtral");
    char *base[] = {"t", "--model_type", (char *)model_type, "--hidden_width", "64", "--num_layers", "2", "--num_heads", "8",
                    "--num_key_value_heads", llama ? "2" : "8", "--intermediate_size", "96", "--max_context_width", "16",
                    "--vocab_size", "80", "--batch_size", "3", "--lr", "3e-3", "--grad_clip", "0.5", "--weight_decay", "1.0",
                    "--rotary_pct", "0.5"};
    // GPT-NeoX rotates half of each head (4 of 8 dimensions); the others take no --rotary_pct
    const size_t nbase = sizeof base / sizeof base[0] - (strcmp(model_type, "gpt_neox") ? 2 : 0);
    char **args = mallocCheck(sizeof(char *) * (nbase + (size_t)nmore));
    memcpy(args, base, sizeof(char *) * nbase);
    memcpy(args + nbase, more, sizeof(char *) * (size_t)nmore);
    Setup s;
    setup(&s, (int)nbase + nmore, args);
    free(args);
    adapters_off_zero(&s);
    Config *c = &s.cfg;
    int B = c->optim.batch_size, T = c->model.max_context_width, V = c->model.vocab_size;
    CkptMeta meta = {0};
    CkptSaved saved;
    char err[CKPT_ERR_LEN];
    ckpt_new_run_id(meta.run_id);
    char run[2048];
    config_describe(c, c->data.train_data[0] ? c->data.train_data : "(bundled tinyshakespeare)", run, sizeof run);
    if (ckpt_save(dir, &s.st, &c->model, run, c->data.tokenizer, &meta, NULL, &saved, err, sizeof err)) err_fatal("%s", err);
    hid_t f = H5Fopen(saved.path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) err_fatal("cannot reopen %s", saved.path);
    write_attr(f, "lr", c->optim.lr);
    write_attr(f, "beta1", c->optim.beta1);
    write_attr(f, "beta2", c->optim.beta2);
    write_attr(f, "eps", c->optim.adam_eps);
    write_attr(f, "weight_decay", c->optim.weight_decay);
    write_attr(f, "grad_clip", c->optim.grad_clip);
    write_attr(f, "router_aux_loss_coef", c->model.router_aux_loss_coef);
    write_attr(f, "router_z_loss_coef", c->model.router_z_loss_coef);
    hsize_t bt[2] = {B, T}, btv[3] = {B, T, V}, one[1] = {1};
    batch(&s, 0);
    write_ints(f, "/batch/inputs", s.inp, 2, bt);
    write_ints(f, "/batch/targets", s.tgt, 2, bt);
    mean_loss(&s);
    write_floats(f, "/out/logits", s.acts.logits, 3, btv);
    float loss = (float)loss_and_grad(&s);  // with a mixture of experts' router losses
    write_floats(f, "/out/loss", &loss, 1, one);
    char name[160];
    for (int u = 0; u < s.plan.nunits; u++)
        for (int t = 0; !s.plan.units[u].frozen && t < s.plan.units[u].ntensors; t++) {  // LoRA: the adapters'
            const TensorSpec *ts = &s.plan.units[u].t[t];
            hsize_t dims[2] = {ts->shape[0], ts->shape[1]};
            snprintf(name, sizeof name, "/grad/%s", ts->name);
            write_floats(f, name, shard_grad(&s.st, u) + ts->offset, ts->ndim, dims);
        }
    // training steps at constant lr, each on its own batch
    int32_t *tin = mallocCheck(sizeof(int32_t) * PARITY_STEPS * B * T), *ttg = mallocCheck(sizeof(int32_t) * PARITY_STEPS * B * T);
    float losses[PARITY_STEPS];
    for (int step = 0; step < PARITY_STEPS; step++) {
        batch(&s, 100 + (uint64_t)step * B);
        memcpy(tin + (size_t)step * B * T, s.inp, sizeof(int32_t) * B * T);
        memcpy(ttg + (size_t)step * B * T, s.tgt, sizeof(int32_t) * B * T);
        losses[step] = (float)loss_and_grad(&s);
        ShardStepStats st;
        shard_step_stats(&s.st, s.acts.loss, 0.0, 0.0, &st);
        shard_adamw_step(&s.st, &c->optim, c->optim.lr, st.grad_norm, 1.0);
    }
    hsize_t sbt[3] = {PARITY_STEPS, B, T}, sd[1] = {PARITY_STEPS};
    write_ints(f, "/train/inputs", tin, 3, sbt);
    write_ints(f, "/train/targets", ttg, 3, sbt);
    write_floats(f, "/train/losses", losses, 1, sd);
    H5Fclose(f);
    printf("wrote %s\n", saved.path);
}

// The whole plan of model_type, and tp ranks' parts of it: each split tensor's parts cover it once,
// each whole tensor is every rank's; each part's initial values are the whole tensor's at its
// places; and three places the split must put exactly so (q's heads, o's columns, minGPT's v rows).
static void tp_plan_check(const char *model_type, int tp) {
    char *args[] = {"t", "--model_type", (char *)model_type, "--hidden_width", "64", "--num_layers", "2", "--num_heads", "8",
                    "--num_key_value_heads", strcmp(model_type, "llama_v2") ? "8" : "4", "--intermediate_size", "96",
                    "--max_context_width", "16", "--vocab_size", "80"};
    Config cfg;
    flags_parse(&cfg, sizeof args / sizeof args[0], args);
    ModelPlan whole, *part = callocCheck((size_t)tp, sizeof(ModelPlan));
    char err[1024];
    cfg.model.base_bf16 = shard_base_bf16(&cfg.shard);
    if (model_plan_build(&whole, &cfg.model, err, sizeof err)) err_fatal("%s", err);
    for (int r = 0; r < tp; r++) {
        part[r] = whole;
        part[r].units = mallocCheck((size_t)whole.nunits * sizeof(UnitSpec));
        memcpy(part[r].units, whole.units, (size_t)whole.nunits * sizeof(UnitSpec));
        model_plan_tp(&part[r], tp, r, NULL, 0);
    }
    int ok = 1, placed = 1;
    size_t split_tensors = 0;
    char bad[200] = "";
    for (int u = 0; u < whole.nunits; u++) {
        size_t unit_sum = 0;
        for (int i = 0; i < whole.units[u].ntensors; i++) {
            const TensorSpec *w = &whole.units[u].t[i];
            unsigned char *hits = callocCheck(w->numel, 1);
            float *all = mallocCheck(w->numel * sizeof(float));
            model_init_range(w, 1234, 0.02f, 0, w->numel, all);
            size_t sum = 0;
            for (int r = 0; r < tp; r++) {
                const TensorSpec *t = &part[r].units[u].t[i];
                float *mine = mallocCheck((t->numel ? t->numel : 1) * sizeof(float));
                model_init_part(t, tp, r, 1234, 0.02f, 0, t->numel, mine);
                for (size_t e = 0; e < t->numel;) {
                    size_t full, n = model_tp_run(t, tp, r, e, &full);
                    if (!n || full + n > w->numel) {
                        ok = 0;
                        snprintf(bad, sizeof bad, "%s rank %d: a run of %zu at %zu", t->name, r, n, full);
                        break;
                    }
                    for (size_t k = 0; k < n; k++) {
                        hits[full + k]++;
                        if (mine[e + k] != all[full + k]) ok = 0, snprintf(bad, sizeof bad, "%s rank %d: initial value", t->name, r);
                    }
                    e += n;
                }
                sum += t->numel;
                if (r == 0) unit_sum += t->numel;
                free(mine);
            }
            int want = w->tp_split == TP_WHOLE ? tp : 1;
            split_tensors += w->tp_split != TP_WHOLE;
            for (size_t e = 0; e < w->numel; e++)
                if (hits[e] != want) {
                    ok = 0;
                    snprintf(bad, sizeof bad, "%s: element %zu covered %d times, not %d", w->name, e, hits[e], want);
                    break;
                }
            if (sum != (w->tp_split == TP_WHOLE ? (size_t)tp : 1) * w->numel) ok = 0, snprintf(bad, sizeof bad, "%s: parts sum", w->name);
            free(hits);
            free(all);
        }
        if (unit_sum != part[0].units[u].numel) ok = 0, snprintf(bad, sizeof bad, "unit %d: %zu elements, tensors %zu", u, part[0].units[u].numel, unit_sum);
    }
    // places: rank 1's first element of each kind of split
    int hd = 8, ut, ti;
    size_t full;
    const TensorSpec *t;
    if (!strcmp(model_type, "llama_v2")) {
        model_find_tensor(&part[1], "model.layers.0.self_attn.q_proj.weight", &ut, &ti);
        model_tp_run(&part[1].units[ut].t[ti], tp, 1, 0, &full);
        placed &= full == (size_t)(8 / tp) * hd * 64;  // rank 1's first head is head 8/tp: row (8/tp)*hd
        model_find_tensor(&part[1], "model.layers.0.self_attn.o_proj.weight", &ut, &ti);
        t = &part[1].units[ut].t[ti];
        model_tp_run(t, tp, 1, (size_t)t->shape[1], &full);  // local row 1, column 0
        placed &= full == 64 + (size_t)64 / tp;
    }
    if (!strcmp(model_type, "mingpt")) {
        model_find_tensor(&part[1], "transformer.h.0.attn.c_attn.weight", &ut, &ti);
        t = &part[1].units[ut].t[ti];
        model_tp_run(t, tp, 1, (size_t)(2 * 64 / tp) * 64, &full);  // the first local row of the v block
        placed &= full == (size_t)(2 * 64 + 64 / tp) * 64;
    }
    char name[160];
    snprintf(name, sizeof name, "tp %d: %s parts cover the whole tensors once (whole ones on every rank) and start as they do",
             tp, model_type);
    report(ok && placed && split_tensors > 0, name, bad[0] ? bad : placed ? "" : "a place is wrong");
    for (int r = 0; r < tp; r++) free(part[r].units);
    free(part);
    model_plan_free(&whole);
}

// Initial values are a function of the element index alone: one thread over the whole tensor,
// several over it, and several over pieces of it give the same bits.
static void init_threads_check(void) {
    TensorSpec t = {.name = "model.layers.3.mlp.up_proj.weight", .init = INIT_NORMAL, .init_scale = 1.0f};
    enum { N = 300000 };
    float *one = mallocCheck(N * sizeof(float)), *many = mallocCheck(N * sizeof(float));
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    model_init_range(&t, 99, 0.02f, 0, N, one);
    omp_set_num_threads(3);
    model_init_range(&t, 99, 0.02f, 0, 100001, many);
    model_init_range(&t, 99, 0.02f, 100001, N - 100001, many + 100001);
    omp_set_num_threads(threads);
    report(!memcmp(one, many, N * sizeof(float)), "initial values: 1 thread and 3 threads, whole and in pieces, give the same bits", "");
    free(one);
    free(many);
}

// Context parallelism's load balance: of a batch of whole sequences, rank r of a cp group keeps
// chunks r and 2 cp - 1 - r of 2 cp (inputs and targets), each token with its position in the sequence.
static void cp_layout_check(int cp) {
    char *args[] = {"t", "--hidden_width", "32", "--num_layers", "1", "--num_heads", "2", "--intermediate_size", "32",
                    "--max_context_width", "24", "--vocab_size", "100"};
    Config cfg;
    flags_parse(&cfg, sizeof args / sizeof args[0], args);
    ModelPlan plan;
    char err[1024], bad[160] = "";
    if (model_plan_build(&plan, &cfg.model, err, sizeof err)) err_fatal("%s", err);
    const int B = 2, T = 24, c = T / (2 * cp), Tl = T / cp;
    int32_t inp[2 * 24], tgt[2 * 24], got[3][2 * 24];
    for (int i = 0; i < B * T; i++) inp[i] = i, tgt[i] = i + 50;
    plan.cp = cp;
    for (int r = 0; r < cp; r++) {
        plan.cp_rank = r;
        Activations a;
        model_acts_alloc(&a, &plan, B, T, 0, 0, 0);
        model_load_batch(&a, inp, tgt, NULL, B * T, 0);
        kern_download(got[0], a.tokens, sizeof(int32_t) * B * Tl);
        kern_download(got[1], a.targets, sizeof(int32_t) * B * Tl);
        kern_download(got[2], a.pos, sizeof(int32_t) * B * Tl);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl && !bad[0]; t++) {
                const int p = t < c ? r * c + t : (2 * cp - 1 - r) * c + t - c, n = b * Tl + t;
                if (got[0][n] != inp[b * T + p] || got[1][n] != tgt[b * T + p] || got[2][n] != p)
                    snprintf(bad, sizeof bad, "(rank %d row %d token %d: id %d target %d position %d, want position %d)", r, b, t,
                             got[0][n], got[1][n], got[2][n], p);
            }
        model_acts_free(&a);
    }
    char name[128];
    snprintf(name, sizeof name, "cp %d: rank r keeps chunks r and %d - r of each sequence, with their positions", cp, 2 * cp - 1);
    report(!bad[0], name, bad);
    model_plan_free(&plan);
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    kern_init(0);
    if (argc >= 2 && !strcmp(argv[1], "--tp-plan")) {
        for (int tp = 2; tp <= 4; tp += 2) {
            tp_plan_check("llama_v2", tp);
            tp_plan_check("mingpt", tp);
            tp_plan_check("gpt_neox", tp);
        }
    } else if (argc >= 3 && !strcmp(argv[1], "--dump")) {
        dump(argv[2], argc > 3 ? argv[3] : "llama_v2", argc > 4 ? argc - 4 : 0, argv + 4);
    } else {
        init_threads_check();
        cp_layout_check(2);
        cp_layout_check(3);
        static const char *const families[] = {"llama_v2", "mingpt", "gpt_neox", "mixtral"};
        for (int i = 0; i < 4; i++) {
            gradcheck(families[i], "0", NULL);
            gradcheck(families[i], "0.2", NULL);
        }
        // LoRA: every adaptable layer, with and without dropout on the adapters' input; rsLoRA once
        gradcheck("llama_v2", "0", "--lora_rank 3 --lora_alpha 6 --lora_target_modules all-linear");
        gradcheck("llama_v2", "0.2", "--lora_rank 3 --lora_alpha 6 --lora_target_modules all-linear --use_rslora 1");
        gradcheck("mingpt", "0.2", "--lora_rank 2 --lora_target_modules all-linear");
        gradcheck("gpt_neox", "0.2", "--lora_rank 2 --lora_target_modules all-linear");
        gradcheck("mixtral", "0", "--lora_rank 2 --lora_target_modules q_proj,k_proj,v_proj,o_proj");
        // a mixture of experts' router and experts too (their grouped GEMMs; no adapter dropout there), at a
        // seed whose routing has no near tie that the central differences would cross
        gradcheck("mixtral", "0", "--lora_rank 2 --lora_target_modules all-linear --seed 7");
    }
    comm_finalize();
    return failures ? 1 : 0;
}
