/* f32 dot and axpy for attention and the precise matmul, with AVX2/AVX-512 twins of the
 * portable loops. The choice follows SRT_CPU_SIMD like the matmul kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/hsum_avx2.h"
#include "backend/cpu/cpu_kernels.h"

static float dot_portable(const float *a, const float *b, int64_t n)
{
    float s[8] = { 0 };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += a[i + k] * b[i + k];
    for (; i < n; i++)
        s[0] += a[i] * b[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static void axpy_portable(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

static void f16_row_portable(const uint16_t *h, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = srt_f16_to_f32(h[i]);
}

static void f32_to_f16_portable(const float *x, uint16_t *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = srt_f32_to_f16(x[i]);
}

static void dot_rows_portable(const float *q, const float *const *rows, int nb, int64_t n, float *out)
{
    for (int j = 0; j < nb; j++)
        out[j] = dot_portable(q, rows[j], n);
}

static void axpy_rows_portable(float *acc, const float *p, const float *const *rows, int nb, int64_t n)
{
    for (int j = 0; j < nb; j++)
        axpy_portable(acc, p[j], rows[j], n);
}

/* f16 K/V rows: convert, then the chosen dot / axpy (the SIMD twins below give the same
 * bits without the round trip through memory) */
static void f16_dot_heads_portable(const float *const *q, int nh, const uint16_t *k, int64_t n, float *out,
                                   int stride)
{
    float buf[1024];
    srt_f16_row_fn cvt = srt_cpu_f16_row();
    srt_dot_f32_fn dot = srt_cpu_dot_f32();
    cvt(k, buf, n);
    for (int i = 0; i < nh; i++)
        out[i * stride] = dot(q[i], buf, n);
}

static void f16_axpy_heads_portable(float *const *acc, const float *p, int pstride, int nh, const uint16_t *v,
                                    int64_t n)
{
    float buf[1024];
    srt_f16_row_fn cvt = srt_cpu_f16_row();
    srt_axpy_f32_fn axpy = srt_cpu_axpy_f32();
    cvt(v, buf, n);
    for (int i = 0; i < nh; i++)
        axpy(acc[i], p[i * pstride], buf, n);
}

static float exp_sum_portable(float *x, int64_t n, float m)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (x[i] = expf(x[i] - m));
    return s;
}

#if defined(__x86_64__)
#include <immintrin.h>

/* exp for x <= 0 (softmax arguments): Cody-Waite reduction by ln 2 and a degree-6
 * polynomial, relative error ~2e-7; below -87 the result is 0. */
__attribute__((target("avx2,fma"))) static inline __m256 exp256(__m256 x)
{
    __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

__attribute__((target("avx2,fma"))) static float exp_sum_avx2(float *x, int64_t n, float m)
{
    __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float s = _mm_cvtss_f32(h);
    for (; i < n; i++)
        s += (x[i] = expf(x[i] - m));
    return s;
}

__attribute__((target("avx2,f16c"))) static void f16_row_f16c(const uint16_t *h, float *out, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; i++)
        out[i] = srt_f16_to_f32(h[i]);
}

__attribute__((target("avx2,f16c"))) static void f32_to_f16_f16c(const float *x, uint16_t *out, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        out[i] = srt_f32_to_f16(x[i]);
}

__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int64_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float r = _mm_cvtss_f32(h);
    for (; i < n; i++)
        r += a[i] * b[i];
    return r;
}

__attribute__((target("avx2,fma"))) static void axpy_avx2(float *y, float a, const float *x, int64_t n)
{
    __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* dot_avx2 of q with each row (attention's scores over f32 K rows) */
__attribute__((target("avx2,fma"))) static void dot_rows_avx2(const float *q, const float *const *rows, int nb,
                                                             int64_t n, float *out)
{
    for (int j = 0; j < nb; j++)
        out[j] = dot_avx2(q, rows[j], n);
}

/* axpy_avx2 of each row in turn (attention's weighted sum of f32 V rows), acc held in four
 * registers per 32 floats across the rows instead of loaded and stored per row: per element
 * the same FMAs in the same order, so the same bits as axpy_avx2 row by row */
__attribute__((target("avx2,fma"))) static void axpy_rows_avx2(float *acc, const float *p, const float *const *rows,
                                                              int nb, int64_t n)
{
    if (n % 32) {
        for (int j = 0; j < nb; j++)
            axpy_avx2(acc, p[j], rows[j], n);
        return;
    }
    for (int64_t c = 0; c < n; c += 32) {
        __m256 a0 = _mm256_loadu_ps(acc + c), a1 = _mm256_loadu_ps(acc + c + 8);
        __m256 a2 = _mm256_loadu_ps(acc + c + 16), a3 = _mm256_loadu_ps(acc + c + 24);
        for (int j = 0; j < nb; j++) {
            const float *v = rows[j] + c;
            __m256 pj = _mm256_set1_ps(p[j]);
            a0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v), a0);
            a1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + 8), a1);
            a2 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + 16), a2);
            a3 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + 24), a3);
        }
        _mm256_storeu_ps(acc + c, a0);
        _mm256_storeu_ps(acc + c + 8, a1);
        _mm256_storeu_ps(acc + c + 16, a2);
        _mm256_storeu_ps(acc + c + 24, a3);
    }
}

#define LOADH(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))

/* axpy_avx2 of each head with an f16 row converted once in registers: per element the same
 * one FMA as before (n a multiple of 8) */
__attribute__((target("avx2,fma,f16c"))) static void f16_axpy_heads_avx2(float *const *acc, const float *p,
                                                                         int pstride, int nh, const uint16_t *v,
                                                                         int64_t n)
{
    if (n % 8 || n > 1024) {
        f16_axpy_heads_portable(acc, p, pstride, nh, v, n);
        return;
    }
    for (int64_t i = 0; i < n; i += 8) {
        __m256 x = LOADH(v + i);
        for (int h = 0; h < nh; h++)
            _mm256_storeu_ps(acc[h] + i, _mm256_fmadd_ps(_mm256_set1_ps(p[h * pstride]), x,
                                                         _mm256_loadu_ps(acc[h] + i)));
    }
}

/* the block kernels' last step for one head: kb <= 8 keys' 8-lane partial sums (part[j])
 * reduced with srt_hsum8's additions, eight at once when the block is full */
__attribute__((target("avx2,fma,f16c"), always_inline)) static inline void store_key_sums(const float (*part)[8], int kb,
                                                                                         float *o)
{
    if (kb == 8)
        _mm256_storeu_ps(o, srt_hsum8x8(part[0]));
    else
        for (int j = 0; j < kb; j++)
            o[j] = srt_hsum8(_mm256_load_ps(part[j]));
}

/* A block of nb keys: per (key, head) dot_avx2's arithmetic on the row converted in
 * registers (the bits of f16_row + dot_avx2; n a multiple of 8), each K chunk converted once
 * for up to three heads (their 12 accumulators and 4 chunks fill the registers), and the final
 * horizontal sums of eight keys done together (srt_hsum8x8: the same additions as dot_avx2's
 * hsum, so the same bits). Before, a key's row was converted once per head and each (key,
 * head) paid its own hsum: 25 ops per 64 products, now about 14. */
__attribute__((target("avx2,fma,f16c"))) static void f16_dot_block_avx2(const float *const *q, int nh,
                                                                        const uint16_t *const *k, int nb,
                                                                        int64_t n, float *out, int stride)
{
    if (n % 8 || n > 1024) {
        for (int j = 0; j < nb; j++)
            f16_dot_heads_portable(q, nh, k[j], n, out + j, stride);
        return;
    }
    for (int h0 = 0; h0 < nh; h0 += 3) {
        int m = nh - h0 < 3 ? nh - h0 : 3;
        const float *qh[3] = { q[h0], q[h0 + (m > 1)], q[h0 + 2 * (m > 2)] };
        for (int j0 = 0; j0 < nb; j0 += 8) {
            int kb = nb - j0 < 8 ? nb - j0 : 8;
            _Alignas(32) float part[3][8][8];   /* per head and key: (s0 + s1) + (s2 + s3) */
            for (int j = 0; j < kb; j++) {
                const uint16_t *kr = k[j0 + j];
                __m256 s[3][4];
#pragma GCC unroll 3
                for (int h = 0; h < 3; h++)
#pragma GCC unroll 4
                    for (int c = 0; c < 4; c++)
                        s[h][c] = _mm256_setzero_ps();
                int64_t i = 0;
                for (; i + 32 <= n; i += 32) {
                    __m256 kc[4] = { LOADH(kr + i), LOADH(kr + i + 8), LOADH(kr + i + 16), LOADH(kr + i + 24) };
#pragma GCC unroll 3
                    for (int h = 0; h < 3; h++)
                        if (h < m)
#pragma GCC unroll 4
                            for (int c = 0; c < 4; c++)
                                s[h][c] = _mm256_fmadd_ps(_mm256_loadu_ps(qh[h] + i + 8 * c), kc[c], s[h][c]);
                }
                for (; i + 8 <= n; i += 8) {
                    __m256 kc = LOADH(kr + i);
#pragma GCC unroll 3
                    for (int h = 0; h < 3; h++)
                        if (h < m)
                            s[h][0] = _mm256_fmadd_ps(_mm256_loadu_ps(qh[h] + i), kc, s[h][0]);
                }
#pragma GCC unroll 3
                for (int h = 0; h < 3; h++)
                    if (h < m)
                        _mm256_store_ps(part[h][j], _mm256_add_ps(_mm256_add_ps(s[h][0], s[h][1]),
                                                                  _mm256_add_ps(s[h][2], s[h][3])));
            }
            for (int h = 0; h < m; h++)
                store_key_sums(part[h], kb, out + (size_t)(h0 + h) * (size_t)stride + j0);
        }
    }
}

/* acc[h] += p[h][j] * v[j] over a block of keys, 32 columns of up to 3 heads' accumulators
 * held in registers across the keys (before: loaded and stored again for every key, a store
 * per 8 floats per key). Per element the same FMAs in key order as f16_axpy_heads_avx2. */
__attribute__((target("avx2,fma,f16c"))) static void f16_axpy_block_avx2(float *const *acc, const float *p,
                                                                         int pstride, int nh,
                                                                         const uint16_t *const *v, int nb,
                                                                         int64_t n)
{
    if (n % 32 || n > 1024) {
        for (int j = 0; j < nb; j++)
            f16_axpy_heads_avx2(acc, p + j, pstride, nh, v[j], n);
        return;
    }
    for (int h0 = 0; h0 < nh; h0 += 3) {
        int m = nh - h0 < 3 ? nh - h0 : 3;
        for (int64_t c = 0; c < n; c += 32) {
            __m256 a[3][4];
            for (int h = 0; h < m; h++)
                for (int k = 0; k < 4; k++)
                    a[h][k] = _mm256_loadu_ps(acc[h0 + h] + c + 8 * k);
            for (int j = 0; j < nb; j++) {
                const uint16_t *vj = v[j] + c;
                __m256 x0 = LOADH(vj), x1 = LOADH(vj + 8), x2 = LOADH(vj + 16), x3 = LOADH(vj + 24);
                for (int h = 0; h < m; h++) {
                    __m256 ph = _mm256_set1_ps(p[(h0 + h) * pstride + j]);
                    a[h][0] = _mm256_fmadd_ps(ph, x0, a[h][0]);
                    a[h][1] = _mm256_fmadd_ps(ph, x1, a[h][1]);
                    a[h][2] = _mm256_fmadd_ps(ph, x2, a[h][2]);
                    a[h][3] = _mm256_fmadd_ps(ph, x3, a[h][3]);
                }
            }
            for (int h = 0; h < m; h++)
                for (int k = 0; k < 4; k++)
                    _mm256_storeu_ps(acc[h0 + h] + c + 8 * k, a[h][k]);
        }
    }
}

__attribute__((target("avx512f,avx2,fma,f16c"))) static float dot_avx512(const float *a, const float *b, int64_t n);

/* The sum of 16 lanes: the two 256-bit halves added, then srt_hsum8. This is the order of
 * GCC's _mm512_reduce_add_ps, written out so that the block kernel below can fold eight keys'
 * halves first and reduce them together (srt_hsum8x8) with the same bits, whatever compiler. */
__attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) static inline __m256 fold16(__m512 v)
{
    return _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)), _mm512_castps512_ps256(v));
}

__attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) static inline float hsum16(__m512 v)
{
    return srt_hsum8(fold16(v));
}

/* head_dim chunks of 64 held in 4 registers (AVX-512) */
__attribute__((target("avx512f,avx2,fma,f16c"))) static void dot_rows_avx512(const float *q, const float *const *rows, int nb,
                                                               int64_t n, float *out)
{
    if (n % 16) {
        for (int j = 0; j < nb; j++)
            out[j] = dot_avx512(q, rows[j], n);
        return;
    }
    for (int j = 0; j < nb; j++)
        out[j] = 0;
    for (int64_t c = 0; c < n; c += 64) {
        int64_t w = n - c < 64 ? n - c : 64;
        __m512 q0 = _mm512_loadu_ps(q + c), q1 = w > 16 ? _mm512_loadu_ps(q + c + 16) : _mm512_setzero_ps();
        __m512 q2 = w > 32 ? _mm512_loadu_ps(q + c + 32) : _mm512_setzero_ps();
        __m512 q3 = w > 48 ? _mm512_loadu_ps(q + c + 48) : _mm512_setzero_ps();
        for (int j = 0; j < nb; j++) {
            const float *k = rows[j] + c;
            __m512 s = _mm512_mul_ps(q0, _mm512_loadu_ps(k));
            if (w > 16) s = _mm512_fmadd_ps(q1, _mm512_loadu_ps(k + 16), s);
            if (w > 32) s = _mm512_fmadd_ps(q2, _mm512_loadu_ps(k + 32), s);
            if (w > 48) s = _mm512_fmadd_ps(q3, _mm512_loadu_ps(k + 48), s);
            out[j] += hsum16(s);
        }
    }
}

__attribute__((target("avx512f"))) static void axpy_rows_avx512(float *acc, const float *p, const float *const *rows,
                                                                int nb, int64_t n)
{
    if (n % 16) {
        for (int j = 0; j < nb; j++)
            axpy_avx2(acc, p[j], rows[j], n);
        return;
    }
    for (int64_t c = 0; c < n; c += 64) {
        int64_t w = n - c < 64 ? n - c : 64;
        __m512 a0 = _mm512_loadu_ps(acc + c), a1 = w > 16 ? _mm512_loadu_ps(acc + c + 16) : _mm512_setzero_ps();
        __m512 a2 = w > 32 ? _mm512_loadu_ps(acc + c + 32) : _mm512_setzero_ps();
        __m512 a3 = w > 48 ? _mm512_loadu_ps(acc + c + 48) : _mm512_setzero_ps();
        for (int j = 0; j < nb; j++) {
            const float *v = rows[j] + c;
            __m512 pj = _mm512_set1_ps(p[j]);
            a0 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(v), a0);
            if (w > 16) a1 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(v + 16), a1);
            if (w > 32) a2 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(v + 32), a2);
            if (w > 48) a3 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(v + 48), a3);
        }
        _mm512_storeu_ps(acc + c, a0);
        if (w > 16) _mm512_storeu_ps(acc + c + 16, a1);
        if (w > 32) _mm512_storeu_ps(acc + c + 32, a2);
        if (w > 48) _mm512_storeu_ps(acc + c + 48, a3);
    }
}

__attribute__((target("avx512f,avx2,fma,f16c"))) static float dot_avx512(const float *a, const float *b, int64_t n)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    float r = hsum16(_mm512_add_ps(s0, s1));
    for (; i < n; i++)
        r += a[i] * b[i];
    return r;
}

/* f16_axpy_block_avx2 on 16 lanes: 64 columns of up to 3 heads' accumulators in registers.
 * Each element still takes one FMA per key in key order, so the bits are the same; a key's
 * V row converts in half the instructions and each FMA does twice the columns (the 8-lane
 * kernel was 6% of a concurrency-16 prefill). n a multiple of 64, else the 8-lane kernel. */
__attribute__((target("avx512f,avx2,fma,f16c"))) static void f16_axpy_block_avx512(float *const *acc, const float *p,
                                                                                   int pstride, int nh,
                                                                                   const uint16_t *const *v, int nb,
                                                                                   int64_t n)
{
    if (n % 64 || n > 1024) {
        f16_axpy_block_avx2(acc, p, pstride, nh, v, nb, n);
        return;
    }
    for (int h0 = 0; h0 < nh; h0 += 3) {
        int m = nh - h0 < 3 ? nh - h0 : 3;
        for (int64_t c = 0; c < n; c += 64) {
            __m512 a[3][4];
            for (int h = 0; h < m; h++)
                for (int k = 0; k < 4; k++)
                    a[h][k] = _mm512_loadu_ps(acc[h0 + h] + c + 16 * k);
            for (int j = 0; j < nb; j++) {
                const uint16_t *vj = v[j] + c;
                __m512 x[4];
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++)
                    x[k] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vj + 16 * k)));
#pragma GCC unroll 3
                for (int h = 0; h < 3; h++)
                    if (h < m) {
                        __m512 ph = _mm512_set1_ps(p[(h0 + h) * pstride + j]);
#pragma GCC unroll 4
                        for (int k = 0; k < 4; k++)
                            a[h][k] = _mm512_fmadd_ps(ph, x[k], a[h][k]);
                    }
            }
            for (int h = 0; h < m; h++)
                for (int k = 0; k < 4; k++)
                    _mm512_storeu_ps(acc[h0 + h] + c + 16 * k, a[h][k]);
        }
    }
}

/* A block of nb keys on the AVX-512 level: per (key, head) dot_avx512's arithmetic on the row
 * converted in registers (two accumulators over 32-float steps, their sum reduced), so the
 * bits of the per-key path (f16_row + dot_avx512); each K chunk is converted once for up to
 * four heads, and eight keys' reductions are done together (fold16, then srt_hsum8x8: the
 * same additions as hsum16). n a multiple of 16. */
__attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) static inline void f16_dot_avx512_n(const float *const *q, int nh,
                                                                                  const uint16_t *const *k, int nb,
                                                                                  int64_t n, float *out, int stride)
{
    for (int h0 = 0; h0 < nh; h0 += 4) {
        int m = nh - h0 < 4 ? nh - h0 : 4;
        const float *qh[4] = { q[h0], q[h0 + (m > 1)], q[h0 + 2 * (m > 2)], q[h0 + 3 * (m > 3)] };
        for (int j0 = 0; j0 < nb; j0 += 8) {
            int kb = nb - j0 < 8 ? nb - j0 : 8;
            _Alignas(32) float part[4][8][8];   /* per head and key: the folded s0 + s1 */
            for (int j = 0; j < kb; j++) {
                const uint16_t *kr = k[j0 + j];
                __m512 s[4][2];
#pragma GCC unroll 4
                for (int h = 0; h < 4; h++)
                    s[h][0] = s[h][1] = _mm512_setzero_ps();
                int64_t i = 0;
                for (; i + 32 <= n; i += 32) {
                    __m512 k0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + i)));
                    __m512 k1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + i + 16)));
#pragma GCC unroll 4
                    for (int h = 0; h < 4; h++)
                        if (h < m) {
                            s[h][0] = _mm512_fmadd_ps(_mm512_loadu_ps(qh[h] + i), k0, s[h][0]);
                            s[h][1] = _mm512_fmadd_ps(_mm512_loadu_ps(qh[h] + i + 16), k1, s[h][1]);
                        }
                }
                if (i < n) {   /* one 16-float step left */
                    __m512 k0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + i)));
#pragma GCC unroll 4
                    for (int h = 0; h < 4; h++)
                        if (h < m)
                            s[h][0] = _mm512_fmadd_ps(_mm512_loadu_ps(qh[h] + i), k0, s[h][0]);
                }
#pragma GCC unroll 4
                for (int h = 0; h < 4; h++)
                    if (h < m)
                        _mm256_store_ps(part[h][j], fold16(_mm512_add_ps(s[h][0], s[h][1])));
            }
            for (int h = 0; h < m; h++)
                store_key_sums(part[h], kb, out + (size_t)(h0 + h) * (size_t)stride + j0);
        }
    }
}

/* One head of 64 against one key, 16 lanes: the two accumulators of f16_dot_avx512_n summed,
 * not yet folded. Every 64-wide kernel below takes a key's partials from here. */
__attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) static inline __m512 t64(const __m512 *Q, const __m512 *K)
{
    __m512 s0 = _mm512_fmadd_ps(Q[0], K[0], _mm512_setzero_ps());
    __m512 s1 = _mm512_fmadd_ps(Q[1], K[1], _mm512_setzero_ps());
    s0 = _mm512_fmadd_ps(Q[2], K[2], s0);
    s1 = _mm512_fmadd_ps(Q[3], K[3], s1);
    return _mm512_add_ps(s0, s1);
}

/* f16_dot_avx512_n for up to four heads of 64 (SmolLM2's heads; m of them, a decode's three
 * too): the same FMAs, folds and sums, with the queries' registers loaded once per block rather
 * than for every key (16 query and 4 key loads per key for 16 FMAs bounded the scores) */
__attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) static inline void f16_dot64_xm(const float *const *q, int m,
                                                                          const uint16_t *const *k, int nb,
                                                                          float *out, int stride)
{
    __m512 Q[4][4];
#pragma GCC unroll 4
    for (int h = 0; h < 4; h++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            Q[h][c] = _mm512_loadu_ps(q[h < m ? h : 0] + 16 * c);
    for (int j0 = 0; j0 < nb; j0 += 8) {
        int kb = nb - j0 < 8 ? nb - j0 : 8;
        _Alignas(32) float part[4][8][8];
        for (int j = 0; j < kb; j++) {
            const uint16_t *kr = k[j0 + j];
            __m512 K[4];
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                K[c] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + 16 * c)));
#pragma GCC unroll 4
            for (int h = 0; h < 4; h++) {
                if (h >= m)
                    break;
                _mm256_store_ps(part[h][j], fold16(t64(Q[h], K)));
            }
        }
        for (int h = 0; h < m; h++)
            store_key_sums(part[h], kb, out + (size_t)h * (size_t)stride + j0);
    }
}

__attribute__((target("avx512f,avx2,fma,f16c"))) static void f16_dot64_x4(const float *const *q, const uint16_t *const *k,
                                                                          int nb, float *out, int stride)
{
    f16_dot64_xm(q, 4, k, nb, out, stride);
}

__attribute__((target("avx512f,avx2,fma,f16c"))) static void f16_dot64_x3(const float *const *q, const uint16_t *const *k,
                                                                          int nb, float *out, int stride)
{
    f16_dot64_xm(q, 3, k, nb, out, stride);
}

/* four heads at a time through f16_dot64_x4, three (a SmolLM2 decode's KV head) through x3 */
__attribute__((target("avx512f,avx2,fma,f16c"))) static void f16_dot64_heads(const float *const *q, int nh,
                                                                             const uint16_t *const *k, int nb,
                                                                             float *out, int stride)
{
    int h0 = 0;
    for (; h0 + 4 <= nh; h0 += 4)
        f16_dot64_x4(q + h0, k, nb, out + (size_t)h0 * (size_t)stride, stride);
    if (nh - h0 == 3)
        f16_dot64_x3(q + h0, k, nb, out + (size_t)h0 * (size_t)stride, stride);
    else if (h0 < nh)
        f16_dot_avx512_n(q + h0, nh - h0, k, nb, 64, out + (size_t)h0 * (size_t)stride, stride);
}

/* One head's 16-lane partial sums t[0..7] of eight keys (each t64's)
 * reduced to the eight scores by the additions fold16 + srt_hsum8x8 make (lanes l + l+8, then
 * + l+4, + l+2, + l+1: one tree, so the same bits) but on two keys or more per instruction:
 * 17 shuffles and 8 adds for the eight keys where the fold, its store and the 8x8 sum took 23
 * shuffles, 15 adds and 16 loads and stores. Pairs come in as they are made (sum8_pair), so a
 * head holds four registers, not eight. */
__attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) static inline __m512 sum8_pair(__m512 a, __m512 b)
{
    /* [a lanes 0-7 + 8-15 | b lanes 0-7 + 8-15] */
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
}

__attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) static inline __m512 sum8_quad(__m512 ab, __m512 cd)
{
    /* per key [0-3] + [4-7]: keys a b c d, four lanes each */
    return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
}

__attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) static inline __m256 sum8_last(__m512 y0, __m512 y1)
{
    /* per 128-bit lane i: [0,1] + [2,3] of key i and of key i + 4 */
    __m512 z = _mm512_add_ps(_mm512_shuffle_ps(y0, y1, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(y0, y1, _MM_SHUFFLE(3, 2, 3, 2)));
    /* lanes 4i, 4i+1: key i's [0] + [1], key i+4's */
    z = _mm512_add_ps(_mm512_shuffle_ps(z, z, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(z, z, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_castps512_ps256(
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0), z));
}

/* t64 on a key converted into kf (64 floats, aligned) */
__attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) static inline __m512 t64_at(const __m512 *Q, const float *kf)
{
    __m512 K[4] = { _mm512_load_ps(kf), _mm512_load_ps(kf + 16), _mm512_load_ps(kf + 32), _mm512_load_ps(kf + 48) };
    return t64(Q, K);
}

/* f16_dot64_xm's scores for any number of heads, eight keys at a time: the keys converted once
 * for all the heads (a prefill tile's 24 query rows had them converted six times, four heads a
 * pass) into 2 KB of L1, each head's 4 query registers loaded once per eight keys, and the
 * scores summed in registers (sum8_*). A block's last keys short of eight take f16_dot64_heads. */
__attribute__((target("avx512f,avx2,fma,f16c"))) static void f16_dot64_k8(const float *const *q, int nh,
                                                                          const uint16_t *const *k, int nb,
                                                                          float *out, int stride)
{
    int j0 = 0;
    for (; j0 + 8 <= nb; j0 += 8) {
        _Alignas(64) float kf[8][64];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                _mm512_store_ps(kf[j] + 16 * c,
                                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k[j0 + j] + 16 * c))));
        for (int h = 0; h < nh; h++) {
            __m512 Q[4];
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                Q[c] = _mm512_loadu_ps(q[h] + 16 * c);
            __m512 y0 = sum8_quad(sum8_pair(t64_at(Q, kf[0]), t64_at(Q, kf[1])),
                                  sum8_pair(t64_at(Q, kf[2]), t64_at(Q, kf[3])));
            __m512 y1 = sum8_quad(sum8_pair(t64_at(Q, kf[4]), t64_at(Q, kf[5])),
                                  sum8_pair(t64_at(Q, kf[6]), t64_at(Q, kf[7])));
            _mm256_storeu_ps(out + (size_t)h * (size_t)stride + j0, sum8_last(y0, y1));
        }
    }
    if (j0 < nb)
        f16_dot64_heads(q, nh, k + j0, nb - j0, out + j0, stride);
}

/* n == 64 (SmolLM2's heads) takes f16_dot64_k8 */
__attribute__((target("avx512f,avx2,fma,f16c"))) static void f16_dot_block_avx512(const float *const *q, int nh,
                                                                                  const uint16_t *const *k, int nb,
                                                                                  int64_t n, float *out, int stride)
{
    if (n % 16 || n > 1024) {
        for (int j = 0; j < nb; j++)
            f16_dot_heads_portable(q, nh, k[j], n, out + j, stride);
        return;
    }
    if (n != 64) {
        f16_dot_avx512_n(q, nh, k, nb, n, out, stride);
        return;
    }
    f16_dot64_k8(q, nh, k, nb, out, stride);
}
#endif

static int use_level(void)
{
    const char *simd = srt_cpu_simd_name();
    if (strcmp(simd, "avx512") == 0)
        return 2;
    if (strcmp(simd, "avx2") == 0)
        return 1;
    return 0;
}

srt_dot_f32_fn srt_cpu_dot_f32(void)
{
#if defined(__x86_64__)
    int l = use_level();
    if (l == 2)
        return dot_avx512;
    if (l == 1)
        return dot_avx2;
#endif
    return dot_portable;
}

srt_axpy_f32_fn srt_cpu_axpy_f32(void)
{
#if defined(__x86_64__)
    if (use_level() >= 1)
        return axpy_avx2;
#endif
    return axpy_portable;
}

srt_f16_row_fn srt_cpu_f16_row(void)
{
#if defined(__x86_64__)
    if (use_level() >= 1)
        return f16_row_f16c;
#endif
    return f16_row_portable;
}

srt_f32_to_f16_row_fn srt_cpu_f32_to_f16_row(void)
{
#if defined(__x86_64__)
    if (use_level() >= 1)
        return f32_to_f16_f16c;
#endif
    return f32_to_f16_portable;
}

srt_exp_sum_fn srt_cpu_exp_sum(void)
{
#if defined(__x86_64__)
    if (use_level() >= 1)
        return exp_sum_avx2;
#endif
    return exp_sum_portable;
}

srt_dot_rows_fn srt_cpu_dot_rows(void)
{
#if defined(__x86_64__)
    int l = use_level();
    if (l == 2)
        return dot_rows_avx512;
    if (l == 1)
        return dot_rows_avx2;
#endif
    return dot_rows_portable;
}

srt_axpy_rows_fn srt_cpu_axpy_rows(void)
{
#if defined(__x86_64__)
    int l = use_level();
    if (l == 2)
        return axpy_rows_avx512;
    if (l == 1)
        return axpy_rows_avx2;
#endif
    return axpy_rows_portable;
}

/* the per-key kernels over a block (the paths without a block kernel of their own) */
static void f16_dot_block_keys(const float *const *q, int nh, const uint16_t *const *k, int nb, int64_t n,
                               float *out, int stride)
{
    for (int j = 0; j < nb; j++)
        f16_dot_heads_portable(q, nh, k[j], n, out + j, stride);
}

static void f16_axpy_block_keys(float *const *acc, const float *p, int pstride, int nh, const uint16_t *const *v,
                                int nb, int64_t n)
{
    for (int j = 0; j < nb; j++)
        f16_axpy_heads_portable(acc, p + j, pstride, nh, v[j], n);
}

srt_f16_dot_block_fn srt_cpu_f16_dot_block(void)
{
#if defined(__x86_64__)
    int l = use_level();
    if (l == 2)
        return f16_dot_block_avx512;
    if (l == 1)
        return f16_dot_block_avx2;
#endif
    return f16_dot_block_keys;
}

srt_f16_axpy_block_fn srt_cpu_f16_axpy_block(void)
{
#if defined(__x86_64__)
    int l = use_level();
    if (l == 2)
        return f16_axpy_block_avx512;
    if (l == 1)
        return f16_axpy_block_avx2;
#endif
    return f16_axpy_block_keys;
}
