/* Small helpers over srt_tensor_view: sizes, layout checks, strided copies and
 * conversions to and from float for hook libraries. */
#include <string.h>

#include "hooks/hooks_internal.h"

size_t srt_hook_dtype_size(int32_t dtype)
{
    switch (dtype) {
    case SRT_HOOK_DTYPE_F32:  return 4;
    case SRT_HOOK_DTYPE_F16:  return 2;
    case SRT_HOOK_DTYPE_BF16: return 2;
    case SRT_HOOK_DTYPE_I32:  return 4;
    default:                  return 0;
    }
}

int64_t srt_hook_view_numel(const srt_tensor_view *v)
{
    int64_t n = 1;
    if (v->ndim < 0 || v->ndim > SRT_TENSOR_MAX_DIMS)
        return -1;
    for (int d = 0; d < v->ndim; d++) {
        if (v->shape[d] < 0)
            return -1;
        n *= v->shape[d];
    }
    return n;
}

int srt_hook_view_same_layout(const srt_tensor_view *a, const srt_tensor_view *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return 0;
    if (a->ndim < 0 || a->ndim > SRT_TENSOR_MAX_DIMS)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

int srt_hook_view_is_contiguous(const srt_tensor_view *v)
{
    int64_t expect = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        if (v->shape[d] != 1 && v->strides[d] != expect)
            return 0;
        expect *= v->shape[d];
    }
    return 1;
}

/* Visit every element of a view in row-major order, giving its element offset. */
typedef struct view_iter {
    int     ndim;
    int64_t shape[SRT_TENSOR_MAX_DIMS];
    int64_t strides[SRT_TENSOR_MAX_DIMS];
    int64_t idx[SRT_TENSOR_MAX_DIMS];
    int64_t off;
} view_iter;

static void iter_init(view_iter *it, const srt_tensor_view *v)
{
    memset(it, 0, sizeof *it);
    it->ndim = v->ndim;
    for (int d = 0; d < v->ndim; d++) {
        it->shape[d] = v->shape[d];
        it->strides[d] = v->strides[d];
    }
}

static void iter_next(view_iter *it)
{
    for (int d = it->ndim - 1; d >= 0; d--) {
        it->idx[d]++;
        it->off += it->strides[d];
        if (it->idx[d] < it->shape[d])
            return;
        it->off -= it->strides[d] * it->shape[d];
        it->idx[d] = 0;
    }
}

int srt_hook_view_copy_cpu(srt_tensor_view *dst, const srt_tensor_view *src)
{
    size_t es = srt_hook_dtype_size(dst->dtype);
    int64_t n = srt_hook_view_numel(dst);
    view_iter di, si;

    if (es == 0 || n < 0 || !srt_hook_view_same_layout(dst, src))
        return SRT_ERROR;
    if (srt_hook_view_is_contiguous(dst) && srt_hook_view_is_contiguous(src)) {
        memmove(dst->data, src->data, (size_t)n * es);
        return SRT_OK;
    }
    iter_init(&di, dst);
    iter_init(&si, src);
    for (int64_t i = 0; i < n; i++) {
        memcpy((char *)dst->data + di.off * (int64_t)es,
               (const char *)src->data + si.off * (int64_t)es, es);
        iter_next(&di);
        iter_next(&si);
    }
    return SRT_OK;
}
