/* The exact path's kernels on 16 lanes (AVX-512F), for the CPUs whose AVX2 code leaves half
 * of each vector unit idle. A register holds two 8-lane halves, each running exactly the
 * sequence of exact.c's 8-lane kernel for one (row, token) on the same values in the same order,
 *     t = q[0:8]*x[0:8]; t += q[8:16]*x[8:16]; t += q[16:24]*x[16:24]; t += q[24:32]*x[24:32];
 *     acc += t * d
 * A 512-bit mul or FMA rounds each lane as the 256-bit one does, so every (row, token) output
 * has the AVX2 bits: batch invariance holds and decode and prefill agree. On a core with two
 * 512-bit FMA units a block costs half the issue slots.
 * - prefill: the 1 row x 8 token micro-kernel becomes 2 rows x 4 pairs of tokens, a pair in
 *   the halves (x laid out in pairs beforehand: exact.c's pair_x);
 * - decode of one token on packed Q8_0 (SRT_Q8_0_X8): a group's 8 rows as 4 pairs of rows in
 *   the halves. Two tokens and the unpacked formats stay on AVX2.
 * (Q4_1 has its own kernels, exact_q41.c.)
 * exact.c checks these kernels against its own once per process (srt_cpu_exact_avx512) before
 * using them: a CPU or compiler that rounded a half differently would leave the exact path on
 * AVX2 instead of changing its output. Compiled per function with target attributes so the
 * library still loads on CPUs without AVX-512; called only after a CPUID check. */
#include "backend/cpu/cpu_exact.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/hsum_avx2.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TGT512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define INLINE512 static inline __attribute__((always_inline)) TGT512

/* [a[0:8] | a[0:8]]: one load, no shuffle */
INLINE512 __m512 twice8(const float *a)
{
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(a))));
}

/* exact.c's block_dot on both halves: t = q[0:8]*x[0:8], then three FMAs in order */
INLINE512 __m512 block_dot16(const __m512 q[4], const float *x)
{
    __m512 s = _mm512_mul_ps(q[0], twice8(x));
    s = _mm512_fmadd_ps(q[1], twice8(x + 8), s);
    s = _mm512_fmadd_ps(q[2], twice8(x + 16), s);
    return _mm512_fmadd_ps(q[3], twice8(x + 24), s);
}

/* srt_hsum8 of each half: row A's sum and row B's */
INLINE512 void hsum_halves(__m512 acc, float *a, float *b)
{
    *a = srt_hsum8(_mm512_castps512_ps256(acc));
    *b = srt_hsum8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
}

/* One block of rows A and B (q twice in each register, scales dA, dB) for NP pairs of tokens
 * (xb: the block's paired x), into their accumulators: per half, exact.c's 8-lane sequence */
INLINE512 void pairs_block(int NP, const __m512 qA[4], const __m512 qB[4], __m512 dA, __m512 dB, const float *xb,
                           __m512 *aa, __m512 *ab)
{
#pragma GCC unroll 4
    for (int p = 0; p < NP; p++) {
        __m512 x0 = _mm512_loadu_ps(xb + 64 * p), x1 = _mm512_loadu_ps(xb + 64 * p + 16),
               x2 = _mm512_loadu_ps(xb + 64 * p + 32), x3 = _mm512_loadu_ps(xb + 64 * p + 48);
        __m512 ta = _mm512_mul_ps(qA[0], x0), tb = _mm512_mul_ps(qB[0], x0);
        ta = _mm512_fmadd_ps(qA[1], x1, ta);
        tb = _mm512_fmadd_ps(qB[1], x1, tb);
        ta = _mm512_fmadd_ps(qA[2], x2, ta);
        tb = _mm512_fmadd_ps(qB[2], x2, tb);
        ta = _mm512_fmadd_ps(qA[3], x3, ta);
        tb = _mm512_fmadd_ps(qB[3], x3, tb);
        aa[p] = _mm512_fmadd_ps(ta, dA, aa[p]);
        ab[p] = _mm512_fmadd_ps(tb, dB, ab[p]);
    }
}

/* Rows A and B's accumulators of NP pairs of tokens (a pair's 16 floats in a row): zero at the
 * first column slice, else as the last slice left them; and back */
INLINE512 void pairs_load(int NP, int first, const float *acc_a, const float *acc_b, __m512 *aa, __m512 *ab)
{
#pragma GCC unroll 4
    for (int p = 0; p < NP; p++) {
        aa[p] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc_a + 16 * p);
        ab[p] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc_b + 16 * p);
    }
}

INLINE512 void pairs_store(int NP, const __m512 *aa, const __m512 *ab, float *acc_a, float *acc_b)
{
#pragma GCC unroll 4
    for (int p = 0; p < NP; p++) {
        _mm512_storeu_ps(acc_a + 16 * p, aa[p]);
        _mm512_storeu_ps(acc_b + 16 * p, ab[p]);
    }
}

/* prefill: rows A and B (q: cols floats each, d: a scale per block) x T tokens over blocks
 * [b0, b1), the tokens in pairs: a register holds [token 2p | token 2p+1] of one row, q is the
 * row's 8 lanes twice and xx is the tile's x laid out for it (exact.c's pair_x), so each x
 * chunk is one plain load shared by both rows. acc_a / acc_b: each row's T x 8 accumulators
 * (a pair's 16 floats in a row), carried between column slices as kern_pre's. The rows in the
 * halves instead (each token's x chunk broadcast into both) took twice the x loads and ran at
 * 0.94 ns per row, block and token against 0.72 here, on a Zen 4 core. */
INLINE512 void kern_pre2(int NP, const float *qa, const float *qb, const float *da, const float *db,
                         const float *xx, int64_t b0, int64_t b1, float *acc_a, float *acc_b)
{
    __m512 aa[SRT_EXACT_PRE_T / 2], ab[SRT_EXACT_PRE_T / 2];
    pairs_load(NP, b0 == 0, acc_a, acc_b, aa, ab);
    for (int64_t b = b0; b < b1; b++) {
        const int64_t o = b * QK;
        __m512 qA[4], qB[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            qA[k] = twice8(qa + o + 8 * k);
            qB[k] = twice8(qb + o + 8 * k);
        }
        pairs_block(NP, qA, qB, _mm512_set1_ps(da[b]), _mm512_set1_ps(db[b]), xx + b * SRT_EXACT_PRE_T * QK, aa, ab);
    }
    pairs_store(NP, aa, ab, acc_a, acc_b);
}

#define PRE2_CASE(NP) \
    case NP: kern_pre2(NP, qa, qb, da, db, xx, b0, b1, acc_a, acc_b); return;

TGT512 void srt_cpu_exact_pre2_avx512(int T, const float *qa, const float *qb, const float *da, const float *db,
                                      const float *xx, int64_t b0, int64_t b1, float *acc_a, float *acc_b)
{
    switch ((T + 1) / 2) {
    PRE2_CASE(4) PRE2_CASE(3) PRE2_CASE(2) default: PRE2_CASE(1)
    }
}

/* exact.c's off8 on 16 rows: off[t * 16 + i] = row i's offset for token t, the chain of nb
 * FMAs from 0 in block order (o[b * ost + i], xs[b * ldt + t]) */
TGT512 void srt_cpu_exact_off16_avx512(const float *o, int64_t ost, const float *xs, int64_t ldt, int64_t nb,
                                       float *off)
{
    __m512 a[SRT_EXACT_PRE_T];
#pragma GCC unroll 8
    for (int t = 0; t < SRT_EXACT_PRE_T; t++)
        a[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512 ov = _mm512_loadu_ps(o + b * ost);
#pragma GCC unroll 8
        for (int t = 0; t < SRT_EXACT_PRE_T; t++)
            a[t] = _mm512_fmadd_ps(ov, _mm512_set1_ps(xs[b * ldt + t]), a[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < SRT_EXACT_PRE_T; t++)
        _mm512_storeu_ps(off + 16 * t, a[t]);
}

/* Packed Q8_0, one token, 8 rows of group g (exact.c's kern_q8x8 with T = 1, NR = 8). A pair
 * of rows is two 32-byte loads; their 8-byte chunks k are paired by 64-bit unpacks so that
 * one sign-extension gives [row 2i's q[8k:8k+8] | row 2i+1's], then one convert for both. */
INLINE512 void kern_q8x8_16(const uint8_t *g, const char *pf, const float *x, int64_t nb, const float *bias,
                            float *y)
{
    const __m512i ia[4] = { _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                            _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
                            _mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),
                            _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6) };
    __m512 acc[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
    for (int64_t b = 0; b < nb; b++, g += SRT_EXACT_Q8X8_BLOCK) {
        if (pf)
#pragma GCC unroll 5
            for (size_t o = 0; o < SRT_EXACT_Q8X8_BLOCK; o += 64)
                _mm_prefetch(pf + (size_t)b * SRT_EXACT_Q8X8_BLOCK + o, _MM_HINT_T0);
        __m512 dd = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g)));
        const float *xb = x + b * QK;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            __m256i ra = _mm256_loadu_si256((const __m256i *)(g + 16 + 64 * i));
            __m256i rb = _mm256_loadu_si256((const __m256i *)(g + 48 + 64 * i));
            __m256i lo = _mm256_unpacklo_epi64(ra, rb), hi = _mm256_unpackhi_epi64(ra, rb);   /* chunks 0 2 | 1 3 */
            __m128i c[4] = { _mm256_castsi256_si128(lo), _mm256_castsi256_si128(hi), _mm256_extracti128_si256(lo, 1),
                             _mm256_extracti128_si256(hi, 1) };
            __m512 q[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                q[k] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c[k]));
            acc[i] = _mm512_fmadd_ps(block_dot16(q, xb), _mm512_permutexvar_ps(ia[i], dd), acc[i]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        float lo, hi;
        hsum_halves(acc[i], &lo, &hi);
        y[2 * i] = lo + (bias ? bias[2 * i] : 0.0f);
        y[2 * i + 1] = hi + (bias ? bias[2 * i + 1] : 0.0f);
    }
}

/* dec_loop_x8's loop for one token: the item's groups, each prefetching as that one does */
TGT512 void srt_cpu_exact_x8_avx512(const srt_exact_dec_run *d)
{
    for (int64_t r = d->r0; r < d->r1; r += 8)
        kern_q8x8_16(d->w + (size_t)r * d->stride, srt_exact_x8_pf(d, r), d->x, d->nb, d->bias ? d->bias + r : NULL,
                     d->y + r);
}

#else

void srt_cpu_exact_x8_avx512(const srt_exact_dec_run *d)
{
}

void srt_cpu_exact_off16_avx512(const float *o, int64_t ost, const float *xs, int64_t ldt, int64_t nb, float *off)
{
}

void srt_cpu_exact_pre2_avx512(int T, const float *qa, const float *qb, const float *da, const float *db,
                               const float *xx, int64_t b0, int64_t b1, float *acc_a, float *acc_b)
{
}

#endif
