/* Hooks on the real model (SmolLM2-135M-Instruct, Q4_1 GGUF) through the CPU runner:
 * every module is reached once per forward in prefill and decode, observing hooks leave
 * greedy tokens unchanged, a forward hook or a pre-hook that changes activations changes
 * the greedy tokens deterministically, removal restores them, errors propagate. */
#include <yajl/yajl_tree.h>

#include "tap.h"
#include "test_hooks_util.h"
#include "srt/model.h"
#include "srt/sampling.h"

#ifndef HOOK_EXAMPLE_LIBDIR
#define HOOK_EXAMPLE_LIBDIR "build/lib"
#endif

#define N_NEW 10
static const int32_t prompt[] = { 1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511,
                                  308, 34519, 28, 7018, 411, 407, 19712, 8182, 2, 198, 1 };
#define N_PROMPT ((int)(sizeof prompt / sizeof prompt[0]))

static srt_model *model;
static srt_runner *runner;
static const srt_model_config *cfg;
static uint64_t request_id = 41;

/* Greedy generation of N_NEW tokens; returns SRT_OK or the runner's error. */
static int generate(int32_t out[N_NEW], srt_err *err)
{
    int32_t n_ctx = N_PROMPT + N_NEW, slots[64], pos[64];
    uint64_t rids[64];
    srt_kv_pool *kv = NULL;
    float *logits = malloc((size_t)cfg->vocab_size * sizeof *logits);
    int rc = SRT_ERROR;

    for (int i = 0; i < n_ctx; i++) {
        slots[i] = i;
        pos[i] = i;
        rids[i] = request_id;
    }
    const int32_t *seq_slots[1] = { slots };
    if (!logits || srt_kv_pool_create(cfg, n_ctx, SRT_F32, &kv, err) != SRT_OK)
        goto out;
    {
        int32_t start[2] = { 0, N_PROMPT }, len = N_PROMPT;
        srt_forward_batch b = { .n_tokens = N_PROMPT, .token_ids = prompt, .positions = pos,
                                .out_slots = slots, .n_seqs = 1, .seq_start = start, .seq_len = &len,
                                .seq_slots = seq_slots, .request_ids = rids,
                                .forward_mode = SRT_FORWARD_PREFILL };
        if (srt_runner_forward(runner, kv, &b, logits, err) != SRT_OK)
            goto out;
    }
    for (int t = 0; t < N_NEW; t++) {
        int32_t tok = srt_argmax(logits, cfg->vocab_size), p = N_PROMPT + t;
        int32_t start[2] = { 0, 1 }, len = p + 1;
        out[t] = tok;
        if (t == N_NEW - 1)
            break;
        srt_forward_batch b = { .n_tokens = 1, .token_ids = &tok, .positions = &pos[p],
                                .out_slots = &slots[p], .n_seqs = 1, .seq_start = start,
                                .seq_len = &len, .seq_slots = seq_slots, .request_ids = &rids[p],
                                .forward_mode = SRT_FORWARD_DECODE };
        if (srt_runner_forward(runner, kv, &b, logits, err) != SRT_OK)
            goto out;
    }
    rc = SRT_OK;
out:
    srt_kv_pool_free(kv);
    free(logits);
    return rc;
}

static int same(const int32_t *a, const int32_t *b)
{
    return memcmp(a, b, N_NEW * sizeof *a) == 0;
}

static void show(const char *what, const int32_t *t)
{
    char buf[256];
    int o = 0;
    for (int i = 0; i < N_NEW; i++)
        o += snprintf(buf + o, sizeof buf - (size_t)o, "%d ", t[i]);
    tap_diag("%s: %s", what, buf);
}

/* ---- a counting hook attached in-process ---- */
typedef struct counter {
    int   n_modules;
    int  *calls;          /* per module index, this forward */
    int   prefill_calls, decode_calls, bad_ctx;
    int   fail_on;        /* module index whose hook fails, or -1 */
} counter;

static int count_fwd(srt_hook *h, const srt_hook_call *c, const srt_module_args *a,
                     srt_tensor_view *o, srt_tensor_view *r)
{
    counter *k = h->user;
    (void)a; (void)r;
    if (c->module->index >= 0 && c->module->index < k->n_modules)
        k->calls[c->module->index]++;
    if (c->batch->forward_mode == SRT_FORWARD_PREFILL) {
        k->prefill_calls++;
        if (c->batch->n_tokens != N_PROMPT || c->batch->request_ids[0] != request_id ||
            c->batch->positions[N_PROMPT - 1] != N_PROMPT - 1)
            k->bad_ctx++;
    } else {
        k->decode_calls++;
        if (c->batch->n_tokens != 1 || c->batch->request_ids[0] != request_id)
            k->bad_ctx++;
    }
    if (o->data == NULL || o->ndim < 1)
        k->bad_ctx++;
    return c->module->index == k->fail_on ? SRT_HOOK_FAILED : SRT_HOOK_OK;
}

static void test_coverage(srt_hook_registry *reg, srt_module *mods, int n, const int32_t *base)
{
    counter k = { n, calloc((size_t)n, sizeof(int)), 0, 0, 0, -1 };
    srt_hook hook = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), NULL, count_fwd, &k, NULL, NULL, NULL };
    srt_hook_attach_opts o = { .name = "count", .global = 1 };
    srt_err err;
    int32_t toks[N_NEW];
    int64_t id = srt_hook_attach(reg, NULL, &hook, &o, &err);
    int uncalled = 0, wrong = 0, containers = 0;

    ok(id > 0, "global counting hook attached");
    is_int(generate(toks, &err), SRT_OK, "generation with a hook on every module");
    ok(same(toks, base), "an observing hook on every module leaves greedy tokens unchanged");
    for (int i = 0; i < n; i++) {
        /* HF never calls a ModuleList; everything else runs once per forward pass. */
        if (strcmp(mods[i].info.class_name, "ModuleList") == 0) {
            containers++;
            wrong += k.calls[i] != 0;
            continue;
        }
        if (k.calls[i] == 0 && uncalled++ < 3)
            tap_diag("never called: %s", mods[i].info.name);
        if (k.calls[i] != 0 && k.calls[i] != N_NEW) {
            if (wrong++ < 3)
                tap_diag("%s called %d times for %d forwards", mods[i].info.name, k.calls[i], N_NEW);
        }
    }
    is_int(uncalled, 0, "every module except containers is reached through srt_module_forward");
    is_int(wrong, 0, "each exactly once per forward (%d forwards: 1 prefill + %d decode)", N_NEW, N_NEW - 1);
    is_int(k.prefill_calls, n - containers, "prefill pass: one hook call per module");
    is_int(k.decode_calls, (n - containers) * (N_NEW - 1), "decode passes: one hook call per module each");
    is_int(k.bad_ctx, 0, "batch context: mode, token count, request ids and positions are right");

    /* a failing hook fails the step, naming the module */
    k.fail_on = srt_model_find_module(model, "model.layers.3.mlp");
    ok(generate(toks, &err) == SRT_ERROR && strstr(err.msg, "model.layers.3.mlp"),
       "a failing hook fails the forward step: %s", err.msg);
    srt_hook_delete(reg, id, &err);
    free(k.calls);
}

static int64_t ids_of_spec(srt_hook_registry *reg, const char *name, int64_t *ids, int cap)
{
    char *json = NULL;
    size_t len;
    srt_err err;
    int n = 0;
    char eb[64];
    yajl_val root;
    srt_hook_registry_list_json(reg, &json, &len, &err);
    root = yajl_tree_parse(json, eb, sizeof eb);
    const char *ph[] = { "hooks", NULL };
    yajl_val hooks = yajl_tree_get(root, ph, yajl_t_array);
    for (size_t i = 0; hooks && i < hooks->u.array.len && n < cap; i++) {
        const char *pn[] = { "name", NULL }, *pi[] = { "id", NULL };
        yajl_val h = hooks->u.array.values[i];
        yajl_val nm = yajl_tree_get(h, pn, yajl_t_string), id = yajl_tree_get(h, pi, yajl_t_number);
        if (nm && id && strcmp(nm->u.string, name) == 0)
            ids[n++] = YAJL_GET_INTEGER(id);
    }
    yajl_tree_free(root);
    free(json);
    return n;
}

static char *steer_spec(const char *list, const char *target, double value, double scale)
{
    size_t cap = (size_t)cfg->hidden_size * 16 + 512;
    char *s = malloc(cap);
    int o = snprintf(s, cap, "{\"%s\": [{\"name\": \"steer\", \"target_modules\": [\"%s\"],"
                     " \"hook_factory\": \"libsrt_hook_steer.so:srt_steer_factory\","
                     " \"config\": {\"scale\": %g, \"vector\": [", list, target, scale);
    for (int i = 0; i < cfg->hidden_size; i++)
        o += snprintf(s + o, cap - (size_t)o, "%s%g", i ? "," : "", (i % 2 ? -value : value));
    snprintf(s + o, cap - (size_t)o, "]}}]}");
    return s;
}

static void test_steering(srt_hook_registry *reg, const int32_t *base)
{
    srt_err err;
    int32_t a[N_NEW], b[N_NEW], c[N_NEW];
    int64_t ids[4];
    char *spec = steer_spec("forward_hooks", "model.layers.12", 1.0, 6.0);
    int rc = srt_hook_registry_load_json(reg, spec, strlen(spec), "steer", &err);
    free(spec);

    is_int(rc, SRT_OK, "steering spec on model.layers.12 loads: %s", rc ? err.msg : "");
    is_int(generate(a, &err), SRT_OK, "steered generation runs");
    generate(b, &err);
    show("steered", a);
    ok(!same(a, base), "a forward hook changing a layer's output changes the greedy tokens");
    ok(same(a, b), "deterministically: the same tokens twice");
    is_int(ids_of_spec(reg, "steer", ids, 4), 1, "one registration");
    srt_hook_remove(reg, ids[0], &err);
    generate(c, &err);
    ok(same(c, base), "removing the hook restores the original tokens");
    srt_hook_readd(reg, ids[0], &err);
    generate(c, &err);
    ok(same(c, a), "re-adding it brings the steered tokens back");
    srt_hook_delete(reg, ids[0], &err);

    spec = steer_spec("forward_pre_hooks", "model.layers.12", 1.0, 6.0);
    rc = srt_hook_registry_load_json(reg, spec, strlen(spec), "steer-pre", &err);
    free(spec);
    is_int(rc, SRT_OK, "pre-hook steering spec on model.layers.12 loads");
    generate(a, &err);
    generate(b, &err);
    show("pre-steered", a);
    ok(!same(a, base) && same(a, b), "a pre-hook changing a module's input changes the tokens, deterministically");
    ids_of_spec(reg, "steer", ids, 4);
    srt_hook_delete(reg, ids[0], &err);
    generate(c, &err);
    ok(same(c, base), "deleting it restores the original tokens");
}

static void test_actlog(srt_hook_registry *reg, const int32_t *base)
{
    char spec[512], *text = NULL;
    srt_err err;
    int32_t toks[N_NEW];
    int64_t ids[64];
    FILE *f;
    long size;
    int lines = 0, decode_lines = 0;

    snprintf(spec, sizeof spec, "{\"forward_hooks\": [{\"name\": \"log\", \"target_modules\": [\"model.layers.*.mlp\"],"
             " \"hook_factory\": \"libsrt_hook_actlog.so:srt_actlog_factory\", \"config\": {\"path\": \"%s\"}}]}",
             tmp_path("act.jsonl"));
    is_int(srt_hook_registry_load_json(reg, spec, strlen(spec), "actlog", &err), SRT_OK, "activation logger loads");
    is_int(ids_of_spec(reg, "log", ids, 64), cfg->n_layers, "registered on every layer's MLP (%d)", cfg->n_layers);
    generate(toks, &err);
    ok(same(toks, base), "logging does not change the tokens");
    f = fopen(tmp_path("act.jsonl"), "r");
    if (f) {
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        rewind(f);
        text = calloc(1, (size_t)size + 1);
        if (fread(text, 1, (size_t)size, f) != (size_t)size)
            size = 0;
        fclose(f);
        for (char *p = text; (p = strchr(p, '\n')); p++)
            lines++;
        for (char *p = text; (p = strstr(p, "\"mode\":\"decode\"")); p++)
            decode_lines++;
    }
    is_int(lines, cfg->n_layers * N_NEW, "one JSON line per MLP per forward");
    is_int(decode_lines, cfg->n_layers * (N_NEW - 1), "decode passes are logged too");
    ok(text && strstr(text, "{\"module\":\"model.layers.0.mlp\",\"class\":\"LlamaMLP\",\"hook\":\"output\","
                            "\"mode\":\"prefill\",\"tp_rank\":0,\"request_id\":41,\"tokens\":22,\"shape\":[22,576]"),
       "first line: module, class, prefill, request 41, 22 tokens x 576");
    free(text);
    srt_hook_remove_spec(reg, "log", &err);
}

int main(void)
{
    const char *dir = getenv("SRT_MODEL_DIR") ? getenv("SRT_MODEL_DIR") : ".cache/models";
    char path[512];
    srt_err err;
    srt_module *mods;
    int n;
    int32_t base[N_NEW], again[N_NEW];
    srt_hook_registry *reg;

    srt_log_set_sink(log_sink, NULL, SRT_LOG_DEBUG);
    snprintf(path, sizeof path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    if (access(path, R_OK) != 0) {
        const char *req = getenv("SRT_REQUIRE_MODELS");
        ok(!(req && strcmp(req, "1") == 0), "model %s is present (SRT_REQUIRE_MODELS=1); run scripts/fetch-model.sh", path);
        if (!(req && strcmp(req, "1") == 0))
            tap_diag("model %s absent: run scripts/fetch-model.sh", path);
        return tap_done();
    }
    make_tmpdir();
    if (!ok(srt_model_load(path, &model, &err) == SRT_OK, "SmolLM2 loads: %s", err.msg))
        return tap_done();
    cfg = srt_model_config_of(model);
    srt_runner_opts ro = { .max_batch_tokens = 64, .max_seqs = 1, .n_threads = 2 };
    if (!ok(srt_runner_create(model, &ro, &runner, &err) == SRT_OK, "runner: %s", err.msg))
        return tap_done();
    mods = srt_model_modules(model, &n);
    reg = srt_hook_registry_create(mods, n, &err);
    ok(reg != NULL, "registry over the model's %d modules", n);
    srt_hook_registry_set_search_path(reg, HOOK_EXAMPLE_LIBDIR, &err);

    is_int(generate(base, &err), SRT_OK, "baseline greedy generation");
    show("baseline", base);
    generate(again, &err);
    ok(same(base, again), "baseline is deterministic");
    {
        int hooked = 0;
        for (int i = 0; i < n; i++)
            hooked += mods[i].hooks != NULL;
        is_int(hooked, 0, "no hooks: every module on the fast path");
    }

    test_coverage(reg, mods, n, base);
    test_steering(reg, base);
    test_actlog(reg, base);

    srt_hook_registry_free(reg);
    srt_runner_free(runner);
    srt_model_free(model);
    if (tap_failed)
        log_dump();
    rm_rf_tmpdir();
    return tap_done();
}
