/* Radix cache: fixed cases (split, LRU, locks) and a seeded random walk of request
 * lifecycles checked against a reference model (the list of cached sequences) and a
 * shadow of the KV content each slot holds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/radix_cache.h"
#include "tap.h"

static uint64_t rng_state;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static int rnd_in(int lo, int hi) { return lo + (int)(rnd() % (uint32_t)(hi - lo + 1)); }

/* ---------------- fixed cases ---------------- */

static void fill(int32_t *row, int n, srt_kv_alloc *kv) { (void)srt_kv_alloc_extend(kv, row, 0, n); }

static void test_split_and_match(void)
{
    srt_kv_alloc kv;
    srt_radix_cache c;
    srt_err err = {{0}};
    int32_t a[] = {1, 2, 3, 4, 5, 6}, b[] = {1, 2, 3, 9, 9};
    int32_t ra[8], rb[8], out[8], last;

    srt_kv_alloc_init(&kv, 64, 1, &err);
    ok(srt_radix_init(&c, &kv, 0, &err) == SRT_OK, "init");
    fill(ra, 6, &kv);
    is_int(srt_radix_insert(&c, a, ra, 6), 0, "insert into empty tree");
    is_int(srt_radix_evictable_size(&c), 6, "6 evictable");
    is_int(srt_radix_peek_prefix(&c, b, 5), 3, "peek finds 3");
    is_int(c.n_free_nodes, c.cap_nodes - 2, "peek did not split");
    is_int(srt_radix_match_prefix(&c, b, 5, out, &last), 3, "match splits at 3");
    ok(out[0] == ra[0] && out[1] == ra[1] && out[2] == ra[2], "matched slots are the inserted ones");
    is_int(c.nodes[last].len, 3, "last node is the 3-token prefix");
    is_int(c.n_free_nodes, c.cap_nodes - 3, "split made a node");
    ok(srt_radix_check(&c, &err) == SRT_OK, "tree valid after split: %s", err.msg);
    fill(rb, 5, &kv);
    is_int(srt_radix_insert(&c, b, rb, 5), 3, "insert b: 3 already there");
    srt_kv_free_slots(&kv, rb, 3);   /* the caller frees its duplicates */
    is_int(srt_radix_total_size(&c), 8, "tree holds 3 + 3 + 2");
    is_int(srt_radix_match_prefix(&c, a, 6, out, &last), 6, "a still matches fully");
    srt_radix_inc_lock(&c, last);
    is_int(srt_radix_protected_size(&c), 6, "locked path protected");
    is_int(srt_radix_evictable_size(&c), 2, "only b's tail evictable");
    is_int(srt_radix_evict(&c, 100), 2, "evict frees only unlocked leaves");
    is_int(srt_radix_peek_prefix(&c, b, 5), 3, "b's shared part survives");
    ok(srt_radix_dec_lock(&c, last) == SRT_OK, "unlock");
    ok(srt_radix_dec_lock(&c, last) == SRT_ERROR, "unlocking below zero refused");
    ok(srt_radix_check(&c, &err) == SRT_OK, "tree valid: %s", err.msg);
    is_int(srt_radix_evict(&c, 100), 6, "the rest evicts (leaf, then its parent)");
    is_int(srt_kv_free_tokens(&kv), 64, "every slot back");
    srt_radix_destroy(&c);
    srt_kv_alloc_destroy(&kv);
}

static void test_lru(void)
{
    srt_kv_alloc kv;
    srt_radix_cache c;
    srt_err err = {{0}};
    int32_t s1[] = {1, 1}, s2[] = {2, 2}, s3[] = {3, 3}, r1[2], r2[2], r3[2], last;

    srt_kv_alloc_init(&kv, 16, 1, &err);
    srt_radix_init(&c, &kv, 0, &err);
    fill(r1, 2, &kv); srt_radix_insert(&c, s1, r1, 2);
    fill(r2, 2, &kv); srt_radix_insert(&c, s2, r2, 2);
    fill(r3, 2, &kv); srt_radix_insert(&c, s3, r3, 2);
    srt_radix_match_prefix(&c, s1, 2, NULL, &last);   /* s1 now most recent */
    is_int(srt_radix_evict(&c, 1), 2, "evict one leaf");
    is_int(srt_radix_peek_prefix(&c, s2, 2), 0, "least recently used (s2) went first");
    ok(srt_radix_peek_prefix(&c, s1, 2) == 2 && srt_radix_peek_prefix(&c, s3, 2) == 2, "others stay");
    srt_radix_evict(&c, 1);
    is_int(srt_radix_peek_prefix(&c, s3, 2), 0, "then s3");
    srt_radix_destroy(&c);
    srt_kv_alloc_destroy(&kv);
}

static void test_paged_keys(void)
{
    srt_kv_alloc kv;
    srt_radix_cache c;
    srt_err err = {{0}};
    int32_t a[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, b[] = {1, 2, 3, 4, 5, 6, 0, 0};
    int32_t ra[12], out[12], last;

    srt_kv_alloc_init(&kv, 64, 4, &err);
    srt_radix_init(&c, &kv, 0, &err);
    fill(ra, 10, &kv);
    is_int(srt_radix_insert(&c, a, ra, 10), 0, "insert 10 tokens with page 4");
    is_int(srt_radix_total_size(&c), 8, "only 2 whole pages kept");
    srt_kv_free_slots(&kv, ra + 8, 2);   /* caller frees its partial page */
    is_int(srt_radix_match_prefix(&c, b, 8, out, &last), 4, "match stops at the page before the mismatch");
    ok(srt_radix_check(&c, &err) == SRT_OK, "valid after page split: %s", err.msg);
    is_int(srt_radix_evict(&c, 1000), 8, "evict all");
    is_int(srt_kv_free_tokens(&kv), 64, "all free");
    srt_radix_destroy(&c);
    srt_kv_alloc_destroy(&kv);
}

/* ---------------- random walk ---------------- */

#define MAXREQ  8
#define MAXLEN  112
#define NBASE   6
#define MAXREF  4096

typedef struct {
    int           live;
    int32_t       tokens[MAXLEN];
    int32_t       len;        /* tokens known */
    int32_t       kv_len;     /* tokens with KV */
    int32_t       row[MAXLEN];
    srt_cache_req cr;
} sim_req;

typedef struct {
    srt_kv_alloc    kv;
    srt_radix_cache c;
    sim_req         reqs[MAXREQ];
    uint64_t       *content;    /* shadow KV: a hash of the prefix whose last token a slot holds */
    int32_t        *ref[MAXREF];   /* reference model: cached sequences */
    int32_t         ref_len[MAXREF];
    int             n_ref;
    int32_t         base[NBASE][64];
    int             ps, disabled;
    int             failures;
    char            why[1100];
} sim;

static uint64_t prefix_hash(const int32_t *t, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint64_t)(uint32_t)t[i]) * 1099511628211ull;
    return h;
}

static void fail(sim *s, const char *msg)
{
    if (!s->failures++)
        snprintf(s->why, sizeof s->why, "%s", msg);
}

static int ref_match(sim *s, const int32_t *q, int len)
{
    int best = 0;
    for (int i = 0; i < s->n_ref; i++) {
        int k = 0;
        while (k < len && k < s->ref_len[i] && s->ref[i][k] == q[k])
            k++;
        if (k > best)
            best = k;
    }
    return best / s->ps * s->ps;
}

static void ref_add(sim *s, const int32_t *t, int len)
{
    len = len / s->ps * s->ps;
    if (s->disabled || len == 0 || s->n_ref >= MAXREF)
        return;
    s->ref[s->n_ref] = malloc(sizeof(int32_t) * (size_t)len);
    memcpy(s->ref[s->n_ref], t, sizeof(int32_t) * (size_t)len);
    s->ref_len[s->n_ref++] = len;
}

/* Eviction is not modelled; after one, each reference sequence shrinks to what is left.
 * What must hold: nothing grows and locked prefixes stay. */
static void ref_after_evict(sim *s)
{
    int j = 0;
    for (int i = 0; i < s->n_ref; i++) {
        int32_t m = srt_radix_peek_prefix(&s->c, s->ref[i], s->ref_len[i]);
        if (m > s->ref_len[i])
            fail(s, "eviction made a sequence longer");
        if (m == 0) {
            free(s->ref[i]);
            continue;
        }
        s->ref[j] = s->ref[i];
        s->ref_len[j++] = m;
    }
    s->n_ref = j;
    for (int r = 0; r < MAXREQ; r++)
        if (s->reqs[r].live && srt_radix_peek_prefix(&s->c, s->reqs[r].tokens, s->reqs[r].cr.prefix_len) !=
                                   (s->disabled ? 0 : s->reqs[r].cr.prefix_len))
            fail(s, "a locked prefix was evicted");
}

static void check_content(sim *s, const int32_t *tokens, const int32_t *slots, int n, const char *what)
{
    for (int p = 0; p < n; p++)
        if (s->content[slots[p]] != prefix_hash(tokens, p + 1)) {
            fail(s, what);
            return;
        }
}

/* Every page is in exactly one place: the free stack, a tree node, or a request's own
 * range [prefix_len, kv_len). */
static void check_all(sim *s)
{
    srt_err err = {{0}};
    int32_t ps = s->ps, np = s->kv.num_pages;
    uint8_t *mark = calloc((size_t)np, 1);
    int64_t own = 0;

    if (srt_radix_check(&s->c, &err) != SRT_OK)
        fail(s, err.msg);
    if (srt_radix_total_size(&s->c) != srt_radix_evictable_size(&s->c) + srt_radix_protected_size(&s->c))
        fail(s, "evictable + protected != total");
    for (int i = 0; i < s->kv.n_free; i++)
        mark[s->kv.free_pages[i]]++;
    for (int32_t i = 1; i < s->c.cap_nodes; i++) {
        const srt_radix_node *n = &s->c.nodes[i];
        if (!n->in_use)
            continue;
        int32_t sl = n->first_slot;
        for (int k = 0; k < n->len; k++, sl = s->c.next[sl])
            if (k % ps == 0)
                mark[sl / ps]++;
    }
    for (int r = 0; r < MAXREQ; r++) {
        sim_req *q = &s->reqs[r];
        if (!q->live)
            continue;
        if (q->cr.prefix_len % ps || q->cr.prefix_len > q->kv_len)
            fail(s, "bad prefix_len");
        for (int p = q->cr.prefix_len; p < q->kv_len; p++)
            if (p % ps == 0) {
                mark[q->row[p] / ps]++;
                own += ps;
            }
        check_content(s, q->tokens, q->row, q->kv_len, "a request's KV content is wrong");
    }
    for (int32_t p = 0; p < np; p++)
        if (mark[p] != 1) {
            fail(s, "a page is lost or owned twice");
            break;
        }
    free(mark);
}

static void compute_kv(sim *s, sim_req *q, int from, int to)
{
    for (int p = from; p < to; p++)
        s->content[q->row[p]] = prefix_hash(q->tokens, p + 1);
}

static int grow(sim *s, sim_req *q, int n)
{
    if (q->kv_len + n > MAXLEN)
        n = MAXLEN - q->kv_len;
    if (n <= 0)
        return 0;
    int32_t need = srt_kv_pages_needed(&s->kv, q->kv_len, n);
    if (need > s->kv.n_free) {
        srt_radix_evict(&s->c, (int64_t)(need - s->kv.n_free) * s->ps);
        ref_after_evict(s);
    }
    if (srt_kv_alloc_extend(&s->kv, q->row, q->kv_len, n) != SRT_OK)
        return -1;
    while (q->len < q->kv_len + n)
        q->tokens[q->len++] = rnd_in(0, 3);
    compute_kv(s, q, q->kv_len, q->kv_len + n);
    q->kv_len += n;
    return 0;
}

static void finish(sim *s, sim_req *q)
{
    ref_add(s, q->tokens, q->kv_len);
    if (srt_radix_cache_finished(&s->c, q->tokens, q->kv_len, &q->cr) != SRT_OK)
        fail(s, "cache_finished failed");
    q->live = 0;
}

static void start(sim *s, sim_req *q)
{
    const int32_t *b = s->base[rnd_in(0, NBASE - 1)];
    int shared = rnd_in(0, 64), extra = rnd_in(1, 24);

    q->len = 0;
    for (int i = 0; i < shared; i++)
        q->tokens[q->len++] = b[i];
    for (int i = 0; i < extra; i++)
        q->tokens[q->len++] = rnd_in(0, 3);
    q->cr.row = q->row;
    int expect = s->disabled ? 0 : ref_match(s, q->tokens, q->len - 1);
    int32_t m = srt_radix_match_req(&s->c, q->tokens, q->len, &q->cr);
    if (m != expect) {
        char buf[128];
        snprintf(buf, sizeof buf, "match_req gave %d, reference %d", m, expect);
        fail(s, buf);
    }
    check_content(s, q->tokens, q->row, m, "matched slots hold other tokens' KV");
    q->kv_len = m;
    q->live = 1;
    /* prefill in one go, or leave it to later chunks */
    if (rnd() % 2 && grow(s, q, q->len - m) < 0)
        finish(s, q);   /* no room: give up, as a retract would */
}

static void run_random(int ps, int disabled, uint64_t seed, int steps)
{
    sim *s = calloc(1, sizeof *s);
    srt_err err = {{0}};

    rng_state = seed;
    s->ps = ps;
    s->disabled = disabled;
    srt_kv_alloc_init(&s->kv, 384, ps, &err);
    srt_radix_init(&s->c, &s->kv, disabled, &err);
    s->content = calloc((size_t)srt_kv_total_tokens(&s->kv), sizeof(uint64_t));
    for (int b = 0; b < NBASE; b++)
        for (int i = 0; i < 64; i++)
            s->base[b][i] = rnd_in(0, 3);
    int64_t baseline = srt_kv_free_tokens(&s->kv);
    int n_ops[7] = {0};

    for (int step = 0; step < steps && !s->failures; step++) {
        int op = rnd_in(0, 6);
        sim_req *q = &s->reqs[rnd_in(0, MAXREQ - 1)];
        n_ops[op]++;
        switch (op) {
        case 0: case 1:   /* start a request */
            if (!q->live)
                start(s, q);
            break;
        case 2:   /* a prefill chunk or some decode steps, then cache_unfinished */
            if (q->live) {
                if (grow(s, q, rnd_in(1, 16)) < 0) {
                    finish(s, q);
                    break;
                }
                ref_add(s, q->tokens, q->kv_len);
                if (srt_radix_cache_unfinished(&s->c, q->tokens, q->kv_len, &q->cr) != SRT_OK)
                    fail(s, "cache_unfinished failed");
                if (!disabled && q->cr.prefix_len != q->kv_len / ps * ps)
                    fail(s, "unfinished: prefix_len not advanced to the aligned KV length");
                check_content(s, q->tokens, q->row, q->kv_len, "unfinished: row re-pointed at wrong slots");
            }
            break;
        case 3:   /* decode a few tokens */
            if (q->live && grow(s, q, rnd_in(1, 4)) < 0)
                finish(s, q);
            break;
        case 4:   /* finish or abort: both cache what was computed */
            if (q->live)
                finish(s, q);
            break;
        case 5: {  /* evict */
            int64_t before = srt_radix_total_size(&s->c), ev = srt_radix_evictable_size(&s->c);
            int64_t want = rnd_in(1, 64);
            int64_t got = srt_radix_evict(&s->c, want);
            if (srt_radix_total_size(&s->c) != before - got)
                fail(s, "evict: total did not drop by the amount reported");
            if (got < (want < ev ? want : ev))
                fail(s, "evict freed less than asked while evictable tokens remained");
            ref_after_evict(s);
            break;
        }
        case 6: {  /* a lookup against the reference */
            int32_t qk[MAXLEN], n = 0, last;
            const int32_t *b = s->base[rnd_in(0, NBASE - 1)];
            int sh = rnd_in(0, 64);
            for (int i = 0; i < sh; i++) qk[n++] = b[i];
            for (int i = rnd_in(0, 8); i > 0; i--) qk[n++] = rnd_in(0, 3);
            int32_t slots[MAXLEN];
            int32_t m = srt_radix_match_prefix(&s->c, qk, n, slots, &last);
            if (m != ref_match(s, qk, n))
                fail(s, "lookup disagrees with the reference");
            check_content(s, qk, slots, m, "lookup slots hold other tokens' KV");
            break;
        }
        }
        check_all(s);
    }
    for (int r = 0; r < MAXREQ; r++)
        if (s->reqs[r].live)
            finish(s, &s->reqs[r]);
    check_all(s);
    is_int(srt_radix_protected_size(&s->c), 0, "ps=%d disabled=%d seed=%llu: nothing locked at the end",
           ps, disabled, (unsigned long long)seed);
    srt_radix_evict(&s->c, INT64_MAX);
    is_int(srt_kv_free_tokens(&s->kv), baseline, "ps=%d disabled=%d: free count back at baseline", ps, disabled);
    is_int(srt_radix_total_size(&s->c), 0, "tree empty after full eviction");
    ok(!s->failures, "ps=%d disabled=%d seed=%llu: %d ops (start %d, chunk %d, decode %d, finish %d, evict %d, lookup %d) with invariants after each%s%s",
       ps, disabled, (unsigned long long)seed, steps, n_ops[0] + n_ops[1], n_ops[2], n_ops[3], n_ops[4],
       n_ops[5], n_ops[6], s->failures ? ": " : "", s->why);
    for (int i = 0; i < s->n_ref; i++)
        free(s->ref[i]);
    free(s->content);
    srt_radix_destroy(&s->c);
    srt_kv_alloc_destroy(&s->kv);
    free(s);
}

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 20261124;
    test_split_and_match();
    test_lru();
    test_paged_keys();
    run_random(1, 0, seed, 6000);
    run_random(4, 0, seed + 1, 6000);
    run_random(2, 0, seed + 2, 6000);
    run_random(1, 1, seed + 3, 3000);
    run_random(4, 1, seed + 4, 3000);
    return tap_done();
}
