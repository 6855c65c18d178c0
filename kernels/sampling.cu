/* Logits processing and sampling on the device, one block per sequence.
 *
 * Penalties first (repetition as in HF: divide positive logits, multiply negative ones; then
 * OpenAI frequency/presence), then greedy argmax or: temperature, a probability threshold that is
 * the strictest of top_k / top_p / min_p (found by bisection over probability values, so no sort),
 * and an inverse-CDF draw from a counter-based RNG keyed by (seed, step): the same seed gives the
 * same tokens. Ties at the top_k threshold keep every tied token. CPU twin: src/sample. */
#include <math.h>

#include "common.cuh"

#define SAMPLE_THREADS 1024

static __device__ uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Count and mass of probabilities >= thr over the row. */
static __device__ void mass_at_least(const float *p, int vocab, float thr, float *scratch,
                                     float *count, float *mass)
{
    float c = 0.0f, m = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        if (p[i] >= thr) {
            c += 1.0f;
            m += p[i];
        }
    *count = block_sum(c, scratch);
    *mass = block_sum(m, scratch);
}

__global__ void sample_kernel(float *logits, int vocab, const srt_cuda_sampling *params,
                              const int32_t *counts, int32_t *out_ids)
{
    __shared__ float scratch[32];
    __shared__ float sm_val[SAMPLE_THREADS];
    __shared__ int sm_idx[SAMPLE_THREADS];
    int s = blockIdx.x;
    float *l = logits + (int64_t)s * vocab;
    srt_cuda_sampling sp = params[s];

    if (counts) {
        const int32_t *cnt = counts + (int64_t)s * vocab;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            int c = cnt[i];
            if (c > 0) {
                float v = l[i];
                if (sp.repetition_penalty != 1.0f)
                    v = v > 0.0f ? v / sp.repetition_penalty : v * sp.repetition_penalty;
                v -= sp.frequency_penalty * (float)c + sp.presence_penalty;
                l[i] = v;
            }
        }
        __syncthreads();
    }

    /* argmax (lowest index wins ties, like torch.argmax) */
    float best = -INFINITY;
    int best_i = vocab;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        if (l[i] > best) {
            best = l[i];
            best_i = i;
        }
    sm_val[threadIdx.x] = best;
    sm_idx[threadIdx.x] = best_i;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) {
            float v2 = sm_val[threadIdx.x + o];
            int i2 = sm_idx[threadIdx.x + o];
            if (v2 > sm_val[threadIdx.x] || (v2 == sm_val[threadIdx.x] && i2 < sm_idx[threadIdx.x])) {
                sm_val[threadIdx.x] = v2;
                sm_idx[threadIdx.x] = i2;
            }
        }
        __syncthreads();
    }
    float max_logit = sm_val[0];
    int argmax = sm_idx[0];
    if (sp.temperature <= 0.0f || sp.top_k == 1) {
        if (threadIdx.x == 0)
            out_ids[s] = argmax;
        return;
    }

    /* Unnormalised probabilities in place; the largest is exactly 1. */
    float inv_t = 1.0f / sp.temperature;
    float z = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        float p = __expf((l[i] - max_logit) * inv_t);
        l[i] = p;
        z += p;
    }
    z = block_sum(z, scratch);

    float thr = 0.0f, cnt, mass;
    if (sp.min_p > 0.0f)
        thr = sp.min_p;   /* relative to the top probability, which is 1 */
    if (sp.top_k > 0 && sp.top_k < vocab) {
        /* largest t with count(p >= t) >= k */
        float lo = 0.0f, hi = 1.0f;
        for (int it = 0; it < 40; it++) {
            float mid = 0.5f * (lo + hi);
            mass_at_least(l, vocab, mid, scratch, &cnt, &mass);
            if (cnt >= (float)sp.top_k)
                lo = mid;
            else
                hi = mid;
        }
        thr = fmaxf(thr, lo);
    }
    if (sp.top_p > 0.0f && sp.top_p < 1.0f) {
        /* largest t whose kept mass still reaches top_p of the total */
        float lo = 0.0f, hi = 1.0f;
        for (int it = 0; it < 40; it++) {
            float mid = 0.5f * (lo + hi);
            mass_at_least(l, vocab, mid, scratch, &cnt, &mass);
            if (mass >= sp.top_p * z)
                lo = mid;
            else
                hi = mid;
        }
        thr = fmaxf(thr, lo);
    }
    mass_at_least(l, vocab, thr, scratch, &cnt, &mass);

    /* Inverse CDF over contiguous per-thread ranges, deterministic for a given seed and step. */
    uint64_t r = splitmix64(sp.seed ^ splitmix64(sp.step + 0x632BE59BD9B4E019ull * (uint64_t)s));
    float u = (float)((r >> 11) * (1.0 / 9007199254740992.0)) * mass;
    int per = (vocab + blockDim.x - 1) / blockDim.x;
    int lo_i = threadIdx.x * per, hi_i = min(vocab, lo_i + per);
    float part = 0.0f;
    for (int i = lo_i; i < hi_i; i++)
        if (l[i] >= thr)
            part += l[i];
    sm_val[threadIdx.x] = part;
    __syncthreads();
    if (threadIdx.x == 0) {
        float acc = 0.0f;
        int t = 0;
        for (; t < (int)blockDim.x - 1; t++) {
            if (acc + sm_val[t] > u)
                break;
            acc += sm_val[t];
        }
        int pick = argmax;
        int a = t * per, b = min(vocab, a + per);
        for (int i = a; i < b; i++)
            if (l[i] >= thr) {
                acc += l[i];
                pick = i;
                if (acc > u)
                    break;
            }
        out_ids[s] = pick;
    }
}

extern "C" int srt_cuda_launch_sample(float *logits, int n_seqs, int vocab,
                               const srt_cuda_sampling *params, const int32_t *counts,
                               void *workspace, int32_t *out_ids, void *stream)
{
    (void)workspace;
    if (n_seqs <= 0)
        return 0;
    sample_kernel<<<n_seqs, SAMPLE_THREADS, 0, SRT_STREAM(stream)>>>(logits, vocab, params, counts,
                                                                     out_ids);
    return launch_status();
}
