/* GGUF reader. Every length, count and offset read from the file is checked against the
 * bytes that remain, so a truncated or corrupt file gives an error, never a bad read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

typedef struct cursor {
    const uint8_t *base;
    size_t         size, pos;
    const char    *path;
    srt_err       *err;
} cursor;

static int need(cursor *c, uint64_t n, const char *what)
{
    if (n > c->size - c->pos)
        return srt_err_set(c->err, "%s: truncated or corrupt GGUF: %s at offset %zu needs %llu bytes, file has %zu",
                           c->path, what, c->pos, (unsigned long long)n, c->size);
    return SRT_OK;
}

static int rd(cursor *c, void *dst, size_t n, const char *what)
{
    if (need(c, n, what) != SRT_OK)
        return SRT_ERROR;
    memcpy(dst, c->base + c->pos, n);
    c->pos += n;
    return SRT_OK;
}

static int rd_str(cursor *c, srt_gguf_str *s, const char *what)
{
    uint64_t len;
    if (rd(c, &len, 8, what) != SRT_OK || need(c, len, what) != SRT_OK)
        return SRT_ERROR;
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return SRT_OK;
}

static size_t scalar_size(srt_gguf_type t)
{
    switch (t) {
    case SRT_GGUF_UINT8: case SRT_GGUF_INT8: case SRT_GGUF_BOOL: return 1;
    case SRT_GGUF_UINT16: case SRT_GGUF_INT16: return 2;
    case SRT_GGUF_UINT32: case SRT_GGUF_INT32: case SRT_GGUF_FLOAT32: return 4;
    case SRT_GGUF_UINT64: case SRT_GGUF_INT64: case SRT_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static int read_value(cursor *c, srt_gguf_kv *kv)
{
    char what[300];
    snprintf(what, sizeof what, "value of metadata key '%s'", kv->key);
    if (kv->type == SRT_GGUF_STRING) {
        srt_gguf_str s;
        kv->value = c->base + c->pos;
        return rd_str(c, &s, what);
    }
    if (kv->type == SRT_GGUF_ARRAY) {
        uint32_t at;
        if (rd(c, &at, 4, what) != SRT_OK || rd(c, &kv->arr_n, 8, what) != SRT_OK)
            return SRT_ERROR;
        if (at >= SRT_GGUF_TYPE_COUNT || at == SRT_GGUF_ARRAY)
            return srt_err_set(c->err, "%s: metadata key '%s': unsupported array element type %u",
                               c->path, kv->key, at);
        kv->arr_type = (srt_gguf_type)at;
        kv->value = c->base + c->pos;
        if (at == SRT_GGUF_STRING) {
            /* each string is at least 8 bytes: bound the count before allocating */
            if (kv->arr_n > (c->size - c->pos) / 8)
                return srt_err_set(c->err, "%s: truncated or corrupt GGUF: metadata key '%s' claims %llu strings",
                                   c->path, kv->key, (unsigned long long)kv->arr_n);
            kv->arr_strs = malloc((kv->arr_n ? kv->arr_n : 1) * sizeof *kv->arr_strs);
            if (!kv->arr_strs)
                return srt_err_set(c->err, "%s: out of memory reading '%s'", c->path, kv->key);
            for (uint64_t i = 0; i < kv->arr_n; i++)
                if (rd_str(c, &kv->arr_strs[i], what) != SRT_OK)
                    return SRT_ERROR;
            return SRT_OK;
        }
        size_t es = scalar_size(kv->arr_type);
        if (kv->arr_n > (c->size - c->pos) / es)
            return srt_err_set(c->err, "%s: truncated or corrupt GGUF: metadata key '%s' array of %llu elements past the end",
                               c->path, kv->key, (unsigned long long)kv->arr_n);
        c->pos += kv->arr_n * es;
        return SRT_OK;
    }
    size_t es = scalar_size(kv->type);
    if (es == 0)
        return srt_err_set(c->err, "%s: metadata key '%s': unknown value type %d", c->path, kv->key, (int)kv->type);
    kv->value = c->base + c->pos;
    return need(c, es, what) == SRT_OK ? (c->pos += es, SRT_OK) : SRT_ERROR;
}

void srt_gguf_close(srt_gguf *g)
{
    if (!g)
        return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            free(g->kv[i].arr_strs);
        }
    free(g->kv);
    free(g->tensors);
    srt_unmap_file(&g->file);
    free(g);
}

int srt_ggml_type_to_dtype(uint32_t t, srt_dtype *out);
int srt_ggml_type_to_dtype(uint32_t t, srt_dtype *out)
{
    switch (t) {
    case 0:  *out = SRT_F32;  return SRT_OK;
    case 1:  *out = SRT_F16;  return SRT_OK;
    case 2:  *out = SRT_Q4_0; return SRT_OK;
    case 3:  *out = SRT_Q4_1; return SRT_OK;
    case 6:  *out = SRT_Q5_0; return SRT_OK;
    case 7:  *out = SRT_Q5_1; return SRT_OK;
    case 8:  *out = SRT_Q8_0; return SRT_OK;
    case 10: *out = SRT_Q2_K; return SRT_OK;
    case 11: *out = SRT_Q3_K; return SRT_OK;
    case 12: *out = SRT_Q4_K; return SRT_OK;
    case 13: *out = SRT_Q5_K; return SRT_OK;
    case 14: *out = SRT_Q6_K; return SRT_OK;
    case 20: *out = SRT_IQ4_NL; return SRT_OK;
    case 23: *out = SRT_IQ4_XS; return SRT_OK;
    case 30: *out = SRT_BF16; return SRT_OK;
    default: return SRT_ERROR;
    }
}

/* GGML's name of a type this loader does not take, for the startup error */
static const char *ggml_type_name(uint32_t t)
{
    static const char *const names[] = {
        [4] = "Q4_2", [5] = "Q4_3", [9] = "Q8_1", [15] = "Q8_K", [16] = "IQ2_XXS", [17] = "IQ2_XS",
        [18] = "IQ3_XXS", [19] = "IQ1_S", [21] = "IQ3_S", [22] = "IQ2_S", [24] = "I8", [25] = "I16",
        [26] = "I32", [27] = "I64", [28] = "F64", [29] = "IQ1_M", [31] = "Q4_0_4_4", [32] = "Q4_0_4_8",
        [33] = "Q4_0_8_8", [34] = "TQ1_0", [35] = "TQ2_0", [36] = "IQ4_NL_4_4", [37] = "IQ4_NL_4_8",
        [38] = "IQ4_NL_8_8", [39] = "MXFP4", [40] = "NVFP4", [41] = "Q1_0", [42] = "Q2_0",
    };
    return t < sizeof names / sizeof names[0] && names[t] ? names[t] : "unknown";
}

/* The parser behind both entry points: g->file holds the bytes (mapped or borrowed). */
static int parse(srt_gguf *g, srt_err *err)
{
    const char *path = g->file.path;
    cursor c = { g->file.data, g->file.size, 0, path, err };
    char magic[4];
    if (rd(&c, magic, 4, "magic") != SRT_OK)
        goto fail;
    if (memcmp(magic, "GGUF", 4) != 0) {
        srt_err_set(err, "%s: not a GGUF file (bad magic)", path);
        goto fail;
    }
    if (rd(&c, &g->version, 4, "version") != SRT_OK)
        goto fail;
    if (g->version != 2 && g->version != 3) {
        srt_err_set(err, "%s: unsupported GGUF version %u (need 2 or 3)", path, g->version);
        goto fail;
    }
    if (rd(&c, &g->n_tensors, 8, "tensor count") != SRT_OK || rd(&c, &g->n_kv, 8, "metadata count") != SRT_OK)
        goto fail;
    /* a key/value takes at least 12 bytes, a tensor info at least 24 */
    if (g->n_kv > g->file.size / 12 || g->n_tensors > g->file.size / 24) {
        srt_err_set(err, "%s: corrupt GGUF header: %llu metadata entries, %llu tensors in a %zu-byte file",
                    path, (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors, g->file.size);
        goto fail;
    }
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) {
        srt_err_set(err, "%s: out of memory", path);
        goto fail;
    }
    g->alignment = 32;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        srt_gguf_kv *kv = &g->kv[i];
        srt_gguf_str key;
        uint32_t type;
        char what[64];
        snprintf(what, sizeof what, "key of metadata entry %llu", (unsigned long long)i);
        if (rd_str(&c, &key, what) != SRT_OK)
            goto fail;
        if (key.len > 65535) {
            srt_err_set(err, "%s: corrupt GGUF: metadata entry %llu key is %llu bytes", path,
                        (unsigned long long)i, (unsigned long long)key.len);
            goto fail;
        }
        /* a copy of exactly len bytes: strndup may look for a NUL past the key, and a key
         * that ends the input has none (ASan's strict string checks stop there) */
        kv->key = malloc(key.len + 1);
        if (!kv->key) {
            srt_err_set(err, "%s: out of memory", path);
            goto fail;
        }
        memcpy(kv->key, key.ptr, key.len);
        kv->key[key.len] = 0;
        snprintf(what, sizeof what, "type of metadata entry %llu", (unsigned long long)i);
        if (rd(&c, &type, 4, what) != SRT_OK)
            goto fail;
        if (type >= SRT_GGUF_TYPE_COUNT) {
            srt_err_set(err, "%s: metadata key '%s' has unknown type %u", path, kv->key, type);
            goto fail;
        }
        kv->type = (srt_gguf_type)type;
        if (read_value(&c, kv) != SRT_OK)
            goto fail;
        if (strcmp(kv->key, "general.alignment") == 0) {
            int64_t a;
            if (srt_gguf_get_i64(g, kv->key, &a) != SRT_OK || a <= 0 || a > 65536 || (a & (a - 1))) {
                srt_err_set(err, "%s: metadata key 'general.alignment' is not a power of two", path);
                goto fail;
            }
            g->alignment = (uint64_t)a;
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        srt_gguf_tensor_info *ti = &g->tensors[i];
        char what[64];
        snprintf(what, sizeof what, "tensor info %llu", (unsigned long long)i);
        if (rd_str(&c, &ti->name, what) != SRT_OK || rd(&c, &ti->n_dims, 4, what) != SRT_OK)
            goto fail;
        if (ti->name.len > 255) {
            srt_err_set(err, "%s: corrupt GGUF: tensor %llu name is %llu bytes", path,
                        (unsigned long long)i, (unsigned long long)ti->name.len);
            goto fail;
        }
        if (ti->n_dims < 1 || ti->n_dims > 4) {
            srt_err_set(err, "%s: tensor '%.*s' has %u dimensions (1..4 supported)", path,
                        (int)ti->name.len, ti->name.ptr, ti->n_dims);
            goto fail;
        }
        for (uint32_t d = 0; d < ti->n_dims; d++) {
            uint64_t v;
            if (rd(&c, &v, 8, what) != SRT_OK)
                goto fail;
            if (v > ((uint64_t)1 << 40)) {
                srt_err_set(err, "%s: tensor '%.*s' has absurd dimension %llu", path,
                            (int)ti->name.len, ti->name.ptr, (unsigned long long)v);
                goto fail;
            }
            ti->dims[d] = (int64_t)v;
        }
        if (rd(&c, &ti->ggml_type, 4, what) != SRT_OK || rd(&c, &ti->offset, 8, what) != SRT_OK)
            goto fail;
    }
    g->data_offset = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (g->data_offset > g->file.size && g->n_tensors > 0) {
        srt_err_set(err, "%s: truncated GGUF: tensor data section starts past the end of the file", path);
        goto fail;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        srt_gguf_tensor_info *ti = &g->tensors[i];
        srt_dtype dt;
        int64_t shape[4];
        size_t nbytes;
        int nd = (int)ti->n_dims;
        if (srt_ggml_type_to_dtype(ti->ggml_type, &dt) != SRT_OK) {
            srt_err_set(err, "%s: tensor '%.*s' has unsupported GGML type %u (%s; supported: F32, F16, BF16, Q8_0, "
                        "Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)",
                        path, (int)ti->name.len, ti->name.ptr, ti->ggml_type, ggml_type_name(ti->ggml_type));
            goto fail;
        }
        for (int d = 0; d < nd; d++)
            shape[d] = ti->dims[nd - 1 - d];
        if (srt_tensor_nbytes(dt, shape, nd, &nbytes) != SRT_OK) {
            srt_err_set(err, "%s: tensor '%.*s': shape does not fit type %s (row of %lld elements)",
                        path, (int)ti->name.len, ti->name.ptr, srt_dtype_name(dt), (long long)ti->dims[0]);
            goto fail;
        }
        if (ti->offset % g->alignment != 0) {
            srt_err_set(err, "%s: tensor '%.*s': data offset %llu is not aligned to %llu bytes", path,
                        (int)ti->name.len, ti->name.ptr, (unsigned long long)ti->offset,
                        (unsigned long long)g->alignment);
            goto fail;
        }
        if (ti->offset > g->file.size - g->data_offset || nbytes > g->file.size - g->data_offset - ti->offset) {
            srt_err_set(err, "%s: tensor '%.*s': data [%llu, +%zu) lies outside the file (data section %llu bytes): truncated or corrupt",
                        path, (int)ti->name.len, ti->name.ptr, (unsigned long long)ti->offset, nbytes,
                        (unsigned long long)(g->file.size - g->data_offset));
            goto fail;
        }
    }
    return SRT_OK;
fail:
    return SRT_ERROR;
}

static int finish_open(srt_gguf *g, srt_gguf **out, srt_err *err)
{
    if (parse(g, err) != SRT_OK) {
        srt_gguf_close(g);
        return SRT_ERROR;
    }
    *out = g;
    return SRT_OK;
}

int srt_gguf_open(const char *path, srt_gguf **out, srt_err *err)
{
    srt_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return srt_err_set(err, "%s: out of memory", path);
    if (srt_map_file(path, &g->file, err) != SRT_OK) {
        free(g);
        return SRT_ERROR;
    }
    return finish_open(g, out, err);
}

int srt_gguf_open_buffer(const void *data, size_t size, const char *name, srt_gguf **out, srt_err *err)
{
    srt_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return srt_err_set(err, "%s: out of memory", name);
    if (srt_borrow_buffer(data, size, name, &g->file, err) != SRT_OK) {
        free(g);
        return SRT_ERROR;
    }
    return finish_open(g, out, err);
}

const srt_gguf_kv *srt_gguf_find(const srt_gguf *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0)
            return &g->kv[i];
    return NULL;
}

int srt_gguf_get_i64(const srt_gguf *g, const char *key, int64_t *out)
{
    const srt_gguf_kv *kv = srt_gguf_find(g, key);
    if (!kv)
        return SRT_ERROR;
    const uint8_t *p = kv->value;
    switch (kv->type) {
    case SRT_GGUF_UINT8:  *out = *p; return SRT_OK;
    case SRT_GGUF_INT8:   *out = (int8_t)*p; return SRT_OK;
    case SRT_GGUF_BOOL:   *out = *p != 0; return SRT_OK;
    case SRT_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *out = v; return SRT_OK; }
    case SRT_GGUF_INT16:  { int16_t v; memcpy(&v, p, 2); *out = v; return SRT_OK; }
    case SRT_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); *out = v; return SRT_OK; }
    case SRT_GGUF_INT32:  { int32_t v; memcpy(&v, p, 4); *out = v; return SRT_OK; }
    case SRT_GGUF_UINT64: { uint64_t v; memcpy(&v, p, 8); if (v > INT64_MAX) return SRT_ERROR; *out = (int64_t)v; return SRT_OK; }
    case SRT_GGUF_INT64:  { int64_t v; memcpy(&v, p, 8); *out = v; return SRT_OK; }
    default: return SRT_ERROR;
    }
}

int srt_gguf_get_f32(const srt_gguf *g, const char *key, float *out)
{
    const srt_gguf_kv *kv = srt_gguf_find(g, key);
    if (!kv)
        return SRT_ERROR;
    if (kv->type == SRT_GGUF_FLOAT32) { memcpy(out, kv->value, 4); return SRT_OK; }
    if (kv->type == SRT_GGUF_FLOAT64) { double d; memcpy(&d, kv->value, 8); *out = (float)d; return SRT_OK; }
    int64_t v;
    if (srt_gguf_get_i64(g, key, &v) != SRT_OK)
        return SRT_ERROR;
    *out = (float)v;
    return SRT_OK;
}

int srt_gguf_get_str(const srt_gguf *g, const char *key, srt_gguf_str *out)
{
    const srt_gguf_kv *kv = srt_gguf_find(g, key);
    if (!kv || kv->type != SRT_GGUF_STRING)
        return SRT_ERROR;
    memcpy(&out->len, kv->value, 8);
    out->ptr = (const char *)kv->value + 8;
    return SRT_OK;
}

/* GGUF (llama.cpp) tensor names -> HF names. */
static int hf_name(const char *g, char *out, size_t cap)
{
    static const struct { const char *gg, *hf; } top[] = {
        { "token_embd.weight", "model.embed_tokens.weight" },
        { "output_norm.weight", "model.norm.weight" },
        { "output.weight", "lm_head.weight" },
    };
    static const struct { const char *gg, *hf; } blk[] = {
        { "attn_norm", "input_layernorm" },
        { "ffn_norm", "post_attention_layernorm" },
        { "attn_q", "self_attn.q_proj" },
        { "attn_k", "self_attn.k_proj" },
        { "attn_v", "self_attn.v_proj" },
        { "attn_output", "self_attn.o_proj" },
        { "attn_q_norm", "self_attn.q_norm" },
        { "attn_k_norm", "self_attn.k_norm" },
        { "ffn_gate", "mlp.gate_proj" },
        { "ffn_up", "mlp.up_proj" },
        { "ffn_down", "mlp.down_proj" },
    };
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (strcmp(g, top[i].gg) == 0)
            return snprintf(out, cap, "%s", top[i].hf) < (int)cap ? SRT_OK : SRT_ERROR;
    unsigned layer;
    int n = 0;
    if (sscanf(g, "blk.%u.%n", &layer, &n) == 1 && n > 0) {
        const char *rest = g + n;
        const char *dot = strrchr(rest, '.');
        if (dot) {
            size_t base = (size_t)(dot - rest);
            for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++)
                if (strlen(blk[i].gg) == base && strncmp(rest, blk[i].gg, base) == 0)
                    return snprintf(out, cap, "model.layers.%u.%s%s", layer, blk[i].hf, dot) < (int)cap
                           ? SRT_OK : SRT_ERROR;
        }
    }
    return snprintf(out, cap, "%s", g) < (int)cap ? SRT_OK : SRT_ERROR;
}

int srt_gguf_to_store(srt_gguf *g, srt_tensor_store *s, srt_err *err)
{
    const uint8_t *data = (const uint8_t *)g->file.data + g->data_offset;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        srt_gguf_tensor_info *ti = &g->tensors[i];
        char gname[256], name[320];
        srt_tensor_entry e = { 0 };
        memcpy(gname, ti->name.ptr, ti->name.len);
        gname[ti->name.len] = 0;
        if (hf_name(gname, name, sizeof name) != SRT_OK)
            return srt_err_set(err, "%s: tensor name '%s' too long", g->file.path, gname);
        e.name = name;
        srt_ggml_type_to_dtype(ti->ggml_type, &e.dtype);
        e.ndim = (int32_t)ti->n_dims;
        for (int d = 0; d < e.ndim; d++)
            e.shape[d] = ti->dims[e.ndim - 1 - d];
        srt_tensor_nbytes(e.dtype, e.shape, e.ndim, &e.nbytes);
        e.data = data + ti->offset;
        e.file = g->file.path;
        if (srt_store_add(s, &e, err) != SRT_OK)
            return SRT_ERROR;
    }
    if (srt_store_add_file(s, &g->file) != SRT_OK)
        return srt_err_set(err, "%s: out of memory", g->file.path);
    /* the store owns the mapping now; metadata pointers stay valid while it lives */
    g->file.data = NULL;
    g->file.fd = -1;
    g->file.path = NULL;
    return SRT_OK;
}
