/* The block fields of the 32-wide formats (f16 scales, 5-bit values), for the AVX2 kernels
 * (exact.c, kernels_avx2.c). x86-64 only; callers check the CPU before running them. */
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

/* A 5-bit block's 32 values 0..31 as bytes in element order, from its 32-bit qh (element i's
 * fifth bit is bit i) and the 16 bytes of nibbles right after it: the nibbles (low half:
 * elements 0-15, high: 16-31), each OR'd with 16 where qh's bit is set (qh's byte i/8 spread
 * to byte i, bit i%8 kept and compared). */
SRT_SCALES_TGT __m256i srt_q5_bytes(const uint8_t *qh)
{
    uint32_t h;
    memcpy(&h, qh, 4);
    __m128i a = _mm_loadu_si128((const __m128i *)(qh + 4));
    __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(a, 4), a), _mm256_set1_epi8(0x0F));
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i hb = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread), bit);
    return _mm256_or_si256(nib, _mm256_and_si256(_mm256_cmpeq_epi8(hb, bit), _mm256_set1_epi8(0x10)));
}

#endif
#endif
