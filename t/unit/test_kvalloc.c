/* KV slot allocator and req_to_token table. */
#include <string.h>

#include "cache/kv_alloc.h"
#include "tap.h"

static void test_budget(void)
{
    is_int(srt_kv_budget_tokens(1000, 0.9, 0, 0, 0, 16), 992, "explicit budget rounds down to pages");
    /* 0.5 * 1 GiB - 100 MiB over 4 KiB per token */
    is_int(srt_kv_budget_tokens(0, 0.5, 1ull << 30, 100ull << 20, 4096, 1),
           ((1ull << 29) - (100ull << 20)) / 4096, "fraction budget");
    is_int(srt_kv_budget_tokens(0, 0.1, 1ull << 30, 1ull << 30, 4096, 1), 0,
           "weights larger than the fraction: no budget");
}

static void test_page1(void)
{
    srt_kv_alloc a;
    srt_err err = {{0}};
    int32_t row[64];

    ok(srt_kv_alloc_init(&a, 8, 1, &err) == SRT_OK, "init 8 slots");
    is_int(srt_kv_free_tokens(&a), 8, "all free");
    ok(srt_kv_alloc_extend(&a, row, 0, 5) == SRT_OK, "alloc 5");
    is_int(srt_kv_free_tokens(&a), 3, "3 left");
    ok(srt_kv_alloc_extend(&a, row, 5, 4) == SRT_ERROR, "alloc 4 more fails");
    is_int(srt_kv_free_tokens(&a), 3, "failed alloc took nothing");
    int distinct = 1;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < i; j++)
            distinct &= row[i] != row[j];
    ok(distinct, "slots distinct");
    ok(srt_kv_free_slots(&a, row + 1, 2) == SRT_OK, "free 2");
    is_int(srt_kv_free_tokens(&a), 5, "5 free");
    ok(srt_kv_free_slots(&a, row + 1, 1) == SRT_ERROR, "double free rejected");
    is_int(srt_kv_free_tokens(&a), 5, "double free changed nothing");
    int32_t bad = 8;
    ok(srt_kv_free_slots(&a, &bad, 1) == SRT_ERROR, "out of range slot rejected");
    ok(srt_kv_ref_slots(&a, row, 1) == SRT_OK, "ref a slot");
    ok(srt_kv_free_slots(&a, row, 1) == SRT_OK, "unref once");
    is_int(srt_kv_free_tokens(&a), 5, "still held by the second reference");
    ok(srt_kv_free_slots(&a, row, 1) == SRT_OK && srt_kv_free_tokens(&a) == 6, "second unref frees");
    srt_kv_alloc_destroy(&a);
}

static void test_paged(void)
{
    srt_kv_alloc a;
    srt_err err = {{0}};
    int32_t row[64], row2[64];

    ok(srt_kv_alloc_init(&a, 35, 4, &err) == SRT_OK, "init paged");
    is_int(srt_kv_total_tokens(&a), 32, "35 tokens -> 8 pages of 4");
    is_int(srt_kv_pages_needed(&a, 0, 5), 2, "5 tokens need 2 pages");
    is_int(srt_kv_pages_needed(&a, 5, 3), 0, "3 more fit the partial page");
    is_int(srt_kv_pages_needed(&a, 5, 4), 1, "4 more need one page");
    ok(srt_kv_alloc_extend(&a, row, 0, 5) == SRT_OK, "alloc 5 tokens");
    is_int(srt_kv_free_tokens(&a), 24, "2 pages taken");
    ok(srt_kv_alloc_extend(&a, row, 5, 3) == SRT_OK, "extend within the page");
    is_int(srt_kv_free_tokens(&a), 24, "no new page");
    int layout = 1;
    for (int p = 0; p < 8; p++)
        layout &= row[p] % 4 == p % 4 && (p % 4 == 0 || row[p] == row[p - 1] + 1);
    ok(layout, "position p sits at offset p %% page_size");
    ok(srt_kv_free_slots(&a, row + 1, 3) == SRT_ERROR, "freeing from mid-page rejected");
    /* fork: share the first page, then grow separately */
    memcpy(row2, row, sizeof(int32_t) * 4);
    ok(srt_kv_ref_slots(&a, row2, 4) == SRT_OK, "share first page");
    ok(srt_kv_alloc_extend(&a, row2, 4, 2) == SRT_OK, "fork grows its own page");
    ok(row2[4] / 4 != row[4] / 4, "fork's second page is its own");
    ok(srt_kv_free_slots(&a, row, 8) == SRT_OK, "free original");
    is_int(srt_kv_free_tokens(&a), 24, "shared page and fork's page still held");
    ok(srt_kv_free_slots(&a, row2, 6) == SRT_OK, "free fork");
    is_int(srt_kv_free_tokens(&a), 32, "all back");
    ok(srt_kv_alloc_extend(&a, row, 0, 33) == SRT_ERROR, "more than the pool fails");
    ok(srt_kv_alloc_extend(&a, row, 0, 32) == SRT_OK && srt_kv_free_tokens(&a) == 0, "whole pool");
    srt_kv_alloc_reset(&a);
    is_int(srt_kv_free_tokens(&a), 32, "reset");
    srt_kv_alloc_destroy(&a);
    ok(srt_kv_alloc_init(&a, 3, 4, &err) == SRT_ERROR && strstr(err.msg, "budget"), "budget below a page rejected: %s", err.msg);
    ok(srt_kv_alloc_init(&a, 100, 0, &err) == SRT_ERROR, "page size 0 rejected");
}

static void test_req_to_token(void)
{
    srt_req_to_token r;
    srt_err err = {{0}};

    ok(srt_req_to_token_init(&r, 3, 16, &err) == SRT_OK, "r2t init");
    int32_t a = srt_req_to_token_alloc(&r), b = srt_req_to_token_alloc(&r), c = srt_req_to_token_alloc(&r);
    ok(a != b && b != c && a != c && a >= 0 && b >= 0 && c >= 0, "three distinct rows");
    is_int(srt_req_to_token_alloc(&r), -1, "fourth row refused");
    srt_req_to_token_row(&r, b)[15] = 7;
    is_int(r.table[b * 16 + 15], 7, "row addressing");
    srt_req_to_token_free(&r, b);
    is_int(srt_req_to_token_alloc(&r), b, "freed row reused");
    srt_req_to_token_destroy(&r);
    ok(srt_req_to_token_init(&r, 0, 16, &err) == SRT_ERROR, "zero rows rejected");
}

int main(void)
{
    test_budget();
    test_page1();
    test_paged();
    test_req_to_token();
    return tap_done();
}
