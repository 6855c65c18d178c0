/* Hook engine: spec parsing, every failure mode of SGLang's contract with its log line,
 * fnmatch semantics, SGLang's upstream cases, PyTorch's ordering/prepend/always_call/
 * with_kwargs, input and output changes, handles, destroy-once and the NULL fast path.
 * Hooks come from a real dlopen'd library (test_hooks_lib.c). */
#include "tap.h"
#include "test_hooks_util.h"

#ifndef HOOK_TEST_LIBDIR
#define HOOK_TEST_LIBDIR "build/t/hooklib"
#endif
#define TESTLIB HOOK_TEST_LIBDIR "/libtesthooks.so"

static const char *(*th_trace)(void);
static int (*th_destroyed)(void), (*th_created)(void), (*th_last_n_kwargs)(void);
static int (*th_last_forward_status)(void), (*th_last_tp_rank)(void);
static void (*th_reset)(void);

static void load_testlib(void)
{
    void *h = dlopen(TESTLIB, RTLD_NOW);
    if (!h) {
        printf("Bail out! cannot load %s: %s\n", TESTLIB, dlerror());
        exit(1);
    }
    *(void **)&th_trace = dlsym(h, "th_trace");
    *(void **)&th_destroyed = dlsym(h, "th_destroyed");
    *(void **)&th_created = dlsym(h, "th_created");
    *(void **)&th_last_n_kwargs = dlsym(h, "th_last_n_kwargs");
    *(void **)&th_last_forward_status = dlsym(h, "th_last_forward_status");
    *(void **)&th_last_tp_rank = dlsym(h, "th_last_tp_rank");
    *(void **)&th_reset = dlsym(h, "th_reset");
    if (!th_trace || !th_destroyed || !th_created || !th_reset || !th_last_n_kwargs ||
        !th_last_forward_status || !th_last_tp_rank) {
        printf("Bail out! test library lacks its accessors\n");
        exit(1);
    }
}

/* Count occurrences of needle in the trace. */
static int trace_count(const char *needle)
{
    int c = 0;
    for (const char *p = th_trace(); (p = strstr(p, needle)) != NULL; p += strlen(needle))
        c++;
    return c;
}

/* ---- a fake module tree: "", outer{0,1}, inner{0,1}, "shared" aliasing inner.0 ---- */

#define W 4
typedef struct fake {
    srt_module *mod;
    float scale, bias;
    int fail;
    int n_children;
    struct fake *children[2];
} fake;

enum { M_ROOT, M_OUTER, M_OUTER0, M_OUTER1, M_INNER, M_INNER0, M_INNER1, N_MODS };
static const char *mod_names[N_MODS] = { "", "outer", "outer.0", "outer.1", "inner",
                                         "inner.0", "inner.1" };
static const char *mod_class[N_MODS] = { "Toy", "ModuleList", "Linear", "Linear",
                                         "Sequential", "Linear", "Linear" };
static srt_module mods[N_MODS];
static fake fakes[N_MODS];
static float positions_buf[W] = { 0, 1, 2, 3 };

static int fake_fn(void *self, const srt_batch_ctx *b, srt_module_args *args,
                   srt_tensor_view *out);

static int run_child(fake *f, const srt_batch_ctx *b, float *in, float *out,
                     const srt_module_args *parent)
{
    srt_module_args a = *parent;
    srt_tensor_view o = f32_view(out, 1, W);
    a.n_inputs = 1;
    a.inputs[0] = f32_view(in, 1, W);
    return srt_module_forward(f->mod, b, fake_fn, f, &a, &o);
}

static int fake_fn(void *self, const srt_batch_ctx *b, srt_module_args *args,
                   srt_tensor_view *out)
{
    fake *f = self;
    const float *x = args->inputs[0].data;
    float *y = out->data;
    float cur[W], nxt[W];

    if (f->fail)
        return SRT_ERROR;
    if (f->n_children == 0) {
        for (int i = 0; i < W; i++)
            y[i] = x[i] * f->scale + f->bias;
        return SRT_OK;
    }
    memcpy(cur, x, sizeof cur);
    for (int c = 0; c < f->n_children; c++) {
        if (run_child(f->children[c], b, cur, nxt, args) != SRT_OK)
            return SRT_ERROR;
        memcpy(cur, nxt, sizeof cur);
    }
    memcpy(y, cur, sizeof cur);
    return SRT_OK;
}

static void build_tree(void)
{
    memset(mods, 0, sizeof mods);
    memset(fakes, 0, sizeof fakes);
    for (int i = 0; i < N_MODS; i++) {
        mods[i].info.name = mod_names[i];
        mods[i].info.class_name = mod_class[i];
        mods[i].info.index = i;
        fakes[i].mod = &mods[i];
        fakes[i].scale = 1;
    }
    mods[M_ROOT].parent = -1;
    fakes[M_OUTER0].scale = 2; fakes[M_OUTER0].bias = 0;
    fakes[M_OUTER1].scale = 2; fakes[M_OUTER1].bias = 1;
    fakes[M_INNER0].scale = 1; fakes[M_INNER0].bias = 10;
    fakes[M_INNER1].scale = 3; fakes[M_INNER1].bias = 0;
    fakes[M_ROOT].n_children = 2;
    fakes[M_ROOT].children[0] = &fakes[M_OUTER];
    fakes[M_ROOT].children[1] = &fakes[M_INNER];
    fakes[M_OUTER].n_children = 2;
    fakes[M_OUTER].children[0] = &fakes[M_OUTER0];
    fakes[M_OUTER].children[1] = &fakes[M_OUTER1];
    fakes[M_INNER].n_children = 2;
    fakes[M_INNER].children[0] = &fakes[M_INNER0];
    fakes[M_INNER].children[1] = &fakes[M_INNER1];
}

/* One forward of the whole toy model on x = [1,2,3,4]; y = [45,57,69,81] unhooked. */
static int forward(float y[W])
{
    float x[W] = { 1, 2, 3, 4 };
    uint64_t rid[1] = { 7 };
    int32_t pos[1] = { 0 };
    srt_batch_ctx b = { SRT_FORWARD_DECODE, 1, rid, pos, 1, 0, 1 };
    srt_module_args a;
    srt_tensor_view o = f32_view(y, 1, W);

    memset(&a, 0, sizeof a);
    a.n_inputs = 1;
    a.inputs[0] = f32_view(x, 1, W);
    a.n_kwargs = 1;
    a.kwarg_names[0] = "position_ids";
    a.kwargs[0] = f32_view(positions_buf, 1, W);
    return srt_module_forward(&mods[M_ROOT], &b, fake_fn, &fakes[M_ROOT], &a, &o);
}

static srt_hook_registry *new_registry(void)
{
    /* named_modules(remove_duplicate=False) order, with "shared" a second name of inner.0 */
    srt_module *ptrs[N_MODS + 1];
    const char *names[N_MODS + 1];
    srt_err err;
    srt_hook_registry *reg;

    for (int i = 0; i < N_MODS; i++) {
        ptrs[i] = &mods[i];
        names[i] = NULL;
    }
    ptrs[N_MODS] = &mods[M_INNER0];
    names[N_MODS] = "shared";
    reg = srt_hook_registry_create_named(ptrs, names, N_MODS + 1, &err);
    if (!reg) {
        printf("Bail out! registry: %s\n", err.msg);
        exit(1);
    }
    return reg;
}

static int n_hooked(void)
{
    int c = 0;
    for (int i = 0; i < N_MODS; i++)
        c += mods[i].hooks != NULL;
    return c;
}

/* Write a spec file into the temp dir and load it into a fresh registry. */
static srt_hook_registry *reg_from(const char *json, int *rc, srt_err *err)
{
    srt_hook_registry *reg = new_registry();
    const char *path = write_tmp("spec.json", json);
    *rc = srt_hook_registry_load_file(reg, path, err);
    return reg;
}

#define LIB "\"" TESTLIB ":"

/* ---------------------------------------------------------------------------------- */

static void test_fnmatch(void)
{
    static const char *llama[] = {
        "", "model", "model.embed_tokens", "model.layers", "model.layers.0",
        "model.layers.0.self_attn", "model.layers.0.self_attn.q_proj",
        "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj",
        "model.layers.0.self_attn.o_proj", "model.layers.0.mlp", "model.layers.0.mlp.gate_proj",
        "model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj", "model.layers.0.mlp.act_fn",
        "model.layers.0.input_layernorm", "model.layers.0.post_attention_layernorm",
        "model.layers.1", "model.layers.1.self_attn", "model.layers.1.self_attn.q_proj",
        "model.layers.1.self_attn.k_proj", "model.layers.1.self_attn.v_proj",
        "model.layers.1.self_attn.o_proj", "model.layers.1.mlp", "model.layers.1.mlp.gate_proj",
        "model.layers.1.mlp.up_proj", "model.layers.1.mlp.down_proj", "model.layers.1.mlp.act_fn",
        "model.layers.1.input_layernorm", "model.layers.1.post_attention_layernorm",
        "model.norm", "model.rotary_emb", "lm_head",
    };
    /* counts computed with Python: sum(fnmatch.fnmatch(n, p) for n in names) */
    static const struct { const char *pat; int want; } cases[] = {
        { "*", 33 }, { "model.layers.*.mlp", 2 }, { "model.layers.*.mlp.*", 8 },
        { "*proj", 14 }, { "model.layers.1*", 13 }, { "model.layers.?.self_attn", 2 },
        { "model.layers.[01].mlp.down_proj", 2 }, { "model.layers.[!0].mlp", 1 },
        { "[!m]*", 1 }, { "lm_head", 1 }, { "LM_HEAD", 0 }, { "model.layers.2*", 0 },
        { "model.layers.[0-1].input_layernorm", 2 }, { "*.self_attn.*_proj", 8 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = 0;
        for (size_t i = 0; i < sizeof llama / sizeof llama[0]; i++)
            n += srt_hook_fnmatch(cases[c].pat, llama[i]);
        is_int(n, cases[c].want, "fnmatch '%s' matches %d Llama module names", cases[c].pat,
               cases[c].want);
    }
    ok(srt_hook_fnmatch("*", ""), "'*' matches the root module's empty name, as in Python");
    ok(srt_hook_fnmatch("a\\b", "a\\b") && !srt_hook_fnmatch("a\\*", "a*x"),
       "backslash is an ordinary character (no escapes)");
    ok(srt_hook_fnmatch("[^a]", "^") && srt_hook_fnmatch("[^a]", "a") &&
       !srt_hook_fnmatch("[^a]", "b"), "'[^a]' is the set {^, a} as in Python, not a negation");
    ok(srt_hook_fnmatch("[a", "[a") && !srt_hook_fnmatch("[a", "a"),
       "an unterminated '[' is literal");
    ok(srt_hook_fnmatch("[]]", "]") && srt_hook_fnmatch("[!]]", "x") && !srt_hook_fnmatch("[!]]", "]"),
       "']' first in a set is a member");
    ok(srt_hook_fnmatch("a*b*c", "a.x.b.y.c") && !srt_hook_fnmatch("a*b*c", "a.x.b.y.d"),
       "'*' crosses dots with backtracking");
}

static void test_sglang_contract(void)
{
    srt_hook_registry *reg;
    srt_err err;
    int rc;
    float y[W];

    /* The seed's example: registered on outer.0 and outer.1, config passed as JSON. */
    th_reset();
    log_clear();
    reg = reg_from("{\"forward_hooks\": [{\"name\": \"outer_linear_hooks\","
                   " \"target_modules\": [\"outer.0\", \"outer.1\"],"
                   " \"hook_factory\": " LIB "th_factory\","
                   " \"config\": {\"tag\": \"outer-layer\"}}]}", &rc, &err);
    is_int(rc, SRT_OK, "seed example loads");
    is_int(log_count(SRT_LOG_INFO, "Registered forward hook 'outer_linear_hooks' on outer.0"), 1,
           "log: Registered forward hook 'outer_linear_hooks' on outer.0");
    is_int(log_count(SRT_LOG_INFO, "Registered forward hook 'outer_linear_hooks' on outer.1"), 1,
           "log: Registered forward hook 'outer_linear_hooks' on outer.1");
    ok(strstr(th_trace(), "factory:outer-layer:{\"tag\":\"outer-layer\"};") != NULL,
       "factory called once with the config object as JSON text");
    is_int(th_created(), 1, "one factory call per spec");
    forward(y);
    is_int(trace_count("fwd:outer-layer:outer.0;"), 1, "hook ran on outer.0");
    is_int(trace_count("fwd:outer-layer:outer.1;"), 1, "hook ran on outer.1");
    is_int(trace_count("fwd:"), 2, "and nowhere else");
    srt_hook_registry_free(reg);
    is_int(th_destroyed(), 1, "registry free destroys the shared hook object once");

    /* missing / empty target_modules */
    log_clear();
    reg = reg_from("{\"forward_hooks\": [{\"name\": \"t1\", \"hook_factory\": " LIB "th_factory\"},"
                   " {\"name\": \"t2\", \"target_modules\": [], \"hook_factory\": " LIB "th_factory\"},"
                   " {\"target_modules\": null, \"hook_factory\": " LIB "th_factory\"}]}", &rc, &err);
    is_int(rc, SRT_OK, "specs without targets are skipped, not fatal");
    is_int(log_count(SRT_LOG_WARN, "Hook spec 't1' has no 'target_modules', skipping"), 1,
           "log: Hook spec 't1' has no 'target_modules', skipping");
    is_int(log_count(SRT_LOG_WARN, "Hook spec 't2' has no 'target_modules', skipping"), 1,
           "log: empty target_modules is the same warning");
    is_int(log_count(SRT_LOG_WARN, "Hook spec '' has no 'target_modules', skipping"), 1,
           "log: an unnamed spec is named '' as SGLang does");
    is_int(n_hooked(), 0, "nothing attached");
    srt_hook_registry_free(reg);

    /* missing hook_factory */
    log_clear();
    reg = reg_from("[{\"name\": \"nf\", \"target_modules\": [\"outer.0\"]},"
                   " {\"name\": \"nf2\", \"target_modules\": [\"outer.0\"], \"hook_factory\": \"\"}]",
                   &rc, &err);
    is_int(rc, SRT_OK, "specs without hook_factory are skipped (bare-list form)");
    is_int(log_count(SRT_LOG_WARN, "Hook spec 'nf' has no 'hook_factory', skipping"), 1,
           "log: Hook spec 'nf' has no 'hook_factory', skipping");
    is_int(log_count(SRT_LOG_WARN, "Hook spec 'nf2' has no 'hook_factory', skipping"), 1,
           "log: an empty hook_factory is the same warning");
    srt_hook_registry_free(reg);

    /* factory returns NULL */
    log_clear();
    reg = reg_from("{\"forward_hooks\": [{\"name\": \"nul\", \"target_modules\": [\"outer.*\"],"
                   " \"hook_factory\": " LIB "th_null_factory\"}]}", &rc, &err);
    is_int(rc, SRT_OK, "a factory returning NULL is not fatal");
    is_int(log_count(SRT_LOG_WARN, "Hook factory '" TESTLIB ":th_null_factory' for spec 'nul' "
                     "returned NULL, not registering any hook"), 1,
           "log: Hook factory '...' for spec 'nul' returned NULL, not registering any hook");
    is_int(n_hooked(), 0, "nothing attached");
    srt_hook_registry_free(reg);

    /* no module matched */
    th_reset();
    log_clear();
    reg = reg_from("{\"forward_hooks\": [{\"name\": \"nomatch\", \"target_modules\": "
                   "[\"does.not.exist\", \"x*\", \"it's\"], \"hook_factory\": " LIB "th_factory\"}]}",
                   &rc, &err);
    is_int(rc, SRT_OK, "a pattern matching nothing is not an error");
    is_int(log_count(SRT_LOG_WARN, "No modules matched hook spec 'nomatch' "
                     "patterns=['does.not.exist', 'x*', \"it's\"]"), 1,
           "log: No modules matched hook spec 'nomatch' patterns=[...] in Python's list repr");
    forward(y);
    is_int(trace_count("fwd:"), 0, "0 calls per forward");
    is_int(th_destroyed(), 1, "the unused hook object is destroyed at once");
    is_int(n_hooked(), 0, "no module carries hooks");
    srt_hook_registry_free(reg);
    is_int(th_destroyed(), 1, "and not destroyed again");

    /* fatal: malformed path */
    log_clear();
    reg = reg_from("{\"forward_hooks\": [{\"name\": \"bad\", \"target_modules\": [\"outer.0\"],"
                   " \"hook_factory\": \"nodots\"}]}", &rc, &err);
    is_int(rc, SRT_ERROR, "malformed hook_factory path is fatal");
    ok(strstr(err.msg, "invalid hook_factory 'nodots'") && strstr(err.msg, "'bad'") &&
       strstr(err.msg, "spec.json"), "error names the path, the spec and the file: %s", err.msg);
    srt_hook_registry_free(reg);

    reg = reg_from("[{\"name\": \"bad2\", \"target_modules\": [\"outer.0\"],"
                   " \"hook_factory\": \"libx.so:\"}]", &rc, &err);
    ok(rc == SRT_ERROR && strstr(err.msg, "invalid hook_factory 'libx.so:'"),
       "empty symbol is malformed: %s", err.msg);
    srt_hook_registry_free(reg);

    reg = reg_from("[{\"name\": \"bad3\", \"target_modules\": [\"outer.0\"],"
                   " \"hook_factory\": \"a..b.c\"}]", &rc, &err);
    ok(rc == SRT_ERROR && strstr(err.msg, "invalid hook_factory 'a..b.c'"),
       "empty dotted component is malformed: %s", err.msg);
    srt_hook_registry_free(reg);

    /* fatal: library cannot be loaded */
    reg = reg_from("[{\"name\": \"nolib\", \"target_modules\": [\"outer.0\"],"
                   " \"hook_factory\": \"/nonexistent/libnope.so:f\"}]", &rc, &err);
    ok(rc == SRT_ERROR && strstr(err.msg, "'nolib'") && strstr(err.msg, "/nonexistent/libnope.so") &&
       strstr(err.msg, "No such file"), "missing library: error has spec, path and dlerror: %s",
       err.msg);
    srt_hook_registry_free(reg);

    write_tmp("libgarbage.so", "this is not an ELF file\n");
    setenv("SRT_HOOKS_PATH", tmpdir, 1);
    reg = reg_from("[{\"name\": \"garbage\", \"target_modules\": [\"outer.0\"],"
                   " \"hook_factory\": \"libgarbage.so:f\"}]", &rc, &err);
    unsetenv("SRT_HOOKS_PATH");
    ok(rc == SRT_ERROR && strstr(err.msg, "'garbage'") && strstr(err.msg, "libgarbage.so") &&
       (strstr(err.msg, "invalid ELF header") || strstr(err.msg, "file too short")),
       "unloadable library (found on SRT_HOOKS_PATH): dlerror text in the error: %s", err.msg);
    srt_hook_registry_free(reg);

    reg = reg_from("[{\"name\": \"nowhere\", \"target_modules\": [\"outer.0\"],"
                   " \"hook_factory\": \"pkg_missing.mod.f\"}]", &rc, &err);
    ok(rc == SRT_ERROR && strstr(err.msg, "pkg_missing/mod.so") && strstr(err.msg, "not found"),
       "dotted module that is nowhere on the path: %s", err.msg);
    srt_hook_registry_free(reg);

    /* fatal: missing symbol */
    th_reset();
    reg = reg_from("{\"forward_hooks\": [{\"name\": \"nosym\", \"target_modules\": [\"outer.0\"],"
                   " \"hook_factory\": " LIB "no_such_factory\"}]}", &rc, &err);
    ok(rc == SRT_ERROR && strstr(err.msg, "'nosym'") && strstr(err.msg, "no symbol 'no_such_factory'") &&
       strstr(err.msg, "undefined symbol"), "missing symbol: error has spec, symbol and dlerror: %s",
       err.msg);
    srt_hook_registry_free(reg);

    /* fatal: ABI */
    reg = reg_from("[{\"name\": \"oldabi\", \"target_modules\": [\"outer.0\"],"
                   " \"hook_factory\": \"" HOOK_TEST_LIBDIR "/libbadabi.so:th_factory\"}]", &rc, &err);
    ok(rc == SRT_ERROR && strstr(err.msg, "built for hook ABI 2.0") && strstr(err.msg, "libbadabi.so"),
       "library with another major ABI refused: %s", err.msg);
    srt_hook_registry_free(reg);
    reg = reg_from("[{\"name\": \"noabi\", \"target_modules\": [\"outer.0\"],"
                   " \"hook_factory\": \"" HOOK_TEST_LIBDIR "/libnoabi.so:th_factory\"}]", &rc, &err);
    ok(rc == SRT_ERROR && strstr(err.msg, "does not export 'srt_hook_abi_version'"),
       "library without SRT_HOOK_LIBRARY() refused: %s", err.msg);
    srt_hook_registry_free(reg);
    th_reset();
    reg = reg_from("[{\"name\": \"futureobj\", \"target_modules\": [\"outer.0\"],"
                   " \"hook_factory\": " LIB "th_future_abi_factory\"}]", &rc, &err);
    ok(rc == SRT_ERROR && strstr(err.msg, "returned a hook built for hook ABI 2.0"),
       "hook object with another ABI refused: %s", err.msg);
    is_int(th_destroyed(), 1, "the refused hook object is destroyed once");
    is_int(n_hooked(), 0, "nothing attached");
    srt_hook_registry_free(reg);
    is_int(th_destroyed(), 1, "not destroyed again at free");

    reg = reg_from("[{\"name\": \"noforward\", \"target_modules\": [\"outer.0\"],"
                   " \"hook_factory\": " LIB "th_pre_only_factory\"}]", &rc, &err);
    ok(rc == SRT_ERROR && strstr(err.msg, "without a forward callback"),
       "forward hook without a forward callback refused: %s", err.msg);
    srt_hook_registry_free(reg);
}

static void test_bad_documents(void)
{
    static const struct { const char *json; const char *want; } cases[] = {
        { "{\"forward_hooks\": [", "invalid JSON" },
        { "", "invalid JSON" },
        { "42", "must be a JSON object" },
        { "{\"forward_hooks\": {}}", "forward_hooks must be a list of hook specs, not an object" },
        { "{\"forward_pre_hooks\": 3}", "forward_pre_hooks must be a list of hook specs, not a number" },
        { "[1]", "forward_hooks[0] must be an object, not a number" },
        { "[{\"name\": 5}]", "forward_hooks[0].name must be a string, not a number" },
        { "[{\"name\": \"s\", \"target_modules\": \"outer.0\"}]",
          "forward_hooks[0].target_modules must be a list of module name patterns, not a string" },
        { "[{\"target_modules\": [\"a\", 1]}]", "forward_hooks[0].target_modules[1] must be a string, not a number" },
        { "[{\"target_modules\": [\"a\"], \"hook_factory\": [\"x\"]}]",
          "forward_hooks[0].hook_factory must be a string" },
        { "[{\"target_modules\": [\"a\"], \"hook_factory\": \"l.so:f\", \"config\": [1]}]",
          "forward_hooks[0].config must be an object, not a list" },
        { "[{\"target_modules\": [\"a\"], \"prepend\": \"yes\"}]", "forward_hooks[0].prepend must be true or false, not a string" },
        { "[{\"target_modules\": [\"a\"], \"with_kwargs\": 1}]", "forward_hooks[0].with_kwargs must be true or false" },
        { "{\"forward_pre_hooks\": [{\"target_modules\": [\"a\"], \"always_call\": true}]}",
          "'always_call' applies to forward hooks only" },
        { "[{\"global\": true, \"target_modules\": [\"a\"]}]", "a global hook applies to every module" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srt_err err;
        int rc;
        srt_hook_registry *reg = reg_from(cases[i].json, &rc, &err);
        ok(rc == SRT_ERROR && strstr(err.msg, cases[i].want) && strstr(err.msg, "spec.json"),
           "bad document %zu refused, naming file and field: %s", i, err.msg);
        srt_hook_registry_free(reg);
    }
    {
        srt_err err;
        srt_hook_registry *reg = new_registry();
        int rc = srt_hook_registry_load_file(reg, tmp_path("absent.json"), &err);
        ok(rc == SRT_ERROR && strstr(err.msg, "absent.json") && strstr(err.msg, "No such file"),
           "missing spec file: %s", err.msg);
        rc = srt_hook_registry_load_json(reg, "[{\"a\":1}\0]", 10, "inline", &err);
        ok(rc == SRT_ERROR && strstr(err.msg, "NUL"), "NUL byte refused: %s", err.msg);
        {
            size_t n = 200000;
            char *deep = malloc(2 * n + 1);
            for (size_t i = 0; i < n; i++) {
                deep[i] = '[';
                deep[n + i] = ']';
            }
            deep[2 * n] = '\0';
            rc = srt_hook_registry_load_json(reg, deep, 2 * n, "deep", &err);
            ok(rc == SRT_ERROR && strstr(err.msg, "nested deeper"), "200000 nested lists refused, no crash: %s", err.msg);
            {
                const char *b = "[{\"config\": \"[[[[\\\"\", \"target_modules\": [\"x\"]}]";
                rc = srt_hook_registry_load_json(reg, b, strlen(b), "brackets-in-strings", &err);
                ok(rc == SRT_ERROR && strstr(err.msg, "config must be an object, not a string"),
                   "brackets and escaped quotes inside strings do not count as nesting: %s", err.msg);
            }
            free(deep);
        }
        srt_hook_registry_free(reg);
    }
    {
        srt_err err;
        int rc;
        srt_hook_registry *reg;
        log_clear();
        reg = reg_from("{\"forward_hook\": [], \"forward_hooks\": [{\"target_modules\": [\"outer.0\"],"
                       " \"hook_factory\": " LIB "th_factory\", \"nmae\": \"typo\"}]}", &rc, &err);
        is_int(rc, SRT_OK, "unknown fields are not fatal");
        ok(log_count_level(SRT_LOG_WARN) == 2, "but each gets a warning");
        srt_hook_registry_free(reg);
    }
}

static void test_all_or_nothing(void)
{
    srt_hook_registry *reg;
    srt_err err;
    int rc;

    th_reset();
    reg = reg_from("[{\"name\": \"good\", \"target_modules\": [\"outer.*\"], \"hook_factory\": " LIB "th_factory\"},"
                   " {\"name\": \"bad\", \"target_modules\": [\"inner.*\"], \"hook_factory\": " LIB "nope\"}]",
                   &rc, &err);
    is_int(rc, SRT_ERROR, "a bad factory later in the file fails the load");
    is_int(th_created(), 0, "no factory ran: all paths are resolved before any factory is called");
    is_int(n_hooked(), 0, "nothing attached");
    srt_hook_registry_free(reg);

    th_reset();
    reg = reg_from("[{\"name\": \"good\", \"target_modules\": [\"outer.*\"], \"hook_factory\": " LIB "th_factory\"},"
                   " {\"name\": \"bad\", \"target_modules\": [\"inner.*\"], \"hook_factory\": " LIB "th_future_abi_factory\"}]",
                   &rc, &err);
    is_int(rc, SRT_ERROR, "a refused hook object fails the load");
    is_int(th_created(), 2, "both factories ran");
    is_int(th_destroyed(), 2, "and both hooks were destroyed by the rollback");
    is_int(n_hooked(), 0, "nothing stays attached");
    srt_hook_registry_free(reg);
    is_int(th_destroyed(), 2, "no double destroy at free");
}

static void test_check_file(void)
{
    srt_err err;
    const char *good, *bad;

    th_reset();
    good = write_tmp("check_good.json", "{\"forward_hooks\": [{\"name\": \"g\", \"target_modules\": [\"x\"],"
                     " \"hook_factory\": " LIB "th_factory\"}]}");
    bad = write_tmp("check_bad.json", "{\"forward_pre_hooks\": [{\"name\": \"b\", \"target_modules\": [\"x\"],"
                    " \"hook_factory\": " LIB "missing_sym\"}]}");
    is_int(srt_hook_spec_check_file(good, NULL, &err), SRT_OK, "nginx -t check accepts a good file");
    is_int(th_created(), 0, "the check calls no factory");
    ok(srt_hook_spec_check_file(bad, NULL, &err) == SRT_ERROR && strstr(err.msg, "missing_sym") &&
       strstr(err.msg, "'b'"), "nginx -t check refuses a missing symbol: %s", err.msg);
    ok(srt_hook_spec_check_file(tmp_path("nope.json"), NULL, &err) == SRT_ERROR,
       "nginx -t check refuses a missing file");

    /* The check reads the libraries, it never loads them (the master runs as root): the
     * same refusals as loading, with the loader's wording, and no constructor runs. */
    const char *mark = tmp_path("ctor_ran");
    setenv("SRT_TEST_CTOR_MARK", mark, 1);
    const char *noabi = write_tmp("check_noabi.json", "{\"forward_hooks\": [{\"name\": \"n\", \"target_modules\": [\"x\"],"
                                  " \"hook_factory\": \"" HOOK_TEST_LIBDIR "/libnoabi.so:th_factory\"}]}");
    ok(srt_hook_spec_check_file(noabi, NULL, &err) == SRT_ERROR && strstr(err.msg, "does not export 'srt_hook_abi_version'"),
       "nginx -t check refuses a library without SRT_HOOK_LIBRARY(): %s", err.msg);
    ok(access(mark, F_OK) != 0, "and the library's constructor did not run");
    unsetenv("SRT_TEST_CTOR_MARK");
    const char *oldabi = write_tmp("check_oldabi.json", "{\"forward_hooks\": [{\"name\": \"o\", \"target_modules\": [\"x\"],"
                                   " \"hook_factory\": \"" HOOK_TEST_LIBDIR "/libbadabi.so:th_factory\"}]}");
    ok(srt_hook_spec_check_file(oldabi, NULL, &err) == SRT_ERROR && strstr(err.msg, "built for hook ABI 2.0"),
       "nginx -t check refuses another ABI, read from the file: %s", err.msg);
    ok(srt_hook_spec_check_file(tmp_path("check_bad.json"), NULL, &err) == SRT_ERROR &&
       strstr(err.msg, "libtesthooks.so: undefined symbol: missing_sym"),
       "a missing symbol reads as the loader says it: %s", err.msg);
    const char *nolib = write_tmp("check_nolib.json", "{\"forward_hooks\": [{\"name\": \"l\", \"target_modules\": [\"x\"],"
                                  " \"hook_factory\": \"/nonexistent/libx.so:f\"}]}");
    ok(srt_hook_spec_check_file(nolib, NULL, &err) == SRT_ERROR &&
       strstr(err.msg, "cannot load library '/nonexistent/libx.so': /nonexistent/libx.so: cannot open shared "
                       "object file: No such file or directory"),
       "a missing library reads as the loader says it: %s", err.msg);
    char spec[1024];
    snprintf(spec, sizeof spec, "{\"forward_hooks\": [{\"name\": \"e\", \"target_modules\": [\"x\"],"
             " \"hook_factory\": \"%s:f\"}]}", tmp_path("check_good.json"));
    const char *notelf = write_tmp("check_notelf.json", spec);
    ok(srt_hook_spec_check_file(notelf, NULL, &err) == SRT_ERROR && strstr(err.msg, "check_good.json: invalid ELF header"),
       "a file that is not a library: %s", err.msg);
}

static void test_search_path(void)
{
    srt_hook_registry *reg;
    srt_err err;
    int rc;
    char sub[512], pkg[512], link[600];

    /* "libx.so:sym" next to the spec file */
    if (symlink(TESTLIB, tmp_path("libnear.so")) != 0)
        perror("symlink");
    th_reset();
    log_clear();
    reg = reg_from("[{\"name\": \"near\", \"target_modules\": [\"outer.0\"], \"hook_factory\": \"libnear.so:th_factory\"}]",
                   &rc, &err);
    ok(rc == SRT_ERROR && strstr(err.msg, "libnear.so") && log_count(SRT_LOG_INFO, "Registered") == 0,
       "'libx.so:sym' is never taken from the spec file's directory (whoever may write there "
       "would choose the scheduler's code): %s", err.msg);
    srt_hook_registry_free(reg);

    /* no '..' out of a configured directory */
    setenv("SRT_HOOKS_PATH", tmpdir, 1);
    reg = reg_from("[{\"name\": \"up\", \"target_modules\": [\"outer.0\"], \"hook_factory\": \"sub/../libnear.so:th_factory\"}]",
                   &rc, &err);
    ok(rc == SRT_ERROR && strstr(err.msg, "may not contain '..'"), "a library path with '..' is refused: %s", err.msg);
    srt_hook_registry_free(reg);
    reg = reg_from("[{\"name\": \"up\", \"target_modules\": [\"outer.0\"], \"hook_factory\": \"../libnear.so:th_factory\"}]",
                   &rc, &err);
    ok(rc == SRT_ERROR && strstr(err.msg, "may not contain '..'"), "... also at its start: %s", err.msg);
    srt_hook_registry_free(reg);
    reg = reg_from("[{\"name\": \"near\", \"target_modules\": [\"outer.0\"], \"hook_factory\": \"libnear.so:th_factory\"}]",
                   &rc, &err);
    ok(rc == SRT_OK, "the same library is found through SRT_HOOKS_PATH: %s", rc ? err.msg : "ok");
    srt_hook_registry_free(reg);
    unsetenv("SRT_HOOKS_PATH");

    /* SRT_HOOKS_PATH and an explicit search path */
    snprintf(sub, sizeof sub, "%s/libs", tmpdir);
    mkdir(sub, 0700);
    snprintf(link, sizeof link, "%s/libfar.so", sub);
    if (symlink(TESTLIB, link) != 0)
        perror("symlink");
    setenv("SRT_HOOKS_PATH", "/nonexistent:" "/tmp/srt_hooks_nothing_here", 1);
    reg = reg_from("[{\"name\": \"far\", \"target_modules\": [\"outer.0\"], \"hook_factory\": \"libfar.so:th_factory\"}]",
                   &rc, &err);
    ok(rc == SRT_ERROR && strstr(err.msg, "libfar.so"), "not on the path: refused: %s", err.msg);
    srt_hook_registry_free(reg);
    {
        char env[700];
        snprintf(env, sizeof env, "/nonexistent:%s", sub);
        setenv("SRT_HOOKS_PATH", env, 1);
    }
    reg = reg_from("[{\"name\": \"far\", \"target_modules\": [\"outer.0\"], \"hook_factory\": \"libfar.so:th_factory\"}]",
                   &rc, &err);
    is_int(rc, SRT_OK, "'libx.so:sym' is found on SRT_HOOKS_PATH");
    srt_hook_registry_free(reg);
    unsetenv("SRT_HOOKS_PATH");

    reg = new_registry();
    srt_hook_registry_set_search_path(reg, sub, &err);
    {
        const char *j = "[{\"name\": \"far\", \"target_modules\": [\"outer.0\"],"
                        " \"hook_factory\": \"libfar.so:th_factory\"}]";
        rc = srt_hook_registry_load_json(reg, j, strlen(j), "inline", &err);
    }
    ok(rc == SRT_OK && mods[M_OUTER0].hooks != NULL, "srt_hooks_path search path works for inline JSON: %s",
       rc ? err.msg : "ok");
    srt_hook_registry_free(reg);

    /* dotted forms: "pkg.mod.sym" and "pkg.mod:sym" -> pkg/mod.so */
    snprintf(pkg, sizeof pkg, "%s/mypkg", tmpdir);
    mkdir(pkg, 0700);
    snprintf(link, sizeof link, "%s/hooks.so", pkg);
    if (symlink(TESTLIB, link) != 0)
        perror("symlink");
    log_clear();
    setenv("SRT_HOOKS_PATH", tmpdir, 1);
    reg = reg_from("[{\"name\": \"dotted\", \"target_modules\": [\"outer.0\"], \"hook_factory\": \"mypkg.hooks.th_factory\"},"
                   " {\"name\": \"colon\", \"target_modules\": [\"outer.1\"], \"hook_factory\": \"mypkg.hooks:th_factory\"}]",
                   &rc, &err);
    unsetenv("SRT_HOOKS_PATH");
    ok(rc == SRT_OK && log_count(SRT_LOG_INFO, "Registered forward hook 'dotted' on outer.0") == 1 &&
       log_count(SRT_LOG_INFO, "Registered forward hook 'colon' on outer.1") == 1,
       "'pkg.mod.sym' and 'pkg.mod:sym' load pkg/mod.so: %s", rc ? err.msg : "ok");
    srt_hook_registry_free(reg);
}

static void test_upstream_cases(void)
{
    srt_hook_registry *reg;
    srt_err err;
    int rc;
    float y[W];

    /* explicit names plus a wildcard: exactly 4 calls per forward */
    th_reset();
    reg = reg_from("{\"forward_hooks\": ["
                   "{\"name\": \"outer\", \"target_modules\": [\"outer.0\", \"outer.1\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"o\"}},"
                   "{\"name\": \"inner\", \"target_modules\": [\"inner.*\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"i\"}}]}",
                   &rc, &err);
    is_int(rc, SRT_OK, "outer + inner specs load");
    forward(y);
    is_int(trace_count("fwd:"), 4, "exactly 4 hook calls per forward");
    forward(y);
    is_int(trace_count("fwd:"), 8, "and 4 more on the next forward");
    ok(y[0] == 45 && y[3] == 81, "observing hooks leave the output alone");
    srt_hook_registry_free(reg);

    /* a module shared under two names is registered and called once */
    th_reset();
    log_clear();
    reg = reg_from("[{\"name\": \"sh\", \"target_modules\": [\"inner.0\", \"shared\"], \"hook_factory\": " LIB "th_factory\"},"
                   " {\"name\": \"alias_only\", \"target_modules\": [\"shared\"], \"hook_factory\": " LIB "th_factory\"}]",
                   &rc, &err);
    is_int(rc, SRT_OK, "shared-module specs load");
    is_int(log_count_level(SRT_LOG_INFO), 1, "one registration for a module reachable by two names");
    is_int(log_count(SRT_LOG_WARN, "No modules matched hook spec 'alias_only' patterns=['shared']"), 1,
           "the second name is not in named_modules(), as in PyTorch");
    forward(y);
    is_int(trace_count("fwd:"), 1, "the shared module's hook runs once per forward");
    srt_hook_registry_free(reg);

    /* a pattern that matches nothing: 0 calls, no error */
    th_reset();
    reg = reg_from("[{\"name\": \"none\", \"target_modules\": [\"outer.9\"], \"hook_factory\": " LIB "th_factory\"}]",
                   &rc, &err);
    forward(y);
    ok(rc == SRT_OK && trace_count("fwd:") == 0, "non-matching pattern: 0 calls and no error");
    srt_hook_registry_free(reg);
}

static void test_pytorch_semantics(void)
{
    srt_hook_registry *reg;
    srt_err err;
    int rc;
    float y[W];
    const char *t;

    /* order: global pre, module pre, forward, global fwd, module fwd; prepend; registration order */
    th_reset();
    reg = reg_from("{\"forward_hooks\": ["
                   "{\"name\": \"a\", \"target_modules\": [\"inner.1\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"A\"}},"
                   "{\"name\": \"b\", \"target_modules\": [\"inner.1\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"B\"}},"
                   "{\"name\": \"c\", \"target_modules\": [\"inner.1\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"C\"}, \"prepend\": true},"
                   "{\"name\": \"g\", \"global\": true, \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"G\"}}],"
                   " \"forward_pre_hooks\": ["
                   "{\"name\": \"p\", \"target_modules\": [\"inner.1\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"P\"}},"
                   "{\"name\": \"gp\", \"global\": true, \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"GP\"}}]}",
                   &rc, &err);
    is_int(rc, SRT_OK, "ordering specs load: %s", rc ? err.msg : "");
    is_int(n_hooked(), N_MODS, "a global hook puts hooks on every module");
    forward(y);
    t = strstr(th_trace(), "pre:GP:inner.1;");
    ok(t && strncmp(t, "pre:GP:inner.1;pre:P:inner.1;fwd:G:inner.1;fwd:C:inner.1;fwd:A:inner.1;fwd:B:inner.1;",
                    strlen("pre:GP:inner.1;pre:P:inner.1;fwd:G:inner.1;fwd:C:inner.1;fwd:A:inner.1;fwd:B:inner.1;")) == 0,
       "order: global pre, module pre, global fwd, prepended C, then A, B in registration order");
    is_int(trace_count("fwd:G:"), N_MODS, "the global hook ran on all %d modules", N_MODS);
    ok(strncmp(th_trace() + strlen(th_trace()) - strlen("fwd:G:;"), "fwd:G:;", 7) == 0,
       "the root module's hooks ran last (children finish first)");
    srt_hook_registry_free(reg);

    /* always_call: the failing module's hooks, and its parents' */
    th_reset();
    fakes[M_INNER0].fail = 1;
    reg = reg_from("[{\"name\": \"n\", \"target_modules\": [\"inner.0\", \"inner\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"N\"}},"
                   " {\"name\": \"ac\", \"target_modules\": [\"inner.0\", \"inner\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"AC\"}, \"always_call\": true},"
                   " {\"name\": \"ok\", \"target_modules\": [\"outer.0\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"OK\"}, \"always_call\": true}]",
                   &rc, &err);
    rc = forward(y);
    is_int(rc, SRT_ERROR, "the module's error still propagates");
    is_int(trace_count("fwd:N:"), 0, "plain hooks do not run after a failed forward");
    is_int(trace_count("fwd:AC:inner.0;"), 1, "always_call hook ran on the failing module");
    is_int(trace_count("fwd:AC:inner;"), 1, "and on its parent, which failed in turn");
    is_int(th_last_forward_status(), -1, "it saw forward_status -1");
    is_int(trace_count("fwd:OK:outer.0;"), 1, "always_call hooks on healthy modules run normally");
    fakes[M_INNER0].fail = 0;
    srt_hook_registry_free(reg);

    /* a failing hook fails the forward, but later always_call hooks still run */
    th_reset();
    reg = reg_from("[{\"name\": \"boom\", \"target_modules\": [\"outer.0\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"X\", \"fail\": true}},"
                   " {\"name\": \"after\", \"target_modules\": [\"outer.0\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"Y\"}},"
                   " {\"name\": \"after_ac\", \"target_modules\": [\"outer.0\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"Z\"}, \"always_call\": true}]",
                   &rc, &err);
    log_clear();
    rc = forward(y);
    ok(rc == SRT_ERROR && log_count(SRT_LOG_ERROR, "forward hook 'boom' (id 1) failed on outer.0") == 1,
       "a hook error fails the forward and is logged with spec, id and module");
    ok(trace_count("fwd:Y:") == 0 && trace_count("fwd:Z:outer.0;") == 1,
       "after a hook error only always_call hooks run");
    srt_hook_registry_free(reg);

    /* with_kwargs */
    th_reset();
    reg = reg_from("{\"forward_pre_hooks\": [{\"name\": \"kw\", \"target_modules\": [\"outer.0\"], \"hook_factory\": " LIB "th_factory\", \"with_kwargs\": true}]}",
                   &rc, &err);
    forward(y);
    is_int(th_last_n_kwargs(), 1, "with_kwargs: the pre-hook sees the module's kwargs");
    srt_hook_registry_free(reg);
    reg = reg_from("{\"forward_pre_hooks\": [{\"name\": \"nokw\", \"target_modules\": [\"outer.0\"], \"hook_factory\": " LIB "th_factory\"}]}",
                   &rc, &err);
    forward(y);
    is_int(th_last_n_kwargs(), 0, "without with_kwargs it sees none");
    srt_hook_registry_free(reg);
    reg = reg_from("[{\"name\": \"kwf\", \"target_modules\": [\"outer.0\"], \"hook_factory\": " LIB "th_factory\", \"with_kwargs\": true}]",
                   &rc, &err);
    forward(y);
    is_int(th_last_n_kwargs(), 1, "with_kwargs works for forward hooks too");
    srt_hook_registry_free(reg);
}

static int bad_pre(srt_hook *h, const srt_hook_call *c, srt_module_args *a)
{
    (void)h;
    (void)c;
    a->inputs[0].shape[1] = 2;
    return 0;
}

static int noop(srt_hook *h, const srt_hook_call *c, const srt_module_args *a,
                srt_tensor_view *o, srt_tensor_view *r)
{
    (void)h; (void)c; (void)a; (void)o; (void)r;
    return 0;
}

static float wrong_buf[2 * W];
static int wrong_repl(srt_hook *h, const srt_hook_call *c, const srt_module_args *a,
                      srt_tensor_view *o, srt_tensor_view *r)
{
    (void)h; (void)c; (void)a;
    *r = f32_view(wrong_buf, 2, W);   /* twice the rows of the output */
    (void)o;
    return SRT_HOOK_REPLACED;
}

static void test_changing_values(void)
{
    srt_hook_registry *reg;
    srt_err err;
    int rc;
    float y[W];

    /* pre-hook adds 1 to inner.1's input: y = (x+1)*3 at the end */
    reg = reg_from("{\"forward_pre_hooks\": [{\"name\": \"shift\", \"target_modules\": [\"inner.1\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"value\": 1}}]}",
                   &rc, &err);
    forward(y);
    ok(rc == SRT_OK && y[0] == 48 && y[1] == 60 && y[2] == 72 && y[3] == 84,
       "a pre-hook changing inputs changes the output (%g %g %g %g)", y[0], y[1], y[2], y[3]);
    srt_hook_registry_free(reg);

    /* forward hook adds 0.5 to outer.0's output: propagates through outer.1 (*2) and inner.1 (*3) */
    reg = reg_from("[{\"name\": \"add\", \"target_modules\": [\"outer.0\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"value\": 0.5}}]",
                   &rc, &err);
    forward(y);
    ok(y[0] == 48 && y[3] == 84, "an in-place forward hook changes downstream values (%g, %g)", y[0], y[3]);
    srt_hook_registry_free(reg);

    /* replacement output */
    reg = reg_from("[{\"name\": \"repl\", \"target_modules\": [\"inner.1\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"value\": 7, \"replace\": true}}]",
                   &rc, &err);
    forward(y);
    ok(y[0] == 7 && y[1] == 7 && y[2] == 7 && y[3] == 7, "a replacement output is copied into the output");
    srt_hook_registry_free(reg);

    /* a pre-hook must not change shapes */
    {
        srt_hook hook = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), bad_pre, NULL, NULL, NULL, NULL, NULL };
        srt_hook_attach_opts o = { .name = "reshape", .pre = 1 };
        reg = new_registry();
        ok(srt_hook_attach(reg, "outer.0", &hook, &o, &err) > 0, "attach a reshaping pre-hook");
        log_clear();
        rc = forward(y);
        ok(rc == SRT_ERROR && log_count_level(SRT_LOG_ERROR) == 1 &&
           strstr(log_lines[0], "changed the number, shape or dtype"), "a pre-hook changing shapes fails the forward");
        srt_hook_registry_free(reg);
    }
    {
        srt_hook hook = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), NULL, wrong_repl, NULL, NULL, NULL, NULL };
        srt_hook_attach_opts o = { .name = "badrepl" };
        reg = new_registry();
        srt_hook_attach(reg, "outer.1", &hook, &o, &err);
        log_clear();
        rc = forward(y);
        ok(rc == SRT_ERROR && log_count(SRT_LOG_ERROR, "forward hook 'badrepl' (id 1) on outer.1 returned a "
                                        "replacement with another shape, dtype or device than the output") == 1,
           "a replacement of another shape fails the forward");
        srt_hook_registry_free(reg);
    }
}


static void test_handles(void)
{
    srt_hook_registry *reg;
    srt_err err;
    int rc;
    float y[W];
    char *json = NULL;
    size_t len;

    th_reset();
    reg = reg_from("[{\"name\": \"one\", \"target_modules\": [\"outer.*\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"1\"}},"
                   " {\"name\": \"two\", \"target_modules\": [\"outer.0\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"2\"}}]",
                   &rc, &err);
    /* ids: one -> 1 (outer.0), 2 (outer.1); two -> 3 (outer.0) */
    is_int(srt_hook_registry_active(reg), 3, "3 active registrations");
    is_int(srt_hook_remove(reg, 1, &err), SRT_OK, "remove id 1");
    forward(y);
    ok(trace_count("fwd:1:outer.0;") == 0 && trace_count("fwd:1:outer.1;") == 1 && trace_count("fwd:2:outer.0;") == 1,
       "a removed hook no longer runs, the others do");
    is_int(srt_hook_remove(reg, 1, &err), SRT_ERROR, "removing twice is an error: %s", err.msg);
    is_int(srt_hook_remove(reg, 99, &err), SRT_ERROR, "unknown id is an error: %s", err.msg);
    srt_hook_registry_list_json(reg, &json, &len, &err);
    ok(json && strstr(json, "{\"id\":1,\"name\":\"one\",\"type\":\"forward\",\"module\":\"outer.0\","
                            "\"global\":false,\"active\":false"), "listing shows id 1 inactive: %s", json);
    ok(json && strstr(json, "\"active\":2"), "listing counts 2 active");
    free(json);
    th_reset();
    is_int(srt_hook_readd(reg, 1, &err), SRT_OK, "re-add id 1");
    forward(y);
    ok(strstr(th_trace(), "fwd:1:outer.0;fwd:2:outer.0;") != NULL,
       "re-added hook runs again at its original place, before the later spec");
    is_int(srt_hook_readd(reg, 1, &err), SRT_ERROR, "re-adding an active hook is an error");

    is_int(srt_hook_remove_spec(reg, "one", &err), 2, "remove a whole spec by name");
    is_int(n_hooked(), 1, "only outer.0 still has hooks");
    is_int(srt_hook_readd_spec(reg, "one", &err), 2, "re-add it");
    is_int(srt_hook_remove_spec(reg, "zzz", &err), SRT_ERROR, "unknown spec name is an error");

    /* delete: destroy once, when the last registration goes */
    is_int(th_destroyed(), 0, "nothing destroyed by remove");
    srt_hook_delete(reg, 1, &err);
    is_int(th_destroyed(), 0, "spec 'one' still used by id 2");
    srt_hook_delete(reg, 2, &err);
    is_int(th_destroyed(), 1, "deleting the last registration destroys the hook once");
    is_int(srt_hook_readd(reg, 2, &err), SRT_ERROR, "a deleted id is gone");
    srt_hook_registry_free(reg);
    is_int(th_destroyed(), 2, "free destroys the remaining hook once");
}

static void test_fast_path(void)
{
    srt_hook_registry *reg = new_registry();
    srt_err err;
    int rc;
    int64_t id;
    srt_hook_attach_opts glob = { .name = "g", .global = 1 };
    srt_hook hook = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), NULL, noop, NULL, NULL, NULL, NULL };
    char *json;
    size_t len;

    is_int(n_hooked(), 0, "a fresh registry leaves every module->hooks NULL");
    is_int(srt_hook_registry_active(reg), 0, "no active hooks");
    th_reset();
    rc = srt_hook_registry_load_json(reg, "[{\"name\": \"x\", \"target_modules\": [\"inner.0\"], \"hook_factory\": " LIB "th_factory\"}]",
                                     strlen("[{\"name\": \"x\", \"target_modules\": [\"inner.0\"], \"hook_factory\": " LIB "th_factory\"}]"),
                                     "inline", &err);
    is_int(rc, SRT_OK, "inline JSON loads");
    ok(n_hooked() == 1 && mods[M_INNER0].hooks != NULL, "only the hooked module leaves the fast path");
    srt_hook_remove(reg, 1, &err);
    is_int(n_hooked(), 0, "removing the last hook restores hooks == NULL everywhere");
    id = srt_hook_attach(reg, NULL, &hook, &glob, &err);
    ok(id > 0 && n_hooked() == N_MODS, "a global hook puts every module on the slow path");
    srt_hook_remove(reg, id, &err);
    is_int(n_hooked(), 0, "removing it restores the fast path");
    srt_hook_registry_list_json(reg, &json, &len, &err);
    ok(strstr(json, "\"module\":\"*\",\"global\":true,\"active\":false") != NULL, "listing shows the global hook: %s", json);
    free(json);
    srt_hook_registry_set_tp(reg, 1, 2);
    srt_hook_readd(reg, 1, &err);
    srt_hook_registry_free(reg);
    is_int(n_hooked(), 0, "free resets module->hooks");

    /* tp rank reaches hooks through the host */
    reg = new_registry();
    srt_hook_registry_set_tp(reg, 3, 4);
    th_reset();
    srt_hook_registry_load_json(reg, "{\"forward_pre_hooks\": [{\"name\": \"tp\", \"target_modules\": [\"outer.0\"], \"hook_factory\": " LIB "th_factory\"}]}",
                                strlen("{\"forward_pre_hooks\": [{\"name\": \"tp\", \"target_modules\": [\"outer.0\"], \"hook_factory\": " LIB "th_factory\"}]}"),
                                "inline", &err);
    {
        float y[W];
        forward(y);
    }
    is_int(th_last_tp_rank(), 3, "hooks see their TP rank");
    srt_hook_registry_free(reg);
}



/* ---- device views: staging through the backend's copy functions ---- */
static int n_d2h, n_h2d, n_d2d;
static int fake_d2h(void *dst, const void *src, size_t n, void *ctx) { (void)ctx; n_d2h++; memcpy(dst, src, n); return 0; }
static int fake_h2d(void *dst, const void *src, size_t n, void *ctx) { (void)ctx; n_h2d++; memcpy(dst, src, n); return 0; }
static int fake_d2d(void *dst, const void *src, size_t n, void *ctx) { (void)ctx; n_d2d++; memcpy(dst, src, n); return 0; }

static int copy_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *o)
{
    (void)self;
    (void)b;
    memcpy(o->data, a->inputs[0].data, W * sizeof(float));
    return SRT_OK;
}

static int device_forward(float *y)
{
    float x[W] = { 1, 2, 3, 4 };
    srt_batch_ctx b = { SRT_FORWARD_DECODE, 1, NULL, NULL, 1, 0, 1 };
    srt_module_args a;
    srt_tensor_view o = f32_view(y, 1, W);
    memset(&a, 0, sizeof a);
    a.n_inputs = 1;
    a.inputs[0] = f32_view(x, 1, W);
    a.inputs[0].device = o.device = SRT_HOOK_DEVICE_CUDA;   /* host memory standing in for VRAM */
    return srt_module_forward(&mods[M_OUTER0], &b, copy_fn, NULL, &a, &o);
}

static void test_device_views(void)
{
    srt_hook_registry *reg;
    srt_err err;
    int rc;
    float y[W];
    srt_hook_device_ops ops = { fake_d2h, fake_h2d, fake_d2d, NULL, NULL };

    reg = reg_from("[{\"name\": \"dev\", \"target_modules\": [\"outer.0\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"value\": 0.5}}]",
                   &rc, &err);
    log_clear();
    ok(device_forward(y) == SRT_ERROR && log_count(SRT_LOG_ERROR, "forward hook 'dev' (id 1) failed on outer.0") == 1,
       "a device view cannot be read without device copy functions: the hook fails cleanly");
    srt_hook_registry_set_device_ops(reg, &ops);
    n_d2h = n_h2d = n_d2d = 0;
    rc = device_forward(y);
    ok(rc == SRT_OK && y[0] == 1.5f && y[3] == 4.5f && n_d2h == 1 && n_h2d == 1,
       "with the backend's copies, a hook reads and writes a device output (d2h %d, h2d %d)", n_d2h, n_h2d);
    srt_hook_registry_free(reg);

    reg = reg_from("[{\"name\": \"devrepl\", \"target_modules\": [\"outer.0\"], \"hook_factory\": " LIB "th_factory\", \"config\": {\"value\": 9, \"replace\": true}}]",
                   &rc, &err);
    srt_hook_registry_set_device_ops(reg, &ops);
    n_d2d = 0;
    /* the test hook's replacement view copies the output's device tag */
    rc = device_forward(y);
    ok(rc == SRT_OK && y[0] == 9 && y[3] == 9 && n_d2d == 1,
       "a replacement of a device output is copied device to device (d2d %d)", n_d2d);
    srt_hook_registry_set_device_ops(reg, NULL);
    rc = device_forward(y);
    ok(rc == SRT_ERROR, "without a device copy function the replacement is refused, not dropped");
    srt_hook_registry_free(reg);
}

/* Mutated spec documents: every outcome must be a clean success or a clean error, and every
 * hook object a factory made must be destroyed exactly once. */
static void test_mutations(void)
{
    const char *base = "{\"forward_hooks\": [{\"name\": \"m\", \"target_modules\": [\"outer.*\", \"inner.[01]\"],"
                       " \"hook_factory\": " LIB "th_factory\", \"config\": {\"tag\": \"t\", \"value\": 0},"
                       " \"prepend\": true}], \"forward_pre_hooks\": [{\"name\": \"p\", \"global\": true,"
                       " \"hook_factory\": " LIB "th_factory\", \"with_kwargs\": false}]}";
    static const char junk[] = "{}[],:\"\\ 0aZ*?.-tfn\x01\xff";
    size_t n = strlen(base);
    char *doc = malloc(n + 64);
    unsigned seed = 12345;
    int ok_loads = 0, errors = 0, forward_errors = 0;
    float y[W];

    th_reset();
    for (int it = 0; it < 3000; it++) {
        srt_hook_registry *reg = new_registry();
        srt_err err;
        size_t len = n;
        memcpy(doc, base, n);
        for (int k = 0; k < 1 + it % 4 && len > 0; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % len;
            seed = seed * 1103515245u + 12345u;
            switch ((seed >> 16) % 3) {
            case 0: doc[at] = junk[(seed >> 4) % (sizeof junk - 1)]; break;       /* replace */
            case 1: len = at; break;                                                  /* truncate */
            default: memmove(doc + at, doc + at + 1, len - at - 1); len--; break;   /* delete */
            }
        }
        if (srt_hook_registry_load_json(reg, doc, len, "mutant", &err) == SRT_OK) {
            ok_loads++;
            forward_errors += forward(y) != SRT_OK;
        } else {
            errors += err.msg[0] != '\0';
        }
        srt_hook_registry_free(reg);
    }
    free(doc);
    ok(ok_loads + errors == 3000, "3000 mutated specs: %d loaded, %d refused with a message", ok_loads, errors);
    is_int(forward_errors, 0, "every spec that loaded runs a forward cleanly");
    is_int(th_destroyed(), th_created(), "every hook object made (%d) was destroyed once", th_created());
    is_int(n_hooked(), 0, "no module keeps hooks after its registry is freed");
}

int main(void)
{
    srt_log_set_sink(log_sink, NULL, SRT_LOG_DEBUG);
    load_testlib();
    make_tmpdir();
    build_tree();

    test_fnmatch();
    test_sglang_contract();
    test_bad_documents();
    test_all_or_nothing();
    test_check_file();
    test_search_path();
    test_upstream_cases();
    test_pytorch_semantics();
    test_changing_values();
    test_handles();
    test_fast_path();
    test_device_views();
    test_mutations();

    if (tap_failed)
        log_dump();
    rm_rf_tmpdir();
    return tap_done();
}
