/* CPU attention over the slot-indexed KV cache.
 *
 * A work item is one token and a run of query heads that share a KV head (GQA), so each
 * K/V row is read once for all of them. Items are spread evenly over the threads; runs
 * are shortened when there would be too few items to keep every thread busy (decode of
 * one sequence). Each item walks its sequence's keys 0..position (causal; earlier
 * positions may be a cached prefix) in fixed chunks, block by block with an online
 * softmax, so no score buffer grows with the context; see ATTN_CHUNK for why the result
 * is the same bits in any batch. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_kernels.h"

#if defined(__x86_64__)
#include <xmmintrin.h>
/* GCC emits nothing for __builtin_prefetch at the x86-64 baseline (prefetcht0 is SSE, but
 * -march=x86-64 does not claim it), and this file is built for the baseline. To L2, not L1:
 * a batched decode's K/V rows come from DRAM, and prefetcht0's requests filled L1's few miss
 * buffers, so the prefetches themselves stalled (56% of attend_range's time at concurrency
 * 16); L2 holds more misses in flight. A 16-sequence decode step: 30.0 -> 24.8 ms. */
#define PREFETCH(p) __asm__ volatile("prefetcht1 %0" : : "m"(*(const char *)(p)))
#else
#define PREFETCH(p) __builtin_prefetch(p)
#endif

#define KEY_BLOCK 64
#define MAX_RUN   8      /* query heads per item */
#define SPLIT_PARTIALS 512   /* most (item, key chunk) partial results of a split decode */
#define PF_KEYS   16     /* K rows asked for this many keys ahead */
#define PF_STEP   8      /* keys scored per kernel call, their prefetches issued before it */

typedef struct attn_job {
    const srt_attn_args *a;
    srt_dot_f32_fn       dot;
    srt_axpy_f32_fn      axpy;
    srt_exp_sum_fn       exp_sum;
    srt_dot_rows_fn      dot_rows;
    srt_axpy_rows_fn     axpy_rows;
    srt_f16_dot_block_fn f16_dot;
    srt_f16_axpy_block_fn f16_axpy;
    int32_t              run;      /* query heads per item */
    int32_t              runs;     /* items per (token, kv head) */
    int32_t              chunks;   /* key ranges per item (split decode), 1 otherwise */
    int32_t              tile;     /* batch tokens per item (split decode: 1) */
    float               *partial;  /* split decode: per (item, chunk) acc[run][hd], mx[run], sum[run] */
} attn_job;

static int32_t seq_of_token(const srt_forward_batch *b, int32_t t)
{
    int32_t lo = 0, hi = b->n_seqs - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (b->seq_start[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The causal keys [0, position] of a token are taken in fixed chunks of ATTN_CHUNK keys
 * from key 0, each reduced (online softmax over KEY_BLOCK blocks) to a state (acc, max,
 * sum) and the states merged in chunk order by merge_state. Chunk boundaries and the merge
 * order depend only on the token's position, never on the batch, the thread count, how
 * the prompt was chunked or whether the keys were a cached prefix, so a token's output
 * is the same bits in every batch; a split decode computes the same chunks on several
 * threads and merges them the same way. */
#define ATTN_CHUNK 256

static int32_t n_chunks_of(int32_t n_keys) { return (n_keys + ATTN_CHUNK - 1) / ATTN_CHUNK; }

/* state (o, *m, *s) = merge of itself and chunk state (oc, mc, sc); noinline so both
 * callers run exactly the same instructions */
__attribute__((noinline)) static void merge_state(float *o, float *m, float *s, const float *oc, float mc,
                                                  float sc, int32_t hd)
{
    float nm = mc > *m ? mc : *m, a = expf(*m - nm), b = expf(mc - nm);
    *s = *s * a + sc * b;
    for (int32_t d = 0; d < hd; d++)
        o[d] = o[d] * a + oc[d] * b;
    *m = nm;
}

/* A decode step streams ~100 MB of weights through the caches, which evicts the few MB of
 * KV cache the previous step read, so K/V rows come from DRAM: a row's bytes are asked for
 * before they are needed (the rows are scattered by slot, which no hardware prefetcher
 * follows well). */
static inline void prefetch_row(const void *cache, size_t elt, const int32_t *slots, int32_t j, size_t row,
                                size_t off, size_t bytes)
{
    const char *p = (const char *)cache + ((size_t)slots[j] * row + off) * elt;
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)63, end = (uintptr_t)p + bytes;
    for (; a < end; a += 64)   /* each line the row touches, once */
        PREFETCH((const char *)a);
}

/* s[j] *= scale for j < n, and the largest: four lanes at a time where SSE is the baseline
 * (the scalar loop was 4.7% of a concurrency-16 prefill). Each product is the scalar one; the
 * maximum is the same value whatever the order (only which zero, +0 or -0, can differ, and
 * every use of it, a difference or a comparison, treats them alike; a NaN is passed over in
 * both, as x > max is false for it). */
static float scale_max(float *s, int32_t n, float scale)
{
    float bmx = -INFINITY;
    int32_t j = 0;
#if defined(__x86_64__)
    __m128 vs = _mm_set1_ps(scale), m = _mm_set1_ps(-INFINITY);
    for (; j + 4 <= n; j += 4) {
        __m128 v = _mm_mul_ps(_mm_loadu_ps(s + j), vs);
        _mm_storeu_ps(s + j, v);
        m = _mm_max_ps(v, m);   /* v > m ? v : m */
    }
    _Alignas(16) float l[4];
    _mm_store_ps(l, m);
    for (int i = 0; i < 4; i++)
        bmx = l[i] > bmx ? l[i] : bmx;
#endif
    for (; j < n; j++) {
        s[j] *= scale;
        bmx = s[j] > bmx ? s[j] : bmx;
    }
    return bmx;
}

/* A prefill's tokens are taken in tiles of up to TILE_TOK consecutive tokens of one
 * sequence: the tile's query rows (token x head) share each block of K/V rows, read and
 * converted once while they are in L1, where one token at a time found them evicted by the
 * other KV heads' rows (K loads were half of the scores' time). Each token still takes its
 * own keys, blocks and softmax steps in its own order, so its bits are those it has alone. */
#define TILE_TOK  8
#define TILE_ROWS 32     /* query rows per tile */
#define STATE_FLOATS 8192   /* acc floats per tile: TILE_ROWS x 256, or MAX_RUN x 1024 */

/* query heads h0 .. h0+nh-1 on KV head kvh of the nt tokens t0.. of one sequence: token i
 * takes keys [k0, k1[i]) (none if k1[i] <= k0); the unnormalised state of query row
 * r = i * nh + h is acc[r * hd ..], mx[r], sum[r] */
static void attend_range(const attn_job *job, int32_t t0, int32_t nt, int32_t kvh, int32_t h0, int32_t nh,
                         int32_t k0, const int32_t *k1, float *acc, float *mx, float *sum)
{
    const srt_attn_args *a = job->a;
    const srt_forward_batch *b = a->batch;
    int32_t hd = a->head_dim, s = seq_of_token(b, t0), nr = nt * nh, kmax = k0;
    size_t row = (size_t)a->n_kv_heads * hd;
    const int32_t *slots = b->seq_slots[s];
    float score[TILE_ROWS][KEY_BLOCK];
    const float *q[TILE_ROWS];
    int f32 = a->kv_dtype == SRT_F32;
    size_t elt = f32 ? sizeof(float) : sizeof(uint16_t), off = (size_t)kvh * hd, bytes = (size_t)hd * elt;

    for (int32_t i = 0; i < nt; i++) {
        kmax = k1[i] > kmax ? k1[i] : kmax;
        for (int32_t h = 0; h < nh; h++) {
            int32_t r = i * nh + h;
            q[r] = a->q + ((size_t)(t0 + i) * a->n_heads + h0 + h) * hd;
            memset(acc + (size_t)r * hd, 0, (size_t)hd * sizeof(float));
            mx[r] = -INFINITY;
            sum[r] = 0.0f;
        }
    }
    const float *rows[KEY_BLOCK];
    const uint16_t *hrows[KEY_BLOCK];
    /* K rows PF_KEYS keys ahead and each block's V rows while its scores are computed, a few
     * at a time: a burst of a block's worth of prefetches overflows the miss buffers and most
     * are dropped */
    for (int32_t j = k0; j < kmax && j < k0 + PF_KEYS; j++)
        prefetch_row(a->k_cache, elt, slots, j, row, off, bytes);
    for (int32_t j0 = k0; j0 < kmax; j0 += KEY_BLOCK) {
        int32_t nb = kmax - j0 < KEY_BLOCK ? kmax - j0 : KEY_BLOCK;
        for (int32_t j = 0; j < nb; j++) {
            if (j0 + j + PF_KEYS < kmax)
                prefetch_row(a->k_cache, elt, slots, j0 + j + PF_KEYS, row, off, bytes);
            prefetch_row(a->v_cache, elt, slots, j0 + j, row, off, bytes);
            if ((j + 1) % PF_STEP && j + 1 < nb)
                continue;
            int32_t s0 = j / PF_STEP * PF_STEP, n = j + 1 - s0;   /* the keys [s0, j] */
            if (f32) {
                /* K rows once, each query held in registers across them */
                for (int32_t i = 0; i < n; i++)
                    rows[i] = (const float *)a->k_cache + (size_t)slots[j0 + s0 + i] * row + off;
                for (int32_t r = 0; r < nr; r++)
                    job->dot_rows(q[r], rows, n, hd, score[r] + s0);
            } else {
                for (int32_t i = 0; i < n; i++)
                    hrows[i] = (const uint16_t *)a->k_cache + (size_t)slots[j0 + s0 + i] * row + off;
                job->f16_dot((const float *const *)q, nr, hrows, n, hd, score[0] + s0, KEY_BLOCK);
            }
        }
        for (int32_t j = 0; j < nb; j++)
            if (f32)
                rows[j] = (const float *)a->v_cache + (size_t)slots[j0 + j] * row + off;
            else
                hrows[j] = (const uint16_t *)a->v_cache + (size_t)slots[j0 + j] * row + off;
        for (int32_t i = 0; i < nt; i++) {
            /* the token's own block: the keys past its position were scored for the others */
            int32_t nbi = k1[i] - j0 < nb ? k1[i] - j0 : nb;
            if (nbi <= 0)
                continue;
            float *accs[MAX_RUN];
            for (int32_t h = 0; h < nh; h++) {
                int32_t r = i * nh + h;
                accs[h] = acc + (size_t)r * hd;
                float bmx = scale_max(score[r], nbi, a->scale);
                if (bmx > mx[r]) {
                    float corr = expf(mx[r] - bmx);   /* 0 on the first block */
                    sum[r] *= corr;
                    for (int32_t d = 0; d < hd; d++)
                        accs[h][d] *= corr;
                    mx[r] = bmx;
                }
                sum[r] += job->exp_sum(score[r], nbi, mx[r]);
            }
            if (f32)
                for (int32_t h = 0; h < nh; h++)
                    job->axpy_rows(accs[h], score[i * nh + h], rows, nbi, hd);
            else
                job->f16_axpy(accs, score[i * nh], KEY_BLOCK, nh, hrows, nbi, hd);
        }
    }
}

/* Chunk c of token t's keys alone, its state into part (for a later merge). */
static void attend_part(const attn_job *job, int32_t t, int32_t kvh, int32_t h0, int32_t nh, int32_t c, float *part)
{
    const srt_attn_args *a = job->a;
    int32_t hd = a->head_dim, n_keys = a->batch->positions[t] + 1;
    float acc[STATE_FLOATS], mx[MAX_RUN], sum[MAX_RUN];
    int32_t k0 = c * ATTN_CHUNK, k1 = k0 + ATTN_CHUNK < n_keys ? k0 + ATTN_CHUNK : n_keys;
    attend_range(job, t, 1, kvh, h0, nh, k0, &k1, acc, mx, sum);
    for (int32_t i = 0; i < nh; i++) {
        memcpy(part + (size_t)i * hd, acc + (size_t)i * hd, (size_t)hd * sizeof(float));
        part[(size_t)job->run * hd + i] = mx[i];
        part[(size_t)job->run * hd + job->run + i] = sum[i];
    }
}

/* The nt tokens t0.. of one sequence: each token's chunks merged in order and normalised
 * into the output. A token whose keys end in an earlier chunk sits out the later ones. */
static void attend(const attn_job *job, int32_t t0, int32_t nt, int32_t kvh, int32_t h0, int32_t nh)
{
    const srt_attn_args *a = job->a;
    int32_t hd = a->head_dim, n_keys[TILE_TOK], k1[TILE_TOK], nc = 0;
    float acc[STATE_FLOATS], mx[TILE_ROWS], sum[TILE_ROWS];
    float tot[STATE_FLOATS], tm[TILE_ROWS], ts[TILE_ROWS];
    for (int32_t i = 0; i < nt; i++) {
        n_keys[i] = a->batch->positions[t0 + i] + 1;
        nc = n_chunks_of(n_keys[i]) > nc ? n_chunks_of(n_keys[i]) : nc;
    }
    for (int32_t ci = 0; ci < nc; ci++) {
        int32_t k0 = ci * ATTN_CHUNK;
        for (int32_t i = 0; i < nt; i++)
            k1[i] = k0 + ATTN_CHUNK < n_keys[i] ? k0 + ATTN_CHUNK : n_keys[i];
        attend_range(job, t0, nt, kvh, h0, nh, k0, k1, ci == 0 ? tot : acc, ci == 0 ? tm : mx, ci == 0 ? ts : sum);
        if (ci > 0)
            for (int32_t r = 0; r < nt * nh; r++)
                if (k1[r / nh] > k0)
                    merge_state(tot + (size_t)r * hd, &tm[r], &ts[r], acc + (size_t)r * hd, mx[r], sum[r], hd);
    }
    for (int32_t r = 0; r < nt * nh; r++) {
        float inv = 1.0f / ts[r], *out = a->out + ((size_t)(t0 + r / nh) * a->n_heads + h0 + r % nh) * hd;
        for (int32_t d = 0; d < hd; d++)
            out[d] = tot[(size_t)r * hd + d] * inv;
    }
}

/* (tile, kv head, run) of base item i */
static void item_heads(const attn_job *job, int64_t i, int32_t *t, int32_t *kvh, int32_t *h0, int32_t *nh)
{
    const srt_attn_args *a = job->a;
    int32_t group = a->n_heads / a->n_kv_heads;
    int64_t per_tile = (int64_t)a->n_kv_heads * job->runs;
    int32_t rem = (int32_t)(i % per_tile), r;
    *t = (int32_t)(i / per_tile);
    *kvh = rem / job->runs;
    r = rem % job->runs;
    *h0 = *kvh * group + r * job->run;
    *nh = group - r * job->run < job->run ? group - r * job->run : job->run;
}

static size_t part_stride(const attn_job *job) { return (size_t)job->run * (size_t)(job->a->head_dim + 2); }

/* one item: a tile of batch tokens (each run of one sequence's tokens in it attended
 * together) on a KV head run, or one key chunk of one token when decode is split */
static void attn_item(void *arg, int64_t i, int ith)
{
    const attn_job *job = arg;
    const srt_forward_batch *b = job->a->batch;
    int32_t t, kvh, h0, nh, c = (int32_t)(i % job->chunks);
    (void)ith;
    item_heads(job, i / job->chunks, &t, &kvh, &h0, &nh);
    if (job->chunks > 1) {
        if (c < n_chunks_of(b->positions[t] + 1))
            attend_part(job, t, kvh, h0, nh, c, job->partial + (size_t)i * part_stride(job));
        return;
    }
    int32_t u = t * job->tile, end = u + job->tile < b->n_tokens ? u + job->tile : b->n_tokens;
    while (u < end) {
        int32_t s = seq_of_token(b, u), v = b->seq_start[s + 1] < end ? b->seq_start[s + 1] : end;
        attend(job, u, v - u, kvh, h0, nh);
        u = v;
    }
}

/* split decode: each item's chunk states merged in chunk order, as attend does */
static void merge_item(void *arg, int64_t i, int ith)
{
    const attn_job *job = arg;
    const srt_attn_args *a = job->a;
    int32_t hd = a->head_dim, run = job->run;
    (void)ith;
    int32_t t, kvh, h0, nh;
    item_heads(job, i, &t, &kvh, &h0, &nh);
    int32_t nc = n_chunks_of(a->batch->positions[t] + 1);
    for (int32_t h = 0; h < nh; h++) {
        float *out = a->out + ((size_t)t * a->n_heads + h0 + h) * hd;
        const float *p = job->partial + (size_t)(i * job->chunks) * part_stride(job);
        float m = p[(size_t)run * hd + h], s = p[(size_t)run * hd + run + h];
        memcpy(out, p + (size_t)h * hd, (size_t)hd * sizeof(float));
        for (int32_t c = 1; c < nc; c++) {
            p = job->partial + (size_t)(i * job->chunks + c) * part_stride(job);
            merge_state(out, &m, &s, p + (size_t)h * hd, p[(size_t)run * hd + h], p[(size_t)run * hd + run + h], hd);
        }
        float inv = 1.0f / s;
        for (int32_t d = 0; d < hd; d++)
            out[d] *= inv;
    }
}

size_t srt_cpu_attention_scratch_floats(int n_threads, int32_t head_dim)
{
    (void)n_threads;
    return (size_t)SPLIT_PARTIALS * MAX_RUN * (size_t)(head_dim + 2);
}

void srt_cpu_attention(srt_threadpool *tp, const srt_attn_args *a, float *scratch, size_t scratch_floats)
{
    int32_t group = a->n_heads / a->n_kv_heads, nth = srt_threadpool_size(tp);
    int32_t run = group < MAX_RUN ? group : MAX_RUN, chunks = 1;
    int64_t base = (int64_t)a->batch->n_tokens * a->n_kv_heads;
    int32_t max_keys = 0;
    for (int32_t t = 0; t < a->batch->n_tokens; t++)
        max_keys = a->batch->positions[t] + 1 > max_keys ? a->batch->positions[t] + 1 : max_keys;
    if (nth > 1 && base < 2 * nth && max_keys > ATTN_CHUNK && scratch &&
        scratch_floats >= srt_cpu_attention_scratch_floats(nth, a->head_dim)) {
        /* few (token, KV head) pairs over a long context (decode): keep whole head groups, so
         * each K/V row is read once, and spread the key chunks over the threads instead; the
         * result is the same bits as unsplit */
        int64_t items = base * ((group + run - 1) / run);
        chunks = n_chunks_of(max_keys);
        if (items * chunks > SPLIT_PARTIALS)
            chunks = 1;
    }
    /* shorter runs only when there are fewer items than threads (and keys are not split): a
     * shorter run reads and converts each K/V row once more per run, so one sequence's decode
     * on 2 threads takes its 3 KV heads as 3 whole-group items (busiest thread: 2 of them)
     * rather than 9 single-head items (busiest thread: 5 heads, each with its own K/V pass) */
    while (chunks == 1 && run > 1 && base * ((group + run - 1) / run) < (int64_t)nth)
        run = (run + 1) / 2;
    /* tiles where sequences bring several tokens (prefill), as many tokens as the query rows
     * and state allow, and halved while there would be few items per thread */
    int32_t tile = 1;
    if (chunks == 1 && a->batch->n_tokens >= 2 * a->batch->n_seqs) {
        tile = TILE_TOK < TILE_ROWS / run ? TILE_TOK : TILE_ROWS / run;
        while (tile > 1 && tile * run * a->head_dim > STATE_FLOATS)
            tile /= 2;
        while (tile > 1 && (a->batch->n_tokens + tile - 1) / tile * a->n_kv_heads * ((group + run - 1) / run) < 4 * nth)
            tile /= 2;
    }
    int64_t tiles = (a->batch->n_tokens + tile - 1) / tile;
    attn_job job = { a, srt_cpu_dot_f32(), srt_cpu_axpy_f32(), srt_cpu_exp_sum(), srt_cpu_dot_rows(), srt_cpu_axpy_rows(),
                     srt_cpu_f16_dot_block(), srt_cpu_f16_axpy_block(), run,
                     (group + run - 1) / run, chunks, tile, scratch };
    /* items claimed one at a time: causal items grow with position, and a thread the OS
     * runs late finds the rest done (the bits do not depend on who computes an item) */
    srt_threadpool_run_items(tp, attn_item, &job, tiles * a->n_kv_heads * job.runs * chunks);
    if (chunks > 1)
        srt_threadpool_run_items(tp, merge_item, &job, base * job.runs);
}
