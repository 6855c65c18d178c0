/* f32 dot product, SIMD where the CPU has it (chosen once at run time). */
#ifndef SRT_CPU_DOT_H
#define SRT_CPU_DOT_H

#include <stdint.h>

typedef float (*srt_dot_f32_fn)(const float *a, const float *b, int64_t n);
srt_dot_f32_fn srt_cpu_dot_f32(void);
/* y[i] += a * x[i] */
typedef void (*srt_axpy_f32_fn)(float *y, float a, const float *x, int64_t n);
srt_axpy_f32_fn srt_cpu_axpy_f32(void);

/* Attention blocks: out[j] = q . rows[j] for j < nb; acc += sum_j p[j] * rows[j].
 * The query / accumulator stay in registers across the block. n: head_dim. */
typedef void (*srt_dot_rows_fn)(const float *q, const float *const *rows, int nb, int64_t n, float *out);
typedef void (*srt_axpy_rows_fn)(float *acc, const float *p, const float *const *rows, int nb, int64_t n);
srt_dot_rows_fn  srt_cpu_dot_rows(void);
srt_axpy_rows_fn srt_cpu_axpy_rows(void);

/* Attention over f16 KV rows (n values each, <= 1024), a block of nb keys at a time:
 * out[i * stride + j] = q[i] . k[j] and acc[i] += p[i * pstride + j] * v[j] for j in order, for
 * the nh heads; the same bits as converting each row with srt_cpu_f16_row and calling the
 * chosen dot / axpy per head and key, whatever nb. */
typedef void (*srt_f16_dot_block_fn)(const float *const *q, int nh, const uint16_t *const *k, int nb, int64_t n,
                                     float *out, int stride);
typedef void (*srt_f16_axpy_block_fn)(float *const *acc, const float *p, int pstride, int nh,
                                      const uint16_t *const *v, int nb, int64_t n);
srt_f16_dot_block_fn  srt_cpu_f16_dot_block(void);
srt_f16_axpy_block_fn srt_cpu_f16_axpy_block(void);

/* x[i] = exp(x[i] - m) for i < n, returns the sum (softmax numerators) */
typedef float (*srt_exp_sum_fn)(float *x, int64_t n, float m);
srt_exp_sum_fn srt_cpu_exp_sum(void);

/* n f16 values to f32 (F16C where present) */
typedef void (*srt_f16_row_fn)(const uint16_t *h, float *out, int64_t n);
srt_f16_row_fn srt_cpu_f16_row(void);
/* n f32 values to f16, round to nearest even */
typedef void (*srt_f32_to_f16_row_fn)(const float *x, uint16_t *out, int64_t n);
srt_f32_to_f16_row_fn srt_cpu_f32_to_f16_row(void);

#endif
