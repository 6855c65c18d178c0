/* Decode steps replayed from backend graphs (the CUDA graph contract of srt/backend_cuda.h),
 * checked without a GPU. A "recording" host-memory backend implements the graph ops with CUDA
 * graph semantics: graph_capture runs the body once and RECORDS every op call with its
 * arguments (pointers, sizes, scalars) without executing anything; graph_replay executes the
 * recording verbatim, on whatever those addresses hold by then. Its kv_store and attention read
 * the backend's own copy of the batch metadata made by begin_batch (as the CUDA kernels read
 * theirs), so a replay sees the batch announced last. It flags what a graph cannot survive:
 * an op recorded with a token count other than the graph's size, an upload / download / sync /
 * begin_batch / alloc inside a capture, a replay whose ids or positions were not uploaded to
 * the very addresses the recorded ops read, a replay of a batch of another size.
 *
 * On the golden tiny models (.cache/models/tiny-llama, tiny-qwen2, tiny-qwen3, from
 * scripts/make_tiny_models.py), a scheduler-like run of 33 steps with sequences joining and
 * leaving (decode batches of 1, 3, 4, 5, 9 sequences: buckets 1, 4, 8, 16; prefill and mixed
 * steps between) runs on three runners: the CPU backend, the recording backend with graphs off,
 * and the recording backend with graphs on. Logits must be bit-identical at every step; the
 * graph runner must capture exactly once per bucket (again after a clear) and replay otherwise,
 * never replay a prefill or mixed step, run every step with a hook eagerly (and drop its
 * graphs), and notice a KV pool it was not captured with; explicit logit rows are honoured.
 * Also: the backend dropping its graphs on its own (batch metadata grown) makes the runner
 * capture again; SRT_GRAPHS / srt_runner_opts.graphs switch graphs on and off. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hooks/registry.h"
#include "srt/backend.h"
#include "srt/sampling.h"
#include "srt/backend_cuda.h"
#include "srt/model.h"
#include "tap.h"

/* ---------------------------------------------------------------- the recording backend */

#define MAXA 8192
static struct { char *p; size_t n; } allocs[MAXA];

static void *host_dev_alloc(size_t bytes)
{
    for (int i = 0; i < MAXA; i++)
        if (!allocs[i].p) {
            allocs[i].n = bytes ? bytes : 1;
            allocs[i].p = aligned_alloc(256, (allocs[i].n + 255) / 256 * 256);
            memset(allocs[i].p, 0x7f, allocs[i].n);   /* not zeroed, as device memory */
            return allocs[i].p;
        }
    return NULL;
}

static int is_dev(const void *p)
{
    for (int i = 0; i < MAXA; i++)
        if (allocs[i].p && (const char *)p >= allocs[i].p && (const char *)p < allocs[i].p + allocs[i].n)
            return 1;
    return 0;
}

enum { R_MATMUL, R_EMBED, R_RMSNORM, R_SILU, R_MUL, R_SILU_MUL, R_ADD, R_ADD3, R_ROPE, R_KV, R_ATT, R_RCS,
       R_GATHER, R_ADDRMS, R_COPY, R_STEER };
static const char *op_names[] = { "matmul", "embed", "rmsnorm", "silu", "mul", "silu_mul", "add", "add3", "rope",
                                  "kv_store", "attention", "rope_cos_sin", "gather_rows", "add_rmsnorm", "copy",
                                  "steer (a device hook's kernel)" };

/* one op call, arguments by value (a srt_weight and srt_attn_args are copied, as a kernel's
 * parameters are when a CUDA graph records the launch) */
typedef struct rec {
    int          op;
    srt_weight   w;
    const void  *p[5];
    int64_t      n[2];
    int32_t      i[2];
    float        f;
    srt_dtype    dt;
    const void  *batch;
    srt_attn_args aa;
} rec;

#define MAXG (SRT_GRAPH_MAX_BS + 1)

typedef struct fake {
    srt_backend  base;
    srt_backend *cpu;
    /* the backend's copy of the batch metadata, grown (and graphs dropped) when too small */
    int32_t      cap_tok, cap_seq, slack;
    int64_t      cap_slots;
    int32_t     *m_out, *m_pos, *m_start, *m_len, *m_table;
    const int32_t **m_slots;
    srt_forward_batch mb;
    const srt_forward_batch *announced;
    int32_t      cur_tokens;
    /* graphs */
    int          capturing;
    int32_t      cap_bs;
    rec         *rec_buf;
    int          rec_n, rec_cap;
    rec         *g[MAXG];
    int          g_n[MAXG];
    /* uploads since the last download (a step's inputs) */
    struct { const void *dst; size_t n; } ups[64];
    int          n_ups;
    /* counters */
    int          captures[MAXG], replays[MAXG], n_captures, n_replays, n_clears, n_grows, steer_execs;
    int          violations;
    char         first[256];
} fake;

static fake *F(const srt_backend *be) { return (fake *)be->impl; }

static void violate(fake *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void violate(fake *f, const char *fmt, ...)
{
    if (!f->violations++) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(f->first, sizeof f->first, fmt, ap);
        va_end(ap);
    }
}

static void need_dev(fake *f, const void *p, const char *op, const char *what)
{
    if (p && !is_dev(p))
        violate(f, "%s: %s is not backend memory", op, what);
}

/* the batch as the backend copied it (a graph replay sees the batch announced last) */
static void exec_kv(fake *f, const rec *r)
{
    const float *k = r->p[0], *v = r->p[1];
    int32_t row = r->i[0];
    for (int32_t t = 0; t < f->mb.n_tokens; t++) {
        if (f->m_out[t] < 0)   /* a padded token writes nothing */
            continue;
        srt_forward_batch one = { .n_tokens = 1, .out_slots = &f->m_out[t] };
        f->cpu->ops->kv_store(f->cpu, &one, k + (size_t)t * row, v + (size_t)t * row, (void *)r->p[2],
                              (void *)r->p[3], r->dt, row);
    }
}

static void exec_att(fake *f, const rec *r)
{
    /* padded tokens (position -1, sequences without context) attend to nothing: zeros, as the
     * CUDA kernel gives; this backend wants them after the real ones */
    int32_t nr = 0, ns = 0;
    while (nr < f->mb.n_tokens && f->m_pos[nr] >= 0)
        nr++;
    while (ns < f->mb.n_seqs && f->m_len[ns] > 0)
        ns++;
    for (int32_t t = nr; t < f->mb.n_tokens; t++)
        if (f->m_pos[t] >= 0)
            violate(f, "attention: padded tokens are not the batch's last");
    if (f->m_start[ns] != nr)
        violate(f, "attention: padded sequences are not the batch's last");
    srt_attn_args a = r->aa;
    srt_forward_batch sub = f->mb;
    sub.n_tokens = nr;
    sub.n_seqs = ns;
    a.batch = &sub;
    if (nr > 0)
        f->cpu->ops->attention(f->cpu, &a);
    int64_t w = (int64_t)a.n_heads * a.head_dim;
    for (int32_t t = nr; t < f->mb.n_tokens; t++)
        memset(a.out + (size_t)t * w, 0, (size_t)w * sizeof(float));
}

static void exec_rec(fake *f, const rec *r)
{
    srt_backend *c = f->cpu;
    switch (r->op) {
    case R_MATMUL: c->ops->matmul(c, &r->w, r->p[0], r->p[1], r->n[0], (float *)r->p[2]); break;
    case R_EMBED: c->ops->embed(c, &r->w, r->p[0], r->n[0], (float *)r->p[1]); break;
    case R_RMSNORM: c->ops->rmsnorm(c, r->p[0], &r->w, r->f, r->n[0], r->n[1], (float *)r->p[1]); break;
    case R_SILU: c->ops->silu(c, r->p[0], r->n[0], (float *)r->p[1]); break;
    case R_MUL: c->ops->mul(c, (float *)r->p[0], r->p[1], r->n[0]); break;
    case R_SILU_MUL: c->ops->silu_mul(c, r->p[0], r->p[1], r->n[0], (float *)r->p[2]); break;
    case R_ADD: c->ops->add(c, (float *)r->p[0], r->p[1], r->n[0]); break;
    case R_ADD3: c->ops->add3(c, (float *)r->p[0], r->p[1], r->p[2], r->n[0]); break;
    case R_ROPE: c->ops->rope(c, (float *)r->p[0], r->n[0], r->i[0], r->i[1], r->p[1]); break;
    case R_KV: exec_kv(f, r); break;
    case R_ATT: exec_att(f, r); break;
    case R_RCS: {
        const int32_t *pos = r->p[0];
        const float *inv = r->p[1];
        float *cs = (float *)r->p[2];
        int32_t hd = r->i[0];
        for (int64_t t = 0; t < r->n[0]; t++) {
            float *co = cs + t * 2 * hd, *si = co + hd;
            for (int32_t i = 0; i < hd / 2; i++) {
                float a = (float)pos[t] * inv[i];
                co[i] = co[i + hd / 2] = cosf(a);
                si[i] = si[i + hd / 2] = sinf(a);
            }
        }
        break;
    }
    case R_GATHER:
        for (int32_t i = 0; i < r->i[0]; i++)
            memcpy((float *)r->p[0] + (size_t)i * r->n[0],
                   (const float *)r->p[1] + (size_t)((const int32_t *)r->p[2])[i] * r->n[0],
                   (size_t)r->n[0] * sizeof(float));
        break;
    case R_ADDRMS:
        c->ops->add3(c, (float *)r->p[0], r->p[1], r->p[2], r->n[0] * r->n[1]);
        c->ops->rmsnorm(c, r->p[0], &r->w, r->f, r->n[0], r->n[1], (float *)r->p[3]);
        break;
    case R_COPY: memmove((void *)r->p[0], r->p[1], (size_t)r->n[0]); break;
    case R_STEER: {
        /* rows x width: out[t] += scale * vec, the scale read from device memory when it runs */
        float *o = (float *)r->p[0];
        const float *vec = r->p[1], *scale = r->p[2];
        for (int64_t t = 0; t < r->n[0]; t++)
            for (int64_t j = 0; j < r->n[1]; j++)
                o[t * r->n[1] + j] += scale[0] * vec[j];
        f->steer_execs++;
        break;
    }
    }
}

/* Eagerly: execute. Inside a capture: check the op fits a graph of cap_bs tokens, record it. */
static void issue(fake *f, const rec *r)
{
    for (int i = 0; i < 5; i++)
        if (!(r->op == R_MATMUL && i == 0) && !(r->op == R_RCS && i == 1))   /* bias, inv_freq: host arrays */
            need_dev(f, r->p[i], op_names[r->op], "a pointer");
    if (r->op == R_KV || r->op == R_ATT) {
        if (r->batch != f->announced)
            violate(f, "%s: batch not announced by begin_batch", op_names[r->op]);
    }
    if (!f->capturing) {
        exec_rec(f, r);
        return;
    }
    int64_t bs = f->cap_bs;
    int64_t tok = -1;   /* the op's token count, where it has one */
    switch (r->op) {
    case R_MATMUL: case R_EMBED: case R_ROPE: case R_RCS: case R_STEER: tok = r->n[0]; break;
    case R_KV: case R_ATT: tok = f->cur_tokens; break;
    case R_RMSNORM: case R_ADDRMS: if (r->n[0] % bs) tok = r->n[0]; else tok = bs; break;
    case R_SILU: case R_MUL: case R_SILU_MUL: case R_ADD: case R_ADD3: tok = r->n[0] % bs ? r->n[0] : bs; break;
    default: break;
    }
    if (tok >= 0 && tok != bs)
        violate(f, "%s recorded for %lld tokens in a graph of %lld", op_names[r->op], (long long)tok, (long long)bs);
    if (f->rec_n == f->rec_cap) {
        f->rec_cap = f->rec_cap ? 2 * f->rec_cap : 256;
        f->rec_buf = realloc(f->rec_buf, (size_t)f->rec_cap * sizeof(rec));
    }
    f->rec_buf[f->rec_n++] = *r;
}

static void f_matmul(srt_backend *be, const srt_weight *w, const float *bias, const float *x, int64_t n, float *y)
{
    rec r = { .op = R_MATMUL, .w = *w, .p = { bias, x, y }, .n = { n } };
    issue(F(be), &r);
}
static void f_embed(srt_backend *be, const srt_weight *t, const int32_t *ids, int64_t n, float *out)
{
    rec r = { .op = R_EMBED, .w = *t, .p = { ids, out }, .n = { n } };
    issue(F(be), &r);
}
static void f_rmsnorm(srt_backend *be, const float *x, const srt_weight *w, float eps, int64_t rows, int64_t d, float *out)
{
    rec r = { .op = R_RMSNORM, .w = *w, .p = { x, out }, .n = { rows, d }, .f = eps };
    issue(F(be), &r);
}
static void f_silu(srt_backend *be, const float *x, int64_t n, float *out)
{
    rec r = { .op = R_SILU, .p = { x, out }, .n = { n } };
    issue(F(be), &r);
}
static void f_mul(srt_backend *be, float *y, const float *x, int64_t n)
{
    rec r = { .op = R_MUL, .p = { y, x }, .n = { n } };
    issue(F(be), &r);
}
static void f_silu_mul(srt_backend *be, const float *g, const float *u, int64_t n, float *out)
{
    rec r = { .op = R_SILU_MUL, .p = { g, u, out }, .n = { n } };
    issue(F(be), &r);
}
static void f_add(srt_backend *be, float *y, const float *x, int64_t n)
{
    rec r = { .op = R_ADD, .p = { y, x }, .n = { n } };
    issue(F(be), &r);
}
static void f_add3(srt_backend *be, float *o, const float *a, const float *b, int64_t n)
{
    rec r = { .op = R_ADD3, .p = { o, a, b }, .n = { n } };
    issue(F(be), &r);
}
static void f_rope(srt_backend *be, float *x, int64_t n, int32_t h, int32_t hd, const float *cs)
{
    rec r = { .op = R_ROPE, .p = { x, cs }, .n = { n }, .i = { h, hd } };
    issue(F(be), &r);
}
static void f_kv_store(srt_backend *be, const srt_forward_batch *b, const float *k, const float *v, void *kc, void *vc,
                       srt_dtype dt, int32_t row)
{
    rec r = { .op = R_KV, .p = { k, v, kc, vc }, .i = { row }, .dt = dt, .batch = b };
    issue(F(be), &r);
}
static void f_attention(srt_backend *be, const srt_attn_args *a)
{
    rec r = { .op = R_ATT, .p = { a->q, a->out, a->k_cache, a->v_cache }, .aa = *a, .batch = a->batch };
    issue(F(be), &r);
}
static void f_rope_cs(srt_backend *be, const int32_t *pos, int64_t n, const float *inv_freq, int32_t hd, float *cs)
{
    rec r = { .op = R_RCS, .p = { pos, inv_freq, cs }, .n = { n }, .i = { hd } };
    issue(F(be), &r);
}
static void f_gather(srt_backend *be, float *dst, const float *src, const int32_t *rows, int32_t n, int64_t w)
{
    rec r = { .op = R_GATHER, .p = { dst, src, rows }, .n = { w }, .i = { n } };
    issue(F(be), &r);
}
static void f_add_rmsnorm(srt_backend *be, float *sum, const float *a, const float *b, const srt_weight *w, float eps,
                          int64_t rows, int64_t d, float *out)
{
    rec r = { .op = R_ADDRMS, .w = *w, .p = { sum, a, b, out }, .n = { rows, d }, .f = eps };
    issue(F(be), &r);
}
static void f_copy(srt_backend *be, void *dst, const void *src, size_t n)
{
    rec r = { .op = R_COPY, .p = { dst, src }, .n = { (int64_t)n } };
    issue(F(be), &r);
}

/* not allowed in a graph: each flags a capture it is called in */
static int in_capture(fake *f, const char *op)
{
    if (f->capturing)
        violate(f, "%s inside a graph capture", op);
    return f->capturing;
}
static void *f_alloc(srt_backend *be, size_t bytes, srt_err *err)
{
    if (in_capture(F(be), "alloc")) {
        srt_err_set(err, "alloc inside a graph capture");
        return NULL;
    }
    void *p = host_dev_alloc(bytes);
    if (!p)
        srt_err_set(err, "host device: too many allocations");
    return p;
}
static void f_free(srt_backend *be, void *p)
{
    in_capture(F(be), "free");
    for (int i = 0; i < MAXA; i++)
        if (allocs[i].p == p) {
            free(p);
            allocs[i].p = NULL;
            return;
        }
    violate(F(be), "free of a pointer not allocated");
}
static int f_upload(srt_backend *be, void *dst, const void *src, size_t n, srt_err *err)
{
    fake *f = F(be);
    if (in_capture(f, "upload"))
        return srt_err_set(err, "upload inside a graph capture");
    need_dev(f, dst, "upload", "the destination");
    if (f->n_ups < 64) {
        f->ups[f->n_ups].dst = dst;
        f->ups[f->n_ups++].n = n;
    }
    memcpy(dst, src, n);
    return SRT_OK;
}
static int f_download(srt_backend *be, void *dst, const void *src, size_t n, srt_err *err)
{
    fake *f = F(be);
    if (in_capture(f, "download"))
        return srt_err_set(err, "download inside a graph capture");
    need_dev(f, src, "download", "the source");
    memcpy(dst, src, n);
    f->n_ups = 0;   /* the step is over */
    return SRT_OK;
}
static int f_sync(srt_backend *be, srt_err *err)
{
    return in_capture(F(be), "sync") ? srt_err_set(err, "sync inside a graph capture") : SRT_OK;
}
static int f_load(srt_backend *be, const srt_weight *w, srt_err *err)
{
    return in_capture(F(be), "load_weight") ? srt_err_set(err, "load_weight inside a graph capture") : SRT_OK;
}
static int f_reserve(srt_backend *be, const srt_weight *w, int64_t n, srt_err *err)
{
    return F(be)->cpu->ops->reserve_matmul(F(be)->cpu, w, n, err);
}
static int f_threads(const srt_backend *be) { return F(be)->cpu->ops->n_threads(F(be)->cpu); }
/* the "stream": work enqueued on it (issue) runs now, or is recorded while capturing */
static void *f_stream(srt_backend *be) { return F(be); }
static void f_destroy(srt_backend *be) {}

static void f_graph_clear(srt_backend *be)
{
    fake *f = F(be);
    for (int i = 0; i < MAXG; i++) {
        free(f->g[i]);
        f->g[i] = NULL;
        f->g_n[i] = 0;
    }
    f->n_clears++;
}

static int f_begin(srt_backend *be, const srt_forward_batch *b, srt_err *err)
{
    fake *f = F(be);
    if (in_capture(f, "begin_batch"))
        return srt_err_set(err, "begin_batch inside a graph capture");
    int64_t total = 0;
    for (int32_t s = 0; s < b->n_seqs; s++)
        total += b->seq_len[s];
    if (b->n_tokens > f->cap_tok || b->n_seqs > f->cap_seq || total > f->cap_slots) {
        /* new addresses: recorded graphs would read the old ones, so they go (as CUDA's) */
        int had = 0;
        for (int i = 0; i < MAXG; i++)
            had |= f->g[i] != NULL;
        if (had) {
            f_graph_clear(be);
            f->n_grows++;
        }
        f->cap_tok = b->n_tokens > f->cap_tok ? b->n_tokens + f->slack : f->cap_tok;
        f->cap_seq = b->n_seqs > f->cap_seq ? b->n_seqs + f->slack : f->cap_seq;
        f->cap_slots = total > f->cap_slots ? total + 8 * f->slack : f->cap_slots;
        free(f->m_out), free(f->m_pos), free(f->m_start), free(f->m_len), free(f->m_table), free(f->m_slots);
        f->m_out = malloc((size_t)f->cap_tok * 4);
        f->m_pos = malloc((size_t)f->cap_tok * 4);
        f->m_start = malloc(((size_t)f->cap_seq + 1) * 4);
        f->m_len = malloc((size_t)f->cap_seq * 4);
        f->m_slots = malloc((size_t)f->cap_seq * sizeof(*f->m_slots));
        f->m_table = malloc((size_t)(f->cap_slots ? f->cap_slots : 1) * 4);
    }
    memcpy(f->m_out, b->out_slots, (size_t)b->n_tokens * 4);
    memcpy(f->m_pos, b->positions, (size_t)b->n_tokens * 4);
    memcpy(f->m_start, b->seq_start, ((size_t)b->n_seqs + 1) * 4);
    memcpy(f->m_len, b->seq_len, (size_t)b->n_seqs * 4);
    int64_t off = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        if (b->seq_len[s] > 0)
            memcpy(f->m_table + off, b->seq_slots[s], (size_t)b->seq_len[s] * 4);
        f->m_slots[s] = f->m_table + off;
        off += b->seq_len[s];
    }
    f->mb = (srt_forward_batch){ .n_tokens = b->n_tokens, .positions = f->m_pos, .out_slots = f->m_out,
                                 .n_seqs = b->n_seqs, .seq_start = f->m_start, .seq_len = f->m_len,
                                 .seq_slots = (const int32_t *const *)f->m_slots };
    f->announced = b;
    f->cur_tokens = b->n_tokens;
    return SRT_OK;
}

static int f_graph_capture(srt_backend *be, int32_t bs, srt_graph_body body, void *user, srt_err *err)
{
    fake *f = F(be);
    if (bs < 1 || bs > SRT_GRAPH_MAX_BS)
        return srt_err_set(err, "graphs: batch size %d outside [1, %d]", bs, SRT_GRAPH_MAX_BS);
    if (f->capturing)
        return srt_err_set(err, "graphs: capture inside a capture");
    if (f->cur_tokens != bs)
        violate(f, "capture of %d after begin_batch of %d tokens", bs, f->cur_tokens);
    f->capturing = 1;
    f->cap_bs = bs;
    f->rec_n = 0;
    srt_err be_err = { { 0 } };
    int rc = body(user, &be_err);
    f->capturing = 0;
    if (rc != SRT_OK)
        return srt_err_set(err, "graphs: capture of %d: %s", bs, be_err.msg);
    free(f->g[bs]);
    f->g[bs] = malloc((size_t)(f->rec_n ? f->rec_n : 1) * sizeof(rec));
    memcpy(f->g[bs], f->rec_buf, (size_t)f->rec_n * sizeof(rec));
    f->g_n[bs] = f->rec_n;
    f->captures[bs]++;
    f->n_captures++;
    return SRT_OK;
}

static int f_graph_ready(srt_backend *be, int32_t bs)
{
    return bs >= 1 && bs <= SRT_GRAPH_MAX_BS && F(be)->g[bs] != NULL;
}

/* the recorded ids / positions a graph reads must be what this step uploaded, at those addresses */
static void check_inputs(fake *f, const void *p, int32_t bs, const char *what)
{
    for (int i = 0; i < f->n_ups; i++)
        if (f->ups[i].dst == p && f->ups[i].n >= (size_t)bs * sizeof(int32_t))
            return;
    violate(f, "replay of %d: the recorded %s address was not uploaded this step", bs, what);
}

static int f_graph_replay(srt_backend *be, int32_t bs, srt_err *err)
{
    fake *f = F(be);
    if (!f_graph_ready(be, bs))
        return srt_err_set(err, "graphs: no graph of %d", bs);
    if (f->capturing)
        return srt_err_set(err, "graphs: replay inside a capture");
    if (f->cur_tokens != bs) {
        violate(f, "replay of %d after begin_batch of %d tokens", bs, f->cur_tokens);
        return srt_err_set(err, "graphs: replay of %d needs a batch of %d tokens", bs, bs);
    }
    for (int i = 0; i < f->g_n[bs]; i++) {
        const rec *r = &f->g[bs][i];
        if (r->op == R_EMBED)
            check_inputs(f, r->p[0], bs, "token ids");
        if (r->op == R_RCS)
            check_inputs(f, r->p[0], bs, "positions");
    }
    for (int i = 0; i < f->g_n[bs]; i++)
        exec_rec(f, &f->g[bs][i]);
    f->replays[bs]++;
    f->n_replays++;
    return SRT_OK;
}

static const srt_backend_ops fake_ops = {
    .name = "recording", .destroy = f_destroy, .reserve_matmul = f_reserve, .matmul = f_matmul, .embed = f_embed,
    .rmsnorm = f_rmsnorm, .silu = f_silu, .mul = f_mul, .silu_mul = f_silu_mul, .add = f_add, .add3 = f_add3,
    .rope = f_rope, .kv_store = f_kv_store, .attention = f_attention, .n_threads = f_threads,
    .alloc = f_alloc, .free = f_free, .upload = f_upload, .download = f_download, .copy = f_copy,
    .load_weight = f_load, .begin_batch = f_begin, .rope_cos_sin = f_rope_cs, .gather_rows = f_gather,
    .sync = f_sync, .add_rmsnorm = f_add_rmsnorm,
    .graph_capture = f_graph_capture, .graph_ready = f_graph_ready, .graph_replay = f_graph_replay,
    .graph_clear = f_graph_clear, .stream = f_stream,
};

static void fake_init(fake *f, srt_backend *cpu, int32_t tok, int32_t seq, int64_t slots, int32_t slack)
{
    memset(f, 0, sizeof *f);
    f->base.ops = &fake_ops;
    f->base.impl = f;
    f->cpu = cpu;
    f->slack = slack;
    /* metadata sized up front (growth, which drops graphs, is tested on its own) */
    f->cap_tok = tok;
    f->cap_seq = seq;
    f->cap_slots = slots;
    f->m_out = malloc((size_t)tok * 4);
    f->m_pos = malloc((size_t)tok * 4);
    f->m_start = malloc(((size_t)seq + 1) * 4);
    f->m_len = malloc((size_t)seq * 4);
    f->m_slots = malloc((size_t)seq * sizeof(*f->m_slots));
    f->m_table = malloc((size_t)slots * 4);
}

static void fake_fini(fake *f)
{
    for (int i = 0; i < MAXG; i++)
        free(f->g[i]);
    free(f->rec_buf);
    free(f->m_out), free(f->m_pos), free(f->m_start), free(f->m_len), free(f->m_table), free(f->m_slots);
}

/* ---------------------------------------------------------------- a scheduler-like run */

#define NSEQ 16
#define SLOTS_PER 128
#define MAXTOK 32

typedef struct seqst {
    int      plen, len;
    int32_t  toks[SLOTS_PER];
    int32_t  slots[SLOTS_PER];
} seqst;

typedef struct lane {            /* one runner with its KV pool */
    const char  *name;
    srt_runner  *r;
    srt_kv_pool *kv, *kv_old;
    float       *logits;
} lane;

typedef struct world {
    const char *model;
    srt_model  *m;
    int         V;
    seqst       seq[NSEQ];
    lane        ln[3];           /* 0: CPU backend, 1: recording backend, graphs off, 2: graphs on */
    fake       *fe, *fg;
    int         steps, mismatches, run_failed, hooked, kv_switched;
    char        first_mismatch[256];
    /* what the graph runner must have done, by the test's own account */
    int         live[MAXG];
    int         exp_captures, exp_replays, exp_hooked, exp_clears, exp_cap_bs[MAXG];
    int         count_bad, prefill_steps, prefill_replays;
    char        first_count[256];
} world;

/* One step: ids[k] of the sequences, n_new[k] of their tokens (their prompt when they have no
 * context yet, else 1: decode). Runs the three lanes, compares, advances greedily on lane 0. */
static void step_rows(world *w, const int *ids, int n, int forced_mode, int reversed_rows);
static void step(world *w, const int *ids, int n, int forced_mode) { step_rows(w, ids, n, forced_mode, 0); }

/* reversed_rows: explicit logit rows, last sequence first */
static void step_rows(world *w, const int *ids, int n, int forced_mode, int reversed_rows)
{
    int32_t rows[NSEQ];
    int32_t tok[MAXTOK], pos[MAXTOK], outs[MAXTOK], start[NSEQ + 1], len[NSEQ];
    const int32_t *ss[NSEQ];
    int T = 0, all_decode = 1, all_prefill = 1;
    for (int k = 0; k < n; k++) {
        seqst *s = &w->seq[ids[k]];
        int prefill = s->len == 0, nn = prefill ? s->plen : 1;
        all_decode &= !prefill;
        all_prefill &= prefill;
        start[k] = T;
        for (int j = 0; j < nn; j++, T++) {
            int p = s->len + j;
            tok[T] = s->toks[p];
            pos[T] = p;
            outs[T] = s->slots[p];
        }
        len[k] = s->len + nn;
        ss[k] = s->slots;
    }
    start[n] = T;
    int mode = forced_mode >= 0 ? forced_mode
             : all_decode ? SRT_FORWARD_DECODE : all_prefill ? SRT_FORWARD_PREFILL : SRT_FORWARD_MIXED;
    srt_forward_batch b = { .n_tokens = T, .token_ids = tok, .positions = pos, .out_slots = outs, .n_seqs = n,
                            .seq_start = start, .seq_len = len, .seq_slots = ss, .forward_mode = mode };
    if (reversed_rows) {
        for (int k = 0; k < n; k++)
            rows[k] = start[n - k];   /* a decode step: token k is sequence k's */
        for (int k = 0; k < n; k++)
            rows[k] -= 1;
        b.logit_rows = rows;
        b.n_logit_rows = n;
    }
    srt_runner_graph_stats st0;
    srt_runner_graph_stats_get(w->ln[2].r, &st0);
    int fg_replays0 = w->fg->n_replays;
    for (int l = 0; l < 3; l++) {
        srt_err err = { { 0 } };
        if (srt_runner_forward(w->ln[l].r, w->ln[l].kv, &b, w->ln[l].logits, &err) != SRT_OK) {
            if (!w->run_failed++)
                tap_diag("%s step %d, %s: %s", w->model, w->steps, w->ln[l].name, err.msg);
        }
    }
    for (int l = 1; l < 3; l++)
        if (memcmp(w->ln[0].logits, w->ln[l].logits, (size_t)n * w->V * sizeof(float)) != 0 && !w->mismatches++)
            snprintf(w->first_mismatch, sizeof w->first_mismatch, "step %d (%d seqs, mode %d): %s differs from CPU",
                     w->steps, n, mode, w->ln[l].name);
    /* what the graph lane must have done */
    int decode = mode == SRT_FORWARD_DECODE && T == n;
    if (decode && !w->hooked && w->kv_switched) {   /* the runner looks at the pool on a decode step */
        int any = 0;
        for (int i = 0; i < MAXG; i++)
            any |= w->live[i], w->live[i] = 0;
        w->exp_clears += any;
        w->kv_switched = 0;
    }
    if (w->hooked) {
        int any = 0;
        for (int i = 0; i < MAXG; i++)
            any |= w->live[i], w->live[i] = 0;
        w->exp_clears += any;
        w->exp_hooked += decode;
    } else if (decode) {
        int bs = srt_cuda_graph_bucket(n);
        if (w->live[bs])
            w->exp_replays++;
        else {
            w->exp_captures++;
            w->exp_cap_bs[bs]++;
            w->live[bs] = 1;
        }
    }
    srt_runner_graph_stats st;
    srt_runner_graph_stats_get(w->ln[2].r, &st);
    if (!decode) {
        w->prefill_steps++;
        w->prefill_replays += (int)(st.replays - st0.replays) + (w->fg->n_replays - fg_replays0);
    }
    if ((st.captures != w->exp_captures || st.replays != w->exp_replays || st.eager_hooked != w->exp_hooked ||
         st.clears != w->exp_clears || w->fg->n_captures != w->exp_captures || w->fg->n_replays != w->exp_replays) &&
        !w->count_bad++)
        snprintf(w->first_count, sizeof w->first_count,
                 "after step %d (%d seqs, mode %d): captures %lld/%d (backend %d) replays %lld/%d (backend %d) "
                 "hooked %lld/%d clears %lld/%d",
                 w->steps, n, mode, (long long)st.captures, w->exp_captures, w->fg->n_captures, (long long)st.replays,
                 w->exp_replays, w->fg->n_replays, (long long)st.eager_hooked, w->exp_hooked, (long long)st.clears,
                 w->exp_clears);
    /* advance greedily on the CPU's logits */
    for (int k = 0; k < n; k++) {
        seqst *s = &w->seq[ids[k]];
        s->len = len[k];
        int row = reversed_rows ? n - 1 - k : k;
        if (s->len < SLOTS_PER)
            s->toks[s->len] = srt_argmax(w->ln[0].logits + (size_t)row * w->V, w->V);
    }
    w->steps++;
}

static void decode_n(world *w, const int *ids, int n, int times)
{
    for (int i = 0; i < times; i++)
        step(w, ids, n, -1);
}

/* A forward hook that changes a module's output (all three lanes share the model's modules). */
static int hook_calls;
static int bump_fwd(srt_hook *h, const srt_hook_call *c, const srt_module_args *a, srt_tensor_view *out,
                    srt_tensor_view *rep)
{
    float *o = out->data;
    int64_t n = 1;
    for (int i = 0; i < out->ndim; i++)
        n *= out->shape[i];
    for (int64_t i = 0; i < n; i++)
        o[i] += 0.125f;
    hook_calls++;
    return SRT_HOOK_OK;
}
static srt_hook bump_hook = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), NULL, bump_fwd, NULL, NULL, NULL, NULL };

static void new_seq(world *w, int id, int plen, unsigned seed)
{
    seqst *s = &w->seq[id];
    memset(s, 0, sizeof *s);
    s->plen = plen;
    for (int j = 0; j < SLOTS_PER; j++)
        s->slots[j] = id * SLOTS_PER + j;
    for (int j = 0; j < plen; j++) {
        seed = seed * 1103515245u + 12345u;
        s->toks[j] = (int32_t)((seed >> 8) % (unsigned)w->V);
    }
}

static int make_lanes(world *w, srt_backend *cpu, fake *fe, fake *fg, srt_err *err)
{
    srt_runner_opts o = { .max_batch_tokens = MAXTOK, .max_seqs = NSEQ, .n_threads = 2 };
    srt_backend *bes[3] = { NULL, &fe->base, &fg->base };
    const char *names[3] = { "CPU backend", "recording backend, graphs off", "recording backend, graphs on" };
    int graphs[3] = { 0, SRT_RUNNER_GRAPHS_OFF, SRT_RUNNER_GRAPHS_ON };
    (void)cpu;
    for (int l = 0; l < 3; l++) {
        o.backend = bes[l];
        o.graphs = graphs[l];
        w->ln[l].name = names[l];
        w->ln[l].logits = calloc((size_t)NSEQ * w->V, sizeof(float));
        if (srt_runner_create(w->m, &o, &w->ln[l].r, err) != SRT_OK ||
            srt_kv_pool_create_on(srt_model_config_of(w->m), 1, NSEQ * SLOTS_PER, SRT_F32,
                                  srt_runner_backend(w->ln[l].r), &w->ln[l].kv, err) != SRT_OK)
            return SRT_ERROR;
    }
    return SRT_OK;
}

static void free_lanes(world *w)
{
    for (int l = 0; l < 3; l++) {
        srt_kv_pool_free(w->ln[l].kv);
        srt_kv_pool_free(w->ln[l].kv_old);
        srt_runner_free(w->ln[l].r);
        free(w->ln[l].logits);
    }
}

static void run_model(const char *path, const char *name)
{
    srt_err err = { { 0 } };
    world *w = calloc(1, sizeof *w);
    w->model = name;
    if (!ok(srt_model_load(path, &w->m, &err) == SRT_OK, "%s: loads from %s", name, path)) {
        tap_diag("%s", err.msg);
        free(w);
        return;
    }
    w->V = srt_model_config_of(w->m)->vocab_size;
    srt_backend *cpu = srt_cpu_backend_create(2, 0, &err);
    fake *fe = calloc(1, sizeof *fe), *fg = calloc(1, sizeof *fg);
    fake_init(fe, cpu, 64, 32, 8192, 0);
    fake_init(fg, cpu, 64, 32, 8192, 0);
    w->fe = fe;
    w->fg = fg;
    int made = cpu && make_lanes(w, cpu, fe, fg, &err) == SRT_OK;
    if (!ok(made, "%s: three runners (CPU, recording backend with graphs off and on) and their KV pools", name)) {
        tap_diag("%s", err.msg);
        goto out;
    }
    srt_runner_graph_stats st;
    srt_runner_graph_stats_get(w->ln[2].r, &st);
    srt_runner_graph_stats st1;
    srt_runner_graph_stats_get(w->ln[1].r, &st1);
    ok(st.enabled && !st1.enabled, "%s: graphs on for the runner asked for them, off for the other", name);

    static const int s0[] = { 0 }, s012[] = { 0, 1, 2 }, s0123[] = { 0, 1, 2, 3 }, s01234[] = { 0, 1, 2, 3, 4 };
    static const int s3042[] = { 3, 0, 4, 2 }, s9[] = { 0, 2, 3, 4, 5, 6, 7, 8, 9 }, s023[] = { 0, 2, 3 };
    static const int p5to9[] = { 5, 6, 7, 8, 9 }, s10_12[] = { 10, 11, 12 };
    new_seq(w, 0, 5, 1);
    step(w, s0, 1, -1);                        /* prefill */
    decode_n(w, s0, 1, 3);                     /* bucket 1: capture, replay, replay */
    new_seq(w, 1, 4, 2);
    new_seq(w, 2, 1, 3);
    step(w, s012, 3, -1);                      /* mixed: seq 0 decodes, 1 and 2 prefill */
    decode_n(w, s012, 3, 3);                   /* 3 -> bucket 4 */
    new_seq(w, 3, 1, 4);
    step(w, s0123, 4, -1);                     /* mixed of one-token chunks (n_tokens == n_seqs): eager */
    decode_n(w, s0123, 4, 2);                  /* 4 real in bucket 4: replays */
    new_seq(w, 4, 3, 5);
    { static const int s4[] = { 4 }; step(w, s4, 1, -1); }   /* prefill alone */
    decode_n(w, s01234, 5, 3);                 /* 5 -> bucket 8 */
    decode_n(w, s3042, 4, 2);                  /* seq 1 left, order changed: bucket 4 again */
    step_rows(w, s3042, 4, -1, 1);             /* explicit logit rows, reversed: replayed too */
    static const int plens[] = { 2, 6, 1, 3, 2 };
    for (int i = 0; i < 5; i++)
        new_seq(w, p5to9[i], plens[i], 10 + i);
    step(w, p5to9, 5, -1);                     /* five prefills in one step */
    decode_n(w, s9, 9, 2);                     /* 9 -> bucket 16 */
    decode_n(w, s0, 1, 1);                     /* bucket 1 still held */
    step(w, s023, 3, SRT_FORWARD_PREFILL);     /* a "prefill" batch of one token each: eager */
    int prefill_replays = w->prefill_replays;
    ok(w->prefill_steps == 6 && prefill_replays == 0, "%s: %d prefill / mixed steps, none replayed", name,
       w->prefill_steps);

    /* a hook (installed between steps, as srt_admin does): every step runs eagerly, graphs go */
    int n_mod;
    srt_module *mods = srt_model_modules(w->m, &n_mod);
    srt_hook_attach_opts ho = { .name = "bump" };
    srt_hook_registry *reg = srt_hook_registry_create(mods, n_mod, &err);
    int64_t hid = reg ? srt_hook_attach(reg, "model.layers.1.mlp", &bump_hook, &ho, &err) : -1;
    ok(hid > 0, "%s: hook attached on model.layers.1.mlp", name);
    w->hooked = 1;
    int rep0 = fg->n_replays, clears0 = fg->n_clears, calls0 = hook_calls;
    decode_n(w, s9, 9, 2);
    decode_n(w, s023, 3, 1);
    ok(fg->n_replays == rep0 && hook_calls - calls0 == 3 * 3,
       "%s: decode steps with a hook run eagerly on the graph runner, the hook ran every time (%d replays, %d calls)",
       name, fg->n_replays - rep0, hook_calls - calls0);
    ok(fg->n_clears == clears0 + 1 && !f_graph_ready(&fg->base, 1) && !f_graph_ready(&fg->base, 4),
       "%s: the hook dropped every graph, once (%d clears)", name, fg->n_clears - clears0);
    srt_hook_remove(reg, hid, &err);
    w->hooked = 0;
    int cap0 = fg->n_captures;
    decode_n(w, s023, 3, 3);                   /* captured again, then replayed */
    ok(fg->n_captures == cap0 + 1 && fg->captures[4] >= 2, "%s: with the hook removed bucket 4 is captured again", name);

    /* another KV pool (the old one kept alive, so its addresses stay taken): graphs must go */
    for (int l = 0; l < 3; l++) {
        w->ln[l].kv_old = w->ln[l].kv;
        w->ln[l].kv = NULL;
        if (srt_kv_pool_create_on(srt_model_config_of(w->m), 1, NSEQ * SLOTS_PER, SRT_F32,
                                  srt_runner_backend(w->ln[l].r), &w->ln[l].kv, &err) != SRT_OK)
            tap_diag("%s", err.msg);
    }
    w->kv_switched = 1;
    for (int i = 0; i < 3; i++)
        new_seq(w, s10_12[i], 2 + i, 20 + i);
    step(w, s10_12, 3, -1);
    cap0 = fg->n_captures;
    decode_n(w, s10_12, 3, 3);
    ok(fg->n_captures == cap0 + 1, "%s: a decode step on another KV pool captures again", name);

    ok(!w->run_failed, "%s: %d steps ran on all three runners", name, w->steps);
    ok(!w->mismatches, "%s: logits bit-identical: graphs on == graphs off == CPU at every step%s%s", name,
       w->mismatches ? ", first: " : "", w->first_mismatch);
    ok(!w->count_bad, "%s: a capture the first time a bucket is used (and after a clear), a replay every other "
                      "decode step (%d captures, %d replays)%s%s",
       name, w->exp_captures, w->exp_replays, w->count_bad ? "; " : "", w->first_count);
    int per_bucket = 1;
    for (int i = 0; i < MAXG; i++)
        per_bucket &= fg->captures[i] == w->exp_cap_bs[i];
    ok(per_bucket && fg->captures[1] == 1 && fg->captures[4] == 3 && fg->captures[8] == 1 && fg->captures[16] == 1 &&
       fg->captures[2] == 0, "%s: captures per bucket: 1:%d 4:%d 8:%d 16:%d", name, fg->captures[1], fg->captures[4],
       fg->captures[8], fg->captures[16]);
    ok(fg->replays[1] >= 3 && fg->replays[4] >= 6 && fg->replays[8] == 2 && fg->replays[16] == 1,
       "%s: replays per bucket: 1:%d 4:%d 8:%d 16:%d", name, fg->replays[1], fg->replays[4], fg->replays[8],
       fg->replays[16]);
    ok(fe->n_captures == 0 && fe->n_replays == 0, "%s: the runner with graphs off never captures", name);
    ok(fg->violations == 0 && fe->violations == 0,
       "%s: the graph contract held (fixed addresses, bucket-sized ops, nothing forbidden in a capture): "
       "%d violations%s%s", name, fg->violations + fe->violations, fg->violations ? ", first: " : "", fg->first);
    srt_hook_registry_free(reg);
out:
    free_lanes(w);
    fake_fini(fe);
    fake_fini(fg);
    free(fe);
    free(fg);
    srt_backend_free(cpu);
    srt_model_free(w->m);
    free(w);
}

/* Batch metadata that has to grow drops the backend's graphs (as CUDA's does): the runner
 * finds them gone and captures again, and the logits stay right. */
static void run_growth(const char *path)
{
    srt_err err = { { 0 } };
    srt_model *m = NULL;
    if (srt_model_load(path, &m, &err) != SRT_OK) {
        ok(0, "growth: model loads: %s", err.msg);
        return;
    }
    world *w = calloc(1, sizeof *w);
    w->m = m;
    w->model = "growth";
    w->V = srt_model_config_of(m)->vocab_size;
    srt_backend *cpu = srt_cpu_backend_create(2, 0, &err);
    fake *fe = calloc(1, sizeof *fe), *fg = calloc(1, sizeof *fg);
    fake_init(fe, cpu, 1, 1, 1, 0);
    fake_init(fg, cpu, 1, 1, 1, 1);   /* grows a little at a time */
    w->fe = fe;
    w->fg = fg;
    if (make_lanes(w, cpu, fe, fg, &err) == SRT_OK) {
        static const int s01[] = { 0, 1 };
        new_seq(w, 0, 3, 7);
        new_seq(w, 1, 2, 8);
        w->hooked = 0;
        step(w, s01, 2, -1);
        decode_n(w, s01, 2, 12);
        ok(!w->run_failed && !w->mismatches, "growth: logits bit-identical while the metadata grows%s%s",
           w->mismatches ? ": " : "", w->first_mismatch);
        ok(fg->n_grows >= 2 && fg->captures[2] == fg->n_grows + 1 && fg->n_replays > 0 && fg->violations == 0,
           "growth: each time the backend dropped its graphs the runner captured again (%d drops, %d captures, %d replays)",
           fg->n_grows, fg->captures[2], fg->n_replays);
    } else
        ok(0, "growth: runners: %s", err.msg);
    free_lanes(w);
    fake_fini(fe);
    fake_fini(fg);
    free(fe);
    free(fg);
    srt_backend_free(cpu);
    srt_model_free(m);
    free(w);
}

/* ---------------------------------------------------------------- warm-up at startup */

/* every K and V byte of a lane's pool (F32), to see that a warm-up wrote none */
static size_t kv_bytes(srt_kv_pool *kv)
{
    return (size_t)srt_kv_pool_n_slots(kv) * (size_t)srt_kv_pool_row_elems(kv) * sizeof(float);
}
static char *kv_snapshot(srt_kv_pool *kv)
{
    int32_t L = srt_kv_pool_n_layers(kv);
    size_t n = kv_bytes(kv);
    char *s = malloc(2 * (size_t)L * n);
    for (int32_t l = 0; l < L; l++) {
        memcpy(s + (2 * (size_t)l) * n, srt_kv_pool_k(kv, l), n);
        memcpy(s + (2 * (size_t)l + 1) * n, srt_kv_pool_v(kv, l), n);
    }
    return s;
}

/* srt_runner_graphs_warmup: every bucket up to the limit captured on padding rows only (the
 * KV pool, holding real sequences, byte for byte unchanged), the backend's metadata sized
 * once so later steps do not drop the graphs, then every decode step of those buckets
 * replays (no capture) with logits bit-identical to the CPU and graphs-off runners; nothing
 * with a hook installed or graphs off. */
static void check_warmup(const char *path)
{
    srt_err err = { { 0 } };
    world *w = calloc(1, sizeof *w);
    w->model = "warm-up";
    if (srt_model_load(path, &w->m, &err) != SRT_OK) {
        ok(0, "warm-up: model loads: %s", err.msg);
        free(w);
        return;
    }
    w->V = srt_model_config_of(w->m)->vocab_size;
    srt_backend *cpu = srt_cpu_backend_create(2, 0, &err);
    fake *fe = calloc(1, sizeof *fe), *fg = calloc(1, sizeof *fg);
    fake_init(fe, cpu, 64, 32, 8192, 0);
    fake_init(fg, cpu, 1, 1, 1, 0);   /* metadata the size of one token: the warm-up must size it */
    w->fe = fe;
    w->fg = fg;
    if (make_lanes(w, cpu, fe, fg, &err) != SRT_OK) {
        ok(0, "warm-up: runners: %s", err.msg);
        goto out;
    }
    static const int s0123[] = { 0, 1, 2, 3 }, s0[] = { 0 }, s012[] = { 0, 1, 2 };
    static const int s9[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8 }, s13[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
    for (int i = 0; i < 13; i++)
        new_seq(w, i, 1 + i % 4, 40 + i);
    step(w, s0123, 4, -1);   /* real sequences in the pools before the warm-up */
    decode_n(w, s0123, 4, 1);
    int cap0 = fg->n_captures;
    srt_runner_graph_stats st0, st;
    srt_runner_graph_stats_get(w->ln[2].r, &st0);

    /* a hook installed: nothing */
    int n_mod;
    srt_module *mods = srt_model_modules(w->m, &n_mod);
    srt_hook_attach_opts ho = { .name = "bump" };
    srt_hook_registry *reg = srt_hook_registry_create(mods, n_mod, &err);
    int64_t hid = reg ? srt_hook_attach(reg, "model.layers.0.mlp", &bump_hook, &ho, &err) : -1;
    int rc_h = srt_runner_graphs_warmup(w->ln[2].r, w->ln[2].kv, 0, &err);
    srt_hook_remove(reg, hid, &err);
    srt_hook_registry_free(reg);
    ok(hid > 0 && rc_h == SRT_OK && fg->n_captures == cap0,
       "warm-up: with a hook installed it does nothing (%d captures)", fg->n_captures - cap0);

    /* graphs off, and the CPU backend: nothing */
    int rc_off = srt_runner_graphs_warmup(w->ln[1].r, w->ln[1].kv, 0, &err);
    int rc_cpu = srt_runner_graphs_warmup(w->ln[0].r, w->ln[0].kv, 0, &err);
    ok(rc_off == SRT_OK && rc_cpu == SRT_OK && fe->n_captures == 0 && fe->n_replays == 0,
       "warm-up: with graphs off (and on the CPU backend) it does nothing");

    /* up to 3 sequences, then up to max_seqs (16): buckets 1 2 4, then 8 16 */
    char *before = kv_snapshot(w->ln[2].kv);
    int rc3 = srt_runner_graphs_warmup(w->ln[2].r, w->ln[2].kv, 3, &err);
    if (rc3 != SRT_OK)
        tap_diag("%s", err.msg);
    int after3 = fg->n_captures - cap0;
    int rc_all = srt_runner_graphs_warmup(w->ln[2].r, w->ln[2].kv, 0, &err);
    if (rc_all != SRT_OK)
        tap_diag("%s", err.msg);
    char *after = kv_snapshot(w->ln[2].kv);
    size_t kvn = 2 * (size_t)srt_kv_pool_n_layers(w->ln[2].kv) * kv_bytes(w->ln[2].kv);
    srt_runner_graph_stats_get(w->ln[2].r, &st);
    int nb = 0;
    for (int32_t n = 1, prev = 0; n <= NSEQ; n++)
        if (srt_cuda_graph_bucket(n) != prev)
            prev = srt_cuda_graph_bucket(n), nb++;
    ok(rc3 == SRT_OK && after3 == 3 && fg->captures[1] == 1 && fg->captures[2] == 1 && fg->captures[4] == 2,
       "warm-up: up to 3 sequences captures buckets 1, 2 and 4 (%d captures)", after3);
    ok(rc_all == SRT_OK && fg->n_captures - cap0 == nb && nb == 5 && st.captures - st0.captures == nb &&
       fg->captures[8] == 1 && fg->captures[16] == 1 && fg->n_replays == 0 + (int)st0.replays,
       "warm-up: up to max_seqs captures the other buckets, once each (%d of %d buckets, %d replays)",
       fg->n_captures - cap0, nb, fg->n_replays - (int)st0.replays);
    ok(memcmp(before, after, kvn) == 0, "warm-up: the KV pool (%zu bytes, real sequences in it) is unchanged", kvn);
    free(before);
    free(after);
    for (int32_t n = 1; n <= NSEQ; n++) {
        int b = srt_cuda_graph_bucket(n);
        w->exp_captures += !w->live[b];
        w->exp_cap_bs[b] += !w->live[b];
        w->live[b] = 1;
    }
    w->exp_captures = (int)st.captures;

    /* the steps that follow: replays only, logits bit-identical, metadata never regrown (the
     * warm-up grew it once, for the largest step, before capturing) */
    int grows0 = fg->n_grows;
    int cap1 = fg->n_captures, rep1 = fg->n_replays;
    decode_n(w, s0123, 4, 2);
    decode_n(w, s0, 1, 2);
    for (int i = 4; i < 13; i++) {
        int one[] = { i };
        step(w, one, 1, -1);   /* prefills */
    }
    decode_n(w, s012, 3, 2);
    decode_n(w, s9, 9, 2);
    decode_n(w, s13, 13, 2);
    decode_n(w, s0123, 4, 1);
    ok(fg->n_captures == cap1 && fg->n_replays - rep1 == 11 && fg->n_grows == grows0 && !w->count_bad,
       "warm-up: every later decode step replays, none captures, the metadata never regrows "
       "(%d captures, %d replays, %d regrowths)%s%s", fg->n_captures - cap1, fg->n_replays - rep1,
       fg->n_grows - grows0, w->count_bad ? "; " : "", w->first_count);
    ok(!w->run_failed && !w->mismatches, "warm-up: logits bit-identical to the CPU and graphs-off runners "
                                          "at every step (%d steps)%s%s",
       w->steps, w->mismatches ? ", first: " : "", w->first_mismatch);
    ok(fg->violations == 0 && fe->violations == 0, "warm-up: the graph contract held (%d violations)%s%s",
       fg->violations + fe->violations, fg->violations ? ", first: " : "", fg->first);
out:
    free_lanes(w);
    fake_fini(fe);
    fake_fini(fg);
    free(fe);
    free(fg);
    srt_backend_free(cpu);
    srt_model_free(w->m);
    free(w);
}

/* ---------------------------------------------------------------- device hooks in graphs */

/* A steering hook twice: as a host hook (out += scale * vec on host memory) on the CPU
 * reference, and as a device hook (ABI 1.1 forward_device: it enqueues a "kernel" on the
 * stream it is given, reading vec and scale from its own device buffers) on the recording
 * backends, with graphs off and on. Three models, one per runner, since each has its own
 * registry (the device one with its backend's stream). */
typedef struct dsteer {
    fake  *f;            /* NULL: the host twin */
    float *vec, *scale;  /* device buffers (the fake's memory) or host ones */
    int64_t width;
    int    calls, fail_capture, bad_stream;
} dsteer;

static int dsteer_dev(srt_hook *h, const srt_hook_device_call *c, const srt_module_args *a,
                      const srt_tensor_view *out)
{
    dsteer *u = h->user;
    u->calls++;
    if (c->stream != u->f || c->struct_size < sizeof *c || out->ndim != 2 || out->shape[1] != u->width ||
        out->shape[0] != c->n_rows || c->positions == NULL) {
        u->bad_stream++;
        return SRT_HOOK_FAILED;
    }
    if (u->fail_capture && u->f->capturing)
        return SRT_HOOK_FAILED;   /* e.g. a launch this hook cannot make under capture */
    rec r = { .op = R_STEER, .p = { out->data, u->vec, u->scale, c->positions }, .n = { out->shape[0], u->width } };
    issue(u->f, &r);
    return SRT_HOOK_OK;
}

static int dsteer_host(srt_hook *h, const srt_hook_call *c, const srt_module_args *a, srt_tensor_view *out,
                       srt_tensor_view *rep)
{
    dsteer *u = h->user;
    float *o = out->data;
    u->calls++;
    for (int64_t t = 0; t < out->shape[0]; t++)
        for (int64_t j = 0; j < u->width; j++)
            o[t * u->width + j] += u->scale[0] * u->vec[j];
    return SRT_HOOK_OK;
}

typedef struct dworld {
    srt_model   *m[3];
    srt_hook_registry *reg[3];
    srt_runner  *r[3];
    srt_kv_pool *kv[3];
    float       *logits[3];
    dsteer       st[3];
    srt_hook     hk[3];
    int64_t      hid[3];
    seqst        seq[NSEQ];
    int          V, steps, mismatches, failed;
    char         first[256];
} dworld;

static void dstep(dworld *w, const int *ids, int n)
{
    int32_t tok[MAXTOK], pos[MAXTOK], outs[MAXTOK], start[NSEQ + 1], len[NSEQ];
    const int32_t *ss[NSEQ];
    int T = 0, all_decode = 1;
    for (int k = 0; k < n; k++) {
        seqst *s = &w->seq[ids[k]];
        int nn = s->len == 0 ? s->plen : 1;
        all_decode &= s->len > 0;
        start[k] = T;
        for (int j = 0; j < nn; j++, T++) {
            tok[T] = s->toks[s->len + j];
            pos[T] = s->len + j;
            outs[T] = s->slots[s->len + j];
        }
        len[k] = s->len + nn;
        ss[k] = s->slots;
    }
    start[n] = T;
    srt_forward_batch b = { .n_tokens = T, .token_ids = tok, .positions = pos, .out_slots = outs, .n_seqs = n,
                            .seq_start = start, .seq_len = len, .seq_slots = ss,
                            .forward_mode = all_decode ? SRT_FORWARD_DECODE : SRT_FORWARD_MIXED };
    for (int l = 0; l < 3; l++) {
        srt_err err = { { 0 } };
        if (srt_runner_forward(w->r[l], w->kv[l], &b, w->logits[l], &err) != SRT_OK && !w->failed++)
            tap_diag("device hooks, step %d, runner %d: %s", w->steps, l, err.msg);
    }
    for (int l = 1; l < 3; l++)
        if (memcmp(w->logits[0], w->logits[l], (size_t)n * w->V * sizeof(float)) != 0 && !w->mismatches++)
            snprintf(w->first, sizeof w->first, "step %d: runner %d differs from the CPU", w->steps, l);
    for (int k = 0; k < n; k++) {
        seqst *s = &w->seq[ids[k]];
        s->len = len[k];
        s->toks[s->len] = srt_argmax(w->logits[0] + (size_t)k * w->V, w->V);
    }
    w->steps++;
}

static void dsteps(dworld *w, const int *ids, int n, int times)
{
    for (int i = 0; i < times; i++)
        dstep(w, ids, n);
}

static void set_scale(dworld *w, float v)
{
    for (int l = 0; l < 3; l++)
        w->st[l].scale[0] = v;   /* the device buffers' contents (the fake's memory is the host's) */
}

/* remove and re-add every registration of a spec: new hooks generation, graphs must go */
static void readd(dworld *w, const char *name)
{
    srt_err err;
    for (int l = 0; l < 3; l++)
        if (srt_hook_remove_spec(w->reg[l], name, &err) < 0 || srt_hook_readd_spec(w->reg[l], name, &err) < 0)
            tap_diag("readd %s: %s", name, err.msg);
}

static void check_device_hooks(const char *path)
{
    srt_err err = { { 0 } };
    dworld *w = calloc(1, sizeof *w);
    srt_backend *cpu = srt_cpu_backend_create(2, 0, &err);
    fake *fe = calloc(1, sizeof *fe), *fg = calloc(1, sizeof *fg);
    fake_init(fe, cpu, 64, 32, 8192, 0);
    fake_init(fg, cpu, 64, 32, 8192, 0);
    srt_backend *bes[3] = { NULL, &fe->base, &fg->base };
    fake *fks[3] = { NULL, fe, fg };
    int graphs[3] = { 0, SRT_RUNNER_GRAPHS_OFF, SRT_RUNNER_GRAPHS_ON };
    int made = cpu != NULL;
    for (int l = 0; l < 3 && made; l++) {
        srt_runner_opts o = { .max_batch_tokens = MAXTOK, .max_seqs = NSEQ, .n_threads = 2, .backend = bes[l],
                              .graphs = graphs[l] };
        int n_mod = 0;
        srt_module *mods = NULL;
        made = srt_model_load(path, &w->m[l], &err) == SRT_OK &&
               srt_runner_create(w->m[l], &o, &w->r[l], &err) == SRT_OK &&
               srt_kv_pool_create_on(srt_model_config_of(w->m[l]), 1, NSEQ * SLOTS_PER, SRT_F32,
                                     srt_runner_backend(w->r[l]), &w->kv[l], &err) == SRT_OK &&
               (mods = srt_model_modules(w->m[l], &n_mod)) != NULL &&
               (w->reg[l] = srt_hook_registry_create(mods, n_mod, &err)) != NULL;
        if (!made)
            break;
        if (bes[l])
            srt_hook_registry_use_backend(w->reg[l], bes[l]);
        w->V = srt_model_config_of(w->m[l])->vocab_size;
        w->logits[l] = calloc((size_t)NSEQ * w->V, sizeof(float));
        int64_t H = srt_model_config_of(w->m[l])->hidden_size;
        dsteer *u = &w->st[l];
        u->f = fks[l];
        u->width = H;
        u->vec = fks[l] ? f_alloc(bes[l], (size_t)H * sizeof(float), &err) : malloc((size_t)H * sizeof(float));
        u->scale = fks[l] ? f_alloc(bes[l], sizeof(float), &err) : malloc(sizeof(float));
        for (int64_t j = 0; j < H; j++)
            u->vec[j] = (float)((j * 7919) % 13 - 6) / 16.0f;
        u->scale[0] = 1.5f;
        w->hk[l] = (srt_hook){ .abi_version = SRT_HOOK_ABI_VERSION, .struct_size = sizeof(srt_hook), .user = u };
        if (fks[l])
            w->hk[l].forward_device = dsteer_dev;   /* device entry only */
        else
            w->hk[l].forward = dsteer_host;
        srt_hook_attach_opts ho = { .name = "steer" };
        w->hid[l] = srt_hook_attach(w->reg[l], "model.layers.1", &w->hk[l], &ho, &err);
        made = w->hid[l] > 0;
    }
    if (!ok(made, "device hooks: three runners (CPU with a host steering hook; recording backend, graphs off "
                  "and on, with the same hook as a device entry)")) {
        tap_diag("%s", err.msg);
        goto out;
    }
    ok(srt_hook_registry_check_entries(w->reg[2], &err) == SRT_OK,
       "device hooks: a device-only hook is accepted where the registry has the backend's stream");
    {
        /* without a stream (the CPU's registry) a device-only hook could never run */
        srt_hook only_dev = { .abi_version = SRT_HOOK_ABI_VERSION, .struct_size = sizeof(srt_hook),
                              .forward_device = dsteer_dev, .user = &w->st[2] };
        srt_hook_attach_opts ho = { .name = "devonly" };
        int64_t id = srt_hook_attach(w->reg[0], "model.layers.0", &only_dev, &ho, &err);
        srt_err e2 = { { 0 } };
        int rc = srt_hook_registry_check_entries(w->reg[0], &e2);
        ok(id > 0 && rc == SRT_ERROR && strstr(e2.msg, "'devonly'") && strstr(e2.msg, "only a device entry"),
           "device hooks: without a stream a device-only hook is refused by name (%s)", e2.msg);
        srt_hook_delete(w->reg[0], id, &err);
        srt_hook_attach_opts pr = { .name = "devreq", .per_request = 1 };
        srt_hook only_dev2 = only_dev;
        id = srt_hook_attach(w->reg[2], "model.layers.0", &only_dev2, &pr, &err);
        ok(id < 0 && strstr(err.msg, "per-request"),
           "device hooks: a per-request hook with only a device entry is refused (%s)", err.msg);
    }

    static const int s012[] = { 0, 1, 2 }, s0[] = { 0 };
    for (int i = 0; i < 3; i++) {
        seqst *s = &w->seq[i];
        s->plen = 2 + i;
        for (int j = 0; j < SLOTS_PER; j++)
            s->slots[j] = i * SLOTS_PER + j;
        for (int j = 0; j < s->plen; j++)
            s->toks[j] = (int32_t)((7 + 31 * i + 17 * j) % w->V);
    }
    srt_runner_graph_stats g0, g;
    dstep(w, s012, 3);                          /* prefill: eager everywhere */
    int calls0 = w->st[2].calls, ex0 = fg->steer_execs;
    dsteps(w, s012, 3, 4);                      /* bucket 4: eager + capture, then 3 replays */
    srt_runner_graph_stats_get(w->r[2], &g);
    ok(g.captures == 1 && g.replays == 3 && g.eager_hooked == 0 && fg->captures[4] == 1,
       "device hooks: decode steps with a device hook are captured once and replayed (%lld captures, %lld replays, "
       "%lld eager)", (long long)g.captures, (long long)g.replays, (long long)g.eager_hooked);
    ok(w->st[2].calls - calls0 == 2 && fg->steer_execs - ex0 == 4,
       "device hooks: the hook was called twice (the eager step, the capture: recorded once) and its work ran at "
       "every one of the 4 steps (%d calls, %d runs)", w->st[2].calls - calls0, fg->steer_execs - ex0);
    ok(w->st[1].calls == 5 && fe->steer_execs == 5 && w->st[0].calls == 5,
       "device hooks: with graphs off the device entry runs at every step (%d), as the host twin does (%d)",
       w->st[1].calls, w->st[0].calls);
    ok(!w->failed && !w->mismatches, "device hooks: logits bit-identical to the CPU's host hook at every step%s%s",
       w->mismatches ? ": " : "", w->first);

    /* the contents of the hook's own device buffer change between replays: the graph reads them */
    srt_runner_graph_stats_get(w->r[2], &g0);
    set_scale(w, -2.5f);
    calls0 = w->st[2].calls;
    dsteps(w, s012, 3, 2);
    srt_runner_graph_stats_get(w->r[2], &g);
    ok(g.replays - g0.replays == 2 && g.captures == g0.captures && w->st[2].calls == calls0 && !w->mismatches,
       "device hooks: a new scale written to the hook's device buffer is used by the replays, no recapture, "
       "logits still equal to the host hook's with that scale");

    /* a host hook next to it: eager again, graphs dropped; removed: captured again */
    srt_hook_attach_opts hb = { .name = "bump" };
    int64_t bid[3];
    for (int l = 0; l < 3; l++)
        bid[l] = srt_hook_attach(w->reg[l], "model.layers.0.mlp", &bump_hook, &hb, &err);
    srt_runner_graph_stats_get(w->r[2], &g0);
    calls0 = w->st[2].calls;
    dsteps(w, s012, 3, 2);
    srt_runner_graph_stats_get(w->r[2], &g);
    ok(bid[2] > 0 && g.replays == g0.replays && g.eager_hooked - g0.eager_hooked == 2 && g.clears > g0.clears &&
       w->st[2].calls - calls0 == 2 && !w->mismatches,
       "device hooks: with a host hook also attached, decode steps run eagerly (the device entry called eagerly)");
    for (int l = 0; l < 3; l++)
        srt_hook_delete(w->reg[l], bid[l], &err);
    srt_runner_graph_stats_get(w->r[2], &g0);
    dsteps(w, s012, 3, 2);
    srt_runner_graph_stats_get(w->r[2], &g);
    ok(g.captures - g0.captures == 1 && g.replays - g0.replays == 1 && !w->mismatches,
       "device hooks: with the host hook gone the step is captured again, then replayed");

    /* a library built against hook ABI 1.0 loads and runs (as a host hook: eager) */
    {
        char spec[1024];
        snprintf(spec, sizeof spec, "{\"forward_hooks\": [{\"name\": \"old\", \"target_modules\": "
                 "[\"model.layers.0.mlp\"], \"hook_factory\": \"%s/libabi10.so:abi10_factory\", "
                 "\"config\": {\"value\": 0.25}}]}", HOOK_TEST_LIBDIR);
        int loaded = 1;
        for (int l = 0; l < 3; l++)
            if (srt_hook_registry_load_json(w->reg[l], spec, strlen(spec), "abi10.json", &err) != SRT_OK) {
                loaded = 0;
                tap_diag("%s", err.msg);
            }
        srt_runner_graph_stats_get(w->r[2], &g0);
        dsteps(w, s012, 3, 1);
        srt_runner_graph_stats_get(w->r[2], &g);
        ok(loaded && g.replays == g0.replays && g.eager_hooked - g0.eager_hooked == 1 && !w->mismatches && !w->failed,
           "device hooks: a hook library built against ABI 1.0 (1.0-sized hook objects) loads and runs eagerly "
           "next to the device hook");
        for (int l = 0; l < 3; l++)
            srt_hook_remove_spec(w->reg[l], "old", &err);
    }

    /* a device entry that fails under capture: logged, the step's eager result stands, eager until the hooks
     * change; never a crash */
    w->st[2].fail_capture = 1;
    readd(w, "steer");
    srt_runner_graph_stats_get(w->r[2], &g0);
    calls0 = w->st[2].calls;
    dsteps(w, s012, 3, 3);
    srt_runner_graph_stats_get(w->r[2], &g);
    ok(g.capture_failures - g0.capture_failures == 1 && g.replays == g0.replays && g.enabled &&
       g.eager_hooked - g0.eager_hooked == 2 && w->st[2].calls - calls0 == 4 && !w->failed && !w->mismatches,
       "device hooks: a capture the hook fails falls back to eager (1 failure, then eager steps with the hook "
       "still run: %lld eager, %d calls), logits unchanged", (long long)(g.eager_hooked - g0.eager_hooked),
       w->st[2].calls - calls0);
    w->st[2].fail_capture = 0;
    readd(w, "steer");
    srt_runner_graph_stats_get(w->r[2], &g0);
    dsteps(w, s012, 3, 2);
    dsteps(w, s0, 1, 2);
    srt_runner_graph_stats_get(w->r[2], &g);
    ok(g.captures - g0.captures == 2 && g.replays - g0.replays == 2 && !w->mismatches,
       "device hooks: once the hooks change, graphs are captured again (buckets 4 and 1)");

    /* the warm-up captures with device hooks attached */
    srt_runner_graphs_clear(w->r[2]);
    srt_runner_graph_stats_get(w->r[2], &g0);
    int wrc = srt_runner_graphs_warmup(w->r[2], w->kv[2], 4, &err);
    srt_runner_graph_stats_get(w->r[2], &g);
    ok(wrc == SRT_OK && g.captures - g0.captures == 3, "device hooks: the warm-up captures buckets 1, 2, 4 with the "
                                                       "device hook in them (%lld)", (long long)(g.captures - g0.captures));
    dsteps(w, s012, 3, 1);
    ok(!w->mismatches && !w->failed, "device hooks: logits bit-identical at every step (%d steps)%s%s", w->steps,
       w->mismatches ? ": " : "", w->first);
    ok(fg->violations == 0 && fe->violations == 0 && w->st[1].bad_stream == 0 && w->st[2].bad_stream == 0,
       "device hooks: the graph contract held, every call had the backend's stream and the views' rows "
       "(%d violations)%s%s", fg->violations + fe->violations, fg->violations ? ": " : "", fg->first);
out:
    for (int l = 0; l < 3; l++) {
        srt_hook_registry_free(w->reg[l]);
        if (bes[l] && w->st[l].vec) {
            f_free(bes[l], w->st[l].vec);
            f_free(bes[l], w->st[l].scale);
        } else {
            free(w->st[l].vec);
            free(w->st[l].scale);
        }
        srt_kv_pool_free(w->kv[l]);
        srt_runner_free(w->r[l]);
        srt_model_free(w->m[l]);
        free(w->logits[l]);
    }
    fake_fini(fe);
    fake_fini(fg);
    free(fe);
    free(fg);
    srt_backend_free(cpu);
    free(w);
}

/* ---------------------------------------------------------------- the fake checks itself */

typedef struct tbody {
    srt_backend *be;
    const srt_weight *table;
    const int32_t *ids;
    int64_t n;
    float *out;
} tbody;

static int embed_body(void *user, srt_err *err)
{
    tbody *t = user;
    t->be->ops->embed(t->be, t->table, t->ids, t->n, t->out);
    return SRT_OK;
}

static int upload_body(void *user, srt_err *err)
{
    tbody *t = user;
    int32_t z[4] = { 0 };
    return t->be->ops->upload(t->be, (void *)t->ids, z, sizeof z, err);
}

/* A runner that broke the contract would be caught: a replay reads the addresses it recorded
 * (a fresh buffer at replay goes unseen, and is flagged), ops sized for the real batch
 * instead of the bucket are flagged, forbidden calls inside a capture are flagged. */
static void fake_self_check(const char *path)
{
    srt_err err = { { 0 } };
    srt_model *m = NULL;
    if (srt_model_load(path, &m, &err) != SRT_OK) {
        ok(0, "self-check: model loads: %s", err.msg);
        return;
    }
    const srt_weight *table = srt_model_weight(m, "model.embed_tokens.weight");
    int64_t H = srt_model_config_of(m)->hidden_size;
    srt_backend *cpu = srt_cpu_backend_create(1, 0, &err);
    fake f;
    fake_init(&f, cpu, 8, 8, 64, 0);
    srt_backend *be = &f.base;
    int32_t *A = f_alloc(be, 16, &err), *B = f_alloc(be, 16, &err), *P = f_alloc(be, 16, &err);
    float *out = f_alloc(be, (size_t)4 * H * sizeof(float), &err), *want = malloc((size_t)4 * H * sizeof(float));
    int32_t idsA[4] = { 1, 2, 3, 4 }, idsA2[4] = { 9, 8, 7, 6 }, pos[4] = { 0, 0, 0, 0 }, outs[4] = { 0, 1, 2, 3 };
    int32_t start[5] = { 0, 1, 2, 3, 4 }, len[4] = { 1, 1, 1, 1 };
    const int32_t *ss[4] = { &outs[0], &outs[1], &outs[2], &outs[3] };
    srt_forward_batch b4 = { .n_tokens = 4, .token_ids = idsA, .positions = pos, .out_slots = outs, .n_seqs = 4,
                             .seq_start = start, .seq_len = len, .seq_slots = ss };
    tbody t = { be, table, A, 4, out };
    f_upload(be, A, idsA, 16, &err);
    f_upload(be, P, pos, 16, &err);
    f_begin(be, &b4, &err);
    memset(out, 0, (size_t)4 * H * sizeof(float));
    int rc = f_graph_capture(be, 4, embed_body, &t, &err);
    int untouched = 1;
    for (int64_t i = 0; i < 4 * H; i++)
        untouched &= out[i] == 0.0f;
    ok(rc == SRT_OK && f.n_captures == 1 && untouched, "self-check: capture records, executes nothing");
    f_download(be, want, out, 4, &err);
    /* the same address refreshed: the replay computes the new ids */
    f_upload(be, A, idsA2, 16, &err);
    f_begin(be, &b4, &err);
    rc = f_graph_replay(be, 4, &err);
    cpu->ops->embed(cpu, table, idsA2, 4, want);
    ok(rc == SRT_OK && f.violations == 0 && memcmp(want, out, (size_t)4 * H * sizeof(float)) == 0,
       "self-check: replay re-executes the recording on the refreshed inputs");
    f_download(be, want, out, 4, &err);
    /* a fresh buffer: the replay still reads A (stale ids), and says so */
    f_upload(be, B, idsA, 16, &err);
    f_begin(be, &b4, &err);
    f_graph_replay(be, 4, &err);
    cpu->ops->embed(cpu, table, idsA, 4, want);
    ok(f.violations == 1 && strstr(f.first, "token ids") && memcmp(want, out, (size_t)4 * H * sizeof(float)) != 0,
       "self-check: ids uploaded to another address are flagged, and the replay is wrong (%s)", f.first);
    f_download(be, want, out, 4, &err);
    /* an op sized for 3 real tokens in a graph of 4 */
    int v0 = f.violations;
    tbody t3 = { be, table, A, 3, out };
    f_upload(be, A, idsA, 16, &err);
    f_begin(be, &b4, &err);
    f_graph_capture(be, 4, embed_body, &t3, &err);
    ok(f.violations == v0 + 1, "self-check: an op of 3 tokens recorded in a graph of 4 is flagged");
    /* a replay after a batch of another size */
    v0 = f.violations;
    srt_forward_batch b2 = b4;
    b2.n_tokens = 2;
    b2.n_seqs = 2;
    int32_t start2[3] = { 0, 1, 2 };
    b2.seq_start = start2;
    f_upload(be, A, idsA, 16, &err);
    f_begin(be, &b2, &err);
    ok(f_graph_replay(be, 4, &err) == SRT_ERROR && f.violations == v0 + 1,
       "self-check: a replay of 4 after a batch of 2 is refused");
    /* an upload inside the body */
    v0 = f.violations;
    f_begin(be, &b4, &err);
    ok(f_graph_capture(be, 4, upload_body, &t, &err) == SRT_ERROR && f.violations == v0 + 1,
       "self-check: an upload inside a capture is refused and flagged");
    f_free(be, A);
    f_free(be, B);
    f_free(be, P);
    f_free(be, out);
    free(want);
    fake_fini(&f);
    srt_backend_free(cpu);
    srt_model_free(m);
}

/* SRT_GRAPHS=0 turns graphs off unless the caller insists; tp > 1 and the CPU backend have none. */
static void check_switches(const char *path)
{
    srt_err err = { { 0 } };
    srt_model *m = NULL;
    if (srt_model_load(path, &m, &err) != SRT_OK) {
        ok(0, "switches: model loads: %s", err.msg);
        return;
    }
    srt_backend *cpu = srt_cpu_backend_create(1, 0, &err);
    fake f;
    fake_init(&f, cpu, 8, 8, 64, 0);
    int en[5] = { -1, -1, -1, -1, -1 };
    struct { int graphs; const char *env; int fake; } cases[5] = {
        { SRT_RUNNER_GRAPHS_AUTO, NULL, 1 }, { SRT_RUNNER_GRAPHS_AUTO, "0", 1 }, { SRT_RUNNER_GRAPHS_ON, "0", 1 },
        { SRT_RUNNER_GRAPHS_OFF, NULL, 1 }, { SRT_RUNNER_GRAPHS_ON, NULL, 0 },
    };
    for (int i = 0; i < 5; i++) {
        srt_runner *r = NULL;
        srt_runner_opts o = { .max_batch_tokens = 8, .max_seqs = 4, .n_threads = 1, .graphs = cases[i].graphs,
                              .backend = cases[i].fake ? &f.base : NULL };
        if (cases[i].env)
            setenv("SRT_GRAPHS", cases[i].env, 1);
        else
            unsetenv("SRT_GRAPHS");
        if (srt_runner_create(m, &o, &r, &err) == SRT_OK) {
            srt_runner_graph_stats st;
            srt_runner_graph_stats_get(r, &st);
            en[i] = st.enabled;
        }
        srt_runner_free(r);
    }
    unsetenv("SRT_GRAPHS");
    ok(en[0] == 1 && en[1] == 0 && en[2] == 1 && en[3] == 0 && en[4] == 0,
       "switches: default on, SRT_GRAPHS=0 off, GRAPHS_ON wins over it, GRAPHS_OFF off, CPU backend none (%d %d %d %d %d)",
       en[0], en[1], en[2], en[3], en[4]);
    fake_fini(&f);
    srt_backend_free(cpu);
    srt_model_free(m);
}

int main(void)
{
    const char *mdir = getenv("SRT_MODEL_DIR") ? getenv("SRT_MODEL_DIR") : ".cache/models";
    const char *models[] = { "tiny-llama", "tiny-qwen2", "tiny-qwen3" };
    char path[512];
    unsetenv("SRT_GRAPHS");
    snprintf(path, sizeof path, "%s/%s", mdir, models[0]);
    fake_self_check(path);
    check_switches(path);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", mdir, models[i]);
        run_model(path, models[i]);
    }
    snprintf(path, sizeof path, "%s/%s", mdir, models[2]);
    run_growth(path);
    snprintf(path, sizeof path, "%s/%s", mdir, models[0]);
    check_device_hooks(path);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", mdir, models[i]);
        check_warmup(path);
    }
    int left = 0;
    for (int i = 0; i < MAXA; i++)
        left += allocs[i].p != NULL;
    ok(left == 0, "every backend allocation released (%d left)", left);
    return tap_done();
}
