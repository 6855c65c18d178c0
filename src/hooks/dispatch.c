/* The slow path of srt_module_forward(): pre-hooks, the module, forward hooks.
 *
 * Semantics follow PyTorch's Module._call_impl: global hooks before module hooks, a
 * pre-hook may change the inputs, a forward hook may change the output, and hooks
 * registered with always_call still run when something before them failed. */
#include <string.h>

#include "hooks/hooks_internal.h"

static int inputs_unchanged_shape(const srt_module_args *before, const srt_module_args *after)
{
    if (before->n_inputs != after->n_inputs || before->n_kwargs != after->n_kwargs)
        return 0;
    for (int i = 0; i < before->n_inputs; i++)
        if (!srt_hook_view_same_layout(&before->inputs[i], &after->inputs[i]))
            return 0;
    for (int i = 0; i < before->n_kwargs; i++)
        if (!srt_hook_view_same_layout(&before->kwargs[i], &after->kwargs[i]))
            return 0;
    return 1;
}

static int apply_replacement(const struct srt_module_hooks *h, const srt_hook_slot *s,
                             const char *module, srt_tensor_view *out,
                             const srt_tensor_view *repl);
static int pre_one(const struct srt_module_hooks *h, const srt_hook_slot *s,
                   srt_hook_call *call, int32_t start, int32_t len, void *arg);
static int for_each_selecting(const struct srt_module_hooks *h, const srt_hook_slot *s,
                              srt_hook_call *call, const srt_tensor_view *rows,
                              int (*fn)(const struct srt_module_hooks *, const srt_hook_slot *,
                                        srt_hook_call *, int32_t, int32_t, void *),
                              void *arg);

/* ---- device entries (ABI 1.1): enqueue on the engine's stream, values changed in place ---- */

/* Set by the runner around a forward pass on a device (srt_hooks_device_step). */
static __thread const int32_t *device_positions;

void srt_hooks_device_step(const int32_t *positions)
{
    device_positions = positions;
}

static void device_call_init(srt_hook_device_call *dc, const struct srt_module_hooks *h,
                             const srt_hook_slot *s, const srt_hook_call *call, int pre,
                             const srt_tensor_view *rows)
{
    memset(dc, 0, sizeof *dc);
    dc->struct_size = sizeof *dc;
    dc->is_pre = pre;
    dc->module = call->module;
    dc->spec_name = s->spec_name;
    dc->handle_id = s->id;
    dc->host = s->host;
    dc->stream = h->stream;
    dc->device_index = rows ? rows->device_index : 0;
    dc->n_rows = call->batch ? call->batch->n_tokens : 0;
    dc->positions = device_positions;
    dc->forward_mode = call->batch ? call->batch->forward_mode : SRT_FORWARD_PREFILL;
    dc->tp_rank = call->batch ? call->batch->tp_rank : 0;
    dc->tp_size = call->batch ? call->batch->tp_size : 1;
}

/* A device pre-hook: the args are the module's own (values may change, nothing else). */
static int run_pre_device(const struct srt_module_hooks *h, const srt_hook_slot *s,
                          const srt_hook_call *call, srt_module_args *a)
{
    srt_hook_device_call dc;
    srt_module_args view = *a;

    device_call_init(&dc, h, s, call, 1, a->n_inputs > 0 ? &a->inputs[0] : NULL);
    if (!s->with_kwargs)
        view.n_kwargs = 0;
    if (s->hook->forward_pre_device(s->hook, &dc, &view) < 0) {
        srt_log(SRT_LOG_ERROR, "forward pre-hook '%s' (id %lld) failed on %s (device entry)",
                s->spec_name, (long long)s->id, call->module->name);
        return SRT_ERROR;
    }
    return SRT_OK;
}

static int run_post_device(const struct srt_module_hooks *h, const srt_hook_slot *s,
                           const srt_hook_call *call, const srt_module_args *a,
                           const srt_tensor_view *output)
{
    srt_hook_device_call dc;
    srt_module_args view = *a;

    device_call_init(&dc, h, s, call, 0, output);
    if (!s->with_kwargs)
        view.n_kwargs = 0;
    if (s->hook->forward_device(s->hook, &dc, &view, output) < 0) {
        srt_log(SRT_LOG_ERROR, "forward hook '%s' (id %lld) failed on %s (device entry)",
                s->spec_name, (long long)s->id, call->module->name);
        return SRT_ERROR;
    }
    return SRT_OK;
}

/* A hook with only a device entry where the engine has no stream (refused at startup by
 * srt_hook_registry_check_entries; an embedder that skipped it gets this). */
static int no_entry(const srt_hook_slot *s, const char *module)
{
    srt_log(SRT_LOG_ERROR, "hook '%s' (id %lld) on %s has only a device entry and the engine "
            "has no device stream", s->spec_name, (long long)s->id, module);
    return SRT_ERROR;
}

int srt_hooks_graph_state(const srt_module *mods, int n, uint64_t *gen)
{
    int state = 0;

    *gen = 0;
    for (int i = 0; i < n; i++) {
        const struct srt_module_hooks *h = mods[i].hooks;
        if (h == NULL)
            continue;
        *gen = h->generation;
        if (h->host_only > 0)
            return 2;
        state = 1;
    }
    return state;
}

static __attribute__((noinline)) int run_pre_hook(const struct srt_module_hooks *h, const srt_hook_slot *s,
                        srt_hook_call *call, srt_module_args *a)
{
    srt_module_args before = *a;
    int saved_kwargs = a->n_kwargs;
    int rc;

    call->spec_name = s->spec_name;
    call->handle_id = s->id;
    call->is_global = s->is_global;
    call->host = s->host;
    if (s->device)
        return run_pre_device(h, s, call, a);
    if (s->hook->forward_pre == NULL)
        return no_entry(s, call->module->name);
    if (!s->with_kwargs)
        a->n_kwargs = 0;
    if (s->per_request)
        rc = a->n_inputs > 0 ? for_each_selecting(h, s, call, &a->inputs[0], pre_one, a) : SRT_OK;
    else
        rc = s->hook->forward_pre(s->hook, call, a);
    if (!s->with_kwargs) {
        a->n_kwargs = saved_kwargs;
        /* A hook that did not ask for kwargs must not see or change them. */
        memcpy(a->kwarg_names, before.kwarg_names, sizeof a->kwarg_names);
        memcpy(a->kwargs, before.kwargs, sizeof a->kwargs);
    }
    if (rc < 0) {
        srt_log(SRT_LOG_ERROR, "forward pre-hook '%s' (id %lld) failed on %s",
                s->spec_name, (long long)s->id, call->module->name);
        return SRT_ERROR;
    }
    if (!inputs_unchanged_shape(&before, a)) {
        srt_log(SRT_LOG_ERROR, "forward pre-hook '%s' (id %lld) changed the number, shape or "
                "dtype of the inputs of %s; only values may change",
                s->spec_name, (long long)s->id, call->module->name);
        *a = before;
        return SRT_ERROR;
    }
    return SRT_OK;
}

static int apply_replacement(const struct srt_module_hooks *h, const srt_hook_slot *s,
                             const char *module, srt_tensor_view *out,
                             const srt_tensor_view *repl)
{
    if (!srt_hook_view_same_layout(out, repl) || repl->device != out->device ||
        repl->device_index != out->device_index || repl->data == NULL) {
        srt_log(SRT_LOG_ERROR, "forward hook '%s' (id %lld) on %s returned a replacement "
                "with another shape, dtype or device than the output",
                s->spec_name, (long long)s->id, module);
        return SRT_ERROR;
    }
    if (repl->data == out->data)
        return SRT_OK;
    if (out->device == SRT_HOOK_DEVICE_CPU)
        return srt_hook_view_copy_cpu(out, repl);
    if (h->copy_d2d && srt_hook_view_is_contiguous(out) && srt_hook_view_is_contiguous(repl))
        return h->copy_d2d(out->data, repl->data,
                           (size_t)srt_hook_view_numel(out) * srt_hook_dtype_size(out->dtype),
                           h->copy_ctx);
    srt_log(SRT_LOG_ERROR, "forward hook '%s' on %s: cannot copy a non-contiguous or device "
            "replacement here; write the output in place instead", s->spec_name, module);
    return SRT_ERROR;
}


/* ---- per-request hooks: one call per selecting request, on that request's rows only ---- */

/* The rows [start, start + len) of a view whose first dimension is the batch's tokens;
 * other views (a module's weights-shaped or per-sequence tensors) pass unchanged. */
static void cut_rows(srt_tensor_view *v, int32_t n_tokens, int32_t start, int32_t len)
{
    if (v->ndim < 1 || v->shape[0] != n_tokens || v->data == NULL)
        return;
    v->shape[0] = len;
    v->data = (char *)v->data + (size_t)start * (size_t)v->strides[0] * srt_hook_dtype_size(v->dtype);
}

static void cut_args(srt_module_args *a, int32_t n_tokens, int32_t start, int32_t len)
{
    for (int i = 0; i < a->n_inputs; i++)
        cut_rows(&a->inputs[i], n_tokens, start, len);
    for (int i = 0; i < a->n_kwargs; i++)
        cut_rows(&a->kwargs[i], n_tokens, start, len);
}

/* Which of the request's selections names the slot's spec, or -1. By name: one spec may
 * have several hook objects (a control vector has one per layer). */
static int selected(const srt_hook_req *e, const char *spec_name)
{
    for (int i = 0; e && i < e->n; i++)
        if (strcmp(e->spec[i], spec_name) == 0)
            return i;
    return -1;
}

/* Calls fn once per run of tokens of one request that selected the slot's hook. The batch
 * keeps each sequence's tokens together, so a run is a contiguous range of rows. */
typedef int (*per_req_fn)(const struct srt_module_hooks *h, const srt_hook_slot *s,
                          srt_hook_call *call, int32_t start, int32_t len, void *arg);

static int for_each_selecting(const struct srt_module_hooks *h, const srt_hook_slot *s,
                              srt_hook_call *call, const srt_tensor_view *rows, per_req_fn fn,
                              void *arg)
{
    const srt_batch_ctx *b = call->batch;
    int rc = SRT_OK;

    if (s->reqs == NULL || s->reqs->n == 0 || b == NULL || b->request_ids == NULL)
        return SRT_OK;
    for (int32_t t = 0; t < b->n_tokens; ) {
        int32_t end = t + 1;
        while (end < b->n_tokens && b->request_ids[end] == b->request_ids[t])
            end++;
        const srt_hook_req *e = srt_hook_req_find(s->reqs, b->request_ids[t]);
        int k = selected(e, s->spec_name);
        if (k >= 0) {
            if (rows->ndim < 1 || rows->shape[0] != b->n_tokens) {
                /* rows are not tokens here (lm_head's logit rows): the request's rows cannot
                 * be told apart, so the hook is not called rather than see other requests */
                srt_log(SRT_LOG_DEBUG, "per-request hook '%s' skipped on %s: its rows are "
                        "not the batch's tokens", s->spec_name, call->module->name);
                return SRT_OK;
            }
            srt_batch_ctx sub = *b;
            const srt_batch_ctx *saved = call->batch;
            sub.n_tokens = end - t;
            sub.request_ids = b->request_ids + t;
            sub.positions = b->positions ? b->positions + t : NULL;
            sub.n_seqs = 1;
            call->batch = &sub;
            call->request_id = b->request_ids[t];
            call->request_config_json = e->config[k];
            call->request_host = &e->host[k].host;
            if (fn(h, s, call, t, end - t, arg) != SRT_OK)
                rc = SRT_ERROR;
            call->batch = saved;
            call->request_id = 0;
            call->request_config_json = NULL;
            call->request_host = NULL;
            if (rc != SRT_OK)
                return rc;
        }
        t = end;
    }
    return rc;
}

/* A per-request pre-hook sees the request's rows of the inputs; values it puts in a buffer
 * of its own are copied into those rows (the module reads them from there). */
static int pre_one(const struct srt_module_hooks *h, const srt_hook_slot *s,
                   srt_hook_call *call, int32_t start, int32_t len, void *arg)
{
    srt_module_args *full = arg;
    int32_t n_tokens = (int32_t)full->inputs[0].shape[0];
    srt_module_args a = *full, cut;

    cut_args(&a, n_tokens, start, len);
    cut = a;
    if (s->hook->forward_pre(s->hook, call, &a) < 0) {
        srt_log(SRT_LOG_ERROR, "forward pre-hook '%s' (id %lld) failed on %s for request %llu",
                s->spec_name, (long long)s->id, call->module->name,
                (unsigned long long)call->request_id);
        return SRT_ERROR;
    }
    if (!inputs_unchanged_shape(&cut, &a))
        return SRT_ERROR;
    for (int i = 0; i < a.n_inputs; i++)
        if (a.inputs[i].data != cut.inputs[i].data &&
            apply_replacement(h, s, call->module->name, &cut.inputs[i], &a.inputs[i]) != SRT_OK)
            return SRT_ERROR;
    return SRT_OK;
}

typedef struct post_arg {
    srt_module_args *a;
    srt_tensor_view *output;
    int              status;
} post_arg;

static int post_one(const struct srt_module_hooks *h, const srt_hook_slot *s,
                    srt_hook_call *call, int32_t start, int32_t len, void *arg)
{
    post_arg *p = arg;
    int32_t n_tokens = (int32_t)p->output->shape[0];
    srt_module_args a = *p->a;
    srt_tensor_view out = *p->output, repl;
    int hrc;

    cut_args(&a, n_tokens, start, len);
    cut_rows(&out, n_tokens, start, len);
    repl.data = NULL;
    hrc = s->hook->forward(s->hook, call, &a, &out, &repl);
    if (hrc < 0) {
        srt_log(SRT_LOG_ERROR, "forward hook '%s' (id %lld) failed on %s for request %llu",
                s->spec_name, (long long)s->id, call->module->name,
                (unsigned long long)call->request_id);
        return SRT_ERROR;
    }
    if (hrc == SRT_HOOK_REPLACED && p->status == SRT_OK)
        return apply_replacement(h, s, call->module->name, &out, &repl);
    return SRT_OK;
}

static int run_post_hooks(const srt_module *m, const struct srt_module_hooks *h,
                          srt_hook_call *call, srt_module_args *a, srt_tensor_view *output,
                          int rc)
{
    call->is_pre = 0;
    for (int i = 0; i < h->n_post; i++) {
        const srt_hook_slot *s = &h->post[i];
        srt_tensor_view repl;
        int32_t saved_kwargs = a->n_kwargs;
        int hrc;

        if (rc != SRT_OK && !s->always_call)
            continue;
        repl.data = NULL;
        call->forward_status = rc;
        call->spec_name = s->spec_name;
        call->handle_id = s->id;
        call->is_global = s->is_global;
        call->host = s->host;
        if (s->device || s->hook->forward == NULL) {
            if ((s->device ? run_post_device(h, s, call, a, output)
                           : no_entry(s, m->info.name)) != SRT_OK)
                rc = SRT_ERROR;
            continue;
        }
        /* Hidden for the call only (the args may be the caller's). */
        if (!s->with_kwargs)
            a->n_kwargs = 0;
        if (s->per_request) {
            post_arg pa = { a, output, rc };
            hrc = for_each_selecting(h, s, call, output, post_one, &pa);
            a->n_kwargs = saved_kwargs;
            if (hrc != SRT_OK)
                rc = SRT_ERROR;
            continue;
        }
        hrc = s->hook->forward(s->hook, call, a, output, &repl);
        a->n_kwargs = saved_kwargs;
        if (hrc < 0) {
            srt_log(SRT_LOG_ERROR, "forward hook '%s' (id %lld) failed on %s",
                    s->spec_name, (long long)s->id, m->info.name);
            rc = SRT_ERROR;
        } else if (hrc == SRT_HOOK_REPLACED && rc == SRT_OK) {
            if (apply_replacement(h, s, m->info.name, output, &repl) != SRT_OK)
                rc = SRT_ERROR;
        }
    }
    return rc;
}

/* With pre-hooks: they work on a private copy of the args, so input replacements apply to
 * this call only. Kept out of line: the copy is large and forward-hook-only modules skip it. */
static __attribute__((noinline)) int dispatch_with_pre(srt_module *m,
                                                       const struct srt_module_hooks *h,
                                                       srt_hook_call *call, srt_module_fn fn,
                                                       void *self, const srt_module_args *args,
                                                       srt_tensor_view *output)
{
    srt_module_args a = *args;
    int rc = SRT_OK;

    for (int i = 0; i < h->n_pre; i++) {
        if (run_pre_hook(h, &h->pre[i], call, &a) != SRT_OK) {
            rc = SRT_ERROR;
            break;
        }
    }
    if (rc == SRT_OK)
        rc = fn(self, call->batch, &a, output) == SRT_OK ? SRT_OK : SRT_ERROR;
    return run_post_hooks(m, h, call, &a, output, rc);
}

int srt_hooks_dispatch(srt_module *m, const srt_batch_ctx *batch, srt_module_fn fn,
                       void *self, srt_module_args *args, srt_tensor_view *output)
{
    const struct srt_module_hooks *h = m->hooks;
    srt_hook_call call;
    int rc;

    if (h == NULL)
        return fn(self, batch, args, output);
    call.struct_size = sizeof call;
    call.forward_status = SRT_OK;
    call.module = &m->info;
    call.batch = batch;
    call.spec_name = "";
    call.handle_id = 0;
    call.is_global = 0;
    call.is_pre = 1;
    call.host = NULL;
    call.request_id = 0;
    call.request_config_json = NULL;
    call.request_host = NULL;
    if (h->n_pre > 0)
        return dispatch_with_pre(m, h, &call, fn, self, args, output);
    rc = fn(self, batch, args, output) == SRT_OK ? SRT_OK : SRT_ERROR;
    return run_post_hooks(m, h, &call, args, output, rc);
}
