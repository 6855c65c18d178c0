/* The exact matmul: f32 activations times the weights HF computes with, accumulated in f32
 * (AVX2 + FMA, 8 lanes). Nothing is rounded to fewer bits: a quantized block's weights are
 * w = d*q + o (Q4_1: o = m; Q4_0: q - 8 as d*q - 8d; Q8_0: o = 0), and
 *     sum_j w_j x_j = d * sum_j q_j x_j + o * sum_j x_j
 * where q_j are small integers (exact as floats) and sum_j x_j, the block sum of x, is
 * computed once per token and shared by every row. Per block and (row, token) that is four
 * FMA-class ops on unpacked q and one FMA for the scale; the offsets of a row meet the block
 * sums in one short dot product at the end (the block offset factored out of the loop).
 *
 * Batch invariance: a (row, token) output is always
 *     hsum(acc) + odot(offsets of the row, block sums of the token) + bias
 * with acc one 8-lane accumulator taking, block by block in order,
 *     t = q[0:8]*x[0:8]; t += q[8:16]*x[8:16]; t += q[16:24]*x[16:24]; t += q[24:32]*x[24:32];
 *     acc += t * d          (each += one FMA)
 * Decode (q unpacked in registers, 4 rows x up to 2 tokens) and prefill (a chunk of rows
 * unpacked once into per-thread scratch, then one row x 8 tokens at a time) both run exactly
 * that sequence, so a token's logits have the same bits alone, in any batch, chunked or
 * prefix-cached. */
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/cpu_exact.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_kernels.h"
#include "srt/common.h"

#define DEC_ROWS 4          /* decode: rows dequantized together (independent FMA chains) */
#define DEC_MAX_TOK 2       /* decode kernel up to this many tokens; the prefill one beyond */
#define PF_GROUPS 4         /* decode prefetch distance, in groups of DEC_ROWS rows */
#define PRE_ROWS 16         /* prefill: rows unpacked into scratch per work item */
#define PRE_TOK 48          /* prefill: tokens per work item (a multiple of PRE_T) */
#define PRE_T 8             /* prefill micro-kernel: one row x PRE_T tokens */

/* Scratch: per thread PRE_ROWS rows of unpacked weights (cols floats of q, then nb scales
 * and nb offsets each), then the block sums of x (n_tok x nb). */
static size_t per_thread_floats(int64_t cols) { return PRE_ROWS * ((size_t)cols + 2 * (size_t)(cols / 32)); }

size_t srt_cpu_exact_scratch_floats(int n_threads, int64_t cols, int64_t n_tok)
{
    return (size_t)(n_threads > 0 ? n_threads : 1) * per_thread_floats(cols) +
           (size_t)(n_tok > 0 ? n_tok : 1) * (size_t)(cols / 32) + 16;
}
#if defined(__x86_64__)
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) TGT

enum { FMT_Q4_0, FMT_Q4_1, FMT_Q8_0 };
static const size_t fmt_bytes[] = { sizeof(blk_q4_0), sizeof(blk_q4_1), sizeof(blk_q8_0) };

INLINE float half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* One block: q as four 8-float vectors in element order, its scale d and offset o. */
INLINE void unpack(int fmt, const uint8_t *blk, __m256 q[4], float *d, float *o)
{
    *d = half_at(blk);
    if (fmt == FMT_Q8_0) {
        *o = 0.0f;
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + 8 * k))));
        return;
    }
    const uint8_t *qs = blk + (fmt == FMT_Q4_1 ? 4 : 2);
    *o = fmt == FMT_Q4_1 ? half_at(blk + 2) : -8.0f * *d;   /* -8d is exact */
    __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)qs));
    __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8)));
    __m256i m = _mm256_set1_epi32(0x0F);
    q[0] = _mm256_cvtepi32_ps(_mm256_and_si256(a, m));
    q[1] = _mm256_cvtepi32_ps(_mm256_and_si256(b, m));
    q[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(a, 4));
    q[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
}

/* sum_j q_j x_j of one block, the fixed order of the header comment */
INLINE __m256 block_dot(const __m256 q[4], const float *x)
{
    __m256 t = _mm256_mul_ps(q[0], _mm256_loadu_ps(x));
    t = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(x + 8), t);
    t = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(x + 16), t);
    return _mm256_fmadd_ps(q[3], _mm256_loadu_ps(x + 24), t);
}

INLINE float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The offsets of a row against the block sums of a token: 8 blocks per FMA, then the tail
 * in order. One function for decode and prefill (batch invariance). */
TGT static float odot(const float *o, const float *xs, int64_t nb)
{
    __m256 a = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8)
        a = _mm256_fmadd_ps(_mm256_loadu_ps(o + b), _mm256_loadu_ps(xs + b), a);
    float s = hsum(a);
    for (; b < nb; b++)
        s = __builtin_fmaf(o[b], xs[b], s);
    return s;
}

/* Block sums of x, one function for every path. */
TGT static void block_sums(const float *x, int64_t nb, float *xs)
{
    for (int64_t b = 0; b < nb; b++, x += QK) {
        __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)),
                                 _mm256_add_ps(_mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)));
        xs[b] = hsum(s);
    }
}

/* Decode: DEC_ROWS rows (wr[r]; rows past nr are copies of row 0, not stored) x T tokens.
 * ob: DEC_ROWS x nb floats for the rows' offsets. */
INLINE void kern_dec(int fmt, int T, const uint8_t *const *wr, int nr, size_t stride, const float *x,
                     int64_t ldx, const float *xs, int64_t nb, const float *bias, float *y, int64_t ldy,
                     float *ob)
{
    const size_t bb = fmt_bytes[fmt];
    __m256 acc[DEC_ROWS][DEC_MAX_TOK];
#pragma GCC unroll 4
    for (int r = 0; r < DEC_ROWS; r++)
#pragma GCC unroll 2
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_setzero_ps();
    /* the next groups' rows are one contiguous run (the four rows here are four short
     * interleaved streams, which the hardware prefetcher follows badly): prefetch it
     * spread over this loop */
    const char *pf = (const char *)wr[0] + PF_GROUPS * DEC_ROWS * stride;
    int64_t pf_lines = nr == DEC_ROWS ? ((int64_t)(DEC_ROWS * stride) / 64 + nb - 1) / nb + 1 : 0;
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t k = 0; k < pf_lines; k++, pf += 64)
            _mm_prefetch(pf, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int r = 0; r < DEC_ROWS; r++) {
            __m256 q[4];
            float d;
            unpack(fmt, wr[r] + b * bb, q, &d, &ob[r * nb + b]);
            __m256 dv = _mm256_set1_ps(d);
#pragma GCC unroll 2
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm256_fmadd_ps(block_dot(q, x + t * ldx + b * QK), dv, acc[r][t]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < T; t++) {
            float v = hsum(acc[r][t]);
            if (fmt != FMT_Q8_0)
                v += odot(ob + r * nb, xs + t * nb, nb);
            y[t * ldy + r] = v + (bias ? bias[r] : 0.0f);
        }
}

/* Prefill: one unpacked row (q: cols floats, d and o: nb floats each) x T tokens. */
INLINE void kern_pre(int fmt, int T, const float *q, const float *dq, const float *o, const float *x,
                     int64_t ldx, const float *xs, int64_t nb, float bias, float *y, int64_t ldy)
{
    __m256 acc[PRE_T];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256 qv[4] = { _mm256_loadu_ps(q + b * QK), _mm256_loadu_ps(q + b * QK + 8),
                         _mm256_loadu_ps(q + b * QK + 16), _mm256_loadu_ps(q + b * QK + 24) };
        __m256 dv = _mm256_broadcast_ss(dq + b);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_fmadd_ps(block_dot(qv, x + t * ldx + b * QK), dv, acc[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        float v = hsum(acc[t]);
        if (fmt != FMT_Q8_0)
            v += odot(o, xs + t * nb, nb);
        y[t * ldy] = v + bias;
    }
}

#define PRE_CASE(fmt, T) \
    case T: kern_pre(fmt, T, q, dq, o, x, ldx, xs, nb, bias, y, ldy); return;
#define FMT_FNS(fmt)                                                                          \
    TGT static void dec_##fmt(int T, const uint8_t *const *wr, int nr, size_t stride,         \
                              const float *x, int64_t ldx, const float *xs, int64_t nb,      \
                              const float *bias, float *y, int64_t ldy, float *ob)            \
    {                                                                                          \
        if (T == 2) kern_dec(fmt, 2, wr, nr, stride, x, ldx, xs, nb, bias, y, ldy, ob);        \
        else kern_dec(fmt, 1, wr, nr, stride, x, ldx, xs, nb, bias, y, ldy, ob);               \
    }                                                                                          \
    TGT static void pre_##fmt(int T, const float *q, const float *dq, const float *o,         \
                              const float *x, int64_t ldx, const float *xs, int64_t nb,      \
                              float bias, float *y, int64_t ldy)                              \
    {                                                                                          \
        switch (T) {                                                                           \
        PRE_CASE(fmt, 8) PRE_CASE(fmt, 7) PRE_CASE(fmt, 6) PRE_CASE(fmt, 5)                    \
        PRE_CASE(fmt, 4) PRE_CASE(fmt, 3) PRE_CASE(fmt, 2) default: PRE_CASE(fmt, 1)           \
        }                                                                                      \
    }                                                                                          \
    TGT static void unp_##fmt(const uint8_t *row, int64_t nb, float *q, float *dq, float *o)  \
    {                                                                                          \
        for (int64_t b = 0; b < nb; b++) {                                                     \
            __m256 v[4];                                                                       \
            unpack(fmt, row + b * fmt_bytes[fmt], v, &dq[b], &o[b]);                           \
            for (int k = 0; k < 4; k++)                                                        \
                _mm256_storeu_ps(q + b * QK + 8 * k, v[k]);                                    \
        }                                                                                      \
    }
FMT_FNS(FMT_Q4_0)
FMT_FNS(FMT_Q4_1)
FMT_FNS(FMT_Q8_0)

typedef void (*dec_fn)(int T, const uint8_t *const *wr, int nr, size_t stride, const float *x, int64_t ldx,
                       const float *xs, int64_t nb, const float *bias, float *y, int64_t ldy, float *ob);
typedef void (*pre_fn)(int T, const float *q, const float *dq, const float *o, const float *x, int64_t ldx,
                       const float *xs, int64_t nb, float bias, float *y, int64_t ldy);
typedef void (*unp_fn)(const uint8_t *row, int64_t nb, float *q, float *dq, float *o);

typedef struct {
    const srt_weight *w;
    const float *bias, *x, *xs;
    float *y;
    int64_t n_tok, nb;
    dec_fn dec;
    pre_fn pre;
    unp_fn unp;
    float *scratch;              /* per thread: per_thread_floats(cols) */
    int64_t n_rchunk, n_items;
    _Atomic int64_t next;
} exact_job;

static void exact_task(void *arg, int ith, int nth)
{
    exact_job *j = arg;
    const srt_weight *w = j->w;
    int64_t C = w->cols, R = w->rows, nb = j->nb;
    float *buf = j->scratch + (size_t)ith * per_thread_floats(C);
    if (j->n_tok <= DEC_MAX_TOK) {
        /* decode: an even split of the rows; every thread streams its own slice of W */
        int64_t groups = (R + DEC_ROWS - 1) / DEC_ROWS;
        int64_t r0 = groups * ith / nth * DEC_ROWS, r1 = groups * (ith + 1) / nth * DEC_ROWS;
        if (r1 > R)
            r1 = R;
        for (int64_t r = r0; r < r1; r += DEC_ROWS) {
            int n = r1 - r < DEC_ROWS ? (int)(r1 - r) : DEC_ROWS;
            const uint8_t *wr[DEC_ROWS];
            for (int k = 0; k < DEC_ROWS; k++)
                wr[k] = (const uint8_t *)w->data + (size_t)(r + (k < n ? k : 0)) * w->row_stride;
            j->dec((int)j->n_tok, wr, n, w->row_stride, j->x, C, j->xs, nb, j->bias ? j->bias + r : NULL,
                   j->y + r, R, buf);
        }
        return;
    }
    float *q = buf, *dq = buf + PRE_ROWS * C, *o = dq + PRE_ROWS * nb;
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (i >= j->n_items)
            return;
        /* token block outer: threads at work together share its activations in cache */
        int64_t t0 = i / j->n_rchunk * PRE_TOK, r0 = i % j->n_rchunk * PRE_ROWS;
        int64_t nr = R - r0 < PRE_ROWS ? R - r0 : PRE_ROWS;
        int64_t t1 = j->n_tok - t0 < PRE_TOK ? j->n_tok : t0 + PRE_TOK;
        for (int64_t r = 0; r < nr; r++)
            j->unp((const uint8_t *)w->data + (size_t)(r0 + r) * w->row_stride, nb, q + r * C, dq + r * nb,
                   o + r * nb);
        for (int64_t t = t0; t < t1; t += PRE_T) {
            int nt = t1 - t < PRE_T ? (int)(t1 - t) : PRE_T;
            for (int64_t r = 0; r < nr; r++)
                j->pre(nt, q + r * C, dq + r * nb, o + r * nb, j->x + t * C, C, j->xs + t * nb, nb,
                       j->bias ? j->bias[r0 + r] : 0.0f, j->y + t * R + r0 + r, R);
        }
    }
}

int srt_cpu_exact_matmul(srt_threadpool *tp, const srt_weight *w, const float *bias, const float *x,
                         int64_t n_tok, float *y, float *scratch)
{
    exact_job j = { .w = w, .bias = bias, .x = x, .y = y, .n_tok = n_tok, .nb = w->cols / QK };
    if (!srt_cpu_have_avx2())
        return SRT_ERROR;
    switch (w->dtype) {
    case SRT_Q4_0: j.dec = dec_FMT_Q4_0; j.pre = pre_FMT_Q4_0; j.unp = unp_FMT_Q4_0; break;
    case SRT_Q4_1: j.dec = dec_FMT_Q4_1; j.pre = pre_FMT_Q4_1; j.unp = unp_FMT_Q4_1; break;
    case SRT_Q8_0: j.dec = dec_FMT_Q8_0; j.pre = pre_FMT_Q8_0; j.unp = unp_FMT_Q8_0; break;
    default: return SRT_ERROR;
    }
    if (w->cols % QK || n_tok < 0)
        return SRT_ERROR;
    if (n_tok == 0)
        return SRT_OK;
    int nth = tp ? srt_threadpool_size(tp) : 1;
    float *xs = scratch + (size_t)nth * per_thread_floats(w->cols);
    for (int64_t t = 0; t < n_tok; t++)
        block_sums(x + t * w->cols, j.nb, xs + t * j.nb);
    j.xs = xs;
    j.scratch = scratch;
    j.n_rchunk = (w->rows + PRE_ROWS - 1) / PRE_ROWS;
    j.n_items = j.n_rchunk * ((n_tok + PRE_TOK - 1) / PRE_TOK);
    atomic_store_explicit(&j.next, 0, memory_order_relaxed);
    double macs = (double)w->rows * (double)w->cols * (double)n_tok;
    if (nth > 1 && macs >= 64 * 1024)
        srt_threadpool_run(tp, exact_task, &j);
    else
        exact_task(&j, 0, 1);
    return SRT_OK;
}

#else

int srt_cpu_exact_matmul(srt_threadpool *tp, const srt_weight *w, const float *bias, const float *x,
                         int64_t n_tok, float *y, float *scratch)
{
    return SRT_ERROR;
}

#endif
