#ifndef SRT_CPU_PRECISE_H
#define SRT_CPU_PRECISE_H

#include <stdint.h>

#include "srt/tensor.h"

/* dot of one weight row (nb blocks of 32) with f32 x; xsum[b] = sum of x over block b
 * (used by the formats with an offset, Q4_1). */
typedef float (*srt_precise_dot_fn)(const void *row, const float *x, const float *xsum, int64_t nb);
/* The fused kernel for a weight type on the chosen SIMD path, NULL where there is none
 * (the caller dequantizes rows then). */
srt_precise_dot_fn srt_cpu_precise_dot(srt_dtype t);

#endif
