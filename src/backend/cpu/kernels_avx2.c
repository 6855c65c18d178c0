/* AVX2 + FMA + F16C kernels, compiled per function with target attributes so the library
 * still loads on older CPUs; matmul.c only calls these after a CPUID check.
 *
 * One 32-wide block per 256-bit register. Unsigned 4-bit weights multiply the signed Q8
 * activations with vpmaddubsw (no overflow: 15*127*2 < 32767); Q8_0 weights use the
 * abs/sign trick to get an unsigned operand. Offsets (Q4_1's m, Q4_0's -8) are applied
 * once per block through the activation block sums. */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/block_scales.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/hsum_avx2.h"
#include "backend/cpu/cpu_kernels.h"

#if defined(__x86_64__)

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) TGT

/* Decode reads W once, several rows at a time; interleaved short runs defeat the hardware
 * prefetcher, so the kernel prefetches the rows PF_GROUPS groups ahead as one sequential
 * run, spread over its loop. */
#define PF_GROUPS 4

enum { FMT_Q4_0, FMT_Q4_1, FMT_Q8_0, FMT_Q5_0, FMT_Q5_1, FMT_IQ4_NL };

static const size_t fmt_bytes[] = { sizeof(blk_q4_0), sizeof(blk_q4_1), sizeof(blk_q8_0), sizeof(blk_q5_0),
                                    sizeof(blk_q5_1), sizeof(blk_iq4_nl) };

/* the formats whose weights are signed bytes as they are (no offset) */
static inline int signed_q(int fmt) { return fmt == FMT_Q8_0 || fmt == FMT_IQ4_NL; }

/* the formats whose block carries m after d (x = d*q + m) */
static inline int has_m(int fmt) { return fmt == FMT_Q4_1 || fmt == FMT_Q5_1; }

INLINE __m256i unpack_q4(const uint8_t *qs)
{
    __m128i a = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(a, 4), a), _mm256_set1_epi8(0x0F));
}

/* Batch invariance: every (row, token) output of the 32-wide formats is computed with the
 * one reduction order of kern_p, whatever the tile: per block, the 8 vpmaddwd sums are
 * folded (exactly, in integers) to two, lanes j and 4+j; those are scaled and accumulated
 * in float block by block (the offset m*s joins lane j after the block's scale), and the
 * result is lane j + lane 4+j. Decode folds four rows instead of four tokens (kern_d), and
 * a short tile pads its token or row group with copies of its first member, so a token
 * gets the same bits alone, in a decode batch, or anywhere in a prefill tile. */

/* fold of four vpmaddwd results: lane j and 4+j hold the sums of i[j]'s low and high halves */
INLINE __m256 fold4(__m256i i0, __m256i i1, __m256i i2, __m256i i3)
{
    __m256i p01 = _mm256_add_epi32(_mm256_unpacklo_epi32(i0, i1), _mm256_unpackhi_epi32(i0, i1));
    __m256i p23 = _mm256_add_epi32(_mm256_unpacklo_epi32(i2, i3), _mm256_unpackhi_epi32(i2, i3));
    return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_unpacklo_epi64(p01, p23), _mm256_unpackhi_epi64(p01, p23)));
}

/* IQ4_NL's 16 levels in both 128-bit lanes, looked up by nibble (vpshufb) */
INLINE __m256i iq4_levels(void)
{
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)IQ4_VALUES));
}

/* sum of q*x per int32 lane for signed byte weights q (|q| <= 127), times the int16 k: abs/sign,
 * as Q8_0's (a pair's sum at most 2 * 127 * 127, then the pairs times k in int32) */
INLINE __m256i signed_isum(__m256i q, __m256i xv, __m256i k)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(xv, q)), k);
}

INLINE __m256i block_isum(int fmt, const uint8_t *blk, __m256i xv)
{
    const __m256i ones = _mm256_set1_epi16(1);
    if (fmt == FMT_IQ4_NL)
        return signed_isum(_mm256_shuffle_epi8(iq4_levels(), unpack_q4(blk + 2)), xv, ones);
    if (fmt == FMT_Q8_0) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 2));
        return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(xv, q)), ones);
    }
    if (fmt == FMT_Q5_0 || fmt == FMT_Q5_1) {   /* q <= 31: a pair's sum stays below 2^13 */
        __m256i q = srt_q5_bytes(blk + (fmt == FMT_Q5_1 ? 4 : 2));
        return _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), ones);
    }
    return _mm256_madd_epi16(_mm256_maddubs_epi16(unpack_q4(blk + (fmt == FMT_Q4_1 ? 4 : 2)), xv), ones);
}

INLINE void store_fold(__m256 acc, float *y, int64_t ldy, int n)
{
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    float out[4];
    _mm_storeu_ps(out, v);
    for (int j = 0; j < n; j++)
        y[j * ldy] = out[j];
}

/* Prefill micro-kernel: R rows x 4 tokens (a[k], s[k]: token k's activations and scales;
 * the first nt are stored). One convert and two FMAs serve four (row, token) pairs. */
INLINE void kern_p(int fmt, int R, const uint8_t *w, size_t stride, const int8_t *const *a,
                   const q8_scale *const *s, int nt, int64_t nb, float *y, int64_t ldy)
{
    const size_t bb = fmt_bytes[fmt];
    const __m256i idx_d = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    const __m256i idx_s = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
    __m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int64_t b = 0; b < nb; b++) {
        /* [d s] of the four tokens -> dx = [d0..d3 d0..d3], sx = [s0..s3 0 0 0 0] */
        __m128 s01 = _mm_loadh_pi(_mm_castpd_ps(_mm_load_sd((const double *)&s[0][b].d)),
                                  (const __m64 *)&s[1][b].d);
        __m128 s23 = _mm_loadh_pi(_mm_castpd_ps(_mm_load_sd((const double *)&s[2][b].d)),
                                  (const __m64 *)&s[3][b].d);
        __m256 z = _mm256_set_m128(s23, s01);
        __m256 dx = _mm256_permutevar8x32_ps(z, idx_d);
        __m256 sx = _mm256_blend_ps(_mm256_permutevar8x32_ps(z, idx_s), _mm256_setzero_ps(), 0xF0);
        __m256i xv[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            xv[k] = _mm256_load_si256((const __m256i *)(a[k] + b * QK));
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + r * stride + b * bb;
            float d = srt_half_at(blk);
            __m256 f = fold4(block_isum(fmt, blk, xv[0]), block_isum(fmt, blk, xv[1]),
                             block_isum(fmt, blk, xv[2]), block_isum(fmt, blk, xv[3]));
            acc[r] = _mm256_fmadd_ps(f, _mm256_mul_ps(dx, _mm256_set1_ps(d)), acc[r]);
            if (!signed_q(fmt)) {
                float m = has_m(fmt) ? srt_half_at(blk + 2) : (fmt == FMT_Q5_0 ? -16.0f : -8.0f) * d;
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(m), sx, acc[r]);
            }
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
        store_fold(acc[r], y + r, ldy, nt);
}

/* Decode micro-kernel: 4 rows (wr[j]; the first nr are stored) x 1 token, folded across
 * rows with the same per-lane arithmetic as kern_p. Prefetches the rows PF_GROUPS groups
 * ahead as one sequential run. */
INLINE void kern_d(int fmt, const uint8_t *const *wr, int nr, size_t stride, const int8_t *aq,
                   const q8_scale *ads, int64_t nb, float *y)
{
    const size_t bb = fmt_bytes[fmt];
    const char *pf = (const char *)wr[0] + PF_GROUPS * 4 * stride;
    int64_t pf_lines = nr == 4 ? ((int64_t)(4 * stride) / 64 + nb - 1) / (nb > 0 ? nb : 1) + 1 : 0;
    const __m256 lo_mask = _mm256_castsi256_ps(_mm256_setr_epi32(-1, -1, -1, -1, 0, 0, 0, 0));
    const __m256i idx_d = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6), idx_m = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t k = 0; k < pf_lines; k++, pf += 64)
            _mm_prefetch(pf, _MM_HINT_T0);
        __m256i xv = _mm256_load_si256((const __m256i *)(aq + b * QK));
        const uint8_t *blk[4] = { wr[0] + b * bb, wr[1] + b * bb, wr[2] + b * bb, wr[3] + b * bb };
        __m256 f = fold4(block_isum(fmt, blk[0], xv), block_isum(fmt, blk[1], xv),
                         block_isum(fmt, blk[2], xv), block_isum(fmt, blk[3], xv));
        /* the four rows' scales in one convert, as the exact kernel takes them */
        __m256 dm = srt_scales4_f16(blk[0], blk[1], blk[2], blk[3], has_m(fmt));
        __m256 dw = _mm256_permutevar8x32_ps(dm, idx_d);
        acc = _mm256_fmadd_ps(f, _mm256_mul_ps(dw, _mm256_set1_ps(ads[b].d)), acc);
        if (!signed_q(fmt)) {
            __m256 mw = has_m(fmt) ? _mm256_permutevar8x32_ps(dm, idx_m)
                                   : _mm256_mul_ps(_mm256_set1_ps(fmt == FMT_Q5_0 ? -16.0f : -8.0f), dw);
            __m256 sx = _mm256_and_ps(_mm256_set1_ps(ads[b].s), lo_mask);
            acc = _mm256_fmadd_ps(mw, sx, acc);
        }
    }
    store_fold(acc, y, 1, nr);
}

/* Every token of a tile is handled in one pass over the rows, so a small batch (2-3
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
        for (int t = 0; t < nt; t += 4) {                                                      \
            int n = nt - t < 4 ? nt - t : 4;                                                   \
            const int8_t *a[4];                                                                \
            const q8_scale *s[4];                                                              \
            for (int k = 0; k < 4; k++) {                                                      \
                int tk = t + (k < n ? k : 0);                                                  \
                a[k] = aq + tk * qstride;                                                      \
                s[k] = ads + tk * nb;                                                          \
            }                                                                                  \
            int r = 0;                                                                         \
            for (; r + 2 <= nr; r += 2)                                                        \
                kern_p(fmt, 2, w + r * stride, stride, a, s, n, nb, y + t * ldy + r, ldy);     \
            for (; r < nr; r++)                                                                \
                kern_p(fmt, 1, w + r * stride, stride, a, s, n, nb, y + t * ldy + r, ldy);     \
        }                                                                                      \
    }

DEFINE_TILE(tile_q4_0, FMT_Q4_0)
DEFINE_TILE(tile_q4_1, FMT_Q4_1)
DEFINE_TILE(tile_q8_0, FMT_Q8_0)
DEFINE_TILE(tile_q5_0, FMT_Q5_0)
DEFINE_TILE(tile_q5_1, FMT_Q5_1)
DEFINE_TILE(tile_iq4_nl, FMT_IQ4_NL)

/* ---- K-quants: one row x T tokens per call, so each unpacked weight vector is reused T
 * times; sub-block scales are applied in integer form (vpmaddwd by the 6/8-bit scale),
 * super-block scales once per 256 ---- */

/* Q4_K, and Q5_K (five: its super-block is Q4_K's with qh[32] before qs, and bit j of qh[l]
 * adds 16 to element 32j + l; q up to 31 keeps maddubs' byte pairs within int16) */
INLINE void kern_k4(int T, int five, const uint8_t *row, const int8_t *aq, const q8_scale *ads,
                    int64_t qstride, int64_t nb, float *y, int64_t ldy)
{
    const size_t sbytes = five ? sizeof(blk_q5_k) : sizeof(blk_q4_k);
    const size_t qs_at = five ? offsetof(blk_q5_k, qs) : offsetof(blk_q4_k, qs);
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256 acc[4];
    float macc[4] = { 0 };
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nb / 8; sb++, row += sbytes) {
        const blk_q4_k *w = (const blk_q4_k *)row;   /* d, dmin and scales: the same places */
        __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(row + offsetof(blk_q5_k, qh))) : _mm256_setzero_si256();
        __m256 sacc[4];
        float mins[4] = { 0 };
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            sacc[t] = _mm256_setzero_ps();
        for (int c = 0; c < 4; c++) {
            int sc0, mn0, sc1, mn1;
            q4k_scale_min(w->scales, 2 * c, &sc0, &mn0);
            q4k_scale_min(w->scales, 2 * c + 1, &sc1, &mn1);
            __m256i q = _mm256_loadu_si256((const __m256i *)(row + qs_at + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (five) {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
            }
            __m256i s0 = _mm256_set1_epi16((short)sc0), s1 = _mm256_set1_epi16((short)sc1);
            int64_t blk = sb * 8 + 2 * c;
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const int8_t *a = aq + t * qstride + blk * QK;
                const q8_scale *ds = ads + t * nb + blk;
                __m256i p0 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(lo, _mm256_load_si256((const __m256i *)a)), s0);
                __m256i p1 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(hi, _mm256_load_si256((const __m256i *)(a + QK))), s1);
                sacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(ds[0].d), sacc[t]);
                sacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(ds[1].d), sacc[t]);
                mins[t] += (float)mn0 * ds[0].s + (float)mn1 * ds[1].s;
            }
        }
        __m256 d = _mm256_set1_ps(srt_half_at((const uint8_t *)&w->d));
        float dmin = srt_half_at((const uint8_t *)&w->dmin);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            acc[t] = _mm256_fmadd_ps(sacc[t], d, acc[t]);
            macc[t] += dmin * mins[t];
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        y[t * ldy] = srt_hsum8(acc[t]) - macc[t];
}

INLINE void kern_q6_k(int T, const uint8_t *row, const int8_t *aq, const q8_scale *ads,
                      int64_t qstride, int64_t nb, float *y, int64_t ldy)
{
    const blk_q6_k *w = (const blk_q6_k *)row;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    const __m256i k32 = _mm256_set1_epi8(32);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nb / 8; sb++, w++) {
        __m256 sacc[4];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            sacc[t] = _mm256_setzero_ps();
        for (int h = 0; h < 2; h++) {
            __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * h));
            __m256i ql1 = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(w->qh + 32 * h));
            __m256i lows[4] = {
                _mm256_and_si256(ql0, m4), _mm256_and_si256(ql1, m4),
                _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
            };
            for (int g = 0; g < 4; g++) {
                __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m2);
                __m256i q = _mm256_or_si256(lows[g], _mm256_slli_epi16(hb, 4));   /* 0..63 */
                const int8_t *sc = w->scales + 8 * h + 2 * g;
                __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]));
                int64_t blk = sb * 8 + 4 * h + g;
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) {
                    __m256i x = _mm256_load_si256((const __m256i *)(aq + t * qstride + blk * QK));
                    /* (q - 32) * x as q*x - 32*x; each pair stays within int16 */
                    __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, x), _mm256_maddubs_epi16(k32, x));
                    sacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, scv)),
                                              _mm256_set1_ps(ads[t * nb + blk].d), sacc[t]);
                }
            }
        }
        __m256 d = _mm256_set1_ps(srt_half_at((const uint8_t *)&w->d));
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_fmadd_ps(sacc[t], d, acc[t]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        y[t * ldy] = srt_hsum8(acc[t]);
}

/* IQ4_XS: IQ4_NL's levels, a 6-bit scale less 32 per 32 applied in integers */
INLINE void kern_iq4_xs(int T, const uint8_t *row, const int8_t *aq, const q8_scale *ads,
                        int64_t qstride, int64_t nb, float *y, int64_t ldy)
{
    const blk_iq4_xs *w = (const blk_iq4_xs *)row;
    const __m256i lv = iq4_levels();
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nb / 8; sb++, w++) {
        __m256 sacc[4];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            sacc[t] = _mm256_setzero_ps();
        for (int j = 0; j < 8; j++) {
            __m256i q = _mm256_shuffle_epi8(lv, unpack_q4(w->qs + 16 * j));
            __m256i scv = _mm256_set1_epi16((short)(iq4xs_scale(w, j) - 32));
            int64_t blk = sb * 8 + j;
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                __m256i x = _mm256_load_si256((const __m256i *)(aq + t * qstride + blk * QK));
                sacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(signed_isum(q, x, scv)),
                                          _mm256_set1_ps(ads[t * nb + blk].d), sacc[t]);
            }
        }
        __m256 d = _mm256_set1_ps(srt_half_at((const uint8_t *)&w->d));
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_fmadd_ps(sacc[t], d, acc[t]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        y[t * ldy] = srt_hsum8(acc[t]);
}

/* Q2_K and Q3_K: block j's q are the two bits at 2 * (j % 4) of qs[32 * (j / 4)..+32] (Q3_K: and
 * bit j of hmask[0..32] as 4), 16 to a scale; Q3_K's (q - 4) * x as q*x - 4*x, Q2_K's mins
 * through the sums of x per 16 (maddubs by ones) */
INLINE void kern_q23_k(int T, int three, const uint8_t *row, const int8_t *aq, const q8_scale *ads,
                       int64_t qstride, int64_t nb, float *y, int64_t ldy)
{
    const size_t sbytes = three ? sizeof(blk_q3_k) : sizeof(blk_q2_k);
    const __m256i m2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), four = _mm256_set1_epi8(4);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nb / 8; sb++, row += sbytes) {
        const blk_q2_k *w2 = (const blk_q2_k *)row;
        const blk_q3_k *w3 = (const blk_q3_k *)row;
        const uint8_t *qs = three ? w3->qs : w2->qs;
        __m256i hm = three ? _mm256_loadu_si256((const __m256i *)w3->hmask) : _mm256_setzero_si256();
        __m256 sacc[4], macc[4];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            sacc[t] = macc[t] = _mm256_setzero_ps();
        for (int j = 0; j < 8; j++) {
            __m256i q = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(qs + 32 * (j / 4))), 2 * (j % 4)), m2);
            int s0, s1, n0 = 0, n1 = 0;
            if (three) {
                q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, j), one), 2));
                s0 = q3k_scale(w3->scales, 2 * j) - 32, s1 = q3k_scale(w3->scales, 2 * j + 1) - 32;
            } else {
                s0 = w2->scales[2 * j] & 15, s1 = w2->scales[2 * j + 1] & 15;
                n0 = w2->scales[2 * j] >> 4, n1 = w2->scales[2 * j + 1] >> 4;
            }
            __m256i scv = _mm256_set_m128i(_mm_set1_epi16((short)s1), _mm_set1_epi16((short)s0));
            __m256i mnv = _mm256_set_m128i(_mm_set1_epi16((short)n1), _mm_set1_epi16((short)n0));
            int64_t blk = sb * 8 + j;
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                __m256i x = _mm256_load_si256((const __m256i *)(aq + t * qstride + blk * QK));
                __m256i p = _mm256_maddubs_epi16(q, x);
                if (three)
                    p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(four, x));
                __m256 dx = _mm256_set1_ps(ads[t * nb + blk].d);
                sacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, scv)), dx, sacc[t]);
                if (!three)
                    macc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(one, x), mnv)),
                                              dx, macc[t]);
            }
        }
        __m256 d = _mm256_set1_ps(srt_half_at(three ? (const uint8_t *)&w3->d : (const uint8_t *)&w2->d));
        __m256 dmin = _mm256_set1_ps(three ? 0.0f : srt_half_at((const uint8_t *)&w2->dmin));
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_fnmadd_ps(macc[t], dmin, _mm256_fmadd_ps(sacc[t], d, acc[t]));
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        y[t * ldy] = srt_hsum8(acc[t]);
}

INLINE void kern_q2_k(int T, const uint8_t *row, const int8_t *aq, const q8_scale *ads,
                      int64_t qstride, int64_t nb, float *y, int64_t ldy)
{
    kern_q23_k(T, 0, row, aq, ads, qstride, nb, y, ldy);
}

INLINE void kern_q3_k(int T, const uint8_t *row, const int8_t *aq, const q8_scale *ads,
                      int64_t qstride, int64_t nb, float *y, int64_t ldy)
{
    kern_q23_k(T, 1, row, aq, ads, qstride, nb, y, ldy);
}

#define DEFINE_TILE_K(name, kernfn)                                                            \
    TGT static void name(const uint8_t *w, size_t stride, int nr, const int8_t *aq,           \
                         const q8_scale *ads, int64_t qstride, int64_t nb, int nt, float *y,  \
                         int64_t ldy)                                                          \
    {                                                                                          \
        int t = 0;                                                                             \
        for (; t + 4 <= nt; t += 4)                                                            \
            for (int r = 0; r < nr; r++)                                                       \
                kernfn(4, w + r * stride, aq + t * qstride, ads + t * nb, qstride, nb,         \
                       y + t * ldy + r, ldy);                                                  \
        for (int r = 0; r < nr; r++) {                                                         \
            const uint8_t *wr = w + r * stride;                                                \
            const int8_t *a = aq + t * qstride;                                                \
            switch (nt - t) {                                                                  \
            case 3: kernfn(3, wr, a, ads + t * nb, qstride, nb, y + t * ldy + r, ldy); break;  \
            case 2: kernfn(2, wr, a, ads + t * nb, qstride, nb, y + t * ldy + r, ldy); break;  \
            case 1: kernfn(1, wr, a, ads + t * nb, qstride, nb, y + t * ldy + r, ldy); break;  \
            default: break;                                                                    \
            }                                                                                  \
        }                                                                                      \
    }

INLINE void kern_q4_k(int T, const uint8_t *row, const int8_t *aq, const q8_scale *ads,
                      int64_t qstride, int64_t nb, float *y, int64_t ldy)
{
    kern_k4(T, 0, row, aq, ads, qstride, nb, y, ldy);
}

INLINE void kern_q5_k(int T, const uint8_t *row, const int8_t *aq, const q8_scale *ads,
                      int64_t qstride, int64_t nb, float *y, int64_t ldy)
{
    kern_k4(T, 1, row, aq, ads, qstride, nb, y, ldy);
}

DEFINE_TILE_K(tile_q4_k, kern_q4_k)
DEFINE_TILE_K(tile_q5_k, kern_q5_k)
DEFINE_TILE_K(tile_q6_k, kern_q6_k)
DEFINE_TILE_K(tile_iq4_xs, kern_iq4_xs)
DEFINE_TILE_K(tile_q2_k, kern_q2_k)
DEFINE_TILE_K(tile_q3_k, kern_q3_k)

/* ---- float weights: 8-wide FMA over tiles of rows x tokens ---- */

INLINE __m256 load8(srt_dtype t, const uint8_t *row, int64_t c)
{
    if (t == SRT_F32)
        return _mm256_loadu_ps((const float *)row + c);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + c));
    if (t == SRT_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
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
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
        __m256 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = load8(dt, w + r * stride, c);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            __m256 xv = _mm256_loadu_ps(x + t * ldx + c);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            float v = srt_hsum8(acc[r][t]);
            for (int64_t k = c; k < cols; k++)
                v += elem(dt, w + r * stride, k) * x[t * ldx + k];
            y[t * ldy + r] = v;
        }
}

/* 4 rows x 2 tokens share each converted weight vector and each activation load. */
#define DEFINE_TILE_F(name, dt)                                                                \
    TGT static void name(const uint8_t *w, size_t stride, int nr, const float *x, int64_t ldx, \
                         int64_t cols, int nt, float *y, int64_t ldy)                          \
    {                                                                                          \
        int t = 0;                                                                             \
        for (; t + 2 <= nt; t += 2) {                                                          \
            int r = 0;                                                                         \
            for (; r + 4 <= nr; r += 4)                                                        \
                kern_f(dt, 4, 2, w + r * stride, stride, x + t * ldx, ldx, cols,             \
                       y + t * ldy + r, ldy);                                                  \
            for (; r < nr; r++)                                                                \
                kern_f(dt, 1, 2, w + r * stride, stride, x + t * ldx, ldx, cols,             \
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
INLINE __m256 exp_ps(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
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
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

TGT static void silu_mul(const float *gate, const float *up, int64_t n, float *out)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, den), _mm256_loadu_ps(up + i)));
    }
    if (i < n) {
        /* the tail through the same vector code (zero-padded), so an element's result does
         * not depend on where the array ends (batch invariance) */
        float g[8] = { 0 }, u[8] = { 0 }, o[8];
        memcpy(g, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u, up + i, sizeof(float) * (size_t)(n - i));
        silu_mul(g, u, 8, o);
        memcpy(out + i, o, sizeof(float) * (size_t)(n - i));
    }
}

/* Same rounding as the portable quantizer (round to nearest even), so results match. */
TGT static void quantize_q8(const float *x, int64_t n, int8_t *q, q8_scale *ds)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / QK; b++, x += QK, q += QK) {
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h);
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256 iv = _mm256_set1_ps(id);
        __m256i i[4];
        for (int k = 0; k < 4; k++)
            i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], iv));
        __m256i sum = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s = _mm_hadd_epi32(s, s);
        s = _mm_hadd_epi32(s, s);
        /* packs interleave 128-bit lanes; the permute restores element order */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)q, p);
        ds[b].d = d;
        ds[b].s = d * (float)_mm_cvtsi128_si32(s);
    }
}

const cpu_simd_ops srt_cpu_ops_avx2 = {
    .name = "avx2",
    .tile_q8 = {
        [SRT_Q8_0] = tile_q8_0,
        [SRT_Q4_0] = tile_q4_0,
        [SRT_Q4_1] = tile_q4_1,
        [SRT_Q5_0] = tile_q5_0,
        [SRT_Q5_1] = tile_q5_1,
        [SRT_Q4_K] = tile_q4_k,
        [SRT_Q5_K] = tile_q5_k,
        [SRT_Q6_K] = tile_q6_k,
        [SRT_Q2_K] = tile_q2_k,
        [SRT_Q3_K] = tile_q3_k,
        [SRT_IQ4_NL] = tile_iq4_nl,
        [SRT_IQ4_XS] = tile_iq4_xs,
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

const cpu_simd_ops srt_cpu_ops_avx2 = { .name = "avx2", .quantize_q8 = srt_cpu_quantize_q8_portable,
                                       .silu_mul = srt_cpu_silu_mul_portable };

#endif
