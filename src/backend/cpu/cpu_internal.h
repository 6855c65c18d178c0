/* Private to src/backend/cpu: GGML-compatible block layouts, the quantized-activation
 * format and the table of per-ISA kernels that matmul.c dispatches through. */
#ifndef SRT_CPU_INTERNAL_H
#define SRT_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "srt/tensor.h"

/* Block layouts, byte for byte as GGUF stores them (f16 fields as raw bits). */
#define QK 32       /* elements per block of the 32-wide formats */
#define QK_K 256    /* elements per K-quant super-block */

typedef struct { uint16_t d; int8_t qs[QK]; } blk_q8_0;                  /* x = d*q */
typedef struct { uint16_t d; uint8_t qs[QK / 2]; } blk_q4_0;             /* x = d*(q-8) */
typedef struct { uint16_t d, m; uint8_t qs[QK / 2]; } blk_q4_1;          /* x = d*q + m */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK / 2]; } blk_q5_0;     /* x = d*(q-16) */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK / 2]; } blk_q5_1;  /* x = d*q + m */
/* Nibble order of the 32-wide 4-bit formats: element i < 16 is the low nibble of qs[i],
 * element i + 16 its high nibble. The 5-bit formats add bit i of the little-endian 32-bit
 * qh as element i's fifth bit (value 16). */
typedef struct {
    uint16_t d, dmin;        /* super-block scales of the 6-bit sub-block scales / mins */
    uint8_t  scales[12];     /* 8 x (6-bit scale, 6-bit min), packed */
    uint8_t  qs[QK_K / 2];   /* per 64 elements: 32 bytes, low nibbles first 32, high next 32 */
} blk_q4_k;
typedef struct {
    uint16_t d, dmin;        /* as Q4_K's */
    uint8_t  scales[12];     /* as Q4_K's */
    uint8_t  qh[QK_K / 8];   /* fifth bits: element 32j + l's is bit j of qh[l] */
    uint8_t  qs[QK_K / 2];   /* as Q4_K's */
} blk_q5_k;
typedef struct {
    uint8_t  ql[QK_K / 2];   /* low 4 bits */
    uint8_t  qh[QK_K / 4];   /* high 2 bits */
    int8_t   scales[QK_K / 16];
    uint16_t d;
} blk_q6_k;

/* Q2_K and Q3_K: element e of a super-block has its two low bits in qs[32 * (e / 128) + e % 32]
 * at bit 2 * (e / 32 % 4), and its scale (Q2_K: and min) number e / 16 */
typedef struct {
    uint8_t  scales[QK_K / 16];   /* per 16: 4-bit scale (low nibble), 4-bit min (high) */
    uint8_t  qs[QK_K / 4];
    uint16_t d, dmin;
} blk_q2_k;                      /* x = d*sc*q - dmin*mn, q 0..3 */
typedef struct {
    uint8_t  hmask[QK_K / 8];     /* element e's third bit: bit e / 32 of hmask[e % 32] */
    uint8_t  qs[QK_K / 4];
    uint8_t  scales[12];          /* 16 x 6 bits, packed (q3k_scale) */
    uint16_t d;
} blk_q3_k;                      /* x = d*(sc - 32)*(q - 4), q 0..7 */
typedef struct { uint16_t d; uint8_t qs[QK / 2]; } blk_iq4_nl;   /* x = d*IQ4_VALUES[q], Q4_0's nibble order */
typedef struct {
    uint16_t d;
    uint16_t scales_h;            /* the two high bits of block j's 6-bit scale at bit 2j */
    uint8_t  scales_l[QK_K / 64]; /* the four low bits: block j's in nibble j % 2 of byte j / 2 */
    uint8_t  qs[QK_K / 2];        /* per 32: IQ4_NL's 16 bytes */
} blk_iq4_xs;                    /* x = d*(sc - 32)*IQ4_VALUES[q] */

/* IQ4_NL's and IQ4_XS's 16 levels (GGML's kvalues_iq4nl) */
static const int8_t IQ4_VALUES[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

_Static_assert(sizeof(blk_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(blk_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(blk_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(blk_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(blk_q5_1) == 24, "q5_1 layout");

/* Element i (0..31) of a 5-bit block: its nibble and fifth bit, 0..31. */
static inline int q5_value(const uint8_t *qs, const uint8_t *qh, int i)
{
    uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    int nib = i < 16 ? qs[i] & 0x0F : qs[i - 16] >> 4;
    return nib | (int)((h >> i) & 1) << 4;
}
_Static_assert(sizeof(blk_q4_k) == 144, "q4_k layout");
_Static_assert(sizeof(blk_q6_k) == 210, "q6_k layout");
_Static_assert(sizeof(blk_q5_k) == 176, "q5_k layout");
_Static_assert(sizeof(blk_q2_k) == 84, "q2_k layout");
_Static_assert(sizeof(blk_q3_k) == 110, "q3_k layout");
_Static_assert(sizeof(blk_iq4_nl) == 18, "iq4_nl layout");
_Static_assert(sizeof(blk_iq4_xs) == 136, "iq4_xs layout");

/* Q4_K sub-block j (0..7): 6-bit scale and min. */
static inline void q4k_scale_min(const uint8_t *s, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q3_K's scale j (0..15), 6 bits: the low four in nibble j / 8 of s[j % 8], the high two at
 * bit 2 * (j / 4) of s[8 + j % 4] */
static inline int q3k_scale(const uint8_t *s, int j)
{
    return (s[j % 8] >> 4 * (j / 8) & 0x0F) | (s[8 + j % 4] >> 2 * (j / 4) & 3) << 4;
}

/* Q2_K's q (0..3) and Q3_K's (0..7, the hmask bit as 4) of element e of a super-block */
static inline int q2k_q(const uint8_t *qs, int e) { return qs[32 * (e / 128) + e % 32] >> 2 * (e / 32 % 4) & 3; }
static inline int q3k_q(const blk_q3_k *k, int e) { return q2k_q(k->qs, e) | (k->hmask[e % 32] >> e / 32 & 1) << 2; }

/* IQ4_XS's scale of block j (0..7), 6 bits */
static inline int iq4xs_scale(const blk_iq4_xs *b, int j)
{
    return (b->scales_l[j / 2] >> 4 * (j % 2) & 0x0F) | (b->scales_h >> 2 * j & 3) << 4;
}

/* Activations quantized for integer dot products: per token, cols int8 values and, per
 * 32-block, the scale d and s = d * sum(q) (the sum lets offset formats such as Q4_1's m,
 * Q4_0's -8 and the K-quant mins be applied once per block). */
typedef struct { float d, s; } q8_scale;

typedef struct {
    const int8_t   *q;        /* token t at q + t * qstride */
    const q8_scale *ds;       /* token t at ds + t * nb */
    int64_t         qstride;
    int64_t         nb;       /* blocks per token = cols / 32 */
} act_q8;

/* y[t * ldy + r] = dot(W row r, activation t) for r < nr, t < nt.
 * w points at the first row; a/x are already offset to the first token. */
typedef void (*tile_q8_fn)(const uint8_t *w, size_t row_stride, int nr, const int8_t *aq,
                           const q8_scale *ads, int64_t qstride, int64_t nb, int nt,
                           float *y, int64_t ldy);
typedef void (*tile_f32_fn)(const uint8_t *w, size_t row_stride, int nr, const float *x,
                            int64_t ldx, int64_t cols, int nt, float *y, int64_t ldy);

typedef struct cpu_simd_ops {
    const char *name;
    tile_q8_fn  tile_q8[SRT_DTYPE_COUNT];   /* quantized weights x Q8 activations */
    tile_f32_fn tile_f32[SRT_DTYPE_COUNT];  /* float weights x f32 activations */
    void (*quantize_q8)(const float *x, int64_t n, int8_t *q, q8_scale *ds);
    void (*silu_mul)(const float *gate, const float *up, int64_t n, float *out);
} cpu_simd_ops;

extern const cpu_simd_ops srt_cpu_ops_portable;
extern const cpu_simd_ops srt_cpu_ops_avx2;
extern const cpu_simd_ops srt_cpu_ops_avx512;

int  srt_cpu_have_avx2(void);
int  srt_cpu_have_avx512(void);
const cpu_simd_ops *srt_cpu_ops(void);

/* Portable helpers the SIMD files fall back on for the formats they do not specialise. */
void srt_cpu_quantize_q8_portable(const float *x, int64_t n, int8_t *q, q8_scale *ds);
void srt_cpu_silu_mul_portable(const float *gate, const float *up, int64_t n, float *out);

#endif
