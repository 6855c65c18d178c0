/* The runner's device path (a backend with memory of its own, as CUDA's) checked without a GPU:
 * a "host device" backend wraps the CPU ops, hands out memory it tracks, and flags any op given
 * a pointer outside its memory (host ids, positions, activations, KV) or a weight that was never
 * load_weight'ed. The runner must use only its backend memory, announce every batch with
 * begin_batch, compute cos/sin with rope_cos_sin, gather + download the logits, and give
 * logits bit-identical to the CPU path (the wrapped ops are the CPU's).
 * Tensor parallel (tp=2, vocab 97 so the last vocab shard is short): ranks in forked processes,
 * each on its own host-device backend, match tp=1 within 1e-4, load only their vocab rows of the
 * embedding and lm_head, keep to backend memory, and follow the per-step upload/gather/download
 * protocol; over the CPU communicator and over NCCL (the fake libnccl: the runner makes the
 * communicator from rank 0's unique id), also with a pre-hook on embed_tokens rewriting the ids in
 * backend memory (read back to pick each rank's rows); NCCL failing in the id or an all-reduce
 * fails every rank, none hangs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hooks/registry.h"
#include "srt/backend.h"
#include "srt/comm.h"
#include "srt/model.h"
#include "tap.h"
#include "tiny_model_writer.h"

#define MAXA 4096
static struct { char *p; size_t n; } allocs[MAXA];
static const void *loaded[4096];
static int64_t loaded_rows[4096];
static int n_loaded, violations, n_begin, n_rope_cs, n_gather, n_download, n_upload, n_fused;
static const srt_forward_batch *announced;
static int VOC;
static srt_backend *cpu_be;
static char first_violation[200];

static void violate(const char *what)
{
    if (!violations++)
        snprintf(first_violation, sizeof first_violation, "%s", what);
}

static int is_dev(const void *p)
{
    for (int i = 0; i < MAXA; i++)
        if (allocs[i].p && (const char *)p >= allocs[i].p && (const char *)p < allocs[i].p + allocs[i].n)
            return 1;
    return 0;
}
static void need_dev(const void *p, const char *what) { if (!is_dev(p)) violate(what); }
static void need_loaded(const void *data, const char *what)
{
    for (int i = 0; i < n_loaded; i++)
        if (loaded[i] == data)
            return;
    violate(what);
}

static void *d_alloc(srt_backend *be, size_t bytes, srt_err *err)
{
    for (int i = 0; i < MAXA; i++)
        if (!allocs[i].p) {
            allocs[i].n = bytes ? bytes : 1;
            allocs[i].p = aligned_alloc(256, (allocs[i].n + 255) / 256 * 256);
            memset(allocs[i].p, 0x7f, allocs[i].n);   /* not zeroed, as device memory */
            return allocs[i].p;
        }
    srt_err_set(err, "host device: too many allocations");
    return NULL;
}
static void d_free(srt_backend *be, void *p)
{
    for (int i = 0; i < MAXA; i++)
        if (allocs[i].p == p) {
            free(p);
            allocs[i].p = NULL;
            return;
        }
    violate("free of a pointer not allocated");
}
static int d_upload(srt_backend *be, void *dst, const void *src, size_t n, srt_err *err)
{
    need_dev(dst, "upload to host memory");
    n_upload++;
    memcpy(dst, src, n);
    return SRT_OK;
}
static int d_download(srt_backend *be, void *dst, const void *src, size_t n, srt_err *err)
{
    need_dev(src, "download from host memory");
    n_download++;
    memcpy(dst, src, n);
    return SRT_OK;
}
static void d_copy(srt_backend *be, void *dst, const void *src, size_t n) { memmove(dst, src, n); }
static int d_load(srt_backend *be, const srt_weight *w, srt_err *err)
{
    if (n_loaded < 4096) {
        loaded_rows[n_loaded] = w->rows;
        loaded[n_loaded++] = w->data;
    }
    return SRT_OK;
}
static int d_begin(srt_backend *be, const srt_forward_batch *b, srt_err *err)
{
    n_begin++;
    announced = b;
    return SRT_OK;
}
static void d_rope_cs(srt_backend *be, const int32_t *pos, int64_t n, const float *inv_freq, int32_t hd, float *cs)
{
    need_dev(pos, "rope_cos_sin: host positions");
    need_dev(cs, "rope_cos_sin: host output");
    need_loaded(inv_freq, "rope_cos_sin: inv_freq not loaded");
    n_rope_cs++;
    for (int64_t t = 0; t < n; t++) {
        float *co = cs + t * 2 * hd, *si = co + hd;
        for (int32_t i = 0; i < hd / 2; i++) {
            float f = (float)pos[t] * inv_freq[i];
            co[i] = co[i + hd / 2] = cosf(f);
            si[i] = si[i + hd / 2] = sinf(f);
        }
    }
}
static void d_gather(srt_backend *be, float *dst, const float *src, const int32_t *rows, int32_t n, int64_t w)
{
    need_dev(dst, "gather: host dst");
    need_dev(src, "gather: host src");
    need_dev(rows, "gather: host rows");
    n_gather++;
    for (int32_t i = 0; i < n; i++)
        memcpy(dst + (size_t)i * w, src + (size_t)rows[i] * w, (size_t)w * sizeof(float));
}
static int d_sync(srt_backend *be, srt_err *err) { return SRT_OK; }

/* the CPU's compute, with the pointers checked */
static int d_reserve(srt_backend *be, const srt_weight *w, int64_t n, srt_err *err)
{
    return cpu_be->ops->reserve_matmul(cpu_be, w, n, err);
}
static void d_matmul(srt_backend *be, const srt_weight *w, const float *bias, const float *x, int64_t n, float *y)
{
    need_dev(x, "matmul: host input");
    need_dev(y, "matmul: host output");
    need_loaded(w->data, "matmul: weight not loaded");
    if (bias)
        need_loaded(bias, "matmul: bias not loaded");
    cpu_be->ops->matmul(cpu_be, w, bias, x, n, y);
}
static void d_embed(srt_backend *be, const srt_weight *t, const int32_t *ids, int64_t n, float *out)
{
    need_dev(ids, "embed: host ids");
    need_dev(out, "embed: host output");
    need_loaded(t->data, "embed: table not loaded");
    cpu_be->ops->embed(cpu_be, t, ids, n, out);
}
static void d_rmsnorm(srt_backend *be, const float *x, const srt_weight *w, float eps, int64_t r, int64_t d, float *out)
{
    need_dev(x, "rmsnorm: host input");
    need_dev(out, "rmsnorm: host output");
    need_loaded(w->data, "rmsnorm: weight not loaded");
    cpu_be->ops->rmsnorm(cpu_be, x, w, eps, r, d, out);
}
static void d_silu(srt_backend *be, const float *x, int64_t n, float *out) { need_dev(x, "silu"); cpu_be->ops->silu(cpu_be, x, n, out); }
static void d_mul(srt_backend *be, float *y, const float *x, int64_t n) { need_dev(y, "mul"); cpu_be->ops->mul(cpu_be, y, x, n); }
static void d_silu_mul(srt_backend *be, const float *g, const float *u, int64_t n, float *out)
{
    need_dev(g, "silu_mul: host gate");
    need_dev(out, "silu_mul: host output");
    cpu_be->ops->silu_mul(cpu_be, g, u, n, out);
}
static void d_add(srt_backend *be, float *y, const float *x, int64_t n) { need_dev(y, "add"); need_dev(x, "add"); cpu_be->ops->add(cpu_be, y, x, n); }
static void d_add3(srt_backend *be, float *o, const float *a, const float *b, int64_t n)
{
    need_dev(o, "add3");
    need_dev(a, "add3");
    cpu_be->ops->add3(cpu_be, o, a, b, n);
}
static void d_rope(srt_backend *be, float *x, int64_t n, int32_t h, int32_t hd, const float *cs)
{
    need_dev(x, "rope: host x");
    need_dev(cs, "rope: host cos_sin");
    cpu_be->ops->rope(cpu_be, x, n, h, hd, cs);
}
static void d_kv_store(srt_backend *be, const srt_forward_batch *b, const float *k, const float *v, void *kc, void *vc,
                       srt_dtype dt, int32_t re)
{
    need_dev(k, "kv_store: host k");
    need_dev(kc, "kv_store: host K cache");
    need_dev(vc, "kv_store: host V cache");
    if (b != announced)
        violate("kv_store: batch not announced by begin_batch");
    cpu_be->ops->kv_store(cpu_be, b, k, v, kc, vc, dt, re);
}
static void d_attention(srt_backend *be, const srt_attn_args *a)
{
    need_dev(a->q, "attention: host q");
    need_dev(a->out, "attention: host out");
    need_dev(a->k_cache, "attention: host K cache");
    if (a->batch != announced)
        violate("attention: batch not announced by begin_batch");
    cpu_be->ops->attention(cpu_be, a);
}
static void d_add_rmsnorm(srt_backend *be, float *sum, const float *a, const float *b, const srt_weight *w, float eps,
                          int64_t r, int64_t d, float *out)
{
    n_fused++;
    d_add3(be, sum, a, b, r * d);
    d_rmsnorm(be, sum, w, eps, r, d, out);
}
static int d_threads(const srt_backend *be) { return cpu_be->ops->n_threads(cpu_be); }
static void d_destroy(srt_backend *be) {}

static const srt_backend_ops dev_ops = {
    .name = "hostdev", .destroy = d_destroy, .reserve_matmul = d_reserve, .matmul = d_matmul, .embed = d_embed,
    .rmsnorm = d_rmsnorm, .silu = d_silu, .mul = d_mul, .silu_mul = d_silu_mul, .add = d_add, .add3 = d_add3,
    .rope = d_rope, .kv_store = d_kv_store, .attention = d_attention, .n_threads = d_threads,
    .alloc = d_alloc, .free = d_free, .upload = d_upload, .download = d_download, .copy = d_copy,
    .load_weight = d_load, .begin_batch = d_begin, .rope_cos_sin = d_rope_cs, .gather_rows = d_gather,
    .sync = d_sync, .add_rmsnorm = d_add_rmsnorm,
};

/* Two ragged steps: a prefill of 5 + 3 tokens (one sequence reading slots of a cached prefix
 * on the second step), then a decode of both with explicit logit rows. */
static int run(srt_runner *r, srt_kv_pool *kv, float *out, srt_err *err)
{
    int32_t s0[8] = { 0, 1, 2, 3, 4, 5, 6, 7 }, s1[8] = { 10, 11, 12, 13, 14, 15, 16, 17 };
    const int32_t *ss[2] = { s0, s1 };
    int32_t tok[8] = { 3, 9, 4, 1, 7, 2, 8, 5 }, pos[8] = { 0, 1, 2, 3, 4, 0, 1, 2 };
    int32_t outs[8] = { 0, 1, 2, 3, 4, 10, 11, 12 }, start[3] = { 0, 5, 8 }, len[2] = { 5, 3 };
    srt_forward_batch b = { .n_tokens = 8, .token_ids = tok, .positions = pos, .out_slots = outs, .n_seqs = 2,
                            .seq_start = start, .seq_len = len, .seq_slots = ss, .forward_mode = SRT_FORWARD_MIXED };
    if (srt_runner_forward(r, kv, &b, out, err) != SRT_OK)
        return SRT_ERROR;
    int32_t tok2[2] = { 6, 11 }, pos2[2] = { 5, 3 }, outs2[2] = { 5, 13 }, start2[3] = { 0, 1, 2 }, len2[2] = { 6, 4 };
    int32_t rows[2] = { 1, 0 };
    srt_forward_batch d = { .n_tokens = 2, .token_ids = tok2, .positions = pos2, .out_slots = outs2, .n_seqs = 2,
                            .seq_start = start2, .seq_len = len2, .seq_slots = ss, .forward_mode = SRT_FORWARD_DECODE,
                            .logit_rows = rows, .n_logit_rows = 2 };
    return srt_runner_forward(r, kv, &d, out + 2 * (size_t)VOC, err);
}

/* What a tensor-parallel rank on the host-device backend reports. */
typedef struct tp_report {
    int  ran, violations, n_upload, n_begin, n_gather, n_download, left;
    int  emb_views, lm_views, bad_views;   /* loaded weights inside the embedding / lm_head tensors */
    char first_violation[200], msg[256];
} tp_report;

/* Rows of the stored tensor `name` among the loaded weights: each must be exactly this rank's
 * shard [lo, lo + n); returns how many were. */
static int shard_loads(const srt_model *m, const char *name, int64_t lo, int64_t n, int *bad)
{
    const srt_weight *w = srt_model_weight(m, name);
    int k = 0;
    if (!w)
        return -1;
    const char *base = w->data, *end = base + (size_t)w->rows * w->row_stride;
    for (int i = 0; i < n_loaded; i++) {
        const char *p = loaded[i];
        if (p < base || p >= end)
            continue;
        if (p == base + (size_t)lo * w->row_stride && loaded_rows[i] == n)
            k++;
        else
            ++*bad;
    }
    return k;
}

/* A forward pre-hook on model.embed_tokens that rewrites the ids in place (in backend memory on
 * the device path): with tp > 1 the runner must read them back to find each rank's rows. */
static int remap_V;
static int remap_pre(srt_hook *h, const srt_hook_call *c, srt_module_args *a)
{
    int32_t *ids = a->inputs[0].data;
    for (int64_t t = 0; t < a->inputs[0].shape[0]; t++)
        ids[t] = (ids[t] * 7 + 3) % remap_V;
    return SRT_HOOK_OK;
}
static srt_hook remap_hook = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), remap_pre, NULL, NULL, NULL, NULL, NULL };

static srt_hook_registry *attach_remap(srt_model *m, int V, srt_err *err)
{
    int n;
    srt_module *mods = srt_model_modules(m, &n);
    srt_hook_attach_opts ho = { .name = "remap", .pre = 1 };
    srt_hook_registry *reg = srt_hook_registry_create(mods, n, err);
    remap_V = V;
    if (reg && srt_hook_attach(reg, "model.embed_tokens", &remap_hook, &ho, err) <= 0) {
        srt_hook_registry_free(reg);
        return NULL;
    }
    return reg;
}

/* tp ranks in forked processes, each a runner on its own host-device backend; tensor
 * collectives over the CPU communicator on the backend memory, or over NCCL (nccl_so: the
 * fake libnccl, host memory) with the unique id broadcast by the runner. */
static void run_tp(const char *dir, const char *arch, int size, const char *nccl_so, const float *ref, int V,
                   int remap)
{
    srt_err err = { { 0 } };
    if (nccl_so && access(nccl_so, R_OK) != 0) {
        ok(0, "%s present (the fake NCCL, built by make)", nccl_so);
        return;
    }
    size_t bytes = (size_t)size * (sizeof(tp_report) + 4 * (size_t)V * sizeof(float));
    char *sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    const char *via = remap ? "NCCL (fake), ids rewritten by a pre-hook on embed_tokens"
                    : nccl_so ? "NCCL (fake)" : "the CPU communicator";
    memset(sh, 0, bytes);
    srt_cpu_comm_group *g = srt_cpu_comm_group_create(size, 1 << 16, &err);
    pid_t pids[8];
    for (int k = 0; g && k < size; k++) {
        pids[k] = fork();
        if (pids[k] == 0) {
            tp_report *rep = (tp_report *)(sh + (size_t)k * sizeof(tp_report));
            float *out = (float *)(sh + (size_t)size * sizeof(tp_report)) + (size_t)k * 4 * V;
            srt_model *m = NULL;
            srt_runner *r = NULL;
            srt_kv_pool *kv = NULL;
            srt_nccl_lib *lib = NULL;
            srt_hook_registry *reg = NULL;
            srt_comm *comm = srt_cpu_comm_join(g, k, &err);
            srt_backend dev = { &dev_ops, NULL };
            n_loaded = violations = n_begin = n_rope_cs = n_gather = n_download = n_upload = n_fused = 0;
            cpu_be = srt_cpu_backend_create(1, 0, &err);
            srt_runner_opts o = { .max_batch_tokens = 16, .max_seqs = 4, .n_threads = 1, .comm = comm, .backend = &dev };
            if (nccl_so && !(lib = o.nccl = srt_nccl_load(nccl_so, &err)))
                goto done;
            if (!comm || !cpu_be || srt_model_load(dir, &m, &err) != SRT_OK ||
                (remap && !(reg = attach_remap(m, V, &err))) || srt_runner_create(m, &o, &r, &err) != SRT_OK ||
                srt_kv_pool_create_on(srt_model_config_of(m), size, 32, SRT_F32, &dev, &kv, &err) != SRT_OK)
                goto done;
            int64_t vp = (V + size - 1) / size, lo = k * vp, n = V - lo < vp ? V - lo : vp;
            rep->emb_views = shard_loads(m, "model.embed_tokens.weight", lo, n, &rep->bad_views);
            rep->lm_views = shard_loads(m, "lm_head.weight", lo, n, &rep->bad_views);
            n_upload = 0;
            if (run(r, kv, out, &err) != SRT_OK)
                goto done;
            rep->ran = 1;
        done:
            snprintf(rep->msg, sizeof rep->msg, "%.200s", err.msg);
            rep->violations = violations;
            snprintf(rep->first_violation, sizeof rep->first_violation, "%s", first_violation);
            rep->n_upload = n_upload, rep->n_begin = n_begin, rep->n_gather = n_gather, rep->n_download = n_download;
            srt_kv_pool_free(kv);
            srt_runner_free(r);
            srt_hook_registry_free(reg);
            for (int i = 0; i < MAXA; i++)
                rep->left += allocs[i].p != NULL;
            srt_comm_destroy(comm);
            srt_nccl_unload(lib);
            srt_model_free(m);
            srt_backend_free(cpu_be);
            _exit(0);
        }
    }
    int exited = 1;
    for (int k = 0; g && k < size; k++) {
        int st;
        waitpid(pids[k], &st, 0);
        exited &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    srt_cpu_comm_group_free(g);
    int ran = g && exited, views = 1, clean = 1, protocol = 1, same = 1;
    double worst = 0;
    const float *out0 = (const float *)(sh + (size_t)size * sizeof(tp_report));
    for (int k = 0; k < size; k++) {
        tp_report *rep = (tp_report *)(sh + (size_t)k * sizeof(tp_report));
        const float *out = out0 + (size_t)k * 4 * V;
        ran &= rep->ran;
        if (!rep->ran)
            tap_diag("%s tp=%d rank %d: %s", arch, size, k, rep->msg);
        /* tied: the embedding's view is lm_head's too */
        views &= rep->emb_views >= 1 && rep->lm_views >= 1 && rep->bad_views == 0;
        clean &= rep->violations == 0 && rep->left == 0;
        if (rep->violations)
            tap_diag("rank %d: %d violations, first: %s", k, rep->violations, rep->first_violation);
        /* per step: ids, positions, the ids local to the shard, the embedding's gather rows
         * and the logit rows go up; the embedding and the logit rows are gathered; the
         * gathered logits come down once */
        protocol &= rep->n_upload == 10 && rep->n_begin == 2 && rep->n_gather == 4 &&
                    rep->n_download == (remap ? 4 : 2);   /* + the hook's ids, read back */
        if (k == 0 && !protocol)
            tap_diag("uploads %d, begin %d, gathers %d, downloads %d", rep->n_upload, rep->n_begin, rep->n_gather,
                     rep->n_download);
        same &= memcmp(out, out0, 4 * (size_t)V * sizeof(float)) == 0;
        for (size_t i = 0; i < 4 * (size_t)V; i++) {
            double d = fabs((double)out[i] - ref[i]);
            if (!(d <= worst))
                worst = isnan(d) ? INFINITY : d;
        }
    }
    ok(ran, "%s tp=%d over %s: every rank runs the device path", arch, size, via);
    ok(ran && worst < 1e-4, "%s tp=%d over %s: logits = tp=1 within 1e-4 (worst %.3g)", arch, size, via, worst);
    ok(ran && same, "%s tp=%d over %s: ranks agree bit for bit", arch, size, via);
    ok(ran && views, "%s tp=%d over %s: only this rank's vocab rows of the embedding and lm_head are loaded", arch,
       size, via);
    ok(ran && clean, "%s tp=%d over %s: only backend memory reached the ops, every allocation released", arch, size,
       via);
    ok(ran && protocol, "%s tp=%d over %s: uploads, gathers and one download per step as documented", arch, size, via);
    munmap(sh, bytes);
}

/* NCCL failing (the fake's FAKE_NCCL_FAIL): every rank returns the error, none hangs. */
static void run_tp_fail(const char *dir, const char *nccl_so, const char *fail, const char *expect, int V)
{
    srt_err err = { { 0 } };
    size_t bytes = 2 * sizeof(tp_report) + 8 * (size_t)V * sizeof(float);
    char *sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(sh, 0, bytes);
    setenv("FAKE_NCCL_FAIL", fail, 1);
    setenv("FAKE_NCCL_TIMEOUT_MS", "5000", 1);
    srt_cpu_comm_group *g = srt_cpu_comm_group_create(2, 1 << 16, &err);
    pid_t pids[2];
    for (int k = 0; g && k < 2; k++) {
        pids[k] = fork();
        if (pids[k] == 0) {
            tp_report *rep = (tp_report *)(sh + (size_t)k * sizeof(tp_report));
            float *out = (float *)(sh + 2 * sizeof(tp_report)) + (size_t)k * 4 * V;
            srt_model *m = NULL;
            srt_runner *r = NULL;
            srt_kv_pool *kv = NULL;
            srt_comm *comm = srt_cpu_comm_join(g, k, &err);
            srt_backend dev = { &dev_ops, NULL };
            cpu_be = srt_cpu_backend_create(1, 0, &err);
            srt_cpu_comm_set_timeout_ms(comm, 10000);
            srt_runner_opts o = { .max_batch_tokens = 16, .max_seqs = 4, .n_threads = 1, .comm = comm, .backend = &dev };
            o.nccl = srt_nccl_load(nccl_so, &err);
            if (o.nccl && srt_model_load(dir, &m, &err) == SRT_OK && srt_runner_create(m, &o, &r, &err) == SRT_OK &&
                srt_kv_pool_create_on(srt_model_config_of(m), 2, 32, SRT_F32, &dev, &kv, &err) == SRT_OK &&
                run(r, kv, out, &err) == SRT_OK)
                rep->ran = 1;
            snprintf(rep->msg, sizeof rep->msg, "%.200s", err.msg);
            srt_kv_pool_free(kv);
            srt_runner_free(r);
            srt_comm_destroy(comm);
            srt_nccl_unload(o.nccl);
            srt_model_free(m);
            srt_backend_free(cpu_be);
            _exit(0);
        }
    }
    for (int k = 0; g && k < 2; k++)
        waitpid(pids[k], NULL, 0);
    unsetenv("FAKE_NCCL_FAIL");
    unsetenv("FAKE_NCCL_TIMEOUT_MS");
    srt_cpu_comm_group_free(g);
    tp_report *r0 = (tp_report *)sh, *r1 = (tp_report *)(sh + sizeof(tp_report));
    ok(g && !r0->ran && !r1->ran && strstr(r0->msg, expect) && r1->msg[0],
       "NCCL failing in %s: both ranks return an error, none hangs (rank 0: %s; rank 1: %s)", fail, r0->msg, r1->msg);
    munmap(sh, bytes);
}

int main(void)
{
    char dir[256];
    srt_err err = { { 0 } };
    tw_model tm;
    const char *archs[] = { "qwen3", "qwen2", "llama" };
    /* the fake libnccl.so.2 (t/unit/fake_nccl, host memory across processes) */
    const char *nccl_so = getenv("SRT_FAKE_NCCL") ? getenv("SRT_FAKE_NCCL") : "build/lib/libfake_nccl.so";
    for (int ai = 0; ai < 3; ai++) {
        snprintf(dir, sizeof dir, "/tmp/srt_test_devpath_%d_%d", (int)getpid(), ai);
        tw_make(&tm, archs[ai], 40 + ai);
        tw_set_vocab(&tm, 97);   /* odd: the last vocab shard at tp=2 is one row short */
        tw_write_hf(&tm, dir, 1, "F32");
        srt_model *m = NULL;
        if (!ok(srt_model_load(dir, &m, &err) == SRT_OK, "%s: tiny model loads", archs[ai])) {
            tap_diag("%s", err.msg);
            tw_free(&tm);
            continue;
        }
        int V = VOC = tm.vocab;
        float *ref = calloc((size_t)4 * V, sizeof(float)), *got = calloc((size_t)4 * V, sizeof(float));
        srt_runner *rc = NULL, *rd = NULL;
        srt_kv_pool *kc = NULL, *kd = NULL;
        srt_runner_opts o = { .max_batch_tokens = 16, .max_seqs = 4, .n_threads = 2 };
        ok(srt_runner_create(m, &o, &rc, &err) == SRT_OK &&
           srt_kv_pool_create(srt_model_config_of(m), 32, SRT_F32, &kc, &err) == SRT_OK &&
           run(rc, kc, ref, &err) == SRT_OK, "%s: CPU path runs", archs[ai]);

        run_tp(dir, archs[ai], 2, NULL, ref, V, 0);
        run_tp(dir, archs[ai], 2, nccl_so, ref, V, 0);
        if (ai == 2) {
            /* tp=1 on the CPU path with the same pre-hook is the reference */
            float *ref2 = calloc((size_t)4 * V, sizeof(float));
            srt_runner *r2 = NULL;
            srt_kv_pool *k2 = NULL;
            srt_hook_registry *reg = attach_remap(m, V, &err);
            int ok2 = reg && srt_runner_create(m, &o, &r2, &err) == SRT_OK &&
                      srt_kv_pool_create(srt_model_config_of(m), 32, SRT_F32, &k2, &err) == SRT_OK &&
                      run(r2, k2, ref2, &err) == SRT_OK;
            ok(ok2 && memcmp(ref2, ref, sizeof(float) * 4 * (size_t)V) != 0,
               "%s: the embed_tokens pre-hook changes the logits at tp=1 %s", archs[ai], err.msg);
            srt_kv_pool_free(k2);
            srt_runner_free(r2);
            srt_hook_registry_free(reg);
            run_tp(dir, archs[ai], 2, nccl_so, ref2, V, 1);
            free(ref2);
        }
        if (ai == 0) {
            run_tp_fail(dir, nccl_so, "uniqueid", "NCCL unique id", V);
            run_tp_fail(dir, nccl_so, "allreduce", "nccl", V);
        }

        cpu_be = srt_cpu_backend_create(2, 0, &err);
        srt_backend dev = { &dev_ops, NULL };
        n_loaded = violations = n_begin = n_rope_cs = n_gather = n_download = n_upload = n_fused = 0;
        first_violation[0] = 0;
        o.backend = &dev;
        int okc = srt_runner_create(m, &o, &rd, &err) == SRT_OK &&
                  srt_kv_pool_create_on(srt_model_config_of(m), 1, 32, SRT_F32, srt_runner_backend(rd), &kd, &err) == SRT_OK;
        ok(okc && srt_runner_backend(rd) == &dev, "%s: runner and KV pool on the given backend", archs[ai]);
        if (!okc)
            tap_diag("%s", err.msg);
        ok(n_loaded > 0, "%s: weights loaded with load_weight (%d)", archs[ai], n_loaded);
        int okr = okc && run(rd, kd, got, &err) == SRT_OK;
        ok(okr, "%s: device path runs", archs[ai]);
        if (!okr)
            tap_diag("%s", err.msg);
        ok(violations == 0, "%s: every op got backend memory and loaded weights (%d violations%s%s)", archs[ai],
           violations, violations ? ", first: " : "", first_violation);
        ok(n_begin == 2 && n_rope_cs == 2 && n_gather == 2 && n_download == 2 && n_upload == 6,
           "%s: per step upload ids/positions/rows, begin_batch, rope_cos_sin, gather, download (%d %d %d %d %d)",
           archs[ai], n_upload, n_begin, n_rope_cs, n_gather, n_download);
        ok(n_fused == 2 * tm.layers, "%s: residual add + post-attention norm fused in every layer (%d)", archs[ai], n_fused);
        ok(memcmp(ref, got, sizeof(float) * 4 * (size_t)V) == 0, "%s: logits bit-identical to the CPU path", archs[ai]);
        /* a bad batch is refused on the host, before anything is uploaded */
        int up0 = n_upload;
        int32_t bad_tok = V + 5, p0 = 0, s0 = 0, st[2] = { 0, 1 }, l1 = 1;
        const int32_t *ss[1] = { &s0 };
        srt_forward_batch bad = { .n_tokens = 1, .token_ids = &bad_tok, .positions = &p0, .out_slots = &s0, .n_seqs = 1,
                                  .seq_start = st, .seq_len = &l1, .seq_slots = ss };
        ok(okc && srt_runner_forward(rd, kd, &bad, got, &err) == SRT_ERROR && n_upload == up0,
           "%s: a bad token id is refused before any upload", archs[ai]);
        srt_kv_pool_free(kd);
        srt_runner_free(rd);
        int left = 0;
        for (int i = 0; i < MAXA; i++)
            left += allocs[i].p != NULL;
        ok(left == 0, "%s: every backend allocation released (%d left)", archs[ai], left);
        srt_backend_free(cpu_be);
        srt_kv_pool_free(kc);
        srt_runner_free(rc);
        free(ref);
        free(got);
        srt_model_free(m);
        tw_free(&tm);
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            tap_diag("could not remove %s", dir);
    }
    return tap_done();
}
