/* Test helper: writes small random Llama/Qwen2/Qwen3 checkpoints as an HF directory
 * (config.json + safetensors, single or sharded) and as GGUF (llama.cpp names, q/k rows
 * permuted for llama as llama.cpp's converter does), from the same weights.
 * It records where each GGUF field lies so tests can corrupt exactly one of them, and has what
 * the tests that run the written models share: a model opened with a runner and a KV pool, and
 * the largest difference between two rows of logits. */
#ifndef TINY_MODEL_WRITER_H
#define TINY_MODEL_WRITER_H

#pragma GCC diagnostic ignored "-Wunused-function"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "srt/model.h"

typedef struct tw_tensor {
    char     name[128];      /* HF name */
    int      ndim;
    int64_t  shape[2];
    float   *data;
    uint32_t ggml_type;      /* GGUF type when raw is set (else F32 from data) */
    uint8_t *raw;            /* quantized bytes, rows of row_bytes */
    size_t   row_bytes;
} tw_tensor;

typedef struct tw_model {
    const char *arch;        /* "llama", "qwen2", "qwen3" */
    int hidden, ffn, layers, heads, kv_heads, head_dim, vocab;
    int tied;
    tw_tensor t[128];
    int n;
} tw_model;

/* where the GGUF writer put things, for corruption tests */
typedef struct tw_gguf_layout {
    long   n_kv_off, n_tensors_off, first_key_len_off;
    long   tinfo_ndims_off[128], tinfo_type_off[128], tinfo_offset_off[128];
    char   tinfo_name[128][128];
    long   data_start;
    long   size;
    int    n_tensors;
} tw_gguf_layout;

static uint64_t tw_rng = 0x1234567;
static float tw_rand(void)
{
    tw_rng = tw_rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((float)((tw_rng >> 40) & 0xffffff) / 16777216.0f - 0.5f);
}

static tw_tensor *tw_add(tw_model *m, const char *name, int64_t rows, int64_t cols, float scale, float offset)
{
    tw_tensor *t = &m->t[m->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = rows ? 2 : 1;
    t->shape[0] = rows ? rows : cols;
    t->shape[1] = rows ? cols : 0;
    int64_t n = rows ? rows * cols : cols;
    t->data = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        t->data[i] = offset + scale * tw_rand();
    return t;
}

static void tw_make_dims(tw_model *m, const char *arch, uint64_t seed, int hidden, int ffn, int heads, int kv_heads,
                         int head_dim)
{
    char n[128];
    memset(m, 0, sizeof *m);
    tw_rng = seed;
    m->arch = arch;
    m->hidden = hidden, m->ffn = ffn, m->layers = 2, m->heads = heads, m->kv_heads = kv_heads;
    m->head_dim = head_dim, m->vocab = 96;
    m->tied = strcmp(arch, "qwen2") == 0;
    int H = m->hidden, qd = m->heads * m->head_dim, kd = m->kv_heads * m->head_dim;
    tw_add(m, "model.embed_tokens.weight", m->vocab, H, 2.0f, 0);
    for (int l = 0; l < m->layers; l++) {
#define T(s, r, c, sc, off) (snprintf(n, sizeof n, "model.layers.%d.%s", l, s), tw_add(m, n, r, c, sc, off))
        T("input_layernorm.weight", 0, H, 0.2f, 1.0f);
        T("self_attn.q_proj.weight", qd, H, 0.5f, 0);
        T("self_attn.k_proj.weight", kd, H, 0.5f, 0);
        T("self_attn.v_proj.weight", kd, H, 0.5f, 0);
        if (strcmp(arch, "qwen2") == 0) {
            T("self_attn.q_proj.bias", 0, qd, 0.5f, 0);
            T("self_attn.k_proj.bias", 0, kd, 0.5f, 0);
            T("self_attn.v_proj.bias", 0, kd, 0.5f, 0);
        }
        if (strcmp(arch, "qwen3") == 0) {
            T("self_attn.q_norm.weight", 0, m->head_dim, 0.2f, 1.0f);
            T("self_attn.k_norm.weight", 0, m->head_dim, 0.2f, 1.0f);
        }
        T("self_attn.o_proj.weight", H, qd, 0.5f, 0);
        T("post_attention_layernorm.weight", 0, H, 0.2f, 1.0f);
        T("mlp.gate_proj.weight", m->ffn, H, 0.5f, 0);
        T("mlp.up_proj.weight", m->ffn, H, 0.5f, 0);
        T("mlp.down_proj.weight", H, m->ffn, 0.5f, 0);
#undef T
    }
    tw_add(m, "model.norm.weight", 0, H, 0.2f, 1.0f);
    if (!m->tied)
        tw_add(m, "lm_head.weight", m->vocab, H, 0.5f, 0);
}

static void tw_make(tw_model *m, const char *arch, uint64_t seed)
{
    /* qwen3 gets an explicit head_dim != hidden / heads */
    tw_make_dims(m, arch, seed, 64, 96, 4, 2, strcmp(arch, "qwen3") == 0 ? 32 : 16);
}

static void tw_free(tw_model *m)
{
    for (int i = 0; i < m->n; i++) {
        free(m->t[i].data);
        free(m->t[i].raw);
    }
    m->n = 0;
}

/* the writer's vocabulary changed to V rows (embedding, and lm_head when untied), new random values */
static void tw_set_vocab(tw_model *tm, int V)
{
    tm->vocab = V;
    for (int i = 0; i < tm->n; i++) {
        tw_tensor *t = &tm->t[i];
        int emb = strcmp(t->name, "model.embed_tokens.weight") == 0, lm = strcmp(t->name, "lm_head.weight") == 0;
        if (!emb && !lm)
            continue;
        free(t->data);
        t->shape[0] = V;
        t->data = malloc((size_t)V * t->shape[1] * sizeof(float));
        for (int64_t j = 0; j < (int64_t)V * t->shape[1]; j++)
            t->data[j] = (emb ? 2.0f : 0.5f) * tw_rand();
    }
}

static int64_t tw_numel(const tw_tensor *t) { return t->ndim == 2 ? t->shape[0] * t->shape[1] : t->shape[0]; }

static void tw_write_config(const tw_model *m, const char *dir, const char *extra)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    const char *cls = strcmp(m->arch, "llama") == 0 ? "LlamaForCausalLM"
                    : strcmp(m->arch, "qwen2") == 0 ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM";
    fprintf(f, "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"vocab_size\": %d, \"hidden_size\": %d, "
               "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
               "\"num_key_value_heads\": %d, \"head_dim\": %d, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, "
               "\"max_position_embeddings\": 512, \"tie_word_embeddings\": %s, \"eos_token_id\": 2, \"bos_token_id\": 1%s%s}\n",
            cls, m->arch, m->vocab, m->hidden, m->ffn, m->layers, m->heads, m->kv_heads, m->head_dim,
            m->tied ? "true" : "false", extra ? ", " : "", extra ? extra : "");
    fclose(f);
}

/* dtype: "F32", "F16" or "BF16" (values rounded on the way). Tensors [t0, t1). */
static uint16_t tw_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static uint16_t tw_f32_to_f16(float f)
{
    /* values here are small normals: plain rounding of the mantissa is enough */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t mant = u & 0x7fffff;
    if (e <= 0)
        return (uint16_t)sign;
    uint32_t h = sign | ((uint32_t)e << 10) | (mant >> 13);
    if ((mant & 0x1fff) > 0x1000 || ((mant & 0x1fff) == 0x1000 && (h & 1)))
        h++;
    return (uint16_t)h;
}

static void tw_write_safetensors(const tw_model *m, const char *path, int t0, int t1, const char *dtype)
{
    size_t es = strcmp(dtype, "F32") == 0 ? 4 : 2;
    char *hdr = malloc(65536);
    size_t hl = 0, off = 0;
    hl += (size_t)sprintf(hdr + hl, "{\"__metadata__\": {\"format\": \"pt\"}");
    for (int i = t0; i < t1; i++) {
        const tw_tensor *t = &m->t[i];
        size_t nb = (size_t)tw_numel(t) * es;
        if (t->ndim == 2)
            hl += (size_t)sprintf(hdr + hl, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [%lld, %lld], \"data_offsets\": [%zu, %zu]}",
                                  t->name, dtype, (long long)t->shape[0], (long long)t->shape[1], off, off + nb);
        else
            hl += (size_t)sprintf(hdr + hl, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [%lld], \"data_offsets\": [%zu, %zu]}",
                                  t->name, dtype, (long long)t->shape[0], off, off + nb);
        off += nb;
    }
    hl += (size_t)sprintf(hdr + hl, "}");
    while (hl % 8)
        hdr[hl++] = ' ';
    FILE *f = fopen(path, "wb");
    uint64_t h64 = hl;
    fwrite(&h64, 8, 1, f);
    fwrite(hdr, 1, hl, f);
    for (int i = t0; i < t1; i++) {
        const tw_tensor *t = &m->t[i];
        for (int64_t k = 0; k < tw_numel(t); k++) {
            if (es == 4)
                fwrite(&t->data[k], 4, 1, f);
            else {
                uint16_t h = strcmp(dtype, "BF16") == 0 ? tw_f32_to_bf16(t->data[k]) : tw_f32_to_f16(t->data[k]);
                fwrite(&h, 2, 1, f);
            }
        }
    }
    fclose(f);
    free(hdr);
}

/* HF directory; shards > 1 writes model-0000k-of-0000n.safetensors and the index. */
static void tw_write_hf(const tw_model *m, const char *dir, int shards, const char *dtype)
{
    char p[1024];
    mkdir(dir, 0755);
    tw_write_config(m, dir, NULL);
    if (shards <= 1) {
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        tw_write_safetensors(m, p, 0, m->n, dtype);
        return;
    }
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    FILE *idx = fopen(p, "w");
    fprintf(idx, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int s = 0; s < shards; s++) {
        int t0 = m->n * s / shards, t1 = m->n * (s + 1) / shards;
        char fn[128];
        snprintf(fn, sizeof fn, "model-%05d-of-%05d.safetensors", s + 1, shards);
        snprintf(p, sizeof p, "%s/%s", dir, fn);
        tw_write_safetensors(m, p, t0, t1, dtype);
        for (int i = t0; i < t1; i++)
            fprintf(idx, "%s\"%s\": \"%s\"", (s == 0 && i == 0) ? "" : ", ", m->t[i].name, fn);
    }
    fprintf(idx, "}}\n");
    fclose(idx);
}

/* ---- GGUF ---- */
static const char *tw_gguf_name(const char *hf, char *out, size_t cap)
{
    static const char *map[][2] = {
        { "input_layernorm", "attn_norm" }, { "post_attention_layernorm", "ffn_norm" },
        { "self_attn.q_proj", "attn_q" }, { "self_attn.k_proj", "attn_k" }, { "self_attn.v_proj", "attn_v" },
        { "self_attn.o_proj", "attn_output" }, { "self_attn.q_norm", "attn_q_norm" },
        { "self_attn.k_norm", "attn_k_norm" }, { "mlp.gate_proj", "ffn_gate" }, { "mlp.up_proj", "ffn_up" },
        { "mlp.down_proj", "ffn_down" },
    };
    int l, k = 0;
    if (strcmp(hf, "model.embed_tokens.weight") == 0) return snprintf(out, cap, "token_embd.weight"), out;
    if (strcmp(hf, "model.norm.weight") == 0) return snprintf(out, cap, "output_norm.weight"), out;
    if (strcmp(hf, "lm_head.weight") == 0) return snprintf(out, cap, "output.weight"), out;
    if (sscanf(hf, "model.layers.%d.%n", &l, &k) == 1 && k) {
        const char *rest = hf + k, *dot = strrchr(rest, '.');
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
            if (strlen(map[i][0]) == (size_t)(dot - rest) && strncmp(rest, map[i][0], (size_t)(dot - rest)) == 0)
                return snprintf(out, cap, "blk.%d.%s%s", l, map[i][1], dot), out;
    }
    return snprintf(out, cap, "%s", hf), out;
}

static void tw_w_str(FILE *f, const char *s)
{
    uint64_t n = strlen(s);
    fwrite(&n, 8, 1, f);
    fwrite(s, 1, n, f);
}
static void tw_w_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void tw_w_u64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }
static void tw_w_f32(FILE *f, float v) { fwrite(&v, 4, 1, f); }
static void tw_kv_u32(FILE *f, const char *k, uint32_t v) { tw_w_str(f, k); tw_w_u32(f, 4); tw_w_u32(f, v); }
static void tw_kv_f32(FILE *f, const char *k, float v) { tw_w_str(f, k); tw_w_u32(f, 6); tw_w_f32(f, v); }
static void tw_kv_str(FILE *f, const char *k, const char *v) { tw_w_str(f, k); tw_w_u32(f, 8); tw_w_str(f, v); }

/* permute: reorder llama q/k rows the way llama.cpp's converter does. skip: HF name left out. */
static void tw_write_gguf(const tw_model *m, const char *path, int permute, const char *skip, tw_gguf_layout *lay)
{
    FILE *f = fopen(path, "wb");
    char key[128], gname[128];
    int nt = 0;
    for (int i = 0; i < m->n; i++)
        nt += !(skip && strcmp(skip, m->t[i].name) == 0);
    memset(lay, 0, sizeof *lay);
    fwrite("GGUF", 1, 4, f);
    tw_w_u32(f, 3);
    lay->n_tensors_off = ftell(f);
    tw_w_u64(f, (uint64_t)nt);
    lay->n_kv_off = ftell(f);
    tw_w_u64(f, 13);
    lay->first_key_len_off = ftell(f);
    tw_kv_str(f, "general.architecture", m->arch);
    tw_kv_u32(f, "general.alignment", 32);
#define K(s) (snprintf(key, sizeof key, "%s.%s", m->arch, s), key)
    tw_kv_u32(f, K("block_count"), (uint32_t)m->layers);
    tw_kv_u32(f, K("embedding_length"), (uint32_t)m->hidden);
    tw_kv_u32(f, K("feed_forward_length"), (uint32_t)m->ffn);
    tw_kv_u32(f, K("attention.head_count"), (uint32_t)m->heads);
    tw_kv_u32(f, K("attention.head_count_kv"), (uint32_t)m->kv_heads);
    tw_kv_u32(f, K("attention.key_length"), (uint32_t)m->head_dim);
    tw_kv_u32(f, K("context_length"), 512);
    tw_kv_f32(f, K("rope.freq_base"), 10000.0f);
    tw_kv_f32(f, K("attention.layer_norm_rms_epsilon"), 1e-5f);
#undef K
    tw_kv_u32(f, "tokenizer.ggml.eos_token_id", 2);
    /* an array of strings, as the tokenizer keys are */
    tw_w_str(f, "tokenizer.ggml.tokens");
    tw_w_u32(f, 9);
    tw_w_u32(f, 8);
    tw_w_u64(f, (uint64_t)m->vocab);
    for (int i = 0; i < m->vocab; i++) {
        char tok[16];
        snprintf(tok, sizeof tok, "t%d", i);
        tw_w_str(f, tok);
    }
    uint64_t off = 0;
    int k = 0;
    for (int i = 0; i < m->n; i++) {
        const tw_tensor *t = &m->t[i];
        if (skip && strcmp(skip, t->name) == 0)
            continue;
        tw_gguf_name(t->name, gname, sizeof gname);
        snprintf(lay->tinfo_name[k], sizeof lay->tinfo_name[k], "%s", gname);
        tw_w_str(f, gname);
        lay->tinfo_ndims_off[k] = ftell(f);
        tw_w_u32(f, (uint32_t)t->ndim);
        if (t->ndim == 2) {
            tw_w_u64(f, (uint64_t)t->shape[1]);
            tw_w_u64(f, (uint64_t)t->shape[0]);
        } else
            tw_w_u64(f, (uint64_t)t->shape[0]);
        lay->tinfo_type_off[k] = ftell(f);
        tw_w_u32(f, t->raw ? t->ggml_type : 0);
        lay->tinfo_offset_off[k] = ftell(f);
        tw_w_u64(f, off);
        uint64_t nbytes = t->raw ? (uint64_t)t->row_bytes * (uint64_t)t->shape[0] : (uint64_t)tw_numel(t) * 4;
        off += (nbytes + 31) / 32 * 32;
        k++;
    }
    lay->n_tensors = k;
    long pos = ftell(f);
    while (pos % 32) {
        fputc(0, f);
        pos++;
    }
    lay->data_start = pos;
    for (int i = 0; i < m->n; i++) {
        const tw_tensor *t = &m->t[i];
        if (skip && strcmp(skip, t->name) == 0)
            continue;
        int is_q = strstr(t->name, "q_proj") != NULL, is_k = strstr(t->name, "k_proj") != NULL;
        int64_t n = tw_numel(t);
        size_t rb = t->raw ? t->row_bytes : (size_t)(t->ndim == 2 ? t->shape[1] : 1) * 4;
        const uint8_t *src = t->raw ? t->raw : (const uint8_t *)t->data;
        if (permute && (is_q || is_k)) {
            int heads = is_q ? m->heads : m->kv_heads, hd = m->head_dim;
            for (int h = 0; h < heads; h++)
                for (int g = 0; g < hd; g++) {
                    /* GGUF row g of a head holds HF row (g odd ? hd/2 : 0) + g/2 */
                    int hf = (g & 1) * (hd / 2) + g / 2;
                    fwrite(src + ((size_t)h * hd + hf) * rb, 1, rb, f);
                }
        } else
            fwrite(src, 1, t->raw ? rb * (size_t)t->shape[0] : (size_t)n * 4, f);
        for (int64_t p = t->raw ? (int64_t)(rb * (size_t)t->shape[0]) : n * 4; p % 32; p++)
            fputc(0, f);
    }
    lay->size = ftell(f);
    fclose(f);
}

/* ---- running what was written ---- */

/* The largest |a[i] - b[i]|; infinity when either holds a NaN. */
static double tw_max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (!(x <= d))
            d = isnan(x) ? INFINITY : x;
    }
    return d;
}

/* A model file loaded with a runner and a KV pool of kv_tokens F32 slots. */
typedef struct tw_run {
    srt_model *m;
    srt_runner *r;
    srt_kv_pool *kv;
    srt_err err;
} tw_run;

static int tw_run_open(tw_run *t, const char *path, const srt_runner_opts *o, int kv_tokens)
{
    memset(t, 0, sizeof *t);
    if (srt_model_load(path, &t->m, &t->err) != SRT_OK || srt_runner_create(t->m, o, &t->r, &t->err) != SRT_OK ||
        srt_kv_pool_create(srt_model_config_of(t->m), kv_tokens, SRT_F32, &t->kv, &t->err) != SRT_OK)
        return SRT_ERROR;
    return SRT_OK;
}

/* Frees what tw_run_open made; the error, if any, goes to msg (1024 bytes, may be NULL). Returns rc. */
static int tw_run_close(tw_run *t, int rc, char *msg)
{
    if (msg)
        snprintf(msg, 1024, "%s", t->err.msg);
    srt_kv_pool_free(t->kv);
    srt_runner_free(t->r);
    srt_model_free(t->m);
    return rc;
}

#endif
