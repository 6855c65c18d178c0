/* Horizontal sums of 8-float vectors, one order for every AVX2 kernel that needs its bits to
 * match another's (exact.c's decode and prefill, cpu_dot.c's f16 attention blocks and the
 * f32 dot). x86-64 only; callers check the CPU before running them. */
#ifndef SRT_CPU_HSUM_AVX2_H
#define SRT_CPU_HSUM_AVX2_H
#if defined(__x86_64__)

#include <immintrin.h>

#define SRT_HSUM_TGT static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* lanes i and i+4 (the 128-bit halves), then 0+2 and 1+3, then their sum */
SRT_HSUM_TGT float srt_hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* srt_hsum8 of eight vectors at once (vector k at a + k * ld), the results in order. The same
 * additions, pair by pair, so the same bits; only the lanes' placement differs. */
SRT_HSUM_TGT __m256 srt_hsum8x8_ld(const float *a, long ld)
{
    __m256 s[4];
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {   /* [lo + hi of vector 2p | lo + hi of vector 2p+1] */
        __m256 u = _mm256_loadu_ps(a + 2 * p * ld), v = _mm256_loadu_ps(a + (2 * p + 1) * ld);
        s[p] = _mm256_add_ps(_mm256_permute2f128_ps(u, v, 0x20), _mm256_permute2f128_ps(u, v, 0x31));
    }
    /* per 128-bit lane [s0+s2, s1+s3] of two vectors side by side */
    __m256 w0 = _mm256_add_ps(_mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 w1 = _mm256_add_ps(_mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(3, 2, 3, 2)));
    /* vectors 0 2 4 6 | 1 3 5 7 */
    __m256 r = _mm256_add_ps(_mm256_shuffle_ps(w0, w1, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(w0, w1, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* vectors 8 floats apart */
SRT_HSUM_TGT __m256 srt_hsum8x8(const float *a) { return srt_hsum8x8_ld(a, 8); }

#endif
#endif
