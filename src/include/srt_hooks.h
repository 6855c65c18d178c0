/* ngx_srt forward-hook ABI (public, versioned).
 *
 * A hook library is a shared object exporting factories:
 *     srt_hook *my_factory(const char *config_json, const srt_hook_host *host);
 * named in a hook spec as "/path/libx.so:my_factory". The server refuses a hook whose
 * abi_version differs in its major part from SRT_HOOK_ABI_VERSION.
 *
 * OWNED BY THE HOOKS COMPONENT: it may extend this file, keeping the types below stable,
 * because the model code (src/model) already builds against them.
 */
#ifndef SRT_HOOKS_H
#define SRT_HOOKS_H

#include <stdint.h>

#define SRT_HOOK_ABI_VERSION_MAJOR 1
#define SRT_HOOK_ABI_VERSION_MINOR 0
#define SRT_HOOK_ABI_VERSION ((SRT_HOOK_ABI_VERSION_MAJOR << 16) | SRT_HOOK_ABI_VERSION_MINOR)

typedef enum srt_hook_dtype {
    SRT_HOOK_DTYPE_F32  = 0,
    SRT_HOOK_DTYPE_F16  = 1,
    SRT_HOOK_DTYPE_BF16 = 2,
    SRT_HOOK_DTYPE_I32  = 3,
} srt_hook_dtype;

typedef enum srt_hook_device {
    SRT_HOOK_DEVICE_CPU  = 0,
    SRT_HOOK_DEVICE_CUDA = 1,
} srt_hook_device;

#define SRT_TENSOR_MAX_DIMS 4

/* A view of an activation. strides are in elements. data may be written in place by hooks
 * allowed to replace values (same shape and dtype). */
typedef struct srt_tensor_view {
    int32_t  dtype;        /* srt_hook_dtype */
    int32_t  device;       /* srt_hook_device */
    int32_t  device_index;
    int32_t  ndim;
    int64_t  shape[SRT_TENSOR_MAX_DIMS];
    int64_t  strides[SRT_TENSOR_MAX_DIMS];
    void    *data;
} srt_tensor_view;

typedef struct srt_module_info {
    const char *name;        /* "model.layers.3.mlp.down_proj" */
    const char *class_name;  /* "LlamaMLP", "Linear", ... as in HF transformers */
    int32_t     index;       /* position in named_modules() order */
} srt_module_info;

typedef enum srt_forward_mode {
    SRT_FORWARD_PREFILL = 0,  /* extend: new tokens, possibly after a cached prefix */
    SRT_FORWARD_DECODE  = 1,  /* one new token per sequence */
    SRT_FORWARD_MIXED   = 2,  /* prefill chunks and decode tokens in one batch */
} srt_forward_mode;

/* What the batch is: per token, which request it belongs to and its position. */
typedef struct srt_batch_ctx {
    int32_t         forward_mode;  /* srt_forward_mode */
    int32_t         n_tokens;
    const uint64_t *request_ids;   /* [n_tokens] */
    const int32_t  *positions;     /* [n_tokens] */
    int32_t         n_seqs;
    int32_t         tp_rank;
    int32_t         tp_size;
} srt_batch_ctx;

/* Positional inputs plus named extra arguments (PyTorch's with_kwargs). */
#define SRT_MODULE_MAX_ARGS 4
typedef struct srt_module_args {
    int32_t         n_inputs;
    srt_tensor_view inputs[SRT_MODULE_MAX_ARGS];
    int32_t         n_kwargs;
    const char     *kwarg_names[SRT_MODULE_MAX_ARGS];
    srt_tensor_view kwargs[SRT_MODULE_MAX_ARGS];
} srt_module_args;

#endif
