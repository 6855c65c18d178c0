/* Matmul front end: picks the SIMD path once, quantizes activations into the caller's
 * scratch, and splits the output over the thread pool (rows for decode, row x token
 * tiles for prefill). */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
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
#if defined(__clang__)
    /* clang's __builtin_cpu_supports has no "f16c" (the fuzz build): CPUID.1:ECX bit 29 */
    unsigned a, b, c, d;
    int f16c = __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1);
#else
    int f16c = __builtin_cpu_supports("f16c");
#endif
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
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
    return t == SRT_Q8_0 || t == SRT_Q4_0 || t == SRT_Q4_1 || t == SRT_Q5_0 || t == SRT_Q5_1 || t == SRT_Q4_K ||
           t == SRT_Q5_K || t == SRT_Q6_K || t == SRT_Q2_K || t == SRT_Q3_K || t == SRT_IQ4_NL || t == SRT_IQ4_XS;
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
#define PARALLEL_MIN_MACS (64 * 1024)   /* below this a pool wake-up (~1-2 us) costs more than it saves */
#define MAX_MULTI SRT_CPU_MATMUL_MAX_MULTI

/* One or more weights sharing the input x: their rows are one index space
 * (matrix 0's rows, then matrix 1's, ...) split over the threads. */
typedef struct {
    const cpu_simd_ops *ops;
    int n;
    const srt_weight *w[MAX_MULTI];
    const float *bias[MAX_MULTI];
    float *y[MAX_MULTI];
    int64_t grain_begin[MAX_MULTI + 1];   /* decode: cumulative 4-row grains */
    int64_t chunk_begin[MAX_MULTI + 1];   /* prefill: cumulative row chunks */
    const float *x;
    int64_t cols, n_tok;
    int8_t *aq;                           /* NULL when no weight is quantized */
    q8_scale *ads;
    int64_t qstride, nb;
    /* prefill work items: token block (outer) x row chunk (inner), claimed dynamically */
    int64_t row_chunk, n_items;
} matmul_job;

static void quantize_task(void *arg, int ith, int nth)
{
    const matmul_job *j = arg;
    for (int64_t t = j->n_tok * ith / nth; t < j->n_tok * (ith + 1) / nth; t++)
        j->ops->quantize_q8(j->x + t * j->cols, j->cols, j->aq + t * j->qstride, j->ads + t * j->nb);
}

static void run_tile(const matmul_job *j, int m, int64_t r0, int nr, int64_t t0, int nt)
{
    const srt_weight *w = j->w[m];
    const uint8_t *wr = (const uint8_t *)w->data + (size_t)r0 * w->row_stride;
    float *y = j->y[m] + t0 * w->rows + r0;
    if (is_quantized(w->dtype)) {
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
    const float *bias = j->bias[m];
    if (bias)
        for (int t = 0; t < nt; t++)
            for (int r = 0; r < nr; r++)
                y[t * w->rows + r] += bias[r0 + r];
}

/* Decode: item i of j->n_items is an even share of the row grains; every thread streams
 * its own runs of W. */
static void decode_item(void *arg, int64_t i, int ith)
{
    matmul_job *j = arg;
    (void)ith;
    int64_t total = j->grain_begin[j->n];
    int64_t g0 = total * i / j->n_items, g1 = total * (i + 1) / j->n_items;
    for (int m = 0; m < j->n && g0 < g1; m++) {
        int64_t lo = g0 > j->grain_begin[m] ? g0 : j->grain_begin[m];
        int64_t hi = g1 < j->grain_begin[m + 1] ? g1 : j->grain_begin[m + 1];
        if (lo >= hi)
            continue;
        int64_t r0 = (lo - j->grain_begin[m]) * ROW_GRAIN;
        int64_t r1 = (hi - j->grain_begin[m]) * ROW_GRAIN;
        if (r1 > j->w[m]->rows)
            r1 = j->w[m]->rows;
        run_tile(j, m, r0, (int)(r1 - r0), 0, (int)j->n_tok);
    }
}

/* Prefill: items are claimed in order, so threads working at the same time share a token
 * block (its activations stay in cache) and take different rows. */
static void prefill_item(void *arg, int64_t i, int ith)
{
    matmul_job *j = arg;
    (void)ith;
    int64_t n_chunks = j->chunk_begin[j->n];
    int64_t t0 = i / n_chunks * PREFILL_TOK_BLOCK, c = i % n_chunks;
    int m = 0;
    while (c >= j->chunk_begin[m + 1])
        m++;
    int64_t r0 = (c - j->chunk_begin[m]) * j->row_chunk, rows = j->w[m]->rows;
    int64_t nt = j->n_tok - t0 < PREFILL_TOK_BLOCK ? j->n_tok - t0 : PREFILL_TOK_BLOCK;
    int64_t nr = rows - r0 < j->row_chunk ? rows - r0 : j->row_chunk;
    run_tile(j, m, r0, (int)nr, t0, (int)nt);
}

/* Decode grains, and prefill row chunks small enough for every thread to get about four
 * items but no smaller than 16 rows (a tile should reuse its activations) nor larger
 * than 64. */
static void plan(matmul_job *j, int nth)
{
    int64_t rows = 0;
    j->grain_begin[0] = 0;
    for (int m = 0; m < j->n; m++) {
        rows += j->w[m]->rows;
        j->grain_begin[m + 1] = j->grain_begin[m] + (j->w[m]->rows + ROW_GRAIN - 1) / ROW_GRAIN;
    }
    int64_t n_tblk = (j->n_tok + PREFILL_TOK_BLOCK - 1) / PREFILL_TOK_BLOCK;
    int64_t want_chunks = (4 * (int64_t)nth + n_tblk - 1) / n_tblk;
    int64_t chunk = (rows + want_chunks - 1) / want_chunks;
    chunk = (chunk + ROW_GRAIN - 1) / ROW_GRAIN * ROW_GRAIN;
    if (chunk < 16)
        chunk = 16;
    if (chunk > 64)
        chunk = 64;
    j->row_chunk = chunk;
    j->chunk_begin[0] = 0;
    for (int m = 0; m < j->n; m++)
        j->chunk_begin[m + 1] = j->chunk_begin[m] + (j->w[m]->rows + chunk - 1) / chunk;
    j->n_items = j->chunk_begin[j->n] * n_tblk;
    if (j->n_tok < PREFILL_MIN_TOK) {
        /* decode: about eight shares per thread (a thread the OS runs late finds the rest
         * taken), none smaller than one grain */
        int64_t total = j->grain_begin[j->n];
        j->n_items = 8 * (int64_t)nth < total ? 8 * (int64_t)nth : total;
    }
}

size_t srt_cpu_matmul_multi_scratch_bytes(int n, const srt_weight *const *w, int64_t n_tok)
{
    size_t need = 0;
    for (int i = 0; i < n; i++) {
        size_t s = srt_cpu_matmul_scratch_bytes(w[i], n_tok);
        if (s > need)
            need = s;
    }
    return need;
}

int srt_cpu_matmul_multi(srt_threadpool *tp, int n, const srt_weight *const *w,
                         const float *const *bias, const float *x, int64_t n_tok,
                         float *const *y, void *scratch)
{
    if (n < 1 || n > MAX_MULTI || n_tok < 0)
        return SRT_ERROR;
    matmul_job j = { .ops = srt_cpu_ops(), .n = n, .x = x, .cols = w[0]->cols, .n_tok = n_tok };
    int any_quant = 0;
    double macs = 0;
    for (int m = 0; m < n; m++) {
        if (w[m]->cols != j.cols || w[m]->rows < 0 || w[m]->dtype == SRT_I32 ||
            (int)w[m]->dtype < 0 || w[m]->dtype >= SRT_DTYPE_COUNT)
            return SRT_ERROR;
        if (is_quantized(w[m]->dtype) && w[m]->cols % srt_dtype_block_elems(w[m]->dtype) != 0)
            return SRT_ERROR;
        j.w[m] = w[m];
        j.bias[m] = bias ? bias[m] : NULL;
        j.y[m] = y[m];
        any_quant |= is_quantized(w[m]->dtype);
        macs += (double)w[m]->rows * (double)w[m]->cols * (double)n_tok;
    }
    if (n_tok == 0 || macs == 0)
        return SRT_OK;
    int parallel = tp && srt_threadpool_size(tp) > 1 && macs >= PARALLEL_MIN_MACS;
    if (any_quant) {
        uintptr_t base = ((uintptr_t)scratch + 63) & ~(uintptr_t)63;
        j.qstride = q_stride(j.cols);
        j.nb = j.cols / QK;
        j.aq = (int8_t *)base;
        j.ads = (q8_scale *)(base + (size_t)n_tok * j.qstride);
        if (parallel && n_tok >= 8)
            srt_threadpool_run(tp, quantize_task, &j);
        else
            quantize_task(&j, 0, 1);
    }
    plan(&j, parallel ? srt_threadpool_size(tp) : 1);
    void (*item)(void *, int64_t, int) = n_tok < PREFILL_MIN_TOK ? decode_item : prefill_item;
    if (parallel)
        srt_threadpool_run_items(tp, item, &j, j.n_items);
    else
        for (int64_t i = 0; i < j.n_items; i++)
            item(&j, i, 0);
    return SRT_OK;
}

void srt_cpu_matmul(srt_threadpool *tp, const srt_weight *w, const float *bias,
                    const float *x, int64_t n_tok, float *y, void *scratch)
{
    (void)srt_cpu_matmul_multi(tp, 1, &w, &bias, x, n_tok, &y, scratch);
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
