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
 * fails the forward pass with a clear message. */
#include <stdlib.h>
#include <string.h>

#include "srt_hooks.h"

SRT_HOOK_LIBRARY();

typedef struct steer {
    float    *vec;
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

static int apply(steer *s, const srt_hook_call *call, srt_tensor_view *v)
{
    const srt_hook_host *h = call->host;
    const srt_batch_ctx *b = call->batch;
    int64_t n = h->tensor_numel(v), rows;

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
            s->buf[r * s->dim + c] += s->vec[c];
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
    tmp = malloc((size_t)n * sizeof *tmp);
    s->vec = malloc((size_t)n * sizeof *s->vec);
    if (tmp == NULL || s->vec == NULL)
        goto fail;
    host->config_numbers(host, "vector", tmp, n, &n);
    for (int64_t i = 0; i < n; i++)
        s->vec[i] = (float)(tmp[i] * scale);
    s->dim = n;
    free(tmp);
    tmp = NULL;

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
    hook->abi_version = SRT_HOOK_ABI_VERSION;
    hook->struct_size = sizeof *hook;
    hook->forward_pre = steer_pre;
    hook->forward = steer_fwd;
    hook->user = s;
    hook->destroy = steer_destroy;
    return hook;
fail:
    free(tmp);
    if (s) {
        free(s->vec);
        free(s->rids);
    }
    free(s);
    free(hook);
    return NULL;
}
