/* Embedding, RMSNorm (fused with the residual add), per-head RMSNorm, RoPE, SiLU x up, KV write.
 * CPU twins: srt_cpu_dequant_row, srt_cpu_rmsnorm, srt_cpu_silu_mul and the CPU attention's
 * RoPE / KV write in src/backend/cpu. */
#include "common.cuh"

__global__ void embedding_kernel(const uint16_t *table, int64_t vocab, int dim, const int32_t *ids,
                                 float *out)
{
    int t = blockIdx.x;
    int32_t id = ids[t];
    float *o = out + (int64_t)t * dim;
    if (id < 0 || id >= vocab) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x)
            o[i] = 0.0f;
        return;
    }
    const uint16_t *row = table + (int64_t)id * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        o[i] = bf2f(row[i]);
}

extern "C" int srt_cuda_embedding(const srt_bf16_bits *table, int64_t vocab, int dim,
                                  const int32_t *ids, int n_tok, float *out, void *stream)
{
    if (n_tok <= 0)
        return 0;
    embedding_kernel<<<n_tok, 256, 0, SRT_STREAM(stream)>>>(table, vocab, dim, ids, out);
    return launch_status();
}

__global__ void rmsnorm_residual_kernel(float *residual, const float *add, const uint16_t *w,
                                        float eps, int dim, uint16_t *out)
{
    __shared__ float scratch[32];
    int t = blockIdx.x;
    float *x = residual + (int64_t)t * dim;
    const float *a = add ? add + (int64_t)t * dim : NULL;
    float ss = 0.0f;

    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = x[i];
        if (a) {
            v += a[i];
            x[i] = v;
        }
        ss += v * v;
    }
    ss = block_sum(ss, scratch);
    float inv = rsqrtf(ss / (float)dim + eps);
    uint16_t *o = out + (int64_t)t * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        o[i] = f2bf(x[i] * inv * bf2f(w[i]));
}

extern "C" int srt_cuda_rmsnorm_residual(float *residual, const float *add,
                                         const srt_bf16_bits *w, float eps, int n_tok, int dim,
                                         srt_bf16_bits *out, void *stream)
{
    if (n_tok <= 0)
        return 0;
    int threads = dim >= 1024 ? 1024 : ((dim + 31) / 32) * 32;
    rmsnorm_residual_kernel<<<n_tok, threads, 0, SRT_STREAM(stream)>>>(residual, add, w, eps, dim,
                                                                       out);
    return launch_status();
}

/* One warp per (token, head). */
__global__ void head_rmsnorm_kernel(uint16_t *x, const uint16_t *w, float eps, int n_rows,
                                    int head_dim)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (row >= n_rows)
        return;
    uint16_t *v = x + (int64_t)row * head_dim;
    float ss = 0.0f;
    for (int i = lane; i < head_dim; i += 32) {
        float f = bf2f(v[i]);
        ss += f * f;
    }
    ss = warp_sum(ss);
    float inv = rsqrtf(ss / (float)head_dim + eps);
    for (int i = lane; i < head_dim; i += 32)
        v[i] = f2bf(bf2f(v[i]) * inv * bf2f(w[i]));
}

extern "C" int srt_cuda_head_rmsnorm(srt_bf16_bits *x, const srt_bf16_bits *w, float eps,
                                     int n_tok, int n_heads, int head_dim, void *stream)
{
    int rows = n_tok * n_heads;
    if (rows <= 0)
        return 0;
    head_rmsnorm_kernel<<<(rows + 7) / 8, 256, 0, SRT_STREAM(stream)>>>(x, w, eps, rows, head_dim);
    return launch_status();
}

__global__ void rope_kernel(uint16_t *q, uint16_t *k, const int32_t *positions,
                            const float *inv_freq, int n_q_heads, int n_kv_heads, int head_dim,
                            int q_stride, int k_stride)
{
    int t = blockIdx.x;
    int half = head_dim / 2;
    float pos = (float)positions[t];
    int total = (n_q_heads + n_kv_heads) * half;

    for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
        int h = idx / half, i = idx % half;
        uint16_t *base = h < n_q_heads ? q + (int64_t)t * q_stride + h * head_dim
                                       : k + (int64_t)t * k_stride + (h - n_q_heads) * head_dim;
        float s, c;
        sincosf(pos * inv_freq[i], &s, &c);
        float x1 = bf2f(base[i]), x2 = bf2f(base[i + half]);
        base[i] = f2bf(x1 * c - x2 * s);
        base[i + half] = f2bf(x2 * c + x1 * s);
    }
}

extern "C" int srt_cuda_rope(srt_bf16_bits *q, srt_bf16_bits *k, const int32_t *positions,
                             const float *inv_freq, int n_tok, int n_q_heads, int n_kv_heads,
                             int head_dim, int q_stride, int k_stride, void *stream)
{
    if (n_tok <= 0)
        return 0;
    rope_kernel<<<n_tok, 256, 0, SRT_STREAM(stream)>>>(q, k, positions, inv_freq, n_q_heads,
                                                       n_kv_heads, head_dim, q_stride, k_stride);
    return launch_status();
}

__global__ void silu_mul_kernel(const uint16_t *gate_up, int64_t total, int inter, uint16_t *out)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / inter, j = i % inter;
        float g = bf2f(gate_up[t * 2 * inter + j]);
        float u = bf2f(gate_up[t * 2 * inter + inter + j]);
        out[i] = f2bf(g / (1.0f + __expf(-g)) * u);
    }
}

extern "C" int srt_cuda_silu_mul(const srt_bf16_bits *gate_up, int n_tok, int inter,
                                 srt_bf16_bits *out, void *stream)
{
    int64_t total = (int64_t)n_tok * inter;
    if (total <= 0)
        return 0;
    int blocks = (int)((total + 255) / 256);
    if (blocks > 65535)
        blocks = 65535;
    silu_mul_kernel<<<blocks, 256, 0, SRT_STREAM(stream)>>>(gate_up, total, inter, out);
    return launch_status();
}

__global__ void kv_write_kernel(const uint16_t *k, const uint16_t *v, int k_stride, int v_stride,
                                const int32_t *slots, int kv_dim, uint16_t *k_cache,
                                uint16_t *v_cache)
{
    int t = blockIdx.x;
    int64_t slot = slots[t];
    for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
        k_cache[slot * kv_dim + i] = k[(int64_t)t * k_stride + i];
        v_cache[slot * kv_dim + i] = v[(int64_t)t * v_stride + i];
    }
}

extern "C" int srt_cuda_kv_write(const srt_bf16_bits *k, const srt_bf16_bits *v, int k_stride,
                                 int v_stride, const int32_t *slots, int n_tok, int kv_dim,
                                 srt_bf16_bits *k_cache, srt_bf16_bits *v_cache, void *stream)
{
    if (n_tok <= 0)
        return 0;
    kv_write_kernel<<<n_tok, 256, 0, SRT_STREAM(stream)>>>(k, v, k_stride, v_stride, slots, kv_dim,
                                                           k_cache, v_cache);
    return launch_status();
}
