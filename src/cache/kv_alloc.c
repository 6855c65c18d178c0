#include <stdlib.h>
#include <string.h>

#include "cache/kv_alloc.h"

int64_t srt_kv_budget_tokens(int64_t max_total_tokens, double mem_fraction,
                             uint64_t device_bytes, uint64_t weight_bytes,
                             uint64_t kv_bytes_per_token, int page_size)
{
    int64_t tokens;

    if (page_size < 1)
        page_size = 1;
    if (max_total_tokens > 0) {
        tokens = max_total_tokens;
    } else {
        double usable = mem_fraction * (double)device_bytes - (double)weight_bytes;
        if (usable <= 0 || kv_bytes_per_token == 0)
            return 0;
        tokens = (int64_t)(usable / (double)kv_bytes_per_token);
    }
    return tokens / page_size * page_size;
}

int srt_kv_alloc_init(srt_kv_alloc *a, int64_t total_tokens, int page_size, srt_err *err)
{
    memset(a, 0, sizeof *a);
    if (page_size < 1 || page_size > 4096)
        return srt_err_set(err, "kv page size %d out of range [1, 4096]", page_size);
    if (total_tokens < page_size || total_tokens / page_size > INT32_MAX / 2)
        return srt_err_set(err, "kv budget of %lld tokens is out of range for page size %d",
                           (long long)total_tokens, page_size);
    a->page_size = page_size;
    a->num_pages = (int32_t)(total_tokens / page_size);
    a->free_pages = malloc(sizeof(int32_t) * (size_t)a->num_pages);
    a->page_ref = calloc((size_t)a->num_pages, sizeof(uint16_t));
    if (!a->free_pages || !a->page_ref) {
        srt_kv_alloc_destroy(a);
        return srt_err_set(err, "out of memory for a kv allocator of %lld tokens",
                           (long long)total_tokens);
    }
    srt_kv_alloc_reset(a);
    return SRT_OK;
}

void srt_kv_alloc_destroy(srt_kv_alloc *a)
{
    free(a->free_pages);
    free(a->page_ref);
    memset(a, 0, sizeof *a);
}

void srt_kv_alloc_reset(srt_kv_alloc *a)
{
    /* Low pages on top of the stack: tests and dumps read more easily. */
    for (int32_t i = 0; i < a->num_pages; i++)
        a->free_pages[i] = a->num_pages - 1 - i;
    a->n_free = a->num_pages;
    memset(a->page_ref, 0, sizeof(uint16_t) * (size_t)a->num_pages);
}

int srt_kv_alloc_extend(srt_kv_alloc *a, int32_t *row, int64_t cur_len, int64_t n)
{
    int32_t ps = a->page_size;

    if (n < 0 || cur_len < 0)
        return SRT_ERROR;
    if (srt_kv_pages_needed(a, cur_len, n) > a->n_free)
        return SRT_ERROR;
    for (int64_t p = cur_len; p < cur_len + n; p++) {
        if (p % ps == 0) {
            int32_t page = a->free_pages[--a->n_free];
            a->page_ref[page] = 1;
            row[p] = page * ps;
        } else {
            row[p] = row[p - 1] + 1;
        }
    }
    return SRT_OK;
}

/* Walks the distinct pages of a slot range; returns -1 on a layout error. */
static int for_each_page(srt_kv_alloc *a, const int32_t *slots, int64_t n, int delta, int apply)
{
    int32_t ps = a->page_size, prev = -1;

    if (n > 0 && (slots[0] < 0 || slots[0] % ps != 0))
        return -1;
    for (int64_t i = 0; i < n; i++) {
        int32_t s = slots[i];
        if (s < 0 || s / ps >= a->num_pages)
            return -1;
        int32_t page = s / ps;
        if (page == prev)
            continue;
        if (s % ps != 0)
            return -1;   /* a page entered mid-way: not a row range */
        prev = page;
        if (!apply) {
            if (a->page_ref[page] == 0 || (delta > 0 && a->page_ref[page] == UINT16_MAX))
                return -1;
            continue;
        }
        if (delta > 0) {
            a->page_ref[page]++;
        } else if (--a->page_ref[page] == 0) {
            a->free_pages[a->n_free++] = page;
        }
    }
    return 0;
}

int srt_kv_free_slots(srt_kv_alloc *a, const int32_t *slots, int64_t n)
{
    /* Validate first so a bad call changes nothing; a page listed twice would slip past
     * validation only if the range were not a row range, which the layout check rejects. */
    if (for_each_page(a, slots, n, -1, 0) < 0)
        return SRT_ERROR;
    for_each_page(a, slots, n, -1, 1);
    return SRT_OK;
}

int srt_kv_ref_slots(srt_kv_alloc *a, const int32_t *slots, int64_t n)
{
    if (for_each_page(a, slots, n, +1, 0) < 0)
        return SRT_ERROR;
    for_each_page(a, slots, n, +1, 1);
    return SRT_OK;
}

int srt_req_to_token_init(srt_req_to_token *r, int32_t rows, int32_t ctx, srt_err *err)
{
    memset(r, 0, sizeof *r);
    if (rows < 1 || ctx < 1 || (int64_t)rows * ctx > ((int64_t)1 << 34))
        return srt_err_set(err, "req_to_token table %d x %d is out of range", rows, ctx);
    r->rows = rows;
    r->ctx = ctx;
    r->table = malloc(sizeof(int32_t) * (size_t)rows * (size_t)ctx);
    r->free_rows = malloc(sizeof(int32_t) * (size_t)rows);
    if (!r->table || !r->free_rows) {
        srt_req_to_token_destroy(r);
        return srt_err_set(err, "out of memory for a %d x %d req_to_token table", rows, ctx);
    }
    for (int32_t i = 0; i < rows; i++)
        r->free_rows[i] = rows - 1 - i;
    r->n_free = rows;
    return SRT_OK;
}

void srt_req_to_token_destroy(srt_req_to_token *r)
{
    free(r->table);
    free(r->free_rows);
    memset(r, 0, sizeof *r);
}

int32_t srt_req_to_token_alloc(srt_req_to_token *r)
{
    return r->n_free > 0 ? r->free_rows[--r->n_free] : -1;
}

void srt_req_to_token_free(srt_req_to_token *r, int32_t row)
{
    if (row >= 0 && row < r->rows && r->n_free < r->rows)
        r->free_rows[r->n_free++] = row;
}
