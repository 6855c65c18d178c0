/* Per-request hooks (ABI 1.1): a spec marked per_request runs once per request that selected
 * it, on that request's rows only, with that request's config; rows of other requests are
 * bit-identical to a run without hooks. Also the clamp of a selection read from shared memory
 * and the radix cache's namespaces (cache_salt / selection as part of the cache key);
 * control vectors from a GGUF written here (layer range, scale, per request, one layer deleted). */
#include <math.h>

#include "tap.h"
#include "test_hooks_util.h"
#include "cache/radix_cache.h"
#include "srt/request.h"

#define D 3
#define T 6

static srt_module mod;

/* out = 0.5 * in + 0.25 (values a hook must not perturb on other rows) */
static int half_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *o)
{
    const float *x = a->inputs[0].data;
    float *y = o->data;
    (void)self; (void)b;
    for (int64_t i = 0; i < a->inputs[0].shape[0] * D; i++)
        y[i] = x[i] * 0.5f + 0.25f;
    return SRT_OK;
}

static int n_calls;
static uint64_t seen_ids[16];
static int32_t seen_rows[16], seen_tokens[16], seen_pos0[16], has_fields;

/* Adds the request's "add" (default: the spec's "add") to every value of its rows. */
static int add_fwd(srt_hook *h, const srt_hook_call *c, const srt_module_args *a,
                   srt_tensor_view *out, srt_tensor_view *repl)
{
    double add = 0;
    (void)h; (void)a; (void)repl;
    has_fields = SRT_HOOK_CALL_HAS(c, request_host);
    if (!has_fields || c->request_host == NULL ||
        c->request_host->config_number(c->request_host, "add", &add) != 0)
        c->host->config_number(c->host, "add", &add);
    if (n_calls < 16) {
        seen_ids[n_calls] = c->request_id;
        seen_rows[n_calls] = (int32_t)out->shape[0];
        seen_tokens[n_calls] = c->batch->n_tokens;
        seen_pos0[n_calls] = c->batch->positions[0];
    }
    n_calls++;
    float *y = out->data;
    for (int64_t i = 0; i < out->shape[0] * D; i++)
        y[i] += (float)add;
    return SRT_OK;
}

static float pre_buf[T * D];
/* Replaces its rows' input by 1.0 through a buffer of its own. */
static int one_pre(srt_hook *h, const srt_hook_call *c, srt_module_args *a)
{
    (void)h; (void)c;
    for (int64_t i = 0; i < a->inputs[0].shape[0] * D; i++)
        pre_buf[i] = 1.0f;
    a->inputs[0].data = pre_buf;
    return SRT_OK;
}

static srt_tensor_view view(float *p, int64_t rows)
{
    srt_tensor_view v = { SRT_HOOK_DTYPE_F32, SRT_HOOK_DEVICE_CPU, 0, 2, { rows, D }, { D, 1 }, p };
    return v;
}

/* 3 sequences in one mixed batch: request 10 (2 prefill tokens), 20 (3), 30 (1 decode). */
static const uint64_t rids[T] = { 10, 10, 20, 20, 20, 30 };
static const int32_t pos[T] = { 0, 1, 4, 5, 6, 9 };

static void run(float y[T * D])
{
    float x[T * D];
    srt_batch_ctx b = { SRT_FORWARD_MIXED, T, rids, pos, 3, 0, 1 };
    srt_module_args a;
    srt_tensor_view o = view(y, T);

    for (int i = 0; i < T * D; i++)
        x[i] = (float)i * 0.37f - 1.1f;
    memset(&a, 0, sizeof a);
    a.n_inputs = 1;
    a.inputs[0] = view(x, T);
    ok(srt_module_forward(&mod, &b, half_fn, NULL, &a, &o) == SRT_OK, "forward ok");
}

static srt_request_hooks sel(const char *name, const char *config)
{
    srt_request_hooks h;
    memset(&h, 0, sizeof h);
    h.n = 1;
    snprintf(h.name[0], sizeof h.name[0], "%s", name);
    if (config) {
        h.config_len[0] = (uint32_t)strlen(config);
        memcpy(h.config_text, config, h.config_len[0] + 1);
    }
    return h;
}

static void test_rows_and_config(void)
{
    srt_err err = {{0}};
    srt_module *mp = &mod;
    const char *nm = "model.layers.0";
    float base[T * D], y[T * D];
    static srt_hook fwd = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), NULL, add_fwd, NULL, NULL, NULL, NULL };
    static srt_hook always = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), NULL, add_fwd, NULL, NULL, NULL, NULL };
    srt_hook_attach_opts o = { .name = "steer", .per_request = 1 };

    memset(&mod, 0, sizeof mod);
    mod.info.name = nm;
    mod.info.class_name = "LlamaDecoderLayer";
    run(base);

    srt_hook_registry *reg = srt_hook_registry_create_named(&mp, &nm, 1, &err);
    ok(reg != NULL, "registry");
    ok(srt_hook_attach(reg, nm, &fwd, &o, &err) > 0, "attach a per-request forward hook: %s", err.msg);
    n_calls = 0;
    run(y);
    is_int(n_calls, 0, "no request selected it: never called");
    ok(memcmp(y, base, sizeof y) == 0, "and the output is bit-identical");

    srt_request_hooks s20 = sel("steer", "{\"add\": 5}"), s30 = sel("steer", NULL);
    ok(srt_hook_request_begin(reg, 20, &s20, &err) == SRT_OK, "request 20 selects steer {add: 5}");
    ok(srt_hook_request_begin(reg, 30, &s30, &err) == SRT_OK, "request 30 selects steer, no config");
    srt_request_hooks bad = sel("nope", NULL);
    ok(srt_hook_request_begin(reg, 40, &bad, &err) == SRT_ERROR && strstr(err.msg, "'nope'"),
       "an unknown name is refused, naming it: %s", err.msg);
    n_calls = 0;
    run(y);
    is_int(n_calls, 2, "called once per selecting request");
    ok(has_fields, "the call has the ABI 1.1 fields");
    ok(seen_ids[0] == 20 && seen_rows[0] == 3 && seen_tokens[0] == 3 && seen_pos0[0] == 4,
       "request 20: its 3 rows, its batch view (positions from 4)");
    ok(seen_ids[1] == 30 && seen_rows[1] == 1 && seen_tokens[1] == 1 && seen_pos0[1] == 9,
       "request 30: its 1 row");
    ok(memcmp(y, base, 2 * D * sizeof(float)) == 0, "request 10's rows are bit-identical");
    int good = 1;
    for (int i = 2 * D; i < 5 * D; i++)
        good &= y[i] == base[i] + 5.0f;
    ok(good, "request 20's rows got its config's add = 5");
    ok(memcmp(y + 5 * D, base + 5 * D, D * sizeof(float)) == 0,
       "request 30 without an 'add' in its config or the spec's: unchanged");

    srt_hook_request_end(reg, 20);
    srt_hook_request_end(reg, 30);
    n_calls = 0;
    run(y);
    ok(n_calls == 0 && memcmp(y, base, sizeof y) == 0, "after the requests ended: untouched");

    /* a spec that is not per_request cannot be selected, and runs for everyone */
    srt_hook_attach_opts g = { .name = "always" };
    ok(srt_hook_attach(reg, nm, &always, &g, &err) > 0, "attach an always-on hook");
    srt_request_hooks sa = sel("always", NULL);
    ok(srt_hook_request_begin(reg, 50, &sa, &err) == SRT_ERROR && strstr(err.msg, "per-request"),
       "selecting a spec without per_request is refused: %s", err.msg);
    srt_hook_registry_free(reg);

    ok(srt_hook_request_begin(NULL, 1, &s20, &err) == SRT_ERROR, "no registry: a selection fails");
    srt_request_hooks none;
    memset(&none, 0, sizeof none);
    ok(srt_hook_request_begin(NULL, 1, &none, &err) == SRT_OK, "no registry, no selection: fine");
}

static void test_pre_rows(void)
{
    srt_err err = {{0}};
    srt_module *mp = &mod;
    const char *nm = "model.layers.0";
    float base[T * D], y[T * D];
    static srt_hook pre = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), one_pre, NULL, NULL, NULL, NULL, NULL };
    srt_hook_attach_opts o = { .name = "ones", .pre = 1, .per_request = 1 };

    run(base);
    srt_hook_registry *reg = srt_hook_registry_create_named(&mp, &nm, 1, &err);
    ok(srt_hook_attach(reg, nm, &pre, &o, &err) > 0, "attach a per-request pre-hook");
    srt_request_hooks s = sel("ones", NULL);
    srt_hook_request_begin(reg, 10, &s, &err);
    run(y);
    int good = 1;
    for (int i = 0; i < 2 * D; i++)
        good &= y[i] == 0.75f;
    ok(good, "request 10's rows read the pre-hook's replacement input");
    ok(memcmp(y + 2 * D, base + 2 * D, 4 * D * sizeof(float)) == 0,
       "the other requests' rows are bit-identical");
    srt_hook_registry_free(reg);
}

static void test_clamp(void)
{
    srt_request_hooks h;
    memset(&h, 'x', sizeof h);
    h.n = 99;
    h.config_off[0] = 1u << 30;
    h.config_off[1] = 0;
    h.config_len[1] = SRT_REQ_HOOK_CONFIG_MAX;
    srt_request_hooks_clamp(&h);
    is_int(h.n, SRT_REQ_MAX_HOOKS, "n clamped");
    ok(h.config_len[0] == 0 && h.config_len[1] == 0, "configs out of range dropped");
    ok(strlen(h.name[0]) == SRT_REQ_HOOK_NAME_MAX - 1, "names NUL-terminated");
}

static void test_radix_ns(void)
{
    srt_kv_alloc kv;
    srt_radix_cache c;
    srt_err err = {{0}};
    int32_t key[] = { 5, 6, 7, 8 }, slots[4], out[4], last;

    srt_kv_alloc_init(&kv, 64, 1, &err);
    srt_radix_init(&c, &kv, 0, &err);
    srt_kv_alloc_extend(&kv, slots, 0, 4);
    is_int(srt_radix_insert_ns(&c, 77, key, slots, 4), 0, "insert under namespace 77");
    is_int(srt_radix_peek_prefix(&c, key, 4), 0, "the shared namespace does not see it");
    is_int(srt_radix_peek_prefix_ns(&c, 78, key, 4), 0, "another namespace does not see it");
    is_int(srt_radix_match_prefix_ns(&c, 77, key, 3, out, &last), 3, "its own namespace does (split)");
    ok(srt_radix_check(&c, &err) == SRT_OK, "tree valid after the split: %s", err.msg);
    int32_t slots0[4];
    srt_kv_alloc_extend(&kv, slots0, 0, 4);
    is_int(srt_radix_insert(&c, key, slots0, 4), 0, "the same tokens in the shared namespace are new");
    is_int(srt_radix_peek_prefix(&c, key, 4), 4, "and found there");
    is_int(srt_radix_peek_prefix_ns(&c, 77, key, 4), 4, "namespace 77 still finds its own");
    srt_radix_match_prefix(&c, key, 4, out, &last);
    ok(out[0] == slots0[0], "shared match returns the shared slots");
    srt_radix_match_prefix_ns(&c, 77, key, 4, out, &last);
    ok(out[0] == slots[0], "namespace 77 match returns its own slots");
    ok(srt_radix_check(&c, &err) == SRT_OK, "tree valid: %s", err.msg);
    srt_radix_destroy(&c);
    srt_kv_alloc_destroy(&kv);
}


/* ---- control vectors: a GGUF written here, loaded onto four fake decoder layers ---- */

static void put(FILE *f, const void *p, size_t n) { fwrite(p, 1, n, f); }
static void put_u32(FILE *f, uint32_t v) { put(f, &v, 4); }
static void put_u64(FILE *f, uint64_t v) { put(f, &v, 8); }

/* GGUF v3, no metadata, 1-D F32 tensors direction.<il[i]> of D values dirs[i]. */
static void write_cvec(const char *path, const int *il, float dirs[][D], int n)
{
    FILE *f = fopen(path, "wb");
    uint64_t off = 0;
    put(f, "GGUF", 4);
    put_u32(f, 3);
    put_u64(f, (uint64_t)n);
    put_u64(f, 0);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "direction.%d", il[i]);
        put_u64(f, strlen(name));
        put(f, name, strlen(name));
        put_u32(f, 1);
        put_u64(f, D);
        put_u32(f, 0);   /* F32 */
        put_u64(f, off);
        off += 32;       /* each tensor padded to the alignment */
    }
    long pos = ftell(f);
    while (pos % 32) { fputc(0, f); pos++; }
    for (int i = 0; i < n; i++) {
        char pad[32] = { 0 };
        put(f, dirs[i], sizeof dirs[i]);
        put(f, pad, 32 - sizeof dirs[i]);
    }
    fclose(f);
}

static int copy_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *o)
{
    (void)self; (void)b;
    memcpy(o->data, a->inputs[0].data, (size_t)a->inputs[0].shape[0] * D * sizeof(float));
    return SRT_OK;
}

static void run_layers(srt_module *layers, float y[4][T * D])
{
    srt_batch_ctx b = { SRT_FORWARD_MIXED, T, rids, pos, 3, 0, 1 };
    for (int l = 0; l < 4; l++) {
        float x[T * D];
        srt_module_args a;
        srt_tensor_view o = view(y[l], T);
        for (int i = 0; i < T * D; i++)
            x[i] = (float)i * 0.25f;
        memset(&a, 0, sizeof a);
        a.n_inputs = 1;
        a.inputs[0] = view(x, T);
        srt_module_forward(&layers[l], &b, copy_fn, NULL, &a, &o);
    }
}

static void test_control_vector(void)
{
    char path[] = "/tmp/srt-cvec-XXXXXX";
    int fd = mkstemp(path);
    float dirs[3][D] = { { 1, 2, 3 }, { 0.5f, 0.5f, 0.5f }, { 9, 9, 9 } };
    int il[3] = { 1, 2, 3 };
    static const char *names[4] = { "model.layers.0", "model.layers.1", "model.layers.2", "model.layers.3" };
    srt_module layers[4], *ptrs[4];
    float y[4][T * D];
    srt_err err = {{0}};

    close(fd);
    write_cvec(path, il, dirs, 3);
    ok(srt_hook_control_vector_check(path, &err) == SRT_OK, "control vector file checks: %s", err.msg);
    memset(layers, 0, sizeof layers);
    for (int l = 0; l < 4; l++) {
        layers[l].info.name = names[l];
        ptrs[l] = &layers[l];
    }
    srt_hook_registry *reg = srt_hook_registry_create_named(ptrs, names, 4, &err);
    srt_control_vector_opts o = { .path = path, .name = "cv", .scale = 2, .layer_start = 1,
                                  .layer_end = 2 };
    ok(srt_hook_control_vector_load(reg, &o, 4, &err) == SRT_OK, "loaded on layers 1-2: %s", err.msg);
    is_int(srt_hook_registry_active(reg), 2, "two layer hooks");
    run_layers(layers, y);
    int good = 1;
    for (int i = 0; i < T * D; i++) {
        float x = (float)i * 0.25f;
        good &= y[0][i] == x && y[1][i] == x + dirs[0][i % D] * 2.0f &&
                y[2][i] == x + dirs[1][i % D] * 2.0f && y[3][i] == x;
    }
    ok(good, "layer L gets scale * direction.L inside the range only (layer 3 is outside)");
    ok(srt_hook_delete(reg, 1, &err) == SRT_OK, "deleting one layer's hook");
    run_layers(layers, y);
    ok(y[1][0] == 0.0f && y[2][0] == 0.0f + 0.5f * 2.0f, "the other layer keeps its vector");
    srt_hook_registry_free(reg);

    /* per request: only the selecting request's rows, with its own scale */
    reg = srt_hook_registry_create_named(ptrs, names, 4, &err);
    o.per_request = 1;
    o.layer_end = 0;    /* llama.cpp's default: up to n_layers - 1 */
    ok(srt_hook_control_vector_load(reg, &o, 4, &err) == SRT_OK, "loaded per request");
    is_int(srt_hook_registry_active(reg), 3, "layers 1..3");
    srt_request_hooks s = sel("cv", "{\"scale\": 0.5}");
    srt_hook_request_begin(reg, 20, &s, &err);
    run_layers(layers, y);
    ok(y[3][2 * D] == (float)(2 * D) * 0.25f + 9.0f * 0.5f, "request 20's rows: its scale 0.5");
    ok(y[3][0] == 0.0f && y[3][5 * D] == (float)(5 * D) * 0.25f, "other requests' rows untouched");
    srt_hook_registry_free(reg);

    write_cvec(path, (int[]){ 0 }, dirs, 1);
    ok(srt_hook_control_vector_check(path, &err) == SRT_ERROR && strstr(err.msg, "direction.0"),
       "direction.0 is refused: %s", err.msg);
    unlink(path);
}

int main(void)
{
    srt_log_set_sink(log_sink, NULL, SRT_LOG_DEBUG);
    test_rows_and_config();
    test_pre_rows();
    test_clamp();
    test_radix_ns();
    test_control_vector();
    return tap_done();
}
