/* Fused dequantize-and-dot of one quantized weight row with f32 activations, for the
 * precise matmul at decode sizes (a few tokens), where dequantizing a row to memory first
 * would cost more than the dot itself. Same math as dequantize-then-dot:
 *   Q8_0: d*q   Q4_0: d*(q-8)   Q4_1: d*q + m  (the m term as m * sum(x) of the block). */
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_precise.h"

static float dot_q8_0_portable(const void *row, const float *x, const float *xsum, int64_t nb)
{
    const blk_q8_0 *b = row;
    float s = 0;
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float d = srt_f16_to_f32(b[i].d), t = 0;
        for (int j = 0; j < QK; j++)
            t += (float)b[i].qs[j] * x[j];
        s += d * t;
    }
    return s;
}

static float dot_q4_0_portable(const void *row, const float *x, const float *xsum, int64_t nb)
{
    const blk_q4_0 *b = row;
    float s = 0;
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float d = srt_f16_to_f32(b[i].d), t = 0;
        for (int j = 0; j < QK / 2; j++)
            t += (float)((b[i].qs[j] & 0x0F) - 8) * x[j] + (float)((b[i].qs[j] >> 4) - 8) * x[j + QK / 2];
        s += d * t;
    }
    return s;
}

static float dot_q4_1_portable(const void *row, const float *x, const float *xsum, int64_t nb)
{
    const blk_q4_1 *b = row;
    float s = 0;
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float d = srt_f16_to_f32(b[i].d), m = srt_f16_to_f32(b[i].m), t = 0;
        for (int j = 0; j < QK / 2; j++)
            t += (float)(b[i].qs[j] & 0x0F) * x[j] + (float)(b[i].qs[j] >> 4) * x[j + QK / 2];
        s += d * t + m * xsum[i];
    }
    return s;
}

#if defined(__x86_64__)
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))
#define T256 __attribute__((target("avx2,f16c,fma")))

T512 static float dot_q8_0_avx512(const void *row, const float *x, const float *xsum, int64_t nb)
{
    const blk_q8_0 *b = row;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++, x += QK) {
        __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d));
        __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b[i].qs)));
        __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b[i].qs + 16))));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(q0, d), _mm512_loadu_ps(x), acc);
        acc = _mm512_fmadd_ps(_mm512_mul_ps(q1, d), _mm512_loadu_ps(x + 16), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

T512 static inline void nibbles512(const uint8_t *qs, __m512 *lo, __m512 *hi)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs), mask = _mm_set1_epi8(0x0F);
    *lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(q, mask)));
    *hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), mask)));
}

T512 static float dot_q4_0_avx512(const void *row, const float *x, const float *xsum, int64_t nb)
{
    const blk_q4_0 *b = row;
    __m512 acc = _mm512_setzero_ps(), eight = _mm512_set1_ps(8.0f);
    for (int64_t i = 0; i < nb; i++, x += QK) {
        __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d)), lo, hi;
        nibbles512(b[i].qs, &lo, &hi);
        acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_sub_ps(lo, eight), d), _mm512_loadu_ps(x), acc);
        acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_sub_ps(hi, eight), d), _mm512_loadu_ps(x + 16), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

T512 static float dot_q4_1_avx512(const void *row, const float *x, const float *xsum, int64_t nb)
{
    const blk_q4_1 *b = row;
    __m512 acc = _mm512_setzero_ps();
    float ms = 0;
    for (int64_t i = 0; i < nb; i++, x += QK) {
        __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d)), lo, hi;
        nibbles512(b[i].qs, &lo, &hi);
        acc = _mm512_fmadd_ps(_mm512_mul_ps(lo, d), _mm512_loadu_ps(x), acc);
        acc = _mm512_fmadd_ps(_mm512_mul_ps(hi, d), _mm512_loadu_ps(x + 16), acc);
        ms += _cvtsh_ss(b[i].m) * xsum[i];
    }
    return _mm512_reduce_add_ps(acc) + ms;
}

T256 static inline float hsum256(__m256 v)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* 16 bytes of 8-bit values to two 8-float halves */
T256 static inline void u8x16_256(__m128i q, __m256 *a, __m256 *b)
{
    *a = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q));
    *b = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q, 8)));
}

T256 static float dot_q8_0_avx2(const void *row, const float *x, const float *xsum, int64_t nb)
{
    const blk_q8_0 *b = row;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++, x += QK) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));
        for (int k = 0; k < 4; k++) {
            __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b[i].qs + 8 * k))));
            acc = _mm256_fmadd_ps(_mm256_mul_ps(q, d), _mm256_loadu_ps(x + 8 * k), acc);
        }
    }
    return hsum256(acc);
}

T256 static float dot_q4_0_avx2(const void *row, const float *x, const float *xsum, int64_t nb)
{
    const blk_q4_0 *b = row;
    __m256 acc = _mm256_setzero_ps(), eight = _mm256_set1_ps(8.0f);
    __m128i mask = _mm_set1_epi8(0x0F);
    for (int64_t i = 0; i < nb; i++, x += QK) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d)), v[4];
        __m128i q = _mm_loadu_si128((const __m128i *)b[i].qs);
        u8x16_256(_mm_and_si128(q, mask), &v[0], &v[1]);
        u8x16_256(_mm_and_si128(_mm_srli_epi16(q, 4), mask), &v[2], &v[3]);
        for (int k = 0; k < 4; k++)
            acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_sub_ps(v[k], eight), d), _mm256_loadu_ps(x + 8 * k), acc);
    }
    return hsum256(acc);
}

T256 static float dot_q4_1_avx2(const void *row, const float *x, const float *xsum, int64_t nb)
{
    const blk_q4_1 *b = row;
    __m256 acc = _mm256_setzero_ps();
    __m128i mask = _mm_set1_epi8(0x0F);
    float ms = 0;
    for (int64_t i = 0; i < nb; i++, x += QK) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d)), v[4];
        __m128i q = _mm_loadu_si128((const __m128i *)b[i].qs);
        u8x16_256(_mm_and_si128(q, mask), &v[0], &v[1]);
        u8x16_256(_mm_and_si128(_mm_srli_epi16(q, 4), mask), &v[2], &v[3]);
        for (int k = 0; k < 4; k++)
            acc = _mm256_fmadd_ps(_mm256_mul_ps(v[k], d), _mm256_loadu_ps(x + 8 * k), acc);
        ms += _cvtsh_ss(b[i].m) * xsum[i];
    }
    return hsum256(acc) + ms;
}
#endif

srt_precise_dot_fn srt_cpu_precise_dot(srt_dtype t)
{
    const char *simd = srt_cpu_simd_name();
    int level = strcmp(simd, "avx512") == 0 ? 2 : strcmp(simd, "avx2") == 0 ? 1 : 0;
    (void)level;
    switch (t) {
    case SRT_Q8_0:
#if defined(__x86_64__)
        if (level == 2) return dot_q8_0_avx512;
        if (level == 1) return dot_q8_0_avx2;
#endif
        return dot_q8_0_portable;
    case SRT_Q4_0:
#if defined(__x86_64__)
        if (level == 2) return dot_q4_0_avx512;
        if (level == 1) return dot_q4_0_avx2;
#endif
        return dot_q4_0_portable;
    case SRT_Q4_1:
#if defined(__x86_64__)
        if (level == 2) return dot_q4_1_avx512;
        if (level == 1) return dot_q4_1_avx2;
#endif
        return dot_q4_1_portable;
    default:
        return NULL;
    }
}
