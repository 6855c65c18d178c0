/* Scalar decoders of every weight format: f16/bf16 conversion and dequantizing a row.
 * These define what each format means; the SIMD kernels are tested against them. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_exact.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_kernels.h"

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float srt_f16_to_f32(uint16_t h)
{
    /* Shift exponent+mantissa into f32 position, then rescale by 2^112 (bias 127-15):
     * the multiply also normalises f16 subnormals. Inf/NaN keep an all-ones exponent. */
    uint32_t o = (uint32_t)(h & 0x7fff) << 13;
    uint32_t bits;
    if ((o & 0x0f800000u) == 0x0f800000u)
        bits = o | 0x7f800000u;
    else
        bits = f2u(u2f(o) * u2f(0x77800000u));
    return u2f(bits | ((uint32_t)(h & 0x8000) << 16));
}

uint16_t srt_f32_to_f16(float f)
{
    uint32_t bits = f2u(f);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000);
    bits &= 0x7fffffffu;
    if (bits >= 0x7f800000u)                       /* inf or NaN (NaN stays quiet) */
        return sign | (bits > 0x7f800000u ? 0x7e00 : 0x7c00);
    if (bits >= 0x477ff000u)                       /* rounds past 65504 */
        return sign | 0x7c00;
    if (bits < 0x38800000u) {                      /* f16 subnormal or zero */
        /* Adding 0.5 puts the f16 subnormal unit (2^-24) in the last mantissa bit, so the
         * FPU's round-to-nearest-even does the rounding. */
        uint32_t r = f2u(u2f(bits) + 0.5f) - 0x3f000000u;
        return sign | (uint16_t)r;
    }
    uint32_t odd = (bits >> 13) & 1;
    bits += 0xc8000fffu + odd;                     /* rebias exponent, round to nearest even */
    return sign | (uint16_t)(bits >> 13);
}

float srt_bf16_to_f32(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}

uint16_t srt_f32_to_bf16(float f)
{
    uint32_t bits = f2u(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u)        /* NaN: truncate, force quiet */
        return (uint16_t)((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1);
    return (uint16_t)(bits >> 16);
}

static void dequant_q8_0(const blk_q8_0 *b, int64_t nb, float *out)
{
    for (int64_t i = 0; i < nb; i++, out += QK) {
        float d = srt_f16_to_f32(b[i].d);
        for (int j = 0; j < QK; j++)
            out[j] = d * b[i].qs[j];
    }
}

static void dequant_q4_0(const blk_q4_0 *b, int64_t nb, float *out)
{
    for (int64_t i = 0; i < nb; i++, out += QK) {
        float d = srt_f16_to_f32(b[i].d);
        for (int j = 0; j < QK / 2; j++) {
            out[j]          = d * ((b[i].qs[j] & 0x0F) - 8);
            out[j + QK / 2] = d * ((b[i].qs[j] >> 4) - 8);
        }
    }
}

static void dequant_q4_1(const blk_q4_1 *b, int64_t nb, float *out)
{
    for (int64_t i = 0; i < nb; i++, out += QK) {
        float d = srt_f16_to_f32(b[i].d), m = srt_f16_to_f32(b[i].m);
        for (int j = 0; j < QK / 2; j++) {
            out[j]          = d * (b[i].qs[j] & 0x0F) + m;
            out[j + QK / 2] = d * (b[i].qs[j] >> 4) + m;
        }
    }
}

/* as GGUF's readers: the 5-bit value q, then d*(q - 16) or d*q + m */
static void dequant_q5_0(const blk_q5_0 *b, int64_t nb, float *out)
{
    for (int64_t i = 0; i < nb; i++, out += QK) {
        float d = srt_f16_to_f32(b[i].d);
        for (int j = 0; j < QK; j++)
            out[j] = d * (q5_value(b[i].qs, b[i].qh, j) - 16);
    }
}

static void dequant_q5_1(const blk_q5_1 *b, int64_t nb, float *out)
{
    for (int64_t i = 0; i < nb; i++, out += QK) {
        float d = srt_f16_to_f32(b[i].d), m = srt_f16_to_f32(b[i].m);
        for (int j = 0; j < QK; j++)
            out[j] = d * q5_value(b[i].qs, b[i].qh, j) + m;
    }
}

static void dequant_q4_k(const blk_q4_k *b, int64_t nb, float *out)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = srt_f16_to_f32(b[i].d), dmin = srt_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {     /* 64 elements: two sub-blocks */
            int sc0, m0, sc1, m1;
            q4k_scale_min(b[i].scales, 2 * c, &sc0, &m0);
            q4k_scale_min(b[i].scales, 2 * c + 1, &sc1, &m1);
            for (int l = 0; l < 32; l++) {
                *out++ = d * sc0 * (q[l] & 0x0F) - dmin * m0;
            }
            for (int l = 0; l < 32; l++) {
                *out++ = d * sc1 * (q[l] >> 4) - dmin * m1;
            }
        }
    }
}

/* Q5_K: Q4_K's with bit j of qh[l] as the fifth bit (16) of element 32j + l */
static void dequant_q5_k(const blk_q5_k *b, int64_t nb, float *out)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = srt_f16_to_f32(b[i].d), dmin = srt_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            q4k_scale_min(b[i].scales, j, &sc, &m);
            for (int l = 0; l < 32; l++) {
                int v = (q[32 * (j / 2) + l] >> 4 * (j % 2) & 0x0F) | (b[i].qh[l] >> j & 1) << 4;
                *out++ = d * sc * v - dmin * m;
            }
        }
    }
}

static void dequant_q6_k(const blk_q6_k *b, int64_t nb, float *out)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = srt_f16_to_f32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int h = 0; h < 2; h++, out += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                out[l]      = d * sc[is] * q1;
                out[l + 32] = d * sc[is + 2] * q2;
                out[l + 64] = d * sc[is + 4] * q3;
                out[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

/* Q2_K and Q3_K as GGML's and gguf-py's dequantizers: the per-16 scale (and min) formed in
 * f32 first, exactly (11 bits of d times 4 or 6), then one product and, for Q2_K, one
 * subtraction, so each value is the same float theirs is */
static void dequant_q2_k(const blk_q2_k *b, int64_t nb, float *out)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = srt_f16_to_f32(b[i].d), dmin = srt_f16_to_f32(b[i].dmin);
        for (int e = 0; e < QK_K; e++) {
            int sc = b[i].scales[e / 16], q = q2k_q(b[i].qs, e);
            float dl = d * (float)(sc & 0x0F), ml = dmin * (float)(sc >> 4);
            *out++ = dl * (float)q - ml;
        }
    }
}

static void dequant_q3_k(const blk_q3_k *b, int64_t nb, float *out)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = srt_f16_to_f32(b[i].d);
        for (int e = 0; e < QK_K; e++) {
            int q = q3k_q(&b[i], e);
            float dl = d * (float)(q3k_scale(b[i].scales, e / 16) - 32);
            *out++ = dl * (float)(q - 4);
        }
    }
}

static void dequant_iq4_nl(const blk_iq4_nl *b, int64_t nb, float *out)
{
    for (int64_t i = 0; i < nb; i++, out += QK) {
        float d = srt_f16_to_f32(b[i].d);
        for (int j = 0; j < QK / 2; j++) {
            out[j] = d * (float)IQ4_VALUES[b[i].qs[j] & 0x0F];
            out[j + QK / 2] = d * (float)IQ4_VALUES[b[i].qs[j] >> 4];
        }
    }
}

/* d * (sc - 32) in f32 (exact), then its product with the level, rounded once as GGML's */
static void dequant_iq4_xs(const blk_iq4_xs *b, int64_t nb, float *out)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = srt_f16_to_f32(b[i].d);
        for (int j = 0; j < QK_K / QK; j++, out += QK) {
            float dl = d * (float)(iq4xs_scale(&b[i], j) - 32);
            const uint8_t *qs = b[i].qs + 16 * j;
            for (int l = 0; l < QK / 2; l++) {
                out[l] = dl * (float)IQ4_VALUES[qs[l] & 0x0F];
                out[l + QK / 2] = dl * (float)IQ4_VALUES[qs[l] >> 4];
            }
        }
    }
}

/* Decodes n elements (a whole number of blocks) starting at src. */
void srt_cpu_dequant(srt_dtype t, const void *src, int64_t n, float *out)
{
    int be = srt_dtype_block_elems(t);
    if (be <= 0 || n % be != 0) {
        memset(out, 0, (size_t)(n > 0 ? n : 0) * sizeof(float));
        return;
    }
    int64_t nb = n / be;
    switch (t) {
    case SRT_F32:
        memcpy(out, src, (size_t)n * sizeof(float));
        break;
    case SRT_F16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++)
            out[i] = srt_f16_to_f32(h[i]);
        break;
    }
    case SRT_BF16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++)
            out[i] = srt_bf16_to_f32(h[i]);
        break;
    }
    case SRT_Q8_0: dequant_q8_0(src, nb, out); break;
    case SRT_Q4_0: dequant_q4_0(src, nb, out); break;
    case SRT_Q4_1: dequant_q4_1(src, nb, out); break;
    case SRT_Q5_0: dequant_q5_0(src, nb, out); break;
    case SRT_Q5_1: dequant_q5_1(src, nb, out); break;
    case SRT_Q4_K: dequant_q4_k(src, nb, out); break;
    case SRT_Q5_K: dequant_q5_k(src, nb, out); break;
    case SRT_Q6_K: dequant_q6_k(src, nb, out); break;
    case SRT_Q2_K: dequant_q2_k(src, nb, out); break;
    case SRT_Q3_K: dequant_q3_k(src, nb, out); break;
    case SRT_IQ4_NL: dequant_iq4_nl(src, nb, out); break;
    case SRT_IQ4_XS: dequant_iq4_xs(src, nb, out); break;
    case SRT_I32: {
        const int32_t *v = src;
        for (int64_t i = 0; i < n; i++)
            out[i] = (float)v[i];
        break;
    }
    default:
        memset(out, 0, (size_t)n * sizeof(float));
    }
}

void srt_cpu_dequant_row(const srt_weight *w, int64_t row, float *out)
{
    if (row < 0 || row >= w->rows) {       /* out of range: zeros rather than a wild read */
        memset(out, 0, (size_t)(w->cols > 0 ? w->cols : 0) * sizeof(float));
        return;
    }
    if (w->dtype == SRT_Q4_1_X16 || w->dtype == SRT_Q4_0_X16 || w->dtype == SRT_Q8_0_X16 ||
        w->dtype == SRT_Q5_0_X16 || w->dtype == SRT_Q4_K_X16 || w->dtype == SRT_Q6_K_X16 || w->dtype == SRT_Q5_K_X16 ||
        w->dtype == SRT_Q5_1_X16 || w->dtype == SRT_IQ4_NL_X16 || w->dtype == SRT_IQ4_XS_X16 ||
        w->dtype == SRT_Q3_K_X16 || w->dtype == SRT_Q2_K_X16 ||
        w->dtype == SRT_Q8_0_X8) {   /* packed (tied) */
        uint8_t *gguf = malloc(srt_dtype_row_bytes(w->dtype, w->cols));
        if (!gguf) {
            memset(out, 0, (size_t)w->cols * sizeof(float));
            return;
        }
        srt_cpu_dequant(srt_cpu_exact_unpack_row(w, row, gguf), gguf, w->cols, out);
        free(gguf);
        return;
    }
    srt_cpu_dequant(w->dtype, (const uint8_t *)w->data + (size_t)row * w->row_stride, w->cols, out);
}
