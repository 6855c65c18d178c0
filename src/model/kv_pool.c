/* KV cache storage, indexed by token slot. */
#include <stdlib.h>
#include <string.h>

#include "srt/backend.h"
#include "srt/kv.h"
#include "srt/model.h"

struct srt_kv_pool {
    int32_t   n_slots, n_layers, row_elems;
    srt_dtype dtype;
    size_t    elem_size;
    void    **k, **v;
    srt_backend *be;   /* whose memory k/v are in; NULL: the host's */
};

size_t srt_kv_bytes_per_slot(const srt_model_config *cfg, srt_dtype dtype)
{
    size_t es = dtype == SRT_F16 || dtype == SRT_BF16 ? 2 : 4;
    return 2 * (size_t)cfg->n_layers * (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim * es;
}

int srt_kv_pool_create(const srt_model_config *cfg, int32_t n_slots, srt_dtype dtype, srt_kv_pool **out,
                       srt_err *err)
{
    return srt_kv_pool_create_tp(cfg, 1, n_slots, dtype, out, err);
}

int srt_kv_pool_create_tp(const srt_model_config *cfg, int32_t tp_size, int32_t n_slots, srt_dtype dtype,
                          srt_kv_pool **out, srt_err *err)
{
    return srt_kv_pool_create_on(cfg, tp_size, n_slots, dtype, NULL, out, err);
}

int srt_kv_pool_create_on(const srt_model_config *cfg, int32_t tp_size, int32_t n_slots, srt_dtype dtype,
                          srt_backend *be, srt_kv_pool **out, srt_err *err)
{
    *out = NULL;
    if (be && !be->ops->alloc)
        be = NULL;   /* the CPU backend's memory is the host's */
    if (tp_size <= 0 || cfg->n_kv_heads % tp_size)
        return srt_err_set(err, "kv pool: %d KV heads cannot be split over %d ranks", cfg->n_kv_heads, tp_size);
    if (dtype != SRT_F32 && dtype != SRT_F16 && !(be && dtype == SRT_BF16))
        return srt_err_set(err, "kv pool: dtype %s not supported (F32 or F16)", srt_dtype_name(dtype));
    if (n_slots <= 0)
        return srt_err_set(err, "kv pool: n_slots must be positive (got %d)", n_slots);
    srt_kv_pool *kv = calloc(1, sizeof *kv);
    if (!kv)
        return srt_err_set(err, "kv pool: out of memory");
    kv->n_slots = n_slots;
    kv->n_layers = cfg->n_layers;
    kv->row_elems = cfg->n_kv_heads / tp_size * cfg->head_dim;
    kv->dtype = dtype;
    kv->be = be;
    kv->elem_size = dtype == SRT_F32 ? 4 : 2;
    kv->k = calloc((size_t)kv->n_layers, sizeof *kv->k);
    kv->v = calloc((size_t)kv->n_layers, sizeof *kv->v);
    if (!kv->k || !kv->v)
        goto oom;
    size_t bytes = (size_t)n_slots * (size_t)kv->row_elems * kv->elem_size;
    bytes = (bytes + 63) / 64 * 64;
    for (int32_t l = 0; l < kv->n_layers && be; l++) {
        /* not zeroed: validation keeps every slot a step reads written by an earlier kv_store */
        kv->k[l] = srt_backend_alloc(be, bytes, err);
        kv->v[l] = kv->k[l] ? srt_backend_alloc(be, bytes, err) : NULL;
        if (!kv->k[l] || !kv->v[l])
            goto oom;
    }
    for (int32_t l = 0; l < kv->n_layers && !be; l++) {
        kv->k[l] = aligned_alloc(64, bytes);
        kv->v[l] = aligned_alloc(64, bytes);
        if (!kv->k[l] || !kv->v[l])
            goto oom;
        /* zeroed so a slot read before being written is harmless, never NaN */
        memset(kv->k[l], 0, bytes);
        memset(kv->v[l], 0, bytes);
    }
    *out = kv;
    return SRT_OK;
oom:
    srt_kv_pool_free(kv);
    return srt_err_set(err, "kv pool: out of memory for %d slots (%zu bytes per slot)", n_slots,
                       srt_kv_bytes_per_slot(cfg, dtype));
}

void srt_kv_pool_free(srt_kv_pool *kv)
{
    if (!kv)
        return;
    for (int32_t l = 0; l < kv->n_layers; l++) {
        if (kv->be) {
            if (kv->k && kv->k[l])
                srt_backend_release(kv->be, kv->k[l]);
            if (kv->v && kv->v[l])
                srt_backend_release(kv->be, kv->v[l]);
            continue;
        }
        if (kv->k)
            free(kv->k[l]);
        if (kv->v)
            free(kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    free(kv);
}

int32_t   srt_kv_pool_n_slots(const srt_kv_pool *kv) { return kv->n_slots; }
srt_dtype srt_kv_pool_dtype(const srt_kv_pool *kv) { return kv->dtype; }
int32_t   srt_kv_pool_n_layers(const srt_kv_pool *kv) { return kv->n_layers; }
int32_t   srt_kv_pool_row_elems(const srt_kv_pool *kv) { return kv->row_elems; }
void     *srt_kv_pool_k(srt_kv_pool *kv, int32_t layer) { return layer >= 0 && layer < kv->n_layers ? kv->k[layer] : NULL; }
void     *srt_kv_pool_v(srt_kv_pool *kv, int32_t layer) { return layer >= 0 && layer < kv->n_layers ? kv->v[layer] : NULL; }

