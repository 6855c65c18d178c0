/* Element types and the weight descriptor shared by loaders, backends and the model. */
#ifndef SRT_TENSOR_H
#define SRT_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "srt/common.h"   /* SRT_API */

/* Quantized types use GGML's block layouts bit for bit, so GGUF data is used in place. */
typedef enum srt_dtype {
    SRT_F32 = 0,
    SRT_F16,
    SRT_BF16,
    SRT_Q8_0,   /* 32 elems: f16 d, int8 q[32] */
    SRT_Q4_0,   /* 32 elems: f16 d, 16 bytes of nibbles */
    SRT_Q4_1,   /* 32 elems: f16 d, f16 m, 16 bytes of nibbles */
    SRT_Q4_K,   /* 256 elems super-block */
    SRT_Q6_K,   /* 256 elems super-block */
    SRT_I32,
    SRT_Q4_1_X16, /* Q4_1 in 16-row groups, made at load by the CPU */
    SRT_Q8_0_X8,  /* Q5_0 as Q8_0 in 8-row groups for the f32 exact kernels; never in a file */
    SRT_Q5_0,   /* 32 elems: f16 d, 4 bytes of fifth bits, 16 bytes of nibbles */
    SRT_Q5_1,   /* 32 elems: f16 d, f16 m, 4 bytes of fifth bits, 16 bytes of nibbles */
    SRT_Q4_0_X16, /* Q4_0 in 16-row groups, as SRT_Q4_1_X16; never in a file */
    SRT_Q8_0_X16, /* Q8_0 in 16-row groups for the integer kernels; never in a file */
    SRT_Q5_0_X16, /* Q5_0 in 16-row groups, its fifth bits as masks; never in a file */
    SRT_Q4_K_X16, /* Q4_K in 16-row groups, scales unpacked; never in a file */
    SRT_Q6_K_X16, /* Q6_K in 16-row groups, its top bits as masks; never in a file */
    SRT_Q5_K,   /* 256 elems super-block: Q4_K's with a fifth bit per element */
    SRT_Q5_K_X16, /* Q5_K in 16-row groups, as SRT_Q4_K_X16 with masks; never in a file */
    SRT_Q5_1_X16, /* Q5_1 in 16-row groups, as SRT_Q5_0_X16 with m; never in a file */
    SRT_Q2_K,   /* 256 elems super-block: 4-bit scales and mins per 16, 2-bit q */
    SRT_Q3_K,   /* 256 elems super-block: 6-bit scales per 16, 3-bit q */
    SRT_IQ4_NL, /* 32 elems: f16 d, 16 bytes of nibbles indexing a fixed table of 16 values */
    SRT_IQ4_XS, /* 256 elems super-block: IQ4_NL's table, 6-bit scales per 32 */
    SRT_IQ4_NL_X16, /* IQ4_NL in 16-row groups, as SRT_Q4_0_X16; never in a file */
    SRT_IQ4_XS_X16, /* IQ4_XS in 16-row groups, scales unpacked; never in a file */
    SRT_Q3_K_X16, /* Q3_K in 16-row groups, scales unpacked, q as two-bit planes and masks; never in a file */
    SRT_Q2_K_X16, /* Q2_K in 16-row groups, scales and mins unpacked, q as two-bit planes; never in a file */
    SRT_DTYPE_COUNT
} srt_dtype;

SRT_API int         srt_dtype_block_elems(srt_dtype t);   /* elements per block (1 for plain types) */
SRT_API size_t      srt_dtype_block_bytes(srt_dtype t);   /* bytes per block */
SRT_API const char *srt_dtype_name(srt_dtype t);
/* Bytes of a row of n elements; n must be a multiple of the block size. */
SRT_API size_t      srt_dtype_row_bytes(srt_dtype t, int64_t n);

/* A 2-D weight as stored: rows = output features, cols = input features, row-major.
 * 1-D weights (norms, biases) have rows == 1. data is not owned (usually mmapped). */
typedef struct srt_weight {
    srt_dtype   dtype;
    int64_t     rows;
    int64_t     cols;
    const void *data;
    size_t      row_stride;   /* bytes between rows */
} srt_weight;

#endif
