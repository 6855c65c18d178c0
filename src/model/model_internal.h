/* What src/model shares between loading (model.c) and running (runner.c). */
#ifndef SRT_MODEL_INTERNAL_H
#define SRT_MODEL_INTERNAL_H

#include "model/gguf.h"
#include "model/tensor_store.h"
#include "srt/model.h"

typedef struct srt_linear {
    srt_weight  w;
    const float *bias;        /* f32, NULL when the layer has none */
    int32_t     module;       /* index in the module tree */
    int32_t     reduce;       /* tensor parallel, split by input columns: all-reduce the output */
} srt_linear;

typedef struct srt_norm {
    srt_weight w;
    int32_t    module;
} srt_norm;

typedef struct srt_layer {
    srt_norm   input_norm, post_attn_norm;
    srt_linear q, k, v, o, gate, up, down;
    srt_norm   q_norm, k_norm;               /* Qwen3 only (module -1 otherwise) */
    int32_t    m_layer, m_attn, m_mlp, m_act;
} srt_layer;

/* Module kinds the tree is built from, kept beside srt_module in model->mod_kind. */
enum {
    SRT_MOD_MODEL, SRT_MOD_EMBED, SRT_MOD_LIST, SRT_MOD_LAYER, SRT_MOD_ATTN, SRT_MOD_LINEAR,
    SRT_MOD_NORM, SRT_MOD_MLP, SRT_MOD_ACT, SRT_MOD_ROTARY,
};

struct srt_model {
    char             *path;
    srt_model_config  cfg;
    srt_tensor_store  store;
    srt_gguf         *gguf;            /* metadata of a GGUF model (tokenizer), else NULL */
    srt_weight        embed;
    srt_norm          final_norm;
    srt_linear        lm_head;
    srt_layer        *layers;
    float            *inv_freq;        /* [head_dim/2] RoPE frequencies, scaling applied */
    /* module tree */
    srt_module       *modules;
    int32_t           n_modules;
    char             *module_names;    /* one block holding every name */
    int32_t           m_model, m_embed, m_norm, m_rotary;
    /* owned copies: f32 biases / norm weights converted, un-permuted GGUF q/k rows */
    void            **owned;
    int32_t           n_owned;
    /* named weights for srt_model_weight() */
    char            **weight_names;
    srt_weight       *weights;
    int32_t           n_weights;
};

#endif
