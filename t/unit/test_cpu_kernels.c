/* CPU kernels: format decoders against hand-built blocks, every matmul path against the
 * f64 reference, batch invariance (a token's row is the same bits in any batch), the thread
 * pool, and the elementwise ops. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_kernels.h"
#include "srt/common.h"
#include "tap.h"

#define rnd tap_rand
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() & 0xffffff) / 16777216.0f; }

static void put_f16(uint8_t *p, float v)
{
    uint16_t h = srt_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* ---------------------------------------------------------------- dtype table */
static void test_dtype_table(void)
{
    is_int(srt_dtype_block_elems(SRT_F32), 1, "f32 block elems");
    is_int(srt_dtype_block_bytes(SRT_F16), 2, "f16 block bytes");
    is_int(srt_dtype_block_bytes(SRT_BF16), 2, "bf16 block bytes");
    is_int(srt_dtype_block_elems(SRT_Q8_0), 32, "q8_0 block elems");
    is_int(srt_dtype_block_bytes(SRT_Q8_0), 34, "q8_0 block bytes");
    is_int(srt_dtype_block_bytes(SRT_Q4_0), 18, "q4_0 block bytes");
    is_int(srt_dtype_block_bytes(SRT_Q4_1), 20, "q4_1 block bytes");
    is_int(srt_dtype_block_elems(SRT_Q4_K), 256, "q4_k block elems");
    is_int(srt_dtype_block_bytes(SRT_Q4_K), 144, "q4_k block bytes");
    is_int(srt_dtype_block_bytes(SRT_Q6_K), 210, "q6_k block bytes");
    is_int(srt_dtype_block_bytes(SRT_Q5_K), 176, "q5_k block bytes");
    is_int(srt_dtype_block_bytes(SRT_Q2_K), 84, "q2_k block bytes");
    is_int(srt_dtype_block_bytes(SRT_Q3_K), 110, "q3_k block bytes");
    is_int(srt_dtype_block_elems(SRT_IQ4_NL), 32, "iq4_nl block elems");
    is_int(srt_dtype_block_bytes(SRT_IQ4_NL), 18, "iq4_nl block bytes");
    is_int(srt_dtype_block_bytes(SRT_IQ4_XS), 136, "iq4_xs block bytes");
    is_int(srt_dtype_block_bytes(SRT_I32), 4, "i32 block bytes");
    is_int(srt_dtype_row_bytes(SRT_Q4_1, 576), 18 * 20, "q4_1 row of 576");
    is_int(srt_dtype_row_bytes(SRT_Q6_K, 512), 2 * 210, "q6_k row of 512");
    is_int(srt_dtype_row_bytes(SRT_Q4_1, 33), 0, "partial block row is rejected");
    is_int(srt_dtype_row_bytes(SRT_F32, -1), 0, "negative row is rejected");
    is_int(srt_dtype_row_bytes((srt_dtype)99, 32), 0, "unknown dtype row bytes");
    ok(!strcmp(srt_dtype_name(SRT_Q4_K), "q4_k"), "name q4_k");
    ok(!strcmp(srt_dtype_name((srt_dtype)-3), "invalid"), "name of invalid dtype");
}

/* ---------------------------------------------------------------- f16 / bf16 */
static void test_half_conversions(void)
{
    is_int(srt_f32_to_f16(1.0f), 0x3c00, "f16(1)");
    is_int(srt_f32_to_f16(-2.0f), 0xc000, "f16(-2)");
    is_int(srt_f32_to_f16(65504.0f), 0x7bff, "f16 max");
    is_int(srt_f32_to_f16(65519.0f), 0x7bff, "f16 just below overflow rounds down");
    is_int(srt_f32_to_f16(65520.0f), 0x7c00, "f16 overflow to inf");
    is_int(srt_f32_to_f16(ldexpf(1.0f, -24)), 0x0001, "smallest f16 subnormal");
    is_int(srt_f32_to_f16(ldexpf(1.0f, -25)), 0x0000, "half of smallest subnormal ties to 0");
    is_int(srt_f32_to_f16(ldexpf(3.0f, -25)), 0x0002, "1.5 subnormal units tie to even (2)");
    is_int(srt_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00, "tie rounds to even (down)");
    is_int(srt_f32_to_f16(1.0f + ldexpf(3.0f, -11)), 0x3c02, "tie rounds to even (up)");
    is_int(srt_f32_to_f16(-INFINITY), 0xfc00, "f16(-inf)");
    ok((srt_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (srt_f32_to_f16(NAN) & 0x3ff), "f16(nan) is nan");
    ok(srt_f16_to_f32(0x3555) > 0.333f && srt_f16_to_f32(0x3555) < 0.3334f, "f16 0x3555 ~ 1/3");
    ok(srt_f16_to_f32(0x0001) == ldexpf(1.0f, -24), "f16 subnormal decodes");
    ok(srt_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24), "largest f16 subnormal decodes");
    ok(isinf(srt_f16_to_f32(0x7c00)) && isnan(srt_f16_to_f32(0x7e00)), "f16 inf/nan decode");
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue;   /* NaN payloads need not round-trip */
        if (srt_f32_to_f16(srt_f16_to_f32((uint16_t)h)) != h)
            bad++;
    }
    is_int(bad, 0, "every non-NaN f16 round-trips through f32");
    is_int(srt_f32_to_bf16(1.0f), 0x3f80, "bf16(1)");
    is_int(srt_f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80, "bf16 tie to even (down)");
    is_int(srt_f32_to_bf16(1.0f + ldexpf(3.0f, -8)), 0x3f82, "bf16 tie to even (up)");
    is_int(srt_f32_to_bf16(-3.0f), 0xc040, "bf16(-3)");
    ok(isnan(srt_bf16_to_f32(srt_f32_to_bf16(NAN))), "bf16 nan stays nan");
    ok(srt_bf16_to_f32(0x4049) == 3.140625f, "bf16 0x4049 = 3.140625");
}

/* ---------------------------------------------------------------- hand-built blocks */
static int close_all(const float *got, const float *want, int n, float tol, const char *what)
{
    for (int i = 0; i < n; i++) {
        if (!(fabsf(got[i] - want[i]) <= tol)) {
            tap_diag("%s: element %d got %g want %g", what, i, got[i], want[i]);
            return 0;
        }
    }
    return 1;
}

static void test_block_decoders(void)
{
    uint8_t blk[512];
    float out[256], want[256];

    /* Q8_0: f16 d = 0.5, then 32 int8 */
    memset(blk, 0, sizeof(blk));
    put_f16(blk, 0.5f);
    for (int i = 0; i < 32; i++)
        blk[2 + i] = (uint8_t)(int8_t)(i - 16);
    srt_cpu_dequant(SRT_Q8_0, blk, 32, out);
    for (int i = 0; i < 32; i++)
        want[i] = 0.5f * (i - 16);
    ok(close_all(out, want, 32, 0, "q8_0") && out[0] == -8.0f && out[31] == 7.5f, "q8_0 known block");

    /* Q4_0: d = 2; byte j holds element j (low nibble) and element j+16 (high nibble) */
    memset(blk, 0, sizeof(blk));
    put_f16(blk, 2.0f);
    for (int j = 0; j < 16; j++)
        blk[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    srt_cpu_dequant(SRT_Q4_0, blk, 32, out);
    for (int j = 0; j < 16; j++) {
        want[j] = 2.0f * (j - 8);
        want[j + 16] = 2.0f * (15 - j - 8);
    }
    ok(close_all(out, want, 32, 0, "q4_0") && out[0] == -16.0f && out[16] == 14.0f, "q4_0 known block");

    /* Q4_1: d = 0.25, m = -1, same nibbles */
    memset(blk, 0, sizeof(blk));
    put_f16(blk, 0.25f);
    put_f16(blk + 2, -1.0f);
    for (int j = 0; j < 16; j++)
        blk[4 + j] = (uint8_t)(j | ((15 - j) << 4));
    srt_cpu_dequant(SRT_Q4_1, blk, 32, out);
    for (int j = 0; j < 16; j++) {
        want[j] = 0.25f * j - 1.0f;
        want[j + 16] = 0.25f * (15 - j) - 1.0f;
    }
    ok(close_all(out, want, 32, 0, "q4_1") && out[1] == -0.75f && out[16] == 2.75f, "q4_1 known block");

    /* Q5_0: d = 0.5; element i's fifth bit is bit i of the little-endian qh (here set for
     * the odd elements and for 16..19), value d*(q - 16) */
    memset(blk, 0, sizeof(blk));
    put_f16(blk, 0.5f);
    uint32_t qh5 = 0xAAAAAAAAu | 0x000F0000u;
    memcpy(blk + 2, &qh5, 4);
    for (int j = 0; j < 16; j++)
        blk[6 + j] = (uint8_t)(j | ((15 - j) << 4));
    for (int i = 0; i < 32; i++) {
        int nib = i < 16 ? i : 15 - (i - 16);
        want[i] = 0.5f * ((nib | (int)((qh5 >> i) & 1) << 4) - 16);
    }
    srt_cpu_dequant(SRT_Q5_0, blk, 32, out);
    /* element 1: nibble 1 + 16 -> 0.5 * 1; element 16: nibble 15 + 16 -> 0.5 * 15; element 0: -8 */
    ok(close_all(out, want, 32, 0, "q5_0") && out[0] == -8.0f && out[1] == 0.5f && out[16] == 7.5f,
       "q5_0 known block");

    /* Q5_1: d = 0.25, m = -1, the same bits after d and m */
    memset(blk, 0, sizeof(blk));
    put_f16(blk, 0.25f);
    put_f16(blk + 2, -1.0f);
    memcpy(blk + 4, &qh5, 4);
    for (int j = 0; j < 16; j++)
        blk[8 + j] = (uint8_t)(j | ((15 - j) << 4));
    for (int i = 0; i < 32; i++) {
        int nib = i < 16 ? i : 15 - (i - 16);
        want[i] = 0.25f * (nib | (int)((qh5 >> i) & 1) << 4) - 1.0f;
    }
    srt_cpu_dequant(SRT_Q5_1, blk, 32, out);
    ok(close_all(out, want, 32, 0, "q5_1") && out[0] == -1.0f && out[31] == 3.0f, "q5_1 known block");

    /* Q4_K: d = 1, dmin = 0.5; sub-block j has 6-bit scale sc[j] and min mn[j].
     * scales[0..3]: sc0..3 in bits 0-5, bits 6-7 = sc4..7 >> 4
     * scales[4..7]: mn0..3 in bits 0-5, bits 6-7 = mn4..7 >> 4
     * scales[8..11]: low nibble sc4..7 & 15, high nibble mn4..7 & 15.
     * qs: 32 bytes per 64 elements; low nibbles are the first 32, high nibbles the next 32. */
    static const int sc[8] = { 1, 2, 3, 63, 17, 40, 5, 63 };
    static const int mn[8] = { 0, 7, 33, 1, 63, 2, 48, 9 };
    memset(blk, 0, sizeof(blk));
    put_f16(blk, 1.0f);
    put_f16(blk + 2, 0.5f);
    uint8_t *scl = blk + 4, *qs = blk + 16;
    for (int j = 0; j < 4; j++) {
        scl[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        scl[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
        scl[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
    for (int e = 0; e < 256; e++) {
        int q = (e * 7 + 3) % 16, chunk = e / 64, within = e % 64;
        uint8_t *byte = &qs[chunk * 32 + within % 32];
        *byte |= within < 32 ? (uint8_t)q : (uint8_t)(q << 4);
        want[e] = 1.0f * sc[e / 32] * q - 0.5f * mn[e / 32];
    }
    srt_cpu_dequant(SRT_Q4_K, blk, 256, out);
    ok(close_all(out, want, 256, 0, "q4_k"), "q4_k known block");
    /* element 200: sub-block 6 (sc 5, min 48), q = (1400+3)%16 = 11 -> 55 - 24 = 31 */
    ok(out[200] == 31.0f, "q4_k element 200 = 31 (got %g)", out[200]);

    /* Q6_K: ql[128], qh[64], int8 scales[16], f16 d. Element e: half h = e/128, group
     * g = (e%128)/32, l = e%32; low 4 bits from ql[64h + 32(g&1) + l] (low nibble for
     * g < 2, high for g >= 2), high 2 bits from qh[32h + l] >> 2g, value q - 32, scale
     * scales[8h + 2g + l/16]. */
    memset(blk, 0, sizeof(blk));
    uint8_t *ql = blk, *qh = blk + 128;
    int8_t *s6 = (int8_t *)(blk + 192);
    for (int i = 0; i < 16; i++)
        s6[i] = (int8_t)(i * 9 - 70);
    put_f16(blk + 208, 0.125f);
    for (int e = 0; e < 256; e++) {
        int h = e / 128, g = (e % 128) / 32, l = e % 32;
        int q = (e * 37 + 11) % 64;
        uint8_t *lb = &ql[64 * h + 32 * (g & 1) + l];
        *lb |= g < 2 ? (uint8_t)(q & 15) : (uint8_t)((q & 15) << 4);
        qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * g));
        want[e] = 0.125f * s6[8 * h + 2 * g + l / 16] * (q - 32);
    }
    srt_cpu_dequant(SRT_Q6_K, blk, 256, out);
    ok(close_all(out, want, 256, 0, "q6_k"), "q6_k known block");
    /* element 0: q = 11, scale s6[0] = -70 -> 0.125 * -70 * -21 = 183.75 */
    ok(out[0] == 183.75f, "q6_k element 0 = 183.75 (got %g)", out[0]);

    /* Q5_K, values worked by hand: d 0.5, dmin 0.25; block 0 scale 3 min 5, block 1 scale 2 min
     * 1, block 5 scale 19 (0x13: low bits in scales[9], high in scales[1]'s top) min 4 */
    uint8_t k5[176];
    memset(k5, 0, sizeof k5);
    put_f16(k5, 0.5f);
    put_f16(k5 + 2, 0.25f);
    uint8_t *s5 = k5 + 4, *h5 = k5 + 16, *qs5 = k5 + 48;
    s5[0] = 3, s5[4] = 5, s5[1] = 0x40 | 2, s5[5] = 1, s5[9] = 0x43;
    qs5[0] = 0x07, h5[0] = 0x01;     /* element 0: 7 + 16 = 23 -> 0.5 * 3 * 23 - 0.25 * 5 = 33.25 */
    qs5[1] = 0x90, h5[1] = 0x02;     /* element 33: 9 + 16 = 25 -> 0.5 * 2 * 25 - 0.25 = 24.75 */
    qs5[64] = 0xA0;                  /* element 160: 10 -> 0.5 * 19 * 10 - 0.25 * 4 = 94 */
    srt_cpu_dequant(SRT_Q5_K, k5, 256, out);
    ok(out[0] == 33.25f && out[33] == 24.75f && out[160] == 94.0f && out[2] == -1.25f,
       "q5_k known block (got %g %g %g %g)", out[0], out[33], out[160], out[2]);

    /* Q2_K, worked by hand: scales[16], qs[64], d 0.5, dmin 0.25. Element e: scale byte e / 16
     * (low nibble scale, high min), q = qs[32 * (e / 128) + e % 32] >> 2 * (e / 32 % 4) & 3 */
    uint8_t k2[84];
    memset(k2, 0, sizeof k2);
    put_f16(k2 + 80, 0.5f);
    put_f16(k2 + 82, 0.25f);
    k2[0] = 0x53, k2[5] = 0x2A, k2[15] = 0x01;
    k2[16 + 0] = 2;          /* element 0: 0.5 * 3 * 2 - 0.25 * 5 = 1.75; element 1: -1.25 */
    k2[16 + 16] = 3 << 4;    /* element 80 (scale 5, shift 4): 0.5 * 10 * 3 - 0.25 * 2 = 14.5 */
    k2[16 + 63] = 1 << 6;    /* element 255 (scale 15, shift 6): 0.5 * 1 * 1 = 0.5 */
    srt_cpu_dequant(SRT_Q2_K, k2, 256, out);
    ok(out[0] == 1.75f && out[1] == -1.25f && out[80] == 14.5f && out[255] == 0.5f,
       "q2_k known block (got %g %g %g %g)", out[0], out[1], out[80], out[255]);

    /* Q3_K: hmask[32], qs[64], scales[12], d 0.25. Scale j: low four bits in nibble j / 8 of
     * scales[j % 8], high two at bit 2 * (j / 4) of scales[8 + j % 4], minus 32; q as Q2_K's
     * plus 4 * (bit e / 32 of hmask[e % 32]), minus 4 */
    uint8_t k3[110];
    memset(k3, 0, sizeof k3);
    put_f16(k3 + 108, 0.25f);
    uint8_t *hm3 = k3, *qs3 = k3 + 32, *sc3 = k3 + 96;
    sc3[0] = 8, sc3[8] = 2;            /* scale 0: 40 - 32 = 8 */
    sc3[5] = 5 << 4;                   /* scale 13: 5 - 32 = -27 */
    qs3[0] = 3, hm3[0] = 1;            /* element 0: q 7 -> 0.25 * 8 * 3 = 6; element 1: q 0 -> -8 */
    qs3[48] = 2 << 4, hm3[16] = 1 << 6;   /* element 208 (scale 13, shift 4, bit 6): q 6 -> -13.5 */
    srt_cpu_dequant(SRT_Q3_K, k3, 256, out);
    /* element 16: scale 1 (-32), q 0 -> 0.25 * -32 * -4 = 32 */
    ok(out[0] == 6.0f && out[1] == -8.0f && out[208] == -13.5f && out[16] == 32.0f,
       "q3_k known block (got %g %g %g %g)", out[0], out[1], out[208], out[16]);

    /* IQ4_NL: d 0.5, nibbles in Q4_0's order indexing -127 .. 113 */
    uint8_t n4[18];
    memset(n4, 0, sizeof n4);
    put_f16(n4, 0.5f);
    n4[2 + 0] = 0xF0, n4[2 + 3] = 0x08;
    srt_cpu_dequant(SRT_IQ4_NL, n4, 32, out);
    ok(out[0] == -63.5f && out[16] == 56.5f && out[3] == 0.5f && out[19] == -63.5f,
       "iq4_nl known block (got %g %g %g %g)", out[0], out[16], out[3], out[19]);

    /* IQ4_XS: d 0.25, scales_h, scales_l[4], qs[128]; block j's scale from nibble j % 2 of
     * scales_l[j / 2] and bits 2j of scales_h, minus 32 */
    uint8_t x4[136];
    memset(x4, 0, sizeof x4);
    put_f16(x4, 0.25f);
    uint16_t sh = 2 | 1 << 14;         /* block 0: 2 << 4 | 1 = 33; block 7: 1 << 4 | 4 = 20 */
    memcpy(x4 + 2, &sh, 2);
    x4[4] = 1, x4[7] = 4 << 4;
    x4[8 + 0] = 9;                     /* element 0: 0.25 * 1 * 13 = 3.25 */
    x4[8 + 112] = 2 << 4;              /* element 240: 0.25 * -12 * -83 = 249 */
    srt_cpu_dequant(SRT_IQ4_XS, x4, 256, out);
    /* element 32: block 1's scale 0 - 32, level -127: 1016 */
    ok(out[0] == 3.25f && out[240] == 249.0f && out[32] == 1016.0f,
       "iq4_xs known block (got %g %g %g)", out[0], out[240], out[32]);

    /* dequant_row honours row_stride and rejects rows out of range */
    uint8_t two[2 * 40];
    memset(two, 0, sizeof(two));
    put_f16(two + 40, 1.0f);
    for (int i = 0; i < 32; i++)
        two[40 + 2 + i] = (uint8_t)i;
    srt_weight w = { SRT_Q8_0, 2, 32, two, 40 };
    srt_cpu_dequant_row(&w, 1, out);
    ok(out[5] == 5.0f && out[31] == 31.0f, "dequant_row uses row_stride");
    out[0] = 99;
    srt_cpu_dequant_row(&w, 2, out);
    ok(out[0] == 0.0f, "dequant_row out of range gives zeros");
}

/* ---------------------------------------------------------------- matmul */
/* Random weights whose scale fields are sane f16 values (random bytes could be NaN). */
static void fill_random_weight(srt_dtype t, uint8_t *row, int64_t cols)
{
    size_t bytes = srt_dtype_row_bytes(t, cols);
    for (size_t i = 0; i < bytes; i++)
        row[i] = (uint8_t)rnd();
    int64_t nb = cols / srt_dtype_block_elems(t);
    size_t bb = srt_dtype_block_bytes(t);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = row + b * bb;
        switch (t) {
        case SRT_F32: { float v = frand(-1, 1); memcpy(p, &v, 4); break; }
        case SRT_F16: put_f16(p, frand(-1, 1)); break;
        case SRT_BF16: { uint16_t h = srt_f32_to_bf16(frand(-1, 1)); memcpy(p, &h, 2); break; }
        case SRT_Q8_0: put_f16(p, frand(-0.02f, 0.02f)); break;
        case SRT_Q4_0: put_f16(p, frand(-0.2f, 0.2f)); break;
        case SRT_Q4_1: put_f16(p, frand(0.01f, 0.2f)); put_f16(p + 2, frand(-1.5f, 0.5f)); break;
        case SRT_Q5_0: put_f16(p, frand(-0.1f, 0.1f)); break;
        case SRT_Q5_1: put_f16(p, frand(0.005f, 0.1f)); put_f16(p + 2, frand(-1.5f, 0.5f)); break;
        case SRT_Q4_K: case SRT_Q5_K: {
            /* mins near 8 (Q5_K: 16) steps, as a quantizer centres them; random mins would
             * make rows mostly one offset and the outputs mostly cancellation */
            float d = frand(0.001f, 0.02f);
            put_f16(p, d);
            put_f16(p + 2, d * (t == SRT_Q5_K ? 16.0f : 8.0f) * frand(0.8f, 1.2f));
            break;
        }
        case SRT_Q6_K: put_f16(p + 208, frand(-0.004f, 0.004f)); break;
        case SRT_Q2_K: {   /* mins near 2 steps, as for Q4_K */
            float d = frand(0.005f, 0.05f);
            put_f16(p + 80, d);
            put_f16(p + 82, d * 2.0f * frand(0.8f, 1.2f));
            break;
        }
        case SRT_Q3_K: put_f16(p + 108, frand(-0.004f, 0.004f)); break;
        case SRT_IQ4_NL: put_f16(p, frand(-0.02f, 0.02f)); break;
        case SRT_IQ4_XS: put_f16(p, frand(-0.001f, 0.001f)); break;
        default: break;
        }
    }
}

/* Largest per-token relative L2 error of got vs want (over all rows of a token). */
static double rows_rel_err(const float *got, const float *want, int64_t n_tok, int64_t rows)
{
    double worst = 0;
    for (int64_t t = 0; t < n_tok; t++) {
        double num = 0, den = 0;
        for (int64_t r = 0; r < rows; r++) {
            double d = (double)got[t * rows + r] - want[t * rows + r];
            num += d * d;
            den += (double)want[t * rows + r] * want[t * rows + r];
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        if (!(rel <= worst))
            worst = isnan(rel) ? INFINITY : rel;
    }
    return worst;
}

/* Per-output error bounds: mag = sum|w*x| (scale of f32 rounding error) and qerr = the
 * most that rounding x to Q8 (step amax/127 per 32-block) can move the result,
 * sum |w_c| * amax(block of c) / 254. */
static void error_bounds(const srt_weight *w, const float *x, int64_t n_tok, double *mag, double *qerr)
{
    float *row = malloc(w->cols * sizeof(float));
    for (int64_t r = 0; r < w->rows; r++) {
        srt_cpu_dequant_row(w, r, row);
        for (int64_t t = 0; t < n_tok; t++) {
            const float *xt = x + t * w->cols;
            double m = 0, q = 0;
            for (int64_t c0 = 0; c0 < w->cols; c0 += 32) {
                double amax = 0, wsum = 0;
                for (int k = 0; k < 32; k++) {
                    amax = fmax(amax, fabs(xt[c0 + k]));
                    wsum += fabs(row[c0 + k]);
                    m += fabs((double)row[c0 + k] * xt[c0 + k]);
                }
                q += wsum * amax / 254.0;
            }
            mag[t * w->rows + r] = m;
            qerr[t * w->rows + r] = q;
        }
    }
    free(row);
}

/* Largest |got - want| / (qscale * qerr + rel * mag + 1e-6); <= 1 passes. */
static double bound_ratio(const float *got, const float *want, const double *mag, const double *qerr,
                          int64_t n, double qscale, double rel)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (qscale * qerr[i] + rel * mag[i] + 1e-6);
        if (!(e <= worst))
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

static const char *paths[] = { "portable", "avx2", "avx512" };

static void test_matmul_dtype(srt_dtype t, srt_threadpool *tp)
{
    int is_k = srt_dtype_block_elems(t) == 256;
    int is_q = srt_dtype_block_elems(t) > 1;   /* the block formats quantize activations */
    const int64_t shapes[][2] = { { 37, is_k ? 512 : 96 }, { 1, is_k ? 256 : 32 }, { 131, is_k ? 768 : 576 } };
    const int64_t toks[] = { 1, 2, 3, 17, 64 };   /* every tail of the 4-token tiles */
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1];
        size_t row_bytes = srt_dtype_row_bytes(t, cols);
        size_t stride = row_bytes + 6 * (si & 1);   /* padded rows catch stride bugs */
        uint8_t *wd = calloc((size_t)rows, stride);
        for (int64_t r = 0; r < rows; r++)
            fill_random_weight(t, wd + r * stride, cols);
        srt_weight w = { t, rows, cols, wd, stride };
        float *bias = malloc(rows * sizeof(float));
        for (int64_t r = 0; r < rows; r++)
            bias[r] = frand(-1, 1);
        for (size_t ti = 0; ti < sizeof(toks) / sizeof(toks[0]); ti++) {
            int64_t n_tok = toks[ti];
            float *x = malloc(n_tok * cols * sizeof(float));
            float *xe = malloc(n_tok * cols * sizeof(float));
            for (int64_t i = 0; i < n_tok * cols; i++) {
                x[i] = frand(-2, 2);
                /* integers with 127 in each block quantize exactly */
                xe[i] = (i % 32 == 5) ? 127.0f : (float)((int)(rnd() % 255) - 127);
            }
            int64_t ny = n_tok * rows;
            float *yref = malloc(ny * sizeof(float)), *yrefe = malloc(ny * sizeof(float));
            float *yport = malloc(ny * sizeof(float)), *y = malloc(ny * sizeof(float));
            double *mag = malloc(ny * sizeof(double)), *qerr = malloc(ny * sizeof(double));
            double *mage = malloc(ny * sizeof(double)), *qerre = malloc(ny * sizeof(double));
            const float *b = (ti & 1) ? bias : NULL;
            srt_cpu_matmul_ref(&w, b, x, n_tok, yref);
            srt_cpu_matmul_ref(&w, b, xe, n_tok, yrefe);
            error_bounds(&w, x, n_tok, mag, qerr);
            error_bounds(&w, xe, n_tok, mage, qerre);
            size_t sb = srt_cpu_matmul_scratch_bytes(&w, n_tok);
            void *scratch = sb ? malloc(sb) : NULL;
            for (int p = 0; p < 3; p++) {
                if (srt_cpu_force_simd(paths[p]) != SRT_OK)
                    continue;
                srt_threadpool *use = (p + ti) & 1 ? tp : NULL;
                const char *name = srt_dtype_name(t);
                for (int64_t i = 0; i < ny; i++)
                    y[i] = NAN;
                srt_cpu_matmul(use, &w, b, x, n_tok, y, scratch);
                /* every output within the Q8 rounding bound (quantized) / f32 rounding (float) */
                double e = bound_ratio(y, yref, mag, qerr, ny, is_q ? 1.0 : 0.0, 1e-5);
                ok(e <= 1.0, "%s %s %lldx%lld n_tok=%lld%s: error / bound %.2f <= 1",
                   name, paths[p], (long long)rows, (long long)cols, (long long)n_tok,
                   b ? " +bias" : "", e);
                if (rows >= 16) {
                    /* relative L2 error of the whole output (rows x tokens) */
                    double rel = rows_rel_err(y, yref, 1, ny);
                    double tol = is_q ? 1e-2 : 1e-5;
                    ok(rel < tol, "%s %s %lldx%lld n_tok=%lld: relative error %.2e < %.0e",
                       name, paths[p], (long long)rows, (long long)cols, (long long)n_tok, rel, tol);
                }
                if (p == 0) {
                    memcpy(yport, y, ny * sizeof(float));
                } else {
                    double ep = bound_ratio(y, yport, mag, qerr, ny, 0.0, 1e-5);
                    ok(ep <= 1.0, "%s %s agrees with portable (%.2f of 1e-5 bound)", name, paths[p], ep);
                }
                srt_cpu_matmul(use, &w, b, xe, n_tok, y, scratch);
                e = bound_ratio(y, yrefe, mage, qerre, ny, 0.0, 1e-5);
                ok(e <= 1.0, "%s %s n_tok=%lld exactly-quantizable input: error / 1e-5 bound %.2f",
                   name, paths[p], (long long)n_tok, e);
            }
            free(mag); free(qerr); free(mage); free(qerre);
            free(scratch); free(x); free(xe); free(yref); free(yrefe); free(yport); free(y);
        }
        free(bias);
        free(wd);
    }
}

/* A quantized matmul must actually use its activations' quantization: fewer bits than
 * Q8 would blow the 1e-2 bound, so check the bound is not trivially loose. */
/* Batch invariance: a token's output row is the same bits whatever else is in the batch
 * and wherever it sits (decode sizes, every tail of the prefill tiles, row counts that are
 * not a multiple of the micro-kernels', odd block counts), on every SIMD path and with or
 * without the thread pool, and through matmul_multi too. */
static void test_matmul_batch_invariance(srt_dtype t, srt_threadpool *tp)
{
    int is_k = srt_dtype_block_elems(t) == 256;
    const int64_t shapes[][2] = { { 259, is_k ? 512 : 288 }, { 6, is_k ? 256 : 64 } };
    const int64_t sizes[] = { 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 31, 32, 33, 47, 64 };
    enum { POOL = 64 };
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1];
        size_t stride = srt_dtype_row_bytes(t, cols);
        uint8_t *wd = calloc((size_t)rows, stride);
        for (int64_t r = 0; r < rows; r++)
            fill_random_weight(t, wd + r * stride, cols);
        srt_weight w = { t, rows, cols, wd, stride };
        float *pool = malloc(sizeof(float) * POOL * cols), *alone = malloc(sizeof(float) * POOL * rows);
        float *x = malloc(sizeof(float) * POOL * cols), *y = malloc(sizeof(float) * POOL * rows);
        float *y2 = malloc(sizeof(float) * POOL * rows);
        for (int64_t i = 0; i < POOL * cols; i++)
            pool[i] = frand(-2, 2) * (i % 97 == 0 ? 30.0f : 1.0f);
        void *scratch = malloc(srt_cpu_matmul_scratch_bytes(&w, POOL) + 64);
        for (int p = 0; p < 3; p++) {
            if (srt_cpu_force_simd(paths[p]) != SRT_OK)
                continue;
            for (int k = 0; k < POOL; k++)
                srt_cpu_matmul(NULL, &w, NULL, pool + k * cols, 1, alone + k * rows, scratch);
            int bad = 0, first_n = 0, first_i = 0;
            for (size_t ni = 0; ni < sizeof(sizes) / sizeof(sizes[0]) + 1; ni++) {
                /* the last round: each token alone again, on the pool (decode split over threads) */
                int64_t n = ni < sizeof(sizes) / sizeof(sizes[0]) ? sizes[ni] : 1;
                for (int rep = 0; rep < (n == 1 ? POOL : 1); rep++) {
                    int which[POOL];
                    for (int64_t i = 0; i < n; i++) {
                        which[i] = n == 1 ? rep : (int)((i * 7 + ni * 5) % POOL);
                        memcpy(x + i * cols, pool + which[i] * cols, sizeof(float) * cols);
                    }
                    srt_threadpool *use = (ni & 1) || n == 1 ? tp : NULL;
                    srt_cpu_matmul(use, &w, NULL, x, n, y, scratch);
                    /* multi: the same weight twice, the second output must match too */
                    const srt_weight *ws[2] = { &w, &w };
                    float *ys[2] = { y2, y2 + n * rows };
                    int multi = n * 2 <= POOL && srt_cpu_matmul_multi(use, 2, ws, NULL, x, n, ys, scratch) == SRT_OK;
                    for (int64_t i = 0; i < n; i++) {
                        const float *want = alone + which[i] * rows;
                        int diff = memcmp(y + i * rows, want, sizeof(float) * rows) != 0 ||
                                   (multi && memcmp(y2 + (n + i) * rows, want, sizeof(float) * rows) != 0);
                        if (diff && !bad++) {
                            first_n = (int)n;
                            first_i = (int)i;
                        }
                    }
                }
            }
            if (!ok(bad == 0, "batch invariance %s %s %lldx%lld: every token's row memcmp-equal alone and in batches of 2..64",
                    srt_dtype_name(t), paths[p], (long long)rows, (long long)cols))
                tap_diag("%d mismatching rows, first: batch of %d, token %d", bad, first_n, first_i);
        }
        free(scratch); free(pool); free(alone); free(x); free(y); free(y2); free(wd);
    }
}

/* Attention: a token's output is the same bits decoded alone (unsplit, or with its keys
 * split over the threads), at every place of a prefill chunk (the tokens of a chunk are
 * attended in tiles that share K/V blocks; one chunk ends inside a 256-key chunk of keys,
 * one crosses from one to the next), and next to another sequence, for F32 and F16 KV on
 * every SIMD path; heads of 64 in groups of 3 (SmolLM2: tiles of 8 tokens; scores eight keys
 * at a time by f16_dot64_k8, a block's last keys by f16_dot64_x4 / x3) and of 128 in groups of
 * 7 (tiles of 4 tokens). */
static void attention_invariance(srt_threadpool *tp, const int NH, const int NKV, const int HD)
{
    enum { NSLOT = 1024, S = 700, CH = 40, NP = 2 };
    static const int32_t first[NP] = { S - CH, 256 - CH / 2 };   /* the chunks' first positions */
    float *kc = malloc(sizeof(float) * NSLOT * NKV * HD), *vc = malloc(sizeof(float) * NSLOT * NKV * HD);
    uint16_t *kh = malloc(2 * NSLOT * NKV * HD), *vh = malloc(2 * NSLOT * NKV * HD);
    for (int i = 0; i < NSLOT * NKV * HD; i++) {
        kc[i] = frand(-1.5f, 1.5f);
        vc[i] = frand(-1, 1);
        kh[i] = srt_f32_to_f16(kc[i]);
        vh[i] = srt_f32_to_f16(vc[i]);
    }
    int32_t slots[S], oslots[8];
    for (int i = 0; i < S; i++)
        slots[i] = (i * 13) % NSLOT;
    for (int i = 0; i < 8; i++)
        oslots[i] = (S * 13 + i * 13) % NSLOT;
    float *q = malloc(sizeof(float) * (CH + 8) * NH * HD), *qb = malloc(sizeof(float) * (CH + 8) * NH * HD);
    for (int i = 0; i < (CH + 8) * NH * HD; i++)
        q[i] = frand(-2, 2);
    float *ref = malloc(sizeof(float) * NP * CH * NH * HD), *out = malloc(sizeof(float) * (CH + 8) * NH * HD);
    size_t nsc = srt_cpu_attention_scratch_floats(srt_threadpool_size(tp), HD);
    float *scratch = malloc(sizeof(float) * nsc);
    const size_t tok = (size_t)NH * HD;
    for (int kd = 0; kd < 2; kd++)
        for (int p = 0; p < 3; p++) {
            if (srt_cpu_force_simd(paths[p]) != SRT_OK)
                continue;
            int32_t pos[CH + 8], outs[CH + 8], start[3], len[2];
            const int32_t *ss[2];
            srt_forward_batch b = { .positions = pos, .out_slots = outs, .seq_start = start, .seq_len = len,
                                    .seq_slots = ss };
            srt_attn_args a = { &b, qb, out, kd ? (const void *)kh : kc, kd ? (const void *)vh : vc,
                                kd ? SRT_F16 : SRT_F32, NH, NKV, HD, 0.125f };
            /* every position of both chunks decoded alone, one thread: the references */
            b.n_tokens = 1, b.n_seqs = 1, start[0] = 0, start[1] = 1, ss[0] = slots;
            for (int c = 0; c < NP; c++)
                for (int i = 0; i < CH; i++) {
                    memcpy(qb, q + i * tok, sizeof(float) * tok);
                    pos[0] = first[c] + i, len[0] = first[c] + i + 1;
                    srt_cpu_attention(NULL, &a, NULL, 0);
                    memcpy(ref + ((size_t)c * CH + i) * tok, out, sizeof(float) * tok);
                }
            const float *rlast = ref + (size_t)(CH - 1) * tok, *qlast = q + (size_t)(CH - 1) * tok;
            /* the last position decoded alone on the pool: the keys split over the threads */
            memcpy(qb, qlast, sizeof(float) * tok);
            pos[0] = S - 1, len[0] = S;
            memset(out, 0xff, sizeof(float) * (CH + 8) * tok);   /* NaNs: every output must be written */
            srt_cpu_attention(tp, &a, scratch, nsc);
            int same_split = !memcmp(rlast, out, sizeof(float) * tok);
            /* each chunk as one prefill: every token equals its decode */
            int same_chunk = 1, bad_at = -1;
            memcpy(qb, q, sizeof(float) * CH * tok);
            b.n_tokens = CH, start[1] = CH;
            for (int c = 0; c < NP; c++) {
                for (int i = 0; i < CH; i++)
                    pos[i] = first[c] + i;
                len[0] = first[c] + CH;
                memset(out, 0xff, sizeof(float) * (CH + 8) * tok);
                srt_cpu_attention(tp, &a, scratch, nsc);
                for (int i = 0; i < CH; i++)
                    if (memcmp(ref + ((size_t)c * CH + i) * tok, out + (size_t)i * tok, sizeof(float) * tok)) {
                        same_chunk = 0;
                        bad_at = bad_at < 0 ? first[c] + i : bad_at;
                    }
            }
            /* next to another sequence's 5-token prefill */
            memcpy(qb, q + (size_t)CH * tok, sizeof(float) * 5 * tok);
            memcpy(qb + (size_t)5 * tok, qlast, sizeof(float) * tok);
            for (int i = 0; i < 5; i++)
                pos[i] = i;
            pos[5] = S - 1;
            start[0] = 0, start[1] = 5, start[2] = 6, len[0] = 5, len[1] = S, ss[0] = oslots, ss[1] = slots;
            b.n_tokens = 6, b.n_seqs = 2;
            memset(out, 0xff, sizeof(float) * (CH + 8) * tok);
            srt_cpu_attention(tp, &a, scratch, nsc);
            int same_mix = !memcmp(rlast, out + (size_t)5 * tok, sizeof(float) * tok);
            if (!ok(same_split && same_chunk && same_mix,
                    "attention %s %s, %d heads of %d on %d KV heads: decode alone == split over threads (%d) == at "
                    "each place of prefill chunks at %d and %d (%d) == next to another sequence (%d), bit for bit",
                    kd ? "f16" : "f32", paths[p], NH, HD, NKV, same_split, first[0], first[1], same_chunk, same_mix))
                tap_diag("first position that differs in a chunk: %d", bad_at);
        }
    free(kc); free(vc); free(kh); free(vh); free(q); free(qb); free(ref); free(out); free(scratch);
}

static void test_attention_invariance(srt_threadpool *tp)
{
    attention_invariance(tp, 6, 2, 64);
    attention_invariance(tp, 28, 4, 128);
}

static void test_matmul_tolerance_is_meaningful(void)
{
    int64_t rows = 16, cols = 256;
    uint8_t wd[16 * 20 * 8];
    for (int64_t r = 0; r < rows; r++)
        fill_random_weight(SRT_Q4_1, wd + r * 160, cols);
    srt_weight w = { SRT_Q4_1, rows, cols, wd, 160 };
    float x[256], y[16], yref[16];
    for (int i = 0; i < 256; i++)
        x[i] = frand(-1, 1);
    srt_cpu_matmul_ref(&w, NULL, x, 1, yref);
    for (int i = 0; i < 256; i++)
        x[i] = roundf(x[i] * 8) / 8;   /* ~4-bit activations */
    srt_cpu_matmul_ref(&w, NULL, x, 1, y);
    ok(rows_rel_err(y, yref, 1, rows) > 1e-2, "4-bit activations would fail the 1e-2 bound");
}

/* Fused weights sharing x: mixed formats, odd row counts, decode and prefill splits. */
static void test_matmul_multi(srt_threadpool *tp)
{
    const srt_dtype dts[3] = { SRT_Q4_1, SRT_Q8_0, SRT_F16 };
    const int64_t rows[3] = { 37, 600, 5 }, cols = 256;   /* big enough to be split over the pool */
    uint8_t *wd[3];
    srt_weight ws[3];
    const srt_weight *wp[3];
    float *bias[3];
    for (int m = 0; m < 3; m++) {
        size_t rb = srt_dtype_row_bytes(dts[m], cols);
        wd[m] = malloc(rows[m] * rb);
        for (int64_t r = 0; r < rows[m]; r++)
            fill_random_weight(dts[m], wd[m] + r * rb, cols);
        ws[m] = (srt_weight){ dts[m], rows[m], cols, wd[m], rb };
        wp[m] = &ws[m];
        bias[m] = malloc(rows[m] * sizeof(float));
        for (int64_t r = 0; r < rows[m]; r++)
            bias[m][r] = frand(-1, 1);
    }
    const float *bp[3] = { bias[0], NULL, bias[2] };
    for (int p = 0; p < 3; p++) {
        if (srt_cpu_force_simd(paths[p]) != SRT_OK)
            continue;
        for (int64_t n_tok = 1; n_tok <= 40; n_tok += 39) {
            float *x = malloc(n_tok * cols * sizeof(float));
            for (int64_t i = 0; i < n_tok * cols; i++)
                x[i] = frand(-2, 2);
            float *y[3], *yr[3];
            for (int m = 0; m < 3; m++) {
                y[m] = malloc(n_tok * rows[m] * sizeof(float));
                yr[m] = malloc(n_tok * rows[m] * sizeof(float));
                for (int64_t i = 0; i < n_tok * rows[m]; i++)
                    y[m][i] = NAN;
            }
            void *scratch = malloc(srt_cpu_matmul_multi_scratch_bytes(3, wp, n_tok));
            int rc = srt_cpu_matmul_multi(tp, 3, wp, bp, x, n_tok, y, scratch);
            int good = rc == SRT_OK;
            for (int m = 0; m < 3; m++) {
                int64_t ny = n_tok * rows[m];
                double *mag = malloc(ny * sizeof(double)), *qerr = malloc(ny * sizeof(double));
                srt_cpu_matmul_ref(&ws[m], bp[m], x, n_tok, yr[m]);
                error_bounds(&ws[m], x, n_tok, mag, qerr);
                double e = bound_ratio(y[m], yr[m], mag, qerr, ny, dts[m] == SRT_F16 ? 0.0 : 1.0, 1e-5);
                if (!(e <= 1.0)) {
                    tap_diag("matrix %d: error / bound %.2f", m, e);
                    good = 0;
                }
                free(mag); free(qerr);
            }
            ok(good, "matmul_multi %s q4_1+q8_0+f16 n_tok=%lld matches the reference",
               paths[p], (long long)n_tok);
            for (int m = 0; m < 3; m++) {
                free(y[m]);
                free(yr[m]);
            }
            free(scratch);
            free(x);
        }
    }
    srt_weight other = ws[1];
    other.cols = 64;
    const srt_weight *bad[2] = { &ws[0], &other };
    float *dummy[SRT_CPU_MATMUL_MAX_MULTI + 1] = { 0 };
    const srt_weight *many[SRT_CPU_MATMUL_MAX_MULTI + 1];
    for (int i = 0; i <= SRT_CPU_MATMUL_MAX_MULTI; i++)
        many[i] = &ws[0];
    ok(srt_cpu_matmul_multi(tp, 2, bad, NULL, NULL, 1, dummy, NULL) == SRT_ERROR,
       "matmul_multi refuses weights of different widths");
    ok(srt_cpu_matmul_multi(tp, 0, bad, NULL, NULL, 1, dummy, NULL) == SRT_ERROR,
       "matmul_multi refuses n = 0");
    ok(srt_cpu_matmul_multi(tp, SRT_CPU_MATMUL_MAX_MULTI + 1, many, NULL, NULL, 1, dummy, NULL) == SRT_ERROR,
       "matmul_multi refuses n > max");
    for (int m = 0; m < 3; m++) {
        free(wd[m]);
        free(bias[m]);
    }
}

/* ---------------------------------------------------------------- thread pool */
typedef struct { int hits[64]; int nth_seen; } pool_probe;

static void probe_task(void *arg, int ith, int nth)
{
    pool_probe *p = arg;
    __atomic_fetch_add(&p->hits[ith], 1, __ATOMIC_RELAXED);
    __atomic_store_n(&p->nth_seen, nth, __ATOMIC_RELAXED);
}

static void sigmask_task(void *arg, int ith, int nth)
{
    int *blocked = arg;
    (void)nth;
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    blocked[ith] = sigismember(&cur, SIGTERM) == 1;
}

typedef struct { srt_threadpool *tp; pool_probe inner[64]; } nest_probe;

static void nested_task(void *arg, int ith, int nth)
{
    nest_probe *n = arg;
    (void)nth;
    srt_threadpool_run(n->tp, probe_task, &n->inner[ith]);
}

typedef struct { int hits[256]; int bad_ith; int nth; } items_probe;

static void items_task(void *arg, int64_t item, int ith)
{
    items_probe *p = arg;
    __atomic_fetch_add(&p->hits[item], 1, __ATOMIC_RELAXED);
    if (ith < 0 || ith >= p->nth)
        __atomic_fetch_add(&p->bad_ith, 1, __ATOMIC_RELAXED);
}

/* Items runs mixed with slice runs: every item exactly once per run, also when the workers
 * are asleep (they wake into a job that is already closed, or into the next one: a worker
 * that ran a stale job would count an item of the next probe twice or run a slice twice). */
static void test_threadpool_items(void)
{
    for (int n = 1; n <= 4; n += 3) {
        srt_threadpool *tp = srt_threadpool_create(n);
        pool_probe slices;
        memset(&slices, 0, sizeof(slices));
        int bad = 0, bad_slices = 0, bad_ith = 0;
        for (int i = 0; i < 3000; i++) {
            items_probe p;
            memset(&p, 0, sizeof(p));
            p.nth = n;
            int64_t n_items = i % 7 == 0 ? 1 : (int64_t)(i % 256);
            srt_threadpool_run_items(tp, items_task, &p, n_items);
            for (int64_t k = 0; k < 256; k++)
                bad += p.hits[k] != (k < n_items ? 1 : 0);
            bad_ith += p.bad_ith;
            if (i % 3 == 0) {
                srt_threadpool_run(tp, probe_task, &slices);
                for (int k = 0; k < n; k++)
                    bad_slices += slices.hits[k] != i / 3 + 1;
            }
            if (i % 500 == 0)
                usleep(2000);   /* workers fall asleep: they come back late */
        }
        is_int(bad, 0, "items: each ran exactly once per run (%d threads)", n);
        is_int(bad_ith, 0, "items: ith within the pool");
        is_int(bad_slices, 0, "slice runs between items runs: each slice once");
        srt_threadpool_free(tp);
    }
}

static void test_threadpool(void)
{
    test_threadpool_items();
    for (int n = 1; n <= 4; n += 3) {
        srt_threadpool *tp = srt_threadpool_create(n);
        ok(tp && srt_threadpool_size(tp) == n, "pool of %d", n);
        pool_probe p;
        memset(&p, 0, sizeof(p));
        int runs = 2000, bad = 0;
        for (int i = 0; i < runs; i++) {
            srt_threadpool_run(tp, probe_task, &p);
            if (i == 1000)
                usleep(5000);   /* let workers fall asleep: the futex path */
            for (int k = 0; k < n; k++)
                bad += p.hits[k] != i + 1;
        }
        is_int(bad, 0, "every slice ran exactly once per run (%d threads)", n);
        is_int(p.nth_seen, n, "nth passed through");
        srt_threadpool_free(tp);
    }
    srt_threadpool *sp = srt_threadpool_create(3);
    int blocked[3] = { -1, -1, -1 };
    srt_threadpool_run(sp, sigmask_task, blocked);
    ok(blocked[0] == 0 && blocked[1] == 1 && blocked[2] == 1,
       "workers block signals, the caller's mask is untouched (%d %d %d)", blocked[0], blocked[1], blocked[2]);
    srt_threadpool_free(sp);

    srt_threadpool *np = srt_threadpool_create(3);
    static nest_probe nest;
    memset(&nest, 0, sizeof(nest));
    nest.tp = np;
    srt_threadpool_run(np, nested_task, &nest);
    int nested_ok = 1;
    for (int k = 0; k < 3; k++)
        nested_ok &= nest.inner[k].hits[0] == 1 && nest.inner[k].nth_seen == 1;
    ok(nested_ok, "a run inside a task of the same pool runs inline");
    srt_threadpool_run(np, probe_task, &nest.inner[10]);
    ok(nest.inner[10].nth_seen == 3, "the pool is usable after a nested run");
    srt_threadpool_free(np);

    srt_threadpool *tp = srt_threadpool_create(0);
    ok(tp && srt_threadpool_size(tp) >= 1, "pool of all cores (%d)", srt_threadpool_size(tp));
    srt_threadpool_free(tp);
    srt_threadpool_free(NULL);
    ok(srt_threadpool_size(NULL) == 1, "NULL pool runs serially");
}

/* ---------------------------------------------------------------- elementwise */
static void test_elementwise(srt_threadpool *tp)
{
    int64_t n_tok = 70, dim = 1000;   /* big enough to take the parallel path */
    float *x = malloc(n_tok * dim * sizeof(float)), *out = malloc(n_tok * dim * sizeof(float));
    float *wf = malloc(dim * sizeof(float));
    uint16_t *wh = malloc(dim * 2), *wb = malloc(dim * 2);
    for (int64_t i = 0; i < n_tok * dim; i++)
        x[i] = frand(-3, 3);
    for (int64_t i = 0; i < dim; i++) {
        wh[i] = srt_f32_to_f16(frand(0.5f, 1.5f));
        wf[i] = srt_f16_to_f32(wh[i]);
        wb[i] = srt_f32_to_bf16(wf[i]);
    }
    srt_weight ws[3] = { { SRT_F32, 1, dim, wf, 0 }, { SRT_F16, 1, dim, wh, 0 }, { SRT_BF16, 1, dim, wb, 0 } };
    for (int k = 0; k < 3; k++) {
        for (int use_tp = 0; use_tp < 2; use_tp++) {
            int64_t nt = use_tp ? n_tok : 1;
            srt_cpu_rmsnorm(use_tp ? tp : NULL, x, &ws[k], 1e-5f, nt, dim, out);
            double worst = 0;
            for (int64_t t = 0; t < nt; t++) {
                double ss = 0;
                for (int64_t i = 0; i < dim; i++)
                    ss += (double)x[t * dim + i] * x[t * dim + i];
                double sc = 1.0 / sqrt(ss / dim + 1e-5);
                for (int64_t i = 0; i < dim; i++) {
                    double wv = k == 2 ? srt_bf16_to_f32(wb[i]) : wf[i];
                    double want = x[t * dim + i] * sc * wv;
                    double e = fabs(out[t * dim + i] - want) / (fabs(want) + 1e-3);
                    if (e > worst) worst = e;
                }
            }
            ok(worst < 1e-4, "rmsnorm %s n_tok=%lld rel err %.2e", srt_dtype_name(ws[k].dtype),
               (long long)nt, worst);
        }
    }
    int64_t n = n_tok * dim;
    float *up = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        up[i] = frand(-2, 2);
    /* extremes exercise the clamped exp of the SIMD paths */
    float *g = malloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        g[i] = i % 97 == 0 ? frand(-120, 120) : frand(-12, 12);
    for (int p = 0; p < 3; p++) {
        if (srt_cpu_force_simd(paths[p]) != SRT_OK)
            continue;
        for (int pass = 0; pass < 2; pass++) {
            int64_t m = pass ? n : 37;
            for (int64_t i = 0; i < m; i++)
                out[i] = NAN;
            srt_cpu_silu_mul(tp, g, up, m, out);
            double worst = 0;
            for (int64_t i = 0; i < m; i++) {
                double gv = g[i], want = gv / (1 + exp(-gv)) * up[i];
                double e = fabs(out[i] - want) / (fabs(want) + 1e-6);
                if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
            }
            ok(worst < 2e-6, "silu_mul %s n=%lld rel err %.2e", paths[p], (long long)m, worst);
            if (pass) {
                /* batch invariance: each of the first 256 elements alone (all tail) == mid-array */
                int diff = 0;
                for (int64_t i = 0; i < 256 && i < n; i++) {
                    float one;
                    srt_cpu_silu_mul(NULL, g + i, up + i, 1, &one);
                    diff += memcmp(&one, &out[i], sizeof one) != 0;
                }
                ok(diff == 0, "silu_mul %s: an element alone == the same element mid-array (%d differ)", paths[p], diff);
            }
            memcpy(y, up, m * sizeof(float));
            srt_cpu_add(tp, y, x, m);
            int bad = 0;
            for (int64_t i = 0; i < m; i++)
                bad += y[i] != up[i] + x[i];
            is_int(bad, 0, "add %s n=%lld exact", paths[p], (long long)m);
        }
    }
    free(g);
    free(x); free(out); free(wf); free(wh); free(wb); free(up); free(y);
}

/* The fused f16 K/V kernels give the bits of converting the row and calling the chosen
 * dot / axpy per head (attention's results do not move with the fusion), on every path. */
static void test_f16_heads(void)
{
    static const char *paths[] = { "portable", "avx2", "avx512" };
    static const int64_t ns[] = { 8, 40, 64, 128, 100, 1024 };
    static float q[4][1024], acc[4][1024], acc2[4][1024], buf[1024];
    static uint16_t k[1024];
    for (size_t p = 0; p < 3; p++) {
        if (srt_cpu_force_simd(paths[p]) != SRT_OK)
            continue;
        int bad = 0;
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            int64_t n = ns[ni];
            for (int h = 0; h < 4; h++)
                for (int64_t i = 0; i < n; i++) {
                    q[h][i] = frand(-2, 2);
                    acc[h][i] = acc2[h][i] = frand(-1, 1);
                }
            for (int64_t i = 0; i < n; i++)
                k[i] = srt_f32_to_f16(frand(-3, 3));
            float out[4 * 5], pr[4 * 5] = { 0.3f, 0, 0, 0, 0, -1.7f, 0, 0, 0, 0, 0.01f, 0, 0, 0, 0, 2.5f };
            const float *qs[4] = { q[0], q[1], q[2], q[3] };
            float *accs[4] = { acc[0], acc[1], acc[2], acc[3] };
            const uint16_t *kr[1] = { k };   /* a block of one key */
            srt_cpu_f16_dot_block()(qs, 4, kr, 1, n, out, 5);
            srt_cpu_f16_axpy_block()(accs, pr, 5, 4, kr, 1, n);
            srt_cpu_f16_row()(k, buf, n);
            for (int h = 0; h < 4; h++) {
                float want = srt_cpu_dot_f32()(q[h], buf, n);
                bad += memcmp(&want, &out[h * 5], sizeof want) != 0;
                srt_cpu_axpy_f32()(acc2[h], pr[h * 5], buf, n);
                bad += memcmp(acc[h], acc2[h], (size_t)n * sizeof(float)) != 0;
            }
            /* fewer heads take kernels of their own (three: a SmolLM2 decode's) */
            for (int nh = 1; nh < 4; nh++) {
                srt_cpu_f16_dot_block()(qs, nh, kr, 1, n, out, 5);
                for (int h = 0; h < nh; h++) {
                    float want = srt_cpu_dot_f32()(q[h], buf, n);
                    bad += memcmp(&want, &out[h * 5], sizeof want) != 0;
                }
            }
        }
        is_int(bad, 0, "%s: f16 dot/axpy over 1-4 heads == convert + dot/axpy, bit for bit", paths[p]);
    }
    srt_cpu_force_simd("portable");   /* as main left it */
}

/* The block kernels (a block of keys, heads in registers) against blocks of one key (which
 * test_f16_heads holds to convert + dot / axpy), key by key: the same bits, for 1-7 heads (the axpy's groups of 3 and their remainders), head
 * dims on and off its 32-column path, 1-64 keys. */
static void test_f16_blocks(void)
{
    static const char *paths[] = { "portable", "avx2", "avx512" };
    static const int64_t ns[] = { 64, 128, 40, 96 };
    static const int nhs[] = { 1, 2, 3, 4, 7 }, nbs[] = { 1, 5, 64 };
    static float q[7][128], acc[7][128], acc2[7][128], pr[7][64];
    static uint16_t kv[64][128];
    for (size_t p = 0; p < 3; p++) {
        if (srt_cpu_force_simd(paths[p]) != SRT_OK)
            continue;
        int bad = 0, cases = 0;
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (size_t hi = 0; hi < sizeof nhs / sizeof nhs[0]; hi++)
                for (size_t bi = 0; bi < sizeof nbs / sizeof nbs[0]; bi++) {
                    int64_t n = ns[ni];
                    int nh = nhs[hi], nb = nbs[bi];
                    const float *qs[7];
                    float *accs[7], *accs2[7], out[7][64], want[7][64];
                    const uint16_t *rows[64];
                    for (int h = 0; h < nh; h++) {
                        qs[h] = q[h];
                        accs[h] = acc[h];
                        accs2[h] = acc2[h];
                        for (int64_t i = 0; i < n; i++) {
                            q[h][i] = frand(-2, 2);
                            acc[h][i] = acc2[h][i] = frand(-1, 1);
                        }
                        for (int j = 0; j < nb; j++)
                            pr[h][j] = frand(0, 1);
                    }
                    for (int j = 0; j < nb; j++) {
                        for (int64_t i = 0; i < n; i++)
                            kv[j][i] = srt_f32_to_f16(frand(-3, 3));
                        rows[j] = kv[(j * 7) % nb];   /* rows in any order, one row twice */
                    }
                    srt_cpu_f16_dot_block()(qs, nh, rows, nb, n, out[0], 64);
                    srt_cpu_f16_axpy_block()(accs, pr[0], 64, nh, rows, nb, n);
                    for (int j = 0; j < nb; j++) {
                        srt_cpu_f16_dot_block()(qs, nh, rows + j, 1, n, &want[0][j], 64);
                        srt_cpu_f16_axpy_block()(accs2, &pr[0][j], 64, nh, rows + j, 1, n);
                    }
                    for (int h = 0; h < nh; h++) {
                        bad += memcmp(out[h], want[h], (size_t)nb * sizeof(float)) != 0;
                        bad += memcmp(acc[h], acc2[h], (size_t)n * sizeof(float)) != 0;
                    }
                    cases++;
                }
        ok(bad == 0 && cases == 60, "%s: f16 dot/axpy over a block of keys == key by key, bit for bit "
           "(%d of %d cases differ)", paths[p], bad, cases);
    }
    srt_cpu_force_simd("portable");   /* as main left it */
}

/* Attention over f32 K/V rows: dot_rows / axpy_rows give the bits of the chosen dot / axpy per
 * row on the portable and AVX2 paths (on AVX2 they were the portable scalar loops). The
 * AVX-512 pair sums in 64-float chunks, its own order, and is not held to this. */
static void test_rows_kernels(void)
{
    static const char *paths[] = { "portable", "avx2" };
    static const int64_t ns[] = { 8, 40, 64, 128, 100 };
    static float q[128], rows[7][128], acc[128], acc2[128];
    for (size_t p = 0; p < 2; p++) {
        if (srt_cpu_force_simd(paths[p]) != SRT_OK)
            continue;
        int bad = 0;
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            int64_t n = ns[ni];
            const float *rp[7];
            float pr[7], out[7];
            for (int64_t i = 0; i < n; i++) {
                q[i] = frand(-2, 2);
                acc[i] = acc2[i] = frand(-1, 1);
            }
            for (int j = 0; j < 7; j++) {
                for (int64_t i = 0; i < n; i++)
                    rows[j][i] = frand(-3, 3);
                rp[j] = rows[j];
                pr[j] = frand(0, 1);
            }
            srt_cpu_dot_rows()(q, rp, 7, n, out);
            srt_cpu_axpy_rows()(acc, pr, rp, 7, n);
            for (int j = 0; j < 7; j++) {
                float want = srt_cpu_dot_f32()(q, rows[j], n);
                bad += memcmp(&want, &out[j], sizeof want) != 0;
                srt_cpu_axpy_f32()(acc2, pr[j], rows[j], n);
            }
            bad += memcmp(acc, acc2, (size_t)n * sizeof(float)) != 0;
        }
        is_int(bad, 0, "%s: dot/axpy over f32 rows == dot/axpy row by row, bit for bit", paths[p]);
    }
    srt_cpu_force_simd("portable");   /* as main left it */
}

int main(void)
{
    test_dtype_table();
    test_half_conversions();
    test_block_decoders();
    srt_threadpool *tp = srt_threadpool_create(3);
    const srt_dtype all[] = { SRT_F32,  SRT_F16,  SRT_BF16, SRT_Q8_0, SRT_Q4_0, SRT_Q4_1,
                              SRT_Q5_0, SRT_Q5_1, SRT_Q4_K, SRT_Q5_K, SRT_Q6_K, SRT_Q2_K,
                              SRT_Q3_K, SRT_IQ4_NL, SRT_IQ4_XS };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        test_matmul_dtype(all[i], tp);
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        test_matmul_batch_invariance(all[i], tp);
    test_attention_invariance(tp);
    test_matmul_tolerance_is_meaningful();
    test_matmul_multi(tp);
    ok(srt_cpu_force_simd("nonsense") == SRT_ERROR, "unknown SIMD path is refused");
    ok(srt_cpu_force_simd("portable") == SRT_OK && !strcmp(srt_cpu_simd_name(), "portable"),
       "portable path can be forced");
    test_threadpool();
    test_f16_heads();
    test_f16_blocks();
    test_rows_kernels();
    test_elementwise(tp);
    srt_threadpool_free(tp);
    return tap_done();
}
