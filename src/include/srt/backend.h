/* The compute interface the model runner drives. The CPU backend (src/backend/cpu) is one
 * implementation; the CUDA backend implements the same table over device pointers.
 *
 * All activation pointers are in the backend's memory (host for CPU, device for CUDA):
 * f32, row-major, contiguous. Weights are srt_weight as stored. No op allocates. */
#ifndef SRT_BACKEND_H
#define SRT_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "srt/batch.h"
#include "srt/common.h"
#include "srt/tensor.h"

typedef struct srt_backend srt_backend;

/* The body of a graph (see graph_capture below): issues ops, returns SRT_OK or SRT_ERROR. */
typedef int (*srt_graph_body)(void *user, srt_err *err);
/* Graph keys are padded decode batch sizes, at most this many sequences. */
#define SRT_GRAPH_MAX_BS 256

/* Attention over the KV cache for every token of a batch (causal within a sequence,
 * attending a cached prefix through batch->seq_slots). */
typedef struct srt_attn_args {
    const srt_forward_batch *batch;
    const float *q;          /* [n_tokens][n_heads][head_dim], RoPE applied */
    float       *out;        /* [n_tokens][n_heads][head_dim] */
    const void  *k_cache;    /* [n_slots][n_kv_heads][head_dim] */
    const void  *v_cache;
    srt_dtype    kv_dtype;   /* SRT_F32 or SRT_F16 */
    int32_t      n_heads;
    int32_t      n_kv_heads;
    int32_t      head_dim;
    float        scale;      /* usually 1/sqrt(head_dim) */
} srt_attn_args;

typedef struct srt_backend_ops {
    const char *name;
    void (*destroy)(srt_backend *be);
    /* Tell the backend the largest matmul it will be asked for, so it can size scratch. */
    int  (*reserve_matmul)(srt_backend *be, const srt_weight *w, int64_t n_tok, srt_err *err);
    /* y[t][r] = x[t] . W[r] + bias[r]; bias f32 or NULL */
    void (*matmul)(srt_backend *be, const srt_weight *w, const float *bias,
                   const float *x, int64_t n_tok, float *y);
    /* out[t] = table[ids[t]] as f32 */
    void (*embed)(srt_backend *be, const srt_weight *table, const int32_t *ids, int64_t n_tok,
                  float *out);
    /* rows of width dim: out = x / rms(x) * w */
    void (*rmsnorm)(srt_backend *be, const float *x, const srt_weight *w, float eps,
                    int64_t n_rows, int64_t dim, float *out);
    void (*silu)(srt_backend *be, const float *x, int64_t n, float *out);
    void (*mul)(srt_backend *be, float *y, const float *x, int64_t n);            /* y *= x */
    void (*silu_mul)(srt_backend *be, const float *gate, const float *up, int64_t n, float *out);
    void (*add)(srt_backend *be, float *y, const float *x, int64_t n);            /* y += x */
    void (*add3)(srt_backend *be, float *out, const float *a, const float *b, int64_t n); /* out = a + b */
    /* NeoX (rotate_half) RoPE in place on x[n_tok][n_heads][head_dim], with
     * cos_sin[t] = { cos[0..head_dim), sin[0..head_dim) } per token */
    void (*rope)(srt_backend *be, float *x, int64_t n_tok, int32_t n_heads, int32_t head_dim,
                 const float *cos_sin);
    /* K/V rows [n_tok][row_elems] into the cache at batch->out_slots */
    void (*kv_store)(srt_backend *be, const srt_forward_batch *b, const float *k, const float *v,
                     void *k_cache, void *v_cache, srt_dtype kv_dtype, int32_t row_elems);
    void (*attention)(srt_backend *be, const srt_attn_args *a);
    int  (*n_threads)(const srt_backend *be);

    /* ---- Optional: backends whose memory is not the host's (CUDA). NULL on the CPU backend,
     * where host pointers are the backend's memory. See src/include/srt/backend_cuda.h for the
     * runner's side of the contract. The ops above take pointers in the backend's memory for
     * activations, ids, positions, cos_sin and the KV cache; srt_weight and bias pointers stay
     * the host's: the backend finds its own copy, made by load_weight. ---- */
    /* Backend memory (aligned to 256 bytes) from the backend's pool; NULL and err when full. */
    void *(*alloc)(srt_backend *be, size_t bytes, srt_err *err);
    void  (*free)(srt_backend *be, void *p);
    /* host -> backend, in order with the ops (the host buffer may be reused on return) */
    int   (*upload)(srt_backend *be, void *dst, const void *src, size_t bytes, srt_err *err);
    /* backend -> host; waits for every op queued before it and reports their errors */
    int   (*download)(srt_backend *be, void *dst, const void *src, size_t bytes, srt_err *err);
    /* backend -> backend, in order with the ops */
    void  (*copy)(srt_backend *be, void *dst, const void *src, size_t bytes);
    /* Makes the backend's copy of a weight (quantized ones dequantized) once, at load time;
     * f32 1-D arrays passed to ops by host pointer (biases, inv_freq) are registered as
     * srt_weight { SRT_F32, rows 1, cols n, data, row_stride n*4 }. Idempotent. */
    int   (*load_weight)(srt_backend *be, const srt_weight *w, srt_err *err);
    /* Announces the batch of the next step: copies its slot metadata (out_slots, positions,
     * seq_start, flattened seq_slots) to backend memory, so kv_store and attention called with
     * this same batch pointer use that copy. Must be called before them, once per step. */
    int   (*begin_batch)(srt_backend *be, const srt_forward_batch *b, srt_err *err);
    /* cos_sin[t] = {cos, sin}(positions[t] * inv_freq) in the rope layout; positions and
     * cos_sin in backend memory, inv_freq a registered host array of head_dim/2 floats */
    void  (*rope_cos_sin)(srt_backend *be, const int32_t *positions, int64_t n_tok,
                          const float *inv_freq, int32_t head_dim, float *cos_sin);
    /* dst[i] = src[rows[i]], rows of width floats; rows in backend memory */
    void  (*gather_rows)(srt_backend *be, float *dst, const float *src, const int32_t *rows,
                         int32_t n_rows, int64_t width);
    /* Waits for the queued ops; returns the first error any op met since the last sync
     * (the void ops above cannot return one) and clears it. */
    int   (*sync)(srt_backend *be, srt_err *err);
    /* Optional fusion (NULL: call add3 then rmsnorm): sum = a + b (sum may be a), then
     * out = rmsnorm(sum) * w, rows of width dim. The same numbers as the two ops. */
    void  (*add_rmsnorm)(srt_backend *be, float *sum, const float *a, const float *b, const srt_weight *w,
                         float eps, int64_t n_rows, int64_t dim, float *out);
    /* Optional: the stream the ops are queued on (a cudaStream_t), for work that must run in
     * order with them, such as NCCL collectives on tensor-parallel activations. NULL: none. */
    void *(*stream)(srt_backend *be);

    /* ---- Optional: graphs (CUDA graphs), for decode steps. NULL: the backend has none and the
     * runner runs every step eagerly. The runner's side of the contract is in
     * src/include/srt/backend_cuda.h ("CUDA graphs"). A graph is a recording: graph_capture
     * calls body(user) once and keeps every op it issues, with the very pointers and scalars
     * it was given, WITHOUT executing them; graph_replay executes that recording again, on
     * whatever the same addresses hold by then. So every buffer a body touches must keep its
     * address, and every size it passes must be the graph's, for as long as the graph lives. ---- */
    /* Records body's ops as the graph of key bs in [1, SRT_GRAPH_MAX_BS] (replacing an older
     * one). Called after begin_batch of a batch of bs tokens; body may not upload, download,
     * sync, alloc or begin_batch. */
    int   (*graph_capture)(srt_backend *be, int32_t bs, srt_graph_body body, void *user, srt_err *err);
    /* 1 when a graph of key bs is held. A backend may drop its graphs on its own (its batch
     * metadata had to move): the caller then captures again. */
    int   (*graph_ready)(srt_backend *be, int32_t bs);
    /* Executes the graph of bs, in order with the ops; the batch announced last must have bs tokens. */
    int   (*graph_replay)(srt_backend *be, int32_t bs, srt_err *err);
    void  (*graph_clear)(srt_backend *be);

    /* Optional fusion (NULL: n matmul calls): y[i] = x . W[i] + bias[i] (bias[i] may be NULL)
     * for n <= SRT_MATMUL_N_MAX weights of one input (q/k/v, gate/up) with as many columns, in
     * one go (on the CPU one parallel region instead of n). The same numbers as the n calls. */
    void  (*matmul_n)(srt_backend *be, int n, const srt_weight *const *w, const float *const *bias,
                      const float *x, int64_t n_tok, float *const *y);
    /* Optional (NULL: none): a matrix in a layout of the backend's own that its matmul reads
     * faster. pack_bytes is the size of w's packed copy, 0 when it has none for w; pack writes
     * it to dst (host memory, pack_bytes long) and describes it in *out. A packed weight goes
     * only to matmul, matmul_n and embed (a tied embedding is packed with its lm_head). */
    size_t (*pack_bytes)(srt_backend *be, const srt_weight *w);
    void   (*pack)(srt_backend *be, const srt_weight *w, void *dst, srt_weight *out);
} srt_backend_ops;
#define SRT_MATMUL_N_MAX 4

struct srt_backend {
    const srt_backend_ops *ops;
    void                  *impl;
};

/* precise_matmul: multiply f32 activations with dequantized weight rows (as HF does with
 * a dequantized checkpoint) instead of quantizing activations to 8 bits for integer dot
 * products. Slower on quantized weights; bit-for-bit the same choice for f32/f16/bf16 rows.
 * SRT_CPU_MATMUL=precise (or =reference, the scalar test kernel) forces it. */
SRT_API srt_backend *srt_cpu_backend_create(int n_threads, int precise_matmul, srt_err *err);
static inline void srt_backend_free(srt_backend *be) { if (be) be->ops->destroy(be); }

/* Memory helpers for code that drives either kind of backend: the backend's own memory when it
 * has some (ops->alloc set: CUDA), host memory otherwise (CPU: 64-byte aligned, zeroed). */
static inline void *srt_backend_alloc(srt_backend *be, size_t bytes, srt_err *err)
{
    if (be->ops->alloc)
        return be->ops->alloc(be, bytes, err);
    size_t n = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, n ? n : 64);
    if (p)
        memset(p, 0, n ? n : 64);
    else
        srt_err_set(err, "out of memory for %zu bytes", bytes);
    return p;
}
static inline void srt_backend_release(srt_backend *be, void *p)
{
    if (be->ops->free)
        be->ops->free(be, p);
    else
        free(p);
}
static inline int srt_backend_upload(srt_backend *be, void *dst, const void *src, size_t bytes, srt_err *err)
{
    if (be->ops->upload)
        return be->ops->upload(be, dst, src, bytes, err);
    memcpy(dst, src, bytes);
    return SRT_OK;
}
static inline int srt_backend_download(srt_backend *be, void *dst, const void *src, size_t bytes, srt_err *err)
{
    if (be->ops->download)
        return be->ops->download(be, dst, src, bytes, err);
    memcpy(dst, src, bytes);
    return SRT_OK;
}

#endif
