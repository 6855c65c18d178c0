/* Loading: checkpoint files -> config, weights bound to layers, the module tree. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/cpu/cpu_kernels.h"
#include "model/config.h"
#include "model/model_internal.h"

static void *own(srt_model *m, size_t bytes)
{
    void **no = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *no);
    if (!no)
        return NULL;
    m->owned = no;
    void *p = calloc(1, bytes ? bytes : 1);
    if (p)
        m->owned[m->n_owned++] = p;
    return p;
}

static int remember_weight(srt_model *m, const char *name, const srt_weight *w)
{
    char **nn = realloc(m->weight_names, (size_t)(m->n_weights + 1) * sizeof *nn);
    if (!nn)
        return SRT_ERROR;
    m->weight_names = nn;
    srt_weight *nw = realloc(m->weights, (size_t)(m->n_weights + 1) * sizeof *nw);
    if (!nw)
        return SRT_ERROR;
    m->weights = nw;
    if (!(m->weight_names[m->n_weights] = strdup(name)))
        return SRT_ERROR;
    m->weights[m->n_weights++] = *w;
    return SRT_OK;
}

/* A tensor by HF name with the expected shape (rows == 0: 1-D of cols elements). */
static int bind(srt_model *m, const char *name, int64_t rows, int64_t cols, int optional, srt_weight *out,
                srt_err *err)
{
    const srt_tensor_entry *e = srt_store_find(&m->store, name);
    memset(out, 0, sizeof *out);
    if (!e) {
        if (optional)
            return SRT_OK;
        return srt_err_set(err, "%s: tensor '%s' is missing", m->path, name);
    }
    if (e->dtype == SRT_DTYPE_COUNT || e->dtype == SRT_I32)
        return srt_err_set(err, "%s: tensor '%s' has unsupported dtype %s", e->file, name,
                           e->dtype == SRT_I32 ? "I32" : e->stored_type);
    int ok = rows ? (e->ndim == 2 && e->shape[0] == rows && e->shape[1] == cols)
                  : (e->ndim == 1 && e->shape[0] == cols);
    if (!ok) {
        char got[96] = "";
        for (int i = 0; i < e->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)e->shape[i]);
        if (rows)
            return srt_err_set(err, "%s: tensor '%s' has shape [%s], expected [%lld, %lld]", e->file, name, got,
                               (long long)rows, (long long)cols);
        return srt_err_set(err, "%s: tensor '%s' has shape [%s], expected [%lld]", e->file, name, got, (long long)cols);
    }
    if (!rows && e->dtype != SRT_F32 && e->dtype != SRT_F16 && e->dtype != SRT_BF16)
        return srt_err_set(err, "%s: tensor '%s' is a 1-D %s tensor; norms and biases must be F32, F16 or BF16",
                           e->file, name, srt_dtype_name(e->dtype));
    out->dtype = e->dtype;
    out->rows = rows ? rows : 1;
    out->cols = cols;
    out->data = e->data;
    out->row_stride = srt_dtype_row_bytes(e->dtype, cols);
    if (remember_weight(m, name, out) != SRT_OK)
        return srt_err_set(err, "%s: out of memory", m->path);
    return SRT_OK;
}

static int bind_bias(srt_model *m, const char *name, int64_t n, const float **out, srt_err *err)
{
    srt_weight w;
    *out = NULL;
    if (bind(m, name, 0, n, 1, &w, err) != SRT_OK)
        return SRT_ERROR;
    if (!w.data)
        return SRT_OK;
    float *b = own(m, (size_t)n * sizeof(float));
    if (!b)
        return srt_err_set(err, "%s: out of memory", m->path);
    srt_cpu_dequant_row(&w, 0, b);
    *out = b;
    return SRT_OK;
}

/* llama.cpp's converter reorders each head's q/k rows from HF's [first half | second half]
 * into interleaved pairs (for GPT-J style RoPE). Put them back, so q_proj/k_proj outputs
 * are exactly HF's and one RoPE (rotate_half) serves every format. Rows keep their dtype. */
static int unpermute_rows(srt_model *m, srt_weight *w, const float **bias, int32_t n_heads, int32_t head_dim,
                          srt_err *err)
{
    if (w->rows != (int64_t)n_heads * head_dim)
        return srt_err_set(err, "%s: cannot un-permute %lld rows into %d heads", m->path, (long long)w->rows, n_heads);
    uint8_t *dst = own(m, (size_t)w->rows * w->row_stride);
    if (!dst)
        return srt_err_set(err, "%s: out of memory", m->path);
    const uint8_t *src = w->data;
    for (int32_t i = 0; i < m->n_weights; i++)
        if (m->weights[i].data == src)
            m->weights[i].data = dst;
    int32_t half = head_dim / 2;
    for (int32_t h = 0; h < n_heads; h++)
        for (int32_t j = 0; j < head_dim; j++) {
            int64_t hf = (int64_t)h * head_dim + j;
            int64_t gg = (int64_t)h * head_dim + (j < half ? 2 * j : 2 * (j - half) + 1);
            memcpy(dst + hf * w->row_stride, src + gg * w->row_stride, w->row_stride);
        }
    w->data = dst;
    if (*bias) {
        float *nb = own(m, (size_t)w->rows * sizeof(float));
        if (!nb)
            return srt_err_set(err, "%s: out of memory", m->path);
        for (int32_t h = 0; h < n_heads; h++)
            for (int32_t j = 0; j < head_dim; j++)
                nb[h * head_dim + j] = (*bias)[h * head_dim + (j < half ? 2 * j : 2 * (j - half) + 1)];
        *bias = nb;
    }
    return SRT_OK;
}

static int bind_linear(srt_model *m, const char *prefix, int64_t out_f, int64_t in_f, srt_linear *l, srt_err *err)
{
    char name[320];
    snprintf(name, sizeof name, "%s.weight", prefix);
    if (bind(m, name, out_f, in_f, 0, &l->w, err) != SRT_OK)
        return SRT_ERROR;
    snprintf(name, sizeof name, "%s.bias", prefix);
    return bind_bias(m, name, out_f, &l->bias, err);
}

/* ---- module tree ---- */

static int add_module(srt_model *m, int32_t *cap, int parent, const char *cls, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int add_module(srt_model *m, int32_t *cap, int parent, const char *cls, const char *fmt, ...)
{
    char name[320];
    va_list ap;
    if (m->n_modules == *cap) {
        int32_t nc = *cap ? *cap * 2 : 64;
        srt_module *nm = realloc(m->modules, (size_t)nc * sizeof *nm);
        if (!nm)
            return -1;
        m->modules = nm;
        *cap = nc;
    }
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    srt_module *mod = &m->modules[m->n_modules];
    memset(mod, 0, sizeof *mod);
    mod->info.name = strdup(name);
    mod->info.class_name = cls;
    mod->info.index = m->n_modules;
    mod->parent = parent;
    if (!mod->info.name)
        return -1;
    return m->n_modules++;
}

static int build_modules(srt_model *m, srt_err *err)
{
    static const char *cls[3][6] = {
        /* model, layer, attention, mlp, rmsnorm, rotary */
        { "LlamaModel", "LlamaDecoderLayer", "LlamaAttention", "LlamaMLP", "LlamaRMSNorm", "LlamaRotaryEmbedding" },
        { "Qwen2Model", "Qwen2DecoderLayer", "Qwen2Attention", "Qwen2MLP", "Qwen2RMSNorm", "Qwen2RotaryEmbedding" },
        { "Qwen3Model", "Qwen3DecoderLayer", "Qwen3Attention", "Qwen3MLP", "Qwen3RMSNorm", "Qwen3RotaryEmbedding" },
    };
    const char **c = cls[m->cfg.arch];
    int32_t cap = 0;
    int bad = 0;
#define ADD(var, parent, klass, ...) do { int _i = add_module(m, &cap, parent, klass, __VA_ARGS__); \
        if (_i < 0) bad = 1; else var = _i; } while (0)
    int32_t list = -1;
    ADD(m->m_model, -1, c[0], "model");
    ADD(m->m_embed, m->m_model, "Embedding", "model.embed_tokens");
    ADD(list, m->m_model, "ModuleList", "model.layers");
    for (int32_t i = 0; i < m->cfg.n_layers && !bad; i++) {
        srt_layer *L = &m->layers[i];
        ADD(L->m_layer, list, c[1], "model.layers.%d", i);
        ADD(L->m_attn, L->m_layer, c[2], "model.layers.%d.self_attn", i);
        ADD(L->q.module, L->m_attn, "Linear", "model.layers.%d.self_attn.q_proj", i);
        ADD(L->k.module, L->m_attn, "Linear", "model.layers.%d.self_attn.k_proj", i);
        ADD(L->v.module, L->m_attn, "Linear", "model.layers.%d.self_attn.v_proj", i);
        ADD(L->o.module, L->m_attn, "Linear", "model.layers.%d.self_attn.o_proj", i);
        L->q_norm.module = L->k_norm.module = -1;
        if (m->cfg.qk_norm) {
            ADD(L->q_norm.module, L->m_attn, c[4], "model.layers.%d.self_attn.q_norm", i);
            ADD(L->k_norm.module, L->m_attn, c[4], "model.layers.%d.self_attn.k_norm", i);
        }
        ADD(L->m_mlp, L->m_layer, c[3], "model.layers.%d.mlp", i);
        ADD(L->gate.module, L->m_mlp, "Linear", "model.layers.%d.mlp.gate_proj", i);
        ADD(L->up.module, L->m_mlp, "Linear", "model.layers.%d.mlp.up_proj", i);
        ADD(L->down.module, L->m_mlp, "Linear", "model.layers.%d.mlp.down_proj", i);
        ADD(L->m_act, L->m_mlp, "SiLUActivation", "model.layers.%d.mlp.act_fn", i);
        ADD(L->input_norm.module, L->m_layer, c[4], "model.layers.%d.input_layernorm", i);
        ADD(L->post_attn_norm.module, L->m_layer, c[4], "model.layers.%d.post_attention_layernorm", i);
    }
    ADD(m->final_norm.module, m->m_model, c[4], "model.norm");
    ADD(m->m_rotary, m->m_model, c[5], "model.rotary_emb");
    ADD(m->lm_head.module, -1, "Linear", "lm_head");
#undef ADD
    if (bad)
        return srt_err_set(err, "%s: out of memory building the module tree", m->path);
    return SRT_OK;
}

/* ---- RoPE frequencies, as HF computes them (float32) ---- */
static int rope_init(srt_model *m, srt_err *err)
{
    const srt_model_config *c = &m->cfg;
    int32_t half = c->head_dim / 2;
    float *f = own(m, (size_t)half * sizeof(float));
    if (!f)
        return srt_err_set(err, "%s: out of memory", m->path);
    for (int32_t i = 0; i < half; i++) {
        float expo = (float)(2 * i) / (float)c->head_dim;
        f[i] = 1.0f / powf(c->rope_theta, expo);
    }
    if (c->rope_type == SRT_ROPE_LINEAR)
        for (int32_t i = 0; i < half; i++)
            f[i] /= c->rope_factor;
    else if (c->rope_type == SRT_ROPE_LLAMA3) {
        float old = (float)c->rope_original_max_pos;
        float low_wl = old / c->rope_low_freq_factor, high_wl = old / c->rope_high_freq_factor;
        for (int32_t i = 0; i < half; i++) {
            float wl = 2.0f * (float)M_PI / f[i];
            float scaled = wl > low_wl ? f[i] / c->rope_factor : f[i];
            if (!(wl < high_wl) && !(wl > low_wl)) {
                float smooth = (old / wl - c->rope_low_freq_factor) /
                               (c->rope_high_freq_factor - c->rope_low_freq_factor);
                scaled = (1.0f - smooth) * scaled / c->rope_factor + smooth * scaled;
            }
            f[i] = scaled;
        }
    }
    /* llama.cpp stores llama3 scaling as per-frequency divisors */
    const srt_tensor_entry *rf = srt_store_find(&m->store, "rope_freqs.weight");
    if (rf) {
        if (rf->dtype != SRT_F32 || rf->ndim != 1 || rf->shape[0] != half)
            return srt_err_set(err, "%s: tensor 'rope_freqs.weight' must be F32 of %d elements", rf->file, half);
        const float *d = rf->data;
        for (int32_t i = 0; i < half; i++) {
            if (!(d[i] > 0))
                return srt_err_set(err, "%s: tensor 'rope_freqs.weight' has a non-positive factor", rf->file);
            f[i] /= d[i];
        }
    }
    m->inv_freq = f;
    return SRT_OK;
}

static int bind_all(srt_model *m, srt_err *err)
{
    const srt_model_config *c = &m->cfg;
    int64_t H = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    int64_t qd = (int64_t)c->n_heads * hd, kvd = (int64_t)c->n_kv_heads * hd;
    char p[256];

    if (bind(m, "model.embed_tokens.weight", c->vocab_size, H, 0, &m->embed, err) ||
        bind(m, "model.norm.weight", 0, H, 0, &m->final_norm.w, err))
        return SRT_ERROR;
    if (srt_store_find(&m->store, "lm_head.weight")) {
        if (bind_linear(m, "lm_head", c->vocab_size, H, &m->lm_head, err))
            return SRT_ERROR;
    } else if (c->tie_word_embeddings || c->is_gguf) {
        m->lm_head.w = m->embed;     /* tied: GGUF omits output.weight when tied */
        m->lm_head.bias = NULL;
        if (remember_weight(m, "lm_head.weight", &m->embed) != SRT_OK)
            return srt_err_set(err, "%s: out of memory", m->path);
    } else
        return srt_err_set(err, "%s: tensor 'lm_head.weight' is missing and tie_word_embeddings is false", m->path);

    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers)
        return srt_err_set(err, "%s: out of memory", m->path);
    for (int32_t i = 0; i < c->n_layers; i++) {
        srt_layer *L = &m->layers[i];
#define P(s) (snprintf(p, sizeof p, "model.layers.%d.%s", i, s), p)
        if (bind(m, P("input_layernorm.weight"), 0, H, 0, &L->input_norm.w, err) ||
            bind(m, P("post_attention_layernorm.weight"), 0, H, 0, &L->post_attn_norm.w, err) ||
            bind_linear(m, P("self_attn.q_proj"), qd, H, &L->q, err) ||
            bind_linear(m, P("self_attn.k_proj"), kvd, H, &L->k, err) ||
            bind_linear(m, P("self_attn.v_proj"), kvd, H, &L->v, err) ||
            bind_linear(m, P("self_attn.o_proj"), H, qd, &L->o, err) ||
            bind_linear(m, P("mlp.gate_proj"), F, H, &L->gate, err) ||
            bind_linear(m, P("mlp.up_proj"), F, H, &L->up, err) ||
            bind_linear(m, P("mlp.down_proj"), H, F, &L->down, err))
            return SRT_ERROR;
        if (c->qk_norm &&
            (bind(m, P("self_attn.q_norm.weight"), 0, hd, 0, &L->q_norm.w, err) ||
             bind(m, P("self_attn.k_norm.weight"), 0, hd, 0, &L->k_norm.w, err)))
            return SRT_ERROR;
#undef P
        if (c->qk_rows_permuted &&
            (unpermute_rows(m, &L->q.w, &L->q.bias, c->n_heads, c->head_dim, err) ||
             unpermute_rows(m, &L->k.w, &L->k.bias, c->n_kv_heads, c->head_dim, err)))
            return SRT_ERROR;
    }
    return SRT_OK;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int srt_model_load(const char *path, srt_model **out, srt_err *err)
{
    srt_model *m = calloc(1, sizeof *m);
    *out = NULL;
    if (!m || !(m->path = strdup(path))) {
        free(m);
        return srt_err_set(err, "%s: out of memory", path);
    }
    if (is_dir(path)) {
        char p[4096];
        if (srt_config_from_json(path, &m->cfg, err) != SRT_OK)
            goto fail;
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", path);
        if (file_exists(p)) {
            if (srt_safetensors_load_index(path, p, &m->store, err) != SRT_OK)
                goto fail;
        } else {
            snprintf(p, sizeof p, "%s/model.safetensors", path);
            if (!file_exists(p)) {
                srt_err_set(err, "%s: no model.safetensors or model.safetensors.index.json", path);
                goto fail;
            }
            if (srt_safetensors_load(p, &m->store, err) != SRT_OK)
                goto fail;
        }
    } else {
        if (srt_gguf_open(path, &m->gguf, err) != SRT_OK)
            goto fail;
        if (srt_config_from_gguf(m->gguf, path, &m->cfg, err) != SRT_OK)
            goto fail;
        if (srt_gguf_to_store(m->gguf, &m->store, err) != SRT_OK)
            goto fail;
    }
    if (bind_all(m, err) != SRT_OK || rope_init(m, err) != SRT_OK || build_modules(m, err) != SRT_OK)
        goto fail;
    *out = m;
    return SRT_OK;
fail:
    srt_model_free(m);
    return SRT_ERROR;
}

void srt_model_free(srt_model *m)
{
    if (!m)
        return;
    for (int32_t i = 0; i < m->n_modules; i++)
        free((char *)m->modules[i].info.name);
    free(m->modules);
    for (int32_t i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    for (int32_t i = 0; i < m->n_weights; i++)
        free(m->weight_names[i]);
    free(m->weight_names);
    free(m->weights);
    free(m->layers);
    srt_gguf_close(m->gguf);
    srt_store_free(&m->store);
    free(m->path);
    free(m);
}

const srt_model_config *srt_model_config_of(const srt_model *m) { return &m->cfg; }

srt_module *srt_model_modules(srt_model *m, int *n)
{
    if (n)
        *n = m->n_modules;
    return m->modules;
}

int srt_model_find_module(const srt_model *m, const char *name)
{
    for (int32_t i = 0; i < m->n_modules; i++)
        if (strcmp(m->modules[i].info.name, name) == 0)
            return i;
    return -1;
}

const srt_weight *srt_model_weight(const srt_model *m, const char *hf_name)
{
    for (int32_t i = 0; i < m->n_weights; i++)
        if (strcmp(m->weight_names[i], hf_name) == 0)
            return &m->weights[i];
    return NULL;
}
