/* The CUDA backend (plugin side): the ops table of srt/backend.h on one device and one stream.
 * Contract and runner obligations: src/include/srt/backend_cuda.h.
 *
 * Every CUDA call is checked. Ops that cannot return a status (the void ones of the table)
 * keep the first error in the backend; sync/download return it. Nothing aborts. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_plugin.h"
#include "srt_kernels.h"

#define EXPORT __attribute__((visibility("default")))

_Static_assert(sizeof(srt_cuda_sample_params) == sizeof(srt_cuda_sampling),
               "srt_cuda_sample_params must mirror srt_cuda_sampling");

static srt_cuda_host_api host;

static int errf(srt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int errf(srt_err *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return SRT_ERROR;
}

static void logf_(srt_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(srt_log_level lvl, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (host.log)
        host.log(lvl, buf);
}

/* ---------------------------------------------------------------- memory pool ----------- */
/* One cudaMalloc; first-fit over a list of segments kept in address order, neighbours merged
 * on free. Allocation happens at load/create time only, so a list is plenty. */
#define POOL_ALIGN 256

typedef struct seg {
    size_t      off, size;
    int         used;
    struct seg *next;
} seg;

typedef struct pool {
    char  *base;
    size_t size, used;
    seg   *head;
    int    separate;   /* SRT_CUDA_POOL=separate: one cudaMalloc per allocation (for memcheck) */
} pool;

static void *pool_alloc(pool *p, size_t bytes)
{
    if (p->separate) {   /* exact sizes, so the sanitizer catches a read one past the end */
        void *d = NULL;
        seg *s = malloc(sizeof *s);
        if (!s || p->used + bytes > p->size || cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) {
            free(s);
            return NULL;
        }
        s->off = (size_t)(uintptr_t)d;
        s->size = bytes;
        s->used = 1;
        s->next = p->head;
        p->head = s;
        p->used += bytes;
        return d;
    }
    bytes = (bytes + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
    if (bytes == 0)
        bytes = POOL_ALIGN;
    for (seg *s = p->head; s; s = s->next) {
        if (s->used || s->size < bytes)
            continue;
        if (s->size > bytes) {
            seg *rest = malloc(sizeof *rest);
            if (!rest)
                return NULL;
            rest->off = s->off + bytes;
            rest->size = s->size - bytes;
            rest->used = 0;
            rest->next = s->next;
            s->next = rest;
            s->size = bytes;
        }
        s->used = 1;
        p->used += s->size;
        return p->base + s->off;
    }
    return NULL;
}

static size_t pool_largest_free(const pool *p)
{
    size_t m = 0;
    for (const seg *s = p->head; s; s = s->next)
        if (!s->used && s->size > m)
            m = s->size;
    return m;
}

static int pool_free(pool *p, void *ptr)
{
    if (!ptr)
        return 0;
    if (p->separate) {
        for (seg **pp = &p->head; *pp; pp = &(*pp)->next)
            if ((*pp)->off == (size_t)(uintptr_t)ptr) {
                seg *s = *pp;
                *pp = s->next;
                p->used -= s->size;
                cudaFree(ptr);
                free(s);
                return 0;
            }
        return -1;
    }
    size_t off = (size_t)((char *)ptr - p->base);
    seg *prev = NULL;
    for (seg *s = p->head; s; prev = s, s = s->next) {
        if (s->off != off || !s->used)
            continue;
        s->used = 0;
        p->used -= s->size;
        if (s->next && !s->next->used) {
            seg *n = s->next;
            s->size += n->size;
            s->next = n->next;
            free(n);
        }
        if (prev && !prev->used) {
            prev->size += s->size;
            prev->next = s->next;
            free(s);
        }
        return 0;
    }
    return -1;
}

/* ---------------------------------------------------------------- device weights -------- */
typedef struct dev_weight {
    const void *host;     /* key: host data pointer, rows, cols */
    int64_t     rows, cols;
    void       *dev;      /* bf16 [rows][cols] for 2-D, f32 [cols] for 1-D */
    int         is_f32;
} dev_weight;

/* ---------------------------------------------------------------- GEMM plans ------------ */
typedef struct gemm_plan {
    int64_t                   m, n, k;   /* m = weight rows, n = tokens, k = cols; 0: empty */
    int64_t                   align;     /* byte alignment the output pointer is known to have */
    cublasLtMatrixLayout_t    a, b, c;
    cublasLtMatmulAlgo_t      algo;
} gemm_plan;

#define GEMM_PLANS 1024   /* open addressing; a model has a few dozen shapes per token count */
#define MAX_GRAPHS (SRT_CUDA_GRAPH_MAX_BS + 1)

typedef struct cuda_backend {
    srt_backend         base;
    int                 device;
    int                 n_sm;
    cudaStream_t        stream;
    pool                pool;
    /* first error of a void op, reported by sync/download */
    int                 failed;
    char                fail_msg[sizeof(((srt_err *)0)->msg)];
    /* weights */
    dev_weight         *w;
    size_t              n_w, cap_w;      /* hash table, cap a power of two */
    /* GEMM */
    cublasLtHandle_t    lt;
    cublasLtMatmulDesc_t mm;
    void               *lt_ws;
    size_t              lt_ws_bytes;
    gemm_plan          *plans;
    size_t              n_plans;
    uint16_t           *xbf;             /* bf16 copy of a matmul input */
    size_t              xbf_elems;
    /* Inside a graph capture, consecutive matmuls of the same input (q/k/v, gate/up) share
     * one cast: xbf holds bf16(xbf_src[0..xbf_n)) until any other op runs (every launch through
     * check_launch, and every copy, forgets it). Eager steps always cast: a hook may have
     * written the input between two ops. */
    const float        *xbf_src;
    int64_t             xbf_n;
    /* attention split-K workspace (fixed size, see srt_cuda_attention_splits) */
    void               *att_ws;
    size_t              att_ws_bytes;
    /* batch metadata: device block and pinned staging of the same layout */
    const srt_forward_batch *cur;
    int32_t             cur_tokens, cur_seqs;
    int32_t             cap_tok, cap_seq;
    int64_t             cap_slots;
    int32_t            *meta_dev, *meta_host;
    cudaEvent_t         meta_done;
    int                 meta_pending;
    /* sampling */
    srt_cuda_sampling  *smp_dev, *smp_host;
    int32_t            *ids_dev, *ids_host;
    /* graphs */
    cudaGraphExec_t     graphs[MAX_GRAPHS];
    int                 capturing;
    /* staging for weight upload */
    void               *up_host;
    size_t              up_bytes;
} cuda_backend;

static cuda_backend *cb(srt_backend *be) { return (cuda_backend *)be->impl; }

static void fail(cuda_backend *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(cuda_backend *c, const char *fmt, ...)
{
    if (c->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->fail_msg, sizeof c->fail_msg, fmt, ap);
    va_end(ap);
    c->failed = 1;
    logf_(SRT_LOG_ERROR, "cuda backend: %s", c->fail_msg);
}

static void check_launch(cuda_backend *c, int rc, const char *what)
{
    c->xbf_src = NULL;
    if (rc != 0)
        fail(c, "%s: %s", what, cudaGetErrorString((cudaError_t)rc));
}

#define CK(c, call, what) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
        fail(c, "%s: %s", what, cudaGetErrorString(e_)); return; } } while (0)

static int take_error(cuda_backend *c, srt_err *err)
{
    if (!c->failed)
        return SRT_OK;
    errf(err, "cuda backend: %s", c->fail_msg);
    c->failed = 0;
    c->fail_msg[0] = 0;
    return SRT_ERROR;
}

static void *dalloc(cuda_backend *c, size_t bytes, const char *what, srt_err *err)
{
    void *p = pool_alloc(&c->pool, bytes);
    if (!p)
        errf(err, "cuda backend: device pool exhausted: %s needs %zu MiB, %zu MiB of %zu MiB in use "
             "(largest free piece %zu MiB); raise srt_mem_fraction_static or lower the KV budget",
             what, bytes >> 20, c->pool.used >> 20, c->pool.size >> 20, pool_largest_free(&c->pool) >> 20);
    return p;
}

/* ---------------------------------------------------------------- weight table ---------- */
static size_t whash(const void *p, int64_t r, int64_t cl)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)r * 0xC2B2AE3D27D4EB4Full + (uint64_t)cl;
    h ^= h >> 29;
    return (size_t)h;
}

static dev_weight *wfind(cuda_backend *c, const void *p, int64_t r, int64_t cl)
{
    if (!c->cap_w)
        return NULL;
    for (size_t i = whash(p, r, cl) & (c->cap_w - 1);; i = (i + 1) & (c->cap_w - 1)) {
        dev_weight *d = &c->w[i];
        if (!d->host)
            return NULL;
        if (d->host == p && d->rows == r && d->cols == cl)
            return d;
    }
}

static int wput(cuda_backend *c, const dev_weight *nw, srt_err *err)
{
    if ((c->n_w + 1) * 2 > c->cap_w) {
        size_t cap = c->cap_w ? c->cap_w * 2 : 256;
        dev_weight *t = calloc(cap, sizeof *t), *old = c->w;
        if (!t)
            return errf(err, "cuda backend: out of host memory for the weight table");
        size_t ocap = c->cap_w;
        c->w = t;
        c->cap_w = cap;
        for (size_t i = 0; i < ocap; i++)
            if (old[i].host) {
                size_t j = whash(old[i].host, old[i].rows, old[i].cols) & (cap - 1);
                while (t[j].host)
                    j = (j + 1) & (cap - 1);
                t[j] = old[i];
            }
        free(old);
    }
    size_t j = whash(nw->host, nw->rows, nw->cols) & (c->cap_w - 1);
    while (c->w[j].host)
        j = (j + 1) & (c->cap_w - 1);
    c->w[j] = *nw;
    c->n_w++;
    return SRT_OK;
}

static uint16_t f32_to_bf16_host(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);   /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#define UPLOAD_STAGING (64u << 20)

static int cuda_load_weight(srt_backend *be, const srt_weight *w, srt_err *err)
{
    cuda_backend *c = cb(be);
    if (!w || !w->data || w->rows <= 0 || w->cols <= 0)
        return errf(err, "cuda backend: load_weight: empty weight");
    if (wfind(c, w->data, w->rows, w->cols))
        return SRT_OK;
    cudaError_t se = cudaSetDevice(c->device);
    if (se != cudaSuccess)
        return errf(err, "cuda backend: cudaSetDevice(%d): %s", c->device, cudaGetErrorString(se));
    if (w->dtype == SRT_I32 || w->dtype >= SRT_DTYPE_COUNT)
        return errf(err, "cuda backend: load_weight: dtype %d is not a weight type", (int)w->dtype);
    dev_weight d = { w->data, w->rows, w->cols, NULL, w->rows == 1 };
    size_t esz = d.is_f32 ? 4 : 2, row_bytes = (size_t)w->cols * esz;
    if (row_bytes > UPLOAD_STAGING)
        return errf(err, "cuda backend: load_weight: a row of %lld columns is too wide", (long long)w->cols);
    d.dev = dalloc(c, row_bytes * (size_t)w->rows, "a weight", err);
    if (!d.dev)
        return SRT_ERROR;
    cudaError_t e = cudaSuccess;
    float *tmp = malloc((size_t)w->cols * sizeof(float));
    if (!tmp) {
        pool_free(&c->pool, d.dev);
        return errf(err, "cuda backend: out of host memory");
    }
    int64_t rows_per = (int64_t)(c->up_bytes / row_bytes);
    for (int64_t r0 = 0; r0 < w->rows && e == cudaSuccess; r0 += rows_per) {
        int64_t nr = w->rows - r0 < rows_per ? w->rows - r0 : rows_per;
        for (int64_t r = 0; r < nr; r++) {
            char *dst = (char *)c->up_host + (size_t)r * row_bytes;
            const char *src = (const char *)w->data + (size_t)(r0 + r) * w->row_stride;
            if (d.is_f32 && w->dtype == SRT_F32)
                memcpy(dst, src, row_bytes);
            else if (!d.is_f32 && w->dtype == SRT_BF16)
                memcpy(dst, src, row_bytes);
            else {
                host.dequant_row(w, r0 + r, tmp);
                if (d.is_f32)
                    memcpy(dst, tmp, row_bytes);
                else
                    for (int64_t i = 0; i < w->cols; i++)
                        ((uint16_t *)dst)[i] = f32_to_bf16_host(tmp[i]);
            }
        }
        e = cudaMemcpyAsync((char *)d.dev + (size_t)r0 * row_bytes, c->up_host, (size_t)nr * row_bytes,
                            cudaMemcpyHostToDevice, c->stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(c->stream);   /* the staging is reused next round */
    }
    free(tmp);
    if (e != cudaSuccess) {
        pool_free(&c->pool, d.dev);
        return errf(err, "cuda backend: weight upload: %s", cudaGetErrorString(e));
    }
    if (wput(c, &d, err) != SRT_OK) {
        pool_free(&c->pool, d.dev);
        return SRT_ERROR;
    }
    return SRT_OK;
}

static const dev_weight *need_weight(cuda_backend *c, const srt_weight *w, int want_f32, const char *op)
{
    const dev_weight *d = w ? wfind(c, w->data, w->rows, w->cols) : NULL;
    if (!d)
        fail(c, "%s: weight %p [%lld x %lld] was never given to load_weight", op, w ? w->data : NULL,
             w ? (long long)w->rows : 0LL, w ? (long long)w->cols : 0LL);
    else if (d->is_f32 != want_f32) {
        fail(c, "%s: weight [%lld x %lld] is %s on the device, the op needs %s", op, (long long)d->rows,
             (long long)d->cols, d->is_f32 ? "f32 (1-D)" : "bf16 (2-D)", want_f32 ? "f32" : "bf16");
        d = NULL;
    }
    return d;
}

static const float *need_array(cuda_backend *c, const float *p, int64_t n, const char *op)
{
    const dev_weight *d = p ? wfind(c, p, 1, n) : NULL;
    if (!d || !d->is_f32) {
        fail(c, "%s: f32 array %p of %lld was never given to load_weight", op, (const void *)p, (long long)n);
        return NULL;
    }
    return d->dev;
}

/* ---------------------------------------------------------------- ops ------------------- */
static void cuda_graph_clear(srt_backend *be);
static int  cuda_graph_capture(srt_backend *be, int32_t bs, srt_graph_body body, void *user, srt_err *err);
static int  cuda_graph_ready(srt_backend *be, int32_t bs);
static int  cuda_graph_replay(srt_backend *be, int32_t bs, srt_err *err);

static int cuda_reserve_matmul(srt_backend *be, const srt_weight *w, int64_t n_tok, srt_err *err)
{
    cuda_backend *c = cb(be);
    size_t need = (size_t)n_tok * (size_t)w->cols;
    if (cuda_load_weight(be, w, err) != SRT_OK)
        return SRT_ERROR;
    if (need <= c->xbf_elems)
        return SRT_OK;
    c->xbf_src = NULL;
    void *p = dalloc(c, need * 2, "the matmul input buffer", err);
    if (!p)
        return SRT_ERROR;
    pool_free(&c->pool, c->xbf);
    c->xbf = p;
    c->xbf_elems = need;
    cuda_graph_clear(be);   /* captured graphs hold the old address */
    return SRT_OK;
}

static void plans_clear(cuda_backend *c)
{
    for (size_t i = 0; i < GEMM_PLANS; i++)
        if (c->plans[i].m) {
            cublasLtMatrixLayoutDestroy(c->plans[i].a);
            cublasLtMatrixLayoutDestroy(c->plans[i].b);
            cublasLtMatrixLayoutDestroy(c->plans[i].c);
        }
    memset(c->plans, 0, GEMM_PLANS * sizeof *c->plans);
}

/* align: 256 when the output pointer is 256-byte aligned (every pool allocation), else 4;
 * cuBLASLt's heuristics assume 256 unless told, and a kernel chosen so fails on a view.
 * Token counts vary from step to step (prefill chunks), so the table fills up in a long run:
 * then it starts over (the layouts are host objects; captured graphs do not use them). */
static gemm_plan *plan_for(cuda_backend *c, int64_t m, int64_t n, int64_t k, int64_t align)
{
    if (c->n_plans >= GEMM_PLANS / 2) {
        plans_clear(c);
        c->n_plans = 0;
    }
    uint64_t h = ((uint64_t)m * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)n * 0xC2B2AE3D27D4EB4Full) ^ (uint64_t)k ^
                 (uint64_t)align << 40;
    size_t i = (size_t)(h ^ (h >> 31)) & (GEMM_PLANS - 1);
    for (size_t probe = 0; probe < GEMM_PLANS; probe++, i = (i + 1) & (GEMM_PLANS - 1)) {
        gemm_plan *p = &c->plans[i];
        if (p->m == m && p->n == n && p->k == k && p->align == align)
            return p;
        if (p->m == 0) {
            /* y^T[m][n] (column-major, ld m) = op(W)[m][k] * x^T[k][n]: W is row-major [m][k],
             * i.e. column-major [k][m] transposed; x is row-major [n][k] = column-major [k][n]. */
            cublasStatus_t s = cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, (uint64_t)k, (uint64_t)m, k);
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, k);
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, (uint64_t)m, (uint64_t)n, m);
            cublasLtMatmulPreference_t pref = NULL;
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatmulPreferenceCreate(&pref);
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &c->lt_ws_bytes, sizeof c->lt_ws_bytes);
            uint32_t al = (uint32_t)align;
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
            cublasLtMatmulHeuristicResult_t res;
            int found = 0;
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatmulAlgoGetHeuristic(c->lt, c->mm, p->a, p->b, p->c, p->c, pref, 1, &res, &found);
            if (pref)
                cublasLtMatmulPreferenceDestroy(pref);
            if (s != CUBLAS_STATUS_SUCCESS || found < 1) {
                fail(c, "cuBLASLt has no bf16 GEMM for [%lld x %lld] x [%lld tokens]: %s", (long long)m,
                     (long long)k, (long long)n, cublasLtGetStatusString(s));
                if (p->a) cublasLtMatrixLayoutDestroy(p->a);
                if (p->b) cublasLtMatrixLayoutDestroy(p->b);
                if (p->c) cublasLtMatrixLayoutDestroy(p->c);
                memset(p, 0, sizeof *p);
                return NULL;
            }
            p->algo = res.algo;
            p->align = align;
            c->n_plans++;
            p->m = m;
            p->n = n;
            p->k = k;
            return p;
        }
    }
    fail(c, "more than %d GEMM shapes", GEMM_PLANS);
    return NULL;
}

static void cuda_matmul(srt_backend *be, const srt_weight *w, const float *bias, const float *x, int64_t n_tok,
                        float *y)
{
    cuda_backend *c = cb(be);
    if (n_tok <= 0)
        return;
    const dev_weight *d = need_weight(c, w, 0, "matmul");
    if (!d)
        return;
    if ((size_t)n_tok * (size_t)w->cols > c->xbf_elems) {
        fail(c, "matmul: %lld tokens x %lld columns exceed what reserve_matmul was told", (long long)n_tok,
             (long long)w->cols);
        return;
    }
    const float *db = bias ? need_array(c, bias, w->rows, "matmul bias") : NULL;
    if (bias && !db)
        return;
    int64_t n = n_tok * w->cols;
    int reuse = c->capturing && c->xbf_src == x && c->xbf_n == n;
    if (!reuse)
        check_launch(c, srt_cuda_f32_to_bf16(x, n, c->xbf, c->stream), "matmul input cast");
    c->xbf_src = NULL;
    gemm_plan *p = plan_for(c, w->rows, n_tok, w->cols, ((uintptr_t)y & 255) ? 4 : 256);
    if (!p)
        return;
    float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t s = cublasLtMatmul(c->lt, c->mm, &alpha, d->dev, p->a, c->xbf, p->b, &beta, y, p->c, y, p->c,
                                      &p->algo, c->lt_ws, c->lt_ws_bytes, c->stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
        fail(c, "cublasLtMatmul [%lld x %lld] x %lld tokens: %s", (long long)w->rows, (long long)w->cols,
             (long long)n_tok, cublasLtGetStatusString(s));
        return;
    }
    if (db)
        check_launch(c, srt_cuda_bias_add_f32(y, db, n_tok, w->rows, c->stream), "bias add");
    /* the output must not overlap the input for the cast to stay valid */
    const char *xb = (const char *)x, *xe = xb + n * 4, *yb = (const char *)y, *ye = yb + n_tok * w->rows * 4;
    if (ye <= xb || yb >= xe) {
        c->xbf_src = x;
        c->xbf_n = n;
    }
}

static void cuda_embed(srt_backend *be, const srt_weight *table, const int32_t *ids, int64_t n_tok, float *out)
{
    cuda_backend *c = cb(be);
    const dev_weight *d = need_weight(c, table, 0, "embed");
    if (d)
        check_launch(c, srt_cuda_embedding(d->dev, table->rows, (int)table->cols, ids, (int)n_tok, out, c->stream),
                     "embedding");
}

static void cuda_rmsnorm(srt_backend *be, const float *x, const srt_weight *w, float eps, int64_t n_rows,
                         int64_t dim, float *out)
{
    cuda_backend *c = cb(be);
    const dev_weight *d = need_weight(c, w, 1, "rmsnorm");
    if (!d)
        return;
    if (d->cols != dim) {
        fail(c, "rmsnorm: weight of %lld for rows of %lld", (long long)d->cols, (long long)dim);
        return;
    }
    check_launch(c, srt_cuda_rmsnorm_f32(x, d->dev, eps, n_rows, dim, out, c->stream), "rmsnorm");
}

static void cuda_add_rmsnorm(srt_backend *be, float *sum, const float *a, const float *b, const srt_weight *w,
                             float eps, int64_t n_rows, int64_t dim, float *out)
{
    cuda_backend *c = cb(be);
    const dev_weight *d = need_weight(c, w, 1, "add_rmsnorm");
    if (!d)
        return;
    if (d->cols != dim) {
        fail(c, "add_rmsnorm: weight of %lld for rows of %lld", (long long)d->cols, (long long)dim);
        return;
    }
    check_launch(c, srt_cuda_add_rmsnorm_f32(sum, a, b, d->dev, eps, n_rows, dim, out, c->stream), "add_rmsnorm");
}

static void cuda_silu(srt_backend *be, const float *x, int64_t n, float *out)
{
    check_launch(cb(be), srt_cuda_silu_f32(x, n, out, cb(be)->stream), "silu");
}

static void cuda_mul(srt_backend *be, float *y, const float *x, int64_t n)
{
    check_launch(cb(be), srt_cuda_mul_f32(y, x, n, cb(be)->stream), "mul");
}

static void cuda_silu_mul(srt_backend *be, const float *gate, const float *up, int64_t n, float *out)
{
    check_launch(cb(be), srt_cuda_silu_mul_f32(gate, up, n, out, cb(be)->stream), "silu_mul");
}

static void cuda_add(srt_backend *be, float *y, const float *x, int64_t n)
{
    check_launch(cb(be), srt_cuda_add_f32(y, x, n, cb(be)->stream), "add");
}

static void cuda_add3(srt_backend *be, float *out, const float *a, const float *b, int64_t n)
{
    check_launch(cb(be), srt_cuda_add3_f32(out, a, b, n, cb(be)->stream), "add3");
}

static void cuda_rope(srt_backend *be, float *x, int64_t n_tok, int32_t n_heads, int32_t hd, const float *cs)
{
    check_launch(cb(be), srt_cuda_rope_f32(x, n_tok, n_heads, hd, cs, cb(be)->stream), "rope");
}

static void cuda_rope_cos_sin(srt_backend *be, const int32_t *positions, int64_t n_tok, const float *inv_freq,
                              int32_t head_dim, float *cos_sin)
{
    cuda_backend *c = cb(be);
    const float *f = need_array(c, inv_freq, head_dim / 2, "rope_cos_sin");
    if (f)
        check_launch(c, srt_cuda_rope_cos_sin(positions, f, n_tok, head_dim, cos_sin, c->stream), "rope cos/sin");
}

static int kv_type_of(srt_dtype t)
{
    switch (t) {
    case SRT_F32:  return SRT_KV_F32;
    case SRT_F16:  return SRT_KV_F16;
    case SRT_BF16: return SRT_KV_BF16;
    default:       return -1;
    }
}

/* Batch metadata layout (int32): out_slots[cap_tok] positions[cap_tok] seq_start[cap_seq+1]
 * slot_start[cap_seq] slot_table[cap_slots] */
static int32_t *meta_slots(int32_t *base, const cuda_backend *c) { return base; }
static int32_t *meta_pos(int32_t *base, const cuda_backend *c) { return base + c->cap_tok; }
static int32_t *meta_seq_start(int32_t *base, const cuda_backend *c) { return base + 2 * (size_t)c->cap_tok; }
static int32_t *meta_slot_start(int32_t *base, const cuda_backend *c)
{
    return base + 2 * (size_t)c->cap_tok + c->cap_seq + 1;
}
static int32_t *meta_table(int32_t *base, const cuda_backend *c)
{
    return base + 2 * (size_t)c->cap_tok + 2 * (size_t)c->cap_seq + 1;
}
static size_t meta_elems(int32_t tok, int32_t seq, int64_t slots)
{
    return 2 * (size_t)tok + 2 * (size_t)seq + 1 + (size_t)slots;
}

static int grow_meta(cuda_backend *c, int32_t tok, int32_t seq, int64_t slots, srt_err *err)
{
    if (tok <= c->cap_tok && seq <= c->cap_seq && slots <= c->cap_slots)
        return SRT_OK;
    if (c->capturing)
        return errf(err, "cuda backend: begin_batch inside a graph capture");
    int32_t nt = tok > c->cap_tok ? tok : c->cap_tok, ns = seq > c->cap_seq ? seq : c->cap_seq;
    int64_t nl = slots > c->cap_slots ? slots + slots / 2 + 4096 : c->cap_slots;
    size_t bytes = meta_elems(nt, ns, nl) * sizeof(int32_t);
    void *d = dalloc(c, bytes, "batch metadata", err), *h = NULL;
    if (!d)
        return SRT_ERROR;
    cudaError_t e = cudaStreamSynchronize(c->stream);   /* old buffers may still be read */
    if (e == cudaSuccess)
        e = cudaMallocHost(&h, bytes);
    if (e != cudaSuccess) {
        pool_free(&c->pool, d);
        return errf(err, "cuda backend: batch metadata: %s", cudaGetErrorString(e));
    }
    pool_free(&c->pool, c->meta_dev);
    cudaFreeHost(c->meta_host);
    c->meta_dev = d;
    c->meta_host = h;
    c->cap_tok = nt;
    c->cap_seq = ns;
    c->cap_slots = nl;
    cuda_graph_clear(&c->base);   /* graphs captured the old addresses */
    return SRT_OK;
}

static int cuda_begin_batch(srt_backend *be, const srt_forward_batch *b, srt_err *err)
{
    cuda_backend *c = cb(be);
    if (c->capturing)
        return errf(err, "cuda backend: begin_batch inside a graph capture (announce the batch before capturing)");
    c->cur = NULL;
    c->xbf_src = NULL;
    cudaError_t se = cudaSetDevice(c->device);   /* the current device is per host thread */
    if (se != cudaSuccess)
        return errf(err, "cuda backend: cudaSetDevice(%d): %s", c->device, cudaGetErrorString(se));
    if (!b || b->n_tokens <= 0 || b->n_seqs <= 0 || !b->out_slots || !b->positions || !b->seq_start ||
        !b->seq_len || !b->seq_slots)
        return errf(err, "cuda backend: begin_batch: incomplete batch");
    int64_t total = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        if (b->seq_len[s] < 0)
            return errf(err, "cuda backend: begin_batch: sequence %d has length %d", s, b->seq_len[s]);
        total += b->seq_len[s];
    }
    if (grow_meta(c, b->n_tokens, b->n_seqs, total, err) != SRT_OK)
        return SRT_ERROR;
    if (c->meta_pending) {   /* the previous step's copy must have left the staging */
        cudaError_t e = cudaEventSynchronize(c->meta_done);
        if (e != cudaSuccess)
            return errf(err, "cuda backend: begin_batch: %s", cudaGetErrorString(e));
        c->meta_pending = 0;
    }
    int32_t *h = c->meta_host;
    memcpy(meta_slots(h, c), b->out_slots, (size_t)b->n_tokens * sizeof(int32_t));
    memcpy(meta_pos(h, c), b->positions, (size_t)b->n_tokens * sizeof(int32_t));
    memcpy(meta_seq_start(h, c), b->seq_start, ((size_t)b->n_seqs + 1) * sizeof(int32_t));
    int32_t *ss = meta_slot_start(h, c), *tab = meta_table(h, c);
    int64_t off = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        if (off > INT32_MAX - (int64_t)b->seq_len[s])
            return errf(err, "cuda backend: begin_batch: more than 2^31 context slots in one batch");
        ss[s] = (int32_t)off;
        if (b->seq_len[s] > 0)
            memcpy(tab + off, b->seq_slots[s], (size_t)b->seq_len[s] * sizeof(int32_t));
        off += b->seq_len[s];
    }
    /* one copy of the whole used prefix of the layout (slot table last) */
    size_t elems = (size_t)(meta_table(h, c) - h) + (size_t)off;
    cudaError_t e = cudaMemcpyAsync(c->meta_dev, h, elems * sizeof(int32_t), cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(c->meta_done, c->stream);
    if (e != cudaSuccess)
        return errf(err, "cuda backend: begin_batch copy: %s", cudaGetErrorString(e));
    c->meta_pending = 1;
    c->cur = b;
    c->cur_tokens = b->n_tokens;
    c->cur_seqs = b->n_seqs;
    return SRT_OK;
}

static int current_batch(cuda_backend *c, const srt_forward_batch *b, const char *op)
{
    if (!c->cur || c->cur != b) {
        fail(c, "%s: the batch was not announced with begin_batch", op);
        return 0;
    }
    return 1;
}

static void cuda_kv_store(srt_backend *be, const srt_forward_batch *b, const float *k, const float *v, void *kc,
                          void *vc, srt_dtype dt, int32_t row)
{
    cuda_backend *c = cb(be);
    int kt = kv_type_of(dt);
    if (kt < 0) {
        fail(c, "kv_store: KV dtype %d is not F32, F16 or BF16", (int)dt);
        return;
    }
    if (!current_batch(c, b, "kv_store"))
        return;
    check_launch(c, srt_cuda_kv_store_f32(k, v, meta_slots(c->meta_dev, c), c->cur_tokens, row, kt, kc, vc,
                                          c->stream), "kv_store");
}

static void cuda_attention(srt_backend *be, const srt_attn_args *a)
{
    cuda_backend *c = cb(be);
    int kt = kv_type_of(a->kv_dtype);
    if (kt < 0) {
        fail(c, "attention: KV dtype %d is not F32, F16 or BF16", (int)a->kv_dtype);
        return;
    }
    if (!current_batch(c, a->batch, "attention"))
        return;
    srt_cuda_slot_batch sb = {
        .n_tokens = c->cur_tokens, .n_seqs = c->cur_seqs,
        .positions = meta_pos(c->meta_dev, c), .seq_start = meta_seq_start(c->meta_dev, c),
        .slot_start = meta_slot_start(c->meta_dev, c), .slot_table = meta_table(c->meta_dev, c),
    };
    int splits = srt_cuda_attention_splits(c->cur_tokens, a->n_heads, c->n_sm);
    if (srt_cuda_attention_workspace_bytes(c->cur_tokens, a->n_heads, a->head_dim, splits) > c->att_ws_bytes)
        splits = 1;
    check_launch(c, srt_cuda_attention_f32(a->q, a->k_cache, a->v_cache, kt, &sb, a->n_heads, a->n_kv_heads,
                                           a->head_dim, a->scale, splits, c->att_ws, a->out, c->stream),
                 "attention");
}

static void cuda_gather_rows(srt_backend *be, float *dst, const float *src, const int32_t *rows, int32_t n_rows,
                             int64_t width)
{
    check_launch(cb(be), srt_cuda_gather_rows_f32(src, rows, n_rows, width, dst, cb(be)->stream), "gather_rows");
}

static int cuda_n_threads(const srt_backend *be)
{
    return 1;
}

static void *cuda_alloc(srt_backend *be, size_t bytes, srt_err *err)
{
    return dalloc(cb(be), bytes, "an activation or KV buffer", err);
}

static void cuda_free_op(srt_backend *be, void *p)
{
    cuda_backend *c = cb(be);
    if (p && pool_free(&c->pool, p) != 0)
        fail(c, "free: %p is not a live pool allocation", p);
}

static int cuda_upload(srt_backend *be, void *dst, const void *src, size_t bytes, srt_err *err)
{
    cuda_backend *c = cb(be);
    c->xbf_src = NULL;
    if (bytes == 0)
        return SRT_OK;
    if (c->capturing)
        return errf(err, "cuda backend: upload inside a graph capture");
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream);
    if (e != cudaSuccess)
        return errf(err, "cuda backend: upload of %zu bytes: %s", bytes, cudaGetErrorString(e));
    return SRT_OK;
}

static int cuda_sync(srt_backend *be, srt_err *err)
{
    cuda_backend *c = cb(be);
    if (c->capturing)
        return errf(err, "cuda backend: sync inside a graph capture");
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        fail(c, "stream: %s", cudaGetErrorString(e));
    return take_error(c, err);
}

static int cuda_download(srt_backend *be, void *dst, const void *src, size_t bytes, srt_err *err)
{
    cuda_backend *c = cb(be);
    c->xbf_src = NULL;
    if (c->capturing)
        return errf(err, "cuda backend: download inside a graph capture");
    if (bytes) {
        cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream);
        if (e != cudaSuccess)
            fail(c, "download of %zu bytes: %s", bytes, cudaGetErrorString(e));
    }
    return cuda_sync(be, err);
}

static void cuda_copy(srt_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_backend *c = cb(be);
    c->xbf_src = NULL;
    if (bytes)
        CK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream), "copy");
}

static void cuda_destroy(srt_backend *be)
{
    cuda_backend *c = cb(be);
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    cuda_graph_clear(be);
    if (c->plans) {
        plans_clear(c);
        free(c->plans);
    }
    if (c->mm)
        cublasLtMatmulDescDestroy(c->mm);
    if (c->lt)
        cublasLtDestroy(c->lt);
    if (c->meta_host)
        cudaFreeHost(c->meta_host);
    if (c->smp_host)
        cudaFreeHost(c->smp_host);
    if (c->ids_host)
        cudaFreeHost(c->ids_host);
    if (c->up_host)
        cudaFreeHost(c->up_host);
    if (c->meta_done)
        cudaEventDestroy(c->meta_done);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    if (c->pool.base)
        cudaFree(c->pool.base);
    for (seg *s = c->pool.head; s;) {
        seg *n = s->next;
        if (c->pool.separate)
            cudaFree((void *)(uintptr_t)s->off);
        free(s);
        s = n;
    }
    free(c->w);
    free(c);
}

static void *cuda_stream(srt_backend *be) { return (void *)cb(be)->stream; }

static const srt_backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .reserve_matmul = cuda_reserve_matmul,
    .matmul = cuda_matmul,
    .embed = cuda_embed,
    .rmsnorm = cuda_rmsnorm,
    .silu = cuda_silu,
    .mul = cuda_mul,
    .silu_mul = cuda_silu_mul,
    .add = cuda_add,
    .add3 = cuda_add3,
    .rope = cuda_rope,
    .kv_store = cuda_kv_store,
    .attention = cuda_attention,
    .n_threads = cuda_n_threads,
    .alloc = cuda_alloc,
    .free = cuda_free_op,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .load_weight = cuda_load_weight,
    .begin_batch = cuda_begin_batch,
    .rope_cos_sin = cuda_rope_cos_sin,
    .gather_rows = cuda_gather_rows,
    .sync = cuda_sync,
    .add_rmsnorm = cuda_add_rmsnorm,
    .stream = cuda_stream,
    .graph_capture = cuda_graph_capture,
    .graph_ready = cuda_graph_ready,
    .graph_replay = cuda_graph_replay,
    .graph_clear = cuda_graph_clear,
};

/* ---------------------------------------------------------------- graphs ---------------- */
static void cuda_graph_clear(srt_backend *be)
{
    cuda_backend *c = cb(be);
    for (int i = 0; i < MAX_GRAPHS; i++)
        if (c->graphs[i]) {
            cudaGraphExecDestroy(c->graphs[i]);
            c->graphs[i] = NULL;
        }
}

static int cuda_graph_capture(srt_backend *be, int32_t bs, srt_cuda_graph_body body, void *user, srt_err *err)
{
    cuda_backend *c = cb(be);
    c->xbf_src = NULL;
    if (bs < 1 || bs > SRT_CUDA_GRAPH_MAX_BS)
        return errf(err, "cuda graphs: batch size %d outside [1, %d]", bs, SRT_CUDA_GRAPH_MAX_BS);
    if (c->failed)
        return take_error(c, err);
    /* the caller ran one eager step of this shape first (GEMM plans made, kernels loaded) */
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return errf(err, "cuda graphs: %s", cudaGetErrorString(e));
    e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess)
        return errf(err, "cuda graphs: begin capture: %s", cudaGetErrorString(e));
    c->capturing = 1;
    srt_err body_err;
    body_err.msg[0] = 0;
    int rc = body(user, &body_err);
    cudaGraph_t g = NULL;
    e = cudaStreamEndCapture(c->stream, &g);
    c->capturing = 0;
    if (rc != SRT_OK || c->failed || e != cudaSuccess) {
        if (g)
            cudaGraphDestroy(g);
        cudaGetLastError();
        if (rc != SRT_OK)
            errf(err, "cuda graphs: capture of batch %d: %s", bs, body_err.msg);
        else if (c->failed)
            take_error(c, err);
        else
            errf(err, "cuda graphs: capture of batch %d: %s (an op not allowed in a graph?)", bs,
                 cudaGetErrorString(e));
        c->failed = 0;
        return SRT_ERROR;
    }
    cudaGraphExec_t ex = NULL;
    e = cudaGraphInstantiate(&ex, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess)
        return errf(err, "cuda graphs: instantiate batch %d: %s", bs, cudaGetErrorString(e));
    if (c->graphs[bs])
        cudaGraphExecDestroy(c->graphs[bs]);
    c->graphs[bs] = ex;
    return SRT_OK;
}

static int cuda_graph_ready(srt_backend *be, int32_t bs)
{
    return bs >= 1 && bs <= SRT_CUDA_GRAPH_MAX_BS && cb(be)->graphs[bs] != NULL;
}

static int cuda_graph_replay(srt_backend *be, int32_t bs, srt_err *err)
{
    cuda_backend *c = cb(be);
    if (!cuda_graph_ready(be, bs))
        return errf(err, "cuda graphs: no graph captured for batch %d", bs);
    if (!c->cur || c->cur_tokens != bs)
        return errf(err, "cuda graphs: replay of batch %d needs begin_batch with exactly %d tokens first", bs, bs);
    cudaError_t e = cudaGraphLaunch(c->graphs[bs], c->stream);
    if (e != cudaSuccess)
        return errf(err, "cuda graphs: launch batch %d: %s", bs, cudaGetErrorString(e));
    return SRT_OK;
}

/* ---------------------------------------------------------------- sampling -------------- */
static int cuda_sample(srt_backend *be, float *logits, int32_t n_rows, int32_t vocab,
                       const srt_cuda_sample_params *params, const int32_t *counts, int32_t *out_ids, srt_err *err)
{
    cuda_backend *c = cb(be);
    if (n_rows <= 0)
        return SRT_OK;
    if (n_rows > SRT_CUDA_SAMPLE_MAX_ROWS || vocab <= 0)
        return errf(err, "cuda sample: %d rows (at most %d) of vocab %d", n_rows, SRT_CUDA_SAMPLE_MAX_ROWS, vocab);
    if (c->capturing)
        return errf(err, "cuda sample: inside a graph capture");
    cudaError_t e = cudaStreamSynchronize(c->stream);   /* the staging of the last call is free */
    if (e != cudaSuccess)
        return errf(err, "cuda sample: %s", cudaGetErrorString(e));
    memcpy(c->smp_host, params, (size_t)n_rows * sizeof *c->smp_host);
    e = cudaMemcpyAsync(c->smp_dev, c->smp_host, (size_t)n_rows * sizeof *c->smp_host, cudaMemcpyHostToDevice,
                        c->stream);
    if (e != cudaSuccess)
        return errf(err, "cuda sample: %s", cudaGetErrorString(e));
    check_launch(c, srt_cuda_launch_sample(logits, n_rows, vocab, c->smp_dev, counts, NULL, c->ids_dev, c->stream),
                 "sample");
    e = cudaMemcpyAsync(c->ids_host, c->ids_dev, (size_t)n_rows * sizeof(int32_t), cudaMemcpyDeviceToHost, c->stream);
    if (e != cudaSuccess)
        fail(c, "sample ids: %s", cudaGetErrorString(e));
    if (cuda_sync(be, err) != SRT_OK)
        return SRT_ERROR;
    memcpy(out_ids, c->ids_host, (size_t)n_rows * sizeof(int32_t));
    return SRT_OK;
}

/* ---------------------------------------------------------------- create / probe -------- */
static int cuda_probe(char *why, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(why, n, "no usable CUDA device: cudaGetDeviceCount: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        return 0;
    }
    if (count == 0) {
        snprintf(why, n, "no usable CUDA device: cudaGetDeviceCount found none");
        return 0;
    }
    int usable = 0;
    for (int i = 0; i < count; i++) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i) == cudaSuccess && major >= 8)
            usable++;
    }
    if (!usable)
        snprintf(why, n, "no usable CUDA device: %d found, none of compute capability 8.0 or newer (bf16 GEMMs)",
                 count);
    return usable;
}

static srt_backend *create_fail(cuda_backend *c, srt_err *err)
{
    logf_(SRT_LOG_ERROR, "%s", err ? err->msg : "cuda backend: creation failed");
    if (c)
        cuda_destroy(&c->base);
    return NULL;
}

static srt_backend *cuda_create(int device, double frac, srt_err *err)
{
    char why[512];
    int usable = cuda_probe(why, sizeof why);
    if (!usable) {
        errf(err, "srt_device cuda: %s", why);
        return create_fail(NULL, err);
    }
    int count = 0;
    cudaGetDeviceCount(&count);
    if (device < 0 || device >= count) {
        errf(err, "srt_device cuda: device %d does not exist (%d found)", device, count);
        return create_fail(NULL, err);
    }
    if (!(frac > 0.0 && frac <= 1.0)) {
        errf(err, "srt_device cuda: srt_mem_fraction_static %g outside (0, 1]", frac);
        return create_fail(NULL, err);
    }
    struct cudaDeviceProp prop;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {
        errf(err, "srt_device cuda: device %d: %s", device, cudaGetErrorString(e));
        return create_fail(NULL, err);
    }
    if (prop.major < 8) {
        errf(err, "srt_device cuda: device %d (%s) has compute capability %d.%d; 8.0 or newer is needed", device,
             prop.name, prop.major, prop.minor);
        return create_fail(NULL, err);
    }
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c) {
        errf(err, "cuda backend: out of host memory");
        return create_fail(NULL, err);
    }
    c->device = device;
    c->n_sm = prop.multiProcessorCount;
    c->base.ops = &cuda_ops;
    c->base.impl = c;
    size_t free_b = 0, total_b = 0;
    e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) {
        errf(err, "srt_device cuda: cudaMemGetInfo: %s", cudaGetErrorString(e));
        return create_fail(c, err);
    }
    size_t want = (size_t)((double)total_b * frac) / POOL_ALIGN * POOL_ALIGN;
    size_t headroom = (size_t)512 << 20;   /* context, cuBLASLt, graphs live outside the pool */
    if (want + headroom > free_b) {
        errf(err, "srt_device cuda: srt_mem_fraction_static %.3f asks for %zu MiB of device %d (%s) but only "
             "%zu MiB of %zu MiB is free (512 MiB must stay outside the pool)", frac, want >> 20, device,
             prop.name, free_b >> 20, total_b >> 20);
        return create_fail(c, err);
    }
    const char *pm = getenv("SRT_CUDA_POOL");
    c->pool.separate = pm && strcmp(pm, "separate") == 0;
    e = c->pool.separate ? cudaSuccess : cudaMalloc((void **)&c->pool.base, want);
    if (e != cudaSuccess) {
        c->pool.base = NULL;
        errf(err, "srt_device cuda: cudaMalloc of the %zu MiB pool: %s", want >> 20, cudaGetErrorString(e));
        return create_fail(c, err);
    }
    c->pool.size = want;
    if (!c->pool.separate) {
        c->pool.head = calloc(1, sizeof(seg));
        if (!c->pool.head) {
            errf(err, "cuda backend: out of host memory");
            return create_fail(c, err);
        }
        c->pool.head->size = want;
    }
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&c->meta_done, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaMallocHost(&c->up_host, UPLOAD_STAGING);
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&c->smp_host, SRT_CUDA_SAMPLE_MAX_ROWS * sizeof(srt_cuda_sampling));
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&c->ids_host, SRT_CUDA_SAMPLE_MAX_ROWS * sizeof(int32_t));
    if (e != cudaSuccess) {
        errf(err, "cuda backend: stream / pinned buffers: %s", cudaGetErrorString(e));
        return create_fail(c, err);
    }
    c->up_bytes = UPLOAD_STAGING;
    cublasStatus_t s = cublasLtCreate(&c->lt);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescCreate(&c->mm, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(c->mm, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(c->mm, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (s != CUBLAS_STATUS_SUCCESS) {
        errf(err, "cuda backend: cuBLASLt: %s", cublasLtGetStatusString(s));
        return create_fail(c, err);
    }
    c->plans = calloc(GEMM_PLANS, sizeof *c->plans);
    c->lt_ws_bytes = (size_t)32 << 20;
    c->att_ws_bytes = (size_t)8 * (size_t)c->n_sm * (256 + 2) * sizeof(float) +
                      (size_t)SRT_ATTN_MAX_SPLITS * 64 * (256 + 2) * sizeof(float);
    if (!c->plans) {
        errf(err, "cuda backend: out of host memory");
        return create_fail(c, err);
    }
    c->lt_ws = dalloc(c, c->lt_ws_bytes, "the cuBLASLt workspace", err);
    c->att_ws = c->lt_ws ? dalloc(c, c->att_ws_bytes, "the attention workspace", err) : NULL;
    c->smp_dev = c->att_ws ? dalloc(c, SRT_CUDA_SAMPLE_MAX_ROWS * sizeof(srt_cuda_sampling), "sampling", err) : NULL;
    c->ids_dev = c->smp_dev ? dalloc(c, SRT_CUDA_SAMPLE_MAX_ROWS * sizeof(int32_t), "sampling", err) : NULL;
    if (!c->ids_dev)
        return create_fail(c, err);
    logf_(SRT_LOG_INFO, "cuda backend: device %d (%s, %d SMs, cc %d.%d), pool %zu MiB (%.2f of %zu MiB)", device,
          prop.name, c->n_sm, prop.major, prop.minor, want >> 20, frac, total_b >> 20);
    return &c->base;
}

static int cuda_mem(srt_backend *be, size_t *pool_bytes, size_t *used_bytes)
{
    cuda_backend *c = cb(be);
    if (pool_bytes)
        *pool_bytes = c->pool.size;
    if (used_bytes)
        *used_bytes = c->pool.used;
    return SRT_OK;
}

EXPORT int srt_cuda_plugin_init(const srt_cuda_host_api *h, srt_cuda_plugin_api *out)
{
    out->abi = SRT_CUDA_PLUGIN_ABI;
    if (!h || h->abi != SRT_CUDA_PLUGIN_ABI || !h->dequant_row || !h->log)
        return -1;
    host = *h;
    out->probe = cuda_probe;
    out->create = cuda_create;
    out->mem = cuda_mem;
    out->graph_capture = cuda_graph_capture;
    out->graph_ready = cuda_graph_ready;
    out->graph_replay = cuda_graph_replay;
    out->graph_clear = cuda_graph_clear;
    out->sample = cuda_sample;
    return 0;
}
