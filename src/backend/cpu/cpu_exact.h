/* The exact matmul (f32 activations x weights dequantized exactly as HF does), with the
 * weights dequantized in registers; private to src/backend/cpu. */
#ifndef SRT_CPU_EXACT_H
#define SRT_CPU_EXACT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/cpu_kernels.h"
#include "srt/backend.h"

/* y[t][r] = sum_c x[t][c] * W[r][c] + bias[r] for Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q5_K /
 * Q6_K / Q2_K / Q3_K / IQ4_NL / IQ4_XS W (and the packed forms below; AVX2 + FMA). Q4_0, Q4_1,
 * Q2_K, Q3_K and IQ4 (and the others where srt_cpu_exact_avx512() is 1) run
 * srt_cpu_q41_matmul_n.
 * scratch holds srt_cpu_exact_scratch_floats(threads of tp, W cols, n_tok) floats. Batch
 * invariant: a (row, token) output does not depend on n_tok or the token's place.
 * SRT_ERROR, nothing written, for other types or on a CPU without AVX2. */
int    srt_cpu_exact_matmul(srt_threadpool *tp, const srt_weight *w, const float *bias, const float *x,
                            int64_t n_tok, float *y, float *scratch);
/* The same for n <= SRT_MATMUL_N_MAX weights of one input and as many columns: y[k] from W[k]
 * and bias[k] (bias or bias[k] may be NULL), each the bits of its own srt_cpu_exact_matmul;
 * a decode's rows of all of them are one parallel region. SRT_ERROR, nothing written, when
 * any weight has another type or column count. */
int    srt_cpu_exact_matmul_n(srt_threadpool *tp, int n, const srt_weight *const *w, const float *const *bias,
                              const float *x, int64_t n_tok, float *const *y, float *scratch);
size_t srt_cpu_exact_scratch_floats(int n_threads, int64_t cols, int64_t n_tok);
/* Q4_0, Q4_1, Q8_0, Q5_0, Q5_1 and K-quant weights packed for their kernels (SRT_Q4_0_X16,
 * SRT_Q4_1_X16, SRT_Q3_K_X16, SRT_Q2_K_X16, SRT_IQ4_NL_X16, SRT_IQ4_XS_X16; on the AVX-512 level
 * also SRT_Q8_0_X16, SRT_Q5_0_X16, SRT_Q5_1_X16, SRT_Q4_K_X16, SRT_Q5_K_X16 and SRT_Q6_K_X16;
 * else Q8_0 and Q5_0, as the Q8_0 form of the
 * same weights, SRT_Q8_0_X8; layouts in exact_q41.c and exact.c). pack_bytes: the bytes of w's packed copy (the
 * 16-row forms: its rows rounded up to 16), 0 when w is of another type, its rows are not a
 * multiple of 8 (SRT_Q8_0_X8) or the CPU has no AVX2.
 * pack writes it to dst and describes it in *out (a weight with no packed form: *out = *w,
 * dst untouched). A packed weight computes the same bits as w.
 * unpack_row writes row `row` of a packed weight back as GGUF bytes of the type it returns. */
size_t    srt_cpu_exact_pack_bytes(const srt_weight *w);
void      srt_cpu_exact_pack(const srt_weight *w, void *dst, srt_weight *out);
srt_dtype srt_cpu_exact_unpack_row(const srt_weight *w, int64_t row, void *out);

/* The prefill micro-kernel's tokens per call, and its 16-lane form (exact_avx512.c): rows A
 * and B (unpacked q, per-block scales d) x T <= SRT_EXACT_PRE_T tokens over blocks [b0, b1),
 * each row's accumulators the bits exact.c's 8-lane kernel leaves in them. xx: the T tokens'
 * x in pairs, per block b at xx + b * SRT_EXACT_PRE_T * 32, for pair p and chunk k 16 floats
 * [x_2p[32b + 8k, +8) | x_2p+1[32b + 8k, +8)] (a missing odd token's half zero). */
#define SRT_EXACT_PRE_T 8
void srt_cpu_exact_pre2_avx512(int T, const float *qa, const float *qb, const float *da, const float *db,
                               const float *xx, int64_t b0, int64_t b1, float *acc_a, float *acc_b);
/* The prefill's offsets of 16 rows on 16 lanes: off[t * 16 + i] = sum over blocks b, as a chain
 * of FMAs from 0 in block order, of o[b * ost + i] * xs[b * ldt + t], for t < SRT_EXACT_PRE_T. */
void srt_cpu_exact_off16_avx512(const float *o, int64_t ost, const float *xs, int64_t ldt, int64_t nb, float *off);
/* Decode: one work item's rows [r0, r1) of a weight (base w, row stride), and where to
 * prefetch past its end: the rows of the item this thread will likely claim next (nw, NULL:
 * none), at the same offset into it. wide: run the 16-lane kernels (srt_cpu_exact_avx512). */
typedef struct {
    const uint8_t *w, *nw;
    size_t stride, nstride;
    int64_t r0, r1, R, nr0, nr1;
    const float *x, *xs, *bias;
    int64_t ldx, ldt, nb;
    float *y;
    int wide;
} srt_exact_dec_run;

#define SRT_EXACT_PF_ROWS 16   /* decode prefetch distance, in rows */

/* What a packed decode prefetches while it computes the group of 8 rows at row r (r % 8 == 0):
 * the group SRT_EXACT_PF_ROWS rows on, in this item or else at the same offset into the next
 * one; NULL when that is past the weight's or the next item's end. */
static inline const char *srt_exact_x8_pf(const srt_exact_dec_run *d, int64_t r)
{
    int64_t pr = r + SRT_EXACT_PF_ROWS;
    if (pr < d->r1)
        return pr + 8 <= d->R ? (const char *)d->w + (size_t)pr * d->stride : NULL;
    if (d->nw && d->nr0 + (pr - d->r1) + 8 <= d->nr1)
        return (const char *)d->nw + (size_t)(d->nr0 + (pr - d->r1)) * d->nstride;
    return NULL;
}

/* Bytes of a packed Q8_0 block of 8 rows (SRT_Q8_0_X8; the layout: exact.c). */
#define SRT_EXACT_Q8X8_BLOCK 272

/* The packed Q8_0 (SRT_Q8_0_X8) decode of one token on 16 lanes: rows [r0, r1) of d (whole
 * groups of 8), two rows per register, the bits of exact.c's kern_q8x8. */
void srt_cpu_exact_x8_avx512(const srt_exact_dec_run *d);

/* Whether the exact path runs its 16-lane kernels (prefill, packed decode, Q4_0/Q4_1): 1 yes; 0 no
 * (no AVX-512, or SRT_CPU_SIMD chose another level); -1 no, because on this CPU they did not
 * give the 8-lane kernels' bits (checked once per process, before first use). */
int       srt_cpu_exact_avx512(void);

/* Q4_1, Q4_0, Q8_0, Q5_0, Q5_1 and the K-quants (exact_q41.c: x as a 24-bit fixed point per block, integer dot products; the
 * contract and layout there). matmul_n: as srt_cpu_exact_matmul_n for n weights that are all
 * of those types, packed or not (SRT_ERROR, nothing written, otherwise or without AVX2);
 * wide: the 16-lane VNNI kernel, else 8 lanes, the same bits. fast (wide only, else SRT_ERROR):
 * srt_numerics fast, x as one signed byte per element with an f32 scale per block (prep_token1),
 * the same packed weights. scratch: srt_cpu_q41_scratch_bytes. */
int    srt_cpu_q41_matmul_n(srt_threadpool *tp, int n, const srt_weight *const *w, const float *const *bias,
                            const float *x, int64_t n_tok, float *const *y, void *scratch, int wide, int fast);
size_t srt_cpu_q41_scratch_bytes(int n_threads, int64_t cols, int64_t n_tok);
size_t srt_cpu_q41_pack_bytes(const srt_weight *w);
void   srt_cpu_q41_pack(const srt_weight *w, void *dst, srt_weight *out);
srt_dtype srt_cpu_q41_unpack_row(const srt_weight *w, int64_t row, void *out);   /* the GGUF type */
/* 1 for the types this path takes: Q4_1, Q4_0, Q2_K, Q3_K, IQ4_NL, IQ4_XS and every packed
 * form, and Q8_0, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K where srt_cpu_exact_avx512() is 1 */
int    srt_cpu_q41_takes(srt_dtype t);
/* 1 when the 16-lane kernel gives the 8-lane one's bits on made-up data (srt_cpu_exact_avx512) */
int    srt_cpu_q41_wide_matches(void);

#endif
