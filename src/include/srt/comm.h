/* Tensor-parallel communicators: one interface, two implementations.
 *
 *   cpu   ranks are processes on one machine sharing a memfd region; used for tp > 1 on the CPU
 *         and in tests. Reductions sum in rank order, so every rank gets bit-identical results.
 *   nccl  libnccl.so.2 loaded with dlopen (SRT_NCCL_SO_PATH overrides), as SGLang's pynccl does;
 *         buffers are device pointers and ops are enqueued on the caller's CUDA stream.
 *
 * Every collective returns SRT_OK or SRT_ERROR with err filled; a dead peer is an error, not a hang. */
#ifndef SRT_COMM_H
#define SRT_COMM_H

#include <stddef.h>
#include <sys/types.h>

#include "srt/common.h"

typedef struct srt_comm srt_comm;

typedef struct srt_comm_ops {
    const char *name;
    int  (*all_reduce_sum_f32)(srt_comm *c, float *buf, size_t n, srt_err *err);
    /* recv holds size * n floats, rank r's contribution at recv + r * n */
    int  (*all_gather_f32)(srt_comm *c, const float *send, size_t n, float *recv, srt_err *err);
    int  (*broadcast)(srt_comm *c, void *buf, size_t bytes, int root, srt_err *err);
    int  (*barrier)(srt_comm *c, srt_err *err);
    void (*destroy)(srt_comm *c);
} srt_comm_ops;

struct srt_comm {
    const srt_comm_ops *ops;
    int                 rank;
    int                 size;
};

static inline int srt_comm_all_reduce_sum_f32(srt_comm *c, float *buf, size_t n, srt_err *err)
{
    return c->ops->all_reduce_sum_f32(c, buf, n, err);
}
static inline int srt_comm_all_gather_f32(srt_comm *c, const float *send, size_t n, float *recv,
                                          srt_err *err)
{
    return c->ops->all_gather_f32(c, send, n, recv, err);
}
static inline int srt_comm_broadcast(srt_comm *c, void *buf, size_t bytes, int root, srt_err *err)
{
    return c->ops->broadcast(c, buf, bytes, root, err);
}
static inline int srt_comm_barrier(srt_comm *c, srt_err *err)
{
    return c->ops->barrier(c, err);
}
static inline void srt_comm_destroy(srt_comm *c)
{
    if (c)
        c->ops->destroy(c);
}

/* ---- CPU communicator ----
 * The parent creates the shared group before forking the ranks; each rank then joins it.
 * capacity_floats bounds one collective's chunk (larger collectives are chunked). */
typedef struct srt_cpu_comm_group srt_cpu_comm_group;

SRT_API srt_cpu_comm_group *srt_cpu_comm_group_create(int size, size_t capacity_floats, srt_err *err);
srt_cpu_comm_group        *srt_cpu_comm_group_open_fd(int fd, srt_err *err);   /* libsrt only */
SRT_API void                srt_cpu_comm_group_free(srt_cpu_comm_group *g);
/* Marks the group broken (e.g. the parent saw a rank die): every waiting rank returns an error. */
SRT_API void                srt_cpu_comm_group_abort(srt_cpu_comm_group *g);

SRT_API srt_comm *srt_cpu_comm_join(srt_cpu_comm_group *g, int rank, srt_err *err);
/* How long a collective waits for its peers before declaring the group broken. */
SRT_API void      srt_cpu_comm_set_timeout_ms(srt_comm *c, int ms);

/* ---- NCCL communicator ---- */
#define SRT_NCCL_UNIQUE_ID_BYTES 128

typedef struct srt_nccl_lib srt_nccl_lib;

/* Loads libnccl.so.2 (or path, or $SRT_NCCL_SO_PATH) and resolves the symbols used. */
SRT_API srt_nccl_lib *srt_nccl_load(const char *path, srt_err *err);
SRT_API void          srt_nccl_unload(srt_nccl_lib *lib);
SRT_API int           srt_nccl_version(const srt_nccl_lib *lib);
SRT_API int           srt_nccl_get_unique_id(srt_nccl_lib *lib, unsigned char id[SRT_NCCL_UNIQUE_ID_BYTES],
                                             srt_err *err);
/* stream is a cudaStream_t (NULL = default stream). The CUDA device must be set by the caller. */
SRT_API srt_comm     *srt_nccl_comm_init(srt_nccl_lib *lib, const unsigned char id[SRT_NCCL_UNIQUE_ID_BYTES],
                                         int rank, int size, void *stream, srt_err *err);

#endif
