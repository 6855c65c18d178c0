/* Example hook library: activation steering.
 *
 * Adds scale * vector to every token's row of a module's output (as a forward hook) or
 * of its first input (as a forward pre-hook), optionally only for some requests.
 *
 * Spec:
 *   {"name": "steer", "target_modules": ["model.layers.10"],
 *    "hook_factory": "libsrt_hook_steer.so:srt_steer_factory",
 *    "config": {"vector": [0.1, -0.2, ...], "scale": 4.0, "request_ids": [17]}}
 * config.vector: numbers, as many as the activation's last dimension (required);
 * config.scale: multiplier (default 1); config.request_ids: steer only these requests
 * (default: every token). The factory returns NULL (with an error in the log) when the
 * vector is missing. A vector whose length differs from the activation's last dimension
 * fails the forward pass with a clear message.
 *
 * Per request (ABI 1.1; the spec has "per_request": true and a request selects it with
 * "hooks": [{"name": "steer", "config": {...}}]): the request's config may set "scale"
 * (instead of the spec's), "vector" (instead of the spec's, same length) and "layer" (steer
 * only on the module named "model.layers.<layer>", for a spec that targets several layers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srt_hooks.h"

SRT_HOOK_LIBRARY();

typedef struct steer {
    float    *vec;       /* scale * vector, as the spec gives them */
    double   *raw;       /* the spec's vector, for a request's own scale */
    double    scale;
    float    *rvec;      /* this call's vector when a request sets its own */
    int64_t   dim;
    uint64_t *rids;
    int64_t   n_rids;
    float    *buf;
    int64_t   cap;
} steer;

static int selected(const steer *s, uint64_t rid)
{
    if (s->n_rids == 0)
        return 1;
    for (int64_t i = 0; i < s->n_rids; i++)
        if (s->rids[i] == rid)
            return 1;
    return 0;
}

/* The vector for this call: the spec's, or one made from the request's config. 0: skip
 * this module for the request; -1: a bad config. */
static int request_vector(steer *s, const srt_hook_call *call, const float **vec)
{
    const srt_hook_host *rh;
    double scale, layer, *tmp;
    int64_t n = 0;
    int own_vec;

    *vec = s->vec;
    if (!SRT_HOOK_CALL_HAS(call, request_host) || call->request_host == NULL)
        return 1;
    rh = call->request_host;
    if (rh->config_number(rh, "layer", &layer) == 0) {
        char want[64];
        snprintf(want, sizeof want, "model.layers.%lld", (long long)layer);
        if (strcmp(call->module->name, want) != 0)
            return 0;
    }
    own_vec = rh->config_numbers(rh, "vector", NULL, 0, &n) == 0;
    if (own_vec && n != s->dim) {
        call->host->log(0, "steer (spec '%s'): request %llu's config.vector has %lld values, "
                        "the spec's %lld", call->spec_name,
                        (unsigned long long)call->request_id, (long long)n, (long long)s->dim);
        return -1;
    }
    if (rh->config_number(rh, "scale", &scale) != 0) {
        if (!own_vec)
            return 1;
        scale = s->scale;
    }
    tmp = malloc((size_t)s->dim * sizeof *tmp);
    if (tmp == NULL)
        return -1;
    if (own_vec)
        rh->config_numbers(rh, "vector", tmp, s->dim, &n);
    else
        memcpy(tmp, s->raw, (size_t)s->dim * sizeof *tmp);
    for (int64_t i = 0; i < s->dim; i++)
        s->rvec[i] = (float)(tmp[i] * scale);
    free(tmp);
    *vec = s->rvec;
    return 1;
}

static int apply(steer *s, const srt_hook_call *call, srt_tensor_view *v)
{
    const srt_hook_host *h = call->host;
    const srt_batch_ctx *b = call->batch;
    int64_t n = h->tensor_numel(v), rows;
    const float *vec;
    int use = request_vector(s, call, &vec);

    if (use <= 0)
        return use == 0 ? SRT_HOOK_OK : SRT_HOOK_FAILED;

    if (v->ndim < 1 || v->shape[v->ndim - 1] != s->dim) {
        h->log(0, "steer (spec '%s'): %s has last dimension %lld, the vector has %lld values",
               call->spec_name, call->module->name,
               (long long)(v->ndim ? v->shape[v->ndim - 1] : 0), (long long)s->dim);
        return SRT_HOOK_FAILED;
    }
    rows = n / s->dim;
    if (s->n_rids && (b == NULL || b->request_ids == NULL || v->shape[0] != b->n_tokens)) {
        h->log(0, "steer (spec '%s'): %s is not one row per token; cannot select requests",
               call->spec_name, call->module->name);
        return SRT_HOOK_FAILED;
    }
    if (n > s->cap) {
        float *nb = realloc(s->buf, (size_t)n * sizeof *nb);
        if (nb == NULL)
            return SRT_HOOK_FAILED;
        s->buf = nb;
        s->cap = n;
    }
    if (h->tensor_read_f32(h, v, s->buf, n) != 0)
        return SRT_HOOK_FAILED;
    /* with request selection, row r is token r of the batch (checked above) */
    for (int64_t r = 0; r < rows; r++) {
        if (s->n_rids && !selected(s, b->request_ids[r]))
            continue;
        for (int64_t c = 0; c < s->dim; c++)
            s->buf[r * s->dim + c] += vec[c];
    }
    return h->tensor_write_f32(h, v, s->buf, n) == 0 ? SRT_HOOK_OK : SRT_HOOK_FAILED;
}

static int steer_pre(srt_hook *hook, const srt_hook_call *call, srt_module_args *args)
{
    if (args->n_inputs < 1)
        return SRT_HOOK_OK;
    return apply(hook->user, call, &args->inputs[0]);
}

static int steer_fwd(srt_hook *hook, const srt_hook_call *call, const srt_module_args *args,
                     srt_tensor_view *output, srt_tensor_view *replacement)
{
    (void)args;
    (void)replacement;
    if (call->forward_status != 0)
        return SRT_HOOK_OK;
    return apply(hook->user, call, output);
}

static void steer_destroy(srt_hook *hook)
{
    steer *s = hook->user;
    free(s->vec);
    free(s->raw);
    free(s->rvec);
    free(s->rids);
    free(s->buf);
    free(s);
    free(hook);
}

srt_hook *srt_steer_factory(const char *config_json, const srt_hook_host *host)
{
    srt_hook *hook = calloc(1, sizeof *hook);
    steer *s = calloc(1, sizeof *s);
    double scale = 1, *tmp = NULL;
    int64_t n = 0;

    (void)config_json;
    if (hook == NULL || s == NULL)
        goto fail;
    host->config_number(host, "scale", &scale);
    if (host->config_numbers(host, "vector", NULL, 0, &n) != 0 || n <= 0) {
        host->log(0, "steer (spec '%s'): config.vector must be a non-empty list of numbers",
                  host->spec_name);
        goto fail;
    }
    s->raw = malloc((size_t)n * sizeof *s->raw);
    s->vec = malloc((size_t)n * sizeof *s->vec);
    s->rvec = malloc((size_t)n * sizeof *s->rvec);
    if (s->raw == NULL || s->vec == NULL || s->rvec == NULL)
        goto fail;
    host->config_numbers(host, "vector", s->raw, n, &n);
    for (int64_t i = 0; i < n; i++)
        s->vec[i] = (float)(s->raw[i] * scale);
    s->dim = n;
    s->scale = scale;

    if (host->config_numbers(host, "request_ids", NULL, 0, &s->n_rids) == 0 && s->n_rids > 0) {
        tmp = malloc((size_t)s->n_rids * sizeof *tmp);
        s->rids = malloc((size_t)s->n_rids * sizeof *s->rids);
        if (tmp == NULL || s->rids == NULL)
            goto fail;
        host->config_numbers(host, "request_ids", tmp, s->n_rids, &s->n_rids);
        for (int64_t i = 0; i < s->n_rids; i++)
            s->rids[i] = (uint64_t)tmp[i];
        free(tmp);
        tmp = NULL;
    } else {
        s->n_rids = 0;
    }
    return srt_hook_fill(hook, steer_pre, steer_fwd, s, steer_destroy);
fail:
    free(tmp);
    if (s) {
        free(s->vec);
        free(s->raw);
        free(s->rvec);
        free(s->rids);
    }
    free(s);
    free(hook);
    return NULL;
}
