/* Slot allocator for the paged KV pool and the request-to-token table.
 *
 * The pool holds num_pages * page_size token slots; a slot is page * page_size + offset.
 * Position p of a sequence always lives at offset p % page_size of one of its pages, so
 * page-aligned prefixes can be shared between sequences (radix cache, n > 1) page by page.
 * Pages are reference counted: a page is free when its count drops to zero. Nothing here
 * allocates after init. */
#ifndef SRT_CACHE_KV_ALLOC_H
#define SRT_CACHE_KV_ALLOC_H

#include <stdint.h>

#include "srt/common.h"

typedef struct srt_kv_alloc {
    int32_t   page_size;
    int32_t   num_pages;
    int32_t   n_free;       /* pages on the free stack */
    int32_t  *free_pages;   /* stack of free page ids */
    uint16_t *page_ref;     /* per page; 0 = free */
} srt_kv_alloc;

/* KV budget in tokens: max_total_tokens when > 0, else what mem_fraction of the device
 * memory leaves after the weights, at kv_bytes_per_token each. Rounded down to pages. */
int64_t srt_kv_budget_tokens(int64_t max_total_tokens, double mem_fraction,
                             uint64_t device_bytes, uint64_t weight_bytes,
                             uint64_t kv_bytes_per_token, int page_size);

int  srt_kv_alloc_init(srt_kv_alloc *a, int64_t total_tokens, int page_size, srt_err *err);
void srt_kv_alloc_destroy(srt_kv_alloc *a);
void srt_kv_alloc_reset(srt_kv_alloc *a);   /* every page free again */

static inline int64_t srt_kv_total_tokens(const srt_kv_alloc *a)
{ return (int64_t)a->num_pages * a->page_size; }
static inline int64_t srt_kv_free_tokens(const srt_kv_alloc *a)
{ return (int64_t)a->n_free * a->page_size; }

/* New pages a sequence of cur_len tokens needs to grow by n tokens. */
static inline int32_t srt_kv_pages_needed(const srt_kv_alloc *a, int64_t cur_len, int64_t n)
{
    int64_t ps = a->page_size;
    return (int32_t)((cur_len + n + ps - 1) / ps - (cur_len + ps - 1) / ps);
}

/* Fills row[cur_len .. cur_len+n) with slots, continuing the partly filled last page of
 * row (row[cur_len-1]) first. All or nothing: SRT_ERROR (nothing taken) when the free
 * pages do not suffice. */
int srt_kv_alloc_extend(srt_kv_alloc *a, int32_t *row, int64_t cur_len, int64_t n);

/* Drops one reference from every page touched by slots[0..n). The range must start at a
 * page boundary and hold each page's slots contiguously (true of any row range that
 * starts at a page-aligned position). SRT_ERROR on a slot out of range, a misaligned
 * start or a page that is already free (nothing is changed then). */
int srt_kv_free_slots(srt_kv_alloc *a, const int32_t *slots, int64_t n);

/* Adds one reference to every page touched by slots[0..n) (same layout rule as free). */
int srt_kv_ref_slots(srt_kv_alloc *a, const int32_t *slots, int64_t n);

/* Request-to-token table: rows x ctx int32 slot ids, rows handed out from a free list. */
typedef struct srt_req_to_token {
    int32_t  rows;
    int32_t  ctx;
    int32_t *table;
    int32_t *free_rows;
    int32_t  n_free;
} srt_req_to_token;

int      srt_req_to_token_init(srt_req_to_token *r, int32_t rows, int32_t ctx, srt_err *err);
void     srt_req_to_token_destroy(srt_req_to_token *r);
int32_t  srt_req_to_token_alloc(srt_req_to_token *r);          /* -1 when none free */
void     srt_req_to_token_free(srt_req_to_token *r, int32_t row);
static inline int32_t *srt_req_to_token_row(srt_req_to_token *r, int32_t row)
{ return r->table + (int64_t)row * r->ctx; }

#endif
