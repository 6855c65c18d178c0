/* The exact prefill micro-kernel on 16 lanes (AVX-512F): two weight rows side by side, the
 * low 256 bits of every register row A's lanes, the high 256 bits row B's. Each half runs
 * exact.c's kern_pre sequence on the same values in the same order,
 *     t = q[0:8]*x[0:8]; t += q[8:16]*x[8:16]; t += q[16:24]*x[16:24]; t += q[24:32]*x[24:32];
 *     acc += t * d
 * and a 512-bit mul or FMA rounds each lane as the 256-bit one does, so a (row, token)
 * accumulator has the bits of the AVX2 kernel: decode (still AVX2) and prefill agree and the
 * batch invariance of exact.c holds. What it buys: a token's x chunk is one broadcast load
 * for both rows, and on a core with two 512-bit FMA units a block costs half the issue slots.
 *
 * exact.c checks this kernel against kern_pre once per process (srt_cpu_exact_avx512_ok)
 * before it uses it, so a CPU or compiler that rounds one half differently falls back to
 * AVX2 instead of changing the output. Compiled per function with target attributes so
 * the library still loads on CPUs without AVX-512; called only after a CPUID check. */
#include "backend/cpu/cpu_exact.h"
#include "backend/cpu/cpu_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TGT512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define INLINE512 static inline __attribute__((always_inline)) TGT512

/* [a[0:8] | b[0:8]] */
INLINE512 __m512 pair8(const float *a, const float *b)
{
    __m512d lo = _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(a)));
    return _mm512_castpd_ps(_mm512_insertf64x4(lo, _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
}

/* [a[0:8] | a[0:8]]: one load, no shuffle */
INLINE512 __m512 twice8(const float *a)
{
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(a))));
}

/* rows A and B (q: cols floats each, d: a scale per block) x T tokens over blocks [b0, b1);
 * acc_a / acc_b: each row's T x 8 accumulators, carried between column slices as kern_pre's */
INLINE512 void kern_pre2(int T, const float *qa, const float *qb, const float *da, const float *db, const float *x,
                         int64_t ldx, int64_t b0, int64_t b1, float *acc_a, float *acc_b)
{
    __m512 acc[SRT_EXACT_PRE_T];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        acc[t] = b0 == 0 ? _mm512_setzero_ps() : pair8(acc_a + 8 * t, acc_b + 8 * t);
    for (int64_t b = b0; b < b1; b++) {
        const int64_t o = b * QK;
        __m512 qv[4] = { pair8(qa + o, qb + o), pair8(qa + o + 8, qb + o + 8), pair8(qa + o + 16, qb + o + 16),
                         pair8(qa + o + 24, qb + o + 24) };
        __m512d dlo = _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_broadcast_ss(da + b)));
        __m512 dv = _mm512_castpd_ps(_mm512_insertf64x4(dlo, _mm256_castps_pd(_mm256_broadcast_ss(db + b)), 1));
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const float *xt = x + t * ldx + o;
            __m512 s = _mm512_mul_ps(qv[0], twice8(xt));
            s = _mm512_fmadd_ps(qv[1], twice8(xt + 8), s);
            s = _mm512_fmadd_ps(qv[2], twice8(xt + 16), s);
            s = _mm512_fmadd_ps(qv[3], twice8(xt + 24), s);
            acc[t] = _mm512_fmadd_ps(s, dv, acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        _mm256_storeu_ps(acc_a + 8 * t, _mm512_castps512_ps256(acc[t]));
        _mm256_storeu_ps(acc_b + 8 * t, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[t]), 1)));
    }
}

#define PRE2_CASE(T) \
    case T: kern_pre2(T, qa, qb, da, db, x, ldx, b0, b1, acc_a, acc_b); return;

TGT512 void srt_cpu_exact_pre2_avx512(int T, const float *qa, const float *qb, const float *da, const float *db,
                                      const float *x, int64_t ldx, int64_t b0, int64_t b1, float *acc_a,
                                      float *acc_b)
{
    switch (T) {
    PRE2_CASE(8) PRE2_CASE(7) PRE2_CASE(6) PRE2_CASE(5) PRE2_CASE(4) PRE2_CASE(3) PRE2_CASE(2) default: PRE2_CASE(1)
    }
}

#else

void srt_cpu_exact_pre2_avx512(int T, const float *qa, const float *qb, const float *da, const float *db,
                               const float *x, int64_t ldx, int64_t b0, int64_t b1, float *acc_a, float *acc_b)
{
}

#endif
