/* Example hook library: activation logger.
 *
 * Writes one JSON line per request per module call with the activation's statistics:
 *   {"module":"model.layers.0.mlp","class":"LlamaMLP","hook":"output","mode":"decode",
 *    "tp_rank":0,"request_id":7,"tokens":1,"shape":[1,576],
 *    "mean":0.01,"std":0.2,"min":-1.5,"max":2.25}
 * "std" is the population standard deviation. When the activation's first dimension is not
 * the batch's token count, one line covers the whole tensor with "request_id": null.
 *
 * Spec:
 *   {"name": "log_mlp", "target_modules": ["model.layers.*.mlp"],
 *    "hook_factory": "libsrt_hook_actlog.so:srt_actlog_factory",
 *    "config": {"path": "/tmp/activations.jsonl"}}
 * config.path: file to append to (default: the server log at info level).
 * In "forward_pre_hooks" it logs the module's first input ("hook":"input") instead. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srt_hooks.h"

SRT_HOOK_LIBRARY();

typedef struct actlog {
    FILE  *out;          /* NULL: host->log */
    float *buf;
    int64_t cap;
    int    failed;       /* report a write error once */
} actlog;

static int ensure(actlog *a, int64_t n)
{
    if (n <= a->cap)
        return 0;
    float *b = realloc(a->buf, (size_t)n * sizeof *b);
    if (b == NULL)
        return -1;
    a->buf = b;
    a->cap = n;
    return 0;
}

static const char *mode_name(int32_t m)
{
    return m == SRT_FORWARD_PREFILL ? "prefill" : m == SRT_FORWARD_DECODE ? "decode" : "mixed";
}

static void num(char **p, char *end, double v)
{
    if (isfinite(v))
        *p += snprintf(*p, (size_t)(end - *p), "%.9g", v);
    else
        *p += snprintf(*p, (size_t)(end - *p), "null");
}

/* Statistics of the rows of `x` ([rows, width]) whose token belongs to `rid` (all rows
 * when rid_filter is 0), and one JSON line for them. */
static void emit(actlog *a, const srt_hook_call *call, const char *what, const float *x,
                 int64_t rows, int64_t width, const srt_tensor_view *v, int rid_filter,
                 uint64_t rid)
{
    const srt_batch_ctx *b = call->batch;
    double sum = 0, sq = 0, mn = INFINITY, mx = -INFINITY;
    int64_t n = 0, tokens = 0;
    char line[2048], *p = line, *end = line + sizeof line;

    for (int64_t r = 0; r < rows; r++) {
        if (rid_filter && b->request_ids[r] != rid)
            continue;
        tokens++;
        for (int64_t c = 0; c < width; c++) {
            double f = x[r * width + c];
            sum += f;
            sq += f * f;
            mn = f < mn ? f : mn;
            mx = f > mx ? f : mx;
            n++;
        }
    }
    double mean = n ? sum / (double)n : 0, var = n ? sq / (double)n - mean * mean : 0;
    p += snprintf(p, (size_t)(end - p),
                  "{\"module\":\"%s\",\"class\":\"%s\",\"hook\":\"%s\",\"mode\":\"%s\","
                  "\"tp_rank\":%d,\"request_id\":", call->module->name,
                  call->module->class_name ? call->module->class_name : "", what,
                  mode_name(b->forward_mode), b->tp_rank);
    if (rid_filter)
        p += snprintf(p, (size_t)(end - p), "%llu", (unsigned long long)rid);
    else
        p += snprintf(p, (size_t)(end - p), "null");
    p += snprintf(p, (size_t)(end - p), ",\"tokens\":%lld,\"shape\":[", (long long)tokens);
    for (int d = 0; d < v->ndim; d++)
        p += snprintf(p, (size_t)(end - p), "%s%lld", d ? "," : "",
                      (long long)(d == 0 && rid_filter ? tokens : v->shape[d]));
    p += snprintf(p, (size_t)(end - p), "],\"mean\":");
    num(&p, end, mean);
    p += snprintf(p, (size_t)(end - p), ",\"std\":");
    num(&p, end, sqrt(var > 0 ? var : 0));
    p += snprintf(p, (size_t)(end - p), ",\"min\":");
    num(&p, end, n ? mn : NAN);
    p += snprintf(p, (size_t)(end - p), ",\"max\":");
    num(&p, end, n ? mx : NAN);
    snprintf(p, (size_t)(end - p), "}");

    if (a->out == NULL) {
        call->host->log(2, "%s", line);
    } else if (fprintf(a->out, "%s\n", line) < 0 && !a->failed) {
        a->failed = 1;
        call->host->log(0, "actlog: cannot write activations");
    }
}

static int log_view(actlog *a, const srt_hook_call *call, const char *what,
                    const srt_tensor_view *v)
{
    const srt_hook_host *h = call->host;
    const srt_batch_ctx *b = call->batch;
    int64_t n = h->tensor_numel(v), rows, width;

    if (n < 0 || ensure(a, n > 0 ? n : 1) != 0 || h->tensor_read_f32(h, v, a->buf, n) != 0) {
        h->log(0, "actlog: cannot read the %s of %s", what, call->module->name);
        return SRT_HOOK_FAILED;
    }
    if (v->ndim >= 1 && b && b->request_ids && v->shape[0] == b->n_tokens && b->n_tokens > 0) {
        rows = v->shape[0];
        width = rows ? n / rows : 0;
        /* one line per request, in order of first appearance */
        for (int64_t r = 0; r < rows; r++) {
            int seen = 0;
            for (int64_t q = 0; q < r && !seen; q++)
                seen = b->request_ids[q] == b->request_ids[r];
            if (!seen)
                emit(a, call, what, a->buf, rows, width, v, 1, b->request_ids[r]);
        }
    } else {
        emit(a, call, what, a->buf, 1, n, v, 0, 0);
    }
    if (a->out)
        fflush(a->out);
    return SRT_HOOK_OK;
}

static int actlog_pre(srt_hook *hook, const srt_hook_call *call, srt_module_args *args)
{
    if (args->n_inputs < 1)
        return SRT_HOOK_OK;
    return log_view(hook->user, call, "input", &args->inputs[0]);
}

static int actlog_fwd(srt_hook *hook, const srt_hook_call *call, const srt_module_args *args,
                      srt_tensor_view *output, srt_tensor_view *replacement)
{
    (void)args;
    (void)replacement;
    if (call->forward_status != 0)
        return SRT_HOOK_OK;
    return log_view(hook->user, call, "output", output);
}

static void actlog_destroy(srt_hook *hook)
{
    actlog *a = hook->user;
    if (a->out)
        fclose(a->out);
    free(a->buf);
    free(a);
    free(hook);
}

srt_hook *srt_actlog_factory(const char *config_json, const srt_hook_host *host)
{
    const char *path = NULL;
    srt_hook *hook = calloc(1, sizeof *hook);
    actlog *a = calloc(1, sizeof *a);

    (void)config_json;
    if (hook == NULL || a == NULL)
        goto fail;
    if (host->config_string(host, "path", &path) == 0) {
        a->out = fopen(path, "a");
        if (a->out == NULL) {
            host->log(0, "actlog (spec '%s'): cannot open '%s'", host->spec_name, path);
            goto fail;
        }
    }
    return srt_hook_fill(hook, actlog_pre, actlog_fwd, a, actlog_destroy);
fail:
    free(a);
    free(hook);
    return NULL;
}
