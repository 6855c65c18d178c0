/* ngx_srt forward-hook ABI (public, versioned).
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
 * Versions. 1.1 appends fields to srt_hook_call (per-request hooks: the request and its
 * config) and to srt_hook (device entry points, run inside captured CUDA graphs); nothing of
 * 1.0 moved, so 1.0 libraries keep working unchanged. A library that reads a 1.1 field of a
 * call checks SRT_HOOK_CALL_HAS(call, field) first; the engine reads a hook's 1.1 fields only
 * when its struct_size covers them (a 1.0 hook is shorter).
 *
 * OWNED BY THE HOOKS COMPONENT: it may extend this file, keeping the types below stable,
 * because the model code (src/model) already builds against them.
 */
#ifndef SRT_HOOKS_H
#define SRT_HOOKS_H

#include <stddef.h>
#include <stdint.h>

#define SRT_HOOK_ABI_VERSION_MAJOR 1
#define SRT_HOOK_ABI_VERSION_MINOR 1
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

    /* ---- ABI 1.1 ----
     * Per-request hooks (specs with "per_request": true, selected by a request's "hooks"
     * field) are called once per selecting request with only that request's rows: every
     * view whose first dimension is the batch's tokens, and batch (n_tokens, request_ids,
     * positions), are cut down to that request's tokens, so other requests in the batch are
     * never seen nor touched. request_config_json is the request's "config" for this spec
     * ("{}" when it gave none); request_host's config_number/bool/string/numbers read it
     * (host->config_* still read the spec's config). NULL/0 for hooks not per request. */
    uint64_t                     request_id;
    const char                  *request_config_json;
    const struct srt_hook_host  *request_host;
} srt_hook_call;

/* True when the engine that made `call` fills `field` (ABI 1.1 fields of srt_hook_call). */
#define SRT_HOOK_CALL_HAS(call, field) \
    ((call)->struct_size >= (uint32_t)((char *)&(call)->field - (char *)(call)) + sizeof((call)->field))

typedef int (*srt_hook_pre_fn)(struct srt_hook *hook, const srt_hook_call *call,
                               srt_module_args *args);
typedef int (*srt_hook_fwd_fn)(struct srt_hook *hook, const srt_hook_call *call,
                               const srt_module_args *args, srt_tensor_view *output,
                               srt_tensor_view *replacement);

/* ------------------------------------------------------------------------------------------
 * Device hooks (ABI 1.1): work enqueued on the engine's stream, captured into CUDA graphs.
 *
 * A host callback (forward, forward_pre) runs host code at every call, which a replayed CUDA
 * graph cannot do: a batch that meets one runs eagerly. A hook that also (or only) has a
 * device entry (forward_device, forward_pre_device) is called through it whenever the engine
 * runs on a device with a stream, eager steps included; the engine then captures it into its
 * decode graphs. Its call only ENQUEUES work (kernel launches, cudaMemcpyAsync device to
 * device, cudaMemsetAsync) on call->stream, reading and writing the views it is given and
 * buffers of its own; the work runs later, in order with the engine's ops.
 *
 * The contract between capture and replay. A device call may be the capture of a graph that
 * is then replayed at every decode step of that padded batch size without calling the hook
 * again: what the call enqueues is recorded once, with the very pointers, sizes and scalar
 * arguments it used, and executed again at each replay. Therefore:
 *   - FIXED from the call that was captured to every replay (the engine guarantees its side,
 *     the hook must not depend on anything else): call->stream; every view's data pointer,
 *     dtype, ndim, shape and strides (the rows are the graph's padded batch: n_rows); the
 *     addresses and sizes of the hook's own device buffers that its work reads or writes;
 *     every scalar kernel argument and launch configuration (grid, block, shared memory),
 *     i.e. whatever host value the hook read at enqueue time, including its config. A hook
 *     that changes a buffer's address (frees it, reallocates it) or wants another scalar
 *     must not do so while registered: remove it (srt_admin), which makes the engine drop the
 *     graphs, and re-add it.
 *   - FREE TO CHANGE between replays: the CONTENTS of every buffer. The views' contents are
 *     the step's activations; call->positions holds the step's positions (-1 on padding rows),
 *     rewritten by the engine before every step at the same address; the contents of the
 *     hook's own device buffers (a steering vector, a scale kept in device memory, a config
 *     block) may be rewritten by the hook between forward passes (from a host callback of the
 *     same hook, or its factory), and every replay reads what they hold then. Keeping a
 *     per-step value in a device buffer, not in a kernel argument, is how a hook varies its
 *     effect without leaving the graph.
 *   - NOT ALLOWED in a device call: synchronizing the stream or the device, allocating or
 *     freeing memory, copies to or from host memory, reading the views' values on the host,
 *     using another stream without joining it back to call->stream (event record / wait).
 *     Under capture those fail, or would be recorded as something that does not run again.
 *   - Padding rows (position -1) hold arbitrary values whose results are discarded: a hook
 *     may treat every row alike; n_rows may exceed the batch's real tokens.
 * Returning a negative value is a failure: eagerly it fails the forward pass (as a host
 * hook's); during a capture the engine discards the graph, logs why, and runs the steps with
 * this set of hooks eagerly (device entries still called, eagerly) until hooks change.
 *
 * What keeps a batch eager anyway: a hook without a device entry (1.0 hooks), a per-request
 * hook (its rows differ from step to step), tensor parallelism (no graphs there), and an
 * engine without a stream (the CPU backend: there the host entry runs; a hook with only a
 * device entry is refused where no stream exists). Device entries may change values in
 * place only: no replacement output and no input buffer swap.
 * ------------------------------------------------------------------------------------------ */
typedef struct srt_hook_device_call {
    uint32_t                     struct_size;
    int32_t                      is_pre;
    const srt_module_info       *module;
    const char                  *spec_name;
    int64_t                      handle_id;
    const struct srt_hook_host  *host;       /* the spec's host services (config, log) */
    void                        *stream;     /* cudaStream_t of the engine's ops */
    int32_t                      device_index;
    int32_t                      n_rows;     /* rows of the token-shaped views (padded in a graph) */
    const int32_t               *positions;  /* device int32 [n_rows], -1 on padding; NULL: unknown */
    int32_t                      forward_mode; /* srt_forward_mode; DECODE in every graph */
    int32_t                      tp_rank;
    int32_t                      tp_size;
} srt_hook_device_call;

typedef int (*srt_hook_device_pre_fn)(struct srt_hook *hook, const srt_hook_device_call *call,
                                      const srt_module_args *args);
typedef int (*srt_hook_device_fwd_fn)(struct srt_hook *hook, const srt_hook_device_call *call,
                                      const srt_module_args *args, const srt_tensor_view *output);

/* A hook object. Allocated by the factory, owned by the engine after the factory returns:
 * the engine calls destroy(hook) exactly once, when the last registration using it is
 * deleted or the registry is freed (never while a callback runs). destroy may be NULL for
 * statically allocated hooks. The same object serves every module the spec matched. */
typedef struct srt_hook {
    uint32_t         abi_version;   /* SRT_HOOK_ABI_VERSION */
    uint32_t         struct_size;   /* sizeof(srt_hook) */
    srt_hook_pre_fn  forward_pre;   /* "forward_pre_hooks": this or forward_pre_device */
    srt_hook_fwd_fn  forward;       /* "forward_hooks": this or forward_device */
    void            *user;
    void           (*destroy)(struct srt_hook *hook);

    /* ---- ABI 1.1 (read only when struct_size covers them) ----
     * Device entries, see "Device hooks" above. Set one (and optionally the host entry too,
     * used where the engine has no stream) to have the hook captured into CUDA graphs. */
    srt_hook_device_pre_fn forward_pre_device;
    srt_hook_device_fwd_fn forward_device;
} srt_hook;

/* The size of a 1.0 srt_hook: the least struct_size the engine accepts. */
#define SRT_HOOK_STRUCT_SIZE_1_0 ((uint32_t)offsetof(srt_hook, forward_pre_device))
/* True when `hook` (as its factory filled it) has `field`. */
#define SRT_HOOK_HAS(hook, field) \
    ((hook)->struct_size >= (uint32_t)((char *)&(hook)->field - (char *)(hook)) + sizeof((hook)->field))

/* Fills what every factory sets: this header's ABI version and srt_hook size, the host entries
 * (either may be NULL), user and destroy; the device entries are cleared (set them after).
 * Returns hook. */
static inline srt_hook *srt_hook_fill(srt_hook *hook, srt_hook_pre_fn forward_pre, srt_hook_fwd_fn forward,
                                      void *user, void (*destroy)(struct srt_hook *hook))
{
    srt_hook h = { SRT_HOOK_ABI_VERSION, (uint32_t)sizeof h, forward_pre, forward, user, destroy, NULL, NULL };

    *hook = h;
    return hook;
}

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
