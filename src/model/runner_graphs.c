/* CUDA-graph decode steps: the runner's forward recorded once per padded batch size and
 * replayed (backend graph ops, one rank). Everything here is about when a graph still holds
 * (hooks, the KV pool it was captured with) and the padded batch it runs on. */
#include <stdlib.h>
#include <string.h>

#include "model/runner_internal.h"
#include "srt/backend.h"
#include "srt/backend_cuda.h"

/* Decode graphs need a backend with memory of its own and graph ops, one rank (the tensor
 * collectives are not recorded), and are on unless turned off. */
int runner_graphs_setup(srt_runner *r, const srt_runner_opts *o, srt_err *err)
{
    const srt_backend_ops *ops = r->be->ops;
    const char *env = getenv("SRT_GRAPHS");
    int want = o->graphs == SRT_RUNNER_GRAPHS_ON ||
               (o->graphs == SRT_RUNNER_GRAPHS_AUTO && !(env && strcmp(env, "0") == 0));
    if (!want || !r->on_dev || r->tcomm || !ops->graph_capture || !ops->graph_ready || !ops->graph_replay ||
        !ops->graph_clear) {
        if (srt_backend_is_cuda(r->be))
            srt_log(SRT_LOG_INFO, "runner: decode steps run eagerly (no CUDA graphs: %s)",
                    r->tcomm ? "tensor parallel" : !want ? "turned off" : "not supported");
        return SRT_OK;
    }
    int32_t cap = r->max_tok < SRT_GRAPH_MAX_BS ? r->max_tok : SRT_GRAPH_MAX_BS;
    int32_t L = r->m->cfg.n_layers;
    r->g_ids = malloc((size_t)cap * sizeof(int32_t));
    r->g_pos = malloc((size_t)cap * sizeof(int32_t));
    r->g_out = malloc((size_t)cap * sizeof(int32_t));
    r->g_start = malloc(((size_t)cap + 1) * sizeof(int32_t));
    r->g_len = malloc((size_t)cap * sizeof(int32_t));
    r->g_slots = malloc((size_t)cap * sizeof(*r->g_slots));
    r->g_kv = calloc(2 * (size_t)L, sizeof(void *));
    if (!r->g_ids || !r->g_pos || !r->g_out || !r->g_start || !r->g_len || !r->g_slots || !r->g_kv)
        return srt_err_set(err, "runner: out of memory for decode graphs");
    r->g_cap = cap;
    r->graphs = 1;
    r->gstats.enabled = 1;
    if (srt_backend_is_cuda(r->be)) {
        int32_t top = cap;
        while (top > 1 && srt_cuda_graph_bucket(top) != top)
            top--;
        srt_log(SRT_LOG_INFO, "runner: decode steps replay CUDA graphs (batches padded to 1, 2, 4, 8, 16, 24, ... up to %d)",
                top);
    }
    return SRT_OK;
}

void srt_runner_graphs_clear(srt_runner *r)
{
    if (!r || !r->g_live)
        return;
    r->be->ops->graph_clear(r->be);
    r->g_live = 0;
    r->gstats.clears++;
}

void srt_runner_graph_stats_get(const srt_runner *r, srt_runner_graph_stats *out)
{
    *out = r->gstats;
}

/* 2: some hook runs host code (the step must be eager); 1: only device hooks, captured with
 * the graph; 0: none. Graphs captured under other hooks are dropped (their recording has the
 * old hooks' work, or lacks the new ones'). */
static int graph_hooks(srt_runner *r)
{
    uint64_t gen;
    int state = srt_hooks_graph_state(r->m->modules, r->m->n_modules, &gen);
    if (state == 2) {
        srt_runner_graphs_clear(r);
        return 2;
    }
    if (gen != r->g_hook_gen) {
        srt_runner_graphs_clear(r);
        r->g_hook_gen = gen;
        r->g_hook_refused = 0;
    }
    return state;
}

/* The graphs write and read the KV pool they were captured with: another one drops them. */
static void graph_kv(srt_runner *r, srt_kv_pool *kv)
{
    int32_t L = r->m->cfg.n_layers;
    int same = r->g_kv_dtype == srt_kv_pool_dtype(kv);
    for (int32_t l = 0; l < L && same; l++)
        same = r->g_kv[2 * l] == srt_kv_pool_k(kv, l) && r->g_kv[2 * l + 1] == srt_kv_pool_v(kv, l);
    if (!same) {
        srt_runner_graphs_clear(r);
        for (int32_t l = 0; l < L; l++) {
            r->g_kv[2 * l] = srt_kv_pool_k(kv, l);
            r->g_kv[2 * l + 1] = srt_kv_pool_v(kv, l);
        }
        r->g_kv_dtype = srt_kv_pool_dtype(kv);
    }
}

/* The padded batch size a step replays at, or -1: run it eagerly. Also drops graphs that no
 * longer hold: the hooks changed (a host hook must run eagerly; device hooks are captured with
 * the graph, so graphs made under other hooks go), or the KV pool is not the one the graphs
 * write (other addresses or dtype). */
int32_t runner_graph_size(srt_runner *r, srt_kv_pool *kv, const srt_forward_batch *b)
{
    if (!r->graphs)
        return -1;
    int decode = b->forward_mode == SRT_FORWARD_DECODE && b->n_tokens == b->n_seqs;
    if (graph_hooks(r) == 2 || r->g_hook_refused) {
        r->gstats.eager_hooked += decode;
        return -1;
    }
    if (!decode)
        return -1;
    int32_t bs = srt_cuda_graph_bucket(b->n_seqs);
    if (bs < 1 || bs > r->g_cap)
        return -1;
    graph_kv(r, kv);
    return bs;
}

/* The body of a decode graph: the model's forward over the padded batch, every op on the
 * runner's fixed buffers (ids, positions, activations, the KV pool, the backend's batch
 * metadata), nothing uploaded, downloaded or read back. Hooks, if any, are device hooks: their
 * device entries enqueue on the backend's stream and are recorded with the ops (graph_size). */
static int graph_body(void *user, srt_err *err)
{
    srt_runner *r = user;
    srt_err *saved = r->err;
    r->err = err;
    int rc = runner_model_forward(r, r->g_batch.n_tokens);
    r->err = saved;
    return rc;
}

/* A decode step from the graph of bs sequences: the batch padded to bs on the host (padded
 * tokens: id 0, position -1, out_slot -1, no context), its ids and positions uploaded to the
 * same buffers as every step, announced eagerly; then the graph (captured now after an eager
 * run of the same body if this size has none), and lm_head on the real rows (logits NULL:
 * none, the warm-up's batches of padding only, b->n_seqs == 0). */
int runner_forward_graph(srt_runner *r, srt_kv_pool *kv, const srt_forward_batch *b, int32_t bs, float *logits,
                         srt_err *err)
{
    static const int32_t no_slots[1] = { 0 };
    const srt_backend_ops *ops = r->be->ops;
    int32_t n = b->n_seqs;
    for (int32_t s = 0; s < bs; s++) {
        int real = s < n;
        r->g_ids[s] = real ? b->token_ids[s] : 0;
        r->g_pos[s] = real ? b->positions[s] : -1;
        r->g_out[s] = real ? b->out_slots[s] : -1;
        r->g_len[s] = real ? b->seq_len[s] : 0;
        r->g_slots[s] = real ? b->seq_slots[s] : no_slots;
        r->g_start[s] = s;
    }
    r->g_start[bs] = bs;
    r->g_batch = (srt_forward_batch){
        .n_tokens = bs, .token_ids = r->g_ids, .positions = r->g_pos, .out_slots = r->g_out, .n_seqs = bs,
        .seq_start = r->g_start, .seq_len = r->g_len, .seq_slots = (const int32_t *const *)r->g_slots,
        .forward_mode = SRT_FORWARD_DECODE,
    };
    r->ctx = (srt_batch_ctx){
        .forward_mode = SRT_FORWARD_DECODE, .n_tokens = bs, .request_ids = r->zero_ids, .positions = r->g_pos,
        .n_seqs = bs, .tp_rank = r->tp_rank, .tp_size = r->tp_size,
    };
    if (ops->upload(r->be, r->d_ids, r->g_ids, (size_t)bs * sizeof(int32_t), err) != SRT_OK ||
        ops->upload(r->be, r->d_pos, r->g_pos, (size_t)bs * sizeof(int32_t), err) != SRT_OK ||
        ops->begin_batch(r->be, &r->g_batch, err) != SRT_OK)
        return SRT_ERROR;
    r->ids = r->d_ids;
    r->pos = r->d_pos;
    r->b = &r->g_batch;
    r->kv = kv;
    r->err = err;
    srt_hooks_device_step(r->d_pos);
    int rc;
    if (ops->graph_ready(r->be, bs)) {
        rc = ops->graph_replay(r->be, bs, err);
        if (rc == SRT_OK)
            r->gstats.replays++;
    } else {
        /* this step's result, and the shapes warmed up; its errors reported before capturing */
        rc = graph_body(r, err);
        if (rc == SRT_OK)
            rc = ops->sync(r->be, err);
        if (rc == SRT_OK) {
            srt_err ce = { { 0 } };
            if (ops->graph_capture(r->be, bs, graph_body, r, &ce) == SRT_OK) {
                r->g_live = 1;
                r->gstats.captures++;
            } else if (r->g_hook_gen) {
                /* with device hooks: theirs may be what failed; the eager result stands, and
                 * steps run eagerly while these hooks stay (graphs again once they change) */
                srt_log(SRT_LOG_WARN, "runner: decode graph of batch %d with device hooks not captured, "
                        "decode steps run eagerly until the hooks change: %s", bs, ce.msg);
                r->gstats.capture_failures++;
                srt_runner_graphs_clear(r);
                r->g_hook_refused = 1;
            } else {
                /* the eager result stands; later steps stay eager */
                srt_log(SRT_LOG_WARN, "runner: decode graph of batch %d not captured, graphs off: %s", bs, ce.msg);
                r->gstats.capture_failures++;
                srt_runner_graphs_clear(r);
                r->graphs = 0;
                r->gstats.enabled = 0;
            }
        }
    }
    srt_hooks_device_step(NULL);
    if (rc == SRT_OK && logits)
        rc = runner_logits_on_device(r, b, logits, err);
    r->b = NULL;
    r->kv = NULL;
    r->err = NULL;
    return rc;
}

/* The backend's batch metadata sized once for the largest step (max_batch_tokens tokens,
 * max_seqs sequences, as many context slots as kv has): a backend that grows it later
 * drops its graphs (its buffers move), which would undo the warm-up. Only announced, never
 * run on: no op reads it before the next begin_batch. */
static int graphs_reserve_meta(srt_runner *r, srt_kv_pool *kv, srt_err *err)
{
    int32_t T = r->max_tok, S = r->max_seqs < T ? r->max_seqs : T, n_slots = srt_kv_pool_n_slots(kv);
    int32_t *tok = malloc((size_t)T * 2 * sizeof(int32_t)), *start = malloc(((size_t)S + 1) * sizeof(int32_t));
    int32_t *len = malloc((size_t)S * sizeof(int32_t)), *tab = malloc(((size_t)n_slots + 1) * sizeof(int32_t));
    const int32_t **ss = malloc((size_t)S * sizeof(*ss));
    int rc = SRT_ERROR;
    if (!tok || !start || !len || !tab || !ss) {
        srt_err_set(err, "runner: graph warm-up: out of memory");
        goto out;
    }
    for (int32_t t = 0; t < 2 * T; t++)
        tok[t] = -1;   /* positions, out_slots: padding */
    for (int32_t i = 0; i < n_slots; i++)
        tab[i] = i;
    for (int32_t s = 0; s < S; s++) {
        start[s] = s;
        len[s] = n_slots / S + (s == S - 1 ? n_slots % S : 0);
        ss[s] = tab + (int64_t)s * (n_slots / S);
    }
    start[S] = T;
    srt_forward_batch b = { .n_tokens = T, .token_ids = tok, .positions = tok, .out_slots = tok + T, .n_seqs = S,
                            .seq_start = start, .seq_len = len, .seq_slots = (const int32_t *const *)ss,
                            .forward_mode = SRT_FORWARD_DECODE };
    rc = r->be->ops->begin_batch(r->be, &b, err);
out:
    free(tok);
    free(start);
    free(len);
    free(tab);
    free(ss);
    return rc;
}

int srt_runner_graphs_warmup(srt_runner *r, srt_kv_pool *kv, int32_t max_bs, srt_err *err)
{
    if (err)
        err->msg[0] = 0;
    uint64_t gen;
    if (!r || !r->graphs || srt_hooks_graph_state(r->m->modules, r->m->n_modules, &gen) == 2 ||
        graph_hooks(r) == 2 || r->g_hook_refused)
        return SRT_OK;
    const srt_model_config *c = &r->m->cfg;
    if (!kv || srt_kv_pool_n_layers(kv) != c->n_layers || srt_kv_pool_row_elems(kv) != r->nkv * c->head_dim)
        return srt_err_set(err, "runner: graph warm-up: kv pool missing or made for another model shape");
    if (max_bs <= 0 || max_bs > r->max_seqs)
        max_bs = r->max_seqs;
    graph_kv(r, kv);
    if (graphs_reserve_meta(r, kv, err) != SRT_OK)
        return SRT_ERROR;
    srt_forward_batch none = { .forward_mode = SRT_FORWARD_DECODE };   /* n_seqs 0: every row padding */
    int32_t prev = 0;
    for (int32_t n = 1; n <= max_bs; n++) {
        int32_t bs = srt_cuda_graph_bucket(n);
        if (bs == prev)
            continue;
        if (bs < 1 || bs > r->g_cap)
            break;
        prev = bs;
        if (r->be->ops->graph_ready(r->be, bs))
            continue;
        int64_t fails = r->gstats.capture_failures;
        if (runner_forward_graph(r, kv, &none, bs, NULL, err) != SRT_OK)
            return SRT_ERROR;
        if (r->gstats.capture_failures != fails && r->g_hook_refused)
            return SRT_OK;   /* logged; eager while these device hooks stay */
        if (r->gstats.capture_failures != fails)   /* logged; graphs are off now */
            return srt_err_set(err, "runner: graph warm-up: capture of batch %d failed, graphs off", bs);
    }
    return SRT_OK;
}
