/* Times srt_cpu_matmul on SmolLM2-135M shapes: decode (1 token) and prefill (128 tokens).
 *
 *   srt-bench-matmul [-t threads] [-s portable|avx2|avx512] [-d q4_1,q8_0,...] [-n tok,...]
 *                    [-m ms-per-case] [-c 0|1] [-B MB] [-M 1] [-e 1|2] [-p 0|1]
 *
 * -M 1 instead times the matmuls of whole SmolLM2-135M forward passes (30 layers of
 * Q4_1 q/k/v/o/gate/up/down with q|k|v and gate|up fused, and the Q8_0 lm_head on the
 * last token), each layer its own weights: a kernel-only ceiling for tokens/s.
 *
 * -c 1 ("cold") cycles through enough copies of each weight (>= 256 MB) that every call
 * reads W from DRAM, as a real decode step does (a 135M model is ~100 MB); -c 0 measures
 * a weight that stays in cache.
 *
 * -B MB measures the DRAM read bandwidth of the thread pool instead: every thread sums its
 * share of an MB-megabyte buffer (AVX2 loads where the CPU has them), best of 5 passes. A
 * decode step reads every weight once, so bandwidth / weight bytes is the decode roofline
 * (scripts/bench_engine.py reports each engine against it).
 *
 * -e 1 times the exact kernels (f32 activations, Q4_0/Q4_1/Q8_0's a 24-bit fixed point;
 * srt_cpu_exact_matmul) instead of matmul.c's 8-bit-activation ones (srt_numerics fast where
 * the 16-lane exact kernels do not run); -e 2 times what srt_numerics fast runs where they do:
 * those kernels with x of one digit (srt_cpu_q41_matmul_n's fast; matmul.c's for a type they do
 * not take, or where they do not run); fused q|k|v and gate|up
 * become one call per weight. Q4_0, Q4_1 and Q8_0 weights are packed first, as the CPU
 * runner's own copy of them is (srt_cpu_exact_pack), so a decode times the packed kernels the
 * server runs; -p 0 keeps them in the GGUF layout (srt_weights_mmap on).
 *
 * GFLOP/s counts 2*rows*cols*n_tok; GB/s counts weight bytes read once per call. Both
 * use wall time; cpu_us is process CPU time per call divided by the thread count (with
 * one thread, the figure to trust on a busy machine). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu_exact.h"
#include "backend/cpu/cpu_kernels.h"
#include "srt/common.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU time of the process: on a shared, oversubscribed host it excludes the time this
 * process sat descheduled, so single-thread figures stay meaningful there. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static const struct { const char *name; srt_dtype t; } dtypes[] = {
    { "f32", SRT_F32 }, { "f16", SRT_F16 }, { "bf16", SRT_BF16 }, { "q8_0", SRT_Q8_0 },
    { "q4_0", SRT_Q4_0 }, { "q4_1", SRT_Q4_1 }, { "q5_0", SRT_Q5_0 }, { "q5_1", SRT_Q5_1 },
    { "q4_k", SRT_Q4_K }, { "q5_k", SRT_Q5_K }, { "q6_k", SRT_Q6_K }, { "q2_k", SRT_Q2_K },
    { "q3_k", SRT_Q3_K }, { "iq4_nl", SRT_IQ4_NL }, { "iq4_xs", SRT_IQ4_XS },
};

/* Random bytes with every f16 scale replaced by a small finite value. */
static void fill(srt_dtype t, uint8_t *p, size_t bytes, int64_t cols)
{
    for (size_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)rnd();
    size_t bb = srt_dtype_block_bytes(t);
    uint16_t h = srt_f32_to_f16(0.01f), hb = srt_f32_to_bf16(0.01f);
    for (size_t off = 0; off + bb <= bytes; off += bb) {
        switch (t) {
        case SRT_F32: { float v = 0.01f * (float)(rnd() % 100); memcpy(p + off, &v, 4); break; }
        case SRT_F16: memcpy(p + off, &h, 2); break;
        case SRT_BF16: memcpy(p + off, &hb, 2); break;
        case SRT_Q8_0: case SRT_Q4_0: case SRT_Q5_0: case SRT_IQ4_NL: case SRT_IQ4_XS: memcpy(p + off, &h, 2); break;
        case SRT_Q2_K: memcpy(p + off + 80, &h, 2); memcpy(p + off + 82, &h, 2); break;
        case SRT_Q3_K: memcpy(p + off + 108, &h, 2); break;
        case SRT_Q4_1: case SRT_Q5_1: case SRT_Q4_K: case SRT_Q5_K:
            memcpy(p + off, &h, 2);
            memcpy(p + off + 2, &h, 2);
            break;
        case SRT_Q6_K: memcpy(p + off + 208, &h, 2); break;
        default: break;
        }
    }
    (void)cols;
}

static int exact;      /* -e 1, -e 2: fast's one-digit kernels */
static int pack = 1;   /* -p 0: the exact kernels on the GGUF layout */

/* w as the runner holds it for the exact path: packed where srt_cpu_exact_pack has a form
 * for it (the caller frees the old data, which this leaves alone) */
static srt_weight packed(srt_weight w)
{
    size_t n = exact && pack ? srt_cpu_exact_pack_bytes(&w) : 0;
    uint8_t *p = n ? aligned_alloc(64, (n + 63) / 64 * 64) : NULL;
    if (!p)
        return w;
    srt_weight out;
    srt_cpu_exact_pack(&w, p, &out);
    return out;
}

static size_t scratch_bytes(srt_threadpool *tp, const srt_weight *w, int64_t n)
{
    if (exact)
        return srt_cpu_exact_scratch_floats(srt_threadpool_size(tp), w->cols, n) * sizeof(float);
    return srt_cpu_matmul_scratch_bytes(w, n);
}

static void mm(srt_threadpool *tp, const srt_weight *w, const float *x, int64_t n, float *y, void *scratch)
{
    if (exact == 2 && srt_cpu_q41_takes(w->dtype) && srt_cpu_exact_avx512() == 1 &&
        srt_cpu_q41_matmul_n(tp, 1, &w, NULL, x, n, &y, scratch, 1, 1) == SRT_OK)
        return;
    if (exact != 1 || srt_cpu_exact_matmul(tp, w, NULL, x, n, y, scratch) != SRT_OK)
        srt_cpu_matmul(tp, w, NULL, x, n, y, scratch);
}

static void mm_multi(srt_threadpool *tp, int k, const srt_weight *const *w, const float *x, int64_t n,
                     float *const *y, void *scratch)
{
    if (!exact) {
        srt_cpu_matmul_multi(tp, k, w, NULL, x, n, y, scratch);
        return;
    }
    for (int i = 0; i < k; i++)
        mm(tp, w[i], x, n, y[i], scratch);
}

/* ---- -M: the matmuls of SmolLM2-135M forward passes ---- */

enum { N_LAYER = 30, D_MODEL = 576, D_KV = 192, D_FF = 1536, N_VOCAB = 49152 };

typedef struct { srt_weight q, k, v, o, gate, up, down; } layer_w;

static srt_weight make_weight(srt_dtype t, int64_t rows, int64_t cols)
{
    size_t rb = srt_dtype_row_bytes(t, cols);
    uint8_t *p = aligned_alloc(64, (rows * rb + 63) / 64 * 64);
    if (!p)
        return (srt_weight){ t, rows, cols, NULL, rb };
    fill(t, p, rows * rb, cols);
    srt_weight w = packed((srt_weight){ t, rows, cols, p, rb });
    if (w.data != p)
        free(p);
    return w;
}

static int model_sweep(srt_threadpool *tp, int ms)
{
    static layer_w L[N_LAYER];
    for (int l = 0; l < N_LAYER; l++) {
        L[l].q = make_weight(SRT_Q4_1, D_MODEL, D_MODEL);
        L[l].k = make_weight(SRT_Q4_1, D_KV, D_MODEL);
        L[l].v = make_weight(SRT_Q4_1, D_KV, D_MODEL);
        L[l].o = make_weight(SRT_Q4_1, D_MODEL, D_MODEL);
        L[l].gate = make_weight(SRT_Q4_1, D_FF, D_MODEL);
        L[l].up = make_weight(SRT_Q4_1, D_FF, D_MODEL);
        L[l].down = make_weight(SRT_Q4_1, D_MODEL, D_FF);
        if (!L[l].q.data || !L[l].k.data || !L[l].v.data || !L[l].o.data || !L[l].gate.data ||
            !L[l].up.data || !L[l].down.data)
            return 1;
    }
    srt_weight head = make_weight(SRT_Q8_0, N_VOCAB, D_MODEL);
    if (!head.data)
        return 1;
    /* 16: a batched decode step, every token's logits; 128: a prefill, the last token's */
    const int64_t toks[] = { 1, 16, 128 };
    for (int ti = 0; ti < 3; ti++) {
        int64_t n = toks[ti], n_head = n <= 16 ? n : 1;
        float *x = aligned_alloc(64, n * D_FF * 4), *q = aligned_alloc(64, n * D_MODEL * 4);
        float *k = aligned_alloc(64, n * D_KV * 4), *v = aligned_alloc(64, n * D_KV * 4);
        float *g = aligned_alloc(64, n * D_FF * 4), *u = aligned_alloc(64, n * D_FF * 4);
        float *logits = aligned_alloc(64, n_head * N_VOCAB * 4), *r = aligned_alloc(64, n * D_MODEL * 4);
        size_t sb = scratch_bytes(tp, &L[0].down, n), sb2 = scratch_bytes(tp, &head, n_head);
        void *scratch = aligned_alloc(64, ((sb > sb2 ? sb : sb2) + 63) / 64 * 64);
        for (int64_t i = 0; i < n * D_FF; i++)
            x[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
        int iters = 0;
        double t0 = now_s(), c0 = cpu_s(), el;
        do {
            for (int l = 0; l < N_LAYER; l++) {
                const srt_weight *qkv[3] = { &L[l].q, &L[l].k, &L[l].v };
                float *qkv_y[3] = { q, k, v };
                mm_multi(tp, 3, qkv, x, n, qkv_y, scratch);
                /* o and down write elsewhere, so x stays the same random input: written back,
                 * random weights grew it to inf and NaN over the layers, not the activations a
                 * model has (the f32 packed decode of the time then took a slower path) */
                mm(tp, &L[l].o, q, n, r, scratch);
                const srt_weight *gu[2] = { &L[l].gate, &L[l].up };
                float *gu_y[2] = { g, u };
                mm_multi(tp, 2, gu, x, n, gu_y, scratch);
                srt_cpu_silu_mul(tp, g, u, n * D_FF, g);
                mm(tp, &L[l].down, g, n, r, scratch);
            }
            mm(tp, &head, x + (n - n_head) * D_MODEL, n_head, logits, scratch);
            iters++;
            el = now_s() - t0;
        } while (el < ms * 1e-3 || iters < 2);
        double per = el / iters, cper = (cpu_s() - c0) / iters / srt_threadpool_size(tp);
        printf("forward n_tok=%-4lld %9.2f ms  %8.1f tok/s  (cpu %.2f ms/thread)\n", (long long)n,
               per * 1e3, n / per, cper * 1e3);
        free(x); free(q); free(k); free(v); free(g); free(u); free(logits); free(r); free(scratch);
    }
    free((void *)head.data);
    return 0;
}

struct stream { const float *p; size_t n; double sum[64]; };

/* Reads its share with four independent 8-lane accumulators: enough loads in flight that
 * the figure is the memory's, not one add chain's latency. */
#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2")))
#endif
static void stream_part(void *arg, int ith, int nth)
{
    struct stream *s = arg;
    size_t per = s->n / (size_t)nth / 64 * 64, lo = per * (size_t)ith, hi = ith == nth - 1 ? s->n : lo + per;
#if defined(__x86_64__)
    if (srt_cpu_simd_name()[0] == 'a') {   /* avx2 or avx512 */
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t i = lo; i + 32 <= hi; i += 32) {
            a0 = _mm256_add_ps(a0, _mm256_load_ps(s->p + i));
            a1 = _mm256_add_ps(a1, _mm256_load_ps(s->p + i + 8));
            a2 = _mm256_add_ps(a2, _mm256_load_ps(s->p + i + 16));
            a3 = _mm256_add_ps(a3, _mm256_load_ps(s->p + i + 24));
        }
        float t[8];
        _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        s->sum[ith & 63] = (double)t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
        return;
    }
#endif
    float a[4] = { 0, 0, 0, 0 };
    for (size_t i = lo; i + 4 <= hi; i += 4) {
        a[0] += s->p[i];
        a[1] += s->p[i + 1];
        a[2] += s->p[i + 2];
        a[3] += s->p[i + 3];
    }
    s->sum[ith & 63] = (double)a[0] + a[1] + a[2] + a[3];
}

static int bandwidth(srt_threadpool *tp, int mb)
{
    size_t n = (size_t)mb << 18;   /* floats */
    float *p = aligned_alloc(64, n * sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(i & 7);
    struct stream s = { p, n, { 0 } };
    double best = 0;
    for (int k = 0; k < 5; k++) {
        double t0 = now_s();
        srt_threadpool_run(tp, stream_part, &s);
        double gbs = (double)n * sizeof(float) / (now_s() - t0) / 1e9;
        if (gbs > best)
            best = gbs;
    }
    printf("read bandwidth: %.2f GB/s (threads=%d, %d MB, best of 5; checksum %.0f)\n", best,
           srt_threadpool_size(tp), mb, s.sum[0]);
    free(p);
    return 0;
}

int main(int argc, char **argv)
{
    int bw_mb = 0;
    int threads = 1, ms = 300, cold = 0, model = 0;
    const char *dlist = "q4_1,q8_0", *nlist = "1,128";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-s")) {
            if (srt_cpu_force_simd(argv[i + 1]) != SRT_OK) {
                fprintf(stderr, "SIMD path %s not available\n", argv[i + 1]);
                return 1;
            }
        } else if (!strcmp(argv[i], "-d")) dlist = argv[i + 1];
        else if (!strcmp(argv[i], "-n")) nlist = argv[i + 1];
        else if (!strcmp(argv[i], "-m")) ms = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) cold = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-M")) model = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-e")) exact = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) pack = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-B")) bw_mb = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [-t threads] [-s simd] [-d dtypes] [-n tokens] [-m ms] [-c 0|1] [-M 0|1] [-e 0|1] [-p 0|1] [-B MB]\n", argv[0]);
            return 1;
        }
    }
    srt_threadpool *tp = srt_threadpool_create(threads);
    if (!tp) {
        fprintf(stderr, "cannot create thread pool\n");
        return 1;
    }
    if (bw_mb > 0) {
        int rc = bandwidth(tp, bw_mb);
        srt_threadpool_free(tp);
        return rc;
    }
    if (model) {
        printf("simd=%s threads=%d SmolLM2-135M matmuls (Q4_1 layers; Q8_0 lm_head on every token up to 16, a decode step, else the last)\n",
               srt_cpu_simd_name(), srt_threadpool_size(tp));
        int rc = model_sweep(tp, ms);
        srt_threadpool_free(tp);
        return rc;
    }
    printf("simd=%s threads=%d weights=%s\n", srt_cpu_simd_name(), srt_threadpool_size(tp),
           cold ? "cold (DRAM)" : "warm (cache)");
    printf("%-6s %-14s %5s %10s %9s %8s %10s %9s\n", "dtype", "shape(out x in)", "n_tok", "us/call",
           "GFLOP/s", "GB/s", "cpu_us", "cpuGFLOP/s");
    static const int64_t shapes[][2] = { { 576, 576 }, { 1536, 576 }, { 576, 1536 }, { 49152, 576 } };
    char dbuf[256];
    snprintf(dbuf, sizeof(dbuf), "%s", dlist);
    for (char *ds = strtok(dbuf, ","); ds; ds = strtok(NULL, ",")) {
        srt_dtype t = SRT_DTYPE_COUNT;
        for (size_t k = 0; k < sizeof(dtypes) / sizeof(dtypes[0]); k++)
            if (!strcmp(ds, dtypes[k].name))
                t = dtypes[k].t;
        if (t == SRT_DTYPE_COUNT) {
            fprintf(stderr, "unknown dtype %s\n", ds);
            continue;
        }
        for (size_t s = 0; s < 4; s++) {
            int64_t rows = shapes[s][0], cols = shapes[s][1];
            if (cols % srt_dtype_block_elems(t))
                continue;
            size_t rb = srt_dtype_row_bytes(t, cols);
            uint8_t *src = aligned_alloc(64, (rows * rb + 63) / 64 * 64);
            if (!src) {
                fprintf(stderr, "out of memory\n");
                return 1;
            }
            srt_weight w = { t, rows, cols, src, rb };
            size_t pb = exact && pack ? srt_cpu_exact_pack_bytes(&w) : 0;   /* packed: its size */
            size_t wbytes = ((pb ? pb : rows * rb) + 63) / 64 * 64;
            int copies = 1;
            if (cold) {
                copies = (int)((256u << 20) / wbytes) + 1;
                if (copies < 2)
                    copies = 2;
            }
            uint8_t *wd = aligned_alloc(64, wbytes * copies);
            if (!wd) {
                fprintf(stderr, "out of memory\n");
                return 1;
            }
            for (int k = 0; k < copies; k++) {
                uint8_t *dst = wd + (size_t)k * wbytes;
                fill(t, pb ? src : dst, rows * rb, cols);
                if (pb)
                    srt_cpu_exact_pack(&(srt_weight){ t, rows, cols, src, rb }, dst, &w);
                else
                    w = (srt_weight){ t, rows, cols, dst, rb };
            }
            free(src);
            w.data = wd;
            const char *np = nlist;
            while (*np) {
                int64_t n_tok = strtol(np, (char **)&np, 10);
                if (*np == ',') np++;
                if (n_tok <= 0) break;
                float *x = aligned_alloc(64, (n_tok * cols * 4 + 63) / 64 * 64);
                float *y = aligned_alloc(64, (n_tok * rows * 4 + 63) / 64 * 64);
                for (int64_t i = 0; i < n_tok * cols; i++)
                    x[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
                size_t sb = scratch_bytes(tp, &w, n_tok);
                void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
                mm(tp, &w, x, n_tok, y, scratch);   /* warm up */
                int iters = 0;
                double t0 = now_s(), c0 = cpu_s(), el;
                do {
                    w.data = wd + (size_t)(iters % copies) * wbytes;
                    mm(tp, &w, x, n_tok, y, scratch);
                    iters++;
                    el = now_s() - t0;
                } while (el < ms * 1e-3);
                double per = el / iters;
                double cper = (cpu_s() - c0) / iters / srt_threadpool_size(tp);
                char shape[32];
                snprintf(shape, sizeof(shape), "%lldx%lld", (long long)rows, (long long)cols);
                printf("%-6s %-14s %5lld %10.1f %9.1f %8.1f %10.1f %9.1f\n", ds, shape, (long long)n_tok,
                       per * 1e6, 2.0 * rows * cols * n_tok / per * 1e-9, (pb ? pb : rows * rb) / per * 1e-9,
                       cper * 1e6, 2.0 * rows * cols * n_tok / cper * 1e-9);
                fflush(stdout);
                free(x); free(y); free(scratch);
            }
            free(wd);
        }
    }
    srt_threadpool_free(tp);
    return 0;
}
