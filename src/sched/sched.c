/* Scheduler core: request pool, waiting queue, running set, one step at a time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/kv_alloc.h"
#include "cache/radix_cache.h"
#include "srt/grammar.h"
#include "srt/sampling.h"
#include "srt/sched.h"
#include "srt/tokenizer.h"
#include "srt_hooks.h"

#define LPM_MAX_WAITING      128
#define DEFAULT_PREFILL      16384
#define NEW_TOKEN_RATIO_INIT 0.7
#define NEW_TOKEN_RATIO_MIN  0.1
#define NEW_TOKEN_RATIO_STEP 0.001
/* Jump-forward: forced bytes taken at once (longer runs continue at the next step), and the
 * longest drawn token whose bytes are retokenized with them. */
#define JF_MAX_FORCED        256
#define JF_MAX_TOKEN         256

const double srt_sched_hist_bounds[SRT_SCHED_HIST_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0,
};

enum { REQ_FREE = 0, REQ_WAITING, REQ_RUNNING };

typedef struct sreq {
    uint64_t          id, group;
    int               state;
    int               aborted;
    int32_t          *tokens;        /* prompt then output; capacity context_length */
    int32_t           n_prompt, n_output;
    int32_t           max_new;
    int32_t           kv_len;        /* tokens whose KV is computed (== slots held in row) */
    int32_t           row;           /* req_to_token row, -1 when waiting */
    srt_cache_req     cr;
    int32_t           cached_tokens;
    int               admitted_once;
    int               own_prefix;    /* computes its whole prompt (submit's own_prefix) */
    srt_sampling_params sp;          /* clamped; min_tokens capped at max_new */
    srt_sampler       smp;           /* built-in sampler state (prompt + output history) */
    srt_grammar_matcher *gm;         /* structured output: where the output is in its grammar */
    const srt_tokenizer *jf_tok;     /* jump-forward with this tokenizer, or NULL */
    int               has_smp;
    uint64_t          rng;
    uint64_t          admit_order, arrival_order;
    double            t_arrival, t_first, t_last;
    /* this step */
    int32_t           ext;           /* new tokens in the batch */
    int32_t           samples;       /* 1 if its last batch token gets logits */
    int32_t           peek;          /* lpm key */
} sreq;

struct srt_sched {
    srt_sched_config  cfg;
    srt_sched_runner  runner;
    srt_kv_alloc      kv;
    srt_req_to_token  r2t;
    srt_radix_cache   cache;
    int32_t           prefill_budget;

    int32_t           pool_n;
    sreq             *pool;
    int32_t          *pool_free;
    int32_t           n_pool_free;
    int32_t          *tok_storage;

    int32_t          *waiting;       /* pool indices in queue order */
    int32_t           n_waiting;
    int32_t          *running;       /* pool indices in admission order */
    int32_t           n_running;

    /* batch scratch, sized at create */
    int32_t           max_batch_tokens, max_seqs;
    int32_t          *b_tokens, *b_pos, *b_slots, *b_seq_start, *b_seq_len, *b_logit_rows;
    const int32_t   **b_seq_slots;
    uint64_t         *b_req_ids;
    int32_t          *b_seq_req;
    int32_t           b_n_seqs;
    float            *logits;
    int32_t          *sampled;
    float            *logprobs;
    srt_sched_sample_seq *sseqs;
    int32_t          *row_req;       /* pool index of each logit row */
    uint32_t         *gmask;         /* a grammar's token mask */
    size_t            gmask_words;
    char              jf_text[JF_MAX_TOKEN + JF_MAX_FORCED];
    int32_t           jf_ids[JF_MAX_TOKEN + JF_MAX_FORCED];
    srt_sample_result *results;
    srt_sampler_ws   *ws;

    srt_sched_event  *events;
    int               n_events, cap_events;

    const srt_sample_result *cur_result;   /* top logprobs for the event being emitted */
    double            new_token_ratio, ratio_init, ratio_min;
    uint64_t          admit_counter, arrival_counter;
    srt_sched_metrics m;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void hist_add(srt_sched_hist *h, double v)
{
    int b = 0;
    while (b < SRT_SCHED_HIST_BUCKETS && v > srt_sched_hist_bounds[b])
        b++;
    h->count[b]++;
    h->n++;
    h->sum += v;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---------------- create / free ---------------- */

int32_t srt_sched_max_batch_tokens(const srt_sched_config *cfg)
{
    int32_t budget = cfg->chunked_prefill_size > 0 ? cfg->chunked_prefill_size
                   : cfg->max_prefill_tokens > 0 ? cfg->max_prefill_tokens : DEFAULT_PREFILL;
    return budget + cfg->max_running_requests;
}

int srt_sched_create(const srt_sched_config *cfg, const srt_sched_runner *runner,
                     srt_sched **out, srt_err *err)
{
    srt_sched *s;

    *out = NULL;
    if (cfg->max_running_requests < 1 || cfg->max_running_requests > 65536)
        return srt_err_set(err, "max_running_requests %d out of range [1, 65536]", cfg->max_running_requests);
    if (cfg->max_queued_requests < 0 || cfg->max_queued_requests > 1 << 20)
        return srt_err_set(err, "max_queued_requests %d out of range", cfg->max_queued_requests);
    if (cfg->context_length < 2)
        return srt_err_set(err, "context_length %d too small", cfg->context_length);
    if (cfg->vocab_size < 1)
        return srt_err_set(err, "vocab_size %d invalid", cfg->vocab_size);
    if (cfg->n_eos < 0 || cfg->n_eos > 8)
        return srt_err_set(err, "n_eos %d out of range [0, 8]", cfg->n_eos);
    if (!runner || !runner->forward)
        return srt_err_set(err, "scheduler needs a runner with a forward function");
    s = calloc(1, sizeof *s);
    if (!s)
        return srt_err_set(err, "out of memory");
    s->cfg = *cfg;
    s->runner = *runner;
    if (s->cfg.policy != SRT_SCHED_LPM)
        s->cfg.policy = SRT_SCHED_FCFS;
    s->prefill_budget = srt_sched_max_batch_tokens(cfg) - cfg->max_running_requests;
    if (s->cfg.schedule_conservativeness <= 0)
        s->cfg.schedule_conservativeness = 1.0f;
    s->ratio_init = fmin(1.0, NEW_TOKEN_RATIO_INIT * s->cfg.schedule_conservativeness);
    s->ratio_min = fmin(s->ratio_init, NEW_TOKEN_RATIO_MIN * s->cfg.schedule_conservativeness);
    s->new_token_ratio = s->ratio_init;

    if (srt_kv_alloc_init(&s->kv, cfg->max_total_tokens, cfg->page_size < 1 ? 1 : cfg->page_size, err) != SRT_OK)
        goto fail;
    if (srt_req_to_token_init(&s->r2t, cfg->max_running_requests, cfg->context_length, err) != SRT_OK)
        goto fail;
    if (srt_radix_init(&s->cache, &s->kv, !cfg->radix_cache, err) != SRT_OK)
        goto fail;

    s->pool_n = cfg->max_running_requests + cfg->max_queued_requests;
    s->max_batch_tokens = srt_sched_max_batch_tokens(cfg);
    s->max_seqs = cfg->max_running_requests;
    s->cap_events = s->pool_n + 1;
    s->pool = calloc((size_t)s->pool_n, sizeof(sreq));
    s->pool_free = malloc(sizeof(int32_t) * (size_t)s->pool_n);
    s->tok_storage = malloc(sizeof(int32_t) * (size_t)s->pool_n * (size_t)cfg->context_length);
    s->waiting = malloc(sizeof(int32_t) * (size_t)s->pool_n);
    s->running = malloc(sizeof(int32_t) * (size_t)s->max_seqs);
    s->b_tokens = malloc(sizeof(int32_t) * (size_t)s->max_batch_tokens);
    s->b_pos = malloc(sizeof(int32_t) * (size_t)s->max_batch_tokens);
    s->b_slots = malloc(sizeof(int32_t) * (size_t)s->max_batch_tokens);
    s->b_req_ids = malloc(sizeof(uint64_t) * (size_t)s->max_batch_tokens);
    s->b_seq_start = malloc(sizeof(int32_t) * (size_t)(s->max_seqs + 1));
    s->b_seq_len = malloc(sizeof(int32_t) * (size_t)s->max_seqs);
    s->b_logit_rows = malloc(sizeof(int32_t) * (size_t)s->max_seqs);
    s->b_seq_slots = malloc(sizeof(int32_t *) * (size_t)s->max_seqs);
    s->b_seq_req = malloc(sizeof(int32_t) * (size_t)s->max_seqs);
    s->logits = malloc(sizeof(float) * (size_t)s->max_seqs * (size_t)cfg->vocab_size);
    s->sampled = malloc(sizeof(int32_t) * (size_t)s->max_seqs);
    s->logprobs = malloc(sizeof(float) * (size_t)s->max_seqs);
    s->sseqs = malloc(sizeof(srt_sched_sample_seq) * (size_t)s->max_seqs);
    s->row_req = malloc(sizeof(int32_t) * (size_t)s->max_seqs);
    s->results = malloc(sizeof(srt_sample_result) * (size_t)s->max_seqs);
    s->ws = srt_sampler_ws_create(cfg->vocab_size);
    s->events = malloc(sizeof(srt_sched_event) * (size_t)s->cap_events);
    if (!s->pool || !s->pool_free || !s->tok_storage || !s->waiting || !s->running ||
        !s->b_tokens || !s->b_pos || !s->b_slots || !s->b_req_ids || !s->b_seq_start ||
        !s->b_seq_len || !s->b_logit_rows || !s->b_seq_slots || !s->b_seq_req || !s->logits ||
        !s->sampled || !s->logprobs || !s->sseqs || !s->events || !s->row_req || !s->results || !s->ws) {
        srt_err_set(err, "out of memory for a scheduler of %d requests", s->pool_n);
        goto fail;
    }
    for (int32_t i = 0; i < s->pool_n; i++) {
        s->pool[i].tokens = s->tok_storage + (int64_t)i * cfg->context_length;
        s->pool[i].row = -1;
        s->pool_free[i] = s->pool_n - 1 - i;
    }
    s->n_pool_free = s->pool_n;
    s->m.kv_total_tokens = srt_kv_total_tokens(&s->kv);
    *out = s;
    return SRT_OK;
fail:
    srt_sched_free(s);
    return SRT_ERROR;
}

void srt_sched_free(srt_sched *s)
{
    if (!s)
        return;
    srt_radix_destroy(&s->cache);
    srt_req_to_token_destroy(&s->r2t);
    srt_kv_alloc_destroy(&s->kv);
    free(s->pool_free); free(s->tok_storage); free(s->waiting); free(s->running);
    free(s->b_tokens); free(s->b_pos); free(s->b_slots); free(s->b_req_ids); free(s->b_seq_start);
    free(s->b_seq_len); free(s->b_logit_rows); free(s->b_seq_slots); free(s->b_seq_req);
    free(s->logits); free(s->sampled); free(s->logprobs); free(s->sseqs); free(s->events);
    free(s->row_req); free(s->results); free(s->gmask);
    srt_sampler_ws_free(s->ws);
    if (s->pool)
        for (int32_t i = 0; i < s->pool_n; i++)
            if (s->pool[i].has_smp) {
                srt_sampler_free(&s->pool[i].smp);
                srt_grammar_matcher_free(s->pool[i].gm);
            }
    free(s->pool);
    free(s);
}

/* ---------------- submit / abort ---------------- */

static sreq *find_live(srt_sched *s, uint64_t id)
{
    for (int32_t i = 0; i < s->pool_n; i++)
        if (s->pool[i].state != REQ_FREE && s->pool[i].id == id)
            return &s->pool[i];
    return NULL;
}

srt_sched_submit_status srt_sched_submit(srt_sched *s, const srt_sched_submit_args *a, srt_err *err)
{
    int32_t ctx = s->cfg.context_length;

    if (!a->prompt || a->n_prompt < 1) {
        srt_err_set(err, "empty prompt");
        return SRT_SCHED_SUBMIT_INVALID;
    }
    if (a->n_prompt >= ctx) {
        srt_err_set(err, "prompt of %d tokens leaves no room in the context of %d", a->n_prompt, ctx);
        return SRT_SCHED_SUBMIT_INVALID;
    }
    if ((int64_t)a->n_prompt + 1 > srt_kv_total_tokens(&s->kv)) {
        srt_err_set(err, "prompt of %d tokens exceeds the KV budget of %lld tokens", a->n_prompt,
                    (long long)srt_kv_total_tokens(&s->kv));
        return SRT_SCHED_SUBMIT_INVALID;
    }
    for (int32_t i = 0; i < a->n_prompt; i++)
        if (a->prompt[i] < 0 || a->prompt[i] >= s->cfg.vocab_size) {
            srt_err_set(err, "prompt token %d at position %d is outside the vocabulary of %d",
                        a->prompt[i], i, s->cfg.vocab_size);
            return SRT_SCHED_SUBMIT_INVALID;
        }
    if (find_live(s, a->id)) {
        srt_err_set(err, "request id %llu is already live", (unsigned long long)a->id);
        return SRT_SCHED_SUBMIT_INVALID;
    }
    if (s->n_waiting >= s->cfg.max_queued_requests || s->n_pool_free == 0) {
        s->m.requests_rejected++;
        srt_err_set(err, "the queue is full (%d waiting)", s->n_waiting);
        return SRT_SCHED_SUBMIT_FULL;
    }
    srt_sampling_params sp;
    if (a->sampling) {
        sp = *a->sampling;   /* may come from shared memory: clamp what indexes arrays */
        srt_sampling_params_clamp(&sp);
        if (!sp.has_seed)
            sp.seed = a->id * 0x9e3779b97f4a7c15ull + s->arrival_counter;
    } else {
        srt_sampling_params_default(&sp);
        sp.temperature = 0;
    }
    if (sp.max_tokens > ctx - a->n_prompt)
        sp.max_tokens = ctx - a->n_prompt;
    int zero_tokens = sp.max_tokens <= 0;
    if (zero_tokens)
        sp.max_tokens = 1;   /* the sampler wants one; the request finishes before sampling */
    if (sp.min_tokens > sp.max_tokens)
        sp.min_tokens = sp.max_tokens;

    sreq *r = &s->pool[s->pool_free[s->n_pool_free - 1]];
    int32_t *tokens = r->tokens;
    memset(r, 0, sizeof *r);
    r->tokens = tokens;
    if (srt_sampler_init(&r->smp, &sp, s->cfg.vocab_size, s->cfg.eos_ids, s->cfg.n_eos,
                         a->prompt, a->n_prompt, err) != SRT_OK)
        return SRT_SCHED_SUBMIT_INVALID;
    r->has_smp = 1;
    if (a->grammar) {
        r->gm = srt_grammar_matcher_new(a->grammar);
        if (r->gm == NULL) {
            srt_sampler_free(&r->smp);
            r->has_smp = 0;
            srt_err_set(err, "out of memory for the grammar matcher");
            return SRT_SCHED_SUBMIT_INVALID;
        }
    }
    s->n_pool_free--;
    r->tokens = tokens;
    r->id = a->id;
    r->group = a->group;
    r->state = REQ_WAITING;
    r->row = -1;
    r->cr.last_node = SRT_RADIX_NONE;
    r->cr.ns = a->cache_ns;
    if (a->own_prefix) {
        /* a namespace of its own: nothing cached by another request matches, only what it
         * computed itself before a retraction */
        r->own_prefix = 1;
        r->cr.ns = (a->id * 0x9e3779b97f4a7c15ull) ^ (s->arrival_counter << 1) ^ 0x8000000000000001ull;
    }
    memcpy(r->tokens, a->prompt, sizeof(int32_t) * (size_t)a->n_prompt);
    r->n_prompt = a->n_prompt;
    r->sp = sp;
    r->max_new = zero_tokens ? 0 : sp.max_tokens;
    /* a forced token has no logprob the model computed: such requests decode step by step */
    r->jf_tok = r->gm && !sp.logprobs && sp.top_logprobs <= 0 ? a->jump_forward : NULL;
    uint64_t seed = r->sp.has_seed ? r->sp.seed : a->id ^ (++s->arrival_counter << 32);
    r->rng = splitmix64(&seed);
    r->arrival_order = ++s->arrival_counter;
    r->t_arrival = now_s();
    s->waiting[s->n_waiting++] = (int32_t)(r - s->pool);
    return SRT_SCHED_SUBMIT_OK;
}

int srt_sched_abort(srt_sched *s, uint64_t id)
{
    sreq *r = find_live(s, id);
    if (!r)
        return 0;
    r->aborted = 1;
    return 1;
}

/* ---------------- helpers ---------------- */

static inline int32_t n_known(const sreq *r) { return r->n_prompt + r->n_output; }
static inline int decoding(const sreq *r) { return r->kv_len == n_known(r) - 1; }

static srt_sched_event *emit(srt_sched *s, sreq *r, int32_t token, float lp, srt_finish_reason fin,
                             int32_t stop_id)
{
    if (s->n_events >= s->cap_events) {
        /* one event per live request and step, more with jump-forward */
        srt_sched_event *ev = realloc(s->events, sizeof *ev * (size_t)s->cap_events * 2);
        if (!ev)
            return NULL;
        s->events = ev;
        s->cap_events *= 2;
    }
    srt_sched_event *e = &s->events[s->n_events++];
    e->id = r->id;
    e->token = token;
    e->logprob = lp;
    e->finish = fin;
    e->stop_id = stop_id;
    e->n_prompt = r->n_prompt;
    e->n_output = r->n_output;
    e->cached_tokens = r->cached_tokens;
    e->n_top = 0;
    if (token >= 0 && s->cur_result && s->cur_result->n_top > 0) {
        e->n_top = s->cur_result->n_top;
        memcpy(e->top_ids, s->cur_result->top_ids, sizeof(int32_t) * (size_t)e->n_top);
        memcpy(e->top_logprobs, s->cur_result->top_logprobs, sizeof(float) * (size_t)e->n_top);
    }
    return e;
}

static void release_pool(srt_sched *s, sreq *r)
{
    if (r->has_smp)
        srt_sampler_free(&r->smp);
    r->has_smp = 0;
    srt_grammar_matcher_free(r->gm);
    r->gm = NULL;
    r->state = REQ_FREE;
    s->pool_free[s->n_pool_free++] = (int32_t)(r - s->pool);
}

static void remove_running(srt_sched *s, sreq *r)
{
    int32_t idx = (int32_t)(r - s->pool);
    for (int32_t i = 0; i < s->n_running; i++)
        if (s->running[i] == idx) {
            memmove(&s->running[i], &s->running[i + 1], sizeof(int32_t) * (size_t)(s->n_running - i - 1));
            s->n_running--;
            return;
        }
}

static void remove_waiting_at(srt_sched *s, int32_t i)
{
    memmove(&s->waiting[i], &s->waiting[i + 1], sizeof(int32_t) * (size_t)(s->n_waiting - i - 1));
    s->n_waiting--;
}

/* Gives the request's KV back: computed tokens go to the radix cache (reusable), or, when
 * the KV may be garbage (failed forward), are freed without caching. */
static void drop_kv(srt_sched *s, sreq *r, int cache_it)
{
    if (r->row < 0)
        return;
    if (cache_it) {
        if (srt_radix_cache_finished(&s->cache, r->tokens, r->kv_len, &r->cr) != SRT_OK)
            srt_log(SRT_LOG_ERROR, "sched: releasing the KV of request %llu failed",
                    (unsigned long long)r->id);
    } else {
        int32_t from = s->cache.disabled ? 0 : r->cr.prefix_len;
        if (r->kv_len > from)
            srt_kv_free_slots(&s->kv, r->cr.row + from, r->kv_len - from);
        if (r->cr.last_node != SRT_RADIX_NONE)
            srt_radix_dec_lock(&s->cache, r->cr.last_node);
        r->cr.last_node = SRT_RADIX_NONE;
        r->cr.prefix_len = 0;
    }
    srt_req_to_token_free(&s->r2t, r->row);
    r->row = -1;
    r->kv_len = 0;
}

static void finish_running(srt_sched *s, sreq *r, srt_finish_reason fin, int32_t stop_id,
                           int32_t token, float lp, int cache_it)
{
    drop_kv(s, r, cache_it);
    remove_running(s, r);
    emit(s, r, token, lp, fin, stop_id);
    if (fin == SRT_FINISH_ABORT)
        s->m.requests_aborted++;
    else
        s->m.requests_finished++;
    hist_add(&s->m.e2e, now_s() - r->t_arrival);
    release_pool(s, r);
}

/* Back to the queue: KV released into the cache (so the work is found again if it
 * survives eviction), and everything computed is re-prefilled at re-admission. */
static void retract(srt_sched *s, sreq *r)
{
    drop_kv(s, r, 1);
    remove_running(s, r);
    r->state = REQ_WAITING;
    memmove(&s->waiting[1], &s->waiting[0], sizeof(int32_t) * (size_t)s->n_waiting);
    s->waiting[0] = (int32_t)(r - s->pool);
    s->n_waiting++;
    s->m.retractions++;
    s->new_token_ratio = fmin(1.0, s->new_token_ratio + 0.3 * s->cfg.schedule_conservativeness);
    srt_log(SRT_LOG_DEBUG, "sched: retracted request %llu (%d tokens known)",
            (unsigned long long)r->id, n_known(r));
}

static sreq *newest_running(srt_sched *s, const sreq *except)
{
    sreq *best = NULL;
    for (int32_t i = 0; i < s->n_running; i++) {
        sreq *r = &s->pool[s->running[i]];
        if (r != except && (!best || r->admit_order > best->admit_order))
            best = r;
    }
    return best;
}

/* Makes need_pages free, evicting unlocked cache entries if needed. */
static int ensure_pages(srt_sched *s, int64_t need_pages)
{
    if (s->kv.n_free >= need_pages)
        return 1;
    srt_radix_evict(&s->cache, (need_pages - s->kv.n_free) * s->kv.page_size);
    return s->kv.n_free >= need_pages;
}

/* Most new tokens a sequence at kv_len can take from free pages (after eviction). */
static int32_t fit_tokens(srt_sched *s, int32_t kv_len, int32_t want)
{
    int32_t ps = s->kv.page_size;
    int32_t in_page = (ps - kv_len % ps) % ps;
    if (want <= in_page)
        return want;
    if (!ensure_pages(s, srt_kv_pages_needed(&s->kv, kv_len, want))) {
        /* ensure_pages evicted all it could */
        int64_t room = in_page + (int64_t)s->kv.n_free * ps;
        if (room < want)
            want = (int32_t)room;
    }
    return want;
}

static int64_t reserved_decode_tokens(srt_sched *s)
{
    double sum = 0;
    for (int32_t i = 0; i < s->n_running; i++) {
        sreq *r = &s->pool[s->running[i]];
        sum += (double)(r->max_new - r->n_output) * s->new_token_ratio;
    }
    return (int64_t)sum;
}

/* ---------------- one step ---------------- */

static void apply_aborts(srt_sched *s)
{
    for (int32_t i = s->n_running - 1; i >= 0; i--) {
        sreq *r = &s->pool[s->running[i]];
        if (r->aborted)
            finish_running(s, r, SRT_FINISH_ABORT, -1, -1, 0, 1);
    }
    for (int32_t i = s->n_waiting - 1; i >= 0; i--) {
        sreq *r = &s->pool[s->waiting[i]];
        if (!r->aborted && r->max_new > r->n_output)
            continue;
        remove_waiting_at(s, i);
        emit(s, r, -1, 0, r->aborted ? SRT_FINISH_ABORT : SRT_FINISH_LENGTH, -1);
        if (r->aborted)
            s->m.requests_aborted++;
        else
            s->m.requests_finished++;
        hist_add(&s->m.e2e, now_s() - r->t_arrival);
        release_pool(s, r);
    }
}

/* Room for one more token of every decoding request: evict, then retract the newest. */
static void reserve_decodes(srt_sched *s)
{
    for (;;) {
        int64_t need = 0;
        for (int32_t i = 0; i < s->n_running; i++) {
            sreq *r = &s->pool[s->running[i]];
            if (decoding(r))
                need += srt_kv_pages_needed(&s->kv, r->kv_len, 1);
        }
        if (ensure_pages(s, need))
            break;
        if (s->n_running <= 1) {
            /* One request alone fills the pool: it cannot grow, ever. */
            sreq *r = s->n_running ? &s->pool[s->running[0]] : NULL;
            if (r) {
                srt_log(SRT_LOG_WARN, "sched: request %llu outgrew the KV budget of %lld tokens",
                        (unsigned long long)r->id, (long long)srt_kv_total_tokens(&s->kv));
                finish_running(s, r, SRT_FINISH_LENGTH, -1, -1, 0, 1);
            }
            break;
        }
        retract(s, newest_running(s, NULL));
    }
    for (int32_t i = 0; i < s->n_running; i++) {
        sreq *r = &s->pool[s->running[i]];
        if (!decoding(r))
            continue;
        /* ensure_pages above guarantees this succeeds */
        if (srt_kv_alloc_extend(&s->kv, r->cr.row, r->kv_len, 1) != SRT_OK)
            continue;
        r->ext = 1;
        r->samples = 1;
        s->b_seq_req[s->b_n_seqs++] = s->running[i];
    }
}

static int32_t continue_prefills(srt_sched *s, int32_t budget)
{
    for (int32_t i = 0; i < s->n_running && budget > 0; i++) {
        sreq *r = &s->pool[s->running[i]];
        if (r->ext || decoding(r))
            continue;
        int32_t take = n_known(r) - r->kv_len;
        if (take > budget)
            take = budget;
        take = fit_tokens(s, r->kv_len, take);
        if (take <= 0 || srt_kv_alloc_extend(&s->kv, r->cr.row, r->kv_len, take) != SRT_OK)
            continue;
        r->ext = take;
        r->samples = r->kv_len + take == n_known(r);
        budget -= take;
        s->b_seq_req[s->b_n_seqs++] = s->running[i];
    }
    return budget;
}

/* A sibling of r (same n > 1 group) still computing the shared prompt: r waits for it. */
static sreq *group_sibling(srt_sched *s, const sreq *r, int want_prefilling)
{
    if (!r->group || r->own_prefix)
        return NULL;
    for (int32_t i = 0; i < s->n_running; i++) {
        sreq *g = &s->pool[s->running[i]];
        if (g->group != r->group || g->n_prompt != r->n_prompt ||
            memcmp(g->tokens, r->tokens, sizeof(int32_t) * (size_t)r->n_prompt) != 0)
            continue;   /* only a true sibling's KV may be shared */
        int prompt_done = g->kv_len >= g->n_prompt - 1;
        if (want_prefilling ? !prompt_done : prompt_done)
            return g;
    }
    return NULL;
}

/* In-batch prefix sharing (SGLang's in-batch prefix caching): a waiting request whose
 * uncached prefix is being computed right now by a running request waits a step or so for
 * it to reach the cache instead of computing it a second time. */
#define IN_BATCH_SHARE_MIN 32

static int prefix_in_flight(srt_sched *s, sreq *r, int32_t cached)
{
    int32_t known = n_known(r);
    for (int32_t i = 0; i < s->n_running; i++) {
        const sreq *g = &s->pool[s->running[i]];
        int32_t lim = known - 1 < g->n_prompt ? known - 1 : g->n_prompt, k = 0;
        if (g->cr.ns != r->cr.ns || g->kv_len >= lim || lim - cached <= IN_BATCH_SHARE_MIN)
            continue;
        while (k < lim && g->tokens[k] == r->tokens[k])
            k++;
        if (k - cached > IN_BATCH_SHARE_MIN && g->kv_len < k)
            return 1;
    }
    return 0;
}

static void order_waiting(srt_sched *s)
{
    if (s->cfg.policy != SRT_SCHED_LPM || s->n_waiting > LPM_MAX_WAITING || s->cache.disabled)
        return;
    for (int32_t i = 0; i < s->n_waiting; i++) {
        sreq *r = &s->pool[s->waiting[i]];
        r->peek = srt_radix_peek_prefix_ns(&s->cache, r->cr.ns, r->tokens, n_known(r) - 1);
    }
    /* stable insertion sort: longest cached prefix first, queue order among equals */
    for (int32_t i = 1; i < s->n_waiting; i++) {
        int32_t x = s->waiting[i], j = i - 1;
        while (j >= 0 && s->pool[s->waiting[j]].peek < s->pool[x].peek) {
            s->waiting[j + 1] = s->waiting[j];
            j--;
        }
        s->waiting[j + 1] = x;
    }
}

/* Requests passed over in one admission round (waiting for a prefix in flight) before the
 * round ends: bounds the scan of a long queue. */
#define MAX_DEFERRED 64

static void admit(srt_sched *s, int32_t budget)
{
    int deferred = 0;
    order_waiting(s);
    for (int32_t wi = 0; wi < s->n_waiting && budget > 0 && deferred < MAX_DEFERRED; ) {
        sreq *r = &s->pool[s->waiting[wi]];
        if (s->n_running >= s->cfg.max_running_requests || s->r2t.n_free == 0)
            break;
        if (group_sibling(s, r, 1)) {   /* share the prompt once a sibling has it */
            wi++;
            deferred++;
            continue;
        }
        int32_t known = n_known(r);
        if (s->n_running > 0) {
            int32_t cached = srt_radix_peek_prefix_ns(&s->cache, r->cr.ns, r->tokens, known - 1);
            if (!s->cache.disabled && prefix_in_flight(s, r, cached)) {
                wi++;
                deferred++;
                continue;
            }
            int64_t avail = srt_kv_free_tokens(&s->kv) + srt_radix_evictable_size(&s->cache)
                          - reserved_decode_tokens(s);
            int64_t need = (known - cached) + (int64_t)((r->max_new - r->n_output) * s->new_token_ratio);
            if (need > avail)
                break;
        }
        r->row = srt_req_to_token_alloc(&s->r2t);
        r->cr.row = srt_req_to_token_row(&s->r2t, r->row);
        int32_t matched;
        sreq *g = s->cache.disabled ? group_sibling(s, r, 0) : NULL;
        if (g) {
            /* radix off: share the sibling's whole prompt pages by reference */
            int32_t ps = s->kv.page_size;
            matched = (r->n_prompt - 1) / ps * ps;
            if (matched > g->kv_len / ps * ps)
                matched = g->kv_len / ps * ps;
            memcpy(r->cr.row, g->cr.row, sizeof(int32_t) * (size_t)matched);
            if (matched > 0 && srt_kv_ref_slots(&s->kv, r->cr.row, matched) != SRT_OK)
                matched = 0;
            r->cr.prefix_len = 0;
            r->cr.last_node = SRT_RADIX_NONE;
        } else {
            matched = srt_radix_match_req(&s->cache, r->tokens, known, &r->cr);
        }
        r->kv_len = matched;
        int32_t take = known - matched;
        if (take > budget)
            take = budget;
        take = fit_tokens(s, r->kv_len, take);
        if (take <= 0 || srt_kv_alloc_extend(&s->kv, r->cr.row, r->kv_len, take) != SRT_OK) {
            drop_kv(s, r, 0);
            break;
        }
        remove_waiting_at(s, wi);
        r->state = REQ_RUNNING;
        r->admit_order = ++s->admit_counter;
        r->ext = take;
        r->samples = r->kv_len + take == known;
        s->running[s->n_running++] = (int32_t)(r - s->pool);
        s->b_seq_req[s->b_n_seqs++] = (int32_t)(r - s->pool);
        budget -= take;
        if (!r->admitted_once) {
            r->admitted_once = 1;
            r->cached_tokens = matched;
            s->m.prompt_tokens_total += (uint64_t)r->n_prompt;
            s->m.cached_prompt_tokens_total += (uint64_t)matched;
        }
    }
}

static int check_stop(const srt_sched *s, const sreq *r, int32_t tok, int32_t *stop_id)
{
    *stop_id = -1;
    if (r->n_output >= r->sp.min_tokens) {
        for (int32_t i = 0; i < r->sp.n_stop_ids; i++)
            if (r->sp.stop_ids[i] == tok) {
                *stop_id = tok;
                return SRT_FINISH_STOP;
            }
        if (!r->sp.ignore_eos)
            for (int32_t i = 0; i < s->cfg.n_eos; i++)
                if (s->cfg.eos_ids[i] == tok) {
                    *stop_id = tok;
                    return SRT_FINISH_STOP;
                }
    }
    if (r->n_output >= r->max_new || n_known(r) >= s->cfg.context_length)
        return SRT_FINISH_LENGTH;
    return SRT_FINISH_NONE;
}

/* Structured output: a constrained row keeps only the logits of the tokens its grammar
 * allows, so the sampler, logprobs and top_logprobs all see the constrained distribution.
 * Unconstrained rows are never touched; a constrained row costs one mask (cached per grammar
 * state, see src/grammar/mask.c) and one pass over the row. */
static int apply_grammar(srt_sched *s, sreq *r, float *l)
{
    int32_t V = s->cfg.vocab_size;
    size_t  gw = srt_grammar_matcher_mask_words(r->gm), vw = ((size_t)V + 31) / 32;

    if (s->gmask == NULL || s->gmask_words < gw) {
        uint32_t *m = realloc(s->gmask, sizeof(uint32_t) * gw);
        if (m == NULL)
            return SRT_ERROR;
        s->gmask = m;
        s->gmask_words = gw;
    }
    srt_grammar_matcher_fill_mask(r->gm, s->gmask);
    for (size_t w = 0; w < vw; w++) {
        uint32_t bits = w < gw ? s->gmask[w] : 0;
        if (bits == 0xffffffffu && (int64_t)(w + 1) * 32 <= V)
            continue;
        for (int32_t k = 0; k < 32 && (int64_t)w * 32 + k < V; k++)
            if (!(bits >> k & 1))
                l[w * 32 + (size_t)k] = -INFINITY;
    }
    return SRT_OK;
}

/* Length of the longest prefix of p[0..n) made of whole UTF-8 characters (the tokenizer
 * encodes text, not bytes): 0 when p starts inside a character. */
static size_t utf8_whole(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (k == 0 || i + k > n)
            break;
        for (size_t j = 1; j < k; j++)
            if ((p[i + j] & 0xc0) != 0x80)
                return i;
        i += k;
    }
    return i;
}

/* Jump-forward (see the header): r's last output token `tok` was just drawn and accepted, its KV
 * not computed yet. Replaces it by the tokenization of its bytes and the bytes the grammar forces
 * next, less that tokenization's last token, in r->tokens, the grammar matcher and the sampler's
 * history. Returns how many tokens now stand where tok stood (n_output grew by that less one),
 * or 0 when nothing is forced or the jump does not apply (all unchanged). */
static int32_t jump_forward(srt_sched *s, sreq *r, int32_t tok)
{
    size_t tl, nf, len, n = 0, kept = 0;
    const char *tb = srt_tokenizer_token_bytes(r->jf_tok, tok, &tl);
    srt_err e;

    if (!tb || tl == 0 || tl > JF_MAX_TOKEN)
        return 0;
    nf = srt_grammar_matcher_forced_bytes(r->gm, s->jf_text + tl, JF_MAX_FORCED);
    if (nf == 0)
        return 0;
    memcpy(s->jf_text, tb, tl);
    len = utf8_whole((const unsigned char *)s->jf_text, tl + nf);
    if (len <= tl || srt_tokenizer_encode(r->jf_tok, s->jf_text, len, 0, s->jf_ids,
                                          sizeof s->jf_ids / sizeof s->jf_ids[0], &n, &e) != SRT_OK || n < 2)
        return 0;
    /* the last token is the model's to choose; the rest is bounded by max_tokens and the context */
    int32_t keep = (int32_t)n - 1;
    int32_t room = r->max_new - r->n_output + 1, ctx_room = s->cfg.context_length - n_known(r) + 1;
    if (keep > room)
        keep = room;
    if (keep > ctx_room)
        keep = ctx_room;
    /* only a tokenizer that round-trips the text (no added prefix space, no normalization) */
    for (size_t i = 0, at = 0; i < n; i++) {
        size_t bl;
        const char *bb = srt_tokenizer_token_bytes(r->jf_tok, s->jf_ids[i], &bl);
        if (!bb || at + bl > len || memcmp(bb, s->jf_text + at, bl) != 0)
            return 0;
        at += bl;
        if ((int32_t)i + 1 == keep)
            kept = at;
    }
    if (kept <= tl)
        return 0;   /* nothing forced would be appended */
    srt_grammar_matcher_rollback(r->gm, 1);
    for (int32_t i = 0; i < keep; i++)
        if (!srt_grammar_matcher_accept_token(r->gm, s->jf_ids[i])) {
            srt_grammar_matcher_rollback(r->gm, (size_t)i);
            srt_grammar_matcher_accept_token(r->gm, tok);   /* accepted a moment ago */
            return 0;
        }
    if (!s->runner.sample && srt_sampler_replace_tail(&r->smp, 1, s->jf_ids, keep) != SRT_OK) {
        srt_grammar_matcher_rollback(r->gm, (size_t)keep);
        srt_grammar_matcher_accept_token(r->gm, tok);
        return 0;
    }
    memcpy(&r->tokens[n_known(r) - 1], s->jf_ids, sizeof(int32_t) * (size_t)keep);
    r->n_output += keep - 1;
    return keep;
}

int srt_sched_step(srt_sched *s, srt_err *err)
{
    int32_t n_tok = 0, n_rows = 0, n_decode = 0;

    s->n_events = 0;
    s->b_n_seqs = 0;
    s->cur_result = NULL;
    apply_aborts(s);
    for (int attempt = 0; ; attempt++) {
        reserve_decodes(s);
        int32_t budget = continue_prefills(s, s->prefill_budget);
        admit(s, budget);
        if (s->b_n_seqs > 0 || s->n_running == 0 || attempt > s->cfg.max_running_requests)
            break;
        /* Everything running is mid-prefill and nothing fits: make room by retracting the
         * newest, or, alone, it can never finish. */
        if (s->n_running == 1) {
            sreq *r = &s->pool[s->running[0]];
            srt_log(SRT_LOG_WARN, "sched: request %llu does not fit the KV budget",
                    (unsigned long long)r->id);
            finish_running(s, r, SRT_FINISH_LENGTH, -1, -1, 0, 1);
        } else {
            retract(s, newest_running(s, NULL));
        }
    }
    if (s->b_n_seqs == 0) {
        s->m.num_running = s->n_running;
        s->m.num_queued = s->n_waiting;
        return s->n_events;
    }

    /* Build the batch: each sequence's new tokens, in scheduling order. */
    s->b_seq_start[0] = 0;
    for (int32_t i = 0; i < s->b_n_seqs; i++) {
        sreq *r = &s->pool[s->b_seq_req[i]];
        for (int32_t j = 0; j < r->ext; j++) {
            int32_t p = r->kv_len + j;
            s->b_tokens[n_tok] = r->tokens[p];
            s->b_pos[n_tok] = p;
            s->b_slots[n_tok] = r->cr.row[p];
            s->b_req_ids[n_tok] = r->id;
            n_tok++;
        }
        s->b_seq_start[i + 1] = n_tok;
        s->b_seq_len[i] = r->kv_len + r->ext;
        s->b_seq_slots[i] = r->cr.row;
        if (r->samples) {
            s->row_req[n_rows] = s->b_seq_req[i];
            s->sseqs[n_rows] = (srt_sched_sample_seq){ &r->sp, r->tokens, r->n_prompt, r->n_output, &r->rng };
            s->b_logit_rows[n_rows++] = n_tok - 1;
        }
        n_decode += r->ext == 1 && r->samples && r->kv_len == n_known(r) - 1;
    }
    srt_forward_batch b = {
        .n_tokens = n_tok, .token_ids = s->b_tokens, .positions = s->b_pos, .out_slots = s->b_slots,
        .n_seqs = s->b_n_seqs, .seq_start = s->b_seq_start, .seq_len = s->b_seq_len,
        .seq_slots = s->b_seq_slots, .request_ids = s->b_req_ids,
        .forward_mode = n_decode == s->b_n_seqs ? SRT_FORWARD_DECODE
                      : n_decode == 0 ? SRT_FORWARD_PREFILL : SRT_FORWARD_MIXED,
        .n_logit_rows = n_rows, .logit_rows = s->b_logit_rows,
    };
    int rc = s->runner.forward(s->runner.self, &b, s->logits, err);
    if (rc == SRT_OK && n_rows > 0) {
        for (int32_t i = 0; i < n_rows && rc == SRT_OK; i++) {
            sreq *r = &s->pool[s->row_req[i]];
            if (r->gm && apply_grammar(s, r, s->logits + (int64_t)i * s->cfg.vocab_size) != SRT_OK)
                rc = srt_err_set(err, "out of memory for a grammar mask");
        }
        for (int32_t i = 0; i < n_rows; i++)
            s->logprobs[i] = 0;
        if (s->runner.sample) {
            rc = s->runner.sample(s->runner.self, n_rows, s->logits, s->cfg.vocab_size, s->sseqs,
                                  s->sampled, s->logprobs, err);
            for (int32_t i = 0; i < n_rows; i++)
                s->results[i].n_top = 0;
        } else {
            for (int32_t i = 0; i < n_rows && rc == SRT_OK; i++) {
                sreq *r = &s->pool[s->row_req[i]];
                srt_sample_result *res = &s->results[i];
                if (srt_sampler_sample(&r->smp, s->ws, s->logits + (int64_t)i * s->cfg.vocab_size, res) != SRT_OK) {
                    s->sampled[i] = -1;   /* finishes this request with ERROR below */
                    continue;
                }
                s->sampled[i] = res->token;
                s->logprobs[i] = res->logprob;
            }
        }
    }
    s->m.steps++;
    s->m.forward_tokens_total += (uint64_t)n_tok;
    if (s->new_token_ratio > s->ratio_min)
        s->new_token_ratio = fmax(s->ratio_min, s->new_token_ratio - NEW_TOKEN_RATIO_STEP);

    double t = now_s();
    int32_t row = 0;
    for (int32_t i = 0; i < s->b_n_seqs; i++) {
        sreq *r = &s->pool[s->b_seq_req[i]];
        int was_prefill = !(r->ext == 1 && r->kv_len == n_known(r) - 1);
        r->kv_len += r->ext;
        r->ext = 0;
        if (rc != SRT_OK) {
            finish_running(s, r, SRT_FINISH_ERROR, -1, -1, 0, 0);
            continue;
        }
        if (!r->samples) {   /* a prefill chunk: keep what it computed findable */
            srt_radix_cache_unfinished(&s->cache, r->tokens, r->kv_len, &r->cr);
            continue;
        }
        int32_t tok = s->sampled[row];
        float lp = s->logprobs[row];
        s->cur_result = &s->results[row++];
        r->samples = 0;
        if (tok < 0 || tok >= s->cfg.vocab_size) {
            finish_running(s, r, SRT_FINISH_ERROR, -1, -1, 0, 0);
            continue;
        }
        if (r->gm && !srt_grammar_matcher_accept_token(r->gm, tok)) {
            /* only when the grammar allowed nothing (a dead end): the logits were all -inf */
            srt_log(SRT_LOG_ERROR, "sched: request %llu: its grammar allows no token here",
                    (unsigned long long)r->id);
            finish_running(s, r, SRT_FINISH_ERROR, -1, -1, 0, 1);
            continue;
        }
        r->tokens[r->n_prompt + r->n_output++] = tok;
        s->m.generation_tokens_total++;
        if (r->t_first == 0) {
            r->t_first = t;
            hist_add(&s->m.ttft, t - r->t_arrival);
        } else {
            hist_add(&s->m.itl, t - r->t_last);
        }
        r->t_last = t;
        int32_t stop_id;
        srt_finish_reason fin = check_stop(s, r, tok, &stop_id);
        int32_t n_jf = fin == SRT_FINISH_NONE && r->jf_tok ? jump_forward(s, r, tok) : 0;
        if (n_jf > 0) {
            /* each token of the jump is an event of its own, through the same stop checks */
            int32_t end = r->n_output;
            r->n_output = end - n_jf;
            s->cur_result = NULL;
            for (int32_t k = 0; k < n_jf && fin == SRT_FINISH_NONE; k++) {
                int32_t t = r->tokens[r->n_prompt + r->n_output++];
                float tlp = k == 0 && t == tok ? lp : 0;
                s->m.generation_tokens_total += k > 0;
                fin = check_stop(s, r, t, &stop_id);
                if (fin != SRT_FINISH_NONE)
                    finish_running(s, r, fin, stop_id, t, tlp, 1);
                else
                    emit(s, r, t, tlp, SRT_FINISH_NONE, -1);
            }
            if (fin != SRT_FINISH_NONE)
                continue;
        } else if (fin != SRT_FINISH_NONE) {
            finish_running(s, r, fin, stop_id, tok, lp, 1);
            continue;
        } else {
            emit(s, r, tok, lp, SRT_FINISH_NONE, -1);
        }
        if (was_prefill)
            srt_radix_cache_unfinished(&s->cache, r->tokens, r->kv_len, &r->cr);
    }
    s->m.num_running = s->n_running;
    s->m.num_queued = s->n_waiting;
    if (rc != SRT_OK) {
        srt_log(SRT_LOG_ERROR, "sched: forward failed: %s", err ? err->msg : "?");
        return SRT_ERROR;
    }
    return s->n_events;
}

const srt_sched_event *srt_sched_events(const srt_sched *s, int *n)
{
    *n = s->n_events;
    return s->events;
}

int srt_sched_has_work(const srt_sched *s) { return s->n_running > 0 || s->n_waiting > 0; }
int srt_sched_num_running(const srt_sched *s) { return s->n_running; }
int srt_sched_num_waiting(const srt_sched *s) { return s->n_waiting; }

void srt_sched_get_metrics(const srt_sched *s, srt_sched_metrics *m)
{
    *m = s->m;
    m->num_running = s->n_running;
    m->num_queued = s->n_waiting;
    m->kv_total_tokens = srt_kv_total_tokens(&s->kv);
    m->kv_used_tokens = m->kv_total_tokens - srt_kv_free_tokens(&s->kv);
    m->kv_cached_tokens = srt_radix_evictable_size(&s->cache) + srt_radix_protected_size(&s->cache);
    m->kv_evictable_tokens = srt_radix_evictable_size(&s->cache);
    m->page_size = s->kv.page_size;
}

int64_t srt_sched_flush_cache(srt_sched *s)
{
    return srt_radix_evict(&s->cache, INT64_MAX);
}

int64_t srt_sched_kv_free_tokens(const srt_sched *s)
{
    return srt_kv_free_tokens(&s->kv);
}

int srt_sched_check(const srt_sched *s, srt_err *err)
{
    int32_t ps = s->kv.page_size, np = s->kv.num_pages;
    int rc = SRT_OK;

    if (srt_radix_check(&s->cache, err) != SRT_OK)
        return SRT_ERROR;
    /* Page references: free pages 0; others = tree + every request range that holds them. */
    uint32_t *refs = calloc((size_t)np, sizeof(uint32_t));
    if (!refs)
        return srt_err_set(err, "out of memory");
    for (int32_t i = 1; i < s->cache.cap_nodes; i++) {
        const srt_radix_node *n = &s->cache.nodes[i];
        if (!n->in_use)
            continue;
        int32_t sl = n->first_slot;
        for (int32_t k = 0; k < n->len; k++, sl = s->cache.next[sl])
            if (k % ps == 0)
                refs[sl / ps]++;
    }
    int32_t live = 0;
    for (int32_t i = 0; i < s->pool_n; i++) {
        const sreq *r = &s->pool[i];
        if (r->state == REQ_FREE)
            continue;
        live++;
        if (r->state == REQ_WAITING && (r->row >= 0 || r->kv_len))
            { rc = srt_err_set(err, "waiting request %llu holds KV", (unsigned long long)r->id); break; }
        if (r->state != REQ_RUNNING)
            continue;
        if (r->kv_len > n_known(r) || r->cr.prefix_len > r->kv_len)
            { rc = srt_err_set(err, "request %llu: kv_len %d, prefix %d, known %d", (unsigned long long)r->id,
                               r->kv_len, r->cr.prefix_len, n_known(r)); break; }
        for (int32_t p = r->cr.prefix_len; p < r->kv_len; p++)
            if (p % ps == 0)
                refs[r->cr.row[p] / ps]++;
    }
    for (int32_t p = 0; p < np && rc == SRT_OK; p++)
        if (refs[p] != s->kv.page_ref[p])
            rc = srt_err_set(err, "page %d: %u holders, refcount %u", p, refs[p], s->kv.page_ref[p]);
    int64_t free_pages = 0;
    for (int32_t p = 0; p < np; p++)
        free_pages += s->kv.page_ref[p] == 0;
    if (rc == SRT_OK && free_pages != s->kv.n_free)
        rc = srt_err_set(err, "%lld pages unreferenced, %d on the free list", (long long)free_pages, s->kv.n_free);
    if (rc == SRT_OK && live + s->n_pool_free != s->pool_n)
        rc = srt_err_set(err, "request pool: %d live + %d free != %d", live, s->n_pool_free, s->pool_n);
    if (rc == SRT_OK && live != s->n_running + s->n_waiting)
        rc = srt_err_set(err, "%d live requests, %d running + %d waiting", live, s->n_running, s->n_waiting);
    if (rc == SRT_OK && s->r2t.n_free + s->n_running != s->r2t.rows)
        rc = srt_err_set(err, "req_to_token rows: %d free + %d running != %d", s->r2t.n_free,
                         s->n_running, s->r2t.rows);
    free(refs);
    return rc;
}
