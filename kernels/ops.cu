/* Kernels behind the backend ops table (src/include/srt/backend.h), whose activations are f32:
 * the GEMM input cast to bf16, bias add, RMSNorm, SiLU and the elementwise ops, RoPE from a
 * per-token cos/sin table, the cos/sin table itself, the KV store into F32/F16/BF16 caches,
 * attention over token slots (split-K for decode) and row gathers.
 *
 * CPU twins (held against these by t/gpu/test_kernels.c): srt_cpu_rmsnorm, srt_cpu_silu_mul,
 * srt_cpu_add and the CPU backend's rope / kv_store / attention / embed (cpu_backend.c,
 * attention.c). Every kernel is graph-safe: no host-side value that changes between steps
 * decides a grid, except the token and sequence counts a graph is captured for. */
#include <math.h>

#include <cuda_fp16.h>

#include "common.cuh"

#define EW_THREADS 256

static int ew_blocks(int64_t n)
{
    int64_t b = (n + EW_THREADS - 1) / EW_THREADS;
    if (b > 65535 * 8)
        b = 65535 * 8;
    return b < 1 ? 1 : (int)b;
}

#define GRID_LOOP(i, n) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- casts and elementwise ---- */

__global__ void f32_to_bf16_kernel(const float *x, int64_t n, uint16_t *out)
{
    int64_t n4 = n / 4;
    GRID_LOOP(i, n4) {
        float4 v = ((const float4 *)x)[i];
        uint2 o;
        o.x = (uint32_t)f2bf(v.x) | ((uint32_t)f2bf(v.y) << 16);
        o.y = (uint32_t)f2bf(v.z) | ((uint32_t)f2bf(v.w) << 16);
        ((uint2 *)out)[i] = o;
    }
    GRID_LOOP(j, n - n4 * 4)
        out[n4 * 4 + j] = f2bf(x[n4 * 4 + j]);
}

__global__ void f32_to_bf16_scalar_kernel(const float *x, int64_t n, uint16_t *out)
{
    GRID_LOOP(i, n)
        out[i] = f2bf(x[i]);
}

extern "C" int srt_cuda_f32_to_bf16(const float *x, int64_t n, srt_bf16_bits *out, void *stream)
{
    if (n <= 0)
        return 0;
    if (((uintptr_t)x & 15) || ((uintptr_t)out & 7))   /* unaligned views */
        f32_to_bf16_scalar_kernel<<<ew_blocks(n), EW_THREADS, 0, SRT_STREAM(stream)>>>(x, n, out);
    else
        f32_to_bf16_kernel<<<ew_blocks(n / 4 + 1), EW_THREADS, 0, SRT_STREAM(stream)>>>(x, n, out);
    return launch_status();
}

enum { EW_ADD = 0, EW_MUL, EW_ADD3, EW_SILU, EW_SILU_MUL };

__global__ void ew_kernel(int op, float *y, const float *a, const float *b, int64_t n)
{
    GRID_LOOP(i, n) {
        switch (op) {
        case EW_ADD:  y[i] += a[i]; break;
        case EW_MUL:  y[i] *= a[i]; break;
        case EW_ADD3: y[i] = a[i] + b[i]; break;
        case EW_SILU: { float g = a[i]; y[i] = g / (1.0f + expf(-g)); break; }
        case EW_SILU_MUL: { float g = a[i]; y[i] = g / (1.0f + expf(-g)) * b[i]; break; }
        }
    }
}

static int ew(int op, float *y, const float *a, const float *b, int64_t n, void *stream)
{
    if (n <= 0)
        return 0;
    ew_kernel<<<ew_blocks(n), EW_THREADS, 0, SRT_STREAM(stream)>>>(op, y, a, b, n);
    return launch_status();
}

extern "C" int srt_cuda_add_f32(float *y, const float *x, int64_t n, void *stream)
{
    return ew(EW_ADD, y, x, NULL, n, stream);
}

extern "C" int srt_cuda_mul_f32(float *y, const float *x, int64_t n, void *stream)
{
    return ew(EW_MUL, y, x, NULL, n, stream);
}

extern "C" int srt_cuda_add3_f32(float *out, const float *a, const float *b, int64_t n, void *stream)
{
    return ew(EW_ADD3, out, a, b, n, stream);
}

extern "C" int srt_cuda_silu_f32(const float *x, int64_t n, float *out, void *stream)
{
    return ew(EW_SILU, out, x, NULL, n, stream);
}

extern "C" int srt_cuda_silu_mul_f32(const float *gate, const float *up, int64_t n, float *out,
                                     void *stream)
{
    return ew(EW_SILU_MUL, out, gate, up, n, stream);
}

__global__ void bias_add_kernel(float *y, const float *bias, int64_t n_tok, int64_t rows)
{
    GRID_LOOP(i, n_tok * rows)
        y[i] += bias[i % rows];
}

extern "C" int srt_cuda_bias_add_f32(float *y, const float *bias, int64_t n_tok, int64_t rows,
                                     void *stream)
{
    if (n_tok <= 0 || rows <= 0)
        return 0;
    bias_add_kernel<<<ew_blocks(n_tok * rows), EW_THREADS, 0, SRT_STREAM(stream)>>>(y, bias, n_tok,
                                                                                   rows);
    return launch_status();
}

/* ---- RMSNorm: one block per row, f32 in and out, f32 weight ---- */

__global__ void rmsnorm_f32_kernel(const float *x, const float *w, float eps, int64_t dim, float *out)
{
    __shared__ float scratch[32];
    const float *xr = x + blockIdx.x * dim;
    float *o = out + blockIdx.x * dim;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
        ss += xr[i] * xr[i];
    ss = block_sum(ss, scratch);
    float scale = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
        o[i] = xr[i] * scale * w[i];
}

/* Rows shorter than a warp (per-head norms of tiny models) still get a whole warp. */
extern "C" int srt_cuda_rmsnorm_f32(const float *x, const float *w, float eps, int64_t n_rows,
                                    int64_t dim, float *out, void *stream)
{
    if (n_rows <= 0 || dim <= 0)
        return 0;
    if (n_rows > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    int threads = dim >= 1024 ? 1024 : (int)((dim + 31) / 32) * 32;
    if (threads > 256 && dim < 4096)
        threads = 256;
    rmsnorm_f32_kernel<<<(unsigned)n_rows, threads, 0, SRT_STREAM(stream)>>>(x, w, eps, dim, out);
    return launch_status();
}

/* sum = a + b (sum may be a: in place); out = rmsnorm(sum) * w. The residual add fused with the
 * next norm: one pass over the row instead of three. */
__global__ void add_rmsnorm_f32_kernel(float *sum, const float *a, const float *b, const float *w, float eps,
                                       int64_t dim, float *out)
{
    __shared__ float scratch[32];
    int64_t base = blockIdx.x * dim;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = a[base + i] + b[base + i];
        sum[base + i] = v;
        ss += v * v;
    }
    ss = block_sum(ss, scratch);
    float scale = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
        out[base + i] = sum[base + i] * scale * w[i];
}

extern "C" int srt_cuda_add_rmsnorm_f32(float *sum, const float *a, const float *b, const float *w, float eps,
                                        int64_t n_rows, int64_t dim, float *out, void *stream)
{
    if (n_rows <= 0 || dim <= 0)
        return 0;
    if (n_rows > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    int threads = dim >= 1024 ? 1024 : (int)((dim + 31) / 32) * 32;
    if (threads > 256 && dim < 4096)
        threads = 256;
    add_rmsnorm_f32_kernel<<<(unsigned)n_rows, threads, 0, SRT_STREAM(stream)>>>(sum, a, b, w, eps, dim, out);
    return launch_status();
}

/* ---- embedding from a bf16 table into f32 rows (ids outside the table give zeros) ---- */
/* srt_cuda_embedding in elementwise.cu. */

/* ---- RoPE ---- */

/* cos_sin[t] = { cos[0..hd), sin[0..hd) }, halves repeated, as the runner's rotary module. */
__global__ void cos_sin_kernel(const int32_t *positions, const float *inv_freq, int64_t n_tok,
                               int head_dim, float *cs)
{
    int half = head_dim / 2;
    GRID_LOOP(idx, n_tok * half) {
        int64_t t = idx / half;
        int i = (int)(idx % half);
        float f = (float)positions[t] * inv_freq[i];
        float c = cosf(f), s = sinf(f);
        float *co = cs + t * 2 * head_dim, *si = co + head_dim;
        co[i] = co[i + half] = c;
        si[i] = si[i + half] = s;
    }
}

extern "C" int srt_cuda_rope_cos_sin(const int32_t *positions, const float *inv_freq, int64_t n_tok,
                                     int head_dim, float *cos_sin, void *stream)
{
    if (n_tok <= 0)
        return 0;
    cos_sin_kernel<<<ew_blocks(n_tok * (head_dim / 2)), EW_THREADS, 0, SRT_STREAM(stream)>>>(
        positions, inv_freq, n_tok, head_dim, cos_sin);
    return launch_status();
}

__global__ void rope_f32_kernel(float *x, int64_t n_tok, int n_heads, int hd, const float *cs)
{
    int half = hd / 2;
    GRID_LOOP(idx, n_tok * n_heads * half) {
        int i = (int)(idx % half);
        int64_t th = idx / half, t = th / n_heads;
        float *v = x + th * hd;
        const float *co = cs + t * 2 * hd, *si = co + hd;
        float a = v[i], b = v[i + half];
        v[i] = a * co[i] - b * si[i];
        v[i + half] = b * co[i + half] + a * si[i + half];
    }
}

extern "C" int srt_cuda_rope_f32(float *x, int64_t n_tok, int n_heads, int head_dim,
                                 const float *cos_sin, void *stream)
{
    int64_t n = n_tok * n_heads * (head_dim / 2);
    if (n <= 0)
        return 0;
    rope_f32_kernel<<<ew_blocks(n), EW_THREADS, 0, SRT_STREAM(stream)>>>(x, n_tok, n_heads, head_dim,
                                                                        cos_sin);
    return launch_status();
}

/* ---- KV cache element types ---- */

template <int KV> struct kv_elem;
template <> struct kv_elem<SRT_KV_F32> {
    typedef float T;
    static __device__ __forceinline__ float get(const float *p, int64_t i) { return p[i]; }
    static __device__ __forceinline__ void put(float *p, int64_t i, float v) { p[i] = v; }
};
template <> struct kv_elem<SRT_KV_F16> {
    typedef uint16_t T;
    static __device__ __forceinline__ float get(const uint16_t *p, int64_t i)
    {
        return __half2float(__ushort_as_half(p[i]));
    }
    static __device__ __forceinline__ void put(uint16_t *p, int64_t i, float v)
    {
        p[i] = __half_as_ushort(__float2half_rn(v));
    }
};
template <> struct kv_elem<SRT_KV_BF16> {
    typedef uint16_t T;
    static __device__ __forceinline__ float get(const uint16_t *p, int64_t i) { return bf2f(p[i]); }
    static __device__ __forceinline__ void put(uint16_t *p, int64_t i, float v) { p[i] = f2bf(v); }
};

/* k/v rows [n_tok][row] into cache rows slots[t]; a negative slot (a padded token of a
 * graph-replayed batch) writes nothing. */
template <int KV>
__global__ void kv_store_kernel(const float *k, const float *v, const int32_t *slots, int64_t n_tok,
                                int row, void *kc, void *vc)
{
    typedef typename kv_elem<KV>::T T;
    GRID_LOOP(idx, n_tok * row) {
        int64_t t = idx / row;
        int i = (int)(idx % row);
        int64_t slot = slots[t];
        if (slot < 0)
            continue;
        kv_elem<KV>::put((T *)kc, slot * row + i, k[idx]);
        kv_elem<KV>::put((T *)vc, slot * row + i, v[idx]);
    }
}

extern "C" int srt_cuda_kv_store_f32(const float *k, const float *v, const int32_t *slots,
                                     int64_t n_tok, int row_elems, int kv_type, void *k_cache,
                                     void *v_cache, void *stream)
{
    int64_t n = n_tok * row_elems;
    if (n <= 0)
        return 0;
    cudaStream_t s = SRT_STREAM(stream);
    switch (kv_type) {
    case SRT_KV_F32: kv_store_kernel<SRT_KV_F32><<<ew_blocks(n), EW_THREADS, 0, s>>>(k, v, slots, n_tok, row_elems, k_cache, v_cache); break;
    case SRT_KV_F16: kv_store_kernel<SRT_KV_F16><<<ew_blocks(n), EW_THREADS, 0, s>>>(k, v, slots, n_tok, row_elems, k_cache, v_cache); break;
    case SRT_KV_BF16: kv_store_kernel<SRT_KV_BF16><<<ew_blocks(n), EW_THREADS, 0, s>>>(k, v, slots, n_tok, row_elems, k_cache, v_cache); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return launch_status();
}

/* ---- attention over token slots ----
 * Block (token t, query head h, split z) of 4 warps. Token t belongs to sequence s (binary search
 * over seq_start) and attends to context positions [0, positions[t]] through the slots
 * slot_table[slot_start[s] + j]. The range is cut into n_splits equal pieces computed from the
 * device-side length, so a captured graph covers any context length. Each warp walks every
 * fourth position of its piece with an online softmax; lanes hold head_dim/32 elements.
 * With one split the block writes the output; otherwise partial (m, l, acc) go to the
 * workspace and a merge kernel combines them. */
#define ATT_WARPS     4
#define ATT_MAX_HD    256
#define ATT_PER_LANE  (ATT_MAX_HD / 32)

template <int KV>
__global__ void __launch_bounds__(ATT_WARPS * 32)
attn_f32_kernel(const float *q, const void *kc, const void *vc, const int32_t *positions,
                const int32_t *seq_start, int n_seqs, const int32_t *slot_start,
                const int32_t *slot_table, int n_heads, int n_kv_heads, int hd, float scale,
                int n_splits, float *ws, float *out)
{
    typedef typename kv_elem<KV>::T T;
    __shared__ float sm_m[ATT_WARPS], sm_l[ATT_WARPS], sm_acc[ATT_WARPS][ATT_MAX_HD];
    int t = blockIdx.x, h = blockIdx.y, z = blockIdx.z;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int lo = 0, hi = n_seqs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (seq_start[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    int pos = positions[t];
    int n_keys = pos < 0 ? 0 : pos + 1;   /* padded tokens (position -1) attend to nothing */
    int per = (n_keys + n_splits - 1) / n_splits;
    int begin = z * per, end = min(n_keys, begin + per);
    int kvh = h / (n_heads / n_kv_heads);
    int64_t row = (int64_t)n_kv_heads * hd, koff = (int64_t)kvh * hd;
    const int32_t *slots = slot_table + (n_keys > 0 ? slot_start[lo] : 0);
    const float *qh = q + ((int64_t)t * n_heads + h) * hd;
    float qr[ATT_PER_LANE], acc[ATT_PER_LANE], m = -INFINITY, l = 0.0f;

#pragma unroll
    for (int e = 0; e < ATT_PER_LANE; e++) {
        int i = lane + 32 * e;
        qr[e] = i < hd ? qh[i] : 0.0f;
        acc[e] = 0.0f;
    }
    for (int p = begin + warp; p < end; p += ATT_WARPS) {
        int64_t base = (int64_t)slots[p] * row + koff;
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < ATT_PER_LANE; e++) {
            int i = lane + 32 * e;
            if (i < hd)
                dot += qr[e] * kv_elem<KV>::get((const T *)kc, base + i);
        }
        dot = warp_sum(dot) * scale;
        float m_new = fmaxf(m, dot);
        float corr = expf(m - m_new), pw = expf(dot - m_new);
        l = l * corr + pw;
#pragma unroll
        for (int e = 0; e < ATT_PER_LANE; e++) {
            int i = lane + 32 * e;
            if (i < hd)
                acc[e] = acc[e] * corr + pw * kv_elem<KV>::get((const T *)vc, base + i);
        }
        m = m_new;
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int e = 0; e < ATT_PER_LANE; e++) {
        int i = lane + 32 * e;
        if (i < hd)
            sm_acc[warp][i] = acc[e];
    }
    __syncthreads();
    float M = -INFINITY, L = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++)
        M = fmaxf(M, sm_m[w]);
    for (int w = 0; w < ATT_WARPS; w++)
        if (sm_m[w] != -INFINITY)
            L += sm_l[w] * expf(sm_m[w] - M);
    int64_t item = (int64_t)t * n_heads + h;
    if (n_splits == 1) {
        float *o = out + item * hd;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            float a = 0.0f;
            for (int w = 0; w < ATT_WARPS; w++)
                if (sm_m[w] != -INFINITY)
                    a += sm_acc[w][i] * expf(sm_m[w] - M);
            o[i] = L > 0.0f ? a / L : 0.0f;
        }
        return;
    }
    float *part = ws + (item * n_splits + z) * (hd + 2);
    if (threadIdx.x == 0) {
        part[0] = M;
        part[1] = L;
    }
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++)
            if (sm_m[w] != -INFINITY)
                a += sm_acc[w][i] * expf(sm_m[w] - M);
        part[2 + i] = a;
    }
}

__global__ void attn_merge_kernel(const float *ws, int hd, int n_splits, float *out)
{
    int64_t item = blockIdx.x;
    const float *part = ws + item * n_splits * (hd + 2);
    float M = -INFINITY, L = 0.0f;
    for (int z = 0; z < n_splits; z++)
        M = fmaxf(M, part[z * (hd + 2)]);
    for (int z = 0; z < n_splits; z++) {
        float m = part[z * (hd + 2)];
        if (m != -INFINITY)
            L += part[z * (hd + 2) + 1] * expf(m - M);
    }
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.0f;
        for (int z = 0; z < n_splits; z++) {
            float m = part[z * (hd + 2)];
            if (m != -INFINITY)
                a += part[z * (hd + 2) + 2 + i] * expf(m - M);
        }
        out[item * hd + i] = L > 0.0f ? a / L : 0.0f;
    }
}

extern "C" int srt_cuda_attention_splits(int n_tok, int n_heads, int n_sm)
{
    int64_t items = (int64_t)n_tok * n_heads;
    int64_t want = (4 * (int64_t)(n_sm > 0 ? n_sm : 132) + items - 1) / items;
    if (want > SRT_ATTN_MAX_SPLITS)
        want = SRT_ATTN_MAX_SPLITS;
    return want < 1 ? 1 : (int)want;
}

extern "C" size_t srt_cuda_attention_workspace_bytes(int n_tok, int n_heads, int head_dim, int n_splits)
{
    if (n_splits <= 1)
        return 0;
    return (size_t)n_tok * n_heads * n_splits * (head_dim + 2) * sizeof(float);
}

extern "C" int srt_cuda_attention_f32(const float *q, const void *k_cache, const void *v_cache,
                                      int kv_type, const srt_cuda_slot_batch *b, int n_heads,
                                      int n_kv_heads, int head_dim, float scale, int n_splits,
                                      void *workspace, float *out, void *stream)
{
    if (b->n_tokens <= 0)
        return 0;
    if (head_dim <= 0 || head_dim > ATT_MAX_HD || n_kv_heads <= 0 || n_heads % n_kv_heads != 0 ||
        n_splits < 1 || n_splits > SRT_ATTN_MAX_SPLITS || (n_splits > 1 && !workspace))
        return (int)cudaErrorInvalidValue;
    dim3 grid(b->n_tokens, n_heads, n_splits);
    cudaStream_t s = SRT_STREAM(stream);
#define ATT_LAUNCH(KV) attn_f32_kernel<KV><<<grid, ATT_WARPS * 32, 0, s>>>( \
        q, k_cache, v_cache, b->positions, b->seq_start, b->n_seqs, b->slot_start, b->slot_table, \
        n_heads, n_kv_heads, head_dim, scale, n_splits, (float *)workspace, out)
    switch (kv_type) {
    case SRT_KV_F32: ATT_LAUNCH(SRT_KV_F32); break;
    case SRT_KV_F16: ATT_LAUNCH(SRT_KV_F16); break;
    case SRT_KV_BF16: ATT_LAUNCH(SRT_KV_BF16); break;
    default: return (int)cudaErrorInvalidValue;
    }
#undef ATT_LAUNCH
    if (n_splits > 1)
        attn_merge_kernel<<<b->n_tokens * n_heads, head_dim < 32 ? 32 : head_dim, 0, s>>>(
            (const float *)workspace, head_dim, n_splits, out);
    return launch_status();
}

/* ---- row gather: dst[i] = src[rows[i]] (logit rows) ---- */
__global__ void gather_rows_kernel(const float *src, const int32_t *rows, int64_t width, float *dst)
{
    const float *s = src + (int64_t)rows[blockIdx.x] * width;
    float *d = dst + (int64_t)blockIdx.x * width;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
        d[i] = s[i];
}

extern "C" int srt_cuda_gather_rows_f32(const float *src, const int32_t *rows, int n_rows,
                                        int64_t width, float *dst, void *stream)
{
    if (n_rows <= 0)
        return 0;
    gather_rows_kernel<<<n_rows, 256, 0, SRT_STREAM(stream)>>>(src, rows, width, dst);
    return launch_status();
}
