/* Private to src/model: the runner's state, shared by the eager forward (runner.c) and the
 * CUDA-graph decode path (runner_graphs.c). */
#ifndef SRT_MODEL_RUNNER_INTERNAL_H
#define SRT_MODEL_RUNNER_INTERNAL_H

#include "model/model_internal.h"
#include "srt/backend.h"
#include "srt/comm.h"

struct srt_runner {
    srt_model   *m;
    srt_backend *be;
    int          own_be;           /* 0: opts.backend, the caller's */
    srt_comm    *comm;             /* tensor parallel group (control), NULL for one rank */
    srt_comm    *tcomm;            /* its tensor collectives: comm, or NCCL on a CUDA backend */
    srt_comm    *own_tcomm;        /* tcomm when the runner made it (NCCL), freed with it */
    srt_layer   *layers;           /* this rank's weight views (all of them for one rank) */
    void        *wmem;             /* CPU: the copy the views point into (resident.c), or NULL */
    size_t       wmem_len;
    /* vocab parallel: this rank's rows [vocab_lo, vocab_lo + vocab_n) of the embedding and of
     * lm_head, vocab_pad = ceil(vocab / tp) rows per rank (the last rank may hold fewer) */
    srt_weight   embed;
    srt_linear   lm_head;
    int64_t      vocab_lo, vocab_n, vocab_pad;
    int32_t      nh, nkv, ffn;     /* this rank's heads, KV heads, intermediate features */
    int32_t      max_tok, max_seqs;
    int32_t      tp_rank, tp_size;
    /* activations, [max_tok][width] */
    float *resid[2], *xn, *final, *proj;
    float *q, *k, *v, *q_raw, *k_raw, *attn;
    float *gate, *up, *act;
    float *cos_sin;            /* [max_tok][2][head_dim] */
    float *rows;               /* [max_seqs][hidden]: hidden states of logit rows */
    uint64_t *zero_ids;
    /* the last layer at the logit rows only (runner.c, last_rows; host backend): their cos/sin
     * [max_seqs][2][head_dim], and a batch of one-token sequences (ids 0, positions, slots,
     * seq_len, seq_start [max_seqs + 1] in lr_i32; seq_slots) */
    float          *lr_cs;
    int32_t        *lr_i32, *zero_ids_i32, *lr_pos, *lr_out, *lr_len, *lr_start;
    const int32_t **lr_slots;
    int             rows_kept;  /* this step's final holds the logit rows, in order, not every token */
    /* a backend with memory of its own (CUDA): the step's ids, positions and logit row indices
     * are uploaded there, logits computed there and downloaded; NULL on the CPU backend */
    int      on_dev;
    const int32_t *ids, *pos;   /* the step's ids and positions in backend memory */
    int32_t *d_ids, *d_pos, *d_rows, *h_rows;
    float   *d_logits;
    /* tp > 1: the step's ids local to this rank's vocab rows (0 for other ranks' ids); on a
     * backend with memory of its own also their device copy, the row each token's embedding
     * is gathered from (max_tok: a zero row) and the staging of the lookup [max_tok + 1][hidden] */
    int32_t *h_lids, *h_eidx, *d_lids, *d_eidx;
    float   *d_estage;
    /* tp > 1: this rank's logit columns [max_seqs][vocab_pad] and every rank's, gathered
     * [tp][max_seqs * vocab_pad] (backend memory), with a host copy on a device backend */
    float   *lm_part, *lm_all, *h_lm_all;
    /* decode graphs (backend graph ops, tp == 1): the padded batch of a graph step lives here,
     * at one address, as the graph's ops were recorded with it; its arrays hold g_cap entries */
    int      graphs;
    int32_t  g_cap;
    int      g_live;                  /* graphs captured since the last clear */
    uint64_t g_hook_gen;              /* the device hooks the graphs hold (srt_hooks_graph_state), 0: none */
    int      g_hook_refused;          /* a capture with these hooks failed: eager until they change */
    srt_forward_batch g_batch;
    int32_t *g_ids, *g_pos, *g_out, *g_start, *g_len;
    const int32_t **g_slots;
    /* the KV pool the live graphs write and read: per-layer K, V addresses and dtype */
    void   **g_kv;
    srt_dtype g_kv_dtype;
    srt_runner_graph_stats gstats;
    /* the step in flight */
    srt_batch_ctx            ctx;
    const srt_forward_batch *b;
    srt_kv_pool             *kv;
    srt_err                 *err;
};

/* runner.c */
int runner_model_forward(srt_runner *r, int64_t T);
int runner_logits_on_device(srt_runner *r, const srt_forward_batch *b, float *logits, srt_err *err);

/* resident.c: copy the weights the runner reads (its views) into memory of its own, in 2 MB
 * pages where the kernel gives them, and point the views there; released with the runner */
int  runner_make_resident(srt_runner *r, srt_err *err);
void runner_release_resident(srt_runner *r);

/* runner_graphs.c */
int     runner_graphs_setup(srt_runner *r, const srt_runner_opts *o, srt_err *err);
/* The padded batch size this step replays at, or -1: run it eagerly. */
int32_t runner_graph_size(srt_runner *r, srt_kv_pool *kv, const srt_forward_batch *b);
int     runner_forward_graph(srt_runner *r, srt_kv_pool *kv, const srt_forward_batch *b, int32_t bs,
                             float *logits, srt_err *err);

#endif
