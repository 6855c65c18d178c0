/* AVX2 + FMA + F16C kernels (compiled per function with target attributes). */
#include "backend/cpu/cpu_internal.h"

const cpu_simd_ops srt_cpu_ops_avx2 = {
    .name = "avx2",
    .quantize_q8 = srt_cpu_quantize_q8_portable,
};
