/* The exact matmul: f32 activations times the weights HF computes with, accumulated in f32
 * (AVX2 + FMA, 8 lanes). Nothing is rounded to fewer bits: a quantized block's weights are
 * w = d*q + o (Q5_1: o = m; Q8_0 and Q5_0, whose q (q - 16)
 * are signed: o = 0; the K-quants' sub-blocks too, see unp_q4k / unp_q6k), and
 *     sum_j w_j x_j = d * sum_j q_j x_j + o * sum_j x_j
 * where q_j are small integers (exact as floats) and sum_j x_j, the block sum of x, is
 * computed once per token and shared by every row. Per block and (row, token) that is four
 * FMA-class ops on unpacked q and one FMA for the scale; the offset is one FMA per block
 * and (row, token), done in lanes over the rows.
 *
 * Batch invariance: a (row, token) output is always
 *     (srt_hsum8(acc) + off) + bias            (no offset: srt_hsum8(acc) + bias)
 * with acc one 8-lane accumulator taking, block by block in order,
 *     t = q[0:8]*x[0:8]; t += q[8:16]*x[8:16]; t += q[16:24]*x[16:24]; t += q[24:32]*x[24:32];
 *     acc += t * d          (each += one FMA)
 * and off = fma(o_b, xsum_b, off) block by block from 0. Decode (q unpacked in registers,
 * 4 or 8 rows x up to 2 tokens, the offsets of 4 or 8 rows in the lanes of one vector) and
 * prefill (a chunk of rows unpacked once into per-thread scratch, then one row x 8 tokens, or
 * on 16 lanes two rows x 4 pairs of tokens; the offsets of 8 or 16 rows in the lanes of one
 * vector) both run exactly that sequence, so a token's logits have the same bits alone, in
 * any batch, chunked or prefix-cached.
 *
 * The CPU runner's own copy of the weights holds Q8_0 (and Q5_0) matrices packed for decode
 * (SRT_Q8_0_X8: eight rows' blocks together, see below), which run the same sequence on the
 * same values; prefill unpacks them like any other row.
 *
 * Q4_1 and Q4_0, and Q8_0, Q5_0, Q5_1 and the K-quants where the AVX-512 level runs (VNNI),
 * take another route (exact_q41.c): x as a 24-bit fixed point per block and integer dot
 * products, more exact than HF's own float32 against float64 and twice as fast. Those stay here
 * on AVX2, where those products cost bytes twice Q4's instructions and this path is faster.
 *
 * Work is handed out as items (srt_threadpool_run_items): a thread the OS has not run yet
 * does not hold up a decode step. Which thread computes a row does not change its bits. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu/block_scales.h"
#include "backend/cpu/hsum_avx2.h"
#include "backend/cpu/cpu_exact.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_kernels.h"
#include "srt/common.h"

#define DEC_ROWS 8          /* decode: most rows dequantized together (independent FMA chains) */
#define DEC_MAX_TOK 2       /* decode kernel up to this many tokens; the prefill one beyond */
#define DEC_ITEM_MIN 16     /* decode: fewest rows per work item */
#define PF_ROWS SRT_EXACT_PF_ROWS
#define PRE_ROWS 64         /* prefill: most rows unpacked into scratch per work item (rows_cap, prefill) */
#define PRE_TOK 128         /* prefill: tokens per work item (a multiple of PRE_T) */
#define PRE_T SRT_EXACT_PRE_T   /* prefill micro-kernel: one row (two: exact_avx512.c) x PRE_T tokens */
#define PAIR_TOK 512        /* prefill on 16 lanes: tokens per pair_x layout (a multiple of PRE_TOK); a
                             * longer prefill runs in runs of this many, so the scratch holds at most
                             * PAIR_TOK x cols floats of it whatever the chunked prefill size */
#define PRE_SLICE 18        /* prefill: most blocks of a column slice: 8 tokens x 576 floats, 18 KB of
                             * L1; a 576-column layer in one slice ran 5-10% faster than in two */

/* Most rows a prefill item takes: PRE_ROWS, fewer for long rows so that the item's unpacked q
 * (re-read by every token tile) stays within 512 KB, an L2's size (a 14336-column down_proj
 * row takes 56 KB: 16 rows, as before the items grew); 16 at least. */
static int64_t rows_cap(int64_t cols)
{
    int64_t r = PRE_ROWS;
    while (r > 16 && r * cols * (int64_t)sizeof(float) > 512 * 1024)
        r /= 2;
    return r;
}

/* Scratch: per thread rows_cap(cols) rows of unpacked weights (cols floats of q, then nb scales
 * and nb offsets each), then the block sums of x, transposed: nb x ldt (tokens padded to
 * PRE_T with zeros). */
static size_t per_thread_floats(int64_t cols) { return (size_t)rows_cap(cols) * ((size_t)cols + 2 * (size_t)(cols / 32)); }
static int64_t sums_ld(int64_t n_tok) { return ((n_tok > 0 ? n_tok : 1) + PRE_T - 1) / PRE_T * PRE_T; }

/* then for a prefill on 16 lanes x in pairs of tokens (pair_x: up to PAIR_TOK x cols); or,
 * for exact_q41.c's types, its own (srt_cpu_q41_scratch_bytes) */
static size_t xs_floats(int64_t cols, int64_t n_tok) { return ((size_t)sums_ld(n_tok) * (size_t)(cols / 32) + 15) / 16 * 16; }

size_t srt_cpu_exact_scratch_floats(int n_threads, int64_t cols, int64_t n_tok)
{
    /* both grow with n_tok, so the size never falls as it grows (a caller reserves for its largest) */
    int64_t pairs = sums_ld(n_tok) < PAIR_TOK ? sums_ld(n_tok) : PAIR_TOK;
    size_t f32 = (size_t)(n_threads > 0 ? n_threads : 1) * per_thread_floats(cols) + xs_floats(cols, n_tok) +
                 (size_t)pairs * (size_t)cols + 16;
    size_t q41 = (srt_cpu_q41_scratch_bytes(n_threads, cols, n_tok) + sizeof(float) - 1) / sizeof(float);
    return f32 > q41 ? f32 : q41;
}
#if defined(__x86_64__)
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) TGT

/* Q4_1 and Q4_0 have their own path (exact_q41.c), and Q8_0 on the AVX-512 level */
enum { FMT_Q8_0, FMT_Q8_0_X8, FMT_Q4_K, FMT_Q6_K, FMT_Q5_0, FMT_Q5_1, FMT_Q5_K };
static const size_t fmt_bytes[] = { sizeof(blk_q8_0), sizeof(blk_q8_0), sizeof(blk_q4_k), sizeof(blk_q6_k),
                                    sizeof(blk_q5_0), sizeof(blk_q5_1), sizeof(blk_q5_k) };

/* the format has an offset term (o * sum x): not Q8_0, nor the formats whose q are signed
 * (Q5_0's q - 16, Q6_K's sc*(q - 32)) */
static inline int has_off(int fmt)
{
    return fmt != FMT_Q8_0 && fmt != FMT_Q8_0_X8 && fmt != FMT_Q6_K && fmt != FMT_Q5_0;
}

/* One block's q as four 8-float vectors in element order. */
INLINE void unpack_q(int fmt, const uint8_t *blk, __m256 q[4])
{
    if (fmt == FMT_Q8_0) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + 8 * k))));
        return;
    }
    /* Q5_0, Q5_1: the 32 values as bytes (from the qh word after d, and m), widened 8 at a time */
    __m256i v = srt_q5_bytes(blk + (fmt == FMT_Q5_1 ? 4 : 2));
    if (fmt == FMT_Q5_0)   /* q - 16 in -16..15, signed bytes, as HF's dequantization takes it */
        v = _mm256_sub_epi8(v, _mm256_set1_epi8(16));
    __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    q[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
    q[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
    q[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
    q[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
}

/* A block's scale d and offset o (Q5_1: m; Q8_0, Q5_0: 0). */
INLINE void block_scale(int fmt, const uint8_t *blk, float *d, float *o)
{
    *d = srt_half_at(blk);
    *o = fmt == FMT_Q5_1 ? srt_half_at(blk + 2) : 0.0f;
}

/* [d0 o0 d1 o1 d2 o2 d3 o3] of four rows' blocks: their halves converted in one go */
INLINE __m256 scales4(int fmt, const uint8_t *b0, const uint8_t *b1, const uint8_t *b2, const uint8_t *b3)
{
    return srt_scales4_f16(b0, b1, b2, b3, fmt == FMT_Q5_1);
}

/* sum_j q_j x_j of one block, the fixed order of the header comment */
INLINE __m256 block_dot(const __m256 q[4], const float *x)
{
    __m256 t = _mm256_mul_ps(q[0], _mm256_loadu_ps(x));
    t = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(x + 8), t);
    t = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(x + 16), t);
    return _mm256_fmadd_ps(q[3], _mm256_loadu_ps(x + 24), t);
}

/* Block sums of x, one function for every path, stored transposed (xs[b * ldt + t]). */
TGT static void block_sums(const float *x, int64_t nb, float *xs, int64_t ldt)
{
    for (int64_t b = 0; b < nb; b++, x += QK) {
        __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)),
                                 _mm256_add_ps(_mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)));
        xs[b * ldt] = srt_hsum8(s);
    }
}

/* x (n_tok tokens of cols) laid out for srt_cpu_exact_pre2_avx512: per tile of PRE_T tokens
 * (cols * PRE_T floats, the last one's missing tokens zero) per block per pair of tokens its
 * four 8-float chunks as [token 2p's | token 2p+1's]. */
TGT static void pair_x(const float *x, int64_t cols, int64_t n_tok, float *xx)
{
    for (int64_t t0 = 0; t0 < n_tok; t0 += PRE_T, xx += PRE_T * cols)
        for (int t = 0; t < PRE_T; t++) {
            const float *xt = x + (t0 + t) * cols;
            float *o = xx + (t / 2) * 64 + 8 * (t % 2);
            if (t0 + t < n_tok)
                for (int64_t i = 0; i < cols; i += 8)   /* chunk i / 8 of block i / 32 */
                    _mm256_storeu_ps(o + i / QK * PRE_T * QK + 16 * (i % QK / 8), _mm256_loadu_ps(xt + i));
            else
                for (int64_t i = 0; i < cols; i += 8)
                    _mm256_storeu_ps(o + i / QK * PRE_T * QK + 16 * (i % QK / 8), _mm256_setzero_ps());
        }
}

/* Rows a decode kernel call takes. One token of a 4-bit format takes eight: eight
 * independent chains keep the FMA units fed while a block's dot waits on its four dependent
 * FMAs (two tokens already have eight with four rows; Q8_0's unpack needs the registers:
 * eight rows spilled and its lm_head ran 19% slower). */
static inline int dec_rows(int fmt, int64_t n_tok) { return n_tok == 1 && fmt != FMT_Q8_0 ? 8 : 4; }

/* acc[r][t] = 0 for the NR rows and T tokens a decode kernel uses */
INLINE void zero_acc(__m256 acc[][DEC_MAX_TOK], int NR, int T)
{
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 2
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_setzero_ps();
}

/* Decode: NR rows (dec_rows; wr[r], rows past nr are copies of row 0, not stored) x T tokens. */
INLINE void kern_dec(int fmt, int T, int NR, const uint8_t *const *wr, int nr, const char *pf, const float *x,
                     int64_t ldx, const float *xs, int64_t ldt, int64_t nb, const float *bias, float *y,
                     int64_t ldy)
{
    const size_t bb = fmt_bytes[fmt];
    __m256 acc[DEC_ROWS][DEC_MAX_TOK], off[DEC_ROWS / 4][DEC_MAX_TOK];
    zero_acc(acc, NR, T);
#pragma GCC unroll 2
    for (int g = 0; g < NR / 4; g++)
#pragma GCC unroll 2
        for (int t = 0; t < T; t++)
            off[g][t] = _mm256_setzero_ps();
    /* NR rows further on (pf, chosen by dec_item; NULL: none) are one contiguous run (the
     * rows here are NR short interleaved streams, which the hardware prefetcher follows
     * badly): prefetch it spread over this loop, NR blocks' bytes per block */
    const size_t pf_step = pf && nr == NR ? (size_t)NR * bb : 0;
    if (!pf)
        pf = (const char *)wr[0];   /* never read (pf_step 0), but NULL + 0 is undefined */
    for (int64_t b = 0; b < nb; b++, pf += pf_step) {
        if (pf_step)
#pragma GCC unroll 5
            for (size_t o = 0; o < (size_t)NR * bb; o += 64)
                _mm_prefetch(pf + o, _MM_HINT_T0);
        const uint8_t *blk[DEC_ROWS];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++)
            blk[r] = wr[r] + b * bb;
        _Alignas(32) float dms[DEC_ROWS * 2];   /* the scales go back to memory: a broadcast
                                                 * from there is one load, no shuffle, and
                                                 * no register held */
#pragma GCC unroll 2
        for (int g = 0; g < NR / 4; g++) {
            __m256 dm = scales4(fmt, blk[4 * g], blk[4 * g + 1], blk[4 * g + 2], blk[4 * g + 3]);
            _mm256_store_ps(dms + 8 * g, dm);
            if (has_off(fmt))
#pragma GCC unroll 2
                for (int t = 0; t < T; t++)
                    off[g][t] = _mm256_fmadd_ps(dm, _mm256_broadcast_ss(xs + b * ldt + t), off[g][t]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            __m256 q[4];
            unpack_q(fmt, blk[r], q);
            __m256 dv = _mm256_broadcast_ss(&dms[2 * r]);
#pragma GCC unroll 2
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm256_fmadd_ps(block_dot(q, x + t * ldx + b * QK), dv, acc[r][t]);
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < T; t++) {
        float o[DEC_ROWS * 2], v[DEC_ROWS];
#pragma GCC unroll 2
        for (int g = 0; g < NR / 4; g++)
            _mm256_storeu_ps(o + 8 * g, off[g][t]);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++)
            v[r] = srt_hsum8(acc[r][t]);
        for (int r = 0; r < nr; r++) {
            if (has_off(fmt))
                v[r] += o[2 * r + 1];
            y[t * ldy + r] = v[r] + (bias ? bias[r] : 0.0f);
        }
    }
}

/* Prefill: one unpacked row (q: cols floats, d: nb floats) x T tokens over the blocks
 * [b0, b1), the T accumulators carried in acc (T x 8 floats) from one column slice to the
 * next: the blocks still meet each accumulator in order, so the bits do not depend on
 * the slicing, which only keeps a slice of the token tile in L1 across the rows. */
INLINE void kern_pre(int T, const float *q, const float *dq, const float *x, int64_t ldx, int64_t b0, int64_t b1,
                     float *acc_io)
{
    __m256 acc[PRE_T];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        acc[t] = b0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(acc_io + 8 * t);
    for (int64_t b = b0; b < b1; b++) {
        __m256 qv[4] = { _mm256_loadu_ps(q + b * QK), _mm256_loadu_ps(q + b * QK + 8),
                         _mm256_loadu_ps(q + b * QK + 16), _mm256_loadu_ps(q + b * QK + 24) };
        __m256 dv = _mm256_broadcast_ss(dq + b);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_fmadd_ps(block_dot(qv, x + t * ldx + b * QK), dv, acc[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        _mm256_storeu_ps(acc_io + 8 * t, acc[t]);
}


/* The offsets of 8 rows (o[b * ost + i]: row i's offset of block b) for the PRE_T tokens of a
 * tile (xs[b * ldt + t]; past T zero), the rows in lanes: off[t][col + i]. A (row, token)
 * offset is one chain of nb dependent FMAs from 0 in block order; the tile's 8 tokens are 8
 * chains side by side. */
INLINE void off8(const float *o, int64_t ost, const float *xs, int64_t ldt, int64_t nb, float (*off)[16], int col)
{
    __m256 a[PRE_T];
#pragma GCC unroll 8
    for (int t = 0; t < PRE_T; t++)
        a[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256 ov = _mm256_loadu_ps(o + b * ost);
#pragma GCC unroll 8
        for (int t = 0; t < PRE_T; t++)
            a[t] = _mm256_fmadd_ps(ov, _mm256_broadcast_ss(xs + b * ldt + t), a[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < PRE_T; t++)
        _mm256_storeu_ps(off[t] + col, a[t]);
}

/* Prefill: the T outputs of rows [0, nr) of a tile from their accumulators (acc: PRE_T x 8
 * floats per row; rows up to nr rounded to 8 zero past nr), offsets o (o[b * ost + r], rows up
 * to nr rounded to 16 zero past nr) and the tokens' block sums, the rows in lanes: a token's
 * outputs of 8 rows are one vector, stored where y keeps them side by side. 16 rows' offsets
 * at a time: on 16 lanes one 512-bit FMA per block and token (srt_cpu_exact_off16_avx512). A
 * tokens-in-lanes finish (a row's eight tokens per vector, then transposed) took 6% of a
 * concurrency-16 run; its offset chains were latency-bound. */
TGT static void pre_finish(int fmt, int T, int nr, const float *acc, const float *o, int64_t ost, const float *xs,
                           int64_t ldt, int64_t nb, const float *bias, float *y, int64_t ldy, int wide)
{
    for (int r0 = 0; r0 < nr; r0 += 16) {
        _Alignas(64) float off[PRE_T][16];
        if (has_off(fmt)) {
            if (wide)
                srt_cpu_exact_off16_avx512(o + r0, ost, xs, ldt, nb, off[0]);
            else
                for (int h = 0; h < 16 && r0 + h < nr; h += 8)
                    off8(o + r0 + h, ost, xs, ldt, nb, off, h);
        }
        for (int h = r0; h < nr && h < r0 + 16; h += 8) {
            int n = nr - h < 8 ? nr - h : 8;
            _Alignas(32) float bb[8] = { 0 };
            if (bias)
                memcpy(bb, bias + h, sizeof(float) * (size_t)n);
            __m256 bv = _mm256_load_ps(bb);
            __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            for (int t = 0; t < T; t++) {
                __m256 v = srt_hsum8x8_ld(acc + (size_t)h * PRE_T * 8 + 8 * t, PRE_T * 8);
                if (has_off(fmt))
                    v = _mm256_add_ps(v, _mm256_load_ps(off[t] + (h - r0)));
                v = _mm256_add_ps(v, bv);
                if (n == 8)
                    _mm256_storeu_ps(y + t * ldy + h, v);
                else
                    _mm256_maskstore_ps(y + t * ldy + h, mask, v);
            }
        }
    }
}

typedef srt_exact_dec_run dec_run;

/* ---- K-quant decode ---- */

/* Q6_K's half h (128 values, 32k + l from ql[l], ql[l + 32], qh[l]) as q' = sc*(q - 32)
 * floats: unp_q6k and kern_k write the same values with it */
INLINE void unp_q6k_half(const blk_q6_k *b, int h, float *out)
{
    const __m256i m4 = _mm256_set1_epi32(0x0F), m3 = _mm256_set1_epi32(3), k32 = _mm256_set1_epi32(32);
    const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
    const int8_t *sc = b->scales + 8 * h;
#pragma GCC unroll 4
    for (int l = 0; l < 32; l += 8) {
        __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l)));
        __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l + 32)));
        __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + l)));
        __m256i v[4] = {
            _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi32(_mm256_and_si256(e, m3), 4)),
            _mm256_or_si256(_mm256_and_si256(c, m4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 2), m3), 4)),
            _mm256_or_si256(_mm256_srli_epi32(a, 4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 4), m3), 4)),
            _mm256_or_si256(_mm256_srli_epi32(c, 4), _mm256_slli_epi32(_mm256_srli_epi32(e, 6), 4)),
        };
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(out + 32 * k + l, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(v[k], k32)),
                                                             _mm256_set1_ps((float)sc[2 * k + l / 16])));
    }
}

/* A row's super-block scales taken once, q unpacked in registers (Q4_K) or staged through
 * 128 floats in L1 (Q6_K's six bits come from three places), then every 32-block is
 * kern_pre's sequence on the values unp_q4k / unp_q6k write and the offsets are pre_finish's
 * chain (one fused multiply-add per block from 0, in block order), so decode and prefill give
 * the same bits. NR <= 4 rows (wr; rows past nr are not stored) x T tokens. */
INLINE void kern_k(int fmt, int T, int NR, const uint8_t *const *wr, int nr, const char *pf, const float *x,
                   int64_t ldx, const float *xs, int64_t ldt, int64_t nb, const float *bias, float *y, int64_t ldy)
{
    const size_t bb = fmt_bytes[fmt];
    const __m256i m4 = _mm256_set1_epi32(0x0F), one = _mm256_set1_epi32(1);
    __m256 acc[4][DEC_MAX_TOK];
    float off[4][DEC_MAX_TOK];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) {
            acc[r][t] = _mm256_setzero_ps();
            off[r][t] = 0.0f;
        }
    /* as kern_dec: the rows PF_ROWS on are one run, prefetched NR super-blocks' bytes per step */
    const size_t pf_step = pf && nr == NR ? (size_t)NR * bb : 0;
    if (!pf)
        pf = (const char *)wr[0];
    for (int64_t s = 0; s < nb / 8; s++, pf += pf_step) {
        if (pf_step)
            for (size_t o = 0; o < pf_step; o += 64)
                _mm_prefetch(pf + o, _MM_HINT_T0);
        const float *xb = x + s * 256;
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            if (fmt == FMT_Q4_K || fmt == FMT_Q5_K) {
                /* Q5_K: Q4_K's d, dmin and scales in the same places, qh[32] before qs, and bit
                 * j of qh[l] the fifth bit (16) of element 32j + l */
                const blk_q4_k *b = (const blk_q4_k *)(wr[r] + s * bb);
                const uint8_t *qs = fmt == FMT_Q5_K ? ((const blk_q5_k *)b)->qs : b->qs;
                const uint8_t *qh = fmt == FMT_Q5_K ? ((const blk_q5_k *)b)->qh : NULL;
                float d = srt_f16_to_f32(b->d), dmin = srt_f16_to_f32(b->dmin), D[8];
                for (int j = 0; j < 8; j++) {
                    int sc, mn;
                    q4k_scale_min(b->scales, j, &sc, &mn);
                    D[j] = d * (float)sc;
                    float o = -(dmin * (float)mn);
#pragma GCC unroll 2
                    for (int t = 0; t < T; t++)
                        off[r][t] = fmaf(o, xs[(8 * s + j) * ldt + t], off[r][t]);
                }
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    __m256 qa[4], qb[4];
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++) {
                        __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 32 * c + 8 * k)));
                        __m256i a = _mm256_and_si256(v, m4), bq = _mm256_srli_epi32(v, 4);
                        if (fmt == FMT_Q5_K) {
                            __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + 8 * k)));
                            a = _mm256_or_si256(a, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * c), one), 4));
                            bq = _mm256_or_si256(bq, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * c + 1), one), 4));
                        }
                        qa[k] = _mm256_cvtepi32_ps(a);
                        qb[k] = _mm256_cvtepi32_ps(bq);
                    }
#pragma GCC unroll 2
                    for (int t = 0; t < T; t++) {
                        acc[r][t] = _mm256_fmadd_ps(block_dot(qa, xb + t * ldx + 64 * c), _mm256_set1_ps(D[2 * c]),
                                                    acc[r][t]);
                        acc[r][t] = _mm256_fmadd_ps(block_dot(qb, xb + t * ldx + 64 * c + 32),
                                                    _mm256_set1_ps(D[2 * c + 1]), acc[r][t]);
                    }
                }
            } else {
                const blk_q6_k *b = (const blk_q6_k *)(wr[r] + s * bb);
                __m256 dv = _mm256_set1_ps(srt_f16_to_f32(b->d));
                for (int h = 0; h < 2; h++) {
                    _Alignas(32) float st[128];
                    unp_q6k_half(b, h, st);
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++) {
                        __m256 q[4] = { _mm256_load_ps(st + 32 * k), _mm256_load_ps(st + 32 * k + 8),
                                        _mm256_load_ps(st + 32 * k + 16), _mm256_load_ps(st + 32 * k + 24) };
#pragma GCC unroll 2
                        for (int t = 0; t < T; t++)
                            acc[r][t] = _mm256_fmadd_ps(block_dot(q, xb + t * ldx + 128 * h + 32 * k), dv, acc[r][t]);
                    }
                }
            }
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < T; t++)
        for (int r = 0; r < nr; r++) {
            float v = srt_hsum8(acc[r][t]);
            if (fmt == FMT_Q4_K || fmt == FMT_Q5_K)
                v += off[r][t];
            y[t * ldy + r] = v + (bias ? bias[r] : 0.0f);
        }
}

/* The item's row groups in one loop, the kernel inlined: a call per group paid its loop's
 * exit and its chains' drain before the next group's loads could start. Each group
 * prefetches the rows PF_ROWS further on. */
INLINE void dec_loop(int fmt, int T, int NR, const dec_run *d)
{
    for (int64_t r = d->r0; r < d->r1; r += NR) {
        int n = d->r1 - r < NR ? (int)(d->r1 - r) : NR;
        const uint8_t *wr[DEC_ROWS];
        for (int q = 0; q < NR; q++)
            wr[q] = d->w + (size_t)(r + (q < n ? q : 0)) * d->stride;
        int64_t pr = r + PF_ROWS;
        const char *pf = NULL;
        if (pr < d->r1) {
            if (pr + NR <= d->R)
                pf = (const char *)d->w + (size_t)pr * d->stride;
        } else if (d->nw && d->nr0 + (pr - d->r1) + NR <= d->nr1)
            pf = (const char *)d->nw + (size_t)(d->nr0 + (pr - d->r1)) * d->nstride;
        if (fmt == FMT_Q4_K || fmt == FMT_Q5_K || fmt == FMT_Q6_K)
            kern_k(fmt, T, NR, wr, n, pf, d->x, d->ldx, d->xs, d->ldt, d->nb, d->bias ? d->bias + r : NULL,
                   d->y + r, d->R);
        else
            kern_dec(fmt, T, NR, wr, n, pf, d->x, d->ldx, d->xs, d->ldt, d->nb, d->bias ? d->bias + r : NULL,
                     d->y + r, d->R);
    }
}

/* Q8_0 packed (SRT_Q8_0_X8): block b of rows 8g..8g+7 is d[8] (f16, row order), then the 8
 * rows' 32 q in order (272 bytes). The q need no unpacking trick (one sign-extending load per 8);
 * what the layout buys is eight rows' scales in one convert (the GGUF kernel gathered four with
 * inserts), eight rows at once (four before) and one sequential stream for the prefetcher. */
#define Q8X8_BLOCK SRT_EXACT_Q8X8_BLOCK
_Static_assert(Q8X8_BLOCK == 8 * sizeof(blk_q8_0), "packed Q8_0 block");

INLINE void kern_q8x8(int T, int NR, const uint8_t *g, int lane0, int nr, const char *pf, const float *x,
                      int64_t ldx, int64_t nb, const float *bias, float *y, int64_t ldy)
{
    __m256 acc[8][DEC_MAX_TOK];
    zero_acc(acc, NR, T);
    for (int64_t b = 0; b < nb; b++, g += Q8X8_BLOCK) {
        if (pf)
#pragma GCC unroll 5
            for (size_t o = 0; o < Q8X8_BLOCK; o += 64)
                _mm_prefetch(pf + (size_t)b * Q8X8_BLOCK + o, _MM_HINT_T0);
        _Alignas(32) float dd[8];
        _mm256_store_ps(dd, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g)));
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const uint8_t *qs = g + 16 + 32 * (lane0 + r);
            __m256 q[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8 * k))));
            __m256 dv = _mm256_broadcast_ss(dd + lane0 + r);
#pragma GCC unroll 2
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm256_fmadd_ps(block_dot(q, x + t * ldx + b * QK), dv, acc[r][t]);
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < T; t++)
        for (int r = 0; r < nr; r++)
            y[t * ldy + r] = srt_hsum8(acc[r][t]) + (bias ? bias[r] : 0.0f);
}

/* dec_loop for packed weights: items start on a group (multiples of DEC_ROWS rows); one token
 * takes a group at a time, two a half group (eight rows of two tokens need sixteen accumulators) */
INLINE void dec_loop_x8(int T, const dec_run *d)
{
    const int NR = T == 1 ? 8 : 4;
    for (int64_t r = d->r0; r < d->r1; r += NR) {
        int n = d->r1 - r < NR ? (int)(d->r1 - r) : NR, lane0 = (int)(r % 8);
        const char *pf = lane0 == 0 ? srt_exact_x8_pf(d, r) : NULL;   /* once per group */
        const uint8_t *g = d->w + (size_t)(r - lane0) * d->stride;
        kern_q8x8(T, NR, g, lane0, n, pf, d->x, d->ldx, d->nb, d->bias ? d->bias + r : NULL, d->y + r, d->R);
    }
}

TGT static void dec_FMT_Q8_0_X8(int T, const dec_run *d)
{
    if (T == 1 && d->wide)
        srt_cpu_exact_x8_avx512(d);
    else if (T == 2)
        dec_loop_x8(2, d);
    else
        dec_loop_x8(1, d);
}

TGT static void unp_q8x8(const uint8_t *w, size_t stride, int64_t row, int64_t nb, float *q, float *dq, float *o,
                         int64_t ost)
{
    int lane = (int)(row % 8);
    const uint8_t *g = w + (size_t)(row - lane) * stride;
    for (int64_t b = 0; b < nb; b++, g += Q8X8_BLOCK) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(q + b * QK + 8 * k, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                     _mm_loadl_epi64((const __m128i *)(g + 16 + 32 * lane + 8 * k)))));
        dq[b] = srt_half_at(g + 2 * lane);
        o[b * ost] = 0.0f;
    }
}

#define PRE_CASE(T) \
    case T: kern_pre(T, q, dq, x, ldx, b0, b1, acc); return;
#define FMT_FNS(fmt)                                                                          \
    TGT static void dec_##fmt(int T, const dec_run *d)                                        \
    {                                                                                          \
        if (T == 2)                                                                            \
            dec_loop(fmt, 2, dec_rows(fmt, 2), d);                                             \
        else                                                                                   \
            dec_loop(fmt, 1, dec_rows(fmt, 1), d);                                             \
    }                                                                                          \
    TGT static void unp_##fmt(const uint8_t *w, size_t stride, int64_t r, int64_t nb, float *q,  \
                              float *dq, float *o, int64_t ost)                                \
    {                                                                                          \
        const uint8_t *row = w + (size_t)r * stride;                                           \
        for (int64_t b = 0; b < nb; b++) {                                                     \
            __m256 v[4];                                                                       \
            unpack_q(fmt, row + b * fmt_bytes[fmt], v);                                        \
            block_scale(fmt, row + b * fmt_bytes[fmt], &dq[b], &o[b * ost]);                   \
            for (int k = 0; k < 4; k++)                                                        \
                _mm256_storeu_ps(q + b * QK + 8 * k, v[k]);                                    \
        }                                                                                      \
    }
FMT_FNS(FMT_Q8_0)
FMT_FNS(FMT_Q5_0)
FMT_FNS(FMT_Q5_1)

/* ---- K-quants: unpacked into the prefill scratch as 32-blocks of the same form ----
 * Q4_K: a sub-block of 32 is w = D*q - M, D = d*sc and M = dmin*mn in f32 as HF's
 * dequantization takes them, so it is a Q4_1 block with scale D and offset -M; Q5_K the same
 * with q of five bits. Q6_K: w =
 * D*(q - 32) with D = d*sc per 16; as 32-blocks, q' = sc*(q - 32) (an integer below 2^13,
 * exact as a float) with the super-block's d as scale and no offset. Decode: kern_k, the same
 * values and order. */
INLINE void store_u8x8(float *q, __m256i v) { _mm256_storeu_ps(q, _mm256_cvtepi32_ps(v)); }

/* Q4_K, and Q5_K (five: qh[32] before qs, bit j of qh[l] the fifth bit of element 32j + l) */
INLINE void unp_k4(int five, const uint8_t *w, size_t stride, int64_t r, int64_t nb, float *q, float *dq, float *o,
                   int64_t ost)
{
    const uint8_t *row = w + (size_t)r * stride;
    const size_t sbytes = five ? sizeof(blk_q5_k) : sizeof(blk_q4_k);
    const __m256i m4 = _mm256_set1_epi32(0x0F), one = _mm256_set1_epi32(1);
    for (int64_t s = 0; s < nb / 8; s++, row += sbytes) {
        const blk_q4_k *b = (const blk_q4_k *)row;   /* d, dmin and scales: the same places */
        const uint8_t *qsb = five ? ((const blk_q5_k *)row)->qs : b->qs;
        const uint8_t *qh = five ? ((const blk_q5_k *)row)->qh : NULL;
        float d = srt_f16_to_f32(b->d), dmin = srt_f16_to_f32(b->dmin);
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            q4k_scale_min(b->scales, j, &sc, &mn);
            dq[8 * s + j] = d * (float)sc;
            o[(8 * s + j) * ost] = -(dmin * (float)mn);
        }
        for (int c = 0; c < 4; c++) {   /* 64 elements: low nibbles then high nibbles of 32 bytes */
            const uint8_t *qs = qsb + 32 * c;
            float *lo = q + 256 * s + 64 * c, *hi = lo + 32;
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8 * k)));
                __m256i a = _mm256_and_si256(v, m4), bq = _mm256_srli_epi32(v, 4);
                if (five) {
                    __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + 8 * k)));
                    a = _mm256_or_si256(a, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * c), one), 4));
                    bq = _mm256_or_si256(bq, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * c + 1), one), 4));
                }
                store_u8x8(lo + 8 * k, a);
                store_u8x8(hi + 8 * k, bq);
            }
        }
    }
}

TGT static void unp_q4k(const uint8_t *w, size_t stride, int64_t r, int64_t nb, float *q, float *dq, float *o,
                        int64_t ost)
{
    unp_k4(0, w, stride, r, nb, q, dq, o, ost);
}

TGT static void unp_q5k(const uint8_t *w, size_t stride, int64_t r, int64_t nb, float *q, float *dq, float *o,
                        int64_t ost)
{
    unp_k4(1, w, stride, r, nb, q, dq, o, ost);
}

TGT static void unp_q6k(const uint8_t *w, size_t stride, int64_t r, int64_t nb, float *q, float *dq, float *o,
                        int64_t ost)
{
    const blk_q6_k *b = (const blk_q6_k *)(w + (size_t)r * stride);
    for (int64_t s = 0; s < nb / 8; s++, b++) {
        float d = srt_f16_to_f32(b->d);
        for (int j = 0; j < 8; j++) {
            dq[8 * s + j] = d;
            o[(8 * s + j) * ost] = 0.0f;
        }
        for (int h = 0; h < 2; h++)
            unp_q6k_half(b, h, q + 256 * s + 128 * h);
    }
}

TGT static void dec_q4k(int T, const dec_run *d)
{
    if (T == 2)
        dec_loop(FMT_Q4_K, 2, 2, d);
    else
        dec_loop(FMT_Q4_K, 1, 4, d);
}

TGT static void dec_q5k(int T, const dec_run *d)
{
    if (T == 2)
        dec_loop(FMT_Q5_K, 2, 2, d);
    else
        dec_loop(FMT_Q5_K, 1, 4, d);
}

TGT static void dec_q6k(int T, const dec_run *d)
{
    if (T == 2)
        dec_loop(FMT_Q6_K, 2, 2, d);
    else
        dec_loop(FMT_Q6_K, 1, 4, d);
}

/* one for every format: the unpacked rows are plain floats */
TGT static void pre_part(int T, const float *q, const float *dq, const float *x, int64_t ldx, int64_t b0,
                         int64_t b1, float *acc)
{
    switch (T) {
    PRE_CASE(8) PRE_CASE(7) PRE_CASE(6) PRE_CASE(5) PRE_CASE(4) PRE_CASE(3) PRE_CASE(2) default: PRE_CASE(1)
    }
}

typedef void (*dec_fn)(int T, const dec_run *d);
/* unpack a row: q (nb * 32 floats), its blocks' scales dq[b] and offsets o[b * ost] */
typedef void (*unp_fn)(const uint8_t *w, size_t stride, int64_t row, int64_t nb, float *q, float *dq, float *o,
                       int64_t ost);

/* n_w weights of one input (x, its block sums xs); weight k is ws[k] with biases[k], ys[k] and
 * its format's kernels */
typedef struct {
    int n_w;
    const srt_weight *ws[SRT_MATMUL_N_MAX];
    const float *biases[SRT_MATMUL_N_MAX];
    float *ys[SRT_MATMUL_N_MAX];
    int fmts[SRT_MATMUL_N_MAX];
    dec_fn decs[SRT_MATMUL_N_MAX];
    unp_fn unps[SRT_MATMUL_N_MAX];
    const float *x, *xs;
    const float *xx;             /* prefill on 16 lanes: x in pairs of tokens (pair_x) */
    int64_t n_tok, nb, ldt;
    float *scratch;              /* per thread: per_thread_floats(cols) */
    int nth;                     /* threads taking items */
    /* decode: one item space over all weights: weight k's items are [first[k], first[k + 1]),
     * each a run of item_rows[k] of its rows */
    int64_t item_rows[SRT_MATMUL_N_MAX], first[SRT_MATMUL_N_MAX + 1];
    /* prefill: the weight being computed, and its row chunks per token block */
    int cur;
    int64_t n_rchunk, rows_item;
    int wide;                    /* the 16-lane kernels of exact_avx512.c */
} exact_job;

/* the weight of decode item i and the item's rows [*r0, *r1) */
static int dec_item_rows(const exact_job *j, int64_t i, int64_t *r0, int64_t *r1)
{
    int k = 0;
    while (i >= j->first[k + 1])
        k++;
    int64_t R = j->ws[k]->rows;
    *r0 = (i - j->first[k]) * j->item_rows[k];
    *r1 = *r0 + j->item_rows[k] < R ? *r0 + j->item_rows[k] : R;
    return k;
}

/* decode: one item is a run of item_rows rows; every thread streams its own runs of W.
 * Each kernel call prefetches the rows PF_ROWS further on; past its item's end those are
 * another thread's (items are claimed in turn), so it takes the same offset into the item
 * this thread will likely claim next, nth items on (which may be the next weight's). */
static void dec_item(void *arg, int64_t item, int ith)
{
    exact_job *j = arg;
    int64_t r0, r1;
    int k = dec_item_rows(j, item, &r0, &r1);
    const srt_weight *w = j->ws[k];
    /* the item this thread will likely take next: its base and rows, or none */
    int64_t nx = item + j->nth, nr0 = 0, nr1 = 0;
    const srt_weight *nw = NULL;
    if (nx < j->first[j->n_w])
        nw = j->ws[dec_item_rows(j, nx, &nr0, &nr1)];
    /* a thread's first item (the first nth are claimed one per thread) was prefetched by
     * no earlier call: its first PF_ROWS rows are asked for at once */
    if (item < j->nth) {
        const char *p0 = (const char *)w->data + (size_t)r0 * w->row_stride;
        size_t head = (size_t)(r1 - r0 < PF_ROWS ? r1 - r0 : PF_ROWS) * w->row_stride;
        for (size_t o = 0; o < head; o += 64)
            _mm_prefetch(p0 + o, _MM_HINT_T0);
    }
    dec_run d = { .w = w->data, .stride = w->row_stride, .r0 = r0, .r1 = r1, .R = w->rows,
                  .nw = nw ? nw->data : NULL, .nstride = nw ? nw->row_stride : 0, .nr0 = nr0, .nr1 = nr1,
                  .x = j->x, .ldx = w->cols, .xs = j->xs, .ldt = j->ldt, .nb = j->nb, .bias = j->biases[k],
                  .y = j->ys[k], .wide = j->wide };
    j->decs[k]((int)j->n_tok, &d);
}

/* prefill: one item is j->rows_item rows x PRE_TOK tokens, token block outer (threads at work
 * together share its activations in cache) */
static void pre_item(void *arg, int64_t i, int ith)
{
    exact_job *j = arg;
    int k = j->cur;
    const srt_weight *w = j->ws[k];
    int64_t C = w->cols, R = w->rows, nb = j->nb;
    int64_t cap = rows_cap(C);   /* the per-thread scratch's layout */
    float *q = j->scratch + (size_t)ith * per_thread_floats(C), *dq = q + cap * C, *o = dq + cap * nb;
    int64_t t0 = i / j->n_rchunk * PRE_TOK, r0 = i % j->n_rchunk * j->rows_item;
    int64_t nr = R - r0 < j->rows_item ? R - r0 : j->rows_item;
    int64_t t1 = j->n_tok - t0 < PRE_TOK ? j->n_tok : t0 + PRE_TOK;
    for (int64_t r = 0; r < nr; r++)
        j->unps[k](w->data, w->row_stride, r0 + r, nb, q + r * C, dq + r * nb, o + r, cap);
    /* pre_finish's vectors of 8 and 16 rows: the rows past nr add nothing and are not stored */
    for (int64_t b = 0; b < nb; b++)
        for (int64_t r = nr; r < cap && r < (nr + 15) / 16 * 16; r++)
            o[b * cap + r] = 0.0f;
    float acc[PRE_ROWS * PRE_T * 8];
    memset(acc + nr * PRE_T * 8, 0, sizeof(float) * (size_t)((nr + 7) / 8 * 8 - nr) * PRE_T * 8);
    int64_t n_slices = (nb + PRE_SLICE - 1) / PRE_SLICE, per = (nb + n_slices - 1) / n_slices;
    for (int64_t t = t0; t < t1; t += PRE_T) {
        int nt = t1 - t < PRE_T ? (int)(t1 - t) : PRE_T;
        for (int64_t b0 = 0; b0 < nb; b0 += per) {
            int64_t b1 = b0 + per < nb ? b0 + per : nb, r = 0;
            if (j->wide)
                for (; r + 2 <= nr; r += 2)
                    srt_cpu_exact_pre2_avx512(nt, q + r * C, q + (r + 1) * C, dq + r * nb, dq + (r + 1) * nb,
                                              j->xx + t * C, b0, b1, acc + r * PRE_T * 8, acc + (r + 1) * PRE_T * 8);
            for (; r < nr; r++)
                pre_part(nt, q + r * C, dq + r * nb, j->x + t * C, C, b0, b1, acc + r * PRE_T * 8);
        }
        pre_finish(j->fmts[k], nt, (int)nr, acc, o, cap, j->xs + t, j->ldt, nb,
                   j->biases[k] ? j->biases[k] + r0 : NULL, j->ys[k] + t * R + r0, R, j->wide);
    }
}

static int fmt_of(srt_dtype t, int *fmt, dec_fn *dec, unp_fn *unp)
{
    switch (t) {
    case SRT_Q8_0: *fmt = FMT_Q8_0; *dec = dec_FMT_Q8_0; *unp = unp_FMT_Q8_0; return SRT_OK;
    case SRT_Q5_0: *fmt = FMT_Q5_0; *dec = dec_FMT_Q5_0; *unp = unp_FMT_Q5_0; return SRT_OK;
    case SRT_Q5_1: *fmt = FMT_Q5_1; *dec = dec_FMT_Q5_1; *unp = unp_FMT_Q5_1; return SRT_OK;
    case SRT_Q8_0_X8: *fmt = FMT_Q8_0_X8; *dec = dec_FMT_Q8_0_X8; *unp = unp_q8x8; return SRT_OK;
    case SRT_Q4_K: *fmt = FMT_Q4_K; *dec = dec_q4k; *unp = unp_q4k; return SRT_OK;
    case SRT_Q5_K: *fmt = FMT_Q5_K; *dec = dec_q5k; *unp = unp_q5k; return SRT_OK;
    case SRT_Q6_K: *fmt = FMT_Q6_K; *dec = dec_q6k; *unp = unp_q6k; return SRT_OK;
    default: return SRT_ERROR;
    }
}

/* The 16-lane kernels against the 8-lane ones on made-up data: prefill on rows of q small
 * integers of both signs, scales and x of both signs over a wide range of magnitudes, every
 * token count, the blocks in three column slices (so the accumulators are carried as in
 * pre_item); the packed Q8_0 decode on made-up Q5_0 blocks packed as the runner packs them
 * (Q8_0 itself takes exact_q41.c's kernels where these run); the Q4_0, Q4_1 and Q8_0 kernels
 * there (srt_cpu_q41_wide_matches). */
static uint32_t lcg(uint32_t *s) { return (*s = *s * 1103515245u + 12345u) >> 8; }

/* m in [-1, 1] times 2^e, e in [e0, e0 + ne) */
static float made_up(uint32_t *s, int e0, int ne)
{
    float m = (float)((int)(lcg(s) % 20001) - 10000) / 10000.0f;
    return ldexpf(m, e0 + (int)(lcg(s) % (uint32_t)ne));
}

static void pack_q8x8(const srt_weight *w, void *dst, srt_weight *out);

static int wide_matches(void)
{
    enum { NB = 6, C = NB * QK };
    static const int64_t cut[] = { 0, 2, 5, NB };
    float q[2][C], d[2][NB], x[PRE_T * C], a8[2][PRE_T * 8], a16[2][PRE_T * 8];
    _Alignas(64) float xx[PRE_T * C];
    uint32_t s = 12345;
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < C; i++)
            q[r][i] = (float)(lcg(&s) % 255) - 127.0f;
        for (int b = 0; b < NB; b++)
            d[r][b] = made_up(&s, -16, 24);
    }
    for (int i = 0; i < PRE_T * C; i++)
        x[i] = made_up(&s, -15, 30);
    for (int T = 1; T <= PRE_T; T++) {
        pair_x(x, C, T, xx);
        for (int k = 0; k < 3; k++) {
            pre_part(T, q[0], d[0], x, C, cut[k], cut[k + 1], a8[0]);
            pre_part(T, q[1], d[1], x, C, cut[k], cut[k + 1], a8[1]);
            srt_cpu_exact_pre2_avx512(T, q[0], q[1], d[0], d[1], xx, cut[k], cut[k + 1], a16[0], a16[1]);
        }
        if (memcmp(a8[0], a16[0], sizeof(float) * 8 * (size_t)T) || memcmp(a8[1], a16[1], sizeof(float) * 8 * (size_t)T))
            return 0;
    }
    /* packed Q8_0 decode, 16 rows (two groups, the second prefetched) of 128 columns: scales
     * and x over a range of magnitudes, q of both signs */
    enum { DR = 16, DC = 128, DNB = DC / QK };
    float xd[DC], xs[DNB * PRE_T], bias[DR], y8[DR], y16[DR];
    for (int i = 0; i < DC; i++)
        xd[i] = made_up(&s, -6, 12);
    for (int r = 0; r < DR; r++)
        bias[r] = made_up(&s, -6, 6);
    block_sums(xd, DNB, xs, PRE_T);
    srt_weight pw;
    blk_q5_0 g5[DR * DNB];   /* packed as Q8_0 in 8-row groups, the layout these kernels take */
    for (int b = 0; b < DR * DNB; b++) {
        g5[b].d = srt_f32_to_f16(made_up(&s, -12, 8));
        for (int i = 0; i < 4; i++)
            g5[b].qh[i] = (uint8_t)lcg(&s);
        for (int i = 0; i < QK / 2; i++)
            g5[b].qs[i] = (uint8_t)lcg(&s);
    }
    _Alignas(64) uint8_t packed8[DR * DNB * sizeof(blk_q8_0)];
    srt_weight w5 = { .dtype = SRT_Q5_0, .rows = DR, .cols = DC, .row_stride = DNB * sizeof(blk_q5_0), .data = g5 };
    pack_q8x8(&w5, packed8, &pw);
    dec_run run = { .w = pw.data, .stride = pw.row_stride, .r0 = 0, .r1 = DR, .R = DR, .x = xd, .xs = xs,
                     .bias = bias, .ldx = DC, .ldt = PRE_T, .nb = DNB, .y = y8 };
    dec_FMT_Q8_0_X8(1, &run);
    run.y = y16;
    run.wide = 1;
    dec_FMT_Q8_0_X8(1, &run);
    return memcmp(y8, y16, sizeof y8) == 0 && srt_cpu_q41_wide_matches();
}

int srt_cpu_exact_avx512(void)
{
    static _Atomic int state;   /* 0 not checked yet, 1 same bits, -1 not */
    if (srt_cpu_ops() != &srt_cpu_ops_avx512)
        return 0;
    int st = atomic_load(&state);
    if (st == 0) {
        st = wide_matches() ? 1 : -1;
        if (st < 0)
            fprintf(stderr, "srt: the AVX-512 exact kernels do not give the AVX2 kernels' bits on this CPU; "
                            "the exact path stays on AVX2\n");
        atomic_store(&state, st);
    }
    return st;
}

/* Prefill of weight k (the block sums of x already in j->xs). */
static void prefill(srt_threadpool *tp, exact_job *j, int k, int par)
{
    const srt_weight *w = j->ws[k];
    j->cur = k;
    /* Rows per item: the most (rows_cap) unless the threads' last round of items would leave
     * one idle for more than 1/16 of the weight (k_proj's 192 rows are three items of 64 for two
     * threads); then halved, down to 16. 64 rows ran 5-13% faster than 16 on one thread:
     * fewer items, each one's token tiles, slices and finishing spread over more rows. */
    int64_t n_tb = (j->n_tok + PRE_TOK - 1) / PRE_TOK, nth = j->nth > 0 ? j->nth : 1, n_items;
    for (j->rows_item = rows_cap(w->cols);; j->rows_item /= 2) {
        j->n_rchunk = (w->rows + j->rows_item - 1) / j->rows_item;
        n_items = j->n_rchunk * n_tb;
        int64_t rounds = (n_items + nth - 1) / nth;
        if (j->rows_item <= 16 || !par || (rounds * nth - n_items) * 16 <= rounds * nth)
            break;
    }
    if (par)
        srt_threadpool_run_items(tp, pre_item, j, n_items);
    else
        for (int64_t i = 0; i < n_items; i++)
            pre_item(j, i, 0);
}

int srt_cpu_exact_matmul_n(srt_threadpool *tp, int n, const srt_weight *const *w, const float *const *bias,
                           const float *x, int64_t n_tok, float *const *y, float *scratch)
{
    exact_job j = { .x = x, .n_tok = n_tok, .n_w = n };
    if (!srt_cpu_have_avx2() || n < 1 || n > SRT_MATMUL_N_MAX || n_tok < 0)
        return SRT_ERROR;
    /* Q4_1, Q4_0 (and Q8_0, Q5_0/1 and the K-quants on AVX-512) run their own kernels (exact_q41.c); weights of both kinds: one call each */
    int q41 = 0;
    for (int k = 0; k < n; k++)
        q41 += srt_cpu_q41_takes(w[k]->dtype);
    if (q41)
        return q41 < n ? SRT_ERROR
                       : srt_cpu_q41_matmul_n(tp, n, w, bias, x, n_tok, y, scratch, srt_cpu_exact_avx512() == 1, 0);
    int64_t C = w[0]->cols, work = 0;
    for (int k = 0; k < n; k++) {
        if (fmt_of(w[k]->dtype, &j.fmts[k], &j.decs[k], &j.unps[k]) != SRT_OK || w[k]->cols != C ||
            C % srt_dtype_block_elems(w[k]->dtype))
            return SRT_ERROR;
        if (j.fmts[k] == FMT_Q8_0_X8 && w[k]->rows % 8)
            return SRT_ERROR;
        j.ws[k] = w[k];
        j.biases[k] = bias ? bias[k] : NULL;
        j.ys[k] = y[k];
        work += w[k]->rows;
    }
    if (n_tok == 0)
        return SRT_OK;
    j.nb = C / QK;
    int nth = tp ? srt_threadpool_size(tp) : 1;
    float *xs = scratch + (size_t)nth * per_thread_floats(C);
    j.ldt = sums_ld(n_tok);
    memset(xs, 0, sizeof(float) * (size_t)j.ldt * (size_t)j.nb);
    for (int64_t t = 0; t < n_tok; t++)
        block_sums(x + t * C, j.nb, xs + t, j.ldt);
    j.xs = xs;
    j.scratch = scratch;
    j.wide = srt_cpu_exact_avx512() == 1;
    if (n_tok > DEC_MAX_TOK) {
        /* prefill items are large: one region per weight costs nothing measurable. On 16
         * lanes in runs of PAIR_TOK tokens, each laid out in pairs first; a (row, token)
         * output does not depend on the run it is in. */
        j.nth = nth;
        int64_t run = j.wide ? PAIR_TOK : n_tok;
        for (int64_t t0 = 0; t0 < n_tok; t0 += run) {
            exact_job jr = j;
            jr.n_tok = n_tok - t0 < run ? n_tok - t0 : run;
            jr.x = x + t0 * C;
            jr.xs = xs + t0;
            for (int k = 0; k < n; k++)
                jr.ys[k] = y[k] + t0 * w[k]->rows;
            if (j.wide) {
                float *xx = xs + xs_floats(C, n_tok);
                pair_x(jr.x, C, jr.n_tok, xx);
                jr.xx = xx;
            }
            for (int k = 0; k < n; k++)
                prefill(tp, &jr, k, nth > 1 && (double)w[k]->rows * (double)C * (double)jr.n_tok >= 64 * 1024);
        }
        return SRT_OK;
    }
    int par = nth > 1 && (double)work * (double)C * (double)n_tok >= 64 * 1024;
    j.nth = par ? nth : 1;
    j.first[0] = 0;
    for (int k = 0; k < n; k++) {
        /* enough items that a thread which starts late still finds work, none tiny */
        int64_t per = (w[k]->rows + 8 * nth - 1) / (8 * nth);
        per = (per < DEC_ITEM_MIN ? DEC_ITEM_MIN : per + DEC_ROWS - 1) / DEC_ROWS * DEC_ROWS;
        j.item_rows[k] = per;
        j.first[k + 1] = j.first[k] + (w[k]->rows + per - 1) / per;
    }
    if (par)
        srt_threadpool_run_items(tp, dec_item, &j, j.first[n]);
    else
        for (int64_t i = 0; i < j.first[n]; i++)
            dec_item(&j, i, 0);
    return SRT_OK;
}

int srt_cpu_exact_matmul(srt_threadpool *tp, const srt_weight *w, const float *bias, const float *x,
                         int64_t n_tok, float *y, float *scratch)
{
    return srt_cpu_exact_matmul_n(tp, 1, &w, &bias, x, n_tok, &y, scratch);
}

/* On AVX2 Q5_0 is packed as Q8_0 (SRT_Q8_0_X8; on AVX-512 exact_q41.c packs it in its own
 * bits, SRT_Q5_0_X16): its values q - 16 fit int8 with the same d, so the packed copy
 * holds exactly the weights d*(q - 16) and runs the Q8_0 kernels here (its own kernels take
 * q - 16 the same way, unoffset, so the bits do not change). 34 bytes a block instead of 22, but
 * the fifth bits' unpacking, which made a Q5_0 decode cost twice a Q4_1 one, is done once. */
static srt_dtype packed_as(srt_dtype t) { return t == SRT_Q5_0 ? SRT_Q8_0 : t; }

size_t srt_cpu_exact_pack_bytes(const srt_weight *w)
{
    if (srt_cpu_q41_takes(w->dtype))
        return srt_cpu_q41_pack_bytes(w);
    srt_dtype t = packed_as(w->dtype);
    if (!srt_cpu_have_avx2() || t != SRT_Q8_0 || w->cols % QK || w->rows <= 0 || w->rows % 8 || w->cols <= 0)
        return 0;
    return (size_t)w->rows * srt_dtype_row_bytes(t, w->cols);
}

/* a Q5_0 block as the Q8_0 block of the same weights d*(q - 16): q - 16 fits a signed byte */
static void q5_0_as_q8_0(const blk_q5_0 *b, blk_q8_0 *o)
{
    o->d = b->d;
    for (int i = 0; i < QK; i++)
        o->qs[i] = (int8_t)(q5_value(b->qs, b->qh, i) - 16);
}

/* n bytes between a packed place and a row's: into the packed one, or back */
static void move(uint8_t *packed, uint8_t *row, size_t n, int back)
{
    memcpy(back ? row : packed, back ? packed : row, n);
}

/* the 8 rows' blocks b of group g: packed into o from the rows a (back 0: a is only read), or
 * from o back into the rows (back 1: o is only read) */
static void q8x8_block(uint8_t *o, const uint8_t *const *a, int back)
{
    for (int r = 0; r < 8; r++) {
        uint8_t *blk = (uint8_t *)a[r];
        move(o + 2 * r, blk, 2, back);             /* d */
        move(o + 16 + 32 * r, blk + 2, QK, back);  /* q */
    }
}

/* Q8_0 or Q5_0 (rows a multiple of 8) as SRT_Q8_0_X8 */
static void pack_q8x8(const srt_weight *w, void *dst, srt_weight *out)
{
    srt_dtype t = SRT_Q8_0;
    int q5 = w->dtype == SRT_Q5_0;
    int64_t nb = w->cols / QK;
    size_t rb = srt_dtype_row_bytes(t, w->cols), bb = srt_dtype_block_bytes(t), sbb = srt_dtype_block_bytes(w->dtype);
    blk_q8_0 conv[8];
    for (int64_t g = 0; g < w->rows / 8; g++)
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *a[8];
            for (int r = 0; r < 8; r++) {
                a[r] = (const uint8_t *)w->data + (size_t)(8 * g + r) * w->row_stride + (size_t)b * sbb;
                if (q5) {
                    q5_0_as_q8_0((const blk_q5_0 *)a[r], &conv[r]);
                    a[r] = (const uint8_t *)&conv[r];
                }
            }
            uint8_t *o = (uint8_t *)dst + (size_t)g * 8 * rb + (size_t)b * 8 * bb;
            q8x8_block(o, a, 0);
        }
    *out = (srt_weight){ .dtype = SRT_Q8_0_X8, .rows = w->rows, .cols = w->cols, .data = dst,
                         .row_stride = rb };
}

void srt_cpu_exact_pack(const srt_weight *w, void *dst, srt_weight *out)
{
    if (srt_cpu_exact_pack_bytes(w) == 0) {   /* a weight with no packed form stays as it is */
        *out = *w;
        return;
    }
    if (srt_cpu_q41_takes(w->dtype))
        srt_cpu_q41_pack(w, dst, out);
    else
        pack_q8x8(w, dst, out);
}

srt_dtype srt_cpu_exact_unpack_row(const srt_weight *w, int64_t row, void *out)
{
    if (srt_cpu_q41_takes(w->dtype))
        return srt_cpu_q41_unpack_row(w, row, out);
    int lane = (int)(row % 8);
    int64_t nb = w->cols / QK;
    size_t bb = srt_dtype_block_bytes(w->dtype);
    uint8_t scratch[7][sizeof(blk_q8_0)];   /* the group's other rows, unpacked and dropped */
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *a[8];
        for (int r = 0; r < 8; r++)
            a[r] = r == lane ? (uint8_t *)out + (size_t)b * bb : scratch[r - (r > lane)];
        uint8_t *o = (uint8_t *)w->data + (size_t)(row - lane) * w->row_stride + (size_t)b * 8 * bb;
        q8x8_block(o, (const uint8_t *const *)a, 1);
    }
    return SRT_Q8_0;
}

#else

int srt_cpu_exact_matmul_n(srt_threadpool *tp, int n, const srt_weight *const *w, const float *const *bias,
                           const float *x, int64_t n_tok, float *const *y, float *scratch)
{
    return SRT_ERROR;
}

int srt_cpu_exact_matmul(srt_threadpool *tp, const srt_weight *w, const float *bias, const float *x,
                         int64_t n_tok, float *y, float *scratch)
{
    return SRT_ERROR;
}

size_t srt_cpu_exact_pack_bytes(const srt_weight *w) { return 0; }

void srt_cpu_exact_pack(const srt_weight *w, void *dst, srt_weight *out) { *out = *w; }

srt_dtype srt_cpu_exact_unpack_row(const srt_weight *w, int64_t row, void *out) { return SRT_DTYPE_COUNT; }

int srt_cpu_exact_avx512(void) { return 0; }

#endif
