/* CPU attention over the slot-indexed KV cache.
 *
 * Work items are (token, query head) pairs spread evenly over the threads. Each item walks
 * its sequence's keys 0..position (causal; earlier positions may be a cached prefix),
 * block by block with an online softmax, so no score buffer grows with the context. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_kernels.h"

#define KEY_BLOCK 64

typedef struct attn_job {
    const srt_attn_args *a;
    srt_dot_f32_fn       dot;
    srt_axpy_f32_fn      axpy;
    srt_f16_row_fn       f16;
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

static void attend_one(const attn_job *job, int32_t t, int32_t h)
{
    const srt_attn_args *a = job->a;
    const srt_forward_batch *b = a->batch;
    int32_t hd = a->head_dim, s = seq_of_token(b, t), n_keys = b->positions[t] + 1;
    int32_t kvh = h / (a->n_heads / a->n_kv_heads);
    size_t row = (size_t)a->n_kv_heads * hd;
    const int32_t *slots = b->seq_slots[s];
    const float *q = a->q + ((size_t)t * a->n_heads + h) * hd;
    float *out = a->out + ((size_t)t * a->n_heads + h) * hd;
    float acc[1024], score[KEY_BLOCK], kbuf[1024];
    float mx = -INFINITY, sum = 0.0f;
    int f32 = a->kv_dtype == SRT_F32;

    memset(acc, 0, (size_t)hd * sizeof(float));
    for (int32_t j0 = 0; j0 < n_keys; j0 += KEY_BLOCK) {
        int32_t nb = n_keys - j0 < KEY_BLOCK ? n_keys - j0 : KEY_BLOCK;
        float bmx = -INFINITY;
        for (int32_t j = 0; j < nb; j++) {
            size_t off = (size_t)slots[j0 + j] * row + (size_t)kvh * hd;
            const float *k;
            if (f32)
                k = (const float *)a->k_cache + off;
            else {
                job->f16((const uint16_t *)a->k_cache + off, kbuf, hd);
                k = kbuf;
            }
            score[j] = job->dot(q, k, hd) * a->scale;
            if (score[j] > bmx)
                bmx = score[j];
        }
        if (bmx > mx) {
            float corr = expf(mx - bmx);   /* 0 on the first block */
            sum *= corr;
            for (int32_t d = 0; d < hd; d++)
                acc[d] *= corr;
            mx = bmx;
        }
        for (int32_t j = 0; j < nb; j++) {
            float p = expf(score[j] - mx);
            size_t off = (size_t)slots[j0 + j] * row + (size_t)kvh * hd;
            const float *v;
            sum += p;
            if (f32)
                v = (const float *)a->v_cache + off;
            else {
                job->f16((const uint16_t *)a->v_cache + off, kbuf, hd);
                v = kbuf;
            }
            job->axpy(acc, p, v, hd);
        }
    }
    float inv = 1.0f / sum;
    for (int32_t d = 0; d < hd; d++)
        out[d] = acc[d] * inv;
}

static void attn_worker(void *arg, int ith, int nth)
{
    const attn_job *job = arg;
    const srt_attn_args *a = job->a;
    int64_t n = (int64_t)a->batch->n_tokens * a->n_heads;
    int64_t lo = n * ith / nth, hi = n * (ith + 1) / nth;
    for (int64_t i = lo; i < hi; i++)
        attend_one(job, (int32_t)(i / a->n_heads), (int32_t)(i % a->n_heads));
}

void srt_cpu_attention(srt_threadpool *tp, const srt_attn_args *a)
{
    attn_job job = { a, srt_cpu_dot_f32(), srt_cpu_axpy_f32(), srt_cpu_f16_row() };
    if (tp && (int64_t)a->batch->n_tokens * a->n_heads > 1)
        srt_threadpool_run(tp, attn_worker, &job);
    else
        attn_worker(&job, 0, 1);
}
