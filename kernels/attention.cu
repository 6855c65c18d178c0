/* Attention over the paged KV pool (token-granular slots, SGLang's req_to_token layout).
 *
 * Decode: flash-decoding. Grid (seq, head, split); each split covers DEC_CHUNK context positions,
 * its warps keep online-softmax state over interleaved positions, and a second kernel merges the
 * splits. Extend: one block per (new token, head), same warp-level online softmax, causal limit
 * from the token's context position. CPU twin: src/backend/cpu/attention.c. */
#include <math.h>

#include "common.cuh"

#define ATT_WARPS  4
#define DEC_CHUNK  256
#define MAX_HD     256
#define MAX_PER_LANE (MAX_HD / 32)

/* Online softmax over context positions [begin, end) for one query held in registers.
 * Leaves this block's merged (m, l, acc[hd]) in shared memory slot 0. */
static __device__ void attend_range(const float *q_reg, const uint16_t *k_cache,
                                    const uint16_t *v_cache, const int32_t *slots, int begin,
                                    int end, int kv_dim, int kv_off, int head_dim, float *sm_m,
                                    float *sm_l, float *sm_acc)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float m = -INFINITY, l = 0.0f, acc[MAX_PER_LANE];

    for (int e = 0; e < MAX_PER_LANE; e++)
        acc[e] = 0.0f;
    for (int p = begin + warp; p < end; p += ATT_WARPS) {
        int64_t base = (int64_t)slots[p] * kv_dim + kv_off;
        float dot = 0.0f;
        for (int e = 0; e < MAX_PER_LANE; e++) {
            int i = lane + 32 * e;
            if (i < head_dim)
                dot += q_reg[e] * bf2f(k_cache[base + i]);
        }
        dot = warp_sum(dot);
        float m_new = fmaxf(m, dot);
        float corr = __expf(m - m_new), pw = __expf(dot - m_new);
        l = l * corr + pw;
        for (int e = 0; e < MAX_PER_LANE; e++) {
            int i = lane + 32 * e;
            if (i < head_dim)
                acc[e] = acc[e] * corr + pw * bf2f(v_cache[base + i]);
        }
        m = m_new;
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
    for (int e = 0; e < MAX_PER_LANE; e++) {
        int i = lane + 32 * e;
        if (i < head_dim)
            sm_acc[warp * MAX_HD + i] = acc[e];
    }
    __syncthreads();
    /* Merge the warps into slot 0. */
    float M = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++)
        M = fmaxf(M, sm_m[w]);
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        float a = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++)
            if (sm_m[w] != -INFINITY)
                a += sm_acc[w * MAX_HD + i] * __expf(sm_m[w] - M);
        sm_acc[i] = a;   /* warp 0's row; every thread read all rows of column i first */
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float L = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++)
            if (sm_m[w] != -INFINITY)
                L += sm_l[w] * __expf(sm_m[w] - M);
        sm_m[0] = M;
        sm_l[0] = L;
    }
    __syncthreads();
}

static __device__ void load_query(const uint16_t *q, int head_dim, float scale, float *q_reg)
{
    int lane = threadIdx.x & 31;
    for (int e = 0; e < MAX_PER_LANE; e++) {
        int i = lane + 32 * e;
        q_reg[e] = i < head_dim ? bf2f(q[i]) * scale : 0.0f;
    }
}

__global__ void decode_partial_kernel(const uint16_t *q, int q_stride, const uint16_t *k_cache,
                                      const uint16_t *v_cache, const int32_t *seq_len,
                                      const int32_t *slot_start, const int32_t *slot_table,
                                      int n_heads, int n_kv_heads, int head_dim, float scale,
                                      int n_splits, float *ws)
{
    __shared__ float sm_m[ATT_WARPS], sm_l[ATT_WARPS], sm_acc[ATT_WARPS * MAX_HD];
    int s = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
    int len = seq_len[s];
    int begin = split * DEC_CHUNK, end = min(len, begin + DEC_CHUNK);
    int kvh = h / (n_heads / n_kv_heads);
    float q_reg[MAX_PER_LANE];
    float *out = ws + ((int64_t)(s * n_heads + h) * n_splits + split) * (head_dim + 2);

    if (begin >= end) {
        if (threadIdx.x == 0) {
            out[0] = -INFINITY;
            out[1] = 0.0f;
        }
        return;
    }
    load_query(q + (int64_t)s * q_stride + h * head_dim, head_dim, scale, q_reg);
    attend_range(q_reg, k_cache, v_cache, slot_table + slot_start[s], begin, end,
                 n_kv_heads * head_dim, kvh * head_dim, head_dim, sm_m, sm_l, sm_acc);
    if (threadIdx.x == 0) {
        out[0] = sm_m[0];
        out[1] = sm_l[0];
    }
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x)
        out[2 + i] = sm_acc[i];
}

__global__ void decode_merge_kernel(const float *ws, int n_heads, int head_dim, int n_splits,
                                    uint16_t *out)
{
    int s = blockIdx.x, h = blockIdx.y;
    const float *part = ws + (int64_t)(s * n_heads + h) * n_splits * (head_dim + 2);
    float M = -INFINITY, L = 0.0f;

    for (int k = 0; k < n_splits; k++)
        M = fmaxf(M, part[k * (head_dim + 2)]);
    for (int k = 0; k < n_splits; k++) {
        float m = part[k * (head_dim + 2)];
        if (m != -INFINITY)
            L += part[k * (head_dim + 2) + 1] * __expf(m - M);
    }
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        float a = 0.0f;
        for (int k = 0; k < n_splits; k++) {
            float m = part[k * (head_dim + 2)];
            if (m != -INFINITY)
                a += part[k * (head_dim + 2) + 2 + i] * __expf(m - M);
        }
        out[(int64_t)(s * n_heads + h) * head_dim + i] = f2bf(L > 0.0f ? a / L : 0.0f);
    }
}

static int n_splits_for(int max_seq_len)
{
    int n = (max_seq_len + DEC_CHUNK - 1) / DEC_CHUNK;
    return n < 1 ? 1 : n;
}

extern "C" size_t srt_cuda_decode_attention_workspace_bytes(int n_seqs, int n_heads, int head_dim,
                                                            int max_seq_len)
{
    return (size_t)n_seqs * n_heads * n_splits_for(max_seq_len) * (head_dim + 2) * sizeof(float);
}

extern "C" int srt_cuda_decode_attention(const srt_bf16_bits *q, int q_stride,
                                         const srt_bf16_bits *k_cache,
                                         const srt_bf16_bits *v_cache, const srt_attn_batch *b,
                                         int n_heads, int n_kv_heads, int head_dim, float scale,
                                         void *workspace, srt_bf16_bits *out, void *stream)
{
    if (b->n_seqs <= 0)
        return 0;
    if (head_dim > MAX_HD || n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
        return (int)cudaErrorInvalidValue;
    int n_splits = n_splits_for(b->max_seq_len);
    dim3 grid(b->n_seqs, n_heads, n_splits);
    decode_partial_kernel<<<grid, ATT_WARPS * 32, 0, SRT_STREAM(stream)>>>(
        q, q_stride, k_cache, v_cache, b->seq_len, b->slot_start, b->slot_table, n_heads,
        n_kv_heads, head_dim, scale, n_splits, (float *)workspace);
    dim3 grid2(b->n_seqs, n_heads);
    decode_merge_kernel<<<grid2, head_dim < 32 ? 32 : head_dim, 0, SRT_STREAM(stream)>>>(
        (const float *)workspace, n_heads, head_dim, n_splits, out);
    return launch_status();
}

__global__ void extend_kernel(const uint16_t *q, int q_stride, const uint16_t *k_cache,
                              const uint16_t *v_cache, int n_seqs, const int32_t *q_start,
                              const int32_t *seq_len, const int32_t *slot_start,
                              const int32_t *slot_table, int n_heads, int n_kv_heads,
                              int head_dim, float scale, uint16_t *out)
{
    __shared__ float sm_m[ATT_WARPS], sm_l[ATT_WARPS], sm_acc[ATT_WARPS * MAX_HD];
    int row = blockIdx.x, h = blockIdx.y;
    int lo = 0, hi = n_seqs - 1;

    while (lo < hi) {   /* the sequence whose rows contain `row` */
        int mid = (lo + hi + 1) / 2;
        if (q_start[mid] <= row)
            lo = mid;
        else
            hi = mid - 1;
    }
    int s = lo;
    int n_new = q_start[s + 1] - q_start[s];
    int ctx_pos = seq_len[s] - n_new + (row - q_start[s]);
    int kvh = h / (n_heads / n_kv_heads);
    float q_reg[MAX_PER_LANE];

    load_query(q + (int64_t)row * q_stride + h * head_dim, head_dim, scale, q_reg);
    attend_range(q_reg, k_cache, v_cache, slot_table + slot_start[s], 0, ctx_pos + 1,
                 n_kv_heads * head_dim, kvh * head_dim, head_dim, sm_m, sm_l, sm_acc);
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x)
        out[((int64_t)row * n_heads + h) * head_dim + i] =
            f2bf(sm_l[0] > 0.0f ? sm_acc[i] / sm_l[0] : 0.0f);
}

extern "C" int srt_cuda_extend_attention(const srt_bf16_bits *q, int q_stride,
                                         const srt_bf16_bits *k_cache,
                                         const srt_bf16_bits *v_cache, const srt_attn_batch *b,
                                         int n_heads, int n_kv_heads, int head_dim, float scale,
                                         srt_bf16_bits *out, void *stream)
{
    if (b->n_tokens <= 0)
        return 0;
    if (head_dim > MAX_HD || n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
        return (int)cudaErrorInvalidValue;
    dim3 grid(b->n_tokens, n_heads);
    extend_kernel<<<grid, ATT_WARPS * 32, 0, SRT_STREAM(stream)>>>(
        q, q_stride, k_cache, v_cache, b->n_seqs, b->q_start, b->seq_len, b->slot_start,
        b->slot_table, n_heads, n_kv_heads, head_dim, scale, out);
    return launch_status();
}
