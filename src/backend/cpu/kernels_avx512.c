/* AVX-512 (F/BW/VL/VNNI) kernels (compiled per function with target attributes). */
#include "backend/cpu/cpu_internal.h"

const cpu_simd_ops srt_cpu_ops_avx512 = {
    .name = "avx512",
    .quantize_q8 = srt_cpu_quantize_q8_portable,
};
