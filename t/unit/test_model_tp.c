/* Tensor parallelism on the CPU communicator: ranks in forked processes, each holding its
 * shard (views into the same mmapped weights), give the logits of the single-rank runner.
 *   - tiny random models with a vocabulary of 97 (not divisible by 2, 3 or 4: the last vocab
 *     shard is short): llama tp=2 and tp=4, qwen2 with tied embeddings and biases tp=3, qwen3
 *     tp=2; the golden checkpoints tiny-llama/qwen2/qwen3 (.cache/models) at tp=2; SmolLM2
 *     Q4_1 (9 heads, 3 KV heads, tied, quantized rows) at tp=3. For each, prefill + decode
 *     steps teacher-forced with tp=1's greedy tokens:
 *       logits within a stated tolerance of tp=1 (1e-4 on the random models, 5e-4 on the
 *       golden ones: f32 row-parallel sums in another order), greedy tokens equal, every rank
 *       bit-identical to the others;
 *       vocab parallel: a spy backend over the CPU ops records the rows of the stored
 *       embedding / lm_head tensors each op was given: rank k only ever gets rows
 *       [k*Vp, min((k+1)*Vp, V)), Vp = ceil(V/tp) (the replicated layout fails this);
 *       a hook on model.embed_tokens sees, on every rank, the tp=1 embedding bit for bit
 *       (one rank contributes to each row of the all-reduce), and a hook on lm_head sees
 *       [1, rows of its shard] with its tp_rank, the tp=1 logits' columns of its shard.
 *     On the precise matmul for SmolLM2: with 8-bit activations any change in summation order
 *     re-rolls the activation rounding of later layers, which moves SmolLM2's logits by up to
 *     ~1 (as 8-bit vs f32 does);
 *   - shapes that cannot be split are refused with a message (heads, a vocabulary smaller
 *     than one row per rank). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hooks/registry.h"
#include "srt/backend.h"
#include "srt/sampling.h"
#include "srt/comm.h"
#include "srt/model.h"
#include "tap.h"
#include "tiny_model_writer.h"

#define STEPS 5   /* prefill + 4 decode steps */
#define EMB_MAX (32 * 1024)   /* floats of the captured prefill embedding */

static int precise;   /* f32 activations: 8-bit ones re-roll their rounding when sums are split */
/* tensor collectives on a second CPU communicator group (opts.tensor_comm); abort_it: broken */
static int tensor_group, tensor_group_broken;
static srt_comm *tensor_comm;

static const int32_t prompt[12] = { 1, 9690, 1695, 314, 260, 1345, 282, 216, 33, 466, 4698, 304 };

/* What one rank saw, in shared memory: the rows of the stored embedding / lm_head tensors the
 * ops were given (a spy backend over the CPU one), and what hooks on model.embed_tokens and
 * lm_head saw. */
typedef struct probe {
    int64_t emb_lo, emb_hi, emb_calls, lm_lo, lm_hi, lm_calls, stray;
    int64_t hook_lm_rows, hook_lm_cols, hook_rank, hook_size, hook_bad, emb_floats;
} probe;

typedef struct rank_buf {
    float *logits;   /* [STEPS][V] */
    float *lmcap;    /* [STEPS][V]: lm_head's hook output, written at its vocab columns */
    float *embcap;   /* the prefill embedding as embed_tokens' hook saw it */
    probe *pr;
} rank_buf;

/* ---- spy backend: the CPU ops, with the weight rows embed/matmul are given recorded ---- */
static srt_backend *cpu_be;
static srt_backend_ops spy_ops;
static const char *emb_base, *lm_base;
static size_t emb_stride, lm_stride;
static int64_t vocab;
static probe *cur;
static int cur_step;

static void note(const void *data, int64_t rows, const char *base, size_t stride, int64_t *lo, int64_t *hi,
                 int64_t *calls)
{
    const char *p = data;
    if (p < base || p >= base + (size_t)vocab * stride || (size_t)(p - base) % stride) {
        cur->stray++;
        return;
    }
    int64_t r0 = (int64_t)((size_t)(p - base) / stride);
    if (r0 < *lo)
        *lo = r0;
    if (r0 + rows > *hi)
        *hi = r0 + rows;
    ++*calls;
}
static void spy_embed(srt_backend *be, const srt_weight *t, const int32_t *ids, int64_t n, float *out)
{
    note(t->data, t->rows, emb_base, emb_stride, &cur->emb_lo, &cur->emb_hi, &cur->emb_calls);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->rows)
            cur->stray++;
    cpu_be->ops->embed(cpu_be, t, ids, n, out);
}
static void spy_matmul(srt_backend *be, const srt_weight *w, const float *bias, const float *x, int64_t n, float *y)
{
    const char *p = w->data;
    if (p >= lm_base && p < lm_base + (size_t)vocab * lm_stride)
        note(w->data, w->rows, lm_base, lm_stride, &cur->lm_lo, &cur->lm_hi, &cur->lm_calls);
    cpu_be->ops->matmul(cpu_be, w, bias, x, n, y);
}

/* ---- hooks ---- */
static rank_buf *hook_rb;
static int emb_fwd(srt_hook *h, const srt_hook_call *c, const srt_module_args *a, srt_tensor_view *o,
                   srt_tensor_view *rep)
{
    probe *pr = hook_rb->pr;
    pr->hook_rank = c->batch->tp_rank;
    pr->hook_size = c->batch->tp_size;
    int64_t n = o->shape[0] * o->shape[1];
    if (o->ndim != 2 || o->shape[0] != c->batch->n_tokens)
        pr->hook_bad++;
    if (cur_step == 0 && n <= EMB_MAX) {
        memcpy(hook_rb->embcap, o->data, (size_t)n * sizeof(float));
        pr->emb_floats = n;
    }
    return SRT_HOOK_OK;
}
static int lm_fwd(srt_hook *h, const srt_hook_call *c, const srt_module_args *a, srt_tensor_view *o,
                  srt_tensor_view *rep)
{
    probe *pr = hook_rb->pr;
    int size = c->batch->tp_size, k = c->batch->tp_rank;
    int64_t vp = (vocab + size - 1) / size, lo = k * vp;
    pr->hook_lm_rows = o->shape[0];
    pr->hook_lm_cols = o->shape[1];
    if (o->ndim != 2 || o->shape[0] != 1 || lo + o->shape[1] > vocab) {
        pr->hook_bad++;
        return SRT_HOOK_OK;
    }
    memcpy(hook_rb->lmcap + (size_t)cur_step * vocab + lo, o->data, (size_t)o->shape[1] * sizeof(float));
    return SRT_HOOK_OK;
}
static srt_hook emb_hook = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), NULL, emb_fwd, NULL, NULL, NULL, NULL };
static srt_hook lm_hook = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), NULL, lm_fwd, NULL, NULL, NULL, NULL };

/* prefill n_prompt tokens, then STEPS-1 decode steps fed with `forced`; with rb->pr the
 * runner computes on the spy backend and hooks capture what embed_tokens and lm_head see */
static int run(srt_model *m, srt_comm *comm, int n_prompt, const int32_t *ids, const int32_t *forced, rank_buf *rb,
               char *msg)
{
    const srt_model_config *c = srt_model_config_of(m);
    srt_runner *r = NULL;
    srt_kv_pool *kv = NULL;
    srt_hook_registry *reg = NULL;
    srt_err err = { { 0 } };
    int rc = SRT_ERROR, tp = comm ? comm->size : 1;
    int32_t slots[64], pos[64], start[2] = { 0, n_prompt }, len = n_prompt;
    for (int i = 0; i < 64; i++)
        slots[i] = 63 - i, pos[i] = i;
    const int32_t *ss[1] = { slots };
    srt_runner_opts o = { .max_batch_tokens = 32, .max_seqs = 1, .n_threads = 1, .comm = comm, .precise_matmul = precise,
                          .tensor_comm = comm ? tensor_comm : NULL };
    srt_backend spy;
    if (rb->pr) {
        const srt_weight *we = srt_model_weight(m, "model.embed_tokens.weight");
        const srt_weight *wl = srt_model_weight(m, "lm_head.weight");
        cpu_be = srt_cpu_backend_create(1, precise, &err);
        if (!we || !wl || !cpu_be)
            goto out;
        spy_ops = *cpu_be->ops;
        spy_ops.embed = spy_embed;
        spy_ops.matmul = spy_matmul;
        spy = (srt_backend){ &spy_ops, cpu_be->impl };
        o.backend = &spy;
        emb_base = we->data, emb_stride = we->row_stride;
        lm_base = wl->data, lm_stride = wl->row_stride;
        vocab = c->vocab_size;
        cur = rb->pr;
        memset(cur, 0, sizeof *cur);
        cur->emb_lo = cur->lm_lo = INT64_MAX;
        int n_mod;
        srt_module *mods = srt_model_modules(m, &n_mod);
        srt_hook_attach_opts ho = { .name = "probe" };
        hook_rb = rb;
        cur_step = 0;
        if (!(reg = srt_hook_registry_create(mods, n_mod, &err)) ||
            srt_hook_attach(reg, "model.embed_tokens", &emb_hook, &ho, &err) <= 0 ||
            srt_hook_attach(reg, "lm_head", &lm_hook, &ho, &err) <= 0)
            goto out;
    }
    if (srt_runner_create(m, &o, &r, &err) != SRT_OK || srt_kv_pool_create_tp(c, tp, 64, SRT_F32, &kv, &err) != SRT_OK)
        goto out;
    srt_forward_batch b = { .n_tokens = n_prompt, .token_ids = ids, .positions = pos, .out_slots = slots, .n_seqs = 1,
                            .seq_start = start, .seq_len = &len, .seq_slots = ss };
    if (srt_runner_forward(r, kv, &b, rb->logits, &err) != SRT_OK)
        goto out;
    for (int s = 1; s < STEPS; s++) {
        int32_t tok = forced[s - 1], p = n_prompt + s - 1, st[2] = { 0, 1 }, l2 = p + 1;
        srt_forward_batch d = { .n_tokens = 1, .token_ids = &tok, .positions = pos + p, .out_slots = slots + p,
                                .n_seqs = 1, .seq_start = st, .seq_len = &l2, .seq_slots = ss,
                                .forward_mode = SRT_FORWARD_DECODE };
        cur_step = s;
        if (srt_runner_forward(r, kv, &d, rb->logits + (size_t)s * c->vocab_size, &err) != SRT_OK)
            goto out;
    }
    rc = SRT_OK;
out:
    if (msg)
        snprintf(msg, 1024, "%s", err.msg);
    srt_kv_pool_free(kv);
    srt_runner_free(r);
    srt_hook_registry_free(reg);
    if (rb->pr) {
        srt_backend_free(cpu_be);
        cpu_be = NULL;
    }
    return rc;
}

/* one rank's block of the shared mapping */
static size_t block_bytes(int V)
{
    return ((size_t)2 * STEPS * V + EMB_MAX) * sizeof(float) + sizeof(probe);
}
static rank_buf block(void *base, int rank, int V)
{
    char *p = (char *)base + (size_t)rank * block_bytes(V);
    rank_buf rb = { (float *)p, (float *)p + (size_t)STEPS * V, (float *)p + (size_t)2 * STEPS * V,
                    (probe *)(p + ((size_t)2 * STEPS * V + EMB_MAX) * sizeof(float)) };
    return rb;
}

/* runs `size` ranks in child processes; what they saw lands in shared memory */
static int run_ranks(const char *path, int size, int n_prompt, const int32_t *ids, const int32_t *forced, int V,
                     void *shared, char *msg)
{
    srt_err err = { { 0 } };
    srt_cpu_comm_group *g = srt_cpu_comm_group_create(size, 1 << 16, &err);
    srt_cpu_comm_group *g2 = tensor_group ? srt_cpu_comm_group_create(size, 1 << 16, &err) : NULL;
    if (!g || (tensor_group && !g2)) {
        snprintf(msg, 1024, "%s", err.msg);
        return SRT_ERROR;
    }
    if (tensor_group_broken)
        srt_cpu_comm_group_abort(g2);
    pid_t pids[8];
    for (int rank = 0; rank < size; rank++) {
        pids[rank] = fork();
        if (pids[rank] == 0) {
            srt_model *m = NULL;
            srt_comm *comm = srt_cpu_comm_join(g, rank, &err);
            rank_buf rb = block(shared, rank, V);
            char rmsg[1024] = "";
            tensor_comm = g2 ? srt_cpu_comm_join(g2, rank, &err) : NULL;
            int rc = comm && (!g2 || tensor_comm) && srt_model_load(path, &m, &err) == SRT_OK &&
                     run(m, comm, n_prompt, ids, forced, &rb, rmsg) == SRT_OK;
            if (!rc && !tensor_group_broken)
                fprintf(stderr, "# rank %d: %s %s\n", rank, err.msg, rmsg);
            if (!rc)
                snprintf((char *)rb.embcap, 1024, "%s", rmsg);   /* the reason, for the parent */
            srt_comm_destroy(tensor_comm);
            srt_model_free(m);
            srt_comm_destroy(comm);
            _exit(rc ? 0 : 1);
        }
    }
    int all = 1;
    for (int rank = 0; rank < size; rank++) {
        int st;
        waitpid(pids[rank], &st, 0);
        all &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    srt_cpu_comm_group_free(g);
    srt_cpu_comm_group_free(g2);
    if (!all)
        snprintf(msg, 1024, "a rank failed");
    return all ? SRT_OK : SRT_ERROR;
}

static void check(const char *label, const char *path, int size, int n_prompt, const int32_t *ids, double tol)
{
    srt_model *m = NULL;
    srt_err err = { { 0 } };
    char msg[1024] = "";
    if (!ok(srt_model_load(path, &m, &err) == SRT_OK, "%s: loads", label)) {
        tap_diag("%s", err.msg);
        return;
    }
    int V = srt_model_config_of(m)->vocab_size, H = srt_model_config_of(m)->hidden_size;
    void *refmem = calloc(1, block_bytes(V));
    rank_buf ref = block(refmem, 0, V);
    int32_t forced[STEPS] = { 0 };
    /* tp = 1 reference; its greedy tokens become every run's decode inputs. Step s depends
     * on forced[0..s-1] only, so after pass s the first s+1 rows are final. */
    int rc = SRT_OK;
    for (int s = 0; rc == SRT_OK && s < STEPS; s++) {
        rc = run(m, NULL, n_prompt, ids, forced, &ref, msg);
        forced[s] = srt_argmax(ref.logits + (size_t)s * V, V);
    }
    ok(rc == SRT_OK && ref.pr->emb_lo == 0 && ref.pr->emb_hi == V && ref.pr->lm_hi == V &&
       ref.pr->hook_lm_cols == V && ref.pr->emb_floats == (int64_t)n_prompt * H,
       "%s: tp=1 reference runs on all %d vocab rows %s", label, V, msg);
    size_t bytes = (size_t)size * block_bytes(V);
    void *shared = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(shared, 0xff, bytes);   /* NaN until written */
    rc = run_ranks(path, size, n_prompt, ids, forced, V, shared, msg);
    ok(rc == SRT_OK, "%s: %d ranks run prefill + %d decode steps %s", label, size, STEPS - 1, msg);
    double worst = 0, worst_hook = 0;
    int same = 1, greedy = 1, views = 1, hooks = 1, emb_same = 1;
    int64_t vp = (V + size - 1) / size;
    rank_buf r0 = block(shared, 0, V);
    float *lmall = malloc((size_t)STEPS * V * sizeof(float));
    memset(lmall, 0xff, (size_t)STEPS * V * sizeof(float));
    for (int k = 0; k < size && rc == SRT_OK; k++) {
        rank_buf rk = block(shared, k, V);
        const probe *p = rk.pr;
        int64_t lo = k * vp, n = V - lo < vp ? V - lo : vp;
        double d = tw_max_diff(ref.logits, rk.logits, (size_t)STEPS * V);
        worst = d > worst ? d : worst;
        same &= memcmp(r0.logits, rk.logits, (size_t)STEPS * V * sizeof(float)) == 0;
        for (int s = 0; s < STEPS; s++)
            greedy &= srt_argmax(rk.logits + (size_t)s * V, V) == forced[s];
        /* the ops saw rows [lo, lo + n) of the stored tensors, nothing else */
        int v = p->emb_lo == lo && p->emb_hi == lo + n && p->lm_lo == lo && p->lm_hi == lo + n &&
                p->emb_calls == STEPS && p->lm_calls == STEPS && p->stray == 0;
        if (!v)
            tap_diag("rank %d: embedding rows [%lld, %lld) in %lld calls, lm_head rows [%lld, %lld) in %lld calls, "
                     "%lld stray; its shard is [%lld, %lld)", k, (long long)p->emb_lo, (long long)p->emb_hi,
                     (long long)p->emb_calls, (long long)p->lm_lo, (long long)p->lm_hi, (long long)p->lm_calls,
                     (long long)p->stray, (long long)lo, (long long)(lo + n));
        views &= v;
        hooks &= p->hook_rank == k && p->hook_size == size && p->hook_lm_rows == 1 && p->hook_lm_cols == n &&
                 p->hook_bad == 0;
        emb_same &= p->emb_floats == ref.pr->emb_floats &&
                    memcmp(rk.embcap, ref.embcap, (size_t)ref.pr->emb_floats * sizeof(float)) == 0;
        for (int s = 0; s < STEPS; s++)
            memcpy(lmall + (size_t)s * V + lo, rk.lmcap + (size_t)s * V + lo, (size_t)n * sizeof(float));
    }
    worst_hook = tw_max_diff(ref.logits, lmall, (size_t)STEPS * V);
    ok(rc == SRT_OK && worst < tol, "%s: every rank's logits match tp=1 within %g (worst %.3g)", label, tol, worst);
    ok(rc == SRT_OK && greedy, "%s: every rank's greedy tokens = tp=1's", label);
    ok(rc == SRT_OK && same, "%s: all ranks return bit-identical logits", label);
    ok(rc == SRT_OK && views, "%s: rank k's embedding and lm_head views are rows [k*%lld, min((k+1)*%lld, %d)) only",
       label, (long long)vp, (long long)vp, V);
    ok(rc == SRT_OK && emb_same, "%s: embed_tokens output (after its all-reduce) bit-identical to tp=1 on every rank",
       label);
    ok(rc == SRT_OK && hooks && worst_hook < tol,
       "%s: lm_head hooks see [1, rows of their shard] with their tp_rank; the slices are the tp=1 logits (worst %.3g)",
       label, worst_hook);
    free(lmall);
    munmap(shared, bytes);
    free(refmem);
    srt_model_free(m);
}

static void writer_case(const char *label, const char *arch, int hidden, int ffn, int heads, int kv, int hd, int V,
                        int size)
{
    char dir[256];
    tw_model tm;
    snprintf(dir, sizeof dir, "/tmp/srt_test_tp_%d_%d_%d", (int)getpid(), V, size);
    tw_make_dims(&tm, arch, 31 + size, hidden, ffn, heads, kv, hd);
    tw_set_vocab(&tm, V);
    tw_write_hf(&tm, dir, 1, "F32");
    int32_t ids[12];
    for (int i = 0; i < 12; i++)
        ids[i] = prompt[i] % V;
    ids[3] = V - 1;   /* the last row, in the short last shard */
    check(label, dir, size, 12, ids, 1e-4);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        tap_diag("cannot remove %s", dir);
    tw_free(&tm);
}

int main(void)
{
    char dir[256], cmd[300];
    tw_model tm;
    snprintf(dir, sizeof dir, "/tmp/srt_test_tp_%d", (int)getpid());
    tw_make(&tm, "llama", 31);
    tw_write_hf(&tm, dir, 1, "F32");
    int32_t ids[12];
    for (int i = 0; i < 12; i++)
        ids[i] = prompt[i] % tm.vocab;
    check("tiny llama tp=2", dir, 2, 12, ids, 1e-4);
    /* vocab 97: not divisible by 2, 3 or 4, so the last shard is short */
    writer_case("tiny llama V=97 tp=2", "llama", 64, 128, 8, 4, 8, 97, 2);
    writer_case("tiny llama V=97 tp=4", "llama", 64, 128, 8, 4, 8, 97, 4);
    writer_case("tiny qwen2 (tied, biases) V=97 tp=3", "qwen2", 48, 96, 6, 3, 8, 97, 3);
    writer_case("tiny qwen3 V=97 tp=2", "qwen3", 64, 96, 4, 2, 32, 97, 2);
    /* the tensor collectives on their own communicator (opts.tensor_comm), as NCCL is on GPUs */
    tensor_group = 1;
    writer_case("tiny llama V=97 tp=2, tensor_comm", "llama", 64, 128, 8, 4, 8, 97, 2);
    {
        /* ... and they really go there: that communicator broken, the forward fails while the
         * control communicator works */
        tw_model tb;
        char bdir[256], msg[1024] = "";
        snprintf(bdir, sizeof bdir, "/tmp/srt_test_tp_broken_%d", (int)getpid());
        tw_make_dims(&tb, "llama", 9, 64, 128, 8, 4, 8);
        tw_write_hf(&tb, bdir, 1, "F32");
        int V = tb.vocab;
        size_t bytes = 2 * block_bytes(V);
        void *sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        int32_t ids[4] = { 1, 2, 3, 4 }, forced[STEPS] = { 0 };
        memset(sh, 0, bytes);
        tensor_group_broken = 1;
        int rc = run_ranks(bdir, 2, 4, ids, forced, V, sh, msg);
        tensor_group_broken = 0;
        rank_buf b0 = block(sh, 0, V);
        ok(rc == SRT_ERROR && strstr((char *)b0.embcap, "broken"),
           "a broken tensor communicator fails the forward: %s", (char *)b0.embcap);
        munmap(sh, bytes);
        snprintf(cmd, sizeof cmd, "rm -rf %s", bdir);
        if (system(cmd) != 0)
            tap_diag("cannot remove %s", bdir);
        tw_free(&tb);
    }
    tensor_group = 0;
    /* golden models (HF fixtures' checkpoints), when present */
    const char *gdir = getenv("SRT_MODEL_DIR") ? getenv("SRT_MODEL_DIR") : ".cache/models";
    const char *golden[] = { "tiny-llama", "tiny-qwen2", "tiny-qwen3" };
    for (int i = 0; i < 3; i++) {
        char p[512], label[128];
        snprintf(p, sizeof p, "%s/%s", gdir, golden[i]);
        snprintf(label, sizeof label, "%s tp=2", golden[i]);
        /* ids on both halves of the vocabulary, the first and last row of rank 1's shard */
        int32_t gids[12];
        memcpy(gids, prompt, sizeof gids);
        gids[2] = 49151, gids[5] = 30000, gids[8] = 24576, gids[10] = 24575;
        if (access(p, R_OK) == 0)
            check(label, p, 2, 12, gids, 5e-4);   /* f32 row-parallel sums in another order */
        else
            tap_diag("%s not present: golden %s case not run", p, golden[i]);
    }

    /* shapes that do not split */
    srt_model *m = NULL;
    srt_err err = { { 0 } };
    if (srt_model_load(dir, &m, &err) == SRT_OK) {
        srt_cpu_comm_group *g = srt_cpu_comm_group_create(4, 1024, &err);
        srt_comm *c4 = g ? srt_cpu_comm_join(g, 0, &err) : NULL;
        srt_runner *r = NULL;
        srt_runner_opts o = { .max_batch_tokens = 8, .max_seqs = 1, .n_threads = 1, .comm = c4 };
        ok(c4 && srt_runner_create(m, &o, &r, &err) == SRT_ERROR && strstr(err.msg, "divide by 4"),
           "tp=4 with 2 KV heads is refused: %s", err.msg);
        srt_kv_pool *kv = NULL;
        ok(srt_kv_pool_create_tp(srt_model_config_of(m), 4, 8, SRT_F32, &kv, &err) == SRT_ERROR,
           "a KV pool for 4 ranks of 2 KV heads is refused: %s", err.msg);
        srt_comm_destroy(c4);
        srt_cpu_comm_group_free(g);
        srt_model_free(m);
    }
    /* a vocabulary too small for every rank to hold a row: 5 rows in 4 ranks of 2 */
    {
        tw_model tv;
        char vdir[256];
        snprintf(vdir, sizeof vdir, "/tmp/srt_test_tp_v5_%d", (int)getpid());
        tw_make_dims(&tv, "llama", 5, 64, 128, 8, 4, 8);
        tw_set_vocab(&tv, 5);
        tw_write_hf(&tv, vdir, 1, "F32");
        m = NULL;
        if (srt_model_load(vdir, &m, &err) == SRT_OK) {
            srt_cpu_comm_group *g = srt_cpu_comm_group_create(4, 1024, &err);
            srt_comm *c4 = g ? srt_cpu_comm_join(g, 0, &err) : NULL;
            srt_runner *r = NULL;
            srt_runner_opts o = { .max_batch_tokens = 8, .max_seqs = 1, .n_threads = 1, .comm = c4 };
            ok(c4 && srt_runner_create(m, &o, &r, &err) == SRT_ERROR && strstr(err.msg, "vocabulary of 5"),
               "a vocabulary of 5 in 4 ranks is refused: %s", err.msg);
            srt_runner_free(r);
            srt_comm_destroy(c4);
            srt_cpu_comm_group_free(g);
            srt_model_free(m);
        } else {
            ok(0, "vocab-5 model loads: %s", err.msg);
        }
        snprintf(cmd, sizeof cmd, "rm -rf %s", vdir);
        if (system(cmd) != 0)
            tap_diag("cannot remove %s", vdir);
        tw_free(&tv);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        tap_diag("cannot remove %s", dir);
    tw_free(&tm);

    const char *mdir = getenv("SRT_MODEL_DIR") ? getenv("SRT_MODEL_DIR") : ".cache/models";
    char gg[512];
    snprintf(gg, sizeof gg, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", mdir);
    if (access(gg, R_OK) == 0) {
        precise = 1;
        check("SmolLM2 Q4_1 tp=3 (precise matmul)", gg, 3, 12, prompt, 2e-3);
        precise = 0;
        if (srt_model_load(gg, &m, &err) == SRT_OK) {
            srt_cpu_comm_group *g = srt_cpu_comm_group_create(2, 1024, &err);
            srt_comm *c2 = g ? srt_cpu_comm_join(g, 0, &err) : NULL;
            srt_runner *r = NULL;
            srt_runner_opts o = { .max_batch_tokens = 8, .max_seqs = 1, .n_threads = 1, .comm = c2 };
            ok(c2 && srt_runner_create(m, &o, &r, &err) == SRT_ERROR && strstr(err.msg, "9 heads"),
               "SmolLM2 tp=2 (9 heads) is refused: %s", err.msg);
            srt_comm_destroy(c2);
            srt_cpu_comm_group_free(g);
            srt_model_free(m);
        }
    } else {
        const char *req = getenv("SRT_REQUIRE_MODELS");
        if (req && strcmp(req, "1") == 0)
            ok(0, "%s present (SRT_REQUIRE_MODELS=1)", gg);
        else
            tap_diag("%s not present: SmolLM2 tp=3 case not run", gg);
    }
    return tap_done();
}
