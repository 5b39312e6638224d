// config: the model's configuration: presets, the checks of a model's shape, the sizes derived
// from it, and the names of --hidden_act (run/flags.c fills the whole Config from the flags).
#include "config.h"

#include <stdio.h>

#include "../base/err.h"
#include "../base/checked.h"
#include "../base/cli.h"
#include "family.h"

int config_preset(ModelConfig *m, const char *name) {
    const ModelFamily *fam;
    const FamilyPreset *p = family_preset(name, &fam);
    if (!p) return 0;
    snprintf(m->model_name, sizeof m->model_name, "%s", name);
    snprintf(m->model_type, sizeof m->model_type, "%s", fam->model_type);
    m->hidden_width = p->hidden_width;
    m->num_layers = p->num_layers;
    m->num_heads = p->num_heads;
    m->num_key_value_heads = p->num_key_value_heads;
    m->intermediate_size = p->intermediate_size;
    m->max_context_width = p->max_context_width;
    m->vocab_size = p->vocab_size;
    m->rope_theta = p->rope_theta ? p->rope_theta : 10000.0f;
    // Llama-3.1's scaling parameters, stretched by the preset's factor
    m->rope_scaling_factor = p->rope_scaling_factor ? p->rope_scaling_factor : 1.0f;
    m->rope_low_freq_factor = 1.0f;
    m->rope_high_freq_factor = 4.0f;
    m->rope_original_context = 8192.0f;
    m->tie_word_embeddings = p->tie_word_embeddings;
    m->sliding_window = p->sliding_window;
    m->hidden_act = p->hidden_act;
    m->num_experts = p->num_experts;
    m->num_experts_per_tok = p->num_experts_per_tok;
    return 1;
}

int config_head_dim(const ModelConfig *m) { return m->hidden_width / m->num_heads; }

int config_rotary_dims(const ModelConfig *m) {
    const ModelFamily *fam = family_find(m->model_type);
    int hd = config_head_dim(m);
    if (!fam || !fam->rotary_pct) return hd;
    // a share outside (0, 1] (from a damaged checkpoint, say) rotates nothing: validation names it
    return m->rotary_pct > 0.0f && m->rotary_pct <= 1.0f ? (int)((double)hd * (double)m->rotary_pct) : 0;
}

// --quantize_base's names
const CliChoice config_quantize_names[] = {{"none", MODEL_QUANT_NONE}, {"nf4", MODEL_QUANT_NF4}, {NULL, 0}};
// --hidden_act's names: the first entry of a value is its name, later ones other spellings
const CliChoice config_hidden_acts[] = {{"gelu", MODEL_ACT_GELU}, {"gelu_new", MODEL_ACT_GELU_NEW}, {"gelu_fast", MODEL_ACT_GELU_FAST},
                                        {"gelu_pytorch_tanh", MODEL_ACT_GELU_PYTORCH_TANH}, {NULL, 0}};

const char *config_validate_model(const ModelConfig *m) {
    static char msg[512];
    if (m->hidden_width <= 0 || m->num_layers <= 0 || m->num_heads <= 0 || m->num_key_value_heads <= 0 ||
        m->intermediate_size <= 0 || m->max_context_width <= 0 || m->vocab_size <= 0)
        return "model sizes (--hidden_width, --num_layers, --num_heads, --num_key_value_heads, --intermediate_size, "
               "--max_context_width, --vocab_size) must all be positive";
    if (m->hidden_width % m->num_heads) {
        return err_text(msg, sizeof msg, "--num_heads %d does not divide --hidden_width %d", m->num_heads, m->hidden_width);
    }
    if (m->num_heads % m->num_key_value_heads) {
        return err_text(msg, sizeof msg, "--num_key_value_heads %d does not divide --num_heads %d", m->num_key_value_heads, m->num_heads);
    }
    const ModelFamily *fam = family_find(m->model_type);
    if (!fam) {
        return err_text(msg, sizeof msg, "model_type '%.40s' is not a family this fsdpc implements (%s)", m->model_type, family_names(", ", 0));
    }
    if (!fam->gqa && m->num_key_value_heads != m->num_heads) {
        return err_text(msg, sizeof msg, "--num_key_value_heads %d: model_type %s has no grouped-query attention (it must equal --num_heads %d)",
                 m->num_key_value_heads, m->model_type, m->num_heads);
    }
    if (fam->rope && config_head_dim(m) % 2) {
        return err_text(msg, sizeof msg, "head dimension %d (hidden_width/num_heads) must be even for RoPE", config_head_dim(m));
    }
    if (m->rope_theta <= 0 || m->norm_eps <= 0) return "--rope_theta and the norm epsilon must be positive";
    if (fam->rotary_pct && (!(m->rotary_pct > 0.0f && m->rotary_pct <= 1.0f) || config_rotary_dims(m) < 2 || config_rotary_dims(m) % 2)) {
        return err_text(msg, sizeof msg, "--rotary_pct %g of head dimension %d rotates %d dimensions; it must be in (0, 1] and rotate an "
                 "even number, at least 2", m->rotary_pct, config_head_dim(m), config_rotary_dims(m));
    }
    if (m->tie_word_embeddings && !fam->tie_option) {
        return err_text(msg, sizeof msg, "--tie_word_embeddings: model_type %s has no such option", m->model_type);
    }
    if (fam->rope && fam->hf_import.rope.scaled && m->rope_scaling_factor != 1.0f &&
        !(m->rope_scaling_factor > 0 && m->rope_low_freq_factor > 0 && m->rope_high_freq_factor > m->rope_low_freq_factor &&
          m->rope_original_context >= 1 && m->rope_scaling_factor < 1e30f && m->rope_high_freq_factor < 1e30f &&
          m->rope_original_context < 1e30f))
        return "RoPE scaling needs a positive factor, 0 < low_freq_factor < high_freq_factor and an original context of at least 1";
    if (m->hidden_act != MODEL_ACT_GELU && !fam->hidden_act_option) {
        return err_text(msg, sizeof msg, "--hidden_act %s: model_type %s has a fixed activation", cli_choice_name(config_hidden_acts, m->hidden_act),
                 m->model_type);
    }
    if (m->sliding_window < 0) return "--sliding_window must be >= 0 (0: the whole context)";
    if (m->sliding_window && !fam->sliding_window) {
        return err_text(msg, sizeof msg, "--sliding_window %d: model_type %s has no sliding-window attention (0: the whole context)",
                 m->sliding_window, m->model_type);
    }
    if (fam->experts_option && (m->num_experts < 1 || m->num_experts > CONFIG_MAX_EXPERTS)) {
        return err_text(msg, sizeof msg, "--num_experts %d: model_type %s needs 1 to %d experts", m->num_experts, m->model_type,
                        CONFIG_MAX_EXPERTS);
    }
    if (fam->experts_option && (m->num_experts_per_tok < 1 || m->num_experts_per_tok > m->num_experts)) {
        return err_text(msg, sizeof msg, "--num_experts_per_tok %d: each token goes to 1 to --num_experts %d experts",
                        m->num_experts_per_tok, m->num_experts);
    }
    if (!fam->experts_option && m->num_experts) {
        return err_text(msg, sizeof msg, "--num_experts %d: model_type %s has a dense MLP (mixtral has experts)", m->num_experts,
                        m->model_type);
    }
    if (!(m->router_aux_loss_coef >= 0.0f && m->router_aux_loss_coef < 1e30f && m->router_z_loss_coef >= 0.0f &&
          m->router_z_loss_coef < 1e30f))
        return "--router_aux_loss_coef and --router_z_loss_coef must be finite and >= 0";
    if (!(m->router_jitter_noise >= 0.0f && m->router_jitter_noise < 1.0f))
        return "--router_jitter_noise must be in [0, 1): the router's input is scaled by U(1 - j, 1 + j)";
    // the fused q/k/v and gate/up projections are one GEMM each, whose dimensions are ints
    uint64_t rows;
    char why[200];
    CheckedFactor qkv[] = {{"(--num_heads + 2 x --num_key_value_heads)", (uint64_t)m->num_heads + 2 * (uint64_t)m->num_key_value_heads},
                           {"head dimension", (uint64_t)config_head_dim(m)}};
    CheckedFactor up[] = {{NULL, 2}, {"--intermediate_size", (uint64_t)m->intermediate_size}};
    if (!checked_product(&rows, INT32_MAX, "rows of the fused q/k/v projection", qkv, 2, why, sizeof why) ||
        (fam->gated_mlp && !checked_product(&rows, INT32_MAX, "rows of the fused gate and up projections", up, 2, why, sizeof why))) {
        return err_text(msg, sizeof msg, "%s (a GEMM dimension is a 32-bit int): lower the model's sizes", why);
    }
    if (m->num_layers > INT32_MAX - 2) {  // the units: the blocks, the embedding and the head
        return err_text(msg, sizeof msg, "--num_layers %d: at most %d", m->num_layers, INT32_MAX - 2);
    }
    if (m->max_context_width > INT32_MAX - 1) {  // a sample is one token longer than the context
        return err_text(msg, sizeof msg, "--max_context_width %d: at most %d", m->max_context_width, INT32_MAX - 1);
    }
    return NULL;
}
