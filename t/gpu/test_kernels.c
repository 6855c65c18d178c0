/* Every op of the CUDA backend against its CPU twin, through the ops table (the path the runner
 * takes), on random shapes: ragged batches, cached prefixes, slots scattered over the pool,
 * split-K decode over long contexts, GQA, several head sizes, every KV dtype; device sampling
 * against src/sample (greedy) and against the softmax distribution; CUDA graph capture/replay
 * with new batch metadata between replays; error paths. TAP output.
 *
 * Tolerance policy (bf16 GEMMs, f32 everything else):
 *  - add, mul, add3, embed of a bf16 table, kv_store to F32/F16 (both round to nearest even),
 *    gather: bit-exact.
 *  - silu, silu_mul, rmsnorm, add_rmsnorm (its sum bit-exact), rope, cos_sin: |d| <= 1e-5 * |ref| + 1e-6 (the same f32 formula;
 *    only expf/sqrtf ulps and summation order differ). cos_sin at positions up to 32k: 2e-6
 *    absolute on top, as sinf/cosf of a large argument differ by ulps of the argument.
 *  - matmul: x and W are rounded to bf16 (relative error <= 2^-8 each) then multiplied with f32
 *    accumulation, so |d[t][r]| <= (2^-7 + 2^-16 + cols * 2^-24) * sum_c |x[t][c] * W[r][c]| + 1e-6,
 *    checked against the f64-accumulated reference srt_cpu_matmul_ref. The bound is per element,
 *    not a global fudge: a wrong row, column or transpose breaks it at once.
 *  - embed of a quantized table: the device row is bf16(dequant): |d| <= 2^-8 * |ref|.
 *  - attention, F32/F16 KV: |d| <= 2e-5 * max|v| + 1e-6 (both read identical K/V values);
 *    BF16 KV against the CPU on F32 KV: |d| <= 2^-7 * max|v| + 1e-5.
 *
 * Needs a GPU: without one every test fails (scripts/gpu-check is run on a GPU machine). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/tap.h"
#include "backend/cpu/cpu_kernels.h"
#include "srt/backend.h"
#include "srt/backend_cuda.h"
#include "srt/sampling.h"

static srt_backend *G, *C;   /* GPU and CPU backends */
static uint64_t rng_state = 0x12345678abcdefull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static float frand(void) { return (float)((rnd() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }
static int irand(int n) { return (int)(rnd() % (uint64_t)n); }

static float *randv(size_t n, float scale)
{
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = frand() * scale;
    return v;
}

static void *up(const void *h, size_t bytes)
{
    srt_err err = { { 0 } };
    void *d = G->ops->alloc(G, bytes ? bytes : 4, &err);
    if (!d || G->ops->upload(G, d, h, bytes, &err) != SRT_OK) {
        tap_diag("alloc/upload of %zu bytes: %s", bytes, err.msg);
        return NULL;
    }
    return d;
}

static void *down(const void *d, size_t bytes)
{
    srt_err err = { { 0 } };
    void *h = malloc(bytes ? bytes : 4);
    if (G->ops->download(G, h, d, bytes, &err) != SRT_OK)
        tap_diag("download: %s", err.msg);
    return h;
}

static int synced(const char *what)
{
    srt_err err = { { 0 } };
    int rc = G->ops->sync(G, &err);
    if (rc != SRT_OK)
        tap_diag("%s: %s", what, err.msg);
    return rc == SRT_OK;
}

/* max over i of |a-b| / (rel*|b| + abs), <= 1 passes */
static double worst(const float *a, const float *b, size_t n, double rel, double abs_, size_t *at)
{
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / (rel * fabs((double)b[i]) + abs_);
        if (!(d <= w)) {   /* NaN counts as worst */
            w = isnan(d) ? INFINITY : d;
            if (at)
                *at = i;
        }
    }
    return w;
}

static int close_enough(const char *name, const float *got, const float *want, size_t n, double rel, double abs_)
{
    size_t at = 0;
    double w = worst(got, want, n, rel, abs_, &at);
    if (!ok(w <= 1.0, "%s (worst %.3g of tolerance)", name, w))
        tap_diag("  at %zu: got %.9g want %.9g", at, got[at], want[at]);
    return w <= 1.0;
}

static srt_weight wf32(float *data, int64_t rows, int64_t cols)
{
    return (srt_weight){ SRT_F32, rows, cols, data, (size_t)cols * sizeof(float) };
}

/* A weight of dtype t from f32 values (quantized on the host by round-trip through the CPU's
 * dequantizer is not available, so quantized test weights are made bytewise-random and read
 * back as f32 through srt_cpu_dequant_row). */
static srt_weight make_weight(srt_dtype t, int64_t rows, int64_t cols, float scale)
{
    size_t rb = srt_dtype_row_bytes(t, cols);
    uint8_t *d = malloc(rb * (size_t)rows);
    if (t == SRT_F32 || t == SRT_F16 || t == SRT_BF16) {
        for (int64_t i = 0; i < rows * cols; i++) {
            float f = frand() * scale;
            if (t == SRT_F32)
                ((float *)d)[i] = f;
            else if (t == SRT_F16)
                ((uint16_t *)d)[i] = srt_f32_to_f16(f);
            else
                ((uint16_t *)d)[i] = srt_f32_to_bf16(f);
        }
    } else {
        size_t be = srt_dtype_block_bytes(t);
        for (size_t i = 0; i < rb * (size_t)rows; i++)
            d[i] = (uint8_t)rnd();
        /* sane f16 scales at the head of every block (d, and m for Q4_1): |d| < 2^-6 */
        if (t == SRT_Q8_0 || t == SRT_Q4_0 || t == SRT_Q4_1)
            for (size_t b = 0; b < rb * (size_t)rows / be; b++) {
                uint16_t *h = (uint16_t *)(d + b * be);
                h[0] = srt_f32_to_f16(frand() * 0.01f);
                if (t == SRT_Q4_1)
                    h[1] = srt_f32_to_f16(frand() * 0.01f);
            }
        else   /* K-quants: leave to random bits but clamp the leading f16 scales */
            for (size_t b = 0; b < rb * (size_t)rows / be; b++) {
                uint16_t *h = (uint16_t *)(d + b * be);
                if (t == SRT_Q4_K) {
                    h[0] = srt_f32_to_f16(frand() * 0.01f);
                    h[1] = srt_f32_to_f16(frand() * 0.01f);
                } else {   /* Q6_K: d at the end */
                    uint16_t *tail = (uint16_t *)(d + b * be + be - 2);
                    *tail = srt_f32_to_f16(frand() * 0.01f);
                }
            }
    }
    return (srt_weight){ t, rows, cols, d, rb };
}

static float *dequant_all(const srt_weight *w)
{
    float *f = malloc((size_t)w->rows * (size_t)w->cols * sizeof(float));
    for (int64_t r = 0; r < w->rows; r++)
        srt_cpu_dequant_row(w, r, f + r * w->cols);
    return f;
}

/* ---- elementwise ---- */
static void test_elementwise(void)
{
    int64_t sizes[] = { 1, 3, 31, 1000, 4097, 1 << 20 };
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int64_t n = sizes[si];
        float *a = randv(n, 8.0f), *b = randv(n, 8.0f), *ref = malloc(n * 4);
        float *da = up(a, n * 4), *db = up(b, n * 4), *dout = up(a, n * 4);
        float *got;
        /* add */
        memcpy(ref, a, n * 4);
        C->ops->add(C, ref, b, n);
        G->ops->add(G, dout, db, n);
        got = down(dout, n * 4);
        ok(memcmp(got, ref, n * 4) == 0, "add n=%lld bit-exact", (long long)n);
        free(got);
        /* mul */
        G->ops->copy(G, dout, da, n * 4);
        memcpy(ref, a, n * 4);
        C->ops->mul(C, ref, b, n);
        G->ops->mul(G, dout, db, n);
        got = down(dout, n * 4);
        ok(memcmp(got, ref, n * 4) == 0, "mul n=%lld bit-exact", (long long)n);
        free(got);
        /* add3 */
        C->ops->add3(C, ref, a, b, n);
        G->ops->add3(G, dout, da, db, n);
        got = down(dout, n * 4);
        ok(memcmp(got, ref, n * 4) == 0, "add3 n=%lld bit-exact", (long long)n);
        free(got);
        /* silu, silu_mul */
        C->ops->silu(C, a, n, ref);
        G->ops->silu(G, da, n, dout);
        got = down(dout, n * 4);
        close_enough("silu", got, ref, n, 1e-5, 1e-6);
        free(got);
        C->ops->silu_mul(C, a, b, n, ref);
        G->ops->silu_mul(G, da, db, n, dout);
        got = down(dout, n * 4);
        close_enough("silu_mul", got, ref, n, 1e-5, 1e-6);
        free(got);
        G->ops->free(G, da);
        G->ops->free(G, db);
        G->ops->free(G, dout);
        free(a);
        free(b);
        free(ref);
    }
    ok(synced("elementwise"), "elementwise: no device error");
}

/* ---- rmsnorm: rows x dim, weight F32/F16/BF16 ---- */
static void test_rmsnorm(void)
{
    int64_t dims[] = { 8, 64, 576, 896, 4096, 5120 };
    srt_dtype wt[] = { SRT_F32, SRT_BF16, SRT_F16 };
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        int64_t dim = dims[di], rows = 1 + irand(37);
        srt_weight w = make_weight(wt[di % 3], 1, dim, 2.0f);
        srt_err err = { { 0 } };
        ok(G->ops->load_weight(G, &w, &err) == SRT_OK, "load norm weight %s [%lld]", srt_dtype_name(w.dtype),
           (long long)dim);
        float *x = randv(rows * dim, 3.0f), *ref = malloc(rows * dim * 4);
        float *dx = up(x, rows * dim * 4), *dout = up(x, rows * dim * 4);
        C->ops->rmsnorm(C, x, &w, 1e-6f, rows, dim, ref);
        G->ops->rmsnorm(G, dx, &w, 1e-6f, rows, dim, dout);
        float *got = down(dout, rows * dim * 4);
        char name[96];
        snprintf(name, sizeof name, "rmsnorm %lld x %lld (%s weight)", (long long)rows, (long long)dim,
                 srt_dtype_name(w.dtype));
        close_enough(name, got, ref, rows * dim, 1e-5, 1e-6);
        free(got);
        free(x);
        free(ref);
        G->ops->free(G, dx);
        G->ops->free(G, dout);
    }
}

/* ---- add + rmsnorm fused vs add3 then rmsnorm on the CPU, in place and not ---- */
static void test_add_rmsnorm(void)
{
    int64_t dims[] = { 24, 576, 896, 4096 };
    for (size_t di = 0; di < 4; di++) {
        int64_t dim = dims[di], rows = 1 + irand(50);
        srt_weight w = make_weight(di & 1 ? SRT_BF16 : SRT_F32, 1, dim, 2.0f);
        srt_err err = { { 0 } };
        G->ops->load_weight(G, &w, &err);
        float *a = randv(rows * dim, 3.0f), *b = randv(rows * dim, 3.0f);
        float *sum = malloc(rows * dim * 4), *ref = malloc(rows * dim * 4);
        C->ops->add3(C, sum, a, b, rows * dim);
        C->ops->rmsnorm(C, sum, &w, 1e-5f, rows, dim, ref);
        float *da = up(a, rows * dim * 4), *db = up(b, rows * dim * 4), *dout = up(a, rows * dim * 4);
        G->ops->add_rmsnorm(G, da, da, db, &w, 1e-5f, rows, dim, dout);   /* in place: a += b */
        float *gsum = down(da, rows * dim * 4), *gout = down(dout, rows * dim * 4);
        char name[80];
        snprintf(name, sizeof name, "add_rmsnorm %lld x %lld: the sum bit-exact", (long long)rows, (long long)dim);
        ok(memcmp(gsum, sum, rows * dim * 4) == 0, "%s", name);
        snprintf(name, sizeof name, "add_rmsnorm %lld x %lld: the norm", (long long)rows, (long long)dim);
        close_enough(name, gout, ref, rows * dim, 1e-5, 1e-6);
        free(a);
        free(b);
        free(sum);
        free(ref);
        free(gsum);
        free(gout);
        G->ops->free(G, da);
        G->ops->free(G, db);
        G->ops->free(G, dout);
    }
}

/* ---- embed ---- */
static void test_embed(void)
{
    srt_dtype types[] = { SRT_BF16, SRT_F32, SRT_F16, SRT_Q8_0, SRT_Q4_1, SRT_Q4_0, SRT_Q4_K, SRT_Q6_K };
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        srt_dtype t = types[ti];
        int64_t dim = srt_dtype_block_elems(t) > 32 ? 512 : 96, vocab = 1000 + irand(500);
        srt_weight w = make_weight(t, vocab, dim, 1.0f);
        srt_err err = { { 0 } };
        if (!ok(G->ops->load_weight(G, &w, &err) == SRT_OK, "load embedding table %s", srt_dtype_name(t))) {
            tap_diag("%s", err.msg);
            continue;
        }
        int n = 1 + irand(300);
        int32_t *ids = malloc(n * 4);
        for (int i = 0; i < n; i++)
            ids[i] = i == 0 ? (int32_t)vocab - 1 : irand((int)vocab);
        float *ref = malloc((size_t)n * dim * 4);
        C->ops->embed(C, &w, ids, n, ref);
        int32_t *dids = up(ids, n * 4);
        float *dout = G->ops->alloc(G, (size_t)n * dim * 4, &err);
        G->ops->embed(G, &w, dids, n, dout);
        float *got = down(dout, (size_t)n * dim * 4);
        char name[64];
        snprintf(name, sizeof name, "embed %d ids from a %s table", n, srt_dtype_name(t));
        if (t == SRT_BF16)
            ok(memcmp(got, ref, (size_t)n * dim * 4) == 0, "%s: bit-exact", name);
        else
            close_enough(name, got, ref, (size_t)n * dim, 1.0 / 256, 1e-30);
        free(got);
        free(ref);
        free(ids);
        G->ops->free(G, dids);
        G->ops->free(G, dout);
    }
}

/* ---- matmul ---- */
static void test_matmul(void)
{
    struct { srt_dtype t; int64_t rows, cols; int bias; } cases[] = {
        { SRT_BF16, 896, 896, 1 },  { SRT_BF16, 128, 896, 1 }, { SRT_F32, 4864, 896, 0 },
        { SRT_F16, 896, 4864, 0 },  { SRT_Q8_0, 576, 576, 0 }, { SRT_Q4_1, 1536, 576, 0 },
        { SRT_Q4_0, 576, 1536, 1 }, { SRT_Q4_K, 512, 1024, 0 }, { SRT_Q6_K, 1000, 256, 0 },
        { SRT_BF16, 49152, 576, 0 }, { SRT_BF16, 3, 32, 1 },    { SRT_BF16, 1, 64, 0 },
    };
    int64_t toks[] = { 1, 2, 7, 64, 300 };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        srt_weight w = make_weight(cases[ci].t, cases[ci].rows, cases[ci].cols, 0.5f);
        if (cases[ci].rows == 1) {   /* a 1-row weight is stored f32 and refused by matmul */
            srt_err err = { { 0 } };
            G->ops->load_weight(G, &w, &err);
            float x[64] = { 0 }, y[1];
            float *dx = up(x, sizeof x), *dy = up(y, sizeof y);
            G->ops->matmul(G, &w, NULL, dx, 1, dy);
            ok(G->ops->sync(G, &err) == SRT_ERROR && strstr(err.msg, "f32"),
               "matmul on a 1-row (f32) weight is an error: %s", err.msg);
            G->ops->free(G, dx);
            G->ops->free(G, dy);
            continue;
        }
        float *bias = cases[ci].bias ? randv(w.rows, 1.0f) : NULL;
        srt_weight bw = bias ? wf32(bias, 1, w.rows) : (srt_weight){ 0 };
        srt_err err = { { 0 } };
        int64_t max_t = 300;
        if (!ok(G->ops->reserve_matmul(G, &w, max_t, &err) == SRT_OK &&
                (!bias || G->ops->load_weight(G, &bw, &err) == SRT_OK),
                "reserve/load %s [%lld x %lld]", srt_dtype_name(w.dtype), (long long)w.rows, (long long)w.cols)) {
            tap_diag("%s", err.msg);
            continue;
        }
        float *wf = dequant_all(&w);
        for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
            int64_t T = toks[ti];
            if (w.rows * T > 49152 * 8 && T > 2)
                continue;
            float *x = randv(T * w.cols, 2.0f), *ref = malloc(T * w.rows * 4);
            srt_cpu_matmul_ref(&w, bias, x, T, ref);
            float *dx = up(x, T * w.cols * 4), *dy = G->ops->alloc(G, T * w.rows * 4, &err);
            G->ops->matmul(G, &w, bias, dx, T, dy);
            float *got = down(dy, T * w.rows * 4);
            double wst = 0;
            int64_t at = 0;
            for (int64_t t = 0; t < T; t++)
                for (int64_t r = 0; r < w.rows; r++) {
                    double mag = 0;
                    for (int64_t c = 0; c < w.cols; c++)
                        mag += fabs((double)x[t * w.cols + c] * wf[r * w.cols + c]);
                    double d = fabs((double)got[t * w.rows + r] - ref[t * w.rows + r]) /
                               ((1.0 / 128 + 1.0 / 65536 + (double)w.cols / 16777216.0) * mag + 1e-6);
                    if (!(d <= wst)) {
                        wst = isnan(d) ? INFINITY : d;
                        at = t * w.rows + r;
                    }
                }
            if (!ok(wst <= 1.0, "matmul %s [%lld x %lld]%s x %lld tokens (worst %.3g of the bf16 bound)",
                    srt_dtype_name(w.dtype), (long long)w.rows, (long long)w.cols, bias ? " + bias" : "",
                    (long long)T, wst))
                tap_diag("  at %lld: got %.7g want %.7g", (long long)at, got[at], ref[at]);
            free(got);
            free(x);
            free(ref);
            G->ops->free(G, dx);
            G->ops->free(G, dy);
        }
        free(wf);
        free(bias);
    }
    /* a weight never loaded */
    srt_weight w = make_weight(SRT_BF16, 64, 64, 1.0f);
    float *dx = up(w.data, 64 * 4), *dy = up(w.data, 64 * 4);
    srt_err err = { { 0 } };
    G->ops->matmul(G, &w, NULL, dx, 1, dy);
    ok(G->ops->sync(G, &err) == SRT_ERROR && strstr(err.msg, "never given to load_weight"),
       "matmul on an unloaded weight reports: %s", err.msg);
    ok(G->ops->sync(G, &err) == SRT_OK, "the error is reported once");
}

/* ---- rope and cos_sin ---- */
static void test_rope(void)
{
    int hds[] = { 64, 128, 80, 32 };
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
        int hd = hds[hi], nh = 1 + irand(16), T = 1 + irand(200);
        float *inv = malloc(hd / 2 * 4);
        for (int i = 0; i < hd / 2; i++)
            inv[i] = powf(500000.0f, -2.0f * i / hd);
        srt_weight iw = wf32(inv, 1, hd / 2);
        srt_err err = { { 0 } };
        ok(G->ops->load_weight(G, &iw, &err) == SRT_OK, "load inv_freq");
        int32_t *pos = malloc(T * 4);
        for (int t = 0; t < T; t++)
            pos[t] = t == 0 ? 32767 : irand(8192);
        float *cs = malloc((size_t)T * 2 * hd * 4);
        for (int t = 0; t < T; t++)   /* the runner's rotary module, verbatim */
            for (int i = 0; i < hd / 2; i++) {
                float f = (float)pos[t] * inv[i];
                cs[t * 2 * hd + i] = cs[t * 2 * hd + i + hd / 2] = cosf(f);
                cs[t * 2 * hd + hd + i] = cs[t * 2 * hd + hd + i + hd / 2] = sinf(f);
            }
        int32_t *dpos = up(pos, T * 4);
        float *dcs = G->ops->alloc(G, (size_t)T * 2 * hd * 4, &err);
        G->ops->rope_cos_sin(G, dpos, T, inv, hd, dcs);
        float *gcs = down(dcs, (size_t)T * 2 * hd * 4);
        close_enough("rope_cos_sin (positions up to 32767)", gcs, cs, (size_t)T * 2 * hd, 1e-5, 2e-6);
        float *x = randv((size_t)T * nh * hd, 2.0f), *ref = malloc((size_t)T * nh * hd * 4);
        memcpy(ref, x, (size_t)T * nh * hd * 4);
        C->ops->rope(C, ref, T, nh, hd, cs);
        float *dx = up(x, (size_t)T * nh * hd * 4), *dcs2 = up(cs, (size_t)T * 2 * hd * 4);
        G->ops->rope(G, dx, T, nh, hd, dcs2);
        float *got = down(dx, (size_t)T * nh * hd * 4);
        char name[64];
        snprintf(name, sizeof name, "rope %d tokens x %d heads x %d", T, nh, hd);
        close_enough(name, got, ref, (size_t)T * nh * hd, 1e-5, 1e-6);
        free(got);
        free(gcs);
        free(x);
        free(ref);
        free(cs);
        free(pos);
        G->ops->free(G, dpos);
        G->ops->free(G, dcs);
        G->ops->free(G, dx);
        G->ops->free(G, dcs2);
        /* inv stays alive: the backend keys its copy by this pointer */
    }
}

/* ---- a random ragged batch over a scattered slot pool ---- */
typedef struct rbatch {
    srt_forward_batch b;
    int32_t *ids, *pos, *out_slots, *seq_start, *seq_len;
    int32_t **slots;
    int32_t n_slots;
} rbatch;

/* n_seqs sequences; each has prefix cached tokens and n_new new ones (decode: n_new = 1). */
static void make_batch(rbatch *r, int n_seqs, int max_prefix, int max_new, int n_slots)
{
    memset(r, 0, sizeof *r);
    r->n_slots = n_slots;
    int32_t *perm = malloc(n_slots * 4);
    for (int i = 0; i < n_slots; i++)
        perm[i] = i;
    for (int i = n_slots - 1; i > 0; i--) {
        int j = irand(i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int used = 0, total_new = 0;
    r->seq_len = malloc(n_seqs * 4);
    r->seq_start = malloc((n_seqs + 1) * 4);
    r->slots = malloc(n_seqs * sizeof *r->slots);
    int *n_new = malloc(n_seqs * sizeof(int));
    for (int s = 0; s < n_seqs; s++) {
        int prefix = max_prefix ? irand(max_prefix + 1) : 0;
        n_new[s] = 1 + (max_new > 1 ? irand(max_new) : 0);
        r->seq_len[s] = prefix + n_new[s];
        r->slots[s] = malloc(r->seq_len[s] * 4);
        for (int j = 0; j < r->seq_len[s]; j++)
            r->slots[s][j] = perm[(used++) % n_slots];   /* callers size n_slots so this never wraps
                                                            where the batch writes */
        r->seq_start[s] = total_new;
        total_new += n_new[s];
    }
    r->seq_start[n_seqs] = total_new;
    r->ids = calloc(total_new, 4);
    r->pos = malloc(total_new * 4);
    r->out_slots = malloc(total_new * 4);
    for (int s = 0; s < n_seqs; s++)
        for (int j = 0; j < n_new[s]; j++) {
            int t = r->seq_start[s] + j, p = r->seq_len[s] - n_new[s] + j;
            r->pos[t] = p;
            r->out_slots[t] = r->slots[s][p];
        }
    r->b = (srt_forward_batch){
        .n_tokens = total_new, .token_ids = r->ids, .positions = r->pos, .out_slots = r->out_slots,
        .n_seqs = n_seqs, .seq_start = r->seq_start, .seq_len = r->seq_len,
        .seq_slots = (const int32_t *const *)r->slots,
    };
    free(n_new);
    free(perm);
}

static void free_batch(rbatch *r)
{
    for (int s = 0; s < r->b.n_seqs; s++)
        free(r->slots[s]);
    free(r->slots);
    free(r->ids);
    free(r->pos);
    free(r->out_slots);
    free(r->seq_start);
    free(r->seq_len);
}

static size_t kv_esz(srt_dtype t) { return t == SRT_F32 ? 4 : 2; }

/* Fills both caches with the same random rows (through kv_store of a batch writing every slot),
 * then runs kv_store + attention of b on both backends and compares. */
static void attention_case(const char *label, rbatch *r, int nh, int nkv, int hd, srt_dtype gpu_kv)
{
    int row = nkv * hd, n_slots = r->n_slots, T = r->b.n_tokens;
    srt_dtype cpu_kv = gpu_kv == SRT_BF16 ? SRT_F32 : gpu_kv;
    srt_err err = { { 0 } };
    size_t ce = kv_esz(cpu_kv), ge = kv_esz(gpu_kv);
    void *kc = calloc((size_t)n_slots * row, ce), *vc = calloc((size_t)n_slots * row, ce);
    void *gk = G->ops->alloc(G, (size_t)n_slots * row * ge, &err);
    void *gv = G->ops->alloc(G, (size_t)n_slots * row * ge, &err);
    /* fill: one "prefill" batch that writes all slots, one sequence */
    {
        int32_t *all = malloc(n_slots * 4), *pos = malloc(n_slots * 4), ss[2] = { 0, n_slots }, len = n_slots;
        for (int i = 0; i < n_slots; i++) {
            all[i] = i;
            pos[i] = i;
        }
        const int32_t *sl[1] = { all };
        srt_forward_batch fb = { .n_tokens = n_slots, .token_ids = all, .positions = pos, .out_slots = all,
                                 .n_seqs = 1, .seq_start = ss, .seq_len = &len, .seq_slots = sl };
        float *k = randv((size_t)n_slots * row, 1.5f), *v = randv((size_t)n_slots * row, 1.5f);
        C->ops->kv_store(C, &fb, k, v, kc, vc, cpu_kv, row);
        float *dk = up(k, (size_t)n_slots * row * 4), *dv = up(v, (size_t)n_slots * row * 4);
        ok(G->ops->begin_batch(G, &fb, &err) == SRT_OK, "%s: begin_batch (fill)", label);
        G->ops->kv_store(G, &fb, dk, dv, gk, gv, gpu_kv, row);
        if (gpu_kv != SRT_BF16) {
            void *back = down(gk, (size_t)n_slots * row * ge);
            ok(memcmp(back, kc, (size_t)n_slots * row * ge) == 0, "%s: kv_store %s of %d slots bit-exact", label,
               srt_dtype_name(gpu_kv), n_slots);
            free(back);
        }
        G->ops->free(G, dk);
        G->ops->free(G, dv);
        free(k);
        free(v);
        free(all);
        free(pos);
    }
    /* the batch itself: new K/V rows, then attention */
    float *k = randv((size_t)T * row, 1.5f), *v = randv((size_t)T * row, 1.5f), *q = randv((size_t)T * nh * hd, 1.0f);
    float *ref = malloc((size_t)T * nh * hd * 4);
    C->ops->kv_store(C, &r->b, k, v, kc, vc, cpu_kv, row);
    srt_attn_args ca = { .batch = &r->b, .q = q, .out = ref, .k_cache = kc, .v_cache = vc, .kv_dtype = cpu_kv,
                         .n_heads = nh, .n_kv_heads = nkv, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd) };
    C->ops->attention(C, &ca);
    float *dk = up(k, (size_t)T * row * 4), *dv = up(v, (size_t)T * row * 4), *dq = up(q, (size_t)T * nh * hd * 4);
    float *dout = G->ops->alloc(G, (size_t)T * nh * hd * 4, &err);
    ok(G->ops->begin_batch(G, &r->b, &err) == SRT_OK, "%s: begin_batch", label);
    G->ops->kv_store(G, &r->b, dk, dv, gk, gv, gpu_kv, row);
    srt_attn_args ga = ca;
    ga.q = dq;
    ga.out = dout;
    ga.k_cache = gk;
    ga.v_cache = gv;
    ga.kv_dtype = gpu_kv;
    G->ops->attention(G, &ga);
    float *got = down(dout, (size_t)T * nh * hd * 4);
    char name[160];
    int maxlen = 0;
    for (int s = 0; s < r->b.n_seqs; s++)
        maxlen = r->seq_len[s] > maxlen ? r->seq_len[s] : maxlen;
    snprintf(name, sizeof name, "%s: attention %s KV, %d seqs, %d tokens, ctx <= %d, %d/%d heads x %d", label,
             srt_dtype_name(gpu_kv), r->b.n_seqs, T, maxlen, nh, nkv, hd);
    if (gpu_kv == SRT_BF16)
        close_enough(name, got, ref, (size_t)T * nh * hd, 0, 1.5 / 128 + 1e-5);
    else
        close_enough(name, got, ref, (size_t)T * nh * hd, 0, 1.5 * 2e-5 + 1e-6);
    ok(synced(name), "%s: no device error", label);
    free(got);
    free(ref);
    free(k);
    free(v);
    free(q);
    free(kc);
    free(vc);
    G->ops->free(G, dk);
    G->ops->free(G, dv);
    G->ops->free(G, dq);
    G->ops->free(G, dout);
    G->ops->free(G, gk);
    G->ops->free(G, gv);
}

static void test_attention(void)
{
    srt_dtype kvt[] = { SRT_F32, SRT_F16, SRT_BF16 };
    struct { int nh, nkv, hd; } shapes[] = { { 14, 2, 64 }, { 32, 8, 128 }, { 9, 3, 64 }, { 4, 4, 256 }, { 12, 2, 80 } };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ki = 0; ki < 3; ki++) {
            rbatch r;
            int nh = shapes[si].nh, nkv = shapes[si].nkv, hd = shapes[si].hd;
            /* ragged extend: cached prefixes + several new tokens per sequence */
            make_batch(&r, 1 + irand(6), 300, 40, 2048);
            attention_case("extend", &r, nh, nkv, hd, kvt[ki]);
            free_batch(&r);
            /* decode: one token per sequence, contexts long enough for several splits */
            make_batch(&r, 1 + irand(5), 3000, 1, 16384);   /* no slot is used twice */
            attention_case("decode", &r, nh, nkv, hd, kvt[ki]);
            free_batch(&r);
        }
    /* many short sequences (one split each) */
    rbatch r;
    make_batch(&r, 200, 20, 1, 8192);
    attention_case("decode x200", &r, 14, 2, 64, SRT_F16);
    free_batch(&r);
    /* kv_store / attention with a batch that was not announced */
    make_batch(&r, 2, 10, 2, 64);
    srt_err err = { { 0 } };
    float *d = G->ops->alloc(G, 64 * 128 * 4, &err);
    srt_attn_args a = { .batch = &r.b, .q = d, .out = d, .k_cache = d, .v_cache = d, .kv_dtype = SRT_F32,
                        .n_heads = 1, .n_kv_heads = 1, .head_dim = 64, .scale = 1 };
    G->ops->attention(G, &a);
    ok(G->ops->sync(G, &err) == SRT_ERROR && strstr(err.msg, "begin_batch"), "attention without begin_batch: %s",
       err.msg);
    G->ops->free(G, d);
    free_batch(&r);
}

static void test_gather(void)
{
    int rows = 50, width = 777;
    float *src = randv((size_t)rows * width, 1.0f);
    int32_t idx[7] = { 49, 0, 3, 3, 17, 48, 1 };
    float *ds = up(src, (size_t)rows * width * 4);
    int32_t *di = up(idx, sizeof idx);
    srt_err err = { { 0 } };
    float *dd = G->ops->alloc(G, 7 * width * 4, &err);
    G->ops->gather_rows(G, dd, ds, di, 7, width);
    float *got = down(dd, 7 * width * 4);
    int same = 1;
    for (int i = 0; i < 7; i++)
        same &= memcmp(got + i * width, src + idx[i] * width, width * 4) == 0;
    ok(same, "gather_rows picks the rows asked for");
    free(got);
    free(src);
    G->ops->free(G, ds);
    G->ops->free(G, di);
    G->ops->free(G, dd);
}

/* ---- sampling on the device ---- */
static void test_sampling(void)
{
    int vocab_sizes[] = { 7, 32000, 151936 };
    srt_err err = { { 0 } };
    for (size_t vi = 0; vi < 3; vi++) {
        int V = vocab_sizes[vi], R = 1 + irand(40);
        float *l = randv((size_t)R * V, 10.0f);
        float *dl = up(l, (size_t)R * V * 4);
        srt_cuda_sample_params *p = calloc(R, sizeof *p);
        int32_t *ids = malloc(R * 4);
        for (int i = 0; i < R; i++)
            p[i].repetition_penalty = 1.0f;
        int rc = srt_cuda_sample(G, dl, R, V, p, NULL, ids, &err);
        srt_sampler_ws *ws = srt_sampler_ws_create(V);
        int agree = rc == SRT_OK;
        for (int i = 0; i < R && agree; i++) {
            srt_sampling_params sp;
            srt_sampling_params_default(&sp);
            sp.temperature = 0;
            srt_sampler st;
            srt_sample_result res;
            srt_sampler_init(&st, &sp, V, NULL, 0, NULL, 0, &err);
            srt_sampler_sample(&st, ws, l + (size_t)i * V, &res);
            agree &= res.token == ids[i];
            if (res.token != ids[i])
                tap_diag("row %d: cpu %d gpu %d", i, res.token, ids[i]);
            srt_sampler_free(&st);
        }
        ok(agree, "greedy on the device = src/sample greedy (%d rows x %d)", R, V);
        srt_sampler_ws_free(ws);
        free(l);
        free(p);
        free(ids);
        G->ops->free(G, dl);
    }
    /* distribution: 8 logits, temperature 0.7, many seeds; frequencies within 5 sigma */
    {
        const int V = 8, N = 1000;   /* rows per call */
        float base[8] = { 1.0f, 0.5f, 2.0f, -1.0f, 0.0f, 1.5f, -0.5f, 0.2f };
        float *l = malloc((size_t)N * V * 4);
        srt_cuda_sample_params *p = calloc(N, sizeof *p);
        int32_t *ids = malloc(N * 4);
        int counts[8] = { 0 };
        float *dl = G->ops->alloc(G, (size_t)N * V * 4, &err);
        int fine = 1;
        for (int round = 0; round < 8 && fine; round++) {
            for (int i = 0; i < N; i++) {
                memcpy(l + i * V, base, sizeof base);
                p[i] = (srt_cuda_sample_params){ .temperature = 0.7f, .repetition_penalty = 1.0f, .top_p = 1.0f,
                                                 .seed = 1234 + i, .step = (uint64_t)round };
            }
            G->ops->upload(G, dl, l, (size_t)N * V * 4, &err);
            fine = srt_cuda_sample(G, dl, N, V, p, NULL, ids, &err) == SRT_OK;
            for (int i = 0; i < N && fine; i++)
                counts[ids[i]]++;
        }
        double z = 0, pr[8], worst_sig = 0;
        for (int i = 0; i < V; i++)
            z += exp(base[i] / 0.7);
        for (int i = 0; i < V; i++) {
            pr[i] = exp(base[i] / 0.7) / z;
            double n = 8.0 * N, sig = sqrt(n * pr[i] * (1 - pr[i]));
            double d = fabs(counts[i] - n * pr[i]) / sig;
            worst_sig = d > worst_sig ? d : worst_sig;
        }
        ok(fine && worst_sig < 5.0, "temperature sampling matches softmax(l/T) (worst %.2f sigma over 8000 draws)",
           worst_sig);
        /* the same seed and step gives the same tokens */
        for (int i = 0; i < N; i++)
            memcpy(l + i * V, base, sizeof base);
        int32_t *ids2 = malloc(N * 4);
        G->ops->upload(G, dl, l, (size_t)N * V * 4, &err);
        srt_cuda_sample(G, dl, N, V, p, NULL, ids, &err);
        G->ops->upload(G, dl, l, (size_t)N * V * 4, &err);
        srt_cuda_sample(G, dl, N, V, p, NULL, ids2, &err);
        ok(memcmp(ids, ids2, N * 4) == 0, "seeded sampling is reproducible");
        /* top_k = 2: only the two best (ids 2 and 5); min_p 0.5: only ids whose p >= 0.5 * p_max */
        for (int i = 0; i < N; i++) {
            memcpy(l + i * V, base, sizeof base);
            p[i].top_k = 2;
        }
        G->ops->upload(G, dl, l, (size_t)N * V * 4, &err);
        srt_cuda_sample(G, dl, N, V, p, NULL, ids, &err);
        int in_k = 1, seen2 = 0, seen5 = 0;
        for (int i = 0; i < N; i++) {
            in_k &= ids[i] == 2 || ids[i] == 5;
            seen2 |= ids[i] == 2;
            seen5 |= ids[i] == 5;
        }
        ok(in_k && seen2 && seen5, "top_k=2 draws only (and both of) the two best tokens");
        for (int i = 0; i < N; i++) {
            memcpy(l + i * V, base, sizeof base);
            p[i].top_k = 0;
            p[i].min_p = 0.5f;
        }
        G->ops->upload(G, dl, l, (size_t)N * V * 4, &err);
        srt_cuda_sample(G, dl, N, V, p, NULL, ids, &err);
        int in_minp = 1;
        for (int i = 0; i < N; i++)   /* p_i / p_max = exp((l_i - 2)/0.7) >= 0.5 keeps id 2 alone */
            in_minp &= exp((base[ids[i]] - 2.0) / 0.7) >= 0.5;
        ok(in_minp, "min_p=0.5 keeps only tokens within half of the top probability");
        /* top_p = 0.6: softmax(l/0.7) is .49 (id 2), .24 (id 5), .12 (id 0), ...: keeps {2, 5} */
        for (int i = 0; i < N; i++) {
            memcpy(l + i * V, base, sizeof base);
            p[i].min_p = 0;
            p[i].top_p = 0.6f;
        }
        G->ops->upload(G, dl, l, (size_t)N * V * 4, &err);
        srt_cuda_sample(G, dl, N, V, p, NULL, ids, &err);
        int in_p = 1;
        seen2 = seen5 = 0;
        for (int i = 0; i < N; i++) {
            in_p &= ids[i] == 2 || ids[i] == 5;
            seen2 |= ids[i] == 2;
            seen5 |= ids[i] == 5;
        }
        ok(in_p && seen2 && seen5, "top_p=0.6 draws from the smallest set reaching 60%% ({2, 5})");
        /* penalties from device counts, greedy: frequency 1.5 on id 2 (seen once) -> 0.5, so id 5
         * (1.5) wins; repetition 2 on id 5 as well -> 0.75, so id 0 (1.0) wins */
        int32_t *cnt = calloc((size_t)2 * V, 4);
        cnt[2] = 1;
        cnt[V + 2] = 1;
        cnt[V + 5] = 1;
        srt_cuda_sample_params pp[2] = { { .temperature = 0, .repetition_penalty = 1.0f, .frequency_penalty = 1.5f },
                                         { .temperature = 0, .repetition_penalty = 2.0f, .frequency_penalty = 1.5f } };
        memcpy(l, base, sizeof base);
        memcpy(l + V, base, sizeof base);
        G->ops->upload(G, dl, l, (size_t)2 * V * 4, &err);
        int32_t *dcnt = up(cnt, (size_t)2 * V * 4);
        int prc = srt_cuda_sample(G, dl, 2, V, pp, dcnt, ids, &err);
        /* row 1: id 2 -> 2/2 - 1.5 = -0.5, id 5 -> 1.5/2 - 1.5 = -0.75: id 0 (1.0) is the best */
        ok(prc == SRT_OK && ids[0] == 5 && ids[1] == 0, "penalties from device counts (got %d, %d; want 5, 0)", ids[0],
           ids[1]);
        G->ops->free(G, dcnt);
        free(cnt);
        free(ids2);
        free(l);
        free(p);
        free(ids);
        G->ops->free(G, dl);
    }
}

/* ---- graphs: capture attention + rmsnorm once, replay with new data and new batch metadata ---- */
typedef struct gctx {
    rbatch *r;
    float *dq, *dout, *dnorm;
    void *gk, *gv;
    srt_weight *nw;
    int nh, nkv, hd;
} gctx;

static int graph_body(void *user, srt_err *err)
{
    gctx *g = user;
    srt_attn_args a = { .batch = &g->r->b, .q = g->dq, .out = g->dout, .k_cache = g->gk, .v_cache = g->gv,
                        .kv_dtype = SRT_F16, .n_heads = g->nh, .n_kv_heads = g->nkv, .head_dim = g->hd,
                        .scale = 0.125f };
    G->ops->attention(G, &a);
    G->ops->rmsnorm(G, g->dout, g->nw, 1e-5f, (int64_t)g->r->b.n_tokens * g->nh, g->hd, g->dnorm);
    return SRT_OK;
}

static void test_graphs(void)
{
    srt_err err = { { 0 } };
    is_int(srt_cuda_graph_bucket(1), 1, "bucket(1)");
    is_int(srt_cuda_graph_bucket(3), 4, "bucket(3)");
    is_int(srt_cuda_graph_bucket(9), 16, "bucket(9)");
    is_int(srt_cuda_graph_bucket(17), 24, "bucket(17)");
    is_int(srt_cuda_graph_bucket(256), 256, "bucket(256)");
    is_int(srt_cuda_graph_bucket(257), -1, "bucket(257)");
    int nh = 8, nkv = 2, hd = 64, bs = 4, n_slots = 1024, row = nkv * hd;
    float *nwv = randv(hd, 1.0f);
    srt_weight nw = wf32(nwv, 1, hd);
    G->ops->load_weight(G, &nw, &err);
    uint16_t *kh = malloc((size_t)n_slots * row * 2), *vh = malloc((size_t)n_slots * row * 2);
    for (int i = 0; i < n_slots * row; i++) {
        kh[i] = srt_f32_to_f16(frand());
        vh[i] = srt_f32_to_f16(frand());
    }
    gctx g = { .nh = nh, .nkv = nkv, .hd = hd, .nw = &nw };
    g.gk = up(kh, (size_t)n_slots * row * 2);
    g.gv = up(vh, (size_t)n_slots * row * 2);
    g.dq = G->ops->alloc(G, (size_t)bs * nh * hd * 4, &err);
    g.dout = G->ops->alloc(G, (size_t)bs * nh * hd * 4, &err);
    g.dnorm = G->ops->alloc(G, (size_t)bs * nh * hd * 4, &err);
    int all_ok = 1;
    for (int step = 0; step < 4; step++) {
        rbatch r;
        make_batch(&r, bs, 400 + 100 * step, 1, n_slots);
        g.r = &r;
        float *q = randv((size_t)bs * nh * hd, 1.0f);
        G->ops->upload(G, g.dq, q, (size_t)bs * nh * hd * 4, &err);
        if (G->ops->begin_batch(G, &r.b, &err) != SRT_OK) {
            all_ok = 0;
            tap_diag("begin_batch: %s", err.msg);
        }
        if (step == 0) {
            graph_body(&g, &err);   /* one eager step first, as the runner must */
            ok(srt_cuda_graph_capture(G, bs, graph_body, &g, &err) == SRT_OK, "capture batch %d: %s", bs, err.msg);
            ok(srt_cuda_graph_ready(G, bs), "graph %d ready", bs);
        }
        ok(srt_cuda_graph_replay(G, bs, &err) == SRT_OK, "replay step %d", step);
        float *gr = down(g.dnorm, (size_t)bs * nh * hd * 4);
        graph_body(&g, &err);   /* eager, same inputs */
        float *ea = down(g.dnorm, (size_t)bs * nh * hd * 4);
        all_ok &= memcmp(gr, ea, (size_t)bs * nh * hd * 4) == 0;
        /* and the CPU: attention over the same f16 caches, then rmsnorm */
        float *ref = malloc((size_t)bs * nh * hd * 4), *refn = malloc((size_t)bs * nh * hd * 4);
        srt_attn_args ca = { .batch = &r.b, .q = q, .out = ref, .k_cache = kh, .v_cache = vh, .kv_dtype = SRT_F16,
                             .n_heads = nh, .n_kv_heads = nkv, .head_dim = hd, .scale = 0.125f };
        C->ops->attention(C, &ca);
        C->ops->rmsnorm(C, ref, &nw, 1e-5f, (int64_t)bs * nh, hd, refn);
        char name[80];
        snprintf(name, sizeof name, "graph replay step %d (context up to %d) = CPU", step, 400 + 100 * step + 1);
        close_enough(name, gr, refn, (size_t)bs * nh * hd, 1e-3, 1e-4);
        free(ref);
        free(refn);
        free(gr);
        free(ea);
        free(q);
        free_batch(&r);
    }
    ok(all_ok, "graph replays give the eager results bit for bit, with new metadata each step");
    /* a body that uploads is refused */
    srt_cuda_graph_clear(G);
    ok(!srt_cuda_graph_ready(G, bs), "graph_clear drops the graphs");
    ok(srt_cuda_graph_replay(G, bs, &err) == SRT_ERROR, "replay without a graph fails: %s", err.msg);
    G->ops->free(G, g.gk);
    G->ops->free(G, g.gv);
    G->ops->free(G, g.dq);
    G->ops->free(G, g.dout);
    G->ops->free(G, g.dnorm);
    free(kh);
    free(vh);
}

/* matmuls sharing an input inside a graph (one cast for both), then one on another input */
typedef struct mctx {
    srt_weight *w1, *w2, *w3;
    float *x, *y1, *y2, *y3;
    int64_t T;
} mctx;

static int mm_body(void *user, srt_err *err)
{
    mctx *m = user;
    G->ops->matmul(G, m->w1, NULL, m->x, m->T, m->y1);
    G->ops->matmul(G, m->w2, NULL, m->x, m->T, m->y2);
    G->ops->matmul(G, m->w3, NULL, m->y1, m->T, m->y3);
    G->ops->add(G, m->y3, m->y2, m->T * m->w3->rows);
    return SRT_OK;
}

static void test_graph_matmul(void)
{
    srt_err err = { { 0 } };
    int64_t T = 8, H = 256;
    srt_weight w1 = make_weight(SRT_BF16, H, H, 0.2f), w2 = make_weight(SRT_BF16, H, H, 0.2f);
    srt_weight w3 = make_weight(SRT_Q8_0, H, H, 0.2f);
    G->ops->reserve_matmul(G, &w1, T, &err);
    G->ops->reserve_matmul(G, &w2, T, &err);
    G->ops->reserve_matmul(G, &w3, T, &err);
    mctx m = { &w1, &w2, &w3, NULL, NULL, NULL, NULL, T };
    m.x = G->ops->alloc(G, T * H * 4, &err);
    m.y1 = G->ops->alloc(G, T * H * 4, &err);
    m.y2 = G->ops->alloc(G, T * H * 4, &err);
    m.y3 = G->ops->alloc(G, T * H * 4, &err);
    int same = 1, captured = 0;
    rbatch r;   /* replay insists on a batch of the graph's size announced first */
    make_batch(&r, 8, 0, 1, 64);
    for (int step = 0; step < 3; step++) {
        float *x = randv(T * H, 1.0f);
        G->ops->begin_batch(G, &r.b, &err);
        G->ops->upload(G, m.x, x, T * H * 4, &err);
        mm_body(&m, &err);
        float *eager = down(m.y3, T * H * 4);
        G->ops->upload(G, m.y3, x, T * H * 4, &err);   /* garbage in the outputs */
        if (!captured)
            captured = ok(srt_cuda_graph_capture(G, 8, mm_body, &m, &err) == SRT_OK, "capture matmuls: %s", err.msg);
        ok(srt_cuda_graph_replay(G, 8, &err) == SRT_OK || !captured, "replay matmuls step %d", step);
        float *graph = down(m.y3, T * H * 4);
        same &= memcmp(eager, graph, T * H * 4) == 0;
        free(eager);
        free(graph);
        free(x);
    }
    ok(same, "matmuls replayed from a graph (shared cast) = eager, bit for bit, with new inputs");
    free_batch(&r);
    srt_cuda_graph_clear(G);
    G->ops->free(G, m.x);
    G->ops->free(G, m.y1);
    G->ops->free(G, m.y2);
    G->ops->free(G, m.y3);
}

static void test_errors(void)
{
    srt_err err = { { 0 } };
    ok(srt_cuda_backend_create(0, 1.5, &err) == NULL && strstr(err.msg, "srt_mem_fraction_static"),
       "mem fraction 1.5 refused: %s", err.msg);
    ok(srt_cuda_backend_create(9999, 0.01, &err) == NULL && strstr(err.msg, "device 9999"),
       "device 9999 refused: %s", err.msg);
    size_t pool = 0, used = 0;
    srt_cuda_backend_mem(G, &pool, &used);
    void *p = G->ops->alloc(G, pool + 1, &err);
    ok(p == NULL && strstr(err.msg, "pool exhausted"), "an allocation larger than the pool: %s", err.msg);
    void *a = G->ops->alloc(G, 1000, &err), *b = G->ops->alloc(G, 1000, &err);
    size_t used2 = 0;
    srt_cuda_backend_mem(G, NULL, &used2);
    G->ops->free(G, a);
    G->ops->free(G, b);
    size_t used3 = 0;
    srt_cuda_backend_mem(G, NULL, &used3);
    ok(used2 >= used + 2000 && used3 == used, "alloc/free keep the pool's books (%zu -> %zu -> %zu)", used, used2,
       used3);
}

int main(void)
{
    char why[512];
    int n = srt_cuda_probe(why, sizeof why);
    if (!ok(n > 0, "a usable CUDA device (%d)", n)) {
        tap_diag("%s", why);
        return tap_done();
    }
    const char *mf = getenv("SRT_TEST_MEM_FRACTION");
    srt_err err = { { 0 } };
    G = srt_cuda_backend_create(0, mf ? atof(mf) : 0.05, &err);
    C = srt_cpu_backend_create(2, 1, &err);
    if (!ok(G && C, "backends created: %s", err.msg))
        return tap_done();
    ok(srt_backend_is_cuda(G) && !srt_backend_is_cuda(C), "srt_backend_is_cuda");
    test_elementwise();
    test_rmsnorm();
    test_add_rmsnorm();
    test_embed();
    test_matmul();
    test_rope();
    test_attention();
    test_gather();
    test_sampling();
    test_graphs();
    test_graph_matmul();
    test_errors();
    ok(synced("end"), "no device error left at the end");
    srt_backend_free(G);
    srt_backend_free(C);
    return tap_done();
}
