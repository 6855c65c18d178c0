/* The exact matmul (f32 activations x weights dequantized exactly as HF does), with the
 * weights dequantized in registers; private to src/backend/cpu. */
#ifndef SRT_CPU_EXACT_H
#define SRT_CPU_EXACT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/cpu_kernels.h"

/* y[t][r] = sum_c x[t][c] * W[r][c] + bias[r] for Q4_0 / Q4_1 / Q8_0 W (AVX2 + FMA).
 * scratch holds srt_cpu_exact_scratch_floats(threads of tp, W cols, n_tok) floats. Batch
 * invariant: a (row, token) output does not depend on n_tok or the token's place.
 * SRT_ERROR, nothing written, for other types or on a CPU without AVX2. */
int    srt_cpu_exact_matmul(srt_threadpool *tp, const srt_weight *w, const float *bias, const float *x,
                            int64_t n_tok, float *y, float *scratch);
size_t srt_cpu_exact_scratch_floats(int n_threads, int64_t cols, int64_t n_tok);

#endif
