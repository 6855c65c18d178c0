/*
 * Compiled grammars and matchers: the public API over the automaton (nfa.c), its step (pda.c) and
 * the token cache (mask.c).
 *
 * A matcher keeps one thread set per accepted token, so rolling back (stop strings, retract,
 * speculative continuations) is popping sets; frames are shared between them and never freed
 * before the matcher is.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

#define TERMINATED 2        /* thread_set.accept of the set after a stop token */


struct srt_grammar_matcher {
    srt_grammar  *g;
    pda           p;
    thread_set   *hist;
    size_t        n_hist, cap_hist;
    thread_set    tmp[2];
};


int
grammar_finish(srt_grammar *g, const srt_grammar_vocab *v, ast_grammar *ag, srt_grammar **out,
               srt_err *err)
{
    g->refs = 1;
    g->vocab = v;
    pthread_mutex_init(&g->lock, NULL);
    if (nfa_compile(ag, g, err) != 0) {
        ast_grammar_free(ag);
        srt_grammar_free(g);
        return SRT_ERROR;
    }
    ast_grammar_free(ag);
    g->cache = calloc((size_t) g->n_st * 2, sizeof(state_cache *));
    if (g->cache == NULL) {
        srt_err_set(err, "grammar: out of memory");
        srt_grammar_free(g);
        return SRT_ERROR;
    }
    *out = g;
    return SRT_OK;
}


int
srt_grammar_compile_gbnf(const srt_grammar_vocab *v, const char *text, size_t len,
                         srt_grammar **out, srt_err *err)
{
    ast_grammar  ag;
    srt_grammar *g;

    *out = NULL;
    err->msg[0] = '\0';
    if (gbnf_parse(text, len, &ag, err) != 0) {
        return SRT_ERROR;
    }
    g = calloc(1, sizeof(*g));
    if (g == NULL) {
        ast_grammar_free(&ag);
        srt_err_set(err, "grammar: out of memory");
        return SRT_ERROR;
    }
    return grammar_finish(g, v, &ag, out, err);
}


int
srt_grammar_compile_regex(const srt_grammar_vocab *v, const char *re, size_t len,
                          srt_grammar **out, srt_err *err)
{
    char *gbnf;
    int   rc;

    *out = NULL;
    if (srt_grammar_regex_to_gbnf(re, len, &gbnf, err) != SRT_OK) {
        return SRT_ERROR;
    }
    rc = srt_grammar_compile_gbnf(v, gbnf, strlen(gbnf), out, err);
    free(gbnf);
    return rc;
}


int
srt_grammar_compile_json_schema(const srt_grammar_vocab *v, const char *schema, size_t len,
                                const srt_grammar_json_opts *opts, srt_grammar **out,
                                srt_err *err)
{
    char *gbnf;
    int   rc;

    *out = NULL;
    if (srt_grammar_json_schema_to_gbnf(schema, len, opts, &gbnf, err) != SRT_OK) {
        return SRT_ERROR;
    }
    rc = srt_grammar_compile_gbnf(v, gbnf, strlen(gbnf), out, err);
    if (rc != SRT_OK) {
        char msg[sizeof(err->msg)];
        memcpy(msg, err->msg, sizeof(msg));
        srt_err_set(err, "json_schema: %s", msg);
    }
    free(gbnf);
    return rc;
}


int
srt_grammar_compile_json_object(const srt_grammar_vocab *v, const srt_grammar_json_opts *opts,
                                srt_grammar **out, srt_err *err)
{
    static const char schema[] = "{\"type\": \"object\"}";

    return srt_grammar_compile_json_schema(v, schema, sizeof(schema) - 1, opts, out, err);
}


srt_grammar *
srt_grammar_ref(srt_grammar *g)
{
    __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}


void
srt_grammar_free(srt_grammar *g)
{
    int32_t s;

    if (g == NULL || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) > 0) {
        return;
    }
    if (g->cache) {
        for (s = 0; s < g->n_st * 2; s++) {
            state_cache_free(g->cache[s]);
        }
    }
    pthread_mutex_destroy(&g->lock);
    free(g->cache);
    free(g->st);
    free(g->sets);
    free(g->rule_start);
    free(g->clo_off);
    free(g->clo);
    free(g->tail);
    free(g->simple);
    free(g);
}


/* ---- matchers ---- */

static int
ts_copy(thread_set *dst, const thread_set *src)
{
    if (ts_reserve(dst, src->n) != 0) {
        return -1;
    }
    if (src->n > 0) {           /* an empty set may have no array: memcpy(NULL, ...) is UB */
        memcpy(dst->tops, src->tops, src->n * sizeof(int32_t));
    }
    dst->n = src->n;
    dst->accept = src->accept;
    dst->uncertain = 0;
    return 0;
}


static int
push(srt_grammar_matcher *m, const thread_set *s)
{
    if (m->n_hist == m->cap_hist) {
        size_t cap = m->cap_hist ? m->cap_hist * 2 : 64;
        thread_set *h = realloc(m->hist, cap * sizeof(*h));
        if (h == NULL) {
            return -1;
        }
        memset(h + m->cap_hist, 0, (cap - m->cap_hist) * sizeof(*h));
        m->hist = h;
        m->cap_hist = cap;
    }
    if (ts_copy(&m->hist[m->n_hist], s) != 0) {
        return -1;
    }
    m->n_hist++;
    return 0;
}


srt_grammar_matcher *
srt_grammar_matcher_new(srt_grammar *g)
{
    srt_grammar_matcher *m = calloc(1, sizeof(*m));

    if (m == NULL) {
        return NULL;
    }
    if (pda_init(&m->p, g) != 0) {
        free(m);
        return NULL;
    }
    m->g = srt_grammar_ref(g);
    pda_start(&m->p, g->root_start, NODE_ROOT, &m->tmp[0]);
    if (m->p.overflow || push(m, &m->tmp[0]) != 0) {
        srt_grammar_matcher_free(m);
        return NULL;
    }
    return m;
}


void
srt_grammar_matcher_free(srt_grammar_matcher *m)
{
    size_t i;

    if (m == NULL) {
        return;
    }
    for (i = 0; i < m->cap_hist; i++) {
        ts_free(&m->hist[i]);
    }
    free(m->hist);
    ts_free(&m->tmp[0]);
    ts_free(&m->tmp[1]);
    pda_free(&m->p);
    srt_grammar_free(m->g);
    free(m);
}


static const thread_set *
cur(const srt_grammar_matcher *m)
{
    return &m->hist[m->n_hist - 1];
}


/* Runs bytes from `from`; the result is in m->tmp[k], k returned, -1 when it dies. */
static int
run_bytes(srt_grammar_matcher *m, const thread_set *from, const uint8_t *b, size_t len)
{
    const thread_set *in = from;
    size_t            i;
    int               k = 0;

    for (i = 0; i < len; i++) {
        pda_advance(&m->p, in, b[i], &m->tmp[k]);
        if (m->p.overflow) {
            m->p.overflow = 0;
            return -1;
        }
        if (m->tmp[k].n == 0 && !(i + 1 == len && m->tmp[k].accept)) {
            return -1;
        }
        in = &m->tmp[k];
        k ^= 1;
    }
    return len ? k ^ 1 : -1;
}


int
srt_grammar_matcher_accept_bytes(srt_grammar_matcher *m, const char *bytes, size_t len)
{
    int32_t mark = m->p.nt.n;
    int     k;

    if (cur(m)->accept == TERMINATED || len == 0) {
        return 0;
    }
    k = run_bytes(m, cur(m), (const uint8_t *) bytes, len);
    if (k < 0 || push(m, &m->tmp[k]) != 0) {
        pda_truncate(&m->p, mark);
        return 0;
    }
    return 1;
}


static int
is_stop(const srt_grammar_vocab *v, int32_t id)
{
    size_t i;

    for (i = 0; i < v->n_stop; i++) {
        if (v->stop[i] == id) {
            return 1;
        }
    }
    return 0;
}


int
srt_grammar_matcher_accept_token(srt_grammar_matcher *m, int32_t id)
{
    const srt_grammar_vocab *v = m->g->vocab;
    thread_set               end = { NULL, 0, 0, TERMINATED, 0 };

    if (id < 0 || (size_t) id >= v->n_ids || cur(m)->accept == TERMINATED) {
        return 0;
    }
    if (is_stop(v, id)) {
        if (!cur(m)->accept) {
            return 0;
        }
        return push(m, &end) == 0;
    }
    if (v->bytes[id] == NULL) {
        return 0;
    }
    return srt_grammar_matcher_accept_bytes(m, (const char *) v->bytes[id], v->lens[id]);
}


/* Whether token id may follow thread `top` (a full-context check). */
static int
check_token(srt_grammar_matcher *m, int32_t top, int32_t id)
{
    const srt_grammar_vocab *v = m->g->vocab;
    thread_set               one;
    int32_t                  mark = m->p.nt.n;
    int                      ok;

    one.tops = &top;
    one.n = 1;
    one.cap = 1;
    one.accept = one.uncertain = 0;
    ok = run_bytes(m, &one, v->bytes[id], v->lens[id]) >= 0;
    pda_truncate(&m->p, mark);
    return ok;
}


void
srt_grammar_matcher_fill_mask(srt_grammar_matcher *m, uint32_t *mask)
{
    const srt_grammar_vocab *v = m->g->vocab;
    const thread_set        *s = cur(m);
    const state_cache       *sc;
    int32_t                  i, j, t, id;
    size_t                   w, k;

    memset(mask, 0, v->words * sizeof(uint32_t));
    if (s->accept == TERMINATED) {
        return;
    }
    for (i = 0; i < s->n; i++) {
        sc = grammar_state_cache(m->g, m->p.nt.state[s->tops[i]],
                                 m->p.nt.parent[s->tops[i]] == NODE_ROOT);
        if (sc == NULL) {
            /* out of memory for the cache: check every token the slow way */
            for (k = 0; k < v->n_sorted; k++) {
                id = v->sorted[k];
                if (!(mask[id >> 5] >> (id & 31) & 1) && check_token(m, s->tops[i], id)) {
                    mask[id >> 5] |= 1u << (id & 31);
                }
            }
            continue;
        }
        if (sc->acc_bits) {
            for (w = 0; w < v->words; w++) {
                mask[w] |= sc->acc_bits[w];
            }
        } else {
            for (j = 0; j < sc->n_acc; j++) {
                mask[sc->acc[j] >> 5] |= 1u << (sc->acc[j] & 31);
            }
        }
    }
    for (i = 0; i < s->n; i++) {
        t = s->tops[i];
        sc = grammar_state_cache(m->g, m->p.nt.state[t], m->p.nt.parent[t] == NODE_ROOT);
        if (sc == NULL) {
            continue;
        }
        for (j = 0; j < sc->n_unc; j++) {
            id = sc->unc[j];
            if (!(mask[id >> 5] >> (id & 31) & 1) && check_token(m, t, id)) {
                mask[id >> 5] |= 1u << (id & 31);
            }
        }
    }
    if (s->accept) {
        for (k = 0; k < v->n_stop; k++) {
            mask[v->stop[k] >> 5] |= 1u << (v->stop[k] & 31);
        }
    }
}


size_t
srt_grammar_matcher_mask_words(const srt_grammar_matcher *m)
{
    return m->g->vocab->words;
}


void
srt_grammar_matcher_rollback(srt_grammar_matcher *m, size_t n)
{
    if (n >= m->n_hist) {
        n = m->n_hist - 1;
    }
    m->n_hist -= n;
}


int
srt_grammar_matcher_can_end(const srt_grammar_matcher *m)
{
    return cur(m)->accept == 1;
}


int
srt_grammar_matcher_is_terminated(const srt_grammar_matcher *m)
{
    return cur(m)->accept == TERMINATED;
}


size_t
srt_grammar_matcher_forced_bytes(srt_grammar_matcher *m, char *buf, size_t cap)
{
    const srt_grammar *g = m->g;
    const thread_set  *s = cur(m);
    int32_t            mark = m->p.nt.n, i;
    uint64_t           u[4];
    size_t             n = 0;
    int                c, w, only;
    thread_set         a = { NULL, 0, 0, 0, 0 }, b = { NULL, 0, 0, 0, 0 }, *in, *out;

    if (s->accept || s->n == 0 || ts_copy(&a, s) != 0) {
        return 0;
    }
    in = &a;
    out = &b;
    while (n < cap) {
        u[0] = u[1] = u[2] = u[3] = 0;
        for (i = 0; i < in->n; i++) {
            const uint64_t *set = &g->sets[(size_t) g->st[m->p.nt.state[in->tops[i]]].set * 4];
            for (w = 0; w < 4; w++) {
                u[w] |= set[w];
            }
        }
        only = -1;
        for (c = 0; c < 256; c++) {
            if (u[c >> 6] >> (c & 63) & 1) {
                if (only >= 0) {
                    only = -2;
                    break;
                }
                only = c;
            }
        }
        if (only < 0) {
            break;
        }
        pda_advance(&m->p, in, (unsigned) only, out);
        if (m->p.overflow || out->n == 0) {
            m->p.overflow = 0;
            if (out->accept) {
                buf[n++] = (char) only;
            }
            break;
        }
        buf[n++] = (char) only;
        if (out->accept) {
            break;
        }
        {
            thread_set *t = in;
            in = out;
            out = t;
        }
    }
    ts_free(&a);
    ts_free(&b);
    pda_truncate(&m->p, mark);
    return n;
}
