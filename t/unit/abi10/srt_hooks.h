/* FROZEN TEST FIXTURE: src/include/srt_hooks.h as it was at hook ABI 1.0 (git show 49e3ecf^:src/include/srt_hooks.h),
 * kept verbatim so that t/unit/abi10/hook_abi10.c is a library really built against 1.0: the copy
 * is the point (never edit it, never include it from anything else).
 *
 * ngx_srt forward-hook ABI (public, versioned).
 *
 * A hook library is a shared object that says which ABI it was built against and exports
 * factories:
 *
 *     #include "srt_hooks.h"
 *     SRT_HOOK_LIBRARY();                        // exactly once per library
 *     srt_hook *my_factory(const char *config_json, const srt_hook_host *host);
 *
 * A hook spec names a factory as "/path/libx.so:my_factory", "libx.so:my_factory" or
 * "pkg.mod.my_factory" (see src/hooks/README.md for the search path and the dotted rule).
 * The server refuses a library whose srt_hook_abi_version, or a hook whose abi_version,
 * differs from SRT_HOOK_ABI_VERSION in its major part, or has a newer minor part.
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

/* ------------------------------------------------------------------------------------------
 * Hooks: what a factory returns and how the engine calls it.
 *
 * When they run. srt_module_forward() on a module with hooks attached runs, in order:
 *   1. global forward pre-hooks, then the module's forward pre-hooks (registration order,
 *      "prepend" ones first, most recently prepended first);
 *   2. the module's own computation;
 *   3. global forward hooks, then the module's forward hooks (same ordering rules).
 * Hooks run on the scheduler thread, one at a time, during the forward pass; a hook must
 * not call back into the registry (remove/re-add) from inside a callback.
 *
 * What they may change.
 *   - A forward pre-hook may overwrite the data of args->inputs[i] in place (same shape and
 *     dtype), or point args->inputs[i].data (and strides) at its own buffer of the same
 *     shape and dtype, valid until the hook's next call or destroy. The engine checks that
 *     n_inputs, dtype, ndim and shape did not change; a change is an error. The caller's
 *     args are not modified: replacements apply to this module call only.
 *   - A forward hook may overwrite output->data in place, or fill *replacement with a view
 *     of the same shape and dtype on the same device and return SRT_HOOK_REPLACED; the
 *     engine then copies the replacement into the output (PyTorch's "return a new output").
 *   - Without with_kwargs a hook sees args->n_kwargs == 0; with it, it sees the module's
 *     named extra arguments (e.g. "position_ids", "residual").
 *
 * Errors. A callback returning a negative value fails the forward pass (the error is
 * logged with the spec and module names and propagates to the model runner), like an
 * exception in a PyTorch hook. Forward hooks registered with always_call also run when
 * the forward, a pre-hook or an earlier forward hook failed; they see
 * call->forward_status == -1 and the output may be incomplete. The error still propagates.
 *
 * Devices. Views may live on a CUDA device (device == SRT_HOOK_DEVICE_CUDA). Use
 * host->tensor_read_f32 / tensor_write_f32 to move values to and from host memory
 * whatever the dtype, strides or device.
 * ------------------------------------------------------------------------------------------ */

/* Hook callback results (negative: error). */
#define SRT_HOOK_OK        0
#define SRT_HOOK_REPLACED  1   /* forward hook only: *replacement holds the new output */
#define SRT_HOOK_FAILED   -1

struct srt_hook;
struct srt_hook_host;

/* What one hook call is about. Valid only during the call. */
typedef struct srt_hook_call {
    uint32_t                     struct_size;
    int32_t                      forward_status;  /* forward hooks: 0, or -1 after a failure */
    const srt_module_info       *module;
    const srt_batch_ctx         *batch;
    const char                  *spec_name;       /* "" when the spec had no name */
    int64_t                      handle_id;       /* the registration's id (admin listing) */
    int32_t                      is_global;
    int32_t                      is_pre;
    const struct srt_hook_host  *host;            /* the host services given to the factory */
} srt_hook_call;

typedef int (*srt_hook_pre_fn)(struct srt_hook *hook, const srt_hook_call *call,
                               srt_module_args *args);
typedef int (*srt_hook_fwd_fn)(struct srt_hook *hook, const srt_hook_call *call,
                               const srt_module_args *args, srt_tensor_view *output,
                               srt_tensor_view *replacement);

/* A hook object. Allocated by the factory, owned by the engine after the factory returns:
 * the engine calls destroy(hook) exactly once, when the last registration using it is
 * deleted or the registry is freed (never while a callback runs). destroy may be NULL for
 * statically allocated hooks. The same object serves every module the spec matched. */
typedef struct srt_hook {
    uint32_t         abi_version;   /* SRT_HOOK_ABI_VERSION */
    uint32_t         struct_size;   /* sizeof(srt_hook) */
    srt_hook_pre_fn  forward_pre;   /* required for specs in "forward_pre_hooks" */
    srt_hook_fwd_fn  forward;       /* required for specs in "forward_hooks" */
    void            *user;
    void           (*destroy)(struct srt_hook *hook);
} srt_hook;

/* Services the engine offers to hook libraries. One per spec; valid until the hook's
 * destroy returns. */
typedef struct srt_hook_host {
    uint32_t     abi_version;
    uint32_t     struct_size;
    const char  *spec_name;         /* "" when unnamed */
    const char  *spec_file;         /* file the spec came from (the origin name for inline JSON) */
    const char  *config_json;       /* the spec's "config" object as JSON text ("{}" if none) */
    int32_t      tp_rank;
    int32_t      tp_size;

    /* Log through the server's log (nginx error log). level: 0 error .. 3 debug. */
    void (*log)(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

    /* Look up a top-level member of the spec's config. Return 0 on success, -1 when the
     * member is missing or has another type. Strings stay valid while the host does. */
    int (*config_number)(const struct srt_hook_host *host, const char *key, double *out);
    int (*config_bool)(const struct srt_hook_host *host, const char *key, int *out);
    int (*config_string)(const struct srt_hook_host *host, const char *key, const char **out);
    /* An array of numbers: fills up to cap values, *n = the array's length. */
    int (*config_numbers)(const struct srt_hook_host *host, const char *key, double *out,
                          int64_t cap, int64_t *n);

    /* Number of elements of a view. */
    int64_t (*tensor_numel)(const srt_tensor_view *v);
    /* Copy a view (any supported dtype, strides, CPU or CUDA) to n contiguous floats in
     * row-major order, or back. n must equal tensor_numel(v). Return 0 or -1. */
    int (*tensor_read_f32)(const struct srt_hook_host *host, const srt_tensor_view *v,
                           float *dst, int64_t n);
    int (*tensor_write_f32)(const struct srt_hook_host *host, srt_tensor_view *v,
                            const float *src, int64_t n);

    void *engine;                   /* private to the engine */
} srt_hook_host;

/* The factory every hook library exports (any name). config_json is the spec's "config"
 * object ("{}" when absent or null). Return NULL to register nothing (the engine logs a
 * warning and continues). */
typedef srt_hook *(*srt_hook_factory_fn)(const char *config_json, const srt_hook_host *host);

/* Put SRT_HOOK_LIBRARY(); in one source file of every hook library: the engine reads this
 * symbol before calling any factory and refuses libraries built against another ABI. */
#define SRT_HOOK_ABI_SYMBOL "srt_hook_abi_version"
#ifdef __cplusplus
/* C++: a namespace-scope const has internal linkage unless declared extern "C" first.
 * Declare factories extern "C" too. */
#define SRT_HOOK_LIBRARY() \
    extern "C" { extern __attribute__((visibility("default"))) const uint32_t srt_hook_abi_version; } \
    __attribute__((used)) const uint32_t srt_hook_abi_version = SRT_HOOK_ABI_VERSION
#else
#define SRT_HOOK_LIBRARY() \
    __attribute__((visibility("default"), used)) \
    const uint32_t srt_hook_abi_version = SRT_HOOK_ABI_VERSION
#endif

/* True when an object or library built against `version` can run in this engine. */
static inline int srt_hook_abi_compatible(uint32_t version)
{
    return (version >> 16) == SRT_HOOK_ABI_VERSION_MAJOR &&
           (version & 0xffffu) <= SRT_HOOK_ABI_VERSION_MINOR;
}

#endif
