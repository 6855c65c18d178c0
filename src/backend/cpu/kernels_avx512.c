/* AVX-512 kernels (F/BW/VL/VNNI), compiled per function with target attributes so the
 * library still loads on CPUs without them; matmul.c only calls these after a CPUID check.
 *
 * The 32-wide formats (Q4_0, Q4_1, Q8_0) are taken two blocks per 512-bit register. For a
 * tile of R weight rows x T tokens, each pair of blocks is unpacked once per row and each
 * activation pair loaded once per token, then every (row, token) costs one vpdpbusd, a
 * convert and two FMAs. Odd trailing blocks go through the scalar block helpers. */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_kernels.h"

#if defined(__x86_64__)

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) TGT

/* Decode reads W once, four rows at a time (kern_d), prefetching PF_GROUPS groups ahead. */
#define PF_GROUPS 4
enum { FMT_Q4_0, FMT_Q4_1, FMT_Q8_0 };

static const size_t fmt_bytes[] = { sizeof(blk_q4_0), sizeof(blk_q4_1), sizeof(blk_q8_0) };

/* Scalar dot of one block, for the odd block at the end of a row. */
static float block_dot_scalar(int fmt, const uint8_t *blk, const int8_t *a, const q8_scale *s)
{
    uint16_t dh;
    memcpy(&dh, blk, 2);
    float d = srt_f16_to_f32(dh);
    int isum = 0;
    if (fmt == FMT_Q8_0) {
        const int8_t *q = (const int8_t *)(blk + 2);
        for (int i = 0; i < QK; i++)
            isum += q[i] * a[i];
        return d * s->d * (float)isum;
    }
    const uint8_t *qs = blk + (fmt == FMT_Q4_1 ? 4 : 2);
    for (int i = 0; i < QK / 2; i++)
        isum += (qs[i] & 0x0F) * a[i] + (qs[i] >> 4) * a[i + QK / 2];
    if (fmt == FMT_Q4_1) {
        uint16_t mh;
        memcpy(&mh, blk + 2, 2);
        return d * s->d * (float)isum + srt_f16_to_f32(mh) * s->s;
    }
    return d * (s->d * (float)isum - 8.0f * s->s);
}

/* 64 weights of blocks b0, b1 as bytes in element order: nibbles 0..15 (low) 16..31 (high). */
INLINE __m512i unpack_q4_pair(const uint8_t *qs0, const uint8_t *qs1)
{
    __m256i ab = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)qs1),
                                  _mm_loadu_si128((const __m128i *)qs0));
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(ab), _mm256_srli_epi16(ab, 4), 1);
    z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));   /* [lo0, hi0, lo1, hi1] */
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
}

INLINE __m512i load_q8_pair(const uint8_t *b0, const uint8_t *b1)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 2))),
                              _mm256_loadu_si256((const __m256i *)(b1 + 2)), 1);
}

/* Batch invariance: every (row, token) output is computed with the one reduction order of
 * kern_p, whatever the tile. Per pair of blocks the 16 vpdpbusd sums are folded (exactly,
 * in integers) to four lanes, j, 4+j (block b) and 8+j, 12+j (block b+1); those are scaled
 * and accumulated in float pair by pair, the offset m*s joining lanes j and 8+j after the
 * scale; the result is (l[j] + l[8+j]) + (l[4+j] + l[12+j]), plus an odd last block in
 * scalar. Decode folds four rows instead of four tokens (kern_d); a short tile pads its
 * token or row group with copies of its first member. A token therefore gets the same bits
 * alone, in a decode batch, or anywhere in a prefill tile.
 *
 * Q8_0 is taken as unsigned (w + 128) and corrected through the block sums, like Q4_0's -8. */

INLINE __m512i pair_weights(int fmt, const uint8_t *b0, const uint8_t *b1)
{
    if (fmt == FMT_Q8_0)
        return _mm512_xor_si512(load_q8_pair(b0, b1), _mm512_set1_epi8((char)0x80));
    size_t off = fmt == FMT_Q4_1 ? 4 : 2;
    return unpack_q4_pair(b0 + off, b1 + off);
}

INLINE __m512 fold4(__m512i i0, __m512i i1, __m512i i2, __m512i i3)
{
    __m512i p01 = _mm512_add_epi32(_mm512_unpacklo_epi32(i0, i1), _mm512_unpackhi_epi32(i0, i1));
    __m512i p23 = _mm512_add_epi32(_mm512_unpacklo_epi32(i2, i3), _mm512_unpackhi_epi32(i2, i3));
    return _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_unpacklo_epi64(p01, p23), _mm512_unpackhi_epi64(p01, p23)));
}

INLINE void fold_out(__m512 acc, float out[4])
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

/* Prefill micro-kernel: R rows x 4G tokens (a[k], s[k]: token k's activations and scales;
 * the first nt are stored). One convert and two FMAs serve four (row, token) pairs. */
INLINE void kern_p(int fmt, int R, int G, const uint8_t *w, size_t stride, const int8_t *const *a,
                   const q8_scale *const *s, int nt, int64_t nb, float *y, int64_t ldy)
{
    const size_t bb = fmt_bytes[fmt];
    const __m512i zero = _mm512_setzero_si512();
    /* token j of a group: dx of block b in lanes j and 4+j, of block b+1 in 8+j and 12+j */
    const __m512i idx_dx = _mm512_set_epi32(14, 10, 6, 2, 14, 10, 6, 2, 12, 8, 4, 0, 12, 8, 4, 0);
    const __m512i idx_sx = _mm512_set_epi32(15, 11, 7, 3, 15, 11, 7, 3, 13, 9, 5, 1, 13, 9, 5, 1);
    const __m512i idx_d = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i idx_m = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int g = 0; g < G; g++)
            acc[r][g] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i wv[4];
        __m512 dw[4], mw[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *b0 = w + r * stride + b * bb, *b1 = b0 + bb;
            uint32_t h0, h1;
            memcpy(&h0, b0, 4);
            memcpy(&h1, b1, 4);
            __m512 f = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_set_epi32(0, 0, (int)h1, (int)h0)));
            dw[r] = _mm512_permutexvar_ps(idx_d, f);
            /* the per-block offset goes in lanes 0-3 (block b) and 8-11 (block b+1) only */
            if (fmt == FMT_Q4_1)
                mw[r] = _mm512_maskz_permutexvar_ps(0x0F0F, idx_m, f);
            else
                mw[r] = _mm512_maskz_mul_ps(0x0F0F, dw[r], _mm512_set1_ps(fmt == FMT_Q4_0 ? -8.0f : -128.0f));
            wv[r] = pair_weights(fmt, b0, b1);
        }
#pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            __m512i xv[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                xv[k] = _mm512_load_si512((const void *)(a[4 * g + k] + b * QK));
            /* [d0 s0 d1 s1] of the 4 tokens, one token per 128-bit lane */
            __m512 z = _mm512_castps128_ps512(_mm_loadu_ps(&s[4 * g][b].d));
            z = _mm512_insertf32x4(z, _mm_loadu_ps(&s[4 * g + 1][b].d), 1);
            z = _mm512_insertf32x4(z, _mm_loadu_ps(&s[4 * g + 2][b].d), 2);
            z = _mm512_insertf32x4(z, _mm_loadu_ps(&s[4 * g + 3][b].d), 3);
            __m512 dx = _mm512_permutexvar_ps(idx_dx, z);
            __m512 sx = _mm512_maskz_permutexvar_ps(0x0F0F, idx_sx, z);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m512 f = fold4(_mm512_dpbusd_epi32(zero, wv[r], xv[0]), _mm512_dpbusd_epi32(zero, wv[r], xv[1]),
                                 _mm512_dpbusd_epi32(zero, wv[r], xv[2]), _mm512_dpbusd_epi32(zero, wv[r], xv[3]));
                acc[r][g] = _mm512_fmadd_ps(f, _mm512_mul_ps(dw[r], dx), acc[r][g]);
                acc[r][g] = _mm512_fmadd_ps(mw[r], sx, acc[r][g]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            float out[4];
            fold_out(acc[r][g], out);
            for (int j = 0; j < 4 && 4 * g + j < nt; j++) {
                int k = 4 * g + j;
                if (b < nb)
                    out[j] += block_dot_scalar(fmt, w + r * stride + b * bb, a[k] + b * QK, &s[k][b]);
                y[k * ldy + r] = out[j];
            }
        }
}

/* Decode micro-kernel: 4 rows (wr[j]; the first nr are stored) x 1 token, folded across
 * rows with the same per-lane arithmetic as kern_p, so the scale work is shared by four
 * rows. Four interleaved short runs defeat the hardware prefetcher, so the rows PF_GROUPS
 * groups ahead are prefetched as one sequential run, spread over the loop. */
INLINE void kern_d(int fmt, const uint8_t *const *wr, int nr, size_t stride, const int8_t *aq,
                   const q8_scale *ads, int64_t nb, float *y)
{
    const size_t bb = fmt_bytes[fmt];
    const __m512i zero = _mm512_setzero_si512();
    const __m512i idx_pd = _mm512_set_epi32(14, 10, 6, 2, 14, 10, 6, 2, 12, 8, 4, 0, 12, 8, 4, 0);
    const __m512i idx_pm = _mm512_set_epi32(15, 11, 7, 3, 15, 11, 7, 3, 13, 9, 5, 1, 13, 9, 5, 1);
    const __m512i idx_d = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i idx_s = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
    const char *pf = (const char *)wr[0] + PF_GROUPS * 4 * stride;
    int64_t iters = nb / 2 > 0 ? nb / 2 : 1;
    int64_t pf_lines = nr == 4 ? ((int64_t)(4 * stride) / 64 + iters - 1) / iters + 1 : 0;
    __m512 acc = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        for (int64_t k = 0; k < pf_lines; k++, pf += 64)
            _mm_prefetch(pf, _MM_HINT_T0);
        __m512i xv = _mm512_load_si512((const void *)(aq + b * QK));
        __m512 f = _mm512_castps128_ps512(_mm_loadu_ps(&ads[b].d));
        __m512 dx = _mm512_permutexvar_ps(idx_d, f);
        __m512 sx = _mm512_maskz_permutexvar_ps(0x0F0F, idx_s, f);
        __m512i i[4];
        __m128 h[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const uint8_t *b0 = wr[r] + b * bb, *b1 = b0 + bb;
            uint32_t h0, h1;
            memcpy(&h0, b0, 4);
            memcpy(&h1, b1, 4);
            h[r] = _mm_cvtph_ps(_mm_set_epi32(0, 0, (int)h1, (int)h0));   /* [d0 m0 d1 m1] */
            i[r] = _mm512_dpbusd_epi32(zero, pair_weights(fmt, b0, b1), xv);
        }
        __m512 z = _mm512_castps128_ps512(h[0]);
        z = _mm512_insertf32x4(z, h[1], 1);
        z = _mm512_insertf32x4(z, h[2], 2);
        z = _mm512_insertf32x4(z, h[3], 3);
        __m512 dw = _mm512_permutexvar_ps(idx_pd, z);
        __m512 mw = fmt == FMT_Q4_1 ? _mm512_maskz_permutexvar_ps(0x0F0F, idx_pm, z)
                                    : _mm512_maskz_mul_ps(0x0F0F, dw, _mm512_set1_ps(fmt == FMT_Q4_0 ? -8.0f : -128.0f));
        acc = _mm512_fmadd_ps(fold4(i[0], i[1], i[2], i[3]), _mm512_mul_ps(dw, dx), acc);
        acc = _mm512_fmadd_ps(mw, sx, acc);
    }
    float out[4];
    fold_out(acc, out);
    for (int r = 0; r < nr; r++) {
        if (b < nb)
            out[r] += block_dot_scalar(fmt, wr[r] + b * bb, aq + b * QK, ads + b);
        y[r] = out[r];
    }
}

/* Every token of a tile is handled in one pass over the rows, so a small batch (2-7
 * tokens) streams W once, not once per token. */
#define DEFINE_TILE(name, fmt)                                                                 \
    TGT static void name(const uint8_t *w, size_t stride, int nr, const int8_t *aq,           \
                         const q8_scale *ads, int64_t qstride, int64_t nb, int nt, float *y,  \
                         int64_t ldy)                                                          \
    {                                                                                          \
        if (nt == 1) {                                                                         \
            for (int r = 0; r < nr; r += 4) {                                                  \
                int n = nr - r < 4 ? nr - r : 4;                                               \
                const uint8_t *wr[4];                                                          \
                for (int j = 0; j < 4; j++)                                                    \
                    wr[j] = w + (size_t)(r + (j < n ? j : 0)) * stride;                        \
                kern_d(fmt, wr, n, stride, aq, ads, nb, y + r);                                \
            }                                                                                  \
            return;                                                                            \
        }                                                                                      \
        for (int t = 0; t < nt; t += 8) {                                                      \
            int n = nt - t < 8 ? nt - t : 8;                                                   \
            const int8_t *a[8];                                                                \
            const q8_scale *s[8];                                                              \
            for (int k = 0; k < 8; k++) {                                                      \
                int tk = t + (k < n ? k : 0);                                                  \
                a[k] = aq + tk * qstride;                                                      \
                s[k] = ads + tk * nb;                                                          \
            }                                                                                  \
            float *yt = y + t * ldy;                                                           \
            int r = 0;                                                                         \
            if (n > 4) {                                                                       \
                for (; r + 4 <= nr; r += 4)                                                    \
                    kern_p(fmt, 4, 2, w + r * stride, stride, a, s, n, nb, yt + r, ldy);       \
                for (; r < nr; r++)                                                            \
                    kern_p(fmt, 1, 2, w + r * stride, stride, a, s, n, nb, yt + r, ldy);       \
            } else {                                                                           \
                for (; r + 4 <= nr; r += 4)                                                    \
                    kern_p(fmt, 4, 1, w + r * stride, stride, a, s, n, nb, yt + r, ldy);       \
                for (; r < nr; r++)                                                            \
                    kern_p(fmt, 1, 1, w + r * stride, stride, a, s, n, nb, yt + r, ldy);       \
            }                                                                                  \
        }                                                                                      \
    }

DEFINE_TILE(tile_q4_0, FMT_Q4_0)
DEFINE_TILE(tile_q4_1, FMT_Q4_1)
DEFINE_TILE(tile_q8_0, FMT_Q8_0)

/* ---- float weights: 16-wide FMA over tiles of rows x tokens ---- */

INLINE __m512 load16(srt_dtype t, const uint8_t *row, int64_t c)
{
    if (t == SRT_F32)
        return _mm512_loadu_ps((const float *)row + c);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + c));
    if (t == SRT_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INLINE float elem(srt_dtype t, const uint8_t *row, int64_t c)
{
    if (t == SRT_F32)
        return ((const float *)row)[c];
    uint16_t h = ((const uint16_t *)row)[c];
    return t == SRT_F16 ? srt_f16_to_f32(h) : srt_bf16_to_f32(h);
}

INLINE void kern_f(srt_dtype dt, int R, int T, const uint8_t *w, size_t stride, const float *x,
                   int64_t ldx, int64_t cols, float *y, int64_t ldy)
{
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = load16(dt, w + r * stride, c);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            __m512 xv = _mm512_loadu_ps(x + t * ldx + c);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            float v = _mm512_reduce_add_ps(acc[r][t]);
            for (int64_t k = c; k < cols; k++)
                v += elem(dt, w + r * stride, k) * x[t * ldx + k];
            y[t * ldy + r] = v;
        }
}

/* 4 rows x 4 tokens share each converted weight vector and each activation load. */
#define DEFINE_TILE_F(name, dt)                                                                \
    TGT static void name(const uint8_t *w, size_t stride, int nr, const float *x, int64_t ldx, \
                         int64_t cols, int nt, float *y, int64_t ldy)                          \
    {                                                                                          \
        int t = 0;                                                                             \
        for (; t + 4 <= nt; t += 4) {                                                          \
            int r = 0;                                                                         \
            for (; r + 4 <= nr; r += 4)                                                        \
                kern_f(dt, 4, 4, w + r * stride, stride, x + t * ldx, ldx, cols,             \
                       y + t * ldy + r, ldy);                                                  \
            for (; r < nr; r++)                                                                \
                kern_f(dt, 1, 4, w + r * stride, stride, x + t * ldx, ldx, cols,             \
                       y + t * ldy + r, ldy);                                                  \
        }                                                                                      \
        for (; t < nt; t++) {                                                                  \
            int r = 0;                                                                         \
            for (; r + 4 <= nr; r += 4)                                                        \
                kern_f(dt, 4, 1, w + r * stride, stride, x + t * ldx, ldx, cols,               \
                       y + t * ldy + r, ldy);                                                  \
            for (; r < nr; r++)                                                                \
                kern_f(dt, 1, 1, w + r * stride, stride, x + t * ldx, ldx, cols,               \
                       y + t * ldy + r, ldy);                                                  \
        }                                                                                      \
    }

DEFINE_TILE_F(tile_f32, SRT_F32)
DEFINE_TILE_F(tile_f16, SRT_F16)
DEFINE_TILE_F(tile_bf16, SRT_BF16)

/* e^x for x in [-87, 88] (callers clamp): Cody-Waite range reduction to r in
 * [-ln2/2, ln2/2], a degree-6 polynomial for e^r, and 2^n built in the exponent field.
 * Relative error ~2e-7. */
INLINE __m512 exp_ps(__m512 x)
{
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

TGT static void silu_mul(const float *gate, const float *up, int64_t n, float *out)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(gate + i);
        __m512 den = _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g)));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(g, den), _mm512_loadu_ps(up + i)));
    }
    if (i < n) {
        /* the tail through the same vector code (zero-padded), so an element's result does
         * not depend on where the array ends (batch invariance) */
        float g[16] = { 0 }, u[16] = { 0 }, o[16];
        memcpy(g, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u, up + i, sizeof(float) * (size_t)(n - i));
        silu_mul(g, u, 16, o);
        memcpy(out + i, o, sizeof(float) * (size_t)(n - i));
    }
}

/* Same rounding as the portable quantizer (round to nearest even), so results match. */
TGT static void quantize_q8(const float *x, int64_t n, int8_t *q, q8_scale *ds)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / QK; b++, x += QK, q += QK) {
        __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        __m512 m = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
        float amax = _mm512_reduce_max_ps(m);
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        __m512 iv = _mm512_set1_ps(id);
        __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, iv));
        __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, iv));
        _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(i0));
        _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtsepi32_epi8(i1));
        int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
        ds[b].d = d;
        ds[b].s = d * (float)sum;
    }
}

const cpu_simd_ops srt_cpu_ops_avx512 = {
    .name = "avx512",
    .tile_q8 = {
        [SRT_Q8_0] = tile_q8_0,
        [SRT_Q4_0] = tile_q4_0,
        [SRT_Q4_1] = tile_q4_1,
    },
    .tile_f32 = {
        [SRT_F32]  = tile_f32,
        [SRT_F16]  = tile_f16,
        [SRT_BF16] = tile_bf16,
    },
    .quantize_q8 = quantize_q8,
    .silu_mul = silu_mul,
};

#else

const cpu_simd_ops srt_cpu_ops_avx512 = { .name = "avx512", .quantize_q8 = srt_cpu_quantize_q8_portable,
                                       .silu_mul = srt_cpu_silu_mul_portable };

#endif
