/* A loaded model (HF checkpoint directory or GGUF file) and its runner.
 *
 *   srt_model  *m;  srt_model_load("/models/x" or "x.gguf", &m, &err);
 *   srt_runner *r;  srt_runner_create(m, &(srt_runner_opts){ .max_batch_tokens = 2048,
 *                                      .max_seqs = 64, .n_threads = 8 }, &r, &err);
 *   srt_kv_pool *kv; srt_kv_pool_create(srt_model_config_of(m), n_slots, SRT_F32, &kv, &err);
 *   srt_runner_forward(r, kv, &batch, logits, &err);   // logits: [rows][vocab]
 *
 * Weights stay as stored in the file (mmapped, quantized or not). The runner owns every
 * activation buffer, sized at creation, so a forward step allocates nothing. A model may
 * have several runners; a runner is used by one thread at a time. */
#ifndef SRT_MODEL_H
#define SRT_MODEL_H

#include <stdint.h>

#include "srt/batch.h"
#include "srt/common.h"
#include "srt/kv.h"
#include "srt/module.h"
#include "srt/tensor.h"

typedef enum srt_arch {
    SRT_ARCH_LLAMA = 0,   /* LlamaForCausalLM */
    SRT_ARCH_QWEN2,       /* Qwen2ForCausalLM: q/k/v bias */
    SRT_ARCH_QWEN3,       /* Qwen3ForCausalLM: per-head q_norm / k_norm */
} srt_arch;

typedef enum srt_rope_type {
    SRT_ROPE_DEFAULT = 0,
    SRT_ROPE_LINEAR,
    SRT_ROPE_LLAMA3,
} srt_rope_type;

#define SRT_MAX_EOS 8

typedef struct srt_model_config {
    srt_arch arch;
    char     architecture[64];    /* "LlamaForCausalLM" */
    int32_t  vocab_size;
    int32_t  hidden_size;
    int32_t  intermediate_size;
    int32_t  n_layers;
    int32_t  n_heads;
    int32_t  n_kv_heads;
    int32_t  head_dim;
    int32_t  max_position_embeddings;
    float    rms_norm_eps;
    float    rope_theta;
    srt_rope_type rope_type;
    float    rope_factor;               /* linear, llama3 */
    float    rope_low_freq_factor;      /* llama3 */
    float    rope_high_freq_factor;     /* llama3 */
    int32_t  rope_original_max_pos;     /* llama3 */
    int32_t  tie_word_embeddings;
    int32_t  bos_token_id;              /* -1 when unknown */
    int32_t  pad_token_id;              /* -1 when unknown */
    int32_t  n_eos;
    int32_t  eos_token_ids[SRT_MAX_EOS];
    int32_t  is_gguf;
    /* What the loader and the forward do differently per architecture, derived once from
     * arch by the config loaders (srt_config_check): code tests these, never arch. A new
     * architecture sets its flags there. */
    int32_t  qk_norm;             /* per-head RMSNorm of q and k before RoPE (Qwen3) */
    int32_t  qk_rows_permuted;    /* GGUF llama: q/k rows in llama.cpp's rotary order */
} srt_model_config;

typedef struct srt_model srt_model;

/* path: a directory with config.json + safetensors, or a .gguf file. */
SRT_API int  srt_model_load(const char *path, srt_model **out, srt_err *err);
SRT_API void srt_model_free(srt_model *m);

SRT_API const srt_model_config *srt_model_config_of(const srt_model *m);

/* What each module's forward sees (T = tokens in the step, all f32 on the CPU unless noted;
 * shapes flatten HF's [batch=1, seq] into T, as SGLang's flattened batches do):
 *   model                   in: input_ids [T] i32, kwarg position_ids [T] i32;  out: [T, hidden] (after model.norm)
 *   model.embed_tokens      in: input_ids [T] i32                               out: [T, hidden]
 *   model.rotary_emb        in: [T, hidden], kwarg position_ids                 out: [T, 2, head_dim] (cos, sin)
 *   model.layers.N          in: [T, hidden], kwarg position_embeddings [T, 2, head_dim]   out: [T, hidden]
 *   ...input_layernorm, post_attention_layernorm, model.norm: [T, hidden] -> [T, hidden]
 *   ...self_attn            in: [T, hidden], kwarg position_embeddings          out: [T, hidden] (o_proj output)
 *   ...q_proj / k_proj / v_proj   [T, hidden] -> [T, heads * head_dim] (KV heads for k/v)
 *   ...q_norm / k_norm (Qwen3)    [T, heads, head_dim] -> same, before RoPE
 *   ...o_proj               [T, heads * head_dim] -> [T, hidden]
 *   ...mlp                  [T, hidden] -> [T, hidden]
 *   ...gate_proj / up_proj  [T, hidden] -> [T, intermediate];  act_fn: silu, same shape
 *   ...down_proj            [T, intermediate] -> [T, hidden]
 *   lm_head                 [R, hidden] -> [R, vocab] for the R logit rows only
 * Outputs may be modified in place by hooks. With tensor parallelism a rank sees its shard of
 * q/k/v/gate/up/act (heads, intermediate features) and of lm_head (its vocab columns,
 * [R, rows of its vocab shard]), and full tensors elsewhere: o_proj, down_proj and
 * embed_tokens outputs are seen after their all-reduce, the same on every rank, so a hook
 * that changes them changes them once, not once per rank. */

/* The module tree in HF named_modules() order, without the unnamed root
 * ("model", "model.embed_tokens", "model.layers", "model.layers.0", ...,"lm_head").
 * The hook engine sets modules[i].hooks; the array lives as long as the model. */
SRT_API srt_module *srt_model_modules(srt_model *m, int *n);
SRT_API int         srt_model_find_module(const srt_model *m, const char *name);   /* index or -1 */

/* A weight by its HF name ("model.layers.0.mlp.up_proj.weight"), as stored. NULL if absent. */
SRT_API const srt_weight *srt_model_weight(const srt_model *m, const char *hf_name);

/* ---- runner: activations and compute for forward steps ---- */
typedef struct srt_runner srt_runner;

struct srt_comm;
struct srt_nccl_lib;

typedef struct srt_runner_opts {
    int32_t max_batch_tokens;   /* most tokens in one forward step (chunked prefill size) */
    int32_t max_seqs;           /* most sequences / logit rows in one step */
    int32_t n_threads;          /* <= 0: all online cores */
    int32_t tp_rank, tp_size;   /* ignored when comm is set (taken from it); else 0/1 */
    /* Tensor parallelism (Megatron style, as SGLang): with a communicator of size > 1 this
     * runner holds rank comm->rank's shard: q/k/v and gate/up split by output rows (heads,
     * intermediate features), o_proj and down_proj by input columns followed by an all-reduce
     * of their output; the embedding and lm_head split by vocab rows (vocab parallel: rank k
     * holds rows [k*Vp, min((k+1)*Vp, vocab)), Vp = ceil(vocab / size); the embedding looks up
     * its own ids, zeros for the others, then an all-reduce; lm_head's slices of the logits are
     * all-gathered and put back in vocab order). On a device backend shards are views into the
     * stored weights; the CPU runner copies its shard (see weights_mmap). Every rank runs the same batches; each returns the full logits, exactly
     * vocab_size wide. Hooks see their rank's shard of q/k/v/gate/up/act outputs and of
     * lm_head's output ([R, rows of this rank] = vocab columns [k*Vp, k*Vp + rows)), and full
     * tensors elsewhere (the embedding's output after its all-reduce, equal on every rank).
     * The KV pool of a rank comes from srt_kv_pool_create_tp() (srt_kv_pool_create_on() on a
     * device backend). Needs heads, KV heads and intermediate_size divisible by the size,
     * each rank's column slice aligned to the weight's quantization block, and at least one
     * vocab row for every rank.
     * comm carries the control messages (the NCCL unique id here; batches and hook commands
     * in the scheduler's rank group) and, unless tensor_comm or nccl says otherwise, the
     * tensor collectives too, which are given the backend's memory: the CPU communicator on
     * the CPU backend (or a host-memory test backend). */
    struct srt_comm *comm;
    /* The tensor collectives (all-reduce after row-parallel linears and the embedding, the
     * lm_head all-gather) on another communicator of the same rank and size, the caller's:
     * NCCL over the backend's memory on CUDA, as SGLang's pynccl group. NULL: comm. */
    struct srt_comm *tensor_comm;
    /* Or: the runner makes its own NCCL tensor communicator (freed with it) on its backend's
     * stream: rank 0 makes the unique id and broadcasts it over comm, every rank then joins.
     * All ranks must pass it. The CUDA backend with tp > 1 needs one of the two. */
    struct srt_nccl_lib *nccl;
    int32_t precise_matmul;     /* f32 activations x dequantized weights (HF-exact path) instead
                                   of 8-bit quantized activations (fast path, llama.cpp-like) */
    int32_t kv_cache_dtype;     /* KV pools made by srt_tp_group_setup: 0 the default (bf16 on
                                   CUDA, f32 on the CPU), else 1 + their srt_dtype */
    /* SRT_RUNNER_CPU (0, the default) or SRT_RUNNER_CUDA: the CUDA backend plugin on device
     * device_index with mem_fraction (0, 1] of its memory (<= 0: 0.85) as its pool
     * (srt/backend_cuda.h). With tp > 1 each rank gives its own device_index (one GPU per
     * rank) and an NCCL tensor communicator (nccl or tensor_comm above); the KV pool then
     * comes from srt_kv_pool_create_on() with srt_runner_backend(). */
    int32_t device;
    int32_t device_index;
    double  mem_fraction;
    /* A backend to compute on instead of making one (device is then ignored); the caller keeps
     * it and frees it after the runner (tests drive the device path with it). */
    struct srt_backend *backend;
    /* Decode steps from backend graphs (CUDA graphs; srt/backend_cuda.h "CUDA graphs"):
     * SRT_RUNNER_GRAPHS_AUTO (0, the default): on where the backend has graph ops (CUDA) and
     * tp == 1, unless the environment has SRT_GRAPHS=0; _ON: the same, whatever the environment
     * says; _OFF: every step eagerly (A/B comparisons, debugging). Steps any hook matches, prefill
     * and mixed batches always run eagerly. */
    int32_t graphs;
    /* The runner's own CPU backend (not opts.backend): 0 (the default): the weights it reads (its shard) are copied out
     * of the checkpoint's file mapping into memory of its own, in 2 MB pages where the kernel
     * gives them (a decode step streams every weight; 4 KB file pages cost a TLB miss and a
     * stalled prefetcher every 4 KB). 1: read in place from the mapping (no copy: the page
     * cache is shared with other processes mapping the file, and loading is faster). */
    int32_t weights_mmap;
} srt_runner_opts;
enum { SRT_RUNNER_CPU = 0, SRT_RUNNER_CUDA = 1 };
enum { SRT_RUNNER_GRAPHS_AUTO = 0, SRT_RUNNER_GRAPHS_ON = 1, SRT_RUNNER_GRAPHS_OFF = -1 };

SRT_API int  srt_runner_create(srt_model *m, const srt_runner_opts *opts, srt_runner **out, srt_err *err);
/* The backend the runner computes on (owned by the runner); KV pools for it are made on it. */
SRT_API struct srt_backend *srt_runner_backend(srt_runner *r);
SRT_API void srt_runner_free(srt_runner *r);

/* Runs one step: writes K/V of every token of the batch into kv, and logits for the
 * logit rows (see srt_forward_batch) into logits[rows][vocab_size] (f32).
 * The batch is validated (sizes, slots, positions, token ids) before anything runs. */
SRT_API int srt_runner_forward(srt_runner *r, srt_kv_pool *kv, const srt_forward_batch *b,
                               float *logits, srt_err *err);

/* The threads the runner computes with (shared by its backend). */
SRT_API int srt_runner_n_threads(const srt_runner *r);
/* Bytes of the runner's own copy of its weights (srt_runner_opts.weights_mmap), 0 when it
 * reads them in place or from a device's memory. */
SRT_API size_t srt_runner_weights_copied(const srt_runner *r);

/* Decode graphs: what the runner did so far. */
typedef struct srt_runner_graph_stats {
    int     enabled;          /* graphs are in use (backend has them, tp == 1, not turned off) */
    int64_t captures;         /* graphs captured (once per padded batch size, again after a clear) */
    int64_t replays;          /* decode steps replayed from a graph */
    int64_t eager_hooked;     /* decode steps run eagerly because of hooks (host code, or a failed capture) */
    int64_t clears;           /* times the graphs were dropped (hooks seen, another KV pool, on demand) */
    int64_t capture_failures; /* captures that failed (logged; graphs then turned off, or with device
                               * hooks: eager until the hooks change) */
} srt_runner_graph_stats;
SRT_API void srt_runner_graph_stats_get(const srt_runner *r, srt_runner_graph_stats *out);
/* Drops every captured graph; the next decode step of each size captures again. For a caller
 * that changed something a graph captured (the runner itself notices hooks and KV pools). */
void srt_runner_graphs_clear(srt_runner *r);   /* libsrt only */
/* Captures, at startup, the decode graph of every padded batch size (srt_cuda_graph_bucket)
 * a step of 1 .. max_bs sequences uses (max_bs <= 0 or above max_seqs: max_seqs), so no
 * decode step pays a capture later (SGLang captures them all at startup too). Each is run
 * once eagerly and captured on a batch made only of padding rows (id 0, position -1,
 * out_slot -1, no context: they write no KV and read none), so kv is neither written nor
 * read: it only names the pool the graphs will write (as srt_runner_forward's). The
 * backend's batch metadata is first sized for the largest step (max_batch_tokens, max_seqs,
 * every slot of kv), so a later step does not grow it (which drops graphs). Sizes already
 * captured are skipped. Returns SRT_OK doing nothing where graphs are not in use (backend
 * without graph ops, tp > 1, turned off, any hook installed). An error (a capture that
 * failed turns graphs off for this runner, logged) leaves the runner usable: steps then
 * capture lazily or run eagerly. srt_runner_graph_stats_get().captures counts them. */
SRT_API int srt_runner_graphs_warmup(srt_runner *r, srt_kv_pool *kv, int32_t max_bs, srt_err *err);

#endif
