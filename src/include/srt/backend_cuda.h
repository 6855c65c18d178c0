/* The CUDA backend: the ops table of srt/backend.h over device memory, kernels from kernels/,
 * GEMMs through cuBLASLt (bf16 x bf16 -> f32, f32 compute), one device memory pool, CUDA graphs
 * for decode batch sizes.
 *
 * Linking. libsrt never links the CUDA runtime: the backend lives in a plugin,
 * build/lib/libsrt_cuda.so (built by `make` when nvcc is found), that these functions dlopen on
 * first use. So one libsrt.a serves CPU-only machines and GPU machines, and the nginx module
 * needs no CUDA libraries at link time. The plugin is looked up at $SRT_CUDA_PLUGIN, then at
 * the path compiled in by the build that made it, then as "libsrt_cuda.so" on the loader path.
 * Never call these in the nginx master: CUDA is initialised only in the scheduler process.
 *
 * Memory. srt_cuda_backend_create takes mem_fraction of the device's total memory in ONE
 * cudaMalloc (srt_mem_fraction_static); weights, the KV cache, activations, the cuBLASLt
 * workspace and the graph buffers all come from it (ops->alloc). Nothing else is allocated on
 * the device after creation, so an out-of-memory shows up at load time with a clear message.
 *
 * Weights. ops->load_weight(w) makes the device copy of a host weight once: 2-D weights
 * become bf16 (GGUF quantized rows dequantized on the host, row by row, with
 * srt_cpu_dequant_row), 1-D weights (norms, biases, inv_freq) stay f32. The ops find the copy
 * by the host srt_weight's (data, rows, cols), so the runner keeps passing its srt_weight
 * views unchanged. An op given a weight that was never loaded records an error that
 * ops->sync / ops->download report.
 *
 * Numerics. Activations are f32 in device memory, as the ops table says. A matmul casts its
 * input to bf16 (round to nearest even), multiplies by the bf16 weight on the tensor cores with
 * f32 accumulation, and adds the f32 bias. Norms, RoPE, softmax and attention run in f32
 * (the KV cache may be f32, f16 or bf16: SRT_F32 / SRT_F16 / SRT_BF16).
 *
 * Threads. One host thread at a time drives a backend (as a runner today); begin_batch and
 * load_weight bind the calling thread to the backend's device (cudaSetDevice), so a step may
 * run on another thread than the one that created the backend.
 *
 * Debugging. SRT_CUDA_POOL=separate gives every allocation its own exact-size cudaMalloc
 * (still counted against the pool size), so compute-sanitizer sees every buffer's bounds.
 *
 * ---- What the runner must do (src/model/runner.c) to run on this backend ----
 *  1. At create: srt_cuda_backend_create instead of srt_cpu_backend_create when
 *     srt_device is cuda (or auto and srt_cuda_probe() > 0); ops->load_weight for every
 *     srt_weight it will pass to an op (embed, norms, q/k/v/o/gate/up/down, lm_head, q_norm /
 *     k_norm) and for every bias and m->inv_freq wrapped as an F32 1-D weight; reserve_matmul
 *     as today. Activation buffers from ops->alloc (falloc today), plus device buffers for
 *     token_ids, positions [max_tok] int32, cos_sin, the logit row indices [max_seqs] and
 *     logits [max_seqs][vocab]. The KV pool's K/V arrays from ops->alloc (kv_pool.c uses
 *     malloc today) in SRT_F16 or SRT_BF16 (bf16 is the CUDA default).
 *  2. Each step: ops->upload the token ids and positions; ops->begin_batch(b); call the ops
 *     with the device buffers (embed gets device ids; the rotary module computes cos_sin with
 *     ops->rope_cos_sin instead of the host loop); gather the logit rows with ops->gather_rows
 *     (or skip it when the rows are every token in order) and bring logits back with
 *     ops->download, which also reports any op's error. Validation stays on the host batch.
 *     Where no hook is on the modules involved, use ops->add_rmsnorm for "residual add, then
 *     the next RMSNorm" (post_attention_layernorm, and the next layer's input_layernorm or the
 *     final norm after the MLP): one kernel instead of two passes (t/gpu/gpu_generate.c).
 *  3. Hooks: tensor views get device = SRT_HOOK_DEVICE_CUDA and device pointers.
 *     A step any hook matches runs EAGERLY, never from a graph (SGLang's hooks silently stop
 *     under graphs; ours do not): the runner checks "any module has hooks" before replaying.
 *  4. CUDA graphs (decode only: one token per sequence, no hooks). The backend exposes them as
 *     the optional ops graph_capture / graph_ready / graph_replay / graph_clear of srt/backend.h
 *     (so a host-memory test backend can record and replay too: t/unit/test_runner_graphs.c);
 *     srt_cuda_graph_* below forward to those ops. src/model/runner.c does, for a step whose
 *     batch is SRT_FORWARD_DECODE with n_tokens == n_seqs, no module hooked, tp == 1 and
 *     graphs on (srt_runner_opts.graphs; SRT_GRAPHS=0 in the environment turns them off):
 *       bs = srt_cuda_graph_bucket(n_seqs)  (1,2,4,8,16,24,...,256; -1 or bs > max_batch_tokens:
 *            run eagerly)
 *       pad the batch to bs sequences on the host: padded tokens get id 0, position -1 and
 *       out_slot -1 and their sequences no slots (seq_len 0: they write no KV and attend to
 *       nothing; the kernels give them zero attention output);
 *       upload ids/positions of all bs tokens into the SAME device buffers every step, then
 *       ops->begin_batch(padded batch: one runner-owned struct, the same address every step)
 *         -- outside the graph, eagerly, every step;
 *       if (!ready(bs)): run the body eagerly once (this step's result; GEMM plans made,
 *          kernels loaded), then capture(bs, body) -- the capture executes nothing;
 *       else replay(bs);
 *       then gather the real rows and download as in 2 (lm_head runs eagerly on the n_seqs
 *       real rows, outside the graph).
 *     body() issues exactly the ops of the eager forward for n_tokens = n_seqs = bs and nothing
 *     else: no upload, download, begin_batch, sync, alloc or host-side reads of device data.
 *     Every buffer it touches must be the same device address at every replay (the runner's
 *     activation buffers, the KV pool, the backend's batch metadata). The backend drops all
 *     graphs itself when its batch-metadata buffers had to grow (srt_cuda_graph_ready then
 *     says 0 and the runner captures again). The runner drops them (graph_clear) when a step
 *     finds any module hooked (a hook installed by srt_admin between steps: that step and every
 *     step while hooks exist run eagerly, and graphs are captured again once none are left) and
 *     when the KV pool it is given is not the one the graphs were captured with (another pool,
 *     or one reallocated: its per-layer K/V addresses or dtype differ); srt_runner_graphs_clear()
 *     drops them on demand. A failed capture is logged, turns graphs off for that runner and
 *     keeps the step's eager result. Counters: srt_runner_graph_stats_get().
 *     When captured: lazily, at the first decode step of each bs, unless the caller warms up:
 *     srt_runner_graphs_warmup() (srt/model.h; the scheduler calls it at startup on CUDA with
 *     tp 1, as SGLang captures every batch size at startup) first announces the largest batch
 *     (max_batch_tokens, max_seqs, every KV slot) so the metadata never has to grow later, then
 *     runs and captures every bucket up to max_seqs on batches made only of padding rows (the
 *     KV pool is neither written nor read); its failure only leaves lazy capture / eager steps.
 */
#ifndef SRT_BACKEND_CUDA_H
#define SRT_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "srt/backend.h"

/* Number of usable CUDA devices (> 0), or 0 with the reason in why: no plugin in this build,
 * the CUDA runtime's cudaGetDeviceCount error text, or no device. For `srt_device auto`. */
SRT_API int srt_cuda_probe(char *why, size_t why_len);

/* The CUDA backend on device device_index with a pool of mem_fraction (0, 1] of the device's
 * total memory. NULL and err on any failure (no plugin, no device, pool too large...). */
SRT_API srt_backend *srt_cuda_backend_create(int device_index, double mem_fraction, srt_err *err);

/* 1 when be is a CUDA backend (its memory is the device's). */
SRT_API int srt_backend_is_cuda(const srt_backend *be);

/* Pool size and bytes in use. */
SRT_API int srt_cuda_backend_mem(srt_backend *be, size_t *pool_bytes, size_t *used_bytes);

/* ---- CUDA graphs for decode batch sizes ---- */
#define SRT_CUDA_GRAPH_MAX_BS SRT_GRAPH_MAX_BS
/* Smallest captured size >= n_seqs among 1, 2, 4, 8, 16, 24, 32, ..., 256 (steps of 8 after
 * 8, as SGLang); -1 when n_seqs is outside [1, 256]. */
SRT_API int32_t srt_cuda_graph_bucket(int32_t n_seqs);
typedef srt_graph_body srt_cuda_graph_body;
/* These forward to the backend's graph ops (be->ops->graph_*), so they also work on any backend
 * that has them; on one without, capture/replay fail and ready says 0.
 * Runs body once under stream capture and keeps the instantiated graph for key bs
 * (replacing an older one). body's ops are NOT executed by the capture itself. */
SRT_API int  srt_cuda_graph_capture(srt_backend *be, int32_t bs, srt_cuda_graph_body body, void *user,
                                    srt_err *err);
SRT_API int  srt_cuda_graph_ready(srt_backend *be, int32_t bs);
/* Launches the graph of bs on the backend's stream (asynchronous, in order with the ops). */
SRT_API int  srt_cuda_graph_replay(srt_backend *be, int32_t bs, srt_err *err);
SRT_API void srt_cuda_graph_clear(srt_backend *be);

/* ---- sampling on the device ---- */
typedef struct srt_cuda_sample_params {
    float    temperature;        /* <= 0: greedy */
    int32_t  top_k;              /* <= 0: off */
    float    top_p;              /* >= 1: off */
    float    min_p;              /* <= 0: off */
    float    repetition_penalty; /* 1: off */
    float    frequency_penalty;
    float    presence_penalty;
    uint64_t seed;
    uint64_t step;
} srt_cuda_sample_params;
#define SRT_CUDA_SAMPLE_MAX_ROWS 1024
/* One token per row of logits [n_rows][vocab] (device memory, modified in place); params and
 * out_ids on the host; counts (device, [n_rows][vocab] int32) may be NULL. Waits for the ids. */
SRT_API int srt_cuda_sample(srt_backend *be, float *logits, int32_t n_rows, int32_t vocab,
                            const srt_cuda_sample_params *params, const int32_t *counts, int32_t *out_ids,
                            srt_err *err);

#endif
