/* The element-type table. Block sizes and byte counts match GGML's layouts so that
 * GGUF tensor data can be used in place. */
#include "srt/tensor.h"

static const struct {
    const char *name;
    int         block_elems;
    size_t      block_bytes;
} dtype_table[SRT_DTYPE_COUNT] = {
    [SRT_F32]  = { "f32",  1,   4 },
    [SRT_F16]  = { "f16",  1,   2 },
    [SRT_BF16] = { "bf16", 1,   2 },
    [SRT_Q8_0] = { "q8_0", 32,  2 + 32 },              /* d, qs[32] */
    [SRT_Q4_0] = { "q4_0", 32,  2 + 16 },              /* d, qs[16] */
    [SRT_Q4_1] = { "q4_1", 32,  2 + 2 + 16 },          /* d, m, qs[16] */
    [SRT_Q4_K] = { "q4_k", 256, 2 + 2 + 12 + 128 },    /* d, dmin, scales[12], qs[128] */
    [SRT_Q6_K] = { "q6_k", 256, 128 + 64 + 16 + 2 },   /* ql[128], qh[64], scales[16], d */
    [SRT_I32]  = { "i32",  1,   4 },
    [SRT_Q4_1_X16] = { "q4_1x16", 32, 2 + 2 + 16 },    /* Q4_1's bytes, rows regrouped */
    [SRT_Q8_0_X8] = { "q8_0x8", 32, 2 + 32 },          /* Q8_0's bytes, rows regrouped */
    [SRT_Q5_0] = { "q5_0", 32,  2 + 4 + 16 },          /* d, qh[4], qs[16] */
    [SRT_Q5_1] = { "q5_1", 32,  2 + 2 + 4 + 16 },      /* d, m, qh[4], qs[16] */
    [SRT_Q4_0_X16] = { "q4_0x16", 32, 2 + 16 },        /* Q4_0's bytes, rows regrouped */
    [SRT_Q8_0_X16] = { "q8_0x16", 32, 2 + 32 },        /* Q8_0's bytes, rows regrouped */
    [SRT_Q5_0_X16] = { "q5_0x16", 32, 2 + 4 + 16 },    /* Q5_0's bits, rows regrouped */
    [SRT_Q4_K_X16] = { "q4_kx16", 256, 4 + 16 + 128 }, /* d, dmin, 8 scales and mins as bytes, qs */
    [SRT_Q6_K_X16] = { "q6_kx16", 256, 2 + 16 + 192 }, /* Q6_K's bytes, rows regrouped */
    [SRT_Q5_K] = { "q5_k", 256, 2 + 2 + 12 + 32 + 128 }, /* d, dmin, scales[12], qh[32], qs[128] */
    [SRT_Q5_K_X16] = { "q5_kx16", 256, 4 + 16 + 32 + 128 }, /* Q4_K_X16's and the fifth bits */
    [SRT_Q5_1_X16] = { "q5_1x16", 32, 2 + 2 + 4 + 16 },  /* Q5_1's bits, rows regrouped */
    [SRT_Q2_K] = { "q2_k", 256, 16 + 64 + 2 + 2 },     /* scales[16], qs[64], d, dmin */
    [SRT_Q3_K] = { "q3_k", 256, 32 + 64 + 12 + 2 },    /* hmask[32], qs[64], scales[12], d */
    [SRT_IQ4_NL] = { "iq4_nl", 32, 2 + 16 },           /* d, qs[16] */
    [SRT_IQ4_XS] = { "iq4_xs", 256, 2 + 2 + 4 + 128 }, /* d, scales_h, scales_l[4], qs[128] */
    [SRT_IQ4_NL_X16] = { "iq4_nlx16", 32, 2 + 16 },    /* IQ4_NL's bytes, rows regrouped */
    [SRT_IQ4_XS_X16] = { "iq4_xsx16", 256, 2 + 8 + 128 }, /* d, 8 scales as bytes, qs */
    [SRT_Q3_K_X16] = { "q3_kx16", 256, 2 + 16 + 64 + 32 }, /* d, 16 scales as bytes, q's two-bit planes, masks */
    [SRT_Q2_K_X16] = { "q2_kx16", 256, 4 + 32 + 64 },  /* d, dmin, 16 scales and mins as bytes, q's two-bit planes */
};

static int dtype_valid(srt_dtype t)
{
    return (int)t >= 0 && t < SRT_DTYPE_COUNT;
}

int srt_dtype_block_elems(srt_dtype t)
{
    return dtype_valid(t) ? dtype_table[t].block_elems : 0;
}

size_t srt_dtype_block_bytes(srt_dtype t)
{
    return dtype_valid(t) ? dtype_table[t].block_bytes : 0;
}

const char *srt_dtype_name(srt_dtype t)
{
    return dtype_valid(t) ? dtype_table[t].name : "invalid";
}

/* 0 means "not representable": unknown type, negative n, or n not a whole number of blocks. */
size_t srt_dtype_row_bytes(srt_dtype t, int64_t n)
{
    if (!dtype_valid(t) || n < 0)
        return 0;
    int64_t be = dtype_table[t].block_elems;
    if (n % be != 0)
        return 0;
    return (size_t)(n / be) * dtype_table[t].block_bytes;
}
