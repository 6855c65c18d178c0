/* A hook library for the hook engine's tests (built as build/t/hooklib/libtesthooks.so).
 * It records every call in a trace the test reads back through th_trace(). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srt_hooks.h"

SRT_HOOK_LIBRARY();

static char trace[65536];
static size_t trace_len;
static int destroyed;
static int created;
static int last_n_kwargs = -1;
static int last_forward_status = 99;
static int last_tp_rank = -1;

const char *th_trace(void) { return trace; }
int th_destroyed(void) { return destroyed; }
int th_created(void) { return created; }
int th_last_n_kwargs(void) { return last_n_kwargs; }
int th_last_forward_status(void) { return last_forward_status; }
int th_last_tp_rank(void) { return last_tp_rank; }
void th_reset(void)
{
    trace[0] = '\0';
    trace_len = 0;
    destroyed = created = 0;
    last_n_kwargs = -1;
    last_forward_status = 99;
    last_tp_rank = -1;
}

static void note(const char *fmt, const char *a, const char *b)
{
    int n = snprintf(trace + trace_len, sizeof trace - trace_len, fmt, a, b);
    if (n > 0 && trace_len + (size_t)n < sizeof trace)
        trace_len += (size_t)n;
}

typedef struct th_user {
    char   tag[64];
    double value;
    int    fail;
    int    replace;
    float  repl_buf[64];
} th_user;

static void th_destroy(srt_hook *h)
{
    destroyed++;
    free(h->user);
    free(h);
}

static int th_pre(srt_hook *h, const srt_hook_call *call, srt_module_args *args)
{
    th_user *u = h->user;
    note("pre:%s:%s;", u->tag, call->module->name);
    last_n_kwargs = args->n_kwargs;
    last_tp_rank = call->host->tp_rank;
    if (u->fail)
        return SRT_HOOK_FAILED;
    if (u->value != 0 && args->n_inputs > 0) {
        srt_tensor_view *x = &args->inputs[0];
        int64_t n = call->host->tensor_numel(x);
        float buf[256];
        if (n > 256 || call->host->tensor_read_f32(call->host, x, buf, n) != 0)
            return SRT_HOOK_FAILED;
        for (int64_t i = 0; i < n; i++)
            buf[i] += (float)u->value;
        if (call->host->tensor_write_f32(call->host, x, buf, n) != 0)
            return SRT_HOOK_FAILED;
    }
    return SRT_HOOK_OK;
}

static int th_fwd(srt_hook *h, const srt_hook_call *call, const srt_module_args *args,
                  srt_tensor_view *out, srt_tensor_view *repl)
{
    th_user *u = h->user;
    note("fwd:%s:%s;", u->tag, call->module->name);
    last_n_kwargs = args->n_kwargs;
    last_forward_status = call->forward_status;
    if (u->fail)
        return SRT_HOOK_FAILED;
    if (u->replace) {
        int64_t n = call->host->tensor_numel(out);
        if (n > 64)
            return SRT_HOOK_FAILED;
        *repl = *out;
        for (int64_t i = 0; i < n; i++)
            u->repl_buf[i] = (float)u->value;
        /* a contiguous view of our own buffer, same shape and dtype */
        repl->data = u->repl_buf;
        repl->dtype = SRT_HOOK_DTYPE_F32;
        for (int d = repl->ndim - 1, s = 1; d >= 0; d--) {
            repl->strides[d] = s;
            s *= (int)repl->shape[d];
        }
        return SRT_HOOK_REPLACED;
    }
    if (u->value != 0) {
        int64_t n = call->host->tensor_numel(out);
        float buf[256];
        if (n > 256 || call->host->tensor_read_f32(call->host, out, buf, n) != 0)
            return SRT_HOOK_FAILED;
        for (int64_t i = 0; i < n; i++)
            buf[i] += (float)u->value;
        if (call->host->tensor_write_f32(call->host, out, buf, n) != 0)
            return SRT_HOOK_FAILED;
    }
    return SRT_HOOK_OK;
}

/* config: {"tag": str, "value": number, "fail": bool, "replace": bool} */
srt_hook *th_factory(const char *config_json, const srt_hook_host *host)
{
    srt_hook *h = calloc(1, sizeof *h);
    th_user *u = calloc(1, sizeof *u);
    const char *tag = "default";

    if (!h || !u) {
        free(h);
        free(u);
        return NULL;
    }
    host->config_string(host, "tag", &tag);
    snprintf(u->tag, sizeof u->tag, "%s", tag);
    host->config_number(host, "value", &u->value);
    host->config_bool(host, "fail", &u->fail);
    host->config_bool(host, "replace", &u->replace);
    note("factory:%s:%s;", u->tag, config_json);
    srt_hook_fill(h, th_pre, th_fwd, u, th_destroy);
    created++;
    return h;
}

srt_hook *th_null_factory(const char *config_json, const srt_hook_host *host)
{
    (void)config_json;
    (void)host;
    return NULL;
}

/* Claims an ABI from the future: must be refused (and destroyed). */
srt_hook *th_future_abi_factory(const char *config_json, const srt_hook_host *host)
{
    srt_hook *h = th_factory(config_json, host);
    if (h)
        h->abi_version = (uint32_t)(SRT_HOOK_ABI_VERSION_MAJOR + 1) << 16;
    return h;
}

/* A hook for forward_hooks without a forward callback. */
srt_hook *th_pre_only_factory(const char *config_json, const srt_hook_host *host)
{
    srt_hook *h = th_factory(config_json, host);
    if (h)
        h->forward = NULL;
    return h;
}
