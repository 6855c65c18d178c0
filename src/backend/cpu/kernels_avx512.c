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

/* Decode reads W once, four rows at a time. Four interleaved short runs defeat the
 * hardware prefetcher (measured: half the DRAM bandwidth of one sequential run), so the
 * kernel prefetches the rows PF_GROUPS groups ahead as one sequential run, spread over its
 * loop. */
#define PF_GROUPS 4
/* Q8_0 decode (in practice the 30 MB lm_head, always from DRAM) is fastest one row at a
 * time: W is then a single sequential stream for the hardware prefetcher. The 4-bit formats
 * are compute-bound enough that four rows sharing each activation load win (kern_d). */
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

/* Weight scales of blocks b and b+1 as [d0 x8, d1 x8] (dv) and the offset term as
 * [m0, 0 x7, m1, 0 x7] (mv), so mv * [s0 .. s1 ..] adds m*s once per block. */
INLINE void load_wscales(int fmt, const uint8_t *b0, const uint8_t *b1, __m512 *dv, __m512 *mv)
{
    uint32_t h0, h1;
    memcpy(&h0, b0, 4);   /* d and, for Q4_1, m; for the others the next bytes are ignored */
    memcpy(&h1, b1, 4);
    __m512 f = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_set_epi32(0, 0, (int)h1, (int)h0)));
    const __m512i idx_d = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i idx_m = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
    *dv = _mm512_permutexvar_ps(idx_d, f);
    if (fmt == FMT_Q4_1)
        *mv = _mm512_maskz_permutexvar_ps(0x0101, idx_m, f);
    else if (fmt == FMT_Q4_0)
        *mv = _mm512_mul_ps(_mm512_maskz_permutexvar_ps(0x0101, idx_d, f), _mm512_set1_ps(-8.0f));
    else
        *mv = _mm512_setzero_ps();
}

/* Activation scales of blocks b, b+1: [dx0 x8, dx1 x8] and [s0, 0.., s1, 0..]. */
INLINE void load_ascales(const q8_scale *s, __m512 *dv, __m512 *sv)
{
    __m512 f = _mm512_castps128_ps512(_mm_loadu_ps(&s->d));
    const __m512i idx_d = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i idx_s = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
    *dv = _mm512_permutexvar_ps(idx_d, f);
    *sv = _mm512_maskz_permutexvar_ps(0x0101, idx_s, f);
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

/* The R x T micro-kernel over a whole row. */
INLINE void kern(int fmt, int R, int T, const uint8_t *w, size_t stride, const int8_t *aq,
                 const q8_scale *ads, int64_t qstride, int64_t nb, float *y, int64_t ldy)
{
    const size_t bb = fmt_bytes[fmt];
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();
    const __m512i zero = _mm512_setzero_si512();
    const char *pf = (const char *)w + PF_GROUPS * R * stride;
    int64_t iters = nb / 2 > 0 ? nb / 2 : 1;
    int64_t pf_lines = T < 4 && R > 1 ? ((int64_t)(R * stride) / 64 + iters - 1) / iters + 1 : 0;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        for (int64_t k = 0; k < pf_lines; k++, pf += 64)
            _mm_prefetch(pf, _MM_HINT_T0);
        __m512i wv[4];
        __mmask64 neg[4];
        __m512 dw[4], mw[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *b0 = w + r * stride + b * bb, *b1 = b0 + bb;
            load_wscales(fmt, b0, b1, &dw[r], &mw[r]);
            if (fmt == FMT_Q8_0) {
                __m512i q = load_q8_pair(b0, b1);
                neg[r] = _mm512_movepi8_mask(q);
                wv[r] = _mm512_abs_epi8(q);
            } else {
                size_t off = fmt == FMT_Q4_1 ? 4 : 2;
                wv[r] = unpack_q4_pair(b0 + off, b1 + off);
                neg[r] = 0;
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            __m512i xv = _mm512_load_si512((const void *)(aq + t * qstride + b * QK));
            __m512 dx, sx;
            load_ascales(ads + t * nb + b, &dx, &sx);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m512i xs = fmt == FMT_Q8_0 ? _mm512_mask_sub_epi8(xv, neg[r], zero, xv) : xv;
                __m512 f = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, wv[r], xs));
                acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(f, dw[r]), dx, acc[r][t]);
                if (fmt != FMT_Q8_0)
                    acc[r][t] = _mm512_fmadd_ps(mw[r], sx, acc[r][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            float v = _mm512_reduce_add_ps(acc[r][t]);
            if (b < nb)
                v += block_dot_scalar(fmt, w + r * stride + b * bb, aq + t * qstride + b * QK,
                                      ads + t * nb + b);
            y[t * ldy + r] = v;
        }
}

/* Prefill micro-kernel: R rows x 4G tokens. Instead of scaling every vpdpbusd result (8
 * partial sums per block) in float, the results for 4 tokens are first folded so that each
 * 128-bit lane holds one partial sum per token: one convert and two FMAs then serve 4
 * (row, token) pairs. Lanes 0-7 stay block b, lanes 8-15 block b+1, matching the scale
 * vectors. Q8_0 is taken as unsigned (w + 128) and corrected through the block sums, like
 * Q4_0's -8. */
INLINE void kern_p(int fmt, int R, int G, const uint8_t *w, size_t stride, const int8_t *aq,
                   const q8_scale *ads, int64_t qstride, int64_t nb, float *y, int64_t ldy)
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
                mw[r] = _mm512_mul_ps(_mm512_maskz_permutexvar_ps(0x0F0F, idx_d, f),
                                      _mm512_set1_ps(fmt == FMT_Q4_0 ? -8.0f : -128.0f));
            if (fmt == FMT_Q8_0)
                wv[r] = _mm512_xor_si512(load_q8_pair(b0, b1), _mm512_set1_epi8((char)0x80));
            else {
                size_t off = fmt == FMT_Q4_1 ? 4 : 2;
                wv[r] = unpack_q4_pair(b0 + off, b1 + off);
            }
        }
#pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            const int8_t *a = aq + 4 * g * qstride + b * QK;
            const q8_scale *s = ads + 4 * g * nb + b;
            __m512i xv[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                xv[k] = _mm512_load_si512((const void *)(a + k * qstride));
            /* [d0 s0 d1 s1] of the 4 tokens, one token per 128-bit lane */
            __m512 z = _mm512_castps128_ps512(_mm_loadu_ps(&s[0].d));
            z = _mm512_insertf32x4(z, _mm_loadu_ps(&s[nb].d), 1);
            z = _mm512_insertf32x4(z, _mm_loadu_ps(&s[2 * nb].d), 2);
            z = _mm512_insertf32x4(z, _mm_loadu_ps(&s[3 * nb].d), 3);
            __m512 dx = _mm512_permutexvar_ps(idx_dx, z);
            __m512 sx = _mm512_maskz_permutexvar_ps(0x0F0F, idx_sx, z);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m512i i0 = _mm512_dpbusd_epi32(zero, wv[r], xv[0]);
                __m512i i1 = _mm512_dpbusd_epi32(zero, wv[r], xv[1]);
                __m512i i2 = _mm512_dpbusd_epi32(zero, wv[r], xv[2]);
                __m512i i3 = _mm512_dpbusd_epi32(zero, wv[r], xv[3]);
                __m512i p01 = _mm512_add_epi32(_mm512_unpacklo_epi32(i0, i1), _mm512_unpackhi_epi32(i0, i1));
                __m512i p23 = _mm512_add_epi32(_mm512_unpacklo_epi32(i2, i3), _mm512_unpackhi_epi32(i2, i3));
                __m512i sum = _mm512_add_epi32(_mm512_unpacklo_epi64(p01, p23), _mm512_unpackhi_epi64(p01, p23));
                acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dx, dw[r]), acc[r][g]);
                acc[r][g] = _mm512_fmadd_ps(mw[r], sx, acc[r][g]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc[r][g]),
                                     _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][g]), 1)));
            __m128 v = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
            float out[4];
            _mm_storeu_ps(out, v);
            for (int j = 0; j < 4; j++) {
                int t = 4 * g + j;
                if (b < nb)
                    out[j] += block_dot_scalar(fmt, w + r * stride + b * bb, aq + t * qstride + b * QK,
                                               ads + t * nb + b);
                y[t * ldy + r] = out[j];
            }
        }
}

/* Decode micro-kernel for the 4-bit formats: 4 rows x 1 token, folded like kern_p but
 * across rows (lane j and 4+j of each half hold row j), so the scale work is shared by
 * four rows. Prefetches the rows after the group as kern does. */
INLINE void kern_d(int fmt, const uint8_t *w, size_t stride, const int8_t *aq,
                   const q8_scale *ads, int64_t nb, float *y)
{
    const size_t bb = fmt_bytes[fmt];
    const __m512i zero = _mm512_setzero_si512();
    const __m512i idx_pd = _mm512_set_epi32(14, 10, 6, 2, 14, 10, 6, 2, 12, 8, 4, 0, 12, 8, 4, 0);
    const __m512i idx_pm = _mm512_set_epi32(15, 11, 7, 3, 15, 11, 7, 3, 13, 9, 5, 1, 13, 9, 5, 1);
    const __m512i idx_d = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i idx_s = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
    const char *pf = (const char *)w + PF_GROUPS * 4 * stride;
    int64_t iters = nb / 2 > 0 ? nb / 2 : 1;
    int64_t pf_lines = ((int64_t)(4 * stride) / 64 + iters - 1) / iters + 1;
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
            const uint8_t *b0 = w + r * stride + b * bb, *b1 = b0 + bb;
            uint32_t h0, h1;
            memcpy(&h0, b0, 4);
            memcpy(&h1, b1, 4);
            h[r] = _mm_cvtph_ps(_mm_set_epi32(0, 0, (int)h1, (int)h0));   /* [d0 m0 d1 m1] */
            size_t off = fmt == FMT_Q4_1 ? 4 : 2;
            i[r] = _mm512_dpbusd_epi32(zero, unpack_q4_pair(b0 + off, b1 + off), xv);
        }
        __m512 z = _mm512_castps128_ps512(h[0]);
        z = _mm512_insertf32x4(z, h[1], 1);
        z = _mm512_insertf32x4(z, h[2], 2);
        z = _mm512_insertf32x4(z, h[3], 3);
        __m512 dw = _mm512_permutexvar_ps(idx_pd, z);
        __m512 mw = fmt == FMT_Q4_1 ? _mm512_maskz_permutexvar_ps(0x0F0F, idx_pm, z)
                                    : _mm512_maskz_mul_ps(0x0F0F, dw, _mm512_set1_ps(-8.0f));
        __m512i p01 = _mm512_add_epi32(_mm512_unpacklo_epi32(i[0], i[1]), _mm512_unpackhi_epi32(i[0], i[1]));
        __m512i p23 = _mm512_add_epi32(_mm512_unpacklo_epi32(i[2], i[3]), _mm512_unpackhi_epi32(i[2], i[3]));
        __m512i sum = _mm512_add_epi32(_mm512_unpacklo_epi64(p01, p23), _mm512_unpackhi_epi64(p01, p23));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, dx), acc);
        acc = _mm512_fmadd_ps(mw, sx, acc);
    }
    __m256 hs = _mm256_add_ps(_mm512_castps512_ps256(acc),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(hs), _mm256_extractf128_ps(hs, 1));
    float out[4];
    _mm_storeu_ps(out, v);
    for (int r = 0; r < 4; r++) {
        if (b < nb)
            out[r] += block_dot_scalar(fmt, w + r * stride + b * bb, aq + b * QK, ads + b);
        y[r] = out[r];
    }
}

#define TILE_ROWS(fmt, R, T)                                                                  \
    do {                                                                                       \
        int r_ = 0;                                                                            \
        for (; r_ + (R) <= nr; r_ += (R))                                                       \
            kern(fmt, R, T, w + r_ * stride, stride, aq + t * qstride, ads + t * nb, qstride,  \
                 nb, y + t * ldy + r_, ldy);                                                 \
        for (; r_ < nr; r_++)                                                                  \
            kern(fmt, 1, T, w + r_ * stride, stride, aq + t * qstride, ads + t * nb, qstride,  \
                 nb, y + t * ldy + r_, ldy);                                                 \
    } while (0)

/* Every token of a tile is handled in one pass over the rows, so a small batch (2-3
 * tokens) streams W once, not once per token. */
#define DEFINE_TILE(name, fmt)                                                                 \
    TGT static void name(const uint8_t *w, size_t stride, int nr, const int8_t *aq,           \
                         const q8_scale *ads, int64_t qstride, int64_t nb, int nt, float *y,  \
                         int64_t ldy)                                                          \
    {                                                                                          \
        int t = 0;                                                                             \
        for (; t + 8 <= nt; t += 8) {                                                          \
            int r = 0;                                                                         \
            for (; r + 4 <= nr; r += 4)                                                        \
                kern_p(fmt, 4, 2, w + r * stride, stride, aq + t * qstride, ads + t * nb,      \
                       qstride, nb, y + t * ldy + r, ldy);                                     \
            for (; r < nr; r++)                                                                \
                kern_p(fmt, 1, 2, w + r * stride, stride, aq + t * qstride, ads + t * nb,      \
                       qstride, nb, y + t * ldy + r, ldy);                                     \
        }                                                                                      \
        for (; t + 4 <= nt; t += 4)                                                         \
            TILE_ROWS(fmt, 4, 4);                                                           \
        switch (nt - t) {                                                                      \
        case 3: TILE_ROWS(fmt, 4, 3); break;                                            \
        case 2: TILE_ROWS(fmt, 4, 2); break;                                            \
        case 1:                                                                                \
            if (fmt == FMT_Q8_0) {                                                             \
                TILE_ROWS(fmt, 1, 1);                                                          \
            } else {                                                                           \
                int r = 0;                                                                     \
                for (; r + 4 <= nr; r += 4)                                                    \
                    kern_d(fmt, w + r * stride, stride, aq + t * qstride, ads + t * nb, nb,    \
                           y + t * ldy + r);                                                   \
                for (; r < nr; r++)                                                            \
                    kern(fmt, 1, 1, w + r * stride, stride, aq + t * qstride, ads + t * nb,    \
                         qstride, nb, y + t * ldy + r, ldy);                                   \
            }                                                                                  \
            break;                                                                             \
        default: break;                                                                        \
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
    if (i < n)
        srt_cpu_silu_mul_portable(gate + i, up + i, n - i, out + i);
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
