/*
 * Token-equivalent states: BYTE states whose token caches (mask.c) are necessarily equal, so that
 * one state per class walks the vocabulary trie and the others share its cache.
 *
 * Non-recursive rules are compiled in place (nfa.c), so a schema's every string, every bounded
 * repetition's copies ({m,n}, maxLength, maxItems) and every use of a $def are separate states
 * whose caches come out the same: without sharing, each walks the whole trie (the bulk of eager
 * compile time). A state's cache is a function of what its frame does with byte strings of at
 * most the longest token's length, so two states with the same byte set whose successors behave
 * the same for one byte fewer have the same cache. That is a bisimulation bounded by depth,
 * computed by partition refinement, one round per byte:
 *
 *   B_0(s)     = one class for every BYTE state
 *   C_j(X)     = the set of what X's closure elements are at depth j: BYTE x -> B_j(x), the
 *                rule's end -> a pop, a call -> (rule, R_j(its return state))
 *   R_j(q)     = C_j(closure of q), the return states' classes: pops consume no byte, so this is
 *                the greatest fixpoint (refined from one class until stable) over B_j
 *   B_{j+1}(s) = (s's byte set, C_j(closure of s's successor))
 *
 * Equal B_j means the same acceptance, death and popping for every string of at most j bytes,
 * whatever frame lies below; rounds stop at the longest token or when a round splits no class
 * (then the partition is a full bisimulation, the same at any depth). Positions of a long bounded
 * repetition further than the longest token from its end fall into one class. Last, states
 * are split by what may follow their rule (below), which the walk uses too.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

#define EL_FINAL (1ull << 62)
#define EL_CALL  (2ull << 62)


/* ---- interned vectors of 64-bit words (also mask.c's sets of threads) ---- */

int
vtab_init(vtab *t, int32_t hint)
{
    uint32_t cap = 16;

    while (cap < (uint32_t) hint * 2 + 2) {
        cap *= 2;
    }
    memset(t, 0, sizeof(*t));
    t->mask = cap - 1;
    t->cap_ids = hint + 1;
    t->cap_pool = (size_t) t->cap_ids * 4;
    t->slots = malloc(cap * sizeof(int32_t));
    t->off = malloc((size_t) t->cap_ids * sizeof(uint32_t));
    t->len = malloc((size_t) t->cap_ids * sizeof(uint32_t));
    t->hash = malloc((size_t) t->cap_ids * sizeof(uint64_t));
    t->pool = malloc(t->cap_pool * sizeof(uint64_t));
    if (!t->slots || !t->off || !t->len || !t->hash || !t->pool) {
        vtab_free(t);
        return -1;
    }
    memset(t->slots, 0xff, cap * sizeof(int32_t));
    return 0;
}


void
vtab_free(vtab *t)
{
    free(t->slots);
    free(t->off);
    free(t->len);
    free(t->hash);
    free(t->pool);
    memset(t, 0, sizeof(*t));
}


void
vtab_reset(vtab *t)
{
    int32_t  i;
    uint32_t h;

    /* clear only the slots in use (each id's probe from its hash reaches it: the loop looks for
       the id, not for a free slot, so slots cleared before do not stop it) */
    for (i = 0; i < t->n_ids; i++) {
        for (h = (uint32_t) t->hash[i] & t->mask; t->slots[h] != i; h = (h + 1) & t->mask) {
        }
        t->slots[h] = -1;
    }
    t->n_ids = 0;
    t->n_pool = 0;
}


static int
vtab_grow(vtab *t)
{
    int32_t   cap = t->cap_ids * 2, i;
    uint32_t  scap = (t->mask + 1) * 2, h;
    uint32_t *o = realloc(t->off, (size_t) cap * sizeof(uint32_t));
    uint32_t *l;
    uint64_t *hs;
    int32_t  *slots;

    if (o == NULL) {
        return -1;
    }
    t->off = o;
    if ((l = realloc(t->len, (size_t) cap * sizeof(uint32_t))) == NULL) {
        return -1;
    }
    t->len = l;
    if ((hs = realloc(t->hash, (size_t) cap * sizeof(uint64_t))) == NULL) {
        return -1;
    }
    t->hash = hs;
    t->cap_ids = cap;
    if ((slots = malloc(scap * sizeof(int32_t))) == NULL) {
        return -1;
    }
    memset(slots, 0xff, scap * sizeof(int32_t));
    for (i = 0; i < t->n_ids; i++) {
        for (h = (uint32_t) t->hash[i] & (scap - 1); slots[h] >= 0; h = (h + 1) & (scap - 1)) {
        }
        slots[h] = i;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = scap - 1;
    return 0;
}


int32_t
vtab_intern(vtab *t, const uint64_t *v, uint32_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull * (n + 1);
    uint32_t k, i;
    int32_t  id;

    for (i = 0; i < n; i++) {
        h = (h ^ v[i]) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    for (k = (uint32_t) h & t->mask; (id = t->slots[k]) >= 0; k = (k + 1) & t->mask) {
        if (t->hash[id] == h && t->len[id] == n
            && memcmp(&t->pool[t->off[id]], v, n * sizeof(uint64_t)) == 0)
        {
            return id;
        }
    }
    if (t->n_ids == t->cap_ids || (uint32_t) t->n_ids * 2 + 2 > t->mask + 1) {
        if (vtab_grow(t) != 0) {
            return -1;
        }
        for (k = (uint32_t) h & t->mask; t->slots[k] >= 0; k = (k + 1) & t->mask) {
        }
    }
    if (t->n_pool + n > t->cap_pool) {
        size_t    cap = (t->n_pool + n) * 2;
        uint64_t *p = realloc(t->pool, cap * sizeof(uint64_t));
        if (p == NULL) {
            return -1;
        }
        t->pool = p;
        t->cap_pool = cap;
    }
    id = t->n_ids++;
    t->off[id] = (uint32_t) t->n_pool;
    t->len[id] = n;
    t->hash[id] = h;
    memcpy(&t->pool[t->n_pool], v, n * sizeof(uint64_t));
    t->n_pool += n;
    t->slots[k] = id;
    return id;
}


static int
cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *) x, b = *(const uint64_t *) y;
    return a < b ? -1 : a > b;
}


typedef struct {
    const srt_grammar *g;
    vtab               t;
    uint64_t          *buf;
    int32_t           *b;       /* B_j per BYTE state */
    int32_t           *r;       /* R_j per return state */
} eq_ctx;


/* C_j(closure of q) */
static int32_t
closure_class(eq_ctx *e, int32_t q)
{
    const srt_grammar *g = e->g;
    int32_t            i, x;
    uint32_t           n = 0, k, u;

    for (i = g->clo_off[q]; i < g->clo_off[q + 1]; i++) {
        x = g->clo[i];
        if (x == CLO_FINAL) {
            e->buf[n++] = EL_FINAL;
        } else if (g->st[x].kind == ST_BYTE) {
            e->buf[n++] = (uint64_t) (uint32_t) e->b[x];
        } else {
            e->buf[n++] = EL_CALL | (uint64_t) (uint32_t) g->st[x].a << 31
                          | (uint64_t) (uint32_t) e->r[g->st[x].b];
        }
    }
    qsort(e->buf, n, sizeof(uint64_t), cmp_u64);
    for (k = u = 0; k < n; k++) {
        if (u == 0 || e->buf[u - 1] != e->buf[k]) {
            e->buf[u++] = e->buf[k];
        }
    }
    return vtab_intern(&e->t, e->buf, u);
}


/* ---- what can follow a rule ----
 *
 * A cache walks a state over an unknown frame; a path that returns into it makes the tokens
 * that go on "uncertain", checked against the real stack at every step (matcher.c). Most need
 * not be: the byte after the return must start whatever follows the rule at one of its call
 * sites (a JSON string is followed by ',', '}', ']', ':' or whitespace, never by ')' or '>'). So
 * per rule, a superset of those bytes (every callee taken as possibly empty):
 *
 *   FB(q)      = the bytes the closure of q can start with: BYTE y -> its set; a call y ->
 *                FB(start of its rule) and FB(its return state); the rule's end -> FOLLOW(q's rule)
 *   FOLLOW(r)  = the union of FB(return state) over r's call sites (every byte if none)
 *
 * solved by iterating to the least fixpoint. A state's rule ("owner") is the rule from whose
 * start it is reached without calls; a state reached from two is owned by none (every byte). */

static int
or_into(uint64_t *dst, const uint64_t *src)
{
    int changed = 0, k;

    for (k = 0; k < 4; k++) {
        if ((dst[k] | src[k]) != dst[k]) {
            dst[k] |= src[k];
            changed = 1;
        }
    }
    return changed;
}


int
grammar_follow(srt_grammar *g)
{
    static const uint64_t all[4] = { ~0ull, ~0ull, ~0ull, ~0ull };
    int32_t   *owner, *stack, *seen, s, r, i, x, n;
    uint64_t  *fol, *fb;
    uint8_t   *called;
    int        changed;

    owner = malloc((size_t) g->n_st * sizeof(int32_t));
    seen = calloc(g->n_st, sizeof(int32_t));
    stack = malloc(((size_t) g->n_st + 1) * sizeof(int32_t));
    called = calloc((size_t) g->n_rules + 1, 1);
    fol = calloc((size_t) g->n_rules * 4 + 4, sizeof(uint64_t));
    fb = calloc((size_t) g->n_st * 4, sizeof(uint64_t));
    if (!owner || !seen || !stack || !called || !fol || !fb) {
        free(owner); free(seen); free(stack); free(called); free(fol); free(fb);
        return -1;
    }
    for (s = 0; s < g->n_st; s++) {
        owner[s] = -1;
    }
    for (r = 0; r < g->n_rules; r++) {
        if (g->rule_start[r] < 0) {
            continue;
        }
        n = 0;
        stack[n++] = g->rule_start[r];
        seen[g->rule_start[r]] = r + 1;
        while (n) {
            const nfa_state *st = &g->st[s = stack[--n]];
            int32_t          next[2] = { -1, -1 };
            owner[s] = owner[s] == -1 || owner[s] == r ? r : -2;
            if (st->kind == ST_BYTE) {
                next[0] = st->a;
            } else if (st->kind == ST_SPLIT) {
                next[0] = st->a;
                next[1] = st->b;
            } else if (st->kind == ST_CALL) {
                next[0] = st->b;
            }
            for (i = 0; i < 2; i++) {
                if (next[i] >= 0 && seen[next[i]] != r + 1) {
                    seen[next[i]] = r + 1;
                    stack[n++] = next[i];
                }
            }
        }
    }
    for (s = 0; s < g->n_st; s++) {
        if (owner[s] == -2) {
            owner[s] = -1;
        }
        if (g->st[s].kind == ST_CALL) {
            called[g->st[s].a] = 1;
        }
    }
    for (r = 0; r < g->n_rules; r++) {
        if (!called[r]) {
            memcpy(&fol[(size_t) r * 4], all, sizeof(all));
        }
    }
    do {
        changed = 0;
        for (s = 0; s < g->n_st; s++) {
            for (i = g->clo_off[s]; i < g->clo_off[s + 1]; i++) {
                x = g->clo[i];
                if (x == CLO_FINAL) {
                    changed |= or_into(&fb[(size_t) s * 4],
                                       owner[s] >= 0 ? &fol[(size_t) owner[s] * 4] : all);
                } else if (g->st[x].kind == ST_BYTE) {
                    changed |= or_into(&fb[(size_t) s * 4], &g->sets[(size_t) g->st[x].set * 4]);
                } else {
                    if (g->rule_start[g->st[x].a] >= 0) {
                        changed |= or_into(&fb[(size_t) s * 4],
                                           &fb[(size_t) g->rule_start[g->st[x].a] * 4]);
                    }
                    changed |= or_into(&fb[(size_t) s * 4], &fb[(size_t) g->st[x].b * 4]);
                }
            }
        }
        for (s = 0; s < g->n_st; s++) {
            if (g->st[s].kind == ST_CALL) {
                changed |= or_into(&fol[(size_t) g->st[s].a * 4], &fb[(size_t) g->st[s].b * 4]);
            }
        }
    } while (changed);
    free(seen);
    free(stack);
    free(called);
    free(fb);
    g->owner = owner;
    g->follow = fol;
    return 0;
}


int
grammar_equiv(srt_grammar *g, uint32_t depth, int32_t **rep_out)
{
    eq_ctx    e;
    int32_t  *bs = NULL, *qs = NULL, *setc = NULL, *tmp = NULL, *first = NULL, *rep = NULL;
    int32_t   n_bs = 0, n_qs = 0, s, i, n_b = 1, n_r, c, max_clo = 1;
    uint8_t  *is_q = NULL;
    uint32_t  j;
    int       rc = -1;

    *rep_out = NULL;
    memset(&e, 0, sizeof(e));
    e.g = g;
    for (s = 0; s < g->n_st; s++) {
        if (g->clo_off[s + 1] - g->clo_off[s] > max_clo) {
            max_clo = g->clo_off[s + 1] - g->clo_off[s];
        }
    }
    bs = malloc((size_t) g->n_st * sizeof(int32_t));
    qs = malloc((size_t) g->n_st * sizeof(int32_t));
    setc = malloc((size_t) g->n_st * sizeof(int32_t));
    tmp = malloc((size_t) g->n_st * sizeof(int32_t));
    first = malloc((size_t) g->n_st * sizeof(int32_t));
    rep = malloc((size_t) g->n_st * sizeof(int32_t));
    is_q = calloc(g->n_st, 1);
    e.b = calloc(g->n_st, sizeof(int32_t));
    e.r = calloc(g->n_st, sizeof(int32_t));
    e.buf = malloc((size_t) max_clo * sizeof(uint64_t));
    if (!bs || !qs || !setc || !tmp || !first || !rep || !is_q || !e.b || !e.r || !e.buf
        || vtab_init(&e.t, g->n_st) != 0)
    {
        goto done;
    }
    for (s = 0; s < g->n_st; s++) {
        if (g->st[s].kind == ST_BYTE) {
            bs[n_bs++] = s;
            /* byte sets by content: the automaton makes a new set per BYTE state */
            if ((setc[s] = vtab_intern(&e.t, &g->sets[(size_t) g->st[s].set * 4], 4)) < 0) {
                goto done;
            }
        } else if (g->st[s].kind == ST_CALL && !is_q[g->st[s].b]) {
            is_q[g->st[s].b] = 1;
            qs[n_qs++] = g->st[s].b;
        }
    }

    for (j = 0; j < depth; j++) {
        /* R_j: refine the return states from one class until a pass splits none */
        for (i = 0; i < n_qs; i++) {
            e.r[qs[i]] = 0;
        }
        n_r = 1;
        while (n_qs) {
            vtab_reset(&e.t);
            for (i = 0; i < n_qs; i++) {
                if ((tmp[qs[i]] = closure_class(&e, qs[i])) < 0) {
                    goto done;
                }
            }
            for (i = 0; i < n_qs; i++) {
                e.r[qs[i]] = tmp[qs[i]];
            }
            if (e.t.n_ids == n_r) {
                break;
            }
            n_r = e.t.n_ids;
        }
        /* B_{j+1} */
        vtab_reset(&e.t);
        for (i = 0; i < n_bs; i++) {
            if ((tmp[bs[i]] = closure_class(&e, g->st[bs[i]].a)) < 0) {
                goto done;
            }
        }
        vtab_reset(&e.t);
        for (i = 0; i < n_bs; i++) {
            uint64_t key[2] = { (uint64_t) setc[bs[i]], (uint64_t) tmp[bs[i]] };
            if ((c = vtab_intern(&e.t, key, 2)) < 0) {
                goto done;
            }
            e.b[bs[i]] = c;
        }
        if (e.t.n_ids == n_b) {
            break;          /* no class split: stable at every depth */
        }
        n_b = e.t.n_ids;
    }

    /* a cache also depends on what may follow the state's rule (grammar_follow) */
    vtab_reset(&e.t);
    for (i = 0; i < n_bs; i++) {
        uint64_t key[5];
        s = bs[i];
        key[0] = (uint64_t) e.b[s];
        if (g->follow && g->owner[s] >= 0) {
            memcpy(&key[1], &g->follow[(size_t) g->owner[s] * 4], 4 * sizeof(uint64_t));
        }
        if ((tmp[s] = vtab_intern(&e.t, key, g->follow && g->owner[s] >= 0 ? 5 : 1)) < 0) {
            goto done;
        }
    }
    for (s = 0; s < g->n_st; s++) {
        first[s] = -1;
        rep[s] = s;
    }
    for (i = 0; i < n_bs; i++) {
        s = bs[i];
        if (first[tmp[s]] < 0) {
            first[tmp[s]] = s;
        }
        rep[s] = first[tmp[s]];
    }
    *rep_out = rep;
    rep = NULL;
    rc = 0;

done:
    vtab_free(&e.t);
    free(e.b);
    free(e.r);
    free(e.buf);
    free(bs);
    free(qs);
    free(setc);
    free(tmp);
    free(first);
    free(rep);
    free(is_q);
    return rc;
}
