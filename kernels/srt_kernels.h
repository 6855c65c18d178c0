/* CUDA kernels of the engine, callable from C. Activations that feed GEMMs are bf16; the residual
 * stream, softmax and every accumulation are f32. Each kernel has a CPU twin in src/backend/cpu
 * that scripts/gpu-check holds it against.
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

/* residual += add (when add != NULL); out = bf16(residual / rms(residual) * w) */
int srt_cuda_rmsnorm_residual(float *residual, const float *add, const srt_bf16_bits *w,
                              float eps, int n_tok, int dim, srt_bf16_bits *out, void *stream);

/* Per-head RMSNorm in place over [n_tok][n_heads][head_dim] (Qwen3's q_norm / k_norm). */
int srt_cuda_head_rmsnorm(srt_bf16_bits *x, const srt_bf16_bits *w, float eps, int n_tok,
                          int n_heads, int head_dim, void *stream);

/* NeoX (rotate_half) RoPE in place on q [n_tok][n_q_heads][hd] and k [n_tok][n_kv_heads][hd].
 * inv_freq[hd/2] is precomputed on the host (llama3 scaling folds into it). */
int srt_cuda_rope(srt_bf16_bits *q, srt_bf16_bits *k, const int32_t *positions,
                  const float *inv_freq, int n_tok, int n_q_heads, int n_kv_heads, int head_dim,
                  int q_stride, int k_stride, void *stream);

/* out[t][i] = bf16(silu(gate_up[t][i]) * gate_up[t][inter + i]) */
int srt_cuda_silu_mul(const srt_bf16_bits *gate_up, int n_tok, int inter, srt_bf16_bits *out,
                      void *stream);

/* k_cache[slots[t]][:] = k[t][:], likewise v; kv_dim = n_kv_heads * head_dim. */
int srt_cuda_kv_write(const srt_bf16_bits *k, const srt_bf16_bits *v, int k_stride, int v_stride,
                      const int32_t *slots, int n_tok, int kv_dim, srt_bf16_bits *k_cache,
                      srt_bf16_bits *v_cache, void *stream);

/* Ragged batch description shared by the attention kernels.
 * Sequence s has its new tokens at rows [q_start[s], q_start[s+1]) of q, and its whole context
 * (cached prefix then new tokens) at KV slots slot_table[slot_start[s] .. slot_start[s]+seq_len[s]).
 * New token j of sequence s sits at context position seq_len[s] - n_new + j (causal). */
typedef struct srt_attn_batch {
    int            n_seqs;
    int            n_tokens;    /* rows of q: q_start[n_seqs], known on the host */
    const int32_t *q_start;     /* [n_seqs + 1], device */
    const int32_t *seq_len;     /* [n_seqs], device */
    const int32_t *slot_start;  /* [n_seqs], device */
    const int32_t *slot_table;  /* device */
    int            max_seq_len; /* host-side bound, sizes the split-K grid */
    int            max_new;     /* host-side bound on new tokens per sequence */
} srt_attn_batch;

/* Decode attention (one new token per sequence), split-K flash-decoding.
 * q [n_seqs][n_heads][hd] with row stride q_stride; out [n_seqs][n_heads][hd] bf16.
 * workspace: srt_cuda_decode_attention_workspace_bytes(...) bytes of device memory. */
size_t srt_cuda_decode_attention_workspace_bytes(int n_seqs, int n_heads, int head_dim,
                                                 int max_seq_len);
int srt_cuda_decode_attention(const srt_bf16_bits *q, int q_stride, const srt_bf16_bits *k_cache,
                              const srt_bf16_bits *v_cache, const srt_attn_batch *b, int n_heads,
                              int n_kv_heads, int head_dim, float scale, void *workspace,
                              srt_bf16_bits *out, void *stream);

/* Extend/prefill attention: new tokens attend to the cached prefix plus the new tokens, causal. */
int srt_cuda_extend_attention(const srt_bf16_bits *q, int q_stride, const srt_bf16_bits *k_cache,
                              const srt_bf16_bits *v_cache, const srt_attn_batch *b, int n_heads,
                              int n_kv_heads, int head_dim, float scale, srt_bf16_bits *out,
                              void *stream);

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
 * row of logits [n_seqs][vocab] (modified in place). workspace: n_seqs * vocab * 8 bytes. */
int srt_cuda_sample(float *logits, int n_seqs, int vocab, const srt_cuda_sampling *params,
                    const int32_t *counts, void *workspace, int32_t *out_ids, void *stream);

#ifdef __cplusplus
}
#endif

#endif
