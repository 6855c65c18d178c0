/* The exact path's Q4_1, Q4_0, Q8_0, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS
 * matmul: HF's weights w = d*q + m (Q4_0: d*(q - 8), taken as m = -8d, exact in f32; Q8_0: d*q, q
 * signed bytes; Q5_0: d*(q - 16), q of five bits; Q5_1: Q4_1's with q of five bits; Q4_K: block j
 * of a super-block d*sc_j*q - dmin*mn_j, taken as Q4_1 with d = d*sc_j and m = -(dmin*mn_j), both
 * exact in f32; Q5_K: Q4_K's with q of five bits; Q6_K: d*sc_h*(q - 32), q of six bits, sc_h per
 * half block of 16; Q3_K: d*(sc_h - 32)*(q - 4), q of three bits, as Q6_K's; Q2_K:
 * d*sc_h*q - dmin*mn_h, q of two bits, per half; IQ4_NL: d*L[q], L GGML's 16 levels (signed
 * bytes), q a nibble; IQ4_XS: IQ4_NL's with d*(sc_j - 32) per block) against x held as a 24-bit
 * fixed point per block, multiplied in integers. (Q6_K's and IQ4_XS's d*sc times q can take 25
 * bits, which HF's dequantized weight rounds to f32; here the product stays whole, a difference
 * below the f32 rounding of HF's own sums.)
 *
 * Why: on the f32 path every weight costs an unpack, a convert and an FMA, and Q4_1 decode
 * was bound by vector issue (26 G multiply-adds/s per core on Zen 4, from cache or DRAM),
 * prefill by FMA throughput (38).
 * VNNI's vpdpbusd takes 64 byte products per instruction, and the nibbles q (0..15) are its
 * unsigned operand as they are. x becomes integers, per token and 32-block b:
 *     s_b = 2^-k, k the largest with rint(|x_j| * 2^k) <= 0x7F7F7F for every j of the block,
 *     X_j = rint(x_j * 2^k) = D0 + 256*D1 + 65536*D2, balanced digits in [-128, 127].
 * Rounding x to 24 bits of its block's largest value moved SmolLM2's logits by at most 7.5e-5
 * over all 3,249 positions of the project's 24 chats against HF in float64, less than HF's
 * own float32 (1.1e-4); 16 bits moved them 1.8e-2 (scripts/activation_rounding_error.py).
 *
 * Then per (row, token), the rows in lanes:
 *     S_i = sum_j q_j * D_ij                  exact in int32 (|S_i| <= 32 * 15 * 128; Q8_0: 2^19;
 *                                             Q5_0: q_j - 16 for q_j, 2^16; Q6_K: q_j - 32, a
 *                                             sum per half, 2^16)
 *     t   = fma(S2, 65536, (float)(S1 * 256 + S0))
 *                                             (Q4: the inner sum exact, below 2^24; Q8_0, Q5_0:
 *                                             rounded to nearest even, as int32 to float converts)
 *     acc = fma(t, d_b * s_b, acc)            block by block from 0 (Q6_K: a half at a time,
 *                                             the first first, d_b its d*sc_h)
 *     off = fma(m_b, xsum_b, off)             block by block from 0; xsum_b the f32 block sum
 *                                             (Q8_0, Q5_0, Q6_K: none, off = 0; Q4_K, Q5_K:
 *                                             the products d*sc_j and -(dmin*mn_j) as d_b
 *                                             and m_b; Q5_1: Q4_1's)
 *     y   = (acc + off) + bias
 * Q8_0's q is signed and vpdpbusd's first operand unsigned, so the packed bytes are q + 128
 * and each sum starts from -128 * sum_j D_ij (prepared with the digits). AVX2's vpmaddubsw would
 * saturate on bytes that large, so the 8-lane kernel takes their nibbles: 16 * (hi . D) + lo . D.
 * That costs twice the instructions, so Q8_0 takes this path only on the AVX-512 level
 * (srt_cpu_q41_takes); the 8-lane kernel runs its packed copy if the level changes after.
 * Q5_0's q (0..31) is unsigned as it is, so its sums start from -16 * sum_j D_ij (an eighth of
 * Q8_0's start) and give the same integers as its bytes q - 16 would; the same rule of levels.
 * Q6_K's q (0..63) likewise, each half's sums from -32 * its sum of D (the digit sums are kept
 * per half for it: CS); Q3_K's (0..7) from -4 * its sum of D (its third bit added in registers
 * as Q5_0's fifth: a masked byte add). IQ4's levels + 128 are bytes as
 * Q8_0's, looked up from the nibbles in registers (vpshufb), with Q8_0's start. Q2_K's halves
 * start from 0 and each adds fma(-(dmin*mn_h), xh_h, off), xh_h the half's sum of the integers X
 * (from the digit sums) rounded to float, times s_b (half_sum).
 * The integers are exact whichever instructions form them (AVX-512 VNNI, or AVX2's vpmaddubsw
 * + vpaddw + vpmaddwd) and every float step is per lane, so a (row, token) output has the
 * same bits on 16 lanes or 8, alone or in any batch, decoded or prefilled, packed or not:
 * batch invariance holds by construction. The 16-lane kernel runs only after it gave the
 * 8-lane one's bits on this CPU (srt_cpu_q41_wide_matches, from srt_cpu_exact_avx512). Where a
 * block's scale and sums allow, it forms fma(t * s_b, d_b, acc) with s_b and 65536 added to
 * exponent bits, not multiplied (scaled16, scaled_q4): the same bits, and fewer float ops on
 * the pipes vpdpbusd needs.
 *
 * srt_numerics fast runs the 16-lane kernel with x of one digit (ND 1, prep_token1): X_j =
 * rint(x_j * 127 / top) in D2 alone, 32 bytes a block, s_b = top / 127 in f32, t = (float)S2,
 * acc = fma(t, d_b * s_b, acc), and xsum_b the sum of the rounded x, s_b * sum X: llama.cpp's
 * activations, 8 vpdpbusd a block where exact takes 24. Its own scalar contract is
 * test_model_precise's, as exact's.
 *
 * Packed (SRT_Q4_1_X16, made once at load): rows 16g..16g+15, block b at (g * nb + b) * 320:
 *     four 64-byte vectors v_c (c = 0..3): dword r is row 16g + r's GGUF bytes qs[4c..4c+3]
 *     (low nibbles q[4c..4c+3], high nibbles q[16+4c..16+4c+3]);
 *     d[16], then m[16] (f16, row order); Q4_0 (SRT_Q4_0_X16, 288 bytes): no m.
 * Q8_0 (SRT_Q8_0_X16, 544 bytes): eight vectors v_c, dword r row r's qs[4c..4c+3] + 128 (the
 * top bits flipped), then d[16].
 * Q5_0 (SRT_Q5_0_X16, 352 bytes, the GGUF's 22 a row): v_0..v_3 of its nibbles as Q4_0's; eight
 * 64-bit masks k_j, bit 4r + i the fifth bit of row r's q[4j + i] (so k_j meets x's dword j,
 * and a masked byte add of 16 completes q in registers; its bytes as Q8_0 took 34 a row, and
 * decode streams them); then d[16]. Q5_1 (SRT_Q5_1_X16, 384 bytes): Q5_0's, then m[16].
 * Q4_K (SRT_Q4_K_X16): per super-block of 8 blocks a 320-byte header, d[16] and dmin[16] (f16),
 * then each block's 6-bit scale sc[16] and min mn[16] as bytes; then its 8 blocks' nibbles as
 * Q4's v_0..v_3 (GGUF Q4_K holds blocks 2c and 2c + 1 in the low and high nibbles of the same
 * 32 bytes; here each is a Q4_1 block's 16 bytes): 2368 bytes, 148 a row (the GGUF's 144). The
 * kernels form d*sc and dmin*mn once per block and group, for all the tile's tokens. Q5_K
 * (SRT_Q5_K_X16): Q4_K's, each block's nibbles followed by its fifth bits as Q5_0's masks (320
 * bytes a block): 2880 bytes, 180 a row (the GGUF's 176).
 * Q6_K (SRT_Q6_K_X16): per super-block a 288-byte header, d[16] (f16) and the 16 scales of 16
 * elements sc[16][16] (int8); then each block's four low bits as Q4's v_0..v_3 and its bits of
 * value 16 and 32 as two sets of Q5_0's masks (384 bytes): 3360 bytes, 210 a row (the GGUF's).
 * IQ4_NL (SRT_IQ4_NL_X16): Q4_0's layout. IQ4_XS (SRT_IQ4_XS_X16): per super-block a 160-byte
 * header, d[16] (f16) and each block's sc - 32 as int8, sc[8][16]; then each block's nibbles as
 * Q4's v_0..v_3 (276 bytes a block on average, 138 a row of 256 for the GGUF's 136). Q3_K
 * (SRT_Q3_K_X16): Q6_K's header with each scale less 32, then each block's two low bits of q
 * as two 64-byte planes (byte 4r + i of plane p: at bits 2k the bits of the byte that meets x's
 * dword 4p + k, so a shift and a mask give Q4's vectors) and its third bits as Q5_0's masks, 192
 * bytes (114 a row of 256 for the GGUF's 110). Q2_K (SRT_Q2_K_X16): a 576-byte header, d[16],
 * dmin[16] (f16), the 4-bit scales sc[16][16] and mins mn[16][16] as bytes, then each block's
 * planes, 128 bytes (100 a row for the GGUF's 84). (Held as nibbles, 146 and 164: a Q2_K copy
 * nearly twice its file.)
 * The K-quants' GGUF layout (srt_weights_mmap) is packed a super-block of a group at a time in
 * registers (pack_sb_k16, pack_sb_q6k16, pack_sb_iq4xs16, pack_sb_q3k16, pack_sb_q2k16): in
 * scalar code a decode ran at a fifth of the speed (Q3_K's at a tenth). On the AVX-512 level the
 * load-time copy takes the same packers for its whole groups.
 * A group is 16 rows' bytes, so group g starts where row 16g did; rows past the weight's are
 * zero. The low nibbles of v_c meet x's dword c, the high ones dword 4 + c. Packing moves
 * whole dwords, so a GGUF-layout weight (srt_weights_mmap) is packed a group at a time into
 * per-thread scratch, at little cost, and runs the same kernels. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_exact.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/hsum_avx2.h"
#include "srt/common.h"

#define G 16            /* rows per group: the lanes of a 512-bit register */
#define BB 320          /* bytes of a Q4_1 group's block */
#define BB5 352         /* Q5_0's: nibbles, fifth bits, d (Q5_1: and m, 384) */
#define SB 8            /* K-quants: 32-blocks per super-block */
#define HDR_K 320       /* Q4_K: a group's super-block header: d[16], dmin[16], sc[8][16], mn[8][16] */
#define BB_K 296        /* Q4_K: a group's super-block bytes (the header and 8 x 256 of nibbles) / 8 */
#define BB_K5 360       /* Q5_K: as Q4_K's, each block's nibbles followed by its fifth bits' masks */
#define HDR_6 288       /* Q6_K: a group's super-block header: d[16], sc[16][16] */
#define BB_6 420        /* Q6_K: a group's super-block bytes (the header and 8 x 384) / 8 */
#define HDR_X 160       /* IQ4_XS: a group's super-block header: d[16], sc[8][16] */
#define BB_X 276        /* IQ4_XS: (the header and 8 x 256 of nibbles) / 8 */
#define BB_3 228        /* Q3_K: (Q6_K's header and 8 x 192: two-bit planes and masks) / 8 */
#define HDR_2 576       /* Q2_K: d[16], dmin[16], sc[16][16], mn[16][16] */
#define BB_2 200        /* Q2_K: (the header and 8 x 128 of two-bit planes) / 8 */
#define BB_MAX 544      /* the largest: Q8_0's */
#define XB 96           /* bytes of a token's block of x: digits D2, D1, D0, 32 each */
#define XB1 32          /* fast's (prep_token1): D2 alone, so a tile's x takes a third of L1 */
#define CS 6            /* digit sums a token's block: planes D2, D1, D0 over its first 16, then its last 16 */
#define TILE 4          /* tokens per kernel call (the 16-lane kernel's accumulators: 4 x 5) */
#define RUN_TOK 512     /* tokens prepared at once, so the scratch is bounded at any chunk size */
#define ITEM_TOK 128    /* prefill: tokens per work item */
#define L1_BUDGET (20 * 1024)   /* bytes of L1 the groups in use may take (x's digits too) */
#define X_MAX 8355711.0f   /* 0x7F7F7F: the largest X of three digits in [-128, 127] */
#define Q4_SUM_MAX (INT32_MAX / 15)   /* sum |X| of a block whose Q4 sums fit int32 (scaled_q4) */

_Static_assert(BB == G * sizeof(blk_q4_1) && BB_MAX == G * sizeof(blk_q8_0),
               "a packed group block holds 16 GGUF blocks' bytes");

/* Scratch (bytes): the prepared x of up to RUN_TOK tokens (per token nb * (96 + 8 + 4 + 24): the
 * digits, scale and sum, ek, and the six digit sums' starts), then per thread one group of a
 * GGUF-layout weight packed (nb * 544). */
static size_t x_bytes(int64_t nb, int64_t n_tok)
{
    int64_t t = n_tok < RUN_TOK ? (n_tok > 0 ? n_tok : 1) : RUN_TOK;
    return ((size_t)t * (size_t)nb * (XB + 2 * sizeof(float) + (1 + CS) * sizeof(int32_t)) + 63) & ~(size_t)63;
}

size_t srt_cpu_q41_scratch_bytes(int n_threads, int64_t cols, int64_t n_tok)
{
    int64_t nb = cols / QK;
    return x_bytes(nb, n_tok) + (size_t)(n_threads > 0 ? n_threads : 1) * (size_t)nb * BB_MAX + 64;
}

/* ---- the layout ---- */

/* The formats: Q4_1; Q4_0 (w = d*(q - 8), taken as m = -8d, exact in f32 as HF's
 * dequantization computes it; its packed block has no m); Q8_0 (bytes, no m); Q5_0 (nibbles
 * and fifth bits, no m); Q4_K (Q4_1's form, its d and m made from a header); Q6_K (nibbles and
 * two bits, no m, two scales a block); IQ4_NL (Q4_0's layout, levels looked up); IQ4_XS (its
 * scales in a header); Q3_K (Q6_K's header, two-bit planes and masks); Q2_K (scales and mins in a
 * header, two-bit planes) */
enum { M_Q4_0, M_Q4_1, M_Q8_0, M_Q5_0, M_Q4_K, M_Q6_K, M_Q5_K, M_Q5_1, M_IQ4_NL, M_IQ4_XS, M_Q3_K, M_Q2_K };
#define ALL_M(X) X(M_Q4_0) X(M_Q4_1) X(M_Q8_0) X(M_Q5_0) X(M_Q4_K) X(M_Q6_K) X(M_Q5_K) X(M_Q5_1) \
                 X(M_IQ4_NL) X(M_IQ4_XS) X(M_Q3_K) X(M_Q2_K)
typedef struct {
    srt_dtype gguf, packed;
    size_t src, qs;   /* a GGUF block's bytes, and where its q (nibbles) start */
    size_t bb;        /* a packed group block's bytes */
    int m;            /* M_Q4_1: m stored after d; M_Q4_0: m = -8d; the others by name */
    int nv;           /* 64-byte vectors of q per packed block */
    size_t dof, mof;  /* where d and m (0: none) start in a packed block */
    size_t qh;        /* Q5_0, Q5_1: where a GGUF block's fifth bits start */
} q4_fmt;

#define N_FMTS 12
static const q4_fmt FMTS[N_FMTS] = {
    { SRT_Q4_1, SRT_Q4_1_X16, sizeof(blk_q4_1), 4, BB, M_Q4_1, 4, 256, 288, 0 },
    { SRT_Q4_0, SRT_Q4_0_X16, sizeof(blk_q4_0), 2, BB - 32, M_Q4_0, 4, 256, 0, 0 },
    { SRT_Q8_0, SRT_Q8_0_X16, sizeof(blk_q8_0), 2, BB_MAX, M_Q8_0, 8, 512, 0, 0 },
    { SRT_Q5_0, SRT_Q5_0_X16, sizeof(blk_q5_0), 6, BB5, M_Q5_0, 4, 320, 0, 2 },
    /* a GGUF block is a super-block of 8 blocks (src); their own packers (pack_sb_q4k, _q6k) */
    { SRT_Q4_K, SRT_Q4_K_X16, sizeof(blk_q4_k), 0, BB_K, M_Q4_K, 4, 0, 0, 0 },
    { SRT_Q6_K, SRT_Q6_K_X16, sizeof(blk_q6_k), 0, BB_6, M_Q6_K, 4, 0, 0, 0 },
    { SRT_Q5_K, SRT_Q5_K_X16, sizeof(blk_q5_k), 0, BB_K5, M_Q5_K, 4, 0, 0, 0 },
    { SRT_Q5_1, SRT_Q5_1_X16, sizeof(blk_q5_1), 8, BB5 + 32, M_Q5_1, 4, 320, 352, 4 },
    { SRT_IQ4_NL, SRT_IQ4_NL_X16, sizeof(blk_iq4_nl), 2, BB - 32, M_IQ4_NL, 4, 256, 0, 0 },   /* Q4_0's layout */
    { SRT_IQ4_XS, SRT_IQ4_XS_X16, sizeof(blk_iq4_xs), 0, BB_X, M_IQ4_XS, 4, 0, 0, 0 },
    { SRT_Q3_K, SRT_Q3_K_X16, sizeof(blk_q3_k), 0, BB_3, M_Q3_K, 4, 0, 0, 0 },
    { SRT_Q2_K, SRT_Q2_K_X16, sizeof(blk_q2_k), 0, BB_2, M_Q2_K, 4, 0, 0, 0 },
};
#define FIVE(f) ((f)->m == M_Q5_0 || (f)->m == M_Q5_1)   /* nibbles and fifth bits' masks */
#define SUPER_M(m) ((m) == M_Q4_K || (m) == M_Q6_K || (m) == M_Q5_K || (m) == M_IQ4_XS || (m) == M_Q3_K || (m) == M_Q2_K)
#define SUPER(f) SUPER_M((f)->m)   /* packed per super-block */

static const q4_fmt *fmt_of(srt_dtype t)
{
    for (int i = 0; i < N_FMTS; i++)
        if (t == FMTS[i].gguf || t == FMTS[i].packed)
            return &FMTS[i];
    return NULL;
}

/* Q8_0 in the GGUF layout comes here only where the 16-lane kernel runs: on AVX2 its bytes'
 * products take twice the instructions of Q4's nibbles (vpmaddubsw would saturate on whole
 * bytes), and exact.c's f32 kernels ran a Q8_0 prefill 2.3x and a decode 1.3x faster there. A
 * packed copy (made on that level) stays on this path, on either kernel: the same bits. The
 * other types exact.c has f32 kernels for follow the same rule (the 8-lane kernel was ~20%
 * slower than exact.c's on Q4); IQ4_NL, IQ4_XS, Q3_K and Q2_K have none there (the precise
 * path's dequantized rows decoded at a fifteenth of the speed), so they come here on both. */
int srt_cpu_q41_takes(srt_dtype t)
{
    const q4_fmt *f = fmt_of(t);
    if (f && t == f->gguf && (f->m == M_Q8_0 || f->m == M_Q5_0 || f->m == M_Q5_1 || f->m == M_Q4_K ||
                              f->m == M_Q5_K || f->m == M_Q6_K))
        return srt_cpu_exact_avx512() == 1;
    return f != NULL;
}

/* bytes of a packed row (a sixteenth of its group's) */
static size_t packed_row_bytes(const q4_fmt *f, int64_t cols) { return (size_t)(cols / QK) * f->bb / G; }

/* The masks of a packed block (Q5_0's form, also Q5_K's, Q6_K's and Q3_K's): mask j (8 bytes)
 * holds at bit 4r + i row r's bit of element 4j + i; set to v (0 or 1), or read */
static void set_mask_bit(uint8_t *masks, int r, int e, int v)
{
    int bit = 4 * r + e % 4;
    uint8_t *m = masks + 8 * (e / 4) + bit / 8;
    *m = (uint8_t)((*m & ~(1 << bit % 8)) | v << bit % 8);
}

static int mask_bit(const uint8_t *masks, int r, int e)
{
    int bit = 4 * r + e % 4;
    return masks[8 * (e / 4) + bit / 8] >> bit % 8 & 1;
}

/* Row r's GGUF Q4_K super-block (k, its nibbles qs) into the group's packed super-block o, or
 * back: d, dmin and each block's 6-bit scale and min as bytes in the header (HDR_K), then block
 * j's nibbles as a Q4_1 block's (element i low, 16 + i high: GGUF Q4_K keeps blocks 2c and
 * 2c + 1 in the low and high nibbles of the same 32 bytes) in Q4's four vectors. Q5_K (qh
 * non-NULL; its super-block is Q4_K's with qh[32] before qs): each block's nibbles are followed
 * by its fifth bits as Q5_0's masks (bit 4r + i of mask c: bit j of qh[4c + i]), 320 bytes a
 * block. */
static void pack_sb_q4k(uint8_t *o, int r, const blk_q4_k *k, const uint8_t *qs, const uint8_t *qh)
{
    const size_t blk = qh ? 320 : 256;
    memcpy(o + 2 * r, &k->d, 2);
    memcpy(o + 32 + 2 * r, &k->dmin, 2);
    for (int j = 0; j < SB; j++) {
        int sc, mn;
        q4k_scale_min(k->scales, j, &sc, &mn);
        o[64 + 16 * j + r] = (uint8_t)sc;
        o[192 + 16 * j + r] = (uint8_t)mn;
        const uint8_t *q = qs + 32 * (j / 2);
        int sh = 4 * (j % 2);
        uint8_t *b = o + HDR_K + blk * j;
        for (int i = 0; i < 16; i++)
            b[64 * (i / 4) + 4 * r + i % 4] = (uint8_t)((q[i] >> sh & 0x0F) | (q[16 + i] >> sh & 0x0F) << 4);
        for (int e = 0; qh && e < QK; e++)
            set_mask_bit(b + 256, r, e, qh[e] >> j & 1);
    }
}

static void unpack_sb_q4k(const uint8_t *o, int r, blk_q4_k *k, uint8_t *qs, uint8_t *qh)
{
    const size_t blk = qh ? 320 : 256;
    int sc[SB], mn[SB];
    memcpy(&k->d, o + 2 * r, 2);
    memcpy(&k->dmin, o + 32 + 2 * r, 2);
    memset(qs, 0, QK_K / 2);
    if (qh)
        memset(qh, 0, QK_K / 8);
    for (int j = 0; j < SB; j++) {
        sc[j] = o[64 + 16 * j + r];
        mn[j] = o[192 + 16 * j + r];
        uint8_t *q = qs + 32 * (j / 2);
        int sh = 4 * (j % 2);
        const uint8_t *b = o + HDR_K + blk * j;
        for (int i = 0; i < 16; i++) {
            uint8_t v = b[64 * (i / 4) + 4 * r + i % 4];
            q[i] |= (uint8_t)((v & 0x0F) << sh);
            q[16 + i] |= (uint8_t)((v >> 4) << sh);
        }
        for (int e = 0; qh && e < QK; e++)
            qh[e] |= (uint8_t)(mask_bit(b + 256, r, e) << j);
    }
    for (int j = 0; j < 4; j++) {   /* q4k_scale_min reversed */
        k->scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        k->scales[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        k->scales[j + 8] = (uint8_t)((sc[j + 4] & 0x0F) | (mn[j + 4] & 0x0F) << 4);
    }
}

/* Row r's GGUF block k into the packed block o, or back (the same moves reversed; Q8_0's
 * bytes with their top bit flipped, q + 128). Q5_0's fifth bits: mask j's bits 4r..4r+3 are
 * row r's bits 4j..4j+3 of qh (nibble r of the mask's 64 bits) */
static inline void pack_row(const q4_fmt *f, uint8_t *o, int r, const uint8_t *k)
{
    for (int c = 0; c < f->nv; c++)
        for (int i = 0; i < 4; i++)
            o[64 * c + 4 * r + i] = k[f->qs + 4 * c + i] ^ (f->m == M_Q8_0 ? 0x80 : 0);
    if (FIVE(f)) {
        uint32_t qh;
        memcpy(&qh, k + f->qh, 4);
        for (int j = 0; j < 8; j++) {
            uint8_t *m = o + 256 + 8 * j + r / 2;
            int sh = 4 * (r % 2);
            *m = (uint8_t)((*m & ~(0x0F << sh)) | (qh >> 4 * j & 0x0F) << sh);
        }
    }
    memcpy(o + f->dof + 2 * r, k, 2);
    if (f->mof)
        memcpy(o + f->mof + 2 * r, k + 2, 2);
}

static inline void unpack_row(const q4_fmt *f, const uint8_t *o, int r, uint8_t *k)
{
    for (int c = 0; c < f->nv; c++)
        for (int i = 0; i < 4; i++)
            k[f->qs + 4 * c + i] = o[64 * c + 4 * r + i] ^ (f->m == M_Q8_0 ? 0x80 : 0);
    if (FIVE(f)) {
        uint32_t qh = 0;
        for (int j = 0; j < 8; j++)
            qh |= (uint32_t)(o[256 + 8 * j + r / 2] >> 4 * (r % 2) & 0x0F) << 4 * j;
        memcpy(k + f->qh, &qh, 4);
    }
    memcpy(k, o + f->dof + 2 * r, 2);
    if (f->mof)
        memcpy(k + 2, o + f->mof + 2 * r, 2);
}

/* Q6_K's q (0..63) of element e (0..255) of super-block k: four low bits from ql, two high
 * from qh, as GGUF lays them out (HF's dequantization; exact.c's unp_q6k_half) */
static int q6k_q(const blk_q6_k *k, int e)
{
    int h = e / 128, kk = e % 128 / 32, l = e % 32;
    const uint8_t *ql = k->ql + 64 * h + (kk & 1) * 32, *qh = k->qh + 32 * h;
    return (ql[l] >> (kk >= 2 ? 4 : 0) & 0x0F) | (qh[l] >> 2 * kk & 3) << 4;
}

/* Row r's GGUF Q6_K super-block k into the group's packed super-block o, or back: the header
 * d[16] (f16), then the 16 scales of 16 elements, sc[16][16] (int8); then block j (384 bytes):
 * the four low bits as a Q4_1 block's nibbles in Q4's four vectors, and the bits of value 16
 * and 32 as Q5_0's masks (bit 4r + i of mask c: element 4c + i), 64 bytes each. */
static void pack_sb_q6k(uint8_t *o, int r, const blk_q6_k *k)
{
    memcpy(o + 2 * r, &k->d, 2);
    for (int s = 0; s < 16; s++)
        o[32 + 16 * s + r] = (uint8_t)k->scales[s];
    for (int j = 0; j < SB; j++) {
        uint8_t *blk = o + HDR_6 + 384 * j;
        int q[QK];
        for (int e = 0; e < QK; e++)
            q[e] = q6k_q(k, QK * j + e);
        for (int i = 0; i < 16; i++)
            blk[64 * (i / 4) + 4 * r + i % 4] = (uint8_t)((q[i] & 0x0F) | (q[16 + i] & 0x0F) << 4);
        for (int e = 0; e < QK; e++)
            for (int p = 0; p < 2; p++)
                set_mask_bit(blk + 256 + 64 * p, r, e, q[e] >> (4 + p) & 1);
    }
}

static void unpack_sb_q6k(const uint8_t *o, int r, blk_q6_k *k)
{
    memcpy(&k->d, o + 2 * r, 2);
    for (int s = 0; s < 16; s++)
        k->scales[s] = (int8_t)o[32 + 16 * s + r];
    memset(k->ql, 0, sizeof k->ql);
    memset(k->qh, 0, sizeof k->qh);
    for (int j = 0; j < SB; j++) {
        const uint8_t *blk = o + HDR_6 + 384 * j;
        for (int e = 0; e < QK; e++) {
            int E = QK * j + e;
            int q = blk[64 * (e % 16 / 4) + 4 * r + e % 4] >> (e < 16 ? 0 : 4) & 0x0F;
            for (int p = 0; p < 2; p++)
                q |= mask_bit(blk + 256 + 64 * p, r, e) << (4 + p);
            int h = E / 128, kk = E % 128 / 32, l = E % 32;
            k->ql[64 * h + (kk & 1) * 32 + l] |= (uint8_t)((q & 0x0F) << (kk >= 2 ? 4 : 0));
            k->qh[32 * h + l] |= (uint8_t)((q >> 4) << 2 * kk);
        }
    }
}

/* Row r's two low bits of a 32-block's q as two 64-byte planes at b, or back: byte 4r + i of
 * plane p holds, at bits 2k, element 16p + 4k + i's (so (plane >> 2k) & 3 is the vector that
 * meets x's dword 4p + k, as Q4's nibble vectors do); Q3_K's third bits (m non-zero) as Q5_0's
 * masks after them: bit 4r + i of mask 4p + k is element 16p + 4k + i's */
static void put_bits2(uint8_t *b, int r, const int q[QK], int third)
{
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 4; i++) {
            int v = 0;
            for (int k = 0; k < 4; k++)
                v |= (q[16 * p + 4 * k + i] & 3) << 2 * k;
            b[64 * p + 4 * r + i] = (uint8_t)v;
        }
    for (int e = 0; third && e < QK; e++)
        set_mask_bit(b + 128, r, e, q[e] >> 2 & 1);
}

static void get_bits2(const uint8_t *b, int r, int q[QK], int third)
{
    for (int e = 0; e < QK; e++)
        q[e] = (b[64 * (e / 16) + 4 * r + e % 4] >> 2 * (e % 16 / 4) & 3) | (third ? mask_bit(b + 128, r, e) << 2 : 0);
}

/* q2k_q reversed (bits or-ed into a cleared qs) */
static void set_q2k_q(uint8_t *qs, int e, int q) { qs[32 * (e / 128) + e % 32] |= (uint8_t)(q << 2 * (e / 32 % 4)); }

/* Row r's GGUF IQ4_XS super-block into the group's packed super-block o, or back: the header
 * d[16] (f16), then block j's scale less 32, sc[8][16] (int8); then each block's nibbles as
 * they are (IQ4_NL's order is Q4's), 256 bytes a block */
static void pack_sb_iq4xs(uint8_t *o, int r, const blk_iq4_xs *k)
{
    memcpy(o + 2 * r, &k->d, 2);
    for (int j = 0; j < SB; j++) {
        o[32 + 16 * j + r] = (uint8_t)(int8_t)(iq4xs_scale(k, j) - 32);
        uint8_t *b = o + HDR_X + 256 * j;
        for (int i = 0; i < 16; i++)
            b[64 * (i / 4) + 4 * r + i % 4] = k->qs[16 * j + i];
    }
}

static void unpack_sb_iq4xs(const uint8_t *o, int r, blk_iq4_xs *k)
{
    memset(k, 0, sizeof *k);
    memcpy(&k->d, o + 2 * r, 2);
    for (int j = 0; j < SB; j++) {
        int ls = (int8_t)o[32 + 16 * j + r] + 32;
        k->scales_l[j / 2] |= (uint8_t)((ls & 0x0F) << 4 * (j % 2));
        k->scales_h |= (uint16_t)((ls >> 4) << 2 * j);
        const uint8_t *b = o + HDR_X + 256 * j;
        for (int i = 0; i < 16; i++)
            k->qs[16 * j + i] = b[64 * (i / 4) + 4 * r + i % 4];
    }
}

/* Row r's GGUF Q3_K super-block into the group's packed super-block o, or back: Q6_K's header
 * (d[16], then the scales of 16 elements less 32, sc[16][16] as int8), then each block's q
 * (0..7) as two-bit planes and masks (put_bits2), 192 bytes a block */
static void pack_sb_q3k(uint8_t *o, int r, const blk_q3_k *k)
{
    memcpy(o + 2 * r, &k->d, 2);
    for (int t = 0; t < 16; t++)
        o[32 + 16 * t + r] = (uint8_t)(int8_t)(q3k_scale(k->scales, t) - 32);
    for (int j = 0; j < SB; j++) {
        int q[QK];
        for (int e = 0; e < QK; e++)
            q[e] = q3k_q(k, QK * j + e);
        put_bits2(o + HDR_6 + 192 * j, r, q, 1);
    }
}

static void unpack_sb_q3k(const uint8_t *o, int r, blk_q3_k *k)
{
    memset(k, 0, sizeof *k);
    memcpy(&k->d, o + 2 * r, 2);
    for (int t = 0; t < 16; t++) {   /* q3k_scale reversed */
        int v = (int8_t)o[32 + 16 * t + r] + 32;
        k->scales[t % 8] |= (uint8_t)((v & 0x0F) << 4 * (t / 8));
        k->scales[8 + t % 4] |= (uint8_t)((v >> 4) << 2 * (t / 4));
    }
    for (int j = 0; j < SB; j++) {
        int q[QK];
        get_bits2(o + HDR_6 + 192 * j, r, q, 1);
        for (int e = 0; e < QK; e++) {
            int E = QK * j + e;
            set_q2k_q(k->qs, E, q[e] & 3);
            k->hmask[E % 32] |= (uint8_t)((q[e] >> 2) << E / 32);
        }
    }
}

/* Row r's GGUF Q2_K super-block into the group's packed super-block o, or back: d[16], dmin[16]
 * (f16), the scales sc[16][16] and mins mn[16][16] of 16 elements as bytes, then each block's q
 * (0..3) as two-bit planes (put_bits2), 128 bytes a block */
static void pack_sb_q2k(uint8_t *o, int r, const blk_q2_k *k)
{
    memcpy(o + 2 * r, &k->d, 2);
    memcpy(o + 32 + 2 * r, &k->dmin, 2);
    for (int t = 0; t < 16; t++) {
        o[64 + 16 * t + r] = k->scales[t] & 0x0F;
        o[320 + 16 * t + r] = k->scales[t] >> 4;
    }
    for (int j = 0; j < SB; j++) {
        int q[QK];
        for (int e = 0; e < QK; e++)
            q[e] = q2k_q(k->qs, QK * j + e);
        put_bits2(o + HDR_2 + 128 * j, r, q, 0);
    }
}

static void unpack_sb_q2k(const uint8_t *o, int r, blk_q2_k *k)
{
    memset(k, 0, sizeof *k);
    memcpy(&k->d, o + 2 * r, 2);
    memcpy(&k->dmin, o + 32 + 2 * r, 2);
    for (int t = 0; t < 16; t++)
        k->scales[t] = (uint8_t)(o[64 + 16 * t + r] | o[320 + 16 * t + r] << 4);
    for (int j = 0; j < SB; j++) {
        int q[QK];
        get_bits2(o + HDR_2 + 128 * j, r, q, 0);
        for (int e = 0; e < QK; e++)
            set_q2k_q(k->qs, QK * j + e, q[e]);
    }
}

/* group g of a GGUF-layout weight, packed into o (nb blocks); rows past the weight's zero */
static void pack_group(const srt_weight *w, int64_t g, uint8_t *o)
{
    const q4_fmt *f = fmt_of(w->dtype);
    int64_t nb = w->cols / QK;
    if (SUPER(f)) {
        static const union { blk_q4_k k4; blk_q5_k k5; blk_q6_k k6; blk_iq4_xs x4; blk_q3_k k3; blk_q2_k k2; } zk;
        for (int r = 0; r < G; r++) {
            int64_t row = g * G + r;
            const uint8_t *k = row < w->rows ? (const uint8_t *)w->data + (size_t)row * w->row_stride : NULL;
            for (int64_t s = 0; s < nb / SB; s++, k = k ? k + f->src : NULL) {
                const uint8_t *b = k ? k : (const uint8_t *)&zk;
                uint8_t *os = o + (size_t)s * SB * f->bb;
                if (f->m == M_Q6_K)
                    pack_sb_q6k(os, r, (const blk_q6_k *)b);
                else if (f->m == M_IQ4_XS)
                    pack_sb_iq4xs(os, r, (const blk_iq4_xs *)b);
                else if (f->m == M_Q3_K)
                    pack_sb_q3k(os, r, (const blk_q3_k *)b);
                else if (f->m == M_Q2_K)
                    pack_sb_q2k(os, r, (const blk_q2_k *)b);
                else if (f->m == M_Q5_K)
                    pack_sb_q4k(os, r, (const blk_q4_k *)b, ((const blk_q5_k *)b)->qs, ((const blk_q5_k *)b)->qh);
                else
                    pack_sb_q4k(os, r, (const blk_q4_k *)b, ((const blk_q4_k *)b)->qs, NULL);
            }
        }
        return;
    }
    for (int r = 0; r < G; r++) {
        int64_t row = g * G + r;
        static const uint8_t zero[sizeof(blk_q8_0)];
        const uint8_t *k = row < w->rows ? (const uint8_t *)w->data + (size_t)row * w->row_stride : zero;
        for (int64_t b = 0; b < nb; b++)
            pack_row(f, o + (size_t)b * f->bb, r, row < w->rows ? k + (size_t)b * f->src : zero);
    }
}

size_t srt_cpu_q41_pack_bytes(const srt_weight *w)
{
    const q4_fmt *f = fmt_of(w->dtype);
    if (!f || w->dtype != f->gguf || w->rows <= 0 || w->cols <= 0 || w->cols % (SUPER(f) ? QK_K : QK) ||
        !srt_cpu_have_avx2())
        return 0;
    return (size_t)((w->rows + G - 1) / G * G) * packed_row_bytes(f, w->cols);
}

static void pack_whole_groups(const srt_weight *w, int64_t ng, uint8_t *dst);

/* Whole groups by the 16-lane packers where that level runs (the same bytes; the scalar ones
 * took ~5 ns a weight, half a minute for a 7B model's Q3_K), the rest in scalar code */
void srt_cpu_q41_pack(const srt_weight *w, void *dst, srt_weight *out)
{
    const q4_fmt *f = fmt_of(w->dtype);
    size_t rb = packed_row_bytes(f, w->cols);
    int64_t g = srt_cpu_exact_avx512() == 1 ? w->rows / G : 0;
    pack_whole_groups(w, g, dst);
    for (; g < (w->rows + G - 1) / G; g++)
        pack_group(w, g, (uint8_t *)dst + (size_t)g * G * rb);
    *out = (srt_weight){ .dtype = f->packed, .rows = w->rows, .cols = w->cols, .data = dst, .row_stride = rb };
}

srt_dtype srt_cpu_q41_unpack_row(const srt_weight *w, int64_t row, void *out)
{
    const q4_fmt *f = fmt_of(w->dtype);
    int64_t nb = w->cols / QK;
    const uint8_t *g = (const uint8_t *)w->data + (size_t)(row / G * G) * w->row_stride;
    if (f->m == M_Q4_K) {
        for (int64_t s = 0; s < nb / SB; s++)
            unpack_sb_q4k(g + (size_t)s * SB * BB_K, (int)(row % G), (blk_q4_k *)out + s, ((blk_q4_k *)out + s)->qs, NULL);
        return f->gguf;
    }
    if (f->m == M_Q5_K) {
        for (int64_t s = 0; s < nb / SB; s++) {
            blk_q5_k *k = (blk_q5_k *)out + s;
            blk_q4_k head;   /* d, dmin and scales, in Q4_K's places */
            unpack_sb_q4k(g + (size_t)s * SB * BB_K5, (int)(row % G), &head, k->qs, k->qh);
            memcpy(k, &head, offsetof(blk_q4_k, qs));
        }
        return f->gguf;
    }
    if (f->m == M_Q6_K) {
        for (int64_t s = 0; s < nb / SB; s++)
            unpack_sb_q6k(g + (size_t)s * SB * BB_6, (int)(row % G), (blk_q6_k *)out + s);
        return f->gguf;
    }
    for (int64_t s = 0; f->m == M_IQ4_XS && s < nb / SB; s++)
        unpack_sb_iq4xs(g + (size_t)s * SB * BB_X, (int)(row % G), (blk_iq4_xs *)out + s);
    for (int64_t s = 0; f->m == M_Q3_K && s < nb / SB; s++)
        unpack_sb_q3k(g + (size_t)s * SB * BB_3, (int)(row % G), (blk_q3_k *)out + s);
    for (int64_t s = 0; f->m == M_Q2_K && s < nb / SB; s++)
        unpack_sb_q2k(g + (size_t)s * SB * BB_2, (int)(row % G), (blk_q2_k *)out + s);
    if (SUPER(f))
        return f->gguf;
    for (int64_t b = 0; b < nb; b++)
        unpack_row(f, g + (size_t)b * f->bb, (int)(row % G), (uint8_t *)out + (size_t)b * f->src);
    return f->gguf;
}

#if defined(__x86_64__)
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) TGT
#define TGT512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define INLINE512 static inline __attribute__((always_inline)) TGT512

/* bb bytes at p asked for, to L1 or (l2) to L2 */
INLINE void prefetch_block(const char *p, int bb, int l2)
{
    if (l2)
        for (int o = 0; o < bb; o += 64)
            _mm_prefetch(p + o, _MM_HINT_T1);
    else
        for (int o = 0; o < bb; o += 64)
            _mm_prefetch(p + o, _MM_HINT_T0);
}

/* ---- x as digits ---- */

/* The digits of 32 integers X (|X| <= 0x7F7F7F, four vectors in element order), stored as
 * three 32-byte planes D2, D1, D0. X + 0x808080 is unsigned below 2^24 and its bytes are
 * D_i + 128 (balanced digits are base-256 digits shifted by 128, no carries), so the planes
 * are its bytes, gathered with shuffles, with the top bit flipped. (Shifts and subtractions
 * per digit, then saturating packs, were twice the instructions.) */
INLINE void store_digits(int8_t *o, const __m256i X[4])
{
    /* per 128-bit lane: bytes 0, 1, 2 of its four dwords to dwords 0, 1, 2 */
    const __m256i sh = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, -1, -1, -1, -1,
                                        0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, -1, -1, -1, -1);
    const __m256i bias = _mm256_set1_epi32(0x808080), top = _mm256_set1_epi8((char)0x80);
    __m256i a[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)   /* qword j: digit j of the vector's 8 elements, in order */
        a[i] = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(_mm256_add_epi32(X[i], bias), sh),
                                           _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    __m256i t0 = _mm256_unpacklo_epi64(a[0], a[1]), t1 = _mm256_unpackhi_epi64(a[0], a[1]);
    __m256i t2 = _mm256_unpacklo_epi64(a[2], a[3]), t3 = _mm256_unpackhi_epi64(a[2], a[3]);
    _mm256_storeu_si256((__m256i *)o, _mm256_xor_si256(_mm256_permute2x128_si256(t0, t2, 0x31), top));
    _mm256_storeu_si256((__m256i *)(o + 32), _mm256_xor_si256(_mm256_permute2x128_si256(t1, t3, 0x20), top));
    _mm256_storeu_si256((__m256i *)(o + 64), _mm256_xor_si256(_mm256_permute2x128_si256(t0, t2, 0x20), top));
}

/* 2^n as a float (0 or subnormal below 2^-126, as ldexpf gives) */
static inline float pow2(int n)
{
    if (n < -126 || n > 127)
        return ldexpf(1.0f, n);
    uint32_t u = (uint32_t)(n + 127) << 23;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The block's k for its largest magnitude top (finite, > 0): the largest with
 * rint(top * 2^k) <= X_MAX. With top = f * 2^e, f in [0.5, 1): k = 23 - e, less one when
 * top * 2^(23 - e) rounds past X_MAX. A normal top's bits give both at once (this ran
 * once per block and token as frexpf, ldexpf and rintf, 5% of a prefill). */
static inline int scale_exp(float top)
{
    uint32_t u;
    memcpy(&u, &top, sizeof u);
    uint32_t ex = u >> 23 & 0xFF, man = (u & 0x7FFFFF) | 0x800000;
    if (ex == 0) {   /* subnormal */
        int e;
        frexpf(top, &e);
        int k = 23 - e;
        return rintf(ldexpf(top, k)) > X_MAX ? k - 1 : k;
    }
    /* top * 2^(23 - e) = man / 2, e = ex - 126; it rounds (to even) past X_MAX from
     * 8355711.5 = 16711423 / 2 on */
    int k = 23 - ((int)ex - 126);
    return man >= 16711423u ? k - 1 : k;
}

/* A block's 32 floats into v, its f32 sum (prep's xs: the contract's order) and its largest
 * magnitude */
INLINE float block_stats(const float *x, __m256 v[4], float *top)
{
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int i = 0; i < 4; i++)
        v[i] = _mm256_loadu_ps(x + 8 * i);
    __m256 a = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs), _mm256_and_ps(v[1], abs)),
                             _mm256_max_ps(_mm256_and_ps(v[2], abs), _mm256_and_ps(v[3], abs)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    *top = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    return srt_hsum8(_mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3])));
}

/* -128 * (the sum of a plane's first and last 16 digits) into c[0] and c[3]: sums of the bytes
 * D + 128 (vpsadbw against zero, a sum per 8 bytes) less 16 * 128 */
INLINE void plane_sums(const int8_t *plane, int32_t *c)
{
    __m256i u = _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)plane),
                                                 _mm256_set1_epi8((char)0x80)),
                                _mm256_setzero_si256());
    __m128i a = _mm256_castsi256_si128(u), b = _mm256_extracti128_si256(u, 1);
    c[0] = -128 * ((int32_t)(_mm_cvtsi128_si32(a) + _mm_extract_epi32(a, 2)) - 16 * 128);
    c[3] = -128 * ((int32_t)(_mm_cvtsi128_si32(b) + _mm_extract_epi32(b, 2)) - 16 * 128);
}

/* cs[i] and cs[3 + i] = -128 * (the sum of plane i's first and last 16 digits): their sum is
 * Q8_0's start (an eighth of it Q5_0's, a quarter of each Q6_K's) */
INLINE void digit_sums(const int8_t *dig, int32_t *cs)
{
    for (int i = 0; i < 3; i++)
        plane_sums(dig + 32 * i, cs + i);
}

/* Whether sum |X| <= Q4_SUM_MAX: its eight lanes' sums of four (each below 2^26: no wrap) each
 * at most an eighth of it, else the exact sum (the common answer without a horizontal sum) */
INLINE int q4_sum_fits(const __m256i X[4])
{
    __m256i a = _mm256_add_epi32(_mm256_add_epi32(_mm256_abs_epi32(X[0]), _mm256_abs_epi32(X[1])),
                                 _mm256_add_epi32(_mm256_abs_epi32(X[2]), _mm256_abs_epi32(X[3])));
    if (!_mm256_movemask_epi8(_mm256_cmpgt_epi32(a, _mm256_set1_epi32(Q4_SUM_MAX / 8))))
        return 1;
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1))) <= Q4_SUM_MAX;
}

/* One token's x (nb blocks) as digits (dig: per block D2, D1, D0), scales sc, block sums xs
 * and the digit sums' starts cs (CS per block; NULL: none, no Q8_0, Q5_0 or Q6_K weight reads
 * them). A block whose sum is not finite (an inf or NaN in x) gets a NaN scale: its rows'
 * outputs are NaN, as the products would be. A block of zeros has scale 0 and digits 0.
 * ek: per block k << 23 where the 16-lane kernel may take a Q4 block's sum and scale in
 * integers (scaled_q4: 0 <= k <= 100 and sum |X| <= Q4_SUM_MAX), 0 for a block of zeros, else -1. */
TGT static void prep_token(const float *x, int64_t nb, int8_t *dig, float *sc, float *xs, int32_t *ek, int32_t *cs)
{
    for (int64_t b = 0; b < nb; b++, x += QK, dig += XB) {
        __m256 v[4];
        float top;
        xs[b] = block_stats(x, v, &top);
        if (!isfinite(xs[b]) || top == 0.0f) {
            memset(dig, 0, XB);
            if (cs)
                memset(cs + CS * b, 0, CS * sizeof(int32_t));
            sc[b] = top == 0.0f && isfinite(xs[b]) ? 0.0f : NAN;
            ek[b] = sc[b] == 0.0f ? 0 : -1;
            continue;
        }
        int k = scale_exp(top);
        sc[b] = pow2(-k);
        /* x * 2^k in two exact steps: 2^k alone can pass the float range (k up to 172) */
        __m256 f1 = _mm256_set1_ps(pow2(k / 2)), f2 = _mm256_set1_ps(pow2(k - k / 2));
        __m256i X[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            X[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(v[i], f1), f2));   /* rint */
        store_digits(dig, X);
        if (cs)
            digit_sums(dig, cs + CS * b);
        ek[b] = k >= 0 && k <= 100 && q4_sum_fits(X) ? k << 23 : -1;
    }
}

/* srt_numerics fast: one token's x as one signed byte per element, llama.cpp's Q8 activations
 * with the scale kept in f32: X_j = rint(x_j * (127 / top)) (|X_j| <= 127) in plane D2 (the
 * others are not read), sc = top / 127, cs[0] and cs[3] the starts of D2's halves (the others
 * 0), ek -1 (the kernels multiply by sc). xs is the sum of the rounded x, sc * sum X, as
 * llama.cpp's: then a row's offset (m * xs) and its products (d * q * X) are those of one x, and
 * the rounding errors meet the weights w = d*q + m (centred) rather than d*q (0..15d: the block
 * sum of x itself doubled the logits' error against HF). A top below 2^-100 is first scaled by
 * 2^100 (exact), so that 127 / top stays finite. Non-finite and zero blocks as prep_token. */
TGT static void prep_token1(const float *x, int64_t nb, int8_t *dig, float *sc, float *xs, int32_t *ek, int32_t *cs)
{
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < nb; b++, x += QK, dig += XB1) {
        __m256 v[4];
        float top;
        xs[b] = block_stats(x, v, &top);
        ek[b] = -1;
        if (cs)
            memset(cs + CS * b, 0, CS * sizeof(int32_t));
        if (!isfinite(xs[b]) || top == 0.0f) {
            memset(dig, 0, QK);
            sc[b] = top == 0.0f && isfinite(xs[b]) ? 0.0f : NAN;
            continue;
        }
        sc[b] = top / 127.0f;
        float f = top < 0x1p-100f ? 0x1p100f : 1.0f;
        __m256 fv = _mm256_set1_ps(f), id = _mm256_set1_ps(127.0f / (top * f));
        __m256i X[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            X[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(v[i], fv), id));   /* rint */
        /* int32 -> int8 (no saturation: |X| <= 127), the packs' lane interleave undone */
        __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(X[0], X[1]), _mm256_packs_epi32(X[2], X[3]));
        _mm256_storeu_si256((__m256i *)dig, _mm256_permutevar8x32_epi32(w, order));
        __m256i t = _mm256_add_epi32(_mm256_add_epi32(X[0], X[1]), _mm256_add_epi32(X[2], X[3]));
        __m128i u = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0x4E));
        xs[b] = sc[b] * (float)_mm_cvtsi128_si32(_mm_add_epi32(u, _mm_shuffle_epi32(u, 0xB1)));
        if (cs)   /* plane D2's alone */
            plane_sums(dig, cs + CS * b);
    }
}

/* ---- the kernels: one group of 16 rows x T tokens over all nb blocks; out[t * 16 + r] =
 * acc + off of row r, token t (the header's sequence). M: the format (ALL_M). Token t's block b: digits at dig + t * ldd + 96 * b (fast: 32 * b), its scale, sum and Q8_0's
 * starts at sc, xs [t * lds + b] and cs [CS * (t * lds + b)]. pf: bytes to prefetch alongside,
 * block for block (the next group), or NULL; to L1, or to L2 when pf2 (run_item says why). ---- */

/* The packed layout of format M, for both kernels (M is a constant there, so these fold): a
 * block's bytes (K-quants: on average, which the prefetch takes), the bytes the kernel steps
 * from one block's q to the next (K-quants: without the super-block header), and where d and
 * m (Q4_1, Q5_1) sit after a block's q; FMTS holds the same numbers for the packers. */
static inline int blk_bytes(int M)
{
    return M == M_Q8_0 ? BB_MAX : M == M_Q5_0 ? BB5 : M == M_Q4_K ? BB_K : M == M_Q6_K ? BB_6
         : M == M_Q5_K ? BB_K5 : M == M_Q5_1 ? BB5 + 32 : M == M_Q4_1 ? BB : M == M_IQ4_XS ? BB_X
         : M == M_Q3_K ? BB_3 : M == M_Q2_K ? BB_2 : BB - 32;
}
static inline int blk_step(int M)
{
    return M == M_Q6_K ? 384 : M == M_Q5_K ? 320 : M == M_Q3_K ? 192 : M == M_Q2_K ? 128 : SUPER_M(M) ? 256 : blk_bytes(M);
}
static inline int hdr_bytes(int M)
{
    return M == M_Q4_K || M == M_Q5_K ? HDR_K : M == M_Q6_K || M == M_Q3_K ? HDR_6 : M == M_IQ4_XS ? HDR_X : HDR_2;
}

static inline int d_at(int M) { return M == M_Q8_0 ? 512 : M == M_Q5_0 || M == M_Q5_1 ? 320 : 256; }
static inline int m_at(int M) { return M == M_Q4_1 ? 288 : 352; }

/* Q2_K: the sum of half h of a block's x (0: its first 16) as its integers X give it, from the
 * digit sums' starts c (-128 * each plane's sum of digits): nd 3, 65536 sum D2 + 256 sum D1 +
 * sum D0, exact in int32 (|sum X| <= 16 * 0x7F7F7F); nd 1 (fast: X = D2), sum D2. Rounded once
 * to float and times s, the same on either kernel. */
static inline float half_sum(int nd, const int32_t *c, int h, float s)
{
    int32_t X = nd == 1 ? -(c[3 * h] / 128) : -(512 * c[3 * h] + 2 * c[3 * h + 1] + c[3 * h + 2] / 128);
    return (float)X * s;
}

/* t = fma(S2, 65536, (float)(S1 * 256 + S0)): S1 * 256 + S0 fits int32 (Q4: below 2^24, so
 * its conversion is the exact fma's; Q8_0: below 2^28, rounded by the conversion) */
INLINE512 __m512 combine16(__m512i s2, __m512i s1, __m512i s0)
{
    __m512 v = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(s1, 8), s0));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s2), _mm512_set1_ps(65536.0f), v);
}

/* acc + q . broadcast(*x): vpdpbusd with x from memory as its broadcast operand (GCC keeps
 * a vpbroadcastd and a register apart for each: a cycle more a token's block) */
INLINE512 __m512i dpb(__m512i acc, __m512i q, const int32_t *x)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(q), "m"(*x));
    return acc;
}

/* The same t times the block's scale s = 2^-k, where 0 <= k <= 100 (fast_scale), without a
 * multiply: vpdpbusd runs on the pipes of FMA and FMUL (on Zen 4 twice as many of them a cycle
 * as vector integer or FADD ops), and a token's block took four float ops there besides its 24
 * vpdpbusd (combine16's fma, d * s, and the two below). Both powers of two are added to the
 * exponent bits instead: a nonzero integer-valued float has bits of at least 1.0's (127 << 23),
 * above either amount, and zero's bits are 0, so the unsigned min adds or takes nothing from
 * zero. S2 * 65536 is exact, so its sum with v is the fma's (one rounding of the same value),
 * and t * 2^-k stays normal (|t| >= 1, k <= 100), so fma(t * s, d, acc) is the bits of
 * fma(t, d * s, acc): d * s and t * s are exact, the same real product (|d| >= 2^-24 when
 * nonzero: an f16, or one times an integer scale). */
INLINE512 __m512 scaled16(__m512i s2, __m512i s1, __m512i s0, const float *s)
{
    __m512i a = _mm512_castps_si512(_mm512_cvtepi32_ps(s2));
    a = _mm512_add_epi32(a, _mm512_min_epu32(a, _mm512_set1_epi32(16 << 23)));
    __m512 v = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(s1, 8), s0));
    __m512i t = _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), v));
    __m512i k = _mm512_sub_epi32(_mm512_set1_epi32(127 << 23), _mm512_castps_si512(_mm512_set1_ps(*s)));
    return _mm512_castsi512_ps(_mm512_sub_epi32(t, _mm512_min_epu32(t, k)));
}

/* Q4_0, Q4_1 and Q4_K (q 0..15, no start): S1 * 256 + S0 is below 2^24, so combine16's t is
 * one rounding of the whole sum S = 65536 S2 + 256 S1 + S0, which vcvtdq2ps gives from S in
 * int32 where |S| < 2^31: prep_token found sum |X| <= Q4_SUM_MAX, so |S| <= 15 sum |X| fits
 * (the shifts may wrap; the sum in two's complement is S). Then t * 2^-k as in scaled16, with
 * ek = k << 23. Two integer ops and a convert where scaled16 takes six. */
INLINE512 __m512 scaled_q4(__m512i s2, __m512i s1, __m512i s0, const int32_t *ek)
{
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(s2, 16), _mm512_slli_epi32(s1, 8)), s0);
    __m512i t = _mm512_castps_si512(_mm512_cvtepi32_ps(s));
    return _mm512_castsi512_ps(_mm512_sub_epi32(t, _mm512_min_epu32(t, _mm512_set1_epi32(*ek))));
}

/* 1 when a block scale s is one scaled16 takes: 2^-k with 0 <= k <= 100; not NaN (a block with
 * an inf or NaN: the product's NaN must reach every row), nor a scale past those bounds (x's
 * block at 2^23 or more, or below 2^-77), which take the multiply. Nor 0: a block of zeros has
 * it, but so has a block below about 2^-126, whose 2^-k (k > 149) is 0 in f32 while its digits
 * are not: scaled16 would subtract 127 from t's exponent (0's bits as a scale's), where the
 * contract's d * 0 gives 0. */
static inline int fast_scale(const float *s)
{
    uint32_t u;
    memcpy(&u, s, sizeof u);
    return u - (27u << 23) <= (100u << 23);
}

INLINE512 void k16(int ND, int T, int M, const uint8_t *g, int64_t nb, const int8_t *dig, int64_t ldd, const float *sc,
                   const float *xs, const int32_t *ek, const int32_t *cs, int64_t lds, const uint8_t *pf, int pf2,
                   float *out)
{
    const int bb = blk_bytes(M), step = blk_step(M);
    const int k4 = M == M_Q4_K || M == M_Q5_K;   /* Q4_K's header and form */
    const int iq4 = M == M_IQ4_NL || M == M_IQ4_XS, halves = M == M_Q6_K || M == M_Q3_K || M == M_Q2_K;
    const int q4 = M == M_Q4_0 || M == M_Q4_1 || M == M_Q4_K;   /* scaled_q4's formats */
    __m512 acc[TILE], off[TILE], dk = _mm512_setzero_ps(), mk = dk;
    const uint8_t *hdr = g;   /* K-quants: the super-block's header */
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        acc[t] = off[t] = _mm512_setzero_ps();
    const __m512i lo = _mm512_set1_epi8(0x0F);
    /* IQ4's levels + 128 in each 128-bit lane: a nibble's byte for vpdpbusd, as Q8_0's q + 128 */
    const __m512i lut = _mm512_broadcast_i32x4(_mm_xor_si128(_mm_loadu_si128((const __m128i *)IQ4_VALUES),
                                                             _mm_set1_epi8((char)0x80)));
    for (int64_t b = 0; b < nb; b++, g += step) {
        if (SUPER_M(M) && b % SB == 0) {
            hdr = g;
            g += hdr_bytes(M);
            dk = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)hdr));
            if (k4 || M == M_Q2_K)
                mk = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(hdr + 32)));
        }
        if (pf)
            prefetch_block((const char *)pf + b * bb, bb, pf2);
        __m512i q[8];   /* q[j] meets x's dword j */
        if (M == M_Q8_0) {
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++)
                q[c] = _mm512_loadu_si512(g + 64 * c);
        } else if (M == M_Q2_K || M == M_Q3_K) {   /* two-bit planes; Q3_K: + 4 where the third bit is set */
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                __m512i v = _mm512_loadu_si512(g + 64 * p);
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++)
                    q[4 * p + k] = _mm512_and_si512(_mm512_srli_epi16(v, 2 * k), _mm512_set1_epi8(3));
            }
            if (M == M_Q3_K)
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    uint64_t k;
                    memcpy(&k, g + 128 + 8 * j, 8);
                    q[j] = _mm512_mask_add_epi8(q[j], _cvtu64_mask64(k), q[j], _mm512_set1_epi8(4));
                }
        } else {
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                __m512i v = _mm512_loadu_si512(g + 64 * c);
                q[c] = _mm512_and_si512(v, lo);
                q[4 + c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo);
            }
            if (M == M_Q5_0 || M == M_Q5_1 || M == M_Q5_K)   /* + 16 where the fifth bit is set: a masked add, off the multiply pipes */
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    uint64_t k;
                    memcpy(&k, g + 256 + 8 * j, 8);
                    q[j] = _mm512_mask_add_epi8(q[j], _cvtu64_mask64(k), q[j], _mm512_set1_epi8(16));
                }
            if (M == M_Q6_K)   /* + 16 and + 32 where those bits are set */
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    uint64_t k4, k5;
                    memcpy(&k4, g + 256 + 8 * j, 8);
                    memcpy(&k5, g + 320 + 8 * j, 8);
                    q[j] = _mm512_mask_add_epi8(q[j], _cvtu64_mask64(k4), q[j], _mm512_set1_epi8(16));
                    q[j] = _mm512_mask_add_epi8(q[j], _cvtu64_mask64(k5), q[j], _mm512_set1_epi8(32));
                }
            if (iq4)
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    q[j] = _mm512_shuffle_epi8(lut, q[j]);
        }
        __m512 d, mm, n0 = _mm512_setzero_ps(), n1 = n0;   /* n0, n1: Q2_K's mins of each half */
        if (k4) {   /* d * sc and dmin * mn, exact in f32 */
            const uint8_t *s = hdr + 64 + 16 * (b % SB);
            d = _mm512_mul_ps(dk, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s))));
            mm = _mm512_mul_ps(mk, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + 128)))));
        } else if (M == M_Q6_K || M == M_Q3_K) {   /* d * sc of the block's two halves, exact in f32 */
            const uint8_t *s = hdr + 32 + 32 * (b % SB);
            d = _mm512_mul_ps(dk, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)s))));
            mm = _mm512_mul_ps(dk, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(s + 16)))));
        } else if (M == M_Q2_K) {   /* d * sc and dmin * mn of each half, exact in f32 */
            const uint8_t *s = hdr + 64 + 32 * (b % SB);
            d = _mm512_mul_ps(dk, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s))));
            mm = _mm512_mul_ps(dk, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + 16)))));
            n0 = _mm512_mul_ps(mk, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + 256)))));
            n1 = _mm512_mul_ps(mk, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + 272)))));
        } else if (M == M_IQ4_XS) {   /* d * (sc - 32), exact in f32 */
            d = _mm512_mul_ps(dk, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                      _mm_loadu_si128((const __m128i *)(hdr + 32 + 16 * (b % SB))))));
            mm = d;
        } else {
            d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + d_at(M))));
            mm = M == M_Q4_1 || M == M_Q5_1 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + m_at(M))))
                                            : _mm512_mul_ps(d, _mm512_set1_ps(-8.0f));
        }
        /* whether every token's block takes the integer scaling (else the multiply, for all;
         * fast's one digit always multiplies by its f32 scale) */
        int by_exp = ND == 3;
        if (by_exp && q4) {
            int32_t o = 0;
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                o |= ek[t * lds + b];
            by_exp = o >= 0;
        } else if (by_exp)
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                by_exp &= fast_scale(sc + t * lds + b);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const int32_t *x2 = (const int32_t *)(dig + t * ldd + (ND == 1 ? XB1 : XB) * b), *x1 = x2 + 8, *x0 = x2 + 16;
            if (halves) {
                /* each half its own sums, from -32 * its sum(D) (a quarter of its start; Q3_K:
                 * -4 * its sum(D), a 32nd; Q2_K: 0), and its own scale: the first half's product
                 * added first */
                const int32_t *c = cs + CS * (t * lds + b);
                const int sh = M == M_Q6_K ? 2 : 5, z = M == M_Q2_K ? 0 : -1;   /* z & c: 0 or c */
                __m512i a2 = _mm512_set1_epi32((z & c[0]) >> sh), a1 = _mm512_set1_epi32((z & c[1]) >> sh);
                __m512i a0 = _mm512_set1_epi32((z & c[2]) >> sh), b2 = _mm512_set1_epi32((z & c[3]) >> sh);
                __m512i b1 = _mm512_set1_epi32((z & c[4]) >> sh), b0 = _mm512_set1_epi32((z & c[5]) >> sh);
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    a2 = dpb(a2, q[j], x2 + j);
                    b2 = dpb(b2, q[4 + j], x2 + 4 + j);
                    if (ND == 3) {
                        a1 = dpb(a1, q[j], x1 + j);
                        a0 = dpb(a0, q[j], x0 + j);
                        b1 = dpb(b1, q[4 + j], x1 + 4 + j);
                        b0 = dpb(b0, q[4 + j], x0 + 4 + j);
                    }
                }
                if (ND == 1) {
                    __m512 s = _mm512_set1_ps(sc[t * lds + b]);
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a2), _mm512_mul_ps(d, s), acc[t]);
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(b2), _mm512_mul_ps(mm, s), acc[t]);
                } else if (by_exp) {
                    acc[t] = _mm512_fmadd_ps(scaled16(a2, a1, a0, sc + t * lds + b), d, acc[t]);
                    acc[t] = _mm512_fmadd_ps(scaled16(b2, b1, b0, sc + t * lds + b), mm, acc[t]);
                } else {
                    __m512 s = _mm512_set1_ps(sc[t * lds + b]);
                    acc[t] = _mm512_fmadd_ps(combine16(a2, a1, a0), _mm512_mul_ps(d, s), acc[t]);
                    acc[t] = _mm512_fmadd_ps(combine16(b2, b1, b0), _mm512_mul_ps(mm, s), acc[t]);
                }
                if (M == M_Q2_K) {   /* w = D*q - M per half: off = fma(-M, xsum of the half, off) */
                    off[t] = _mm512_fnmadd_ps(n0, _mm512_set1_ps(half_sum(ND, c, 0, sc[t * lds + b])), off[t]);
                    off[t] = _mm512_fnmadd_ps(n1, _mm512_set1_ps(half_sum(ND, c, 1, sc[t * lds + b])), off[t]);
                }
                continue;
            }
            __m512i s2 = _mm512_setzero_si512(), s1 = s2, s0 = s2;
            if (M == M_Q8_0 || M == M_Q5_0 || iq4) {   /* Q5_0's start: -16 * sum(D), an eighth exactly */
                const int32_t *c = cs + CS * (t * lds + b);
                const int sh = M == M_Q5_0 ? 3 : 0;
                s2 = _mm512_set1_epi32((c[0] + c[3]) >> sh), s1 = _mm512_set1_epi32((c[1] + c[4]) >> sh);
                s0 = _mm512_set1_epi32((c[2] + c[5]) >> sh);
            }
            if (T == 1 && ND == 1) {
                /* fast, one token: four chains of two (one sum has nothing beside it to hide
                 * vpdpbusd's latency) */
                __m512i e[3] = { _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512() };
#pragma GCC unroll 2
                for (int j = 0; j < 8; j += 4) {
                    s2 = dpb(s2, q[j], x2 + j);
                    e[0] = dpb(e[0], q[j + 1], x2 + j + 1);
                    e[1] = dpb(e[1], q[j + 2], x2 + j + 2);
                    e[2] = dpb(e[2], q[j + 3], x2 + j + 3);
                }
                s2 = _mm512_add_epi32(_mm512_add_epi32(s2, e[0]), _mm512_add_epi32(e[1], e[2]));
            } else if (ND == 1)
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    s2 = dpb(s2, q[j], x2 + j);
            else if (T == 1) {
                /* one token: each sum as two chains of four (the same integers), since eight
                 * dependent vpdpbusd left a decode waiting on their latency */
                __m512i e2 = _mm512_setzero_si512(), e1 = e2, e0 = e2;
#pragma GCC unroll 4
                for (int j = 0; j < 8; j += 2) {
                    s2 = dpb(s2, q[j], x2 + j);
                    s1 = dpb(s1, q[j], x1 + j);
                    s0 = dpb(s0, q[j], x0 + j);
                    e2 = dpb(e2, q[j + 1], x2 + j + 1);
                    e1 = dpb(e1, q[j + 1], x1 + j + 1);
                    e0 = dpb(e0, q[j + 1], x0 + j + 1);
                }
                s2 = _mm512_add_epi32(s2, e2), s1 = _mm512_add_epi32(s1, e1), s0 = _mm512_add_epi32(s0, e0);
            } else
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    s2 = dpb(s2, q[j], x2 + j);
                    s1 = dpb(s1, q[j], x1 + j);
                    s0 = dpb(s0, q[j], x0 + j);
                }
            if (ND == 1)
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s2), _mm512_mul_ps(d, _mm512_set1_ps(sc[t * lds + b])),
                                         acc[t]);
            else if (by_exp && q4)
                acc[t] = _mm512_fmadd_ps(scaled_q4(s2, s1, s0, ek + t * lds + b), d, acc[t]);
            else if (by_exp)
                acc[t] = _mm512_fmadd_ps(scaled16(s2, s1, s0, sc + t * lds + b), d, acc[t]);
            else
                acc[t] = _mm512_fmadd_ps(combine16(s2, s1, s0), _mm512_mul_ps(d, _mm512_set1_ps(sc[t * lds + b])),
                                         acc[t]);
            if (M == M_Q4_1 || M == M_Q4_0 || M == M_Q5_1)
                off[t] = _mm512_fmadd_ps(mm, _mm512_set1_ps(xs[t * lds + b]), off[t]);
            else if (k4)   /* w = D*q - M: off = fma(-M, xsum, off) */
                off[t] = _mm512_fnmadd_ps(mm, _mm512_set1_ps(xs[t * lds + b]), off[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        _mm512_storeu_ps(out + G * t, _mm512_add_ps(acc[t], off[t]));
}

#define K16_CASE(ND, T, M) \
    case T: k16(ND, T, M, g, nb, dig, ldd, sc, xs, ek, cs, lds, pf, pf2, out); return;
#define K16_TS(ND, M) \
    switch (T) { K16_CASE(ND, 1, M) K16_CASE(ND, 2, M) K16_CASE(ND, 3, M) default: K16_CASE(ND, 4, M) }

TGT512 static void kern16(int T, int m, const uint8_t *g, int64_t nb, const int8_t *dig, int64_t ldd,
                          const float *sc, const float *xs, const int32_t *ek, const int32_t *cs, int64_t lds,
                          const uint8_t *pf, int pf2, float *out)
{
#define K16_M(M) case M: K16_TS(3, M)
    switch (m) { ALL_M(K16_M) }
#undef K16_M
}

/* srt_numerics fast: x of one digit (prep_token1) */
TGT512 static void kern16_1(int T, int m, const uint8_t *g, int64_t nb, const int8_t *dig, int64_t ldd,
                            const float *sc, const float *xs, const int32_t *ek, const int32_t *cs, int64_t lds,
                            const uint8_t *pf, int pf2, float *out)
{
#define K16_M(M) case M: K16_TS(1, M)
    switch (m) { ALL_M(K16_M) }
#undef K16_M
}

/* sum_j q_j * D_j of one plane for 8 rows: byte pairs to int16 (|q0*D0 + q1*D1| <= 3840), eight
 * of those added in int16 (<= 30720: no wrap), then the pairs to int32 */
INLINE __m256i plane8(const __m256i q[8], const int32_t *xd)
{
    __m256i s = _mm256_maddubs_epi16(q[0], _mm256_set1_epi32(xd[0]));
#pragma GCC unroll 7
    for (int j = 1; j < 8; j++)
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(q[j], _mm256_set1_epi32(xd[j])));
    return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

/* plane8 for Q5_0's q (0..31): four byte pairs at most in int16 (<= 31744), then to int32 */
INLINE __m256i plane8w(const __m256i q[8], const int32_t *xd)
{
    __m256i s[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        s[h] = _mm256_maddubs_epi16(q[4 * h], _mm256_set1_epi32(xd[4 * h]));
#pragma GCC unroll 3
        for (int j = 1; j < 4; j++)
            s[h] = _mm256_add_epi16(s[h], _mm256_maddubs_epi16(q[4 * h + j], _mm256_set1_epi32(xd[4 * h + j])));
    }
    const __m256i one = _mm256_set1_epi16(1);
    return _mm256_add_epi32(_mm256_madd_epi16(s[0], one), _mm256_madd_epi16(s[1], one));
}

/* plane8w's sum over q[0..3] and xd[0..3] alone, for Q6_K's q (0..63): two byte pairs at most
 * in int16 (<= 32256) */
INLINE __m256i plane4_6(const __m256i q[4], const int32_t *xd)
{
    const __m256i one = _mm256_set1_epi16(1);
    __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(q[0], _mm256_set1_epi32(xd[0])),
                                 _mm256_maddubs_epi16(q[1], _mm256_set1_epi32(xd[1])));
    __m256i b = _mm256_add_epi16(_mm256_maddubs_epi16(q[2], _mm256_set1_epi32(xd[2])),
                                 _mm256_maddubs_epi16(q[3], _mm256_set1_epi32(xd[3])));
    return _mm256_add_epi32(_mm256_madd_epi16(a, one), _mm256_madd_epi16(b, one));
}

/* v in byte b where bit b of k is set (a mask's 8 rows, 4 elements each) */
INLINE __m256i mask_bytes8(uint32_t k, char v)
{
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    __m256i h = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)k), spread), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(h, bit), _mm256_set1_epi8(v));
}

/* the 8-lane combine16 */
INLINE __m256 combine8(__m256i s2, __m256i s1, __m256i s0)
{
    __m256 v = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_slli_epi32(s1, 8), s0));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s2), _mm256_set1_ps(65536.0f), v);
}

/* rows 8h..8h+7 of the group, T <= 2 tokens: out[t * 16 + 8h + r] */
INLINE void k8(int T, int M, int h, const uint8_t *g, int64_t nb, const int8_t *dig, int64_t ldd, const float *sc,
               const float *xs, const int32_t *cs, int64_t lds, const uint8_t *pf, int pf2, float *out)
{
    const int bb = blk_bytes(M), step = blk_step(M);
    const int k4 = M == M_Q4_K || M == M_Q5_K;
    const int iq4 = M == M_IQ4_NL || M == M_IQ4_XS, halves = M == M_Q6_K || M == M_Q3_K || M == M_Q2_K;
    __m256 acc[2], off[2], dk = _mm256_setzero_ps(), mk = dk;
    const uint8_t *hdr = g;
#pragma GCC unroll 2
    for (int t = 0; t < T; t++)
        acc[t] = off[t] = _mm256_setzero_ps();
    const __m256i lo = _mm256_set1_epi8(0x0F);
    /* IQ4's levels + 128, split as Q8_0's bytes are: their high nibbles, their low ones */
    const __m128i u8 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)IQ4_VALUES), _mm_set1_epi8((char)0x80));
    const __m256i lut_hi = _mm256_and_si256(_mm256_srli_epi16(_mm256_broadcastsi128_si256(u8), 4), lo);
    const __m256i lut_lo = _mm256_and_si256(_mm256_broadcastsi128_si256(u8), lo);
    for (int64_t b = 0; b < nb; b++, g += step) {
        if (SUPER_M(M) && b % SB == 0) {
            hdr = g;
            g += hdr_bytes(M);
            dk = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(hdr + 16 * h)));
            if (k4 || M == M_Q2_K)
                mk = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(hdr + 32 + 16 * h)));
        }
        if (pf && h == 0)
            prefetch_block((const char *)pf + b * bb, bb, pf2);
        __m256i s[2][6];   /* per token, planes D2, D1, D0 (Q6_K: of each half) */
        __m256i q[8];      /* q[j] meets x's dword j */
        __m256i n[8];      /* IQ4: the nibbles, q[j] their levels' high or low nibbles */
        if (iq4)
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(g + 64 * c + 32 * h));
                n[c] = _mm256_and_si256(v, lo);
                n[4 + c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo);
            }
        if (M == M_Q8_0 || iq4) {
            /* the bytes' high nibbles, then their low ones: S = 16 * (hi . D) + lo . D + start */
#pragma GCC unroll 2
            for (int t = 0; t < T; t++) {
                const int32_t *c = cs + CS * (t * lds + b);
                for (int i = 0; i < 3; i++)
                    s[t][i] = _mm256_set1_epi32(c[i] + c[3 + i]);
            }
#pragma GCC unroll 2
            for (int half = 0; half < 2; half++) {
#pragma GCC unroll 8
                for (int c = 0; c < 8; c++)
                    if (iq4)
                        q[c] = _mm256_shuffle_epi8(half ? lut_lo : lut_hi, n[c]);
                    else {
                        __m256i v = _mm256_loadu_si256((const __m256i *)(g + 64 * c + 32 * h));
                        q[c] = _mm256_and_si256(half ? v : _mm256_srli_epi16(v, 4), lo);
                    }
#pragma GCC unroll 2
                for (int t = 0; t < T; t++) {
                    const int32_t *x2 = (const int32_t *)(dig + t * ldd + XB * b);
#pragma GCC unroll 3
                    for (int i = 0; i < 3; i++) {
                        __m256i p = plane8(q, x2 + 8 * i);
                        s[t][i] = _mm256_add_epi32(s[t][i], half ? p : _mm256_slli_epi32(p, 4));
                    }
                }
            }
        } else {
            if (M == M_Q2_K || M == M_Q3_K)   /* two-bit planes; Q3_K: + 4 where the third bit is set */
#pragma GCC unroll 2
                for (int p = 0; p < 2; p++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(g + 64 * p + 32 * h));
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++) {
                        q[4 * p + k] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * k), _mm256_set1_epi8(3));
                        if (M == M_Q3_K) {
                            uint32_t m;
                            memcpy(&m, g + 128 + 8 * (4 * p + k) + 4 * h, 4);
                            q[4 * p + k] = _mm256_add_epi8(q[4 * p + k], mask_bytes8(m, 4));
                        }
                    }
                }
            else
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(g + 64 * c + 32 * h));
                    q[c] = _mm256_and_si256(v, lo);
                    q[4 + c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo);
                }
            if (M == M_Q5_0 || M == M_Q5_1 || M == M_Q5_K) {   /* Q5_1, Q5_K: no start, their offset is m's */
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    uint32_t k;
                    memcpy(&k, g + 256 + 8 * j + 4 * h, 4);
                    q[j] = _mm256_add_epi8(q[j], mask_bytes8(k, 16));
                }
#pragma GCC unroll 2
                for (int t = 0; t < T; t++) {
                    const int32_t *x2 = (const int32_t *)(dig + t * ldd + XB * b);
#pragma GCC unroll 3
                    for (int i = 0; i < 3; i++) {
                        s[t][i] = plane8w(q, x2 + 8 * i);
                        if (M == M_Q5_0) {
                            const int32_t *c = cs + CS * (t * lds + b);
                            s[t][i] = _mm256_add_epi32(_mm256_set1_epi32((c[i] + c[3 + i]) >> 3), s[t][i]);
                        }
                    }
                }
            } else if (halves) {
                if (M == M_Q6_K)
#pragma GCC unroll 8
                    for (int j = 0; j < 8; j++) {
                        uint32_t k4, k5;
                        memcpy(&k4, g + 256 + 8 * j + 4 * h, 4);
                        memcpy(&k5, g + 320 + 8 * j + 4 * h, 4);
                        q[j] = _mm256_add_epi8(q[j], _mm256_or_si256(mask_bytes8(k4, 16), mask_bytes8(k5, 32)));
                    }
                const int sh = M == M_Q6_K ? 2 : 5, z = M == M_Q2_K ? 0 : -1;   /* as k16's */
#pragma GCC unroll 2
                for (int t = 0; t < T; t++) {
                    const int32_t *x2 = (const int32_t *)(dig + t * ldd + XB * b), *c = cs + CS * (t * lds + b);
#pragma GCC unroll 3
                    for (int i = 0; i < 3; i++) {
                        s[t][i] = _mm256_add_epi32(_mm256_set1_epi32((z & c[i]) >> sh), plane4_6(q, x2 + 8 * i));
                        s[t][3 + i] = _mm256_add_epi32(_mm256_set1_epi32((z & c[3 + i]) >> sh), plane4_6(q + 4, x2 + 8 * i + 4));
                    }
                }
            } else
#pragma GCC unroll 2
                for (int t = 0; t < T; t++) {
                    const int32_t *x2 = (const int32_t *)(dig + t * ldd + XB * b);
                    s[t][0] = plane8(q, x2), s[t][1] = plane8(q, x2 + 8), s[t][2] = plane8(q, x2 + 16);
                }
        }
        __m256 d, mm, n0 = _mm256_setzero_ps(), n1 = n0;
        if (k4) {
            const uint8_t *s8 = hdr + 64 + 16 * (b % SB) + 8 * h;
            d = _mm256_mul_ps(dk, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)s8))));
            mm = _mm256_mul_ps(mk, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s8 + 128)))));
        } else if (M == M_Q2_K) {
            const uint8_t *s8 = hdr + 64 + 32 * (b % SB) + 8 * h;
            d = _mm256_mul_ps(dk, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)s8))));
            mm = _mm256_mul_ps(dk, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s8 + 16)))));
            n0 = _mm256_mul_ps(mk, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s8 + 256)))));
            n1 = _mm256_mul_ps(mk, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s8 + 272)))));
        } else if (M == M_IQ4_XS) {
            const uint8_t *s8 = hdr + 32 + 16 * (b % SB) + 8 * h;
            d = mm = _mm256_mul_ps(dk, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)s8))));
        } else if (M == M_Q6_K || M == M_Q3_K) {
            const uint8_t *s8 = hdr + 32 + 32 * (b % SB) + 8 * h;
            d = _mm256_mul_ps(dk, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)s8))));
            mm = _mm256_mul_ps(dk, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(s8 + 16)))));
        } else {
            d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + d_at(M) + 16 * h)));
            mm = M == M_Q4_1 || M == M_Q5_1 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + m_at(M) + 16 * h)))
                                            : _mm256_mul_ps(d, _mm256_set1_ps(-8.0f));
        }
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) {
            acc[t] = _mm256_fmadd_ps(combine8(s[t][0], s[t][1], s[t][2]), _mm256_mul_ps(d, _mm256_set1_ps(sc[t * lds + b])),
                                     acc[t]);
            if (halves)
                acc[t] = _mm256_fmadd_ps(combine8(s[t][3], s[t][4], s[t][5]),
                                         _mm256_mul_ps(mm, _mm256_set1_ps(sc[t * lds + b])), acc[t]);
            if (M == M_Q2_K) {
                const int32_t *c = cs + CS * (t * lds + b);
                off[t] = _mm256_fnmadd_ps(n0, _mm256_set1_ps(half_sum(3, c, 0, sc[t * lds + b])), off[t]);
                off[t] = _mm256_fnmadd_ps(n1, _mm256_set1_ps(half_sum(3, c, 1, sc[t * lds + b])), off[t]);
            }
            if (M == M_Q4_1 || M == M_Q4_0 || M == M_Q5_1)
                off[t] = _mm256_fmadd_ps(mm, _mm256_set1_ps(xs[t * lds + b]), off[t]);
            else if (k4)
                off[t] = _mm256_fnmadd_ps(mm, _mm256_set1_ps(xs[t * lds + b]), off[t]);
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < T; t++)
        _mm256_storeu_ps(out + G * t + 8 * h, _mm256_add_ps(acc[t], off[t]));
}

#define K8_CASE(T, M) k8(T, M, h, g, nb, dig, ldd, sc, xs, cs, lds, p, pf2, out)

TGT static void kern8(int T, int m, const uint8_t *g, int64_t nb, const int8_t *dig, int64_t ldd, const float *sc,
                      const float *xs, const int32_t *ek, const int32_t *cs, int64_t lds, const uint8_t *pf, int pf2,
                      float *out)
{
    (void)ek;   /* the 16-lane kernel's (scaled_q4); this one keeps combine8 and the multiply */
    /* cs is NULL unless the weight's format reads it (no arithmetic on it then) */
    for (int t = 0; t < T; t += 2, out += 2 * G, dig += 2 * ldd, sc += 2 * lds, xs += 2 * lds,
                            cs = cs ? cs + 2 * CS * lds : NULL)
        for (int h = 0; h < 2; h++) {
            const uint8_t *p = t ? NULL : pf;
            int two = T - t >= 2;
#define K8_M(M) case M: two ? K8_CASE(2, M) : K8_CASE(1, M); break;
            switch (m) { ALL_M(K8_M) }
#undef K8_M
        }
}

/* pack_group on 16 lanes, a block at a time: the 16 rows' 16 bytes of nibbles loaded, rows
 * 4L..4L+3 in 128-bit lane L of four registers, then a 4 x 4 dword transpose within the lanes
 * gives v_0..v_3 in row order; d and m (each row's first dword) the same way from loads 4
 * bytes earlier. Moving dwords one by one took 3/4 of a GGUF-layout decode; a gather for d
 * and m took a third of it (a cold decode ran below the old f32 kernel's speed). Whole
 * groups only: run_item packs a partial last one with pack_group (the rows past the weight
 * must not be read). */
/* a[i], 128-bit lane L: the 16 bytes at p + (4L + i) * st */
INLINE512 void rows16(const uint8_t *p, size_t st, __m512i a[4])
{
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++, p += st) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 4 * st)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 8 * st)), 2);
        a[i] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 12 * st)), 3);
    }
}

/* rows16's a[] to v[c], dword r row r's dword c of its 16 bytes: a 4 x 4 dword transpose
 * within each 128-bit lane */
INLINE512 void dwords16(const __m512i a[4], __m512i v[4])
{
    __m512i t0 = _mm512_unpacklo_epi32(a[0], a[1]), t1 = _mm512_unpackhi_epi32(a[0], a[1]);
    __m512i t2 = _mm512_unpacklo_epi32(a[2], a[3]), t3 = _mm512_unpackhi_epi32(a[2], a[3]);
    v[0] = _mm512_unpacklo_epi64(t0, t2), v[1] = _mm512_unpackhi_epi64(t0, t2);
    v[2] = _mm512_unpacklo_epi64(t1, t3), v[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* The 32 bytes at p + r * st of 16 rows, split by nibble into two blocks as Q4's v_0..v_3:
 * lo (each byte's low nibble: element i of the first 16 bytes low, of the last 16 high) at
 * lo, the high nibbles at hi (the K-quants keep two blocks in the nibbles of one run) */
INLINE512 void nibble_blocks16(const uint8_t *p, size_t st, uint8_t *lo, uint8_t *hi)
{
    const __m512i m = _mm512_set1_epi8(0x0F), mh = _mm512_set1_epi8((char)0xF0);
    __m512i a[4], b[4], l[4], h[4], v[4];
    rows16(p, st, a);
    rows16(p + 16, st, b);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        l[i] = _mm512_or_si512(_mm512_and_si512(a[i], m), _mm512_slli_epi16(_mm512_and_si512(b[i], m), 4));
        h[i] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a[i], 4), m), _mm512_and_si512(b[i], mh));
    }
    dwords16(l, v);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++)
        _mm512_storeu_si512(lo + 64 * c, v[c]);
    dwords16(h, v);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++)
        _mm512_storeu_si512(hi + 64 * c, v[c]);
}

/* A GGUF Q4_K super-block of 16 rows (row r's at p + r * st) as pack_sb_q4k leaves it: the 6-bit
 * scales and mins taken apart in each row's lane. Q5_K (five): qh[32] before qs, and bit j of
 * its bytes taken to each byte's top for vpmovb2m makes block j's masks. */
INLINE512 void pack_sb_k16(int five, const uint8_t *p, size_t st, uint8_t *o)
{
    const size_t blk = five ? 320 : 256, qs = five ? offsetof(blk_q5_k, qs) : offsetof(blk_q4_k, qs);
    __m512i e[4], v[4];
    rows16(p, st, e);
    dwords16(e, v);   /* d | dmin << 16, then the scale bytes 0..3, 4..7, 8..11 */
    _mm256_storeu_si256((__m256i *)o, _mm512_cvtepi32_epi16(v[0]));
    _mm256_storeu_si256((__m256i *)(o + 32), _mm512_cvtepi32_epi16(_mm512_srli_epi32(v[0], 16)));
    const __m512i m63 = _mm512_set1_epi32(63), m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {   /* q4k_scale_min for j and j + 4 */
        __m512i a = _mm512_srli_epi32(v[1], 8 * j), b = _mm512_srli_epi32(v[2], 8 * j), c = _mm512_srli_epi32(v[3], 8 * j);
        __m512i sc = _mm512_and_si512(a, m63), mn = _mm512_and_si512(b, m63);
        __m512i sc4 = _mm512_or_si512(_mm512_and_si512(c, m15), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a, 6), m3), 4));
        __m512i mn4 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(c, 4), m15),
                                      _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(b, 6), m3), 4));
        _mm_storeu_si128((__m128i *)(o + 64 + 16 * j), _mm512_cvtepi32_epi8(sc));
        _mm_storeu_si128((__m128i *)(o + 64 + 16 * (j + 4)), _mm512_cvtepi32_epi8(sc4));
        _mm_storeu_si128((__m128i *)(o + 192 + 16 * j), _mm512_cvtepi32_epi8(mn));
        _mm_storeu_si128((__m128i *)(o + 192 + 16 * (j + 4)), _mm512_cvtepi32_epi8(mn4));
    }
    for (int c = 0; c < 4; c++)   /* blocks 2c and 2c + 1 in the nibbles of qs[32c..32c + 31] */
        nibble_blocks16(p + qs + 32 * c, st, o + HDR_K + blk * (2 * c), o + HDR_K + blk * (2 * c + 1));
    if (!five)
        return;
    __m512i qh[8];   /* dword r of qh[c]: row r's qh[4c..4c + 3] */
    rows16(p + offsetof(blk_q5_k, qh), st, e);
    dwords16(e, qh);
    rows16(p + offsetof(blk_q5_k, qh) + 16, st, e);
    dwords16(e, qh + 4);
    for (int j = 0; j < SB; j++)
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            uint64_t k = _cvtmask64_u64(_mm512_movepi8_mask(_mm512_slli_epi16(qh[c], 7 - j)));
            memcpy(o + HDR_K + blk * j + 256 + 8 * c, &k, 8);
        }
}

/* A GGUF Q6_K super-block of 16 rows as pack_sb_q6k leaves it. Block 4h + kk's low bits are the
 * nibbles (kk / 2) of ql[64h + 32(kk % 2)..]; its bits of value 16 and 32 are bits 2kk and
 * 2kk + 1 of the bytes of qh[32h..], which a shift takes to each byte's top for vpmovb2m. */
INLINE512 void pack_sb_q6k16(const uint8_t *p, size_t st, uint8_t *o)
{
    for (int r = 0; r < G; r++)   /* d is the block's last two bytes: no 16-byte load there */
        memcpy(o + 2 * r, p + (size_t)r * st + 208, 2);
    __m512i e[4], v[4];
    rows16(p + 192, st, e);
    dwords16(e, v);   /* dword r of v[c]: row r's scales 4c..4c+3 */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++)
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            _mm_storeu_si128((__m128i *)(o + 32 + 16 * (4 * c + i)), _mm512_cvtepi32_epi8(_mm512_srli_epi32(v[c], 8 * i)));
    for (int h = 0; h < 2; h++) {
        uint8_t *blk = o + HDR_6 + 384 * 4 * h;
        for (int c = 0; c < 2; c++)
            nibble_blocks16(p + 64 * h + 32 * c, st, blk + 384 * c, blk + 384 * (c + 2));
        __m512i qh[8];   /* dword r of qh[j]: row r's qh bytes of elements 4j..4j+3 */
        rows16(p + 128 + 32 * h, st, e);
        dwords16(e, qh);
        rows16(p + 128 + 32 * h + 16, st, e);
        dwords16(e, qh + 4);
        for (int kk = 0; kk < 4; kk++)
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                uint64_t k4 = _cvtmask64_u64(_mm512_movepi8_mask(_mm512_slli_epi16(qh[j], 7 - 2 * kk)));
                uint64_t k5 = _cvtmask64_u64(_mm512_movepi8_mask(_mm512_slli_epi16(qh[j], 6 - 2 * kk)));
                memcpy(blk + 384 * kk + 256 + 8 * j, &k4, 8);
                memcpy(blk + 384 * kk + 320 + 8 * j, &k5, 8);
            }
    }
}

/* rows16 of the first n bytes (a masked load: nothing past them is read, the last block of a
 * weight may end a mapping) */
INLINE512 void rows16n(const uint8_t *p, size_t st, int n, __m512i a[4])
{
    const __mmask16 k = (__mmask16)((1u << n) - 1);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++, p += st) {
        __m512i v = _mm512_castsi128_si512(_mm_maskz_loadu_epi8(k, p));
        v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(k, p + 4 * st), 1);
        v = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(k, p + 8 * st), 2);
        a[i] = _mm512_inserti32x4(v, _mm_maskz_loadu_epi8(k, p + 12 * st), 3);
    }
}

/* the 16 rows' f16 at p + r * st (row r's in lane r) as d[16] at o */
INLINE512 void halves16(const uint8_t *p, size_t st, uint8_t *o)
{
    for (int r = 0; r < G; r++)
        memcpy(o + 2 * r, p + (size_t)r * st, 2);
}

/* Q2_K's and Q3_K's q of block j of 16 rows as put_bits2 leaves them at o: the two bits at
 * 2 * (j % 4) of the 32 bytes qs[32 * (j / 4)..] (qa, qb: their halves as rows16 loads them)
 * regrouped by dwords16 (byte 4r + i of vector k: element 4k + i of row r), then the four
 * vectors of each half joined at bits 2k; Q3_K's bit j of hmask's (ha, hb; NULL for Q2_K)
 * likewise, taken to each byte's top for vpmovb2m */
INLINE512 void q23_bits16(const __m512i qa[4], const __m512i qb[4], const __m512i *ha, const __m512i *hb,
                          int j, uint8_t *o)
{
    const __m512i m3 = _mm512_set1_epi8(3), m1 = _mm512_set1_epi8(1);
    for (int p = 0; p < 2; p++) {
        const __m512i *src = p ? qb : qa, *hs = p ? hb : ha;
        __m512i e[4], v[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            e[i] = _mm512_and_si512(_mm512_srli_epi16(src[i], 2 * (j % 4)), m3);
        dwords16(e, v);
        __m512i w = _mm512_or_si512(_mm512_or_si512(v[0], _mm512_slli_epi16(v[1], 2)),
                                    _mm512_or_si512(_mm512_slli_epi16(v[2], 4), _mm512_slli_epi16(v[3], 6)));
        _mm512_storeu_si512(o + 64 * p, w);
        if (!hs)
            continue;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            e[i] = _mm512_and_si512(_mm512_srli_epi16(hs[i], j), m1);
        dwords16(e, v);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            uint64_t mk = _cvtmask64_u64(_mm512_movepi8_mask(_mm512_slli_epi16(v[k], 7)));
            memcpy(o + 128 + 8 * (4 * p + k), &mk, 8);
        }
    }
}

/* the eight blocks of q23_bits16 from one load of each 32 bytes (qs, and hm unless NULL) */
INLINE512 void q23_blocks16(const uint8_t *qs, const uint8_t *hm, size_t st, uint8_t *o)
{
    __m512i ha[4] = { 0 }, hb[4] = { 0 }, qa[4], qb[4];
    if (hm) {
        rows16(hm, st, ha);
        rows16(hm + 16, st, hb);
    }
    for (int q = 0; q < 2; q++) {
        rows16(qs + 32 * q, st, qa);
        rows16(qs + 32 * q + 16, st, qb);
#pragma GCC unroll 4
        for (int j = 4 * q; j < 4 * q + 4; j++)
            q23_bits16(qa, qb, hm ? ha : NULL, hm ? hb : NULL, j, o + (hm ? 192 : 128) * j);
    }
}

/* pack_sb_iq4xs, pack_sb_q3k and pack_sb_q2k for 16 rows at once (row r's super-block at
 * p + r * st): the scales formed in each row's lane */
INLINE512 void pack_sb_iq4xs16(const uint8_t *p, size_t st, uint8_t *o)
{
    __m512i e[4], v[4];
    rows16(p, st, e);
    dwords16(e, v);   /* d | scales_h << 16, then scales_l[0..3] */
    _mm256_storeu_si256((__m256i *)o, _mm512_cvtepi32_epi16(v[0]));
    const __m512i m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3), k32 = _mm512_set1_epi32(32);
#pragma GCC unroll 8
    for (int j = 0; j < SB; j++) {   /* iq4xs_scale: nibble j of scales_l, bits 2j of scales_h */
        __m512i ls = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v[1], 4 * j), m15),
                                     _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(v[0], 16 + 2 * j), m3), 4));
        _mm_storeu_si128((__m128i *)(o + 32 + 16 * j), _mm512_cvtepi32_epi8(_mm512_sub_epi32(ls, k32)));
    }
    for (int j = 0; j < SB; j++) {   /* each block's 16 bytes as they are, rows regrouped */
        __m512i a[4], n[4];
        rows16(p + offsetof(blk_iq4_xs, qs) + 16 * j, st, a);
        dwords16(a, n);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            _mm512_storeu_si512(o + HDR_X + 256 * j + 64 * c, n[c]);
    }
}

/* Q3_K: scale t's low four bits are nibble t / 8 of byte t % 8, its high two bits 2 * (t / 4)
 * of byte 8 + t % 4 (q3k_scale); the 12 bytes read by a masked load */
INLINE512 void pack_sb_q3k16(const uint8_t *p, size_t st, uint8_t *o)
{
    __m512i e[4], v[4];
    halves16(p + offsetof(blk_q3_k, d), st, o);
    rows16n(p + offsetof(blk_q3_k, scales), st, 12, e);
    dwords16(e, v);   /* dword r of v[c]: row r's scale bytes 4c..4c+3 */
    const __m512i m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3), k32 = _mm512_set1_epi32(32);
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++) {
        __m512i lo = _mm512_and_si512(_mm512_srli_epi32(v[t % 8 / 4], 8 * (t % 4) + 4 * (t / 8)), m15);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi32(v[2], 8 * (t % 4) + 2 * (t / 4)), m3);
        __m512i sc = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), k32);
        _mm_storeu_si128((__m128i *)(o + 32 + 16 * t), _mm512_cvtepi32_epi8(sc));
    }
    q23_blocks16(p + offsetof(blk_q3_k, qs), p + offsetof(blk_q3_k, hmask), st, o + HDR_6);
}

/* Q2_K: scale byte t's low nibble the scale, its high one the min */
INLINE512 void pack_sb_q2k16(const uint8_t *p, size_t st, uint8_t *o)
{
    __m512i e[4], v[4];
    halves16(p + offsetof(blk_q2_k, d), st, o);
    halves16(p + offsetof(blk_q2_k, dmin), st, o + 32);
    rows16(p, st, e);
    dwords16(e, v);   /* dword r of v[c]: row r's scale bytes 4c..4c+3 */
    const __m512i m15 = _mm512_set1_epi32(15);
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++) {
        __m512i b = _mm512_srli_epi32(v[t / 4], 8 * (t % 4));
        _mm_storeu_si128((__m128i *)(o + 64 + 16 * t), _mm512_cvtepi32_epi8(_mm512_and_si512(b, m15)));
        _mm_storeu_si128((__m128i *)(o + 320 + 16 * t), _mm512_cvtepi32_epi8(_mm512_and_si512(_mm512_srli_epi32(b, 4), m15)));
    }
    q23_blocks16(p + offsetof(blk_q2_k, qs), NULL, st, o + HDR_2);
}

TGT512 static void pack_group16(const srt_weight *w, int64_t g, uint8_t *o)
{
    const q4_fmt *f = fmt_of(w->dtype);
    int64_t nb = w->cols / QK;
    size_t st = w->row_stride;
    const uint8_t *base = (const uint8_t *)w->data + (size_t)(g * G) * st;
    if (SUPER(f)) {
        for (int64_t s = 0; s < nb / SB; s++, base += f->src, o += SB * f->bb)
            if (f->m == M_Q6_K)
                pack_sb_q6k16(base, st, o);
            else if (f->m == M_IQ4_XS)
                pack_sb_iq4xs16(base, st, o);
            else if (f->m == M_Q3_K)
                pack_sb_q3k16(base, st, o);
            else if (f->m == M_Q2_K)
                pack_sb_q2k16(base, st, o);
            else
                pack_sb_k16(f->m == M_Q5_K, base, st, o);
        return;
    }
    const __m512i flip = _mm512_set1_epi8(f->m == M_Q8_0 ? (char)0x80 : 0);
    for (int64_t b = 0; b < nb; b++, o += f->bb, base += f->src) {
        if (f->m == M_Q8_0) {
            /* rows r and 8 + r's 32 bytes in the halves of z[r], then an 8 x 8 dword transpose
             * in each half: two 16-byte chunks the Q4 way took twice the loads, and half of
             * them split a cache line */
            __m512i z[8], t[8], u[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++)
                z[r] = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(base + f->qs + (size_t)r * st))),
                    _mm256_loadu_si256((const __m256i *)(base + f->qs + (size_t)(8 + r) * st)), 1);
#pragma GCC unroll 4
            for (int r = 0; r < 8; r += 2) {
                t[r] = _mm512_unpacklo_epi32(z[r], z[r + 1]);
                t[r + 1] = _mm512_unpackhi_epi32(z[r], z[r + 1]);
            }
#pragma GCC unroll 2
            for (int h = 0; h < 8; h += 4) {   /* rows h..h+3: dword c (lane 0) and 4 + c (lane 1) */
                u[h] = _mm512_unpacklo_epi64(t[h], t[h + 2]);
                u[h + 1] = _mm512_unpackhi_epi64(t[h], t[h + 2]);
                u[h + 2] = _mm512_unpacklo_epi64(t[h + 1], t[h + 3]);
                u[h + 3] = _mm512_unpackhi_epi64(t[h + 1], t[h + 3]);
            }
            const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                _mm512_storeu_si512(o + 64 * c, _mm512_xor_si512(_mm512_permutex2var_epi64(u[c], lo, u[4 + c]), flip));
                _mm512_storeu_si512(o + 64 * (4 + c), _mm512_xor_si512(_mm512_permutex2var_epi64(u[c], hi, u[4 + c]), flip));
            }
        } else {
            __m512i a[4];
            rows16(base + f->qs, st, a);
            __m512i t0 = _mm512_unpacklo_epi32(a[0], a[1]), t1 = _mm512_unpackhi_epi32(a[0], a[1]);
            __m512i t2 = _mm512_unpacklo_epi32(a[2], a[3]), t3 = _mm512_unpackhi_epi32(a[2], a[3]);
            _mm512_storeu_si512(o, _mm512_unpacklo_epi64(t0, t2));
            _mm512_storeu_si512(o + 64, _mm512_unpackhi_epi64(t0, t2));
            _mm512_storeu_si512(o + 128, _mm512_unpacklo_epi64(t1, t3));
            _mm512_storeu_si512(o + 192, _mm512_unpackhi_epi64(t1, t3));
        }
        __m512i e[4];
        rows16(base, st, e);   /* d (and m; Q5_0: d and qh) first */
        __m512i e01 = _mm512_unpacklo_epi32(e[0], e[1]), e23 = _mm512_unpacklo_epi32(e[2], e[3]);
        __m512i dm = _mm512_unpacklo_epi64(e01, e23);   /* dword r: row r's first */
        _mm256_storeu_si256((__m256i *)(o + f->dof), _mm512_cvtepi32_epi16(dm));
        if (f->mof)
            _mm256_storeu_si256((__m256i *)(o + f->mof), _mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
        if (FIVE(f)) {
            /* qh of row r in dword r (Q5_0: bytes 2..5, across its first two dwords; Q5_1: its
             * second), then mask j's byte k = rows 2k and 2k + 1's nibbles j: each qword's two
             * lanes joined into its low byte, which vpmovqb keeps */
            __m512i dw1 = _mm512_unpackhi_epi64(e01, e23);
            __m512i qh = f->m == M_Q5_1 ? dw1 : _mm512_or_si512(_mm512_srli_epi32(dm, 16), _mm512_slli_epi32(dw1, 16));
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                __m512i n = _mm512_and_si512(_mm512_srli_epi32(qh, 4 * j), _mm512_set1_epi32(0x0F));
                __m512i two = _mm512_or_si512(n, _mm512_srli_epi64(n, 28));
                _mm_storel_epi64((__m128i *)(o + 256 + 8 * j), _mm512_cvtepi64_epi8(two));
            }
        }
    }
}

static void pack_whole_groups(const srt_weight *w, int64_t ng, uint8_t *dst)
{
    size_t rb = packed_row_bytes(fmt_of(w->dtype), w->cols);
    for (int64_t g = 0; g < ng; g++)
        pack_group16(w, g, dst + (size_t)g * G * rb);
}

/* pack_group16 on 8 lanes: rows 8h + 4L + i in 128-bit lane L of a[i], the same transpose;
 * d and m moved one by one (IQ4_NL as Q4_0). Q5_0, Q5_1 and Q4/5/6_K in the GGUF layout run only
 * on the 16-lane level (srt_cpu_q41_takes); IQ4_XS, Q3_K and Q2_K (and those) are left to
 * pack_group here. */
TGT static void pack_group8(const srt_weight *w, int64_t g, uint8_t *o)
{
    const q4_fmt *f = fmt_of(w->dtype);
    int64_t nb = w->cols / QK;
    size_t st = w->row_stride;
    const uint8_t *base = (const uint8_t *)w->data + (size_t)(g * G) * st;
    if (FIVE(f) || SUPER(f)) {
        pack_group(w, g, o);
        return;
    }
    const __m256i flip = _mm256_set1_epi8(f->m == M_Q8_0 ? (char)0x80 : 0);
    for (int64_t b = 0; b < nb; b++, o += f->bb, base += f->src) {
        for (int ch = 0; ch < f->nv / 4; ch++)
            for (int h = 0; h < 2; h++) {
                __m256i a[4];
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    const uint8_t *p = base + f->qs + 16 * ch + (size_t)(8 * h + i) * st;
                    a[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p)),
                                                   _mm_loadu_si128((const __m128i *)(p + 4 * st)), 1);
                }
                __m256i t0 = _mm256_unpacklo_epi32(a[0], a[1]), t1 = _mm256_unpackhi_epi32(a[0], a[1]);
                __m256i t2 = _mm256_unpacklo_epi32(a[2], a[3]), t3 = _mm256_unpackhi_epi32(a[2], a[3]);
                uint8_t *v = o + 256 * ch + 32 * h;
                _mm256_storeu_si256((__m256i *)v, _mm256_xor_si256(_mm256_unpacklo_epi64(t0, t2), flip));
                _mm256_storeu_si256((__m256i *)(v + 64), _mm256_xor_si256(_mm256_unpackhi_epi64(t0, t2), flip));
                _mm256_storeu_si256((__m256i *)(v + 128), _mm256_xor_si256(_mm256_unpacklo_epi64(t1, t3), flip));
                _mm256_storeu_si256((__m256i *)(v + 192), _mm256_xor_si256(_mm256_unpackhi_epi64(t1, t3), flip));
            }
        for (int r = 0; r < G; r++) {
            memcpy(o + f->dof + 2 * r, base + (size_t)r * st, 2);
            if (f->mof)
                memcpy(o + f->mof + 2 * r, base + (size_t)r * st + 2, 2);
        }
    }
}


typedef void (*kern_fn)(int T, int m, const uint8_t *g, int64_t nb, const int8_t *dig, int64_t ldd, const float *sc,
                        const float *xs, const int32_t *ek, const int32_t *cs, int64_t lds, const uint8_t *pf,
                        int pf2, float *out);

/* ---- the 16-lane kernel against the 8-lane one, once per process ---- */

static uint32_t lcg(uint32_t *s) { return (*s = *s * 1103515245u + 12345u) >> 8; }

/* m in [-1, 1] times 2^e, e in [e0, e0 + ne) */
static float made_up(uint32_t *s, int e0, int ne)
{
    float m = (float)((int)(lcg(s) % 20001) - 10000) / 10000.0f;
    return ldexpf(m, e0 + (int)(lcg(s) % (uint32_t)ne));
}

int srt_cpu_q41_wide_matches(void)
{
    enum { NB = 8 };   /* a Q4_K super-block */
    _Alignas(64) uint8_t g[N_FMTS][NB * BB_MAX];   /* made-up blocks in each format (FMTS' order) */
    _Alignas(64) int8_t dig[TILE * NB * XB];
    float x[TILE * NB * QK], sc[TILE * NB], xs[TILE * NB], y8[TILE * G], y16[TILE * G];
    int32_t cs[TILE * NB * CS], ek[TILE * NB];
    uint32_t s = 4242;
    for (int b = 0; b < NB; b++)
        for (int r = 0; r < G; r++) {
            blk_q4_1 k = { .d = srt_f32_to_f16(made_up(&s, -12, 10)), .m = srt_f32_to_f16(made_up(&s, -12, 10)) };
            blk_q4_0 k0 = { .d = k.d };
            blk_q8_0 k8 = { .d = k.d };
            blk_q5_0 k5 = { .d = k.d };
            blk_q5_1 k51 = { .d = k.d, .m = k.m };
            blk_iq4_nl kn = { .d = k.d };
            for (int i = 0; i < QK / 2; i++)
                k.qs[i] = k0.qs[i] = k5.qs[i] = kn.qs[i] = (uint8_t)lcg(&s);
            for (int i = 0; i < 4; i++)
                k5.qh[i] = (uint8_t)lcg(&s);
            memcpy(k51.qs, k5.qs, sizeof k51.qs);
            for (int i = 0; i < 4; i++)
                k51.qh[i] = (uint8_t)lcg(&s);
            for (int i = 0; i < QK; i++)   /* -128 too */
                k8.qs[i] = (int8_t)(lcg(&s) & 0xFF);
            pack_row(&FMTS[0], g[0] + b * FMTS[0].bb, r, (const uint8_t *)&k);
            pack_row(&FMTS[1], g[1] + b * FMTS[1].bb, r, (const uint8_t *)&k0);
            pack_row(&FMTS[2], g[2] + b * FMTS[2].bb, r, (const uint8_t *)&k8);
            pack_row(&FMTS[3], g[3] + b * FMTS[3].bb, r, (const uint8_t *)&k5);
            pack_row(&FMTS[7], g[7] + b * FMTS[7].bb, r, (const uint8_t *)&k51);
            pack_row(&FMTS[8], g[8] + b * FMTS[8].bb, r, (const uint8_t *)&kn);
        }
    for (int r = 0; r < G; r++) {
        blk_q4_k kk = { .d = srt_f32_to_f16(made_up(&s, -12, 10)), .dmin = srt_f32_to_f16(made_up(&s, -12, 10)) };
        for (int i = 0; i < 12; i++)
            kk.scales[i] = (uint8_t)lcg(&s);
        for (int i = 0; i < QK_K / 2; i++)
            kk.qs[i] = (uint8_t)lcg(&s);
        pack_sb_q4k(g[4], r, &kk, kk.qs, NULL);
        uint8_t qh[QK_K / 8];
        for (int i = 0; i < QK_K / 8; i++)
            qh[i] = (uint8_t)lcg(&s);
        pack_sb_q4k(g[6], r, &kk, kk.qs, qh);
        blk_q6_k k6 = { .d = kk.d };
        for (int i = 0; i < QK_K / 2; i++)
            k6.ql[i] = (uint8_t)lcg(&s);
        for (int i = 0; i < QK_K / 4; i++)
            k6.qh[i] = (uint8_t)lcg(&s);
        for (int i = 0; i < QK_K / 16; i++)   /* -128 too */
            k6.scales[i] = (int8_t)(lcg(&s) & 0xFF);
        pack_sb_q6k(g[5], r, &k6);
        blk_iq4_xs kx = { .d = kk.d, .scales_h = (uint16_t)lcg(&s) };
        blk_q3_k k3 = { .d = kk.d };
        blk_q2_k k2 = { .d = kk.d, .dmin = kk.dmin };
        for (int i = 0; i < QK_K / 64; i++)
            kx.scales_l[i] = (uint8_t)lcg(&s);
        for (int i = 0; i < QK_K / 2; i++)
            kx.qs[i] = (uint8_t)lcg(&s);
        for (int i = 0; i < QK_K / 4; i++)
            k3.qs[i] = (uint8_t)lcg(&s), k2.qs[i] = (uint8_t)lcg(&s);
        for (int i = 0; i < QK_K / 8; i++)
            k3.hmask[i] = (uint8_t)lcg(&s);
        for (int i = 0; i < 12; i++)
            k3.scales[i] = (uint8_t)lcg(&s);
        for (int i = 0; i < QK_K / 16; i++)
            k2.scales[i] = (uint8_t)lcg(&s);
        pack_sb_iq4xs(g[9], r, &kx);
        pack_sb_q3k(g[10], r, &k3);
        pack_sb_q2k(g[11], r, &k2);
    }
    for (int i = 0; i < TILE * NB * QK; i++)
        x[i] = made_up(&s, -20, 30);
    for (int i = 0; i < QK; i++)   /* a block of zeros, and one past the integer scaling's bounds */
        x[QK + i] = 0.0f, x[2 * QK + i] = made_up(&s, 30, 4);
    for (int t = 0; t < TILE; t++)
        prep_token(x + t * NB * QK, NB, dig + t * NB * XB, sc + t * NB, xs + t * NB, ek + t * NB, cs + t * NB * CS);
    for (int f = 0; f < N_FMTS; f++)
        for (int T = 1; T <= TILE; T++) {
            kern8(T, FMTS[f].m, g[f], NB, dig, NB * XB, sc, xs, ek, cs, NB, NULL, 0, y8);
            kern16(T, FMTS[f].m, g[f], NB, dig, NB * XB, sc, xs, ek, cs, NB, NULL, 0, y16);
            if (memcmp(y8, y16, sizeof(float) * G * (size_t)T))
                return 0;
        }
    return 1;
}

/* ---- the matmul ---- */

typedef struct {
    int n;
    const srt_weight *w[SRT_MATMUL_N_MAX];
    const float *bias[SRT_MATMUL_N_MAX];
    float *y[SRT_MATMUL_N_MAX];
    int64_t first[SRT_MATMUL_N_MAX + 1];   /* weight k's items: [first[k], first[k + 1]) */
    int64_t per[SRT_MATMUL_N_MAX];         /* groups per item */
    int64_t n_chunk[SRT_MATMUL_N_MAX];     /* items per token block */
    int64_t nb, n_tok, t0, item_tok;       /* this run: tokens [t0, t0 + n_tok) of the call */
    int64_t prep_tok;                      /* tokens a prep item turns into digits */
    const float *x;                        /* the run's first token */
    const int8_t *dig;                     /* the run's tokens: nb * xb bytes each */
    int xb;                                /* XB, or fast's XB1 */
    const float *sc, *xs;                  /* nb floats each */
    const int32_t *ek;                     /* nb each (prep_token) */
    const int32_t *cs;                     /* CS * nb each; NULL when no weight is Q8_0, Q5_0 or Q6_K */
    uint8_t *rep;                          /* per thread: nb * BB_MAX bytes */
    int nth;                               /* threads taking items */
    int fast;                              /* srt_numerics fast: one digit (prep_token1, kern16_1) */
    kern_fn kern;
    void (*pack)(const srt_weight *w, int64_t g, uint8_t *o);   /* a whole GGUF-layout group */
} q41_job;

static void prep_item(void *arg, int64_t i, int ith)
{
    q41_job *j = arg;
    for (int64_t t = i * j->prep_tok; t < j->n_tok && t < (i + 1) * j->prep_tok; t++)
        (j->fast ? prep_token1 : prep_token)(j->x + t * j->nb * QK, j->nb, (int8_t *)j->dig + t * j->nb * j->xb, (float *)j->sc + t * j->nb,
                   (float *)j->xs + t * j->nb, (int32_t *)j->ek + t * j->nb,
                   j->cs ? (int32_t *)j->cs + CS * t * j->nb : NULL);
}

/* y[r] = out[r] + bias[r] (bias NULL: + 0.0f) for the group's nr rows */
TGT static void store_rows(const float *out, const float *bias, float *y, int nr)
{
    if (nr < G) {
        for (int r = 0; r < nr; r++)
            y[r] = out[r] + (bias ? bias[r] : 0.0f);
        return;
    }
    for (int h = 0; h < G; h += 8)
        _mm256_storeu_ps(y + h, _mm256_add_ps(_mm256_loadu_ps(out + h),
                                              bias ? _mm256_loadu_ps(bias + h) : _mm256_setzero_ps()));
}

/* Item i: weight *k, its groups [*g0, *g1) and token block *tb */
static void item_at(const q41_job *j, int64_t i, int *k, int64_t *g0, int64_t *g1, int64_t *tb)
{
    *k = 0;
    while (i >= j->first[*k + 1])
        (*k)++;
    int64_t li = i - j->first[*k], ng = (j->w[*k]->rows + G - 1) / G;
    *tb = li / j->n_chunk[*k];
    *g0 = li % j->n_chunk[*k] * j->per[*k];
    *g1 = *g0 + j->per[*k] < ng ? *g0 + j->per[*k] : ng;
}

static const uint8_t *group_at(const srt_weight *w, int64_t g)
{
    return (const uint8_t *)w->data + (size_t)(g * G) * w->row_stride;
}

/* One item: groups [g0, g1) of weight k x the tokens of one token block; the group's packed
 * bytes are reused by every tile of it. Decode streams the weights from DRAM, in items small
 * enough that a late thread still finds work; so that each item's start does not wait on
 * memory, every group prefetches the next one, the item's last the first group of the item
 * this thread will likely claim next (items are claimed in turn: i + nth), and a thread's
 * first item (no earlier one prefetched it) asks for its first group at once. A group is
 * nb * bb contiguous bytes in either layout (GGUF: its 16 rows), prefetched in order, a
 * block's share at a time: rows interleaved as the packing reads them were a pattern the
 * hardware prefetcher did not follow (a cold GGUF-layout decode ran at half the speed). */
static void run_item(void *arg, int64_t i, int ith)
{
    q41_job *j = arg;
    int k, nk;
    int64_t g0, g1, tb, ng0, ng1, ntb;
    item_at(j, i, &k, &g0, &g1, &tb);
    const srt_weight *w = j->w[k];
    int64_t ta = tb * j->item_tok, tz = ta + j->item_tok < j->n_tok ? ta + j->item_tok : j->n_tok;
    const q4_fmt *f = fmt_of(w->dtype);
    int packed = w->dtype == f->packed;
    const uint8_t *next = NULL;   /* the next item's first group */
    if (i + j->nth < j->first[j->n]) {
        item_at(j, i + j->nth, &nk, &ng0, &ng1, &ntb);
        next = group_at(j->w[nk], ng0);
    }
    if (i < j->nth)
        for (size_t o = 0; o < (size_t)j->nb * f->bb; o += 64)
            _mm_prefetch((const char *)group_at(w, g0) + o, _MM_HINT_T0);
    uint8_t *rep = j->rep + (size_t)ith * (size_t)j->nb * BB_MAX;
    /* the next group to L1, unless it would not fit there beside this one (and its packed copy,
     * GGUF layout): then to L2, so as not to evict what is in use (a GGUF-layout Q8_0 lm_head,
     * three 9.8 KB groups in a 32 KB L1, ran at half speed) */
    size_t group = (size_t)j->nb * f->bb;
    int pf2 = (packed ? 2 : 3) * group > L1_BUDGET;
    _Alignas(64) float out[TILE * G];
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *gp = group_at(w, g), *pf = g + 1 < g1 ? group_at(w, g + 1) : next;
        if (!packed) {
            (w->rows - g * G < G ? pack_group : j->pack)(w, g, rep);
            gp = rep;
        }
        int nr = w->rows - g * G < G ? (int)(w->rows - g * G) : G;
        const float *bias = j->bias[k] ? j->bias[k] + g * G : NULL;
        for (int64_t t = ta; t < tz; t += TILE) {
            int T = tz - t < TILE ? (int)(tz - t) : TILE;
            j->kern(T, f->m, gp, j->nb, j->dig + t * j->nb * j->xb, j->nb * j->xb, j->sc + t * j->nb, j->xs + t * j->nb,
                    j->ek + t * j->nb, j->cs ? j->cs + CS * t * j->nb : NULL, j->nb, t == ta ? pf : NULL, pf2, out);
            for (int u = 0; u < T; u++)
                store_rows(out + G * u, bias, j->y[k] + (j->t0 + t + u) * w->rows + g * G, nr);
        }
    }
}

int srt_cpu_q41_matmul_n(srt_threadpool *tp, int n, const srt_weight *const *w, const float *const *bias,
                         const float *x, int64_t n_tok, float *const *y, void *scratch, int wide, int fast)
{
    if (!srt_cpu_have_avx2() || n < 1 || n > SRT_MATMUL_N_MAX || n_tok < 0 || (fast && !wide))
        return SRT_ERROR;
    int64_t C = w[0]->cols;
    int q8 = 0;   /* the digit sums are prepared only when a weight with a start (or Q2_K) will read them */
    for (int k = 0; k < n; k++) {
        const q4_fmt *f = fmt_of(w[k]->dtype);
        if (!f || w[k]->cols != C || C <= 0 || C % (SUPER(f) ? QK_K : QK))
            return SRT_ERROR;
        q8 |= f->m != M_Q4_0 && f->m != M_Q4_1 && f->m != M_Q4_K && f->m != M_Q5_K && f->m != M_Q5_1;
    }
    if (n_tok == 0)
        return SRT_OK;
    q41_job j = { .n = n, .nb = C / QK, .kern = fast ? kern16_1 : wide ? kern16 : kern8, .fast = fast, .xb = fast ? XB1 : XB,
                  .pack = wide ? pack_group16 : pack_group8 };
    int nth = tp ? srt_threadpool_size(tp) : 1;
    uint8_t *base = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    size_t xb = x_bytes(j.nb, n_tok);
    j.rep = base + xb;
    for (int64_t t0 = 0; t0 < n_tok; t0 += RUN_TOK) {
        j.t0 = t0;
        j.n_tok = n_tok - t0 < RUN_TOK ? n_tok - t0 : RUN_TOK;
        j.dig = (const int8_t *)base;
        j.sc = (const float *)(base + (size_t)j.n_tok * (size_t)j.nb * XB);
        j.xs = j.sc + j.n_tok * j.nb;
        j.ek = (const int32_t *)(j.xs + j.n_tok * j.nb);
        j.cs = q8 ? j.ek + j.n_tok * j.nb : NULL;
        /* the digits: 16 tokens an item, fewer when that would leave a thread idle (a batched
         * decode's 16 tokens were one item: the other thread waited) */
        j.x = x + t0 * C;
        j.prep_tok = j.n_tok >= 32 * nth ? 16 : (j.n_tok + 2 * nth - 1) / (2 * nth);
        int64_t n_prep = (j.n_tok + j.prep_tok - 1) / j.prep_tok;
        if (nth > 1 && n_prep > 1)
            srt_threadpool_run_items(tp, prep_item, &j, n_prep);
        else
            for (int64_t i = 0; i < n_prep; i++)
                prep_item(&j, i, 0);
        /* items: a token block (all of a decode's tokens, else ITEM_TOK) x a run of groups,
         * enough of them that a thread which starts late still finds work */
        j.item_tok = j.n_tok <= 2 * TILE ? j.n_tok : ITEM_TOK;
        int64_t n_tb = (j.n_tok + j.item_tok - 1) / j.item_tok, work = 0;
        j.first[0] = 0;
        for (int k = 0; k < n; k++) {
            int64_t ng = (w[k]->rows + G - 1) / G;
            int64_t want = n_tb >= 4 * nth ? 1 : (8 * nth + n_tb - 1) / n_tb;   /* items per token block */
            j.per[k] = (ng + want - 1) / want;
            j.n_chunk[k] = (ng + j.per[k] - 1) / j.per[k];
            j.first[k + 1] = j.first[k] + j.n_chunk[k] * n_tb;
            j.w[k] = w[k];
            j.bias[k] = bias ? bias[k] : NULL;
            j.y[k] = y[k];
            work += w[k]->rows;
        }
        int par = nth > 1 && (double)work * (double)C * (double)j.n_tok >= 64 * 1024;
        j.nth = par ? nth : 1;
        if (par)
            srt_threadpool_run_items(tp, run_item, &j, j.first[n]);
        else
            for (int64_t i = 0; i < j.first[n]; i++)
                run_item(&j, i, 0);
    }
    return SRT_OK;
}

#else

static void pack_whole_groups(const srt_weight *w, int64_t ng, uint8_t *dst) { (void)w, (void)ng, (void)dst; }

int srt_cpu_q41_wide_matches(void) { return 0; }

int srt_cpu_q41_matmul_n(srt_threadpool *tp, int n, const srt_weight *const *w, const float *const *bias,
                         const float *x, int64_t n_tok, float *const *y, void *scratch, int wide, int fast)
{
    return SRT_ERROR;
}

#endif
