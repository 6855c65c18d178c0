/* The forward pass: each HF module is a function called through srt_module_forward(),
 * so hooks see exactly what HF modules see. Activations live in buffers the runner
 * allocates once; a forward step allocates nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/runner_internal.h"
#include "srt/backend.h"
#include "srt/backend_cuda.h"
#include "srt/comm.h"

/* `self` of every module function */
typedef struct call {
    srt_runner *r;
    const void *obj;
    int32_t     layer;
} call;

static srt_tensor_view view(void *data, int ndim, int64_t d0, int64_t d1, int64_t d2, int32_t dtype)
{
    srt_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dtype;
    v.device = SRT_HOOK_DEVICE_CPU;
    v.ndim = ndim;
    v.shape[0] = d0;
    v.shape[1] = d1;
    v.shape[2] = d2;
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        v.strides[i] = s;
        s *= v.shape[i];
    }
    v.data = data;
    return v;
}

static srt_tensor_view fview(float *data, int64_t rows, int64_t cols)
{
    return view(data, 2, rows, cols, 0, SRT_HOOK_DTYPE_F32);
}

static int64_t view_rows(const srt_tensor_view *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->ndim - 1; i++)
        n *= v->shape[i];
    return n;
}

static int forward_module(srt_runner *r, int32_t idx, srt_module_fn fn, void *self, srt_module_args *args,
                          srt_tensor_view *out)
{
    srt_module *mod = &r->m->modules[idx];
    if (r->on_dev) {   /* hooks see device pointers, and are told so */
        for (int i = 0; i < args->n_inputs; i++)
            args->inputs[i].device = SRT_HOOK_DEVICE_CUDA;
        for (int i = 0; i < args->n_kwargs; i++)
            args->kwargs[i].device = SRT_HOOK_DEVICE_CUDA;
        out->device = SRT_HOOK_DEVICE_CUDA;
    }
    if (srt_module_forward(mod, &r->ctx, fn, self, args, out) != SRT_OK) {
        if (r->err && !r->err->msg[0])
            srt_err_set(r->err, "forward of module '%s' failed", mod->info.name);
        return SRT_ERROR;
    }
    return SRT_OK;
}

static void args1(srt_module_args *a, srt_tensor_view in)
{
    memset(a, 0, sizeof *a);
    a->n_inputs = 1;
    a->inputs[0] = in;
}

/* ---- leaf modules ---- */

static int linear_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *out)
{
    call *c = self;
    const srt_linear *l = c->obj;
    int64_t rows = view_rows(&a->inputs[0]);
    c->r->be->ops->matmul(c->r->be, &l->w, l->bias, a->inputs[0].data, rows, out->data);
    if (l->reduce && c->r->tcomm &&
        srt_comm_all_reduce_sum_f32(c->r->tcomm, out->data, (size_t)(rows * l->w.rows), c->r->err) != SRT_OK)
        return SRT_ERROR;
    return SRT_OK;
}

static int norm_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *out)
{
    call *c = self;
    const srt_norm *n = c->obj;
    const srt_tensor_view *in = &a->inputs[0];
    c->r->be->ops->rmsnorm(c->r->be, in->data, &n->w, c->r->m->cfg.rms_norm_eps, view_rows(in),
                           in->shape[in->ndim - 1], out->data);
    return SRT_OK;
}

/* Vocab parallel (tp > 1): a rank looks up the ids among its rows, writes zeros for the others,
 * and the all-reduce sums the ranks' rows: exactly one rank contributes to each row, so the
 * result is the single-rank embedding. */
static int embed_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *out)
{
    call *c = self;
    srt_runner *r = c->r;
    int64_t T = a->inputs[0].shape[0], H = r->m->cfg.hidden_size;
    if (!r->tcomm) {
        r->be->ops->embed(r->be, &r->embed, a->inputs[0].data, T, out->data);
        return SRT_OK;
    }
    const int32_t *ids = a->inputs[0].data;
    if (r->on_dev) {
        /* the host holds the validated ids; a hook on the model or the embedding may have
         * replaced them in backend memory, then they are read back */
        const srt_module *mods = r->m->modules;
        if (mods[r->m->m_model].hooks || mods[r->m->m_embed].hooks) {
            /* into h_eidx: the loop below reads ids[t] before it writes h_eidx[t] */
            if (r->be->ops->download(r->be, r->h_eidx, ids, (size_t)T * sizeof(int32_t), r->err) != SRT_OK)
                return SRT_ERROR;
            ids = r->h_eidx;
        } else {
            ids = r->b->token_ids;
        }
    }
    int64_t lo = r->vocab_lo, n = r->vocab_n;
    for (int64_t t = 0; t < T; t++) {
        int mine = ids[t] >= lo && ids[t] < lo + n;
        r->h_lids[t] = mine ? (int32_t)(ids[t] - lo) : 0;
        r->h_eidx[t] = mine ? (int32_t)t : -1;
    }
    if (r->on_dev) {
        /* lookup into the staging rows, then gather each token's row or the zero row */
        for (int64_t t = 0; t < T; t++)
            if (r->h_eidx[t] < 0)
                r->h_eidx[t] = r->max_tok;
        if (r->be->ops->upload(r->be, r->d_lids, r->h_lids, (size_t)T * sizeof(int32_t), r->err) != SRT_OK ||
            r->be->ops->upload(r->be, r->d_eidx, r->h_eidx, (size_t)T * sizeof(int32_t), r->err) != SRT_OK)
            return SRT_ERROR;
        r->be->ops->embed(r->be, &r->embed, r->d_lids, T, r->d_estage);
        r->be->ops->gather_rows(r->be, out->data, r->d_estage, r->d_eidx, (int32_t)T, H);
    } else {
        float *o = out->data;
        r->be->ops->embed(r->be, &r->embed, r->h_lids, T, o);
        for (int64_t t = 0; t < T; t++)
            if (r->h_eidx[t] < 0)
                memset(o + t * H, 0, (size_t)H * sizeof(float));
    }
    return srt_comm_all_reduce_sum_f32(r->tcomm, out->data, (size_t)(T * H), r->err);
}

static int act_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *out)
{
    call *c = self;
    c->r->be->ops->silu(c->r->be, a->inputs[0].data, view_rows(&a->inputs[0]) * a->inputs[0].shape[1], out->data);
    return SRT_OK;
}

/* (cos, sin) for each token's position: output [n_tok][2][head_dim] (HF returns the pair). */
static int rotary_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *out)
{
    call *c = self;
    const srt_model *m = c->r->m;
    const int32_t *pos = a->kwargs[0].data;
    int64_t n = a->kwargs[0].shape[0];
    int32_t hd = m->cfg.head_dim, half = hd / 2;
    float *cs = out->data;
    if (c->r->be->ops->rope_cos_sin) {   /* positions and cos_sin in backend memory */
        c->r->be->ops->rope_cos_sin(c->r->be, pos, n, m->inv_freq, hd, cs);
        return SRT_OK;
    }
    for (int64_t t = 0; t < n; t++) {
        float *co = cs + t * 2 * hd, *si = co + hd;
        for (int32_t i = 0; i < half; i++) {
            float f = (float)pos[t] * m->inv_freq[i];
            co[i] = co[i + half] = cosf(f);
            si[i] = si[i + half] = sinf(f);
        }
    }
    return SRT_OK;
}

/* ---- composite modules ---- */

/* Linears of one input (q/k/v, gate/up) into out[k]: in one backend call when the backend
 * fuses them and none has a hook or an all-reduce (what they compute is the same; a CPU
 * decode pays one thread-pool region instead of n), else each through its module. */
static int linears_of_input(srt_runner *r, int32_t layer, int n, const srt_linear *const *l, srt_tensor_view in,
                            srt_tensor_view *out)
{
    const srt_weight *w[SRT_MATMUL_N_MAX];
    const float *bias[SRT_MATMUL_N_MAX];
    float *y[SRT_MATMUL_N_MAX];
    int fuse = r->be->ops->matmul_n != NULL && n <= SRT_MATMUL_N_MAX;
    for (int k = 0; k < n && fuse; k++) {
        fuse = r->m->modules[l[k]->module].hooks == NULL && !(l[k]->reduce && r->tcomm);
        w[k] = &l[k]->w;
        bias[k] = l[k]->bias;
        y[k] = out[k].data;
    }
    if (fuse) {
        r->be->ops->matmul_n(r->be, n, w, bias, in.data, view_rows(&in), y);
        return SRT_OK;
    }
    for (int k = 0; k < n; k++) {
        call ck = { r, l[k], layer };
        srt_module_args la;
        args1(&la, in);
        if (forward_module(r, l[k]->module, linear_fn, &ck, &la, &out[k]) != SRT_OK)
            return SRT_ERROR;
    }
    return SRT_OK;
}

static int mlp_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *out)
{
    call *c = self;
    srt_runner *r = c->r;
    const srt_layer *L = &r->layers[c->layer];
    int64_t T = view_rows(&a->inputs[0]), F = r->ffn;
    srt_module_args la;
    srt_tensor_view gu[2] = { fview(r->gate, T, F), fview(r->up, T, F) }, g = gu[0], h = fview(r->act, T, F);
    call cd = { r, &L->down, c->layer };

    if (linears_of_input(r, c->layer, 2, (const srt_linear *const[]){ &L->gate, &L->up }, a->inputs[0], gu))
        return SRT_ERROR;
    if (r->m->modules[L->m_act].hooks == NULL) {
        r->be->ops->silu_mul(r->be, r->gate, r->up, T * F, r->act);   /* fused on the fast path */
    } else {
        call ca = { r, NULL, c->layer };
        args1(&la, g);
        if (forward_module(r, L->m_act, act_fn, &ca, &la, &h))
            return SRT_ERROR;
        r->be->ops->mul(r->be, r->act, r->up, T * F);
    }
    args1(&la, h);
    return forward_module(r, L->down.module, linear_fn, &cd, &la, out);
}

/* The token of logit row i: the batch's logit_rows, else each sequence's last token */
static int32_t logit_row(const srt_forward_batch *b, int32_t i)
{
    return b->logit_rows ? b->logit_rows[i] : b->seq_start[i + 1] - 1;
}

/* The step's K/V rows (r->k, r->v) into layer l's cache */
static void store_kv(srt_runner *r, int32_t l)
{
    r->be->ops->kv_store(r->be, r->b, r->k, r->v, srt_kv_pool_k(r->kv, l), srt_kv_pool_v(r->kv, l),
                         srt_kv_pool_dtype(r->kv), r->nkv * r->m->cfg.head_dim);
}

/* Attention of b's tokens (queries r->q, output r->attn) over layer l's cache */
static void attend_layer(srt_runner *r, const srt_forward_batch *b, int32_t l)
{
    int32_t hd = r->m->cfg.head_dim;
    srt_attn_args aa = {
        .batch = b, .q = r->q, .out = r->attn, .k_cache = srt_kv_pool_k(r->kv, l),
        .v_cache = srt_kv_pool_v(r->kv, l), .kv_dtype = srt_kv_pool_dtype(r->kv),
        .n_heads = r->nh, .n_kv_heads = r->nkv, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
    };
    r->be->ops->attention(r->be, &aa);
}

static int attn_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *out)
{
    call *c = self;
    srt_runner *r = c->r;
    const srt_model_config *cfg = &r->m->cfg;
    const srt_layer *L = &r->layers[c->layer];
    int64_t T = view_rows(&a->inputs[0]);
    int32_t nh = r->nh, nkv = r->nkv, hd = cfg->head_dim;
    int qk_norm = cfg->qk_norm;
    srt_module_args la;
    float *qd = qk_norm ? r->q_raw : r->q, *kd = qk_norm ? r->k_raw : r->k;
    srt_tensor_view qkv[3] = { fview(qd, T, (int64_t)nh * hd), fview(kd, T, (int64_t)nkv * hd),
                               fview(r->v, T, (int64_t)nkv * hd) };
    srt_tensor_view av = fview(r->attn, T, (int64_t)nh * hd);
    call co = { r, &L->o, c->layer };

    if (linears_of_input(r, c->layer, 3, (const srt_linear *const[]){ &L->q, &L->k, &L->v }, a->inputs[0], qkv))
        return SRT_ERROR;
    if (qk_norm) {
        /* per-head RMSNorm on [T, heads, head_dim] */
        call cqn = { r, &L->q_norm, c->layer }, ckn = { r, &L->k_norm, c->layer };
        srt_tensor_view qi = view(r->q_raw, 3, T, nh, hd, SRT_HOOK_DTYPE_F32);
        srt_tensor_view qo = view(r->q, 3, T, nh, hd, SRT_HOOK_DTYPE_F32);
        srt_tensor_view ki = view(r->k_raw, 3, T, nkv, hd, SRT_HOOK_DTYPE_F32);
        srt_tensor_view ko = view(r->k, 3, T, nkv, hd, SRT_HOOK_DTYPE_F32);
        args1(&la, qi);
        if (forward_module(r, L->q_norm.module, norm_fn, &cqn, &la, &qo))
            return SRT_ERROR;
        args1(&la, ki);
        if (forward_module(r, L->k_norm.module, norm_fn, &ckn, &la, &ko))
            return SRT_ERROR;
    }
    const float *cs = a->kwargs[0].data;
    r->be->ops->rope(r->be, r->q, T, nh, hd, cs);
    r->be->ops->rope(r->be, r->k, T, nkv, hd, cs);
    store_kv(r, c->layer);
    attend_layer(r, r->b, c->layer);
    args1(&la, av);
    return forward_module(r, L->o.module, linear_fn, &co, &la, out);
}

static void set_pe_kwarg(srt_module_args *a, srt_runner *r, int64_t T)
{
    a->n_kwargs = 1;
    a->kwarg_names[0] = "position_embeddings";
    a->kwargs[0] = view(r->cos_sin, 3, T, 2, r->m->cfg.head_dim, SRT_HOOK_DTYPE_F32);
}

static int layer_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *out)
{
    call *c = self;
    srt_runner *r = c->r;
    const srt_layer *L = &r->layers[c->layer];
    int64_t T = view_rows(&a->inputs[0]), H = r->m->cfg.hidden_size;
    float *x = a->inputs[0].data, *y = out->data;
    srt_module_args la;
    srt_tensor_view xn = fview(r->xn, T, H), pr = fview(r->proj, T, H), yv = fview(y, T, H);
    call ci = { r, &L->input_norm, c->layer }, cp = { r, &L->post_attn_norm, c->layer };
    call ca = { r, NULL, c->layer }, cm = { r, NULL, c->layer };

    args1(&la, a->inputs[0]);
    if (forward_module(r, L->input_norm.module, norm_fn, &ci, &la, &xn))
        return SRT_ERROR;
    args1(&la, xn);
    set_pe_kwarg(&la, r, T);
    if (forward_module(r, L->m_attn, attn_fn, &ca, &la, &pr))
        return SRT_ERROR;
    if (r->be->ops->add_rmsnorm && r->m->modules[L->post_attn_norm.module].hooks == NULL) {
        /* residual add and post_attention_layernorm in one pass (CUDA; NULL on the CPU) */
        r->be->ops->add_rmsnorm(r->be, y, x, r->proj, &L->post_attn_norm.w, r->m->cfg.rms_norm_eps, T, H, r->xn);
    } else {
        r->be->ops->add3(r->be, y, x, r->proj, T * H);
        args1(&la, yv);
        if (forward_module(r, L->post_attn_norm.module, norm_fn, &cp, &la, &xn))
            return SRT_ERROR;
    }
    args1(&la, xn);
    if (forward_module(r, L->m_mlp, mlp_fn, &cm, &la, &pr))
        return SRT_ERROR;
    r->be->ops->add(r->be, y, r->proj, T * H);
    return SRT_OK;
}

/* The number of rows the last layer needs past its K and V: the step's logit rows (0 when a
 * prompt chunk needs none), or -1 for every token. The rows of the others feed nothing the
 * step returns: their K and V (for the cache) come before the layer's attention. Taken on the
 * host backend when the rows are fewer than the tokens and no hook is attached anywhere (a
 * hook on a layer or the model would see its output rows). */
static int32_t last_rows(srt_runner *r, int64_t T)
{
    const srt_forward_batch *b = r->b;
    int32_t n = b->logit_rows ? b->n_logit_rows : b->n_seqs;
    if (r->on_dev || n >= T)
        return -1;
    for (int32_t i = 0; i < r->m->n_modules; i++)
        if (r->m->modules[i].hooks)
            return -1;
    return n;
}

/* Layer l (hook-free, see last_rows) at n of the T tokens, the logit rows in order: K and V
 * at every token into the cache, the rest at those rows only, into y's first n rows. Each op
 * gives a row the bits it has in the whole batch (matmuls, norms and RoPE are per row, and a
 * token's attention is the same in any batch), so the logits are unchanged. Each row attends
 * as a sequence of its own: its sequence's slots, up to its position. */
static int last_layer_rows(srt_runner *r, int32_t l, const float *x, float *y, int64_t T, int32_t n)
{
    const srt_model_config *cfg = &r->m->cfg;
    const srt_layer *L = &r->layers[l];
    const srt_backend_ops *ops = r->be->ops;
    const srt_forward_batch *b = r->b;
    int64_t H = cfg->hidden_size;
    int32_t nh = r->nh, nkv = r->nkv, hd = cfg->head_dim;
    float eps = cfg->rms_norm_eps;
    float *kd = cfg->qk_norm ? r->k_raw : r->k, *qd = cfg->qk_norm ? r->q_raw : r->q;
    srt_tensor_view kv[2] = { fview(kd, T, (int64_t)nkv * hd), fview(r->v, T, (int64_t)nkv * hd) };

    ops->rmsnorm(r->be, x, &L->input_norm.w, eps, T, H, r->xn);
    if (linears_of_input(r, l, 2, (const srt_linear *const[]){ &L->k, &L->v }, fview(r->xn, T, H), kv))
        return SRT_ERROR;
    if (cfg->qk_norm)
        ops->rmsnorm(r->be, r->k_raw, &L->k_norm.w, eps, T * nkv, hd, r->k);
    ops->rope(r->be, r->k, T, nkv, hd, r->cos_sin);
    store_kv(r, l);
    if (n == 0)
        return SRT_OK;

    /* the rows' normed inputs, cos/sin and one-token sequences */
    for (int32_t i = 0; i < n; i++) {
        int32_t t = logit_row(b, i), s = 0;
        while (b->seq_start[s + 1] <= t)
            s++;
        memcpy(r->rows + (size_t)i * H, r->xn + (size_t)t * H, (size_t)H * sizeof(float));
        memcpy(r->lr_cs + (size_t)i * 2 * hd, r->cos_sin + (size_t)t * 2 * hd, (size_t)2 * hd * sizeof(float));
        r->lr_pos[i] = b->positions[t];
        r->lr_out[i] = b->out_slots[t];
        r->lr_start[i] = i;
        r->lr_len[i] = b->seq_len[s];
        r->lr_slots[i] = b->seq_slots[s];
    }
    r->lr_start[n] = n;
    srt_forward_batch kb = {
        .n_tokens = n, .token_ids = r->zero_ids_i32, .positions = r->lr_pos, .out_slots = r->lr_out,
        .n_seqs = n, .seq_start = r->lr_start, .seq_len = r->lr_len, .seq_slots = r->lr_slots,
        .forward_mode = b->forward_mode,
    };
    call cq = { r, &L->q, l }, co = { r, &L->o, l }, cm = { r, NULL, l };
    srt_module_args la;
    srt_tensor_view qv = fview(qd, n, (int64_t)nh * hd), pr = fview(r->proj, n, H);
    args1(&la, fview(r->rows, n, H));
    if (linear_fn(&cq, &r->ctx, &la, &qv) != SRT_OK)
        return SRT_ERROR;
    if (cfg->qk_norm)
        ops->rmsnorm(r->be, r->q_raw, &L->q_norm.w, eps, (int64_t)n * nh, hd, r->q);
    ops->rope(r->be, r->q, n, nh, hd, r->lr_cs);
    attend_layer(r, &kb, l);
    args1(&la, fview(r->attn, n, (int64_t)nh * hd));
    if (linear_fn(&co, &r->ctx, &la, &pr) != SRT_OK)
        return SRT_ERROR;
    for (int32_t i = 0; i < n; i++)   /* the rows' residual, as layer_fn's add3 */
        memcpy(r->rows + (size_t)i * H, x + (size_t)logit_row(b, i) * H, (size_t)H * sizeof(float));
    ops->add3(r->be, y, r->rows, r->proj, (int64_t)n * H);
    ops->rmsnorm(r->be, y, &L->post_attn_norm.w, eps, n, H, r->xn);
    args1(&la, fview(r->xn, n, H));
    if (mlp_fn(&cm, &r->ctx, &la, &pr) != SRT_OK)
        return SRT_ERROR;
    ops->add(r->be, y, r->proj, (int64_t)n * H);
    return SRT_OK;
}

/* LlamaModel / Qwen2Model / Qwen3Model: input_ids -> final normed hidden states */
static int model_fn(void *self, const srt_batch_ctx *b, srt_module_args *a, srt_tensor_view *out)
{
    call *c = self;
    srt_runner *r = c->r;
    srt_model *m = r->m;
    int64_t T = a->inputs[0].shape[0], H = m->cfg.hidden_size;
    srt_module_args la;
    srt_tensor_view x0 = fview(r->resid[0], T, H);
    srt_tensor_view cs = view(r->cos_sin, 3, T, 2, m->cfg.head_dim, SRT_HOOK_DTYPE_F32);
    call ce = { r, NULL, -1 }, cr = { r, NULL, -1 }, cn = { r, &m->final_norm, -1 };

    args1(&la, a->inputs[0]);
    if (forward_module(r, m->m_embed, embed_fn, &ce, &la, &x0))
        return SRT_ERROR;
    args1(&la, x0);
    la.n_kwargs = 1;
    la.kwarg_names[0] = "position_ids";
    la.kwargs[0] = a->kwargs[0];
    if (forward_module(r, m->m_rotary, rotary_fn, &cr, &la, &cs))
        return SRT_ERROR;
    int32_t nl = m->cfg.n_layers, keep = last_rows(r, T);
    r->rows_kept = keep >= 0;
    for (int32_t l = 0; l < nl; l++) {
        call cl = { r, NULL, l };
        srt_tensor_view in = fview(r->resid[l & 1], T, H), o = fview(r->resid[(l + 1) & 1], T, H);
        if (l == nl - 1 && keep >= 0) {
            if (last_layer_rows(r, l, in.data, o.data, T, keep) != SRT_OK)
                return SRT_ERROR;
            break;
        }
        args1(&la, in);
        set_pe_kwarg(&la, r, T);
        if (forward_module(r, r->layers[l].m_layer, layer_fn, &cl, &la, &o))
            return SRT_ERROR;
    }
    if (keep == 0)
        return SRT_OK;
    args1(&la, fview(r->resid[nl & 1], keep > 0 ? keep : T, H));
    return forward_module(r, m->final_norm.module, norm_fn, &cn, &la, out);
}

/* ---- runner ---- */

/* n zeroed floats in the backend's memory (64-byte aligned host memory on the CPU backend) */
static float *balloc(srt_runner *r, size_t n)
{
    srt_err e;
    return srt_backend_alloc(r->be, n * sizeof(float), &e);
}

static int load_f32(srt_runner *r, const float *p, int64_t n, srt_err *err)
{
    srt_weight w = { .dtype = SRT_F32, .rows = 1, .cols = n, .data = p, .row_stride = (size_t)n * sizeof(float) };
    return p ? r->be->ops->load_weight(r->be, &w, err) : SRT_OK;
}

/* The backend's copies of every weight, bias and inv_freq the ops will be given (CUDA). */
static int load_weights(srt_runner *r, srt_err *err)
{
    const srt_model *m = r->m;
    const srt_backend_ops *ops = r->be->ops;
    int rc = ops->load_weight(r->be, &r->embed, err);
    if (rc == SRT_OK)
        rc = ops->load_weight(r->be, &m->final_norm.w, err);
    if (rc == SRT_OK)
        rc = ops->load_weight(r->be, &r->lm_head.w, err);
    if (rc == SRT_OK)
        rc = load_f32(r, r->lm_head.bias, r->lm_head.w.rows, err);
    if (rc == SRT_OK)
        rc = load_f32(r, m->inv_freq, m->cfg.head_dim / 2, err);
    for (int32_t l = 0; l < m->cfg.n_layers && rc == SRT_OK; l++) {
        const srt_layer *L = &r->layers[l];
        const srt_linear *ls[] = { &L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down };
        for (size_t i = 0; i < 7 && rc == SRT_OK; i++) {
            rc = ops->load_weight(r->be, &ls[i]->w, err);
            if (rc == SRT_OK)
                rc = load_f32(r, ls[i]->bias, ls[i]->w.rows, err);
        }
        if (rc == SRT_OK)
            rc = ops->load_weight(r->be, &L->input_norm.w, err);
        if (rc == SRT_OK)
            rc = ops->load_weight(r->be, &L->post_attn_norm.w, err);
        if (rc == SRT_OK && m->cfg.qk_norm)
            rc = ops->load_weight(r->be, &L->q_norm.w, err);
        if (rc == SRT_OK && m->cfg.qk_norm)
            rc = ops->load_weight(r->be, &L->k_norm.w, err);
    }
    return rc;
}

void srt_runner_free(srt_runner *r)
{
    if (!r)
        return;
    if (r->be && r->g_live)   /* they hold this runner's buffers' addresses */
        r->be->ops->graph_clear(r->be);
    float *bufs[] = { r->resid[0], r->resid[1], r->xn, r->final, r->proj, r->q, r->k, r->v, r->q_raw,
                      r->k_raw, r->attn, r->gate, r->up, r->act, r->cos_sin, r->rows, r->lr_cs };
    void *dbufs[] = { r->d_ids, r->d_pos, r->d_rows, r->d_logits, r->d_lids, r->d_eidx, r->d_estage,
                      r->lm_part, r->lm_all };
    for (size_t i = 0; r->be && i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            srt_backend_release(r->be, bufs[i]);
    for (size_t i = 0; r->be && i < sizeof dbufs / sizeof dbufs[0]; i++)
        if (dbufs[i])
            srt_backend_release(r->be, dbufs[i]);
    free(r->g_ids);
    free(r->g_pos);
    free(r->g_out);
    free(r->g_start);
    free(r->g_len);
    free(r->g_slots);
    free(r->g_kv);
    free(r->h_rows);
    free(r->h_lids);
    free(r->h_eidx);
    free(r->h_lm_all);
    free(r->zero_ids);
    free(r->lr_i32);
    free(r->lr_slots);
    srt_comm_destroy(r->own_tcomm);
    runner_release_resident(r);
    free(r->layers);
    if (r->own_be)
        srt_backend_free(r->be);
    free(r);
}

/* Output rows [r0, r0+n) of a linear layer: a view, bias included. */
static void shard_rows(srt_linear *l, int64_t r0, int64_t n)
{
    l->w.data = (const char *)l->w.data + (size_t)r0 * l->w.row_stride;
    l->w.rows = n;
    if (l->bias)
        l->bias += r0;
}

/* Input columns [c0, c0+n): a view with the full row stride; bias only on rank 0, since the
 * partial outputs are summed. */
static int shard_cols(srt_linear *l, int64_t c0, int64_t n, int rank, const char *name, srt_err *err)
{
    int be = srt_dtype_block_elems(l->w.dtype);
    if (c0 % be || n % be)
        return srt_err_set(err, "tensor parallel: %s (%s) cannot be split at column %lld: its blocks are %d columns",
                           name, srt_dtype_name(l->w.dtype), (long long)c0, be);
    l->w.data = (const char *)l->w.data + (size_t)(c0 / be) * srt_dtype_block_bytes(l->w.dtype);
    l->w.cols = n;
    if (rank != 0)
        l->bias = NULL;
    l->reduce = 1;
    return SRT_OK;
}

static int shard_layers(srt_runner *r, int rank, int size, srt_err *err)
{
    const srt_model_config *c = &r->m->cfg;
    if (c->n_heads % size || c->n_kv_heads % size || c->intermediate_size % size)
        return srt_err_set(err, "tensor parallel: %d heads, %d KV heads and intermediate size %d must all divide by %d",
                           c->n_heads, c->n_kv_heads, c->intermediate_size, size);
    r->nh = c->n_heads / size;
    r->nkv = c->n_kv_heads / size;
    r->ffn = c->intermediate_size / size;
    r->layers = malloc((size_t)c->n_layers * sizeof *r->layers);
    if (!r->layers)
        return srt_err_set(err, "runner: out of memory");
    memcpy(r->layers, r->m->layers, (size_t)c->n_layers * sizeof *r->layers);
    if (size == 1)
        return SRT_OK;
    int64_t hd = c->head_dim;
    for (int32_t l = 0; l < c->n_layers; l++) {
        srt_layer *L = &r->layers[l];
        char name[96];
        shard_rows(&L->q, rank * r->nh * hd, r->nh * hd);
        shard_rows(&L->k, rank * r->nkv * hd, r->nkv * hd);
        shard_rows(&L->v, rank * r->nkv * hd, r->nkv * hd);
        shard_rows(&L->gate, (int64_t)rank * r->ffn, r->ffn);
        shard_rows(&L->up, (int64_t)rank * r->ffn, r->ffn);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.o_proj", l);
        if (shard_cols(&L->o, rank * r->nh * hd, r->nh * hd, rank, name, err) != SRT_OK)
            return SRT_ERROR;
        snprintf(name, sizeof name, "model.layers.%d.mlp.down_proj", l);
        if (shard_cols(&L->down, (int64_t)rank * r->ffn, r->ffn, rank, name, err) != SRT_OK)
            return SRT_ERROR;
    }
    return SRT_OK;
}

/* Vocab parallel, as Megatron: rank k holds rows [k*Vp, min((k+1)*Vp, V)) of the embedding
 * and of lm_head, Vp = ceil(V/size). Views of the stored rows (GGUF quantized rows are whole
 * blocks each, so a row range is a valid weight). Tied weights give the same view twice. */
static int shard_vocab(srt_runner *r, int rank, int size, srt_err *err)
{
    const srt_model *m = r->m;
    int64_t V = m->cfg.vocab_size;
    r->embed = m->embed;
    r->lm_head = m->lm_head;
    r->lm_head.reduce = 0;
    r->vocab_pad = (V + size - 1) / size;
    r->vocab_lo = (int64_t)rank * r->vocab_pad;
    r->vocab_n = V - r->vocab_lo < r->vocab_pad ? V - r->vocab_lo : r->vocab_pad;
    if (size == 1)
        return SRT_OK;
    if (V - (int64_t)(size - 1) * r->vocab_pad <= 0)
        return srt_err_set(err, "tensor parallel: a vocabulary of %lld cannot be split in %d ranks of %lld rows",
                           (long long)V, size, (long long)r->vocab_pad);
    if (m->embed.rows != V || m->lm_head.w.rows != V)
        return srt_err_set(err, "tensor parallel: embedding (%lld rows) and lm_head (%lld rows) must have the vocabulary's %lld",
                           (long long)m->embed.rows, (long long)m->lm_head.w.rows, (long long)V);
    r->embed.data = (const char *)r->embed.data + (size_t)r->vocab_lo * r->embed.row_stride;
    r->embed.rows = r->vocab_n;
    shard_rows(&r->lm_head, r->vocab_lo, r->vocab_n);
    return SRT_OK;
}

/* The tensor communicator: the caller's, or an NCCL one on this runner's CUDA stream, made
 * with a unique id rank 0 broadcasts over the control communicator. */
static int tensor_comm(srt_runner *r, const srt_runner_opts *o, srt_err *err)
{
    r->tcomm = o->tensor_comm ? o->tensor_comm : r->comm;
    if (!r->comm) {
        r->tcomm = NULL;
        if (o->tensor_comm && o->tensor_comm->size > 1)
            return srt_err_set(err, "runner: a tensor communicator of %d ranks needs the group's (opts.comm)",
                               o->tensor_comm->size);
        return SRT_OK;
    }
    if (o->tensor_comm && (o->tensor_comm->size != r->comm->size || o->tensor_comm->rank != r->comm->rank))
        return srt_err_set(err, "runner: tensor communicator is rank %d of %d, the group rank %d of %d",
                           o->tensor_comm->rank, o->tensor_comm->size, r->comm->rank, r->comm->size);
    if (!o->tensor_comm && o->nccl) {
        unsigned char id[SRT_NCCL_UNIQUE_ID_BYTES];
        srt_err e2 = { { 0 } };
        memset(id, 0, sizeof id);
        float okf = r->comm->rank == 0 && srt_nccl_get_unique_id(o->nccl, id, &e2) == SRT_OK ? 1.0f : 0.0f;
        /* every rank learns whether rank 0 has an id before anyone waits in the NCCL init */
        if (srt_comm_all_reduce_sum_f32(r->comm, &okf, 1, err) != SRT_OK ||
            srt_comm_broadcast(r->comm, id, sizeof id, 0, err) != SRT_OK)
            return SRT_ERROR;
        if (okf != 1.0f)
            return srt_err_set(err, "runner: NCCL unique id: %s", e2.msg[0] ? e2.msg : "failed on rank 0");
        void *stream = r->be->ops->stream ? r->be->ops->stream(r->be) : NULL;
        r->own_tcomm = srt_nccl_comm_init(o->nccl, id, r->comm->rank, r->comm->size, stream, err);
        if (!r->own_tcomm)
            return SRT_ERROR;
        r->tcomm = r->own_tcomm;
    }
    /* collectives get the backend's memory: host memory for the CPU communicator */
    if (srt_backend_is_cuda(r->be) && strcmp(r->tcomm->ops->name, "nccl") != 0)
        return srt_err_set(err, "runner: tensor parallelism on the CUDA backend needs an NCCL tensor communicator"
                                " (srt_runner_opts.nccl), not the %s communicator", r->tcomm->ops->name);
    return SRT_OK;
}

int srt_runner_create(srt_model *m, const srt_runner_opts *o, srt_runner **out, srt_err *err)
{
    const srt_model_config *c = &m->cfg;
    *out = NULL;
    if (o->max_batch_tokens <= 0 || o->max_batch_tokens > (1 << 20) || o->max_seqs <= 0 || o->max_seqs > (1 << 16))
        return srt_err_set(err, "runner: max_batch_tokens (%d) and max_seqs (%d) must be positive and sane",
                           o->max_batch_tokens, o->max_seqs);
    srt_runner *r = calloc(1, sizeof *r);
    if (!r)
        return srt_err_set(err, "runner: out of memory");
    r->m = m;
    r->max_tok = o->max_batch_tokens;
    r->max_seqs = o->max_seqs;
    r->comm = o->comm && o->comm->size > 1 ? o->comm : NULL;
    r->tp_rank = o->comm ? o->comm->rank : o->tp_rank;
    r->tp_size = o->comm ? o->comm->size : o->tp_size > 0 ? o->tp_size : 1;
    if (shard_layers(r, r->comm ? r->tp_rank : 0, r->comm ? r->tp_size : 1, err) != SRT_OK ||
        shard_vocab(r, r->comm ? r->tp_rank : 0, r->comm ? r->tp_size : 1, err) != SRT_OK) {
        free(r->layers);
        free(r);
        return SRT_ERROR;
    }
    if (o->backend)
        r->be = o->backend;
    else if (o->device == SRT_RUNNER_CUDA)
        r->be = srt_cuda_backend_create(o->device_index, o->mem_fraction > 0 ? o->mem_fraction : 0.85, err);
    else if (o->device != SRT_RUNNER_CPU)
        srt_err_set(err, "runner: unknown device %d", o->device);
    else
        r->be = srt_cpu_backend_create(o->n_threads, o->precise_matmul, err);
    r->own_be = !o->backend;
    if (!r->be) {
        free(r->layers);
        free(r);
        return SRT_ERROR;
    }
    if (tensor_comm(r, o, err) != SRT_OK) {
        srt_runner_free(r);
        return SRT_ERROR;
    }
    size_t T = (size_t)r->max_tok, H = (size_t)c->hidden_size, F = (size_t)c->intermediate_size;
    size_t QD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
    size_t R = (size_t)r->max_seqs;
    r->resid[0] = balloc(r, T * H);
    r->resid[1] = balloc(r, T * H);
    r->xn = balloc(r, T * H);
    r->final = balloc(r, T * H);
    r->proj = balloc(r, T * H);
    r->q = balloc(r, T * QD);
    r->k = balloc(r, T * KD);
    r->v = balloc(r, T * KD);
    r->q_raw = c->qk_norm ? balloc(r, T * QD) : NULL;
    r->k_raw = c->qk_norm ? balloc(r, T * KD) : NULL;
    r->attn = balloc(r, T * QD);
    r->gate = balloc(r, T * F);
    r->up = balloc(r, T * F);
    r->act = balloc(r, T * F);
    r->cos_sin = balloc(r, T * 2 * (size_t)c->head_dim);
    r->rows = balloc(r, R * H);
    r->zero_ids = calloc(T, sizeof *r->zero_ids);
    if (!r->be->ops->alloc) {   /* the last layer at the logit rows (host backend) */
        r->lr_cs = balloc(r, R * 2 * (size_t)c->head_dim);
        r->lr_i32 = calloc(5 * R + 1, sizeof(int32_t));
        r->lr_slots = calloc(R, sizeof *r->lr_slots);
        if (r->lr_i32) {
            r->zero_ids_i32 = r->lr_i32, r->lr_pos = r->lr_i32 + R, r->lr_out = r->lr_i32 + 2 * R;
            r->lr_len = r->lr_i32 + 3 * R, r->lr_start = r->lr_i32 + 4 * R;
        }
    }
    r->on_dev = r->be->ops->alloc != NULL;
    size_t VP = (size_t)r->vocab_pad, TP = (size_t)r->tp_size;
    if (r->on_dev) {
        r->d_ids = srt_backend_alloc(r->be, T * sizeof(int32_t), err);
        r->d_pos = srt_backend_alloc(r->be, T * sizeof(int32_t), err);
        r->d_rows = srt_backend_alloc(r->be, R * sizeof(int32_t), err);
        r->d_logits = r->tcomm ? NULL : srt_backend_alloc(r->be, R * (size_t)c->vocab_size * sizeof(float), err);
        r->h_rows = malloc(R * sizeof(int32_t));
        if (!r->d_ids || !r->d_pos || !r->d_rows || (!r->tcomm && !r->d_logits) || !r->h_rows) {
            srt_runner_free(r);
            return srt_err_set(err, "runner: backend memory for %d batch tokens: %s", o->max_batch_tokens,
                               err && err->msg[0] ? err->msg : "out of memory");
        }
    }
    if (r->tcomm) {
        int okv = (r->h_lids = malloc(T * sizeof(int32_t))) && (r->h_eidx = malloc(T * sizeof(int32_t))) &&
                  (r->lm_part = balloc(r, R * VP)) && (r->lm_all = balloc(r, TP * R * VP));
        if (okv && r->on_dev) {
            /* the zero row the embedding of other ranks' ids is gathered from */
            float *zero = calloc(H, sizeof(float));
            okv = (r->d_lids = srt_backend_alloc(r->be, T * sizeof(int32_t), err)) &&
                  (r->d_eidx = srt_backend_alloc(r->be, T * sizeof(int32_t), err)) &&
                  (r->d_estage = balloc(r, (T + 1) * H)) && (r->h_lm_all = malloc(TP * R * VP * sizeof(float))) &&
                  zero && r->be->ops->upload(r->be, r->d_estage + T * H, zero, H * sizeof(float), err) == SRT_OK;
            free(zero);
        }
        if (!okv) {
            srt_runner_free(r);
            return srt_err_set(err, "runner: memory for the vocab-parallel embedding and lm_head (%d tokens, %d rows)",
                               o->max_batch_tokens, o->max_seqs);
        }
    }
    if (!r->resid[0] || !r->resid[1] || !r->xn || !r->final || !r->proj || !r->q || !r->k || !r->v ||
        (c->qk_norm && (!r->q_raw || !r->k_raw)) || !r->attn || !r->gate || !r->up ||
        !r->act || !r->cos_sin || !r->rows || !r->zero_ids ||
        (!r->be->ops->alloc && (!r->lr_cs || !r->lr_i32 || !r->lr_slots))) {
        srt_runner_free(r);
        return srt_err_set(err, "runner: out of memory for %d batch tokens", o->max_batch_tokens);
    }
    /* size matmul scratch for the largest call of each weight */
    const srt_backend_ops *ops = r->be->ops;
    int rc = ops->reserve_matmul(r->be, &r->lm_head.w, r->max_seqs, err);
    for (int32_t l = 0; l < c->n_layers && rc == SRT_OK; l++) {
        const srt_layer *L = &r->layers[l];
        const srt_linear *ls[] = { &L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down };
        for (size_t i = 0; i < 7 && rc == SRT_OK; i++)
            rc = ops->reserve_matmul(r->be, &ls[i]->w, r->max_tok, err);
    }
    if (rc == SRT_OK && ops->load_weight)
        rc = load_weights(r, err);
    if (rc == SRT_OK && r->own_be && o->device == SRT_RUNNER_CPU && !o->weights_mmap)
        rc = runner_make_resident(r, err);
    if (rc == SRT_OK)
        rc = runner_graphs_setup(r, o, err);
    if (rc != SRT_OK) {
        srt_runner_free(r);
        return SRT_ERROR;
    }
    *out = r;
    return SRT_OK;
}

int srt_runner_n_threads(const srt_runner *r) { return r->be->ops->n_threads(r->be); }

srt_backend *srt_runner_backend(srt_runner *r) { return r->be; }

static int validate(const srt_runner *r, const srt_kv_pool *kv, const srt_forward_batch *b, srt_err *err)
{
    const srt_model_config *c = &r->m->cfg;
    if (!b || !kv)
        return srt_err_set(err, "forward: batch and kv pool are required");
    if (b->n_tokens <= 0 || b->n_tokens > r->max_tok)
        return srt_err_set(err, "forward: n_tokens %d outside [1, %d]", b->n_tokens, r->max_tok);
    if (b->n_seqs <= 0 || b->n_seqs > b->n_tokens)
        return srt_err_set(err, "forward: n_seqs %d outside [1, n_tokens=%d]", b->n_seqs, b->n_tokens);
    if (!b->token_ids || !b->positions || !b->out_slots || !b->seq_start || !b->seq_len || !b->seq_slots)
        return srt_err_set(err, "forward: token_ids, positions, out_slots, seq_start, seq_len and seq_slots are required");
    if (srt_kv_pool_n_layers(kv) != c->n_layers || srt_kv_pool_row_elems(kv) != r->nkv * c->head_dim)
        return srt_err_set(err, "forward: kv pool was made for another model shape or tensor-parallel size");
    int32_t n_rows = b->logit_rows ? b->n_logit_rows : b->n_seqs;
    if (n_rows < 0 || n_rows > r->max_seqs)
        return srt_err_set(err, "forward: %d logit rows, runner holds at most %d", n_rows, r->max_seqs);
    int32_t n_slots = srt_kv_pool_n_slots(kv);
    if (b->seq_start[0] != 0 || b->seq_start[b->n_seqs] != b->n_tokens)
        return srt_err_set(err, "forward: seq_start must run from 0 to n_tokens");
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t t0 = b->seq_start[s], t1 = b->seq_start[s + 1], len = b->seq_len[s];
        if (t1 <= t0 || t1 > b->n_tokens)
            return srt_err_set(err, "forward: sequence %d has an empty or bad token range [%d, %d)", s, t0, t1);
        if (len <= 0 || !b->seq_slots[s])
            return srt_err_set(err, "forward: sequence %d has no context (seq_len %d)", s, len);
        for (int32_t j = 0; j < len; j++)
            if (b->seq_slots[s][j] < 0 || b->seq_slots[s][j] >= n_slots)
                return srt_err_set(err, "forward: sequence %d position %d uses slot %d outside [0, %d)", s, j,
                                   b->seq_slots[s][j], n_slots);
        for (int32_t t = t0; t < t1; t++) {
            if (b->token_ids[t] < 0 || b->token_ids[t] >= c->vocab_size)
                return srt_err_set(err, "forward: token %d has id %d outside the vocabulary [0, %d)", t,
                                   b->token_ids[t], c->vocab_size);
            if (b->positions[t] < 0 || b->positions[t] >= len)
                return srt_err_set(err, "forward: token %d position %d outside sequence %d's length %d", t,
                                   b->positions[t], s, len);
            if (b->out_slots[t] != b->seq_slots[s][b->positions[t]])
                return srt_err_set(err, "forward: token %d writes slot %d but its sequence maps position %d to slot %d",
                                   t, b->out_slots[t], b->positions[t], b->seq_slots[s][b->positions[t]]);
        }
    }
    for (int32_t i = 0; b->logit_rows && i < n_rows; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens)
            return srt_err_set(err, "forward: logit row %d is token %d outside the batch", i, b->logit_rows[i]);
    return SRT_OK;
}

/* tp > 1: lm_head gives this rank's vocab columns of the logits (hooks see that slice), the
 * ranks' slices are gathered and laid out in vocab order, exactly vocab_size wide. */
static int logits_vocab_parallel(srt_runner *r, int32_t n_rows, float *logits, srt_err *err)
{
    int64_t H = r->m->cfg.hidden_size, V = r->m->cfg.vocab_size, VP = r->vocab_pad;
    call cl = { r, &r->lm_head, -1 };
    srt_module_args a;
    srt_tensor_view lo = fview(r->lm_part, n_rows, r->vocab_n);
    args1(&a, fview(r->rows, n_rows, H));
    if (forward_module(r, r->m->lm_head.module, linear_fn, &cl, &a, &lo) != SRT_OK)
        return SRT_ERROR;
    size_t n = (size_t)n_rows * (size_t)VP;   /* the same on every rank; a short last slice is padded */
    if (srt_comm_all_gather_f32(r->tcomm, r->lm_part, n, r->lm_all, err) != SRT_OK)
        return SRT_ERROR;
    const float *all = r->lm_all;
    if (r->on_dev) {
        if (r->be->ops->download(r->be, r->h_lm_all, r->lm_all, (size_t)r->tp_size * n * sizeof(float), err) != SRT_OK)
            return SRT_ERROR;
        all = r->h_lm_all;
    }
    for (int k = 0; k < r->tp_size; k++) {
        int64_t k0 = (int64_t)k * VP, nk = V - k0 < VP ? V - k0 : VP;
        const float *blk = all + (size_t)k * n;   /* [n_rows][nk] */
        for (int32_t i = 0; i < n_rows; i++)
            memcpy(logits + (size_t)i * V + k0, blk + (size_t)i * nk, (size_t)nk * sizeof(float));
    }
    return SRT_OK;
}

/* Backend memory: gather the logit rows' hidden states on the device, lm_head there, one download
 * (which also reports any op's error of the step). */
int runner_logits_on_device(srt_runner *r, const srt_forward_batch *b, float *logits, srt_err *err)
{
    srt_model *m = r->m;
    int64_t H = m->cfg.hidden_size, V = m->cfg.vocab_size;
    int32_t n_rows = b->logit_rows ? b->n_logit_rows : b->n_seqs;
    if (n_rows <= 0)
        return r->be->ops->sync(r->be, err);
    for (int32_t i = 0; i < n_rows; i++)
        r->h_rows[i] = logit_row(b, i);
    if (r->be->ops->upload(r->be, r->d_rows, r->h_rows, (size_t)n_rows * sizeof(int32_t), err) != SRT_OK)
        return SRT_ERROR;
    r->be->ops->gather_rows(r->be, r->rows, r->final, r->d_rows, n_rows, H);
    if (r->tcomm)
        return logits_vocab_parallel(r, n_rows, logits, err);
    call cl = { r, &r->lm_head, -1 };
    srt_module_args a;
    srt_tensor_view lo = fview(r->d_logits, n_rows, V);
    args1(&a, fview(r->rows, n_rows, H));
    if (forward_module(r, m->lm_head.module, linear_fn, &cl, &a, &lo) != SRT_OK)
        return SRT_ERROR;
    return r->be->ops->download(r->be, logits, r->d_logits, (size_t)n_rows * (size_t)V * sizeof(float), err);
}

/* The model module over the step's T tokens (r->ids, r->pos, already where the ops read
 * them) into r->final: the eager path and the body of a decode graph. */
int runner_model_forward(srt_runner *r, int64_t T)
{
    srt_module_args a;
    srt_tensor_view fin = fview(r->final, T, r->m->cfg.hidden_size);
    call cm = { r, NULL, -1 };
    args1(&a, view((void *)r->ids, 1, T, 0, 0, SRT_HOOK_DTYPE_I32));
    a.n_kwargs = 1;
    a.kwarg_names[0] = "position_ids";
    a.kwargs[0] = view((void *)r->pos, 1, T, 0, 0, SRT_HOOK_DTYPE_I32);
    return forward_module(r, r->m->m_model, model_fn, &cm, &a, &fin);
}

int srt_runner_forward(srt_runner *r, srt_kv_pool *kv, const srt_forward_batch *b, float *logits, srt_err *err)
{
    srt_model *m = r->m;
    int64_t T, H = m->cfg.hidden_size;
    if (err)
        err->msg[0] = 0;
    if (validate(r, kv, b, err) != SRT_OK)
        return SRT_ERROR;
    int32_t bs = runner_graph_size(r, kv, b);
    if (bs > 0)
        return runner_forward_graph(r, kv, b, bs, logits, err);
    T = b->n_tokens;
    r->ctx = (srt_batch_ctx){
        .forward_mode = b->forward_mode, .n_tokens = b->n_tokens,
        .request_ids = b->request_ids ? b->request_ids : r->zero_ids, .positions = b->positions,
        .n_seqs = b->n_seqs, .tp_rank = r->tp_rank, .tp_size = r->tp_size,
    };
    if (r->on_dev) {
        /* validated on the host; the ops read the device copies */
        const srt_backend_ops *ops = r->be->ops;
        if (ops->upload(r->be, r->d_ids, b->token_ids, (size_t)T * sizeof(int32_t), err) != SRT_OK ||
            ops->upload(r->be, r->d_pos, b->positions, (size_t)T * sizeof(int32_t), err) != SRT_OK ||
            ops->begin_batch(r->be, b, err) != SRT_OK)
            return SRT_ERROR;
        r->ids = r->d_ids;
        r->pos = r->d_pos;
    } else {
        r->ids = b->token_ids;
        r->pos = b->positions;
    }
    r->b = b;
    r->kv = kv;
    r->err = err;
    srt_module_args a;
    srt_hooks_device_step(r->on_dev ? r->d_pos : NULL);
    int rc = runner_model_forward(r, T);
    srt_hooks_device_step(NULL);
    if (rc == SRT_OK && r->on_dev) {
        rc = runner_logits_on_device(r, b, logits, err);
    } else if (rc == SRT_OK) {
        int32_t n_rows = b->logit_rows ? b->n_logit_rows : b->n_seqs;
        for (int32_t i = 0; i < n_rows; i++) {
            int32_t t = r->rows_kept ? i : logit_row(b, i);
            memcpy(r->rows + (size_t)i * H, r->final + (size_t)t * H, (size_t)H * sizeof(float));
        }
        if (n_rows > 0 && r->tcomm) {
            rc = logits_vocab_parallel(r, n_rows, logits, err);
        } else if (n_rows > 0) {
            call cl = { r, &r->lm_head, -1 };
            srt_tensor_view lo = fview(logits, n_rows, m->cfg.vocab_size);
            args1(&a, fview(r->rows, n_rows, H));
            rc = forward_module(r, m->lm_head.module, linear_fn, &cl, &a, &lo);
        }
    }
    r->b = NULL;
    r->kv = NULL;
    r->err = NULL;
    return rc;
}
