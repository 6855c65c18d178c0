/* Prometheus text exposition of the scheduler metrics (names follow SGLang's, prefix srt:),
 * then the same load figures under the names the Gateway API Inference Extension's endpoint
 * picker (EPP) scrapes by default, so that a node can be an InferencePool endpoint as it is. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "srt/sched.h"

typedef struct out {
    char  *buf;
    size_t cap, len;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...)
{
    va_list ap;
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    va_start(ap, fmt);
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

static void metric(out *o, const char *name, const char *type, const char *help, const char *labels,
                   double v)
{
    put(o, "# HELP srt:%s %s\n# TYPE srt:%s %s\nsrt:%s{%s} %.17g\n", name, help, name, type, name, labels, v);
}

static void hist(out *o, const char *name, const char *help, const char *labels, const srt_sched_hist *h)
{
    uint64_t cum = 0;
    put(o, "# HELP srt:%s %s\n# TYPE srt:%s histogram\n", name, help, name);
    for (int b = 0; b < SRT_SCHED_HIST_BUCKETS; b++) {
        cum += h->count[b];
        put(o, "srt:%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, srt_sched_hist_bounds[b],
            (unsigned long long)cum);
    }
    cum += h->count[SRT_SCHED_HIST_BUCKETS];
    put(o, "srt:%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
    put(o, "srt:%s_sum{%s} %.17g\nsrt:%s_count{%s} %llu\n", name, labels, h->sum, name, labels,
        (unsigned long long)h->n);
}

static void vmetric(out *o, const char *name, const char *type, const char *help, const char *labels,
                    double v)
{
    put(o, "# HELP vllm:%s %s\n# TYPE vllm:%s %s\nvllm:%s{%s} %.17g\n", name, help, name, type, name, labels, v);
}

/*
 * GIE's model-server protocol: TotalQueuedRequests, TotalRunningRequests and KVCacheUtilization
 * (vLLM's names; the EPP's --*-metric flags default to them), the LoRA info gauge whose value is
 * the time it was last updated (we serve no adapters: empty lists, max_lora 0), and the optional
 * cache_config_info its prefix scorer reads. KV use counts what requests hold, not cached
 * prefixes nobody uses (those are evicted on demand), as vLLM's and SGLang's do.
 */
static void gie(out *o, const srt_sched_metrics *m, const char *labels)
{
    int64_t busy = m->kv_used_tokens - m->kv_evictable_tokens;
    double usage = m->kv_total_tokens && busy > 0 ? (double)busy / (double)m->kv_total_tokens : 0;
    int64_t ps = m->page_size > 0 ? m->page_size : 1;

    vmetric(o, "num_requests_waiting", "gauge", "Requests waiting to be scheduled (GIE TotalQueuedRequests).", labels, (double)m->num_queued);
    vmetric(o, "num_requests_running", "gauge", "Requests in the running batch (GIE TotalRunningRequests).", labels, (double)m->num_running);
    vmetric(o, "kv_cache_usage_perc", "gauge", "KV cache in use by requests, 0 to 1 (GIE KVCacheUtilization).", labels, usage);
    vmetric(o, "gpu_cache_usage_perc", "gauge", "Same as vllm:kv_cache_usage_perc (the name older EPPs read).", labels, usage);
    vmetric(o, "prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", labels, (double)m->prompt_tokens_total);
    vmetric(o, "prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", labels, (double)m->cached_prompt_tokens_total);
    put(o, "# HELP vllm:cache_config_info KV cache geometry (GIE BlockSize, NumGPUBlocks).\n"
           "# TYPE vllm:cache_config_info gauge\n"
           "vllm:cache_config_info{block_size=\"%lld\",num_gpu_blocks=\"%lld\"} 1\n",
        (long long)ps, (long long)(m->kv_total_tokens / ps));
    put(o, "# HELP vllm:lora_requests_info LoRA adapters (none are served); the value is when it was updated.\n"
           "# TYPE vllm:lora_requests_info gauge\n"
           "vllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} %lld\n",
        (long long)time(NULL));
}

size_t srt_sched_metrics_prometheus(const srt_sched_metrics *m, const char *model_name, char *buf, size_t cap)
{
    char labels[300];
    out o = { buf, cap, 0 };
    size_t j = 0;

    /* Label values escape backslash, quote and newline. */
    j += (size_t)snprintf(labels, sizeof labels, "model_name=\"");
    for (const char *p = model_name ? model_name : ""; *p && j + 4 < sizeof labels; p++) {
        if (*p == '\\' || *p == '"') { labels[j++] = '\\'; labels[j++] = *p; }
        else if (*p == '\n') { labels[j++] = '\\'; labels[j++] = 'n'; }
        else labels[j++] = *p;
    }
    labels[j++] = '"';
    labels[j] = 0;

    double usage = m->kv_total_tokens ? (double)m->kv_used_tokens / (double)m->kv_total_tokens : 0;
    double hit = m->prompt_tokens_total ? (double)m->cached_prompt_tokens_total / (double)m->prompt_tokens_total : 0;
    metric(&o, "num_running_reqs", "gauge", "Requests in the running batch.", labels, (double)m->num_running);
    metric(&o, "num_queue_reqs", "gauge", "Requests waiting in the scheduler queue.", labels, (double)m->num_queued);
    metric(&o, "kv_used_tokens", "gauge", "KV cache tokens in use (requests and prefix cache).", labels, (double)m->kv_used_tokens);
    metric(&o, "kv_total_tokens", "gauge", "KV cache capacity in tokens.", labels, (double)m->kv_total_tokens);
    metric(&o, "kv_cached_tokens", "gauge", "KV tokens held by the radix prefix cache.", labels, (double)m->kv_cached_tokens);
    metric(&o, "token_usage", "gauge", "Fraction of the KV cache in use.", labels, usage);
    metric(&o, "cache_hit_rate", "gauge", "Prompt tokens served from the prefix cache / prompt tokens.", labels, hit);
    metric(&o, "prompt_tokens_total", "counter", "Prompt tokens admitted.", labels, (double)m->prompt_tokens_total);
    metric(&o, "cached_prompt_tokens_total", "counter", "Prompt tokens served from the prefix cache.", labels, (double)m->cached_prompt_tokens_total);
    metric(&o, "generation_tokens_total", "counter", "Tokens generated.", labels, (double)m->generation_tokens_total);
    metric(&o, "num_requests_total", "counter", "Requests finished (any reason but abort).", labels, (double)m->requests_finished);
    metric(&o, "num_aborted_requests_total", "counter", "Requests aborted.", labels, (double)m->requests_aborted);
    metric(&o, "num_rejected_requests_total", "counter", "Requests refused by a full queue.", labels, (double)m->requests_rejected);
    metric(&o, "num_retractions_total", "counter", "Requests preempted back to the queue for KV room.", labels, (double)m->retractions);
    metric(&o, "forward_steps_total", "counter", "Forward passes run.", labels, (double)m->steps);
    hist(&o, "time_to_first_token_seconds", "Time to first token.", labels, &m->ttft);
    hist(&o, "inter_token_latency_seconds", "Time between consecutive output tokens.", labels, &m->itl);
    hist(&o, "e2e_request_latency_seconds", "Request latency from arrival to finish.", labels, &m->e2e);
    gie(&o, m, labels);
    if (cap > 0)
        buf[o.len < cap ? o.len : cap - 1] = 0;
    return o.len;
}
