/*
 * The pushdown automaton's step: a set of threads, each a BYTE state on a stack of return frames,
 * advanced by one byte.
 *
 * Frames are hash-consed (state, parent) pairs, so equal stacks are equal ids and a thread set
 * never holds the same stack twice however many ways the grammar reaches it (an ambiguous grammar
 * costs nothing more than an unambiguous one). Nodes are only ever appended; a caller that explores
 * (mask computation) takes the count first and truncates back to it afterwards.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

#define MAX_NODES (8 << 20)


static uint32_t
hash2(int32_t a, int32_t b)
{
    uint64_t h = ((uint64_t) (uint32_t) a << 32 | (uint32_t) b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t) (h >> 32);
}


static int
nt_grow(node_table *t)
{
    uint32_t  cap = (t->mask + 1) * 2, i, h;
    int32_t  *slots = malloc(cap * sizeof(int32_t));

    if (slots == NULL) {
        return -1;
    }
    memset(slots, 0xff, cap * sizeof(int32_t));
    for (i = 2; i < (uint32_t) t->n; i++) {
        h = hash2(t->state[i], t->parent[i]) & (cap - 1);
        while (slots[h] >= 0) {
            h = (h + 1) & (cap - 1);
        }
        slots[h] = (int32_t) i;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = cap - 1;
    return 0;
}


int
pda_init(pda *p, const srt_grammar *g)
{
    memset(p, 0, sizeof(*p));
    p->g = g;
    p->nt.cap = 1024;
    p->nt.state = malloc(p->nt.cap * sizeof(int32_t));
    p->nt.parent = malloc(p->nt.cap * sizeof(int32_t));
    p->nt.mask = 2047;
    p->nt.slots = malloc((p->nt.mask + 1) * sizeof(int32_t));
    p->vs.mask = 1023;
    p->vs.keys = malloc((p->vs.mask + 1) * sizeof(uint64_t));
    p->vs.gen = calloc(p->vs.mask + 1, sizeof(uint32_t));
    p->nt.direct[0] = malloc(((size_t) g->n_st + 1) * 2 * sizeof(int32_t));
    if (!p->nt.state || !p->nt.parent || !p->nt.slots || !p->vs.keys || !p->vs.gen || !p->nt.direct[0]) {
        pda_free(p);
        return -1;
    }
    memset(p->nt.slots, 0xff, (p->nt.mask + 1) * sizeof(int32_t));
    p->nt.direct[1] = p->nt.direct[0] + g->n_st + 1;
    memset(p->nt.direct[0], 0xff, ((size_t) g->n_st + 1) * 2 * sizeof(int32_t));
    /* NODE_ROOT and NODE_SENT: never looked up */
    p->nt.state[0] = p->nt.state[1] = -1;
    p->nt.parent[0] = p->nt.parent[1] = -1;
    p->nt.n = 2;
    p->vs.cur = 1;
    return 0;
}


void
pda_free(pda *p)
{
    free(p->nt.state);
    free(p->nt.parent);
    free(p->nt.slots);
    free(p->vs.keys);
    free(p->vs.gen);
    free(p->nt.direct[0]);
    memset(p, 0, sizeof(*p));
}


int32_t
pda_node(pda *p, int32_t state, int32_t parent)
{
    node_table *t = &p->nt;
    uint32_t    h;
    int32_t     id;

    if ((uint32_t) parent <= NODE_SENT && (id = t->direct[parent][state]) >= 0) {
        return id;
    }
    h = hash2(state, parent) & t->mask;
    while ((id = t->slots[h]) >= 0) {
        if (t->state[id] == state && t->parent[id] == parent) {
            return id;
        }
        h = (h + 1) & t->mask;
    }
    if (t->n >= MAX_NODES) {
        p->overflow = 1;
        return -1;
    }
    if (t->n == t->cap) {
        int32_t cap = t->cap * 2;
        int32_t *s = realloc(t->state, cap * sizeof(int32_t));
        if (s == NULL) {
            p->overflow = 1;
            return -1;
        }
        t->state = s;
        s = realloc(t->parent, cap * sizeof(int32_t));
        if (s == NULL) {
            p->overflow = 1;
            return -1;
        }
        t->parent = s;
        t->cap = cap;
    }
    id = t->n++;
    t->state[id] = state;
    t->parent[id] = parent;
    t->slots[h] = id;
    if ((uint32_t) parent <= NODE_SENT) {
        t->direct[parent][state] = id;
    }
    if ((uint32_t) t->n * 2 > t->mask + 1 && nt_grow(t) != 0) {
        p->overflow = 1;
    }
    return id;
}


/* Forget nodes n.. (newest first, so each is the last of its probe chain when removed). */
void
pda_truncate(pda *p, int32_t n)
{
    node_table *t = &p->nt;
    uint32_t    h;
    int32_t     id;

    while (t->n > n && t->n > 2) {
        id = t->n - 1;
        if ((uint32_t) t->parent[id] <= NODE_SENT) {
            t->direct[t->parent[id]][t->state[id]] = -1;
        }
        h = hash2(t->state[id], t->parent[id]) & t->mask;
        while (t->slots[h] != id) {
            h = (h + 1) & t->mask;
        }
        t->slots[h] = -1;
        /* re-seat the rest of the probe chain so lookups do not stop at the hole */
        h = (h + 1) & t->mask;
        while (t->slots[h] >= 0) {
            int32_t  o = t->slots[h];
            uint32_t k = hash2(t->state[o], t->parent[o]) & t->mask;
            t->slots[h] = -1;
            while (t->slots[k] >= 0) {
                k = (k + 1) & t->mask;
            }
            t->slots[k] = o;
            h = (h + 1) & t->mask;
        }
        t->n--;
    }
}


/* ---- visited (state, parent) pairs of one step ---- */

static int
vs_grow(visit_set *v)
{
    uint32_t  cap = (v->mask + 1) * 2, i, h;
    uint64_t *keys = malloc(cap * sizeof(uint64_t));
    uint32_t *gen = calloc(cap, sizeof(uint32_t));

    if (keys == NULL || gen == NULL) {
        free(keys);
        free(gen);
        return -1;
    }
    for (i = 0; i <= v->mask; i++) {
        if (v->gen[i] == v->cur) {
            h = (uint32_t) ((v->keys[i] * 0x9E3779B97F4A7C15ull) >> 40) & (cap - 1);
            while (gen[h] == v->cur) {
                h = (h + 1) & (cap - 1);
            }
            keys[h] = v->keys[i];
            gen[h] = v->cur;
        }
    }
    free(v->keys);
    free(v->gen);
    v->keys = keys;
    v->gen = gen;
    v->mask = cap - 1;
    return 0;
}


/* 1 if key was already there this step */
static int
visit(pda *p, uint64_t key)
{
    visit_set *v = &p->vs;
    uint32_t   h = (uint32_t) ((key * 0x9E3779B97F4A7C15ull) >> 40) & v->mask;

    while (v->gen[h] == v->cur) {
        if (v->keys[h] == key) {
            return 1;
        }
        h = (h + 1) & v->mask;
    }
    v->keys[h] = key;
    v->gen[h] = v->cur;
    if (++v->used * 2 > v->mask + 1 && vs_grow(v) != 0) {
        p->overflow = 1;
    }
    return 0;
}


static void
vs_next(pda *p)
{
    visit_set *v = &p->vs;

    v->used = 0;
    if (++v->cur == 0) {
        memset(v->gen, 0, (v->mask + 1) * sizeof(uint32_t));
        v->cur = 1;
    }
}


int
ts_reserve(thread_set *s, int32_t n)
{
    if (n > s->cap) {
        int32_t cap = s->cap ? s->cap : 8;
        int32_t *t;
        while (cap < n) {
            cap *= 2;
        }
        t = realloc(s->tops, cap * sizeof(int32_t));
        if (t == NULL) {
            return -1;
        }
        s->tops = t;
        s->cap = cap;
    }
    return 0;
}


void
ts_free(thread_set *s)
{
    free(s->tops);
    memset(s, 0, sizeof(*s));
}


/* Work items are (state, parent) pairs to expand through their closures. */
typedef struct {
    int32_t  *v;
    int32_t   n, cap;
} work;


static void
run(pda *p, work *w, thread_set *out)
{
    const srt_grammar *g = p->g;
    int32_t            s, parent, i, x, q, n2;

    while (w->n && !p->overflow) {
        w->n -= 2;
        s = w->v[w->n];
        parent = w->v[w->n + 1];
        if (visit(p, (uint64_t) (uint32_t) s << 33 | (uint64_t) (uint32_t) parent << 1)) {
            continue;
        }
        for (i = g->clo_off[s]; i < g->clo_off[s + 1]; i++) {
            x = g->clo[i];
            if (x == CLO_FINAL) {
                if (parent == NODE_ROOT) {
                    out->accept = 1;
                    continue;
                }
                if (parent == NODE_SENT) {
                    out->uncertain = 1;
                    continue;
                }
                q = p->nt.state[parent];
                n2 = p->nt.parent[parent];
            } else if (g->st[x].kind == ST_BYTE) {
                if (visit(p, (uint64_t) (uint32_t) x << 33 | (uint64_t) (uint32_t) parent << 1
                             | 1))
                {
                    continue;
                }
                q = pda_node(p, x, parent);
                if (q < 0 || ts_reserve(out, out->n + 1) != 0) {
                    p->overflow = 1;
                    return;
                }
                out->tops[out->n++] = q;
                continue;
            } else {                                    /* a call */
                q = g->rule_start[g->st[x].a];
                n2 = g->tail[g->st[x].b] ? parent : pda_node(p, g->st[x].b, parent);
                if (n2 < 0) {
                    return;
                }
            }
            if (w->n + 2 > w->cap) {
                int32_t cap = w->cap ? w->cap * 2 : 64;
                int32_t *v = realloc(w->v, cap * sizeof(int32_t));
                if (v == NULL) {
                    p->overflow = 1;
                    return;
                }
                w->v = v;
                w->cap = cap;
            }
            w->v[w->n++] = q;
            w->v[w->n++] = n2;
        }
    }
}


/* per-thread scratch: matchers run on several threads (workers' helper threads, tests) */
static __thread work  tls_work;


/* A thread that stepped automata and now exits (srt_grammar_precompute's helpers) frees its
 * scratch: thread-local storage is not freed with the thread. */
void
pda_thread_done(void)
{
    free(tls_work.v);
    memset(&tls_work, 0, sizeof(tls_work));
}


void
pda_start(pda *p, int32_t state, int32_t parent, thread_set *out)
{
    work *w = &tls_work;

    out->n = 0;
    out->accept = out->uncertain = 0;
    vs_next(p);
    w->n = 0;
    if (w->cap < 2) {
        w->v = malloc(64 * sizeof(int32_t));
        if (w->v == NULL) {
            p->overflow = 1;
            return;
        }
        w->cap = 64;
    }
    w->v[w->n++] = state;
    w->v[w->n++] = parent;
    run(p, w, out);
}


void
pda_advance(pda *p, const thread_set *in, unsigned byte, thread_set *out)
{
    const srt_grammar *g = p->g;
    int32_t            i, t, s;
    work              *wp = &tls_work;
#define w (*wp)

    out->n = 0;
    out->accept = out->uncertain = 0;
    if (in->n == 1) {
        /* one thread stepping into a closure of BYTE states (most steps of a mask walk): its
           threads are those states over the same frame, distinct by construction */
        t = in->tops[0];
        s = p->nt.state[t];
        if (!byteset_has(g, g->st[s].set, byte)) {
            return;
        }
        s = g->st[s].a;
        if (g->simple[s]) {
            int32_t parent = p->nt.parent[t], q;
            if (ts_reserve(out, g->clo_off[s + 1] - g->clo_off[s]) != 0) {
                p->overflow = 1;
                return;
            }
            for (i = g->clo_off[s]; i < g->clo_off[s + 1]; i++) {
                if ((q = pda_node(p, g->clo[i], parent)) < 0) {
                    p->overflow = 1;
                    return;
                }
                out->tops[out->n++] = q;
            }
            return;
        }
    }
    vs_next(p);
    w.n = 0;
    for (i = 0; i < in->n; i++) {
        t = in->tops[i];
        s = p->nt.state[t];
        if (!byteset_has(g, g->st[s].set, byte)) {
            continue;
        }
        if (w.n + 2 > w.cap) {
            int32_t cap = w.cap ? w.cap * 2 : 64;
            int32_t *v = realloc(w.v, cap * sizeof(int32_t));
            if (v == NULL) {
                p->overflow = 1;
                return;
            }
            w.v = v;
            w.cap = cap;
        }
        w.v[w.n++] = g->st[s].a;
        w.v[w.n++] = p->nt.parent[t];
    }
    run(p, wp, out);
#undef w
}
