/* CUDA kernels of the engine, callable from C (by src/backend/cuda/cuda_backend.c). Activations
 * are f32 as in the backend ops table; GEMM inputs are cast to bf16; softmax and every
 * accumulation are f32. Each kernel has a CPU twin in src/backend/cpu that t/gpu/test_kernels.c
 * (run by scripts/gpu-check) holds it against.
 *
 * All launchers are asynchronous on `stream` (a cudaStream_t; NULL = legacy default stream) and
 * return 0, or a cudaError_t code for a failed launch. None allocates. */
#ifndef SRT_KERNELS_H
#define SRT_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t srt_bf16_bits;   /* bf16 as raw bits on the C side */

/* out[t][:] = f32(table[ids[t]][:]) */
int srt_cuda_embedding(const srt_bf16_bits *table, int64_t vocab, int dim, const int32_t *ids,
                       int n_tok, float *out, void *stream);

/* Per-sequence sampling parameters, on the device. */
typedef struct srt_cuda_sampling {
    float    temperature;        /* <= 0: greedy */
    int32_t  top_k;              /* <= 0: off */
    float    top_p;              /* >= 1: off */
    float    min_p;              /* <= 0: off */
    float    repetition_penalty; /* 1: off */
    float    frequency_penalty;
    float    presence_penalty;
    uint64_t seed;
    uint64_t step;               /* advances the counter-based RNG */
} srt_cuda_sampling;

/* Applies penalties from token counts (counts[s][vocab], may be NULL) and samples one token per
 * row of logits [n_seqs][vocab] (modified in place); params on the device. workspace: unused. */
int srt_cuda_launch_sample(float *logits, int n_seqs, int vocab, const srt_cuda_sampling *params,
                           const int32_t *counts, void *workspace, int32_t *out_ids, void *stream);

/* ---- the f32 ops of the backend table (kernels/ops.cu) ---- */

/* KV cache element types of the slot-indexed caches (values of srt_dtype: F32, F16, BF16). */
enum { SRT_KV_F32 = 0, SRT_KV_F16 = 1, SRT_KV_BF16 = 2 };

#define SRT_ATTN_MAX_SPLITS 64

/* A forward batch's metadata on the device (token-level KV slots, src/include/srt/batch.h).
 * Token t of sequence s (seq_start[s] <= t < seq_start[s+1]) attends to context positions
 * 0..positions[t] at slots slot_table[slot_start[s] + j]. A token with position -1 (padding of
 * a graph-replayed batch) attends to nothing and outputs zeros. */
typedef struct srt_cuda_slot_batch {
    int            n_tokens;     /* host-side: grid size */
    int            n_seqs;       /* host-side */
    const int32_t *positions;    /* [n_tokens] */
    const int32_t *seq_start;    /* [n_seqs + 1] */
    const int32_t *slot_start;   /* [n_seqs] offsets into slot_table */
    const int32_t *slot_table;
} srt_cuda_slot_batch;

int srt_cuda_f32_to_bf16(const float *x, int64_t n, srt_bf16_bits *out, void *stream);
int srt_cuda_add_f32(float *y, const float *x, int64_t n, void *stream);          /* y += x */
int srt_cuda_mul_f32(float *y, const float *x, int64_t n, void *stream);          /* y *= x */
int srt_cuda_add3_f32(float *out, const float *a, const float *b, int64_t n, void *stream);
int srt_cuda_silu_f32(const float *x, int64_t n, float *out, void *stream);
int srt_cuda_silu_mul_f32(const float *gate, const float *up, int64_t n, float *out, void *stream);
/* y[t][r] += bias[r] */
int srt_cuda_bias_add_f32(float *y, const float *bias, int64_t n_tok, int64_t rows, void *stream);
/* out = x / sqrt(mean(x^2) + eps) * w, rows of width dim; w f32 */
int srt_cuda_rmsnorm_f32(const float *x, const float *w, float eps, int64_t n_rows, int64_t dim,
                         float *out, void *stream);
/* sum = a + b (sum may alias a); out = sum / sqrt(mean(sum^2) + eps) * w */
int srt_cuda_add_rmsnorm_f32(float *sum, const float *a, const float *b, const float *w, float eps,
                             int64_t n_rows, int64_t dim, float *out, void *stream);
/* cos_sin[t] = { cos(pos*inv_freq[i]) x2 halves, sin(...) x2 halves }: [n_tok][2][head_dim] */
int srt_cuda_rope_cos_sin(const int32_t *positions, const float *inv_freq, int64_t n_tok,
                          int head_dim, float *cos_sin, void *stream);
/* NeoX RoPE in place on x[n_tok][n_heads][head_dim] from the cos_sin table above */
int srt_cuda_rope_f32(float *x, int64_t n_tok, int n_heads, int head_dim, const float *cos_sin,
                      void *stream);
/* k/v [n_tok][row_elems] f32 into cache rows slots[t] (negative slot: skipped) */
int srt_cuda_kv_store_f32(const float *k, const float *v, const int32_t *slots, int64_t n_tok,
                          int row_elems, int kv_type, void *k_cache, void *v_cache, void *stream);
/* Splits per (token, head) that fill n_sm multiprocessors; depends on counts only. */
int    srt_cuda_attention_splits(int n_tok, int n_heads, int n_sm);
size_t srt_cuda_attention_workspace_bytes(int n_tok, int n_heads, int head_dim, int n_splits);
/* q/out [n_tokens][n_heads][head_dim] f32; caches [slots][n_kv_heads][head_dim] of kv_type */
int srt_cuda_attention_f32(const float *q, const void *k_cache, const void *v_cache, int kv_type,
                           const srt_cuda_slot_batch *b, int n_heads, int n_kv_heads, int head_dim,
                           float scale, int n_splits, void *workspace, float *out, void *stream);
/* dst[i][:] = src[rows[i]][:] */
int srt_cuda_gather_rows_f32(const float *src, const int32_t *rows, int n_rows, int64_t width,
                             float *dst, void *stream);

#ifdef __cplusplus
}
#endif

#endif
