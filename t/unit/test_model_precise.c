/* The precise matmul (f32 activations x weights as stored) against the scalar reference
 * srt_cpu_matmul_ref, for every weight type, on each SIMD path this CPU has: the fused
 * dequant-dot kernels (few tokens) and the dequantize-tile path (many tokens). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_exact.h"
#include "backend/cpu/cpu_kernels.h"
#include "srt/backend.h"
#include "tap.h"

static uint64_t rng = 7;
static uint32_t rnd(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}
static float frnd(void) { return (float)(rnd() % 20001) / 10000.0f - 1.0f; }

/* random but sane blocks: every f16 scale field small and finite */
static void fill(srt_dtype t, uint8_t *p, int64_t rows, int64_t cols)
{
    size_t bb = srt_dtype_block_bytes(t), nblk = (size_t)(rows * cols / srt_dtype_block_elems(t));
    for (size_t i = 0; i < nblk * bb; i++)
        p[i] = (uint8_t)rnd();
    for (size_t b = 0; b < nblk; b++) {
        uint8_t *blk = p + b * bb;
        uint16_t h1 = srt_f32_to_f16(0.01f + 0.02f * (float)(rnd() % 100) / 100.0f);
        uint16_t h2 = srt_f32_to_f16(-0.05f + 0.1f * (float)(rnd() % 100) / 100.0f);
        switch (t) {
        case SRT_Q8_0: case SRT_Q4_0: case SRT_Q5_0: memcpy(blk, &h1, 2); break;
        case SRT_Q4_1: case SRT_Q5_1: memcpy(blk, &h1, 2); memcpy(blk + 2, &h2, 2); break;
        case SRT_Q4_K: case SRT_Q5_K: memcpy(blk, &h1, 2); memcpy(blk + 2, &h1, 2); break;
        case SRT_Q6_K: memcpy(blk + 208, &h1, 2); break;
        case SRT_Q2_K: memcpy(blk + 80, &h1, 2); memcpy(blk + 82, &h1, 2); break;
        case SRT_Q3_K: memcpy(blk + 108, &h1, 2); break;
        case SRT_IQ4_NL: case SRT_IQ4_XS: memcpy(blk, &h1, 2); break;
        case SRT_F32: for (size_t k = 0; k < bb; k += 4) { float f = frnd(); memcpy(blk + k, &f, 4); } break;
        case SRT_F16: { uint16_t h = srt_f32_to_f16(frnd()); memcpy(blk, &h, 2); } break;
        case SRT_BF16: { uint16_t h = srt_f32_to_bf16(frnd()); memcpy(blk, &h, 2); } break;
        default: break;
        }
    }
}

/* Q4_1, Q8_0, Q5_0, Q5_1 and the K-quants packed by the backend for its exact kernels (ops->pack) give
 * the bits of the GGUF rows they came from: decode (1 and 2 tokens), prefill, with and without
 * a bias, in matmul_n next to unpacked weights, for x near the bottom of the float range, and
 * as an embedding table (a tied embedding is packed with its lm_head). Only shapes they take
 * are packed, and only when the exact kernels are the ones that run. */
static void packed(void)
{
    static const char *paths[] = { "portable", "avx2", "avx512" };
    static const srt_dtype types[] = { SRT_Q4_1, SRT_Q4_0, SRT_Q8_0, SRT_Q5_0, SRT_Q5_1,   SRT_Q4_K,   SRT_Q6_K,
                                       SRT_Q5_K, SRT_Q2_K, SRT_Q3_K, SRT_IQ4_NL, SRT_IQ4_XS };
    /* (K-quants take the shapes whose columns are whole super-blocks of 256) */
    static const int64_t shapes[][2] = { { 8, 64 }, { 200, 576 }, { 64, 1536 }, { 16, 96 }, { 37, 512 } };
    static const int64_t ntoks[] = { 1, 2, 3, 8, 19 };
    enum { MT = 19, MC = 1536, MR = 200 };
    /* y0, y1: MT tokens x MR rows, or three embedding rows of MC */
    float *x = malloc(MT * MC * sizeof(float)), *y0 = malloc(MT * MC * sizeof(float));
    float *y1 = malloc(MT * MC * sizeof(float)), *bias = malloc(MR * sizeof(float));
    for (int i = 0; i < MR; i++)
        bias[i] = frnd();
    for (size_t p = 0; p < 3; p++) {
        if (srt_cpu_force_simd(paths[p]) != SRT_OK)
            continue;
        srt_err err;
        srt_backend *be = srt_cpu_backend_create(2, 1, &err), *fast = srt_cpu_backend_create(2, 0, &err);
        srt_weight q41 = { .dtype = SRT_Q4_1, .rows = 8, .cols = 64, .row_stride = srt_dtype_row_bytes(SRT_Q4_1, 64) };
        srt_weight odd = q41, narrow = q41, q8 = q41, q8odd, q5, q5odd, f32 = q41;
        odd.rows = 12;
        narrow.cols = 32;
        q8.dtype = SRT_Q8_0;
        q8.cols = 32;
        q8.row_stride = srt_dtype_row_bytes(SRT_Q8_0, 32);
        q8odd = q8;
        q8odd.rows = 12;
        q5 = q8;
        q5.dtype = SRT_Q5_0;
        q5.row_stride = srt_dtype_row_bytes(SRT_Q5_0, 32);
        q5odd = q5;
        q5odd.rows = 12;
        f32.dtype = SRT_F32;
        int exact = strcmp(paths[p], "portable") != 0, wide = !strcmp(paths[p], "avx512");
        /* Q4_1 in groups of 16 rows, the last one padded */
        ok(be->ops->pack_bytes && (be->ops->pack_bytes(be, &q41) == 16 * q41.row_stride) == exact &&
               (be->ops->pack_bytes(be, &q8) == (wide ? 16 : 8) * q8.row_stride) == exact &&
               (be->ops->pack_bytes(be, &odd) == 16 * odd.row_stride) == exact &&
               (be->ops->pack_bytes(be, &narrow) == 16 * srt_dtype_row_bytes(SRT_Q4_1, 32)) == exact &&
               be->ops->pack_bytes(be, &q8odd) == (wide ? 16 * q8odd.row_stride : 0) &&
               (be->ops->pack_bytes(be, &q5) == (wide ? 16 * q5.row_stride : 8 * q8.row_stride)) == exact &&
               be->ops->pack_bytes(be, &q5odd) == (wide ? 16 * q5.row_stride : 0) &&
               be->ops->pack_bytes(be, &f32) == 0 &&
               fast->ops->pack_bytes(fast, &q41) == (wide ? 16 * q41.row_stride : 0) &&
               fast->ops->pack_bytes(fast, &q8odd) == (wide ? 16 * q8odd.row_stride : 0) &&
               fast->ops->pack_bytes(fast, &f32) == 0,
           "%s: Q4_1, Q8_0 and Q5_0 are packed only for the kernels of exact_q41.c and exact.c (Q4_1, and Q8_0 "
           "and Q5_0 on AVX-512: any rows, in 16-row groups; on AVX2 Q8_0 and Q5_0 as Q8_0: 8-row multiples; "
           "fast: on AVX-512 as exact's, else none)", paths[p]);
        if (!exact) {
            srt_backend_free(be);
            srt_backend_free(fast);
            continue;
        }
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            srt_dtype t = types[ti];
            int bad = 0, calls = 0, rows_bad = 0;
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                int64_t R = shapes[si][0], C = shapes[si][1];
                if (C % srt_dtype_block_elems(t))
                    continue;
                srt_weight w = { .dtype = t, .rows = R, .cols = C, .row_stride = srt_dtype_row_bytes(t, C) };
                if (be->ops->pack_bytes(be, &w) == 0)   /* not packed on this level (Q4_K on AVX2) */
                    continue;
                uint8_t *data = malloc(w.row_stride * (size_t)R), *pk = malloc(be->ops->pack_bytes(be, &w));
                fill(t, data, R, C);
                w.data = data;
                srt_weight pw;
                be->ops->pack(be, &w, pk, &pw);
                be->ops->reserve_matmul(be, &w, MT, &err);
                for (int tiny = 0; tiny < 2; tiny++) {
                    /* magnitudes from 1 down to 2^-40; tiny: all near 2^-118 (the outputs are as
                     * small, so any lost bits show) */
                    for (int64_t i = 0; i < MT * C; i++)
                        x[i] = ldexpf(frnd(), tiny ? -118 : -(int)(rnd() % 41));
                    for (size_t k = 0; k < sizeof ntoks / sizeof ntoks[0]; k++) {
                        int64_t n = ntoks[k];
                        const float *b = k & 1 ? bias : NULL;
                        be->ops->matmul(be, &w, b, x, n, y0);
                        be->ops->matmul(be, &pw, b, x, n, y1);
                        if (memcmp(y0, y1, sizeof(float) * (size_t)(n * R))) {
                            tap_diag("%s: packed %s %lldx%lld, %lld tokens%s differ", paths[p], srt_dtype_name(t),
                                     (long long)R, (long long)C, (long long)n, tiny ? " (tiny x)" : "");
                            bad++;
                        }
                        calls++;
                    }
                }
                /* beside unpacked weights in one region: the type as it is, packed, Q4_0 */
                if (C == 576) {
                    srt_weight w4 = { .dtype = SRT_Q4_0, .rows = 24, .cols = C, .row_stride = srt_dtype_row_bytes(SRT_Q4_0, C) };
                    uint8_t *d4 = malloc(w4.row_stride * 24);
                    fill(SRT_Q4_0, d4, 24, C);
                    w4.data = d4;
                    const srt_weight *ws[3] = { &w, &pw, &w4 };
                    const float *bs[3] = { bias, NULL, bias };
                    float *ys[3] = { malloc(MT * MR * sizeof(float)), malloc(MT * MR * sizeof(float)), malloc(MT * 24 * sizeof(float)) };
                    for (size_t k = 0; k < sizeof ntoks / sizeof ntoks[0]; k++) {
                        int64_t n = ntoks[k];
                        be->ops->matmul_n(be, 3, ws, bs, x, n, ys);
                        be->ops->matmul(be, &w, NULL, x, n, y0);
                        bad += memcmp(ys[1], y0, sizeof(float) * (size_t)(n * R)) != 0;
                        be->ops->matmul(be, &w, bias, x, n, y0);
                        bad += memcmp(ys[0], y0, sizeof(float) * (size_t)(n * R)) != 0;
                        be->ops->matmul(be, &w4, bias, x, n, y0);
                        bad += memcmp(ys[2], y0, sizeof(float) * (size_t)(n * 24)) != 0;
                        calls += 3;
                    }
                    for (int k = 0; k < 3; k++)
                        free(ys[k]);
                    free(d4);
                }
                /* as an embedding table: every row the same floats */
                int32_t ids[3] = { 0, (int32_t)(R / 2 + 3), (int32_t)(R - 1) };
                be->ops->embed(be, &w, ids, 3, y0);
                be->ops->embed(be, &pw, ids, 3, y1);
                rows_bad += memcmp(y0, y1, sizeof(float) * 3 * (size_t)C) != 0;
                free(data);
                free(pk);
            }
            if (calls == 0)
                continue;
            ok(bad == 0 && rows_bad == 0, "%s: packed %s = its GGUF rows, bit for bit (%d of %d calls differ, %d embeddings)",
               paths[p], srt_dtype_name(t), bad, calls, rows_bad);
        }
        srt_backend_free(be);
        srt_backend_free(fast);
    }
    free(x);
    free(y0);
    free(y1);
    free(bias);
}

/* A weight packed at load on the AVX-512 level (its whole groups by the 16-lane packers) has
 * the bytes the AVX2 level's scalar packers give, for the types packed on both */
static void pack_levels(void)
{
    static const srt_dtype types[] = { SRT_Q4_0, SRT_Q4_1, SRT_Q2_K, SRT_Q3_K, SRT_IQ4_NL, SRT_IQ4_XS };
    if (srt_cpu_force_simd("avx512") != SRT_OK || srt_cpu_force_simd("avx2") != SRT_OK) {
        tap_diag("no AVX-512 on this CPU: the packers are not compared here");
        return;
    }
    srt_err err;
    srt_backend *be = srt_cpu_backend_create(1, 1, &err);
    int bad = 0, n = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int64_t R = 16; R <= 53; R += 37) {   /* one whole group; three and a partial one */
            int64_t C = 512;
            srt_weight w = { .dtype = types[ti], .rows = R, .cols = C, .row_stride = srt_dtype_row_bytes(types[ti], C) };
            uint8_t *data = malloc(w.row_stride * (size_t)R);
            fill(w.dtype, data, R, C);
            w.data = data;
            srt_cpu_force_simd("avx2");
            size_t pb = be->ops->pack_bytes(be, &w);
            uint8_t *a = malloc(pb), *b = malloc(pb);
            srt_weight pa, pw;
            be->ops->pack(be, &w, a, &pa);
            srt_cpu_force_simd("avx512");
            bad += be->ops->pack_bytes(be, &w) != pb;
            be->ops->pack(be, &w, b, &pw);
            bad += memcmp(a, b, pb) != 0;
            n++;
            free(a);
            free(b);
            free(data);
        }
    ok(n == 12 && bad == 0, "packed at load on AVX-512 = on AVX2, byte for byte (%d of %d weights differ)", bad, n);
    srt_backend_free(be);
}

/* The 16-lane exact kernels (exact_avx512.c: two rows or two tokens per register; exact_q41.c:
 * 16 rows, VNNI) run only where AVX-512 is the chosen level, and give the 8-lane kernels' bits:
 * on an AVX-512 CPU every prefill below (odd row counts: a row left over from the pairs, a
 * partial group of 16; 530 tokens: two runs of the paired x, and of Q4_1's prepared x) and
 * every decode and prefill of the packed weights is compared, bit for bit, with the same
 * matmul under SRT_CPU_SIMD=avx2. */
static void avx512_kernels(void)
{
    static const srt_dtype types[] = { SRT_Q4_0, SRT_Q4_1, SRT_Q8_0, SRT_Q5_0, SRT_Q5_1,   SRT_Q4_K,   SRT_Q6_K,
                                       SRT_Q5_K, SRT_Q2_K, SRT_Q3_K, SRT_IQ4_NL, SRT_IQ4_XS };
    static const int64_t shapes[][2] = { { 37, 512 }, { 64, 768 }, { 45, 1536 } };
    static const int64_t ntoks[] = { 3, 8, 19, 130, 530 };   /* 530: two runs of pair_x (512 + 18) */
    enum { MT = 530, MC = 1536, MR = 64 };
    if (srt_cpu_force_simd("avx2") == SRT_OK)
        ok(srt_cpu_exact_avx512() == 0, "avx2 chosen: the exact path does not run the 16-lane kernels");
    if (srt_cpu_force_simd("avx512") != SRT_OK) {
        tap_diag("no AVX-512 on this CPU: the 16-lane exact kernels are not compared here");
        return;
    }
    ok(srt_cpu_exact_avx512() == 1, "avx512 chosen: the 16-lane kernels passed their check and run");
    srt_err err;
    srt_backend *be = srt_cpu_backend_create(2, 1, &err);
    float *x = malloc(MT * MC * sizeof(float)), *y0 = malloc(MT * MR * sizeof(float));
    float *y1 = malloc(MT * MR * sizeof(float)), *bias = malloc(MR * sizeof(float));
    for (int64_t i = 0; i < MT * MC; i++)
        x[i] = ldexpf(frnd(), -(int)(rnd() % 20));
    for (int i = 0; i < MR; i++)
        bias[i] = frnd();
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int bad = 0, calls = 0;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            int64_t R = shapes[si][0], C = shapes[si][1];
            srt_weight w = { .dtype = types[ti], .rows = R, .cols = C, .row_stride = srt_dtype_row_bytes(types[ti], C) };
            uint8_t *data = malloc(w.row_stride * (size_t)R);
            fill(w.dtype, data, R, C);
            w.data = data;
            be->ops->reserve_matmul(be, &w, MT, &err);
            /* Q8_0, Q5_0, Q5_1 and Q4/5/6_K in the GGUF layout: f32 kernels on AVX2, integer ones
             * on AVX-512 (their bits differ by design; each level's own contract is tested);
             * their packed copies below run the integer kernels on both */
            int by_level = w.dtype == SRT_Q8_0 || w.dtype == SRT_Q5_0 || w.dtype == SRT_Q5_1 || w.dtype == SRT_Q4_K ||
                           w.dtype == SRT_Q6_K || w.dtype == SRT_Q5_K;
            for (size_t k = 0; k < sizeof ntoks / sizeof ntoks[0] && !by_level; k++) {
                int64_t n = ntoks[k];
                srt_cpu_force_simd("avx2");
                be->ops->matmul(be, &w, k & 1 ? bias : NULL, x, n, y0);
                srt_cpu_force_simd("avx512");
                be->ops->matmul(be, &w, k & 1 ? bias : NULL, x, n, y1);
                bad += memcmp(y0, y1, sizeof(float) * (size_t)(n * R)) != 0;
                calls++;
            }
            size_t pb = be->ops->pack_bytes(be, &w);
            if (pb) {
                uint8_t *pk = malloc(pb);
                srt_weight pw;
                be->ops->pack(be, &w, pk, &pw);
                /* decode, then prefill of packed rows */
                static const int64_t pn[] = { 1, 2, 3, 9, 16, 19, 530 };
                for (size_t i = 0; i < sizeof pn / sizeof pn[0]; i++) {
                    int64_t n = pn[i];
                    srt_cpu_force_simd("avx2");
                    be->ops->matmul(be, &pw, bias, x, n, y0);
                    srt_cpu_force_simd("avx512");
                    be->ops->matmul(be, &pw, bias, x, n, y1);
                    bad += memcmp(y0, y1, sizeof(float) * (size_t)(n * R)) != 0;
                    calls++;
                }
                free(pk);
            }
            free(data);
        }
        ok(bad == 0, "exact %s, prefill and packed decode: 16 lanes = 8 lanes, bit for bit (%d of %d calls differ)",
           srt_dtype_name(types[ti]), bad, calls);
    }
    srt_backend_free(be);
    free(x);
    free(y0);
    free(y1);
    free(bias);
}

/* ---- Q4_1, Q4_0 and Q8_0: exact_q41.c's contract, written out in scalar C ---- */

/* the f32 block sum: lanes l of (x[0:8] + x[8:16]) + (x[16:24] + x[24:32]), then
 * srt_hsum8's pairs */
static float ref_block_sum(const float *x)
{
    float s[8];
    for (int l = 0; l < 8; l++)
        s[l] = (x[l] + x[8 + l]) + (x[16 + l] + x[24 + l]);
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

/* Q4_K's block j (0..7) of a super-block at k as a Q4_1 block: 16 bytes of nibbles (element i
 * low, 16 + i high), its scale d * sc and offset -(dmin * mn). Q5_K (qh non-NULL): qh[32]
 * before qs, and *qh the block's fifth bits, bit l for element l. */
static void q4k_block(const uint8_t *k, int j, uint8_t *nib, float *d, float *m, uint32_t *qh)
{
    const uint8_t *s = k + 4, *qs = k + (qh ? 48 : 16) + 32 * (j / 2);
    if (qh) {
        *qh = 0;
        for (int l = 0; l < 32; l++)
            *qh |= (uint32_t)(k[16 + l] >> j & 1) << l;
    }
    int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
    int mn = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    for (int i = 0; i < 16; i++)
        nib[i] = (uint8_t)((qs[i] >> 4 * (j % 2) & 15) | (qs[16 + i] >> 4 * (j % 2) & 15) << 4);
    *d = srt_f16_to_f32((uint16_t)(k[0] | k[1] << 8)) * (float)sc;
    *m = -(srt_f16_to_f32((uint16_t)(k[2] | k[3] << 8)) * (float)mn);
}

/* Q6_K's q - 32 (-32..31) of element e of a super-block at k: ql's four bits and qh's two */
static int q6k_value(const uint8_t *k, int e)
{
    int h = e / 128, kk = e % 128 / 32, l = e % 32;
    int lo = k[64 * h + 32 * (kk % 2) + l] >> 4 * (kk / 2) & 15, hi = k[128 + 32 * h + l] >> 2 * kk & 3;
    return (lo | hi << 4) - 32;
}

/* GGML's IQ4_NL levels, written out again (cpu_internal.h's IQ4_VALUES) */
static const int8_t IQ4[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

/* Q2_K's and Q3_K's (q - 4) value of element e of a super-block at k, and their per-16 scales:
 * Q2_K's scale byte t's nibbles; Q3_K's 6 bits less 32 */
static int q2k_value(const uint8_t *k, int e) { return k[16 + 32 * (e / 128) + e % 32] >> 2 * (e / 32 % 4) & 3; }
static int q3k_value(const uint8_t *k, int e)
{
    return ((k[32 + 32 * (e / 128) + e % 32] >> 2 * (e / 32 % 4) & 3) | (k[e % 32] >> e / 32 & 1) << 2) - 4;
}
static int q3k_sc(const uint8_t *k, int t)
{
    const uint8_t *s = k + 96;
    return ((s[t % 8] >> 4 * (t / 8) & 15) | (s[8 + t % 4] >> 2 * (t / 4) & 3) << 4) - 32;
}

/* y[t][r] of a GGUF-layout Q4_1, Q4_0, Q8_0, Q5_0, Q4_K or Q6_K weight as the header of
 * exact_q41.c defines it (Q5_0: Q8_0's with the bytes q - 16; Q4_K: Q4_1's with the scale
 * d * sc and the offset -(dmin * mn) in f32; Q6_K: each half of 16 its own sums and scale d * sc,
 * the first half's product added first) */
static void ref_q41(const srt_weight *w, const float *bias, const float *x, int64_t n_tok, float *y, int fast)
{
    int64_t nb = w->cols / 32;
    int q40 = w->dtype == SRT_Q4_0, q50 = w->dtype == SRT_Q5_0, q80 = w->dtype == SRT_Q8_0 || q50;
    int q51 = w->dtype == SRT_Q5_1;
    int q5k = w->dtype == SRT_Q5_K, q4k = w->dtype == SRT_Q4_K || q5k, q6k = w->dtype == SRT_Q6_K;
    int q2k = w->dtype == SRT_Q2_K, q3k = w->dtype == SRT_Q3_K, nl = w->dtype == SRT_IQ4_NL, xs4 = w->dtype == SRT_IQ4_XS;
    size_t bbytes = q51 ? 24 : q50 ? 22 : q80 ? 34 : q40 || nl ? 18 : 20, qs = q51 ? 8 : q50 ? 6 : q40 || q80 || nl ? 2 : 4;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < w->rows; r++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_stride;
            float acc = 0.0f, off = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const float *xb = x + t * w->cols + 32 * b;
                const uint8_t *blk = row + bbytes * b;
                uint8_t kb[20];   /* Q4_K: the block as Q4_1's bytes, its d and m apart */
                float kd = 0.0f, km = 0.0f;
                uint32_t fifth = 0;   /* Q5_K, Q5_1: bit l, element l's fifth bit */
                if (q4k) {
                    q4k_block(row + (q5k ? 176 : 144) * (b / 8), (int)(b % 8), kb + 4, &kd, &km, q5k ? &fifth : NULL);
                    blk = kb;
                }
                if (q51)   /* Q5_1's qh after d and m */
                    fifth = (uint32_t)blk[4] | (uint32_t)blk[5] << 8 | (uint32_t)blk[6] << 16 | (uint32_t)blk[7] << 24;
                float xs = ref_block_sum(xb), top = 0.0f, sc;
                for (int j = 0; j < 32; j++)
                    top = fabsf(xb[j]) > top ? fabsf(xb[j]) : top;
                int32_t D[3][32] = { { 0 } };
                if (!isfinite(xs) || top == 0.0f)
                    sc = top == 0.0f && isfinite(xs) ? 0.0f : NAN;
                else if (fast) {   /* srt_numerics fast: X = rint(x * 127 / top) as D0, xs its sum times sc */
                    float f = top < 0x1p-100f ? 0x1p100f : 1.0f, id = 127.0f / (top * f);
                    int32_t sum = 0;
                    sc = top / 127.0f;
                    for (int j = 0; j < 32; j++)
                        sum += D[0][j] = (int32_t)rintf(xb[j] * f * id);
                    xs = sc * (float)sum;
                } else {
                    int e;
                    frexpf(top, &e);
                    int k = 23 - e;
                    if (rintf(ldexpf(top, k)) > 8355711.0f)
                        k--;
                    sc = ldexpf(1.0f, -k);
                    for (int j = 0; j < 32; j++) {
                        int32_t X = (int32_t)rintf(xb[j] * ldexpf(1.0f, k / 2) * ldexpf(1.0f, k - k / 2));
                        D[0][j] = (int8_t)(X & 0xff);
                        int32_t rest = (X - D[0][j]) / 256;
                        D[1][j] = (int8_t)(rest & 0xff);
                        D[2][j] = (rest - D[1][j]) / 256;
                    }
                }
                if (q2k || q3k) {   /* halves as Q6_K's; Q2_K: then each half's min times its sum of X */
                    const uint8_t *k = row + (q2k ? 84 : 110) * (b / 8);
                    float dk = srt_f16_to_f32((uint16_t)(k[q2k ? 80 : 108] | k[q2k ? 81 : 109] << 8));
                    float dm = q2k ? srt_f16_to_f32((uint16_t)(k[82] | k[83] << 8)) : 0.0f, mins[2];
                    int32_t sx[2] = { 0, 0 };
                    for (int hh = 0; hh < 2; hh++) {
                        int32_t S[3] = { 0, 0, 0 }, e0 = (int)(32 * (b % 8)) + 16 * hh, t16 = e0 / 16;
                        for (int j = 16 * hh; j < 16 * hh + 16; j++) {
                            int e = (int)(32 * (b % 8)) + j, q = q2k ? q2k_value(k, e) : q3k_value(k, e);
                            for (int i = 0; i < 3; i++)
                                S[i] += q * D[i][j];
                            sx[hh] += D[0][j] + 256 * D[1][j] + 65536 * D[2][j];
                        }
                        float scale = q2k ? (float)(k[t16] & 15) : (float)q3k_sc(k, t16);
                        mins[hh] = dm * (float)(k[t16] >> 4);
                        float v = fmaf((float)S[2], 65536.0f, (float)(S[1] * 256 + S[0]));
                        acc = fmaf(v, (dk * scale) * sc, acc);
                    }
                    for (int hh = 0; q2k && hh < 2; hh++)
                        off = fmaf(-mins[hh], (float)sx[hh] * sc, off);
                    continue;
                }
                if (xs4) {   /* IQ4_XS: Q8_0's with the levels, d * (scale - 32) per block */
                    const uint8_t *k = row + 136 * (b / 8), *qb = k + 8 + 16 * (b % 8);
                    int j8 = (int)(b % 8), ls = (k[4 + j8 / 2] >> 4 * (j8 % 2) & 15) | ((k[2] | k[3] << 8) >> 2 * j8 & 3) << 4;
                    int32_t S[3] = { 0, 0, 0 };
                    for (int j = 0; j < 32; j++)
                        for (int i = 0; i < 3; i++)
                            S[i] += IQ4[j < 16 ? qb[j] & 15 : qb[j - 16] >> 4] * D[i][j];
                    float v = fmaf((float)S[2], 65536.0f, (float)(S[1] * 256 + S[0]));
                    acc = fmaf(v, (srt_f16_to_f32((uint16_t)(k[0] | k[1] << 8)) * (float)(ls - 32)) * sc, acc);
                    continue;
                }
                if (q6k) {
                    const uint8_t *k = row + 210 * (b / 8);
                    float d6 = srt_f16_to_f32((uint16_t)(k[208] | k[209] << 8));
                    for (int hh = 0; hh < 2; hh++) {
                        int32_t S[3] = { 0, 0, 0 };
                        for (int j = 16 * hh; j < 16 * hh + 16; j++)
                            for (int i = 0; i < 3; i++)
                                S[i] += q6k_value(k, (int)(32 * (b % 8)) + j) * D[i][j];
                        float v = fmaf((float)S[2], 65536.0f, (float)(S[1] * 256 + S[0]));
                        acc = fmaf(v, (d6 * (float)(int8_t)k[192 + 2 * (b % 8) + hh]) * sc, acc);
                    }
                    continue;
                }
                int32_t S[3] = { 0, 0, 0 };
                for (int j = 0; j < 32; j++) {
                    int nib = j < 16 ? blk[qs + j] & 15 : blk[qs + j - 16] >> 4;
                    int q = q50 ? (nib | (blk[2 + j / 8] >> (j % 8) & 1) << 4) - 16 : q80 ? (int8_t)blk[qs + j]
                          : nl ? IQ4[nib] : nib | (int)(fifth >> j & 1) << 4;
                    for (int i = 0; i < 3; i++)
                        S[i] += q * D[i][j];
                }
                float d = q4k ? kd : srt_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
                float m = q4k ? km : q40 ? -8.0f * d : q80 || nl ? 0.0f : srt_f16_to_f32((uint16_t)(blk[2] | blk[3] << 8));
                float v = fmaf((float)S[2], 65536.0f, (float)(S[1] * 256 + S[0]));
                acc = fmaf(v, d * sc, acc);
                if (!q80 && !nl)
                    off = fmaf(m, xs, off);
            }
            y[t * w->rows + r] = (acc + off) + (bias ? bias[r] : 0.0f);
        }
}

/* The Q4_1, Q4_0 and Q8_0 kernels (8 and 16 lanes, packed and not, decode and prefill tiles) give the bits
 * of the scalar contract, on x of wide magnitudes and on the edge blocks: all zeros, one
 * value, tops that round past 0x7F7F7F and at its edge (ties to even), subnormals,
 * values near FLT_MAX, the bounds of the 16-lane kernel's integer scaling, and an inf and a
 * NaN (their tokens' outputs NaN, the other tokens' untouched). */
static void q41_contract(srt_dtype type, int fast)
{
    static const char *paths[] = { "avx2", "avx512" };
    enum { R = 37, C = 256, T = 9 };
    float *x = malloc(T * C * sizeof(float)), y[T * R], ref[T * R], bias[R];
    srt_weight w = { .dtype = type, .rows = R, .cols = C, .row_stride = srt_dtype_row_bytes(type, C) };
    uint8_t *data = malloc(w.row_stride * R);
    fill(type, data, R, C);
    if (type == SRT_Q4_0 || type == SRT_Q4_1)   /* rows 0-3 all q = 15: the largest Q4 sums */
        for (int64_t b = 0; b < 4 * C / 32; b++)
            memset(data + b * srt_dtype_block_bytes(type) + (type == SRT_Q4_1 ? 4 : 2), 0xFF, 16);
    w.data = data;
    for (int i = 0; i < R; i++)
        bias[i] = frnd();
    for (int64_t i = 0; i < T * C; i++)
        x[i] = ldexpf(frnd(), -(int)(rnd() % 30));
    memset(x + 0 * C + 32, 0, 32 * sizeof(float));            /* token 0, block 1: zeros */
    x[1 * C + 70] = 3.0f;                                     /* token 1, block 2: one value */
    for (int j = 0; j < 32; j++)
        x[1 * C + 64 + j] = j == 6 ? 3.0f : 0.0f;
    x[2 * C + 5] = 0.99999f;                                  /* token 2, block 0: a top that rounds up */
    for (int j = 0; j < 32; j++)
        x[3 * C + 96 + j] = ldexpf(frnd(), -140);             /* token 3, block 3: subnormals */
    for (int j = 0; j < 32; j++)
        x[4 * C + 128 + j] = ldexpf(frnd(), 120);             /* token 4, block 4: near FLT_MAX */
    x[7 * C + 40] = 16711423.0f / 16777216.0f;                /* token 7, block 1: top * 2^23 = 8355711.5 */
    x[8 * C + 40] = -16711421.0f / 16777216.0f;               /* token 8, block 1: 8355710.5, rounds down */
    /* the 16-lane kernel's integer scaling (scaled_q4, scaled16) and where it hands over to the
     * multiply: k = 0 and 100 take it, 101 does not; a Q4 block with sum |X| past
     * INT32_MAX / 15 does not (against rows of q = 15 its sum is past 2^31: 15 x 32 x
     * 6291456), one just under does (15 x 17 x 8304721 = 2117703855) */
    for (int j = 0; j < 32; j++) {
        x[0 * C + 192 + j] = j == 3 ? 6.0e6f : frnd() * 6.0e6f;               /* token 0, block 6: k = 0 */
        x[1 * C + 160 + j] = ldexpf(j == 9 ? 0.75f : frnd() * 0.75f, -77);  /* token 1, block 5: k = 100 */
        x[2 * C + 192 + j] = ldexpf(j == 1 ? 0.75f : frnd() * 0.75f, -78);  /* token 2, block 6: k = 101 */
        x[3 * C + 160 + j] = 0.75f;                                         /* token 3, block 5: 32 x 6291456 */
        x[4 * C + 192 + j] = j < 17 ? 0.99f : 0.0f;                         /* token 4, block 6: 17 x 8304721 */
        x[7 * C + 160 + j] = j < 18 ? 0.99f : 0.0f;                         /* token 7, block 5: 18 x 8304721 */
    }
    x[5 * C + 200] = INFINITY;                                /* token 5: an inf */
    x[6 * C + 17] = NAN;                                      /* token 6: a NaN */
    /* Q8_0, Q5_0, Q5_1 and Q4/5/6_K run this contract on the AVX-512 level only (srt_cpu_q41_takes) */
    size_t p0 = type == SRT_Q8_0 || type == SRT_Q5_0 || type == SRT_Q5_1 || type == SRT_Q4_K || type == SRT_Q6_K ||
                type == SRT_Q5_K || fast;   /* fast: the one-digit kernels are 16-lane only */
    for (int pk = 0; pk < 2; pk++)
        for (size_t p = p0; p < 2; p++) {
            if (srt_cpu_force_simd(paths[p]) != SRT_OK)
                continue;
            srt_err err;
            srt_backend *be = srt_cpu_backend_create(2, !fast, &err);
            srt_weight pw = w;
            uint8_t *pd = NULL;
            if (pk) {
                pd = malloc(be->ops->pack_bytes(be, &w));
                be->ops->pack(be, &w, pd, &pw);
            }
            be->ops->reserve_matmul(be, &w, T, &err);
            int bad = 0, nan_ok = 1;
            for (int64_t n = 1; n <= T; n += 4 - (n == 1) * 2) {   /* 1, 3, 7, 9 tokens */
                for (int64_t t0 = 0; t0 + n <= T; t0 += n) {
                    be->ops->matmul(be, &pw, t0 & 1 ? bias : NULL, x + t0 * C, n, y);
                    ref_q41(&w, t0 & 1 ? bias : NULL, x + t0 * C, n, ref, fast);
                    for (int64_t i = 0; i < n * R; i++) {
                        int64_t t = t0 + i / R;
                        if (t == 5 || t == 6)
                            nan_ok &= isnan(y[i]) != 0;
                        else
                            bad += memcmp(&y[i], &ref[i], sizeof(float)) != 0;
                    }
                }
            }
            /* every block of token 8 at 2^-125 of its size, no bias: exact's 2^-k is 0 in f32 for
             * some blocks whose digits are not (the 16-lane kernel took that 0 for a block of
             * zeros and scaled by 2^-127); fast's 127 / top would pass FLT_MAX (its x is scaled
             * by 2^100 first), while its products d * top / 127 stay nonzero */
            float tiny[C];
            for (int i = 0; i < C; i++)
                tiny[i] = ldexpf(x[8 * C + i], -125);
            be->ops->matmul(be, &pw, NULL, tiny, 1, y);
            ref_q41(&w, NULL, tiny, 1, ref, fast);
            bad += memcmp(y, ref, R * sizeof(float)) != 0;
            ok(bad == 0 && nan_ok, "%s%s%s %s: outputs = the scalar contract, bit for bit, edge blocks too "
               "(%d differ; inf/NaN tokens NaN: %s)", paths[p], pk ? " packed" : "", fast ? " fast" : "",
               srt_dtype_name(type), bad, nan_ok ? "yes" : "no");
            free(pd);
            srt_backend_free(be);
        }
    free(x);
    free(data);

    /* the smallest shapes: one row, one block; one whole group; a group and a row (Q4_K: blocks
     * of 256) */
    static const int64_t small[][2] = { { 1, 32 }, { 16, 32 }, { 17, 64 } };
    int64_t kq = srt_dtype_block_elems(type) / 32;
    for (size_t p = p0; p < 2; p++) {
        if (srt_cpu_force_simd(paths[p]) != SRT_OK)
            continue;
        srt_err err;
        srt_backend *be = srt_cpu_backend_create(3, !fast, &err);
        int bad = 0;
        for (size_t si = 0; si < sizeof small / sizeof small[0]; si++) {
            int64_t sr = small[si][0], sc = small[si][1] * kq;
            srt_weight sw = { .dtype = type, .rows = sr, .cols = sc, .row_stride = srt_dtype_row_bytes(type, sc) };
            uint8_t *sd = malloc(sw.row_stride * (size_t)sr), *pd = malloc(be->ops->pack_bytes(be, &sw));
            fill(type, sd, sr, sc);
            sw.data = sd;
            srt_weight pw;
            be->ops->pack(be, &sw, pd, &pw);
            be->ops->reserve_matmul(be, &sw, 5, &err);
            float sx[5 * 512], sy[5 * 17], sref[5 * 17];
            for (int i = 0; i < 5 * 512; i++)
                sx[i] = frnd();
            for (int64_t n = 1; n <= 5; n++) {
                ref_q41(&sw, NULL, sx, n, sref, fast);
                be->ops->matmul(be, &sw, NULL, sx, n, sy);
                bad += memcmp(sy, sref, sizeof(float) * (size_t)(n * sr)) != 0;
                be->ops->matmul(be, &pw, NULL, sx, n, sy);
                bad += memcmp(sy, sref, sizeof(float) * (size_t)(n * sr)) != 0;
            }
            free(sd);
            free(pd);
        }
        ok(bad == 0, "%s%s %s, 1x%lld, 16x%lld and 17x%lld on 3 threads: the scalar contract, bit for bit (%d differ)",
           paths[p], fast ? " fast" : "", srt_dtype_name(type), (long long)(32 * kq), (long long)(32 * kq),
           (long long)(64 * kq), bad);
        srt_backend_free(be);
    }
}

int main(void)
{
    static const srt_dtype types[] = { SRT_Q8_0, SRT_Q4_0, SRT_Q4_1,   SRT_Q5_0,   SRT_Q5_1, SRT_Q4_K,
                                       SRT_Q6_K, SRT_Q5_K, SRT_Q2_K,   SRT_Q3_K,   SRT_IQ4_NL, SRT_IQ4_XS,
                                       SRT_F32,  SRT_F16,  SRT_BF16 };
    enum { N_QUANT = 12 };   /* the quantized types, first */
    static const char *paths[] = { "portable", "avx2", "avx512" };
    const int64_t rows = 48, cols = 512, ntoks[] = { 1, 3, 8, 19 };
    float *x = malloc(19 * cols * sizeof(float)), *y = malloc(19 * rows * sizeof(float));
    float *ref = malloc(19 * rows * sizeof(float)), bias[48];
    for (int64_t i = 0; i < 19 * cols; i++)
        x[i] = frnd();
    for (int i = 0; i < rows; i++)
        bias[i] = frnd();
    for (size_t p = 0; p < 3; p++) {
        if (srt_cpu_force_simd(paths[p]) != SRT_OK) {
            tap_diag("SIMD path %s not available on this CPU", paths[p]);
            continue;
        }
        srt_err err;
        srt_backend *be = srt_cpu_backend_create(2, 1, &err);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            srt_dtype t = types[ti];
            srt_weight w = { .dtype = t, .rows = rows, .cols = cols, .row_stride = srt_dtype_row_bytes(t, cols) };
            uint8_t *data = malloc(w.row_stride * rows);
            fill(t, data, rows, cols);
            w.data = data;
            be->ops->reserve_matmul(be, &w, 19, &err);
            double worst = 0, scale = 0;
            for (size_t k = 0; k < 4; k++) {
                int64_t n = ntoks[k];
                be->ops->matmul(be, &w, k & 1 ? bias : NULL, x, n, y);
                srt_cpu_matmul_ref(&w, k & 1 ? bias : NULL, x, n, ref);
                for (int64_t i = 0; i < n * rows; i++) {
                    double d = fabs((double)y[i] - ref[i]);
                    worst = d > worst || isnan(d) ? (isnan(d) ? INFINITY : d) : worst;
                    scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
                }
            }
            ok(worst <= 1e-5 * (scale > 1 ? scale : 1) * 16, "%s %s: precise matmul == reference (worst %.2g of max %.3g)",
               paths[p], srt_dtype_name(t), worst, scale);
            free(data);
        }
        srt_backend_free(be);
    }
    free(x);
    free(y);
    free(ref);

    /* Batch invariance: a token's outputs have the same bits alone, in a decode batch, or at
     * any place of a prefill batch (odd row count: partial row groups and chunks). */
    enum { BR = 37, BC = 512, BT = 61 };
    float *bx = malloc(BT * BC * sizeof(float)), *by = malloc(BT * BR * sizeof(float));
    float *one = malloc(BR * sizeof(float)), bb[BR];
    for (int64_t i = 0; i < BT * BC; i++)
        bx[i] = frnd();
    for (int i = 0; i < BR; i++)
        bb[i] = frnd();
    for (size_t p = 0; p < 3; p++) {
        if (srt_cpu_force_simd(paths[p]) != SRT_OK)
            continue;
        srt_err err;
        srt_backend *be = srt_cpu_backend_create(2, 1, &err);
        for (size_t ti = 0; ti < N_QUANT; ti++) {
            srt_dtype t = types[ti];
            srt_weight w = { .dtype = t, .rows = BR, .cols = BC, .row_stride = srt_dtype_row_bytes(t, BC) };
            uint8_t *data = malloc(w.row_stride * BR);
            fill(t, data, BR, BC);
            w.data = data;
            be->ops->reserve_matmul(be, &w, BT, &err);
            static const int64_t ns[] = { 2, 3, 5, 8, 9, 48, 49, 61 };
            int bad = 0;
            for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
                int64_t n = ns[k], off = BT - n;   /* the batch is the last n tokens */
                be->ops->matmul(be, &w, bb, bx + off * BC, n, by);
                for (int64_t tk = 0; tk < n; tk++) {
                    be->ops->matmul(be, &w, bb, bx + (off + tk) * BC, 1, one);
                    bad += memcmp(one, by + tk * BR, BR * sizeof(float)) != 0;
                }
            }
            ok(bad == 0, "%s %s: precise matmul is batch invariant (%d token rows differ)", paths[p],
               srt_dtype_name(t), bad);
            free(data);
        }
        srt_backend_free(be);
    }
    free(bx);
    free(by);
    free(one);

    /* matmul_n (q/k/v, gate/up in one region) = its weights' own matmul calls, bit for bit:
     * three weights of one input with row counts that leave partial items and row groups,
     * mixed types, with and without biases, decode and prefill token counts */
    enum { NC = 576, NT = 7 };
    static const int64_t nrows[3] = { 37, 8, 203 };
    static const srt_dtype nt3[3] = { SRT_Q4_1, SRT_Q8_0, SRT_Q4_0 };
    float *nx = malloc(NT * NC * sizeof(float)), *nb = malloc(203 * sizeof(float));
    for (int64_t i = 0; i < NT * NC; i++)
        nx[i] = frnd();
    for (int i = 0; i < 203; i++)
        nb[i] = frnd();
    for (size_t p = 0; p < 3; p++) {
        if (srt_cpu_force_simd(paths[p]) != SRT_OK)
            continue;
        srt_err err;
        srt_backend *be = srt_cpu_backend_create(2, 1, &err);
        srt_weight ws[3];
        const srt_weight *wp[3];
        float *yn[3], *ys[3];
        for (int k = 0; k < 3; k++) {
            ws[k] = (srt_weight){ .dtype = nt3[k], .rows = nrows[k], .cols = NC,
                                  .row_stride = srt_dtype_row_bytes(nt3[k], NC) };
            /* room for the widest of the types it is read as (Q8_0) */
            uint8_t *d = malloc(srt_dtype_row_bytes(SRT_Q8_0, NC) * (size_t)nrows[k]);
            fill(SRT_Q8_0, d, nrows[k], NC);
            fill(nt3[k], d, nrows[k], NC);
            ws[k].data = d;
            wp[k] = &ws[k];
            yn[k] = malloc(NT * (size_t)nrows[k] * sizeof(float));
            ys[k] = malloc(NT * (size_t)nrows[k] * sizeof(float));
            be->ops->reserve_matmul(be, &ws[k], NT, &err);
        }
        int bad = 0, calls = 0;
        for (int same = 0; same < 2; same++)        /* all Q4_1, then mixed types */
            for (int64_t n = 1; n <= NT; n += n < 2 ? 1 : 5) {
                const float *bias[3] = { nb, NULL, nb };
                for (int k = 0; k < 3 && same == 0; k++)
                    ws[k].dtype = SRT_Q4_1, ws[k].row_stride = srt_dtype_row_bytes(SRT_Q4_1, NC);
                for (int k = 0; k < 3 && same == 1; k++)
                    ws[k].dtype = nt3[k], ws[k].row_stride = srt_dtype_row_bytes(nt3[k], NC);
                memset(yn[0], 0xff, NT * 37 * sizeof(float));
                be->ops->matmul_n(be, 3, wp, bias, nx, n, yn);
                for (int k = 0; k < 3; k++) {
                    be->ops->matmul(be, &ws[k], bias[k], nx, n, ys[k]);
                    if (memcmp(yn[k], ys[k], (size_t)n * (size_t)nrows[k] * sizeof(float)) != 0) {
                        tap_diag("%s: weight %d (%s, %lld rows), %lld tokens differ", paths[p], k,
                                 srt_dtype_name(ws[k].dtype), (long long)nrows[k], (long long)n);
                        bad++;
                    }
                    calls++;
                }
            }
        ok(be->ops->matmul_n && bad == 0, "%s: matmul_n of 3 weights = their own matmuls, bit for bit (%d of %d differ)",
           paths[p], bad, calls);
        for (int k = 0; k < 3; k++) {
            free((void *)ws[k].data);
            free(yn[k]);
            free(ys[k]);
        }
        srt_backend_free(be);
    }
    free(nx);
    free(nb);

    /* The thread count does not change bits: prefill items take up to 64 rows (fewer for long
     * rows) and fewer when the threads' last round would leave one idle, so 1, 2 and 3 threads
     * cut a weight into different items (192 rows: one item of 64 rows at a time, 32, 64; 37
     * rows: partial groups; 4096 columns: items of 32 rows at most), and decode spreads its
     * row runs differently. And a token's row of a 130-token prefill is its one-token decode. */
    enum { TC = 4096, TT = 130, TR = 192 };
    static const int64_t trows[] = { TR, 37, 70 }, tcols[] = { 512, 512, TC }, tn[] = { 1, 2, 16, 130 };
    static const srt_dtype tty[] = { SRT_Q4_1, SRT_Q4_0, SRT_Q8_0, SRT_Q5_0,   SRT_Q5_1,  SRT_Q4_K,
                                     SRT_Q6_K, SRT_Q5_K, SRT_Q2_K, SRT_Q3_K, SRT_IQ4_NL, SRT_IQ4_XS };
    float *tx = malloc(TT * TC * sizeof(float)), *tb = malloc(TR * sizeof(float));
    float *ty[3] = { malloc(TT * TR * sizeof(float)), malloc(TT * TR * sizeof(float)), malloc(TT * TR * sizeof(float)) };
    float *t1 = malloc(TR * sizeof(float));
    for (int64_t i = 0; i < TT * TC; i++)
        tx[i] = frnd();
    for (int i = 0; i < TR; i++)
        tb[i] = frnd();
    for (size_t p = 1; p < 3; p++) {   /* the exact kernels: AVX2 and AVX-512 */
        if (srt_cpu_force_simd(paths[p]) != SRT_OK)
            continue;
        srt_err err;
        srt_backend *bes[3];
        for (int th = 0; th < 3; th++)
            bes[th] = srt_cpu_backend_create(th + 1, 1, &err);
        int bad = 0, calls = 0, tbad = 0;
        for (size_t ti = 0; ti < sizeof tty / sizeof tty[0]; ti++)
            for (size_t ri = 0; ri < 3; ri++) {
                int64_t C = tcols[ri];
                srt_weight w = { .dtype = tty[ti], .rows = trows[ri], .cols = C,
                                 .row_stride = srt_dtype_row_bytes(tty[ti], C) };
                uint8_t *d = malloc(w.row_stride * (size_t)w.rows);
                fill(tty[ti], d, w.rows, C);
                w.data = d;
                for (size_t k = 0; k < sizeof tn / sizeof tn[0]; k++) {
                    for (int th = 0; th < 3; th++) {
                        bes[th]->ops->reserve_matmul(bes[th], &w, tn[k], &err);
                        memset(ty[th], 0xff, (size_t)tn[k] * (size_t)w.rows * sizeof(float));
                        bes[th]->ops->matmul(bes[th], &w, tb, tx, tn[k], ty[th]);
                    }
                    size_t bytes = (size_t)tn[k] * (size_t)w.rows * sizeof(float);
                    if (memcmp(ty[0], ty[1], bytes) || memcmp(ty[0], ty[2], bytes)) {
                        tap_diag("%s %s, %lld rows, %lld tokens: the thread count changes bits", paths[p],
                                 srt_dtype_name(w.dtype), (long long)w.rows, (long long)tn[k]);
                        bad++;
                    }
                    calls++;
                }
                for (int64_t t = 0; t < TT; t += 43) {   /* ty[1] holds the 130-token prefill */
                    bes[1]->ops->matmul(bes[1], &w, tb, tx + t * C, 1, t1);
                    tbad += memcmp(t1, ty[1] + t * w.rows, (size_t)w.rows * sizeof(float)) != 0;
                }
                free(d);
            }
        ok(bad == 0, "%s: exact matmul on 1, 2 and 3 threads, bit for bit (%d of %d cases differ)", paths[p], bad,
           calls);
        ok(tbad == 0, "%s: exact prefill rows = one-token decodes, 512 and 4096 columns (%d differ)", paths[p], tbad);
        for (int th = 0; th < 3; th++)
            srt_backend_free(bes[th]);
    }
    free(tx);
    free(tb);
    free(t1);
    for (int th = 0; th < 3; th++)
        free(ty[th]);
    packed();
    pack_levels();
    avx512_kernels();
    q41_contract(SRT_Q4_1, 0);
    q41_contract(SRT_Q4_1, 1);
    q41_contract(SRT_Q4_0, 0);
    q41_contract(SRT_Q4_0, 1);
    q41_contract(SRT_Q8_0, 0);
    q41_contract(SRT_Q8_0, 1);
    q41_contract(SRT_Q5_0, 0);
    q41_contract(SRT_Q5_0, 1);
    q41_contract(SRT_Q4_K, 0);
    q41_contract(SRT_Q4_K, 1);
    q41_contract(SRT_Q6_K, 0);
    q41_contract(SRT_Q6_K, 1);
    q41_contract(SRT_Q5_K, 0);
    q41_contract(SRT_Q5_K, 1);
    q41_contract(SRT_Q5_1, 0);
    q41_contract(SRT_Q5_1, 1);
    q41_contract(SRT_Q2_K, 0);
    q41_contract(SRT_Q2_K, 1);
    q41_contract(SRT_Q3_K, 0);
    q41_contract(SRT_Q3_K, 1);
    q41_contract(SRT_IQ4_NL, 0);
    q41_contract(SRT_IQ4_NL, 1);
    q41_contract(SRT_IQ4_XS, 0);
    q41_contract(SRT_IQ4_XS, 1);
    return tap_done();
}
