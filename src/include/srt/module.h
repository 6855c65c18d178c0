/* The model's module tree and its single dispatch point.
 *
 * Every module forward in the model goes through srt_module_forward(). When no hook is
 * attached anywhere, module->hooks is NULL and the call is one predictable branch plus a
 * direct call: that is the whole cost of hook support. The hook engine (src/hooks) sets
 * module->hooks on modules that have hooks, and on every module while a global hook exists.
 */
#ifndef SRT_MODULE_H
#define SRT_MODULE_H

#include <stdint.h>

#include "srt/common.h"   /* SRT_API */
#include "srt_hooks.h"   /* public ABI: srt_tensor_view, srt_module_info, srt_batch_ctx, srt_module_args */

struct srt_module_hooks;  /* owned by src/hooks */

typedef struct srt_module {
    srt_module_info          info;    /* name exactly as HF named_modules(), class name, index */
    int                      parent;  /* index of the parent module, -1 for the root */
    struct srt_module_hooks *hooks;   /* NULL on the fast path */
} srt_module;

/* A module's own computation: reads args->inputs (and kwargs), writes *output in place. */
typedef int (*srt_module_fn)(void *self, const srt_batch_ctx *batch,
                             srt_module_args *args, srt_tensor_view *output);

/* Slow path, implemented by the hook engine: pre-hooks, fn, forward hooks, always_call. */
SRT_API int srt_hooks_dispatch(srt_module *m, const srt_batch_ctx *batch, srt_module_fn fn,
                               void *self, srt_module_args *args, srt_tensor_view *output);

/* Device hooks (srt_hooks.h ABI 1.1), for a runner that replays CUDA graphs.
 * srt_hooks_graph_state: 0 when no module has hooks; 1 when every hook attached is called
 * through its device entry on this engine (the forward may be captured into a graph);
 * 2 when some hook needs host code (a host-only or per-request hook: run eagerly). *gen
 * changes whenever the hooks change (0 with none): graphs captured under another value
 * must be dropped. srt_hooks_device_step: before a forward pass on a device, the device copy
 * of the step's positions (padding -1), the same address for every step of a graph, which
 * device hooks get as call->positions; NULL after. Scheduler thread only. */
SRT_API int  srt_hooks_graph_state(const srt_module *mods, int n, uint64_t *gen);
SRT_API void srt_hooks_device_step(const int32_t *positions);

static inline int srt_module_forward(srt_module *m, const srt_batch_ctx *batch,
                                     srt_module_fn fn, void *self,
                                     srt_module_args *args, srt_tensor_view *output)
{
#ifdef SRT_NO_HOOKS
    /* Benchmark baseline only: a build without hook support (BENCHMARKS.md). */
    (void)m;
    return fn(self, batch, args, output);
#else
    if (__builtin_expect(m->hooks == NULL, 1))
        return fn(self, batch, args, output);
    return srt_hooks_dispatch(m, batch, fn, self, args, output);
#endif
}

#endif
