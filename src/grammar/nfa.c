/*
 * Syntax tree -> byte automaton.
 *
 * Each rule becomes a Thompson automaton over bytes (classes of code points become the UTF-8 byte
 * sequences that spell them, so a token may end inside a character). A reference to a rule that
 * is not recursive is compiled in place, so the whole non-recursive part of a grammar (all of a
 * typical JSON Schema) is one automaton whose states carry their full context: that is what makes
 * most tokens decidable from the state alone (see mask.c). References inside recursive rules stay
 * calls, which push a frame; a call whose return state can only return again pushes nothing
 * (right recursion runs in constant stack). Left recursion would push forever and is refused.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

#define MAX_STATES   (4 << 20)
#define INLINE_LIMIT 4096       /* states: a shared rule larger than this stays a call */


typedef struct {
    srt_grammar  *g;
    ast_grammar  *ag;
    srt_err      *err;
    int          *recursive;    /* per rule: on a cycle of references */
    long         *size;         /* per rule: states when compiled in place, -1 unknown */
    int          *refs;         /* per rule: references to it */
    int           failed;
} nfa_ctx;


static int32_t
new_state(nfa_ctx *c, int kind, int32_t a, int32_t b, int32_t set)
{
    srt_grammar *g = c->g;
    nfa_state   *s;

    if (c->failed) {
        return -1;
    }
    if (g->n_st == g->cap_st) {
        int32_t cap = g->cap_st ? g->cap_st * 2 : 256;
        if (cap > MAX_STATES) {
            srt_err_set(c->err, "grammar: too large (over %d automaton states)", MAX_STATES);
            c->failed = 1;
            return -1;
        }
        s = realloc(g->st, cap * sizeof(*s));
        if (s == NULL) {
            srt_err_set(c->err, "grammar: out of memory");
            c->failed = 1;
            return -1;
        }
        g->st = s;
        g->cap_st = cap;
    }
    s = &g->st[g->n_st];
    s->kind = (uint8_t) kind;
    s->a = a;
    s->b = b;
    s->set = set;
    return g->n_st++;
}


static int32_t
new_set(nfa_ctx *c, const uint64_t w[4])
{
    srt_grammar *g = c->g;
    uint64_t    *s;

    if (c->failed) {
        return -1;
    }
    if (g->n_sets == g->cap_sets) {
        int32_t cap = g->cap_sets ? g->cap_sets * 2 : 64;
        s = realloc(g->sets, (size_t) cap * 4 * sizeof(uint64_t));
        if (s == NULL) {
            srt_err_set(c->err, "grammar: out of memory");
            c->failed = 1;
            return -1;
        }
        g->sets = s;
        g->cap_sets = cap;
    }
    memcpy(&g->sets[(size_t) g->n_sets * 4], w, 4 * sizeof(uint64_t));
    return g->n_sets++;
}


static int32_t
byte_state(nfa_ctx *c, unsigned lo, unsigned hi, int32_t next)
{
    uint64_t w[4] = { 0, 0, 0, 0 };
    unsigned b;

    for (b = lo; b <= hi; b++) {
        w[b >> 6] |= 1ull << (b & 63);
    }
    return new_state(c, ST_BYTE, next, -1, new_set(c, w));
}


static int32_t
split(nfa_ctx *c, int32_t a, int32_t b)
{
    return new_state(c, ST_SPLIT, a, b, -1);
}


/* ---- code point ranges -> UTF-8 byte sequences ---- */

static int
utf8_len(uint32_t c)
{
    return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}


static void
utf8_enc(uint32_t c, uint8_t *o)
{
    switch (utf8_len(c)) {
    case 1: o[0] = (uint8_t) c; break;
    case 2: o[0] = (uint8_t) (0xC0 | (c >> 6)); o[1] = (uint8_t) (0x80 | (c & 0x3F)); break;
    case 3: o[0] = (uint8_t) (0xE0 | (c >> 12)); o[1] = (uint8_t) (0x80 | ((c >> 6) & 0x3F));
            o[2] = (uint8_t) (0x80 | (c & 0x3F)); break;
    default: o[0] = (uint8_t) (0xF0 | (c >> 18)); o[1] = (uint8_t) (0x80 | ((c >> 12) & 0x3F));
            o[2] = (uint8_t) (0x80 | ((c >> 6) & 0x3F)); o[3] = (uint8_t) (0x80 | (c & 0x3F));
    }
}


typedef struct {
    nfa_ctx  *c;
    int32_t   next;
    int32_t   alts[64];     /* starts of the byte sequences, joined by splits at the end */
    int       n;
    uint64_t  ascii[4];
} cls_build;


static void
add_alt(cls_build *cb, int32_t s)
{
    if (cb->n == 64) {                      /* fold what we have into one */
        int32_t j = cb->alts[cb->n - 1];
        int     i;
        for (i = cb->n - 2; i >= 0; i--) {
            j = split(cb->c, cb->alts[i], j);
        }
        cb->alts[0] = j;
        cb->n = 1;
    }
    cb->alts[cb->n++] = s;
}


/* lo..hi have the same UTF-8 length and differ only in a suffix of whole 6-bit groups. */
static void
seq_range(cls_build *cb, uint32_t lo, uint32_t hi)
{
    uint8_t  a[4], b[4];
    int      n = utf8_len(lo), i;
    int32_t  s = cb->next;

    utf8_enc(lo, a);
    utf8_enc(hi, b);
    if (n == 1) {
        unsigned x;
        for (x = a[0]; x <= b[0]; x++) {
            cb->ascii[x >> 6] |= 1ull << (x & 63);
        }
        return;
    }
    for (i = n - 1; i >= 0; i--) {
        s = byte_state(cb->c, a[i], b[i], s);
    }
    add_alt(cb, s);
}


static void
split_range(cls_build *cb, uint32_t lo, uint32_t hi)
{
    static const uint32_t bound[] = { 0x7F, 0x7FF, 0xFFFF };
    int      i, n;
    uint32_t m;

    if (lo > hi) {
        return;
    }
    /* surrogates have no UTF-8 form */
    if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo < 0xD800) {
            split_range(cb, lo, 0xD7FF);
        }
        if (hi > 0xDFFF) {
            split_range(cb, 0xE000, hi);
        }
        return;
    }
    for (i = 0; i < 3; i++) {
        if (lo <= bound[i] && hi > bound[i]) {
            split_range(cb, lo, bound[i]);
            split_range(cb, bound[i] + 1, hi);
            return;
        }
    }
    n = utf8_len(lo);
    for (i = 1; i < n; i++) {
        m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                split_range(cb, lo, lo | m);
                split_range(cb, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                split_range(cb, lo, (hi & ~m) - 1);
                split_range(cb, hi & ~m, hi);
                return;
            }
        }
    }
    seq_range(cb, lo, hi);
}


static int32_t
build_class(nfa_ctx *c, const ast *a, int32_t next)
{
    cls_build  cb;
    int        i;
    int32_t    s;

    memset(&cb, 0, sizeof(cb));
    cb.c = c;
    cb.next = next;
    for (i = 0; i < a->n_ranges; i++) {
        split_range(&cb, a->ranges[2 * i], a->ranges[2 * i + 1]);
    }
    if (cb.ascii[0] | cb.ascii[1] | cb.ascii[2] | cb.ascii[3]) {
        add_alt(&cb, new_state(c, ST_BYTE, next, -1, new_set(c, cb.ascii)));
    }
    if (cb.n == 0) {                        /* an empty class matches nothing */
        uint64_t none[4] = { 0, 0, 0, 0 };
        return new_state(c, ST_BYTE, next, -1, new_set(c, none));
    }
    s = cb.alts[cb.n - 1];
    for (i = cb.n - 2; i >= 0; i--) {
        s = split(c, cb.alts[i], s);
    }
    return s;
}


/* ---- the tree ---- */

static int32_t build(nfa_ctx *c, const ast *a, int32_t next, int depth);


static int
inline_ref(nfa_ctx *c, int rule)
{
    return !c->recursive[rule] && (c->size[rule] <= INLINE_LIMIT || c->refs[rule] <= 1);
}


static int32_t
build(nfa_ctx *c, const ast *a, int32_t next, int depth)
{
    int32_t  s, loop;
    int      i;

    if (c->failed) {
        return -1;
    }
    if (depth > 1000) {
        srt_err_set(c->err, "grammar: nested too deeply");
        c->failed = 1;
        return -1;
    }

    switch (a->kind) {
    case AST_EMPTY:
        return next;

    case AST_BYTES:
        s = next;
        for (i = (int) a->len - 1; i >= 0; i--) {
            s = byte_state(c, (uint8_t) a->str[i], (uint8_t) a->str[i], s);
        }
        return s;

    case AST_CLASS:
        return build_class(c, a, next);

    case AST_SEQ:
        s = next;
        for (i = a->n_kids - 1; i >= 0; i--) {
            s = build(c, a->kids[i], s, depth + 1);
        }
        return s;

    case AST_ALT:
        if (a->n_kids == 0) {
            return next;
        }
        s = build(c, a->kids[a->n_kids - 1], next, depth + 1);
        for (i = a->n_kids - 2; i >= 0; i--) {
            s = split(c, build(c, a->kids[i], next, depth + 1), s);
        }
        return s;

    case AST_REPEAT:
        s = next;
        if (a->max < 0) {
            loop = split(c, -1, next);
            if (loop < 0) {
                return -1;
            }
            s = build(c, a->kids[0], loop, depth + 1);    /* may move g->st */
            if (s < 0) {
                return -1;
            }
            c->g->st[loop].a = s;
            s = loop;
        } else {
            /* (x (x (x)?)?)? : optional copies nest, so there is one way to match each count */
            for (i = 0; i < a->max - a->min; i++) {
                s = split(c, build(c, a->kids[0], s, depth + 1), next);
            }
        }
        for (i = 0; i < a->min; i++) {
            s = build(c, a->kids[0], s, depth + 1);
        }
        return s;

    case AST_REF:
        if (inline_ref(c, a->ref)) {
            return build(c, c->ag->rules[a->ref].body, next, depth + 1);
        }
        return new_state(c, ST_CALL, a->ref, next, -1);
    }
    return -1;
}


/* ---- rule analysis: recursion, sizes ---- */

static void
collect_refs(const ast *a, int *out, int *n, int cap)
{
    int i;

    if (a->kind == AST_REF) {
        if (*n < cap) {
            out[(*n)++] = a->ref;
        }
        return;
    }
    for (i = 0; i < a->n_kids; i++) {
        collect_refs(a->kids[i], out, n, cap);
    }
}


static void
count_refs(nfa_ctx *c, const ast *a)
{
    int i;

    if (a->kind == AST_REF) {
        c->refs[a->ref]++;
    }
    for (i = 0; i < a->n_kids; i++) {
        count_refs(c, a->kids[i]);
    }
}


/* can rule `from` reach rule `to` through references? */
static int
reaches(nfa_ctx *c, int from, int to, uint8_t *seen)
{
    int  buf[4096], n = 0, i;

    collect_refs(c->ag->rules[from].body, buf, &n, 4096);
    for (i = 0; i < n; i++) {
        if (buf[i] == to) {
            return 1;
        }
        if (!seen[buf[i]]) {
            seen[buf[i]] = 1;
            if (reaches(c, buf[i], to, seen)) {
                return 1;
            }
        }
    }
    return 0;
}


static long
est_size(nfa_ctx *c, const ast *a, int depth)
{
    long s = 0, k;
    int  i;

    if (depth > 1000) {
        return 1L << 40;
    }
    switch (a->kind) {
    case AST_EMPTY: return 0;
    case AST_BYTES: return (long) a->len;
    case AST_CLASS: return 4L * a->n_ranges + 4;
    case AST_REF:
        if (c->recursive[a->ref]) {
            return 1;
        }
        if (c->size[a->ref] < 0) {
            c->size[a->ref] = est_size(c, c->ag->rules[a->ref].body, depth + 1);
        }
        return c->size[a->ref] <= INLINE_LIMIT || c->refs[a->ref] <= 1 ? c->size[a->ref] : 1;
    case AST_REPEAT:
        k = est_size(c, a->kids[0], depth + 1);
        return k * (a->max < 0 ? (a->min + 1) : a->max) + a->max + 1;
    default:
        for (i = 0; i < a->n_kids; i++) {
            s += est_size(c, a->kids[i], depth + 1) + 1;
            if (s > (1L << 40)) {
                return s;
            }
        }
        return s;
    }
}


/* ---- closures ---- */

typedef struct {
    int32_t  *v;
    size_t    n, cap;
} ivec;


static int
ivec_push(ivec *v, int32_t x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 1024;
        int32_t *p = realloc(v->v, cap * sizeof(*p));
        if (p == NULL) {
            return -1;
        }
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}


static int
closure_of(srt_grammar *g, int32_t s, uint32_t *seen, uint32_t stamp, ivec *out, int32_t *stack)
{
    int      sp = 0, has_final = 0;
    int32_t  x;

    stack[sp++] = s;
    while (sp) {
        x = stack[--sp];
        if (x < 0 || seen[x] == stamp) {
            continue;
        }
        seen[x] = stamp;
        switch (g->st[x].kind) {
        case ST_SPLIT:
            /* b first so that a is explored first: keeps alternative order */
            stack[sp++] = g->st[x].b;
            stack[sp++] = g->st[x].a;
            break;
        case ST_FINAL:
            has_final = 1;
            break;
        default:
            if (ivec_push(out, x) != 0) {
                return -1;
            }
        }
    }
    if (has_final && ivec_push(out, CLO_FINAL) != 0) {
        return -1;
    }
    return 0;
}


static int
compute_closures(srt_grammar *g, srt_err *err)
{
    uint8_t   *entry;
    uint32_t  *seen;
    int32_t   *stack, s, r;
    ivec       clo = { 0 };
    int        rc = -1;

    entry = calloc(g->n_st, 1);
    seen = calloc(g->n_st, sizeof(uint32_t));
    stack = malloc((size_t) g->n_st * 2 * sizeof(int32_t) + 16);
    g->clo_off = calloc((size_t) g->n_st + 1, sizeof(int32_t));
    g->tail = calloc(g->n_st, 1);
    g->simple = calloc(g->n_st, 1);
    if (!entry || !seen || !stack || !g->clo_off || !g->tail || !g->simple) {
        goto done;
    }
    /* closures are needed where matching (re)enters the automaton */
    for (s = 0; s < g->n_st; s++) {
        if (g->st[s].kind == ST_BYTE) {
            entry[g->st[s].a] = 1;
        } else if (g->st[s].kind == ST_CALL) {
            entry[g->st[s].b] = 1;
        }
    }
    for (r = 0; r < g->n_rules; r++) {
        if (g->rule_start[r] >= 0) {
            entry[g->rule_start[r]] = 1;
        }
    }
    entry[g->root_start] = 1;

    for (s = 0; s < g->n_st; s++) {
        g->clo_off[s] = (int32_t) clo.n;
        if (entry[s]) {
            size_t before = clo.n;
            if (closure_of(g, s, seen, (uint32_t) s + 1, &clo, stack) != 0) {
                goto done;
            }
            g->tail[s] = clo.n - before == 1 && clo.v[before] == CLO_FINAL;
            g->simple[s] = 1;
            for (size_t k = before; k < clo.n; k++) {
                if (clo.v[k] == CLO_FINAL || g->st[clo.v[k]].kind != ST_BYTE) {
                    g->simple[s] = 0;
                }
            }
        }
        if (clo.n > (size_t) INT32_MAX / 2) {
            srt_err_set(err, "grammar: too large");
            goto done;
        }
    }
    g->clo_off[g->n_st] = (int32_t) clo.n;
    g->clo = clo.v ? clo.v : malloc(sizeof(int32_t));
    clo.v = NULL;
    rc = g->clo ? 0 : -1;

done:
    if (rc != 0 && err->msg[0] == '\0') {
        srt_err_set(err, "grammar: out of memory");
    }
    free(clo.v);
    free(entry);
    free(seen);
    free(stack);
    return rc;
}


/* Whether matching from state s can leave its rule without consuming a byte. */
static int
can_finish(srt_grammar *g, int32_t s, const uint8_t *nullable, uint8_t *seen)
{
    int32_t i, x;

    if (seen[s]) {
        return 0;
    }
    seen[s] = 1;
    for (i = g->clo_off[s]; i < g->clo_off[s + 1]; i++) {
        x = g->clo[i];
        if (x == CLO_FINAL) {
            return 1;
        }
        if (g->st[x].kind == ST_CALL && nullable[g->st[x].a]
            && can_finish(g, g->st[x].b, nullable, seen))
        {
            return 1;
        }
    }
    return 0;
}


/* Rules called at s before any byte is consumed: left-call edges. */
static void
left_calls(srt_grammar *g, int32_t s, const uint8_t *nullable, uint8_t *seen, uint8_t *out)
{
    int32_t i, x;

    if (seen[s]) {
        return;
    }
    seen[s] = 1;
    for (i = g->clo_off[s]; i < g->clo_off[s + 1]; i++) {
        x = g->clo[i];
        if (x != CLO_FINAL && g->st[x].kind == ST_CALL) {
            out[g->st[x].a] = 1;
            if (nullable[g->st[x].a]) {
                left_calls(g, g->st[x].b, nullable, seen, out);
            }
        }
    }
}


static int
check_left_recursion(srt_grammar *g, ast_grammar *ag, srt_err *err)
{
    uint8_t  *nullable, *seen, *edges, *reach;
    int       r, q, k, changed, rc = -1;
    int       n = g->n_rules;

    nullable = calloc(n, 1);
    seen = calloc(g->n_st, 1);
    edges = calloc((size_t) n * n, 1);
    reach = calloc((size_t) n * n, 1);
    if (!nullable || !seen || !edges || !reach) {
        srt_err_set(err, "grammar: out of memory");
        goto done;
    }
    do {
        changed = 0;
        for (r = 0; r < n; r++) {
            if (g->rule_start[r] < 0 || nullable[r]) {
                continue;
            }
            memset(seen, 0, g->n_st);
            if (can_finish(g, g->rule_start[r], nullable, seen)) {
                nullable[r] = 1;
                changed = 1;
            }
        }
    } while (changed);

    for (r = 0; r < n; r++) {
        if (g->rule_start[r] >= 0) {
            memset(seen, 0, g->n_st);
            left_calls(g, g->rule_start[r], nullable, seen, edges + (size_t) r * n);
        }
    }
    /* transitive closure; rule counts of called rules are small */
    memcpy(reach, edges, (size_t) n * n);
    for (k = 0; k < n; k++) {
        for (r = 0; r < n; r++) {
            if (reach[(size_t) r * n + k]) {
                for (q = 0; q < n; q++) {
                    reach[(size_t) r * n + q] |= reach[(size_t) k * n + q];
                }
            }
        }
    }
    for (r = 0; r < n; r++) {
        if (reach[(size_t) r * n + r]) {
            srt_err_set(err, "grammar: rule '%s' is left-recursive (it can reach itself "
                        "before matching any character)", ag->rules[r].name);
            goto done;
        }
    }
    rc = 0;

done:
    free(nullable);
    free(seen);
    free(edges);
    free(reach);
    return rc;
}


int
nfa_compile(ast_grammar *ag, srt_grammar *g, srt_err *err)
{
    nfa_ctx   c;
    uint8_t  *seen;
    int       r, i, rc = -1, progress;
    int32_t   fin;

    memset(&c, 0, sizeof(c));
    c.g = g;
    c.ag = ag;
    c.err = err;
    c.recursive = calloc(ag->n_rules, sizeof(int));
    c.size = malloc(ag->n_rules * sizeof(long));
    c.refs = calloc(ag->n_rules, sizeof(int));
    seen = calloc(ag->n_rules, 1);
    g->n_rules = ag->n_rules;
    g->rule_start = malloc(ag->n_rules * sizeof(int32_t));
    if (!c.recursive || !c.size || !c.refs || !seen || !g->rule_start) {
        srt_err_set(err, "grammar: out of memory");
        goto done;
    }
    for (r = 0; r < ag->n_rules; r++) {
        memset(seen, 0, ag->n_rules);
        c.recursive[r] = reaches(&c, r, r, seen);
        c.size[r] = -1;
        g->rule_start[r] = -1;
        count_refs(&c, ag->rules[r].body);
    }
    for (r = 0; r < ag->n_rules; r++) {
        if (c.size[r] < 0 && !c.recursive[r]) {
            c.size[r] = est_size(&c, ag->rules[r].body, 0);
        }
    }

    /* the root, then every rule something calls, until none is left */
    fin = new_state(&c, ST_FINAL, -1, -1, -1);
    g->root_start = build(&c, ag->rules[ag->root].body, fin, 0);
    g->rule_start[ag->root] = g->root_start;
    g->root_end = g->n_st;
    do {
        progress = 0;
        for (i = 0; i < g->n_st && !c.failed; i++) {
            if (g->st[i].kind == ST_CALL && g->rule_start[g->st[i].a] < 0) {
                r = g->st[i].a;
                fin = new_state(&c, ST_FINAL, -1, -1, -1);
                g->rule_start[r] = -2;          /* building */
                g->rule_start[r] = build(&c, ag->rules[r].body, fin, 0);
                progress = 1;
            }
        }
    } while (progress && !c.failed);

    for (i = 0; i < g->n_st; i++) {
        if (g->st[i].kind == ST_CALL && g->st[i].a == ag->root) {
            g->root_called = 1;
        }
    }
    if (c.failed || compute_closures(g, err) != 0 || check_left_recursion(g, ag, err) != 0) {
        goto done;
    }
    rc = 0;

done:
    free(c.recursive);
    free(c.size);
    free(c.refs);
    free(seen);
    return rc;
}
