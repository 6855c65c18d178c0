/* The f16 block scales of the 32-wide formats, for the AVX2 kernels (exact.c, kernels_avx2.c).
 * x86-64 only; callers check the CPU before running them. */
#ifndef SRT_CPU_BLOCK_SCALES_H
#define SRT_CPU_BLOCK_SCALES_H
#if defined(__x86_64__)

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define SRT_SCALES_TGT static inline __attribute__((always_inline, target("avx2,fma,f16c")))

SRT_SCALES_TGT float srt_half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* a block's f16 words: d and m (has_m), else d twice */
SRT_SCALES_TGT uint32_t srt_scale_word(const uint8_t *blk, int has_m)
{
    uint32_t w;
    uint16_t d;
    if (has_m) {
        memcpy(&w, blk, 4);
        return w;
    }
    memcpy(&d, blk, 2);
    return d * 0x10001u;
}

/* Four rows' blocks b0..b3 (each starting with its f16 d, then Q4_1's f16 m) as one convert:
 * [d0 m0 d1 m1 d2 m2 d3 m3] with m, else [d0 d0 d1 d1 d2 d2 d3 d3]. One vcvtph2ps instead
 * of eight scalar ones: a third of a decode block's vector ops. */
SRT_SCALES_TGT __m256 srt_scales4_f16(const uint8_t *b0, const uint8_t *b1, const uint8_t *b2, const uint8_t *b3,
                                      int has_m)
{
    return _mm256_cvtph_ps(_mm_setr_epi32((int)srt_scale_word(b0, has_m), (int)srt_scale_word(b1, has_m),
                                          (int)srt_scale_word(b2, has_m), (int)srt_scale_word(b3, has_m)));
}

#endif
#endif
