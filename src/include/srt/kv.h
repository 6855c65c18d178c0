/* KV cache storage: per layer, K and V indexed by a token-level slot.
 *
 * Layout per layer: [n_slots][n_kv_heads][head_dim], contiguous, in the pool's dtype
 * (SRT_F32 or SRT_F16). F32 is the CPU default: attention reads it without conversion;
 * F16 halves the memory at the cost of a conversion per element read.
 * Which slots are free is the scheduler's business (its allocator and radix cache):
 * the pool only stores. */
#ifndef SRT_KV_H
#define SRT_KV_H

#include <stddef.h>
#include <stdint.h>

#include "srt/common.h"
#include "srt/tensor.h"

struct srt_model_config;
typedef struct srt_kv_pool srt_kv_pool;

SRT_API int  srt_kv_pool_create(const struct srt_model_config *cfg, int32_t n_slots, srt_dtype dtype,
                                srt_kv_pool **out, srt_err *err);
/* The pool of one tensor-parallel rank: n_kv_heads / tp_size heads per slot. */
SRT_API int  srt_kv_pool_create_tp(const struct srt_model_config *cfg, int32_t tp_size, int32_t n_slots, srt_dtype dtype,
                                   srt_kv_pool **out, srt_err *err);
/* The pool in a backend's memory (ops->alloc / ops->copy: the CUDA backend's device memory, in
 * SRT_F16 or SRT_BF16 there); be NULL or the CPU backend: host memory, as _create_tp. The pool
 * must be freed before the backend. */
struct srt_backend;
SRT_API int  srt_kv_pool_create_on(const struct srt_model_config *cfg, int32_t tp_size, int32_t n_slots, srt_dtype dtype,
                                   struct srt_backend *be, srt_kv_pool **out, srt_err *err);
SRT_API void srt_kv_pool_free(srt_kv_pool *kv);

SRT_API int32_t   srt_kv_pool_n_slots(const srt_kv_pool *kv);
srt_dtype         srt_kv_pool_dtype(const srt_kv_pool *kv);     /* libsrt only */
SRT_API int32_t   srt_kv_pool_n_layers(const srt_kv_pool *kv);
SRT_API int32_t   srt_kv_pool_row_elems(const srt_kv_pool *kv);   /* n_kv_heads * head_dim */
/* Bytes one slot costs over all layers, K and V (tp_size 1): for sizing a pool from a memory
 * budget. A tensor-parallel rank's pool needs 1/tp_size of it. */
size_t            srt_kv_bytes_per_slot(const struct srt_model_config *cfg, srt_dtype dtype);
SRT_API void     *srt_kv_pool_k(srt_kv_pool *kv, int32_t layer);
SRT_API void     *srt_kv_pool_v(srt_kv_pool *kv, int32_t layer);

#endif
