/* Example hook library: hidden-state capture for selected requests.
 *
 * Appends one JSON line per captured token to a file:
 *   {"module":"model.layers.3","request_id":17,"position":12,"mode":"decode","tp_rank":0,
 *    "values":[0.125,-1.5,...]}
 * Only modules whose output has one row per batch token are captured (e.g. decoder layers,
 * norms, projections); others are skipped with one warning.
 *
 * Spec:
 *   {"name": "capture", "target_modules": ["model.norm"],
 *    "hook_factory": "libsrt_hook_capture.so:srt_capture_factory",
 *    "config": {"path": "/tmp/hidden.jsonl", "request_ids": [17], "max_tokens": 4096}}
 * config.path (required); config.request_ids: capture only these (default: all);
 * config.max_tokens: stop after this many token rows (default: no limit);
 * config.per_rank: true: each tensor-parallel rank writes PATH.<rank> (ranks are processes:
 * lines of one file would interleave). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srt_hooks.h"

SRT_HOOK_LIBRARY();

typedef struct capture {
    FILE     *out;
    uint64_t *rids;
    int64_t   n_rids;
    int64_t   max_tokens;   /* < 0: unlimited */
    int64_t   written;
    float    *buf;
    int64_t   cap;
    int       warned;
} capture;

static int wanted(const capture *c, uint64_t rid)
{
    if (c->n_rids == 0)
        return 1;
    for (int64_t i = 0; i < c->n_rids; i++)
        if (c->rids[i] == rid)
            return 1;
    return 0;
}

static int capture_fwd(srt_hook *hook, const srt_hook_call *call, const srt_module_args *args,
                       srt_tensor_view *out, srt_tensor_view *replacement)
{
    capture *c = hook->user;
    const srt_hook_host *h = call->host;
    const srt_batch_ctx *b = call->batch;
    int64_t n, width, any = 0;

    (void)args;
    (void)replacement;
    if (call->forward_status != 0 || (c->max_tokens >= 0 && c->written >= c->max_tokens))
        return SRT_HOOK_OK;
    if (b == NULL || b->request_ids == NULL || out->ndim < 1 || out->shape[0] != b->n_tokens ||
        b->n_tokens <= 0) {
        if (!c->warned++)
            h->log(1, "capture (spec '%s'): %s has no row per token; not captured",
                   call->spec_name, call->module->name);
        return SRT_HOOK_OK;
    }
    for (int64_t t = 0; t < b->n_tokens && !any; t++)
        any = wanted(c, b->request_ids[t]);
    if (!any)
        return SRT_HOOK_OK;           /* nothing selected: skip the device read */
    n = h->tensor_numel(out);
    width = n / b->n_tokens;
    if (n > c->cap) {
        float *nb = realloc(c->buf, (size_t)n * sizeof *nb);
        if (nb == NULL)
            return SRT_HOOK_FAILED;
        c->buf = nb;
        c->cap = n;
    }
    if (h->tensor_read_f32(h, out, c->buf, n) != 0)
        return SRT_HOOK_FAILED;
    for (int64_t t = 0; t < b->n_tokens; t++) {
        if (!wanted(c, b->request_ids[t]))
            continue;
        if (c->max_tokens >= 0 && c->written >= c->max_tokens)
            break;
        fprintf(c->out, "{\"module\":\"%s\",\"request_id\":%llu,\"position\":%d,\"mode\":\"%s\","
                "\"tp_rank\":%d,\"values\":[", call->module->name,
                (unsigned long long)b->request_ids[t], b->positions ? b->positions[t] : -1,
                b->forward_mode == SRT_FORWARD_PREFILL ? "prefill" :
                b->forward_mode == SRT_FORWARD_DECODE ? "decode" : "mixed", b->tp_rank);
        for (int64_t i = 0; i < width; i++) {
            float v = c->buf[t * width + i];
            if (isfinite(v))
                fprintf(c->out, "%s%.9g", i ? "," : "", (double)v);
            else
                fprintf(c->out, "%snull", i ? "," : "");
        }
        fputs("]}\n", c->out);
        c->written++;
    }
    fflush(c->out);
    return SRT_HOOK_OK;
}

static void capture_destroy(srt_hook *hook)
{
    capture *c = hook->user;
    fclose(c->out);
    free(c->rids);
    free(c->buf);
    free(c);
    free(hook);
}

srt_hook *srt_capture_factory(const char *config_json, const srt_hook_host *host)
{
    srt_hook *hook = calloc(1, sizeof *hook);
    capture *c = calloc(1, sizeof *c);
    const char *path;
    char ranked[4096];
    int per_rank = 0;
    double max_tokens = -1, *tmp = NULL;

    (void)config_json;
    if (hook == NULL || c == NULL)
        goto fail;
    if (host->config_string(host, "path", &path) != 0) {
        host->log(0, "capture (spec '%s'): config.path is required", host->spec_name);
        goto fail;
    }
    if (host->config_numbers(host, "request_ids", NULL, 0, &c->n_rids) == 0 && c->n_rids > 0) {
        tmp = malloc((size_t)c->n_rids * sizeof *tmp);
        c->rids = malloc((size_t)c->n_rids * sizeof *c->rids);
        if (tmp == NULL || c->rids == NULL)
            goto fail;
        host->config_numbers(host, "request_ids", tmp, c->n_rids, &c->n_rids);
        for (int64_t i = 0; i < c->n_rids; i++)
            c->rids[i] = (uint64_t)tmp[i];
        free(tmp);
        tmp = NULL;
    } else {
        c->n_rids = 0;
    }
    host->config_number(host, "max_tokens", &max_tokens);
    c->max_tokens = max_tokens < 0 ? -1 : (int64_t)max_tokens;
    if (host->config_bool(host, "per_rank", &per_rank) == 0 && per_rank) {
        snprintf(ranked, sizeof ranked, "%s.%d", path, (int)host->tp_rank);
        path = ranked;
    }
    c->out = fopen(path, "a");
    if (c->out == NULL) {
        host->log(0, "capture (spec '%s'): cannot open '%s'", host->spec_name, path);
        goto fail;
    }
    return srt_hook_fill(hook, NULL, capture_fwd, c, capture_destroy);
fail:
    free(tmp);
    if (c)
        free(c->rids);
    free(c);
    free(hook);
    return NULL;
}
