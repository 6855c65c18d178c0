/* The elementwise ops of a transformer layer. Small inputs run on the calling thread: waking
 * the pool would cost more than the work. From a batched decode's size up (16 SmolLM2 tokens:
 * 9,216 floats a norm, 24,576 a silu) they are split: the workers still spin from the matmul
 * before, and the other thread waited through them (65,536 before; 48 x 256/64 requests at 16,
 * offline, four interleaved pairs: +0.1 to +2.9%). Each element's arithmetic is the same on any
 * slice. */
#include <math.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_kernels.h"

#define PARALLEL_MIN_ELEMS 8192

typedef struct {
    const float *x;
    const srt_weight *w;
    float eps;
    int64_t n_tok, dim;
    float *out;
} rmsnorm_job;

static inline float weight_elem(const srt_weight *w, int64_t i)
{
    switch (w->dtype) {
    case SRT_F32:  return ((const float *)w->data)[i];
    case SRT_F16:  return srt_f16_to_f32(((const uint16_t *)w->data)[i]);
    case SRT_BF16: return srt_bf16_to_f32(((const uint16_t *)w->data)[i]);
    default:       return 1.0f;   /* not a norm weight type; the loader rejects these */
    }
}

static void rmsnorm_rows(const rmsnorm_job *j, int64_t t0, int64_t t1)
{
    int64_t dim = j->dim;
    for (int64_t t = t0; t < t1; t++) {
        const float *x = j->x + t * dim;
        float *o = j->out + t * dim;
        /* eight partial sums: a vectorizable reduction, and less rounding error */
        float part[8] = { 0 };
        int64_t i = 0;
        for (; i + 8 <= dim; i += 8)
            for (int k = 0; k < 8; k++)
                part[k] += x[i + k] * x[i + k];
        for (; i < dim; i++)
            part[0] += x[i] * x[i];
        float ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
        float scale = 1.0f / sqrtf(ss / (float)dim + j->eps);
        if (j->w->dtype == SRT_F32) {
            const float *w = j->w->data;
            for (int64_t i = 0; i < dim; i++)
                o[i] = x[i] * scale * w[i];
        } else {
            for (int64_t i = 0; i < dim; i++)
                o[i] = x[i] * scale * weight_elem(j->w, i);
        }
    }
}

static void rmsnorm_task(void *arg, int ith, int nth)
{
    const rmsnorm_job *j = arg;
    rmsnorm_rows(j, j->n_tok * ith / nth, j->n_tok * (ith + 1) / nth);
}

void srt_cpu_rmsnorm(srt_threadpool *tp, const float *x, const srt_weight *w, float eps,
                     int64_t n_tok, int64_t dim, float *out)
{
    rmsnorm_job j = { x, w, eps, n_tok, dim, out };
    if (n_tok > 1 && n_tok * dim >= PARALLEL_MIN_ELEMS)
        srt_threadpool_run(tp, rmsnorm_task, &j);
    else
        rmsnorm_rows(&j, 0, n_tok);
}

typedef struct {
    const float *a, *b;
    float *out;
    int64_t n;
} binary_job;

static void silu_mul_range(const binary_job *j, int64_t i0, int64_t i1)
{
    const cpu_simd_ops *ops = srt_cpu_ops();
    void (*fn)(const float *, const float *, int64_t, float *) =
        ops->silu_mul ? ops->silu_mul : srt_cpu_silu_mul_portable;
    if (i1 > i0)
        fn(j->a + i0, j->b + i0, i1 - i0, j->out + i0);
}

/* Slices are 16-element aligned so no two threads write one cache line. */
static void slice(int64_t n, int ith, int nth, int64_t *i0, int64_t *i1)
{
    int64_t chunks = (n + 15) / 16;
    *i0 = chunks * ith / nth * 16;
    *i1 = chunks * (ith + 1) / nth * 16;
    if (*i0 > n) *i0 = n;
    if (*i1 > n) *i1 = n;
}

static void silu_mul_task(void *arg, int ith, int nth)
{
    const binary_job *j = arg;
    int64_t i0, i1;
    slice(j->n, ith, nth, &i0, &i1);
    silu_mul_range(j, i0, i1);
}

void srt_cpu_silu_mul(srt_threadpool *tp, const float *gate, const float *up, int64_t n, float *out)
{
    binary_job j = { gate, up, out, n };
    if (n >= PARALLEL_MIN_ELEMS)
        srt_threadpool_run(tp, silu_mul_task, &j);
    else
        silu_mul_range(&j, 0, n);
}

static void add_range(const binary_job *j, int64_t i0, int64_t i1)
{
    for (int64_t i = i0; i < i1; i++)
        j->out[i] += j->a[i];
}

static void add_task(void *arg, int ith, int nth)
{
    const binary_job *j = arg;
    int64_t i0, i1;
    slice(j->n, ith, nth, &i0, &i1);
    add_range(j, i0, i1);
}

void srt_cpu_add(srt_threadpool *tp, float *y, const float *x, int64_t n)
{
    binary_job j = { x, NULL, y, n };
    if (n >= PARALLEL_MIN_ELEMS)
        srt_threadpool_run(tp, add_task, &j);
    else
        add_range(&j, 0, n);
}
