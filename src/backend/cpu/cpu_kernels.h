/* CPU compute kernels: the thread pool, quantized matmul and the elementwise ops of a
 * transformer layer. Each SIMD path (AVX2, AVX-512) is chosen at run time and has a
 * portable twin that tests hold it against, and all are checked against srt_cpu_matmul_ref.
 *
 * Contract: no function here allocates; scratch memory is passed in by the caller. Every
 * tp argument may be NULL (runs on the calling thread). */
#ifndef SRT_CPU_KERNELS_H
#define SRT_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "srt/tensor.h"

/* ---- thread pool: persistent workers, the caller runs slice 0 ---- */
typedef struct srt_threadpool srt_threadpool;

srt_threadpool *srt_threadpool_create(int n_threads);   /* n_threads <= 0: all online cores */
void            srt_threadpool_free(srt_threadpool *tp);
int             srt_threadpool_size(const srt_threadpool *tp);
/* Runs fn(arg, ith, nth) for ith in [0, nth) across the pool and returns when all are done.
 * One caller thread at a time. Called from inside a task of the same pool it runs
 * fn(arg, 0, 1) inline (nested kernels are serial, never a deadlock). */
void            srt_threadpool_run(srt_threadpool *tp, void (*fn)(void *arg, int ith, int nth),
                                   void *arg);
/* Runs fn(arg, item, ith) for every item in [0, n_items), each once, on whichever threads
 * claim it (ith: the claiming thread's index, for per-thread scratch). Returns when every
 * item is done. A worker that has not started when the last item is claimed is not waited
 * for, so a busy host's scheduling delays cost less than with srt_threadpool_run. Nested
 * in a task of the same pool, or with one thread, the items run in order inline. */
void            srt_threadpool_run_items(srt_threadpool *tp, void (*fn)(void *arg, int64_t item, int ith),
                                         void *arg, int64_t n_items);

/* ---- which SIMD path was chosen ("avx512", "avx2", "portable") ---- */
const char *srt_cpu_simd_name(void);
/* Forces a path for every later call ("portable", "avx2", "avx512"); SRT_ERROR if this CPU
 * lacks it. The SRT_CPU_SIMD environment variable does the same at first use. For tests
 * and benchmarks; not thread-safe against concurrent kernels. */
int         srt_cpu_force_simd(const char *name);

/* ---- matmul: y[t][r] = sum_c x[t][c] * W[r][c] + bias[r], t < n_tok ----
 * x and y are f32, row-major, contiguous, not overlapping. bias may be NULL. W may be any
 * srt_dtype except I32. scratch must hold srt_cpu_matmul_scratch_bytes(w, n_tok) bytes (0 for
 * float weights: scratch may then be NULL). For quantized W the activations are quantized
 * into scratch as int8 per 32 (as llama.cpp does): outputs differ from the f32 product by
 * ~5e-3 relative on real weights; float W is multiplied in f32. */
size_t srt_cpu_matmul_scratch_bytes(const srt_weight *w, int64_t n_tok);
void   srt_cpu_matmul(srt_threadpool *tp, const srt_weight *w, const float *bias,
                      const float *x, int64_t n_tok, float *y, void *scratch);
/* Several weights applied to the same x in one pass over the pool (Q/K/V, gate/up): the
 * activations are quantized once and one split covers all rows, so a decode step pays
 * one barrier instead of n. All w[i] must have the same cols; 1 <= n <= MAX_MULTI.
 * bias may be NULL (no biases) or hold NULL entries. scratch must hold
 * srt_cpu_matmul_multi_scratch_bytes(n, w, n_tok). Returns SRT_ERROR on bad arguments. */
#define SRT_CPU_MATMUL_MAX_MULTI 8
size_t srt_cpu_matmul_multi_scratch_bytes(int n, const srt_weight *const *w, int64_t n_tok);
int    srt_cpu_matmul_multi(srt_threadpool *tp, int n, const srt_weight *const *w,
                            const float *const *bias, const float *x, int64_t n_tok,
                            float *const *y, void *scratch);
/* Scalar reference: dequantizes W and multiplies in f64-accumulated f32. Slow, for tests. */
void   srt_cpu_matmul_ref(const srt_weight *w, const float *bias, const float *x,
                          int64_t n_tok, float *y);

/* One row of W as f32 (embedding lookup, tests). A row outside [0, rows) gives zeros. */
void srt_cpu_dequant_row(const srt_weight *w, int64_t row, float *out);
/* n elements (a whole number of blocks of t) starting at src, as f32. */
void srt_cpu_dequant(srt_dtype t, const void *src, int64_t n, float *out);

/* ---- elementwise, over n_tok rows of width dim ---- */
/* out = x / rms(x) * w, w is a 1-D weight of any float dtype (F32/F16/BF16). */
void srt_cpu_rmsnorm(srt_threadpool *tp, const float *x, const srt_weight *w, float eps,
                     int64_t n_tok, int64_t dim, float *out);
/* out[i] = silu(gate[i]) * up[i]; out may be gate or up */
void srt_cpu_silu_mul(srt_threadpool *tp, const float *gate, const float *up, int64_t n, float *out);
/* y += x (elementwise, n floats) */
void srt_cpu_add(srt_threadpool *tp, float *y, const float *x, int64_t n);

/* f16 / bf16 <-> f32 conversions used across the engine. */
float    srt_f16_to_f32(uint16_t h);
uint16_t srt_f32_to_f16(float f);
float    srt_bf16_to_f32(uint16_t h);
uint16_t srt_f32_to_bf16(float f);   /* round to nearest even */

#endif
