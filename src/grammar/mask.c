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
 * of the trie as soon as a prefix dies.
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

typedef struct {
    const srt_grammar_vocab *v;
    pda                      p;
    thread_set              *lv;       /* one per depth */
    int32_t                 *acc, *unc;
    size_t                   n_acc, n_unc;
    int                      oom;
} walk;


static void
add_range(walk *w, int32_t **list, size_t *n, int32_t from, int32_t to)
{
    int32_t i;

    for (i = from; i < to; i++) {
        (*list)[(*n)++] = w->v->sorted[i];
    }
}


static void
dfs(walk *w, int32_t node, uint32_t depth, int unc)
{
    const srt_grammar_vocab *v = w->v;
    thread_set              *in = &w->lv[depth], *out = &w->lv[depth + 1];
    int32_t                  c;
    int                      u;

    for (c = node + 1; c < v->t_end[node]; c = v->t_end[c]) {
        pda_advance(&w->p, in, v->t_byte[c], out);
        if (w->p.overflow) {
            w->oom = 1;
            return;
        }
        u = unc || out->uncertain;
        if (out->n == 0) {
            /* a token that ends exactly as its path leaves the frame is accepted: the frame
               below is a valid place to stand (or, below the root, the grammar's end);
               longer ones depend on the frame (or, below the root, are rejected) */
            int32_t from = v->t_tok_begin[c];
            if (out->uncertain || out->accept) {
                add_range(w, &w->acc, &w->n_acc, from, from + v->t_n_term[c]);
                from += v->t_n_term[c];
            }
            if (u) {
                add_range(w, &w->unc, &w->n_unc, from, v->t_tok_end[c]);
            }
            continue;
        }
        add_range(w, &w->acc, &w->n_acc, v->t_tok_begin[c], v->t_tok_begin[c] + v->t_n_term[c]);
        if (v->t_end[c] > c + 1) {
            dfs(w, c, depth + 1, u);
            if (w->oom) {
                return;
            }
        }
    }
}


static int
cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *) x, b = *(const int32_t *) y;
    return a < b ? -1 : a > b;
}


static state_cache *
compute_cache(const srt_grammar *g, int32_t state, int root)
{
    const srt_grammar_vocab *v = g->vocab;
    walk                     w;
    state_cache             *sc = NULL;
    uint32_t                 d;
    size_t                   i;
    int32_t                  top;

    memset(&w, 0, sizeof(w));
    w.v = v;
    w.lv = calloc((size_t) v->max_len + 2, sizeof(thread_set));
    w.acc = malloc((v->n_sorted + 1) * sizeof(int32_t));
    w.unc = malloc((v->n_sorted + 1) * sizeof(int32_t));
    if (!w.lv || !w.acc || !w.unc || pda_init(&w.p, g) != 0) {
        goto done;
    }
    top = pda_node(&w.p, state, root ? NODE_ROOT : NODE_SENT);
    if (top < 0 || ts_reserve(&w.lv[0], 1) != 0) {
        goto done;
    }
    w.lv[0].tops[0] = top;
    w.lv[0].n = 1;
    dfs(&w, 0, 0, 0);
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
    if (w.lv) {
        for (d = 0; d < v->max_len + 2; d++) {
            ts_free(&w.lv[d]);
        }
    }
    free(w.lv);
    free(w.acc);
    free(w.unc);
    pda_free(&w.p);
    return sc;
}


/* NULL only when out of memory: callers then fall back to checking every token (matcher.c).
 * root: the thread's frame sits on the root (a thread of the root rule, or reached from it by
 * tail calls): then nothing is uncertain, since what lies below is known to be the end. */
const state_cache *
grammar_state_cache(srt_grammar *g, int32_t state, int root)
{
    state_cache *sc;
    size_t       k = (size_t) state * 2 + (root ? 1 : 0);

    sc = __atomic_load_n(&g->cache[k], __ATOMIC_ACQUIRE);
    if (sc) {
        return sc;
    }
    pthread_mutex_lock(&g->lock);
    sc = g->cache[k];
    if (sc == NULL) {
        sc = compute_cache(g, state, root);
        __atomic_store_n(&g->cache[k], sc, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g->lock);
    return sc;
}


/* Every state a thread can stand on, with the frame it will have: states of the root rule
 * over the root, states of called rules over a caller (the rest fill on first use). The states
 * are independent walks over immutable data, so up to PRECOMPUTE_THREADS threads share them
 * (as xgrammar's compiler does): each computes outside the lock and publishes under it. */
#define PRECOMPUTE_THREADS 8

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


void
srt_grammar_precompute(srt_grammar *g)
{
    int32_t         s, i;
    uint8_t        *live = calloc(g->n_st, 1);
    precompute_job  j = { g, NULL, 0, 0 };
    pthread_t       th[PRECOMPUTE_THREADS];
    long            n_cpu = sysconf(_SC_NPROCESSORS_ONLN);
    int             n_th, started = 0, t;

    j.keys = malloc((size_t) g->n_st * 2 * sizeof(int32_t));
    if (live == NULL || j.keys == NULL) {
        free(live);
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
        if (s < g->root_end) {
            j.keys[j.n++] = s * 2 + 1;
        }
        if (s >= g->root_end || g->root_called) {
            j.keys[j.n++] = s * 2;
        }
    }
    n_th = n_cpu < 1 ? 1 : n_cpu > PRECOMPUTE_THREADS ? PRECOMPUTE_THREADS : (int) n_cpu;
    if (n_th > j.n) {
        n_th = j.n;
    }
    for (t = 1; t < n_th; t++) {
        if (pthread_create(&th[started], NULL, precompute_worker, &j) == 0) {
            started++;
        }
    }
    precompute_worker(&j);
    for (t = 0; t < started; t++) {
        pthread_join(th[t], NULL);
    }
    free(live);
    free(j.keys);
}
