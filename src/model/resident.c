/* The CPU runner's weights, copied out of the checkpoint's file mapping into memory of its own.
 *
 * A CPU decode step reads every weight once. In place they are pages of the file mapping:
 * 4 KB pages, so a 100 MB model takes a TLB miss every 4 KB of a stream, and the hardware
 * prefetchers stop at every page's end. One anonymous region asked for in 2 MB pages
 * (MADV_HUGEPAGE: the kernel may still hand out 4 KB ones where THP is off) took exact decode
 * of SmolLM2-135M Q4_1 on 2 threads from ~80 to ~110 tok/s (BENCHMARKS.md, "resident weights").
 *
 * What is copied is this runner's own view of each weight (a tensor-parallel rank copies only
 * its rows or columns), compacted (row_stride becomes the row's bytes), and views that are the
 * same weight (a tied embedding and lm_head) share one copy. A matrix matmul reads (under any
 * of its views, so a tied embedding too) is written in the backend's own layout where it has
 * one (ops->pack: the CPU's exact decode kernels). The model's own srt_weight entries are not touched: another runner of the same
 * model still finds the originals. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "model/runner_internal.h"

#define HUGE_PAGE ((size_t)2 << 20)

/* every matrix and vector the forward reads through the runner, NULL entries skipped;
 * linear[i]: matmul reads it (the backend may pack it) */
static int32_t runner_weights(srt_runner *r, srt_weight **out, uint8_t *linear)
{
    int32_t n = 0;
    linear[n] = 0;
    out[n++] = &r->embed;
    linear[n] = 1;
    out[n++] = &r->lm_head.w;
    for (int32_t l = 0; l < r->m->cfg.n_layers; l++) {
        srt_layer *L = &r->layers[l];
        srt_weight *ws[] = { &L->q.w, &L->k.w, &L->v.w, &L->o.w, &L->gate.w, &L->up.w, &L->down.w,
                             &L->input_norm.w, &L->post_attn_norm.w, &L->q_norm.w, &L->k_norm.w };
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (ws[i]->data) {
                linear[n] = i < 7;
                out[n++] = ws[i];
            }
    }
    return n;
}

static int same_view(const srt_weight *a, const srt_weight *b)
{
    return a->data == b->data && a->dtype == b->dtype && a->rows == b->rows && a->cols == b->cols &&
           a->row_stride == b->row_stride;
}

static size_t copy_bytes(const srt_weight *w)
{
    return ((size_t)w->rows * srt_dtype_row_bytes(w->dtype, w->cols) + 63) & ~(size_t)63;
}

/* the bytes of entry i's packed copy (0: copied as it is): a matrix matmul reads, under any of
 * its views (a tied embedding is the lm_head's too), packed once for all of them */
static size_t pack_bytes(srt_runner *r, srt_weight *const *ws, const uint8_t *linear, const int32_t *first,
                         int32_t n, int32_t i)
{
    int used = 0;
    if (first[i] != i || !r->be->ops->pack_bytes)
        return 0;
    for (int32_t k = i; k < n; k++)
        used |= first[k] == i && linear[k];
    if (!used)
        return 0;
    return (r->be->ops->pack_bytes(r->be, ws[i]) + 63) & ~(size_t)63;
}

int runner_make_resident(srt_runner *r, srt_err *err)
{
    int32_t cap = 2 + 11 * r->m->cfg.n_layers, n;
    srt_weight **ws = malloc((size_t)cap * sizeof *ws);
    int32_t *first = malloc((size_t)cap * sizeof *first);   /* the entry whose copy it shares */
    uint8_t *linear = malloc((size_t)cap);
    size_t *packed = malloc((size_t)cap * sizeof *packed);
    if (!ws || !first || !linear || !packed) {
        free(ws);
        free(first);
        free(linear);
        free(packed);
        return srt_err_set(err, "runner: out of memory");
    }
    n = runner_weights(r, ws, linear);
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        first[i] = i;
        for (int32_t k = 0; k < i && first[i] == i; k++)
            if (same_view(ws[k], ws[i]))
                first[i] = k;
    }
    for (int32_t i = 0; i < n; i++) {
        packed[i] = pack_bytes(r, ws, linear, first, n, i);
        if (first[i] == i)
            total += packed[i] ? packed[i] : copy_bytes(ws[i]);
    }
    size_t len = (total + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *mem = len ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : NULL;
    if (mem == MAP_FAILED) {
        free(ws);
        free(first);
        free(linear);
        free(packed);
        return srt_err_set(err, "%s: no memory for a %zu MB copy of the weights (srt_weights_mmap on reads them "
                           "in place)", r->m->path, total >> 20);
    }
    if (len)
        (void)madvise(mem, len, MADV_HUGEPAGE);   /* a hint: EINVAL where THP is not built in */
    /* first[] was settled on the original views; a shared view takes its first's copy */
    char *at = mem;
    for (int32_t i = 0; i < n; i++) {
        srt_weight *w = ws[i];
        if (first[i] != i) {
            *w = *ws[first[i]];
            continue;
        }
        if (packed[i]) {
            srt_weight src = *w;
            r->be->ops->pack(r->be, &src, at, w);
            at += packed[i];
            continue;
        }
        size_t rb = srt_dtype_row_bytes(w->dtype, w->cols), bytes = copy_bytes(w);
        for (int64_t row = 0; row < w->rows; row++)
            memcpy(at + (size_t)row * rb, (const char *)w->data + (size_t)row * w->row_stride, rb);
        w->data = at;
        w->row_stride = rb;
        at += bytes;
    }
    free(ws);
    free(first);
    free(linear);
    free(packed);
    r->wmem = mem;
    r->wmem_len = len;
    return SRT_OK;
}

size_t srt_runner_weights_copied(const srt_runner *r) { return r->wmem_len; }

void runner_release_resident(srt_runner *r)
{
    if (r->wmem)
        munmap(r->wmem, r->wmem_len);
    r->wmem = NULL;
    r->wmem_len = 0;
}
