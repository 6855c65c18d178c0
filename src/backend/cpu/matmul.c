/* Matmul front end: picks the SIMD path once, quantizes activations into the caller's
 * scratch, and splits the output over the thread pool (rows for decode, row x token
 * tiles for prefill). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_kernels.h"
#include "srt/common.h"

/* ---- SIMD path selection ---- */

int srt_cpu_have_avx2(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

int srt_cpu_have_avx512(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return srt_cpu_have_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

static const cpu_simd_ops *chosen_ops;

static const cpu_simd_ops *ops_by_name(const char *name)
{
    if (!strcmp(name, "portable"))
        return &srt_cpu_ops_portable;
    if (!strcmp(name, "avx2") && srt_cpu_have_avx2())
        return &srt_cpu_ops_avx2;
    if (!strcmp(name, "avx512") && srt_cpu_have_avx512())
        return &srt_cpu_ops_avx512;
    return NULL;
}

const cpu_simd_ops *srt_cpu_ops(void)
{
    const cpu_simd_ops *ops = __atomic_load_n(&chosen_ops, __ATOMIC_ACQUIRE);
    if (ops)
        return ops;
    const char *env = getenv("SRT_CPU_SIMD");
    if (env && *env)
        ops = ops_by_name(env);
    if (!ops)
        ops = srt_cpu_have_avx512() ? &srt_cpu_ops_avx512
            : srt_cpu_have_avx2()   ? &srt_cpu_ops_avx2
                                    : &srt_cpu_ops_portable;
    __atomic_store_n(&chosen_ops, ops, __ATOMIC_RELEASE);
    return ops;
}

int srt_cpu_force_simd(const char *name)
{
    const cpu_simd_ops *ops = name ? ops_by_name(name) : NULL;
    if (!ops)
        return SRT_ERROR;
    __atomic_store_n(&chosen_ops, ops, __ATOMIC_RELEASE);
    return SRT_OK;
}

const char *srt_cpu_simd_name(void)
{
    return srt_cpu_ops()->name;
}

/* ---- scratch layout: per token, the int8 values (64-byte aligned rows), then the scales ---- */

static int is_quantized(srt_dtype t)
{
    return t == SRT_Q8_0 || t == SRT_Q4_0 || t == SRT_Q4_1 || t == SRT_Q4_K || t == SRT_Q6_K;
}

static int64_t q_stride(int64_t cols) { return (cols + 63) / 64 * 64; }

size_t srt_cpu_matmul_scratch_bytes(const srt_weight *w, int64_t n_tok)
{
    if (!is_quantized(w->dtype) || n_tok <= 0)
        return 0;
    int64_t nb = w->cols / QK;
    size_t ds = ((size_t)n_tok * nb * sizeof(q8_scale) + 63) / 64 * 64;
    return 64 + (size_t)n_tok * q_stride(w->cols) + ds;
}

/* ---- the parallel job ---- */

#define PREFILL_MIN_TOK 4         /* from here on, tiles of rows x tokens */
#define PREFILL_TOK_BLOCK 32
#define ROW_GRAIN 4               /* the micro-kernels' row count */
#define PARALLEL_MIN_MACS (128 * 1024)

typedef struct {
    const cpu_simd_ops *ops;
    const srt_weight *w;
    const float *bias;
    const float *x;
    int64_t n_tok;
    float *y;
    int8_t *aq;
    q8_scale *ads;
    int64_t qstride, nb;
    /* prefill work items: token block (outer) x row chunk (inner), claimed dynamically */
    int64_t row_chunk, n_row_chunks, n_items;
    _Atomic int64_t next_item;
} matmul_job;

static void quantize_task(void *arg, int ith, int nth)
{
    const matmul_job *j = arg;
    int64_t cols = j->w->cols;
    for (int64_t t = j->n_tok * ith / nth; t < j->n_tok * (ith + 1) / nth; t++)
        j->ops->quantize_q8(j->x + t * cols, cols, j->aq + t * j->qstride, j->ads + t * j->nb);
}

static void run_tile(const matmul_job *j, int64_t r0, int nr, int64_t t0, int nt)
{
    const srt_weight *w = j->w;
    const uint8_t *wr = (const uint8_t *)w->data + (size_t)r0 * w->row_stride;
    float *y = j->y + t0 * w->rows + r0;
    if (j->aq) {
        tile_q8_fn fn = j->ops->tile_q8[w->dtype];
        if (!fn && j->ops == &srt_cpu_ops_avx512)   /* AVX-512 CPUs run the AVX2 kernels too */
            fn = srt_cpu_ops_avx2.tile_q8[w->dtype];
        if (!fn)
            fn = srt_cpu_ops_portable.tile_q8[w->dtype];
        fn(wr, w->row_stride, nr, j->aq + t0 * j->qstride, j->ads + t0 * j->nb, j->qstride,
           j->nb, nt, y, w->rows);
    } else {
        tile_f32_fn fn = j->ops->tile_f32[w->dtype];
        if (!fn && j->ops == &srt_cpu_ops_avx512)
            fn = srt_cpu_ops_avx2.tile_f32[w->dtype];
        if (!fn)
            fn = srt_cpu_ops_portable.tile_f32[w->dtype];
        fn(wr, w->row_stride, nr, j->x + t0 * w->cols, w->cols, w->cols, nt, y, w->rows);
    }
    if (j->bias)
        for (int t = 0; t < nt; t++)
            for (int r = 0; r < nr; r++)
                y[t * w->rows + r] += j->bias[r0 + r];
}

static void matmul_task(void *arg, int ith, int nth)
{
    matmul_job *j = arg;
    int64_t rows = j->w->rows;
    if (j->n_tok < PREFILL_MIN_TOK) {
        /* Decode: an even split of rows; every thread streams its own slice of W. */
        int64_t grains = (rows + ROW_GRAIN - 1) / ROW_GRAIN;
        int64_t r0 = grains * ith / nth * ROW_GRAIN, r1 = grains * (ith + 1) / nth * ROW_GRAIN;
        if (r1 > rows)
            r1 = rows;
        if (r0 < r1)
            run_tile(j, r0, (int)(r1 - r0), 0, (int)j->n_tok);
        return;
    }
    /* Prefill: items are claimed in order, so threads working at the same time share a
     * token block (its activations stay in cache) and take different rows. */
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&j->next_item, 1, memory_order_relaxed);
        if (i >= j->n_items)
            return;
        int64_t t0 = i / j->n_row_chunks * PREFILL_TOK_BLOCK;
        int64_t r0 = i % j->n_row_chunks * j->row_chunk;
        int64_t nt = j->n_tok - t0 < PREFILL_TOK_BLOCK ? j->n_tok - t0 : PREFILL_TOK_BLOCK;
        int64_t nr = rows - r0 < j->row_chunk ? rows - r0 : j->row_chunk;
        run_tile(j, r0, (int)nr, t0, (int)nt);
    }
}

/* Row chunks small enough for every thread to get about four items, but no smaller than
 * 16 rows (a tile should reuse its activations) nor larger than 64. */
static void plan_prefill(matmul_job *j, int nth)
{
    int64_t rows = j->w->rows;
    int64_t n_tblk = (j->n_tok + PREFILL_TOK_BLOCK - 1) / PREFILL_TOK_BLOCK;
    int64_t want_chunks = (4 * (int64_t)nth + n_tblk - 1) / n_tblk;
    int64_t chunk = (rows + want_chunks - 1) / want_chunks;
    chunk = (chunk + ROW_GRAIN - 1) / ROW_GRAIN * ROW_GRAIN;
    if (chunk < 16)
        chunk = 16;
    if (chunk > 64)
        chunk = 64;
    j->row_chunk = chunk;
    j->n_row_chunks = (rows + chunk - 1) / chunk;
    j->n_items = j->n_row_chunks * n_tblk;
    atomic_store_explicit(&j->next_item, 0, memory_order_relaxed);
}

void srt_cpu_matmul(srt_threadpool *tp, const srt_weight *w, const float *bias,
                    const float *x, int64_t n_tok, float *y, void *scratch)
{
    if (n_tok <= 0 || w->rows <= 0)
        return;
    matmul_job j = { .ops = srt_cpu_ops(), .w = w, .bias = bias, .x = x, .n_tok = n_tok, .y = y };
    int parallel = tp && srt_threadpool_size(tp) > 1 &&
                   (double)w->rows * (double)w->cols * (double)n_tok >= PARALLEL_MIN_MACS;
    if (is_quantized(w->dtype)) {
        uintptr_t base = ((uintptr_t)scratch + 63) & ~(uintptr_t)63;
        j.qstride = q_stride(w->cols);
        j.nb = w->cols / QK;
        j.aq = (int8_t *)base;
        j.ads = (q8_scale *)(base + (size_t)n_tok * j.qstride);
        if (parallel && n_tok >= 8)
            srt_threadpool_run(tp, quantize_task, &j);
        else
            quantize_task(&j, 0, 1);
    }
    plan_prefill(&j, parallel ? srt_threadpool_size(tp) : 1);
    if (parallel)
        srt_threadpool_run(tp, matmul_task, &j);
    else
        matmul_task(&j, 0, 1);
}

/* ---- reference ---- */

void srt_cpu_matmul_ref(const srt_weight *w, const float *bias, const float *x,
                        int64_t n_tok, float *y)
{
    int be = srt_dtype_block_elems(w->dtype);
    size_t bb = srt_dtype_block_bytes(w->dtype);
    float buf[QK_K];
    if (be <= 0 || be > QK_K || w->cols % be != 0)
        return;
    for (int64_t t = 0; t < n_tok; t++) {
        for (int64_t r = 0; r < w->rows; r++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_stride;
            double acc = 0.0;
            for (int64_t c = 0; c < w->cols; c += be) {
                srt_cpu_dequant(w->dtype, row + (size_t)(c / be) * bb, be, buf);
                for (int k = 0; k < be; k++)
                    acc += (double)buf[k] * (double)x[t * w->cols + c + k];
            }
            y[t * w->rows + r] = (float)acc + (bias ? bias[r] : 0.0f);
        }
    }
}
