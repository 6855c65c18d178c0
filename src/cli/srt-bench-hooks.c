/* srt-bench-hooks: decode speed with and without forward hooks.
 *
 *   srt-bench-hooks --model PATH [--hooks none|noop|noop:PATTERN|FILE] [--threads N] [--prompt-len P]
 *                   [--tokens D] [--repeat R] [--search-path DIR]
 *   srt-bench-hooks --micro
 *
 * Greedy decode of D tokens after a P-token prompt, R times; prints decode tokens/s of
 * each run, the best and the median, the hook calls per token and a checksum of the
 * generated ids (equal checksums: identical tokens).
 *   none   no hook registered (every module->hooks == NULL)
 *   noop   one trivial forward hook on every module (a global hook that counts calls)
 *   noop:PATTERN  the same hook on the modules matching an fnmatch pattern
 *   FILE   a spec file, as srt_forward_hooks would load it
 * Built twice by src/hooks/part.mk: srt-bench-hooks, and srt-bench-hooks-nohooks whose
 * model code is compiled with -DSRT_NO_HOOKS (srt_module_forward calls modules directly). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hooks/registry.h"
#include "srt/model.h"
#include "srt/sampling.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long long hook_calls;

int noop_fwd_for_micro(srt_hook *h, const srt_hook_call *c, const srt_module_args *a,
                       srt_tensor_view *o, srt_tensor_view *r);
static int noop_fwd(srt_hook *h, const srt_hook_call *c, const srt_module_args *a,
                    srt_tensor_view *o, srt_tensor_view *r)
{
    (void)h; (void)c; (void)a; (void)o; (void)r;
    hook_calls++;
    return SRT_HOOK_OK;
}

/* ---- --micro: the cost of one module call through srt_module_forward() ---- */

static __attribute__((noinline)) int trivial_fn(void *self, const srt_batch_ctx *b,
                                                srt_module_args *a, srt_tensor_view *o)
{
    (void)b; (void)a; (void)o;
    (*(volatile long *)self)++;
    return SRT_OK;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);   /* CPU time: robust on a busy machine */
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double ns_per_call(srt_module *mod, long n, int direct)
{
    long count = 0;
    srt_batch_ctx b = { 0 };
    srt_module_args a = { 0 };
    srt_tensor_view o = { 0 };
    srt_module_fn fn = trivial_fn;
    double t0 = cpu_s();
    for (long i = 0; i < n; i++) {
        if (direct)
            fn(&count, &b, &a, &o);
        else
            srt_module_forward(mod, &b, fn, &count, &a, &o);
        __asm__ volatile("" ::: "memory");   /* keep the loop honest */
    }
    return (cpu_s() - t0) * 1e9 / (double)n;
}

static int micro(void)
{
    srt_module mod = { { "bench.module", "Linear", 0 }, -1, NULL };
    srt_err err;
    srt_hook noop = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), NULL, NULL, NULL, NULL, NULL, NULL };
    const long n = 20000000;
    double direct = 1e9, fast = 1e9, hooked = 1e9;
    extern int noop_fwd_for_micro(srt_hook *, const srt_hook_call *, const srt_module_args *,
                                  srt_tensor_view *, srt_tensor_view *);

    for (int rep = 0; rep < 5; rep++) {
        double d = ns_per_call(&mod, n, 1), f = ns_per_call(&mod, n, 0);
        direct = d < direct ? d : direct;
        fast = f < fast ? f : fast;
    }
    srt_hook_registry *reg = srt_hook_registry_create(&mod, 1, &err);
    srt_hook_attach_opts o = { .name = "noop" };
    noop.forward = noop_fwd_for_micro;
    if (!reg || srt_hook_attach(reg, "bench.module", &noop, &o, &err) < 0)
        return fprintf(stderr, "srt-bench-hooks: %s\n", err.msg), 1;
    for (int rep = 0; rep < 5; rep++) {
        double h = ns_per_call(&mod, n / 4, 0);
        hooked = h < hooked ? h : hooked;
    }
    printf("micro%s: direct call %.2f ns, srt_module_forward without hooks %.2f ns, "
           "with one no-op forward hook %.2f ns (thread CPU time, best of 5)\n",
#ifdef SRT_NO_HOOKS
           " (built with -DSRT_NO_HOOKS)",
#else
           "",
#endif
           direct, fast, hooked);
    srt_hook_registry_free(reg);
    return 0;
}

int noop_fwd_for_micro(srt_hook *h, const srt_hook_call *c, const srt_module_args *a,
                       srt_tensor_view *o, srt_tensor_view *r)
{
    return noop_fwd(h, c, a, o, r);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double proc_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *hooks = "none", *search = NULL;
    int threads = 0, plen = 32, ntok = 64, repeat = 5;
    srt_err err = { { 0 } };

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && v && ++i)
        if (ARG("--model")) model_path = v;
        else if (ARG("--hooks")) hooks = v;
        else if (ARG("--threads")) threads = atoi(v);
        else if (ARG("--prompt-len")) plen = atoi(v);
        else if (ARG("--tokens")) ntok = atoi(v);
        else if (ARG("--repeat")) repeat = atoi(v);
        else if (ARG("--search-path")) search = v;
        else if (strcmp(a, "--micro") == 0) return micro();
        else {
            fprintf(stderr, "usage: srt-bench-hooks --model PATH [--hooks none|noop|noop:PATTERN|FILE] [--threads N]\n"
                            "       [--prompt-len P] [--tokens D] [--repeat R] [--search-path DIR]\n");
            return 2;
        }
#undef ARG
    }
    if (!model_path || plen < 1 || ntok < 2 || repeat < 1)
        return fprintf(stderr, "srt-bench-hooks: --model is required; sizes must be positive\n"), 2;

    srt_model *m = NULL;
    srt_runner *r = NULL;
    srt_hook_registry *reg = NULL;
    if (srt_model_load(model_path, &m, &err) != SRT_OK)
        return fprintf(stderr, "srt-bench-hooks: %s\n", err.msg), 1;
    const srt_model_config *cfg = srt_model_config_of(m);
    srt_runner_opts ro = { .max_batch_tokens = plen, .max_seqs = 1, .n_threads = threads };
    if (srt_runner_create(m, &ro, &r, &err) != SRT_OK)
        return fprintf(stderr, "srt-bench-hooks: %s\n", err.msg), 1;

    int n_mod;
    srt_module *mods = srt_model_modules(m, &n_mod);
    reg = srt_hook_registry_create(mods, n_mod, &err);
    if (!reg)
        return fprintf(stderr, "srt-bench-hooks: %s\n", err.msg), 1;
    if (search)
        srt_hook_registry_set_search_path(reg, search, &err);
    srt_hook noop = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), NULL, noop_fwd, NULL, NULL, NULL, NULL };
    if (strcmp(hooks, "noop") == 0) {
        srt_hook_attach_opts o = { .name = "noop", .global = 1 };
        if (srt_hook_attach(reg, NULL, &noop, &o, &err) < 0)
            return fprintf(stderr, "srt-bench-hooks: %s\n", err.msg), 1;
    } else if (strncmp(hooks, "noop:", 5) == 0) {
        int attached = 0;
        for (int i = 0; i < n_mod; i++) {
            srt_hook_attach_opts o = { .name = "noop" };
            if (!srt_hook_fnmatch(hooks + 5, mods[i].info.name))
                continue;
            if (srt_hook_attach(reg, mods[i].info.name, &noop, &o, &err) < 0)
                return fprintf(stderr, "srt-bench-hooks: %s\n", err.msg), 1;
            attached++;
        }
        fprintf(stderr, "srt-bench-hooks: no-op hook on %d modules matching '%s'\n", attached, hooks + 5);
    } else if (strcmp(hooks, "none") != 0) {
        if (srt_hook_registry_load_file(reg, hooks, &err) != SRT_OK)
            return fprintf(stderr, "srt-bench-hooks: %s\n", err.msg), 1;
    }

    int32_t n_ctx = plen + ntok;
    int32_t *ids = malloc((size_t)n_ctx * sizeof *ids), *slots = malloc((size_t)n_ctx * sizeof *slots);
    int32_t *pos = malloc((size_t)n_ctx * sizeof *pos);
    float *logits = malloc((size_t)cfg->vocab_size * sizeof *logits);
    double *rates = malloc((size_t)repeat * sizeof *rates);
    double *cpu_ms = malloc((size_t)repeat * sizeof *cpu_ms);
    if (!ids || !slots || !pos || !logits || !rates || !cpu_ms)
        return fprintf(stderr, "srt-bench-hooks: out of memory\n"), 1;
    for (int32_t i = 0; i < n_ctx; i++) {
        slots[i] = pos[i] = i;
        ids[i] = 1 + (int32_t)(((int64_t)i * 7919) % (cfg->vocab_size - 1));
    }
    const int32_t *seq_slots[1] = { slots };
    unsigned long long checksum = 0;
    long long calls_decode = 0;

    for (int rep = 0; rep < repeat; rep++) {
        srt_kv_pool *kv = NULL;
        if (srt_kv_pool_create(cfg, n_ctx, SRT_F32, &kv, &err) != SRT_OK)
            return fprintf(stderr, "srt-bench-hooks: %s\n", err.msg), 1;
        int32_t start[2] = { 0, plen }, len = plen;
        srt_forward_batch pb = { .n_tokens = plen, .token_ids = ids, .positions = pos, .out_slots = slots,
                                 .n_seqs = 1, .seq_start = start, .seq_len = &len, .seq_slots = seq_slots,
                                 .forward_mode = SRT_FORWARD_PREFILL };
        if (srt_runner_forward(r, kv, &pb, logits, &err) != SRT_OK)
            return fprintf(stderr, "srt-bench-hooks: %s\n", err.msg), 1;
        unsigned long long sum = 1469598103934665603ull;
        long long c0 = hook_calls;
        double t0 = now_s(), c_0 = proc_cpu_s();
        for (int t = 0; t < ntok - 1; t++) {
            int32_t tok = srt_argmax(logits, cfg->vocab_size), p = plen + t, one[2] = { 0, 1 }, l = p + 1;
            sum = (sum ^ (unsigned long long)tok) * 1099511628211ull;
            srt_forward_batch db = { .n_tokens = 1, .token_ids = &tok, .positions = &pos[p],
                                     .out_slots = &slots[p], .n_seqs = 1, .seq_start = one, .seq_len = &l,
                                     .seq_slots = seq_slots, .forward_mode = SRT_FORWARD_DECODE };
            if (srt_runner_forward(r, kv, &db, logits, &err) != SRT_OK)
                return fprintf(stderr, "srt-bench-hooks: %s\n", err.msg), 1;
        }
        double dt = now_s() - t0;
        rates[rep] = (ntok - 1) / dt;
        cpu_ms[rep] = (proc_cpu_s() - c_0) * 1e3 / (ntok - 1);
        calls_decode = hook_calls - c0;
        checksum = sum;
        printf("run %d: decode %.2f tok/s, %.3f CPU ms/token\n", rep + 1, rates[rep], cpu_ms[rep]);
        srt_kv_pool_free(kv);
    }
    qsort(rates, (size_t)repeat, sizeof *rates, cmp_double);
    qsort(cpu_ms, (size_t)repeat, sizeof *cpu_ms, cmp_double);
    printf("hooks=%s%s modules=%d threads=%d prompt=%d decode_tokens=%d: best %.2f tok/s, "
           "median %.2f tok/s, CPU ms/token best %.3f median %.3f, hook calls/token %.1f, "
           "checksum %016llx\n",
           hooks,
#ifdef SRT_NO_HOOKS
           " (built with -DSRT_NO_HOOKS)",
#else
           "",
#endif
           n_mod, srt_runner_n_threads(r), plen, ntok - 1, rates[repeat - 1], rates[repeat / 2],
           cpu_ms[0], cpu_ms[repeat / 2], (double)calls_decode / (ntok - 1), checksum);
    srt_hook_registry_free(reg);
    srt_runner_free(r);
    srt_model_free(m);
    free(ids); free(slots); free(pos); free(logits); free(rates); free(cpu_ms);
    return 0;
}
