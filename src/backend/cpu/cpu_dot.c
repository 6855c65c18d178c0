/* f32 dot and axpy for attention and the precise matmul, with AVX2/AVX-512 twins of the
 * portable loops. The choice follows SRT_CPU_SIMD like the matmul kernels. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_dot.h"
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

#if defined(__x86_64__)
#include <immintrin.h>

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

__attribute__((target("avx512f"))) static float dot_avx512(const float *a, const float *b, int64_t n)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    float r = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    for (; i < n; i++)
        r += a[i] * b[i];
    return r;
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
