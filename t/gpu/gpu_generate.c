/* gpu_generate: a model's forward over the backend ops table on the CPU or CUDA backend, for
 * the end-to-end comparison and the decode benchmarks of scripts/gpu-check.
 *
 * It walks the loaded model's own weight views (model/model_internal.h, read only) with the ops
 * the runner uses, in the runner's order, and follows the CUDA runner contract of
 * srt/backend_cuda.h (load_weight, device buffers, begin_batch, rope_cos_sin, graphs), so it
 * is also the executable specification of the runner changes that contract asks for.
 *
 *   gpu_generate MODEL --device cpu|cuda --ids 1,2,3 [--n 32] [--graphs]
 *       greedy continuation (--graphs, cuda: decode steps replay a CUDA graph); prints {"tokens":[...],"margins":[...],"top0":[[id,logit],...]}
 *       (margins: top1 - top2 logit at each step; top0: the first step's 16 largest logits)
 *   gpu_generate MODEL --device cuda --bench --batch B [--prompt P] [--n N] [--no-graphs]
 *       B sequences of P random tokens, one prefill, then N decode steps (greedy, all B
 *       sequences each step, CUDA graphs unless --no-graphs); prints a JSON line with decode
 *       tokens/s, bytes read per step and the fraction of the HBM roofline (--hbm GB/s, 4800).
 *   gpu_generate MODEL --device cuda --runner --batch B [--n N]
 *       the serving runner (src/model/runner.c, srt_runner_forward) twice over the same workload
 *       of B sequences joining and leaving (decode batches crossing graph buckets): decode graphs
 *       on, then off; prints a JSON line (rows compared, bit-identical rows, max |d logit|, graph
 *       captures / replays, decode tok/s of both) and exits 1 unless they match (see run_runner).
 *       KV bf16 unless --kv says otherwise.
 *   common: --kv f16|bf16|f32 (default f16 on cuda, f32 on cpu), --mem FRACTION (0.9)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model_internal.h"
#include "srt/backend.h"
#include "srt/backend_cuda.h"

typedef struct eng {
    srt_model   *m;
    srt_backend *be;
    int          cuda;
    srt_dtype    kvt;
    int32_t      max_tok, max_seqs, n_slots;
    int32_t      H, F, nh, nkv, hd, V, L;
    /* backend memory */
    float   *x, *xn, *q, *k, *v, *q_raw, *k_raw, *attn, *proj, *gate, *up, *act, *cs, *rows, *logits;
    int32_t *ids, *pos, *rowidx;
    void   **kc, **vc;
    /* host copies of the converted biases, keyed by the backend as f32 arrays */
    float  **bias_owned;
    int      n_bias_owned;
    const srt_forward_batch *b;   /* the step in flight */
    int32_t  n_rows;
} eng;

static void die(const char *what, const srt_err *err)
{
    fprintf(stderr, "gpu_generate: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

static void *balloc(eng *e, size_t bytes)
{
    srt_err err = { { 0 } };
    void *p = srt_backend_alloc(e->be, bytes ? bytes : 4, &err);
    if (!p)
        die("alloc", &err);
    return p;
}

static void bup(eng *e, void *dst, const void *src, size_t bytes)
{
    srt_err err = { { 0 } };
    if (srt_backend_upload(e->be, dst, src, bytes, &err) != SRT_OK)
        die("upload", &err);
}

static void bdown(eng *e, void *dst, const void *src, size_t bytes)
{
    srt_err err = { { 0 } };
    if (srt_backend_download(e->be, dst, src, bytes, &err) != SRT_OK)
        die("download", &err);
}

static void load(eng *e, const srt_weight *w)
{
    srt_err err = { { 0 } };
    if (e->be->ops->load_weight && e->be->ops->load_weight(e->be, w, &err) != SRT_OK)
        die("load_weight", &err);
}

static void load_array(eng *e, const float *p, int64_t n)
{
    srt_weight w = { SRT_F32, 1, n, p, (size_t)n * sizeof(float) };
    load(e, &w);
}

static void reserve(eng *e, const srt_weight *w, int64_t n)
{
    srt_err err = { { 0 } };
    if (e->be->ops->reserve_matmul(e->be, w, n, &err) != SRT_OK)
        die("reserve_matmul", &err);
}

static void setup(eng *e, const char *path, const char *device, srt_dtype kvt, double mem, int max_tok, int max_seqs,
                  int n_slots)
{
    srt_err err = { { 0 } };
    if (srt_model_load(path, &e->m, &err) != SRT_OK)
        die("model load", &err);
    const srt_model_config *c = &e->m->cfg;
    e->cuda = strcmp(device, "cuda") == 0;
    e->be = e->cuda ? srt_cuda_backend_create(0, mem, &err) : srt_cpu_backend_create(0, 1, &err);
    if (!e->be)
        die("backend", &err);
    e->kvt = kvt;
    e->max_tok = max_tok;
    e->max_seqs = max_seqs;
    e->n_slots = n_slots;
    e->H = c->hidden_size;
    e->F = c->intermediate_size;
    e->nh = c->n_heads;
    e->nkv = c->n_kv_heads;
    e->hd = c->head_dim;
    e->V = c->vocab_size;
    e->L = c->n_layers;
    srt_model *m = e->m;
    load(e, &m->embed);
    load(e, &m->final_norm.w);
    reserve(e, &m->lm_head.w, max_tok);
    load_array(e, m->inv_freq, e->hd / 2);
    for (int l = 0; l < e->L; l++) {
        srt_layer *ly = &m->layers[l];
        load(e, &ly->input_norm.w);
        load(e, &ly->post_attn_norm.w);
        if (c->arch == SRT_ARCH_QWEN3) {
            load(e, &ly->q_norm.w);
            load(e, &ly->k_norm.w);
        }
        srt_linear *ls[] = { &ly->q, &ly->k, &ly->v, &ly->o, &ly->gate, &ly->up, &ly->down };
        for (int i = 0; i < 7; i++) {
            reserve(e, &ls[i]->w, max_tok);
            if (ls[i]->bias)
                load_array(e, ls[i]->bias, ls[i]->w.rows);
        }
    }
    if (m->lm_head.bias)
        load_array(e, m->lm_head.bias, e->V);
    size_t T = (size_t)max_tok, QD = (size_t)e->nh * e->hd, KD = (size_t)e->nkv * e->hd;
    e->x = balloc(e, T * e->H * 4);
    e->xn = balloc(e, T * e->H * 4);
    e->proj = balloc(e, T * e->H * 4);
    e->q = balloc(e, T * QD * 4);
    e->q_raw = balloc(e, T * QD * 4);
    e->k = balloc(e, T * KD * 4);
    e->k_raw = balloc(e, T * KD * 4);
    e->v = balloc(e, T * KD * 4);
    e->attn = balloc(e, T * QD * 4);
    e->gate = balloc(e, T * e->F * 4);
    e->up = balloc(e, T * e->F * 4);
    e->act = balloc(e, T * e->F * 4);
    e->cs = balloc(e, T * 2 * e->hd * 4);
    e->rows = balloc(e, (size_t)max_seqs * e->H * 4);
    e->logits = balloc(e, (size_t)(max_tok > max_seqs ? max_tok : max_seqs) * e->V * 4);
    e->ids = balloc(e, T * 4);
    e->pos = balloc(e, T * 4);
    e->rowidx = balloc(e, (size_t)max_seqs * 4);
    e->kc = calloc(e->L, sizeof *e->kc);
    e->vc = calloc(e->L, sizeof *e->vc);
    size_t kvb = (size_t)n_slots * KD * (kvt == SRT_F32 ? 4 : 2);
    for (int l = 0; l < e->L; l++) {
        e->kc[l] = balloc(e, kvb);
        e->vc[l] = balloc(e, kvb);
    }
}

static void linear(eng *e, const srt_linear *l, const float *x, int64_t T, float *y)
{
    e->be->ops->matmul(e->be, &l->w, l->bias, x, T, y);
}

/* The ops of one step after the inputs are in place (ids, pos uploaded; batch announced);
 * logits of every token (n_rows = T, decode) or of the gathered rows. Graph-capturable. */
static int forward_ops(eng *e, int32_t T, int gather)
{
    const srt_backend_ops *o = e->be->ops;
    srt_backend *be = e->be;
    srt_model *m = e->m;
    const srt_model_config *c = &m->cfg;
    int64_t H = e->H, F = e->F;
    int qwen3 = c->arch == SRT_ARCH_QWEN3;
    o->embed(be, &m->embed, e->ids, T, e->x);
    if (e->cuda)
        o->rope_cos_sin(be, e->pos, T, m->inv_freq, e->hd, e->cs);
    for (int l = 0; l < e->L; l++) {
        const srt_layer *ly = &m->layers[l];
        if (l == 0 || !o->add_rmsnorm)   /* else fused into the previous layer's last add */
            o->rmsnorm(be, e->x, &ly->input_norm.w, c->rms_norm_eps, T, H, e->xn);
        linear(e, &ly->q, e->xn, T, qwen3 ? e->q_raw : e->q);
        linear(e, &ly->k, e->xn, T, qwen3 ? e->k_raw : e->k);
        linear(e, &ly->v, e->xn, T, e->v);
        if (qwen3) {
            o->rmsnorm(be, e->q_raw, &ly->q_norm.w, c->rms_norm_eps, (int64_t)T * e->nh, e->hd, e->q);
            o->rmsnorm(be, e->k_raw, &ly->k_norm.w, c->rms_norm_eps, (int64_t)T * e->nkv, e->hd, e->k);
        }
        o->rope(be, e->q, T, e->nh, e->hd, e->cs);
        o->rope(be, e->k, T, e->nkv, e->hd, e->cs);
        o->kv_store(be, e->b, e->k, e->v, e->kc[l], e->vc[l], e->kvt, e->nkv * e->hd);
        srt_attn_args aa = { .batch = e->b, .q = e->q, .out = e->attn, .k_cache = e->kc[l], .v_cache = e->vc[l],
                             .kv_dtype = e->kvt, .n_heads = e->nh, .n_kv_heads = e->nkv, .head_dim = e->hd,
                             .scale = 1.0f / sqrtf((float)e->hd) };
        o->attention(be, &aa);
        linear(e, &ly->o, e->attn, T, e->proj);
        if (o->add_rmsnorm)
            o->add_rmsnorm(be, e->x, e->x, e->proj, &ly->post_attn_norm.w, c->rms_norm_eps, T, H, e->xn);
        else {
            o->add(be, e->x, e->proj, T * H);
            o->rmsnorm(be, e->x, &ly->post_attn_norm.w, c->rms_norm_eps, T, H, e->xn);
        }
        linear(e, &ly->gate, e->xn, T, e->gate);
        linear(e, &ly->up, e->xn, T, e->up);
        o->silu_mul(be, e->gate, e->up, T * F, e->act);
        linear(e, &ly->down, e->act, T, e->proj);
        const srt_weight *next = l + 1 < e->L ? &m->layers[l + 1].input_norm.w : &m->final_norm.w;
        if (o->add_rmsnorm)
            o->add_rmsnorm(be, e->x, e->x, e->proj, next, c->rms_norm_eps, T, H, e->xn);
        else
            o->add(be, e->x, e->proj, T * H);
    }
    if (!o->add_rmsnorm)
        o->rmsnorm(be, e->x, &m->final_norm.w, c->rms_norm_eps, T, H, e->xn);
    if (gather) {
        o->gather_rows(be, e->rows, e->xn, e->rowidx, e->n_rows, H);
        linear(e, &m->lm_head, e->rows, e->n_rows, e->logits);
    } else
        linear(e, &m->lm_head, e->xn, T, e->logits);
    return SRT_OK;
}

/* host-side preparation of one step, then the ops eagerly */
static void step_inputs(eng *e, const srt_forward_batch *b)
{
    srt_err err = { { 0 } };
    e->b = b;
    bup(e, e->ids, b->token_ids, (size_t)b->n_tokens * 4);
    bup(e, e->pos, b->positions, (size_t)b->n_tokens * 4);
    if (e->cuda) {
        if (e->be->ops->begin_batch(e->be, b, &err) != SRT_OK)
            die("begin_batch", &err);
    } else {   /* the runner's rotary module on the host */
        int32_t hd = e->hd, half = hd / 2;
        for (int32_t t = 0; t < b->n_tokens; t++)
            for (int32_t i = 0; i < half; i++) {
                float f = (float)b->positions[t] * e->m->inv_freq[i];
                float *co = e->cs + (size_t)t * 2 * hd, *si = co + hd;
                co[i] = co[i + half] = cosf(f);
                si[i] = si[i + half] = sinf(f);
            }
    }
}

static void forward_gather_last(eng *e, const srt_forward_batch *b)
{
    int32_t *rows = malloc((size_t)b->n_seqs * 4);
    for (int32_t s = 0; s < b->n_seqs; s++)
        rows[s] = b->seq_start[s + 1] - 1;
    e->n_rows = b->n_seqs;
    step_inputs(e, b);
    if (e->cuda) {
        bup(e, e->rowidx, rows, (size_t)b->n_seqs * 4);
        forward_ops(e, b->n_tokens, 1);
    } else {
        forward_ops(e, b->n_tokens, 0);   /* CPU: logits of every token, rows picked on the host */
        for (int32_t s = 0; s < b->n_seqs; s++)
            memmove(e->logits + (size_t)s * e->V, e->logits + (size_t)rows[s] * e->V, (size_t)e->V * 4);
    }
    free(rows);
}

static int argmax2(const float *l, int V, float *margin)
{
    int best = 0, second = -1;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best]) {
            second = best;
            best = i;
        } else if (second < 0 || l[i] > l[second])
            second = i;
    if (margin)
        *margin = second >= 0 ? l[best] - l[second] : INFINITY;
    return best;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- greedy continuation of one prompt ---- */
typedef struct gbody {
    eng *e;
    int32_t bs;
} gbody;

static int body_fn(void *user, srt_err *err)
{
    gbody *g = user;
    return forward_ops(g->e, g->bs, 0);
}

/* graphs: decode steps (one token) replay a graph of batch 1 captured at the first one */
static void run_greedy(eng *e, const int32_t *prompt, int n_prompt, int n_new, int graphs)
{
    int captured = 0;
    gbody g = { e, 1 };
    srt_err err = { { 0 } };
    int total = n_prompt + n_new;
    int32_t *slots = malloc(total * 4), *ctx = malloc(total * 4), *pos = malloc(total * 4);
    for (int i = 0; i < total; i++)
        slots[i] = i;   /* slot = position */
    memcpy(ctx, prompt, n_prompt * 4);
    float *lg = malloc((size_t)e->V * 4);
    printf("{\"tokens\":[");
    int n = n_prompt;
    float margins[4096], top_val[16];
    int top_ids[16];
    for (int step = 0; step < n_new; step++) {
        int32_t t0 = step == 0 ? 0 : n - 1, nt = step == 0 ? n : 1;
        for (int i = 0; i < nt; i++)
            pos[i] = t0 + i;
        int32_t ss[2] = { 0, nt }, len = n;
        const int32_t *sl[1] = { slots };
        srt_forward_batch b = { .n_tokens = nt, .token_ids = ctx + t0, .positions = pos, .out_slots = slots + t0,
                                .n_seqs = 1, .seq_start = ss, .seq_len = &len, .seq_slots = sl };
        if (graphs && e->cuda && nt == 1) {
            step_inputs(e, &b);
            if (!captured) {
                forward_ops(e, 1, 0);   /* eager once, then capture */
                if (srt_cuda_graph_capture(e->be, 1, body_fn, &g, &err) != SRT_OK)
                    die("graph capture", &err);
                captured = 1;
            }
            if (srt_cuda_graph_replay(e->be, 1, &err) != SRT_OK)
                die("graph replay", &err);
        } else
            forward_gather_last(e, &b);
        bdown(e, lg, e->logits, (size_t)e->V * 4);
        int tok = argmax2(lg, e->V, &margins[step < 4096 ? step : 4095]);
        if (step == 0) {   /* the first step's 16 best logits, for the logit comparison */
            char *used = calloc(e->V, 1);
            for (int k = 0; k < 16 && k < e->V; k++) {
                int bi = -1;
                for (int i = 0; i < e->V; i++)
                    if (!used[i] && (bi < 0 || lg[i] > lg[bi]))
                        bi = i;
                used[bi] = 1;
                top_ids[k] = bi;
                top_val[k] = lg[bi];
            }
            free(used);
        }
        printf("%s%d", step ? "," : "", tok);
        ctx[n++] = tok;
    }
    printf("],\"margins\":[");
    for (int i = 0; i < n_new && i < 4096; i++)
        printf("%s%.5f", i ? "," : "", margins[i]);
    printf("],\"top0\":[");
    for (int k = 0; k < 16 && k < e->V; k++)
        printf("%s[%d,%.6f]", k ? "," : "", top_ids[k], top_val[k]);
    printf("]}\n");
    free(lg);
    free(slots);
    free(ctx);
    free(pos);
}

/* ---- decode benchmark ---- */
static size_t weight_bytes_bf16(const srt_weight *w)
{
    return (size_t)w->rows * (size_t)w->cols * 2;
}

static void run_bench(eng *e, int B, int P, int N, int graphs, double hbm_gbs)
{
    srt_err err = { { 0 } };
    int ctx_max = P + N + 1;
    int32_t **slots = malloc(B * sizeof *slots);
    for (int s = 0; s < B; s++) {
        slots[s] = malloc(ctx_max * 4);
        for (int j = 0; j < ctx_max; j++)
            slots[s][j] = s * ctx_max + j;
    }
    /* prefill, one sequence per step (chunk = P) */
    int32_t *ptoks = malloc(P * 4), *ppos = malloc(P * 4);
    for (int s = 0; s < B; s++) {
        for (int j = 0; j < P; j++) {
            ptoks[j] = (int32_t)((s * 7919 + j * 104729) % e->V);
            ppos[j] = j;
        }
        int32_t ss[2] = { 0, P }, len = P;
        const int32_t *sl[1] = { slots[s] };
        srt_forward_batch b = { .n_tokens = P, .token_ids = ptoks, .positions = ppos, .out_slots = slots[s],
                                .n_seqs = 1, .seq_start = ss, .seq_len = &len, .seq_slots = sl };
        forward_gather_last(e, &b);
    }
    if (e->be->ops->sync && e->be->ops->sync(e->be, &err) != SRT_OK)
        die("prefill", &err);
    /* decode: bs = graph bucket, padded sequences write nothing */
    int bs = e->cuda && graphs ? srt_cuda_graph_bucket(B) : B;
    if (bs < 0)
        bs = B;
    int32_t *ids = calloc(bs, 4), *pos = malloc(bs * 4), *outs = malloc(bs * 4), *ss = malloc((bs + 1) * 4);
    int32_t *len = malloc(bs * 4), *next = malloc(B * 4);
    const int32_t **sl = malloc(bs * sizeof *sl);
    float *lg = malloc((size_t)e->V * 4);
    for (int s = 0; s < B; s++)
        next[s] = (int32_t)((s * 31) % e->V);
    double t_start = 0;
    int captured = 0;
    gbody g = { e, bs };
    int32_t *host_ids = malloc(bs * 4);
    for (int step = 0; step <= N; step++) {   /* step 0: warm-up, not timed */
        if (step == 1) {
            if (e->be->ops->sync)
                e->be->ops->sync(e->be, &err);
            t_start = now();
        }
        for (int s = 0; s < bs; s++) {
            ss[s] = s;
            if (s < B) {
                int p = P + step;
                ids[s] = next[s];
                pos[s] = p;
                outs[s] = slots[s][p];
                len[s] = p + 1;
                sl[s] = slots[s];
            } else {   /* padding */
                ids[s] = 0;
                pos[s] = -1;
                outs[s] = -1;
                len[s] = 0;
                sl[s] = slots[0];
            }
        }
        ss[bs] = bs;
        srt_forward_batch b = { .n_tokens = bs, .token_ids = ids, .positions = pos, .out_slots = outs,
                                .n_seqs = bs, .seq_start = ss, .seq_len = len,
                                .seq_slots = (const int32_t *const *)sl };
        step_inputs(e, &b);
        if (e->cuda && graphs) {
            if (!captured) {
                forward_ops(e, bs, 0);   /* eager once: plans made, kernels loaded */
                if (srt_cuda_graph_capture(e->be, bs, body_fn, &g, &err) != SRT_OK)
                    die("graph capture", &err);
                captured = 1;
            }
            if (srt_cuda_graph_replay(e->be, bs, &err) != SRT_OK)
                die("graph replay", &err);
        } else
            forward_ops(e, bs, 0);
        /* greedy on the device: logits rows of the real sequences */
        if (e->cuda) {
            srt_cuda_sample_params *sp = calloc(B, sizeof *sp);
            for (int s = 0; s < B; s++)
                sp[s].repetition_penalty = 1.0f;
            if (srt_cuda_sample(e->be, e->logits, B, e->V, sp, NULL, host_ids, &err) != SRT_OK)
                die("sample", &err);
            free(sp);
            memcpy(next, host_ids, B * 4);
        } else
            for (int s = 0; s < B; s++) {
                memcpy(lg, e->logits + (size_t)s * e->V, (size_t)e->V * 4);
                next[s] = argmax2(lg, e->V, NULL);
            }
    }
    double dt = now() - t_start;
    /* bytes read per decode step: every GEMM weight in bf16 once, one embedding row per
     * sequence, the norms, and each sequence's K and V over all layers */
    size_t wb = 0;
    const srt_model *m = e->m;
    for (int l = 0; l < e->L; l++) {
        const srt_layer *ly = &m->layers[l];
        const srt_linear *ls[] = { &ly->q, &ly->k, &ly->v, &ly->o, &ly->gate, &ly->up, &ly->down };
        for (int i = 0; i < 7; i++)
            wb += weight_bytes_bf16(&ls[i]->w);
        wb += (size_t)2 * e->H * 4;
    }
    wb += weight_bytes_bf16(&m->lm_head.w) + (size_t)B * e->H * 2;
    double avg_ctx = P + (N + 1) / 2.0;
    size_t kvb = (size_t)(avg_ctx * B) * 2 * e->L * (size_t)e->nkv * e->hd * (e->kvt == SRT_F32 ? 4 : 2);
    double step_s = dt / N, bytes = (double)wb + (double)kvb;
    double roof_s = bytes / (hbm_gbs * 1e9);
    printf("{\"batch\":%d,\"graph_bs\":%d,\"prompt\":%d,\"new\":%d,\"graphs\":%d,\"decode_tok_s\":%.2f,"
           "\"step_ms\":%.4f,\"bytes_per_step\":%.0f,\"weight_bytes\":%zu,\"kv_bytes\":%zu,"
           "\"roofline_step_ms\":%.4f,\"roofline_fraction\":%.4f}\n",
           B, bs, P, N, e->cuda && graphs, B / step_s, step_s * 1e3, bytes, wb, kvb, roof_s * 1e3, roof_s / step_s);
    for (int s = 0; s < B; s++)
        free(slots[s]);
    free(slots);
    free(ptoks);
    free(ppos);
    free(ids);
    free(pos);
    free(outs);
    free(ss);
    free(len);
    free(next);
    free(sl);
    free(lg);
    free(host_ids);
}

/* ---- the serving runner (src/model/runner.c) on the device: decode graphs vs eager ----
 * B sequences (prompts of 2..10 tokens), the second half joining a quarter of the way in, a
 * third of them leaving at a quarter and another third at half way, so decode batches cross
 * graph buckets both ways; greedy on each pass's own logits. Two passes of the same workload
 * through srt_runner_forward: decode graphs on, then off (SRT_RUNNER_GRAPHS_ON / _OFF). */
typedef struct rpass {
    float   *logits;   /* [steps][B][V] (rows of sequences not in a step are left 0) */
    float   *margins;  /* [steps][B] */
    int32_t *tokens;   /* [steps][B], -1: the sequence was not in the step */
    int32_t *kind;     /* [steps]: 1 decode, 0 prefill */
    double   decode_s;
    int64_t  decode_tokens;
    srt_runner_graph_stats st;
} rpass;

static int runner_prompt_len(int k) { return 2 + (k * 7) % 9; }

static void runner_pass(srt_model *m, int cuda, int graphs, int B, int N, srt_dtype kvt, double mem, rpass *o)
{
    const srt_model_config *c = srt_model_config_of(m);
    int V = c->vocab_size, steps = N + 2, late = B / 2, ctx = 10 + N + 2;
    int32_t max_tok = 0;
    for (int k = 0; k < B; k++)
        max_tok += runner_prompt_len(k);
    srt_err err = { { 0 } };
    srt_runner *r = NULL;
    srt_kv_pool *kv = NULL;
    srt_runner_opts ro = { .max_batch_tokens = max_tok > B ? max_tok : B, .max_seqs = B, .n_threads = 0,
                           .device = cuda ? SRT_RUNNER_CUDA : SRT_RUNNER_CPU, .mem_fraction = mem,
                           .graphs = graphs ? SRT_RUNNER_GRAPHS_ON : SRT_RUNNER_GRAPHS_OFF };
    if (srt_runner_create(m, &ro, &r, &err) != SRT_OK ||
        srt_kv_pool_create_on(c, 1, B * ctx, cuda ? kvt : SRT_F32, srt_runner_backend(r), &kv, &err) != SRT_OK)
        die("runner", &err);
    o->logits = calloc((size_t)steps * B * V, sizeof(float));
    o->margins = calloc((size_t)steps * B, sizeof(float));
    o->tokens = malloc((size_t)steps * B * sizeof(int32_t));
    o->kind = calloc((size_t)steps, sizeof(int32_t));
    int32_t *hist = calloc((size_t)B * ctx, sizeof(int32_t)), *len = calloc(B, sizeof(int32_t));
    int32_t *slots = malloc((size_t)B * ctx * sizeof(int32_t));
    int32_t *tok = malloc((size_t)max_tok * 4 + (size_t)B * 4), *pos = malloc((size_t)max_tok * 4 + (size_t)B * 4);
    int32_t *outs = malloc((size_t)max_tok * 4 + (size_t)B * 4), *start = malloc(((size_t)B + 1) * 4);
    int32_t *slen = malloc((size_t)B * 4), *who = malloc((size_t)B * 4);
    const int32_t **ss = malloc((size_t)B * sizeof *ss);
    float *lg = malloc((size_t)B * V * sizeof(float));
    for (int k = 0; k < B; k++) {
        for (int j = 0; j < ctx; j++)
            slots[(size_t)k * ctx + j] = k * ctx + j;
        for (int j = 0; j < runner_prompt_len(k); j++)
            hist[(size_t)k * ctx + j] = (k * 31 + j * 17 + 1) % V;
    }
    for (size_t i = 0; i < (size_t)steps * B; i++)
        o->tokens[i] = -1;
    /* step 0: the first half prefills; step N/4 + 1: the late half prefills; others decode */
    int join_step = N / 4 + 1;
    for (int st = 0; st < steps; st++) {
        int prefill = st == 0 || st == join_step, n = 0, T = 0;
        for (int k = 0; k < B; k++) {
            int joined = k < late ? 1 : st >= join_step;
            int gone = (k % 3 == 1 && st > N / 4 + 2) || (k % 3 == 2 && k >= late && st > N / 2 + 2);
            if (!joined || gone || (prefill && len[k] > 0) || (!prefill && len[k] == 0))
                continue;
            int nn = prefill ? runner_prompt_len(k) : 1;
            start[n] = T;
            for (int j = 0; j < nn; j++, T++) {
                tok[T] = hist[(size_t)k * ctx + len[k] + j];
                pos[T] = len[k] + j;
                outs[T] = slots[(size_t)k * ctx + len[k] + j];
            }
            slen[n] = len[k] + nn;
            ss[n] = slots + (size_t)k * ctx;
            who[n++] = k;
        }
        if (n == 0)
            continue;
        start[n] = T;
        srt_forward_batch b = { .n_tokens = T, .token_ids = tok, .positions = pos, .out_slots = outs, .n_seqs = n,
                                .seq_start = start, .seq_len = slen, .seq_slots = ss,
                                .forward_mode = prefill ? SRT_FORWARD_PREFILL : SRT_FORWARD_DECODE };
        double t0 = now();
        if (srt_runner_forward(r, kv, &b, lg, &err) != SRT_OK)
            die("runner forward", &err);
        if (!prefill) {
            o->decode_s += now() - t0;
            o->decode_tokens += n;
        }
        o->kind[st] = !prefill;
        for (int i = 0; i < n; i++) {
            int k = who[i];
            float *row = o->logits + ((size_t)st * B + k) * V;
            memcpy(row, lg + (size_t)i * V, (size_t)V * sizeof(float));
            int t = argmax2(row, V, &o->margins[(size_t)st * B + k]);
            o->tokens[(size_t)st * B + k] = t;
            len[k] = slen[i];
            hist[(size_t)k * ctx + len[k]] = t;
        }
    }
    srt_runner_graph_stats_get(r, &o->st);
    srt_kv_pool_free(kv);
    srt_runner_free(r);
    free(hist), free(len), free(slots), free(tok), free(pos), free(outs), free(start), free(slen), free(who);
    free(ss), free(lg);
}

/* Prints one JSON line; exits 1 when the graph pass does not match the eager pass: rows must be
 * bit-identical as long as every decode step so far had exactly a bucket's size (the same GEMM
 * shapes both ways, so the same kernels); from the first padded step on (bs > n: other GEMM
 * shapes, maybe other cuBLASLt kernels, and KV written by them) within tol, and greedy tokens
 * equal until a step where the eager top-2 margin is below 2 * tol. */
static int run_runner(const char *path, int cuda, int B, int N, srt_dtype kvt, double mem)
{
    srt_model *m = NULL;
    srt_err err = { { 0 } };
    if (srt_model_load(path, &m, &err) != SRT_OK)
        die("load", &err);
    int V = srt_model_config_of(m)->vocab_size, steps = N + 2;
    rpass g, e;
    memset(&g, 0, sizeof g);
    memset(&e, 0, sizeof e);
    runner_pass(m, cuda, 1, B, N, kvt, mem, &g);
    runner_pass(m, cuda, 0, B, N, kvt, mem, &e);
    const float tol = 0.05f;
    int64_t rows = 0, exact_rows = 0, bucket_rows = 0, bucket_exact = 0;
    double worst = 0;
    int diverged = 0, bad_diverge = 0;
    char *gone = calloc(B, 1);
    int same_shapes = 1;   /* every decode step so far had a bucket's size: no padding anywhere yet */
    for (int st = 0; st < steps; st++) {
        int n = 0;
        for (int k = 0; k < B; k++)
            n += e.tokens[(size_t)st * B + k] >= 0;
        if (e.kind[st] && srt_cuda_graph_bucket(n) != n)
            same_shapes = 0;
        int bucket = same_shapes;
        for (int k = 0; k < B; k++) {
            size_t i = (size_t)st * B + k;
            if (gone[k] || e.tokens[i] < 0 || g.tokens[i] < 0)
                continue;
            const float *a = g.logits + i * V, *b = e.logits + i * V;
            int same = memcmp(a, b, (size_t)V * sizeof(float)) == 0;
            for (int v = 0; v < V; v++) {
                double d = fabs((double)a[v] - b[v]);
                if (!(d <= worst))
                    worst = isnan(d) ? INFINITY : d;
            }
            rows++;
            exact_rows += same;
            bucket_rows += bucket;
            bucket_exact += bucket && same;
            if (g.tokens[i] != e.tokens[i]) {   /* contexts differ from here on */
                gone[k] = 1;
                diverged++;
                bad_diverge += e.margins[i] >= 2 * tol;
            }
        }
    }
    int ok = !cuda || (g.st.enabled && g.st.captures > 0 && g.st.replays > 0 && g.st.capture_failures == 0);
    ok = ok && bucket_exact == bucket_rows && worst <= tol && bad_diverge == 0 && !e.st.enabled;
    printf("{\"batch\":%d,\"steps\":%d,\"rows\":%lld,\"identical_rows\":%lld,\"bucket_rows\":%lld,"
           "\"bucket_identical\":%lld,\"max_diff\":%.6g,\"diverged\":%d,\"bad_diverge\":%d,"
           "\"graphs\":{\"enabled\":%d,\"captures\":%lld,\"replays\":%lld,\"capture_failures\":%lld,"
           "\"decode_tok_s\":%.1f},\"eager\":{\"decode_tok_s\":%.1f},\"ok\":%s}\n",
           B, N, (long long)rows, (long long)exact_rows, (long long)bucket_rows, (long long)bucket_exact, worst,
           diverged, bad_diverge, g.st.enabled, (long long)g.st.captures, (long long)g.st.replays,
           (long long)g.st.capture_failures, g.decode_tokens / (g.decode_s > 0 ? g.decode_s : 1),
           e.decode_tokens / (e.decode_s > 0 ? e.decode_s : 1), ok ? "true" : "false");
    rpass *ps[2] = { &g, &e };
    for (int i = 0; i < 2; i++)
        free(ps[i]->logits), free(ps[i]->margins), free(ps[i]->tokens), free(ps[i]->kind);
    free(gone);
    srt_model_free(m);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *device = "cpu", *ids_arg = NULL, *kv = NULL;
    int n_new = 32, bench = 0, B = 1, P = 128, graphs = 1, graphs_greedy = 0, runner = 0;
    double mem = 0.9, hbm = 4800;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--device") && v) device = argv[++i];
        else if (!strcmp(a, "--ids") && v) ids_arg = argv[++i];
        else if (!strcmp(a, "--n") && v) n_new = atoi(argv[++i]);
        else if (!strcmp(a, "--kv") && v) kv = argv[++i];
        else if (!strcmp(a, "--mem") && v) mem = atof(argv[++i]);
        else if (!strcmp(a, "--batch") && v) B = atoi(argv[++i]);
        else if (!strcmp(a, "--prompt") && v) P = atoi(argv[++i]);
        else if (!strcmp(a, "--hbm") && v) hbm = atof(argv[++i]);
        else if (!strcmp(a, "--bench")) bench = 1;
        else if (!strcmp(a, "--runner")) runner = 1;
        else if (!strcmp(a, "--no-graphs")) graphs = 0;
        else if (!strcmp(a, "--graphs")) graphs_greedy = 1;
        else if (a[0] != '-' && !model) model = a;
        else {
            fprintf(stderr, "gpu_generate: unknown or incomplete argument %s\n", a);
            return 2;
        }
    }
    if (model && runner && B >= 1 && B <= 256 && n_new >= 4 && n_new <= 4000) {
        int is_cuda = strcmp(device, "cuda") == 0;
        srt_dtype kvt = !kv ? SRT_BF16 : !strcmp(kv, "f32") ? SRT_F32 : !strcmp(kv, "f16") ? SRT_F16 : SRT_BF16;
        return run_runner(model, is_cuda, B, n_new, kvt, mem);
    }
    if (!model || (!bench && !ids_arg) || n_new < 1 || n_new > 4000 || B < 1 || B > 4096 || P < 1) {
        fprintf(stderr, "usage: gpu_generate MODEL --device cpu|cuda (--ids 1,2,3 [--n 32] | --bench --batch B "
                        "[--prompt P] [--n N] [--no-graphs] | --runner --batch B [--n N>=4]) [--kv f16|bf16|f32] [--mem F]\n");
        return 2;
    }
    int is_cuda = strcmp(device, "cuda") == 0;
    srt_dtype kvt = is_cuda ? SRT_F16 : SRT_F32;
    if (kv)
        kvt = !strcmp(kv, "f32") ? SRT_F32 : !strcmp(kv, "bf16") ? SRT_BF16 : SRT_F16;
    eng e;
    memset(&e, 0, sizeof e);
    if (bench) {
        int bs = srt_cuda_graph_bucket(B) > 0 ? srt_cuda_graph_bucket(B) : B;
        int max_tok = P > bs ? P : bs;
        setup(&e, model, device, kvt, mem, max_tok, max_tok, B * (P + n_new + 1));
        run_bench(&e, B, P, n_new, graphs, hbm);
    } else {
        int32_t prompt[4096];
        int n_prompt = 0;
        for (const char *p = ids_arg; *p && n_prompt < 4096;) {
            prompt[n_prompt++] = (int32_t)strtol(p, (char **)&p, 10);
            if (*p == ',')
                p++;
        }
        setup(&e, model, device, kvt, mem, n_prompt, 1, n_prompt + n_new + 1);
        run_greedy(&e, prompt, n_prompt, n_new, graphs_greedy);
    }
    srt_backend_free(e.be);
    srt_model_free(e.m);
    return 0;
}
