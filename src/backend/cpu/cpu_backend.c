/* The CPU implementation of the backend ops table: the kernels of cpu_kernels.h on a
 * thread pool, plus the few ops that live only here (RoPE, KV store, embedding). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_exact.h"
#include "backend/cpu/cpu_precise.h"
#include "backend/cpu/cpu_kernels.h"
#include "srt/backend.h"

typedef struct cpu_backend {
    srt_backend     base;
    srt_threadpool *tp;
    void           *scratch;
    size_t          scratch_bytes;
    int             reference;    /* SRT_CPU_MATMUL=reference: f32 activations, scalar (slow; for checks) */
    int             precise;      /* f32 activations against dequantized weight rows */
    int             exact_simd;   /* precise on AVX2/AVX-512: the register-dequantizing kernels */
    int             fast_int;     /* not precise, 16-lane VNNI: exact_q41.c's kernels with x of one
                                   * digit for the types they take (the 8-bit kernels of matmul.c
                                   * leave a row's sums in lanes to fold: ~2.5x the cycles) */
    srt_dot_f32_fn  dot;
    srt_f32_to_f16_row_fn to_f16;
    float          *ones;         /* SILU_CHUNK ones: silu(x) = silu_mul(x, 1), bit for bit as fused */
    float          *attn_scratch; /* split-decode partials, for head_dim <= ATTN_MAX_HD */
    size_t          attn_floats;
} cpu_backend;

#define SILU_CHUNK 65536
#define ATTN_MAX_HD 256

#define PRECISE_TILE 16   /* weight rows dequantized at once, reused across all tokens */

/* Precise matmul, batch-invariant: a (row, token) output is one function of that row and
 * that token whatever the batch: the fused dequant-dot kernel for the formats that have
 * one (at every token count, so decode and prefill agree bit for bit), else
 * dequantize-then-dot. Scratch: the per-thread dequantized tiles, then the block sums of
 * x for the fused kernels. */
static size_t precise_scratch(const cpu_backend *c, const srt_weight *w, int64_t n_tok)
{
    size_t fused = (size_t)srt_threadpool_size(c->tp) * PRECISE_TILE * (size_t)w->cols * sizeof(float) +
                   (size_t)(n_tok > 0 ? n_tok : 1) * (size_t)(w->cols / 32 + 1) * sizeof(float);
    size_t exact = srt_cpu_exact_scratch_floats(srt_threadpool_size(c->tp), w->cols, n_tok) * sizeof(float);
    return fused > exact ? fused : exact;
}

static cpu_backend *cpu(srt_backend *be) { return (cpu_backend *)be->impl; }

/* whether fast's one-digit kernels take these weights (all of them, or none: one region) */
static int fast_q41(const cpu_backend *c, int n, const srt_weight *const *w)
{
    if (!c->fast_int)
        return 0;
    for (int k = 0; k < n; k++)
        if (!srt_cpu_q41_takes(w[k]->dtype))
            return 0;
    return 1;
}

static void cpu_destroy(srt_backend *be)
{
    cpu_backend *c = cpu(be);
    srt_threadpool_free(c->tp);
    free(c->scratch);
    free(c->ones);
    free(c->attn_scratch);
    free(c);
}

static int cpu_reserve_matmul(srt_backend *be, const srt_weight *w, int64_t n_tok, srt_err *err)
{
    cpu_backend *c = cpu(be);
    size_t need = srt_cpu_matmul_scratch_bytes(w, n_tok);
    size_t precise = c->precise ? precise_scratch(c, w, n_tok)
                   : c->fast_int ? srt_cpu_q41_scratch_bytes(srt_threadpool_size(c->tp), w->cols, n_tok) : 0;
    if (precise > need)
        need = precise;
    if (need <= c->scratch_bytes)
        return SRT_OK;
    need = (need + 63) / 64 * 64;
    void *p = aligned_alloc(64, need);
    if (!p)
        return srt_err_set(err, "cpu backend: out of memory for %zu bytes of matmul scratch", need);
    free(c->scratch);
    c->scratch = p;
    c->scratch_bytes = need;
    return SRT_OK;
}

typedef struct precise_job {
    const srt_weight *w;
    const float      *bias, *x;
    int64_t           n_tok;
    float            *y;
    float            *scratch;
    srt_dot_f32_fn    dot;
    srt_precise_dot_fn fused;   /* set: fused dequant-dot for this format */
    const float      *xsum;     /* [n_tok][cols/32] block sums of x, for fused */
} precise_job;

static void precise_fused_worker(void *arg, int ith, int nth)
{
    precise_job *j = arg;
    const srt_weight *w = j->w;
    int64_t R = w->rows, C = w->cols, nb = C / 32;
    int64_t r0 = R * ith / nth, r1 = R * (ith + 1) / nth;
    for (int64_t r = r0; r < r1; r++) {
        const void *row = (const char *)w->data + (size_t)r * w->row_stride;
        for (int64_t t = 0; t < j->n_tok; t++)
            j->y[t * R + r] = j->fused(row, j->x + t * C, j->xsum + t * nb, nb) + (j->bias ? j->bias[r] : 0.0f);
    }
}

static void precise_worker(void *arg, int ith, int nth)
{
    precise_job *j = arg;
    const srt_weight *w = j->w;
    int64_t R = w->rows, C = w->cols, n_tiles = (R + PRECISE_TILE - 1) / PRECISE_TILE;
    float *buf = j->scratch + (size_t)ith * PRECISE_TILE * (size_t)C;
    const float *rows[PRECISE_TILE];
    for (int64_t tile = ith; tile < n_tiles; tile += nth) {
        int64_t r0 = tile * PRECISE_TILE, nr = R - r0 < PRECISE_TILE ? R - r0 : PRECISE_TILE;
        for (int64_t i = 0; i < nr; i++) {
            if (w->dtype == SRT_F32)
                rows[i] = (const float *)((const char *)w->data + (size_t)(r0 + i) * w->row_stride);
            else {
                srt_cpu_dequant_row(w, r0 + i, buf + i * C);
                rows[i] = buf + i * C;
            }
        }
        for (int64_t t = 0; t < j->n_tok; t++) {
            const float *xt = j->x + t * C;
            float *yt = j->y + t * R + r0;
            for (int64_t i = 0; i < nr; i++)
                yt[i] = j->dot(xt, rows[i], C) + (j->bias ? j->bias[r0 + i] : 0.0f);
        }
    }
}

static void cpu_matmul(srt_backend *be, const srt_weight *w, const float *bias, const float *x, int64_t n_tok,
                       float *y)
{
    cpu_backend *c = cpu(be);
    if (c->reference)
        srt_cpu_matmul_ref(w, bias, x, n_tok, y);
    else if (c->precise && c->exact_simd &&
             srt_cpu_exact_matmul(c->tp, w, bias, x, n_tok, y, c->scratch) == SRT_OK)
        return;
    else if (fast_q41(c, 1, &w) && srt_cpu_q41_matmul_n(c->tp, 1, &w, &bias, x, n_tok, &y, c->scratch, 1, 1) == SRT_OK)
        return;
    else if (c->precise) {
        precise_job j = { w, bias, x, n_tok, y, c->scratch, c->dot, NULL, NULL };
        if ((j.fused = srt_cpu_precise_dot(w->dtype)) != NULL) {
            /* block sums of x after the per-thread tiles in scratch */
            float *xs = (float *)((char *)c->scratch + (size_t)srt_threadpool_size(c->tp) * PRECISE_TILE *
                                                       (size_t)w->cols * sizeof(float));
            int64_t nb = w->cols / 32;
            for (int64_t t = 0; t < n_tok; t++)
                for (int64_t b = 0; b < nb; b++) {
                    float s = 0;
                    for (int k = 0; k < 32; k++)
                        s += x[t * w->cols + b * 32 + k];
                    xs[t * nb + b] = s;
                }
            j.xsum = xs;
            srt_threadpool_run(c->tp, precise_fused_worker, &j);
        } else
            srt_threadpool_run(c->tp, precise_worker, &j);
    }
    else
        srt_cpu_matmul(c->tp, w, bias, x, n_tok, y, c->scratch);
}

/* q/k/v or gate/up: one parallel region on the exact path (each weight's bits unchanged) */
static void cpu_matmul_n(srt_backend *be, int n, const srt_weight *const *w, const float *const *bias,
                         const float *x, int64_t n_tok, float *const *y)
{
    cpu_backend *c = cpu(be);
    if (!c->reference && c->precise && c->exact_simd &&
        srt_cpu_exact_matmul_n(c->tp, n, w, bias, x, n_tok, y, c->scratch) == SRT_OK)
        return;
    if (fast_q41(c, n, w) && srt_cpu_q41_matmul_n(c->tp, n, w, bias, x, n_tok, y, c->scratch, 1, 1) == SRT_OK)
        return;
    for (int k = 0; k < n; k++)
        cpu_matmul(be, w[k], bias ? bias[k] : NULL, x, n_tok, y[k]);
}

/* Only the exact kernels (and fast's one-digit ones) read packed weights: none unless they are
 * the ones that run. */
static size_t cpu_pack_bytes(srt_backend *be, const srt_weight *w)
{
    cpu_backend *c = cpu(be);
    if (fast_q41(c, 1, &w))
        return srt_cpu_q41_pack_bytes(w);
    return !c->reference && c->precise && c->exact_simd ? srt_cpu_exact_pack_bytes(w) : 0;
}

static void cpu_pack(srt_backend *be, const srt_weight *w, void *dst, srt_weight *out)
{
    srt_cpu_exact_pack(w, dst, out);
}

static void cpu_embed(srt_backend *be, const srt_weight *table, const int32_t *ids, int64_t n_tok, float *out)
{
    for (int64_t t = 0; t < n_tok; t++)
        srt_cpu_dequant_row(table, ids[t], out + t * table->cols);
}

static void cpu_rmsnorm(srt_backend *be, const float *x, const srt_weight *w, float eps, int64_t n_rows,
                        int64_t dim, float *out)
{
    srt_cpu_rmsnorm(cpu(be)->tp, x, w, eps, n_rows, dim, out);
}

typedef struct ew_job {
    float       *y;
    const float *a, *b;
    int64_t      n;
    int          op;
} ew_job;

enum { EW_MUL, EW_ADD3 };

static void ew_worker(void *arg, int ith, int nth)
{
    ew_job *j = arg;
    int64_t lo = j->n * ith / nth, hi = j->n * (ith + 1) / nth;
    switch (j->op) {
    case EW_MUL:
        for (int64_t i = lo; i < hi; i++)
            j->y[i] *= j->a[i];
        break;
    case EW_ADD3:
        for (int64_t i = lo; i < hi; i++)
            j->y[i] = j->a[i] + j->b[i];
        break;
    }
}

static void ew_run(srt_backend *be, ew_job *j)
{
    if (j->n >= 4096)
        srt_threadpool_run(cpu(be)->tp, ew_worker, j);
    else
        ew_worker(j, 0, 1);
}

/* The unfused path (act_fn hooked) must give the fused path's numbers: silu through the same
 * kernel as silu_mul, times exactly 1, then the product in mul(). */
static void cpu_silu(srt_backend *be, const float *x, int64_t n, float *out)
{
    cpu_backend *c = cpu(be);
    for (int64_t i = 0; i < n; i += SILU_CHUNK)
        srt_cpu_silu_mul(c->tp, x + i, c->ones, n - i < SILU_CHUNK ? n - i : SILU_CHUNK, out + i);
}

static void cpu_mul(srt_backend *be, float *y, const float *x, int64_t n)
{
    ew_job j = { y, x, NULL, n, EW_MUL };
    ew_run(be, &j);
}

static void cpu_add3(srt_backend *be, float *out, const float *a, const float *b, int64_t n)
{
    ew_job j = { out, a, b, n, EW_ADD3 };
    ew_run(be, &j);
}

static void cpu_silu_mul(srt_backend *be, const float *gate, const float *up, int64_t n, float *out)
{
    srt_cpu_silu_mul(cpu(be)->tp, gate, up, n, out);
}

static void cpu_add(srt_backend *be, float *y, const float *x, int64_t n)
{
    srt_cpu_add(cpu(be)->tp, y, x, n);
}

static void cpu_rope(srt_backend *be, float *x, int64_t n_tok, int32_t n_heads, int32_t hd, const float *cs)
{
    int32_t half = hd / 2;
    for (int64_t t = 0; t < n_tok; t++) {
        const float *co = cs + t * 2 * hd, *si = co + hd;
        for (int32_t h = 0; h < n_heads; h++) {
            float *v = x + (t * n_heads + h) * hd;
            for (int32_t i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * co[i] - b * si[i];
                v[i + half] = b * co[i + half] + a * si[i + half];
            }
        }
    }
}

static void cpu_kv_store(srt_backend *be, const srt_forward_batch *b, const float *k, const float *v,
                         void *kc, void *vc, srt_dtype dt, int32_t row)
{
    for (int32_t t = 0; t < b->n_tokens; t++) {
        size_t dst = (size_t)b->out_slots[t] * row;
        const float *ks = k + (size_t)t * row, *vs = v + (size_t)t * row;
        if (dt == SRT_F32) {
            memcpy((float *)kc + dst, ks, (size_t)row * sizeof(float));
            memcpy((float *)vc + dst, vs, (size_t)row * sizeof(float));
        } else {
            srt_f32_to_f16_row_fn cvt = cpu(be)->to_f16;
            cvt(ks, (uint16_t *)kc + dst, row);
            cvt(vs, (uint16_t *)vc + dst, row);
        }
    }
}

static void cpu_attention(srt_backend *be, const srt_attn_args *a)
{
    cpu_backend *c = cpu(be);
    size_t need = srt_cpu_attention_scratch_floats(srt_threadpool_size(c->tp), a->head_dim);
    srt_cpu_attention(c->tp, a, need <= c->attn_floats ? c->attn_scratch : NULL, c->attn_floats);
}

static int cpu_n_threads(const srt_backend *be)
{
    return srt_threadpool_size(((const cpu_backend *)be->impl)->tp);
}

static const srt_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .reserve_matmul = cpu_reserve_matmul,
    .matmul = cpu_matmul,
    .matmul_n = cpu_matmul_n,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .silu = cpu_silu,
    .mul = cpu_mul,
    .silu_mul = cpu_silu_mul,
    .add = cpu_add,
    .add3 = cpu_add3,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .n_threads = cpu_n_threads,
    .pack_bytes = cpu_pack_bytes,
    .pack = cpu_pack,
};

srt_backend *srt_cpu_backend_create(int n_threads, int precise_matmul, srt_err *err)
{
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) {
        srt_err_set(err, "cpu backend: out of memory");
        return NULL;
    }
    c->tp = srt_threadpool_create(n_threads);
    c->ones = malloc(SILU_CHUNK * sizeof(float));
    c->attn_floats = srt_cpu_attention_scratch_floats(c->tp ? srt_threadpool_size(c->tp) : 1, ATTN_MAX_HD);
    c->attn_scratch = malloc(c->attn_floats * sizeof(float));
    if (!c->tp || !c->ones || !c->attn_scratch) {
        srt_threadpool_free(c->tp);
        free(c->ones);
        free(c->attn_scratch);
        free(c);
        srt_err_set(err, "cpu backend: cannot start %d threads", n_threads);
        return NULL;
    }
    const char *mm = getenv("SRT_CPU_MATMUL");
    c->reference = mm && strcmp(mm, "reference") == 0;
    c->precise = precise_matmul || (mm && strcmp(mm, "precise") == 0);
    c->dot = srt_cpu_dot_f32();
    c->exact_simd = strcmp(srt_cpu_simd_name(), "portable") != 0;
    c->fast_int = !c->reference && !c->precise && srt_cpu_exact_avx512() == 1;
    c->to_f16 = srt_cpu_f32_to_f16_row();
    for (int i = 0; i < SILU_CHUNK; i++)
        c->ones[i] = 1.0f;
    c->base.ops = &cpu_ops;
    c->base.impl = c;
    return &c->base;
}
