/* Private structures shared by the hook engine's files (src/hooks). */
#ifndef SRT_HOOKS_INTERNAL_H
#define SRT_HOOKS_INTERNAL_H

#include <stdint.h>

#include "srt/common.h"
#include "srt/module.h"
#include "srt_hooks.h"

/* One hook as the dispatcher sees it: everything needed for a call, copied from the
 * registration so the hot loop touches one flat array. */
typedef struct srt_hook_slot {
    srt_hook            *hook;
    const srt_hook_host *host;
    const char          *spec_name;
    int64_t              id;
    uint8_t              with_kwargs;
    uint8_t              always_call;
    uint8_t              is_global;
} srt_hook_slot;

/* Attached to srt_module.hooks: the resolved order, global hooks first. Rebuilt by the
 * registry after every mutation (between forward passes), never during a forward. */
struct srt_module_hooks {
    int            n_pre;
    int            n_post;
    srt_hook_slot *pre;
    srt_hook_slot *post;
    /* Device copies for replacement outputs on CUDA; NULL on CPU-only engines. */
    int          (*copy_d2d)(void *dst, const void *src, size_t bytes, void *ctx);
    void          *copy_ctx;
};

/* Tensor helpers (tensor_util.c). */
int64_t srt_hook_view_numel(const srt_tensor_view *v);
size_t  srt_hook_dtype_size(int32_t dtype);
int     srt_hook_view_same_layout(const srt_tensor_view *a, const srt_tensor_view *b);
int     srt_hook_view_is_contiguous(const srt_tensor_view *v);
/* Copy src into dst element by element honouring both views' strides (CPU views only). */
int     srt_hook_view_copy_cpu(srt_tensor_view *dst, const srt_tensor_view *src);

#endif
