/* f32 dot product, SIMD where the CPU has it (chosen once at run time). */
#ifndef SRT_CPU_DOT_H
#define SRT_CPU_DOT_H

#include <stdint.h>

typedef float (*srt_dot_f32_fn)(const float *a, const float *b, int64_t n);
srt_dot_f32_fn srt_cpu_dot_f32(void);
/* y[i] += a * x[i] */
typedef void (*srt_axpy_f32_fn)(float *y, float a, const float *x, int64_t n);
srt_axpy_f32_fn srt_cpu_axpy_f32(void);

/* n f16 values to f32 (F16C where present) */
typedef void (*srt_f16_row_fn)(const uint16_t *h, float *out, int64_t n);
srt_f16_row_fn srt_cpu_f16_row(void);
/* n f32 values to f16, round to nearest even */
typedef void (*srt_f32_to_f16_row_fn)(const float *x, uint16_t *out, int64_t n);
srt_f32_to_f16_row_fn srt_cpu_f32_to_f16_row(void);

#endif
