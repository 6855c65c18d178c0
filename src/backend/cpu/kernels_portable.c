/* Portable kernels: plain C integer dot products of quantized weights with Q8 activations
 * and float dot products for f32/f16/bf16 weights. Any CPU runs these; the SIMD kernels
 * must agree with them. */
#include <math.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_kernels.h"

void srt_cpu_quantize_q8_portable(const float *x, int64_t n, int8_t *q, q8_scale *ds)
{
    for (int64_t b = 0; b < n / QK; b++, x += QK, q += QK) {
        float amax = 0.0f;
        for (int i = 0; i < QK; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int i = 0; i < QK; i++) {
            int v = (int)nearbyintf(x[i] * id);
            v = v > 127 ? 127 : v < -127 ? -127 : v;
            q[i] = (int8_t)v;
            sum += v;
        }
        ds[b].d = d;
        ds[b].s = d * (float)sum;
    }
}

void srt_cpu_silu_mul_portable(const float *gate, const float *up, int64_t n, float *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

static float dot_q8_0(const uint8_t *row, const int8_t *aq, const q8_scale *ads, int64_t nb)
{
    const blk_q8_0 *w = (const blk_q8_0 *)row;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, aq += QK) {
        int isum = 0;
        for (int i = 0; i < QK; i++)
            isum += w[b].qs[i] * aq[i];
        acc += srt_f16_to_f32(w[b].d) * ads[b].d * (float)isum;
    }
    return acc;
}

/* sum(q * a) over a 32-block of nibbles in the low/high order of Q4_0 and Q4_1 */
static inline int nibble_dot(const uint8_t *qs, const int8_t *a)
{
    int isum = 0;
    for (int i = 0; i < QK / 2; i++)
        isum += (qs[i] & 0x0F) * a[i] + (qs[i] >> 4) * a[i + QK / 2];
    return isum;
}

static float dot_q4_0(const uint8_t *row, const int8_t *aq, const q8_scale *ads, int64_t nb)
{
    const blk_q4_0 *w = (const blk_q4_0 *)row;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, aq += QK) {
        float d = srt_f16_to_f32(w[b].d);
        /* sum((q-8)*a) * d*da = d*da*sum(q*a) - 8*d*(da*sum(a)) */
        acc += d * (ads[b].d * (float)nibble_dot(w[b].qs, aq) - 8.0f * ads[b].s);
    }
    return acc;
}

static float dot_q4_1(const uint8_t *row, const int8_t *aq, const q8_scale *ads, int64_t nb)
{
    const blk_q4_1 *w = (const blk_q4_1 *)row;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, aq += QK) {
        acc += srt_f16_to_f32(w[b].d) * ads[b].d * (float)nibble_dot(w[b].qs, aq) +
               srt_f16_to_f32(w[b].m) * ads[b].s;
    }
    return acc;
}

/* sum(q * a) over a 32-block of 5-bit values */
static inline int q5_dot(const uint8_t *qs, const uint8_t *qh, const int8_t *a)
{
    int isum = 0;
    for (int i = 0; i < QK; i++)
        isum += q5_value(qs, qh, i) * a[i];
    return isum;
}

static float dot_q5_0(const uint8_t *row, const int8_t *aq, const q8_scale *ads, int64_t nb)
{
    const blk_q5_0 *w = (const blk_q5_0 *)row;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, aq += QK) {
        float d = srt_f16_to_f32(w[b].d);
        acc += d * (ads[b].d * (float)q5_dot(w[b].qs, w[b].qh, aq) - 16.0f * ads[b].s);
    }
    return acc;
}

static float dot_q5_1(const uint8_t *row, const int8_t *aq, const q8_scale *ads, int64_t nb)
{
    const blk_q5_1 *w = (const blk_q5_1 *)row;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, aq += QK)
        acc += srt_f16_to_f32(w[b].d) * ads[b].d * (float)q5_dot(w[b].qs, w[b].qh, aq) +
               srt_f16_to_f32(w[b].m) * ads[b].s;
    return acc;
}

/* Q4_K, and Q5_K (five: qh[32] before qs, bit j of qh[l] adding 16 to element 32j + l) */
static float dot_k4(int five, const uint8_t *row, const int8_t *aq, const q8_scale *ads, int64_t nb)
{
    float acc = 0.0f;
    size_t sbytes = five ? sizeof(blk_q5_k) : sizeof(blk_q4_k);
    for (int64_t sb = 0; sb < nb / 8; sb++, row += sbytes) {
        const blk_q4_k *w = (const blk_q4_k *)row;   /* d, dmin and scales: the same places */
        const uint8_t *qh = five ? ((const blk_q5_k *)row)->qh : NULL;
        float d = srt_f16_to_f32(w->d), dmin = srt_f16_to_f32(w->dmin);
        const uint8_t *q = five ? ((const blk_q5_k *)row)->qs : w->qs;
        float sacc = 0.0f, macc = 0.0f;
        for (int c = 0; c < 4; c++, q += 32) {
            for (int half = 0; half < 2; half++, aq += QK, ads++) {
                int sc, mn, isum = 0, j = 2 * c + half;
                q4k_scale_min(w->scales, j, &sc, &mn);
                for (int l = 0; l < 32; l++)
                    isum += ((half ? q[l] >> 4 : q[l] & 0x0F) | (qh ? (qh[l] >> j & 1) << 4 : 0)) * aq[l];
                sacc += (float)(sc * isum) * ads->d;
                macc += (float)mn * ads->s;
            }
        }
        acc += d * sacc - dmin * macc;
    }
    return acc;
}

static float dot_q4_k(const uint8_t *row, const int8_t *aq, const q8_scale *ads, int64_t nb)
{
    return dot_k4(0, row, aq, ads, nb);
}

static float dot_q5_k(const uint8_t *row, const int8_t *aq, const q8_scale *ads, int64_t nb)
{
    return dot_k4(1, row, aq, ads, nb);
}

static float dot_q6_k(const uint8_t *row, const int8_t *aq, const q8_scale *ads, int64_t nb)
{
    const blk_q6_k *w = (const blk_q6_k *)row;
    float acc = 0.0f;
    for (int64_t sb = 0; sb < nb / 8; sb++, w++) {
        float sacc = 0.0f;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w->ql + 64 * h, *qh = w->qh + 32 * h;
            const int8_t *sc = w->scales + 8 * h;
            for (int g = 0; g < 4; g++, aq += QK, ads++) {
                int lo_shift = (g & 2) ? 4 : 0, ql_off = (g & 1) ? 32 : 0, qh_shift = 2 * g;
                int isum0 = 0, isum1 = 0;
                for (int l = 0; l < 32; l++) {
                    int q = (((ql[l + ql_off] >> lo_shift) & 0x0F) | (((qh[l] >> qh_shift) & 3) << 4)) - 32;
                    if (l < 16)
                        isum0 += q * aq[l];
                    else
                        isum1 += q * aq[l];
                }
                sacc += (float)(sc[2 * g] * isum0 + sc[2 * g + 1] * isum1) * ads->d;
            }
        }
        acc += srt_f16_to_f32(w->d) * sacc;
    }
    return acc;
}

/* Q2_K and Q3_K: a super-block's q and per-16 scales unpacked first (GGUF's element order,
 * blk_q2_k), then each 32 of x as two halves with their own scales */
static float dot_q2_k(const uint8_t *row, const int8_t *aq, const q8_scale *ads, int64_t nb)
{
    const blk_q2_k *w = (const blk_q2_k *)row;
    float acc = 0.0f;
    for (int64_t sb = 0; sb < nb / 8; sb++, w++) {
        float sacc = 0.0f, macc = 0.0f;
        for (int b = 0; b < 8; b++, aq += QK, ads++) {
            int sum = 0, mins = 0;
            for (int h = 0; h < 2; h++) {
                int sc = w->scales[2 * b + h], isum = 0, asum = 0;
                for (int l = 16 * h; l < 16 * h + 16; l++) {
                    isum += q2k_q(w->qs, 32 * b + l) * aq[l];
                    asum += aq[l];
                }
                sum += (sc & 0x0F) * isum;
                mins += (sc >> 4) * asum;
            }
            sacc += (float)sum * ads->d;
            macc += (float)mins * ads->d;
        }
        acc += srt_f16_to_f32(w->d) * sacc - srt_f16_to_f32(w->dmin) * macc;
    }
    return acc;
}

static float dot_q3_k(const uint8_t *row, const int8_t *aq, const q8_scale *ads, int64_t nb)
{
    const blk_q3_k *w = (const blk_q3_k *)row;
    float acc = 0.0f;
    for (int64_t sb = 0; sb < nb / 8; sb++, w++) {
        float sacc = 0.0f;
        for (int b = 0; b < 8; b++, aq += QK, ads++) {
            int sum = 0;
            for (int h = 0; h < 2; h++) {
                int isum = 0;
                for (int l = 16 * h; l < 16 * h + 16; l++)
                    isum += (q3k_q(w, 32 * b + l) - 4) * aq[l];
                sum += (q3k_scale(w->scales, 2 * b + h) - 32) * isum;
            }
            sacc += (float)sum * ads->d;
        }
        acc += srt_f16_to_f32(w->d) * sacc;
    }
    return acc;
}

/* IQ4_NL and IQ4_XS: the levels are signed bytes, so a block is Q8_0's integer dot */
static inline int iq4_dot(const uint8_t *qs, const int8_t *a)
{
    int isum = 0;
    for (int j = 0; j < QK / 2; j++)
        isum += IQ4_VALUES[qs[j] & 0x0F] * a[j] + IQ4_VALUES[qs[j] >> 4] * a[j + QK / 2];
    return isum;
}

static float dot_iq4_nl(const uint8_t *row, const int8_t *aq, const q8_scale *ads, int64_t nb)
{
    const blk_iq4_nl *w = (const blk_iq4_nl *)row;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, aq += QK)
        acc += srt_f16_to_f32(w[b].d) * ads[b].d * (float)iq4_dot(w[b].qs, aq);
    return acc;
}

static float dot_iq4_xs(const uint8_t *row, const int8_t *aq, const q8_scale *ads, int64_t nb)
{
    const blk_iq4_xs *w = (const blk_iq4_xs *)row;
    float acc = 0.0f;
    for (int64_t sb = 0; sb < nb / 8; sb++, w++) {
        float sacc = 0.0f;
        for (int b = 0; b < 8; b++, aq += QK, ads++)
            sacc += (float)((iq4xs_scale(w, b) - 32) * iq4_dot(w->qs + 16 * b, aq)) * ads->d;
        acc += srt_f16_to_f32(w->d) * sacc;
    }
    return acc;
}

#define TILE_Q8(name, dotfn)                                                                  \
    static void name(const uint8_t *w, size_t row_stride, int nr, const int8_t *aq,           \
                     const q8_scale *ads, int64_t qstride, int64_t nb, int nt, float *y,      \
                     int64_t ldy)                                                             \
    {                                                                                         \
        for (int t = 0; t < nt; t++)                                                          \
            for (int r = 0; r < nr; r++)                                                      \
                y[t * ldy + r] = dotfn(w + (size_t)r * row_stride, aq + t * qstride,          \
                                       ads + t * nb, nb);                                     \
    }

TILE_Q8(tile_q8_0, dot_q8_0)
TILE_Q8(tile_q4_0, dot_q4_0)
TILE_Q8(tile_q4_1, dot_q4_1)
TILE_Q8(tile_q5_0, dot_q5_0)
TILE_Q8(tile_q5_1, dot_q5_1)
TILE_Q8(tile_q4_k, dot_q4_k)
TILE_Q8(tile_q5_k, dot_q5_k)
TILE_Q8(tile_q6_k, dot_q6_k)
TILE_Q8(tile_q2_k, dot_q2_k)
TILE_Q8(tile_q3_k, dot_q3_k)
TILE_Q8(tile_iq4_nl, dot_iq4_nl)
TILE_Q8(tile_iq4_xs, dot_iq4_xs)

static float dot_f32(const float *w, const float *x, int64_t n)
{
    float s[8] = { 0 };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += w[i + k] * x[i + k];
    for (; i < n; i++)
        s[0] += w[i] * x[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static float dot_f16(const uint16_t *w, const float *x, int64_t n)
{
    float s[8] = { 0 };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += srt_f16_to_f32(w[i + k]) * x[i + k];
    for (; i < n; i++)
        s[0] += srt_f16_to_f32(w[i]) * x[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static float dot_bf16(const uint16_t *w, const float *x, int64_t n)
{
    float s[8] = { 0 };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += srt_bf16_to_f32(w[i + k]) * x[i + k];
    for (; i < n; i++)
        s[0] += srt_bf16_to_f32(w[i]) * x[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

#define TILE_F(name, dotfn, wtype)                                                            \
    static void name(const uint8_t *w, size_t row_stride, int nr, const float *x,             \
                     int64_t ldx, int64_t cols, int nt, float *y, int64_t ldy)                \
    {                                                                                         \
        for (int t = 0; t < nt; t++)                                                          \
            for (int r = 0; r < nr; r++)                                                      \
                y[t * ldy + r] = dotfn((const wtype *)(w + (size_t)r * row_stride),           \
                                       x + t * ldx, cols);                                    \
    }

TILE_F(tile_f32, dot_f32, float)
TILE_F(tile_f16, dot_f16, uint16_t)
TILE_F(tile_bf16, dot_bf16, uint16_t)

const cpu_simd_ops srt_cpu_ops_portable = {
    .name = "portable",
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
    .quantize_q8 = srt_cpu_quantize_q8_portable,
    .silu_mul = srt_cpu_silu_mul_portable,
};
