#define _GNU_SOURCE  /* qsort_r */
/*
 * Token masks: the vocabulary's byte trie and the per-state token cache.
 *
 * For a BYTE state s, walking the trie from a thread on s over an unknown frame (NODE_SENT) splits
 * the vocabulary three ways: tokens consumed entirely without leaving s's frame are accepted
 * whatever lies below; tokens that die without leaving it are rejected whatever lies below; the
 * rest left the frame on the way and depend on it ("uncertain"). Non-recursive rules are compiled
 * in place (nfa.c), so for JSON schemas the frame is the whole document and uncertain tokens are
 * few (those that run past the end of a recursive value). A step's mask is then the union of the
 * cached accepted sets of its threads plus a byte-by-byte check of their uncertain tokens only:
 * xgrammar's adaptive token mask cache, over a byte automaton. The walk prunes whole subtrees
 * of the trie as soon as a prefix dies, and a path that left the frame goes on only on a byte
 * that may follow the frame's rule (grammar_follow, equiv.c): the rest are rejected here, not
 * checked per step. States whose caches are necessarily equal share one (equiv.c).
 */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grammar/grammar_internal.h"
#include "srt/tokenizer.h"


/* ---- vocabulary ---- */

static int
cmp_tok(const void *x, const void *y, void *arg)
{
    const srt_grammar_vocab *v = arg;
    int32_t a = *(const int32_t *) x, b = *(const int32_t *) y;
    uint32_t la = v->lens[a], lb = v->lens[b];
    int c = memcmp(v->bytes[a], v->bytes[b], la < lb ? la : lb);

    if (c) {
        return c;
    }
    if (la != lb) {
        return la < lb ? -1 : 1;
    }
    return a < b ? -1 : a > b;
}


static int
build_trie(srt_grammar_vocab *v)
{
    size_t    cap, k, d, l, depth = 0;
    int32_t  *path, prev = -1, t;

    cap = 1024;
    v->t_byte = malloc(cap);
    v->t_end = malloc(cap * sizeof(int32_t));
    v->t_tok_begin = malloc(cap * sizeof(int32_t));
    v->t_tok_end = malloc(cap * sizeof(int32_t));
    v->t_n_term = malloc(cap * sizeof(int32_t));
    path = malloc(((size_t) v->max_len + 2) * sizeof(int32_t));
    if (!v->t_byte || !v->t_end || !v->t_tok_begin || !v->t_tok_end || !v->t_n_term || !path) {
        free(path);
        return -1;
    }
    v->n_nodes = 1;
    v->t_byte[0] = 0;
    v->t_tok_begin[0] = 0;
    v->t_n_term[0] = 0;
    path[0] = 0;

    for (k = 0; k <= v->n_sorted; k++) {
        t = k < v->n_sorted ? v->sorted[k] : -1;
        l = 0;
        if (t >= 0 && prev >= 0) {
            uint32_t m = v->lens[t] < v->lens[prev] ? v->lens[t] : v->lens[prev];
            while (l < m && v->bytes[t][l] == v->bytes[prev][l]) {
                l++;
            }
        }
        /* close the nodes below the common prefix */
        while (depth > l) {
            v->t_end[path[depth]] = (int32_t) v->n_nodes;
            v->t_tok_end[path[depth]] = (int32_t) k;
            depth--;
        }
        if (t < 0) {
            break;
        }
        for (d = l + 1; d <= v->lens[t]; d++) {
            if (v->n_nodes == cap) {
                cap *= 2;
                uint8_t *nb = realloc(v->t_byte, cap);
                if (nb == NULL) { free(path); return -1; }
                v->t_byte = nb;
#define GROW(f) do { int32_t *q = realloc(f, cap * sizeof(int32_t)); \
                     if (q == NULL) { free(path); return -1; } f = q; } while (0)
                GROW(v->t_end);
                GROW(v->t_tok_begin);
                GROW(v->t_tok_end);
                GROW(v->t_n_term);
#undef GROW
            }
            v->t_byte[v->n_nodes] = (uint8_t) v->bytes[t][d - 1];
            v->t_tok_begin[v->n_nodes] = (int32_t) k;
            v->t_n_term[v->n_nodes] = 0;
            path[d] = (int32_t) v->n_nodes++;
        }
        depth = v->lens[t];
        v->t_n_term[path[depth]]++;
        prev = t;
    }
    v->t_end[0] = (int32_t) v->n_nodes;
    v->t_tok_end[0] = (int32_t) v->n_sorted;
    free(path);
    return 0;
}


int
srt_grammar_vocab_new(size_t n_ids, const char *const *bytes, const size_t *lens,
                      const uint8_t *special, const int32_t *stop_ids, size_t n_stop,
                      srt_grammar_vocab **out, srt_err *err)
{
    srt_grammar_vocab *v;
    size_t             i;

    *out = NULL;
    if (n_ids == 0 || n_ids > (1u << 24)) {
        srt_err_set(err, "grammar vocab: %zu tokens", n_ids);
        return SRT_ERROR;
    }
    v = calloc(1, sizeof(*v));
    if (v == NULL) {
        goto oom;
    }
    v->n_ids = n_ids;
    v->words = (n_ids + 31) / 32;
    v->bytes = calloc(n_ids, sizeof(uint8_t *));
    v->lens = calloc(n_ids, sizeof(uint32_t));
    v->sorted = malloc(n_ids * sizeof(int32_t));
    v->stop = malloc((n_stop ? n_stop : 1) * sizeof(int32_t));
    if (!v->bytes || !v->lens || !v->sorted || !v->stop) {
        goto oom;
    }
    for (i = 0; i < n_stop; i++) {
        if (stop_ids[i] >= 0 && (size_t) stop_ids[i] < n_ids) {
            v->stop[v->n_stop++] = stop_ids[i];
        }
    }
    for (i = 0; i < n_ids; i++) {
        if (bytes[i] == NULL || lens[i] == 0 || (special && special[i])) {
            continue;
        }
        v->bytes[i] = malloc(lens[i]);
        if (v->bytes[i] == NULL) {
            goto oom;
        }
        memcpy(v->bytes[i], bytes[i], lens[i]);
        v->lens[i] = (uint32_t) lens[i];
        if (v->lens[i] > v->max_len) {
            v->max_len = v->lens[i];
        }
        v->sorted[v->n_sorted++] = (int32_t) i;
    }
    qsort_r(v->sorted, v->n_sorted, sizeof(int32_t), cmp_tok, v);
    if (build_trie(v) != 0) {
        goto oom;
    }
    *out = v;
    return SRT_OK;

oom:
    srt_grammar_vocab_free(v);
    srt_err_set(err, "grammar vocab: out of memory");
    return SRT_ERROR;
}


int
srt_grammar_vocab_from_tokenizer(const struct srt_tokenizer *tok, size_t n_ids,
                                 const int32_t *extra_stop, size_t n_extra,
                                 srt_grammar_vocab **out, srt_err *err)
{
    size_t        n_tok = srt_tokenizer_vocab_size(tok), i, n_stop = 0;
    const char  **bytes;
    size_t       *lens;
    uint8_t      *special;
    int32_t      *stop;
    int           rc;

    if (n_ids == 0) {
        n_ids = n_tok;
    }
    bytes = calloc(n_ids, sizeof(char *));
    lens = calloc(n_ids, sizeof(size_t));
    special = calloc(n_ids, 1);
    stop = malloc((n_extra + 1) * sizeof(int32_t));
    if (!bytes || !lens || !special || !stop) {
        free(bytes); free(lens); free(special); free(stop);
        srt_err_set(err, "grammar vocab: out of memory");
        return SRT_ERROR;
    }
    for (i = 0; i < n_ids && i < n_tok; i++) {
        special[i] = (uint8_t) srt_tokenizer_is_special(tok, (int32_t) i);
        bytes[i] = srt_tokenizer_token_bytes(tok, (int32_t) i, &lens[i]);
    }
    if (srt_tokenizer_eos_id(tok) >= 0) {
        stop[n_stop++] = srt_tokenizer_eos_id(tok);
    }
    for (i = 0; i < n_extra; i++) {
        stop[n_stop++] = extra_stop[i];
    }
    rc = srt_grammar_vocab_new(n_ids, bytes, lens, special, stop, n_stop, out, err);
    free(bytes);
    free(lens);
    free(special);
    free(stop);
    return rc;
}


void
srt_grammar_vocab_free(srt_grammar_vocab *v)
{
    size_t i;

    if (v == NULL) {
        return;
    }
    if (v->bytes) {
        for (i = 0; i < v->n_ids; i++) {
            free(v->bytes[i]);
        }
    }
    free(v->bytes);
    free(v->lens);
    free(v->stop);
    free(v->sorted);
    free(v->t_byte);
    free(v->t_end);
    free(v->t_tok_begin);
    free(v->t_tok_end);
    free(v->t_n_term);
    free(v);
}


size_t
srt_grammar_vocab_size(const srt_grammar_vocab *v)
{
    return v->n_ids;
}


size_t
srt_grammar_mask_words(const srt_grammar_vocab *v)
{
    return v->words;
}


/* ---- the per-state cache ---- */

void
state_cache_free(state_cache *sc)
{
    if (sc != NULL) {
        free(sc->acc_bits);
        free(sc->acc);
        free(sc->unc);
        free(sc);
    }
}

/* A walk determinizes as it goes: the thread sets it meets are interned (threads sorted, with
 * the accept and uncertain flags) and each set's step on a byte is computed once, so a trie node
 * costs a table look-up where the same set recurs (inside a string, at every depth, for most of
 * the vocabulary). Rows of transitions are kept for the first WALK_ROWS sets; later sets step
 * afresh each time (same result, no memory bound to exceed). */
#define WALK_ROWS 4096
#define SET_ACCEPT    1
#define SET_UNCERTAIN 2

typedef struct {
    const srt_grammar_vocab *v;
    pda                      p;
    vtab                     sets;     /* [flags, thread node ids ascending] */
    int32_t                 *row_of;   /* per set: its row in rows, -1 none */
    int32_t                  cap_row_of;
    int32_t                 *rows;     /* 256 next sets per row, -1 not computed yet */
    int32_t                  n_rows;
    thread_set               in, out;
    uint64_t                *vec;
    size_t                   cap_vec;
    int32_t                 *lv;       /* the set at each depth */
    const uint64_t          *follow;   /* bytes that may follow a return out of the frame, NULL:
                                          any (grammar_follow) */
    int32_t                 *acc, *unc;
    size_t                   n_acc, n_unc;
    int                      oom;
} walk;


static int
cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *) x, b = *(const int32_t *) y;
    return a < b ? -1 : a > b;
}


static int
cmp_u64_walk(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *) x, b = *(const uint64_t *) y;
    return a < b ? -1 : a > b;
}


static int32_t
walk_intern(walk *w, const thread_set *ts)
{
    int32_t i, id;

    if ((size_t) ts->n + 1 > w->cap_vec) {
        size_t    cap = ((size_t) ts->n + 1) * 2;
        uint64_t *v = realloc(w->vec, cap * sizeof(uint64_t));
        if (v == NULL) {
            return -1;
        }
        w->vec = v;
        w->cap_vec = cap;
    }
    w->vec[0] = (uint64_t) ((ts->accept ? SET_ACCEPT : 0) | (ts->uncertain ? SET_UNCERTAIN : 0));
    for (i = 0; i < ts->n; i++) {
        w->vec[i + 1] = (uint64_t) (uint32_t) ts->tops[i];
    }
    /* a set's threads in any order are the same set */
    if (ts->n > 1) {
        qsort(&w->vec[1], (size_t) ts->n, sizeof(uint64_t), cmp_u64_walk);
    }
    id = vtab_intern(&w->sets, w->vec, (uint32_t) ts->n + 1);
    if (id >= w->cap_row_of) {
        int32_t  cap = w->cap_row_of ? w->cap_row_of * 2 : 256;
        int32_t *r = realloc(w->row_of, (size_t) cap * sizeof(int32_t));
        if (r == NULL) {
            return -1;
        }
        memset(r + w->cap_row_of, 0xff, (size_t) (cap - w->cap_row_of) * sizeof(int32_t));
        w->row_of = r;
        w->cap_row_of = cap;
    }
    return id;
}


static int32_t
walk_step(walk *w, int32_t from, unsigned byte)
{
    const uint64_t *v;
    int32_t         r = w->row_of[from], to, i, n;

    if (r >= 0 && (to = w->rows[(size_t) r * 256 + byte]) >= 0) {
        return to;
    }
    v = &w->sets.pool[w->sets.off[from]];
    n = (int32_t) w->sets.len[from] - 1;
    if (ts_reserve(&w->in, n) != 0) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        w->in.tops[i] = (int32_t) v[i + 1];
    }
    w->in.n = n;
    pda_advance(&w->p, &w->in, byte, &w->out);
    if (w->p.overflow || (to = walk_intern(w, &w->out)) < 0) {
        return -1;
    }
    if (r < 0 && w->n_rows < WALK_ROWS) {
        int32_t *rows = realloc(w->rows, ((size_t) w->n_rows + 1) * 256 * sizeof(int32_t));
        if (rows == NULL) {
            return -1;
        }
        w->rows = rows;
        r = w->row_of[from] = w->n_rows++;
        memset(&w->rows[(size_t) r * 256], 0xff, 256 * sizeof(int32_t));
    }
    if (r >= 0) {
        w->rows[(size_t) r * 256 + byte] = to;
    }
    return to;
}


static void
add_range(walk *w, int32_t **list, size_t *n, int32_t from, int32_t to)
{
    int32_t i;

    for (i = from; i < to; i++) {
        (*list)[(*n)++] = w->v->sorted[i];
    }
}


static inline int
may_follow(const walk *w, unsigned byte)
{
    return w->follow == NULL || (int) ((w->follow[byte >> 6] >> (byte & 63)) & 1);
}


/* unc: a path that left the frame before node's byte may still be alive; popped: one left it on
 * node's byte (it goes on only on a byte that may follow the frame's rule). */
static void
dfs(walk *w, int32_t node, uint32_t depth, int unc, int popped)
{
    const srt_grammar_vocab *v = w->v;
    int32_t                  c, d, o, flags, from;
    int                      u;

    for (c = node + 1; c < v->t_end[node]; c = v->t_end[c]) {
        u = unc || (popped && may_follow(w, v->t_byte[c]));
        o = walk_step(w, w->lv[depth], v->t_byte[c]);
        if (o < 0) {
            w->oom = 1;
            return;
        }
        flags = (int32_t) w->sets.pool[w->sets.off[o]];
        if (w->sets.len[o] > 1) {
            add_range(w, &w->acc, &w->n_acc, v->t_tok_begin[c],
                      v->t_tok_begin[c] + v->t_n_term[c]);
            if (v->t_end[c] > c + 1) {
                w->lv[depth + 1] = o;
                dfs(w, c, depth + 1, u, flags & SET_UNCERTAIN);
                if (w->oom) {
                    return;
                }
            }
            continue;
        }
        /* no thread left in the frame. A token that ends exactly as its path leaves the frame
           is accepted: the frame below is a valid place to stand (or, below the root, the
           grammar's end); longer ones depend on the frame (or, below the root, are rejected) */
        from = v->t_tok_begin[c];
        if (flags) {
            add_range(w, &w->acc, &w->n_acc, from, from + v->t_n_term[c]);
            from += v->t_n_term[c];
        }
        if (u) {
            add_range(w, &w->unc, &w->n_unc, from, v->t_tok_end[c]);
        } else if (flags & SET_UNCERTAIN) {
            for (d = c + 1; d < v->t_end[c]; d = v->t_end[d]) {
                if (may_follow(w, v->t_byte[d])) {
                    add_range(w, &w->unc, &w->n_unc, v->t_tok_begin[d], v->t_tok_end[d]);
                }
            }
        }
    }
}


static state_cache *
compute_cache(const srt_grammar *g, int32_t state, int root)
{
    const srt_grammar_vocab *v = g->vocab;
    walk                     w;
    state_cache             *sc = NULL;
    size_t                   i;
    int32_t                  top;

    memset(&w, 0, sizeof(w));
    w.v = v;
    w.lv = malloc(((size_t) v->max_len + 2) * sizeof(int32_t));
    w.acc = malloc((v->n_sorted + 1) * sizeof(int32_t));
    w.unc = malloc((v->n_sorted + 1) * sizeof(int32_t));
    if (!w.lv || !w.acc || !w.unc || vtab_init(&w.sets, 256) != 0 || pda_init(&w.p, g) != 0) {
        goto done;
    }
    top = pda_node(&w.p, state, root ? NODE_ROOT : NODE_SENT);
    if (top < 0 || ts_reserve(&w.out, 1) != 0) {
        goto done;
    }
    w.out.tops[0] = top;
    w.out.n = 1;
    w.out.accept = w.out.uncertain = 0;
    if ((w.lv[0] = walk_intern(&w, &w.out)) < 0) {
        goto done;
    }
    if (!root && g->follow && g->owner[state] >= 0) {
        w.follow = &g->follow[(size_t) g->owner[state] * 4];
    }
    dfs(&w, 0, 0, 0, 0);
    if (w.oom) {
        goto done;
    }
    sc = calloc(1, sizeof(*sc));
    if (sc == NULL) {
        goto done;
    }
    sc->n_acc = (int32_t) w.n_acc;
    if (w.n_acc * 32 > v->n_ids) {
        sc->acc_bits = calloc(v->words, sizeof(uint32_t));
        if (sc->acc_bits == NULL) {
            free(sc);
            sc = NULL;
            goto done;
        }
        for (i = 0; i < w.n_acc; i++) {
            sc->acc_bits[w.acc[i] >> 5] |= 1u << (w.acc[i] & 31);
        }
    } else {
        sc->acc = realloc(w.acc, (w.n_acc + 1) * sizeof(int32_t));
        if (sc->acc == NULL) {
            free(sc);
            sc = NULL;
            goto done;
        }
        w.acc = NULL;
    }
    /* id order: checks then touch the mask front to back */
    qsort(w.unc, w.n_unc, sizeof(int32_t), cmp_i32);
    sc->unc = realloc(w.unc, (w.n_unc + 1) * sizeof(int32_t));
    if (sc->unc == NULL) {
        free(sc->acc_bits);
        free(sc->acc);
        free(sc);
        sc = NULL;
        goto done;
    }
    w.unc = NULL;
    sc->n_unc = (int32_t) w.n_unc;

done:
    free(w.lv);
    free(w.acc);
    free(w.unc);
    free(w.vec);
    free(w.row_of);
    free(w.rows);
    ts_free(&w.in);
    ts_free(&w.out);
    vtab_free(&w.sets);
    pda_free(&w.p);
    return sc;
}


/* NULL only when out of memory: callers then fall back to checking every token (matcher.c).
 * root: the thread's frame sits on the root (a thread of the root rule, or reached from it by
 * tail calls): then nothing is uncertain, since what lies below is known to be the end. */
/* Per state, the state whose cache it shares (equiv.c), computed once on first need; NULL (out
 * of memory) leaves every state its own. */
static const int32_t *
grammar_rep(srt_grammar *g)
{
    int32_t *rep;

    if (__atomic_load_n(&g->rep_tried, __ATOMIC_ACQUIRE)) {
        return g->rep;
    }
    pthread_mutex_lock(&g->lock);
    if (!g->rep_tried) {
        grammar_follow(g);          /* out of memory: no lookahead, fewer tokens decided */
        if (grammar_equiv(g, g->vocab->max_len, &rep) == 0) {
            g->rep = rep;
        }
        __atomic_store_n(&g->rep_tried, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g->lock);
    return g->rep;
}


const state_cache *
grammar_state_cache(srt_grammar *g, int32_t state, int root)
{
    const int32_t *rep = grammar_rep(g);
    state_cache   *sc;
    size_t         k = (size_t) (rep ? rep[state] : state) * 2 + (root ? 1 : 0);

    sc = __atomic_load_n(&g->cache[k], __ATOMIC_ACQUIRE);
    if (sc) {
        return sc;
    }
    pthread_mutex_lock(&g->lock);
    sc = g->cache[k];
    if (sc == NULL) {
        sc = compute_cache(g, (int32_t) (k / 2), root);
        __atomic_store_n(&g->cache[k], sc, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g->lock);
    return sc;
}


/* Every state a thread can stand on, with the frame it will have: states of the root rule
 * over the root, states of called rules over a caller (the rest fill on first use), one walk per
 * class of equivalent states (equiv.c). The walks are independent, over immutable data, so up to
 * PRECOMPUTE_THREADS threads share them (as xgrammar's compiler does): each computes outside the
 * lock and publishes under it. A thread takes PRECOMPUTE_PER_THREAD walks at least: determinized
 * walks are short (a fraction of a millisecond to a few), and on a loaded machine a new thread
 * waits for a CPU longer than a few walks take (regexes and small grammars compiled 2-10x slower
 * with 2 threads than with 1 at load ~16 on 2 CPUs). */
#define PRECOMPUTE_THREADS    8
#define PRECOMPUTE_PER_THREAD 16

typedef struct {
    srt_grammar *g;
    int32_t     *keys;     /* cache slots to fill: 2 state + root */
    int32_t      n;
    int32_t      next;     /* atomic */
} precompute_job;


static void *
precompute_worker(void *arg)
{
    precompute_job *j = arg;
    srt_grammar    *g = j->g;
    state_cache    *sc;
    int32_t         i, k;

    while ((i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n) {
        k = j->keys[i];
        if (__atomic_load_n(&g->cache[k], __ATOMIC_ACQUIRE) != NULL) {
            continue;
        }
        sc = compute_cache(g, k / 2, k & 1);
        if (sc == NULL) {
            continue;       /* out of memory: that state fills on first use, or falls back */
        }
        pthread_mutex_lock(&g->lock);
        if (g->cache[k] == NULL) {
            __atomic_store_n(&g->cache[k], sc, __ATOMIC_RELEASE);
            sc = NULL;
        }
        pthread_mutex_unlock(&g->lock);
        state_cache_free(sc);
    }
    return NULL;
}


static void *
precompute_thread(void *arg)
{
    precompute_worker(arg);
    pda_thread_done();
    return NULL;
}


void
srt_grammar_precompute(srt_grammar *g)
{
    int32_t         s, i, k;
    const int32_t  *rep = grammar_rep(g);
    uint8_t        *live = calloc(g->n_st, 1);
    uint8_t        *want = calloc((size_t) g->n_st * 2, 1);
    precompute_job  j = { g, NULL, 0, 0 };
    pthread_t       th[PRECOMPUTE_THREADS];
    long            n_cpu = sysconf(_SC_NPROCESSORS_ONLN);
    int             n_th, started = 0, t;

    j.keys = malloc((size_t) g->n_st * 2 * sizeof(int32_t));
    if (live == NULL || want == NULL || j.keys == NULL) {
        free(live);
        free(want);
        free(j.keys);
        return;
    }
    for (s = 0; s < g->n_st; s++) {
        for (i = g->clo_off[s]; i < g->clo_off[s + 1]; i++) {
            if (g->clo[i] != CLO_FINAL && g->st[g->clo[i]].kind == ST_BYTE) {
                live[g->clo[i]] = 1;
            }
        }
    }
    for (s = 0; s < g->n_st; s++) {
        if (!live[s]) {
            continue;
        }
        k = rep ? rep[s] : s;
        if (s < g->root_end) {
            want[k * 2 + 1] = 1;
        }
        if (s >= g->root_end || g->root_called) {
            want[k * 2] = 1;
        }
    }
    for (k = 0; k < g->n_st * 2; k++) {
        if (want[k]) {
            j.keys[j.n++] = k;
        }
    }
    n_th = n_cpu < 1 ? 1 : n_cpu > PRECOMPUTE_THREADS ? PRECOMPUTE_THREADS : (int) n_cpu;
    if (n_th > j.n / PRECOMPUTE_PER_THREAD) {
        n_th = j.n / PRECOMPUTE_PER_THREAD > 1 ? j.n / PRECOMPUTE_PER_THREAD : 1;
    }
    for (t = 1; t < n_th; t++) {
        if (pthread_create(&th[started], NULL, precompute_thread, &j) == 0) {
            started++;
        }
    }
    precompute_worker(&j);
    for (t = 0; t < started; t++) {
        pthread_join(th[t], NULL);
    }
    free(live);
    free(want);
    free(j.keys);
}
