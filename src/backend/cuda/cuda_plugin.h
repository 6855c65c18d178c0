/* The boundary between libsrt (src/backend/cuda/cuda_loader.c, no CUDA headers) and the CUDA
 * plugin build/lib/libsrt_cuda.so (cuda_backend.c + kernels/, linked with cudart and cublasLt).
 * The plugin calls nothing of libsrt directly: what it needs from the engine comes in the host
 * table, so it loads into any process that has libsrt, nginx's scheduler process included. */
#ifndef SRT_CUDA_PLUGIN_H
#define SRT_CUDA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "srt/backend_cuda.h"

#define SRT_CUDA_PLUGIN_ABI 1
#define SRT_CUDA_PLUGIN_ENTRY "srt_cuda_plugin_init"

typedef struct srt_cuda_host_api {
    int    abi;
    void (*dequant_row)(const srt_weight *w, int64_t row, float *out);
    void (*log)(srt_log_level level, const char *msg);
} srt_cuda_host_api;

typedef struct srt_cuda_plugin_api {
    int           abi;
    int         (*probe)(char *why, size_t why_len);
    srt_backend *(*create)(int device_index, double mem_fraction, srt_err *err);
    int         (*mem)(srt_backend *be, size_t *pool_bytes, size_t *used_bytes);
    int         (*graph_capture)(srt_backend *be, int32_t bs, srt_cuda_graph_body body, void *user,
                                 srt_err *err);
    int         (*graph_ready)(srt_backend *be, int32_t bs);
    int         (*graph_replay)(srt_backend *be, int32_t bs, srt_err *err);
    void        (*graph_clear)(srt_backend *be);
    int         (*sample)(srt_backend *be, float *logits, int32_t n_rows, int32_t vocab,
                          const srt_cuda_sample_params *params, const int32_t *counts,
                          int32_t *out_ids, srt_err *err);
} srt_cuda_plugin_api;

typedef int (*srt_cuda_plugin_init_fn)(const srt_cuda_host_api *host, srt_cuda_plugin_api *out);

#endif
