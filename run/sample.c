// sample: the text a run generates from its model (--prompt, and the sample after training).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/err.h"
#include "../base/log.h"
#include "../comm/comm.h"
#include "../comm/io.h"
#include "../data/rows/sft.h"
#include "../kernels/kernels.h"
#include "../model/generate.h"
#include "flags.h"
#include "run.h"

typedef struct {
    const Tokenizer *tok;
    int32_t stop;  // a template's end-of-turn token (ChatML's <|im_end|>), or -1
    int32_t prev;
    char *text;  // the sample when it goes to a log, else NULL (streamed)
    size_t len, cap;
    const char *failed;  // why stdout could not be written, or NULL
} Emitter;

// streams each token's text as it comes (flushed, so a reader sees it at once and a failed write
// stops generation at that token), or keeps it for print_for_log; the end-of-text token ends
// the sample
static int emit_token(int32_t tok, void *ctx) {
    Emitter *e = ctx;
    comm_stop_progress();
    if (tok == tok_eos(e->tok) || tok == e->stop || comm_stop_signal) return 0;
    char buf[256];
    size_t n = tok_piece_bytes(e->tok, e->prev, tok, buf, sizeof buf);
    e->prev = tok;
    if (!e->text) {
        fwrite(buf, 1, n, stdout);
        e->failed = io_write_error(stdout, "standard output");
        return e->failed == NULL;
    }
    if (e->len + n > e->cap) {
        e->cap = 2 * (e->len + n);
        char *grown = realloc(e->text, e->cap);
        if (!grown) err_fatal("out of memory keeping the sample (%zu bytes)", e->cap);
        e->text = grown;
    }
    memcpy(e->text + e->len, buf, n);
    e->len += n;
    return 1;
}

// The sample that ends a training run lands in job logs (slurm-*.out), where raw bytes of an
// undertrained byte model make grep call the file binary: bytes that are not UTF-8 text, and
// control characters other than newline and tab, are written as \xNN.
static void print_for_log(const char *s, size_t n) {
    const uint8_t *b = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        size_t len = tok_utf8_len(b + i, n - i);
        if (len == 1 && (b[i] >= 0x20 || b[i] == '\n' || b[i] == '\t') && b[i] != 0x7f) putchar(b[i]);
        else if (len > 1) fwrite(b + i, 1, len, stdout);
        else printf("\\x%02x", b[i]);
        i += len ? len : 1;
    }
}

// Rank 0: the prompt, then the continuation, on stdout. Returns NULL, or why stdout could not
// be written (generation stops at the first failed write).
static const char *generate_text(Run *r, const ModelPlan *plan, const void *const *P) {
    Config *c = r->cfg;
    // the prompt is encoded after <s> when the tokenizer has one; the byte tokenizer starts an
    // empty prompt from a line break, not printed
    size_t n = 0, cap = 0, len = strlen(c->gen.prompt);
    int32_t *prompt = NULL;
    // a tokenizer without BOS starts an empty prompt from its end-of-text token, the byte tokenizer from '\n'
    int32_t start = tok_bos(r->tok) >= 0 ? tok_bos(r->tok) : len ? -1 : tok_eos(r->tok) >= 0 ? tok_eos(r->tok) : '\n';
    if (start >= 0) {
        prompt = mallocCheck(16 * sizeof(int32_t));
        cap = 16;
        prompt[n++] = start;
    }
    int32_t stop = -1;
    if (flags_given(c, "chat_template")) {  // the prompt as the user's turn, in the format the model was finetuned on
        SftRow row = {0};
        SftMessage m = {.role = "user", .role_len = 4, .content = c->gen.prompt, .content_len = len};
        char err[512];
        comm_check_all(sft_chat_encode(r->tok, (ChatTemplate)c->data.chat_template, &m, 1, 1, &row, err, sizeof err) ? err : NULL);
        n = 0;
        for (size_t i = 0; i < row.len; i++) {
            if (n == cap) prompt = realloc(prompt, (cap = 2 * cap + 16) * sizeof(int32_t));
            if (!prompt) err_fatal("out of memory");
            prompt[n++] = row.ids[i];
        }
        sft_row_free(&row);
        if (c->data.chat_template == CHAT_NONE && n > 1 && prompt[n - 1] == tok_eos(r->tok)) n--;  // the answer follows, not a new text
        if (c->data.chat_template == CHAT_CHATML) {  // ChatML's generation prompt: the assistant's turn opens
            static const char opener[] = "assistant\n";
            if (n + 1 > cap) prompt = realloc(prompt, (cap = n + 16) * sizeof(int32_t));
            if (!prompt) err_fatal("out of memory");
            prompt[n++] = tok_piece_id(r->tok, "<|im_start|>");
            tok_encode(r->tok, opener, sizeof opener - 1, &prompt, &n, &cap);
            stop = tok_piece_id(r->tok, "<|im_end|>");
        }
    } else {
        tok_encode(r->tok, c->gen.prompt, len, &prompt, &n, &cap);
    }
    // a pure generation run writes the exact bytes, and so does a terminal; the sample after
    // training, redirected, is for a log
    int for_log = shard_step(&r->st) > r->start_step && !isatty(STDOUT_FILENO);
    // under tensor parallelism the tp group's other ranks run the same forwards and print nothing
    int speak = comm_info.rank == 0;
    Emitter e = {.tok = r->tok, .stop = stop, .prev = prompt[n - 1], .text = for_log ? mallocCheck(256) : NULL, .cap = 256};
    if (speak && for_log) print_for_log(c->gen.prompt, len);
    else if (speak) fwrite(c->gen.prompt, 1, len, stdout);
    e.failed = speak ? io_write_error(stdout, "standard output") : NULL;
    if ((int)n > c->model.max_context_width)
        log_msg("the prompt's %zu tokens exceed the context; its last %d are used\n", n, c->model.max_context_width);
    int go = !e.failed;
    if (r->dims.tp > 1) comm_bcast_bytes(r->plan.tp_group, &go, sizeof go, 0);  // rank 0's write decides for its tp group
    static char gen_err[512];  // returned: outlives the call
    if (go && model_generate(plan, P, prompt, (int)n, c->gen.num_tokens, c->gen.temperature, c->gen.top_p, (uint64_t)c->optim.seed,
                             emit_token, &e, gen_err, sizeof gen_err))
        e.failed = gen_err;
    if (speak && for_log && !e.failed) print_for_log(e.text, e.len);
    free(e.text);
    if (speak && shard_step(&r->st) > r->start_step && !e.failed) putchar('\n');  // a pure generate run prints the text and nothing else
    if (speak && !e.failed) e.failed = io_write_error(stdout, "standard output");
    free(prompt);
    return e.failed;
}

// Unit u of the run's plan whole, on the device in fp32 (padded), by its group's all-gather.
static float *gather_unit(Run *r, int u) {
    if (shard_unit_packed(&r->st, u)) {  // QLoRA: its bytes gathered and dequantised to fp32
        float *full = kern_alloc((r->plan.units[u].numel + 1) * sizeof(float), KERN_MEM_GATHERED);
        shard_unpack_unit(&r->st, u, full);
        return full;
    }
    float *full = kern_alloc(shard_unit_padded(&r->st, u) * sizeof(float), KERN_MEM_GATHERED);
    comm_all_gather(shard_unit_group(&r->st, u), shard_device_master(&r->st, u), full, shard_unit_len(&r->st, u));
    return full;
}

// Expert parallelism: every ep place's experts' unit of the block at unit u (its dense unit), one
// after another in one buffer: this rank's whole, then an all-gather over the ep group (each place
// holds its own, all of one size).
static float *gather_experts(Run *r, int u) {
    int ep = r->plan.ep, mine = u + 1 + r->plan.ep_rank;
    size_t n = r->plan.units[mine].numel;
    float *own = gather_unit(r, mine), *all = kern_alloc((size_t)ep * n * sizeof(float), KERN_MEM_GATHERED);
    comm_all_gather(r->plan.ep_group, own, all, n);
    kern_free(own);
    return all;
}

const char *sample_generate(Run *r) {
    // every rank helps gather the whole model; rank 0 generates
    const ModelPlan *plan = &r->plan;
    ModelPlan whole;  // expert parallelism: generation computes every expert itself, a block one unit again
    if (r->plan.block_stride > 1) {
        char err[400];
        if (model_plan_build(&whole, &r->plan.cfg, err, sizeof err)) err_fatal("%s", err);
        if (r->plan.tp > 1) model_plan_tp(&whole, r->plan.tp, r->plan.tp_rank, r->plan.tp_group, 0);
        plan = &whole;
    }
    int nu = plan->nunits;
    void **P = mallocCheck((size_t)nu * sizeof *P);
    float **split = plan == &r->plan ? NULL : callocCheck((size_t)r->plan.nunits, sizeof *split);
    for (int u = 0; split && u < r->plan.nunits; u++) {
        int ei = r->plan.units[u].ep_index;
        if (ei < 0) split[u] = gather_unit(r, u);
        else if (ei == 0) split[u] = gather_experts(r, u - 1);  // the others point into it
        else split[u] = split[u - ei] + (size_t)ei * r->plan.units[u].numel;
    }
    for (int u = 0; u < nu; u++) {
        float *full;
        if (!split) {
            full = gather_unit(r, u);
        } else {  // the whole plan's unit, tensor by tensor from the split units
            full = kern_alloc((plan->units[u].numel + 1) * sizeof(float), KERN_MEM_GATHERED);
            for (int t = 0; t < plan->units[u].ntensors; t++) {
                const TensorSpec *ts = &plan->units[u].t[t];
                int su, st;
                if (!model_find_tensor(&r->plan, ts->name, &su, &st)) err_fatal("internal error: %s not in the split plan", ts->name);
                kern_copy(full + ts->offset, split[su] + r->plan.units[su].t[st].offset, ts->numel);
            }
        }
        P[u] = full;
        if (kern_params_bf16()) {  // the kernels' parameter dtype (a GPU under --precision bf16)
            size_t n = plan->units[u].numel;
            P[u] = kern_alloc(n * sizeof(uint16_t), KERN_MEM_GATHERED);
            kern_f32_to_bf16(P[u], full, n);
            kern_free(full);
        }
    }
    for (int u = 0; split && u < r->plan.nunits; u++)
        if (r->plan.units[u].ep_index <= 0) kern_free(split[u]);
    free(split);
    // rank 0 generates, with the rest of its tp group (ranks 0 .. tp-1) under tensor parallelism
    const char *failed = comm_info.rank < r->dims.tp ? generate_text(r, plan, (const void *const *)P) : NULL;
    for (int u = 0; u < nu; u++) kern_free(P[u]);
    free(P);
    if (plan == &whole) model_plan_free(&whole);
    return failed;
}
