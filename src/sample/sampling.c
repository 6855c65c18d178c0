/* Logits processing and sampling (see srt/sampling.h for the order of steps). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "srt/sampling.h"

struct srt_sampler_ws {
    int32_t  vocab;
    float   *raw;      /* copy of the raw logits, for logprobs */
    float   *prob;     /* candidate probabilities */
    int32_t *id;       /* candidate token ids */
    int32_t *count;    /* per-token output counts, kept all-zero between calls */
    uint8_t *seen;     /* per-token marks, kept all-zero between calls */
};

void srt_sampling_params_default(srt_sampling_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
    p->max_tokens = 16;
}

int srt_sampling_params_check(const srt_sampling_params *p, int32_t vocab, srt_err *err)
{
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return srt_err_set(err, "temperature must be a finite number >= 0 (got %g)", p->temperature);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return srt_err_set(err, "top_p must be in (0, 1] (got %g)", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return srt_err_set(err, "min_p must be in [0, 1] (got %g)", p->min_p);
    if (p->top_k < -1)
        return srt_err_set(err, "top_k must be -1, 0 (off) or positive (got %d)", p->top_k);
    if (!(p->repetition_penalty > 0) || !isfinite(p->repetition_penalty))
        return srt_err_set(err, "repetition_penalty must be > 0 (got %g)", p->repetition_penalty);
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return srt_err_set(err, "frequency_penalty must be in [-2, 2] (got %g)", p->frequency_penalty);
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return srt_err_set(err, "presence_penalty must be in [-2, 2] (got %g)", p->presence_penalty);
    if (p->max_tokens <= 0)
        return srt_err_set(err, "max_tokens must be positive (got %d)", p->max_tokens);
    if (p->min_tokens < 0 || p->min_tokens > p->max_tokens)
        return srt_err_set(err, "min_tokens must be in [0, max_tokens] (got %d)", p->min_tokens);
    if (p->n_stop_ids < 0 || p->n_stop_ids > SRT_REQ_MAX_STOP_IDS)
        return srt_err_set(err, "at most %d stop_token_ids", SRT_REQ_MAX_STOP_IDS);
    for (int32_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] < 0 || p->stop_ids[i] >= vocab)
            return srt_err_set(err, "stop_token_ids[%d] = %d is outside the vocabulary [0, %d)", i, p->stop_ids[i], vocab);
    if (p->n_logit_bias < 0 || p->n_logit_bias > SRT_REQ_MAX_LOGIT_BIAS)
        return srt_err_set(err, "at most %d logit_bias entries", SRT_REQ_MAX_LOGIT_BIAS);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        if (p->logit_bias_ids[i] < 0 || p->logit_bias_ids[i] >= vocab)
            return srt_err_set(err, "logit_bias token %d is outside the vocabulary [0, %d)", p->logit_bias_ids[i], vocab);
        if (!(p->logit_bias[i] >= -100 && p->logit_bias[i] <= 100))
            return srt_err_set(err, "logit_bias value for token %d must be in [-100, 100]", p->logit_bias_ids[i]);
    }
    if (p->top_logprobs < 0 || p->top_logprobs > SRT_REQ_MAX_TOP_LOGPROBS)
        return srt_err_set(err, "top_logprobs must be in [0, %d] (got %d)", SRT_REQ_MAX_TOP_LOGPROBS, p->top_logprobs);
    return SRT_OK;
}

static int32_t clamp_count(int32_t n, int32_t max)
{
    return n < 0 ? 0 : n > max ? max : n;
}

void srt_sampling_params_clamp(srt_sampling_params *p)
{
    p->n_stop_ids = clamp_count(p->n_stop_ids, SRT_REQ_MAX_STOP_IDS);
    p->n_logit_bias = clamp_count(p->n_logit_bias, SRT_REQ_MAX_LOGIT_BIAS);
    p->top_logprobs = clamp_count(p->top_logprobs, SRT_REQ_MAX_TOP_LOGPROBS);
}

srt_sampler_ws *srt_sampler_ws_create(int32_t vocab)
{
    if (vocab <= 0)
        return NULL;
    srt_sampler_ws *ws = calloc(1, sizeof *ws);
    if (!ws)
        return NULL;
    ws->vocab = vocab;
    ws->raw = malloc((size_t)vocab * sizeof(float));
    ws->prob = malloc((size_t)vocab * sizeof(float));
    ws->id = malloc((size_t)vocab * sizeof(int32_t));
    ws->count = calloc((size_t)vocab, sizeof(int32_t));
    ws->seen = calloc((size_t)vocab, 1);
    if (!ws->raw || !ws->prob || !ws->id || !ws->count || !ws->seen) {
        srt_sampler_ws_free(ws);
        return NULL;
    }
    return ws;
}

void srt_sampler_ws_free(srt_sampler_ws *ws)
{
    if (!ws)
        return;
    free(ws->raw);
    free(ws->prob);
    free(ws->id);
    free(ws->count);
    free(ws->seen);
    free(ws);
}

/* xoshiro256** seeded through splitmix64 */
static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t *s)
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

int srt_sampler_init(srt_sampler *s, const srt_sampling_params *p, int32_t vocab, const int32_t *eos,
                     int32_t n_eos, const int32_t *prompt, int32_t n_prompt, srt_err *err)
{
    memset(s, 0, sizeof *s);
    if (srt_sampling_params_check(p, vocab, err) != SRT_OK)
        return SRT_ERROR;
    if (n_prompt < 0 || n_eos < 0 || n_eos > 8)
        return srt_err_set(err, "sampler: bad prompt or EOS count");
    s->p = *p;
    s->vocab_size = vocab;
    s->n_eos = n_eos;
    for (int32_t i = 0; i < n_eos; i++)
        s->eos_ids[i] = eos[i];
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix(&x);
    s->cap_history = n_prompt + p->max_tokens;
    s->history = malloc((size_t)(s->cap_history ? s->cap_history : 1) * sizeof(int32_t));
    if (!s->history)
        return srt_err_set(err, "sampler: out of memory");
    for (int32_t i = 0; i < n_prompt; i++) {
        if (prompt[i] < 0 || prompt[i] >= vocab) {
            srt_sampler_free(s);
            return srt_err_set(err, "sampler: prompt token %d is outside the vocabulary", prompt[i]);
        }
        s->history[i] = prompt[i];
    }
    s->n_prompt = s->n_history = n_prompt;
    return SRT_OK;
}

void srt_sampler_free(srt_sampler *s)
{
    free(s->history);
    s->history = NULL;
}

static void apply_penalties(srt_sampler *s, srt_sampler_ws *ws, float *logits)
{
    const srt_sampling_params *p = &s->p;
    if (p->repetition_penalty != 1.0f) {
        for (int32_t i = 0; i < s->n_history; i++) {
            int32_t t = s->history[i];
            if (ws->seen[t])
                continue;
            ws->seen[t] = 1;
            logits[t] = logits[t] > 0 ? logits[t] / p->repetition_penalty : logits[t] * p->repetition_penalty;
        }
        for (int32_t i = 0; i < s->n_history; i++)
            ws->seen[s->history[i]] = 0;
    }
    if (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) {
        for (int32_t i = s->n_prompt; i < s->n_history; i++)
            ws->count[s->history[i]]++;
        for (int32_t i = s->n_prompt; i < s->n_history; i++) {
            int32_t t = s->history[i];
            if (ws->count[t] == 0)
                continue;
            logits[t] -= (float)ws->count[t] * p->frequency_penalty + p->presence_penalty;
            ws->count[t] = 0;
        }
    }
}

static int is_eos(const srt_sampler *s, int32_t t)
{
    for (int32_t i = 0; i < s->n_eos; i++)
        if (s->eos_ids[i] == t)
            return 1;
    return 0;
}

static int is_stop(const srt_sampler *s, int32_t t)
{
    for (int32_t i = 0; i < s->p.n_stop_ids; i++)
        if (s->p.stop_ids[i] == t)
            return 1;
    return 0;
}

/* Moves the k largest of v[0..n) (with their ids) to the front. */
static void select_top(float *v, int32_t *id, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        float pivot = v[lo + (hi - lo) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] > pivot) i++;
            while (v[j] < pivot) j--;
            if (i <= j) {
                float tv = v[i]; v[i] = v[j]; v[j] = tv;
                int32_t ti = id[i]; id[i] = id[j]; id[j] = ti;
                i++;
                j--;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

/* Sorts candidates by value, descending; ties by id for determinism. */
static void sort_desc(float *v, int32_t *id, int32_t n)
{
    /* insertion sort for the small sets top_k/top_p usually leave, shell gaps otherwise */
    static const int32_t gaps[] = { 8861, 3938, 1750, 701, 301, 132, 57, 23, 10, 4, 1 };
    for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
        int32_t gap = gaps[g];
        for (int32_t i = gap; i < n; i++) {
            float tv = v[i];
            int32_t ti = id[i], j = i;
            while (j >= gap && (v[j - gap] < tv || (v[j - gap] == tv && id[j - gap] > ti))) {
                v[j] = v[j - gap];
                id[j] = id[j - gap];
                j -= gap;
            }
            v[j] = tv;
            id[j] = ti;
        }
    }
}

/* Smallest prefix (by descending probability) whose mass reaches need; partitions in
 * place and returns its length. Expected linear time. */
static int32_t select_mass(float *pr, int32_t *id, int32_t n, double need)
{
    int32_t lo = 0, hi = n;
    while (hi - lo > 1) {
        float pivot = pr[lo + (hi - lo) / 2];
        /* three-way partition of [lo, hi): > pivot, == pivot, < pivot */
        int32_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            if (pr[i] > pivot) {
                float tv = pr[i]; pr[i] = pr[lt]; pr[lt] = tv;
                int32_t ti = id[i]; id[i] = id[lt]; id[lt] = ti;
                lt++;
                i++;
            } else if (pr[i] < pivot) {
                gt--;
                float tv = pr[i]; pr[i] = pr[gt]; pr[gt] = tv;
                int32_t ti = id[i]; id[i] = id[gt]; id[gt] = ti;
            } else
                i++;
        }
        double m_gt = 0;
        for (int32_t j = lo; j < lt; j++)
            m_gt += pr[j];
        if (m_gt >= need) {
            hi = lt;
            continue;
        }
        double m_eq = (double)pivot * (gt - lt);
        if (m_gt + m_eq >= need) {
            int32_t take = (int32_t)ceil((need - m_gt) / pivot);
            if (take < 1)
                take = 1;
            return lt + (take < gt - lt ? take : gt - lt);
        }
        need -= m_gt + m_eq;
        lo = gt;
        if (lo >= n)
            return n;
    }
    return hi;
}

/*
 * The first index of the largest value, NaNs never chosen (unless v[0] is
 * one), as the plain "v[i] > best" loop gives.  That loop is a chain of
 * dependent compares, about 4 cycles an element: over a 49k vocabulary it
 * was 5.8% of all CPU samples of bench_http at concurrency 4.  Eight
 * independent maxima first (no index to carry, so the compiler may use
 * vector max), then the first element equal to their maximum.
 */
int32_t srt_argmax(const float *v, int32_t n)
{
    float m[8], best;
    int32_t i;

    if (n <= 1 || v[0] != v[0])
        return 0;
    for (int j = 0; j < 8; j++)
        m[j] = v[0];
    for (i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            m[j] = v[i + j] > m[j] ? v[i + j] : m[j];
    for (; i < n; i++)
        m[0] = v[i] > m[0] ? v[i] : m[0];
    best = m[0];
    for (int j = 1; j < 8; j++)
        best = m[j] > best ? m[j] : best;
    for (i = 0; v[i] != best; i++)
        ;
    return i;
}

int srt_sampler_sample(srt_sampler *s, srt_sampler_ws *ws, float *logits, srt_sample_result *res)
{
    const srt_sampling_params *p = &s->p;
    int32_t V = s->vocab_size;
    memset(res, 0, sizeof *res);
    if (s->finished || s->n_history >= s->cap_history || ws->vocab < V)
        return SRT_ERROR;
    int want_lp = p->logprobs || p->top_logprobs > 0;
    if (want_lp)
        memcpy(ws->raw, logits, (size_t)V * sizeof(float));

    apply_penalties(s, ws, logits);
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        logits[p->logit_bias_ids[i]] += p->logit_bias[i];
    if (s->n_generated < p->min_tokens) {
        for (int32_t i = 0; i < s->n_eos; i++)
            if (s->eos_ids[i] >= 0 && s->eos_ids[i] < V)
                logits[s->eos_ids[i]] = -INFINITY;
        for (int32_t i = 0; i < p->n_stop_ids; i++)
            logits[p->stop_ids[i]] = -INFINITY;
    }

    int32_t tok = 0;
    if (p->temperature == 0.0f || p->top_k == 1) {
        tok = srt_argmax(logits, V);
    } else {
        float *pr = ws->prob;
        int32_t *id = ws->id, n = V;
        float inv_t = 1.0f / p->temperature;
        for (int32_t i = 0; i < V; i++) {
            pr[i] = logits[i] * inv_t;
            id[i] = i;
        }
        int sorted = 0;
        if (p->top_k > 0 && p->top_k < n) {
            select_top(pr, id, n, p->top_k);
            n = p->top_k;
            sort_desc(pr, id, n);
            sorted = 1;
        }
        float mx = -INFINITY;
        for (int32_t i = 0; i < n; i++)
            if (pr[i] > mx)
                mx = pr[i];
        double sum = 0;
        for (int32_t i = 0; i < n; i++) {
            pr[i] = expf(pr[i] - mx);
            sum += pr[i];
        }
        if (p->top_p < 1.0f) {
            int32_t keep = sorted ? n : select_mass(pr, id, n, (double)p->top_p * sum);
            if (sorted) {
                double c = 0, need = (double)p->top_p * sum;
                for (keep = 0; keep < n && c < need; keep++)
                    c += pr[keep];
            }
            n = keep < 1 ? 1 : keep;
            if (!sorted) {
                sort_desc(pr, id, n);
                sorted = 1;
            }
        }
        if (p->min_p > 0.0f) {
            /* mx's probability is exp(0) = 1 relative to the others */
            int32_t m = 0;
            for (int32_t i = 0; i < n; i++)
                if (pr[i] >= p->min_p) {
                    pr[m] = pr[i];
                    id[m] = id[i];
                    m++;
                }
            n = m;
        }
        sum = 0;
        for (int32_t i = 0; i < n; i++)
            sum += pr[i];
        double u = rng_uniform(s->rng) * sum, c = 0;
        tok = id[n - 1];
        for (int32_t i = 0; i < n; i++) {
            c += pr[i];
            if (u < c) {
                tok = id[i];
                break;
            }
        }
    }

    if (want_lp) {
        float mx = -INFINITY;
        for (int32_t i = 0; i < V; i++)
            if (ws->raw[i] > mx)
                mx = ws->raw[i];
        double sum = 0;
        for (int32_t i = 0; i < V; i++)
            sum += exp((double)(ws->raw[i] - mx));
        float lse = mx + (float)log(sum);
        res->logprob = ws->raw[tok] - lse;
        int32_t k = p->top_logprobs;
        for (int32_t i = 0; i < V && k > 0; i++) {
            float v = ws->raw[i];
            int32_t n = res->n_top;
            if (n == k && v <= ws->raw[res->top_ids[n - 1]])
                continue;
            int32_t j = n < k ? n++ : n - 1;
            while (j > 0 && ws->raw[res->top_ids[j - 1]] < v) {
                res->top_ids[j] = res->top_ids[j - 1];
                j--;
            }
            res->top_ids[j] = i;
            res->n_top = n;
        }
        for (int32_t i = 0; i < res->n_top; i++)
            res->top_logprobs[i] = ws->raw[res->top_ids[i]] - lse;
    }

    res->token = tok;
    s->history[s->n_history++] = tok;
    s->n_generated++;
    if (is_stop(s, tok) || (!p->ignore_eos && is_eos(s, tok)))
        s->finished = SRT_FINISH_STOP;
    else if (s->n_generated >= p->max_tokens)
        s->finished = SRT_FINISH_LENGTH;
    res->finish = s->finished;
    return SRT_OK;
}

int srt_sampler_replace_tail(srt_sampler *s, int32_t n_drop, const int32_t *ids, int32_t n)
{
    if (n_drop < 0 || n_drop > s->n_generated || n < 0 || s->n_history - n_drop + n > s->cap_history)
        return SRT_ERROR;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->vocab_size)
            return SRT_ERROR;
    s->n_history -= n_drop;
    s->n_generated -= n_drop;
    s->finished = 0;
    for (int32_t i = 0; i < n; i++) {
        s->history[s->n_history++] = ids[i];
        s->n_generated++;
        /* the same rule as a drawn token's: a stop or EOS among them ends the request */
        if (is_stop(s, ids[i]) || (!s->p.ignore_eos && is_eos(s, ids[i])))
            s->finished = SRT_FINISH_STOP;
    }
    if (!s->finished && s->n_generated >= s->p.max_tokens)
        s->finished = SRT_FINISH_LENGTH;
    return SRT_OK;
}
