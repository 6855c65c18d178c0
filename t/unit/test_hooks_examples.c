/* The example hook libraries (src/hooks/examples) on a small module tree with a real
 * batch layout: activation logger, steering, hidden-state capture. */
#include <math.h>

#include <yajl/yajl_tree.h>

#include "tap.h"
#include "test_hooks_util.h"

#ifndef HOOK_EXAMPLE_LIBDIR
#define HOOK_EXAMPLE_LIBDIR "build/lib"
#endif

#define T 3      /* tokens in the batch */
#define H 4      /* hidden size */

enum { M_ROOT, M_MODEL, M_LAYER0, M_NORM, N_MODS };
static const char *names[N_MODS] = { "", "model", "model.layers.0", "model.norm" };
static srt_module mods[N_MODS];
static uint64_t rids[T] = { 5, 5, 9 };
static int32_t  pos[T] = { 0, 1, 0 };
static int use_bf16;

/* Leaf: y = x + 1. Inner modules call their children in order. */
static int leaf_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *o)
{
    (void)self;
    (void)b;
    for (int i = 0; i < T * H; i++) {
        if (use_bf16) {
            /* bf16 in, bf16 out: exact for small integers */
            uint16_t v;
            float f;
            uint32_t bits;
            memcpy(&v, (const char *)a->inputs[0].data + 2 * i, 2);
            bits = (uint32_t)v << 16;
            memcpy(&f, &bits, 4);
            f += 1;
            memcpy(&bits, &f, 4);
            v = (uint16_t)(bits >> 16);
            memcpy((char *)o->data + 2 * i, &v, 2);
        } else {
            ((float *)o->data)[i] = ((const float *)a->inputs[0].data)[i] + 1;
        }
    }
    return SRT_OK;
}

static srt_tensor_view view(void *data)
{
    srt_tensor_view v = f32_view(data, T, H);
    if (use_bf16)
        v.dtype = SRT_HOOK_DTYPE_BF16;
    return v;
}

/* Runs model.layers.0 then model.norm on x; y receives the norm's output. */
static int forward(void *x, void *y)
{
    srt_batch_ctx b = { SRT_FORWARD_PREFILL, T, rids, pos, 2, 0, 1 };
    char mid[T * H * 4];
    srt_module_args a;
    srt_tensor_view o;

    memset(&a, 0, sizeof a);
    a.n_inputs = 1;
    a.inputs[0] = view(x);
    o = view(mid);
    if (srt_module_forward(&mods[M_LAYER0], &b, leaf_fn, NULL, &a, &o) != SRT_OK)
        return SRT_ERROR;
    a.inputs[0] = view(mid);
    o = view(y);
    return srt_module_forward(&mods[M_NORM], &b, leaf_fn, NULL, &a, &o);
}

static srt_hook_registry *load(const char *json, int *rc, srt_err *err)
{
    srt_hook_registry *reg;
    for (int i = 0; i < N_MODS; i++) {
        mods[i].info.name = names[i];
        mods[i].info.class_name = i == M_NORM ? "LlamaRMSNorm" : "Module";
        mods[i].info.index = i;
    }
    reg = srt_hook_registry_create(mods, N_MODS, err);
    srt_hook_registry_set_search_path(reg, HOOK_EXAMPLE_LIBDIR, err);
    *rc = srt_hook_registry_load_json(reg, json, strlen(json), "test", err);
    return reg;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    static char buf[1 << 16];
    size_t n;
    if (!f)
        return NULL;
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The i-th line of text parsed as JSON (caller frees). */
static yajl_val line_json(const char *text, int i)
{
    char line[8192], eb[128];
    const char *p = text;
    for (int k = 0; k < i && p; k++) {
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    if (!p || !*p)
        return NULL;
    size_t n = strcspn(p, "\n");
    if (n >= sizeof line)
        return NULL;
    memcpy(line, p, n);
    line[n] = '\0';
    return yajl_tree_parse(line, eb, sizeof eb);
}

static double num(yajl_val v, const char *key)
{
    const char *path[] = { key, NULL };
    yajl_val x = yajl_tree_get(v, path, yajl_t_number);
    return x ? YAJL_GET_DOUBLE(x) : NAN;
}

static const char *str(yajl_val v, const char *key)
{
    const char *path[] = { key, NULL };
    yajl_val x = yajl_tree_get(v, path, yajl_t_string);
    return x ? x->u.string : "";
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

static void test_actlog(void)
{
    char spec[1024];
    srt_err err;
    int rc;
    float x[T * H], y[T * H];
    char *text;
    yajl_val l0, l1;

    for (int i = 0; i < T * H; i++)
        x[i] = (float)i;                 /* rows: [0..3], [4..7], [8..11] */
    snprintf(spec, sizeof spec,
             "{\"forward_hooks\": [{\"name\": \"log\", \"target_modules\": [\"model.layers.0\"],"
             " \"hook_factory\": \"libsrt_hook_actlog.so:srt_actlog_factory\","
             " \"config\": {\"path\": \"%s\"}}],"
             " \"forward_pre_hooks\": [{\"name\": \"login\", \"target_modules\": [\"model.norm\"],"
             " \"hook_factory\": \"libsrt_hook_actlog.so:srt_actlog_factory\","
             " \"config\": {\"path\": \"%s\"}}]}", tmp_path("act.jsonl"), tmp_path("act.jsonl"));
    srt_hook_registry *reg = load(spec, &rc, &err);
    is_int(rc, SRT_OK, "actlog spec loads: %s", rc ? err.msg : "");
    is_int(forward(x, y), SRT_OK, "forward with the logger");
    text = slurp(tmp_path("act.jsonl"));
    is_int(count_lines(text), 4, "one line per request per hooked call (2 requests x 2 hooks)");
    l0 = line_json(text, 0);
    l1 = line_json(text, 1);
    ok(l0 && strcmp(str(l0, "module"), "model.layers.0") == 0 && strcmp(str(l0, "hook"), "output") == 0 &&
       strcmp(str(l0, "mode"), "prefill") == 0, "line 0: module, hook and mode");
    /* request 5 = rows 0,1 of x+1: values 1..8 */
    ok(l0 && num(l0, "request_id") == 5 && num(l0, "tokens") == 2 && num(l0, "mean") == 4.5 &&
       num(l0, "min") == 1 && num(l0, "max") == 8 && fabs(num(l0, "std") - sqrt(5.25)) < 1e-6,
       "request 5: tokens 2, mean 4.5, min 1, max 8, std sqrt(5.25)");
    ok(l1 && num(l1, "request_id") == 9 && num(l1, "tokens") == 1 && num(l1, "mean") == 10.5 &&
       num(l1, "min") == 9 && num(l1, "max") == 12, "request 9: one token, mean 10.5, min 9, max 12");
    ok(text && strstr(text, "\"shape\":[2,4]") && strstr(text, "\"shape\":[1,4]"),
       "per-request shapes");
    yajl_tree_free(l0);
    yajl_tree_free(l1);
    l0 = line_json(text, 2);
    ok(l0 && strcmp(str(l0, "hook"), "input") == 0 && strcmp(str(l0, "module"), "model.norm") == 0 &&
       num(l0, "mean") == 4.5, "pre-hook form logs the input of model.norm");
    yajl_tree_free(l0);
    srt_hook_registry_free(reg);

    /* bf16 activations go through the host's conversion */
    use_bf16 = 1;
    {
        uint16_t xb[T * H], yb[T * H];
        for (int i = 0; i < T * H; i++) {
            float f = (float)i;
            uint32_t bits;
            memcpy(&bits, &f, 4);
            xb[i] = (uint16_t)(bits >> 16);
        }
        remove(tmp_path("act.jsonl"));
        reg = load(spec, &rc, &err);
        forward(xb, yb);
        text = slurp(tmp_path("act.jsonl"));
        l0 = line_json(text, 0);
        ok(l0 && num(l0, "mean") == 4.5 && num(l0, "max") == 8, "bf16 activations: same statistics");
        yajl_tree_free(l0);
        srt_hook_registry_free(reg);
    }
    use_bf16 = 0;
}

static void test_steer(void)
{
    srt_err err;
    int rc;
    float x[T * H] = { 0 }, y[T * H];
    srt_hook_registry *reg;

    reg = load("[{\"name\": \"steer\", \"target_modules\": [\"model.layers.0\"],"
               " \"hook_factory\": \"libsrt_hook_steer.so:srt_steer_factory\","
               " \"config\": {\"vector\": [1, 2, 3, 4], \"scale\": 0.5, \"request_ids\": [9]}}]",
               &rc, &err);
    is_int(rc, SRT_OK, "steer spec loads: %s", rc ? err.msg : "");
    forward(x, y);
    /* unsteered: 0 + 1 + 1 = 2 everywhere; request 9 (row 2) gets + [0.5,1,1.5,2] */
    ok(y[0] == 2 && y[7] == 2 && y[8] == 2.5f && y[9] == 3 && y[10] == 3.5f && y[11] == 4,
       "only request 9's row is steered by scale * vector (%g %g %g %g)", y[8], y[9], y[10], y[11]);
    srt_hook_registry_free(reg);

    reg = load("{\"forward_pre_hooks\": [{\"name\": \"steer_in\", \"target_modules\": [\"model.norm\"],"
               " \"hook_factory\": \"libsrt_hook_steer.so:srt_steer_factory\","
               " \"config\": {\"vector\": [1, 1, 1, 1]}}]}", &rc, &err);
    forward(x, y);
    ok(rc == SRT_OK && y[0] == 3 && y[11] == 3, "as a pre-hook it steers every token's input");
    srt_hook_registry_free(reg);

    log_clear();
    reg = load("[{\"name\": \"wrongdim\", \"target_modules\": [\"model.norm\"],"
               " \"hook_factory\": \"libsrt_hook_steer.so:srt_steer_factory\","
               " \"config\": {\"vector\": [1, 2]}}]", &rc, &err);
    rc = forward(x, y);
    ok(rc == SRT_ERROR && log_count(SRT_LOG_ERROR, "steer (spec 'wrongdim'): model.norm has last dimension 4, "
                                    "the vector has 2 values") == 1,
       "a vector of the wrong size fails the forward with a clear message");
    srt_hook_registry_free(reg);

    log_clear();
    reg = load("[{\"name\": \"novec\", \"target_modules\": [\"model.norm\"],"
               " \"hook_factory\": \"libsrt_hook_steer.so:srt_steer_factory\"}]", &rc, &err);
    ok(rc == SRT_OK && log_count(SRT_LOG_WARN, "Hook factory 'libsrt_hook_steer.so:srt_steer_factory' "
                                 "for spec 'novec' returned NULL, not registering any hook") == 1 &&
       log_count(SRT_LOG_ERROR, "steer (spec 'novec'): config.vector must be a non-empty list of numbers") == 1,
       "no vector: the factory explains and returns NULL");
    srt_hook_registry_free(reg);
}

static void test_capture(void)
{
    char spec[1024];
    srt_err err;
    int rc;
    float x[T * H], y[T * H];
    char *text;
    yajl_val l;
    srt_hook_registry *reg;

    for (int i = 0; i < T * H; i++)
        x[i] = (float)i * 0.25f;
    snprintf(spec, sizeof spec,
             "[{\"name\": \"cap\", \"target_modules\": [\"model.norm\"],"
             " \"hook_factory\": \"libsrt_hook_capture.so:srt_capture_factory\","
             " \"config\": {\"path\": \"%s\", \"request_ids\": [5]}}]", tmp_path("cap.jsonl"));
    reg = load(spec, &rc, &err);
    is_int(rc, SRT_OK, "capture spec loads: %s", rc ? err.msg : "");
    forward(x, y);
    text = slurp(tmp_path("cap.jsonl"));
    is_int(count_lines(text), 2, "two tokens of request 5 captured, request 9 not");
    l = line_json(text, 1);
    ok(l && num(l, "request_id") == 5 && num(l, "position") == 1 && strcmp(str(l, "module"), "model.norm") == 0,
       "second line: request 5, position 1, model.norm");
    ok(text && strstr(text, "\"values\":[3,3.25,3.5,3.75]"), "values are the module's output (x + 2)");
    yajl_tree_free(l);
    srt_hook_registry_free(reg);

    snprintf(spec, sizeof spec,
             "[{\"name\": \"cap1\", \"target_modules\": [\"model.norm\"],"
             " \"hook_factory\": \"libsrt_hook_capture.so:srt_capture_factory\","
             " \"config\": {\"path\": \"%s\", \"max_tokens\": 1}}]", tmp_path("cap1.jsonl"));
    reg = load(spec, &rc, &err);
    forward(x, y);
    forward(x, y);
    is_int(count_lines(slurp(tmp_path("cap1.jsonl"))), 1, "max_tokens bounds the capture");
    srt_hook_registry_free(reg);

    log_clear();
    reg = load("[{\"name\": \"nopath\", \"target_modules\": [\"model.norm\"],"
               " \"hook_factory\": \"libsrt_hook_capture.so:srt_capture_factory\"}]", &rc, &err);
    ok(rc == SRT_OK && mods[M_NORM].hooks == NULL &&
       log_count(SRT_LOG_ERROR, "capture (spec 'nopath'): config.path is required") == 1,
       "capture without a path registers nothing and says why");
    srt_hook_registry_free(reg);
}

int main(void)
{
    srt_log_set_sink(log_sink, NULL, SRT_LOG_DEBUG);
    make_tmpdir();
    test_actlog();
    test_steer();
    test_capture();
    if (tap_failed)
        log_dump();
    rm_rf_tmpdir();
    return tap_done();
}
