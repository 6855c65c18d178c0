/* The scheduler: continuous batching over a paged KV pool with a radix prefix cache
 * (SGLang's Scheduler, in C).
 *
 * The core is a step function over a model-runner interface (forward -> logits, sample),
 * so tests drive it with the real model or with a fake deterministic runner:
 *
 *   srt_sched *s = srt_sched_create(&cfg, &runner, &err);
 *   srt_sched_submit(s, &(srt_sched_submit_args){ .id = 1, .prompt = ids, .n_prompt = n,
 *                                                 .sampling = &sp }, &err);
 *   while (srt_sched_has_work(s)) {
 *       srt_sched_step(s, &err);                      // one forward over a mixed batch
 *       const srt_sched_event *ev = srt_sched_events(s, &n_ev);   // tokens, finishes
 *   }
 *
 * Each step: apply aborts; make room for one more token of every decoding request (evict
 * the radix cache, then retract the newest requests back to the queue); continue chunked
 * prefills; admit waiting requests by policy (fcfs / lpm) while the running limit, the
 * step's prefill token budget and the KV budget allow; run one forward over decode tokens
 * and prefill chunks together; sample; stop on max tokens, EOS or stop ids.
 *
 * Jump-forward (srt_sched_submit_args.jump_forward): after a constrained request draws a token,
 * the bytes its grammar forces next (srt_grammar_matcher_forced_bytes) are tokenized together
 * with the drawn token's bytes, whose KV is not computed yet, so the seam between drawn and
 * forced text gets the tokenizer's own merges; the drawn token is replaced by that tokenization
 * minus its last token, which is left to the model so that the seam between forced and free
 * text is tokenized as the model chooses under the mask. The appended tokens reach the next
 * step as one extend chunk (their KV is computed, no logits but the last), count as output
 * (max_tokens, usage), go through stop ids and stream as ordinary tokens. The output stays in
 * the grammar, but its tokenization, and so a greedy output, may differ from a step-by-step
 * decode's: that is why it is an option. Forced tokens have no probability the model
 * computed, so a request that asks for logprobs decodes step by step. It applies only where
 * the tokenizer round-trips the text (the tokens' bytes equal it) and the text is whole UTF-8.
 *
 * Not thread-safe: one thread owns a srt_sched. */
#ifndef SRT_SCHED_H
#define SRT_SCHED_H

#include <stdint.h>

#include "srt/batch.h"
#include "srt/common.h"
#include "srt/request.h"     /* srt_sampling_params, srt_finish_reason */

typedef enum srt_sched_policy {
    SRT_SCHED_FCFS = 0,
    SRT_SCHED_LPM  = 1,   /* longest cached prefix first; fcfs above 128 waiting */
} srt_sched_policy;

typedef struct srt_sched_config {
    int32_t max_running_requests;   /* > 0 */
    int32_t max_queued_requests;    /* waiting requests held; more are refused */
    int32_t context_length;         /* prompt + output tokens of one request */
    int64_t max_total_tokens;       /* KV pool budget in tokens (page multiple) */
    int32_t page_size;              /* KV page size in tokens, >= 1 */
    int32_t chunked_prefill_size;   /* prefill tokens per step; <= 0: max_prefill_tokens, unchunked */
    int32_t max_prefill_tokens;     /* <= 0: 16384 */
    int32_t policy;                 /* srt_sched_policy */
    int32_t radix_cache;            /* 1 = on, 0 = off (KV freed at finish) */
    float   schedule_conservativeness;   /* scales the decode-room estimate of admission
                                          * (SGLang's --schedule-conservativeness); <= 0: 1.
                                          * Small = admit more, retract more. */
    int32_t vocab_size;
    int32_t n_eos;
    int32_t eos_ids[8];
} srt_sched_config;

/* One sequence handed to the sampler. */
typedef struct srt_sched_sample_seq {
    const srt_sampling_params *params;
    const int32_t             *tokens;   /* prompt then output, n_prompt + n_output ids */
    int32_t                    n_prompt;
    int32_t                    n_output;
    uint64_t                  *rng;      /* the request's generator state */
} srt_sched_sample_seq;

/* What runs the model. forward writes logits[rows][vocab_size] for the batch's logit rows
 * (the last token of every sequence that samples this step). sample picks one id per
 * row (it may modify logits in place) and fills logprobs. sample may be NULL: then each
 * request's own srt_sampler (src/include/srt/sampling.h: penalties, bias, min_tokens
 * masking, temperature/top-k/top-p/min-p, seeded draws, logprobs) picks. */
typedef struct srt_sched_runner {
    void *self;
    int (*forward)(void *self, const srt_forward_batch *b, float *logits, srt_err *err);
    int (*sample)(void *self, int32_t n, float *logits, int32_t vocab,
                  const srt_sched_sample_seq *seqs, int32_t *out_ids, float *out_logprobs,
                  srt_err *err);
} srt_sched_runner;

/* Bounds of the latency histograms, in seconds (Prometheus "le"), +Inf implied. */
#define SRT_SCHED_HIST_BUCKETS 16
extern const double srt_sched_hist_bounds[SRT_SCHED_HIST_BUCKETS];   /* libsrt only */

typedef struct srt_sched_hist {
    uint64_t count[SRT_SCHED_HIST_BUCKETS + 1];   /* per bucket, not cumulative; last = +Inf */
    uint64_t n;
    double   sum;
} srt_sched_hist;

/* Plain data (no pointers): the scheduler process may copy it into shared memory. */
typedef struct srt_sched_metrics {
    int64_t        num_running;
    int64_t        num_queued;
    int64_t        kv_used_tokens;         /* held by requests and the radix cache */
    int64_t        kv_total_tokens;
    int64_t        kv_cached_tokens;       /* in the radix cache */
    int64_t        kv_evictable_tokens;    /* in the radix cache, used by no request */
    int64_t        page_size;              /* KV page (block) size in tokens */
    uint64_t       prompt_tokens_total;
    uint64_t       cached_prompt_tokens_total;   /* hit rate = cached / prompt */
    uint64_t       generation_tokens_total;
    uint64_t       requests_finished;
    uint64_t       requests_aborted;
    uint64_t       requests_rejected;
    uint64_t       retractions;
    uint64_t       steps;
    uint64_t       forward_tokens_total;
    srt_sched_hist ttft;
    srt_sched_hist itl;
    srt_sched_hist e2e;
} srt_sched_metrics;

/* Prometheus text exposition (srt:num_running_reqs, srt:token_usage, srt:cache_hit_rate,
 * srt:time_to_first_token_seconds histogram, ...) with a model_name label, followed by the
 * names the Gateway API Inference Extension's endpoint picker reads (vllm:num_requests_waiting,
 * vllm:num_requests_running, vllm:kv_cache_usage_perc, vllm:lora_requests_info, ...). Writes at most
 * cap bytes (NUL-terminated when cap > 0) and returns the full length, like snprintf. */
SRT_API size_t srt_sched_metrics_prometheus(const srt_sched_metrics *m, const char *model_name,
                                            char *buf, size_t cap);

typedef struct srt_sched srt_sched;

SRT_API int  srt_sched_create(const srt_sched_config *cfg, const srt_sched_runner *runner,
                              srt_sched **out, srt_err *err);
SRT_API void srt_sched_free(srt_sched *s);

typedef struct srt_sched_submit_args {
    uint64_t                   id;       /* caller's handle, unique among live requests */
    uint64_t                   group;    /* n > 1 siblings share a non-zero group: prompt KV shared */
    const int32_t             *prompt;
    int32_t                    n_prompt;
    const srt_sampling_params *sampling; /* copied and clamped; NULL = greedy, 16 tokens */
    struct srt_grammar        *grammar;  /* NULL, or the output is constrained to it: the
                                            scheduler holds a matcher (and so a reference)
                                            while the request lives; its vocab's ids are this
                                            model's, its stop ids include cfg.eos_ids */
    uint64_t                   cache_ns; /* radix-cache namespace (srt_request.cache_ns), 0 = shared */
    int                        own_prefix; /* compute every prompt token: no prefix from the cache
                                              or an n > 1 sibling (returned activations of every
                                              position); cache_ns is then ignored */
    const struct srt_tokenizer *jump_forward; /* NULL, or (with a grammar) where the grammar allows
                                            exactly one continuation, its bytes are appended
                                            without a forward step per token (SGLang's
                                            jump-forward), tokenized with this tokenizer (the
                                            model's own; it must outlive the request). See
                                            "Jump-forward" above. */
} srt_sched_submit_args;

typedef enum srt_sched_submit_status {
    SRT_SCHED_SUBMIT_OK      = 0,
    SRT_SCHED_SUBMIT_FULL    = 1,   /* queue at max_queued_requests: 503 */
    SRT_SCHED_SUBMIT_INVALID = 2,   /* empty / too long prompt, bad id, bad token: 400 */
} srt_sched_submit_status;

SRT_API srt_sched_submit_status srt_sched_submit(srt_sched *s, const srt_sched_submit_args *a, srt_err *err);

/* Marks a request aborted; it leaves (KV released, ABORT event) at the next step.
 * Returns 1 if the id was live, 0 otherwise. */
SRT_API int srt_sched_abort(srt_sched *s, uint64_t id);

/* What a step produced for one request: a token, a finish, or both. */
typedef struct srt_sched_event {
    uint64_t          id;
    int32_t           token;          /* -1: none (abort, error) */
    float             logprob;
    srt_finish_reason finish;         /* SRT_FINISH_NONE while running */
    int32_t           stop_id;        /* matched eos / stop id, or -1 */
    int32_t           n_prompt;
    int32_t           n_output;       /* after this event */
    int32_t           cached_tokens;  /* prompt tokens served from the prefix cache */
    int32_t           n_top;          /* top logprobs of this token's position */
    int32_t           top_ids[SRT_REQ_MAX_TOP_LOGPROBS];
    float             top_logprobs[SRT_REQ_MAX_TOP_LOGPROBS];
} srt_sched_event;

/* One scheduling step and forward. Returns the number of events (see srt_sched_events), or
 * SRT_ERROR when the model failed (the batch's requests are then finished with ERROR
 * events; the scheduler stays usable). */
SRT_API int srt_sched_step(srt_sched *s, srt_err *err);
SRT_API const srt_sched_event *srt_sched_events(const srt_sched *s, int *n);

SRT_API int  srt_sched_has_work(const srt_sched *s);       /* anything running, waiting or aborting */
int  srt_sched_num_running(const srt_sched *s);           /* libsrt only */
int  srt_sched_num_waiting(const srt_sched *s);           /* libsrt only */
SRT_API void srt_sched_get_metrics(const srt_sched *s, srt_sched_metrics *m);
/* Drops every unlocked radix cache entry (the "flush cache" endpoint). Returns tokens freed. */
SRT_API int64_t srt_sched_flush_cache(srt_sched *s);
/* Consistency check of pool, cache and requests (tests): SRT_ERROR with a message. */
SRT_API int  srt_sched_check(const srt_sched *s, srt_err *err);
/* KV tokens free (pool) and held by the radix cache: at rest free + cached == total. */
SRT_API int64_t srt_sched_kv_free_tokens(const srt_sched *s);

/* Most tokens one step forwards: the prefill budget plus one decode token per running
 * request. Size the model runner's max_batch_tokens with it (max_seqs = max_running). */
int32_t srt_sched_max_batch_tokens(const srt_sched_config *cfg);   /* libsrt only */

/* The scheduler process around this core (the model as a runner, the channel loop): see
 * src/sched/serve.h. */

#endif
