/* A tensor-parallel rank group inside the scheduler process.
 *
 * The scheduler process is rank 0. Before it loads the model (and so before any device is
 * initialised) srt_tp_group_start() creates the CPU communicator group and forks ranks
 * 1..size-1. Each rank loads the model, loads the forward hooks with its rank, receives the
 * runner shape from rank 0, builds its runner and its KV pool shard, then serves batches:
 * per step rank 0 broadcasts the srt_forward_batch arrays and every rank runs
 * srt_runner_forward() (the all-reduces inside it keep the ranks in lock step). Rank 0
 * samples from the gathered logits.
 *
 * Two communicators, as SGLang: the CPU communicator carries the control messages (setup,
 * batches, hook commands) and, on the CPU backend, the tensor collectives too. With
 * srt_runner_opts.device SRT_RUNNER_CUDA, rank k computes on GPU device_index + k and its
 * tensor collectives (all-reduces after o_proj / down_proj / the embedding, the lm_head
 * all-gather) go over NCCL on its backend's stream: every rank loads libnccl.so.2
 * ($SRT_NCCL_SO_PATH), the ranks agree that all could, and the runner makes the NCCL
 * communicator from rank 0's unique id broadcast over the CPU communicator. KV pools are then
 * bf16 in device memory.
 *
 * A rank that dies breaks the group: the communicator returns an error, and
 * srt_tp_group_check() notices the exit of a child. The scheduler then fails what it was
 * running and exits; its supervisor restarts the whole group. Ranks die with rank 0
 * (PR_SET_PDEATHSIG). */
#ifndef SRT_SCHED_TP_GROUP_H
#define SRT_SCHED_TP_GROUP_H

#include <sys/types.h>

#include "srt/batch.h"
#include "srt/comm.h"
#include "srt/common.h"
#include "srt/kv.h"
#include "srt/model.h"

typedef struct srt_tp_group srt_tp_group;

typedef struct srt_tp_group_opts {
    int         size;         /* ranks, >= 2 */
    const char *model_path;
    const char *hooks_path;   /* "" or NULL: none */
    const char *hooks_search; /* "" or NULL: $SRT_HOOKS_PATH */
    int         n_threads;    /* CPU threads per rank */
    const struct srt_control_vector_opts *cvec;   /* srt_control_vector, loaded by every rank; NULL: none */
} srt_tp_group_opts;

/* In rank 0 (the caller): creates the group and forks the other ranks, which never return
 * from this call (they _exit). Call before loading the model. */
int  srt_tp_group_start(const srt_tp_group_opts *o, srt_tp_group **out, srt_err *err);

/* Rank 0's communicator (rank 0, size o->size). */
srt_comm *srt_tp_group_comm(srt_tp_group *g);
int       srt_tp_group_size(const srt_tp_group *g);
pid_t     srt_tp_group_pid(const srt_tp_group *g, int rank);   /* 0 for rank 0 */

/* Rank 0: sends the runner shape (batch sizes, precise_matmul, device, device_index,
 * mem_fraction of ro) to the ranks and creates rank 0's runner and KV shard (n_slots KV
 * slots). Waits for every rank to be ready. ro->backend, tensor_comm and nccl must be unset:
 * the group makes them. */
int  srt_tp_group_setup(srt_tp_group *g, srt_model *m, const srt_runner_opts *ro, int32_t n_slots,
                        srt_runner **runner, srt_kv_pool **kv, srt_err *err);

/* Rank 0: broadcasts the batch, then runs rank 0's share of the forward. */
int  srt_tp_group_forward(srt_tp_group *g, srt_runner *r, srt_kv_pool *kv, const srt_forward_batch *b,
                          float *logits, srt_err *err);

/* SRT_ERROR (err says which rank) when a rank has exited or the group is broken. */
int  srt_tp_group_check(srt_tp_group *g, srt_err *err);

/* Scheduler loop, tp > 1: answers the pending srt_admin hook command, if any, after sending
 * it to every rank so that all registries change together. Returns 1 if one was served. */
struct srt_chan;
struct srt_hook_registry;
int  srt_tp_group_admin_serve(srt_tp_group *g, struct srt_chan *c, struct srt_hook_registry *reg);

/* Per-request hooks at tp > 1: every rank must hold the same selections, so the scheduler
 * calls these instead of srt_hook_request_begin / _end. begin applies the selection on rank 0
 * (an error, e.g. a name that is no per-request spec, fails the request there and nothing is
 * sent), then sends it to the ranks, which apply it before any batch holding the request (the
 * messages share the batches' ordered channel). A rank that cannot apply it leaves, breaking
 * the group (it would compute other activations than rank 0). end drops it everywhere; only
 * requests that had a selection cost a message. */
struct srt_request_hooks;
int  srt_tp_group_request_begin(srt_tp_group *g, struct srt_hook_registry *reg, uint64_t request_id,
                                const struct srt_request_hooks *sel, srt_err *err);
void srt_tp_group_request_end(srt_tp_group *g, struct srt_hook_registry *reg, uint64_t request_id);

/* Tells the ranks to exit (when the group still works), kills the rest, reaps them all and
 * frees the group. */
void srt_tp_group_stop(srt_tp_group *g);

/* The wire form of a batch, shared with tests: encode returns the bytes needed (writes
 * only when cap suffices); decode points b's arrays into buf after checking that every
 * count fits the buffer (srt_runner_forward validates the values themselves). */
size_t srt_tp_batch_encode(const srt_forward_batch *b, void *buf, size_t cap);
int    srt_tp_batch_decode(const void *buf, size_t len, int32_t max_seqs, const int32_t **seq_ptrs,
                           srt_forward_batch *b, srt_err *err);   /* seq_ptrs: max_seqs entries */

#endif
